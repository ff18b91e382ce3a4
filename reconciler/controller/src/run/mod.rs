//! `enoki run`: the kube-runtime shell around synthesis, the planner and the apply executor.
//!
//! The module map, by layer (pure data and decisions at the bottom, wiring at the top), is in
//! the crate's README; `hack/import-graph.py` keeps the graph free of cycles.

pub mod api_metrics;
pub(crate) mod apply;
#[cfg(test)]
mod call_sequence;
pub mod capabilities;
pub(crate) mod cluster;
pub(crate) mod composition;
mod config;
pub(crate) mod context;
pub mod diff;
mod eno;
pub mod error;
pub mod fair;
#[cfg(test)]
pub(crate) mod fake_api;
pub mod fence;
mod finalizers;
pub mod health;
mod inputs;
mod instances;
mod labels;
mod memory;
pub mod metrics;
mod module;
mod owners;
mod paging;
mod policy;
pub mod queue;
mod ratelimit;
mod recovery;
pub(crate) mod rest;
pub mod rollout;
pub mod sandbox;
pub mod sealing;
pub mod shard;
pub(crate) mod slices;
pub mod start;
mod symphony;
pub mod synthesis_rate;
mod synthesizer;
mod tenancy;
pub mod tree;
pub(crate) mod watches;

pub use config::{
    ApplyOptions, ClusterOptions, ModuleOptions, Options, ScopeOptions, StorageOptions,
    SynthesisOptions, TenancyOptions,
};
pub use context::Context;
pub use error::Error;
pub(crate) use error::api_err;
pub use inputs::selector_string;
pub use module::ModuleError;
pub use start::run;

/// The lowest `--qps` that is not 0 (no limit).
pub fn ratelimit_min_qps() -> f64 {
    ratelimit::MIN_QPS
}
