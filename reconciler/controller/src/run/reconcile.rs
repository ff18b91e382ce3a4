//! One reconcile of one Composition: finalizer, synthesizer + module, inputs, synthesis when a
//! trigger changed (new ResourceSlices, tombstones, slot swap), then apply and status.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::{Context, Error, kube_err, module, status};
use crate::synthesis::{self, CompositionMeta, SynthesisInput};
use crds::names::{FINALIZER, annotations as keys, conditions, reasons};
use crds::{
    BlockedBy, Composition, CompositionStatus, DependencyStatus, InputRevision, Manifest,
    ResourceSlice, ResourceSliceRef, ResourceSliceSpec, SimplifiedStatus, Synthesis, Synthesizer,
    SynthesizerStatus,
};

/// Label on ResourceSlices: the owning Composition's name.
pub const SLICE_COMPOSITION_LABEL: &str = "enoki.dev/composition";
/// Largest manifest payload per ResourceSlice.
const SLICE_BYTES: usize = 512 * 1024;

/// Reconciles one Composition.
///
/// # Errors
/// Transient API failures (retried with backoff by `error_policy`); synthesis and module
/// faults become conditions instead.
#[tracing::instrument(skip_all, fields(composition = %comp.name_any(), generation = ?comp.metadata.generation))]
pub async fn reconcile(comp: Arc<Composition>, ctx: Arc<Context>) -> Result<Action, Error> {
    let start = std::time::Instant::now();
    let result = reconcile_inner(comp, ctx.clone()).await;
    ctx.metrics
        .reconcile_duration
        .observe(start.elapsed().as_secs_f64());
    result
}

