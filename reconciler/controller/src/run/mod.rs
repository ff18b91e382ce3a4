//! `enoki run`: the kube-runtime shell around synthesis, the planner and the apply executor.
//!
//! Module map (data flows top to bottom):
//!
//! - `start`: wiring — client, watch caches, leader election, the controllers, shutdown.
//! - `watches`: shared reflector caches (managed objects' metadata, inputs) and the
//!   triggers they fire.
//! - `composition`: one reconcile of a Composition — finalizer, observe, trigger (pure),
//!   synthesize, slices, status.
//! - `resources`: one pass over a synthesis's resources — observe (cache first), plan
//!   (pure, `plan` crate), execute, record (pure), roll up (pure).
//! - [`error`]: typed errors (`is_transient`) and the backoff they drive.
//! - `context`: shared state, and everything remembered per Composition (dropped when it
//!   is gone).
//! - [`sandbox`]: ceilings of Synthesizer limits, the memory budget of concurrent runs,
//!   module ingestion policy, stuck-slot detection for `/healthz`.
//! - `inputs`, `instances`, `symphony`, `module`: collections and observed outputs,
//!   instance mode, Symphonies, module sources.

pub mod api_metrics;
pub(crate) mod cluster;
pub(crate) mod composition;
mod condition;
pub(crate) mod context;
pub mod diff;
pub mod error;
pub mod fence;
pub mod health;
mod inputs;
mod instances;
pub mod metrics;
mod module;
pub(crate) mod resources;
pub mod sandbox;
pub mod shard;
pub mod start;
mod symphony;
mod tenancy;
pub mod tree;
pub(crate) mod watches;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use crds::Composition;

pub use context::Context;
pub use error::Error;
pub(crate) use error::kube_err;
pub use inputs::selector_string;
pub use module::ModuleError;
pub use start::run;

/// Options of `enoki run`, free of clap.
#[derive(Clone, Debug)]
pub struct Options {
    /// Only this namespace's Compositions (all when `None`).
    pub namespace: Option<String>,
    /// Only Compositions matching this label selector.
    pub label_selector: Option<String>,
    /// Server-side apply or client-side merge patches.
    pub mode: plan::ApplyMode,
    /// Concurrent reconciles.
    pub concurrency: usize,
    /// Concurrent writes (and GETs) within one Composition's apply pass.
    pub apply_concurrency: usize,
    /// Syntheses running at once, across all Compositions.
    pub max_concurrent_syntheses: usize,
    /// How soon to look again while something is not ready.
    pub readiness_poll: Duration,
    /// Safety-net resync once everything is ready.
    pub resync: Duration,
    /// On-disk cache of compiled modules.
    pub module_cache_dir: Option<PathBuf>,
    /// Bound of the in-memory cache of compiled modules (module source bytes).
    pub module_cache_bytes: usize,
    /// Bound of the cache of ingested syntheses, in resources.
    pub plan_cache_resources: usize,
    /// Extra CA (PEM) trusted for `url` module sources.
    pub module_ca: Option<Vec<u8>>,
    /// Where to serve /metrics, /healthz, /readyz (off when `None`).
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Minimum time between two re-syntheses caused only by a Synthesizer change.
    pub rollout_cooldown: Duration,
    /// The shortest reconcile interval (and re-check delay) honoured.
    pub min_reconcile_interval: Duration,
    /// Field managers whose ownership enoki takes over on apply.
    pub migrating_field_managers: Vec<String>,
    /// Lease-based leader election: (namespace, lease duration); off when `None`.
    pub leader_election: Option<(String, u64)>,
    /// How many shards Compositions are split into (1: none).
    pub shards: u32,
    /// Emitted objects go to the cluster of this kubeconfig (`None`: the management cluster).
    pub remote_kubeconfig: Option<PathBuf>,
    /// The management cluster's kubeconfig (`--kubeconfig`; `None`: kubectl's rules).
    pub kubeconfig: Option<PathBuf>,
    /// Its context (`--context`; `None`: the current one).
    pub context: Option<String>,
    /// A Composition not Ready for longer than this is stuck (`enoki_composition_stuck`).
    pub stuck_threshold: std::time::Duration,
    /// Remote target: management namespace -> the namespace whose ServiceAccount a Composition
    /// acts as there (unlisted namespaces are refused when they impersonate).
    pub remote_namespace_map: std::collections::BTreeMap<String, String>,
    /// Where implicit Compositions of cluster-scoped instances live (instance mode).
    pub instance_namespace: Option<String>,
    /// Built-in synthesizers to install at startup (as Synthesizers named after them).
    pub builtins: Vec<String>,
    /// After SIGTERM, how long in-flight reconciles may take before the process exits.
    pub shutdown_grace: Duration,
    /// Ceilings, memory budget and module ingestion policy.
    pub sandbox: sandbox::Sandbox,
    /// The ServiceAccount (in each Composition's namespace) impersonated for Compositions that
    /// name none; `None`: they act as the controller.
    pub default_service_account: Option<String>,
    /// Refuse references that leave a Composition's namespace.
    pub no_cross_namespace_refs: bool,
    /// The `lepton` built-in may emit PersistentVolumes.
    pub lepton_persistent_volumes: bool,
    /// The controller's own namespace (module ConfigMaps must live there under
    /// `no_cross_namespace_refs`).
    pub controller_namespace: Option<String>,
}

