//! Attacks by a tenant with only `edit` in its namespace (the harness's `tenant-a` user),
//! each on the real control plane, each followed by the proof that the controller is still
//! serving: `/healthz` answers and another Composition converges.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crds::Composition;
use harness::{Enoki, TestEnv, echo_module, eventually, install_crds, install_synthesizer};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

/// The tenant's view of its namespace: `edit` there, nothing else.
struct Tenant {
    client: kube::Client,
    namespace: String,
}

impl Tenant {
    async fn of(env: &TestEnv) -> Tenant {
        harness::grant_tenant_edit(&env.namespace);
        Tenant {
            client: harness::client_as("tenant-a").await,
            namespace: env.namespace.clone(),
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Writes the echo items ConfigMap `name` and a Composition `name` of `synth` bound to it.
    async fn compose(&self, name: &str, synth: &str, items: serde_json::Value) {
        let pp = PatchParams::apply("tenant-a").force();
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"items": items.to_string()}});
        self.api::<ConfigMap>()
            .patch(name, &pp, &Patch::Apply(&cm))
            .await
            .expect("the tenant writes ConfigMaps");
        let comp = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
            "metadata": {"name": name},
            "spec": {"synthesizer": {"name": synth},
                     "bindings": [{"key": "config", "resource": {"name": name}}]}});
        self.api::<Composition>()
            .patch(name, &pp, &Patch::Apply(&comp))
            .await
            .expect("the tenant writes Compositions");
    }
}

/// After an attack: enoki still answers `/healthz` and a fresh Composition converges.
async fn still_serving(env: &TestEnv, enoki: &mut Enoki, synth: &str, tenant: &Tenant) {
    assert!(enoki.running(), "the controller exited:\n{}", enoki.logs());
    let name = format!("after-{:04x}", rand::random::<u16>());
    let out = harness::config_map(&format!("{name}-out"), json!({}), json!({"v": "1"}));
    tenant.compose(&name, synth, json!([out])).await;
    eventually(&format!("{name} Ready after the attack"), WAIT, || async {
        harness::composition_ready(env, &name).await.then_some(())
    })
    .await;
    let (code, body) = harness::http_get(enoki.metrics_port.unwrap(), "/healthz");
    assert_eq!(code, 200, "/healthz: {body}");
    assert!(enoki.running(), "the controller exited:\n{}", enoki.logs());
}

/// `'aaaaaaaaaa'` through 13 replaces: ~10^13 bytes if it ran.
fn replace_chain() -> String {
    let mut e = "'aaaaaaaaaa'".to_string();
    for _ in 0..13 {
        e.push_str(".replace('a','aaaaaaaaaa')");
    }
    format!("size({e}) > 0")
}

#[tokio::test]
async fn a_replace_chain_in_a_readiness_check_is_a_condition_not_an_aborted_controller() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let tenant = Tenant::of(&env).await;
    let mut enoki = Enoki::start(&env.namespace);

    let bomb = harness::config_map(
        "bomb-out",
        json!({"enoki.dev/readiness-grow": replace_chain()}),
        json!({"v": "1"}),
    );
    tenant.compose("bomb", &synth, json!([bomb])).await;
    let msg = eventually("bomb: Ready=False naming the budget", WAIT, || async {
        let (s, _, m) = harness::composition_condition(&env, "bomb", "Ready").await?;
        (s == "False" && m.contains("exceeds its budget")).then_some(m)
    })
    .await;
    assert!(
        msg.contains("bomb-out") && msg.contains("grow"),
        "the resource and its check are named: {msg}"
    );
    still_serving(&env, &mut enoki, &synth, &tenant).await;
}

#[tokio::test]
async fn split_into_macros_in_an_override_does_not_hang_and_never_blocks_deletion() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let tenant = Tenant::of(&env).await;
    let mut enoki = Enoki::start(&env.namespace);

    // 100 KB split into single characters, fed to two nested macros (10^10 steps), in an
    // override condition: evaluated before the object exists, on every pass, and while the
    // Composition is deleted.
    let hang = "self.data.s.split('').all(a, self.data.s.split('').exists(b, a != b))";
    let overrides = json!([{"path": "self.data.v", "value": "2", "condition": hang}]);
    let target = harness::config_map(
        "hang-out",
        json!({"enoki.dev/overrides": overrides.to_string()}),
        json!({"v": "1", "s": "x".repeat(100_000)}),
    );
    tenant.compose("hang", &synth, json!([target])).await;
    let cms: Api<ConfigMap> = env.api();
    eventually("hang-out applied", WAIT, || async {
        cms.get_opt("hang-out").await.unwrap().map(|_| ())
    })
    .await;
    still_serving(&env, &mut enoki, &synth, &tenant).await;

    tenant
        .api::<Composition>()
        .delete("hang", &DeleteParams::default())
        .await
        .unwrap();
    let comps: Api<Composition> = env.api();
    eventually("hang deleted", WAIT, || async {
        comps.get_opt("hang").await.unwrap().is_none().then_some(())
    })
    .await;
    eventually("hang-out deleted with it", WAIT, || async {
        cms.get_opt("hang-out").await.unwrap().is_none().then_some(())
    })
    .await;
    still_serving(&env, &mut enoki, &synth, &tenant).await;
}
