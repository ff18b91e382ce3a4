//! One pass over an Eno Composition or Symphony: Eno's finalizer on it, its `enoki.dev`
//! mirror written from it (never over an object that is not its mirror), the mirror's status
//! written back in Eno's shape; on deletion the mirror deleted first, then the Eno object
//! (and the Eno ResourceSlices it owns) let go. A Composition Eno's Symphony made is not
//! mirrored (the Symphony's mirror makes its own) and is let go when deleted, its resources
//! left (Eno orphans a deleted Symphony's resources).

use std::sync::Arc;
use std::time::Duration;

use crds::eno;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::kinds::Mirrored;
use super::project::{self, MIRROR};
use super::state::Bridge;
use super::writes::{self, api_err};
use crate::run::Error;

/// How often an Eno object is looked at again without a change.
const RESYNC: Duration = Duration::from_secs(300);
/// How soon an object waiting for something that has no watch of its own is.
const SOON: Duration = Duration::from_secs(10);
/// How soon an object blocked until someone edits it (or a watched object changes) is.
const LATER: Duration = Duration::from_secs(60);
/// The finalizer of a deletion that orphans dependents (`kubectl delete --cascade=orphan`).
const ORPHAN: &str = "orphan";

/// What a possible mirror is to the Eno object with `uid`.
#[derive(Clone, Copy, PartialEq)]
enum Relation {
    /// Not a mirror: an object of its own, never written.
    Stranger,
    /// This object's mirror (or a mirror nobody owns, adopted).
    Ours,
    /// The mirror of another object of this name (on its way out).
    Another,
}

fn relation(m: &impl Resource, uid: &str) -> Relation {
    let labelled = m
        .meta()
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(MIRROR));
    let owners = m.owner_references();
    match (
        labelled,
        owners.iter().any(|o| o.uid == uid),
        owners.is_empty(),
    ) {
        (false, _, _) => Relation::Stranger,
        (true, true, _) | (true, false, true) => Relation::Ours,
        (true, false, false) => Relation::Another,
    }
}

/// One pass over an Eno object.
pub(super) async fn reconcile<E: Mirrored>(
    e: Arc<E>,
    bridge: Arc<Bridge>,
) -> Result<Action, Error> {
    let key = crate::run::policy::object_key(e.as_ref());
    let result = pass(e.as_ref(), &bridge).await;
    if result.is_ok() {
        bridge.ctx.state.clear_failures(&key);
    }
    result
}

