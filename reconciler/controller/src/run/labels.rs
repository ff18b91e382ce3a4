//! The label sets of enoki's metrics, and the float gauge: plain types that [`super::metrics`]
//! and [`super::health`] both use.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::gauge::Gauge;

/// Label set with one bounded label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// A fixed, bounded value (an op, a reason, a category).
    pub outcome: String,
}

/// Label set of the input cache's object counts: `whole` or `metadata`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KeptLabel {
    /// How the cache keeps the objects.
    pub kept: String,
}

/// Label set of per-shard metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShardLabel {
    /// The shard's index (`0` when unsharded).
    pub shard: String,
}

/// Label set of per-Composition metrics (one series per Composition, removed when it is gone).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CompositionLabel {
    /// The Composition's namespace.
    pub namespace: String,
    /// The Composition's name.
    pub name: String,
}

/// Labels of the quota built-in's per-namespace usage gauge (upstream's names).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CrqNamespaceLabels {
    /// The ClusterResourceQuota.
    pub crq_name: String,
    /// The namespace.
    pub namespace: String,
    /// The `spec.hard` key.
    pub resource: String,
}

/// Labels of the quota built-in's total usage gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CrqLabels {
    /// The ClusterResourceQuota.
    pub crq_name: String,
    /// The `spec.hard` key.
    pub resource: String,
}

/// A float gauge.
pub type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;
