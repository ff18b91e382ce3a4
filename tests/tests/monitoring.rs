//! What operators alert on and chart: the health series of a Composition as it goes stuck and
//! recovers, and the shipped alert rules and Grafana dashboard — every PromQL expression
//! parses (promql-parser, the PromQL grammar of Prometheus) and names only series a running
//! enoki serves, each alert and panel is described in docs/operations.md.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::collections::BTreeSet;
use std::time::Duration;

use harness::workspace_root;
use promql_parser::parser::{Expr, VectorSelector};
use promql_parser::util::{ExprVisitor, walk_expr};

/// The metric names a PromQL expression reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    struct Names(BTreeSet<String>);
    impl ExprVisitor for Names {
        type Error = ();
        fn pre_visit(&mut self, e: &Expr) -> Result<bool, ()> {
            let mut add = |vs: &VectorSelector| {
                if let Some(n) = &vs.name {
                    self.0.insert(n.clone());
                }
            };
            match e {
                Expr::VectorSelector(vs) => add(vs),
                Expr::MatrixSelector(m) => add(&m.vs),
                _ => {}
            }
            Ok(true)
        }
    }
    let ast = promql_parser::parser::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
    let mut names = Names(BTreeSet::new());
    walk_expr(&mut names, &ast).unwrap();
    names.0
}

