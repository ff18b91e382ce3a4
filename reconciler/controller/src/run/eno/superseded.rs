//! A Composition Eno's Symphony made, after the move: the Symphony's mirror makes its own
//! `enoki.dev` Composition for the variation (`<symphony>-<synthesizer>`), which adopts what
//! Eno applied. This one says so in its status and is deleted once its Symphony no longer has
//! its variation, as Eno deletes the Composition of a removed variation (its resources go with
//! the `enoki.dev` Composition of that variation, which enoki's Symphony deletes).

use std::time::Duration;

use crds::eno;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kube::runtime::controller::Action;

use super::kinds::Mirrored;
use super::project;
use super::state::Bridge;
use super::writes::{self, api_err};
use crate::run::Error;

/// How often such a Composition is looked at again (its Symphony may drop the variation).
const AGAIN: Duration = Duration::from_secs(60);

/// One pass over a Composition Eno's Symphony made.
pub(super) async fn pass<E: Mirrored>(
    bridge: &Bridge,
    e: &E,
    eapi: &Api<E>,
) -> Result<Action, Error> {
    let ns = e.namespace().unwrap_or_default();
    let owner = super::kinds::symphony_owner(e);
    let (Some(owner), Some(synth)) = (owner, e.synthesizers().into_iter().next()) else {
        // Its Symphony was deleted orphaning it (or is gone): it stays as it is.
        return Ok(Action::await_change());
    };
    let client = bridge.ctx.clusters.client().clone();
    let syms: Api<eno::Symphony> = Api::namespaced(client.clone(), &ns);
    let sym = syms
        .get_opt(&owner.name)
        .await
        .map_err(api_err(format!("reading Eno Symphony {ns}/{}", owner.name)))?;
    let Some(sym) = sym.filter(|s| s.uid().as_deref() == Some(owner.uid.as_str())) else {
        // The garbage collector deletes it with its Symphony.
        return Ok(Action::await_change());
    };
    writes::mark(e, eapi, project::SUPERSEDED, &owner.uid).await?;
    if !sym
        .spec
        .variations
        .iter()
        .any(|v| v.synthesizer.name == synth)
    {
        match eapi
            .delete(&e.name_any(), &DeleteParams::background())
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(err) => return Err(api_err(format!("deleting {}", writes::named(e)))(err)),
            Ok(_) => {}
        }
        return Ok(Action::await_change());
    }
    // Named only once it exists and is the Symphony mirror's.
    let name = crate::run::symphony::composition_name(&owner.name, &synth);
    let comps: Api<crds::Composition> = Api::namespaced(client, &ns);
    let made = comps
        .get_opt(&name)
        .await
        .map_err(api_err(format!("reading Composition {ns}/{name}")))?
        .filter(|c| c.owner_references().iter().any(|o| o.kind == "Symphony"));
    let why = match made {
        Some(_) => format!(
            "its variation is reconciled by enoki as Composition.enoki.dev {ns}/{name}, made by \
             the mirror of Symphony {}",
            owner.name
        ),
        None => format!(
            "its variation is to be reconciled by the enoki.dev mirror of Symphony {}, which \
             has not made its Composition (see the Symphony's Events)",
            owner.name
        ),
    };
    if let Some(status) = e.said("Superseded", &why) {
        writes::write_status(e, eapi, status).await?;
    }
    Ok(Action::requeue(AGAIN))
}
