//! A request as the API server's authorizer sees it: its verb, API group, resource,
//! subresource and namespace, read from the method, the path and the query as the API
//! server's own request-info resolver reads them (`k8s.io/apiserver`'s `RequestInfoFactory`),
//! or a path outside the resources (discovery, `/version`, `/openapi`).

use serde::Serialize;

/// What RBAC checks a request against.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Attributes {
    /// The API verb (`get`, `list`, `watch`, `create`, `patch`, ...).
    pub verb: String,
    /// `None`: a path outside the resources (its verb is the method's, lower-cased).
    pub resource: Option<Resource>,
    /// The path itself, for requests outside the resources.
    pub path: Option<String>,
}

/// The resource of a request, as RBAC names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Resource {
    /// The API group (empty for the core API).
    pub group: String,
    /// The version.
    pub version: String,
    /// The plural name.
    pub resource: String,
    /// The subresource (empty for none).
    pub subresource: String,
    /// `None`: cluster-wide (a cluster-scoped object, or a namespaced resource in all namespaces).
    pub namespace: Option<String>,
}

/// Subresources of a namespace itself: `namespaces/{name}/status` is not a resource of its own.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// Read a request's attributes from its method, path and query.
pub fn of(method: &str, path: &str, query: Option<&str>) -> Attributes {
    let outside = || Attributes {
        verb: method.to_ascii_lowercase(),
        resource: None,
        path: Some(path.to_owned()),
    };
    let parts: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(|part| {
            percent_encoding::percent_decode_str(part)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect();
    let (group, version, mut rest): (String, String, &[String]) = match parts.as_slice() {
        [api, version, rest @ ..] if api == "api" && !rest.is_empty() => {
            (String::new(), version.clone(), rest)
        }
        [apis, group, version, rest @ ..] if apis == "apis" && !rest.is_empty() => {
            (group.clone(), version.clone(), rest)
        }
        _ => return outside(),
    };
    let mut verb = match method.to_ascii_uppercase().as_str() {
        "POST" => "create",
        "GET" | "HEAD" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => return outside(),
    }
    .to_owned();
    // The deprecated path prefixes that are verbs: `/watch/...`, `/proxy/...`.
    if let Some(first) = rest.first() {
        if first == "watch" || first == "proxy" {
            verb = first.clone();
            rest = &rest[1..];
            if rest.is_empty() {
                return outside();
            }
        }
    }
    let mut namespace = None;
    if rest[0] == "namespaces" && rest.len() > 1 {
        namespace = Some(rest[1].clone());
        if rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2].as_str()) {
            rest = &rest[2..];
        }
    }
    let resource = rest[0].clone();
    let name = rest.get(1);
    let subresource = match rest.get(2) {
        Some(subresource) if verb != "proxy" => subresource.clone(),
        _ => String::new(),
    };
    if name.is_none() {
        if verb == "get" {
            verb = if watching(query) { "watch" } else { "list" }.to_owned();
        } else if verb == "delete" {
            verb = "deletecollection".to_owned();
        }
    }
    Attributes {
        verb,
        resource: Some(Resource {
            group,
            version,
            resource,
            subresource,
            namespace,
        }),
        path: None,
    }
}

/// Whether the query asks for a watch (`watch=true`, `=1`, or the bare key), as Go's
/// `strconv.ParseBool` reads it.
fn watching(query: Option<&str>) -> bool {
    query
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, "true"));
            (key == "watch").then_some(value)
        })
        .any(|value| matches!(value, "1" | "t" | "T" | "true" | "TRUE" | "True"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(method: &str, path: &str, query: Option<&str>) -> (String, Option<Resource>) {
        let found = of(method, path, query);
        (found.verb, found.resource)
    }

    fn resource(group: &str, plural: &str, sub: &str, namespace: Option<&str>) -> Option<Resource> {
        Some(Resource {
            group: group.into(),
            version: "v1".into(),
            resource: plural.into(),
            subresource: sub.into(),
            namespace: namespace.map(Into::into),
        })
    }

    #[test]
    fn verbs_follow_the_method_and_whether_a_name_is_given() {
        let pods = |ns| resource("", "pods", "", ns);
        assert_eq!(
            attrs("GET", "/api/v1/namespaces/ns1/pods", None),
            ("list".into(), pods(Some("ns1")))
        );
        assert_eq!(
            attrs(
                "GET",
                "/api/v1/namespaces/ns1/pods",
                Some("watch=true&rv=1")
            ),
            ("watch".into(), pods(Some("ns1")))
        );
        assert_eq!(
            attrs("GET", "/api/v1/namespaces/ns1/pods/p1", None),
            ("get".into(), pods(Some("ns1")))
        );
        assert_eq!(
            attrs("POST", "/api/v1/namespaces/ns1/pods", None),
            ("create".into(), pods(Some("ns1")))
        );
        assert_eq!(
            attrs("PUT", "/api/v1/namespaces/ns1/pods/p1", None),
            ("update".into(), pods(Some("ns1")))
        );
        assert_eq!(
            attrs("DELETE", "/api/v1/namespaces/ns1/pods", None),
            ("deletecollection".into(), pods(Some("ns1")))
        );
        assert_eq!(
            attrs("GET", "/api/v1/pods", Some("watch=1")),
            ("watch".into(), pods(None))
        );
        assert_eq!(
            attrs("GET", "/api/v1/watch/namespaces/ns1/pods", None),
            ("watch".into(), pods(Some("ns1")))
        );
    }

    #[test]
    fn groups_subresources_and_namespaces_themselves() {
        assert_eq!(
            attrs(
                "PATCH",
                "/apis/apps/v1/namespaces/ns1/deployments/d1/scale",
                None
            ),
            (
                "patch".into(),
                resource("apps", "deployments", "scale", Some("ns1"))
            )
        );
        assert_eq!(
            attrs("GET", "/api/v1/namespaces/ns1", None),
            ("get".into(), resource("", "namespaces", "", Some("ns1")))
        );
        assert_eq!(
            attrs("PUT", "/api/v1/namespaces/ns1/finalize", None),
            (
                "update".into(),
                resource("", "namespaces", "finalize", Some("ns1"))
            )
        );
        assert_eq!(
            attrs("GET", "/api/v1/namespaces", None),
            ("list".into(), resource("", "namespaces", "", None))
        );
        assert_eq!(
            attrs("GET", "/apis/kopf.dev/v1/clusterkopfpeerings/default", None),
            (
                "get".into(),
                resource("kopf.dev", "clusterkopfpeerings", "", None)
            )
        );
    }

    #[test]
    fn discovery_and_other_paths_are_outside_the_resources() {
        for path in [
            "/api",
            "/api/v1",
            "/apis",
            "/apis/apps/v1",
            "/version",
            "/openapi/v3",
        ] {
            let found = of("GET", path, None);
            assert_eq!(found.resource, None, "{path}");
            assert_eq!(found.path.as_deref(), Some(path));
            assert_eq!(found.verb, "get");
        }
    }
}
