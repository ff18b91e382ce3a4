//! What a live, shared cluster does to enoki, on the real control plane: a namespace restored
//! from a backup, a resource moved between Compositions, CRDs that go and come back, and the
//! health GitOps tools compute from enoki's status with their own code (kstatus; Argo CD's own
//! Lua health evaluation running `deploy/argocd/*.lua`; built by `make test`).
#![allow(clippy::unwrap_used, clippy::needless_pass_by_value)] // test helpers outside #[test] fns

use std::time::Duration;

use crds::Composition;
use harness::{
    Enoki, TestEnv, apply_composition, config_map, echo_module, eventually, install_crds,
    install_synthesizer, set_echo_items, wait_ready,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(90);

/// An object as Velero backs it up and restores it: name, namespace, labels and annotations
/// kept; uid, resourceVersion, managedFields, timestamps, finalizers and status dropped.
fn velero_copy(mut v: Value) -> Value {
    let meta = v["metadata"].take();
    let mut kept = serde_json::Map::new();
    for k in ["name", "namespace", "labels", "annotations"] {
        if let Some(x) = meta.get(k) {
            kept.insert(k.into(), x.clone());
        }
    }
    v["metadata"] = Value::Object(kept);
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    v
}

async fn uid_of<K>(api: &Api<K>, name: &str) -> String
where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get(name).await.unwrap().uid().unwrap()
}

fn owner_label(cm: &ConfigMap) -> Option<String> {
    cm.labels().get("enoki.dev/managed-by").cloned()
}

/// Restored from a backup, a namespace converges: the objects name the old Composition's UID
/// in their `managed-by` label, the restored Composition has a new UID, and enoki adopts them
/// (no Conflict, nothing deleted or re-created).
#[tokio::test]
async fn a_namespace_restored_from_a_backup_converges_without_conflict_or_recreation() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let enoki = Enoki::start(&env.namespace);
    let items = json!([
        config_map("app-a", json!({}), json!({"v": "1"})),
        config_map("app-b", json!({}), json!({"v": "2"}))
    ]);
    set_echo_items(&env, "app-items", &items).await;
    apply_composition(&env, "app", &synth, "app-items", json!({})).await;
    wait_ready(&env, "app").await;
    let comps: Api<Composition> = env.api();
    let cms: Api<ConfigMap> = env.api();
    let old_uid = uid_of(&comps, "app").await;

    // The backup: the Composition, its input and its outputs, as YAML.
    let backup_comp = velero_copy(serde_json::to_value(comps.get("app").await.unwrap()).unwrap());
    let mut backup = Vec::new();
    for name in ["app-items", "app-a", "app-b"] {
        backup.push(velero_copy(
            serde_json::to_value(cms.get(name).await.unwrap()).unwrap(),
        ));
    }
    let outputs = [uid_of(&cms, "app-a").await, uid_of(&cms, "app-b").await];
    assert!(
        backup[1]["metadata"]["labels"]["enoki.dev/managed-by"] == json!(old_uid),
        "the backup carries the old owner"
    );

    // The Composition is deleted with its objects orphaned (a namespace being moved, or the
    // Composition restored over itself).
    let orphan = json!({"metadata": {"annotations": {"enoki.dev/deletion-strategy": "orphan"}}});
    comps
        .patch("app", &PatchParams::default(), &Patch::Merge(&orphan))
        .await
        .unwrap();
    harness::delete_and_wait(&comps, "app").await;

    // The restore: objects first (as backed up, old owner's UID included), then the
    // Composition, which the API server gives a new UID.
    for obj in &backup {
        let name = obj["metadata"]["name"].as_str().unwrap();
        let mut cm: ConfigMap = serde_json::from_value(obj.clone()).unwrap();
        cm.metadata.resource_version = cms.get(name).await.unwrap().resource_version();
        cms.replace(name, &PostParams::default(), &cm)
            .await
            .unwrap();
    }
    let restored: Composition = serde_json::from_value(backup_comp).unwrap();
    comps
        .create(&PostParams::default(), &restored)
        .await
        .unwrap();
    wait_ready(&env, "app").await;
    let new_uid = uid_of(&comps, "app").await;
    assert_ne!(new_uid, old_uid);
    let reconciled = harness::composition_condition(&env, "app", "Reconciled").await;
    assert_eq!(reconciled.map(|c| c.0), Some("True".into()), "no Conflict");
    for (name, uid) in ["app-a", "app-b"].iter().zip(&outputs) {
        let cm = cms.get(name).await.unwrap();
        assert_eq!(cm.uid().as_ref(), Some(uid), "{name} was not re-created");
        assert_eq!(owner_label(&cm), Some(new_uid.clone()), "{name} adopted");
    }
    drop(enoki);
}

