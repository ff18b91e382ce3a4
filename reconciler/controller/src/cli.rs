//! Command-line interface of the `enoki` binary (clap derive). No other module sees clap.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

mod run;
pub use run::{LogFormat, RunArgs};
mod verbs;
pub use verbs::*;

/// enoki: a Kubernetes composition reconciler with in-process WebAssembly synthesizers.
#[derive(Debug, Parser)]
#[command(
    name = "enoki",
    version = concat!(
        env!("CARGO_PKG_VERSION"),
        " (commit ",
        env!("ENOKI_COMMIT"),
        ", ",
        env!("ENOKI_BUILD_DATE"),
        ")"
    ),
    about
)]
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

/// What `enoki diff` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DiffFormat {
    /// Unified diffs per object, the prunes, and a summary line.
    Text,
    /// One JSON object: `differs`, the counts, and per resource its change with its diff.
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
    /// Run the controller against the cluster in KUBECONFIG (or in-cluster config).
    Run(Box<RunArgs>),
    /// Publish and inspect modules.
    #[command(subcommand)]
    Module(ModuleCommand),
    /// Show what applying a Composition's next synthesis would change: synthesize (from the
    /// cluster, or from local files with --module), server-side dry-run every resource and
    /// print a unified diff per object and the prunes. Exit code 0 when nothing differs, 1 when
    /// anything does, 2 on an error (as `kubectl diff`).
    Diff(DiffArgs),
    /// Scaffold a synthesizer project (build script, SDK dependency, a fixture with its golden
    /// output, a Synthesizer + Composition) that builds and passes `make test` as created.
    New(NewArgs),
    /// Show why a Composition is (not) Ready: the readiness-group DAG of its current synthesis
    /// (each resource's state and the readiness expression not yet true) and what blocks its
    /// next synthesis.
    Status(StatusArgs),
    /// List Compositions, Synthesizers or Symphonies: a table of the columns that matter
    /// (`-o wide`: more), or a kubectl `List` as JSON or YAML.
    Get(GetArgs),
    /// Show the Events of a Composition, oldest first.
    Events(EventsArgs),
    /// Ask for a pass of a Composition (`--with-synthesis`: a new synthesis) and wait until it
    /// is Ready; exit 1 when it stalls or the timeout passes.
    Reconcile(ReconcileArgs),
    /// Suspend a Composition (`spec.suspend: true`): it is neither synthesized nor reconciled
    /// — drift is not reverted, nothing is pruned — until resumed; waits until the controller
    /// says so in its status.
    Suspend(SuspendArgs),
    /// Resume a suspended Composition and wait until it is Ready; exit 1 when it stalls or the
    /// timeout passes.
    Resume(SuspendArgs),
    /// Show, pause, resume or undo a Synthesizer's rollout (how a new revision reaches its
    /// Compositions).
    #[command(subcommand)]
    Rollout(RolloutCommand),
    /// Print a Composition's outputs as a tree: readiness groups in apply order, each
    /// resource with its state, Compositions among them expanded (as `flux tree`).
    Tree(TreeArgs),
    /// Serve a live web page of the fleet on 127.0.0.1 (every Composition's state, one
    /// Composition's readiness-group DAG, inputs, synthesis and Events) with your kubeconfig;
    /// prints the address (it carries a token) and opens it in a browser when there is one.
    Ui(UiArgs),
    /// Print a shell completion script (`source <(enoki completion bash)`).
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Output format of `enoki status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StatusFormat {
    /// The Composition, its conditions, the next synthesis, then each group's resources.
    Text,
    /// The same as one JSON object.
    Json,
    /// The readiness-group DAG as Graphviz `dot`.
    Dot,
}

/// Arguments of `enoki status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The Composition.
    pub name: String,
    /// Its namespace (default: the kubeconfig context's namespace).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    pub output: StatusFormat,
    /// Also draw the DAG, coloured by state, as SVG into this file (needs Graphviz's `dot`).
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Refresh every 2 seconds until interrupted.
    #[arg(long, short = 'w', default_value_t = false)]
    pub watch: bool,
    /// Read the live objects from the cluster of this kubeconfig (where `enoki run
    /// --remote-kubeconfig` applies them).
    #[arg(long, env = "ENOKI_REMOTE_KUBECONFIG", value_name = "FILE")]
    pub remote_kubeconfig: Option<PathBuf>,
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Languages `enoki new` scaffolds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// Rust with `enoki_sdk` (WASI preview1 module).
    Rust,
    /// Go with `synthesizer-sdk/go` (`GOOS=wasip1`).
    Go,
    /// C with `synthesizer-sdk/c/enoki.h` (clang + wasi-libc).
    C,
    /// AssemblyScript with `synthesizer-sdk/assemblyscript` (WASI shim).
    Assemblyscript,
    /// Python with `synthesizer-sdk/python` (componentize-py component).
    Python,
    /// TypeScript with `synthesizer-sdk/js` (componentize-js component).
    Typescript,
    /// A Helm chart embedded in a Go synthesizer (`synthesizer-sdk/go/helm`: Helm's engine).
    Helm,
}

