//! Module sources that live outside the cluster: OCI artifacts (pulled by digest; pushed by
//! `enoki module push`) and `https://` URLs verified against a SHA-256. Also `enoki module
//! inspect`.
//!
//! Every download obeys a [`FetchPolicy`]: bodies are capped while they stream (a declared
//! size over the cap is refused before reading), OCI layers are checked against their
//! descriptor's digest and size, redirects go only to `https://` and never to loopback,
//! link-local or private addresses, and an OCI registry's token `realm` follows the same rule
//! (both unless `allow_private_redirects`).

use std::net::IpAddr;
use std::path::Path;

use futures::TryStreamExt;

use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::{Digest, Sha256};

/// Layer media type of a WebAssembly module in an OCI artifact.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// Config media type of the artifact.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";

/// Why a remote module could not be fetched or published.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The reference or URL is not acceptable.
    #[error("{0}")]
    Invalid(String),
    /// The registry or server failed.
    #[error("{action}: {message}")]
    Remote {
        /// What was being done.
        action: String,
        /// What went wrong.
        message: String,
    },
    /// The body is larger than the policy allows.
    #[error(
        "{what} is {size} bytes or more, over the module size limit of {limit} bytes (--max-module-size)"
    )]
    TooLarge {
        /// What was being read.
        what: String,
        /// Bytes seen (or declared) so far.
        size: u64,
        /// The cap.
        limit: usize,
    },
    /// The bytes do not match the pinned digest.
    #[error("digest mismatch: expected {expected}, got {actual}")]
    DigestMismatch {
        /// The pinned digest.
        expected: String,
        /// The digest of what was fetched.
        actual: String,
    },
}

/// Default cap of a module's size (bytes, after decompression).
pub const DEFAULT_MAX_MODULE_BYTES: usize = 128 << 20;

/// What a download may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchPolicy {
    /// Largest module accepted, in bytes (after gzip decompression for ConfigMaps).
    pub max_bytes: usize,
    /// Follow redirects (and OCI token realms) to loopback, link-local and private addresses.
    pub allow_private_redirects: bool,
}

impl Default for FetchPolicy {
    fn default() -> Self {
        FetchPolicy {
            max_bytes: DEFAULT_MAX_MODULE_BYTES,
            allow_private_redirects: false,
        }
    }
}

impl FetchPolicy {
    fn too_large(&self, what: &str, size: u64) -> SourceError {
        SourceError::TooLarge {
            what: what.to_string(),
            size,
            limit: self.max_bytes,
        }
    }

    /// Why a redirect (or token realm) target is refused, if it is.
    ///
    /// # Errors
    /// A message naming the URL and the rule.
    pub fn check_redirect(&self, url: &reqwest::Url) -> Result<(), String> {
        if url.scheme() != "https" {
            return Err(format!(
                "redirect to {url} refused: only https:// is followed"
            ));
        }
        if self.allow_private_redirects {
            return Ok(());
        }
        let host = url.host_str().unwrap_or_default();
        let port = url.port_or_known_default().unwrap_or(443);
        let private = match url.host() {
            Some(url::Host::Ipv4(ip)) => is_private(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => is_private(IpAddr::V6(ip)),
            Some(url::Host::Domain(d)) => {
                let d = d.trim_end_matches('.').to_ascii_lowercase();
                d == "localhost"
                    || d.ends_with(".localhost")
                    || std::net::ToSocketAddrs::to_socket_addrs(&(d.as_str(), port))
                        .map(|mut addrs| addrs.any(|a| is_private(a.ip())))
                        .unwrap_or(false)
            }
            None => true,
        };
        if private {
            return Err(format!(
                "redirect to {url} refused: {host} is a loopback, link-local or private \
                 address (allow with --module-allow-private-redirects)"
            ));
        }
        Ok(())
    }
}

/// Loopback, link-local, private (RFC 1918 / unique local), unspecified, CGNAT and
/// IPv4-mapped forms of them.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_private(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
        }
    }
}

fn install_crypto() {
    // reqwest is built without a default provider; use ring, like kube.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn client(insecure_registries: &[String]) -> Client {
    install_crypto();
    let protocol = if insecure_registries.is_empty() {
        ClientProtocol::Https
    } else {
        ClientProtocol::HttpsExcept(insecure_registries.to_vec())
    };
    Client::new(ClientConfig {
        protocol,
        ..ClientConfig::default()
    })
}

/// Parses an OCI reference of a module source.
///
/// # Errors
/// [`SourceError::Invalid`] naming the reference.
pub fn parse_reference(reference: &str) -> Result<Reference, SourceError> {
    reference
        .parse::<Reference>()
        .map_err(|e| SourceError::Invalid(format!("{reference:?} is not an OCI reference: {e}")))
}

