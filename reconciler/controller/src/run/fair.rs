//! Reconcile workers shared fairly between namespaces (`--concurrency` of them). A reconcile
//! waits for a turn; a freed turn goes to the namespace with the fewest reconciles running
//! among those waiting (ties: the one served longest ago), as the API server's priority and
//! fairness shares seats between flows. A namespace with 500 Compositions queued takes every
//! worker only while no other namespace waits; a single change elsewhere is next in line.
//! The synthesis slots, the memory and compile budgets and the client's `--qps` tokens are
//! taken by admitted reconciles only, so they are shared likewise.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;

use tokio::sync::oneshot;

/// The fair gate in front of Composition reconciles.
#[derive(Debug)]
pub struct FairGate {
    state: Mutex<State>,
    /// Reconciles that gave their turn back while they wait on a budget ([`aside`]): at most
    /// as many as there are turns, so what they hold (their synthesis input) stays bounded.
    aside: tokio::sync::Semaphore,
}

#[derive(Debug, Default)]
struct State {
    capacity: usize,
    in_use: usize,
    /// Reconciles running per namespace.
    running: HashMap<String, usize>,
    /// Waiters per namespace, in arrival order.
    waiting: HashMap<String, VecDeque<oneshot::Sender<()>>>,
    /// When each namespace was last given a turn (a counter).
    served: HashMap<String, u64>,
    tick: u64,
    /// Closed (the stack stops): waiters are sent away, none is admitted.
    closed: bool,
}

/// A turn: the reconcile runs while it is held.
#[derive(Debug)]
pub struct Turn {
    gate: Arc<FairGate>,
    namespace: String,
}

impl FairGate {
    /// A gate of `capacity` turns (at least one).
    pub fn new(capacity: usize) -> Arc<FairGate> {
        Arc::new(FairGate {
            state: Mutex::new(State {
                capacity: capacity.max(1),
                ..State::default()
            }),
            aside: tokio::sync::Semaphore::new(capacity.max(1)),
        })
    }

    /// Waits for a turn of `namespace`'s; `None` once the gate is closed.
    pub async fn enter(self: &Arc<Self>, namespace: &str) -> Option<Turn> {
        self.queue(namespace, false).await
    }

    /// Waits for a turn, first in its namespace's line (`again`: a reconcile that had one).
    async fn queue(self: &Arc<Self>, namespace: &str, again: bool) -> Option<Turn> {
        let rx = {
            let mut s = self.state.lock();
            if s.closed {
                return None;
            }
            if s.in_use < s.capacity && s.waiting.values().all(VecDeque::is_empty) {
                s.admit(namespace);
                return Some(self.turn(namespace));
            }
            let (tx, rx) = oneshot::channel();
            let line = s.waiting.entry(namespace.to_string()).or_default();
            if again {
                line.push_front(tx);
            } else {
                line.push_back(tx);
            }
            s.grant();
            Waiting {
                rx: Some(rx),
                gate: self.clone(),
                namespace: namespace.to_string(),
            }
        };
        let mut waiting = rx;
        let granted = match waiting.rx.as_mut() {
            Some(rx) => rx.await.is_ok(),
            None => false,
        };
        // Received: the turn is ours (counted when it was granted); the guard lets go.
        waiting.rx = None;
        // A closed gate drops the sender.
        granted.then(|| self.turn(namespace))
    }

    /// Closes the gate: every waiter and every later reconcile is sent away (the stack is
    /// stopping; the next leader or holder of the shard reconciles them).
    pub fn close(&self) {
        {
            let mut s = self.state.lock();
            s.closed = true;
            s.waiting.clear();
        }
    }

    fn turn(self: &Arc<Self>, namespace: &str) -> Turn {
        Turn {
            gate: self.clone(),
            namespace: namespace.to_string(),
        }
    }

    /// Turns in use, and reconciles waiting (for the metrics and tests).
    pub fn load(&self) -> (usize, usize) {
        let s = self.state.lock();
        (s.in_use, s.waiting.values().map(VecDeque::len).sum())
    }
}

