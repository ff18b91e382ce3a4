//! Eno's rules for who owns what, against the real control plane: a Patch and the object it
//! patches in adjacent readiness groups settle instead of undoing each other, and fields the
//! synthesizer stops emitting are removed even after someone wiped `managedFields`. Each test
//! names the Eno code it restates (Eno's repository: github.com/Azure/eno; read, not copied).
#![allow(clippy::unwrap_used, clippy::needless_pass_by_value)]

use std::time::Duration;

use harness::{Enoki, TestEnv, echo_module, eventually, install_crds, install_synthesizer};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

fn patch(name: &str, group: &str, ops: Value) -> Value {
    json!({"apiVersion": "eno.azure.io/v1", "kind": "Patch",
        "metadata": {"name": name, "annotations": {"eno.azure.io/readiness-group": group}},
        "patch": {"apiVersion": "v1", "kind": "ConfigMap", "ops": ops}})
}

fn grouped(name: &str, group: &str, data: Value) -> Value {
    harness::config_map(name, json!({"eno.azure.io/readiness-group": group}), data)
}

fn deletes() -> Value {
    json!([{"op": "add", "path": "/metadata/deletionTimestamp", "value": "x"}])
}

/// Eno `internal/resource/tree.go` (`Backtracks`) and `reconciliation/patch_test.go`
/// (`TestPatchDeletionBeforeCreation`, `TestPatchDeleteOrphanedResources`) and
/// `docs/patches.md` ("Ordering with Readiness Groups"): a Patch that deletes in group 1 and
/// the object created in group 2 replace it once; an object in group 1 that a Patch in group
/// 2 deletes stays deleted; one a Patch in group 2 modifies keeps the patched value. After
/// that, passes write none of them.
#[tokio::test]
async fn a_patch_and_the_object_it_patches_in_adjacent_groups_settle() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let cms: Api<ConfigMap> = env.api();
    let before = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pre"},
        "data": {"old": "1"}});
    let uid0 = cms
        .patch(
            "pre",
            &PatchParams::apply("someone-else"),
            &Patch::Apply(&before),
        )
        .await
        .unwrap()
        .uid();
    let cases = [
        (
            "pre",
            json!([
                patch("pre", "1", deletes()),
                grouped("pre", "2", json!({"foo": "bar"}))
            ]),
        ),
        (
            "gone",
            json!([
                grouped("gone", "1", json!({"foo": "bar"})),
                patch("gone", "2", deletes())
            ]),
        ),
        (
            "post",
            json!([
                grouped("post", "1", json!({"foo": "bar", "keep": "x"})),
                patch(
                    "post",
                    "2",
                    json!([{"op": "replace", "path": "/data/foo", "value": "patched"}])
                )
            ]),
        ),
    ];
    for (name, items) in &cases {
        harness::set_echo_items(&env, &format!("{name}-items"), items).await;
        harness::apply_composition(&env, name, &synth, &format!("{name}-items"), json!({})).await;
    }
    let enoki = Enoki::start_with(&env.namespace, &["--readiness-poll", "200ms"]);
    for (name, _) in &cases {
        harness::wait_ready(&env, name).await;
    }
    let data = |c: &ConfigMap| serde_json::to_value(c.data.clone().unwrap_or_default()).unwrap();
    let pre = eventually("pre created again", WAIT, || async {
        cms.get_opt("pre").await.unwrap()
    })
    .await;
    assert_ne!(pre.uid(), uid0, "replaced once");
    assert_eq!(data(&pre), json!({"foo": "bar"}));
    let post = cms.get("post").await.unwrap();
    assert_eq!(data(&post), json!({"foo": "patched", "keep": "x"}));
    assert!(cms.get_opt("gone").await.unwrap().is_none());

    let since = harness::now_rfc3339();
    for _ in 0..3 {
        for (name, _) in &cases {
            enoki.wait_pass(&env, name).await;
        }
    }
    harness::audit_barrier(&env).await;
    let writes: Vec<_> = harness::audited_requests(&env.namespace, &since)
        .into_iter()
        .filter(|r| r.by_enoki() && r.is_write() && r.resource == "configmaps")
        .filter(|r| ["pre", "post", "gone"].contains(&r.name.as_str()))
        .collect();
    assert!(writes.is_empty(), "they still fight: {writes:?}");
    assert_eq!(cms.get("pre").await.unwrap().uid(), pre.uid());
    assert!(cms.get_opt("gone").await.unwrap().is_none());
}

