//! What a Composition's pass synthesizes with: the revision its Synthesizer's rollout gives it
//! (`status.rollout`; the live Synthesizer when that is its current generation, else the
//! Synthesizer as its SynthesizerRevision recorded it), and that revision's module, loaded by
//! the digest the revision pinned.

use std::sync::Arc;

use kube::ResourceExt;
use kube::api::ApiResource;
use kube::core::GroupVersionKind;
use tokio::time::Instant;

use super::super::context::{Context, ModuleEntry, Reads};
use super::super::error::Error;
use super::super::module::ModuleError;
use super::super::rollout::{self as roll, revisions};
use super::observe;
use crate::synthesis::Module;
use crds::{Composition, RolloutStrategy, Synthesizer, SynthesizerRevision};
use reconciler_core::rollout;

/// The Synthesizer a pass synthesizes with.
pub(crate) struct Effective {
    /// The live Synthesizer, or the one a revision recorded (marked with its number).
    pub synth: Synthesizer,
    /// A Synthesizer change alone waits for the rollout cooldown: Eno's `cooldown` strategy
    /// (undo included), no rollout recorded, the first revision, or a move forward to the
    /// stable revision.
    pub paced: bool,
    /// `synth` is a revision other than the live generation: its module is loaded by digest.
    pub pinned: bool,
    /// Why the revision cannot be used (missing, altered): no synthesis, the current one is
    /// still applied.
    pub problem: Option<String>,
}

impl Effective {
    fn live(synth: Synthesizer, paced: bool) -> Effective {
        Effective {
            synth,
            paced,
            pinned: false,
            problem: None,
        }
    }
}

/// Whether a Synthesizer change alone moving a Composition that runs `runs` to revision
/// `target` waits for the rollout cooldown: under Eno's `cooldown` strategy, before a stable
/// revision exists, and when it moves forward to the stable revision (one a cooldown rollout
/// left half-way when the strategy changed, which no wave has proven, or one this Composition
/// failed). Going back to it (a rollback) and a progressive wave are not paced.
fn paced(ro: &crds::RolloutStatus, target: i64, runs: Option<i64>) -> bool {
    let forward_to_stable = ro.stable.as_ref().is_some_and(|s| {
        target == s.number && target != ro.revision.number && runs.is_none_or(|r| r < s.number)
    });
    ro.strategy == RolloutStrategy::Cooldown || ro.stable.is_none() || forward_to_stable
}

/// The Synthesizer `comp` runs now, as its rollout says. Without rollouts (`--rollouts`
/// off, or none recorded): the live Synthesizer, as Eno.
///
/// # Errors
/// Reading the SynthesizerRevision failed.
pub(crate) async fn effective(
    r: Reads<'_>,
    rollouts: bool,
    comp: &Composition,
    mut live: Synthesizer,
) -> Result<Effective, Error> {
    let ro = live.status.as_ref().and_then(|s| s.rollout.clone());
    let Some(ro) = ro.filter(|_| rollouts) else {
        roll::unmark(&mut live);
        return Ok(Effective::live(live, true));
    };
    let runs = comp
        .status
        .as_ref()
        .and_then(|s| s.current_synthesis.as_ref())
        .and_then(|s| roll::runs(&ro, s));
    let key = roll::order_key(&comp.uid().unwrap_or_default(), ro.revision.number);
    let target = rollout::target(&ro, key, roll::canary_selects(&live, comp), runs).clone();
    let cooldown = ro.strategy == RolloutStrategy::Cooldown;
    let paced = paced(&ro, target.number, runs);
    // Eno's cooldown: the live Synthesizer, whether or not its revision is recorded yet.
    if cooldown && target.number == ro.revision.number && !is_live(&live, &target) {
        roll::unmark(&mut live);
        return Ok(Effective::live(live, paced));
    }
    if is_live(&live, &target) {
        // Its spec without `rollout` and its module: a `rollout`-only edit changes nothing.
        let pinned = live.metadata.generation != Some(target.generation);
        live.metadata.generation = Some(target.generation);
        roll::mark(&mut live, target.number);
        return Ok(Effective {
            synth: live,
            paced,
            pinned,
            problem: None,
        });
    }
    let rebuilt = match read_revision(r, comp, &target.name).await? {
        Some(rev) => revisions::synthesizer_at(&live, &rev),
        None => Err(format!(
            "SynthesizerRevision {} (revision {} of Synthesizer {}, which its rollout gives \
             this Composition) does not exist",
            target.name,
            target.number,
            live.name_any()
        )),
    };
    Ok(match rebuilt {
        Ok(synth) => Effective {
            synth,
            paced,
            pinned: true,
            problem: None,
        },
        Err(problem) => Effective {
            problem: Some(problem),
            ..Effective::live(live, paced)
        },
    })
}

/// Whether the live Synthesizer synthesizes what revision `target` does (same spec without
/// `rollout`, same module).
fn is_live(live: &Synthesizer, target: &crds::RevisionRef) -> bool {
    let digest = live
        .status
        .as_ref()
        .and_then(|s| s.module_digest.as_deref());
    digest == Some(target.module_digest.as_str())
        && revisions::template_digest(&revisions::template_of(&live.spec)) == target.template_digest
}

