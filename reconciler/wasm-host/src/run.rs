//! One run's plumbing: the WASI context, stdin/stdout/stderr pipes, the deadline in epoch
//! ticks, and how a run's end is classified into output or [`HostError`].

use super::*;

/// Turns off the WebAssembly features enoki does not need and whose allocations the store
/// limiter would not see or bound (several memories per module, 64-bit memories, shared
/// memories and threads, GC heaps, exceptions, stack switching, async components).
pub(super) fn restrict_features(config: &mut Config) {
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
pub(super) struct RunIo {
    pub(crate) stdout: MemoryOutputPipe,
    pub(crate) stderr: tail::TailPipe,
}

impl RunIo {
    pub(super) fn new(limits: &RunLimits) -> RunIo {
        RunIo {
            stdout: MemoryOutputPipe::new(limits.max_output_bytes),
            stderr: tail::TailPipe::new(STDERR_CAP),
        }
    }
}

/// The WASI context of one run: argv, stdio, environment, no network, and the request's
/// clocks and randomness.
pub(super) fn wasi_builder(req: &RunRequest<'_>, io: &RunIo) -> WasiCtxBuilder {
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

/// The single-threaded executor that drives one run (or one initialization) of a module.
pub(super) fn executor() -> Result<tokio::runtime::Runtime, HostError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| HostError::Engine {
            message: format!("cannot start the run's executor: {e}"),
        })
}

/// A core module's Store: the WASI context of `builder`, `limiter` over its memories and
/// tables, and a trap after `ticks` epoch ticks.
pub(super) fn core_store(
    engine: &Engine,
    builder: &mut WasiCtxBuilder,
    limiter: StoreLimiter,
    ticks: u64,
) -> Store<RunState> {
    let state = RunState {
        wasi: builder.build_p1(),
        limiter,
    };
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limiter);
    store.set_epoch_deadline(ticks);
    store.epoch_deadline_trap();
    store
}

/// The deadline in epoch ticks (rounded up, at least one).
pub(super) fn deadline_ticks(deadline: Duration) -> u64 {
    let ticks = deadline.as_nanos().div_ceil(TICK.as_nanos()).max(1);
    u64::try_from(ticks).unwrap_or(u64::MAX)
}

/// Maps how the entry point returned to the run's output or a typed error.
pub(super) fn finish(
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

pub(super) fn success(
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
pub(super) fn classify(
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
pub(super) fn instantiate_error(e: &wasmtime::Error, limiter: &StoreLimiter) -> HostError {
    let text = format!("{e:#}");
    if limiter.hit || text.contains("resource limit exceeded") {
        return HostError::MemoryLimit { limit: limiter.max };
    }
    HostError::Instantiate { message: text }
}

#[allow(clippy::needless_pass_by_value)] // the shape `map_err` passes
pub(super) fn compile_error(e: wasmtime::Error) -> HostError {
    HostError::Instantiate {
        message: format!("compile: {e:#}"),
    }
}

/// Writes an optimized artifact to the on-disk cache (if any); failures only cost a later
/// compilation.
pub(super) fn store_artifact(
    artifacts: Option<&artifacts::Artifacts>,
    digest: &str,
    kind: ModuleKind,
    bytes: wasmtime::Result<Vec<u8>>,
) {
    if let (Some(artifacts), Ok(bytes)) = (artifacts, bytes) {
        artifacts.write(digest, kind, &bytes);
    }
}
