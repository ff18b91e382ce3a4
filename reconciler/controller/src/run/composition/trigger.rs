//! Whether a Composition must be synthesized again, and why. Pure.

use std::collections::BTreeSet;

use crds::{InputRevision, Synthesis};

/// What the Composition, its Synthesizer and its inputs look like now.
#[derive(Clone, Copy, Debug)]
pub struct Now<'a> {
    /// The Composition's `metadata.generation`.
    pub generation: Option<i64>,
    /// The Synthesizer's `metadata.generation`.
    pub synthesizer_generation: Option<i64>,
    /// The module's digest.
    pub module_digest: &'a str,
    /// Every input's revision (and the observed-output digest with `watchOutputs`).
    pub revisions: &'a [InputRevision],
    /// The `force-resynthesis` annotation's value.
    pub forced: Option<&'a str>,
    /// Instance mode: whether the status write-back of the current synthesis is known
    /// (it lives in memory; after a restart one synthesis recovers it).
    pub write_back_known: bool,
    /// A slice of the current synthesis was deleted.
    pub slices_missing: bool,
}

/// Why a synthesis runs (or that none is needed). When several hold, the first in this
/// order wins, so [`Trigger::SynthesizerChanged`] means the Synthesizer alone changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// The current synthesis reflects everything.
    UpToDate,
    /// There is no synthesis yet.
    First,
    /// The `force-resynthesis` annotation changed.
    Forced,
    /// The Composition's spec changed.
    CompositionChanged,
    /// These inputs changed (revision, resourceVersion or digest).
    InputsChanged {
        /// Their keys.
        keys: Vec<String>,
    },
    /// Only the Synthesizer (or its module) changed: rolled out with a cooldown.
    SynthesizerChanged,
    /// Slices of the current synthesis are gone (deleted by someone).
    SlicesMissing,
    /// Instance mode after a restart: the status write-back must be recomputed.
    WriteBackUnknown,
}

impl Trigger {
    /// Whether the new output may keep the current slices when it is identical: only when
    /// inputs changed (or a restart lost the write-back); spec and Synthesizer changes and
    /// forced re-syntheses always write new slices (Eno semantics).
    pub fn may_keep_slices(&self) -> bool {
        matches!(
            self,
            Trigger::InputsChanged { .. } | Trigger::WriteBackUnknown
        )
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Trigger::UpToDate => f.write_str("up to date"),
            Trigger::First => f.write_str("first synthesis"),
            Trigger::Forced => f.write_str("forced"),
            Trigger::CompositionChanged => f.write_str("composition changed"),
            Trigger::InputsChanged { keys } => write!(f, "inputs changed: {}", keys.join(", ")),
            Trigger::SynthesizerChanged => f.write_str("synthesizer changed"),
            Trigger::SlicesMissing => f.write_str("resource slices were deleted"),
            Trigger::WriteBackUnknown => f.write_str("status write-back unknown after a restart"),
        }
    }
}

/// Decides whether `current` must be replaced by a new synthesis.
pub fn decide(current: Option<&Synthesis>, now: &Now<'_>) -> Trigger {
    let Some(c) = current else {
        return Trigger::First;
    };
    if c.force_resynthesis.as_deref() != now.forced {
        return Trigger::Forced;
    }
    if c.observed_composition_generation != now.generation {
        return Trigger::CompositionChanged;
    }
    let keys = changed_inputs(&c.input_revisions, now.revisions);
    if !keys.is_empty() {
        return Trigger::InputsChanged { keys };
    }
    if c.observed_synthesizer_generation != now.synthesizer_generation
        || c.module_digest.as_deref() != Some(now.module_digest)
    {
        return Trigger::SynthesizerChanged;
    }
    if now.slices_missing {
        return Trigger::SlicesMissing;
    }
    if !now.write_back_known {
        return Trigger::WriteBackUnknown;
    }
    Trigger::UpToDate
}

