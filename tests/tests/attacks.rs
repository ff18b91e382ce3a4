//! Attacks by a tenant with only `edit` in its namespace (the harness's `tenant-a` user),
//! each on the real control plane, each followed by the proof that the controller is still
//! serving: `/healthz` answers and another Composition converges.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crds::Composition;
use harness::{Enoki, TestEnv, echo_module, eventually, install_crds, install_synthesizer};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
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
        self.compose_with(name, synth, json!({"items": items.to_string()}), json!({}))
            .await
            .expect("the tenant writes Compositions");
    }

    /// Like [`Tenant::compose`] with the items ConfigMap's whole `data` and more of the
    /// Composition's spec (merged over the default binding); the API server's answer.
    async fn compose_with(
        &self,
        name: &str,
        synth: &str,
        data: serde_json::Value,
        spec: serde_json::Value,
    ) -> Result<Composition, kube::Error> {
        let pp = PatchParams::apply("tenant-a").force();
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": data});
        self.api::<ConfigMap>()
            .patch(name, &pp, &Patch::Apply(&cm))
            .await
            .expect("the tenant writes ConfigMaps");
        let mut full = json!({"synthesizer": {"name": synth},
                     "bindings": [{"key": "config", "resource": {"name": name}}]});
        full.as_object_mut()
            .unwrap()
            .extend(spec.as_object().unwrap().clone());
        let comp = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
            "metadata": {"name": name, "labels": {"attack": self.namespace}}, "spec": full});
        self.api::<Composition>()
            .patch(name, &pp, &Patch::Apply(&comp))
            .await
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
    // Every iteration copying a 900 KB value (45 GB if it ran), and a quadratic search.
    let copier = harness::config_map(
        "copier-out",
        json!({"enoki.dev/readiness-copy": "self.data.s.split('').map(c, {'k': self.data.big}).size() > 0",
               "enoki.dev/readiness-search": "self.data.big.indexOf(self.data.big + 'x') == -1"}),
        json!({"s": "x".repeat(50_000), "big": "y".repeat(900_000)}),
    );
    tenant.compose("bomb", &synth, json!([bomb, copier])).await;
    let msg = eventually("bomb: Ready=False naming the budget", WAIT, || async {
        let (s, _, m) = harness::composition_condition(&env, "bomb", "Ready").await?;
        (s == "False" && m.contains("exceeds its budget")).then_some(m)
    })
    .await;
    assert!(
        msg.contains("bomb-out") && msg.contains("grow"),
        "the resource and its check are named: {msg}"
    );
    let cms: Api<ConfigMap> = env.api();
    eventually("copier-out applied", WAIT, || async {
        cms.get_opt("copier-out").await.unwrap().map(|_| ())
    })
    .await;
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

    harness::delete_and_wait(&tenant.api::<Composition>(), "hang").await;
    eventually("hang-out deleted with it", WAIT, || async {
        cms.get_opt("hang-out")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    still_serving(&env, &mut enoki, &synth, &tenant).await;
}

#[tokio::test]
async fn a_padded_synthesis_env_is_invalid_spec_and_writes_nothing_to_etcd() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let tenant = Tenant::of(&env).await;
    let mut enoki = Enoki::start(&env.namespace);
    let slices: Api<crds::ResourceSlice> = env.api();
    let before = slices
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();

    // ~1.2 MiB of environment: with the status enoki adds, every status write would exceed
    // etcd's object limit.
    let padded: Vec<_> = (0..400)
        .map(|i| json!({"name": format!("PAD_{i}"), "value": "x".repeat(3000)}))
        .collect();
    let out = harness::config_map("padded-out", json!({}), json!({"v": "1"}));
    tenant
        .compose_with(
            "padded",
            &synth,
            json!({"items": json!([out]).to_string()}),
            json!({"synthesisEnv": padded}),
        )
        .await
        .expect("the API server accepts the padded Composition");
    let msg = eventually("padded: Synthesized=False InvalidSpec", WAIT, || async {
        let (s, r, m) = harness::composition_condition(&env, "padded", "Synthesized").await?;
        (s == "False" && r == "InvalidSpec").then_some(m)
    })
    .await;
    assert!(msg.contains("spec.synthesisEnv"), "{msg}");
    // Other Compositions go on; then the object count is what it was: the padded one
    // wrote no slice, however many passes it had.
    still_serving(&env, &mut enoki, &synth, &tenant).await;
    let after: Vec<_> = slices
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|s| s.name_any().starts_with("padded"))
        .collect();
    assert!(
        after.is_empty(),
        "slices of the padded Composition: {}",
        after.len()
    );
    let all = slices
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    assert!(all <= before + 2, "{before} slices before, {all} after");
}

