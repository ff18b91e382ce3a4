//! The pure planning core: (desired manifests, observed state, options) -> `Plan`.
//!
//! No async, no I/O, no kube client, no wasmtime; CI fails if its normal dependency tree
//! contains tokio, kube-client, hyper or wasmtime. Its contents arrive with the planning issue.
