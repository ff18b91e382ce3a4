//! The pure half of the Eno bridge: an Eno object's spec as its `enoki.dev` mirror's, and the
//! mirror's status as the Eno object's (only Eno's fields: Eno's CRDs prune the rest).
//!
//! Generations are mapped, not copied: the mirror records the Eno object's generation it was
//! written from (`enoki.dev/eno-generation`), and a synthesis that observed the mirror's
//! current generation observed that Eno generation — so `observedCompositionGeneration ==
//! metadata.generation` means on the Eno object what it means in Eno.

use std::collections::BTreeMap;

use crds::eno;
use kube::ResourceExt;
use serde_json::{Value, json};

/// Annotation on a mirror: the generation of the Eno object it was written from.
pub(crate) const GENERATION: &str = "enoki.dev/eno-generation";
/// Label on a mirror: it mirrors an `eno.azure.io` object of the same name (which owns it).
pub(crate) const MIRROR: &str = "enoki.dev/eno-mirror";
/// Annotation on an Eno Synthesizer naming its module: `builtin:<name>` or an OCI reference
/// (pinned or by tag), in place of `spec.image`.
pub(crate) const MODULE: &str = "enoki.dev/module";
/// Annotation on an Eno Composition: enoki wrote its mirror (so deleting it deletes what the
/// mirror applied).
pub(crate) const MIRRORED: &str = "enoki.dev/eno-mirrored";
/// Annotation on an Eno Composition Eno's Symphony made: the UID of that Symphony, whose
/// mirror reconciles the variation.
pub(crate) const SUPERSEDED: &str = "enoki.dev/eno-superseded";
/// Annotations not carried to a mirror.
const NOT_CARRIED: [&str; 3] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    MIRRORED,
    SUPERSEDED,
];

/// Why an Eno object has no mirror: Eno's status word and the reason.
pub(crate) type Refusal = (&'static str, String);

/// A Synthesizer named by `labelSelector` only.
fn by_label(field: &str) -> Refusal {
    let why =
        format!("{field} is empty: enoki does not pick a Synthesizer by labelSelector; name it");
    ("MissingSynthesizer", why)
}

/// A key bound twice (Eno's lists allow it; enoki's are maps by key).
fn twice<'a>(field: &str, keys: impl Iterator<Item = &'a str>) -> Result<(), Refusal> {
    let mut seen = std::collections::BTreeSet::new();
    for k in keys {
        if !seen.insert(k) {
            return Err((
                "InvalidSpec",
                format!("{field}: the key {k:?} appears twice"),
            ));
        }
    }
    Ok(())
}

/// The mirror of an Eno Composition's spec, or why there is none. A `dependsOn` entry
/// without a name (Eno's schema allows it) names nothing and is left out.
pub(crate) fn composition_spec(c: &eno::Composition) -> Result<crds::CompositionSpec, Refusal> {
    if c.spec.synthesizer.name.is_empty() {
        return Err(by_label("spec.synthesizer.name"));
    }
    twice(
        "spec.bindings",
        c.spec.bindings.iter().map(|b| b.key.as_str()),
    )?;
    let mut spec = to_json(&c.spec);
    spec["synthesizer"] = json!({"name": c.spec.synthesizer.name});
    if let Some(deps) = spec.get_mut("dependsOn").and_then(Value::as_array_mut) {
        deps.retain(|d| d["name"].as_str().is_some_and(|n| !n.is_empty()));
    }
    serde_json::from_value(spec).map_err(|e| ("InvalidSpec", format!("spec: {e}")))
}

/// The mirror of an Eno Symphony's spec, or why there is none.
pub(crate) fn symphony_spec(s: &eno::Symphony) -> Result<crds::SymphonySpec, Refusal> {
    let mut spec = to_json(&s.spec);
    twice(
        "spec.bindings",
        s.spec.bindings.iter().map(|b| b.key.as_str()),
    )?;
    for (i, v) in s.spec.variations.iter().enumerate() {
        if v.synthesizer.name.is_empty() {
            return Err(by_label(&format!("spec.variations[{i}].synthesizer.name")));
        }
        let field = format!("spec.variations[{i}].bindings");
        twice(&field, v.bindings.iter().map(|b| b.key.as_str()))?;
        let variation = &mut spec["variations"][i];
        variation["synthesizer"] = json!({"name": v.synthesizer.name});
        if let Some(deps) = variation.get_mut("dependsOn").and_then(Value::as_array_mut) {
            deps.retain(|d| d["synthesizer"].as_str().is_some_and(|n| !n.is_empty()));
        }
    }
    serde_json::from_value(spec).map_err(|e| ("InvalidSpec", format!("spec: {e}")))
}

