//! The enoki controller: the kube-runtime shell around the pure planning core, the wasm host
//! and the built-in synthesizers, plus the `enoki` command line.
//!
//! - [`synthesis`]: one synthesis exactly as the controller runs it (input, module, limits,
//!   output parsing and validation).
//! - [`render`]: `enoki render`, the same synthesis over local files.
//! - [`scaffold`]: `enoki new`, a synthesizer project per language.
//! - [`ui`]: `enoki ui`, a live web page of the fleet.

pub mod cli;
mod flags;
use flags::*;
mod options;
use options::options;
pub mod render;
pub mod run;
pub mod scaffold;
pub mod sources;
pub mod synthesis;
pub mod ui;
pub mod verbs;

use std::io::Write;

use clap::Parser as _;

/// The binary that compiles modules in child processes, once the `enoki` binary has said so
/// ([`compile_in_child_processes`]).
static COMPILE_PROGRAM: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Makes the controller compile modules in child processes of this binary, which must answer
/// [`wasm_host::COMPILE_SUBCOMMAND`] with [`wasm_host::compile_child_main`] (the `enoki`
/// binary does). Without it (tests that run the controller in their own process) modules
/// compile in this process.
pub fn compile_in_child_processes() {
    // `/proc/self/exe` is this very binary even after its file was replaced (an upgrade in
    // place): a child of another build would write artifacts under another engine's key.
    let exe = std::path::Path::new("/proc/self/exe");
    let program = if exe.exists() {
        Some(exe.to_path_buf())
    } else {
        std::env::current_exe().ok()
    };
    if let Some(program) = program {
        let _ = COMPILE_PROGRAM.set(program);
    }
}

/// Runs `f` to completion on a runtime of its own (a command of the CLI).
fn block_on<T>(f: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f)
}

/// Runs one `enoki` subcommand and returns the process exit code.
///
/// # Errors
/// Fails when the output cannot be written or the CRDs cannot be rendered.
pub fn run(args: &cli::Args) -> anyhow::Result<i32> {
    let mut out = std::io::stdout().lock();
    match &args.command {
        cli::Command::Crds => out.write_all(crds::manifests::render_all()?.as_bytes())?,
        cli::Command::Version => writeln!(
            out,
            "enoki {} (commit {}, {})",
            env!("CARGO_PKG_VERSION"),
            run::health::COMMIT,
            run::health::BUILD_DATE
        )?,
        cli::Command::Completion { shell } => {
            use clap::CommandFactory as _;
            clap_complete::generate(*shell, &mut cli::Args::command(), "enoki", &mut out);
        }
        cli::Command::Status(s) => {
            drop(out);
            block_on(status(s))?;
        }
        cli::Command::Get(g) => out.write_all(block_on(verbs::get(g))?.as_bytes())?,
        cli::Command::Events(e) => out.write_all(block_on(verbs::events(e))?.as_bytes())?,
        cli::Command::Reconcile(r) => out.write_all(block_on(verbs::reconcile(r))?.as_bytes())?,
        cli::Command::Suspend(a) => out.write_all(block_on(verbs::suspend(a))?.as_bytes())?,
        cli::Command::Resume(a) => out.write_all(block_on(verbs::resume(a))?.as_bytes())?,
        cli::Command::Rollout(c) => out.write_all(block_on(verbs::rollout(c))?.as_bytes())?,
        cli::Command::Tree(a) => out.write_all(block_on(verbs::tree(a))?.as_bytes())?,
        cli::Command::Ui(a) => {
            drop(out);
            block_on(ui::serve(a))?;
        }
        cli::Command::Render(r) => {
            let text = render::render(r)?;
            match &r.expect {
                Some(golden) => writeln!(out, "{}", render::check_expected(&text, golden)?)?,
                None => out.write_all(text.as_bytes())?,
            }
        }
        cli::Command::Module(cmd) => {
            let text = block_on(module_command(cmd))?;
            out.write_all(text.as_bytes())?;
        }
        cli::Command::New(n) => out.write_all(scaffold::scaffold(n)?.as_bytes())?,
        cli::Command::Diff(d) => {
            // `kubectl diff`'s codes: 0 nothing differs, 1 something does, 2 an error.
            let report = match block_on(diff(d)) {
                Ok(r) => r,
                Err(e) => {
                    let chain: Vec<String> = e.chain().map(ToString::to_string).collect();
                    eprintln!("error: {}", chain.join(": "));
                    return Ok(2);
                }
            };
            match d.output {
                cli::DiffFormat::Text => out.write_all(report.text.as_bytes())?,
                cli::DiffFormat::Json => {
                    writeln!(out, "{}", serde_json::to_string_pretty(&report.json)?)?;
                }
            }
            return Ok(i32::from(report.differs));
        }
        cli::Command::Run(r) => {
            drop(out);
            start(r)?;
        }
    }
    Ok(0)
}

