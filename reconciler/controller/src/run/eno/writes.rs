//! The bridge's writes: Eno's finalizer on and off (guarded by the resourceVersion read: a
//! stale copy gets a Conflict and is retried), the mirror, the Eno object's status, and the
//! deletion path.

use std::time::Duration;

use crds::eno;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::kinds::Mirrored;
use super::state::{Bridge, FIELD_MANAGER};
use crate::run::Error;
use crate::run::error::Step;

/// Annotation on a mirror: the digest of what it was last written from.
const SOURCE: &str = "enoki.dev/eno-source";
/// How soon a deletion under way is looked at again.
const SOON: Duration = Duration::from_secs(2);
/// The status word of an Eno Composition whose mirror is being deleted (Eno's).
const DELETING: &str = "Deleting";

pub(super) fn api_err(step: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let step = step.into();
    move |source| Error::Api {
        step: Step::EnoMirror(step),
        source,
    }
}

/// `Kind ns/name` of an object, for messages.
pub(super) fn named<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    format!(
        "{} {}/{}",
        K::kind(&()),
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}

/// Sets the object's finalizers to `finalizers`, only over the version read.
async fn set_finalizers<K>(obj: &K, api: &Api<K>, finalizers: Vec<String>) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({"metadata": {"resourceVersion": obj.resource_version(),
                                    "finalizers": finalizers}});
    match api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(api_err(format!("setting the finalizers of {}", named(obj)))(e)),
        Ok(_) => Ok(()),
    }
}

/// Adds Eno's finalizer when it is missing.
pub(super) async fn ensure_finalizer<E: Mirrored>(e: &E, eapi: &Api<E>) -> Result<(), Error> {
    if e.finalizers().iter().any(|f| f == eno::CLEANUP_FINALIZER) {
        return Ok(());
    }
    let mut finalizers = e.finalizers().to_vec();
    finalizers.push(eno::CLEANUP_FINALIZER.into());
    set_finalizers(e, eapi, finalizers).await
}

/// Takes Eno's finalizer off.
async fn remove_finalizer<K>(obj: &K, api: &Api<K>) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let left = obj.finalizers().iter();
    let left = left.filter(|f| *f != eno::CLEANUP_FINALIZER).cloned();
    set_finalizers(obj, api, left.collect()).await
}

/// A write of a mirror: done (the mirror as it is now), or refused by the API server (a spec
/// enoki's schema refuses), with its message.
pub(super) enum Written<M> {
    Done(M),
    Refused(String),
}

/// The message of a refusal of the mirror's content (400, 422).
fn refusal(err: &kube::Error) -> Option<String> {
    match err {
        kube::Error::Api(s) if matches!(s.code, 400 | 422) || s.message.contains("duplicate") => {
            Some(s.message.clone())
        }
        _ => None,
    }
}

