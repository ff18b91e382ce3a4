//! Eno's API, `eno.azure.io/v1`: Composition, Synthesizer, Symphony and ResourceSlice in the
//! shape Eno's API documentation gives them, so that enoki can reconcile an Eno cluster's
//! objects as they are (`--serve-eno-api`).
//!
//! enoki does not install these CRDs by default: a cluster that ran Eno has them already.
//! `crdgen` writes them to `crds/manifests/eno/` for a cluster that has not (the opt-in
//! manifest `deploy/eno-api`). Every field is Eno's, with Eno's names; enoki adds none, and an
//! Eno object's status holds only what Eno's status holds (the Eno CRDs prune the rest).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of Eno's resources.
pub const GROUP: &str = "eno.azure.io";
/// `apiVersion` of Eno's resources.
pub const API_VERSION: &str = "eno.azure.io/v1";
/// Eno's finalizer on Compositions, Symphonies and ResourceSlices.
pub const CLEANUP_FINALIZER: &str = "eno.azure.io/cleanup";

/// An Eno object as read from the API: read leniently, as Eno's CRDs allow (no `spec` is an
/// empty spec), so one odd object never stops a list or a watch of its kind. The
/// `*Schema` types `kube` derives from the same spec are only for the CRDs.
macro_rules! eno_kind {
    ($(#[$m:meta])* $name:ident, $spec:ty, $status:ty, $kind:literal, $plural:literal, $scope:ty) => {
        $(#[$m])*
        #[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            /// `eno.azure.io/v1`.
            #[serde(default = "api_version")]
            pub api_version: String,
            /// The kind.
            #[serde(default)]
            pub kind: String,
            /// Standard object metadata.
            #[serde(default)]
            pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
            /// The spec (empty when the object has none).
            #[serde(default)]
            pub spec: $spec,
            /// The status.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub status: Option<$status>,
        }

        impl kube::Resource for $name {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }

            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                GROUP.into()
            }

            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                "v1".into()
            }

            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }

            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }

            fn meta_mut(
                &mut self,
            ) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
fn api_version() -> String {
    API_VERSION.into()
}

eno_kind!(
    /// An Eno Composition: a Synthesizer bound to inputs.
    Composition,
    CompositionSpec,
    CompositionStatus,
    "Composition",
    "compositions",
    k8s_openapi::NamespaceResourceScope
);

/// An Eno Composition: a Synthesizer bound to inputs.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "eno.azure.io",
    version = "v1",
    kind = "Composition",
    root = "CompositionSchema",
    namespaced,
    status = "CompositionStatus",
    printcolumn = r#"{"name":"Synthesizer","type":"string","jsonPath":".spec.synthesizer.name"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.simplified.status"}"#,
    printcolumn = r#"{"name":"Error","type":"string","jsonPath":".status.simplified.error"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct CompositionSpec {
    /// The Synthesizer, by name (or, in Eno, by label selector).
    #[serde(default)]
    pub synthesizer: SynthesizerRef,
    /// Objects bound to the Synthesizer's refs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bindings: Vec<Binding>,
    /// Environment of the synthesis.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub synthesis_env: Vec<EnvVar>,
    /// Compositions that must be Ready first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<CompositionDependency>,
}

/// A Synthesizer reference: a name or a label selector.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SynthesizerRef {
    /// The Synthesizer's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Synthesizers by label (Eno picks one; enoki does not follow selectors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// A binding of a ref key to an object.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct Binding {
    /// The Synthesizer's ref key.
    pub key: String,
    /// The bound object.
    pub resource: ResourceBinding,
}

/// The object a binding names.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct ResourceBinding {
    /// Name.
    pub name: String,
    /// Namespace (empty for cluster-scoped objects).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// An environment variable.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct EnvVar {
    /// Name.
    pub name: String,
    /// Value.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
}

/// A Composition this one depends on.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct CompositionDependency {
    /// Name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Namespace (this Composition's when empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// An Eno Composition's status.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CompositionStatus {
    /// Status word and error, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simplified: Option<SimplifiedStatus>,
    /// The synthesis under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight_synthesis: Option<Synthesis>,
    /// The synthesis applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_synthesis: Option<Synthesis>,
    /// The synthesis before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_synthesis: Option<Synthesis>,
    /// The inputs' revisions as last seen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_revisions: Vec<InputRevisions>,
    /// Why the Composition waits on others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependency_status: Option<DependencyStatus>,
}

/// Status word and error.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct SimplifiedStatus {
    /// The status word.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// The error, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// One synthesis.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Synthesis {
    /// Its id.
    #[serde(default, rename = "uuid", skip_serializing_if = "String::is_empty")]
    pub uuid: String,
    /// The Composition's generation it synthesized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_composition_generation: Option<i64>,
    /// The Synthesizer's generation it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_synthesizer_generation: Option<i64>,
    /// When it began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialized: Option<Time>,
    /// When its output was stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthesized: Option<Time>,
    /// When every resource was reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciled: Option<Time>,
    /// When every resource was Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<Time>,
    /// When it was given up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canceled: Option<Time>,
    /// Attempts so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<i64>,
    /// Where its output is stored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_slices: Vec<ResourceSliceRef>,
    /// The synthesizer's results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<SynthesisResult>,
    /// The inputs' revisions it synthesized.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_revisions: Vec<InputRevisions>,
    /// Whether it waited for the rollout cooldown.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deferred: bool,
}

/// A stored output, by name.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct ResourceSliceRef {
    /// The slice's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// A result the synthesizer reported.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct SynthesisResult {
    /// Message.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Severity.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub severity: String,
    /// Tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

/// An input's revision.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InputRevisions {
    /// The ref key.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// The input's resourceVersion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// `eno.azure.io/revision`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// `eno.azure.io/synthesizer-generation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthesizer_generation: Option<i64>,
    /// `eno.azure.io/composition-generation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub composition_generation: Option<i64>,
    /// `eno.azure.io/ignore-side-effects`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_side_effects: Option<bool>,
}

/// Why a Composition is blocked on others.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DependencyStatus {
    /// Whether it is blocked.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub blocked: bool,
    /// Why.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// By which Compositions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_by: Vec<BlockedByRef>,
}

/// A Composition in the way.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct BlockedByRef {
    /// Name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// `NotFound`, `NotDeleted` or `NotReady`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

mod others;
pub use others::*;
