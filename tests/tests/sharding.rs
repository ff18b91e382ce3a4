//! `enoki run --shards 2` with three replicas on the real control plane: every Composition is
//! reconciled by exactly one replica (the holder of its shard's Lease — counted from the
//! API server's audit log, where each replica's User-Agent names it), a replica holding no
//! shard caches and reconciles nothing, and when a shard's holder is killed a standby takes
//! the Lease over and the shard's Compositions keep converging. And `--shards 4` over two
//! replicas: two shards each, served by one controller stack per replica, and all four by
//! the survivor when one replica stops.
#![allow(clippy::unwrap_used)] // test code

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use harness::{
    Enoki, TestEnv, apply_composition, audited_requests, composition_ready, echo_module,
    eventually, install_crds, install_synthesizer, kubeconfig_path, now_rfc3339, set_echo_items,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::json;

#[path = "sharding/watches.rs"]
mod watches;

const COMPOSITIONS: usize = 40;
const SHARDS: u32 = 2;

/// The shard of a Composition UID, as `reconciler/controller/src/run/shard.rs` documents it
/// (FNV-1a 64 of the UID, modulo the shard count).
fn shard_of(uid: &str) -> u32 {
    shard_of_n(uid, SHARDS)
}

fn shard_of_n(uid: &str, shards: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in uid.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    u32::try_from(h % u64::from(shards)).unwrap()
}

/// The replica named in an enoki User-Agent: `enoki/<version> (<identity>)`.
fn replica_of(user_agent: &str) -> Option<String> {
    let inner = user_agent.split_once('(')?.1.split_once(')')?.0;
    Some(inner.split('-').take(2).collect::<Vec<_>>().join("-"))
}

fn items(i: usize, x: &str) -> serde_json::Value {
    json!([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("out-{i}")},
        "data": {"x": x}}])
}

async fn holders(env: &TestEnv) -> BTreeMap<u32, String> {
    holders_of(env, SHARDS).await
}

async fn holders_of(env: &TestEnv, shards: u32) -> BTreeMap<u32, String> {
    let leases: Api<Lease> = env.api();
    let mut out = BTreeMap::new();
    for shard in 0..shards {
        let name = format!("enoki-controller-shard-{shard}-of-{shards}");
        if let Some(holder) = leases
            .get_opt(&name)
            .await
            .unwrap()
            .and_then(|l| l.spec?.holder_identity)
        {
            out.insert(
                shard,
                holder.split('-').take(2).collect::<Vec<_>>().join("-"),
            );
        }
    }
    out
}

/// Which replicas wrote each `out-<i>` ConfigMap after `since`.
fn writers(ns: &str, since: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in audited_requests(ns, since) {
        if r.by_enoki() && r.is_write() && r.resource == "configmaps" && r.name.starts_with("out-")
        {
            let replica = replica_of(&r.user_agent).unwrap_or_else(|| r.user_agent.clone());
            out.entry(r.name).or_default().insert(replica);
        }
    }
    out
}

/// Whether every `out-<i>` ConfigMap (`i < n`) has `x` = `x`.
async fn all_outputs_are(env: &TestEnv, n: usize, x: &str) -> Option<()> {
    let cms: Api<ConfigMap> = env.api();
    for i in 0..n {
        let cm = cms.get_opt(&format!("out-{i}")).await.unwrap()?;
        if cm.data?.get("x").map(String::as_str) != Some(x) {
            return None;
        }
    }
    Some(())
}

fn start(env: &TestEnv, replica: usize) -> Enoki {
    start_with(env, replica, SHARDS, 8)
}

fn start_with(env: &TestEnv, replica: usize, shards: u32, lease_secs: u32) -> Enoki {
    let hostname = format!("replica-{replica}");
    Enoki::start_as(
        &env.namespace,
        &[
            "--shards",
            &shards.to_string(),
            "--leader-election-namespace",
            &env.namespace,
            "--lease-duration-secs",
            &lease_secs.to_string(),
        ],
        &kubeconfig_path(),
        &[("HOSTNAME", hostname.as_str())],
    )
}

