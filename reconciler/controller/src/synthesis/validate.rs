//! Validation of the emitted items: required fields, namespaces of namespaced and
//! cluster-scoped kinds, duplicates resolved as Eno resolves them.

use super::*;

/// Kinds that are cluster-scoped (used when discovery is not available, e.g. `enoki render`).
pub const CLUSTER_SCOPED_KINDS: &[&str] = &[
    "Namespace",
    "Node",
    "PersistentVolume",
    "StorageClass",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PriorityClass",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "APIService",
    "IngressClass",
    "RuntimeClass",
    "CSIDriver",
    "CSINode",
    "VolumeAttachment",
    "CertificateSigningRequest",
    "FlowSchema",
    "PriorityLevelConfiguration",
    crds::names::kinds::SYNTHESIZER,
    "ClusterResourceQuota",
];

/// Static scope guess: everything not in [`CLUSTER_SCOPED_KINDS`] is namespaced.
pub fn static_is_namespaced(_group: &str, kind: &str) -> bool {
    !CLUSTER_SCOPED_KINDS.contains(&kind)
}

/// Validates the items: each has apiVersion/kind/name, namespaces are defaulted on namespaced
/// kinds (and removed from cluster-scoped ones), annotations parse. Resources emitted more than
/// once are resolved as Eno resolves them — the copy whose manifest has the greatest FNV-1
/// 64-bit hash is kept (on a tie, the later one) — and each dropped copy is reported as a
/// `warning` result.
///
/// # Errors
/// [`SynthesisError::InvalidOutput`] naming the item and the problem.
pub fn validate(
    items: Vec<Value>,
    namespace: &str,
    is_namespaced: &dyn Fn(&str, &str) -> bool,
) -> Result<(Vec<Value>, Vec<crds::SynthesisResult>), SynthesisError> {
    let mut out: Vec<Value> = Vec::with_capacity(items.len());
    let mut seen: std::collections::HashMap<plan::ResourceKey, (usize, usize, u64)> =
        std::collections::HashMap::new();
    let mut warnings = Vec::new();
    for (index, mut item) in items.into_iter().enumerate() {
        let key = plan::ResourceKey::of(&item).map_err(|m| SynthesisError::InvalidOutput {
            message: format!("item {index}: {m}"),
        })?;
        let hash = eno_manifest_hash(&item);
        let namespaced = is_namespaced(&key.group, &key.kind);
        normalize(&mut item, namespaced, key.namespace.is_empty(), namespace);
        let key = plan::ResourceKey::of(&item).unwrap_or(key);
        identity_within(&key, &item, index)?;
        if let Some(what) = writes_a_slice(&key, &item) {
            // The stored output of syntheses: written by enoki only, never by a synthesis.
            return Err(SynthesisError::InvalidOutput {
                message: format!(
                    "item {index}: {}/{} {what}, enoki's own storage of syntheses: a synthesis \
                     may not write one",
                    key.namespace, key.name
                ),
            });
        }
        match seen.get_mut(&key) {
            None => {
                seen.insert(key, (out.len(), index, hash));
                out.push(item);
            }
            Some((slot, kept_index, kept_hash)) => {
                let (kept, dropped) = if hash >= *kept_hash {
                    let dropped = *kept_index;
                    out[*slot] = item;
                    (*kept_index, *kept_hash) = (index, hash);
                    (index, dropped)
                } else {
                    (*kept_index, index)
                };
                warnings.push(crds::SynthesisResult {
                    severity: crds::Severity::Warning,
                    message: format!(
                        "duplicate resource {key}: kept item {kept}, dropped item {dropped} \
                         (Eno's rule: the greater manifest hash)"
                    ),
                    resource_ref: Some(key.to_string()),
                    tags: BTreeMap::new(),
                });
            }
        }
    }
    warnings.extend(checked_by_the_planner(&out)?);
    Ok((out, warnings))
}

/// Longest name, kind or apiVersion an output item may have: an apiVersion is a group of
/// 253 bytes, `/` and a version of 63, and the longest names the API server checks are
/// APIServices' (`<version>.<group>`); RBAC names, which it does not bound, are bounded here.
/// An output item naming more is refused before anything is stored.
pub const MAX_IDENTITY_BYTES: usize = 317;

/// Whether `item` is a ResourceSlice (`enoki.dev` or `eno.azure.io`) or a Patch of one.
fn writes_a_slice(key: &plan::ResourceKey, item: &Value) -> Option<&'static str> {
    let slice = |group: &str, kind: &str| {
        kind == "ResourceSlice" && ["enoki.dev", "eno.azure.io"].contains(&group)
    };
    if slice(&key.group, &key.kind) {
        return Some("is a ResourceSlice");
    }
    let target = item.get("patch").filter(|_| key.kind == "Patch")?;
    let api_version = target.get("apiVersion").and_then(Value::as_str)?;
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let kind = target.get("kind").and_then(Value::as_str)?;
    slice(group, kind).then_some("patches a ResourceSlice")
}

