//! One pass over an Eno Composition or Symphony: Eno's finalizer on it, its `enoki.dev`
//! mirror written from it (never over an object that is not its mirror), the mirror's status
//! written back in Eno's shape; on deletion the mirror deleted first, then the Eno object
//! (and the Eno ResourceSlices it owns) let go.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use crds::eno;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::project::{self, MIRROR};
use super::state::{Bridge, FIELD_MANAGER};
use crate::run::Error;
use crate::run::error::Step;

/// Annotation on a mirror: the digest of what it was last written from.
const SOURCE: &str = "enoki.dev/eno-source";
/// How often an Eno object is looked at again without a change.
const RESYNC: Duration = Duration::from_secs(300);
/// How soon a blocked or deleting one is.
const SOON: Duration = Duration::from_secs(5);

/// An Eno kind with an `enoki.dev` mirror.
pub(crate) trait Mirrored:
    Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Serialize
    + Debug
    + Send
    + Sync
    + 'static
{
    /// The mirror's kind.
    type Mirror: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + Debug
        + Send
        + Sync
        + 'static;
    /// Whether the Eno object owns Eno ResourceSlices (released when it goes).
    const OWNS_SLICES: bool;
    /// The mirror's spec, or why there is none.
    fn mirror_spec(&self) -> Result<Value, String>;
    /// The Synthesizers it needs.
    fn synthesizers(&self) -> Vec<String>;
    /// Its status from its mirror's; `synth` is the mirror Synthesizer's generations.
    fn status_from(&self, mirror: &Self::Mirror, synth: (Option<i64>, Option<i64>)) -> Value;
    /// Its status when it has no mirror for `why` (`None`: the kind has no place for it).
    fn blocked(&self, word: &str, why: &str) -> Option<Value>;
    /// Its status now.
    fn status_now(&self) -> Value;
}

impl Mirrored for eno::Composition {
    type Mirror = crds::Composition;
    const OWNS_SLICES: bool = true;

    fn mirror_spec(&self) -> Result<Value, String> {
        project::composition_spec(self).map(|s| project::to_json(&s))
    }

    fn synthesizers(&self) -> Vec<String> {
        vec![self.spec.synthesizer.name.clone()]
    }

    fn status_from(&self, mirror: &crds::Composition, synth: (Option<i64>, Option<i64>)) -> Value {
        project::to_json(&project::composition_status(
            mirror,
            synth,
            self.status.as_ref(),
        ))
    }

    fn blocked(&self, word: &str, why: &str) -> Option<Value> {
        Some(project::to_json(&project::blocked(
            self.status.as_ref(),
            word,
            why.to_string(),
        )))
    }

    fn status_now(&self) -> Value {
        project::to_json(&self.status.clone().unwrap_or_default())
    }
}

impl Mirrored for eno::Symphony {
    type Mirror = crds::Symphony;
    const OWNS_SLICES: bool = false;

    fn mirror_spec(&self) -> Result<Value, String> {
        project::symphony_spec(self).map(|s| project::to_json(&s))
    }

    fn synthesizers(&self) -> Vec<String> {
        let names = self
            .spec
            .variations
            .iter()
            .map(|v| v.synthesizer.name.clone());
        names.collect()
    }

    fn status_from(&self, mirror: &crds::Symphony, _: (Option<i64>, Option<i64>)) -> Value {
        project::to_json(&project::symphony_status(mirror))
    }

    fn blocked(&self, _: &str, _: &str) -> Option<Value> {
        None
    }

    fn status_now(&self) -> Value {
        project::to_json(&self.status.clone().unwrap_or_default())
    }
}

fn api_err(step: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let step = step.into();
    move |source| Error::Api {
        step: Step::EnoMirror(step),
        source,
    }
}

/// Whether `m` is a mirror, and of the object with `uid`.
fn mirror_of(m: &impl Resource, uid: &str) -> (bool, bool) {
    let labelled = m
        .meta()
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(MIRROR));
    let owned = m.owner_references().iter().any(|o| o.uid == uid);
    (labelled, labelled && owned)
}

