//! Synthesizer rollouts. The Synthesizer controller (cluster-wide work, shard 0's holder)
//! records a SynthesizerRevision for every change of what a Synthesizer synthesizes, once its
//! module compiled, and moves its rollout ([`reconciler_core::rollout`]) over the
//! Compositions' status: `status.rollout` on the Synthesizer says which revision rolls out,
//! which is stable, and which Compositions are admitted. Each Composition's pass reads it and
//! synthesizes with the revision it is given (`run::composition::revision`); nothing else is
//! recorded, so a restart or a new leader goes on from the status.

pub(crate) mod fleet;
pub(crate) mod order;
pub(crate) mod report;
pub(crate) mod revisions;

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;

pub(crate) use order::{canary_selects, mark, order_key, revision_of, runs, unmark};
pub(crate) use report::{describe, forget_deleted};

use super::context::Context;
use crds::names::rollout as phase;
use crds::{OnFailure, RolloutStatus, Synthesizer};
use reconciler_core::rollout::{self, Asked, Policy};

/// `spec.rollout` with the controller's defaults; the fields that do not parse (named).
fn policy_of(synth: &Synthesizer, opts: &super::SynthesisOptions) -> (Policy, Vec<String>) {
    let r = synth.spec.rollout.clone().unwrap_or_default();
    let mut problems = Vec::new();
    let mut duration = |field: &str, v: Option<&String>, default: u64| match v {
        None => Duration::from_secs(default),
        Some(s) => humantime::parse_duration(s).unwrap_or_else(|e| {
            problems.push(format!("spec.rollout.{field}: {s:?}: {e}"));
            Duration::from_secs(default)
        }),
    };
    let deadline = duration("waveDeadline", r.wave_deadline.as_ref(), 600);
    let bake = duration("bakeTime", r.bake_time.as_ref(), 0);
    let canary = r.canary.unwrap_or_default();
    let policy = Policy {
        strategy: r.strategy.unwrap_or(opts.rollout_strategy),
        selector: canary.selector.is_some(),
        canary_count: canary.count,
        canary_percent: canary.percent,
        steps: r.steps,
        max_failures: r.max_failures.unwrap_or(0).max(0),
        deadline,
        bake,
        on_failure: r.on_failure.unwrap_or(OnFailure::Pause),
    };
    (policy, problems)
}

/// The module digest of the Synthesizer's current generation, once it compiled.
fn compiled(synth: &Synthesizer) -> Option<String> {
    let st = synth.status.as_ref()?;
    let ready = st.conditions.iter().any(|c| {
        c.type_ == crds::names::conditions::READY
            && c.status == "True"
            && c.observed_generation == synth.metadata.generation
    });
    (ready && st.observed_generation == synth.metadata.generation)
        .then(|| st.module_digest.clone())
        .flatten()
}

/// One step of `synth`'s rollout: a new revision when what it synthesizes changed (once its
/// module compiled), then the wave's gate over its Compositions, recorded in `status.rollout`.
/// When to look again.
pub(crate) async fn reconcile(ctx: &Arc<Context>, synth: &Synthesizer) -> Option<Duration> {
    if !ctx.opts.synthesis.rollouts {
        return None;
    }
    let name = synth.name_any();
    let before = synth.status.as_ref().and_then(|s| s.rollout.clone());
    let sharded = ctx.opts.shards > 1;
    let comps = match fleet::compositions(ctx).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(synthesizer = %name, error = %e, "cannot list Compositions");
            return Some(Duration::from_secs(10));
        }
    };
    if !comps.iter().any(|c| fleet::takes_part(c, &name)) {
        // None of its Compositions is synthesized yet (or served by this controller): nothing
        // to roll out. Looked at again in the cache (listing, sharded: at the resync).
        return Some(if sharded {
            ctx.opts.resync
        } else {
            Duration::from_secs(10)
        });
    }
    let (policy, problems) = policy_of(synth, &ctx.opts.synthesis);
    let (current, new) = match next_revision(ctx, synth, before.as_ref(), &policy).await {
        Ok(Some(c)) => c,
        // No revision yet and the module has not compiled.
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(synthesizer = %name, error = %e, "cannot record a revision");
            return Some(Duration::from_secs(10));
        }
    };
    let members = fleet::members(synth, &current, &comps);
    let after = rollout::step(&policy, &current, &members, asked(synth), now());
    ctx.report.metrics.rollout.publish(&name, &after);
    if before.as_ref() != Some(&after) && !counts_too_soon(&name, before.as_ref(), &after) {
        if let Err(e) = report::write(ctx, synth, &after).await {
            // A newer copy (another writer, or this step's own last write not seen yet).
            tracing::debug!(synthesizer = %name, error = %e, "status.rollout not written");
            return Some(Duration::from_secs(1));
        }
        report::tell(ctx, synth, before.as_ref(), &after, &problems).await;
        if new || before.as_ref().is_some_and(|b| b.phase != after.phase) {
            let limit = synth
                .spec
                .rollout
                .as_ref()
                .and_then(|r| r.revision_history_limit)
                .map_or(ctx.opts.synthesis.revision_history_limit as usize, |l| {
                    usize::try_from(l.max(1)).unwrap_or(1)
                });
            let in_use = fleet::in_use(&after, &name, &comps);
            revisions::prune(ctx.clusters.client(), synth, limit, &in_use).await;
        }
    }
    let moving = after.phase == phase::PROGRESSING || after.phase == phase::PAUSED;
    moving.then_some(Duration::from_secs(if sharded { 10 } else { 2 }))
}

