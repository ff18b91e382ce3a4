//! The call-sequence tier: one Composition's passes against [`FakeApi`] (no control plane),
//! with the controller's own caches (Compositions, slices, inputs, managed objects) fed by
//! watches of the fake, pinning every request each pass makes (the caches' own lists and
//! watches apart) — what it reads, what it writes, in which order, as whom — for a new
//! Composition, the steady state, drift, a changed spec, deletion and the default install's
//! impersonation; on a paused clock, the module fetch wait and its backoff. Passes run one at
//! a time, each after the caches caught up, none of them delivered during it. Runs in
//! `make test-unit` in seconds.

use std::sync::Arc;
use std::time::Duration;

use clap::{CommandFactory as _, FromArgMatches as _};
use futures::StreamExt as _;
use kube::ResourceExt as _;
use kube::api::ApiResource;
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use super::cluster::Cluster;
use super::context::{Context, Parts};
use super::fake_api::{Call, FakeApi};
use super::shard::{InFlight, Shards, fixed};
use crds::Composition;

mod fixtures;
use fixtures::{COMPOSITION, OUTPUT, world_parts};

/// A controller Context on the fake with the options of `enoki run <flags>` (the environment
/// ignored), its Composition and slice caches fed by watches of the fake.
fn controller(fake: &FakeApi, client: kube::Client, flags: &[&str]) -> Arc<Context> {
    let command = crate::cli::Args::command()
        .mut_subcommand("run", |c| c.mut_args(|a| a.env(None::<&'static str>)));
    let matches = command
        .try_get_matches_from(["enoki", "run"].iter().chain(flags))
        .expect("flags");
    let args = crate::cli::Args::from_arg_matches(&matches).expect("flags");
    let crate::cli::Command::Run(run) = args.command else {
        unreachable!("enoki run")
    };
    let opts = crate::options(&run).expect("options");
    let impersonating = fake.clone();
    let cluster = Cluster::faked(client, move |config| impersonating.client_for(config));
    let (wake, _) = tokio::sync::mpsc::unbounded_channel();
    let shards = fixed(Shards::ALL);
    // The caches' requests are the fake's `[cache] …` (see `pass`).
    let client = fake.cache_client();
    let (compositions, comp_events, slices, slice_events) =
        super::start::shards::caches(&client, &opts, &shards, wake.clone(), false);
    tokio::spawn(comp_events.for_each(|_| async {}));
    tokio::spawn(slice_events.for_each(|_| async {}));
    let (synthesis_slots, memory_budget) = Parts::limits(&opts);
    let mut registry = prometheus_client::registry::Registry::default();
    let host = opts.sandbox.host(None, 1).expect("wasm host");
    Arc::new(Context::new(Parts {
        watches: super::watches::Watches::new(
            client.clone(),
            client,
            wake,
            shards.clone(),
            opts.tenancy.default_service_account.is_none(),
        ),
        management: cluster.clone(),
        target: cluster,
        host: Arc::new(host),
        metrics: super::metrics::Metrics::register(&mut registry),
        reporter: kube::runtime::events::Reporter {
            controller: "enoki".into(),
            instance: None,
        },
        compositions,
        slices,
        slots: super::sandbox::Slots::new(1),
        synthesis_slots,
        memory_budget,
        shards,
        in_flight: InFlight::new(1),
        slice_keys: Arc::new(super::sealing::SliceKeys::default()),
        opts,
    }))
}

/// The fake with the fixtures, and a controller (`enoki run <flags>`) on it.
fn world(flags: &[&str]) -> (FakeApi, Arc<Context>) {
    let (fake, client) = world_parts();
    let ctx = controller(&fake, client, flags);
    (fake, ctx)
}

/// Waits until every cache of `ctx` holds what the fake holds (the watches' events arrived):
/// the Composition and slice caches and, once started, the managed objects' (asked through
/// [`super::watches::Watches::managed`] with the Composition's UID, as its passes ask).
async fn caught_up(fake: &FakeApi, ctx: &Context) {
    for _ in 0..1000 {
        if in_step(fake, ctx).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("the caches never caught up with the fake");
}

async fn in_step(fake: &FakeApi, ctx: &Context) -> bool {
    let rv = |v: Option<Value>| {
        v.and_then(|o| o["metadata"]["resourceVersion"].as_str().map(String::from))
    };
    let comp = fake.get(COMPOSITION);
    let cached = ctx.caches.compositions.state().first().cloned();
    if rv(comp.clone()) != cached.and_then(|c| c.resource_version()) {
        return false;
    }
    let mut stored: Vec<String> = fake
        .objects_under("/apis/enoki.dev/v1alpha1/namespaces/team/resourceslices/")
        .into_iter()
        .filter_map(|o| rv(Some(o)))
        .collect();
    let mut seen: Vec<String> = ctx
        .caches
        .slices
        .state()
        .iter()
        .filter_map(|s| s.resource_version())
        .collect();
    stored.sort();
    seen.sort();
    if stored != seen {
        return false;
    }
    let (_, managed, _, _) = ctx.caches.watches.sizes();
    let uid = comp.and_then(|c| c["metadata"]["uid"].as_str().map(String::from));
    if managed == 0 || uid.is_none() {
        return true;
    }
    let gvk = GroupVersionKind::gvk("", "v1", "ConfigMap");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "configmaps");
    let Some(view) = ctx
        .caches
        .watches
        .managed(&gvk, &ar, &uid.unwrap_or_default())
        .await
    else {
        return false;
    };
    let live = view
        .get("team", "out")
        .and_then(|l| l.resource_version.map(String::from));
    // The cache holds only objects labelled as enoki's.
    let labelled = fake.get(OUTPUT).filter(|o| {
        o.pointer("/metadata/labels/enoki.dev~1managed-by")
            .is_some()
    });
    live == rv(labelled)
}

/// One pass of the Composition as stored now: the watches told of every change and the caches
/// caught up first (so a pass sees what a controller at rest would; its own writes reach the
/// caches only after it). Its result and every request it made (the caches' own lists and
/// watches left out; see [`generic`]).
async fn pass(
    fake: &FakeApi,
    ctx: &Arc<Context>,
) -> (Result<kube::runtime::controller::Action, String>, Vec<Call>) {
    fake.deliver();
    caught_up(fake, ctx).await;
    fake.clear_calls();
    let comp: Composition =
        serde_json::from_value(fake.get(COMPOSITION).expect("Composition")).expect("parse");
    let result = super::composition::reconcile(Arc::new(comp), ctx.clone())
        .await
        .map_err(|e| e.to_string());
    let calls = fake
        .calls()
        .iter()
        .filter(|c| !c.starts_with("[cache] "))
        .map(|c| generic(c))
        .collect();
    (result, calls)
}

/// Passes until one writes nothing (at most `max`, none once the Composition is gone); the
/// requests of each.
async fn settle(fake: &FakeApi, ctx: &Arc<Context>, max: usize) -> Vec<Vec<Call>> {
    let mut passes = Vec::new();
    for _ in 0..max {
        if fake.get(COMPOSITION).is_none() {
            break;
        }
        let (result, calls) = pass(fake, ctx).await;
        result.expect("pass");
        let quiet = !calls.iter().any(|c| is_write(c));
        passes.push(calls);
        if quiet {
            break;
        }
    }
    passes
}

/// A call with a generated slice name written `*` and the test's Synthesizer `synth`:
/// `PATCH team/resourceslices/app-1a2b3c4d-0/status` → `PATCH team/resourceslices/*/status`.
fn generic(call: &str) -> String {
    call.split(' ')
        .map(|word| {
            let mut parts: Vec<String> = word.split('/').map(String::from).collect();
            for i in 1..parts.len() {
                match parts[i - 1].as_str() {
                    "resourceslices" => parts[i] = "*".into(),
                    "synthesizers" => parts[i] = "synth".into(),
                    _ => {}
                }
            }
            parts.join("/")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn is_write(call: &str) -> bool {
    ["PATCH", "POST", "PUT", "DELETE"]
        .iter()
        .any(|v| call.starts_with(v))
        && !call.contains("[dry run]")
}

fn status_of(fake: &FakeApi) -> Value {
    fake.get(COMPOSITION).expect("Composition")["status"].clone()
}

fn strings(calls: &[&str]) -> Vec<Call> {
    calls.iter().map(|c| c.to_string()).collect()
}

mod scenarios;
