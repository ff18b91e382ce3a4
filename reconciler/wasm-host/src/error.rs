//! The one error type of the wasm host. Each variant names the failure a user can act on.

use std::time::Duration;

/// Why a run (or loading a module) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// The engine could not be set up.
    #[error("wasm engine: {message}")]
    Engine {
        /// What wasmtime said.
        message: String,
    },
    /// The module could not be compiled or instantiated (bad bytes, missing imports).
    #[error("module cannot be instantiated: {message}")]
    Instantiate {
        /// What wasmtime said.
        message: String,
    },
    /// Compiling the module took longer than allowed; the compile process was killed.
    #[error("compiling the module did not finish within {after:?}; the compilation was stopped")]
    CompileTimeout {
        /// The limit.
        after: Duration,
    },
    /// Compiling the module needed more memory than its compile process may map (its share
    /// of the compile memory budget).
    #[error(
        "compiling the module needed more than the {limit} bytes of the compile memory budget \
         it was given; the compile process was stopped"
    )]
    CompileMemory {
        /// The share of the budget the compile process had.
        limit: usize,
    },
    /// A module file given to [`crate::Host::load_file`] could not be used (not a regular
    /// file, unreadable, not copied, changed while read).
    #[error("module file: {message}")]
    File {
        /// What went wrong, naming the file.
        message: String,
    },
    /// [`crate::Host::load_known`] could not answer without the module's bytes.
    #[error("module {digest} is not loaded here: its bytes are needed")]
    NotLoaded {
        /// The module's digest.
        digest: String,
    },
    /// The run exceeded its deadline.
    #[error("synthesis exceeded its deadline of {after:?}")]
    Timeout {
        /// The deadline.
        after: Duration,
    },
    /// The module tried to grow memory past its cap.
    #[error("synthesis exceeded its memory limit of {limit} bytes")]
    MemoryLimit {
        /// The cap.
        limit: usize,
    },
    /// The module wrote more than its stdout cap.
    #[error("synthesis output exceeded its limit of {limit} bytes")]
    OutputTooLarge {
        /// The cap.
        limit: usize,
    },
    /// The module trapped.
    #[error("synthesis trapped: {message}\n{backtrace}")]
    Trap {
        /// The trap.
        message: String,
        /// The wasm backtrace.
        backtrace: String,
        /// The tail of stderr.
        stderr: String,
    },
    /// The module exited with a non-zero code.
    #[error("synthesis exited with code {code}: {stderr}")]
    ExitCode {
        /// The exit code.
        code: i32,
        /// The tail of stderr.
        stderr: String,
    },
}

impl HostError {
    /// A fixed PascalCase name: condition reason, Event reason and metric label.
    pub fn category(&self) -> &'static str {
        match self {
            HostError::Engine { .. } => "Engine",
            HostError::Instantiate { .. } => "Instantiate",
            HostError::CompileTimeout { .. } => "CompileTimeout",
            HostError::CompileMemory { .. } => "CompileMemory",
            HostError::Timeout { .. } => "Timeout",
            HostError::MemoryLimit { .. } => "MemoryLimit",
            HostError::OutputTooLarge { .. } => "OutputTooLarge",
            HostError::Trap { .. } => "Trap",
            HostError::ExitCode { .. } => "ExitCode",
            HostError::NotLoaded { .. } => "NotLoaded",
            HostError::File { .. } => "File",
        }
    }

    /// Module faults are deterministic: retrying the same module on the same input never
    /// helps. A compilation stopped at its timeout may finish on a less busy machine.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            HostError::Engine { .. } | HostError::CompileTimeout { .. }
        )
    }
}
