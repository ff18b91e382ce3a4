//! Registry tokens: which token services may receive a registry's credentials (the same
//! host, known pairs, or `ENOKI_REGISTRY_TOKEN_REALMS`), their realms and their HTTP client.

use super::*;

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

impl Registry {
    /// A pull token from the challenge's realm: anonymous; with the credentials as Basic; or,
    /// for an identity token, the OAuth2 refresh-token exchange docker makes (`POST`
    /// `grant_type=refresh_token`). Credentials go only to a realm on the registry's host or
    /// known token service ([`credentials_may_go_to`]).
    pub(super) async fn fetch_token(
        &mut self,
        realm: &str,
        challenge: &str,
    ) -> Result<String, SourceError> {
        let (scope, service) = scope_and_service(challenge, &self.repository);
        let credentials = match &self.credentials {
            Some(c) if !credentials_may_go_to(realm, &self.host) => {
                return Err(SourceError::Invalid(format!(
                    "the token service {realm:?} of registry {} is not on its host: the \
                     credentials from {} are not sent there (a token service of its own is \
                     named in ENOKI_REGISTRY_TOKEN_REALMS as registry=realm host)",
                    self.host, c.source
                )));
            }
            other => other.clone(),
        };
        let req = self.token_request(realm, credentials.as_ref(), &scope, service.as_deref());
        self.sent = credentials.is_some();
        let resp = req.send().await.map_err(|e| self.remote(e))?;
        let status = resp.status();
        if matches!(status.as_u16(), 401 | 403) {
            return Err(self.refused(status));
        }
        let body = read_capped(
            resp.bytes_stream().map_err(|e| self.remote(e)),
            "token response",
            &FetchPolicy {
                max_bytes: MAX_TOKEN_BYTES,
                ..FetchPolicy::default()
            },
        )
        .await?;
        if !status.is_success() {
            return Err(self.remote(format!(
                "token: {status}: {}",
                String::from_utf8_lossy(&body)
            )));
        }
        let v: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| self.remote(format!("token: {e}")))?;
        v.get("token")
            .or_else(|| v.get("access_token"))
            .and_then(|t| t.as_str())
            .map(String::from)
            .ok_or_else(|| self.remote("token: the response holds no token"))
    }

    /// The token request: the refresh-token exchange for an identity token (on the client
    /// that follows no redirect), else a GET, with the credentials as Basic when there are.
    fn token_request(
        &self,
        realm: &str,
        credentials: Option<&Credentials>,
        scope: &str,
        service: Option<&str>,
    ) -> reqwest::RequestBuilder {
        match credentials {
            Some(c) if c.identity_token => {
                let mut form = url::form_urlencoded::Serializer::new(String::new());
                form.append_pair("grant_type", "refresh_token")
                    .append_pair("refresh_token", &c.password)
                    .append_pair("client_id", "enoki")
                    .append_pair("scope", scope);
                if let Some(service) = service {
                    form.append_pair("service", service);
                }
                self.token_http
                    .post(realm)
                    .header(
                        reqwest::header::CONTENT_TYPE,
                        "application/x-www-form-urlencoded",
                    )
                    .body(form.finish())
            }
            other => {
                let mut req = self.http.get(realm).query(&[("scope", scope)]);
                if let Some(service) = service {
                    req = req.query(&[("service", service)]);
                }
                if let Some(c) = other {
                    req = req.basic_auth(&c.username, Some(&c.password));
                }
                req
            }
        }
    }
}

/// The `scope` of a Bearer challenge (pull of `repository` when it names none), and its
/// `service`.
fn scope_and_service(challenge: &str, repository: &str) -> (String, Option<String>) {
    let param = |name: &str| {
        challenge.split(',').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            let k = k.trim().trim_start_matches("Bearer").trim();
            k.eq_ignore_ascii_case(name)
                .then(|| v.trim().trim_matches('"').to_string())
        })
    };
    let scope = param("scope").unwrap_or_else(|| format!("repository:{repository}:pull"));
    (scope, param("service"))
}
