//! Registry credentials: from a `kubernetes.io/dockerconfigjson` Secret (the controller, for
//! `spec.module.pullSecret`) or from the user's docker config and its credential helpers (the
//! CLI). A credential's secret part is never formatted: `Debug` prints only where it came from.

use base64::Engine;

/// A user name and password (or an identity token) for one registry, and where they came from.
#[derive(Clone)]
pub struct Credentials {
    /// User name.
    pub username: String,
    /// Password, or the identity (OAuth2 refresh) token when `identity_token`.
    pub password: String,
    /// `password` is an identity token: it is exchanged at the registry's token service for an
    /// access token (OAuth2 `grant_type=refresh_token`), never sent as a password.
    pub identity_token: bool,
    /// Where they came from, for messages (`Secret enoki-system/regcred`, `docker config`).
    pub source: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials(from {})", self.source)
    }
}

/// Secret types whose data holds a docker config, and the key each keeps it under.
pub const DOCKER_CONFIG_KEYS: &[(&str, &str)] = &[
    ("kubernetes.io/dockerconfigjson", ".dockerconfigjson"),
    ("kubernetes.io/dockercfg", ".dockercfg"),
];

/// The registry a docker config key names, without scheme, path or trailing slash
/// (`https://index.docker.io/v1/` → `index.docker.io`), Docker Hub's aliases made one.
pub fn registry_key(key: &str) -> String {
    key_parts(key).0
}

/// A docker config key as (registry host, repository path prefix): `quay.io/org-a` →
/// (`quay.io`, `org-a`); an API version path (`https://host/v1/`, as docker writes Docker
/// Hub's key) is not a repository path.
fn key_parts(key: &str) -> (String, String) {
    let rest = key
        .trim()
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let host = match host.to_ascii_lowercase().as_str() {
        "docker.io" | "registry-1.docker.io" | "index.docker.io" => "index.docker.io".to_string(),
        h => h.to_string(),
    };
    let path = path.trim_matches('/');
    let path = if matches!(path, "v1" | "v2") {
        ""
    } else {
        path
    };
    (host, path.to_string())
}

/// The credentials for `repository` of `registry` in a docker config (`{"auths": {…}}`, or the
/// legacy `.dockercfg` map without `auths`). Keys are matched as the kubelet matches them: the
/// registry's host, and of keys with a path (`quay.io/org-a`) the longest that prefixes the
/// repository. An entry's `identitytoken` wins (docker writes `auth` beside it with an empty
/// password), then `username`/`password`, then `auth` (base64 of `user:password`). `Ok(None)`
/// when the config has no entry for it.
///
/// # Errors
/// The config is not JSON, or the registry's entry is malformed; the message never quotes the
/// config's content.
pub fn from_docker_config(
    config: &[u8],
    registry: &str,
    repository: &str,
    source: &str,
) -> Result<Option<Credentials>, String> {
    let doc: serde_json::Value = serde_json::from_slice(config)
        .map_err(|e| format!("{source}: not a docker config (JSON at line {})", e.line()))?;
    let auths = doc.get("auths").unwrap_or(&doc);
    let Some(auths) = auths.as_object() else {
        return Err(format!("{source}: `auths` is not a map of registries"));
    };
    let wanted = registry_key(registry);
    let under = |path: &str| {
        path.is_empty() || repository == path || repository.starts_with(&format!("{path}/"))
    };
    let Some((_, entry)) = auths
        .iter()
        .filter_map(|(k, v)| {
            let (host, path) = key_parts(k);
            (host == wanted && under(&path)).then_some((path.len(), v))
        })
        .max_by_key(|(len, _)| *len)
    else {
        return Ok(None);
    };
    let field = |name: &str| {
        entry
            .get(name)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
    };
    let decoded_auth = || -> Result<Option<(String, String)>, String> {
        let Some(auth) = field("auth") else {
            return Ok(None);
        };
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| {
                format!("{source}: the `auth` of {wanted} is not base64 of user:password")
            })?;
        let (u, p) = decoded
            .split_once(':')
            .ok_or_else(|| format!("{source}: the `auth` of {wanted} has no ':'"))?;
        Ok(Some((u.to_string(), p.to_string())))
    };
    let made = |username: &str, password: &str, identity_token: bool| Credentials {
        username: username.to_string(),
        password: password.to_string(),
        identity_token,
        source: source.to_string(),
    };
    if let Some(token) = field("identitytoken") {
        let user = match field("username") {
            Some(u) => u.to_string(),
            None => decoded_auth()?.map(|(u, _)| u).unwrap_or_default(),
        };
        return Ok(Some(made(&user, token, true)));
    }
    if let (Some(u), Some(p)) = (field("username"), field("password")) {
        return Ok(Some(made(u, p, false)));
    }
    if let Some((u, p)) = decoded_auth()? {
        return Ok(Some(made(&u, &p, false)));
    }
    Err(format!(
        "{source}: the entry of {wanted} has no username/password, auth or identitytoken"
    ))
}

