//! Renders the CustomResourceDefinitions of every enoki kind as YAML, one file per kind.
//!
//! `crdgen` writes these files to `crds/manifests/`; a test fails when the committed files
//! differ from what the types generate.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{Composition, ResourceSlice, Symphony, Synthesizer, SynthesizerRevision};

/// Every enoki CRD, in a stable order.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![
        Synthesizer::crd(),
        Composition::crd(),
        ResourceSlice::crd(),
        Symphony::crd(),
        SynthesizerRevision::crd(),
    ]
}

/// Eno's CRDs (`eno.azure.io/v1`), for a cluster without them: `crds/manifests/eno/`, the
/// opt-in `deploy/eno-api`.
pub fn eno() -> Vec<CustomResourceDefinition> {
    use crate::eno;
    let mut crds = vec![
        eno::SynthesizerSchema::crd(),
        eno::CompositionSchema::crd(),
        eno::ResourceSliceSchema::crd(),
        eno::SymphonySchema::crd(),
    ];
    // As in Eno's CRDs, an object without `spec` is valid.
    for crd in &mut crds {
        let kind = crd.spec.names.kind.clone();
        for v in &mut crd.spec.versions {
            if let Some(root) = v
                .schema
                .as_mut()
                .and_then(|s| s.open_api_v3_schema.as_mut())
            {
                root.required = None;
                root.title = Some(kind.clone());
            }
        }
    }
    crds
}

/// The CRDs of the built-in synthesizers' kinds, with their upstream groups
/// (`crds/manifests/builtins/`, written by hand): TrusteeConfig and KbsConfig
/// (`confidentialcontainers.org`), ClusterResourceQuota (`quota.powerapp.cloud`) and
/// LeptonDeployment (`lepton.ai`), as `(file name, YAML)`.
pub const BUILTIN_YAML: &[(&str, &str)] = &[
    (
        "trusteeconfigs.confidentialcontainers.org.yaml",
        include_str!("../manifests/builtins/trusteeconfigs.confidentialcontainers.org.yaml"),
    ),
    (
        "kbsconfigs.confidentialcontainers.org.yaml",
        include_str!("../manifests/builtins/kbsconfigs.confidentialcontainers.org.yaml"),
    ),
    (
        "clusterresourcequotas.quota.powerapp.cloud.yaml",
        include_str!("../manifests/builtins/clusterresourcequotas.quota.powerapp.cloud.yaml"),
    ),
    (
        "leptondeployments.lepton.ai.yaml",
        include_str!("../manifests/builtins/leptondeployments.lepton.ai.yaml"),
    ),
];

/// The built-in kinds' CRDs, parsed.
///
/// # Errors
/// Fails only if a committed YAML file is malformed (a test parses them).
pub fn builtins() -> Result<Vec<CustomResourceDefinition>, serde_saphyr::Error> {
    BUILTIN_YAML
        .iter()
        .map(|(_, yaml)| serde_saphyr::from_str(yaml))
        .collect()
}

/// `(file name, YAML)` for every CRD, e.g. `("compositions.enoki.dev.yaml", "...")`.
///
/// # Errors
/// Fails only if a CRD cannot be serialized, which would be a bug in the types.
pub fn render() -> Result<Vec<(String, String)>, serde_saphyr::ser::Error> {
    render_these(all())
}

/// [`render`] of Eno's CRDs ([`eno`]).
///
/// # Errors
/// As [`render`].
pub fn render_eno() -> Result<Vec<(String, String)>, serde_saphyr::ser::Error> {
    render_these(eno())
}

fn render_these(
    crds: Vec<CustomResourceDefinition>,
) -> Result<Vec<(String, String)>, serde_saphyr::ser::Error> {
    crds.into_iter()
        .map(|crd| {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let yaml = serde_saphyr::to_string(&crd)?;
            Ok((format!("{name}.yaml"), format!("---\n{yaml}")))
        })
        .collect()
}

/// Every CRD — enoki's and the built-in kinds' — in one multi-document YAML stream (what
/// `enoki crds` prints).
///
/// # Errors
/// Fails only if a CRD cannot be serialized.
pub fn render_all() -> Result<String, serde_saphyr::ser::Error> {
    let mut out: String = render()?.into_iter().map(|(_, yaml)| yaml).collect();
    for (_, yaml) in BUILTIN_YAML {
        if !yaml.starts_with("---") {
            out.push_str("---\n");
        }
        out.push_str(yaml);
    }
    Ok(out)
}