/// A progress line on stderr, only when stderr is a terminal (scripts and logs get none).
pub(crate) fn progress(message: &str) {
    use std::io::IsTerminal as _;
    if std::io::stderr().is_terminal() {
        eprintln!("{message}");
    }
}

/// `enoki status`: gathers the view and prints it (again every 2 s with `--watch`).
async fn status(args: &cli::StatusArgs) -> anyhow::Result<()> {
    use std::io::IsTerminal as _;
    let (client, default_ns) = verbs::connect(&args.cluster).await?;
    let namespace = args.namespace.clone().unwrap_or(default_ns);
    let target = match &args.remote_kubeconfig {
        Some(path) => kube::Client::try_from(run::start::cluster_config(Some(path), None).await?)?,
        None => client.clone(),
    };
    let terminal = std::io::stdout().is_terminal();
    let color = terminal && std::env::var_os("NO_COLOR").is_none();
    loop {
        let text = match run::tree::gather(&client, &target, &namespace, &args.name).await {
            Ok(view) => {
                if let Some(path) = &args.svg {
                    run::tree::svg(&run::tree::dot(&view), path)?;
                }
                match args.output {
                    cli::StatusFormat::Text => run::tree::text(&view, color),
                    cli::StatusFormat::Json => run::tree::json(&view)?,
                    cli::StatusFormat::Dot => run::tree::dot(&view),
                }
            }
            // One failed read does not end --watch: it is shown and tried again.
            Err(e) if args.watch => format!("error: {}\n", run::tree::clean(&format!("{e:#}"))),
            Err(e) => return Err(e),
        };
        let mut out = std::io::stdout().lock();
        if args.watch && terminal {
            // Clear the screen and go home before each frame.
            out.write_all(b"\x1b[2J\x1b[H")?;
        }
        out.write_all(text.as_bytes())?;
        out.flush()?;
        drop(out);
        if !args.watch {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        if !terminal {
            println!("---");
        }
    }
}

/// `enoki diff`: the controller's default options (`enoki run`'s defaults and `ENOKI_*`
/// variables), a Composition in the cluster or local files.
async fn diff(args: &cli::DiffArgs) -> anyhow::Result<run::diff::Report> {
    let mut defaults = match cli::Args::try_parse_from(["enoki", "run"])?.command {
        cli::Command::Run(r) => options(&r)?,
        _ => anyhow::bail!("enoki run's defaults"),
    };
    defaults
        .cluster
        .remote_kubeconfig
        .clone_from(&args.remote_kubeconfig);
    defaults
        .cluster
        .kubeconfig
        .clone_from(&args.cluster.kubeconfig);
    defaults.cluster.context.clone_from(&args.cluster.context);
    // The controller's tenancy options: the diff reads and dry-runs as the Composition would.
    defaults.tenancy.default_service_account =
        Some(args.default_service_account.clone()).filter(|s| !s.is_empty() && !args.as_caller);
    defaults.tenancy.no_cross_namespace_refs = args.no_cross_namespace_refs && !args.as_caller;
    defaults.tenancy.remote_namespace_map =
        remote_namespace_map(&args.remote_namespace_map, args.remote_kubeconfig.is_some())?;
    if let Some(m) = &args.helm_module {
        defaults.modules.helm_module = Some(m.clone()).filter(|m| !m.is_empty());
    }
    let target = match &args.module {
        Some(module) => {
            let r = args.render_args(module);
            let (host, module, input, limits) = render::prepare(&r)?;
            run::diff::Target::Local {
                host,
                module,
                input: Box::new(input),
                limits,
            }
        }
        None => run::diff::Target::Cluster {
            namespace: match &args.namespace {
                Some(ns) => ns.clone(),
                None => {
                    run::start::cluster_config(
                        args.cluster.kubeconfig.as_deref(),
                        args.cluster.context.as_deref(),
                    )
                    .await?
                    .default_namespace
                }
            },
            name: args.name.clone().unwrap_or_default(),
        },
    };
    run::diff::diff(defaults, target, args.show_secrets).await
}

fn start(args: &cli::RunArgs) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only when the log goes to a terminal.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match args.log_format {
        cli::LogFormat::Json => builder.json().init(),
        cli::LogFormat::Pretty => builder.init(),
    }
    let opts = options(args)?;
    run::start::limit_allocator_arenas();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(run::run(opts));
    // Do not wait for a synthesis still running in a blocking thread: its store is dropped
    // with the process, and the next leader starts it again.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}

async fn module_command(cmd: &cli::ModuleCommand) -> anyhow::Result<String> {
    match cmd {
        cli::ModuleCommand::Preinit { file, output } => {
            let (file, output) = (file.clone(), output.clone());
            tokio::task::spawn_blocking(move || preinit(&file, &output)).await?
        }
        cli::ModuleCommand::Push { file, reference } => {
            let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
            progress(&format!(
                "pushing {} ({:.1} MiB) to {reference}…",
                file.display(),
                size as f64 / f64::from(1 << 20)
            ));
            let digest = sources::push(file, reference).await?;
            let base = reference.split('@').next().unwrap_or(reference);
            Ok(format!("{digest}\npinned: {base}@{digest}\n"))
        }
        cli::ModuleCommand::Inspect { module } => {
            let bytes = if std::path::Path::new(module).exists() {
                std::fs::read(module)?
            } else {
                sources::pull(
                    module,
                    &sources::FetchPolicy::default(),
                    sources::for_reference(module).as_ref(),
                    None,
                )
                .await?
            };
            let host = wasm_host::Host::new(None)?;
            let i = host.inspect(&bytes)?;
            let kind = match i.kind {
                wasm_host::ModuleKind::Preview1 => "WASI preview1 command module",
                wasm_host::ModuleKind::Component => "WASI preview2 component",
            };
            let mut text = format!(
                "digest:  {}\nsize:    {} bytes\nkind:    {kind}\nimports:\n",
                i.digest, i.size
            );
            for imp in &i.imports {
                text.push_str(&format!("  {imp}\n"));
            }
            Ok(text)
        }
    }
}

/// `enoki module preinit`: the reactor at `file` pre-initialized, written to `output` (through
/// a temporary file beside it, renamed into place).
fn preinit(file: &std::path::Path, output: &std::path::Path) -> anyhow::Result<String> {
    use anyhow::Context as _;
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let started = std::time::Instant::now();
    let initialized = wasm_host::preinitialize(&bytes)
        .with_context(|| format!("pre-initializing {}", file.display()))?;
    let took = started.elapsed();
    let temporary = output.with_extension(format!("preinit-{}", std::process::id()));
    let written =
        std::fs::write(&temporary, &initialized).and_then(|()| std::fs::rename(&temporary, output));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written.with_context(|| format!("writing {}", output.display()))?;
    Ok(format!(
        "{}: {} bytes, initialized in {:.2} s\n",
        output.display(),
        initialized.len(),
        took.as_secs_f64()
    ))
}
