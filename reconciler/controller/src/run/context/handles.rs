//! The smaller handles of a [`Context`]: the caches a controller keeps, the limits every pass
//! shares, the Synthesizers' modules, and what is remembered between passes.

use super::*;

/// The caches of the controller: Compositions, ResourceSlices, inputs and managed objects.
pub(crate) struct Caches {
    /// Input and managed-object watches (and the Compositions each change re-reconciles).
    pub(crate) watches: Arc<Watches>,
    /// Every Composition enoki reconciles (the controller's own cache).
    pub(crate) compositions: Store<Composition>,
    /// Every ResourceSlice in scope.
    pub(crate) slices: Store<ResourceSlice>,
    /// The Compositions Symphonies generate (set where the Symphony controller runs).
    pub(crate) symphony_compositions: std::sync::OnceLock<Store<Composition>>,
}

/// What bounds the work of every pass: reconcile turns, syntheses, their memory, ingests,
/// synthesis rates, and the shards served.
pub(crate) struct Limits {
    /// Bounds the syntheses running at once, across all Compositions.
    pub(crate) synthesis_slots: Arc<super::super::fair::FairGate>,
    /// Runs in progress with their deadlines (`/healthz`).
    pub(crate) slots: Arc<super::super::sandbox::Slots>,
    /// Bounds the sum of the memory limits of runs in progress.
    pub(crate) memory_budget: super::super::sandbox::MemoryBudget,
    /// `--concurrency` reconcile turns, shared fairly between namespaces.
    pub(crate) fair: Arc<super::super::fair::FairGate>,
    /// Passes that read a synthesis whole to ingest it, at once (see [`INGESTING`]), shared
    /// fairly between namespaces.
    pub(crate) ingest_slots: Arc<super::super::fair::FairGate>,
    /// Syntheses per Composition and per namespace, slice bytes per namespace.
    pub(crate) synthesis_rates: super::super::synthesis_rate::SynthesisRates,
    /// The shards whose Compositions this Context reconciles (all, unless `--shards`).
    pub(crate) shards: Held,
    /// The reconciles running per shard (a shard is handed back once none of its runs).
    pub(crate) in_flight: Arc<InFlight>,
}

impl Limits {
    /// Counts a run for `comp` ([`InFlight::enter`]) when its shard is still served here;
    /// `None` once the shard was handed back.
    pub(crate) fn serving(&self, comp: &Composition) -> Option<super::super::shard::Serving> {
        let shards = *self.shards.borrow();
        let index =
            super::super::shard::Shard::of_uid(&comp.uid().unwrap_or_default(), shards.count());
        let serving = self.in_flight.enter(index);
        self.shards.borrow().owns(comp).then_some(serving)
    }
}

/// Which Synthesizer a cached module is for: its UID (a Synthesizer deleted and created again
/// under the same name starts over) and generation.
pub(crate) type ModuleVersion = (Option<String>, Option<i64>);

/// A Synthesizer's module as last fetched: ready, or failed and not retried before
/// `retry_at` (a bad module is not downloaded and compiled again on every reconcile).
#[derive(Clone)]
pub(crate) enum ModuleEntry {
    /// Fetched and compiled for this Synthesizer (UID) and generation.
    Ready(ModuleVersion, Module),
    /// Failed for this Synthesizer and generation; `failures` in a row.
    Failed {
        generation: ModuleVersion,
        error: super::super::module::ModuleError,
        retry_at: tokio::time::Instant,
        failures: u32,
    },
}

/// The wasm engine and each Synthesizer's compiled module (or its last failure).
pub(crate) struct Modules {
    /// The engine modules are compiled and run in.
    host: Arc<wasm_host::Host>,
    /// By Synthesizer name, for one UID and generation.
    entries: Mutex<HashMap<String, ModuleEntry>>,
    /// By revision ([`crate::run::rollout::revisions::pin_key`]): every module the Synthesizer
    /// controller loaded and every revision's, for the SynthesizerRevisions a rollout keeps
    /// Compositions on (bounded by [`PINNED_MODULES`], least recently used first).
    pinned: Mutex<HashMap<String, (u64, ModuleEntry)>>,
    /// Use counter of `pinned` (least recently used goes first).
    uses: std::sync::atomic::AtomicU64,
}