/// Every series name a /metrics text serves, from its `# TYPE` lines (counters as `_total`,
/// histograms as `_bucket`, `_sum`, `_count`), with or without samples yet.
fn served(metrics: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in metrics.lines() {
        let mut parts = line.split_whitespace();
        if parts.next() != Some("#") || parts.next() != Some("TYPE") {
            continue;
        }
        let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
            continue;
        };
        match kind {
            "counter" => {
                out.insert(format!("{name}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    out.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                out.insert(name.to_string());
            }
        }
    }
    out
}

/// (name, PromQL) of every alert in the rule file.
fn alerts() -> Vec<(String, String)> {
    let text =
        std::fs::read_to_string(workspace_root().join("deploy/monitoring/rules.yaml")).unwrap();
    let doc: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    doc["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .map(|r| {
            (
                r["alert"].as_str().unwrap().to_string(),
                r["expr"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// (title, description, expressions) of every dashboard panel.
fn panels() -> Vec<(String, String, Vec<String>)> {
    let text =
        std::fs::read_to_string(workspace_root().join("deploy/monitoring/dashboard.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    doc["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let exprs = p["targets"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["expr"].as_str().unwrap().to_string())
                .collect();
            (
                p["title"].as_str().unwrap().to_string(),
                p["description"].as_str().unwrap_or_default().to_string(),
                exprs,
            )
        })
        .collect()
}

/// A readiness check on one ConfigMap the echo synthesizer emits; its data says `ready`.
fn item(ready: &str) -> serde_json::Value {
    serde_json::json!([{"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "gate", "annotations": {"enoki.dev/readiness": "self.data.ready == 'yes'"}},
        "data": {"ready": ready}}])
}

/// The value of a series with `namespace` and `name` labels in a /metrics text.
fn series(metrics: &str, metric: &str, namespace: &str, name: &str) -> Option<f64> {
    let (ns, n) = (
        format!("namespace=\"{namespace}\""),
        format!("name=\"{name}\""),
    );
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .find(|l| l.contains(&ns) && l.contains(&n))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test]
async fn health_series_follow_a_composition_that_goes_stuck_and_recovers_and_every_alert_and_panel_reads_served_series()
 {
    let env = harness::TestEnv::new().await;
    harness::install_crds(&env.client).await;
    let synth = harness::install_synthesizer(&env, "echo", &harness::echo_module()).await;
    harness::set_echo_items(&env, "cfg", &item("no")).await;
    harness::apply_composition(&env, "gated", &synth, "cfg", serde_json::json!({})).await;
    let enoki = harness::Enoki::start_with(&env.namespace, &["--stuck-threshold", "3s"]);
    let ns = env.namespace.clone();
    let value = |metric: &'static str| {
        let text = enoki.metrics_text();
        series(&text, metric, &ns, "gated")
    };
    harness::eventually(
        "the Composition is stuck",
        Duration::from_secs(60),
        || async { (value("enoki_composition_stuck") == Some(1.0)).then_some(()) },
    )
    .await;
    assert_eq!(value("enoki_composition_ready"), Some(0.0));
    assert_eq!(value("enoki_composition_synthesized"), Some(1.0));
    assert_eq!(value("enoki_composition_inputs_in_lockstep"), Some(1.0));
    assert!(value("enoki_composition_synthesis_timestamp_seconds").unwrap() > 1.7e9);

    harness::set_echo_items(&env, "cfg", &item("yes")).await;
    harness::wait_ready(&env, "gated").await;
    harness::eventually(
        "the Composition recovers",
        Duration::from_secs(60),
        || async {
            (value("enoki_composition_stuck") == Some(0.0)
                && value("enoki_composition_ready") == Some(1.0))
            .then_some(())
        },
    )
    .await;

    // Every series the rules and the dashboard read is served by this enoki.
    let metrics = enoki.metrics_text();
    assert!(
        metrics.contains("enoki_build_info{") && metrics.contains("enoki_api_requests_total{"),
        "{metrics}"
    );
    let served = served(&metrics);
    let docs = std::fs::read_to_string(workspace_root().join("docs/operations.md")).unwrap();
    for (alert, expr) in alerts() {
        for name in metric_names(&expr) {
            assert!(
                served.contains(&name),
                "alert {alert} reads {name}, which enoki does not serve"
            );
        }
        assert!(
            docs.contains(&format!("`{alert}`")),
            "docs/operations.md describes {alert}"
        );
    }
    // The queries docs/operations.md gives for Eno's metrics read served series too.
    let eno = eno_mapping(&docs);
    assert!(eno.len() >= 10, "{eno:?}");
    for (eno_name, expr) in eno {
        for name in metric_names(&expr) {
            // A histogram is named by its base name (`…_seconds`): its `_count` is served.
            assert!(
                served.contains(&name) || served.contains(&format!("{name}_count")),
                "the query for {eno_name} reads {name}, which enoki does not serve"
            );
        }
    }
    let panels = panels();
    assert!(panels.len() >= 10);
    for (title, description, exprs) in panels {
        assert!(!description.is_empty(), "panel {title:?} has a description");
        assert!(
            docs.contains(&title),
            "docs/operations.md describes the panel {title:?}"
        );
        for expr in exprs {
            for name in metric_names(&expr) {
                assert!(
                    served.contains(&name),
                    "panel {title:?} reads {name}, which enoki does not serve"
                );
            }
        }
    }
}

/// (Eno metric, enoki query) of each row of docs/operations.md's "Eno's metrics" table that
/// has a query.
fn eno_mapping(docs: &str) -> Vec<(String, String)> {
    let section = docs
        .split("## Eno's metrics")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/operations.md has the section \"Eno's metrics\"");
    section
        .lines()
        .filter(|l| l.starts_with("| `eno_"))
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            let query = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            Some((cells[0].to_string(), query.to_string()))
        })
        .collect()
}

#[test]
fn the_chart_renders_the_rules_and_the_dashboard() {
    let helm = std::env::var("HELM").expect("HELM is not set (make test exports it)");
    let out = std::process::Command::new(&helm)
        .args([
            "template",
            "enoki",
            "deploy/helm/enoki",
            "--set",
            "prometheusRule.enabled=true",
            "--set",
            "grafanaDashboard.enabled=true",
        ])
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&String::from_utf8(out.stdout).unwrap()).unwrap();
    let rule = docs.iter().find(|d| d["kind"] == "PrometheusRule").unwrap();
    let rendered: Vec<&str> = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["alert"].as_str().unwrap())
        .collect();
    let names: Vec<String> = alerts().into_iter().map(|(a, _)| a).collect();
    assert_eq!(rendered, names);
    for a in [
        "EnokiCompositionStuck",
        "EnokiSynthesisFailing",
        "EnokiApplyErrors",
        "EnokiNoLeader",
        "EnokiWatchErrors",
    ] {
        assert!(names.iter().any(|n| n == a), "{a}");
    }
    // Every alert links its runbook: a heading of docs/operations.md.
    let ops = std::fs::read_to_string(workspace_root().join("docs/operations.md")).unwrap();
    for r in rule["spec"]["groups"][0]["rules"].as_array().unwrap() {
        let alert = r["alert"].as_str().unwrap();
        let url = r["annotations"]["runbook_url"].as_str().unwrap_or_default();
        assert!(
            url.ends_with(&format!("docs/operations.md#{}", alert.to_lowercase())),
            "{alert}: runbook_url {url:?}"
        );
        assert!(
            ops.contains(&format!("### {alert}\n")),
            "docs/operations.md has no runbook for {alert}"
        );
    }
    let dashboard = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["labels"]["grafana_dashboard"] == "1")
        .unwrap();
    let json: serde_json::Value =
        serde_json::from_str(dashboard["data"]["enoki.json"].as_str().unwrap()).unwrap();
    assert_eq!(json["panels"].as_array().unwrap().len(), panels().len());
}
