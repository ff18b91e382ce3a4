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
//! Composition refused for its spec or the controller's flags) change it. The preconditions
//! observing finds (an invalid spec, a missing Synthesizer, module or input, refused limits or
//! references) are judged by [`precondition`], in the order they are read.

use std::time::Duration;

use crds::DependencyStatus;
use crds::names::reasons;

/// A Synthesizer's module as observed.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum ModuleSeen {
    /// Fetched and compiled (or not read yet: an earlier precondition blocks).
    #[default]
    Ready,
    /// Being fetched or compiled by the Synthesizer controller.
    Loading,
    /// It failed (cached until its backoff passes).
    Failed {
        /// The error chain.
        message: String,
        /// Worth retrying soon (a registry or network fault).
        transient: bool,
    },
}

/// What observing a Composition found about the preconditions of any synthesis, in the order
/// they are read; what comes after the first blocker is not read (left at its default).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Preconditions {
    /// Why the spec is invalid (too large, a bad ServiceAccount name).
    pub invalid_spec: Option<String>,
    /// The name of the Synthesizer that does not exist.
    pub missing_synthesizer: Option<String>,
    /// Why the Synthesizer may not be used from this namespace (its `namespaceSelector`).
    pub not_allowed: Option<String>,
    /// Why the namespace has no remote counterpart (`--remote-namespace-map`).
    pub remote_unmapped: Option<String>,
    /// References out of the namespace (`--no-cross-namespace-refs`).
    pub cross_namespace: Vec<String>,
    /// The module.
    pub module: ModuleSeen,
    /// Why the Synthesizer's limits are refused (above the controller's ceilings).
    pub limits_refused: Option<String>,
    /// Which required input is missing.
    pub missing_input: Option<String>,
}

/// A precondition that blocks every synthesis.
#[derive(Clone, Debug, PartialEq)]
pub enum Blocked {
    /// Refused by policy: nothing is applied on the Composition's behalf (see [`current`]).
    Refused {
        reason: &'static str,
        message: String,
        retry: Duration,
    },
    /// Failed: the next synthesis waits; the current one is still enforced.
    Failed {
        reason: &'static str,
        message: String,
        retry: Duration,
    },
    /// The module is being fetched: not a failure; the current synthesis is still enforced.
    Loading,
}

impl Blocked {
    /// When to look again.
    pub fn retry(&self) -> Duration {
        match self {
            Blocked::Refused { retry, .. } | Blocked::Failed { retry, .. } => *retry,
            Blocked::Loading => Duration::from_secs(2),
        }
    }
}

/// The first precondition that blocks, in the order they are read: the spec, the Synthesizer,
/// the remote namespace mapping, cross-namespace references, the module, the limits, the
/// inputs. Policy refusals (terminal until the spec or the flags change) look again in 10 min;
/// failures sooner, by how likely they are to clear.
pub fn precondition(p: &Preconditions) -> Option<Blocked> {
    let refused = |reason, message: &str| Blocked::Refused {
        reason,
        message: message.to_string(),
        retry: Duration::from_secs(600),
    };
    let failed = |reason, message: String, secs| Blocked::Failed {
        reason,
        message,
        retry: Duration::from_secs(secs),
    };
    if let Some(m) = &p.invalid_spec {
        return Some(refused(reasons::INVALID_SPEC, m));
    }
    if let Some(name) = &p.missing_synthesizer {
        let message = format!("Synthesizer {name:?} does not exist");
        return Some(failed(reasons::SYNTHESIZER_NOT_FOUND, message, 30));
    }
    if let Some(m) = &p.not_allowed {
        return Some(refused(reasons::SYNTHESIZER_NOT_ALLOWED, m));
    }
    if let Some(m) = &p.remote_unmapped {
        return Some(refused(reasons::REMOTE_NAMESPACE_UNMAPPED, m));
    }
    if !p.cross_namespace.is_empty() {
        let message = format!(
            "cross-namespace references are not allowed (--no-cross-namespace-refs): {}",
            p.cross_namespace.join("; ")
        );
        return Some(refused(reasons::CROSS_NAMESPACE_REF, &message));
    }
    match &p.module {
        ModuleSeen::Ready => {}
        ModuleSeen::Loading => return Some(Blocked::Loading),
        ModuleSeen::Failed { message, transient } => {
            let secs = if *transient { 10 } else { 60 };
            return Some(failed(reasons::MODULE_UNAVAILABLE, message.clone(), secs));
        }
    }
    if let Some(m) = &p.limits_refused {
        return Some(failed(reasons::LIMITS_REFUSED, m.clone(), 60));
    }
    if let Some(m) = &p.missing_input {
        return Some(failed(reasons::MISSING_INPUT, m.clone(), 15));
    }
    None
}

/// What was observed of a due synthesis's preconditions.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// Inputs out of lockstep, one entry per input (`trigger::mismatched`).
    pub mismatched: Vec<String>,
    /// `dependsOn` holding the synthesis back.
    pub dependencies: Option<DependencyStatus>,
    /// The change rolls out under the cooldown (a Synthesizer change, deferred inputs only).
    pub deferred: bool,
}

/// Why the next synthesis waits.
#[derive(Clone, Debug, PartialEq)]
pub enum Wait {
    /// Inputs out of lockstep; the message names them.
    Mismatched(String),
    /// A dependency is missing, not ready or being deleted.
    Dependencies(DependencyStatus),
}

