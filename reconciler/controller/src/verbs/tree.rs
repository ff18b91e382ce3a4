//! `enoki tree`: a Composition's outputs as a tree (as `flux tree`): its readiness groups in
//! apply order, each resource with its state, and a Composition among the outputs expanded
//! the same way (to `--depth`, each once). The states are `enoki status`'s ([`run::tree`]).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;

use serde::Serialize;

use super::connect;
use crate::cli::{TreeArgs, TreeFormat};
use crate::run::tree::{self as view_of, View, clean, describe};

/// One Composition of the tree: its view, and the Compositions among its outputs.
#[derive(Serialize)]
struct Node {
    #[serde(flatten)]
    view: View,
    /// Compositions among the outputs, expanded (in output order).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    children: Vec<Child>,
}

/// A Composition among the outputs: its tree, or why it could not be read.
#[derive(Serialize)]
#[serde(untagged)]
enum Child {
    Node(Box<Node>),
    Unreadable {
        namespace: String,
        name: String,
        error: String,
    },
}

/// `enoki tree`: the tree as text, JSON or YAML.
///
/// # Errors
/// The cluster cannot be reached, or the Composition cannot be read.
pub async fn tree(args: &TreeArgs) -> anyhow::Result<String> {
    let (client, default_ns) = connect(&args.cluster).await?;
    let ns = args.namespace.clone().unwrap_or(default_ns);
    let target = match &args.remote_kubeconfig {
        Some(path) => {
            kube::Client::try_from(crate::run::start::cluster_config(Some(path), None).await?)?
        }
        None => client.clone(),
    };
    let clients = (&client, &target);
    let mut seen = BTreeSet::new();
    let root = node(clients, ns, args.name.clone(), args.depth, &mut seen).await?;
    Ok(match args.output {
        TreeFormat::Json => serde_json::to_string_pretty(&root)? + "\n",
        TreeFormat::Yaml => serde_saphyr::to_string(&root)?,
        TreeFormat::Text => {
            let v = &root.view;
            let mut out = format!(
                "Composition {}/{} (synthesizer {}): {}\n",
                clean(&v.namespace),
                clean(&v.name),
                clean(&v.synthesizer),
                summary(v)
            );
            lines(&mut out, &root, "");
            out
        }
    })
}

/// The view of `namespace/name` (Compositions and slices from `client`, live objects from
/// `target`) and, `depth` levels down, of the Compositions among its
/// outputs (each once: `seen`).
fn node<'a>(
    (client, target): (&'a kube::Client, &'a kube::Client),
    namespace: String,
    name: String,
    depth: u32,
    seen: &'a mut BTreeSet<(String, String)>,
) -> Pin<Box<dyn Future<Output = anyhow::Result<Node>> + Send + 'a>> {
    Box::pin(async move {
        seen.insert((namespace.clone(), name.clone()));
        let view = view_of::gather(client, target, &namespace, &name).await?;
        let mut children = Vec::new();
        if depth > 0 {
            for r in &view.resources {
                let key = (ns_of(&r.namespace, &namespace), r.name.clone());
                if !is_composition(&r.api_version, &r.kind) || seen.contains(&key) {
                    continue;
                }
                let child = node(
                    (client, target),
                    key.0.clone(),
                    key.1.clone(),
                    depth - 1,
                    seen,
                )
                .await;
                children.push(match child {
                    Ok(n) => Child::Node(Box::new(n)),
                    Err(e) => Child::Unreadable {
                        namespace: key.0,
                        name: key.1,
                        error: format!("{e:#}"),
                    },
                });
            }
        }
        Ok(Node { view, children })
    })
}

/// A resource's namespace, the Composition's when the manifest names none.
fn ns_of(namespace: &str, composition: &str) -> String {
    if namespace.is_empty() {
        composition
    } else {
        namespace
    }
    .to_string()
}

/// An enoki Composition (of any version).
fn is_composition(api_version: &str, kind: &str) -> bool {
    kind == crds::names::kinds::COMPOSITION && api_version.starts_with("enoki.dev/")
}

/// Ready or not, the synthesis and what happens to the next one, in one line.
fn summary(v: &View) -> String {
    let synthesis = v.synthesis.as_deref().map_or_else(
        || "no synthesis yet".into(),
        |s| format!("synthesis {}", s.chars().take(8).collect::<String>()),
    );
    let mut next = v.next.state.clone();
    if let Some(r) = &v.next.reason {
        let _ = write!(next, " ({r})");
    }
    clean(&format!(
        "{}, {synthesis}, next synthesis {next}",
        if v.ready { "Ready" } else { "not Ready" }
    ))
}

/// The groups and resources of `n` below `prefix`, with its child Compositions under their
/// resource lines.
fn lines(out: &mut String, n: &Node, prefix: &str) {
    let v = &n.view;
    if let Some(note) = &v.note {
        let _ = writeln!(out, "{prefix}└── {}", clean(note));
        return;
    }
    let groups = v.groups();
    for (gi, group) in groups.iter().enumerate() {
        let last_group = gi + 1 == groups.len();
        let (branch, inner) = if last_group {
            ("└── ", "    ")
        } else {
            ("├── ", "│   ")
        };
        let _ = writeln!(out, "{prefix}{branch}group {group}");
        let members: Vec<_> = v.resources.iter().filter(|r| r.group == *group).collect();
        for (ri, r) in members.iter().enumerate() {
            let last = ri + 1 == members.len();
            let (branch, below) = if last {
                ("└── ", "    ")
            } else {
                ("├── ", "│   ")
            };
            let _ = writeln!(
                out,
                "{prefix}{inner}{branch}{}  {}",
                clean(&r.label()),
                clean(&describe(r))
            );
            let ns = ns_of(&r.namespace, &v.namespace);
            let child = n.children.iter().find(|c| match c {
                Child::Node(c) => c.view.namespace == ns && c.view.name == r.name,
                Child::Unreadable {
                    namespace, name, ..
                } => *namespace == ns && *name == r.name,
            });
            let deeper = format!("{prefix}{inner}{below}");
            match child {
                Some(Child::Node(c)) if is_composition(&r.api_version, &r.kind) => {
                    lines(out, c, &deeper);
                }
                Some(Child::Unreadable { error, .. })
                    if is_composition(&r.api_version, &r.kind) =>
                {
                    let _ = writeln!(out, "{deeper}└── unreadable: {}", clean(error));
                }
                _ => {}
            }
        }
    }
    if groups.is_empty() {
        let _ = writeln!(out, "{prefix}└── (no outputs)");
    }
}
