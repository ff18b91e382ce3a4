//! What a Composition's synthesis depends on: its Synthesizer and module, and its inputs.
//! Reads come from the shared input caches (a GET only when the cache does not have the
//! object); each read is tracked so a change re-reconciles the Composition.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Resource, ResourceExt};
use serde_json::Value;

use super::super::capabilities::{self, CAPABILITIES_REVISION_KEY, Capabilities};
use super::super::context::Reads;
use super::super::{Error, api_err, inputs};
use crds::names::annotations as keys;
use crds::{Composition, InputRevision, Synthesizer};
use reconciler_core::model::Outcome;

/// Reads an object through the input cache of its kind (tracked for `comp`), or with a GET
/// when the cache does not have it (not synced yet, or an object enoki manages), with the
/// controller's identity: Synthesizers and `dependsOn` Compositions.
///
/// # Errors
/// The GET's error.
pub(crate) async fn read(
    r: Reads<'_>,
    comp: &Composition,
    kind: (&GroupVersionKind, &ApiResource, bool),
    namespace: &str,
    name: &str,
) -> Result<Option<DynamicObject>, kube::Error> {
    read_as(r, comp, false, kind, namespace, name).await
}

/// Like [`read`], for an input of `comp`: a Composition with a ServiceAccount reads it with a
/// GET as that account (the cache, read with the controller's identity, still triggers it),
/// so it sees only what its RBAC allows.
///
/// # Errors
/// The GET's error (`403 Forbidden` when the ServiceAccount may not read it).
pub(crate) async fn read_input(
    r: Reads<'_>,
    comp: &Composition,
    kind: (&GroupVersionKind, &ApiResource, bool),
    namespace: &str,
    name: &str,
) -> Result<Option<DynamicObject>, kube::Error> {
    read_as(r, comp, true, kind, namespace, name).await
}

async fn read_as(
    r: Reads<'_>,
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
    let impersonating = as_composition && r.clusters.service_account(comp).is_some();
    if let Some(kept) = r.kept {
        let watches = &kept.caches.watches;
        watches.track(gvk, ar, ns, name, comp);
        if !impersonating {
            watches.serve(gvk, ns, name, comp);
            if let Some(Some(hit)) = watches.input(gvk, ns, name).await {
                // Unmanaged, in the input watch: no foreign watch of it is needed.
                watches.settled(gvk, ns, name, comp);
                return Ok(Some((*hit).clone()));
            }
        }
    }
    let client = if impersonating {
        r.clusters.client_for(comp)?
    } else {
        r.clusters.client().clone()
    };
    if let Some(kept) = r.kept {
        kept.metrics.input_gets.inc();
    }
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(client, ns, ar)
    } else {
        Api::all_with(client, ar)
    };
    let seen = r
        .kept
        .and_then(|k| k.caches.watches.seen_version(gvk, ns, name));
    let mut got = get_at(&api, name, seen).await?;
    if let Some(kept) = r.kept
        && r.clusters.target_is_management()
    {
        let watches = &kept.caches.watches;
        if super::super::watches::Watches::beyond_inputs(got.as_ref()) {
            watches.foreign_reads((gvk, ar), ns, name, comp);
        } else {
            watches.settled(gvk, ns, name, comp);
        }
    }
    if let Some(obj) = &mut got {
        // As the cache serves it: without managedFields.
        obj.managed_fields_mut().clear();
        if let Some(kept) = r.kept
            && !impersonating
        {
            kept.caches.watches.fetched(gvk, ns, name, obj);
        }
    }
    Ok(got)
}

/// A GET of `name`, at the version the input watch saw (`seen`: answered from the API
/// server's watch cache, not older than what woke the reader) when there is one.
async fn get_at(
    api: &Api<DynamicObject>,
    name: &str,
    seen: Option<String>,
) -> Result<Option<DynamicObject>, kube::Error> {
    let Some(rv) = seen else {
        return api.get_opt(name).await;
    };
    let at = kube::api::GetParams {
        resource_version: Some(rv),
    };
    match api.get_with(name, &at).await {
        Ok(o) => Ok(Some(o)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        // An API server whose cache has not reached that version yet (504): the latest.
        Err(kube::Error::Api(s)) if s.code == 504 => api.get_opt(name).await,
        Err(e) => Err(e),
    }
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
    r: Reads<'_>,
    comp: &Composition,
) -> Result<Option<Synthesizer>, Error> {
    let name = &comp.spec.synthesizer.name;
    let gvk = GroupVersionKind::gvk(crds::GROUP, crds::VERSION, crds::names::kinds::SYNTHESIZER);
    let ar = ApiResource::erase::<Synthesizer>(&());
    let obj = read(r, comp, (&gvk, &ar, false), "", name)
        .await
        .map_err(|source| Error::ReadSynthesizer {
            name: name.clone(),
            source,
        })?;
    Ok(obj.and_then(|o| o.try_parse::<Synthesizer>().ok()))
}

/// Bound inputs as (key, object), and one revision (a digest) per collection.
pub(crate) struct Gathered {
    pub inputs: Vec<(String, Value)>,
    pub collections: Vec<InputRevision>,
    /// The target cluster's capabilities, when the Synthesizer takes them.
    pub capabilities: Option<Arc<Capabilities>>,
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
        out.extend(self.capabilities.iter().map(|c| InputRevision {
            key: CAPABILITIES_REVISION_KEY.into(),
            digest: Some(c.digest.clone()),
            ..InputRevision::default()
        }));
        out
    }
}

