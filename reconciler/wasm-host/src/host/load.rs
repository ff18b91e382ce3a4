//! Loading modules: from bytes, a file or a known digest, the memory and disk caches in
//! front of compilation, and the failures remembered per digest.

use super::*;

impl Host {
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
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(digest)
            .is_some();
        let compiling = crate::locked(&self.compiling).contains_key(digest);
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
    pub(super) fn disk_cached(
        &self,
        digest: &str,
        size: usize,
    ) -> Result<Option<ModulePre>, HostError> {
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
        crate::locked(&self.modules).insert(digest.to_string(), m.clone(), size);
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
    pub(super) fn load_with(
        &self,
        digest: &str,
        compile: impl FnOnce() -> Result<ModulePre, HostError>,
    ) -> Result<ModulePre, HostError> {
        if let Some(m) = crate::locked(&self.modules).get(digest) {
            return Ok(m);
        }
        // Single flight: one compilation per digest, the other callers wait for it.
        let gate = crate::locked(&self.compiling)
            .entry(digest.to_string())
            .or_default()
            .clone();
        let result = {
            let _compiling = gate
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let cached = crate::locked(&self.modules).get(digest);
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
        {
            let mut compiling = crate::locked(&self.compiling);
            compiling.remove(digest);
        }
        result
    }

    /// A compile process's failure for `digest` that is still remembered: running out of the
    /// budget is for good (this host's budget does not change), a timeout for
    /// [`FAILED_TIMEOUT_KEPT`]. Callers that waited for the failed compilation, and retries,
    /// get it without compiling again.
    pub(super) fn failed_before(&self, digest: &str) -> Option<HostError> {
        let mut failed = crate::locked(&self.failed);
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

    pub(super) fn remember_failure(&self, digest: &str, e: &HostError) {
        let until = match e {
            // Deterministic for these bytes and this host: compile errors, link errors, over
            // the pool's limits, over the whole compile budget.
            HostError::CompileMemory { .. } | HostError::Instantiate { .. } => None,
            HostError::CompileTimeout { .. } => {
                Some(std::time::Instant::now() + FAILED_TIMEOUT_KEPT)
            }
            _ => return,
        };
        {
            let mut failed = crate::locked(&self.failed);
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
}
