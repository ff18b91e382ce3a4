//! Built-in synthesizers, written against the synthesizer SDK only so each also builds to
//! `wasm32-wasip1`, linked natively into the `enoki` binary and looked up by name.
//!
//! The registry is empty until the built-ins issue lands Trustee, quota and Lepton; the
//! lookup is what `module.builtin` and `enoki render builtin:<name>` already use.

/// A built-in synthesizer: the same signature `enoki_sdk::run` takes.
pub type Builtin = fn(&enoki_sdk::Input) -> Result<enoki_sdk::Output, enoki_sdk::Error>;

/// Names of every built-in synthesizer.
pub const NAMES: &[&str] = &[];

/// Looks a built-in up by name.
pub fn lookup(name: &str) -> Option<Builtin> {
    let _ = name;
    None
}
