//! The everyday verbs over the cluster, with kubectl's conventions (`-n`, `-A`, `-o`):
//! `enoki get` lists Compositions, Synthesizers or Symphonies as a table of the columns that
//! matter (`-o wide`: more) or as a kubectl `List` in JSON or YAML; `enoki events` lists the
//! Events of one Composition, oldest first; `enoki reconcile` asks for a pass (or a new
//! synthesis) and waits for its outcome; `enoki suspend`/`resume` stop and restart a
//! Composition; `enoki tree` prints its outputs by readiness group. All act with the caller's
//! own credentials.

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use kube::{Client, Resource};
use serde_json::{Value, json};

use crate::cli::{EventsArgs, GetArgs, GetFormat, GetKind};

mod reconcile;
pub use reconcile::{REQUESTED_AT, reconcile, resume, suspend};
mod rollout;
pub use rollout::rollout;
mod tree;
pub use tree::tree;

/// A column: its header, whether only `-o wide` shows it, and how it reads an object.
type Column = (&'static str, bool, fn(&Value) -> String);

/// `enoki get`: the table or the list, as text.
///
/// # Errors
/// The cluster cannot be reached, or the list (or the named object) is refused or missing.
pub async fn get(args: &GetArgs) -> anyhow::Result<String> {
    let (client, default_ns) = connect(&args.cluster).await?;
    let ns = args.namespace.clone().unwrap_or(default_ns);
    if args.all_namespaces && args.name.is_some() {
        anyhow::bail!("a resource cannot be retrieved by name across all namespaces (as kubectl)");
    }
    let scope = (!args.all_namespaces).then_some(ns.as_str());
    let items = match args.kind {
        GetKind::Compositions => list::<crds::Composition>(scoped(&client, scope), args).await?,
        GetKind::Synthesizers => list::<crds::Synthesizer>(Api::all(client), args).await?,
        GetKind::Symphonies => list::<crds::Symphony>(scoped(&client, scope), args).await?,
    };
    let namespaced = args.kind != GetKind::Synthesizers;
    // One object by name is printed as itself, a list as a kubectl `List`.
    let document = match (&args.name, items.first()) {
        (Some(_), Some(one)) => one.clone(),
        _ => as_list(&items),
    };
    if items.is_empty() && matches!(args.output, GetFormat::Table | GetFormat::Wide) {
        match scope.filter(|_| namespaced) {
            Some(ns) => eprintln!("No resources found in {ns} namespace."),
            None => eprintln!("No resources found"),
        }
    }
    Ok(match args.output {
        GetFormat::Json => serde_json::to_string_pretty(&document)? + "\n",
        GetFormat::Yaml => serde_saphyr::to_string(&document)?,
        GetFormat::Table | GetFormat::Wide => {
            let wide = args.output == GetFormat::Wide;
            let mut columns: Vec<Column> = Vec::new();
            if namespaced && args.all_namespaces {
                columns.push(("NAMESPACE", false, |o| text(o, "/metadata/namespace")));
            }
            columns.extend(columns_of(args.kind).iter().filter(|c| wide || !c.1));
            if items.is_empty() {
                return Ok(String::new());
            }
            table(&columns, &items)
        }
    })
}

/// The API of a namespaced kind in `scope` (every namespace: `None`).
fn scoped<K>(client: &Client, scope: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match scope {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The objects `api` lists, or the one `args` names.
async fn list<K>(api: Api<K>, args: &GetArgs) -> anyhow::Result<Vec<Value>>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + serde::Serialize,
    K: std::fmt::Debug,
{
    let typed = |o: &K| {
        let mut v = serde_json::to_value(o).unwrap_or_default();
        v["apiVersion"] = K::api_version(&()).as_ref().into();
        v["kind"] = K::kind(&()).as_ref().into();
        v
    };
    if let Some(name) = &args.name {
        let what = format!("{} {name}", K::kind(&()));
        let one = api.get(name).await.map_err(|e| api_error(&what, e))?;
        return Ok(vec![typed(&one)]);
    }
    let listed = api
        .list(&ListParams::default())
        .await
        .map_err(|e| api_error(&format!("listing {}", K::plural(&())), e))?;
    Ok(listed.items.iter().map(typed).collect())
}

/// The columns of `kind` (the wide ones marked).
fn columns_of(kind: GetKind) -> &'static [Column] {
    match kind {
        GetKind::Compositions => &[
            ("NAME", false, |o| text(o, "/metadata/name")),
            ("SYNTHESIZER", false, |o| text(o, "/spec/synthesizer/name")),
            ("STATUS", false, |o| text(o, "/status/simplified/status")),
            ("READY", false, |o| condition(o, "Ready")),
            ("AGE", false, |o| age(o, "/metadata/creationTimestamp")),
            ("SYNTHESIS", true, |o| {
                short(&text(o, "/status/currentSynthesis/uuid"))
            }),
            ("SYNTHESIZED", true, |o| {
                age(o, "/status/currentSynthesis/synthesized")
            }),
            ("ERROR", true, |o| {
                first_line(&text(o, "/status/simplified/error"))
            }),
        ],
        GetKind::Synthesizers => &[
            ("NAME", false, |o| text(o, "/metadata/name")),
            ("SOURCE", false, source),
            ("REVISION", false, |o| {
                text(o, "/status/rollout/revision/number")
            }),
            ("ROLLOUT", false, |o| text(o, "/status/rollout/phase")),
            ("AGE", false, |o| age(o, "/metadata/creationTimestamp")),
            ("GENERATION", true, |o| text(o, "/metadata/generation")),
        ],
        GetKind::Symphonies => &[
            ("NAME", false, |o| text(o, "/metadata/name")),
            ("VARIATIONS", false, |o| {
                let n = o.pointer("/spec/variations").and_then(Value::as_array);
                n.map_or(0, Vec::len).to_string()
            }),
            ("READY", false, |o| condition(o, "Ready")),
            ("AGE", false, |o| age(o, "/metadata/creationTimestamp")),
            ("SYNTHESIZED", true, |o| age(o, "/status/synthesized")),
            ("RECONCILED", true, |o| age(o, "/status/reconciled")),
        ],
    }
}

/// `enoki events`: the Events of a Composition (kubectl's columns), oldest first.
///
/// # Errors
/// The cluster cannot be reached or the list is refused.
pub async fn events(args: &EventsArgs) -> anyhow::Result<String> {
    let (client, default_ns) = connect(&args.cluster).await?;
    let ns = args.namespace.clone().unwrap_or(default_ns);
    // A missing Composition is an error, not an empty list.
    let comps: Api<crds::Composition> = Api::namespaced(client.clone(), &ns);
    comps
        .get(&args.name)
        .await
        .map_err(|e| api_error(&format!("Composition {ns}/{}", args.name), e))?;
    let selector = format!(
        "involvedObject.kind={},involvedObject.name={}",
        crds::names::kinds::COMPOSITION,
        args.name
    );
    let api: Api<Event> = Api::namespaced(client, &ns);
    let mut items: Vec<Value> = api
        .list(&ListParams::default().fields(&selector))
        .await
        .map_err(|e| api_error("listing Events", e))?
        .items
        .iter()
        .map(|e| serde_json::to_value(e).unwrap_or_default())
        .collect();
    items.sort_by_key(last_seen);
    Ok(match args.output {
        GetFormat::Json => serde_json::to_string_pretty(&as_list(&items))? + "\n",
        GetFormat::Yaml => serde_saphyr::to_string(&as_list(&items))?,
        GetFormat::Table | GetFormat::Wide if items.is_empty() => String::new(),
        GetFormat::Table | GetFormat::Wide => {
            let columns: [Column; 5] = [
                ("LAST SEEN", false, |e| since(&last_seen(e))),
                ("TYPE", false, |e| text(e, "/type")),
                ("REASON", false, |e| text(e, "/reason")),
                ("COUNT", false, count),
                ("MESSAGE", false, |e| first_line(&text(e, "/message"))),
            ];
            table(&columns, &items)
        }
    })
}

/// The client of `cluster` and its context's namespace.
pub(crate) async fn connect(cluster: &crate::cli::ClusterArgs) -> anyhow::Result<(Client, String)> {
    let config = crate::run::start::cluster_config(
        cluster.kubeconfig.as_deref(),
        cluster.context.as_deref(),
    )
    .await?;
    let ns = config.default_namespace.clone();
    Ok((Client::try_from(config)?, ns))
}

/// A kubectl `List` of `items`.
fn as_list(items: &[Value]) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

/// `columns` over `items`, left-aligned, three spaces apart (kubectl's layout).
fn table(columns: &[Column], items: &[Value]) -> String {
    let rows: Vec<Vec<String>> = std::iter::once(columns.iter().map(|c| c.0.to_string()).collect())
        .chain(
            items
                .iter()
                // What the API server or a synthesizer wrote must not drive the terminal.
                .map(|o| {
                    columns
                        .iter()
                        .map(|c| crate::run::tree::clean(&(c.2)(o)))
                        .collect()
                }),
        )
        .collect();
    let widths: Vec<usize> = (0..columns.len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("   ").trim_end());
        out.push('\n');
    }
    out
}

/// The string (or number) at `pointer`, empty when absent.
pub(crate) fn text(o: &Value, pointer: &str) -> String {
    match o.pointer(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    }
}

/// Condition `kind` of an object's status.
fn find_condition<'a>(o: &'a Value, kind: &str) -> Option<&'a Value> {
    o.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
}

