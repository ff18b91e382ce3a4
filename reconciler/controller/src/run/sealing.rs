//! Secrets are never at rest in ResourceSlices in plain text. A synthesized Secret (`v1`,
//! `Secret`) is stored as two parts of one slice entry: `manifest` holds it without `data` and
//! `stringData` (what `enoki status`, `enoki diff`'s prunes and tombstones read), and `sealed`
//! holds the whole manifest encrypted with AES-256-GCM (ring) under a key of the slice-key
//! Secret (`--slice-key-secret`, created by enoki with a random key when missing), bound to the
//! Composition's UID and the Secret's name as associated data (a sealed entry moved to another
//! Composition or name does not open).
//!
//! The key Secret's `current` names the key that seals (`data.current: k1`, `data.k1`: 32
//! bytes); every other `k*` key still opens what it sealed, so a key is rotated by adding one,
//! pointing `current` at it and, once every Composition has synthesized again, deleting the old
//! one (docs/operations.md). The keys are read at start and every minute after.
//!
//! Entries written before sealing existed (plain Secrets) are still read; a Composition whose
//! current slices hold one writes new slices at its next synthesis.

use parking_lot::RwLock;
use std::collections::HashMap;

use base64::Engine as _;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::Value;

/// The prefix of a sealed entry.
const PREFIX: &str = "enoki-aead-v1";
/// The key that seals, in the key Secret.
pub(crate) const CURRENT: &str = "current";

/// Why a manifest cannot be sealed or opened.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// No key is loaded (the key Secret could not be read or created).
    #[error("no slice key is loaded (see --slice-key-secret): a Secret cannot be stored")]
    NoKey,
    /// The entry names a key the key Secret does not have.
    #[error("the slice key {0:?} is not in the slice-key Secret")]
    UnknownKey(String),
    /// The entry is not in the sealed format or does not authenticate.
    #[error(
        "a sealed slice entry does not open (altered, sealed for another object, or with another key of that id)"
    )]
    Corrupt,
}

/// Why the slice keys cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The key Secret can neither be read nor created.
    #[error("reading or creating the slice-key Secret")]
    Kube(#[source] kube::Error),
    /// The system's random source failed.
    #[error("no random key could be drawn")]
    Random,
}

/// Whether a manifest is a core Secret, or a Patch of one (Eno's `kind: Patch`, whose ops
/// may carry values).
pub(crate) fn is_secret(v: &Value) -> bool {
    let is = |v: &Value, api: &str, kind: &str| {
        v.get("apiVersion").and_then(Value::as_str) == Some(api)
            && v.get("kind").and_then(Value::as_str) == Some(kind)
    };
    is(v, "v1", "Secret")
        || (v.get("kind").and_then(Value::as_str) == Some("Patch")
            && v.get("patch").is_some_and(|p| is(p, "v1", "Secret")))
}

/// A Secret without its values (`data`, `stringData`), a Patch of one without its ops.
pub(crate) fn redacted(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("data");
        o.remove("stringData");
        if let Some(p) = o.get_mut("patch").and_then(Value::as_object_mut) {
            p.remove("ops");
        }
    }
    v
}

/// What the associated data binds a sealed entry to.
fn aad(uid: &str, v: &Value) -> String {
    let name = v
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let ns = v
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    format!("{uid}/{ns}/{name}")
}

/// The loaded keys: the one that seals, and every one that opens.
#[derive(Default)]
struct Keys {
    current: Option<String>,
    all: HashMap<String, Vec<u8>>,
}

/// The slice keys of the process.
#[derive(Default)]
pub struct SliceKeys {
    keys: RwLock<Keys>,
    /// When the key Secret was last read (or its read tried).
    tried: parking_lot::Mutex<Option<std::time::Instant>>,
}

