//! Readiness: CEL checks (`readiness`, `readiness-<name>`, all ANDed) or, without any, the
//! resource's `health`: `exists` (Eno's rule, the default: ready once it exists; a CRD once
//! `Established`) or `kstatus` (opt-in: the kstatus convention).
//!
//! A check may return a bool, or a list of condition objects. Written with Eno's prefix
//! (`eno.azure.io/readiness…`), the list is read as Eno reads it: satisfied by its first
//! condition with `status == "True"`, a `type` and a `reason`, whose `lastTransitionTime` is
//! that check's ready time (the current time when it has none). Written with enoki's, by any
//! condition with `status == "True"`, at the latest of their times. The latest time over all
//! checks is the resource's ready time. `composition` is bound as Eno binds it in readiness
//! checks: an empty Composition (`composition.metadata.name == ""`). Readiness latches for the rest of a synthesis (the planner keeps a
//! recorded ready time). The names of unsatisfied checks are reported.

use serde::Serialize;
use serde_json::Value;

use crate::expr::{Expr, to_cel, type_name};
use crate::settings::Health;

/// A compiled readiness check.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadinessCheck {
    /// `default` for `readiness`, `<name>` for `readiness-<name>`.
    pub name: String,
    /// The compiled CEL.
    pub expr: Expr,
    /// Written with Eno's prefix (`eno.azure.io/readiness…`): a returned condition list is
    /// read as Eno reads it (see the module docs).
    pub eno: bool,
}

/// The readiness of one resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum ReadinessState {
    /// Ready; `at` is a precise time from a condition, or `None` (the caller stamps now).
    Ready {
        /// RFC 3339 time from the latest satisfying condition, if any.
        at: Option<String>,
    },
    /// Not ready yet.
    NotReady {
        /// Why: the names of unsatisfied checks, or a kstatus reason.
        unsatisfied: Vec<String>,
    },
    /// The object does not exist (yet).
    Absent,
}

impl ReadinessState {
    /// Whether this is [`ReadinessState::Ready`].
    pub fn is_ready(&self) -> bool {
        matches!(self, ReadinessState::Ready { .. })
    }
}

/// Evaluates `checks` against the live object (ANDed), or `health` when there are none. An
/// evaluation error makes that check unsatisfied, with the error in its reason.
pub fn evaluate(checks: &[ReadinessCheck], health: Health, live: Option<&Value>) -> ReadinessState {
    let Some(live) = live else {
        return ReadinessState::Absent;
    };
    if checks.is_empty() {
        let is_crd = live.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition");
        return match health {
            Health::Kstatus => kstatus(live),
            Health::Exists if is_crd => kstatus(live),
            Health::Exists => ReadinessState::Ready { at: None },
        };
    }
    let this = to_cel(live);
    let composition = empty_composition();
    let mut unsatisfied = Vec::new();
    let mut times = Vec::new();
    for check in checks {
        match check
            .expr
            .eval(&[("self", this.clone()), ("composition", composition.clone())])
        {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => unsatisfied.push(check.name.clone()),
            Ok(cel::Value::List(items)) => match condition_time(&items, check.eno) {
                Some(t) => times.push(t),
                None => unsatisfied.push(check.name.clone()),
            },
            Ok(other) => unsatisfied.push(format!(
                "{} (returned {}, want bool or list of conditions)",
                check.name,
                type_name(&other)
            )),
            Err(e) => unsatisfied.push(format!("{} (error: {e})", check.name)),
        }
    }
    if !unsatisfied.is_empty() {
        return ReadinessState::NotReady { unsatisfied };
    }
    // The latest condition time; a matched condition without one is ready now, which is
    // later than any (Eno stamps the current time and still counts it as precise).
    let at = if times.contains(&ConditionTime::Now) {
        None
    } else {
        times
            .iter()
            .filter_map(|t| match t {
                ConditionTime::At(t) => Some(*t),
                ConditionTime::Now | ConditionTime::Unknown => None,
            })
            .max()
            .map(|t| t.to_string())
    };
    ReadinessState::Ready { at }
}

