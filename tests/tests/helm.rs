//! Helm charts through the built-in `helm` synthesizer on the real API server: a chart nobody
//! here wrote (metrics-server, from the Go module proxy) pushed with `helm push` and pulled by
//! digest, the Helm module itself from the same registry by digest (`--helm-module`); values
//! merged chart < Synthesizer < Composition; a values change re-renders and prunes; a CRD is
//! never deleted by a values change; and a release installed with `helm install` is taken
//! over as `docs/from-helm.md` says.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use crds::{Composition, Synthesizer};
use harness::{Enoki, TestEnv, eventually, install_crds, workspace_root};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

/// The first synthesis compiles an 80 MB module (cached afterwards).
/// Three tests compile the 84.4 MB Helm module at once on two cores: minutes in a debug build.
const WAIT: Duration = Duration::from_secs(600);

/// The compile timeout the tests' enoki gets (the default 2m is for one compilation at a time).
const COMPILE_TIMEOUT: &str = "10m";

/// The `helm` binary (hack/tools.sh builds it; make test sets HELM) against the test cluster.
fn helm(args: &[&str]) -> String {
    let bin = std::env::var("HELM").expect("HELM: the helm binary (make test sets it)");
    let out = std::process::Command::new(bin)
        .args(args)
        .env("KUBECONFIG", harness::kubeconfig_path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `helm package` of `dir` (relative to the workspace): the `.tgz`.
fn packaged(dir: &str) -> (harness::TempDir, PathBuf) {
    let chart = workspace_root().join(dir);
    assert!(
        chart.exists(),
        "{} is missing: run hack/build-samples.sh",
        chart.display()
    );
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

fn helm_module() -> PathBuf {
    let module = workspace_root().join("target/samples/helm-chart.wasm");
    assert!(
        module.exists(),
        "{} is missing: run hack/build-samples.sh",
        module.display()
    );
    module
}

async fn apply<K>(api: &Api<K>, name: &str, object: &Value)
where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::apply("test").force(),
        &Patch::Apply(object),
    )
    .await
    .unwrap();
}

async fn set_values(env: &TestEnv, values: &str) {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "values"},
        "data": {"values.yaml": values}});
    apply(&env.api::<ConfigMap>(), "values", &cm).await;
}

