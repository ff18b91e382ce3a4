//! Shared watch caches, and the triggers they fire.
//!
//! - **Managed objects**: one metadata-only watch per kind, selected by the
//!   `enoki.dev/managed-by` label and shared by every Composition, started when a kind is first
//!   emitted. The apply pass reads live `resourceVersion`s from it, so an in-sync resource costs
//!   no request. A change to a managed object re-reconciles its owner (the label's value is the
//!   owner's UID) — that is drift detection. With `--shards`, the objects carry their
//!   Composition's shard (`enoki.dev/shard`) and the API server leaves other shards' out of
//!   the watch; a Composition here that reads one of those hears of it through a
//!   [`foreign`] watch.
//! - **Inputs**: one watch per kind and namespace that some Composition reads from (bound
//!   inputs, dependencies; cluster-wide for cluster-scoped kinds, Synthesizers and
//!   collections); reads come from it, and a change re-reconciles every Composition that read
//!   the object. Objects enoki manages are left out of it (they are in the metadata cache,
//!   and read with a GET when one is an input). Unsharded, the tables keep every object
//!   whole (only its resourceVersion when every Composition acts as a ServiceAccount and
//!   reads its inputs with GETs; Synthesizers, which the controller reads as itself, stay
//!   whole). With `--shards`, an input watch is per namespace and shared by the shards, so a
//!   replica's tables hold *stubs* (name and resourceVersion) in the rows of the objects no
//!   Composition of its shards reads from the cache by name (as the controller, not as a
//!   ServiceAccount; [`Watches::serve`]), and the whole object in the rows of those one
//!   does: a replica holding half of the shards does not keep the other half's inputs. An
//!   object that arrives shortly before a Composition here that binds it (or is listed after
//!   one) is served from the copy the watch brought ([`arrivals`]); one that arrived long
//!   before is read once with a GET (kept in its row from then on; a relist under way at
//!   that moment leaves its stub, and the next read is a GET again). The sweep turns back
//!   into stubs the rows no Composition still reconciled here reads (a
//!   Composition that stops reading an object it read, or starts reading it as a
//!   ServiceAccount, keeps its copy while both exist; such a read never looks at the cache).
//!
//! Every watch backs off (`super::recovery`: at most 5 s, no wait on `410 Expired`) and logs its
//! errors; a kind's watch is stopped when no Composition reconciled here that used it is
//! left: at a deletion ([`Watches::forget`]), and in the 15 s sweep for Compositions that left
//! otherwise (deleted while enoki was down, or of a shard handed to another replica;
//! [`Watches::retain_readers`]). What a cached entry means is left to the callers: the cache
//! may lag behind the server, so a stale answer must only ever cost a GET, never a wrong
//! write. Each watch keeps a compact table ([`table`]): per namespace, per name, one row.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind, PartialObjectMeta};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio::sync::mpsc::UnboundedSender;

use super::shard::Held;
use crds::Composition;

mod managed;
pub use managed::*;
mod table;
use table::{Feeder, Row, Synced, Table};

mod foreign;
mod labelled;
mod managing;
pub use labelled::Meta;
use labelled::{forbidden_watch, managed_label};
mod arrivals;
mod first_reads;
mod inputs;
#[cfg(test)]
mod tests;

/// (group, kind, namespace, name); name `*` for collections, namespace `""` for "any".
type WatchKey = (String, String, String, String);

/// The Compositions that read one object, each with the versions of its kind in which it
/// read it from the input cache as the controller ([`Watches::serve`]; with `--shards`
/// only; empty for every other read).
type Readers = HashMap<ObjectRef<Composition>, Served>;

/// The versions one Composition read one object in: nearly always one, inline, shared from
/// [`Watches::api_version`] (a mark allocates nothing).
type Served = smallvec::SmallVec<[Arc<str>; 1]>;

/// One input kind's watch (in one namespace, or cluster-wide): its table, the task feeding
/// it, and the Compositions that need it.
struct InputWatch {
    synced: Synced<Kept>,
    task: tokio::task::AbortHandle,
    users: HashSet<String>,
}