/// When a condition list a check returned made the resource ready.
#[derive(Clone, Copy, Debug, PartialEq)]
enum ConditionTime {
    /// The condition's `lastTransitionTime`.
    At(jiff::Timestamp),
    /// Now (Eno's rule: a matched condition without a time).
    Now,
    /// No time from this check (enoki's rule: no True condition had one).
    Unknown,
}

/// The ready time of a condition list, `None` when it does not make the resource ready.
/// Eno's rule (`eno`): its *first* map with `status: "True"` and a non-null `type` and
/// `reason`, at that condition's RFC 3339 `lastTransitionTime` (now without one). enoki's
/// rule: any condition with `status: "True"`, at the latest of their times.
fn condition_time(items: &[cel::Value], eno: bool) -> Option<ConditionTime> {
    let time = |c: &Value| {
        c.get("lastTransitionTime")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    };
    let is_true = |c: &Value| c.get("status").and_then(Value::as_str) == Some("True");
    let mut conditions = items.iter().filter_map(crate::expr::to_json);
    if eno {
        let c = conditions.find(|c| {
            is_true(c)
                && c.get("type").is_some_and(|t| !t.is_null())
                && c.get("reason").is_some_and(|r| !r.is_null())
        })?;
        return Some(time(&c).map_or(ConditionTime::Now, ConditionTime::At));
    }
    let true_ones: Vec<Value> = conditions.filter(is_true).collect();
    if true_ones.is_empty() {
        return None;
    }
    Some(
        true_ones
            .iter()
            .filter_map(time)
            .max()
            .map_or(ConditionTime::Unknown, ConditionTime::At),
    )
}

/// What Eno binds `composition` to in readiness checks: an empty Composition's metadata
/// (Go's nil maps read as empty ones in CEL).
fn empty_composition() -> cel::Value {
    to_cel(&serde_json::json!({"metadata": {
        "name": "", "namespace": "", "labels": {}, "annotations": {},
        "deletionTimestamp": null}}))
}

