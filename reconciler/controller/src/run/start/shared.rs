//! What every shard of the process shares: the clusters, the wasm host, the options, the
//! budgets and the replica's identity.

use std::sync::Arc;

use crate::run::cluster::Cluster;
use crate::run::fence::Fence;
use crate::run::{Options, metrics};

/// What every shard of the process shares.
pub(super) struct Shared {
    pub(super) fence: Option<Arc<Fence>>,
    pub(super) management: Arc<Cluster>,
    pub(super) target: Arc<Cluster>,
    pub(super) host: Arc<wasm_host::Host>,
    pub(super) opts: Options,
    pub(super) metrics: metrics::Metrics,
    pub(super) slots: Arc<crate::run::sandbox::Slots>,
    pub(super) limits: (
        Arc<crate::run::fair::FairGate>,
        crate::run::sandbox::MemoryBudget,
    ),
    pub(super) identity: String,
    /// The reconciles running per shard.
    pub(super) in_flight: Arc<crate::run::shard::InFlight>,
    /// The keys that seal Secrets in ResourceSlices.
    pub(super) slice_keys: Arc<crate::run::sealing::SliceKeys>,
}
