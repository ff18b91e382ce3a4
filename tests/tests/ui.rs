//! `enoki ui` in a real browser (Debian's headless `chromium` through `chromedriver`) against
//! the real control plane with the controller running: the fleet lists the Compositions,
//! an input change turns a resource from ready to waiting and back on the open page without a
//! reload, the DAG has the groups' order edges and the CRD → custom resource edge, a Secret's
//! data is nowhere in the page or its API, and requests without the token or from another
//! Host are refused. The test takes the screenshots in `docs/images/`.
#![allow(clippy::unwrap_used)] // test code

use std::io::{Read as _, Write as _};
use std::time::Duration;

use fantoccini::Client;
use harness::browser::{browser, js, port_of, start_ui, wait_css};
use harness::{
    Enoki, TestEnv, apply_composition, composition_ready, echo_module, eventually, install_crds,
    install_synthesizer, set_echo_items, workspace_root,
};
use serde_json::{Value, json};

const SECRET: &str = "hunter2-ui-never-shown";

/// Saves a screenshot under `target/ui-screenshots/`, and as the user guide's image in
/// `docs/images/` with `ENOKI_UPDATE_SCREENSHOTS=1`.
async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    let mut dirs = vec![workspace_root().join("target/ui-screenshots")];
    if std::env::var_os("ENOKI_UPDATE_SCREENSHOTS").is_some_and(|v| v == "1") {
        dirs.push(workspace_root().join("docs/images"));
    }
    for dir in dirs {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), &png).unwrap();
    }
}

/// Waits until the element `css` has the text `text`.
async fn wait_text(c: &Client, css: &str, text: &str) {
    let script = format!(
        "const e = document.querySelector({}); return e ? e.textContent : null",
        json!(css)
    );
    eventually(
        &format!("{css} says {text:?}"),
        Duration::from_secs(90),
        || async { (js(c, &script).await == json!(text)).then_some(()) },
    )
    .await;
}

/// `enoki <args>`: (exit code, stdout + stderr), killed after `secs` (a failure, not a hang).
fn enoki_within(args: &[&str], secs: u64) -> (i32, String) {
    let mut child = std::process::Command::new(harness::enoki_bin())
        .args(args)
        .env("KUBECONFIG", harness::kubeconfig_path())
        .env_remove("ENOKI_REMOTE_KUBECONFIG")
        .current_dir(workspace_root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            panic!("enoki {args:?} did not end within {secs} s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// The echo items: a Secret and a CRD (group 0), a ConfigMap gated on `x` (group 1) and a
/// custom resource of the CRD (group 2).
fn items(ns: &str, x: &str) -> Value {
    let group = format!("{ns}.ui.example");
    json!([
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
         "stringData": {"password": SECRET}},
        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
         "metadata": {"name": format!("widgets.{group}")},
         "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gate", "annotations": {
            "enoki.dev/readiness-group": "1", "enoki.dev/readiness": "self.data.x == 'yes'"}},
         "data": {"x": x}},
        {"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "w",
            "annotations": {"enoki.dev/readiness-group": "2"}}, "spec": {"size": 1}},
    ])
}

/// The raw answer to `GET path` with this Host header.
fn raw_get(port: u16, host: &str, path: &str) -> String {
    raw_get_with(port, host, path, "")
}