/// The same padding through any other field (here 1.2 MiB of bindings), and a Symphony that
/// would copy a Composition per variation: refused by size, nothing generated or written.
#[tokio::test]
async fn a_spec_padded_through_any_field_or_a_symphony_of_many_variations_is_invalid_spec() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let tenant = Tenant::of(&env).await;
    let mut enoki = Enoki::start(&env.namespace);
    // The CRD admits at most 500 bindings; 500 with 600-byte names still pass admission and
    // pad the spec past 256 KiB.
    let bindings: Vec<_> = (0..500)
        .map(|i| json!({"key": format!("k{i}"), "resource": {"name": "x".repeat(600)}}))
        .collect();
    tenant
        .compose_with(
            "padded-bindings",
            &synth,
            json!({"items": "[]"}),
            json!({"bindings": bindings}),
        )
        .await
        .expect("the API server accepts the padded Composition");
    let msg = eventually("padded-bindings: InvalidSpec", WAIT, || async {
        let (s, r, m) =
            harness::composition_condition(&env, "padded-bindings", "Synthesized").await?;
        (s == "False" && r == "InvalidSpec").then_some(m)
    })
    .await;
    assert!(msg.contains("at most 262144"), "{msg}");

    let variations: Vec<_> = (0..300)
        .map(|i| json!({"synthesizer": {"name": synth}, "labels": {"v": format!("v{i}")}}))
        .collect();
    let sym = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Symphony",
        "metadata": {"name": "many"}, "spec": {"variations": variations}});
    tenant
        .api::<crds::Symphony>()
        .patch("many", &PatchParams::apply("tenant-a"), &Patch::Apply(&sym))
        .await
        .expect("the tenant writes Symphonies");
    let event = harness::wait_event(&env, "an InvalidSpec Event on the Symphony", |e| {
        e.reason.as_deref() == Some("InvalidSpec")
            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("many")
    })
    .await;
    assert!(
        event.note.unwrap_or_default().contains("300 variations"),
        "names the count"
    );
    // The Event is written by the pass that refused it, before anything could be applied;
    // a fresh Composition converging after it shows the controller went on.
    still_serving(&env, &mut enoki, &synth, &tenant).await;
    let generated = tenant
        .api::<Composition>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|c| c.name_any().starts_with("many"))
        .count();
    assert_eq!(generated, 0, "no Composition generated from the Symphony");
}

#[tokio::test]
async fn an_empty_namespace_binding_means_the_own_namespace_never_every_namespace() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let tenant = Tenant::of(&env).await;
    let mut enoki = Enoki::start_with(&env.namespace, &["--no-cross-namespace-refs"]);
    let since = harness::now_rfc3339();

    let out = harness::config_map("empty-ns-out", json!({}), json!({"v": "1"}));
    tenant
        .compose_with(
            "empty-ns",
            &synth,
            json!({"items": json!([out]).to_string()}),
            json!({"bindings": [{"key": "config", "resource": {"name": "empty-ns", "namespace": ""}}]}),
        )
        .await
        .unwrap();
    // The binding reads the Composition's own namespace: it converges, not refused.
    eventually("empty-ns Ready", WAIT, || async {
        harness::composition_ready(&env, "empty-ns")
            .await
            .then_some(())
    })
    .await;
    // And no input watch left the namespace: enoki listed or watched no ConfigMaps
    // cluster-wide for an input (input watches exclude managed objects by label).
    harness::audit_barrier(&env).await;
    let wide: Vec<_> = harness::audited_cluster_wide(&since)
        .into_iter()
        .filter(|r| r.by_enoki() && r.resource == "configmaps")
        .filter(|r| r.uri.contains("labelSelector=%21"))
        .collect();
    assert!(wide.is_empty(), "cluster-wide input reads: {wide:#?}");
    still_serving(&env, &mut enoki, &synth, &tenant).await;
}

