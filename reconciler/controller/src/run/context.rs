//! The state every reconcile shares: the client, the wasm host, the watch caches, and what
//! enoki remembers per Composition between passes.
//!
//! Everything remembered per Composition lives in the stores of [`super::memory::Memory`],
//! keyed by its UID, and is dropped with [`Context::forget`] when the Composition is gone (its finalizer released, or a
//! periodic sweep finds it missing from the cache); the per-Synthesizer module cache holds one
//! entry per Synthesizer; compiled modules are bounded by bytes in the wasm host.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};

use super::cluster::Cluster;
use super::shard::{Held, InFlight};
use super::watches::Watches;
use super::{Options, metrics};
use crate::synthesis::Module;
use crds::{Composition, ResourceSlice};

mod events;

mod plan_cache;
pub(crate) use plan_cache::BYTES_PER_RESOURCE;
use plan_cache::{PreparedLru, plan_cache_share};

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
        error: super::module::ModuleError,
        retry_at: Instant,
        failures: u32,
    },
}

/// Shared state of every reconcile.
pub struct Context {
    /// The management cluster's client (Compositions, Synthesizers, slices, inputs).
    pub(crate) client: Client,
    /// The management cluster (the one enoki runs against).
    pub(crate) management: Arc<Cluster>,
    /// Where emitted objects are applied: the management cluster, or the one of
    /// `--remote-kubeconfig`.
    pub(crate) target: Arc<Cluster>,
    pub(crate) host: Arc<wasm_host::Host>,
    pub(crate) opts: Options,
    /// The compiled module (or the last failure) of each Synthesizer, by generation.
    pub(crate) modules: Mutex<HashMap<String, ModuleEntry>>,
    pub(crate) watches: Arc<Watches>,
    pub(crate) metrics: metrics::Metrics,
    pub(crate) recorder: kube::runtime::events::Recorder,
    /// Who publishes the Events (`reportingController`/`reportingInstance`).
    reporter: kube::runtime::events::Reporter,
    /// When this process last started a deferred synthesis (the global rollout cooldown).
    rollout_last: Mutex<Option<std::time::SystemTime>>,
    /// Every Composition enoki reconciles (the controller's own cache).
    pub(crate) compositions: Store<Composition>,
    /// Every ResourceSlice in scope.
    pub(crate) slices: Store<ResourceSlice>,
    /// Bounds the syntheses running at once, across all Compositions.
    pub(crate) synthesis_slots: Arc<super::fair::FairGate>,
    /// Runs in progress with their deadlines (`/healthz`).
    pub(crate) slots: Arc<super::sandbox::Slots>,
    /// Bounds the sum of the memory limits of runs in progress.
    pub(crate) memory_budget: super::sandbox::MemoryBudget,
    /// The shards whose Compositions this Context reconciles (all, unless `--shards`).
    pub(crate) shards: Held,
    /// The reconciles running per shard (a shard is handed back once none of its runs).
    pub(crate) in_flight: Arc<InFlight>,
    /// What enoki remembers per Composition between reconciles, one store per concern.
    pub(crate) memory: super::memory::Memory,
    /// Ingested syntheses (by Composition UID), least recently used dropped first once they
    /// hold more than `--plan-cache-resources` resources; a dropped one is ingested again
    /// from its slices when next needed.
    prepared: Mutex<PreparedLru>,
    /// Consecutive reconcile failures per Composition (error_policy's backoff).
    pub(crate) failures: Mutex<HashMap<ObjectRef<Composition>, u32>>,
    /// Failures in a row of the other controllers' objects (`<kind>/<namespace>/<name>`),
    /// cleared by a success.
    pub(crate) other_failures: Mutex<HashMap<String, u32>>,
    /// Whether the Compositions named by `managed-by` labels still exist.
    pub(crate) owners: super::owners::Owners,
    /// The keys that seal Secrets in ResourceSlices.
    pub(crate) slice_keys: Arc<super::sealing::SliceKeys>,
    /// Verdicts of Synthesizers' namespace selectors.
    pub(crate) namespace_verdicts: reconciler_core::model::NamespaceVerdicts,
    /// Syntheses per Composition and per namespace, slice bytes per namespace.
    pub(crate) synthesis_rates: super::synthesis_rate::SynthesisRates,
    /// `--concurrency` reconcile turns, shared fairly between namespaces.
    pub(crate) fair: Arc<super::fair::FairGate>,
    /// Passes that read a synthesis whole to ingest it, at once (see [`INGESTING`]), shared
    /// fairly between namespaces.
    pub(crate) ingest_slots: Arc<super::fair::FairGate>,
    /// The Compositions Symphonies generate (set where the Symphony controller runs).
    pub(crate) symphony_compositions: std::sync::OnceLock<Store<Composition>>,
}