/// The raw answer to `GET path` with this Host header and extra header lines.
fn raw_get_with(port: u16, host: &str, path: &str, extra: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[tokio::test]
async fn the_fleet_page_is_live_draws_the_dag_and_never_shows_a_secret() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let ns = env.namespace.clone();
    let synth = install_synthesizer(&env, "ui", &echo_module()).await;
    set_echo_items(&env, "items", &items(&ns, "yes")).await;
    set_echo_items(
        &env,
        "other-items",
        // A readiness check that fails on the Secret's data: the evaluator's error must not
        // quote the value (it reaches the Ready condition, the fleet and the page).
        &json!([{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "other-creds",
            "annotations": {"enoki.dev/readiness": "int(self.data.password) > 0"}},
            "stringData": {"password": SECRET}}]),
    )
    .await;
    apply_composition(&env, "app", &synth, "items", json!({})).await;
    apply_composition(&env, "other", &synth, "other-items", json!({})).await;
    let _controller = Enoki::start(&ns);
    eventually("app is Ready", Duration::from_secs(90), || async {
        composition_ready(&env, "app").await.then_some(())
    })
    .await;

    let (_ui, url) = start_ui(&["-n", &ns]);
    let port = port_of(&url);
    // Without the token, or from a page under another name (DNS rebinding): refused.
    let no_token = raw_get(port, &format!("127.0.0.1:{port}"), "/api/fleet");
    assert!(no_token.starts_with("HTTP/1.1 401"), "{no_token}");
    let token = url.split("token=").nth(1).unwrap();
    let rebound = raw_get(port, "evil.example", &format!("/api/fleet?token={token}"));
    assert!(rebound.starts_with("HTTP/1.1 403"), "{rebound}");
    let page = raw_get(port, &format!("evil.example:{port}"), "/");
    assert!(page.starts_with("HTTP/1.1 403"), "{page}");
    // The token in the query opens only the event stream, not the API.
    let query = raw_get(
        port,
        &format!("127.0.0.1:{port}"),
        &format!("/api/fleet?token={token}"),
    );
    assert!(query.starts_with("HTTP/1.1 401"), "{query}");

    let (_driver, c) = browser().await;
    c.goto(&url).await.unwrap();
    // The fleet: both Compositions, app Ready, other waiting on its check; counts per state;
    // the token left the address.
    wait_css(
        &c,
        &format!("tr[data-composition='{ns}/app'][data-state='ready']"),
        "app listed Ready",
    )
    .await;
    wait_css(
        &c,
        &format!("tr[data-composition='{ns}/other'][data-state='waiting']"),
        "other listed waiting",
    )
    .await;
    assert!(!c.current_url().await.unwrap().as_str().contains("token="));
    wait_text(&c, "[data-count='ready']", "ready 1").await;
    wait_text(&c, "[data-count='waiting']", "waiting 1").await;
    screenshot(&c, "ui-fleet.png").await;
    let fleet_page = c.source().await.unwrap();

    // One Composition: the DAG's nodes and edges.
    c.goto(&format!("http://127.0.0.1:{port}/#/c/{ns}/app"))
        .await
        .unwrap();
    wait_css(
        &c,
        &format!("g.node[data-label='ConfigMap {ns}/gate'][data-state='ready']"),
        "the gate node, ready",
    )
    .await;
    let id_of = |label: String| {
        let c = c.clone();
        async move {
            let script = format!(
                "return document.querySelector(\"g.node[data-label='{label}']\").dataset.id"
            );
            js(&c, &script).await.as_str().unwrap().to_string()
        }
    };
    let crd = id_of(format!("CustomResourceDefinition widgets.{ns}.ui.example")).await;
    let widget = id_of(format!("Widget {ns}/w")).await;
    wait_css(
        &c,
        &format!("path[data-kind='defines'][data-from='{crd}'][data-to='{widget}']"),
        "the CRD → CR edge",
    )
    .await;
    // The CRD (and the Secret) go first, in their own group before group 1.
    wait_css(
        &c,
        "path[data-kind='order'][data-to='group:1']",
        "an order edge into group 1",
    )
    .await;
    wait_css(
        &c,
        "path[data-kind='order'][data-from='group:1'][data-to='group:2']",
        "group 1 → 2",
    )
    .await;
    wait_css(
        &c,
        &format!("g.node[data-label='Secret {ns}/creds']"),
        "the Secret's node",
    )
    .await;
    screenshot(&c, "ui-composition.png").await;

    // Live: the input changes, the gate waits, then is ready again — the same page, no reload.
    js(&c, "window.enokiMarker = 42; return null").await;
    set_echo_items(&env, "items", &items(&ns, "no")).await;
    wait_css(
        &c,
        &format!("tr[data-resource='ConfigMap {ns}/gate'][data-state='waiting']"),
        "the gate waiting",
    )
    .await;
    set_echo_items(&env, "items", &items(&ns, "yes")).await;
    wait_css(
        &c,
        &format!("tr[data-resource='ConfigMap {ns}/gate'][data-state='ready']"),
        "the gate ready again",
    )
    .await;
    assert_eq!(
        js(&c, "return window.enokiMarker").await,
        json!(42),
        "the page was reloaded"
    );

    // No Secret data: not in the pages, not in what their API answers (plain or base64).
    let get = |path: String| {
        let c = c.clone();
        async move {
            let script = format!(
                "const done = arguments[arguments.length - 1];\n\
                 fetch('{path}', {{headers: {{'X-Enoki-Token': localStorage.getItem('enoki-token')}}}})\n\
                   .then(r => r.text()).then(done)"
            );
            let out = c.execute_async(&script, Vec::new()).await.unwrap();
            out.as_str().unwrap().to_string()
        }
    };
    let fleet = eventually(
        "the check's error (without the value) in the fleet",
        Duration::from_secs(60),
        || async {
            let fleet = get("/api/fleet".into()).await;
            fleet
                .contains("Error executing function 'int'")
                .then_some(fleet)
        },
    )
    .await;
    let app = get(format!("/api/compositions/{ns}/app")).await;
    let other = get(format!("/api/compositions/{ns}/other")).await;
    let page = c.source().await.unwrap();
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(SECRET);
    for text in [&fleet_page, &page, &fleet, &app, &other] {
        assert!(
            !text.contains(SECRET) && !text.contains(&b64),
            "Secret data leaked: {text}"
        );
    }
    // Dark theme, by keyboard: focus the theme button and press Enter twice (auto → light → dark).
    for _ in 0..2 {
        js(&c, "document.getElementById('theme').focus(); return null").await;
        c.active_element()
            .await
            .unwrap()
            .send_keys("\u{E007}")
            .await
            .unwrap();
    }
    let theme = js(&c, "return document.documentElement.dataset.theme").await;
    assert_eq!(theme, json!("dark"));
    screenshot(&c, "ui-composition-dark.png").await;
    c.close().await.unwrap();
}

