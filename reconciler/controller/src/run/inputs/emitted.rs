//! What a synthesis's ResourceSlices hold, read for a new synthesis: the manifests, their
//! identities, and whether the slices may be kept for an identical output.

use kube::ResourceExt;
use serde_json::Value;

use crate::run::context::Reads;
use crate::run::{Context, Error};
use crds::Composition;

/// The manifests (tombstones excluded) of `synthesis`'s ResourceSlices, in slice order;
/// `None` when a slice is missing.
pub async fn emitted(
    rd: Reads<'_>,
    comp: &Composition,
    synthesis: &crds::Synthesis,
) -> Result<Option<Vec<Value>>, Error> {
    let mut out = Vec::new();
    for r in &synthesis.resource_slices {
        let Some((slice, _)) = crate::run::slices::read_full(rd, comp, &r.name).await? else {
            return Ok(None);
        };
        let uid = comp.uid().unwrap_or_default();
        out.extend(
            slice
                .spec
                .resources
                .iter()
                .filter(|m| !m.deleted)
                .filter_map(|m| rd.keys.manifest(&uid, m)),
        );
    }
    Ok(Some(out))
}

/// The identities (`apiVersion`, `kind`, name, namespace) of what `synthesis` emits
/// (tombstones excluded), from the slice cache's compact copies: no slice is read whole.
pub(super) async fn emitted_identities(
    rd: Reads<'_>,
    comp: &Composition,
    synthesis: &crds::Synthesis,
) -> Result<Vec<Value>, Error> {
    let mut out = Vec::new();
    for r in &synthesis.resource_slices {
        if let Some((slice, _)) = crate::run::slices::read(rd, comp, &r.name).await? {
            out.extend(
                slice
                    .spec
                    .resources
                    .iter()
                    .filter(|m| !m.deleted)
                    .filter_map(|m| serde_json::from_str::<Value>(&m.manifest).ok()),
            );
        }
    }
    Ok(out)
}

/// Whether `synthesis`'s slices may be kept for a new synthesis of identical output: they all
/// exist (and open), and every Secret in them is sealed under the current slice key (a key
/// rotated since is taken up by the next synthesis, as the rotation in docs/operations.md
/// asks).
pub async fn slices_reusable(
    ctx: &Context,
    comp: &Composition,
    synthesis: &crds::Synthesis,
) -> Result<bool, Error> {
    if !crate::run::slices::all_exist(ctx, comp, synthesis).await? {
        return Ok(false);
    }
    for r in &synthesis.resource_slices {
        let Some((slice, _)) = crate::run::slices::read(ctx.reads(), comp, &r.name).await? else {
            return Ok(false);
        };
        let stale = slice.spec.resources.iter().any(|m| {
            crate::run::sealing::plain_secret(m)
                || (!m.deleted
                    && m.sealed
                        .as_deref()
                        .is_some_and(|s| !ctx.slice_keys.is_current(s)))
        });
        if stale {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether one of `synthesis`'s slices holds a Secret in plain text (written before Secrets
/// were sealed): the next synthesis writes new slices even when its output is unchanged.
pub async fn holds_plain_secret(
    rd: crate::run::context::Reads<'_>,
    comp: &Composition,
    synthesis: &crds::Synthesis,
) -> Result<bool, Error> {
    for r in &synthesis.resource_slices {
        if let Some((slice, _)) = crate::run::slices::read(rd, comp, &r.name).await?
            && slice
                .spec
                .resources
                .iter()
                .any(crate::run::sealing::plain_secret)
        {
            return Ok(true);
        }
    }
    Ok(false)
}
