//! Storing a synthesis: its ResourceSlices written (or the unrecorded ones of a failed status
//! write reused), the objects it emits outside the namespace recorded, instance write-backs
//! split off, and the history moved along (previous ← current ← new).

use super::*;
use reconciler_core::model::Outcome;

/// Stores a successful output: keeps the current slices when an input-only change produced
/// identical resources, otherwise writes new slices (with tombstones) and swaps
/// previous ← current ← new. With no synthesis recorded, one stored before whose record was
/// lost ([`crate::run::slices::orphans`]) stands in for the current one: the empty-output
/// guard and the tombstones take it into account, and its slices go once the new synthesis
/// is recorded (its slices hold the tombstones).
pub(super) async fn store(
    ctx: &Arc<Context>,
    comp: &Composition,
    st: &mut CompositionStatus,
    req: &Request<'_>,
    instance: Option<&Value>,
    out: synthesis::Synthesized,
    fp: &str,
) -> Result<SynthesisEnd, Error> {
    let uid = comp.uid().unwrap_or_default();
    publish_result_events(&ctx.report, comp, instance, &out.results).await;
    let kept = out.clone();
    let (items, write_back) = split_write_back(out.items, instance);
    let base = match &st.current_synthesis {
        Some(current) => Some(current.clone()),
        None => crate::run::slices::orphans(ctx, comp, crate::run::slices::Pick::All),
    };
    if refused_empty(ctx, comp, st, (req, fp), base.as_ref(), &items).await? {
        return Ok(SynthesisEnd::Failed(RETRY_CAP));
    }
    let mut next = st.in_flight_synthesis.take().unwrap_or_default();
    next.input_digest = Some(out.input_digest);
    next.output_digest = Some(out.output_digest);
    next.results = out.results;
    next.synthesized = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    let unchanged = unchanged(ctx, comp, st, req, &next, &items).await?;
    let uuid = next.uuid.clone();
    if let Some(mut next) = keep_slices(st, next, unchanged, req.trigger) {
        let bound = req.limits.max_output_bytes;
        match write_new(
            ctx,
            comp,
            st,
            &items,
            &uuid,
            (fp, kept, base.as_ref()),
            bound,
        )
        .await?
        {
            Outcome::Ready(refs) => next.resource_slices = refs,
            Outcome::Waits((requeue, output_fault)) => {
                // Over its Synthesizer's bound: kept in flight, canceled, as a failed run is
                // (a rollout counts it failed). Refused for its namespace's sake (budget,
                // quota, admission): the revision is not blamed.
                if output_fault {
                    next.canceled = Some(Time(k8s_openapi::jiff::Timestamp::now()));
                    st.in_flight_synthesis = Some(next);
                }
                return Ok(SynthesisEnd::Failed(requeue));
            }
        }
        next.outside_namespace = outside_namespace(
            &items,
            &comp.namespace().unwrap_or_default(),
            comp.annotations(),
        );
        let orphaned = st.current_synthesis.is_none() && base.is_some();
        ctx.state.memory.synthesis(&uid, |m| {
            m.unrecorded = Some((fp.to_string(), next.clone()));
            m.orphaned = orphaned;
        });
        st.previous_synthesis = st.current_synthesis.take();
        st.current_synthesis = Some(next);
    }
    if req.synth.spec.for_kind.is_some() {
        ctx.state
            .memory
            .synthesis(&uid, |m| m.status_write = Some(write_back));
    }
    ctx.state.memory.synthesis(&uid, |m| m.failed = None);
    synthesized(st, comp.metadata.generation);
    tracing::info!(synthesis = %uuid, resources = items.len(), unchanged, trigger = %req.trigger, "synthesized");
    Ok(SynthesisEnd::Stored)
}