impl SliceKeys {
    /// Replaces the keys with those of a key Secret's `data` (`current` names the sealing
    /// key; each 32-byte value is a key). Returns how many keys were loaded.
    pub(crate) fn load(&self, data: &std::collections::BTreeMap<String, Vec<u8>>) -> usize {
        let current = data
            .get(CURRENT)
            .map(|c| String::from_utf8_lossy(c).trim().to_string());
        let all: HashMap<String, Vec<u8>> = data
            .iter()
            .filter(|(k, v)| k.as_str() != CURRENT && v.len() == 32)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let n = all.len();
        let current = current.filter(|c| all.contains_key(c));
        *self.keys.write() = Keys { current, all };
        n
    }

    /// Whether the key Secret was last read (or its read tried) longer than `age` ago.
    pub(crate) fn older_than(&self, age: std::time::Duration) -> bool {
        self.tried.lock().is_none_or(|t| t.elapsed() > age)
    }

    fn try_now(&self) {
        *self.tried.lock() = Some(std::time::Instant::now());
    }

    /// Whether a sealing key is loaded.
    pub(crate) fn has_keys(&self) -> bool {
        self.keys.read().current.is_some()
    }

    /// Waits until a sealing key is loaded.
    pub(crate) async fn loaded(&self) {
        while !self.has_keys() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    fn key(&self, id: &str) -> Option<LessSafeKey> {
        let k = self.keys.read();
        let bytes = k.all.get(id)?;
        Some(LessSafeKey::new(UnboundKey::new(&AES_256_GCM, bytes).ok()?))
    }

    /// Whether a loaded key has the id a sealed entry names (`enoki-aead-v1:<id>:…`).
    pub(crate) fn knows(&self, sealed: &str) -> bool {
        let mut parts = sealed.splitn(3, ':');
        match (parts.next(), parts.next()) {
            (Some(PREFIX), Some(id)) => self.keys.read().all.contains_key(id),
            _ => false,
        }
    }

    /// Whether a sealed entry is sealed under the current key (`false` without one).
    pub(crate) fn is_current(&self, sealed: &str) -> bool {
        let mut parts = sealed.splitn(3, ':');
        match (parts.next(), parts.next()) {
            (Some(PREFIX), Some(id)) => self.keys.read().current.as_deref() == Some(id),
            _ => false,
        }
    }

    /// Seals `plain` (a Secret's manifest, for Composition `uid`).
    ///
    /// # Errors
    /// [`SealError::NoKey`] when no sealing key is loaded.
    pub(crate) fn seal(&self, uid: &str, v: &Value) -> Result<String, SealError> {
        let id = self.keys.read().current.clone().ok_or(SealError::NoKey)?;
        let key = self.key(&id).ok_or(SealError::NoKey)?;
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| SealError::NoKey)?;
        let mut buf = v.to_string().into_bytes();
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad(uid, v).as_bytes()),
            &mut buf,
        )
        .map_err(|_| SealError::Corrupt)?;
        let mut out = nonce.to_vec();
        out.extend(buf);
        let b64 = base64::engine::general_purpose::STANDARD.encode(out);
        Ok(format!("{PREFIX}:{id}:{b64}"))
    }

    /// Opens a sealed entry whose redacted manifest is `shown` (for Composition `uid`).
    ///
    /// # Errors
    /// [`SealError::UnknownKey`] for a key not loaded, [`SealError::Corrupt`] otherwise.
    pub(crate) fn open(&self, uid: &str, shown: &Value, sealed: &str) -> Result<Value, SealError> {
        let mut parts = sealed.splitn(3, ':');
        let (Some(PREFIX), Some(id), Some(b64)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(SealError::Corrupt);
        };
        let key = self
            .key(id)
            .ok_or_else(|| SealError::UnknownKey(id.to_string()))?;
        let raw = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|_| SealError::Corrupt)?;
        if raw.len() < NONCE_LEN {
            return Err(SealError::Corrupt);
        }
        let (nonce, body) = raw.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Corrupt)?;
        let mut body = body.to_vec();
        let plain = key
            .open_in_place(nonce, Aad::from(aad(uid, shown).as_bytes()), &mut body)
            .map_err(|_| SealError::Corrupt)?;
        let v: Value = serde_json::from_slice(plain).map_err(|_| SealError::Corrupt)?;
        // The sealed manifest must be the one shown (a swapped entry does not pass for it).
        if redacted(&v) != *shown {
            return Err(SealError::Corrupt);
        }
        Ok(v)
    }

    /// The slice entry of one synthesized item: a Secret is sealed, anything else kept whole.
    ///
    /// # Errors
    /// [`SealError::NoKey`] for a Secret when no sealing key is loaded.
    pub(crate) fn entry(&self, uid: &str, item: &Value) -> Result<crds::Manifest, SealError> {
        if !is_secret(item) {
            return Ok(crds::Manifest {
                manifest: item.to_string(),
                ..crds::Manifest::default()
            });
        }
        let shown = redacted(item);
        Ok(crds::Manifest {
            sealed: Some(self.seal(uid, item)?),
            manifest: shown.to_string(),
            deleted: false,
        })
    }

    /// The whole manifest of a slice entry: opened when sealed, as stored otherwise. `None`
    /// when it does not parse or does not open (logged).
    pub(crate) fn manifest(&self, uid: &str, m: &crds::Manifest) -> Option<Value> {
        let shown: Value = serde_json::from_str(&m.manifest).ok()?;
        let Some(sealed) = &m.sealed else {
            return Some(shown);
        };
        match self.open(uid, &shown, sealed) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::debug!(error = %e, "a sealed Secret in a ResourceSlice does not open");
                None
            }
        }
    }
}

