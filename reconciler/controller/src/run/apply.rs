//! Observe the live objects of the current synthesis, plan, execute the plan with bounded
//! concurrency, write per-resource status into the ResourceSlices (one patch per slice) and
//! roll it up into the Composition's conditions.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use plan::{Op, Plan, ReadinessState, ResourceKey, SkipReason};
use serde_json::{Value, json};

use super::{Context, Error, kube_err, status};
use crds::names::{FIELD_MANAGER, conditions, reasons};
use crds::{Composition, CompositionStatus, ResourceSlice, ResourceState, SimplifiedStatus};

/// Drift corrections of one resource: how many in a row (each within [`FIGHT_WINDOW`] of the
/// last), when the last one happened and when the next one is allowed.
#[derive(Clone, Debug)]
pub struct Fight {
    corrections: u32,
    last: std::time::Instant,
    next: std::time::Instant,
}

/// Two drift corrections further apart than this are unrelated.
const FIGHT_WINDOW: Duration = Duration::from_secs(60);
/// The third correction in a row is a fight: a `FieldConflict` Event, and backoff from here.
const FIGHT_THRESHOLD: u32 = 3;

/// The delay before the next drift correction after `corrections` corrections in a row:
/// none below [`FIGHT_THRESHOLD`], then 1 s, 2 s, 4 s, … up to 5 min.
fn fight_delay(corrections: u32) -> Duration {
    if corrections < FIGHT_THRESHOLD {
        return Duration::ZERO;
    }
    Duration::from_secs(1u64 << (corrections - FIGHT_THRESHOLD).min(9))
        .min(Duration::from_secs(300))
}

/// The other field managers that last wrote `live` (for the `FieldConflict` Event).
fn other_managers(live: Option<&Value>) -> Vec<String> {
    let mut out: Vec<String> = live
        .and_then(|l| l.pointer("/metadata/managedFields"))
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .filter_map(|e| e.get("manager").and_then(Value::as_str))
                .filter(|m| *m != FIELD_MANAGER)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out.dedup();
    out
}

struct Observation {
    api: Option<Api<DynamicObject>>,
    live: Option<Value>,
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

fn gvk_of_manifest(m: &Value) -> Option<GroupVersionKind> {
    let api_version = m.get("apiVersion")?.as_str()?;
    let kind = m.get("kind")?.as_str()?;
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    Some(GroupVersionKind::gvk(group, version, kind))
}

async fn observe(ctx: &Context, manifest: &Value, key: &ResourceKey) -> Result<Observation, Error> {
    let Some(gvk) = gvk_of_manifest(manifest) else {
        return Ok(Observation {
            api: None,
            live: None,
        });
    };
    let Ok((ar, namespaced)) = ctx.resolve(&gvk).await else {
        // Not served (yet): e.g. a CRD from this synthesis is not Established.
        return Ok(Observation {
            api: None,
            live: None,
        });
    };
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(ctx.client.clone(), &key.namespace, &ar)
    } else {
        Api::all_with(ctx.client.clone(), &ar)
    };
    let live = api
        .get_opt(&key.name)
        .await
        .map_err(kube_err(format!("reading {key}")))?
        .map(|o| serde_json::to_value(o).unwrap_or_default());
    Ok(Observation {
        api: Some(api),
        live,
    })
}

