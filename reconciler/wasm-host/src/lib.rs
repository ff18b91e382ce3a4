//! The wasmtime embedding: module bytes + input bytes + limits -> output bytes, or a typed
//! [`HostError`]. Knows nothing of Kubernetes.
//!
//! - One [`Host`] (one `Engine`) per process, with epoch interruption: a background thread
//!   ticks the epoch every [`TICK`], and only the host turns a deadline into ticks.
//! - [`Host::load`] compiles a module once per SHA-256 digest, one compilation at a time per
//!   digest (kept in memory as an `InstancePre`); the on-disk artifact cache (`artifacts`),
//!   keyed by module digest, engine settings and wasmtime version and verified against a
//!   recorded SHA-256 before use, lets a later process load it without compiling
//!   ([`Host::cache_hits`], [`Host::cache_rejected`]).
//! - Each run gets a fresh `Store`: no preopened directories, no sockets, only the caller's
//!   environment, stdin = the input bytes, stdout captured up to the output limit, stderr kept
//!   up to 64 KiB; the sum of all linear memories and tables capped by a store limiter,
//!   plus caps on instances, memories, tables and host-side random buffers ([`STORE_CAPS`]).
//!   Features whose allocations the limiter cannot see are off (multi-memory, memory64,
//!   threads, GC, exceptions, stack switching).
//! - Runs are reproducible by default: the wall clock reads a fixed instant, the monotonic
//!   clock advances a fixed step per read, and randomness comes from a seeded generator.
//!
//! WASI preview1 command modules (`_start`) and preview2 `wasi:cli/command` components are
//! told apart by their header and run through the same limits and error mapping.
//! Runs are synchronous (each drives its own single-threaded executor): call them from
//! `spawn_blocking`, never on an async worker thread.

mod artifacts;
mod error;
mod tail;

pub use error::HostError;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rand_wasi::SeedableRng;
use rand_wasi::rngs::StdRng;
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker as ComponentLinker, ResourceTable};
use wasmtime::{Config, Engine, InstancePre, Linker, Module, ResourceLimiter, Store};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::bindings::CommandPre;
use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, I32Exit, WasiCtxBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// How often the epoch advances; deadlines are rounded up to whole ticks.
pub const TICK: Duration = Duration::from_millis(10);
/// How much stderr is kept for error messages.
pub const STDERR_CAP: usize = 64 * 1024;

/// Limits of one run, in human units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunLimits {
    /// Wall-clock deadline.
    pub deadline: Duration,
    /// Linear memory cap in bytes.
    pub max_memory_bytes: usize,
    /// Stdout cap in bytes.
    pub max_output_bytes: usize,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            deadline: Duration::from_secs(10),
            max_memory_bytes: 256 << 20,
            max_output_bytes: 16 << 20,
        }
    }
}

/// Where a run's clock and randomness come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entropy {
    /// Fixed wall clock (seconds since the Unix epoch), stepped monotonic clock, seeded random.
    Reproducible {
        /// What the wall clock reads.
        wall_clock: Duration,
        /// Seed of every random byte the module sees.
        seed: [u8; 32],
    },
    /// The host's real clocks and randomness.
    Secure,
}

/// One synthesis run.
#[derive(Clone, Copy, Debug)]
pub struct RunRequest<'a> {
    /// `argv[0]` (the synthesizer's name): real WASI programs (Go's runtime, C's `main`)
    /// expect one argument, the program name; nothing else is passed.
    pub program: &'a str,
    /// Bytes on stdin.
    pub input: &'a [u8],
    /// Environment variables.
    pub env: &'a [(String, String)],
    /// Limits.
    pub limits: RunLimits,
    /// Clock and randomness.
    pub entropy: Entropy,
}

/// What a successful run produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunOutput {
    /// Everything written to stdout.
    pub stdout: Vec<u8>,
    /// The last [`STDERR_CAP`] bytes written to stderr (lossy UTF-8).
    pub stderr: String,
    /// Largest linear memory the module grew to, in bytes.
    pub peak_memory_bytes: usize,
}

/// The kind of a module, told apart by its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleKind {
    /// A core module using WASI preview1.
    Preview1,
    /// A component (WASI preview2 `wasi:cli/command`).
    Component,
}

/// Tells a core module from a component by the 8-byte header.
pub fn module_kind(bytes: &[u8]) -> Option<ModuleKind> {
    match bytes.get(..8)? {
        [0, b'a', b's', b'm', 1, 0, 0, 0] => Some(ModuleKind::Preview1),
        [0, b'a', b's', b'm', _, _, 1, 0] => Some(ModuleKind::Component),
        _ => None,
    }
}