/// The parts [`Context::new`] takes.
pub(crate) struct Parts {
    pub management: Arc<Cluster>,
    pub target: Arc<Cluster>,
    pub host: Arc<wasm_host::Host>,
    pub opts: Options,
    pub watches: Arc<Watches>,
    pub metrics: metrics::Metrics,
    pub reporter: kube::runtime::events::Reporter,
    pub compositions: Store<Composition>,
    pub slices: Store<ResourceSlice>,
    pub slots: Arc<super::sandbox::Slots>,
    /// Bounds the syntheses running at once (shared by every shard of the process).
    pub synthesis_slots: Arc<super::fair::FairGate>,
    /// The memory budget of concurrent runs (shared likewise).
    pub memory_budget: super::sandbox::MemoryBudget,
    /// The shards whose Compositions this Context reconciles.
    pub shards: Held,
    /// The reconciles running per shard (shared by the process).
    pub in_flight: Arc<InFlight>,
    /// The keys that seal Secrets in ResourceSlices (shared by the process).
    pub slice_keys: Arc<super::sealing::SliceKeys>,
}

impl Parts {
    /// The process-wide synthesis limits of `opts` (one set per process, shared by shards).
    pub(crate) fn limits(
        opts: &Options,
    ) -> (Arc<super::fair::FairGate>, super::sandbox::MemoryBudget) {
        (
            super::fair::FairGate::new(opts.max_concurrent_syntheses.max(1)),
            super::sandbox::MemoryBudget::new(opts.sandbox.memory_budget_bytes),
        )
    }
}

impl Context {
    pub(crate) fn new(p: Parts) -> Context {
        let recorder =
            kube::runtime::events::Recorder::new(p.management.client.clone(), p.reporter.clone());
        let [c, n, b] = p.opts.synthesis_rates;
        let synthesis_rates = super::synthesis_rate::SynthesisRates::new(c, n, b);
        let fair = super::fair::FairGate::new(p.opts.concurrency);
        Context {
            client: p.management.client.clone(),
            management: p.management,
            target: p.target,
            host: p.host,
            opts: p.opts,
            modules: Mutex::new(HashMap::new()),
            watches: p.watches,
            metrics: p.metrics,
            recorder,
            reporter: p.reporter,
            rollout_last: Mutex::new(None),
            compositions: p.compositions,
            slices: p.slices,
            synthesis_slots: p.synthesis_slots,
            slots: p.slots,
            memory_budget: p.memory_budget,
            shards: p.shards,
            in_flight: p.in_flight,
            memory: super::memory::Memory::default(),
            prepared: Mutex::new(PreparedLru::default()),
            failures: Mutex::new(HashMap::new()),
            other_failures: Mutex::new(HashMap::new()),
            owners: super::owners::Owners::default(),
            slice_keys: p.slice_keys,
            namespace_verdicts: reconciler_core::model::NamespaceVerdicts::default(),
            synthesis_rates,
            fair,
            symphony_compositions: std::sync::OnceLock::new(),
            ingest_slots: super::fair::FairGate::new(INGESTING),
        }
    }

    /// The ServiceAccount `comp` acts as: `spec.serviceAccountName`, else
    /// `--default-service-account`; `None`: the controller's own identity.
    pub(crate) fn service_account(&self, comp: &Composition) -> Option<String> {
        comp.spec
            .service_account_name
            .clone()
            .filter(|s| !s.is_empty())
            .or_else(|| self.opts.default_service_account.clone())
    }

    /// The user `comp` acts as: `system:serviceaccount:<ns>:<sa>`, or `None` for the
    /// controller's own identity.
    fn user_of(&self, comp: &Composition) -> Option<String> {
        let sa = self.service_account(comp)?;
        let ns = comp.namespace().unwrap_or_default();
        Some(format!("system:serviceaccount:{ns}:{sa}"))
    }

    /// The client every read of inputs of `comp` is made with (management cluster): one
    /// impersonating its ServiceAccount (cached per account), or the controller's.
    ///
    /// # Errors
    /// When the client cannot be built.
    pub(crate) fn client_for(&self, comp: &Composition) -> Result<Client, kube::Error> {
        self.management.acting_as(self.user_of(comp).as_deref())
    }

