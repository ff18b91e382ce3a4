//! The next synthesis: whether one is due, what holds it back (inputs not in lockstep,
//! `dependsOn`, the rollout cooldown), then synthesizing and storing it.

use super::*;

/// What the decision about the next synthesis came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NextEnd {
    /// The current synthesis is the one the inputs give.
    UpToDate,
    /// It waits or failed (the reason is in a condition): look again after this.
    Held(Duration),
    /// A new synthesis was stored: this pass records it and the next one applies it (an
    /// unrecorded synthesis replacing a recorded one is never applied), or, a first one,
    /// this pass applies and records it.
    Stored,
}

/// The decision about the next synthesis, and the synthesis when it is due.
pub(super) async fn next_synthesis(
    ctx: &Arc<Context>,
    comp: &Arc<Composition>,
    st: &mut CompositionStatus,
    o: Observed,
) -> Result<NextEnd, Error> {
    let uid = comp.uid().unwrap_or_default();
    let forced = observe::forced(comp);
    let write_back_known = o.synth.spec.for_kind.is_none()
        || ctx
            .state
            .memory
            .synthesis(&uid, |m| m.status_write.is_some());
    let slices = match &st.current_synthesis {
        Some(cur) => slices::check(ctx, comp, cur).await?,
        None => slices::SliceCheck::Whole,
    };
    let digest = o.module.digest();
    // A change of what the target cluster serves reaches every chart of the cluster at once:
    // it rolls out under the cooldown, like a deferred ref.
    let deferred: Vec<String> = o
        .synth
        .spec
        .refs
        .iter()
        .filter(|r| r.defer)
        .map(|r| r.key.clone())
        .chain([crate::run::capabilities::CAPABILITIES_REVISION_KEY.to_string()])
        .collect();
    let trigger = trigger::decide(
        st.current_synthesis.as_ref(),
        &trigger::Now {
            generation: comp.metadata.generation,
            synthesizer_generation: o.synth.metadata.generation,
            module_digest: &digest,
            revisions: &o.revisions,
            forced: forced.as_deref(),
            write_back_known,
            slices_missing: slices == slices::SliceCheck::Missing,
            slices_unusable: slices == slices::SliceCheck::Unusable,
            ignore_side_effects: ignores_side_effects(comp),
            deferred: &deferred,
        },
    );
    if trigger == Trigger::UpToDate {
        // The current synthesis is the one these inputs give: a blocker that has cleared
        // (an input back, a module fetched again) leaves no stale condition behind.
        if st.current_synthesis.is_some()
            && !reconciler_core::condition::is_true(&st.conditions, conditions::SYNTHESIZED)
        {
            synthesize::synthesized(st, comp.metadata.generation);
        }
        forget_unrecorded(ctx, comp, st).await;
        return Ok(NextEnd::UpToDate);
    }
    synthesize_now(ctx, comp, st, o, forced, &trigger).await
}

/// Inputs in lockstep, `dependsOn`, the rollout cooldown, then the synthesis.
pub(super) async fn synthesize_now(
    ctx: &Arc<Context>,
    comp: &Composition,
    st: &mut CompositionStatus,
    o: Observed,
    forced: Option<String>,
    trigger: &Trigger,
) -> Result<NextEnd, Error> {
    // The namespace's slice budget and the deletion of stale slices read the slice cache:
    // not before its first list is done (a start), else both would see no slices. Checked
    // before the rollout cooldown is claimed.
    if !slices::cache_listed(&ctx.caches) {
        tracing::info!(%trigger, "synthesis waits for the slice cache's first list");
        return Ok(NextEnd::Held(Duration::from_secs(5)));
    }
    // A progressive rollout's wave (or a rollback) synthesizes at once: its own gate paces
    // it, and it takes no cooldown turn.
    let deferred = trigger.is_deferred() && (o.paced || *trigger != Trigger::SynthesizerChanged);
    let req = synthesize::Request {
        synth: &o.synth,
        module: o.module,
        gathered: o.gathered,
        revisions: o.revisions,
        forced,
        trigger,
        deferred,
        observed: o.observed,
        limits: o.limits,
    };
    // What holds the synthesis back (reads only), then the pure decision.
    let seen = decide::Seen {
        mismatched: trigger::mismatched(
            &req.revisions,
            crate::run::eno::project::lockstep_generation(req.synth),
            crate::run::eno::project::lockstep_generation(comp),
        ),
        dependencies: dependencies::block(ctx.reads(), comp).await?,
        deferred: req.deferred,
    };
    let claimed = match decide::next(&seen) {
        decide::Next::Wait(wait) => {
            let retry = wait.retry(ctx.opts.apply.readiness_poll);
            hold_back(st, comp.metadata.generation, wait);
            return Ok(NextEnd::Held(retry));
        }
        // A Synthesizer change alone, or a change of deferred refs only, rolls out gradually:
        // one Composition per cooldown, across all Compositions (Eno). Claimed last and
        // atomically, so a blocked Composition never uses up a rollout slot; one whose
        // synthesis then does not start (backoff, synthesis rates) gives it back.
        decide::Next::Synthesize { claim_rollout } => {
            match claim(ctx, comp, st, &req, trigger, claim_rollout) {
                Ok(claim) => claim,
                Err(end) => return Ok(end),
            }
        }
    };
    st.dependency_status = None;
    tracing::debug!(%trigger, "synthesizing");
    let fp = synthesize::fingerprint(comp, &req);
    match synthesize::synthesize(ctx, comp, st, req).await {
        Ok(synthesize::SynthesisEnd::Stored) => Ok(NextEnd::Stored),
        Ok(synthesize::SynthesisEnd::Failed(requeue)) => Ok(NextEnd::Held(requeue)),
        Ok(synthesize::SynthesisEnd::NotStarted(requeue)) => {
            if let Some(before) = claimed {
                ctx.give_back_rollout_slot(before);
            }
            Ok(NextEnd::Held(requeue))
        }
        // Nothing stored: the slot goes back unless an output is kept for the retry (which
        // then claims none).
        Err(e) => {
            if let Some(before) = claimed
                && !pending(ctx, comp, &fp)
            {
                ctx.give_back_rollout_slot(before);
            }
            Err(e)
        }
    }
}

