//! API discovery: every resource the server offers, with the names handlers may
//! use for it (short names, singulars and categories come from these lists).

use crate::client::resources::Resource;
use crate::client::transport::Transport;
use crate::util::logging::ENGINE;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIGroupList, APIResourceList, APIVersions};
use std::collections::BTreeSet;

/// The API's discovery failed (the server is unreachable, or refuses us).
#[derive(Debug, thiserror::Error)]
#[error("API discovery at {server} failed: {}", crate::util::errors::chain(.source))]
pub struct DiscoveryError {
    /// The API server.
    pub server: String,
    /// The last attempt's error.
    #[source]
    pub source: kube::Error,
}

/// Scan the core API and the group versions: all of them, or only those of `groups` (`""`
/// is the core API), as Kopf scans only the groups its handlers name. Errors of single
/// groups (e.g. a broken aggregated API) are skipped, as kubectl skips them, but the core
/// API must answer.
pub async fn scan(
    client: &Transport,
    groups: Option<&BTreeSet<String>>,
) -> Result<Vec<Resource>, kube::Error> {
    let wanted = |group: &str| groups.is_none_or(|groups| groups.contains(group));
    let mut lists: Vec<(String, String, bool, APIResourceList)> = Vec::new();
    if wanted("") {
        let core = client.get::<APIVersions>("/api").await?;
        for version in &core.versions {
            let list = client.get(&format!("/api/{version}")).await?;
            lists.push((String::new(), version.clone(), version == "v1", list));
        }
    }
    let named = groups.is_none_or(|groups| groups.iter().any(|group| !group.is_empty()));
    let groups = match named {
        true => client.get::<APIGroupList>("/apis").await?.groups,
        false => Vec::new(),
    };
    let groups = groups.iter().filter(|group| wanted(&group.name));
    let requests = groups.flat_map(|group| {
        let preferred = group.preferred_version.as_ref().map(|v| v.version.clone());
        group.versions.iter().map(move |gv| {
            let preferred = preferred.as_deref() == Some(gv.version.as_str());
            let name = group.name.clone();
            let version = gv.version.clone();
            async move {
                let result = client.get(&format!("/apis/{}", gv.group_version)).await;
                (name, version, preferred, result)
            }
        })
    });
    for (group, version, preferred, result) in futures::future::join_all(requests).await {
        match result {
            Ok(list) => lists.push((group, version, preferred, list)),
            Err(error) => {
                let error = crate::util::errors::chain(&error);
                tracing::warn!(target: ENGINE, "API discovery skips {group}/{version}: {error}")
            }
        }
    }
    Ok(lists
        .into_iter()
        .flat_map(|(group, version, preferred, list)| parse(&group, &version, preferred, &list))
        .collect())
}

fn parse(group: &str, version: &str, preferred: bool, list: &APIResourceList) -> Vec<Resource> {
    let subresources = |plural: &str| -> Vec<String> {
        list.resources
            .iter()
            .filter_map(|r| r.name.split_once('/'))
            .filter(|(main, _)| *main == plural)
            .map(|(_, sub)| sub.to_owned())
            .collect()
    };
    list.resources
        .iter()
        .filter(|r| !r.name.contains('/'))
        .map(|r| Resource {
            group: group.to_owned(),
            version: version.to_owned(),
            plural: r.name.clone(),
            kind: r.kind.clone(),
            singular: if r.singular_name.is_empty() {
                r.kind.to_lowercase()
            } else {
                r.singular_name.clone()
            },
            shortcuts: r.short_names.clone().unwrap_or_default(),
            categories: r.categories.clone().unwrap_or_default(),
            subresources: subresources(&r.name),
            namespaced: r.namespaced,
            preferred,
            verbs: r.verbs.clone(),
        })
        .collect()
}
