//! Compositions at rest: a resync of a Composition that nothing touched since its last full
//! pass confirms that from the watches instead of planning again.
//!
//! Every change a watch reports that concerns a Composition — an input, its Synthesizer, a
//! managed object, a dependency, the cluster's capabilities — wakes it through
//! [`super::watches::Watches`], which counts the wake here first (its *epoch*). A full pass
//! that ends at rest (Ready, nothing written or left to do, nothing due before the resync)
//! records what it saw: the Composition's resourceVersion, its epoch when the pass started and
//! the resourceVersions of its ResourceSlices. A later pass of the same Composition that finds
//! all three unchanged has nothing to learn: every object it would compare is known unchanged
//! by its watch, so it counts its resources as checked and waits for the next resync, making
//! no request and no plan. A full pass still runs at least every [`FULL_PASS_EVERY`] (Eno's
//! resync interval): what no watch reports (a namespace's labels, a slice key loaded, a
//! `drift: interval` due) is looked at then.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use parking_lot::Mutex;

use crds::{Composition, ResourceSlice};

/// The longest a Composition at rest goes without a full pass.
pub(crate) const FULL_PASS_EVERY: Duration = Duration::from_secs(300);

/// The resyncs of Compositions at rest come due on whole multiples of this (from the
/// process's start): a fleet's checks then share wakeups instead of one each.
const COALESCE: Duration = Duration::from_secs(1);

/// `resync` from now, rounded to the nearest multiple of [`COALESCE`] since the process
/// started (at most half of it sooner or later: a pass that runs just after a multiple comes
/// due `resync` later on average, not a whole step more).
pub(crate) fn coalesced(resync: Duration) -> Duration {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    let now = origin.elapsed();
    let step = COALESCE.as_nanos().max(1);
    let due = (now + resync).as_nanos();
    let nearest = (due + step / 2) / step * step;
    let nearest = Duration::from_nanos(u64::try_from(nearest).unwrap_or(u64::MAX));
    nearest.saturating_sub(now).max(resync / 2)
}

/// What a full pass saw when it started: the Composition's wakes and version, the watches'
/// relists, its slices' versions.
pub(crate) struct Started {
    resource_version: String,
    epoch: u64,
    relists: u64,
    /// The resourceVersion of each slice of its current synthesis, in status order (empty
    /// for one the cache lacks).
    slices: Vec<String>,
}

/// What the last full pass at rest of one Composition saw, and the resources it checked.
struct AtRest {
    seen: Started,
    resources: u64,
    at: Instant,
}

/// Wakes per Composition, and the full passes that ended at rest.
#[derive(Default)]
pub(crate) struct Rest {
    epochs: Mutex<HashMap<ObjectRef<Composition>, u64>>,
    /// Relists of any input or managed-object watch: a relist replaces a cache at once (what
    /// changed or went while the watch was away is not told per object), so every
    /// Composition gets a full pass after one.
    relists: std::sync::atomic::AtomicU64,
    settled: Mutex<HashMap<String, AtRest>>,
    /// The resourceVersion of each object enoki's own last write returned, by (group, kind,
    /// namespace, name), until its watch event arrives: the echo of enoki's own write wakes
    /// nobody (its pass recorded it already).
    own: Mutex<HashMap<(String, String, String, String), String>>,
}

/// Own writes remembered at most (their echoes normally arrive within milliseconds).
const MAX_OWN: usize = 200_000;

impl Rest {
    /// A watch reported a change that concerns `comp`.
    pub(crate) fn woke(&self, comp: &ObjectRef<Composition>) {
        *self.epochs.lock().entry(comp.clone()).or_default() += 1;
    }

    /// enoki wrote the object (`group`, `kind`, `namespace`, `name`); the server returned
    /// `resource_version`.
    pub(crate) fn wrote(&self, key: (String, String, String, String), resource_version: String) {
        let mut own = self.own.lock();
        if own.len() >= MAX_OWN {
            own.clear();
        }
        own.insert(key, resource_version);
    }

    /// Whether a watch event of the object at `resource_version` is the echo of enoki's own
    /// last write of it (forgotten then).
    pub(crate) fn echo(&self, key: (&str, &str, &str, &str), resource_version: &str) -> bool {
        let mut own = self.own.lock();
        let k = (
            key.0.to_string(),
            key.1.to_string(),
            key.2.to_string(),
            key.3.to_string(),
        );
        match own.get(&k) {
            Some(rv) if rv == resource_version => {
                own.remove(&k);
                true
            }
            _ => false,
        }
    }

