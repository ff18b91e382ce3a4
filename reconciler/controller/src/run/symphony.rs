//! The Symphony controller (Eno semantics): one Composition per variation, named
//! `<symphony>-<synthesizer>`, owned by the Symphony. Variations inherit the Symphony's bindings
//! and environment (the variation's win by key), their `dependsOn` (by synthesizer name) become
//! Composition `dependsOn`, a Composition whose variation is removed is deleted normally (its
//! resources are cleaned up), and the status rolls up the non-optional Compositions. Deleting
//! the Symphony labels every Composition `symphony-deleting` and deletes it: like Eno, the
//! managed resources are orphaned, whatever a resource's own deletion strategy says.
//!
//! Variation labels and annotations are merged into what others set, and change in Eno's two
//! phases: first every key to be removed (set to `""` in the variation, or no longer asked
//! for) is removed from every Composition, then — on a later pass that finds nothing to
//! remove — the new values are applied. A key moving between Compositions is never on two at
//! once. A variation in a `dependsOn` cycle is not created or changed, and keeps its
//! Composition.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::error::Step;
use super::{Context, Error, api_err};

mod status;
use crds::names::{FINALIZER, SYMPHONY_FIELD_MANAGER, labels, reasons};
use crds::{Binding, Composition, CompositionRef, CompositionSpec, EnvVar, Symphony, Variation};
use status::roll_up;

mod desired;
use desired::{applied_keys, desired_composition, stale_keys, topo_order, up_to_date};

/// The name of a variation's Composition: `<symphony>-<synthesizer>`; past 253 characters,
/// its first 244 and 8 hex digits of the whole name's hash (two long names that share a
/// prefix stay apart, and no name ends in `-` or `.`).
pub fn composition_name(symphony: &str, synthesizer: &str) -> String {
    let name = format!("{symphony}-{synthesizer}");
    if name.len() <= 253 {
        return name;
    }
    use sha2::Digest;
    let hash = sha2::Sha256::digest(name.as_bytes());
    let stem = name
        .get(..244)
        .unwrap_or_default()
        .trim_end_matches(['-', '.']);
    format!("{stem}-{}", &hex::encode(hash)[..8])
}

/// The value of a Symphony's Compositions' `enoki.dev/symphony` label: its name, hashed past
/// a label value's 63 characters.
fn symphony_label(symphony: &str) -> String {
    super::slices::label_value(symphony)
}

/// Reconciles one Symphony.
///
/// # Errors
/// Transient API failures (retried by the error policy).
pub async fn reconcile(sym: Arc<Symphony>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = super::policy::object_key(sym.as_ref());
    let result = reconcile_once(sym, ctx.clone()).await;
    if result.is_ok() {
        ctx.state.clear_failures(&key);
    }
    result
}

async fn reconcile_once(sym: Arc<Symphony>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = sym.namespace().unwrap_or_default();
    let name = sym.name_any();
    let syms: Api<Symphony> = Api::namespaced(ctx.clusters.client().clone(), &ns);
    let comps: Api<Composition> = Api::namespaced(ctx.clusters.client().clone(), &ns);
    let has_finalizer = sym.finalizers().iter().any(|f| f == FINALIZER);
    if sym.metadata.deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(Action::await_change());
        }
        // From the API server, not the cache: a Composition the cache has not seen yet must
        // not be left to the garbage collector (its resources would go with it).
        let owned = listed_compositions(&comps, &name).await?;
        return delete(&ctx.opts.apply, &sym, &syms, &comps, &owned).await;
    }
    let owned = owned_compositions(&ctx.caches, &comps, &name).await?;
    let refused = crate::synthesis::symphony_spec_too_large(&sym.spec).or_else(|| {
        crate::synthesis::symphony_over_budget(&sym.spec, ctx.opts.storage.max_symphony_bytes)
    });
    if let Some(note) = refused {
        refuse(&ctx.report, &sym, &syms, &note).await?;
        return Ok(Action::await_change());
    }
    if !has_finalizer {
        super::finalizers::set_cleanup_finalizer(&syms, sym.as_ref(), true, sym.resource_version())
            .await
            .map_err(api_err(Step::SymphonyFinalizer(true)))?;
    }
    if prune_metadata(&sym, &comps, &owned).await? {
        // Phase two (setting) waits until no Composition has anything left to prune (a writer
        // that keeps re-adding a removed key is met once a second, not in a hot loop).
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    // What the list showed, updated with what each apply returned: no second list.
    let mut current: BTreeMap<String, Composition> =
        owned.into_iter().map(|c| (c.name_any(), c)).collect();
    if let Some(wait) = apply_variations(&ctx, &sym, &comps, &mut current).await? {
        // The namespace owes bytes: the rest is written once it does not. Nothing is deleted
        // and the status is not written meanwhile (its observedGeneration stays behind: not
        // done yet, as kstatus reads it).
        return Ok(Action::requeue(wait.max(Duration::from_secs(1))));
    }
    let cycle: Vec<String> = topo_order(&sym.spec.variations)
        .1
        .iter()
        .map(|v| v.synthesizer.name.clone())
        .collect();
    let mut status = roll_up(&sym, &current, composition_name, &cycle);
    if let Some(old) = &sym.status {
        reconciler_core::condition::keep_transitions(&mut status.conditions, &old.conditions);
    }
    let all_ready = status.ready.is_some();
    write_status(&syms, &sym, &status).await?;
    // Watch-driven: a change of the Symphony or of one of its Compositions wakes it; the
    // resync is a safety net (a Symphony not Ready yet looks again at most once a minute).
    Ok(Action::requeue(if all_ready {
        ctx.opts.resync
    } else {
        ctx.opts.resync.min(Duration::from_secs(60))
    }))
}

