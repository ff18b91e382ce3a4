//! With `--shards N`: which shard Leases this replica holds, and the one controller stack
//! that serves them all.
//!
//! Every replica keeps a membership Lease (`enoki-controller-member-<identity>`, labelled
//! `enoki.dev/controller-member=<N>`), renewed every third of the Lease duration, so that
//! each replica knows which replicas of this shard count are live. Every tick (a quarter of the Lease duration) a
//! replica lists the Leases and splits the free shards over the live replicas, the same way
//! in every replica ([`assign`]): each free shard, in order, to the replica holding the fewest
//! (ties: the lowest identity), none beyond ⌈N / replicas⌉. It contests only the shards that
//! fall to itself, so 4 shards over 2 replicas are 2 and 2, and replicas rarely race for one
//! Lease. A shard is free when its Lease is absent or released, or when it has expired, its
//! holder has no live membership Lease, and both have stayed so for a Lease duration
//! (an API server that was away for a while lets every Lease expire; the holders renew
//! within that time). In its first Lease duration a replica takes at most one shard, so that
//! replicas started together see each other before they split the shards.
//!
//! A shard free for two Lease durations is taken by any replica (the one it fell to is
//! stuck or cannot take it).
//!
//! One controller stack serves the set of shards held ([`Held`]); when a shard is added
//! (a dead replica's, taken over), the stack's watches list again and its caches fill with
//! the added shard's objects, and the added shard's Compositions are woken; nothing already
//! cached or remembered is dropped. A replica holding more than its share in two lists in a
//! row (a replica joined) hands one shard back, never shard 0, once no shard is free: the shard leaves the
//! set (new reconciles of its Compositions do nothing), its running reconciles finish
//! (counted per shard), its Lease stops fencing writes and is released, and the replica the split
//! gives it to takes it. A lost Lease stops the process (the restarted process competes
//! again); on shutdown the Leases are released only after the stack has stopped. While
//! Leases of another shard count (or of an unsharded replica) are held (or expired less than
//! two Lease durations ago), nothing is taken, and a replica serving shards stops: change
//! `--shards` by stopping every replica first.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use serde_json::json;

use super::super::shard::{Held, Shards};
use super::*;

mod survey;
use survey::{Member, assign, expired_for, survey};

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
    let member = Member::join(leases.clone(), &shared.identity, duration, count);
    let (held_tx, held_rx) = tokio::sync::watch::channel(Shards::none(count));
    let (lost_tx, lost_rx) = tokio::sync::watch::channel(None::<String>);
    let mut leadership = BTreeMap::new();
    let acquiring = acquire(
        shared,
        &leases,
        duration,
        &held_tx,
        &lost_tx,
        &mut leadership,
        shutdown.clone(),
    );
    let serving = serve(shared, held_rx, lost_rx.clone(), shutdown);
    tokio::join!(acquiring, serving);
    // Nothing this process still has in flight (a detached status write) writes once the
    // Leases are released.
    if let Some(f) = &shared.fence {
        f.lose();
    }
    // The Leases go (released by their managers) only now that the stack has stopped; their
    // releases are waited for (briefly), so that the survivors take the shards at once.
    let managers: Vec<_> = std::mem::take(&mut leadership)
        .into_values()
        .map(|(rx, task)| {
            drop(rx);
            task
        })
        .collect();
    let released = futures::future::join_all(managers);
    let _ = tokio::time::timeout(Duration::from_secs(3), released).await;
    member.leave().await;
    let lost = lost_rx.borrow().clone();
    match lost {
        Some(why) => Err(anyhow::anyhow!(why)),
        None => Ok(()),
    }
}

