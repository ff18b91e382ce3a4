//! The controller stack of a replica: the Composition, slice and managed-object caches
//! filtered to the shards it serves, its controllers, and the cluster-wide background work
//! of the holder of shard 0.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use super::super::recovery::{self, recovering, relisting};
use super::super::shard::{Held, Listing, Shards};
use super::*;

/// Runs the controllers of the shards `held` (a set that may grow) until `stop` resolves.
pub(super) async fn run_stack(
    shared: &Shared,
    shards: Held,
    stop: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) {
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    let wake = sender.clone();
    let client = shared.management.client.clone();
    let watches = Watches::new(
        client.clone(),
        shared.target.client.clone(),
        sender,
        shards.clone(),
        shared.opts.tenancy.default_service_account.is_none(),
    );
    let queue = shared.metrics.queue.clone();
    let changes = futures::stream::unfold(receiver, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    })
    .inspect(move |r: &ObjectRef<Composition>| {
        queue.seen(format!(
            "{}/{}",
            r.namespace.as_deref().unwrap_or_default(),
            r.name
        ));
    });
    let reporter = kube::runtime::events::Reporter {
        controller: "enoki".into(),
        instance: Some(shared.identity.clone()),
    };
    let streams = streams_initial_events(&slices_api(&client, &shared.opts.scope)).await;
    let (comp_reader, comp_stream, slice_reader, slice_stream) =
        caches(&client, &shared.opts, &shards, wake, streams);
    let comp_stream = seen_by_queue(comp_stream, shared.metrics.queue.clone());
    // With --shards, the inputs a changed Composition binds are kept whole for its first read.
    let no_cross = shared.opts.tenancy.no_cross_namespace_refs;
    let comp_stream = expect::first_reads(comp_stream, watches.clone(), no_cross);
    let ctx = Arc::new(Context::new(Parts {
        management: shared.management.clone(),
        target: shared.target.clone(),
        host: shared.host.clone(),
        opts: shared.opts.clone(),
        watches,
        metrics: shared.metrics.clone(),
        reporter,
        compositions: comp_reader.clone(),
        slices: slice_reader,
        slots: shared.slots.clone(),
        synthesis_slots: shared.limits.0.clone(),
        memory_budget: shared.limits.1.clone(),
        shards,
        in_flight: shared.in_flight.clone(),
        slice_keys: shared.slice_keys.clone(),
    }));
    let mut tasks = background(&ctx, stop.clone()).await;
    tasks.extend(super::super::fair::FairGate::keep(
        &ctx.limits.fair,
        stop.clone(),
    ));
    Controller::for_stream(comp_stream, comp_reader)
        .trigger_backoff(recovery::backoff())
        .owns_stream(slice_stream)
        // Unbounded here: a reconcile runs only with a turn of the fair gate (`--concurrency`
        // turns shared between namespaces); without one it leaves a ticket and ends.
        .with_config(kube::runtime::controller::Config::default().concurrency(0))
        .reconcile_on(changes)
        .graceful_shutdown_on(stop)
        .run(composition::reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "reconcile failed");
            }
        })
        .await;
    for t in tasks {
        t.abort();
    }
}

/// The Composition events, each counted as seen by the queue metrics.
fn seen_by_queue(
    events: Events<Composition>,
    queue: Arc<super::super::queue::Queue>,
) -> Events<Composition> {
    events
        .inspect(move |c| {
            if let Ok(c) = c {
                queue.seen(format!(
                    "{}/{}",
                    c.namespace().unwrap_or_default(),
                    c.name_any()
                ));
            }
        })
        .boxed()
}

/// Resolves when leadership is lost (recorded in `lost`) or shutdown was requested.
pub(super) async fn stop_when(
    leadership: Option<tokio::sync::watch::Receiver<bool>>,
    shutdown: impl std::future::Future<Output = ()>,
    lost: Arc<AtomicBool>,
    fence: Option<Arc<Fence>>,
) {
    let lost_leadership = async move {
        match leadership {
            Some(mut rx) => loop {
                if rx.changed().await.is_err() || !*rx.borrow() {
                    lost.store(true, Ordering::Relaxed);
                    if let Some(f) = &fence {
                        f.lose();
                    }
                    tracing::warn!("lost leadership; stopping");
                    break;
                }
            },
            None => futures::future::pending::<()>().await,
        }
    };
    tokio::select! { () = lost_leadership => {}, () = shutdown => {} }
}

