//! What synthesizer authors depend on: the KRM `ResourceList` contract (see `CONTRACT.md`),
//! input lookup, output builders and annotation helpers.
//!
//! No kube client, no tokio, no wasmtime: this crate builds for `wasm32-wasip1`,
//! `wasm32-wasip2` and natively. Its contents arrive with the synthesis-engine issue.
