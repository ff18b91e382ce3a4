//! The controller's side of the sandbox: ceilings a Synthesizer's `spec.limits` cannot
//! exceed, the memory budget shared by concurrent runs, the module ingestion policy, and the
//! record of synthesis slots that `/healthz` reads.
//!
//! Every limit, its default and its flag are listed in `docs/security.md`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasm_host::RunLimits;

use crate::sources::FetchPolicy;

/// Operator-set bounds of everything a Synthesizer asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandbox {
    /// Highest `spec.limits.memory` accepted (`--max-synthesis-memory`).
    pub max_memory_bytes: usize,
    /// Highest `spec.limits.timeout` accepted (`--max-synthesis-timeout`).
    pub max_timeout: Duration,
    /// Highest `spec.limits.output` accepted (`--max-synthesis-output`).
    pub max_output_bytes: usize,
    /// `spec.limits.output` of a Synthesizer that sets none (`--synthesis-output`): what one
    /// synthesis may emit and store.
    pub default_output_bytes: usize,
    /// Sum of the memory limits of the runs in progress (`--synthesis-memory-budget`): a run
    /// waits until its limit fits, so `concurrency × memory` never exceeds it.
    pub memory_budget_bytes: usize,
    /// Module downloads: size cap and redirect rule (`--max-module-size`,
    /// `--module-allow-private-redirects`).
    pub fetch: FetchPolicy,
    /// How long a reconcile waits for a module to compile (`--compile-timeout`).
    pub compile_timeout: Duration,
    /// Memory compiling one module may take (`--compile-memory-budget`): a module whose
    /// estimated compile memory ([`wasm_host::compile_memory_estimate`], about 23x its size)
    /// exceeds it is refused; large compilations run one at a time.
    pub compile_memory_budget_bytes: usize,
    /// The binary that compiles modules in child processes ([`wasm_host::COMPILE_SUBCOMMAND`];
    /// the `enoki` binary itself). `None`: modules compile in this process.
    pub compile_program: Option<std::path::PathBuf>,
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox {
            max_memory_bytes: 512 << 20,
            max_timeout: Duration::from_secs(120),
            max_output_bytes: 64 << 20,
            default_output_bytes: 4 << 20,
            memory_budget_bytes: 512 << 20,
            fetch: FetchPolicy::default(),
            compile_timeout: Duration::from_secs(120),
            compile_memory_budget_bytes: 2 << 30,
            compile_program: None,
        }
    }
}

impl Sandbox {
    /// The wasm host of these limits: its on-disk cache in `cache_dir`, its compile budget,
    /// an instance pool for `runs` syntheses at once (`--max-concurrent-syntheses`), and
    /// (with [`Sandbox::compile_program`]) its compilations in child processes, killed after
    /// `--compile-timeout` (a background optimization after three times that).
    ///
    /// # Errors
    /// As [`wasm_host::Host::with_run_slots`].
    pub fn host(
        &self,
        cache_dir: Option<&std::path::Path>,
        runs: usize,
    ) -> Result<wasm_host::Host, wasm_host::HostError> {
        let process = self
            .compile_program
            .as_ref()
            .map(|program| wasm_host::CompileProcess {
                program: program.clone(),
                args: vec![wasm_host::COMPILE_SUBCOMMAND.into()],
                timeout: self.compile_timeout,
                background_timeout: self.compile_timeout.saturating_mul(3),
            });
        let runs = u32::try_from(runs.max(1)).unwrap_or(u32::MAX);
        let host = wasm_host::Host::with_run_slots(cache_dir, process, runs)?;
        if !host.pooled() {
            tracing::warn!(
                runs,
                "the system refused the wasm instance pool's address-space reservation \
                 (ulimit -v, strict overcommit?): every synthesis maps its memory anew (slower)"
            );
        }
        host.set_compile_budget(self.compile_memory_budget_bytes);
        Ok(host)
    }
}

impl Sandbox {
    /// The run limits of a Synthesizer's `spec.limits` (its output bound defaults to
    /// `--synthesis-output`), or why they are refused (naming the field and the flag).
    ///
    /// # Errors
    /// A field that does not parse, or a limit above its ceiling.
    pub fn limits_of(&self, limits: Option<&crds::Limits>) -> Result<RunLimits, String> {
        let mut out = crate::synthesis::run_limits(limits)?;
        if limits.and_then(|l| l.output.as_ref()).is_none() {
            out.max_output_bytes = self.default_output_bytes;
        }
        self.check(out)
    }

    /// The run limits, or why they exceed a ceiling (naming the field and the flag).
    ///
    /// # Errors
    /// A message naming `spec.limits.<field>`, the value and the ceiling.
    pub fn check(&self, limits: RunLimits) -> Result<RunLimits, String> {
        if limits.max_memory_bytes > self.max_memory_bytes {
            return Err(format!(
                "spec.limits.memory ({} bytes) exceeds the controller's ceiling of {} bytes \
                 (--max-synthesis-memory)",
                limits.max_memory_bytes, self.max_memory_bytes
            ));
        }
        if limits.max_memory_bytes > self.memory_budget_bytes {
            return Err(format!(
                "spec.limits.memory ({} bytes) exceeds the controller's synthesis memory budget \
                 of {} bytes (--synthesis-memory-budget)",
                limits.max_memory_bytes, self.memory_budget_bytes
            ));
        }
        if limits.deadline > self.max_timeout {
            return Err(format!(
                "spec.limits.timeout ({:?}) exceeds the controller's ceiling of {:?} \
                 (--max-synthesis-timeout)",
                limits.deadline, self.max_timeout
            ));
        }
        if limits.max_output_bytes > self.max_output_bytes {
            return Err(format!(
                "spec.limits.output ({} bytes) exceeds the controller's ceiling of {} bytes \
                 (--max-synthesis-output)",
                limits.max_output_bytes, self.max_output_bytes
            ));
        }
        Ok(limits)
    }
}

