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

/// README's two lines as a user with only a release runs them: the enoki binary alone in a
/// `bin/` directory with the release's `sdk/` beside it (`dist/bin`, `dist/sdk` of `make
/// release`), an empty HOME, that `bin/` first on PATH; `enoki new my-<lang>-synth --lang
/// <lang>` (no SDK option), then `make test` in it, which finds enoki on PATH. The toolchains
/// keep their own caches and registry settings (Cargo, rustup, Go, npm, pip).
fn scaffold_builds_and_passes_its_test(lang: &str) {
    let dir = tempdir(&format!("{lang}-readme"));
    let bin = dir.join("dist/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let exe = bin.join("enoki");
    std::fs::hard_link(env!("CARGO_BIN_EXE_enoki"), &exe)
        .or_else(|_| std::fs::copy(env!("CARGO_BIN_EXE_enoki"), &exe).map(|_| ()))
        .unwrap();
    let copied = Command::new("cp")
        .args(["-r", &packages()])
        .arg(dir.join("dist/sdk"))
        .status()
        .unwrap();
    assert!(copied.success());
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let env = user_toolchains(&dir, &home, &bin);
    let name = format!("my-{lang}-synth");
    let mut enoki_new = Command::new("enoki");
    enoki_new
        .args(["new", &name, "--lang", lang])
        .current_dir(&dir);
    let out = user_env(&mut enoki_new, &env).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "enoki new: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shipped = dir.join("dist/sdk").canonicalize().unwrap();
    let version = env!("CARGO_PKG_VERSION");
    let origin = format!("SDK {version} from {}", shipped.display());
    assert!(said.contains(&origin), "{said}");
    // Every language but C (which copies the header) installs from its copy of the packages.
    assert_eq!(said.contains("  sdk-packages/"), lang != "c", "{said}");
    // The project installs from its own copy: the release may go.
    std::fs::remove_dir_all(dir.join("dist/sdk")).unwrap();
    check_project(lang, &dir, &name, None, &env);
}

/// HOME, PATH (`bin` first) and the toolchains' settings for a user whose HOME is `home`:
/// rustup's and Cargo's homes and the user's npm and Go settings as they are; a Go module
/// cache of its own in `dir` (so the SDK's module is read from the project's packages),
/// filled from the machine's cache before Go's proxy.
fn user_toolchains(dir: &Path, home: &Path, bin: &Path) -> Vec<(String, String)> {
    let user = PathBuf::from(std::env::var_os("HOME").unwrap());
    let go_env = |k: &str| {
        let out = Command::new("go").args(["env", k]).output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let keep = |k: &str, default: PathBuf| std::env::var_os(k).map_or(default, PathBuf::from);
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let modcache = go_env("GOMODCACHE");
    let proxy = format!("file://{modcache}/cache/download,{}", go_env("GOPROXY"));
    [
        ("HOME", home.display().to_string()),
        ("PATH", path),
        (
            "CARGO_HOME",
            keep("CARGO_HOME", user.join(".cargo"))
                .display()
                .to_string(),
        ),
        (
            "RUSTUP_HOME",
            keep("RUSTUP_HOME", user.join(".rustup"))
                .display()
                .to_string(),
        ),
        ("GOENV", go_env("GOENV")),
        ("GOPROXY", proxy),
        ("GOMODCACHE", dir.join("gomod").display().to_string()),
        ("GOCACHE", go_env("GOCACHE")),
        (
            "NPM_CONFIG_USERCONFIG",
            user.join(".npmrc").display().to_string(),
        ),
        ("npm_config_cache", user.join(".npm").display().to_string()),
        (
            "PIP_CACHE_DIR",
            user.join(".cache/pip").display().to_string(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// `cmd` with this process's environment but `env` (HOME, PATH, the toolchains' caches) and
/// without enoki's own variables or XDG directories; unchanged when `env` is empty.
fn user_env<'a>(cmd: &'a mut Command, env: &[(String, String)]) -> &'a mut Command {
    if env.is_empty() {
        return cmd;
    }
    // enoki's, the XDG directories, and what this workspace's build sets (clippy as rustc's
    // wrapper, Cargo's variables for the test process, a pinned toolchain).
    let ours = [
        "ENOKI",
        "XDG_",
        "CARGO",
        "RUSTC",
        "CLIPPY",
        "RUSTUP_TOOLCHAIN",
        "GO",
    ];
    cmd.env_clear()
        .envs(std::env::vars().filter(|(k, _)| !ours.iter().any(|p| k.starts_with(p))))
        .envs(env.iter().map(|(k, v)| (k, v)))
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
    check_project(lang, &dir, &name, Some(env!("CARGO_BIN_EXE_enoki")), &[]);
}

/// The project `dir/name` has its files, and its `make test` (with `enoki`, else the one on
/// `env`'s PATH) builds it and passes; a changed golden file then fails with a diff.
fn check_project(
    lang: &str,
    dir: &Path,
    name: &str,
    enoki: Option<&str>,
    env: &[(String, String)],
) {
    let project = dir.join(name);
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
    make.arg("test").current_dir(&project);
    user_env(&mut make, env);
    if let Some(enoki) = enoki {
        make.arg(format!("ENOKI={enoki}"));
    }
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
        .args([
            "fixtures/input.json",
            "--expect",
            "fixtures/expected.yaml",
            "--no-cache",
        ])
        .current_dir(&project)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{lang}: {stderr}");
    assert!(
        stderr.contains("-  message: hello, world") && stderr.contains("+  message: hola, world"),
        "{lang}: {stderr}"
    );
    // Go's module cache is read-only.
    let _ = Command::new("chmod").args(["-R", "u+w"]).arg(dir).status();
    let _ = std::fs::remove_dir_all(dir);
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
