//! enoki's API: the `enoki.dev/v1alpha1` custom resources and every well-known name.
//!
//! - [`Synthesizer`] (cluster-scoped): a WebAssembly module (or a built-in) and the inputs it
//!   takes.
//! - [`Composition`] (namespaced): binds a synthesizer to inputs; its status tracks the
//!   in-flight, current and previous synthesis.
//! - [`ResourceSlice`] (namespaced): the stored output of one synthesis, with per-resource
//!   reconciliation status index-aligned with the spec.
//! - [`Symphony`] (namespaced): one Composition per variation.
//!
//! [`eno`] holds Eno's `eno.azure.io/v1` kinds, which enoki reconciles as they are when asked
//! (`--serve-eno-api`).
//!
//! [`names`] holds every annotation key (with its `eno.azure.io/` alias), label, finalizer,
//! field manager, condition type and reason. [`manifests`] renders the CRD YAML that `crdgen`
//! writes to `crds/manifests/`.
//!
//! This crate knows nothing about reconciling; it only describes the API.

pub mod composition;
pub mod eno;
pub mod manifests;
pub mod names;
pub mod resource_slice;
pub mod rollout;
pub mod symphony;
pub mod synthesizer;
pub mod words;

pub use composition::*;
pub use resource_slice::*;
pub use rollout::*;
pub use symphony::*;
pub use synthesizer::*;
pub use words::{ConditionStatus, Severity, StatusWord};

/// The API group of every enoki resource.
pub const GROUP: &str = "enoki.dev";
/// The API version of every enoki resource.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every enoki resource (`enoki.dev/v1alpha1`).
pub const API_VERSION: &str = "enoki.dev/v1alpha1";
