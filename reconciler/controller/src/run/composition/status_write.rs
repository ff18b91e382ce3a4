//! Writing a Composition's status, and reading it back consistently.
//!
//! The controller hands a reconcile the Composition from its cache, which may not yet hold
//! the status enoki wrote in the previous pass. [`fresh`] substitutes the status enoki last
//! wrote until the cache has caught up (same resourceVersion), so a pass never starts from a
//! stale synthesis. [`write`] patches only when the status changed, nulling what it drops,
//! and writes only a [`bounded`] status: whatever a synthesizer reports or a spec holds, the
//! status enoki writes stays far below etcd's object size limit.

use std::sync::Arc;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::super::{Context, Error};
use crds::{Composition, CompositionStatus};

/// `comp` with the status enoki last wrote, when the cache has not caught up with it: only
/// while the cache still shows the version enoki's write was based on. Once the cache moved
/// on — to enoki's write or to anyone's later one (a status edit by someone else) — the cache
/// is the truth and the memory is dropped.
pub(crate) fn fresh(
    state: &crate::run::context::State,
    comp: Arc<Composition>,
) -> Arc<Composition> {
    let uid = comp.uid().unwrap_or_default();
    let rv = comp.resource_version().unwrap_or_default();
    let written = state.memory.reports(&uid, |m| match &m.written {
        // Kept while the cache shows a version before it (also when the status it wrote
        // equals the cached one: its resourceVersion is still the newer).
        Some(w) if w.behind.contains(&rv) => Some(w.status.clone()),
        Some(_) => {
            m.written = None;
            None
        }
        None => None,
    });
    match written {
        Some(st) if comp.status.as_ref() != Some(&st) => {
            let mut c = (*comp).clone();
            c.status = Some(st);
            Arc::new(c)
        }
        _ => comp,
    }
}

/// Results kept per synthesis.
pub(crate) const MAX_RESULTS: usize = 100;

/// Most objects outside the namespace recorded per synthesis.
pub(crate) const MAX_OUTSIDE: usize = 300;
/// Bytes kept of a result's message.
const MAX_RESULT_TEXT: usize = 1024;
/// Bytes kept of a condition message or `simplified.error`.
const MAX_TEXT: usize = 4000;
/// Dependents or dependencies listed in `dependencyStatus`.
const MAX_BLOCKED_BY: usize = 50;
/// Past this serialized size, results are dropped (the previous synthesis's first).
pub(crate) const MAX_STATUS_BYTES: usize = 256 * 1024;

fn clip(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str(" …(truncated)");
    }
}

/// `st` as enoki writes it: every text and list filled from synthesizer output or other
/// objects bounded (at most [`MAX_RESULTS`] results per synthesis, messages clipped, at most
/// [`MAX_STATUS_BYTES`] in all). Idempotent. Pure.
pub(crate) fn bounded(st: &CompositionStatus) -> CompositionStatus {
    let mut st = st.clone();
    for c in &mut st.conditions {
        clip(&mut c.message, MAX_TEXT);
    }
    if let Some(e) = st.simplified.as_mut().and_then(|s| s.error.as_mut()) {
        clip(e, MAX_TEXT);
    }
    if let Some(d) = &mut st.dependency_status {
        d.blocked_by.truncate(MAX_BLOCKED_BY);
    }
    for s in [
        &mut st.current_synthesis,
        &mut st.previous_synthesis,
        &mut st.in_flight_synthesis,
    ]
    .into_iter()
    .flatten()
    {
        s.results.truncate(MAX_RESULTS);
        s.outside_namespace.retain(|o| {
            o.name.len() + o.namespace.len() + o.kind.len() + o.api_version.len() <= 600
        });
        s.outside_namespace.truncate(MAX_OUTSIDE);
        for r in &mut s.results {
            clip(&mut r.message, MAX_RESULT_TEXT);
            if let Some(x) = &mut r.resource_ref {
                clip(x, 512);
            }
            r.tags.retain(|k, v| k.len() + v.len() <= 512);
        }
    }
    let size = |st: &CompositionStatus| serde_json::to_vec(st).map_or(0, |v| v.len());
    for drop in 0..5 {
        if size(&st) <= MAX_STATUS_BYTES {
            break;
        }
        match drop {
            0..=2 => {
                let target = match drop {
                    0 => &mut st.previous_synthesis,
                    1 => &mut st.in_flight_synthesis,
                    _ => &mut st.current_synthesis,
                };
                if let Some(s) = target {
                    s.results.clear();
                }
            }
            // Then the outside-namespace records of syntheses that are not current: the
            // current one's are what a namespace deletion sweeps.
            3 => {
                if let Some(s) = &mut st.previous_synthesis {
                    s.outside_namespace.clear();
                }
            }
            _ => {
                if let Some(s) = &mut st.in_flight_synthesis {
                    s.outside_namespace.clear();
                }
            }
        }
    }
    st
}

