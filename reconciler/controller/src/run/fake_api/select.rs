//! Where a request of the fake API points, and which objects a list or watch selects (label
//! and field selectors as the API server reads them).

use std::collections::HashMap;

use serde_json::{Value, json};

/// The kinds the fake serves: (group/version path, plural, kind, namespaced).
pub(super) const KINDS: &[(&str, &str, &str, bool)] = &[
    ("/api/v1", "configmaps", "ConfigMap", true),
    ("/api/v1", "secrets", "Secret", true),
    ("/api/v1", "namespaces", "Namespace", false),
    (
        "/apis/enoki.dev/v1alpha1",
        "compositions",
        "Composition",
        true,
    ),
    (
        "/apis/enoki.dev/v1alpha1",
        "synthesizers",
        "Synthesizer",
        false,
    ),
    (
        "/apis/enoki.dev/v1alpha1",
        "resourceslices",
        "ResourceSlice",
        true,
    ),
    ("/apis/enoki.dev/v1alpha1", "symphonies", "Symphony", true),
    ("/apis/events.k8s.io/v1", "events", "Event", true),
];

/// A path of the API: a collection (`name` `None`), an object, or its subresource.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Target {
    /// The group/version path (`/api/v1`).
    pub(super) prefix: &'static str,
    pub(super) namespace: Option<String>,
    pub(super) plural: String,
    pub(super) name: Option<String>,
    pub(super) sub: Option<String>,
}

impl Target {
    /// The path's parts; `None` for a path of no kind the fake serves.
    pub(super) fn parse(path: &str) -> Option<Target> {
        let (prefix, rest) = KINDS
            .iter()
            .map(|k| k.0)
            .find_map(|p| Some((p, path.strip_prefix(p)?.strip_prefix('/')?)))?;
        let segs: Vec<&str> = rest.split('/').collect();
        let (namespace, segs) = match segs.as_slice() {
            ["namespaces", ns, more @ ..] if !more.is_empty() => (Some(ns.to_string()), more),
            _ => (None, segs.as_slice()),
        };
        let plural = segs.first()?.to_string();
        KINDS.iter().find(|k| k.0 == prefix && k.1 == plural)?;
        Some(Target {
            prefix,
            namespace,
            plural,
            name: segs.get(1).map(|s| s.to_string()),
            sub: segs.get(2).map(|s| s.to_string()),
        })
    }

    /// The path of object `name` of this collection.
    pub(super) fn object_path(&self, name: &str) -> String {
        match &self.namespace {
            Some(ns) => format!("{}/namespaces/{ns}/{}/{name}", self.prefix, self.plural),
            None => format!("{}/{}/{name}", self.prefix, self.plural),
        }
    }

    /// `team/configmaps/out/status`, `synthesizers/synth`: the path without group and version.
    pub(super) fn short(&self) -> String {
        [
            self.namespace.clone(),
            Some(self.plural.clone()),
            self.name.clone(),
            self.sub.clone(),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("/")
    }

    /// Whether objects of the kind carry `metadata.generation` (custom resources do; ConfigMaps,
    /// Secrets, Namespaces and Events do not).
    pub(super) fn has_generation(&self) -> bool {
        self.prefix.starts_with("/apis/enoki.dev/")
    }

    /// The kind's name (`ConfigMap`).
    pub(super) fn kind(&self) -> &'static str {
        KINDS
            .iter()
            .find(|k| k.0 == self.prefix && k.1 == self.plural)
            .map_or("Unknown", |k| k.2)
    }
}

