//! Kubeconfig files as data, for the login handler `login_with_kubeconfig` (in Python, as
//! Kopf's): their YAML read by the parser the API client links anyway, not by PyYAML, whose
//! import was 1.4 MiB of every operator run outside a cluster.

use serde_json::Value;

/// A kubeconfig's text as JSON-like values; an empty file is `null`. Errors say where.
pub fn parse(text: &str) -> Result<Value, String> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_saphyr::from_str::<Value>(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_kubeconfig_reads_as_its_values() {
        let text = "\
apiVersion: v1
kind: Config
current-context: local
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: LS0tLS1CRUdJTg==
    insecure-skip-tls-verify: true
contexts:
- name: local
  context: {cluster: local, user: admin, namespace: default}
users:
- name: admin
  user:
    token: \"0123\"
    client-key: /path/to/key
";
        assert_eq!(
            parse(text).unwrap(),
            json!({
                "apiVersion": "v1", "kind": "Config", "current-context": "local",
                "clusters": [{"name": "local", "cluster": {
                    "server": "https://127.0.0.1:6443",
                    "certificate-authority-data": "LS0tLS1CRUdJTg==",
                    "insecure-skip-tls-verify": true}}],
                "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin", "namespace": "default"}}],
                "users": [{"name": "admin", "user": {"token": "0123", "client-key": "/path/to/key"}}],
            })
        );
    }

    #[test]
    fn an_empty_file_is_null_and_a_broken_one_says_where() {
        assert_eq!(parse("  \n").unwrap(), Value::Null);
        let error = parse("clusters: [\n  - name: x\n").unwrap_err();
        assert!(!error.is_empty());
    }
}
