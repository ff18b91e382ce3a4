//! Synthesizer rollouts. The Synthesizer controller (cluster-wide work, shard 0's holder)
//! records a SynthesizerRevision for every change of what a Synthesizer synthesizes, once its
//! module compiled, and moves its rollout ([`reconciler_core::rollout`]) over the
//! Compositions' status: `status.rollout` on the Synthesizer says which revision rolls out,
//! which is stable, and which Compositions are admitted. Each Composition's pass reads it and
//! synthesizes with the revision it is given ([`pinned::effective`]); nothing else is
//! recorded, so a restart or a new leader goes on from the status.

pub(crate) mod order;
pub(crate) mod revisions;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};

pub(crate) use order::{canary_selects, mark, order_key, revision_of, runs, unmark};

use super::context::Context;
use crds::names::rollout as phase;
use crds::{Composition, OnFailure, RolloutStatus, RolloutStrategy, Synthesizer};
use reconciler_core::rollout::{self, Asked, Member, Policy};

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

/// One step of `synth`'s rollout: a new revision when what it synthesizes changed, then the
/// wave's gate over its Compositions, recorded in `status.rollout`. When to look again.
pub(crate) async fn reconcile(ctx: &Arc<Context>, synth: &Synthesizer) -> Option<Duration> {
    let digest = compiled(synth)?;
    let name = synth.name_any();
    let before = synth.status.as_ref().and_then(|s| s.rollout.clone());
    let (policy, problems) = policy_of(synth, &ctx.opts.synthesis);
    let comps = match compositions(ctx).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(synthesizer = %name, error = %e, "cannot list Compositions");
            return Some(Duration::from_secs(10));
        }
    };
    if !comps.iter().any(|c| takes_part(c, &name)) {
        // None of its Compositions is served here (or synthesized yet): nothing to roll out,
        // and another controller's scope (`--label-selector`) may hold them. Looked at again
        // (in the cache) until one is.
        return Some(Duration::from_secs(10));
    }
    let template = revisions::template_digest(&revisions::template_of(&synth.spec));
    let same = before.as_ref().is_some_and(|b| {
        b.revision.template_digest == template && b.revision.module_digest == digest
    });
    let current = match &before {
        Some(b) if same => b.clone(),
        _ => {
            let newest = before.as_ref().map_or(0, |b| b.revision.number);
            match revisions::create(ctx.clusters.client(), synth, &digest, newest).await {
                Ok(r) => rollout::start(before.as_ref(), r, policy.strategy),
                Err(e) => {
                    tracing::warn!(synthesizer = %name, error = %e, "cannot record a revision");
                    return Some(Duration::from_secs(10));
                }
            }
        }
    };
    let members = members(synth, &current, &comps);
    let after = rollout::step(&policy, &current, &members, asked(synth), now());
    ctx.report.metrics.rollout.publish(&name, &after);
    if before.as_ref() != Some(&after) {
        if let Err(e) = write(ctx, synth, &after).await {
            // A newer copy (another writer, or this step's own last write not seen yet).
            tracing::debug!(synthesizer = %name, error = %e, "status.rollout not written");
            return Some(Duration::from_secs(1));
        }
        tell(ctx, synth, before.as_ref(), &after, &problems).await;
        if before
            .as_ref()
            .is_none_or(|b| b.phase != after.phase || !same)
        {
            let limit = synth
                .spec
                .rollout
                .as_ref()
                .and_then(|r| r.revision_history_limit)
                .map_or(ctx.opts.synthesis.revision_history_limit as usize, |l| {
                    usize::try_from(l.max(1)).unwrap_or(1)
                });
            let in_use = in_use(&after, &members);
            revisions::prune(ctx.clusters.client(), &name, limit, &in_use).await;
        }
    }
    (after.phase == phase::PROGRESSING || after.phase == phase::PAUSED)
        .then_some(Duration::from_secs(2))
}

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

/// Revisions a Composition runs, rolls to, or may go back to.
fn in_use(st: &RolloutStatus, members: &[Member]) -> BTreeSet<i64> {
    let mut keep: BTreeSet<i64> = members.iter().filter_map(|m| m.runs).collect();
    keep.insert(st.revision.number);
    keep.extend(st.stable.as_ref().map(|s| s.number));
    keep
}

/// Every Composition, from the cache when this replica serves them all, else listed.
async fn compositions(ctx: &Context) -> Result<Vec<Arc<Composition>>, kube::Error> {
    if ctx.opts.shards <= 1 {
        return Ok(ctx.caches.compositions.state());
    }
    let api: Api<Composition> = Api::all(ctx.clusters.client().clone());
    let mut out = Vec::new();
    let mut lp = ListParams::default().limit(500);
    loop {
        let page = api.list(&lp).await?;
        out.extend(page.items.into_iter().map(Arc::new));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => return Ok(out),
        }
    }
}

/// The Compositions a rollout moves ([`takes_part`]), as the rollout sees them.
fn members(synth: &Synthesizer, st: &RolloutStatus, comps: &[Arc<Composition>]) -> Vec<Member> {
    let name = synth.name_any();
    let which = |s: &crds::Synthesis| runs(st, s);
    comps
        .iter()
        .filter(|c| takes_part(c, &name))
        .filter_map(|c| {
            let s = c.status.as_ref()?;
            let runs = s.current_synthesis.as_ref().and_then(which);
            let failed = s
                .in_flight_synthesis
                .as_ref()
                .is_some_and(|f| f.canceled.is_some() && which(f) == Some(st.revision.number))
                && runs != Some(st.revision.number);
            Some(Member {
                key: order_key(&c.uid().unwrap_or_default(), st.revision.number),
                canary: canary_selects(synth, c),
                runs,
                ready: s
                    .current_synthesis
                    .as_ref()
                    .is_some_and(|x| x.ready.is_some()),
                failed,
            })
        })
        .collect()
}