/// The mirror of an Eno Synthesizer's spec, given its module; or why there is none.
pub(crate) fn synthesizer_spec(
    s: &eno::Synthesizer,
    module: crds::ModuleSource,
) -> Result<crds::SynthesizerSpec, String> {
    twice("spec.refs", s.spec.refs.iter().map(|r| r.key.as_str())).map_err(|(_, why)| why)?;
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let refs = s
        .spec
        .refs
        .iter()
        .map(|r| crds::Ref {
            key: r.key.clone(),
            resource: Some(crds::ResourceRef {
                group: r.resource.group.clone(),
                version: if r.resource.version.is_empty() && r.resource.group.is_empty() {
                    "v1".into()
                } else {
                    r.resource.version.clone()
                },
                kind: r.resource.kind.clone(),
                name: non_empty(&r.resource.name),
                namespace: non_empty(&r.resource.namespace),
                name_from: None,
            }),
            collection: None,
            optional: r.optional,
            defer: r.defer,
        })
        .collect();
    Ok(crds::SynthesizerSpec {
        module,
        refs,
        limits: s.spec.exec_timeout.as_ref().map(|t| crds::Limits {
            timeout: Some(t.clone()),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The module an Eno Synthesizer names: the `enoki.dev/module` annotation (`builtin:<name>`,
/// or an OCI reference), else `spec.image`. An OCI reference is returned as written (a tag
/// is resolved by the caller).
pub(crate) fn module_of(s: &eno::Synthesizer) -> Result<crds::ModuleSource, String> {
    let named = s.annotations().get(MODULE).map(|v| v.trim());
    let reference = match named {
        Some(v) if v.starts_with("builtin:") => {
            return Ok(crds::ModuleSource {
                builtin: Some(v.trim_start_matches("builtin:").to_string()),
                ..Default::default()
            });
        }
        Some(v) if !v.is_empty() => v,
        _ => s.spec.image.trim(),
    };
    if reference.is_empty() {
        return Err(format!(
            "spec.image is empty and there is no {MODULE} annotation: enoki runs a \
             WebAssembly module, not a container"
        ));
    }
    Ok(crds::ModuleSource {
        oci: Some(reference.to_string()),
        ..Default::default()
    })
}

/// The labels and annotations of a mirror: the Eno object's (but kubectl's copy of the last
/// applied object), the mirror label and the generation.
pub(crate) fn mirror_meta(
    obj: &impl kube::Resource,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut labels = obj.labels().clone();
    labels.insert(MIRROR.into(), "true".into());
    let mut annotations: BTreeMap<String, String> = obj
        .annotations()
        .iter()
        .filter(|(k, _)| !NOT_CARRIED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    annotations.insert(
        GENERATION.into(),
        obj.meta().generation.unwrap_or_default().to_string(),
    );
    (labels, annotations)
}

/// The Eno generation a mirror synthesis observed: the recorded one when it observed the
/// mirror's current generation, else what the Eno status said for the same synthesis.
fn generation(
    observed: Option<i64>,
    mirror: (Option<i64>, Option<i64>),
    before: Option<i64>,
) -> Option<i64> {
    match (observed, mirror) {
        (Some(o), (Some(now), Some(eno))) if o == now => Some(eno),
        (Some(_), _) => before,
        (None, _) => None,
    }
}

/// The generation a mirror was written from, and its own.
pub(crate) fn generations(mirror: &impl kube::Resource) -> (Option<i64>, Option<i64>) {
    let eno = mirror
        .meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(GENERATION))
        .and_then(|g| g.parse().ok());
    (mirror.meta().generation, eno)
}

/// The generation inputs in lockstep (`eno.azure.io/synthesizer-generation`,
/// `composition-generation`) are compared with: for a mirror, the Eno object's it was
/// written from (labelled a mirror and owned by an Eno object), as Eno compares them;
/// otherwise the object's own.
pub(crate) fn lockstep_generation(obj: &impl kube::Resource) -> Option<i64> {
    let mirrored = obj
        .meta()
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(MIRROR))
        && obj
            .meta()
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.api_version.starts_with("eno.azure.io/"));
    match generations(obj) {
        (_, Some(eno)) if mirrored => Some(eno),
        (own, _) => own,
    }
}

/// Whether an input revision is one of Eno's refs (enoki adds observed outputs and its own
/// keys).
fn eno_key(r: &eno::InputRevisions) -> bool {
    !r.key.contains("enoki.dev/")
}

/// An Eno Composition's status from its mirror's. `synth` is the mirror Synthesizer's
/// generations ([`generations`]); `before` the Eno status now.
pub(crate) fn composition_status(
    mirror: &crds::Composition,
    synth: (Option<i64>, Option<i64>),
    before: Option<&eno::CompositionStatus>,
) -> eno::CompositionStatus {
    let Some(status) = mirror.status.as_ref() else {
        return before.cloned().unwrap_or_default();
    };
    let comp = generations(mirror);
    let earlier = |uuid: &str| -> Option<eno::Synthesis> {
        let b = before?;
        [
            &b.in_flight_synthesis,
            &b.current_synthesis,
            &b.previous_synthesis,
        ]
        .into_iter()
        .flatten()
        .find(|s| s.uuid == uuid)
        .cloned()
    };
    let synthesis = |s: &Option<crds::Synthesis>| {
        let s = s.as_ref()?;
        let mut out: eno::Synthesis = serde_json::to_value(s)
            .ok()
            .and_then(|v| serde_json::from_value(v).ok())?;
        let was = earlier(&s.uuid);
        out.observed_composition_generation = generation(
            s.observed_composition_generation,
            comp,
            was.as_ref().and_then(|w| w.observed_composition_generation),
        );
        out.observed_synthesizer_generation = generation(
            s.observed_synthesizer_generation,
            synth,
            was.as_ref().and_then(|w| w.observed_synthesizer_generation),
        );
        out.attempts = out.attempts.filter(|a| *a > 0);
        out.input_revisions.retain(eno_key);
        Some(out)
    };
    let mut out: eno::CompositionStatus = serde_json::to_value(status)
        .ok()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    out.input_revisions.retain(eno_key);
    out.in_flight_synthesis = synthesis(&status.in_flight_synthesis);
    out.current_synthesis = synthesis(&status.current_synthesis);
    out.previous_synthesis = synthesis(&status.previous_synthesis);
    if out.current_synthesis.is_none()
        && let Some(b) = before
    {
        // Until enoki's first synthesis, what Eno did last stays to be read.
        out.current_synthesis = b.current_synthesis.clone();
        out.previous_synthesis = b.previous_synthesis.clone();
    }
    out
}

/// An Eno Symphony's status from its mirror's (the Eno one as it is until the mirror has
/// one).
pub(crate) fn symphony_status(
    mirror: &crds::Symphony,
    before: Option<&eno::SymphonyStatus>,
) -> eno::SymphonyStatus {
    let Some(status) = mirror.status.as_ref() else {
        return before.cloned().unwrap_or_default();
    };
    let mut out: eno::SymphonyStatus = serde_json::to_value(status)
        .ok()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    out.observed_generation = generation(status.observed_generation, generations(mirror), None);
    out
}

/// The status of an Eno Composition that has no mirror: `status` word, `error`.
pub(crate) fn blocked(
    before: Option<&eno::CompositionStatus>,
    status: &str,
    error: String,
) -> eno::CompositionStatus {
    eno::CompositionStatus {
        simplified: Some(eno::SimplifiedStatus {
            status: status.into(),
            error,
        }),
        ..before.cloned().unwrap_or_default()
    }
}

/// JSON of a value (`null` when it cannot be written).
pub(crate) fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests;
