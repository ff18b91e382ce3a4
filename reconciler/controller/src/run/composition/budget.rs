//! What one synthesis may store: its Synthesizer's output bound (`spec.limits.output`, else
//! `--synthesis-output`) and its namespace's share of ResourceSlices
//! (`--namespace-slice-budget`), both checked before anything is written.

use kube::ResourceExt;

use super::super::Context;
use super::super::slices::{STATE_BYTES, owned_by, stored_bytes};
use crds::{Composition, CompositionStatus};

/// What a slice's manifests count against the namespace's budget: their bytes, and
/// [`STATE_BYTES`] for each one's recorded state — the controller holds a few hundred bytes per
/// object however small it is, so a namespace of many tiny objects is bounded too. Pure.
pub(crate) fn charged(bytes: usize, manifests: usize) -> usize {
    bytes.saturating_add(STATE_BYTES.saturating_mul(manifests))
}

/// Why a new synthesis is refused; `None`: it fits. `emitted`: the bytes of what it emits
/// (its Synthesizer's bound); `bytes`: what all its slices count against the namespace's
/// budget ([`charged`]: tombstones too).
pub(crate) fn too_large(
    ctx: &Context,
    comp: &Composition,
    st: &CompositionStatus,
    (emitted, bytes): (usize, usize),
    bound: usize,
) -> Option<String> {
    let name = comp.name_any();
    if emitted > bound {
        return Some(format!(
            "the synthesis would store {emitted} bytes in ResourceSlices; Synthesizer {:?} \
             allows {bound} (spec.limits.output, else the controller's --synthesis-output; \
             at most --max-synthesis-output)",
            comp.spec.synthesizer.name
        ));
    }
    let budget = ctx.opts.storage.namespace_slice_bytes;
    if budget == 0 {
        return None;
    }
    let ns = comp.namespace().unwrap_or_default();
    let (held, freed) = namespace_bytes(&ctx.caches, comp, st);
    // A synthesis that adds no more than it frees (the previous one is deleted once it is
    // stored) always passes: a namespace over its budget can still shrink.
    (held.saturating_add(bytes) > budget && bytes > freed).then(|| {
        format!(
            "namespace {ns:?} holds {held} bytes of ResourceSlices for its other syntheses; \
             {bytes} more for Composition {name:?} would pass its budget of {budget} bytes \
             (--namespace-slice-budget; each object counts {STATE_BYTES} bytes more for its \
             recorded state)"
        )
    })
}

/// Bytes of ResourceSlices in `comp`'s namespace that stay once a new synthesis of `comp` is
/// stored — every slice there but those of `comp` outside its current synthesis (the current
/// one becomes the previous; older ones are deleted) — and the bytes of those it frees. From
/// the slice cache (with `--shards`, the Compositions of the shards this replica serves).
fn namespace_bytes(
    caches: &crate::run::context::Caches,
    comp: &Composition,
    st: &CompositionStatus,
) -> (usize, usize) {
    let ns = comp.namespace().unwrap_or_default();
    let uid = comp.uid().unwrap_or_default();
    let current: Vec<&str> = st
        .current_synthesis
        .iter()
        .flat_map(|s| s.resource_slices.iter().map(|r| r.name.as_str()))
        .collect();
    let (mut held, mut freed) = (0_usize, 0_usize);
    for s in caches.slices.state() {
        if s.namespace().as_deref() != Some(ns.as_str()) {
            continue;
        }
        let bytes = charged(stored_bytes(&s), s.spec.resources.len());
        if owned_by(&s, &uid) && !current.contains(&s.name_any().as_str()) {
            freed += bytes;
        } else {
            held += bytes;
        }
    }
    (held, freed)
}
