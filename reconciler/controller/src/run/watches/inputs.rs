//! Input watches: the kinds Compositions read, watched per namespace (metadata only unless
//! inputs are read whole), the objects kept, and the Compositions woken when one changes.

use super::first_reads::Seen;
use super::*;

impl Watches {
    /// Records that `comp` reads the object (or, with name `*`, the collection) and makes sure
    /// its kind is watched.
    pub fn track(
        self: &Arc<Self>,
        gvk: &GroupVersionKind,
        ar: &ApiResource,
        namespace: &str,
        name: &str,
        comp: &Composition,
    ) {
        let key = reader_key(gvk, namespace, name);
        let me = ObjectRef::from_obj(comp);
        self.readers
            .lock()
            .entry(key)
            .or_default()
            .entry(me)
            .or_default();
        let uid = comp.uid().unwrap_or_default();
        // A namespace given: watch that namespace only; "" (cluster-scoped kinds, collections
        // that may span namespaces): the whole cluster. Callers resolve a reference's empty
        // namespace to the Composition's own (`tenancy::ref_namespace`) before they get here.
        let scope = namespace.to_string();
        let mut inputs = self.inputs.lock();
        let watch_key = (gvk.clone(), scope.clone());
        if let Some(w) = inputs.get_mut(&watch_key) {
            w.users.insert(uid);
            return;
        }
        if self.refused(&watch_key) {
            return;
        }
        let (synced, task) = self.start_input_watch(ar, &watch_key);
        inputs.insert(
            watch_key,
            InputWatch {
                synced,
                task,
                users: [uid].into(),
            },
        );
    }

    /// Whether the API server refused a watch of this kind in this scope (403) less than
    /// [`FORBIDDEN_RETRY`] ago.
    pub(super) fn refused(&self, key: &(GroupVersionKind, String)) -> bool {
        self.forbidden_inputs
            .lock()
            .get(key)
            .is_some_and(|at| at.elapsed() < FORBIDDEN_RETRY)
    }

