//! The roll-up of per-resource states into the Composition's conditions, the current
//! synthesis's reconciled/ready times and the simplified status. Pure over its inputs.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::condition;
use crate::model::Loaded;
use crate::record::Recording;
use crds::names::{conditions, reasons};
use crds::{CompositionStatus, SimplifiedStatus, StatusWord};

/// What the resources of the current synthesis add up to.
#[derive(Debug, Default, PartialEq)]
pub struct Rollup {
    /// Every resource was applied (or deleted/orphaned, or fails open).
    pub all_reconciled: bool,
    /// Every resource is ready (tombstones and fail-open resources excepted).
    pub all_ready: bool,
    /// Failed writes, `key: message`.
    pub errors: Vec<String>,
    /// Eno's summary of each ([`crate::model::summarize_error`]).
    pub summaries: Vec<String>,
    /// Resources not ready yet, `key (why)`.
    pub not_ready: Vec<String>,
    /// Resources another Composition owns, `key: owned by …`.
    pub conflicts: Vec<String>,
    /// A write was refused by RBAC (`403 Forbidden`).
    pub forbidden: bool,
    /// The latest ready time among the counted resources (tombstones left out).
    pub ready_at: Option<Time>,
}

impl Rollup {
    /// Adds up `recording` (the new states of `loaded`'s slices), leaving out the positions
    /// in `excluded` (resources `--resource-filter` leaves to others). A `fail-open` resource
    /// is reconciled whatever happens (its state says so), and ready when it is (Eno).
    pub fn of(
        loaded: &Loaded,
        recording: &Recording,
        excluded: &std::collections::HashSet<(usize, usize)>,
    ) -> Rollup {
        let counted = |si: usize, ri: usize| !excluded.contains(&(si, ri));
        let all_reconciled = recording.states.iter().enumerate().all(|(si, states)| {
            states
                .iter()
                .enumerate()
                .all(|(ri, s)| !counted(si, ri) || s.reconciled)
        });
        let all_ready = all_reconciled
            && recording.states.iter().enumerate().all(|(si, states)| {
                states.iter().enumerate().all(|(ri, s)| {
                    !counted(si, ri) || loaded.is_tombstone(si, ri) || s.ready.is_some()
                })
            });
        let ready_at = recording
            .states
            .iter()
            .enumerate()
            .flat_map(|(si, states)| {
                states.iter().enumerate().filter_map(move |(ri, s)| {
                    (counted(si, ri) && !loaded.is_tombstone(si, ri))
                        .then_some(s.ready.as_ref())
                        .flatten()
                })
            })
            .max_by_key(|t| t.0)
            .cloned();
        Rollup {
            all_reconciled,
            all_ready,
            ready_at,
            errors: recording.errors.clone(),
            summaries: recording.summaries.clone(),
            not_ready: recording.not_ready.clone(),
            conflicts: recording.conflicts.clone(),
            forbidden: recording.forbidden,
        }
    }

    /// Writes the roll-up into `st` (conditions observe `generation`; `now` stamps the
    /// synthesis's reconciled/ready times the first time they hold).
    pub fn apply_to(
        &self,
        st: &mut CompositionStatus,
        generation: Option<i64>,
        deleting: bool,
        now: &Time,
    ) {
        if deleting {
            condition::set_condition(
                &mut st.conditions,
                conditions::READY,
                false,
                reasons::DELETING,
                "the composition is being deleted",
                generation,
            );
            st.simplified = Some(SimplifiedStatus {
                status: StatusWord::Deleting,
                error: self.errors.first().cloned(),
            });
            return;
        }
        if let Some(cur) = st.current_synthesis.as_mut() {
            if self.all_reconciled && cur.reconciled.is_none() {
                cur.reconciled = Some(now.clone());
            }
            // Eno: the latest of the resources' ready times; an empty synthesis is ready when
            // it is reconciled.
            if self.all_ready && cur.ready.is_none() {
                cur.ready = self
                    .ready_at
                    .clone()
                    .or_else(|| cur.reconciled.clone())
                    .or_else(|| Some(now.clone()));
            }
        }
        self.reconciled_condition(st, generation);
        self.ready_conditions(st, generation);
        st.simplified = Some(self.simplified(st));
    }

    fn reconciled_condition(&self, st: &mut CompositionStatus, generation: Option<i64>) {
        let (ok, reason, message) = if !self.conflicts.is_empty() {
            (false, reasons::CONFLICT, self.conflicts.join("; "))
        } else if !self.errors.is_empty() {
            let reason = if self.forbidden {
                reasons::FORBIDDEN
            } else {
                reasons::APPLY_FAILED
            };
            (false, reason, self.errors.join("; "))
        } else if self.all_reconciled {
            (true, reasons::APPLIED, "every resource is applied".into())
        } else {
            (false, reasons::NOT_READY, "applying resources".into())
        };
        condition::set_condition(
            &mut st.conditions,
            conditions::RECONCILED,
            ok,
            reason,
            &message,
            generation,
        );
    }