/// One kind's watch of the managed objects in one scope that Compositions here read
/// ([`foreign`]), and per Composition (UID) the names it needs it for (`"*"`: a collection),
/// each with whether a read that finds the object unmanaged lets it go.
struct ForeignWatch {
    task: tokio::task::AbortHandle,
    users: HashMap<String, HashSet<(String, bool)>>,
}

impl Drop for ForeignWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Drop for InputWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What an input watch keeps of an object: the whole object (a kind kept whole: every kind
/// with whole inputs, Synthesizers always; with `--shards`, only while a Composition here
/// reads it) or only its resourceVersion (metadata-only watches; with `--shards`, a stub).
#[derive(Clone)]
enum Kept {
    Whole(Arc<DynamicObject>),
    Version(Option<Box<str>>),
}

impl Row for Kept {
    type Object = DynamicObject;

    type Draft = Kept;

    fn draft(o: &DynamicObject) -> Kept {
        // A deserialized object's `data` is never null: null marks a stub.
        if o.data.is_null() {
            Kept::Version(o.metadata.resource_version.as_deref().map(Into::into))
        } else {
            Kept::Whole(Arc::new(o.clone()))
        }
    }

    fn of(kept: Kept, _: &mut Table<Kept>) -> Kept {
        kept
    }
}

impl Kept {
    fn resource_version(&self) -> Option<&str> {
        match self {
            Kept::Whole(o) => o.metadata.resource_version.as_deref(),
            Kept::Version(rv) => rv.as_deref(),
        }
    }
}

/// Watches shared by every reconcile; see the module docs.
pub struct Watches {
    /// The management cluster (inputs).
    client: Client,
    /// The target cluster (managed objects).
    target: Client,
    /// Only managed objects of these shards' Compositions are cached.
    shards: Held,
    sender: UnboundedSender<ObjectRef<Composition>>,
    /// Who reads what: per object (or collection), the Compositions reconciled here that
    /// read it; with `--shards`, each with the versions of the kind in which it read the
    /// object from the input cache ([`Watches::serve`]): the objects kept whole, in those
    /// versions.
    readers: Mutex<HashMap<WatchKey, Readers>>,
    /// The API versions in [`Served`] marks, each once (the served versions of input kinds:
    /// a handful; taken only while `readers` is held, never the other way).
    api_versions: Mutex<HashSet<Arc<str>>>,
    /// With `--shards`, whole copies of inputs no Composition here has read yet.
    arrivals: Mutex<arrivals::Arrivals>,
    inputs: Mutex<HashMap<(GroupVersionKind, String), InputWatch>>,
    /// Input watches the API server refused (403), and when.
    forbidden_inputs: Mutex<HashMap<(GroupVersionKind, String), std::time::Instant>>,
    managed: Mutex<HashMap<GroupVersionKind, ManagedWatch>>,
    /// With `--shards`: per kind and scope, the watch of the managed objects Compositions
    /// here read ([`foreign`]).
    foreign: Mutex<HashMap<(GroupVersionKind, String), ForeignWatch>>,
    owners: Mutex<HashMap<String, ObjectRef<Composition>>>,
    /// Every wake counted per Composition: which ones are at rest.
    pub(crate) rest: super::rest::Rest,
    /// Input caches keep whole objects (reads as the controller are served from them); when
    /// every Composition acts as a ServiceAccount its reads are GETs, and the caches keep
    /// metadata only — a tenant's thousands of large objects never sit in enoki's memory
    /// (Synthesizers, which the controller reads as itself, are kept whole either way; see
    /// `Watches::whole`).
    whole_inputs: bool,
}

/// How long a refused input watch is not tried again.
const FORBIDDEN_RETRY: Duration = Duration::from_secs(300);

/// How long a read waits for a kind's first list before it falls back to a GET.
const FIRST_LIST: Duration = Duration::from_secs(15);

impl Watches {
    /// Watches of inputs (on `client`) and of the managed objects of `shards`' Compositions
    /// (on `target`) that send Composition refs to re-reconcile on `sender`.
    pub fn new(
        client: Client,
        target: Client,
        sender: UnboundedSender<ObjectRef<Composition>>,
        shards: Held,
        whole_inputs: bool,
    ) -> Arc<Watches> {
        Arc::new(Watches {
            client,
            target,
            shards,
            sender,
            whole_inputs,
            readers: Mutex::new(HashMap::new()),
            api_versions: Mutex::new(HashSet::new()),
            arrivals: Mutex::new(arrivals::Arrivals::default()),
            inputs: Mutex::new(HashMap::new()),
            forbidden_inputs: Mutex::new(HashMap::new()),
            managed: Mutex::new(HashMap::new()),
            foreign: Mutex::new(HashMap::new()),
            owners: Mutex::new(HashMap::new()),
            rest: super::rest::Rest::default(),
        })
    }

    /// The metadata cache of managed objects of `gvk`, started on first use; `owner` (a
    /// Composition UID) is recorded as one of its users. `None` while its first list has not
    /// finished within a few seconds (callers then read with GETs).
    pub async fn managed(
        self: &Arc<Self>,
        gvk: &GroupVersionKind,
        ar: &ApiResource,
        owner: &str,
    ) -> Option<ManagedView> {
        let view = {
            let mut managed = self.managed.lock();
            match managed.get_mut(gvk) {
                Some(w) => {
                    w.users.insert(owner.to_string());
                    w.view.clone()
                }
                None => {
                    let w = self.start_managed(gvk, ar, owner);
                    let view = w.view.clone();
                    managed.insert(gvk.clone(), w);
                    view
                }
            }
        };
        // A kind enoki may not list or watch (the default install grants list/watch of the
        // common kinds only, never Secrets): no wait, callers read with GETs.
        let forbidden = view.forbidden.clone();
        if forbidden.load(Ordering::Relaxed) {
            return None;
        }
        let mut ready = view.synced.ready.clone();
        tokio::time::timeout(
            FIRST_LIST,
            ready.wait_for(|r| *r || forbidden.load(Ordering::Relaxed)),
        )
        .await
        .ok()?
        .ok()?;
        if forbidden.load(Ordering::Relaxed) {
            return None;
        }
        Some(view)
    }

    /// Records the Composition that owns the objects labelled with its UID.
    pub fn own(&self, comp: &Composition) {
        if let Some(uid) = comp.uid() {
            self.owners
                .lock()
                .entry(uid)
                .or_insert_with(|| ObjectRef::from_obj(comp));
        }
    }

    /// Whether the watches wake `comp` for every change: a pass of it registered it, and no
    /// input kind is one enoki may not watch (such inputs are read with GETs, and only a
    /// full pass sees them change).
    pub fn knows(&self, comp: &Composition) -> bool {
        !self
            .forbidden_inputs
            .lock()
            .values()
            .any(|at| at.elapsed() < FORBIDDEN_RETRY)
            && comp
                .metadata
                .uid
                .as_deref()
                .is_some_and(|uid| self.owners.lock().contains_key(uid))
    }

    /// Forgets everything about a Composition that is gone: what it read, that it owns
    /// objects, and every watch only it needed (those stop).
    pub fn forget(&self, comp: &ObjectRef<Composition>, uid: Option<&str>) {
        // Whole objects only it read are dropped by the next sweep (`retain_readers`).
        self.drop_compositions(|| Gone::One(comp, uid));
    }

    /// Forgets the Compositions `gone` names — by reference in the readers, by UID in the
    /// watches' users and the owners — and stops the watches left with no user (a watch's
    /// task is aborted when it is dropped). `gone` is called while the five maps are held, so
    /// nothing is recorded between its answer and the pruning.
    fn drop_compositions<'a>(&self, gone: impl FnOnce() -> Gone<'a>) {
        // No other path holds two of these five at once, nor takes one while it holds a borrow
        // of the shard set or of the Composition store (which the sweep's `gone` reads under
        // them).
        let mut readers = self.readers.lock();
        let mut inputs = self.inputs.lock();
        let mut managed = self.managed.lock();
        let mut foreign = self.foreign.lock();
        let mut owners = self.owners.lock();
        let gone = gone();
        readers.retain(|_, set| {
            gone.drop_from_refs(set);
            !set.is_empty()
        });
        inputs.retain(|_, w| {
            gone.drop_from_uids(&mut w.users);
            !w.users.is_empty()
        });
        managed.retain(|_, w| {
            gone.drop_from_uids(&mut w.users);
            !w.users.is_empty()
        });
        foreign.retain(|_, w| {
            w.users.retain(|uid, _| gone.keeps_uid(uid));
            !w.users.is_empty()
        });
        match &gone {
            Gone::One(_, Some(uid)) => {
                owners.remove(*uid);
            }
            Gone::One(_, None) => {}
            Gone::NotLive(_, uids) => owners.retain(|uid, _| uids.contains(uid)),
        }
    }

    /// (input kinds, managed kinds and foreign watches, reader entries, owners) — for metrics
    /// and tests.
    pub fn sizes(&self) -> (usize, usize, usize, usize) {
        // One lock at a time: `drop_compositions` holds several at once, in its own order.
        let inputs = self.inputs.lock().len();
        let managed = self.managed.lock().len();
        let managed = managed + self.foreign.lock().len();
        let readers = self.readers.lock().len();
        let owners = self.owners.lock().len();
        (inputs, managed, readers, owners)
    }

    /// Calls `f` with the owner UID of each managed object in the metadata caches (only
    /// these shards').
    pub fn managed_owners(&self, mut f: impl FnMut(Option<&str>)) {
        {
            let m = self.managed.lock();
            for w in m.values() {
                let t = w.view.synced.table.read();
                t.iter().for_each(|(_, _, live)| f(live.owner.as_deref()));
            }
        }
    }

    /// A wake of the fair gate's ticket for `comp` (`fair::FairGate::try_enter`): queues its
    /// reconcile when a turn is kept for it, unless it is gone from `store` (then `false`);
    /// no change of its own, so it does not end its rest.
    pub fn ticket_wake(
        &self,
        comp: ObjectRef<Composition>,
        store: kube::runtime::reflector::Store<Composition>,
    ) -> super::fair::Wake {
        let sender = self.sender.clone();
        Box::new(move || store.get(&comp).is_some() && sender.send(comp).is_ok())
    }

    /// Queues a reconcile of `comp`.
    pub fn wake(&self, comp: ObjectRef<Composition>) {
        self.rest.woke(&comp);
        let _ = self.sender.send(comp);
    }

    fn fire_owner(&self, uid: &str) {
        let owner = self.owners.lock().get(uid).cloned();
        if let Some(r) = owner {
            self.rest.woke(&r);
            let _ = self.sender.send(r);
        }
    }

    fn fire_readers(&self, group: &str, kind: &str, namespace: &str, name: &str) {
        let keys = [(namespace, name), (namespace, "*"), ("", "*")];
        let refs: Vec<ObjectRef<Composition>> = {
            let readers = self.readers.lock();
            keys.iter()
                .filter_map(|(ns, n)| {
                    readers.get(&(
                        group.to_string(),
                        kind.to_string(),
                        ns.to_string(),
                        n.to_string(),
                    ))
                })
                .flat_map(|readers| readers.keys())
                .cloned()
                .collect()
        };
        for r in refs {
            self.rest.woke(&r);
            let _ = self.sender.send(r);
        }
    }
}

