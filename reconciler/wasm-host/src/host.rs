//! The [`Host`]: compiling, caching and loading modules, and running them under their limits.

use super::*;

impl Drop for Host {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.ticker.unpark();
        if let Ok(children) = self.children.lock() {
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
        // Winch code and spooled module bytes never go to the shared cache: a private work
        // directory of this host (the scratch directory, or one inside the cache directory).
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
            compile_budget: Arc::new(Budget::new(DEFAULT_COMPILE_BUDGET_BYTES)),
            run_slots: Arc::new(Budget::new(run_slots as usize)),
            pooled,
            optimized_in_background: Arc::new(AtomicU64::new(0)),
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

    /// Bounds the compiled artifacts in the on-disk cache (`cache_dir`) to `bytes` (0:
    /// unbounded); the least recently used are deleted first.
    pub fn set_module_disk_cache_bytes(&self, bytes: u64) {
        if let Some(a) = &self.artifacts {
            a.set_max_bytes(bytes);
        }
    }

    /// Artifacts deleted from the on-disk cache to keep it within its bound.
    pub fn disk_cache_evictions(&self) -> usize {
        self.artifacts.as_ref().map_or(0, |a| a.evicted())
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

    /// Compiles (once per digest) and pre-links a module or component.
    ///
    /// # Errors
    /// [`HostError::Instantiate`] for bytes that are neither a module nor a component, a
    /// component that is not a `wasi:cli/command`, or imports the host does not provide.
    pub fn load(&self, bytes: &[u8]) -> Result<ModulePre, HostError> {
        let digest = digest(bytes);
        self.load_with(&digest, || {
            self.compile(&Source::Bytes(bytes), digest.clone())
        })
    }

    /// A private directory (mode 0700, removed with the host) for module files on their way
    /// to [`Host::load_file`]; `None` when the host compiles in this process (`load_file`
    /// then reads the file into memory anyway).
    ///
    /// # Errors
    /// [`HostError::File`] when the directory cannot be made (a full or read-only disk): the
    /// caller should not fall back to holding the module in memory.
    pub fn download_dir(&self) -> Result<Option<&Path>, HostError> {
        let (Some(_), Some(work)) = (&self.process, &self.work) else {
            return Ok(None);
        };
        artifacts::ensure_dir(work).map_err(|message| HostError::File { message })?;
        Ok(Some(work))
    }

    /// Whether [`Host::load_known`] can answer for the module of `digest` without its bytes:
    /// it is loaded, being compiled, its compilation failed in a way this host remembers, or
    /// its optimized artifact is in the on-disk cache. A caller that knows a module's digest
    /// before fetching it (an OCI layer's descriptor, a URL's pinned SHA-256) need not fetch
    /// it then.
    ///
    /// `on_disk: false` leaves the on-disk cache out (a caller that does not know the module's
    /// size before fetching it, and wants its size checked).
    pub fn knows(&self, digest: &str, on_disk: bool) -> bool {
        let loaded = self
            .modules
            .lock()
            .is_ok_and(|mut m| m.get(digest).is_some());
        let compiling = self.compiling.lock().is_ok_and(|c| c.contains_key(digest));
        let on_disk = on_disk
            && self.artifacts.as_ref().is_some_and(|a| {
                a.has(digest, ModuleKind::Preview1) || a.has(digest, ModuleKind::Component)
            });
        loaded || compiling || on_disk || self.failed_before(digest).is_some()
    }

    /// The module of `digest` without its bytes ([`Host::knows`]): loaded, the outcome of the
    /// compilation under way, the remembered failure, or (with its `size`, counted in the
    /// module cache) mapped from its verified on-disk artifact. Without a size the on-disk
    /// cache is left out.
    ///
    /// # Errors
    /// The remembered or current failure; [`HostError::NotLoaded`] when the host cannot
    /// answer after all (evicted meanwhile, the artifact failed verification): fetch the
    /// bytes and load them.
    pub fn load_known(&self, digest: &str, size: Option<usize>) -> Result<ModulePre, HostError> {
        self.load_with(digest, || {
            let from_disk = match size {
                Some(size) => self.disk_cached(digest, size)?,
                None => None,
            };
            from_disk.ok_or_else(|| HostError::NotLoaded {
                digest: digest.to_string(),
            })
        })
    }

    /// The module of `digest` from its verified optimized artifact, if the on-disk cache has
    /// one, kept in the module cache as `size` bytes.
    fn disk_cached(&self, digest: &str, size: usize) -> Result<Option<ModulePre>, HostError> {
        let (kind, compiled) = if let Some(m) =
            self.cached(digest, ModuleKind::Preview1, TierKind::Optimized)?
        {
            (ModuleKind::Preview1, self.optimized.core(&m, false)?)
        } else if let Some(c) = self.cached(digest, ModuleKind::Component, TierKind::Optimized)? {
            (ModuleKind::Component, self.component_pre(&c)?)
        } else {
            return Ok(None);
        };
        let m = ModulePre::new(digest.to_string(), kind, compiled);
        self.modules
            .lock()
            .map_err(|_| poisoned())?
            .insert(digest.to_string(), m.clone(), size);
        Ok(Some(m))
    }

    /// [`Host::load`] of the module in the file at `path`, which this process never holds in
    /// memory when the host compiles in child processes ([`Host::with_compile_process`]).
    /// The host hashes the file as it streams; a module it does not know yet is then compiled
    /// by child processes reading the file:
    /// - a file in [`Host::download_dir`] is read where it is (a background compilation keeps
    ///   a second link to it, so it may be unlinked or renamed once this returns, but never
    ///   rewritten in place);
    /// - any other file is first copied there (one copy per digest at a time, and none when
    ///   the on-disk cache has the module), the copy's digest checked, and the caller's file
    ///   may change or go once this returns.
    ///
    /// Without compile processes the file is read into memory and loaded as [`Host::load`]
    /// does.
    ///
    /// # Errors
    /// As [`Host::load`]; [`HostError::Instantiate`] for a file that is not a WebAssembly
    /// module, component or text (from its first bytes); [`HostError::File`] naming the
    /// file when it is not a regular file, cannot be read or copied, or changes while it is
    /// copied.
    pub fn load_file(&self, path: &Path) -> Result<ModulePre, HostError> {
        use std::io::{Read as _, Seek as _};
        let unreadable = |e: std::io::Error| HostError::File {
            message: format!("reading the module {}: {e}", path.display()),
        };
        // Opened once: what is checked, hashed and copied is this file, whatever the path
        // names meanwhile.
        let mut file = std::fs::File::open(path).map_err(unreadable)?;
        if !file.metadata().map_err(unreadable)?.is_file() {
            return Err(HostError::File {
                message: format!("the module {} is not a regular file", path.display()),
            });
        }
        let (Some(_), Some(work)) = (&self.process, &self.work) else {
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).map_err(unreadable)?;
            return self.load(&bytes);
        };
        let (digest, len, header) = digest_file(&mut file).map_err(unreadable)?;
        // WebAssembly text compiles too (the compile process tells it from its bytes).
        let kind = file_kind(&header)?;
        if path.parent() == Some(work.as_path()) {
            // A download into `download_dir`: private to this process, compiled where it is.
            let source = Source::File { path, len, kind };
            return self.load_with(&digest, || self.compile(&source, digest.clone()));
        }
        self.load_with(&digest, || {
            if let Some(m) = self.disk_cached(&digest, len)? {
                return Ok(m);
            }
            static NEXT: AtomicU64 = AtomicU64::new(0);
            artifacts::ensure_dir(work).map_err(|message| HostError::File { message })?;
            let target = work.join(format!(
                "incoming-{}.wasm",
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            let mut out = std::fs::File::create_new(&target).map_err(unreadable)?;
            // Ours from here: removed on every way out (a background compilation takes its
            // own link to it).
            let copy = Spooled::File(target);
            let Spooled::File(copied) = &copy else {
                unreachable!("a file")
            };
            file.rewind()
                .and_then(|()| std::io::copy(&mut file, &mut out))
                .map_err(unreadable)?;
            drop(out);
            let mut copy_file = std::fs::File::open(copied).map_err(unreadable)?;
            let (got, len, _) = digest_file(&mut copy_file).map_err(unreadable)?;
            drop(copy_file);
            if got != digest {
                return Err(HostError::File {
                    message: format!(
                        "the module {} changed while it was read (load it again)",
                        path.display()
                    ),
                });
            }
            self.compile(
                &Source::File {
                    path: copied,
                    len,
                    kind,
                },
                digest.clone(),
            )
        })
    }

    /// The cache lookup and single-flight compilation (`compile`) of `load` and `load_file`.
    fn load_with(
        &self,
        digest: &str,
        compile: impl FnOnce() -> Result<ModulePre, HostError>,
    ) -> Result<ModulePre, HostError> {
        if let Some(m) = self.modules.lock().map_err(|_| poisoned())?.get(digest) {
            return Ok(m);
        }
        // Single flight: one compilation per digest, the other callers wait for it.
        let gate = self
            .compiling
            .lock()
            .map_err(|_| poisoned())?
            .entry(digest.to_string())
            .or_default()
            .clone();
        let result = {
            let _compiling = gate
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let cached = self.modules.lock().map_err(|_| poisoned())?.get(digest);
            match cached {
                Some(m) => Ok(m),
                None => match self.failed_before(digest) {
                    Some(e) => Err(e),
                    None => {
                        let result = compile();
                        if let Err(e) = &result {
                            self.remember_failure(digest, e);
                        }
                        result
                    }
                },
            }
        };
        if let Ok(mut compiling) = self.compiling.lock() {
            compiling.remove(digest);
        }
        result
    }

    /// A compile process's failure for `digest` that is still remembered: running out of the
    /// budget is for good (this host's budget does not change), a timeout for
    /// [`FAILED_TIMEOUT_KEPT`]. Callers that waited for the failed compilation, and retries,
    /// get it without compiling again.
    fn failed_before(&self, digest: &str) -> Option<HostError> {
        let mut failed = self.failed.lock().ok()?;
        match failed.get(digest) {
            Some((e, until)) if until.is_none_or(|t| std::time::Instant::now() < t) => {
                Some(e.clone())
            }
            Some(_) => {
                failed.remove(digest);
                None
            }
            None => None,
        }
    }

    fn remember_failure(&self, digest: &str, e: &HostError) {
        let until = match e {
            // Deterministic for these bytes and this host: compile errors, link errors, over
            // the pool's limits, over the whole compile budget.
            HostError::CompileMemory { .. } | HostError::Instantiate { .. } => None,
            HostError::CompileTimeout { .. } => {
                Some(std::time::Instant::now() + FAILED_TIMEOUT_KEPT)
            }
            _ => return,
        };
        if let Ok(mut failed) = self.failed.lock() {
            if failed.len() >= 4096 {
                // Expired entries first, then the cheap ones (compile errors); compile bombs
                // stay remembered.
                let now = std::time::Instant::now();
                failed.retain(|_, (_, until)| until.is_none_or(|t| now < t));
                if failed.len() >= 4096 {
                    failed.retain(|_, (e, _)| matches!(e, HostError::CompileMemory { .. }));
                }
                if failed.len() >= 4096 {
                    failed.clear();
                }
            }
            failed.insert(digest.to_string(), (e.clone(), until));
        }
    }

    /// Compiles (or loads the verified on-disk artifact of) a module and pre-links it.
    pub(super) fn compile(
        &self,
        source: &Source<'_>,
        digest: String,
    ) -> Result<ModulePre, HostError> {
        let kind = source.kind()?;
        let compiled = match kind {
            ModuleKind::Component => self.component(source, &digest)?,
            ModuleKind::Preview1 => {
                let large = source.len() >= self.baseline_min_bytes.load(Ordering::Relaxed);
                if let Some(module) = self.cached(&digest, kind, TierKind::Optimized)? {
                    self.optimized.core(&module, false)?
                } else if large {
                    let _large = self
                        .large_compile
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    let module = self.build_module(TierKind::Baseline, source, &digest)?;
                    self.baseline.core(&module, true)?
                } else {
                    let module = self.build_module(TierKind::Optimized, source, &digest)?;
                    self.optimized.core(&module, false)?
                }
            }
        };
        let baseline = compiled.baseline;
        let m = ModulePre::new(digest.clone(), kind, compiled);
        self.modules
            .lock()
            .map_err(|_| poisoned())?
            .insert(digest, m.clone(), source.len());
        let optimize_key = format!("optimize:{}", m.digest());
        if baseline
            && self.failed_before(&optimize_key).is_none()
            && let Some(spooled) = self.spool(m.digest(), source)
        {
            self.optimize_in_background(&m, spooled);
        }
        Ok(m)
    }

    /// Compiles a core module with `tier` under its share of the compile budget: in a child
    /// process when the host has one (the artifact comes back through the artifact
    /// directory), else here. Optimized artifacts are kept in the on-disk cache.
    fn build_module(
        &self,
        tier: TierKind,
        source: &Source<'_>,
        digest: &str,
    ) -> Result<Module, HostError> {
        let share = self
            .compile_budget
            .acquire_compile(compile_memory_estimate(source.len()));
        self.compilations.fetch_add(1, Ordering::Relaxed);
        let kind = ModuleKind::Preview1;
        if let Some(process) = &self.process {
            self.compile_with_retry(process, tier, &source.input(), share)?;
            return self.handed_over(digest, kind, tier);
        }
        let engine = match tier {
            TierKind::Optimized => &self.optimized.engine,
            TierKind::Baseline => &self.baseline.engine,
        };
        let Source::Bytes(bytes) = source else {
            return Err(in_process_file());
        };
        let module = Module::new(engine, bytes).map_err(compile_error)?;
        if tier == TierKind::Optimized {
            store_artifact(self.artifacts.as_deref(), digest, kind, module.serialize());
        }
        Ok(module)
    }

    /// Runs one compile child writing into the host's artifact directory, limited to `limit`
    /// bytes (its share of the compile budget).
    fn compile_in_child(
        &self,
        process: &CompileProcess,
        tier: TierKind,
        input: &child::ChildInput<'_>,
        limit: usize,
        timeout: Duration,
    ) -> Result<(), HostError> {
        let out = match tier {
            TierKind::Optimized => self.artifact_root.as_deref(),
            TierKind::Baseline => self.work.as_deref().or(self.artifact_root.as_deref()),
        }
        .ok_or_else(|| HostError::Engine {
            message: "compiling in a child process needs an artifact directory".into(),
        })?;
        child::compile_in_child(process, tier, out, limit, timeout, input, &self.children)
    }

    /// Compiles in a child with `share` of the budget; a child that runs out of it is tried
    /// once more with the whole budget (taken alone), since the estimate is only measured on
    /// some modules; both tries together within the child timeout.
    fn compile_with_retry(
        &self,
        process: &CompileProcess,
        tier: TierKind,
        input: &child::ChildInput<'_>,
        share: Share,
    ) -> Result<(), HostError> {
        let started = std::time::Instant::now();
        let first = self.compile_in_child(process, tier, input, share.amount, process.timeout);
        let whole = self.compile_budget.capacity();
        match first {
            Err(HostError::CompileMemory { .. }) if share.amount < whole => {
                drop(share);
                let all = self.compile_budget.acquire(whole);
                // Both tries together stay within the timeout.
                let left = process.timeout.saturating_sub(started.elapsed());
                if left.is_zero() {
                    return Err(HostError::CompileTimeout {
                        after: process.timeout,
                    });
                }
                self.compile_in_child(process, tier, input, all.amount, left)
                    .map_err(|e| match e {
                        HostError::CompileTimeout { .. } => HostError::CompileTimeout {
                            after: process.timeout,
                        },
                        other => other,
                    })
            }
            other => other,
        }
    }

    /// The artifact a compile child wrote, mapped. Winch code is never kept on disk, and
    /// nothing is kept in a private (scratch) directory: the mapping stays valid after the
    /// file is deleted.
    fn handed_over<T: Deserialize>(
        &self,
        digest: &str,
        kind: ModuleKind,
        tier: TierKind,
    ) -> Result<T, HostError> {
        let (store, engine) = match tier {
            TierKind::Optimized => (self.artifacts.as_ref(), &self.optimized.engine),
            TierKind::Baseline => (self.baseline_artifacts.as_ref(), &self.baseline.engine),
        };
        let store = store.ok_or_else(|| lost_artifact(digest))?;
        let path = store
            .read_uncounted(digest, kind)
            .ok_or_else(|| lost_artifact(digest))?;
        let t = T::deserialize(engine, &path).map_err(|e| load_error(digest, &e));
        if tier == TierKind::Baseline || self.scratch.is_some() {
            store.remove(digest, kind);
        }
        t
    }

    /// The module's bytes for its background compilation: in a file next to the artifacts
    /// when compiling in child processes (this process then holds no copy while it
    /// compiles), else in memory.
    fn spool(&self, digest: &str, source: &Source<'_>) -> Option<Spooled> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        if let (Some(_), Some(work)) = (&self.process, &self.work) {
            let path = work.join("compiled").join(format!(
                "{}.wasm.spool-{}",
                digest.trim_start_matches("sha256:"),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            let spooled = artifacts::ensure_dir(work).is_ok()
                && match source {
                    Source::Bytes(bytes) => artifacts::write_private(&path, bytes).is_ok(),
                    // The host's own copy, which nobody changes: a second name for it.
                    Source::File { path: copy, .. } => {
                        std::fs::hard_link(copy, &path).is_ok()
                            || std::fs::copy(copy, &path).is_ok()
                    }
                };
            if spooled {
                return Some(Spooled::File(path));
            }
        }
        match source {
            Source::Bytes(bytes) => Some(Spooled::Memory(bytes.to_vec())),
            // Never read into memory: the module stays on its first code (retried on a later
            // load after a restart).
            Source::File { .. } => None,
        }
    }

    /// A component, from the on-disk cache or compiled (always optimized).
    pub(super) fn component(
        &self,
        source: &Source<'_>,
        digest: &str,
    ) -> Result<Compiled, HostError> {
        let kind = ModuleKind::Component;
        let component = match self.cached(digest, kind, TierKind::Optimized)? {
            Some(c) => c,
            None => {
                let share = self
                    .compile_budget
                    .acquire_compile(compile_memory_estimate(source.len()));
                self.compilations.fetch_add(1, Ordering::Relaxed);
                if let Some(process) = &self.process {
                    let input = source.input();
                    self.compile_with_retry(process, TierKind::Optimized, &input, share)?;
                    self.handed_over(digest, kind, TierKind::Optimized)?
                } else {
                    let Source::Bytes(bytes) = source else {
                        return Err(in_process_file());
                    };
                    let c = Component::new(&self.optimized.engine, bytes).map_err(compile_error)?;
                    store_artifact(self.artifacts.as_deref(), digest, kind, c.serialize());
                    c
                }
            }
        };
        self.component_pre(&component)
    }

    /// A compiled component, pre-linked as a `wasi:cli/command`.
    fn component_pre(&self, component: &Component) -> Result<Compiled, HostError> {
        let pre = self
            .optimized
            .component_linker
            .instantiate_pre(component)
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
    /// compilation at a time; in a child process when the host has one, killed after
    /// [`CompileProcess::background_timeout`]), caches the artifact on disk and swaps it into
    /// `module`. A failure leaves the module on Winch code and is counted
    /// ([`Host::optimize_failures`]).
    pub(super) fn optimize_in_background(&self, module: &ModulePre, source: Spooled) {
        let tier = self.optimized.clone();
        let gate = self.large_compile.clone();
        let budget = self.compile_budget.clone();
        let artifacts = self.artifacts.clone();
        let done = self.optimized_in_background.clone();
        let failures = self.optimize_failures.clone();
        let failed = self.failed.clone();
        let stop = self.stop.clone();
        let process = self.process.clone();
        let root = self.artifact_root.clone();
        let children = self.children.clone();
        let scratch = self.scratch.is_some();
        let module = module.clone();
        let spawned = std::thread::Builder::new()
            .name("wasm-optimize".into())
            .spawn(move || {
                let _large = gate
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if stop.load(Ordering::Relaxed) {
                    return; // the host is gone
                }
                let kind = ModuleKind::Preview1;
                let compiled = match (&process, &root, &artifacts) {
                    (Some(process), Some(root), Some(store)) => {
                        // Another load of the module may have stored it meanwhile.
                        let stored = store.read_uncounted(&module.digest, kind).is_some();
                        let share = budget.acquire_compile(compile_memory_estimate(source.len()));
                        let input = match &source {
                            Spooled::File(path) => child::ChildInput::File(path),
                            Spooled::Memory(bytes) => child::ChildInput::Bytes(bytes),
                        };
                        let compiled = stored
                            || child::compile_in_child(
                                process,
                                TierKind::Optimized,
                                root,
                                share.amount,
                                process.background_timeout,
                                &input,
                                &children,
                            )
                            .is_ok();
                        drop(share);
                        drop(source);
                        let loaded = store
                            .read_uncounted(&module.digest, kind)
                            .filter(|_| compiled)
                            .and_then(|path| {
                                artifacts::deserialize_module(&tier.engine, &path).ok()
                            });
                        if scratch {
                            store.remove(&module.digest, kind);
                        }
                        loaded
                    }
                    _ => {
                        let _share = budget.acquire_compile(compile_memory_estimate(source.len()));
                        let compiled = match &source {
                            Spooled::Memory(bytes) => Module::new(&tier.engine, bytes).ok(),
                            Spooled::File(path) => Module::from_file(&tier.engine, path).ok(),
                        };
                        if let Some(m) = &compiled {
                            store_artifact(
                                artifacts.as_deref(),
                                &module.digest,
                                kind,
                                m.serialize(),
                            );
                        }
                        compiled
                    }
                };
                match compiled.map(|c| tier.core(&c, false)) {
                    Some(Ok(c)) => {
                        module.replace(c);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        failures.fetch_add(1, Ordering::Relaxed);
                        // Not tried again for an hour (each try holds the large-compile gate).
                        if let Ok(mut f) = failed.lock() {
                            let until = std::time::Instant::now() + Duration::from_secs(3600);
                            let e = HostError::Engine {
                                message: "the background optimization failed".into(),
                            };
                            f.insert(format!("optimize:{}", module.digest), (e, Some(until)));
                        }
                    }
                }
            });
        // Without a thread the module keeps running baseline code: slower, still correct.
        drop(spawned);
    }

    /// The verified on-disk artifact of `digest`, deserialized.
    pub(super) fn cached<T: Deserialize>(
        &self,
        digest: &str,
        kind: ModuleKind,
        tier: TierKind,
    ) -> Result<Option<T>, HostError> {
        let (artifacts, engine) = match tier {
            TierKind::Optimized => (self.artifacts.as_ref(), &self.optimized.engine),
            TierKind::Baseline => (self.baseline_artifacts.as_ref(), &self.baseline.engine),
        };
        let Some(artifacts) = artifacts else {
            return Ok(None);
        };
        let Some(path) = artifacts.read(digest, kind) else {
            return Ok(None);
        };
        match T::deserialize(engine, &path) {
            Ok(t) => Ok(Some(t)),
            // Over the instance pool's limits: the artifact is fine, the module is not.
            Err(e) if is_pool_limit(&e) => Err(load_error(digest, &e)),
            Err(_) => {
                artifacts.discard(digest, kind);
                Ok(None)
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
        // Pooled instances are bounded: a run past `RUN_SLOTS` waits for one to end.
        let _slot = self.run_slots.acquire(1);
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

/// What an artifact deserializes into.
pub(super) trait Deserialize: Sized {
    fn deserialize(engine: &Engine, path: &Path) -> wasmtime::Result<Self>;
}

impl Deserialize for Module {
    fn deserialize(engine: &Engine, path: &Path) -> wasmtime::Result<Self> {
        artifacts::deserialize_module(engine, path)
    }
}

impl Deserialize for Component {
    fn deserialize(engine: &Engine, path: &Path) -> wasmtime::Result<Self> {
        artifacts::deserialize_component(engine, path)
    }
}

/// Module bytes as the host compiles them.
pub(super) enum Source<'a> {
    /// Held by the caller.
    Bytes(&'a [u8]),
    /// The host's private copy of a module file (its header already read).
    File {
        path: &'a Path,
        len: usize,
        kind: ModuleKind,
    },
}

impl Source<'_> {
    fn len(&self) -> usize {
        match self {
            Source::Bytes(bytes) => bytes.len(),
            Source::File { len, .. } => *len,
        }
    }

    fn kind(&self) -> Result<ModuleKind, HostError> {
        match self {
            Source::Bytes(bytes) => kind_of(bytes),
            Source::File { kind, .. } => Ok(*kind),
        }
    }

    /// What a compile child reads.
    fn input(&self) -> child::ChildInput<'_> {
        match self {
            Source::Bytes(bytes) => child::ChildInput::Bytes(bytes),
            Source::File { path, .. } => child::ChildInput::File(path),
        }
    }
}

/// A module file's kind from its first bytes: a binary module or component, or WebAssembly
/// text (the compile process parses it).
fn file_kind(header: &[u8]) -> Result<ModuleKind, HostError> {
    if let Some(kind) = module_kind(header) {
        return Ok(kind);
    }
    // Text starts with `(` or a `;;` comment after any whitespace (all whitespace so far:
    // the compile process decides).
    let text = header
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_none_or(|b| *b == b'(' || *b == b';');
    if text {
        Ok(ModuleKind::Preview1)
    } else {
        Err(HostError::Instantiate {
            message: "not a WebAssembly module or component (bad header)".into(),
        })
    }
}

/// Files are compiled by compile processes only.
fn in_process_file() -> HostError {
    HostError::Engine {
        message: "a module file is compiled in a compile process (this host has none)".into(),
    }
}

/// The digest, length and first 8 bytes of `file` (from where it is), read in 1 MiB pieces.
fn digest_file(file: &mut std::fs::File) -> std::io::Result<(String, usize, Vec<u8>)> {
    use std::io::Read as _;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut header = Vec::with_capacity(8);
    let mut len = 0usize;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        if header.len() < 8 {
            let take = (8 - header.len()).min(n);
            header.extend_from_slice(&buf[..take]);
        }
        hasher.update(&buf[..n]);
        len += n;
    }
    Ok((
        format!("sha256:{}", hex::encode(hasher.finalize())),
        len,
        header,
    ))
}

/// The kind of module `bytes` are (WebAssembly text counts as a core module).
pub(crate) fn kind_of(bytes: &[u8]) -> Result<ModuleKind, HostError> {
    match module_kind(bytes) {
        Some(kind) => Ok(kind),
        // WebAssembly text (tests, hand-written guests): wasmtime compiles it.
        None if std::str::from_utf8(bytes)
            .is_ok_and(|t| t.trim_start().starts_with('(') || t.trim_start().starts_with(";;")) =>
        {
            Ok(ModuleKind::Preview1)
        }
        None => Err(HostError::Instantiate {
            message: "not a WebAssembly module or component (bad header)".into(),
        }),
    }
}

/// A compile child succeeded but its artifact cannot be read back.
fn lost_artifact(digest: &str) -> HostError {
    HostError::Engine {
        message: format!(
            "the compile process wrote no readable artifact for {digest} (is the artifact \
             directory full or shared?)"
        ),
    }
}

/// A private temporary directory for compile children's artifacts (mode 0700, new).
fn scratch_dir() -> Result<std::path::PathBuf, HostError> {
    use std::os::unix::fs::DirBuilderExt;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let me = std::process::id();
    let started = process_start(me).unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("enoki-compile-{me}-{started}-{nanos:08x}"));
    // Directories of processes that no longer run (killed before they removed theirs); not
    // judged at all when this process cannot read its own start time.
    let entries = std::fs::read_dir(std::env::temp_dir())
        .ok()
        .filter(|_| started != 0);
    if let Some(entries) = entries {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix("enoki-compile-") else {
                continue;
            };
            let mut parts = rest.split('-');
            let pid = parts.next().and_then(|p| p.parse::<u32>().ok());
            let start = parts.next().and_then(|s| s.parse::<u64>().ok());
            // Its process is gone, or its pid now belongs to a later process (a restarted
            // container's pid is 1 again): told apart by the process's start time.
            let gone = pid.is_some_and(|p| match process_start(p) {
                Ok(now) => start.is_some_and(|s| s != 0 && s != now),
                Err(e) => e.kind() == std::io::ErrorKind::NotFound,
            });
            if gone {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| HostError::Engine {
            message: format!(
                "compiling in child processes needs a writable directory for their artifacts: \
                 {}: {e} (set --module-cache-dir, or TMPDIR)",
                dir.display()
            ),
        })?;
    Ok(dir)
}

/// When process `pid` started (clock ticks after boot, `/proc/<pid>/stat` field 22);
/// `NotFound` when no such process runs.
fn process_start(pid: u32) -> std::io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces and parentheses: fields after its last `)`.
    stat.rsplit_once(')')
        .and_then(|(_, after)| after.split_whitespace().nth(19)?.parse().ok())
        .ok_or_else(|| std::io::Error::other("unparsable /proc stat"))
}

/// Downloads and copies of module files older than an hour in a work directory (of a
/// process that started earlier, or another host of this one) (a crashed process's: a live one's last at most the fetch and compile
/// timeouts).
fn remove_stale_downloads(work: &Path) {
    let Ok(entries) = std::fs::read_dir(work) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(3600));
        if old && (name.starts_with("download-") || name.starts_with("incoming-")) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// A large module's bytes kept for its background compilation.
pub(super) enum Spooled {
    /// Spooled to a private file (deleted when dropped).
    File(std::path::PathBuf),
    /// In memory.
    Memory(Vec<u8>),
}

impl Spooled {
    fn len(&self) -> usize {
        match self {
            Spooled::File(path) => std::fs::metadata(path)
                .ok()
                .and_then(|m| usize::try_from(m.len()).ok())
                .unwrap_or(0),
            Spooled::Memory(bytes) => bytes.len(),
        }
    }
}

impl Drop for Spooled {
    fn drop(&mut self) {
        if let Spooled::File(path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// How long a compilation stopped at its timeout is answered from memory instead of compiled
/// again.
pub const FAILED_TIMEOUT_KEPT: Duration = Duration::from_secs(300);

/// Whether wasmtime refused an artifact because the module exceeds the instance pool's limits
/// (the store caps of every run).
fn is_pool_limit(e: &wasmtime::Error) -> bool {
    format!("{e:#}").contains("pooling allocator")
}

/// Why a compiled artifact does not load: over the store caps (a module fault, permanent), or
/// anything else (an engine problem).
fn load_error(digest: &str, e: &wasmtime::Error) -> HostError {
    if is_pool_limit(e) {
        return HostError::Instantiate {
            message: format!(
                "the module needs more than a run may hold (at most {} instances, {} memories, \
                 {} tables of {} elements each; docs/security.md): {e:#}",
                crate::STORE_CAPS.instances,
                crate::STORE_CAPS.memories,
                crate::STORE_CAPS.tables,
                crate::STORE_CAPS.table_elements
            ),
        };
    }
    HostError::Engine {
        message: format!("the compiled artifact of {digest} does not load: {e:#}"),
    }
}

/// A private work directory of one host inside the cache directory `root` (`0700`, new):
/// Winch code handed over by compile children and spooled module bytes. Work directories
/// older than a day (a host that crashed) are removed.
fn work_dir(root: &Path) -> Result<std::path::PathBuf, HostError> {
    use std::os::unix::fs::DirBuilderExt;
    if let Ok(entries) = std::fs::read_dir(root) {
        for entry in entries.flatten() {
            let stale = entry.file_name().to_string_lossy().starts_with("work-")
                && entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > Duration::from_secs(86_400));
            if stale {
                let _ = std::fs::remove_dir_all(entry.path());
            } else if entry.file_name().to_string_lossy().starts_with("work-") {
                remove_stale_downloads(&entry.path());
            }
        }
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = root.join(format!("work-{}-{nanos:08x}", std::process::id()));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| HostError::Engine {
            message: format!("module cache {}: {e}", dir.display()),
        })?;
    Ok(dir)
}
