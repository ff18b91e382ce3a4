//! Feeds well over 10,000 random and malformed annotation values, CEL strings and override
//! paths through ingestion and planning: errors are fine, panics are not.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use common::*;
use plan::{Desired, PlanInput, PlanOptions};
use serde_json::{Value, json};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }
    fn text(&mut self, pieces: &[&str], max: u64) -> String {
        let n = self.next() % max;
        (0..n).map(|_| self.pick(pieces)).collect()
    }
}

const CEL: &[&str] = &[
    "self",
    ".",
    "status",
    "spec",
    "replicas",
    "(",
    ")",
    "[",
    "]",
    "==",
    "!=",
    "&&",
    "||",
    "!",
    "+",
    "-",
    "*",
    "/",
    "%",
    "1",
    "0",
    "-1",
    "9223372036854775807",
    "1.5",
    "'a'",
    "\"",
    "'",
    "true",
    "false",
    "null",
    "has(",
    "size(",
    ".filter(c, ",
    ".all(x, ",
    ".exists(",
    "?",
    ":",
    ",",
    " ",
    "int(",
    "uint(",
    "string(",
    "timestamp(",
    "duration(",
    "\\",
    "{",
    "}",
    "in",
    "ü",
    "\u{0}",
    "conditions",
    ".map(x, ",
    "matches(",
    "'[a-'",
    "dyn(",
    "type(",
    "1u",
    "b'x'",
    "0x",
    "1e999",
];
const PATH: &[&str] = &[
    "self",
    ".",
    "spec",
    "a",
    "[",
    "]",
    "0",
    "99999999999999999999",
    "*",
    "\"",
    "'",
    "k",
    "=",
    "\"v\"",
    "-",
    "_",
    " ",
    "containers",
    "[name=\"app\"]",
    "[*]",
    "[0]",
    "[\"x\"]",
    "ü",
];
const VALUES: &[&str] = &[
    "",
    "0",
    "1",
    "-1",
    "true",
    "false",
    "yes",
    "1s",
    "5m",
    "0s",
    "-5s",
    "99999999999h",
    "orphan",
    "foreground",
    "watch",
    "interval",
    "off",
    "abc",
    "9223372036854775808",
    "1.0",
    " 3 ",
    "\n",
];
const KEYS: &[&str] = &[
    "readiness",
    "readiness-x",
    "readiness-group",
    "deletion-group",
    "reconcile-interval",
    "disable-updates",
    "disable-reconciliation",
    "replace",
    "deletion-strategy",
    "overrides",
    "fail-open",
    "drift",
    "readiness-",
    "unknown",
];

fn random_overrides(rng: &mut Rng) -> String {
    if rng.next().is_multiple_of(5) {
        return rng.text(
            &["[", "]", "{", "}", "\"path\"", ":", ",", "\"", "null", "1"],
            12,
        );
    }
    let n = rng.next() % 3;
    let items: Vec<Value> = (0..n)
        .map(|_| {
            let mut o = json!({"path": rng.text(PATH, 8)});
            match rng.next() % 3 {
                0 => o["value"] = json!(rng.pick(VALUES)),
                1 => o["value"] = Value::Null,
                _ => o["valueExpression"] = json!(rng.text(CEL, 8)),
            }
            if rng.next().is_multiple_of(2) {
                o["condition"] = json!(rng.text(CEL, 8));
            }
            o
        })
        .collect();
    Value::Array(items).to_string()
}

#[test]
fn random_annotations_cel_and_paths_never_panic() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut inputs = 0usize;
    let mut errors = 0usize;
    let comp = comp();
    for round in 0..4000 {
        let mut annotations = serde_json::Map::new();
        for _ in 0..(rng.next() % 4) {
            let prefix = if rng.next().is_multiple_of(2) {
                "enoki.dev/"
            } else {
                "eno.azure.io/"
            };
            let key = format!("{prefix}{}", rng.pick(KEYS));
            let value = if key.contains("readiness") && !key.ends_with("group") {
                rng.text(CEL, 10)
            } else if key.ends_with("overrides") {
                random_overrides(&mut rng)
            } else {
                rng.pick(VALUES).to_string()
            };
            annotations.insert(key, Value::String(value));
            inputs += 1;
        }
        // Always exercise one CEL string and one override list per round, too.
        annotations.insert(
            "enoki.dev/readiness-fuzz".into(),
            Value::String(rng.text(CEL, 12)),
        );
        annotations.insert(
            "eno.azure.io/overrides".into(),
            Value::String(random_overrides(&mut rng)),
        );
        inputs += 2;
        let m = deploy(&format!("r{round}"), Value::Object(annotations));
        let items = vec![Desired {
            manifest: m.clone(),
            tombstone: round % 7 == 0,
        }];
        match plan::prepare(&items, &comp) {
            Err(e) => {
                errors += 1;
                assert!(!e.to_string().is_empty());
            }
            Ok(prepared) => {
                let mut observed = plan::Observed::new();
                if round % 2 == 0 {
                    let l = live(
                        &m,
                        "1",
                        json!({"ok": true, "conditions": [{"type": "Ready", "status": "True"}]}),
                    );
                    observed.insert(key(&l), l);
                }
                let _ = plan::plan(PlanInput {
                    prepared: &prepared,
                    composition: &comp,
                    observed: &observed,
                    recorded: &Default::default(),
                    previous: &Default::default(),
                    options: PlanOptions::default(),
                });
            }
        }
    }
    assert!(inputs >= 10_000, "only {inputs} inputs");
    assert!(errors > 0, "the generator never produced an invalid input");
}
