//! Compiling in a child process.
//!
//! With [`CompileProcess`] set ([`Host::with_compile_process`]), every compilation from
//! module bytes runs in a child process, the same binary started with [`COMPILE_SUBCOMMAND`]
//! ([`compile_child_main`]):
//!
//! - the module comes on the child's stdin; the child compiles it with the engine settings of
//!   the host (same binary, same [`engine_config`]) and writes the artifact into the host's
//!   artifact directory (the on-disk cache, or a private directory of the process), from
//!   which the host maps it after checking its recorded SHA-256;
//! - the child limits its own address space (`RLIMIT_AS`) to what it maps at start plus its
//!   share of the compile memory budget plus [`CHILD_SLACK_BYTES`] (thread stacks, allocator
//!   arenas): an allocation past it fails and the child dies, the host reports
//!   [`HostError::CompileMemory`] (after one retry with the whole budget);
//! - the host kills the child (`SIGKILL`) when it runs past its timeout and reports
//!   [`HostError::CompileTimeout`]; the child is also killed when the host process dies
//!   (`PR_SET_PDEATHSIG`).
//!
//! The compiler's memory is never the controller's: a module that makes Cranelift or Winch
//! allocate gigabytes (Winch emits one store per local variable, so 10,000 functions of 50,000
//! locals are gigabytes of code from a few kilobytes) costs the child its life, not the host.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wasmtime::{Config, Engine};

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use crate::{HostError, ModuleKind, artifacts, restrict_features};

/// The first argument that makes the binary a compile child ([`compile_child_main`]).
pub const COMPILE_SUBCOMMAND: &str = "__compile-module";

/// Address space a compile child may map beyond its startup size and its compile memory
/// budget: compiler thread stacks and the allocator's per-thread arenas (reserved, mostly
/// never touched).
pub const CHILD_SLACK_BYTES: usize = 128 << 20;

/// How the host starts its compile children.
#[derive(Clone, Debug)]
pub struct CompileProcess {
    /// The program: the running binary (`std::env::current_exe()`).
    pub program: PathBuf,
    /// Arguments before the child's own ([`COMPILE_SUBCOMMAND`] first).
    pub args: Vec<OsString>,
    /// A compilation a caller waits for is killed after this long.
    pub timeout: Duration,
    /// A background compilation (the optimized code of a large module already running on
    /// the baseline tier) is killed after this long.
    pub background_timeout: Duration,
}

/// Which compiler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TierKind {
    /// Cranelift.
    Optimized,
    /// Winch.
    Baseline,
}

impl TierKind {
    fn arg(self) -> &'static str {
        match self {
            TierKind::Optimized => "optimized",
            TierKind::Baseline => "baseline",
        }
    }
}

/// The engine settings of a tier, the same in the host and in its compile children (their
/// artifacts are keyed by the engine's compatibility hash).
pub(crate) fn engine_config(tier: TierKind) -> Config {
    let mut config = Config::new();
    if tier == TierKind::Baseline {
        // Winch compiles the functions; Cranelift still compiles a host-to-wasm trampoline
        // for each function a table or export holds (nearly all of a Go module's), here
        // without optimizations (its default register allocator: the single-pass one is not
        // covered by wasmtime's security support). A module whose optimized compilation fails
        // keeps running them.
        config
            .strategy(wasmtime::Strategy::Winch)
            .cranelift_opt_level(wasmtime::OptLevel::None);
    }
    config.epoch_interruption(true);
    restrict_features(&mut config);
    config
}

/// Runs that may hold pooled instances at once in a host made by [`crate::Host::new`]; the
/// controller sizes its pool from `--max-concurrent-syntheses`. More runs wait for a slot
/// ([`crate::Host::run`]).
pub const RUN_SLOTS: u32 = 4;

/// What stays resident of a pooled linear memory between runs: its pages that were touched,
/// found with the `PAGEMAP_SCAN` ioctl (Linux 6.7+; the lowest addresses otherwise), are
/// reset with `memset` instead of being unmapped, so the next run does not fault them in.
pub const KEEP_RESIDENT_BYTES: usize = 2 << 20;

