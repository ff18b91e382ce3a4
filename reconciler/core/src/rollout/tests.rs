use super::*;

fn rev(n: i64) -> RevisionRef {
    RevisionRef {
        number: n,
        name: format!("s-{n}"),
        generation: n,
        module_digest: format!("sha256:{n}"),
        template_digest: format!("sha256:t{n}"),
    }
}

fn policy() -> Policy {
    Policy {
        strategy: RolloutStrategy::Progressive,
        selector: false,
        canary_count: None,
        canary_percent: None,
        steps: vec![],
        max_failures: 0,
        deadline: Duration::from_secs(600),
        bake: Duration::ZERO,
        on_failure: OnFailure::Pause,
    }
}

fn members(n: u64, runs: i64) -> Vec<Member> {
    (0..n)
        .map(|k| Member {
            key: k * 1000,
            runs: Some(runs),
            ready: true,
            gated: true,
            ..Member::default()
        })
        .collect()
}

fn complete_from_one() -> RolloutStatus {
    let mut st = start(None, rev(1), RolloutStrategy::Progressive);
    st = step(
        &policy(),
        &st,
        &members(3, 1),
        Asked::default(),
        Timestamp::UNIX_EPOCH,
    );
    st
}

/// Revision 2 starting to roll out progressively after revision 1 completed.
fn rolling_two() -> RolloutStatus {
    start(
        Some(&complete_from_one()),
        rev(2),
        RolloutStrategy::Progressive,
    )
}

/// What a Composition's controller does: run the revision the status says, Ready at once.
fn converge(st: &RolloutStatus, ms: &mut [Member]) {
    for m in ms.iter_mut() {
        m.runs = Some(target(st, m.key, m.canary, m.runs).number);
    }
}

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(s).unwrap()
}

#[test]
fn the_first_revision_is_complete_at_once() {
    let st = complete_from_one();
    assert_eq!(st.phase, phase::COMPLETE);
    assert_eq!((st.updated, st.total), (3, 3));
}

#[test]
fn progressive_waves_double_and_each_waits_for_ready() {
    let mut ms = members(10, 1);
    let mut st = rolling_two();
    assert_eq!(st.stable, Some(rev(1)));
    let mut sizes = vec![];
    for i in 0..10 {
        st = step(&policy(), &st, &ms, Asked::default(), t(i));
        if st.phase == phase::COMPLETE {
            break;
        }
        sizes.push(st.admitted);
        // Held until the wave runs the revision.
        let again = step(&policy(), &st, &ms, Asked::default(), t(i));
        assert_eq!(again.wave, st.wave, "a wave not yet updated is held");
        converge(&st, &mut ms);
    }
    assert_eq!(sizes, [1, 2, 4, 8, 10]);
    assert_eq!(st.phase, phase::COMPLETE);
    assert!(ms.iter().all(|m| m.runs == Some(2)));
    // The canary is the lowest place in the order.
    let first = rolling_two();
    let first = step(&policy(), &first, &members(10, 1), Asked::default(), t(0));
    assert!(admitted(&first, 0, false) && !admitted(&first, 1000, false));
}

#[test]
fn a_failing_wave_halts_and_rollback_returns_only_that_wave_to_stable() {
    let mut p = policy();
    p.on_failure = OnFailure::Rollback;
    let mut ms = members(10, 1);
    let mut st = rolling_two();
    st = step(&p, &st, &ms, Asked::default(), t(0));
    converge(&st, &mut ms);
    st = step(&p, &st, &ms, Asked::default(), t(1));
    assert_eq!(st.wave, 2);
    converge(&st, &mut ms);
    // Wave 2's newcomer fails (it stays on 1): halt, and wave 2 goes back; wave 1 stays.
    let newcomer = ms.iter().position(|m| m.key == 1000).unwrap();
    ms[newcomer].runs = Some(1);
    ms[newcomer].failed = true;
    st = step(&p, &st, &ms, Asked::default(), t(2));
    assert_eq!(
        (st.phase.as_str(), st.reason.as_deref()),
        (phase::HALTED, Some("WaveFailed"))
    );
    assert!(st.rolled_back);
    assert_eq!(st.failed, 1);
    converge(&st, &mut ms);
    let on_new: Vec<u64> = ms
        .iter()
        .filter(|m| m.runs == Some(2))
        .map(|m| m.key)
        .collect();
    assert_eq!(on_new, [0], "only wave 1 keeps revision 2");
    // The counts of the halt stay.
    ms[newcomer].failed = false;
    assert_eq!(step(&p, &st, &ms, Asked::default(), t(3)).failed, 1);
}

