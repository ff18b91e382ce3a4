//! A Synthesizer's rollout: which revision each Composition runs, and how the rollout moves
//! from wave to wave. Pure: the controller passes in what it observed (each Composition's
//! place in the rollout order, whether the canary selector picks it, the revision it runs,
//! whether it is Ready or failed) and writes back the status this returns.
//!
//! - A Composition runs the rolling revision when the rollout *admits* it (the canary
//!   selector picks it, or its place in the order is at or below the recorded threshold), or
//!   once the rollout is complete; otherwise the stable revision. After a rollback or an undo
//!   every Composition runs the stable revision.
//! - The order is a hash of the Composition's UID and the revision (the caller's), so each
//!   rollout picks other canaries, a restart admits exactly the recorded set, and a
//!   Composition created mid-rollout takes the revision its place gives it.
//! - `progressive`: wave 1 is the canary; each later wave doubles the Compositions admitted
//!   (or follows `steps`). A wave is held until every admitted Composition runs the revision
//!   and is Ready, then for the bake time; when more than `maxFailures` of them failed to
//!   synthesize, or are not Ready at the wave's deadline, the rollout halts.
//! - `cooldown`: every Composition is admitted at once; the controller's cooldown paces them
//!   (Eno). No health gate; complete when every Composition runs the revision.

use std::time::Duration;

use crds::names::rollout as phase;
use crds::{OnFailure, RevisionCount, RevisionRef, RolloutStatus, RolloutStrategy};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// A threshold that admits every Composition.
pub const ALL: &str = "ffffffffffffffff";

/// One Composition of the Synthesizer, as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Member {
    /// Its place in this rollout's order.
    pub key: u64,
    /// The canary selector picks it.
    pub canary: bool,
    /// The revision its current synthesis ran (none: not synthesized yet, or unknown).
    pub runs: Option<i64>,
    /// It is Ready now.
    pub ready: bool,
    /// Its last synthesis of the rolling revision failed.
    pub failed: bool,
    /// It was Ready on the stable revision (before it took the rolling one): only these count
    /// in a wave's gate, so a Composition that was broken before (or a tenant's that never
    /// becomes Ready) neither halts nor holds a rollout.
    pub gated: bool,
    /// When it was created: one created after its wave started is not held to that wave's
    /// deadline.
    pub created: Option<Timestamp>,
}

/// The Synthesizer's rollout settings, defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// Cooldown or progressive.
    pub strategy: RolloutStrategy,
    /// Whether a canary selector is set (then the canary is what it picks).
    pub selector: bool,
    /// Canary size without a selector: a count...
    pub canary_count: Option<i32>,
    /// ...or a percentage.
    pub canary_percent: Option<i32>,
    /// Cumulative percentages of later waves; empty: doubling.
    pub steps: Vec<i32>,
    /// Failures a wave may have.
    pub max_failures: i32,
    /// How long a wave has to become Ready.
    pub deadline: Duration,
    /// How long a Ready wave is held.
    pub bake: Duration,
    /// What a halt does.
    pub on_failure: OnFailure,
}

/// What the controller was asked to do through the Synthesizer's annotations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Asked {
    /// The paused annotation is set.
    pub paused: bool,
    /// The undo annotation names this revision number.
    pub undo: Option<i64>,
}

/// Whether the rollout `st` admits a Composition at `key` (picked by the canary selector or
/// not): the canary once the first wave started (unless that wave was rolled back), and every
/// place at or below the threshold.
pub fn admitted(st: &RolloutStatus, key: u64, canary: bool) -> bool {
    if st.phase == phase::COMPLETE || st.stable.is_none() {
        return true;
    }
    if canary && st.wave >= 1 && !(st.rolled_back && st.wave == 1) {
        return true;
    }
    st.threshold
        .as_deref()
        .and_then(|t| u64::from_str_radix(t, 16).ok())
        .is_some_and(|t| key <= t)
}

