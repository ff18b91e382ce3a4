//! One writer of a Composition's status, on the real API server: a pass that started before
//! someone else wrote the Composition cannot overwrite the newer status (its write names the
//! resourceVersion it read and is refused with a Conflict, read back from the audit log), and
//! no pass writes the status twice (the audit log's writes against the pass numbers of
//! enoki's log lines); passes that change nothing write nothing.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use harness::{
    Enoki, TestEnv, WAIT, audit_barrier, audited_requests, echo_module, eventually, install_crds,
    install_synthesizer, now_rfc3339, workspace_root,
};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// The `sleep` guest (`tests/guests/sleep`): sleeps `SLEEP_MS`, then emits nothing.
fn sleep_module() -> Vec<u8> {
    let p = workspace_root().join("target/wasm32-wasip1/release/sleep.wasm");
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}; make test builds it", p.display()))
}

/// Composition `name` of `synth` whose synthesis sleeps `ms` (its `config` input, which the
/// guest does not read, is ConfigMap `config`).
async fn sleeping(env: &TestEnv, name: &str, synth: &str, ms: u32) {
    harness::set_echo_items(env, "config", &json!([])).await;
    let env_var = json!({"synthesisEnv": [{"name": "SLEEP_MS", "value": ms.to_string()}]});
    harness::apply_composition(env, name, synth, "config", env_var).await;
}

/// The generation the current synthesis of `name` was made for.
async fn synthesized_generation(env: &TestEnv, name: &str) -> Option<i64> {
    let c = env.api::<crds::Composition>().get(name).await.unwrap();
    c.status?.current_synthesis?.observed_composition_generation
}

/// enoki's writes of Composition `name`'s status since `since`: (HTTP code, when).
async fn status_writes(env: &TestEnv, name: &str, since: &str) -> Vec<(u16, String)> {
    audit_barrier(env).await;
    audited_requests(&env.namespace, since)
        .into_iter()
        .filter(|r| r.by_enoki() && r.is_write())
        .filter(|r| r.resource == "compositions/status" && r.name == name)
        .map(|r| (r.code, r.received))
        .collect()
}

#[tokio::test]
async fn a_stale_pass_cannot_overwrite_a_newer_status() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "sleep", &sleep_module()).await;
    let enoki = Enoki::start(&env.namespace);
    let comps: Api<crds::Composition> = env.api();
    sleeping(&env, "race", &synth, 3000).await;
    eventually("the first synthesis", WAIT, || async {
        synthesized_generation(&env, "race").await
    })
    .await;
    // A new synthesis: the pass reads the Composition, then sleeps 3 s in the module.
    sleeping(&env, "race", &synth, 3001).await;
    let generation = comps.get("race").await.unwrap().metadata.generation;
    eventually("the pass to be synthesizing", WAIT, || async {
        (enoki.metric("enoki_reconciles_in_flight") >= Some(1.0)).then_some(())
    })
    .await;
    // Meanwhile a newer status is written (as a newer pass would: from the latest version).
    let since = now_rfc3339();
    let mut c = comps.get("race").await.unwrap();
    let mut st = c.status.take().unwrap();
    st.conditions.push(
        serde_json::from_value(json!({"type": "Newer", "status": "True", "reason": "Test",
            "message": "written while the pass synthesized",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}))
        .unwrap(),
    );
    let newer = json!({"metadata": {"resourceVersion": c.metadata.resource_version},
        "status": st});
    comps
        .patch_status("race", &PatchParams::default(), &Patch::Merge(&newer))
        .await
        .unwrap();
    // The stale pass's write is refused; the next pass records the synthesis over the newer
    // status, which keeps what it added.
    eventually("the new synthesis recorded", WAIT, || async {
        (synthesized_generation(&env, "race").await == generation).then_some(())
    })
    .await;
    let status = comps.get("race").await.unwrap().status.unwrap();
    assert!(
        status.conditions.iter().any(|c| c.type_ == "Newer"),
        "the newer status was overwritten: {:?}",
        status.conditions
    );
    let writes = status_writes(&env, "race", &since).await;
    println!("enoki's status writes after the newer status: {writes:?}");
    assert_eq!(
        writes.first().map(|w| w.0),
        Some(409),
        "the stale pass's write is refused: {writes:?}"
    );
    assert!(writes.iter().any(|w| w.0 == 200), "{writes:?}");
}

