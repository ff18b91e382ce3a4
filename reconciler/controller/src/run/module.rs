//! Fetching a Synthesizer's module: `builtin` (`helm`: the module of `--helm-module`),
//! `configMap` (binaryData, optionally gzip), `oci` (pulled by digest) and `url` (https,
//! verified against `sha256`), each capped at the policy's module size while it is read (a
//! gzip bomb stops at the cap, it is never inflated whole); and the chart of `spec.helm`
//! from the same kinds of source (capped at [`MAX_CHART_BYTES`]). Compilation runs on a blocking thread under a time budget; see
//! `synthesizer::load_module` for the negative cache.

use std::io::Read;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;

use crate::sources::FetchPolicy;
use crate::synthesis::Module;
use crds::Synthesizer;

mod chart;
use chart::{chart_module, helm_module_compiled};

mod bytes;
pub use bytes::CompileBudget;
use bytes::{compile_module, fetch_bytes};

/// Why a module could not be fetched.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ModuleError {
    /// The spec is invalid (zero or several sources, unknown builtin).
    #[error("spec.module: {0}")]
    Spec(String),
    /// The source could not be read.
    #[error("spec.module.{field}: {message}")]
    Fetch {
        /// Which source.
        field: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The module does not compile or link.
    #[error("module does not load")]
    Load(#[from] wasm_host::HostError),
    /// Compiling the module would need more memory than the controller allows.
    #[error(
        "the module is {size} bytes; compiling it needs about {estimate} bytes of memory, over \
         the compile memory budget of {budget} bytes (--compile-memory-budget; raise it together \
         with the controller's memory limit, or make the module smaller)"
    )]
    TooLargeToCompile {
        /// Module size in bytes.
        size: usize,
        /// Estimated compile memory.
        estimate: usize,
        /// The budget.
        budget: usize,
    },
    /// Compiling took longer than the budget: stopped (a compile process killed), or still
    /// waiting for room in the compile memory budget (it compiles and is used once ready).
    #[error(
        "compiling the module{} did not finish within {budget:?} (--compile-timeout); {}",
        sized(*size),
        if *stopped {
            "the compilation was stopped, and is retried with backoff"
        } else {
            "it goes on in the background and is used once ready"
        }
    )]
    CompileTimeout {
        /// The budget.
        budget: std::time::Duration,
        /// Module size in bytes.
        size: usize,
        /// The compile process was killed (a retry compiles again).
        stopped: bool,
    },
    /// The compile process ran out of its address space (its share of the compile memory
    /// budget).
    #[error(
        "compiling the module{} needed more than the {share} bytes of memory its \
         compile process could take (of the compile memory budget of {budget} bytes, \
         --compile-memory-budget) and was stopped; raise the budget together with the \
         controller's memory limit, or make the module smaller",
        sized(*size)
    )]
    CompileMemory {
        /// Module size in bytes.
        size: usize,
        /// What its compile process could take.
        share: usize,
        /// The budget.
        budget: usize,
    },
    /// Another field of the Synthesizer is invalid; the message names it.
    #[error("{0}")]
    Invalid(String),
    /// The chart of `spec.helm` could not be fetched or is not a chart.
    #[error("spec.helm.chart{}{field}: {message}", if field.is_empty() { "" } else { "." })]
    Chart {
        /// Which source (empty: the chart as a whole).
        field: &'static str,
        /// What went wrong.
        message: String,
        /// A registry or API read that may work next time.
        transient: bool,
    },
    /// The controller could not keep its own copy of the module (its work directory: a full
    /// or missing disk), or a module it knew is not loaded any more; retried with backoff.
    #[error("the controller could not use its local copy of the module: {0}")]
    Local(String),
    /// Another reconcile is fetching and compiling this Synthesizer's module: this one does
    /// not wait for it (a slow registry must not hold every reconcile worker).
    #[error("the module is being fetched and compiled (for another Composition); retried shortly")]
    Loading,
}

impl ModuleError {
    /// A fixed PascalCase name (metric label).
    pub fn kind(&self) -> &'static str {
        match self {
            ModuleError::Spec(_) | ModuleError::Invalid(_) => "Spec",
            ModuleError::Fetch { .. } => "Fetch",
            ModuleError::Load(e) => e.category(),
            ModuleError::CompileTimeout { .. } => "CompileTimeout",
            ModuleError::TooLargeToCompile { .. } => "TooLargeToCompile",
            ModuleError::CompileMemory { .. } => "CompileMemory",
            ModuleError::Chart { .. } => "Chart",
            ModuleError::Loading => "Loading",
            ModuleError::Local(_) => "Local",
        }
    }

    /// A module-source error of the chart, named as `spec.helm.chart`'s (and its limit
    /// as the chart's).
    fn into_chart(self) -> ModuleError {
        let about_the_chart = |m: &str| {
            m.replace(
                "module size limit",
                &format!("chart size limit ({MAX_CHART_BYTES} bytes at most)"),
            )
            .replace(" (--max-module-size)", "")
            .replace("pin the module", "pin the chart")
        };
        match self {
            ModuleError::Fetch { field, message } => ModuleError::Chart {
                field,
                message: about_the_chart(&message),
                transient: true,
            },
            ModuleError::Invalid(message) => ModuleError::Invalid(message),
            other => ModuleError::Chart {
                field: "",
                message: about_the_chart(other.to_string().trim_start_matches("spec.module: ")),
                transient: false,
            },
        }
    }

    /// Transient errors (API reads) are retried with backoff.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ModuleError::Fetch { .. }
                | ModuleError::CompileTimeout { .. }
                | ModuleError::Loading
                | ModuleError::Local(_)
                | ModuleError::Chart {
                    transient: true,
                    ..
                }
        )
    }
}

