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
}

/// The dependency graph in a usable form.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ordering {
    /// Every resource, dependencies before dependents.
    pub order: Vec<ResourceKey>,
    /// For each resource, the resources it waits on (sorted).
    pub depends_on: BTreeMap<ResourceKey, Vec<ResourceKey>>,
}

/// Builds the DAG and its topological order.
///
/// # Errors
/// [`PlanError::DependencyCycle`] listing every member of every cycle.
pub fn order(nodes: &[Node]) -> Result<Ordering, PlanError> {
    let mut sorted: Vec<&Node> = nodes.iter().collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    let mut graph: DiGraph<usize, ()> = DiGraph::new();
    let idx: Vec<NodeIndex> = (0..sorted.len()).map(|i| graph.add_node(i)).collect();

    let groups: BTreeSet<i64> = sorted.iter().map(|n| n.readiness_group).collect();
    let mut by_group: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (i, n) in sorted.iter().enumerate() {
        by_group.entry(n.readiness_group).or_default().push(i);
    }
    let mut edges: BTreeSet<(usize, usize)> = BTreeSet::new();
    for (i, n) in sorted.iter().enumerate() {
        if let Some(prev) = groups.range(..n.readiness_group).next_back() {
            for &d in &by_group[prev] {
                edges.insert((d, i));
            }
        }
    }
    let crds: BTreeMap<(&str, &str), usize> = sorted
        .iter()
        .enumerate()
        .filter_map(|(i, n)| {
            n.defines
                .as_ref()
                .map(|(g, k)| ((g.as_str(), k.as_str()), i))
        })
        .collect();
    for (i, n) in sorted.iter().enumerate() {
        if let Some(&crd) = crds.get(&(n.key.group.as_str(), n.key.kind.as_str()))
            && crd != i
        {
            edges.insert((crd, i));
        }
    }
    for &(from, to) in &edges {
        graph.add_edge(idx[from], idx[to], ());
    }

    let mut members: Vec<String> = tarjan_scc(&graph)
        .into_iter()
        .filter(|scc| scc.len() > 1)
        .flatten()
        .map(|n| sorted[graph[n]].key.to_string())
        .collect();
    if !members.is_empty() {
        members.sort();
        return Err(PlanError::DependencyCycle { members });
    }

    // Kahn's algorithm, ties broken by (readiness group, key).
    let mut indegree = vec![0usize; sorted.len()];
    let mut depends_on: BTreeMap<ResourceKey, Vec<ResourceKey>> =
        sorted.iter().map(|n| (n.key.clone(), Vec::new())).collect();
    for &(from, to) in &edges {
        indegree[to] += 1;
        if let Some(deps) = depends_on.get_mut(&sorted[to].key) {
            deps.push(sorted[from].key.clone());
        }
    }
    for deps in depends_on.values_mut() {
        deps.sort();
    }
    let rank = |i: usize| (sorted[i].readiness_group, i);
    let mut ready: BTreeSet<(i64, usize)> = (0..sorted.len())
        .filter(|&i| indegree[i] == 0)
        .map(rank)
        .collect();
    let mut order = Vec::with_capacity(sorted.len());
    while let Some(first) = ready.pop_first() {
        let i = first.1;
        order.push(sorted[i].key.clone());
        for &(from, to) in edges.range((i, 0)..=(i, usize::MAX)) {
            debug_assert_eq!(from, i);
            indegree[to] -= 1;
            if indegree[to] == 0 {
                ready.insert(rank(to));
            }
        }
    }
    Ok(Ordering { order, depends_on })
}

/// Deletion rank of a resource: its `deletion-group`, otherwise the reverse of creation order
/// (the negated readiness group); CRDs without an explicit group go last.
pub fn deletion_rank(key: &ResourceKey, deletion_group: Option<i64>, readiness_group: i64) -> i64 {
    match deletion_group {
        Some(g) => g,
        None if key.is_crd() => i64::MAX,
        None => readiness_group.saturating_neg(),
    }
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
        assert_eq!(o.depends_on[&nodes[1].key], vec![nodes[0].key.clone()]);
        assert_eq!(
            o.depends_on[&nodes[3].key],
            vec![nodes[1].key.clone(), nodes[2].key.clone()]
        );
        assert!(o.depends_on[&nodes[0].key].is_empty());
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
        assert_eq!(o.depends_on[&cr.key], vec![crd.key]);
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