/// Writes `status` when it differs from the Symphony's; whether it wrote.
async fn write_status(
    syms: &Api<Symphony>,
    sym: &Symphony,
    status: &crds::SymphonyStatus,
) -> Result<bool, Error> {
    if sym.status.as_ref() == Some(status) {
        return Ok(false);
    }
    syms.patch_status(
        &sym.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .map_err(api_err(Step::SymphonyStatus))?;
    Ok(true)
}

/// Refuses a Symphony's spec: nothing is generated from it until the spec changes (its
/// Compositions would each carry the padding). One status write and one Event per refused
/// spec, not one per pass.
async fn refuse(
    report: &crate::run::context::Reporter,
    sym: &Symphony,
    syms: &Api<Symphony>,
    note: &str,
) -> Result<(), Error> {
    let name = sym.name_any();
    tracing::warn!(symphony = %name, %note);
    let note = format!("{note}; no Composition is created or changed");
    let status = status::refused(sym, &note);
    if !write_status(syms, sym, &status).await? {
        return Ok(());
    }
    report
        .event_on(
            &sym.object_ref(&()),
            true,
            reasons::INVALID_SPEC,
            "Reconcile",
            note,
        )
        .await;
    Ok(())
}

/// The Symphony's Compositions: from the cache of generated Compositions, or a list where
/// there is none.
async fn owned_compositions(
    caches: &crate::run::context::Caches,
    comps: &Api<Composition>,
    symphony: &str,
) -> Result<Vec<Composition>, Error> {
    // A cache whose first list has not completed within a few seconds is not waited for.
    let ready = |store: &kube::runtime::reflector::Store<Composition>| {
        let store = store.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(5), store.wait_until_ready())
                .await
                .is_ok_and(|r| r.is_ok())
        }
    };
    if let Some(store) = caches.symphony_compositions.get()
        && ready(store).await
    {
        let ns = comps.namespace().map(str::to_string);
        return Ok(store
            .state()
            .iter()
            .filter(|c| c.namespace() == ns)
            .filter(|c| c.labels().get(labels::SYMPHONY) == Some(&symphony_label(symphony)))
            .map(|c| c.as_ref().clone())
            .collect());
    }
    listed_compositions(comps, symphony).await
}

/// The Symphony's Compositions as the API server lists them (page by page).
async fn listed_compositions(
    comps: &Api<Composition>,
    symphony: &str,
) -> Result<Vec<Composition>, Error> {
    let lp = ListParams::default().labels(&format!(
        "{}={}",
        labels::SYMPHONY,
        symphony_label(symphony)
    ));
    let fetch = |lp: ListParams| {
        let comps = comps.clone();
        async move { comps.list(&lp).await }
    };
    match super::paging::list_bounded(&lp, 0, fetch, |c| Some((c, 0))).await {
        Ok(found) => Ok(found),
        Err(super::paging::Stop::Api(e)) => Err(api_err(Step::ListVariations)(e)),
        Err(super::paging::Stop::TooLarge(_)) => Ok(Vec::new()),
    }
}

/// Deletion: label every Composition `symphony-deleting` (its resources are orphaned, as in
/// Eno), delete them, and release the finalizer once none is left.
async fn delete(
    opts: &crate::run::ApplyOptions,
    sym: &Symphony,
    syms: &Api<Symphony>,
    comps: &Api<Composition>,
    owned: &[Composition],
) -> Result<Action, Error> {
    for c in owned {
        if c.labels()
            .get(labels::SYMPHONY_DELETING)
            .map(String::as_str)
            != Some("true")
        {
            comps
                .patch(
                    &c.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"metadata": {"labels": {labels::SYMPHONY_DELETING: "true"}}}),
                    ),
                )
                .await
                .map_err(api_err(Step::MarkVariationDeleting))?;
        }
        if c.metadata.deletion_timestamp.is_none() {
            let _ = comps.delete(&c.name_any(), &DeleteParams::default()).await;
        }
    }
    if owned.is_empty() {
        super::finalizers::set_cleanup_finalizer(syms, sym, false, sym.resource_version())
            .await
            .map_err(api_err(Step::SymphonyFinalizer(false)))?;
        return Ok(Action::await_change());
    }
    Ok(Action::requeue(opts.readiness_poll))
}

