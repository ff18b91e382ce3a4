//! The `enoki` binary's skeleton commands.

use std::process::Command;

#[test]
fn enoki_crds_prints_every_crd() {
    let out = Command::new(env!("CARGO_BIN_EXE_enoki"))
        .arg("crds")
        .output()
        .unwrap();
    assert!(out.status.success());
    let yaml = String::from_utf8(out.stdout).unwrap();
    assert_eq!(yaml, crds::manifests::render_all().unwrap());
    for name in [
        "synthesizers.enoki.dev",
        "compositions.enoki.dev",
        "resourceslices.enoki.dev",
        "symphonies.enoki.dev",
    ] {
        assert!(yaml.contains(&format!("name: {name}")), "{name} missing");
    }
}

#[test]
fn enoki_version_prints_the_crate_version() {
    let out = Command::new(env!("CARGO_BIN_EXE_enoki"))
        .arg("version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        format!("enoki {}", env!("CARGO_PKG_VERSION"))
    );
}
