//! `spec.suspend` (Flux's): a suspended Composition is neither synthesized nor reconciled. Its
//! pass writes only that — `Suspended=True` (for the generation that asked) and
//! `simplified.status: Suspended` — and waits for a change: drift is not reverted, a deleted
//! output is not recreated, nothing is pruned, no synthesis runs (an input change is picked up
//! on resume). The rest of the status stays as the last pass left it: `observedGeneration`
//! keeps speaking for the synthesis that is applied (for kstatus the newest spec is in
//! progress; Argo CD's check says Suspended), and its health series are dropped (a suspended
//! Composition is not stuck). Deletion is unaffected (its outputs go as usual). Resuming
//! drops those marks; the normal pass takes over.

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::{Context, Error, status_write};
use crds::names::{conditions, reasons};
use crds::{Composition, CompositionStatus, SimplifiedStatus, StatusWord};
use reconciler_core::condition::{keep_transitions, set_condition};

/// What the `Suspended` condition says.
pub(crate) const MESSAGE: &str = "spec.suspend is true: neither synthesized nor reconciled \
     (drift is not reverted, deleted outputs are not recreated, nothing is pruned); set it to \
     false (`enoki resume`) to reconcile again";

/// The pass of a suspended Composition: records the suspension (one status write, only when
/// it changes), drops its health series and waits for the next change of the Composition.
///
/// # Errors
/// The status write failed.
pub(super) async fn hold(ctx: &Arc<Context>, comp: &Arc<Composition>) -> Result<Action, Error> {
    let before = comp.status.clone().unwrap_or_default();
    let st = suspended(&before, comp.metadata.generation);
    status_write::write(ctx, comp, &st).await?;
    ctx.report
        .metrics
        .health
        .forget(&super::super::metrics::CompositionLabel {
            namespace: comp.namespace().unwrap_or_default(),
            name: comp.name_any(),
        });
    Ok(Action::await_change())
}

/// `st` as a suspended Composition at `generation` reports it. Pure.
pub(crate) fn suspended(st: &CompositionStatus, generation: Option<i64>) -> CompositionStatus {
    let mut out = st.clone();
    set_condition(
        &mut out.conditions,
        conditions::SUSPENDED,
        true,
        reasons::SUSPENDED,
        MESSAGE,
        generation,
    );
    out.simplified = Some(SimplifiedStatus {
        status: StatusWord::Suspended,
        error: None,
    });
    keep_transitions(&mut out.conditions, &st.conditions);
    out
}

/// `st` of a resumed Composition: the suspension's marks dropped (`Reconciling` until the
/// pass's roll-up says more). Pure.
pub(crate) fn resumed(st: &mut CompositionStatus) {
    st.conditions.retain(|c| c.type_ != conditions::SUSPENDED);
    if st
        .simplified
        .as_ref()
        .is_some_and(|s| s.status == StatusWord::Suspended)
    {
        st.simplified = Some(SimplifiedStatus {
            status: StatusWord::Reconciling,
            error: None,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suspension_is_recorded_once_and_resuming_drops_it() {
        let st = CompositionStatus {
            observed_generation: Some(2),
            ..CompositionStatus::default()
        };
        let held = suspended(&st, Some(3));
        // The status still speaks for the applied generation.
        assert_eq!(held.observed_generation, Some(2));
        assert_eq!(
            held.simplified.as_ref().unwrap().status,
            StatusWord::Suspended
        );
        let marked = held
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::SUSPENDED)
            .unwrap();
        assert_eq!(
            (marked.status.as_str(), marked.observed_generation),
            ("True", Some(3))
        );
        assert_eq!(held.conditions.len(), 1);
        // A second pass changes nothing (no status write).
        assert_eq!(suspended(&held, Some(3)), held);
        let mut back = held.clone();
        resumed(&mut back);
        assert_eq!(back.simplified.unwrap().status, StatusWord::Reconciling);
        assert!(
            back.conditions
                .iter()
                .all(|c| c.type_ != conditions::SUSPENDED)
        );
    }
}