#[tokio::test]
async fn three_replicas_two_shards_each_composition_has_one_writer_and_survives_a_kill() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let ns = env.namespace.clone();
    let synth = install_synthesizer(&env, "shards", &echo_module()).await;
    let since = now_rfc3339();
    for i in 0..COMPOSITIONS {
        set_echo_items(&env, &format!("items-{i}"), &items(i, "1")).await;
        apply_composition(
            &env,
            &format!("c-{i}"),
            &synth,
            &format!("items-{i}"),
            json!({}),
        )
        .await;
    }
    let mut replicas: Vec<Option<Enoki>> = (0..3).map(|r| Some(start(&env, r))).collect();

    eventually(
        "all 40 Compositions are Ready",
        Duration::from_secs(240),
        || async {
            for i in 0..COMPOSITIONS {
                if !composition_ready(&env, &format!("c-{i}")).await {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    let comps: Api<crds::Composition> = env.api();
    let shard_of_comp: BTreeMap<String, u32> = comps
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|c| (c.name_any(), shard_of(&c.uid().unwrap())))
        .collect();
    let owners = holders(&env).await;
    assert_eq!(
        owners.len(),
        SHARDS as usize,
        "every shard is held: {owners:?}"
    );

    // Exactly one writer per Composition's object, and it is its shard's holder.
    harness::audit_barrier(&env).await;
    let written = writers(&ns, &since);
    assert_eq!(written.len(), COMPOSITIONS, "{written:?}");
    for (name, by) in &written {
        let i = name.trim_start_matches("out-");
        let shard = shard_of_comp[&format!("c-{i}")];
        assert_eq!(
            by,
            &BTreeSet::from([owners[&shard].clone()]),
            "{name} (shard {shard}) was written by {by:?}; holders {owners:?}"
        );
    }
    assert_replicas_work_only_on_their_shards(&replicas, &owners);
    assert_caches_hold_only_their_shards(&env, &replicas, &owners, &shard_of_comp).await;
    eprintln!("shard holders: {owners:?}");
    kill_the_holder_of_shard_0(&env, &mut replicas, &owners, &shard_of_comp).await;
    // Every Composition, moved or not, ends converged.
    for i in 0..COMPOSITIONS {
        let name = format!("c-{i}");
        harness::invariants::wait_converged(&env.client, &ns, &name, Duration::from_secs(60)).await;
    }
}

type Holders = BTreeMap<u32, String>;

/// Per replica: the shards it holds (metric) are the Leases it holds, and only holders
/// reconciled anything.
fn assert_replicas_work_only_on_their_shards(replicas: &[Option<Enoki>], owners: &Holders) {
    for (r, replica) in replicas.iter().enumerate() {
        let replica = replica.as_ref().unwrap();
        let name = format!("replica-{r}");
        let held: Vec<u32> = owners
            .iter()
            .filter(|(_, h)| **h == name)
            .map(|(s, _)| *s)
            .collect();
        let held_metric = replica.metric("enoki_shard_held").unwrap();
        assert_eq!(held_metric, held.len() as f64, "{name} holds {held:?}");
        let reconciles = replica.metric("enoki_shard_reconciles_total").unwrap();
        if held.is_empty() {
            assert_eq!(reconciles, 0.0, "standby {name} reconciled something");
        } else {
            assert!(
                reconciles > 0.0,
                "{name} holds {held:?} but reconciled nothing"
            );
        }
    }
}

/// Each holder caches exactly its shards' Compositions and managed objects.
async fn assert_caches_hold_only_their_shards(
    env: &TestEnv,
    replicas: &[Option<Enoki>],
    owners: &Holders,
    shard_of_comp: &BTreeMap<String, u32>,
) {
    // Each holder caches exactly its shards' Compositions, and of the managed objects (the
    // metadata watch is cluster-wide, so other tests' leftovers count too) exactly those whose
    // owner UID hashes to its shards; nothing of the other shard. The sweep publishes these
    // every 15 s.
    let all_cms: Api<ConfigMap> = Api::all(env.client.clone());
    for (r, replica) in replicas.iter().enumerate() {
        let replica = replica.as_ref().unwrap();
        let name = format!("replica-{r}");
        let expected = shard_of_comp
            .values()
            .filter(|s| owners.get(s) == Some(&name))
            .count() as f64;
        eventually(
            &format!("{name} caches only its shards' Compositions and objects"),
            Duration::from_secs(45),
            || async {
                let managed = all_cms
                    .list_metadata(&ListParams::default().labels("enoki.dev/managed-by"))
                    .await
                    .unwrap()
                    .items
                    .iter()
                    .filter(|m| {
                        let owner = &m.labels()["enoki.dev/managed-by"];
                        owners.get(&shard_of(owner)) == Some(&name)
                    })
                    .count() as f64;
                let comps = replica.metric("enoki_shard_compositions")?;
                let objects = replica.metric("enoki_shard_managed_objects")?;
                (comps == expected && objects == managed).then_some(())
            },
        )
        .await;
        // The input watch of the namespace is shared by the shards: whole objects are only
        // its own Compositions' inputs and their Synthesizer; the other shard's inputs are
        // metadata. A standby reads nothing.
        let holds = expected > 0.0;
        let inputs =
            |kept: &str| replica.metric_labelled("enoki_input_cache_objects", &[("kept", kept)]);
        let others = COMPOSITIONS as f64 - expected;
        eventually(
            &format!("{name} keeps whole only the inputs its Compositions read"),
            Duration::from_secs(45),
            || async {
                let (whole, metadata) = (inputs("whole"), inputs("metadata"));
                eprintln!("{name}: input cache {whole} whole, {metadata} metadata");
                let whole_ok = whole == if holds { expected + 1.0 } else { 0.0 };
                (whole_ok && (!holds || metadata >= others)).then_some(())
            },
        )
        .await;
    }
}

/// Kills the holder of shard 0: another replica takes its Lease over, and the shard's
/// Compositions converge after an input change, written only by the new holder.
async fn kill_the_holder_of_shard_0(
    env: &TestEnv,
    replicas: &mut [Option<Enoki>],
    owners: &Holders,
    shard_of_comp: &BTreeMap<String, u32>,
) {
    let ns = env.namespace.clone();
    let victim = owners[&0].clone();
    let index: usize = victim.trim_start_matches("replica-").parse().unwrap();
    replicas[index].take().unwrap().stop();
    let moved: Vec<usize> = (0..COMPOSITIONS)
        .filter(|i| shard_of_comp[&format!("c-{i}")] == 0)
        .collect();
    assert!(!moved.is_empty(), "shard 0 has Compositions");
    let since_kill = now_rfc3339();
    for i in &moved {
        set_echo_items(env, &format!("items-{i}"), &items(*i, "2")).await;
    }
    let cms: Api<ConfigMap> = env.api();
    eventually(
        "shard 0's Compositions converge under the new holder",
        Duration::from_secs(120),
        || async {
            for i in &moved {
                let x = cms
                    .get_opt(&format!("out-{i}"))
                    .await
                    .unwrap()
                    .and_then(|c| c.data?.get("x").cloned());
                if x.as_deref() != Some("2") {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    let new_owners = holders(env).await;
    assert_ne!(
        new_owners[&0], victim,
        "shard 0 is still held by the killed replica"
    );
    harness::audit_barrier(env).await;
    for (name, by) in writers(&ns, &since_kill) {
        assert_eq!(
            by,
            BTreeSet::from([new_owners[&0].clone()]),
            "{name} was written by {by:?} after the kill"
        );
    }
}

/// `--shards 4` over two replicas started together: two shards each (the membership Leases
/// tell each replica it has one peer), every Composition written only by its shard's
/// holder; when one replica stops (SIGTERM: it
/// deletes its membership Lease), the other takes all four (its stack lists again) and
/// converges the moved Compositions; when a third replica joins, the survivor hands two
/// shards back to it.
#[tokio::test]
async fn four_shards_over_two_replicas_split_two_and_two_and_follow_a_leave_and_a_join() {
    const FOUR: u32 = 4;
    const N: usize = 16;
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let ns = env.namespace.clone();
    let synth = install_synthesizer(&env, "shards4", &echo_module()).await;
    for i in 0..N {
        set_echo_items(&env, &format!("items-{i}"), &items(i, "1")).await;
        apply_composition(
            &env,
            &format!("c-{i}"),
            &synth,
            &format!("items-{i}"),
            json!({}),
        )
        .await;
    }
    let mut replicas: Vec<Enoki> = (0..2).map(|r| start_with(&env, r, FOUR, 8)).collect();
    let leases: Api<Lease> = env.api();
    let members = ListParams::default().labels("enoki.dev/controller-member");
    eventually(
        "all 16 Compositions are Ready",
        Duration::from_secs(180),
        || async {
            for i in 0..N {
                if !composition_ready(&env, &format!("c-{i}")).await {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    // Two each (eventually: a replica that started late gets its two handed back).
    let owners = eventually(
        "4 shards over 2 replicas, 2 each",
        Duration::from_secs(90),
        || async {
            let owners = holders_of(&env, FOUR).await;
            let on = |r: &str| owners.values().filter(|h| *h == r).count();
            (on("replica-0") == 2 && on("replica-1") == 2).then_some(owners)
        },
    )
    .await;
    let since = now_rfc3339();
    for i in 0..N {
        set_echo_items(&env, &format!("items-{i}"), &items(i, "1b")).await;
    }
    eventually(
        "every Composition converges",
        Duration::from_secs(120),
        || all_outputs_are(&env, N, "1b"),
    )
    .await;
    for (r, e) in replicas.iter().enumerate() {
        assert_eq!(e.metric("enoki_shard_held"), Some(2.0), "replica-{r}");
    }
    assert_eq!(leases.list(&members).await.unwrap().items.len(), 2);
    harness::audit_barrier(&env).await;
    let written = writers(&ns, &since);
    let comps: Api<crds::Composition> = env.api();
    let shard_of_comp: BTreeMap<String, u32> = comps
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|c| (c.name_any(), shard_of_n(&c.uid().unwrap(), FOUR)))
        .collect();
    assert_eq!(written.len(), N, "{written:?}");
    for (name, by) in &written {
        let shard = shard_of_comp[&format!("c-{}", name.trim_start_matches("out-"))];
        assert_eq!(
            by,
            &BTreeSet::from([owners[&shard].clone()]),
            "{name} (shard {shard})"
        );
    }

    // replica-0 leaves: its membership Lease goes, and replica-1 takes all four shards.
    assert!(
        replicas[0].terminate(Duration::from_secs(30)),
        "replica-0 did not stop"
    );
    eventually(
        "replica-0's membership Lease is gone",
        Duration::from_secs(20),
        || async { (leases.list(&members).await.unwrap().items.len() == 1).then_some(()) },
    )
    .await;
    eventually(
        "replica-1 holds all four shards",
        Duration::from_secs(60),
        || async { (replicas[1].metric("enoki_shard_held")? == 4.0).then_some(()) },
    )
    .await;
    // One Composition of each of shards 1 to 3 also emits an object of a kind of its own: a
    // replica that hands such a shard back stops that kind's watch.
    let extra_kinds = [
        json!({"apiVersion": "v1", "kind": "ServiceAccount"}),
        json!({"apiVersion": "v1", "kind": "Secret"}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "rules": []}),
    ];
    let special: BTreeMap<usize, u32> = (1..FOUR)
        .filter_map(|s| Some(((0..N).find(|i| shard_of_comp[&format!("c-{i}")] == s)?, s)))
        .collect();
    let items_for = |i: usize, x: &str| {
        let mut v = items(i, x);
        if let Some(s) = special.get(&i) {
            let mut extra = extra_kinds[*s as usize - 1].clone();
            extra["metadata"] = json!({"name": format!("extra-{i}")});
            v.as_array_mut().unwrap().push(extra);
        }
        v
    };
    for i in 0..N {
        set_echo_items(&env, &format!("items-{i}"), &items_for(i, "2")).await;
    }
    eventually(
        "every Composition converges under replica-1",
        Duration::from_secs(120),
        || all_outputs_are(&env, N, "2"),
    )
    .await;
    assert_eq!(
        holders_of(&env, FOUR)
            .await
            .values()
            .collect::<BTreeSet<_>>(),
        BTreeSet::from([&"replica-1".to_string()])
    );

    // replica-2 joins: replica-1 hands two shards back (never shard 0), replica-2 takes them,
    // and each Composition is written by its shard's holder only, the hand-back included.
    let since_join = now_rfc3339();
    replicas.push(start_with(&env, 2, FOUR, 8));
    eventually(
        "the shards split 2 and 2 again",
        Duration::from_secs(120),
        || async {
            let owners = holders_of(&env, FOUR).await;
            let on = |r: &str| owners.values().filter(|h| *h == r).count();
            (owners.len() == 4 && on("replica-1") == 2 && on("replica-2") == 2).then_some(())
        },
    )
    .await;
    let owners = holders_of(&env, FOUR).await;
    assert_eq!(
        owners[&0], "replica-1",
        "shard 0 was handed back: {owners:?}"
    );
    for r in [1, 2] {
        eventually(
            &format!("replica-{r} reports 2 shards"),
            Duration::from_secs(30),
            || async { (replicas[r].metric("enoki_shard_held")? == 2.0).then_some(()) },
        )
        .await;
    }
    let since_split = now_rfc3339();
    for i in 0..N {
        set_echo_items(&env, &format!("items-{i}"), &items_for(i, "3")).await;
    }
    eventually(
        "every Composition converges after the split",
        Duration::from_secs(120),
        || all_outputs_are(&env, N, "3"),
    )
    .await;
    // replica-1 watched every extra kind while it held the four shards; now both replicas
    // watch the same kinds (inputs, Synthesizers, ConfigMaps) plus the extra kinds of the
    // shards they hold, and no more.
    let extras_on = |r: &str| special.values().filter(|s| owners[*s] == r).count() as f64;
    let want = extras_on("replica-1") - extras_on("replica-2");
    eventually(
        "replica-1 stops the watches only the shards it handed back needed",
        Duration::from_secs(60),
        || async {
            let one = replicas[1].metric("enoki_watched_kinds")?;
            let two = replicas[2].metric("enoki_watched_kinds")?;
            eprintln!(
                "watched kinds: replica-1 {one}, replica-2 {two} (want a difference of {want})"
            );
            (one - two == want).then_some(())
        },
    )
    .await;
    harness::audit_barrier(&env).await;
    // From the join on, no object was written by replica-1 after replica-2 had written it:
    // a shard handed back is not written by its old holder any more.
    let mut order: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for r in audited_requests(&ns, &since_join) {
        if r.by_enoki() && r.is_write() && r.resource == "configmaps" && r.name.starts_with("out-")
        {
            let who = replica_of(&r.user_agent).unwrap_or_default();
            order.entry(r.name).or_default().push((r.received, who));
        }
    }
    for (name, mut writes) in order {
        writes.sort();
        let first_new = writes.iter().position(|(_, w)| w == "replica-2");
        if let Some(p) = first_new {
            assert!(
                writes[p..].iter().all(|(_, w)| w == "replica-2"),
                "{name} was written by replica-1 after replica-2 took it: {writes:?}"
            );
        }
    }
    for (name, by) in writers(&ns, &since_split) {
        let shard = shard_of_comp[&format!("c-{}", name.trim_start_matches("out-"))];
        assert_eq!(
            by,
            BTreeSet::from([owners[&shard].clone()]),
            "{name} (shard {shard}) after the split"
        );
    }
}
