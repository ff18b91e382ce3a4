//! Wiring of `enoki run`: the client (with enoki's User-Agent), the shared caches, leader
//! election, the controllers, and shutdown.
//!
//! Compositions are watched through a reflector whose events pass a predicate (generation,
//! labels, annotations, finalizers, deletion): enoki's own status patches do not wake a
//! Composition again. ResourceSlices are watched the same way (spec changes and deletions
//! only). SIGTERM/SIGINT stop the controllers gracefully; if in-flight work does not finish
//! within `--shutdown-grace`, the process exits anyway.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use futures::{FutureExt, StreamExt};
use kube::Client;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

use super::cluster::{Cluster, build_client};
use super::context::{Context, Parts};
use super::fence::Fence;
use super::shard::Shard;
use super::watches::Watches;
use super::{Options, composition, error_policy, instances, metrics, symphony};
use crds::{Composition, ResourceSlice};

/// The User-Agent of every request enoki makes.
pub fn user_agent() -> String {
    format!("enoki/{}", env!("CARGO_PKG_VERSION"))
}

/// A client with enoki's User-Agent (with `identity` as its comment: which replica made a
/// request shows in the API server's audit log).
fn client_of(
    mut config: kube::Config,
    identity: Option<&str>,
    fence: Option<&Arc<Fence>>,
) -> anyhow::Result<(Client, kube::Config)> {
    let ua = match identity {
        Some(id) => format!("{} ({id})", user_agent()),
        None => user_agent(),
    };
    config
        .headers
        .push((http::header::USER_AGENT, http::HeaderValue::from_str(&ua)?));
    Ok((build_client(config.clone(), fence)?, config))
}

/// The management cluster (the ambient kubeconfig or in-cluster config) and the target
/// cluster (`--remote-kubeconfig`, else the same one).
pub(crate) async fn clusters(opts: &Options) -> anyhow::Result<(Arc<Cluster>, Arc<Cluster>)> {
    clusters_as(opts, None, None).await
}

async fn clusters_as(
    opts: &Options,
    identity: Option<&str>,
    fence: Option<&Arc<Fence>>,
) -> anyhow::Result<(Arc<Cluster>, Arc<Cluster>)> {
    let (client, config) = client_of(kube::Config::infer().await?, identity, fence)?;
    let management = Cluster::new(client, config, fence.cloned());
    let target = match &opts.remote_kubeconfig {
        None => management.clone(),
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("--remote-kubeconfig {}", path.display()))?;
            let config = kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .with_context(|| format!("--remote-kubeconfig {}", path.display()))?;
            let (client, config) = client_of(config, identity, fence)?;
            Cluster::new(client, config, fence.cloned())
        }
    };
    Ok((management, target))
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

/// A future that resolves once SIGTERM or SIGINT arrived; it also starts the watchdog that
/// exits the process when the graceful stop takes longer than `grace`.
fn shutdown_signal(
    grace: Duration,
) -> impl std::future::Future<Output = ()> + Send + Sync + 'static {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => futures::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            () = term => {},
        }
        tracing::info!(grace = ?grace, "shutting down");
        let _ = tx.send(true);
        tokio::time::sleep(grace).await;
        tracing::warn!("in-flight work did not finish within the grace period; exiting");
        std::process::exit(0);
    });
    async move {
        let mut rx = rx;
        while !*rx.borrow_and_update() {
            if rx.changed().await.is_err() {
                futures::future::pending::<()>().await;
            }
        }
    }
}

/// Waits for the Lease when leader election is on; the receiver reports losing it.
async fn lead(
    client: &Client,
    opts: &Options,
    identity: &str,
    shard: Shard,
) -> anyhow::Result<Option<tokio::sync::watch::Receiver<bool>>> {
    let Some((namespace, duration)) = &opts.leader_election else {
        return Ok(None);
    };
    let lease = shard.lease_name();
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &lease)
        .with_namespace(namespace.clone())
        .with_identity(identity.to_string())
        .with_duration(*duration)
        .with_grace((*duration / 3).max(1))
        .build()
        .await?;
    let (mut rx, task) = manager.watch().await;
    // The manager task lives as long as the process.
    std::mem::forget(task);
    tracing::info!(%identity, lease = %format!("{namespace}/{lease}"), "waiting for leadership");
    while !*rx.borrow_and_update() {
        rx.changed().await?;
    }
    tracing::info!(%identity, %shard, lease = %format!("{namespace}/{lease}"), "acquired leadership");
    Ok(Some(rx))
}

/// What every shard of the process shares.
struct Shared {
    fence: Option<Arc<Fence>>,
    management: Arc<Cluster>,
    target: Arc<Cluster>,
    host: Arc<wasm_host::Host>,
    opts: Options,
    metrics: metrics::Metrics,
    slots: Arc<super::sandbox::Slots>,
    limits: (Arc<tokio::sync::Semaphore>, super::sandbox::MemoryBudget),
    identity: String,
}

