//! The versions of a custom resource and the conversion handlers' steps between them: the
//! shortest chain of steps from one version to another, and the check that every served
//! version leads to every other one (else some reads would fail in the API server).

use serde_json::Value;
use std::collections::{BTreeSet, VecDeque};

/// A CustomResourceDefinition as conversions see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crd {
    /// `plural.group`.
    pub name: String,
    /// The API group.
    pub group: String,
    /// The objects' kind.
    pub kind: String,
    /// All its versions, in its own order.
    pub versions: Vec<String>,
    /// Those of them that the API server serves.
    pub served: Vec<String>,
    /// The one its objects are stored in.
    pub storage: Option<String>,
}

impl Crd {
    /// From the CRD object as the API server has it; none if it is not one.
    pub fn from_object(object: &Value) -> Option<Self> {
        let spec = object.get("spec")?;
        let group = spec.get("group")?.as_str()?.to_owned();
        let plural = spec.pointer("/names/plural")?.as_str()?;
        let kind = spec.pointer("/names/kind")?.as_str()?.to_owned();
        let listed = spec.get("versions")?.as_array()?;
        let name_of = |v: &Value| v.get("name").and_then(Value::as_str).map(str::to_owned);
        let flag = |v: &Value, key: &str| v.get(key).and_then(Value::as_bool).unwrap_or(false);
        Some(Self {
            name: format!("{plural}.{group}"),
            group,
            kind,
            versions: listed.iter().filter_map(name_of).collect(),
            served: (listed.iter().filter(|v| flag(v, "served")))
                .filter_map(name_of)
                .collect(),
            storage: (listed.iter().find(|v| flag(v, "storage"))).and_then(name_of),
        })
    }
}

/// One declared step: from a version to another, by a handler (its position and id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The version it converts from.
    pub source: String,
    /// The version it converts to.
    pub target: String,
    /// The handler's position in the Python side's registry.
    pub handler: usize,
    /// The handler's id.
    pub id: String,
}

/// The shortest chain of steps from one version to another (the handlers' positions, in
/// order; empty for the same version), or none if no chain leads there. Of chains as short,
/// the one of the earliest declared steps.
pub fn path(steps: &[Step], from: &str, to: &str) -> Option<Vec<usize>> {
    if from == to {
        return Some(vec![]);
    }
    // Breadth first; each version is reached once, by the first step that reaches it.
    let mut reached: Vec<(&str, Option<(usize, usize)>)> = vec![(from, None)]; // (version, (via step, from entry))
    let mut queue = VecDeque::from([0]);
    while let Some(at) = queue.pop_front() {
        let version = reached[at].0;
        for (index, step) in steps.iter().enumerate() {
            if step.source != version || reached.iter().any(|(v, _)| *v == step.target) {
                continue;
            }
            reached.push((&step.target, Some((index, at))));
            if step.target == to {
                let mut chain = vec![];
                let mut entry = reached.len() - 1;
                while let (_, Some((step, previous))) = reached[entry] {
                    chain.push(steps[step].handler);
                    entry = previous;
                }
                chain.reverse();
                return Some(chain);
            }
            queue.push_back(reached.len() - 1);
        }
    }
    None
}

