//! Seeing why a Composition waits, on the real API server: `enoki status` (text, JSON, dot,
//! SVG) on a Composition held in group 1 by a readiness check that is false, and on one whose
//! next synthesis is blocked; the namespace from the kubeconfig context and `--context`; the
//! Ready message naming the blocking resource; and specs the API server refuses at admission
//! (the CRDs' validations) with their messages.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// Three ConfigMaps, one per readiness group; the one in group 1 waits for `data.ok == 'yes'`.
fn items(ok: &str) -> Value {
    let cm = |name: &str, group: i64, extra: Value| {
        let mut annotations = json!({"enoki.dev/readiness-group": group.to_string()});
        if let (Some(a), Some(e)) = (annotations.as_object_mut(), extra.as_object()) {
            a.extend(e.clone());
        }
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "annotations": annotations}, "data": {"ok": ok}})
    };
    json!([
        cm("first", 0, json!({})),
        cm(
            "gate",
            1,
            json!({"enoki.dev/readiness": "self.data.ok == 'yes'"})
        ),
        cm("after", 2, json!({})),
    ])
}

fn status(args: &[&str]) -> (i32, String) {
    let mut all = vec!["status"];
    all.extend_from_slice(args);
    harness::enoki_cli_text(&all)
}

fn states(view: &Value) -> Vec<(String, String)> {
    view["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A copy of the test kubeconfig whose current context's namespace is `ns`, with a second
/// context `other` (same cluster and user) whose namespace is `other_ns`.
fn kubeconfig_with_namespaces(ns: &str, other_ns: &str) -> (harness::TempDir, std::path::PathBuf) {
    let dir = harness::tempdir("kubeconfig");
    let path = dir.join("config");
    std::fs::copy(harness::kubeconfig_path(), &path).unwrap();
    let file = path.to_string_lossy().to_string();
    let (ok, out) = harness::kubectl(
        &[
            "config",
            "--kubeconfig",
            &file,
            "set-context",
            "--current",
            "--namespace",
            ns,
        ],
        None,
    );
    assert!(ok, "{out}");
    let (ok, names) = harness::kubectl(
        &[
            "config",
            "--kubeconfig",
            &file,
            "view",
            "-o",
            "jsonpath={.contexts[0].context.cluster} {.contexts[0].context.user}",
        ],
        None,
    );
    assert!(ok, "{names}");
    let (cluster, user) = names.trim().split_once(' ').unwrap();
    let (ok, out) = harness::kubectl(
        &[
            "config",
            "--kubeconfig",
            &file,
            "set-context",
            "other",
            "--cluster",
            cluster,
            "--user",
            user,
            "--namespace",
            other_ns,
        ],
        None,
    );
    assert!(ok, "{out}");
    (dir, path)
}

/// Group 0 ready, group 1 waiting on its check, group 2 deferred — in JSON and in text — and the
/// Ready condition naming the blocking resource.
async fn the_view_names_the_waiting_check(env: &harness::TestEnv, synth: &str) {
    let ns = env.namespace.as_str();
    // Group 0 is ready, group 1 waits on its check, group 2 is not applied.
    let view: Value = harness::eventually(
        "group 1 waits on its check",
        Duration::from_secs(60),
        || async {
            let (code, text) = status(&["gated", "-n", ns, "-o", "json"]);
            let v: Value = serde_json::from_str(&text).ok()?;
            let s = states(&v);
            (code == 0 && s.get(1).is_some_and(|(_, st)| st == "waiting")).then_some(v)
        },
    )
    .await;
    assert_eq!(
        states(&view),
        vec![
            ("first".to_string(), "ready".to_string()),
            ("gate".to_string(), "waiting".to_string()),
            ("after".to_string(), "deferred".to_string()),
        ],
        "{view:#}"
    );
    assert_eq!(
        view["resources"][1]["unsatisfied"],
        json!(["default: self.data.ok == 'yes'"])
    );
    assert_eq!(view["resources"][2]["group"], 2);
    assert_eq!(
        view["resources"][2]["waitsOn"], 1,
        "deferred behind group 1"
    );
    assert_eq!(view["ready"], false);
    assert_eq!(view["next"]["state"], "up-to-date");

    let (code, text) = status(&["gated", "-n", ns]);
    assert_eq!(code, 0, "{text}");
    for line in [
        format!("Composition {ns}/gated (synthesizer {synth}): not Ready"),
        "next synthesis: up-to-date".to_string(),
        "group 1".to_string(),
        format!("ConfigMap {ns}/gate"),
        "waiting on default: self.data.ok == 'yes'".to_string(),
        "deferred: group 1 is not ready".to_string(),
    ] {
        assert!(text.contains(&line), "missing {line:?} in:\n{text}");
    }
    assert!(
        !text.contains('\u{1b}'),
        "no colour when stdout is not a terminal"
    );
    // The Ready condition names the blocking resource too (kubectl shows it).
    let (_, _, message) = harness::composition_condition(env, "gated", "Ready")
        .await
        .unwrap();
    assert!(message.contains("gate"), "{message}");
}

/// The DAG as Graphviz `dot`, and drawn as SVG.
fn the_graph_is_drawn(ns: &str) {
    // The DAG as Graphviz, and drawn as SVG.
    let (code, dot) = status(&["gated", "-n", ns, "-o", "dot"]);
    assert_eq!(code, 0, "{dot}");
    assert!(dot.starts_with("digraph") && dot.contains("cluster_1") && dot.contains("#ffe08a"));
    let svg_dir = harness::tempdir("status-svg");
    let svg = svg_dir.join("gated.svg");
    let (code, out) = status(&["gated", "-n", ns, "--svg", &svg.to_string_lossy()]);
    assert_eq!(code, 0, "{out}");
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.contains("<svg") && drawn.contains("gate") && drawn.contains("#ffe08a"));
}

/// The namespace from the kubeconfig context when -n is absent; --context picks another.
fn the_namespace_comes_from_the_context(ns: &str) {
    // The namespace comes from the kubeconfig context when -n is absent; --context picks one.
    let (_dir, kubeconfig) = kubeconfig_with_namespaces(ns, "kube-public");
    let file = kubeconfig.to_string_lossy().to_string();
    let (code, text) = status(&["gated", "--kubeconfig", &file]);
    assert_eq!(code, 0, "the context's namespace: {text}");
    assert!(text.contains(&format!("{ns}/gated")));
    let (code, text) = status(&["gated", "--kubeconfig", &file, "--context", "other"]);
    assert_ne!(code, 0, "--context other: its namespace is kube-public");
    assert!(
        text.contains("Composition kube-public/gated does not exist"),
        "{text}"
    );
    let (code, text) = status(&["gated", "--kubeconfig", &file, "--context", "nowhere"]);
    assert_ne!(code, 0);
    assert!(text.contains("nowhere"), "{text}");
    let (code, text) = status(&["missing", "-n", ns]);
    assert_ne!(code, 0);
    assert!(
        text.contains(&format!("Composition {ns}/missing does not exist")),
        "{text}"
    );
}

/// `edit` sees everything; `view` the conditions and the next synthesis, not the slices.
async fn tenants_see_what_their_roles_allow(ns: &str) {
    // A tenant with `edit` in the namespace sees everything; one with `view` sees the
    // conditions and the next synthesis, not the slices (they hold rendered Secrets).
    harness::grant_tenant_edit(ns);
    harness::eventually(
        "tenant-a (edit) sees the resources",
        Duration::from_secs(60),
        || async {
            let (code, text) = status(&["gated", "-n", ns, "--context", "tenant-a", "-o", "json"]);
            let v: Value = serde_json::from_str(&text).ok()?;
            (code == 0 && states(&v).len() == 3).then_some(())
        },
    )
    .await;
    let binding = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: tenant-b-view, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}}\nsubjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: tenant-b}}]\n"
    );
    let (ok, out) = harness::kubectl(&["apply", "-f", "-"], Some(binding.as_bytes()));
    assert!(ok, "{out}");
    let text = harness::eventually(
        "tenant-b (view) sees the conditions",
        Duration::from_secs(60),
        || async {
            let (code, text) = status(&["gated", "-n", ns, "--context", "tenant-b"]);
            (code == 0).then_some(text)
        },
    )
    .await;
    assert!(
        text.contains("reading ResourceSlices is forbidden") && !text.contains("group 1"),
        "{text}"
    );
}

