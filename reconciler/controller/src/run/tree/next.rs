//! What `enoki status` says of the next synthesis: suspended, blocked (and by what), in
//! flight, or up to date. Pure.

use super::{ConditionView, Next};
use crds::ConditionStatus;
use crds::names::{conditions, reasons};

/// What happens to the next synthesis, from the status (`suspend`: the spec says so).
pub(super) fn next(
    suspend: bool,
    st: &crds::CompositionStatus,
    conditions: &[ConditionView],
) -> Next {
    if suspend {
        return Next {
            state: "suspended".into(),
            reason: Some(reasons::SUSPENDED.into()),
            message: Some(crate::run::composition::suspend::MESSAGE.into()),
        };
    }
    if let Some(d) = st.dependency_status.as_ref().filter(|d| d.blocked) {
        let who: Vec<String> = d
            .blocked_by
            .iter()
            .map(|b| format!("{}/{} ({})", b.namespace, b.name, b.reason))
            .collect();
        return Next {
            state: "blocked".into(),
            reason: Some(reasons::DEPENDENCY_NOT_READY.into()),
            message: Some(format!(
                "dependsOn: {}",
                d.reason.clone().unwrap_or_else(|| who.join(", "))
            )),
        };
    }
    let synthesized = conditions
        .iter()
        .find(|c| c.type_ == conditions::SYNTHESIZED);
    if let Some(c) = synthesized.filter(|c| c.status != ConditionStatus::True) {
        return Next {
            state: "blocked".into(),
            reason: Some(c.reason.clone()),
            message: Some(c.message.clone()),
        };
    }
    // A canceled in-flight synthesis (a failed attempt) is not running.
    if st
        .in_flight_synthesis
        .as_ref()
        .is_some_and(|s| s.canceled.is_none())
    {
        return Next {
            state: "in-flight".into(),
            reason: None,
            message: Some("a synthesis is running".into()),
        };
    }
    Next {
        state: "up-to-date".into(),
        reason: None,
        message: None,
    }
}
