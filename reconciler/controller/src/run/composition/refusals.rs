//! What keeps a Composition's next synthesis from starting before its module is asked for:
//! the tenancy rule over the Synthesizer (its revision) it would run, and how a precondition's
//! verdict is recorded in the status.

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// The Synthesizer `comp` runs (the revision its rollout gives it) and the tenancy verdicts
/// over it ([`tenancy`]). The live Synthesizer's `namespaceSelector` applies at once (a
/// namespace revoked is revoked whatever revision runs); the rest is checked on the revision.
///
/// # Errors
/// Reading the SynthesizerRevision or the namespace's labels failed.
pub(super) async fn effective(
    ctx: &Arc<Context>,
    comp: &Composition,
    synth: Option<crds::Synthesizer>,
    seen: &mut decide::Preconditions,
) -> Result<Option<revision::Effective>, Error> {
    let live_selector = synth.as_ref().map(|s| s.spec.namespace_selector.clone());
    let eff = match synth {
        Some(s) => {
            let rollouts = ctx.opts.synthesis.rollouts;
            Some(revision::effective(ctx.reads(), rollouts, comp, s).await?)
        }
        None => None,
    };
    let synth = eff.as_ref().map(|e| &e.synth);
    tenancy(ctx, comp, (live_selector, synth), seen).await?;
    Ok(eff)
}

/// The tenancy verdicts over `synth` (the revision the rollout gives `comp`): a Synthesizer
/// whose `namespaceSelector` (the revision's or the live one, `live_selector`) leaves the
/// namespace out, a remote namespace with no mapping,
/// references outside the controller's namespace.
///
/// # Errors
/// Reading the namespace's labels failed.
async fn tenancy(
    ctx: &Arc<Context>,
    comp: &Composition,
    (live_selector, synth): (Option<Option<LabelSelector>>, Option<&crds::Synthesizer>),
    seen: &mut decide::Preconditions,
) -> Result<(), Error> {
    if let Some(s) = synth {
        seen.not_allowed = super::super::tenancy::synthesizer_not_allowed(ctx, comp, s).await?;
        // The live selector too, when the revision's differs: either refusing refuses.
        if let Some(sel) = live_selector.filter(|l| *l != s.spec.namespace_selector)
            && seen.not_allowed.is_none()
        {
            let mut live = s.clone();
            live.spec.namespace_selector = sel;
            seen.not_allowed =
                super::super::tenancy::synthesizer_not_allowed(ctx, comp, &live).await?;
        }
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