async fn pass<E: Mirrored>(e: &E, bridge: &Bridge) -> Result<Action, Error> {
    let (ns, name) = (e.namespace().unwrap_or_default(), e.name_any());
    let client = bridge.ctx.clusters.client().clone();
    let eapi: Api<E> = Api::namespaced(client.clone(), &ns);
    let mapi: Api<E::Mirror> = Api::namespaced(client, &ns);
    let deleting = e.meta().deletion_timestamp.is_some();
    if deleting && e.finalizers().iter().any(|f| f == ORPHAN) {
        // `--cascade=orphan`: the garbage collector takes the owner off the mirror first (and
        // off Eno's slices: let go while they are still known to be this object's).
        if E::OWNS_SLICES {
            writes::release_slices(bridge.ctx.clusters.client(), e).await?;
        }
        return Ok(Action::requeue(SOON));
    }
    if e.of_symphony() {
        // Eno's Symphony made it; the Symphony's mirror makes its own Compositions.
        if deleting {
            return writes::delete(bridge, e, &eapi, &mapi, None).await;
        }
        return super::superseded::pass(bridge, e, &eapi).await;
    }
    let mirror = mapi.get_opt(&name).await.map_err(api_err(format!(
        "reading the mirror of {}",
        writes::named(e)
    )))?;
    let uid = e.uid().unwrap_or_default();
    let rel = mirror.as_ref().map(|m| relation(m, &uid));
    if deleting {
        // Only a mirror this object owns goes with it (`--cascade=orphan` keeps it).
        let owned = mirror.filter(|m| m.owner_references().iter().any(|o| o.uid == uid));
        bridge.forget(&uid);
        return writes::delete(bridge, e, &eapi, &mapi, owned).await;
    }
    match rel {
        Some(Relation::Stranger) => {
            let why = format!(
                "{} {ns}/{name} exists and is not this object's mirror: enoki leaves it \
                 alone; rename one of them",
                E::Mirror::api_version(&())
            );
            return blocked(bridge, e, &eapi, "Conflict", why, LATER).await;
        }
        Some(Relation::Another) => return Ok(Action::requeue(SOON)),
        _ => {}
    }
    writes::ensure_finalizer(e, &eapi).await?;
    let spec = match e.mirror_spec() {
        Ok(spec) => spec,
        Err((word, why)) => return blocked(bridge, e, &eapi, word, why, LATER).await,
    };
    let synth = match synthesizer(bridge, e, mirror.is_none()).await? {
        Ok(synth) => synth,
        Err((word, why)) => {
            let after = if word == "PendingSynthesis" {
                SOON
            } else {
                LATER
            };
            return blocked(bridge, e, &eapi, word, why, after).await;
        }
    };
    let mirror = match writes::write_mirror(e, &mapi, mirror, spec).await? {
        writes::Written::Done(m) => m,
        writes::Written::Refused(why) => {
            return blocked(bridge, e, &eapi, "InvalidSpec", why, LATER).await;
        }
    };
    bridge.forget(&uid);
    if E::OWNS_SLICES && E::synthesized(&mirror) {
        writes::mark(e, &eapi, project::MIRRORED, "true").await?;
    }
    let status = e.status_from(&mirror, synth);
    writes::write_status(e, &eapi, status).await?;
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
            Some(s) if relation(&s, "") == Relation::Stranger => {
                let why = format!(
                    "Synthesizer {name}: the enoki.dev Synthesizer of that name is not the \
                     mirror of an eno.azure.io one"
                );
                return Ok(Err(("MissingSynthesizer", why)));
            }
            Some(s) if i == 0 => gens = project::generations(&s),
            Some(_) => {}
            None if first => return Ok(Err(waiting_for(bridge, &enos, name).await?)),
            None => {}
        }
    }
    Ok(Ok(gens))
}

/// Why there is no mirror of the Synthesizer `name` yet.
async fn waiting_for(
    bridge: &Bridge,
    enos: &Api<eno::Synthesizer>,
    name: &str,
) -> Result<(&'static str, String), Error> {
    let eno = enos
        .get_opt(name)
        .await
        .map_err(api_err(format!("reading Eno Synthesizer {name}")))?;
    if eno.is_none() {
        bridge.set_unresolved(name, None);
        return Ok((
            "MissingSynthesizer",
            format!("Synthesizer {name} does not exist"),
        ));
    }
    Ok(match bridge.unresolved(name) {
        Some(why) => ("MissingSynthesizer", format!("Synthesizer {name}: {why}")),
        None => (
            "PendingSynthesis",
            format!("Synthesizer {name}: its module is being resolved"),
        ),
    })
}

/// The object reports why it has no mirror (status when its kind has one), with a Warning
/// Event when the reason is new, and is looked at again `after`.
async fn blocked<E: Mirrored>(
    bridge: &Bridge,
    e: &E,
    eapi: &Api<E>,
    word: &str,
    why: String,
    after: Duration,
) -> Result<Action, Error> {
    if let Some(status) = e.said(word, &why) {
        writes::write_status(e, eapi, status).await?;
    }
    let uid = e.uid().unwrap_or_default();
    if word != "PendingSynthesis" && bridge.say(&uid, &why) {
        let obj = e.object_ref(&());
        bridge
            .ctx
            .report
            .event_on(&obj, true, word, "Mirror", why)
            .await;
    }
    Ok(Action::requeue(after))
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
