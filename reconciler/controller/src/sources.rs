//! Module sources that live outside the cluster: OCI artifacts (pulled by digest; pushed by
//! `enoki module push`) and `https://` URLs verified against a SHA-256. Also `enoki module
//! inspect`.

use std::path::Path;

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
    /// The bytes do not match the pinned digest.
    #[error("digest mismatch: expected {expected}, got {actual}")]
    DigestMismatch {
        /// The pinned digest.
        expected: String,
        /// The digest of what was fetched.
        actual: String,
    },
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

fn parse(reference: &str) -> Result<Reference, SourceError> {
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
/// digest. Tag-only references are refused: a tag can move, a digest cannot.
///
/// # Errors
/// Tag-only references, registry failures, a digest mismatch, an artifact without a wasm layer.
pub async fn pull(reference: &str) -> Result<Vec<u8>, SourceError> {
    let r = parse(reference)?;
    let Some(pinned) = r.digest().map(String::from) else {
        return Err(SourceError::Invalid(format!(
            "{reference:?} has no digest: pin the module as <registry>/<repo>:<tag>@sha256:<digest> (tag-only references are refused because tags can move)"
        )));
    };
    let c = client(&insecure_registries(&r));
    let image = c
        .pull(&r, &RegistryAuth::Anonymous, vec![WASM_LAYER_MEDIA_TYPE])
        .await
        .map_err(|e| SourceError::Remote {
            action: format!("pulling {reference}"),
            message: e.to_string(),
        })?;
    if let Some(actual) = &image.digest
        && *actual != pinned
    {
        return Err(SourceError::DigestMismatch {
            expected: pinned,
            actual: actual.clone(),
        });
    }
    let layer = image
        .layers
        .into_iter()
        .find(|l| l.media_type == WASM_LAYER_MEDIA_TYPE)
        .ok_or_else(|| {
            SourceError::Invalid(format!("{reference} has no {WASM_LAYER_MEDIA_TYPE} layer"))
        })?;
    Ok(layer.data.to_vec())
}

/// Publishes a module as an OCI artifact and returns the manifest digest (`sha256:…`).
///
/// # Errors
/// An unreadable file or a registry failure.
pub async fn push(file: &Path, reference: &str) -> Result<String, SourceError> {
    let bytes = std::fs::read(file)
        .map_err(|e| SourceError::Invalid(format!("{}: {e}", file.display())))?;
    let r = parse(reference)?;
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
/// A non-https URL, a missing or malformed digest, a download failure, a mismatch.
pub async fn fetch_url(
    url: &str,
    sha256: Option<&str>,
    extra_ca: Option<&[u8]>,
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
    let mut builder = reqwest::Client::builder().timeout(std::time::Duration::from_secs(60));
    if let Some(pem) = extra_ca {
        let cert = reqwest::Certificate::from_pem(pem)
            .map_err(|e| SourceError::Invalid(format!("CA file: {e}")))?;
        builder = builder.add_root_certificate(cert);
    }
    let http = builder.build().map_err(|e| SourceError::Remote {
        action: "building the HTTPS client".into(),
        message: e.to_string(),
    })?;
    let resp = http
        .get(url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| SourceError::Remote {
            action: format!("downloading {url}"),
            message: e.to_string(),
        })?;
    let bytes = resp.bytes().await.map_err(|e| SourceError::Remote {
        action: format!("downloading {url}"),
        message: e.to_string(),
    })?;
    let actual = hex::encode(Sha256::digest(&bytes));
    if actual != expected {
        return Err(SourceError::DigestMismatch {
            expected: format!("sha256:{expected}"),
            actual: format!("sha256:{actual}"),
        });
    }
    Ok(bytes.to_vec())
}