/// Writes `st` ([`bounded`]) when it differs from the status the server holds, as far as this
/// pass knows: `comp`'s, or the one enoki wrote since (an earlier write of this pass, or of
/// one before it that the cache has not caught up with).
///
/// The write is a merge patch that names the resourceVersion it was computed from: a pass
/// that started before someone else wrote the Composition (a newer pass on another replica,
/// a user, the Symphony controller) gets a `409 Conflict` instead of overwriting the newer
/// status, and its retry starts from what is there.
///
/// # Errors
/// [`Error::WriteStatus`] (a Conflict is transient: `error_policy` retries the pass within
/// seconds).
pub(crate) async fn write(
    ctx: &Context,
    comp: &Composition,
    st: &CompositionStatus,
) -> Result<(), Error> {
    let st = &bounded(st);
    // Every status a pass settles on sets the health series, written or unchanged.
    ctx.report.metrics.health.record(
        &super::super::metrics::CompositionLabel {
            namespace: comp.namespace().unwrap_or_default(),
            name: comp.name_any(),
        },
        st,
        comp.metadata.creation_timestamp.as_ref(),
        ctx.opts.stuck_threshold,
    );
    let uid = comp.uid().unwrap_or_default();
    let cached = comp.resource_version().unwrap_or_default();
    let (base, before) = base_of(&ctx.state, &uid, &cached, comp.status.as_ref());
    if before.as_ref() == Some(st) {
        return Ok(());
    }
    let mut patch = serde_json::to_value(st).unwrap_or_default();
    if let Some(old) = before.as_ref().and_then(|o| serde_json::to_value(o).ok()) {
        null_dropped(&mut patch, &old);
    }
    let api: Api<Composition> = Api::namespaced(
        ctx.clusters.client().clone(),
        &comp.namespace().unwrap_or_default(),
    );
    let written = patch_at(&api, comp, base, before.as_ref(), patch).await?;
    let rv = written.resource_version().unwrap_or_default();
    tracing::debug!(resource_version = %rv, "status written");
    // Remembered against the cache's version, which [`fresh`] and the next write compare.
    ctx.state.memory.reports(&uid, |m| {
        let mut behind = match m.written.take() {
            Some(w) if w.behind.contains(&cached) => {
                let mut behind = w.behind;
                behind.push(w.rv);
                behind
            }
            _ => vec![cached],
        };
        // A cache that lags by more than this many writes is taken as it is.
        if behind.len() > 16 {
            behind.remove(0);
        }
        m.written = Some(crate::run::memory::Written {
            rv,
            behind,
            status: st.clone(),
        });
    });
    Ok(())
}

/// Patches `patch` into the status at resourceVersion `base`. On a Conflict the Composition
/// is read again: when only its metadata moved (same generation, the status the pass started
/// from — a label, an annotation, a finalizer), the write is made again at the new version
/// (at most twice); when its spec or status moved, the Conflict is returned and the pass
/// runs again from the newer version.
async fn patch_at(
    api: &Api<Composition>,
    comp: &Composition,
    mut base: String,
    before: Option<&CompositionStatus>,
    patch: Value,
) -> Result<Composition, Error> {
    let name = comp.name_any();
    let mut attempts = 0;
    loop {
        let mut body = json!({ "status": patch });
        if !base.is_empty() {
            body["metadata"] = json!({ "resourceVersion": base });
        }
        let err = match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(body))
            .await
        {
            Ok(written) => return Ok(written),
            Err(source) => Error::WriteStatus { source },
        };
        attempts += 1;
        if !err.is_conflict() || attempts > 2 {
            return Err(err);
        }
        let now = api
            .get(&name)
            .await
            .map_err(|source| Error::WriteStatus { source })?;
        let same_spec =
            now.metadata.generation == comp.metadata.generation && now.uid() == comp.uid();
        // Compared as written (times at the second the API server keeps).
        let as_json = |s: Option<&CompositionStatus>| serde_json::to_value(s).ok();
        if !same_spec || as_json(now.status.as_ref()) != as_json(before) {
            return Err(err);
        }
        base = now.resource_version().unwrap_or_default();
    }
}

