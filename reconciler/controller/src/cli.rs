//! Command-line interface of the `enoki` binary (clap derive). No other module sees clap.

use clap::{Parser, Subcommand};

/// enoki: a Kubernetes composition reconciler with in-process WebAssembly synthesizers.
#[derive(Debug, Parser)]
#[command(name = "enoki", version, about)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands of `enoki`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the CustomResourceDefinitions of every enoki kind as multi-document YAML.
    Crds,
    /// Print the enoki version.
    Version,
}
