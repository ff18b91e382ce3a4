//! Checks and conversions of `enoki run`'s flags that take more than a parse.

use crate::{cli, run};

/// A `--qps`: 0 (no limit), or at least one request in 1000 s.
pub(crate) fn qps(flag: &str, value: f64) -> anyhow::Result<f64> {
    let min = run::ratelimit_min_qps();
    if value == 0.0 || (value.is_finite() && value >= min) {
        Ok(value)
    } else {
        anyhow::bail!("--{flag} {value}: 0 (no limit) or at least {min}")
    }
}

/// A duration flag that must not be zero.
pub(crate) fn positive(flag: &str, d: std::time::Duration) -> anyhow::Result<std::time::Duration> {
    if d.is_zero() {
        anyhow::bail!("--{flag} must be longer than 0");
    }
    Ok(d)
}

/// `--slice-key-secret` as (namespace, name), or its default (see the flag).
pub(crate) fn slice_key_secret(args: &cli::RunArgs) -> anyhow::Result<(String, String)> {
    if let Some(v) = args.slice_key_secret.as_deref().filter(|v| !v.is_empty()) {
        let (ns, name) = v
            .split_once('/')
            .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
            .ok_or_else(|| anyhow::anyhow!("--slice-key-secret {v:?}: expected NAMESPACE/NAME"))?;
        return Ok((ns.to_string(), name.to_string()));
    }
    let ns = args
        .leader_election_namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .or_else(|| args.namespace.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into());
    Ok((ns, "enoki-slice-key".into()))
}

/// `--migrating-fields` as path segments: dot-separated, no empty segment.
pub(crate) fn migrating_fields(fields: &[String]) -> anyhow::Result<Vec<Vec<String>>> {
    fields
        .iter()
        .map(|f| f.trim())
        .filter(|f| !f.is_empty())
        .map(|f| {
            let path: Vec<String> = f.split('.').map(str::to_string).collect();
            if path.iter().any(String::is_empty) {
                anyhow::bail!(
                    "--migrating-fields {f:?}: a dot-separated path has an empty segment"
                );
            }
            Ok(path)
        })
        .collect()
}

/// `--remote-namespace-map` pairs, checked: `MANAGEMENT=REMOTE`, both non-empty, each
/// management namespace once, and only with a remote target.
pub(crate) fn remote_namespace_map(
    pairs: &[String],
    remote: bool,
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let mut map = std::collections::BTreeMap::new();
    for pair in pairs.iter().filter(|p| !p.is_empty()) {
        let Some((from, to)) = pair
            .split_once('=')
            .filter(|(f, t)| !f.is_empty() && !t.is_empty())
        else {
            anyhow::bail!("--remote-namespace-map {pair:?}: expected MANAGEMENT_NS=REMOTE_NS");
        };
        if map.insert(from.to_string(), to.to_string()).is_some() {
            anyhow::bail!("--remote-namespace-map: {from:?} is mapped twice");
        }
    }
    if !map.is_empty() && !remote {
        anyhow::bail!("--remote-namespace-map needs --remote-kubeconfig");
    }
    Ok(map)
}

/// `--shards`, checked: at least one, at most [`run::shard::Shards::MAX`], and more than one
/// only with leader election.
pub(crate) fn shards(shards: u32, leader_election_namespace: Option<&str>) -> anyhow::Result<u32> {
    Ok(match (shards, leader_election_namespace) {
        (0, _) => anyhow::bail!("--shards 0: there must be at least one shard"),
        (n, _) if n > run::shard::Shards::MAX => {
            anyhow::bail!("--shards {n}: at most {} shards", run::shard::Shards::MAX)
        }
        (n, None) if n > 1 => anyhow::bail!(
            "--shards {n} needs --leader-election-namespace: each shard is held through a Lease"
        ),
        (n, _) => n,
    })
}
