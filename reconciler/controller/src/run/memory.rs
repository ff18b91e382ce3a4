//! What enoki remembers per Composition between reconciles: one store per concern, each with
//! its own lock, so the slice reader, the synthesis, the apply pass and the status writer
//! never wait on each other's state. Every store is keyed by the Composition's UID and
//! dropped together by [`Memory::forget`] (its finalizer released, or a sweep finds it gone).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Instant;

use crds::{CompositionStatus, ResourceState};
use plan::ResourceKey;
use reconciler_core::fights::Fight;
use reconciler_core::model::{Backoff, Failed, Parsed};

/// One kind of per-Composition state behind its own lock.
pub(crate) struct PerComposition<T>(Mutex<HashMap<String, T>>);

impl<T> Default for PerComposition<T> {
    fn default() -> Self {
        PerComposition(Mutex::new(HashMap::new()))
    }
}

impl<T: Default> PerComposition<T> {
    /// Runs `f` on the state of Composition `uid` (created empty on first use).
    fn with<R>(&self, uid: &str, f: impl FnOnce(&mut T) -> R) -> R {
        f(locked(&self.0).entry(uid.to_string()).or_default())
    }

    fn remove(&self, uid: &str) {
        locked(&self.0).remove(uid);
    }

    fn keys(&self, into: &mut BTreeSet<String>) {
        into.extend(locked(&self.0).keys().cloned());
    }
}

/// The state behind `lock`, also after a panic while it was held (the lock has no poisoning:
/// the state is used as the pass left it, so no later write is dropped).
fn locked<T>(lock: &Mutex<T>) -> parking_lot::MutexGuard<'_, T> {
    lock.lock()
}

/// The slices of the current synthesis as read: parsed once per slice.
#[derive(Default)]
pub(crate) struct SliceMemory {
    /// Parsed manifests per slice name (with the slice's generation).
    pub parsed: HashMap<String, (Option<i64>, Arc<Parsed>)>,
    /// The same for each ResourceSlice's status, by slice name.
    pub slice_status: HashMap<String, (String, Vec<ResourceState>)>,
    /// States kept instead of written (only resourceVersions moved), by slice name, with the
    /// version of the states they follow.
    pub kept: HashMap<String, (String, Vec<ResourceState>)>,
    /// Slices this process just created, whole, by name (with when): the apply pass that
    /// follows a synthesis reads them here instead of with two GETs (their manifests never
    /// change; their states are the ones above).
    pub fresh: HashMap<String, (Instant, Arc<crds::ResourceSlice>)>,
    /// The synthesis (UUID) whose sealed Secrets no loaded key opened when it was ingested:
    /// its slices count as missing (the cache's compact copies keep only the key's id, which
    /// a key made anew under the same id would pass).
    pub unopened: Option<String>,
}

/// The synthesis in progress or last failed.
#[derive(Default)]
pub(crate) struct SynthesisMemory {
    /// Instance mode: the status write-back of the current synthesis (`Some(None)`: it
    /// emitted none; `None`: unknown, e.g. after a restart).
    pub status_write: Option<Option<serde_json::Value>>,
    /// The output of a synthesis whose slices could not be written yet, by trigger
    /// fingerprint, so a retry writes them without running the synthesizer again.
    pub pending_output: Option<(String, crate::synthesis::Synthesized)>,
    /// Slices written for a new synthesis whose status write has not succeeded yet: (trigger
    /// fingerprint, the synthesis as it is to be recorded). A retry records it again instead
    /// of synthesizing and writing new slices; they are deleted when the write fails for good.
    pub unrecorded: Option<(String, crds::Synthesis)>,
    /// Slices of a synthesis never recorded stood in for the current one when the last
    /// synthesis was stored: they go once it is recorded.
    pub orphaned: bool,
    /// A synthesis of this fingerprint failed: not run again before `retry_at`.
    pub failed: Option<Failed>,
}