/// Fetches and compiles the Synthesizer's module; with `spec.helm`, also fetches the chart
/// the module is given as its input `chart` ([`Module::Chart`]). `helm_module` is where the
/// built-in `helm` module is (`--helm-module`: a file, or an OCI reference pinned by digest).
///
/// # Errors
/// [`ModuleError`] naming the field.
pub async fn fetch(
    client: &kube::Client,
    host: &std::sync::Arc<wasm_host::Host>,
    synth: &Synthesizer,
    ca: Option<&[u8]>,
    policy: &FetchPolicy,
    compile: &CompileBudget,
    helm_module: Option<&str>,
) -> Result<Module, ModuleError> {
    let m = &synth.spec.module;
    use crds::ModuleSourceKind as Kind;
    let module = match m.kind().map_err(ModuleError::Spec)? {
        Kind::Builtin(HELM_BUILTIN) => {
            if synth.spec.helm.is_none() {
                return Err(ModuleError::Spec(
                    "builtin \"helm\" renders a chart: set spec.helm.chart".into(),
                ));
            }
            helm_module_compiled(host, helm_module, policy, ca, compile).await?
        }
        Kind::Builtin(name) => {
            let Some(run) = builtins::lookup(name) else {
                return Err(ModuleError::Spec(format!(
                    "builtin {name:?} is not a built-in synthesizer (known: {}, {HELM_BUILTIN})",
                    builtins::NAMES.join(", ")
                )));
            };
            if synth.spec.helm.is_some() {
                return Err(ModuleError::Spec(format!(
                    "builtin {name:?} does not render Helm charts: spec.helm needs builtin \
                     {HELM_BUILTIN:?} or a wasm module that reads the input \"chart\""
                )));
            }
            return Ok(Module::Builtin {
                name: name.to_string(),
                run,
            });
        }
        Kind::ConfigMap(_) | Kind::Oci { .. } | Kind::Url { .. } => {
            // A large module streams to the host's download directory and is compiled from
            // there: the controller never holds its bytes. One the host knows by its digest
            // (loaded, compiling, failed, or in the on-disk cache) is not downloaded again.
            let dir = host.download_dir().map_err(local)?;
            let known = |digest: &str, on_disk: bool| host.knows(digest, on_disk);
            let body =
                fetch_bytes(client, m, Artifact::Module, ca, policy, dir, Some(&known)).await?;
            let was_known = matches!(body, crate::sources::Body::Known { .. });
            match compile_module(host, std::sync::Arc::new(body.into()), compile).await {
                // The host could not answer after all (evicted meanwhile, an artifact that
                // failed verification): fetch the bytes.
                Err(ModuleError::Local(_)) if was_known => {
                    let body =
                        fetch_bytes(client, m, Artifact::Module, ca, policy, dir, None).await?;
                    compile_module(host, std::sync::Arc::new(body.into()), compile).await?
                }
                other => other?,
            }
        }
    };
    match (&synth.spec.helm, module) {
        (Some(helm), Module::Wasm(pre)) => chart_module(client, synth, helm, pre, ca, policy).await,
        (_, module) => Ok(module),
    }
}

/// Whether the host knows a module by its digest; the flag allows its on-disk cache.
type KnownTo<'a> = &'a (dyn Fn(&str, bool) -> bool + Send + Sync);

/// A failure of the controller's own disk.
fn local(e: impl std::fmt::Display) -> ModuleError {
    ModuleError::Local(e.to_string())
}

/// `size` for a message: unknown (0) when the module was not fetched.
fn sized(size: usize) -> String {
    if size == 0 {
        String::new()
    } else {
        format!(" ({size} bytes)")
    }
}

/// The `spec.module.builtin` name of the Helm module the controller ships.
pub const HELM_BUILTIN: &str = "helm";

/// Largest packaged chart accepted (Helm's own archives are far smaller: ingress-nginx is
/// 60 KiB).
pub const MAX_CHART_BYTES: usize = 16 << 20;

/// What is fetched: a module (a ConfigMap's may be gzip) or a chart (a `.tgz`, kept as is).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Artifact {
    Module,
    Chart,
}

/// A module's bytes on their way to the host.
#[derive(Debug)]
enum Fetched {
    /// In memory: a plain ConfigMap's (at most 1 MiB), or fetched without a download
    /// directory (a host that compiles in this process).
    Memory(Vec<u8>),
    /// Downloaded into the host's download directory (removed when dropped).
    Download(crate::sources::Download),
    /// An operator's file (`--helm-module`) of this size: the host hashes and copies it.
    File(std::path::PathBuf, usize),
    /// Not fetched: the host knows the module of this digest (counted as this size).
    Known(String, usize),
}

