//! Size limits on what a synthesis is given: the Composition's and Symphony's spec, the
//! synthesis environment, and a Synthesizer's `spec.limits`.

use super::*;

/// Largest total of a Composition's `synthesisEnv` names and values, in bytes: far below
/// etcd's object size limit, so the status enoki adds always fits beside the spec.
pub const MAX_SYNTHESIS_ENV_BYTES: usize = 64 * 1024;

/// Why a Composition's `synthesisEnv` is refused (`None`: accepted). Pure.
pub fn synthesis_env_too_large(env: &[crds::EnvVar]) -> Option<String> {
    let total: usize = env.iter().map(|e| e.name.len() + e.value.len()).sum();
    (total > MAX_SYNTHESIS_ENV_BYTES).then(|| {
        format!(
            "spec.synthesisEnv holds {total} bytes of names and values; at most \
             {MAX_SYNTHESIS_ENV_BYTES} are accepted"
        )
    })
}

/// Largest serialized `spec` of a Composition or a Symphony enoki acts on, in bytes. A spec
/// is references and small values; one padded towards etcd's object limit would make every
/// status write fail (and a Symphony would copy it into every Composition it generates).
pub const MAX_SPEC_BYTES: usize = 256 * 1024;

/// Most variations one Symphony may have (each becomes a Composition).
pub const MAX_SYMPHONY_VARIATIONS: usize = 256;

/// Marks the controller's cached copy of a Composition refused for its size, whose spec the
/// cache dropped; its value is the refusal. Never written to the API server (one the object
/// itself carries is not believed).
pub const SPEC_DROPPED: &str = "enoki.dev/cached-spec-dropped";

/// Cuts the cache's copy of a Composition refused for its size down to its metadata (of its
/// labels, enoki's and Eno's only), status, Synthesizer reference, service account, `suspend` and
/// `dependsOn` (what its deletion reads; each kept only when small): the caches hold at most [`MAX_SPEC_BYTES`] of any spec, however
/// large a tenant writes one (up to etcd's 1.5 MiB). A refused Composition has no pass, so
/// nothing reads the rest; its deletion reads its status and annotations, which stay. Pure.
pub fn drop_refused_spec(comp: &mut crds::Composition) {
    if let Some(a) = comp.metadata.annotations.as_mut() {
        a.remove(SPEC_DROPPED);
    }
    if let Some(why) = composition_too_large(comp) {
        // What its deletion reads stays: the account it acts as and what depends on what
        // (each kept only when small; a padded one is dropped).
        let account = comp
            .spec
            .service_account_name
            .take()
            .filter(|s| s.len() <= 253);
        let depends_on = std::mem::take(&mut comp.spec.depends_on);
        let small = serde_json::to_vec(&depends_on).is_ok_and(|v| v.len() <= 16 * 1024);
        let mut synthesizer = std::mem::take(&mut comp.spec.synthesizer);
        if synthesizer.name.len() > 253 {
            synthesizer = crds::SynthesizerRef::default();
        }
        comp.spec = crds::CompositionSpec {
            synthesizer,
            service_account_name: account,
            depends_on: if small { depends_on } else { Vec::new() },
            suspend: comp.spec.suspend,
            ..crds::CompositionSpec::default()
        };
        // Labels, which Kubernetes does not bound in total: enoki's and Eno's own stay.
        if let Some(labels) = comp.metadata.labels.as_mut() {
            labels.retain(|k, _| k.starts_with("enoki.dev/") || k.starts_with("eno.azure.io/"));
        }
        comp.metadata
            .annotations
            .get_or_insert_default()
            .insert(SPEC_DROPPED.to_string(), why);
    }
}

/// Why a Composition is refused for its size (`None`: accepted): its `synthesisEnv`, then its
/// spec together with the metadata a tenant writes (labels, annotations, finalizers, owner
/// references; not `managedFields`); a cached copy whose spec was dropped says why. Pure.
pub fn composition_too_large(comp: &crds::Composition) -> Option<String> {
    if let Some(why) = comp
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SPEC_DROPPED))
    {
        return Some(why.clone());
    }
    synthesis_env_too_large(&comp.spec.synthesis_env).or_else(|| {
        let mut meta = comp.metadata.clone();
        meta.managed_fields = None;
        spec_too_large("the spec with its metadata", &(&meta, &comp.spec))
    })
}

