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
        (s.compositions, s.updated, s.rollout),
        (4, 2, "rolling out")
    );
}