/// Adds (`present`) or removes enoki's cleanup finalizer on `obj`, keeping every other
/// finalizer. The merge patch carries `resource_version` when given, so a list another writer
/// changed meanwhile is not overwritten (the request fails with a conflict and is retried).
pub(crate) async fn set_cleanup_finalizer<K>(
    api: &Api<K>,
    obj: &K,
    present: bool,
    resource_version: Option<String>,
) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let add = present.then_some(crds::names::FINALIZER);
    set_finalizers(api, obj, &[crds::names::FINALIZER], add, resource_version).await
}

/// Removes every finalizer in `remove` from `obj` and adds `add`, keeping every other
/// finalizer; guarded by `resource_version` like [`set_cleanup_finalizer`].
pub(crate) async fn set_finalizers<K>(
    api: &Api<K>,
    obj: &K,
    remove: &[&str],
    add: Option<&str>,
    resource_version: Option<String>,
) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use kube::ResourceExt;
    let mut finalizers: Vec<String> = obj
        .finalizers()
        .iter()
        .filter(|f| !remove.contains(&f.as_str()) && Some(f.as_str()) != add)
        .cloned()
        .collect();
    if let Some(f) = add {
        finalizers.push(f.to_string());
    }
    let mut metadata = serde_json::json!({"finalizers": finalizers});
    if let Some(rv) = resource_version {
        metadata["resourceVersion"] = serde_json::json!(rv);
    }
    api.patch(
        &obj.name_any(),
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({ "metadata": metadata })),
    )
    .await?;
    Ok(())
}

/// The backoff of a Composition whose reconcile failed: transient errors are retried after
/// an exponentially growing, jittered delay (per Composition, reset by a success); terminal
/// ones become a `Reconciled=False` condition and a Warning Event, and are retried only at
/// the capped delay.
#[allow(clippy::needless_pass_by_value)] // the signature kube-runtime requires
fn error_policy(comp: Arc<Composition>, err: &Error, ctx: Arc<Context>) -> Action {
    metrics::Metrics::count(&ctx.metrics.reconcile_errors, err.category());
    let failures = match ctx.failures.lock() {
        Ok(mut f) => {
            let n = f.entry(ObjectRef::from_obj(comp.as_ref())).or_insert(0);
            *n = n.saturating_add(1);
            *n
        }
        Err(_) => 1,
    };
    let chain = error::chain(err);
    let name = kube::ResourceExt::name_any(comp.as_ref());
    if err.is_transient() {
        let delay = error::retry_after(err, failures);
        tracing::warn!(composition = %name, category = err.category(), failures, retry_in = ?delay, error = %chain, "reconcile failed; retrying with backoff");
        return Action::requeue(delay);
    }
    tracing::warn!(composition = %name, category = err.category(), error = %chain, "reconcile failed; not retrying soon");
    let category = err.category();
    tokio::spawn(async move {
        ctx.event(&comp, true, category, "Reconcile", chain.clone())
            .await;
        let mut st = comp.status.clone().unwrap_or_default();
        condition::set_condition(
            &mut st.conditions,
            crds::names::conditions::RECONCILED,
            false,
            crds::names::reasons::RECONCILE_FAILED,
            &format!("{category}: {chain}"),
            comp.metadata.generation,
        );
        if let Err(e) = composition::status_write::write(&ctx, &comp, &st).await {
            tracing::debug!(error = %e, "cannot write the failure condition");
        }
    });
    Action::requeue(error::BACKOFF_CAP)
}

