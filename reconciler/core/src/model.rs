//! Plain data the controller's phases share — no client, no `Context`, no I/O: the bottom of
//! the controller's import graph (`hack/import-graph.py` fails `make test` on a cycle).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use kube_core::ResourceExt;

use crds::{ResourceSlice, ResourceSliceSpec, ResourceState};
use plan::ResourceKey;
use serde_json::Value;

/// What a step of a pass came to when it may be held back for a reason the pass reports (an
/// input missing or refused, a precondition, a requeue): not an API failure — those are the
/// `Error` around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<T, W = String> {
    /// The step's value.
    Ready(T),
    /// Why it waits: a message for a condition, or how long until it looks again.
    Waits(W),
}

impl<T, W> Outcome<T, W> {
    /// The same outcome with its value mapped (what it waits on kept).
    pub fn map_ready<U>(self, f: impl FnOnce(T) -> U) -> Outcome<U, W> {
        match self {
            Outcome::Ready(t) => Outcome::Ready(f(t)),
            Outcome::Waits(w) => Outcome::Waits(w),
        }
    }
}

/// Per-resource write backoff: failures so far, when to try again, and the last error.
pub type Backoff = (u32, Instant, Failure);

/// A write's last failure: enoki's message and Eno's summary of it ([`summarize_error`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Failure {
    /// `Reason: message` (or the transport error).
    pub error: String,
    /// Eno's summary (empty when Eno reports nothing).
    pub summary: String,
}

impl From<String> for Failure {
    /// A failure before any request (a manifest that does not decode): nothing Eno reports.
    fn from(error: String) -> Failure {
        Failure {
            error,
            summary: String::new(),
        }
    }
}

/// A slice's manifests, parsed once per slice (slices are written once and never change).
#[derive(Debug, Default)]
pub struct Parsed {
    /// (index, key) of every manifest that parses (the manifests themselves are parsed again
    /// only when a synthesis is ingested, so no copy of them is kept here).
    pub keys: Vec<(usize, ResourceKey)>,
    /// Whether each manifest is a tombstone.
    pub tombstones: Vec<bool>,
}

/// Parses a slice's manifests (those that do not parse are skipped).
pub fn parse(spec: &ResourceSliceSpec) -> Parsed {
    let keys = spec
        .resources
        .iter()
        .enumerate()
        .filter_map(|(ri, m)| {
            let manifest = serde_json::from_str::<Value>(&m.manifest).ok()?;
            Some((ri, ResourceKey::of(&manifest).ok()?))
        })
        .collect();
    Parsed {
        keys,
        tombstones: spec.resources.iter().map(|m| m.deleted).collect(),
    }
}

/// Verdicts of namespace selectors, by (namespace, selector), believed for [`VERDICT_FOR`]: a
/// refused Composition is looked at every readiness poll, and asks the API server at most
/// that often.
#[derive(Default)]
pub struct NamespaceVerdicts(
    std::sync::Mutex<std::collections::HashMap<(String, String), (std::time::Instant, bool)>>,
);

/// How long a namespace selector's verdict is believed (a relabelled namespace takes effect
/// within it).
pub const VERDICT_FOR: std::time::Duration = std::time::Duration::from_secs(15);

impl NamespaceVerdicts {
    pub fn get(&self, ns: &str, query: &str) -> Option<bool> {
        // A panic while the map was held leaves it usable: recovered, not dropped.
        let m = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (at, v) = m.get(&(ns.to_string(), query.to_string()))?;
        (at.elapsed() < VERDICT_FOR).then_some(*v)
    }

    pub fn put(&self, ns: &str, query: &str, selected: bool) {
        let mut m = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if m.len() > 10_000 {
            m.retain(|_, (at, _)| at.elapsed() < VERDICT_FOR);
        }
        m.insert(
            (ns.to_string(), query.to_string()),
            (std::time::Instant::now(), selected),
        );
    }
}

/// A synthesis that failed: not run again for the same fingerprint before `retry_at`.
#[derive(Clone, Debug)]
pub struct Failed {
    pub fingerprint: String,
    pub failures: u32,
    pub retry_at: Instant,
}

/// The group/version/kind of a manifest.
pub fn gvk_of_manifest(m: &Value) -> Option<kube_core::GroupVersionKind> {
    let api_version = m.get("apiVersion")?.as_str()?;
    let kind = m.get("kind")?.as_str()?;
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    Some(kube_core::GroupVersionKind::gvk(group, version, kind))
}

/// Per-resource positions in the loaded slices.
pub type Positions = HashMap<ResourceKey, (usize, usize)>;

/// One manifest of a loaded slice.
#[derive(Debug)]
pub struct LoadedResource {
    pub key: ResourceKey,
    pub tombstone: bool,
    pub slice: usize,
    pub index: usize,
}

/// One loaded slice: its name and per-manifest states (resized to its manifests).
#[derive(Debug)]
pub struct LoadedSlice {
    pub name: String,
    pub states: Vec<ResourceState>,
    /// The states as stored (to skip writing unchanged ones).
    pub stored: Vec<ResourceState>,
    pub tombstones: Vec<bool>,
}