/// Whether an output of fingerprint `fp` is kept for a retry of its slice write.
fn pending(ctx: &Context, comp: &Composition, fp: &str) -> bool {
    ctx.state
        .memory
        .synthesis(&comp.uid().unwrap_or_default(), |m| {
            m.pending_output.as_ref().is_some_and(|(f, _)| f == fp)
        })
}

/// Claims the rollout slot a synthesis asks for (`claim_rollout`): `Ok(None)` when it asks
/// none or a synthesis of these inputs claimed it already (stored but not yet recorded, its
/// status write failed; or its output kept for a retry of its slice write); `Err` when the
/// cooldown holds it back.
fn claim(
    ctx: &Context,
    comp: &Composition,
    st: &mut CompositionStatus,
    req: &synthesize::Request<'_>,
    trigger: &Trigger,
    claim_rollout: bool,
) -> Result<Option<crate::run::context::RolloutClaim>, NextEnd> {
    let fp = synthesize::fingerprint(comp, req);
    let unrecorded = ctx
        .state
        .memory
        .synthesis(&comp.uid().unwrap_or_default(), |m| {
            m.unrecorded.as_ref().is_some_and(|(f, _)| *f == fp)
        });
    if !claim_rollout || unrecorded || pending(ctx, comp, &fp) {
        return Ok(None);
    }
    match ctx.rollout_slot() {
        Ok(claim) => Ok(Some(claim)),
        Err(wait) => {
            tracing::debug!(?wait, "synthesizer rollout cooldown");
            cooling_down(st, comp.metadata.generation, trigger);
            Err(NextEnd::Held(wait))
        }
    }
}

/// The current synthesis is up to date: a synthesis stored but never recorded (its status
/// write lost to a newer pass's) will not be recorded any more, and its slices go.
async fn forget_unrecorded(ctx: &Arc<Context>, comp: &Composition, st: &CompositionStatus) {
    let Some((_, s)) = ctx
        .state
        .memory
        .synthesis(&comp.uid().unwrap_or_default(), |m| m.unrecorded.take())
    else {
        return;
    };
    let landed = [&st.current_synthesis, &st.previous_synthesis]
        .into_iter()
        .flatten()
        .any(|c| c.uuid == s.uuid);
    if !landed {
        tracing::info!(synthesis = %s.uuid, "deleting the slices of a synthesis no pass recorded");
        slices::delete(ctx, comp, &s.resource_slices).await;
    }
}

/// Records what holds the next synthesis back: inputs not in lockstep, or `dependsOn`.
pub(super) fn hold_back(st: &mut CompositionStatus, generation: Option<i64>, wait: decide::Wait) {
    match wait {
        decide::Wait::Mismatched(message) => {
            reconciler_core::condition::set_condition(
                &mut st.conditions,
                conditions::SYNTHESIZED,
                false,
                reasons::MISMATCHED_INPUTS,
                &message,
                generation,
            );
            st.simplified = Some(SimplifiedStatus {
                status: crds::StatusWord::MismatchedInputs,
                error: Some(message),
            });
        }
        decide::Wait::Dependencies(block) => wait_on_dependencies(st, generation, block),
    }
}

/// Records that the next synthesis waits for the rollout cooldown. A failed attempt still
/// pending (its in-flight synthesis `canceled`) keeps its word and reason, as Eno shows
/// `SynthesisBackoff` while a canceled synthesis is in flight.
pub(super) fn cooling_down(st: &mut CompositionStatus, generation: Option<i64>, trigger: &Trigger) {
    if st
        .in_flight_synthesis
        .as_ref()
        .is_some_and(|s| s.canceled.is_some())
    {
        return;
    }
    let message = format!(
        "the next synthesis ({trigger}) waits for the rollout cooldown \
         (--rollout-cooldown); the current one is still applied"
    );
    reconciler_core::condition::set_condition(
        &mut st.conditions,
        conditions::SYNTHESIZED,
        false,
        reasons::ROLLOUT_COOLDOWN,
        &message,
        generation,
    );
    st.simplified = Some(SimplifiedStatus {
        status: crds::StatusWord::RolloutCooldown,
        error: None,
    });
}

pub(super) fn wait_on_dependencies(
    st: &mut CompositionStatus,
    generation: Option<i64>,
    block: crds::DependencyStatus,
) {
    let reason = block.reason.clone().unwrap_or_default();
    let detail: Vec<String> = block
        .blocked_by
        .iter()
        .map(|b| format!("{}/{} ({})", b.namespace, b.name, b.reason))
        .collect();
    let message = format!("{reason}: {}", detail.join(", "));
    reconciler_core::condition::set_condition(
        &mut st.conditions,
        conditions::SYNTHESIZED,
        false,
        &reason,
        &message,
        generation,
    );
    st.simplified = Some(SimplifiedStatus {
        status: crds::StatusWord::WaitingOnDependencies,
        error: Some(message),
    });
    st.dependency_status = Some(block);
}
