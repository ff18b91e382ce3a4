//! `enoki diff` (and `enoki get`, `events`, `reconcile`, `suspend`, `resume`, `tree`) against the real control plane: what a Composition's next synthesis would
//! change (server-side dry run per object, prunes), exit code 1 when anything differs (2 on
//! an error), `-o json`, and nothing written — for a Composition in the cluster and for local files.
#![allow(clippy::unwrap_used)] // test code

use std::time::Duration;

use harness::{
    Enoki, TestEnv, apply_composition, composition_ready, echo_module, eventually, install_crds,
    install_synthesizer, set_echo_items, workspace_root,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use serde_json::json;

fn enoki(args: &[&str]) -> (i32, String, String) {
    let out = harness::enoki_cli(args);
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// The annotation `enoki reconcile` sets.
fn verbs_key() -> &'static str {
    crds::names::RECONCILE_REQUESTED_AT
}

fn cm(name: &str, x: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"x": x}})
}

#[tokio::test]
async fn diff_shows_creates_changes_and_prunes_and_writes_nothing() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let ns = env.namespace.clone();
    let synth = install_synthesizer(&env, "diff", &echo_module()).await;
    // `keep` is never pruned (its annotation), so dropping it is no prune.
    let mut keep = cm("keep", "1");
    keep["metadata"]["annotations"] = json!({"enoki.dev/prune": "disabled"});
    set_echo_items(&env, "items", &json!([cm("a", "1"), cm("b", "1"), keep])).await;
    apply_composition(&env, "app", &synth, "items", json!({})).await;
    let cms: Api<ConfigMap> = env.api();

    // Nothing applied yet: the objects are new; the dry run creates nothing.
    let (code, out, err) = enoki(&["diff", "app", "-n", &ns, "--as-caller"]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains(&format!("+++ enoki    v1 ConfigMap {ns}/a")),
        "{out}"
    );
    assert!(out.contains("+  x: \"1\""), "{out}");
    assert!(out.contains("# 3 changed, 0 unchanged, 0 pruned"), "{out}");
    assert!(
        cms.get_opt("a").await.unwrap().is_none(),
        "a dry run wrote a"
    );

    // Converged: no differences, exit 0.
    let mut enoki_run = Enoki::start(&ns);
    eventually(
        "the Composition is Ready",
        Duration::from_secs(60),
        || async { composition_ready(&env, "app").await.then_some(()) },
    )
    .await;
    enoki_run.stop();
    let (code, out, err) = enoki(&["diff", "app", "-n", &ns, "--as-caller"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("# 0 changed, 3 unchanged, 0 pruned"), "{out}");

    // The input changes: a changes, b is dropped (a prune), keep is dropped (kept), c is new,
    // and a CRD with its first custom resource (created before any dry run can see them).
    let group = format!("{ns}.diff.example");
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}});
    let widget = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": {"name": "w", "namespace": ns}, "spec": {"size": 3}});
    set_echo_items(
        &env,
        "items",
        &json!([cm("a", "2"), cm("c", "1"), crd, widget]),
    )
    .await;
    let (code, out, err) = enoki(&["diff", "app", "-n", &ns, "--as-caller"]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains(&format!("+++ enoki    {group}/v1 Widget {ns}/w")),
        "{out}"
    );
    assert!(out.contains("# 4 changed, 0 unchanged, 1 pruned"), "{out}");
    set_echo_items(&env, "items", &json!([cm("a", "2"), cm("c", "1")])).await;
    let (code, out, err) = enoki(&["diff", "app", "-n", &ns, "--as-caller"]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.contains("-  x: \"1\"\n+  x: \"2\""), "{out}");
    assert!(
        out.contains(&format!("--- live     v1 ConfigMap {ns}/b")),
        "{out}"
    );
    assert!(
        out.contains(&format!("+++ enoki    v1 ConfigMap {ns}/c")),
        "{out}"
    );
    assert!(out.contains("# 2 changed, 0 unchanged, 1 pruned"), "{out}");
    // The same as JSON, for scripts: the counts and each resource's change with its diff.
    let (code, out, err) = enoki(&["diff", "app", "-n", &ns, "--as-caller", "-o", "json"]);
    assert_eq!(code, 1, "{out}\n{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (report["differs"].clone(), report["changed"].clone()),
        (json!(true), json!(2))
    );
    assert_eq!(report["pruned"], 1, "{report}");
    let change = |name: &str| {
        let label = format!("v1 ConfigMap {ns}/{name}");
        let r = report["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == label);
        r.map(|r| {
            (
                r["change"].as_str().unwrap().to_string(),
                r["diff"].as_str().unwrap_or("").to_string(),
            )
        })
    };
    let (a_change, a_diff) = change("a").unwrap();
    assert_eq!(a_change, "changed");
    assert!(a_diff.contains("+  x: \"2\""), "{a_diff}");
    assert_eq!(change("b").unwrap().0, "pruned");
    assert_eq!(change("c").unwrap().0, "changed");
    let a = cms.get("a").await.unwrap();
    assert_eq!(a.data.unwrap()["x"], "1", "the dry run changed nothing");
    assert!(cms.get_opt("b").await.unwrap().is_some());
    assert!(cms.get_opt("c").await.unwrap().is_none());

    // Local files: the same synthesizer over a ConfigMap file, for the same Composition.
    let dir = std::env::temp_dir().join(format!("enoki-diff-{ns}"));
    std::fs::create_dir_all(&dir).unwrap();
    let comp = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
        "metadata": {"name": "app", "namespace": ns}, "spec": {"synthesizer": {"name": synth}}});
    std::fs::write(dir.join("comp.yaml"), comp.to_string()).unwrap();
    let input = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "items", "namespace": ns},
        "data": {"items": json!([cm("a", "1"), cm("b", "1")]).to_string()}});
    std::fs::write(dir.join("items.json"), input.to_string()).unwrap();
    let module = workspace_root().join("target/wasm32-wasip1/release/echo.wasm");
    let (code, out, err) = enoki(&[
        "diff",
        "--module",
        module.to_str().unwrap(),
        "-c",
        dir.join("comp.yaml").to_str().unwrap(),
        "-i",
        &format!("config={}", dir.join("items.json").display()),
        "--as-caller",
    ]);
    assert_eq!(code, 0, "the files say what is applied: {out}\n{err}");
    assert!(out.contains("# 0 changed, 2 unchanged, 0 pruned"), "{out}");

    // A Composition that does not exist is an error naming it: exit code 2, as kubectl's.
    let (code, _, err) = enoki(&["diff", "nope", "-n", &ns, "--as-caller"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("Composition {ns}/nope")), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn get_and_events_show_what_kubectl_users_expect() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let ns = env.namespace.clone();
    let synth = install_synthesizer(&env, "verbs", &echo_module()).await;
    set_echo_items(&env, "items", &json!([cm("a", "1")])).await;
    apply_composition(&env, "app", &synth, "items", json!({})).await;
    // A second Composition whose module prints what is not a ResourceList: a failed synthesis.
    let broken = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "raw"},
        "data": {"raw": "not json"}});
    let pp = kube::api::PatchParams::apply("test").force();
    let cms: Api<ConfigMap> = env.api();
    cms.patch("raw", &pp, &kube::api::Patch::Apply(&broken))
        .await
        .unwrap();
    apply_composition(&env, "broken", &synth, "raw", json!({})).await;
    let _enoki = Enoki::start(&ns);
    harness::wait_ready(&env, "app").await;
    let (code, out, err) = enoki(&["get", "compositions", "-n", &ns]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("NAME     SYNTHESIZER"), "{out}");
    let app = lines
        .iter()
        .find(|l| l.starts_with("app "))
        .expect("app listed");
    assert!(
        app.contains(&synth) && app.contains("Ready") && app.contains("True"),
        "{out}"
    );
    assert!(lines.iter().any(|l| l.starts_with("broken ")), "{out}");
    // Wide adds the synthesis; -A the namespace; -o json a kubectl List.
    let (_, wide, _) = enoki(&["get", "comp", "app", "-n", &ns, "-o", "wide"]);
    assert!(wide.lines().next().unwrap().contains("SYNTHESIS"), "{wide}");
    let (_, all, _) = enoki(&["get", "compositions", "-A"]);
    assert!(
        all.lines()
            .any(|l| l.starts_with(&ns) && l.contains(" app ")),
        "{all}"
    );
    let (_, listed, _) = enoki(&["get", "compositions", "-n", &ns, "-o", "json"]);
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed["kind"], "List");
    assert_eq!(listed["items"].as_array().unwrap().len(), 2);
    assert_eq!(listed["items"][0]["kind"], "Composition");
    let (_, synths, _) = enoki(&["get", "synthesizers", &synth]);
    assert!(
        synths.contains(&synth) && synths.contains("configMap"),
        "{synths}"
    );
    let (code, _, err) = enoki(&["get", "symphonies", "nope", "-n", &ns]);
    assert_ne!(code, 0);
    assert!(
        err.contains("Symphony nope") && err.contains("(NotFound, 404)"),
        "{err}"
    );
    // As kubectl: one object by name is the object; none found says so on stderr; a name
    // with -A is refused.
    let (_, one, _) = enoki(&["get", "comp", "app", "-n", &ns, "-o", "json"]);
    let one: serde_json::Value = serde_json::from_str(&one).unwrap();
    assert_eq!(
        (one["kind"].as_str(), one["metadata"]["name"].as_str()),
        (Some("Composition"), Some("app"))
    );
    let (code, out, err) = enoki(&["get", "symphonies", "-n", &ns]);
    assert_eq!((code, out.as_str()), (0, ""));
    assert!(
        err.contains(&format!("No resources found in {ns} namespace.")),
        "{err}"
    );
    let (code, _, err) = enoki(&["get", "comp", "app", "-A"]);
    assert_eq!(code, 1);
    assert!(err.contains("across all namespaces"), "{err}");
    let (code, _, err) = enoki(&["events", "nope", "-n", &ns]);
    assert_eq!(code, 1);
    assert!(err.contains(&format!("Composition {ns}/nope")), "{err}");
    // A nudge, then a new synthesis, each waited for until Ready.
    let before = env.api::<crds::Composition>().get("app").await.unwrap();
    let uuid = |c: &crds::Composition| {
        c.status
            .as_ref()
            .and_then(|s| s.current_synthesis.as_ref())
            .map(|s| s.uuid.clone())
    };
    let (code, out, err) = enoki(&["reconcile", "app", "-n", &ns]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(&format!("Composition {ns}/app is Ready")),
        "{out}"
    );
    // The pass answered the request (Flux's lastHandledReconcileAt).
    let answered = env.api::<crds::Composition>().get("app").await.unwrap();
    let asked = answered.metadata.annotations.as_ref().unwrap()[verbs_key()].clone();
    assert_eq!(
        answered.status.unwrap().last_handled_reconcile_at,
        Some(asked)
    );
    // A Composition whose synthesis fails: the answered pass is stalled, exit 1.
    let (code, _, err) = enoki(&["reconcile", "broken", "-n", &ns, "--timeout", "60s"]);
    assert_eq!(code, 1);
    assert!(err.contains("stalled"), "{err}");
    let (code, out, err) = enoki(&["reconcile", "app", "-n", &ns, "--with-synthesis"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let after = env.api::<crds::Composition>().get("app").await.unwrap();
    assert_ne!(uuid(&before), uuid(&after), "a new synthesis: {out}");
    assert!(out.contains(&uuid(&after).unwrap()[..8]), "{out}");
    let (code, _, err) = enoki(&["reconcile", "nope", "-n", &ns, "--timeout", "5s"]);
    assert_eq!(code, 1);
    assert!(err.contains(&format!("Composition {ns}/nope")), "{err}");
    // The failed synthesis's Warning, with kubectl's columns.
    let events = eventually(
        "the failed synthesis's Event",
        Duration::from_secs(60),
        || async {
            let (_, out, _) = enoki(&["events", "broken", "-n", &ns]);
            out.contains("Warning").then_some(out)
        },
    )
    .await;
    assert!(events.starts_with("LAST SEEN   TYPE"), "{events}");
    let (_, none, _) = enoki(&["events", "app", "-n", &ns, "-o", "json"]);
    let none: serde_json::Value = serde_json::from_str(&none).unwrap();
    assert!(
        none["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["type"] != "Warning"),
        "{none}"
    );
}

/// `enoki suspend` stops a Composition (no synthesis, no drift reverted, nothing recreated),
/// says so in its status, refuses `enoki reconcile`; `enoki resume` brings it back to Ready
/// with what changed meanwhile; `enoki tree` prints its outputs by group, a Composition among
/// them expanded.
#[tokio::test]
async fn suspend_resume_and_tree_act_as_flux_users_expect() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let ns = env.namespace.clone();
    let synth = install_synthesizer(&env, "suspend", &echo_module()).await;
    set_echo_items(&env, "inner-items", &json!([cm("leaf", "1")])).await;
    let inner = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
        "metadata": {"name": "inner", "annotations": {"enoki.dev/readiness-group": "1"}},
        "spec": {"synthesizer": {"name": synth},
                 "bindings": [{"key": "config", "resource": {"name": "inner-items"}}]}});
    set_echo_items(&env, "items", &json!([cm("a", "1"), inner])).await;
    apply_composition(&env, "app", &synth, "items", json!({})).await;
    let enoki_process = Enoki::start(&ns);
    harness::wait_ready(&env, "app").await;
    harness::wait_ready(&env, "inner").await;
    let (code, tree, err) = enoki(&["tree", "app", "-n", &ns]);
    assert_eq!(code, 0, "{err}");
    assert!(
        tree.starts_with(&format!(
            "Composition {ns}/app (synthesizer {synth}): Ready"
        )),
        "{tree}"
    );
    for line in [
        // ConfigMaps default to group -100 (as in Eno).
        format!("├── group -100\n│   └── ConfigMap {ns}/a  ready"),
        format!("└── group 1\n    └── Composition {ns}/inner  ready"),
        format!("        └── group -100\n            └── ConfigMap {ns}/leaf  ready"),
    ] {
        assert!(tree.contains(&line), "{line}\nin:\n{tree}");
    }
    let (_, as_json, _) = enoki(&["tree", "app", "-n", &ns, "-o", "json"]);
    let as_json: serde_json::Value = serde_json::from_str(&as_json).unwrap();
    assert_eq!(as_json["children"][0]["name"], "inner");
    assert_eq!(as_json["children"][0]["resources"][0]["state"], "ready");

    let comps = env.api::<crds::Composition>();
    let applied = comps.get("app").await.unwrap().status.unwrap();
    let (code, out, err) = enoki(&["suspend", "app", "-n", &ns]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(&format!("Composition {ns}/app is suspended")),
        "{out}"
    );
    // The status keeps speaking for the applied synthesis; `Suspended` for the new spec.
    let held = comps.get("app").await.unwrap();
    let st = held.status.clone().unwrap();
    assert_eq!(st.observed_generation, applied.observed_generation);
    let marked = st
        .conditions
        .iter()
        .find(|c| c.type_ == "Suspended")
        .unwrap();
    assert_eq!(marked.observed_generation, held.metadata.generation);
    let (_, listed, _) = enoki(&["get", "compositions", "-n", &ns]);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("app ") && l.contains("Suspended")),
        "{listed}"
    );
    // Suspended: a deleted output stays deleted, an input change is not synthesized.
    let cms: Api<ConfigMap> = env.api();
    cms.delete("a", &Default::default()).await.unwrap();
    set_echo_items(&env, "items", &json!([cm("a", "2"), cm("b", "1")])).await;
    enoki_process.wait_pass(&env, "app").await;
    assert!(
        cms.get_opt("a").await.unwrap().is_none(),
        "a suspended Composition recreated a"
    );
    assert!(
        cms.get_opt("b").await.unwrap().is_none(),
        "a suspended Composition synthesized"
    );
    let (_, status, _) = enoki(&["status", "app", "-n", &ns]);
    assert!(
        status.contains("next synthesis: suspended: Suspended: spec.suspend is true"),
        "{status}"
    );
    let (code, _, err) = enoki(&["reconcile", "app", "-n", &ns]);
    assert_eq!(code, 1);
    assert!(err.contains("is suspended"), "{err}");

    let (code, out, err) = enoki(&["resume", "app", "-n", &ns]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("is resumed and Ready"), "{out}");
    let a = cms.get("a").await.unwrap();
    assert_eq!(a.data.unwrap()["x"], "2");
    assert!(cms.get_opt("b").await.unwrap().is_some());
    // The suspended marks are gone; `inner` (no longer emitted) was pruned.
    harness::eventually("inner pruned", Duration::from_secs(60), || async {
        comps
            .get_opt("inner")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let comp = comps.get("app").await.unwrap();
    let st = comp.status.unwrap();
    assert!(
        st.conditions.iter().all(|c| c.type_ != "Suspended"),
        "{:?}",
        st.conditions
    );
    assert_eq!(st.simplified.unwrap().status, "Ready");
}
