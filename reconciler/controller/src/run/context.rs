//! The state every reconcile shares: the client, the wasm host, the watch caches, and what
//! enoki remembers per Composition between passes.
//!
//! A [`Context`] is a few handles ([`Clusters`], [`Caches`], [`Reporter`], [`Limits`],
//! [`Modules`], [`PlanCache`], [`State`], and the [`Reads`] view of them): a function that uses
//! one handle takes that handle; the passes that orchestrate several take the Context.
//! Everything remembered per Composition lives in the stores of [`super::memory::Memory`],
//! keyed by its UID, and is dropped with [`Context::forget`] when the Composition is gone (its
//! finalizer released, or a periodic sweep finds it missing from the cache); the
//! per-Synthesizer module cache holds one entry per Synthesizer; compiled modules are bounded
//! by bytes in the wasm host.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};

use super::cluster::Cluster;
use super::shard::{Held, InFlight};
use super::watches::Watches;
use super::{Options, metrics};
use crate::synthesis::Module;
use crds::{Composition, ResourceSlice};

mod clusters;
mod events;
mod handles;
mod plan_cache;
mod reads;
pub(crate) use clusters::{Clusters, Tenancy};
pub(crate) use events::Reporter;
pub(crate) use handles::{Caches, Limits, ModuleEntry, ModuleVersion, Modules, State};
pub(crate) use plan_cache::PlanCache;
#[cfg(test)]
use plan_cache::plan_cache_share;
pub(crate) use reads::Reads;

/// Shared state of every reconcile, as a few handles (`enoki diff` builds only the clusters
/// handle and an uncached reads handle, with its own engine and options: no controller).
pub struct Context {
    /// The management and target clusters, and the account each Composition acts as.
    pub(crate) clusters: Clusters,
    /// The controller's caches (Compositions, slices, inputs, managed objects).
    pub(crate) caches: Caches,
    /// Events and metrics.
    pub(crate) report: Reporter,
    /// Reconcile turns, synthesis slots and budgets, shards served.
    pub(crate) limits: Limits,
    /// The wasm engine and each Synthesizer's module.
    pub(crate) modules: Modules,
    /// Ingested syntheses by Composition UID (bounded).
    pub(crate) plans: PlanCache,
    /// What is remembered between passes.
    pub(crate) state: State,
    /// The keys that seal Secrets in ResourceSlices.
    pub(crate) slice_keys: Arc<super::sealing::SliceKeys>,
    /// The controller's options.
    pub(crate) opts: Options,
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
            super::fair::FairGate::new(opts.synthesis.max_concurrent_syntheses.max(1)),
            super::sandbox::MemoryBudget::new(opts.sandbox.memory_budget_bytes),
        )
    }
}

impl Context {
    pub(crate) fn new(p: Parts) -> Context {
        let [c, n, b] = p.opts.synthesis.synthesis_rates;
        Context {
            clusters: Clusters::new(p.management.clone(), p.target, Tenancy::of(&p.opts)),
            caches: Caches {
                watches: p.watches,
                compositions: p.compositions,
                slices: p.slices,
                symphony_compositions: std::sync::OnceLock::new(),
            },
            report: Reporter::new(p.management.client.clone(), p.reporter, p.metrics),
            limits: Limits {
                synthesis_slots: p.synthesis_slots,
                slots: p.slots,
                memory_budget: p.memory_budget,
                fair: super::fair::FairGate::new(p.opts.concurrency),
                ingest_slots: super::fair::FairGate::new(INGESTING),
                synthesis_rates: super::synthesis_rate::SynthesisRates::new(c, n, b),
                shards: p.shards.clone(),
                in_flight: p.in_flight,
            },
            modules: Modules::new(p.host),
            plans: PlanCache::new(p.opts.storage.plan_cache_resources, p.shards),
            state: State::default(),
            slice_keys: p.slice_keys,
            opts: p.opts,
        }
    }

