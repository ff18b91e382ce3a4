//! Eno Synthesizers: each gets an `enoki.dev` mirror of the same name running the module its
//! `spec.image` (or its `enoki.dev/module` annotation) names. A tag is resolved to the digest
//! it serves when the Synthesizer is first seen or changed — not again on its own, as Eno
//! never looks at a registry: a moved tag is picked up by a change of the Synthesizer.

use std::sync::Arc;
use std::time::Duration;

use crds::eno;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::project::{self, MIRROR};
use super::state::{Bridge, FIELD_MANAGER};
use super::writes::api_err;
use crate::run::Error;

/// Annotation on a Synthesizer mirror: the digest of what its module was resolved from.
const SOURCE: &str = "enoki.dev/eno-source";
/// Annotation on a Synthesizer mirror: the module resolved from it (JSON of
/// `spec.module`), so an edit of the mirror's spec is undone without asking the registry.
const RESOLVED: &str = "enoki.dev/eno-module";
/// How often a Synthesizer is looked at again without a change.
const RESYNC: Duration = Duration::from_secs(300);
/// The first retry of a module that did not resolve; doubled each time, up to [`RESYNC`].
const RETRY: Duration = Duration::from_secs(15);

/// One pass over an Eno Synthesizer.
pub(super) async fn reconcile(
    s: Arc<eno::Synthesizer>,
    bridge: Arc<Bridge>,
) -> Result<Action, Error> {
    if s.meta().deletion_timestamp.is_some() {
        // Its mirror is owned by it: the garbage collector deletes the mirror.
        bridge.set_unresolved(&s.name_any(), None);
        return Ok(Action::await_change());
    }
    let name = s.name_any();
    let api: Api<crds::Synthesizer> = Api::all(bridge.ctx.clusters.client().clone());
    let existing = match mirror_of(&api, &name).await? {
        Ok(existing) => existing,
        Err(why) => return refuse(&bridge, &s, why).await,
    };
    let (labels, mut annotations) = project::mirror_meta(s.as_ref());
    let owner = s.controller_owner_ref(&()).map(|mut o| {
        o.block_owner_deletion = None;
        o
    });
    let source = json!({"labels": labels, "annotations": annotations, "owner": owner,
                        "image": s.spec.image});
    let digest = hex::encode(Sha256::digest(source.to_string()));
    // The module resolved for this very source is kept (recorded on the mirror, apart from
    // its spec, which an edit may change): no registry call.
    let known = existing
        .as_ref()
        .filter(|m| m.annotations().get(SOURCE) == Some(&digest))
        .and_then(|m| m.annotations().get(RESOLVED))
        .and_then(|v| serde_json::from_str::<crds::ModuleSource>(v).ok());
    let resolved = match known {
        Some(module) => Ok(module),
        None => resolve(&bridge, &s).await,
    };
    let spec = match resolved.and_then(|module| project::synthesizer_spec(&s, module)) {
        Ok(spec) => spec,
        Err(why) => return refuse(&bridge, &s, why).await,
    };
    let resolved = project::to_json(&spec.module).to_string();
    annotations.insert(RESOLVED.into(), resolved);
    let carried = |m: &crds::Synthesizer| {
        m.annotations().get(SOURCE) == Some(&digest)
            && m.owner_references()
                .iter()
                .any(|o| Some(&o.uid) == s.uid().as_ref())
            && labels.iter().all(|(k, v)| m.labels().get(k) == Some(v))
            && annotations
                .iter()
                .all(|(k, v)| m.annotations().get(k) == Some(v))
    };
    let mut current = existing.filter(|m| carried(m));
    if current.is_none() {
        annotations.insert(SOURCE.into(), digest.clone());
        let body = json!({
            "apiVersion": crds::API_VERSION, "kind": "Synthesizer",
            "metadata": {"name": name, "labels": labels, "annotations": annotations,
                         "ownerReferences": [owner]},
            "spec": spec,
        });
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        match api.patch(&name, &pp, &Patch::Apply(&body)).await {
            Ok(m) => current = Some(m),
            Err(err) => return refused(&bridge, &s, err).await,
        }
    }
    if let Some(m) = current.filter(|m| m.spec != spec)
        && let Err(err) = replace_spec(&api, &m, &spec).await
    {
        return refused(&bridge, &s, err).await;
    }
    bridge.set_unresolved(&name, None);
    bridge.forget(&s.uid().unwrap_or_default());
    let key = crate::run::policy::object_key(s.as_ref());
    bridge.ctx.state.clear_failures(&key);
    Ok(Action::requeue(RESYNC))
}