/// Whether `c` is one of Synthesizer `name`'s Compositions a rollout moves: not being
/// deleted, not suspended, not ignoring side effects (Eno: a Synthesizer change does not reach
/// them), synthesized or attempted at least once.
fn takes_part(c: &Composition, name: &str) -> bool {
    c.spec.synthesizer.name == name
        && c.metadata.deletion_timestamp.is_none()
        && !c.spec.suspend
        && !c.ignores_side_effects()
        && c.status
            .as_ref()
            .is_some_and(|s| s.current_synthesis.is_some() || s.in_flight_synthesis.is_some())
}

/// Writes `status.rollout` (replaced whole: fields that went away go).
async fn write(ctx: &Context, synth: &Synthesizer, st: &RolloutStatus) -> Result<(), kube::Error> {
    let api: Api<Synthesizer> = Api::all(ctx.clusters.client().clone());
    // Only over the object this step read: a step that read a stale copy writes nothing (and
    // tells nothing), so no wave is announced or admitted twice.
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": synth.resource_version()},
        {"op": "add", "path": "/status/rollout", "value": st}
    ]))
    .map_err(kube::Error::SerdeError)?;
    api.patch_status(
        &synth.name_any(),
        &PatchParams::default(),
        &Patch::<()>::Json(patch),
    )
    .await
    .map(|_| ())
}

/// Events for what changed: a new revision, a wave, a halt, completion, pause and resume; a
/// Warning for each `spec.rollout` field that does not parse.
async fn tell(
    ctx: &Context,
    synth: &Synthesizer,
    before: Option<&RolloutStatus>,
    after: &RolloutStatus,
    problems: &[String],
) {
    let obj = synth.object_ref(&());
    let new = before.is_none_or(|b| b.revision.number != after.revision.number);
    let mut say = Vec::new();
    if new {
        say.push((
            false,
            "RolloutStarted",
            format!(
                "revision {} (module {}) rolls out {}; stable revision {}",
                after.revision.number,
                after.revision.module_digest,
                if after.strategy == RolloutStrategy::Progressive {
                    "in waves"
                } else {
                    "with the cooldown"
                },
                after
                    .stable
                    .as_ref()
                    .map_or("none".into(), |s| s.number.to_string()),
            ),
        ));
    }
    let was = |p: &str| before.is_some_and(|b| b.phase == p) && !new;
    if after.wave > before.map_or(0, |b| b.wave) || (new && after.wave > 0) {
        say.push((
            false,
            "WaveStarted",
            after.message.clone().unwrap_or_default(),
        ));
    }
    if after.phase == phase::HALTED && !was(phase::HALTED) {
        say.push((
            true,
            "RolloutHalted",
            after.message.clone().unwrap_or_default(),
        ));
    }
    if after.phase == phase::COMPLETE && !was(phase::COMPLETE) {
        say.push((
            false,
            "RolloutComplete",
            after.message.clone().unwrap_or_default(),
        ));
    }
    if after.phase == phase::PAUSED && !was(phase::PAUSED) {
        say.push((
            false,
            "RolloutPaused",
            after.message.clone().unwrap_or_default(),
        ));
    }
    if after.phase == phase::PROGRESSING && was(phase::PAUSED) {
        say.push((
            false,
            "RolloutResumed",
            format!("wave {} goes on", after.wave),
        ));
    }
    for p in problems {
        say.push((true, "InvalidRollout", format!("{p}; the default is used")));
    }
    for (warning, reason, note) in say {
        tracing::info!(synthesizer = %synth.name_any(), reason, %note, "rollout");
        // Each its own Event: a wave's note is not folded into the last wave's.
        ctx.report
            .event_distinct(&obj, warning, (reason, "Rollout"), note)
            .await;
    }
}

/// What `enoki status` says of a Composition's revision: the one it runs, and whether a newer
/// one waits (and why). `None` when its Synthesizer has no revisions.
pub(crate) fn describe(comp: &Composition, synth: &Synthesizer) -> Option<String> {
    let ro = synth.status.as_ref()?.rollout.as_ref()?;
    let runs = comp
        .status
        .as_ref()
        .and_then(|s| s.current_synthesis.as_ref())
        .and_then(|s| runs(ro, s));
    let key = order_key(&comp.uid().unwrap_or_default(), ro.revision.number);
    let target = rollout::target(ro, key, canary_selects(synth, comp)).number;
    let newest = ro.revision.number;
    let runs_text = runs.map_or("no revision recorded".into(), |r| format!("revision {r}"));
    let why = if runs == Some(newest) {
        "the newest".to_string()
    } else if target == newest {
        format!("revision {newest} is rolling out to it")
    } else {
        format!(
            "revision {newest} waits: its rollout is {}{} and keeps this Composition on \
             revision {target}",
            ro.phase,
            ro.reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        )
    };
    Some(format!(
        "{runs_text} of Synthesizer {} ({why})",
        synth.name_any()
    ))
}