    /// The client every read of live objects and every write of emitted objects of `comp` is
    /// made with (target cluster), impersonating as [`Context::client_for`] does. On a remote
    /// target the same user name is impersonated there: its RBAC decides.
    ///
    /// # Errors
    /// When the client cannot be built.
    pub(crate) fn target_for(&self, comp: &Composition) -> Result<Client, kube::Error> {
        let user = self
            .remote_user_of(comp)
            .map_err(|message| kube::Error::Service(message.into()))?;
        self.target.acting_as(user.as_deref())
    }

    /// The user `comp` acts as on the target cluster: on the management cluster its own; on a
    /// remote one its ServiceAccount in the namespace `--remote-namespace-map` maps its
    /// namespace to. `Err`: it impersonates and its namespace is not mapped. Pure.
    pub(crate) fn remote_user_of(&self, comp: &Composition) -> Result<Option<String>, String> {
        if self.opts.remote_kubeconfig.is_none() {
            return Ok(self.user_of(comp));
        }
        let Some(sa) = self.service_account(comp) else {
            return Ok(None);
        };
        let ns = comp.namespace().unwrap_or_default();
        match self.opts.remote_namespace_map.get(&ns) {
            Some(remote) => Ok(Some(format!("system:serviceaccount:{remote}:{sa}"))),
            None => Err(format!(
                "namespace {ns:?} is not mapped to a namespace of the remote cluster \
                 (--remote-namespace-map): its Compositions act as ServiceAccount {sa:?} and \
                 are applied nowhere"
            )),
        }
    }

    /// The ingested synthesis of Composition `uid` under `key`, if cached.
    pub(crate) fn prepared(&self, uid: &str, key: &str) -> Option<Arc<plan::Prepared>> {
        self.prepared.lock().get(uid, key)
    }