/// The slices of one synthesis, parsed.
#[derive(Debug, Default)]
pub struct Loaded {
    pub slices: Vec<LoadedSlice>,
    /// The slices themselves (shared with the cache: compact copies, identities only).
    pub specs: Vec<Arc<ResourceSlice>>,
    pub resources: Vec<LoadedResource>,
    pub position: Positions,
    /// A slice the synthesis refers to does not exist.
    pub missing: bool,
}

impl Loaded {
    /// Whether manifest `ri` of slice `si` is a tombstone.
    pub fn is_tombstone(&self, si: usize, ri: usize) -> bool {
        self.slices
            .get(si)
            .and_then(|s| s.tombstones.get(ri))
            .copied()
            .unwrap_or(false)
    }

    /// Resources recorded as deleted.
    pub fn deleted_keys(&self) -> BTreeSet<ResourceKey> {
        self.resources
            .iter()
            .filter(|r| {
                self.slices[r.slice]
                    .states
                    .get(r.index)
                    .is_some_and(|s| s.deleted)
            })
            .map(|r| r.key.clone())
            .collect()
    }

    pub fn push(&mut self, slice: Arc<ResourceSlice>, parsed: &Parsed, stored: Vec<ResourceState>) {
        let si = self.slices.len();
        let name = slice.name_any();
        let mut states = stored.clone();
        states.resize(parsed.tombstones.len(), ResourceState::default());
        self.specs.push(slice);
        for (ri, key) in &parsed.keys {
            self.position.insert(key.clone(), (si, *ri));
            self.resources.push(LoadedResource {
                key: key.clone(),
                tombstone: parsed.tombstones[*ri],
                slice: si,
                index: *ri,
            });
        }
        self.slices.push(LoadedSlice {
            name,
            states,
            stored,
            tombstones: parsed.tombstones.clone(),
        });
    }

    /// A loaded set of one slice with these (key, tombstone) resources, for unit tests.
    #[cfg(test)]
    pub fn for_test(keys: &[(ResourceKey, bool)]) -> Loaded {
        let spec = ResourceSliceSpec {
            synthesis_uuid: "u".into(),
            resources: keys
                .iter()
                .map(|(k, t)| crds::Manifest {
                    sealed: None,
                    manifest: serde_json::json!({"apiVersion": "v1", "kind": k.kind, "metadata":
                        {"name": k.name, "namespace": k.namespace}})
                    .to_string(),
                    deleted: *t,
                })
                .collect(),
            compact_bytes: None,
        };
        let mut l = Loaded::default();
        let parsed = parse(&spec);
        l.push(Arc::new(ResourceSlice::new("s", spec)), &parsed, Vec::new());
        l
    }
}

/// What happened to one step.
#[derive(Debug, Default)]
pub struct StepResult {
    /// The resourceVersion the server returned for a write.
    pub resource_version: Option<String>,
    /// Why the write failed (the server's message).
    pub error: Option<String>,
    /// The failure as Eno summarizes it for `simplified.error` ([`summarize_error`]; empty
    /// for a failure Eno does not report).
    pub summary: Option<String>,
    /// Not attempted: the resource is backing off after earlier failures.
    pub held: bool,
    /// The object the server returned for a write (its readiness is evaluated from it, so a
    /// resource that is ready once written needs no second pass).
    pub object: Option<Value>,
    /// A guarded first write (the object was absent from the cache and not read) found the
    /// object existing: nothing was written; it is read, and decided, on the next pass.
    pub unseen: bool,
}

/// Eno's `summarizeError` (`internal/controllers/reconciliation/controller.go`) of an API
/// error with `reason` and `message`: the tail after "failed to create typed patch object"
/// (server-side apply's schema errors), the message for the reasons Eno reports (BadRequest,
/// NotAcceptable, RequestEntityTooLarge, MethodNotAllowed, Gone, Forbidden, Unauthorized,
/// Invalid, InternalError), and nothing for any other.
pub fn summarize_error(reason: &str, message: &str) -> String {
    const TYPED_PATCH: &str = "failed to create typed patch object";
    if let Some((_, tail)) = message.split_once(TYPED_PATCH) {
        return tail.trim().to_string();
    }
    const REPORTED: &[&str] = &[
        "BadRequest",
        "NotAcceptable",
        "RequestEntityTooLarge",
        "MethodNotAllowed",
        "Gone",
        "Forbidden",
        "Unauthorized",
        "Invalid",
        "InternalError",
    ];
    if REPORTED.contains(&reason) {
        message.to_string()
    } else {
        String::new()
    }
}

#[cfg(test)]
mod summary_tests {
    use super::summarize_error;

    #[test]
    fn errors_are_summarized_as_eno_summarizes_them() {
        assert_eq!(
            summarize_error(
                "BadRequest",
                "failed to create typed patch object (/v1, Kind=ConfigMap): .data.x: expected string"
            ),
            "(/v1, Kind=ConfigMap): .data.x: expected string"
        );
        assert_eq!(
            summarize_error("Forbidden", "configmaps is forbidden: no"),
            "configmaps is forbidden: no"
        );
        assert_eq!(
            summarize_error("Conflict", "the object has been modified"),
            ""
        );
        assert_eq!(
            summarize_error("NotFound", "namespaces \"x\" not found"),
            ""
        );
    }
}
