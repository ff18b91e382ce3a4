//! Synthesizer rollouts against the real control plane: a new revision reaches a fleet of
//! Compositions in health-gated waves (and how long Eno's cooldown would take), halts on a
//! version that fails for some inputs (rolling the wave back) or never becomes Ready, is
//! paused, resumed and undone from the CLI and by annotation, and goes on from its recorded
//! state when the controller is killed mid-wave. Each test runs a cluster-wide enoki (the
//! rollout runs with the Synthesizer controller) scoped to its own Compositions by label.
#![allow(clippy::unwrap_used)] // test code

use std::time::{Duration, Instant};

use crds::{Composition, RolloutStatus, Synthesizer};
use harness::{Enoki, TestEnv, echo_module, eventually, install_crds, install_synthesizer};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(180);

/// A Synthesizer (the echo module) with `n` Compositions `c-<i>`, each emitting ConfigMap
/// `out-<i>`; those in `canary` carry the label `canary: "yes"`, those in `fragile` have
/// `data.fragile` in their input. Returns once all run revision 1 and are Ready.
struct Fleet {
    env: TestEnv,
    synth: String,
    n: usize,
    enoki: Enoki,
}

impl Fleet {
    async fn new(n: usize, rollout: Value, canary: &[usize], fragile: &[usize]) -> Fleet {
        let env = TestEnv::new().await;
        install_crds(&env.client).await;
        let synth = install_synthesizer(&env, "roll", &echo_module()).await;
        patch_synth(&env, &synth, json!({"spec": {"rollout": rollout}})).await;
        let ns = env.namespace.clone();
        let cms: Api<ConfigMap> = env.api();
        let comps: Api<Composition> = env.api();
        let apply = PatchParams::apply("rollout-test").force();
        for i in 0..n {
            let items = json!([{"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("out-{i}")}, "data": {"i": i.to_string()}}]);
            let mut data = json!({"items": items.to_string()});
            if fragile.contains(&i) {
                data["fragile"] = json!("yes");
            }
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cfg-{i}")}, "data": data});
            cms.patch(&format!("cfg-{i}"), &apply, &Patch::Apply(&cm))
                .await
                .unwrap();
            let mut labels = json!({"enoki-rollout": ns});
            if canary.contains(&i) {
                labels["canary"] = json!("yes");
            }
            let comp = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
                "metadata": {"name": format!("c-{i}"), "labels": labels},
                "spec": {"synthesizer": {"name": synth},
                         "bindings": [{"key": "config", "resource": {"name": format!("cfg-{i}")}}]}});
            comps
                .patch(&format!("c-{i}"), &apply, &Patch::Apply(&comp))
                .await
                .unwrap();
        }
        let enoki = start(&ns);
        let fleet = Fleet {
            env,
            synth,
            n,
            enoki,
        };
        fleet.wait_all_on(1, "the fleet on revision 1").await;
        fleet
    }

    async fn rollout(&self) -> Option<RolloutStatus> {
        let synths: Api<Synthesizer> = Api::all(self.env.client.clone());
        synths.get(&self.synth).await.unwrap().status?.rollout
    }

    /// (revision run, Ready, synthesis UUID) of each Composition. A synthesis records its
    /// revision; one made before the first revision is told by its generation and module.
    async fn states(&self) -> Vec<(Option<i64>, bool, String)> {
        let ro = self.rollout().await;
        let runs = |c: &crds::Synthesis| {
            c.synthesizer_revision.or_else(|| {
                let r = ro.as_ref()?;
                [Some(&r.revision), r.stable.as_ref()]
                    .into_iter()
                    .flatten()
                    .find(|v| {
                        c.observed_synthesizer_generation == Some(v.generation)
                            && c.module_digest.as_ref() == Some(&v.module_digest)
                    })
                    .map(|v| v.number)
            })
        };
        let comps: Api<Composition> = self.env.api();
        let mut out = Vec::new();
        for i in 0..self.n {
            let st = comps.get(&format!("c-{i}")).await.unwrap().status;
            let cur = st.as_ref().and_then(|s| s.current_synthesis.clone());
            let ready = st.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
            out.push((
                cur.as_ref().and_then(runs),
                ready,
                cur.map(|c| c.uuid).unwrap_or_default(),
            ));
        }
        out
    }

    async fn wait_all_on(&self, revision: i64, what: &str) {
        eventually(what, WAIT, || async {
            let ro = self.rollout().await?;
            let all = self
                .states()
                .await
                .iter()
                .all(|(r, ready, _)| *r == Some(revision) && *ready);
            (all && ro.revision.number >= revision).then_some(())
        })
        .await;
    }

    async fn wait_phase(&self, phase: &str) -> RolloutStatus {
        eventually(&format!("rollout {phase}"), WAIT, || async {
            self.rollout().await.filter(|r| r.phase == phase)
        })
        .await
    }

    /// A new revision: the Synthesizer's `env`.
    async fn set_env(&self, env: Value) {
        patch_synth(&self.env, &self.synth, json!({"spec": {"env": env}})).await;
    }
}

fn start(ns: &str) -> Enoki {
    // Scoped to this test's Compositions, and the one controller that coordinates them.
    Enoki::start_with(
        "",
        &[
            "--label-selector",
            &format!("enoki-rollout={ns}"),
            "--rollouts",
            "true",
            // One namespace holds the whole fleet: its synthesis rate (300, then 60 a minute)
            // would pace the last waves, which a fleet over many namespaces does not meet.
            "--namespace-synthesis-rate",
            "0",
        ],
    )
}

async fn patch_synth(env: &TestEnv, name: &str, patch: Value) {
    let synths: Api<Synthesizer> = Api::all(env.client.clone());
    synths
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

fn cli(args: &[&str]) -> String {
    let out = harness::enoki_cli(args);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "enoki {args:?}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// (a) 200 Compositions, a good new version, progressive: all of them on it and Ready; the time
/// next to what Eno's cooldown takes for 200.
#[tokio::test]
async fn a_good_version_reaches_200_compositions_in_waves_far_faster_than_the_cooldown() {
    let rollout = json!({"strategy": "progressive", "canary": {"count": 2}, "waveDeadline": "3m"});
    let fleet = Fleet::new(200, rollout, &[], &[]).await;
    let began = Instant::now();
    fleet
        .set_env(json!([{"name": "VERSION", "value": "2"}]))
        .await;
    fleet
        .wait_all_on(2, "every Composition on revision 2")
        .await;
    let took = began.elapsed();
    let ro = fleet.wait_phase("Complete").await;
    assert_eq!(
        (ro.updated, ro.ready, ro.total, ro.failed),
        (200, 200, 200, 0)
    );
    // Waves of 2, 4, 8, … 128, then the rest: 8 waves.
    assert_eq!(ro.wave, 8, "{ro:?}");
    let cooldown = Duration::from_secs(60) * 199;
    let ratio = cooldown.as_secs_f64() / took.as_secs_f64();
    println!(
        "progressive rollout to 200 Compositions: {:.1} s; Eno's cooldown (1m, one Composition \
         per cooldown) takes {:.0} s: {ratio:.0}x faster",
        took.as_secs_f64(),
        cooldown.as_secs_f64()
    );
    assert!(ratio >= 20.0, "{ratio}");
}

/// (b) A version that fails for some inputs halts after the canary wave; only the canaries were
/// touched, every other Composition keeps revision 1 (enforced), and `rollback` returns the
/// canary that took revision 2 to revision 1.
#[tokio::test]
async fn a_version_failing_for_some_inputs_halts_after_the_canary_and_rolls_back() {
    let rollout = json!({"strategy": "progressive", "onFailure": "rollback",
        "canary": {"selector": {"matchLabels": {"canary": "yes"}}}});
    let fleet = Fleet::new(10, rollout, &[0, 1], &[0]).await;
    let before = fleet.states().await;
    fleet
        .set_env(json!([{"name": "ECHO_FAIL_IF", "value": "fragile"}]))
        .await;
    let ro = fleet.wait_phase("Halted").await;
    assert_eq!(ro.reason.as_deref(), Some("WaveFailed"), "{ro:?}");
    assert!(ro.rolled_back && ro.wave == 1, "{ro:?}");
    // The canary that synthesized revision 2 is back on revision 1.
    eventually("every Composition back on revision 1", WAIT, || async {
        let s = fleet.states().await;
        s.iter()
            .all(|(r, ready, _)| *r == Some(1) && *ready)
            .then_some(())
    })
    .await;
    let after = fleet.states().await;
    for i in 2..10 {
        assert_eq!(
            after[i].2, before[i].2,
            "c-{i} was not in the wave but was touched"
        );
    }
    assert_eq!(
        after[0].2, before[0].2,
        "the failing canary keeps its synthesis"
    );
    // Still enforced: a deleted output of a Composition outside the wave comes back.
    let cms: Api<ConfigMap> = fleet.env.api();
    cms.delete("out-5", &Default::default()).await.unwrap();
    eventually("out-5 restored", WAIT, || async {
        cms.get_opt("out-5")
            .await
            .unwrap()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
    })
    .await;
    let status = cli(&["rollout", "status", &fleet.synth]);
    assert!(status.contains("Halted (WaveFailed)"), "{status}");
}

/// (b') A version whose output enoki refuses (it emits nothing where the current synthesis
/// has resources) failed to synthesize: the wave halts at once (`WaveFailed`), not at its
/// deadline, and the refused Composition keeps what it has.
#[tokio::test]
async fn a_version_whose_output_is_refused_halts_the_wave_as_failed() {
    let rollout = json!({"strategy": "progressive", "waveDeadline": "10m", "onFailure": "pause",
        "canary": {"selector": {"matchLabels": {"canary": "yes"}}}});
    let fleet = Fleet::new(3, rollout, &[0], &[0]).await;
    fleet
        .set_env(json!([{"name": "ECHO_EMPTY_IF", "value": "fragile"}]))
        .await;
    let ro = fleet.wait_phase("Halted").await;
    assert_eq!(ro.reason.as_deref(), Some("WaveFailed"), "{ro:?}");
    assert!(ro.failed == 1 && ro.wave == 1, "{ro:?}");
    let s = fleet.states().await;
    assert!(s.iter().all(|(r, ..)| *r == Some(1)), "{s:?}");
    let cms: Api<ConfigMap> = fleet.env.api();
    assert!(cms.get_opt("out-0").await.unwrap().is_some());
    let listed = cli(&["get", "synthesizers", &fleet.synth]);
    assert!(
        listed.contains("REVISION") && listed.contains("ROLLOUT") && listed.contains("Halted"),
        "{listed}"
    );
}

/// (c) A version that synthesizes but never becomes Ready halts at the wave's deadline; with
/// `pause` the canary keeps it and the rest keep revision 1. Deleting the Synthesizer then is
/// safe: its revisions go with it, the outputs stay, the controller runs on.
#[tokio::test]
async fn a_version_never_ready_halts_at_the_deadline_and_deleting_the_synthesizer_is_safe() {
    let rollout = json!({"strategy": "progressive", "waveDeadline": "8s", "onFailure": "pause"});
    let mut fleet = Fleet::new(4, rollout, &[], &[]).await;
    fleet
        .set_env(json!([{"name": "ECHO_NEVER_READY", "value": "1"}]))
        .await;
    let ro = fleet.wait_phase("Halted").await;
    assert_eq!(ro.reason.as_deref(), Some("WaveDeadline"), "{ro:?}");
    assert!(!ro.rolled_back && ro.failed == 1, "{ro:?}");
    let s = fleet.states().await;
    assert_eq!(s.iter().filter(|(r, ..)| *r == Some(2)).count(), 1, "{s:?}");
    assert_eq!(s.iter().filter(|(r, ..)| *r == Some(1)).count(), 3, "{s:?}");

    let synths: Api<Synthesizer> = Api::all(fleet.env.client.clone());
    synths
        .delete(&fleet.synth, &Default::default())
        .await
        .unwrap();
    let revs: Api<crds::SynthesizerRevision> = Api::all(fleet.env.client.clone());
    let lp = ListParams::default().labels(&format!("enoki.dev/synthesizer={}", fleet.synth));
    eventually(
        "the revisions deleted with their Synthesizer",
        WAIT,
        || async { revs.list(&lp).await.unwrap().items.is_empty().then_some(()) },
    )
    .await;
    let cms: Api<ConfigMap> = fleet.env.api();
    for i in 0..4 {
        assert!(cms.get_opt(&format!("out-{i}")).await.unwrap().is_some());
    }
    assert!(fleet.enoki.running(), "{}", fleet.enoki.logs());
}

/// (d) Pause from the CLI and resume by annotation (a GitOps repository's way), pause by
/// annotation and resume from the CLI, then undo from the CLI; `enoki status` says which
/// revision a Composition runs and that a newer one waits; revisions past
/// `revisionHistoryLimit` that no Composition runs are deleted.
#[tokio::test]
async fn pause_resume_and_undo_from_the_cli_and_by_annotation() {
    let rollout = json!({"strategy": "progressive", "canary": {"count": 1},
        "revisionHistoryLimit": 2});
    let fleet = Fleet::new(6, rollout, &[], &[]).await;
    let ns = fleet.env.namespace.clone();
    let synth = fleet.synth.clone();
    cli(&["rollout", "pause", &synth]);
    fleet
        .set_env(json!([{"name": "VERSION", "value": "2"}]))
        .await;
    let ro = fleet.wait_phase("Paused").await;
    assert_eq!((ro.revision.number, ro.wave), (2, 0), "{ro:?}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let s = fleet.states().await;
    assert!(
        s.iter().all(|(r, ..)| *r == Some(1)),
        "paused, yet moved: {s:?}"
    );
    let status = cli(&["status", "c-0", "-n", &ns]);
    assert!(status.contains("revision 1 of Synthesizer"), "{status}");
    assert!(status.contains("revision 2 waits"), "{status}");
    let paused = crds::names::rollout::PAUSED_ANNOTATION;
    patch_synth(
        &fleet.env,
        &synth,
        json!({"metadata": {"annotations": {paused: null}}}),
    )
    .await;
    fleet
        .wait_all_on(2, "resumed by annotation: all on revision 2")
        .await;
    fleet.wait_phase("Complete").await;

    patch_synth(
        &fleet.env,
        &synth,
        json!({"metadata": {"annotations": {paused: "true"}}}),
    )
    .await;
    fleet
        .set_env(json!([{"name": "VERSION", "value": "3"}]))
        .await;
    let ro = fleet.wait_phase("Paused").await;
    assert_eq!(ro.revision.number, 3, "{ro:?}");
    cli(&["rollout", "resume", &synth]);
    fleet
        .wait_all_on(3, "resumed from the CLI: all on revision 3")
        .await;
    fleet.wait_phase("Complete").await;

    // Two revisions kept (the limit): the oldest, which no Composition runs, is gone.
    let revs: Api<crds::SynthesizerRevision> = Api::all(fleet.env.client.clone());
    eventually("revision 1 pruned", WAIT, || async {
        revs.get_opt(&format!("{synth}-r1"))
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        revs.get_opt(&format!("{synth}-r2"))
            .await
            .unwrap()
            .is_some()
    );
    let out = cli(&["rollout", "undo", &synth]);
    assert!(out.contains("goes back to revision 2"), "{out}");
    let ro = fleet.wait_phase("Undone").await;
    assert_eq!(ro.reason.as_deref(), Some("Undone"), "{ro:?}");
    eventually("undone: all back on revision 2", WAIT, || async {
        let s = fleet.states().await;
        s.iter()
            .all(|(r, ready, _)| *r == Some(2) && *ready)
            .then_some(())
    })
    .await;
}

/// (e) The controller killed mid-wave: the next one goes on from the recorded wave (none
/// skipped, none repeated: one `WaveStarted` Event per wave) to completion.
#[tokio::test]
async fn a_controller_killed_mid_wave_goes_on_from_the_recorded_state() {
    let rollout = json!({"strategy": "progressive", "canary": {"count": 1}, "bakeTime": "3s"});
    let mut fleet = Fleet::new(8, rollout, &[], &[]).await;
    fleet
        .set_env(json!([{"name": "VERSION", "value": "2"}]))
        .await;
    let at_kill = eventually("wave 2", WAIT, || async {
        fleet.rollout().await.filter(|r| r.wave == 2)
    })
    .await;
    fleet.enoki.stop();
    tokio::time::sleep(Duration::from_secs(2)).await;
    fleet.enoki = start(&fleet.env.namespace);
    // The new controller starts from wave 2 and its threshold, not over.
    let first = eventually("the new controller's first write", WAIT, || async {
        let ro = fleet.rollout().await?;
        (ro != at_kill).then_some(ro)
    })
    .await;
    assert!(
        first.wave >= 2,
        "restarted from wave {}: {first:?}",
        first.wave
    );
    if first.wave == 2 {
        assert_eq!(first.threshold, at_kill.threshold);
    }
    fleet
        .wait_all_on(2, "all on revision 2 after the restart")
        .await;
    let ro = fleet.wait_phase("Complete").await;
    assert_eq!(ro.wave, 4, "waves of 1, 2, 4, 8: {ro:?}");
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(fleet.env.client.clone(), "default");
    let lp = ListParams::default().fields(&format!("regarding.name={}", fleet.synth));
    let waves: Vec<String> = events
        .list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("WaveStarted"))
        .map(|e| {
            let n = e.series.map_or(1, |s| s.count);
            format!("{}x{n}", e.note.unwrap_or_default())
        })
        .collect();
    for w in 1..=4 {
        let once: Vec<&String> = waves
            .iter()
            .filter(|n| n.starts_with(&format!("wave {w}:")))
            .collect();
        assert_eq!(once.len(), 1, "wave {w} started once: {waves:?}");
        assert!(once[0].ends_with("x1"), "wave {w} started twice: {waves:?}");
    }
}