/// The resource both synthesizers emit in Eno's migration recipe: reconciliation is disabled
/// unless the Composition carries `migration/resource-owner: "true"`.
fn migrated(by: &str) -> Value {
    let overrides = json!([{
        "path": "self.metadata.annotations['eno.azure.io/disable-reconciliation']",
        "value": "true",
        "condition": "composition.metadata.annotations['migration/resource-owner'] != 'true'"
    }]);
    config_map(
        "moved",
        json!({"eno.azure.io/overrides": overrides.to_string()}),
        json!({"by": by}),
    )
}

async fn set_owner_annotation(env: &TestEnv, comp: &str, value: &str) {
    let comps: Api<Composition> = env.api();
    let patch = json!({"metadata": {"annotations": {"migration/resource-owner": value}}});
    comps
        .patch(comp, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Eno's "Resource Migration Between Compositions" (`docs/resource-migration.md` in
/// Azure/eno): (2) both synthesizers emit the resource with an override that sets
/// `disable-reconciliation` unless the Composition carries `migration/resource-owner: "true"`;
/// (3) the annotation moves from the source's Composition to the target's (a Symphony's
/// variation annotations put it there; here it is set on the Compositions directly); (4) the
/// source stops emitting the resource. The object moves without a Conflict and is never
/// deleted; a third, live Composition emitting it still gets a Conflict.
#[tokio::test]
async fn enos_migration_recipe_moves_a_resource_between_live_compositions() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let enoki = Enoki::start(&env.namespace);
    let cms: Api<ConfigMap> = env.api();
    let comps: Api<Composition> = env.api();
    set_echo_items(&env, "source-items", &json!([migrated("source")])).await;
    set_echo_items(&env, "target-items", &json!([migrated("target")])).await;
    apply_composition(&env, "source", &synth, "source-items", json!({})).await;
    apply_composition(&env, "target", &synth, "target-items", json!({})).await;
    set_owner_annotation(&env, "source", "true").await;
    set_owner_annotation(&env, "target", "").await;
    wait_ready(&env, "source").await;
    wait_ready(&env, "target").await;
    let (source_uid, target_uid) = (
        uid_of(&comps, "source").await,
        uid_of(&comps, "target").await,
    );
    let object = uid_of(&cms, "moved").await;
    let cm = cms.get("moved").await.unwrap();
    assert_eq!(cm.data.as_ref().unwrap()["by"], "source");
    assert_eq!(owner_label(&cm), Some(source_uid));

    // Step 3: the annotation moves.
    set_owner_annotation(&env, "source", "").await;
    set_owner_annotation(&env, "target", "true").await;
    eventually("the target reconciles the moved resource", WAIT, || async {
        let cm = cms.get("moved").await.unwrap();
        (cm.data.as_ref().unwrap()["by"] == "target"
            && owner_label(&cm).as_ref() == Some(&target_uid))
        .then_some(())
    })
    .await;
    wait_ready(&env, "target").await;
    let reconciled = harness::composition_condition(&env, "target", "Reconciled").await;
    assert_eq!(reconciled.map(|c| c.0), Some("True".into()));

    // Step 4: the source no longer emits it; the object stays with the target.
    set_echo_items(
        &env,
        "source-items",
        &json!([config_map("other", json!({}), json!({}))]),
    )
    .await;
    eventually("the source applies its new output", WAIT, || async {
        harness::config_map_exists(&env, "other")
            .await
            .then_some(())
    })
    .await;
    enoki.wait_pass(&env, "source").await;
    let cm = cms.get("moved").await.unwrap();
    assert_eq!(cm.uid(), Some(object), "never deleted or re-created");
    assert_eq!(owner_label(&cm), Some(target_uid.clone()));

    // A live other owner still wins: a third Composition emitting it gets a Conflict.
    set_echo_items(
        &env,
        "third-items",
        &json!([config_map("moved", json!({}), json!({"by": "third"}))]),
    )
    .await;
    apply_composition(&env, "third", &synth, "third-items", json!({})).await;
    let (_, _, message) = eventually("third: Conflict", WAIT, || async {
        let c = harness::composition_condition(&env, "third", "Reconciled").await?;
        (c.0 == "False" && c.1 == "Conflict").then_some(c)
    })
    .await;
    assert!(message.contains(&target_uid), "{message}");
    assert_eq!(
        cms.get("moved").await.unwrap().data.unwrap()["by"],
        "target"
    );
}

/// A Widget CRD of the e2e group `group` and one Widget.
fn widget_pair(group: &str) -> [Value; 2] {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    });
    let widget = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {"size": 1}});
    [crd, widget]
}

