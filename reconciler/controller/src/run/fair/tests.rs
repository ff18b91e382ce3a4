use super::*;
use std::time::Duration;

#[tokio::test]
async fn a_single_change_elsewhere_is_next_in_line_behind_a_busy_namespace() {
    let gate = FairGate::new(2);
    let a1 = gate.enter("a").await.unwrap();
    let a2 = gate.enter("a").await.unwrap();
    // 50 more of namespace a queue up, then one of b.
    let mut queued = Vec::new();
    for _ in 0..50 {
        let g = gate.clone();
        queued.push(tokio::spawn(async move { g.enter("a").await }));
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let g = gate.clone();
    let b = tokio::spawn(async move { g.enter("b").await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(gate.load(), (2, 51));
    drop(a1);
    let b = tokio::time::timeout(Duration::from_secs(1), b)
        .await
        .expect("b is served at the first free turn")
        .unwrap();
    assert_eq!(gate.load(), (2, 50));
    drop((a2, b));
    for q in queued {
        drop(q.await.unwrap());
    }
    assert_eq!(gate.load(), (0, 0));
}

#[tokio::test]
async fn a_turn_given_aside_goes_to_the_next_waiter_and_comes_back() {
    let gate = FairGate::new(1);
    let turn = gate.enter("a").await.unwrap();
    let g = gate.clone();
    let other = tokio::spawn(async move {
        let t = g.enter("b").await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(t);
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let g = gate.clone();
    holding(turn, async move {
        let seen = aside(&g, async { g.load() }).await;
        assert_eq!(seen.0, 1, "b ran while a waited aside: {seen:?}");
        assert_eq!(g.load(), (1, 0), "a holds a turn again");
    })
    .await;
    other.await.unwrap();
    assert_eq!(gate.load(), (0, 0));
}

#[tokio::test]
async fn a_closed_gate_sends_every_waiter_away() {
    let gate = FairGate::new(1);
    let held = gate.enter("a").await.unwrap();
    let g = gate.clone();
    let waiting = tokio::spawn(async move { g.enter("b").await.is_none() });
    tokio::time::sleep(Duration::from_millis(10)).await;
    gate.close();
    assert!(waiting.await.unwrap(), "sent away");
    assert!(gate.enter("c").await.is_none());
    drop(held);
    assert_eq!(gate.load(), (0, 0));
}

#[tokio::test]
async fn a_waiter_that_gives_up_does_not_keep_its_turn() {
    let gate = FairGate::new(1);
    let held = gate.enter("a").await.unwrap();
    let g = gate.clone();
    let gone = tokio::spawn(async move { g.enter("b").await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    gone.abort();
    let _ = gone.await;
    drop(held);
    let again = tokio::time::timeout(Duration::from_secs(1), gate.enter("c"))
        .await
        .expect("the turn is free again")
        .unwrap();
    assert_eq!(gate.load(), (1, 0));
    drop(again);
}

/// A wake that counts its calls.
fn counted() -> (Arc<std::sync::atomic::AtomicUsize>, impl Fn() -> Wake) {
    let n = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let m = n.clone();
    (n, move || {
        let m = m.clone();
        Box::new(move || {
            m.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            true
        })
    })
}

#[test]
fn a_ticket_is_woken_once_and_its_turn_is_kept_for_it() {
    use std::sync::atomic::Ordering::SeqCst;
    let gate = FairGate::new(1);
    let (woken, wake) = counted();
    let Entry::Turn(a) = gate.try_enter("a", "a/1", wake()) else {
        panic!("a free turn")
    };
    assert!(matches!(gate.try_enter("b", "b/1", wake()), Entry::Queued));
    // Again before its turn: still one ticket.
    assert!(matches!(gate.try_enter("b", "b/1", wake()), Entry::Queued));
    assert_eq!((gate.load(), woken.load(SeqCst)), ((1, 1), 0));
    drop(a);
    // The turn is kept for b/1: counted in use, nobody waits, the wake came once.
    assert_eq!((gate.load(), woken.load(SeqCst)), ((1, 0), 1));
    assert!(matches!(gate.try_enter("c", "c/1", wake()), Entry::Queued));
    let Entry::Turn(b) = gate.try_enter("b", "b/1", wake()) else {
        panic!("the kept turn")
    };
    drop(b);
    let Entry::Turn(c) = gate.try_enter("c", "c/1", wake()) else {
        panic!("c's kept turn")
    };
    drop(c);
    assert_eq!((gate.load(), woken.load(SeqCst)), ((0, 0), 2));
}

#[test]
fn tickets_are_served_fairly_between_namespaces() {
    let gate = FairGate::new(1);
    let (_, wake) = counted();
    let Entry::Turn(held) = gate.try_enter("a", "a/0", wake()) else {
        panic!("a free turn")
    };
    for i in 1..50 {
        assert!(matches!(
            gate.try_enter("a", &format!("a/{i}"), wake()),
            Entry::Queued
        ));
    }
    assert!(matches!(gate.try_enter("b", "b/1", wake()), Entry::Queued));
    drop(held);
    // b's ticket is next: a has had its turn.
    assert!(matches!(gate.try_enter("b", "b/1", wake()), Entry::Turn(_)));
}

#[test]
fn a_kept_turn_nobody_claims_comes_back() {
    let gate = FairGate::keeping(1, Duration::from_millis(20));
    let (_, wake) = counted();
    let Entry::Turn(held) = gate.try_enter("a", "a/1", wake()) else {
        panic!("a free turn")
    };
    assert!(matches!(
        gate.try_enter("gone", "gone/1", wake()),
        Entry::Queued
    ));
    drop(held);
    assert_eq!(gate.load(), (1, 0), "kept for gone/1");
    assert!(matches!(gate.try_enter("b", "b/1", wake()), Entry::Queued));
    std::thread::sleep(Duration::from_millis(30));
    // The stack's tick gives it back, and b's ticket gets it.
    gate.tick();
    assert_eq!(gate.load(), (1, 0), "kept for b/1");
    assert!(matches!(gate.try_enter("b", "b/1", wake()), Entry::Turn(_)));
}

#[test]
fn a_ticket_whose_composition_is_gone_passes_its_turn_on() {
    let gate = FairGate::new(1);
    let (woken, wake) = counted();
    let Entry::Turn(held) = gate.try_enter("a", "a/1", wake()) else {
        panic!("a free turn")
    };
    let gone: Wake = Box::new(|| false);
    assert!(matches!(gate.try_enter("a", "a/gone", gone), Entry::Queued));
    assert!(matches!(gate.try_enter("b", "b/1", wake()), Entry::Queued));
    drop(held);
    // a/gone said no: b/1 has the turn.
    assert_eq!(woken.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(matches!(gate.try_enter("b", "b/1", wake()), Entry::Turn(_)));
}

#[test]
fn a_kept_turn_its_reconcile_does_not_need_is_released() {
    let gate = FairGate::new(1);
    let (_, wake) = counted();
    let Entry::Turn(held) = gate.try_enter("a", "a/1", wake()) else {
        panic!("a free turn")
    };
    assert!(matches!(gate.try_enter("b", "b/1", wake()), Entry::Queued));
    assert!(matches!(gate.try_enter("c", "c/1", wake()), Entry::Queued));
    drop(held);
    // b/1 came back at rest: its turn goes to c/1.
    gate.release("b/1");
    assert_eq!(gate.load(), (1, 0));
    assert!(matches!(gate.try_enter("c", "c/1", wake()), Entry::Turn(_)));
}

#[test]
fn a_closed_gate_drops_its_tickets() {
    let gate = FairGate::new(1);
    let (woken, wake) = counted();
    let Entry::Turn(held) = gate.try_enter("a", "a/1", wake()) else {
        panic!("a free turn")
    };
    assert!(matches!(gate.try_enter("b", "b/1", wake()), Entry::Queued));
    assert!(matches!(gate.try_enter("c", "c/1", wake()), Entry::Queued));
    drop(held);
    // b/1's turn is kept; the gate closes before it comes.
    gate.close();
    assert!(matches!(gate.try_enter("b", "b/1", wake()), Entry::Closed));
    assert_eq!(woken.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(gate.load(), (0, 0));
}
