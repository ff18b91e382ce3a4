//! The one error type of the planning core. Every variant names the resource and, where there
//! is one, the annotation key.

/// Why a synthesis's output cannot be planned.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// A manifest is not a Kubernetes object.
    #[error("resource #{index}: {message}")]
    Manifest {
        /// Index of the item in the synthesis output.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// Two manifests name the same object.
    #[error("duplicate resource {resource}")]
    Duplicate {
        /// The duplicated resource.
        resource: String,
    },
    /// An annotation value does not parse.
    #[error("resource {resource}: annotation {key}: {message}")]
    Annotation {
        /// The resource carrying it.
        resource: String,
        /// The annotation key as written.
        key: String,
        /// What is wrong with the value.
        message: String,
    },
    /// A CEL expression in an annotation does not compile.
    #[error("resource {resource}: annotation {key}: CEL does not compile: {message}")]
    CompileCel {
        /// The resource carrying it.
        resource: String,
        /// The annotation key as written.
        key: String,
        /// The compiler's message.
        message: String,
    },
    /// Resources form a dependency cycle (every member listed).
    #[error("resources form a dependency cycle: {members:?}")]
    DependencyCycle {
        /// Every resource in the cycle.
        members: Vec<String>,
    },
}

impl PlanError {
    /// A fixed PascalCase name, used as a metric label and Event reason.
    pub fn category(&self) -> &'static str {
        match self {
            PlanError::Manifest { .. } => "InvalidManifest",
            PlanError::Duplicate { .. } => "DuplicateResource",
            PlanError::Annotation { .. } => crds::names::reasons::INVALID_ANNOTATION,
            PlanError::CompileCel { .. } => "InvalidCel",
            PlanError::DependencyCycle { .. } => "DependencyCycle",
        }
    }

    /// Planning errors are properties of the synthesis output: retrying never helps.
    pub fn is_transient(&self) -> bool {
        false
    }
}
