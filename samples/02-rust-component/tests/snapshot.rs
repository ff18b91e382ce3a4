//! The sample's output over its fixture matches the committed snapshot (native run).

#[test]
fn component_sample_matches_its_snapshot() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let input = enoki_sdk::testing::read_fixture(dir.join("input.json"));
    let out = enoki_sdk::testing::run(component::synthesize, &input);
    assert_eq!(out.items.len(), 4, "a Role, two RoleBindings, a ConfigMap");
    enoki_sdk::testing::assert_snapshot(&out, dir.join("output.json"));
}
