//! Charts rendered for the cluster they go to: the built-in `helm` is given the target
//! cluster's Kubernetes version and served API versions, read from discovery as `helm install`
//! reads them. A chart that picks its PodDisruptionBudget's and HPA's apiVersion with
//! `.Capabilities.APIVersions.Has` renders the versions the test API server serves, object for
//! object as `helm template --kube-version … --api-versions …` renders it given the same list
//! (read here from the API server's discovery, one document per group version, not with
//! enoki's code); a CRD installed afterwards renders the chart again (under the rollout
//! cooldown); a `HELM_KUBE_VERSION` the Composition sets wins over the cluster's. And a
//! Synthesizer with `spec.helm.shim: eno` installs the chart as Eno's shim does.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use crds::{Composition, ResourceSlice, Synthesizer};
use harness::{Enoki, TestEnv, eventually, install_crds, workspace_root};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The first synthesis compiles the 80 MB Helm module (minutes in a debug build).
const WAIT: Duration = Duration::from_secs(600);
/// What the chart gets after a change of what the cluster serves: the refresh (2 s), the
/// cooldown (1 s) and a pass.
const RERENDER: Duration = Duration::from_secs(60);

fn helm(args: &[&str]) -> String {
    let bin = std::env::var("HELM").expect("HELM: the helm binary (make test sets it)");
    let out = std::process::Command::new(bin).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "helm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The chart at `dir` (relative to the workspace), packaged.
fn packaged(dir: &str) -> (harness::TempDir, PathBuf) {
    let chart = workspace_root().join(dir);
    let out = harness::tempdir("chart");
    helm(&[
        "package",
        chart.to_str().unwrap(),
        "-d",
        out.to_str().unwrap(),
    ]);
    let tgz = std::fs::read_dir(&out)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    (out, tgz)
}

/// Every served `group/version` and `group/version/Kind`, as Helm's `GetVersionSet` builds
/// them (one discovery document per group version, subresources' kinds included).
async fn served(client: &kube::Client) -> Vec<String> {
    let mut out = BTreeSet::new();
    for v in client.list_core_api_versions().await.unwrap().versions {
        for r in client.list_core_api_resources(&v).await.unwrap().resources {
            out.insert(format!("{v}/{}", r.kind));
        }
        out.insert(v);
    }
    for g in client.list_api_groups().await.unwrap().groups {
        for v in g.versions {
            let list = client
                .list_api_group_resources(&v.group_version)
                .await
                .unwrap();
            for r in list.resources {
                out.insert(format!("{}/{}", v.group_version, r.kind));
            }
            out.insert(v.group_version);
        }
    }
    out.into_iter().collect()
}

/// The manifests of the Composition's current synthesis, keyed by apiVersion/kind/name, as
/// `helm template` prints them (the release namespace and enoki's annotations dropped); none
/// while no synthesis is recorded (a first synthesis is applied in the pass that records it,
/// so its objects can be seen a moment before its status).
async fn rendered(env: &TestEnv, name: &str) -> Vec<(String, Value)> {
    let comp = env.api::<Composition>().get(name).await.unwrap();
    let Some(current) = comp.status.and_then(|s| s.current_synthesis) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for r in &current.resource_slices {
        // Gone when a newer synthesis was recorded since the Composition was read: asked again.
        let Some(slice) = env.api::<ResourceSlice>().get_opt(&r.name).await.unwrap() else {
            return Vec::new();
        };
        for m in &slice.spec.resources {
            out.push(keyed(
                serde_json::from_str(&m.manifest).unwrap(),
                &env.namespace,
            ));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn keyed(mut o: Value, ns: &str) -> (String, Value) {
    let meta = o["metadata"].as_object_mut().unwrap();
    if meta.get("namespace").and_then(Value::as_str) == Some(ns) {
        meta.remove("namespace");
    }
    meta.remove("annotations");
    let key = format!(
        "{}/{}/{}",
        o["apiVersion"], o["kind"], o["metadata"]["name"]
    );
    (key, o)
}

/// `helm template` of the chart with `extra` arguments.
fn template(chart: &std::path::Path, ns: &str, extra: &[String]) -> Vec<(String, Value)> {
    let group = format!("widgetGroup={}", group(ns));
    let mut args = vec!["template", "caps", chart.to_str().unwrap(), "-n", ns];
    args.extend(["--set", group.as_str()]);
    args.extend(extra.iter().map(String::as_str));
    let mut out: Vec<(String, Value)> = helm(&args)
        .split("\n---")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .filter(Value::is_object)
        .map(|o| keyed(o, ns))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

async fn capabilities_data(env: &TestEnv) -> Option<std::collections::BTreeMap<String, String>> {
    let cm = env
        .api::<ConfigMap>()
        .get_opt("caps-capabilities")
        .await
        .unwrap()?;
    cm.data
}

/// The API group of this run's Widget kind (CRDs are cluster-wide).
fn group(ns: &str) -> String {
    format!("{ns}.caps.enoki.dev")
}

/// The packaged `chart` in ConfigMap `cm`, and a Synthesizer `synth` of the built-in `helm`
/// rendering it with `helm` (more of `spec.helm`).
async fn chart_synthesizer(
    env: &TestEnv,
    chart: &std::path::Path,
    cm: &str,
    synth: &str,
    helm: Value,
) {
    let data = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm},
        "binaryData": {"chart.tgz": base64::engine::general_purpose::STANDARD
            .encode(std::fs::read(chart).unwrap())}});
    let apply = PatchParams::apply("test").force();
    env.api::<ConfigMap>()
        .patch(cm, &apply, &Patch::Apply(&data))
        .await
        .unwrap();
    let mut spec = json!({"module": {"builtin": "helm"}, "helm": {"chart": {"configMap":
        {"namespace": env.namespace, "name": cm, "key": "chart.tgz"}}}});
    if let Some(more) = helm.as_object() {
        for (k, v) in more {
            spec["helm"][k] = v.clone();
        }
    }
    let synthesizer = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Synthesizer",
        "metadata": {"name": synth}, "spec": spec});
    Api::<Synthesizer>::all(env.client.clone())
        .patch(synth, &apply, &Patch::Apply(&synthesizer))
        .await
        .unwrap();
}