/// The resourceVersion and status a write of Composition `uid` starts from: enoki's own last
/// write when the cache (at `cached`) has not caught up with it, else the cache's.
fn base_of(
    state: &crate::run::context::State,
    uid: &str,
    cached: &str,
    status: Option<&CompositionStatus>,
) -> (String, Option<CompositionStatus>) {
    state.memory.reports(uid, |m| match &m.written {
        Some(w) if w.behind.iter().any(|b| b == cached) => (w.rv.clone(), Some(w.status.clone())),
        _ => (cached.to_string(), status.cloned()),
    })
}

/// A merge patch leaves out what the new status no longer has, at any depth: null every key
/// `old` has and `new` lacks (a finished in-flight synthesis, a cleared dependency status, the
/// `simplified.error` of a failure that is over), recursing where both are objects. Arrays
/// are replaced whole by a merge patch and need nothing.
fn null_dropped(new: &mut Value, old: &Value) {
    let (Some(new), Some(old)) = (new.as_object_mut(), old.as_object()) else {
        return;
    };
    for (key, was) in old {
        match new.get_mut(key) {
            None => {
                new.insert(key.clone(), Value::Null);
            }
            Some(now) => null_dropped(now, was),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cleared_nested_field_is_nulled_in_the_merge_patch() {
        let old = json!({"simplified": {"status": "SynthesisBackoff", "error": "compile timed out"},
            "inFlightSynthesis": {"uuid": "u"}, "conditions": [{"type": "Ready"}]});
        let mut new = json!({"simplified": {"status": "Ready"}, "conditions": []});
        null_dropped(&mut new, &old);
        assert_eq!(
            new,
            json!({"simplified": {"status": "Ready", "error": null},
                "inFlightSynthesis": null, "conditions": []})
        );
    }

    #[test]
    fn the_status_enoki_writes_is_bounded_and_bounding_is_idempotent() {
        let result = crds::SynthesisResult {
            severity: crds::Severity::Warning,
            message: "x".repeat(10_000),
            ..Default::default()
        };
        let synthesis = crds::Synthesis {
            results: vec![result; 10_000],
            ..Default::default()
        };
        let st = CompositionStatus {
            current_synthesis: Some(synthesis.clone()),
            previous_synthesis: Some(synthesis),
            conditions: vec![
                serde_json::from_value(serde_json::json!({"type": "Ready", "status": "False",
                    "reason": "R", "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "message": "m".repeat(100_000)}))
                .unwrap(),
            ],
            ..Default::default()
        };
        let b = bounded(&st);
        assert!(serde_json::to_vec(&b).unwrap().len() <= MAX_STATUS_BYTES);
        assert!(b.conditions[0].message.len() < 4100);
        assert_eq!(bounded(&b), b, "idempotent");
        let cur = b.current_synthesis.as_ref().unwrap();
        assert!(cur.results.len() <= MAX_RESULTS);
    }

    /// Objects outside the namespace at the longest names, in every synthesis the status
    /// holds: still within the bound, the current synthesis's records kept.
    #[test]
    fn outside_namespace_records_stay_within_the_bound() {
        let long = |c: char, n: usize| std::iter::repeat_n(c, n).collect::<String>();
        let out = crds::OutputRef {
            kept: false,
            api_version: long('a', 100),
            kind: long('k', 60),
            namespace: long('n', 63),
            name: long('x', 253),
        };
        let synthesis = crds::Synthesis {
            outside_namespace: vec![out; 2_000],
            ..Default::default()
        };
        let st = CompositionStatus {
            current_synthesis: Some(synthesis.clone()),
            previous_synthesis: Some(synthesis.clone()),
            in_flight_synthesis: Some(synthesis),
            ..Default::default()
        };
        let b = bounded(&st);
        assert!(serde_json::to_vec(&b).unwrap().len() <= MAX_STATUS_BYTES);
        let cur = b.current_synthesis.as_ref().unwrap();
        assert_eq!(cur.outside_namespace.len(), MAX_OUTSIDE);
        assert_eq!(bounded(&b), b, "idempotent");
    }
}
