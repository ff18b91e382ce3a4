//! What one run may hold: the store's resource limiter (memories, tables, instances) and the
//! deterministic clocks a module sees.

use super::*;

/// Per-store caps on what a guest can make the host allocate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreCaps {
    /// Instances per store (a component has several core instances).
    pub instances: usize,
    /// Linear memories per store (a component's adapter has its own).
    pub memories: usize,
    /// Tables per store.
    pub tables: usize,
    /// Elements per table.
    pub table_elements: usize,
    /// Bytes one `random_get` / `get-random-bytes` call may ask for.
    pub random_bytes: u64,
}

/// Caps used by every run.
pub const STORE_CAPS: StoreCaps = StoreCaps {
    instances: 32,
    memories: 8,
    tables: 32,
    table_elements: 1_000_000,
    random_bytes: 1 << 20,
};

/// Bytes one table element is counted as (a funcref is a pointer plus type data).
pub const TABLE_ELEMENT_BYTES: usize = 16;

/// Enforces [`RunLimits::max_memory_bytes`] over the *sum* of every linear memory and table
/// of the store (not per memory), plus the counts of [`STORE_CAPS`].
pub(super) struct StoreLimiter {
    pub(crate) max: usize,
    /// Bytes of memories and tables currently allocated.
    pub(crate) total: usize,
    pub(crate) hit: bool,
    pub(crate) peak: usize,
}

impl StoreLimiter {
    pub(super) fn new(max: usize) -> StoreLimiter {
        StoreLimiter {
            max,
            total: 0,
            hit: false,
            peak: 0,
        }
    }

    /// Grows the store's total by `desired - current` bytes if it stays under the cap.
    pub(super) fn grow(&mut self, current: usize, desired: usize) -> bool {
        let total = self.total.saturating_sub(current).saturating_add(desired);
        if total > self.max {
            self.hit = true;
            return false;
        }
        self.total = total;
        self.peak = self.peak.max(total);
        true
    }
}

impl ResourceLimiter for StoreLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(self.grow(current, desired))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > STORE_CAPS.table_elements {
            self.hit = true;
            return Ok(false);
        }
        Ok(self.grow(
            current.saturating_mul(TABLE_ELEMENT_BYTES),
            desired.saturating_mul(TABLE_ELEMENT_BYTES),
        ))
    }

    fn instances(&self) -> usize {
        STORE_CAPS.instances
    }

    fn tables(&self) -> usize {
        STORE_CAPS.tables
    }

    fn memories(&self) -> usize {
        STORE_CAPS.memories
    }
}

pub(super) struct FixedWallClock(pub(crate) Duration);

impl HostWallClock for FixedWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }
    fn now(&self) -> Duration {
        self.0
    }
}

/// A monotonic clock that advances one millisecond per read.
pub(super) struct SteppedClock(pub(crate) AtomicU64);

impl HostMonotonicClock for SteppedClock {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        self.0.fetch_add(1_000_000, Ordering::Relaxed)
    }
}
