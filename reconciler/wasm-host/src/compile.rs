//! Compilation: the tiers (Winch first for large modules, Cranelift in the background), the
//! one memory budget over every compilation, and the in-memory LRU of compiled modules.

use super::*;

/// An engine with the linkers of its modules and components.
pub(super) struct Tier {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<RunState>,
    pub(crate) component_linker: ComponentLinker<ComponentState>,
}

impl Tier {
    /// A tier of `config` ([`engine_config`]: the same in compile children).
    pub(super) fn new(config: &Config) -> Result<Tier, HostError> {
        let fail = |e: wasmtime::Error| HostError::Engine {
            message: format!("{e:#}"),
        };
        let engine = Engine::new(config).map_err(fail)?;
        let mut linker: Linker<RunState> = Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |s: &mut RunState| &mut s.wasi)
            .map_err(fail)?;
        let mut component_linker: ComponentLinker<ComponentState> = ComponentLinker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut component_linker).map_err(fail)?;
        Ok(Tier {
            engine,
            linker,
            component_linker,
        })
    }

    /// Pre-links a compiled core module.
    pub(super) fn core(&self, module: &Module, baseline: bool) -> Result<Compiled, HostError> {
        let pre = self
            .linker
            .instantiate_pre(module)
            .map_err(|e| HostError::Instantiate {
                message: format!("{e:#}"),
            })?;
        Ok(Compiled {
            engine: self.engine.clone(),
            pre: Pre::Core(pre),
            baseline,
        })
    }
}

/// Core modules at least this large are first compiled with the baseline compiler (Winch,
/// about 5x faster), so they run within seconds, while the optimizing compiler (Cranelift)
/// works in the background; the optimized code replaces the baseline code when ready and is
/// what the on-disk cache keeps.
pub const BASELINE_MIN_BYTES: usize = 16 << 20;

/// Estimated peak memory of compiling a module of `bytes` bytes: measured for a 92 MB Go
/// module at 17x its size with Cranelift alone and 22.5x for the tiers (Winch code kept while
/// Cranelift compiles); wasmtime builds the native code and its object file in memory. At
/// least 16 MiB.
pub fn compile_memory_estimate(bytes: usize) -> usize {
    bytes.saturating_mul(23).max(16 << 20)
}

/// Default of [`Host::set_compile_budget`].
pub const DEFAULT_COMPILE_BUDGET_BYTES: usize = 2 << 30;

/// A counted budget: the memory compilations may take together (shares of it are held while
/// compiling), or the runs that may hold pooled instances at once.
pub(super) struct Budget {
    /// (capacity, in use).
    pub(crate) state: Mutex<(usize, usize)>,
    pub(crate) freed: Condvar,
}

/// A compilation's share of the budget, returned when dropped.
pub(super) struct Share {
    pub(crate) budget: Arc<Budget>,
    pub(crate) amount: usize,
}

impl Budget {
    pub(super) fn new(capacity: usize) -> Budget {
        Budget {
            state: Mutex::new((capacity.max(1), 0)),
            freed: Condvar::new(),
        }
    }

    pub(super) fn set_capacity(&self, capacity: usize) {
        {
            let mut s = crate::locked(&self.state);
            s.0 = capacity.max(1);
        }
        self.freed.notify_all();
    }

    /// Blocks until `want` (at most the whole budget) fits, and takes it.
    pub(super) fn acquire(self: &Arc<Self>, want: usize) -> Share {
        let mut amount;
        {
            let mut s = crate::locked(&self.state);
            amount = want.min(s.0);
            while s.1 + amount > s.0 {
                s = self
                    .freed
                    .wait(s)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                amount = want.min(s.0);
            }
            s.1 += amount;
        }
        Share {
            budget: self.clone(),
            amount,
        }
    }

    /// A compilation's share: its estimate, at least a quarter of the budget (a compile
    /// process is limited to its share, and small modules may need more than 23 times their
    /// size), at most the whole budget. Blocks until it fits.
    pub(super) fn acquire_compile(self: &Arc<Self>, estimate: usize) -> Share {
        let quarter = crate::locked(&self.state).0 / 4;
        self.acquire(estimate.max(quarter))
    }

    /// The budget.
    pub(super) fn capacity(&self) -> usize {
        crate::locked(&self.state).0
    }

    /// Bytes held by compilations right now.
    pub(super) fn in_use(&self) -> usize {
        crate::locked(&self.state).1
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        {
            let mut s = crate::locked(&self.budget.state);
            s.1 = s.1.saturating_sub(self.amount);
        }
        self.budget.freed.notify_all();
    }
}

/// Default bound of the in-memory module cache (module source bytes).
pub const DEFAULT_MODULE_CACHE_BYTES: usize = 256 * 1024 * 1024;

/// Compiled modules by digest, least recently used dropped first once their source bytes
/// exceed the capacity (the most recent one is always kept).
pub(super) struct ModuleLru {
    pub(crate) entries: HashMap<String, (ModulePre, usize, u64)>,
    pub(crate) tick: u64,
    pub(crate) bytes: usize,
    pub(crate) capacity: usize,
}

impl ModuleLru {
    pub(super) fn new(capacity: usize) -> ModuleLru {
        ModuleLru {
            entries: HashMap::new(),
            tick: 0,
            bytes: 0,
            capacity,
        }
    }

    pub(super) fn get(&mut self, digest: &str) -> Option<ModulePre> {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(digest).map(|e| {
            e.2 = tick;
            e.0.clone()
        })
    }

    pub(super) fn insert(&mut self, digest: String, m: ModulePre, size: usize) {
        self.tick += 1;
        if let Some(old) = self.entries.insert(digest, (m, size, self.tick)) {
            self.bytes -= old.1;
        }
        self.bytes += size;
        self.evict();
    }

    pub(super) fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        self.evict();
    }

    pub(super) fn evict(&mut self) {
        while self.bytes > self.capacity && self.entries.len() > 1 {
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.2)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(e) = self.entries.remove(&oldest) {
                self.bytes -= e.1;
            }
        }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }
}
