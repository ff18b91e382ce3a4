//! Every well-known name in one place: annotation keys (each with its `eno.azure.io/` alias),
//! labels, the finalizer, the field manager, condition types and reasons.
//!
//! Code never spells these strings itself; it names the constant.

/// Prefix of every enoki annotation and label key.
pub const PREFIX: &str = "enoki.dev/";
/// Prefix of the Eno key accepted as an alias of every enoki key.
pub const ENO_PREFIX: &str = "eno.azure.io/";
/// Field manager for every server-side apply enoki performs.
pub const FIELD_MANAGER: &str = "enoki";
/// Eno's field manager: what Eno applied is "managed" for `pathManagedByEno` (a cluster moved
/// from Eno keeps its overrides' meaning).
pub const ENO_FIELD_MANAGER: &str = "eno";
/// Finalizer on Compositions (and instance-mode objects) that guards resource cleanup.
pub const FINALIZER: &str = "enoki.dev/cleanup";
/// KRM result tag: enoki publishes the result as a Kubernetes Event with this reason (the
/// SDK's `Output::event`).
pub const EVENT_REASON_TAG: &str = "enoki.dev/event-reason";
/// Synthesizer annotation choosing the finalizer its instance-mode objects get: absent →
/// [`FINALIZER`]; `none` → no finalizer (owner references and garbage collection remove the
/// implicit Composition); any other value → that finalizer (e.g. an upstream operator's own),
/// released after one last synthesis that sees the deletion and after the outputs are gone.
pub const INSTANCE_FINALIZER_ANNOTATION: &str = "enoki.dev/instance-finalizer";

/// On a tombstone taken from a synthesis whose record was lost (enoki writes it): the object is
/// deleted only when it carries this Composition's `managed-by` label.
pub const UNRECORDED_ANNOTATION: &str = "enoki.dev/unrecorded";
/// Label on managed objects and ResourceSlices with `--shards N` (N > 1): the owning
/// Composition's shard, `<index>-of-<N>`, so that each replica's watches are filtered by the
/// API server (not set unsharded).
pub const SHARD_LABEL: &str = "enoki.dev/shard";
/// Label on ResourceSlices: the owning Composition's name.
pub const SLICE_COMPOSITION_LABEL: &str = "enoki.dev/composition";
/// The key observed outputs are tracked under in a Composition's `inputRevisions`.
pub const OBSERVED_REVISION_KEY: &str = "enoki.dev/observed";
/// The key the target cluster's capabilities (served API versions and Kubernetes version) are
/// tracked under in a synthesis's input revisions.
pub const CAPABILITIES_REVISION_KEY: &str = "enoki.dev/capabilities";
/// Label on implicit (instance-mode) Compositions: the Synthesizer they run.
pub const INSTANCE_OF_LABEL: &str = "enoki.dev/instance-of";
/// Label on the Synthesizers enoki installs for its built-ins.
pub const BUILTIN_LABEL: &str = "enoki.dev/builtin";

/// The kinds of enoki's own API, as owner references and GVKs name them.
pub mod kinds {
    /// `Composition`.
    pub const COMPOSITION: &str = "Composition";
    /// `Synthesizer`.
    pub const SYNTHESIZER: &str = "Synthesizer";
    /// An immutable revision of a Synthesizer.
    pub const SYNTHESIZER_REVISION: &str = "SynthesizerRevision";
    /// `Symphony`.
    pub const SYMPHONY: &str = "Symphony";
    /// `ResourceSlice`.
    pub const RESOURCE_SLICE: &str = "ResourceSlice";
}

/// `apiVersion`s a Patch pseudo-resource may have (Eno's and enoki's).
pub const PATCH_API_VERSIONS: [&str; 2] = ["eno.azure.io/v1", "enoki.dev/v1alpha1"];

/// An annotation key and its Eno alias; both are accepted, `enoki` wins when both are set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// The `enoki.dev/<name>` spelling.
    pub enoki: &'static str,
    /// The `eno.azure.io/<name>` spelling.
    pub eno: &'static str,
}

impl Key {
    /// The key without its prefix, e.g. `readiness-group`.
    pub fn name(&self) -> &'static str {
        &self.enoki[PREFIX.len()..]
    }

    /// Whether `key` is either spelling of this key.
    pub fn matches(&self, key: &str) -> bool {
        key == self.enoki || key == self.eno
    }

    /// Looks the key up in a map of annotations, preferring the `enoki.dev/` spelling.
    pub fn get<'a>(
        &self,
        annotations: &'a std::collections::BTreeMap<String, String>,
    ) -> Option<&'a str> {
        annotations
            .get(self.enoki)
            .or_else(|| annotations.get(self.eno))
            .map(String::as_str)
    }
}

