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
        .remote_kubeconfig
        .clone_from(&args.remote_kubeconfig);
    defaults.kubeconfig.clone_from(&args.cluster.kubeconfig);
    defaults.context.clone_from(&args.cluster.context);
    // The controller's tenancy options: the diff reads and dry-runs as the Composition would.
    defaults.default_service_account =
        Some(args.default_service_account.clone()).filter(|s| !s.is_empty() && !args.as_caller);
    defaults.no_cross_namespace_refs = args.no_cross_namespace_refs && !args.as_caller;
    defaults.remote_namespace_map =
        remote_namespace_map(&args.remote_namespace_map, args.remote_kubeconfig.is_some())?;
    if let Some(m) = &args.helm_module {
        defaults.helm_module = Some(m.clone()).filter(|m| !m.is_empty());
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

/// `value` of `--flag`, refused below one second (a refresh loop would spin).
fn at_least_a_second(
    flag: &str,
    value: std::time::Duration,
) -> anyhow::Result<std::time::Duration> {
    anyhow::ensure!(
        value >= std::time::Duration::from_secs(1),
        "--{flag} {value:?}: at least 1s"
    );
    Ok(value)
}

/// The controller's options from `enoki run`'s flags.
fn options(args: &cli::RunArgs) -> anyhow::Result<run::Options> {
    let parse = duration;
    let sandbox = sandbox(args)?;
    let opts = run::Options {
        sandbox,
        no_cross_namespace_refs: args.no_cross_namespace_refs,
        lepton_persistent_volumes: args.lepton_persistent_volumes,
        default_service_account: args
            .default_service_account
            .clone()
            .filter(|s| !s.is_empty()),
        controller_namespace: std::env::var("POD_NAMESPACE")
            .ok()
            .filter(|n| !n.is_empty()),
        namespace: args.namespace.clone(),
        label_selector: args.label_selector.clone(),
        mode: if args.disable_ssa {
            plan::ApplyMode::ClientSide
        } else {
            plan::ApplyMode::ServerSide
        },
        concurrency: args.concurrency,
        apply_concurrency: args.apply_concurrency.max(1),
        max_concurrent_syntheses: max_concurrent_syntheses(args.max_concurrent_syntheses),
        module_cache_bytes: args.module_cache_mib.saturating_mul(1024 * 1024),
        module_cache_dir_bytes: args.module_cache_dir_mib.saturating_mul(1024 * 1024),
        plan_cache_resources: args.plan_cache_resources.max(1),
        shutdown_grace: parse("shutdown-grace", &args.shutdown_grace)?,
        readiness_poll: parse("readiness-poll", &args.readiness_poll)?,
        resync: parse("resync", &args.resync)?,
        capabilities_refresh: at_least_a_second(
            "capabilities-refresh",
            parse("capabilities-refresh", &args.capabilities_refresh)?,
        )?,
        rollout_cooldown: parse("rollout-cooldown", &args.rollout_cooldown)?,
        synthesis_rates: synthesis_rates(args)?,
        namespace_slice_bytes: quantity("namespace-slice-budget", &args.namespace_slice_budget)?,
        max_symphony_bytes: quantity("max-symphony-bytes", &args.max_symphony_bytes)?,
        slice_cache_whole: args.slice_cache == "whole",
        min_reconcile_interval: parse("min-reconcile-interval", &args.min_reconcile_interval)?,
        migrating_field_managers: migrating_field_managers(&args.migrating_field_managers),
        migrating_fields: migrating_fields(&args.migrating_fields)?,
        fail_open: args.fail_open,
        resource_filter: resource_filter(args)?,
        timeout: positive("timeout", parse("timeout", &args.timeout)?)?,
        qps: qps("qps", args.qps)?,
        burst: args.burst,
        remote_qps: qps("remote-qps", args.remote_qps)?,
        remote_burst: args.remote_burst,
        module_cache_dir: args.module_cache_dir.clone(),
        slice_key_secret: slice_key_secret(args)?,
        metrics_addr: metrics_addr(&args.metrics_addr)?,
        instance_namespace: args.instance_namespace.clone(),
        builtins: cli::parse_builtins(&args.builtins)
            .map_err(|e| anyhow::anyhow!("--builtins: {e}"))?,
        leader_election: args
            .leader_election_namespace
            .clone()
            .map(|ns| (ns, args.lease_duration_secs.max(1))),
        shards: shards(args.shards, args.leader_election_namespace.as_deref())?,
        remote_kubeconfig: args.remote_kubeconfig.clone(),
        kubeconfig: args.cluster.kubeconfig.clone(),
        context: args.cluster.context.clone(),
        stuck_threshold: parse("stuck-threshold", &args.stuck_threshold)?,
        remote_namespace_map: remote_namespace_map(
            &args.remote_namespace_map,
            args.remote_kubeconfig.is_some(),
        )?,
        module_ca: args
            .module_ca_file
            .as_ref()
            .map(|p| {
                std::fs::read(p)
                    .map_err(|e| anyhow::anyhow!("--module-ca-file {}: {e}", p.display()))
            })
            .transpose()?,
        helm_module: Some(args.helm_module.clone()).filter(|m| !m.is_empty()),
    };
    Ok(opts)
}

/// The synthesis sandbox of `enoki run`'s flags (`--synthesis-output` within
/// `--max-synthesis-output`).
fn sandbox(args: &cli::RunArgs) -> anyhow::Result<run::sandbox::Sandbox> {
    let parse = duration;
    let sandbox = run::sandbox::Sandbox {
        max_memory_bytes: quantity("max-synthesis-memory", &args.max_synthesis_memory)?,
        max_timeout: parse("max-synthesis-timeout", &args.max_synthesis_timeout)?,
        max_output_bytes: quantity("max-synthesis-output", &args.max_synthesis_output)?,
        default_output_bytes: quantity("synthesis-output", &args.synthesis_output)?,
        memory_budget_bytes: quantity("synthesis-memory-budget", &args.synthesis_memory_budget)?,
        fetch: sources::FetchPolicy {
            max_bytes: quantity("max-module-size", &args.max_module_size)?,
            allow_private_redirects: args.module_allow_private_redirects,
            timeout: parse("module-fetch-timeout", &args.module_fetch_timeout)?,
        },
        compile_timeout: parse("compile-timeout", &args.compile_timeout)?,
        compile_memory_budget_bytes: quantity(
            "compile-memory-budget",
            &args.compile_memory_budget,
        )?,
        compile_program: COMPILE_PROGRAM.get().cloned(),
    };
    anyhow::ensure!(
        sandbox.default_output_bytes <= sandbox.max_output_bytes,
        "--synthesis-output ({} bytes) is above --max-synthesis-output ({} bytes)",
        sandbox.default_output_bytes,
        sandbox.max_output_bytes
    );
    Ok(sandbox)
}

/// `--max-concurrent-syntheses`, by default one per core.
fn max_concurrent_syntheses(flag: Option<usize>) -> usize {
    flag.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, usize::from))
        .max(1)
}

