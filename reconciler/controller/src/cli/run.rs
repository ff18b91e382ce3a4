//! The arguments of `enoki run`: the controller's flags.

use super::*;

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Pretty,
    /// One JSON object per line.
    Json,
}

/// Arguments of `enoki run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Only reconcile Compositions in this namespace (all namespaces when unset).
    #[arg(long, env = "ENOKI_NAMESPACE")]
    pub namespace: Option<String>,
    /// Only reconcile Compositions matching this label selector.
    #[arg(long, env = "ENOKI_LABEL_SELECTOR")]
    pub label_selector: Option<String>,
    /// Write with JSON merge patches from the previous snapshot instead of server-side apply.
    #[arg(long, env = "ENOKI_DISABLE_SSA", default_value_t = false)]
    pub disable_ssa: bool,
    /// Concurrent reconciles (Compositions worked on at once).
    #[arg(long, env = "ENOKI_CONCURRENCY", default_value_t = 4)]
    pub concurrency: usize,
    /// Concurrent writes (and reads of objects the cache cannot answer) within one
    /// Composition's apply pass. 32 matched the best raw server-side-apply concurrency
    /// against a local API server on 2 cores (docs/benchmarks.md).
    #[arg(long, env = "ENOKI_APPLY_CONCURRENCY", default_value_t = 32)]
    pub apply_concurrency: usize,
    /// Syntheses running at once across all Compositions (each holds a wasm store of up to
    /// its Synthesizer's memory limit). Default: the number of CPUs.
    #[arg(long, env = "ENOKI_MAX_CONCURRENT_SYNTHESES")]
    pub max_concurrent_syntheses: Option<usize>,
    /// Bound of the in-memory cache of compiled modules, in MiB of module source (least
    /// recently used modules are dropped first).
    #[arg(long, env = "ENOKI_MODULE_CACHE_MIB", default_value_t = 256)]
    pub module_cache_mib: usize,
    /// Bound of the cache of ingested syntheses (parsed manifests, compiled CEL, ordering),
    /// in resources, every KiB of manifests counting as one more (5,000: about 5 MiB of
    /// manifests); the least recently used Compositions, and any synthesis weighing more than
    /// the cache, are ingested again from their ResourceSlices when next reconciled. With
    /// `--shards` it bounds the fleet: a replica keeps the share its shards are of all (2 of
    /// 4: half).
    #[arg(long, env = "ENOKI_PLAN_CACHE_RESOURCES", default_value_t = 5_000)]
    pub plan_cache_resources: usize,
    /// After SIGTERM, how long in-flight reconciles may run before the process exits
    /// (humantime; keep it below the pod's terminationGracePeriodSeconds).
    #[arg(long, env = "ENOKI_SHUTDOWN_GRACE", default_value = "10s")]
    pub shutdown_grace: String,
    /// How soon to look again while a resource is not ready (humantime).
    #[arg(long, env = "ENOKI_READINESS_POLL", default_value = "5s")]
    pub readiness_poll: String,
    /// Minimum time between two deferred syntheses — caused only by a Synthesizer change or by
    /// `defer: true` inputs — across all Compositions (humantime; Eno's default): a bad module
    /// rolls out one Composition at a time. Persisted in the Compositions' status, so a restart
    /// keeps the pace.
    #[arg(long, env = "ENOKI_ROLLOUT_COOLDOWN", default_value = "1m")]
    pub rollout_cooldown: String,
    /// How a new Synthesizer revision reaches its Compositions when its `spec.rollout` names no
    /// strategy: `cooldown` (Eno's pace, no health gate) or `progressive` (health-gated waves).
    #[arg(long, env = "ENOKI_ROLLOUT_STRATEGY", default_value = "cooldown",
          value_parser = ["cooldown", "progressive"])]
    pub rollout_strategy: String,
    /// SynthesizerRevisions kept per Synthesizer when its `spec.rollout` sets no
    /// `revisionHistoryLimit` (a revision a Composition still runs is always kept).
    #[arg(long, env = "ENOKI_REVISION_HISTORY_LIMIT", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub revision_history_limit: u32,
    /// Coordinate Synthesizer rollouts (record revisions, move waves) and follow them. Default:
    /// on for a controller that serves every Composition (no `--namespace`, no
    /// `--label-selector`); one Synthesizer's rollout needs the one controller that sees all its
    /// Compositions.
    #[arg(long, env = "ENOKI_ROLLOUTS")]
    pub rollouts: Option<bool>,
    /// Reconcile Eno's own objects as they are: `eno.azure.io/v1` Synthesizers, Compositions
    /// and Symphonies (Eno's CRDs must be installed), each through an `enoki.dev` mirror of the
    /// same name, with status written back in Eno's shape (docs/from-eno.md).
    #[arg(long, env = "ENOKI_SERVE_ENO_API", default_value_t = false)]
    pub serve_eno_api: bool,
    /// The shortest `reconcile-interval` honoured (Eno's `--min-reconcile-interval`): a smaller
    /// annotation value is raised to it, and no re-check is scheduled sooner (humantime).
    #[arg(long, env = "ENOKI_MIN_RECONCILE_INTERVAL", default_value = "1s")]
    pub min_reconcile_interval: String,
    /// Field managers whose server-side-apply ownership enoki takes over when it applies an
    /// object they manage (Eno's `--migrating-field-managers`; e.g. `eno` when moving from
    /// Eno), so fields enoki stops emitting are removed instead of staying theirs.
    /// Comma-separated.
    #[arg(long, env = "ENOKI_MIGRATING_FIELD_MANAGERS", value_delimiter = ',')]
    pub migrating_field_managers: Vec<String>,
    /// The fields whose ownership is taken from `--migrating-field-managers` (Eno's
    /// `--migrating-fields`): dot-separated paths (`spec`, `data`, `metadata.labels`), each
    /// with everything under it; the managers keep their other fields. As in Eno, nothing is
    /// migrated unless both flags are set. Comma-separated.
    #[arg(long, env = "ENOKI_MIGRATING_FIELDS", value_delimiter = ',')]
    pub migrating_fields: Vec<String>,
    /// Resources fail open unless they say otherwise (Eno's `--fail-open`): a failed write is
    /// reported reconciled, and ready when the resource has no readiness checks. A resource's
    /// own `fail-open: "false"` (or `"true"`) wins.
    #[arg(long, env = "ENOKI_FAIL_OPEN")]
    pub fail_open: bool,
    /// Only resources this CEL expression is true for are reconciled (Eno's
    /// `--resource-filter`): `self` is the manifest as synthesized, `composition` the
    /// Composition's metadata. The others are not applied, not deleted and not waited for;
    /// an expression that fails or is not a bool excludes the resource.
    #[arg(long, env = "ENOKI_RESOURCE_FILTER")]
    pub resource_filter: Option<String>,
    /// Requests per second to the management cluster's API server, across all of enoki's
    /// clients (Eno's `--qps`); 0: no limit.
    #[arg(long, env = "ENOKI_QPS", default_value_t = 0.0)]
    pub qps: f64,
    /// Requests allowed at once above `--qps` (Eno's `--burst`).
    #[arg(long, env = "ENOKI_BURST", default_value_t = 50)]
    pub burst: u32,
    /// `--qps` for the cluster of `--remote-kubeconfig` (Eno's `--remote-qps`); 0: no limit.
    #[arg(long, env = "ENOKI_REMOTE_QPS", default_value_t = 0.0)]
    pub remote_qps: f64,
    /// `--burst` for the cluster of `--remote-kubeconfig`.
    #[arg(long, env = "ENOKI_REMOTE_BURST", default_value_t = 50)]
    pub remote_burst: u32,
    /// The longest one write of a resource may take (apply, patch, create, delete) before it
    /// counts as failed and is retried with backoff (Eno's `--timeout`; humantime).
    #[arg(long, env = "ENOKI_TIMEOUT", default_value = "1m")]
    pub timeout: String,
    /// Safety-net re-check of ready Compositions (humantime): the default reconcile interval.
    /// In-sync resources cost no write (fast path); `reconcile-interval` annotations shorten it.
    #[arg(
        long,
        visible_alias = "default-reconcile-interval",
        env = "ENOKI_RESYNC",
        default_value = "5m"
    )]
    pub resync: String,
    /// How often the target cluster's discovery (served API versions, Kubernetes version) is
    /// read again for Synthesizers given `.Capabilities` (humantime); a change re-renders them.
    #[arg(long, env = "ENOKI_CAPABILITIES_REFRESH", default_value = "1m")]
    pub capabilities_refresh: String,
    /// A Composition not Ready for longer than this counts as stuck
    /// (`enoki_composition_stuck`, the EnokiCompositionStuck alert).
    #[arg(long, env = "ENOKI_STUCK_THRESHOLD", default_value = "15m")]
    pub stuck_threshold: String,
    /// Extra CA certificate (PEM) trusted for `url` and `oci` module sources (a registry or
    /// server with a private CA).
    #[arg(long, env = "ENOKI_MODULE_CA_FILE")]
    pub module_ca_file: Option<PathBuf>,
    /// The module of the built-in `helm` synthesizer (`spec.module.builtin: helm`): a file,
    /// or an OCI reference pinned by digest. The image ships it at the default path; from
    /// source it is `target/samples/helm-chart.wasm` (`hack/build-samples.sh`, then `enoki module
    /// preinit`, as `make test` does).
    #[arg(
        long,
        env = "ENOKI_HELM_MODULE",
        default_value = "/usr/lib/enoki/helm.wasm"
    )]
    pub helm_module: String,
    /// Highest `spec.limits.memory` a Synthesizer may ask for (quantity).
    #[arg(long, env = "ENOKI_MAX_SYNTHESIS_MEMORY", default_value = "512Mi")]
    pub max_synthesis_memory: String,
    /// Highest `spec.limits.timeout` a Synthesizer may ask for (humantime).
    #[arg(long, env = "ENOKI_MAX_SYNTHESIS_TIMEOUT", default_value = "2m")]
    pub max_synthesis_timeout: String,
    /// Highest `spec.limits.output` a Synthesizer may ask for (quantity).
    #[arg(long, env = "ENOKI_MAX_SYNTHESIS_OUTPUT", default_value = "64Mi")]
    pub max_synthesis_output: String,
    /// What one synthesis may emit and store when its Synthesizer sets no
    /// `spec.limits.output` (quantity); a Synthesizer may ask for up to
    /// `--max-synthesis-output`. A larger output is refused (`OutputTooLarge`) before
    /// anything is written.
    #[arg(long, env = "ENOKI_SYNTHESIS_OUTPUT", default_value = "4Mi")]
    pub synthesis_output: String,
    /// `whole` keeps whole ResourceSlices in the controller's cache (the baseline `make bench`
    /// measures the compact cache against); `compact`, the default, their identities only.
    #[arg(long, hide = true, default_value = "compact", value_parser = ["compact", "whole"])]
    pub slice_cache: String,
    /// What one Symphony may make the controller write: its variations times its serialized
    /// spec (quantity; `0`: no bound). A larger one is refused (`InvalidSpec`) and nothing
    /// is generated from it.
    #[arg(long, env = "ENOKI_MAX_SYMPHONY_BYTES", default_value = "8Mi")]
    pub max_symphony_bytes: String,
    /// Bytes of ResourceSlices the Compositions of one namespace may hold together (quantity;
    /// `0`: no bound). A synthesis that would pass it is refused (`OutputTooLarge`).
    #[arg(long, env = "ENOKI_NAMESPACE_SLICE_BUDGET", default_value = "256Mi")]
    pub namespace_slice_budget: String,
    /// Syntheses one Composition may run (`N/s`, `N/m`, `N/h`; `0`: no limit) after a burst
    /// of `--composition-synthesis-burst`; one over it waits, its current synthesis applied.
    #[arg(long, env = "ENOKI_COMPOSITION_SYNTHESIS_RATE", default_value = "6/m")]
    pub composition_synthesis_rate: String,
    /// Syntheses one Composition may run at once before `--composition-synthesis-rate`.
    #[arg(long, env = "ENOKI_COMPOSITION_SYNTHESIS_BURST", default_value_t = 10)]
    pub composition_synthesis_burst: u32,
    /// Syntheses the Compositions of one namespace may run together (`N/s`, `N/m`, `N/h`;
    /// `0`: no limit) after a burst of `--namespace-synthesis-burst`.
    #[arg(long, env = "ENOKI_NAMESPACE_SYNTHESIS_RATE", default_value = "60/m")]
    pub namespace_synthesis_rate: String,
    /// Syntheses a namespace may run at once before `--namespace-synthesis-rate`.
    #[arg(long, env = "ENOKI_NAMESPACE_SYNTHESIS_BURST", default_value_t = 300)]
    pub namespace_synthesis_burst: u32,
    /// Bytes of new ResourceSlices one namespace may write (`1Mi/s`; `0`: no limit) after a
    /// burst of `--namespace-slice-write-burst`: what a loop of syntheses adds to etcd between
    /// two compactions.
    #[arg(
        long,
        env = "ENOKI_NAMESPACE_SLICE_WRITE_RATE",
        default_value = "1Mi/s"
    )]
    pub namespace_slice_write_rate: String,
    /// Bytes of ResourceSlices a namespace may write at once before
    /// `--namespace-slice-write-rate` (quantity).
    #[arg(
        long,
        env = "ENOKI_NAMESPACE_SLICE_WRITE_BURST",
        default_value = "64Mi"
    )]
    pub namespace_slice_write_burst: String,
    /// Sum of the memory limits of the syntheses running at once (quantity): a run waits
    /// until its limit fits. The controller's memory limit should cover about 256Mi of its
    /// own plus this plus --compile-memory-budget (the shipped Deployment: 3Gi).
    #[arg(long, env = "ENOKI_SYNTHESIS_MEMORY_BUDGET", default_value = "512Mi")]
    pub synthesis_memory_budget: String,
    /// Largest module accepted from any source, after gzip decompression (quantity).
    #[arg(long, env = "ENOKI_MAX_MODULE_SIZE", default_value = "128Mi")]
    pub max_module_size: String,
    /// Longest a module download (OCI pull or https URL) may take in all; a registry that
    /// accepts connections and never answers frees the reconcile after this long.
    #[arg(long, env = "ENOKI_MODULE_FETCH_TIMEOUT", default_value = "2m")]
    pub module_fetch_timeout: String,
    /// How long a module's compilation may run: its compile process is killed then and the
    /// reconcile reports `CompileTimeout` (retried with backoff). The background Cranelift
    /// compilation of a large module already running on Winch may take three times as long.
    #[arg(long, env = "ENOKI_COMPILE_TIMEOUT", default_value = "2m")]
    pub compile_timeout: String,
    /// Memory compilations may take together (quantity). Each compiles in a child process
    /// limited to its share: its estimate (about 23x the module's size), at least a quarter of
    /// the budget; one that runs out is retried once with the whole budget, then stopped
    /// (`CompileMemory`). Modules whose estimate exceeds the budget are refused.
    #[arg(long, env = "ENOKI_COMPILE_MEMORY_BUDGET", default_value = "2Gi")]
    pub compile_memory_budget: String,
    /// Impersonate this ServiceAccount (of the Composition's namespace) for every Composition
    /// that sets no `spec.serviceAccountName` (multi-tenant lockdown: no Composition acts as
    /// the controller).
    #[arg(long, env = "ENOKI_DEFAULT_SERVICE_ACCOUNT")]
    pub default_service_account: Option<String>,
    /// Multi-tenant lockdown: a Composition may only reference its own namespace (bindings,
    /// dependsOn, the Synthesizer's refs; no collection namespace selectors), and module
    /// ConfigMaps must be in the controller's namespace (`POD_NAMESPACE`). A violation is a
    /// terminal `CrossNamespaceRef` condition.
    #[arg(long, env = "ENOKI_NO_CROSS_NAMESPACE_REFS", default_value_t = false)]
    pub no_cross_namespace_refs: bool,
    /// Let the `lepton` built-in emit PersistentVolumes for `spec.mounts` (cluster-scoped
    /// storage: off by default, on in the single-tenant overlay `deploy/overlays/single-tenant`). Off, a
    /// LeptonDeployment with mounts gets an `InvalidInput` condition.
    #[arg(long, env = "ENOKI_LEPTON_PERSISTENT_VOLUMES", default_value_t = false)]
    pub lepton_persistent_volumes: bool,
    /// Follow module-download redirects and OCI token realms to loopback, link-local and
    /// private addresses (refused by default).
    #[arg(
        long,
        env = "ENOKI_MODULE_ALLOW_PRIVATE_REDIRECTS",
        default_value_t = false
    )]
    pub module_allow_private_redirects: bool,
    /// Directory for compiled-module artifacts (kept across restarts).
    #[arg(long, env = "ENOKI_MODULE_CACHE_DIR")]
    pub module_cache_dir: Option<PathBuf>,
    /// Bound of the compiled artifacts in `--module-cache-dir`, in MiB (the least recently
    /// used are deleted first; 0: unbounded). Keep it under the volume's size (the chart's
    /// `emptyDir.sizeLimit`).
    #[arg(long, env = "ENOKI_MODULE_CACHE_DIR_MIB", default_value_t = 1024)]
    pub module_cache_dir_mib: u64,
    /// The Secret holding the keys that seal synthesized Secrets in ResourceSlices, as
    /// `NAMESPACE/NAME` (created with a random key when missing; enoki needs `get` and `create`
    /// on Secrets there). Default: `enoki-slice-key` in `--leader-election-namespace`, else
    /// `$POD_NAMESPACE`, else `--namespace`, else `default`.
    #[arg(long, env = "ENOKI_SLICE_KEY_SECRET")]
    pub slice_key_secret: Option<String>,
    /// Log format.
    #[arg(long, env = "ENOKI_LOG_FORMAT", value_enum, default_value = "pretty")]
    pub log_format: LogFormat,
    /// Address for /metrics, /healthz and /readyz (empty to disable).
    #[arg(long, env = "ENOKI_METRICS_ADDR", default_value = "127.0.0.1:8080")]
    pub metrics_addr: String,
    /// Run only while holding the Lease `enoki-controller` in this namespace (leader election,
    /// for several replicas). Off when unset.
    #[arg(long, env = "ENOKI_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Lease duration in seconds; a stopped leader is replaced after about this long.
    #[arg(long, env = "ENOKI_LEASE_DURATION_SECS", default_value_t = 15)]
    pub lease_duration_secs: u64,
    /// Split Compositions into this many shards (at most 64, by UID hash), each with its own
    /// Lease `enoki-controller-shard-<i>-of-<N>`: every replica takes its share of the shards
    /// (N over the live replicas, counted from their membership Leases
    /// `enoki-controller-member-<identity>`; a replica above its share hands shards back)
    /// and serves them with one controller stack that caches only their objects. Needs
    /// `--leader-election-namespace`; change it with every replica stopped.
    #[arg(long, env = "ENOKI_SHARDS", default_value_t = 1)]
    pub shards: u32,
    /// Apply emitted objects to the cluster of this kubeconfig (Eno's flag); Compositions,
    /// Synthesizers, ResourceSlices and inputs stay in the cluster enoki runs against.
    #[arg(long, env = "ENOKI_REMOTE_KUBECONFIG")]
    pub remote_kubeconfig: Option<std::path::PathBuf>,
    /// With `--remote-kubeconfig`: as whom a Composition that acts as a ServiceAccount acts on
    /// the remote cluster, as `MANAGEMENT_NS=REMOTE_NS` pairs (comma-separated): its account
    /// of the same name in REMOTE_NS. A Composition of a namespace not listed is refused
    /// (`RemoteNamespaceUnmapped`): a management namespace's name never decides whose rights
    /// it gets on the remote cluster.
    #[arg(long, env = "ENOKI_REMOTE_NAMESPACE_MAP", value_delimiter = ',')]
    pub remote_namespace_map: Vec<String>,
    /// Built-in synthesizers to install at startup, comma-separated (`trustee`, `quota`,
    /// `lepton`), or `none`.
    #[arg(long, env = "ENOKI_BUILTINS", default_value = "trustee,quota,lepton")]
    pub builtins: String,
    /// Namespace for the implicit Compositions of cluster-scoped instances (instance mode),
    /// e.g. ClusterResourceQuotas. Default `enoki-system`; a `--namespace`-scoped enoki handles
    /// cluster-scoped instances only when this is set.
    #[arg(long, env = "ENOKI_INSTANCE_NAMESPACE")]
    pub instance_namespace: Option<String>,
}