macro_rules! keys {
    ($($(#[$doc:meta])* $const:ident = $name:literal;)*) => {
        /// Annotation and label keys, each with its Eno alias.
        pub mod annotations {
            use super::Key;
            $(
                $(#[$doc])*
                pub const $const: Key = Key {
                    enoki: concat!("enoki.dev/", $name),
                    eno: concat!("eno.azure.io/", $name),
                };
            )*
            /// Every key above, for validation and stripping.
            pub const ALL: &[Key] = &[$($const),*];
        }
    };
}

keys! {
    /// CEL readiness check over `self`; `readiness-<name>` adds named checks, all ANDed.
    READINESS = "readiness";
    /// Integer readiness group; lower groups are applied and ready first (default 0).
    READINESS_GROUP = "readiness-group";
    /// Integer deletion group; lower groups are deleted first on composition deletion.
    DELETION_GROUP = "deletion-group";
    /// Humantime interval after which the resource is re-applied.
    RECONCILE_INTERVAL = "reconcile-interval";
    /// `"true"`: create the resource, never update it.
    DISABLE_UPDATES = "disable-updates";
    /// `"true"`: never touch the resource.
    DISABLE_RECONCILIATION = "disable-reconciliation";
    /// `"true"`: write with PUT instead of server-side apply.
    REPLACE = "replace";
    /// `orphan` or `foreground`; also settable on the Composition.
    DELETION_STRATEGY = "deletion-strategy";
    /// JSON list of `{path, value | valueExpression, condition}` overrides.
    OVERRIDES = "overrides";
    /// `"true"`: readiness/override failures do not block the resource.
    FAIL_OPEN = "fail-open";
    /// `"never"`: an existing object enoki does not manage is not adopted (a `Conflict`);
    /// default: adopted (Eno semantics). Another Composition's object is never taken over.
    ADOPT = "adopt";
    /// `"disabled"` (or `"false"`): enoki never deletes the object, neither when the output
    /// stops emitting it nor when the Composition is deleted (Flux's
    /// `kustomize.toolkit.fluxcd.io/prune: disabled`); default `"enabled"`.
    PRUNE = "prune";
    /// `watch` (default), `interval` or `off`.
    DRIFT = "drift";
    /// Readiness without CEL checks: `exists` (default, Eno) or `kstatus`. Cascading.
    HEALTH = "health";
    /// On synthesizer input items: the ref key the item is bound under.
    INPUT_KEY = "input-key";
    /// On synthesizer input items: the item is the live state of a previous output.
    OBSERVED = "observed";
    /// On Compositions: any new value forces a re-synthesis.
    FORCE_RESYNTHESIS = "force-resynthesis";
    /// On inputs: an integer revision that replaces resourceVersion for change detection.
    REVISION = "revision";
    /// On inputs: the Synthesizer generation the input's producer has seen; synthesis waits
    /// while the Synthesizer is newer (Eno's lockstep).
    SYNTHESIZER_GENERATION = "synthesizer-generation";
    /// On Compositions (`"true"`): only the Composition's own changes re-synthesize. On inputs:
    /// `"true"`, its changes never do; `"false"`, they always do (Eno).
    IGNORE_SIDE_EFFECTS = "ignore-side-effects";
    /// On Compositions (`"true"`): when its Symphony is gone, deletion releases the finalizer
    /// without waiting (Eno).
    FORCE_DELETE_WHEN_SYMPHONY_GONE = "forceDeleteWhenSymphonyGone";
    /// On inputs: the Composition generation the input's producer has seen (as above).
    COMPOSITION_GENERATION = "composition-generation";
    /// Label on every managed object: the owning composition's UID.
    MANAGED_BY = "managed-by";
}

/// Prefix of named readiness checks (`readiness-<name>`), in both spellings.
pub const READINESS_NAMED_PREFIXES: [&str; 2] = ["enoki.dev/readiness-", "eno.azure.io/readiness-"];

/// Whether an annotation or label key belongs to enoki or Eno (and is stripped before apply).
pub fn is_reserved_key(key: &str) -> bool {
    key.starts_with(PREFIX) || key.starts_with(ENO_PREFIX)
}

/// The annotation `enoki reconcile` sets (Flux's `reconcile.fluxcd.io/requestedAt`): a change
/// of the Composition, so its controller makes a pass and records the value in
/// `status.lastHandledReconcileAt`.
pub const RECONCILE_REQUESTED_AT: &str = "reconcile.enoki.dev/requestedAt";

/// Status condition types.
pub mod conditions {
    /// The current synthesis succeeded.
    pub const SYNTHESIZED: &str = "Synthesized";
    /// Every resource of the current synthesis was applied.
    pub const RECONCILED: &str = "Reconciled";
    /// Every resource of the current synthesis is ready (also the Synthesizer's module condition).
    pub const READY: &str = "Ready";
    /// kstatus: work is in progress.
    pub const RECONCILING: &str = "Reconciling";
    /// kstatus: progress is blocked until something changes.
    pub const STALLED: &str = "Stalled";
    /// `spec.suspend` is true: the Composition is neither synthesized nor reconciled.
    pub const SUSPENDED: &str = "Suspended";
}

/// Condition reasons and Event reasons.
pub mod reasons {
    /// Synthesis exceeded its deadline.
    pub const TIMEOUT: &str = "Timeout";
    /// Synthesis exceeded its memory cap.
    pub const MEMORY_LIMIT: &str = "MemoryLimit";
    /// Synthesis wrote more than its output cap.
    pub const OUTPUT_TOO_LARGE: &str = "OutputTooLarge";
    /// The synthesis input (bound inputs, collections, observed outputs) is over its limit.
    pub const INPUT_TOO_LARGE: &str = "InputTooLarge";
    /// The module trapped.
    pub const TRAP: &str = "Trap";
    /// The module exited non-zero.
    pub const EXIT_CODE: &str = "ExitCode";
    /// The module's output is not a valid ResourceList.
    pub const MALFORMED_OUTPUT: &str = "MalformedOutput";
    /// The output has no resources although the current synthesis has some, and neither the
    /// Synthesizer nor the Composition allows that (`allowEmpty`): refused, nothing deleted.
    pub const EMPTY_OUTPUT: &str = "EmptyOutput";
    /// The module reported an error result.
    pub const ERROR_RESULT: &str = "ErrorResult";
    /// The module could not be instantiated (e.g. missing imports).
    pub const INSTANTIATE: &str = "Instantiate";
    /// A required input does not exist.
    pub const MISSING_INPUT: &str = "MissingInput";
    /// Inputs out of lockstep (`revision`, `synthesizer-generation`, `composition-generation`).
    pub const MISMATCHED_INPUTS: &str = "MismatchedInputs";
    /// The module could not be fetched or compiled.
    pub const MODULE_UNAVAILABLE: &str = "ModuleUnavailable";
    /// A write was refused by RBAC: the Composition's ServiceAccount may not do it.
    pub const FORBIDDEN: &str = "Forbidden";
    /// A binding, `dependsOn`, ref, collection or module ConfigMap names another namespace
    /// while `--no-cross-namespace-refs` is on.
    pub const CROSS_NAMESPACE_REF: &str = "CrossNamespaceRef";
    /// An emitted object is owned by another Composition (its `managed-by` label): not
    /// taken over.
    pub const CONFLICT: &str = "Conflict";
    /// The Synthesizer's `spec.limits` exceed a ceiling the controller's operator set.
    pub const LIMITS_REFUSED: &str = "LimitsRefused";
    /// The Composition's spec is refused (e.g. `synthesisEnv` over its size limit); terminal
    /// until the spec changes.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// The next synthesis waits for the rollout cooldown (the current one is still applied).
    /// The Composition, or its namespace, synthesized more often (or wrote more slice bytes)
    /// than the controller's rates allow: the next synthesis waits, the current one applied.
    pub const SYNTHESIS_RATE_LIMITED: &str = "SynthesisRateLimited";
    pub const ROLLOUT_COOLDOWN: &str = "RolloutCooldown";
    /// With a remote target, the Composition's namespace has no `--remote-namespace-map`
    /// entry: it is applied nowhere.
    pub const REMOTE_NAMESPACE_UNMAPPED: &str = "RemoteNamespaceUnmapped";
    /// The synthesizer named by the Composition does not exist.
    pub const SYNTHESIZER_NOT_FOUND: &str = "SynthesizerNotFound";
    /// Synthesis succeeded.
    pub const SYNTHESIS_SUCCEEDED: &str = "SynthesisSucceeded";
    /// Synthesis is running.
    pub const SYNTHESIZING: &str = "Synthesizing";
    /// Every resource was applied.
    pub const APPLIED: &str = "Applied";
    /// Some resource failed to apply.
    pub const APPLY_FAILED: &str = "ApplyFailed";
    /// Resources are waiting on readiness.
    pub const NOT_READY: &str = "NotReady";
    /// Everything is ready.
    pub const ALL_READY: &str = "AllReady";
    /// The Composition is being deleted.
    pub const DELETING: &str = "Deleting";
    /// Another writer keeps changing a managed field.
    pub const FIELD_CONFLICT: &str = "FieldConflict";
    /// An annotation value did not parse and was read as Eno reads it (Warning Event).
    pub const INVALID_ANNOTATION: &str = "InvalidAnnotation";
    /// `spec.suspend` is true (the `Suspended` and `Reconciling` conditions' reason).
    pub const SUSPENDED: &str = "Suspended";
    /// The module was fetched and compiled.
    pub const MODULE_READY: &str = "ModuleReady";
    /// The Synthesizer's module is being fetched and compiled (by a task of its own): the
    /// next synthesis waits for it; the current one is still applied.
    pub const MODULE_LOADING: &str = "ModuleLoading";
    /// `dependsOn`: a dependency is missing or not ready, so synthesis waits.
    pub const WAITING_ON_DEPENDENCIES: &str = "WaitingOnDependencies";
    /// `dependsOn`: deletion waits until every dependent Composition is gone.
    pub const WAITING_ON_DEPENDENTS: &str = "WaitingOnDependents";
    /// `dependsOn` forms a cycle.
    pub const CIRCULAR_DEPENDENCY: &str = "CircularDependency";
    /// A dependency does not exist.
    pub const DEPENDENCY_NOT_FOUND: &str = "DependencyNotFound";
    /// A dependency exists but is not ready.
    pub const DEPENDENCY_NOT_READY: &str = "DependencyNotReady";
    /// A dependent still exists.
    pub const DEPENDENT_NOT_DELETED: &str = "DependentNotDeleted";
    /// The synthesis output could not be stored as ResourceSlices (e.g. a manifest too large
    /// for the API server); nothing of it was applied.
    pub const SLICE_WRITE_FAILED: &str = "SliceWriteFailed";
    /// A step of the reconcile failed for a reason retrying will not fix.
    pub const RECONCILE_FAILED: &str = "ReconcileFailed";
    /// The Synthesizer's `namespaceSelector` does not select the Composition's namespace.
    pub const SYNTHESIZER_NOT_ALLOWED: &str = "SynthesizerNotAllowed";
    /// A Symphony: one of its Compositions failed to synthesize its newest spec.
    pub const COMPOSITION_FAILED: &str = "CompositionFailed";
}

/// Labels enoki sets.
pub mod labels {
    /// On a Symphony's Compositions: the Symphony's name.
    pub const SYMPHONY: &str = "enoki.dev/symphony";
    /// On a Symphony's Compositions while the Symphony is deleted: their resources are
    /// orphaned (Eno semantics), not deleted.
    pub const SYMPHONY_DELETING: &str = "enoki.dev/symphony-deleting";
    /// Eno's spelling of [`SYMPHONY_DELETING`], honoured too.
    pub const ENO_SYMPHONY_DELETING: &str = "eno.azure.io/symphony-deleting";
}

/// Field manager of the Symphony controller (it writes Compositions).
pub const SYMPHONY_FIELD_MANAGER: &str = "enoki-symphony";

/// Synthesizer rollouts (`spec.rollout`, `status.rollout`, `enoki rollout`).
pub mod rollout {
    /// On a Synthesizer, `"true"`: its rollout admits no further wave (`enoki rollout pause`;
    /// a GitOps repository may set it too). Removing it resumes.
    pub const PAUSED_ANNOTATION: &str = "rollout.enoki.dev/paused";
    /// On a Synthesizer, a revision number: every Composition goes back to the revision before
    /// it (`enoki rollout undo`). Ignored once a newer revision exists.
    pub const UNDO_ANNOTATION: &str = "rollout.enoki.dev/undo";
    /// Rolling out.
    pub const PROGRESSING: &str = "Progressing";
    /// Held by the paused annotation.
    pub const PAUSED: &str = "Paused";
    /// Stopped by its health gate.
    pub const HALTED: &str = "Halted";
    /// Undone: every Composition goes back to the stable revision.
    pub const UNDONE: &str = "Undone";
    /// Every Composition runs the revision.
    pub const COMPLETE: &str = "Complete";
    /// Every phase, for metrics.
    pub const PHASES: [&str; 5] = [PROGRESSING, PAUSED, HALTED, UNDONE, COMPLETE];
}