pub(crate) type Events<K> = futures::stream::BoxStream<'static, Result<K, watcher::Error>>;

/// The Composition and ResourceSlice caches, and the event streams that wake reconciles.
pub(crate) fn caches(
    client: &Client,
    opts: &Options,
    shards: &Held,
    wake: tokio::sync::mpsc::UnboundedSender<ObjectRef<Composition>>,
    streams: bool,
) -> (
    reflector::Store<Composition>,
    Events<Composition>,
    reflector::Store<ResourceSlice>,
    Events<ResourceSlice>,
) {
    let comps: Api<Composition> = match &opts.scope.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let slices = slices_api(client, &opts.scope);
    // Pages of 100: a Composition is up to etcd's object size (1.5 MiB), read whole.
    let mut wc = watcher::Config::default().page_size(COMPOSITION_PAGE);
    if let Some(sel) = &opts.scope.label_selector {
        wc = wc.labels(sel);
    }
    let (comp_reader, comp_writer) = reflector::store::<Composition>();
    let held = shards.clone();
    let listing_for = Arc::new(parking_lot::Mutex::new(Listing::of(*shards.borrow())));
    let comp_stream = in_shard(
        relisting(
            move || recovering(watcher(comps.clone(), wc.clone())).boxed(),
            shards.clone(),
            Some(listing_for.clone()),
        ),
        move |c| held.borrow().owns(c),
    )
    .modify(|c: &mut Composition| {
        c.managed_fields_mut().clear();
        crate::synthesis::drop_refused_spec(c);
    })
    .reflect(comp_writer)
    .inspect(added_shards_listed(comp_reader.clone(), listing_for, wake))
    .applied_objects()
    .predicate_filter(composition_change, Default::default())
    .boxed();
    let (slice_reader, slice_writer) = reflector::store::<ResourceSlice>();
    let whole = opts.storage.slice_cache_whole;
    let held = shards.clone();
    let selecting = shards.clone();
    let slice_stream = slice_changes(
        in_shard(
            relisting(
                // One slice at a time where the server streams lists, else small pages (a
                // slice is up to 512 KiB whole); the API server leaves other shards' out.
                move || {
                    let mut wc = watcher::Config::default()
                        .page_size(SLICE_PAGE)
                        .timeout(SLICE_WATCH_TIMEOUT_SECS);
                    if let Some(sel) = selecting.borrow().ours_selector() {
                        wc = wc.labels(&sel);
                    }
                    let wc = if streams { wc.streaming_lists() } else { wc };
                    recovering(watcher(slices.clone(), wc)).boxed()
                },
                shards.clone(),
                None,
            ),
            move |s| held.borrow().owns_slice(s),
        )
        .modify(move |s: &mut ResourceSlice| crate::run::slices::for_cache(s, whole))
        .reflect(slice_writer),
    )
    .boxed();
    (comp_reader, comp_stream, slice_reader, slice_stream)
}

/// The predicate of Composition events that need a reconcile: anything but status.
fn composition_change(c: &Composition) -> Option<u64> {
    let mut h = DefaultHasher::new();
    c.metadata.generation.hash(&mut h);
    c.labels().hash(&mut h);
    c.annotations().hash(&mut h);
    c.finalizers().hash(&mut h);
    c.metadata.deletion_timestamp.is_some().hash(&mut h);
    Some(h.finish())
}

