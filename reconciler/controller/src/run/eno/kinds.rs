//! The Eno kinds that get an `enoki.dev` mirror (Composition, Symphony), and what differs
//! between them: the mirror's spec, the Synthesizers they need, where their status goes.

use std::fmt::Debug;

use crds::eno;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::project;

/// An Eno kind with an `enoki.dev` mirror.
pub(crate) trait Mirrored:
    Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Serialize
    + Debug
    + Send
    + Sync
    + 'static
{
    /// The mirror's kind.
    type Mirror: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + Debug
        + Send
        + Sync
        + 'static;
    /// Whether the Eno object owns Eno ResourceSlices (let go when it goes).
    const OWNS_SLICES: bool;
    /// The mirror's spec, or why there is none (a status word and the reason).
    fn mirror_spec(&self) -> Result<Value, project::Refusal>;
    /// The Synthesizers whose mirror must exist before this object's mirror is made.
    fn synthesizers(&self) -> Vec<String>;
    /// Its status from its mirror's; `synth` is the mirror Synthesizer's generations.
    fn status_from(&self, mirror: &Self::Mirror, synth: (Option<i64>, Option<i64>)) -> Value;
    /// Its status with a status word and error (`None`: the kind has no place for them).
    fn said(&self, word: &str, why: &str) -> Option<Value>;
    /// Its status now.
    fn status_now(&self) -> Value;
    /// Whether Eno's Symphony made it: then the Symphony's mirror makes its own Compositions
    /// and this one is not mirrored.
    fn of_symphony(&self) -> bool {
        false
    }
    /// Whether the mirror has synthesized (so deleting it deletes what it applied).
    fn synthesized(mirror: &Self::Mirror) -> bool;
}

impl Mirrored for eno::Composition {
    type Mirror = crds::Composition;
    const OWNS_SLICES: bool = true;

    fn mirror_spec(&self) -> Result<Value, project::Refusal> {
        project::composition_spec(self).map(|s| project::to_json(&s))
    }

    fn synthesizers(&self) -> Vec<String> {
        vec![self.spec.synthesizer.name.clone()]
    }

    fn status_from(&self, mirror: &crds::Composition, synth: (Option<i64>, Option<i64>)) -> Value {
        project::to_json(&project::composition_status(
            mirror,
            synth,
            self.status.as_ref(),
        ))
    }

    fn said(&self, word: &str, why: &str) -> Option<Value> {
        Some(project::to_json(&project::blocked(
            self.status.as_ref(),
            word,
            why.to_string(),
        )))
    }

    fn status_now(&self) -> Value {
        project::to_json(&self.status.clone().unwrap_or_default())
    }

    fn of_symphony(&self) -> bool {
        // Marked once seen, so an orphaning deletion of the Symphony does not turn it into a
        // second Composition of the variation.
        symphony_owner(self).is_some() || self.annotations().contains_key(project::SUPERSEDED)
    }

    fn synthesized(mirror: &crds::Composition) -> bool {
        let status = mirror.status.as_ref();
        status.is_some_and(|s| s.current_synthesis.is_some())
    }
}

impl Mirrored for eno::Symphony {
    type Mirror = crds::Symphony;
    const OWNS_SLICES: bool = false;

    fn mirror_spec(&self) -> Result<Value, project::Refusal> {
        project::symphony_spec(self).map(|s| project::to_json(&s))
    }

    fn synthesizers(&self) -> Vec<String> {
        // As in Eno, every variation's Composition is made whatever its Synthesizer: each
        // waits for its own.
        Vec::new()
    }

    fn status_from(&self, mirror: &crds::Symphony, _: (Option<i64>, Option<i64>)) -> Value {
        project::to_json(&project::symphony_status(mirror, self.status.as_ref()))
    }

    fn said(&self, _: &str, _: &str) -> Option<Value> {
        None
    }

    fn synthesized(_: &crds::Symphony) -> bool {
        true
    }

    fn status_now(&self) -> Value {
        project::to_json(&self.status.clone().unwrap_or_default())
    }
}

/// The Eno Symphony that made `c` (its controller).
pub(super) fn symphony_owner(
    c: &impl Resource,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    c.owner_references().iter().find(|o| {
        o.controller == Some(true) && o.kind == "Symphony" && o.api_version == eno::API_VERSION
    })
}
