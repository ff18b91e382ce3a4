//! Eno's Synthesizer, Symphony and ResourceSlice.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Binding, EnvVar, GROUP, SynthesizerRef, api_version};

/// An Eno Synthesizer: in Eno a container image run in a pod; enoki runs the WebAssembly
/// module that `image` names (an OCI artifact) or that the annotation `enoki.dev/module`
/// names.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "eno.azure.io",
    version = "v1",
    kind = "Synthesizer",
    root = "SynthesizerSchema",
    status = "SynthesizerStatus",
    printcolumn = r#"{"name":"Image","type":"string","jsonPath":".spec.image"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SynthesizerSpec {
    /// The synthesizer's image (for enoki: an OCI reference of a WebAssembly module).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    /// The container's command (Eno only; enoki runs the module's entry point).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// How long one run may take (a Go duration, e.g. `10s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_timeout: Option<String>,
    /// How long a synthesizer pod may live (Eno only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_timeout: Option<String>,
    /// The inputs the synthesizer takes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refs: Vec<Ref>,
    /// Labels, annotations, resources and affinity of the pod (Eno only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub pod_overrides: Option<serde_json::Map<String, serde_json::Value>>,
}

eno_kind!(
    /// An Eno Synthesizer (cluster-scoped).
    Synthesizer,
    SynthesizerSpec,
    SynthesizerStatus,
    "Synthesizer",
    "synthesizers",
    k8s_openapi::ClusterResourceScope
);

/// An Eno Synthesizer's status: empty in Eno.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct SynthesizerStatus {}

/// An input of a Synthesizer.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct Ref {
    /// The key it is bound and delivered under.
    pub key: String,
    /// The object's kind and, optionally, name and namespace.
    pub resource: ResourceRef,
    /// A change of it re-synthesizes after other pending work.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub defer: bool,
    /// A missing input is left out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

/// The object a ref reads.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct ResourceRef {
    /// API group.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// API version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// An Eno Symphony: one Composition per variation.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "eno.azure.io",
    version = "v1",
    kind = "Symphony",
    root = "SymphonySchema",
    namespaced,
    status = "SymphonyStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct SymphonySpec {
    /// One Composition each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variations: Vec<Variation>,
    /// Bindings of every variation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bindings: Vec<Binding>,
    /// Environment of every variation (deprecated in Eno).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub synthesis_env: Vec<EnvVar>,
}

/// One variation of a Symphony.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Variation {
    /// Labels of its Composition.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations of its Composition.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Its Synthesizer.
    #[serde(default)]
    pub synthesizer: SynthesizerRef,
    /// Its bindings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bindings: Vec<Binding>,
    /// Its environment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub synthesis_env: Vec<EnvVar>,
    /// A variation whose Synthesizer is missing is skipped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
    /// Variations (by Synthesizer) that must be Ready first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<VariationDependency>,
}

eno_kind!(
    /// An Eno Symphony.
    Symphony,
    SymphonySpec,
    SymphonyStatus,
    "Symphony",
    "symphonies",
    k8s_openapi::NamespaceResourceScope
);

/// A variation another depends on.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct VariationDependency {
    /// Its Synthesizer's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub synthesizer: String,
}

/// An Eno Symphony's status.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SymphonyStatus {
    /// The generation it reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When every Composition was synthesized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthesized: Option<Time>,
    /// When every Composition was reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciled: Option<Time>,
    /// When every Composition was Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<Time>,
}

/// An Eno ResourceSlice: the stored output of one Eno synthesis. enoki writes none (its own
/// are `enoki.dev` ResourceSlices); it lets the Eno slices of a deleted Eno Composition go.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "eno.azure.io",
    version = "v1",
    kind = "ResourceSlice",
    root = "ResourceSliceSchema",
    namespaced,
    status = "ResourceSliceStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSliceSpec {
    /// The synthesis it belongs to.
    #[serde(
        default,
        rename = "synthesisUUID",
        skip_serializing_if = "String::is_empty"
    )]
    pub synthesis_uuid: String,
    /// The manifests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<Manifest>,
}

/// One manifest of a slice.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct Manifest {
    /// The manifest (JSON).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub manifest: String,
    /// Whether it is to be deleted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
}

/// An Eno ResourceSlice's status.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct ResourceSliceStatus {
    /// Per manifest, index-aligned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceState>,
}

eno_kind!(
    /// An Eno ResourceSlice.
    ResourceSlice,
    ResourceSliceSpec,
    ResourceSliceStatus,
    "ResourceSlice",
    "resourceslices",
    k8s_openapi::NamespaceResourceScope
);

/// The state of one manifest.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceState {
    /// Written.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reconciled: bool,
    /// When it became Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<Time>,
    /// Deleted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// The last write's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciliation_error: Option<String>,
}