impl Wait {
    /// When to look again.
    pub fn retry(&self, readiness_poll: Duration) -> Duration {
        match self {
            Wait::Mismatched(_) => Duration::from_secs(30),
            Wait::Dependencies(_) => readiness_poll.max(Duration::from_secs(2)),
        }
    }
}

/// The decision about a due synthesis.
#[derive(Clone, Debug, PartialEq)]
pub enum Next {
    /// Run it; with `claim_rollout`, only once the global rollout slot is claimed.
    Synthesize {
        /// Claim the rollout cooldown's slot first (it may be taken: then it waits).
        claim_rollout: bool,
    },
    /// Wait, for this reason.
    Wait(Wait),
}

/// The next synthesis: lockstep first, then `dependsOn`, then (by the caller) the rollout slot.
pub fn next(seen: &Seen) -> Next {
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
pub enum Current {
    /// Apply it, revert drift, track readiness.
    Enforce,
    /// Delete (or orphan) what it applied.
    Delete,
    /// Nothing: the Composition is refused by policy.
    Nothing,
}

/// The pass over the current synthesis, whatever blocks the next one.
pub fn current(deleting: bool, refused_by_policy: bool) -> Current {
    match (deleting, refused_by_policy) {
        (true, _) => Current::Delete,
        (false, true) => Current::Nothing,
        (false, false) => Current::Enforce,
    }
}

/// Reasons of a refusal by policy: nothing is applied on the Composition's behalf.
pub const POLICY_REFUSALS: [&str; 4] = [
    reasons::INVALID_SPEC,
    reasons::SYNTHESIZER_NOT_ALLOWED,
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
            reasons::SYNTHESIZER_NOT_ALLOWED,
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

    /// Every precondition alone, then all at once: each blocks with its reason and retry, the
    /// first in reading order wins, and the current synthesis is enforced under every one
    /// except a policy refusal — or deleted while the Composition is deleting.
    #[test]
    fn preconditions_block_in_reading_order_and_leave_the_current_synthesis_enforced() {
        let failed = ModuleSeen::Failed {
            message: "registry down".into(),
            transient: true,
        };
        let table: Vec<(Preconditions, Option<&str>, u64)> = vec![
            (Preconditions::default(), None, 0),
            (
                Preconditions {
                    invalid_spec: Some("too large".into()),
                    ..Default::default()
                },
                Some(reasons::INVALID_SPEC),
                600,
            ),
            (
                Preconditions {
                    missing_synthesizer: Some("s".into()),
                    ..Default::default()
                },
                Some(reasons::SYNTHESIZER_NOT_FOUND),
                30,
            ),
            (
                Preconditions {
                    remote_unmapped: Some("ns".into()),
                    ..Default::default()
                },
                Some(reasons::REMOTE_NAMESPACE_UNMAPPED),
                600,
            ),
            (
                Preconditions {
                    cross_namespace: vec!["bindings[0]".into()],
                    ..Default::default()
                },
                Some(reasons::CROSS_NAMESPACE_REF),
                600,
            ),
            (
                Preconditions {
                    module: ModuleSeen::Loading,
                    ..Default::default()
                },
                Some(reasons::MODULE_LOADING),
                2,
            ),
            (
                Preconditions {
                    module: failed.clone(),
                    ..Default::default()
                },
                Some(reasons::MODULE_UNAVAILABLE),
                10,
            ),
            (
                Preconditions {
                    limits_refused: Some("memory above the ceiling".into()),
                    ..Default::default()
                },
                Some(reasons::LIMITS_REFUSED),
                60,
            ),
            (
                Preconditions {
                    missing_input: Some("config".into()),
                    ..Default::default()
                },
                Some(reasons::MISSING_INPUT),
                15,
            ),
            (
                Preconditions {
                    not_allowed: Some("not this namespace".into()),
                    cross_namespace: vec!["x".into()],
                    ..Default::default()
                },
                Some(reasons::SYNTHESIZER_NOT_ALLOWED),
                600,
            ),
            (
                Preconditions {
                    invalid_spec: None,
                    missing_synthesizer: Some("s".into()),
                    not_allowed: Some("n".into()),
                    remote_unmapped: Some("ns".into()),
                    cross_namespace: vec!["x".into()],
                    module: failed,
                    limits_refused: Some("l".into()),
                    missing_input: Some("i".into()),
                },
                Some(reasons::SYNTHESIZER_NOT_FOUND),
                30,
            ),
        ];
        for (seen, reason, retry) in table {
            let got = precondition(&seen);
            let got_reason = got.as_ref().map(|b| match b {
                Blocked::Refused { reason, .. } | Blocked::Failed { reason, .. } => *reason,
                Blocked::Loading => reasons::MODULE_LOADING,
            });
            assert_eq!(got_reason, reason, "{seen:?}");
            if let Some(b) = &got {
                assert_eq!(b.retry(), Duration::from_secs(retry), "{seen:?}");
            }
            let refused = matches!(got, Some(Blocked::Refused { .. }));
            assert_eq!(
                refused,
                reason.is_some_and(|r| POLICY_REFUSALS.contains(&r))
            );
            for deleting in [false, true] {
                let want = match (deleting, refused) {
                    (true, _) => Current::Delete,
                    (false, true) => Current::Nothing,
                    (false, false) => Current::Enforce,
                };
                assert_eq!(
                    current(deleting, refused),
                    want,
                    "{seen:?} deleting={deleting}"
                );
            }
        }
    }
}
