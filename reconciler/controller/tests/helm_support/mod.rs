//! What the Helm goldens share: the chart packaged, rendered by `helm template` and by the
//! Helm module in enoki's sandbox, and both compared object by object.
#![allow(clippy::unwrap_used, dead_code)] // test code

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use serde_json::{Value, json};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn built(rel: &str) -> PathBuf {
    let p = root().join(rel);
    assert!(
        p.exists(),
        "{} is missing: run hack/build-samples.sh (make test does)",
        p.display()
    );
    p
}

pub fn helm(args: &[&str]) -> String {
    helm_result(args).unwrap_or_else(|e| panic!("helm {args:?}: {e}"))
}

/// `helm ARGS`: stdout, or stderr when it fails.
pub fn helm_result(args: &[&str]) -> Result<String, String> {
    let bin = std::env::var("HELM")
        .expect("HELM: the helm binary (hack/tools.sh builds it; make test sets it)");
    let out = Command::new(bin).args(args).output().unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8(out.stdout).unwrap())
}

pub fn scratch(name: &str) -> PathBuf {
    let d = root().join("target/tmp/helm-goldens").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `helm package` of a chart directory.
pub fn package(chart: &Path, into: &Path) -> PathBuf {
    helm(&[
        "package",
        chart.to_str().unwrap(),
        "-d",
        into.to_str().unwrap(),
    ]);
    std::fs::read_dir(into)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "tgz"))
        .unwrap()
}

/// The ResourceList of the `helm-chart` synthesizer: the packaged chart and the values.
pub fn resource_list(
    tgz: &Path,
    values: Option<&str>,
    release: &str,
    ns: &str,
    at: &Path,
) -> PathBuf {
    resource_list_with_env(tgz, values, release, ns, at, &json!({}))
}

/// [`resource_list`] with the synthesis environment `env`.
pub fn resource_list_with_env(
    tgz: &Path,
    values: Option<&str>,
    release: &str,
    ns: &str,
    at: &Path,
    env: &Value,
) -> PathBuf {
    let chart = base64::engine::general_purpose::STANDARD.encode(std::fs::read(tgz).unwrap());
    let mut items = vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "chart", "namespace": ns, "annotations": {"enoki.dev/input-key": "chart"}},
        "binaryData": {"chart.tgz": chart}})];
    if let Some(v) = values {
        items.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "values", "namespace": ns, "annotations": {"enoki.dev/input-key": "values"}},
            "data": {"values.yaml": v}}));
    }
    let list = json!({"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList", "items": items,
        "functionConfig": {"composition": {"name": release, "namespace": ns}, "env": env}});
    let p = at.join("input.json");
    std::fs::write(&p, list.to_string()).unwrap();
    p
}

/// Runs `enoki render MODULE --resource-list LIST -o json`: the objects, or the error text.
pub fn render(module: &Path, list: &Path) -> Result<Vec<Value>, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_enoki"))
        .args(["render", module.to_str().unwrap(), "--resource-list"])
        .arg(list)
        .args(["-o", "json"])
        .current_dir(root())
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    Ok(v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["resources"].as_array().unwrap().clone())
        .collect())
}

/// The objects `helm template` prints (hooks left out, CRDs in) with `extra` arguments, or
/// its error.
pub fn template_with(
    tgz: &Path,
    values: Option<&Path>,
    release: &str,
    ns: &str,
    extra: &[&str],
) -> Result<Vec<Value>, String> {
    let mut args = vec![
        "template",
        release,
        tgz.to_str().unwrap(),
        "-n",
        ns,
        "--include-crds",
    ];
    if let Some(v) = values {
        args.extend(["-f", v.to_str().unwrap()]);
    }
    args.extend(extra);
    let text = helm_result(&args)?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    Ok(docs.into_iter().filter(|d| d.is_object()).collect())
}

/// The Helm module, compiled once for every test of this file (one host, in this process):
/// pre-initialized as the image ships it (`enoki module preinit`, which `make test` runs).
pub fn helm_module() -> &'static (wasm_host::Host, controller::synthesis::Module) {
    static MODULE: std::sync::OnceLock<(wasm_host::Host, controller::synthesis::Module)> =
        std::sync::OnceLock::new();
    MODULE.get_or_init(|| {
        let host = wasm_host::Host::new(None).unwrap();
        let bytes = std::fs::read(built("target/samples/helm-chart.wasm")).unwrap();
        let names = exports(&bytes);
        assert!(
            names.iter().any(|n| n == "_start") && !names.iter().any(|n| n == "_initialize"),
            "target/samples/helm-chart.wasm is not pre-initialized (exports {names:?}): run \
             `enoki module preinit target/samples/helm-chart.reactor.wasm -o \
             target/samples/helm-chart.wasm` (make test does)"
        );
        let module = controller::synthesis::Module::Wasm(host.load(&bytes).unwrap());
        (host, module)
    })
}

/// What the controller's synthesis of the Helm module makes of the ResourceList at `list`
/// (in this process: the module compiles once for all the goldens): the objects, or the
/// error text.
pub fn synthesize(list: &Path) -> Result<Vec<Value>, String> {
    synthesized(list).map(|s| s.items)
}