/// How long a `docker-credential-*` helper may take to answer: 30 s, or
/// `ENOKI_CREDENTIAL_HELPER_TIMEOUT` (humantime).
fn helper_timeout() -> std::time::Duration {
    std::env::var("ENOKI_CREDENTIAL_HELPER_TIMEOUT")
        .ok()
        .and_then(|v| humantime::parse_duration(&v).ok())
        .unwrap_or(std::time::Duration::from_secs(30))
}

/// The user's credentials for `registry`: the docker config (`$DOCKER_CONFIG/config.json`,
/// else `~/.docker/config.json`), including `credsStore` and `credHelpers` (the
/// `docker-credential-<name>` programs). `None` when there are none (an anonymous request).
pub fn from_user_config(registry: &str) -> Option<Credentials> {
    let source = "docker config".to_string();
    // docker and the credential helpers key Docker Hub by its v1 URL.
    let key = match registry_key(registry).as_str() {
        "index.docker.io" => "https://index.docker.io/v1/".to_string(),
        other => other.to_string(),
    };
    // A credential helper is a program: one that never answers costs at most
    // its timeout (it is left to end on its thread), never a worker held for good.
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("credential-helper".into())
        .spawn(move || {
            let _ = tx.send(docker_credential::get_credential(&key));
        })
        .ok()?;
    let timeout = helper_timeout();
    let Ok(answer) = rx.recv_timeout(timeout) else {
        tracing::warn!(
            registry,
            ?timeout,
            "the docker credential helper did not answer; pulling without credentials"
        );
        return None;
    };
    match answer {
        Ok(docker_credential::DockerCredential::UsernamePassword(username, password)) => {
            Some(Credentials {
                username,
                password,
                identity_token: false,
                source,
            })
        }
        Ok(docker_credential::DockerCredential::IdentityToken(token)) => Some(Credentials {
            username: String::new(),
            password: token,
            identity_token: true,
            source,
        }),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn find(config: &str, registry: &str, repository: &str) -> Option<Credentials> {
        from_docker_config(config.as_bytes(), registry, repository, "Secret a/b").unwrap()
    }

    #[test]
    fn docker_config_entries_are_found_by_registry_whatever_the_key_form() {
        let config = format!(
            r#"{{"auths": {{"https://reg.example:5000/v1/": {{"auth": "{}"}},
                "index.docker.io": {{"username": "u", "password": "p"}}}}}}"#,
            b64("alice:s3cr:et")
        );
        let c = find(&config, "reg.example:5000", "team/app").unwrap();
        assert_eq!(
            (c.username.as_str(), c.password.as_str()),
            ("alice", "s3cr:et")
        );
        assert!(!c.identity_token);
        assert_eq!(
            find(&config, "docker.io", "library/x").unwrap().username,
            "u"
        );
        assert!(find(&config, "other:1", "x").is_none());
        // Legacy .dockercfg: the map itself.
        let legacy = format!(r#"{{"reg:1": {{"auth": "{}"}}}}"#, b64("x:y"));
        assert!(find(&legacy, "reg:1", "x").is_some());
    }

    #[test]
    fn path_scoped_keys_match_the_longest_prefix_of_the_repository() {
        let config = format!(
            r#"{{"auths": {{"quay.io": {{"auth": "{}"}}, "quay.io/org-a": {{"auth": "{}"}},
                "quay.io/org-ab": {{"auth": "{}"}}}}}}"#,
            b64("any:1"),
            b64("a:2"),
            b64("ab:3")
        );
        let user = |repo: &str| find(&config, "quay.io", repo).unwrap().username;
        assert_eq!(user("org-a/app"), "a");
        assert_eq!(user("org-ab/app"), "ab");
        assert_eq!(user("org-b/app"), "any");
    }

    #[test]
    fn an_identity_token_wins_over_the_empty_password_docker_writes_beside_it() {
        let config = format!(
            r#"{{"auths": {{"acr.example": {{"auth": "{}", "identitytoken": "refresh-xyz"}}}}}}"#,
            b64("00000000-0000-0000-0000-000000000000:")
        );
        let c = find(&config, "acr.example", "app").unwrap();
        assert!(c.identity_token);
        assert_eq!(c.password, "refresh-xyz");
        assert_eq!(c.username, "00000000-0000-0000-0000-000000000000");
    }

    #[test]
    fn malformed_configs_are_refused_without_quoting_them() {
        let bad = r#"{"auths": {"r:1": {"auth": "!!hunter2"}}}"#;
        let e = from_docker_config(bad.as_bytes(), "r:1", "x", "Secret a/b").unwrap_err();
        assert!(e.contains("Secret a/b") && !e.contains("hunter2"), "{e}");
        let e = from_docker_config(b"hunter2", "r:1", "x", "Secret a/b").unwrap_err();
        assert!(!e.contains("hunter2"), "{e}");
        let c = Credentials {
            username: "u".into(),
            password: "hunter2".into(),
            identity_token: false,
            source: "Secret a/b".into(),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