#[tokio::test]
async fn a_refused_cross_namespace_depends_on_never_blocks_the_targets_deletion() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let tenant = Tenant::of(&env).await;
    let other = format!("{}-b", env.namespace);
    harness::create_namespace(&env.client, &other).await;
    // Both namespaces, this test's Compositions only (by label).
    let selector = format!("attack={}", env.namespace);
    let mut enoki = Enoki::start_with(
        "",
        &["--no-cross-namespace-refs", "--label-selector", &selector],
    );

    // team-b's Composition, written by its own team (the admin here).
    let theirs: Api<Composition> = Api::namespaced(env.client.clone(), &other);
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &other);
    let items = json!([harness::config_map(
        "target-out",
        json!({}),
        json!({"v": "1"})
    )]);
    let pp = PatchParams::apply("team-b").force();
    cms.patch(
        "target",
        &pp,
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "target"}, "data": {"items": items.to_string()}})),
    )
    .await
    .unwrap();
    theirs
        .patch(
            "target",
            &pp,
            &Patch::Apply(
                json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
                "metadata": {"name": "target", "labels": {"attack": env.namespace}},
                "spec": {"synthesizer": {"name": synth},
                         "bindings": [{"key": "config", "resource": {"name": "target"}}]}}),
            ),
        )
        .await
        .unwrap();
    // The attacker's Composition names it in dependsOn: refused, and must not hold it.
    tenant
        .compose_with(
            "waiter",
            &synth,
            json!({"items": "[]"}),
            json!({"dependsOn": [{"name": "target", "namespace": other}]}),
        )
        .await
        .unwrap();
    eventually("waiter: CrossNamespaceRef", WAIT, || async {
        let (s, r, _) = harness::composition_condition(&env, "waiter", "Synthesized").await?;
        (s == "False" && r == "CrossNamespaceRef").then_some(())
    })
    .await;
    eventually("target converged", WAIT, || async {
        let st = theirs.get("target").await.ok()?.status?;
        st.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then_some(())
    })
    .await;
    theirs
        .delete("target", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "target deleted despite the refused dependent",
        WAIT,
        || async {
            theirs
                .get_opt("target")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;
    assert!(enoki.running(), "{}", enoki.logs());
}

#[tokio::test]
async fn a_composition_cannot_override_the_synthesizers_env() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let synths: Api<crds::Synthesizer> = Api::all(env.client.clone());
    synths
        .patch(
            &synth,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"env": [{"name": "POLICY", "value": "platform"}]}})),
        )
        .await
        .unwrap();
    let tenant = Tenant::of(&env).await;
    let mut enoki = Enoki::start(&env.namespace);
    tenant
        .compose_with(
            "env",
            &synth,
            json!({"items": "[]", "env-mirror": "env-out", "env-vars": "POLICY,OWN"}),
            json!({"synthesisEnv": [{"name": "POLICY", "value": "tenant"},
                                    {"name": "OWN", "value": "mine"}]}),
        )
        .await
        .unwrap();
    let cms: Api<ConfigMap> = env.api();
    let data = eventually("env-out written", WAIT, || async {
        cms.get_opt("env-out").await.unwrap()?.data
    })
    .await;
    assert_eq!(
        data.get("POLICY").map(String::as_str),
        Some("platform"),
        "{data:?}"
    );
    assert_eq!(
        data.get("OWN").map(String::as_str),
        Some("mine"),
        "{data:?}"
    );
    still_serving(&env, &mut enoki, &synth, &tenant).await;
}

