//! The scenarios of the call-sequence tier: each pins every request of each pass (see
//! [`super::pass`]). A `reconcile` that records a new synthesis applies it at once in the same
//! turn, so one entry may hold a synthesis pass and the apply pass that follows it; a first
//! synthesis is applied in the pass that stores it and recorded with its one status write.

use super::fixtures::MODULE;
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_composition_gets_its_finalizer_then_a_synthesis_and_its_apply_then_rests() {
    let (fake, ctx) = world(&[]);
    let passes = settle(&fake, &ctx, 8).await;
    let expected = [
        // The finalizer first: nothing is written for a Composition enoki could not clean up.
        strings(&["PATCH team/compositions/app (merge)"]),
        strings(&[
            // The Synthesizer comes from the input cache; its module is read once and
            // reported on it; one slice.
            "GET enoki-system/configmaps/module",
            "PATCH synthesizers/synth/status (merge)",
            "POST team/resourceslices",
            // A first synthesis is applied in the pass that stores it: the new slice as the
            // create returned it (kept in memory until the cache has it: no read), the kind's
            // discovery, one server-side apply (enoki's field manager, forced) guarded to
            // create only — the cache has not seen the object, so it is not read first —, the
            // slice's recorded states, one status write that records the synthesis and what
            // its apply did.
            "DISCOVER /api/v1",
            "PATCH team/configmaps/out (apply, enoki, force, if absent)",
            "PATCH team/resourceslices/*/status (merge)",
            "PATCH team/compositions/app/status (merge)",
        ]),
        // At rest: not one request.
        vec![],
    ];
    assert_eq!(passes, expected);
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
async fn at_rest_a_pass_makes_no_request() {
    let (fake, ctx) = world(&[]);
    settle(&fake, &ctx, 8).await;
    for _ in 0..3 {
        let (result, calls) = pass(&fake, &ctx).await;
        // Nothing to do until the resync (`--resync`, 5 min) or a change.
        // Due on the whole second nearest to 300 s from now (resyncs at rest share wakeups).
        let action = format!("{:?}", result.expect("pass"));
        let after: f64 = action
            .split("Some(")
            .nth(1)
            .and_then(|s| s.trim_end_matches(&[')', ' ', '}'][..]).strip_suffix('s'))
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{action}"));
        assert!((299.5..=300.5).contains(&after), "{action}");
        assert_eq!(calls, Vec::<Call>::new());
    }
    // Nothing changed since the last full pass: the three passes confirmed it from the
    // watches (no plan), each counting the one resource as checked.
    assert_eq!(ctx.report.metrics.passes_at_rest.get(), 3);
    // A change no watch wakes it for (its status edited by someone else) makes the next
    // pass a full one again.
    let mut comp = fake.get(COMPOSITION).expect("Composition");
    comp["status"]["conditions"][0]["message"] = json!("edited");
    fake.put(COMPOSITION, comp);
    let (_, calls) = pass(&fake, &ctx).await;
    assert_eq!(ctx.report.metrics.passes_at_rest.get(), 3, "{calls:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_costs_one_get_and_one_apply_and_no_status_write() {
    let (fake, ctx) = world(&[]);
    settle(&fake, &ctx, 8).await;
    let status = status_of(&fake);
    let mut drifted = fake.get(OUTPUT).expect("applied");
    drifted["data"]["k"] = json!("changed by hand");
    fake.put(OUTPUT, drifted);
    // The managed object's watch brings the new resourceVersion: the pass reads the object
    // and applies it again; nothing about the Composition changed, so no status is written.
    let passes = settle(&fake, &ctx, 4).await;
    let expected = [
        strings(&[
            "GET team/configmaps/out",
            "PATCH team/configmaps/out (apply, enoki, force)",
        ]),
        vec![],
    ];
    assert_eq!(passes, expected);
    assert_eq!(fake.get(OUTPUT).expect("object")["data"]["k"], "v");
    assert_eq!(status_of(&fake), status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_change_synthesizes_again_keeps_identical_slices_one_status_write_per_pass() {
    let (fake, ctx) = world(&[]);
    settle(&fake, &ctx, 8).await;
    let before = status_of(&fake)["currentSynthesis"].clone();
    let mut comp = fake.get(COMPOSITION).expect("Composition");
    comp["spec"]["synthesisEnv"] = json!([{"name": "X", "value": "1"}]);
    comp["metadata"]["generation"] = json!(2);
    fake.put(COMPOSITION, comp);
    let passes = settle(&fake, &ctx, 8).await;
    let expected = [
        strings(&[
            // The synthesis: the module's observed outputs (the live object), then one status
            // write; the output is the same, so its slices are kept (no new slice).
            "GET team/configmaps/out",
            "PATCH team/compositions/app/status (merge)",
            // The apply pass that follows: the slice, nothing to apply, one status write
            // (the new synthesis reconciled).
            "GET team/resourceslices/*",
            "PATCH team/compositions/app/status (merge)",
        ]),
        vec![],
    ];
    assert_eq!(passes, expected);
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
    let (fake, ctx) = world(&[]);
    settle(&fake, &ctx, 8).await;
    let api: kube::Api<Composition> = kube::Api::namespaced(ctx.clusters.client().clone(), "team");
    api.delete("app", &Default::default())
        .await
        .expect("delete");
    let passes = settle(&fake, &ctx, 8).await;
    let expected = [
        strings(&[
            "GET team/resourceslices/*",
            "DELETE team/configmaps/out",
            "PATCH team/resourceslices/*/status (merge)",
            "PATCH team/compositions/app/status (merge)",
        ]),
        // Released once the cache confirms the output gone (the Composition's own DELETE set its
        // deletionTimestamp; the API server removes it with its last finalizer); an Event
        // says so.
        strings(&["PATCH team/compositions/app (merge)", "POST team/events"]),
    ];
    assert_eq!(passes, expected);
    assert!(fake.get(OUTPUT).is_none());
    assert!(
        fake.get(COMPOSITION).is_none(),
        "the finalizer was the last one"
    );
}

/// The default install (`--default-service-account enoki-composer`): the Composition's live
/// objects are read and written as its ServiceAccount; its Synthesizer, module, slices and
/// status as the controller. Inputs are cached as metadata only there (each read a GET as the
/// account), Synthesizers whole: at rest a pass of this Composition (no inputs) makes no
/// request either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_install_reads_and_writes_outputs_as_the_compositions_account() {
    let (fake, ctx) = world(&["--default-service-account", "enoki-composer"]);
    let passes = settle(&fake, &ctx, 8).await;
    let expected = [
        strings(&["PATCH team/compositions/app (merge)"]),
        strings(&[
            "GET enoki-system/configmaps/module",
            "PATCH synthesizers/synth/status (merge)",
            "POST team/resourceslices",
            "DISCOVER /api/v1",
            "PATCH team/configmaps/out (apply, enoki, force, if absent) as team:enoki-composer",
            "PATCH team/resourceslices/*/status (merge)",
            "PATCH team/compositions/app/status (merge)",
        ]),
        vec![],
    ];
    assert_eq!(passes, expected);
}

/// A module fetch that never answers holds no pass longer than the fetch wait (virtual time:
/// the clock is paused and jumps when every task waits).
#[tokio::test(start_paused = true)]
async fn a_hanging_module_fetch_gives_the_pass_back_after_10_s() {
    let (fake, ctx) = world(&[]);
    fake.hang("GET enoki-system/configmaps/module");
    let started = tokio::time::Instant::now();
    let passes = settle(&fake, &ctx, 2).await;
    let waited = started.elapsed();
    let expected = [
        strings(&["PATCH team/compositions/app (merge)"]),
        // The pass reports the module still loading and goes on; nothing is synthesized.
        strings(&[
            "GET enoki-system/configmaps/module",
            "PATCH team/compositions/app/status (merge)",
        ]),
    ];
    assert_eq!(passes, expected);
    let (at_least, below) = (Duration::from_secs(10), Duration::from_secs(11));
    assert!(waited >= at_least && waited < below, "{waited:?}");
}

/// A module that cannot be fetched is fetched again after 10 s, then after 20 s (doubling up
/// to 5 min), whatever the passes in between: on a paused clock moved by hand.
#[tokio::test(start_paused = true)]
async fn a_failed_module_fetch_backs_off_10_s_then_20_s() {
    let (fake, ctx) = world(&[]);
    fake.remove(MODULE);
    let fetch = "GET enoki-system/configmaps/module";
    let mut fetched_at = Vec::new();
    let started = tokio::time::Instant::now();
    for step in [0, 0, 0, 9, 2, 0, 18, 1, 3] {
        tokio::time::advance(Duration::from_secs(step)).await;
        let (result, calls) = pass(&fake, &ctx).await;
        result.expect("a module failure is reported, not an error of the pass");
        if calls.iter().any(|c| c == fetch) {
            fetched_at.push(started.elapsed().as_secs());
        }
    }
    // At 0 s, then not at 9 s but at 11 s, then not at 29 s or 30 s but at 33 s.
    assert_eq!(fetched_at, [0, 11, 33]);
    let synth = fake
        .objects_under("/apis/enoki.dev/v1alpha1/synthesizers/")
        .pop()
        .expect("Synthesizer");
    let ready = &synth["status"]["conditions"][0];
    assert_eq!(ready["reason"], "ModuleUnavailable", "{synth:#}");
}

/// An object that exists but is not in the managed-object cache (not labelled as enoki's: made
/// by hand, or by another Composition a moment ago): the guarded first write is refused and
/// writes nothing, the pass comes back within 200 ms, reads the object and decides as for any
/// existing object (here: adopted, Eno's default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_the_cache_has_not_seen_is_refused_by_the_guard_then_read_and_adopted() {
    let (fake, ctx) = world(&[]);
    fake.put(
        OUTPUT,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "out", "namespace": "team"}, "data": {"k": "by hand"}}),
    );
    let passes = settle(&fake, &ctx, 8).await;
    let expected = [
        strings(&["PATCH team/compositions/app (merge)"]),
        strings(&[
            "GET enoki-system/configmaps/module",
            "PATCH synthesizers/synth/status (merge)",
            "POST team/resourceslices",
            "DISCOVER /api/v1",
            // Refused (409): it exists. Nothing written; the resource waits.
            "PATCH team/configmaps/out (apply, enoki, force, if absent)",
            "PATCH team/resourceslices/*/status (merge)",
            "PATCH team/compositions/app/status (merge)",
        ]),
        // Read, then applied (adopted: unlabelled), recorded.
        strings(&[
            "GET team/configmaps/out",
            "PATCH team/configmaps/out (apply, enoki, force)",
            "PATCH team/resourceslices/*/status (merge)",
            "PATCH team/compositions/app/status (merge)",
        ]),
        vec![],
    ];
    assert_eq!(passes, expected);
    let out = fake.get(OUTPUT).expect("object");
    assert_eq!(out["data"]["k"], "v");
    assert!(out["metadata"]["labels"]["enoki.dev/managed-by"].is_string());
    let status = status_of(&fake);
    assert!(
        status["currentSynthesis"]["ready"].is_string(),
        "{status:#}"
    );
}