/// Whether a Composition at `key` is in the current wave: admitted now, and not by a wave
/// that already passed (the canary once wave 2 started, places at or below the last passed
/// threshold).
fn in_wave(st: &RolloutStatus, key: u64, canary: bool) -> bool {
    let earlier = st.wave >= 2
        && (canary
            || st
                .passed_threshold
                .as_deref()
                .and_then(|t| u64::from_str_radix(t, 16).ok())
                .is_some_and(|t| key <= t));
    admitted(st, key, canary) && !earlier
}

/// The revision a Composition at `key` runs, given the revision it runs now (`runs`): the
/// rolling one when admitted; while paused or halted only for those already on it (no
/// Composition takes a revision a halted rollout stopped, nor moves while paused); after an
/// undo, the stable one for all.
pub fn target(st: &RolloutStatus, key: u64, canary: bool, runs: Option<i64>) -> &RevisionRef {
    let Some(stable) = &st.stable else {
        return &st.revision;
    };
    let on_it = runs == Some(st.revision.number);
    let rolling = match st.phase.as_str() {
        phase::COMPLETE => true,
        phase::UNDONE => false,
        phase::PAUSED | phase::HALTED => on_it && admitted(st, key, canary),
        _ => admitted(st, key, canary),
    };
    if rolling { &st.revision } else { stable }
}

/// A new rollout of `revision` (wave 0: the next [`step`] admits the first wave). The stable
/// revision is the rolling one of `before` when that completed or rolled out under the
/// cooldown (not undone), else `before`'s stable one (a progressive revision that did not
/// complete is never stable).
pub fn start(
    before: Option<&RolloutStatus>,
    revision: RevisionRef,
    strategy: RolloutStrategy,
) -> RolloutStatus {
    // A cooldown rollout is Eno's: what it reached is not undone by the next one.
    let stable = before.and_then(|b| {
        let reached = b.phase == phase::COMPLETE
            || (b.strategy == RolloutStrategy::Cooldown && b.phase != phase::UNDONE);
        if reached {
            Some(b.revision.clone())
        } else {
            b.stable.clone()
        }
    });
    RolloutStatus {
        revision,
        stable,
        strategy,
        phase: phase::PROGRESSING.into(),
        ..RolloutStatus::default()
    }
}

/// The status after looking at `members` at `now`: counts, then undo, pause, the wave's gate
/// and the next wave.
pub fn step(
    policy: &Policy,
    before: &RolloutStatus,
    members: &[Member],
    asked: Asked,
    now: Timestamp,
) -> RolloutStatus {
    let mut st = before.clone();
    if asked.undo == Some(st.revision.number) && st.phase != phase::UNDONE && st.stable.is_some() {
        st.phase = phase::UNDONE.into();
        st.reason = Some("Undone".into());
        st.message = Some(format!(
            "revision {} undone: every Composition goes back to the stable revision",
            st.revision.number
        ));
    }
    if st.stable.is_none() && st.phase != phase::COMPLETE {
        // The first revision: nothing to roll out from.
        complete(&mut st);
    }
    let moving = st.phase == phase::PROGRESSING || st.phase == phase::PAUSED;
    let admitting = st.wave == 0 && st.phase == phase::PROGRESSING && !asked.paused;
    if admitting {
        admit_wave(policy, &mut st, members, now);
    }
    let halted = st.phase == phase::HALTED;
    count(&mut st, members, policy, now);
    if halted {
        // The counts of the wave that halted it stay as they were.
        st.failed = before.failed;
    }
    if moving && asked.paused {
        st.phase = phase::PAUSED.into();
        st.reason = Some("Paused".into());
        st.message = Some(format!(
            "paused by the {} annotation",
            crds::names::rollout::PAUSED_ANNOTATION
        ));
        return st;
    }
    if st.phase == phase::PAUSED {
        // Resumed: the wave's deadline runs from now.
        st.phase = phase::PROGRESSING.into();
        st.wave_started = Some(Time(now));
        st.reason = None;
        st.message = None;
    }
    // A wave admitted in this step is judged from the next one on: at most one wave a step.
    if st.phase == phase::PROGRESSING && !admitting {
        gate(policy, &mut st, members, now);
    }
    st
}

fn halt(st: &mut RolloutStatus, reason: &str, message: &str) {
    st.phase = phase::HALTED.into();
    st.reason = Some(reason.into());
    st.message = Some(message.into());
}

