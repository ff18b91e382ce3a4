//! Prometheus metrics (prometheus-client, registry passed in) and the HTTP server for
//! `/metrics`, `/healthz` and `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use super::labels::*;

pub mod quota;
pub mod rollout;

/// Every metric of the controller (clones share the same series).
#[derive(Clone)]
pub struct Metrics {
    /// Reconcile durations.
    pub reconcile_duration: Histogram,
    /// Finished reconcile passes per Composition.
    pub composition_reconciles: Family<CompositionLabel, Counter>,
    /// Reconcile errors by category.
    pub reconcile_errors: Family<OutcomeLabel, Counter>,
    /// Syntheses by outcome (`success` or the failure reason).
    pub synthesis_runs: Family<OutcomeLabel, Counter>,
    /// Synthesis durations.
    pub synthesis_duration: Histogram,
    /// Apply operations by op and result.
    pub apply_ops: Family<OutcomeLabel, Counter>,
    /// Resources in current syntheses (last observed).
    pub managed_resources: Gauge,
    /// Peak linear memory of wasm synthesis runs.
    pub wasm_peak_memory: Histogram,
    /// GETs of managed objects (the metadata cache did not suffice).
    pub observe_gets: Counter,
    /// GETs of inputs (the input cache did not have them).
    pub input_gets: Counter,
    /// Resources checked against the cache in apply passes.
    pub resource_checks: Counter,
    /// Passes of Compositions at rest that confirmed from the watches that nothing changed
    /// (see `run::rest`).
    pub passes_at_rest: Counter,
    /// Compositions with remembered state (bounded by the Compositions that exist).
    pub remembered: Gauge,
    /// Bytes the ResourceSlices in the slice cache store (their manifests, in etcd).
    pub slice_stored_bytes: Gauge,
    /// Bytes of manifests the slice cache holds for them (compact: identities only).
    pub slice_held_bytes: Gauge,
    /// Bytes of the allocator's heap the process uses (glibc: allocated chunks and their own
    /// mappings), and bytes in its free chunks (their whole pages given back by the sweep).
    pub heap_in_use_bytes: Gauge,
    pub heap_free_bytes: Gauge,
    /// Kinds with a running watch (inputs + managed objects).
    pub watched_kinds: Gauge,
    /// Objects in the input caches, kept whole (read by a Composition here) or as metadata.
    pub input_cache_objects: Family<KeptLabel, Gauge>,
    /// With `--shards`, input names wanted for a Composition's first read.
    pub input_names_wanted: Gauge,
    /// Module fetch-and-compile attempts by outcome (`Ready` or the failure's kind).
    pub module_fetches: Family<OutcomeLabel, Counter>,
    /// 1 for each shard whose Lease this replica holds (and whose controllers run here).
    pub shard_held: Family<ShardLabel, Gauge>,
    /// Compositions in the cache of each shard held here.
    pub shard_compositions: Family<ShardLabel, Gauge>,
    /// Composition reconciles per shard held here.
    pub shard_reconciles: Family<ShardLabel, Counter>,
    /// Managed objects in the metadata cache of each shard held here.
    pub shard_managed_objects: Family<ShardLabel, Gauge>,
    /// The quota built-in: used / hard per quota (and namespace) and resource, upstream's
    /// `pac_quota_controller_crq_usage` and `pac_quota_controller_crq_total_usage`.
    pub quota: quota::QuotaGauges,
    /// How many shards Compositions are split into (`--shards`).
    pub shards_configured: Gauge,
    /// Per-Composition health series and `enoki_build_info`.
    pub health: super::health::Health,
    /// The work queue (depth, time in queue, in flight) and the process's figures.
    pub queue: std::sync::Arc<super::queue::Queue>,
    /// Synthesizer rollouts.
    pub rollout: rollout::RolloutMetrics,
}

