//! The `ResourceSlice` resource: the stored output of one synthesis, and the per-resource
//! reconciliation status that the controller writes back, index-aligned with the spec.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Part of one synthesis's output (each slice stays under ~512 KiB).
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "enoki.dev",
    version = "v1alpha1",
    kind = "ResourceSlice",
    namespaced,
    status = "ResourceSliceStatus",
    doc = "The stored output of one synthesis of a Composition (written by enoki, not by people) and, in its status, each resource's reconciled/ready state, index-aligned with spec.resources. `enoki status <composition>` reads them together.",
    shortname = "rslice",
    category = "enoki",
    printcolumn = r#"{"name":"Composition","type":"string","jsonPath":".metadata.ownerReferences[0].name"}"#,
    printcolumn = r#"{"name":"Synthesis","type":"string","jsonPath":".spec.synthesisUUID"}"#,
    printcolumn = r#"{"name":"Errors","type":"string","jsonPath":".status.resources[*].error"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSliceSpec {
    /// The synthesis that produced this slice.
    #[serde(rename = "synthesisUUID")]
    pub synthesis_uuid: String,
    /// The synthesized resources.
    #[serde(default)]
    pub resources: Vec<Manifest>,
    /// Set on the controller's compact cache copy only (its manifests cut to their
    /// identities): the bytes the manifests store. Never read from nor written to the API
    /// server, and not part of the schema.
    #[serde(skip)]
    #[schemars(skip)]
    pub compact_bytes: Option<usize>,
}

/// One synthesized resource.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct Manifest {
    /// The resource as JSON.
    pub manifest: String,
    /// A tombstone: the resource was dropped since the previous synthesis and is deleted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// A Secret's whole manifest, sealed (`enoki-aead-v1:<key id>:<base64>`, AES-256-GCM under
    /// a key of the controller's slice-key Secret); `manifest` then holds the Secret without
    /// `data` and `stringData`. Secret values are never stored here in plain text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed: Option<String>,
}

/// Per-resource reconciliation status, index-aligned with `spec.resources`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct ResourceSliceStatus {
    /// One entry per `spec.resources` item.
    #[serde(default)]
    pub resources: Vec<ResourceState>,
}

/// What the controller last did with one resource.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceState {
    /// The resource matches the synthesized snapshot.
    #[serde(default)]
    pub reconciled: bool,
    /// When the resource became ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<Time>,
    /// The resource is gone from the cluster (tombstones and composition deletion).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// Canonical hash (`v1:<sha256>`) of the last applied snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_hash: Option<String>,
    /// resourceVersion the server returned for that apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_resource_version: Option<String>,
    /// Summarized error of the last attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
