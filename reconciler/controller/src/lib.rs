//! The enoki controller: the kube-runtime shell around the pure planning core, the wasm host
//! and the built-in synthesizers, plus the `enoki` command line.
//!
//! - [`synthesis`]: one synthesis exactly as the controller runs it (input, module, limits,
//!   output parsing and validation).
//! - [`render`]: `enoki render`, the same synthesis over local files.

pub mod cli;
pub mod render;
pub mod synthesis;

use std::io::Write;

/// Runs one `enoki` subcommand.
///
/// # Errors
/// Fails when the output cannot be written or the CRDs cannot be rendered.
pub fn run(args: &cli::Args) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match &args.command {
        cli::Command::Crds => out.write_all(crds::manifests::render_all()?.as_bytes())?,
        cli::Command::Version => writeln!(out, "enoki {}", env!("CARGO_PKG_VERSION"))?,
        cli::Command::Render(r) => out.write_all(render::render(r)?.as_bytes())?,
    }
    Ok(())
}