/// The next synthesis blocked (its Synthesizer does not exist): the current synthesis is still
/// shown and the blocker is named.
async fn a_blocked_next_synthesis_is_named(env: &harness::TestEnv) {
    let ns = env.namespace.as_str();
    // The next synthesis blocked: the Synthesizer it names does not exist. The current
    // synthesis is still shown, and the blocker is named.
    let comps: Api<crds::Composition> = env.api();
    comps
        .patch(
            "gated",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"synthesizer": {"name": "no-such-synthesizer"}}})),
        )
        .await
        .unwrap();
    let view: Value = harness::eventually(
        "the next synthesis is blocked",
        Duration::from_secs(60),
        || async {
            let (_, text) = status(&["gated", "-n", ns, "-o", "json"]);
            let v: Value = serde_json::from_str(&text).ok()?;
            (v["next"]["state"] == "blocked").then_some(v)
        },
    )
    .await;
    assert_eq!(view["next"]["reason"], "SynthesizerNotFound", "{view:#}");
    assert_eq!(
        states(&view).len(),
        3,
        "the current synthesis is still shown"
    );
    let (_, text) = status(&["gated", "-n", ns]);
    assert!(
        text.contains("next synthesis: blocked: SynthesizerNotFound"),
        "{text}"
    );
}