/// What `enoki module inspect` shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inspection {
    /// `sha256:<hex>` of the bytes.
    pub digest: String,
    /// Size in bytes.
    pub size: usize,
    /// Core module or component.
    pub kind: ModuleKind,
    /// Imports (`module::name` for core modules, interface names for components).
    pub imports: Vec<String>,
}

/// `sha256:<hex>` of some bytes.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

struct RunState {
    wasi: WasiP1Ctx,
    limiter: StoreLimiter,
}

struct ComponentState {
    ctx: WasiCtx,
    table: ResourceTable,
    limiter: StoreLimiter,
}

impl WasiView for ComponentState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

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
struct StoreLimiter {
    max: usize,
    /// Bytes of memories and tables currently allocated.
    total: usize,
    hit: bool,
    peak: usize,
}

impl StoreLimiter {
    fn new(max: usize) -> StoreLimiter {
        StoreLimiter {
            max,
            total: 0,
            hit: false,
            peak: 0,
        }
    }

    /// Grows the store's total by `desired - current` bytes if it stays under the cap.
    fn grow(&mut self, current: usize, desired: usize) -> bool {
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

struct FixedWallClock(Duration);
impl HostWallClock for FixedWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }
    fn now(&self) -> Duration {
        self.0
    }
}

/// A monotonic clock that advances one millisecond per read.
struct SteppedClock(AtomicU64);
impl HostMonotonicClock for SteppedClock {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        self.0.fetch_add(1_000_000, Ordering::Relaxed)
    }
}

/// A compiled, pre-linked module ready to run any number of times. A large module may start
/// on the baseline tier (Winch) and be swapped, in place for every holder, to the optimized
/// tier (Cranelift) once that finished compiling in the background.
#[derive(Clone)]
pub struct ModulePre {
    digest: String,
    kind: ModuleKind,
    current: Arc<std::sync::RwLock<Arc<Compiled>>>,
}

/// One tier's compilation of a module.
struct Compiled {
    engine: Engine,
    pre: Pre,
    baseline: bool,
}

#[derive(Clone)]
enum Pre {
    Core(InstancePre<RunState>),
    Component(CommandPre<ComponentState>),
}

impl std::fmt::Debug for ModulePre {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModulePre")
            .field("digest", &self.digest)
            .field("kind", &self.kind)
            .finish()
    }
}

impl ModulePre {
    /// `sha256:<hex>` of the module bytes.
    pub fn digest(&self) -> &str {
        &self.digest
    }
    /// The module's kind.
    pub fn kind(&self) -> ModuleKind {
        self.kind
    }
    /// Whether it currently runs baseline-compiled code (its optimized compilation is still
    /// under way in the background).
    pub fn is_baseline(&self) -> bool {
        self.compiled().baseline
    }

    fn new(digest: String, kind: ModuleKind, compiled: Compiled) -> ModulePre {
        ModulePre {
            digest,
            kind,
            current: Arc::new(std::sync::RwLock::new(Arc::new(compiled))),
        }
    }

