//! Runs a synthesis and stores its output as the Composition's current synthesis.
//!
//! A synthesis runs at most once per trigger fingerprint (what the Composition, Synthesizer
//! and inputs looked like): a failed one is retried only with backoff, and an output whose
//! slices could not be written yet is kept in memory so the retry writes it without running
//! the synthesizer again. Syntheses share a global number of slots
//! (`--max-concurrent-syntheses`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use serde_json::Value;

use super::super::slices;
use super::super::{Context, Error, inputs};
use super::observe::{Gathered, object_ref_of};
use crate::synthesis;
use crds::names::{conditions, reasons};
use crds::{Composition, CompositionStatus, InputRevision, Synthesis, Synthesizer};
use reconciler_core::condition;
use reconciler_core::trigger::Trigger;

pub(crate) use reconciler_core::model::Failed;

mod input;
mod store;
pub(crate) use input::input_for;
pub(crate) use store::*;

/// The first retry of a failed synthesis; doubles per failure up to [`RETRY_CAP`].
const RETRY_BASE: Duration = Duration::from_secs(30);
const RETRY_CAP: Duration = Duration::from_secs(900);

/// The delay before synthesis attempt `failures + 1` of an unchanged fingerprint.
pub fn retry_delay(failures: u32) -> Duration {
    RETRY_BASE
        .saturating_mul(1u32 << failures.saturating_sub(1).min(10))
        .min(RETRY_CAP)
}

/// Everything one synthesis needs.
pub(crate) struct Request<'a> {
    pub synth: &'a Synthesizer,
    pub module: synthesis::Module,
    pub gathered: Gathered,
    pub revisions: Vec<InputRevision>,
    pub forced: Option<String>,
    pub trigger: &'a Trigger,
    /// The observed outputs when already read (`watchOutputs`); read here otherwise.
    pub observed: Option<Vec<Value>>,
    pub limits: wasm_host::RunLimits,
}

/// How a synthesis ended when it did not produce a new current synthesis.
pub(crate) enum SynthesisEnd {
    /// `st.current_synthesis` is the new synthesis.
    Stored,
    /// It failed (condition set in `st`); look again after this long.
    Failed(Duration),
}

/// What makes two syntheses of `comp` the same one: its generation, the Synthesizer's, the
/// module, the inputs and a forced trigger.
pub(super) fn fingerprint(comp: &Composition, req: &Request<'_>) -> String {
    let v = serde_json::json!([
        comp.metadata.generation,
        req.synth.metadata.generation,
        req.module.digest(),
        req.revisions,
        req.forced,
    ]);
    inputs::digest(&v)
}

