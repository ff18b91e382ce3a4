//! Wiring of `enoki run`: the client (with enoki's User-Agent), the shared caches, leader
//! election, the controllers, and shutdown.
//!
//! Compositions are watched through a reflector whose events pass a predicate (generation,
//! labels, annotations, finalizers, deletion): enoki's own status patches do not wake a
//! Composition again. ResourceSlices are watched the same way (spec changes and deletions
//! only). SIGTERM/SIGINT stop the controllers gracefully; if in-flight work does not finish
//! within `--shutdown-grace`, the process exits anyway.

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
use super::policy::error_policy;
use super::ratelimit::Bucket;
use super::shard::{Shard, Shards, fixed};
use super::watches::Watches;
use super::{Options, composition, instances, metrics, symphony};
use crds::{Composition, ResourceSlice};

mod balance;
mod expect;
mod lease;
mod rerender;
pub(crate) mod shards;
mod shared;
mod sizes;
use lease::{Leadership, keep_fence, lead};
use shards::*;
use shared::Shared;
pub use sizes::limit_allocator_arenas;
use sizes::streams_initial_events;

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
    limit: Option<&Arc<Bucket>>,
) -> anyhow::Result<(Client, kube::Config)> {
    let ua = match identity {
        Some(id) => format!("{} ({id})", user_agent()),
        None => user_agent(),
    };
    config
        .headers
        .push((http::header::USER_AGENT, http::HeaderValue::from_str(&ua)?));
    Ok((build_client(config.clone(), fence, limit)?, config))
}

/// The client configuration of `--kubeconfig` and `--context`, else kubectl's rules
/// (`$KUBECONFIG`, `~/.kube/config`, the in-cluster account). Its `default_namespace` is the
/// context's namespace (`default` when it names none).
///
/// # Errors
/// The kubeconfig cannot be read, or names no such context.
pub async fn cluster_config(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> anyhow::Result<kube::Config> {
    let options = kube::config::KubeConfigOptions {
        context: context.map(String::from),
        ..kube::config::KubeConfigOptions::default()
    };
    Ok(match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("--kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .with_context(|| format!("--kubeconfig {}", path.display()))?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .with_context(|| format!("--context {}", context.unwrap_or_default()))?,
        None => kube::Config::infer().await?,
    })
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
    let config = cluster_config(
        opts.cluster.kubeconfig.as_deref(),
        opts.cluster.context.as_deref(),
    )
    .await?;
    let limit = Bucket::new(opts.cluster.qps, opts.cluster.burst);
    let (client, config) = client_of(config, identity, fence, limit.as_ref())?;
    let management = Cluster::new(
        client,
        config,
        fence.cloned(),
        limit,
        opts.synthesis.capabilities_refresh,
    );
    let target = match &opts.cluster.remote_kubeconfig {
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
            let limit = Bucket::new(opts.cluster.remote_qps, opts.cluster.remote_burst);
            let (client, config) = client_of(config, identity, fence, limit.as_ref())?;
            Cluster::new(
                client,
                config,
                fence.cloned(),
                limit,
                opts.synthesis.capabilities_refresh,
            )
        }
    };
    Ok((management, target))
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
    tracing::info!(server = %version.git_version, namespace = ?opts.scope.namespace, user_agent = %user_agent(), %identity, shards = opts.shards, "enoki controller starting");
    if opts.apply.migrating_field_managers.is_empty() != opts.apply.migrating_fields.is_empty() {
        // As in Eno, nothing migrates unless both are set.
        tracing::warn!(managers = ?opts.apply.migrating_field_managers, fields = ?opts.apply.migrating_fields,
            "--migrating-field-managers and --migrating-fields work together: with one of them only, no field ownership is migrated");
    }
    if opts.cluster.remote_kubeconfig.is_some() {
        let remote = target.client.apiserver_version().await?;
        tracing::info!(server = %remote.git_version, "emitted objects go to the remote cluster");
    }
    let host = Arc::new(opts.sandbox.host(
        opts.modules.module_cache_dir.as_deref(),
        opts.synthesis.max_concurrent_syntheses,
    )?);
    host.set_module_cache_bytes(opts.modules.module_cache_bytes);
    host.set_module_disk_cache_bytes(opts.modules.module_cache_dir_bytes);
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = metrics::Metrics::register(&mut registry);
    metrics.shards_configured.set(i64::from(opts.shards));
    let ready = Arc::new(AtomicBool::new(false));
    let slots = super::sandbox::Slots::new(opts.synthesis.max_concurrent_syntheses);
    let reachable = probe_api_servers(
        &management,
        &target,
        opts.cluster.remote_kubeconfig.is_some(),
    );
    if let Some(addr) = opts.metrics_addr {
        metrics::serve(addr, registry, ready.clone(), reachable, slots.clone()).await?;
    }
    // The keys that seal Secrets in slices: loaded (or created) in the background, so a
    // standby whose writes wait for the Lease is not held up; a first load is awaited briefly.
    let slice_keys = Arc::new(super::sealing::SliceKeys::default());
    let keeper = tokio::spawn(super::sealing::keep(
        management.client.clone(),
        opts.storage.slice_key_secret.clone(),
        slice_keys.clone(),
    ));
    let _ = tokio::time::timeout(Duration::from_secs(5), slice_keys.loaded()).await;
    let shutdown = shutdown_signal(opts.shutdown_grace).shared();
    let opts_shards = opts.shards;
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
        in_flight: super::shard::InFlight::new(opts_shards),
        slice_keys,
    });
    let result = compete_for_shards(shared, ready, shutdown).await;
    keeper.abort();
    result
}

