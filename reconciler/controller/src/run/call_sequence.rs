//! The call-sequence tier: one Composition's passes against [`FakeApi`] (no control plane),
//! asserting what each pass reads and writes, in which order — a new synthesis, the steady
//! state, drift, a changed spec, deletion. Runs in `make test-unit` in seconds.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use kube::runtime::controller::Action;
use kube::runtime::reflector;
use serde_json::{Value, json};

use super::cluster::Cluster;
use super::context::{Context, Parts};
use super::fake_api::{Call, FakeApi};
use super::shard::{InFlight, Shards, fixed};
use crds::{Composition, ResourceSlice};

const COMPOSITION: &str = "/apis/enoki.dev/v1alpha1/namespaces/team/compositions/app";
const MODULE: &str = "/api/v1/namespaces/enoki-system/configmaps/module";
const OUTPUT: &str = "/api/v1/namespaces/team/configmaps/out";

/// A WASI module that drains stdin and emits one ConfigMap, `out` with `k: v`.
const EMIT_ONE: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 64) "{\"apiVersion\":\"config.kubernetes.io/v1\",\"kind\":\"ResourceList\",\"items\":[{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"out\"},\"data\":{\"k\":\"v\"}}]}")
  (func (export "_start")
    (block $done
      (loop $read
        (i32.store (i32.const 0) (i32.const 4096))
        (i32.store (i32.const 4) (i32.const 60000))
        (br_if $done (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
        (br_if $read (i32.load (i32.const 8)))))
    (i32.store (i32.const 0) (i32.const 64))
    (i32.store (i32.const 4) (i32.const 154))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#;

/// A controller Context on `client`, with the options of a plain `enoki run` (the controller's own identity).
fn controller(client: kube::Client) -> Arc<Context> {
    let args = crate::cli::Args::try_parse_from(["enoki", "run"]).expect("flags");
    let crate::cli::Command::Run(run) = args.command else {
        unreachable!("enoki run")
    };
    let opts = crate::options(&run).expect("options");
    let config = kube::Config::new("http://127.0.0.1:1".parse().expect("url"));
    let cluster = Cluster::new(client.clone(), config, None, None, Duration::from_secs(600));
    let (sender, _) = tokio::sync::mpsc::unbounded_channel();
    let (synthesis_slots, memory_budget) = Parts::limits(&opts);
    let mut registry = prometheus_client::registry::Registry::default();
    let host = opts.sandbox.host(None, 1).expect("wasm host");
    Arc::new(Context::new(Parts {
        watches: super::watches::Watches::new(
            client.clone(),
            client,
            sender,
            fixed(Shards::ALL),
            true,
        ),
        management: cluster.clone(),
        target: cluster,
        host: Arc::new(host),
        metrics: super::metrics::Metrics::register(&mut registry),
        reporter: kube::runtime::events::Reporter {
            controller: "enoki".into(),
            instance: None,
        },
        compositions: reflector::store::<Composition>().0,
        slices: reflector::store::<ResourceSlice>().0,
        slots: super::sandbox::Slots::new(1),
        synthesis_slots,
        memory_budget,
        shards: fixed(Shards::ALL),
        in_flight: InFlight::new(1),
        slice_keys: Arc::new(super::sealing::SliceKeys::default()),
        opts,
    }))
}

/// The fake API with a Synthesizer (its module in a ConfigMap) and Composition `team/app`.
/// Each test's Synthesizer has a name of its own (`synth-<n>`, recorded as `synth`): a
/// module fetch is one per Synthesizer name in the process.
fn world() -> (FakeApi, Arc<Context>) {
    static TESTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let synth = format!(
        "synth-{}",
        TESTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let (fake, client) = FakeApi::start();
    let wasm = wat::parse_str(EMIT_ONE).expect("module");
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(wasm);
    fake.put(
        MODULE,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "module", "namespace": "enoki-system"},
            "binaryData": {"module.wasm": encoded}}),
    );
    fake.put(
        &format!("/apis/enoki.dev/v1alpha1/synthesizers/{synth}"),
        json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Synthesizer",
            "metadata": {"name": synth},
            "spec": {"module": {"configMap":
                {"namespace": "enoki-system", "name": "module", "key": "module.wasm"}}}}),
    );
    fake.put(
        COMPOSITION,
        json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
            "metadata": {"name": "app", "namespace": "team"},
            "spec": {"synthesizer": {"name": synth}}}),
    );
    (fake, controller(client))
}

