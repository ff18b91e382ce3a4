//! A real browser for the tests of `enoki ui`: Debian's headless `chromium` driven through
//! `chromedriver` (WebDriver, with fantoccini), and `enoki ui` itself as a child process. A
//! missing browser fails loudly with the package to install — never a skip.

use std::io::BufRead as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};

use crate::{Proc, enoki_bin, eventually, free_port, kubeconfig_path, wait_port};

/// A program on PATH, or a failure that says how to install it.
fn program(name: &str, package: &str) -> String {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()));
    assert!(
        found,
        "`{name}` is missing: the browser tests need Debian's `{package}` (hack/setup.sh installs it)"
    );
    name.to_string()
}

/// `enoki ui --no-open` with `args` (the binary of `ENOKI_BIN`, else the debug build), and
/// the address it printed.
///
/// # Panics
/// When the binary is missing or prints no address.
pub fn start_ui(args: &[&str]) -> (Proc, String) {
    let mut child = Command::new(enoki_bin())
        .args(["ui", "--no-open"])
        .args(args)
        .env("KUBECONFIG", kubeconfig_path())
        .env_remove("ENOKI_REMOTE_KUBECONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("enoki ui starts");
    // The address, or a failure within a minute (never a hang).
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("enoki ui printed no address within 60 s")
        });
    let url = line
        .trim()
        .strip_prefix("enoki ui: ")
        .unwrap_or_else(|| panic!("enoki ui printed {line:?}"))
        .to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    (Proc::new(child), url)
}

/// The port of an `enoki ui` address.
///
/// # Panics
/// When the address has none.
pub fn port_of(url: &str) -> u16 {
    url.trim_start_matches("http://127.0.0.1:")
        .split('/')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port in the address")
}

/// chromedriver on a free port and a headless Chromium session of 1280×900.
///
/// # Panics
/// When `chromium` or `chromedriver` is missing or does not start.
pub async fn browser() -> (Proc, Client) {
    let chromium = program("chromium", "chromium");
    let driver = program("chromedriver", "chromium-driver");
    let port = free_port();
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let child = Proc::new(child);
    wait_port(port);
    let mut caps = serde_json::Map::new();
    let binary = which(&chromium);
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"binary": binary, "args": ["--headless=new", "--no-sandbox",
            "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"]}),
    );
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a Chromium session");
    (child, client)
}

/// The path of `name` on PATH.
fn which(name: &str) -> String {
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .find(|f| f.is_file())
        })
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| name.to_string())
}

/// Runs `script` in the page and returns its value.
///
/// # Panics
/// When the script throws.
pub async fn js(c: &Client, script: &str) -> Value {
    c.execute(script, Vec::new())
        .await
        .expect("the script runs")
}

/// Waits (up to 90 s) until `css` matches an element of the page.
pub async fn wait_css(c: &Client, css: &str, what: &str) {
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
