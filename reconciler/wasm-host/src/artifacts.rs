//! The on-disk cache of compiled modules, treated as code.
//!
//! A compiled artifact is native code that wasmtime maps and runs without re-validating it,
//! so a file in this directory is as trusted as the enoki binary. The cache therefore:
//!
//! - keys each artifact by the module's SHA-256 and the engine's compatibility hash (every
//!   setting that affects code generation, and the wasmtime version), so an artifact is never
//!   loaded into an engine that did not produce it;
//! - writes atomically (a temporary file in the same directory, `fsync`, `rename`), the
//!   artifact first and then its SHA-256 in a `.sha256` file next to it, so a crash leaves
//!   either nothing or a complete pair;
//! - hashes the artifact (streamed), checks it against the recorded SHA-256 and only then
//!   maps it (`deserialize_file`: the code is not copied into memory); a missing, partial or altered pair is deleted and the module compiled
//!   again ([`Artifacts::rejected`] counts them);
//! - keeps the artifacts in `<dir>/compiled`, created `0700`, and refuses that directory when
//!   it is a symlink, belongs to another user or can be written by group or others.
//!
//! - is bounded on disk ([`Artifacts::set_max_bytes`]): once its artifacts take more, the least
//!   recently used are deleted (use is a read or a write; the file's modification time records
//!   it), never the one just read or written.
//!
//! The recorded digest detects corruption, truncation and edits of the artifact alone; it
//! cannot stop someone who can write both files, which is why the directory must be
//! writable by enoki's user only (docs/security.md).

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use sha2::{Digest, Sha256};
use wasmtime::Engine;

use crate::{HostError, ModuleKind};

/// A directory of verified compiled artifacts for one engine.
pub(crate) struct Artifacts {
    dir: PathBuf,
    /// Digest of the engine's compatibility hash (settings and wasmtime version).
    engine_key: String,
    hits: AtomicUsize,
    rejected: AtomicUsize,
    /// The bound of the artifacts' bytes on disk (0: unbounded).
    max_bytes: AtomicU64,
    /// Artifacts deleted to keep within the bound.
    evicted: AtomicUsize,
}

/// A [`Hasher`] that feeds SHA-256, so the engine's compatibility hash is stable across
/// processes (`DefaultHasher` is not promised to be).
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    fn finish(&self) -> u64 {
        let d = self.0.clone().finalize();
        u64::from_le_bytes(d[..8].try_into().unwrap_or_default())
    }
}

impl Artifacts {
    /// Opens (creating it `0700` when missing) the cache directory of `engine`.
    ///
    /// # Errors
    /// [`HostError::Engine`] when the directory cannot be created, is not a directory, or
    /// can be written by group or others.
    pub(crate) fn open(root: &Path, engine: &Engine) -> Result<Artifacts, HostError> {
        Artifacts::open_with(root, engine, true)
    }

    /// As [`Artifacts::open`], for a directory that must exist already (a compile child's).
    pub(crate) fn open_existing(root: &Path, engine: &Engine) -> Result<Artifacts, HostError> {
        Artifacts::open_with(root, engine, false)
    }

