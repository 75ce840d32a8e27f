//! Kubeconfig files as data, for the login handler `login_with_kubeconfig` (in Python, as
//! Kopf's): their YAML read by the parser the API client links anyway, not by PyYAML, whose
//! import weighed on every operator run outside a cluster (docs/benchmarks.md, "Figures
//! behind the code").

use serde_json::Value;

/// A kubeconfig's text as JSON-like values; an empty file is `null`. Errors say where and
/// what, but show none of the text: the parser quotes the lines around the error, and a
/// kubeconfig's lines hold tokens and keys.
pub fn parse(text: &str) -> Result<Value, String> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_saphyr::from_str::<Value>(text).map_err(|e| {
        let message = e.to_string();
        let first = message.lines().next().unwrap_or_default();
        first.strip_prefix("error: ").unwrap_or(first).to_owned()
    })
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
    fn an_empty_file_is_null_and_a_broken_one_says_where_but_not_what_it_holds() {
        assert_eq!(parse("  \n").unwrap(), Value::Null);
        let text = "users:\n- name: a\n  user:\n    token: SECRET-TOKEN\n    x: [unclosed\n";
        let error = parse(text).unwrap_err();
        assert_eq!(error, "line 5 column 8: unclosed bracket '['");
        let error = parse("token: \"SECRET-TOKEN\n").unwrap_err();
        assert!(
            error.starts_with("line ") && !error.contains("SECRET"),
            "{error}"
        );
    }
}