#[tokio::test]
async fn on_a_remote_target_only_an_explicitly_mapped_namespace_gets_rights() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let tenant = Tenant::of(&env).await;
    let ns = env.namespace.clone();
    let remote = harness::remote_client().await;
    harness::create_namespace(&remote, &ns).await;
    let path = harness::remote_kubeconfig_path();
    let path = path.to_str().unwrap();
    let remote_cms: Api<ConfigMap> = Api::namespaced(remote.clone(), &ns);

    // `deployer` holds `edit` in the namespace on both clusters (inputs are read in
    // management, objects written on the remote one).
    let rb: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "deployer-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": ns}]}))
    .unwrap();
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(env.client.clone(), &ns)
        .create(&Default::default(), &rb)
        .await
        .unwrap();
    // The remote control plane runs no aggregation controller (`edit` is empty there): an
    // explicit Role.
    let role: k8s_openapi::api::rbac::v1::Role = serde_json::from_value(json!({
        "metadata": {"name": "deployer-edit"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]}))
    .unwrap();
    Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(remote.clone(), &ns)
        .create(&Default::default(), &role)
        .await
        .unwrap();
    let mut remote_rb = rb.clone();
    remote_rb.role_ref.kind = "Role".into();
    remote_rb.role_ref.name = "deployer-edit".into();
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(remote.clone(), &ns)
        .create(&Default::default(), &remote_rb)
        .await
        .unwrap();
    let sa = format!("system:serviceaccount:{ns}:deployer");
    eventually("deployer's edit is in force", WAIT, || async {
        harness::can_i(&sa, "get", "configmaps", Some(&ns)).then_some(())
    })
    .await;

    // Without a mapping, a Composition acting as a ServiceAccount is applied nowhere: the
    // name of its management namespace never picks whose rights it gets over there.
    let mut enoki = Enoki::start_with(
        &ns,
        &[
            "--remote-kubeconfig",
            path,
            "--default-service-account",
            "deployer",
        ],
    );
    let out = harness::config_map("remote-out", json!({}), json!({"v": "1"}));
    tenant.compose("remote", &synth, json!([out.clone()])).await;
    let msg = eventually("remote: RemoteNamespaceUnmapped", WAIT, || async {
        let (s, r, m) = harness::composition_condition(&env, "remote", "Synthesized").await?;
        (s == "False" && r == "RemoteNamespaceUnmapped").then_some(m)
    })
    .await;
    assert!(
        msg.contains("--remote-namespace-map") && msg.contains(&ns),
        "{msg}"
    );
    assert!(remote_cms.get_opt("remote-out").await.unwrap().is_none());
    // Its deletion does not hang on an account it may not act as.
    let comps: Api<Composition> = env.api();
    harness::delete_and_wait(&comps, "remote").await;
    assert!(enoki.running(), "{}", enoki.logs());
    enoki.stop();
    tenant.compose("remote", &synth, json!([out])).await;

    // Mapped explicitly (the platform's choice), it acts as that remote namespace's account,
    // with exactly the rights the remote cluster gives it.
    let map = format!("{ns}={ns}");
    let _enoki = Enoki::start_with(
        &ns,
        &[
            "--remote-kubeconfig",
            path,
            "--default-service-account",
            "deployer",
            "--remote-namespace-map",
            &map,
        ],
    );
    eventually("remote-out applied on the remote cluster", WAIT, || async {
        remote_cms.get_opt("remote-out").await.unwrap().map(|_| ())
    })
    .await;
}

#[tokio::test]
async fn a_registry_that_accepts_and_never_answers_frees_the_reconcile() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let tenant = Tenant::of(&env).await;
    // A "registry" that accepts every connection and never writes a byte.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    let synths: Api<crds::Synthesizer> = Api::all(env.client.clone());
    let silent = format!("{}-silent", env.namespace);
    let reference = format!("127.0.0.1:{port}/module:v1@sha256:{}", "0".repeat(64));
    synths
        .patch(
            &silent,
            &PatchParams::apply("platform").force(),
            &Patch::Apply(json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Synthesizer",
                "metadata": {"name": silent},
                "spec": {"module": {"oci": reference},
                         "refs": [{"key": "config", "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}}]}})),
        )
        .await
        .unwrap();
    // Two reconcile workers, two Compositions on the silent module: one fetches, the other
    // does not wait for that fetch (`Loading`), so neither worker is held past the timeout
    // and a third Composition still converges.
    let mut enoki = Enoki::start_with(
        &env.namespace,
        &["--concurrency", "2", "--module-fetch-timeout", "3s"],
    );
    tenant.compose("silent", &silent, json!([])).await;
    tenant.compose("silent-too", &silent, json!([])).await;
    for name in ["silent", "silent-too"] {
        let msg = eventually(&format!("{name}: the pull timed out"), WAIT, || async {
            let (s, _, m) = harness::composition_condition(&env, name, "Synthesized").await?;
            (s == "False" && m.contains("--module-fetch-timeout")).then_some(m)
        })
        .await;
        assert!(
            msg.contains(&format!("127.0.0.1:{port}")),
            "names the registry: {msg}"
        );
    }
    // The fetch's slot was freed by the timeout: nothing is stuck for /healthz.
    assert_eq!(
        harness::http_get(enoki.metrics_port.unwrap(), "/healthz").0,
        200
    );
    still_serving(&env, &mut enoki, &synth, &tenant).await;
}

#[tokio::test]
async fn a_module_emitting_250k_items_is_refused_with_a_condition_and_bounded_memory() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    // The output byte limit is not what stops it: 250,000 minimal items fit in 64Mi.
    let synths: Api<crds::Synthesizer> = Api::all(env.client.clone());
    synths
        .patch(
            &synth,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"limits": {"output": "64Mi", "timeout": "60s"}}})),
        )
        .await
        .unwrap();
    let tenant = Tenant::of(&env).await;
    let mut enoki = Enoki::start(&env.namespace);
    let rss_before = rss_kib(enoki.pid());
    tenant
        .compose_with(
            "flood",
            &synth,
            json!({"items": "[]", "clones": "250000"}),
            json!({}),
        )
        .await
        .unwrap();
    let msg = eventually(
        "flood: OutputTooLarge naming the item limit",
        WAIT,
        || async {
            let (s, r, m) = harness::composition_condition(&env, "flood", "Synthesized").await?;
            (s == "False" && r == "OutputTooLarge").then_some(m)
        },
    )
    .await;
    assert!(
        msg.contains("250000 items") && msg.contains("10000"),
        "{msg}"
    );
    let grown = rss_kib(enoki.pid()).saturating_sub(rss_before);
    // The module's own output (~17 MB) and the counting pass, not 250,000 parsed objects.
    assert!(grown < 200 * 1024, "RSS grew by {grown} KiB");
    let slices: Api<crds::ResourceSlice> = env.api();
    assert!(
        !slices
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|s| s.name_any().starts_with("flood")),
        "nothing of it was stored"
    );
    still_serving(&env, &mut enoki, &synth, &tenant).await;
}

