//! How `enoki diff` shows objects: labels, normalized YAML, masked Secret values and unified
//! diffs.

use super::*;

/// A stable display name: `apiVersion Kind namespace/name`.
pub(super) fn label_of(api_version: &str, key: &ResourceKey) -> String {
    if key.namespace.is_empty() {
        format!("{api_version} {} {}", key.kind, key.name)
    } else {
        format!("{api_version} {} {}/{}", key.kind, key.namespace, key.name)
    }
}

/// An object as YAML without what the server changes on every write.
pub(super) fn normalized(obj: &Value) -> String {
    let mut v = obj.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in [
            "managedFields",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "uid",
        ] {
            meta.remove(f);
        }
    }
    serde_saphyr::to_string(&v).unwrap_or_default()
}

/// Masks Secret values as `kubectl diff` does: every value of `data`/`stringData` becomes
/// `***`, or `*** (before)` / `*** (after)` where the two differ; the last-applied annotation
/// (which holds the values too) is dropped.
pub(super) fn mask_secrets(before: Option<&mut Value>, after: Option<&mut Value>) {
    const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
    let get = |v: &Option<&mut Value>, field: &str, key: &str| -> Option<Value> {
        v.as_deref()?.get(field)?.get(key).cloned()
    };
    let (mut before, mut after) = (before, after);
    for field in ["data", "stringData"] {
        let keys: BTreeSet<String> = [before.as_deref(), after.as_deref()]
            .into_iter()
            .flatten()
            .filter_map(|o| o.get(field)?.as_object())
            .flat_map(|m| m.keys().cloned())
            .collect();
        for key in keys {
            let same = get(&before, field, &key) == get(&after, field, &key);
            let mask = |side: &mut Option<&mut Value>, suffix: &str| {
                if let Some(slot) = side
                    .as_deref_mut()
                    .and_then(|o| o.get_mut(field)?.get_mut(&key))
                {
                    *slot = Value::String(if same {
                        "***".into()
                    } else {
                        format!("***{suffix}")
                    });
                }
            };
            mask(&mut before, " (before)");
            mask(&mut after, " (after)");
        }
    }
    for side in [before, after].into_iter().flatten() {
        if let Some(a) = side
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            a.remove(LAST_APPLIED);
        }
    }
}

pub(super) fn unified(label: &str, before: &str, after: &str) -> String {
    similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header(&format!("live     {label}"), &format!("enoki    {label}"))
        .to_string()
}

/// `info` with the live object's `enoki.dev/shard` label: the controller's `--shards` sets
/// it, and a diff is not about it.
pub(super) fn with_live_shard(
    info: &plan::CompositionInfo,
    live: Option<&Value>,
) -> plan::CompositionInfo {
    let shard = live.and_then(|l| l.pointer("/metadata/labels")?.get(crds::names::SHARD_LABEL));
    plan::CompositionInfo {
        shard: shard.and_then(Value::as_str).map(String::from),
        ..info.clone()
    }
}
