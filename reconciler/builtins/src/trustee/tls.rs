//! TLS for the KBS: the cipher names upstream maps, the TLS lines of `kbs-config.toml` (kept when
//! someone edits the rest), the key pair generated when no Secret is given, and the copies of
//! the TLS Secrets the KBS reads.

use super::*;

/// An IANA TLS cipher-suite name in OpenSSL's spelling, as upstream's `convertSingleCipher`
/// (`internal/controller/tlsconfig.go`): TLS 1.3 names unchanged, upstream's explicit table
/// (ChaCha20, RSA key exchange, 3DES), otherwise the generic rule — drop `TLS_`, `_WITH_` →
/// `-`, a part starting with a digit joins the part before it, other `_` → `-`.
pub fn openssl_cipher(iana: &str) -> String {
    if iana.starts_with("TLS_AES_") || iana.starts_with("TLS_CHACHA20_") {
        return iana.to_string();
    }
    const EXPLICIT: &[(&str, &str)] = &[
        (
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
            "ECDHE-RSA-CHACHA20-POLY1305",
        ),
        (
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
            "ECDHE-ECDSA-CHACHA20-POLY1305",
        ),
        (
            "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
            "DHE-RSA-CHACHA20-POLY1305",
        ),
        ("TLS_RSA_WITH_AES_128_CBC_SHA", "AES128-SHA"),
        ("TLS_RSA_WITH_AES_256_CBC_SHA", "AES256-SHA"),
        ("TLS_RSA_WITH_AES_128_CBC_SHA256", "AES128-SHA256"),
        ("TLS_RSA_WITH_AES_256_CBC_SHA256", "AES256-SHA256"),
        ("TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256"),
        ("TLS_RSA_WITH_AES_256_GCM_SHA384", "AES256-GCM-SHA384"),
        ("TLS_RSA_WITH_3DES_EDE_CBC_SHA", "DES-CBC3-SHA"),
        (
            "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
            "ECDHE-RSA-DES-CBC3-SHA",
        ),
    ];
    if let Some((_, o)) = EXPLICIT.iter().find(|(i, _)| *i == iana) {
        return (*o).to_string();
    }
    let rest = iana
        .strip_prefix("TLS_")
        .unwrap_or(iana)
        .replacen("_WITH_", "-", 1);
    let mut parts: Vec<String> = Vec::new();
    for (i, part) in rest.split('_').enumerate() {
        if i > 0
            && part.starts_with(|c: char| c.is_ascii_digit())
            && let Some(last) = parts.last_mut()
        {
            last.push_str(part);
            continue;
        }
        parts.push(part.to_string());
    }
    parts.join("-")
}

/// The KBS TOML upstream renders for a profile (`generateKbsTomlConfig`): the Restricted
/// template with the TLS data of `GetTLSConfigFromTlsConfig` (profile `intermediate` when
/// unset; for `custom` the versions, the ciphers in OpenSSL spelling joined by `:`, the
/// groups joined by `:`), or the Permissive template.
pub fn kbs_toml_text(restricted: bool, tls: &Value) -> String {
    if !restricted {
        return TOML_PERMISSIVE.to_string();
    }
    let mut data = std::collections::BTreeMap::new();
    let profile = match s(tls, "/profile") {
        "" => "intermediate",
        p => p,
    };
    data.insert("TlsProfile", profile.to_string());
    if profile == "custom" {
        let list = |key: &str, f: &dyn Fn(&str) -> String| -> String {
            tls.get(key)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(f)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
                .join(":")
        };
        data.insert("TlsMinVersion", s(tls, "/minVersion").to_string());
        data.insert("TlsMaxVersion", s(tls, "/maxVersion").to_string());
        data.insert("TlsCiphers", list("ciphers", &openssl_cipher));
        data.insert("TlsGroups", list("groups", &str::to_string));
    }
    // The template is upstream's and known to parse; a failure is a packaging bug.
    crate::gotemplate::render(TOML_RESTRICTED, &data)
        .unwrap_or_else(|e| format!("# kbs-config-restricted.toml: {e}\n"))
}

/// Upstream's `isTlsLine`.
pub(super) fn is_tls_line(trimmed: &str) -> bool {
    [
        "tls_profile =",
        "tls_min_version =",
        "tls_max_version =",
        "tls_ciphers =",
        "tls_groups =",
        "# TLS configuration",
    ]
    .iter()
    .any(|p| trimmed.starts_with(p))
}

/// Upstream's `extractTlsLines`: the lines of `[http_server]` from the `# TLS configuration`
/// comment on (blank ones included), plus any other TLS setting line there.
pub fn extract_tls_lines(config: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let (mut in_http, mut in_block) = (false, false);
    for line in config.lines() {
        let t = line.trim();
        if t == "[http_server]" {
            in_http = true;
            continue;
        } else if t.starts_with('[') {
            break;
        }
        if in_http {
            in_block |= t.starts_with("# TLS configuration");
            if in_block || is_tls_line(t) {
                lines.push(line.to_string());
            }
        }
    }
    lines
}

