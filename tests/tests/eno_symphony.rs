//! Eno's Symphony rules against the real control plane: deleting a Symphony deletes nothing its
//! Compositions applied, variation labels and annotations move between Compositions in two
//! phases, and a `dependsOn` cycle keeps what exists. Each test names the Eno document or code
//! it restates (Eno's repository: github.com/Azure/eno; read, not copied).
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crds::{Composition, Symphony};
use futures::StreamExt;
use harness::{
    Enoki, TestEnv, config_map, echo_module, eventually, install_crds, install_synthesizer,
    set_echo_items,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

async fn apply_symphony(env: &TestEnv, variations: Value) {
    let sym = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Symphony",
        "metadata": {"name": "stack"}, "spec": {"variations": variations}});
    env.api::<Symphony>()
        .patch(
            "stack",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&sym),
        )
        .await
        .unwrap();
}

async fn wait_symphony_ready(env: &TestEnv) {
    let syms: Api<Symphony> = env.api();
    eventually("the Symphony to be ready", WAIT, || async {
        syms.get("stack").await.unwrap().status?.ready.map(|_| ())
    })
    .await;
}

/// A namespace with two echo Synthesizers, `a` and `b`, each emitting one ConfigMap
/// (`<synth>-thing`) from its own items ConfigMap (`<synth>-items`).
async fn two_synthesizers() -> (TestEnv, String, String) {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let a = install_synthesizer(&env, "a", &echo_module()).await;
    let b = install_synthesizer(&env, "b", &echo_module()).await;
    for s in [&a, &b] {
        let items = json!([config_map(&format!("{s}-thing"), json!({}), json!({}))]);
        set_echo_items(&env, &format!("{s}-items"), &items).await;
    }
    (env, a, b)
}

/// A variation of synthesizer `synth` bound to its own items ConfigMap.
#[allow(clippy::needless_pass_by_value)] // called with `json!` temporaries
fn variation(synth: &str, annotations: Value) -> Value {
    json!({"synthesizer": {"name": synth}, "annotations": annotations,
        "bindings": [{"key": "config", "resource": {"name": format!("{synth}-items")}}]})
}

/// Eno `internal/controllers/reconciliation/controller.go` (a Composition labelled
/// `eno.azure.io/symphony-deleting` deletes nothing) and `docs/symphony.md` ("Deleting a
/// symphony … short circuiting the finalizer"): every output survives, whatever its own
/// deletion strategy, deletion group or override says.
#[tokio::test]
async fn deleting_a_symphony_deletes_no_output_whatever_the_resource_says() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let override_fg = json!([{"path": "self.metadata.annotations['eno.azure.io/deletion-strategy']",
        "value": "foreground", "condition": "composition.metadata.deletionTimestamp != null"}]);
    let items = json!([
        config_map("plain", json!({}), json!({})),
        config_map(
            "fg",
            json!({"eno.azure.io/deletion-strategy": "foreground"}),
            json!({})
        ),
        config_map(
            "bg",
            json!({"enoki.dev/deletion-strategy": "delete"}),
            json!({})
        ),
        config_map(
            "grouped",
            json!({"eno.azure.io/deletion-group": "1"}),
            json!({})
        ),
        config_map(
            "ovr",
            json!({"eno.azure.io/overrides": override_fg.to_string()}),
            json!({})
        ),
    ]);
    set_echo_items(&env, &format!("{synth}-items"), &items).await;
    apply_symphony(&env, json!([variation(&synth, json!({}))])).await;
    let _enoki = Enoki::start(&env.namespace);
    wait_symphony_ready(&env).await;
    let since = harness::now_rfc3339();
    let syms: Api<Symphony> = env.api();
    syms.delete("stack", &DeleteParams::default())
        .await
        .unwrap();
    let comps: Api<Composition> = env.api();
    eventually(
        "the Symphony and its Composition to be gone",
        WAIT,
        || async {
            let gone = syms.get_opt("stack").await.unwrap().is_none()
                && comps
                    .list(&ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .is_empty();
            gone.then_some(())
        },
    )
    .await;
    for name in ["plain", "fg", "bg", "grouped", "ovr"] {
        let cm = env.api::<ConfigMap>().get(name).await.unwrap();
        assert!(
            cm.metadata.deletion_timestamp.is_none(),
            "{name} is being deleted"
        );
    }
    harness::audit_barrier(&env).await;
    let deletes: Vec<_> = harness::audited_requests(&env.namespace, &since)
        .into_iter()
        .filter(|r| r.by_enoki() && r.verb == "delete" && r.resource == "configmaps")
        .collect();
    assert!(deletes.is_empty(), "enoki deleted outputs: {deletes:?}");
}

/// Records, from a watch of the namespace's Compositions, after each event, how many carry
/// annotation `key` = `"true"`.
fn record_holders(env: &TestEnv, rv: String, key: &'static str) -> Arc<Mutex<Vec<usize>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (comps, out) = (env.api::<Composition>(), seen.clone());
    tokio::spawn(async move {
        let mut holders = std::collections::BTreeMap::new();
        let mut stream = comps
            .watch(&WatchParams::default(), &rv)
            .await
            .unwrap()
            .boxed();
        while let Some(Ok(event)) = stream.next().await {
            let (c, present) = match event {
                WatchEvent::Added(c) | WatchEvent::Modified(c) => (c, true),
                WatchEvent::Deleted(c) => (c, false),
                _ => continue,
            };
            let holds = present && c.annotations().get(key).is_some_and(|v| v == "true");
            holders.insert(c.name_any(), holds);
            out.lock()
                .unwrap()
                .push(holders.values().filter(|h| **h).count());
        }
    });
    seen
}

