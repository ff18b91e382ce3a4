//! `trustee`: TrusteeConfig → KbsConfig plus the ConfigMaps and Secrets it references
//! (confidential-containers/trustee-operator).
//!
//! Every object is named after the TrusteeConfig `<tc>` (plus the fixed `attestation-status`
//! Secret), lives in its namespace and carries a controller owner reference to it. ConfigMaps
//! and Secrets go in readiness group 0, the KbsConfig in group 1; the KbsConfig is ready when
//! its `status.isReady` is true, and the TrusteeConfig's status mirrors it (`isReady`,
//! `kbsConfigRef`, `statusDescription`, HEAD semantics — no 10 s polling: enoki re-synthesizes
//! when the KbsConfig changes).
//!
//! - KBS TOML ConfigMap: the profile's template the first time; afterwards the live content
//!   is kept and only the TLS lines of `[http_server]` are re-rendered.
//! - Auth Secret: an Ed25519 keypair (PKCS#8 / SPKI PEM) generated only when the observed
//!   Secret lacks one, otherwise read back — stable across syntheses.
//! - Create-only objects (`disable-updates`): resource policy, RVPS reference values, CPU/GPU
//!   policies (not with IBM SE), HTTPS and attestation secrets (copied once from the
//!   `kubernetes.io/tls` source Secrets; rotating the source is not propagated, as upstream).
//! - KbsConfig: built in upstream's construction order, then merged with the live KbsConfig so
//!   user-configurable fields survive (replicas, env vars as a union where the live value wins,
//!   secret resources, cert cache, a foreign IBM SE PVC) while managed fields are restored.
//!
//! Errors (the synthesis fails and nothing is written): a source TLS Secret missing, of the
//! wrong type or without `tls.key`/`tls.crt`; the IBM SE PV missing; the IBM SE PVC bound to
//! another volume. Tightened: `profileType` is an enum in the CRD (upstream treats a typo as
//! Permissive). Shared, as upstream: two TrusteeConfigs in one namespace both manage
//! `attestation-status`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use enoki_sdk::{Error, Input, Output, Resource};
use serde_json::{Map, Value, json};

mod tls;
pub use tls::*;

/// The instance kind.
pub const FOR: (&str, &str, &str) = ("confidentialcontainers.org", "v1alpha1", "TrusteeConfig");
const API: &str = "confidentialcontainers.org/v1alpha1";

// Upstream's templates, byte for byte (templates/trustee/README.md).
const TOML_PERMISSIVE: &str = include_str!("../templates/trustee/kbs-config-permissive.toml");
const TOML_RESTRICTED: &str = include_str!("../templates/trustee/kbs-config-restricted.toml");
const POLICY_PERMISSIVE: &str =
    include_str!("../templates/trustee/resource-policy-permissive.rego");
const POLICY_RESTRICTIVE: &str =
    include_str!("../templates/trustee/resource-policy-restrictive.rego");
const POLICY_IBM: &str = include_str!("../templates/trustee/resource-policy-ibm.rego");
const CPU_POLICY: &str =
    include_str!("../templates/trustee/ear_default_attestation_policy_cpu.rego");
const GPU_POLICY: &str =
    include_str!("../templates/trustee/ear_default_attestation_policy_gpu.rego");
const REFERENCE_VALUES: &str = include_str!("../templates/trustee/rvps-reference-values.json");

/// The Synthesizer spec enoki installs for this built-in.
pub fn synthesizer_spec() -> Value {
    let secret = |key: &str, path: &str| {
        json!({"key": key, "optional": true, "resource": {"group": "", "version": "v1",
            "kind": "Secret", "nameFrom": path}})
    };
    json!({
        "module": {"builtin": "trustee"},
        "for": {"group": FOR.0, "version": FOR.1, "kind": FOR.2},
        "refs": [
            secret("https-tls", "spec.httpsSpec.tlsSecretName"),
            secret("attestation-tls", "spec.attestationTokenVerificationSpec.tlsSecretName"),
            {"key": "ibmse-pv", "optional": true, "resource": {"group": "", "version": "v1",
                "kind": "PersistentVolume", "nameFrom": "spec.ibmSE.pvName"}},
        ],
        "watchOutputs": true,
        "entropy": "secure",
    })
}

fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn labels(tc: &str, component: &str) -> Value {
    json!({"app.kubernetes.io/managed-by": "trustee-operator", "app.kubernetes.io/part-of": "trustee",
           "app.kubernetes.io/instance": tc, "app.kubernetes.io/component": component})
}

fn b64(text: &str) -> Value {
    json!(B64.encode(text.as_bytes()))
}

/// Upstream's `mergeKbsConfigSpecs(generated, current)`: managed fields from `generated`;
/// replicas, env vars (union, current wins), secret resources, cert cache and a foreign IBM SE
/// PVC from `current`.
pub fn merge_kbs_spec(
    generated: &Map<String, Value>,
    current: &Map<String, Value>,
    auto_pvc: &str,
) -> Map<String, Value> {
    let mut out = generated.clone();
    if let Some(r) = current
        .get("KbsDeploymentSpec")
        .and_then(|d| d.get("replicas"))
        .filter(|r| !r.is_null())
        && generated
            .get("KbsDeploymentSpec")
            .and_then(|d| d.get("replicas"))
            != Some(r)
    {
        out.insert("KbsDeploymentSpec".into(), json!({"replicas": r}));
    }
    if let Some(cur) = current.get("KbsEnvVars").and_then(Value::as_object) {
        let mut env = generated
            .get("KbsEnvVars")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for (k, v) in cur {
            env.insert(k.clone(), v.clone());
        }
        out.insert("KbsEnvVars".into(), Value::Object(env));
    }
    if let Some(list) = current
        .get("kbsSecretResources")
        .and_then(Value::as_array)
        .filter(|l| !l.is_empty())
    {
        out.insert("kbsSecretResources".into(), Value::Array(list.clone()));
    }
    if let Some(cache) = current.get("kbsLocalCertCacheSpec")
        && cache
            .get("secrets")
            .and_then(Value::as_array)
            .is_some_and(|l| !l.is_empty())
    {
        out.insert("kbsLocalCertCacheSpec".into(), cache.clone());
    }
    let pvc = current
        .get("ibmSEConfigSpec")
        .and_then(|c| c.get("certStorePvc"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !pvc.is_empty() && pvc != auto_pvc {
        out.insert("ibmSEConfigSpec".into(), json!({"certStorePvc": pvc}));
    }
    out
}

/// The TrusteeConfig being synthesized, and what every output is named after.
struct Tc {
    tc: String,
    ns: String,
    spec: Value,
    restricted: bool,
    ibm_se: bool,
    owners: Value,
}

impl Tc {
    fn of(me: &Value) -> Tc {
        let tc = s(me, "/metadata/name").to_string();
        let spec = me.get("spec").cloned().unwrap_or(Value::Null);
        Tc {
            owners: json!([{"apiVersion": API, "kind": FOR.2, "name": tc,
                "uid": s(me, "/metadata/uid"), "controller": true, "blockOwnerDeletion": true}]),
            ns: s(me, "/metadata/namespace").to_string(),
            restricted: s(&spec, "/profileType") == "Restricted",
            ibm_se: spec.get("ibmSE").is_some_and(|v| !v.is_null()),
            spec,
            tc,
        }
    }

    /// Metadata of an output: name, the TrusteeConfig's namespace, its controller reference.
    fn meta(&self, name: &str) -> Value {
        json!({"name": name, "namespace": self.ns, "ownerReferences": self.owners})
    }
}

/// Step 4a: the KBS TOML ConfigMap: the profile's rendering the first time; afterwards the
/// live content with the TLS lines re-rendered (`createOrUpdateKbsConfigMap`).
fn kbs_toml(t: &Tc, input: &Input, out: &mut Output, kbs: &mut Map<String, Value>) {
    let cm_name = format!("{}-kbs-config", t.tc);
    let new = kbs_toml_text(
        t.restricted,
        t.spec.get("tlsConfig").unwrap_or(&Value::Null),
    );
    let toml = match input
        .observed_named("ConfigMap", &cm_name)
        .and_then(|c| c.pointer("/data/kbs-config.toml"))
        .and_then(Value::as_str)
    {
        Some(live) => merge_tls(live, &new),
        None => new,
    };
    out.push(
        Resource::from_value(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": t.meta(&cm_name),
            "data": {"kbs-config.toml": toml}}),
        )
        .readiness_group(0),
    );
    kbs.insert("kbsConfigMapName".into(), json!(cm_name));
}