    fn compiled(&self) -> Arc<Compiled> {
        match self.current.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn replace(&self, compiled: Compiled) {
        let mut slot = match self.current.write() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        *slot = Arc::new(compiled);
    }
}

/// An engine with the linkers of its modules and components.
struct Tier {
    engine: Engine,
    linker: Linker<RunState>,
    component_linker: ComponentLinker<ComponentState>,
}

impl Tier {
    fn new(mut config: Config) -> Result<Tier, HostError> {
        let fail = |e: wasmtime::Error| HostError::Engine {
            message: format!("{e:#}"),
        };
        config.epoch_interruption(true);
        restrict_features(&mut config);
        let engine = Engine::new(&config).map_err(fail)?;
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
    fn core(&self, module: &Module, baseline: bool) -> Result<Compiled, HostError> {
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

/// The memory compilations may take together: shares of it are held while compiling.
struct CompileBudget {
    /// (capacity, in use).
    state: Mutex<(usize, usize)>,
    freed: Condvar,
}

/// A compilation's share of the budget, returned when dropped.
struct CompileShare {
    budget: Arc<CompileBudget>,
    amount: usize,
}

impl CompileBudget {
    fn new(capacity: usize) -> CompileBudget {
        CompileBudget {
            state: Mutex::new((capacity.max(1), 0)),
            freed: Condvar::new(),
        }
    }

    fn set_capacity(&self, capacity: usize) {
        if let Ok(mut s) = self.state.lock() {
            s.0 = capacity.max(1);
        }
        self.freed.notify_all();
    }

    /// Blocks until `want` (at most the whole budget) fits, and takes it.
    fn acquire(self: &Arc<Self>, want: usize) -> CompileShare {
        let mut amount = want;
        if let Ok(mut s) = self.state.lock() {
            amount = want.min(s.0);
            while s.1 + amount > s.0 {
                match self.freed.wait(s) {
                    Ok(next) => s = next,
                    Err(_) => {
                        return CompileShare {
                            budget: self.clone(),
                            amount: 0,
                        };
                    }
                }
                amount = want.min(s.0);
            }
            s.1 += amount;
        }
        CompileShare {
            budget: self.clone(),
            amount,
        }
    }

    /// Bytes held by compilations right now.
    fn in_use(&self) -> usize {
        self.state.lock().map_or(0, |s| s.1)
    }
}

impl Drop for CompileShare {
    fn drop(&mut self) {
        if let Ok(mut s) = self.budget.state.lock() {
            s.1 = s.1.saturating_sub(self.amount);
        }
        self.budget.freed.notify_all();
    }
}

/// Default bound of the in-memory module cache (module source bytes).
pub const DEFAULT_MODULE_CACHE_BYTES: usize = 256 * 1024 * 1024;

/// Compiled modules by digest, least recently used dropped first once their source bytes
/// exceed the capacity (the most recent one is always kept).
struct ModuleLru {
    entries: HashMap<String, (ModulePre, usize, u64)>,
    tick: u64,
    bytes: usize,
    capacity: usize,
}

impl ModuleLru {
    fn new(capacity: usize) -> ModuleLru {
        ModuleLru {
            entries: HashMap::new(),
            tick: 0,
            bytes: 0,
            capacity,
        }
    }

    fn get(&mut self, digest: &str) -> Option<ModulePre> {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(digest).map(|e| {
            e.2 = tick;
            e.0.clone()
        })
    }

    fn insert(&mut self, digest: String, m: ModulePre, size: usize) {
        self.tick += 1;
        if let Some(old) = self.entries.insert(digest, (m, size, self.tick)) {
            self.bytes -= old.1;
        }
        self.bytes += size;
        self.evict();
    }

    fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        self.evict();
    }

    fn evict(&mut self) {
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

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn bytes(&self) -> usize {
        self.bytes
    }
}

/// The process-wide wasm host.
pub struct Host {
    /// Cranelift: every component, every small module, and the code that is cached on disk.
    optimized: Arc<Tier>,
    /// Winch: the first code of large core modules.
    baseline: Arc<Tier>,
    /// One large compilation (foreground or background) at a time: compile memory is bounded
    /// by one [`compile_memory_estimate`] of the largest module.
    large_compile: Arc<Mutex<()>>,
    /// Memory all compilations may take together (their estimates), background ones included.
    compile_budget: Arc<CompileBudget>,
    /// Background optimizations finished (baseline code replaced).
    optimized_in_background: Arc<AtomicU64>,
    /// Core modules at least this large start on the baseline tier.
    baseline_min_bytes: std::sync::atomic::AtomicUsize,
    modules: Mutex<ModuleLru>,
    /// One lock per digest being compiled: concurrent loads of one module compile it once.
    compiling: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    artifacts: Option<Arc<artifacts::Artifacts>>,
    /// Modules compiled from source (not loaded from memory or disk).
    compilations: AtomicU64,
    stop: Arc<AtomicBool>,
    /// Runs in progress: the epoch ticker sleeps (no wakeups) while there are none.
    running: Arc<std::sync::atomic::AtomicUsize>,
    ticker: std::thread::Thread,
}

/// Counts a run in progress for as long as it lives.
struct Running<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.ticker.unpark();
    }
}

impl Host {
    /// Creates the engine (epoch interruption on) and starts its epoch ticker. With
    /// `cache_dir`, compiled artifacts are cached on disk there.
    ///
    /// # Errors
    /// [`HostError::Engine`] when wasmtime rejects the configuration or the cache directory.
    pub fn new(cache_dir: Option<&Path>) -> Result<Host, HostError> {
        // Runs are async (`call_async`): a deadline drops the run's future, which also ends
        // blocking WASI calls (`poll_oneoff` sleeps) that the epoch cannot interrupt.
        let optimized = Arc::new(Tier::new(Config::new())?);
        let mut winch = Config::new();
        winch.strategy(wasmtime::Strategy::Winch);
        let baseline = Arc::new(Tier::new(winch)?);
        let artifacts = cache_dir
            .map(|dir| artifacts::Artifacts::open(dir, &optimized.engine).map(Arc::new))
            .transpose()?;
        let stop = Arc::new(AtomicBool::new(false));
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let engines = [optimized.engine.clone(), baseline.engine.clone()];
        let (flag, busy) = (stop.clone(), running.clone());
        let handle = std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    if busy.load(Ordering::Relaxed) == 0 {
                        // Idle: no wakeups until a run starts (it unparks this thread).
                        std::thread::park_timeout(Duration::from_secs(1));
                        continue;
                    }
                    std::thread::sleep(TICK);
                    for engine in &engines {
                        engine.increment_epoch();
                    }
                }
            })
            .map_err(|e| HostError::Engine {
                message: format!("cannot start the epoch ticker: {e}"),
            })?;
        let ticker = handle.thread().clone();
        Ok(Host {
            optimized,
            baseline,
            large_compile: Arc::new(Mutex::new(())),
            compile_budget: Arc::new(CompileBudget::new(DEFAULT_COMPILE_BUDGET_BYTES)),
            optimized_in_background: Arc::new(AtomicU64::new(0)),
            baseline_min_bytes: std::sync::atomic::AtomicUsize::new(BASELINE_MIN_BYTES),
            modules: Mutex::new(ModuleLru::new(DEFAULT_MODULE_CACHE_BYTES)),
            compiling: Mutex::new(HashMap::new()),
            artifacts,
            compilations: AtomicU64::new(0),
            stop,
            running,
            ticker,
        })
    }

    /// Bounds the memory all compilations of this host may take together to `bytes` (their
    /// estimates, [`compile_memory_estimate`]): a compilation waits until its estimate fits in
    /// what the others leave — foreground, background and components alike. An estimate over
    /// the whole budget takes the whole budget (callers refuse such modules first).
    pub fn set_compile_budget(&self, bytes: usize) {
        self.compile_budget.set_capacity(bytes);
    }

    /// Bounds the in-memory cache of compiled modules to about `bytes` of module source (the
    /// least recently used modules are dropped first; a dropped module is compiled again, or
    /// loaded from the on-disk cache, when it is next needed).
    pub fn set_module_cache_bytes(&self, bytes: usize) {
        if let Ok(mut m) = self.modules.lock() {
            m.set_capacity(bytes);
        }
    }

    /// Estimated bytes the compilations running right now hold of the compile budget.
    pub fn compiling_bytes(&self) -> usize {
        self.compile_budget.in_use()
    }

    /// (modules, bytes) held in the in-memory module cache.
    pub fn module_cache_size(&self) -> (usize, usize) {
        self.modules.lock().map_or((0, 0), |m| (m.len(), m.bytes()))
    }

    /// Artifacts loaded from the on-disk cache instead of being compiled.
    pub fn cache_hits(&self) -> usize {
        self.artifacts.as_ref().map_or(0, |a| a.hits())
    }

    /// Core modules at least `bytes` large start on the baseline tier (default
    /// [`BASELINE_MIN_BYTES`]; `usize::MAX` turns the baseline tier off).
    pub fn set_baseline_min_bytes(&self, bytes: usize) {
        self.baseline_min_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Large modules whose baseline code was replaced by optimized code in the background.
    pub fn optimized_in_background(&self) -> u64 {
        self.optimized_in_background.load(Ordering::Relaxed)
    }

    /// Modules compiled from their bytes (cache misses in memory and on disk).
    pub fn compilations(&self) -> u64 {
        self.compilations.load(Ordering::Relaxed)
    }

    /// Cached artifacts deleted because they failed verification (altered, truncated, or
    /// written by another engine build); each was compiled again.
    pub fn cache_rejected(&self) -> usize {
        self.artifacts.as_ref().map_or(0, |a| a.rejected())
    }

    /// Describes a module without running it: digest, size, kind and imports.
    ///
    /// # Errors
    /// [`HostError::Instantiate`] when the bytes do not compile.
    pub fn inspect(&self, bytes: &[u8]) -> Result<Inspection, HostError> {
        let compile = |e: wasmtime::Error| HostError::Instantiate {
            message: format!("compile: {e:#}"),
        };
        let (kind, imports) = match module_kind(bytes) {
            Some(ModuleKind::Component) => {
                let c = Component::new(&self.optimized.engine, bytes).map_err(compile)?;
                let imports = c
                    .component_type()
                    .imports(&self.optimized.engine)
                    .map(|(name, _)| name.to_string())
                    .collect();
                (ModuleKind::Component, imports)
            }
            _ => {
                let m = Module::validate(&self.optimized.engine, bytes)
                    .and_then(|()| Module::new(&self.baseline.engine, bytes))
                    .map_err(compile)?;
                let imports = m
                    .imports()
                    .map(|i| format!("{}::{}", i.module(), i.name()))
                    .collect();
                (ModuleKind::Preview1, imports)
            }
        };
        Ok(Inspection {
            digest: digest(bytes),
            size: bytes.len(),
            kind,
            imports,
        })
    }

    /// Compiles (once per digest) and pre-links a module or component.
    ///
    /// # Errors
    /// [`HostError::Instantiate`] for bytes that are neither a module nor a component, a
    /// component that is not a `wasi:cli/command`, or imports the host does not provide.
    pub fn load(&self, bytes: &[u8]) -> Result<ModulePre, HostError> {
        let digest = digest(bytes);
        if let Some(m) = self.modules.lock().map_err(|_| poisoned())?.get(&digest) {
            return Ok(m);
        }
        // Single flight: one compilation per digest, the other callers wait for it.
        let gate = self
            .compiling
            .lock()
            .map_err(|_| poisoned())?
            .entry(digest.clone())
            .or_default()
            .clone();
        let result = {
            let _compiling = gate.lock().map_err(|_| poisoned())?;
            let cached = self.modules.lock().map_err(|_| poisoned())?.get(&digest);
            match cached {
                Some(m) => Ok(m),
                None => self.compile(bytes, digest.clone()),
            }
        };
        if let Ok(mut compiling) = self.compiling.lock() {
            compiling.remove(&digest);
        }
        result
    }

    /// Compiles (or loads the verified on-disk artifact of) a module and pre-links it.
    fn compile(&self, bytes: &[u8], digest: String) -> Result<ModulePre, HostError> {
        let kind = match module_kind(bytes) {
            Some(kind) => kind,
            // WebAssembly text (tests, hand-written guests): wasmtime compiles it.
            None if std::str::from_utf8(bytes).is_ok_and(|t| {
                t.trim_start().starts_with('(') || t.trim_start().starts_with(";;")
            }) =>
            {
                ModuleKind::Preview1
            }
            None => {
                return Err(HostError::Instantiate {
                    message: "not a WebAssembly module or component (bad header)".into(),
                });
            }
        };
        let compiled = match kind {
            ModuleKind::Component => self.component(bytes, &digest)?,
            ModuleKind::Preview1 => {
                if let Some(module) = self.cached(&digest, kind, artifacts::deserialize_module) {
                    self.optimized.core(&module, false)?
                } else if bytes.len() >= self.baseline_min_bytes.load(Ordering::Relaxed) {
                    let _large = self.large_compile.lock().map_err(|_| poisoned())?;
                    let _share = self
                        .compile_budget
                        .acquire(compile_memory_estimate(bytes.len()));
                    self.compilations.fetch_add(1, Ordering::Relaxed);
                    let module =
                        Module::new(&self.baseline.engine, bytes).map_err(compile_error)?;
                    self.baseline.core(&module, true)?
                } else {
                    let _share = self
                        .compile_budget
                        .acquire(compile_memory_estimate(bytes.len()));
                    self.compilations.fetch_add(1, Ordering::Relaxed);
                    let module =
                        Module::new(&self.optimized.engine, bytes).map_err(compile_error)?;
                    store_artifact(self.artifacts.as_deref(), &digest, kind, module.serialize());
                    self.optimized.core(&module, false)?
                }
            }
        };
        let baseline = compiled.baseline;
        let m = ModulePre::new(digest.clone(), kind, compiled);
        self.modules
            .lock()
            .map_err(|_| poisoned())?
            .insert(digest, m.clone(), bytes.len());
        if baseline {
            self.optimize_in_background(&m, bytes.to_vec());
        }
        Ok(m)
    }

    /// A component, from the on-disk cache or compiled (always optimized).
    fn component(&self, bytes: &[u8], digest: &str) -> Result<Compiled, HostError> {
        let kind = ModuleKind::Component;
        let component = match self.cached(digest, kind, artifacts::deserialize_component) {
            Some(c) => c,
            None => {
                let _share = self
                    .compile_budget
                    .acquire(compile_memory_estimate(bytes.len()));
                self.compilations.fetch_add(1, Ordering::Relaxed);
                let c = Component::new(&self.optimized.engine, bytes).map_err(compile_error)?;
                store_artifact(self.artifacts.as_deref(), digest, kind, c.serialize());
                c
            }
        };
        let pre = self
            .optimized
            .component_linker
            .instantiate_pre(&component)
            .map_err(|e| HostError::Instantiate {
                message: format!("{e:#}"),
            })?;
        let pre = CommandPre::new(pre).map_err(|e| HostError::Instantiate {
            message: format!("not a wasi:cli/command component: {e:#}"),
        })?;
        Ok(Compiled {
            engine: self.optimized.engine.clone(),
            pre: Pre::Component(pre),
            baseline: false,
        })
    }

    /// Compiles a baseline module with Cranelift on a background thread (one large
    /// compilation at a time), caches the artifact on disk and swaps it into `module`.
    fn optimize_in_background(&self, module: &ModulePre, bytes: Vec<u8>) {
        let tier = self.optimized.clone();
        let gate = self.large_compile.clone();
        let budget = self.compile_budget.clone();
        let artifacts = self.artifacts.clone();
        let done = self.optimized_in_background.clone();
        let module = module.clone();
        let spawned = std::thread::Builder::new()
            .name("wasm-optimize".into())
            .spawn(move || {
                let Ok(_large) = gate.lock() else {
                    return;
                };
                let _share = budget.acquire(compile_memory_estimate(bytes.len()));
                let Ok(compiled) = Module::new(&tier.engine, &bytes) else {
                    return;
                };
                drop(bytes);
                store_artifact(
                    artifacts.as_deref(),
                    &module.digest,
                    ModuleKind::Preview1,
                    compiled.serialize(),
                );
                if let Ok(c) = tier.core(&compiled, false) {
                    module.replace(c);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        // Without a thread the module keeps running baseline code: slower, still correct.
        drop(spawned);
    }

    /// The verified on-disk artifact of `digest`, deserialized.
    fn cached<T>(
        &self,
        digest: &str,
        kind: ModuleKind,
        deserialize: fn(&Engine, &Path) -> wasmtime::Result<T>,
    ) -> Option<T> {
        let artifacts = self.artifacts.as_ref()?;
        let path = artifacts.read(digest, kind)?;
        match deserialize(&self.optimized.engine, &path) {
            Ok(t) => Some(t),
            Err(_) => {
                artifacts.discard(digest, kind);
                None
            }
        }
    }

    /// Runs a module once in a fresh store.
    ///
    /// # Errors
    /// Every failure is a typed [`HostError`]: `Timeout`, `MemoryLimit`, `OutputTooLarge`,
    /// `Trap` (with the wasm backtrace), `ExitCode` (with the stderr tail), `Instantiate`.
    ///
    /// # Guarantees
    /// Nothing survives between runs; the host process is never affected by the module. The
    /// deadline holds whatever the module does: compute is interrupted by the epoch, and a
    /// module blocked in a host call (a WASI sleep) is dropped when the deadline passes.
    pub fn run(&self, module: &ModulePre, req: RunRequest<'_>) -> Result<RunOutput, HostError> {
        self.running.fetch_add(1, Ordering::Relaxed);
        let _running = Running(&self.running);
        self.ticker.unpark();
        let io = RunIo::new(&req.limits);
        let builder = wasi_builder(&req, &io);
        let limiter = StoreLimiter::new(req.limits.max_memory_bytes);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| HostError::Engine {
                message: format!("cannot start the run's executor: {e}"),
            })?;
        let deadline = req.limits.deadline;
        let ticks = deadline_ticks(deadline);
        let outcome = runtime.block_on(async {
            tokio::time::timeout(deadline, self.call(module, builder, limiter, ticks)).await
        });
        let Ok(outcome) = outcome else {
            return Err(HostError::Timeout { after: deadline });
        };
        let (call, limiter) = outcome?;
        finish(call, &limiter, &io, &req.limits)
    }

    /// Instantiates the module in a fresh store and runs its entry point to completion.
    async fn call(
        &self,
        module: &ModulePre,
        mut builder: WasiCtxBuilder,
        limiter: StoreLimiter,
        ticks: u64,
    ) -> Result<(wasmtime::Result<()>, StoreLimiter), HostError> {
        let compiled = module.compiled();
        let engine = &compiled.engine;
        match &compiled.pre {
            Pre::Core(pre) => {
                let state = RunState {
                    wasi: builder.build_p1(),
                    limiter,
                };
                let mut store = Store::new(engine, state);
                store.limiter(|s| &mut s.limiter);
                store.set_epoch_deadline(ticks);
                store.epoch_deadline_trap();
                let instance = pre
                    .instantiate_async(&mut store)
                    .await
                    .map_err(|e| instantiate_error(&e, &store.data().limiter))?;
                let start = instance
                    .get_typed_func::<(), ()>(&mut store, "_start")
                    .map_err(|e| HostError::Instantiate {
                        message: format!("no _start export: {e:#}"),
                    })?;
                let call = start.call_async(&mut store, ()).await;
                Ok((call, store.into_data().limiter))
            }
            Pre::Component(pre) => {
                let state = ComponentState {
                    ctx: builder.build(),
                    table: ResourceTable::new(),
                    limiter,
                };
                let mut store = Store::new(engine, state);
                store.limiter(|s| &mut s.limiter);
                store.set_epoch_deadline(ticks);
                store.epoch_deadline_trap();
                let command = pre
                    .instantiate_async(&mut store)
                    .await
                    .map_err(|e| instantiate_error(&e, &store.data().limiter))?;
                let call = match command.wasi_cli_run().call_run(&mut store).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(())) => Err(wasmtime::Error::new(I32Exit(1))),
                    Err(e) => Err(e),
                };
                Ok((call, store.into_data().limiter))
            }
        }
    }
}