/// kstatus: `Ready`/`Available` conditions must be True and `status.observedGeneration` must
/// have caught up with `metadata.generation`; otherwise existing is enough. A
/// CustomResourceDefinition is ready once `Established` (its kind is served).
pub fn kstatus(live: &Value) -> ReadinessState {
    if live.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition") {
        let established = live
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.get("type").and_then(Value::as_str) == Some("Established")
                        && c.get("status").and_then(Value::as_str) == Some("True")
                })
            });
        if !established {
            return ReadinessState::NotReady {
                unsatisfied: vec!["condition Established is not True".into()],
            };
        }
    }
    let generation = live.pointer("/metadata/generation").and_then(Value::as_i64);
    let observed = live
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64);
    if let (Some(g), Some(o)) = (generation, observed)
        && o < g
    {
        return ReadinessState::NotReady {
            unsatisfied: vec![format!("observedGeneration {o} < generation {g}")],
        };
    }
    let conditions = live
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut unsatisfied = Vec::new();
    // Workloads (kstatus's Deployment/StatefulSet/ReplicaSet rules): every desired replica
    // ready, and a generation the workload controller has observed at all.
    let kind = live.get("kind").and_then(Value::as_str).unwrap_or_default();
    if matches!(kind, "Deployment" | "StatefulSet" | "ReplicaSet") {
        let want = live
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let ready = live
            .pointer("/status/readyReplicas")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if observed.is_none() && generation.is_some() {
            unsatisfied.push("status.observedGeneration not reported yet".into());
        } else if ready < want {
            unsatisfied.push(format!("{ready} of {want} replicas ready"));
        }
    }
    for c in conditions {
        let ty = c.get("type").and_then(Value::as_str).unwrap_or_default();
        if ty == "Ready" || ty == "Available" {
            let status = c.get("status").and_then(Value::as_str).unwrap_or_default();
            if status != "True" {
                unsatisfied.push(format!("condition {ty} is {status:?}"));
            }
        }
    }
    if unsatisfied.is_empty() {
        ReadinessState::Ready { at: None }
    } else {
        ReadinessState::NotReady { unsatisfied }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(name: &str, src: &str) -> ReadinessCheck {
        ReadinessCheck {
            name: name.into(),
            expr: Expr::compile(src).unwrap(),
            eno: false,
        }
    }

    /// A check written with Eno's prefix.
    fn eno_check(name: &str, src: &str) -> ReadinessCheck {
        ReadinessCheck {
            eno: true,
            ..check(name, src)
        }
    }

    #[test]
    fn checks_are_anded_and_unsatisfied_names_reported() {
        let checks = [
            check("default", "self.status.phase == 'Running'"),
            check("replicas", "self.status.ready >= 2"),
        ];
        let live = json!({"status": {"phase": "Running", "ready": 1}});
        assert_eq!(
            evaluate(&checks, Health::Exists, Some(&live)),
            ReadinessState::NotReady {
                unsatisfied: vec!["replicas".into()]
            }
        );
        let live = json!({"status": {"phase": "Running", "ready": 2}});
        assert_eq!(
            evaluate(&checks, Health::Exists, Some(&live)),
            ReadinessState::Ready { at: None }
        );
    }

    #[test]
    fn condition_lists_give_the_ready_time() {
        let checks = [check(
            "default",
            "self.status.conditions.filter(c, c.type == 'Ready' && c.status == 'True')",
        )];
        let live = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "Done",
             "lastTransitionTime": "2026-01-02T03:04:05Z"}
        ]}});
        assert_eq!(
            evaluate(&checks, Health::Exists, Some(&live)),
            ReadinessState::Ready {
                at: Some("2026-01-02T03:04:05Z".into())
            }
        );
        let live = json!({"status": {"conditions": []}});
        assert!(!evaluate(&checks, Health::Exists, Some(&live)).is_ready());
    }

    /// Eno's `Check.Eval` (`internal/readiness/readiness.go`), for checks written with Eno's
    /// prefix: a returned list matches on its *first* map with `status == "True"` and non-nil
    /// `type` and `reason`; its `lastTransitionTime` (RFC 3339, any offset) is the ready time,
    /// the current time when it has none (still "precise", so it wins over other checks' older
    /// times). `composition` is bound to an empty Composition (`controller.go` evaluates
    /// readiness with `&apiv1.Composition{}`; its nil maps read as empty).
    #[test]
    fn condition_lists_match_as_eno_matches_them() {
        let all = [eno_check("default", "self.status.conditions")];
        let eval = |conditions: Value| {
            evaluate(
                &all,
                Health::Exists,
                Some(&json!({"status": {"conditions": conditions}})),
            )
        };
        // No reason (or no type): not a match.
        assert!(!eval(json!([{"type": "Ready", "status": "True"}])).is_ready());
        assert!(!eval(json!([{"reason": "X", "status": "True"}])).is_ready());
        assert!(!eval(json!([{"type": "Ready", "reason": null, "status": "True"}])).is_ready());
        // The first match's time, not the latest; an offset is a time like any other.
        let two = json!([
            {"type": "A", "reason": "R", "status": "True", "lastTransitionTime": "2026-01-01T02:00:00+02:00"},
            {"type": "B", "reason": "R", "status": "True", "lastTransitionTime": "2026-05-01T00:00:00Z"}]);
        assert_eq!(
            eval(two),
            ReadinessState::Ready {
                at: Some("2026-01-01T00:00:00Z".into())
            }
        );
        // A match without a time: now, even beside another check's condition time.
        let checks = [
            eno_check("default", "self.status.a"),
            eno_check("b", "self.status.b"),
        ];
        let live = json!({"status": {
            "a": [{"type": "A", "reason": "R", "status": "True"}],
            "b": [{"type": "B", "reason": "R", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        assert_eq!(
            evaluate(&checks, Health::Exists, Some(&live)),
            ReadinessState::Ready { at: None }
        );
        let bound = [eno_check(
            "default",
            "composition.metadata.name == '' && size(composition.metadata.labels) == 0",
        )];
        assert!(evaluate(&bound, Health::Exists, Some(&json!({}))).is_ready());
    }

    /// Written with enoki's prefix, any True condition is enough (a Pod's `Ready` has no
    /// reason), at the latest time among them.
    #[test]
    fn enokis_condition_lists_take_any_true_condition_at_the_latest_time() {
        let all = [check("default", "self.status.conditions")];
        let live = json!({"status": {"conditions": [
            {"type": "A", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "B", "status": "True", "lastTransitionTime": "2026-05-01T00:00:00Z"},
            {"type": "C", "status": "False"}]}});
        assert_eq!(
            evaluate(&all, Health::Exists, Some(&live)),
            ReadinessState::Ready {
                at: Some("2026-05-01T00:00:00Z".into())
            }
        );
        let untimed = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        assert_eq!(
            evaluate(&all, Health::Exists, Some(&untimed)),
            ReadinessState::Ready { at: None }
        );
    }

    #[test]
    fn evaluation_errors_are_unsatisfied_not_panics() {
        let checks = [check("default", "self.status.nope.deeper")];
        match evaluate(&checks, Health::Exists, Some(&json!({}))) {
            ReadinessState::NotReady { unsatisfied } => assert!(unsatisfied[0].contains("error")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn crds_are_ready_once_established() {
        let crd = json!({"kind": "CustomResourceDefinition", "status": {"conditions": [{"type": "NamesAccepted", "status": "True"}]}});
        assert!(!kstatus(&crd).is_ready());
        let crd = json!({"kind": "CustomResourceDefinition", "status": {"conditions": [{"type": "Established", "status": "True"}]}});
        assert!(kstatus(&crd).is_ready());
    }

    #[test]
    fn kstatus_default() {
        assert!(kstatus(&json!({"metadata": {}})).is_ready());
        assert!(
            !kstatus(&json!({"metadata": {"generation": 2}, "status": {"observedGeneration": 1}}))
                .is_ready()
        );
        assert!(
            !kstatus(
                &json!({"status": {"conditions": [{"type": "Available", "status": "False"}]}})
            )
            .is_ready()
        );
        assert!(
            kstatus(&json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
                .is_ready()
        );
        assert_eq!(evaluate(&[], Health::Exists, None), ReadinessState::Absent);
    }

    #[test]
    fn kstatus_waits_for_workload_replicas() {
        let d = |status: Value| {
            json!({"kind": "Deployment", "metadata": {"generation": 1},
            "spec": {"replicas": 2}, "status": status})
        };
        assert!(!kstatus(&d(json!({}))).is_ready(), "never observed");
        assert!(!kstatus(&d(json!({"observedGeneration": 1, "readyReplicas": 1}))).is_ready());
        assert!(kstatus(&d(json!({"observedGeneration": 1, "readyReplicas": 2}))).is_ready());
    }

    #[test]
    fn without_checks_a_resource_is_ready_once_it_exists_unless_it_asks_for_kstatus() {
        let unavailable = json!({"kind": "Deployment", "metadata": {"generation": 2},
            "status": {"observedGeneration": 1,
                       "conditions": [{"type": "Available", "status": "False"}]}});
        assert!(
            evaluate(&[], Health::Exists, Some(&unavailable)).is_ready(),
            "Eno's rule"
        );
        assert!(!evaluate(&[], Health::Kstatus, Some(&unavailable)).is_ready());
        let crd = json!({"kind": "CustomResourceDefinition", "status": {}});
        assert!(
            !evaluate(&[], Health::Exists, Some(&crd)).is_ready(),
            "a CRD still waits for Established"
        );
    }
}
