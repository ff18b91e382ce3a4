//! What a synthesis request holds and how one ends: the request and its fingerprint, the
//! retry backoff, and the status, conditions and Events of a synthesis that succeeded,
//! failed or was refused.

use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use serde_json::Value;

use crate::run::composition::observe::{Gathered, object_ref_of};
use crate::run::{Context, inputs};
use crate::synthesis;
use crds::names::{conditions, reasons};
use crds::{Composition, CompositionStatus, InputRevision, Synthesizer};
use reconciler_core::condition;
use reconciler_core::model::Failed;
use reconciler_core::trigger::Trigger;

/// The first retry of a failed synthesis; doubles per failure up to [`RETRY_CAP`].
pub(super) const RETRY_BASE: Duration = Duration::from_secs(30);
pub(super) const RETRY_CAP: Duration = Duration::from_secs(900);

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
    /// It waits for the rollout cooldown (recorded as `deferred`): a deferred trigger, unless
    /// a progressive rollout (or its rollback) moves it.
    pub deferred: bool,
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
    /// It did not start (a failed attempt's backoff, or the synthesis rates); look again
    /// after this long. A rollout slot claimed for it is given back.
    NotStarted(Duration),
}

/// What makes two syntheses of `comp` the same one: its generation, the Synthesizer's, the
/// module, the inputs and a forced trigger.
pub(in crate::run::composition) fn fingerprint(comp: &Composition, req: &Request<'_>) -> String {
    let v = serde_json::json!([
        comp.metadata.generation,
        req.synth.metadata.generation,
        req.module.digest(),
        req.revisions,
        req.forced,
    ]);
    inputs::digest(&v)
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
pub(super) async fn publish_result_events(
    report: &crate::run::context::Reporter,
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
        .take(crate::run::composition::status_write::MAX_RESULTS)
    {
        let Some(reason) = r.tags.get(crds::names::EVENT_REASON_TAG) else {
            continue;
        };
        let target = instance.map_or_else(|| comp.object_ref(&()), object_ref_of);
        let warning = r.severity != crds::Severity::Info;
        report
            .event_distinct(&target, warning, (reason, "Synthesize"), r.message.clone())
            .await;
    }
}

pub(super) async fn report_failure(
    report: &crate::run::context::Reporter,
    comp: &Composition,
    instance: Option<&Value>,
    e: &synthesis::SynthesisError,
) {
    report
        .event(comp, true, e.reason(), "Synthesize", e.to_string())
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
        report
            .event_on(
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
/// fingerprint before [`RETRY_CAP`]. The in-flight synthesis is canceled (as a failed run's)
/// by the caller when the refusal is the output's own (empty, over its Synthesizer's bound),
/// not its namespace's (budget, quota, admission).
pub(super) async fn refuse(
    ctx: &Context,
    comp: &Composition,
    st: &mut CompositionStatus,
    fp: &str,
    reason: &str,
    message: &str,
) {
    ctx.report
        .event(comp, true, reason, "Synthesize", message.to_string())
        .await;
    fail(st, comp.metadata.generation, reason, message);
    let uid = comp.uid().unwrap_or_default();
    ctx.state.memory.synthesis(&uid, |m| {
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
pub(super) fn simplified_word(reason: &str) -> crds::StatusWord {
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