impl Lang {
    /// Every language, in the order of the docs.
    pub const ALL: &'static [Lang] = &[
        Lang::Rust,
        Lang::Go,
        Lang::C,
        Lang::Assemblyscript,
        Lang::Python,
        Lang::Typescript,
        Lang::Helm,
    ];

    /// The `--lang` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Go => "go",
            Lang::C => "c",
            Lang::Assemblyscript => "assemblyscript",
            Lang::Python => "python",
            Lang::Typescript => "typescript",
            Lang::Helm => "helm",
        }
    }
}

/// Arguments of `enoki new`.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The project (and Synthesizer) name: a DNS-1123 label.
    pub name: String,
    /// The language.
    #[arg(long, value_enum, default_value = "rust")]
    pub lang: Lang,
    /// Where to create it (default `./<name>`); must be absent or empty.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Depend on an enoki checkout's `synthesizer-sdk/` directory by path (also
    /// `$ENOKI_SDK_DIR`).
    #[arg(long, conflicts_with_all = ["sdk_packages", "sdk_registry"])]
    pub sdk_dir: Option<PathBuf>,
    /// Depend on the packed SDKs in this directory (`make release` writes them to
    /// `dist/sdk`; `hack/sdk-packages.sh DIR` alone): the same versions, installed from
    /// the files. Default: the packages shipped beside this binary (a release's `sdk/`
    /// next to its `bin/`), else the registries.
    #[arg(long, conflicts_with = "sdk_registry")]
    pub sdk_packages: Option<PathBuf>,
    /// Depend on this version's SDK packages from crates.io, the Go module proxy, npm and
    /// PyPI even when packages ship beside the binary.
    #[arg(long)]
    pub sdk_registry: bool,
}

/// `enoki module …`
#[derive(Debug, Subcommand)]
pub enum ModuleCommand {
    /// Publish a .wasm file as an OCI artifact and print its digest (and the pinned reference).
    Push {
        /// The module file.
        file: PathBuf,
        /// Where to push: `<registry>/<repository>:<tag>`.
        reference: String,
    },
    /// Show a module's digest, size, kind (p1 module / p2 component) and imports.
    Inspect {
        /// A .wasm file, or an OCI reference pinned by digest.
        module: String,
    },
    /// Pre-initialize a WASI reactor (a module exporting `_initialize` and `_start`; Go:
    /// `go build -buildmode=c-shared` with a `//go:wasmexport _start` function): run its
    /// `_initialize` once (Go: the runtime and every package's init) and write the initialized
    /// module, whose runs start at `_start`.
    Preinit {
        /// The reactor module file.
        file: PathBuf,
        /// Where to write the pre-initialized module.
        #[arg(long, short = 'o')]
        output: PathBuf,
    },
}

/// Arguments of `enoki render`.
#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    /// The module: a `.wasm` (or `.wat`) file, `builtin:<name>`, an OCI reference pinned by
    /// digest (`registry/repo:tag@sha256:…`), or an `https://` URL (with `--sha256`).
    pub module: String,
    /// Expected SHA-256 (hex) of a module given as an https URL.
    #[arg(long)]
    pub sha256: Option<String>,
    /// Extra CA certificate (PEM) trusted for https module URLs.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
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
    /// Stdout cap (Kubernetes quantity); the controller's default (`--synthesis-output`), so
    /// what renders here is not refused for its size in the cluster unless the Synthesizer's
    /// `spec.limits.output` says more.
    #[arg(long, default_value = "4Mi")]
    pub max_output: String,
    /// Largest module accepted from a URL or registry (quantity).
    #[arg(long, default_value = "128Mi")]
    pub max_module_size: String,
    /// Follow redirects (and OCI token realms) to loopback, link-local and private addresses.
    #[arg(long, default_value_t = false)]
    pub allow_private_redirects: bool,
    /// Compare the output with a golden file (what an earlier `enoki render` printed; the
    /// `# module/input/output sha256` lines are ignored) instead of printing it: prints a
    /// unified diff and exits 1 when they differ. The test a synthesizer project runs.
    #[arg(long, value_name = "FILE")]
    pub expect: Option<PathBuf>,
    /// Where compiled modules are kept, as the controller keeps them (`--module-cache-dir`:
    /// the same artifacts, keyed by the module's SHA-256 and the engine): a second render of
    /// a module does not compile it again. Default: `$XDG_CACHE_HOME/enoki`, else
    /// `~/.cache/enoki` (bounded to 1 GiB, least recently used first out).
    #[arg(long, env = "ENOKI_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<String>,
    /// Compile without the on-disk cache (nothing read or written; wins over `--cache-dir`).
    #[arg(long)]
    pub no_cache: bool,
    /// Print on stderr how the module was obtained (compiled, or loaded from the compile
    /// cache) and how long loading it and the synthesis took.
    #[arg(long)]
    pub timings: bool,
}

