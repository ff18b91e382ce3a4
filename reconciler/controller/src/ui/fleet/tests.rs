use super::*;
use serde_json::json;

fn comp(name: &str, word: Option<&str>, ready_since: &str, synth_gen: Option<i64>) -> Composition {
    let mut status = json!({"conditions": [{"type": "Ready", "status": "False", "reason": "x",
        "message": "waiting", "lastTransitionTime": ready_since}]});
    if let Some(w) = word {
        status["simplified"] = json!({"status": w});
    }
    if let Some(g) = synth_gen {
        status["currentSynthesis"] = json!({"uuid": "u", "observedSynthesizerGeneration": g});
    }
    serde_json::from_value(
        json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"synthesizer": {"name": "s"}}, "status": status}),
    )
    .unwrap()
}

#[test]
fn stuck_and_failed_come_first_and_counts_add_up() {
    let now: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
    let a = comp("a-ready", Some("Ready"), "2026-01-01T00:00:00Z", Some(2));
    let b = comp("b-new", Some("NotReady"), "2026-01-01T00:59:00Z", Some(1));
    let c = comp(
        "c-old",
        Some("Reconciling"),
        "2026-01-01T00:10:00Z",
        Some(2),
    );
    let d = comp(
        "d-failed",
        Some("SynthesisBackoff"),
        "2026-01-01T00:59:30Z",
        None,
    );
    let mut e = comp(
        "e-suspended",
        Some("Ready"),
        "2026-01-01T00:00:00Z",
        Some(2),
    );
    e.spec.suspend = true;
    let synth: Synthesizer = serde_json::from_value(json!({"apiVersion": "enoki.dev/v1alpha1",
        "kind": "Synthesizer", "metadata": {"name": "s", "generation": 2},
        "spec": {"module": {"builtin": "quota"}}}))
    .unwrap();
    let f = fleet(&[&a, &b, &c, &d, &e], &[&synth], &[], now);
    let order: Vec<&str> = f.compositions.iter().map(|r| r.name.as_str()).collect();
    // Failed and long-waiting are stuck (first), then the rest by state.
    assert_eq!(
        order,
        ["d-failed", "c-old", "b-new", "e-suspended", "a-ready"]
    );
    assert!(f.compositions[1].stuck && !f.compositions[2].stuck);
    assert_eq!(f.counts["ready"], 1);
    assert_eq!(f.counts["waiting"], 2);
    assert_eq!(f.counts["failed"], 1);
    assert_eq!(f.counts["suspended"], 1);
    let s = &f.synthesizers[0];
    // Of the four not suspended, two ran generation 2; b ran 1 and d has no synthesis yet.
    assert_eq!(
        (s.compositions, s.updated, s.rollout.as_str()),
        (4, 2, "rolling out")
    );
}

/// With a rollout, a Composition is updated when it runs the revision's generation (a
/// `rollout`-only edit moves the Synthesizer's generation, not the revision's), and a
/// halted rollout says so.
#[test]
fn a_synthesizer_with_a_rollout_shows_its_revision_and_phase() {
    let now = Timestamp::from_second(1_000).unwrap();
    let mut synth: Synthesizer = serde_json::from_value(json!({
        "apiVersion": "enoki.dev/v1alpha1", "kind": "Synthesizer",
        "metadata": {"name": "s", "generation": 5}, "spec": {"module": {"builtin": "quota"}}}))
    .unwrap();
    let ro = crds::RolloutStatus {
        revision: crds::RevisionRef {
            number: 3,
            generation: 4,
            ..Default::default()
        },
        phase: "Progressing".into(),
        ..Default::default()
    };
    synth.status = Some(crds::SynthesizerStatus {
        rollout: Some(ro.clone()),
        ..Default::default()
    });
    let on = |generation: i64| -> Composition {
        serde_json::from_value(json!({
            "apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
            "metadata": {"name": format!("c{generation}"), "namespace": "n"},
            "spec": {"synthesizer": {"name": "s"}},
            "status": {"currentSynthesis": {"uuid": "u", "observedSynthesizerGeneration": generation}}}))
        .unwrap()
    };
    let comps = [on(4), on(3)];
    let refs: Vec<&Composition> = comps.iter().collect();
    let row = |synth: &Synthesizer| fleet(&refs, &[synth], &[], now).synthesizers[0].clone();
    let s = row(&synth);
    assert_eq!(
        (s.updated, s.rollout.as_str()),
        (1, "revision 3: rolling out")
    );
    synth.status.as_mut().unwrap().rollout = Some(crds::RolloutStatus {
        phase: "Halted".into(),
        reason: Some("WaveFailed".into()),
        ..ro
    });
    assert_eq!(row(&synth).rollout, "revision 3: halted (WaveFailed)");
}
