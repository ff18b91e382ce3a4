//! The [`Host`]: compiling, caching and loading modules, and running them under their limits.

use super::*;

mod build;
mod files;
mod load;

pub(crate) use files::kind_of;
use files::{
    Deserialize, FAILED_TIMEOUT_KEPT, Source, Spooled, digest_file, file_kind, in_process_file,
    is_pool_limit, load_error, lost_artifact, scratch_dir, work_dir,
};

impl Drop for Host {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.ticker.unpark();
        {
            let children = crate::locked(&self.children);
            for pid in children.iter() {
                if let Some(pid) = rustix::process::Pid::from_raw(*pid as i32) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
        }
        for dir in [&self.scratch, &self.work].into_iter().flatten() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Host {
    /// Creates the engine (epoch interruption on) and starts its epoch ticker. With
    /// `cache_dir`, compiled artifacts are cached on disk there. Modules are compiled in this
    /// process ([`Host::with_compile_process`] compiles them in child processes).
    ///
    /// # Errors
    /// [`HostError::Engine`] when wasmtime rejects the configuration or the cache directory.
    pub fn new(cache_dir: Option<&Path>) -> Result<Host, HostError> {
        Host::with_compile_process(cache_dir, None)
    }

    /// As [`Host::new`]; with `process`, every compilation from module bytes runs in a child
    /// process (module docs of `child`): its memory is never this process's, it is limited to
    /// the compile budget ([`Host::set_compile_budget`]) and killed at its timeout. Without
    /// `cache_dir`, the children's artifacts go to a private temporary directory, removed when
    /// the host is dropped.
    ///
    /// # Errors
    /// [`HostError::Engine`] when wasmtime rejects the configuration or the cache directory.
    pub fn with_compile_process(
        cache_dir: Option<&Path>,
        process: Option<CompileProcess>,
    ) -> Result<Host, HostError> {
        Host::with_run_slots(cache_dir, process, RUN_SLOTS)
    }

    /// As [`Host::with_compile_process`], with an instance pool for `run_slots` runs at once
    /// (more runs wait for a slot). A pool the system refuses (its address-space reservation:
    /// `ulimit -v`, strict overcommit) falls back to allocating each run's memory anew.
    ///
    /// # Errors
    /// [`HostError::Engine`] when wasmtime rejects the configuration or the cache directory.
    pub fn with_run_slots(
        cache_dir: Option<&Path>,
        process: Option<CompileProcess>,
        run_slots: u32,
    ) -> Result<Host, HostError> {
        // Runs are async (`call_async`): a deadline drops the run's future, which also ends
        // blocking WASI calls (`poll_oneoff` sleeps) that the epoch cannot interrupt.
        let run_slots = run_slots.max(1);
        let (optimized, pooled) = match Tier::new(&child::pooled(
            engine_config(TierKind::Optimized),
            run_slots,
        )) {
            Ok(tier) => (Arc::new(tier), true),
            Err(_) => (
                Arc::new(Tier::new(&engine_config(TierKind::Optimized))?),
                false,
            ),
        };
        let baseline = Arc::new(Tier::new(&engine_config(TierKind::Baseline))?);
        let scratch = match (cache_dir, &process) {
            (None, Some(_)) => Some(scratch_dir()?),
            _ => None,
        };
        if let Some(dir) = cache_dir {
            artifacts::remove_stale_temporaries(dir);
        }
        let root = cache_dir.or(scratch.as_deref());
        // With compile processes, Winch code and spooled module bytes never go to the shared
        // cache: a private work directory of this host (the scratch directory, or one inside
        // the cache directory). Compiling in process, Winch code is kept in the cache
        // directory only on request (`set_keep_baseline_artifacts`: `enoki render`), under the
        // baseline engine's own key.
        let work = match (&scratch, cache_dir, &process) {
            (Some(dir), _, _) => Some(dir.clone()),
            (None, Some(dir), Some(_)) => Some(work_dir(dir)?),
            _ => None,
        };
        let open = |dir: Option<&Path>, engine: &Engine| {
            dir.map(|dir| artifacts::Artifacts::open(dir, engine).map(Arc::new))
                .transpose()
        };
        let artifacts = open(root, &optimized.engine)?;
        let baseline_artifacts = open(work.as_deref().or(root), &baseline.engine)?;
        let stop = Arc::new(AtomicBool::new(false));
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let ticker = epoch_ticker(
            [optimized.engine.clone(), baseline.engine.clone()],
            stop.clone(),
            running.clone(),
        )?;
        Ok(Host {
            optimized,
            baseline,
            large_compile: Arc::new(Mutex::new(())),
            compile_budget: Arc::new(Budget::new(DEFAULT_COMPILE_BUDGET_BYTES)),
            run_slots: Arc::new(Budget::new(run_slots as usize)),
            pooled,
            optimized_in_background: Arc::new(AtomicU64::new(0)),
            background_optimization: AtomicBool::new(true),
            keep_baseline: AtomicBool::new(false),
            baseline_min_bytes: std::sync::atomic::AtomicUsize::new(BASELINE_MIN_BYTES),
            modules: Mutex::new(ModuleLru::new(DEFAULT_MODULE_CACHE_BYTES)),
            compiling: Mutex::new(HashMap::new()),
            artifacts,
            baseline_artifacts,
            artifact_root: root.map(Path::to_path_buf),
            work: work.clone(),
            process: process.map(Arc::new),
            scratch,
            children: Arc::default(),
            failed: Arc::default(),
            optimize_failures: Arc::new(AtomicU64::new(0)),
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
        {
            let mut m = crate::locked(&self.modules);
            m.set_capacity(bytes);
        }
    }

    /// Estimated bytes the compilations running right now hold of the compile budget.
    pub fn compiling_bytes(&self) -> usize {
        self.compile_budget.in_use()
    }

    /// (modules, bytes) held in the in-memory module cache.
    pub fn module_cache_size(&self) -> (usize, usize) {
        {
            let m = crate::locked(&self.modules);
            (m.len(), m.bytes())
        }
    }

    /// Bounds the compiled artifacts in the on-disk cache (`cache_dir`) to `bytes` (0:
    /// unbounded); the least recently used are deleted first.
    pub fn set_module_disk_cache_bytes(&self, bytes: u64) {
        for a in [&self.artifacts, &self.baseline_artifacts]
            .into_iter()
            .flatten()
        {
            a.set_max_bytes(bytes);
        }
    }

    /// Keeps first-sight (Winch) code in the on-disk cache as well, under the baseline
    /// engine's own key, and starts from it on a later load (default: no — only optimized
    /// code is cached). For a host that compiles in process with a cache directory (`enoki
    /// render`: a short-lived process never gets to its optimized code); a host with compile
    /// processes keeps none either way.
    pub fn set_keep_baseline_artifacts(&self, on: bool) {
        self.keep_baseline.store(on, Ordering::Relaxed);
    }

    /// Whether a module started on the baseline tier is compiled again, optimized, in the
    /// background (default: yes). A short-lived process (`enoki render`) turns it off: it
    /// would exit before that compilation ends, which only takes CPU from the run.
    pub fn set_background_optimization(&self, on: bool) {
        self.background_optimization.store(on, Ordering::Relaxed);
    }

    /// Artifacts deleted from the on-disk cache to keep it within its bound.
    pub fn disk_cache_evictions(&self) -> usize {
        self.artifacts.as_ref().map_or(0, |a| a.evicted())
    }

    /// Artifacts loaded from the on-disk cache instead of being compiled.
    pub fn cache_hits(&self) -> usize {
        [&self.artifacts, &self.baseline_artifacts]
            .into_iter()
            .flatten()
            .map(|a| a.hits())
            .sum()
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

    /// Whether runs take instances from the pool (`false`: the system refused the pool's
    /// address-space reservation and every run maps its memory anew).
    pub fn pooled(&self) -> bool {
        self.pooled
    }

    /// Background optimizations that failed or were stopped (those modules keep running
    /// Winch code until they are loaded again).
    pub fn optimize_failures(&self) -> u64 {
        self.optimize_failures.load(Ordering::Relaxed)
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
        // Pooled instances are bounded: a run past `RUN_SLOTS` waits for one to end.
        let _slot = self.run_slots.acquire(1);
        self.running.fetch_add(1, Ordering::Relaxed);
        let _running = Running(&self.running);
        self.ticker.unpark();
        let io = RunIo::new(&req.limits);
        let builder = wasi_builder(&req, &io);
        let limiter = StoreLimiter::new(req.limits.max_memory_bytes);
        let runtime = executor()?;
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
    pub(super) async fn call(
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
                let mut store = core_store(engine, &mut builder, limiter, ticks);
                let instance = pre
                    .instantiate_async(&mut store)
                    .await
                    .map_err(|e| instantiate_error(&e, &store.data().limiter))?;
                // A WASI reactor is initialized first (a pre-initialized one no longer
                // exports `_initialize`).
                if let Some(init) = instance.get_func(&mut store, crate::INITIALIZE) {
                    let init =
                        init.typed::<(), ()>(&store)
                            .map_err(|e| HostError::Instantiate {
                                message: format!(
                                    "_initialize is not a function of no arguments: {e:#}"
                                ),
                            })?;
                    if let Err(e) = init.call_async(&mut store, ()).await {
                        if e.downcast_ref::<I32Exit>().is_some_and(|x| x.0 == 0) {
                            return Err(HostError::Instantiate {
                                message: "_initialize exited (status 0) before _start ran".into(),
                            });
                        }
                        return Ok((Err(e), store.into_data().limiter));
                    }
                }
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

/// Starts the thread that ticks the engines' epoch every [`TICK`] while a run is `running`
/// (parked while none is), until `stop`.
fn epoch_ticker(
    engines: [Engine; 2],
    stop: Arc<AtomicBool>,
    running: Arc<std::sync::atomic::AtomicUsize>,
) -> Result<std::thread::Thread, HostError> {
    let handle = std::thread::Builder::new()
        .name("wasm-epoch".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if running.load(Ordering::Relaxed) == 0 {
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
    Ok(handle.thread().clone())
}
