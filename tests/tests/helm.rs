//! A Helm chart nobody here wrote (metrics-server, from the Go module proxy) as a Composition on
//! the real API server: the `helm-chart` synthesizer (Helm's engine in the sandbox, pulled from
//! a local OCI registry by digest) renders the packaged chart bound as an input with the values
//! of another; it converges, and a values change re-renders and prunes what the chart no
//! longer renders.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use base64::Engine as _;
use crds::{Composition, Synthesizer};
use harness::{Enoki, TestEnv, eventually, install_crds, workspace_root};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

/// The first synthesis compiles an 80 MB module (cached afterwards).
const WAIT: Duration = Duration::from_secs(300);

/// `helm package` of `target/charts/<name>` (hack/build-samples.sh fetches it).
fn packaged(name: &str) -> Vec<u8> {
    let chart = workspace_root().join("target/charts").join(name);
    assert!(
        chart.exists(),
        "{} is missing: run hack/build-samples.sh",
        chart.display()
    );
    let dir = harness::tempdir("chart");
    let helm = std::env::var("HELM").expect("HELM: the helm binary (make test sets it)");
    let out = std::process::Command::new(helm)
        .args([
            "package",
            chart.to_str().unwrap(),
            "-d",
            dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tgz = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::read(tgz).unwrap()
}

async fn set_values(env: &TestEnv, values: &str) {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "values"},
        "data": {"values.yaml": values}});
    env.api::<ConfigMap>()
        .patch(
            "values",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&cm),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_real_world_chart_converges_and_a_values_change_prunes() {
    let (_registry, addr) = harness::start_registry();
    let module = workspace_root().join("target/samples/helm-chart.wasm");
    assert!(
        module.exists(),
        "{} is missing: run hack/build-samples.sh",
        module.display()
    );
    let digest = harness::push_module(&module, &format!("{addr}/enoki/helm-chart:e2e"));
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = format!("{}-helm", env.namespace);
    let cm_ref = |key: &str, optional: bool| {
        json!({"key": key, "optional": optional,
            "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}})
    };
    let spec = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Synthesizer",
        "metadata": {"name": synth},
        "spec": {"module": {"oci": format!("{addr}/enoki/helm-chart:e2e@{digest}")},
                 "refs": [cm_ref("chart", false), cm_ref("values", true)]}});
    Api::<Synthesizer>::all(env.client.clone())
        .patch(
            &synth,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&spec),
        )
        .await
        .unwrap();
    let chart = base64::engine::general_purpose::STANDARD.encode(packaged("metrics-server"));
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "chart"},
        "binaryData": {"chart.tgz": chart}});
    env.api::<ConfigMap>()
        .patch(
            "chart",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&cm),
        )
        .await
        .unwrap();
    // No APIService: one pointing at a Service without endpoints would disturb discovery for
    // everyone sharing the control plane.
    let base = "apiService:\n  create: false\n";
    set_values(
        &env,
        &format!("{base}podDisruptionBudget:\n  enabled: true\n  minAvailable: 1\n"),
    )
    .await;
    // The release is named after the Composition; cluster-scoped names carry it.
    let name = format!("ms{}", &env.namespace[env.namespace.len() - 6..]);
    let comp = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
        "metadata": {"name": name},
        "spec": {"synthesizer": {"name": synth}, "bindings": [
            {"key": "chart", "resource": {"name": "chart"}},
            {"key": "values", "resource": {"name": "values"}}]}});
    let comps: Api<Composition> = env.api();
    comps
        .patch(
            &name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&comp),
        )
        .await
        .unwrap();
    let enoki = Enoki::start(&env.namespace);
    let instance = ListParams::default().labels(&format!("app.kubernetes.io/instance={name}"));
    let pdbs: Api<PodDisruptionBudget> = env.api();
    eventually("the chart converged", WAIT, || async {
        let ready = harness::composition_ready(&env, &name).await;
        let deployments = env.api::<Deployment>().list(&instance).await.unwrap().items;
        (ready && deployments.len() == 1).then_some(())
    })
    .await;
    assert_eq!(
        pdbs.list(&instance).await.unwrap().items.len(),
        1,
        "{}",
        enoki.logs()
    );
    // The values change: no PDB rendered any more, so it is pruned.
    set_values(&env, base).await;
    eventually("the PodDisruptionBudget pruned", WAIT, || async {
        pdbs.list(&instance)
            .await
            .unwrap()
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    harness::wait_ready(&env, &name).await;
}