/// One pass of the Composition as stored now; the requests it made (see [`generic`]).
async fn pass(fake: &FakeApi, ctx: &Arc<Context>) -> (Action, Vec<Call>) {
    fake.clear_calls();
    let comp: Composition =
        serde_json::from_value(fake.get(COMPOSITION).expect("Composition")).expect("parse");
    let action = super::composition::reconcile(Arc::new(comp), ctx.clone())
        .await
        .expect("pass");
    (action, fake.calls().iter().map(|c| generic(c)).collect())
}

/// Passes until one writes nothing (at most `max`); the requests of each pass.
async fn settle(fake: &FakeApi, ctx: &Arc<Context>, max: usize) -> Vec<Vec<Call>> {
    let mut passes = Vec::new();
    for _ in 0..max {
        if fake.get(COMPOSITION).is_none() {
            break;
        }
        let (_, calls) = pass(fake, ctx).await;
        let quiet = writes(&calls).is_empty();
        passes.push(calls);
        if quiet {
            break;
        }
    }
    passes
}

/// A call with a generated slice name written `*` and the test's Synthesizer `synth`:
/// `resourceslices/app-1a2b3c4d-0/status` → `resourceslices/*/status`.
fn generic(call: &str) -> String {
    call.split(' ')
        .map(|word| {
            let parts: Vec<&str> = word.split('/').collect();
            match parts.as_slice() {
                ["synthesizers", _, rest @ ..] => ["synthesizers", "synth"]
                    .into_iter()
                    .chain(rest.iter().copied())
                    .collect::<Vec<_>>()
                    .join("/"),
                ["resourceslices", _, rest @ ..] => ["resourceslices", "*"]
                    .into_iter()
                    .chain(rest.iter().copied())
                    .collect::<Vec<_>>()
                    .join("/"),
                _ => word.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The writes among `calls` (dry runs left out).
fn writes(calls: &[Call]) -> Vec<Call> {
    calls
        .iter()
        .filter(|c| {
            ["PATCH", "POST", "PUT", "DELETE"]
                .iter()
                .any(|v| c.starts_with(v))
        })
        .filter(|c| !c.contains("[dry run]"))
        .cloned()
        .collect()
}

/// The writes of each pass.
fn writes_per_pass(passes: &[Vec<Call>]) -> Vec<Vec<Call>> {
    passes.iter().map(|p| writes(p)).collect()
}

fn position(calls: &[Call], prefix: &str) -> usize {
    calls
        .iter()
        .position(|c| c.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} in {calls:#?}"))
}

fn count(calls: &[Call], prefix: &str) -> usize {
    calls.iter().filter(|c| c.starts_with(prefix)).count()
}

fn status_of(fake: &FakeApi) -> Value {
    fake.get(COMPOSITION).expect("Composition")["status"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_composition_gets_its_finalizer_then_a_synthesis_then_its_apply() {
    let (fake, ctx) = world();
    let passes = settle(&fake, &ctx, 8).await;
    // Pass 1: the finalizer, nothing else (nothing is written for a Composition enoki could
    // not clean up). Pass 2: the synthesis (module reported on the Synthesizer, one slice,
    // one status write). Pass 3: the apply (one server-side apply, the slice's recorded
    // states, one status write). Pass 4: nothing to write.
    assert_eq!(
        writes_per_pass(&passes),
        [
            vec!["PATCH compositions/app (merge)"],
            vec![
                "PATCH synthesizers/synth/status (merge)",
                "POST resourceslices",
                "PATCH compositions/app/status (merge)",
            ],
            vec![
                "PATCH configmaps/out (apply)",
                "PATCH resourceslices/*/status (merge)",
                "PATCH compositions/app/status (merge)",
            ],
            vec![],
        ],
        "{passes:#?}"
    );
    // What the synthesis reads comes before what it writes.
    let synthesis = &passes[1];
    let slice = position(synthesis, "POST resourceslices");
    assert!(
        position(synthesis, "GET synthesizers/synth") < slice,
        "{synthesis:#?}"
    );
    assert!(
        position(synthesis, "GET configmaps/module") < slice,
        "{synthesis:#?}"
    );
    // The apply reads the live object (a GET when no cache has it) before it writes it.
    let apply = &passes[2];
    assert!(
        position(apply, "GET configmaps/out") < position(apply, "PATCH configmaps/out"),
        "{apply:#?}"
    );
    assert_eq!(
        fake.get(OUTPUT).expect("applied")["data"],
        json!({"k": "v"})
    );
    let status = status_of(&fake);
    assert!(
        status["currentSynthesis"]["reconciled"].is_string(),
        "{status:#}"
    );
    assert!(
        status["currentSynthesis"]["ready"].is_string(),
        "{status:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_with_nothing_changed_writes_nothing_and_synthesizes_nothing() {
    let (fake, ctx) = world();
    settle(&fake, &ctx, 8).await;
    let (_, calls) = pass(&fake, &ctx).await;
    assert!(writes(&calls).is_empty(), "{calls:#?}");
    // With no cache synced every read is a GET: the Synthesizer, the slice, the live object;
    // the module is not read again and nothing is synthesized.
    assert_eq!(count(&calls, "GET configmaps/module"), 0, "{calls:#?}");
    assert_eq!(count(&calls, "GET configmaps/out"), 1, "{calls:#?}");
    assert!(calls.iter().all(|c| c.starts_with("GET ")), "{calls:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_is_reverted_with_one_apply_and_no_status_write() {
    let (fake, ctx) = world();
    settle(&fake, &ctx, 8).await;
    let status = status_of(&fake);
    let mut drifted = fake.get(OUTPUT).expect("applied");
    drifted["data"]["k"] = json!("changed by hand");
    fake.put(OUTPUT, drifted);
    let passes = settle(&fake, &ctx, 4).await;
    assert_eq!(
        writes_per_pass(&passes),
        [vec!["PATCH configmaps/out (apply)"], vec![]],
        "{passes:#?}"
    );
    assert_eq!(fake.get(OUTPUT).expect("object")["data"]["k"], "v");
    // Nothing about the Composition changed: its status is not written.
    assert_eq!(status_of(&fake), status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_change_synthesizes_again_keeps_identical_slices_and_writes_status_once() {
    let (fake, ctx) = world();
    settle(&fake, &ctx, 8).await;
    let before = status_of(&fake)["currentSynthesis"].clone();
    let mut comp = fake.get(COMPOSITION).expect("Composition");
    comp["spec"]["synthesisEnv"] = json!([{"name": "X", "value": "1"}]);
    comp["metadata"]["generation"] = json!(2);
    fake.put(COMPOSITION, comp);
    let passes = settle(&fake, &ctx, 8).await;
    // The synthesis pass writes status once; its output is the same, so its slices are kept
    // (no new slice) and nothing is applied again; the next pass records it reconciled.
    assert_eq!(
        writes_per_pass(&passes),
        [
            vec!["PATCH compositions/app/status (merge)"],
            vec!["PATCH compositions/app/status (merge)"],
            vec![],
        ],
        "{passes:#?}"
    );
    let status = status_of(&fake);
    let current = &status["currentSynthesis"];
    assert_eq!(current["observedCompositionGeneration"], 2, "{status:#}");
    assert_ne!(current["uuid"], before["uuid"], "{status:#}");
    assert_eq!(
        current["resourceSlices"], before["resourceSlices"],
        "{status:#}"
    );
    assert_eq!(
        status["previousSynthesis"]["uuid"], before["uuid"],
        "{status:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_deletes_the_output_records_it_then_releases_the_finalizer() {
    let (fake, ctx) = world();
    settle(&fake, &ctx, 8).await;
    let mut comp = fake.get(COMPOSITION).expect("Composition");
    comp["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:05Z");
    fake.put(COMPOSITION, comp);
    let passes = settle(&fake, &ctx, 8).await;
    assert_eq!(
        writes_per_pass(&passes),
        [
            vec![
                "DELETE configmaps/out",
                "PATCH resourceslices/*/status (merge)",
                "PATCH compositions/app/status (merge)",
            ],
            // Released once the output is confirmed gone; the Event says so.
            vec!["PATCH compositions/app (merge)", "POST events"],
        ],
        "{passes:#?}"
    );
    assert!(fake.get(OUTPUT).is_none());
    assert!(
        fake.get(COMPOSITION).is_none(),
        "the finalizer was the last one"
    );
}

/// A module fetch that never answers holds no pass longer than the fetch wait (virtual time:
/// the runtime's clock is paused and jumps when every task waits).
#[tokio::test(start_paused = true)]
async fn a_hanging_module_fetch_gives_the_pass_back_after_the_fetch_wait() {
    let (fake, ctx) = world();
    fake.hang("GET configmaps/module");
    let started = tokio::time::Instant::now();
    let passes = settle(&fake, &ctx, 2).await;
    let waited = started.elapsed();
    assert_eq!(
        writes_per_pass(&passes)[0],
        ["PATCH compositions/app (merge)"]
    );
    assert!(
        passes[1].contains(&"GET configmaps/module".to_string()),
        "{passes:#?}"
    );
    assert_eq!(
        count(&writes(&passes[1]), "POST resourceslices"),
        0,
        "{passes:#?}"
    );
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_secs(11),
        "{waited:?}"
    );
}