    fn open_with(root: &Path, engine: &Engine, create: bool) -> Result<Artifacts, HostError> {
        let fail = |message: String| HostError::Engine { message };
        // The artifacts live in `<root>/compiled`, which enoki creates and owns: `root` itself
        // may be a shared mount (a Kubernetes emptyDir is mode 0777).
        let dir = root.join("compiled");
        if !dir.exists() && !create {
            return Err(fail(format!("{} does not exist", dir.display())));
        }
        if !dir.exists() {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|e| fail(format!("module cache {}: {e}", dir.display())))?;
        }
        check_private(&dir).map_err(fail)?;
        let mut h = ShaHasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut h);
        let engine_key = hex::encode(&h.0.finalize()[..12]);
        Ok(Artifacts {
            dir,
            engine_key,
            hits: AtomicUsize::new(0),
            rejected: AtomicUsize::new(0),
            max_bytes: AtomicU64::new(0),
            evicted: AtomicUsize::new(0),
        })
    }

    fn paths(&self, digest: &str, kind: ModuleKind) -> (PathBuf, PathBuf) {
        let kind = match kind {
            ModuleKind::Preview1 => "module",
            ModuleKind::Component => "component",
        };
        let hex = digest.trim_start_matches("sha256:");
        let base = format!("{hex}-{kind}-{}", self.engine_key);
        (
            self.dir.join(format!("{base}.cwasm")),
            self.dir.join(format!("{base}.cwasm.sha256")),
        )
    }

    /// The path of the verified artifact of `digest`, or `None` (nothing cached, or a pair
    /// that failed verification and was deleted). The file is hashed as a stream and then
    /// mapped by the caller, so a large artifact is never held twice in memory.
    pub(crate) fn read(&self, digest: &str, kind: ModuleKind) -> Option<PathBuf> {
        let path = self.read_uncounted(digest, kind)?;
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(path)
    }

    /// As [`Artifacts::read`], not counted as a cache hit (an artifact a compile child just
    /// handed over).
    pub(crate) fn read_uncounted(&self, digest: &str, kind: ModuleKind) -> Option<PathBuf> {
        let (artifact, recorded) = self.paths(digest, kind);
        let expected = match std::fs::read_to_string(&recorded) {
            Ok(expected) => expected,
            // Not text: never verifiable, so never kept.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                self.reject(&artifact, &recorded);
                return None;
            }
            // Missing, or not readable now (kept: it may be readable later).
            Err(_) => return None,
        };
        let actual = std::fs::File::open(&artifact).and_then(|mut f| {
            let mut h = Sha256::new();
            std::io::copy(&mut f, &mut h)?;
            Ok(hex::encode(h.finalize()))
        });
        if actual.ok().as_deref() != Some(expected.trim()) {
            self.reject(&artifact, &recorded);
            return None;
        }
        self.used(&artifact);
        Some(artifact)
    }

    /// Bounds the artifacts on disk to `bytes` (0: unbounded); applied at the next read or
    /// write.
    pub(crate) fn set_max_bytes(&self, bytes: u64) {
        self.max_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Artifacts deleted to keep the cache within its bound.
    pub(crate) fn evicted(&self) -> usize {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Marks `artifact` used now and deletes the least recently used others while the cache
    /// is over its bound. Best effort: the cache is an optimisation.
    fn used(&self, artifact: &Path) {
        if let Ok(f) = std::fs::File::options().append(true).open(artifact) {
            let _ = f.set_modified(std::time::SystemTime::now());
        }
        let max = self.max_bytes.load(Ordering::Relaxed);
        if max == 0 {
            return;
        }
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((m.modified().ok()?, m.len(), e.path()))
            })
            .collect();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        for (_, len, path) in files {
            if total <= max {
                break;
            }
            if path == artifact {
                continue;
            }
            let mut recorded = path.clone().into_os_string();
            recorded.push(".sha256");
            let _ = std::fs::remove_file(recorded);
            if std::fs::remove_file(&path).is_ok() {
                total = total.saturating_sub(len);
                self.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Whether an artifact of `digest` is on disk (not verified: [`Artifacts::read`] does).
    pub(crate) fn has(&self, digest: &str, kind: ModuleKind) -> bool {
        let (artifact, recorded) = self.paths(digest, kind);
        artifact.is_file() && recorded.is_file()
    }

    /// Records that a verified artifact failed to deserialize (another engine build).
    pub(crate) fn discard(&self, digest: &str, kind: ModuleKind) {
        let (artifact, recorded) = self.paths(digest, kind);
        self.hits.fetch_sub(1, Ordering::Relaxed);
        self.reject(&artifact, &recorded);
    }

    fn reject(&self, artifact: &Path, recorded: &Path) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        let _ = std::fs::remove_file(recorded);
        let _ = std::fs::remove_file(artifact);
    }

    /// Stores an artifact and its digest atomically. Failures are ignored (the cache is an
    /// optimisation; the module is compiled again next time).
    pub(crate) fn write(&self, digest: &str, kind: ModuleKind, bytes: &[u8]) {
        let _ = self.write_checked(digest, kind, bytes);
    }

    /// Stores an artifact and its digest atomically, or says why not (nothing is left).
    pub(crate) fn write_checked(
        &self,
        digest: &str,
        kind: ModuleKind,
        bytes: &[u8],
    ) -> std::io::Result<()> {
        let (artifact, recorded) = self.paths(digest, kind);
        let sum = hex::encode(Sha256::digest(bytes));
        let written =
            write_atomic(&artifact, bytes).and_then(|()| write_atomic(&recorded, sum.as_bytes()));
        if written.is_err() {
            let _ = std::fs::remove_file(&artifact);
        } else {
            self.used(&artifact);
        }
        written
    }

    /// Deletes an artifact that is no longer needed (a baseline artifact once the optimized
    /// one is stored); a process that mapped it keeps its mapping.
    pub(crate) fn remove(&self, digest: &str, kind: ModuleKind) {
        let (artifact, recorded) = self.paths(digest, kind);
        let _ = std::fs::remove_file(recorded);
        let _ = std::fs::remove_file(artifact);
    }

    /// Artifacts loaded instead of compiled.
    pub(crate) fn hits(&self) -> usize {
        self.hits.load(Ordering::Relaxed)
    }

    /// Artifacts deleted because they failed verification.
    pub(crate) fn rejected(&self) -> usize {
        self.rejected.load(Ordering::Relaxed)
    }
}

/// A directory (not a symlink) owned by this process's user that no one else can write.
fn check_private(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| format!("module cache {}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("module cache {} is not a directory", dir.display()));
    }
    // /proc/self belongs to the process's effective user.
    let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    if me.is_some_and(|uid| uid != meta.uid()) {
        return Err(format!(
            "module cache {} belongs to uid {}, not to enoki's user: compiled modules are \
             native code, the directory must be enoki's own",
            dir.display(),
            meta.uid()
        ));
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 {
        return Err(format!(
            "module cache {} is writable by other users (mode {:o}): compiled modules are \
             native code, make it writable by enoki's user only (chmod 700)",
            dir.display(),
            mode & 0o777
        ));
    }
    Ok(())
}

/// Writes `bytes` to a new private file (`0600`) at `path`, replacing what is there.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic(path, bytes)
}

/// Writes `bytes` to a temporary file beside `path` and renames it into place.
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let tmp = path.with_extension(format!(
        "tmp-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        // No fsync: a file torn by a crash fails its SHA-256 check and is compiled again.
        f.write_all(bytes)?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Maps a verified core-module artifact.
#[allow(unsafe_code)]
pub(crate) fn deserialize_module(
    engine: &Engine,
    path: &Path,
) -> wasmtime::Result<wasmtime::Module> {
    // SAFETY: wasmtime requires that the file holds `Module::serialize` output of a
    // compatible engine and is not modified while mapped. It is in a cache directory only
    // enoki's user can write (checked in `Artifacts::open`; enoki replaces files by rename,
    // never in place), under a key that includes this engine's compatibility hash, and it
    // matched the SHA-256 recorded when it was written.
    unsafe { wasmtime::Module::deserialize_file(engine, path) }
}

/// Maps a verified component artifact.
#[allow(unsafe_code)]
pub(crate) fn deserialize_component(
    engine: &Engine,
    path: &Path,
) -> wasmtime::Result<wasmtime::component::Component> {
    // SAFETY: as for `deserialize_module`.
    unsafe { wasmtime::component::Component::deserialize_file(engine, path) }
}

/// Creates `<root>/compiled` (mode `0700`) when it is missing.
pub(crate) fn ensure_dir(root: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = root.join("compiled");
    if dir.exists() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("module cache {}: {e}", dir.display()))
}

/// Deletes the temporary files process `pid` left in the artifact directory `root` (a
/// compile child killed while writing).
pub(crate) fn remove_temporaries(root: &Path, pid: u32) {
    let marker = format!(".tmp-{pid}-");
    let Ok(entries) = std::fs::read_dir(root.join("compiled")) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().contains(&marker) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Deletes temporary and spooled files older than an hour (left by a process that crashed;
/// judged by age, not by pid: another pid namespace may share the directory).
pub(crate) fn remove_stale_temporaries(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root.join("compiled")) else {
        return;
    };
    let hour = std::time::Duration::from_secs(3600);
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let temporary = name.contains(".tmp-") || name.contains(".spool-");
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > hour);
        if temporary && old {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_artifacts_go_once_the_cache_is_over_its_bound() {
        let root = std::env::temp_dir().join(format!(
            "enoki-artifacts-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        let cache = Artifacts::open(&root, &Engine::default()).unwrap();
        cache.set_max_bytes(2_500);
        let digest = |i: u8| format!("sha256:{}", hex::encode([i; 32]));
        for i in 0..2 {
            cache.write(&digest(i), ModuleKind::Preview1, &[i; 1_000]);
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // The first is used again: the second is now the least recently used.
        assert!(cache.read(&digest(0), ModuleKind::Preview1).is_some());
        std::thread::sleep(std::time::Duration::from_millis(20));
        cache.write(&digest(2), ModuleKind::Preview1, &[2; 1_000]);
        assert!(cache.has(&digest(0), ModuleKind::Preview1));
        assert!(!cache.has(&digest(1), ModuleKind::Preview1), "evicted");
        assert!(
            cache.has(&digest(2), ModuleKind::Preview1),
            "the one just written stays"
        );
        assert_eq!(cache.evicted(), 1);
        // One artifact over the whole bound is still kept (it is the one in use).
        cache.set_max_bytes(10);
        cache.write(&digest(3), ModuleKind::Preview1, &[3; 1_000]);
        assert!(cache.has(&digest(3), ModuleKind::Preview1));
        let _ = std::fs::remove_dir_all(&root);
    }
}
