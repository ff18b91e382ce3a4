//! Preparing a synthesis for planning: each emitted object's key, settings, readiness checks,
//! overrides and snapshot, computed once per synthesis; Patch targets; CRDs the synthesis defines.

use super::*;

/// The target `(apiVersion, kind)` of a `Patch` pseudo-resource; `Ok(None)` for anything else.
///
/// # Errors
/// A message when it is a Patch without `patch.apiVersion`, `patch.kind` or a list `patch.ops`.
pub fn patch_target(manifest: &Value) -> Result<Option<(String, String)>, String> {
    let api_version = manifest
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if manifest.get("kind").and_then(Value::as_str) != Some("Patch")
        || !PATCH_API_VERSIONS.contains(&api_version)
    {
        return Ok(None);
    }
    let field = |name: &str| {
        manifest
            .pointer(&format!("/patch/{name}"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .ok_or_else(|| format!("a Patch needs patch.{name}"))
    };
    let target = (field("apiVersion")?, field("kind")?);
    match manifest.pointer("/patch/ops") {
        None | Some(Value::Array(_)) => Ok(Some(target)),
        Some(_) => Err("patch.ops must be a list of JSON patch operations".into()),
    }
}

/// A manifest's annotations as strings (a non-string value as its JSON text).
pub fn annotations_of(manifest: &Value) -> BTreeMap<String, String> {
    manifest
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str().map_or_else(|| v.to_string(), String::from),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Ingests a synthesis's output.
///
/// # Errors
/// The first invalid manifest, duplicate, bad annotation value, non-compiling CEL or bad
/// override (naming the resource and key), or a dependency cycle with all its members.
pub fn prepare(desired: &[Desired], composition: &CompositionInfo) -> Result<Prepared, PlanError> {
    let mut resources: Vec<PreparedResource> = Vec::with_capacity(desired.len());
    let mut seen = BTreeMap::new();
    for (index, d) in desired.iter().enumerate() {
        let key = ResourceKey::of(&d.manifest)
            .map_err(|message| PlanError::Manifest { index, message })?;
        if seen.insert(key.clone(), index).is_some() {
            return Err(PlanError::Duplicate {
                resource: key.to_string(),
            });
        }
        let annotations = annotations_of(&d.manifest);
        let patch =
            patch_target(&d.manifest).map_err(|message| PlanError::Manifest { index, message })?;
        let kind = patch
            .as_ref()
            .map_or(key.kind.as_str(), |(_, k)| k.as_str());
        let mut settings = settings::parse_as(&key, kind, &annotations, &composition.annotations)?;
        let checks = settings::readiness_annotations(&annotations)
            .into_iter()
            .map(|(name, k, cel)| {
                let eno = k.starts_with(crds::names::ENO_PREFIX);
                Expr::compile(&cel)
                    .map(|expr| ReadinessCheck { name, expr, eno })
                    .map_err(|message| PlanError::CompileCel {
                        resource: key.to_string(),
                        key: k,
                        message,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let overrides = overrides_of(&key, &annotations, &mut settings.warnings)?;
        let snapshot_hash = overrides
            .is_empty()
            .then(|| snapshot::hash(&snapshot::strip(&d.manifest, composition.owner())));
        resources.push(PreparedResource {
            key,
            manifest: d.manifest.clone(),
            tombstone: d.tombstone,
            settings,
            checks,
            overrides,
            snapshot_hash,
            patch,
        });
    }
    resources.sort_by(|a, b| a.key.cmp(&b.key));
    let nodes: Vec<Node> = resources
        .iter()
        .filter(|r| !r.tombstone)
        .map(|r| Node {
            key: r.key.clone(),
            readiness_group: r.settings.readiness_group,
            defines: crd_defines(r),
            target: r.patch.as_ref().map(|(api_version, kind)| {
                let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
                (group.to_string(), kind.clone())
            }),
        })
        .collect();
    let ordering = ordering::order(&nodes)?;
    let superseded_by = superseded_by(&resources, &ordering);
    Ok(Prepared {
        resources,
        ordering,
        superseded_by,
    })
}

/// The resource's `overrides` annotation parsed (either spelling); values Eno reads
/// leniently add warnings to `warnings_out`.
fn overrides_of(
    key: &ResourceKey,
    annotations: &BTreeMap<String, String>,
    warnings_out: &mut Vec<String>,
) -> Result<Vec<Override>, PlanError> {
    Ok(match crds::names::annotations::OVERRIDES.get(annotations) {
        None => Vec::new(),
        Some(text) => {
            let written = if annotations.contains_key(crds::names::annotations::OVERRIDES.enoki) {
                crds::names::annotations::OVERRIDES.enoki
            } else {
                crds::names::annotations::OVERRIDES.eno
            };
            let (overrides, warnings) =
                overrides::parse_with_warnings(text).map_err(|message| PlanError::Annotation {
                    resource: key.to_string(),
                    key: written.into(),
                    message,
                })?;
            warnings_out.extend(
                warnings
                    .into_iter()
                    .map(|w| format!("{key}: {written}: {w}")),
            );
            overrides
        }
    })
}

/// The object a resource writes: itself, or a Patch's target (the Patch's namespace and name).
pub fn target_of(r: &PreparedResource) -> ResourceKey {
    match &r.patch {
        Some((api_version, kind)) => ResourceKey {
            group: api_version
                .rsplit_once('/')
                .map(|(g, _)| g.to_string())
                .unwrap_or_default(),
            kind: kind.clone(),
            namespace: r.key.namespace.clone(),
            name: r.key.name.clone(),
        },
        None => r.key.clone(),
    }
}

/// Eno's `Backtracks` pairs: each resource whose object a member of the next readiness group
/// (adjacent groups only, as in Eno) also writes, with those members. A Patch carries the
/// Composition's namespace even when its target is cluster-scoped: it pairs with a
/// cluster-scoped object of the same kind and name.
fn superseded_by(
    resources: &[PreparedResource],
    ordering: &Ordering,
) -> BTreeMap<ResourceKey, Vec<ResourceKey>> {
    type Object = (i64, String, String, String);
    let object = |g: i64, t: &ResourceKey| (g, t.group.clone(), t.kind.clone(), t.name.clone());
    let mut at: BTreeMap<Object, Vec<(&PreparedResource, ResourceKey)>> = BTreeMap::new();
    for r in resources.iter().filter(|r| !r.tombstone) {
        if let Some(g) = ordering.group_of(&r.key) {
            let t = target_of(r);
            at.entry(object(g, &t)).or_default().push((r, t));
        }
    }
    let same_object =
        |a: &PreparedResource, at: &ResourceKey, b: &PreparedResource, bt: &ResourceKey| {
            at.namespace == bt.namespace
                || (a.patch.is_some() && b.patch.is_none() && bt.namespace.is_empty())
                || (b.patch.is_some() && a.patch.is_none() && at.namespace.is_empty())
        };
    resources
        .iter()
        .filter(|r| !r.tombstone)
        .filter_map(|r| {
            let next = ordering.next_group(&r.key)?;
            let t = target_of(r);
            let later: Vec<ResourceKey> = at
                .get(&object(next, &t))?
                .iter()
                .filter(|(l, lt)| same_object(r, &t, l, lt))
                .map(|(l, _)| l.key.clone())
                .collect();
            (!later.is_empty()).then(|| (r.key.clone(), later))
        })
        .collect()
}

pub(super) fn crd_defines(r: &PreparedResource) -> Option<(String, String)> {
    if !r.key.is_crd() {
        return None;
    }
    let group = r.manifest.pointer("/spec/group")?.as_str()?;
    let kind = r.manifest.pointer("/spec/names/kind")?.as_str()?;
    Some((group.to_string(), kind.to_string()))
}
