//! What keeps a Composition's next synthesis from starting before its module is asked for:
//! the tenancy rule over the Synthesizer (its revision) it would run, and how a precondition's
//! verdict is recorded in the status.

use super::*;

/// The tenancy verdicts over `synth` (the revision the rollout gives `comp`): a Synthesizer
/// whose `namespaceSelector` leaves the namespace out, a remote namespace with no mapping,
/// references outside the controller's namespace.
///
/// # Errors
/// Reading the namespace's labels failed.
pub(super) async fn tenancy(
    ctx: &Arc<Context>,
    comp: &Composition,
    synth: Option<&crds::Synthesizer>,
    seen: &mut decide::Preconditions,
) -> Result<(), Error> {
    if let Some(s) = synth {
        seen.not_allowed = super::super::tenancy::synthesizer_not_allowed(ctx, comp, s).await?;
    }
    seen.remote_unmapped = ctx.clusters.remote_user_of(comp).err();
    let tenancy = &ctx.opts.tenancy;
    if let Some(s) = synth.filter(|_| tenancy.no_cross_namespace_refs) {
        let home = tenancy.controller_namespace.as_deref();
        seen.cross_namespace = super::super::tenancy::cross_namespace_refs(comp, s, home);
    }
    Ok(())
}

/// Records a precondition's verdict in the status this pass writes. A module being fetched is
/// not a failure: a Composition that was synthesized keeps its conditions; one that never was,
/// or whose last condition is a policy refusal (which no longer holds: the checks before the
/// module passed), says what it waits for.
pub(super) fn record_blocker(
    st: &mut CompositionStatus,
    generation: Option<i64>,
    blocked: &decide::Blocked,
) {
    match blocked {
        decide::Blocked::Refused {
            reason, message, ..
        }
        | decide::Blocked::Failed {
            reason, message, ..
        } => fail(st, generation, reason, message),
        decide::Blocked::Loading => {
            let synthesized = st
                .conditions
                .iter()
                .find(|c| c.type_ == conditions::SYNTHESIZED);
            let stale =
                synthesized.is_none_or(|c| decide::POLICY_REFUSALS.contains(&c.reason.as_str()));
            if stale {
                reconciler_core::condition::set_condition(
                    &mut st.conditions,
                    conditions::SYNTHESIZED,
                    false,
                    reasons::MODULE_LOADING,
                    "the Synthesizer's module is being fetched and compiled; the next synthesis \
                     waits for it (the current one, if any, is still applied)",
                    generation,
                );
            }
        }
    }
}
