//! Pre-initialization of WASI reactors (Wizer, `wasmtime-wizer`): a core module that exports
//! `_initialize` and `_start` is instantiated once, `_initialize` runs (for Go's
//! `-buildmode=c-shared`: the runtime and every package's init), and the memory and globals
//! it leaves are written out as a new module without `_initialize`. Runs of that module
//! start at `_start` with the initialized state, so the work of `_initialize` is paid once,
//! at build time, instead of in every synthesis.
//!
//! The initialization sees what a reproducible run sees with no input: an empty stdin, no
//! environment, argv `synthesizer`, a wall clock at the Unix epoch, randomness from a fixed
//! seed, and a monotonic clock that advances one nanosecond per read (a run's starts again at
//! zero and advances a millisecond per read: its first read may be a few microseconds before
//! the last the initialization saw). What the module reads at initialization is frozen into
//! the snapshot: a module must read its environment, stdin and randomness again in `_start`.

use super::*;
use wasmtime_wizer::{InstanceState, SnapshotVal, ValType, Wizer};

/// The export that initializes a WASI reactor.
pub const INITIALIZE: &str = "_initialize";

/// What one initialization may take: a minute of CPU and 2 GiB of linear memory.
const LIMITS: RunLimits = RunLimits {
    deadline: Duration::from_secs(60),
    max_memory_bytes: 2 << 30,
    max_output_bytes: 1 << 20,
};

/// Pre-initializes the WASI reactor `wasm` (see the module docs): the bytes of the
/// initialized module.
///
/// # Errors
/// [`HostError::Instantiate`] when `wasm` is not a core module exporting `_initialize` and
/// `_start` (a component, a command, bad bytes) or cannot be instrumented or snapshotted;
/// the run's error ([`HostError::Trap`], [`HostError::ExitCode`] with the stderr tail,
/// [`HostError::Timeout`], [`HostError::MemoryLimit`]) when `_initialize` fails.
pub fn preinitialize(wasm: &[u8]) -> Result<Vec<u8>, HostError> {
    if kind_of(wasm)? != ModuleKind::Preview1 {
        return Err(HostError::Instantiate {
            message: "a component cannot be pre-initialized: only a core module (a WASI \
                      reactor exporting _initialize and _start) can"
                .into(),
        });
    }
    let mut wizer = Wizer::new();
    wizer.init_func(INITIALIZE);
    let (cx, instrumented) = wizer
        .instrument(wasm)
        .map_err(invalid("instrumenting the module"))?;
    // Winch: the code runs once, compiling it fast is what matters.
    let tier = Tier::new(&engine_config(TierKind::Baseline))?;
    let module = Module::new(&tier.engine, &instrumented).map_err(invalid("compiling"))?;
    for export in [INITIALIZE, "_start"] {
        if !matches!(
            module.get_export(export),
            Some(wasmtime::ExternType::Func(_))
        ) {
            return Err(HostError::Instantiate {
                message: format!(
                    "the module exports no function {export}: only a WASI reactor exporting \
                     _initialize and _start can be pre-initialized (Go: build with \
                     -buildmode=c-shared and a //go:wasmexport _start function)"
                ),
            });
        }
    }
    let snapshot = initialized(&tier, &module, async |store, instance| {
        let mut state = Initialized {
            store,
            instance,
            unreadable: None,
        };
        let bytes = wizer
            .snapshot(&cx, &mut state)
            .await
            .map_err(invalid("snapshotting the initialized module"))?;
        match state.unreadable {
            Some(name) => Err(HostError::Instantiate {
                message: format!("snapshotting the initialized module: cannot read {name}"),
            }),
            None => Ok(bytes),
        }
    })?;
    let out = without_applied_segments(&snapshot).map_err(invalid("rewriting its data"))?;
    Module::validate(&tier.engine, &out).map_err(invalid("the pre-initialized module"))?;
    Ok(out)
}

/// A wasmtime error as [`HostError::Instantiate`], saying what failed.
fn invalid(what: &'static str) -> impl Fn(wasmtime::Error) -> HostError {
    move |e| HostError::Instantiate {
        message: format!("{what}: {e:#}"),
    }
}

