//! The managed-object watch of one kind: its task, what each event wakes.

use super::*;

impl Watches {
    pub(super) fn start_managed(
        self: &Arc<Self>,
        gvk: &GroupVersionKind,
        ar: &ApiResource,
        owner: &str,
    ) -> ManagedWatch {
        let (mut feeder, synced) = Feeder::<Live>::new();
        let view = ManagedView {
            synced,
            forbidden: Arc::new(AtomicBool::new(false)),
        };
        let forbidden = view.forbidden.clone();
        let api: Api<Meta> = Api::all_with(self.target.clone(), ar);
        let shards = self.shards.clone();
        let held = shards.clone();
        // Other shards' objects are left out by the API server (their shard label); each
        // start of the watch selects by the set held then.
        let events = super::super::recovery::relisting(
            move || {
                let wc = watcher::Config::default().labels(&ours(*held.borrow()));
                super::super::recovery::recovering(watcher(api.clone(), wc)).boxed()
            },
            shards.clone(),
            None,
        );
        let this = Arc::downgrade(self);
        let (group, kind) = (gvk.group.clone(), gvk.kind.clone());
        let task = tokio::spawn(async move {
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                let Some(this) = this.upgrade() else { break };
                // Another shard's object: not cached (an entry it had while it was ours is
                // dropped), but readers of it as an input still hear of it. The shard set is
                // copied out first: a borrow in the condition would be held through the body,
                // and the sweep reads it while holding `readers`.
                let held = *shards.borrow();
                if let Ok(e) = &event
                    && let Some((ns, name, apply)) = foreign(held, e)
                {
                    this.foreign_changed(&mut feeder, (&group, &kind), (&ns, &name), apply);
                    continue;
                }
                let relisted = matches!(event, Ok(watcher::Event::InitDone));
                let touched = match event {
                    Ok(e) => apply_event(&mut feeder, e),
                    Err(e) if forbidden_watch(&e) => {
                        tracing::info!(kind = %kind, "enoki may not list/watch this kind: its \
                            managed objects are read with GETs and drift is found at --resync \
                            (grant list/watch with a ClusterRole labelled \
                            enoki.dev/aggregate-to-controller-watch)");
                        forbidden.store(true, Ordering::Relaxed);
                        feeder.unready();
                        // Its objects are read with GETs from now on: no pass is at rest.
                        this.rest.relisted();
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(kind = %kind, error = %e, "managed-object watch failed; retrying with backoff");
                        None
                    }
                };
                if relisted {
                    this.rest.relisted();
                }
                if let Some(t) = touched {
                    this.managed_changed((&group, &kind), &t);
                }
            }
        });
        ManagedWatch {
            view,
            task: task.abort_handle(),
            users: [owner.to_string()].into(),
        }
    }

    /// An event of another shard's object: not cached (an entry it had while it was ours is
    /// dropped; relabelled to another shard's Composition, the owner before hears), but
    /// readers of it as an input still hear of it.
    fn foreign_changed(
        &self,
        feeder: &mut Feeder<Live>,
        (group, kind): (&str, &str),
        (ns, name): (&str, &str),
        apply: bool,
    ) {
        if apply {
            let before = feeder.row(ns, name).and_then(|l| l.owner);
            feeder.remove(ns, name);
            if let Some(uid) = before {
                self.fire_owner(&uid);
            }
        }
        self.fire_readers(group, kind, ns, name);
    }

    /// A change of a managed object wakes its owner (and the owner before, when relabelled)
    /// and its readers; the echo of enoki's own write wakes no owner (its pass recorded it).
    fn managed_changed(&self, (group, kind): (&str, &str), t: &Touched) {
        let key = (group, kind, t.namespace.as_str(), t.name.as_str());
        let echo = t
            .changed_at
            .as_deref()
            .is_some_and(|rv| self.rest.echo(key, rv));
        let [now, before] = &t.owners;
        for uid in [now.as_ref().filter(|_| !echo), before.as_ref()]
            .into_iter()
            .flatten()
        {
            self.fire_owner(uid);
        }
        self.fire_readers(group, kind, &t.namespace, &t.name);
    }
}