/// With leader election but no `--shards`: waits (ready, as a standby) until no shard Lease
/// is held, so that replicas of a sharded rollout being replaced stop first.
pub(super) async fn wait_for_no_shard_leases(shared: &Shared) {
    let Some((namespace, secs)) = shared.opts.leader_election.clone() else {
        return;
    };
    let duration = Duration::from_secs(secs.max(1));
    let leases: Api<Lease> = Api::namespaced(shared.management.client.clone(), &namespace);
    let mut warned = false;
    let mut failing_since: Option<Instant> = None;
    loop {
        let now = SystemTime::now();
        let held = match tokio::time::timeout(duration, leases.list(&ListParams::default())).await {
            Ok(Ok(list)) => list
                .items
                .into_iter()
                .find(|l| {
                    l.name_any().starts_with("enoki-controller-shard-")
                        && l.spec.as_ref().is_some_and(|s| {
                            !s.holder_identity.as_deref().unwrap_or_default().is_empty()
                                && expired_for(s, now).is_none_or(|ago| ago < duration * 2)
                        })
                })
                .map(|l| l.name_any()),
            // Unreadable: wait and list again (fail closed), for two Lease durations; the
            // check is a guard for rollouts between shard counts, not worth a replica that
            // never serves (a Role without `list` on Leases, say).
            Ok(Err(e)) => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= duration * 2 {
                    tracing::error!(error = %e, "could not list the Leases to look for shard Leases; serving anyway");
                    return;
                }
                tracing::warn!(error = %e, "could not list the Leases to look for shard Leases");
                Some("(the Leases could not be listed)".to_string())
            }
            Err(_) => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= duration * 2 {
                    tracing::error!(
                        "listing the Leases to look for shard Leases timed out; serving anyway"
                    );
                    return;
                }
                Some("(listing the Leases timed out)".to_string())
            }
        };
        let Some(lease) = held else { return };
        if !warned {
            tracing::warn!(%lease, "a shard Lease is held (replicas with --shards): waiting until it is released or expires");
            warned = true;
        }
        tokio::time::sleep(duration / 4).await;
    }
}

/// Takes the shards [`assign`] gives this replica, every tick, and publishes the set held
/// on `held` (and in `enoki_shard_held`); on a lost Lease, says so on `lost` and returns.
/// The Leases' receivers go to `leadership`, for the caller to drop once the stack stopped.
async fn acquire(
    shared: &Arc<Shared>,
    leases: &Api<Lease>,
    duration: Duration,
    held: &tokio::sync::watch::Sender<Shards>,
    lost: &tokio::sync::watch::Sender<Option<String>>,
    leadership: &mut BTreeMap<u32, Leadership>,
    shutdown: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) {
    let count = shared.opts.shards;
    let me = shared.identity.clone();
    let tick = (duration / 4).max(Duration::from_secs(1));
    let started = Instant::now();
    let mut taken = Shards::none(count);
    let mut unheld_since: BTreeMap<u32, Instant> = BTreeMap::new();
    let mut keepers: tokio::task::JoinSet<Shard> = tokio::task::JoinSet::new();
    let mut keeping: BTreeMap<u32, tokio::task::AbortHandle> = BTreeMap::new();
    let (mut warned, mut over_before) = (false, false);
    loop {
        let settled = started.elapsed() >= duration;
        match tokio::time::timeout(duration, survey(leases, duration, count)).await {
            Ok(Ok(mut s)) => {
                let (free, overdue) = s.as_seen_by(&me, taken, &mut unheld_since, duration);
                if let Some(other) = &s.foreign {
                    if foreign_lease(shared, other, taken, lost, &mut warned) {
                        return;
                    }
                } else {
                    let assigned = assign(count, &s.members, &s.holders, &free);
                    let mine: BTreeSet<u32> = assigned
                        .iter()
                        .filter(|(_, m)| **m == me)
                        .map(|(i, _)| *i)
                        .chain(overdue)
                        .collect();
                    let keepers = (&mut keepers, &mut keeping);
                    let timing = (settled, duration);
                    let got = contest_each(shared, mine, timing, taken, keepers, leadership, lost);
                    taken = got.await;
                    tracing::debug!(members = s.members.len(), %taken, "shard Leases");
                }
                // One list of everything taken at start-up rather than one per Lease.
                let share = count.div_ceil(u32::try_from(s.members.len()).unwrap_or(1).max(1));
                if taken.len() >= share || settled {
                    publish_held(shared, held, taken);
                }
                // More than the share two lists in a row (a replica joined): hand one back,
                // the highest but shard 0 (which carries the cluster-wide work).
                // Only once the shard handed back last was taken (nothing is free): a
                // newcomer takes one shard in its first Lease duration.
                let over = taken.len() > share && s.foreign.is_none() && settled && free.is_empty();
                if over
                    && over_before
                    && let Some(index) = taken.iter().map(|s| s.index).filter(|i| *i != 0).last()
                {
                    let shard = Shard { index, count };
                    taken = taken.without(index);
                    hand_back(shared, shard, held, &mut keeping, leadership).await;
                }
                over_before = over;
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "could not list the Leases"),
            Err(_) => tracing::debug!("listing the Leases timed out"),
        }
        tokio::select! {
            () = tokio::time::sleep(tick) => {}
            // A keeper aborted by a hand-back ends as an error: not a loss. A loss was
            // reported by the keeper itself (fence closed, stack told to stop).
            Some(Ok(_)) = keepers.join_next() => return,
            () = shutdown.clone() => return,
        }
    }
}