/// Runs the controller until SIGTERM/SIGINT (or until leadership is lost: then an error).
///
/// # Errors
/// When no cluster is reachable or the wasm engine cannot start.
pub async fn run(opts: Options) -> anyhow::Result<()> {
    let identity = format!(
        "{}-{:08x}",
        std::env::var("HOSTNAME").unwrap_or_else(|_| "enoki".into()),
        rand::random::<u32>()
    );
    // With leader election, every write waits for the Leases this process holds to be
    // confirmed (fencing a replica that was paused past its Lease).
    let fence = opts
        .leader_election
        .as_ref()
        .map(|_| Arc::new(Fence::default()));
    let (management, target) = clusters_as(&opts, Some(&identity), fence.as_ref()).await?;
    let version = management.client.apiserver_version().await?;
    tracing::info!(server = %version.git_version, namespace = ?opts.namespace, user_agent = %user_agent(), %identity, shards = opts.shards, "enoki controller starting");
    if opts.remote_kubeconfig.is_some() {
        let remote = target.client.apiserver_version().await?;
        tracing::info!(server = %remote.git_version, "emitted objects go to the remote cluster");
    }
    let host = Arc::new(wasm_host::Host::new(opts.module_cache_dir.as_deref())?);
    host.set_module_cache_bytes(opts.module_cache_bytes);
    host.set_compile_budget(opts.sandbox.compile_memory_budget_bytes);
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = metrics::Metrics::register(&mut registry);
    let ready = Arc::new(AtomicBool::new(false));
    let slots = super::sandbox::Slots::new(opts.max_concurrent_syntheses);
    let reachable = probe_api_servers(&management, &target, opts.remote_kubeconfig.is_some());
    if let Some(addr) = opts.metrics_addr {
        metrics::serve(addr, registry, ready.clone(), reachable, slots.clone()).await?;
    }
    let shutdown = shutdown_signal(opts.shutdown_grace).shared();
    let shared = Arc::new(Shared {
        fence,
        limits: Parts::limits(&opts),
        management,
        target,
        host,
        opts,
        metrics,
        slots,
        identity,
    });
    let count = shared.opts.shards.max(1);
    if count > 1 {
        // A replica holding no shard is a ready standby.
        ready.store(true, Ordering::Relaxed);
    }
    // Spreading shards over replicas: each replica competes at once for one "home" shard
    // (random), and for the others only after one Lease duration per step away from it —
    // plus one more when it already holds a shard by then, so a replica holding nothing gets
    // there first. Any replica can still take any shard (a standby takes over a dead
    // holder's).
    let home = rand::random::<u32>() % count;
    let step = Duration::from_secs(shared.opts.leader_election.as_ref().map_or(0, |l| l.1));
    let held = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let mut shards: futures::stream::FuturesUnordered<_> = (0..count)
        .map(|index| {
            let (shared, shutdown, ready) = (shared.clone(), shutdown.clone(), ready.clone());
            let held = held.clone();
            async move {
                let shard = Shard { index, count };
                let client = shared.management.client.clone();
                let wait = async {
                    if index != home {
                        tokio::time::sleep(step * ((index + count - home) % count)).await;
                        if held.load(Ordering::Relaxed) > 0 {
                            tokio::time::sleep(step).await;
                        }
                    }
                };
                tokio::select! {
                    () = wait => {},
                    () = shutdown.clone() => return Ok(()),
                }
                let leadership = tokio::select! {
                    l = lead(&client, &shared.opts, &shared.identity, shard) => l?,
                    () = shutdown.clone() => return Ok(()),
                };
                if let (Some(fence), Some((ns, secs))) =
                    (&shared.fence, &shared.opts.leader_election)
                {
                    fence
                        .keep(
                            Api::namespaced(client.clone(), ns),
                            shard.lease_name(),
                            shared.identity.clone(),
                            Duration::from_secs(*secs),
                        )
                        .await;
                }
                ready.store(true, Ordering::Relaxed);
                held.fetch_add(1, Ordering::Relaxed);
                let result = run_shard(&shared, shard, leadership, shutdown).await;
                held.fetch_sub(1, Ordering::Relaxed);
                result
            }
        })
        .collect();
    let mut result = Ok(());
    while let Some(r) = shards.next().await {
        if let Err(e) = r {
            // One shard lost (or failed): stop everything; the restarted process competes
            // for the Leases again.
            result = Err(e);
            break;
        }
    }
    drop(shards);
    ready.store(false, Ordering::Relaxed);
    if result.is_ok() {
        tracing::info!("enoki controller stopped");
    }
    result
}

