//! Fetching a Synthesizer's module: `builtin`, `configMap` (binaryData, optionally gzip),
//! `oci` (pulled by digest) and `url` (https, verified against `sha256`).

use std::io::Read;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use crate::synthesis::Module;
use crds::Synthesizer;

/// Why a module could not be fetched.
#[derive(Debug, thiserror::Error)]
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
}

impl ModuleError {
    /// Transient errors (API reads) are retried with backoff.
    pub fn is_transient(&self) -> bool {
        matches!(self, ModuleError::Fetch { .. })
    }
}

/// Fetches and compiles the Synthesizer's module.
///
/// # Errors
/// [`ModuleError`] naming the field.
pub async fn fetch(
    client: &kube::Client,
    host: &std::sync::Arc<wasm_host::Host>,
    synth: &Synthesizer,
    ca: Option<&[u8]>,
) -> Result<Module, ModuleError> {
    let m = &synth.spec.module;
    if m.sources_set() != 1 {
        return Err(ModuleError::Spec(format!(
            "exactly one of builtin, configMap, oci, url must be set ({} are)",
            m.sources_set()
        )));
    }
    if let Some(name) = &m.builtin {
        return match builtins::lookup(name) {
            Some(run) => Ok(Module::Builtin {
                name: name.clone(),
                run,
            }),
            None => Err(ModuleError::Spec(format!(
                "builtin {name:?} is not a built-in synthesizer (known: {})",
                builtins::NAMES.join(", ")
            ))),
        };
    }
    if let Some(cm) = &m.config_map {
        let bytes = config_map_bytes(client, cm).await?;
        return compile(host, bytes).await;
    }
    let bytes = if let Some(reference) = &m.oci {
        crate::sources::pull(reference).await.map_err(|e| match e {
            crate::sources::SourceError::Remote { .. } => ModuleError::Fetch {
                field: "oci",
                message: e.to_string(),
            },
            other => ModuleError::Spec(format!("oci: {other}")),
        })?
    } else {
        let url = m.url.clone().unwrap_or_default();
        crate::sources::fetch_url(&url, m.sha256.as_deref(), ca)
            .await
            .map_err(|e| match e {
                crate::sources::SourceError::Remote { .. } => ModuleError::Fetch {
                    field: "url",
                    message: e.to_string(),
                },
                other => ModuleError::Spec(format!("url: {other}")),
            })?
    };
    compile(host, bytes).await
}

/// Compiles off the async workers (it takes ~100 ms for a small module).
async fn compile(
    host: &std::sync::Arc<wasm_host::Host>,
    bytes: Vec<u8>,
) -> Result<Module, ModuleError> {
    let host = host.clone();
    let loaded = tokio::task::spawn_blocking(move || host.load(&bytes))
        .await
        .map_err(|e| ModuleError::Spec(format!("module compilation task failed: {e}")))??;
    Ok(Module::Wasm(loaded))
}

/// The module bytes in a ConfigMap's `binaryData` (gunzipped when gzip).
async fn config_map_bytes(
    client: &kube::Client,
    cm: &crds::ConfigMapModule,
) -> Result<Vec<u8>, ModuleError> {
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
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(bytes);
    }
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes.as_slice())
        .read_to_end(&mut out)
        .map_err(|e| ModuleError::Fetch {
            field: "configMap",
            message: format!("gzip: {e}"),
        })?;
    Ok(out)
}
