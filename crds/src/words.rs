//! The words of the status enoki writes, as types: `status.simplified.status`, a result's
//! `severity` and a condition's `status`. On the wire each is the string it always was (the
//! schema says `string`); a word this version does not know is kept as read (`Other`), so
//! a status written by a newer or older controller still reads.

use serde::{Deserialize, Serialize};

macro_rules! words {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $s:literal,)* }) => {
        $(#[$m])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(from = "String", into = "String")]
        pub enum $name {
            $($(#[$vm])* $v,)*
            /// A word this version does not know, kept as read.
            Other(String),
        }

        impl $name {
            /// The word on the wire.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$v => $s,)*
                    Self::Other(s) => s,
                }
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                match s.as_str() {
                    $($s => Self::$v,)*
                    _ => Self::Other(s),
                }
            }
        }

        impl From<&str> for $name {
            /// Allocates only for a word this version does not know.
            fn from(s: &str) -> Self {
                match s {
                    $($s => Self::$v,)*
                    _ => Self::Other(s.to_string()),
                }
            }
        }

        impl From<$name> for String {
            fn from(w: $name) -> String {
                match w {
                    $name::Other(s) => s,
                    known => known.as_str().to_string(),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    };
}

words! {
    /// `status.simplified.status`: the one word `kubectl get composition` shows (Eno's words).
    StatusWord {
        /// Every resource is reconciled and ready.
        Ready = "Ready",
        /// Every resource is reconciled; some are not ready yet.
        NotReady = "NotReady",
        /// Resources are being applied (or a write failed: `simplified.error` says why).
        Reconciling = "Reconciling",
        /// The Composition is being deleted.
        Deleting = "Deleting",
        /// The Composition cannot be synthesized until it is changed.
        Failed = "Failed",
        /// A synthesis failed and is retried after a backoff.
        SynthesisBackoff = "SynthesisBackoff",
        /// A bound input does not exist.
        MissingInputs = "MissingInputs",
        /// The Synthesizer does not exist.
        MissingSynthesizer = "MissingSynthesizer",
        /// Inputs that must move in lockstep disagree.
        MismatchedInputs = "MismatchedInputs",
        /// A Synthesizer change waits for the rollout cooldown.
        RolloutCooldown = "RolloutCooldown",
        /// A Composition it depends on is not ready.
        WaitingOnDependencies = "WaitingOnDependencies",
        /// The synthesis rate of the Composition or its namespace is exceeded.
        SynthesisRateLimited = "SynthesisRateLimited",
        /// `spec.suspend` is true: neither synthesized nor reconciled.
        Suspended = "Suspended",
    }
}

words! {
    /// A synthesis result's `severity` (KRM): empty when the synthesizer set none.
    #[derive(Default)]
    Severity {
        /// Fails the synthesis.
        Error = "error",
        /// Shown to users.
        Warning = "warning",
        /// Recorded.
        Info = "info",
        /// None given (KRM: optional; not an error).
        #[default]
        Unset = "",
    }
}

words! {
    /// A condition's `status`.
    ConditionStatus {
        /// The condition holds.
        True = "True",
        /// It does not.
        False = "False",
        /// Not known.
        Unknown = "Unknown",
    }
}

impl From<bool> for ConditionStatus {
    fn from(b: bool) -> Self {
        if b {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_read_and_write_as_the_strings_they_were() {
        for w in ["Ready", "SynthesisBackoff", "WaitingOnDependencies"] {
            let word: StatusWord = serde_json::from_value(serde_json::json!(w)).unwrap();
            assert!(!matches!(word, StatusWord::Other(_)), "{w}");
            assert_eq!(serde_json::to_value(&word).unwrap(), serde_json::json!(w));
        }
        let newer: StatusWord = serde_json::from_value(serde_json::json!("Synthesizing")).unwrap();
        assert_eq!(newer, StatusWord::Other("Synthesizing".into()));
        assert_eq!(serde_json::to_value(&newer).unwrap(), "Synthesizing");
        assert_eq!(Severity::from(""), Severity::Unset);
        assert_eq!(Severity::from("fatal").as_str(), "fatal");
        assert_eq!(ConditionStatus::from(true), "True");
    }
}
