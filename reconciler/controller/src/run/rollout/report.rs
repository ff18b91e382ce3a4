//! What a rollout writes and says: `status.rollout` (only over the copy it read), Events for
//! each step, the line `enoki status` prints, and the metrics of deleted Synthesizers.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};

use super::super::context::Context;
use super::order::{canary_selects, order_key, runs};
use crds::names::rollout as phase;
use crds::{Composition, RolloutStatus, RolloutStrategy, Synthesizer};
use reconciler_core::rollout;

/// Writes `status.rollout` (replaced whole: fields that went away go).
pub(crate) async fn write(
    ctx: &Context,
    synth: &Synthesizer,
    st: &RolloutStatus,
) -> Result<(), kube::Error> {
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
pub(crate) async fn tell(
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
    let message = after.message.clone().unwrap_or_default();
    if after.wave > before.map_or(0, |b| b.wave) || (new && after.wave > 0) {
        say.push((false, "WaveStarted", message.clone()));
    }
    // Entering a phase: (phase, Warning, reason).
    for (p, warning, reason) in [
        (phase::HALTED, true, "RolloutHalted"),
        (phase::COMPLETE, false, "RolloutComplete"),
        (phase::UNDONE, false, "RolloutUndone"),
        (phase::PAUSED, false, "RolloutPaused"),
    ] {
        if after.phase == p && !was(p) {
            say.push((warning, reason, message.clone()));
        }
    }
    if after.phase == phase::PROGRESSING && was(phase::PAUSED) {
        let note = format!("wave {} goes on", after.wave);
        say.push((false, "RolloutResumed", note));
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
    let target = rollout::target(ro, key, canary_selects(synth, comp), runs).number;
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

/// Removes the rollout series of deleted Synthesizers (once their cache is listed), and all of
/// them when this replica stops coordinating (`stop`: it lost shard 0).
pub(crate) async fn forget_deleted(
    ctx: Arc<Context>,
    synths: kube::runtime::reflector::Store<Synthesizer>,
    stop: impl std::future::Future<Output = ()>,
) {
    let sweep = async {
        if synths.wait_until_ready().await.is_err() {
            return;
        }
        loop {
            let names: std::collections::HashSet<String> =
                synths.state().iter().map(|s| s.name_any()).collect();
            ctx.report.metrics.rollout.retain(|n| names.contains(n));
            tokio::time::sleep(Duration::from_secs(15)).await;
        }
    };
    tokio::select! {
        () = sweep => {}
        () = stop => ctx.report.metrics.rollout.retain(|_| false),
    }
}
