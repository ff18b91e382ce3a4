//! Reconcile workers shared fairly between namespaces (`--concurrency` of them). A reconcile
//! waits for a turn; a freed turn goes to the namespace with the fewest reconciles running
//! among those waiting (ties: the one served longest ago), as the API server's priority and
//! fairness shares seats between flows. A namespace with 500 Compositions queued takes every
//! worker only while no other namespace waits; a single change elsewhere is next in line.
//! The synthesis slots, the memory and compile budgets and the client's `--qps` tokens are
//! taken by admitted reconciles only, so they are shared likewise.
//!
//! A Composition's reconcile does not wait inside the controller's runner for its turn
//! ([`FairGate::try_enter`]): it leaves a ticket and ends; a freed turn is kept for the next
//! ticket and that reconcile is queued again (the ticket's wake, which says no for a
//! Composition that is gone: the turn goes to the next in line). A kept turn that is not
//! claimed within [`RESERVED_FOR`] is given back ([`FairGate::tick`], every second).
//! kube-runtime's runner polls every reconcile it holds each time one of them wakes, so
//! thousands of reconciles parked there cost O(n) per wake-up: with tickets it holds the
//! running ones only.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    waiting: HashMap<String, VecDeque<Waiter>>,
    /// Keys of the tickets waiting.
    tickets: HashSet<String>,
    /// Turns granted to tickets, kept for their reconciles: key → (namespace, when).
    reserved: HashMap<String, (String, Instant)>,
    /// When each namespace was last given a turn (a counter).
    served: HashMap<String, u64>,
    tick: u64,
    /// Closed (the stack stops): waiters are sent away, none is admitted.
    closed: bool,
    /// How long a turn is kept for a ticket ([`RESERVED_FOR`]).
    reserve: Duration,
}

/// One in a namespace's line: a reconcile waiting in place, or a ticket.
enum Waiter {
    Task(oneshot::Sender<()>),
    Ticket { key: String, wake: Wake },
}

/// Queues the ticket's reconcile again; `false` when it is not there any more (its turn then
/// goes to the next in line). Called with the gate locked: it must not touch the gate.
pub type Wake = Box<dyn FnOnce() -> bool + Send>;

impl std::fmt::Debug for Waiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Waiter::Task(_) => f.write_str("Task"),
            Waiter::Ticket { key, .. } => write!(f, "Ticket({key})"),
        }
    }
}

/// A turn kept for a ticket is given back when its reconcile has not come for it by then (it
/// normally comes within milliseconds; the Composition went away, or is at rest now).
pub const RESERVED_FOR: Duration = Duration::from_secs(5);

