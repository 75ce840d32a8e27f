//! How Rust integration tests find the local control plane: `checks/cluster up`
//! (idempotent) prints `export KUBECONFIG=...`; the kube client is built from that file.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The path of the test cluster's kubeconfig, starting the cluster on first use.
pub fn kubeconfig() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        // The checkout's path as `cargo test` gives it when running, not as compiled in: a
        // test binary from a shared target directory may have been built in another clone.
        let root = std::env::var_os("CARGO_MANIFEST_DIR")
            .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
        let script = root.join("checks/cluster");
        let out = Command::new(&script)
            .arg("up")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "`cluster up` failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|line| line.strip_prefix("export KUBECONFIG="))
            .map(PathBuf::from)
            .expect("`cluster up` printed no KUBECONFIG line")
    })
    .clone()
}

/// A client authenticated as the cluster's admin, from the kubeconfig alone.
pub async fn client() -> kube::Client {
    let kubeconfig =
        kube::config::Kubeconfig::read_from(kubeconfig()).expect("unreadable kubeconfig");
    let options = kube::config::KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .expect("unusable kubeconfig");
    kube::Client::try_from(config).expect("cannot build a client")
}
