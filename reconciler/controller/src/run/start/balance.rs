//! With `--shards N`: which shard Leases this replica holds, and the one controller stack
//! that serves them all.
//!
//! Every replica keeps a membership Lease (`enoki-controller-member-<identity>`, labelled
//! `enoki.dev/controller-member`), renewed every third of the Lease duration, so that each
//! replica knows how many are live. A replica takes shard Leases that are free (never held,
//! released or expired), one at a time, up to its fair share of N shards over R live
//! replicas: ⌊N / R⌋ first, and one more (⌈N / R⌉) only for a shard that has stayed free for
//! a whole tick, so that replicas below their share get there first. It takes its (random)
//! home shard at once and the others only after one Lease duration, so that replicas started
//! together see each other before they split the shards. 4 shards over 2 replicas are 2 and
//! 2; when a replica dies, its membership and shard Leases expire and the survivors' shares
//! grow to take its shards over.
//!
//! One controller stack serves every shard held; it starts with the shards taken in the
//! first Lease duration (or as soon as the share is reached), and when a Lease is added later
//! it is stopped gracefully and started again with the larger set. A lost Lease stops the
//! process (the restarted process competes again). Shards are not handed back: a replica
//! that joins after the others took every shard stays a standby until one is free.

use std::time::{Duration, Instant, SystemTime};

use futures::stream::FuturesUnordered;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use super::super::shard::Shards;
use super::*;

/// The label of the membership Leases.
const MEMBER_LABEL: &str = "enoki.dev/controller-member";

/// Membership Leases expired this many Lease durations ago are deleted by any replica.
const FORGET_AFTER: u32 = 10;

/// Competes for the shard Leases and serves the shards held until shutdown or until a
/// Lease is lost (an error).
pub(super) async fn serve_sharded(
    shared: &Arc<Shared>,
    shutdown: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let count = shared.opts.shards;
    let Some((namespace, secs)) = shared.opts.leader_election.clone() else {
        anyhow::bail!("--shards {count} needs --leader-election-namespace");
    };
    let duration = Duration::from_secs(secs.max(1));
    let leases: Api<Lease> = Api::namespaced(shared.management.client.clone(), &namespace);
    let member = Member::join(leases.clone(), &shared.identity, duration);
    let (held_tx, held_rx) = tokio::sync::watch::channel(Shards::none(count));
    let (lost_tx, lost_rx) = tokio::sync::watch::channel(None::<String>);
    let acquiring = acquire(
        shared,
        &leases,
        duration,
        &held_tx,
        &lost_tx,
        shutdown.clone(),
    );
    let serving = serve(shared, held_rx, lost_rx.clone(), shutdown);
    tokio::join!(acquiring, serving);
    member.leave().await;
    let lost = lost_rx.borrow().clone();
    match lost {
        Some(why) => Err(anyhow::anyhow!(why)),
        None => Ok(()),
    }
}

/// A replica's fair share of `count` shards over the live replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Share {
    /// ⌊count / replicas⌋: taken as soon as shards are free.
    pub floor: u32,
    /// ⌈count / replicas⌉: the last one only for a shard free for a whole tick.
    pub ceil: u32,
}

impl Share {
    pub(super) fn of(count: u32, replicas: u32) -> Share {
        let replicas = replicas.max(1);
        Share {
            floor: count / replicas,
            ceil: count.div_ceil(replicas),
        }
    }

    /// Whether to contest a free shard, holding `mine` already. Pure.
    ///
    /// `home`: the replica's home shard (contested at once); `settled`: one Lease duration
    /// has passed since start-up; `free_a_tick`: the shard was already free a tick ago.
    pub(super) fn wants(self, home: bool, settled: bool, mine: u32, free_a_tick: bool) -> bool {
        if mine >= self.ceil {
            return false;
        }
        if home {
            return true;
        }
        settled && (mine < self.floor || free_a_tick)
    }
}

