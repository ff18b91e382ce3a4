//! The enoki controller: the kube-runtime shell around the pure planning core, the wasm host
//! and the built-in synthesizers, plus the `enoki` command line.
//!
//! - [`synthesis`]: one synthesis exactly as the controller runs it (input, module, limits,
//!   output parsing and validation).
//! - [`render`]: `enoki render`, the same synthesis over local files.

pub mod cli;
pub mod render;
pub mod run;
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
        cli::Command::Run(r) => {
            drop(out);
            start(r)?;
        }
    }
    Ok(())
}

fn start(args: &cli::RunArgs) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format {
        cli::LogFormat::Json => builder.json().init(),
        cli::LogFormat::Pretty => builder.init(),
    }
    let parse = |flag: &str, v: &str| {
        humantime::parse_duration(v).map_err(|e| anyhow::anyhow!("--{flag} {v:?}: {e}"))
    };
    let opts = run::Options {
        namespace: args.namespace.clone(),
        label_selector: args.label_selector.clone(),
        mode: if args.disable_ssa {
            plan::ApplyMode::ClientSide
        } else {
            plan::ApplyMode::ServerSide
        },
        concurrency: args.concurrency,
        readiness_poll: parse("readiness-poll", &args.readiness_poll)?,
        resync: parse("resync", &args.resync)?,
        module_cache_dir: args.module_cache_dir.clone(),
    };
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run::run(opts))
}