/// Runs the synthesis of `req` (or reuses its pending output) and stores it.
///
/// # Errors
/// Transient failures writing the slices (the output is kept for the retry).
pub(crate) async fn synthesize(
    ctx: &Arc<Context>,
    comp: &Composition,
    st: &mut CompositionStatus,
    req: Request<'_>,
) -> Result<SynthesisEnd, Error> {
    let uid = comp.uid().unwrap_or_default();
    let fp = fingerprint(comp, &req);
    let now = Instant::now();
    let (failed, pending) = ctx.memory.synthesis.with(&uid, |m| {
        let failed = m.failed.clone().filter(|f| f.fingerprint == fp);
        let pending = m
            .pending_output
            .take()
            .filter(|(f, _)| *f == fp)
            .map(|(_, o)| o);
        (failed, pending)
    });
    if let Some(stored) = reuse_unrecorded(ctx, comp, st, &fp).await {
        return Ok(stored);
    }
    if let Some(f) = &failed
        && f.retry_at > now
    {
        tracing::debug!(retry_in = ?(f.retry_at - now), "synthesis failed before; waiting");
        return Ok(SynthesisEnd::Failed(f.retry_at - now));
    }
    if pending.is_none()
        && let Err(held) = ctx.synthesis_rates.take(
            &comp.namespace().unwrap_or_default(),
            &format!(
                "{}/{}",
                comp.namespace().unwrap_or_default(),
                comp.name_any()
            ),
        )
    {
        rate_limited(st, comp, req.trigger, &held);
        return Ok(SynthesisEnd::Failed(held.wait.max(Duration::from_secs(1))));
    }
    let attempts = st.in_flight_synthesis.as_ref().map_or(0, |s| s.attempts) + 1;
    let uuid = new_uuid();
    st.in_flight_synthesis = Some(Synthesis {
        uuid: uuid.clone(),
        observed_composition_generation: comp.metadata.generation,
        observed_synthesizer_generation: req.synth.metadata.generation,
        input_revisions: req.revisions.clone(),
        module_digest: Some(req.module.digest()),
        force_resynthesis: req.forced.clone(),
        attempts,
        initialized: Some(Time(k8s_openapi::jiff::Timestamp::now())),
        deferred: req.trigger.is_deferred(),
        ..Synthesis::default()
    });
    let instance = req.gathered.instance().cloned();
    let out = match pending {
        Some(out) => out,
        None => match run(ctx, comp, st, &req).await? {
            Ran::Output(out) => out,
            Ran::Failed(e) => {
                report_failure(ctx, comp, instance.as_ref(), &e).await;
                failed_run(st, comp.metadata.generation, &e);
                let failures = failed.map_or(0, |f| f.failures) + 1;
                let delay = retry_delay(failures);
                ctx.memory.synthesis.with(&uid, |m| {
                    m.failed = Some(Failed {
                        fingerprint: fp.clone(),
                        failures,
                        retry_at: now + delay,
                    });
                });
                return Ok(SynthesisEnd::Failed(delay));
            }
        },
    };
    store(ctx, comp, st, &req, instance.as_ref(), out, &fp).await
}

/// Runs the module in a blocking task under a global synthesis slot.
async fn run(
    ctx: &Arc<Context>,
    comp: &Composition,
    st: &CompositionStatus,
    req: &Request<'_>,
) -> Result<Ran, Error> {
    let observed = match &req.observed {
        Some(o) => o.clone(),
        None => inputs::observed_outputs(ctx, comp, st).await?.0,
    };
    let uuid = st
        .in_flight_synthesis
        .as_ref()
        .map(|s| s.uuid.clone())
        .unwrap_or_default();
    let input = input_for(ctx, comp, req.synth, &req.gathered, observed, uuid);
    let limits = req.limits;
    let secure = req.synth.spec.entropy == Some(crds::Entropy::Secure);
    let scopes = ctx.discovery_snapshot();
    let host = ctx.host.clone();
    let module = req.module.clone();
    // A synthesis slot (shared fairly between namespaces), then the run's memory limit out of
    // the shared budget; the reconcile's turn is given back while it waits and runs.
    let ns = comp.namespace().unwrap_or_default();
    let mut started = Instant::now();
    let result = crate::run::fair::aside(&ctx.fair, async {
        let permit = ctx.synthesis_slots.enter(&ns).await;
        let reserved = ctx.memory_budget.reserve(limits.max_memory_bytes).await;
        let slot = ctx.slots.enter(limits.deadline);
        started = Instant::now();
        tokio::task::spawn_blocking(move || {
            let _held = (permit, reserved, slot);
            let is_namespaced = |g: &str, k: &str| {
                scopes
                    .get(&(g.to_string(), k.to_string()))
                    .copied()
                    .unwrap_or_else(|| synthesis::static_is_namespaced(g, k))
            };
            synthesis::synthesize(&host, &module, &input, limits, secure, &is_namespaced)
        })
        .await
    })
    .await
    .map_err(Error::Task)?;
    ctx.metrics
        .synthesis_duration
        .observe(started.elapsed().as_secs_f64());
    super::super::metrics::Metrics::count(
        &ctx.metrics.synthesis_runs,
        result.as_ref().map_or_else(|e| e.reason(), |_| "Success"),
    );
    if let Ok(out) = &result
        && out.peak_memory_bytes > 0
    {
        ctx.metrics
            .wasm_peak_memory
            .observe(out.peak_memory_bytes as f64);
    }
    Ok(match result {
        Ok(out) => Ran::Output(out),
        Err(e) => Ran::Failed(e),
    })
}