/// A Lease of another shard count (or of unsharded enoki) is held: with shards taken, this
/// replica stops (two schemes serving at once would write the same Compositions twice; true);
/// else it takes none until the Lease is gone (warned once).
fn foreign_lease(
    shared: &Shared,
    other: &str,
    taken: Shards,
    lost: &tokio::sync::watch::Sender<Option<String>>,
    warned: &mut bool,
) -> bool {
    let count = shared.opts.shards;
    if !taken.is_empty() {
        tracing::error!(lease = %other, shards = count, "a Lease of another shard count (or of unsharded enoki) is held while this replica serves shards: stopping");
        if let Some(f) = &shared.fence {
            f.lose();
        }
        lost.send_replace(Some(format!(
            "a Lease of another shard count is held: {other}"
        )));
        return true;
    }
    if !*warned {
        tracing::warn!(lease = %other, shards = count, "a Lease of another shard count (or of unsharded enoki) is held: taking no shard until it is gone");
        *warned = true;
    }
    false
}

/// Contests the shards `mine` (before the first Lease duration has passed, only while none
/// is taken yet): each one won gets a keeper task that reports its loss. The shards taken.
async fn contest_each(
    shared: &Arc<Shared>,
    mine: BTreeSet<u32>,
    (settled, duration): (bool, Duration),
    mut taken: Shards,
    (keepers, keeping): (
        &mut tokio::task::JoinSet<Shard>,
        &mut BTreeMap<u32, tokio::task::AbortHandle>,
    ),
    leadership: &mut BTreeMap<u32, Leadership>,
    lost: &tokio::sync::watch::Sender<Option<String>>,
) -> Shards {
    let count = shared.opts.shards;
    for index in mine {
        if !settled && !taken.is_empty() {
            break;
        }
        let shard = Shard { index, count };
        if let Some((rx, task)) = contest(shared, shard, duration).await {
            taken = taken.with(index);
            let keeper = lost_when(rx.clone(), shard, shared.fence.clone(), lost.clone());
            keeping.insert(index, keepers.spawn(keeper));
            leadership.insert(index, (rx, task));
        }
    }
    taken
}

/// Publishes the shards `taken` on `held` (and in `enoki_shard_held`) when they changed.
fn publish_held(shared: &Shared, held: &tokio::sync::watch::Sender<Shards>, taken: Shards) {
    if *held.borrow() == taken {
        return;
    }
    for shard in taken.iter() {
        let label = metrics::ShardLabel {
            shard: shard.label(),
        };
        shared.metrics.shard_held.get_or_create(&label).set(1);
    }
    held.send_replace(taken);
}

/// Hands `shard` back: takes it out of the set served (its runs finish; new ones do
/// nothing), then stops fencing writes by its Lease and releases the Lease.
async fn hand_back(
    shared: &Shared,
    shard: Shard,
    held: &tokio::sync::watch::Sender<Shards>,
    keeping: &mut BTreeMap<u32, tokio::task::AbortHandle>,
    leadership: &mut BTreeMap<u32, Leadership>,
) {
    held.send_modify(|h| *h = h.without(shard.index));
    let label = metrics::ShardLabel {
        shard: shard.label(),
    };
    shared.metrics.shard_held.get_or_create(&label).set(0);
    while shared.in_flight.busy(shard.index) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(fence) = &shared.fence {
        fence.let_go(&shard.lease_name());
    }
    if let Some(k) = keeping.remove(&shard.index) {
        k.abort();
    }
    // The last receiver: its manager releases the Lease.
    if let Some((rx, task)) = leadership.remove(&shard.index) {
        drop(rx);
        let _ = tokio::time::timeout(Duration::from_secs(3), task).await;
    }
    tracing::info!(%shard, "handed the shard back: this replica held more than its share");
}

