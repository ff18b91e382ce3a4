//! What every module source shares: the media types, [`SourceError`], the [`FetchPolicy`]
//! every download obeys, bodies held in memory or spooled to a file, the bounds and timeouts,
//! and the OCI client of a reference.

use std::net::IpAddr;
use std::path::Path;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::{Client, Reference};

use super::credentials;

/// Layer media type of a WebAssembly module in an OCI artifact.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// Layer media type of a Helm chart pushed with `helm push`.
pub const HELM_CHART_LAYER_MEDIA_TYPE: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
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
    /// This process could not write or read its own copy of a download.
    #[error("{action}: {message}")]
    Local {
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

/// A fetched body: in memory, or in a file of the directory the caller gave (removed when
/// dropped), so that a large module never sits in this process's memory.
#[derive(Debug)]
pub enum Body {
    /// Held in memory.
    Memory(Vec<u8>),
    /// Written to a file.
    File(Download),
    /// Not fetched: the caller said it knows the content of this digest (and size, from the
    /// OCI layer's descriptor).
    Known {
        /// `sha256:<hex>`.
        digest: String,
        /// The descriptor's size.
        size: usize,
    },
}

impl Body {
    /// Its size in bytes.
    pub fn len(&self) -> usize {
        match self {
            Body::Memory(bytes) => bytes.len(),
            Body::File(download) => download.len,
            Body::Known { size, .. } => *size,
        }
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its bytes in memory (a file is read, then removed).
    ///
    /// # Errors
    /// A file that cannot be read.
    pub fn into_memory(self) -> Result<Vec<u8>, SourceError> {
        match self {
            Body::Memory(bytes) => Ok(bytes),
            Body::File(download) => std::fs::read(&download.path).map_err(|e| SourceError::Local {
                action: format!("reading the download {}", download.path.display()),
                message: e.to_string(),
            }),
            Body::Known { digest, .. } => Err(SourceError::Local {
                action: format!("reading {digest}"),
                message: "it was not fetched".into(),
            }),
        }
    }
}

/// A body written to a new file (mode 0600), removed when dropped.
#[derive(Debug)]
pub struct Download {
    path: std::path::PathBuf,
    len: usize,
}

impl Download {
    /// A new file in `dir` to write a body into (created at once: the directory is local
    /// and private), removed when the `Download` is dropped.
    ///
    /// # Errors
    /// [`SourceError::Local`] naming the file.
    pub fn create(dir: &Path) -> Result<(std::fs::File, Download), SourceError> {
        use std::os::unix::fs::OpenOptionsExt as _;
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let path = dir.join(format!(
            "download-{}-{}.part",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        // The guard only once the file is ours (never removes a file it did not create).
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| unwritable(&path, &e))?;
        Ok((file, Download { path, len: 0 }))
    }

    /// `n` more bytes were written.
    pub fn wrote(&mut self, n: usize) {
        self.len += n;
    }

    /// The error of a failed write.
    pub fn unwritable(&self, e: &std::io::Error) -> SourceError {
        unwritable(&self.path, e)
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

pub(super) fn unwritable(path: &Path, e: &std::io::Error) -> SourceError {
    SourceError::Local {
        action: format!("writing the download to {}", path.display()),
        message: e.to_string(),
    }
}

impl Drop for Download {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
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
    /// Longest a whole download may take.
    pub timeout: std::time::Duration,
}

impl Default for FetchPolicy {
    fn default() -> Self {
        FetchPolicy {
            max_bytes: DEFAULT_MAX_MODULE_BYTES,
            allow_private_redirects: false,
            timeout: PULL_TIMEOUT,
        }
    }
}

impl FetchPolicy {
    pub(super) fn too_large(&self, what: &str, size: u64) -> SourceError {
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

pub(super) fn install_crypto() {
    // reqwest is built without a default provider; use ring, like kube.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub(super) fn client(insecure_registries: &[String]) -> Client {
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
/// The user's credentials for the registry of an OCI reference ([`credentials::from_user_config`]); `None`
/// for an unparsable reference (the pull reports that), a reference not pinned by digest (the
/// pull refuses it before any request) or when there are none.
pub fn for_reference(reference: &str) -> Option<credentials::Credentials> {
    let r = parse_reference(reference).ok()?;
    r.digest()?;
    credentials::from_user_config(r.resolve_registry())
}

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

/// Default of the longest a whole pull may take (connect, token, manifest, layer), however
/// the registry behaves: a registry that accepts connections and never answers frees the
/// reconcile (`--module-fetch-timeout`).
pub const PULL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);
/// Longest a connection may take to open.
pub(super) const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Longest a read may wait for the next bytes.
pub(super) const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// Largest manifest accepted.
pub(super) const MAX_MANIFEST_BYTES: usize = 4 << 20;
/// Largest token response accepted.
pub(super) const MAX_TOKEN_BYTES: usize = 64 << 10;
/// Bytes of a registry's error body kept for the message (the rest is dropped).
pub const MAX_REMOTE_TEXT: usize = 512;

/// A remote server's text, made safe for a status message: control characters blanked, at
/// most [`MAX_REMOTE_TEXT`] bytes.
pub fn remote_text(text: &str) -> String {
    let mut out: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if out.len() > MAX_REMOTE_TEXT {
        let mut cut = MAX_REMOTE_TEXT;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push('…');
    }
    out.trim().to_string()
}
