//! Synthesizers and Compositions as tests write them: the sample and echo modules, ConfigMap
//! outputs, Compositions and their conditions.

use super::*;

/// The wasm build of sample 01 (`make test` builds it first).
///
/// # Panics
/// When it has not been built.
pub fn sample_module() -> Vec<u8> {
    let p = workspace_root().join("target/wasm32-wasip1/release/hello-rust.wasm");
    std::fs::read(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; build the samples first (hack/build-samples.sh; `make test` does)",
            p.display()
        )
    })
}

/// Stores a module in a ConfigMap (`binaryData.module.wasm`) and creates a Synthesizer named
/// after the namespace that uses it with one ref, `config` (a ConfigMap). Returns its name.
///
/// # Panics
/// When the API server refuses.
pub async fn install_synthesizer(env: &TestEnv, suffix: &str, module: &[u8]) -> String {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::ConfigMap;
    let cm_name = format!("module-{suffix}");
    let cms: Api<ConfigMap> = env.api();
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(cm_name.clone()),
            ..ObjectMeta::default()
        },
        binary_data: Some([("module.wasm".to_string(), ByteString(module.to_vec()))].into()),
        ..ConfigMap::default()
    };
    cms.patch(
        &cm_name,
        &PatchParams::apply(HARNESS_MANAGER).force(),
        &Patch::Apply(&cm),
    )
    .await
    .expect("module ConfigMap");
    let name = format!("{}-{suffix}", env.namespace);
    let synth = serde_json::json!({
        "apiVersion": "enoki.dev/v1alpha1", "kind": "Synthesizer",
        "metadata": {"name": name},
        "spec": {
            "module": {"configMap": {"namespace": env.namespace, "name": cm_name, "key": "module.wasm"}},
            "refs": [{"key": "config", "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}}],
        },
    });
    let synths: Api<crds::Synthesizer> = Api::all(env.client.clone());
    synths
        .patch(
            &name,
            &PatchParams::apply(HARNESS_MANAGER).force(),
            &Patch::Apply(&synth),
        )
        .await
        .expect("Synthesizer");
    name
}

/// The `echo` test synthesizer (`tests/guests/echo`): it emits the JSON list stored in the
/// bound ConfigMap's `data.items`.
///
/// # Panics
/// When it has not been built (`hack/build-samples.sh`; `make test` does).
pub fn echo_module() -> Vec<u8> {
    let p = workspace_root().join("target/wasm32-wasip1/release/echo.wasm");
    std::fs::read(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run hack/build-samples.sh (make test does)",
            p.display()
        )
    })
}

/// A ConfigMap manifest for an `echo` items list.
#[allow(clippy::needless_pass_by_value)] // called with `json!` temporaries
pub fn config_map(
    name: &str,
    annotations: serde_json::Value,
    data: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "annotations": annotations}, "data": data})
}

/// Writes `items` into ConfigMap `name` (`data.items`), the input of an `echo` Composition.
///
/// # Panics
/// When the API server refuses.
pub async fn set_echo_items(env: &TestEnv, name: &str, items: &serde_json::Value) {
    use k8s_openapi::api::core::v1::ConfigMap;
    let cms: Api<ConfigMap> = env.api();
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
        "data": {"items": items.to_string()}});
    cms.patch(
        name,
        &PatchParams::apply(HARNESS_MANAGER).force(),
        &Patch::Apply(&cm),
    )
    .await
    .expect("items ConfigMap");
}

/// Applies a Composition `name` of `synthesizer` with its `config` ref bound to ConfigMap
/// `config`; `extra_spec` is merged into its spec (e.g. `dependsOn`).
///
/// # Panics
/// When the API server refuses.
pub async fn apply_composition(
    env: &TestEnv,
    name: &str,
    synthesizer: &str,
    config: &str,
    extra_spec: serde_json::Value,
) {
    let mut spec = serde_json::json!({"synthesizer": {"name": synthesizer},
        "bindings": [{"key": "config", "resource": {"name": config}}]});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    let comp = serde_json::json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
        "metadata": {"name": name}, "spec": spec});
    let comps: Api<crds::Composition> = env.api();
    comps
        .patch(
            name,
            &PatchParams::apply(HARNESS_MANAGER).force(),
            &Patch::Apply(&comp),
        )
        .await
        .expect("Composition");
}

/// (status, reason, message) of condition `type_` of Composition `name`; `None` while it
/// has none (or the Composition does not exist).
///
/// # Panics
/// When the API server refuses.
pub async fn composition_condition(
    env: &TestEnv,
    name: &str,
    type_: &str,
) -> Option<(String, String, String)> {
    let comps: Api<crds::Composition> = env.api();
    comps
        .get_opt(name)
        .await
        .expect("reading a Composition")?
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason, c.message))
}

/// Whether ConfigMap `name` exists in the test namespace (the echo synthesizer's outputs).
///
/// # Panics
/// When the API server refuses.
pub async fn config_map_exists(env: &TestEnv, name: &str) -> bool {
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = env.api();
    cms.get_opt(name)
        .await
        .expect("reading a ConfigMap")
        .is_some()
}

/// Whether Composition `name` has condition `Ready=True`.
///
/// # Panics
/// When the API server refuses.
pub async fn composition_ready(env: &TestEnv, name: &str) -> bool {
    let comps: Api<crds::Composition> = env.api();
    comps
        .get_opt(name)
        .await
        .expect("reading a Composition")
        .and_then(|c| c.status)
        .is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}
