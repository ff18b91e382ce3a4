//! With `--shards`, managed objects and ResourceSlices carry their Composition's shard
//! (`enoki.dev/shard: <index>-of-<N>`) and each replica's watches of them ask the API server
//! to leave the other shards' out (seen in the audit log); a Composition that reads another
//! shard's output as its input still follows it at once, through the replica's watch of the
//! managed objects of that kind in that namespace.

use super::*;
use crds::ResourceSlice;

/// A Composition bound to an unmanaged input of no items (it emits nothing, and its replica
/// needs no watch of managed ConfigMaps for it) whose shard of `shards` is not `not`: created
/// again under other names until one is.
async fn composition_outside(env: &TestEnv, synth: &str, shards: u32, not: u32) -> String {
    let comps: Api<crds::Composition> = env.api();
    set_echo_items(env, "parking", &json!([])).await;
    for i in 0.. {
        let name = format!("consumer-{i}");
        apply_composition(env, &name, synth, "parking", json!({})).await;
        let uid = comps.get(&name).await.unwrap().uid().unwrap();
        if shard_of_n(&uid, shards) != not {
            return name;
        }
        comps.delete(&name, &Default::default()).await.unwrap();
        assert!(i < 40, "40 Compositions all in shard {not}");
    }
    unreachable!()
}

/// The label selector of a request, decoded.
fn selector_of(uri: &str) -> String {
    let uri = uri
        .replace("%2F", "/")
        .replace("%2C", ",")
        .replace("%21", "!");
    let uri = uri
        .replace("%28", "(")
        .replace("%29", ")")
        .replace('+', " ")
        .replace("%20", " ");
    uri.split(['?', '&'])
        .find_map(|p| p.strip_prefix("labelSelector="))
        .unwrap_or_default()
        .to_string()
}

/// Per replica, the label selector of the last watch of `resource` it started (across the
/// cluster when `cluster_wide`, else in a namespace; not the probes, which select by name):
/// what it watches once its shards are settled.
fn last_selectors(since: &str, resource: &str, cluster_wide: bool) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for r in harness::audited_watches(since) {
        let scoped = r.uri.contains("/namespaces/");
        if r.by_enoki()
            && r.resource == resource
            && scoped != cluster_wide
            && !r.uri.contains("fieldSelector")
        {
            let replica = replica_of(&r.user_agent).unwrap_or_default();
            out.insert(replica, selector_of(&r.uri));
        }
    }
    out
}

/// Two replicas with `--shards 2`, once each holds one shard: the replicas and the holder of
/// each shard. Names of their own: the other tests of this file run replicas at the same time.
async fn two_replicas(env: &TestEnv) -> (Vec<Enoki>, BTreeMap<u32, String>) {
    let replicas: Vec<Enoki> = (0..2)
        .map(|r| {
            let host = format!("watcher-{r}");
            let args = [
                "--shards",
                "2",
                "--leader-election-namespace",
                &env.namespace,
                "--lease-duration-secs",
                "8",
            ];
            Enoki::start_as(
                &env.namespace,
                &args,
                &kubeconfig_path(),
                &[("HOSTNAME", host.as_str())],
            )
        })
        .collect();
    let owners = eventually("one shard each", Duration::from_secs(90), || async {
        let owners = holders_of(env, 2).await;
        (owners.len() == 2 && owners[&0] != owners[&1]).then_some(owners)
    })
    .await;
    (replicas, owners)
}

/// Each replica's last watches of managed ConfigMaps and slices ask the API server for its
/// own shard's only; the reader's replica also watches the managed ConfigMaps of its
/// namespace, which only its read of the other shard's output started (the other shard's are
/// not sent to it otherwise).
async fn assert_watches_filtered(
    env: &TestEnv,
    since: &str,
    owners: &BTreeMap<u32, String>,
    reader: &String,
) {
    harness::audit_barrier(env).await;
    let in_namespace = format!("/namespaces/{}/configmaps", env.namespace);
    let managed_here = harness::audited_watches(since).into_iter().any(|r| {
        r.by_enoki()
            && replica_of(&r.user_agent).as_ref() == Some(reader)
            && r.uri.contains(&in_namespace)
            && selector_of(&r.uri) == "enoki.dev/managed-by"
    });
    assert!(
        managed_here,
        "{reader} does not watch the managed ConfigMaps it reads"
    );
    // The managed ConfigMaps across the cluster, the slices in the namespace.
    for (resource, cluster_wide) in [("configmaps", true), ("resourceslices", false)] {
        let last = last_selectors(since, resource, cluster_wide);
        for (shard, replica) in owners {
            let own = format!("notin ({}-of-2)", 1 - shard);
            let theirs = last.get(replica).cloned().unwrap_or_default();
            assert!(
                theirs.contains(&own),
                "{replica} (shard {shard}) {resource}: {theirs:?}"
            );
        }
    }
}

#[tokio::test]
async fn each_replica_watches_only_its_shards_and_a_cross_shard_input_still_wakes_its_reader() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "shardwatch", &echo_module()).await;
    let since = now_rfc3339();
    let (replicas, owners) = two_replicas(&env).await;
    // The producer emits `handoff`, the consumer's input: the consumer echoes its items.
    let handoff = |x: &str| {
        let items = json!([{"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "consumed"}, "data": {"x": x}}]);
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "handoff"},
            "data": {"items": items.to_string()}}])
    };
    set_echo_items(&env, "producer-items", &handoff("1")).await;
    apply_composition(&env, "producer", &synth, "producer-items", json!({})).await;
    let comps: Api<crds::Composition> = env.api();
    let producer_uid = comps.get("producer").await.unwrap().uid().unwrap();
    let producer_shard = shard_of_n(&producer_uid, 2);
    let consumer = composition_outside(&env, &synth, 2, producer_shard).await;
    apply_composition(&env, &consumer, &synth, "handoff", json!({})).await;
    let cms: Api<ConfigMap> = env.api();
    let consumed = || async {
        let cm = cms.get_opt("consumed").await.unwrap()?;
        cm.data?.get("x").cloned()
    };
    eventually(
        "the consumer echoes the handoff",
        Duration::from_secs(90),
        || async { (consumed().await.as_deref() == Some("1")).then_some(()) },
    )
    .await;
    // Labelled with their shards: the objects and the slices.
    let consumer_uid = comps.get(&consumer).await.unwrap().uid().unwrap();
    let shard_label = |uid: &str| format!("{}-of-2", shard_of_n(uid, 2));
    for (name, uid) in [("handoff", &producer_uid), ("consumed", &consumer_uid)] {
        let cm = cms.get(name).await.unwrap();
        assert_eq!(
            cm.labels().get("enoki.dev/shard"),
            Some(&shard_label(uid)),
            "{name}"
        );
    }
    let slices: Api<ResourceSlice> = env.api();
    for s in slices.list(&Default::default()).await.unwrap().items {
        let owner = &s.owner_references()[0].uid;
        assert_eq!(s.labels().get("enoki.dev/shard"), Some(&shard_label(owner)));
    }
    // The producer's output changes: the consumer, on the other replica, follows at once
    // (the resync is 5 minutes).
    set_echo_items(&env, "producer-items", &handoff("2")).await;
    eventually(
        "the consumer follows the handoff",
        Duration::from_secs(60),
        || async { (consumed().await.as_deref() == Some("2")).then_some(()) },
    )
    .await;
    let reader = &owners[&shard_of_n(&consumer_uid, 2)];
    assert_watches_filtered(&env, &since, &owners, reader).await;
    drop(replicas);
}