/// Resident set of a process, KiB (`/proc/<pid>/status`).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn enoki_diff_masks_secrets_and_honours_the_tenancy_options() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let ns = env.namespace.clone();
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = env.api();
    secrets
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": "creds"},
                "stringData": {"token": "old-value-zzz", "same": "kept-value-yyy"}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
        "stringData": {"token": "new-value-xxx", "same": "kept-value-yyy"}});
    harness::set_echo_items(&env, "items", &json!([secret])).await;
    harness::apply_composition(&env, "app", &synth, "items", json!({})).await;

    // By default it acts as the default install's controller does, as `enoki-composer`: a
    // namespace not onboarded gives it no rights.
    let (code, out) = harness::enoki_cli_text(&["diff", "app", "-n", &ns]);
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains(&format!("system:serviceaccount:{ns}:enoki-composer")),
        "{out}"
    );
    let (code, out) = harness::enoki_cli_text(&["diff", "app", "-n", &ns, "--as-caller"]);
    assert_eq!(code, 1, "{out}");
    for value in ["old-value-zzz", "new-value-xxx", "kept-value-yyy"] {
        let b64 = base64_of(value);
        assert!(
            !out.contains(value) && !out.contains(&b64),
            "{value} printed:\n{out}"
        );
    }
    assert!(
        out.contains("*** (before)") && out.contains("*** (after)"),
        "{out}"
    );
    assert!(
        out.contains("same: '***'") || out.contains("same: \"***\"") || out.contains("same: ***"),
        "{out}"
    );

    // With the controller's tenancy options it reads and dry-runs as the Composition would:
    // as an account without rights here, it is refused, naming the account.
    let (code, out) = harness::enoki_cli_text(&[
        "diff",
        "app",
        "-n",
        &ns,
        "--default-service-account",
        "nobody",
    ]);
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains(&format!("system:serviceaccount:{ns}:nobody")),
        "{out}"
    );
    // And a reference out of the namespace is refused under --no-cross-namespace-refs.
    harness::apply_composition(
        &env,
        "reach",
        &synth,
        "items",
        json!({"bindings": [{"key": "config", "resource": {"name": "items", "namespace": "kube-system"}}]}),
    )
    .await;
    let (code, out) =
        harness::enoki_cli_text(&["diff", "reach", "-n", &ns, "--no-cross-namespace-refs"]);
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("--no-cross-namespace-refs") && out.contains("spec.bindings[0]"),
        "{out}"
    );
}

