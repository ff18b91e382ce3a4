//! PURE: the decision about a Composition's next synthesis, and what the pass over its current
//! synthesis does — from what was observed, with no client and no `Context` (checked by
//! `hack/check-pure-modules.sh`).
//!
//! The next synthesis, once a trigger says one is due, waits while its inputs are out of
//! lockstep (Eno's `MismatchedInputs`) or a `dependsOn` dependency is not ready; otherwise it
//! runs — after claiming the global rollout slot when the change rolls out under the cooldown
//! (a claim the caller makes atomically, the one step that is not a pure function of what was
//! observed). The pass over the current synthesis runs whatever that decision is: only
//! deletion (which deletes instead) and a policy refusal (nothing is applied on behalf of a
//! Composition refused for its spec or the controller's flags) change it. Blockers found while
//! observing (a missing Synthesizer, module or input, an invalid spec) are decided where they
//! are found and follow the same rule for the current synthesis.

use std::time::Duration;

use crds::DependencyStatus;
use crds::names::reasons;

/// What was observed of a due synthesis's preconditions.
#[derive(Clone, Debug, Default)]
pub(crate) struct Seen {
    /// Inputs out of lockstep, one entry per input (`trigger::mismatched`).
    pub mismatched: Vec<String>,
    /// `dependsOn` holding the synthesis back.
    pub dependencies: Option<DependencyStatus>,
    /// The change rolls out under the cooldown (a Synthesizer change, deferred inputs only).
    pub deferred: bool,
}

/// Why the next synthesis waits.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Wait {
    /// Inputs out of lockstep; the message names them.
    Mismatched(String),
    /// A dependency is missing, not ready or being deleted.
    Dependencies(DependencyStatus),
}

impl Wait {
    /// When to look again.
    pub(crate) fn retry(&self, readiness_poll: Duration) -> Duration {
        match self {
            Wait::Mismatched(_) => Duration::from_secs(30),
            Wait::Dependencies(_) => readiness_poll.max(Duration::from_secs(2)),
        }
    }
}

/// The decision about a due synthesis.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Next {
    /// Run it; with `claim_rollout`, only once the global rollout slot is claimed.
    Synthesize {
        /// Claim the rollout cooldown's slot first (it may be taken: then it waits).
        claim_rollout: bool,
    },
    /// Wait, for this reason.
    Wait(Wait),
}

/// The next synthesis: lockstep first, then `dependsOn`, then (by the caller) the rollout slot.
pub(crate) fn next(seen: &Seen) -> Next {
    if !seen.mismatched.is_empty() {
        return Next::Wait(Wait::Mismatched(format!(
            "inputs out of lockstep: {}",
            seen.mismatched.join("; ")
        )));
    }
    if let Some(d) = &seen.dependencies {
        return Next::Wait(Wait::Dependencies(d.clone()));
    }
    Next::Synthesize {
        claim_rollout: seen.deferred,
    }
}

/// What the pass over the current synthesis does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Current {
    /// Apply it, revert drift, track readiness.
    Enforce,
    /// Delete (or orphan) what it applied.
    Delete,
    /// Nothing: the Composition is refused by policy.
    Nothing,
}

/// The pass over the current synthesis, whatever blocks the next one.
pub(crate) fn current(deleting: bool, refused_by_policy: bool) -> Current {
    match (deleting, refused_by_policy) {
        (true, _) => Current::Delete,
        (false, true) => Current::Nothing,
        (false, false) => Current::Enforce,
    }
}

/// Reasons of a refusal by policy: nothing is applied on the Composition's behalf.
pub(crate) const POLICY_REFUSALS: [&str; 3] = [
    reasons::INVALID_SPEC,
    reasons::CROSS_NAMESPACE_REF,
    reasons::REMOTE_NAMESPACE_UNMAPPED,
];

#[cfg(test)]
mod tests {
    use super::*;

    fn deps() -> DependencyStatus {
        DependencyStatus {
            blocked: true,
            reason: Some(reasons::WAITING_ON_DEPENDENCIES.into()),
            blocked_by: Vec::new(),
        }
    }

    /// Every combination of the blockers of a due synthesis: lockstep wins over `dependsOn`,
    /// which wins over the rollout slot; with none, it runs (claiming the slot when deferred).
    #[test]
    fn the_next_synthesis_waits_on_the_first_blocker_in_order() {
        for mismatched in [false, true] {
            for blocked in [false, true] {
                for deferred in [false, true] {
                    let seen = Seen {
                        mismatched: if mismatched {
                            vec!["config: revision 1, another input has 2".into()]
                        } else {
                            Vec::new()
                        },
                        dependencies: blocked.then(deps),
                        deferred,
                    };
                    let want = match (mismatched, blocked) {
                        (true, _) => Next::Wait(Wait::Mismatched(
                            "inputs out of lockstep: config: revision 1, another input has 2"
                                .into(),
                        )),
                        (false, true) => Next::Wait(Wait::Dependencies(deps())),
                        (false, false) => Next::Synthesize {
                            claim_rollout: deferred,
                        },
                    };
                    assert_eq!(next(&seen), want, "{seen:?}");
                }
            }
        }
    }

    /// Whatever blocks the next synthesis (every blocker, observed or decided), the current one
    /// is enforced unless the Composition is being deleted or refused by policy.
    #[test]
    fn the_current_synthesis_is_enforced_under_every_blocker() {
        let blockers = [
            reasons::SYNTHESIZER_NOT_FOUND,
            reasons::MODULE_UNAVAILABLE,
            reasons::MISSING_INPUT,
            reasons::LIMITS_REFUSED,
            reasons::MISMATCHED_INPUTS,
            reasons::WAITING_ON_DEPENDENCIES,
            reasons::ROLLOUT_COOLDOWN,
            reasons::MALFORMED_OUTPUT,
            reasons::INVALID_SPEC,
            reasons::CROSS_NAMESPACE_REF,
            reasons::REMOTE_NAMESPACE_UNMAPPED,
        ];
        for blocker in blockers {
            for deleting in [false, true] {
                let refused = POLICY_REFUSALS.contains(&blocker);
                let want = if deleting {
                    Current::Delete
                } else if refused {
                    Current::Nothing
                } else {
                    Current::Enforce
                };
                assert_eq!(
                    current(deleting, refused),
                    want,
                    "{blocker} deleting={deleting}"
                );
            }
        }
        assert_eq!(current(false, false), Current::Enforce);
    }
}
