//! The compile cache of `enoki render` and a local `enoki diff`: the controller's on-disk
//! artifacts (keyed by the module's SHA-256 and the engine) in the user's cache directory, so
//! a second render of a module loads it instead of compiling it.

use std::path::PathBuf;

use crate::cli::RenderArgs;

/// Bound of the CLI's compile cache on disk (the controller's default `--module-cache-dir-mib`).
const CACHE_BYTES: u64 = 1 << 30;

/// The compile cache of `enoki render` and a local `enoki diff`: `--cache-dir`, else the
/// user's cache directory (`$XDG_CACHE_HOME/enoki`, `~/.cache/enoki`); none with
/// `--no-cache` or without a home.
pub fn cache_dir(args: &RenderArgs) -> Option<PathBuf> {
    if args.no_cache {
        return None;
    }
    named_cache_dir(args).or_else(|| {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        var("XDG_CACHE_HOME")
            .filter(|p| p.is_absolute())
            .or_else(|| var("HOME").map(|h| h.join(".cache")))
            .map(|base| base.join("enoki"))
    })
}

/// The cache directory `--cache-dir` (or `ENOKI_CACHE_DIR`) names; empty is none.
fn named_cache_dir(args: &RenderArgs) -> Option<PathBuf> {
    args.cache_dir
        .as_deref()
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}

/// A host with the compile cache of `args` ([`cache_dir`]). A default directory that cannot
/// be used (not creatable, not private to this user) is skipped with a warning: the module
/// is compiled as without one; one named by `--cache-dir` must work.
///
/// # Errors
/// The engine cannot be set up, or the named directory cannot be used.
pub(super) fn cached_host(args: &RenderArgs) -> Result<wasm_host::Host, wasm_host::HostError> {
    let Some(dir) = cache_dir(args) else {
        let host = wasm_host::Host::new(None)?;
        host.set_background_optimization(false);
        return Ok(host);
    };
    let opened = std::fs::create_dir_all(&dir)
        .map_err(|e| wasm_host::HostError::Engine {
            message: format!("{}: {e}", dir.display()),
        })
        .and_then(|()| wasm_host::Host::new(Some(&dir)));
    let host = match opened {
        Ok(host) => {
            host.set_module_disk_cache_bytes(CACHE_BYTES);
            // A render never gets to optimized code: its first-sight code is what to keep.
            host.set_keep_baseline_artifacts(true);
            host
        }
        Err(e) if named_cache_dir(args).is_none() => {
            eprintln!("warning: compile cache {} not used: {e}", dir.display());
            wasm_host::Host::new(None)?
        }
        Err(e) => return Err(e),
    };
    // One render: a background optimization would end with the process, unused.
    host.set_background_optimization(false);
    Ok(host)
}
