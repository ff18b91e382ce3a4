//! The API calls of steps other than a Composition pass's own reads and writes (Symphonies,
//! instance mode, inputs, the sweep of outputs outside the namespace, discovery): one variant
//! each, so an [`super::Error::Api`] says what was being done (its category, in metrics,
//! Events and conditions, is `KubeApi`).

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
    /// Applying one of a Symphony's Compositions.
    #[error("applying Composition {0}")]
    ApplyVariation(String),
    /// Labelling a Composition of a deleted Symphony `symphony-deleting`.
    #[error("labelling a Composition symphony-deleting")]
    MarkVariationDeleting,
    /// Deleting the Composition of a removed variation.
    #[error("deleting a removed variation's Composition")]
    DeleteVariation,
    /// Pruning labels and annotations a variation no longer sets.
    #[error("pruning labels and annotations of Composition {0}")]
    PruneVariation(String),
    /// Setting an instance's finalizer.
    #[error("setting the instance finalizer")]
    SetInstanceFinalizer,
    /// Removing an instance's finalizer (`true`: a stale one).
    #[error("removing {} instance finalizer", if *.0 { "a stale" } else { "the" })]
    RemoveInstanceFinalizer(bool),
    /// Applying an instance's implicit Composition.
    #[error("applying the implicit Composition {0}")]
    ApplyImplicit(String),
    /// Reading an instance's implicit Composition.
    #[error("reading the implicit Composition")]
    ReadImplicit,
    /// Marking the implicit Composition for its last synthesis.
    #[error("marking the implicit Composition for its last synthesis")]
    MarkImplicit,
    /// Deleting an instance's implicit Composition.
    #[error("deleting the implicit Composition")]
    DeleteImplicit,
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
    /// A step of mirroring an `eno.azure.io` object (`--serve-eno-api`), as said.
    #[error("{0}")]
    EnoMirror(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_says_what_was_being_done() {
        let cases = [
            (
                Step::SymphonyFinalizer(true),
                "adding the Symphony finalizer",
            ),
            (
                Step::OutsideOutput(false),
                "deleting an output outside the namespace",
            ),
            (
                Step::ApplyVariation("web".into()),
                "applying Composition web",
            ),
            (
                Step::RemoveInstanceFinalizer(true),
                "removing a stale instance finalizer",
            ),
            (
                Step::RemoveInstanceFinalizer(false),
                "removing the instance finalizer",
            ),
            (
                Step::ApplyImplicit("i".into()),
                "applying the implicit Composition i",
            ),
        ];
        for (step, text) in cases {
            assert_eq!(step.to_string(), text);
        }
        let e = super::super::api_err(Step::DeleteImplicit)(kube::Error::Api(Box::default()));
        assert_eq!(e.category(), "KubeApi");
        assert_eq!(e.to_string(), "deleting the implicit Composition");
    }
}
