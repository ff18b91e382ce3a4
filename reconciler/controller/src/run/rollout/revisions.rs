//! SynthesizerRevisions: one per change of what a Synthesizer synthesizes (its spec without
//! `rollout`, and its module's digest), numbered 1, 2, …, owned by the Synthesizer (the
//! garbage collector deletes them with it) and labelled with its name. Never updated; the
//! oldest are deleted past the history limit unless a Composition still runs them.

use std::collections::BTreeSet;

use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};

use crds::{
    RevisionRef, Synthesizer, SynthesizerRevision, SynthesizerRevisionSpec, SynthesizerSpec,
};

/// The label naming a revision's Synthesizer.
pub(crate) const SYNTHESIZER_LABEL: &str = "enoki.dev/synthesizer";

/// The spec a revision records: the Synthesizer's without `rollout`.
pub(crate) fn template_of(spec: &SynthesizerSpec) -> SynthesizerSpec {
    SynthesizerSpec {
        rollout: None,
        ..spec.clone()
    }
}

/// `sha256:<hex>` of `template` as JSON.
pub(crate) fn template_digest(template: &SynthesizerSpec) -> String {
    let json = serde_json::to_vec(template).unwrap_or_default();
    format!("sha256:{}", hex::encode(Sha256::digest(json)))
}

/// The key a module is kept under for revisions (in memory, by digest): the Synthesizer's
/// UID, its spec without `rollout` and its module's digest — a chart's digest leaves out the
/// values, which the loaded module carries, so the digest alone is not enough.
pub(crate) fn pin_key(synth: &Synthesizer) -> String {
    let digest = synth
        .status
        .as_ref()
        .and_then(|s| s.module_digest.as_deref())
        .unwrap_or_default();
    format!(
        "{}/{}/{digest}",
        synth.uid().unwrap_or_default(),
        template_digest(&template_of(&synth.spec))
    )
}

/// A revision's name: `<synthesizer>-r<number>` (the Synthesizer's name shortened to fit; the
/// suffix keeps two Synthesizers' revisions apart, `web` 12 and `web-1` 2).
fn name_of(synthesizer: &str, number: i64) -> String {
    let suffix = format!("-r{number}");
    let room = 253 - suffix.len();
    let base: String = synthesizer.chars().take(room).collect();
    format!("{}{suffix}", base.trim_end_matches(['-', '.']))
}

/// What a Composition needs of a revision object.
pub(crate) fn ref_of(rev: &SynthesizerRevision) -> RevisionRef {
    RevisionRef {
        number: rev.spec.revision,
        name: rev.name_any(),
        generation: rev.spec.generation,
        module_digest: rev.spec.module_digest.clone(),
        template_digest: rev.spec.template_digest.clone(),
    }
}

/// The label value naming `synthesizer` (a label value is at most 63 characters: a longer
/// name is hashed; [`list`] checks `spec.synthesizer`).
fn label_value(synthesizer: &str) -> String {
    if synthesizer.len() <= 63 {
        return synthesizer.to_string();
    }
    let h = hex::encode(Sha256::digest(synthesizer.as_bytes()));
    format!("sha256-{}", &h[..32])
}

/// The revisions of `synth` (this object: owned by its UID — not those of a deleted
/// Synthesizer of the same name the garbage collector has not removed yet), oldest first.
///
/// # Errors
/// The list's error.
pub(crate) async fn list(
    client: &kube::Client,
    synth: &Synthesizer,
) -> Result<Vec<SynthesizerRevision>, kube::Error> {
    let name = synth.name_any();
    let uid = synth.uid();
    let api: Api<SynthesizerRevision> = Api::all(client.clone());
    let lp = ListParams::default().labels(&format!("{SYNTHESIZER_LABEL}={}", label_value(&name)));
    let mut revs: Vec<SynthesizerRevision> = api
        .list(&lp)
        .await?
        .items
        .into_iter()
        .filter(|r| r.spec.synthesizer == name)
        .filter(|r| {
            r.owner_references()
                .iter()
                .any(|o| Some(&o.uid) == uid.as_ref())
        })
        .collect();
    revs.sort_by_key(|r| r.spec.revision);
    Ok(revs)
}

