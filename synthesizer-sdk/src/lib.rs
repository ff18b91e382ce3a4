//! What synthesizer authors depend on. A synthesizer is a program that reads one KRM
//! `ResourceList` (JSON) on stdin and writes one on stdout; `CONTRACT.md` is the normative
//! description. This crate gives you the types, lookups for bound inputs, builders with a
//! helper for every enoki annotation, an entry point ([`run`]) that works on `wasm32-wasip1`,
//! `wasm32-wasip2` and natively, and a [`testing`] module for fixture/snapshot tests.
//!
//! ```
//! use enoki_sdk::{Input, Output, Resource};
//!
//! fn synthesize(input: &Input) -> Result<Output, enoki_sdk::Error> {
//!     let greeting = input.input("config")?
//!         .pointer("/data/greeting").and_then(|v| v.as_str()).unwrap_or("hello");
//!     let mut out = Output::default();
//!     out.push(
//!         Resource::new("v1", "ConfigMap", "greeting")
//!             .readiness_group(0)
//!             .set("/data/message", greeting),
//!     );
//!     Ok(out)
//! }
//! # let input: Input = serde_json::from_str(r#"{"apiVersion":"config.kubernetes.io/v1","kind":"ResourceList","items":[
//! #   {"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","annotations":{"enoki.dev/input-key":"config"}},"data":{"greeting":"hi"}}]}"#).unwrap();
//! # let out = synthesize(&input).unwrap();
//! # assert_eq!(out.items[0]["data"]["message"], "hi");
//! ```
//!
//! No kube client, no tokio, no wasmtime: only serde.

pub mod annotations;
pub mod quantity;
pub mod resource;
pub mod resource_list;
pub mod selector;
pub mod testing;

#[cfg(feature = "k8s")]
pub use k8s_openapi;

pub use resource::Resource;
pub use resource_list::{FunctionConfig, Input, Output, ResourceList, Severity, SynthesisResult};

use std::io::{Read, Write};

/// Why a synthesizer could not produce output.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A required input is not bound.
    #[error("input {key:?} is not bound")]
    MissingInput {
        /// The ref key.
        key: String,
    },
    /// An input does not have the expected shape.
    #[error("input {key:?}: {message}")]
    InvalidInput {
        /// The ref key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// stdin is not a ResourceList.
    #[error("stdin is not a ResourceList: {0}")]
    Decode(#[from] serde_json::Error),
    /// stdin/stdout failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// Anything else the synthesizer wants to say.
    #[error("{0}")]
    Other(String),
}

/// Runs a synthesizer: reads the ResourceList on stdin, calls `f`, writes the result on
/// stdout. An `Err` becomes a ResourceList carrying one `error` result (which fails the
/// synthesis with reason `ErrorResult`); the process exits 0 either way.
///
/// ```no_run
/// // src/main.rs of a synthesizer:
/// enoki_sdk::run(|input| {
///     let mut out = enoki_sdk::Output::default();
///     out.push(enoki_sdk::Resource::new("v1", "ConfigMap", "x"));
///     Ok(out)
/// });
/// ```
pub fn run<F>(f: F)
where
    F: FnOnce(&Input) -> Result<Output, Error>,
{
    let result = read_input().and_then(|input| f(&input));
    let output = match result {
        Ok(out) => out,
        Err(e) => Output {
            items: Vec::new(),
            results: vec![SynthesisResult::error(e.to_string())],
        },
    };
    let text = serde_json::to_string(&output.into_resource_list())
        .unwrap_or_else(|e| format!(r#"{{"apiVersion":"config.kubernetes.io/v1","kind":"ResourceList","items":[],"results":[{{"severity":"error","message":"cannot encode output: {e}"}}]}}"#));
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

fn read_input() -> Result<Input, Error> {
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text)?;
    Ok(serde_json::from_str(&text)?)
}
