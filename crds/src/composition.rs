//! The `Composition` resource: binds a synthesizer to inputs, and reports the in-flight,
//! current and previous synthesis plus rolled-up conditions in its status.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::synthesizer::EnvVar;

/// A Composition: a synthesizer bound to inputs; its output is applied to the cluster.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "enoki.dev",
    version = "v1alpha1",
    kind = "Composition",
    namespaced,
    status = "CompositionStatus",
    doc = "A Composition binds a Synthesizer to inputs. enoki synthesizes it, stores the output in ResourceSlices and applies it in readiness-group order, keeping the current synthesis applied; `enoki status <name>` shows what it waits on.",
    shortname = "comp",
    category = "enoki",
    printcolumn = r#"{"name":"Synthesizer","type":"string","jsonPath":".spec.synthesizer.name"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.simplified.status"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Error","type":"string","jsonPath":".status.simplified.error"}"#,
    printcolumn = r#"{"name":"Synthesized","type":"date","jsonPath":".status.currentSynthesis.synthesized"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct CompositionSpec {
    /// The synthesizer to run.
    pub synthesizer: SynthesizerRef,
    /// Binds the synthesizer's ref keys to specific objects (one binding per key).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 500))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["key"]))]
    pub bindings: Vec<Binding>,
    /// Environment variables for the synthesis (at most 500).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 500))]
    pub synthesis_env: Vec<EnvVar>,
    /// Compositions that must be ready before this one is reconciled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub depends_on: Vec<CompositionRef>,
    /// Accept a synthesis that emits no resources although the current one has some (it
    /// deletes them all). Off by default: such an output is refused (`EmptyOutput`), as Argo
    /// CD's `allowEmpty`. The Synthesizer's `allowEmpty` allows it for every Composition.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_empty: bool,
    /// A ServiceAccount of this namespace: every read of inputs and every write or delete of
    /// emitted objects for this Composition is made impersonating it, so the Composition can
    /// do no more than its RBAC allows (Flux's `serviceAccountName`). Defaults to the
    /// controller's `--default-service-account`; without either, the controller's identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// (`""` is the same as unset.)
    #[schemars(
        regex(pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$"),
        length(max = 253)
    )]
    pub service_account_name: Option<String>,
    /// Suspends the Composition (Flux's `spec.suspend`): while true it is neither synthesized
    /// nor reconciled — drift is not reverted, deleted outputs are not recreated, nothing is
    /// pruned, its outputs stay as they are. Its status says `Suspended` (condition and
    /// `simplified.status`). Deleting it still deletes its outputs. Setting it back to false
    /// resumes it: the next pass synthesizes whatever changed meanwhile and reconciles.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
}

/// A reference to a Synthesizer by name.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct SynthesizerRef {
    /// Name of the (cluster-scoped) Synthesizer.
    #[schemars(
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"),
        length(min = 1, max = 253)
    )]
    pub name: String,
}

/// Binds a ref key to an object.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct Binding {
    /// The synthesizer's ref key.
    pub key: String,
    /// The bound object.
    pub resource: BoundResource,
}

/// The object a binding points at.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct BoundResource {
    /// Object name.
    pub name: String,
    /// Object namespace (empty for cluster-scoped objects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// A reference to another Composition.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct CompositionRef {
    /// Name of the Composition.
    #[schemars(
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"),
        length(min = 1, max = 253)
    )]
    pub name: String,
    /// Namespace of the Composition (defaults to this one's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        regex(pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$"),
        length(max = 63)
    )]
    pub namespace: Option<String>,
}

/// Observed state of a Composition.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CompositionStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Synthesized`, `Reconciled`, `Ready`, and the kstatus `Reconciling` / `Stalled`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// One word and an error for printer columns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simplified: Option<SimplifiedStatus>,
    /// The synthesis whose output is being applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_synthesis: Option<Synthesis>,
    /// The synthesis before the current one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_synthesis: Option<Synthesis>,
    /// A synthesis that has started but not yet succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight_synthesis: Option<Synthesis>,
    /// The inputs as last observed (Eno's `status.inputRevisions`): key, resourceVersion and
    /// the lockstep annotations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_revisions: Vec<InputRevision>,
    /// Whether `dependsOn` holds this Composition back (Eno's `dependencyStatus`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependency_status: Option<DependencyStatus>,
    /// The value of the `reconcile.enoki.dev/requestedAt` annotation the last finished pass
    /// answered (Flux's `lastHandledReconcileAt`): `enoki reconcile` sets the annotation and
    /// waits for it here. A pass that only records a new synthesis does not answer; the pass
    /// that applies it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}

/// Why `dependsOn` blocks a Composition: before synthesis it waits for its dependencies to be
/// ready; on deletion it waits for the Compositions that depend on it to be gone.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DependencyStatus {
    /// Whether the Composition is held back.
    pub blocked: bool,
    /// `WaitingOnDependencies`, `WaitingOnDependents` or `CircularDependency`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The Compositions it waits on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_by: Vec<BlockedBy>,
}

