//! What a Composition's synthesis depends on: its Synthesizer and module, and its inputs.
//! Reads come from the shared input caches (a GET only when the cache does not have the
//! object); each read is tracked so a change re-reconciles the Composition.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Resource, ResourceExt};
use serde_json::Value;

use super::super::context::ModuleEntry;
use super::super::{Context, Error, condition, inputs, module};
use crate::synthesis;
use crds::names::{annotations as keys, conditions, reasons};
use crds::{Composition, InputRevision, Synthesizer};

/// Reads an object through the input cache of its kind (tracked for `comp`), or with a GET
/// when the cache does not have it (not synced yet, or an object enoki manages), with the
/// controller's identity: Synthesizers and `dependsOn` Compositions.
///
/// # Errors
/// The GET's error.
pub(crate) async fn read(
    ctx: &Context,
    comp: &Composition,
    kind: (&GroupVersionKind, &ApiResource, bool),
    namespace: &str,
    name: &str,
) -> Result<Option<DynamicObject>, kube::Error> {
    read_as(ctx, comp, false, kind, namespace, name).await
}

/// Like [`read`], for an input of `comp`: a Composition with a ServiceAccount reads it with a
/// GET as that account (the cache, read with the controller's identity, still triggers it),
/// so it sees only what its RBAC allows.
///
/// # Errors
/// The GET's error (`403 Forbidden` when the ServiceAccount may not read it).
pub(crate) async fn read_input(
    ctx: &Context,
    comp: &Composition,
    kind: (&GroupVersionKind, &ApiResource, bool),
    namespace: &str,
    name: &str,
) -> Result<Option<DynamicObject>, kube::Error> {
    read_as(ctx, comp, true, kind, namespace, name).await
}

async fn read_as(
    ctx: &Context,
    comp: &Composition,
    as_composition: bool,
    (gvk, ar, namespaced): (&GroupVersionKind, &ApiResource, bool),
    namespace: &str,
    name: &str,
) -> Result<Option<DynamicObject>, kube::Error> {
    // "" is the Composition's own namespace, never "every namespace" (a cluster-wide watch).
    let ns = if namespaced {
        super::super::tenancy::ref_namespace(&comp.namespace().unwrap_or_default(), Some(namespace))
    } else {
        String::new()
    };
    let ns = ns.as_str();
    ctx.watches.track(gvk, ar, ns, name, comp);
    let impersonating = as_composition && ctx.service_account(comp).is_some();
    if !impersonating && let Some(Some(hit)) = ctx.watches.input(gvk, ns, name).await {
        return Ok(Some((*hit).clone()));
    }
    let client = if impersonating {
        ctx.client_for(comp)?
    } else {
        ctx.client.clone()
    };
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(client, ns, ar)
    } else {
        Api::all_with(client, ar)
    };
    ctx.metrics.input_gets.inc();
    api.get_opt(name).await
}

/// An integer annotation of an input (either spelling); as Eno, anything that is not a
/// non-zero integer counts as unset.
fn annotation_int(obj: &Value, key: crds::names::Key) -> Option<i64> {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(key.enoki).or_else(|| a.get(key.eno)))
        .and_then(Value::as_str)
        .and_then(|r| r.trim().parse().ok())
        .filter(|n| *n != 0)
}