/// Summarizes an API error for status (the server's message, not the transport details).
fn summarize(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(resp) => format!("{}: {}", resp.reason, resp.message),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fight_delay_grows_exponentially_from_the_threshold_and_is_capped() {
        let d: Vec<u64> = (1..=14).map(|c| fight_delay(c).as_secs()).collect();
        assert_eq!(d, [0, 0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
    }
}

#[derive(Debug, Default)]
struct Outcome {
    resource_version: Option<String>,
    error: Option<String>,
    /// Not attempted: the resource is backing off after earlier failures.
    held: bool,
}

async fn execute(op: &Op, key: &ResourceKey, obs: &Observation, held: Option<String>) -> Outcome {
    if let Some(last) = held {
        return Outcome {
            error: Some(last),
            resource_version: None,
            held: true,
        };
    }
    let Some(api) = &obs.api else {
        return match op {
            Op::Skip { .. } | Op::Wait { .. } => Outcome::default(),
            _ => Outcome {
                error: Some(format!(
                    "kind of {key} is not served by the API server (yet)"
                )),
                ..Outcome::default()
            },
        };
    };
    let rv_of = |o: DynamicObject| o.metadata.resource_version;
    let result = match op {
        Op::Apply { object } => api
            .patch(
                &key.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(object),
            )
            .await
            .map(rv_of),
        Op::Create { object } | Op::Replace { object } => {
            let mut object = object.clone();
            let replace = matches!(op, Op::Replace { .. });
            if replace
                && let Some(rv) = obs
                    .live
                    .as_ref()
                    .and_then(|l| l.pointer("/metadata/resourceVersion"))
                    .cloned()
            {
                object["metadata"]["resourceVersion"] = rv;
            }
            let obj = match serde_json::from_value::<DynamicObject>(object) {
                Ok(obj) => obj,
                Err(e) => {
                    return Outcome {
                        error: Some(e.to_string()),
                        ..Outcome::default()
                    };
                }
            };
            let pp = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PostParams::default()
            };
            if replace {
                api.replace(&key.name, &pp, &obj).await.map(rv_of)
            } else {
                api.create(&pp, &obj).await.map(rv_of)
            }
        }
        Op::MergePatch { patch, .. } => api
            .patch(
                &key.name,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PatchParams::default()
                },
                &Patch::Merge(patch),
            )
            .await
            .map(rv_of),
        Op::Delete { foreground } => {
            let dp = if *foreground {
                DeleteParams::foreground()
            } else {
                DeleteParams::default()
            };
            match api.delete(&key.name, &dp).await {
                Ok(_) => Ok(None),
                Err(kube::Error::Api(resp)) if resp.code == 404 => Ok(None),
                Err(e) => Err(e),
            }
        }
        Op::Skip { .. } | Op::Wait { .. } => return Outcome::default(),
    };
    match result {
        Ok(rv) => {
            if op.is_write() {
                tracing::info!(resource = %key, op = op_name(op), "applied");
            }
            Outcome {
                resource_version: rv,
                ..Outcome::default()
            }
        }
        Err(e) => Outcome {
            error: Some(summarize(&e)),
            ..Outcome::default()
        },
    }
}

fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Apply { .. } => "apply",
        Op::Create { .. } => "create",
        Op::Replace { .. } => "replace",
        Op::MergePatch { .. } => "merge-patch",
        Op::Delete { .. } => "delete",
        Op::Skip { .. } => "skip",
        Op::Wait { .. } => "wait",
    }
}