/// The query of a request, decoded.
pub(super) fn query(q: Option<&str>) -> HashMap<String, String> {
    form_urlencoded::parse(q.unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

/// What a list or watch selects: one kind, maybe one namespace, label and field selectors.
pub(super) struct Selection {
    collection: Target,
    labels: Vec<Requirement>,
    fields: Vec<(String, bool, String)>,
}

/// One requirement of a label selector.
enum Requirement {
    Exists(String, bool),
    Equals(String, bool, String),
    In(String, bool, Vec<String>),
}

impl Selection {
    /// The selection of a list or watch of collection `t` with query `q`.
    pub(super) fn of(t: &Target, q: &HashMap<String, String>) -> Selection {
        let labels = q
            .get("labelSelector")
            .map_or_else(Vec::new, |s| requirements(s));
        let fields = q
            .get("fieldSelector")
            .map(|s| {
                s.split(',')
                    .filter(|p| !p.is_empty())
                    .map(|p| match p.split_once("!=") {
                        Some((k, v)) => (k.to_string(), false, v.to_string()),
                        None => {
                            let (k, v) = p.split_once('=').unwrap_or((p, ""));
                            (k.to_string(), true, v.trim_start_matches('=').to_string())
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        Selection {
            collection: t.clone(),
            labels,
            fields,
        }
    }

    /// Whether the object stored at `path` is selected.
    pub(super) fn matches(&self, path: &str, obj: &Value) -> bool {
        let Some(at) = Target::parse(path) else {
            return false;
        };
        let c = &self.collection;
        if at.prefix != c.prefix || at.plural != c.plural || at.sub.is_some() {
            return false;
        }
        if c.namespace.is_some() && at.namespace != c.namespace {
            return false;
        }
        let label = |k: &str| {
            obj.pointer("/metadata/labels")
                .and_then(|l| l.get(k))
                .and_then(Value::as_str)
                .map(String::from)
        };
        let labels_hold = self.labels.iter().all(|r| match r {
            Requirement::Exists(k, want) => label(k).is_some() == *want,
            Requirement::Equals(k, eq, v) => (label(k).as_deref() == Some(v)) == *eq,
            Requirement::In(k, within, vs) => label(k).is_some_and(|l| vs.contains(&l)) == *within,
        });
        let field = |k: &str| match k {
            "metadata.name" => at.name.clone(),
            "metadata.namespace" => at.namespace.clone(),
            _ => None,
        };
        let fields_hold = self
            .fields
            .iter()
            .all(|(k, eq, v)| (field(k).as_deref() == Some(v)) == *eq);
        labels_hold && fields_hold
    }
}

/// The requirements of a label selector (`a`, `!a`, `a=b`, `a==b`, `a!=b`, `a in (b,c)`,
/// `a notin (b)`).
fn requirements(selector: &str) -> Vec<Requirement> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&selector[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(requirement)
        .collect()
}

fn requirement(p: &str) -> Requirement {
    let set = |rest: &str| {
        rest.trim()
            .trim_start_matches('(')
            .trim_end_matches(')')
            .split(',')
            .map(|v| v.trim().to_string())
            .collect::<Vec<_>>()
    };
    if let Some((k, rest)) = p.split_once(" notin ") {
        return Requirement::In(k.trim().to_string(), false, set(rest));
    }
    if let Some((k, rest)) = p.split_once(" in ") {
        return Requirement::In(k.trim().to_string(), true, set(rest));
    }
    if let Some((k, v)) = p.split_once("!=") {
        return Requirement::Equals(k.to_string(), false, v.to_string());
    }
    if let Some((k, v)) = p.split_once('=') {
        return Requirement::Equals(k.to_string(), true, v.trim_start_matches('=').to_string());
    }
    match p.strip_prefix('!') {
        Some(k) => Requirement::Exists(k.to_string(), false),
        None => Requirement::Exists(p.to_string(), true),
    }
}

/// The APIResourceList of a group/version path the fake serves.
pub(super) fn discovery(path: &str) -> Option<Value> {
    let resources: Vec<Value> = KINDS
        .iter()
        .filter(|k| k.0 == path)
        .map(|(_, plural, kind, namespaced)| {
            json!({"name": plural, "singularName": kind.to_lowercase(), "namespaced": namespaced,
                "kind": kind, "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]})
        })
        .collect();
    if resources.is_empty() {
        return None;
    }
    let group_version = path
        .trim_start_matches("/apis/")
        .trim_start_matches("/api/");
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1",
        "groupVersion": group_version, "resources": resources}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_read_as_the_api_server_reads_them() {
        let t = Target::parse("/api/v1/configmaps").expect("collection");
        let q = query(Some(
            "labelSelector=%21enoki.dev%2Fmanaged-by%2Ctier+in+%28a%2Cb%29&fieldSelector=metadata.name%3Dout",
        ));
        let s = Selection::of(&t, &q);
        let path = "/api/v1/namespaces/team/configmaps/out";
        let labelled = |l: Value| json!({"metadata": {"labels": l}});
        assert!(s.matches(path, &labelled(json!({"tier": "a"}))));
        assert!(!s.matches(path, &labelled(json!({"tier": "c"}))));
        assert!(!s.matches(
            path,
            &labelled(json!({"tier": "a", "enoki.dev/managed-by": "x"}))
        ));
        assert!(!s.matches(
            "/api/v1/namespaces/team/configmaps/other",
            &labelled(json!({"tier": "a"}))
        ));
        assert!(!s.matches(
            "/api/v1/namespaces/team/secrets/out",
            &labelled(json!({"tier": "a"}))
        ));
    }
}