/// Turns off the WebAssembly features enoki does not need and whose allocations the store
/// limiter would not see or bound (several memories per module, 64-bit memories, shared
/// memories and threads, GC heaps, exceptions, stack switching, async components).
fn restrict_features(config: &mut Config) {
    config
        .wasm_multi_memory(false)
        .wasm_memory64(false)
        .wasm_threads(false)
        .wasm_shared_everything_threads(false)
        .wasm_gc(false)
        .wasm_exceptions(false)
        .wasm_stack_switching(false)
        .wasm_custom_page_sizes(false)
        .wasm_component_model_async(false);
}

/// The run's stdio: stdout captured up to the output cap, stderr's tail kept.
struct RunIo {
    stdout: MemoryOutputPipe,
    stderr: tail::TailPipe,
}

impl RunIo {
    fn new(limits: &RunLimits) -> RunIo {
        RunIo {
            stdout: MemoryOutputPipe::new(limits.max_output_bytes),
            stderr: tail::TailPipe::new(STDERR_CAP),
        }
    }
}

/// The WASI context of one run: argv, stdio, environment, no network, and the request's
/// clocks and randomness.
fn wasi_builder(req: &RunRequest<'_>, io: &RunIo) -> WasiCtxBuilder {
    let mut builder = WasiCtxBuilder::new();
    builder
        .arg(if req.program.is_empty() {
            "synthesizer"
        } else {
            req.program
        })
        .stdin(MemoryInputPipe::new(req.input.to_vec()))
        .stdout(io.stdout.clone())
        .stderr(io.stderr.clone())
        .envs(req.env)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .max_random_size(STORE_CAPS.random_bytes);
    if let Entropy::Reproducible { wall_clock, seed } = req.entropy {
        builder
            .wall_clock(FixedWallClock(wall_clock))
            .monotonic_clock(SteppedClock(AtomicU64::new(0)))
            .secure_random(StdRng::from_seed(seed))
            .insecure_random(StdRng::from_seed(seed))
            .insecure_random_seed(u128::from_le_bytes(
                seed[..16].try_into().unwrap_or_default(),
            ));
    }
    builder
}

