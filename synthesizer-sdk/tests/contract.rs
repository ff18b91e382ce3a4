//! The SDK reads and writes exactly the golden contract files.
#![allow(clippy::unwrap_used)] // test code

use enoki_sdk::{Output, Resource, ResourceList, Severity, testing};

fn dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("contract")
}

fn synthesize(input: &enoki_sdk::Input) -> Result<Output, enoki_sdk::Error> {
    let config = input.input("config")?;
    let greeting = config
        .pointer("/data/greeting")
        .and_then(|v| v.as_str())
        .unwrap_or("hi");
    let replicas: i64 = config
        .pointer("/data/replicas")
        .and_then(|v| v.as_str())
        .unwrap_or("1")
        .parse()
        .unwrap_or(1);
    let mut out = Output::default();
    out.push(
        Resource::new("v1", "ConfigMap", "hello-greeting")
            .readiness_group(0)
            .set("/data/message", greeting),
    );
    out.push(
        Resource::new("apps/v1", "Deployment", "hello")
            .readiness_group(1)
            .readiness("self.status.readyReplicas == self.spec.replicas")
            .set("/spec/replicas", replicas),
    );
    out.info(format!(
        "rendered for tier {}",
        input.env("TIER").unwrap_or_default()
    ));
    Ok(out)
}

#[test]
fn the_golden_input_produces_the_golden_output() {
    let input = testing::read_fixture(dir().join("input.json"));
    assert_eq!(input.observed().count(), 1);
    assert!(
        input
            .observed_named("ConfigMap", "hello-greeting")
            .is_some()
    );
    assert_eq!(
        input.inputs_of_kind("ConfigMap").count(),
        1,
        "observed outputs are not inputs"
    );
    assert_eq!(input.composition().name, "hello");
    let out = testing::run(synthesize, &input);
    testing::assert_snapshot(&out, dir().join("output.json"));
}

#[test]
fn a_missing_input_becomes_an_error_result() {
    let out = testing::run(synthesize, &testing::input_from_items(vec![]));
    assert_eq!(out.results.len(), 1);
    assert_eq!(out.results[0].severity, Severity::Error);
    assert!(out.results[0].message.contains("\"config\""));
}

#[test]
fn typed_inputs_deserialize() {
    #[derive(serde::Deserialize)]
    struct Cm {
        data: std::collections::BTreeMap<String, String>,
    }
    let input = testing::read_fixture(dir().join("input.json"));
    let cm: Cm = input.input_as("config").unwrap();
    assert_eq!(cm.data["greeting"], "hello");
    let bad: Result<ResourceList, _> = serde_json::from_str("{\"items\": 3}");
    assert!(bad.is_err());
}