/// Whether a slice entry (a tombstone too) holds a Secret's values in plain text (written
/// before sealing).
pub(crate) fn plain_secret(m: &crds::Manifest) -> bool {
    m.sealed.is_none()
        && serde_json::from_str::<Value>(&m.manifest)
            .is_ok_and(|v| is_secret(&v) && redacted(&v) != v)
}

/// A new random key (32 bytes).
pub(crate) fn new_key() -> Option<Vec<u8>> {
    let mut k = vec![0u8; 32];
    SystemRandom::new().fill(&mut k).ok()?;
    Some(k)
}

/// Reads the key Secret `(namespace, name)` into `keys`, creating it with one random key when
/// it does not exist. Returns how many keys were loaded.
///
/// # Errors
/// The Secret can neither be read nor created (e.g. RBAC): Secrets cannot be stored then.
pub(crate) async fn load(
    client: &kube::Client,
    (namespace, name): &(String, String),
    keys: &SliceKeys,
) -> Result<usize, KeyError> {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    keys.try_now();
    let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), namespace);
    let secret = match api.get_opt(name).await.map_err(KeyError::Kube)? {
        Some(s) => s,
        None => {
            let key = new_key().ok_or(KeyError::Random)?;
            let fresh = Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.clone()),
                    labels: Some(
                        [("app.kubernetes.io/name".to_string(), "enoki".to_string())].into(),
                    ),
                    ..Default::default()
                },
                type_: Some("enoki.dev/slice-key".into()),
                data: Some(
                    [
                        (CURRENT.to_string(), ByteString(b"k1".to_vec())),
                        ("k1".to_string(), ByteString(key)),
                    ]
                    .into(),
                ),
                ..Default::default()
            };
            match api.create(&kube::api::PostParams::default(), &fresh).await {
                Ok(s) => {
                    tracing::info!(secret = %format!("{namespace}/{name}"), "created the slice key");
                    s
                }
                // Another replica created it first.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    api.get(name).await.map_err(KeyError::Kube)?
                }
                Err(e) => return Err(KeyError::Kube(e)),
            }
        }
    };
    let data = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    Ok(keys.load(&data))
}