/// The deadline in epoch ticks (rounded up, at least one).
fn deadline_ticks(deadline: Duration) -> u64 {
    let ticks = deadline.as_nanos().div_ceil(TICK.as_nanos()).max(1);
    u64::try_from(ticks).unwrap_or(u64::MAX)
}

/// Maps how the entry point returned to the run's output or a typed error.
fn finish(
    call: wasmtime::Result<()>,
    limiter: &StoreLimiter,
    io: &RunIo,
    limits: &RunLimits,
) -> Result<RunOutput, HostError> {
    let stderr_text = String::from_utf8_lossy(&io.stderr.contents()).into_owned();
    let out = io.stdout.contents();
    if let Err(e) = call {
        match classify(&e, limiter, out.len(), &stderr_text, limits) {
            // `exit(0)` is a success.
            Some(HostError::ExitCode { code: 0, .. }) => {}
            Some(err) => return Err(err),
            None => {
                return Err(HostError::Trap {
                    message: e
                        .downcast_ref::<wasmtime::Trap>()
                        .map_or_else(|| format!("{e:#}"), ToString::to_string),
                    backtrace: e
                        .downcast_ref::<wasmtime::WasmBacktrace>()
                        .map(|bt| format!("{bt}"))
                        .unwrap_or_default(),
                    stderr: tail(&stderr_text),
                });
            }
        }
    }
    success(out.to_vec(), stderr_text, limiter, limits)
}

