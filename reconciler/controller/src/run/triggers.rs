//! Re-reconcile Compositions when something they read or manage changes: their bound inputs
//! (any kind, watched on demand per kind), their Synthesizer, and — for drift — the objects
//! they manage (metadata-only watches, selected by the `enoki.dev/managed-by` label). Each
//! reconcile records what it read and applied; a watcher per kind maps change events back to
//! the Compositions involved. enoki's own writes arrive too, but the plan finds them in sync
//! (hash and resourceVersion match) and writes nothing.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc::UnboundedSender;

use crds::Composition;

/// (scope + group, kind, namespace, name); name `*` for collections.
type WatchKey = (String, String, String, String);

/// What each Composition read or manages, and the watchers that report changes to it.
pub struct Triggers {
    client: Client,
    sender: UnboundedSender<ObjectRef<Composition>>,
    readers: Mutex<HashMap<WatchKey, HashSet<ObjectRef<Composition>>>>,
    watched: Mutex<HashSet<(bool, GroupVersionKind)>>,
}

impl Triggers {
    /// A registry that sends Composition refs on `sender`.
    pub fn new(client: Client, sender: UnboundedSender<ObjectRef<Composition>>) -> Arc<Triggers> {
        Arc::new(Triggers {
            client,
            sender,
            readers: Mutex::new(HashMap::new()),
            watched: Mutex::new(HashSet::new()),
        })
    }

    /// Records that `comp` read the object (or, with name `*`, the collection).
    pub fn track(
        self: &Arc<Self>,
        gvk: &GroupVersionKind,
        ar: &ApiResource,
        namespace: &str,
        name: &str,
        comp: &Composition,
    ) {
        self.track_with(gvk, ar, namespace, name, comp, false);
    }

    /// Records that `comp` manages the object (drift detection).
    pub fn track_managed(
        self: &Arc<Self>,
        gvk: &GroupVersionKind,
        ar: &ApiResource,
        namespace: &str,
        name: &str,
        comp: &Composition,
    ) {
        self.track_with(gvk, ar, namespace, name, comp, true);
    }

    fn track_with(
        self: &Arc<Self>,
        gvk: &GroupVersionKind,
        ar: &ApiResource,
        namespace: &str,
        name: &str,
        comp: &Composition,
        managed: bool,
    ) {
        let scope = if managed { "managed:" } else { "input:" };
        let key = (
            format!("{scope}{}", gvk.group),
            gvk.kind.clone(),
            namespace.to_string(),
            name.to_string(),
        );
        if let Ok(mut readers) = self.readers.lock() {
            readers
                .entry(key)
                .or_default()
                .insert(ObjectRef::from_obj(comp));
        }
        let first = self
            .watched
            .lock()
            .map(|mut w| w.insert((managed, gvk.clone())))
            .unwrap_or(false);
        if !first {
            return;
        }
        let this = self.clone();
        let client = self.client.clone();
        let ar = ar.clone();
        let (group, kind) = (format!("{scope}{}", gvk.group), gvk.kind.clone());
        tokio::spawn(async move {
            let mut events = if managed {
                let wc =
                    watcher::Config::default().labels(crds::names::annotations::MANAGED_BY.enoki);
                let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &ar);
                watcher(api, wc)
                    .touched_objects()
                    .map(|r| r.map(|m| (m.namespace().unwrap_or_default(), m.name_any())))
                    .boxed()
            } else {
                let api: Api<DynamicObject> = Api::all_with(client, &ar);
                watcher(api, watcher::Config::default())
                    .applied_objects()
                    .map(|r| r.map(|o| (o.namespace().unwrap_or_default(), o.name_any())))
                    .boxed()
            };
            while let Some(event) = events.next().await {
                let Ok((ns, name)) = event else { continue };
                this.fire(&(group.clone(), kind.clone(), ns.clone(), name));
                this.fire(&(group.clone(), kind.clone(), ns, "*".into()));
                this.fire(&(group.clone(), kind.clone(), String::new(), "*".into()));
            }
        });
    }

    fn fire(&self, key: &WatchKey) {
        let refs: Vec<ObjectRef<Composition>> = self
            .readers
            .lock()
            .ok()
            .and_then(|r| r.get(key).map(|s| s.iter().cloned().collect()))
            .unwrap_or_default();
        for r in refs {
            let _ = self.sender.send(r);
        }
    }
}
