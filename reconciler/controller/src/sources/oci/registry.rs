//! One pull's conversation with a registry: GETs with the bearer token or Basic credentials
//! the registry asks for, the token exchange (credentials only to a realm allowed to receive
//! them), refusals that say what was sent, and bodies read under a cap.

use std::path::Path;

use futures::TryStreamExt;
use sha2::{Digest, Sha256};

use super::token::{check_realm, credentials_may_go_to, token_realm};
use crate::sources::{
    Body, Credentials, Download, FetchPolicy, MAX_TOKEN_BYTES, SourceError, remote_text,
};

/// Accept header of a manifest request.
pub(super) const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, \
    application/vnd.docker.distribution.manifest.v2+json";

pub(crate) struct Registry {
    pub(crate) http: reqwest::Client,
    /// The client of the token exchange that sends an identity token in its body: it follows
    /// no redirect (a 307 would replay the body, the token, to wherever it points).
    pub(crate) token_http: reqwest::Client,
    pub(crate) base: String,
    pub(crate) repository: String,
    pub(crate) reference: String,
    pub(crate) insecure: bool,
    pub(crate) token: Option<String>,
    /// Sent as HTTP Basic to a registry that asks for it, and to its token realm when the
    /// realm is on the registry's host or paired with it ([`credentials_may_go_to`]).
    pub(crate) credentials: Option<Credentials>,
    /// The registry asked for Basic and we have credentials: send them with every request.
    pub(crate) basic: bool,
    /// Whether the credentials were sent (for the refusal's message).
    pub(crate) sent: bool,
    /// `host[:port]`, for messages.
    pub(crate) host: String,
}

impl Registry {
    pub(super) fn remote(&self, e: impl std::fmt::Display) -> SourceError {
        SourceError::Remote {
            action: format!("pulling {}", self.reference),
            message: remote_text(&e.to_string()),
        }
    }

    /// GET `path` (with the bearer token once there is one); on a first 401 with a Bearer
    /// challenge, fetches a pull token (its realm checked; anonymous, or with the credentials
    /// as Basic) and asks again; on a first 401 with a Basic challenge, asks again with the
    /// credentials.
    pub(super) async fn get(
        &mut self,
        path: &str,
        accept: Option<&str>,
        policy: &FetchPolicy,
    ) -> Result<reqwest::Response, SourceError> {
        for attempt in 0..2 {
            let mut req = self.http.get(format!("{}{path}", self.base));
            if let Some(a) = accept {
                req = req.header(reqwest::header::ACCEPT, a);
            }
            if let Some(t) = &self.token {
                req = req.bearer_auth(t);
            } else if self.basic
                && let Some(c) = &self.credentials
            {
                req = req.basic_auth(&c.username, Some(&c.password));
            }
            let resp = req.send().await.map_err(|e| self.remote(e))?;
            if resp.status() == reqwest::StatusCode::UNAUTHORIZED && attempt == 0 {
                let challenge = resp
                    .headers()
                    .get(reqwest::header::WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok())
                    .map(String::from)
                    .unwrap_or_default();
                if let Some(realm) = token_realm(&challenge) {
                    check_realm(&realm, self.insecure, policy)?;
                    self.token = Some(self.fetch_token(&realm, &challenge).await?);
                    continue;
                }
                if challenge
                    .trim_start()
                    .to_ascii_lowercase()
                    .starts_with("basic")
                    && let Some(c) = &self.credentials
                {
                    if c.identity_token {
                        return Err(self.remote(format!(
                            "the registry {} asks for a password and the credentials from {} \
                             hold an identity token, which only a token service accepts",
                            self.host, c.source
                        )));
                    }
                    self.basic = true;
                    self.sent = true;
                    continue;
                }
            }
            if matches!(resp.status().as_u16(), 401 | 403) {
                return Err(self.refused(resp.status()));
            }
            if !resp.status().is_success() {
                let status = resp.status();
                let body = read_capped(
                    resp.bytes_stream().map_err(|e| self.remote(e)),
                    "error body",
                    &FetchPolicy {
                        max_bytes: 4096,
                        ..*policy
                    },
                )
                .await
                .unwrap_or_default();
                return Err(self.remote(format!(
                    "{path}: {status}: {}",
                    String::from_utf8_lossy(&body)
                )));
            }
            return Ok(resp);
        }
        Err(self.refused(reqwest::StatusCode::UNAUTHORIZED))
    }

    /// A 401/403: unauthorized, naming the registry and what was sent (never the secret).
    pub(super) fn refused(&self, status: reqwest::StatusCode) -> SourceError {
        let sent = match &self.credentials {
            Some(c) if self.sent => format!("the credentials from {} were refused", c.source),
            Some(c) => format!(
                "the registry did not ask for credentials, so those from {} were not sent",
                c.source
            ),
            None => "no credentials were sent (set spec.module.pullSecret to a \
                     kubernetes.io/dockerconfigjson Secret; for the CLI, docker login)"
                .to_string(),
        };
        SourceError::Remote {
            action: format!("pulling {}", self.reference),
            message: format!(
                "unauthorized: registry {} answered {status}: {sent}",
                self.host
            ),
        }
    }
}

/// Reads a body stream, refusing it as soon as it passes the cap.
pub(crate) async fn read_capped(
    mut stream: impl futures::Stream<Item = Result<bytes::Bytes, SourceError>> + Unpin,
    what: &str,
    policy: &FetchPolicy,
) -> Result<Vec<u8>, SourceError> {
    let mut out = Vec::new();
    while let Some(chunk) = stream.try_next().await? {
        if out.len() + chunk.len() > policy.max_bytes {
            return Err(policy.too_large(what, (out.len() + chunk.len()) as u64));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// Reads a body stream as [`read_capped`] does, into memory or into a new file in `spool`,
/// with the hex SHA-256 of what was read.
pub(crate) async fn read_capped_to(
    mut stream: impl futures::Stream<Item = Result<bytes::Bytes, SourceError>> + Unpin,
    what: &str,
    policy: &FetchPolicy,
    spool: Option<&Path>,
) -> Result<(Body, String), SourceError> {
    let Some(dir) = spool else {
        let bytes = read_capped(stream, what, policy).await?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        return Ok((Body::Memory(bytes), sha256));
    };
    use tokio::io::AsyncWriteExt as _;
    let (file, mut download) = Download::create(dir)?;
    let mut file = tokio::fs::File::from_std(file);
    let mut hasher = Sha256::new();
    while let Some(chunk) = stream.try_next().await? {
        if download.len() + chunk.len() > policy.max_bytes {
            return Err(policy.too_large(what, (download.len() + chunk.len()) as u64));
        }
        hasher.update(&chunk);
        file.write_all(&chunk)
            .await
            .map_err(|e| download.unwritable(&e))?;
        download.wrote(chunk.len());
    }
    file.flush().await.map_err(|e| download.unwritable(&e))?;
    Ok((Body::File(download), hex::encode(hasher.finalize())))
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