fn widgets(env: &TestEnv, group: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        env.client.clone(),
        &env.namespace,
        &ApiResource {
            group: group.to_string(),
            version: "v1".into(),
            api_version: format!("{group}/v1"),
            kind: "Widget".into(),
            plural: "widgets".into(),
        },
    )
}

async fn widget_exists(env: &TestEnv, group: &str) -> bool {
    matches!(widgets(env, group).get_opt("w").await, Ok(Some(_)))
}

/// A kind whose CRD went away is served again once the CRD is back: a Composition emitting a
/// CRD and a CR is deleted (enoki deletes the CRD), and a new one emitting the same pair is
/// Ready; then the CRD is deleted by hand while that Composition lives, and enoki re-creates
/// it and then the CR. The same process runs throughout, so its discovery had the kind.
#[tokio::test]
async fn a_crd_that_went_away_is_applied_again_and_its_crs_follow() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let enoki = Enoki::start(&env.namespace);
    let group = format!("{}.e2e.enoki.dev", env.namespace);
    set_echo_items(&env, "pair", &json!(widget_pair(&group))).await;
    apply_composition(&env, "first", &synth, "pair", json!({})).await;
    wait_ready(&env, "first").await;
    assert!(widget_exists(&env, &group).await);

    let comps: Api<Composition> = env.api();
    harness::delete_and_wait(&comps, "first").await;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(env.client.clone());
    let crd_name = format!("widgets.{group}");
    eventually("the CRD deleted with its Composition", WAIT, || async {
        crds.get_opt(&crd_name)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;

    apply_composition(&env, "second", &synth, "pair", json!({})).await;
    wait_ready(&env, "second").await;
    assert!(widget_exists(&env, &group).await, "the CR is applied again");
    assert!(
        enoki
            .logs()
            .contains("kind no longer served; discovery forgets it"),
        "the kind was served when its CRD went: discovery had to forget it\n{}",
        enoki.logs()
    );

    // Deleted by hand while its Composition lives: re-created (a new object), then the CR.
    let first = uid_of(&crds, &crd_name).await;
    crds.delete(&crd_name, &Default::default()).await.unwrap();
    eventually("the CRD and the CR re-created", WAIT, || async {
        let again = crds.get_opt(&crd_name).await.unwrap()?;
        (again.uid() != Some(first.clone())
            && again.metadata.deletion_timestamp.is_none()
            && widget_exists(&env, &group).await)
            .then_some(())
    })
    .await;
    wait_ready(&env, "second").await;
    harness::delete_and_wait(&comps, "second").await;
    drop(enoki);
}

/// What a GitOps tool's own code concludes of `obj`: `check` is `kstatus` (kstatus, from
/// `target/health`, built from `tests/health`) or `argocd FILE` (Argo CD's own Lua health
/// evaluation, from `target/health-argocd`, built from `tests/health-argocd`); `make test`
/// builds both, and a missing one fails loudly.
fn health(check: &[&str], obj: &Value) -> (String, String) {
    let (bin, args) = match check {
        ["argocd", rest @ ..] => ("target/health-argocd", rest),
        _ => ("target/health", check),
    };
    let bin = harness::workspace_root().join(bin);
    assert!(
        bin.exists(),
        "{} is missing: build it (hack/test.sh's health-checker phase; make test does)",
        bin.display()
    );
    let mut child = std::process::Command::new(&bin)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(obj.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout).trim_end().to_string();
    let (status, message) = line.split_once('\t').unwrap_or((&line, ""));
    (status.to_string(), message.to_string())
}

fn argocd_script(kind: &str) -> String {
    harness::workspace_root()
        .join(format!("deploy/argocd/{kind}.lua"))
        .display()
        .to_string()
}

/// (kstatus, Argo CD) of Composition `name` as it is now.
async fn verdicts(env: &TestEnv, name: &str) -> (String, String, Value) {
    let comps: Api<Composition> = env.api();
    let obj = serde_json::to_value(comps.get(name).await.unwrap()).unwrap();
    let kstatus = health(&["kstatus"], &obj).0;
    let argo = health(&["argocd", &argocd_script("composition")], &obj).0;
    (kstatus, argo, obj)
}

async fn wait_verdicts(env: &TestEnv, name: &str, kstatus: &str, argo: &str, stage: &str) -> Value {
    eventually(
        &format!("{stage}: kstatus {kstatus}, Argo CD {argo}"),
        WAIT,
        || async {
            let (k, a, obj) = verdicts(env, name).await;
            (k == kstatus && a == argo).then_some(obj)
        },
    )
    .await
}

async fn bump_spec(env: &TestEnv, name: &str, value: &str) {
    let comps: Api<Composition> = env.api();
    let patch = json!({"spec": {"synthesisEnv": [{"name": "STAGE", "value": value}]}});
    comps
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

async fn set_raw(env: &TestEnv, items: &str, raw: Option<&str>) {
    let cms: Api<ConfigMap> = env.api();
    let patch = json!({"data": {"raw": raw}});
    cms.patch(items, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// An output that is Ready once the test annotates it `go: "yes"`.
fn gated(name: &str) -> Value {
    config_map(
        name,
        json!({"enoki.dev/readiness": "has(self.metadata.annotations) && 'go' in self.metadata.annotations"}),
        json!({}),
    )
}

/// Annotates the output once it exists: a stored synthesis is recorded (and reads as
/// InProgress) one pass before it is applied.
async fn release_gate(env: &TestEnv, name: &str) {
    let cms: Api<ConfigMap> = env.api();
    let patch = json!({"metadata": {"annotations": {"go": "yes"}}});
    eventually("the gated output applied", WAIT, || async {
        cms.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .ok()
    })
    .await;
}

/// kstatus (Flux's health checks) and Argo CD's health checks read a Composition at each stage
/// as a Flux or Argo CD user expects: a changed spec not yet handled is InProgress/Progressing;
/// applied but not Ready is InProgress/Progressing; Ready is Current/Healthy; a failed
/// synthesis of the newest spec is Failed/Degraded; a recovered Composition shows no error; a
/// change held back (dependsOn) keeps `observedGeneration` and Ready at the older generation.
#[tokio::test]
async fn gitops_tools_read_each_stage_of_a_composition_right() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    set_echo_items(&env, "items", &json!([gated("one")])).await;
    apply_composition(&env, "app", &synth, "items", json!({})).await;
    let enoki = Enoki::start(&env.namespace);
    wait_verdicts(
        &env,
        "app",
        "InProgress",
        "Progressing",
        "applied, not ready",
    )
    .await;
    release_gate(&env, "one").await;
    wait_verdicts(&env, "app", "Current", "Healthy", "ready").await;

    // Spec changed while enoki is away: not yet observed.
    drop(enoki);
    set_echo_items(&env, "items", &json!([gated("one"), gated("two")])).await;
    bump_spec(&env, "app", "2").await;
    let (k, a, _) = verdicts(&env, "app").await;
    assert_eq!(
        (k.as_str(), a.as_str()),
        ("InProgress", "Progressing"),
        "spec changed"
    );
    let enoki = Enoki::start(&env.namespace);
    eventually(
        "new generation applied, not ready: InProgress / Progressing",
        WAIT,
        || async {
            let (k, a, obj) = verdicts(&env, "app").await;
            let observed = obj["status"]["observedGeneration"] == obj["metadata"]["generation"];
            (k == "InProgress" && a == "Progressing" && observed).then_some(())
        },
    )
    .await;
    release_gate(&env, "two").await;
    let obj = wait_verdicts(&env, "app", "Current", "Healthy", "new generation ready").await;
    assert_eq!(
        obj["status"]["observedGeneration"],
        obj["metadata"]["generation"]
    );

    // The newest spec fails to synthesize: Failed / Degraded, with the error.
    set_raw(&env, "items", Some("not a resource list")).await;
    bump_spec(&env, "app", "3").await;
    let failed = wait_verdicts(&env, "app", "Failed", "Degraded", "synthesis failed").await;
    assert!(
        failed["status"]["simplified"]["error"].is_string(),
        "{failed}"
    );

    // Recovered: Current / Healthy, and the old error is gone.
    set_raw(&env, "items", None).await;
    let ok = wait_verdicts(&env, "app", "Current", "Healthy", "recovered").await;
    assert!(
        ok["status"]["simplified"].get("error").is_none(),
        "a stale error: {ok}"
    );

    // Suspended (`enoki suspend`): Argo CD's own Suspended; for kstatus the newest spec is not
    // reconciled. Resumed: synthesized again, Current / Healthy.
    let comps: Api<Composition> = env.api();
    let suspend = |on: bool| {
        let patch = json!({"spec": {"suspend": if on { json!(true) } else { Value::Null }}});
        let comps = comps.clone();
        async move {
            comps
                .patch("app", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
    };
    suspend(true).await;
    wait_verdicts(&env, "app", "InProgress", "Suspended", "suspended").await;
    suspend(false).await;
    let ok = wait_verdicts(&env, "app", "Current", "Healthy", "resumed").await;

    // Held back by a dependency that does not exist: the status keeps speaking for the
    // previous generation, which stays applied.
    let comps: Api<Composition> = env.api();
    let before = ok["status"]["observedGeneration"].clone();
    let patch = json!({"spec": {"dependsOn": [{"name": "missing"}]}});
    comps
        .patch("app", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually("the change held back", WAIT, || async {
        let c = harness::composition_condition(&env, "app", "Synthesized").await?;
        (c.0 == "False").then_some(())
    })
    .await;
    enoki.wait_pass(&env, "app").await;
    let (k, a, obj) = verdicts(&env, "app").await;
    assert_eq!(
        (k.as_str(), a.as_str()),
        ("InProgress", "Progressing"),
        "held back: {obj}"
    );
    assert_eq!(obj["status"]["observedGeneration"], before);
    let ready = obj["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .cloned()
        .unwrap();
    assert_eq!(
        ready["observedGeneration"], before,
        "Ready speaks for the applied generation"
    );
    assert_eq!(ready["status"], "True");
    drop(enoki);
}

/// A Symphony rolls its Compositions up into conditions kstatus and Argo CD read; the
/// Synthesizer's Argo CD check reads its module's readiness. The shipped argocd-cm patch holds
/// the same scripts as the .lua files.
#[tokio::test]
async fn symphony_and_synthesizer_health_roll_up_for_gitops_tools() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    set_echo_items(&env, "items", &json!([gated("sym-out")])).await;
    let sym = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Symphony",
        "metadata": {"name": "stack"},
        "spec": {"bindings": [{"key": "config", "resource": {"name": "items"}}],
                 "variations": [{"synthesizer": {"name": synth}}]}});
    let syms: Api<crds::Symphony> = env.api();
    syms.patch("stack", &PatchParams::apply("test"), &Patch::Apply(&sym))
        .await
        .unwrap();
    let enoki = Enoki::start(&env.namespace);
    eventually(
        "the Symphony's Composition applies its output",
        WAIT,
        || async {
            harness::config_map_exists(&env, "sym-out")
                .await
                .then_some(())
        },
    )
    .await;
    let read = || async {
        let obj = serde_json::to_value(syms.get("stack").await.unwrap()).unwrap();
        let k = health(&["kstatus"], &obj).0;
        let a = health(&["argocd", &argocd_script("symphony")], &obj).0;
        (k, a)
    };
    eventually("Symphony in progress", WAIT, || async {
        (read().await == ("InProgress".into(), "Progressing".into())).then_some(())
    })
    .await;
    release_gate(&env, "sym-out").await;
    eventually("Symphony Current / Healthy", WAIT, || async {
        (read().await == ("Current".into(), "Healthy".into())).then_some(())
    })
    .await;
    let synths: Api<crds::Synthesizer> = Api::all(env.client.clone());
    let obj = serde_json::to_value(synths.get(&synth).await.unwrap()).unwrap();
    assert_eq!(
        health(&["argocd", &argocd_script("synthesizer")], &obj).0,
        "Healthy"
    );
    let patch = std::fs::read_to_string(
        harness::workspace_root().join("deploy/argocd/argocd-cm-patch.yaml"),
    )
    .unwrap();
    let patch: Value = serde_saphyr::from_str(&patch).unwrap();
    for (kind, file) in [
        ("Composition", "composition"),
        ("Symphony", "symphony"),
        ("Synthesizer", "synthesizer"),
    ] {
        let script = std::fs::read_to_string(argocd_script(file)).unwrap();
        assert_eq!(
            patch["data"][format!("resource.customizations.health.enoki.dev_{kind}")].as_str(),
            Some(script.as_str()),
            "argocd-cm-patch.yaml carries {file}.lua"
        );
    }
    drop(enoki);
}

/// Everything enoki stored or said about the test's namespace: its ResourceSlices, Events and
/// Composition statuses, as text.
async fn stored_text(env: &TestEnv) -> String {
    let slices: Api<crds::ResourceSlice> = env.api();
    let events: Api<k8s_openapi::api::events::v1::Event> = env.api();
    let comps: Api<Composition> = env.api();
    format!(
        "{}\n{}\n{}",
        serde_json::to_string(&slices.list(&Default::default()).await.unwrap().items).unwrap(),
        serde_json::to_string(&events.list(&Default::default()).await.unwrap().items).unwrap(),
        serde_json::to_string(&comps.list(&Default::default()).await.unwrap().items).unwrap(),
    )
}

/// A Composition that emits a Secret: its values are in no ResourceSlice (tombstones
/// included), Event, status, `enoki status` output or controller log line, and the Secret is
/// still applied, drift-reverted and pruned. A slice written in plain text (as before Secrets
/// were sealed) still works and is rewritten sealed at the next synthesis.
#[tokio::test]
async fn a_synthesized_secret_is_sealed_at_rest_and_still_applied_reverted_and_pruned() {
    use base64::Engine as _;
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let password = format!("pw-{:08x}", rand::random::<u32>());
    let token = format!("tk-{:08x}", rand::random::<u32>());
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
        "stringData": {"password": password}, "data": {"token": b64(&token)}});
    let items = json!([secret, config_map("plain", json!({}), json!({"v": "1"}))]);
    set_echo_items(&env, "items", &items).await;
    apply_composition(&env, "app", &synth, "items", json!({})).await;
    let mut enoki = Enoki::start(&env.namespace);
    wait_ready(&env, "app").await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = env.api();
    let value = |s: &k8s_openapi::api::core::v1::Secret, k: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|v| String::from_utf8_lossy(&v.0).to_string())
    };
    let live = secrets.get("db").await.unwrap();
    assert_eq!(value(&live, "password").as_deref(), Some(password.as_str()));
    assert_eq!(value(&live, "token").as_deref(), Some(token.as_str()));
    let leaked = |text: &str| {
        [password.clone(), token.clone(), b64(&password), b64(&token)]
            .into_iter()
            .filter(|v| text.contains(v.as_str()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        leaked(&stored_text(&env).await),
        Vec::<String>::new(),
        "stored in plain text"
    );

    // Drift is reverted.
    let patch = json!({"data": {"password": b64("changed")}});
    secrets
        .patch("db", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually("the drifted Secret reverted", WAIT, || async {
        let s = secrets.get("db").await.ok()?;
        (value(&s, "password").as_deref() == Some(password.as_str())).then_some(())
    })
    .await;

    // A slice as an older enoki wrote it (the Secret in plain text) still works, and the next
    // synthesis (an input change with the same output) writes new, sealed slices.
    let comps: Api<Composition> = env.api();
    let slices: Api<crds::ResourceSlice> = env.api();
    let current = comps
        .get("app")
        .await
        .unwrap()
        .status
        .unwrap()
        .current_synthesis
        .unwrap();
    let name = current.resource_slices[0].name.clone();
    let mut slice = slices.get(&name).await.unwrap();
    for m in &mut slice.spec.resources {
        if m.sealed.take().is_some() {
            let mut full: Value = serde_json::from_str(&m.manifest).unwrap();
            full["stringData"] = json!({"password": password});
            full["data"] = json!({"token": b64(&token)});
            m.manifest = full.to_string();
        }
    }
    slices
        .replace(&name, &PostParams::default(), &slice)
        .await
        .unwrap();
    let cms: Api<ConfigMap> = env.api();
    let nudge = json!({"data": {"unrelated": "1"}});
    cms.patch("items", &PatchParams::default(), &Patch::Merge(&nudge))
        .await
        .unwrap();
    eventually("new slices, sealed", WAIT, || async {
        let cur = comps.get("app").await.ok()?.status?.current_synthesis?;
        (cur.resource_slices.iter().all(|r| r.name != name)).then_some(())
    })
    .await;
    wait_ready(&env, "app").await;
    // The plain slice, now the previous synthesis's, is deleted by enoki.
    eventually("the plain slice is gone", WAIT, || async {
        slices.get_opt(&name).await.ok()?.is_none().then_some(())
    })
    .await;
    assert_eq!(leaked(&stored_text(&env).await), Vec::<String>::new());

    // The key is lost: enoki (restarted) creates a new one, and the synthesis whose slices it
    // cannot open is made again, sealed with the new key; the Secret stays applied.
    assert_eq!(
        leaked(&enoki.logs()),
        Vec::<String>::new(),
        "the controller's log"
    );
    drop(enoki);
    let before = comps
        .get("app")
        .await
        .unwrap()
        .status
        .unwrap()
        .current_synthesis
        .unwrap()
        .uuid;
    secrets
        .delete("enoki-slice-key", &Default::default())
        .await
        .unwrap();
    enoki = Enoki::start(&env.namespace);
    eventually("a new synthesis sealed with the new key", WAIT, || async {
        let cur = comps.get("app").await.ok()?.status?.current_synthesis?;
        (cur.uuid != before).then_some(())
    })
    .await;
    wait_ready(&env, "app").await;
    let live = secrets.get("db").await.unwrap();
    assert_eq!(value(&live, "password").as_deref(), Some(password.as_str()));

    // Pruned when dropped; the tombstone carries no value either.
    set_echo_items(
        &env,
        "items",
        &json!([config_map("plain", json!({}), json!({"v": "2"}))]),
    )
    .await;
    eventually("the Secret pruned", WAIT, || async {
        secrets.get_opt("db").await.ok()?.is_none().then_some(())
    })
    .await;
    wait_ready(&env, "app").await;
    assert_eq!(leaked(&stored_text(&env).await), Vec::<String>::new());
    let (code, status) = harness::enoki_cli_text(&["status", "app", "-n", &env.namespace]);
    assert_eq!(code, 0, "{status}");
    assert_eq!(leaked(&status), Vec::<String>::new(), "enoki status");
    assert_eq!(
        leaked(&enoki.logs()),
        Vec::<String>::new(),
        "the controller's log"
    );
}