/// Applies one Composition per variation (in dependency order; a cycle is an Event) and
/// deletes the Compositions of removed variations. The bytes written count against the
/// namespace's `--namespace-slice-write-rate` (when the API server stored something new);
/// while the namespace owes bytes, this and every later write wait, and so do the deletions
/// (`Some`: how long).
async fn apply_variations(
    ctx: &Context,
    sym: &Symphony,
    comps: &Api<Composition>,
    current: &mut BTreeMap<String, Composition>,
) -> Result<Option<Duration>, Error> {
    let ns = sym.namespace().unwrap_or_default();
    let name = sym.name_any();
    let (order, stuck) = topo_order(&sym.spec.variations);
    if !stuck.is_empty() {
        let names: Vec<&str> = stuck.iter().map(|v| v.synthesizer.name.as_str()).collect();
        let note = format!(
            "variations {} form a dependsOn cycle and are not created",
            names.join(", ")
        );
        tracing::warn!(symphony = %name, %note);
        ctx.report
            .event_on(
                &sym.object_ref(&()),
                true,
                reasons::CIRCULAR_DEPENDENCY,
                "Reconcile",
                note,
            )
            .await;
    }
    let pp = PatchParams::apply(SYMPHONY_FIELD_MANAGER).force();
    for v in order {
        let desired = desired_composition(sym, v);
        let comp_name = composition_name(&name, &v.synthesizer.name);
        // Written only when it would change something; one being deleted is created again
        // once it is gone (its deletion wakes the Symphony).
        if current
            .get(&comp_name)
            .is_some_and(|c| c.metadata.deletion_timestamp.is_some() || up_to_date(c, &desired))
        {
            continue;
        }
        if let Some(wait) = ctx.limits.synthesis_rates.owed(&ns) {
            tracing::info!(symphony = %name, composition = %comp_name, wait = ?wait,
                "its namespace owes bytes (--namespace-slice-write-rate); the writes wait");
            return Ok(Some(wait));
        }
        let applied = comps
            .patch(&comp_name, &pp, &Patch::Apply(&desired))
            .await
            .map_err(api_err(Step::ApplyVariation(comp_name.clone())))?;
        // Charged only when the API server stored something new.
        let before = current.get(&comp_name).and_then(|c| c.resource_version());
        if applied.resource_version() != before {
            let bytes = serde_json::to_vec(&desired).map_or(0, |b| b.len());
            ctx.limits.synthesis_rates.wrote(&ns, bytes);
        }
        current.insert(comp_name, applied);
    }
    // Every variation keeps its Composition, those caught in a dependsOn cycle too (they are
    // only not created or changed, as in Eno).
    let wanted: BTreeSet<String> = sym
        .spec
        .variations
        .iter()
        .map(|v| composition_name(&name, &v.synthesizer.name))
        .collect();
    for c in current.values() {
        if !wanted.contains(&c.name_any()) && c.metadata.deletion_timestamp.is_none() {
            tracing::info!(symphony = %name, composition = %c.name_any(), "variation removed; deleting its Composition");
            comps
                .delete(&c.name_any(), &DeleteParams::default())
                .await
                .map_err(api_err(Step::DeleteVariation))?;
        }
    }
    Ok(None)
}

/// Phase one of Eno's two-phase protocol for variation labels and annotations
/// (docs/symphony.md): every key to be removed from a variation's Composition is removed from
/// all of them before any Composition is applied, so a key moving from one Composition to
/// another is never on both. Removed: keys the variation sets to `""` (whoever set them, as
/// in Eno) and keys this controller applied before but no longer asks for. `true` when it
/// wrote (the caller looks again before phase two).
async fn prune_metadata(
    sym: &Symphony,
    comps: &Api<Composition>,
    owned: &[Composition],
) -> Result<bool, Error> {
    let mut wrote = false;
    // Variations in a dependsOn cycle are not changed at all.
    let (order, _) = topo_order(&sym.spec.variations);
    for v in order {
        let name = composition_name(&sym.name_any(), &v.synthesizer.name);
        let Some(c) = owned
            .iter()
            .find(|c| c.name_any() == name && c.metadata.deletion_timestamp.is_none())
        else {
            continue;
        };
        let desired = desired_composition(sym, v);
        let (mine_annotations, mine_labels) = applied_keys(c);
        let annotations = stale_keys(
            c.annotations(),
            &v.annotations,
            &desired["metadata"]["annotations"],
            &mine_annotations,
        );
        let labels = stale_keys(
            c.labels(),
            &v.labels,
            &desired["metadata"]["labels"],
            &mine_labels,
        );
        if annotations.is_empty() && labels.is_empty() {
            continue;
        }
        let patch = json!({"metadata": {
            "resourceVersion": c.resource_version(),
            "annotations": annotations,
            "labels": labels,
        }});
        comps
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_err(Step::PruneVariation(name.clone())))?;
        wrote = true;
    }
    Ok(wrote)
}

#[cfg(test)]
mod tests;
