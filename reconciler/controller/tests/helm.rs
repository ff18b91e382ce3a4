//! Helm charts rendered in enoki's sandbox with Helm's own engine (`synthesizer-sdk/go/helm`,
//! built to wasm by `hack/build-samples.sh`) against `helm template` of the same chart, values,
//! release name and namespace, object by object: three real-world charts nobody here wrote
//! (from the Go module proxy), each with its defaults and a non-trivial values file, and the
//! sample chart (crds/, `tpl`, partials, a test hook, NOTES.txt, `values.schema.json`), and a chart
//! of edge cases (subchart, library chart, `required`, `fail`, `lookup`, `.Capabilities`).
#![allow(clippy::unwrap_used)] // test code

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use serde_json::{Value, json};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn built(rel: &str) -> PathBuf {
    let p = root().join(rel);
    assert!(
        p.exists(),
        "{} is missing: run hack/build-samples.sh (make test does)",
        p.display()
    );
    p
}

fn helm(args: &[&str]) -> String {
    helm_result(args).unwrap_or_else(|e| panic!("helm {args:?}: {e}"))
}

/// `helm ARGS`: stdout, or stderr when it fails.
fn helm_result(args: &[&str]) -> Result<String, String> {
    let bin = std::env::var("HELM")
        .expect("HELM: the helm binary (hack/tools.sh builds it; make test sets it)");
    let out = Command::new(bin).args(args).output().unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8(out.stdout).unwrap())
}