/// What running the synthesizer came to (the API reads around it may fail: the `Error`).
pub(crate) enum Ran {
    /// Its output, validated.
    Output(synthesis::Synthesized),
    /// Why it failed (a condition says so).
    Failed(synthesis::SynthesisError),
}

/// Results tagged `enoki.dev/event-reason` become Events: on the instance in instance mode,
/// otherwise on the Composition (info → Normal, warning/error → Warning).
async fn publish_result_events(
    ctx: &Context,
    comp: &Composition,
    instance: Option<&Value>,
    results: &[crds::SynthesisResult],
) {
    use kube::Resource as _;
    // As many Events as results kept in status, at most: a module printing 200,000 tagged
    // results does not become 200,000 Events.
    for r in results
        .iter()
        .filter(|r| r.tags.contains_key(crds::names::EVENT_REASON_TAG))
        .take(super::status_write::MAX_RESULTS)
    {
        let Some(reason) = r.tags.get(crds::names::EVENT_REASON_TAG) else {
            continue;
        };
        let target = instance.map_or_else(|| comp.object_ref(&()), object_ref_of);
        let warning = r.severity != crds::Severity::Info;
        ctx.event_distinct(&target, warning, reason, r.message.clone())
            .await;
    }
}

async fn report_failure(
    ctx: &Context,
    comp: &Composition,
    instance: Option<&Value>,
    e: &synthesis::SynthesisError,
) {
    ctx.event(comp, true, e.reason(), "Synthesize", e.to_string())
        .await;
    // Instance mode: say it on the object the user applied, too (with the reason the
    // synthesizer gave, when it gave one).
    if let Some(me) = instance {
        let reason = match e {
            synthesis::SynthesisError::ErrorResult {
                event_reason: Some(r),
                ..
            } => r.as_str(),
            _ => e.reason(),
        };
        ctx.event_on(
            &object_ref_of(me),
            true,
            reason,
            "Synthesize",
            e.to_string(),
        )
        .await;
    }
    tracing::info!(reason = e.reason(), error = %e, "synthesis failed; the previous synthesis stays applied");
}

/// Why an empty output is refused: the current synthesis has resources (it would delete
/// them all) and neither the Synthesizer nor the Composition sets `allowEmpty`.
pub(crate) fn refuse_empty(
    comp: &Composition,
    synth: &Synthesizer,
    had_resources: bool,
    items: &[Value],
) -> Option<String> {
    if !items.is_empty() || !had_resources || synth.spec.allow_empty || comp.spec.allow_empty {
        return None;
    }
    Some(format!(
        "the synthesizer emitted no resources; applying that would delete every resource of \
         the current synthesis. Set spec.allowEmpty on the Composition or Synthesizer {:?} \
         if this is intended",
        synth.metadata.name.as_deref().unwrap_or_default()
    ))
}

/// An output refused for good: Warning Event, failed condition, and no new attempt for this
/// fingerprint before [`RETRY_CAP`].
async fn refuse(
    ctx: &Context,
    comp: &Composition,
    st: &mut CompositionStatus,
    fp: &str,
    reason: &str,
    message: &str,
) {
    ctx.event(comp, true, reason, "Synthesize", message.to_string())
        .await;
    fail(st, comp.metadata.generation, reason, message);
    let uid = comp.uid().unwrap_or_default();
    ctx.memory.synthesis.with(&uid, |m| {
        m.failed = Some(Failed {
            fingerprint: fp.to_string(),
            failures: 1,
            retry_at: Instant::now() + RETRY_CAP,
        });
    });
}