/// Reads every bound input: in instance mode first `self`, then every ref. Error: an API
/// failure; [`Outcome::Waits`]: a missing required input (or a bad collection selector).
///
/// # Errors
/// [`Error::ReadInput`].
pub(crate) async fn gather(
    rd: Reads<'_>,
    comp: &Composition,
    synth: &Synthesizer,
) -> Result<Outcome<Gathered>, Error> {
    let mut g = Gathered {
        inputs: Vec::new(),
        collections: Vec::new(),
        capabilities: None,
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
            object_input(rd, comp, r, res, g.instance().cloned()).await?
        } else if let Some(c) = &r.collection {
            let instance = g.instance().cloned();
            match inputs::collection(rd, comp, &r.key, c, instance.as_ref()).await? {
                Outcome::Ready((items, digest)) => {
                    g.collections.push(InputRevision {
                        key: r.key.clone(),
                        digest: Some(digest),
                        ..InputRevision::default()
                    });
                    Outcome::Ready(items)
                }
                waits => waits.map_ready(|_| Vec::new()),
            }
        } else {
            Outcome::Ready(Vec::new())
        };
        match step {
            Outcome::Ready(items) => g
                .inputs
                .extend(items.into_iter().map(|o| (r.key.clone(), o))),
            Outcome::Waits(_) if r.optional => {}
            Outcome::Waits(message) => return Ok(Outcome::Waits(message)),
        }
    }
    if capabilities::wanted(synth, comp) {
        let target = rd.clusters.target();
        let caps = target.capabilities.get(&target.client).await;
        g.capabilities = Some(caps.map_err(api_err(super::super::error::Step::Discovery))?);
    }
    Ok(Outcome::Ready(g))
}

/// One object input: its name from the binding, the ref or the instance (`nameFrom`), its
/// namespace from the binding, the ref, the instance or the Composition.
async fn object_input(
    rd: Reads<'_>,
    comp: &Composition,
    r: &crds::Ref,
    res: &crds::ResourceRef,
    instance: Option<Value>,
) -> Result<Outcome<Vec<Value>>, Error> {
    let gvk = GroupVersionKind::gvk(&res.group, &res.version, &res.kind);
    let (ar, namespaced) = match rd.clusters.resolve(&gvk).await {
        Ok(x) => x,
        Err(e) => {
            return Ok(Outcome::Waits(format!(
                "input {:?}: kind {}/{} is not served: {e}",
                r.key, res.version, res.kind
            )));
        }
    };
    let Some((name, obj_ns)) = bound_object(comp, r, res, instance.as_ref()) else {
        return Ok(Outcome::Waits(format!(
            "input {:?} is not bound (add a binding with this key)",
            r.key
        )));
    };
    let found = match read_input(rd, comp, (&gvk, &ar, namespaced), &obj_ns, &name).await {
        Ok(found) => found,
        // An optional input the Composition's account may not read is absent for it (e.g. the
        // trustee built-in's cluster-scoped IBM SE PersistentVolume under the default install).
        Err(kube::Error::Api(s)) if s.code == 403 && r.optional => {
            return Ok(Outcome::Waits(format!(
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
            Ok(Outcome::Ready(vec![v]))
        }
        None => {
            let at = if namespaced {
                format!("{obj_ns}/{name}")
            } else {
                name.clone()
            };
            Ok(Outcome::Waits(format!(
                "input {:?}: {} {at} does not exist",
                r.key, res.kind
            )))
        }
    }
}

/// The name and namespace of the object a resource input reads: the binding's, else the
/// ref's, else the instance's (`nameFrom`, its own namespace); `None` when nothing names it.
fn bound_object(
    comp: &Composition,
    r: &crds::Ref,
    res: &crds::ResourceRef,
    instance: Option<&Value>,
) -> Option<(String, String)> {
    let binding = comp.spec.bindings.iter().find(|b| b.key == r.key);
    let name_from = res.name_from.as_ref().and_then(|path| {
        instance?
            .pointer(&format!("/{}", path.replace('.', "/")))?
            .as_str()
            .filter(|n| !n.is_empty())
            .map(String::from)
    });
    let name = binding
        .map(|b| b.resource.name.clone())
        .or_else(|| res.name.clone())
        .or(name_from);
    let name = name?;
    let given = binding
        .and_then(|b| b.resource.namespace.clone())
        .or_else(|| res.namespace.clone())
        .or_else(|| {
            instance?
                .pointer("/metadata/namespace")?
                .as_str()
                .map(String::from)
        });
    let obj_ns = super::super::tenancy::ref_namespace(
        &comp.namespace().unwrap_or_default(),
        given.as_deref(),
    );
    Some((name, obj_ns))
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
