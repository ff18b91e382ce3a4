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
use crate::synthesis;
use crds::names::{conditions, reasons};
use crds::{Composition, CompositionStatus, Synthesis};
use reconciler_core::condition;
use reconciler_core::trigger::Trigger;

pub(crate) use reconciler_core::model::Failed;

mod input;
mod outcome;
mod store;
pub(crate) use input::input_for;
pub(crate) use outcome::*;
pub(crate) use store::*;

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
    let (failed, pending) = ctx.state.memory.synthesis(&uid, |m| {
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
        return Ok(SynthesisEnd::NotStarted(f.retry_at - now));
    }
    if pending.is_none()
        && let Err(held) = ctx.limits.synthesis_rates.take(
            &comp.namespace().unwrap_or_default(),
            &format!(
                "{}/{}",
                comp.namespace().unwrap_or_default(),
                comp.name_any()
            ),
        )
    {
        rate_limited(st, comp, req.trigger, &held);
        return Ok(SynthesisEnd::NotStarted(
            held.wait.max(Duration::from_secs(1)),
        ));
    }
    let attempts = st.in_flight_synthesis.as_ref().map_or(0, |s| s.attempts) + 1;
    let uuid = new_uuid();
    st.in_flight_synthesis = Some(Synthesis {
        uuid: uuid.clone(),
        observed_composition_generation: comp.metadata.generation,
        observed_synthesizer_generation: req.synth.metadata.generation,
        synthesizer_revision: crate::run::rollout::revision_of(req.synth),
        input_revisions: req.revisions.clone(),
        module_digest: Some(req.module.digest()),
        force_resynthesis: req.forced.clone(),
        attempts,
        initialized: Some(Time(k8s_openapi::jiff::Timestamp::now())),
        deferred: req.deferred,
        ..Synthesis::default()
    });
    let instance = req.gathered.instance().cloned();
    let out = match pending {
        Some(out) => out,
        None => match run(ctx, comp, st, &req).await? {
            Ran::Output(out) => out,
            Ran::Failed(e) => {
                report_failure(&ctx.report, comp, instance.as_ref(), &e).await;
                failed_run(st, comp.metadata.generation, &e);
                let failures = failed.map_or(0, |f| f.failures) + 1;
                let delay = retry_delay(failures);
                ctx.state.memory.synthesis(&uid, |m| {
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
        None => inputs::observed_outputs(ctx.reads(), comp, st).await?.0,
    };
    let uuid = st
        .in_flight_synthesis
        .as_ref()
        .map(|s| s.uuid.clone())
        .unwrap_or_default();
    let input = input_for(
        &ctx.opts.synthesis,
        comp,
        req.synth,
        &req.gathered,
        observed,
        uuid,
    );
    let limits = req.limits;
    let secure = req.synth.spec.entropy == Some(crds::Entropy::Secure);
    let scopes = ctx.clusters.discovery_snapshot();
    let host = ctx.modules.host().clone();
    let module = req.module.clone();
    // A synthesis slot (shared fairly between namespaces), then the run's memory limit out of
    // the shared budget; the reconcile's turn is given back while it waits and runs.
    let ns = comp.namespace().unwrap_or_default();
    let mut started = Instant::now();
    let result = crate::run::fair::aside(&ctx.limits.fair, async {
        let permit = ctx.limits.synthesis_slots.enter(&ns).await;
        let reserved = ctx
            .limits
            .memory_budget
            .reserve(limits.max_memory_bytes)
            .await;
        let slot = ctx.limits.slots.enter(limits.deadline);
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
    ctx.report
        .metrics
        .synthesis_duration
        .observe(started.elapsed().as_secs_f64());
    super::super::metrics::Metrics::count(
        &ctx.report.metrics.synthesis_runs,
        result.as_ref().map_or_else(|e| e.reason(), |_| "Success"),
    );
    if let Ok(out) = &result
        && out.peak_memory_bytes > 0
    {
        ctx.report
            .metrics
            .wasm_peak_memory
            .observe(out.peak_memory_bytes as f64);
    }
    Ok(match result {
        Ok(out) => Ran::Output(out),
        Err(e) => Ran::Failed(e),
    })
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
    use crds::Synthesizer;

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
