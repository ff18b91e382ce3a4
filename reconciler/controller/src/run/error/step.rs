//! The API calls of steps other than a Composition pass's own reads and writes (Symphonies,
//! instance mode, inputs, the sweep of outputs outside the namespace, discovery): one variant
//! each, so an [`super::Error::Api`] names what was being done, and its metric category.

use plan::ResourceKey;

/// What was being done when an API call failed.
#[derive(Debug, thiserror::Error)]
pub enum Step {
    /// Building a client that impersonates the Composition's ServiceAccount.
    #[error("building the impersonating client")]
    ImpersonatingClient,
    /// Reading an emitted object for `enoki.dev/observed`.
    #[error("reading observed output {0}")]
    ReadObserved(ResourceKey),
    /// Listing a collection input.
    #[error("listing input {0:?}")]
    ListInput(String),
    /// Listing the namespaces a collection input selects.
    #[error("listing namespaces for {0:?}")]
    ListNamespaces(String),
    /// Listing the namespaces a Synthesizer's `namespaceSelector` selects.
    #[error("listing namespaces for the Synthesizer's namespaceSelector")]
    NamespaceSelector,
    /// Listing the Compositions that depend on this one.
    #[error("listing the Compositions that depend on this one")]
    ListDependents,
    /// Reading the target cluster's discovery (a chart's `.Capabilities`).
    #[error("reading the target cluster's discovery (the .Capabilities of a chart)")]
    Discovery,
    /// Reading the Symphony that owns a Composition.
    #[error("reading the owning Symphony")]
    ReadSymphony,
    /// Adding (`true`) or removing the Symphony's finalizer.
    #[error("{} the Symphony finalizer", if *.0 { "adding" } else { "removing" })]
    SymphonyFinalizer(bool),
    /// Writing a Symphony's status.
    #[error("writing Symphony status")]
    SymphonyStatus,
    /// Listing a Symphony's Compositions.
    #[error("listing the Symphony's Compositions")]
    ListVariations,
    /// Writing one of a Symphony's Compositions.
    #[error("{0} Composition {1:?} of the Symphony")]
    WriteVariation(VariationWrite, String),
    /// Adding (`true`) or removing an instance's finalizer.
    #[error("{} the instance finalizer", if *.0 { "setting" } else { "removing" })]
    InstanceFinalizer(bool),
    /// An instance's implicit Composition.
    #[error("{0} the implicit Composition {1:?}")]
    ImplicitComposition(ImplicitWrite, String),
    /// Resolving the kind of an instance (instance mode's status write-back).
    #[error("resolving the instance kind")]
    ResolveInstanceKind,
    /// Writing the status a synthesis gives its instance.
    #[error("writing the status of {0} {1}")]
    InstanceStatus(String, String),
    /// Reading (`true`) or deleting an emitted object outside the namespace (the sweep after
    /// the namespace is deleted).
    #[error("{} an output outside the namespace", if *.0 { "reading" } else { "deleting" })]
    OutsideOutput(bool),
}

/// A write to one of a Symphony's Compositions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VariationWrite {
    Apply,
    MarkDeleting,
    PruneMetadata,
    Delete,
}

/// A step on an instance's implicit Composition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImplicitWrite {
    Apply,
    Read,
    MarkLastSynthesis,
    Delete,
}

impl std::fmt::Display for VariationWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            VariationWrite::Apply => "applying",
            VariationWrite::MarkDeleting => "labelling symphony-deleting",
            VariationWrite::PruneMetadata => "pruning labels and annotations of",
            VariationWrite::Delete => "deleting the removed variation's",
        })
    }
}

impl std::fmt::Display for ImplicitWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ImplicitWrite::Apply => "applying",
            ImplicitWrite::Read => "reading",
            ImplicitWrite::MarkLastSynthesis => "marking for its last synthesis",
            ImplicitWrite::Delete => "deleting",
        })
    }
}

impl Step {
    /// Every value [`Step::category`] returns.
    pub const CATEGORIES: &'static [&'static str] = &[
        "ImpersonatingClient",
        "ReadObserved",
        "ListInput",
        "ListNamespaces",
        "NamespaceSelector",
        "ListDependents",
        "Discovery",
        "ReadSymphony",
        "SymphonyFinalizer",
        "SymphonyStatus",
        "ListVariations",
        "WriteVariation",
        "InstanceFinalizer",
        "ImplicitComposition",
        "ResolveInstanceKind",
        "InstanceStatus",
        "OutsideOutput",
    ];

    /// A fixed PascalCase name for metrics and Events.
    pub fn category(&self) -> &'static str {
        match self {
            Step::ImpersonatingClient => "ImpersonatingClient",
            Step::ReadObserved(_) => "ReadObserved",
            Step::ListInput(_) => "ListInput",
            Step::ListNamespaces(_) => "ListNamespaces",
            Step::NamespaceSelector => "NamespaceSelector",
            Step::ListDependents => "ListDependents",
            Step::Discovery => "Discovery",
            Step::ReadSymphony => "ReadSymphony",
            Step::SymphonyFinalizer(_) => "SymphonyFinalizer",
            Step::SymphonyStatus => "SymphonyStatus",
            Step::ListVariations => "ListVariations",
            Step::WriteVariation(..) => "WriteVariation",
            Step::InstanceFinalizer(_) => "InstanceFinalizer",
            Step::ImplicitComposition(..) => "ImplicitComposition",
            Step::ResolveInstanceKind => "ResolveInstanceKind",
            Step::InstanceStatus(..) => "InstanceStatus",
            Step::OutsideOutput(_) => "OutsideOutput",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_says_what_was_being_done_and_has_a_category_of_its_own() {
        assert_eq!(
            Step::SymphonyFinalizer(true).to_string(),
            "adding the Symphony finalizer"
        );
        assert_eq!(
            Step::OutsideOutput(false).to_string(),
            "deleting an output outside the namespace"
        );
        assert_eq!(
            Step::WriteVariation(VariationWrite::Apply, "web".into()).to_string(),
            "applying Composition \"web\" of the Symphony"
        );
        let e = super::super::api_err(Step::ImplicitComposition(
            ImplicitWrite::Delete,
            "i".into(),
        ))(kube::Error::Api(Box::default()));
        assert_eq!(e.category(), "ImplicitComposition");
        let all: Vec<_> = super::super::Error::categories().collect();
        let unique: std::collections::BTreeSet<_> = all.iter().collect();
        assert_eq!(unique.len(), all.len(), "{all:?}");
        assert!(all.contains(&e.category()));
    }
}