/// One pass over an Eno object.
pub(super) async fn reconcile<E: Mirrored>(
    e: Arc<E>,
    bridge: Arc<Bridge>,
) -> Result<Action, Error> {
    let (ns, name) = (e.namespace().unwrap_or_default(), e.name_any());
    let client = bridge.ctx.clusters.client().clone();
    let eapi: Api<E> = Api::namespaced(client.clone(), &ns);
    let mapi: Api<E::Mirror> = Api::namespaced(client.clone(), &ns);
    let uid = e.uid().unwrap_or_default();
    let mirror = mapi
        .get_opt(&name)
        .await
        .map_err(api_err(format!("reading the mirror of {ns}/{name}")))?;
    let (labelled, ours) = mirror
        .as_ref()
        .map_or((false, false), |m| mirror_of(m, &uid));
    if e.meta().deletion_timestamp.is_some() {
        return delete(e.as_ref(), &eapi, &mapi, mirror.filter(|_| ours), &client).await;
    }
    if mirror.is_some() && !labelled {
        let why = format!(
            "{} {ns}/{name} exists and is not this object's mirror: enoki leaves it alone; \
             rename one of them",
            E::Mirror::api_version(&())
        );
        return blocked(&bridge, e.as_ref(), &eapi, "Conflict", why).await;
    }
    if mirror.is_some() && !ours {
        // The mirror of an earlier object of this name, on its way out.
        return Ok(Action::requeue(SOON));
    }
    ensure_finalizer(e.as_ref(), &eapi).await?;
    let spec = match e.mirror_spec() {
        Ok(spec) => spec,
        Err(why) => return blocked(&bridge, e.as_ref(), &eapi, "MissingSynthesizer", why).await,
    };
    let synth = match synthesizer(&bridge, e.as_ref(), mirror.is_none()).await? {
        Ok(synth) => synth,
        Err((word, why)) => return blocked(&bridge, e.as_ref(), &eapi, word, why).await,
    };
    let mirror = write_mirror(e.as_ref(), &mapi, mirror, spec).await?;
    let status = e.status_from(&mirror, synth);
    write_status(e.as_ref(), &eapi, status).await?;
    Ok(Action::requeue(RESYNC))
}

/// The generations of the first Synthesizer's mirror, or why the object cannot have a
/// mirror (a status word and the reason): a Synthesizer whose `enoki.dev` counterpart is not a
/// mirror; while there is no mirror yet, one that has no mirror yet (missing, its module
/// unresolved or not resolved yet), so nothing runs before the module is known.
async fn synthesizer<E: Mirrored>(
    bridge: &Bridge,
    e: &E,
    first: bool,
) -> Result<Result<(Option<i64>, Option<i64>), (&'static str, String)>, Error> {
    let client = bridge.ctx.clusters.client().clone();
    let mirrors: Api<crds::Synthesizer> = Api::all(client.clone());
    let enos: Api<eno::Synthesizer> = Api::all(client);
    let mut gens = (None, None);
    for (i, name) in e.synthesizers().iter().enumerate() {
        let synth = mirrors
            .get_opt(name)
            .await
            .map_err(api_err(format!("reading Synthesizer {name}")))?;
        match synth {
            Some(s) if !mirror_of(&s, "").0 => {
                let why = format!(
                    "Synthesizer {name}: the enoki.dev Synthesizer of that name is not the \
                     mirror of an eno.azure.io one"
                );
                return Ok(Err(("MissingSynthesizer", why)));
            }
            Some(s) if i == 0 => gens = project::generations(&s),
            Some(_) => {}
            None if first => {
                if let Some(why) = bridge.unresolved(name) {
                    return Ok(Err((
                        "MissingSynthesizer",
                        format!("Synthesizer {name}: {why}"),
                    )));
                }
                let eno = enos
                    .get_opt(name)
                    .await
                    .map_err(api_err(format!("reading Eno Synthesizer {name}")))?;
                return Ok(Err(match eno {
                    None => (
                        "MissingSynthesizer",
                        format!("Synthesizer {name} does not exist"),
                    ),
                    Some(_) => (
                        "PendingSynthesis",
                        format!("Synthesizer {name}: its module is being resolved"),
                    ),
                }));
            }
            None => {}
        }
    }
    Ok(Ok(gens))
}

/// The object reports why it has no mirror (status when its kind has one, and an Event).
async fn blocked<E: Mirrored>(
    bridge: &Bridge,
    e: &E,
    eapi: &Api<E>,
    word: &str,
    why: String,
) -> Result<Action, Error> {
    if let Some(status) = e.blocked(word, &why) {
        write_status(e, eapi, status).await?;
    }
    bridge
        .ctx
        .report
        .event_on(&e.object_ref(&()), true, word, "Mirror", why)
        .await;
    Ok(Action::requeue(SOON * 2))
}

/// Adds Eno's finalizer when it is missing (the resourceVersion tested: never a lost write).
async fn ensure_finalizer<E: Mirrored>(e: &E, eapi: &Api<E>) -> Result<(), Error> {
    if e.finalizers().iter().any(|f| f == eno::CLEANUP_FINALIZER) {
        return Ok(());
    }
    let mut finalizers = e.finalizers().to_vec();
    finalizers.push(eno::CLEANUP_FINALIZER.into());
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": e.resource_version()},
        {"op": "add", "path": "/metadata/finalizers", "value": finalizers},
    ]))
    .unwrap_or_default();
    eapi.patch(
        &e.name_any(),
        &PatchParams::default(),
        &Patch::<()>::Json(patch),
    )
    .await
    .map_err(api_err("adding the eno.azure.io/cleanup finalizer"))?;
    Ok(())
}