/// Takes free shard Leases up to the fair share, every tick, and publishes the set held on
/// `held`; on a lost Lease, says so on `lost` and returns.
async fn acquire(
    shared: &Arc<Shared>,
    leases: &Api<Lease>,
    duration: Duration,
    held: &tokio::sync::watch::Sender<Shards>,
    lost: &tokio::sync::watch::Sender<Option<String>>,
    shutdown: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) {
    let count = shared.opts.shards;
    let home = rand::random::<u32>() % count;
    let tick = (duration / 4).max(Duration::from_secs(1));
    let started = Instant::now();
    let mut taken = Shards::none(count);
    let mut free_before = Shards::none(count);
    let mut keepers = FuturesUnordered::new();
    loop {
        let settled = started.elapsed() >= duration;
        match survey(leases, duration, count).await {
            Ok((replicas, free)) => {
                let share = Share::of(count, replicas);
                for index in (0..count).map(|d| (home + d) % count) {
                    let shard = Shard { index, count };
                    let wants = share.wants(
                        index == home,
                        settled,
                        taken.len(),
                        free_before.contains(index),
                    );
                    if taken.contains(index) || !free.contains(index) || !wants {
                        continue;
                    }
                    let client = &shared.management.client;
                    // A free Lease is taken in a request or two; waiting longer means another
                    // replica took it (dropping the attempt releases whatever it got).
                    match tokio::time::timeout(
                        duration.min(Duration::from_secs(5)),
                        lead(client, &shared.opts, &shared.identity, shard),
                    )
                    .await
                    {
                        Ok(Ok(Some(leadership))) => {
                            keep_fence(shared, shard).await;
                            taken = taken.with(index);
                            keepers.push(lost_when(leadership, shard));
                        }
                        Ok(Ok(None)) => {}
                        Ok(Err(e)) => {
                            tracing::warn!(%shard, error = %e, "could not contest the shard's Lease");
                        }
                        // Another replica took it first.
                        Err(_) => tracing::debug!(%shard, "the shard's Lease went elsewhere"),
                    }
                }
                free_before = free;
                tracing::debug!(replicas, ?share, %taken, "shard Leases");
                // One stack for everything taken at start-up, not one restart per Lease.
                if taken.len() >= share.ceil || settled {
                    held.send_if_modified(|h| std::mem::replace(h, taken) != taken);
                }
            }
            Err(e) => tracing::debug!(error = %e, "could not list the Leases"),
        }
        tokio::select! {
            () = tokio::time::sleep(tick) => {}
            Some(shard) = keepers.next() => {
                lost.send_replace(Some(format!("lost leadership of shard {shard}")));
                return;
            }
            () = shutdown.clone() => return,
        }
    }
}

/// Resolves with `shard` when its Lease is lost.
async fn lost_when(mut leadership: tokio::sync::watch::Receiver<bool>, shard: Shard) -> Shard {
    while *leadership.borrow_and_update() {
        if leadership.changed().await.is_err() {
            break;
        }
    }
    tracing::warn!(%shard, "lost the shard's Lease; stopping");
    shard
}

/// Runs one controller stack for the shards on `held`, restarted (gracefully) whenever the
/// set changes, until shutdown or a lost Lease.
async fn serve(
    shared: &Arc<Shared>,
    mut held: tokio::sync::watch::Receiver<Shards>,
    mut lost: tokio::sync::watch::Receiver<Option<String>>,
    shutdown: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) {
    let ended = async move {
        tokio::select! {
            () = shutdown => {}
            _ = lost.wait_for(Option::is_some) => {}
        }
    }
    .shared();
    loop {
        let shards = tokio::select! {
            s = held.wait_for(|s| !s.is_empty()) => match s {
                Ok(s) => *s,
                Err(_) => return,
            },
            () = ended.clone() => return,
        };
        let mut next = held.clone();
        let stop = {
            let ended = ended.clone();
            async move {
                tokio::select! {
                    () = ended => {}
                    _ = next.changed() => {}
                }
            }
        }
        .shared();
        tracing::info!(%shards, "serving shards");
        run_stack(shared, shards, stop).await;
        if ended.clone().now_or_never().is_some() {
            return;
        }
    }
}

/// How long ago the Lease expired (`None`: it has not).
fn expired_for(
    spec: &k8s_openapi::api::coordination::v1::LeaseSpec,
    now: SystemTime,
) -> Option<Duration> {
    let renewed = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| SystemTime::from(t.0))?;
    let lasts = Duration::from_secs(
        u64::try_from(spec.lease_duration_seconds.unwrap_or_default()).unwrap_or_default(),
    );
    now.duration_since(renewed + lasts).ok()
}