    /// Starts the watch of an input kind in a scope ("" for the whole cluster): its cache
    /// and the task that feeds it, wakes the Compositions that read a changed object, and
    /// gives up on the kind (for [`FORBIDDEN_RETRY`]) when enoki may not list it.
    pub(super) fn start_input_watch(
        self: &Arc<Self>,
        ar: &ApiResource,
        watch_key: &(GroupVersionKind, String),
    ) -> (Synced<Kept>, tokio::task::AbortHandle) {
        let (gvk, scope) = watch_key;
        let forbidden_key = watch_key.clone();
        let (mut feeder, synced) = Feeder::<Kept>::new();
        let api: Api<DynamicObject> = if scope.is_empty() {
            Api::all_with(self.client.clone(), ar)
        } else {
            Api::namespaced_with(self.client.clone(), scope, ar)
        };
        let meta_api: Api<PartialObjectMeta<DynamicObject>> = if scope.is_empty() {
            Api::all_with(self.client.clone(), ar)
        } else {
            Api::namespaced_with(self.client.clone(), scope, ar)
        };
        let wc = watcher::Config::default().labels(&format!("!{}", managed_label()));
        let whole = self.whole(gvk);
        let this = Arc::downgrade(self);
        let (group, kind) = (gvk.group.clone(), gvk.kind.clone());
        // A kind not kept whole (without whole inputs impersonating Compositions read inputs
        // with GETs as their account) is listed and streamed as metadata only: a tenant's
        // large objects of a bound kind are never downloaded by the controller.
        let source: futures::stream::BoxStream<
            'static,
            watcher::Result<watcher::Event<DynamicObject>>,
        > = if whole {
            watcher(api, wc).boxed()
        } else {
            watcher(meta_api, wc).map(|r| r.map(metadata_only)).boxed()
        };
        let keeper = Arc::downgrade(self);
        let kept_as = watch_key.clone();
        let events = super::super::recovery::recovering(source).map_ok(move |event| {
            match keeper.upgrade() {
                Some(this) => this.keep(&kept_as, event),
                None => event,
            }
        });
        let task = tokio::spawn(async move {
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                let Some(this) = this.upgrade() else { break };
                match event {
                    Ok(event) => {
                        let relisted = matches!(event, kube::runtime::watcher::Event::InitDone);
                        let touched = feeder.apply(event);
                        if relisted {
                            this.rest.relisted();
                        }
                        if let Some(o) = touched {
                            this.fire_readers(
                                &group,
                                &kind,
                                &o.namespace().unwrap_or_default(),
                                &o.name_any(),
                            )
                        }
                    }
                    Err(e) if forbidden_watch(&e) => {
                        tracing::debug!(kind = %kind, "enoki may not list/watch this input kind: \
                            changes to it are seen at --resync");
                        // Reads of it go straight to GETs; a later grant is tried again after
                        // FORBIDDEN_RETRY.
                        this.forbidden_inputs
                            .lock()
                            .insert(forbidden_key.clone(), std::time::Instant::now());
                        this.inputs.lock().remove(&forbidden_key);
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(kind = %kind, error = %e, "input watch failed; retrying with backoff")
                    }
                }
            }
        });
        (synced, task.abort_handle())
    }

    /// The cached object, `Some(None)` when the synced cache does not have it, `None` when
    /// the kind is not watched, its first list has not finished within a few seconds, or the
    /// object is not kept whole here (callers then GET it).
    pub async fn input(
        &self,
        gvk: &GroupVersionKind,
        namespace: &str,
        name: &str,
    ) -> Option<Option<Arc<DynamicObject>>> {
        if !self.whole(gvk) {
            return None;
        }
        let mut synced = self.store_of(gvk, namespace)?;
        tokio::time::timeout(FIRST_LIST, synced.ready.wait_for(|r| *r))
            .await
            .ok()?
            .ok()?;
        let row = synced.table.read().get(namespace, name).cloned();
        let stub_version = match row {
            None => return Some(None),
            // Whole in its row (unsharded; sharded, read here).
            Some(Kept::Whole(o)) => {
                if self.sharded() {
                    self.first_read(gvk, namespace, name);
                }
                return Some(Some(o));
            }
            Some(Kept::Version(rv)) => rv?,
        };
        self.take_arrival((gvk, namespace, name), &stub_version)
            .map(Some)
    }

    /// The resourceVersion the input watch last saw of this object (`None` when its kind is
    /// not watched here, or the watch has not seen it): a GET of it at that version is
    /// answered from the API server's watch cache instead of etcd, and is not older than what
    /// woke the reader (a later change wakes it again).
    pub fn seen_version(
        &self,
        gvk: &GroupVersionKind,
        namespace: &str,
        name: &str,
    ) -> Option<String> {
        self.in_table(gvk, namespace, name).flatten()
    }

    /// Records that `comp` reads this object from the input cache (as the controller): with
    /// `--shards`, it is then kept whole here. Called after [`Watches::track`], before
    /// [`Watches::input`].
    pub fn serve(&self, gvk: &GroupVersionKind, namespace: &str, name: &str, comp: &Composition) {
        if !self.sharded() {
            return;
        }
        let key = reader_key(gvk, namespace, name);
        let mut readers = self.readers.lock();
        let versions = readers
            .entry(key)
            .or_default()
            .entry(ObjectRef::from_obj(comp))
            .or_default();
        if !versions.iter().any(|v| **v == *gvk.version) {
            versions.push(self.api_version(&gvk.version));
        }
    }

    /// The one shared copy of an API version's name.
    fn api_version(&self, version: &str) -> Arc<str> {
        let mut versions = self.api_versions.lock();
        if let Some(v) = versions.get(version) {
            return v.clone();
        }
        let v: Arc<str> = version.into();
        versions.insert(v.clone());
        v
    }

    /// Keeps `obj`, just read with a GET as the controller, when its kind is watched and it
    /// is one this replica keeps whole: the next reads cost no request while it does not
    /// change.
    pub fn fetched(
        &self,
        gvk: &GroupVersionKind,
        namespace: &str,
        name: &str,
        obj: &DynamicObject,
    ) {
        if !self.whole(gvk) || !self.sharded() || !self.read_here(gvk, namespace, name) {
            return;
        }
        self.first_read(gvk, namespace, name);
        // Only in place of its stub at the same version: an object the watch leaves out (one
        // enoki manages) or has not listed yet is read with a GET each time, as without the
        // stubs; a newer one than the watch has seen is kept whole when the watch brings it.
        let version = obj.metadata.resource_version.clone();
        if version.is_none() || self.in_table(gvk, namespace, name) != Some(version) {
            return;
        }
        let mut copy = obj.clone();
        copy.managed_fields_mut().clear();
        self.keep_whole(gvk, namespace, name, &Arc::new(copy));
    }

    /// Puts `obj` in its row of the input table in place of its stub, when the stub is of
    /// `obj`'s resourceVersion (a row already whole, or of another version, stays).
    pub(super) fn keep_whole(
        &self,
        gvk: &GroupVersionKind,
        namespace: &str,
        name: &str,
        obj: &Arc<DynamicObject>,
    ) {
        let Some(synced) = self.store_of(gvk, namespace) else {
            return;
        };
        let Some(version) = obj.metadata.resource_version.as_deref() else {
            return;
        };
        let mut t = synced.table.write();
        if let Some(row) = t.get_mut(namespace, name)
            && matches!(row, Kept::Version(Some(v)) if **v == *version)
        {
            *row = Kept::Whole(obj.clone());
        }
    }

    /// What the table of the input watch `(gvk, scope)` gets for `event`: the object, or its
    /// stub (see [`Watches::stub`]).
    pub(super) fn keep(
        &self,
        (gvk, scope): &(GroupVersionKind, String),
        event: watcher::Event<DynamicObject>,
    ) -> watcher::Event<DynamicObject> {
        use watcher::Event;
        let stub = |o, seen| self.stub((gvk, scope), o, seen);
        match event {
            Event::Apply(o) => Event::Apply(stub(o, Seen::Changed)),
            Event::InitApply(o) => Event::InitApply(stub(o, Seen::Listed)),
            Event::Delete(o) => Event::Delete(stub(o, Seen::Deleted)),
            e @ (Event::Init | Event::InitDone) => e,
        }
    }

    /// Whether the input cache of `gvk` keeps whole objects: every kind's with whole inputs;
    /// otherwise only Synthesizers' (the platform's objects, which tenants may not create,
    /// read for each Composition by the controller as itself), so a pass of the default install
    /// does not GET its Synthesizer. What keeps a cached copy from a Composition that
    /// impersonates is not this but its reads: an input read as its account never looks at
    /// the cache (a Synthesizer bound as an input included), it is a GET as that account.
    pub(super) fn whole(&self, gvk: &GroupVersionKind) -> bool {
        self.whole_inputs
            || (gvk.group == crds::GROUP
                && (gvk.kind == crds::names::kinds::SYNTHESIZER
                    || gvk.kind == crds::names::kinds::SYNTHESIZER_REVISION))
    }

    /// What the row of `o` keeps: sharded, its stub, or `o` itself when a Composition here
    /// reads it (else its copy goes among the [`arrivals`](super::arrivals) when it changed or
    /// is wanted); unsharded, `o` itself (whole unless only metadata is watched).
    pub(super) fn stub(
        &self,
        (gvk, scope): (&GroupVersionKind, &str),
        mut o: DynamicObject,
        seen: Seen,
    ) -> DynamicObject {
        if !self.sharded() {
            o.managed_fields_mut().clear();
            if !self.whole(gvk) {
                o.data = serde_json::Value::Null;
            }
            return o;
        }
        let stub = DynamicObject {
            types: o.types.clone(),
            metadata: kube::core::ObjectMeta {
                name: o.metadata.name.clone(),
                namespace: o.metadata.namespace.clone(),
                uid: o.metadata.uid.clone(),
                resource_version: o.metadata.resource_version.clone(),
                ..kube::core::ObjectMeta::default()
            },
            data: serde_json::Value::Null,
        };
        let (namespace, name) = (o.namespace().unwrap_or_default(), o.name_any());
        if !self.whole(gvk) {
            return stub;
        }
        if seen != Seen::Deleted && self.read_here(gvk, &namespace, &name) {
            if !self.read_from(gvk, scope, &namespace) {
                // Read here from the namespace's own watch: kept whole there only.
                return stub;
            }
            // Whole in its row, as unsharded (in the one table reads go to).
            self.arrivals.lock().gone(gvk, &namespace, &name);
            o.managed_fields_mut().clear();
            return o;
        }
        self.arrival(gvk, o, seen);
        stub
    }

    /// Whether reads of `gvk` in `namespace` go to the watch of `scope` (see
    /// [`Watches::store_of`]): a cluster-wide watch's rows serve a namespace that has no
    /// watch of its own.
    fn read_from(&self, gvk: &GroupVersionKind, scope: &str, namespace: &str) -> bool {
        scope == namespace
            || !self
                .inputs
                .lock()
                .contains_key(&(gvk.clone(), namespace.to_string()))
    }

    /// Whether Compositions are split into shards (`--shards` > 1; fixed for the process).
    pub(super) fn sharded(&self) -> bool {
        self.shards.borrow().count() > 1
    }

    /// Whether a Composition reconciled here has read this object from the cache in this
    /// version (and still reads it: it is forgotten when it goes).
    pub(super) fn read_here(&self, gvk: &GroupVersionKind, namespace: &str, name: &str) -> bool {
        let key = reader_key(gvk, namespace, name);
        self.readers.lock().get(&key).is_some_and(|readers| {
            readers
                .values()
                .any(|served| served.iter().any(|v| **v == *gvk.version))
        })
    }

    /// Forgets what Compositions that are not reconciled here any more (deleted while enoki
    /// was down, or of a shard handed to another replica) read and own, stops the watches only
    /// they needed, and turns back into stubs the rows kept whole that nobody here reads.
    /// `live` (the Compositions reconciled here, with their UIDs) is taken while no read, owner
    /// or watch user can be recorded, so a Composition that starts reading meanwhile is in it.
    pub fn retain_readers(&self, live: impl FnOnce() -> HashSet<ObjectRef<Composition>>) {
        self.drop_compositions(|| {
            let live = live();
            let uids = live.iter().filter_map(|c| c.extra.uid.clone()).collect();
            Gone::NotLive(live, uids)
        });
        self.prune_whole();
    }

    /// Turns back into stubs the rows kept whole that no Composition here reads any more
    /// (see [`Watches::retain_readers`]), or that reads do not go to (a cluster-wide watch's,
    /// for a namespace with a watch of its own), and drops the arrivals past their age.
    pub(super) fn prune_whole(&self) {
        self.arrivals.lock().sweep(std::time::Instant::now());
        if !self.sharded() {
            return;
        }
        for ((gvk, scope), synced) in self.input_tables() {
            // No path takes a table's lock while it holds the readers' or the inputs'.
            let mut read_from: HashMap<String, bool> = HashMap::new();
            let unread: Vec<(String, String, Arc<DynamicObject>)> = synced
                .table
                .read()
                .iter()
                .filter_map(|(namespace, name, kept)| match kept {
                    Kept::Whole(o) => Some((namespace, name, o)),
                    Kept::Version(_) => None,
                })
                .filter(|(namespace, name, _)| {
                    let from = *read_from
                        .entry((*namespace).to_string())
                        .or_insert_with(|| self.read_from(&gvk, &scope, namespace));
                    !from || !self.read_here(&gvk, namespace, name)
                })
                .map(|(namespace, name, o)| (namespace.into(), name.into(), o.clone()))
                .collect();
            if unread.is_empty() {
                continue;
            }
            let mut t = synced.table.write();
            for (namespace, name, o) in &unread {
                // Unless the watch replaced it, or a Composition started reading it meanwhile.
                if let Some(row) = t.get_mut(namespace, name)
                    && matches!(row, Kept::Whole(w) if Arc::ptr_eq(w, o))
                    && (!read_from[namespace] || !self.read_here(&gvk, namespace, name))
                {
                    *row = Kept::Version(o.metadata.resource_version.as_deref().map(Into::into));
                }
            }
            // The objects' last copies are dropped after the lock is let go.
            drop(t);
        }
    }

    /// Every input watch's kind and scope, and its table.
    fn input_tables(&self) -> Vec<((GroupVersionKind, String), Synced<Kept>)> {
        self.inputs
            .lock()
            .iter()
            .map(|(key, w)| (key.clone(), w.synced.clone()))
            .collect()
    }

    /// The input table that holds the objects of `gvk` in `namespace` (its namespace's
    /// watch, else the cluster-wide one); `None` when the kind is not watched (callers then
    /// GET).
    pub(super) fn store_of(&self, gvk: &GroupVersionKind, namespace: &str) -> Option<Synced<Kept>> {
        let inputs = self.inputs.lock();
        let w = inputs
            .get(&(gvk.clone(), namespace.to_string()))
            .or_else(|| inputs.get(&(gvk.clone(), String::new())))?;
        Some(w.synced.clone())
    }

    /// Objects in the input caches, per watch: (kept whole, stubs only).
    pub fn input_objects(&self) -> (usize, usize) {
        let (mut whole, mut stubs) = (0, 0);
        for (_, synced) in self.input_tables() {
            for (_, _, kept) in synced.table.read().iter() {
                match kept {
                    Kept::Whole(_) => whole += 1,
                    Kept::Version(_) => stubs += 1,
                }
            }
        }
        (whole, stubs)
    }
}

/// The readers' key of an object read by name.
fn reader_key(gvk: &GroupVersionKind, namespace: &str, name: &str) -> WatchKey {
    (
        gvk.group.clone(),
        gvk.kind.clone(),
        namespace.to_string(),
        name.to_string(),
    )
}