/// Instantiates `module` in a Store of its own (the module docs' WASI context, [`LIMITS`]),
/// calls `_initialize` and hands the instance to `snapshot`.
fn initialized(
    tier: &Tier,
    module: &Module,
    snapshot: impl AsyncFnOnce(&mut Store<RunState>, wasmtime::Instance) -> Result<Vec<u8>, HostError>,
) -> Result<Vec<u8>, HostError> {
    let io = RunIo::new(&LIMITS);
    let request = RunRequest {
        program: "synthesizer",
        input: &[],
        env: &[],
        limits: LIMITS,
        entropy: Entropy::Reproducible {
            wall_clock: Duration::ZERO,
            seed: [0; 32],
        },
    };
    let mut builder = wasi_builder(&request, &io);
    builder.monotonic_clock(NanoClock(AtomicU64::new(1)));
    let runtime = executor()?;
    let done = Arc::new(AtomicBool::new(false));
    let ticker = tick_until(tier.engine.clone(), done.clone());
    let run = async {
        let limiter = StoreLimiter::new(LIMITS.max_memory_bytes);
        let ticks = deadline_ticks(LIMITS.deadline);
        let mut store = core_store(&tier.engine, &mut builder, limiter, ticks);
        let instance = tier
            .linker
            .instantiate_async(&mut store, module)
            .await
            .map_err(|e| instantiate_error(&e, &store.data().limiter))?;
        let init = instance
            .get_typed_func::<(), ()>(&mut store, INITIALIZE)
            .map_err(invalid("_initialize"))?;
        let call = init.call_async(&mut store, ()).await;
        if call.is_err() {
            let limiter = store.into_data().limiter;
            finish(call, &limiter, &io, &LIMITS)?;
            return Err(HostError::Instantiate {
                message: "_initialize exited (with status 0) instead of returning: there is \
                          no initialized state to keep"
                    .into(),
            });
        }
        snapshot(&mut store, instance).await
    };
    // The epoch ends compute past the deadline; the timeout ends a WASI sleep.
    let result = runtime.block_on(async { tokio::time::timeout(LIMITS.deadline, run).await });
    done.store(true, Ordering::Relaxed);
    let _ = ticker.join();
    result.unwrap_or(Err(HostError::Timeout {
        after: LIMITS.deadline,
    }))
}

/// `wasm` without the empty passive data segments Wizer leaves in place of the module's
/// active ones (already applied: their bytes are in the snapshot's segments), when no code can
/// name a segment (no DataCount section: no `memory.init` or `data.drop`). Go's linker emits
/// as many segments as wasm allows (100,000), so the snapshot's own would not fit beside them.
fn without_applied_segments(wasm: &[u8]) -> wasmtime::Result<Vec<u8>> {
    use wasmparser::{DataKind, Parser, Payload};
    let payloads: Vec<Payload<'_>> = Parser::new(0).parse_all(wasm).collect::<Result<_, _>>()?;
    if payloads
        .iter()
        .any(|p| matches!(p, Payload::DataCountSection { .. }))
    {
        return Ok(wasm.to_vec());
    }
    let mut module = wasm_encoder::Module::new();
    for payload in payloads {
        if let Payload::DataSection(reader) = payload {
            let mut data = wasm_encoder::DataSection::new();
            for segment in reader {
                let segment = segment?;
                if !(matches!(segment.kind, DataKind::Passive) && segment.data.is_empty()) {
                    data.raw(&wasm[segment.range.clone()]);
                }
            }
            module.section(&data);
        } else if let Some((id, range)) = payload.as_section() {
            module.section(&wasm_encoder::RawSection {
                id,
                data: &wasm[range],
            });
        }
    }
    Ok(module.finish())
}

/// Advances `engine`'s epoch every [`TICK`] until `done` (the initialization's deadline).
fn tick_until(engine: Engine, done: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !done.load(Ordering::Relaxed) {
            std::thread::sleep(TICK);
            engine.increment_epoch();
        }
    })
}

/// A monotonic clock that advances one nanosecond per read (the initialization's).
struct NanoClock(AtomicU64);

impl HostMonotonicClock for NanoClock {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// The instance whose state the snapshot reads.
struct Initialized<'a> {
    store: &'a mut Store<RunState>,
    instance: wasmtime::Instance,
    /// A global or memory the snapshot asked for that is missing or not a number (the
    /// snapshot is then refused).
    unreadable: Option<String>,
}

impl InstanceState for Initialized<'_> {
    async fn global_get(&mut self, name: &str, _: ValType) -> SnapshotVal {
        let value = self
            .instance
            .get_global(&mut *self.store, name)
            .map(|g| g.get(&mut *self.store));
        match value {
            Some(wasmtime::Val::I32(x)) => SnapshotVal::I32(x),
            Some(wasmtime::Val::I64(x)) => SnapshotVal::I64(x),
            Some(wasmtime::Val::F32(x)) => SnapshotVal::F32(x),
            Some(wasmtime::Val::F64(x)) => SnapshotVal::F64(x),
            Some(wasmtime::Val::V128(x)) => SnapshotVal::V128(x.as_u128()),
            _ => {
                self.unreadable = Some(format!("global {name}"));
                SnapshotVal::I32(0)
            }
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        match self.instance.get_memory(&mut *self.store, name) {
            Some(memory) => contents(memory.data(&*self.store)),
            None => {
                self.unreadable = Some(format!("memory {name}"));
                contents(&[]);
            }
        }
    }
}