/// One list of the Leases: how many replicas are live (their membership Lease has not
/// expired; this one included) and which shards' Leases are free (absent, never held,
/// released or expired). Deletes membership Leases long expired (replicas that did not
/// leave cleanly).
async fn survey(
    leases: &Api<Lease>,
    duration: Duration,
    count: u32,
) -> kube::Result<(u32, Shards)> {
    let now = SystemTime::now();
    let mut live = 0_u32;
    let mut free = (0..count).fold(Shards::none(count), Shards::with);
    for l in leases.list(&ListParams::default()).await? {
        let name = l.name_any();
        let expired = l
            .spec
            .as_ref()
            .map_or(Some(Duration::MAX), |s| expired_for(s, now));
        if l.labels().contains_key(MEMBER_LABEL) {
            match expired {
                None => live += 1,
                Some(ago) if ago > duration * FORGET_AFTER => {
                    if let Err(e) = leases.delete(&name, &DeleteParams::default()).await {
                        tracing::debug!(lease = %name, error = %e, "could not delete a stale membership Lease");
                    }
                }
                Some(_) => {}
            }
            continue;
        }
        let holder = l.spec.as_ref().and_then(|s| s.holder_identity.as_deref());
        if let Some(index) = (0..count).find(|i| Shard { index: *i, count }.lease_name() == name)
            && expired.is_none()
            && !holder.unwrap_or_default().is_empty()
        {
            free = free.without(index);
        }
    }
    Ok((live.max(1), free))
}

/// This replica's membership Lease, renewed in the background while it lives.
struct Member {
    leases: Api<Lease>,
    name: String,
    renewing: tokio::task::JoinHandle<()>,
}

impl Member {
    /// Starts renewing the membership Lease (created by the first renewal).
    fn join(leases: Api<Lease>, identity: &str, duration: Duration) -> Member {
        let name = member_lease_name(identity);
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "labels": {MEMBER_LABEL: "true"}},
            "spec": {
                "holderIdentity": identity,
                "leaseDurationSeconds": duration.as_secs(),
            },
        });
        let (api, lease_name) = (leases.clone(), name.clone());
        let renewing = tokio::spawn(async move {
            let params = PatchParams::apply("enoki").force();
            loop {
                let mut body = lease.clone();
                body["spec"]["renewTime"] =
                    json!(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                        k8s_openapi::jiff::Timestamp::now()
                    ));
                if let Err(e) = api.patch(&lease_name, &params, &Patch::Apply(body)).await {
                    tracing::debug!(lease = %lease_name, error = %e, "could not renew the membership Lease");
                }
                tokio::time::sleep(duration / 3).await;
            }
        });
        Member {
            leases,
            name,
            renewing,
        }
    }

    /// Stops renewing and deletes the membership Lease (best effort: otherwise it expires).
    async fn leave(self) {
        self.renewing.abort();
        let params = DeleteParams::default();
        let delete = self.leases.delete(&self.name, &params);
        if let Ok(Err(e)) = tokio::time::timeout(Duration::from_secs(5), delete).await {
            tracing::debug!(lease = %self.name, error = %e, "could not delete the membership Lease");
        }
    }
}

/// `enoki-controller-member-<identity>`, made a valid object name.
fn member_lease_name(identity: &str) -> String {
    let mut name: String = format!("enoki-controller-member-{identity}")
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(253)
        .collect();
    while name.ends_with(['-', '.']) {
        name.pop();
    }
    name
}

#[cfg(test)]
mod tests {
    use super::{Share, member_lease_name};

    #[test]
    fn four_shards_over_two_replicas_are_two_each() {
        let share = Share::of(4, 2);
        assert_eq!(share, Share { floor: 2, ceil: 2 });
        // Home at once, others only once settled, never past the share.
        assert!(share.wants(true, false, 0, false));
        assert!(!share.wants(false, false, 1, true));
        assert!(share.wants(false, true, 1, false));
        assert!(!share.wants(false, true, 2, true));
        assert!(!share.wants(true, true, 2, true));
    }

    #[test]
    fn the_extra_shard_goes_only_to_a_shard_free_for_a_tick() {
        // 4 over 3: 1 each, and one replica gets a second.
        let share = Share::of(4, 3);
        assert_eq!(share, Share { floor: 1, ceil: 2 });
        assert!(share.wants(false, true, 0, false));
        assert!(!share.wants(false, true, 1, false));
        assert!(share.wants(false, true, 1, true));
        // 2 over 3: a third replica is a standby.
        let share = Share::of(2, 3);
        assert!(share.wants(true, false, 0, false));
        assert!(!share.wants(false, true, 1, true));
        // No replica seen (not even this one yet): all of it.
        assert_eq!(Share::of(4, 0), Share { floor: 4, ceil: 4 });
    }

    #[test]
    fn membership_lease_names_are_valid_object_names() {
        assert_eq!(
            member_lease_name("Pod_A-0012abcd"),
            "enoki-controller-member-pod-a-0012abcd"
        );
        let long = member_lease_name(&"x".repeat(400));
        assert_eq!(long.len(), 253);
        assert_eq!(member_lease_name("a-_"), "enoki-controller-member-a");
    }
}