async fn reconcile_inner(comp: Arc<Composition>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = comp.namespace().unwrap_or_default();
    let name = comp.name_any();
    let comps: Api<Composition> = Api::namespaced(ctx.client.clone(), &ns);
    let has_finalizer = comp.finalizers().iter().any(|f| f == FINALIZER);

    if comp.metadata.deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(Action::await_change());
        }
        let mut st = comp.status.clone().unwrap_or_default();
        // dependsOn: resources stay until every Composition that depends on this one is gone.
        let dependents = dependents_of(&ctx, &comp).await?;
        if !dependents.is_empty() {
            st.dependency_status = Some(DependencyStatus {
                blocked: true,
                reason: Some(reasons::WAITING_ON_DEPENDENTS.into()),
                blocked_by: dependents,
            });
            st.simplified = Some(SimplifiedStatus {
                status: "Deleting".into(),
                error: Some(reasons::WAITING_ON_DEPENDENTS.into()),
            });
            write_status(&comps, &comp, &st).await?;
            return Ok(Action::requeue(ctx.opts.readiness_poll));
        }
        st.dependency_status = None;
        let (done, _) = super::apply::reconcile_resources(&ctx, &comp, &mut st, true).await?;
        if done {
            super::set_cleanup_finalizer(&comps, comp.as_ref(), false, None)
                .await
                .map_err(kube_err("removing the cleanup finalizer"))?;
            tracing::info!("resources cleaned up; finalizer removed");
            ctx.event(
                &comp,
                false,
                reasons::DELETING,
                "Cleanup",
                "every managed resource was deleted or orphaned".into(),
            )
            .await;
            return Ok(Action::await_change());
        }
        write_status(&comps, &comp, &st).await?;
        return Ok(Action::requeue(ctx.opts.readiness_poll));
    }
    if !has_finalizer {
        super::set_cleanup_finalizer(&comps, comp.as_ref(), true, None)
            .await
            .map_err(kube_err("adding the cleanup finalizer"))?;
    }

    let mut st = comp.status.clone().unwrap_or_default();
    let generation = comp.metadata.generation;
    st.observed_generation = generation;

    // ---- synthesizer and module ----
    let synths: Api<Synthesizer> = Api::all(ctx.client.clone());
    let synth_name = &comp.spec.synthesizer.name;
    let synth_gvk = GroupVersionKind::gvk(crds::GROUP, crds::VERSION, "Synthesizer");
    ctx.triggers.track(
        &synth_gvk,
        &kube::core::ApiResource::erase::<Synthesizer>(&()),
        "",
        synth_name,
        &comp,
    );
    let Some(synth) = synths
        .get_opt(synth_name)
        .await
        .map_err(kube_err("reading the Synthesizer"))?
    else {
        fail(
            &mut st,
            generation,
            reasons::SYNTHESIZER_NOT_FOUND,
            &format!("Synthesizer {synth_name:?} does not exist"),
        );
        write_status(&comps, &comp, &st).await?;
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    let module = match load_module(&ctx, &synth).await {
        Ok(m) => m,
        Err(e) => {
            let msg = error_chain(&e);
            fail(&mut st, generation, reasons::MODULE_UNAVAILABLE, &msg);
            write_status(&comps, &comp, &st).await?;
            return Ok(Action::requeue(Duration::from_secs(if e.is_transient() {
                10
            } else {
                60
            })));
        }
    };

    // ---- inputs ----
    let (inputs, collection_revisions) = match gather_inputs(&ctx, &comp, &synth).await? {
        Ok(gathered) => gathered,
        Err(message) => {
            fail(&mut st, generation, reasons::MISSING_INPUT, &message);
            write_status(&comps, &comp, &st).await?;
            return Ok(Action::requeue(Duration::from_secs(15)));
        }
    };
    let collection_keys: BTreeSet<&str> = collection_revisions
        .iter()
        .map(|r| r.key.as_str())
        .collect();
    let mut revisions: Vec<InputRevision> = inputs
        .iter()
        .filter(|(key, _)| !collection_keys.contains(key.as_str()))
        .map(|(key, obj)| InputRevision {
            key: key.clone(),
            resource_version: obj
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .map(String::from),
            revision: obj
                .pointer("/metadata/annotations")
                .and_then(|a| {
                    a.get(keys::REVISION.enoki)
                        .or_else(|| a.get(keys::REVISION.eno))
                })
                .and_then(Value::as_str)
                .and_then(|r| r.parse().ok()),
            digest: None,
        })
        .collect();
    revisions.extend(collection_revisions);
    let instance: Option<Value> = inputs
        .iter()
        .find(|(k, _)| k == super::inputs::SELF_KEY)
        .map(|(_, v)| v.clone());
    // Observed outputs: passed to every synthesis; with `watchOutputs` a change is a trigger.
    let mut observed: Option<Vec<Value>> = None;
    if synth.spec.watch_outputs {
        let (live, digest) = super::inputs::observed_outputs(&ctx, &comp, &st).await?;
        revisions.push(InputRevision {
            key: super::inputs::OBSERVED_REVISION_KEY.into(),
            digest: Some(digest),
            ..InputRevision::default()
        });
        observed = Some(live);
    }
    let uid = comp.uid().unwrap_or_default();
    // Instance mode: the status write-back lives in memory; after a restart one synthesis
    // (reproducible, so no resource churn) recovers it.
    let write_back_known = synth.spec.for_kind.is_none()
        || ctx.status_writes.lock().is_ok_and(|w| w.contains_key(&uid));
    let forced = comp
        .annotations()
        .get(keys::FORCE_RESYNTHESIS.enoki)
        .or_else(|| comp.annotations().get(keys::FORCE_RESYNTHESIS.eno))
        .cloned();
    let digest = module.digest();
    let up_to_date = st.current_synthesis.as_ref().is_some_and(|c| {
        c.observed_composition_generation == generation
            && c.observed_synthesizer_generation == synth.metadata.generation
            && c.module_digest.as_deref() == Some(digest.as_str())
            && c.input_revisions == revisions
            && c.force_resynthesis == forced
    }) && write_back_known;

    // A Synthesizer change alone rolls out gradually: one Composition per cooldown.
    let only_synthesizer_changed = st.current_synthesis.as_ref().is_some_and(|c| {
        c.observed_composition_generation == generation
            && c.input_revisions == revisions
            && c.force_resynthesis == forced
            && (c.observed_synthesizer_generation != synth.metadata.generation
                || c.module_digest.as_deref() != Some(digest.as_str()))
    });
    if !up_to_date
        && only_synthesizer_changed
        && let Some(wait) = ctx.rollout_slot(synth_name)
    {
        tracing::debug!(?wait, "synthesizer rollout cooldown");
        return Ok(Action::requeue(wait));
    }

    // dependsOn: a new synthesis waits until every dependency is ready (Eno gates dispatch;
    // an existing synthesis keeps being applied).
    let blocked = dependency_block(&ctx, &comp).await?;
    if !up_to_date && let Some(block) = blocked {
        let reason = block.reason.clone().unwrap_or_default();
        let detail: Vec<String> = block
            .blocked_by
            .iter()
            .map(|b| format!("{}/{} ({})", b.namespace, b.name, b.reason))
            .collect();
        let message = format!("{reason}: {}", detail.join(", "));
        status::set_condition(
            &mut st.conditions,
            conditions::SYNTHESIZED,
            false,
            &reason,
            &message,
            generation,
        );
        st.simplified = Some(SimplifiedStatus {
            status: "Waiting".into(),
            error: Some(message),
        });
        st.dependency_status = Some(block);
        write_status(&comps, &comp, &st).await?;
        return Ok(Action::requeue(
            ctx.opts.readiness_poll.max(Duration::from_secs(2)),
        ));
    }
    st.dependency_status = None;

    if !up_to_date {
        let trigger = why_synthesize(
            st.current_synthesis.as_ref(),
            generation,
            synth.metadata.generation,
            &digest,
            &revisions,
            forced.as_ref(),
        );
        tracing::debug!(%trigger, "synthesizing");
        let attempts = st.in_flight_synthesis.as_ref().map_or(0, |s| s.attempts) + 1;
        let uuid = new_uuid();
        st.in_flight_synthesis = Some(Synthesis {
            uuid: uuid.clone(),
            observed_composition_generation: generation,
            observed_synthesizer_generation: synth.metadata.generation,
            input_revisions: revisions.clone(),
            module_digest: Some(digest.clone()),
            force_resynthesis: forced.clone(),
            attempts,
            ..Synthesis::default()
        });
        let input = SynthesisInput {
            composition: CompositionMeta {
                name: name.clone(),
                namespace: ns.clone(),
                uid: comp.uid().unwrap_or_default(),
                labels: comp.labels().clone(),
                annotations: comp.annotations().clone(),
                generation: generation.unwrap_or_default(),
                created: comp
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| Duration::from_secs(u64::try_from(t.0.as_second()).unwrap_or(0)))
                    .unwrap_or_default(),
            },
            inputs,
            observed: match observed {
                Some(o) => o,
                None => super::inputs::observed_outputs(&ctx, &comp, &st).await?.0,
            },
            env: synth
                .spec
                .env
                .iter()
                .chain(comp.spec.synthesis_env.iter())
                .map(|e| (e.name.clone(), e.value.clone()))
                .collect(),
        };
        let limits = match synthesis::run_limits(synth.spec.limits.as_ref()) {
            Ok(l) => l,
            Err(message) => {
                fail(&mut st, generation, reasons::MODULE_UNAVAILABLE, &message);
                write_status(&comps, &comp, &st).await?;
                return Ok(Action::requeue(Duration::from_secs(60)));
            }
        };
        let secure = synth.spec.entropy == Some(crds::Entropy::Secure);
        let scopes = scope_table(&ctx).await;
        let host = ctx.host.clone();
        let started = std::time::Instant::now();
        let result = tokio::task::spawn_blocking(move || {
            let is_namespaced = |g: &str, k: &str| {
                scopes
                    .get(&(g.to_string(), k.to_string()))
                    .copied()
                    .unwrap_or_else(|| synthesis::static_is_namespaced(g, k))
            };
            synthesis::synthesize(&host, &module, &input, limits, secure, &is_namespaced)
        })
        .await
        .map_err(|e| Error::Task(e.to_string()))?;
        ctx.metrics
            .synthesis_duration
            .observe(started.elapsed().as_secs_f64());
        super::metrics::Metrics::count(
            &ctx.metrics.synthesis_runs,
            result.as_ref().map_or_else(|e| e.reason(), |_| "Success"),
        );
        match result {
            Err(e) => {
                ctx.event(&comp, true, e.reason(), "Synthesize", e.to_string())
                    .await;
                // Instance mode: say it on the object the user applied, too.
                if let Some(me) = &instance {
                    let text = |p: &str| me.pointer(p).and_then(Value::as_str).map(String::from);
                    let object = k8s_openapi::api::core::v1::ObjectReference {
                        api_version: text("/apiVersion"),
                        kind: text("/kind"),
                        name: text("/metadata/name"),
                        namespace: text("/metadata/namespace"),
                        uid: text("/metadata/uid"),
                        ..Default::default()
                    };
                    ctx.event_on(&object, true, e.reason(), "Synthesize", e.to_string())
                        .await;
                }
                tracing::info!(reason = e.reason(), error = %e, "synthesis failed; the previous synthesis stays applied");
                fail(&mut st, generation, e.reason(), &e.to_string());
                write_status(&comps, &comp, &st).await?;
                return Ok(Action::requeue(Duration::from_secs(60)));
            }
            Ok(out) => {
                if out.peak_memory_bytes > 0 {
                    ctx.metrics
                        .wasm_peak_memory
                        .observe(out.peak_memory_bytes as f64);
                }
                // Status write-backs (instance mode) are not resources: kept aside, applied to
                // the instance's status subresource.
                let mut items = out.items;
                let mut write_back = None;
                if let Some(me) = &instance {
                    items.retain(|i| {
                        if super::inputs::is_status_write_back(i, me) {
                            write_back = Some(i.clone());
                            false
                        } else {
                            true
                        }
                    });
                }
                if synth.spec.for_kind.is_some()
                    && let Ok(mut w) = ctx.status_writes.lock()
                {
                    w.insert(uid.clone(), write_back);
                }
                let mut next = st.in_flight_synthesis.take().unwrap_or_default();
                next.input_digest = Some(out.input_digest);
                next.output_digest = Some(out.output_digest);
                next.results = out.results;
                next.synthesized = Some(Time(k8s_openapi::jiff::Timestamp::now()));
                // Only an input change (or a restart) may keep the current slices: a spec
                // change, a new synthesizer or a forced re-synthesis always writes new ones.
                let inputs_only = st.current_synthesis.as_ref().is_some_and(|c| {
                    c.observed_composition_generation == generation
                        && c.observed_synthesizer_generation == synth.metadata.generation
                        && c.module_digest.as_deref() == Some(digest.as_str())
                        && c.force_resynthesis == forced
                });
                let unchanged = match &st.current_synthesis {
                    Some(cur) if inputs_only => same_output(&ctx, &comp, cur, &items).await?,
                    _ => false,
                };
                if let (true, Some(cur)) = (unchanged, st.current_synthesis.as_ref()) {
                    // The same resources as the current synthesis: keep its slices and its
                    // progress; only what triggered it is recorded.
                    next.uuid = cur.uuid.clone();
                    next.resource_slices = cur.resource_slices.clone();
                    next.reconciled = cur.reconciled.clone();
                    next.ready = cur.ready.clone();
                    next.attempts = 0;
                    st.current_synthesis = Some(next);
                    tracing::debug!("re-synthesized with identical output; slices kept");
                } else {
                    next.resource_slices = write_slices(&ctx, &comp, &st, &uuid, &items).await?;
                    st.previous_synthesis = st.current_synthesis.take();
                    st.current_synthesis = Some(next);
                }
                status::set_condition(
                    &mut st.conditions,
                    conditions::SYNTHESIZED,
                    true,
                    reasons::SYNTHESIS_SUCCEEDED,
                    "",
                    generation,
                );
                tracing::info!(synthesis = %uuid, resources = items.len(), unchanged, %trigger, "synthesized");
                write_status(&comps, &comp, &st).await?;
                delete_stale_slices(&ctx, &comp, &st).await?;
            }
        }
    }

    let (_, hint) = super::apply::reconcile_resources(&ctx, &comp, &mut st, false).await?;
    let pending_write_back = ctx
        .status_writes
        .lock()
        .ok()
        .and_then(|w| w.get(&uid).cloned().flatten());
    if let (Some(desired), Some(me)) = (pending_write_back, &instance)
        && let Err(e) = super::inputs::write_back_status(&ctx, &desired, me).await
    {
        tracing::warn!(error = %error_chain(&e), "status write-back failed");
        ctx.event(
            &comp,
            true,
            reasons::APPLY_FAILED,
            "WriteBackStatus",
            error_chain(&e),
        )
        .await;
    }
    let requeue = match hint {
        Some(h) => h.min(st_requeue(&st, &ctx)),
        None => st_requeue(&st, &ctx),
    };
    write_status(&comps, &comp, &st).await?;
    Ok(Action::requeue(requeue))
}

