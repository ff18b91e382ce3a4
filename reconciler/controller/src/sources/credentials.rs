//! Registry credentials: from a `kubernetes.io/dockerconfigjson` Secret (the controller, for
//! `spec.module.pullSecret`) or from the user's docker config and its credential helpers (the
//! CLI). A credential's secret part is never formatted: `Debug` prints only where it came from.

use base64::Engine;

/// A user name and password (or token) for one registry, and where they came from.
#[derive(Clone)]
pub struct Credentials {
    /// User name (for an identity token: `<token>`, as docker writes it).
    pub username: String,
    /// Password or token.
    pub password: String,
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
    let host = key
        .trim()
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let host = host
        .split('/')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    match host.as_str() {
        "docker.io" | "registry-1.docker.io" | "index.docker.io" => "index.docker.io".into(),
        _ => host,
    }
}

/// The credentials for `registry` in a docker config (`{"auths": {…}}`, or the legacy
/// `.dockercfg` map without `auths`): `username`/`password`, else `auth` (base64 of
/// `user:password`), else `identitytoken`. `Ok(None)` when the config has no entry for it.
///
/// # Errors
/// The config is not JSON, or the registry's entry is malformed; the message never quotes the
/// config's content.
pub fn from_docker_config(
    config: &[u8],
    registry: &str,
    source: &str,
) -> Result<Option<Credentials>, String> {
    let doc: serde_json::Value = serde_json::from_slice(config)
        .map_err(|e| format!("{source}: not a docker config (JSON at line {})", e.line()))?;
    let auths = doc.get("auths").unwrap_or(&doc);
    let Some(auths) = auths.as_object() else {
        return Err(format!("{source}: `auths` is not a map of registries"));
    };
    let wanted = registry_key(registry);
    let Some(entry) = auths
        .iter()
        .find_map(|(k, v)| (registry_key(k) == wanted).then_some(v))
    else {
        return Ok(None);
    };
    let field = |name: &str| {
        entry
            .get(name)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
    };
    let made = |username: &str, password: &str| Credentials {
        username: username.to_string(),
        password: password.to_string(),
        source: source.to_string(),
    };
    if let (Some(u), Some(p)) = (field("username"), field("password")) {
        return Ok(Some(made(u, p)));
    }
    if let Some(auth) = field("auth") {
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
        return Ok(Some(made(u, p)));
    }
    if let Some(token) = field("identitytoken") {
        return Ok(Some(made("<token>", token)));
    }
    Err(format!(
        "{source}: the entry of {wanted} has no username/password, auth or identitytoken"
    ))
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
    match docker_credential::get_credential(&key) {
        Ok(docker_credential::DockerCredential::UsernamePassword(username, password)) => {
            Some(Credentials {
                username,
                password,
                source,
            })
        }
        Ok(docker_credential::DockerCredential::IdentityToken(token)) => Some(Credentials {
            username: "<token>".into(),
            password: token,
            source,
        }),
        Err(_) => None,
    }
}

/// The user's credentials for the registry of an OCI reference ([`from_user_config`]); `None`
/// for an unparsable reference (the pull reports that) or when there are none.
pub fn for_reference(reference: &str) -> Option<Credentials> {
    let r = super::parse_reference(reference).ok()?;
    from_user_config(r.resolve_registry())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn docker_config_entries_are_found_by_registry_whatever_the_key_form() {
        let config = format!(
            r#"{{"auths": {{"https://reg.example:5000/v1/": {{"auth": "{}"}},
                "index.docker.io": {{"username": "u", "password": "p"}}}}}}"#,
            b64("alice:s3cr:et")
        );
        let c = from_docker_config(config.as_bytes(), "reg.example:5000", "Secret a/b")
            .unwrap()
            .unwrap();
        assert_eq!(
            (c.username.as_str(), c.password.as_str()),
            ("alice", "s3cr:et")
        );
        let hub = from_docker_config(config.as_bytes(), "docker.io", "s")
            .unwrap()
            .unwrap();
        assert_eq!(hub.username, "u");
        assert!(
            from_docker_config(config.as_bytes(), "other:1", "s")
                .unwrap()
                .is_none()
        );
        // Legacy .dockercfg: the map itself.
        let legacy = format!(r#"{{"reg:1": {{"auth": "{}"}}}}"#, b64("x:y"));
        assert!(
            from_docker_config(legacy.as_bytes(), "reg:1", "s")
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn malformed_configs_are_refused_without_quoting_them() {
        let e = from_docker_config(
            b"{\"auths\": {\"r:1\": {\"auth\": \"!!hunter2\"}}}",
            "r:1",
            "Secret a/b",
        )
        .unwrap_err();
        assert!(e.contains("Secret a/b") && !e.contains("hunter2"), "{e}");
        let e = from_docker_config(b"hunter2", "r:1", "Secret a/b").unwrap_err();
        assert!(!e.contains("hunter2"), "{e}");
        let c = Credentials {
            username: "u".into(),
            password: "hunter2".into(),
            source: "Secret a/b".into(),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