/// Step 4b: the auth key pair (generated once, then kept) and the sample Secret.
fn auth_and_sample(
    t: &Tc,
    input: &Input,
    out: &mut Output,
    kbs: &mut Map<String, Value>,
) -> Result<(), Error> {
    let auth = format!("{}-auth-secret", t.tc);
    let auth_data = match input
        .observed_named("Secret", &auth)
        .and_then(|s| s.get("data"))
    {
        Some(d) if d.get("publicKey").is_some() && d.get("privateKey").is_some() => {
            json!({"publicKey": d["publicKey"], "privateKey": d["privateKey"]})
        }
        _ => {
            let (public, private) = keypair()?;
            json!({"publicKey": b64(&public), "privateKey": b64(&private)})
        }
    };
    let mut auth_meta = t.meta(&auth);
    auth_meta["labels"] = labels(&t.tc, "auth");
    out.push(
        Resource::from_value(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": auth_meta,
            "type": "Opaque", "data": auth_data}),
        )
        .readiness_group(0),
    );
    kbs.insert("kbsAuthSecretName".into(), json!(auth));

    let mut sample_meta = t.meta("attestation-status");
    sample_meta["labels"] = labels(&t.tc, "sample");
    out.push(
        Resource::from_value(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": sample_meta,
            "type": "Opaque", "data": {"status": b64("success")}}),
        )
        .readiness_group(0)
        .disable_updates(),
    );

    Ok(())
}

/// An object upstream created once and never deletes while the TrusteeConfig exists (a
/// policy ConfigMap after IBM SE was turned on, the IBM SE PVC after it was turned off, the
/// copied TLS Secrets after their source was unset): when it exists, it is emitted again as it
/// is (create-only), so enoki does not prune it; it goes with the TrusteeConfig.
fn keep(t: &Tc, input: &Input, out: &mut Output, kind: &str, name: &str) {
    let Some(live) = input.observed_named(kind, name) else {
        return;
    };
    let mut obj = json!({"apiVersion": "v1", "kind": kind, "metadata": t.meta(name)});
    if let Some(l) = live.pointer("/metadata/labels") {
        obj["metadata"]["labels"] = l.clone();
    }
    for field in ["data", "type", "spec"] {
        if let Some(v) = live.get(field) {
            obj[field] = v.clone();
        }
    }
    out.push(
        Resource::from_value(obj)
            .readiness_group(0)
            .disable_updates(),
    );
}