fn complete(st: &mut RolloutStatus) {
    st.phase = phase::COMPLETE.into();
    st.threshold = Some(ALL.into());
    st.reason = None;
    st.message = Some(format!(
        "every Composition runs revision {}",
        st.revision.number
    ));
}

/// The wave's verdict: halt when more of the current wave's gated Compositions than allowed
/// failed (or are not Ready at the deadline), else the next wave (or completion) once every
/// gated one is Ready — or failed within the allowance — and the wave has baked. A wave with
/// no gated Composition passes once its Compositions ran the revision (or failed). Under the
/// cooldown: no gate; complete once every Composition ran the revision or tried it and failed.
fn gate(policy: &Policy, st: &mut RolloutStatus, members: &[Member], now: Timestamp) {
    let on_it = |m: &Member| m.runs == Some(st.revision.number);
    if st.strategy == RolloutStrategy::Cooldown {
        if members.iter().all(|m| on_it(m) || m.failed) {
            complete(st);
        }
        return;
    }
    let wave: Vec<&Member> = members
        .iter()
        .filter(|m| in_wave(st, m.key, m.canary))
        .collect();
    let gated: Vec<&Member> = wave.iter().copied().filter(|m| m.gated).collect();
    let failed = gated.iter().filter(|m| failing(policy, st, m, now)).count();
    if failed > usize::try_from(policy.max_failures).unwrap_or(0) {
        halt_wave(
            policy,
            st,
            failed,
            gated.len(),
            !gated.iter().any(|m| m.failed),
        );
        return;
    }
    let settled = if gated.is_empty() {
        wave.iter().all(|m| on_it(m) || m.failed)
    } else {
        gated
            .iter()
            .all(|m| (on_it(m) && m.ready) || failing(policy, st, m, now))
    };
    if !settled {
        st.wave_ready = None;
        return;
    }
    let ready_at = st.wave_ready.get_or_insert(Time(now)).clone();
    if !past(Some(&ready_at), policy.bake, now) && !policy.bake.is_zero() {
        return;
    }
    if members.iter().all(|m| admitted(st, m.key, m.canary)) {
        complete(st);
    } else {
        st.passed_threshold.clone_from(&st.threshold);
        admit_wave(policy, st, members, now);
    }
}

/// Whether `m` of the current wave counts as failed: its synthesis of the revision failed, or
/// it is not on it and Ready at the wave's deadline (unless it was created after the wave
/// started).
fn failing(policy: &Policy, st: &RolloutStatus, m: &Member, now: Timestamp) -> bool {
    let started = st.wave_started.as_ref();
    let fresh = matches!((&m.created, started), (Some(c), Some(s)) if *c > s.0);
    let late = !fresh
        && st.strategy == RolloutStrategy::Progressive
        && st.phase == phase::PROGRESSING
        && past(started, policy.deadline, now);
    m.failed || (late && !(m.runs == Some(st.revision.number) && m.ready))
}

/// Halts the rollout at its wave; with `rollback`, the wave goes back (the threshold returns
/// to the last wave that passed).
fn halt_wave(policy: &Policy, st: &mut RolloutStatus, failed: usize, of: usize, late: bool) {
    let (reason, why) = if late {
        (
            "WaveDeadline",
            format!(
                "not Ready within {}",
                humantime::format_duration(policy.deadline)
            ),
        )
    } else {
        ("WaveFailed", "failed to synthesize".to_string())
    };
    let rollback = policy.on_failure == OnFailure::Rollback;
    let what = format!(
        "wave {}: {failed} of {of} Compositions {why} (at most {} may); {}",
        st.wave,
        policy.max_failures,
        if rollback {
            "the wave goes back to the stable revision"
        } else {
            "the wave keeps the revision, the rest the stable one"
        }
    );
    halt(st, reason, &what);
    if rollback {
        st.rolled_back = true;
        st.threshold.clone_from(&st.passed_threshold);
    }
}

