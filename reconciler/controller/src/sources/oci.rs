//! OCI modules: pulls by digest with enoki's own HTTP client (bearer tokens, redirects under the
//! redirect rule, capped reads, verified digests) and pushes (`enoki module push`).

use super::*;

mod registry;
mod token;
pub(super) use registry::read_capped_to;
use registry::{MANIFEST_TYPES, Registry, read_capped};
use token::token_client;
pub use token::{
    KNOWN_TOKEN_REALMS, check_realm, credentials_may_go_to, may_go_to_with, token_realm,
};

/// Pulls a module pinned by digest (`registry/repo:tag@sha256:…`) and verifies the manifest
/// digest, the layer's size and the layer's digest. Tag-only references are refused: a tag can
/// move, a digest cannot. The pull is enoki's own HTTP client: redirects follow the policy's
/// rule (a local or insecure registry may redirect only to itself), every body is capped while
/// it streams, connections and reads time out, and the whole pull ends after
/// [`PULL_TIMEOUT`].
///
/// # Errors
/// Tag-only references, registry failures (with at most [`MAX_REMOTE_TEXT`] bytes of the
/// registry's answer), a refusal (401/403: "unauthorized", naming the registry and whether
/// credentials were sent), a timeout, a digest mismatch, an artifact without a wasm layer, a
/// layer over the size cap, a token realm the policy refuses.
pub async fn pull(
    reference: &str,
    policy: &FetchPolicy,
    credentials: Option<&Credentials>,
    extra_ca: Option<&[u8]>,
) -> Result<Vec<u8>, SourceError> {
    pull_layer(
        reference,
        WASM_LAYER_MEDIA_TYPE,
        policy,
        credentials,
        extra_ca,
    )
    .await
}

/// [`pull`] of the layer of another media type (a Helm chart's
/// [`HELM_CHART_LAYER_MEDIA_TYPE`]), with the same checks.
///
/// # Errors
/// As [`pull`].
pub async fn pull_layer(
    reference: &str,
    media_type: &str,
    policy: &FetchPolicy,
    credentials: Option<&Credentials>,
    extra_ca: Option<&[u8]>,
) -> Result<Vec<u8>, SourceError> {
    pull_layer_to(
        reference,
        media_type,
        policy,
        credentials,
        extra_ca,
        None,
        None,
    )
    .await?
    .into_memory()
}

/// Whether the caller already has the content of a digest (`sha256:<hex>`).
pub type Known<'a> = &'a (dyn Fn(&str) -> bool + Send + Sync);

/// [`pull_layer`] into a new file in `spool` (a private directory) when given: the layer
/// streams to disk, hashed on the way, and is never held in memory. When `known` says the
/// layer's digest (from the verified manifest) is known, the layer is not downloaded:
/// [`Body::Known`].
///
/// # Errors
/// As [`pull`]; a file that cannot be written.
pub async fn pull_layer_to(
    reference: &str,
    media_type: &str,
    policy: &FetchPolicy,
    credentials: Option<&Credentials>,
    extra_ca: Option<&[u8]>,
    spool: Option<&Path>,
    known: Option<Known<'_>>,
) -> Result<Body, SourceError> {
    match tokio::time::timeout(
        policy.timeout,
        pull_unbounded(
            reference,
            media_type,
            policy,
            credentials,
            extra_ca,
            spool,
            known,
        ),
    )
    .await
    {
        Ok(result) => result,
        Err(_) => Err(SourceError::Remote {
            action: format!("pulling {reference}"),
            message: format!(
                "the registry did not complete the pull within {:?} (--module-fetch-timeout)",
                policy.timeout
            ),
        }),
    }
}