/// Writes the mirror when it differs from what the Eno object says (its spec, the labels and
/// annotations carried, the owner): an edit made to the mirror itself is undone (its spec is
/// replaced whole, a field another writer added included).
pub(super) async fn write_mirror<E: Mirrored>(
    e: &E,
    mapi: &Api<E::Mirror>,
    mirror: Option<E::Mirror>,
    spec: Value,
) -> Result<Written<E::Mirror>, Error> {
    let (labels, mut annotations) = super::project::mirror_meta(e);
    let owner = e.controller_owner_ref(&()).map(|mut o| {
        o.block_owner_deletion = None;
        o
    });
    let source = json!({"labels": labels, "annotations": annotations, "owner": owner});
    let digest = hex::encode(Sha256::digest(source.to_string()));
    let what = || format!("writing the mirror of {}", named(e));
    let refused = |m: String| {
        let kind = E::Mirror::api_version(&());
        Written::Refused(format!("its {kind} mirror cannot be made from it: {m}"))
    };
    let current = mirror.filter(|m| {
        let owned = m
            .owner_references()
            .iter()
            .any(|o| Some(&o.uid) == e.uid().as_ref());
        let carried = labels.iter().all(|(k, v)| m.labels().get(k) == Some(v))
            && annotations
                .iter()
                .all(|(k, v)| m.annotations().get(k) == Some(v));
        owned && carried && m.annotations().get(SOURCE) == Some(&digest)
    });
    let m = match current {
        Some(m) => m,
        None => {
            annotations.insert(SOURCE.into(), digest);
            let body = json!({
                "apiVersion": E::Mirror::api_version(&()),
                "kind": E::Mirror::kind(&()),
                "metadata": {"name": e.name_any(), "namespace": e.namespace(),
                             "labels": labels, "annotations": annotations,
                             "ownerReferences": [owner]},
                "spec": spec,
            });
            let pp = PatchParams::apply(FIELD_MANAGER).force();
            match mapi.patch(&e.name_any(), &pp, &Patch::Apply(&body)).await {
                Ok(m) => m,
                Err(err) => match refusal(&err) {
                    Some(msg) => return Ok(refused(msg)),
                    None => return Err(api_err(what())(err)),
                },
            }
        }
    };
    if super::project::to_json(&m)["spec"] == spec {
        return Ok(Written::Done(m));
    }
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/metadata/resourceVersion", "value": m.resource_version()},
        {"op": "replace", "path": "/spec", "value": spec},
    ]))
    .unwrap_or_default();
    let pp = PatchParams::default();
    match mapi
        .patch(&e.name_any(), &pp, &Patch::<()>::Json(patch))
        .await
    {
        Ok(m) => Ok(Written::Done(m)),
        // Changed meanwhile: its watch event brings the next pass.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Written::Done(m)),
        Err(err) => match refusal(&err) {
            Some(msg) => Ok(refused(msg)),
            None => Err(api_err(what())(err)),
        },
    }
}