/// The status of condition `kind`, empty when there is none.
fn condition(o: &Value, kind: &str) -> String {
    find_condition(o, kind)
        .map(|c| text(c, "/status"))
        .unwrap_or_default()
}

/// Where a Synthesizer's module comes from: `builtin:<name>`, `oci`, `url`, `configMap`, ….
fn source(o: &Value) -> String {
    let module = o.pointer("/spec/module").and_then(Value::as_object);
    match module
        .and_then(|m| m.get("builtin"))
        .and_then(Value::as_str)
    {
        Some(name) => format!("builtin:{name}"),
        None => module
            .and_then(|m| m.keys().find(|k| !k.ends_with("Secret") && *k != "sha256"))
            .cloned()
            .unwrap_or_default(),
    }
}

/// `what: <the API server's message> (<reason>, <code>)` for a refused request (no debug
/// dump of its Status); other errors as they are.
pub(crate) fn api_error(what: &str, e: kube::Error) -> anyhow::Error {
    match e {
        kube::Error::Api(s) => anyhow::anyhow!(
            "{what}: {} ({}, {})",
            crate::run::tree::clean(&s.message),
            s.reason,
            s.code
        ),
        e => anyhow::anyhow!("{what}: {e}"),
    }
}

/// How often an Event was seen: its series' count (events.k8s.io), else its `count`.
fn count(e: &Value) -> String {
    let series = text(e, "/series/count");
    if series.is_empty() {
        text(e, "/count")
    } else {
        series
    }
}