/// Refuses an empty output that would delete every resource `base` (the current synthesis, or
/// an orphan standing in for it) has; `true` when refused. The output's own fault: the
/// in-flight synthesis is canceled, as a failed run's (a rollout counts it failed).
async fn refused_empty(
    ctx: &Arc<Context>,
    comp: &Composition,
    st: &mut CompositionStatus,
    (req, fp): (&Request<'_>, &str),
    base: Option<&crds::Synthesis>,
    items: &[Value],
) -> Result<bool, Error> {
    let had_resources = match base {
        Some(cur) if items.is_empty() => inputs::emitted(ctx.reads(), comp, cur)
            .await?
            .is_none_or(|e| !e.is_empty()),
        _ => false,
    };
    let Some(message) = refuse_empty(comp, req.synth, had_resources, items) else {
        return Ok(false);
    };
    refuse(ctx, comp, st, fp, reasons::EMPTY_OUTPUT, &message).await;
    if let Some(f) = st.in_flight_synthesis.as_mut() {
        f.canceled = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    }
    Ok(true)
}

/// An identical output (`unchanged`) keeps the current slices: a forced, spec or Synthesizer
/// trigger makes a new synthesis (Eno) stored in them, an input change keeps the current one
/// (its UUID and times). `Some(next)` when new slices are to be written.
fn keep_slices(
    st: &mut CompositionStatus,
    mut next: crds::Synthesis,
    unchanged: bool,
    trigger: &Trigger,
) -> Option<crds::Synthesis> {
    let (true, Some(cur)) = (unchanged, st.current_synthesis.as_ref()) else {
        return Some(next);
    };
    next.resource_slices = cur.resource_slices.clone();
    next.outside_namespace = cur.outside_namespace.clone();
    if !trigger.may_keep_slices() {
        st.previous_synthesis = st.current_synthesis.take();
        tracing::debug!("identical output; the new synthesis keeps the current slices");
    } else {
        next.uuid = cur.uuid.clone();
        next.reconciled = cur.reconciled.clone();
        next.ready = cur.ready.clone();
        next.attempts = 0;
        tracing::debug!("re-synthesized with identical output; slices kept");
    }
    st.current_synthesis = Some(next);
    None
}

/// Identical output keeps the current slices, whatever the trigger (the same bytes from the
/// module, or after an input change the same resources), unless they are gone or hold a
/// Secret in plain text.
async fn unchanged(
    ctx: &Arc<Context>,
    comp: &Composition,
    st: &CompositionStatus,
    req: &Request<'_>,
    next: &crds::Synthesis,
    items: &[Value],
) -> Result<bool, Error> {
    Ok(match &st.current_synthesis {
        Some(_) if *req.trigger == Trigger::SlicesMissing => false,
        Some(cur) if cur.output_digest.as_deref() == next.output_digest.as_deref() => {
            inputs::slices_reusable(ctx, comp, cur).await?
        }
        Some(cur) if req.trigger.may_keep_slices() => {
            inputs::emitted(ctx.reads(), comp, cur)
                .await?
                .is_some_and(|emitted| emitted == items)
                && !inputs::holds_plain_secret(ctx.reads(), comp, cur).await?
        }
        _ => false,
    })
}

/// Slices written before for this Composition whose status write failed: recorded again
/// (same fingerprint; nothing is run or written) or deleted (an older trigger's orphans).
pub(super) async fn reuse_unrecorded(
    ctx: &Arc<Context>,
    comp: &Composition,
    st: &mut CompositionStatus,
    fp: &str,
) -> Option<SynthesisEnd> {
    let uid = comp.uid().unwrap_or_default();
    let (f, next) = ctx.state.memory.synthesis(&uid, |m| m.unrecorded.take())?;
    let landed = [&st.current_synthesis, &st.previous_synthesis]
        .into_iter()
        .flatten()
        .any(|s| s.uuid == next.uuid);
    if landed {
        return None;
    }
    if f != fp {
        if st.current_synthesis.is_some() {
            crate::run::slices::delete(ctx, comp, &next.resource_slices).await;
        } else {
            // Nothing recorded: it may have been applied (a first synthesis), so it stays
            // as the orphan the new synthesis takes its tombstones from.
            ctx.state
                .memory
                .synthesis(&uid, |m| m.unrecorded = Some((f, next)));
        }
        return None;
    }
    tracing::debug!(synthesis = %next.uuid, "recording the slices of a synthesis whose status write failed");
    ctx.state
        .memory
        .synthesis(&uid, |m| m.unrecorded = Some((f, next.clone())));
    st.in_flight_synthesis = None;
    st.previous_synthesis = st.current_synthesis.take();
    st.current_synthesis = Some(next);
    synthesized(st, comp.metadata.generation);
    Some(SynthesisEnd::Stored)
}

/// The status write that would record a new synthesis failed. Transient: its slices stay and
/// the retry records them. Terminal (too large, invalid, forbidden): they are deleted and this
/// fingerprint is not synthesized again before [`RETRY_CAP`].
pub(crate) async fn status_write_failed(ctx: &Arc<Context>, comp: &Composition, e: &Error) {
    if e.is_transient() {
        return;
    }
    let uid = comp.uid().unwrap_or_default();
    let Some((fp, s)) = ctx.state.memory.synthesis(&uid, |m| m.unrecorded.take()) else {
        return;
    };
    // With nothing recorded they may hold what a first synthesis applied: they stay, as
    // orphans the next synthesis or the deletion takes over.
    if comp
        .status
        .as_ref()
        .is_some_and(|st| st.current_synthesis.is_some())
    {
        crate::run::slices::delete(ctx, comp, &s.resource_slices).await;
    }
    ctx.state.memory.synthesis(&uid, |m| {
        m.failed = Some(Failed {
            fingerprint: fp,
            failures: 1,
            retry_at: Instant::now() + RETRY_CAP,
        });
    });
}

/// The items a synthesis emits outside `namespace` (cluster-scoped or elsewhere), each marked
/// `kept` when its `prune: disabled`, `deletion-strategy: orphan` or `disable-reconciliation`
/// (its own, else the Composition's `cascading`) keeps it on Composition deletion: the sweep
/// after the namespace is gone has no manifests to ask. Pure.
pub(crate) fn outside_namespace(
    items: &[Value],
    namespace: &str,
    cascading: &std::collections::BTreeMap<String, String>,
) -> Vec<crds::OutputRef> {
    items
        .iter()
        .filter_map(|i| {
            let ns = i
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default();
            (ns != namespace).then(|| crds::OutputRef {
                api_version: i["apiVersion"].as_str().unwrap_or_default().to_string(),
                kind: i["kind"].as_str().unwrap_or_default().to_string(),
                namespace: ns.to_string(),
                name: i
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                kept: kept_on_deletion(i, cascading),
            })
        })
        .take(super::super::status_write::MAX_OUTSIDE)
        .collect()
}

/// Whether an item's annotations (its own value of a key, else the Composition's) keep it
/// when its Composition is deleted. Overrides are not evaluated here.
fn kept_on_deletion(item: &Value, cascading: &std::collections::BTreeMap<String, String>) -> bool {
    // Read as the planner reads them (each spelling its own way).
    let Ok(key) = plan::ResourceKey::of(item) else {
        return false;
    };
    let annotations = plan::plan::annotations_of(item);
    plan::settings::parse(&key, &annotations, cascading).is_ok_and(|s| {
        s.prune_disabled
            || s.disable_reconciliation
            || s.deletion_strategy == plan::settings::DeletionStrategy::Orphan
    })
}

/// Status write-backs (instance mode) are not resources: kept aside, applied to the
/// instance's status subresource.
pub(super) fn split_write_back(
    items: Vec<Value>,
    instance: Option<&Value>,
) -> (Vec<Value>, Option<Value>) {
    let Some(me) = instance else {
        return (items, None);
    };
    let mut write_back = None;
    let items = items
        .into_iter()
        .filter(|i| {
            if inputs::is_status_write_back(i, me) {
                write_back = Some(i.clone());
                false
            } else {
                true
            }
        })
        .collect();
    (items, write_back)
}

/// Writes the slices of a new synthesis (its items plus tombstones for what `base`, the
/// current synthesis or an orphan standing in for it, had). `Ok(Outcome::Waits((requeue,
/// output_fault)))`: refused for good (condition set, not retried for this fingerprint);
/// `output_fault` when the output is over its Synthesizer's bound (not its namespace's budget,
/// not the API server's refusal). A transient failure keeps the output for the retry.
pub(super) async fn write_new(
    ctx: &Arc<Context>,
    comp: &Composition,
    st: &mut CompositionStatus,
    items: &[Value],
    uuid: &str,
    (fp, kept, base): (&str, synthesis::Synthesized, Option<&crds::Synthesis>),
    bound: usize,
) -> Result<Outcome<Vec<crds::ResourceSliceRef>, (Duration, bool)>, Error> {
    let uid = comp.uid().unwrap_or_default();
    // Secrets are sealed: their values never sit in a slice in plain text.
    let mut manifests = Vec::with_capacity(items.len());
    for i in items {
        let entry = ctx
            .slice_keys
            .entry(&uid, i)
            .map_err(|source| Error::SealSecret {
                name: i
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                source,
            })?;
        manifests.push(entry);
    }
    // The Synthesizer's bound is on what the synthesis emits; tombstones (identities) count
    // only against the namespace's budget.
    let emitted = slices::manifest_bytes(&manifests);
    manifests
        .extend(crate::run::slices::history::tombstones(ctx.reads(), comp, base, items).await?);
    let bytes = slices::manifest_bytes(&manifests);
    let charged = super::super::budget::charged(bytes, manifests.len());
    if let Some(message) = super::super::budget::too_large(ctx, comp, st, (emitted, charged), bound)
    {
        refuse(ctx, comp, st, fp, reasons::OUTPUT_TOO_LARGE, &message).await;
        return Ok(Outcome::Waits((RETRY_CAP, emitted > bound)));
    }
    let shard = ctx
        .limits
        .shards
        .borrow()
        .label_value_of(&comp.uid().unwrap_or_default());
    let to = (&ctx.clusters, &ctx.state.memory, shard);
    match slices::write(to, comp, uuid, manifests).await {
        Ok(refs) => {
            let ns = comp.namespace().unwrap_or_default();
            ctx.limits.synthesis_rates.wrote(&ns, bytes);
            Ok(Outcome::Ready(refs))
        }
        Err(e) if e.is_transient() => {
            ctx.state
                .memory
                .synthesis(&uid, |m| m.pending_output = Some((fp.to_string(), kept)));
            Err(e)
        }
        Err(e) => {
            let message = super::super::super::error::chain(&e);
            refuse(ctx, comp, st, fp, reasons::SLICE_WRITE_FAILED, &message).await;
            Ok(Outcome::Waits((RETRY_CAP, false)))
        }
    }
}

/// The next synthesis waits for the synthesis rates: `Synthesized=False`
/// (`SynthesisRateLimited`), the current synthesis still enforced.
pub(super) fn rate_limited(
    st: &mut CompositionStatus,
    comp: &Composition,
    trigger: &Trigger,
    held: &crate::run::synthesis_rate::Held,
) {
    tracing::debug!(wait = ?held.wait, %trigger, "synthesis rate");
    // No countdown in the message: the status is written once per wait, not every pass.
    let message = format!(
        "the next synthesis ({trigger}) waits: {}; the current one is still applied",
        held.message
    );
    condition::set_condition(
        &mut st.conditions,
        conditions::SYNTHESIZED,
        false,
        reasons::SYNTHESIS_RATE_LIMITED,
        &message,
        comp.metadata.generation,
    );
    st.simplified = Some(crds::SimplifiedStatus {
        status: crds::StatusWord::SynthesisRateLimited,
        error: None,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn what_is_kept_on_deletion_is_not_swept_with_the_namespace() {
        let crd = |name: &str, annotations: Value| {
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": name, "annotations": annotations}})
        };
        let items = [
            crd("swept", json!({})),
            crd("pruning-off", json!({"enoki.dev/prune": "disabled"})),
            crd(
                "orphan",
                json!({"eno.azure.io/deletion-strategy": "Orphan"}),
            ),
            crd(
                "untouched",
                json!({"enoki.dev/disable-reconciliation": "true"}),
            ),
            crd("pruning-on", json!({"enoki.dev/prune": "enabled"})),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "home", "namespace": "apps"}}),
        ];
        let kept = |cascading: &[(&str, &str)]| -> Vec<(String, bool)> {
            let cascading = cascading
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            outside_namespace(&items, "apps", &cascading)
                .into_iter()
                .map(|o| (o.name, o.kept))
                .collect()
        };
        let names = |v: Vec<(String, bool)>| {
            v.into_iter()
                .filter(|(_, k)| !k)
                .map(|(n, _)| n)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(kept(&[])), ["swept", "pruning-on"]);
        // The Composition's value, unless the item has its own.
        assert_eq!(
            names(kept(&[("enoki.dev/prune", "disabled")])),
            ["pruning-on"]
        );
        assert_eq!(kept(&[]).len(), 5, "every outside item is recorded");
    }
}