fn base64_of(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[tokio::test]
async fn deleting_a_namespace_deletes_its_compositions_cluster_scoped_outputs() {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let tenant = Tenant::of(&env).await;
    let mut enoki = Enoki::start(&env.namespace);
    let name = format!("attack-{}", env.namespace);
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name}, "rules": []});
    tenant.compose("cluster", &synth, json!([role])).await;
    let roles: Api<ClusterRole> = Api::all(env.client.clone());
    eventually("the ClusterRole is applied", WAIT, || async {
        roles.get_opt(&name).await.unwrap().map(|_| ())
    })
    .await;
    eventually("cluster Ready", WAIT, || async {
        harness::composition_ready(&env, "cluster")
            .await
            .then_some(())
    })
    .await;
    // The namespace goes: its ResourceSlices go with it, before enoki's cleanup runs.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.client.clone());
    namespaces
        .delete(&env.namespace, &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the cluster-scoped output is gone with its namespace",
        WAIT,
        || async { roles.get_opt(&name).await.unwrap().is_none().then_some(()) },
    )
    .await;
    eventually("the namespace is gone", WAIT, || async {
        namespaces
            .get_opt(&env.namespace)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(enoki.running(), "{}", enoki.logs());
}

/// `module` with a custom section appended: the same code under another digest.
fn variant(module: &[u8], i: u32) -> Vec<u8> {
    let name = b"enoki-variant";
    let payload = i.to_le_bytes();
    let size = 1 + name.len() + payload.len();
    let mut out = module.to_vec();
    out.push(0); // custom section
    out.push(u8::try_from(size).unwrap());
    out.push(u8::try_from(name.len()).unwrap());
    out.extend_from_slice(name);
    out.extend_from_slice(&payload);
    out
}

/// Peak resident set of a process, KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn eight_concurrent_large_compilations_stay_within_one_compile_budget() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let tenant = Tenant::of(&env).await;
    let (_registry, addr) = harness::start_registry();
    // The Go sample (3.4 MB, an estimated 78 MiB to compile), eight times under eight digests.
    let go = std::fs::read(harness::workspace_root().join("target/samples/go.wasm"))
        .expect("target/samples/go.wasm (hack/build-samples.sh)");
    let dir = harness::tempdir("compile-budget");
    let synths: Api<crds::Synthesizer> = Api::all(env.client.clone());
    let nonce = rand::random::<u32>();
    for i in 0..8u32 {
        let file = dir.join(format!("go-{i}.wasm"));
        std::fs::write(&file, variant(&go, nonce.wrapping_add(i))).unwrap();
        let reference = format!("{addr}/budget/go:{i}");
        let digest = harness::push_module(&file, &reference);
        let name = format!("{}-go-{i}", env.namespace);
        synths
            .patch(
                &name,
                &PatchParams::apply("platform").force(),
                &Patch::Apply(json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Synthesizer",
                    "metadata": {"name": name},
                    "spec": {"module": {"oci": format!("{reference}@{digest}")},
                             "refs": [{"key": "config", "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}}]}})),
            )
            .await
            .unwrap();
    }
    // 200 MiB of compile budget: two of these compile at a time, the others wait.
    let budget_kib = 200 * 1024;
    let mut enoki = Enoki::start_with(
        &env.namespace,
        &["--compile-memory-budget", "200Mi", "--concurrency", "8"],
    );
    // Settled before the compilations: its own caches and watches.
    still_serving(&env, &mut enoki, &synth, &tenant).await;
    let base = rss_kib(enoki.pid());
    for i in 0..8 {
        let synth = format!("{}-go-{i}", env.namespace);
        tenant
            .compose_with(
                &format!("go-{i}"),
                &synth,
                json!({"app": format!("go-{i}"), "port": "8080"}),
                json!({}),
            )
            .await
            .unwrap();
    }
    eventually(
        "every Go module compiled and synthesized",
        Duration::from_secs(240),
        || async {
            let mut done = 0;
            for i in 0..8 {
                if let Some((s, _, _)) =
                    harness::composition_condition(&env, &format!("go-{i}"), "Synthesized").await
                {
                    done += usize::from(s == "True");
                }
            }
            (done == 8).then_some(())
        },
    )
    .await;
    let peak = peak_rss_kib(enoki.pid());
    // Eight at once would need about 8 x 78 MiB; the budget allows 200 MiB of compiling,
    // plus the runs' memory (256 MiB each at most, the Go sample uses a few MiB).
    assert!(
        peak.saturating_sub(base) < budget_kib + 150 * 1024,
        "peak RSS {peak} KiB, {base} KiB before: more than the compile budget above it"
    );
    still_serving(&env, &mut enoki, &synth, &tenant).await;
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// The message of the `ModuleUnavailable` condition Composition `name` gets.
async fn module_unavailable(env: &TestEnv, name: &str) -> String {
    module_unavailable_within(env, name, WAIT * 3).await
}

/// [`module_unavailable`], waiting up to `wait`.
async fn module_unavailable_within(env: &TestEnv, name: &str, wait: Duration) -> String {
    eventually(&format!("{name}: ModuleUnavailable"), wait, || async {
        let (s, reason, msg) = harness::composition_condition(env, name, "Synthesized").await?;
        (s == "False" && reason == "ModuleUnavailable").then_some(msg)
    })
    .await
}

#[tokio::test]
async fn a_compile_bomb_costs_its_compile_process_not_the_controller() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let tenant = Tenant::of(&env).await;
    // The compilation is stopped by its memory limit, not by its timeout: on a loaded
    // machine Cranelift takes minutes to reach 384 MiB.
    let mut enoki = Enoki::start_with(
        &env.namespace,
        &[
            "--compile-memory-budget",
            "384Mi",
            "--compile-timeout",
            "15m",
        ],
    );
    still_serving(&env, &mut enoki, &synth, &tenant).await;
    let base = peak_rss_kib(enoki.pid());
    // 2.7 MB of branches, an estimated 62 MiB to compile (within the budget): Cranelift
    // needs 1.7 GB for it. Gzipped it fits a ConfigMap.
    let bomb = harness::wasm::module(2, 32, &harness::wasm::branchy_body(2_000), 0);
    let bomb_synth = install_synthesizer(&env, "bomb", &gzip(&bomb)).await;
    tenant.compose("bomb", &bomb_synth, json!([])).await;
    let msg = module_unavailable_within(&env, "bomb", WAIT * 10).await;
    // Its compile process had a quarter of the budget (more than the estimate), then the
    // whole budget on the retry.
    assert!(
        msg.contains(
            "needed more than the 402653184 bytes of memory its compile process could take (of \
             the compile memory budget of 402653184 bytes, --compile-memory-budget)"
        ),
        "{msg}"
    );
    let synths: Api<crds::Synthesizer> = Api::all(env.client.clone());
    let ready = synths.get(&bomb_synth).await.unwrap().status.unwrap();
    let ready = ready
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "ModuleUnavailable")
    );
    assert!(
        ready.message.contains("--compile-memory-budget"),
        "{ready:?}"
    );
    // The controller never held the compilation's memory.
    let peak = peak_rss_kib(enoki.pid());
    assert!(
        peak < base + 200 * 1024,
        "controller peak RSS {peak} KiB, {base} KiB peak before the bomb"
    );
    assert!(harness::wasm::compile_children(enoki.pid()).is_empty());
    still_serving(&env, &mut enoki, &synth, &tenant).await;
}

/// `module` with a custom section of `pad` zero bytes appended (its size as a LEB128).
fn padded(module: &[u8], pad: usize) -> Vec<u8> {
    let name = b"enoki-padding";
    let mut size = 1 + name.len() + pad;
    let mut out = module.to_vec();
    out.push(0); // custom section
    loop {
        let byte = u8::try_from(size & 0x7f).unwrap();
        size >>= 7;
        if size == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    }
    out.push(u8::try_from(name.len()).unwrap());
    out.extend_from_slice(name);
    out.resize(out.len() + pad, 0);
    out
}

#[tokio::test]
async fn a_large_pulled_module_goes_to_disk_and_never_into_the_controller() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let tenant = Tenant::of(&env).await;
    let (_registry, addr) = harness::start_registry();
    // The echo module with 64 MiB of padding: over the size that starts on the baseline tier,
    // so both tiers compile (in child processes) from the downloaded file.
    let dir = harness::tempdir("large-pull");
    let file = dir.join("large.wasm");
    std::fs::write(&file, padded(&echo_module(), 64 << 20)).unwrap();
    let reference = format!("{addr}/large/echo:v1");
    let digest = harness::push_module(&file, &reference);
    std::fs::remove_file(&file).unwrap();
    let large = format!("{}-large", env.namespace);
    let synths: Api<crds::Synthesizer> = Api::all(env.client.clone());
    synths
        .patch(
            &large,
            &PatchParams::apply("platform").force(),
            &Patch::Apply(json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Synthesizer",
                "metadata": {"name": large},
                "spec": {"module": {"oci": format!("{reference}@{digest}")},
                         "refs": [{"key": "config", "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}}]}})),
        )
        .await
        .unwrap();
    // `--namespace` (the harness's) leaves Synthesizers alone: the module is first fetched
    // for the Composition below, after `base`.
    let mut enoki = Enoki::start_with(&env.namespace, &[]);
    still_serving(&env, &mut enoki, &synth, &tenant).await;
    // The peak from here on, from the resident set now.
    std::fs::write(format!("/proc/{}/clear_refs", enoki.pid()), "5").unwrap();
    let base = peak_rss_kib(enoki.pid());
    assert!(base > 0, "the controller's VmHWM is readable");
    let item = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "from-large"},
        "data": {"k": "v"}});
    tenant.compose("large", &large, json!([item])).await;
    let cms: Api<ConfigMap> = env.api();
    eventually(
        "the large module's output applied",
        Duration::from_secs(120),
        || async { cms.get_opt("from-large").await.unwrap().map(|_| ()) },
    )
    .await;
    // Its 64 MiB streamed to a file the compile processes read: the controller's peak grew
    // by far less than the module.
    let peak = peak_rss_kib(enoki.pid());
    assert!(
        peak < base + 24 * 1024,
        "controller peak RSS {peak} KiB, {base} KiB before pulling a 64 MiB module"
    );
    // The download is gone once compiled (its private directory: no module cache here).
    let scratch = format!("enoki-compile-{}-", enoki.pid());
    let dirs: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&scratch))
        .map(|e| e.path())
        .collect();
    assert_eq!(
        dirs.len(),
        1,
        "the controller's private directory: {dirs:?}"
    );
    let downloads: Vec<_> = dirs
        .iter()
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
        .filter(|e| e.file_name().to_string_lossy().starts_with("download-"))
        .map(|e| e.path())
        .collect();
    assert!(downloads.is_empty(), "{downloads:?}");
    assert!(enoki.running(), "{}", enoki.logs());
    still_serving(&env, &mut enoki, &synth, &tenant).await;
}