/// A Synthesizer of the built-in `helm` with `chart` and inline `values`, taking the
/// Composition's `values` ConfigMap.
async fn helm_synthesizer(env: &TestEnv, name: &str, chart: Value, values: Value) {
    let spec = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Synthesizer",
        "metadata": {"name": name},
        "spec": {"module": {"builtin": "helm"}, "helm": {"chart": chart, "values": values},
                 "refs": [{"key": "values", "optional": true,
                           "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}}]}});
    apply(&Api::<Synthesizer>::all(env.client.clone()), name, &spec).await;
}

async fn composition(env: &TestEnv, name: &str, synth: &str) {
    let comp = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
        "metadata": {"name": name},
        "spec": {"synthesizer": {"name": synth},
                 "bindings": [{"key": "values", "resource": {"name": "values"}}]}});
    apply(&env.api::<Composition>(), name, &comp).await;
}

/// Waits (as long as a first compilation may take) until Composition `name` is Ready.
async fn ready(env: &TestEnv, name: &str) {
    eventually(&format!("Composition {name} Ready"), WAIT, || async {
        harness::composition_ready(env, name).await.then_some(())
    })
    .await;
}

/// The UUID of Composition `name`'s current synthesis.
async fn current_synthesis(env: &TestEnv, name: &str) -> Option<String> {
    let c = env.api::<Composition>().get(name).await.unwrap();
    c.status?.current_synthesis.map(|s| s.uuid)
}

/// Whether CRD `name` exists and is not being deleted.
async fn crd_alive(crds: &Api<CustomResourceDefinition>, name: &str) -> bool {
    crds.get_opt(name)
        .await
        .unwrap()
        .is_some_and(|c| c.metadata.deletion_timestamp.is_none())
}

fn replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

#[tokio::test]
async fn the_builtin_renders_a_chart_pulled_by_digest_and_a_values_change_prunes() {
    let (_registry, addr) = harness::start_registry();
    let module_digest = harness::push_module(&helm_module(), &format!("{addr}/enoki/helm:e2e"));
    let (_dir, chart) = packaged("target/charts/metrics-server");
    let pushed = helm(&[
        "push",
        chart.to_str().unwrap(),
        &format!("oci://{addr}/charts"),
        "--plain-http",
    ]);
    let chart_digest = pushed
        .split_whitespace()
        .find(|w| w.starts_with("sha256:"))
        .unwrap_or_else(|| panic!("helm push printed no digest: {pushed}"));
    let version = pushed
        .lines()
        .find_map(|l| l.strip_prefix("Pushed: "))
        .and_then(|r| r.rsplit(':').next())
        .unwrap_or_else(|| panic!("helm push printed no reference: {pushed}"));
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = format!("{}-helm", env.namespace);
    // The release is named after the Composition; cluster-scoped names carry it (and
    // `nameOverride`, for the one that carries the chart's name).
    let name = format!("ms{}", &env.namespace[env.namespace.len() - 6..]);
    // No APIService (inline, the platform's choice): one pointing at a Service without
    // endpoints would disturb discovery for everyone sharing the control plane. Two replicas
    // from the Synthesizer, three from the Composition's values: the Composition's win.
    helm_synthesizer(
        &env,
        &synth,
        json!({"oci": format!("{addr}/charts/metrics-server:{version}@{chart_digest}")}),
        json!({"apiService": {"create": false}, "replicas": 2, "nameOverride": name}),
    )
    .await;
    set_values(
        &env,
        "replicas: 3\npodDisruptionBudget:\n  enabled: true\n  minAvailable: 1\n",
    )
    .await;
    composition(&env, &name, &synth).await;
    let helm_module = format!("{addr}/enoki/helm:e2e@{module_digest}");
    let enoki = Enoki::start_with(
        &env.namespace,
        &[
            "--helm-module",
            &helm_module,
            "--compile-timeout",
            COMPILE_TIMEOUT,
        ],
    );
    let instance = ListParams::default().labels(&format!("app.kubernetes.io/instance={name}"));
    let (deployments, pdbs) = (env.api::<Deployment>(), env.api::<PodDisruptionBudget>());
    eventually("the chart converged", WAIT, || async {
        let ready = harness::composition_ready(&env, &name).await;
        let d = deployments.list(&instance).await.unwrap().items;
        (ready && d.len() == 1).then(|| d[0].clone())
    })
    .await;
    let d = &deployments.list(&instance).await.unwrap().items[0];
    assert_eq!(replicas(d), 3, "{}", enoki.logs());
    assert_eq!(pdbs.list(&instance).await.unwrap().items.len(), 1);
    // The values change: no PDB rendered any more, so it is pruned; the replicas fall back
    // to the Synthesizer's.
    set_values(&env, "{}\n").await;
    eventually("the PodDisruptionBudget pruned", WAIT, || async {
        let gone = pdbs.list(&instance).await.unwrap().items.is_empty();
        let d = deployments.list(&instance).await.unwrap().items;
        (gone && d.len() == 1 && replicas(&d[0]) == 2).then_some(())
    })
    .await;
    ready(&env, &name).await;
}

/// The chart of `reconciler/controller/tests/fixtures/helm-edge` from a ConfigMap: its crds/
/// CRD and a CRD its templates render only with `extraCRD: true`. Turning the value off
/// leaves the CRD (with its custom resources) in place, as `helm.sh/resource-policy: keep`
/// would; deleting the Composition leaves both CRDs, as Helm leaves crds/, without enoki's
/// `managed-by` label: the release installed again (a new Composition of the same name)
/// adopts them and becomes Ready; deleting the whole namespace leaves and releases them too.
#[tokio::test]
async fn a_values_change_never_deletes_a_crd() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let both = ["widgets.edge.enoki.dev", "gadgets.edge.enoki.dev"];
    // What an interrupted earlier run may have left (the names are cluster-wide).
    for crd in both {
        let _ = crds.delete(crd, &DeleteParams::default()).await;
    }
    eventually("leftover CRDs gone", WAIT, || async {
        for crd in both {
            if crds.get_opt(crd).await.unwrap().is_some() {
                return None;
            }
        }
        Some(())
    })
    .await;
    let (_dir, tgz) = packaged("reconciler/controller/tests/fixtures/helm-edge");
    let tgz = std::fs::read(tgz).unwrap();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "edge-chart"},
        "binaryData": {"chart.tgz": base64::engine::general_purpose::STANDARD.encode(tgz)}});
    apply(&env.api::<ConfigMap>(), "edge-chart", &cm).await;
    let synth = format!("{}-edge", env.namespace);
    helm_synthesizer(
        &env,
        &synth,
        json!({"configMap": {"namespace": env.namespace, "name": "edge-chart", "key": "chart.tgz"}}),
        json!({}),
    )
    .await;
    set_values(&env, "extraCRD: true\n").await;
    composition(&env, "edge", &synth).await;
    let module = helm_module();
    let enoki = Enoki::start_with(
        &env.namespace,
        &[
            "--helm-module",
            module.to_str().unwrap(),
            "--compile-timeout",
            COMPILE_TIMEOUT,
        ],
    );
    ready(&env, "edge").await;
    for crd in both {
        assert!(crd_alive(&crds, crd).await, "{crd}: {}", enoki.logs());
    }
    let before = current_synthesis(&env, "edge").await;
    set_values(&env, "extraCRD: false\n").await;
    eventually("the values change synthesized and Ready", WAIT, || async {
        let uuid = current_synthesis(&env, "edge").await;
        (uuid != before && harness::composition_ready(&env, "edge").await).then_some(())
    })
    .await;
    // The one ConfigMap the values do not touch is still there, and so is the CRD.
    assert!(harness::config_map_exists(&env, "edge-no-monitoring").await);
    assert!(crd_alive(&crds, both[1]).await, "{}", enoki.logs());
    env.api::<Composition>()
        .delete("edge", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the Composition deleted", WAIT, || async {
        let gone = env
            .api::<Composition>()
            .get_opt("edge")
            .await
            .unwrap()
            .is_none();
        gone.then_some(())
    })
    .await;
    assert!(!harness::config_map_exists(&env, "edge-no-monitoring").await);
    for crd in both {
        assert!(crd_alive(&crds, crd).await, "{crd} kept");
        let c = crds.get(crd).await.unwrap();
        assert!(
            !c.labels().contains_key("enoki.dev/managed-by"),
            "{crd} released: {:?}",
            c.labels()
        );
    }
    // Installed again: the kept CRDs are adopted, nothing conflicts.
    composition(&env, "edge", &synth).await;
    ready(&env, "edge").await;
    let owner = env
        .api::<Composition>()
        .get("edge")
        .await
        .unwrap()
        .uid()
        .unwrap();
    // The crds/ CRD the chart renders again is this Composition's now (the other one the
    // values leave out stays unmanaged).
    eventually("the crds/ CRD adopted", WAIT, || async {
        let labels = crds.get(both[0]).await.unwrap().labels().clone();
        (labels.get("enoki.dev/managed-by") == Some(&owner)).then_some(())
    })
    .await;
    // The whole namespace deleted (its ResourceSlices may go before the Composition's last
    // pass): the CRDs stay, released again.
    Api::<k8s_openapi::api::core::v1::Namespace>::all(env.client.clone())
        .delete(&env.namespace, &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the Composition deleted with its namespace",
        WAIT,
        || async {
            let gone = env
                .api::<Composition>()
                .get_opt("edge")
                .await
                .unwrap()
                .is_none();
            gone.then_some(())
        },
    )
    .await;
    for crd in both {
        assert!(crd_alive(&crds, crd).await, "{crd} kept: {}", enoki.logs());
        let labels = crds.get(crd).await.unwrap().labels().clone();
        assert!(
            !labels.contains_key("enoki.dev/managed-by"),
            "{crd}: {labels:?}"
        );
        crds.delete(crd, &DeleteParams::default()).await.unwrap();
    }
}

