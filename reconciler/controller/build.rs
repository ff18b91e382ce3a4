//! Build metadata for `enoki version` and `enoki_build_info`: the commit and its date, from git
//! when the source is a checkout (`unknown` otherwise; `ENOKI_COMMIT` / `ENOKI_BUILD_DATE` in
//! the environment win, for builds from a source archive). The date is the commit's, so a
//! rebuild of the same source gives the same binary.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Whether this crate's sources are tracked by the git repository around them (a source archive
/// unpacked inside some other repository is not: its commit is not this source's).
fn in_own_checkout() -> bool {
    git(&["ls-files", "--error-unmatch", "build.rs"]).is_some()
}

fn main() {
    for var in ["ENOKI_COMMIT", "ENOKI_BUILD_DATE"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let own = in_own_checkout();
    // A new commit changes HEAD or the branch it points to (a loose ref, or packed-refs; in a
    // worktree those two live in the common directory).
    if own && let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let common = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"])
            .unwrap_or_else(|| dir.clone());
        // logs/HEAD changes with every commit, whichever way the branch's ref is stored.
        let mut watched = vec![
            format!("{dir}/HEAD"),
            format!("{dir}/logs/HEAD"),
            format!("{common}/packed-refs"),
        ];
        if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watched.push(format!("{common}/{head}"));
        }
        for path in watched {
            // A path that does not exist would make cargo rerun this on every build.
            if std::path::Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    let from_git = |args: &[&str]| if own { git(args) } else { None };
    let commit = std::env::var("ENOKI_COMMIT")
        .ok()
        .or_else(|| from_git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    let date = std::env::var("ENOKI_BUILD_DATE")
        .ok()
        .or_else(|| from_git(&["show", "-s", "--format=%cs", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=ENOKI_COMMIT={commit}");
    println!("cargo:rustc-env=ENOKI_BUILD_DATE={date}");
}