impl Fetched {
    fn len(&self) -> usize {
        match self {
            Fetched::Memory(bytes) => bytes.len(),
            Fetched::Download(d) => d.len(),
            Fetched::File(_, len) | Fetched::Known(_, len) => *len,
        }
    }

    /// Loads it into `host` (blocking: it compiles).
    fn load(&self, host: &wasm_host::Host) -> Result<wasm_host::ModulePre, wasm_host::HostError> {
        match self {
            Fetched::Memory(bytes) => host.load(bytes),
            Fetched::Download(d) => host.load_file(d.path()),
            Fetched::File(path, _) => host.load_file(path),
            // A size of 0: not known before the download (a URL), so not from the on-disk cache.
            Fetched::Known(digest, size) => host.load_known(digest, Some(*size).filter(|s| *s > 0)),
        }
    }

    /// Whether a load error is about this process's own copy rather than the module.
    fn local_failure(e: &wasm_host::HostError) -> bool {
        matches!(
            e,
            wasm_host::HostError::NotLoaded { .. } | wasm_host::HostError::File { .. }
        )
    }
}

impl From<crate::sources::Body> for Fetched {
    fn from(body: crate::sources::Body) -> Fetched {
        match body {
            crate::sources::Body::Memory(bytes) => Fetched::Memory(bytes),
            crate::sources::Body::File(d) => Fetched::Download(d),
            crate::sources::Body::Known { digest, size } => Fetched::Known(digest, size),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::bytes::{Decompress, decompress_capped, decompress_to};
    use super::*;
    use std::io::Write;

    fn gzip(len: usize) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let chunk = vec![0u8; 1 << 20];
        let mut left = len;
        while left > 0 {
            let n = left.min(chunk.len());
            e.write_all(&chunk[..n]).unwrap();
            left -= n;
        }
        e.finish().unwrap()
    }

    #[test]
    fn gzip_within_the_cap_is_inflated() {
        let out = decompress_capped(gzip(3 << 20), "cm", 4 << 20);
        assert_eq!(out.map(|b| b.len()), Ok(3 << 20));
    }

    #[test]
    fn a_gzip_bomb_stops_at_the_cap() {
        // 64 MiB of zeros compresses to ~64 KiB; the cap is 4 MiB.
        let bomb = gzip(64 << 20);
        assert!(bomb.len() < 1 << 20, "{}", bomb.len());
        let err = decompress_capped(bomb, "ConfigMap ns/m key \"wasm\"", 4 << 20);
        let err = err.unwrap_err();
        assert!(
            err.contains("over the module size limit of 4194304 bytes"),
            "{err}"
        );
        assert!(err.contains("ConfigMap ns/m"), "{err}");
    }

    #[tokio::test]
    async fn a_module_too_large_to_compile_within_the_budget_is_refused_before_compiling() {
        let host = std::sync::Arc::new(wasm_host::Host::new(None).unwrap());
        let budget = CompileBudget {
            time: std::time::Duration::from_secs(10),
            memory_bytes: 32 << 20,
        };
        // 2 MiB needs about 46 MiB to compile: refused, naming the flag, without compiling.
        let err = compile_module(&host, Fetched::Memory(vec![0; 2 << 20]).into(), &budget)
            .await
            .err()
            .unwrap();
        assert!(
            matches!(err, ModuleError::TooLargeToCompile { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("--compile-memory-budget"), "{err}");
        assert_eq!(host.compilations(), 0);
        // Within the budget it is compiled (an empty module).
        let small = compile_module(
            &host,
            Fetched::Memory(b"\0asm\x01\0\0\0".to_vec()).into(),
            &budget,
        )
        .await;
        assert!(small.is_ok(), "{:?}", small.err());
    }

    #[test]
    fn gzip_inflates_into_a_file_and_a_bomb_leaves_none() {
        let d = std::env::temp_dir().join(format!("enoki-inflate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let left = || std::fs::read_dir(&d).unwrap().count();
        let Ok(crate::sources::Body::File(file)) = decompress_to(&gzip(3 << 20), "m", 4 << 20, &d)
        else {
            panic!("inflated into a file")
        };
        assert_eq!(file.len(), 3 << 20);
        assert_eq!(std::fs::metadata(file.path()).unwrap().len(), 3 << 20);
        drop(file);
        assert_eq!(left(), 0);
        let Err(Decompress::Module(message)) = decompress_to(&gzip(64 << 20), "m", 4 << 20, &d)
        else {
            panic!("a bomb is refused")
        };
        assert!(message.contains("--max-module-size"), "{message}");
        assert_eq!(left(), 0, "nothing of the bomb is left");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn plain_bytes_over_the_cap_are_refused() {
        assert!(decompress_capped(vec![0; 10], "x", 9).is_err());
        assert_eq!(
            decompress_capped(vec![0; 9], "x", 9).map(|b| b.len()),
            Ok(9)
        );
    }
}
