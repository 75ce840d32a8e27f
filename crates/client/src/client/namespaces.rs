//! Namespace patterns of `-n/--namespace`: plain names, globs (`app-*`), and
//! comma-separated lists with negations (`app-*,!app-test`).

/// Plain names that can be watched directly (no globs, negations or lists).
pub fn specific_namespaces(patterns: &[String]) -> Option<Vec<String>> {
    let specific: Vec<String> = patterns
        .iter()
        .filter(|p| !p.contains(['!', '*', '?', ',']))
        .cloned()
        .collect();
    (specific.len() == patterns.len()).then_some(specific)
}

/// Does the namespace match any of the patterns?
pub fn matches_any(name: &str, patterns: &[String]) -> bool {
    patterns.iter().any(|p| matches(name, p))
}

/// Left to right: the first inclusive glob matches initially (a leading negation
/// implies `*` before it); negations exclude; later inclusive globs re-include only
/// what the first one matched.
pub fn matches(name: &str, pattern: &str) -> bool {
    let mut globs: Vec<&str> = pattern.split(',').map(str::trim).collect();
    if globs.first().is_none_or(|g| g.starts_with('!')) {
        globs.insert(0, "*");
    }
    let first_match = glob_match(name, globs[0]);
    let mut result = first_match;
    for glob in &globs[1..] {
        if let Some(excluded) = glob.strip_prefix('!') {
            result = result && !glob_match(name, excluded.trim_start_matches('!'));
        } else {
            result = result || (first_match && glob_match(name, glob));
        }
    }
    result
}

fn glob_match(name: &str, glob: &str) -> bool {
    glob::Pattern::new(glob).is_ok_and(|p| p.matches(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_as_kopf_documents_them() {
        let p = "myapp-*, !*-pr-*, *pr-123";
        assert!(matches("myapp-test", p));
        assert!(matches("myapp-pr-123", p));
        assert!(!matches("myapp-pr-456", p));
        assert!(!matches("otherapp-pr-123", p));
        let q = "!*-pr-*, *pr-123";
        assert!(matches("anyapp-anything", q));
        assert!(matches("otherapp-pr-123", q));
        assert!(!matches("myapp-pr-456", q));
        assert!(matches("ns1", "ns1"));
        assert!(!matches("ns12", "ns1"));
    }

    #[test]
    fn specific_ones() {
        assert_eq!(
            specific_namespaces(&["a".into(), "b".into()]),
            Some(vec!["a".into(), "b".into()])
        );
        assert_eq!(specific_namespaces(&["a".into(), "b*".into()]), None);
    }
}