/// The HTTP client of one pull: timeouts, the extra CA, and redirects under the rule (a local
/// or insecure registry may redirect only to itself).
fn registry_client(
    registry_host: &str,
    insecure: bool,
    policy: &FetchPolicy,
    extra_ca: Option<&[u8]>,
) -> Result<reqwest::Client, SourceError> {
    install_crypto();
    let rule = *policy;
    let home = registry_host.to_string();
    let mut builder = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT);
    if let Some(pem) = extra_ca {
        let cert = reqwest::Certificate::from_pem(pem)
            .map_err(|e| SourceError::Invalid(format!("CA file: {e}")))?;
        builder = builder.add_root_certificate(cert);
    }
    builder
        .redirect(reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= 5 {
                return attempt.error("more than 5 redirects");
            }
            let to_home = attempt
                .url()
                .host_str()
                .map(|h| match attempt.url().port() {
                    Some(p) => format!("{h}:{p}"),
                    None => h.to_string(),
                })
                .is_some_and(|h| h == home);
            if insecure && to_home {
                return attempt.follow();
            }
            match rule.check_redirect(attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(e) => attempt.error(e),
            }
        }))
        .build()
        .map_err(|e| SourceError::Remote {
            action: "building the HTTPS client".into(),
            message: e.to_string(),
        })
}

pub(super) async fn pull_unbounded(
    reference: &str,
    media_type: &str,
    policy: &FetchPolicy,
    credentials: Option<&Credentials>,
    extra_ca: Option<&[u8]>,
    spool: Option<&Path>,
    known: Option<Known<'_>>,
) -> Result<Body, SourceError> {
    let r = parse_reference(reference)?;
    let Some(pinned) = r.digest().map(String::from) else {
        return Err(SourceError::Invalid(format!(
            "{reference:?} has no digest: pin the module as <registry>/<repo>:<tag>@sha256:<digest> (tag-only references are refused because tags can move)"
        )));
    };
    let mut reg = open_registry(&r, reference, policy, credentials, extra_ca)?;
    let (digest, declared) = layer_of(&mut reg, &pinned, media_type, policy).await?;
    let what = format!("layer {digest} of {reference}");
    if declared > policy.max_bytes as u64 {
        return Err(policy.too_large(&what, declared));
    }
    if known.is_some_and(|known| known(&digest)) {
        return Ok(Body::Known {
            digest,
            size: usize::try_from(declared).unwrap_or(0),
        });
    }
    let path = format!("{}/blobs/{digest}", reg.repository);
    let resp = reg.get(&path, None, policy).await?;
    if let Some(len) = resp.content_length()
        && len > policy.max_bytes as u64
    {
        return Err(policy.too_large(&what, len));
    }
    let (body, sha256) = read_capped_to(
        resp.bytes_stream().map_err(|e| reg.remote(e)),
        &what,
        policy,
        spool,
    )
    .await?;
    let got = format!("sha256:{sha256}");
    if got != digest {
        return Err(SourceError::DigestMismatch {
            expected: digest,
            actual: got,
        });
    }
    Ok(body)
}

/// A client of the registry `r` names, for one pull.
fn open_registry(
    r: &oci_client::Reference,
    reference: &str,
    policy: &FetchPolicy,
    credentials: Option<&Credentials>,
    extra_ca: Option<&[u8]>,
) -> Result<Registry, SourceError> {
    let registry_host = r.resolve_registry().to_string();
    let insecure = insecure_registries(r).contains(&registry_host);
    let scheme = if insecure { "http" } else { "https" };
    Ok(Registry {
        http: registry_client(&registry_host, insecure, policy, extra_ca)?,
        token_http: token_client(extra_ca)?,
        base: format!("{scheme}://{registry_host}/v2/"),
        repository: r.repository().to_string(),
        reference: reference.to_string(),
        insecure,
        token: None,
        credentials: credentials.cloned(),
        basic: false,
        sent: false,
        host: registry_host,
    })
}

