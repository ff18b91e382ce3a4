//! Registry tokens: which token services may receive a registry's credentials (the same
//! host, known pairs, or `ENOKI_REGISTRY_TOKEN_REALMS`), their realms and their HTTP client.

use crate::sources::{CONNECT_TIMEOUT, FetchPolicy, READ_TIMEOUT, SourceError, install_crypto};

/// Token services on another host than their registry's that receive its credentials without
/// configuration: (registry host, realm host).
pub const KNOWN_TOKEN_REALMS: &[(&str, &str)] = &[
    ("registry-1.docker.io", "auth.docker.io"),
    ("index.docker.io", "auth.docker.io"),
    ("docker.io", "auth.docker.io"),
    ("registry.gitlab.com", "gitlab.com"),
    ("registry.digitalocean.com", "api.digitalocean.com"),
];

/// More (registry host, realm host) pairs, from `ENOKI_REGISTRY_TOKEN_REALMS`
/// (`registry.example.com=auth.example.com,…`), for self-hosted registries whose token
/// service has a host of its own.
pub(super) fn configured_token_realms() -> &'static [(String, String)] {
    static PAIRS: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    PAIRS.get_or_init(|| {
        std::env::var("ENOKI_REGISTRY_TOKEN_REALMS")
            .unwrap_or_default()
            .split(',')
            .filter_map(|p| {
                let (r, a) = p.split_once('=')?;
                Some((r.trim().to_ascii_lowercase(), a.trim().to_ascii_lowercase()))
            })
            .filter(|(r, a)| !r.is_empty() && !a.is_empty())
            .collect()
    })
}

/// Whether a registry's credentials may go to the token service at `realm`: its host is the
/// registry's host (any port), or the pair is a known one ([`KNOWN_TOKEN_REALMS`]) or one
/// configured in `ENOKI_REGISTRY_TOKEN_REALMS`, over `https://`. Anything else is refused:
/// sharing a domain proves nothing (`evil.azurecr.io` is not `team.azurecr.io`'s).
pub fn credentials_may_go_to(realm: &str, registry_host: &str) -> bool {
    may_go_to_with(realm, registry_host, configured_token_realms())
}

/// [`credentials_may_go_to`] with the configured pairs given. Pure.
pub fn may_go_to_with(realm: &str, registry_host: &str, extra: &[(String, String)]) -> bool {
    let Ok(url) = reqwest::Url::parse(realm) else {
        return false;
    };
    let Some(realm_host) = url.host_str() else {
        return false;
    };
    let realm_host = realm_host.trim_end_matches('.').to_ascii_lowercase();
    let registry = registry_host
        .rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(registry_host, |(host, _)| host)
        .trim_end_matches('.')
        .to_ascii_lowercase();
    if realm_host == registry {
        return true;
    }
    let paired = KNOWN_TOKEN_REALMS
        .iter()
        .any(|(r, a)| *r == registry && *a == realm_host)
        || extra
            .iter()
            .any(|(r, a)| *r == registry && *a == realm_host);
    url.scheme() == "https" && paired
}

/// The HTTP client of the refresh-token exchange: timeouts and the extra CA, no redirects.
pub(super) fn token_client(extra_ca: Option<&[u8]>) -> Result<reqwest::Client, SourceError> {
    install_crypto();
    let mut builder = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none());
    if let Some(pem) = extra_ca {
        let cert = reqwest::Certificate::from_pem(pem)
            .map_err(|e| SourceError::Invalid(format!("CA file: {e}")))?;
        builder = builder.add_root_certificate(cert);
    }
    builder
        .build()
        .map_err(|e| SourceError::Invalid(format!("HTTP client: {e}")))
}

/// The `realm` of a `Bearer` challenge.
pub fn token_realm(www_authenticate: &str) -> Option<String> {
    let rest = www_authenticate.trim().strip_prefix("Bearer")?;
    rest.split(',').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k.trim().eq_ignore_ascii_case("realm")).then(|| v.trim().trim_matches('"').to_string())
    })
}

/// Whether a token realm may be followed: the redirect rule, except that a registry reached
/// over plain HTTP (a local or explicitly insecure one) may use an http realm.
///
/// # Errors
/// [`SourceError::Invalid`] naming the realm and the rule.
pub fn check_realm(
    realm: &str,
    insecure_registry: bool,
    policy: &FetchPolicy,
) -> Result<(), SourceError> {
    let url = reqwest::Url::parse(realm)
        .map_err(|e| SourceError::Invalid(format!("token realm {realm:?}: {e}")))?;
    if insecure_registry {
        return Ok(());
    }
    policy
        .check_redirect(&url)
        .map_err(|e| SourceError::Invalid(format!("token realm: {e}")))
}