#[test]
fn a_halted_rollout_with_pause_keeps_the_wave_and_gives_the_revision_to_no_one_else() {
    let mut p = policy();
    p.canary_count = Some(2);
    let mut ms = members(10, 1);
    let mut st = rolling_two();
    st = step(&p, &st, &ms, Asked::default(), t(0));
    converge(&st, &mut ms);
    ms[0].ready = false;
    ms[0].failed = true;
    st = step(&p, &st, &ms, Asked::default(), t(1));
    assert_eq!(st.phase, phase::HALTED);
    assert!(!st.rolled_back);
    // Both canaries keep revision 2; a Composition the threshold covers but not on it yet
    // (e.g. created since) gets the stable one.
    assert_eq!(target(&st, 0, false, Some(2)).number, 2);
    assert_eq!(target(&st, 1000, false, Some(2)).number, 2);
    assert_eq!(target(&st, 1000, false, None).number, 1);
    assert_eq!(target(&st, 5000, false, Some(1)).number, 1);
    assert_eq!(
        step(&p, &st, &members(10, 1), Asked::default(), t(2)).phase,
        phase::HALTED
    );
}

#[test]
fn only_compositions_ready_before_count_and_newcomers_get_their_own_deadline() {
    let mut ms = members(4, 1);
    ms[0].gated = false; // never Ready on the stable revision
    let mut st = rolling_two();
    let mut p = policy();
    p.canary_count = Some(2);
    st = step(&p, &st, &ms, Asked::default(), t(0));
    converge(&st, &mut ms);
    ms[0].ready = false;
    ms[0].failed = true;
    let on = step(&p, &st, &ms, Asked::default(), t(1));
    assert_eq!(
        (on.phase.as_str(), on.wave),
        (phase::PROGRESSING, 2),
        "{on:?}"
    );
    // Created after the wave started: not late at the wave's deadline.
    let mut fresh = members(2, 1);
    let st2 = step(&p, &rolling_two(), &fresh, Asked::default(), t(0));
    converge(&st2, &mut fresh);
    for m in &mut fresh {
        m.ready = false;
        m.created = Some(t(500));
    }
    let late = step(&p, &st2, &fresh, Asked::default(), t(700));
    assert_eq!(late.phase, phase::PROGRESSING, "{late:?}");
}

#[test]
fn a_wave_not_ready_by_its_deadline_halts_unless_within_the_allowance() {
    let mut ms = members(4, 1);
    let mut st = rolling_two();
    st = step(&policy(), &st, &ms, Asked::default(), t(0));
    converge(&st, &mut ms);
    ms[0].ready = false;
    let held = step(&policy(), &st, &ms, Asked::default(), t(599));
    assert_eq!((held.phase.as_str(), held.wave), (phase::PROGRESSING, 1));
    let late = step(&policy(), &st, &ms, Asked::default(), t(601));
    assert_eq!(late.phase, phase::HALTED);
    assert_eq!(late.reason.as_deref(), Some("WaveDeadline"));
    let mut p = policy();
    p.max_failures = 1;
    let on = step(&p, &st, &ms, Asked::default(), t(601));
    assert_eq!((on.phase.as_str(), on.wave), (phase::PROGRESSING, 2));
}

