//! The readiness-group DAG (petgraph) and the deletion order.
//!
//! Each resource depends on every resource of the next-lower readiness group that exists; a
//! custom resource also depends on the CustomResourceDefinition in the same synthesis that
//! defines its group/kind. Nodes are inserted in sorted key order and the topological order
//! breaks ties by (group, key), so the order is deterministic. A cycle is reported with every
//! member (strongly connected components).

use std::collections::{BTreeMap, BTreeSet};

use petgraph::algo::tarjan_scc;
use petgraph::graph::{DiGraph, NodeIndex};

use crate::error::PlanError;
use crate::key::ResourceKey;

/// One resource as the orderer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// The resource.
    pub key: ResourceKey,
    /// Its readiness group.
    pub readiness_group: i64,
    /// For a CRD: the (group, kind) it defines.
    pub defines: Option<(String, String)>,
    /// For a Patch: the (group, kind) of its target, which waits for its CRD as the object
    /// itself would (Eno).
    pub target: Option<(String, String)>,
}

/// The dependency graph in a usable form.
///
/// Group dependencies are stored per group, not per edge: with thousands of resources per
/// group, materialising every member-to-member edge would be quadratic. The graph itself uses
/// one barrier node per group for the same reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ordering {
    /// Every resource, dependencies before dependents.
    pub order: Vec<ResourceKey>,
    groups: BTreeMap<i64, Vec<ResourceKey>>,
    group_of: std::collections::HashMap<ResourceKey, i64>,
    crd_of: std::collections::HashMap<ResourceKey, ResourceKey>,
}

impl Ordering {
    /// The next-lower readiness group that exists below `key`'s group.
    pub fn previous_group(&self, key: &ResourceKey) -> Option<i64> {
        let g = *self.group_of.get(key)?;
        self.groups.range(..g).next_back().map(|(g, _)| *g)
    }

    /// The highest readiness group that exists below group `g` (`g` itself need not exist:
    /// a tombstone's group).
    pub fn group_below(&self, g: i64) -> Option<i64> {
        self.groups.range(..g).next_back().map(|(g, _)| *g)
    }

    /// The next-higher readiness group that exists above `key`'s group.
    pub fn next_group(&self, key: &ResourceKey) -> Option<i64> {
        let g = *self.group_of.get(key)?;
        self.groups
            .range(g.saturating_add(1)..)
            .next()
            .map(|(g, _)| *g)
    }

    /// The readiness group of `key`.
    pub fn group_of(&self, key: &ResourceKey) -> Option<i64> {
        self.group_of.get(key).copied()
    }