/// `reference` pinned, once the registry shows its manifest has a `media_type` layer (a
/// container image has none): a tag (`registry/repo:tag`, or `latest` when none) resolved to
/// the digest of the manifest the registry serves for it now; a reference with a digest as it
/// is (the manifest checked against it).
///
/// # Errors
/// As [`pull`]; a manifest without a `media_type` layer.
pub async fn resolve(
    reference: &str,
    media_type: &str,
    policy: &FetchPolicy,
    credentials: Option<&Credentials>,
    extra_ca: Option<&[u8]>,
) -> Result<String, SourceError> {
    let r = parse_reference(reference)?;
    let mut reg = open_registry(&r, reference, policy, credentials, extra_ca)?;
    let pinned = r.digest().map(str::to_string);
    let tag = r.tag().unwrap_or("latest").to_string();
    let at = pinned.clone().unwrap_or(tag);
    let (manifest, digest) = manifest_at(&mut reg, &at, pinned.as_deref(), policy).await?;
    let layers = manifest["layers"].as_array().into_iter().flatten();
    if !layers.clone().any(|l| l["mediaType"] == media_type) {
        let found: Vec<String> = layers
            .filter_map(|l| l["mediaType"].as_str().map(remote_text))
            .collect();
        return Err(SourceError::Invalid(format!(
            "{reference} is not a WebAssembly module: its manifest has no {media_type} layer \
             (layers: {})",
            if found.is_empty() {
                "none".into()
            } else {
                found.join(", ")
            }
        )));
    }
    if r.digest().is_some() {
        return Ok(reference.to_string());
    }
    let base = reference.split('@').next().unwrap_or(reference);
    let base = if r.tag().is_none() {
        format!("{base}:latest")
    } else {
        base.to_string()
    };
    Ok(format!("{base}@{digest}"))
}

/// The manifest at `at` (a tag or a digest), capped, parsed, with its digest — checked
/// against `expected` when given.
async fn manifest_at(
    reg: &mut Registry,
    at: &str,
    expected: Option<&str>,
    policy: &FetchPolicy,
) -> Result<(serde_json::Value, String), SourceError> {
    let path = format!("{}/manifests/{at}", reg.repository);
    let resp = reg.get(&path, Some(MANIFEST_TYPES), policy).await?;
    let body = read_capped(
        resp.bytes_stream().map_err(|e| reg.remote(e)),
        "manifest",
        &FetchPolicy {
            max_bytes: MAX_MANIFEST_BYTES,
            ..*policy
        },
    )
    .await?;
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(&body)));
    if let Some(expected) = expected.filter(|e| *e != digest) {
        return Err(SourceError::DigestMismatch {
            expected: expected.to_string(),
            actual: digest,
        });
    }
    let manifest = serde_json::from_slice(&body).map_err(|e| {
        SourceError::Invalid(format!("{}: the manifest is not JSON: {e}", reg.reference))
    })?;
    Ok((manifest, digest))
}

/// The digest and declared size of the `media_type` layer of the manifest `pinned` (checked
/// against its digest).
async fn layer_of(
    reg: &mut Registry,
    pinned: &str,
    media_type: &str,
    policy: &FetchPolicy,
) -> Result<(String, u64), SourceError> {
    let reference = reg.reference.clone();
    let (manifest, _) = manifest_at(reg, pinned, Some(pinned), policy).await?;
    let layer = manifest["layers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["mediaType"] == media_type)
        .ok_or_else(|| SourceError::Invalid(format!("{reference} has no {media_type} layer")))?;
    let declared = layer["size"].as_u64().unwrap_or(u64::MAX);
    let digest = layer["digest"].as_str().unwrap_or_default().to_string();
    if !digest.starts_with("sha256:")
        || digest.len() != 71
        || !digest[7..].bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Err(SourceError::Invalid(format!(
            "{reference}: layer digest {:?} is not a sha256 digest",
            remote_text(&digest)
        )));
    }
    Ok((digest, declared))
}