/// Whether the steps serve the CRD: every version they name is one of its own, and every
/// served version leads to every other one. The error names what is missing.
pub fn check(crd: &Crd, steps: &[Step]) -> Result<(), String> {
    let declared = |step: &Step| format!("{} → {} by {:?}", step.source, step.target, step.id);
    let unknown: BTreeSet<String> = (steps.iter())
        .flat_map(|s| [&s.source, &s.target])
        .filter(|v| !crd.versions.contains(v))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        let unknown: Vec<String> = unknown.into_iter().collect();
        return Err(format!(
            "The conversion handlers of {} name versions that it does not have: {} (its versions: {}).",
            crd.name,
            unknown.join(", "),
            crd.versions.join(", "),
        ));
    }
    let mut missing = vec![];
    for from in &crd.served {
        for to in &crd.served {
            if path(steps, from, to).is_none() {
                missing.push(format!("from {from} to {to}"));
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let declared: Vec<String> = steps.iter().map(declared).collect();
    Err(format!(
        "The conversion handlers of {} lead nowhere {}: every served version ({}) must lead to \
         every other one through @kopf.on.convert steps (declared: {}).",
        crd.name,
        missing.join(", "),
        crd.served.join(", "),
        if declared.is_empty() {
            "none".to_owned()
        } else {
            declared.join("; ")
        },
    ))
}

/// A step of the tests, by a handler named `{source}_to_{target}`.
#[cfg(test)]
pub(crate) fn step(source: &str, target: &str, handler: usize) -> Step {
    Step {
        source: source.into(),
        target: target.into(),
        handler,
        id: format!("{source}_to_{target}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(versions: &[&str], served: &[&str]) -> Crd {
        Crd {
            name: "greetings.demo.kopf.dev".into(),
            group: "demo.kopf.dev".into(),
            kind: "Greeting".into(),
            versions: versions.iter().map(|v| (*v).to_owned()).collect(),
            served: served.iter().map(|v| (*v).to_owned()).collect(),
            storage: Some(versions[0].to_owned()),
        }
    }

    #[test]
    fn chains_are_the_shortest_and_the_earliest_declared() {
        let steps = [
            step("v1", "v2", 0),
            step("v2", "v3", 1),
            step("v3", "v2", 2),
            step("v2", "v1", 3),
            step("v1", "v3", 4),
        ];
        assert_eq!(path(&steps, "v1", "v1"), Some(vec![]));
        assert_eq!(path(&steps, "v1", "v2"), Some(vec![0]));
        assert_eq!(
            path(&steps, "v1", "v3"),
            Some(vec![4]),
            "direct beats two steps"
        );
        assert_eq!(path(&steps, "v3", "v1"), Some(vec![2, 3]));
        assert_eq!(path(&steps, "v2", "v4"), None);
        assert_eq!(path(&steps[..2], "v3", "v1"), None, "no way back");
        // Two chains as short: the earlier declared step leads.
        let steps = [
            step("a", "b", 0),
            step("a", "c", 1),
            step("b", "d", 2),
            step("c", "d", 3),
        ];
        assert_eq!(path(&steps, "a", "d"), Some(vec![0, 2]));
    }

    #[test]
    fn every_served_version_must_lead_to_every_other() {
        let both = [step("v1", "v2", 0), step("v2", "v1", 1)];
        assert_eq!(check(&crd(&["v1", "v2"], &["v1", "v2"]), &both), Ok(()));
        let one = [step("v1", "v2", 0)];
        let error = check(&crd(&["v1", "v2"], &["v1", "v2"]), &one).unwrap_err();
        assert!(error.contains("lead nowhere from v2 to v1"), "{error}");
        assert!(error.contains("v1 → v2 by \"v1_to_v2\""), "{error}");
        // An unserved version needs no way to it.
        assert_eq!(check(&crd(&["v1", "v2"], &["v2"]), &one), Ok(()));
        let error = check(&crd(&["v1", "v2"], &["v1", "v2"]), &[]).unwrap_err();
        assert!(error.contains("declared: none"), "{error}");
        let error = check(&crd(&["v1", "v2"], &["v1"]), &[step("v1", "v9", 0)]).unwrap_err();
        assert!(
            error.contains("versions that it does not have: v9 (its versions: v1, v2)"),
            "{error}"
        );
    }

    #[test]
    fn a_crd_is_read_from_its_object() {
        let object = json!({"spec": {
            "group": "demo.kopf.dev", "names": {"plural": "greetings", "kind": "Greeting"},
            "versions": [{"name": "v1", "served": true, "storage": true},
                         {"name": "v2", "served": true, "storage": false},
                         {"name": "v0", "served": false, "storage": false}]}});
        let crd = Crd::from_object(&object).unwrap();
        assert_eq!(crd.name, "greetings.demo.kopf.dev");
        assert_eq!(crd.versions, ["v1", "v2", "v0"]);
        assert_eq!(crd.served, ["v1", "v2"]);
        assert_eq!(crd.storage.as_deref(), Some("v1"));
        assert_eq!(Crd::from_object(&json!({"kind": "Pod"})), None);
    }
}
