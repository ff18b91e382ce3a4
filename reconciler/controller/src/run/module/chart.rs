//! The Helm module and charts: the module of `--helm-module` fetched once however many
//! Synthesizers need it, and a chart source packaged for it.

use super::*;

/// The Helm module of `--helm-module`, compiled (the host compiles a module once and keeps
/// it). Its bytes are fetched once however many Synthesizers fetch it at the same time: they
/// share one download while any of them still compiles or checks it, and it is fetched again
/// after that (nothing keeps its 80 MB afterwards; a failed fetch is not kept). A file is
/// hashed by the host, which copies it into its work directory to compile it unless it has
/// the module (loaded or in the on-disk cache); a pulled module goes to the host's download
/// directory, and is not pulled when the host knows its digest.
pub(super) async fn helm_module_compiled(
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
pub(super) async fn helm_module_bytes(
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
pub(super) async fn chart_module(
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
