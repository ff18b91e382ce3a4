//! The wasmtime embedding: module bytes + input bytes + limits -> output bytes or a typed error.
//!
//! Knows nothing of Kubernetes. Its contents arrive with the synthesis-engine issue.