    /// Caches the ingested synthesis of Composition `uid` under `key`.
    /// It counts as its resources plus one per [`BYTES_PER_RESOURCE`] of the manifests it was
    /// ingested from (`bytes`): the cache is bounded by what it holds, however large the
    /// objects a synthesis emits.
    pub(crate) fn keep_prepared(
        &self,
        uid: &str,
        key: String,
        p: Arc<plan::Prepared>,
        bytes: usize,
    ) {
        let capacity = plan_cache_share(self.opts.plan_cache_resources, *self.shards.borrow());
        let weight = p.resources.len() + bytes / BYTES_PER_RESOURCE;
        // One synthesis worth more than the whole cache is not kept (it is ingested again
        // from its slices when next reconciled); any other evicts the least recently used.
        if weight > capacity && capacity > 1 {
            return;
        }
        self.prepared.lock().insert(uid, key, (p, weight), capacity);
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

    /// Drops everything remembered about a Composition that is gone, and the watches only it
    /// needed.
    pub(crate) fn forget(&self, comp: &ObjectRef<Composition>, uid: Option<&str>) {
        if let Some(uid) = uid {
            self.memory.forget(uid);
            self.prepared.lock().remove(uid);
        }
        self.failures.lock().remove(comp);
        self.synthesis_rates.forget(&format!(
            "{}/{}",
            comp.namespace.as_deref().unwrap_or_default(),
            comp.name
        ));
        let who = super::metrics::CompositionLabel {
            namespace: comp.namespace.clone().unwrap_or_default(),
            name: comp.name.clone(),
        };
        self.metrics.composition_reconciles.remove(&who);
        self.metrics.health.forget(&who);
        self.metrics
            .queue
            .forget(&format!("{}/{}", who.namespace, who.name));
        self.watches.forget(comp, uid);
    }

    /// Counts a run for `comp` ([`InFlight::enter`]) when its shard is still served here;
    /// `None` once the shard was handed back.
    pub(crate) fn serving(&self, comp: &Composition) -> Option<super::shard::Serving> {
        let shards = *self.shards.borrow();
        let index = super::shard::Shard::of_uid(&comp.uid().unwrap_or_default(), shards.count());
        let serving = self.in_flight.enter(index);
        self.shards.borrow().owns(comp).then_some(serving)
    }

    /// Forgets every Composition whose UID is no longer in the cache (deleted without
    /// enoki's finalizer, e.g. while enoki was down). Returns how many were dropped.
    pub(crate) fn sweep(&self) -> usize {
        let cached = self.compositions.state();
        // What Compositions no longer reconciled here read (deleted while enoki was down, or
        // of a shard handed over) is forgotten; whole inputs only they read are dropped.
        self.watches.retain_readers(|| {
            let held = *self.shards.borrow();
            self.compositions
                .state()
                .iter()
                .filter(|c| held.owns(c))
                .map(|c| ObjectRef::from_obj(c.as_ref()))
                .collect()
        });
        let live: std::collections::HashSet<String> = cached
            .iter()
            .filter_map(|c| c.metadata.uid.clone())
            .collect();
        let gone: Vec<String> = self
            .memory
            .uids()
            .into_iter()
            .filter(|k| !live.contains(k))
            .collect();
        for uid in &gone {
            self.memory.forget(uid);
            self.prepared.lock().remove(uid);
        }
        // Syntheses of shards handed over are dropped, and the cache is held to its share.
        let held = *self.shards.borrow();
        let share = plan_cache_share(self.opts.plan_cache_resources, held);
        self.prepared.lock().retain(|uid| held.owns_uid(uid), share);
        let cached: std::collections::HashSet<super::metrics::CompositionLabel> = self
            .compositions
            .state()
            .iter()
            .map(|c| super::metrics::CompositionLabel {
                namespace: c.metadata.namespace.clone().unwrap_or_default(),
                name: c.metadata.name.clone().unwrap_or_default(),
            })
            .collect();
        self.metrics.health.retain(&cached);
        gone.len()
    }

    /// How many Compositions have remembered state (for tests and metrics).
    pub(crate) fn remembered(&self) -> usize {
        self.memory.uids().len()
    }

    /// Resolves a GVK of the management cluster (inputs, instances) to its ApiResource and
    /// whether it is namespaced (cached; misses are retried).
    pub(crate) async fn resolve(
        &self,
        gvk: &GroupVersionKind,
    ) -> Result<(ApiResource, bool), kube::Error> {
        self.management.resolve(gvk).await
    }

    /// The same for an emitted kind, on the target cluster.
    pub(crate) async fn resolve_target(
        &self,
        gvk: &GroupVersionKind,
    ) -> Result<(ApiResource, bool), kube::Error> {
        self.target.resolve(gvk).await
    }

    /// Forgets an emitted kind that is no longer served (see [`Cluster::forget`]).
    pub(crate) fn forget_target(&self, gvk: &GroupVersionKind) {
        self.target.forget(gvk);
    }

    /// (group, kind) -> namespaced, for every emitted kind resolved so far.
    pub(crate) fn discovery_snapshot(&self) -> std::collections::BTreeMap<(String, String), bool> {
        self.target.scopes()
    }

    /// Claims the global rollout slot (Eno's cooldown): `None` when a deferred synthesis may
    /// start now (and the slot is taken), otherwise how long to wait. The last start is the
    /// later of this process's memory and the `initialized` time of the newest deferred
    /// synthesis in any Composition's status, so the cooldown survives a restart.
    pub(crate) fn rollout_slot(&self) -> Option<Duration> {
        let mut last = self.rollout_last.lock();
        let now = std::time::SystemTime::now();
        let persisted = self
            .compositions
            .state()
            .iter()
            .filter_map(|c| c.status.as_ref())
            .flat_map(|s| {
                [
                    &s.in_flight_synthesis,
                    &s.current_synthesis,
                    &s.previous_synthesis,
                ]
                .into_iter()
                .flatten()
                .filter(|syn| syn.deferred)
                .filter_map(|syn| syn.initialized.as_ref())
                .map(|t| std::time::SystemTime::from(t.0))
                .collect::<Vec<_>>()
            })
            .max();
        let prev = (*last).max(persisted);
        if let Some(prev) = prev {
            let since = now.duration_since(prev).unwrap_or_default();
            if since < self.opts.rollout_cooldown {
                return Some(self.opts.rollout_cooldown - since);
            }
        }
        *last = Some(now);
        None
    }
}

/// Passes that may read a synthesis's slices whole and parse them at once.
pub(crate) const INGESTING: usize = 2;

#[cfg(test)]
mod tests {
    use super::plan_cache_share;
    use crate::run::shard::Shards;

    #[test]
    fn a_replica_keeps_the_share_of_the_plan_cache_its_shards_are_of_the_fleet() {
        assert_eq!(plan_cache_share(5_000, Shards::ALL), 5_000);
        let four = Shards::none(4);
        assert_eq!(plan_cache_share(5_000, four.with(1).with(3)), 2_500);
        assert_eq!(plan_cache_share(5_000, four.with(2)), 1_250);
        assert_eq!(
            plan_cache_share(5_000, four.with(0).with(1).with(2).with(3)),
            5_000
        );
        // Holding nothing (between Leases) or a tiny bound still caches the newest.
        assert_eq!(plan_cache_share(5_000, four), 1);
        assert_eq!(plan_cache_share(1, four.with(0)), 1);
    }
}
