//! Command-line interface of the `enoki` binary (clap derive). No other module sees clap.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// enoki: a Kubernetes composition reconciler with in-process WebAssembly synthesizers.
#[derive(Debug, Parser)]
#[command(name = "enoki", version, about)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Output format of `enoki render`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Multi-document YAML with a comment per readiness group.
    Yaml,
    /// One JSON object: groups, resources, results.
    Json,
}

/// The subcommands of `enoki`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the CustomResourceDefinitions of every enoki kind as multi-document YAML.
    Crds,
    /// Print the enoki version.
    Version,
    /// Run a synthesizer over local files exactly as the controller would and print the
    /// resources in apply order, grouped by readiness group. No cluster needed.
    Render(RenderArgs),
}

/// Arguments of `enoki render`.
#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    /// The module: a `.wasm` (or `.wat`) file, or `builtin:<name>`.
    pub module: String,
    /// A Composition YAML (name, namespace, synthesisEnv, annotations are used).
    #[arg(long, short = 'c')]
    pub composition: Option<PathBuf>,
    /// A bound input as `KEY=FILE` (YAML or JSON object); repeatable.
    #[arg(long = "input", short = 'i', value_name = "KEY=FILE")]
    pub inputs: Vec<String>,
    /// A complete stdin ResourceList (JSON) to use instead of building one.
    #[arg(long, value_name = "FILE")]
    pub resource_list: Option<PathBuf>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "yaml")]
    pub output: Format,
    /// Deadline of the run (humantime).
    #[arg(long, default_value = "10s")]
    pub timeout: String,
    /// Memory cap (Kubernetes quantity).
    #[arg(long, default_value = "256Mi")]
    pub memory: String,
    /// Stdout cap (Kubernetes quantity).
    #[arg(long, default_value = "16Mi")]
    pub max_output: String,
}