/// The ResourceSlices of the Compositions this replica may serve.
fn slices_api(client: &Client, opts: &crate::run::ScopeOptions) -> Api<ResourceSlice> {
    match &opts.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// ResourceSlices per page of the slice cache's lists where the server does not stream them
/// (a slice is up to etcd's object size, 1.5 MiB: 24 MiB whole at most at once).
const SLICE_PAGE: u32 = 16;

/// The slice watch's server-side timeout. A streamed first list is one watch: the server
/// ending it before the list is done starts the list again from nothing, and the list of a
/// cluster's every slice may take minutes (200 × 8 MiB: about 280 s here), near the usual
/// 290 s. Ten minutes of list; kube-runtime's client-side idle timeout (this plus 5 s) is
/// what notices a dead connection, so it is not longer.
const SLICE_WATCH_TIMEOUT_SECS: u32 = 600;

/// Compositions per page of their cache's lists.
const COMPOSITION_PAGE: u32 = 100;

/// After the list that follows adding shards (its `InitDone`, once the store holds them):
/// wakes every cached Composition of the added shards. The Controller drops the list's
/// events of objects it cannot find in the store yet, and the list is buffered aside until
/// it is complete, so without this most of a taken-over shard would wait for its next change.
fn added_shards_listed(
    store: reflector::Store<Composition>,
    listing_for: Arc<parking_lot::Mutex<Listing>>,
    wake: tokio::sync::mpsc::UnboundedSender<ObjectRef<Composition>>,
) -> impl FnMut(&Result<watcher::Event<Composition>, watcher::Error>) + Send + 'static {
    let mut listed: Option<Shards> = None;
    move |event| {
        if !matches!(event, Ok(watcher::Event::InitDone)) {
            return;
        }
        // The set this list was started for (a list of an earlier set may end after the
        // set changed: it does not count), and what was held all along since the last one.
        let (now, kept) = {
            let mut l = listing_for.lock();
            let seen = (l.current, l.kept);
            *l = Listing::of(l.current);
            seen
        };
        let Some(listed_before) = listed.replace(now) else {
            return;
        };
        // Shards held through both lists were served all along; the others are new here
        // (or back after a hand-back whose reconciles did nothing).
        let before = listed_before.and(kept);
        if now == before {
            return;
        }
        let mut woken = 0_usize;
        for c in store.state() {
            if now.owns(&c) && !before.owns(&c) {
                woken += 1;
                let _ = wake.send(ObjectRef::from_obj(&*c));
            }
        }
        tracing::info!(shards = %now, compositions = woken, "listed the shards added");
    }
}

/// Watch events of the objects `owns` accepts (the others never reach the cache).
pub(super) fn in_shard<K: Send + 'static>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    owns: impl Fn(&K) -> bool + Send + 'static,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static {
    events.filter(move |e| {
        let keep = match e {
            Ok(
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o),
            ) => owns(o),
            _ => true,
        };
        futures::future::ready(keep)
    })
}

/// A slice's namespace and name (without the version and UID a reference carries: one entry
/// per cached slice is kept).
fn name_of(s: &ResourceSlice) -> ObjectRef<ResourceSlice> {
    ObjectRef::new(&s.name_any()).within(&s.namespace().unwrap_or_default())
}

/// ResourceSlice events that matter to their Composition: a new spec (generation) or a
/// deletion. Status patches (enoki's own) pass through the cache but wake nobody.
pub(super) fn slice_changes(
    events: impl futures::Stream<Item = Result<watcher::Event<ResourceSlice>, watcher::Error>>
    + Send
    + 'static,
) -> impl futures::Stream<Item = Result<ResourceSlice, watcher::Error>> + Send + 'static {
    let mut seen: std::collections::HashMap<ObjectRef<ResourceSlice>, Option<i64>> =
        std::collections::HashMap::new();
    // The slices of a list in progress: once it is done, slices deleted while the watch was
    // away are forgotten.
    let mut listed: Option<std::collections::HashSet<ObjectRef<ResourceSlice>>> = None;
    events.filter_map(move |e| {
        if let Ok(watcher::Event::InitApply(s)) = &e
            && let Some(l) = listed.as_mut()
        {
            l.insert(name_of(s));
        }
        let out = match e {
            Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => {
                let r = name_of(&s);
                let generation = s.meta().generation;
                // A new slice is enoki's own write (the pass that wrote it goes on with it);
                // only a changed spec concerns the owner. Waking the owner on creation would
                // skip its error backoff after a failed status write.
                matches!(seen.insert(r, generation), Some(old) if old != generation)
                    .then_some(Ok(s))
            }
            Ok(watcher::Event::Delete(s)) => {
                seen.remove(&name_of(&s));
                Some(Ok(s))
            }
            Ok(watcher::Event::Init) => {
                listed = Some(std::collections::HashSet::new());
                None
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(l) = listed.take() {
                    seen.retain(|r, _| l.contains(r));
                }
                None
            }
            Err(e) => Some(Err(e)),
        };
        futures::future::ready(out)
    })
}

