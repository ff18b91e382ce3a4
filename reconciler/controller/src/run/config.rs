//! The options of `enoki run` as the controller uses them, free of clap (`options.rs` builds
//! them from the command line), grouped by the component that reads them: each component is
//! given its group.

use std::path::PathBuf;
use std::time::Duration;

/// Options of `enoki run`, free of clap.
#[derive(Clone, Debug)]
pub struct Options {
    /// Which Compositions this process reconciles.
    pub scope: ScopeOptions,
    /// The clusters and how fast enoki may talk to them.
    pub cluster: ClusterOptions,
    /// Which account a Composition acts as, and where its references may point.
    pub tenancy: TenancyOptions,
    /// How emitted objects are written and checked.
    pub apply: ApplyOptions,
    /// When and how syntheses run.
    pub synthesis: SynthesisOptions,
    /// Where modules come from and how many are kept compiled.
    pub modules: ModuleOptions,
    /// What enoki stores and keeps in memory, and its bounds.
    pub storage: StorageOptions,
    /// Concurrent reconciles.
    pub concurrency: usize,
    /// Safety-net resync once everything is ready.
    pub resync: Duration,
    /// Where to serve /metrics, /healthz, /readyz (off when `None`).
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Lease-based leader election: (namespace, lease duration); off when `None`.
    pub leader_election: Option<(String, u64)>,
    /// How many shards Compositions are split into (1: none).
    pub shards: u32,
    /// A Composition not Ready for longer than this is stuck (`enoki_composition_stuck`).
    pub stuck_threshold: std::time::Duration,
    /// After SIGTERM, how long in-flight reconciles may take before the process exits.
    pub shutdown_grace: Duration,
    /// Ceilings, memory budget and module ingestion policy.
    pub sandbox: super::sandbox::Sandbox,
}

/// Which Compositions this process reconciles.
#[derive(Clone, Debug)]
pub struct ScopeOptions {
    /// Only this namespace's Compositions (all when `None`).
    pub namespace: Option<String>,
    /// Only Compositions matching this label selector.
    pub label_selector: Option<String>,
    /// Where implicit Compositions of cluster-scoped instances live (instance mode).
    pub instance_namespace: Option<String>,
}

/// The clusters and how fast enoki may talk to them.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// The management cluster's kubeconfig (`--kubeconfig`; `None`: kubectl's rules).
    pub kubeconfig: Option<PathBuf>,
    /// Its context (`--context`; `None`: the current one).
    pub context: Option<String>,
    /// Emitted objects go to the cluster of this kubeconfig (`None`: the management cluster).
    pub remote_kubeconfig: Option<PathBuf>,
    /// `--qps`/`--burst` of the management cluster (0: no limit).
    pub qps: f64,
    /// `--burst`: requests above `qps` allowed at once.
    pub burst: u32,
    /// `--remote-qps`/`--remote-burst` of the `--remote-kubeconfig` cluster.
    pub remote_qps: f64,
    /// `--remote-burst`.
    pub remote_burst: u32,
}

/// Which account a Composition acts as, and where its references may point.
#[derive(Clone, Debug)]
pub struct TenancyOptions {
    /// The ServiceAccount (in each Composition's namespace) impersonated for Compositions that
    /// name none; `None`: they act as the controller.
    pub default_service_account: Option<String>,
    /// Refuse references that leave a Composition's namespace.
    pub no_cross_namespace_refs: bool,
    /// Remote target: management namespace -> the namespace whose ServiceAccount a Composition
    /// acts as there (unlisted namespaces are refused when they impersonate).
    pub remote_namespace_map: std::collections::BTreeMap<String, String>,
    /// The controller's own namespace (module ConfigMaps must live there under
    /// `no_cross_namespace_refs`).
    pub controller_namespace: Option<String>,
}

