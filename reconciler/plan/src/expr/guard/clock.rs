//! How long one evaluation has run, in the CPU time of the thread evaluating it.
//!
//! The budget of one evaluation ([`super::MAX_EVAL_TIME`]) is CPU time: a thread that a
//! loaded machine leaves waiting for a core is not charged for the wait, so an expression
//! that fits on an idle controller fits on a saturated one. The wall clock is read at every
//! step (cheap); the thread's CPU clock (a system call) only once an evaluation has run
//! [`MARK_AFTER`] of wall time, and then at most once per [`RECHECK`] of wall time after the
//! wall clock has passed the budget. Until the mark, CPU time is taken to be the wall time
//! (never less than the truth), so an evaluation is never charged less than it used.

use std::time::{Duration, Instant};

use rustix::time::{ClockId, clock_gettime};

/// Wall time after which an evaluation starts reading its thread's CPU clock.
pub const MARK_AFTER: Duration = Duration::from_millis(10);
/// Wall time between two reads of the CPU clock once the wall clock is over the budget.
pub const RECHECK: Duration = Duration::from_millis(1);

/// The clock of one evaluation.
#[derive(Clone, Copy, Debug)]
pub struct EvalClock {
    /// When it started (wall).
    pub started: Instant,
    /// The wall time since the start and the thread's CPU time at the mark.
    mark: Option<(Duration, Duration)>,
    /// The wall time since the start at the last read of the CPU clock.
    last_read: Duration,
}

impl EvalClock {
    /// A clock started now.
    pub fn start() -> Self {
        EvalClock {
            started: Instant::now(),
            mark: None,
            last_read: Duration::ZERO,
        }
    }

    /// Whether the evaluation has used more than `budget` (see the module docs).
    pub fn over(&mut self, budget: Duration) -> bool {
        self.over_with(budget, self.started.elapsed(), thread_cpu)
    }

    /// [`Self::over`] at a wall time of `wall` since the start, reading the CPU clock with
    /// `cpu`.
    pub fn over_with(
        &mut self,
        budget: Duration,
        wall: Duration,
        mut cpu: impl FnMut() -> Duration,
    ) -> bool {
        let Some((marked_at, cpu_at_mark)) = self.mark else {
            if wall > MARK_AFTER {
                self.mark = Some((wall, cpu()));
                self.last_read = wall;
            }
            return wall > budget;
        };
        if wall <= budget || wall.saturating_sub(self.last_read) < RECHECK {
            return false;
        }
        self.last_read = wall;
        marked_at + cpu().saturating_sub(cpu_at_mark) > budget
    }
}

/// The CPU time the calling thread has used.
fn thread_cpu() -> Duration {
    let t = clock_gettime(ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: Duration = Duration::from_millis(250);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_short_evaluation_never_reads_the_cpu_clock() {
        let mut clock = EvalClock::start();
        let mut reads = 0;
        for wall in [0, 1, 5, 10] {
            assert!(!clock.over_with(BUDGET, ms(wall), || {
                reads += 1;
                ms(0)
            }));
        }
        assert_eq!(reads, 0);
    }

    #[test]
    fn time_spent_waiting_for_a_core_is_not_charged() {
        let mut clock = EvalClock::start();
        // Marked at 20 ms of wall time with 5 ms of CPU; then 1 s of wall time passes with
        // 100 ms more of CPU: 20 + 100 ms charged.
        assert!(!clock.over_with(BUDGET, ms(20), || ms(5)));
        assert!(!clock.over_with(BUDGET, ms(1_000), || ms(105)));
        // 231 ms more of CPU (20 + 231 > 250), read once the next millisecond has passed.
        assert!(!clock.over_with(BUDGET, ms(1_000), || ms(336)));
        assert!(clock.over_with(BUDGET, ms(1_002), || ms(336)));
    }

    #[test]
    fn the_wall_time_before_the_mark_is_charged_in_full() {
        let mut clock = EvalClock::start();
        // The first read comes late (a long step): all 300 ms of wall time count.
        assert!(clock.over_with(BUDGET, ms(300), || ms(1)));
    }

    #[test]
    fn a_thread_asleep_is_not_charged_and_a_busy_one_is() {
        let mut asleep = EvalClock::start();
        std::thread::sleep(ms(20));
        assert!(!asleep.over(BUDGET), "marks at 20 ms");
        std::thread::sleep(ms(300));
        assert!(!asleep.over(BUDGET), "slept 300 ms past the mark");

        let before = thread_cpu();
        let mut busy = EvalClock::start();
        let mut spins = 0u64;
        while !busy.over(BUDGET) {
            spins = std::hint::black_box(spins + 1);
        }
        let (marked_at, _) = busy.mark.expect("marked");
        let used = thread_cpu() - before;
        assert!(used + marked_at > BUDGET, "stopped after {used:?} of CPU");
    }
}
