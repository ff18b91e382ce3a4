//! Per-Composition health series, set from the status each pass writes and removed with the
//! Composition: `enoki_composition_{ready,synthesized,reconciled}` (1/0),
//! `enoki_composition_stuck` (1 when not Ready for longer than `--stuck-threshold`),
//! `enoki_composition_inputs_in_lockstep` (0 while input revisions are out of lockstep),
//! `enoki_composition_synthesis_timestamp_seconds` (when the current synthesis was made: its
//! age is `time() - …`) and `enoki_composition_ready_transition_timestamp_seconds` (when Ready
//! last changed). Plus `enoki_build_info{version,commit}` = 1.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::labels::{CompositionLabel, FloatGauge};
use crds::CompositionStatus;
use crds::names::{conditions, reasons};
use reconciler_core::condition::holds;

/// The health series of every Composition.
#[derive(Clone, Default)]
pub struct Health {
    /// Whose series exist (to drop those of Compositions gone from the cache).
    known: std::sync::Arc<parking_lot::Mutex<std::collections::HashSet<CompositionLabel>>>,
    ready: Family<CompositionLabel, Gauge>,
    synthesized: Family<CompositionLabel, Gauge>,
    reconciled: Family<CompositionLabel, Gauge>,
    stuck: Family<CompositionLabel, Gauge>,
    lockstep: Family<CompositionLabel, Gauge>,
    synthesis_time: Family<CompositionLabel, FloatGauge>,
    ready_transition: Family<CompositionLabel, FloatGauge>,
}

/// Labels of `enoki_build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    commit: String,
}

/// The commit enoki was built from (`unknown` outside a git checkout).
pub const COMMIT: &str = env!("ENOKI_COMMIT");
/// The commit's date, `YYYY-MM-DD` (`unknown` outside a git checkout): the build is
/// reproducible, so this is the source's date, not the build's.
pub const BUILD_DATE: &str = env!("ENOKI_BUILD_DATE");

fn seconds(t: &Time) -> f64 {
    t.0.as_second() as f64
}

impl Health {
    /// Registers the series (and `enoki_build_info`) in `registry`.
    pub fn register(registry: &mut Registry) -> Health {
        let h = Health::default();
        let gauges = [
            (
                "enoki_composition_ready",
                "1 when the Composition is Ready",
                &h.ready,
            ),
            (
                "enoki_composition_synthesized",
                "1 when the Composition's Synthesized condition is True",
                &h.synthesized,
            ),
            (
                "enoki_composition_reconciled",
                "1 when every resource of the current synthesis is applied",
                &h.reconciled,
            ),
            (
                "enoki_composition_stuck",
                "1 when the Composition has not been Ready for longer than --stuck-threshold",
                &h.stuck,
            ),
            (
                "enoki_composition_inputs_in_lockstep",
                "0 while the Composition's input revisions are out of lockstep",
                &h.lockstep,
            ),
        ];
        for (name, help, family) in gauges {
            registry.register(name, help, family.clone());
        }
        registry.register(
            "enoki_composition_synthesis_timestamp_seconds",
            "When the current synthesis was made (Unix seconds)",
            h.synthesis_time.clone(),
        );
        registry.register(
            "enoki_composition_ready_transition_timestamp_seconds",
            "When the Composition's Ready condition last changed (Unix seconds)",
            h.ready_transition.clone(),
        );
        let info = Family::<BuildLabels, Gauge>::default();
        info.get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION").into(),
            commit: COMMIT.into(),
        })
        .set(1);
        registry.register("enoki_build_info", "enoki's version and commit", info);
        h
    }

    /// Sets the series of `who` from its status (`created`: the Composition's creation time,
    /// which a Composition that never had a Ready condition is stuck since).
    pub fn record(
        &self,
        who: &CompositionLabel,
        st: &CompositionStatus,
        created: Option<&Time>,
        stuck_after: Duration,
    ) {
        self.known.lock().insert(who.clone());
        let condition = |t: &str| st.conditions.iter().find(|c| c.type_ == t);
        let is_true = |t: &str| i64::from(condition(t).is_some_and(holds));
        self.ready
            .get_or_create(who)
            .set(is_true(conditions::READY));
        self.synthesized
            .get_or_create(who)
            .set(is_true(conditions::SYNTHESIZED));
        self.reconciled
            .get_or_create(who)
            .set(is_true(conditions::RECONCILED));
        let out_of_lockstep = condition(conditions::SYNTHESIZED)
            .is_some_and(|c| !holds(c) && c.reason == reasons::MISMATCHED_INPUTS);
        self.lockstep
            .get_or_create(who)
            .set(i64::from(!out_of_lockstep));
        let ready = condition(conditions::READY);
        let older = |t: &Time| {
            k8s_openapi::jiff::Timestamp::now()
                .duration_since(t.0)
                .unsigned_abs()
                > stuck_after
        };
        // Not Ready since Ready last changed, or since creation when it never had one (a
        // missing Synthesizer, module or input: no synthesis, no Ready condition).
        let stuck = match ready {
            Some(c) => !holds(c) && older(&c.last_transition_time),
            None => created.is_some_and(older),
        };
        self.stuck.get_or_create(who).set(i64::from(stuck));
        if let Some(c) = ready {
            self.ready_transition
                .get_or_create(who)
                .set(seconds(&c.last_transition_time));
        }
        if let Some(t) = st
            .current_synthesis
            .as_ref()
            .and_then(|s| s.synthesized.as_ref())
        {
            self.synthesis_time.get_or_create(who).set(seconds(t));
        }
    }

    /// Drops the series of every Composition not in `live` (gone from the cache, e.g. its
    /// finalizer removed by someone else).
    pub fn retain(&self, live: &std::collections::HashSet<CompositionLabel>) {
        let gone: Vec<CompositionLabel> = self
            .known
            .lock()
            .iter()
            .filter(|w| !live.contains(*w))
            .cloned()
            .collect();
        for who in &gone {
            self.forget(who);
        }
    }

    /// Drops the series of a Composition that is gone.
    pub fn forget(&self, who: &CompositionLabel) {
        self.known.lock().remove(who);
        self.ready.remove(who);
        self.synthesized.remove(who);
        self.reconciled.remove(who);
        self.stuck.remove(who);
        self.lockstep.remove(who);
        self.synthesis_time.remove(who);
        self.ready_transition.remove(who);
    }
}