fn st_requeue(st: &CompositionStatus, ctx: &Context) -> Duration {
    let ready = status::is_true(&st.conditions, conditions::READY);
    if ready {
        ctx.opts.resync
    } else {
        ctx.opts.readiness_poll
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut src = e.source();
    while let Some(s) = src {
        parts.push(s.to_string());
        src = s.source();
    }
    parts.join(": ")
}

fn fail(st: &mut CompositionStatus, generation: Option<i64>, reason: &str, message: &str) {
    status::set_condition(
        &mut st.conditions,
        conditions::SYNTHESIZED,
        false,
        reason,
        message,
        generation,
    );
    status::set_condition(
        &mut st.conditions,
        conditions::STALLED,
        true,
        reason,
        message,
        generation,
    );
    st.simplified = Some(SimplifiedStatus {
        status: "Failed".into(),
        error: Some(format!("{reason}: {message}")),
    });
}

async fn write_status(
    comps: &Api<Composition>,
    comp: &Composition,
    st: &CompositionStatus,
) -> Result<(), Error> {
    if comp.status.as_ref() == Some(st) {
        return Ok(());
    }
    // A merge patch leaves out what the new status no longer has: null it explicitly (e.g. a
    // finished in-flight synthesis, a cleared dependency status).
    let mut patch = serde_json::to_value(st).unwrap_or_default();
    if let (Some(new), Some(Value::Object(old))) = (
        patch.as_object_mut(),
        comp.status
            .as_ref()
            .map(serde_json::to_value)
            .and_then(Result::ok),
    ) {
        for key in old.keys() {
            new.entry(key.clone()).or_insert(Value::Null);
        }
    }
    comps
        .patch_status(
            &comp.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": patch })),
        )
        .await
        .map_err(kube_err("writing Composition status"))?;
    Ok(())
}

pub(crate) async fn load_module(
    ctx: &Context,
    synth: &Synthesizer,
) -> Result<synthesis::Module, module::ModuleError> {
    let key = (
        synth.name_any(),
        synth.metadata.generation.unwrap_or_default(),
    );
    if let Some(m) = ctx.modules.lock().ok().and_then(|m| m.get(&key).cloned()) {
        return Ok(m);
    }
    let result = module::fetch(&ctx.client, &ctx.host, synth, ctx.opts.module_ca.as_deref()).await;
    // Report on the Synthesizer too (best effort).
    let mut sst = synth.status.clone().unwrap_or_default();
    let before = sst.clone();
    sst.observed_generation = synth.metadata.generation;
    match &result {
        Ok(m) => {
            sst.module_digest = Some(m.digest());
            status::set_condition(
                &mut sst.conditions,
                conditions::READY,
                true,
                reasons::MODULE_READY,
                "module fetched and compiled",
                synth.metadata.generation,
            );
        }
        Err(e) => status::set_condition(
            &mut sst.conditions,
            conditions::READY,
            false,
            reasons::MODULE_UNAVAILABLE,
            &error_chain(e),
            synth.metadata.generation,
        ),
    }
    if sst != before {
        let api: Api<Synthesizer> = Api::all(ctx.client.clone());
        let patch: SynthesizerStatus = sst;
        if let Err(e) = api
            .patch_status(
                &synth.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": patch})),
            )
            .await
        {
            tracing::warn!(error = %e, "cannot write Synthesizer status");
        }
    }
    if let Ok(m) = &result
        && let Ok(mut cache) = ctx.modules.lock()
    {
        cache.insert(key, m.clone());
    }
    result
}

fn gvk_of(group: &str, version: &str, kind: &str) -> GroupVersionKind {
    GroupVersionKind::gvk(group, version, kind)
}

/// Bound inputs as (key, object), and one revision (a digest) per collection.
type Gathered = (Vec<(String, Value)>, Vec<InputRevision>);

/// Reads every bound input: in instance mode first `self`, then every ref. Outer error: API
/// failure; inner error: a missing required input (or a bad collection selector).
async fn gather_inputs(
    ctx: &Context,
    comp: &Composition,
    synth: &Synthesizer,
) -> Result<Result<Gathered, String>, Error> {
    let ns = comp.namespace().unwrap_or_default();
    let mut out: Vec<(String, Value)> = Vec::new();
    let mut collections = Vec::new();
    let self_ref = synth.spec.for_kind.as_ref().map(|f| crds::Ref {
        key: super::inputs::SELF_KEY.into(),
        resource: Some(crds::ResourceRef {
            group: f.group.clone(),
            version: f.version.clone(),
            kind: f.kind.clone(),
            ..crds::ResourceRef::default()
        }),
        ..crds::Ref::default()
    });
    for r in self_ref.iter().chain(&synth.spec.refs) {
        let binding = comp.spec.bindings.iter().find(|b| b.key == r.key);
        if let Some(res) = &r.resource {
            let gvk = gvk_of(&res.group, &res.version, &res.kind);
            let (ar, namespaced) = match ctx.resolve(&gvk).await {
                Ok(x) => x,
                Err(e) => {
                    if r.optional {
                        continue;
                    }
                    return Ok(Err(format!(
                        "input {:?}: kind {}/{} is not served: {e}",
                        r.key, res.version, res.kind
                    )));
                }
            };
            let instance = out
                .iter()
                .find(|(k, _)| k == super::inputs::SELF_KEY)
                .map(|(_, v)| v.clone());
            let name_from = res.name_from.as_ref().and_then(|path| {
                instance
                    .as_ref()?
                    .pointer(&format!("/{}", path.replace('.', "/")))?
                    .as_str()
                    .filter(|n| !n.is_empty())
                    .map(String::from)
            });
            let name = binding
                .map(|b| b.resource.name.clone())
                .or_else(|| res.name.clone())
                .or(name_from);
            let Some(name) = name else {
                if r.optional {
                    continue;
                }
                return Ok(Err(format!(
                    "input {:?} is not bound (add a binding with this key)",
                    r.key
                )));
            };
            let obj_ns = binding
                .and_then(|b| b.resource.namespace.clone())
                .or_else(|| res.namespace.clone())
                .or_else(|| {
                    instance
                        .as_ref()?
                        .pointer("/metadata/namespace")?
                        .as_str()
                        .map(String::from)
                })
                .unwrap_or_else(|| ns.clone());
            ctx.triggers.track(
                &gvk,
                &ar,
                if namespaced { &obj_ns } else { "" },
                &name,
                comp,
            );
            let api: Api<DynamicObject> = if namespaced {
                Api::namespaced_with(ctx.client.clone(), &obj_ns, &ar)
            } else {
                Api::all_with(ctx.client.clone(), &ar)
            };
            match api
                .get_opt(&name)
                .await
                .map_err(kube_err(format!("reading input {:?}", r.key)))?
            {
                Some(obj) => {
                    out.push((r.key.clone(), serde_json::to_value(obj).unwrap_or_default()))
                }
                None if r.optional => {}
                None => {
                    let at = if namespaced {
                        format!("{obj_ns}/{name}")
                    } else {
                        name.clone()
                    };
                    return Ok(Err(format!(
                        "input {:?}: {} {at} does not exist",
                        r.key, res.kind
                    )));
                }
            }
        } else if let Some(c) = &r.collection {
            let instance = out
                .iter()
                .find(|(k, _)| k == super::inputs::SELF_KEY)
                .map(|(_, v)| v.clone());
            match super::inputs::collection(ctx, comp, &r.key, c, instance.as_ref()).await? {
                Ok((items, digest)) => {
                    out.extend(items.into_iter().map(|o| (r.key.clone(), o)));
                    collections.push(InputRevision {
                        key: r.key.clone(),
                        digest: Some(digest),
                        ..InputRevision::default()
                    });
                }
                Err(_) if r.optional => {}
                Err(message) => return Ok(Err(message)),
            }
        }
    }
    Ok(Ok((out, collections)))
}

/// (group, kind) -> namespaced, for the kinds discovery already resolved.
async fn scope_table(ctx: &Context) -> BTreeMap<(String, String), bool> {
    ctx.discovery_snapshot()
}

fn new_uuid() -> String {
    let bytes: [u8; 16] = rand::random();
    let h = hex::encode(bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Writes the synthesis output (plus tombstones for dropped resources) as ResourceSlices.
async fn write_slices(
    ctx: &Context,
    comp: &Composition,
    st: &CompositionStatus,
    uuid: &str,
    items: &[Value],
) -> Result<Vec<ResourceSliceRef>, Error> {
    let ns = comp.namespace().unwrap_or_default();
    let api: Api<ResourceSlice> = Api::namespaced(ctx.client.clone(), &ns);
    let new_keys: BTreeSet<plan::ResourceKey> = items
        .iter()
        .filter_map(|i| plan::ResourceKey::of(i).ok())
        .collect();
    let mut manifests: Vec<Manifest> = items
        .iter()
        .map(|i| Manifest {
            manifest: i.to_string(),
            deleted: false,
        })
        .collect();
    // Tombstones: resources of the current synthesis that are no longer emitted (and
    // tombstones not yet confirmed deleted, so an interrupted delete is retried).
    if let Some(current) = &st.current_synthesis {
        for slice_ref in &current.resource_slices {
            let Some(old) = api
                .get_opt(&slice_ref.name)
                .await
                .map_err(kube_err("reading the previous ResourceSlice"))?
            else {
                continue;
            };
            let states = old
                .status
                .as_ref()
                .map(|s| s.resources.clone())
                .unwrap_or_default();
            for (i, m) in old.spec.resources.iter().enumerate() {
                let Ok(v) = serde_json::from_str::<Value>(&m.manifest) else {
                    continue;
                };
                let Ok(key) = plan::ResourceKey::of(&v) else {
                    continue;
                };
                let gone = m.deleted && states.get(i).is_some_and(|s| s.deleted);
                if !new_keys.contains(&key) && !gone {
                    manifests.push(Manifest {
                        manifest: m.manifest.clone(),
                        deleted: true,
                    });
                }
            }
        }
    }
    let owner = OwnerReference {
        api_version: Composition::api_version(&()).into(),
        kind: Composition::kind(&()).into(),
        name: comp.name_any(),
        uid: comp.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let mut chunks: Vec<Vec<Manifest>> = vec![Vec::new()];
    let mut size = 0;
    for m in manifests {
        if size + m.manifest.len() > SLICE_BYTES && !chunks.last().is_some_and(Vec::is_empty) {
            chunks.push(Vec::new());
            size = 0;
        }
        size += m.manifest.len();
        if let Some(last) = chunks.last_mut() {
            last.push(m);
        }
    }
    let mut refs = Vec::new();
    for (i, resources) in chunks.into_iter().enumerate() {
        let name = format!("{}-{}-{i}", comp.name_any(), &uuid[..8]);
        let mut slice = ResourceSlice::new(
            &name,
            ResourceSliceSpec {
                synthesis_uuid: uuid.to_string(),
                resources,
            },
        );
        slice.metadata.namespace = Some(ns.clone());
        slice.metadata.owner_references = Some(vec![owner.clone()]);
        slice.metadata.labels =
            Some([(SLICE_COMPOSITION_LABEL.to_string(), comp.name_any())].into());
        api.create(&PostParams::default(), &slice)
            .await
            .map_err(kube_err("creating a ResourceSlice"))?;
        refs.push(ResourceSliceRef { name });
    }
    Ok(refs)
}

/// Deletes this Composition's slices that belong to neither the current nor the previous
/// synthesis.
async fn delete_stale_slices(
    ctx: &Context,
    comp: &Composition,
    st: &CompositionStatus,
) -> Result<(), Error> {
    let ns = comp.namespace().unwrap_or_default();
    let api: Api<ResourceSlice> = Api::namespaced(ctx.client.clone(), &ns);
    let keep: BTreeSet<String> = [&st.current_synthesis, &st.previous_synthesis]
        .into_iter()
        .flatten()
        .flat_map(|s| s.resource_slices.iter().map(|r| r.name.clone()))
        .collect();
    let lp =
        ListParams::default().labels(&format!("{SLICE_COMPOSITION_LABEL}={}", comp.name_any()));
    for s in api
        .list(&lp)
        .await
        .map_err(kube_err("listing ResourceSlices"))?
        .items
    {
        let n = s.name_any();
        if !keep.contains(&n) {
            let _ = api.delete(&n, &DeleteParams::default()).await;
        }
    }
    Ok(())
}

/// Whether `dependsOn` blocks a new synthesis: a dependency is missing, not ready (its current
/// synthesis has no ready time) or being deleted, or the dependencies form a cycle. Each
/// dependency is watched, so this Composition is reconciled again when one changes.
async fn dependency_block(
    ctx: &Arc<Context>,
    comp: &Composition,
) -> Result<Option<DependencyStatus>, Error> {
    if comp.spec.depends_on.is_empty() {
        return Ok(None);
    }
    let ns = comp.namespace().unwrap_or_default();
    let gvk = GroupVersionKind::gvk(crds::GROUP, crds::VERSION, "Composition");
    let ar = kube::core::ApiResource::erase::<Composition>(&());
    let mut blocked_by = Vec::new();
    for dep in &comp.spec.depends_on {
        let dep_ns = dep.namespace.clone().unwrap_or_else(|| ns.clone());
        ctx.triggers.track(&gvk, &ar, &dep_ns, &dep.name, comp);
        let api: Api<Composition> = Api::namespaced(ctx.client.clone(), &dep_ns);
        let found = api
            .get_opt(&dep.name)
            .await
            .map_err(kube_err("reading a dependency"))?;
        let reason = match &found {
            None => Some(reasons::DEPENDENCY_NOT_FOUND),
            Some(d)
                if d.metadata.deletion_timestamp.is_some()
                    || d.status
                        .as_ref()
                        .and_then(|s| s.current_synthesis.as_ref())
                        .is_none_or(|c| c.ready.is_none()) =>
            {
                Some(reasons::DEPENDENCY_NOT_READY)
            }
            Some(_) => None,
        };
        if let Some(reason) = reason {
            blocked_by.push(BlockedBy {
                name: dep.name.clone(),
                namespace: dep_ns,
                reason: reason.into(),
            });
        }
    }
    if blocked_by.is_empty() {
        return Ok(None);
    }
    // A cycle through this Composition never resolves: say so instead of waiting.
    let me = (ns.clone(), comp.name_any());
    let mut seen = BTreeSet::new();
    let mut stack: Vec<(String, String)> = comp
        .spec
        .depends_on
        .iter()
        .map(|d| {
            (
                d.namespace.clone().unwrap_or_else(|| ns.clone()),
                d.name.clone(),
            )
        })
        .collect();
    let mut cycle = false;
    while let Some(node) = stack.pop() {
        if node == me {
            cycle = true;
            break;
        }
        if !seen.insert(node.clone()) || seen.len() > 200 {
            continue;
        }
        let api: Api<Composition> = Api::namespaced(ctx.client.clone(), &node.0);
        if let Some(c) = api
            .get_opt(&node.1)
            .await
            .map_err(kube_err("reading a dependency"))?
        {
            stack.extend(c.spec.depends_on.iter().map(|d| {
                (
                    d.namespace.clone().unwrap_or_else(|| node.0.clone()),
                    d.name.clone(),
                )
            }));
        }
    }
    Ok(Some(DependencyStatus {
        blocked: true,
        reason: Some(
            if cycle {
                reasons::CIRCULAR_DEPENDENCY
            } else {
                reasons::WAITING_ON_DEPENDENCIES
            }
            .into(),
        ),
        blocked_by,
    }))
}

/// The Compositions (still present) whose `dependsOn` names this one.
async fn dependents_of(ctx: &Arc<Context>, comp: &Composition) -> Result<Vec<BlockedBy>, Error> {
    let ns = comp.namespace().unwrap_or_default();
    let name = comp.name_any();
    let api: Api<Composition> = match &ctx.opts.namespace {
        Some(scope) => Api::namespaced(ctx.client.clone(), scope),
        None => Api::all(ctx.client.clone()),
    };
    let all = api
        .list(&ListParams::default())
        .await
        .map_err(kube_err("listing Compositions for dependents"))?;
    Ok(all
        .items
        .into_iter()
        .filter(|c| {
            let c_ns = c.namespace().unwrap_or_default();
            c.spec
                .depends_on
                .iter()
                .any(|d| d.name == name && d.namespace.as_deref().unwrap_or(c_ns.as_str()) == ns)
        })
        .map(|c| BlockedBy {
            namespace: c.namespace().unwrap_or_default(),
            name: c.name_any(),
            reason: reasons::DEPENDENT_NOT_DELETED.into(),
        })
        .collect())
}

/// Whether `items` are exactly the resources of synthesis `cur` (tombstones aside).
async fn same_output(
    ctx: &Context,
    comp: &Composition,
    cur: &Synthesis,
    items: &[Value],
) -> Result<bool, Error> {
    let ns = comp.namespace().unwrap_or_default();
    Ok(super::inputs::emitted(ctx, &ns, cur)
        .await?
        .is_some_and(|emitted| emitted == items))
}

/// What made a new synthesis necessary, for logs.
fn why_synthesize(
    current: Option<&Synthesis>,
    generation: Option<i64>,
    synth_generation: Option<i64>,
    module_digest: &str,
    revisions: &[InputRevision],
    forced: Option<&String>,
) -> String {
    let Some(c) = current else {
        return "first synthesis".into();
    };
    let mut why = Vec::new();
    if c.observed_composition_generation != generation {
        why.push("composition changed".to_string());
    }
    if c.observed_synthesizer_generation != synth_generation
        || c.module_digest.as_deref() != Some(module_digest)
    {
        why.push("synthesizer changed".into());
    }
    if c.force_resynthesis.as_ref() != forced {
        why.push("forced".into());
    }
    let keys: BTreeSet<&str> = revisions
        .iter()
        .chain(&c.input_revisions)
        .map(|r| r.key.as_str())
        .collect();
    for key in keys {
        let old: Vec<&InputRevision> = c.input_revisions.iter().filter(|r| r.key == key).collect();
        let new: Vec<&InputRevision> = revisions.iter().filter(|r| r.key == key).collect();
        if old != new {
            why.push(format!("input {key:?} changed"));
        }
    }
    if why.is_empty() {
        why.push("status write-back unknown after a restart".into());
    }
    why.join(", ")
}
