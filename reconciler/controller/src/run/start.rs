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

use futures::{FutureExt, StreamExt};
use kube::Client;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

use super::context::{Context, Parts};
use super::watches::Watches;
use super::{Options, composition, error_policy, instances, metrics, symphony};
use crds::{Composition, ResourceSlice};

/// The User-Agent of every request enoki makes.
pub fn user_agent() -> String {
    format!("enoki/{}", env!("CARGO_PKG_VERSION"))
}

pub(crate) async fn client() -> anyhow::Result<(Client, kube::Config)> {
    let mut config = kube::Config::infer().await?;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_str(&user_agent())?,
    ));
    Ok((Client::try_from(config.clone())?, config))
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
) -> anyhow::Result<Option<tokio::sync::watch::Receiver<bool>>> {
    let Some((namespace, duration)) = &opts.leader_election else {
        return Ok(None);
    };
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), "enoki-controller")
        .with_namespace(namespace.clone())
        .with_identity(identity.to_string())
        .with_duration(*duration)
        .with_grace((*duration / 3).max(1))
        .build()
        .await?;
    let (mut rx, task) = manager.watch().await;
    // The manager task lives as long as the process.
    std::mem::forget(task);
    tracing::info!(%identity, lease = %format!("{namespace}/enoki-controller"), "waiting for leadership");
    while !*rx.borrow_and_update() {
        rx.changed().await?;
    }
    tracing::info!(%identity, "acquired leadership");
    Ok(Some(rx))
}

/// Runs the controller until SIGTERM/SIGINT (or until leadership is lost: then an error).
///
/// # Errors
/// When no cluster is reachable or the wasm engine cannot start.
pub async fn run(opts: Options) -> anyhow::Result<()> {
    let (client, base_config) = client().await?;
    let version = client.apiserver_version().await?;
    tracing::info!(server = %version.git_version, namespace = ?opts.namespace, user_agent = %user_agent(), "enoki controller starting");
    let host = Arc::new(wasm_host::Host::new(opts.module_cache_dir.as_deref())?);
    host.set_module_cache_bytes(opts.module_cache_bytes);
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = metrics::Metrics::register(&mut registry);
    let ready = Arc::new(AtomicBool::new(false));
    let slots = super::sandbox::Slots::new(opts.max_concurrent_syntheses);
    if let Some(addr) = opts.metrics_addr {
        metrics::serve(addr, registry, ready.clone(), slots.clone()).await?;
    }
    let shutdown = shutdown_signal(opts.shutdown_grace).shared();
    let identity = format!(
        "{}-{:08x}",
        std::env::var("HOSTNAME").unwrap_or_else(|_| "enoki".into()),
        rand::random::<u32>()
    );
    let leadership = tokio::select! {
        l = lead(&client, &opts, &identity) => l?,
        () = shutdown.clone() => return Ok(()),
    };
    let lost = Arc::new(AtomicBool::new(false));
    let stop = stop_when(leadership, shutdown.clone(), lost.clone()).shared();
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    let watches = Watches::new(client.clone(), sender);
    let changes = futures::stream::unfold(receiver, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    });
    let recorder = kube::runtime::events::Recorder::new(
        client.clone(),
        kube::runtime::events::Reporter {
            controller: "enoki".into(),
            instance: Some(identity.clone()),
        },
    );
    let (comp_reader, comp_stream, slice_reader, slice_stream) = caches(&client, &opts);
    let concurrency = u16::try_from(opts.concurrency.max(1)).unwrap_or(u16::MAX);
    let ctx = Arc::new(Context::new(Parts {
        client,
        base_config,
        host,
        opts,
        watches,
        metrics,
        recorder,
        compositions: comp_reader.clone(),
        slices: slice_reader,
        slots,
    }));
    ready.store(true, Ordering::Relaxed);
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
    ready.store(false, Ordering::Relaxed);
    for t in tasks {
        t.abort();
    }
    if lost.load(Ordering::Relaxed) {
        anyhow::bail!("lost leadership");
    }
    tracing::info!("enoki controller stopped");
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
    let comp_stream = watcher(comps, wc)
        .default_backoff()
        .modify(|c: &mut Composition| c.managed_fields_mut().clear())
        .reflect(comp_writer)
        .applied_objects()
        .predicate_filter(composition_change, Default::default())
        .boxed();
    let (slice_reader, slice_writer) = reflector::store::<ResourceSlice>();
    let slice_stream = slice_changes(
        watcher(slices, watcher::Config::default())
            .default_backoff()
            .modify(|s: &mut ResourceSlice| s.managed_fields_mut().clear())
            .reflect(slice_writer),
    )
    .boxed();
    (comp_reader, comp_stream, slice_reader, slice_stream)
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
                (seen.insert(r, generation) != Some(generation)).then_some(Ok(s))
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

/// The Synthesizer, instance and Symphony controllers, built-ins, and the memory sweep.
async fn background(
    ctx: &Arc<Context>,
    stop: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
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
    // Forget Compositions that disappeared without enoki's finalizer (e.g. while it was down).
    let sweeper = ctx.clone();
    tasks.push(tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(15)).await;
            let n = sweeper.sweep();
            if n > 0 {
                tracing::debug!(forgotten = n, "swept memory of deleted Compositions");
            }
            let (inputs, managed, _, _) = sweeper.watches.sizes();
            let m = &sweeper.metrics;
            m.remembered
                .set(i64::try_from(sweeper.remembered()).unwrap_or(i64::MAX));
            m.watched_kinds
                .set(i64::try_from(inputs + managed).unwrap_or(i64::MAX));
        }
    }));
    tasks
}
