//! A module's bytes: from its source (OCI, URL, ConfigMap, with the pull credentials it
//! names), compiled under the compile budget, and inflated within a bound.

use super::*;

/// The bytes of a module or chart source (one source set); an OCI layer, a URL's body or a
/// gzip ConfigMap module's inflated bytes go to a new file in `download_dir` when given (a
/// plain ConfigMap's, at most 1 MiB, stay in memory). `known(digest, on_disk)` says whether
/// the host can answer for a module without its bytes: then none are fetched
/// ([`crate::sources::Body::Known`]).
pub(super) async fn fetch_bytes(
    client: &kube::Client,
    m: &crds::ModuleSource,
    artifact: Artifact,
    ca: Option<&[u8]>,
    policy: &FetchPolicy,
    download_dir: Option<&std::path::Path>,
    known: Option<KnownTo<'_>>,
) -> Result<crate::sources::Body, ModuleError> {
    use crds::ModuleSourceKind as Kind;
    match m.kind().map_err(ModuleError::Spec)? {
        Kind::Builtin(name) => Err(ModuleError::Spec(format!(
            "builtin {name:?} is built into enoki: there are no bytes to fetch"
        ))),
        Kind::ConfigMap(cm) => {
            config_map_bytes(
                client,
                cm,
                policy,
                artifact == Artifact::Module,
                download_dir,
            )
            .await
        }
        Kind::Oci {
            reference,
            pull_secret,
        } => {
            let credentials = match pull_secret {
                Some(secret) => pull_credentials(client, secret, reference).await?,
                None => None,
            };
            let media_type = match artifact {
                Artifact::Module => crate::sources::WASM_LAYER_MEDIA_TYPE,
                Artifact::Chart => crate::sources::HELM_CHART_LAYER_MEDIA_TYPE,
            };
            // The layer's size comes with its digest: the on-disk cache answers too.
            let on_disk = known.map(|known| move |digest: &str| known(digest, true));
            crate::sources::pull_layer_to(
                reference,
                media_type,
                policy,
                credentials.as_ref(),
                ca,
                download_dir,
                on_disk.as_ref().map(|k| k as crate::sources::Known<'_>),
            )
            .await
            .map_err(source_error("oci"))
        }
        Kind::Url { url, sha256 } => {
            // The pinned digest names the content: a module the host knows needs no
            // download (only one loaded, compiling or failed: its size is not known before
            // the download).
            if let Some(known) = known {
                let digest = format!("sha256:{}", crate::sources::sha256_hex(sha256));
                if url.starts_with("https://") && known(&digest, false) {
                    return Ok(crate::sources::Body::Known { digest, size: 0 });
                }
            }
            crate::sources::fetch_url_to(url, Some(sha256), ca, policy, download_dir)
                .await
                .map_err(source_error("url"))
        }
    }
}

/// A download's error as the module's: the remote's (transient, naming `field`), the
/// controller's own disk, or the spec's.
pub(super) fn source_error(
    field: &'static str,
) -> impl Fn(crate::sources::SourceError) -> ModuleError {
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
pub(super) async fn compile_module(
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
pub(super) async fn pull_credentials(
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
pub(super) async fn config_map_bytes(
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
pub(super) enum Decompress {
    /// The module's fault: bad gzip, over the cap.
    Module(String),
    /// This process's: the file could not be written.
    Local(crate::sources::SourceError),
}

/// `gzip` inflated into a new file in `dir`, refused as soon as it passes `max` bytes.
pub(super) fn decompress_to(
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
