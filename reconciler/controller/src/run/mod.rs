//! `enoki run`: the kube-runtime shell around synthesis, the planner and the apply executor.
//!
//! One controller watches Compositions (and the ResourceSlices they own). Each reconcile
//! observes (Synthesizer, module, inputs, current slices, live objects), synthesizes when a
//! trigger changed, plans, executes the plan with bounded concurrency, writes per-resource
//! status back into the ResourceSlices (one patch per slice) and rolls it up into the
//! Composition's conditions. Every path returns an explicit requeue.

mod apply;
mod inputs;
mod instances;
pub mod metrics;
mod module;
mod reconcile;
mod status;
mod symphony;
mod triggers;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use kube::Client;
use kube::api::Api;
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Scope;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;

use crds::{Composition, ResourceSlice};

pub use module::ModuleError;

/// Options of `enoki run`, free of clap.
#[derive(Clone, Debug)]
pub struct Options {
    /// Only this namespace's Compositions (all when `None`).
    pub namespace: Option<String>,
    /// Only Compositions matching this label selector.
    pub label_selector: Option<String>,
    /// Server-side apply or client-side merge patches.
    pub mode: plan::ApplyMode,
    /// Concurrent applies per composition and concurrent reconciles.
    pub concurrency: usize,
    /// How soon to look again while something is not ready.
    pub readiness_poll: Duration,
    /// Safety-net resync once everything is ready.
    pub resync: Duration,
    /// On-disk cache of compiled modules.
    pub module_cache_dir: Option<PathBuf>,
    /// Extra CA (PEM) trusted for `url` module sources.
    pub module_ca: Option<Vec<u8>>,
    /// Where to serve /metrics, /healthz, /readyz (off when `None`).
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Minimum time between two re-syntheses caused only by a Synthesizer change.
    pub rollout_cooldown: Duration,
    /// Lease-based leader election: (namespace, lease duration); off when `None`.
    pub leader_election: Option<(String, u64)>,
    /// Where implicit Compositions of cluster-scoped instances live (instance mode).
    pub instance_namespace: Option<String>,
    /// Built-in synthesizers to install at startup (as Synthesizers named after them).
    pub builtins: Vec<String>,
}

/// Errors of a reconcile; `is_transient` drives the backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("{action}")]
    Kube {
        /// What was being done.
        action: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A background task failed.
    #[error("background task failed: {0}")]
    Task(String),
}

impl Error {
    /// A fixed PascalCase name for metrics and Events.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Kube { .. } => "KubeApi",
            Error::Task(_) => "Task",
        }
    }
}

