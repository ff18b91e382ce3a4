//! Helm charts rendered in enoki's sandbox with Helm's own engine (`synthesizer-sdk/go/helm`,
//! built to wasm by `hack/build-samples.sh`) against `helm template` of the same chart, values,
//! release name and namespace, object by object: three real-world charts nobody here wrote
//! (from the Go module proxy), each with its defaults and a non-trivial values file, and the
//! sample chart (crds/, `tpl`, partials, a test hook, NOTES.txt, `values.schema.json`), and a chart
//! of edge cases (subchart, library chart, `required`, `fail`, `lookup`, `.Capabilities`).
#![allow(clippy::unwrap_used)] // test code

use std::path::PathBuf;

use base64::Engine as _;
use serde_json::json;

mod helm_support;
use helm_support::*;

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

/// Helm's default capabilities, with no cluster's given: the module is built without the
/// Kubernetes API types (`synthesizer-sdk/go/helm/cmd/lean`), and its `.Capabilities` are still
/// `helm template`'s: every default API version in Helm's order (`toJson`), the same
/// Kubernetes version, the same `Has` answers.
#[test]
fn helms_default_capabilities_are_helm_templates() {
    let chart = root().join("reconciler/controller/tests/fixtures/helm-capabilities");
    same_as_helm_template("capabilities-defaults", &chart, None);
    same_as_helm_template_with(
        "capabilities-widgets",
        &chart,
        None,
        &["caps.enoki.dev/v1/Widget"],
    );
}

/// A render that allocates far more than it keeps collects near the module's soft 64 MiB
/// (it never collects below it): 400 MiB of garbage in a run limited to 512 MiB renders, and
/// the run's linear memory stays under 160 MiB (64 MiB of Go's heap, the static data, Go's
/// slack); with `GOGC=off GOMEMLIMIT=off` in its env it keeps all of it.
#[test]
fn a_render_that_churns_memory_collects_at_the_soft_limit() {
    let dir = scratch("churn");
    let chart = dir.join("churn");
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: churn\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        chart.join("templates/churn.yaml"),
        "{{- $s := \"\" }}{{- range $i := until 100000 }}{{ $s = repeat 4096 \"x\" }}{{ end }}\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: churn\ndata:\n  \
         length: {{ len $s | quote }}\n",
    )
    .unwrap();
    let tgz = package(&chart, &dir);
    let list = resource_list(&tgz, None, "rel", "apps", &dir);
    let out = synthesized(&list).unwrap();
    assert_eq!(out.items[0]["data"]["length"], "4096");
    let peak = out.peak_memory_bytes >> 20;
    assert!(
        peak < 160,
        "the render's linear memory peaked at {peak} MiB"
    );
    // GOGC=off and GOMEMLIMIT=off in the Synthesizer's env: nothing is collected.
    let env = json!({"GOGC": "off", "GOMEMLIMIT": "off"});
    let list = resource_list_with_env(&tgz, None, "rel", "apps", &dir, &env);
    let uncollected = synthesized(&list).unwrap().peak_memory_bytes >> 20;
    assert!(
        uncollected > 300,
        "without collections: {uncollected} MiB (with: {peak} MiB)"
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
        let theirs = template_with(&tgz, Some(&file), "rel", "apps", &["--no-hooks"]).unwrap_err();
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

/// Eno's pkg/helmshim (`Synth`: `ReleaseName = "eno-helm-shim"`, `Namespace = "default"`,
/// `IncludeCRDs`, the release's hooks appended after its manifest): `spec.helm.shim: eno`
/// renders what `helm template eno-helm-shim -n default --include-crds` prints, hooks
/// included (the sample chart's test hook, ingress-nginx's admission-webhook jobs), whatever
/// the Composition is called.
#[test]
fn enos_shim_mode_renders_enos_release_with_its_hooks() {
    let sample = root().join("samples/12-helm/chart");
    same_as_enos_shim("eno-sample", &sample, Some("greeting: hi\n"));
    same_as_enos_shim("eno-ingress-nginx", &chart("ingress-nginx"), None);
}

/// The pre-initialized module reads each synthesis' own environment and randomness: Sprig's
/// `randInt` (`math/rand`'s global source) and `randAlphaNum` (`crypto/rand`) repeat for the
/// same input and differ for another, and `.Capabilities.KubeVersion` follows
/// HELM_KUBE_VERSION of the synthesis, not of the build.
#[test]
fn each_render_reads_its_own_environment_and_randomness() {
    let dir = scratch("per-run");
    let chart = dir.join("chart");
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: per-run\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        chart.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: per-run\ndata:\n  tag: {{ .Values.tag | quote }}\n  \
         int: {{ randInt 0 1000000000 | quote }}\n  alnum: {{ randAlphaNum 24 | quote }}\n  \
         kube: {{ .Capabilities.KubeVersion.Version | quote }}\n",
    )
    .unwrap();
    let packaged = dir.join("packaged");
    std::fs::create_dir_all(&packaged).unwrap();
    let tgz = package(&chart, &packaged);
    let data = |tag: &str, kube: &str| {
        let at = dir.join(format!("{tag}-{kube}"));
        std::fs::create_dir_all(&at).unwrap();
        let env = json!({"HELM_KUBE_VERSION": kube});
        let list = resource_list_with_env(
            &tgz,
            Some(&format!("tag: {tag}\n")),
            "rel",
            "apps",
            &at,
            &env,
        );
        let objects = synthesize(&list).unwrap();
        objects[0]["data"].clone()
    };
    let a = data("a", "v1.31.0");
    assert_eq!(a, data("a", "v1.31.0"), "the same input renders the same");
    let b = data("b", "v1.33.2");
    assert_eq!(
        (a["kube"].as_str(), b["kube"].as_str()),
        (Some("v1.31.0"), Some("v1.33.2"))
    );
    assert_ne!(a["int"], b["int"], "randInt: {a} {b}");
    assert_ne!(a["alnum"], b["alnum"], "randAlphaNum: {a} {b}");
}