/// Why a Symphony's spec is refused for its size (`None`: accepted). Pure.
pub fn symphony_spec_too_large(spec: &crds::SymphonySpec) -> Option<String> {
    let n = spec.variations.len();
    if n > MAX_SYMPHONY_VARIATIONS {
        return Some(format!(
            "spec.variations holds {n} variations; at most {MAX_SYMPHONY_VARIATIONS} are accepted"
        ));
    }
    synthesis_env_too_large(&spec.synthesis_env).or_else(|| spec_too_large("spec", spec))
}

/// Why a Symphony is refused for what it would make the controller write (`None`:
/// accepted): its variations times its serialized spec (what each generated Composition
/// carries at most) above `budget` bytes (`--max-symphony-bytes`). Pure.
pub fn symphony_over_budget(spec: &crds::SymphonySpec, budget: usize) -> Option<String> {
    let n = spec.variations.len();
    let size = serde_json::to_vec(spec).map_or(0, |v| v.len());
    let total = n.saturating_mul(size);
    (budget > 0 && total > budget).then(|| {
        format!(
            "{n} variations × {size} bytes of spec = {total} bytes of Compositions; at most \
             {budget} are accepted (--max-symphony-bytes)"
        )
    })
}

pub(super) fn spec_too_large(what: &str, spec: &impl serde::Serialize) -> Option<String> {
    let size = serde_json::to_vec(spec).map_or(0, |v| v.len());
    (size > MAX_SPEC_BYTES).then(|| {
        format!("{what} is {size} bytes serialized; at most {MAX_SPEC_BYTES} are accepted")
    })
}

/// Parses a Kubernetes quantity such as `256Mi`, `1G` or `1048576` into bytes.
///
/// # Errors
/// A message when the text is not a quantity.
pub fn parse_quantity(text: &str) -> Result<usize, String> {
    let q = enoki_sdk::quantity::Quantity::parse(text)?;
    if !q.is_whole() {
        return Err(format!(
            "{text:?} is not a whole number of bytes (`m` is milli: did you mean `M` or `Mi`?)"
        ));
    }
    q.whole_units()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| format!("{text:?} is not a size (negative or too large)"))
}

/// Turns a Synthesizer's `spec.limits` into run limits (defaults 10s, 256Mi, 16Mi).
///
/// # Errors
/// A message naming the field that does not parse.
pub fn run_limits(limits: Option<&crds::Limits>) -> Result<RunLimits, String> {
    let mut out = RunLimits::default();
    if let Some(l) = limits {
        if let Some(t) = &l.timeout {
            out.deadline = humantime::parse_duration(t)
                .map_err(|e| format!("spec.limits.timeout {t:?}: {e}"))?;
        }
        if let Some(m) = &l.memory {
            out.max_memory_bytes =
                parse_quantity(m).map_err(|e| format!("spec.limits.memory: {e}"))?;
        }
        if let Some(o) = &l.output {
            out.max_output_bytes =
                parse_quantity(o).map_err(|e| format!("spec.limits.output: {e}"))?;
        }
    }
    Ok(out)
}

/// Why a Composition's `spec.serviceAccountName` is refused (`None`: accepted, or unset): it
/// must be a DNS-1123 subdomain, as every ServiceAccount name is. Pure.
pub fn invalid_service_account_name(name: Option<&str>) -> Option<String> {
    let name = name.filter(|n| !n.is_empty())?;
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    (name.len() > 253 || !name.split('.').all(label_ok)).then(|| {
        format!(
            "spec.serviceAccountName {:?} is not a valid ServiceAccount name (a DNS-1123 \
             subdomain of at most 253 characters)",
            name.chars().take(80).collect::<String>()
        )
    })
}