/// The mirror of the Synthesizer `name` if there is one, or why there cannot be: an
/// `enoki.dev` Synthesizer of that name that is not a mirror.
async fn mirror_of(
    api: &Api<crds::Synthesizer>,
    name: &str,
) -> Result<Result<Option<crds::Synthesizer>, String>, Error> {
    let existing = api
        .get_opt(name)
        .await
        .map_err(api_err(format!("reading Synthesizer {name}")))?;
    if existing
        .as_ref()
        .is_some_and(|m| !m.labels().contains_key(MIRROR))
    {
        let why = "an enoki.dev Synthesizer of this name exists and is not its mirror: enoki \
                   leaves it alone; rename one of them";
        return Ok(Err(why.to_string()));
    }
    Ok(Ok(existing))
}

/// The mirror's spec replaced whole (someone else's fields on it — `env`, `helm`, `rollout` —
/// go), over the version read; one changed meanwhile is left to the next pass.
async fn replace_spec(
    api: &Api<crds::Synthesizer>,
    m: &crds::Synthesizer,
    spec: &crds::SynthesizerSpec,
) -> Result<(), kube::Error> {
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/metadata/resourceVersion", "value": m.resource_version()},
        {"op": "replace", "path": "/spec", "value": spec},
    ]))
    .unwrap_or_default();
    let pp = PatchParams::default();
    match api
        .patch(&m.name_any(), &pp, &Patch::<()>::Json(patch))
        .await
    {
        Err(kube::Error::Api(st)) if st.code == 409 => Ok(()),
        other => other.map(|_| ()),
    }
}

/// A write of the mirror the API server refused (the mirror's schema: e.g. `builtin:helm`
/// without a chart, more refs than enoki takes) is the Synthesizer's reason to have none; any
/// other failure is retried.
async fn refused(bridge: &Bridge, s: &eno::Synthesizer, err: kube::Error) -> Result<Action, Error> {
    match err {
        kube::Error::Api(st)
            if matches!(st.code, 400 | 422) || st.message.contains("duplicate") =>
        {
            let why = format!(
                "its enoki.dev mirror cannot be made from it: {}",
                st.message
            );
            refuse(bridge, s, why).await
        }
        err => Err(api_err(format!(
            "writing the mirror of Synthesizer {}",
            s.name_any()
        ))(err)),
    }
}

/// The module, a tag resolved to its digest; or why there is none.
async fn resolve(bridge: &Bridge, s: &eno::Synthesizer) -> Result<crds::ModuleSource, String> {
    let mut module = project::module_of(s)?;
    if let Some(reference) = module.oci.take() {
        let opts = &bridge.ctx.opts;
        let pinned = crate::sources::resolve(
            &reference,
            crate::sources::WASM_LAYER_MEDIA_TYPE,
            &opts.sandbox.fetch,
            None,
            opts.modules.module_ca.as_deref(),
        )
        .await
        .map_err(|e| format!("module {reference}: {e}"))?;
        module.oci = Some(pinned);
    }
    Ok(module)
}

/// The Synthesizer has no mirror for `why`: remembered for its Compositions, an Event when
/// the reason is new, and tried again later each time (15 s doubling up to 5 minutes).
async fn refuse(bridge: &Bridge, s: &eno::Synthesizer, why: String) -> Result<Action, Error> {
    let failures = bridge.set_unresolved(&s.name_any(), Some(why.clone()));
    if bridge.say(&s.uid().unwrap_or_default(), &why) {
        let obj = s.object_ref(&());
        let report = &bridge.ctx.report;
        report
            .event_on(&obj, true, "ModuleUnavailable", "Mirror", why)
            .await;
    }
    let delay = RETRY.saturating_mul(1 << failures.saturating_sub(1).min(5));
    Ok(Action::requeue(delay.min(RESYNC)))
}

/// Failures are retried with the engine's backoff for objects other than Compositions.
#[allow(clippy::needless_pass_by_value)] // the signature kube-runtime requires
pub(super) fn error_policy(s: Arc<eno::Synthesizer>, err: &Error, bridge: Arc<Bridge>) -> Action {
    crate::run::policy::other_error_policy(
        &bridge.ctx,
        &crate::run::policy::object_key(s.as_ref()),
        s.object_ref(&()),
        err,
    )
}
