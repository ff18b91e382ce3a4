//! Module bytes and files as the host handles them: sources, spooled copies, artifact
//! kinds, and the host's scratch and work directories.

use super::*;

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
    pub(super) fn len(&self) -> usize {
        match self {
            Source::Bytes(bytes) => bytes.len(),
            Source::File { len, .. } => *len,
        }
    }

    pub(super) fn kind(&self) -> Result<ModuleKind, HostError> {
        match self {
            Source::Bytes(bytes) => kind_of(bytes),
            Source::File { kind, .. } => Ok(*kind),
        }
    }

    /// What a compile child reads.
    pub(super) fn input(&self) -> child::ChildInput<'_> {
        match self {
            Source::Bytes(bytes) => child::ChildInput::Bytes(bytes),
            Source::File { path, .. } => child::ChildInput::File(path),
        }
    }
}

/// A module file's kind from its first bytes: a binary module or component, or WebAssembly
/// text (the compile process parses it).
pub(super) fn file_kind(header: &[u8]) -> Result<ModuleKind, HostError> {
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
pub(super) fn in_process_file() -> HostError {
    HostError::Engine {
        message: "a module file is compiled in a compile process (this host has none)".into(),
    }
}

/// The digest, length and first 8 bytes of `file` (from where it is), read in 1 MiB pieces.
pub(super) fn digest_file(file: &mut std::fs::File) -> std::io::Result<(String, usize, Vec<u8>)> {
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
pub(super) fn lost_artifact(digest: &str) -> HostError {
    HostError::Engine {
        message: format!(
            "the compile process wrote no readable artifact for {digest} (is the artifact \
             directory full or shared?)"
        ),
    }
}

/// A private temporary directory for compile children's artifacts (mode 0700, new).
pub(super) fn scratch_dir() -> Result<std::path::PathBuf, HostError> {
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
pub(super) fn process_start(pid: u32) -> std::io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces and parentheses: fields after its last `)`.
    stat.rsplit_once(')')
        .and_then(|(_, after)| after.split_whitespace().nth(19)?.parse().ok())
        .ok_or_else(|| std::io::Error::other("unparsable /proc stat"))
}

/// Downloads and copies of module files older than an hour in a work directory (of a
/// process that started earlier, or another host of this one) (a crashed process's: a live one's last at most the fetch and compile
/// timeouts).
pub(super) fn remove_stale_downloads(work: &Path) {
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
    pub(super) fn len(&self) -> usize {
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
pub(super) fn is_pool_limit(e: &wasmtime::Error) -> bool {
    format!("{e:#}").contains("pooling allocator")
}

/// Why a compiled artifact does not load: over the store caps (a module fault, permanent), or
/// anything else (an engine problem).
pub(super) fn load_error(digest: &str, e: &wasmtime::Error) -> HostError {
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
pub(super) fn work_dir(root: &Path) -> Result<std::path::PathBuf, HostError> {
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