#[tokio::test]
async fn enoki_status_names_the_failing_check_and_what_blocks_the_next_synthesis() {
    let env = harness::TestEnv::new().await;
    harness::install_crds(&env.client).await;
    let synth = harness::install_synthesizer(&env, "echo", &harness::echo_module()).await;
    harness::set_echo_items(&env, "cfg", &items("no")).await;
    harness::apply_composition(&env, "gated", &synth, "cfg", json!({})).await;
    let _enoki = harness::Enoki::start(&env.namespace);
    the_view_names_the_waiting_check(&env, &synth).await;
    the_graph_is_drawn(&env.namespace);
    the_namespace_comes_from_the_context(&env.namespace);
    tenants_see_what_their_roles_allow(&env.namespace).await;
    a_blocked_next_synthesis_is_named(&env).await;
}

/// What admission refuses (CEL `x-kubernetes-validations`, patterns, list-map keys), with the
/// message the API server returns naming the field.
#[tokio::test]
async fn invalid_specs_are_refused_by_the_api_server_with_their_message() {
    let env = harness::TestEnv::new().await;
    harness::install_crds(&env.client).await;
    let synths: Api<crds::Synthesizer> = Api::all(env.client.clone());
    let digest = "a".repeat(64);
    let cases = [
        (
            json!({"module": {"builtin": "trustee", "oci": format!("r.example/m:v1@sha256:{digest}")}}),
            "exactly one of builtin, configMap, oci, url must be set",
        ),
        (
            json!({"module": {"oci": "r.example/m:v1"}}),
            "oci must be pinned by digest",
        ),
        (
            json!({"module": {"url": "https://example.com/m.wasm"}}),
            "a url module needs sha256",
        ),
        (
            json!({"module": {"url": "http://example.com/m.wasm", "sha256": digest}}),
            "url must be an https:// URL",
        ),
        (
            json!({"module": {"builtin": "trustee", "pullSecret": {"namespace": "a", "name": "b"}}}),
            "pullSecret is for an oci module",
        ),
        // The built-in helm synthesizer's chart source, refused as a module source is.
        (
            json!({"module": {"builtin": "helm"}}),
            "module.builtin helm renders a chart: set spec.helm.chart",
        ),
        (
            json!({"module": {"builtin": "helm"}, "helm": {"chart": {}}}),
            "exactly one of configMap, oci, url must be set",
        ),
        (
            json!({"module": {"builtin": "helm"}, "helm": {"chart": {"oci": "r.example/c:1.0.0"}}}),
            "oci must be pinned by digest",
        ),
        (
            json!({"module": {"builtin": "helm"}, "helm": {"chart": {"url": "https://example.com/c.tgz"}}}),
            "a url chart needs sha256",
        ),
        (
            json!({"module": {"builtin": "helm"},
                   "helm": {"chart": {"oci": format!("r.example/c:1@sha256:{digest}"), "sha256": digest}}}),
            "sha256 is for a url chart",
        ),
        (
            json!({"module": {"builtin": "helm"}, "helm": {"chart": {
                "configMap": {"namespace": "a", "name": "c", "key": "chart.tgz"},
                "pullSecret": {"namespace": "a", "name": "b"}}}}),
            "pullSecret is for an oci chart",
        ),
        (
            json!({"module": {"builtin": "trustee"}, "limits": {"timeout": "soon"}}),
            "timeout must be a duration",
        ),
        (
            json!({"module": {"builtin": "trustee"}, "limits": {"memory": "512m"}}),
            "memory must be a quantity of bytes",
        ),
        (
            json!({"module": {"builtin": "trustee"}, "refs": [
                {"key": "a", "resource": {"version": "v1", "kind": "ConfigMap"}},
                {"key": "a", "resource": {"version": "v1", "kind": "Secret"}}]}),
            "spec.refs[1]: Duplicate value",
        ),
    ];
    for (i, (spec, message)) in cases.iter().enumerate() {
        let name = format!("{}-bad-{i}", env.namespace);
        let s: crds::Synthesizer = serde_json::from_value(json!({
            "apiVersion": "enoki.dev/v1alpha1", "kind": "Synthesizer",
            "metadata": {"name": name}, "spec": spec}))
        .unwrap();
        let err = synths.create(&PostParams::default(), &s).await.unwrap_err();
        assert!(err.to_string().contains(message), "{spec}: {err}");
    }
    let good: crds::Synthesizer = serde_json::from_value(json!({
        "apiVersion": "enoki.dev/v1alpha1", "kind": "Synthesizer",
        "metadata": {"name": format!("{}-good", env.namespace)},
        "spec": {"module": {"builtin": "trustee"}, "limits": {"timeout": "1m 30s", "memory": "1.5Gi", "output": "16Mi"}}})).unwrap();
    synths.create(&PostParams::default(), &good).await.unwrap();
    synths
        .delete(&format!("{}-good", env.namespace), &Default::default())
        .await
        .unwrap();

    let comps: Api<crds::Composition> = env.api();
    for (spec, message) in [
        (
            json!({"synthesizer": {"name": "Not_A_Name"}}),
            "spec.synthesizer.name",
        ),
        (
            json!({"synthesizer": {"name": "s"}, "bindings": [
                {"key": "a", "resource": {"name": "x"}}, {"key": "a", "resource": {"name": "y"}}]}),
            "spec.bindings[1]: Duplicate value",
        ),
        (
            json!({"synthesizer": {"name": "s"}, "serviceAccountName": "Bad Account"}),
            "spec.serviceAccountName",
        ),
        (
            json!({"synthesizer": {"name": "s"}, "dependsOn": [{"name": "x", "namespace": "Bad_NS"}]}),
            "spec.dependsOn[0].namespace",
        ),
    ] {
        let c: crds::Composition = serde_json::from_value(json!({
            "apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
            "metadata": {"name": "bad"}, "spec": spec}))
        .unwrap();
        let err = comps.create(&PostParams::default(), &c).await.unwrap_err();
        assert!(err.to_string().contains(message), "{spec}: {err}");
    }
}