/// The revision of what `synth` synthesizes now (its generation's spec and `module_digest`):
/// one newer than `newest` with the same template and digest (left by a pass that did not get
/// to record it), else a new one numbered after every existing one.
///
/// # Errors
/// The list's or the create's error.
pub(crate) async fn create(
    client: &kube::Client,
    synth: &Synthesizer,
    module_digest: &str,
    newest: i64,
) -> Result<RevisionRef, kube::Error> {
    let name = synth.name_any();
    let template = template_of(&synth.spec);
    let digest = template_digest(&template);
    let existing = list(client, synth).await?;
    if let Some(r) = existing.iter().rev().find(|r| {
        r.spec.revision > newest
            && r.spec.template_digest == digest
            && r.spec.module_digest == module_digest
    }) {
        return Ok(ref_of(r));
    }
    let number = existing
        .iter()
        .map(|r| r.spec.revision)
        .chain([newest])
        .max()
        .unwrap_or(0)
        + 1;
    let mut rev = SynthesizerRevision::new(
        &name_of(&name, number),
        SynthesizerRevisionSpec {
            synthesizer: name.clone(),
            revision: number,
            generation: synth.metadata.generation.unwrap_or_default(),
            module_digest: module_digest.to_string(),
            template_digest: digest,
            template,
        },
    );
    rev.metadata.labels = Some([(SYNTHESIZER_LABEL.to_string(), label_value(&name))].into());
    rev.metadata.owner_references = synth.controller_owner_ref(&()).map(|o| vec![o]);
    let api: Api<SynthesizerRevision> = Api::all(client.clone());
    let made = api.create(&PostParams::default(), &rev).await?;
    Ok(ref_of(&made))
}

/// Deletes the oldest revisions past `limit`, never one in `in_use`. Failures are logged (the
/// next pass tries again).
pub(crate) async fn prune(
    client: &kube::Client,
    synth: &Synthesizer,
    limit: usize,
    in_use: &BTreeSet<i64>,
) {
    let revs = match list(client, synth).await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(error = %e, "cannot list SynthesizerRevisions");
            return;
        }
    };
    let api: Api<SynthesizerRevision> = Api::all(client.clone());
    let excess = revs.len().saturating_sub(limit);
    for r in revs
        .iter()
        .filter(|r| !in_use.contains(&r.spec.revision))
        .take(excess)
    {
        if let Err(e) = api.delete(&r.name_any(), &DeleteParams::default()).await {
            tracing::debug!(error = %e, revision = %r.name_any(), "cannot delete a revision");
        }
    }
}

/// `synth` as it was at `rev`: its spec (the live `rollout` kept), generation and module
/// digest, marked with the revision's number.
///
/// # Errors
/// The revision's template does not match its recorded digest, or it is another
/// Synthesizer's.
pub(crate) fn synthesizer_at(
    live: &Synthesizer,
    rev: &SynthesizerRevision,
) -> Result<Synthesizer, String> {
    if rev.spec.synthesizer != live.name_any() {
        return Err(format!(
            "SynthesizerRevision {} belongs to Synthesizer {:?}",
            rev.name_any(),
            rev.spec.synthesizer
        ));
    }
    if template_digest(&rev.spec.template) != rev.spec.template_digest {
        return Err(format!(
            "SynthesizerRevision {}: spec.template does not match spec.templateDigest (it was \
             changed after it was written)",
            rev.name_any()
        ));
    }
    let mut s = live.clone();
    s.metadata.generation = Some(rev.spec.generation);
    s.spec = rev.spec.template.clone();
    s.spec.rollout.clone_from(&live.spec.rollout);
    let status = s.status.get_or_insert_default();
    status.module_digest = Some(rev.spec.module_digest.clone());
    super::order::mark(&mut s, rev.spec.revision);
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_and_templates_leave_out_the_rollout() {
        assert_eq!(name_of("web", 3), "web-r3");
        assert_ne!(name_of("web", 12), name_of("web-1", 2));
        assert_eq!(label_value("web"), "web");
        assert!(label_value(&"b".repeat(64)).len() <= 63);
        let long = "a".repeat(300);
        assert!(name_of(&long, 12).len() <= 253);
        let mut spec = SynthesizerSpec::default();
        let plain = template_digest(&template_of(&spec));
        spec.rollout = Some(crds::Rollout::default());
        assert_eq!(template_digest(&template_of(&spec)), plain);
        spec.env = vec![crds::EnvVar {
            name: "A".into(),
            value: "1".into(),
        }];
        assert_ne!(template_digest(&template_of(&spec)), plain);
    }
}
