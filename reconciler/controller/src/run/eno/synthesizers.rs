//! Eno Synthesizers: each gets an `enoki.dev` mirror of the same name running the module its
//! `spec.image` (or its `enoki.dev/module` annotation) names; a tag is resolved to the digest
//! it serves and looked at again every 5 minutes.

use std::sync::Arc;
use std::time::Duration;

use crds::eno;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::project::{self, MIRROR};
use super::state::{Bridge, FIELD_MANAGER};
use crate::run::Error;
use crate::run::error::Step;

/// How often a tag is resolved again.
const RESOLVE_AGAIN: Duration = Duration::from_secs(300);
/// How soon a Synthesizer without a module is looked at again.
const RETRY: Duration = Duration::from_secs(30);

/// One pass over an Eno Synthesizer.
pub(super) async fn reconcile(
    s: Arc<eno::Synthesizer>,
    bridge: Arc<Bridge>,
) -> Result<Action, Error> {
    if s.meta().deletion_timestamp.is_some() {
        // Its mirror is owned by it: the garbage collector deletes the mirror.
        return Ok(Action::await_change());
    }
    let name = s.name_any();
    let api: Api<crds::Synthesizer> = Api::all(bridge.ctx.clusters.client().clone());
    let existing = api.get_opt(&name).await.map_err(|source| Error::Api {
        step: Step::EnoMirror(format!("reading Synthesizer {name}")),
        source,
    })?;
    if existing
        .as_ref()
        .is_some_and(|m| !m.labels().contains_key(MIRROR))
    {
        let why = "an enoki.dev Synthesizer of this name exists and is not its mirror: enoki \
                   leaves it alone; rename one of them"
            .to_string();
        return refuse(&bridge, &s, why).await;
    }
    let module = match resolve(&bridge, &s).await {
        Ok(module) => module,
        Err(why) => return refuse(&bridge, &s, why).await,
    };
    bridge.set_unresolved(&name, None);
    let spec = project::synthesizer_spec(&s, module);
    let (labels, annotations) = project::mirror_meta(s.as_ref());
    let owner = s.controller_owner_ref(&()).map(|mut o| {
        o.block_owner_deletion = None;
        o
    });
    let body = json!({
        "apiVersion": crds::API_VERSION, "kind": "Synthesizer",
        "metadata": {"name": name, "labels": labels, "annotations": annotations,
                     "ownerReferences": [owner]},
        "spec": spec,
    });
    let unchanged = existing.as_ref().is_some_and(|m| {
        project::to_json(&m.spec) == project::to_json(&spec)
            && annotations
                .iter()
                .all(|(k, v)| m.annotations().get(k) == Some(v))
            && labels.iter().all(|(k, v)| m.labels().get(k) == Some(v))
    });
    if !unchanged {
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        api.patch(&name, &pp, &Patch::Apply(&body))
            .await
            .map_err(|source| Error::Api {
                step: Step::EnoMirror(format!("writing the mirror of Synthesizer {name}")),
                source,
            })?;
    }
    Ok(Action::requeue(RESOLVE_AGAIN))
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

/// The Synthesizer has no mirror for `why`: remembered for its Compositions, and an Event.
async fn refuse(bridge: &Bridge, s: &eno::Synthesizer, why: String) -> Result<Action, Error> {
    bridge.set_unresolved(&s.name_any(), Some(why.clone()));
    bridge
        .ctx
        .report
        .event_on(&s.object_ref(&()), true, "ModuleUnavailable", "Mirror", why)
        .await;
    Ok(Action::requeue(RETRY))
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
