//! enoki's decision layer: plain data and pure functions over what one reconcile pass of a
//! Composition observed. No client, no async runtime, no I/O — Cargo enforces it: this crate
//! depends on `kube-core` (types), never on `kube`, and `hack/check-plan-deps.sh` fails
//! `make test` when tokio, kube-client, hyper or wasmtime enter its dependency tree.
//!
//! The controller (`reconciler-controller`) observes, calls these, then acts:
//!
//! - [`model`]: the data the controller's phases share (parsed slices, loaded resources, step
//!   results, backoff).
//! - [`condition`]: setting a condition, keeping its transition time.
//! - [`trigger`]: whether a new synthesis is due, and why.
//! - [`decide`]: what holds the next synthesis back, and what the pass over the current one
//!   does.
//! - [`generation`]: `observedGeneration`, `Reconciling` and `Stalled` after a pass.
//! - [`record`]: what a pass's steps mean for each resource's recorded state.
//! - [`rollup`]: the Composition's conditions and `simplified` status from those states.
//! - [`rollout`]: which Synthesizer revision each Composition runs; waves and their gate.
//! - [`fights`]: drift corrections that keep being undone (another writer).
//! - [`migrate`], [`ownership`]: managed-fields repairs (Eno's field managers, shared
//!   ownership).
//!
//! Tests are plain unit and table tests: `cargo test -p reconciler-core` runs in seconds with
//! no control plane.

pub mod condition;
pub mod decide;
pub mod fights;
pub mod generation;
pub mod migrate;
pub mod model;
pub mod ownership;
pub mod record;
pub mod rollout;
pub mod rollup;
pub mod trigger;
