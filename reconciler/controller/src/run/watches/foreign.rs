//! With `--shards`, the managed-object watches leave other shards' objects out at the API
//! server, and a replica watches only the kinds its own Compositions apply. A Composition here
//! may still read a managed object — an input or a Synthesizer by name that a Composition
//! manages (or that does not exist yet: one may create it), a collection, a Patch's target,
//! the Namespaces (a `namespaceSelector`) — and a change to it must wake the
//! reader as it would unsharded. Those reads start a *foreign* watch of the kind in the read's
//! scope (its namespace; every namespace for collections across namespaces and cluster-scoped
//! kinds): metadata only, of every managed object there, whatever its shard. It keeps no table,
//! it only wakes readers (all of its readers when it lists again, so a deletion missed between
//! two lists still wakes them). Each Composition here holds it for the names it needs it for;
//! a name read as an input is let go when a read finds that object unmanaged (the input watch
//! carries it then) — a collection, a Patch's target and the Namespaces are held while the
//! Composition is reconciled here — and the watch stops when no Composition here holds it.
//! At most one runs per kind (and version) and scope: a replica has as many as its Compositions
//! read kinds and namespaces of managed objects, however many objects they read.

use super::*;

impl Watches {
    /// Makes sure a change to the managed object `name` of `gvk` in `scope` (`""`: every
    /// namespace), which `comp` read by name, wakes this replica's readers of it while `comp`
    /// is reconciled here — until a read finds it unmanaged ([`Watches::settled`]). Nothing
    /// unsharded (one watch sees every managed object). Callers skip it when the managed
    /// objects live in another cluster (`--remote-kubeconfig`): no input is one of them.
    pub fn foreign_reads(
        self: &Arc<Self>,
        kind: (&GroupVersionKind, &ApiResource),
        scope: &str,
        name: &str,
        comp: &Composition,
    ) {
        self.hold_foreign(kind, scope, (name, true), comp);
    }

    /// As [`Watches::foreign_reads`], for what `comp` needs while it is reconciled here
    /// whatever a read finds: a collection (`name` `"*"`), a Patch's target, the Namespaces.
    pub fn foreign_holds(
        self: &Arc<Self>,
        kind: (&GroupVersionKind, &ApiResource),
        scope: &str,
        name: &str,
        comp: &Composition,
    ) {
        self.hold_foreign(kind, scope, (name, false), comp);
    }

    fn hold_foreign(
        self: &Arc<Self>,
        (gvk, ar): (&GroupVersionKind, &ApiResource),
        scope: &str,
        (name, read): (&str, bool),
        comp: &Composition,
    ) {
        if !self.sharded() {
            return;
        }
        let uid = comp.uid().unwrap_or_default();
        let key = (gvk.clone(), scope.to_string());
        if self.refused(&key) {
            return;
        }
        let held = (name.to_string(), read);
        let mut foreign = self.foreign.lock();
        if let Some(w) = foreign.get_mut(&key) {
            w.users.entry(uid).or_default().insert(held);
            return;
        }
        let task = self.start_foreign(ar, &key);
        let users = [(uid, [held].into())].into();
        foreign.insert(key, ForeignWatch { task, users });
    }

    /// `comp` read the object `name` and found it unmanaged: the input watch carries its
    /// changes, so `comp` lets go of the foreign watch for it.
    pub fn settled(&self, gvk: &GroupVersionKind, scope: &str, name: &str, comp: &Composition) {
        if !self.sharded() {
            return;
        }
        let key = (gvk.clone(), scope.to_string());
        let uid = comp.uid().unwrap_or_default();
        let mut foreign = self.foreign.lock();
        let Some(w) = foreign.get_mut(&key) else {
            return;
        };
        if let Some(names) = w.users.get_mut(&uid) {
            names.remove(&(name.to_string(), true));
            if names.is_empty() {
                w.users.remove(&uid);
            }
        }
        if w.users.is_empty() {
            foreign.remove(&key);
        }
    }

    /// Whether a GET of an input found what the input watch leaves out — nothing, or an
    /// object enoki manages — so that only a foreign watch hears of its next change for sure
    /// (this replica's managed-object watches see only its shards' objects, and only of the
    /// kinds its Compositions apply).
    pub fn beyond_inputs(got: Option<&DynamicObject>) -> bool {
        got.is_none_or(|o| o.labels().contains_key(managed_label()))
    }

    fn start_foreign(
        self: &Arc<Self>,
        ar: &ApiResource,
        (gvk, scope): &(GroupVersionKind, String),
    ) -> tokio::task::AbortHandle {
        let api: Api<Meta> = if scope.is_empty() {
            Api::all_with(self.client.clone(), ar)
        } else {
            Api::namespaced_with(self.client.clone(), scope, ar)
        };
        // Managed objects whatever their shard: one of this replica's is covered too, whether
        // or not a managed-object watch of the kind runs here.
        let wc = watcher::Config::default().labels(managed_label());
        let events = super::super::recovery::recovering(watcher(api, wc));
        let this = Arc::downgrade(self);
        let (group, kind) = (gvk.group.clone(), gvk.kind.clone());
        let key = (gvk.clone(), scope.clone());
        let task = tokio::spawn(async move {
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                let Some(this) = this.upgrade() else { break };
                let m = match event {
                    Ok(
                        watcher::Event::Apply(m)
                        | watcher::Event::InitApply(m)
                        | watcher::Event::Delete(m),
                    ) => m,
                    Ok(watcher::Event::InitDone) => {
                        this.wake_foreign_readers(&key);
                        continue;
                    }
                    Ok(watcher::Event::Init) => continue,
                    Err(e) if forbidden_watch(&e) => {
                        tracing::debug!(kind = %kind, "enoki may not list/watch this kind: \
                            changes to managed objects of it that are read here are seen at \
                            --resync");
                        // As a refused input watch: no pass is at rest meanwhile
                        // (`Watches::knows`), tried again after FORBIDDEN_RETRY.
                        this.forbidden_inputs
                            .lock()
                            .insert(key.clone(), std::time::Instant::now());
                        this.foreign.lock().remove(&key);
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(kind = %kind, error = %e, "watch of managed objects read here failed; retrying with backoff");
                        continue;
                    }
                };
                let ns = m.namespace().unwrap_or_default();
                this.fire_readers(&group, &kind, &ns, &m.name_any());
            }
        });
        task.abort_handle()
    }

    /// After a (re)list of a foreign watch: wakes the readers of every name it is held for (a
    /// deletion between two lists sends no event).
    fn wake_foreign_readers(&self, key: &(GroupVersionKind, String)) {
        let names: HashSet<String> = {
            let foreign = self.foreign.lock();
            let Some(w) = foreign.get(key) else { return };
            w.users.values().flatten().map(|(n, _)| n.clone()).collect()
        };
        let (gvk, scope) = key;
        for name in names {
            self.fire_readers(&gvk.group, &gvk.kind, scope, &name);
        }
    }
}