/// Whether the API server(s) answer and are ready (etcd included), probed every 5 s (for `/readyz`; watches and
/// reconciles retry on their own with backoff while they do not).
fn probe_api_servers(
    management: &Arc<Cluster>,
    target: &Arc<Cluster>,
    remote: bool,
) -> Arc<AtomicBool> {
    let reachable = Arc::new(AtomicBool::new(true));
    let mut clients = vec![management.client.clone()];
    if remote {
        clients.push(target.client.clone());
    }
    let flag = reachable.clone();
    tokio::spawn(async move {
        loop {
            let mut ok = true;
            for c in &clients {
                // The API server's own /readyz (it includes etcd), readable by everyone.
                let Ok(req) = http::Request::get("/readyz").body(Vec::new()) else {
                    continue;
                };
                let answer = tokio::time::timeout(Duration::from_secs(5), c.request_text(req));
                ok &= matches!(answer.await, Ok(Ok(_)));
            }
            if flag.swap(ok, Ordering::Relaxed) != ok {
                if ok {
                    tracing::info!("the API server answers again");
                } else {
                    tracing::warn!("the API server does not answer; /readyz reports it");
                }
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    });
    reachable
}

/// Runs the controllers of one shard until shutdown or until its Lease is lost (an error).
async fn run_shard(
    shared: &Shared,
    shard: Shard,
    leadership: Option<tokio::sync::watch::Receiver<bool>>,
    shutdown: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let label = metrics::ShardLabel {
        shard: shard.label(),
    };
    shared.metrics.shard_held.get_or_create(&label).set(1);
    let lost = Arc::new(AtomicBool::new(false));
    let stop = stop_when(leadership, shutdown, lost.clone()).shared();
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    let client = shared.management.client.clone();
    let watches = Watches::new(
        client.clone(),
        shared.target.client.clone(),
        sender,
        shard,
        shared.opts.default_service_account.is_none(),
    );
    let changes = futures::stream::unfold(receiver, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    });
    let reporter = kube::runtime::events::Reporter {
        controller: "enoki".into(),
        instance: Some(shared.identity.clone()),
    };
    let (comp_reader, comp_stream, slice_reader, slice_stream) =
        caches(&client, &shared.opts, shard);
    let concurrency = u16::try_from(shared.opts.concurrency.max(1)).unwrap_or(u16::MAX);
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
        shard,
    }));
    let tasks = background(&ctx, stop.clone()).await;
    Controller::for_stream(comp_stream, comp_reader)
        .owns_stream(slice_stream)
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
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
    shared.metrics.shard_held.get_or_create(&label).set(0);
    if lost.load(Ordering::Relaxed) {
        anyhow::bail!("lost leadership of shard {shard}");
    }
    Ok(())
}

/// Resolves when leadership is lost (recorded in `lost`) or shutdown was requested.
async fn stop_when(
    leadership: Option<tokio::sync::watch::Receiver<bool>>,
    shutdown: impl std::future::Future<Output = ()>,
    lost: Arc<AtomicBool>,
) {
    let lost_leadership = async move {
        match leadership {
            Some(mut rx) => loop {
                if rx.changed().await.is_err() || !*rx.borrow() {
                    lost.store(true, Ordering::Relaxed);
                    tracing::warn!("lost leadership; stopping");
                    break;
                }
            },
            None => futures::future::pending::<()>().await,
        }
    };
    tokio::select! { () = lost_leadership => {}, () = shutdown => {} }
}

type Events<K> = futures::stream::BoxStream<'static, Result<K, watcher::Error>>;

/// The Composition and ResourceSlice caches, and the event streams that wake reconciles.
fn caches(
    client: &Client,
    opts: &Options,
    shard: Shard,
) -> (
    reflector::Store<Composition>,
    Events<Composition>,
    reflector::Store<ResourceSlice>,
    Events<ResourceSlice>,
) {
    let (comps, slices): (Api<Composition>, Api<ResourceSlice>) = match &opts.namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let mut wc = watcher::Config::default();
    if let Some(sel) = &opts.label_selector {
        wc = wc.labels(sel);
    }
    let (comp_reader, comp_writer) = reflector::store::<Composition>();
    let comp_stream = in_shard(watcher(comps, wc).default_backoff(), move |c| shard.owns(c))
        .modify(|c: &mut Composition| c.managed_fields_mut().clear())
        .reflect(comp_writer)
        .applied_objects()
        .predicate_filter(composition_change, Default::default())
        .boxed();
    let (slice_reader, slice_writer) = reflector::store::<ResourceSlice>();
    let slice_stream = slice_changes(
        in_shard(
            watcher(slices, watcher::Config::default()).default_backoff(),
            move |s| shard.owns_slice(s),
        )
        .modify(|s: &mut ResourceSlice| s.managed_fields_mut().clear())
        .reflect(slice_writer),
    )
    .boxed();
    (comp_reader, comp_stream, slice_reader, slice_stream)
}

