//! Why a synthesis fails, and the bounds on what one may take and emit.

use wasm_host::HostError;

use crds::names::reasons;

/// Why a synthesis failed; `reason()` is the condition reason.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SynthesisError {
    /// The module failed in the sandbox.
    #[error(transparent)]
    Host(#[from] HostError),
    /// stdout is not a ResourceList.
    #[error("output is not a ResourceList: {message}")]
    MalformedOutput {
        /// Parser message with position.
        message: String,
    },
    /// The synthesizer reported errors.
    #[error("synthesizer reported: {}", messages.join("; "))]
    ErrorResult {
        /// The error messages.
        messages: Vec<String>,
        /// The `enoki.dev/event-reason` tag of the first error result that has one: the
        /// reason of the Event on the instance.
        event_reason: Option<String>,
        /// Every result of the run (kept on the in-flight synthesis, as Eno keeps them).
        results: Vec<crds::SynthesisResult>,
    },
    /// An item is invalid (missing fields, duplicates, bad annotations).
    #[error("invalid output: {message}")]
    InvalidOutput {
        /// Names the item and field.
        message: String,
    },
    /// The output holds more items than the controller accepts.
    #[error(
        "the output holds {count} items, over the limit of {MAX_OUTPUT_ITEMS} per synthesis \
         (split the synthesizer, or emit fewer, larger objects)"
    )]
    TooManyItems {
        /// Items in the output.
        count: usize,
    },
    /// The output holds more values (objects, lists, scalars, results included) than the
    /// controller parses: each becomes an allocation in the host.
    #[error(
        "the output holds more than {MAX_OUTPUT_VALUES} values (objects, lists and scalars, \
         results included), over the limit per synthesis: emit fewer or smaller objects"
    )]
    TooManyValues,
    /// The inputs passed to the module are larger than the controller accepts.
    #[error(
        "the synthesis input is {size} bytes (bound inputs, collections and observed outputs), \
         over the limit of {MAX_INPUT_BYTES} bytes: bind fewer or smaller objects"
    )]
    InputTooLarge {
        /// Bytes of stdin.
        size: usize,
    },
}

/// Most items one synthesis may emit: the host-side memory of a run (parsed output, plan,
/// slices) is bounded by it and the output byte limit.
pub const MAX_OUTPUT_ITEMS: usize = 10_000;
/// Most JSON/YAML values (every object, list and scalar, anywhere in the output, `results`
/// included) one synthesis may emit: counted before anything is built, so the host memory of
/// parsing an output is bounded (about 100 bytes per value) whatever its shape.
pub const MAX_OUTPUT_VALUES: usize = 1_000_000;
/// Largest stdin (bound inputs, collections, observed outputs) passed to a module.
pub const MAX_INPUT_BYTES: usize = 64 << 20;

impl SynthesisError {
    /// Condition/Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            SynthesisError::Host(HostError::Timeout { .. }) => reasons::TIMEOUT,
            SynthesisError::Host(HostError::MemoryLimit { .. }) => reasons::MEMORY_LIMIT,
            SynthesisError::Host(HostError::OutputTooLarge { .. }) => reasons::OUTPUT_TOO_LARGE,
            SynthesisError::Host(HostError::Trap { .. }) => reasons::TRAP,
            SynthesisError::Host(HostError::ExitCode { .. }) => reasons::EXIT_CODE,
            SynthesisError::Host(
                HostError::Instantiate { .. }
                | HostError::Engine { .. }
                | HostError::CompileTimeout { .. }
                | HostError::CompileMemory { .. }
                | HostError::NotLoaded { .. }
                | HostError::File { .. },
            ) => reasons::INSTANTIATE,
            SynthesisError::MalformedOutput { .. } | SynthesisError::InvalidOutput { .. } => {
                reasons::MALFORMED_OUTPUT
            }
            SynthesisError::ErrorResult { .. } => reasons::ERROR_RESULT,
            SynthesisError::TooManyItems { .. } | SynthesisError::TooManyValues => {
                reasons::OUTPUT_TOO_LARGE
            }
            SynthesisError::InputTooLarge { .. } => reasons::INPUT_TOO_LARGE,
        }
    }
}
