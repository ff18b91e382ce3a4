//! `enoki run`'s options from its flags, group by group of [`run::Options`] (the larger groups
//! and the sandbox have a builder of their own). The sandbox is checked first, as before the
//! grouping: with several bad flags, the first error named is the same.

use crate::flags::*;
use crate::{COMPILE_PROGRAM, cli, run, sources};

/// The controller's options from `enoki run`'s flags, group by group.
pub(crate) fn options(args: &cli::RunArgs) -> anyhow::Result<run::Options> {
    let parse = duration;
    // First, as always: its cross-check (`--synthesis-output` within `--max-synthesis-output`)
    // is the error named when several flags are wrong.
    let sandbox = sandbox(args)?;
    Ok(run::Options {
        scope: run::ScopeOptions {
            namespace: args.namespace.clone(),
            label_selector: args.label_selector.clone(),
            instance_namespace: args.instance_namespace.clone(),
        },
        cluster: cluster(args)?,
        tenancy: run::TenancyOptions {
            no_cross_namespace_refs: args.no_cross_namespace_refs,
            default_service_account: args
                .default_service_account
                .clone()
                .filter(|s| !s.is_empty()),
            controller_namespace: std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|n| !n.is_empty()),
            remote_namespace_map: remote_namespace_map(
                &args.remote_namespace_map,
                args.remote_kubeconfig.is_some(),
            )?,
        },
        apply: apply(args)?,
        synthesis: synthesis(args)?,
        modules: modules(args)?,
        storage: storage(args)?,
        sandbox,
        concurrency: args.concurrency,
        shutdown_grace: parse("shutdown-grace", &args.shutdown_grace)?,
        resync: parse("resync", &args.resync)?,
        metrics_addr: metrics_addr(&args.metrics_addr)?,
        leader_election: args
            .leader_election_namespace
            .clone()
            .map(|ns| (ns, args.lease_duration_secs.max(1))),
        shards: shards(args.shards, args.leader_election_namespace.as_deref())?,
        stuck_threshold: parse("stuck-threshold", &args.stuck_threshold)?,
    })
}

/// The clusters and their request rates.
fn cluster(args: &cli::RunArgs) -> anyhow::Result<run::ClusterOptions> {
    Ok(run::ClusterOptions {
        qps: qps("qps", args.qps)?,
        burst: args.burst,
        remote_qps: qps("remote-qps", args.remote_qps)?,
        remote_burst: args.remote_burst,
        remote_kubeconfig: args.remote_kubeconfig.clone(),
        kubeconfig: args.cluster.kubeconfig.clone(),
        context: args.cluster.context.clone(),
    })
}

/// How emitted objects are written and checked.
fn apply(args: &cli::RunArgs) -> anyhow::Result<run::ApplyOptions> {
    let parse = duration;
    Ok(run::ApplyOptions {
        mode: if args.disable_ssa {
            plan::ApplyMode::ClientSide
        } else {
            plan::ApplyMode::ServerSide
        },
        apply_concurrency: args.apply_concurrency.max(1),
        readiness_poll: parse("readiness-poll", &args.readiness_poll)?,
        min_reconcile_interval: parse("min-reconcile-interval", &args.min_reconcile_interval)?,
        migrating_field_managers: migrating_field_managers(&args.migrating_field_managers),
        migrating_fields: migrating_fields(&args.migrating_fields)?,
        fail_open: args.fail_open,
        resource_filter: resource_filter(args)?,
        timeout: positive("timeout", parse("timeout", &args.timeout)?)?,
    })
}

/// When and how syntheses run.
fn synthesis(args: &cli::RunArgs) -> anyhow::Result<run::SynthesisOptions> {
    let parse = duration;
    Ok(run::SynthesisOptions {
        lepton_persistent_volumes: args.lepton_persistent_volumes,
        max_concurrent_syntheses: max_concurrent_syntheses(args.max_concurrent_syntheses),
        capabilities_refresh: at_least_a_second(
            "capabilities-refresh",
            parse("capabilities-refresh", &args.capabilities_refresh)?,
        )?,
        rollout_cooldown: parse("rollout-cooldown", &args.rollout_cooldown)?,
        rollout_strategy: if args.rollout_strategy == "progressive" {
            crds::RolloutStrategy::Progressive
        } else {
            crds::RolloutStrategy::Cooldown
        },
        revision_history_limit: args.revision_history_limit,
        // The coordinator runs with the Synthesizer controller, which a namespace-scoped
        // controller does not run.
        rollouts: args.namespace.is_none()
            && args.rollouts.unwrap_or(args.label_selector.is_none()),
        synthesis_rates: synthesis_rates(args)?,
        serve_eno_api: args.serve_eno_api,
    })
}

/// Where modules come from and how many are kept compiled.
fn modules(args: &cli::RunArgs) -> anyhow::Result<run::ModuleOptions> {
    Ok(run::ModuleOptions {
        module_cache_bytes: args.module_cache_mib.saturating_mul(1024 * 1024),
        module_cache_dir_bytes: args.module_cache_dir_mib.saturating_mul(1024 * 1024),
        module_cache_dir: args.module_cache_dir.clone(),
        builtins: cli::parse_builtins(&args.builtins)
            .map_err(|e| anyhow::anyhow!("--builtins: {e}"))?,
        module_ca: args
            .module_ca_file
            .as_ref()
            .map(|p| {
                std::fs::read(p)
                    .map_err(|e| anyhow::anyhow!("--module-ca-file {}: {e}", p.display()))
            })
            .transpose()?,
        helm_module: Some(args.helm_module.clone()).filter(|m| !m.is_empty()),
    })
}

/// What enoki stores and keeps in memory, and its bounds.
fn storage(args: &cli::RunArgs) -> anyhow::Result<run::StorageOptions> {
    Ok(run::StorageOptions {
        plan_cache_resources: args.plan_cache_resources.max(1),
        namespace_slice_bytes: quantity("namespace-slice-budget", &args.namespace_slice_budget)?,
        max_symphony_bytes: quantity("max-symphony-bytes", &args.max_symphony_bytes)?,
        slice_cache_whole: args.slice_cache == "whole",
        slice_key_secret: slice_key_secret(args)?,
    })
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
    crate::synthesis::parse_quantity(v).map_err(|e| anyhow::anyhow!("--{flag} {v:?}: {e}"))
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