/// The pass numbers (`pass=`) of enoki's "status written" log lines for Composition `name`.
fn passes_that_wrote(logs: &str, name: &str) -> Vec<u64> {
    logs.lines()
        .filter(|l| l.contains("status written") && l.contains(&format!("composition={name} ")))
        .filter_map(|l| {
            let rest = &l[l.find(" pass=")? + 6..];
            rest[..rest.find(|c: char| !c.is_ascii_digit())?]
                .parse()
                .ok()
        })
        .collect()
}

#[tokio::test]
async fn each_pass_writes_the_status_at_most_once() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let log = [(
        "RUST_LOG",
        "info,controller::run::composition::status_write=debug",
    )];
    let kubeconfig = harness::kubeconfig_path();
    let enoki = Enoki::start_as(&env.namespace, &[], &kubeconfig, &log);
    let items = |v: &str| {
        json!([{"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "out"}, "data": {"v": v}}])
    };
    harness::set_echo_items(&env, "config", &items("1")).await;
    let since = now_rfc3339();
    harness::apply_composition(&env, "once", &synth, "config", json!({})).await;
    harness::wait_ready(&env, "once").await;
    // An input change: a new synthesis, recorded, applied, Ready.
    let uuid = |c: crds::Composition| c.status?.current_synthesis.map(|s| s.uuid);
    let comps: Api<crds::Composition> = env.api();
    let before = uuid(comps.get("once").await.unwrap());
    harness::set_echo_items(&env, "config", &items("2")).await;
    eventually("the new synthesis applied and Ready", WAIT, || async {
        let cm: Api<k8s_openapi::api::core::v1::ConfigMap> = env.api();
        let applied = cm.get("out").await.ok()?.data?.get("v")? == "2";
        let recorded = uuid(comps.get("once").await.ok()?) != before;
        (applied && recorded && harness::composition_ready(&env, "once").await).then_some(())
    })
    .await;
    enoki.wait_pass(&env, "once").await;
    let audited = status_writes(&env, "once", &since).await;
    let passes = passes_that_wrote(&enoki.logs(), "once");
    println!(
        "status writes of a new Composition and an input change: {} (audit log), by passes {passes:?}",
        audited.len()
    );
    assert!(audited.iter().all(|w| w.0 == 200), "{audited:?}");
    assert_eq!(
        passes.len(),
        audited.len(),
        "every write is logged with its pass"
    );
    let mut distinct = passes.clone();
    distinct.dedup();
    assert_eq!(
        distinct, passes,
        "a pass wrote the status twice: {passes:?}"
    );
    // Created, synthesized, applied and Ready; then an input change synthesized and applied:
    // at least a write each, and the passes that only looked wrote nothing.
    assert!(audited.len() >= 3, "{audited:?}");
    assert!(
        (audited.len() as f64) < enoki.composition_passes(&env.namespace, "once"),
        "passes that change nothing write nothing"
    );
}

/// A ValidatingAdmissionPolicy (and its binding) refusing every status write of a Composition
/// labelled `refuse-status` in `namespace` — a record that cannot be made — once it is in force
/// (probed with a Composition of its own before enoki starts).
async fn refuse_status_writes(env: &TestEnv) -> String {
    let name = format!("refuse-status-{}", env.namespace);
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["enoki.dev"],
                "apiVersions": ["*"], "operations": ["UPDATE"],
                "resources": ["compositions/status"]}]},
            "validations": [{"reason": "Forbidden", "message": "status writes refused (test)",
                "expression": "!has(object.metadata.labels) || !('refuse-status' in object.metadata.labels)"}]}});
    let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels":
                {"kubernetes.io/metadata.name": env.namespace}}}}});
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [policy, binding]});
    let (ok, out) = harness::kubectl(&["apply", "-f", "-"], Some(list.to_string().as_bytes()));
    assert!(ok, "{out}");
    let comps: Api<crds::Composition> = env.api();
    let probe = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
        "metadata": {"name": "probe", "labels": {"refuse-status": "true"}},
        "spec": {"synthesizer": {"name": "none"}}});
    comps
        .create(&Default::default(), &serde_json::from_value(probe).unwrap())
        .await
        .unwrap();
    let write = json!({"status": {"simplified": {"status": "Ready"}}});
    eventually("the policy in force", WAIT, || async {
        let r = comps
            .patch_status("probe", &PatchParams::default(), &Patch::Merge(&write))
            .await;
        r.is_err().then_some(())
    })
    .await;
    comps.delete("probe", &Default::default()).await.unwrap();
    name
}