impl Metrics {
    /// Registers every metric in `registry`.
    pub fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            reconcile_duration: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            reconcile_errors: Family::default(),
            composition_reconciles: Family::default(),
            synthesis_runs: Family::default(),
            synthesis_duration: Histogram::new(exponential_buckets(0.0001, 2.0, 18)),
            apply_ops: Family::default(),
            managed_resources: Gauge::default(),
            wasm_peak_memory: Histogram::new(exponential_buckets(65536.0, 2.0, 14)),
            observe_gets: Counter::default(),
            input_gets: Counter::default(),
            resource_checks: Counter::default(),
            passes_at_rest: Counter::default(),
            remembered: Gauge::default(),
            slice_stored_bytes: Gauge::default(),
            slice_held_bytes: Gauge::default(),
            heap_in_use_bytes: Gauge::default(),
            heap_free_bytes: Gauge::default(),
            watched_kinds: Gauge::default(),
            input_cache_objects: Family::default(),
            input_names_wanted: Gauge::default(),
            module_fetches: Family::default(),
            shard_held: Family::default(),
            shard_compositions: Family::default(),
            shard_reconciles: Family::default(),
            shard_managed_objects: Family::default(),
            quota: quota::QuotaGauges::register(registry),
            shards_configured: Gauge::default(),
            health: super::health::Health::register(registry),
            queue: super::queue::Queue::register(registry),
            rollout: rollout::RolloutMetrics::register(registry),
        };
        super::api_metrics::register(registry);
        m.start_at_zero();
        m.register_reconciles(registry);
        m.register_caches(registry);
        m.register_shards(registry);
        m
    }

    /// Reconciles, syntheses and applies.
    fn register_reconciles(&self, registry: &mut Registry) {
        registry.register(
            "enoki_reconcile_duration_seconds",
            "Composition reconcile duration",
            self.reconcile_duration.clone(),
        );
        registry.register(
            "enoki_composition_reconciles",
            "Finished reconcile passes of each Composition (the series goes when the Composition does)",
            self.composition_reconciles.clone(),
        );
        registry.register(
            "enoki_reconcile_errors",
            "Reconcile errors by category",
            self.reconcile_errors.clone(),
        );
        registry.register(
            "enoki_synthesis_runs",
            "Syntheses by outcome",
            self.synthesis_runs.clone(),
        );
        registry.register(
            "enoki_synthesis_duration_seconds",
            "Synthesis duration (module run + parsing)",
            self.synthesis_duration.clone(),
        );
        registry.register(
            "enoki_apply_operations",
            "Apply operations by op and result",
            self.apply_ops.clone(),
        );
        registry.register(
            "enoki_wasm_peak_memory_bytes",
            "Peak linear memory of wasm synthesis runs",
            self.wasm_peak_memory.clone(),
        );
        registry.register(
            "enoki_managed_resources",
            "Resources in the last reconciled synthesis",
            self.managed_resources.clone(),
        );
    }

    /// Module fetches, remembered state, watches and cache use.
    fn register_caches(&self, registry: &mut Registry) {
        registry.register(
            "enoki_module_fetches",
            "Module fetch-and-compile attempts by outcome (failures are retried with backoff)",
            self.module_fetches.clone(),
        );
        registry.register(
            "enoki_remembered_compositions",
            "Compositions with state remembered between reconciles",
            self.remembered.clone(),
        );
        registry.register(
            "enoki_slice_cache_stored_bytes",
            "Bytes of manifests the cached ResourceSlices store in etcd",
            self.slice_stored_bytes.clone(),
        );
        registry.register(
            "enoki_slice_cache_held_bytes",
            "Bytes of manifests the slice cache holds for them (identities only)",
            self.slice_held_bytes.clone(),
        );
        registry.register(
            "enoki_heap_in_use_bytes",
            "Bytes of the allocator's heap in use, at the last sweep (glibc builds)",
            self.heap_in_use_bytes.clone(),
        );
        registry.register(
            "enoki_heap_free_bytes",
            "Bytes in the allocator's free chunks at the last sweep, which gave their whole pages back (glibc builds)",
            self.heap_free_bytes.clone(),
        );
        registry.register(
            "enoki_watched_kinds",
            "Watches running, one per kind (inputs: per kind and namespace; managed objects; with --shards, managed objects read here, per kind and namespace)",
            self.watched_kinds.clone(),
        );
        registry.register(
            "enoki_input_cache_objects",
            "Objects in the input caches (per watch): whole, or metadata only (with --shards, objects no Composition reconciled here reads from the cache); arrived: with --shards, whole copies of objects just created or bound here, waiting for a first read (also counted as metadata)",
            self.input_cache_objects.clone(),
        );
        registry.register(
            "enoki_input_names_wanted",
            "With --shards and whole inputs, input names wanted for a first read (a bound name in each namespace that binds it, and once cluster-scoped), for 5 minutes from the first event that wanted it (until the next 15 s sweep) or until a read of it here: copies of them that arrive are kept for that read",
            self.input_names_wanted.clone(),
        );
        registry.register(
            "enoki_observe_gets",
            "GETs of managed objects in apply passes (the metadata cache did not suffice)",
            self.observe_gets.clone(),
        );
        registry.register(
            "enoki_input_gets",
            "GETs of inputs the input cache did not have",
            self.input_gets.clone(),
        );
        registry.register(
            "enoki_resource_checks",
            "Resources checked in apply passes",
            self.resource_checks.clone(),
        );
        registry.register(
            "enoki_passes_at_rest",
            "Passes of Compositions at rest that found nothing changed since their last full pass (no plan, no request)",
            self.passes_at_rest.clone(),
        );
    }

    /// Per-shard gauges and counters.
    fn register_shards(&self, registry: &mut Registry) {
        registry.register(
            "enoki_shard_managed_objects",
            "Managed objects in the metadata cache of each shard held by this replica",
            self.shard_managed_objects.clone(),
        );
        registry.register(
            "enoki_shards_configured",
            "How many shards Compositions are split into (--shards)",
            self.shards_configured.clone(),
        );
        registry.register(
            "enoki_shard_held",
            "1 for each shard whose Lease this replica holds",
            self.shard_held.clone(),
        );
        registry.register(
            "enoki_shard_compositions",
            "Compositions cached by each shard held by this replica",
            self.shard_compositions.clone(),
        );
        registry.register(
            "enoki_shard_reconciles",
            "Composition reconciles by each shard held by this replica",
            self.shard_reconciles.clone(),
        );
    }

    /// Creates the series of the known outcomes at 0, so they are served (and `rate()` works)
    /// before the first event, as Prometheus advises for label values known in advance.
    fn start_at_zero(&self) {
        let zero = |family: &Family<OutcomeLabel, Counter>, outcome: &str| {
            drop(family.get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            }));
        };
        for category in super::error::Error::CATEGORIES {
            zero(&self.reconcile_errors, category);
        }
        zero(&self.synthesis_runs, "Success");
        zero(&self.module_fetches, "Ready");
        for op in [
            "apply",
            "create",
            "replace",
            "json-patch",
            "merge-patch",
            "delete",
        ] {
            for result in ["ok", "error"] {
                zero(&self.apply_ops, &format!("{op}-{result}"));
            }
        }
    }

    /// Counts one labelled event.
    pub fn count(family: &Family<OutcomeLabel, Counter>, outcome: &str) {
        family
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            })
            .inc();
    }
}