/// Writes the mirror when what it is written from changed; the mirror as it is now.
async fn write_mirror<E: Mirrored>(
    e: &E,
    mapi: &Api<E::Mirror>,
    mirror: Option<E::Mirror>,
    spec: Value,
) -> Result<E::Mirror, Error> {
    let (labels, mut annotations) = project::mirror_meta(e);
    let source = json!({"labels": labels, "annotations": annotations, "spec": spec});
    let digest = hex::encode(Sha256::digest(source.to_string()));
    if let Some(m) = mirror
        && m.annotations().get(SOURCE) == Some(&digest)
    {
        return Ok(m);
    }
    annotations.insert(SOURCE.into(), digest);
    let owner = e.controller_owner_ref(&()).map(|mut o| {
        o.block_owner_deletion = None;
        o
    });
    let body = json!({
        "apiVersion": E::Mirror::api_version(&()),
        "kind": E::Mirror::kind(&()),
        "metadata": {"name": e.name_any(), "namespace": e.namespace(), "labels": labels,
                     "annotations": annotations, "ownerReferences": [owner]},
        "spec": spec,
    });
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    mapi.patch(&e.name_any(), &pp, &Patch::Apply(&body))
        .await
        .map_err(api_err(format!("writing the mirror of {}", e.name_any())))
}

/// Writes the Eno object's status when it differs.
async fn write_status<E: Mirrored>(e: &E, eapi: &Api<E>, status: Value) -> Result<(), Error> {
    if status == e.status_now() {
        return Ok(());
    }
    let patch: json_patch::Patch =
        serde_json::from_value(json!([{"op": "add", "path": "/status", "value": status}]))
            .unwrap_or_default();
    eapi.patch_status(
        &e.name_any(),
        &PatchParams::default(),
        &Patch::<()>::Json(patch),
    )
    .await
    .map_err(api_err(format!("writing the status of {}", e.name_any())))?;
    Ok(())
}

/// Deletion: the mirror first (its outputs go with it), then the Eno ResourceSlices the
/// object owns and the object itself are let go.
async fn delete<E: Mirrored>(
    e: &E,
    eapi: &Api<E>,
    mapi: &Api<E::Mirror>,
    mirror: Option<E::Mirror>,
    client: &kube::Client,
) -> Result<Action, Error> {
    if !e.finalizers().iter().any(|f| f == eno::CLEANUP_FINALIZER) {
        return Ok(Action::await_change());
    }
    if let Some(m) = mirror {
        if m.meta().deletion_timestamp.is_none() {
            match mapi
                .delete(&m.name_any(), &DeleteParams::background())
                .await
            {
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(api_err("deleting the mirror")(e)),
                Ok(_) => {}
            }
        }
        return Ok(Action::requeue(SOON));
    }
    if E::OWNS_SLICES {
        release_slices(client, e).await?;
    }
    remove_finalizer(e, eapi).await?;
    Ok(Action::await_change())
}

/// Takes Eno's finalizer off the object.
async fn remove_finalizer<K>(obj: &K, api: &Api<K>) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let left: Vec<&String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != eno::CLEANUP_FINALIZER)
        .collect();
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": obj.finalizers()},
        {"op": "replace", "path": "/metadata/finalizers", "value": left},
    ]))
    .unwrap_or_default();
    match api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(api_err("removing the eno.azure.io/cleanup finalizer")(e)),
        Ok(_) => Ok(()),
    }
}

/// Eno ResourceSlices owned by `e` lose Eno's finalizer (no Eno runs to take it off); the
/// garbage collector then deletes them. A cluster without Eno's ResourceSlice CRD has none.
async fn release_slices<E: Mirrored>(client: &kube::Client, e: &E) -> Result<(), Error> {
    let uid = e.uid().unwrap_or_default();
    let api: Api<eno::ResourceSlice> =
        Api::namespaced(client.clone(), &e.namespace().unwrap_or_default());
    let slices = match api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(api_err("listing Eno ResourceSlices")(e)),
    };
    for s in slices.iter().filter(|s| {
        s.owner_references().iter().any(|o| o.uid == uid)
            && s.finalizers().iter().any(|f| f == eno::CLEANUP_FINALIZER)
    }) {
        remove_finalizer(s, &api).await?;
    }
    Ok(())
}

/// Failures are retried with the engine's backoff for objects other than Compositions.
#[allow(clippy::needless_pass_by_value)] // the signature kube-runtime requires
pub(super) fn error_policy<E: Mirrored>(e: Arc<E>, err: &Error, bridge: Arc<Bridge>) -> Action {
    crate::run::policy::other_error_policy(
        &bridge.ctx,
        &crate::run::policy::object_key(e.as_ref()),
        e.object_ref(&()),
        err,
    )
}
