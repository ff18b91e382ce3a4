//! Module sources against real servers started here: a real OCI registry process
//! (Debian's `docker-registry`) on 127.0.0.1, and a local TLS server (`openssl s_server`).
//! `enoki module push|inspect`, `enoki render` from a pinned OCI reference and from an https
//! URL with a verified digest, and a Synthesizer whose module comes from the registry.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use harness::workspace_root;

use harness::{Proc, free_port, tempdir, wait_port};

fn enoki(args: &[&str]) -> Output {
    harness::enoki_cli(args)
}

fn sample() -> PathBuf {
    let p = workspace_root().join("target/wasm32-wasip1/release/hello-rust.wasm");
    assert!(
        p.exists(),
        "{} is missing (hack/build-samples.sh)",
        p.display()
    );
    p
}

fn registry() -> (Proc, String) {
    harness::start_registry()
}

fn push(addr: &str, tag: &str) -> String {
    harness::push_module(&sample(), &format!("{addr}/samples/hello:{tag}"))
}

#[test]
fn modules_round_trip_through_a_real_oci_registry() {
    let (_registry, addr) = registry();
    let digest = push(&addr, "v1");
    let pinned = format!("{addr}/samples/hello:v1@{digest}");

    let out = enoki(&["module", "inspect", &pinned]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("WASI preview1 command module"), "{text}");
    assert!(text.contains("wasi_snapshot_preview1::fd_write"), "{text}");
    let file_digest = format!("sha256:{}", hex_sha256(&std::fs::read(sample()).unwrap()));
    assert!(
        text.contains(&file_digest),
        "the layer is the module itself: {text}"
    );

    let out = enoki(&[
        "render",
        &pinned,
        "--resource-list",
        "samples/01-hello-rust/fixtures/input.json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .contains("name: hello-settings")
    );

    let out = enoki(&["module", "inspect", &format!("{addr}/samples/hello:v1")]);
    assert!(
        !out.status.success(),
        "a tag-only reference must be refused"
    );
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("has no digest") && err.contains("@sha256:"),
        "{err}"
    );

    // A layer over the size cap is refused from its descriptor, before it is downloaded.
    let out = enoki(&[
        "render",
        &pinned,
        "--max-module-size",
        "1000",
        "--resource-list",
        "samples/01-hello-rust/fixtures/input.json",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("over the module size limit of 1000 bytes") && err.contains("layer sha256:"),
        "{err}"
    );

    let wrong = format!("{addr}/samples/hello:v1@sha256:{}", "0".repeat(64));
    assert!(
        !enoki(&["module", "inspect", &wrong]).status.success(),
        "an unknown digest is refused"
    );
}

fn hex_sha256(bytes: &[u8]) -> String {
    let out = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    let mut child = out;
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let o = child.wait_with_output().unwrap();
    String::from_utf8(o.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// A CA (`ca.crt`) and a serving certificate for 127.0.0.1 (`srv.crt`, `srv.key`) in `dir`.
fn make_certs(dir: &Path) {
    let sh = |script: &str| {
        let st = Command::new("bash")
            .arg("-c")
            .arg(script)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&st.stderr)
        );
    };
    sh(
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -keyout ca.key -out ca.crt -subj /CN=test-ca \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null",
    );
    sh(
        "printf '%s\\n' basicConstraints=critical,CA:FALSE keyUsage=critical,digitalSignature,keyEncipherment \
        extendedKeyUsage=serverAuth subjectAltName=IP:127.0.0.1 > srv.ext && \
        openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj /CN=127.0.0.1 2>/dev/null && \
        openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -extfile srv.ext -out srv.crt 2>/dev/null",
    );
}

/// A CA and a serving certificate for 127.0.0.1, and `openssl s_server -WWW` serving `dir`.
fn tls_server(dir: &Path) -> (Proc, u16, PathBuf) {
    make_certs(dir);
    let port = free_port();
    let child = Command::new("openssl")
        .args([
            "s_server",
            "-quiet",
            "-WWW",
            "-accept",
            &port.to_string(),
            "-cert",
            "srv.crt",
            "-key",
            "srv.key",
        ])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_port(port);
    (Proc::new(child), port, dir.join("ca.crt"))
}

#[test]
fn https_modules_are_verified_against_their_sha256() {
    let dir = tempdir("https");
    std::fs::copy(sample(), dir.join("hello.wasm")).unwrap();
    let sha = hex_sha256(&std::fs::read(sample()).unwrap());
    let (_server, port, ca) = tls_server(&dir);
    let url = format!("https://127.0.0.1:{port}/hello.wasm");
    let fixture = "samples/01-hello-rust/fixtures/input.json";

    let ok = enoki(&[
        "render",
        &url,
        "--sha256",
        &sha,
        "--ca-file",
        ca.to_str().unwrap(),
        "--resource-list",
        fixture,
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(
        String::from_utf8(ok.stdout)
            .unwrap()
            .contains("name: hello-message")
    );

    let bad = enoki(&[
        "render",
        &url,
        "--sha256",
        &"a".repeat(64),
        "--ca-file",
        ca.to_str().unwrap(),
        "--resource-list",
        fixture,
    ]);
    assert!(!bad.status.success());
    let err = String::from_utf8(bad.stderr).unwrap();
    assert!(err.contains("digest mismatch"), "{err}");

    let untrusted = enoki(&["render", &url, "--sha256", &sha, "--resource-list", fixture]);
    assert!(
        !untrusted.status.success(),
        "a server the CA list does not trust is refused"
    );

    let no_digest = enoki(&[
        "render",
        &url,
        "--ca-file",
        ca.to_str().unwrap(),
        "--resource-list",
        fixture,
    ]);
    assert!(
        String::from_utf8(no_digest.stderr)
            .unwrap()
            .contains("needs sha256")
    );
}

#[tokio::test]
async fn a_synthesizer_pulls_its_module_from_the_registry_by_digest() {
    use crds::{Composition, Synthesizer};
    use kube::api::{Api, Patch, PatchParams};
    use serde_json::json;

    let (_registry, addr) = registry();
    let digest = push(&addr, "e2e");
    let env = harness::TestEnv::new().await;
    harness::install_crds(&env.client).await;
    let name = format!("{}-oci", env.namespace);
    let synths: Api<Synthesizer> = Api::all(env.client.clone());
    let synth = json!({
        "apiVersion": "enoki.dev/v1alpha1", "kind": "Synthesizer", "metadata": {"name": name},
        "spec": {
            "module": {"oci": format!("{addr}/samples/hello:e2e@{digest}")},
            "refs": [{"key": "config", "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}}],
        },
    });
    synths
        .patch(
            &name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&synth),
        )
        .await
        .unwrap();
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = env.api();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"greeting": "oci"}});
    cms.patch(
        "cfg",
        &PatchParams::apply("test").force(),
        &Patch::Apply(&cm),
    )
    .await
    .unwrap();
    let comps: Api<Composition> = env.api();
    let comp = json!({
        "apiVersion": "enoki.dev/v1alpha1", "kind": "Composition", "metadata": {"name": "from-oci"},
        "spec": {"synthesizer": {"name": name}, "bindings": [{"key": "config", "resource": {"name": "cfg"}}]},
    });
    comps
        .patch(
            "from-oci",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&comp),
        )
        .await
        .unwrap();
    let enoki = harness::Enoki::start(&env.namespace);
    let ready = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let c = comps.get("from-oci").await.unwrap();
            if c.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            }) {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not Ready; enoki logs:\n{}", enoki.logs()));
    let module_digest = ready
        .status
        .unwrap()
        .current_synthesis
        .unwrap()
        .module_digest
        .unwrap();
    assert_eq!(
        module_digest,
        format!("sha256:{}", hex_sha256(&std::fs::read(sample()).unwrap()))
    );
    let msg = cms.get("from-oci-message").await.unwrap().data.unwrap()["message"].clone();
    assert_eq!(msg, "oci, world");
}