/// Modules kept by digest: a Synthesizer's rolling and stable revisions, for a few.
const PINNED_MODULES: usize = 64;

impl Modules {
    /// No module cached yet, run in `host`.
    pub(crate) fn new(host: Arc<wasm_host::Host>) -> Modules {
        Modules {
            host,
            entries: Mutex::new(HashMap::new()),
            pinned: Mutex::new(HashMap::new()),
            uses: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The module (or failure) kept under `digest` (a pin key).
    pub(crate) fn pinned(&self, digest: &str) -> Option<ModuleEntry> {
        let tick = self.tick();
        let mut map = self.pinned.lock();
        let hit = map.get_mut(digest)?;
        hit.0 = tick;
        Some(hit.1.clone())
    }

    fn tick(&self) -> u64 {
        self.uses.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Keeps the module (or failure) of `digest`; past the bound, a failure goes first, else
    /// the module used least recently.
    pub(crate) fn keep_pinned(&self, digest: String, entry: ModuleEntry) {
        let tick = self.tick();
        let mut map = self.pinned.lock();
        if map.len() >= PINNED_MODULES && !map.contains_key(&digest) {
            let evict = map
                .iter()
                .min_by_key(|(_, (t, e))| (matches!(e, ModuleEntry::Ready(..)), *t))
                .map(|(k, _)| k.clone());
            if let Some(k) = evict {
                map.remove(&k);
            }
        }
        map.insert(digest, (tick, entry));
    }

    /// The engine.
    pub(crate) fn host(&self) -> &Arc<wasm_host::Host> {
        &self.host
    }

    /// The module (or failure) cached for Synthesizer `name`.
    pub(crate) fn cached(&self, name: &str) -> Option<ModuleEntry> {
        self.entries.lock().get(name).cloned()
    }

    /// Caches the module (or failure) of Synthesizer `name`.
    pub(crate) fn keep(&self, name: String, entry: ModuleEntry) {
        self.entries.lock().insert(name, entry);
    }
}

/// What is remembered between passes besides the plan cache: per-Composition memory, failure
/// counts, owners seen, namespace verdicts, the rollout cooldown.
#[derive(Default)]
pub(crate) struct State {
    /// What enoki remembers per Composition between reconciles, one store per concern.
    pub(crate) memory: super::super::memory::Memory,
    /// Consecutive reconcile failures per Composition (error_policy's backoff).
    failures: Mutex<HashMap<ObjectRef<Composition>, u32>>,
    /// Failures in a row of the other controllers' objects (`<kind>/<namespace>/<name>`),
    /// cleared by a success.
    other_failures: Mutex<HashMap<String, u32>>,
    /// Whether the Compositions named by `managed-by` labels still exist.
    pub(crate) owners: super::super::owners::Owners,
    /// Verdicts of Synthesizers' namespace selectors.
    pub(crate) namespace_verdicts: reconciler_core::model::NamespaceVerdicts,
    /// When this process last started a deferred synthesis (the global rollout cooldown).
    pub(super) rollout_last: Mutex<Option<std::time::SystemTime>>,
}

impl State {
    /// Counts one more failed pass of Composition `comp`; returns how many in a row.
    pub(crate) fn count_pass_failure(&self, comp: &ObjectRef<Composition>) -> u32 {
        let mut f = self.failures.lock();
        let n = f.entry(comp.clone()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    /// Forgets the failed passes of Composition `comp` (a pass succeeded, or it is gone).
    pub(crate) fn clear_pass_failures(&self, comp: &ObjectRef<Composition>) {
        self.failures.lock().remove(comp);
    }

    /// Counts one more failure in a row of object `key`; returns how many.
    pub(crate) fn count_failure(&self, key: String) -> u32 {
        let mut f = self.other_failures.lock();
        // Keys of objects deleted while failing are never cleared by a success: bounded.
        if f.len() >= 10_000 && !f.contains_key(&key) {
            f.clear();
        }
        let n = f.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    /// Forgets the failures of object `key` (it reconciled).
    pub(crate) fn clear_failures(&self, key: &str) {
        self.other_failures.lock().remove(key);
    }
}