/// The Synthesizer, instance and Symphony controllers and built-ins (in shard 0 only), and
/// the memory sweep.
pub(super) async fn background(
    ctx: &Arc<Context>,
    stop: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    if ctx.limits.shards.borrow().has_first() {
        cluster_wide(ctx, stop, &mut tasks).await;
    } else {
        // Once shard 0 is added to the set (it only grows while the stack runs).
        let (ctx, mut held) = (ctx.clone(), ctx.limits.shards.clone());
        tasks.push(tokio::spawn(async move {
            if held.wait_for(Shards::has_first).await.is_err() {
                return;
            }
            let mut started = Vec::new();
            cluster_wide(&ctx, stop.clone(), &mut started).await;
            stop.await;
            for t in started {
                t.abort();
            }
        }));
    }
    tasks.push(tokio::spawn(super::rerender::wake_on_capabilities(
        ctx.clone(),
    )));
    // Forget Compositions that disappeared without enoki's finalizer (e.g. while it was down).
    tasks.push(tokio::spawn(sizes::sweep(ctx.clone())));
    tasks
}

/// Work that is not per Composition and runs once per cluster: Synthesizer status,
/// built-ins, instance Compositions, Symphonies.
pub(super) async fn cluster_wide(
    ctx: &Arc<Context>,
    stop: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) {
    // Synthesizer status for every Synthesizer, also those no Composition uses yet. Skipped
    // when scoped to one namespace: Synthesizers are cluster-scoped.
    if ctx.opts.scope.namespace.is_none() {
        let synths: Api<crds::Synthesizer> = Api::all(ctx.clusters.client().clone());
        let controller = recovery::controller(synths, watcher::Config::default());
        tasks.push(tokio::spawn(super::super::rollout::forget_deleted(
            ctx.clone(),
            controller.store(),
            stop.clone(),
        )));
        tasks.push(tokio::spawn(
            controller
                .graceful_shutdown_on(stop.clone())
                .run(
                    super::super::synthesizer::reconcile_synthesizer,
                    super::super::synthesizer::synthesizer_error_policy,
                    ctx.clone(),
                )
                .for_each(|_| async {}),
        ));
    }
    super::super::synthesizer::install_builtins(ctx).await;
    if ctx.opts.synthesis.serve_eno_api {
        super::super::eno::start(ctx, stop.clone(), tasks);
    }
    tasks.push(tokio::spawn(instances::run(ctx.clone())));
    let (syms, generated): (Api<crds::Symphony>, Api<Composition>) = match &ctx.opts.scope.namespace
    {
        Some(ns) => (
            Api::namespaced(ctx.clusters.client().clone(), ns),
            Api::namespaced(ctx.clusters.client().clone(), ns),
        ),
        None => (
            Api::all(ctx.clusters.client().clone()),
            Api::all(ctx.clusters.client().clone()),
        ),
    };
    // The Compositions Symphonies generate, cached: a pass reads them from here (no list),
    // and a change of one wakes its Symphony.
    let (store, writer) = reflector::store::<Composition>();
    let _ = ctx.caches.symphony_compositions.set(store);
    let wc = watcher::Config::default()
        .labels(crds::names::labels::SYMPHONY)
        .page_size(COMPOSITION_PAGE);
    let generated = recovering(watcher(generated, wc))
        .modify(|c: &mut Composition| {
            c.managed_fields_mut()
                .retain(|f| f.manager.as_deref() == Some(crds::names::SYMPHONY_FIELD_MANAGER));
            crate::synthesis::drop_refused_spec(c);
        })
        .reflect(writer)
        .touched_objects();
    tasks.push(tokio::spawn(
        recovery::controller(syms, watcher::Config::default())
            .owns_stream(generated)
            // Bounded like the Composition workers.
            .with_config(
                kube::runtime::controller::Config::default()
                    .concurrency(u16::try_from(ctx.opts.concurrency.max(1)).unwrap_or(u16::MAX)),
            )
            .graceful_shutdown_on(stop)
            .run(
                symphony::reconcile,
                super::super::policy::symphony_error_policy,
                ctx.clone(),
            )
            .for_each(|res| async move {
                if let Err(e) = res {
                    tracing::debug!(error = %e, "symphony reconcile failed");
                }
            }),
    ));
}

#[cfg(test)]
#[path = "shards_tests.rs"]
mod tests;
