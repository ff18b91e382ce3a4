//! `enoki render` over the samples (built to wasm by `make test`) and hostile guests.
#![allow(clippy::unwrap_used)] // test code

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn sample_wasm() -> PathBuf {
    let p = root().join("target/wasm32-wasip1/release/hello-rust.wasm");
    assert!(
        p.exists(),
        "{} is missing: build the samples first (`make test` does: cargo build -p sample-01-hello-rust --target wasm32-wasip1 --release)",
        p.display()
    );
    p
}

fn enoki(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_enoki"))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap()
}

#[test]
fn render_prints_the_sample_resources_grouped_in_apply_order() {
    let wasm = sample_wasm();
    let out = enoki(&[
        "render",
        wasm.to_str().unwrap(),
        "--resource-list",
        "samples/01-hello-rust/fixtures/input.json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let g0 = text.find("# ---- readiness group 0 ----").unwrap();
    let g1 = text.find("# ---- readiness group 1 ----").unwrap();
    let settings = text.find("name: hello-settings").unwrap();
    let message = text.find("name: hello-message").unwrap();
    assert!(g0 < settings && settings < g1 && g1 < message, "{text}");
    assert!(
        text.contains("namespace: demo"),
        "namespaces default to the composition's"
    );
    assert!(text.contains("# info: greeting \"hola\""));
}

#[test]
fn rendering_twice_is_byte_identical() {
    let wasm = sample_wasm();
    let args = [
        "render",
        wasm.to_str().unwrap(),
        "--resource-list",
        "samples/01-hello-rust/fixtures/input.json",
        "-o",
        "json",
    ];
    let a = enoki(&args);
    let b = enoki(&args);
    assert!(a.status.success());
    assert_eq!(a.stdout, b.stdout);
    let v: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
    assert_eq!(v["groups"][1]["resources"].as_array().unwrap().len(), 2);
}

#[test]
fn render_with_bindings_from_files_and_a_composition() {
    let dir = std::env::temp_dir().join(format!("enoki-render-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {greeting: hej}\n",
    )
    .unwrap();
    std::fs::write(dir.join("comp.yaml"), "apiVersion: enoki.dev/v1alpha1\nkind: Composition\nmetadata: {name: web, namespace: shop}\nspec: {synthesizer: {name: x}}\n").unwrap();
    let wasm = sample_wasm();
    let out = enoki(&[
        "render",
        wasm.to_str().unwrap(),
        "-c",
        dir.join("comp.yaml").to_str().unwrap(),
        "-i",
        &format!("config={}", dir.join("cm.yaml").display()),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("name: web-settings")
            && text.contains("greeting: hej")
            && text.contains("namespace: shop"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failing_synthesizer_exits_non_zero_with_one_clear_paragraph() {
    let guest = root().join("tests/guests/exit3.wat");
    let out = enoki(&["render", guest.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("synthesis failed (ExitCode)") && err.contains("bad input"),
        "{err}"
    );

    let guest = root().join("tests/guests/garbage.wat");
    let out = enoki(&["render", guest.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("MalformedOutput")
    );

    let wasm = sample_wasm();
    let out = enoki(&["render", wasm.to_str().unwrap()]);
    assert!(!out.status.success(), "the sample needs its config input");
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("ErrorResult")
    );

    let out = enoki(&["render", "builtin:nope"]);
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("unknown built-in")
    );
}

#[test]
fn render_go_sample() {
    let wasm = root().join("target/samples/go.wasm");
    assert!(
        wasm.exists(),
        "{} is missing: run hack/build-samples.sh (make test does)",
        wasm.display()
    );
    let out = enoki(&[
        "render",
        wasm.to_str().unwrap(),
        "--resource-list",
        "samples/03-go/input.json",
        "-o",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["groups"][0]["readinessGroup"], 0);
    assert_eq!(
        v["groups"][0]["resources"][0]["metadata"]["name"],
        "web-settings"
    );
    let kinds: Vec<&str> = v["groups"][1]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Service", "ServiceAccount"]);
    assert_eq!(v["results"][0]["message"], "built with Go");
}

#[test]
fn render_component_sample() {
    let wasm = root().join("target/wasm32-wasip2/release/rust-component.wasm");
    assert!(
        wasm.exists(),
        "{} is missing: run hack/build-samples.sh (make test does)",
        wasm.display()
    );
    let out = enoki(&[
        "render",
        wasm.to_str().unwrap(),
        "--resource-list",
        "samples/02-rust-component/fixtures/input.json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("kind: Role\n")
            && text.contains("name: platform-ana")
            && text.contains("tier: gold"),
        "{text}"
    );
}

#[test]
fn render_c_sample() {
    let wasm = root().join("target/samples/c.wasm");
    assert!(
        wasm.exists(),
        "{} is missing: run hack/build-samples.sh (make test does)",
        wasm.display()
    );
    let out = enoki(&[
        "render",
        wasm.to_str().unwrap(),
        "--resource-list",
        "samples/04-c/input.json",
        "-o",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["groups"][0]["resources"][0]["metadata"]["name"],
        "greeter-c"
    );
    let kinds: Vec<&str> = v["groups"][1]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Secret", "ServiceAccount"]);
}

#[test]
fn render_eno_go_sample() {
    let wasm = root().join("target/samples/eno-go.wasm");
    assert!(
        wasm.exists(),
        "{} is missing: run hack/build-samples.sh (make test does)",
        wasm.display()
    );
    let out = enoki(&[
        "render",
        wasm.to_str().unwrap(),
        "--resource-list",
        "samples/11-eno-go/input.json",
        "-o",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Readiness group 0: the Service; group 1 (eno.azure.io/readiness-group): the Deployment.
    let service = &v["groups"][0]["resources"][0];
    assert_eq!(service["kind"], "Service");
    assert_eq!(
        service["metadata"]["name"], "web",
        "named from COMPOSITION_NAME"
    );
    assert_eq!(service["metadata"]["namespace"], "team-a");
    let deployment = &v["groups"][1]["resources"][0];
    assert_eq!(deployment["kind"], "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "nginx:1.27");
    assert_eq!(
        container["env"],
        serde_json::json!([{"name": "FEATURE_X", "value": "on"}, {"name": "LOG_LEVEL", "value": "debug"}]),
        "the optional input, typed"
    );
    assert!(deployment["metadata"].get("creationTimestamp").is_none());
    assert!(deployment.get("status").is_none());

    // Without the optional input the field stays nil; without the required one, an error result.
    let mut list: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("samples/11-eno-go/input.json")).unwrap(),
    )
    .unwrap();
    list["items"].as_array_mut().unwrap().pop();
    let path = std::env::temp_dir().join(format!("eno-go-{}.json", std::process::id()));
    std::fs::write(&path, list.to_string()).unwrap();
    let out = enoki(&[
        "render",
        wasm.to_str().unwrap(),
        "--resource-list",
        path.to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["groups"][1]["resources"][0]["spec"]["template"]["spec"]["containers"][0]
            .get("env")
            .is_none()
    );
    list["items"].as_array_mut().unwrap().clear();
    std::fs::write(&path, list.to_string()).unwrap();
    let out = enoki(&[
        "render",
        wasm.to_str().unwrap(),
        "--resource-list",
        path.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(&path);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("\"config\"") && stderr.contains("not found"),
        "{stderr}"
    );
}

/// Samples 08–10 (AssemblyScript, Python, TypeScript; built by `hack/build-samples.sh`) render
/// their fixture exactly as their golden file says (`enoki render --expect`).
fn render_matches_golden(wasm: &str, sample: &str) {
    let module = root().join("target/samples").join(wasm);
    assert!(
        module.exists(),
        "{} is missing: hack/build-samples.sh builds it",
        module.display()
    );
    let input = format!("samples/{sample}/fixtures/input.json");
    let golden = format!("samples/{sample}/fixtures/expected.yaml");
    let out = enoki(&[
        "render",
        module.to_str().unwrap(),
        "--resource-list",
        &input,
        "--expect",
        &golden,
    ]);
    assert!(
        out.status.success(),
        "{sample}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("output matches"));
}

#[test]
fn assemblyscript_sample_matches_its_golden_output() {
    render_matches_golden("assemblyscript.wasm", "08-assemblyscript");
}

#[test]
fn python_sample_matches_its_golden_output() {
    render_matches_golden("python.wasm", "09-python");
}

#[test]
fn typescript_sample_matches_its_golden_output() {
    render_matches_golden("typescript.wasm", "10-typescript");
}

#[test]
fn python_sample_reports_bad_input_naming_the_field() {
    let module = root().join("target/samples/python.wasm");
    let dir = std::env::temp_dir().join(format!("enoki-render-py-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(root().join("samples/09-python/fixtures/input.json"))
        .unwrap()
        .replace("\"minReplicas\": \"2\"", "\"minReplicas\": \"two\"");
    std::fs::write(dir.join("input.json"), text).unwrap();
    let out = enoki(&[
        "render",
        module.to_str().unwrap(),
        "--resource-list",
        dir.join("input.json").to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("ErrorResult")
            && stderr.contains("data.minReplicas: 'two' is not an integer"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `enoki render --timings MODULE` with `extra` arguments: its stderr (the render may fail:
/// the module line comes first).
fn timed(module: &Path, extra: &[&str]) -> (bool, String, Vec<u8>) {
    let out = Command::new(env!("CARGO_BIN_EXE_enoki"))
        .arg("render")
        .arg(module)
        .arg("--timings")
        .args(extra)
        .current_dir(root())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), err, out.stdout)
}

/// A second render of a module loads what the first compiled from the cache directory (the
/// controller's compile cache) instead of compiling it: a component (the Python sample) and a
/// large core module that starts on the baseline tier (the 84.4 MB Helm module). `--no-cache`
/// reads and writes none, also when `ENOKI_CACHE_DIR` is set (empty or not).
#[test]
fn a_second_render_loads_the_module_from_the_compile_cache() {
    let dir = std::env::temp_dir().join(format!("enoki-render-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = ["--cache-dir", dir.to_str().unwrap()];
    let python = root().join("target/samples/python.wasm");
    let helm = root().join("target/samples/helm-chart.wasm");
    for m in [&python, &helm] {
        assert!(
            m.exists(),
            "{} is missing: hack/build-samples.sh builds it",
            m.display()
        );
    }
    let list = [
        "--resource-list",
        "samples/09-python/fixtures/input.json",
        "-o",
        "json",
    ];
    fn with<'a>(cache: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        [cache, extra].concat()
    }
    let with = |extra: &[&'static str]| with(&cache, extra);
    let (ok, first, out1) = timed(&python, &with(&list));
    assert!(ok && first.contains("module: compiled (kept in"), "{first}");
    let (ok, second, out2) = timed(&python, &with(&list));
    assert!(
        ok && second.contains("module: loaded from the compile cache"),
        "{second}"
    );
    assert_eq!(out1, out2);
    eprintln!("python sample:\n{first}{second}");
    // The Helm module without a chart fails its synthesis, after loading.
    let (_, first, _) = timed(&helm, &cache);
    assert!(first.contains("module: compiled (kept in"), "{first}");
    let (_, second, _) = timed(&helm, &cache);
    assert!(
        second.contains("module: loaded from the compile cache"),
        "{second}"
    );
    eprintln!("helm module:\n{first}{second}");
    // --no-cache: compiled without any cache directory, whatever ENOKI_CACHE_DIR says.
    let none = dir.join("unused");
    for env in ["", none.to_str().unwrap()] {
        let out = Command::new(env!("CARGO_BIN_EXE_enoki"))
            .args([
                "render",
                python.to_str().unwrap(),
                "--timings",
                "--no-cache",
            ])
            .args(&list[..2])
            .env("ENOKI_CACHE_DIR", env)
            .env("XDG_CACHE_HOME", &none)
            .current_dir(root())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(err.contains("module: compiled (no cache)"), "{err}");
    }
    assert!(!none.exists(), "--no-cache wrote a cache");
    std::fs::remove_dir_all(&dir).unwrap();
}
