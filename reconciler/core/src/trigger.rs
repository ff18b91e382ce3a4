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
    /// A slice of the current synthesis cannot be used (a Secret in it no key opens, or in
    /// plain text): made again whatever `ignore_side_effects` says.
    pub slices_unusable: bool,
    /// The Composition's `ignore-side-effects: "true"`: only its own changes (and inputs
    /// annotated `ignore-side-effects: "false"`) re-synthesize (Eno).
    pub ignore_side_effects: bool,
    /// Keys of the refs declared `defer: true`: their changes wait for the rollout cooldown.
    pub deferred: &'a [String],
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
        /// Every one of them is a deferred ref: rolled out with the cooldown.
        deferred: bool,
    },
    /// Only the Synthesizer (or its module) changed: rolled out with a cooldown.
    SynthesizerChanged,
    /// Slices of the current synthesis are gone (deleted by someone).
    SlicesMissing,
    /// Instance mode after a restart: the status write-back must be recomputed.
    WriteBackUnknown,
}

impl Trigger {
    /// Whether this synthesis rolls out under the global cooldown (Eno's deferred ops).
    pub fn is_deferred(&self) -> bool {
        matches!(
            self,
            Trigger::SynthesizerChanged | Trigger::InputsChanged { deferred: true, .. }
        )
    }

    /// Whether identical output may keep the current *synthesis* (its UUID; nothing
    /// recorded anew): only when inputs changed (or a restart lost the write-back). Spec and
    /// Synthesizer changes and forced re-syntheses record a new synthesis (Eno semantics),
    /// which keeps the current slices when its output is identical.
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
            Trigger::InputsChanged { keys, deferred } => write!(
                f,
                "{}inputs changed: {}",
                if *deferred { "deferred " } else { "" },
                keys.join(", ")
            ),
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
    // Eno's side effects: an input annotated `ignore-side-effects: "true"` never triggers;
    // one annotated `"false"` always does, even when the Composition ignores side effects.
    let side_effect = |key: &String| {
        now.revisions
            .iter()
            .find(|r| &r.key == key)
            .and_then(|r| r.ignore_side_effects)
    };
    let keys: Vec<String> = changed_inputs(&c.input_revisions, now.revisions)
        .into_iter()
        .filter(|k| side_effect(k) != Some(true))
        .collect();
    let forced_by_input = keys.iter().any(|k| side_effect(k) == Some(false));
    if !keys.is_empty() && (!now.ignore_side_effects || forced_by_input) {
        let deferred = keys.iter().all(|k| now.deferred.contains(k));
        return Trigger::InputsChanged { keys, deferred };
    }
    if !now.ignore_side_effects
        && (c.observed_synthesizer_generation != now.synthesizer_generation
            || c.module_digest.as_deref() != Some(now.module_digest))
    {
        return Trigger::SynthesizerChanged;
    }
    // Eno's `handleMissingSlice`: a Composition that ignores side effects is not synthesized
    // again for a deleted slice.
    if (now.slices_missing && !now.ignore_side_effects) || now.slices_unusable {
        return Trigger::SlicesMissing;
    }
    if !now.write_back_known {
        return Trigger::WriteBackUnknown;
    }
    Trigger::UpToDate
}

/// Inputs out of lockstep, as Eno decides it: an input whose `revision` differs from the
/// highest `revision` among the inputs, or whose `synthesizer-generation` /
/// `composition-generation` is older than the Synthesizer's / Composition's generation. While
/// any is, no new synthesis starts (`MismatchedInputs`). One `key: why` per input. Pure.
pub fn mismatched(
    revisions: &[InputRevision],
    synthesizer_generation: Option<i64>,
    composition_generation: Option<i64>,
) -> Vec<String> {
    let max = revisions.iter().filter_map(|r| r.revision).max();
    let mut out = Vec::new();
    for r in revisions {
        let mut why = Vec::new();
        if let (Some(rev), Some(max)) = (r.revision, max)
            && rev != max
        {
            why.push(format!("revision {rev}, another input has {max}"));
        }
        if let (Some(seen), Some(now)) = (r.synthesizer_generation, synthesizer_generation)
            && seen < now
        {
            why.push(format!(
                "synthesizer-generation {seen} < the Synthesizer's {now}"
            ));
        }
        if let (Some(seen), Some(now)) = (r.composition_generation, composition_generation)
            && seen < now
        {
            why.push(format!(
                "composition-generation {seen} < the Composition's {now}"
            ));
        }
        if !why.is_empty() {
            out.push(format!("{}: {}", r.key, why.join(", ")));
        }
    }
    out
}