#[tokio::test]
async fn a_compilation_past_the_compile_timeout_is_killed_and_the_controller_serves_on() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let tenant = Tenant::of(&env).await;
    let mut enoki = Enoki::start_with(&env.namespace, &["--compile-timeout", "2s"]);
    still_serving(&env, &mut enoki, &synth, &tenant).await;
    // About 14 s of Cranelift on two cores.
    let slow = harness::wasm::slow_module();
    let slow_synth = install_synthesizer(&env, "slow", &gzip(&slow)).await;
    tenant.compose("slow", &slow_synth, json!([])).await;
    let msg = module_unavailable(&env, "slow").await;
    assert!(
        msg.contains("did not finish within 2s (--compile-timeout); the compilation was stopped"),
        "{msg}"
    );
    // Killed and reaped: no compile process of the controller is left.
    assert!(
        harness::wasm::compile_children(enoki.pid()).is_empty(),
        "a compile process is still running"
    );
    still_serving(&env, &mut enoki, &synth, &tenant).await;
}

/// A Synthesizer the platform keeps for some namespaces (its `env` carries the platform's
/// settings; `spec.namespaceSelector` names who may use it): a tenant in another namespace
/// binds it and gets `Synthesized=False` reason `SynthesizerNotAllowed` — nothing synthesized,
/// no slice written, nothing applied, so the settings never reach the tenant's namespace. Once
/// the platform labels the namespace in, the same Composition converges.
#[tokio::test]
async fn a_synthesizer_kept_for_other_namespaces_cannot_be_used_to_read_its_settings() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "platform", &echo_module()).await;
    let allowed = format!("allowed-{:08x}", rand::random::<u32>());
    let synths: Api<crds::Synthesizer> = Api::all(env.client.clone());
    let restrict = json!({"spec": {
        "env": [{"name": "PLATFORM_TOKEN", "value": "platform-only"}],
        "namespaceSelector": {"matchLabels": {"enoki.dev/e2e-allowed": allowed}}}});
    synths
        .patch(&synth, &PatchParams::default(), &Patch::Merge(&restrict))
        .await
        .unwrap();
    let tenant = Tenant::of(&env).await;
    let mut enoki = Enoki::start(&env.namespace);
    // The echo module mirrors the named environment variables into a ConfigMap.
    tenant
        .compose_with(
            "steal",
            &synth,
            json!({"items": "[]", "env-mirror": "stolen", "env-vars": "PLATFORM_TOKEN"}),
            json!({}),
        )
        .await
        .unwrap();
    let (_, _, message) = eventually("SynthesizerNotAllowed", WAIT, || async {
        let c = harness::composition_condition(&env, "steal", "Synthesized").await?;
        (c.0 == "False" && c.1 == "SynthesizerNotAllowed").then_some(c)
    })
    .await;
    assert!(
        message.contains(&synth) && message.contains(&env.namespace),
        "{message}"
    );
    enoki.wait_pass(&env, "steal").await;
    let slices: Api<crds::ResourceSlice> = env.api();
    assert!(
        slices
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "no slice"
    );
    assert!(
        !harness::config_map_exists(&env, "stolen").await,
        "nothing applied"
    );
    let comps: Api<Composition> = env.api();
    let st = comps.get("steal").await.unwrap().status.unwrap();
    assert!(st.current_synthesis.is_none(), "nothing synthesized");

    // The platform labels the namespace in: the Composition may use it now.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.client.clone());
    let label = json!({"metadata": {"labels": {"enoki.dev/e2e-allowed": allowed}}});
    namespaces
        .patch(
            &env.namespace,
            &PatchParams::default(),
            &Patch::Merge(&label),
        )
        .await
        .unwrap();
    eventually("allowed once the namespace is labelled", WAIT, || async {
        harness::config_map_exists(&env, "stolen")
            .await
            .then_some(())
    })
    .await;
    still_serving(&env, &mut enoki, &synth, &tenant).await;
}
