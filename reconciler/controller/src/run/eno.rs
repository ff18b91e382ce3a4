//! Eno's own objects, reconciled as they are (`--serve-eno-api`).
//!
//! Each `eno.azure.io/v1` Synthesizer, Composition and Symphony gets an `enoki.dev` mirror of
//! the same name (and namespace), labelled `enoki.dev/eno-mirror` and owned by it; the
//! engine reconciles the mirror like any other object, and the mirror's status is written
//! back to the Eno object in Eno's shape ([`project`]). A mirror is never written over an
//! `enoki.dev` object that is not one (it is reported instead).
//!
//! - A Synthesizer's module is the OCI artifact `spec.image` names (its manifest must have a
//!   wasm layer; a tag is resolved to the digest it serves when the Synthesizer is first seen
//!   or changed — Eno never looks at a registry either) or what the annotation
//!   `enoki.dev/module` names (`builtin:<name>` or an OCI reference). An image that is no
//!   WebAssembly module is an Event on the Synthesizer and the status of its Compositions;
//!   nothing is mirrored.
//! - Compositions and Symphonies carry Eno's finalizer `eno.azure.io/cleanup`: deleting one
//!   deletes its mirror (whose outputs enoki deletes as always), then lets the Eno object go,
//!   with the Eno ResourceSlices it still owns. A Composition Eno's Symphony made is not
//!   mirrored: the Symphony's mirror makes its own ([`superseded`]).
//! - A mirror's spec, and the labels and annotations it carries, are the Eno object's: an
//!   edit of them on the mirror is undone.

mod kinds;
mod mirror;
pub(crate) mod project;
mod state;
mod superseded;
mod synthesizers;
mod writes;

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

use super::Context;
use super::recovery;
use state::Bridge;

/// Starts the bridge's controllers: Synthesizers, Compositions and Symphonies.
pub(super) fn start(
    ctx: &Arc<Context>,
    stop: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) {
    let bridge = Arc::new(Bridge {
        ctx: ctx.clone(),
        memory: Mutex::default(),
    });
    let client = ctx.clusters.client().clone();
    // Compositions and Symphonies in the controller's scope (namespace, label selector);
    // every Synthesizer (they are cluster-scoped, and Compositions in any scope run them).
    let (scoped, mirrors) = match &ctx.opts.scope.label_selector {
        Some(sel) => (
            watcher::Config::default().labels(sel),
            watcher::Config::default().labels(&format!("{},{sel}", project::MIRROR)),
        ),
        None => (
            watcher::Config::default(),
            watcher::Config::default().labels(project::MIRROR),
        ),
    };
    let synths: Api<crds::eno::Synthesizer> = Api::all(client.clone());
    let owned: Api<crds::Synthesizer> = Api::all(client.clone());
    let synth_watch = watcher::Config::default().labels(project::MIRROR);
    tasks.push(tokio::spawn(
        recovery::controller(synths, watcher::Config::default())
            .owns(owned, synth_watch.clone())
            .graceful_shutdown_on(stop.clone())
            .run(
                synthesizers::reconcile,
                synthesizers::error_policy,
                bridge.clone(),
            )
            .for_each(|_| async {}),
    ));
    // A new or changed Synthesizer (Eno's, or its mirror) wakes the Eno Compositions that
    // run it.
    let comp_ctrl = recovery::controller::<crds::eno::Composition>(scoped_api(ctx), scoped.clone());
    let on = |store: kube::runtime::reflector::Store<crds::eno::Composition>| {
        move |name: String| {
            let all = store.state().into_iter();
            all.filter(|c| c.spec.synthesizer.name == name)
                .map(|c| ObjectRef::from_obj(c.as_ref()))
                .collect::<Vec<_>>()
        }
    };
    let (by_mirror, by_eno) = (on(comp_ctrl.store()), on(comp_ctrl.store()));
    tasks.push(tokio::spawn(
        comp_ctrl
            .owns::<crds::Composition>(scoped_api(ctx), mirrors.clone())
            .watches(
                Api::all(client.clone()),
                synth_watch,
                move |s: crds::Synthesizer| by_mirror(s.name_any()),
            )
            .watches(
                Api::all(client),
                watcher::Config::default(),
                move |s: crds::eno::Synthesizer| by_eno(s.name_any()),
            )
            .graceful_shutdown_on(stop.clone())
            .run(mirror::reconcile, mirror::error_policy, bridge.clone())
            .for_each(|_| async {}),
    ));
    tasks.push(tokio::spawn(
        recovery::controller::<crds::eno::Symphony>(scoped_api(ctx), scoped)
            .owns::<crds::Symphony>(scoped_api(ctx), mirrors)
            .graceful_shutdown_on(stop)
            .run(mirror::reconcile, mirror::error_policy, bridge)
            .for_each(|_| async {}),
    ));
}

/// An API of namespaced objects in the controller's `--namespace` (all without one).
fn scoped_api<K>(ctx: &Context) -> Api<K>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
{
    let client = ctx.clusters.client().clone();
    match &ctx.opts.scope.namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    }
}