/// The keys whose revisions differ between `old` and `new` (added and removed included).
fn changed_inputs(old: &[InputRevision], new: &[InputRevision]) -> Vec<String> {
    if old == new {
        return Vec::new();
    }
    let keys: BTreeSet<&str> = old.iter().chain(new).map(|r| r.key.as_str()).collect();
    let changed: Vec<String> = keys
        .into_iter()
        .filter(|key| {
            let pick = |v: &[InputRevision]| -> Vec<InputRevision> {
                v.iter().filter(|r| r.key == *key).cloned().collect()
            };
            pick(old) != pick(new)
        })
        .map(String::from)
        .collect();
    if changed.is_empty() {
        // Same revisions in another order.
        vec!["(order)".into()]
    } else {
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev(key: &str, rv: &str) -> InputRevision {
        InputRevision {
            key: key.into(),
            resource_version: Some(rv.into()),
            ..InputRevision::default()
        }
    }

    fn current(revisions: Vec<InputRevision>) -> Synthesis {
        Synthesis {
            observed_composition_generation: Some(1),
            observed_synthesizer_generation: Some(2),
            module_digest: Some("sha256:m".into()),
            input_revisions: revisions,
            ..Synthesis::default()
        }
    }

    fn now<'a>(revisions: &'a [InputRevision]) -> Now<'a> {
        Now {
            generation: Some(1),
            synthesizer_generation: Some(2),
            module_digest: "sha256:m",
            revisions,
            forced: None,
            write_back_known: true,
            slices_missing: false,
        }
    }

    #[test]
    fn nothing_changed_is_up_to_date() {
        let revs = [rev("config", "5")];
        assert_eq!(
            decide(Some(&current(revs.to_vec())), &now(&revs)),
            Trigger::UpToDate
        );
    }

    #[test]
    fn no_synthesis_is_the_first() {
        assert_eq!(decide(None, &now(&[])), Trigger::First);
    }

    #[test]
    fn changed_inputs_are_named_including_added_and_removed_ones() {
        let old = current(vec![rev("a", "1"), rev("b", "1")]);
        let new = [rev("a", "2"), rev("c", "1")];
        assert_eq!(
            decide(Some(&old), &now(&new)),
            Trigger::InputsChanged {
                keys: vec!["a".into(), "b".into(), "c".into()]
            }
        );
    }

    #[test]
    fn the_synthesizer_alone_is_a_rollout_and_anything_else_wins_over_it() {
        let revs = [rev("a", "1")];
        let c = current(revs.to_vec());
        let mut n = now(&revs);
        n.module_digest = "sha256:new";
        assert_eq!(decide(Some(&c), &n), Trigger::SynthesizerChanged);
        n.generation = Some(2);
        assert_eq!(decide(Some(&c), &n), Trigger::CompositionChanged);
        n.forced = Some("x");
        assert_eq!(decide(Some(&c), &n), Trigger::Forced);
    }

    #[test]
    fn deleted_slices_and_a_lost_write_back_resynthesize() {
        let revs = [rev("a", "1")];
        let c = current(revs.to_vec());
        let mut n = now(&revs);
        n.write_back_known = false;
        assert_eq!(decide(Some(&c), &n), Trigger::WriteBackUnknown);
        n.slices_missing = true;
        assert_eq!(decide(Some(&c), &n), Trigger::SlicesMissing);
    }

    #[test]
    fn only_input_changes_may_keep_the_slices() {
        assert!(Trigger::InputsChanged { keys: vec![] }.may_keep_slices());
        assert!(Trigger::WriteBackUnknown.may_keep_slices());
        for t in [
            Trigger::First,
            Trigger::Forced,
            Trigger::CompositionChanged,
            Trigger::SynthesizerChanged,
            Trigger::SlicesMissing,
        ] {
            assert!(!t.may_keep_slices(), "{t}");
        }
    }
}