/// Which Compositions [`Watches::drop_compositions`] forgets.
enum Gone<'a> {
    /// One Composition, by reference and (when it has one) UID: removed by key.
    One(&'a ObjectRef<Composition>, Option<&'a str>),
    /// Every Composition not in this live set (and not among these UIDs).
    NotLive(HashSet<ObjectRef<Composition>>, HashSet<String>),
}

impl Gone<'_> {
    fn drop_from_refs(&self, set: &mut Readers) {
        match self {
            Gone::One(comp, _) => {
                set.remove(*comp);
            }
            Gone::NotLive(live, _) => set.retain(|c, _| live.contains(c)),
        }
    }

    /// Whether the Composition of `uid` is not among those forgotten.
    fn keeps_uid(&self, uid: &str) -> bool {
        match self {
            Gone::One(_, Some(gone)) => *gone != uid,
            Gone::One(_, None) => true,
            Gone::NotLive(_, uids) => uids.contains(uid),
        }
    }

    fn drop_from_uids(&self, users: &mut HashSet<String>) {
        match self {
            Gone::One(_, Some(uid)) => {
                users.remove(*uid);
            }
            Gone::One(_, None) => {}
            Gone::NotLive(_, uids) => users.retain(|u| uids.contains(u)),
        }
    }
}