/// Eno `docs/symphony.md` (labels and annotations are merged additively; a `""` value
/// removes one; "two-phase commit": what is removed is pruned from every Composition before
/// anything is set) and `internal/controllers/symphony/controller.go`
/// (`TestPruneAnnotationsOrdering`, the gaining variation listed first): an annotation moved
/// from one variation to another is never on both Compositions, both ways; what others set
/// stays, unless the variation names it with `""`.
#[tokio::test]
async fn an_annotation_moves_between_compositions_without_being_on_both() {
    let (env, a, b) = two_synthesizers().await;
    const KEY: &str = "migration/owner";
    apply_symphony(
        &env,
        json!([
            variation(&b, json!({KEY: ""})),
            variation(&a, json!({KEY: "true"}))
        ]),
    )
    .await;
    let _enoki = Enoki::start(&env.namespace);
    wait_symphony_ready(&env).await;
    let comps: Api<Composition> = env.api();
    let (ca, cb) = (format!("stack-{a}"), format!("stack-{b}"));
    // Others' keys: one to keep on A, one B's variation removes with "".
    for (name, annotations) in [
        (&ca, json!({"ops/note": "keep"})),
        (&cb, json!({"x/flag": "1"})),
    ] {
        let patch = json!({"metadata": {"annotations": annotations}});
        comps
            .patch(
                name,
                &PatchParams::apply("ops"),
                &Patch::Apply(&json!({
            "apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
            "metadata": {"name": name, "annotations": patch["metadata"]["annotations"]}})),
            )
            .await
            .unwrap();
    }
    for (gain, lose, extra) in [(&b, &a, json!({"x/flag": ""})), (&a, &b, json!({}))] {
        let list = comps.list(&ListParams::default()).await.unwrap();
        let seen = record_holders(&env, list.metadata.resource_version.unwrap(), KEY);
        let mut gaining = json!({KEY: "true"});
        gaining
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        apply_symphony(
            &env,
            json!([variation(gain, gaining), variation(lose, json!({KEY: ""}))]),
        )
        .await;
        let (g, l) = (format!("stack-{gain}"), format!("stack-{lose}"));
        eventually("the annotation to move", WAIT, || async {
            let g = comps.get(&g).await.unwrap();
            let l = comps.get(&l).await.unwrap();
            (g.annotations().get(KEY).is_some_and(|v| v == "true")
                && !l.annotations().contains_key(KEY))
            .then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let counts = seen.lock().unwrap().clone();
        assert!(
            counts.iter().all(|n| *n <= 1),
            "on two Compositions at once: {counts:?}"
        );
    }
    let a_comp = comps.get(&ca).await.unwrap();
    assert_eq!(
        a_comp.annotations().get("ops/note").map(String::as_str),
        Some("keep")
    );
    let b_comp = comps.get(&cb).await.unwrap();
    assert!(
        !b_comp.annotations().contains_key("x/flag"),
        "\"\" removes what others set"
    );
}

/// Eno `internal/controllers/symphony/controller.go` (`reconcileReverse` keeps a Composition
/// whose synthesizer is still in a variation; a cycle only stops creating and updating): a
/// `dependsOn` cycle deletes nothing.
#[tokio::test]
async fn a_dependency_cycle_keeps_the_existing_compositions() {
    let (env, a, b) = two_synthesizers().await;
    apply_symphony(
        &env,
        json!([variation(&a, json!({})), variation(&b, json!({}))]),
    )
    .await;
    let _enoki = Enoki::start(&env.namespace);
    wait_symphony_ready(&env).await;
    let mut va = variation(&a, json!({}));
    va["dependsOn"] = json!([{"synthesizer": b}]);
    let mut vb = variation(&b, json!({}));
    vb["dependsOn"] = json!([{"synthesizer": a}]);
    apply_symphony(&env, json!([va, vb])).await;
    let syms: Api<Symphony> = env.api();
    let generation = syms.get("stack").await.unwrap().metadata.generation;
    harness::wait_event(&env, "CircularDependency on the Symphony", |e| {
        e.reason.as_deref() == Some("CircularDependency")
    })
    .await;
    eventually(
        "the Symphony's status to observe the cycle",
        WAIT,
        || async {
            let st = syms.get("stack").await.unwrap().status?;
            (st.observed_generation == generation).then_some(())
        },
    )
    .await;
    let comps: Api<Composition> = env.api();
    for s in [&a, &b] {
        let c = comps.get(&format!("stack-{s}")).await.unwrap();
        assert!(
            c.metadata.deletion_timestamp.is_none(),
            "stack-{s} is being deleted"
        );
        assert!(harness::config_map_exists(&env, &format!("{s}-thing")).await);
    }
}
