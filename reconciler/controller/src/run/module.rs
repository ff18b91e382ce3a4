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
    if m.sources_set() != 1 {
        return Err(ModuleError::Spec(format!(
            "exactly one of builtin, configMap, oci, url must be set ({} are)",
            m.sources_set()
        )));
    }
    let module = match m.builtin.as_deref() {
        Some(HELM_BUILTIN) => {
            if synth.spec.helm.is_none() {
                return Err(ModuleError::Spec(
                    "builtin \"helm\" renders a chart: set spec.helm.chart".into(),
                ));
            }
            helm_module_compiled(host, helm_module, policy, ca, compile).await?
        }
        Some(name) => {
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
        None => {
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

/// The Helm module of `--helm-module`, compiled (the host compiles a module once and keeps
/// it). Its bytes are fetched once however many Synthesizers fetch it at the same time: they
/// share one download while any of them still compiles or checks it, and it is fetched again
/// after that (nothing keeps its 80 MB afterwards; a failed fetch is not kept). A file is
/// hashed by the host, which copies it into its work directory to compile it unless it has
/// the module (loaded or in the on-disk cache); a pulled module goes to the host's download
/// directory, and is not pulled when the host knows its digest.
async fn helm_module_compiled(
    host: &std::sync::Arc<wasm_host::Host>,
    helm_module: Option<&str>,
    policy: &FetchPolicy,
    ca: Option<&[u8]>,
    compile: &CompileBudget,
) -> Result<Module, ModuleError> {
    type Shared = Option<(String, std::sync::Weak<Fetched>)>;
    static READ: tokio::sync::Mutex<Shared> = tokio::sync::Mutex::const_new(None);
    let location = helm_module.unwrap_or_default().to_string();
    let fetched = {
        let mut shared = READ.lock().await;
        let alive = shared
            .as_ref()
            .filter(|(l, _)| *l == location)
            .and_then(|(_, weak)| weak.upgrade());
        match alive {
            Some(fetched) => fetched,
            None => {
                let fetched = std::sync::Arc::new(
                    helm_module_bytes(helm_module, policy, ca, host, true).await?,
                );
                *shared = Some((location, std::sync::Arc::downgrade(&fetched)));
                fetched
            }
        }
    };
    let was_known = matches!(*fetched, Fetched::Known(..));
    match compile_module(host, fetched, compile).await {
        // The host could not answer after all: pull the bytes.
        Err(ModuleError::Local(_)) if was_known => {
            let fetched = helm_module_bytes(helm_module, policy, ca, host, false).await?;
            compile_module(host, std::sync::Arc::new(fetched), compile).await
        }
        other => other,
    }
}

/// The module given with `--helm-module`: a file, or an OCI reference pinned by digest (not
/// pulled when `use_known` and the host knows its layer's digest).
async fn helm_module_bytes(
    helm_module: Option<&str>,
    policy: &FetchPolicy,
    ca: Option<&[u8]>,
    host: &wasm_host::Host,
    use_known: bool,
) -> Result<Fetched, ModuleError> {
    let Some(location) = helm_module.filter(|l| !l.is_empty()) else {
        return Err(ModuleError::Spec(
            "builtin \"helm\": this controller has no Helm module (start enoki with \
             --helm-module set to helm-chart.wasm or its OCI reference pinned by digest)"
                .into(),
        ));
    };
    let fail = |message: String| ModuleError::Fetch {
        field: "builtin",
        message: format!("the Helm module {location}: {message}"),
    };
    if location.contains("@sha256:") && !std::path::Path::new(location).exists() {
        let known = |digest: &str| use_known && host.knows(digest, true);
        return crate::sources::pull_layer_to(
            location,
            crate::sources::WASM_LAYER_MEDIA_TYPE,
            policy,
            crate::sources::for_reference(location).as_ref(),
            ca,
            host.download_dir().map_err(local)?,
            Some(&known),
        )
        .await
        .map(Fetched::from)
        .map_err(|e| match e {
            crate::sources::SourceError::Local { .. } => local(e),
            other => fail(other.to_string()),
        });
    }
    let meta = tokio::fs::metadata(location).await.map_err(|e| {
        fail(format!(
            "{e} (set --helm-module to the Helm module's file or OCI reference)"
        ))
    })?;
    if !meta.is_file() {
        return Err(fail("not a regular file".into()));
    }
    let size = meta.len();
    if size > policy.max_bytes as u64 {
        return Err(fail(format!(
            "{size} bytes, over the module size limit of {} bytes (--max-module-size)",
            policy.max_bytes
        )));
    }
    // Readable now (the host reads it on the blocking pool later).
    if let Err(e) = tokio::fs::File::open(location).await {
        return Err(fail(e.to_string()));
    }
    Ok(Fetched::File(
        location.into(),
        usize::try_from(size).unwrap_or(usize::MAX),
    ))
}

/// `pre` with the chart of `spec.helm` fetched and the inputs it adds (`chart`,
/// `helm-values`). Refs under those keys would be ambiguous and are refused.
async fn chart_module(
    client: &kube::Client,
    synth: &Synthesizer,
    helm: &crds::HelmSpec,
    pre: wasm_host::ModulePre,
    ca: Option<&[u8]>,
    policy: &FetchPolicy,
) -> Result<Module, ModuleError> {
    if let Some(r) = synth
        .spec
        .refs
        .iter()
        .find(|r| CHART_INPUT_KEYS.contains(&r.key.as_str()))
    {
        return Err(ModuleError::Invalid(format!(
            "spec.refs: key {:?} is the input spec.helm gives the module; bind values under \
             \"values\" instead",
            r.key
        )));
    }
    let chart_policy = FetchPolicy {
        max_bytes: policy.max_bytes.min(MAX_CHART_BYTES),
        ..*policy
    };
    let source = helm.chart.as_module_source();
    if source.sources_set() != 1 {
        return Err(ModuleError::Chart {
            field: "",
            message: format!(
                "exactly one of configMap, oci, url must be set ({} are)",
                source.sources_set()
            ),
            transient: false,
        });
    }
    let bytes = fetch_bytes(
        client,
        &source,
        Artifact::Chart,
        ca,
        &chart_policy,
        None,
        None,
    )
    .await
    .and_then(|body| {
        body.into_memory().map_err(|e| ModuleError::Fetch {
            field: "",
            message: e.to_string(),
        })
    })
    .map_err(ModuleError::into_chart)?;
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Err(ModuleError::Chart {
            field: "",
            message: "not a packaged chart (a .tgz, what `helm package` writes)".into(),
            transient: false,
        });
    }
    Ok(Module::Chart(std::sync::Arc::new(
        crate::synthesis::Chart::new(
            pre,
            &kube::ResourceExt::name_any(synth),
            &bytes,
            helm.values.as_ref(),
        ),
    )))
}

/// The input keys `spec.helm` fills.
pub const CHART_INPUT_KEYS: [&str; 2] = ["chart", "helm-values"];

/// The bytes of a module or chart source (one source set); an OCI layer, a URL's body or a
/// gzip ConfigMap module's inflated bytes go to a new file in `download_dir` when given (a
/// plain ConfigMap's, at most 1 MiB, stay in memory). `known(digest, on_disk)` says whether
/// the host can answer for a module without its bytes: then none are fetched
/// ([`crate::sources::Body::Known`]).
async fn fetch_bytes(
    client: &kube::Client,
    m: &crds::ModuleSource,
    artifact: Artifact,
    ca: Option<&[u8]>,
    policy: &FetchPolicy,
    download_dir: Option<&std::path::Path>,
    known: Option<KnownTo<'_>>,
) -> Result<crate::sources::Body, ModuleError> {
    if m.pull_secret.is_some() && m.oci.is_none() {
        return Err(ModuleError::Spec(
            "pullSecret is for an oci source; this one is not".into(),
        ));
    }
    if let Some(cm) = &m.config_map {
        return config_map_bytes(
            client,
            cm,
            policy,
            artifact == Artifact::Module,
            download_dir,
        )
        .await;
    }
    if let Some(reference) = &m.oci {
        let credentials = match &m.pull_secret {
            Some(secret) => pull_credentials(client, secret, reference).await?,
            None => None,
        };
        let media_type = match artifact {
            Artifact::Module => crate::sources::WASM_LAYER_MEDIA_TYPE,
            Artifact::Chart => crate::sources::HELM_CHART_LAYER_MEDIA_TYPE,
        };
        // The layer's size comes with its digest: the on-disk cache answers too.
        let on_disk = known.map(|known| move |digest: &str| known(digest, true));
        return crate::sources::pull_layer_to(
            reference,
            media_type,
            policy,
            credentials.as_ref(),
            ca,
            download_dir,
            on_disk.as_ref().map(|k| k as crate::sources::Known<'_>),
        )
        .await
        .map_err(source_error("oci"));
    }
    let url = m.url.clone().unwrap_or_default();
    // The pinned digest names the content: a module the host knows needs no download (only
    // one loaded, compiling or failed: its size is not known before the download).
    if let (Some(known), Some(sha)) = (known, m.sha256.as_deref()) {
        let digest = format!("sha256:{}", crate::sources::sha256_hex(sha));
        if url.starts_with("https://") && known(&digest, false) {
            return Ok(crate::sources::Body::Known { digest, size: 0 });
        }
    }
    crate::sources::fetch_url_to(&url, m.sha256.as_deref(), ca, policy, download_dir)
        .await
        .map_err(source_error("url"))
}

/// A download's error as the module's: the remote's (transient, naming `field`), the
/// controller's own disk, or the spec's.
fn source_error(field: &'static str) -> impl Fn(crate::sources::SourceError) -> ModuleError {
    move |e| match e {
        crate::sources::SourceError::Remote { .. } => ModuleError::Fetch {
            field,
            message: e.to_string(),
        },
        crate::sources::SourceError::Local { .. } => ModuleError::Local(e.to_string()),
        other => ModuleError::Spec(format!("{field}: {other}")),
    }
}

/// What compiling may take: time before the reconcile stops waiting, and memory (per module,
/// and in all: compilations wait until their estimate fits in what the others leave).
pub struct CompileBudget {
    /// How long the reconcile waits.
    pub time: std::time::Duration,
    /// Largest estimated compile memory accepted.
    pub memory_bytes: usize,
}

/// Compiles off the async workers (it takes ~100 ms for a small module). A module whose
/// estimated compile memory exceeds the budget is refused before compiling; otherwise it
/// waits until its estimate fits in the process-wide budget. Past the time budget the caller
/// stops waiting (`CompileTimeout`); the compilation finishes in the background, holding its
/// share of the budget until then, and lands in the host's cache, so a later attempt finds it.
async fn compile_module(
    host: &std::sync::Arc<wasm_host::Host>,
    fetched: std::sync::Arc<Fetched>,
    budget: &CompileBudget,
) -> Result<Module, ModuleError> {
    let size = fetched.len();
    let estimate = wasm_host::compile_memory_estimate(size);
    if estimate > budget.memory_bytes {
        return Err(ModuleError::TooLargeToCompile {
            size,
            estimate,
            budget: budget.memory_bytes,
        });
    }
    // One budget over every compilation of the host (modules, components and background
    // optimizations alike, `Host::set_compile_budget`): the compilation waits inside `load`
    // until its estimate fits, after the host's own cache checks.
    // A compile process is killed at the time budget (`HostError::CompileTimeout`); the
    // reconcile stops waiting a little later, so that error is what it reports unless the
    // compilation is still waiting for room in the memory budget.
    let time = budget.time;
    let memory_budget = budget.memory_bytes;
    let host = host.clone();
    let task = tokio::task::spawn_blocking(move || {
        let loaded = fetched.load(&host);
        loaded.map_err(|e| (Fetched::local_failure(&e), e))
    });
    let waited = time.saturating_add(std::time::Duration::from_secs(2));
    let loaded = tokio::time::timeout(waited, task)
        .await
        .map_err(|_| ModuleError::CompileTimeout {
            budget: time,
            size,
            stopped: false,
        })?
        .map_err(|e| ModuleError::Spec(format!("module compilation task failed: {e}")))?
        .map_err(|(local, e)| match e {
            e if local => ModuleError::Local(e.to_string()),
            wasm_host::HostError::CompileTimeout { .. } => ModuleError::CompileTimeout {
                budget: time,
                size,
                stopped: true,
            },
            wasm_host::HostError::CompileMemory { limit } => ModuleError::CompileMemory {
                size,
                share: limit,
                budget: memory_budget,
            },
            other => ModuleError::Load(other),
        })?;
    Ok(Module::Wasm(loaded))
}

/// The credentials of `spec.module.pullSecret` for the registry of `reference`. Messages name
/// the Secret and the registry, never the Secret's content.
async fn pull_credentials(
    client: &kube::Client,
    secret: &crds::SecretRef,
    reference: &str,
) -> Result<Option<crate::sources::Credentials>, ModuleError> {
    let fail = |message: String| ModuleError::Fetch {
        field: "pullSecret",
        message,
    };
    let what = format!("Secret {}/{}", secret.namespace, secret.name);
    if secret.namespace.is_empty() || secret.name.is_empty() {
        return Err(ModuleError::Spec(
            "pullSecret needs a namespace and a name".into(),
        ));
    }
    let parsed = crate::sources::parse_reference(reference)
        .map_err(|e| ModuleError::Spec(format!("oci: {e}")))?;
    let registry = parsed.resolve_registry().to_string();
    let api: Api<Secret> = Api::namespaced(client.clone(), &secret.namespace);
    let live = api
        .get_opt(&secret.name)
        .await
        .map_err(|e| fail(format!("reading {what}: {e}")))?
        .ok_or_else(|| fail(format!("{what} does not exist")))?;
    let kind = live.type_.clone().unwrap_or_default();
    let Some((_, key)) = crate::sources::DOCKER_CONFIG_KEYS
        .iter()
        .find(|(t, _)| *t == kind)
    else {
        return Err(fail(format!(
            "{what} is of type {kind:?}, not kubernetes.io/dockerconfigjson"
        )));
    };
    let data = live
        .data
        .as_ref()
        .and_then(|d| d.get(*key))
        .ok_or_else(|| fail(format!("{what} has no {key:?} key")))?;
    match crate::sources::from_docker_config(&data.0, &registry, parsed.repository(), &what)
        .map_err(fail)?
    {
        Some(c) => Ok(Some(c)),
        None => Err(fail(format!(
            "{what} holds no credentials for the registry {registry} (repository {})",
            parsed.repository()
        ))),
    }
}

/// The bytes in a ConfigMap's `binaryData` (a module is gunzipped when gzip).
async fn config_map_bytes(
    client: &kube::Client,
    cm: &crds::ConfigMapModule,
    policy: &FetchPolicy,
    gunzip: bool,
    download_dir: Option<&std::path::Path>,
) -> Result<crate::sources::Body, ModuleError> {
    if cm.namespace.is_empty() {
        return Err(ModuleError::Spec(
            "configMap.namespace is empty; name the namespace the module ConfigMap lives in".into(),
        ));
    }
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &cm.namespace);
    let live = api
        .get_opt(&cm.name)
        .await
        .map_err(|e| ModuleError::Fetch {
            field: "configMap",
            message: format!("reading ConfigMap {}/{}: {e}", cm.namespace, cm.name),
        })?;
    let Some(live) = live else {
        return Err(ModuleError::Fetch {
            field: "configMap",
            message: format!("ConfigMap {}/{} does not exist", cm.namespace, cm.name),
        });
    };
    let bytes = live
        .binary_data
        .as_ref()
        .and_then(|d| d.get(&cm.key))
        .map(|b| b.0.clone())
        .ok_or_else(|| ModuleError::Fetch {
            field: "configMap",
            message: format!(
                "ConfigMap {}/{} has no binaryData key {:?}",
                cm.namespace, cm.name, cm.key
            ),
        })?;
    let what = format!("ConfigMap {}/{} key {:?}", cm.namespace, cm.name, cm.key);
    if !gunzip {
        if bytes.len() > policy.max_bytes {
            return Err(ModuleError::Fetch {
                field: "configMap",
                message: format!(
                    "{what} is {} bytes, over the limit of {} bytes",
                    bytes.len(),
                    policy.max_bytes
                ),
            });
        }
        return Ok(crate::sources::Body::Memory(bytes));
    }
    let max = policy.max_bytes;
    let fetch = |message| ModuleError::Fetch {
        field: "configMap",
        message,
    };
    match download_dir {
        // Gzip inflates up to --max-module-size: into a file, off the async workers.
        Some(dir) if bytes.starts_with(&[0x1f, 0x8b]) => {
            let dir = dir.to_path_buf();
            tokio::task::spawn_blocking(move || decompress_to(&bytes, &what, max, &dir))
                .await
                .map_err(|e| ModuleError::Local(format!("decompressing the module: {e}")))?
                .map_err(|e| match e {
                    Decompress::Local(e) => ModuleError::Local(e.to_string()),
                    Decompress::Module(message) => fetch(message),
                })
        }
        _ => decompress_capped(bytes, &what, max)
            .map(crate::sources::Body::Memory)
            .map_err(fetch),
    }
}

/// Why [`decompress_to`] failed.
enum Decompress {
    /// The module's fault: bad gzip, over the cap.
    Module(String),
    /// This process's: the file could not be written.
    Local(crate::sources::SourceError),
}

/// `gzip` inflated into a new file in `dir`, refused as soon as it passes `max` bytes.
fn decompress_to(
    gzip: &[u8],
    what: &str,
    max: usize,
    dir: &std::path::Path,
) -> Result<crate::sources::Body, Decompress> {
    let (mut file, mut download) =
        crate::sources::Download::create(dir).map_err(Decompress::Local)?;
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    let mut inflated = flate2::read::GzDecoder::new(gzip).take(limit);
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        let n = inflated
            .read(&mut chunk)
            .map_err(|e| Decompress::Module(format!("{what}: gzip: {e}")))?;
        if n == 0 {
            break;
        }
        if download.len() + n > max {
            return Err(Decompress::Module(format!(
                "{what} is gunzipped to more than {max} bytes, over the module size limit of \
                 {max} bytes (--max-module-size)"
            )));
        }
        std::io::Write::write_all(&mut file, &chunk[..n])
            .map_err(|e| Decompress::Local(download.unwritable(&e)))?;
        download.wrote(n);
    }
    Ok(crate::sources::Body::File(download))
}

/// The bytes, gunzipped when they are gzip, refused as soon as they pass `max` bytes (the
/// decompressor is read at most `max + 1` bytes, so a bomb never inflates past the cap).
///
/// # Errors
/// A message naming `what`, the cap, or the gzip error.
pub fn decompress_capped(bytes: Vec<u8>, what: &str, max: usize) -> Result<Vec<u8>, String> {
    let over = |size: String| {
        format!(
            "{what} is {size} bytes, over the module size limit of {max} bytes (--max-module-size)"
        )
    };
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        if bytes.len() > max {
            return Err(over(bytes.len().to_string()));
        }
        return Ok(bytes);
    }
    let mut out = Vec::new();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    flate2::read::GzDecoder::new(bytes.as_slice())
        .take(limit)
        .read_to_end(&mut out)
        .map_err(|e| format!("{what}: gzip: {e}"))?;
    if out.len() > max {
        return Err(over(format!("gunzipped to more than {max}")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
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