/// [`synthesize`], the whole outcome (the run's peak memory too).
pub fn synthesized(list: &Path) -> Result<controller::synthesis::Synthesized, String> {
    use controller::synthesis;
    let list: Value = serde_json::from_slice(&std::fs::read(list).unwrap()).unwrap();
    let fc = &list["functionConfig"];
    let strings = |v: &Value| -> std::collections::BTreeMap<String, String> {
        v.as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
            .collect()
    };
    let input = synthesis::SynthesisInput {
        composition: synthesis::CompositionMeta {
            name: fc["composition"]["name"].as_str().unwrap().into(),
            namespace: fc["composition"]["namespace"].as_str().unwrap().into(),
            ..Default::default()
        },
        inputs: list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                let key = o["metadata"]["annotations"]["enoki.dev/input-key"].as_str();
                (key.unwrap().to_string(), o.clone())
            })
            .collect(),
        env: strings(&fc["env"]),
        program: "helm-chart".into(),
        ..Default::default()
    };
    let limits = synthesis::run_limits(Some(&crds::Limits {
        timeout: Some("60s".into()),
        memory: Some("512Mi".into()),
        output: Some("16Mi".into()),
    }))
    .unwrap();
    let (host, module) = helm_module();
    synthesis::synthesize(
        host,
        module,
        &input,
        limits,
        false,
        &synthesis::static_is_namespaced,
    )
    .map_err(|e| e.to_string())
}

/// One object as both sides are compared: the release namespace enoki defaults is dropped,
/// and so are the annotations the shim adds (the readiness group of the chart's crds/ CRDs,
/// `prune: disabled` on every CRD and on what says `helm.sh/resource-policy: keep`).
pub fn normalized(mut o: Value, ns: &str) -> (String, Value) {
    let meta = o["metadata"].as_object_mut().unwrap();
    if meta.get("namespace").and_then(Value::as_str) == Some(ns) {
        meta.remove("namespace");
    }
    if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
        if a.get("enoki.dev/readiness-group").and_then(Value::as_str) == Some("-1000") {
            a.remove("enoki.dev/readiness-group");
        }
        if a.get("enoki.dev/prune").and_then(Value::as_str) == Some("disabled") {
            a.remove("enoki.dev/prune");
        }
        if a.is_empty() {
            meta.remove("annotations");
        }
    }
    let key = format!(
        "{}/{}/{}",
        o["apiVersion"], o["kind"], o["metadata"]["name"]
    );
    (key, o)
}

/// Renders `chart` both ways (defaults, then `values` when given) and compares.
pub fn same_as_helm_template(name: &str, chart: &Path, values: Option<&str>) {
    same_as_helm_template_with(name, chart, values, &[]);
}

/// [`same_as_helm_template`] with `--api-versions` (HELM_API_VERSIONS for the module).
pub fn same_as_helm_template_with(name: &str, chart: &Path, values: Option<&str>, apis: &[&str]) {
    let env = if apis.is_empty() {
        json!({})
    } else {
        json!({"HELM_API_VERSIONS": apis.join(",")})
    };
    let mut extra: Vec<&str> = apis.iter().flat_map(|a| ["--api-versions", *a]).collect();
    extra.push("--no-hooks");
    compare(name, chart, values, &env, ("rel", "apps"), &extra);
}

/// The module with `HELM_SHIM=eno` (a Synthesizer's `spec.helm.shim: eno`) for a Composition
/// `rel` in `apps` against `helm template eno-helm-shim -n default --include-crds`, hooks
/// included: what Eno's pkg/helmshim renders.
pub fn same_as_enos_shim(name: &str, chart: &Path, values: Option<&str>) {
    let env = json!({"HELM_SHIM": "eno"});
    compare(name, chart, values, &env, ("eno-helm-shim", "default"), &[]);
}

/// Renders `chart` with the module (a Composition `rel` in `apps`, `env`) and with
/// `helm template RELEASE -n NS --include-crds EXTRA`, and compares object by object.
fn compare(
    name: &str,
    chart: &Path,
    values: Option<&str>,
    env: &Value,
    (release, ns): (&str, &str),
    extra: &[&str],
) {
    let dir = scratch(name);
    let tgz = package(chart, &dir);
    let values_file = values.map(|v| {
        let p = dir.join("values.yaml");
        std::fs::write(&p, v).unwrap();
        p
    });
    let list = resource_list_with_env(&tgz, values, "rel", "apps", &dir, env);
    // An object the chart leaves without a namespace lands in the Composition's (`apps`).
    let mut ours: Vec<(String, Value)> = synthesize(&list)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .into_iter()
        .map(|o| normalized(normalized(o, "apps").1, ns))
        .collect();
    let mut theirs: Vec<(String, Value)> =
        template_with(&tgz, values_file.as_deref(), release, ns, extra)
            .unwrap()
            .into_iter()
            .map(|o| normalized(o, ns))
            .collect();
    ours.sort_by(|a, b| a.0.cmp(&b.0));
    theirs.sort_by(|a, b| a.0.cmp(&b.0));
    let keys = |v: &[(String, Value)]| v.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    assert_eq!(keys(&ours), keys(&theirs), "{name}: the same objects");
    assert!(!ours.is_empty(), "{name}: renders something");
    for ((k, a), (_, b)) in ours.iter().zip(&theirs) {
        assert_eq!(a, b, "{name}: {k} differs");
    }
}

pub fn chart(dir: &str) -> PathBuf {
    built(&format!("target/charts/{dir}"))
}

/// The export names of a core module.
pub fn exports(wasm: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        if let wasmparser::Payload::ExportSection(section) = payload.unwrap() {
            names.extend(section.into_iter().map(|e| e.unwrap().name.to_string()));
        }
    }
    names
}