/// Publishes a module as an OCI artifact and returns the manifest digest (`sha256:…`), with
/// the user's credentials for the registry ([`from_user_config`]: docker config and
/// credential helpers) when there are any.
///
/// # Errors
/// An unreadable file or a registry failure.
pub async fn push(file: &Path, reference: &str) -> Result<String, SourceError> {
    let bytes = std::fs::read(file)
        .map_err(|e| SourceError::Invalid(format!("{}: {e}", file.display())))?;
    let r = parse_reference(reference)?;
    let auth = match from_user_config(r.resolve_registry()) {
        Some(c) if c.identity_token => {
            return Err(SourceError::Invalid(format!(
                "the {} login for {} is an identity token, which enoki module push does not \
                 exchange: log in with a user name and password or access token",
                c.source,
                r.resolve_registry()
            )));
        }
        Some(c) => RegistryAuth::Basic(c.username, c.password),
        None => RegistryAuth::Anonymous,
    };
    let c = client(&insecure_registries(&r));
    let layer = ImageLayer::new(bytes, WASM_LAYER_MEDIA_TYPE.to_string(), None);
    let config = Config::new(b"{}".to_vec(), WASM_CONFIG_MEDIA_TYPE.to_string(), None);
    c.push(&r, &[layer], config, &auth, None)
        .await
        .map_err(|e| SourceError::Remote {
            action: format!("pushing to {reference}"),
            message: e.to_string(),
        })?;
    let (_, digest) = c
        .pull_manifest(&r, &auth)
        .await
        .map_err(|e| SourceError::Remote {
            action: format!("reading back {reference}"),
            message: e.to_string(),
        })?;
    Ok(digest)
}

#[cfg(test)]
mod token_service_tests {
    //! The token-service protocol of a registry (RFC 6750 challenge, docker's token service
    //! with Basic credentials, the OAuth2 refresh-token exchange for identity tokens) against a
    //! small HTTP server started here: the protocol only. The e2e against a real registry
    //! process is `tests/tests/modules.rs`.
    use super::*;
    use axum::extract::State;
    use axum::http::{HeaderMap, StatusCode, header};
    use axum::response::{IntoResponse, Response};
    use base64::Engine;

    const LAYER: &[u8] = b"\0asm\x01\0\0\0";

    struct Served {
        manifest: Vec<u8>,
        port: u16,
        /// Layer (blob) requests answered.
        blobs: std::sync::atomic::AtomicUsize,
    }

