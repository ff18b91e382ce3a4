//! Built-in synthesizers, written against the synthesizer SDK only (no kube client, no
//! tokio), linked natively into the `enoki` binary and also built to `wasm32-wasip1`
//! (`src/bin/`), where they produce byte-identical output on the golden fixtures.
//!
//! - [`trustee`]: TrusteeConfig → KbsConfig and the ConfigMaps/Secrets it references.
//! - [`quota`]: ClusterResourceQuota usage aggregation (status only).
//! - [`lepton`]: LeptonDeployment → Deployment, Service, Ingresses, PVCs, PVs.
//!
//! Each runs in instance mode (`spec.for` its kind) and writes the instance's status back;
//! [`synthesizer_spec`] is the Synthesizer enoki installs at startup.

pub mod gotemplate;
pub mod lepton;
pub use enoki_sdk::quantity;
pub mod quota;
pub mod scope;
pub mod selector;
pub mod trustee;

/// A built-in synthesizer: the same signature `enoki_sdk::run` takes.
pub type Builtin = fn(&enoki_sdk::Input) -> Result<enoki_sdk::Output, enoki_sdk::Error>;

/// Names of every built-in synthesizer.
pub const NAMES: &[&str] = &["trustee", "quota", "lepton"];

/// Looks a built-in up by name.
pub fn lookup(name: &str) -> Option<Builtin> {
    match name {
        "trustee" => Some(trustee::synthesize),
        "quota" => Some(quota::synthesize),
        "lepton" => Some(lepton::synthesize),
        _ => None,
    }
}

/// The finalizer a built-in's instances get (the Synthesizer annotation
/// `enoki.dev/instance-finalizer`): upstream's own where upstream has one (Lepton's
/// `lepton.ai/deletion`), `none` where upstream relies on owner references (Trustee, quota).
pub fn instance_finalizer(name: &str) -> Option<&'static str> {
    match name {
        "trustee" | "quota" => Some("none"),
        "lepton" => Some(lepton::FINALIZER),
        _ => None,
    }
}

/// The Synthesizer `spec` enoki installs for a built-in (module, `for`, refs, flags).
pub fn synthesizer_spec(name: &str) -> Option<serde_json::Value> {
    match name {
        "trustee" => Some(trustee::synthesizer_spec()),
        "quota" => Some(quota::synthesizer_spec()),
        "lepton" => Some(lepton::synthesizer_spec()),
        _ => None,
    }
}