fn scratch(name: &str) -> PathBuf {
    let d = root().join("target/tmp/helm-goldens").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `helm package` of a chart directory.
fn package(chart: &Path, into: &Path) -> PathBuf {
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
fn resource_list(tgz: &Path, values: Option<&str>, release: &str, ns: &str, at: &Path) -> PathBuf {
    resource_list_with_env(tgz, values, release, ns, at, &json!({}))
}

/// [`resource_list`] with the synthesis environment `env`.
fn resource_list_with_env(
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
fn render(module: &Path, list: &Path) -> Result<Vec<Value>, String> {
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
fn template_with(
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
        "--no-hooks",
    ];
    if let Some(v) = values {
        args.extend(["-f", v.to_str().unwrap()]);
    }
    args.extend(extra);
    let text = helm_result(&args)?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    Ok(docs.into_iter().filter(|d| d.is_object()).collect())
}

/// The Helm module, compiled once for every test of this file (one host, in this process).
fn helm_module() -> &'static (wasm_host::Host, controller::synthesis::Module) {
    static MODULE: std::sync::OnceLock<(wasm_host::Host, controller::synthesis::Module)> =
        std::sync::OnceLock::new();
    MODULE.get_or_init(|| {
        let host = wasm_host::Host::new(None).unwrap();
        let bytes = std::fs::read(built("target/samples/helm-chart.wasm")).unwrap();
        let module = controller::synthesis::Module::Wasm(host.load(&bytes).unwrap());
        (host, module)
    })
}

/// What the controller's synthesis of the Helm module makes of the ResourceList at `list`
/// (in this process: the module compiles once for all the goldens): the objects, or the
/// error text.
fn synthesize(list: &Path) -> Result<Vec<Value>, String> {
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
    .map(|s| s.items)
    .map_err(|e| e.to_string())
}

/// One object as both sides are compared: the release namespace enoki defaults is dropped,
/// and so are the annotations the shim adds (the readiness group of the chart's crds/ CRDs,
/// `prune: disabled` on every CRD and on what says `helm.sh/resource-policy: keep`).
fn normalized(mut o: Value, ns: &str) -> (String, Value) {
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
fn same_as_helm_template(name: &str, chart: &Path, values: Option<&str>) {
    same_as_helm_template_with(name, chart, values, &[]);
}

/// [`same_as_helm_template`] with `--api-versions` (HELM_API_VERSIONS for the module).
fn same_as_helm_template_with(name: &str, chart: &Path, values: Option<&str>, apis: &[&str]) {
    let dir = scratch(name);
    let tgz = package(chart, &dir);
    let (release, ns) = ("rel", "apps");
    let values_file = values.map(|v| {
        let p = dir.join("values.yaml");
        std::fs::write(&p, v).unwrap();
        p
    });
    let env = if apis.is_empty() {
        json!({})
    } else {
        json!({"HELM_API_VERSIONS": apis.join(",")})
    };
    let list = resource_list_with_env(&tgz, values, release, ns, &dir, &env);
    let mut ours: Vec<(String, Value)> = synthesize(&list)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .into_iter()
        .map(|o| normalized(o, ns))
        .collect();
    let extra: Vec<&str> = apis.iter().flat_map(|a| ["--api-versions", *a]).collect();
    let mut theirs: Vec<(String, Value)> =
        template_with(&tgz, values_file.as_deref(), release, ns, &extra)
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

fn chart(dir: &str) -> PathBuf {
    built(&format!("target/charts/{dir}"))
}

#[test]
fn ingress_nginx_renders_as_helm_template_renders_it() {
    same_as_helm_template("ingress-nginx-defaults", &chart("ingress-nginx"), None);
    let values = "controller:\n  replicaCount: 3\n  kind: DaemonSet\n  metrics:\n    enabled: true\n  \
                  admissionWebhooks:\n    enabled: false\n  config:\n    use-forwarded-headers: \"true\"\n\
                  defaultBackend:\n  enabled: true\ntcp:\n  \"9000\": \"default/tcp-svc:9000\"\n";
    same_as_helm_template(
        "ingress-nginx-values",
        &chart("ingress-nginx"),
        Some(values),
    );
}

#[test]
fn metrics_server_renders_as_helm_template_renders_it() {
    same_as_helm_template("metrics-server-defaults", &chart("metrics-server"), None);
    let values = "replicas: 2\npodDisruptionBudget:\n  enabled: true\n  minAvailable: 1\n\
                  args:\n  - --kubelet-insecure-tls\nserviceMonitor:\n  enabled: false\n\
                  apiService:\n  insecureSkipTLSVerify: false\n";
    same_as_helm_template(
        "metrics-server-values",
        &chart("metrics-server"),
        Some(values),
    );
}

#[test]
fn descheduler_renders_as_helm_template_renders_it() {
    same_as_helm_template("descheduler-defaults", &chart("descheduler"), None);
    let values = "kind: Deployment\nreplicas: 2\nleaderElection:\n  enabled: true\n\
                  deschedulerPolicy:\n  profiles:\n    - name: default\n      pluginConfig:\n\
                  \x20       - name: RemoveDuplicates\n      plugins:\n        balance:\n\
                  \x20         enabled:\n            - RemoveDuplicates\n";
    same_as_helm_template("descheduler-values", &chart("descheduler"), Some(values));
}

/// The sample chart: crds/ first in a readiness group of their own, partials and `tpl`,
/// the test hook and NOTES.txt left out, `.Capabilities`; and a value its
/// `values.schema.json` refuses is a synthesis error naming the value.
#[test]
fn the_sample_chart_renders_as_helm_template_and_its_schema_is_enforced() {
    let sample = root().join("samples/12-helm/chart");
    same_as_helm_template("sample", &sample, Some("greeting: hi\nport: 9090\n"));
    let dir = scratch("sample-schema");
    let tgz = package(&sample, &dir);
    let list = resource_list(&tgz, Some("port: not-a-number\n"), "rel", "apps", &dir);
    let err = synthesize(&list).unwrap_err();
    assert!(err.contains("port"), "{err}");
    // The embedded-chart sample itself, through `enoki render`.
    let objs = render(
        &built("target/samples/helm.wasm"),
        &root().join("samples/12-helm/input.json"),
    )
    .unwrap();
    let kinds: Vec<&str> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "CustomResourceDefinition",
            "ConfigMap",
            "Service",
            "Greeting"
        ]
    );
}

fn edge() -> PathBuf {
    root().join("reconciler/controller/tests/fixtures/helm-edge")
}

/// Helm's features on a chart of this repo's (`tests/fixtures/helm-edge`): a subchart turned
/// off by its `condition`, values flowing into it (and `global`), a library chart's `define`,
/// `tpl`, `required`, `lookup` (empty in both: there is no cluster), `crds/` and a CRD in
/// `templates/`, and `.Capabilities.APIVersions.Has` with and without the API.
#[test]
fn subcharts_library_charts_tpl_lookup_and_capabilities_render_as_helm_template() {
    same_as_helm_template("edge-defaults", &edge(), None);
    same_as_helm_template(
        "edge-values",
        &edge(),
        Some(
            "templated: \"{{ .Chart.Name }}-{{ .Values.name }}\"\nextraCRD: true\n\
             global:\n  env: prod\nsub:\n  greeting: overridden\n",
        ),
    );
    same_as_helm_template(
        "edge-no-subchart",
        &edge(),
        Some("sub:\n  enabled: false\n"),
    );
    same_as_helm_template_with(
        "edge-capabilities",
        &edge(),
        None,
        &["monitoring.coreos.com/v1"],
    );
}

/// `required` and `fail` stop the render with the chart's own message, in enoki and in Helm.
#[test]
fn required_and_fail_are_synthesis_errors_with_the_charts_message() {
    for (name, values, message) in [
        (
            "edge-required",
            "name: null\n",
            "a name is required: set .Values.name",
        ),
        (
            "edge-fail",
            "boom: true\n",
            "boom was set: the chart refuses to render",
        ),
    ] {
        let dir = scratch(name);
        let tgz = package(&edge(), &dir);
        let file = dir.join("values.yaml");
        std::fs::write(&file, values).unwrap();
        let theirs = template_with(&tgz, Some(&file), "rel", "apps", &[]).unwrap_err();
        assert!(theirs.contains(message), "helm: {theirs}");
        let list = resource_list(&tgz, Some(values), "rel", "apps", &dir);
        let ours = synthesize(&list).unwrap_err();
        assert!(ours.contains(message), "{name}: {ours}");
    }
}

/// The built-in's path: the chart and `spec.helm.values` given by the controller
/// (`synthesis::Chart`, inputs `chart` and `helm-values`), then the Composition's `values` (a
/// Secret here), then `values-*` in key order — merged as `helm -f` merges files; an observed
/// output that happens to carry a values key is never read as values.
#[test]
fn the_builtins_values_merge_in_helms_order() {
    use controller::synthesis;
    let dir = scratch("edge-builtin");
    let tgz = std::fs::read(package(&edge(), &dir)).unwrap();
    let (host, module) = helm_module();
    let synthesis::Module::Wasm(pre) = module else {
        panic!("a wasm module")
    };
    let spec_values = json!({"name": "from-synth", "global": {"env": "synth"},
        "sub": {"greeting": "synth"}});
    let chart = synthesis::Chart::new(pre.clone(), "edge", &tgz, Some(&spec_values));
    let chart_module = synthesis::Module::Chart(std::sync::Arc::new(chart));
    assert!(chart_module.digest().contains("+chart:sha256:"));
    let cm = |name: &str, values: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"values.yaml": values}})
    };
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "v"},
        "data": {"values.yaml": base64::engine::general_purpose::STANDARD
            .encode("global:\n  env: secret\n")}});
    let mut observed = cm("live", "name: observed\n");
    observed["metadata"]["annotations"] = json!({"enoki.dev/input-key": "values-z"});
    let input = synthesis::SynthesisInput {
        composition: synthesis::CompositionMeta {
            name: "rel".into(),
            namespace: "apps".into(),
            ..Default::default()
        },
        inputs: vec![
            ("values-b".into(), cm("b", "sub:\n  greeting: b\n")),
            ("values".into(), secret),
            ("values-a".into(), cm("a", "sub:\n  greeting: a\n")),
        ],
        observed: vec![observed],
        program: "helm".into(),
        ..Default::default()
    };
    let limits = synthesis::run_limits(None).unwrap();
    let out = synthesis::synthesize(
        host,
        &chart_module,
        &input,
        limits,
        false,
        &synthesis::static_is_namespaced,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let find = |name: &str| {
        out.items
            .iter()
            .find(|o| o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {:?}", out.items))
            .clone()
    };
    // `name` from the Synthesizer (the observed output is not values), `global.env` from the
    // Secret, the subchart's greeting from values-b (after values-a).
    assert_eq!(find("rel-from-synth")["data"]["env"], "secret");
    assert_eq!(find("rel-sub")["data"]["greeting"], "b");
    assert_eq!(find("rel-sub")["data"]["env"], "secret");
    // Every CRD is kept whatever the values: `prune: disabled`.
    let crd = find("widgets.edge.enoki.dev");
    assert_eq!(
        crd["metadata"]["annotations"]["enoki.dev/prune"],
        "disabled"
    );
}