/// A tenant with `edit` in one namespace: the page falls back to the kubeconfig's namespace
/// (and says why), `-n` shows the tenant's namespace, a namespace it may not list is refused
/// at start with a message naming it, and the Synthesizers' refusal is a note.
#[tokio::test]
async fn a_tenant_sees_what_its_rbac_allows_and_is_told_what_not() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    harness::grant_tenant_edit(&env.namespace);
    let ns = env.namespace.clone();
    apply_composition(&env, "app", "no-such-synth", "items", json!({})).await;
    let fleet = |url: &str| {
        let port = port_of(url);
        let token = url.split("token=").nth(1).unwrap().to_string();
        let host = format!("127.0.0.1:{port}");
        let out = raw_get_with(
            port,
            &host,
            "/api/fleet",
            &format!("X-Enoki-Token: {token}\r\n"),
        );
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        out
    };
    // Every namespace is forbidden: the context's namespace, with a note.
    let (_ui, url) = start_ui(&["--context", "tenant-a"]);
    let out = fleet(&url);
    assert!(
        out.contains("listing Compositions in every namespace is forbidden"),
        "{out}"
    );
    // Its own namespace: its Composition.
    let (_ui2, url) = start_ui(&["--context", "tenant-a", "-n", &ns]);
    let out = eventually(
        "the tenant's Composition listed",
        Duration::from_secs(30),
        || {
            let out = fleet(&url);
            async move { out.contains("\"name\":\"app\"").then_some(out) }
        },
    )
    .await;
    assert!(out.contains(&format!("\"namespace\":\"{ns}\"")), "{out}");
    // Synthesizers are cluster-wide and not the tenant's: a note, the rest still shown.
    eventually(
        "the Synthesizers' refusal noted",
        Duration::from_secs(60),
        || {
            let out = fleet(&url);
            async move {
                out.contains("\"Synthesizer\":\"your account may not list them here")
                    .then_some(())
            }
        },
    )
    .await;
    // Another namespace: refused at start, naming it.
    let (code, text) = enoki_within(
        &[
            "ui",
            "--no-open",
            "--context",
            "tenant-a",
            "-n",
            "kube-system",
        ],
        60,
    );
    assert_ne!(code, 0, "{text}");
    assert!(
        text.contains("listing Compositions in kube-system"),
        "{text}"
    );
}
