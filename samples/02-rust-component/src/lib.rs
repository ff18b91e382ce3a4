//! Sample 02: the same SDK, built for `wasm32-wasip2`, which makes a `wasi:cli/command`
//! component. It reads the ConfigMap bound under `config` (`data.team`, `data.users`: a
//! comma-separated list) and emits a Role in readiness group 0, then one RoleBinding per user
//! and a ConfigMap listing them in group 1. `TIER` from the synthesis environment becomes a
//! label on everything.

use enoki_sdk::{Error, Input, Output, Resource};

/// The synthesizer.
///
/// # Errors
/// When `config` is not bound.
pub fn synthesize(input: &Input) -> Result<Output, Error> {
    let config = input.input("config")?;
    let team = config
        .pointer("/data/team")
        .and_then(|v| v.as_str())
        .unwrap_or("team");
    let users: Vec<&str> = config
        .pointer("/data/users")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect();
    let tier = input.env("TIER").unwrap_or_else(|| "standard".into());
    let mut out = Output::default();
    out.push(
        Resource::new("rbac.authorization.k8s.io/v1", "Role", &format!("{team}-readers"))
            .label("tier", &tier)
            .readiness_group(0)
            .readiness("size(self.rules) > 0")
            .set(
                "/rules",
                serde_json::json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]),
            ),
    );
    for user in &users {
        out.push(
            Resource::new("rbac.authorization.k8s.io/v1", "RoleBinding", &format!("{team}-{user}"))
                .label("tier", &tier)
                .readiness_group(1)
                .set("/roleRef", serde_json::json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": format!("{team}-readers")}))
                .set("/subjects", serde_json::json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}])),
        );
    }
    out.push(
        Resource::new("v1", "ConfigMap", &format!("{team}-members"))
            .label("tier", &tier)
            .readiness_group(1)
            .set("/data/members", users.join(",")),
    );
    if users.is_empty() {
        out.warn(format!("team {team} has no users"));
    }
    Ok(out)
}
