//! `enoki ui` in a real browser (Debian's headless `chromium` through `chromedriver`) against
//! the real control plane with the controller running: the fleet lists the Compositions,
//! an input change turns a resource from ready to waiting and back on the open page without a
//! reload, the DAG has the groups' order edges and the CRD → custom resource edge, a Secret's
//! data is nowhere in the page or its API, and requests without the token or from another
//! Host are refused. The test takes the screenshots in `docs/images/`.
#![allow(clippy::unwrap_used)] // test code

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};
use harness::{
    Enoki, TestEnv, apply_composition, composition_ready, echo_module, eventually, free_port,
    install_crds, install_synthesizer, kubeconfig_path, set_echo_items, wait_port, workspace_root,
};
use serde_json::{Value, json};

const SECRET: &str = "hunter2-ui-never-shown";

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A program on PATH, or a failure that says how to install it (never a skip).
fn program(name: &str, package: &str) -> String {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "`{name}` is missing: the browser test needs Debian's `{package}` (hack/setup.sh installs it)"
    );
    name.to_string()
}

/// `enoki ui -n <ns>` and the address it printed.
fn start_ui(ns: &str) -> (Killed, String) {
    let bin = workspace_root().join("target/debug/enoki");
    assert!(
        bin.exists(),
        "{} is missing (make test builds it)",
        bin.display()
    );
    let mut child = Command::new(bin)
        .args(["ui", "--no-open", "-n", ns])
        .env("KUBECONFIG", kubeconfig_path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("enoki ui: ")
        .unwrap_or_else(|| panic!("enoki ui printed {line:?}"))
        .to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    (Killed(child), url)
}

/// chromedriver on a free port and a headless Chromium session.
async fn browser() -> (Killed, Client) {
    let chromium = program("chromium", "chromium");
    let driver = program("chromedriver", "chromium-driver");
    let port = free_port();
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let child = Killed(child);
    wait_port(port);
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"binary": format!("/usr/bin/{chromium}"), "args": ["--headless=new", "--no-sandbox",
            "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"]}),
    );
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .unwrap();
    (child, client)
}

/// Runs `script` in the page and returns its value.
async fn js(c: &Client, script: &str) -> Value {
    c.execute(script, Vec::new()).await.unwrap()
}

/// Waits until `css` matches an element of the page (the page updates itself).
async fn wait_css(c: &Client, css: &str, what: &str) {
    let script = format!("return document.querySelector({}) !== null", json!(css));
    eventually(what, Duration::from_secs(90), || async {
        js(c, &script)
            .await
            .as_bool()
            .unwrap_or(false)
            .then_some(())
    })
    .await;
}

async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    let dir = workspace_root().join("docs/images");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), png).unwrap();
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
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
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
        &json!([{"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "other"}, "data": {"x": "1"}}]),
    )
    .await;
    apply_composition(&env, "app", &synth, "items", json!({})).await;
    apply_composition(&env, "other", &synth, "other-items", json!({})).await;
    let _controller = Enoki::start(&ns);
    eventually("app is Ready", Duration::from_secs(90), || async {
        composition_ready(&env, "app").await.then_some(())
    })
    .await;

    let (_ui, url) = start_ui(&ns);
    let port: u16 = url["http://127.0.0.1:".len()..]
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // Without the token, or from a page under another name (DNS rebinding): refused.
    let no_token = raw_get(port, &format!("127.0.0.1:{port}"), "/api/fleet");
    assert!(no_token.starts_with("HTTP/1.1 401"), "{no_token}");
    let token = url.split("token=").nth(1).unwrap();
    let rebound = raw_get(port, "evil.example", &format!("/api/fleet?token={token}"));
    assert!(rebound.starts_with("HTTP/1.1 403"), "{rebound}");

    let (_driver, c) = browser().await;
    c.goto(&url).await.unwrap();
    // The fleet: both Compositions, app Ready, counts per state; the token left the address.
    wait_css(
        &c,
        &format!("tr[data-composition='{ns}/app'][data-state='ready']"),
        "app listed Ready",
    )
    .await;
    wait_css(
        &c,
        &format!("tr[data-composition='{ns}/other'][data-state='ready']"),
        "other listed Ready",
    )
    .await;
    assert!(!c.current_url().await.unwrap().as_str().contains("token="));
    let ready = js(
        &c,
        "return document.querySelector(\"[data-count='ready']\").textContent",
    )
    .await;
    assert_eq!(ready, json!("ready 2"));
    screenshot(&c, "ui-fleet.png").await;

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

    // No Secret data: not in the page, not in what its API answers (plain or base64).
    let fetch = format!(
        "const done = arguments[arguments.length - 1];\n\
         fetch('/api/compositions/{ns}/app').then(r => r.text()).then(done)"
    );
    let api = c.execute_async(&fetch, Vec::new()).await.unwrap();
    let page = c.source().await.unwrap();
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(SECRET);
    for text in [page.as_str(), api.as_str().unwrap()] {
        assert!(
            !text.contains(SECRET) && !text.contains(&b64),
            "Secret data leaked"
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
