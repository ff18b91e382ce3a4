//! The enoki controller: the kube-runtime shell around the pure planning core, the wasm host
//! and the built-in synthesizers, plus the `enoki` command line.
//!
//! Today it carries the command-line skeleton (`enoki crds`, `enoki version`); the reconciler
//! issue adds `enoki run`.

pub mod cli;

use std::io::Write;

/// Runs one `enoki` subcommand.
///
/// # Errors
/// Fails when the output cannot be written or the CRDs cannot be rendered.
pub fn run(args: &cli::Args) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match args.command {
        cli::Command::Crds => out.write_all(crds::manifests::render_all()?.as_bytes())?,
        cli::Command::Version => writeln!(out, "enoki {}", env!("CARGO_PKG_VERSION"))?,
    }
    Ok(())
}
