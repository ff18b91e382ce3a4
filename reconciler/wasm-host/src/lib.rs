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
//! told apart by their header and run through the same limits and error mapping. A preview1
//! WASI reactor (exporting `_initialize` and `_start`: Go's `-buildmode=c-shared`) runs
//! `_initialize`, then `_start`; [`preinitialize`] runs its `_initialize` once and writes the
//! initialized module (Wizer), whose runs start at `_start`.
//! Runs are synchronous (each drives its own single-threaded executor): call them from
//! `spawn_blocking`, never on an async worker thread.

mod artifacts;
mod child;
mod error;
mod tail;

pub use child::{
    CHILD_SLACK_BYTES, COMPILE_SUBCOMMAND, CompileProcess, KEEP_RESIDENT_BYTES, RUN_SLOTS,
    compile_child_main,
};
use child::{TierKind, engine_config};
pub use error::HostError;
use host::kind_of;

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

mod compile;
mod host;
mod limiter;
mod preinit;
mod run;
pub use compile::*;
pub use limiter::*;
pub use preinit::{INITIALIZE, preinitialize};
use run::*;

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

/// The state behind `lock`, also after a panic while it was held: the state is used as that
/// thread left it (as `parking_lot`'s locks, which the controller uses, never poison), so no
/// later write is skipped (a budget released, a compile child recorded, a module cached) and
/// no later load fails for good.
pub(crate) fn locked<T>(lock: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    lock.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
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
    compile_budget: Arc<Budget>,
    /// Runs in progress, at most the instance pool's size.
    run_slots: Arc<Budget>,
    /// Whether the optimized engine has its instance pool.
    pooled: bool,
    /// Background optimizations finished (baseline code replaced).
    optimized_in_background: Arc<AtomicU64>,
    /// Whether baseline code is replaced by optimized code in the background
    /// ([`Host::set_background_optimization`]).
    background_optimization: AtomicBool,
    /// Whether first-sight (baseline) artifacts are kept in the on-disk cache too
    /// ([`Host::set_keep_baseline_artifacts`]).
    keep_baseline: AtomicBool,
    /// Core modules at least this large start on the baseline tier.
    baseline_min_bytes: std::sync::atomic::AtomicUsize,
    modules: Mutex<ModuleLru>,
    /// One lock per digest being compiled: concurrent loads of one module compile it once.
    compiling: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    artifacts: Option<Arc<artifacts::Artifacts>>,
    /// Artifacts of the baseline tier (another engine, so other file names in the same
    /// directory): how compile children hand Winch code back, and what a restart runs while
    /// the optimized code is not compiled yet.
    baseline_artifacts: Option<Arc<artifacts::Artifacts>>,
    /// The directory of both artifact stores.
    artifact_root: Option<std::path::PathBuf>,
    /// Compile children, when compiling out of this process.
    process: Option<Arc<CompileProcess>>,
    /// A private artifact directory made for compile children (no on-disk cache), removed
    /// on drop.
    scratch: Option<std::path::PathBuf>,
    /// This host's private directory for Winch code and spooled module bytes (the scratch
    /// directory, or one inside the cache directory), removed on drop.
    work: Option<std::path::PathBuf>,
    /// Compile processes running now (killed on drop).
    children: child::Children,
    /// Compilations stopped by their limits, by digest (`Host::failed_before`).
    failed: Arc<Mutex<Failures>>,
    /// Background optimizations that failed (the module stays on Winch code).
    optimize_failures: Arc<AtomicU64>,
    /// Modules compiled from source (not loaded from memory or disk).
    compilations: AtomicU64,
    stop: Arc<AtomicBool>,
    /// Runs in progress: the epoch ticker sleeps (no wakeups) while there are none.
    running: Arc<std::sync::atomic::AtomicUsize>,
    ticker: std::thread::Thread,
}

/// Failed compilations by digest (or `optimize:<digest>`), with how long they are kept
/// (`None`: until the host is dropped).
type Failures = HashMap<String, (HostError, Option<std::time::Instant>)>;

/// Counts a run in progress for as long as it lives.
struct Running<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
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
        let budget = Arc::new(Budget::new(100));
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
