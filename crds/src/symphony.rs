//! The `Symphony` resource: one Composition per variation (Eno semantics).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::composition::{Binding, SynthesizerRef};
use crate::synthesizer::EnvVar;

/// A set of Compositions, one per variation, sharing bindings.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "enoki.dev",
    version = "v1alpha1",
    kind = "Symphony",
    namespaced,
    status = "SymphonyStatus",
    doc = "A Symphony keeps one Composition per variation (each with its own Synthesizer, bindings, labels and annotations) and reports when all are ready; deleting it keeps their outputs (Eno's Symphony).",
    shortname = "sym",
    category = "enoki",
    printcolumn = r#"{"name":"Ready","type":"date","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SymphonySpec {
    /// One Composition per variation; synthesizer names are unique across variations.
    #[serde(default)]
    pub variations: Vec<Variation>,
    /// Bindings inherited by every variation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bindings: Vec<Binding>,
    /// Environment inherited by every variation (at most 50).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub synthesis_env: Vec<EnvVar>,
    /// The ServiceAccount (in the Symphony's namespace) every generated Composition acts as:
    /// their `spec.serviceAccountName` (see Composition; `""` is the same as unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        regex(pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$"),
        length(max = 253)
    )]
    pub service_account_name: Option<String>,
}

/// One variation of a Symphony.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Variation {
    /// The synthesizer of this variation's Composition.
    pub synthesizer: SynthesizerRef,
    /// Labels merged into the Composition (an empty value removes the key).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations merged into the Composition (an empty value removes the key).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Bindings overriding the Symphony's by key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bindings: Vec<Binding>,
    /// Environment overriding the Symphony's (at most 25).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 25))]
    pub synthesis_env: Vec<EnvVar>,
    /// Excluded from the Symphony's status roll-up.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
    /// Sibling variations (by synthesizer name) whose Compositions must be ready first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub depends_on: Vec<VariationDependency>,
}

/// A dependency on a sibling variation, named by its synthesizer.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct VariationDependency {
    /// The sibling variation's synthesizer name.
    pub synthesizer: String,
}

/// Observed state of a Symphony: each time is set once every non-optional variation got there.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SymphonyStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Every variation is synthesized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthesized: Option<Time>,
    /// Every variation is reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciled: Option<Time>,
    /// Every variation is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<Time>,
    /// `Synthesized`, `Ready`, `Reconciling` and `Stalled`, rolled up from the non-optional
    /// variations' Compositions (as kstatus, Flux and Argo CD read them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