/// What [`FairGate::try_enter`] answers.
#[derive(Debug)]
pub enum Entry {
    /// A turn: run now.
    Turn(Turn),
    /// A ticket waits (left now, or earlier): end the reconcile; its wake queues it again
    /// when its turn is kept for it.
    Queued,
    /// The gate is closed: the stack stops.
    Closed,
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
        Self::keeping(capacity, RESERVED_FOR)
    }

    /// A gate that keeps a turn for a ticket `reserve` long.
    fn keeping(capacity: usize, reserve: Duration) -> Arc<FairGate> {
        Arc::new(FairGate {
            state: Mutex::new(State {
                capacity: capacity.max(1),
                reserve,
                ..State::default()
            }),
            aside: tokio::sync::Semaphore::new(capacity.max(1)),
        })
    }

    /// Waits for a turn of `namespace`'s; `None` once the gate is closed.
    pub async fn enter(self: &Arc<Self>, namespace: &str) -> Option<Turn> {
        self.queue(namespace, false).await
    }

    /// A turn for the reconcile of `key` (in `namespace`) without waiting: the one kept for its
    /// ticket, or a free one when nobody waits; else a ticket in the namespace's line (one per
    /// key), whose `wake` is called once a turn is kept for it.
    pub fn try_enter(self: &Arc<Self>, namespace: &str, key: &str, wake: Wake) -> Entry {
        let mut s = self.state.lock();
        if s.closed {
            return Entry::Closed;
        }
        // Turns kept too long come back, to the lines first.
        s.grant();
        if let Some((ns, _)) = s.reserved.remove(key) {
            return Entry::Turn(self.turn(&ns));
        }
        if s.tickets.contains(key) {
            return Entry::Queued;
        }
        if s.in_use < s.capacity && s.waiting.values().all(VecDeque::is_empty) {
            s.admit(namespace);
            return Entry::Turn(self.turn(namespace));
        }
        s.tickets.insert(key.to_string());
        let ticket = Waiter::Ticket {
            key: key.to_string(),
            wake,
        };
        s.waiting
            .entry(namespace.to_string())
            .or_default()
            .push_back(ticket);
        s.grant();
        Entry::Queued
    }

    /// The gate's tasks in a stack: it closes when `stop` resolves; every second, kept turns
    /// nobody claimed go back to the lines ([`FairGate::tick`]).
    pub fn keep(
        gate: &Arc<FairGate>,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> [tokio::task::JoinHandle<()>; 2] {
        let closing = gate.clone();
        let ticking = gate.clone();
        [
            tokio::spawn(async move {
                stop.await;
                closing.close();
            }),
            tokio::spawn(async move {
                let mut every = tokio::time::interval(Duration::from_secs(1));
                loop {
                    every.tick().await;
                    ticking.tick();
                }
            }),
        ]
    }

    /// Gives back the turn kept for `key`, if any (its reconcile came and does not need it).
    pub fn release(&self, key: &str) {
        let mut s = self.state.lock();
        if let Some((ns, _)) = s.reserved.remove(key) {
            s.leave(&ns);
            s.grant();
        }
    }

    /// Gives back the kept turns nobody claimed in time, to the lines; the stack calls it
    /// every second.
    pub fn tick(&self) {
        let mut s = self.state.lock();
        if !s.reserved.is_empty() {
            s.grant();
        }
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
                line.push_front(Waiter::Task(tx));
            } else {
                line.push_back(Waiter::Task(tx));
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
            s.tickets.clear();
            let kept: Vec<String> = s.reserved.drain().map(|(_, (ns, _))| ns).collect();
            for ns in kept {
                s.leave(&ns);
            }
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
        if !self.reserved.is_empty() {
            self.expire();
        }
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
            let Some(waiter) = self.waiting.get_mut(&ns).and_then(VecDeque::pop_front) else {
                break;
            };
            if self.waiting.get(&ns).is_some_and(VecDeque::is_empty) {
                self.waiting.remove(&ns);
            }
            match waiter {
                Waiter::Task(tx) => {
                    if tx.is_closed() {
                        continue;
                    }
                    self.admit(&ns);
                    if tx.send(()).is_err() {
                        // Dropped in between: the turn comes back.
                        self.leave(&ns);
                    }
                }
                Waiter::Ticket { key, wake } => {
                    self.tickets.remove(&key);
                    if wake() {
                        self.admit(&ns);
                        self.reserved.insert(key, (ns, Instant::now()));
                    }
                }
            }
        }
        if self.served.len() > 10_000 {
            let (running, waiting) = (&self.running, &self.waiting);
            self.served
                .retain(|ns, _| running.contains_key(ns) || waiting.contains_key(ns));
        }
    }

    /// Gives back the turns kept longer than [`RESERVED_FOR`] for reconciles that did not come.
    fn expire(&mut self) {
        let now = Instant::now();
        let stale: Vec<String> = self
            .reserved
            .iter()
            .filter(|(_, (_, at))| now.duration_since(*at) >= self.reserve)
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            if let Some((ns, _)) = self.reserved.remove(&key) {
                self.leave(&ns);
            }
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
mod tests;