/// Upstream's `mergeTlsSettings`: the TLS lines of `new` replace those of `existing`'s
/// `[http_server]` (written just before the next section); everything else the user wrote is
/// kept. A `new` without TLS lines (the Permissive profile) leaves `existing` as it is.
pub fn merge_tls(existing: &str, new: &str) -> String {
    let tls = extract_tls_lines(new);
    if tls.is_empty() {
        return existing.to_string();
    }
    let mut out = String::new();
    let push_tls = |out: &mut String| {
        for l in &tls {
            out.push_str(l);
            out.push('\n');
        }
    };
    let (mut in_http, mut written, mut in_block) = (false, false, false);
    for line in existing.lines() {
        let t = line.trim();
        if t == "[http_server]" {
            in_http = true;
            out.push_str(line);
            out.push('\n');
            continue;
        } else if t.starts_with('[') {
            if in_http && !written {
                push_tls(&mut out);
                written = true;
            }
            in_http = false;
            in_block = false;
        }
        if in_http && is_tls_line(t) {
            in_block = true;
            continue;
        }
        if in_http && in_block && t.is_empty() {
            continue;
        }
        if in_http && in_block {
            in_block = false;
        }
        out.push_str(line);
        out.push('\n');
    }
    if in_http && !written {
        push_tls(&mut out);
    }
    out
}

/// A fresh Ed25519 keypair as (public SPKI PEM, private PKCS#8 PEM).
pub(super) fn keypair() -> Result<(String, String), Error> {
    use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
    use ed25519_dalek::pkcs8::{EncodePrivateKey, EncodePublicKey};
    let key = ed25519_dalek::SigningKey::generate(&mut rand_core_06::OsRng);
    let private = key
        .to_pkcs8_pem(LineEnding::LF)
        .map_err(|e| Error::Other(format!("encoding the auth private key: {e}")))?;
    let public = key
        .verifying_key()
        .to_public_key_pem(LineEnding::LF)
        .map_err(|e| Error::Other(format!("encoding the auth public key: {e}")))?;
    Ok((public, private.to_string()))
}

/// Reads a `kubernetes.io/tls` source Secret bound under `key`: (tls.key, tls.crt), base64.
pub(super) fn tls_source(
    input: &Input,
    key: &str,
    field: &str,
    name: &str,
) -> Result<(Value, Value), Error> {
    let invalid = |message: String| Error::InvalidInput {
        key: key.into(),
        message: format!("{field} {name:?}: {message}"),
    };
    let secret = input
        .optional_input(key)
        .ok_or_else(|| invalid("the Secret does not exist".into()))?;
    if s(secret, "/type") != "kubernetes.io/tls" {
        return Err(invalid(format!(
            "type is {:?}, want \"kubernetes.io/tls\"",
            s(secret, "/type")
        )));
    }
    let get = |k: &str| {
        secret
            .get("data")
            .and_then(|d| d.get(k))
            .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
            .cloned()
            .ok_or_else(|| invalid(format!("data.{k} is missing")))
    };
    Ok((get("tls.key")?, get("tls.crt")?))
}

/// Steps 6–7: the HTTPS and attestation Secrets, copied once from the TLS source Secrets.
pub(super) fn tls_copies(
    t: &Tc,
    input: &Input,
    out: &mut Output,
    kbs: &mut Map<String, Value>,
) -> Result<(), Error> {
    // 6–7. HTTPS and attestation secrets, copied once from the TLS sources.
    let copies = [
        (
            "https-tls",
            "/httpsSpec/tlsSecretName",
            "spec.httpsSpec.tlsSecretName",
            "https",
            [
                ("https-key-secret", "privateKey", "kbsHttpsKeySecretName"),
                ("https-cert-secret", "certificate", "kbsHttpsCertSecretName"),
            ],
        ),
        (
            "attestation-tls",
            "/attestationTokenVerificationSpec/tlsSecretName",
            "spec.attestationTokenVerificationSpec.tlsSecretName",
            "attestation",
            [
                (
                    "attestation-key-secret",
                    "token.key",
                    "kbsAttestationKeySecretName",
                ),
                (
                    "attestation-cert-secret",
                    "token.crt",
                    "kbsAttestationCertSecretName",
                ),
            ],
        ),
    ];
    for (
        key,
        pointer,
        field,
        component,
        [
            (key_suffix, key_data, key_ref),
            (cert_suffix, cert_data, cert_ref),
        ],
    ) in copies
    {
        let source = s(&t.spec, pointer);
        if source.is_empty() {
            for suffix in [key_suffix, cert_suffix] {
                keep(t, input, out, "Secret", &format!("{}-{suffix}", t.tc));
            }
            continue;
        }
        let (tls_key, tls_crt) = tls_source(input, key, field, source)?;
        for (suffix, data_key, value, reference) in [
            (key_suffix, key_data, tls_key, key_ref),
            (cert_suffix, cert_data, tls_crt, cert_ref),
        ] {
            let name = format!("{}-{suffix}", t.tc);
            let mut m = t.meta(&name);
            m["labels"] = labels(&t.tc, component);
            out.push(
                Resource::from_value(json!({"apiVersion": "v1", "kind": "Secret", "metadata": m,
                    "type": "Opaque", "data": {data_key: value}}))
                .readiness_group(0)
                .disable_updates(),
            );
            kbs.insert(reference.into(), json!(name));
        }
    }

    Ok(())
}