/// The SynthesizerRevision `name` (through the input cache; tracked, so a change wakes `comp`).
async fn read_revision(
    r: Reads<'_>,
    comp: &Composition,
    name: &str,
) -> Result<Option<SynthesizerRevision>, Error> {
    let gvk = GroupVersionKind::gvk(crds::GROUP, crds::VERSION, KIND);
    let ar = ApiResource::erase::<SynthesizerRevision>(&());
    let got = observe::read(r, comp, (&gvk, &ar, false), "", name)
        .await
        .map_err(|source| Error::ReadSynthesizer {
            name: name.to_string(),
            source,
        })?;
    Ok(got.and_then(|o| o.try_parse::<SynthesizerRevision>().ok()))
}

/// The module of [`effective`]'s Synthesizer: the live one's (its module cache), a revision's
/// (by digest, [`load`]), or why the revision cannot be used.
pub(crate) async fn module_of(ctx: &Arc<Context>, eff: &Effective) -> Result<Module, ModuleError> {
    match &eff.problem {
        Some(problem) => Err(ModuleError::Invalid(problem.clone())),
        None if eff.pinned => load(ctx, &eff.synth).await,
        None => super::super::synthesizer::load_module(ctx, &eff.synth).await,
    }
}

/// The SynthesizerRevision kind.
pub(crate) const KIND: &str = crds::names::kinds::SYNTHESIZER_REVISION;

/// The module of a Synthesizer rebuilt from a revision: kept per revision (every module the
/// Synthesizer controller loaded is), else fetched from the revision's source (OCI and URL sources are
/// pinned by digest already) and refused unless it has the pinned digest.
pub(crate) async fn load(ctx: &Arc<Context>, synth: &Synthesizer) -> Result<Module, ModuleError> {
    let digest = synth
        .status
        .as_ref()
        .and_then(|s| s.module_digest.clone())
        .unwrap_or_default();
    let key = revisions::pin_key(synth);
    let mut failures = 0;
    match ctx.modules.pinned(&key) {
        Some(ModuleEntry::Ready(_, m)) => return Ok(m),
        Some(ModuleEntry::Failed {
            error,
            retry_at,
            failures: n,
            ..
        }) => {
            if Instant::now() < retry_at {
                return Err(error);
            }
            failures = n;
        }
        None => {}
    }
    let (ctx, synth) = (ctx.clone(), synth.clone());
    super::super::synthesizer::one_flight(key.clone(), move || async move {
        let result = fetch(&ctx, &synth, &digest).await;
        let entry = match &result {
            Ok(m) => ModuleEntry::Ready((None, None), m.clone()),
            Err(e) => ModuleEntry::Failed {
                generation: (None, None),
                error: e.clone(),
                retry_at: Instant::now() + super::super::synthesizer::module_backoff(e, failures),
                failures: failures + 1,
            },
        };
        ctx.modules.keep_pinned(key, entry);
        result
    })
    .await
}

async fn fetch(ctx: &Context, synth: &Synthesizer, digest: &str) -> Result<Module, ModuleError> {
    let m = super::super::synthesizer::fetch_module(
        &ctx.clusters,
        ctx.modules.host(),
        &ctx.opts,
        synth,
    )
    .await?;
    if m.digest() == digest {
        return Ok(m);
    }
    Err(ModuleError::Invalid(format!(
        "revision {} of Synthesizer {} pinned module {digest}, but its source now holds {} \
         (a configMap source or a built-in changed); the revision cannot be synthesized again",
        roll::revision_of(synth).unwrap_or_default(),
        synth.name_any(),
        m.digest()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(number: i64) -> crds::RevisionRef {
        crds::RevisionRef {
            number,
            ..Default::default()
        }
    }

    /// A progressive rollout of revision 3 started while a cooldown rollout of revision 2 was
    /// half-way (revision 2 stable): a Composition still on 1 moves forward to 2 at the
    /// cooldown's pace, one on 3 goes back to 2 at once, a wave's move to 3 is not paced.
    #[test]
    fn moving_forward_to_an_unproven_stable_revision_is_paced() {
        let ro = crds::RolloutStatus {
            revision: at(3),
            stable: Some(at(2)),
            strategy: RolloutStrategy::Progressive,
            ..Default::default()
        };
        assert!(paced(&ro, 2, Some(1)));
        assert!(!paced(&ro, 2, Some(3)), "a rollback");
        assert!(!paced(&ro, 3, Some(2)), "a wave");
        assert!(!paced(&ro, 2, Some(2)));
        let cooldown = crds::RolloutStatus {
            strategy: RolloutStrategy::Cooldown,
            ..ro.clone()
        };
        assert!(paced(&cooldown, 3, Some(2)));
        let first = crds::RolloutStatus { stable: None, ..ro };
        assert!(paced(&first, 3, Some(2)));
    }
}
