//! Instance mode: every object of a Synthesizer's `spec.for` kind gets an implicit Composition,
//! named after it and owned by it, with the object bound under `self`. The object carries the
//! finalizer `enoki.dev/cleanup`; when it is deleted, its Composition is deleted first (so its
//! outputs go in deletion-group order) and only then is the finalizer released.
//!
//! Namespaced instances get their Composition in their own namespace, named like them.
//! Cluster-scoped instances get `<kind>-<name>` in the instance namespace
//! (`--instance-namespace`; by default `enoki-system`, and none — cluster-scoped instances
//! are left to a cluster-wide enoki — when enoki is scoped to one namespace).
//!
//! The finalizer is the Synthesizer's choice (annotation `enoki.dev/instance-finalizer`):
//! - absent: `enoki.dev/cleanup`, as above;
//! - `none`: no finalizer — the implicit Composition is owned by the instance, so garbage
//!   collection deletes it (and enoki then removes its outputs); deleting an instance never
//!   waits for enoki (upstream Trustee and quota operators have no finalizer either);
//! - any other name (the lepton built-in: upstream's `lepton.ai/deletion`): that finalizer;
//!   on deletion the Composition first synthesizes once more with the deleting instance (so a
//!   status write-back such as Lepton's `state: Deleting` lands), then it is deleted, then the
//!   finalizer is released. A synthesis that does not finish within [`FINAL_SYNTHESIS_WAIT`]
//!   does not hold the deletion back.
//!
//! The implicit Compositions act as the Synthesizer's `spec.serviceAccountName` (each in its own
//! namespace) or, when it names none, as `--default-service-account` like any Composition.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::error::Step;
use super::{Context, Error, api_err};
use crds::names::{FINALIZER, INSTANCE_FINALIZER_ANNOTATION, annotations as keys};
use crds::{Composition, Synthesizer};

/// Field manager of the implicit Compositions.
const MANAGER: &str = "enoki-instances";
pub use crds::names::INSTANCE_OF_LABEL;

struct Instance {
    ctx: Arc<Context>,
    synthesizer: String,
    ar: ApiResource,
    namespaced: bool,
    composition_namespace: Option<String>,
    /// The Synthesizer's `spec.serviceAccountName`, given to every implicit Composition.
    service_account: Option<String>,
    /// The finalizer instances get.
    finalizer: InstanceFinalizer,
}

/// How long a deleting instance with a named finalizer waits for its last synthesis.
pub const FINAL_SYNTHESIS_WAIT: Duration = Duration::from_secs(60);

/// The finalizer instance-mode objects get (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InstanceFinalizer {
    /// `enoki.dev/cleanup`.
    Cleanup,
    /// No finalizer: owner references and garbage collection.
    None,
    /// A named finalizer, released after one last synthesis and the outputs' removal.
    Named(String),
}

impl InstanceFinalizer {
    /// From the Synthesizer's `enoki.dev/instance-finalizer` annotation.
    pub fn of(synth: &Synthesizer) -> Self {
        match synth
            .annotations()
            .get(INSTANCE_FINALIZER_ANNOTATION)
            .map(|v| v.trim())
        {
            None | Some("") => Self::Cleanup,
            Some(v) if v == FINALIZER => Self::Cleanup,
            Some("none") => Self::None,
            Some(v) => Self::Named(v.to_string()),
        }
    }

    /// The finalizer to hold, if any.
    fn name(&self) -> Option<&str> {
        match self {
            Self::Cleanup => Some(FINALIZER),
            Self::None => None,
            Self::Named(n) => Some(n),
        }
    }
}

/// What an instance controller is started from; a change restarts it.
#[derive(Clone, PartialEq)]
struct Wanted {
    gvk: crds::GroupVersionKind,
    service_account: Option<String>,
    finalizer: InstanceFinalizer,
}

/// Watches Synthesizers and runs one instance controller per Synthesizer with `spec.for`,
/// until the process stops.
pub async fn run(ctx: Arc<Context>) {
    let synths: Api<Synthesizer> = Api::all(ctx.clusters.client().clone());
    let mut running: HashMap<String, (Wanted, tokio::task::JoinHandle<()>)> = HashMap::new();
    let mut events =
        super::recovery::recovering(watcher(synths, watcher::Config::default())).boxed();
    while let Some(event) = events.next().await {
        let (synth, deleted) = match event {
            Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => (s, false),
            Ok(watcher::Event::Delete(s)) => (s, true),
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "synthesizer watch");
                continue;
            }
        };
        let name = synth.name_any();
        let wanted = if deleted {
            None
        } else {
            synth.spec.for_kind.clone().map(|gvk| Wanted {
                gvk,
                service_account: synth.spec.service_account_name.clone(),
                finalizer: InstanceFinalizer::of(&synth),
            })
        };
        if let Some((current, handle)) = running.get(&name) {
            if Some(current) == wanted.as_ref() {
                continue;
            }
            handle.abort();
            running.remove(&name);
        }
        if let Some(w) = wanted {
            let handle = tokio::spawn(instance_controller(ctx.clone(), name.clone(), w.clone()));
            running.insert(name, (w, handle));
        }
    }
}