/// Plans and executes one pass over the current synthesis. Returns whether nothing is left
/// to do (used for deletion: every resource gone or orphaned) and the plan's requeue hint
/// (readiness poll, or the shortest `reconcile-interval`).
///
/// # Errors
/// Transient API failures while reading slices or writing status.
pub async fn reconcile_resources(
    ctx: &Arc<Context>,
    comp: &Composition,
    st: &mut CompositionStatus,
    deleting: bool,
) -> Result<(bool, Option<Duration>), Error> {
    let Some(current) = st.current_synthesis.clone() else {
        return Ok((deleting, None));
    };
    let ns = comp.namespace().unwrap_or_default();
    let generation = comp.metadata.generation;
    let slices_api: Api<ResourceSlice> = Api::namespaced(ctx.client.clone(), &ns);
    let mut slices = Vec::new();
    for r in &current.resource_slices {
        if let Some(s) = slices_api
            .get_opt(&r.name)
            .await
            .map_err(kube_err("reading a ResourceSlice"))?
        {
            slices.push(s);
        }
    }
    let mut desired = Vec::new();
    let mut position: BTreeMap<ResourceKey, (usize, usize)> = BTreeMap::new();
    for (si, s) in slices.iter().enumerate() {
        for (ri, m) in s.spec.resources.iter().enumerate() {
            let Ok(manifest) = serde_json::from_str::<Value>(&m.manifest) else {
                continue;
            };
            if let Ok(key) = ResourceKey::of(&manifest) {
                position.insert(key, (si, ri));
                desired.push(plan::Desired {
                    manifest,
                    tombstone: m.deleted,
                });
            }
        }
    }
    let info = plan::CompositionInfo {
        name: comp.name_any(),
        namespace: ns.clone(),
        uid: comp.uid().unwrap_or_default(),
        labels: comp.labels().clone(),
        annotations: {
            let mut a = comp.annotations().clone();
            // A Symphony being deleted orphans its Compositions' resources (Eno semantics).
            let symphony_deleting = [
                crds::names::labels::SYMPHONY_DELETING,
                crds::names::labels::ENO_SYMPHONY_DELETING,
            ]
            .iter()
            .any(|l| comp.labels().get(*l).is_some_and(|v| v == "true"));
            if symphony_deleting {
                a.insert(
                    crds::names::annotations::DELETION_STRATEGY
                        .enoki
                        .to_string(),
                    "orphan".into(),
                );
            }
            a
        },
        deleting,
    };
    let cache_key = format!(
        "{}/{}",
        current.uuid,
        serde_json::to_string(&info.annotations).unwrap_or_default()
    );
    let cached = ctx
        .prepared
        .lock()
        .ok()
        .and_then(|p| p.get(&cache_key).cloned());
    let prepared = match cached {
        Some(p) => p,
        None => match plan::prepare(&desired, &info) {
            Ok(p) => {
                let p = Arc::new(p);
                if let Ok(mut cache) = ctx.prepared.lock() {
                    cache.insert(cache_key, p.clone());
                }
                p
            }
            Err(e) => {
                status::set_condition(
                    &mut st.conditions,
                    conditions::RECONCILED,
                    false,
                    e.category(),
                    &e.to_string(),
                    generation,
                );
                return Ok((deleting, None));
            }
        },
    };

    // ---- observe ----
    let mut observations: BTreeMap<ResourceKey, Observation> = BTreeMap::new();
    for r in &prepared.resources {
        observations.insert(r.key.clone(), observe(ctx, &r.manifest, &r.key).await?);
        // drift: watch (default) — foreign writes re-trigger this composition immediately.
        if !deleting
            && !r.tombstone
            && r.settings.drift == plan::Drift::Watch
            && let Some(gvk) = gvk_of_manifest(&r.manifest)
            && let Ok((ar, _)) = ctx.resolve(&gvk).await
        {
            ctx.triggers
                .track_managed(&gvk, &ar, &r.key.namespace, &r.key.name, comp);
        }
    }
    // watchOutputs: the synthesis saw the outputs as they were then. If one changed since (a
    // person's edit the synthesizer keeps, a child's status), synthesize again first rather
    // than revert it with a stale snapshot.
    let recorded_observed = current
        .input_revisions
        .iter()
        .find(|r| r.key == super::inputs::OBSERVED_REVISION_KEY)
        .and_then(|r| r.digest.clone());
    if !deleting && let Some(seen) = recorded_observed {
        let now = super::inputs::observed_digest(
            prepared
                .resources
                .iter()
                .filter(|r| !r.tombstone)
                .filter_map(|r| Some((&r.key, observations[&r.key].live.as_ref()?))),
        );
        if now != seen {
            tracing::debug!("observed outputs changed since the synthesis; re-synthesizing first");
            return Ok((false, Some(Duration::from_millis(100))));
        }
    }
    let observed: plan::Observed = observations
        .iter()
        .filter_map(|(k, o)| o.live.clone().map(|l| (k.clone(), l)))
        .collect();
    // What the previous synthesis applied: its snapshots (client-side patches remove fields the
    // synthesizer stopped emitting) and its recorded hash/resourceVersion, so a new synthesis
    // that leaves a resource unchanged does not rewrite it (the fast path carries over).
    let mut previous: BTreeMap<ResourceKey, Value> = BTreeMap::new();
    let mut carried: BTreeMap<ResourceKey, (Option<String>, Option<String>)> = BTreeMap::new();
    let needs_previous = slices.iter().any(|s| {
        let states = s
            .status
            .as_ref()
            .map(|x| x.resources.as_slice())
            .unwrap_or_default();
        (0..s.spec.resources.len())
            .any(|i| states.get(i).is_none_or(|st| st.applied_hash.is_none()))
    });
    if let Some(prev) = &st.previous_synthesis
        && (needs_previous || ctx.opts.mode == plan::ApplyMode::ClientSide)
    {
        for r in &prev.resource_slices {
            let Some(s) = slices_api
                .get_opt(&r.name)
                .await
                .map_err(kube_err("reading the previous ResourceSlice"))?
            else {
                continue;
            };
            let states = s
                .status
                .as_ref()
                .map(|x| x.resources.clone())
                .unwrap_or_default();
            for (i, m) in s
                .spec
                .resources
                .iter()
                .enumerate()
                .filter(|(_, m)| !m.deleted)
            {
                let Ok(manifest) = serde_json::from_str::<Value>(&m.manifest) else {
                    continue;
                };
                let Ok(key) = ResourceKey::of(&manifest) else {
                    continue;
                };
                if let Some(state) = states.get(i) {
                    carried.insert(
                        key.clone(),
                        (
                            state.applied_hash.clone(),
                            state.applied_resource_version.clone(),
                        ),
                    );
                }
                previous.insert(key, plan::snapshot::strip(&manifest, Some(&info.uid)));
            }
        }
    }
    // drift: interval — a resource is checked against its live object once per
    // reconcile-interval (without one it is never re-applied for drift).
    let uid = comp.uid().unwrap_or_default();
    let started = std::time::Instant::now();
    let due: std::collections::BTreeSet<ResourceKey> = {
        let mut checks = ctx
            .interval_checks
            .lock()
            .map_err(|_| Error::Task("interval table poisoned".into()))?;
        prepared
            .resources
            .iter()
            .filter(|r| r.settings.drift == plan::Drift::Interval)
            .filter_map(|r| {
                let interval = r.settings.reconcile_interval?;
                let k = (uid.clone(), r.key.clone());
                let is_due = checks
                    .get(&k)
                    .is_none_or(|t| started.duration_since(*t) >= interval);
                if is_due {
                    checks.insert(k, started);
                }
                is_due.then(|| r.key.clone())
            })
            .collect()
    };
    let recorded: BTreeMap<ResourceKey, plan::Recorded> = position
        .iter()
        .map(|(k, (si, ri))| {
            let state = slices[*si]
                .status
                .as_ref()
                .and_then(|s| s.resources.get(*ri));
            let (hash, rv) = match state {
                Some(st) if st.applied_hash.is_some() => {
                    (st.applied_hash.clone(), st.applied_resource_version.clone())
                }
                _ => carried.get(k).cloned().unwrap_or_default(),
            };
            (
                k.clone(),
                plan::Recorded {
                    applied_hash: hash,
                    applied_resource_version: rv,
                    ready: state
                        .and_then(|s| s.ready.as_ref())
                        .map(|t| t.0.to_string()),
                    interval_due: due.contains(k),
                },
            )
        })
        .collect();
    let the_plan: Plan = plan::plan(plan::PlanInput {
        prepared: &prepared,
        composition: &info,
        observed: &observed,
        recorded: &recorded,
        previous: &previous,
        options: plan::PlanOptions {
            mode: ctx.opts.mode,
            readiness_poll: ctx.opts.readiness_poll,
        },
    });

    // ---- act ----
    let concurrency = ctx.opts.concurrency.max(1);
    // Per-resource exponential backoff: a resource whose writes keep failing is retried after
    // 1 s, 2 s, 4 s, … (at most 5 min), not on every pass.
    let backing_off: BTreeMap<ResourceKey, String> = ctx
        .backoff
        .lock()
        .map(|b| {
            b.iter()
                .filter(|((u, _), (_, next, _))| *u == uid && *next > started)
                .map(|((_, k), (_, _, e))| (k.clone(), e.clone()))
                .collect()
        })
        .unwrap_or_default();
    // A write that restores an unchanged snapshot over a live object is a drift correction.
    // Another writer that keeps changing the object gets backoff, not a hot loop.
    let is_correction = |step: &plan::Step| {
        step.op.is_write()
            && !matches!(step.op, Op::Delete { .. })
            && observations[&step.key].live.is_some()
            && recorded
                .get(&step.key)
                .is_some_and(|r| r.applied_hash.is_some() && r.applied_hash == step.hash)
    };
    let mut fight_wait: Option<Duration> = None;
    let deferred: std::collections::BTreeSet<ResourceKey> = {
        let fights = ctx
            .fights
            .lock()
            .map_err(|_| Error::Task("fight table poisoned".into()))?;
        the_plan
            .steps
            .iter()
            .filter(|s| is_correction(s))
            .filter(|s| {
                let next = fights
                    .get(&(uid.clone(), s.key.clone()))
                    .map(|f| f.next)
                    .filter(|n| *n > started);
                if let Some(n) = next {
                    let wait = n - started;
                    fight_wait = Some(fight_wait.map_or(wait, |w| w.min(wait)));
                }
                next.is_some()
            })
            .map(|s| s.key.clone())
            .collect()
    };
    let pending: Vec<_> = the_plan
        .steps
        .iter()
        .map(|step| {
            let skip = deferred.contains(&step.key);
            let held = step
                .op
                .is_write()
                .then(|| backing_off.get(&step.key).cloned())
                .flatten();
            let op = if skip {
                &Op::Skip {
                    reason: SkipReason::InSync,
                }
            } else {
                &step.op
            };
            execute(op, &step.key, &observations[&step.key], held)
        })
        .collect();
    let outcomes: Vec<Outcome> = futures::stream::iter(pending)
        .buffered(concurrency)
        .collect()
        .await;
    let mut conflicts = Vec::new();
    if let Ok(mut fights) = ctx.fights.lock() {
        for (step, outcome) in the_plan.steps.iter().zip(&outcomes) {
            let k = (uid.clone(), step.key.clone());
            if deferred.contains(&step.key) {
                continue;
            }
            // A correction whose write changed nothing (the server returned the live
            // resourceVersion: e.g. only the status moved) reverted nothing: not a fight.
            let live_rv = observations[&step.key]
                .live
                .as_ref()
                .and_then(|l| l.pointer("/metadata/resourceVersion"))
                .and_then(Value::as_str);
            let no_op = outcome.resource_version.as_deref() == live_rv;
            if !is_correction(step) || outcome.error.is_some() || outcome.held || no_op {
                if step.op.is_write() && outcome.error.is_none() && !no_op {
                    fights.remove(&k);
                }
                continue;
            }
            let corrections = match fights.get(&k) {
                Some(f) if started.duration_since(f.last) < FIGHT_WINDOW => f.corrections + 1,
                _ => 1,
            };
            let delay = fight_delay(corrections);
            fights.insert(
                k,
                Fight {
                    corrections,
                    last: started,
                    next: started + delay,
                },
            );
            if corrections >= FIGHT_THRESHOLD {
                let others = other_managers(observations[&step.key].live.as_ref());
                conflicts.push(format!(
                    "{} was changed by another writer ({}) {corrections} times in a row; \
                     enoki restored it and backs off: next correction in at least {}",
                    step.key,
                    if others.is_empty() {
                        "unknown".to_string()
                    } else {
                        others.join(", ")
                    },
                    humantime::format_duration(delay)
                ));
                fight_wait = Some(fight_wait.map_or(delay, |w| w.min(delay)));
            }
        }
    }
    for message in conflicts {
        tracing::warn!(%message, "field conflict");
        ctx.event(comp, true, reasons::FIELD_CONFLICT, "Apply", message)
            .await;
    }
    if let Ok(mut b) = ctx.backoff.lock() {
        for (step, outcome) in the_plan.steps.iter().zip(&outcomes) {
            if !step.op.is_write() || outcome.held {
                continue;
            }
            let key = (uid.clone(), step.key.clone());
            match &outcome.error {
                None => {
                    b.remove(&key);
                }
                Some(e) => {
                    let failures = b.get(&key).map_or(0, |f| f.0) + 1;
                    let delay = Duration::from_secs(1u64 << failures.min(9).saturating_sub(1))
                        .min(Duration::from_secs(300));
                    b.insert(key, (failures, started + delay, e.clone()));
                }
            }
        }
    }
    for (step, outcome) in the_plan.steps.iter().zip(&outcomes) {
        if step.op.is_write() && !outcome.held {
            let result = if outcome.error.is_some() {
                "error"
            } else {
                "ok"
            };
            super::metrics::Metrics::count(
                &ctx.metrics.apply_ops,
                &format!("{}-{result}", op_name(&step.op)),
            );
        }
    }
    if !deleting {
        ctx.metrics
            .managed_resources
            .set(i64::try_from(the_plan.steps.len()).unwrap_or(i64::MAX));
    }

    // ---- record ----
    let mut states: Vec<Vec<ResourceState>> = slices
        .iter()
        .map(|s| {
            let mut v = s
                .status
                .as_ref()
                .map(|st| st.resources.clone())
                .unwrap_or_default();
            v.resize(s.spec.resources.len(), ResourceState::default());
            v
        })
        .collect();
    let mut errors = Vec::new();
    let mut not_ready = Vec::new();
    for (step, outcome) in the_plan.steps.iter().zip(&outcomes) {
        let Some(&(si, ri)) = position.get(&step.key) else {
            continue;
        };
        let state = &mut states[si][ri];
        if let Some(e) = &outcome.error {
            state.error = Some(e.clone());
            state.reconciled = step.settings.fail_open;
            errors.push(format!("{}: {e}", step.key));
        } else {
            state.error = None;
            match &step.op {
                Op::Apply { .. }
                | Op::Create { .. }
                | Op::Replace { .. }
                | Op::MergePatch { .. } => {
                    state.reconciled = true;
                    state.applied_hash = step.hash.clone();
                    state.applied_resource_version = outcome.resource_version.clone();
                }
                Op::Skip {
                    reason: SkipReason::AlreadyDeleted,
                } => {
                    state.reconciled = true;
                    state.deleted = true;
                }
                Op::Delete { foreground: false }
                | Op::Skip {
                    reason: SkipReason::Orphaned,
                } => {
                    state.reconciled = true;
                    state.deleted = !matches!(step.op, Op::Skip { .. });
                }
                Op::Skip {
                    reason: SkipReason::Terminating,
                }
                | Op::Delete { foreground: true }
                | Op::Wait { .. } => {}
                Op::Skip {
                    reason: SkipReason::ReconciliationDisabled,
                } => {
                    // Eno: never touched, reported as reconciled (and ready: nothing to wait on).
                    state.reconciled = true;
                    if state.ready.is_none() {
                        state.ready = Some(now());
                    }
                }
                Op::Skip {
                    reason: SkipReason::InSync,
                } => {
                    state.reconciled = true;
                    if state.applied_hash.is_none() {
                        state.applied_hash = step.hash.clone();
                        state.applied_resource_version = recorded
                            .get(&step.key)
                            .and_then(|r| r.applied_resource_version.clone());
                    }
                }
                Op::Skip { .. } => state.reconciled = true,
            }
        }
        let tombstone = slices[si].spec.resources[ri].deleted;
        match &step.readiness {
            ReadinessState::Ready { at } if !tombstone && !deleting && state.ready.is_none() => {
                let t = at
                    .as_ref()
                    .and_then(|s| s.parse::<k8s_openapi::jiff::Timestamp>().ok())
                    .map(Time)
                    .unwrap_or_else(now);
                state.ready = Some(t);
                tracing::info!(resource = %step.key, "ready");
            }
            ReadinessState::NotReady { unsatisfied }
                if !tombstone && !deleting && state.ready.is_none() =>
            {
                not_ready.push(format!("{} ({})", step.key, unsatisfied.join(", ")));
            }
            ReadinessState::Absent if !tombstone && !deleting && state.ready.is_none() => {
                not_ready.push(format!("{} (not created yet)", step.key));
            }
            _ => {}
        }
    }
    for (si, s) in slices.iter().enumerate() {
        let before = s
            .status
            .as_ref()
            .map(|x| x.resources.clone())
            .unwrap_or_default();
        if before != states[si] {
            slices_api
                .patch_status(
                    &s.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"resources": states[si]}})),
                )
                .await
                .map_err(kube_err("writing ResourceSlice status"))?;
        }
    }

    // ---- roll up ----
    let all_reconciled = states.iter().flatten().all(|s| s.reconciled);
    let all_ready = all_reconciled
        && slices.iter().enumerate().all(|(si, s)| {
            s.spec.resources.iter().enumerate().all(|(ri, m)| {
                m.deleted
                    || states[si][ri].ready.is_some()
                    || states[si][ri].reconciled
                        && the_plan.steps.iter().any(|st| {
                            position.get(&st.key) == Some(&(si, ri)) && st.settings.fail_open
                        })
            })
        });
    if deleting {
        status::set_condition(
            &mut st.conditions,
            conditions::READY,
            false,
            reasons::DELETING,
            "the composition is being deleted",
            generation,
        );
        st.simplified = Some(SimplifiedStatus {
            status: "Deleting".into(),
            error: errors.first().cloned(),
        });
        return Ok((the_plan.settled() && errors.is_empty(), the_plan.requeue));
    }
    if let Some(cur) = st.current_synthesis.as_mut() {
        if all_reconciled && cur.reconciled.is_none() {
            cur.reconciled = Some(now());
        }
        if all_ready && cur.ready.is_none() {
            cur.ready = Some(now());
        }
    }
    if errors.is_empty() {
        let msg = if all_reconciled {
            "every resource is applied"
        } else {
            "applying resources"
        };
        status::set_condition(
            &mut st.conditions,
            conditions::RECONCILED,
            all_reconciled,
            if all_reconciled {
                reasons::APPLIED
            } else {
                reasons::NOT_READY
            },
            msg,
            generation,
        );
    } else {
        status::set_condition(
            &mut st.conditions,
            conditions::RECONCILED,
            false,
            reasons::APPLY_FAILED,
            &errors.join("; "),
            generation,
        );
        ctx.event(
            comp,
            true,
            reasons::APPLY_FAILED,
            "Apply",
            errors.join("; "),
        )
        .await;
    }
    let ready_msg = if all_ready {
        "every resource is ready".to_string()
    } else {
        format!(
            "waiting for {}",
            not_ready
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ")
        )
    };
    status::set_condition(
        &mut st.conditions,
        conditions::READY,
        all_ready,
        if all_ready {
            reasons::ALL_READY
        } else {
            reasons::NOT_READY
        },
        &ready_msg,
        generation,
    );
    status::set_condition(
        &mut st.conditions,
        conditions::RECONCILING,
        !all_ready,
        if all_ready {
            reasons::ALL_READY
        } else {
            reasons::NOT_READY
        },
        &ready_msg,
        generation,
    );
    if status::is_true(&st.conditions, conditions::SYNTHESIZED) {
        status::set_condition(
            &mut st.conditions,
            conditions::STALLED,
            false,
            reasons::SYNTHESIS_SUCCEEDED,
            "",
            generation,
        );
    }
    let synthesized_ok = status::is_true(&st.conditions, conditions::SYNTHESIZED);
    st.simplified = Some(if !synthesized_ok {
        st.simplified.clone().unwrap_or(SimplifiedStatus {
            status: "Failed".into(),
            error: None,
        })
    } else if !errors.is_empty() {
        SimplifiedStatus {
            status: "Reconciling".into(),
            error: errors.iter().max().cloned(),
        }
    } else if all_ready {
        SimplifiedStatus {
            status: "Ready".into(),
            error: None,
        }
    } else if all_reconciled {
        SimplifiedStatus {
            status: "NotReady".into(),
            error: None,
        }
    } else {
        SimplifiedStatus {
            status: "Reconciling".into(),
            error: None,
        }
    });
    let requeue = match (the_plan.requeue, fight_wait) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok((the_plan.settled(), requeue))
}