/// Another Composition creates the object a moment before enoki's first write of it reaches
/// the API server; enoki's cache has not seen it. The guarded write is refused and writes
/// nothing; the next pass reads the object, finds the other (live) Composition's label and
/// takes nothing over: Conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_another_composition_created_a_moment_ago_is_never_taken_over() {
    let (fake, ctx) = world(&["--namespace", "team"]);
    fake.put(
        "/apis/enoki.dev/v1alpha1/namespaces/other/compositions/first",
        json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
            "metadata": {"name": "first", "namespace": "other", "uid": "first-uid"},
            "spec": {"synthesizer": {"name": "synth"}}}),
    );
    let guarded = "PATCH team/configmaps/out (apply, enoki, force, if absent)";
    fake.create_before(
        guarded,
        OUTPUT,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "out", "namespace": "team",
                "labels": {"enoki.dev/managed-by": "first-uid"}},
            "data": {"k": "first's"}}),
    );
    let passes = settle(&fake, &ctx, 8).await;
    let expected = [
        strings(&["PATCH team/compositions/app (merge)"]),
        strings(&[
            "GET enoki-system/configmaps/module",
            "PATCH synthesizers/synth/status (merge)",
            "POST team/resourceslices",
            "DISCOVER /api/v1",
            // Refused: the other Composition's create got there first.
            guarded,
            "PATCH team/resourceslices/*/status (merge)",
            "PATCH team/compositions/app/status (merge)",
        ]),
        // Read; its owner is a live Composition (one list confirms it): Conflict, said once.
        strings(&[
            "GET team/configmaps/out",
            "LIST compositions",
            "PATCH team/resourceslices/*/status (merge)",
            "POST team/events",
            "PATCH team/compositions/app/status (merge)",
        ]),
        // Another Composition's object is read on each pass, never written.
        strings(&["GET team/configmaps/out"]),
    ];
    assert_eq!(passes, expected);
    let out = fake.get(OUTPUT).expect("object");
    assert_eq!(out["data"]["k"], "first's");
    assert_eq!(
        out["metadata"]["labels"]["enoki.dev/managed-by"],
        "first-uid"
    );
    let reconciled = status_of(&fake)["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Reconciled").cloned())
        .expect("Reconciled");
    assert_eq!(
        (reconciled["status"].as_str(), reconciled["reason"].as_str()),
        (Some("False"), Some("Conflict"))
    );
}

/// A rollout slot claimed by a synthesis that then does not start (backoff, synthesis rates)
/// is given back: the next Composition may take it at once. A give-back after another claim
/// came since leaves that claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_slot_given_back_is_free_again() {
    let (_fake, ctx) = world(&["--rollout-cooldown", "1m"]);
    let claim = ctx.rollout_slot().expect("free at start");
    assert!(ctx.rollout_slot().is_err(), "taken for a minute");
    ctx.give_back_rollout_slot(claim);
    let _again = ctx.rollout_slot().expect("free once given back");
    ctx.give_back_rollout_slot(claim);
    assert!(ctx.rollout_slot().is_err(), "the newer claim stands");
}