/// Tries to take `shard`'s Lease; its receiver when taken (writes are fenced by it).
async fn contest(shared: &Shared, shard: Shard, duration: Duration) -> Option<Leadership> {
    let client = &shared.management.client;
    // A free Lease is taken within a Lease duration (an expired one takes the manager a few
    // requests and a short random pause); dropping a slower attempt releases what it got.
    match tokio::time::timeout(
        duration,
        lead(client, &shared.opts, &shared.identity, shard),
    )
    .await
    {
        Ok(Ok(Some(leadership))) => {
            keep_fence(shared, shard).await;
            Some(leadership)
        }
        Ok(Ok(None)) => None,
        Ok(Err(e)) => {
            tracing::warn!(%shard, error = %e, "could not contest the shard's Lease");
            None
        }
        Err(_) => {
            tracing::debug!(%shard, "the shard's Lease went elsewhere");
            None
        }
    }
}

/// Resolves with `shard` when its Lease is lost: at its manager's first change after
/// taking it (held is all it says until then; a loss followed by a quick re-take is a
/// loss), or when the manager ends.
/// On a loss, closes the fence for good and tells the stack to stop, at once (the take
/// loop may be busy).
async fn lost_when(
    mut leadership: tokio::sync::watch::Receiver<bool>,
    shard: Shard,
    fence: Option<Arc<Fence>>,
    lost: tokio::sync::watch::Sender<Option<String>>,
) -> Shard {
    // The version `lead()` saw is the one this clone has seen: any change since is a loss.
    if *leadership.borrow() {
        let _ = leadership.changed().await;
    }
    if let Some(f) = &fence {
        f.lose();
    }
    tracing::warn!(%shard, "lost the shard's Lease; stopping");
    lost.send_replace(Some(format!("lost leadership of shard {shard}")));
    shard
}

/// Runs the controller stack once a shard is held, until shutdown or a lost Lease; the
/// stack follows the set as it grows.
async fn serve(
    shared: &Arc<Shared>,
    mut held: Held,
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
    tokio::select! {
        s = held.wait_for(|s| !s.is_empty()) => if s.is_err() { return },
        () = ended.clone() => return,
    }
    tracing::info!(shards = %*held.borrow(), "serving shards");
    run_stack(shared, held, ended).await;
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::survey::{assign, member_lease_name, shard_of_lease};

    fn set<T: Ord + Clone>(items: &[T]) -> BTreeSet<T> {
        items.iter().cloned().collect()
    }

    #[test]
    fn four_free_shards_over_two_replicas_are_two_each_the_same_in_both() {
        let members = set(&["a".to_string(), "b".to_string()]);
        let got = assign(4, &members, &BTreeMap::new(), &set(&[0, 1, 2, 3]));
        let per = |who: &str| got.values().filter(|m| *m == who).count();
        assert_eq!((per("a"), per("b")), (2, 2), "{got:?}");
        // One already held by b: the three free ones make it 2 and 2.
        let holders = BTreeMap::from([(0, "b".to_string())]);
        let got = assign(4, &members, &holders, &set(&[1, 2, 3]));
        assert_eq!(got.values().filter(|m| *m == "a").count(), 2, "{got:?}");
        assert_eq!(got.values().filter(|m| *m == "b").count(), 1, "{got:?}");
    }

    #[test]
    fn nobody_takes_beyond_the_ceiling_and_the_dead_holders_shards_are_shared() {
        // 2 shards over 3 replicas: one each for two of them, the third is a standby.
        let members = set(&["a".to_string(), "b".to_string(), "c".to_string()]);
        let got = assign(2, &members, &BTreeMap::new(), &set(&[0, 1]));
        assert_eq!(got.len(), 2);
        assert_eq!(got.values().collect::<BTreeSet<_>>().len(), 2, "{got:?}");
        // Everything held at the ceiling: nothing more for anyone.
        let holders = BTreeMap::from([(0, "a".to_string()), (1, "b".to_string())]);
        assert!(assign(2, &members, &holders, &set(&[])).is_empty());
        // b and c survive a, which held 0 and 1 of 4: one each.
        let members = set(&["b".to_string(), "c".to_string()]);
        let holders = BTreeMap::from([(2, "b".to_string()), (3, "c".to_string())]);
        let got = assign(4, &members, &holders, &set(&[0, 1]));
        assert_eq!(got.values().collect::<BTreeSet<_>>().len(), 2, "{got:?}");
    }

    #[test]
    fn lease_names_of_this_shard_count_only() {
        assert_eq!(shard_of_lease("enoki-controller-shard-3-of-4", 4), Some(3));
        assert_eq!(shard_of_lease("enoki-controller-shard-3-of-8", 4), None);
        assert_eq!(shard_of_lease("enoki-controller-shard-4-of-4", 4), None);
        assert_eq!(shard_of_lease("enoki-controller", 4), None);
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