    fn challenge(port: u16) -> Response {
        (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                format!(
                    r#"Bearer realm="http://127.0.0.1:{port}/token",service="reg",scope="repository:m:pull""#
                ),
            )],
        )
            .into_response()
    }

    async fn artifact(
        State(s): State<std::sync::Arc<Served>>,
        headers: HeaderMap,
        uri: axum::http::Uri,
    ) -> Response {
        if headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            != Some("Bearer access-ok")
        {
            return challenge(s.port);
        }
        if uri.path().contains("/manifests/") {
            s.manifest.clone().into_response()
        } else {
            s.blobs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            LAYER.to_vec().into_response()
        }
    }

    async fn token_get(headers: HeaderMap) -> Response {
        let basic = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("robot:pw")
        );
        if headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            == Some(&basic)
        {
            r#"{"token": "access-ok"}"#.into_response()
        } else {
            StatusCode::UNAUTHORIZED.into_response()
        }
    }

    async fn token_post(body: String) -> Response {
        let form: std::collections::HashMap<String, String> =
            url::form_urlencoded::parse(body.as_bytes())
                .into_owned()
                .collect();
        let ok = form.get("grant_type").map(String::as_str) == Some("refresh_token")
            && form.get("refresh_token").map(String::as_str) == Some("refresh-ok")
            && form.get("service").map(String::as_str) == Some("reg");
        if ok {
            r#"{"access_token": "access-ok"}"#.into_response()
        } else {
            StatusCode::UNAUTHORIZED.into_response()
        }
    }

    /// Serves one artifact behind a token service on 127.0.0.1; the pinned reference.
    async fn serve() -> String {
        serve_counted().await.0
    }

    /// [`serve`], with the count of layer requests.
    async fn serve_counted() -> (String, std::sync::Arc<Served>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let layer = format!("sha256:{}", hex::encode(Sha256::digest(LAYER)));
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": WASM_CONFIG_MEDIA_TYPE, "digest": layer, "size": 8},
            "layers": [{"mediaType": WASM_LAYER_MEDIA_TYPE, "digest": layer, "size": LAYER.len()}],
        }))
        .unwrap();
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&manifest)));
        let served = std::sync::Arc::new(Served {
            manifest,
            port,
            blobs: std::sync::atomic::AtomicUsize::new(0),
        });
        let app = axum::Router::new()
            .route("/token", axum::routing::get(token_get).post(token_post))
            .fallback(artifact)
            .with_state(served.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (format!("127.0.0.1:{port}/m:v1@{digest}"), served)
    }

    #[tokio::test]
    async fn a_known_layer_is_not_downloaded_and_an_unknown_one_streams_to_a_file() {
        let (reference, served) = serve_counted().await;
        let policy = FetchPolicy::default();
        let basic = creds("robot", "pw", false);
        let layer = format!("sha256:{}", hex::encode(Sha256::digest(LAYER)));
        let asked = parking_lot::Mutex::new(Vec::new());
        let known = |digest: &str| {
            asked.lock().push(digest.to_string());
            true
        };
        let got = pull_layer_to(
            &reference,
            WASM_LAYER_MEDIA_TYPE,
            &policy,
            Some(&basic),
            None,
            None,
            Some(&known),
        )
        .await
        .unwrap();
        assert!(
            matches!(&got, Body::Known { digest, size } if *digest == layer && *size == LAYER.len()),
            "{got:?}"
        );
        assert_eq!(*asked.lock(), vec![layer.clone()]);
        assert_eq!(served.blobs.load(std::sync::atomic::Ordering::Relaxed), 0);
        let dir = std::env::temp_dir().join(format!("enoki-pull-to-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let unknown = |_: &str| false;
        let got = pull_layer_to(
            &reference,
            WASM_LAYER_MEDIA_TYPE,
            &policy,
            Some(&basic),
            None,
            Some(&dir),
            Some(&unknown),
        )
        .await
        .unwrap();
        let Body::File(download) = &got else {
            panic!("{got:?}")
        };
        assert_eq!(std::fs::read(download.path()).unwrap(), LAYER);
        assert_eq!(served.blobs.load(std::sync::atomic::Ordering::Relaxed), 1);
        drop(got);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn creds(username: &str, password: &str, identity_token: bool) -> Credentials {
        Credentials {
            username: username.into(),
            password: password.into(),
            identity_token,
            source: "Secret ns/regcred".into(),
        }
    }

    #[tokio::test]
    async fn an_identity_token_is_not_replayed_where_a_token_service_redirects() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let stolen = std::sync::Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
        let kept = stolen.clone();
        let app = axum::Router::new()
            .route(
                "/token",
                axum::routing::post(move || async move {
                    let to = format!("http://127.0.0.1:{port}/elsewhere");
                    (StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, to)]).into_response()
                }),
            )
            .route(
                "/elsewhere",
                axum::routing::post(move |body: String| async move {
                    kept.lock().push(body);
                    r#"{"access_token": "access-ok"}"#.into_response()
                }),
            )
            .fallback(move || async move { challenge(port) });
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let reference = format!("127.0.0.1:{port}/m:v1@sha256:{}", "0".repeat(64));
        let token = creds("", "refresh-ok", true);
        let pulled = pull(&reference, &FetchPolicy::default(), Some(&token), None).await;
        assert!(pulled.is_err());
        assert!(stolen.lock().is_empty(), "the identity token was replayed");
    }

    #[tokio::test]
    async fn a_token_service_takes_basic_credentials_and_identity_tokens() {
        let reference = serve().await;
        let policy = FetchPolicy::default();
        let basic = creds("robot", "pw", false);
        let got = pull(&reference, &policy, Some(&basic), None).await.unwrap();
        assert_eq!(got, LAYER);
        let token = creds("", "refresh-ok", true);
        let got = pull(&reference, &policy, Some(&token), None).await.unwrap();
        assert_eq!(got, LAYER);

        let e = pull(&reference, &policy, None, None)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unauthorized") && e.contains("no credentials were sent"),
            "{e}"
        );
        let wrong = creds("robot", "not-pw", false);
        let e = pull(&reference, &policy, Some(&wrong), None)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unauthorized")
                && e.contains("credentials from Secret ns/regcred were refused")
                && !e.contains("not-pw"),
            "{e}"
        );
    }

    #[test]
    fn credentials_go_only_to_a_token_service_on_the_registrys_host_or_domain() {
        assert!(credentials_may_go_to(
            "https://reg.example:5000/token",
            "reg.example:5000"
        ));
        assert!(credentials_may_go_to(
            "http://127.0.0.1:9/token",
            "127.0.0.1:5000"
        ));
        assert!(credentials_may_go_to(
            "https://auth.docker.io/token",
            "registry-1.docker.io"
        ));
        assert!(!credentials_may_go_to(
            "https://evil.example/token",
            "reg.example:5000"
        ));
        assert!(!credentials_may_go_to(
            "http://auth.docker.io/token",
            "registry-1.docker.io"
        ));
        assert!(!credentials_may_go_to(
            "https://10.0.0.2/token",
            "10.0.0.1:5000"
        ));
        // A shared domain proves nothing; a configured pair does.
        assert!(!credentials_may_go_to(
            "https://evil.azurecr.io/oauth2/token",
            "team.azurecr.io"
        ));
        assert!(!credentials_may_go_to(
            "https://evil.tencentcloudcr.com/token",
            "team.tencentcloudcr.com"
        ));
        assert!(!credentials_may_go_to(
            "https://auth.example.co.uk/token",
            "reg.example.co.uk"
        ));
        let pairs = [(
            "reg.example.co.uk".to_string(),
            "auth.example.co.uk".to_string(),
        )];
        assert!(may_go_to_with(
            "https://auth.example.co.uk/token",
            "reg.example.co.uk:443",
            &pairs
        ));
        assert!(!may_go_to_with(
            "http://auth.example.co.uk/token",
            "reg.example.co.uk",
            &pairs
        ));
        assert!(credentials_may_go_to(
            "https://gitlab.com/jwt/auth",
            "registry.gitlab.com"
        ));
        assert!(!credentials_may_go_to("not a url", "reg.example"));
    }
}