/// `docs/from-helm.md`'s steps with a release `helm install` made: enoki renders the same
/// objects, adopts them, and with the two migrating flags takes Helm's fields over, so a
/// values change after the move removes what the chart no longer renders (an argument Helm
/// set, a PodDisruptionBudget).
#[tokio::test]
async fn a_helm_install_release_is_taken_over() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let (_dir, tgz) = packaged("target/charts/metrics-server");
    let name = format!("tk{}", &env.namespace[env.namespace.len() - 6..]);
    let values = format!(
        "nameOverride: {name}\napiService:\n  create: false\nargs:\n  - --kubelet-insecure-tls\n\
         podDisruptionBudget:\n  enabled: true\n  minAvailable: 1\n"
    );
    let values_dir = harness::tempdir("values");
    let file = values_dir.join("values.yaml");
    std::fs::write(&file, &values).unwrap();
    helm(&[
        "install",
        &name,
        tgz.to_str().unwrap(),
        "-n",
        &env.namespace,
        "-f",
        file.to_str().unwrap(),
    ]);
    let instance = ListParams::default().labels(&format!("app.kubernetes.io/instance={name}"));
    let (deployments, pdbs) = (env.api::<Deployment>(), env.api::<PodDisruptionBudget>());
    let args = |d: &Deployment| -> Vec<String> {
        let pod = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        pod.containers[0].args.clone().unwrap_or_default()
    };
    let installed = deployments.list(&instance).await.unwrap().items;
    assert!(args(&installed[0]).contains(&"--kubelet-insecure-tls".to_string()));

    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ms-chart"},
        "binaryData": {"chart.tgz": base64::engine::general_purpose::STANDARD
            .encode(std::fs::read(&tgz).unwrap())}});
    apply(&env.api::<ConfigMap>(), "ms-chart", &cm).await;
    let synth = format!("{}-ms", env.namespace);
    helm_synthesizer(
        &env,
        &synth,
        json!({"configMap": {"namespace": env.namespace, "name": "ms-chart", "key": "chart.tgz"}}),
        json!({}),
    )
    .await;
    set_values(&env, &values).await;
    composition(&env, &name, &synth).await;
    let module = helm_module();
    let enoki = Enoki::start_with(
        &env.namespace,
        &[
            "--helm-module",
            module.to_str().unwrap(),
            "--compile-timeout",
            COMPILE_TIMEOUT,
            "--migrating-field-managers",
            "helm",
            "--migrating-fields",
            "spec,data,stringData,metadata.labels,metadata.annotations",
        ],
    );
    ready(&env, &name).await;
    // Helm's release records go (as `kubectl delete secret -l owner=helm,name=<release>`);
    // nothing else does.
    let records = ListParams::default().labels(&format!("owner=helm,name={name}"));
    let secrets = env.api::<k8s_openapi::api::core::v1::Secret>();
    assert!(!secrets.list(&records).await.unwrap().items.is_empty());
    secrets
        .delete_collection(&DeleteParams::default(), &records)
        .await
        .unwrap();
    assert_eq!(deployments.list(&instance).await.unwrap().items.len(), 1);
    set_values(
        &env,
        &format!("nameOverride: {name}\napiService:\n  create: false\n"),
    )
    .await;
    eventually("Helm's argument and the PDB removed", WAIT, || async {
        let d = deployments.list(&instance).await.unwrap().items;
        let gone = pdbs.list(&instance).await.unwrap().items.is_empty();
        (gone && d.len() == 1 && args(&d[0]).iter().all(|a| a != "--kubelet-insecure-tls"))
            .then_some(())
    })
    .await;
    assert!(
        harness::composition_ready(&env, &name).await,
        "{}",
        enoki.logs()
    );
}