/// `config` with the pooling instance allocator for `slots` runs at once, for the host's
/// optimized engine (compile children keep the on-demand allocator: the pool reserves address
/// space their limit would refuse; the allocator is not part of an artifact's compatibility
/// hash). Each run may use the whole of [`crate::STORE_CAPS`] (a GC heap takes a memory slot
/// too). Resident between runs, at most: `slots` × (8 memories × [`KEEP_RESIDENT_BYTES`] + 32
/// tables × 64 KiB). Measured on sample 01 with 100 resources: 0.19 ms a warm run instead of
/// 0.32 ms (`make bench`), most of the difference page faults of fresh memory.
pub(crate) fn pooled(mut config: Config, slots: u32) -> Config {
    let caps = crate::STORE_CAPS;
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let slots = slots.max(1);
    let mut pool = wasmtime::PoolingAllocationConfig::new();
    pool.total_component_instances(slots)
        .total_core_instances(slots * count(caps.instances))
        .total_memories(slots * (count(caps.memories) + 1))
        .total_gc_heaps(slots)
        .total_tables(slots * count(caps.tables))
        .total_stacks(slots)
        .max_core_instances_per_component(count(caps.instances))
        .max_memories_per_component(count(caps.memories))
        .max_tables_per_component(count(caps.tables))
        .max_tables_per_module(count(caps.tables))
        .table_elements(caps.table_elements)
        .max_core_instance_size(64 << 20)
        .max_component_instance_size(64 << 20)
        .max_unused_warm_slots(slots)
        .pagemap_scan(wasmtime::Enabled::Auto)
        .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
        .table_keep_resident(64 << 10);
    config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
    config
}

/// What a compile child reads on stdin.
pub(crate) enum ChildInput<'a> {
    /// Bytes held by the caller (written through a pipe).
    Bytes(&'a [u8]),
    /// A file (the module spooled to disk: nothing held in memory while it compiles).
    File(&'a Path),
}

/// The compile children running now, killed when their host is dropped.
pub(crate) type Children = Arc<Mutex<HashSet<u32>>>;

/// Kills (if still running) and reaps a child on every way out, panics included.
struct Reaped<'a> {
    child: std::process::Child,
    running: &'a Children,
}

impl Drop for Reaped<'_> {
    fn drop(&mut self) {
        // Out of the set before it is reaped: a reaped pid may be reused by another process.
        {
            let mut r = crate::locked(self.running);
            r.remove(&self.child.id());
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Runs one compile child and waits for it (at most `timeout`; it is killed then). On
/// success the artifact is in the artifact directory `out` (its `compiled/` directory). The
/// child may map `memory_limit` bytes beyond its startup size (plus [`CHILD_SLACK_BYTES`]).
pub(crate) fn compile_in_child(
    process: &CompileProcess,
    tier: TierKind,
    out: &Path,
    memory_limit: usize,
    timeout: Duration,
    input: &ChildInput<'_>,
    running: &Children,
) -> Result<(), HostError> {
    let engine = |message: String| HostError::Engine { message };
    // Made again if someone emptied the directory while the host runs.
    artifacts::ensure_dir(out).map_err(engine)?;
    let stdin = stdin_of(input)?;
    let child = command(process, tier, out, memory_limit)
        .stdin(stdin)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            engine(format!(
                "cannot start the compile process {}: {e}",
                process.program.display()
            ))
        })?;
    {
        let mut r = crate::locked(running);
        r.insert(child.id());
    }
    let mut child = Reaped { child, running };
    let pid = child.child.id();
    let stdin = child.child.stdin.take();
    let stderr = child.child.stderr.take();
    let started = Instant::now();
    let (status, stderr, timed_out) = std::thread::scope(|s| {
        // A child that dies or is killed mid-read ends the write with an error: ignored.
        let writer = std::thread::Builder::new().spawn_scoped(s, move || {
            if let (Some(mut stdin), ChildInput::Bytes(bytes)) = (stdin, input) {
                let _ = stdin.write_all(bytes);
            }
        });
        let reader = std::thread::Builder::new().spawn_scoped(s, move || read_tail(stderr));
        if writer.is_err() || reader.is_err() {
            // No thread for the pipes: the child is killed and reaped (`Reaped`).
            let _ = child.child.kill();
            let _ = child.child.wait();
            return (
                Err(std::io::Error::other("cannot start a thread for its pipes")),
                String::new(),
                false,
            );
        }
        let (status, timed_out) = wait_until(&mut child.child, started, timeout);
        let stderr = reader.map_or_else(|_| String::new(), |r| r.join().unwrap_or_default());
        (status, stderr, timed_out)
    });
    drop(child);
    let status = status.map_err(|e| engine(format!("the compile process: {e}")))?;
    if !status.success() {
        // A child killed mid-write leaves its temporary file.
        artifacts::remove_temporaries(out, pid);
    }
    if timed_out {
        return Err(HostError::CompileTimeout { after: timeout });
    }
    if status.success() {
        return Ok(());
    }
    failure(status, stderr.trim(), memory_limit)
}