/// How emitted objects are written and checked.
#[derive(Clone, Debug)]
pub struct ApplyOptions {
    /// Server-side apply or client-side merge patches.
    pub mode: plan::ApplyMode,
    /// Concurrent writes (and GETs) within one Composition's apply pass.
    pub apply_concurrency: usize,
    /// How soon to look again while something is not ready.
    pub readiness_poll: Duration,
    /// The shortest reconcile interval (and re-check delay) honoured.
    pub min_reconcile_interval: Duration,
    /// Field managers whose ownership enoki takes over on apply.
    pub migrating_field_managers: Vec<String>,
    /// The fields taken over from them, as path segments (`metadata.labels` → two).
    pub migrating_fields: Vec<Vec<String>>,
    /// `--fail-open`: the default of resources without their own `fail-open`.
    pub fail_open: bool,
    /// `--resource-filter`: only resources it is true for are reconciled.
    pub resource_filter: Option<plan::expr::Expr>,
    /// The longest one write of a resource may take.
    pub timeout: Duration,
}

/// When and how syntheses run.
#[derive(Clone, Debug)]
pub struct SynthesisOptions {
    /// Syntheses running at once, across all Compositions.
    pub max_concurrent_syntheses: usize,
    /// Syntheses per Composition and per namespace, and bytes of ResourceSlices written per
    /// namespace (`--composition-synthesis-rate`, `--namespace-synthesis-rate`,
    /// `--namespace-slice-write-rate` with their bursts).
    pub synthesis_rates: [super::synthesis_rate::Rate; 3],
    /// Minimum time between two re-syntheses caused only by a Synthesizer change.
    pub rollout_cooldown: Duration,
    /// `--rollout-strategy`: the strategy of Synthesizers whose `spec.rollout` names none.
    pub rollout_strategy: crds::RolloutStrategy,
    /// `--revision-history-limit`: SynthesizerRevisions kept per Synthesizer by default.
    pub revision_history_limit: u32,
    /// `--rollouts`: this controller coordinates rollouts and its Compositions follow them.
    pub rollouts: bool,
    /// `--serve-eno-api`: Eno's `eno.azure.io/v1` objects are reconciled through mirrors.
    pub serve_eno_api: bool,
    /// The `lepton` built-in may emit PersistentVolumes.
    pub lepton_persistent_volumes: bool,
    /// How often discovery is read again for `.Capabilities` (`--capabilities-refresh`).
    pub capabilities_refresh: Duration,
}

/// Where modules come from and how many are kept compiled.
#[derive(Clone, Debug)]
pub struct ModuleOptions {
    /// On-disk cache of compiled modules.
    pub module_cache_dir: Option<PathBuf>,
    /// Bound of the in-memory cache of compiled modules (module source bytes).
    pub module_cache_bytes: usize,
    /// Bound of the compiled artifacts on disk (0: unbounded).
    pub module_cache_dir_bytes: u64,
    /// Extra CA (PEM) trusted for `url` module sources.
    pub module_ca: Option<Vec<u8>>,
    /// The module of the built-in `helm` synthesizer (a file or a pinned OCI reference).
    pub helm_module: Option<String>,
    /// Built-in synthesizers to install at startup (as Synthesizers named after them).
    pub builtins: Vec<String>,
}

/// What enoki stores and keeps in memory, and its bounds.
#[derive(Clone, Debug)]
pub struct StorageOptions {
    /// The Secret (namespace, name) of the keys that seal Secrets in ResourceSlices.
    pub slice_key_secret: (String, String),
    /// Bound of the cache of ingested syntheses, in resources.
    pub plan_cache_resources: usize,
    /// Keep whole ResourceSlices in the cache (a benchmark's baseline; default: compact).
    pub slice_cache_whole: bool,
    /// Variations × spec bytes one Symphony may make the controller write
    /// (`--max-symphony-bytes`; 0: no bound).
    pub max_symphony_bytes: usize,
    /// Bytes of ResourceSlices a namespace may hold (`--namespace-slice-budget`; 0: no bound).
    pub namespace_slice_bytes: usize,
}
