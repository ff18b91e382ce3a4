//! The rollout series: `enoki_rollout_synthesizers` (Synthesizers per rollout phase, every phase served
//! from the start: what the alert and the dashboard read), and per Synthesizer
//! `enoki_rollout_phase` (1 for the phase its rollout is in), `enoki_rollout_compositions`
//! (updated / ready / failed / total), `enoki_rollout_wave` and `enoki_rollout_revision`. A
//! deleted Synthesizer's series are removed.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crds::RolloutStatus;
use crds::names::rollout::PHASES;

/// A Synthesizer's series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SynthesizerLabel {
    /// The Synthesizer.
    pub synthesizer: String,
}

/// A Synthesizer's series per phase or count.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RolloutLabel {
    /// The Synthesizer.
    pub synthesizer: String,
    /// The phase, or `updated` / `ready` / `failed` / `total`.
    pub state: String,
}

/// The phase label of `enoki_rollout_synthesizers`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    /// The phase.
    pub phase: String,
}

/// Every rollout series (clones share them).
#[derive(Clone, Default)]
pub struct RolloutMetrics {
    phases: Family<PhaseLabel, Gauge>,
    phase: Family<RolloutLabel, Gauge>,
    compositions: Family<RolloutLabel, Gauge>,
    wave: Family<SynthesizerLabel, Gauge>,
    revision: Family<SynthesizerLabel, Gauge>,
    /// The Synthesizers with series, and their phase.
    published: std::sync::Arc<parking_lot::Mutex<std::collections::BTreeMap<String, String>>>,
}

const COUNTS: [&str; 4] = ["updated", "ready", "failed", "total"];

impl RolloutMetrics {
    /// Registers the series in `registry`.
    pub fn register(registry: &mut Registry) -> RolloutMetrics {
        let m = RolloutMetrics::default();
        registry.register(
            "enoki_rollout_synthesizers",
            "Synthesizers whose rollout is in each phase (Progressing, Paused, Halted, Undone, \
             Complete)",
            m.phases.clone(),
        );
        m.count_phases(&m.published.lock());
        registry.register(
            "enoki_rollout_phase",
            "1 for the phase (Progressing, Paused, Halted, Undone, Complete) of each Synthesizer's rollout",
            m.phase.clone(),
        );
        registry.register(
            "enoki_rollout_compositions",
            "A Synthesizer's Compositions on its rolling revision (updated), of those Ready, \
             admitted ones that failed, and all of them (total)",
            m.compositions.clone(),
        );
        registry.register(
            "enoki_rollout_wave",
            "The wave a Synthesizer's rollout is in (1: the canary)",
            m.wave.clone(),
        );
        registry.register(
            "enoki_rollout_revision",
            "The Synthesizer revision being rolled out",
            m.revision.clone(),
        );
        m
    }

    /// Publishes `st` for `synthesizer`.
    pub fn publish(&self, synthesizer: &str, st: &RolloutStatus) {
        {
            let mut published = self.published.lock();
            published.insert(synthesizer.to_string(), st.phase.clone());
            self.count_phases(&published);
        }
        let label = |state: &str| RolloutLabel {
            synthesizer: synthesizer.to_string(),
            state: state.to_string(),
        };
        for p in PHASES {
            self.phase
                .get_or_create(&label(p))
                .set(i64::from(st.phase == p));
        }
        for (state, n) in COUNTS
            .iter()
            .zip([st.updated, st.ready, st.failed, st.total])
        {
            self.compositions
                .get_or_create(&label(state))
                .set(i64::from(n));
        }
        let one = SynthesizerLabel {
            synthesizer: synthesizer.to_string(),
        };
        self.wave.get_or_create(&one).set(i64::from(st.wave));
        self.revision.get_or_create(&one).set(st.revision.number);
    }

    /// Removes the series of every Synthesizer `exists` says is gone.
    pub fn retain(&self, exists: impl Fn(&str) -> bool) {
        let mut published = self.published.lock();
        let gone: Vec<String> = published.keys().filter(|n| !exists(n)).cloned().collect();
        for name in gone {
            self.forget(&name);
            published.remove(&name);
        }
        self.count_phases(&published);
    }

    /// `enoki_rollout_synthesizers` from the phases published.
    fn count_phases(&self, published: &std::collections::BTreeMap<String, String>) {
        for p in PHASES {
            let n = published.values().filter(|v| *v == p).count();
            self.phases
                .get_or_create(&PhaseLabel {
                    phase: p.to_string(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Removes `synthesizer`'s series.
    fn forget(&self, synthesizer: &str) {
        let label = |state: &str| RolloutLabel {
            synthesizer: synthesizer.to_string(),
            state: state.to_string(),
        };
        for p in PHASES {
            self.phase.remove(&label(p));
        }
        for c in COUNTS {
            self.compositions.remove(&label(c));
        }
        let one = SynthesizerLabel {
            synthesizer: synthesizer.to_string(),
        };
        self.wave.remove(&one);
        self.revision.remove(&one);
    }
}