/// The command line of a compile child.
fn command(process: &CompileProcess, tier: TierKind, out: &Path, memory_limit: usize) -> Command {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    let mut command = Command::new(&process.program);
    command
        .args(&process.args)
        .arg("--tier")
        .arg(tier.arg())
        .arg("--out")
        .arg(out)
        .arg("--memory-limit")
        .arg(memory_limit.to_string())
        .arg("--parent")
        .arg(std::process::id().to_string())
        // One extra glibc arena at most (each reserves 64 MiB of address space), and a few
        // compiler threads (each with its own stack) whatever the node's core count.
        .env("MALLOC_ARENA_MAX", "2")
        .env("RAYON_NUM_THREADS", threads.to_string());
    command
}

/// Reads the whole of a child's stderr (a child never blocks on a full pipe), keeping its
/// last 64 KiB.
fn read_tail(stderr: Option<std::process::ChildStderr>) -> String {
    let mut tail: Vec<u8> = Vec::new();
    if let Some(mut stderr) = stderr {
        let mut chunk = [0u8; 8192];
        while let Ok(n) = stderr.read(&mut chunk) {
            if n == 0 {
                break;
            }
            tail.extend_from_slice(&chunk[..n]);
            if tail.len() > 128 << 10 {
                tail.drain(..tail.len() - (64 << 10));
            }
        }
    }
    String::from_utf8_lossy(&tail).into_owned()
}

/// Waits for `child` until `timeout` after `started`, then kills it: its exit status, and
/// whether it was killed for the timeout.
fn wait_until(
    child: &mut std::process::Child,
    started: Instant,
    timeout: Duration,
) -> (std::io::Result<std::process::ExitStatus>, bool) {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return (Ok(status), false),
            Ok(None) if started.elapsed() >= timeout => {
                let _ = child.kill();
                return (child.wait(), true);
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return (Err(e), false);
            }
        }
    }
}

/// The child's stdin: a pipe the module's bytes are written to, or the spooled file.
fn stdin_of(input: &ChildInput<'_>) -> Result<Stdio, HostError> {
    match input {
        ChildInput::Bytes(_) => Ok(Stdio::piped()),
        ChildInput::File(path) => {
            std::fs::File::open(path)
                .map(Stdio::from)
                .map_err(|e| HostError::Engine {
                    message: format!("the module spooled at {}: {e}", path.display()),
                })
        }
    }
}

/// The error of a compile child that exited unsuccessfully (not killed at its timeout).
fn failure(
    status: std::process::ExitStatus,
    stderr: &str,
    memory_limit: usize,
) -> Result<(), HostError> {
    let engine = |message: String| HostError::Engine { message };
    use std::os::unix::process::ExitStatusExt;
    // Rust's allocation-failure handler prints this line, then aborts.
    let alloc_failed = stderr
        .lines()
        .any(|l| l.starts_with("memory allocation of") && l.ends_with("failed"));
    match (status.code(), status.signal()) {
        (Some(EXIT_COMPILE), _) => Err(HostError::Instantiate {
            message: format!("compile: {}", crate::tail(stderr)),
        }),
        (Some(EXIT_MEMORY), _) => Err(HostError::CompileMemory {
            limit: memory_limit,
        }),
        (None, Some(6)) if alloc_failed => Err(HostError::CompileMemory {
            limit: memory_limit,
        }),
        (None, Some(9)) => Err(engine(
            "the compile process was killed by another process (the container's memory \
             limit?)"
                .into(),
        )),
        (_, Some(signal)) => Err(engine(format!(
            "the compile process died of signal {signal}: {}",
            crate::tail(stderr)
        ))),
        (code, _) => Err(engine(format!(
            "the compile process exited with {code:?}: {}",
            crate::tail(stderr)
        ))),
    }
}

/// The child's exit code for a module that does not compile (its error on stderr).
const EXIT_COMPILE: i32 = 2;
/// The child's exit code when the compiler ran out of memory (a fallible allocation failed).
const EXIT_MEMORY: i32 = 3;

