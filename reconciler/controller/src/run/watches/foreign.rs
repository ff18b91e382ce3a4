//! With `--shards`, the managed-object watches leave other shards' objects out at the API
//! server, and a replica watches only the kinds its own Compositions apply. A Composition here
//! may still read a managed object — an input or a Synthesizer by name that a Composition
//! manages (or that does not exist yet: one may create it), a collection, a Patch's target,
//! its Namespace — and a change to it must wake the reader as it would unsharded. Those reads
//! start a *foreign* watch: of that one object (a field selector on its name) for a read by
//! name, of every managed object of the kind in the scope for a collection; metadata only,
//! managed objects only. It keeps no table, it only wakes readers. A Composition stops
//! needing a by-name watch when a read finds the object and it is not managed (the input
//! watch has it then); a watch stops when no Composition here needs it any more (also when
//! the last one is gone).

use super::*;

impl Watches {
    /// Makes sure a change to the managed object `name` of `gvk` in `scope` (`None`: any
    /// managed object there; `scope` `""`: any namespace) wakes this replica's readers of it
    /// while `comp` is reconciled here; nothing unsharded (one watch sees every managed
    /// object). Callers skip it when the managed objects live in another cluster
    /// (`--remote-kubeconfig`): no input is one of them.
    pub fn foreign_reads(
        self: &Arc<Self>,
        (gvk, ar): (&GroupVersionKind, &ApiResource),
        scope: &str,
        name: Option<&str>,
        comp: &Composition,
    ) {
        if !self.sharded() {
            return;
        }
        let uid = comp.uid().unwrap_or_default();
        let refused = self
            .forbidden_inputs
            .lock()
            .get(&(gvk.clone(), scope.to_string()))
            .is_some_and(|at| at.elapsed() < FORBIDDEN_RETRY);
        if refused {
            return;
        }
        let key = (
            gvk.clone(),
            scope.to_string(),
            name.unwrap_or("").to_string(),
        );
        let mut foreign = self.foreign.lock();
        if let Some(w) = foreign.get_mut(&key) {
            w.users.insert(uid);
            return;
        }
        let task = self.start_foreign(ar, &key);
        foreign.insert(
            key,
            ForeignWatch {
                task,
                users: [uid].into(),
            },
        );
    }

    /// `comp` read the object and found it unmanaged: the input watch carries its changes,
    /// and its by-name foreign watch (if any) no longer needs to run for `comp`.
    pub fn settled(&self, gvk: &GroupVersionKind, scope: &str, name: &str, comp: &Composition) {
        if !self.sharded() || name.is_empty() {
            return;
        }
        let key = (gvk.clone(), scope.to_string(), name.to_string());
        let mut foreign = self.foreign.lock();
        if let Some(w) = foreign.get_mut(&key) {
            w.users.remove(comp.uid().as_deref().unwrap_or_default());
            if w.users.is_empty() {
                foreign.remove(&key);
            }
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
        (gvk, scope, name): &ForeignKey,
    ) -> tokio::task::AbortHandle {
        let api: Api<Meta> = if scope.is_empty() {
            Api::all_with(self.client.clone(), ar)
        } else {
            Api::namespaced_with(self.client.clone(), scope, ar)
        };
        // Managed objects whatever their shard: one of this replica's is covered too, whether
        // or not a managed-object watch of the kind runs here.
        let mut wc = watcher::Config::default().labels(managed_label());
        if !name.is_empty() {
            wc = wc.fields(&format!("metadata.name={name}"));
        }
        let events = super::super::recovery::recovering(watcher(api, wc));
        let this = Arc::downgrade(self);
        let (group, kind) = (gvk.group.clone(), gvk.kind.clone());
        let key = (gvk.clone(), scope.clone(), name.clone());
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
                    Ok(_) => continue,
                    Err(e) if forbidden_watch(&e) => {
                        tracing::debug!(kind = %kind, "enoki may not list/watch this kind: \
                            changes to managed objects of it that are read here are seen at \
                            --resync");
                        // As a refused input watch: no pass is at rest meanwhile
                        // (`Watches::knows`), tried again after FORBIDDEN_RETRY.
                        this.forbidden_inputs
                            .lock()
                            .insert((key.0.clone(), key.1.clone()), std::time::Instant::now());
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
}
