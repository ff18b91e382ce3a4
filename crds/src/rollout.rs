//! Synthesizer rollouts: `spec.rollout` (how a new revision reaches the Compositions),
//! `status.rollout` (where it stands) and the `SynthesizerRevision` kind (an immutable record
//! of what a Synthesizer synthesized at one revision, its module pinned by digest).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::synthesizer::SynthesizerSpec;

/// How a new revision of a Synthesizer reaches its Compositions.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.maxFailures) || self.maxFailures >= 0", "message": "maxFailures must be 0 or more"},
    {"rule": "!has(self.revisionHistoryLimit) || self.revisionHistoryLimit >= 1", "message": "revisionHistoryLimit must be 1 or more"},
    {"rule": "!has(self.steps) || self.steps.all(p, p >= 1 && p <= 100)", "message": "steps are percentages from 1 to 100"}
]))]
pub struct Rollout {
    /// `cooldown` (Eno's: one Composition per `--rollout-cooldown` across the cluster, no health
    /// gate) or `progressive` (waves, each held until its Compositions are Ready). Unset: the
    /// controller's `--rollout-strategy` (default `cooldown`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<RolloutStrategy>,
    /// The first wave of a progressive rollout. Unset: one Composition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<Canary>,
    /// The share of the Compositions (percent, growing, the last one 100) each later wave
    /// brings the rollout to. Empty: each wave doubles the Compositions updated so far.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = 20))]
    pub steps: Vec<i32>,
    /// How many of a wave's Compositions may fail (synthesis failed, or not Ready at the wave's
    /// deadline) before the rollout halts. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<i32>,
    /// How long a wave's Compositions have to become Ready (e.g. `10m`; default `10m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave_deadline: Option<String>,
    /// How long a wave stays Ready before the next one starts (default `0s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bake_time: Option<String>,
    /// What a halted rollout does with the Compositions it updated: `pause` (they keep the new
    /// revision; the rest keep the stable one) or `rollback` (they go back to the stable
    /// revision at once). Default `pause`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<OnFailure>,
    /// How many SynthesizerRevisions are kept (a revision a Composition still runs is always
    /// kept). Unset: the controller's `--revision-history-limit` (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i32>,
}

/// A rollout strategy.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RolloutStrategy {
    /// One Composition per `--rollout-cooldown`, cluster-wide (Eno).
    #[default]
    Cooldown,
    /// Waves of growing size, each held until Ready, halted on failure.
    Progressive,
}

/// What a halted rollout does.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// The updated Compositions stay; the rest keep the stable revision.
    #[default]
    Pause,
    /// The updated Compositions go back to the stable revision.
    Rollback,
}

/// The first wave: the Compositions a label selector picks, or a count, or a percentage.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.count) || self.count >= 1", "message": "count must be 1 or more"},
    {"rule": "!has(self.percent) || (self.percent >= 1 && self.percent <= 100)", "message": "percent must be from 1 to 100"}
]))]
pub struct Canary {
    /// Compositions with these labels are the first wave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// This many Compositions (without a selector; default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
    /// This percentage of the Compositions, at least one (without a selector or count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<i32>,
}

/// Where a Synthesizer's rollout stands (written by the controller).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The revision being rolled out (the newest, unless undone).
    pub revision: RevisionRef,
    /// The revision Compositions not (yet) in the rollout keep; none for the first revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable: Option<RevisionRef>,
    /// `cooldown` or `progressive`.
    pub strategy: RolloutStrategy,
    /// `Progressing`, `Paused`, `Halted`, `Undone` (every Composition back on the stable
    /// revision) or `Complete`.
    pub phase: String,
    /// Why it is in this phase (e.g. `WaveFailed`, `WaveDeadline`, `Undone`, `Paused`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What happened, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The current wave (1: the canary).
    #[serde(default)]
    pub wave: i32,
    /// How many Compositions the rollout has admitted so far (the canary and every wave).
    #[serde(default)]
    pub admitted: i32,
    /// The rollout order's cut (hex): a Composition whose place in this rollout's order is at
    /// or below it is admitted. Recorded so a restart admits exactly the same Compositions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<String>,
    /// When the current wave started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave_started: Option<Time>,
    /// When every Composition of the current wave was first seen Ready (the bake time runs
    /// from here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave_ready: Option<Time>,
    /// The halted wave went back to the stable revision (`onFailure: rollback`); the waves
    /// before it keep the rolling one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rolled_back: bool,
    /// The cut of the last wave that passed its gate (what a rollback returns to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed_threshold: Option<String>,
    /// Compositions per revision they run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<RevisionCount>,
    /// Compositions on the rolling revision.
    #[serde(default)]
    pub updated: i32,
    /// Of those, Ready.
    #[serde(default)]
    pub ready: i32,
    /// Admitted Compositions that failed (synthesis failed, or not Ready at the deadline).
    #[serde(default)]
    pub failed: i32,
    /// Compositions of this Synthesizer.
    #[serde(default)]
    pub total: i32,
}

/// One revision, as much of it as a Composition needs to tell whether it runs it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RevisionRef {
    /// The revision's number (1, 2, …).
    pub number: i64,
    /// The SynthesizerRevision's name.
    pub name: String,
    /// The Synthesizer generation it was taken at.
    pub generation: i64,
    /// Its module's digest.
    pub module_digest: String,
    /// `sha256:<hex>` of its template (the spec without `rollout`).
    #[serde(default)]
    pub template_digest: String,
}

/// Compositions on one revision.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RevisionCount {
    /// The revision's number.
    pub number: i64,
    /// Compositions whose current synthesis ran it.
    pub compositions: i32,
    /// Of those, Ready.
    pub ready: i32,
}

/// An immutable record of what a Synthesizer synthesized at one revision: its spec (without
/// `rollout`) and its module's digest. Owned by the Synthesizer (deleted with it).
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "enoki.dev",
    version = "v1alpha1",
    kind = "SynthesizerRevision",
    doc = "An immutable revision of a Synthesizer: the spec it synthesized with and its module's digest. Written by the controller; a Composition that a rollout keeps on an older revision is synthesized from it.",
    shortname = "synthrev",
    category = "enoki",
    printcolumn = r#"{"name":"Synthesizer","type":"string","jsonPath":".spec.synthesizer"}"#,
    printcolumn = r#"{"name":"Revision","type":"integer","jsonPath":".spec.revision"}"#,
    printcolumn = r#"{"name":"Module","type":"string","jsonPath":".spec.moduleDigest"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.synthesizer == oldSelf.synthesizer && self.revision == oldSelf.revision && self.generation == oldSelf.generation && self.moduleDigest == oldSelf.moduleDigest && self.templateDigest == oldSelf.templateDigest",
     "message": "a SynthesizerRevision is immutable"}
]))]
pub struct SynthesizerRevisionSpec {
    /// The Synthesizer's name.
    pub synthesizer: String,
    /// The revision's number.
    pub revision: i64,
    /// The Synthesizer generation it was taken at.
    pub generation: i64,
    /// `sha256:<hex>` of the module (as the Synthesizer's `status.moduleDigest`): the module
    /// loaded for this revision must have it.
    pub module_digest: String,
    /// `sha256:<hex>` of `template` as JSON: a template that does not match is refused.
    pub template_digest: String,
    /// The Synthesizer's spec at this revision, without `rollout`.
    pub template: SynthesizerSpec,
}