/// The memory budget of concurrent runs, in MiB permits (clones share it).
#[derive(Clone)]
pub struct MemoryBudget(Arc<Semaphore>);

impl MemoryBudget {
    /// A budget of `bytes` (at least 1 MiB), rounded up to whole MiB as [`Self::reserve`]
    /// rounds a run's limit: a run the budget check accepts (`limit <= bytes`) always fits.
    pub fn new(bytes: usize) -> MemoryBudget {
        MemoryBudget(Arc::new(Semaphore::new(bytes.div_ceil(1 << 20).max(1))))
    }

    /// Waits until `bytes` of the budget are free and holds them until the permit drops.
    pub async fn reserve(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let mib = u32::try_from(bytes.div_ceil(1 << 20).max(1)).unwrap_or(u32::MAX);
        self.0.clone().acquire_many_owned(mib).await.ok()
    }

    /// MiB not reserved right now.
    pub fn available_mib(&self) -> usize {
        self.0.available_permits()
    }
}

/// Synthesis runs in progress, for `/healthz`: unhealthy when every slot is held by a run
/// that is past its deadline by more than [`SLOT_SLACK`] (the runtime failed to stop it).
pub struct Slots {
    capacity: usize,
    next: AtomicU64,
    running: Mutex<HashMap<u64, Instant>>,
}

/// How long past its deadline a run may hold its slot before the slot counts as stuck.
pub const SLOT_SLACK: Duration = Duration::from_secs(30);

/// Holds a slot's entry in [`Slots`] until dropped.
pub struct SlotGuard {
    slots: Arc<Slots>,
    id: u64,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.slots.running.lock().remove(&self.id);
    }
}

impl Slots {
    /// `capacity` synthesis slots.
    pub fn new(capacity: usize) -> Arc<Slots> {
        Arc::new(Slots {
            capacity: capacity.max(1),
            next: AtomicU64::new(0),
            running: Mutex::new(HashMap::new()),
        })
    }

    /// Records a run that must be over by `deadline` (+ slack).
    pub fn enter(self: &Arc<Self>, deadline: Duration) -> SlotGuard {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.running
            .lock()
            .insert(id, Instant::now() + deadline + SLOT_SLACK);
        SlotGuard {
            slots: self.clone(),
            id,
        }
    }

    /// Whether every slot is held by a run past its deadline and slack at `now`.
    pub fn all_stuck(&self, now: Instant) -> bool {
        let r = self.running.lock();
        r.len() >= self.capacity && r.values().all(|overdue| *overdue <= now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_above_a_ceiling_are_refused_naming_field_and_flag() {
        let s = Sandbox::default();
        let ok = RunLimits::default();
        assert_eq!(s.check(ok), Ok(ok));
        let big = RunLimits {
            max_memory_bytes: 1 << 30,
            ..ok
        };
        let e = s.check(big).unwrap_err();
        assert!(
            e.contains("spec.limits.memory") && e.contains("--max-synthesis-memory"),
            "{e}"
        );
        let slow = RunLimits {
            deadline: Duration::from_secs(3600),
            ..ok
        };
        assert!(
            s.check(slow)
                .unwrap_err()
                .contains("--max-synthesis-timeout")
        );
        let loud = RunLimits {
            max_output_bytes: 1 << 30,
            ..ok
        };
        assert!(
            s.check(loud)
                .unwrap_err()
                .contains("--max-synthesis-output")
        );
        let tight = Sandbox {
            memory_budget_bytes: 128 << 20,
            ..s
        };
        assert!(
            tight
                .check(ok)
                .unwrap_err()
                .contains("--synthesis-memory-budget")
        );
    }

    #[tokio::test]
    async fn the_memory_budget_bounds_the_sum_of_concurrent_runs() {
        let budget = MemoryBudget::new(512 << 20);
        let a = budget.reserve(256 << 20).await;
        let b = budget.reserve(256 << 20).await;
        assert_eq!(budget.available_mib(), 0);
        // A third 256 MiB run waits until one of the others is done.
        let third = tokio::time::timeout(Duration::from_millis(50), budget.reserve(256 << 20));
        assert!(third.await.is_err(), "the budget was exceeded");
        drop(a);
        assert!(budget.reserve(256 << 20).await.is_some());
        drop(b);
    }

    #[tokio::test]
    async fn a_run_at_a_budget_of_no_whole_mib_fits_it() {
        // `1G` is 1,000,000,000 bytes (953.67 MiB): a run limited to it must not wait forever.
        let budget = MemoryBudget::new(1_000_000_000);
        let run = tokio::time::timeout(Duration::from_secs(1), budget.reserve(1_000_000_000));
        assert!(run.await.expect("the run waits forever").is_some());
    }

    #[test]
    fn slots_are_stuck_only_when_all_are_past_their_deadline() {
        let slots = Slots::new(2);
        let now = Instant::now();
        let a = slots.enter(Duration::ZERO);
        assert!(!slots.all_stuck(now + SLOT_SLACK * 2), "one free slot left");
        let b = slots.enter(Duration::from_secs(3600));
        assert!(
            !slots.all_stuck(now + SLOT_SLACK * 2),
            "one run is within its deadline"
        );
        drop(b);
        let _c = slots.enter(Duration::ZERO);
        assert!(!slots.all_stuck(now), "not past the slack yet");
        assert!(slots.all_stuck(now + SLOT_SLACK * 2));
        drop(a);
        assert!(!slots.all_stuck(now + SLOT_SLACK * 2));
    }
}
