//! What a synthesis's module gets on stdin: the Composition's metadata, the inputs, the
//! observed outputs and the environment (the target cluster's capabilities, the
//! Composition's and Synthesizer's env, then the controller's switches).

use std::time::Duration;

use kube::ResourceExt;
use serde_json::Value;

use super::super::observe::Gathered;
use crate::synthesis::{CompositionMeta, SynthesisInput};
use crds::{Composition, Synthesizer};

/// What the module gets on stdin for `comp`: its metadata, the gathered inputs, the observed
/// outputs, the Synthesizer's env overlaid with the Composition's (and the controller's).
pub(crate) fn input_for(
    opts: &crate::run::SynthesisOptions,
    comp: &Composition,
    synth: &crds::Synthesizer,
    gathered: &Gathered,
    observed: Vec<Value>,
    synthesis_uuid: String,
) -> SynthesisInput {
    SynthesisInput {
        composition: CompositionMeta {
            name: comp.name_any(),
            namespace: comp.namespace().unwrap_or_default(),
            uid: comp.uid().unwrap_or_default(),
            labels: comp.labels().clone(),
            annotations: comp.annotations().clone(),
            generation: comp.metadata.generation.unwrap_or_default(),
            created: comp
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| Duration::from_secs(u64::try_from(t.0.as_second()).unwrap_or(0)))
                .unwrap_or_default(),
        },
        inputs: gathered.inputs.clone(),
        observed,
        // The Synthesizer's env is the platform's policy: a Composition variable of the same
        // name is dropped, so a tenant cannot override it.
        // The cluster's capabilities first: a variable set by either env wins over them.
        env: capabilities_env(gathered)
            .into_iter()
            .chain(
                comp.spec
                    .synthesis_env
                    .iter()
                    .filter(|e| !synth.spec.env.iter().any(|s| s.name == e.name))
                    .chain(synth.spec.env.iter())
                    .map(|e| (e.name.clone(), e.value.clone())),
            )
            .chain(controller_env(opts, synth))
            .collect(),
        program: synth.name_any(),
        optional_refs: synth
            .spec
            .refs
            .iter()
            .filter(|r| r.optional)
            .map(|r| r.key.clone())
            .collect(),
        synthesis_uuid,
    }
}

/// The target cluster's capabilities as a chart's `.Capabilities` variables, each only where
/// the Synthesizer's `env` and the Composition's `synthesisEnv` do not set it (they win).
fn capabilities_env(gathered: &Gathered) -> Vec<(String, String)> {
    gathered
        .capabilities
        .iter()
        .flat_map(|c| c.env())
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

/// Variables the controller sets after the Synthesizer's `env` and the Composition's
/// `synthesisEnv`, so neither can override them: platform switches of the built-ins.
fn controller_env(
    opts: &crate::run::SynthesisOptions,
    synth: &Synthesizer,
) -> Vec<(String, String)> {
    let mut env = Vec::new();
    // The Helm module's switch to Eno's release name, namespace and hooks: always set for a
    // chart, so neither env can turn it (it is the Synthesizer's `spec.helm.shim`).
    if let Some(helm) = &synth.spec.helm {
        let shim = match helm.shim.unwrap_or_default() {
            crds::HelmShim::Eno => "eno",
            crds::HelmShim::Enoki => "enoki",
        };
        env.push(("HELM_SHIM".to_string(), shim.to_string()));
    }
    if synth.spec.module.builtin.as_deref() == Some("lepton") {
        env.push((
            builtins::lepton::PERSISTENT_VOLUMES_ENV.to_string(),
            opts.lepton_persistent_volumes.to_string(),
        ));
    }
    env
}
