//! The baselines measured in the same run: the raw server-side-apply floor, the protocol
//! floor (what Eno's API needs per Composition, from a plain client), one
//! `kubectl apply --server-side`, and the write phase read from the audit log.

use super::*;

pub(crate) fn items(prefix: &str, n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{prefix}{i}")},
                "data": {"index": i.to_string(), "payload": "x".repeat(64)}})
        })
        .collect()
}

/// The raw floor: `n` server-side applies of the items from a plain client.
pub(crate) async fn raw_apply(env: &TestEnv, objects: &[Value], concurrency: usize) -> Duration {
    let cms: Api<ConfigMap> = env.api();
    let pp = PatchParams::apply("bench-raw").force();
    let start = Instant::now();
    let results: Vec<_> = futures::stream::iter(objects.iter().map(|o| {
        let (cms, pp) = (cms.clone(), pp.clone());
        async move {
            let name = o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            cms.patch(&name, &pp, &Patch::Apply(o)).await
        }
    }))
    .buffer_unordered(concurrency)
    .collect()
    .await;
    let elapsed = start.elapsed();
    assert!(results.iter().all(Result::is_ok), "raw applies failed");
    elapsed
}

/// The protocol floor: the writes any reconciler of Eno's API makes per Composition, from a
/// plain client with no reads and nothing between them — the input and the Composition created
/// (as the fleet's clients do), its finalizer (here an annotation of the same size of write,
/// so nothing is left blocking), the ResourceSlice created, its `per` objects server-side
/// applied (at once), the slice's status and the Composition's status written once each.
/// `concurrency` Compositions at a time. No controller runs meanwhile (the enoki of the
/// `many` case starts later, in a namespace of its own); everything written is deleted
/// afterwards, outside the timing.
pub(crate) async fn protocol_floor(
    env: &TestEnv,
    comps: usize,
    per: usize,
    concurrency: usize,
) -> Duration {
    let start = Instant::now();
    futures::stream::iter(0..comps)
        // One request in flight per Composition: `concurrency` in all, as the raw floor.
        .for_each_concurrent(concurrency, |i| {
            protocol_one(env, i, items(&format!("p{i}-"), per), 1)
        })
        .await;
    let elapsed = start.elapsed();
    protocol_cleanup(env).await;
    elapsed
}

/// What Eno's API needs for one Composition `i` of `objects`, from a plain client: its input
/// and the Composition, the finalizer, the ResourceSlice, the objects (`within` requests in
/// flight), the slice's status and the Composition's.
pub(crate) async fn protocol_one(env: &TestEnv, i: usize, objects: Vec<Value>, within: usize) {
    let cms: Api<ConfigMap> = env.api();
    let compositions: Api<crds::Composition> = env.api();
    let slices: Api<crds::ResourceSlice> = env.api();
    let pp = PatchParams::apply("bench-protocol").force();
    let input = format!("items-{i}");
    harness::set_echo_items(env, &input, &Value::Array(objects.clone())).await;
    let name = format!("proto-{i}");
    harness::apply_composition(env, &name, "bench-protocol-none", &input, json!({})).await;
    let mark = json!({"metadata": {"annotations": {"bench.enoki.dev/finalizer": "x"}}});
    compositions
        .patch(&name, &PatchParams::default(), &Patch::Merge(&mark))
        .await
        .expect("the finalizer's write");
    let slice = crds::ResourceSlice::new(
        &format!("{name}-slice"),
        crds::ResourceSliceSpec {
            synthesis_uuid: format!("uuid-{i}"),
            resources: objects
                .iter()
                .map(|o| crds::Manifest {
                    manifest: o.to_string(),
                    ..crds::Manifest::default()
                })
                .collect(),
            compact_bytes: None,
        },
    );
    slices
        .create(&kube::api::PostParams::default(), &slice)
        .await
        .expect("the ResourceSlice");
    let (cms, pp) = (&cms, &pp);
    futures::stream::iter(&objects)
        .for_each_concurrent(within, |o| async move {
            let name = o["metadata"]["name"].as_str().unwrap_or_default();
            cms.patch(name, pp, &Patch::Apply(o))
                .await
                .expect("a protocol apply");
        })
        .await;
    let states: Vec<Value> = (0..objects.len())
        .map(|_| json!({"reconciled": true, "ready": "2026-01-01T00:00:00Z"}))
        .collect();
    slices
        .patch_status(
            &format!("{name}-slice"),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"resources": states}})),
        )
        .await
        .expect("the slice's status");
    compositions
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"simplified": {"status": "Ready"}}})),
        )
        .await
        .expect("the Composition's status");
}

/// Deletes what the protocol floors wrote.
pub(crate) async fn protocol_cleanup(env: &TestEnv) {
    let cms: Api<ConfigMap> = env.api();
    let compositions: Api<crds::Composition> = env.api();
    let slices: Api<crds::ResourceSlice> = env.api();
    let all = ListParams::default();
    delete_all(&compositions, &all, "protocol floor's Compositions").await;
    delete_all(&slices, &all, "protocol floor's ResourceSlices").await;
    delete_all(&cms, &created_here(), "protocol floor's ConfigMaps").await;
}

/// The ConfigMaps a bench created in its namespace (not a root CA ConfigMap, which a control
/// plane that publishes one puts back).
pub(crate) fn created_here() -> ListParams {
    ListParams::default().fields("metadata.name!=kube-root-ca.crt")
}

pub(crate) fn at(t: &str) -> k8s_openapi::jiff::Timestamp {
    t.parse().expect("an RFC 3339 time")
}

/// (Composition applied → enoki's first ConfigMap write, first → last write), from the
/// audit log.
pub(crate) fn write_phase(env: &TestEnv, since: &str) -> (Duration, Duration) {
    let writes: Vec<String> = harness::audited_requests(&env.namespace, since)
        .into_iter()
        .filter(|r| r.by_enoki() && r.verb == "patch" && r.resource == "configmaps")
        .map(|r| r.received)
        .collect();
    let first = writes.iter().min().expect("enoki wrote");
    let last = writes.iter().max().expect("enoki wrote");
    let span = |a: &str, b: &str| {
        let d = at(b).duration_since(at(a));
        Duration::try_from(d).unwrap_or_default()
    };
    (span(since, first), span(first, last))
}

pub(crate) fn kubectl_apply(env: &TestEnv, objects: &[Value]) -> Duration {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let path = std::env::temp_dir().join(format!("bench-{}.json", env.namespace));
    std::fs::write(&path, list.to_string()).unwrap();
    let start = Instant::now();
    let out = std::process::Command::new("kubectl")
        .args(["apply", "--server-side", "-n", &env.namespace, "-f"])
        .arg(&path)
        .env("KUBECONFIG", harness::kubeconfig_path())
        .output()
        .expect("kubectl runs");
    let elapsed = start.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    elapsed
}