/// The compile child: `<binary> __compile-module --tier optimized|baseline --out DIR
/// --memory-limit BYTES`, the module on stdin. Returns the exit code: 0 with the artifact
/// written, 2 when the module does not compile (the error on stderr), 1 for anything else.
pub fn compile_child_main(args: &[OsString]) -> i32 {
    match child(args) {
        Ok(()) => 0,
        Err((code, message)) => {
            eprintln!("{message}");
            code
        }
    }
}

/// The compile child's arguments: tier, artifact directory, memory limit, and the parent's
/// pid when given.
type ChildArgs = (TierKind, PathBuf, u64, Option<u32>);

/// Reads the compile child's arguments ([`ChildArgs`]).
fn child_args(args: &[OsString]) -> Result<ChildArgs, (i32, String)> {
    let (mut tier, mut out, mut limit, mut parent) = (None, None, None, None);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| (1, format!("{} needs a value", flag.to_string_lossy())))?;
        match flag.to_str() {
            Some("--tier") => {
                tier = match value.to_str() {
                    Some("optimized") => Some(TierKind::Optimized),
                    Some("baseline") => Some(TierKind::Baseline),
                    _ => return Err((1, format!("unknown tier {value:?}"))),
                }
            }
            Some("--out") => out = Some(PathBuf::from(value)),
            Some("--memory-limit") => {
                limit = value.to_str().and_then(|v| v.parse::<u64>().ok());
            }
            Some("--parent") => {
                parent = value.to_str().and_then(|v| v.parse::<u32>().ok());
            }
            _ => return Err((1, format!("unknown argument {flag:?}"))),
        }
    }
    let (Some(tier), Some(out), Some(limit)) = (tier, out, limit) else {
        return Err((
            1,
            "usage: __compile-module --tier optimized|baseline --out DIR --memory-limit BYTES \
             [--parent PID]"
                .into(),
        ));
    };
    Ok((tier, out, limit, parent))
}

fn child(args: &[OsString]) -> Result<(), (i32, String)> {
    let fail = |m: String| (1, m);
    // Started as /proc/self/exe, it would be named `exe` in `ps`.
    let _ = std::fs::write("/proc/self/comm", "enoki-compile");
    // Killed with its parent: a compilation nobody waits for stops.
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(|e| fail(format!("prctl: {e}")))?;
    let (tier, out, limit, parent) = child_args(args)?;
    // The parent may have died before the death signal was set: then nobody waits.
    let ppid = rustix::process::getppid().map(|p| p.as_raw_nonzero().get());
    if parent.is_some_and(|p| ppid.and_then(|q| u32::try_from(q).ok()) != Some(p)) {
        return Err(fail(
            "the controller that started this compilation is gone".into(),
        ));
    }
    let start = mapped_bytes().ok_or_else(|| fail("cannot read /proc/self/status".into()))?;
    let cap = start
        .saturating_add(limit)
        .saturating_add(CHILD_SLACK_BYTES as u64);
    rustix::process::setrlimit(
        rustix::process::Resource::As,
        rustix::process::Rlimit {
            current: Some(cap),
            maximum: Some(cap),
        },
    )
    .map_err(|e| fail(format!("setrlimit: {e}")))?;
    let mut bytes = Vec::new();
    std::io::stdin()
        .read_to_end(&mut bytes)
        .map_err(|e| fail(format!("reading the module: {e}")))?;
    let digest = crate::digest(&bytes);
    let kind = crate::kind_of(&bytes).map_err(|e| (EXIT_COMPILE, e.to_string()))?;
    let engine = Engine::new(&engine_config(tier)).map_err(|e| fail(format!("{e:#}")))?;
    let compiled = match kind {
        ModuleKind::Preview1 => engine.precompile_module(&bytes),
        ModuleKind::Component => engine.precompile_component(&bytes),
    }
    .map_err(|e| {
        let code = if e.is::<wasmtime::OutOfMemory>() {
            EXIT_MEMORY
        } else {
            EXIT_COMPILE
        };
        (code, format!("{e:#}"))
    })?;
    drop(bytes);
    // The host made the directory; a child never creates one (a host that is gone removed
    // its private directory, and nothing should bring it back).
    let store =
        artifacts::Artifacts::open_existing(&out, &engine).map_err(|e| fail(e.to_string()))?;
    store
        .write_checked(&digest, kind, &compiled)
        .map_err(|e| fail(format!("writing the artifact: {e}")))
}

/// The process's mapped address space (`VmSize`), in bytes.
fn mapped_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}