/// Registries reached over plain HTTP: loopback addresses (a local test registry), plus
/// any listed in `ENOKI_INSECURE_REGISTRIES` (comma-separated `host:port`).
pub fn insecure_registries(reference: &Reference) -> Vec<String> {
    let mut out: Vec<String> = std::env::var("ENOKI_INSECURE_REGISTRIES")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let registry = reference.registry();
    if registry.starts_with("127.0.0.1:") || registry.starts_with("localhost:") {
        out.push(registry.to_string());
    }
    out
}

/// Pulls a module pinned by digest (`registry/repo:tag@sha256:…`) and verifies the manifest
/// digest, the layer's size and the layer's digest. Tag-only references are refused: a tag can
/// move, a digest cannot.
///
/// # Errors
/// Tag-only references, registry failures, a digest mismatch, an artifact without a wasm
/// layer, a layer over the size cap, a token realm the policy refuses.
pub async fn pull(reference: &str, policy: &FetchPolicy) -> Result<Vec<u8>, SourceError> {
    let r = parse_reference(reference)?;
    let Some(pinned) = r.digest().map(String::from) else {
        return Err(SourceError::Invalid(format!(
            "{reference:?} has no digest: pin the module as <registry>/<repo>:<tag>@sha256:<digest> (tag-only references are refused because tags can move)"
        )));
    };
    let insecure = insecure_registries(&r);
    check_token_realm(&r, &insecure, policy).await?;
    let c = client(&insecure);
    let remote = |e: oci_client::errors::OciDistributionError| SourceError::Remote {
        action: format!("pulling {reference}"),
        message: e.to_string(),
    };
    let (manifest, actual) = c
        .pull_image_manifest(&r, &RegistryAuth::Anonymous)
        .await
        .map_err(remote)?;
    if actual != pinned {
        return Err(SourceError::DigestMismatch {
            expected: pinned,
            actual,
        });
    }
    let layer = manifest
        .layers
        .into_iter()
        .find(|l| l.media_type == WASM_LAYER_MEDIA_TYPE)
        .ok_or_else(|| {
            SourceError::Invalid(format!("{reference} has no {WASM_LAYER_MEDIA_TYPE} layer"))
        })?;
    let what = format!("layer {} of {reference}", layer.digest);
    let declared = u64::try_from(layer.size).unwrap_or(u64::MAX);
    if declared > policy.max_bytes as u64 {
        return Err(policy.too_large(&what, declared));
    }
    let blob = c.pull_blob_stream(&r, &layer).await.map_err(remote)?;
    if let Some(len) = blob.content_length
        && len > policy.max_bytes as u64
    {
        return Err(policy.too_large(&what, len));
    }
    let stream = blob.stream.map_err(|e| SourceError::Remote {
        action: format!("pulling {reference}"),
        message: e.to_string(),
    });
    let bytes = read_capped(stream, &what, policy).await?;
    let got = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
    if got != layer.digest {
        return Err(SourceError::DigestMismatch {
            expected: layer.digest,
            actual: got,
        });
    }
    Ok(bytes)
}