/// Loads the keys now, then again every minute (a rotated key is picked up without a
/// restart), every 5 seconds while none can seal.
pub(crate) async fn keep(
    client: kube::Client,
    secret: (String, String),
    keys: std::sync::Arc<SliceKeys>,
) {
    let mut failing = false;
    loop {
        match load(&client, &secret, &keys).await {
            Ok(_) if keys.has_keys() => failing = false,
            Ok(n) => {
                if !failing {
                    tracing::error!(secret = %format!("{}/{}", secret.0, secret.1), keys = n,
                        "the slice-key Secret's `current` names no 32-byte key: syntheses that emit a Secret fail until it does");
                }
                failing = true;
            }
            Err(e) if !failing => {
                failing = true;
                let e = match std::error::Error::source(&e) {
                    Some(source) => format!("{e}: {source}"),
                    None => e.to_string(),
                };
                tracing::error!(secret = %format!("{}/{}", secret.0, secret.1), error = %e,
                    "cannot read or create the slice key: syntheses that emit a Secret fail until it can be");
            }
            Err(_) => {}
        }
        // Every minute; every 5 s while no key seals.
        let pause = if failing { 5 } else { 60 };
        tokio::time::sleep(std::time::Duration::from_secs(pause)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn keys(ids: &[(&str, u8)], current: &str) -> SliceKeys {
        let mut data: std::collections::BTreeMap<String, Vec<u8>> = ids
            .iter()
            .map(|(id, b)| ((*id).to_string(), vec![*b; 32]))
            .collect();
        data.insert(CURRENT.into(), current.as_bytes().to_vec());
        let k = SliceKeys::default();
        k.load(&data);
        k
    }

    fn secret() -> Value {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "a"},
            "stringData": {"password": "hunter2"}})
    }

    #[test]
    fn a_secret_is_stored_sealed_and_opens_only_for_its_composition() {
        let k = keys(&[("k1", 1)], "k1");
        let m = k.entry("uid-1", &secret()).unwrap();
        assert!(!m.manifest.contains("hunter2") && !m.manifest.contains("stringData"));
        let sealed = m.sealed.clone().unwrap();
        assert!(sealed.starts_with("enoki-aead-v1:k1:") && !sealed.contains("hunter2"));
        assert_eq!(k.manifest("uid-1", &m), Some(secret()));
        assert_eq!(k.manifest("uid-2", &m), None, "bound to the Composition");
        let mut moved = m.clone();
        moved.manifest = m.manifest.replace("\"db\"", "\"other\"");
        assert_eq!(k.manifest("uid-1", &moved), None, "bound to the name");
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert_eq!(k.entry("uid-1", &cm).unwrap().sealed, None);
    }

    #[test]
    fn a_rotated_key_still_opens_what_it_sealed_and_the_new_one_seals() {
        let old = keys(&[("k1", 1)], "k1");
        let m = old.entry("u", &secret()).unwrap();
        let rotated = keys(&[("k1", 1), ("k2", 2)], "k2");
        assert_eq!(rotated.manifest("u", &m), Some(secret()));
        assert!(
            rotated
                .entry("u", &secret())
                .unwrap()
                .sealed
                .unwrap()
                .contains(":k2:")
        );
        let dropped = keys(&[("k2", 2)], "k2");
        assert!(matches!(
            dropped.open("u", &redacted(&secret()), m.sealed.as_deref().unwrap()),
            Err(SealError::UnknownKey(_))
        ));
        assert!(matches!(
            SliceKeys::default().entry("u", &secret()),
            Err(SealError::NoKey)
        ));
    }

    #[test]
    fn plain_secrets_of_older_slices_are_read_and_recognised() {
        let m = crds::Manifest {
            manifest: secret().to_string(),
            ..crds::Manifest::default()
        };
        assert!(plain_secret(&m));
        assert_eq!(SliceKeys::default().manifest("u", &m), Some(secret()));
    }
}