/// One Composition another waits on, and why.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct BlockedBy {
    /// Its name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// `DependencyNotFound`, `DependencyNotReady` or `DependentNotDeleted`.
    pub reason: String,
}

/// A one-word summary and error for `kubectl get comp`.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct SimplifiedStatus {
    /// `Ready`, `NotReady`, `Reconciling`, `Deleting`, `Failed`, `SynthesisBackoff`,
    /// `MissingInputs`, `MissingSynthesizer`, `MismatchedInputs`, `RolloutCooldown`,
    /// `WaitingOnDependencies`, `SynthesisRateLimited` or `Suspended`.
    #[schemars(with = "String")]
    pub status: crate::StatusWord,
    /// The most relevant error, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One synthesis: what went in, what came out, and how far it got.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Synthesis {
    /// Unique id of this synthesis.
    pub uuid: String,
    /// Composition generation it was started for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_composition_generation: Option<i64>,
    /// Synthesizer generation it was started for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_synthesizer_generation: Option<i64>,
    /// The Synthesizer revision (`status.rollout.revision.number` when it ran) this synthesis
    /// ran; unset when the Synthesizer had no revision yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthesizer_revision: Option<i64>,
    /// The `force-resynthesis` annotation value it was started for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_resynthesis: Option<String>,
    /// Revisions of every input it read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_revisions: Vec<InputRevision>,
    /// `sha256:<hex>` of the module that ran (`builtin:<name>@<version>` for a built-in; with
    /// `spec.helm`, followed by `+chart:sha256:<hex>` of the chart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_digest: Option<String>,
    /// `sha256:<hex>` of the input bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_digest: Option<String>,
    /// `sha256:<hex>` of the output bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_digest: Option<String>,
    /// The ResourceSlices holding the output.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_slices: Vec<ResourceSliceRef>,
    /// Results the synthesizer reported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<SynthesisResult>,
    /// When the synthesis finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthesized: Option<Time>,
    /// When every resource was first reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciled: Option<Time>,
    /// When every resource was ready: the latest of their ready times (a resource's is its
    /// condition's time when a readiness check returned one), as Eno stamps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<Time>,
    /// When the run failed and the synthesis was given up (Eno's `canceled`): it timed out,
    /// exited non-zero, ran out of memory, printed malformed output or an error result. The
    /// next attempt is a new in-flight synthesis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canceled: Option<Time>,
    /// How many times it was attempted.
    #[serde(default)]
    pub attempts: i64,
    /// When it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialized: Option<Time>,
    /// Started by a change that rolls out under the cooldown (a Synthesizer change, or deferred
    /// inputs only); with `initialized`, the persisted state of the global rollout cooldown.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deferred: bool,
    /// The emitted objects outside the Composition's namespace (cluster-scoped, or in another
    /// namespace), at most 500: deleting the Composition deletes them even when its
    /// ResourceSlices are already gone (its namespace is being deleted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outside_namespace: Vec<OutputRef>,
}

/// An emitted object, by API version, kind, namespace and name.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OutputRef {
    /// `group/version` or `v1`.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// Its namespace (empty: cluster-scoped).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Kept when the Composition is deleted (`prune: disabled`, `deletion-strategy: orphan`,
    /// `disable-reconciliation`): only enoki's `managed-by` label is taken off.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kept: bool,
}

/// The revision of one input as it was read.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InputRevision {
    /// The ref key.
    pub key: String,
    /// The object's resourceVersion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// The object's `enoki.dev/revision` annotation, if set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// The object's `synthesizer-generation` annotation, if set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthesizer_generation: Option<i64>,
    /// The object's `composition-generation` annotation, if set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub composition_generation: Option<i64>,
    /// The object's `ignore-side-effects` annotation, when it parses as a bool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_side_effects: Option<bool>,
    /// For a collection (and for the observed outputs, key `enoki.dev/observed`): SHA-256 of
    /// what the synthesizer sees, so changes it cannot see do not re-synthesize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// A reference to a ResourceSlice by name.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct ResourceSliceRef {
    /// Name of the ResourceSlice (same namespace as the Composition).
    pub name: String,
}

/// A result the synthesizer reported (KRM function result).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SynthesisResult {
    /// `error`, `warning` or `info`; empty when the synthesizer set none (KRM: optional).
    #[serde(default)]
    #[schemars(with = "String")]
    pub severity: crate::Severity,
    /// What the synthesizer said.
    pub message: String,
    /// The resource it is about, if any (`kind/namespace/name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_ref: Option<String>,
    /// The result's `tags` (KRM), kept as Eno keeps them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}
impl Composition {
    /// Its `ignore-side-effects` annotation (either spelling) is exactly `"true"` (as Eno reads
    /// it): only its own changes re-synthesize it.
    pub fn ignores_side_effects(&self) -> bool {
        let key = crate::names::annotations::IGNORE_SIDE_EFFECTS;
        let a = self.metadata.annotations.as_ref();
        a.and_then(|a| a.get(key.enoki).or_else(|| a.get(key.eno)))
            .map(String::as_str)
            == Some("true")
    }
}