/// Installs (server-side apply) a Synthesizer for each enabled built-in; failures are logged.
async fn install_builtins(ctx: &Context) {
    let api: Api<crds::Synthesizer> = Api::all(ctx.client.clone());
    for name in &ctx.opts.builtins {
        let Some(spec) = builtins::synthesizer_spec(name) else {
            tracing::warn!(builtin = %name, "unknown built-in; not installed");
            continue;
        };
        let mut spec = spec;
        if name == "quota" {
            // Upstream's chart excludes kube-system and the controller's own namespace.
            let own = std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "enoki-system".into());
            spec["env"] = serde_json::json!([
                {"name": "EXCLUDED_NAMESPACES", "value": format!("kube-system,{own}")}
            ]);
        }
        let mut synth = serde_json::json!({
            "apiVersion": crds::API_VERSION, "kind": crds::names::kinds::SYNTHESIZER,
            "metadata": {"name": name, "labels": {crds::names::BUILTIN_LABEL: "true"}},
            "spec": spec,
        });
        if let Some(f) = builtins::instance_finalizer(name) {
            synth["metadata"]["annotations"] =
                serde_json::json!({crds::names::INSTANCE_FINALIZER_ANNOTATION: f});
        }
        match api
            .patch(
                name,
                &kube::api::PatchParams::apply(crds::names::FIELD_MANAGER).force(),
                &kube::api::Patch::Apply(&synth),
            )
            .await
        {
            Ok(_) => tracing::info!(builtin = %name, "built-in synthesizer installed"),
            Err(e) => {
                tracing::warn!(builtin = %name, error = %e, "cannot install built-in synthesizer")
            }
        }
    }
}

async fn reconcile_synthesizer(
    synth: Arc<crds::Synthesizer>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let current = synth.status.as_ref().is_some_and(|s| {
        s.observed_generation == synth.metadata.generation && s.module_digest.is_some()
    });
    if current {
        return Ok(Action::requeue(ctx.opts.resync));
    }
    // A module that does not load is reported on the Synthesizer's status (not an error of
    // this controller): looked at again as the module cache's backoff allows.
    Ok(
        match composition::observe::load_module(&ctx, &synth).await {
            Ok(_) => Action::requeue(ctx.opts.resync),
            Err(ModuleError::Loading) => Action::requeue(Duration::from_secs(2)),
            Err(e) if e.is_transient() => Action::requeue(Duration::from_secs(10)),
            Err(_) => Action::requeue(Duration::from_secs(60)),
        },
    )
}

#[allow(clippy::needless_pass_by_value)] // the signature kube-runtime requires
fn symphony_error_policy(sym: Arc<crds::Symphony>, err: &Error, ctx: Arc<Context>) -> Action {
    use kube::Resource;
    other_error_policy(&ctx, &object_key(sym.as_ref()), sym.object_ref(&()), err)
}

/// The key of a non-Composition object in the failure counts:
/// `<kind>/<namespace>/<name>/<uid>` (an object created again under the same name starts over).
pub(crate) fn object_key<K: kube::Resource<DynamicType = ()>>(obj: &K) -> String {
    format!(
        "{}/{}/{}/{}",
        K::kind(&()),
        obj.meta().namespace.as_deref().unwrap_or_default(),
        obj.meta().name.as_deref().unwrap_or_default(),
        obj.meta().uid.as_deref().unwrap_or_default()
    )
}

/// Longest wait after a terminal error of a Symphony or instance: what they generate may
/// become writable without any change of theirs (RBAC granted, a namespace recreated).
const OTHER_TERMINAL_RETRY: Duration = Duration::from_secs(60);

/// [`error::retry_after`] for the Symphony, Synthesizer and instance controllers: counted per
/// object (cleared by its next success), in `enoki_reconcile_errors_total`, a terminal error
/// retried within a minute and reported as a Warning Event on the object.
pub(crate) fn other_error_policy(
    ctx: &Arc<Context>,
    key: &str,
    object: k8s_openapi::api::core::v1::ObjectReference,
    err: &Error,
) -> Action {
    metrics::Metrics::count(&ctx.metrics.reconcile_errors, err.category());
    let failures = ctx.count_failure(key.to_string());
    let delay = error::retry_after(err, failures).min(OTHER_TERMINAL_RETRY);
    let chain = error::chain(err);
    tracing::warn!(object = %key, category = err.category(), failures, retry_in = ?delay,
        error = %chain, "reconcile failed");
    if !err.is_transient() {
        let (ctx, category) = (ctx.clone(), err.category());
        tokio::spawn(async move {
            ctx.event_on(&object, true, category, "Reconcile", chain)
                .await;
        });
    }
    Action::requeue(delay)
}

#[allow(clippy::needless_pass_by_value)] // the signature kube-runtime requires
fn synthesizer_error_policy(
    synth: Arc<crds::Synthesizer>,
    err: &Error,
    ctx: Arc<Context>,
) -> Action {
    use kube::Resource;
    other_error_policy(
        &ctx,
        &object_key(synth.as_ref()),
        synth.object_ref(&()),
        err,
    )
}