pub(crate) fn kube_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let action = action.into();
    move |source| Error::Kube { action, source }
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
    use kube::ResourceExt;
    let mut finalizers: Vec<String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != crds::names::FINALIZER)
        .cloned()
        .collect();
    if present {
        finalizers.push(crds::names::FINALIZER.to_string());
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

/// Failures so far, when to try again, and the last error, of one resource.
pub(crate) type Backoff = (u32, std::time::Instant, String);

/// Shared state of every reconcile.
pub struct Context {
    pub(crate) client: Client,
    pub(crate) host: Arc<wasm_host::Host>,
    pub(crate) opts: Options,
    pub(crate) modules: Mutex<HashMap<(String, i64), crate::synthesis::Module>>,
    pub(crate) prepared: Mutex<HashMap<String, Arc<plan::Prepared>>>,
    discovery: Mutex<HashMap<GroupVersionKind, (ApiResource, bool)>>,
    pub(crate) triggers: Arc<triggers::Triggers>,
    pub(crate) metrics: metrics::Metrics,
    pub(crate) recorder: kube::runtime::events::Recorder,
    rollouts: Mutex<HashMap<String, std::time::Instant>>,
    pub(crate) backoff: Mutex<HashMap<(String, plan::ResourceKey), Backoff>>,
    /// Drift corrections per resource: another writer that keeps changing a managed object.
    pub(crate) fights: Mutex<HashMap<(String, plan::ResourceKey), apply::Fight>>,
    /// `drift: interval`: when each resource was last checked against its live object.
    pub(crate) interval_checks: Mutex<HashMap<(String, plan::ResourceKey), std::time::Instant>>,
    /// Instance mode: the status write-back of each Composition's current synthesis (`None`
    /// when its synthesizer emitted none), by Composition UID.
    pub(crate) status_writes: Mutex<HashMap<String, Option<serde_json::Value>>>,
}

impl Context {
    /// Resolves a GVK to its ApiResource and whether it is namespaced (cached; misses are
    /// retried, so CRDs created by a synthesis are found once Established).
    pub(crate) async fn resolve(
        &self,
        gvk: &GroupVersionKind,
    ) -> Result<(ApiResource, bool), kube::Error> {
        if let Some(hit) = self.discovery.lock().ok().and_then(|d| d.get(gvk).cloned()) {
            return Ok(hit);
        }
        let (ar, caps) = kube::discovery::pinned_kind(&self.client, gvk).await?;
        let entry = (ar, caps.scope == Scope::Namespaced);
        if let Ok(mut d) = self.discovery.lock() {
            d.insert(gvk.clone(), entry.clone());
        }
        Ok(entry)
    }
}

impl Context {
    /// Claims the rollout slot of a Synthesizer: `None` when this Composition may re-synthesize
    /// now (and the slot is taken), otherwise how long to wait.
    pub(crate) fn rollout_slot(&self, synthesizer: &str) -> Option<Duration> {
        let mut last = self.rollouts.lock().ok()?;
        let now = std::time::Instant::now();
        if let Some(prev) = last.get(synthesizer) {
            let since = now.duration_since(*prev);
            if since < self.opts.rollout_cooldown {
                return Some(self.opts.rollout_cooldown - since);
            }
        }
        last.insert(synthesizer.to_string(), now);
        None
    }

    /// Publishes a Kubernetes Event on the Composition (best effort: failures are logged).
    pub(crate) async fn event(
        &self,
        comp: &Composition,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        use kube::Resource;
        self.event_on(&comp.object_ref(&()), warning, reason, action, note)
            .await;
    }

    /// Publishes a Kubernetes Event on any object (best effort: failures are logged).
    pub(crate) async fn event_on(
        &self,
        object: &k8s_openapi::api::core::v1::ObjectReference,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        use kube::runtime::events::{Event, EventType};
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_string(),
            note: Some(note.chars().take(1000).collect()),
            action: action.to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, object).await {
            tracing::debug!(error = %e, "cannot publish event");
        }
    }

    /// (group, kind) -> namespaced, for every kind resolved so far.
    pub(crate) fn discovery_snapshot(&self) -> std::collections::BTreeMap<(String, String), bool> {
        self.discovery
            .lock()
            .map(|d| {
                d.iter()
                    .map(|(gvk, (_, ns))| ((gvk.group.clone(), gvk.kind.clone()), *ns))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Runs the controller until SIGTERM/SIGINT.
///
/// # Errors
/// When no cluster is reachable or the wasm engine cannot start.
pub async fn run(opts: Options) -> anyhow::Result<()> {
    let client = Client::try_default().await?;
    let version = client.apiserver_version().await?;
    tracing::info!(server = %version.git_version, namespace = ?opts.namespace, "enoki controller starting");
    let host = Arc::new(wasm_host::Host::new(opts.module_cache_dir.as_deref())?);
    let comps: Api<Composition> = match &opts.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let slices: Api<ResourceSlice> = match &opts.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mut wc = watcher::Config::default();
    if let Some(sel) = &opts.label_selector {
        wc = wc.labels(sel);
    }
    let concurrency = u16::try_from(opts.concurrency.max(1)).unwrap_or(u16::MAX);
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = metrics::Metrics::register(&mut registry);
    let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
    if let Some(addr) = opts.metrics_addr {
        metrics::serve(addr, registry, ready.clone()).await?;
    }

    // Leader election: wait for the Lease, and stop when it is lost.
    let identity = format!(
        "{}-{:08x}",
        std::env::var("HOSTNAME").unwrap_or_else(|_| "enoki".into()),
        rand::random::<u32>()
    );
    let mut leadership: Option<tokio::sync::watch::Receiver<bool>> = None;
    if let Some((namespace, duration)) = &opts.leader_election {
        let manager =
            kube_lease_manager::LeaseManagerBuilder::new(client.clone(), "enoki-controller")
                .with_namespace(namespace.clone())
                .with_identity(identity.clone())
                .with_duration(*duration)
                .with_grace((*duration / 3).max(1))
                .build()
                .await?;
        let (mut rx, _task) = manager.watch().await;
        tracing::info!(%identity, lease = %format!("{namespace}/enoki-controller"), "waiting for leadership");
        while !*rx.borrow_and_update() {
            rx.changed().await?;
        }
        tracing::info!(%identity, "acquired leadership");
        leadership = Some(rx);
    }

    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    let triggers = triggers::Triggers::new(client.clone(), sender);
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
    let ctx = Arc::new(Context {
        triggers,
        metrics,
        recorder,
        client,
        host,
        opts,
        modules: Mutex::new(HashMap::new()),
        prepared: Mutex::new(HashMap::new()),
        discovery: Mutex::new(HashMap::new()),
        rollouts: Mutex::new(HashMap::new()),
        backoff: Mutex::new(HashMap::new()),
        fights: Mutex::new(HashMap::new()),
        interval_checks: Mutex::new(HashMap::new()),
        status_writes: Mutex::new(HashMap::new()),
    });
    let lost = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let lost_flag = lost.clone();
    let lost_leadership = async move {
        match leadership {
            Some(mut rx) => loop {
                if rx.changed().await.is_err() || !*rx.borrow() {
                    lost_flag.store(true, std::sync::atomic::Ordering::Relaxed);
                    tracing::warn!("lost leadership; stopping");
                    break;
                }
            },
            None => futures::future::pending::<()>().await,
        }
    };
    ready.store(true, std::sync::atomic::Ordering::Relaxed);
    // Synthesizer status (module fetched + compiled, digest) for every Synthesizer, also those
    // no Composition uses yet. Skipped when scoped to one namespace: Synthesizers are
    // cluster-scoped, and a namespaced instance still reports on the ones its Compositions use.
    let synth_controller = if ctx.opts.namespace.is_none() {
        let synths: Api<crds::Synthesizer> = Api::all(ctx.client.clone());
        let lost_too = {
            let flag = lost.clone();
            async move {
                while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        Controller::new(synths, watcher::Config::default())
            .shutdown_on_signal()
            .graceful_shutdown_on(lost_too)
            .run(reconcile_synthesizer, synthesizer_error_policy, ctx.clone())
            .for_each(|_| async {})
            .boxed()
    } else {
        futures::future::ready(()).boxed()
    };
    let synth_task = tokio::spawn(synth_controller);
    // Built-in synthesizers, then instance mode for every Synthesizer with `spec.for`.
    install_builtins(&ctx).await;
    let instance_task = tokio::spawn(instances::run(ctx.clone()));
    // Symphonies: one Composition per variation.
    let symphony_task = {
        let (syms, owned): (Api<crds::Symphony>, Api<Composition>) = match &ctx.opts.namespace {
            Some(ns) => (
                Api::namespaced(ctx.client.clone(), ns),
                Api::namespaced(ctx.client.clone(), ns),
            ),
            None => (Api::all(ctx.client.clone()), Api::all(ctx.client.clone())),
        };
        let flag = lost.clone();
        let lost_too = async move {
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        };
        tokio::spawn(
            Controller::new(syms, watcher::Config::default())
                .owns(owned, watcher::Config::default())
                .shutdown_on_signal()
                .graceful_shutdown_on(lost_too)
                .run(symphony::reconcile, symphony_error_policy, ctx.clone())
                .for_each(|res| async move {
                    if let Err(e) = res {
                        tracing::debug!(error = %e, "symphony reconcile failed");
                    }
                }),
        )
    };
    Controller::new(comps, wc)
        .owns(slices, watcher::Config::default())
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .reconcile_on(changes)
        .shutdown_on_signal()
        .graceful_shutdown_on(lost_leadership)
        .run(reconcile::reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "reconcile failed");
            }
        })
        .await;
    ready.store(false, std::sync::atomic::Ordering::Relaxed);
    synth_task.abort();
    symphony_task.abort();
    instance_task.abort();
    if lost.load(std::sync::atomic::Ordering::Relaxed) {
        anyhow::bail!("lost leadership");
    }
    tracing::info!("enoki controller stopped");
    Ok(())
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
        let synth = serde_json::json!({
            "apiVersion": "enoki.dev/v1alpha1", "kind": "Synthesizer",
            "metadata": {"name": name, "labels": {"enoki.dev/builtin": "true"}},
            "spec": spec,
        });
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
    Ok(match reconcile::load_module(&ctx, &synth).await {
        Ok(_) => Action::requeue(ctx.opts.resync),
        Err(e) if e.is_transient() => Action::requeue(Duration::from_secs(10)),
        Err(_) => Action::requeue(Duration::from_secs(60)),
    })
}

#[allow(clippy::needless_pass_by_value)] // the signature kube-runtime requires
fn symphony_error_policy(sym: Arc<crds::Symphony>, err: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(symphony = %kube::ResourceExt::name_any(sym.as_ref()), error = %err, "symphony reconcile error");
    Action::requeue(Duration::from_secs(5))
}

#[allow(clippy::needless_pass_by_value)] // the signature kube-runtime requires
fn synthesizer_error_policy(
    _synth: Arc<crds::Synthesizer>,
    _err: &Error,
    _ctx: Arc<Context>,
) -> Action {
    Action::requeue(Duration::from_secs(10))
}

#[allow(clippy::needless_pass_by_value)] // the signature kube-runtime requires
fn error_policy(comp: Arc<Composition>, err: &Error, ctx: Arc<Context>) -> Action {
    metrics::Metrics::count(&ctx.metrics.reconcile_errors, err.category());
    let chain = {
        let mut parts = vec![err.to_string()];
        let mut src = std::error::Error::source(err);
        while let Some(s) = src {
            parts.push(s.to_string());
            src = s.source();
        }
        parts.join(": ")
    };
    tracing::warn!(composition = %kube::ResourceExt::name_any(comp.as_ref()), category = err.category(), error = %chain, "reconcile error");
    Action::requeue(Duration::from_secs(5))
}
