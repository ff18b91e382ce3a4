//! Golden cases: `tests/golden/plan/<case>/input.yaml` -> `plan.yaml`.
//!
//! input.yaml holds `composition` (name, namespace, uid, annotations, deleting), `mode`
//! (`ServerSide` | `ClientSide`), `resources`, `tombstones`, `observed` (live objects),
//! `inSync` (keys recorded as applied with the live resourceVersion), `ready` (key -> latched
//! time) and `previous` (previously applied snapshots). Regenerate with `UPDATE_GOLDEN=1`;
//! CI only compares.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plan::{
    ApplyMode, CompositionInfo, Desired, Op, PlanInput, PlanOptions, Recorded, ResourceKey,
};
use serde_json::{Value, json};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden/plan")
}

fn strings(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn list(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

fn render(input: &Value) -> Value {
    let c = &input["composition"];
    let comp = CompositionInfo {
        name: c["name"].as_str().unwrap_or("comp").into(),
        namespace: c["namespace"].as_str().unwrap_or("default").into(),
        uid: c["uid"].as_str().unwrap_or("uid-1").into(),
        labels: strings(&c["labels"]),
        annotations: strings(&c["annotations"]),
        deleting: c["deleting"].as_bool().unwrap_or(false),
        deletion_timestamp: None,
        gone_owners: Default::default(),
        unrecorded: false,
        shard: c["shard"].as_str().map(Into::into),
    };
    let mut items: Vec<Desired> = list(&input["resources"])
        .into_iter()
        .map(|m| Desired {
            manifest: m,
            tombstone: false,
        })
        .collect();
    items.extend(list(&input["tombstones"]).into_iter().map(|m| Desired {
        manifest: m,
        tombstone: true,
    }));
    let prepared = match plan::prepare(&items, &comp) {
        Ok(p) => p,
        Err(e) => return json!({"error": e.to_string(), "category": e.category()}),
    };
    let mut observed: plan::Observed = list(&input["observed"])
        .into_iter()
        .map(|o| (ResourceKey::of(&o).unwrap(), o))
        .collect();
    let previous: std::collections::HashMap<ResourceKey, Value> = list(&input["previous"])
        .into_iter()
        .map(|o| (ResourceKey::of(&o).unwrap(), o))
        .collect();
    let options = PlanOptions {
        mode: if input["mode"] == "ClientSide" {
            ApplyMode::ClientSide
        } else {
            ApplyMode::ServerSide
        },
        ..PlanOptions::default()
    };
    let mut recorded: std::collections::HashMap<ResourceKey, Recorded> =
        std::collections::HashMap::new();
    let first = plan::plan(PlanInput {
        prepared: &prepared,
        composition: &comp,
        observed: &observed,
        recorded: &recorded,
        previous: &previous,
        options,
    });
    let in_sync: Vec<String> = list(&input["inSync"])
        .iter()
        .filter_map(|v| v.as_str().map(String::from))
        .collect();
    let ready = strings(&input["ready"]);
    for step in &first.steps {
        let name = step.key.to_string();
        let rec = recorded.entry(step.key.clone()).or_default();
        if in_sync.contains(&name) {
            rec.applied_hash = step.hash.clone();
            rec.applied_resource_version = observed
                .get(&step.key)
                .and_then(|o| o.pointer("/metadata/resourceVersion"))
                .and_then(Value::as_str)
                .map(String::from);
        }
        rec.ready = ready.get(&name).cloned();
    }
    // What enoki applied (in sync, or written by the previous synthesis) carries its
    // `managed-by` label.
    for (key, o) in &mut observed {
        if in_sync.contains(&key.to_string()) || previous.contains_key(key) {
            o["metadata"]["labels"]["enoki.dev/managed-by"] = json!(comp.uid);
        }
    }
    let p = plan::plan(PlanInput {
        prepared: &prepared,
        composition: &comp,
        observed: &observed,
        recorded: &recorded,
        previous: &previous,
        options,
    });
    let steps: Vec<Value> = p
        .steps
        .iter()
        .map(|s| {
            let mut out = json!({"resource": s.key.to_string()});
            match &s.op {
                Op::Apply { object } => {
                    out["op"] = json!("Apply");
                    out["object"] = object.clone();
                }
                Op::Create { object } => {
                    out["op"] = json!("Create");
                    out["object"] = object.clone();
                }
                Op::Replace { object } => {
                    out["op"] = json!("Replace");
                    out["object"] = object.clone();
                }
                Op::MergePatch { patch, .. } => {
                    out["op"] = json!("MergePatch");
                    out["patch"] = patch.clone();
                }
                Op::JsonPatch { ops } => {
                    out["op"] = json!("JsonPatch");
                    out["ops"] = ops.clone();
                }
                Op::Delete { foreground } => {
                    out["op"] = json!("Delete");
                    out["foreground"] = json!(foreground);
                }
                Op::Skip { reason } => {
                    out["op"] = json!("Skip");
                    out["reason"] = json!(reason);
                }
                Op::Wait { on } => {
                    out["op"] = json!("Wait");
                    out["on"] = json!(on.iter().map(ToString::to_string).collect::<Vec<_>>());
                }
                Op::Conflict { owner } => {
                    out["op"] = json!("Conflict");
                    out["owner"] = json!(owner);
                }
            }
            out["readiness"] = serde_json::to_value(&s.readiness).unwrap();
            if !s.overrides.is_empty() {
                out["overrides"] = serde_json::to_value(&s.overrides).unwrap();
            }
            out
        })
        .collect();
    json!({
        "requeue": p.requeue.map(|d| humantime::format_duration(d).to_string()),
        "allReady": p.all_ready(),
        "steps": steps,
    })
}

#[test]
fn golden_plans_match() {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(golden_dir())
        .expect("tests/golden/plan exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("input.yaml").exists())
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 6,
        "expected the golden cases, found {}",
        cases.len()
    );
    let update = std::env::var_os("UPDATE_GOLDEN").is_some() && std::env::var_os("CI").is_none();
    let mut failures = Vec::new();
    for case in cases {
        let text = std::fs::read_to_string(case.join("input.yaml")).unwrap();
        let input: Value = serde_saphyr::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: bad input.yaml: {e}", case.display()));
        let got = serde_saphyr::to_string(&render(&input)).unwrap();
        let path = case.join("plan.yaml");
        if update {
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if want != got {
            failures.push(format!(
                "{}:\n--- want\n{want}\n+++ got\n{got}",
                case.display()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "golden plans differ (UPDATE_GOLDEN=1 to accept):\n{}",
        failures.join("\n")
    );
}