/// How long a slice this process created is served from memory at most
/// ([`SliceMemory::fresh`]).
pub(crate) const FRESH_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// The apply pass over the current synthesis.
#[derive(Default)]
pub(crate) struct ApplyMemory {
    /// Resources whose writes keep failing.
    pub backoff: HashMap<ResourceKey, Backoff>,
    /// Drift corrections per resource (another writer that keeps changing it).
    pub fights: HashMap<ResourceKey, Fight>,
    /// `drift: interval`: when each resource was last checked against its live object.
    pub interval_checks: HashMap<ResourceKey, Instant>,
    /// Resources a guarded first write found existing though the cache lacked them (created
    /// a moment ago, or not labelled as managed): read before they are written again.
    pub read_first: std::collections::BTreeSet<ResourceKey>,
}

/// What enoki last reported: the status it wrote and the Warning Events it published.
#[derive(Default)]
pub(crate) struct ReportMemory {
    /// The status enoki last wrote and the cache versions that do not show it yet, so a pass
    /// that starts from such a cache entry still sees it.
    pub written: Option<Written>,
    /// The note of the last Warning Event per reason (`ApplyFailed`, `Conflict`,
    /// `InvalidAnnotation`): the same note is not published again on every pass.
    pub reported: HashMap<&'static str, String>,
}

/// A status enoki wrote, as the cache may not show it yet.
#[derive(Debug, Clone)]
pub(crate) struct Written {
    /// The resourceVersion the server returned for the write.
    pub rv: String,
    /// Cache versions behind it: the one the first of enoki's writes in a row was based on,
    /// and those of enoki's writes since (a cache at one of them has not caught up).
    pub behind: Vec<String>,
    /// The status written.
    pub status: CompositionStatus,
}

/// Every per-Composition store.
#[derive(Default)]
pub(crate) struct Memory {
    slices: PerComposition<SliceMemory>,
    synthesis: PerComposition<SynthesisMemory>,
    apply: PerComposition<ApplyMemory>,
    reports: PerComposition<ReportMemory>,
}

impl Memory {
    /// Runs `f` on the slices read of Composition `uid`.
    pub(crate) fn slices<R>(&self, uid: &str, f: impl FnOnce(&mut SliceMemory) -> R) -> R {
        self.slices.with(uid, f)
    }

    /// Runs `f` on the synthesis state of Composition `uid`.
    pub(crate) fn synthesis<R>(&self, uid: &str, f: impl FnOnce(&mut SynthesisMemory) -> R) -> R {
        self.synthesis.with(uid, f)
    }

    /// Runs `f` on the apply state of Composition `uid`.
    pub(crate) fn apply<R>(&self, uid: &str, f: impl FnOnce(&mut ApplyMemory) -> R) -> R {
        self.apply.with(uid, f)
    }

    /// Runs `f` on what was last reported of Composition `uid`.
    pub(crate) fn reports<R>(&self, uid: &str, f: impl FnOnce(&mut ReportMemory) -> R) -> R {
        self.reports.with(uid, f)
    }

    /// Drops everything remembered about Composition `uid`.
    pub(crate) fn forget(&self, uid: &str) {
        self.slices.remove(uid);
        self.synthesis.remove(uid);
        self.apply.remove(uid);
        self.reports.remove(uid);
    }

    /// The UIDs of every Composition something is remembered about.
    pub(crate) fn uids(&self) -> BTreeSet<String> {
        let mut uids = BTreeSet::new();
        self.slices.keys(&mut uids);
        self.synthesis.keys(&mut uids);
        self.apply.keys(&mut uids);
        self.reports.keys(&mut uids);
        uids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_that_panicked_holding_a_store_does_not_drop_later_writes() {
        let store: PerComposition<SliceMemory> = PerComposition::default();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            store.with("u", |m| {
                m.unopened = Some("first".into());
                panic!("a pass panics holding the lock");
            })
        }));
        assert!(panicked.is_err());
        store.with("u", |m| m.unopened = Some("second".into()));
        assert_eq!(
            store.with("u", |m| m.unopened.clone()).as_deref(),
            Some("second")
        );
        let mut uids = BTreeSet::new();
        store.keys(&mut uids);
        assert_eq!(uids.len(), 1);
    }
}