    /// A watch's cache was replaced by a relist.
    pub(crate) fn relisted(&self) {
        self.relists
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The wakes of `comp` so far.
    pub(crate) fn epoch(&self, comp: &ObjectRef<Composition>) -> u64 {
        self.epochs.lock().get(comp).copied().unwrap_or(0)
    }

    /// What a pass of `comp` starting now sees.
    pub(crate) fn start(&self, comp: &Composition, slices: &Store<ResourceSlice>) -> Started {
        Started {
            resource_version: comp.resource_version().unwrap_or_default(),
            epoch: self.epoch(&ObjectRef::from_obj(comp)),
            relists: self.relists.load(std::sync::atomic::Ordering::Relaxed),
            slices: slice_versions(comp, slices),
        }
    }

    /// Records that a full pass of `comp` that started having seen `seen` ended at rest,
    /// having checked `resources` resources (not while a slice is missing from the cache).
    pub(crate) fn settle(&self, comp: &Composition, seen: Started, resources: u64) {
        let Some(uid) = comp.uid() else { return };
        if seen.slices.iter().any(String::is_empty) {
            self.unsettle(&uid);
            return;
        }
        let at_rest = AtRest {
            seen,
            resources,
            at: Instant::now(),
        };
        self.settled.lock().insert(uid, at_rest);
    }

    /// Forgets the rest of the Composition with `uid` (its pass was not at rest, or it is
    /// gone).
    pub(crate) fn unsettle(&self, uid: &str) {
        self.settled.lock().remove(uid);
    }

    /// Forgets a Composition that is gone.
    pub(crate) fn forget(&self, comp: &ObjectRef<Composition>, uid: Option<&str>) {
        self.epochs.lock().remove(comp);
        if let Some(uid) = uid {
            self.unsettle(uid);
        }
    }

    /// Keeps only the Compositions `keep` names (by UID and reference): the others were
    /// deleted or handed to another replica.
    pub(crate) fn retain(
        &self,
        uids: &std::collections::HashSet<String>,
        refs: &std::collections::HashSet<ObjectRef<Composition>>,
    ) {
        self.settled.lock().retain(|uid, _| uids.contains(uid));
        self.epochs.lock().retain(|r, _| refs.contains(r));
    }

    /// The resources a pass of `comp` may count as checked without planning: `Some` when its
    /// last full pass ended at rest less than [`FULL_PASS_EVERY`] ago and nothing changed
    /// since (its resourceVersion, its wakes, the watches' relists, its slices).
    pub(crate) fn unchanged(
        &self,
        comp: &Composition,
        slices: &Store<ResourceSlice>,
    ) -> Option<u64> {
        let uid = comp.metadata.uid.as_deref()?;
        let now = {
            let settled = self.settled.lock();
            let r = settled.get(uid)?;
            if r.at.elapsed() >= FULL_PASS_EVERY
                || comp.metadata.resource_version.as_deref()
                    != Some(r.seen.resource_version.as_str())
                || self.relists.load(std::sync::atomic::Ordering::Relaxed) != r.seen.relists
            {
                return None;
            }
            (r.seen.epoch, r.resources)
        };
        if self.epoch(&ObjectRef::from_obj(comp)) != now.0 {
            return None;
        }
        let versions = slice_versions(comp, slices);
        let settled = self.settled.lock();
        (settled.get(uid)?.seen.slices == versions).then_some(now.1)
    }
}

/// The cached resourceVersion of each slice of `comp`'s current synthesis (empty for one the
/// cache lacks).
fn slice_versions(comp: &Composition, slices: &Store<ResourceSlice>) -> Vec<String> {
    let ns = comp.namespace().unwrap_or_default();
    comp.status
        .as_ref()
        .and_then(|s| s.current_synthesis.as_ref())
        .map(|c| {
            c.resource_slices
                .iter()
                .map(|r| {
                    slices
                        .get(&ObjectRef::new(&r.name).within(&ns))
                        .and_then(|s| s.resource_version())
                        .unwrap_or_default()
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coalesced_resync_comes_due_on_a_whole_second_within_half_a_second() {
        for resync in [Duration::from_millis(1500), Duration::from_secs(5)] {
            let d = coalesced(resync);
            let half = COALESCE / 2;
            assert!(d + half >= resync && d <= resync + half, "{d:?}");
        }
    }

    #[test]
    fn only_the_echo_of_enokis_own_last_write_is_one() {
        let rest = Rest::default();
        let key = || {
            (
                String::new(),
                "ConfigMap".to_string(),
                "n".to_string(),
                "a".to_string(),
            )
        };
        rest.wrote(key(), "7".into());
        // Someone else's later write is no echo; enoki's is, once.
        assert!(!rest.echo(("", "ConfigMap", "n", "a"), "8"));
        assert!(rest.echo(("", "ConfigMap", "n", "a"), "7"));
        assert!(!rest.echo(("", "ConfigMap", "n", "a"), "7"));
    }

    #[test]
    fn wakes_are_counted_per_composition() {
        let rest = Rest::default();
        let a = ObjectRef::<Composition>::new("a").within("n");
        let b = ObjectRef::<Composition>::new("b").within("n");
        rest.woke(&a);
        rest.woke(&a);
        assert_eq!((rest.epoch(&a), rest.epoch(&b)), (2, 0));
        rest.forget(&a, None);
        assert_eq!(rest.epoch(&a), 0);
    }
}