#[test]
fn pause_holds_the_wave_and_resume_restarts_its_clock() {
    let mut ms = members(4, 1);
    let mut st = rolling_two();
    st = step(&policy(), &st, &ms, Asked::default(), t(0));
    converge(&st, &mut ms);
    let paused = Asked {
        paused: true,
        undo: None,
    };
    let p1 = step(&policy(), &st, &ms, paused, t(10));
    assert_eq!((p1.phase.as_str(), p1.wave), (phase::PAUSED, 1));
    let p2 = step(&policy(), &p1, &ms, paused, t(5000));
    assert_eq!(p2.wave, 1, "no wave while paused, however long");
    let resumed = step(&policy(), &p2, &ms, Asked::default(), t(5001));
    assert_eq!(
        (resumed.phase.as_str(), resumed.wave),
        (phase::PROGRESSING, 2)
    );
}

#[test]
fn undo_sends_every_composition_back_even_after_completion() {
    let mut ms = members(3, 1);
    let mut st = start(
        Some(&complete_from_one()),
        rev(2),
        RolloutStrategy::Cooldown,
    );
    st = step(&policy(), &st, &ms, Asked::default(), t(0));
    assert_eq!(st.threshold.as_deref(), Some(ALL));
    converge(&st, &mut ms);
    st = step(&policy(), &st, &ms, Asked::default(), t(1));
    assert_eq!(st.phase, phase::COMPLETE);
    let undo = Asked {
        paused: false,
        undo: Some(2),
    };
    st = step(&policy(), &st, &ms, undo, t(2));
    assert_eq!(
        (st.phase.as_str(), st.reason.as_deref()),
        (phase::UNDONE, Some("Undone"))
    );
    assert!(
        ms.iter()
            .all(|m| target(&st, m.key, false, m.runs).number == 1)
    );
    // An undo of another revision is ignored.
    let mut other = start(
        Some(&complete_from_one()),
        rev(2),
        RolloutStrategy::Cooldown,
    );
    other = step(
        &policy(),
        &other,
        &members(3, 1),
        Asked {
            paused: false,
            undo: Some(7),
        },
        t(0),
    );
    assert_eq!(other.phase, phase::PROGRESSING);
}

#[test]
fn a_selector_canary_then_steps() {
    let mut p = policy();
    p.selector = true;
    p.steps = vec![50, 100];
    let mut ms = members(10, 1);
    ms[9].canary = true;
    let mut st = rolling_two();
    st = step(&p, &st, &ms, Asked::default(), t(0));
    assert_eq!(st.admitted, 1);
    assert!(admitted(&st, ms[9].key, true) && !admitted(&st, ms[0].key, false));
    converge(&st, &mut ms);
    st = step(&p, &st, &ms, Asked::default(), t(1));
    assert_eq!(st.admitted, 5);
    let n = ms.iter().filter(|m| admitted(&st, m.key, m.canary)).count();
    assert_eq!(n, 5);
}

#[test]
fn an_edit_mid_rollout_keeps_the_last_complete_revision_stable() {
    let mid = step(
        &policy(),
        &rolling_two(),
        &members(4, 1),
        Asked::default(),
        t(0),
    );
    let next = start(Some(&mid), rev(3), RolloutStrategy::Progressive);
    assert_eq!(next.stable, Some(rev(1)));
    assert_eq!(next.wave, 0);
}

#[test]
fn bake_time_holds_a_ready_wave() {
    let mut p = policy();
    p.bake = Duration::from_secs(60);
    let mut ms = members(4, 1);
    let mut st = rolling_two();
    st = step(&p, &st, &ms, Asked::default(), t(0));
    converge(&st, &mut ms);
    st = step(&p, &st, &ms, Asked::default(), t(10));
    assert_eq!(st.wave, 1);
    st = step(&p, &st, &ms, Asked::default(), t(71));
    assert_eq!(st.wave, 2);
}