async fn instance_controller(ctx: Arc<Context>, synthesizer: String, wanted: Wanted) {
    let for_kind = wanted.gvk;
    let gvk = GroupVersionKind::gvk(&for_kind.group, &for_kind.version, &for_kind.kind);
    let (ar, namespaced) = loop {
        match ctx.clusters.resolve(&gvk).await {
            Ok(x) => break x,
            Err(e) => {
                tracing::info!(%synthesizer, kind = %for_kind.kind, error = %e, "instance kind not served yet");
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
        }
    };
    let composition_namespace = if namespaced {
        None
    } else {
        match (
            &ctx.opts.scope.instance_namespace,
            &ctx.opts.scope.namespace,
        ) {
            (Some(ns), _) => Some(ns.clone()),
            (None, None) => Some("enoki-system".into()),
            (None, Some(_)) => {
                tracing::info!(%synthesizer, kind = %for_kind.kind,
                    "cluster-scoped instances are not handled by a namespace-scoped enoki without --instance-namespace");
                return;
            }
        }
    };
    let api: Api<DynamicObject> = match (&ctx.opts.scope.namespace, namespaced) {
        (Some(ns), true) => Api::namespaced_with(ctx.clusters.client().clone(), ns, &ar),
        _ => Api::all_with(ctx.clusters.client().clone(), &ar),
    };
    tracing::info!(%synthesizer, kind = %for_kind.kind, "instance mode: watching");
    let state = Arc::new(Instance {
        ctx: ctx.clone(),
        synthesizer,
        ar: ar.clone(),
        namespaced,
        composition_namespace,
        service_account: wanted.service_account,
        finalizer: wanted.finalizer,
    });
    super::recovery::dynamic_controller(api, watcher::Config::default(), ar)
        .run(reconcile, error_policy, state)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "instance reconcile failed");
            }
        })
        .await;
}

/// Where an instance's implicit Composition lives: (namespace, name).
fn composition_of(obj: &DynamicObject, inst: &Instance) -> (String, String) {
    match &inst.composition_namespace {
        None => (obj.namespace().unwrap_or_default(), obj.name_any()),
        Some(ns) => (
            ns.clone(),
            format!("{}-{}", inst.ar.kind.to_lowercase(), obj.name_any()),
        ),
    }
}

async fn reconcile(obj: Arc<DynamicObject>, inst: Arc<Instance>) -> Result<Action, Error> {
    let key = instance_key(&obj, &inst);
    let result = reconcile_once(obj, inst.clone()).await;
    if result.is_ok() {
        inst.ctx.state.clear_failures(&key);
    }
    result
}

async fn reconcile_once(obj: Arc<DynamicObject>, inst: Arc<Instance>) -> Result<Action, Error> {
    let ctx = &inst.ctx;
    let api: Api<DynamicObject> = if inst.namespaced {
        Api::namespaced_with(
            ctx.clusters.client().clone(),
            &obj.namespace().unwrap_or_default(),
            &inst.ar,
        )
    } else {
        Api::all_with(ctx.clusters.client().clone(), &inst.ar)
    };
    let name = obj.name_any();
    let (comp_ns, comp_name) = composition_of(&obj, &inst);
    let comps: Api<Composition> = Api::namespaced(ctx.clusters.client().clone(), &comp_ns);
    let wanted = inst.finalizer.name();
    let held = |f: &str| obj.finalizers().iter().any(|x| x == f);
    // Finalizers enoki put there before the Synthesizer chose another one.
    let stale: Vec<&str> = [FINALIZER]
        .into_iter()
        .filter(|f| Some(*f) != wanted && held(f))
        .collect();

    if obj.metadata.deletion_timestamp.is_some() {
        if !stale.is_empty() {
            super::finalizers::set_finalizers(
                &api,
                obj.as_ref(),
                &stale,
                None,
                obj.resource_version(),
            )
            .await
            .map_err(api_err(Step::RemoveInstanceFinalizer(true)))?;
        }
        let Some(f) = wanted.filter(|f| held(f)) else {
            return Ok(Action::await_change());
        };
        return delete_outputs(&obj, &inst, &comps, &comp_name, f, &api, &name).await;
    }
    if wanted.is_some_and(|f| !held(f)) || !stale.is_empty() {
        super::finalizers::set_finalizers(
            &api,
            obj.as_ref(),
            &stale,
            wanted,
            obj.resource_version(),
        )
        .await
        .map_err(api_err(Step::SetInstanceFinalizer))?;
    }
    let comp = implicit_composition(&obj, &inst, &comp_ns, &comp_name);
    comps
        .patch(
            &comp_name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&comp),
        )
        .await
        .map_err(api_err(Step::ApplyImplicit(comp_name.clone())))?;
    Ok(Action::requeue(ctx.opts.resync))
}

