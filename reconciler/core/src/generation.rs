//! Which generation a Composition's status speaks for, as GitOps tools read it (kstatus:
//! Flux's health checks, `kubectl wait`, Argo CD). Pure: decides `status.observedGeneration`
//! and the `Reconciling`/`Stalled` pair from what the pass settled; the caller writes it.
//!
//! - `observedGeneration` is the generation whose synthesis is current *and* was applied this
//!   pass (Ready at generation N means N's outputs), or the generation whose synthesis failed
//!   (`Stalled=True` for it: kstatus says Failed). A change held back (dependsOn, inputs out of
//!   lockstep, the cooldown, a module being fetched) leaves it at the older generation.
//! - While the status does not speak for the newest generation, `Reconciling` is True (with the
//!   hold's reason), so a tool that ignores `observedGeneration` still sees work in progress; a
//!   failure that no longer holds (the next synthesis now only waits) is no longer `Stalled`.

use crds::CompositionStatus;
use crds::names::{conditions, reasons};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::condition::{self, set_condition};

fn find<'a>(st: &'a CompositionStatus, type_: &str) -> Option<&'a Condition> {
    st.conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the synthesis of the newest spec (`generation`) failed and still does:
/// `Synthesized=False` and `Stalled=True` for the same reason (both are set together by a
/// failure), for that generation.
fn failing(st: &CompositionStatus, generation: Option<i64>) -> bool {
    match (
        find(st, conditions::SYNTHESIZED),
        find(st, conditions::STALLED),
    ) {
        (Some(syn), Some(stall)) => {
            condition::fails(syn)
                && condition::holds(stall)
                && syn.reason == stall.reason
                && stall.observed_generation == generation
        }
        _ => false,
    }
}

/// Settles `observedGeneration`, `Reconciling` and `Stalled` for a pass over a Composition at
/// `generation`; `applied`: the pass enforced the current synthesis.
pub fn settle(st: &mut CompositionStatus, generation: Option<i64>, applied: bool) {
    let current = st
        .current_synthesis
        .as_ref()
        .and_then(|c| c.observed_composition_generation);
    if failing(st, generation) {
        st.observed_generation = generation;
        let (reason, message) = find(st, conditions::STALLED)
            .map(|c| (c.reason.clone(), c.message.clone()))
            .unwrap_or_default();
        set_condition(
            &mut st.conditions,
            conditions::RECONCILING,
            false,
            &reason,
            &message,
            generation,
        );
        return;
    }
    if let Some(stall) = find(st, conditions::STALLED).filter(|c| condition::holds(c)) {
        // The failure no longer holds: the next synthesis waits (its reason is Synthesized's).
        let observed = stall.observed_generation;
        set_condition(
            &mut st.conditions,
            conditions::STALLED,
            false,
            reasons::SYNTHESIZING,
            "",
            observed,
        );
    }
    if applied && generation.is_some() && current == generation {
        st.observed_generation = generation;
        return;
    }
    // Held back: the status still speaks for an older generation (or none yet).
    let (reason, message) = match find(st, conditions::SYNTHESIZED).filter(|c| condition::fails(c))
    {
        Some(c) => (c.reason.clone(), c.message.clone()),
        None => (
            reasons::SYNTHESIZING.to_string(),
            "the newest spec is not synthesized and applied yet".to_string(),
        ),
    };
    set_condition(
        &mut st.conditions,
        conditions::RECONCILING,
        true,
        &reason,
        &message,
        generation,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crds::Synthesis;

    fn status(current: Option<i64>, observed: Option<i64>) -> CompositionStatus {
        CompositionStatus {
            observed_generation: observed,
            current_synthesis: current.map(|g| Synthesis {
                observed_composition_generation: Some(g),
                ..Synthesis::default()
            }),
            ..CompositionStatus::default()
        }
    }

    fn cond<'a>(st: &'a CompositionStatus, t: &str) -> Option<&'a str> {
        find(st, t).map(|c| c.status.as_str())
    }

    #[test]
    fn an_applied_current_synthesis_advances_the_observed_generation() {
        let mut st = status(Some(2), Some(1));
        settle(&mut st, Some(2), true);
        assert_eq!(st.observed_generation, Some(2));
    }

    #[test]
    fn a_held_back_change_keeps_the_old_generation_and_is_reconciling() {
        let mut st = status(Some(1), Some(1));
        set_condition(
            &mut st.conditions,
            conditions::SYNTHESIZED,
            false,
            reasons::ROLLOUT_COOLDOWN,
            "waiting",
            Some(2),
        );
        settle(&mut st, Some(2), true);
        assert_eq!(st.observed_generation, Some(1));
        assert_eq!(cond(&st, conditions::RECONCILING), Some("True"));
        assert_eq!(
            find(&st, conditions::RECONCILING).map(|c| c.reason.as_str()),
            Some(reasons::ROLLOUT_COOLDOWN)
        );
    }

    #[test]
    fn a_failed_synthesis_is_observed_stalled_and_not_reconciling() {
        let mut st = status(Some(1), Some(1));
        for (t, v) in [
            (conditions::SYNTHESIZED, false),
            (conditions::STALLED, true),
        ] {
            set_condition(&mut st.conditions, t, v, "SynthesisFailed", "boom", Some(2));
        }
        set_condition(
            &mut st.conditions,
            conditions::RECONCILING,
            true,
            "NotReady",
            "",
            Some(1),
        );
        settle(&mut st, Some(2), true);
        assert_eq!(st.observed_generation, Some(2));
        assert_eq!(cond(&st, conditions::RECONCILING), Some("False"));
        assert_eq!(cond(&st, conditions::STALLED), Some("True"));
    }

    #[test]
    fn a_failure_of_an_older_generation_does_not_fail_the_newest() {
        let mut st = status(Some(1), Some(2));
        for (t, v) in [
            (conditions::SYNTHESIZED, false),
            (conditions::STALLED, true),
        ] {
            set_condition(&mut st.conditions, t, v, "SynthesisFailed", "boom", Some(2));
        }
        // Generation 3 waits for its module: its status keeps speaking for 2, not Stalled.
        settle(&mut st, Some(3), true);
        assert_eq!(st.observed_generation, Some(2));
        assert_eq!(cond(&st, conditions::STALLED), Some("False"));
        assert_eq!(cond(&st, conditions::RECONCILING), Some("True"));
    }

    #[test]
    fn a_failure_that_now_only_waits_is_no_longer_stalled() {
        let mut st = status(Some(1), Some(1));
        set_condition(
            &mut st.conditions,
            conditions::STALLED,
            true,
            "SynthesisFailed",
            "",
            Some(2),
        );
        set_condition(
            &mut st.conditions,
            conditions::SYNTHESIZED,
            false,
            reasons::ROLLOUT_COOLDOWN,
            "",
            Some(2),
        );
        settle(&mut st, Some(2), true);
        assert_eq!(cond(&st, conditions::STALLED), Some("False"));
        assert_eq!(st.observed_generation, Some(1));
    }

    #[test]
    fn a_composition_never_synthesized_is_reconciling() {
        let mut st = status(None, None);
        settle(&mut st, Some(1), false);
        assert_eq!(st.observed_generation, None);
        assert_eq!(cond(&st, conditions::RECONCILING), Some("True"));
    }
}