/// The inputs read now whose revision moved since `old` (Eno's `inputChangeCount`): when both
/// sides carry a `revision`, only a higher revision counts. An input absent from `old` (an
/// optional input that appeared) counts only when it says `ignore-side-effects: "false"`; one
/// absent now (an optional input that went away) never counts — as in Eno, which notes that
/// counting them loops. The target cluster's capabilities appearing (a Composition synthesized
/// before its Synthesizer took them) count. Order does not matter.
fn changed_inputs(old: &[InputRevision], new: &[InputRevision]) -> Vec<String> {
    if old == new {
        return Vec::new();
    }
    let keys: BTreeSet<&str> = new.iter().map(|r| r.key.as_str()).collect();
    keys.into_iter()
        .filter(|key| {
            let pick = |v: &[InputRevision]| -> Vec<InputRevision> {
                v.iter().filter(|r| r.key == *key).cloned().collect()
            };
            let (a, b) = (pick(old), pick(new));
            if a.is_empty() {
                return *key == crds::names::CAPABILITIES_REVISION_KEY
                    || b.iter().any(|r| r.ignore_side_effects == Some(false));
            }
            // Eno's `Less`: with a `revision` on both sides only a higher one counts.
            let same = a.len() == b.len()
                && a.iter()
                    .zip(&b)
                    .all(|(x, y)| match (x.revision, y.revision) {
                        (Some(p), Some(q)) => q <= p,
                        _ => x == y,
                    });
            !same
        })
        .map(String::from)
        .collect()
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
            slices_unusable: false,
            ignore_side_effects: false,
            deferred: &[],
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
    fn changed_inputs_are_named_and_added_or_removed_ones_do_not_count() {
        let old = current(vec![rev("a", "1"), rev("b", "1")]);
        let new = [rev("a", "2"), rev("c", "1")];
        assert_eq!(
            decide(Some(&old), &now(&new)),
            Trigger::InputsChanged {
                keys: vec!["a".into()],
                deferred: false
            }
        );
    }

    /// Eno `internal/controllers/scheduling/op.go` (`inputChangeCount`, `op_test.go`): an
    /// optional input appearing re-synthesizes only when it says `ignore-side-effects:
    /// "false"` (even under the Composition's own `ignore-side-effects`); one going away never
    /// does; one that comes back changed does.
    #[test]
    fn optional_inputs_appearing_or_going_resynthesize_only_as_in_eno() {
        let c = current(vec![rev("config", "1")]);
        let appeared = [rev("config", "1"), rev("opt", "5")];
        assert_eq!(decide(Some(&c), &now(&appeared)), Trigger::UpToDate);
        let mut insisting = appeared.clone();
        insisting[1].ignore_side_effects = Some(false);
        let mut n = now(&insisting);
        n.ignore_side_effects = true;
        assert_eq!(
            decide(Some(&c), &n),
            Trigger::InputsChanged {
                keys: vec!["opt".into()],
                deferred: false
            }
        );
        let c2 = current(vec![rev("config", "1"), rev("opt", "5")]);
        assert_eq!(
            decide(Some(&c2), &now(&[rev("config", "1")])),
            Trigger::UpToDate
        );
        assert_eq!(
            decide(Some(&c2), &now(&[rev("config", "1"), rev("opt", "9")])),
            Trigger::InputsChanged {
                keys: vec!["opt".into()],
                deferred: false
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
        n.ignore_side_effects = true;
        assert_eq!(decide(Some(&c), &n), Trigger::WriteBackUnknown);
        n.slices_unusable = true;
        assert_eq!(decide(Some(&c), &n), Trigger::SlicesMissing);
    }

    /// The target cluster's capabilities: a change, and their first appearance, are input
    /// changes, deferred when the caller defers the key (it does: under the cooldown).
    #[test]
    fn capabilities_appearing_or_changing_are_deferred_input_changes() {
        let key = crds::names::CAPABILITIES_REVISION_KEY;
        let caps = |d: &str| InputRevision {
            key: key.into(),
            digest: Some(d.into()),
            ..InputRevision::default()
        };
        let deferred = [key.to_string()];
        let old = [rev("a", "1")];
        let new = [rev("a", "1"), caps("sha256:1")];
        let mut n = now(&new);
        n.deferred = &deferred;
        let want = Trigger::InputsChanged {
            keys: vec![key.into()],
            deferred: true,
        };
        assert_eq!(decide(Some(&current(old.to_vec())), &n), want);
        let newer = [rev("a", "1"), caps("sha256:2")];
        let mut n = now(&newer);
        n.deferred = &deferred;
        assert_eq!(decide(Some(&current(new.to_vec())), &n), want);
        assert!(want.is_deferred());
    }

    #[test]
    fn only_input_changes_may_keep_the_slices() {
        assert!(
            Trigger::InputsChanged {
                keys: vec![],
                deferred: false
            }
            .may_keep_slices()
        );
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

    #[test]
    fn inputs_out_of_lockstep_are_named_as_eno_names_them() {
        let r =
            |key: &str, revision: Option<i64>, sg: Option<i64>, cg: Option<i64>| InputRevision {
                key: key.into(),
                resource_version: Some("1".into()),
                revision,
                synthesizer_generation: sg,
                composition_generation: cg,
                ..InputRevision::default()
            };
        // Same revision (or none): in lockstep.
        assert!(
            mismatched(
                &[
                    r("a", Some(2), None, None),
                    r("b", Some(2), None, None),
                    r("c", None, None, None)
                ],
                Some(1),
                Some(1)
            )
            .is_empty()
        );
        let m = mismatched(
            &[r("a", Some(1), None, None), r("b", Some(2), None, None)],
            Some(1),
            Some(1),
        );
        assert_eq!(m.len(), 1);
        assert!(m[0].starts_with("a: revision 1"), "{m:?}");
        let m = mismatched(&[r("a", None, Some(3), Some(5))], Some(4), Some(5));
        assert_eq!(m, ["a: synthesizer-generation 3 < the Synthesizer's 4"]);
        assert!(mismatched(&[r("a", None, Some(4), Some(5))], Some(4), Some(5)).is_empty());
        assert_eq!(
            mismatched(&[r("a", None, None, Some(1))], Some(4), Some(2)).len(),
            1
        );
    }

    #[test]
    fn with_revisions_on_both_sides_only_a_revision_change_resynthesizes() {
        let with = |rv: &str, revision: i64| InputRevision {
            key: "a".into(),
            resource_version: Some(rv.into()),
            revision: Some(revision),
            ..InputRevision::default()
        };
        assert!(changed_inputs(&[with("1", 7)], &[with("2", 7)]).is_empty());
        assert_eq!(changed_inputs(&[with("1", 7)], &[with("2", 8)]), ["a"]);
        // Eno's `Less`: a lower revision is not a change.
        assert!(changed_inputs(&[with("1", 8)], &[with("2", 7)]).is_empty());
        // Without a revision on one side the resourceVersion counts.
        assert_eq!(changed_inputs(&[rev("a", "1")], &[with("2", 7)]), ["a"]);
    }

    #[test]
    fn side_effects_and_deferred_refs_as_in_eno() {
        let old = [rev("config", "1"), rev("other", "1")];
        let current = current(old.to_vec());
        let mut changed = [rev("config", "2"), rev("other", "1")];
        // Composition ignores side effects: an input change is not a trigger...
        let mut n = now(&changed);
        n.ignore_side_effects = true;
        assert_eq!(decide(Some(&current), &n), Trigger::UpToDate);
        // ...nor a Synthesizer change...
        let mut n2 = now(&old);
        n2.ignore_side_effects = true;
        n2.synthesizer_generation = Some(9);
        assert_eq!(decide(Some(&current), &n2), Trigger::UpToDate);
        // ...unless the input says `ignore-side-effects: "false"`.
        changed[0].ignore_side_effects = Some(false);
        let mut n = now(&changed);
        n.ignore_side_effects = true;
        assert!(matches!(
            decide(Some(&current), &n),
            Trigger::InputsChanged { .. }
        ));
        // An input saying `"true"` never triggers.
        changed[0].ignore_side_effects = Some(true);
        assert_eq!(decide(Some(&current), &now(&changed)), Trigger::UpToDate);
        // A deferred ref's change is a deferred trigger.
        changed[0].ignore_side_effects = None;
        let deferred = ["config".to_string()];
        let mut n = now(&changed);
        n.deferred = &deferred;
        assert_eq!(
            decide(Some(&current), &n),
            Trigger::InputsChanged {
                keys: vec!["config".into()],
                deferred: true
            }
        );
    }
}