#[test]
fn a_rollout_paused_before_it_starts_admits_nothing_until_resumed() {
    let ms = members(4, 1);
    let paused = Asked {
        paused: true,
        undo: None,
    };
    let st = rolling_two();
    let st = step(&policy(), &st, &ms, paused, t(0));
    assert_eq!((st.phase.as_str(), st.wave), (phase::PAUSED, 0));
    assert!(
        ms.iter()
            .all(|m| target(&st, m.key, false, m.runs).number == 1)
    );
    let st = step(&policy(), &st, &ms, Asked::default(), t(1));
    assert_eq!(
        (st.phase.as_str(), st.wave, st.admitted),
        (phase::PROGRESSING, 1, 1)
    );
}

#[test]
fn max_failures_is_per_wave_and_the_threshold_never_goes_down() {
    let mut p = policy();
    p.max_failures = 1;
    let mut ms = members(16, 1);
    let mut st = rolling_two();
    st = step(&p, &st, &ms, Asked::default(), t(0));
    converge(&st, &mut ms);
    // One failure in wave 1 (within the allowance), one in wave 2: no halt.
    ms[0].runs = Some(1);
    ms[0].failed = true;
    st = step(&p, &st, &ms, Asked::default(), t(1));
    assert_eq!((st.phase.as_str(), st.wave), (phase::PROGRESSING, 2));
    converge(&st, &mut ms);
    ms[0].runs = Some(1);
    ms[1].runs = Some(1);
    ms[1].failed = true;
    st = step(&p, &st, &ms, Asked::default(), t(2));
    assert_eq!(
        (st.phase.as_str(), st.wave),
        (phase::PROGRESSING, 3),
        "{st:?}"
    );
    // Many Compositions appear below the cut: the next wave does not lower it.
    let cut = st.threshold.clone();
    converge(&st, &mut ms);
    ms[0].runs = Some(1);
    ms[1].runs = Some(1);
    for k in 0..40 {
        ms.push(Member {
            key: 1 + k,
            runs: Some(1),
            ready: true,
            gated: true,
            ..Member::default()
        });
    }
    let before: Vec<u64> = ms
        .iter()
        .filter(|m| admitted(&st, m.key, false))
        .map(|m| m.key)
        .collect();
    let next = step(&p, &st, &ms, Asked::default(), t(3));
    assert!(next.threshold >= cut, "{:?} < {cut:?}", next.threshold);
    assert!(before.iter().all(|k| admitted(&next, *k, false)));
}

#[test]
fn a_cooldown_rollout_under_way_is_the_stable_revision_of_the_next_one() {
    let mut cooling = start(
        Some(&complete_from_one()),
        rev(2),
        RolloutStrategy::Cooldown,
    );
    cooling = step(&policy(), &cooling, &members(4, 1), Asked::default(), t(0));
    assert_eq!(cooling.phase, phase::PROGRESSING);
    let next = start(Some(&cooling), rev(3), RolloutStrategy::Progressive);
    assert_eq!(next.stable, Some(rev(2)));
    // Undone, it is not.
    cooling.phase = phase::UNDONE.into();
    assert_eq!(
        start(Some(&cooling), rev(3), RolloutStrategy::Progressive).stable,
        Some(rev(1))
    );
}

#[test]
fn a_wave_with_no_gated_composition_waits_until_it_ran_the_revision() {
    let mut ms = members(4, 1);
    for m in &mut ms {
        m.gated = false;
        m.ready = false;
    }
    let mut st = rolling_two();
    st = step(&policy(), &st, &ms, Asked::default(), t(0));
    assert_eq!(st.wave, 1);
    let held = step(&policy(), &st, &ms, Asked::default(), t(1));
    assert_eq!(held.wave, 1, "not yet synthesized: held");
    converge(&st, &mut ms);
    assert_eq!(step(&policy(), &st, &ms, Asked::default(), t(2)).wave, 2);
}
