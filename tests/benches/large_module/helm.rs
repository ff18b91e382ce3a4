//! The Helm module's side of the large-module bench: the ingress-nginx chart as its input,
//! `helm template` of the same chart (the baseline of its warm render), and the warm render
//! of the reactor as built, before `enoki module preinit`.

use std::process::Command;
use std::time::Instant;

use super::{child, get, required, sampled, secs};

/// The warm render of the Helm module as built, before `enoki module preinit`
/// (`target/samples/helm-chart.reactor.wasm`: Go's runtime and package inits in every run),
/// on its optimized code.
pub fn reactor_warm(root: &std::path::Path, scratch: &std::path::Path, list: &std::path::Path) {
    let reactor = required(
        &root.join("target/samples/helm-chart.reactor.wasm"),
        "hack/build-samples.sh",
    );
    let cache = scratch.join("cache-reactor");
    let (m, c, i) = (
        reactor.to_str().unwrap(),
        cache.to_str().unwrap(),
        list.to_str().unwrap(),
    );
    // First sight waits for the optimized code and caches it; the warm runs load it.
    child("first-sight", m, c, i, "DaemonSet");
    let (warm, rss) = child("warm", m, c, i, "DaemonSet");
    println!(
        "The reactor as built, not pre-initialized ({:.1} MB: `_initialize` in every run): \
         warm render {} (median of 7; process peak {rss} MiB).",
        std::fs::metadata(&reactor).unwrap().len() as f64 / 1e6,
        get(&warm, "run")
    );
}

fn helm_bin() -> String {
    std::env::var("HELM").expect("HELM: the helm binary (make bench sets it)")
}

/// `helm package` of the ingress-nginx chart and the ResourceList binding it as input `chart`
/// (release `rel` in `apps`, default values; the DaemonSet kind makes the output checkable).
pub fn ingress_nginx(
    root: &std::path::Path,
    scratch: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf) {
    use base64::Engine as _;
    let chart = required(
        &root.join("target/charts/ingress-nginx"),
        "hack/build-samples.sh",
    );
    let out = Command::new(helm_bin())
        .args([
            "package",
            chart.to_str().unwrap(),
            "-d",
            scratch.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tgz = std::fs::read_dir(scratch)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "tgz"))
        .unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(std::fs::read(&tgz).unwrap());
    let values = "controller:\n  kind: DaemonSet\n";
    let list = serde_json::json!({"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList",
        "items": [
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "chart", "annotations": {"enoki.dev/input-key": "chart"}},
             "binaryData": {"chart.tgz": b64}},
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "values", "annotations": {"enoki.dev/input-key": "values"}},
             "data": {"values.yaml": values}}],
        "functionConfig": {"composition": {"name": "rel", "namespace": "apps"}, "env": {}}});
    let path = scratch.join("ingress-nginx.json");
    std::fs::write(&path, list.to_string()).unwrap();
    std::fs::write(scratch.join("values.yaml"), values).unwrap();
    (path, tgz)
}

/// `helm template` of the same chart, values, release and namespace: median time of 7 and
/// peak RSS.
pub fn helm_template(tgz: &std::path::Path) {
    let values = tgz.with_file_name("values.yaml");
    let mut times = Vec::new();
    let mut peak = 0;
    for _ in 0..7 {
        let mut c = Command::new(helm_bin());
        c.args([
            "template",
            "rel",
            tgz.to_str().unwrap(),
            "-n",
            "apps",
            "--include-crds",
            "--no-hooks",
        ])
        .args(["-f", values.to_str().unwrap()]);
        let started = Instant::now();
        let (out, rss) = sampled(c);
        times.push(started.elapsed());
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).contains("kind: DaemonSet"));
        peak = peak.max(rss);
    }
    times.sort();
    println!(
        "\n`helm template` of the same chart, values, release and namespace (baseline of the \
         Helm module's warm render): {} (median of 7, a process each), peak RSS {peak} MiB.",
        secs(times[times.len() / 2])
    );
}