/// Reads a body stream, refusing it as soon as it passes the cap.
async fn read_capped(
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

/// Asks the registry how it authenticates (`GET /v2/`) and refuses a bearer-token `realm`
/// the policy would not follow as a redirect (plain http, or a private address of a
/// registry that is not itself local).
async fn check_token_realm(
    r: &Reference,
    insecure: &[String],
    policy: &FetchPolicy,
) -> Result<(), SourceError> {
    let registry = r.resolve_registry();
    let scheme = if insecure.iter().any(|i| i == registry) {
        "http"
    } else {
        "https"
    };
    install_crypto();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .map_err(|e| SourceError::Remote {
            action: "building the HTTPS client".into(),
            message: e.to_string(),
        })?;
    let Ok(resp) = http.get(format!("{scheme}://{registry}/v2/")).send().await else {
        // Unreachable here means unreachable for the pull too, which reports it.
        return Ok(());
    };
    let Some(header) = resp
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
    else {
        return Ok(());
    };
    match token_realm(header) {
        Some(realm) => check_realm(&realm, scheme == "http", policy),
        None => Ok(()),
    }
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

/// Publishes a module as an OCI artifact and returns the manifest digest (`sha256:…`).
///
/// # Errors
/// An unreadable file or a registry failure.
pub async fn push(file: &Path, reference: &str) -> Result<String, SourceError> {
    let bytes = std::fs::read(file)
        .map_err(|e| SourceError::Invalid(format!("{}: {e}", file.display())))?;
    let r = parse_reference(reference)?;
    let c = client(&insecure_registries(&r));
    let layer = ImageLayer::new(bytes, WASM_LAYER_MEDIA_TYPE.to_string(), None);
    let config = Config::new(b"{}".to_vec(), WASM_CONFIG_MEDIA_TYPE.to_string(), None);
    c.push(&r, &[layer], config, &RegistryAuth::Anonymous, None)
        .await
        .map_err(|e| SourceError::Remote {
            action: format!("pushing to {reference}"),
            message: e.to_string(),
        })?;
    let (_, digest) = c
        .pull_manifest(&r, &RegistryAuth::Anonymous)
        .await
        .map_err(|e| SourceError::Remote {
            action: format!("reading back {reference}"),
            message: e.to_string(),
        })?;
    Ok(digest)
}

/// Downloads an `https://` module and checks it against `sha256` (hex).
///
/// # Errors
/// A non-https URL, a missing or malformed digest, a download failure, a refused redirect, a
/// body over the size cap, a mismatch.
pub async fn fetch_url(
    url: &str,
    sha256: Option<&str>,
    extra_ca: Option<&[u8]>,
    policy: &FetchPolicy,
) -> Result<Vec<u8>, SourceError> {
    if !url.starts_with("https://") {
        return Err(SourceError::Invalid(format!(
            "{url:?}: only https:// URLs are accepted"
        )));
    }
    let Some(expected) =
        sha256.map(|s| s.trim().trim_start_matches("sha256:").to_ascii_lowercase())
    else {
        return Err(SourceError::Invalid(
            "a url module needs sha256 (the hex digest of the module)".into(),
        ));
    };
    if expected.len() != 64 || !expected.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(SourceError::Invalid(format!(
            "sha256 {expected:?} is not 64 hex digits"
        )));
    }
    install_crypto();
    let redirects = *policy;
    let mut builder = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .redirect(reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= 5 {
                return attempt.error("more than 5 redirects");
            }
            match redirects.check_redirect(attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(e) => attempt.error(e),
            }
        }));
    if let Some(pem) = extra_ca {
        let cert = reqwest::Certificate::from_pem(pem)
            .map_err(|e| SourceError::Invalid(format!("CA file: {e}")))?;
        builder = builder.add_root_certificate(cert);
    }
    let http = builder.build().map_err(|e| SourceError::Remote {
        action: "building the HTTPS client".into(),
        message: e.to_string(),
    })?;
    let download = |e: reqwest::Error| SourceError::Remote {
        action: format!("downloading {url}"),
        message: error_chain(&e),
    };
    let resp = http
        .get(url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(download)?;
    if let Some(len) = resp.content_length()
        && len > policy.max_bytes as u64
    {
        return Err(policy.too_large(url, len));
    }
    let stream = resp.bytes_stream().map_err(download);
    let bytes = read_capped(stream, url, policy).await?;
    let actual = hex::encode(Sha256::digest(&bytes));
    if actual != expected {
        return Err(SourceError::DigestMismatch {
            expected: format!("sha256:{expected}"),
            actual: format!("sha256:{actual}"),
        });
    }
    Ok(bytes)
}

/// An error and its sources on one line (reqwest hides a redirect refusal in a source).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        out.push_str(": ");
        out.push_str(&s.to_string());
        next = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_addresses_are_recognised() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_private(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["8.8.8.8", "1.1.1.1", "2606:4700::1111"] {
            assert!(!is_private(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn token_realms_follow_the_redirect_rule() {
        let header = r#"Bearer realm="https://169.254.169.254/token",service="registry",scope="x""#;
        assert_eq!(
            token_realm(header).as_deref(),
            Some("https://169.254.169.254/token")
        );
        assert_eq!(token_realm("Basic realm=\"x\""), None);
        let policy = FetchPolicy::default();
        // Violated: a metadata-service realm, and a plain-http realm of an https registry.
        let e = check_realm("https://169.254.169.254/token", false, &policy).unwrap_err();
        assert!(e.to_string().contains("token realm"), "{e}");
        assert!(check_realm("http://8.8.8.8/token", false, &policy).is_err());
        // Obeyed: a public https realm; any realm of a local (plain-http) test registry; a
        // private realm when the operator allows it.
        assert!(check_realm("https://8.8.8.8/token", false, &policy).is_ok());
        assert!(check_realm("http://127.0.0.1:5000/token", true, &policy).is_ok());
        let allow = FetchPolicy {
            allow_private_redirects: true,
            ..policy
        };
        assert!(check_realm("https://10.0.0.1/token", false, &allow).is_ok());
    }
}
