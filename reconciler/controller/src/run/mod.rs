//! `enoki run`: the kube-runtime shell around synthesis, the planner and the apply executor.
//!
//! One controller watches Compositions (and the ResourceSlices they own). Each reconcile
//! observes (Synthesizer, module, inputs, current slices, live objects), synthesizes when a
//! trigger changed, plans, executes the plan with bounded concurrency, writes per-resource
//! status back into the ResourceSlices (one patch per slice) and rolls it up into the
//! Composition's conditions. Every path returns an explicit requeue.

mod apply;
mod module;
mod reconcile;
mod status;
mod triggers;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
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

/// Shared state of every reconcile.
pub struct Context {
    pub(crate) client: Client,
    pub(crate) host: Arc<wasm_host::Host>,
    pub(crate) opts: Options,
    pub(crate) modules: Mutex<HashMap<(String, i64), crate::synthesis::Module>>,
    pub(crate) prepared: Mutex<HashMap<String, Arc<plan::Prepared>>>,
    discovery: Mutex<HashMap<GroupVersionKind, (ApiResource, bool)>>,
    pub(crate) triggers: Arc<triggers::Triggers>,
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
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    let triggers = triggers::Triggers::new(client.clone(), sender);
    let changes = futures::stream::unfold(receiver, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    });
    let ctx = Arc::new(Context {
        triggers,
        client,
        host,
        opts,
        modules: Mutex::new(HashMap::new()),
        prepared: Mutex::new(HashMap::new()),
        discovery: Mutex::new(HashMap::new()),
    });
    Controller::new(comps, wc)
        .owns(slices, watcher::Config::default())
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .reconcile_on(changes)
        .shutdown_on_signal()
        .run(reconcile::reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "reconcile failed");
            }
        })
        .await;
    tracing::info!("enoki controller stopped");
    Ok(())
}

#[allow(clippy::needless_pass_by_value)] // the signature kube-runtime requires
fn error_policy(comp: Arc<Composition>, err: &Error, _ctx: Arc<Context>) -> Action {
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
