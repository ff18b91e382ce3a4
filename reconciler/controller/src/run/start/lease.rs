//! Leader election per shard: waiting for a shard's Lease (at once when its holder lets it
//! go), and the fence that holds writes until the Lease is confirmed held.

use std::time::Duration;

use kube::Client;
use kube::api::Api;

use super::shared::Shared;
use crate::run::Options;
use crate::run::shard::Shard;

/// The Lease's receiver, and its manager's task: it releases the Lease and ends once every
/// clone of the receiver is dropped.
pub(super) type Leadership = (
    tokio::sync::watch::Receiver<bool>,
    tokio::task::JoinHandle<
        Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError>,
    >,
);

/// Waits for the Lease when leader election is on; the receiver reports losing it.
pub(super) async fn lead(
    client: &Client,
    opts: &Options,
    identity: &str,
    shard: Shard,
) -> anyhow::Result<Option<Leadership>> {
    let Some((namespace, duration)) = &opts.leader_election else {
        return Ok(None);
    };
    let lease = shard.lease_name();
    tracing::info!(%identity, lease = %format!("{namespace}/{lease}"), "waiting for leadership");
    loop {
        let manager = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &lease)
            .with_namespace(namespace.clone())
            .with_identity(identity.to_string())
            .with_duration(*duration)
            .with_grace((*duration / 3).max(1))
            .build()
            .await?;
        let (mut rx, task) = manager.watch().await;
        let acquired = async {
            while !*rx.borrow_and_update() {
                rx.changed().await?;
            }
            Ok::<_, anyhow::Error>(())
        };
        tokio::select! {
            a = acquired => {
                a?;
                tracing::info!(%identity, %shard, lease = %format!("{namespace}/{lease}"), "acquired leadership");
                return Ok(Some((rx, task)));
            }
            // The leader let the Lease go (a graceful stop, e.g. a rolling upgrade): try at once
            // instead of sleeping until the Lease would have expired. The waiting manager is
            // stopped without releasing anything (it holds nothing) and a new one locks the free
            // Lease on its first step.
            () = released(client, namespace, &lease) => {
                task.abort();
                let _ = task.await;
                drop(rx);
            }
        }
    }
}

/// Resolves once Lease `name` has no holder (checked twice a second).
async fn released(client: &Client, namespace: &str, name: &str) {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), namespace);
    // A Lease that is free when the wait starts is the manager's to take: wait for a holder first.
    let mut held = false;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let holder = match leases.get_opt(name).await {
            Ok(Some(l)) => l
                .spec
                .and_then(|s| s.holder_identity)
                .filter(|h| !h.is_empty()),
            _ => continue,
        };
        match (held, holder.is_some()) {
            (false, true) => held = true,
            (true, false) => return,
            _ => {}
        }
    }
}

/// With leader election: writes wait until `shard`'s Lease is confirmed held.
pub(super) async fn keep_fence(shared: &Shared, shard: Shard) {
    if let (Some(fence), Some((ns, secs))) = (&shared.fence, &shared.opts.leader_election) {
        fence
            .keep(
                Api::namespaced(shared.management.client.clone(), ns),
                shard.lease_name(),
                shared.identity.clone(),
                Duration::from_secs(*secs),
            )
            .await;
    }
}