/// Eno `internal/controllers/reconciliation/controller.go` ("Eno should always remove fields
/// that are no longer set by the synthesizer, even if another client messed with
/// managedFields"), `internal/resource/fieldmanager.go` (`MergeEnoManagedFields`) and
/// `merge_test.go` (`TestRemovePropertyAndOwnership`): after `managedFields` are wiped, a
/// label and a data key the synthesizer stops emitting are still removed.
#[tokio::test]
async fn fields_dropped_after_managed_fields_were_wiped_are_still_removed() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let owned = |labels: Value, data: Value| {
        json!([{"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "owned", "labels": labels}, "data": data}])
    };
    let v1 = owned(
        json!({"foo": "bar", "baz": "qux"}),
        json!({"foo": "bar", "baz": "qux"}),
    );
    harness::set_echo_items(&env, "items", &v1).await;
    harness::apply_composition(&env, "wiped", &synth, "items", json!({})).await;
    let enoki = Enoki::start(&env.namespace);
    harness::wait_ready(&env, "wiped").await;
    let cms: Api<ConfigMap> = env.api();
    let wipe = json!({"metadata": {"managedFields": [{}]}});
    cms.patch("owned", &PatchParams::default(), &Patch::Merge(&wipe))
        .await
        .unwrap();
    enoki.wait_pass(&env, "wiped").await;
    let v2 = owned(json!({"foo": "bar"}), json!({"baz": "qux"}));
    harness::set_echo_items(&env, "items", &v2).await;
    eventually("the dropped label and key removed", WAIT, || async {
        let c = cms.get("owned").await.unwrap();
        let labels = c.labels();
        let data = c.data.clone().unwrap_or_default();
        (!labels.contains_key("baz")
            && labels.get("foo").map(String::as_str) == Some("bar")
            && !data.contains_key("foo")
            && data.get("baz").map(String::as_str) == Some("qux"))
        .then_some(())
    })
    .await;
    harness::wait_ready(&env, "wiped").await;
}

/// Eno `docs/patches.md` (a Patch keeps its target patched): the target of a Patch is watched
/// (it carries no label of enoki's), so a foreign change to a patched field is patched again at
/// once, not at the next resync.
#[tokio::test]
async fn a_foreign_change_to_a_patched_field_is_patched_again_at_once() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let cms: Api<ConfigMap> = env.api();
    let theirs = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "legacy"},
        "data": {"hello": "there"}});
    cms.patch(
        "legacy",
        &PatchParams::apply("someone-else"),
        &Patch::Apply(&theirs),
    )
    .await
    .unwrap();
    let ops = json!([{"op": "add", "path": "/data/hello", "value": "world"}]);
    harness::set_echo_items(&env, "items", &json!([patch("legacy", "0", ops)])).await;
    harness::apply_composition(&env, "patcher", &synth, "items", json!({})).await;
    // The default resync (5 m) is far longer than the wait below.
    let _enoki = Enoki::start(&env.namespace);
    let hello = || async {
        let c = cms.get("legacy").await.unwrap();
        c.data.unwrap_or_default().get("hello").cloned()
    };
    eventually("patched", WAIT, || async {
        (hello().await.as_deref() == Some("world")).then_some(())
    })
    .await;
    let intruder = json!({"data": {"hello": "x"}});
    cms.patch("legacy", &PatchParams::default(), &Patch::Merge(&intruder))
        .await
        .unwrap();
    eventually("patched again", Duration::from_secs(20), || async {
        (hello().await.as_deref() == Some("world")).then_some(())
    })
    .await;
}

/// Eno reads every object before it writes it (`internal/controllers/reconciliation`), so an
/// object another Composition created is never taken over. enoki writes a new object without
/// reading it when its cache has not seen it; that first write is guarded: the API server
/// creates the object only if it does not exist, and refuses it (409) when another Composition
/// created it a moment ago, before the cache saw it. Two Compositions created at once emit the
/// same 30 ConfigMaps: every version of every object the API server's watch shows names the
/// same owner (no write ever took one over), its data is that owner's, and a Composition that
/// lost any says Conflict.
#[tokio::test]
async fn two_compositions_racing_for_the_same_objects_never_take_one_over() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let sides = race_sides(&env, &synth).await;
    for who in ["a", "b"] {
        harness::set_echo_items(&env, &format!("{who}-items"), &raced(who)).await;
        // Created unlabelled: neither side sees it yet.
        harness::apply_composition(&env, who, &synth, &format!("{who}-items"), json!({})).await;
    }
    let cms: Api<ConfigMap> = env.api();
    let (recorder, seen) = record_owners(cms.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let comps: Api<crds::Composition> = env.api();
    let pp = PatchParams::default();
    let (la, lb) = (Patch::Merge(side("a")), Patch::Merge(side("b")));
    let (a, b) = tokio::join!(comps.patch("a", &pp, &la), comps.patch("b", &pp, &lb));
    let names: std::collections::HashMap<String, String> = [a.unwrap(), b.unwrap()]
        .into_iter()
        .map(|c| (c.uid().unwrap(), c.name_any()))
        .collect();
    let settled = |c: Option<(String, String, String)>| {
        c.is_some_and(|(s, reason, _)| s == "True" || reason == "Conflict")
    };
    eventually("both settled", WAIT, || async {
        let a = harness::composition_condition(&env, "a", "Reconciled").await;
        let b = harness::composition_condition(&env, "b", "Reconciled").await;
        let labelled = cms
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|c| c.name_any().starts_with("raced-"))
            .filter(|c| c.labels().contains_key("enoki.dev/managed-by"))
            .count();
        (labelled == RACED && settled(a) && settled(b)).then_some(())
    })
    .await;
    // The watch has caught up with the last writes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    recorder.abort();
    let first = never_changed_owner(&seen.lock().unwrap(), &names);
    for (uid, name) in &names {
        let owned = first.values().filter(|o| *o == uid).count();
        let (status, reason, _) = harness::composition_condition(&env, name, "Reconciled")
            .await
            .unwrap();
        let expected = if owned == RACED {
            ("True", reason.as_str())
        } else {
            ("False", "Conflict")
        };
        assert_eq!(
            (status.as_str(), reason.as_str()),
            expected,
            "{name} owns {owned}"
        );
        println!("{name} owns {owned} of {RACED}");
    }
    let refused: f64 = sides
        .iter()
        .map(|e| {
            e.metric_labelled(
                "enoki_apply_operations_total",
                &[("outcome", "apply-exists")],
            )
        })
        .sum();
    println!("guarded first writes refused (the object existed): {refused}");
}

