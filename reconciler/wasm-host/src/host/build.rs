//! Compiling: the tier a module gets, the compile child process and its retries, spooling
//! for the background optimization, components, and artifacts read back from disk.

use super::*;

impl Host {
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
                    // A host compiling in process keeps its first-sight code too (the CLI's
                    // cache: the next run starts from it; the optimization starts again).
                    let module = match self.cached_baseline(&digest)? {
                        Some(module) => module,
                        None => self.build_module(TierKind::Baseline, source, &digest)?,
                    };
                    self.baseline.core(&module, true)?
                } else {
                    let module = self.build_module(TierKind::Optimized, source, &digest)?;
                    self.optimized.core(&module, false)?
                }
            }
        };
        let baseline = compiled.baseline;
        let m = ModulePre::new(digest.clone(), kind, compiled);
        crate::locked(&self.modules).insert(digest, m.clone(), source.len());
        let optimize_key = format!("optimize:{}", m.digest());
        if baseline
            && self.background_optimization.load(Ordering::Relaxed)
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
    pub(super) fn build_module(
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
        let store = match tier {
            TierKind::Optimized => self.artifacts.as_deref(),
            TierKind::Baseline if self.keep_baseline.load(Ordering::Relaxed) => {
                self.baseline_artifacts.as_deref()
            }
            TierKind::Baseline => None,
        };
        store_artifact(store, digest, kind, module.serialize());
        Ok(module)
    }

    /// The verified first-sight (Winch) artifact of a module, for a host that compiles in
    /// process and keeps baseline artifacts ([`Host::set_keep_baseline_artifacts`]).
    fn cached_baseline(&self, digest: &str) -> Result<Option<Module>, HostError> {
        if self.process.is_some() || !self.keep_baseline.load(Ordering::Relaxed) {
            return Ok(None);
        }
        self.cached(digest, ModuleKind::Preview1, TierKind::Baseline)
    }

    /// Runs one compile child writing into the host's artifact directory, limited to `limit`
    /// bytes (its share of the compile budget).
    pub(super) fn compile_in_child(
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
    pub(super) fn compile_with_retry(
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
    pub(super) fn handed_over<T: Deserialize>(
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
    pub(super) fn spool(&self, digest: &str, source: &Source<'_>) -> Option<Spooled> {
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
    pub(super) fn component_pre(&self, component: &Component) -> Result<Compiled, HostError> {
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
        let work = Optimize {
            tier: self.optimized.clone(),
            budget: self.compile_budget.clone(),
            artifacts: self.artifacts.clone(),
            process: self.process.clone(),
            root: self.artifact_root.clone(),
            children: self.children.clone(),
            scratch: self.scratch.is_some(),
        };
        let gate = self.large_compile.clone();
        let done = self.optimized_in_background.clone();
        let failures = self.optimize_failures.clone();
        let failed = self.failed.clone();
        let stop = self.stop.clone();
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
                match work
                    .compile(&module, source)
                    .map(|c| work.tier.core(&c, false))
                {
                    Some(Ok(c)) => {
                        module.replace(c);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        failures.fetch_add(1, Ordering::Relaxed);
                        // Not tried again for an hour (each try holds the large-compile gate).
                        {
                            let mut f = crate::locked(&failed);
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
}

/// What the background optimization of a module needs of its host.
struct Optimize {
    tier: Arc<Tier>,
    budget: Arc<Budget>,
    artifacts: Option<Arc<artifacts::Artifacts>>,
    process: Option<Arc<CompileProcess>>,
    root: Option<std::path::PathBuf>,
    children: child::Children,
    scratch: bool,
}

impl Optimize {
    /// The optimized module: compiled in the compile child when the host has one (through the
    /// artifact directory), else here (and kept in the on-disk cache).
    fn compile(&self, module: &ModulePre, source: Spooled) -> Option<Module> {
        let kind = ModuleKind::Preview1;
        let (Some(process), Some(root), Some(store)) = (&self.process, &self.root, &self.artifacts)
        else {
            let _share = self
                .budget
                .acquire_compile(compile_memory_estimate(source.len()));
            let compiled = match &source {
                Spooled::Memory(bytes) => Module::new(&self.tier.engine, bytes).ok(),
                Spooled::File(path) => Module::from_file(&self.tier.engine, path).ok(),
            };
            if let Some(m) = &compiled {
                store_artifact(
                    self.artifacts.as_deref(),
                    &module.digest,
                    kind,
                    m.serialize(),
                );
            }
            return compiled;
        };
        // Another load of the module may have stored it meanwhile.
        let stored = store.read_uncounted(&module.digest, kind).is_some();
        let share = self
            .budget
            .acquire_compile(compile_memory_estimate(source.len()));
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
                &self.children,
            )
            .is_ok();
        drop(share);
        drop(source);
        let loaded = store
            .read_uncounted(&module.digest, kind)
            .filter(|_| compiled)
            .and_then(|path| artifacts::deserialize_module(&self.tier.engine, &path).ok());
        if self.scratch {
            store.remove(&module.digest, kind);
        }
        loaded
    }
}