/// The first eight characters (a synthesis UUID as `kubectl` users know short hashes).
fn short(s: &str) -> String {
    s.chars().take(8).collect()
}

/// The first line, at most 80 characters.
fn first_line(s: &str) -> String {
    let line = s.lines().next().unwrap_or_default();
    match line.char_indices().nth(79) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_string(),
    }
}

/// How long ago the time at `pointer` was, as kubectl prints ages.
fn age(o: &Value, pointer: &str) -> String {
    since(&text(o, pointer))
}

/// When an Event was last seen (RFC 3339), from whichever field its writer set.
pub(crate) fn last_seen(e: &Value) -> String {
    [
        "/series/lastObservedTime",
        "/lastTimestamp",
        "/eventTime",
        "/firstTimestamp",
    ]
    .iter()
    .map(|p| text(e, p))
    .find(|t| !t.is_empty())
    .unwrap_or_default()
}

/// `45s`, `12m`, `5h`, `3d` since `rfc3339` (empty when it does not parse).
fn since(rfc3339: &str) -> String {
    let Ok(t) = rfc3339.parse::<k8s_openapi::jiff::Timestamp>() else {
        return String::new();
    };
    let secs = (k8s_openapi::jiff::Timestamp::now().as_second() - t.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_aligns_its_columns_and_reads_each_object() {
        let items = [
            json!({"metadata": {"name": "web"}, "spec": {"synthesizer": {"name": "helm"}},
                "status": {"simplified": {"status": "Ready"},
                    "conditions": [{"type": "Ready", "status": "True"}]}}),
            json!({"metadata": {"name": "a-longer-name"}, "spec": {"synthesizer": {"name": "s"}}}),
        ];
        let columns: Vec<Column> = columns_of(GetKind::Compositions)
            .iter()
            .filter(|c| !c.1)
            .copied()
            .collect();
        let out = table(&columns, &items);
        let lines: Vec<&str> = out.lines().collect();
        assert!(
            lines[0].starts_with("NAME            SYNTHESIZER   STATUS   READY   AGE"),
            "{out}"
        );
        assert!(
            lines[1].starts_with("web             helm          Ready    True"),
            "{out}"
        );
        assert_eq!(lines[2].trim_end(), "a-longer-name   s");
    }

    #[test]
    fn sources_ages_and_long_messages_read_as_kubectl_prints_them() {
        let oci = json!({"spec": {"module": {"oci": "r/m:1@sha256:00", "ociSecret": {}}}});
        assert_eq!(source(&oci), "oci");
        assert_eq!(
            source(&json!({"spec": {"module": {"builtin": "helm"}}})),
            "builtin:helm"
        );
        assert_eq!(since("not a time"), "");
        let hour_ago = k8s_openapi::jiff::Timestamp::now()
            - k8s_openapi::jiff::SignedDuration::from_secs(3 * 3600);
        assert_eq!(since(&hour_ago.to_string()), "3h");
        assert_eq!(
            first_line(&format!("{}\nmore", "x".repeat(100)))
                .chars()
                .count(),
            80
        );
    }
}