/// A bool annotation of an input, parsed as Go's `strconv.ParseBool` (Eno); `None` otherwise.
fn annotation_bool(obj: &Value, key: crds::names::Key) -> Option<bool> {
    let v = obj
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(key.enoki).or_else(|| a.get(key.eno)))
        .and_then(Value::as_str)?;
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// The Composition's Synthesizer (`None` when it does not exist).
///
/// # Errors
/// [`Error::ReadSynthesizer`].
pub(crate) async fn synthesizer(
    ctx: &Context,
    comp: &Composition,
) -> Result<Option<Synthesizer>, Error> {
    let name = &comp.spec.synthesizer.name;
    let gvk = GroupVersionKind::gvk(crds::GROUP, crds::VERSION, crds::names::kinds::SYNTHESIZER);
    let ar = ApiResource::erase::<Synthesizer>(&());
    let obj = read(ctx, comp, (&gvk, &ar, false), "", name)
        .await
        .map_err(|source| Error::ReadSynthesizer {
            name: name.clone(),
            source,
        })?;
    Ok(obj.and_then(|o| o.try_parse::<Synthesizer>().ok()))
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
    ctx: &std::sync::Arc<Context>,
    synth: &Synthesizer,
) -> Result<synthesis::Module, module::ModuleError> {
    let name = synth.name_any();
    let generation = (synth.uid(), synth.metadata.generation);
    let mut failures = 0;
    if let Some(hit) = cached_module(ctx, &name, &generation, &mut failures) {
        return hit;
    }
    // Single flight per Synthesizer, off the reconcile: the fetch (and compilation) runs in a
    // task of its own that stores its result in the cache; a reconcile waits for it at most
    // FETCH_WAIT, and one that finds a fetch in flight does not wait at all (`Loading`: its
    // current synthesis is still enforced and it looks again in 2 s). However slow the
    // registries of however many Synthesizers, no reconcile worker is held longer.
    let flight = FETCHING
        .lock()
        .map(|mut f| f.entry(name.clone()).or_default().clone())
        .unwrap_or_default();
    let Ok(one) = flight.try_lock_owned() else {
        return Err(module::ModuleError::Loading);
    };
    if let Some(hit) = cached_module(ctx, &name, &generation, &mut failures) {
        return hit;
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (ctx, synth) = (ctx.clone(), synth.clone());
    let generation = generation.clone();
    tokio::spawn(async move {
        let _one = one;
        let result = fetch_and_cache(&ctx, &synth, generation, failures).await;
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
    ctx: &Context,
    name: &str,
    generation: &super::super::context::ModuleVersion,
    failures: &mut u32,
) -> Option<Result<synthesis::Module, module::ModuleError>> {
    match ctx.modules.lock().ok().and_then(|m| m.get(name).cloned()) {
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
    ctx: &Context,
    synth: &Synthesizer,
) -> Result<synthesis::Module, module::ModuleError> {
    if ctx.opts.no_cross_namespace_refs {
        let refused =
            super::super::tenancy::module_refs(synth, ctx.opts.controller_namespace.as_deref());
        if !refused.is_empty() {
            return Err(module::ModuleError::Spec(refused.join("; ")));
        }
    }
    module::fetch(
        &ctx.client,
        &ctx.host,
        synth,
        ctx.opts.module_ca.as_deref(),
        &ctx.opts.sandbox.fetch,
        &module::CompileBudget {
            time: ctx.opts.sandbox.compile_timeout,
            memory_bytes: ctx.opts.sandbox.compile_memory_budget_bytes,
        },
    )
    .await
}

async fn fetch_and_cache(
    ctx: &Context,
    synth: &Synthesizer,
    generation: super::super::context::ModuleVersion,
    failures: u32,
) -> Result<synthesis::Module, module::ModuleError> {
    let name = synth.name_any();
    // Held while the module is fetched and compiled: a fetch stuck past both deadlines is
    // a stuck slot for /healthz.
    let slot = ctx
        .slots
        .enter(ctx.opts.sandbox.fetch.timeout + ctx.opts.sandbox.compile_timeout);
    let result = fetch_module(ctx, synth).await;
    super::super::metrics::Metrics::count(
        &ctx.metrics.module_fetches,
        result
            .as_ref()
            .map_or_else(module::ModuleError::kind, |_| "Ready"),
    );
    drop(slot);
    report_module(ctx, synth, &result).await;
    let entry = match &result {
        Ok(m) => ModuleEntry::Ready(generation, m.clone()),
        Err(e) => ModuleEntry::Failed {
            generation,
            error: e.clone(),
            retry_at: Instant::now() + module_backoff(e, failures),
            failures: failures + 1,
        },
    };
    if let Ok(mut cache) = ctx.modules.lock() {
        cache.insert(name.clone(), entry);
    }
    if let Ok(mut f) = FETCHING.lock() {
        f.remove(&name);
    }
    result
}

/// The fetch in flight per Synthesizer name.
static FETCHING: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
> = std::sync::LazyLock::new(Default::default);

/// How long a failed module is not fetched again: 10 s doubling per failure in a row up to
/// 5 min; 5 s when compilation only ran past its budget (it finishes in the background).
pub(crate) fn module_backoff(e: &module::ModuleError, failures: u32) -> Duration {
    if matches!(e, module::ModuleError::CompileTimeout { .. }) {
        return Duration::from_secs(5);
    }
    Duration::from_secs(10)
        .saturating_mul(1 << failures.min(5))
        .min(Duration::from_secs(300))
}

async fn report_module(
    ctx: &Context,
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
        Err(e) => (
            false,
            reasons::MODULE_UNAVAILABLE,
            super::super::error::chain(e),
        ),
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
    let api: Api<Synthesizer> = Api::all(ctx.client.clone());
    if let Err(e) = api
        .patch_status(
            &synth.name_any(),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"status": sst})),
        )
        .await
    {
        tracing::warn!(error = %e, "cannot write Synthesizer status");
    }
}

/// Bound inputs as (key, object), and one revision (a digest) per collection.
pub(crate) struct Gathered {
    pub inputs: Vec<(String, Value)>,
    pub collections: Vec<InputRevision>,
}

impl Gathered {
    /// The instance (`self`) in instance mode.
    pub fn instance(&self) -> Option<&Value> {
        self.inputs
            .iter()
            .find(|(k, _)| k == inputs::SELF_KEY)
            .map(|(_, v)| v)
    }

    /// One revision per input: resourceVersion and `revision` annotation of each object,
    /// the digest of each collection.
    pub fn revisions(&self) -> Vec<InputRevision> {
        let collection_keys: BTreeSet<&str> =
            self.collections.iter().map(|r| r.key.as_str()).collect();
        let mut out: Vec<InputRevision> = self
            .inputs
            .iter()
            .filter(|(key, _)| !collection_keys.contains(key.as_str()))
            .map(|(key, obj)| InputRevision {
                key: key.clone(),
                resource_version: obj
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .map(String::from),
                revision: annotation_int(obj, keys::REVISION),
                synthesizer_generation: annotation_int(obj, keys::SYNTHESIZER_GENERATION),
                composition_generation: annotation_int(obj, keys::COMPOSITION_GENERATION),
                ignore_side_effects: annotation_bool(obj, keys::IGNORE_SIDE_EFFECTS),
                digest: None,
            })
            .collect();
        out.extend(self.collections.iter().cloned());
        out
    }
}

/// Reads every bound input: in instance mode first `self`, then every ref. Outer error: API
/// failure; inner error: a missing required input (or a bad collection selector).
///
/// # Errors
/// [`Error::ReadInput`].
pub(crate) async fn gather(
    ctx: &Context,
    comp: &Composition,
    synth: &Synthesizer,
) -> Result<Result<Gathered, String>, Error> {
    let mut g = Gathered {
        inputs: Vec::new(),
        collections: Vec::new(),
    };
    let self_ref = synth.spec.for_kind.as_ref().map(|f| crds::Ref {
        key: inputs::SELF_KEY.into(),
        resource: Some(crds::ResourceRef {
            group: f.group.clone(),
            version: f.version.clone(),
            kind: f.kind.clone(),
            ..crds::ResourceRef::default()
        }),
        ..crds::Ref::default()
    });
    for r in self_ref.iter().chain(&synth.spec.refs) {
        let step = if let Some(res) = &r.resource {
            object_input(ctx, comp, r, res, g.instance().cloned()).await?
        } else if let Some(c) = &r.collection {
            let instance = g.instance().cloned();
            match inputs::collection(ctx, comp, &r.key, c, instance.as_ref()).await? {
                Ok((items, digest)) => {
                    g.collections.push(InputRevision {
                        key: r.key.clone(),
                        digest: Some(digest),
                        ..InputRevision::default()
                    });
                    Ok(items)
                }
                Err(message) => Err(message),
            }
        } else {
            Ok(Vec::new())
        };
        match step {
            Ok(items) => g
                .inputs
                .extend(items.into_iter().map(|o| (r.key.clone(), o))),
            Err(_) if r.optional => {}
            Err(message) => return Ok(Err(message)),
        }
    }
    Ok(Ok(g))
}

/// One object input: its name from the binding, the ref or the instance (`nameFrom`), its
/// namespace from the binding, the ref, the instance or the Composition.
async fn object_input(
    ctx: &Context,
    comp: &Composition,
    r: &crds::Ref,
    res: &crds::ResourceRef,
    instance: Option<Value>,
) -> Result<Result<Vec<Value>, String>, Error> {
    let gvk = GroupVersionKind::gvk(&res.group, &res.version, &res.kind);
    let (ar, namespaced) = match ctx.resolve(&gvk).await {
        Ok(x) => x,
        Err(e) => {
            return Ok(Err(format!(
                "input {:?}: kind {}/{} is not served: {e}",
                r.key, res.version, res.kind
            )));
        }
    };
    let binding = comp.spec.bindings.iter().find(|b| b.key == r.key);
    let name_from = res.name_from.as_ref().and_then(|path| {
        instance
            .as_ref()?
            .pointer(&format!("/{}", path.replace('.', "/")))?
            .as_str()
            .filter(|n| !n.is_empty())
            .map(String::from)
    });
    let name = binding
        .map(|b| b.resource.name.clone())
        .or_else(|| res.name.clone())
        .or(name_from);
    let Some(name) = name else {
        return Ok(Err(format!(
            "input {:?} is not bound (add a binding with this key)",
            r.key
        )));
    };
    let given = binding
        .and_then(|b| b.resource.namespace.clone())
        .or_else(|| res.namespace.clone())
        .or_else(|| {
            instance
                .as_ref()?
                .pointer("/metadata/namespace")?
                .as_str()
                .map(String::from)
        });
    let obj_ns = super::super::tenancy::ref_namespace(
        &comp.namespace().unwrap_or_default(),
        given.as_deref(),
    );
    let found = match read_input(ctx, comp, (&gvk, &ar, namespaced), &obj_ns, &name).await {
        Ok(found) => found,
        // An optional input the Composition's account may not read is absent for it (e.g. the
        // trustee built-in's cluster-scoped IBM SE PersistentVolume under the default install).
        Err(kube::Error::Api(s)) if s.code == 403 && r.optional => {
            return Ok(Err(format!(
                "input {:?}: {} {name} may not be read ({})",
                r.key, res.kind, s.message
            )));
        }
        Err(source) => {
            return Err(Error::ReadInput {
                key: r.key.clone(),
                source,
            });
        }
    };
    match found {
        Some(obj) => {
            let mut v = serde_json::to_value(obj).unwrap_or_default();
            if v.get("apiVersion").is_none() {
                v["apiVersion"] = Value::from(ar.api_version.clone());
                v["kind"] = Value::from(ar.kind.clone());
            }
            Ok(Ok(vec![v]))
        }
        None => {
            let at = if namespaced {
                format!("{obj_ns}/{name}")
            } else {
                name.clone()
            };
            Ok(Err(format!(
                "input {:?}: {} {at} does not exist",
                r.key, res.kind
            )))
        }
    }
}

/// The `force-resynthesis` annotation (either spelling).
pub(crate) fn forced(comp: &Composition) -> Option<String> {
    let a = comp.annotations();
    a.get(keys::FORCE_RESYNTHESIS.enoki)
        .or_else(|| a.get(keys::FORCE_RESYNTHESIS.eno))
        .cloned()
}

/// A reference to the instance object (for Events in instance mode).
pub(crate) fn object_ref_of(me: &Value) -> k8s_openapi::api::core::v1::ObjectReference {
    let text = |p: &str| me.pointer(p).and_then(Value::as_str).map(String::from);
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: text("/apiVersion"),
        kind: text("/kind"),
        name: text("/metadata/name"),
        namespace: text("/metadata/namespace"),
        uid: text("/metadata/uid"),
        ..Default::default()
    }
}

/// Kept for symmetry with `Resource::object_ref` users.
#[allow(dead_code)]
fn _assert_resource<K: Resource>() {}
