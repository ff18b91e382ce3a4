//! Which revision a Synthesizer a pass synthesizes with is (a mark on the in-memory copy),
//! a Composition's place in a rollout's order, and whether the canary selector picks it.

use kube::ResourceExt;
use sha2::{Digest, Sha256};

use crds::{Composition, RolloutStatus, Synthesizer};

/// On the Synthesizer a pass synthesizes with (never written to the API): the revision number.
const REVISION_MARK: &str = "rollout.enoki.dev/revision";

/// Marks `synth` as revision `number`.
pub(crate) fn mark(synth: &mut Synthesizer, number: i64) {
    synth
        .annotations_mut()
        .insert(REVISION_MARK.into(), number.to_string());
}

/// Removes a mark (a live Synthesizer may carry one a user set).
pub(crate) fn unmark(synth: &mut Synthesizer) {
    synth.annotations_mut().remove(REVISION_MARK);
}

/// The revision `synth` was marked with.
pub(crate) fn revision_of(synth: &Synthesizer) -> Option<i64> {
    synth.annotations().get(REVISION_MARK)?.parse().ok()
}

/// A Composition's place in the order of the rollout of revision `number`.
pub(crate) fn order_key(uid: &str, number: i64) -> u64 {
    let h = Sha256::digest(format!("{uid}/{number}"));
    u64::from_be_bytes(h[..8].try_into().unwrap_or_default())
}

/// Whether the Synthesizer's canary selector picks `comp` (a selector that does not parse
/// picks none).
pub(crate) fn canary_selects(synth: &Synthesizer, comp: &Composition) -> bool {
    let Some(sel) = synth
        .spec
        .rollout
        .as_ref()
        .and_then(|r| r.canary.as_ref())
        .and_then(|c| c.selector.clone())
    else {
        return false;
    };
    use kube::core::SelectorExt;
    kube::core::Selector::try_from(sel).is_ok_and(|s| s.matches(comp.labels()))
}

/// The revision synthesis `s` ran: recorded, or (a synthesis made before its Synthesizer had
/// revisions) the rolling or stable revision of the same generation and module.
pub(crate) fn runs(st: &RolloutStatus, s: &crds::Synthesis) -> Option<i64> {
    s.synthesizer_revision.or_else(|| {
        [Some(&st.revision), st.stable.as_ref()]
            .into_iter()
            .flatten()
            .find(|r| {
                s.observed_synthesizer_generation == Some(r.generation)
                    && s.module_digest.as_ref() == Some(&r.module_digest)
            })
            .map(|r| r.number)
    })
}