/// Watch events of the objects `owns` accepts (the others never reach the cache).
fn in_shard<K: Send + 'static>(
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

/// ResourceSlice events that matter to their Composition: a new spec (generation) or a
/// deletion. Status patches (enoki's own) pass through the cache but wake nobody.
fn slice_changes(
    events: impl futures::Stream<Item = Result<watcher::Event<ResourceSlice>, watcher::Error>>
    + Send
    + 'static,
) -> impl futures::Stream<Item = Result<ResourceSlice, watcher::Error>> + Send + 'static {
    let mut seen: std::collections::HashMap<ObjectRef<ResourceSlice>, Option<i64>> =
        std::collections::HashMap::new();
    events.filter_map(move |e| {
        let out = match e {
            Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => {
                let r = ObjectRef::from_obj(&s);
                let generation = s.meta().generation;
                // A new slice is enoki's own write (the pass that wrote it goes on with it);
                // only a changed spec concerns the owner. Waking the owner on creation would
                // skip its error backoff after a failed status write.
                matches!(seen.insert(r, generation), Some(old) if old != generation)
                    .then_some(Ok(s))
            }
            Ok(watcher::Event::Delete(s)) => {
                seen.remove(&ObjectRef::from_obj(&s));
                Some(Ok(s))
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
            Err(e) => Some(Err(e)),
        };
        futures::future::ready(out)
    })
}

/// The Synthesizer, instance and Symphony controllers and built-ins (in shard 0 only), and
/// the memory sweep.
async fn background(
    ctx: &Arc<Context>,
    stop: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    if ctx.shard.is_first() {
        cluster_wide(ctx, stop, &mut tasks).await;
    }
    // Forget Compositions that disappeared without enoki's finalizer (e.g. while it was down).
    let sweeper = ctx.clone();
    tasks.push(tokio::spawn(async move {
        // Gauges are shared by the shards of the process: each adds its own change.
        let (mut remembered, mut watched) = (0_i64, 0_i64);
        let label = metrics::ShardLabel {
            shard: sweeper.shard.label(),
        };
        loop {
            tokio::time::sleep(Duration::from_secs(15)).await;
            let n = sweeper.sweep();
            if n > 0 {
                tracing::debug!(forgotten = n, "swept memory of deleted Compositions");
            }
            let (inputs, managed, _, _) = sweeper.watches.sizes();
            let m = &sweeper.metrics;
            let now = i64::try_from(sweeper.remembered()).unwrap_or(i64::MAX);
            m.remembered.inc_by(now - remembered);
            remembered = now;
            let now = i64::try_from(inputs + managed).unwrap_or(i64::MAX);
            m.watched_kinds.inc_by(now - watched);
            watched = now;
            let cached = i64::try_from(sweeper.compositions.state().len()).unwrap_or(i64::MAX);
            m.shard_compositions.get_or_create(&label).set(cached);
            let objects = i64::try_from(sweeper.watches.managed_objects()).unwrap_or(i64::MAX);
            m.shard_managed_objects.get_or_create(&label).set(objects);
        }
    }));
    tasks
}

/// Work that is not per Composition and runs once per cluster: Synthesizer status,
/// built-ins, instance Compositions, Symphonies.
async fn cluster_wide(
    ctx: &Arc<Context>,
    stop: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) {
    // Synthesizer status for every Synthesizer, also those no Composition uses yet. Skipped
    // when scoped to one namespace: Synthesizers are cluster-scoped.
    if ctx.opts.namespace.is_none() {
        let synths: Api<crds::Synthesizer> = Api::all(ctx.client.clone());
        tasks.push(tokio::spawn(
            Controller::new(synths, watcher::Config::default())
                .graceful_shutdown_on(stop.clone())
                .run(
                    super::reconcile_synthesizer,
                    super::synthesizer_error_policy,
                    ctx.clone(),
                )
                .for_each(|_| async {}),
        ));
    }
    super::install_builtins(ctx).await;
    tasks.push(tokio::spawn(instances::run(ctx.clone())));
    let (syms, owned): (Api<crds::Symphony>, Api<Composition>) = match &ctx.opts.namespace {
        Some(ns) => (
            Api::namespaced(ctx.client.clone(), ns),
            Api::namespaced(ctx.client.clone(), ns),
        ),
        None => (Api::all(ctx.client.clone()), Api::all(ctx.client.clone())),
    };
    tasks.push(tokio::spawn(
        Controller::new(syms, watcher::Config::default())
            .owns(owned, watcher::Config::default())
            .graceful_shutdown_on(stop)
            .run(
                symphony::reconcile,
                super::symphony_error_policy,
                ctx.clone(),
            )
            .for_each(|res| async move {
                if let Err(e) = res {
                    tracing::debug!(error = %e, "symphony reconcile failed");
                }
            }),
    ));
}