/// The implicit Composition of an instance: bound to it as `self`, owned by it, labelled
/// with its Synthesizer.
fn implicit_composition(
    obj: &DynamicObject,
    inst: &Instance,
    comp_ns: &str,
    comp_name: &str,
) -> serde_json::Value {
    let name = obj.name_any();
    let mut binding = json!({"key": super::inputs::SELF_KEY, "resource": {"name": name}});
    if let Some(ns) = obj.namespace() {
        binding["resource"]["namespace"] = json!(ns);
    }
    let mut comp = json!({
        "apiVersion": Composition::api_version(&()),
        "kind": Composition::kind(&()),
        "metadata": {
            "name": comp_name,
            "namespace": comp_ns,
            "labels": {INSTANCE_OF_LABEL: inst.synthesizer},
            "ownerReferences": [{
                "apiVersion": inst.ar.api_version, "kind": inst.ar.kind, "name": name,
                "uid": obj.uid().unwrap_or_default(), "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": {"synthesizer": {"name": inst.synthesizer}, "bindings": [binding]},
    });
    if let Some(sa) = &inst.service_account {
        comp["spec"]["serviceAccountName"] = json!(sa);
    }
    comp
}

/// A deleting instance that holds finalizer `f`: (for a named finalizer) one last synthesis,
/// then the Composition is deleted, then `f` is released once it is gone.
async fn delete_outputs(
    obj: &DynamicObject,
    inst: &Instance,
    comps: &Api<Composition>,
    comp_name: &str,
    f: &str,
    api: &Api<DynamicObject>,
    name: &str,
) -> Result<Action, Error> {
    let comp = comps
        .get_opt(comp_name)
        .await
        .map_err(api_err(Step::ReadImplicit))?;
    let Some(c) = comp else {
        super::finalizers::set_finalizers(api, obj, &[f], None, obj.resource_version())
            .await
            .map_err(api_err(Step::RemoveInstanceFinalizer(false)))?;
        tracing::info!(instance = %name, "outputs removed; finalizer released");
        return Ok(Action::await_change());
    };
    if c.metadata.deletion_timestamp.is_some() {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    if matches!(inst.finalizer, InstanceFinalizer::Named(_))
        && !final_synthesis_done(obj, &c, comps).await?
    {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    tracing::info!(instance = %name, composition = %comp_name, "instance deleted; deleting its Composition");
    comps
        .delete(comp_name, &DeleteParams::default())
        .await
        .map_err(api_err(Step::DeleteImplicit))?;
    Ok(Action::requeue(Duration::from_secs(1)))
}

/// Whether the Composition of a deleting instance has synthesized (and reconciled) once with
/// the deletion visible: marks it with `force-resynthesis: deleting-<deletionTimestamp>` and
/// waits for a synthesis of that mark, at most [`FINAL_SYNTHESIS_WAIT`] after the deletion.
async fn final_synthesis_done(
    obj: &DynamicObject,
    comp: &Composition,
    comps: &Api<Composition>,
) -> Result<bool, Error> {
    let Some(since) = obj.metadata.deletion_timestamp.as_ref() else {
        return Ok(true);
    };
    let elapsed = k8s_openapi::jiff::Timestamp::now().as_second() - since.0.as_second();
    if elapsed > i64::try_from(FINAL_SYNTHESIS_WAIT.as_secs()).unwrap_or(i64::MAX) {
        return Ok(true);
    }
    let mark = format!("deleting-{}", since.0.as_second());
    if comp.annotations().get(keys::FORCE_RESYNTHESIS.enoki) != Some(&mark) {
        let patch = json!({"metadata": {"annotations": {keys::FORCE_RESYNTHESIS.enoki: mark}}});
        comps
            .patch(
                &comp.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(api_err(Step::MarkImplicit))?;
        return Ok(false);
    }
    let synthesis = comp
        .status
        .as_ref()
        .and_then(|s| s.current_synthesis.as_ref());
    Ok(synthesis.is_some_and(|s| {
        s.force_resynthesis.as_deref() == Some(mark.as_str()) && s.reconciled.is_some()
    }))
}

#[allow(clippy::needless_pass_by_value)] // the signature kube-runtime requires
fn error_policy(obj: Arc<DynamicObject>, err: &Error, inst: Arc<Instance>) -> Action {
    super::policy::other_error_policy(
        &inst.ctx,
        &instance_key(&obj, &inst),
        obj.object_ref(&inst.ar),
        err,
    )
}

/// The key of an instance in the failure counts: `<group>/<kind>/<namespace>/<name>/<uid>`.
fn instance_key(obj: &DynamicObject, inst: &Instance) -> String {
    format!(
        "{}/{}/{}/{}/{}",
        inst.ar.group,
        inst.ar.kind,
        obj.namespace().unwrap_or_default(),
        obj.name_any(),
        obj.uid().unwrap_or_default()
    )
}
