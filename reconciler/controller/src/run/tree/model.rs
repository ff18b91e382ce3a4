//! What `enoki status` shows: the states of the current synthesis's resources, the
//! Composition's conditions and what happens to the next synthesis. Plain data.

use serde::Serialize;

/// The state of one resource of the current synthesis.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum State {
    /// Its readiness was recorded (or holds now).
    Ready,
    /// Applied; its readiness checks are not all true: `unsatisfied` names them.
    Waiting {
        /// The checks that are not true (name: expression).
        unsatisfied: Vec<String>,
    },
    /// Applying it failed (the controller's message).
    Failed {
        /// Why.
        reason: String,
    },
    /// Not applied: an earlier readiness group is not ready yet.
    Deferred {
        /// The group it waits on.
        #[serde(rename = "waitsOn")]
        waits_on: i64,
    },
    /// Its live object could not be read (e.g. 403 for the account running `enoki status`).
    Unreadable {
        /// Why.
        reason: String,
    },
    /// Not applied yet (its group's turn has come).
    Pending,
    /// No longer emitted (or the Composition is deleted): being removed.
    Deleting,
}

impl State {
    /// A short word for tables and graph colours.
    pub fn word(&self) -> &'static str {
        match self {
            State::Ready => "ready",
            State::Waiting { .. } => "waiting",
            State::Failed { .. } => "failed",
            State::Deferred { .. } => "deferred",
            State::Unreadable { .. } => "unreadable",
            State::Pending => "pending",
            State::Deleting => "deleting",
        }
    }
}

/// One resource of the current synthesis.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    /// `apiVersion` of the manifest.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace (empty when cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Readiness group.
    pub group: i64,
    /// The readiness checks (`name: expression`), empty when readiness is the resource's health.
    pub checks: Vec<String>,
    /// For a CustomResourceDefinition: the `group/Kind` it defines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub defines: Option<String>,
    /// Its state.
    #[serde(flatten)]
    pub state: State,
}

impl Resource {
    /// `Kind namespace/name` (or `Kind name`).
    pub fn label(&self) -> String {
        if self.namespace.is_empty() {
            format!("{} {}", self.kind, self.name)
        } else {
            format!("{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// One condition of the Composition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConditionView {
    /// Type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`/`False`/`Unknown`.
    pub status: crds::ConditionStatus,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
}

/// What happens to the next synthesis.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Next {
    /// `up-to-date`, `in-flight`, `blocked` or `suspended`.
    pub state: String,
    /// The reason (a condition reason) when blocked or suspended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The message when blocked (or in flight).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl View {
    /// The readiness groups of its resources, in apply order, each once.
    pub fn groups(&self) -> Vec<i64> {
        let groups: std::collections::BTreeSet<i64> =
            self.resources.iter().map(|r| r.group).collect();
        groups.into_iter().collect()
    }
}

/// Everything `enoki status` shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct View {
    /// Namespace of the Composition.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its Synthesizer.
    pub synthesizer: String,
    /// Whether it is Ready.
    pub ready: bool,
    /// Its conditions.
    pub conditions: Vec<ConditionView>,
    /// The current synthesis's UUID, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub synthesis: Option<String>,
    /// When the current synthesis was made (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub synthesized: Option<String>,
    /// The next synthesis.
    pub next: Next,
    /// The Synthesizer revision it runs, and whether a newer one waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The resources of the current synthesis by readiness group, in apply order.
    pub resources: Vec<Resource>,
    /// Why the resources are not shown (their ResourceSlices could not be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}