/// The rollout this step moves, and whether it is a new one: the recorded one while what the
/// Synthesizer synthesizes is unchanged (or its new generation has not compiled: the rollout
/// under way still moves, halts and can be undone), else a new revision's.
async fn next_revision(
    ctx: &Context,
    synth: &Synthesizer,
    before: Option<&RolloutStatus>,
    policy: &Policy,
) -> Result<Option<(RolloutStatus, bool)>, kube::Error> {
    let Some(digest) = compiled(synth) else {
        return Ok(before.map(|b| (b.clone(), false)));
    };
    let template = revisions::template_digest(&revisions::template_of(&synth.spec));
    if let Some(b) = before
        .filter(|b| b.revision.template_digest == template && b.revision.module_digest == digest)
    {
        return Ok(Some((b.clone(), false)));
    }
    let newest = before.map_or(0, |b| b.revision.number);
    match revisions::create(ctx.clusters.client(), synth, &digest, newest).await {
        Ok(r) => Ok(Some((rollout::start(before, r, policy.strategy), true))),
        // The rollout under way still moves (halts, can be undone) meanwhile.
        Err(e) if before.is_some() => {
            tracing::warn!(synthesizer = %synth.name_any(), error = %e, "cannot record a revision");
            Ok(before.map(|b| (b.clone(), false)))
        }
        Err(e) => Err(e),
    }
}

/// Whether `after` differs from `before` only in its counts and those were written less than
/// [`COUNTS_EVERY`] ago: each write wakes every Composition of the Synthesizer, so counts alone
/// are written at most that often (a phase, wave or threshold change at once).
fn counts_too_soon(name: &str, before: Option<&RolloutStatus>, after: &RolloutStatus) -> bool {
    let mut last = COUNTS_WRITTEN.lock();
    let now = std::time::Instant::now();
    let only_counts = before.is_some_and(|b| {
        let mut same = after.clone();
        same.revisions.clone_from(&b.revisions);
        (same.updated, same.ready, same.failed, same.total) =
            (b.updated, b.ready, b.failed, b.total);
        &same == b
    });
    if only_counts
        && last
            .get(name)
            .is_some_and(|t| now.duration_since(*t) < COUNTS_EVERY)
    {
        return true;
    }
    last.insert(name.to_string(), now);
    false
}

/// How often a rollout's counts alone are written.
const COUNTS_EVERY: Duration = Duration::from_secs(5);

/// When each Synthesizer's `status.rollout` was last written from here.
static COUNTS_WRITTEN: std::sync::LazyLock<
    parking_lot::Mutex<std::collections::HashMap<String, std::time::Instant>>,
> = std::sync::LazyLock::new(Default::default);

fn now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

/// What the Synthesizer's annotations ask: pause, undo.
fn asked(synth: &Synthesizer) -> Asked {
    let a = synth.annotations();
    Asked {
        paused: a.get(phase::PAUSED_ANNOTATION).is_some_and(|v| v == "true"),
        undo: a
            .get(phase::UNDO_ANNOTATION)
            .and_then(|v| v.trim().parse().ok()),
    }
}