fn success(
    stdout: Vec<u8>,
    stderr: String,
    limiter: &StoreLimiter,
    limits: &RunLimits,
) -> Result<RunOutput, HostError> {
    if stdout.len() >= limits.max_output_bytes {
        return Err(HostError::OutputTooLarge {
            limit: limits.max_output_bytes,
        });
    }
    Ok(RunOutput {
        stdout,
        stderr,
        peak_memory_bytes: limiter.peak,
    })
}

/// The failures with a name of their own (`None`: a plain trap).
fn classify(
    e: &wasmtime::Error,
    limiter: &StoreLimiter,
    written: usize,
    stderr: &str,
    limits: &RunLimits,
) -> Option<HostError> {
    if let Some(exit) = e.downcast_ref::<I32Exit>() {
        return Some(HostError::ExitCode {
            code: exit.0,
            stderr: tail(stderr),
        });
    }
    if written >= limits.max_output_bytes || format!("{e:#}").contains("beyond capacity") {
        return Some(HostError::OutputTooLarge {
            limit: limits.max_output_bytes,
        });
    }
    if let Some(wasmtime::Trap::Interrupt) = e.downcast_ref::<wasmtime::Trap>() {
        return Some(HostError::Timeout {
            after: limits.deadline,
        });
    }
    if limiter.hit {
        return Some(HostError::MemoryLimit {
            limit: limits.max_memory_bytes,
        });
    }
    None
}