#[cfg(test)]
mod download_tests {
    //! Bodies streamed to a file: the file holds the body and its digest, and no file is
    //! left once the download is dropped or refused.
    use super::*;

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("enoki-download-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn files(d: &Path) -> Vec<std::path::PathBuf> {
        std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect()
    }

    fn body(
        chunks: &[&'static [u8]],
    ) -> impl futures::Stream<Item = Result<bytes::Bytes, SourceError>> + Unpin {
        futures::stream::iter(
            chunks
                .iter()
                .map(|c| Ok(bytes::Bytes::from_static(c)))
                .collect::<Vec<_>>(),
        )
    }

    fn policy(max_bytes: usize) -> FetchPolicy {
        FetchPolicy {
            max_bytes,
            ..FetchPolicy::default()
        }
    }

    #[tokio::test]
    async fn a_body_streams_to_a_file_removed_when_dropped() {
        let d = dir("ok");
        let (got, sha) = read_capped_to(body(&[b"hello ", b"world"]), "m", &policy(64), Some(&d))
            .await
            .unwrap();
        assert_eq!(sha, hex::encode(Sha256::digest(b"hello world")));
        let Body::File(download) = &got else {
            panic!("{got:?}")
        };
        assert_eq!(download.len(), 11);
        assert_eq!(std::fs::read(download.path()).unwrap(), b"hello world");
        assert_eq!(files(&d).len(), 1);
        drop(got);
        assert!(files(&d).is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[tokio::test]
    async fn a_body_over_the_cap_leaves_no_file() {
        let d = dir("cap");
        let err = read_capped_to(
            body(&[b"0123456789", b"0123456789"]),
            "m",
            &policy(15),
            Some(&d),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, SourceError::TooLarge { .. }), "{err}");
        assert!(files(&d).is_empty());
        // A stream that fails midway, too.
        let failing = futures::stream::iter(vec![
            Ok(bytes::Bytes::from_static(b"partial")),
            Err(SourceError::Remote {
                action: "reading".into(),
                message: "reset".into(),
            }),
        ]);
        assert!(
            read_capped_to(failing, "m", &policy(64), Some(&d))
                .await
                .is_err()
        );
        assert!(files(&d).is_empty());
        // A directory that is gone: an error naming the file, of this process's own.
        let gone = d.join("gone");
        let err = read_capped_to(body(&[b"x"]), "m", &policy(64), Some(&gone))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, SourceError::Local { action, .. } if action.contains("gone")),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