/// Whether `since + d` has passed at `now`.
fn past(since: Option<&Time>, d: Duration, now: Timestamp) -> bool {
    since.is_some_and(|t| {
        let elapsed = now.duration_since(t.0);
        elapsed >= k8s_openapi::jiff::SignedDuration::try_from(d).unwrap_or_default()
    })
}

/// Admits the next wave: its cumulative size, then the threshold that admits that many.
fn admit_wave(policy: &Policy, st: &mut RolloutStatus, members: &[Member], now: Timestamp) {
    st.wave += 1;
    st.wave_started = Some(Time(now));
    st.wave_ready = None;
    if st.strategy == RolloutStrategy::Cooldown {
        st.threshold = Some(ALL.into());
        st.admitted = i32::try_from(members.len()).unwrap_or(i32::MAX);
        st.message = Some("every Composition, one per --rollout-cooldown".into());
        return;
    }
    let picked = if policy.selector {
        members.iter().filter(|m| m.canary).count()
    } else {
        0
    };
    let now_in = members
        .iter()
        .filter(|m| st.wave > 1 && admitted(st, m.key, m.canary))
        .count();
    let want = wave_size(policy, st.wave, now_in, picked, members.len());
    let mut rest: Vec<u64> = members
        .iter()
        .filter(|m| !(policy.selector && m.canary))
        .map(|m| m.key)
        .collect();
    rest.sort_unstable();
    let need = want.saturating_sub(picked);
    let cut = match need {
        0 => None,
        n if n >= rest.len() => Some(u64::MAX),
        n => Some(rest[n - 1]),
    };
    // Never lower: a Composition admitted by an earlier wave stays admitted.
    let old = st
        .threshold
        .as_deref()
        .and_then(|t| u64::from_str_radix(t, 16).ok());
    st.threshold = cut.max(old).map(|t| format!("{t:016x}"));
    let admitted_now = members
        .iter()
        .filter(|m| admitted(st, m.key, m.canary))
        .count();
    st.admitted = i32::try_from(admitted_now).unwrap_or(i32::MAX);
    st.message = Some(format!(
        "wave {}: {} of {} Compositions admitted",
        st.wave,
        st.admitted,
        members.len()
    ));
}

/// How many Compositions waves 1..=`wave` admit together.
fn wave_size(policy: &Policy, wave: i32, before: usize, picked: usize, total: usize) -> usize {
    let pct = |p: i32| (total * usize::try_from(p.clamp(0, 100)).unwrap_or(0)).div_ceil(100);
    let size = if wave <= 1 {
        if policy.selector && picked > 0 {
            picked
        } else if let Some(c) = policy.canary_count {
            usize::try_from(c).unwrap_or(1)
        } else if let Some(p) = policy.canary_percent {
            pct(p)
        } else {
            1
        }
    } else if policy.steps.is_empty() {
        before * 2
    } else {
        let i = usize::try_from(wave - 2).unwrap_or(0);
        policy.steps.get(i).map_or(total, |p| pct(*p))
    };
    size.max(before + 1).max(1).min(total)
}

/// Counts per revision, and updated / ready / failed / total for the rolling revision.
fn count(st: &mut RolloutStatus, members: &[Member], policy: &Policy, now: Timestamp) {
    let mut per: std::collections::BTreeMap<i64, (i32, i32)> = Default::default();
    for m in members {
        if let Some(r) = m.runs {
            let e = per.entry(r).or_default();
            e.0 += 1;
            e.1 += i32::from(m.ready);
        }
    }
    st.revisions = per
        .iter()
        .rev()
        .map(|(n, (c, r))| RevisionCount {
            number: *n,
            compositions: *c,
            ready: *r,
        })
        .collect();
    let (c, r) = per.get(&st.revision.number).copied().unwrap_or_default();
    st.updated = c;
    st.ready = r;
    st.total = i32::try_from(members.len()).unwrap_or(i32::MAX);
    let failed = members
        .iter()
        .filter(|m| m.gated && in_wave(st, m.key, m.canary))
        .filter(|m| failing(policy, st, m, now))
        .count();
    st.failed = i32::try_from(failed).unwrap_or(i32::MAX);
}

#[cfg(test)]
mod tests;
