//! The Synthesizer controller: installs the enabled built-ins, fetches and compiles each
//! Synthesizer's module (one fetch in flight per Synthesizer, off every reconcile) and is the
//! one writer of a Synthesizer's status. Compositions ask [`load_module`] for the module and
//! get it, a cached failure, or `Loading`.

use std::sync::Arc;
use std::time::Duration;

// The tokio clock (the std one outside tests): a paused test clock moves the module backoff.
use tokio::time::Instant;

use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;

use super::Options;
use super::context::{Clusters, Context, ModuleEntry};
use super::error::Error;
use super::module::{self, ModuleError};
use super::policy::{object_key, other_error_policy};
use crate::synthesis;
use crds::Synthesizer;
use crds::names::{conditions, reasons};
use reconciler_core::condition;

/// Installs (server-side apply) a Synthesizer for each enabled built-in; failures are logged.
pub(crate) async fn install_builtins(ctx: &Context) {
    let api: Api<crds::Synthesizer> = Api::all(ctx.clusters.client().clone());
    for name in &ctx.opts.modules.builtins {
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

pub(crate) async fn reconcile_synthesizer(
    synth: Arc<crds::Synthesizer>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let current = synth.status.as_ref().is_some_and(|s| {
        s.observed_generation == synth.metadata.generation && s.module_digest.is_some()
    });
    if !current {
        // A module that does not load is reported on the Synthesizer's status (not an error
        // of this controller): looked at again as the module cache's backoff allows. Its
        // status write starts the next reconcile, which records the revision.
        return Ok(match load_module(&ctx, &synth).await {
            Ok(_) => Action::requeue(ctx.opts.resync),
            Err(ModuleError::Loading) => Action::requeue(Duration::from_secs(2)),
            Err(e) if e.is_transient() => Action::requeue(Duration::from_secs(10)),
            Err(_) => Action::requeue(Duration::from_secs(60)),
        });
    }
    let next = super::rollout::reconcile(&ctx, &synth).await;
    Ok(Action::requeue(next.unwrap_or(ctx.opts.resync)))
}

#[allow(clippy::needless_pass_by_value)] // the signature kube-runtime requires
pub(crate) fn synthesizer_error_policy(
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

/// The Synthesizer's compiled module (cached per Synthesizer and generation); reports the
/// result on the Synthesizer's status when it changed. A failure is cached too (negative
/// cache): until its backoff passes (10 s doubling to 5 min; 5 s while a compilation runs on
/// in the background) every reconcile gets the same error without fetching or compiling
/// again. A new Synthesizer generation starts over.
///
/// # Errors
/// [`module::ModuleError`] naming the field.
pub(crate) async fn load_module(
    ctx: &Arc<Context>,
    synth: &Synthesizer,
) -> Result<synthesis::Module, module::ModuleError> {
    let name = synth.name_any();
    let generation = (synth.uid(), synth.metadata.generation);
    let mut failures = 0;
    if let Some(hit) = cached_module(&ctx.modules, &name, &generation, &mut failures) {
        return hit;
    }
    let (ctx, synth) = (ctx.clone(), synth.clone());
    one_flight(name.clone(), move || async move {
        // Cached meanwhile by the flight before this one?
        if let Some(hit) = cached_module(&ctx.modules, &name, &generation, &mut failures) {
            return hit;
        }
        fetch_and_cache(&ctx, &synth, generation, failures).await
    })
    .await
}

/// Runs `work` (a fetch and compilation) off the reconcile, one flight at a time per `key` (a
/// Synthesizer's name, a revision's pin key), in a task of its own that stores its result in
/// a cache: a reconcile waits for it at most [`FETCH_WAIT`], and one that finds a flight under
/// way does not wait at all (`Loading`: its current synthesis is still enforced and it looks
/// again in 2 s). However slow the registries of however many Synthesizers, no reconcile
/// worker is held longer.
pub(crate) async fn one_flight<F, Fut>(
    key: String,
    work: F,
) -> Result<synthesis::Module, module::ModuleError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<synthesis::Module, module::ModuleError>>
        + Send
        + 'static,
{
    let flight = FETCHING.lock().entry(key.clone()).or_default().clone();
    let Ok(one) = flight.try_lock_owned() else {
        return Err(module::ModuleError::Loading);
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let work = work();
    tokio::spawn(async move {
        let result = work.await;
        FETCHING.lock().remove(&key);
        drop(one);
        let _ = tx.send(result);
    });
    match tokio::time::timeout(FETCH_WAIT, rx).await {
        Ok(Ok(result)) => result,
        _ => Err(module::ModuleError::Loading),
    }
}

/// How long a reconcile waits for the module fetch it started before it goes on (`Loading`).
const FETCH_WAIT: Duration = Duration::from_secs(10);

/// The cached module or cached failure (until its backoff passes) of a Synthesizer
/// generation; `failures` is set to the failures in a row so far.
fn cached_module(
    modules: &crate::run::context::Modules,
    name: &str,
    generation: &super::context::ModuleVersion,
    failures: &mut u32,
) -> Option<Result<synthesis::Module, module::ModuleError>> {
    let entry = modules.cached(name);
    match entry {
        Some(ModuleEntry::Ready(g, m)) if &g == generation => Some(Ok(m)),
        Some(ModuleEntry::Failed {
            generation: g,
            error,
            retry_at,
            failures: n,
        }) if &g == generation => {
            *failures = n;
            (Instant::now() < retry_at).then_some(Err(error))
        }
        _ => None,
    }
}

/// Fetches and compiles the module, reports it on the Synthesizer and caches the result.
/// Fetches and compiles `synth`'s module with the controller's options; its own references
/// obey the tenancy rule before anything is read, whoever asks (a Composition, the Synthesizer
/// controller, `enoki diff`).
pub(crate) async fn fetch_module(
    clusters: &Clusters,
    host: &Arc<wasm_host::Host>,
    opts: &Options,
    synth: &Synthesizer,
) -> Result<synthesis::Module, module::ModuleError> {
    if opts.tenancy.no_cross_namespace_refs {
        let refused =
            super::tenancy::module_refs(synth, opts.tenancy.controller_namespace.as_deref());
        if !refused.is_empty() {
            return Err(module::ModuleError::Invalid(refused.join("; ")));
        }
    }
    module::fetch(
        clusters.client(),
        host,
        synth,
        opts.modules.module_ca.as_deref(),
        &opts.sandbox.fetch,
        &module::CompileBudget {
            time: opts.sandbox.compile_timeout,
            memory_bytes: opts.sandbox.compile_memory_budget_bytes,
        },
        opts.modules.helm_module.as_deref(),
    )
    .await
}

async fn fetch_and_cache(
    ctx: &Context,
    synth: &Synthesizer,
    generation: super::context::ModuleVersion,
    failures: u32,
) -> Result<synthesis::Module, module::ModuleError> {
    let name = synth.name_any();
    // Held while the module is fetched and compiled: a fetch stuck past both deadlines is
    // a stuck slot for /healthz.
    let slot = ctx
        .limits
        .slots
        .enter(ctx.opts.sandbox.fetch.timeout + ctx.opts.sandbox.compile_timeout);
    let result = fetch_module(&ctx.clusters, ctx.modules.host(), &ctx.opts, synth).await;
    super::metrics::Metrics::count(
        &ctx.report.metrics.module_fetches,
        result
            .as_ref()
            .map_or_else(module::ModuleError::kind, |_| "Ready"),
    );
    drop(slot);
    report_module(&ctx.clusters, synth, &result).await;
    let entry = match &result {
        Ok(m) => ModuleEntry::Ready(generation, m.clone()),
        Err(e) => ModuleEntry::Failed {
            generation,
            error: e.clone(),
            retry_at: Instant::now() + module_backoff(e, failures),
            failures: failures + 1,
        },
    };
    if let (ModuleEntry::Ready(..), Ok(m)) = (&entry, &result) {
        // Kept for its revision too (a rollout may keep Compositions on it).
        let mut at = synth.clone();
        at.status.get_or_insert_default().module_digest = Some(m.digest());
        ctx.modules
            .keep_pinned(super::rollout::revisions::pin_key(&at), entry.clone());
    }
    ctx.modules.keep(name, entry);
    result
}

/// The flight under way per key ([`one_flight`]).
static FETCHING: std::sync::LazyLock<
    parking_lot::Mutex<std::collections::HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
> = std::sync::LazyLock::new(Default::default);

/// How long a failed module is not fetched again: 10 s doubling per failure in a row up to
/// 5 min; 5 s when compilation only ran past its budget (it finishes in the background).
pub(crate) fn module_backoff(e: &module::ModuleError, failures: u32) -> Duration {
    if matches!(
        e,
        module::ModuleError::CompileTimeout { stopped: false, .. }
    ) {
        return Duration::from_secs(5);
    }
    Duration::from_secs(10)
        .saturating_mul(1 << failures.min(5))
        .min(Duration::from_secs(300))
}

async fn report_module(
    clusters: &crate::run::context::Clusters,
    synth: &Synthesizer,
    result: &Result<synthesis::Module, module::ModuleError>,
) {
    let mut sst = synth.status.clone().unwrap_or_default();
    let before = sst.clone();
    sst.observed_generation = synth.metadata.generation;
    let (ok, reason, message) = match result {
        Ok(m) => {
            sst.module_digest = Some(m.digest());
            (
                true,
                reasons::MODULE_READY,
                "module fetched and compiled".to_string(),
            )
        }
        Err(e) => (false, reasons::MODULE_UNAVAILABLE, super::error::chain(e)),
    };
    condition::set_condition(
        &mut sst.conditions,
        conditions::READY,
        ok,
        reason,
        &message,
        synth.metadata.generation,
    );
    if sst == before {
        return;
    }
    let api: Api<Synthesizer> = Api::all(clusters.client().clone());
    // Only the fields this writer owns: `status.rollout` is the rollout's.
    let own = serde_json::json!({"status": {
        "observedGeneration": sst.observed_generation,
        "moduleDigest": sst.module_digest,
        "conditions": sst.conditions,
    }});
    if let Err(e) = api
        .patch_status(
            &synth.name_any(),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(own),
        )
        .await
    {
        tracing::warn!(error = %e, "cannot write Synthesizer status");
    }
}