/// `--migrating-field-managers` but enoki's own.
fn migrating_field_managers(flag: &[String]) -> Vec<String> {
    flag.iter()
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty() && m != crds::names::FIELD_MANAGER)
        .collect()
}

/// A duration flag's value (`--flag`, as humantime reads it).
fn duration(flag: &str, v: &str) -> anyhow::Result<std::time::Duration> {
    humantime::parse_duration(v).map_err(|e| anyhow::anyhow!("--{flag} {v:?}: {e}"))
}

/// A byte-quantity flag's value (`--flag`, as Kubernetes quantities read).
fn quantity(flag: &str, v: &str) -> anyhow::Result<usize> {
    synthesis::parse_quantity(v).map_err(|e| anyhow::anyhow!("--{flag} {v:?}: {e}"))
}

/// The synthesis rates of the rate and burst flags.
fn synthesis_rates(args: &cli::RunArgs) -> anyhow::Result<[run::synthesis_rate::Rate; 3]> {
    run::synthesis_rate::Rate::of_flags(
        (
            &args.composition_synthesis_rate,
            args.composition_synthesis_burst,
        ),
        (
            &args.namespace_synthesis_rate,
            args.namespace_synthesis_burst,
        ),
        (
            &args.namespace_slice_write_rate,
            &args.namespace_slice_write_burst,
        ),
    )
    .map_err(|e| anyhow::anyhow!(e))
}

/// `--resource-filter` compiled (none when empty).
fn resource_filter(args: &cli::RunArgs) -> anyhow::Result<Option<plan::expr::Expr>> {
    match args.resource_filter.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(src) => plan::expr::Expr::compile(src)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("--resource-filter {src:?}: {e}")),
    }
}

/// `--metrics-addr` (none when empty).
fn metrics_addr(addr: &str) -> anyhow::Result<Option<std::net::SocketAddr>> {
    if addr.is_empty() {
        return Ok(None);
    }
    addr.parse()
        .map(Some)
        .map_err(|e| anyhow::anyhow!("--metrics-addr {addr:?}: {e}"))
}

async fn module_command(cmd: &cli::ModuleCommand) -> anyhow::Result<String> {
    match cmd {
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