    fn ready_conditions(&self, st: &mut CompositionStatus, generation: Option<i64>) {
        let message = if self.all_ready {
            "every resource is ready".to_string()
        } else {
            let first: Vec<&str> = self.not_ready.iter().take(5).map(String::as_str).collect();
            let more = self.not_ready.len().saturating_sub(first.len());
            let tail = if more > 0 {
                format!(" and {more} more (`enoki status` lists them all)")
            } else {
                String::new()
            };
            format!("waiting for {}{tail}", first.join("; "))
        };
        let reason = if self.all_ready {
            reasons::ALL_READY
        } else {
            reasons::NOT_READY
        };
        let c = &mut st.conditions;
        condition::set_condition(
            c,
            conditions::READY,
            self.all_ready,
            reason,
            &message,
            generation,
        );
        condition::set_condition(
            c,
            conditions::RECONCILING,
            !self.all_ready,
            reason,
            &message,
            generation,
        );
        if condition::is_true(c, conditions::SYNTHESIZED) {
            condition::set_condition(
                c,
                conditions::STALLED,
                false,
                reasons::SYNTHESIS_SUCCEEDED,
                "",
                generation,
            );
        }
    }

    fn simplified(&self, st: &CompositionStatus) -> SimplifiedStatus {
        let word = |status: StatusWord| SimplifiedStatus {
            status,
            error: None,
        };
        if !condition::is_true(&st.conditions, conditions::SYNTHESIZED) {
            st.simplified.clone().unwrap_or(word(StatusWord::Failed))
        } else if !self.errors.is_empty() {
            // Eno's slice controller: the greatest of the resources' summarized errors
            // (`Reconciled` says which resource failed and why, in full).
            SimplifiedStatus {
                status: StatusWord::Reconciling,
                error: self
                    .summaries
                    .iter()
                    .max()
                    .filter(|e| !e.is_empty())
                    .cloned(),
            }
        } else if self.all_ready {
            word(StatusWord::Ready)
        } else if self.all_reconciled {
            word(StatusWord::NotReady)
        } else {
            word(StatusWord::Reconciling)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crds::ResourceState;

    fn status_with_synthesized() -> CompositionStatus {
        let mut st = CompositionStatus::default();
        condition::set_condition(
            &mut st.conditions,
            conditions::SYNTHESIZED,
            true,
            "ok",
            "",
            Some(1),
        );
        st.current_synthesis = Some(crds::Synthesis::default());
        st
    }

    fn loaded(n: usize) -> Loaded {
        Loaded::for_test(
            &(0..n)
                .map(|i| {
                    (
                        plan::ResourceKey {
                            group: String::new(),
                            kind: "ConfigMap".into(),
                            namespace: "n".into(),
                            name: format!("r{i}"),
                        },
                        false,
                    )
                })
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn everything_ready_is_ready_and_stamps_the_synthesis() {
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let ready = ResourceState {
            reconciled: true,
            ready: Some(now.clone()),
            ..ResourceState::default()
        };
        let recording = Recording {
            states: vec![vec![ready.clone(), ready]],
            ..Recording::default()
        };
        let r = Rollup::of(&loaded(2), &recording, &Default::default());
        assert!(r.all_ready && r.all_reconciled);
        let mut st = status_with_synthesized();
        r.apply_to(&mut st, Some(1), false, &now);
        assert!(condition::is_true(&st.conditions, conditions::READY));
        assert_eq!(
            st.simplified.as_ref().map(|s| s.status.as_str()),
            Some("Ready")
        );
        assert!(
            st.current_synthesis
                .as_ref()
                .is_some_and(|c| c.ready.is_some())
        );
    }

    /// Eno's slice controller (`GetReady`): the synthesis is ready at the latest of its
    /// resources' ready times, not when the roll-up ran.
    #[test]
    fn the_synthesis_is_ready_at_its_latest_resources_time() {
        let at = |s: i64| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap());
        let ready = |t: Time| ResourceState {
            reconciled: true,
            ready: Some(t),
            ..ResourceState::default()
        };
        let recording = Recording {
            states: vec![vec![ready(at(100)), ready(at(300))], vec![ready(at(200))]],
            ..Recording::default()
        };
        let r = Rollup::of(&Loaded::for_test(&[]), &recording, &Default::default());
        assert_eq!(r.ready_at, Some(at(300)));
        let mut st = status_with_synthesized();
        r.apply_to(&mut st, Some(1), false, &at(999));
        assert_eq!(st.current_synthesis.unwrap().ready, Some(at(300)));
    }

    #[test]
    fn a_failed_write_is_reconciling_with_the_error_and_not_ready() {
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let recording = Recording {
            states: vec![vec![ResourceState::default()]],
            errors: vec!["cm/r0: Forbidden: configmaps is forbidden".into()],
            summaries: vec!["configmaps is forbidden".into()],
            not_ready: vec!["cm/r0 (not created yet)".into()],
            conflicts: vec![],
            forbidden: false,
            later_errors: vec![],
        };
        let r = Rollup::of(&loaded(1), &recording, &Default::default());
        assert!(!r.all_ready && !r.all_reconciled);
        let mut st = status_with_synthesized();
        r.apply_to(&mut st, Some(1), false, &now);
        let reconciled = st
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::RECONCILED)
            .unwrap();
        assert_eq!(reconciled.reason, reasons::APPLY_FAILED);
        let simplified = st.simplified.unwrap();
        assert_eq!(simplified.status, "Reconciling");
        assert_eq!(
            simplified.error.as_deref(),
            Some("configmaps is forbidden"),
            "Eno's summary"
        );
    }
}
