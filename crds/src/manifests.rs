//! Renders the CustomResourceDefinitions of every enoki kind as YAML, one file per kind.
//!
//! `crdgen` writes these files to `crds/manifests/`; a test fails when the committed files
//! differ from what the types generate.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{Composition, ResourceSlice, Symphony, Synthesizer};

/// Every enoki CRD, in a stable order.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![
        Synthesizer::crd(),
        Composition::crd(),
        ResourceSlice::crd(),
        Symphony::crd(),
    ]
}

/// `(file name, YAML)` for every CRD, e.g. `("compositions.enoki.dev.yaml", "...")`.
///
/// # Errors
/// Fails only if a CRD cannot be serialized, which would be a bug in the types.
pub fn render() -> Result<Vec<(String, String)>, serde_saphyr::ser::Error> {
    all()
        .into_iter()
        .map(|crd| {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let yaml = serde_saphyr::to_string(&crd)?;
            Ok((format!("{name}.yaml"), format!("---\n{yaml}")))
        })
        .collect()
}

/// Every CRD in one multi-document YAML stream (what `enoki crds` prints).
///
/// # Errors
/// Fails only if a CRD cannot be serialized.
pub fn render_all() -> Result<String, serde_saphyr::ser::Error> {
    Ok(render()?.into_iter().map(|(_, yaml)| yaml).collect())
}
