//! One Composition's readiness-group DAG as `enoki ui` draws it: a column per readiness group
//! (in apply order), a node per resource coloured by its state, edges from each group to the
//! next (a group is applied once the one before is ready), from a CustomResourceDefinition to
//! the custom resources of the group and kind its manifest defines, and from the Compositions of `dependsOn` to the first
//! group. Pure.

use serde::Serialize;

use crate::run::tree::{Resource, View, describe};

/// A node: a resource, a group's header, or a Composition this one depends on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    /// `r:<index>`, `group:<n>` or `dep:<namespace>/<name>`.
    pub id: String,
    /// `resource`, `group` or `dependency`.
    pub role: &'static str,
    /// The column (0 for `dependsOn`, then one per group).
    pub column: usize,
    pub label: String,
    /// The state word (`ready`, `waiting`, …; a group's is its resources' worst).
    pub state: String,
    /// Why (the unsatisfied checks, the failure), one line.
    pub detail: String,
}

/// An edge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Edge {
    pub from: String,
    pub to: String,
    /// `order` (group to next group), `defines` (CRD to its custom resource) or `dependsOn`.
    pub kind: &'static str,
}

/// The graph.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
}

/// The graph of `view`; `depends_on` are the `namespace/name` (and readiness) of the
/// Compositions it depends on.
pub fn graph(view: &View, depends_on: &[(String, bool)]) -> Graph {
    let groups = view.groups();
    let first = usize::from(!depends_on.is_empty());
    let mut g = Graph::default();
    for (i, group) in groups.iter().enumerate() {
        let members: Vec<&Resource> = view
            .resources
            .iter()
            .filter(|r| r.group == *group)
            .collect();
        g.nodes.push(Node {
            id: format!("group:{group}"),
            role: "group",
            column: first + i,
            label: format!("group {group}"),
            state: worst(&members).to_string(),
            detail: format!("{} resources", members.len()),
        });
        if i > 0 {
            g.edges.push(Edge {
                from: format!("group:{}", groups[i - 1]),
                to: format!("group:{group}"),
                kind: "order",
            });
        }
    }
    for (i, r) in view.resources.iter().enumerate() {
        let column = first + groups.iter().position(|x| *x == r.group).unwrap_or(0);
        g.nodes.push(Node {
            id: format!("r:{i}"),
            role: "resource",
            column,
            label: r.label(),
            state: r.state.word().to_string(),
            detail: describe(r),
        });
    }
    for (i, crd) in view.resources.iter().enumerate() {
        let Some(defined) = &crd.defines else {
            continue;
        };
        for (j, cr) in view.resources.iter().enumerate() {
            if defines(defined, cr) {
                g.edges.push(Edge {
                    from: format!("r:{i}"),
                    to: format!("r:{j}"),
                    kind: "defines",
                });
            }
        }
    }
    for (dep, ready) in depends_on {
        let id = format!("dep:{dep}");
        g.nodes.push(Node {
            id: id.clone(),
            role: "dependency",
            column: 0,
            label: format!("Composition {dep}"),
            state: if *ready { "ready" } else { "waiting" }.to_string(),
            detail: "dependsOn".to_string(),
        });
        if let Some(group) = groups.first() {
            g.edges.push(Edge {
                from: id,
                to: format!("group:{group}"),
                kind: "dependsOn",
            });
        }
    }
    g
}

/// Whether `cr` is of the `group/Kind` a CRD defines (any version).
fn defines(defined: &str, cr: &Resource) -> bool {
    let group = cr.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    defined.split_once('/') == Some((group, cr.kind.as_str()))
}

/// The state a group shows: its worst resource's.
fn worst(members: &[&Resource]) -> &'static str {
    const ORDER: [&str; 7] = [
        "failed",
        "unreadable",
        "waiting",
        "deleting",
        "pending",
        "deferred",
        "ready",
    ];
    ORDER
        .into_iter()
        .find(|w| members.iter().any(|r| r.state.word() == *w))
        .unwrap_or("ready")
}

#[cfg(test)]
mod tests;
