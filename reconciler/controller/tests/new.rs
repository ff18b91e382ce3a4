//! `enoki new`: a project scaffolded for each of the six languages and for a Helm chart, its SDK installed from the
//! packed artifact (`hack/sdk-packages.sh`: the crate, a Go module proxy directory, the npm
//! tarballs, the wheel), builds with its own toolchain and passes its own `make test` (render
//! the fixture, compare with the golden file — `enoki render --expect`) as created; one project
//! on a checkout by path (`--sdk-dir`). Needs the toolchains `hack/setup.sh` and
//! `hack/setup-langs.sh` install (Rust wasm targets, Go, clang + wasi-libc, Node.js + npm,
//! Python with venv) and the packages (`make test` builds them).
#![allow(clippy::unwrap_used)] // test code

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("enoki-new-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn enoki_new(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_enoki"))
        .arg("new")
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

/// The packed SDKs (`hack/sdk-packages.sh`, run by `make test`).
fn packages() -> String {
    let dir = root().join("target/sdk-packages");
    assert!(
        dir.join("SHA256SUMS").exists(),
        "{} is missing: run hack/sdk-packages.sh (make test does)",
        dir.display()
    );
    dir.to_string_lossy().into_owned()
}

/// Scaffolds `lang` on its packed SDK, runs `make test` in it and checks the golden
/// comparison passed.
fn scaffold_builds_and_passes_its_test(lang: &str) {
    scaffold_with(lang, &["--sdk-packages", &packages()]);
}

/// Scaffolds `lang` with `sdk` (the SDK options), runs `make test` in it and checks the golden
/// comparison passed.
fn scaffold_with(lang: &str, sdk: &[&str]) {
    let dir = tempdir(&format!("{lang}{}", sdk[0].trim_start_matches("--")));
    let name = format!("my-{lang}-synth");
    let mut args = vec![name.as_str(), "--lang", lang];
    args.extend_from_slice(sdk);
    let out = enoki_new(&dir, &args);
    assert!(
        out.status.success(),
        "enoki new: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let project = dir.join(&name);
    for f in [
        "Makefile",
        "README.md",
        "composition.yaml",
        "fixtures/input.json",
        "fixtures/expected.yaml",
    ] {
        assert!(project.join(f).exists(), "{lang}: {f} missing");
    }
    let mut make = Command::new("make");
    make.arg("test")
        .arg(format!("ENOKI={}", env!("CARGO_BIN_EXE_enoki")))
        .current_dir(&project);
    if lang == "rust" {
        // Keep the scaffold's dependency builds between runs.
        make.env("CARGO_TARGET_DIR", root().join("target/new-rust"));
    }
    let out = make.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "{lang}: make test failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("fixtures/expected.yaml: output matches"),
        "{lang}: {stdout}"
    );
    let wasm = project.join(format!("build/{name}.wasm"));
    assert!(
        std::fs::metadata(&wasm).unwrap().len() > 1000,
        "{lang}: {}",
        wasm.display()
    );

    // The test is a real check: a changed synthesizer output fails it with a diff.
    let golden = project.join("fixtures/expected.yaml");
    let text = std::fs::read_to_string(&golden).unwrap();
    std::fs::write(&golden, text.replace("hola, world", "hello, world")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_enoki"))
        .args(["render", &format!("build/{name}.wasm"), "--resource-list"])
        .args(["fixtures/input.json", "--expect", "fixtures/expected.yaml"])
        .current_dir(&project)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{lang}: {stderr}");
    assert!(
        stderr.contains("-  message: hello, world") && stderr.contains("+  message: hola, world"),
        "{lang}: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rust_project_builds_and_passes_its_test() {
    scaffold_builds_and_passes_its_test("rust");
}

#[test]
fn go_project_builds_and_passes_its_test() {
    scaffold_builds_and_passes_its_test("go");
}

/// A Helm chart embedded in a Go synthesizer: the shim module from the packed proxy
/// directory, Helm and its dependencies from Go's own proxy.
#[test]
fn helm_project_builds_and_passes_its_test() {
    scaffold_builds_and_passes_its_test("helm");
}

#[test]
fn a_project_on_a_checkout_by_path_builds_and_passes_its_test() {
    let sdk = root().join("synthesizer-sdk");
    scaffold_with("go", &["--sdk-dir", &sdk.to_string_lossy()]);
}

#[test]
fn c_project_builds_and_passes_its_test() {
    scaffold_builds_and_passes_its_test("c");
}

#[test]
fn assemblyscript_project_builds_and_passes_its_test() {
    scaffold_builds_and_passes_its_test("assemblyscript");
}

#[test]
fn python_project_builds_and_passes_its_test() {
    scaffold_builds_and_passes_its_test("python");
}

#[test]
fn typescript_project_builds_and_passes_its_test() {
    scaffold_builds_and_passes_its_test("typescript");
}

#[test]
fn bad_names_existing_directories_and_unknown_languages_are_refused() {
    let dir = tempdir("refuse");
    let out = enoki_new(&dir, &["My_Synth"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("DNS-1123"));

    std::fs::create_dir_all(dir.join("taken")).unwrap();
    std::fs::write(dir.join("taken/keep.txt"), "mine").unwrap();
    let out = enoki_new(&dir, &["taken", "--lang", "go"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not empty"));
    assert_eq!(
        std::fs::read_to_string(dir.join("taken/keep.txt")).unwrap(),
        "mine"
    );

    let out = enoki_new(&dir, &["x", "--lang", "cobol"]);
    assert_eq!(out.status.code(), Some(2), "clap rejects it");
    assert!(String::from_utf8_lossy(&out.stderr).contains("typescript"));

    let out = enoki_new(&dir, &["x", "--sdk-dir", "/nonexistent"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--sdk-dir"));
    let _ = std::fs::remove_dir_all(&dir);
}
