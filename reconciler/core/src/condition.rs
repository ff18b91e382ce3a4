//! Conditions and the simplified status, built as values.

use crds::ConditionStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Sets (or replaces) a condition, keeping `lastTransitionTime` when the status is unchanged.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    let status = ConditionStatus::from(status).to_string();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let transition = conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(now);
    conditions.retain(|c| c.type_ != type_);
    conditions.push(Condition {
        type_: type_.to_string(),
        status,
        reason: reason.to_string(),
        message: message.chars().take(4000).collect(),
        observed_generation: generation,
        last_transition_time: transition,
    });
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
}

/// Whether a condition is True.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions.iter().any(|c| c.type_ == type_ && holds(c))
}

/// A condition's status, as a word.
pub fn status_of(c: &Condition) -> ConditionStatus {
    ConditionStatus::from(c.status.as_str())
}

/// Whether `c` is True.
pub fn holds(c: &Condition) -> bool {
    status_of(c) == ConditionStatus::True
}

/// Whether `c` is False.
pub fn fails(c: &Condition) -> bool {
    status_of(c) == ConditionStatus::False
}

/// Keeps each condition's `lastTransitionTime` from `before` where its status is what it was
/// there: a pass may set one condition more than once on its way (the roll-up, then the
/// generation it speaks for), and only a change of status from the stored one is a transition.
pub fn keep_transitions(conditions: &mut [Condition], before: &[Condition]) {
    for c in conditions {
        if let Some(b) = before
            .iter()
            .find(|b| b.type_ == c.type_ && b.status == c.status)
        {
            c.last_transition_time = b.last_transition_time.clone();
        }
    }
}
