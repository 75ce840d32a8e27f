//! Label selectors as the API server reads them (`?labelSelector=`): requirements joined by
//! commas, each `key`, `!key`, `key=value` (or `==`), `key!=value`, `key in (a,b)` or
//! `key notin (a,b)`.

use serde_json::Value;

/// One requirement on a label.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Exists(String),
    Absent(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed label selector: all of its requirements must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// The selector, or why it cannot be read (the server's 400).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for part in split_outside_parentheses(text) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            requirements.push(requirement(part)?);
        }
        Ok(LabelSelector(requirements))
    }

    /// Whether the object's labels meet every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object);
        let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.0.iter().all(|requirement| match requirement {
            Requirement::Exists(key) => label(key).is_some(),
            Requirement::Absent(key) => label(key).is_none(),
            Requirement::In(key, values) => {
                label(key).is_some_and(|v| values.iter().any(|w| w == v))
            }
            Requirement::NotIn(key, values) => {
                label(key).is_none_or(|v| !values.iter().any(|w| w == v))
            }
        })
    }
}

fn split_outside_parentheses(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (at, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn requirement(part: &str) -> Result<Requirement, String> {
    let key = |k: &str| -> Result<String, String> {
        let k = k.trim();
        let valid = !k.is_empty()
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
        valid
            .then(|| k.to_owned())
            .ok_or_else(|| format!("unable to parse requirement: invalid label key {k:?}"))
    };
    if let Some(rest) = part.strip_prefix('!') {
        return Ok(Requirement::Absent(key(rest)?));
    }
    if let Some((k, v)) = part.split_once("!=") {
        return Ok(Requirement::NotIn(key(k)?, vec![v.trim().to_owned()]));
    }
    if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
        return Ok(Requirement::In(key(k)?, vec![v.trim().to_owned()]));
    }
    for (word, notin) in [(" notin ", true), (" in ", false)] {
        if let Some((k, set)) = part.split_once(word) {
            let set = set.trim();
            let Some(inner) = set.strip_prefix('(').and_then(|s| s.strip_suffix(')')) else {
                return Err(format!(
                    "unable to parse requirement: {part:?}: expected a set in parentheses"
                ));
            };
            let values = inner
                .split(',')
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .collect();
            let key = key(k)?;
            return Ok(if notin {
                Requirement::NotIn(key, values)
            } else {
                Requirement::In(key, values)
            });
        }
    }
    Ok(Requirement::Exists(key(part)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labelled(labels: Value) -> Value {
        json!({"metadata": {"labels": labels}})
    }

    #[test]
    fn each_kind_of_requirement_is_met_as_the_server_meets_it() {
        let object = labelled(json!({"app": "web", "tier": "front"}));
        for (selector, expected) in [
            ("app", true),
            ("!app", false),
            ("!absent", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("absent!=web", true),
            ("app in (web, db)", true),
            ("app notin (web,db)", false),
            ("app=web,tier in (front,back)", true),
            ("app=web,tier=back", false),
            ("", true),
        ] {
            let parsed = LabelSelector::parse(selector).unwrap();
            assert_eq!(parsed.matches(&object), expected, "{selector}");
        }
        assert!(!LabelSelector::parse("app")
            .unwrap()
            .matches(&json!({"metadata": {}})));
    }

    #[test]
    fn what_cannot_be_read_is_refused() {
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("a b=c").is_err());
    }
}
