//! What one synthesis may store: its Synthesizer's output bound (`spec.limits.output`, else
//! `--synthesis-output`) and its namespace's share of ResourceSlices
//! (`--namespace-slice-budget`), both checked before anything is written.

use kube::ResourceExt;

use super::super::Context;
use super::slices::{owned_by, stored_bytes};
use crds::{Composition, CompositionStatus};

/// Why a new synthesis of `bytes` (its slices' manifests) is refused; `None`: it fits.
pub(crate) fn too_large(
    ctx: &Context,
    comp: &Composition,
    st: &CompositionStatus,
    bytes: usize,
    bound: usize,
) -> Option<String> {
    let name = comp.name_any();
    if bytes > bound {
        return Some(format!(
            "the synthesis would store {bytes} bytes in ResourceSlices; Synthesizer {:?} \
             allows {bound} (spec.limits.output, else the controller's --synthesis-output; \
             at most --max-synthesis-output)",
            comp.spec.synthesizer.name
        ));
    }
    let budget = ctx.opts.namespace_slice_bytes;
    if budget == 0 {
        return None;
    }
    let ns = comp.namespace().unwrap_or_default();
    let held = namespace_bytes(ctx, comp, st);
    (held.saturating_add(bytes) > budget).then(|| {
        format!(
            "namespace {ns:?} holds {held} bytes of ResourceSlices for its other syntheses; \
             {bytes} more for Composition {name:?} would pass its budget of {budget} bytes \
             (--namespace-slice-budget)"
        )
    })
}

/// Bytes of ResourceSlices in `comp`'s namespace that stay once a new synthesis of `comp` is
/// stored: every slice there but those of `comp` outside its current synthesis (the current
/// one becomes the previous; older ones are deleted). From the slice cache (with `--shards`,
/// the Compositions of the shards this replica serves).
fn namespace_bytes(ctx: &Context, comp: &Composition, st: &CompositionStatus) -> usize {
    let ns = comp.namespace().unwrap_or_default();
    let uid = comp.uid().unwrap_or_default();
    let current: Vec<&str> = st
        .current_synthesis
        .iter()
        .flat_map(|s| s.resource_slices.iter().map(|r| r.name.as_str()))
        .collect();
    ctx.slices
        .state()
        .iter()
        .filter(|s| s.namespace().as_deref() == Some(ns.as_str()))
        .filter(|s| !owned_by(s, &uid) || current.contains(&s.name_any().as_str()))
        .map(|s| stored_bytes(s))
        .sum()
}
