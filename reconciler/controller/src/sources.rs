//! Module sources that live outside the cluster: OCI artifacts (pulled by digest; pushed by
//! `enoki module push`) and `https://` URLs verified against a SHA-256. Also `enoki module
//! inspect`.
//!
//! Every download obeys a [`FetchPolicy`]: bodies are capped while they stream (a declared
//! size over the cap is refused before reading), OCI layers are checked against their
//! descriptor's digest and size, redirects go only to `https://` and never to loopback,
//! link-local or private addresses, and an OCI registry's token `realm` follows the same rule
//! (both unless `allow_private_redirects`).

use std::path::Path;

use futures::TryStreamExt;

use oci_client::client::{Config, ImageLayer};
use oci_client::secrets::RegistryAuth;
use sha2::{Digest, Sha256};

mod base;
mod credentials;
mod oci;
pub use base::*;
pub use credentials::*;
pub use oci::*;

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
    fetch_url_to(url, sha256, extra_ca, policy, None)
        .await?
        .into_memory()
}

/// A `url` module's `sha256` as the lower-case hex it is compared with (trimmed, without a
/// `sha256:` prefix).
pub fn sha256_hex(sha256: &str) -> String {
    sha256
        .trim()
        .trim_start_matches("sha256:")
        .to_ascii_lowercase()
}

/// [`fetch_url`] into a new file in `spool` (a private directory) when given: the body
/// streams to disk, hashed on the way, and is never held in memory.
///
/// # Errors
/// As [`fetch_url`]; a file that cannot be written.
pub async fn fetch_url_to(
    url: &str,
    sha256: Option<&str>,
    extra_ca: Option<&[u8]>,
    policy: &FetchPolicy,
    spool: Option<&Path>,
) -> Result<Body, SourceError> {
    if !url.starts_with("https://") {
        return Err(SourceError::Invalid(format!(
            "{url:?}: only https:// URLs are accepted"
        )));
    }
    let Some(expected) = sha256.map(sha256_hex) else {
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
        .timeout(policy.timeout)
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT)
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
    let (body, actual) = read_capped_to(stream, url, policy, spool).await?;
    if actual != expected {
        return Err(SourceError::DigestMismatch {
            expected: format!("sha256:{expected}"),
            actual: format!("sha256:{actual}"),
        });
    }
    Ok(body)
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