/// Composition `name` of `synth` bound to ConfigMap `config`, labelled so its status writes
/// are refused.
async fn refused(env: &TestEnv, name: &str, synth: &str, config: &str) {
    let comp = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
        "metadata": {"name": name, "labels": {"refuse-status": "true"}},
        "spec": {"synthesizer": {"name": synth},
            "bindings": [{"key": "config", "resource": {"name": config}}]}});
    let comps: Api<crds::Composition> = env.api();
    comps
        .create(&Default::default(), &serde_json::from_value(comp).unwrap())
        .await
        .unwrap();
}

/// Whether every ConfigMap of `names` exists.
async fn all_exist(env: &TestEnv, names: &[&str]) -> bool {
    for n in names {
        if !harness::config_map_exists(env, n).await {
            return false;
        }
    }
    true
}

/// Whether Composition `name` owns only the ResourceSlices its status records.
async fn only_recorded_slices(env: &TestEnv, name: &str) -> bool {
    let comp = env.api::<crds::Composition>().get(name).await.unwrap();
    let Some(current) = comp.status.and_then(|s| s.current_synthesis) else {
        return false;
    };
    let slices: Api<crds::ResourceSlice> = env.api();
    let all = slices.list(&Default::default()).await.unwrap().items;
    all.iter()
        .filter(|s| {
            s.owner_references()
                .iter()
                .any(|o| Some(&o.uid) == comp.metadata.uid.as_ref())
        })
        .all(|s| {
            current
                .resource_slices
                .iter()
                .any(|r| r.name == s.name_any())
        })
}

/// A first synthesis is applied in the pass that records it. When the record is refused, what
/// it applied is not left behind: deleting the Composition deletes it, and after a restart
/// (nothing in memory) the next synthesis prunes what it dropped.
#[tokio::test]
async fn a_first_synthesis_applied_but_never_recorded_is_pruned_and_deleted() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let policy = refuse_status_writes(&env).await;
    let mut enoki = Enoki::start(&env.namespace);
    let cm =
        |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    harness::set_echo_items(&env, "config", &json!([cm("a"), cm("b")])).await;
    harness::set_echo_items(&env, "config-gone", &json!([cm("c")])).await;
    let since = now_rfc3339();
    refused(&env, "lost", &synth, "config").await;
    refused(&env, "gone", &synth, "config-gone").await;
    eventually("the first syntheses applied", WAIT, || async {
        all_exist(&env, &["a", "b", "c"]).await.then_some(())
    })
    .await;
    let comps: Api<crds::Composition> = env.api();
    let recorded = |c: crds::Composition| c.status.and_then(|s| s.current_synthesis);
    assert!(recorded(comps.get("lost").await.unwrap()).is_none());
    let writes = status_writes(&env, "lost", &since).await;
    assert!(
        !writes.is_empty() && writes.iter().all(|w| w.0 == 403),
        "{writes:?}"
    );
    // Deleted while its record is still refused: what it applied goes with it.
    comps.delete("gone", &Default::default()).await.unwrap();
    eventually("gone's output deleted and gone released", WAIT, || async {
        let out = harness::config_map_exists(&env, "c").await;
        let comp = comps.get_opt("gone").await.unwrap();
        (!out && comp.is_none()).then_some(())
    })
    .await;
    // The process ends (its memory with it); meanwhile the input drops `b` and the record is
    // let through. The restarted controller takes the unrecorded slices as the current
    // synthesis: the next one's tombstone deletes `b`.
    enoki.stop();
    harness::set_echo_items(&env, "config", &json!([cm("a")])).await;
    let unlabel = json!({"metadata": {"labels": {"refuse-status": null}}});
    comps
        .patch("lost", &PatchParams::default(), &Patch::Merge(&unlabel))
        .await
        .unwrap();
    let _enoki = Enoki::start(&env.namespace);
    harness::wait_ready(&env, "lost").await;
    eventually("b pruned", WAIT, || async {
        (!harness::config_map_exists(&env, "b").await).then_some(())
    })
    .await;
    assert!(harness::config_map_exists(&env, "a").await);
    // The unrecorded synthesis's slices went once the new one (holding its tombstones) was
    // recorded: the Composition owns only what its status records.
    eventually("only the recorded slices left", WAIT, || async {
        only_recorded_slices(&env, "lost").await.then_some(())
    })
    .await;
    let (ok, out) = harness::kubectl(
        &[
            "delete",
            "validatingadmissionpolicybinding,validatingadmissionpolicy",
            &policy,
        ],
        None,
    );
    assert!(ok, "{out}");
}