/// Sets the annotation `key` on the Eno object when it has another value (one key, so no
/// version guard is needed).
pub(super) async fn mark<E: Mirrored>(
    e: &E,
    eapi: &Api<E>,
    key: &str,
    value: &str,
) -> Result<(), Error> {
    if e.annotations().get(key).is_some_and(|v| v == value) {
        return Ok(());
    }
    let patch = json!({"metadata": {"annotations": {key: value}}});
    eapi.patch(
        &e.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(api_err(format!("annotating {} {key}", named(e))))?;
    Ok(())
}

/// Writes the Eno object's status when it differs.
pub(super) async fn write_status<E: Mirrored>(
    e: &E,
    eapi: &Api<E>,
    status: Value,
) -> Result<(), Error> {
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
    .map_err(api_err(format!("writing the status of {}", named(e))))?;
    Ok(())
}

/// Deletion: the mirror first (its outputs go with it, `deletion-strategy` honoured; the
/// Composition says `Deleting` meanwhile), then the Eno ResourceSlices the object owns and the
/// object itself are let go. An Eno Composition that never had a mirror (enoki never
/// reconciled it: not marked `enoki.dev/eno-mirrored`) leaves what Eno applied in place: a
/// Warning Event names it.
pub(super) async fn delete<E: Mirrored>(
    bridge: &Bridge,
    e: &E,
    eapi: &Api<E>,
    mapi: &Api<E::Mirror>,
    mirror: Option<E::Mirror>,
) -> Result<Action, Error> {
    if !e.finalizers().iter().any(|f| f == eno::CLEANUP_FINALIZER) {
        return Ok(Action::await_change());
    }
    let client = bridge.ctx.clusters.client();
    if let Some(m) = mirror {
        if m.meta().deletion_timestamp.is_none() {
            match mapi
                .delete(&m.name_any(), &DeleteParams::background())
                .await
            {
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(err) => return Err(api_err(format!("deleting {}", named(&m)))(err)),
                Ok(_) => {}
            }
        }
        if let Some(status) = e.said(DELETING, "") {
            write_status(e, eapi, status).await?;
        }
        return Ok(Action::requeue(SOON));
    }
    if E::OWNS_SLICES {
        let was_mirrored = e.annotations().contains_key(super::project::MIRRORED);
        if !was_mirrored && !e.of_symphony() {
            let left = left_in_place(client, e).await?;
            if !left.is_empty() {
                let note = format!(
                    "deleted before enoki reconciled it: what Eno applied is left in place \
                     ({})",
                    left.join(", ")
                );
                let obj = e.object_ref(&());
                bridge
                    .ctx
                    .report
                    .event_on(&obj, true, "LeftInPlace", "Delete", note)
                    .await;
            }
        }
        release_slices(client, e).await?;
    }
    remove_finalizer(e, eapi).await?;
    Ok(Action::await_change())
}

/// The Eno ResourceSlices `e` owns (metadata only), page by page.
async fn owned_slices<E: Mirrored>(
    client: &kube::Client,
    e: &E,
) -> Result<Vec<kube::core::PartialObjectMeta<eno::ResourceSlice>>, Error> {
    let uid = e.uid().unwrap_or_default();
    let api: Api<eno::ResourceSlice> =
        Api::namespaced(client.clone(), &e.namespace().unwrap_or_default());
    let mut owned = Vec::new();
    let mut lp = ListParams::default().limit(500);
    loop {
        let page = match api.list_metadata(&lp).await {
            Ok(page) => page,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(owned),
            Err(err) => return Err(api_err("listing Eno ResourceSlices")(err)),
        };
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        owned.extend(
            page.items
                .into_iter()
                .filter(|s| s.owner_references().iter().any(|o| o.uid == uid)),
        );
        match next {
            Some(c) => lp = lp.continue_token(&c),
            None => return Ok(owned),
        }
    }
}

/// `Kind ns/name` of what `e`'s Eno ResourceSlices list (at most 10, then how many more).
async fn left_in_place<E: Mirrored>(client: &kube::Client, e: &E) -> Result<Vec<String>, Error> {
    let api: Api<eno::ResourceSlice> =
        Api::namespaced(client.clone(), &e.namespace().unwrap_or_default());
    let mut left = Vec::new();
    for s in owned_slices(client, e).await? {
        let Some(slice) = api
            .get_opt(&s.name_any())
            .await
            .map_err(api_err("reading an Eno ResourceSlice"))?
        else {
            continue;
        };
        for r in slice.spec.resources.iter().filter(|r| !r.deleted) {
            let m: Value = serde_json::from_str(&r.manifest).unwrap_or(Value::Null);
            let ns = m["metadata"]["namespace"].as_str().unwrap_or_default();
            let at = if ns.is_empty() {
                String::new()
            } else {
                format!("{ns}/")
            };
            let name = m["metadata"]["name"].as_str().unwrap_or("?");
            left.push(format!("{} {at}{name}", m["kind"].as_str().unwrap_or("?")));
        }
    }
    if left.len() > 10 {
        let more = left.len() - 10;
        left.truncate(10);
        left.push(format!("{more} more"));
    }
    Ok(left)
}

/// Eno ResourceSlices owned by `e` lose Eno's finalizer (no Eno runs to take it off); the
/// garbage collector then deletes them. A cluster without Eno's ResourceSlice CRD has none.
pub(super) async fn release_slices<E: Mirrored>(client: &kube::Client, e: &E) -> Result<(), Error> {
    let api: Api<eno::ResourceSlice> =
        Api::namespaced(client.clone(), &e.namespace().unwrap_or_default());
    for s in owned_slices(client, e).await? {
        if s.finalizers().iter().any(|f| f == eno::CLEANUP_FINALIZER) {
            let left = s
                .finalizers()
                .iter()
                .filter(|f| *f != eno::CLEANUP_FINALIZER);
            let patch = json!({"metadata": {"resourceVersion": s.resource_version(),
                                            "finalizers": left.collect::<Vec<_>>()}});
            match api
                .patch(
                    &s.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Err(kube::Error::Api(st)) if st.code == 404 => {}
                Err(err) => {
                    let step = format!("letting Eno ResourceSlice {} go", s.name_any());
                    return Err(api_err(step)(err));
                }
                Ok(_) => {}
            }
        }
    }
    Ok(())
}
