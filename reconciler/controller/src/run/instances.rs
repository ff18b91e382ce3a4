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
//! The implicit Compositions act as the Synthesizer's `spec.serviceAccountName` (each in its own
//! namespace) or, when it names none, as `--default-service-account` like any Composition.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::{Context, Error, kube_err};
use crds::names::FINALIZER;
use crds::{Composition, Synthesizer};

/// Field manager of the implicit Compositions.
const MANAGER: &str = "enoki-instances";
/// Label on implicit Compositions: the Synthesizer they run.
pub const INSTANCE_OF_LABEL: &str = "enoki.dev/instance-of";

struct Instance {
    ctx: Arc<Context>,
    synthesizer: String,
    ar: ApiResource,
    namespaced: bool,
    composition_namespace: Option<String>,
    /// The Synthesizer's `spec.serviceAccountName`, given to every implicit Composition.
    service_account: Option<String>,
}

/// What an instance controller is started from; a change restarts it.
#[derive(Clone, PartialEq)]
struct Wanted {
    gvk: crds::GroupVersionKind,
    service_account: Option<String>,
}

/// Watches Synthesizers and runs one instance controller per Synthesizer with `spec.for`,
/// until the process stops.
pub async fn run(ctx: Arc<Context>) {
    let synths: Api<Synthesizer> = Api::all(ctx.client.clone());
    let mut running: HashMap<String, (Wanted, tokio::task::JoinHandle<()>)> = HashMap::new();
    let mut events = watcher(synths, watcher::Config::default())
        .default_backoff()
        .boxed();
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
        match ctx.resolve(&gvk).await {
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
        match (&ctx.opts.instance_namespace, &ctx.opts.namespace) {
            (Some(ns), _) => Some(ns.clone()),
            (None, None) => Some("enoki-system".into()),
            (None, Some(_)) => {
                tracing::info!(%synthesizer, kind = %for_kind.kind,
                    "cluster-scoped instances are not handled by a namespace-scoped enoki without --instance-namespace");
                return;
            }
        }
    };
    let api: Api<DynamicObject> = match (&ctx.opts.namespace, namespaced) {
        (Some(ns), true) => Api::namespaced_with(ctx.client.clone(), ns, &ar),
        _ => Api::all_with(ctx.client.clone(), &ar),
    };
    tracing::info!(%synthesizer, kind = %for_kind.kind, "instance mode: watching");
    let state = Arc::new(Instance {
        ctx: ctx.clone(),
        synthesizer,
        ar: ar.clone(),
        namespaced,
        composition_namespace,
        service_account: wanted.service_account,
    });
    Controller::new_with(api, watcher::Config::default(), ar)
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
    let ctx = &inst.ctx;
    let api: Api<DynamicObject> = if inst.namespaced {
        Api::namespaced_with(
            ctx.client.clone(),
            &obj.namespace().unwrap_or_default(),
            &inst.ar,
        )
    } else {
        Api::all_with(ctx.client.clone(), &inst.ar)
    };
    let name = obj.name_any();
    let (comp_ns, comp_name) = composition_of(&obj, &inst);
    let comps: Api<Composition> = Api::namespaced(ctx.client.clone(), &comp_ns);
    let has_finalizer = obj.finalizers().iter().any(|f| f == FINALIZER);

    if obj.metadata.deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(Action::await_change());
        }
        return match comps
            .get_opt(&comp_name)
            .await
            .map_err(kube_err("reading the implicit Composition"))?
        {
            Some(c) => {
                if c.metadata.deletion_timestamp.is_none() {
                    tracing::info!(instance = %name, composition = %comp_name, "instance deleted; deleting its Composition");
                    comps
                        .delete(&comp_name, &DeleteParams::default())
                        .await
                        .map_err(kube_err("deleting the implicit Composition"))?;
                }
                Ok(Action::requeue(Duration::from_secs(1)))
            }
            None => {
                super::set_cleanup_finalizer(&api, obj.as_ref(), false, obj.resource_version())
                    .await
                    .map_err(kube_err("removing the instance finalizer"))?;
                tracing::info!(instance = %name, "outputs removed; finalizer released");
                Ok(Action::await_change())
            }
        };
    }
    if !has_finalizer {
        super::set_cleanup_finalizer(&api, obj.as_ref(), true, obj.resource_version())
            .await
            .map_err(kube_err("adding the instance finalizer"))?;
    }
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
    comps
        .patch(
            &comp_name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&comp),
        )
        .await
        .map_err(kube_err(format!(
            "applying the implicit Composition {comp_name}"
        )))?;
    Ok(Action::requeue(ctx.opts.resync))
}

#[allow(clippy::needless_pass_by_value)] // the signature kube-runtime requires
fn error_policy(obj: Arc<DynamicObject>, err: &Error, _inst: Arc<Instance>) -> Action {
    tracing::warn!(instance = %obj.name_any(), error = %err, "instance reconcile error");
    Action::requeue(Duration::from_secs(5))
}
