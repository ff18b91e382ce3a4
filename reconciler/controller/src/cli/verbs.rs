//! Arguments of the everyday verbs over the cluster — `get`, `events`, `reconcile`, `suspend`,
//! `resume`, `tree` and `rollout` (kubectl's and flux's conventions: `-n`, `-A`, `-o`) — and which cluster each talks to.

use std::path::PathBuf;

use clap::{Subcommand, ValueEnum};

/// Which cluster a command talks to, as kubectl chooses it.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ClusterArgs {
    /// The kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else the in-cluster
    /// account).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: its current context).
    #[arg(long)]
    pub context: Option<String>,
}

/// What `enoki get` lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GetKind {
    /// Compositions (namespaced).
    #[value(alias = "composition", alias = "comp", alias = "comps")]
    Compositions,
    /// Synthesizers (cluster-scoped).
    #[value(alias = "synthesizer", alias = "synth", alias = "synths")]
    Synthesizers,
    /// Symphonies (namespaced).
    #[value(alias = "symphony")]
    Symphonies,
}

/// Output of `enoki get` and `enoki events`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GetFormat {
    /// Columns.
    Table,
    /// More columns.
    Wide,
    /// A kubectl `List` as JSON.
    Json,
    /// A kubectl `List` as YAML.
    Yaml,
}

/// `enoki get`.
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// What to list.
    pub kind: GetKind,
    /// Only this one (a missing one is an error).
    pub name: Option<String>,
    /// The namespace (default: the kubeconfig context's namespace).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Every namespace (adds a NAMESPACE column).
    #[arg(long, short = 'A', conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    pub output: GetFormat,
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `enoki events`.
#[derive(Debug, clap::Args)]
pub struct EventsArgs {
    /// The Composition.
    pub name: String,
    /// Its namespace (default: the kubeconfig context's namespace).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Output format (`wide` is `table`).
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    pub output: GetFormat,
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `enoki reconcile`.
#[derive(Debug, clap::Args)]
pub struct ReconcileArgs {
    /// The Composition.
    pub name: String,
    /// Its namespace (default: the kubeconfig context's namespace).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Force a new synthesis (`enoki.dev/force-resynthesis`), not only a pass.
    #[arg(long)]
    pub with_synthesis: bool,
    /// How long to wait for Ready (humantime).
    #[arg(long, default_value = "2m")]
    pub timeout: String,
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `enoki suspend` and `enoki resume`.
#[derive(Debug, clap::Args)]
pub struct SuspendArgs {
    /// The Composition.
    pub name: String,
    /// Its namespace (default: the kubeconfig context's namespace).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// How long to wait for the controller (humantime).
    #[arg(long, default_value = "2m")]
    pub timeout: String,
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Output of `enoki tree`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TreeFormat {
    /// The tree, one line per group and resource.
    Text,
    /// The same as JSON (each Composition's `enoki status -o json` view, with `children`).
    Json,
    /// The same as YAML.
    Yaml,
}

/// `enoki tree`.
#[derive(Debug, clap::Args)]
pub struct TreeArgs {
    /// The Composition.
    pub name: String,
    /// Its namespace (default: the kubeconfig context's namespace).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    pub output: TreeFormat,
    /// How deep to expand Compositions among the outputs (0: only this one).
    #[arg(long, default_value_t = 5)]
    pub depth: u32,
    /// Read the live objects from the cluster of this kubeconfig (where `enoki run
    /// --remote-kubeconfig` applies them); Compositions are read from `--kubeconfig`'s.
    #[arg(long, env = "ENOKI_REMOTE_KUBECONFIG", value_name = "FILE")]
    pub remote_kubeconfig: Option<PathBuf>,
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `enoki ui`.
#[derive(Debug, clap::Args)]
pub struct UiArgs {
    /// Only this namespace (default: every namespace the account may list Compositions in,
    /// else the kubeconfig context's namespace).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// The port on 127.0.0.1 (0: a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Print the address only; do not open a browser.
    #[arg(long)]
    pub no_open: bool,
    /// Read the live objects from the cluster of this kubeconfig (where `enoki run
    /// --remote-kubeconfig` applies them); Compositions are read from `--kubeconfig`'s.
    #[arg(long, env = "ENOKI_REMOTE_KUBECONFIG", value_name = "FILE")]
    pub remote_kubeconfig: Option<PathBuf>,
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `enoki rollout …`
#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// Print the rollout: the revision rolling out, the stable one, the phase and wave, and
    /// the Compositions per revision.
    Status(RolloutArgs),
    /// Admit no further wave (sets the `rollout.enoki.dev/paused` annotation).
    Pause(RolloutArgs),
    /// Let a paused rollout go on (removes the annotation; the wave's deadline starts again).
    Resume(RolloutArgs),
    /// Send every Composition back to the revision before the one rolling out (sets the
    /// `rollout.enoki.dev/undo` annotation to that revision's number).
    Undo(RolloutArgs),
}

/// Arguments of `enoki rollout …`.
#[derive(Debug, clap::Args)]
pub struct RolloutArgs {
    /// The Synthesizer.
    pub synthesizer: String,
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}