/// Step 4c: the resource policy, the RVPS reference values and (not IBM SE) the CPU and GPU
/// attestation policies, created once and then left to the user.
fn policies(t: &Tc, input: &Input, out: &mut Output, kbs: &mut Map<String, Value>) {
    let policy = if t.ibm_se {
        POLICY_IBM
    } else if t.restricted {
        POLICY_RESTRICTIVE
    } else {
        POLICY_PERMISSIVE
    };
    let create_only_cm = |out: &mut Output, name: &str, key: &str, text: &str| {
        out.push(
            Resource::from_value(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": t.meta(name),
                "data": {key: text}}),
            )
            .readiness_group(0)
            .disable_updates(),
        );
    };
    let rp = format!("{}-resource-policy", t.tc);
    create_only_cm(out, &rp, "resource-policy.rego", policy);
    kbs.insert("kbsResourcePolicyConfigMapName".into(), json!(rp));
    kbs.insert("kbsSecretResources".into(), json!(["attestation-status"]));
    let rvps = format!("{}-rvps-reference-values", t.tc);
    create_only_cm(out, &rvps, "reference_value", REFERENCE_VALUES);
    kbs.insert("kbsRvpsRefValuesConfigMapName".into(), json!(rvps));
    let cpu = format!("{}-attestation-policy-cpu", t.tc);
    let gpu = format!("{}-attestation-policy-gpu", t.tc);
    if t.ibm_se {
        keep(t, input, out, "ConfigMap", &cpu);
        keep(t, input, out, "ConfigMap", &gpu);
    } else {
        create_only_cm(out, &cpu, "default_cpu.rego", CPU_POLICY);
        create_only_cm(out, &gpu, "default_gpu.rego", GPU_POLICY);
        kbs.insert("kbsAttestationPolicyConfigMapName".into(), json!(cpu));
        kbs.insert("kbsGpuAttestationPolicyConfigMapName".into(), json!(gpu));
    }
}

/// Step 5: the IBM SE PVC bound to the pre-existing PV; returns the PVC name enoki uses.
fn ibm_se(
    t: &Tc,
    input: &Input,
    out: &mut Output,
    kbs: &mut Map<String, Value>,
) -> Result<String, Error> {
    // 5. IBM SE: a PVC bound to the pre-existing PV.
    let auto_pvc = format!("{}-ibmse-certstore-pvc", t.tc);
    if t.ibm_se {
        let pv = s(&t.spec, "/ibmSE/pvName");
        if input.optional_input("ibmse-pv").is_none() {
            return Err(Error::InvalidInput {
                key: "ibmse-pv".into(),
                message: format!("spec.ibmSE.pvName: PersistentVolume {pv:?} does not exist"),
            });
        }
        if let Some(live) = input.observed_named("PersistentVolumeClaim", &auto_pvc) {
            let bound = s(live, "/spec/volumeName");
            if !bound.is_empty() && bound != pv {
                return Err(Error::Other(format!(
                    "PersistentVolumeClaim {}/{auto_pvc} is bound to volume {bound:?}, not spec.ibmSE.pvName {pv:?}",
                    t.ns
                )));
            }
        }
        out.push(
            Resource::from_value(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": t.meta(&auto_pvc),
                "spec": {"storageClassName": "", "accessModes": ["ReadOnlyMany"], "volumeName": pv,
                         "resources": {"requests": {"storage": "100Mi"}}}}))
            .readiness_group(0)
            .disable_updates(),
        );
        kbs.insert("ibmSEConfigSpec".into(), json!({"certStorePvc": auto_pvc}));
    } else {
        keep(t, input, out, "PersistentVolumeClaim", &auto_pvc);
    }

    Ok(auto_pvc)
}