impl State {
    fn admit(&mut self, namespace: &str) {
        self.in_use += 1;
        *self.running.entry(namespace.to_string()).or_default() += 1;
        self.tick += 1;
        self.served.insert(namespace.to_string(), self.tick);
    }

    /// Gives free turns to waiters: each to the waiting namespace with the fewest running,
    /// then the one served longest ago. A waiter that gave up (dropped) is skipped.
    fn grant(&mut self) {
        while self.in_use < self.capacity && !self.closed {
            let next = self
                .waiting
                .iter()
                .filter(|(_, q)| !q.is_empty())
                .map(|(ns, _)| {
                    let running = self.running.get(ns).copied().unwrap_or(0);
                    let served = self.served.get(ns).copied().unwrap_or(0);
                    (running, served, ns.clone())
                })
                .min();
            let Some((_, _, ns)) = next else {
                break;
            };
            let Some(tx) = self.waiting.get_mut(&ns).and_then(VecDeque::pop_front) else {
                break;
            };
            if self.waiting.get(&ns).is_some_and(VecDeque::is_empty) {
                self.waiting.remove(&ns);
            }
            if tx.is_closed() {
                continue;
            }
            self.admit(&ns);
            if tx.send(()).is_err() {
                // Dropped in between: the turn comes back.
                self.leave(&ns);
            }
        }
        if self.served.len() > 10_000 {
            let (running, waiting) = (&self.running, &self.waiting);
            self.served
                .retain(|ns, _| running.contains_key(ns) || waiting.contains_key(ns));
        }
    }

    fn leave(&mut self, namespace: &str) {
        self.in_use = self.in_use.saturating_sub(1);
        if let Some(n) = self.running.get_mut(namespace) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.running.remove(namespace);
            }
        }
    }
}

/// A reconcile waiting for a turn. Dropped after its turn was granted but before it saw it
/// (cancelled in between), it gives the turn back.
struct Waiting {
    rx: Option<oneshot::Receiver<()>>,
    gate: Arc<FairGate>,
    namespace: String,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        // Closed first: a grant racing this drop either lands before (and is given back
        // here) or finds the receiver closed (and is not made).
        if let Some(mut rx) = self.rx.take()
            && {
                rx.close();
                rx.try_recv().is_ok()
            }
        {
            let mut s = self.gate.state.lock();
            s.leave(&self.namespace);
            s.grant();
        }
    }
}

tokio::task_local! {
    /// The turn the current reconcile holds (see [`aside`]).
    static HELD: std::cell::RefCell<Option<Turn>>;
}

/// Runs `f` holding `turn` (given back by [`aside`] while `f` waits on a shared budget).
pub async fn holding<F: std::future::Future>(turn: Turn, f: F) -> F::Output {
    HELD.scope(std::cell::RefCell::new(Some(turn)), f).await
}

/// Gives the turn this task holds back while `work` runs (it waits for, then holds, a shared
/// budget that is fair on its own: a synthesis slot), and takes one again afterwards. A
/// reconcile parked on a budget never keeps another namespace from its turn.
/// With as many reconciles aside as there are turns, it keeps its turn while it waits. It
/// takes its turn again first in its namespace's line.
pub async fn aside<T>(gate: &Arc<FairGate>, work: impl std::future::Future<Output = T>) -> T {
    let Ok(_aside) = gate.aside.try_acquire() else {
        return work.await;
    };
    let held = HELD.try_with(|t| t.borrow_mut().take()).ok().flatten();
    let namespace = held.as_ref().map(|t| t.namespace.clone());
    drop(held);
    let out = work.await;
    if let Some(ns) = namespace
        && let Some(turn) = gate.queue(&ns, true).await
    {
        let _ = HELD.try_with(|t| *t.borrow_mut() = Some(turn));
    }
    out
}

impl Drop for Turn {
    fn drop(&mut self) {
        {
            let mut s = self.gate.state.lock();
            s.leave(&self.namespace);
            s.grant();
        }
    }
}

#[cfg(test)]
mod tests {
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
}