    /// Drops everything remembered about a Composition that is gone, and the watches only it
    /// needed.
    pub(crate) fn forget(&self, comp: &ObjectRef<Composition>, uid: Option<&str>) {
        if let Some(uid) = uid {
            self.state.memory.forget(uid);
            self.plans.remove(uid);
            self.report.metrics.quota.forget(uid);
        }
        self.state.clear_pass_failures(comp);
        self.caches.watches.rest.forget(comp, uid);
        self.limits.synthesis_rates.forget(&format!(
            "{}/{}",
            comp.namespace.as_deref().unwrap_or_default(),
            comp.name
        ));
        let who = super::metrics::CompositionLabel {
            namespace: comp.namespace.clone().unwrap_or_default(),
            name: comp.name.clone(),
        };
        let metrics = &self.report.metrics;
        metrics.composition_reconciles.remove(&who);
        metrics.health.forget(&who);
        metrics
            .queue
            .forget(&format!("{}/{}", who.namespace, who.name));
        self.caches.watches.forget(comp, uid);
    }

    /// Forgets every Composition whose UID is no longer in the cache (deleted without
    /// enoki's finalizer, e.g. while enoki was down). Returns how many were dropped.
    pub(crate) fn sweep(&self) -> usize {
        let compositions = &self.caches.compositions;
        let cached = compositions.state();
        // What Compositions no longer reconciled here read (deleted while enoki was down, or
        // of a shard handed over) is forgotten; whole inputs only they read are dropped.
        self.caches.watches.retain_readers(|| {
            let held = *self.limits.shards.borrow();
            compositions
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
            .state
            .memory
            .uids()
            .into_iter()
            .filter(|k| !live.contains(k))
            .collect();
        for uid in &gone {
            self.state.memory.forget(uid);
            self.plans.remove(uid);
            self.report.metrics.quota.forget(uid);
        }
        // Slices created a while ago are no longer served from memory.
        for uid in self.state.memory.uids() {
            self.state.memory.slices(&uid, |m| {
                m.fresh
                    .retain(|_, (at, _)| at.elapsed() < super::memory::FRESH_FOR)
            });
        }
        // Rest records of Compositions gone or handed over.
        let held = *self.limits.shards.borrow();
        let served: Vec<_> = cached.iter().filter(|c| held.owns(c)).collect();
        self.caches.watches.rest.retain(
            &served
                .iter()
                .filter_map(|c| c.metadata.uid.clone())
                .collect(),
            &served
                .iter()
                .map(|c| ObjectRef::from_obj(c.as_ref()))
                .collect(),
        );
        // Syntheses of shards handed over are dropped, and the cache is held to its share.
        self.plans.hold_to_share();
        let cached: std::collections::HashSet<super::metrics::CompositionLabel> = compositions
            .state()
            .iter()
            .map(|c| super::metrics::CompositionLabel {
                namespace: c.metadata.namespace.clone().unwrap_or_default(),
                name: c.metadata.name.clone().unwrap_or_default(),
            })
            .collect();
        self.report.metrics.health.retain(&cached);
        gone.len()
    }

    /// How many Compositions have remembered state (for tests and metrics).
    pub(crate) fn remembered(&self) -> usize {
        self.state.memory.uids().len()
    }

    /// Claims the global rollout slot (Eno's cooldown): `Ok` (the last start before this one
    /// and this one's, for [`Self::give_back_rollout_slot`]) when a deferred synthesis may
    /// start now and the slot is taken, otherwise how long to wait. The last start is the
    /// later of this process's memory and the `initialized` time of the newest deferred
    /// synthesis in any Composition's status, so the cooldown survives a restart.
    pub(crate) fn rollout_slot(&self) -> Result<RolloutClaim, Duration> {
        let mut last = self.state.rollout_last.lock();
        let now = std::time::SystemTime::now();
        let persisted = self
            .caches
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
            if since < self.opts.synthesis.rollout_cooldown {
                return Err(self.opts.synthesis.rollout_cooldown - since);
            }
        }
        Ok((last.replace(now), now))
    }

    /// Gives back the slot a synthesis that did not start claimed: the last start is again
    /// the one before it, unless another claim came since.
    pub(crate) fn give_back_rollout_slot(&self, (before, at): RolloutClaim) {
        let mut last = self.state.rollout_last.lock();
        if *last == Some(at) {
            *last = before;
        }
    }
}

/// A claimed rollout slot: the last start before it, and its own.
pub(crate) type RolloutClaim = (Option<std::time::SystemTime>, std::time::SystemTime);

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