/// The KbsConfig merged with the live one, and the TrusteeConfig's status mirroring it.
fn kbs_config_and_status(
    t: &Tc,
    input: &Input,
    out: &mut Output,
    kbs: &Map<String, Value>,
    auto_pvc: &str,
) {
    // The KbsConfig, merged with the live one.
    let kbs_name = format!("{}-kbs-config", t.tc);
    let live_kbs = input.observed_named("KbsConfig", &kbs_name);
    let current = live_kbs
        .and_then(|k| k.get("spec"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let merged = merge_kbs_spec(kbs, &current, auto_pvc);
    out.push(
        Resource::from_value(
            json!({"apiVersion": API, "kind": "KbsConfig", "metadata": t.meta(&kbs_name),
            "spec": merged}),
        )
        .readiness_group(1)
        .readiness("has(self.status) && has(self.status.isReady) && self.status.isReady == true"),
    );

    // Status: mirrors the KbsConfig's readiness.
    let ready = live_kbs
        .and_then(|k| k.pointer("/status/isReady"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    out.push(json!({
        "apiVersion": API, "kind": FOR.2, "metadata": {"name": t.tc, "namespace": t.ns},
        "status": {
            "isReady": ready,
            "kbsConfigRef": {"apiVersion": API, "kind": "KbsConfig", "name": kbs_name, "namespace": t.ns},
            "statusDescription": if ready {
                "TrusteeConfig is ready and KbsConfig is deployed successfully"
            } else {
                "TrusteeConfig reconciled but KbsConfig deployment is in progress"
            },
        },
    }));
}

/// Builds everything for one TrusteeConfig, in upstream's construction order.
///
/// # Errors
/// Invalid TLS source Secrets, a missing IBM SE PV, an IBM SE PVC bound elsewhere.
pub fn synthesize(input: &Input) -> Result<Output, Error> {
    let me = input.input("self")?;
    let t = Tc::of(me);
    let mut out = Output::default();
    let mut kbs = Map::new();
    // 1–3. service type, deployment type, replicas.
    let service_type = s(&t.spec, "/kbsServiceType");
    if !service_type.is_empty() {
        kbs.insert("kbsServiceType".into(), json!(service_type));
    }
    kbs.insert("kbsDeploymentType".into(), json!("AllInOneDeployment"));
    kbs.insert("KbsDeploymentSpec".into(), json!({"replicas": 1}));

    // 4. profile: env, KBS TOML, auth + sample secrets, resource policy, RVPS, CPU/GPU policies.
    let env = if t.restricted {
        json!({})
    } else {
        json!({"RUST_LOG": "debug"})
    };
    kbs.insert("KbsEnvVars".into(), env);
    kbs_toml(&t, input, &mut out, &mut kbs);
    auth_and_sample(&t, input, &mut out, &mut kbs)?;
    policies(&t, input, &mut out, &mut kbs);
    let auto_pvc = ibm_se(&t, input, &mut out, &mut kbs)?;
    tls_copies(&t, input, &mut out, &mut kbs)?;
    kbs_config_and_status(&t, input, &mut out, &kbs, &auto_pvc);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Go's text/template makes of upstream's kbs-config-restricted.toml (worked by hand
    /// from its `{{if}}`/`{{else}}`/`{{end}}` layout: the text between actions is kept, so the
    /// TLS block is surrounded by blank lines).
    #[test]
    fn the_restricted_toml_is_rendered_as_upstream_renders_it() {
        let intermediate = kbs_toml_text(true, &Value::Null);
        assert!(
            intermediate.contains(
                "worker_count = 4\n\n# TLS configuration - Mozilla intermediate profile\n\n\
             tls_profile = \"intermediate\"\n\n\n\n[admin]\n"
            ),
            "{intermediate}"
        );
        let custom = json!({"profile": "custom", "minVersion": "1.2",
            "ciphers": ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"],
            "groups": ["X25519", "P-256"]});
        let text = kbs_toml_text(true, &custom);
        assert!(
            text.contains(
                "# TLS configuration - Mozilla custom profile\n\ntls_profile = \"custom\"\n\
             tls_min_version = \"1.2\"\n\n\
             tls_ciphers = \"ECDHE-RSA-AES128-GCM-SHA256:TLS_AES_128_GCM_SHA256\"\n\
             tls_groups = \"X25519:P-256\"\n\n\n\n[admin]\n"
            ),
            "{text}"
        );
        assert_eq!(kbs_toml_text(false, &custom), TOML_PERMISSIVE);
    }

    /// Upstream's `convertSingleCipher`, case by case (tlsconfig_test.go's table).
    #[test]
    fn ciphers_are_converted_for_every_iana_name_upstream_converts() {
        for (iana, openssl) in [
            ("TLS_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"),
            (
                "TLS_CHACHA20_POLY1305_SHA256",
                "TLS_CHACHA20_POLY1305_SHA256",
            ),
            (
                "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
                "ECDHE-ECDSA-AES128-GCM-SHA256",
            ),
            (
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
                "ECDHE-RSA-AES256-GCM-SHA384",
            ),
            (
                "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256",
                "DHE-RSA-AES128-GCM-SHA256",
            ),
            ("TLS_DHE_RSA_WITH_AES_128_CBC_SHA", "DHE-RSA-AES128-CBC-SHA"),
            (
                "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
                "ECDHE-RSA-CHACHA20-POLY1305",
            ),
            (
                "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
                "DHE-RSA-CHACHA20-POLY1305",
            ),
            ("TLS_RSA_WITH_AES_128_CBC_SHA", "AES128-SHA"),
            ("TLS_RSA_WITH_AES_256_GCM_SHA384", "AES256-GCM-SHA384"),
            ("TLS_RSA_WITH_3DES_EDE_CBC_SHA", "DES-CBC3-SHA"),
            (
                "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
                "ECDHE-RSA-DES-CBC3-SHA",
            ),
        ] {
            assert_eq!(openssl_cipher(iana), openssl, "{iana}");
        }
    }

    /// Upstream's `mergeTlsSettings`: hand edits outside the TLS lines survive, the TLS block
    /// is replaced, and a Permissive rendering (no TLS lines) leaves the live TOML alone.
    #[test]
    fn tls_lines_are_merged_as_upstream_merges_them() {
        let fresh = kbs_toml_text(true, &Value::Null);
        assert_eq!(
            merge_tls(&fresh, &fresh),
            fresh,
            "merging a rendering into itself"
        );
        let edited = fresh.replace("worker_count = 4", "worker_count = 16")
            + "\n[[plugins]]\nname = \"mine\"\n";
        let modern = kbs_toml_text(true, &json!({"profile": "modern"}));
        let merged = merge_tls(&edited, &modern);
        assert!(merged.contains("worker_count = 16"));
        assert!(merged.contains("name = \"mine\""));
        assert!(merged.contains("tls_profile = \"modern\""));
        assert!(!merged.contains("intermediate"));
        assert_eq!(merged.matches("tls_profile").count(), 1);
        let permissive = kbs_toml_text(false, &Value::Null);
        assert_eq!(merge_tls(&edited, &permissive), edited);
    }

    #[test]
    fn merge_keeps_user_fields_and_restores_managed_ones() {
        let generated = json!({"kbsConfigMapName": "tc-kbs-config", "KbsDeploymentSpec": {"replicas": 1},
            "KbsEnvVars": {"RUST_LOG": "debug"}, "kbsSecretResources": ["attestation-status"]});
        let current = json!({"kbsConfigMapName": "hacked", "KbsDeploymentSpec": {"replicas": 3},
            "KbsEnvVars": {"RUST_LOG": "info", "EXTRA": "1"}, "kbsSecretResources": ["attestation-status", "mine"],
            "ibmSEConfigSpec": {"certStorePvc": "tc-ibmse-certstore-pvc"}});
        let m = merge_kbs_spec(
            generated.as_object().unwrap(),
            current.as_object().unwrap(),
            "tc-ibmse-certstore-pvc",
        );
        assert_eq!(m["kbsConfigMapName"], "tc-kbs-config");
        assert_eq!(m["KbsDeploymentSpec"]["replicas"], 3);
        assert_eq!(
            crate::selector::string_map(&Value::Object(m.clone()), "/KbsEnvVars"),
            [
                ("EXTRA".to_string(), "1".to_string()),
                ("RUST_LOG".to_string(), "info".to_string())
            ]
            .into()
        );
        assert_eq!(
            m["kbsSecretResources"],
            json!(["attestation-status", "mine"])
        );
        assert!(
            m.get("ibmSEConfigSpec").is_none(),
            "the operator's own PVC name is not kept"
        );
        // Nothing changed by hand: merge(generated, generated) == generated.
        let g = generated.as_object().unwrap();
        assert_eq!(&merge_kbs_spec(g, g, "x"), g);
    }
}