/// Refuses an item (as normalized: a cluster-scoped kind has lost any namespace) whose name,
/// kind or apiVersion (a Patch's target kind and apiVersion too) is over
/// [`MAX_IDENTITY_BYTES`], or whose namespace is over 63 bytes (a DNS label).
fn identity_within(
    key: &plan::ResourceKey,
    item: &Value,
    index: usize,
) -> Result<(), SynthesisError> {
    let api_version = item
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    // A Patch names its target's kind and apiVersion: the slice cache keeps those too.
    let target = |field: &str| {
        item.get("patch")
            .filter(|_| key.kind == "Patch")
            .and_then(|p| p.get(field))
            .and_then(Value::as_str)
            .map_or(0, str::len)
    };
    let fields = [
        ("metadata.name", key.name.len(), MAX_IDENTITY_BYTES),
        ("metadata.namespace", key.namespace.len(), 63),
        ("kind", key.kind.len(), MAX_IDENTITY_BYTES),
        ("apiVersion", api_version.len(), MAX_IDENTITY_BYTES),
        ("patch.kind", target("kind"), MAX_IDENTITY_BYTES),
        ("patch.apiVersion", target("apiVersion"), MAX_IDENTITY_BYTES),
    ];
    match fields.into_iter().find(|(_, len, max)| len > max) {
        Some((field, len, max)) => Err(SynthesisError::InvalidOutput {
            message: format!("item {index}: {field} is {len} bytes (at most {max})"),
        }),
        None => Ok(()),
    }
}

/// As Eno, what client-go structs emit is dropped: `status: {}` and `creationTimestamp:
/// null` (Eno drops any status; a non-empty one is kept here, as it is an instance-mode
/// status write-back); a namespaced kind gets the Composition's namespace when it names
/// none, a cluster-scoped one loses any.
fn normalize(item: &mut Value, namespaced: bool, no_namespace: bool, namespace: &str) {
    if let Some(obj) = item.as_object_mut()
        && obj
            .get("status")
            .is_some_and(|s| s.is_null() || s.as_object().is_some_and(|m| m.is_empty()))
    {
        obj.remove("status");
    }
    if let Some(meta) = item.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("creationTimestamp");
        if namespaced && no_namespace {
            meta.insert("namespace".into(), Value::String(namespace.to_string()));
        } else if !namespaced {
            meta.remove("namespace");
        }
    }
}

/// Annotation values and CEL, checked by the planner's ingestion: what Eno refuses at
/// synthesis (and reads leniently from stored output) fails it; cascading values that did
/// not parse are warnings (read as Eno reads them).
fn checked_by_the_planner(out: &[Value]) -> Result<Vec<crds::SynthesisResult>, SynthesisError> {
    let desired: Vec<plan::Desired> = out
        .iter()
        .map(|m| plan::Desired {
            manifest: m.clone(),
            tombstone: false,
        })
        .collect();
    let prepared = plan::prepare(&desired, &plan::CompositionInfo::default()).map_err(|e| {
        SynthesisError::InvalidOutput {
            message: e.to_string(),
        }
    })?;
    if let Some(message) = prepared
        .resources
        .iter()
        .find_map(|r| r.settings.refused.first())
    {
        return Err(SynthesisError::InvalidOutput {
            message: message.clone(),
        });
    }
    let mut warnings = Vec::new();
    for r in &prepared.resources {
        for w in &r.settings.warnings {
            warnings.push(crds::SynthesisResult {
                severity: crds::Severity::Warning,
                message: w.clone(),
                resource_ref: Some(r.key.to_string()),
                tags: BTreeMap::new(),
            });
        }
    }
    Ok(warnings)
}

/// FNV-1 (64-bit) of the manifest's canonical JSON: Eno orders duplicate resources by the
/// FNV-1 hash of their manifest JSON (Go's `encoding/json`, sorted keys — the same bytes as
/// enoki's canonical JSON for manifests without `<`, `>` or `&`, which Go escapes).
pub(super) fn eno_manifest_hash(manifest: &Value) -> u64 {
    fnv1_64(plan::snapshot::canonical_json(manifest).as_bytes())
}

/// FNV-1, 64-bit (Go's `hash/fnv.New64`): multiply, then xor.
pub(super) fn fnv1_64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h: u64, b| {
        h.wrapping_mul(0x0000_0100_0000_01b3) ^ u64::from(*b)
    })
}
