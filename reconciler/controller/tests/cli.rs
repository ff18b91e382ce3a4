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
fn enoki_version_prints_the_crate_version_the_commit_and_its_date() {
    let out = Command::new(env!("CARGO_BIN_EXE_enoki"))
        .arg("version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .unwrap();
    let commit = String::from_utf8(head.stdout).unwrap().trim().to_string();
    let (version, rest) = text.trim().split_once(" (commit ").unwrap();
    assert_eq!(version, format!("enoki {}", env!("CARGO_PKG_VERSION")));
    let (built_from, date) = rest.trim_end_matches(')').split_once(", ").unwrap();
    // A build of this checkout: its commit (cargo rebuilds when HEAD moves) and its date.
    assert_eq!(built_from, commit, "{text}");
    assert!(date.len() == 10 && date.as_bytes()[4] == b'-', "{text}");
    let long = Command::new(env!("CARGO_BIN_EXE_enoki"))
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(long.stdout).unwrap().trim(),
        text.trim(),
        "--version says the same"
    );
}

#[test]
fn completion_scripts_are_generated_for_bash_zsh_and_fish() {
    for (shell, marker) in [
        ("bash", "_enoki()"),
        ("zsh", "#compdef enoki"),
        ("fish", "complete -c enoki"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_enoki"))
            .args(["completion", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.contains(marker),
            "{shell}: {}",
            &text[..text.len().min(300)]
        );
        assert!(
            text.contains("status") && text.contains("diff"),
            "{shell} completes subcommands"
        );
    }
}