/// Runs the controllers until shutdown or until a Lease is lost: unsharded, under the Lease
/// `enoki-controller` (with leader election); with `--shards`, for the shards whose Leases
/// this replica holds ([`balance`]).
async fn compete_for_shards(
    shared: Arc<Shared>,
    ready: Arc<AtomicBool>,
    shutdown: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) -> anyhow::Result<()> {
    // A replica that waits for a Lease (or holds no shard) is a ready standby: it can take over
    // at once, and a rolling upgrade (which waits for each new replica to be Ready) proceeds.
    ready.store(true, Ordering::Relaxed);
    let result = if shared.opts.shards > 1 {
        balance::serve_sharded(&shared, shutdown).await
    } else {
        serve_unsharded(&shared, shutdown).await
    };
    ready.store(false, Ordering::Relaxed);
    if result.is_ok() {
        tracing::info!("enoki controller stopped");
    }
    result
}

/// One stack for every Composition, once the Lease is held (with leader election).
async fn serve_unsharded(
    shared: &Arc<Shared>,
    shutdown: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let shard = Shard { index: 0, count: 1 };
    let client = shared.management.client.clone();
    let leadership = tokio::select! {
        l = lead(&client, &shared.opts, &shared.identity, shard) => l?,
        () = shutdown.clone() => return Ok(()),
    };
    let (leadership, manager) = leadership.unzip();
    keep_fence(shared, shard).await;
    let lost = Arc::new(AtomicBool::new(false));
    let waited = tokio::select! {
        () = balance::wait_for_no_shard_leases(shared) => true,
        () = shutdown.clone() => false,
    };
    // Held here until the stack has stopped and the fence is closed: the Lease is released
    // only then (the receiver in `stop` goes when it resolves).
    let kept = leadership.clone();
    if waited {
        let stop = stop_when(leadership, shutdown, lost.clone(), shared.fence.clone()).shared();
        let label = metrics::ShardLabel {
            shard: shard.label(),
        };
        shared.metrics.shard_held.get_or_create(&label).set(1);
        run_stack(shared, fixed(Shards::ALL), stop).await;
        shared.metrics.shard_held.get_or_create(&label).set(0);
    } else {
        drop(leadership);
    }
    // Nothing still in flight (a detached status write) writes once the Lease is released.
    if let Some(f) = &shared.fence {
        f.lose();
    }
    drop(kept);
    // The receiver went with `stop`: let the manager release the Lease for a standby.
    if let Some(m) = manager {
        let _ = tokio::time::timeout(Duration::from_secs(3), m).await;
    }
    if lost.load(Ordering::Relaxed) {
        anyhow::bail!("lost leadership");
    }
    Ok(())
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
