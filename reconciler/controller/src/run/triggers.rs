//! Re-reconcile Compositions when something they read changes: their bound inputs (any kind,
//! watched on demand per kind) and their Synthesizer. Each reconcile records what it read;
//! a watcher per kind maps change events back to the Compositions that read the object.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc::UnboundedSender;

use crds::Composition;

/// (group, kind, namespace, name); name `*` for collections.
type WatchKey = (String, String, String, String);

/// What each Composition read, and the watchers that report changes to it.
pub struct Triggers {
    client: Client,
    sender: UnboundedSender<ObjectRef<Composition>>,
    readers: Mutex<HashMap<WatchKey, HashSet<ObjectRef<Composition>>>>,
    watched: Mutex<HashSet<GroupVersionKind>>,
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

    /// Records that `comp` read the object (or, with name `*`, the collection) and makes sure
    /// its kind is watched.
    pub fn track(
        self: &Arc<Self>,
        gvk: &GroupVersionKind,
        ar: &ApiResource,
        namespace: &str,
        name: &str,
        comp: &Composition,
    ) {
        let key = (
            gvk.group.clone(),
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
            .map(|mut w| w.insert(gvk.clone()))
            .unwrap_or(false);
        if first {
            let this = self.clone();
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), ar);
            let (group, kind) = (gvk.group.clone(), gvk.kind.clone());
            tokio::spawn(async move {
                let mut events = watcher(api, watcher::Config::default())
                    .applied_objects()
                    .boxed();
                while let Some(event) = events.next().await {
                    let Ok(obj) = event else { continue };
                    let ns = obj.namespace().unwrap_or_default();
                    let name = obj.name_any();
                    this.fire(&(group.clone(), kind.clone(), ns.clone(), name));
                    this.fire(&(group.clone(), kind.clone(), ns, "*".into()));
                    this.fire(&(group.clone(), kind.clone(), String::new(), "*".into()));
                }
            });
        }
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
