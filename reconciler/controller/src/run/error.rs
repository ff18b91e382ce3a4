//! The errors of a reconcile, one variant per step that failed, and the backoff they drive.
//!
//! `is_transient()` decides what `error_policy` does: transient failures (the API server is
//! unreachable, overloaded or returned a conflict) are retried with per-object exponential
//! backoff and jitter; terminal ones (forbidden, invalid, too large) become a condition and a
//! Warning Event and are retried only at the capped delay, never in a hot loop.

use std::time::Duration;

use plan::ResourceKey;

mod step;
pub use step::Step;

/// Errors of a reconcile; each names the step that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the Composition's Synthesizer failed.
    #[error("reading Synthesizer {name:?}")]
    ReadSynthesizer {
        /// The Synthesizer.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Reading a bound input failed.
    #[error("reading input {key:?}")]
    ReadInput {
        /// The ref key.
        key: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Reading another Composition (dependsOn, dependents) failed.
    #[error("reading Composition {name:?} (dependsOn)")]
    ReadDependency {
        /// `namespace/name`, or `*` for a list.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Reading a ResourceSlice failed.
    #[error("reading ResourceSlice {name:?}")]
    ReadSlice {
        /// The slice.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Creating a ResourceSlice failed (the partial set was removed again).
    #[error("writing ResourceSlice {name:?}")]
    WriteSlice {
        /// The slice.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Writing per-resource status into a ResourceSlice failed.
    #[error("writing the status of ResourceSlice {name:?}")]
    WriteSliceStatus {
        /// The slice.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Reading a managed object failed.
    #[error("reading {key}")]
    ReadResource {
        /// The resource.
        key: ResourceKey,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Writing the Composition's status failed.
    #[error("writing Composition status")]
    WriteStatus {
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Adding or removing the cleanup finalizer failed.
    #[error("{action} the cleanup finalizer")]
    Finalizer {
        /// `adding` or `removing`.
        action: &'static str,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Another step's API call failed (collections, observed outputs, Symphonies, instance
    /// mode, discovery, the sweep outside the namespace).
    #[error("{step}")]
    Api {
        /// What was being done.
        step: Step,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A client impersonating a Composition's ServiceAccount could not be built.
    #[error("impersonating {user}")]
    Impersonate {
        /// The impersonated user.
        user: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// A ResourceSlice was deleted or rewritten between a pass's two reads of it (the pass
    /// starts over).
    #[error("ResourceSlice {name:?} changed while it was read")]
    SliceChanged {
        /// The slice.
        name: String,
    },
    /// A blocking task (a synthesis) could not be joined.
    #[error("synthesis task failed")]
    Task(#[source] tokio::task::JoinError),
    /// A synthesized Secret could not be sealed for its ResourceSlice (no slice key loaded
    /// yet: retried with backoff).
    #[error("sealing Secret {name:?} for its ResourceSlice")]
    SealSecret {
        /// The Secret.
        name: String,
        /// Why.
        #[source]
        source: super::sealing::SealError,
    },
}

impl Error {
    fn kube_source(&self) -> Option<&kube::Error> {
        match self {
            Error::ReadSynthesizer { source, .. }
            | Error::ReadInput { source, .. }
            | Error::ReadDependency { source, .. }
            | Error::ReadSlice { source, .. }
            | Error::WriteSlice { source, .. }
            | Error::WriteSliceStatus { source, .. }
            | Error::ReadResource { source, .. }
            | Error::WriteStatus { source }
            | Error::Finalizer { source, .. }
            | Error::Api { source, .. }
            | Error::Impersonate { source, .. } => Some(source),
            Error::Task(_) | Error::SealSecret { .. } | Error::SliceChanged { .. } => None,
        }
    }

    /// Every value [`Error::category`] returns (the metric's series start at 0).
    pub const CATEGORIES: &'static [&'static str] = &[
        "ReadSynthesizer",
        "ReadInput",
        "ReadDependency",
        "ReadSlice",
        "WriteSlice",
        "WriteSliceStatus",
        "ReadResource",
        "WriteStatus",
        "StatusConflict",
        "Finalizer",
        "KubeApi",
        "Impersonate",
        "Task",
        "SealSecret",
        "SliceChanged",
    ];

    /// A fixed PascalCase name for metrics and Events.
    pub fn category(&self) -> &'static str {
        match self {
            Error::ReadSynthesizer { .. } => "ReadSynthesizer",
            Error::ReadInput { .. } => "ReadInput",
            Error::ReadDependency { .. } => "ReadDependency",
            Error::ReadSlice { .. } => "ReadSlice",
            Error::WriteSlice { .. } => "WriteSlice",
            Error::WriteSliceStatus { .. } => "WriteSliceStatus",
            Error::ReadResource { .. } => "ReadResource",
            Error::WriteStatus { .. } if self.is_conflict() => "StatusConflict",
            Error::WriteStatus { .. } => "WriteStatus",
            Error::Finalizer { .. } => "Finalizer",
            Error::Api { .. } => "KubeApi",
            Error::Impersonate { .. } => "Impersonate",
            Error::Task(_) => "Task",
            Error::SealSecret { .. } => "SealSecret",
            Error::SliceChanged { .. } => "SliceChanged",
        }
    }

    /// Whether a status write was refused because the Composition changed since the pass
    /// read it (`409 Conflict` on the resourceVersion it named).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::WriteStatus { source: kube::Error::Api(s) } if s.code == 409)
    }

    /// Whether retrying soon may succeed: the API server was unreachable, overloaded, timed
    /// out or reported a conflict. Forbidden, invalid and too-large requests are terminal.
    pub fn is_transient(&self) -> bool {
        if matches!(self, Error::SealSecret { .. } | Error::SliceChanged { .. }) {
            return true;
        }
        match self.kube_source() {
            Some(e) => kube_is_transient(e),
            None => false,
        }
    }
}

/// Whether a Kubernetes API error is worth retrying soon.
pub fn kube_is_transient(e: &kube::Error) -> bool {
    match e {
        // etcd refuses objects over its request limit with a 500: retrying cannot help.
        kube::Error::Api(resp) if resp.message.contains("request is too large") => false,
        kube::Error::Api(resp) => matches!(resp.code, 404 | 409 | 429 | 500..=599),
        kube::Error::SerdeError(_) => false,
        _ => true,
    }
}

/// Whether an API error says the kind itself is not served: a `404` whose body is not a
/// Kubernetes `NotFound` Status (the API server's plain `404 page not found` for a resource
/// path it does not serve, e.g. after the kind's CRD was deleted).
pub fn kind_not_served(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404 && s.reason != "NotFound")
}

/// `step` → a closure wrapping a `kube::Error` as [`Error::Api`].
pub(crate) fn api_err(step: Step) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Api { step, source }
}

/// The whole chain of an error, `outer: inner: …`, for conditions and logs.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut src = e.source();
    while let Some(s) = src {
        parts.push(s.to_string());
        src = s.source();
    }
    parts.join(": ")
}

/// The one error policy of every controller (Compositions, Symphonies, Synthesizers,
/// instances): a transient error (see [`Error::is_transient`]) is retried after an
/// exponentially growing, jittered delay (`failures` in a row for that object, 1-based); a
/// terminal one only after [`BACKOFF_CAP`].
pub fn retry_after(err: &Error, failures: u32) -> Duration {
    if err.is_transient() {
        backoff_delay(failures, 0.5 + rand::random::<f64>() / 2.0)
    } else {
        BACKOFF_CAP
    }
}

/// The first retry delay of a failing object.
pub const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// The longest delay between two retries of a failing object.
pub const BACKOFF_CAP: Duration = Duration::from_secs(300);

/// The delay before retry number `failures` (1-based): `BACKOFF_BASE · 2^(failures-1)`,
/// capped at [`BACKOFF_CAP`], scaled by `jitter` (a factor in `[0.5, 1.0]` drawn by the
/// caller, so this stays a pure function).
pub fn backoff_delay(failures: u32, jitter: f64) -> Duration {
    let exp = failures.saturating_sub(1).min(20);
    let raw = BACKOFF_BASE.saturating_mul(1u32 << exp).min(BACKOFF_CAP);
    raw.mul_f64(jitter.clamp(0.5, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("boom", "Reason")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn server_and_conflict_errors_are_transient_client_errors_are_not() {
        for code in [409, 429, 500, 503, 504] {
            assert!(kube_is_transient(&api_error(code)), "{code}");
        }
        for code in [400, 403, 413, 422] {
            assert!(!kube_is_transient(&api_error(code)), "{code}");
        }
        let too_large = kube::Error::Api(
            kube::core::Status::failure("etcdserver: request is too large", "")
                .with_code(500)
                .boxed(),
        );
        assert!(!kube_is_transient(&too_large));
        let e = Error::WriteSlice {
            name: "s".into(),
            source: api_error(413),
        };
        assert!(!e.is_transient());
        assert_eq!(e.category(), "WriteSlice");
    }

    #[test]
    fn a_plain_404_means_the_kind_is_not_served_a_not_found_status_does_not() {
        let gone = kube::Error::Api(
            kube::core::Status::failure("404 page not found", "Failed to parse error data")
                .with_code(404)
                .boxed(),
        );
        assert!(kind_not_served(&gone));
        let missing = kube::Error::Api(
            kube::core::Status::failure("widgets \"w\" not found", "NotFound")
                .with_code(404)
                .boxed(),
        );
        assert!(!kind_not_served(&missing));
        assert!(!kind_not_served(&api_error(403)));
    }

    #[test]
    fn backoff_doubles_from_half_a_second_and_is_capped() {
        let d: Vec<u128> = (1..=12)
            .map(|n| backoff_delay(n, 1.0).as_millis())
            .collect();
        assert_eq!(
            d,
            [
                500, 1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000, 256000, 300000, 300000
            ]
        );
        assert_eq!(backoff_delay(100, 1.0), BACKOFF_CAP);
        assert_eq!(backoff_delay(1, 0.5).as_millis(), 250);
        assert_eq!(backoff_delay(1, 0.1).as_millis(), 250, "jitter is clamped");
    }

    #[test]
    fn the_chain_prints_every_source() {
        let e = Error::ReadInput {
            key: "config".into(),
            source: api_error(500),
        };
        assert!(
            chain(&e).starts_with("reading input \"config\": "),
            "{}",
            chain(&e)
        );
    }

    #[test]
    fn one_policy_retries_transient_errors_with_backoff_and_terminal_ones_at_the_cap() {
        let transient = Error::Api {
            step: Step::ReadSymphony,
            source: kube::Error::Api(Box::new(kube::core::Status {
                code: 503,
                ..Default::default()
            })),
        };
        let terminal = Error::Api {
            step: Step::SymphonyStatus,
            source: kube::Error::Api(Box::new(kube::core::Status {
                code: 403,
                ..Default::default()
            })),
        };
        assert!(retry_after(&transient, 1) <= BACKOFF_BASE);
        assert!(retry_after(&transient, 4) > retry_after(&transient, 1));
        assert!(retry_after(&transient, 100) <= BACKOFF_CAP);
        assert_eq!(retry_after(&terminal, 1), BACKOFF_CAP);
    }
}
