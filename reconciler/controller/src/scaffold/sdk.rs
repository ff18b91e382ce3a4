//! Where a scaffolded project gets the SDK: the packed files shipped beside the binary (or
//! named), copied into the project; a checkout by path; or the registries.

use std::path::{Path, PathBuf};

use crate::cli::{Lang, NewArgs};

/// The version of the SDK packages a project depends on: this enoki's.
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where a scaffolded project gets the SDK.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SdkSource {
    /// The published packages of [`SDK_VERSION`].
    Registry,
    /// A checkout's `synthesizer-sdk/` directory, by path.
    Dir(PathBuf),
    /// The packed files of `hack/sdk-packages.sh` (same versions).
    Packages(PathBuf),
}

/// The project directory the packed SDK files are copied into.
pub(super) const VENDORED: &str = "sdk-packages";

/// The packed files (relative to the packages directory) a project in `lang` installs.
pub(super) fn vendored_files(lang: Lang) -> Vec<String> {
    let v = SDK_VERSION;
    match lang {
        Lang::Rust => vec![format!("rust/enoki-sdk-{v}")],
        Lang::Go | Lang::Helm => vec!["go".into()],
        Lang::C => Vec::new(),
        Lang::Assemblyscript => vec![format!("npm/enoki-sdk-assemblyscript-{v}.tgz")],
        Lang::Python => vec![format!("python/enoki_sdk-{v}-py3-none-any.whl")],
        Lang::Typescript => vec![format!("npm/enoki-sdk-{v}.tgz")],
    }
}

/// Copies `from` (a file or a directory tree) to `to`.
pub(super) fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    if from.is_dir() {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        return Ok(());
    }
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::copy(from, to).map(|_| ())
}

/// Whether `dir` holds this version's packed SDKs (`hack/sdk-packages.sh`).
fn is_packages(dir: &Path) -> bool {
    dir.join(format!("rust/enoki-sdk-{SDK_VERSION}/Cargo.toml"))
        .is_file()
        && dir.join("SHA256SUMS").is_file()
}

/// Where packages ship beside a binary in `bin`: a release's `sdk/` next to its `bin/`
/// (`dist/bin/enoki-…`, `dist/sdk`), `sdk/` in the binary's own directory, an install
/// prefix's `share/enoki/sdk` (README's install step), a build tree's `target/sdk-packages`.
const SHIPPED: [&str; 4] = ["../sdk", "sdk", "../share/enoki/sdk", "../sdk-packages"];

/// This version's SDK packages shipped beside the binary, or why there are none (the places
/// looked at, and packages of another version found there).
fn shipped_packages() -> Result<PathBuf, String> {
    let exe = std::env::current_exe()
        .and_then(|e| e.canonicalize())
        .map_err(|e| format!("cannot locate the enoki binary: {e}"))?;
    let bin = exe.parent().unwrap_or(Path::new("/"));
    let places: Vec<PathBuf> = SHIPPED.iter().map(|rel| bin.join(rel)).collect();
    if let Some(found) = places.iter().find(|d| is_packages(d)) {
        return found
            .canonicalize()
            .map_err(|e| format!("{}: {e}", found.display()));
    }
    let other: Vec<String> = places
        .iter()
        .filter_map(|d| std::fs::read_dir(d.join("rust")).ok())
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("enoki-sdk-") && !n.ends_with(".crate"))
        .collect();
    let looked: Vec<String> = places.iter().map(|d| d.display().to_string()).collect();
    let mut why = format!("no SDK {SDK_VERSION} packages in {}", looked.join(", "));
    if !other.is_empty() {
        why.push_str(&format!(" (found {}: another version)", other.join(", ")));
    }
    Err(why)
}

/// Where the project gets the SDK, from the options (the message: why the named one is
/// unusable).
pub(super) fn sdk_source(args: &NewArgs) -> Result<SdkSource, String> {
    let canonical = |p: &Path| {
        p.canonicalize()
            .map_err(|e| format!("{}: {e}", p.display()))
    };
    if let Some(p) = &args.sdk_packages {
        let dir = canonical(p)?;
        if !is_packages(&dir) {
            return Err(format!(
                "{} is not the output of hack/sdk-packages.sh for enoki {SDK_VERSION} (it needs \
                 rust/enoki-sdk-{SDK_VERSION}/Cargo.toml and SHA256SUMS)",
                dir.display()
            ));
        }
        return Ok(SdkSource::Packages(dir));
    }
    if args.sdk_registry {
        return Ok(SdkSource::Registry);
    }
    let Some(candidate) = args
        .sdk_dir
        .clone()
        .or_else(|| std::env::var_os("ENOKI_SDK_DIR").map(PathBuf::from))
    else {
        return Ok(match shipped_packages() {
            Ok(dir) => SdkSource::Packages(dir),
            Err(why) => {
                eprintln!(
                    "note: {why}; the SDK comes from the registries (a release ships its \
                     packages in sdk/ beside bin/; --sdk-packages DIR names them)"
                );
                SdkSource::Registry
            }
        });
    };
    let dir = canonical(&candidate)?;
    if !dir.join("CONTRACT.md").exists() {
        return Err(format!("{} has no CONTRACT.md", dir.display()));
    }
    Ok(SdkSource::Dir(dir))
}
