//! The pure planning core of enoki: (desired manifests, observed state, recorded status,
//! options) -> [`Plan`].
//!
//! Every decision the controller makes — what to apply, in which order, what waits on what,
//! what is already in sync, what to delete — is made here, as a value. No async, no I/O, no
//! kube client, no wasmtime; CI fails if this crate's normal dependency tree contains tokio,
//! kube-client, hyper or wasmtime.
//!
//! - [`settings`]: annotations (`enoki.dev/*` and the `eno.azure.io/*` alias) -> typed
//!   [`Settings`], with Composition-level defaults.
//! - [`snapshot`]: the object that is applied (reserved keys, status and creationTimestamp
//!   stripped) and its canonical hash.
//! - [`ordering`]: the readiness-group DAG (petgraph) and deletion order.
//! - [`expr`]: CEL compilation/evaluation with a JSON converter that keeps integers as `int`.
//! - [`readiness`]: CEL readiness checks and the kstatus default.
//! - [`overrides`]: Eno's override grammar and semantics.
//! - [`mod@plan`]: the `Plan` itself.
//!
//! Callers (the controller) resolve namespaces and scopes before planning and execute the ops.

pub mod error;
pub mod expr;
pub mod key;
pub mod ordering;
pub mod overrides;
pub mod plan;
pub mod readiness;
pub mod settings;
pub mod snapshot;

pub use error::PlanError;
pub use key::ResourceKey;
pub use plan::{
    ApplyMode, CompositionInfo, Desired, Observed, Op, Plan, PlanInput, PlanOptions, Prepared,
    Recorded, SkipReason, Step, filter_desired, plan, prepare,
};
pub use readiness::ReadinessState;
pub use settings::{DeletionStrategy, Drift, Settings};
