//! Resources as the API serves them (found by discovery), and selectors as
//! handlers name them: plural, kind, singular, short name, category, with or
//! without group and version, or everything.

use serde::{Deserialize, Serialize};

/// One resource kind as served by the API (`kopf.dev/v1/kopfexamples`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Resource {
    /// The API group (empty for the core API).
    pub group: String,
    /// The version.
    pub version: String,
    /// The plural name, as in URLs.
    pub plural: String,
    /// The objects' kind.
    pub kind: String,
    /// The singular name.
    pub singular: String,
    /// The short names (`kex` for `kopfexamples`).
    pub shortcuts: Vec<String>,
    /// The categories it belongs to (`all`, ...).
    pub categories: Vec<String>,
    /// Its subresources (`status`, `scale`, `log`, ...).
    pub subresources: Vec<String>,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
    /// The group's preferred version (selectors without a version match only it).
    pub preferred: bool,
    /// What can be done with it (`list`, `watch`, `patch`, ...).
    pub verbs: Vec<String>,
}

impl Resource {
    /// `group/version`, or `version` for the core API.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural.version.group` as kubectl and Kopf's logs name it.
    pub fn name(&self) -> String {
        if self.group.is_empty() {
            format!("{}.{}", self.plural, self.version)
        } else {
            format!("{}.{}.{}", self.plural, self.version, self.group)
        }
    }

    /// The URL path of a collection or an object (optionally its subresource).
    pub fn url(&self, namespace: Option<&str>, name: Option<&str>, sub: Option<&str>) -> String {
        let mut url = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        if let (true, Some(ns)) = (self.namespaced, namespace) {
            url.push_str(&format!("/namespaces/{ns}"));
        }
        url.push('/');
        url.push_str(&self.plural);
        if let Some(name) = name {
            url.push('/');
            url.push_str(name);
            if let Some(sub) = sub {
                url.push('/');
                url.push_str(sub);
            }
        }
        url
    }

    /// Whether its status is written through the `status` subresource.
    pub fn has_status_subresource(&self) -> bool {
        self.subresources.iter().any(|s| s == "status")
    }

    /// Whether it is one of the Events' resources (which Kopf's selectors never pick by chance).
    pub fn is_events(&self) -> bool {
        self.plural == "events" && (self.group.is_empty() || self.group == "events.k8s.io")
    }
}

/// A handler's resource specification; `None` fields match anything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct Selector {
    /// The group asked for (`None`: any).
    pub group: Option<String>,
    /// The version asked for (`None`: any).
    pub version: Option<String>,
    /// The kind asked for.
    pub kind: Option<String>,
    /// The plural name asked for.
    pub plural: Option<String>,
    /// The singular name asked for.
    pub singular: Option<String>,
    /// A short name asked for.
    pub shortcut: Option<String>,
    /// A category asked for.
    pub category: Option<String>,
    /// A name that may be any of them (kind, plural, singular or short name).
    pub any_name: Option<String>,
    /// `kopf.EVERYTHING`: all resources except events.
    pub everything: bool,
    /// How the Python side shows it, for log lines.
    pub repr: String,
    /// A Python callable decides (see `Hooks::select_resources`); the fields above are unset.
    pub callable: bool,
}

impl Selector {
    /// Names one resource (a kind, plural, singular, short name, any name), not a category or all.
    pub fn is_specific(&self) -> bool {
        self.kind.is_some()
            || self.shortcut.is_some()
            || self.plural.is_some()
            || self.singular.is_some()
            || self.any_name.is_some()
    }

    /// Whether the resource is one this selector names.
    pub fn check(&self, r: &Resource) -> bool {
        let same = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        same(&self.group, &r.group)
            && match &self.version {
                None => r.preferred,
                Some(v) => *v == r.version,
            }
            && same(&self.kind, &r.kind)
            && same(&self.plural, &r.plural)
            && same(&self.singular, &r.singular)
            && self
                .category
                .as_ref()
                .is_none_or(|c| r.categories.contains(c))
            && self
                .shortcut
                .as_ref()
                .is_none_or(|s| r.shortcuts.contains(s))
            && self.any_name.as_ref().is_none_or(|n| {
                *n == r.kind || *n == r.plural || *n == r.singular || r.shortcuts.contains(n)
            })
            && (!self.everything || !r.is_events())
    }

    /// The matching resources; a specific name prefers the core group (`pods`, not `metrics.k8s.io`'s).
    pub fn select<'a>(&self, resources: &'a [Resource]) -> Vec<&'a Resource> {
        let found: Vec<&Resource> = resources.iter().filter(|r| self.check(r)).collect();
        if self.is_specific() {
            let core: Vec<&Resource> = found
                .iter()
                .copied()
                .filter(|r| r.group.is_empty())
                .collect();
            if !core.is_empty() {
                return core;
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(group: &str, version: &str, plural: &str, kind: &str) -> Resource {
        Resource {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            kind: kind.into(),
            singular: kind.to_lowercase(),
            shortcuts: vec![],
            categories: vec![],
            subresources: vec![],
            namespaced: true,
            preferred: true,
            verbs: vec![],
        }
    }

    #[test]
    fn names_and_urls() {
        let r = resource("kopf.dev", "v1", "kopfexamples", "KopfExample");
        assert_eq!(r.name(), "kopfexamples.v1.kopf.dev");
        assert_eq!(
            r.url(Some("ns"), Some("n"), Some("status")),
            "/apis/kopf.dev/v1/namespaces/ns/kopfexamples/n/status"
        );
        let pods = resource("", "v1", "pods", "Pod");
        assert_eq!(pods.url(None, None, None), "/api/v1/pods");
        assert_eq!(pods.api_version(), "v1");
    }

    #[test]
    fn selecting() {
        let resources = vec![
            resource("", "v1", "pods", "Pod"),
            resource("metrics.k8s.io", "v1beta1", "pods", "PodMetrics"),
            resource("", "v1", "events", "Event"),
            resource("kopf.dev", "v1", "kopfexamples", "KopfExample"),
        ];
        let by_name = Selector {
            any_name: Some("pods".into()),
            ..Default::default()
        };
        assert_eq!(by_name.select(&resources), vec![&resources[0]]);
        let by_kind = Selector {
            any_name: Some("KopfExample".into()),
            group: Some("kopf.dev".into()),
            ..Default::default()
        };
        assert_eq!(by_kind.select(&resources), vec![&resources[3]]);
        let everything = Selector {
            everything: true,
            ..Default::default()
        };
        assert_eq!(everything.select(&resources).len(), 3);
        let wrong_version = Selector {
            any_name: Some("kopfexamples".into()),
            version: Some("v2".into()),
            ..Default::default()
        };
        assert!(wrong_version.select(&resources).is_empty());
    }
}