    /// The members of a readiness group, sorted.
    pub fn group_members(&self, group: i64) -> &[ResourceKey] {
        self.groups
            .get(&group)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// The CRD in the same synthesis that defines `key`'s kind.
    pub fn crd_dependency(&self, key: &ResourceKey) -> Option<&ResourceKey> {
        self.crd_of.get(key)
    }

    /// Every resource `key` waits on, sorted.
    pub fn depends_on(&self, key: &ResourceKey) -> Vec<ResourceKey> {
        let mut deps: Vec<ResourceKey> = self
            .previous_group(key)
            .map(|g| self.group_members(g).to_vec())
            .unwrap_or_default();
        if let Some(crd) = self.crd_dependency(key)
            && !deps.contains(crd)
        {
            deps.push(crd.clone());
        }
        deps.sort();
        deps
    }
}

/// Builds the DAG and its topological order.
///
/// # Errors
/// [`PlanError::DependencyCycle`] listing every member of every cycle.
pub fn order(nodes: &[Node]) -> Result<Ordering, PlanError> {
    let mut sorted: Vec<&Node> = nodes.iter().collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    let n = sorted.len();
    let mut by_group: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (i, node) in sorted.iter().enumerate() {
        by_group.entry(node.readiness_group).or_default().push(i);
    }
    // Graph nodes: resources 0..n, then one barrier per group above the lowest.
    let mut graph: DiGraph<usize, ()> = DiGraph::new();
    let idx: Vec<NodeIndex> = (0..n).map(|i| graph.add_node(i)).collect();
    let mut edges: BTreeSet<(usize, usize)> = BTreeSet::new();
    let mut rank: Vec<(i64, usize)> = sorted
        .iter()
        .enumerate()
        .map(|(i, s)| (s.readiness_group, i))
        .collect();
    let mut prev: Option<&Vec<usize>> = None;
    for (group, members) in &by_group {
        if let Some(prev_members) = prev {
            let barrier = rank.len();
            rank.push((*group, usize::MAX - barrier));
            for &p in prev_members {
                edges.insert((p, barrier));
            }
            for &m in members {
                edges.insert((barrier, m));
            }
        }
        prev = Some(members);
    }
    let crd_of = crd_edges(&sorted, &mut edges);
    let all: Vec<NodeIndex> = (n..rank.len())
        .map(|b| graph.add_node(b))
        .fold(idx, |mut v, b| {
            v.push(b);
            v
        });
    for &(from, to) in &edges {
        graph.add_edge(all[from], all[to], ());
    }

    let mut members: Vec<String> = tarjan_scc(&graph)
        .into_iter()
        .filter(|scc| scc.len() > 1)
        .flatten()
        .filter(|ni| graph[*ni] < n)
        .map(|ni| sorted[graph[ni]].key.to_string())
        .collect();
    if !members.is_empty() {
        members.sort();
        return Err(PlanError::DependencyCycle { members });
    }

    let order = kahn(&sorted, &rank, &edges);
    let groups = by_group
        .into_iter()
        .map(|(g, members)| {
            (
                g,
                members.into_iter().map(|i| sorted[i].key.clone()).collect(),
            )
        })
        .collect();
    let group_of = sorted
        .iter()
        .map(|s| (s.key.clone(), s.readiness_group))
        .collect();
    Ok(Ordering {
        order,
        groups,
        group_of,
        crd_of,
    })
}

/// Edges from each CustomResourceDefinition to the resources of the kind it defines, and
/// which CRD each such resource waits for.
fn crd_edges(
    sorted: &[&Node],
    edges: &mut BTreeSet<(usize, usize)>,
) -> std::collections::HashMap<ResourceKey, ResourceKey> {
    let crds: BTreeMap<(&str, &str), usize> = sorted
        .iter()
        .enumerate()
        .filter_map(|(i, n)| {
            n.defines
                .as_ref()
                .map(|(g, k)| ((g.as_str(), k.as_str()), i))
        })
        .collect();
    let mut crd_of = std::collections::HashMap::new();
    for (i, node) in sorted.iter().enumerate() {
        let writes = node.target.as_ref().map_or(
            (node.key.group.as_str(), node.key.kind.as_str()),
            |(g, k)| (g.as_str(), k.as_str()),
        );
        if let Some(&crd) = crds.get(&writes)
            && crd != i
        {
            edges.insert((crd, i));
            crd_of.insert(node.key.clone(), sorted[crd].key.clone());
        }
    }
    crd_of
}

/// Kahn's algorithm over resources and barriers, ties broken by (readiness group, key);
/// barriers (indices from `sorted.len()` on) emit nothing.
fn kahn(
    sorted: &[&Node],
    rank: &[(i64, usize)],
    edges: &BTreeSet<(usize, usize)>,
) -> Vec<ResourceKey> {
    let n = sorted.len();
    let mut indegree = vec![0usize; rank.len()];
    for &(_, to) in edges {
        indegree[to] += 1;
    }
    let mut ready: BTreeSet<((i64, usize), usize)> = (0..rank.len())
        .filter(|&i| indegree[i] == 0)
        .map(|i| (rank[i], i))
        .collect();
    let mut order = Vec::with_capacity(n);
    while let Some((_, i)) = ready.pop_first() {
        if i < n {
            order.push(sorted[i].key.clone());
        }
        for &(_, to) in edges.range((i, 0)..=(i, usize::MAX)) {
            indegree[to] -= 1;
            if indegree[to] == 0 {
                ready.insert((rank[to], to));
            }
        }
    }
    order
}

/// Deletion group of a resource of `kind` (a Patch: its target's) during Composition deletion
/// (Eno): its `deletion-group`; for Eno's infrastructure kinds without one, the negation of
/// their create group (100); for anything else none — deleted at once, waiting for nothing
/// and holding nothing back.
pub fn deletion_group(kind: &str, deletion_group: Option<i64>) -> Option<i64> {
    deletion_group.or_else(|| {
        crate::settings::INFRA_KINDS
            .contains(&kind)
            .then_some(crate::settings::INFRA_READINESS_GROUP.saturating_neg())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(kind: &str, name: &str, group: i64) -> Node {
        Node {
            key: ResourceKey {
                group: String::new(),
                kind: kind.into(),
                namespace: String::new(),
                name: name.into(),
            },
            readiness_group: group,
            defines: None,
            target: None,
        }
    }

    #[test]
    fn each_resource_depends_on_the_next_lower_existing_group() {
        let nodes = [
            node("A", "a", 0),
            node("B", "b", 5),
            node("C", "c", 5),
            node("D", "d", 9),
        ];
        let o = order(&nodes).unwrap();
        let names: Vec<_> = o.order.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        assert_eq!(o.depends_on(&nodes[1].key), vec![nodes[0].key.clone()]);
        assert_eq!(
            o.depends_on(&nodes[3].key),
            vec![nodes[1].key.clone(), nodes[2].key.clone()]
        );
        assert!(o.depends_on(&nodes[0].key).is_empty());
    }

    #[test]
    fn crds_are_ordered_before_their_custom_resources() {
        let mut crd = node("CustomResourceDefinition", "widgets.example.com", -100);
        crd.key.group = "apiextensions.k8s.io".into();
        crd.defines = Some(("example.com".into(), "Widget".into()));
        let mut cr = node("Widget", "w", -100);
        cr.key.group = "example.com".into();
        let o = order(&[cr.clone(), crd.clone()]).unwrap();
        assert_eq!(o.order, vec![crd.key.clone(), cr.key.clone()]);
        assert_eq!(o.depends_on(&cr.key), vec![crd.key]);
    }

    #[test]
    fn a_cycle_is_reported_with_every_member() {
        // The CRD sits in a higher group than its CR: CR -> CRD by group, CRD -> CR by kind.
        let mut crd = node("CustomResourceDefinition", "widgets.example.com", 1);
        crd.key.group = "apiextensions.k8s.io".into();
        crd.defines = Some(("example.com".into(), "Widget".into()));
        let mut cr = node("Widget", "w", 0);
        cr.key.group = "example.com".into();
        let err = order(&[crd, cr, node("X", "x", 2)]).unwrap_err();
        let PlanError::DependencyCycle { members } = err else {
            panic!()
        };
        assert_eq!(members.len(), 2, "{members:?}");
    }
}
