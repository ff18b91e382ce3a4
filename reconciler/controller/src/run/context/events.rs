//! The reporter handle: Kubernetes Events on Compositions and other objects (best effort:
//! failures are logged) and the controller's metrics.

use super::*;

/// What a pass reports besides status: Events and metrics.
pub(crate) struct Reporter {
    /// The controller's metrics.
    pub(crate) metrics: metrics::Metrics,
    /// The shared recorder (repeats of an Event are counted into a series).
    recorder: kube::runtime::events::Recorder,
    /// Who publishes the Events (`reportingController`/`reportingInstance`).
    reporter: kube::runtime::events::Reporter,
    /// The client Events are written with.
    client: Client,
}

impl Reporter {
    /// Events written with `client` as `reporter`, metrics into `metrics`.
    pub(crate) fn new(
        client: Client,
        reporter: kube::runtime::events::Reporter,
        metrics: metrics::Metrics,
    ) -> Reporter {
        Reporter {
            recorder: kube::runtime::events::Recorder::new(client.clone(), reporter.clone()),
            metrics,
            reporter,
            client,
        }
    }

    /// Publishes a Kubernetes Event on the Composition (best effort: failures are logged).
    pub(crate) async fn event(
        &self,
        comp: &Composition,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        use kube::Resource;
        self.event_on(&comp.object_ref(&()), warning, reason, action, note)
            .await;
    }

    /// Publishes a new Kubernetes Event on `object`, never folded into an earlier Event with
    /// the same reason (the shared recorder counts repeats into a series and keeps the first
    /// note: right for a failure that repeats, wrong for a synthesizer's events whose notes
    /// differ, e.g. one `NamespaceAdded` per namespace).
    pub(crate) async fn event_distinct(
        &self,
        object: &k8s_openapi::api::core::v1::ObjectReference,
        warning: bool,
        (reason, action): (&str, &str),
        note: String,
    ) {
        let ev = event(warning, reason, action, &note);
        let recorder =
            kube::runtime::events::Recorder::new(self.client.clone(), self.reporter.clone());
        if let Err(e) = recorder.publish(&ev, object).await {
            tracing::debug!(error = %e, "cannot publish event");
        }
    }

    /// Publishes a Kubernetes Event on any object (best effort: failures are logged).
    pub(crate) async fn event_on(
        &self,
        object: &k8s_openapi::api::core::v1::ObjectReference,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let ev = event(warning, reason, action, &note);
        if let Err(e) = self.recorder.publish(&ev, object).await {
            tracing::debug!(error = %e, "cannot publish event");
        }
    }
}

/// An Event (the note cut to 1000 characters).
pub(super) fn event(
    warning: bool,
    reason: &str,
    action: &str,
    note: &str,
) -> kube::runtime::events::Event {
    use kube::runtime::events::{Event, EventType};
    Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.to_string(),
        note: Some(note.chars().take(1000).collect()),
        action: action.to_string(),
        secondary: None,
    }
}