/// An instantiation failure: a store cap (memories, tables, instances, initial memory over
/// the limit) is `MemoryLimit`; anything else is `Instantiate`.
fn instantiate_error(e: &wasmtime::Error, limiter: &StoreLimiter) -> HostError {
    let text = format!("{e:#}");
    if limiter.hit || text.contains("resource limit exceeded") {
        return HostError::MemoryLimit { limit: limiter.max };
    }
    HostError::Instantiate { message: text }
}

#[allow(clippy::needless_pass_by_value)] // the shape `map_err` passes
fn compile_error(e: wasmtime::Error) -> HostError {
    HostError::Instantiate {
        message: format!("compile: {e:#}"),
    }
}

/// Writes an optimized artifact to the on-disk cache (if any); failures only cost a later
/// compilation.
fn store_artifact(
    artifacts: Option<&artifacts::Artifacts>,
    digest: &str,
    kind: ModuleKind,
    bytes: wasmtime::Result<Vec<u8>>,
) {
    if let (Some(artifacts), Ok(bytes)) = (artifacts, bytes) {
        artifacts.write(digest, kind, &bytes);
    }
}

fn poisoned() -> HostError {
    HostError::Engine {
        message: "module table lock poisoned".into(),
    }
}

/// The last 4 KiB of stderr, for messages.
fn tail(stderr: &str) -> String {
    let mut start = stderr.len().saturating_sub(4096);
    while !stderr.is_char_boundary(start) {
        start += 1;
    }
    stderr[start..].to_string()
}

#[cfg(test)]
mod compile_budget_tests {
    use super::*;

    #[test]
    fn compilations_wait_until_their_share_fits_and_return_it_when_done() {
        let budget = Arc::new(CompileBudget::new(100));
        let a = budget.acquire(60);
        assert_eq!(budget.in_use(), 60);
        let waiter = {
            let budget = budget.clone();
            std::thread::spawn(move || {
                let _b = budget.acquire(60);
                budget.in_use()
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(budget.in_use(), 60, "the second share waited");
        drop(a);
        assert_eq!(waiter.join().unwrap(), 60);
        assert_eq!(budget.in_use(), 0);
        // More than the whole budget takes the whole budget, never deadlocks.
        let all = budget.acquire(1_000);
        assert_eq!(budget.in_use(), 100);
        drop(all);
    }
}