/// `tests/servers/https_redirect.py` (redirects, chunked bodies) serving `dir` over TLS.
fn redirect_server(dir: &Path) -> (Proc, u16, PathBuf) {
    make_certs(dir);
    let port = free_port();
    let child = Command::new("python3")
        .arg(workspace_root().join("tests/servers/https_redirect.py"))
        .args([&port.to_string(), "srv.crt", "srv.key", "."])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 runs (hack/setup.sh installs it)");
    wait_port(port);
    (Proc::new(child), port, dir.join("ca.crt"))
}

#[test]
fn https_downloads_are_capped_and_redirects_stay_public_and_https() {
    let dir = tempdir("redirects");
    std::fs::copy(sample(), dir.join("hello.wasm")).unwrap();
    let sha = hex_sha256(&std::fs::read(sample()).unwrap());
    let (_server, port, ca) = redirect_server(&dir);
    let ca = ca.to_str().unwrap().to_string();
    let fixture = "samples/01-hello-rust/fixtures/input.json";
    let render = |url: &str, extra: &[&str]| {
        let mut args = vec![
            "render",
            url,
            "--sha256",
            &sha,
            "--ca-file",
            &ca,
            "--resource-list",
            fixture,
        ];
        args.extend(extra);
        let out = enoki(&args);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let direct = format!("https://127.0.0.1:{port}/hello.wasm");
    let streamed = format!("https://127.0.0.1:{port}/stream/hello.wasm");

    // Size cap: obeyed by default; violated from Content-Length and while streaming.
    assert!(render(&direct, &[]).0, "{}", render(&direct, &[]).1);
    assert!(render(&streamed, &[]).0);
    for url in [&direct, &streamed] {
        let (ok, err) = render(url, &["--max-module-size", "1000"]);
        assert!(!ok);
        assert!(
            err.contains("over the module size limit of 1000 bytes"),
            "{url}: {err}"
        );
    }

    // A redirect to a loopback address is refused unless allowed.
    let to_loopback = format!("https://127.0.0.1:{port}/redirect?to={direct}");
    let (ok, err) = render(&to_loopback, &[]);
    assert!(!ok);
    assert!(
        err.contains("loopback, link-local or private address"),
        "{err}"
    );
    let (ok, err) = render(&to_loopback, &["--allow-private-redirects"]);
    assert!(ok, "allowed by flag: {err}");
    // …and localhost by name, too.
    let by_name =
        format!("https://127.0.0.1:{port}/redirect?to=https://localhost:{port}/hello.wasm");
    assert!(
        render(&by_name, &[])
            .1
            .contains("loopback, link-local or private")
    );
    // A redirect to plain http is refused even when private addresses are allowed.
    let to_http =
        format!("https://127.0.0.1:{port}/redirect?to=http://127.0.0.1:{port}/hello.wasm");
    let (ok, err) = render(&to_http, &["--allow-private-redirects"]);
    assert!(!ok);
    assert!(err.contains("only https:// is followed"), "{err}");
}

/// A docker config dir for `DOCKER_CONFIG`: `auths` with `user:password` for `registry`.
fn docker_config(registry: &str, user: &str, password: &str) -> harness::TempDir {
    use base64::Engine;
    let dir = tempdir("docker-config");
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    std::fs::write(
        dir.join("config.json"),
        format!(r#"{{"auths": {{"{registry}": {{"auth": "{auth}"}}}}}}"#),
    )
    .unwrap();
    dir
}

/// A docker config dir whose `credHelpers` sends `registry` to a credential helper
/// (`docker-credential-enokitest`, a script in the same dir, to be put on PATH).
fn docker_config_with_helper(registry: &str, user: &str, password: &str) -> harness::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir("docker-helper");
    std::fs::write(
        dir.join("config.json"),
        format!(r#"{{"credHelpers": {{"{registry}": "enokitest"}}}}"#),
    )
    .unwrap();
    let helper = dir.join("docker-credential-enokitest");
    std::fs::write(
        &helper,
        format!(
            "#!/bin/sh\n[ \"$1\" = get ] || exit 1\nread -r server\n\
             printf '{{\"ServerURL\":\"%s\",\"Username\":\"{user}\",\"Secret\":\"{password}\"}}' \"$server\"\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn enoki_with_env(args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Output {
    let mut cmd = Command::new(workspace_root().join("target/debug/enoki"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// `enoki module push` and `inspect` use the user's docker config (`auths`) and credential
/// helpers (`credHelpers`); without credentials the registry's refusal is named.
#[test]
fn the_cli_pushes_and_inspects_with_the_docker_config_and_credential_helpers() {
    let (_registry, addr) = harness::start_registry_with_auth("ci", "cli-pass-7731");
    let reference = format!("{addr}/private/hello:v1");
    let file = sample();
    let file = file.to_string_lossy();
    let empty = tempdir("no-docker-config");
    let out = enoki_with_env(
        &["module", "push", &file, &reference],
        &[("DOCKER_CONFIG", empty.as_os_str())],
    );
    assert!(!out.status.success(), "an anonymous push is refused");

    let config = docker_config(&addr, "ci", "cli-pass-7731");
    let out = enoki_with_env(
        &["module", "push", &file, &reference],
        &[("DOCKER_CONFIG", config.as_os_str())],
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let digest = text.lines().next().unwrap().to_string();
    let pinned = format!("{reference}@{digest}");

    let helper = docker_config_with_helper(&addr, "ci", "cli-pass-7731");
    let path = format!(
        "{}:{}",
        helper.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = enoki_with_env(
        &["module", "inspect", &pinned],
        &[
            ("DOCKER_CONFIG", helper.as_os_str()),
            ("PATH", std::ffi::OsStr::new(&path)),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("WASI preview1 command module"));

    let out = enoki_with_env(
        &["module", "inspect", &pinned],
        &[("DOCKER_CONFIG", empty.as_os_str())],
    );
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success());
    assert!(
        err.contains("unauthorized") && err.contains(&addr),
        "the refusal names the registry: {err}"
    );
}

/// `.dockerconfigjson` (base64) of `puller:password` for `registry`.
fn docker_config_json(registry: &str, password: &str) -> String {
    use base64::Engine;
    let b64 = |s: String| base64::engine::general_purpose::STANDARD.encode(s);
    let auth = b64(format!("puller:{password}"));
    b64(format!(
        r#"{{"auths":{{"{registry}":{{"auth":"{auth}"}}}}}}"#
    ))
}

/// Pushes the sample to the private registry `addr` (as `puller`) and returns its digest.
fn push_private(addr: &str, password: &str) -> String {
    let config = docker_config(addr, "puller", password);
    let out = enoki_with_env(
        &[
            "module",
            "push",
            &sample().to_string_lossy(),
            &format!("{addr}/private/hello:e2e"),
        ],
        &[("DOCKER_CONFIG", config.as_os_str())],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap()
        .to_string()
}

/// Secrets `regcred` (`password`) and `wrongcred`, ConfigMap `cfg`, and three Synthesizers
/// and Compositions on the private module: `with` (regcred), `without`, `wrong` (wrongcred).
async fn private_compositions(env: &harness::TestEnv, addr: &str, digest: &str, password: &str) {
    use kube::api::{Api, Patch, PatchParams};
    use serde_json::json;
    let ns = env.namespace.as_str();
    let apply = PatchParams::apply("test").force();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = env.api();
    for (name, pw) in [("regcred", password), ("wrongcred", "not-the-password")] {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name}, "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": docker_config_json(addr, pw)}});
        secrets
            .patch(name, &apply, &Patch::Apply(&secret))
            .await
            .unwrap();
    }
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = env.api();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
        "data": {"greeting": "private"}});
    cms.patch("cfg", &apply, &Patch::Apply(&cm)).await.unwrap();
    let synths: Api<crds::Synthesizer> = Api::all(env.client.clone());
    let comps: Api<crds::Composition> = env.api();
    for (suffix, secret) in [
        ("with", Some("regcred")),
        ("without", None),
        ("wrong", Some("wrongcred")),
    ] {
        let name = format!("{ns}-{suffix}");
        let mut module = json!({"oci": format!("{addr}/private/hello:e2e@{digest}")});
        if let Some(s) = secret {
            module["pullSecret"] = json!({"namespace": ns, "name": s});
        }
        let synth = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Synthesizer",
            "metadata": {"name": name},
            "spec": {"module": module, "refs": [{"key": "config",
                "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}}]}});
        synths
            .patch(&name, &apply, &Patch::Apply(&synth))
            .await
            .unwrap();
        let comp = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
            "metadata": {"name": suffix},
            "spec": {"synthesizer": {"name": name},
                "bindings": [{"key": "config", "resource": {"name": "cfg"}}]}});
        comps
            .patch(suffix, &apply, &Patch::Apply(&comp))
            .await
            .unwrap();
    }
}

/// Every status, Event and log line of the test's objects, as one text.
async fn everything_readable(env: &harness::TestEnv, enoki: &harness::Enoki) -> String {
    use kube::api::Api;
    let synths: Api<crds::Synthesizer> = Api::all(env.client.clone());
    let comps: Api<crds::Composition> = env.api();
    let mut seen = String::new();
    for s in synths.list(&Default::default()).await.unwrap() {
        if s.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with(&env.namespace))
        {
            seen.push_str(&serde_json::to_string(&s.status).unwrap());
        }
    }
    for c in comps.list(&Default::default()).await.unwrap() {
        seen.push_str(&serde_json::to_string(&c.status).unwrap());
    }
    let events: Api<k8s_openapi::api::events::v1::Event> = env.api();
    for e in events.list(&Default::default()).await.unwrap() {
        seen.push_str(e.note.as_deref().unwrap_or_default());
    }
    seen.push_str(&enoki.logs());
    seen
}

/// `spec.module.pullSecret`: a Synthesizer pulls from a registry that requires credentials
/// with a `kubernetes.io/dockerconfigjson` Secret; without it (or with a wrong password) the
/// condition says unauthorized and names the registry, and the password appears in no status,
/// Event or log.
#[tokio::test]
async fn a_synthesizer_pulls_from_a_private_registry_with_its_pull_secret() {
    const PASSWORD: &str = "pull-pass-90210";
    let (_registry, addr) = harness::start_registry_with_auth("puller", PASSWORD);
    let digest = push_private(&addr, PASSWORD);
    let env = harness::TestEnv::new().await;
    harness::install_crds(&env.client).await;
    private_compositions(&env, &addr, &digest, PASSWORD).await;
    let enoki = harness::Enoki::start(&env.namespace);
    harness::wait_ready(&env, "with").await;
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> = env.api();
    let msg = cms.get("with-message").await.unwrap().data.unwrap()["message"].clone();
    assert_eq!(msg, "private, world");

    for (name, says) in [
        ("without", "no credentials were sent"),
        ("wrong", "the credentials from Secret"),
    ] {
        let (status, reason, message) = harness::eventually(
            &format!("{name}: the condition says unauthorized"),
            Duration::from_secs(60),
            || async {
                harness::composition_condition(&env, name, "Synthesized")
                    .await
                    .filter(|(_, _, m)| m.contains("unauthorized"))
            },
        )
        .await;
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "ModuleUnavailable")
        );
        assert!(
            message.contains(&addr) && message.contains(says),
            "{name}: {message}"
        );
        assert!(!harness::composition_ready(&env, name).await);
    }
    // The password is nowhere a user or an operator reads.
    let seen = everything_readable(&env, &enoki).await;
    assert!(seen.contains("unauthorized"), "the refusals were recorded");
    assert!(!seen.contains(PASSWORD) && !seen.contains("not-the-password"));
    assert!(!seen.contains(&docker_config_json(&addr, PASSWORD)));
}

/// A `docker-credential-*` helper that never answers holds a pull for its timeout only.
#[test]
fn a_credential_helper_that_never_answers_is_given_up() {
    let dir = tempdir("slow-helper");
    let helper = dir.join("docker-credential-stuck");
    std::fs::write(&helper, "#!/bin/sh\nexec sleep 600\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(dir.join("config.json"), r#"{"credsStore": "stuck"}"#).unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let port = free_port();
    let reference = format!("127.0.0.1:{port}/m:v1@sha256:{}", "0".repeat(64));
    let started = std::time::Instant::now();
    let mut child = Command::new(workspace_root().join("target/debug/enoki"))
        .args(["render", &reference])
        .env("DOCKER_CONFIG", &dir)
        .env("PATH", path)
        .env("ENOKI_CREDENTIAL_HELPER_TIMEOUT", "1s")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let exited = child.try_wait().unwrap().is_some();
    if !exited {
        let _ = child.kill();
    }
    assert!(
        exited,
        "enoki render still waits for the credential helper after 60 s"
    );
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("cannot fetch module"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}
