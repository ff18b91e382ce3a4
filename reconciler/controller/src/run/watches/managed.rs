//! The metadata watches of managed objects (one per kind): what each object's resourceVersion,
//! uid and deletion are, and which Composition a change wakes.

use super::*;
use crate::run::shard::Shards;

/// What the apply pass reads of a managed object: its version and whether it is being
/// deleted (kept compact: thousands of these live in memory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Live {
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.deletionTimestamp`, RFC 3339.
    pub deletion_timestamp: Option<String>,
    /// The owning Composition's UID (the `managed-by` label).
    pub owner: Option<String>,
}

impl Live {
    pub(super) fn of(m: &Meta) -> Live {
        Live {
            owner: m.labels().get(managed_label()).cloned(),
            resource_version: m.metadata.resource_version.clone(),
            uid: m.metadata.uid.clone(),
            deletion_timestamp: m
                .metadata
                .deletion_timestamp
                .as_ref()
                .map(|t| t.0.to_string()),
        }
    }
}

pub(super) type Entries = Arc<std::sync::RwLock<HashMap<(String, String), Live>>>;

/// One managed kind's watch, the Compositions that need it.
pub(super) struct ManagedWatch {
    pub(crate) view: ManagedView,
    pub(crate) task: tokio::task::AbortHandle,
    pub(crate) users: HashSet<String>,
}

impl Drop for ManagedWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// For an event about an object another shard's Composition owns: its (namespace, name) and
/// whether it is an update (`Apply`); `None` for this shard's objects and list markers.
pub(super) fn foreign(
    shards: Shards,
    event: &watcher::Event<Meta>,
) -> Option<(String, String, bool)> {
    let (m, apply) = match event {
        watcher::Event::Apply(m) => (m, true),
        watcher::Event::InitApply(m) | watcher::Event::Delete(m) => (m, false),
        watcher::Event::Init | watcher::Event::InitDone => return None,
    };
    let owner = m.labels().get(managed_label())?;
    (!shards.owns_uid(owner)).then(|| (m.namespace().unwrap_or_default(), m.name_any(), apply))
}

/// Applies one watch event to the entries (a relist is built aside and swapped in when
/// complete); returns the touched object's (namespace, name, owner UID).
pub(super) fn apply_event(
    entries: &Entries,
    relist: &mut Option<HashMap<(String, String), Live>>,
    ready: &tokio::sync::watch::Sender<bool>,
    event: watcher::Event<Meta>,
) -> Option<(String, String, Option<String>)> {
    let id = |m: &Meta| (m.namespace().unwrap_or_default(), m.name_any());
    let owner = |m: &Meta| m.labels().get(managed_label()).cloned();
    match event {
        watcher::Event::Init => {
            *relist = Some(HashMap::new());
            None
        }
        watcher::Event::InitApply(m) => {
            if let Some(r) = relist.as_mut() {
                r.insert(id(&m), Live::of(&m));
            }
            let (ns, name) = id(&m);
            Some((ns, name, owner(&m)))
        }
        watcher::Event::InitDone => {
            if let (Some(r), Ok(mut e)) = (relist.take(), entries.write()) {
                *e = r;
            }
            let _ = ready.send(true);
            None
        }
        watcher::Event::Apply(m) => {
            if let Ok(mut e) = entries.write() {
                e.insert(id(&m), Live::of(&m));
            }
            let (ns, name) = id(&m);
            Some((ns, name, owner(&m)))
        }
        watcher::Event::Delete(m) => {
            if let Ok(mut e) = entries.write() {
                e.remove(&id(&m));
            }
            let (ns, name) = id(&m);
            Some((ns, name, owner(&m)))
        }
    }
}

/// A kind's synced metadata cache of managed objects.
#[derive(Clone)]
pub struct ManagedView {
    pub(crate) entries: Entries,
    pub(crate) ready: tokio::sync::watch::Receiver<bool>,
    /// The API server refused to list or watch this kind (403).
    pub(crate) forbidden: Arc<AtomicBool>,
}

/// Whether a watch failed because enoki may not list or watch the kind.
pub(super) fn forbidden_watch(e: &watcher::Error) -> bool {
    matches!(e,
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) if s.code == 403)
}

impl ManagedView {
    /// The cached state of one object (`None`: not labelled as managed, or absent).
    pub fn get(&self, namespace: &str, name: &str) -> Option<Live> {
        self.entries
            .read()
            .ok()?
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }
}

pub(super) fn managed_label() -> &'static str {
    crds::names::annotations::MANAGED_BY.enoki
}

/// A metadata-only watch event as the input store keeps objects (no data).
pub(super) fn metadata_only(
    event: watcher::Event<PartialObjectMeta<DynamicObject>>,
) -> watcher::Event<DynamicObject> {
    let object = |p: PartialObjectMeta<DynamicObject>| DynamicObject {
        types: p.types,
        metadata: p.metadata,
        data: serde_json::Value::Null,
    };
    match event {
        watcher::Event::Apply(p) => watcher::Event::Apply(object(p)),
        watcher::Event::Delete(p) => watcher::Event::Delete(object(p)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(p) => watcher::Event::InitApply(object(p)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}
