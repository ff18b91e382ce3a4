//! The work queue and the process, as metrics.
//!
//! - `enoki_queue_depth`: Compositions a change was seen for (their spec, labels or
//!   annotations, an input, a managed object) whose reconcile has not started yet;
//! - `enoki_queue_wait_seconds`: from the first such change to the start of the reconcile it
//!   wakes (timed requeues are not counted: they wait on purpose);
//! - `enoki_reconciles_in_flight`: Composition reconciles running now;
//! - `process_*`: resident and virtual memory, CPU seconds, open file descriptors, threads and
//!   the start time, read from `/proc/self` at each scrape (the names the Prometheus client
//!   libraries of Go and Java use).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// How long a change waits for its reconcile before the queue forgets it.
pub const FORGOTTEN: std::time::Duration = std::time::Duration::from_secs(600);

/// The work queue's metrics and what they are computed from.
#[derive(Debug)]
pub struct Queue {
    depth: Gauge,
    wait: Histogram,
    in_flight: Gauge,
    /// `namespace/name` → when the first change not yet reconciled was seen.
    seen: Mutex<HashMap<String, Instant>>,
}

impl Queue {
    /// Registers the queue's metrics and the process collector.
    pub fn register(registry: &mut Registry) -> std::sync::Arc<Queue> {
        let q = std::sync::Arc::new(Queue {
            depth: Gauge::default(),
            wait: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            in_flight: Gauge::default(),
            seen: Mutex::new(HashMap::new()),
        });
        registry.register(
            "enoki_queue_depth",
            "Compositions with a change seen and no reconcile started for it yet",
            q.depth.clone(),
        );
        registry.register(
            "enoki_queue_wait_seconds",
            "Time from a change seen for a Composition to the start of the reconcile it wakes",
            q.wait.clone(),
        );
        registry.register(
            "enoki_reconciles_in_flight",
            "Composition reconciles running now",
            q.in_flight.clone(),
        );
        registry.register_collector(Box::new(Process));
        q
    }

    /// A change was seen for Composition `key` (`namespace/name`). A change no reconcile took
    /// up within [`FORGOTTEN`] (a Composition of another shard, one the controller skipped) is
    /// forgotten.
    pub fn seen(&self, key: String) {
        {
            let mut s = self.seen.lock();
            let now = Instant::now();
            if s.len() > 1024 {
                s.retain(|_, t| now.duration_since(*t) < FORGOTTEN);
            }
            s.entry(key).or_insert(now);
            self.depth.set(i64::try_from(s.len()).unwrap_or(i64::MAX));
        }
    }

    /// The reconcile of `key` starts: its wait ends. The guard counts it in flight.
    pub fn started(&self, key: &str) -> InFlight<'_> {
        {
            let mut s = self.seen.lock();
            if let Some(t) = s.remove(key) {
                self.wait.observe(t.elapsed().as_secs_f64());
            }
            self.depth.set(i64::try_from(s.len()).unwrap_or(i64::MAX));
        }
        self.in_flight.inc();
        InFlight(self)
    }

    /// Forgets a Composition that is gone.
    pub fn forget(&self, key: &str) {
        {
            let mut s = self.seen.lock();
            s.remove(key);
            self.depth.set(i64::try_from(s.len()).unwrap_or(i64::MAX));
        }
    }
}

/// A reconcile in flight; counted until dropped.
pub struct InFlight<'a>(&'a Queue);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.dec();
    }
}

/// The process's own figures, read from `/proc/self` at each scrape.
#[derive(Debug)]
struct Process;

/// (resident bytes, virtual bytes, cpu seconds, threads, start time in seconds since the
/// epoch) from `/proc/self/stat`, `/proc/self/status` and `/proc/stat`.
fn proc_stat() -> Option<(f64, f64, f64, f64, f64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command (which may hold spaces), counted from field 3 (state).
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
    // /proc counts CPU time in USER_HZ, 100 on Linux whatever the kernel's own tick rate.
    let ticks = 100.0;
    let cpu = (num(11)? + num(12)?) / ticks;
    let threads = num(17)?;
    let start_ticks = num(19)?;
    let vsize = num(20)?;
    // Resident memory in kB from /proc/self/status (no page size to assume).
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:")?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse::<f64>()
                .ok()
        })?
        * 1024.0;
    let boot = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<f64>().ok())?;
    Some((rss, vsize, cpu, threads, boot + start_ticks / ticks))
}

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let Some((rss, vsize, cpu, threads, start)) = proc_stat() else {
            return Ok(());
        };
        let fds = std::fs::read_dir("/proc/self/fd").map_or(0.0, |d| d.count() as f64);
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                rss,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                vsize,
            ),
            ("process_open_fds", "Open file descriptors", fds),
            ("process_threads", "OS threads", threads),
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch in seconds",
                start,
            ),
        ];
        for (name, help, value) in gauges {
            let g = ConstGauge::new(value);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        let c = ConstCounter::new(cpu);
        c.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            c.metric_type(),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_waits_until_its_reconcile_starts_and_counts_in_flight() {
        let mut registry = Registry::default();
        let q = Queue::register(&mut registry);
        q.seen("a/x".into());
        q.seen("a/x".into());
        q.seen("b/y".into());
        assert_eq!(q.depth.get(), 2);
        {
            let _running = q.started("a/x");
            assert_eq!(q.in_flight.get(), 1);
            assert_eq!(q.depth.get(), 1);
        }
        assert_eq!(q.in_flight.get(), 0);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("enoki_queue_wait_seconds_count 1"), "{text}");
        assert!(text.contains("process_resident_memory_bytes "), "{text}");
        assert!(text.contains("process_cpu_seconds_total "), "{text}");
    }
}
