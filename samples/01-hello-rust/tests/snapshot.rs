//! The sample's output over its fixture matches the committed snapshot (native run).

#[test]
fn hello_matches_its_snapshot() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let input = enoki_sdk::testing::read_fixture(dir.join("input.json"));
    let out = enoki_sdk::testing::run(hello::synthesize, &input);
    assert_eq!(out.items.len(), 3);
    enoki_sdk::testing::assert_snapshot(&out, dir.join("output.json"));
}