struct ServerState {
    registry: Registry,
    ready: Arc<AtomicBool>,
    api_reachable: Arc<AtomicBool>,
    slots: Arc<super::sandbox::Slots>,
}

/// Serves `/metrics`, `/healthz` (ok unless every synthesis slot is held by a run stuck past
/// its deadline) and `/readyz` (ok once the process has started — the leader and a standby
/// waiting for the Lease alike — and while the API server answers).
///
/// # Errors
/// When the address cannot be bound.
pub async fn serve(
    addr: SocketAddr,
    registry: Registry,
    ready: Arc<AtomicBool>,
    api_reachable: Arc<AtomicBool>,
    slots: Arc<super::sandbox::Slots>,
) -> std::io::Result<()> {
    let state = Arc::new(ServerState {
        registry,
        ready,
        api_reachable,
        slots,
    });
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz");
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    Ok(())
}

async fn metrics(
    State(state): State<Arc<ServerState>>,
) -> (StatusCode, [(&'static str, &'static str); 1], String) {
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &state.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                "content-type",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [("content-type", "text/plain")],
            e.to_string(),
        ),
    }
}

async fn healthz(State(state): State<Arc<ServerState>>) -> (StatusCode, &'static str) {
    if state.slots.all_stuck(std::time::Instant::now()) {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "every synthesis slot is held by a run stuck past its deadline",
        )
    } else {
        (StatusCode::OK, "ok")
    }
}

async fn readyz(State(state): State<Arc<ServerState>>) -> (StatusCode, &'static str) {
    if !state.api_reachable.load(Ordering::Relaxed) {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the API server does not answer",
        )
    } else if state.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: starting or stopping",
        )
    }
}