/// The objects each side of the race emits.
const RACED: usize = 30;

/// The `RACED` ConfigMaps `who` emits, its name in each.
fn raced(who: &str) -> Value {
    let objects: Vec<Value> = (0..RACED)
        .map(|i| harness::config_map(&format!("raced-{i}"), json!({}), json!({"owner": who})))
        .collect();
    Value::Array(objects)
}

/// The label that puts a Composition on one side of the race.
fn side(side: &str) -> Value {
    json!({"metadata": {"labels": {"race": side}}})
}

/// Two controllers, each scoped to one side by label, each with caches of its own (so both
/// passes run at once and neither cache has seen the other's creates when it writes), each
/// with the module compiled and its ConfigMap watch started by a warm-up Composition.
async fn race_sides(env: &TestEnv, synth: &str) -> Vec<Enoki> {
    let sides: Vec<Enoki> = ["a", "b"]
        .iter()
        .map(|s| Enoki::start_with(&env.namespace, &["--label-selector", &format!("race={s}")]))
        .collect();
    let comps: Api<crds::Composition> = env.api();
    for s in ["a", "b"] {
        let warm = format!("warm-{s}");
        // One ConfigMap, so that the side's ConfigMap watch runs before the race.
        let one = json!([harness::config_map(&warm, json!({}), json!({}))]);
        harness::set_echo_items(env, &format!("{warm}-items"), &one).await;
        harness::apply_composition(env, &warm, synth, &format!("{warm}-items"), json!({})).await;
        comps
            .patch(&warm, &PatchParams::default(), &Patch::Merge(side(s)))
            .await
            .unwrap();
        eventually("warm Ready", WAIT, || async {
            harness::composition_ready(env, &warm).await.then_some(())
        })
        .await;
    }
    sides
}

/// (name, owner label, owner its data names) of every version of every raced object, as the
/// API server's watch tells them, until the task is aborted.
type Versions = std::sync::Arc<std::sync::Mutex<Vec<(String, String, String)>>>;

/// Records [`Versions`] in a task of its own.
fn record_owners(cms: Api<ConfigMap>) -> (tokio::task::JoinHandle<()>, Versions) {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let seen: Versions = Default::default();
    let into = seen.clone();
    let task = tokio::spawn(async move {
        let mut events = watcher(cms, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Some(Ok(cm)) = events.next().await {
            let name = cm.name_any();
            let owner = cm.labels().get("enoki.dev/managed-by").cloned();
            let said = cm.data.as_ref().and_then(|d| d.get("owner")).cloned();
            if let (true, Some(owner)) = (name.starts_with("raced-"), owner) {
                into.lock()
                    .unwrap()
                    .push((name, owner, said.unwrap_or_default()));
            }
        }
    });
    (task, seen)
}

/// Every recorded version names the owner the object's first version named, and its data
/// is that owner's; every raced object was seen. The owner UID of each object.
fn never_changed_owner(
    seen: &[(String, String, String)],
    names: &std::collections::HashMap<String, String>,
) -> std::collections::HashMap<String, String> {
    let mut first: std::collections::HashMap<String, String> = Default::default();
    for (name, owner, said) in seen {
        assert_eq!(Some(said), names.get(owner), "{name}: data says its owner");
        let was = first.entry(name.clone()).or_insert_with(|| owner.clone());
        assert_eq!(was, owner, "{name} changed owner");
    }
    assert_eq!(first.len(), RACED, "every object seen: {first:?}");
    first
}