async fn install_widgets(crds: &Api<CustomResourceDefinition>, ns: &str) {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{}", group(ns))},
        "spec": {"group": group(ns), "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object"}}}]}}))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
}

#[tokio::test]
async fn a_chart_renders_for_the_api_versions_the_cluster_serves() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let crd = format!("widgets.{}", group(&env.namespace));
    let (_dir, chart) = packaged("reconciler/controller/tests/fixtures/helm-capabilities");
    let synth = format!("{}-caps", env.namespace);
    let values = json!({"values": {"widgetGroup": group(&env.namespace)}});
    chart_synthesizer(&env, &chart, "caps-chart", &synth, values).await;
    let apply = PatchParams::apply("test").force();
    let comp = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
        "metadata": {"name": "caps"}, "spec": {"synthesizer": {"name": synth}}});
    let comps = env.api::<Composition>();
    comps
        .patch("caps", &apply, &Patch::Apply(&comp))
        .await
        .unwrap();
    let module = workspace_root().join("target/samples/helm-chart.wasm");
    assert!(module.exists(), "{} is missing", module.display());
    let enoki = Enoki::start_with(
        &env.namespace,
        &[
            "--helm-module",
            module.to_str().unwrap(),
            "--compile-timeout",
            "10m",
            "--capabilities-refresh",
            "2s",
            "--rollout-cooldown",
            "1s",
        ],
    );
    eventually("the chart applied", WAIT, || async {
        capabilities_data(&env).await
    })
    .await;

    // Object for object what `helm template` renders given the cluster's list (read until
    // enoki has seen what other tests' CRDs changed on the shared API server).
    let version = env.client.apiserver_version().await.unwrap().git_version;
    let keys = |v: &[(String, Value)]| v.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    let deadline = tokio::time::Instant::now() + RERENDER;
    let ours = loop {
        let apis = served(&env.client).await;
        let mut given = vec!["--kube-version".to_string(), version.clone()];
        given.extend(
            apis.iter()
                .flat_map(|a| ["--api-versions".to_string(), a.clone()]),
        );
        let ours = rendered(&env, "caps").await;
        let theirs = template(&chart, &env.namespace, &given);
        if ours == theirs {
            break ours;
        }
        if tokio::time::Instant::now() > deadline {
            assert_eq!(keys(&ours), keys(&theirs), "{}", enoki.logs());
            for ((k, a), (_, b)) in ours.iter().zip(&theirs) {
                assert_eq!(a, b, "{k} differs from helm template's");
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let kinds: Vec<&str> = ours.iter().map(|(k, _)| k.as_str()).collect();
    assert!(
        kinds.iter().any(|k| k.starts_with("\"policy/v1\"/")),
        "{kinds:?}"
    );
    assert!(
        kinds.iter().any(|k| k.starts_with("\"autoscaling/v2\"/")),
        "{kinds:?}"
    );
    let data = capabilities_data(&env).await.unwrap();
    assert_eq!(data["kubeVersion"], version);
    assert_eq!(data["widgets"], "false");
    // Helm's client-only defaults pick an apiVersion this cluster does not serve.
    let defaults = template(&chart, &env.namespace, &[]);
    assert!(
        defaults
            .iter()
            .any(|(k, _)| k.starts_with("\"policy/v1beta1\"/")),
        "{:?}",
        keys(&defaults)
    );

    // The cluster serves a new kind: the chart renders again.
    install_widgets(&crds, &env.namespace).await;
    eventually("re-rendered for the new CRD", RERENDER, || async {
        let d = capabilities_data(&env).await?;
        (d["widgets"] == "true").then_some(())
    })
    .await;

    // An explicit HELM_KUBE_VERSION wins over the cluster's.
    let patch =
        json!({"spec": {"synthesisEnv": [{"name": "HELM_KUBE_VERSION", "value": "v1.24.0"}]}});
    comps
        .patch("caps", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually("the Composition's kube version", RERENDER, || async {
        let d = capabilities_data(&env).await?;
        (d["kubeVersion"] == "v1.24.0" && d["modern"] == "false").then_some(())
    })
    .await;
    crds.delete(&crd, &DeleteParams::default()).await.unwrap();
    drop(enoki);
}

/// `spec.helm.shim: eno`: the release is Eno's shim's (`eno-helm-shim` in `default`, which the
/// chart reads as `.Release.Namespace`), its hook manifests are applied with the rest, and
/// the objects still land in the Composition's namespace.
#[tokio::test]
async fn enos_shim_mode_installs_enos_release_with_its_hooks() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let (_dir, chart) = packaged("samples/12-helm/chart");
    let synth = format!("{}-eno-shim", env.namespace);
    chart_synthesizer(
        &env,
        &chart,
        "greeter-chart",
        &synth,
        json!({"shim": "eno"}),
    )
    .await;
    let apply = PatchParams::apply("test").force();
    let comp = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
        "metadata": {"name": "web"}, "spec": {"synthesizer": {"name": synth}}});
    env.api::<Composition>()
        .patch("web", &apply, &Patch::Apply(&comp))
        .await
        .unwrap();
    let module = workspace_root().join("target/samples/helm-chart.wasm");
    let enoki = Enoki::start_with(
        &env.namespace,
        &[
            "--helm-module",
            module.to_str().unwrap(),
            "--compile-timeout",
            "10m",
        ],
    );
    let data = eventually("Eno's release applied", WAIT, || async {
        env.api::<ConfigMap>()
            .get_opt("eno-helm-shim-greeter")
            .await
            .unwrap()?
            .data
    })
    .await;
    assert_eq!(data["message"], "hello, default", "{}", enoki.logs());
    let hook = eventually("the test hook applied", WAIT, || async {
        env.api::<k8s_openapi::api::core::v1::Pod>()
            .get_opt("eno-helm-shim-greeter-test")
            .await
            .unwrap()
    })
    .await;
    assert_eq!(
        hook.metadata.annotations.unwrap_or_default()["helm.sh/hook"],
        "test"
    );
}