/// Arguments of `enoki diff`.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The Composition in the cluster (its Synthesizer and bound inputs are read from there).
    #[arg(required_unless_present = "module", conflicts_with = "module")]
    pub name: Option<String>,
    /// The Composition's namespace (default: the kubeconfig context's namespace).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    pub output: DiffFormat,
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Synthesize from local files instead: a module as `enoki render` takes it, with
    /// --composition / --input / --resource-list (the Composition of that name, when it
    /// exists in the cluster, gives the current synthesis for the prunes).
    #[arg(long)]
    pub module: Option<String>,
    /// A Composition YAML (local mode).
    #[arg(long, short = 'c', requires = "module")]
    pub composition: Option<PathBuf>,
    /// A bound input as `KEY=FILE` (local mode); repeatable.
    #[arg(
        long = "input",
        short = 'i',
        value_name = "KEY=FILE",
        requires = "module"
    )]
    pub inputs: Vec<String>,
    /// A complete stdin ResourceList (local mode).
    #[arg(long, value_name = "FILE", requires = "module")]
    pub resource_list: Option<PathBuf>,
    /// Deadline of a local run (humantime).
    #[arg(long, default_value = "10s")]
    pub timeout: String,
    /// Memory cap of a local run (Kubernetes quantity).
    #[arg(long, default_value = "256Mi")]
    pub memory: String,
    /// Compiled-module cache of a local run (as `enoki render --cache-dir`).
    #[arg(long, env = "ENOKI_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<String>,
    /// Compare with (and dry-run against) the cluster of this kubeconfig, where `enoki run
    /// --remote-kubeconfig` applies emitted objects.
    #[arg(long, env = "ENOKI_REMOTE_KUBECONFIG")]
    pub remote_kubeconfig: Option<PathBuf>,
    /// As the default install's `enoki run`: the ServiceAccount a Composition that names none
    /// acts as; its reads and dry runs are made as that account, as the controller would make
    /// them (you need `impersonate` on it, which the platform team has).
    #[arg(
        long,
        env = "ENOKI_DEFAULT_SERVICE_ACCOUNT",
        default_value = "enoki-composer"
    )]
    pub default_service_account: String,
    /// As `enoki run`: refuse a Composition whose references leave its namespace (the
    /// default; `--as-caller` turns it off).
    #[arg(long, env = "ENOKI_NO_CROSS_NAMESPACE_REFS", default_value_t = true)]
    pub no_cross_namespace_refs: bool,
    /// As a single-tenant `enoki run`: read and dry-run with your own credentials, references
    /// across namespaces allowed (no impersonation).
    #[arg(
        long,
        default_value_t = false,
        conflicts_with = "default_service_account"
    )]
    pub as_caller: bool,
    /// As `enoki run`: `MANAGEMENT_NS=REMOTE_NS` pairs for a remote target.
    #[arg(long, env = "ENOKI_REMOTE_NAMESPACE_MAP", value_delimiter = ',')]
    pub remote_namespace_map: Vec<String>,
    /// As `enoki run`: the built-in `helm` synthesizer's module (a file, or an OCI reference
    /// pinned by digest), for Compositions of `spec.module.builtin: helm` Synthesizers.
    #[arg(long, env = "ENOKI_HELM_MODULE")]
    pub helm_module: Option<String>,
    /// Print Secret values instead of `***` (as `kubectl diff` does, values are masked by
    /// default; a changed value shows as `*** (before)` / `*** (after)`).
    #[arg(long, default_value_t = false)]
    pub show_secrets: bool,
}

impl DiffArgs {
    /// The `enoki render` arguments of local mode.
    pub fn render_args(&self, module: &str) -> RenderArgs {
        RenderArgs {
            module: module.to_string(),
            sha256: None,
            ca_file: None,
            composition: self.composition.clone(),
            inputs: self.inputs.clone(),
            resource_list: self.resource_list.clone(),
            output: Format::Yaml,
            timeout: self.timeout.clone(),
            memory: self.memory.clone(),
            max_output: "4Mi".into(),
            max_module_size: "128Mi".into(),
            allow_private_redirects: false,
            expect: None,
            cache_dir: self.cache_dir.clone(),
            no_cache: false,
            timings: false,
        }
    }
}

/// Parses `--builtins`: a comma list of built-in names, or `none`.
///
/// # Errors
/// An unknown name (the message lists the known ones).
pub fn parse_builtins(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|b| !b.is_empty()) {
        if name == "none" {
            continue;
        }
        if !builtins::NAMES.contains(&name) {
            return Err(format!(
                "unknown built-in {name:?} (known: {}, or none)",
                builtins::NAMES.join(", ")
            ));
        }
        if !out.iter().any(|o| o == name) {
            out.push(name.to_string());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::parse_builtins;

    #[test]
    fn builtins_flag_turns_each_on_or_off() {
        assert_eq!(
            parse_builtins("trustee,quota,lepton").unwrap(),
            ["trustee", "quota", "lepton"]
        );
        assert_eq!(parse_builtins("quota").unwrap(), ["quota"]);
        assert!(parse_builtins("none").unwrap().is_empty());
        assert!(parse_builtins("").unwrap().is_empty());
        assert!(
            parse_builtins("quota,nope")
                .unwrap_err()
                .contains("unknown built-in \"nope\"")
        );
    }
}