/// Marks the synthesis failed: `Synthesized=False`, `Stalled=True`, simplified `Failed`.
pub(crate) fn fail(
    st: &mut CompositionStatus,
    generation: Option<i64>,
    reason: &str,
    message: &str,
) {
    for (type_, value) in [
        (conditions::SYNTHESIZED, false),
        (conditions::STALLED, true),
    ] {
        condition::set_condition(
            &mut st.conditions,
            type_,
            value,
            reason,
            message,
            generation,
        );
    }
    st.simplified = Some(crds::SimplifiedStatus {
        status: simplified_word(reason),
        error: Some(format!("{reason}: {message}")),
    });
}

/// A failed run: [`fail`], and for error results what Eno shows (`docs/synthesis.md`, "Error
/// Handling"): the first error result's message, verbatim, as `status.simplified.error`, and
/// every result of the run kept on the in-flight synthesis. Pure.
pub(crate) fn failed_run(
    st: &mut CompositionStatus,
    generation: Option<i64>,
    e: &synthesis::SynthesisError,
) {
    fail(st, generation, e.reason(), &e.to_string());
    if let Some(f) = st.in_flight_synthesis.as_mut() {
        f.canceled = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    }
    if let synthesis::SynthesisError::ErrorResult {
        messages, results, ..
    } = e
    {
        let first = messages.iter().find(|m| !m.is_empty());
        if let (Some(s), Some(first)) = (st.simplified.as_mut(), first) {
            s.error = Some(first.clone());
        }
        if let Some(f) = st.in_flight_synthesis.as_mut() {
            f.results.clone_from(results);
        }
    }
}

/// `Synthesized=True`: the current synthesis is the one the inputs give.
pub(crate) fn synthesized(st: &mut CompositionStatus, generation: Option<i64>) {
    condition::set_condition(
        &mut st.conditions,
        conditions::SYNTHESIZED,
        true,
        reasons::SYNTHESIS_SUCCEEDED,
        "",
        generation,
    );
}

/// Eno's word in `status.simplified.status` for a synthesis that cannot go ahead.
fn simplified_word(reason: &str) -> crds::StatusWord {
    use crds::StatusWord;
    match reason {
        reasons::MISSING_INPUT => StatusWord::MissingInputs,
        reasons::SYNTHESIZER_NOT_FOUND => StatusWord::MissingSynthesizer,
        reasons::MISMATCHED_INPUTS => StatusWord::MismatchedInputs,
        reasons::CROSS_NAMESPACE_REF
        | reasons::SYNTHESIZER_NOT_ALLOWED
        | reasons::LIMITS_REFUSED
        | reasons::INVALID_SPEC
        | reasons::REMOTE_NAMESPACE_UNMAPPED => StatusWord::Failed,
        _ => StatusWord::SynthesisBackoff,
    }
}

fn new_uuid() -> String {
    let bytes: [u8; 16] = rand::random();
    let h = hex::encode(bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_output_is_refused_only_when_it_would_delete_everything_and_is_not_allowed() {
        let mut comp = Composition::new("c", Default::default());
        let mut synth = Synthesizer::new("s", Default::default());
        let one = [serde_json::json!({})];
        assert!(refuse_empty(&comp, &synth, true, &[]).is_some());
        assert!(
            refuse_empty(&comp, &synth, false, &[]).is_none(),
            "nothing to delete"
        );
        assert!(
            refuse_empty(&comp, &synth, true, &one).is_none(),
            "not empty"
        );
        synth.spec.allow_empty = true;
        assert!(refuse_empty(&comp, &synth, true, &[]).is_none());
        synth.spec.allow_empty = false;
        comp.spec.allow_empty = true;
        assert!(refuse_empty(&comp, &synth, true, &[]).is_none());
    }

    #[test]
    fn a_failed_synthesis_is_retried_with_doubling_delays_up_to_fifteen_minutes() {
        let d: Vec<u64> = (1..=7).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(d, [30, 60, 120, 240, 480, 900, 900]);
    }
}
