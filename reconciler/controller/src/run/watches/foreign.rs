//! With `--shards`, the managed-object watches leave other shards' objects out at the API
//! server, and a replica watches only the kinds its own Compositions apply. A Composition here
//! may still read a managed object — an input or a Synthesizer by name that a Composition
//! manages (or that does not exist yet: one may create it), a collection, a Patch's target,
//! its Namespace — and a change to it must wake the reader as it would unsharded. Those reads
//! start a *foreign* watch of the kind in the read's namespace (cluster-wide for collections
//! across namespaces and cluster-scoped kinds): metadata only, of every managed object there.
//! It keeps no table, it only wakes readers; it stops when the last Composition here that
//! needed it is gone. Inputs that are not managed are in the input watches and need none.

use super::*;

impl Watches {
    /// Makes sure a change to a managed object of `gvk` in `scope` (`""`: any namespace)
    /// wakes this replica's readers of it while `comp` is reconciled here; nothing unsharded
    /// (one watch sees every managed object). Callers skip it when the managed objects live
    /// in another cluster (`--remote-kubeconfig`): no input is one of them.
    pub fn foreign_reads(
        self: &Arc<Self>,
        gvk: &GroupVersionKind,
        ar: &ApiResource,
        scope: &str,
        comp: &Composition,
    ) {
        if !self.sharded() {
            return;
        }
        let uid = comp.uid().unwrap_or_default();
        let key = (gvk.clone(), scope.to_string());
        let refused = self
            .forbidden_inputs
            .lock()
            .get(&key)
            .is_some_and(|at| at.elapsed() < FORBIDDEN_RETRY);
        if refused {
            return;
        }
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
        // Every managed object of the kind there: one of this replica's shards is covered
        // too, whether or not a managed-object watch of the kind runs here.
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
                    Ok(_) => continue,
                    Err(e) if forbidden_watch(&e) => {
                        tracing::debug!(kind = %kind, "enoki may not list/watch this kind: \
                            changes to other shards' objects of it are seen at --resync");
                        // As a refused input watch: no pass is at rest meanwhile
                        // (`Watches::knows`), tried again after FORBIDDEN_RETRY.
                        this.forbidden_inputs
                            .lock()
                            .insert(key.clone(), std::time::Instant::now());
                        this.foreign.lock().remove(&key);
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(kind = %kind, error = %e, "watch of other shards' managed objects failed; retrying with backoff");
                        continue;
                    }
                };
                this.fire_readers(
                    &group,
                    &kind,
                    &m.namespace().unwrap_or_default(),
                    &m.name_any(),
                );
            }
        });
        task.abort_handle()
    }
}
