//! High availability: peering, leader election, automatic sharding, all voting on one pause.

use super::{OperatorSpec, RunError};
use crate::client::credentials::Credentials;
use crate::client::resources::Resource;
use crate::ha::leadership::{Leadership, LeaseLock};
use crate::ha::pausing::Pause;
use crate::ha::peering::{self, Peering, PeeringError, Target};
use crate::ha::sharding::{self, Sharding};
use crate::settings::Settings;
use crate::util::errors;
use crate::util::logging::ENGINE;
use crate::util::tasks;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// High availability as the settings ask for it: Kopf's peering with the targets found, a
/// Lease election (`--lease`), or automatic sharding (`--shards auto`). They all vote on one
/// pause; sharding also says which range of the objects this replica serves.
pub(super) struct Ha {
    pub(super) pause: Arc<Pause>,
    /// The voters' tasks: on the stop signal they withdraw (records, leases) and end.
    pub(super) voters: JoinSet<()>,
    pub(super) shards: Option<watch::Receiver<Option<String>>>,
}

impl Ha {
    pub(super) async fn start(
        credentials: &Arc<Credentials>,
        settings: &Arc<Settings>,
        targets: Vec<Target>,
        stop: &watch::Receiver<bool>,
    ) -> Result<Self, RunError> {
        let lease = &settings.leadership;
        let (lease_name, shard_channel) = Self::election(credentials, settings).await?;
        let electing = lease_name.is_some() || shard_channel.is_some();
        let pause = Pause::new(targets.len() + usize::from(electing));
        let mut voters = JoinSet::new();
        if let Some(name) = lease_name {
            let lock = LeaseLock {
                name,
                namespace: lease.namespace(),
                duration: lease.lease_duration,
            };
            let leadership = Leadership {
                credentials: credentials.clone(),
                settings: lease.clone(),
                lock: Arc::new(lock),
                identity: settings.peering.identity.clone(),
                pause: pause.clone(),
                voter: targets.len(),
            };
            tasks::spawn_in(&mut voters, leadership.run(stop.clone()));
        }
        let shards = shard_channel.map(|(range, shards)| {
            let members = Sharding {
                credentials: credentials.clone(),
                settings: lease.clone(),
                group: settings.sharding.group.clone(),
                identity: settings.peering.identity.clone(),
                pause: pause.clone(),
                voter: targets.len(),
                range,
            };
            tasks::spawn_in(&mut voters, members.run(stop.clone()));
            shards
        });
        for (voter, target) in targets.into_iter().enumerate() {
            let peering = Peering {
                credentials: credentials.clone(),
                target,
                settings: settings.peering.clone(),
                watching: settings.watching.clone(),
                pause: pause.clone(),
                voter,
            };
            tasks::spawn_in(&mut voters, peering.run(stop.clone()));
        }
        Ok(Ha {
            pause,
            voters,
            shards,
        })
    }

    /// The Lease to elect a leader by, or the shards' channel: `--shards auto` falls back to
    /// a leader's Lease where the API server cannot filter by shards.
    pub(super) async fn election(
        credentials: &Arc<Credentials>,
        settings: &Settings,
    ) -> Result<(Option<String>, Option<ShardChannel>), RunError> {
        let lease = &settings.leadership;
        let auto = settings.sharding.auto;
        if let (true, Some(problem)) = (lease.lease_name.is_some() || auto, lease.problem()) {
            return Err(problem.into());
        }
        if !auto {
            return Ok((lease.lease_name.clone(), None));
        }
        if lease.lease_name.is_some() {
            return Err(RunError::Sharding("a replica serves either its shard (--shards auto) or everything as the leader (--lease NAME), not both".into()));
        }
        let lease_namespace = lease.namespace();
        let supported = sharding::supported(credentials, &lease_namespace)
            .await
            .map_err(|error| {
                RunError::Sharding(format!(
                    "the shards' leases in the namespace {lease_namespace:?} cannot be listed: {}",
                    errors::chain(&error)
                ))
            })?;
        if supported {
            return Ok((None, Some(watch::channel(None))));
        }
        let name = format!("{}-leader", settings.sharding.group);
        tracing::warn!(target: ENGINE,
            "The API server does not filter lists and watches by shards (it needs Kubernetes 1.36+ with the ShardedListAndWatch feature gate): instead of sharing the objects, the replicas elect one leader by the lease '{lease_namespace}/{name}'; the others wait."
        );
        Ok((Some(name), None))
    }

    /// The peerings withdraw our records (the election releases the lease) on the stop
    /// signal: let them finish that.
    pub(super) async fn withdraw(mut self) {
        let withdrawn = async { while self.voters.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), withdrawn).await;
    }
}

/// The range this replica serves, as sharding decides it (sender) and the watchers follow it.
pub(super) type ShardChannel = (
    watch::Sender<Option<String>>,
    watch::Receiver<Option<String>>,
);

/// The peering objects to announce ourselves in (none: standalone). A mandatory peering
/// (`--peering NAME`) that is absent stops the start. The auto-detected `default` one is
/// kept alive whether it exists or not, as Kopf does: its keep-alives say "not found"
/// (in debug lines) until somebody creates it, and then the operator joins it. Either
/// one that cannot be read (no permission, say) stops the start.
pub(super) async fn peering_targets(
    credentials: &Credentials,
    spec: &OperatorSpec,
    resources: &[Resource],
) -> Result<Vec<Target>, RunError> {
    let settings = &spec.settings.peering;
    if settings.standalone {
        return Ok(Vec::new());
    }
    let clusterwide = settings.clusterwide || spec.namespaces.is_empty();
    let kind = peering::peering_kind(clusterwide);
    let Some(resource) = peering::peering_resource(resources, clusterwide) else {
        if settings.mandatory {
            let name = settings.name.clone();
            return Err(PeeringError::NotServedFor { kind, name }.into());
        }
        tracing::debug!(target: ENGINE, "No {kind} resource is served: running in the standalone mode.");
        return Ok(Vec::new());
    };
    let namespaces: Vec<Option<String>> = if clusterwide {
        vec![None]
    } else {
        let names = peering::namespaces(credentials, &spec.namespaces)
            .await
            .map_err(PeeringError::Namespaces)?;
        names.into_iter().map(Some).collect()
    };
    let mut targets = Vec::new();
    for namespace in namespaces {
        let target = Target {
            resource: resource.clone(),
            namespace,
        };
        let place = match &target.namespace {
            Some(namespace) => format!("in the namespace '{namespace}'"),
            None => "cluster-wide".to_owned(),
        };
        let name = settings.name.clone();
        let found = match peering::exists(credentials, &target, &name).await {
            Ok(found) => found,
            Err(source) => {
                return Err(PeeringError::Read {
                    kind,
                    name,
                    place,
                    source,
                }
                .into())
            }
        };
        if !found && settings.mandatory {
            return Err(PeeringError::NotFound { kind, name, place }.into());
        }
        targets.push(target); // (an absent `default` one is joined when somebody creates it)
    }
    Ok(targets)
}
