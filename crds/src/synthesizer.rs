//! The `Synthesizer` resource: where a synthesizer's module comes from, which inputs it takes
//! (`refs`), its limits, and whether it runs once per object of a kind (instance mode).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A synthesizer: a WebAssembly module (or a built-in) that turns inputs into manifests.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "enoki.dev",
    version = "v1alpha1",
    kind = "Synthesizer",
    status = "SynthesizerStatus",
    doc = "A synthesizer: the WebAssembly module (or built-in) that turns a Composition's inputs into the manifests enoki applies, the inputs it takes (refs), its limits and environment. Cluster-scoped; platform teams own them.",
    shortname = "synth",
    category = "enoki",
    printcolumn = r#"{"name":"Module","type":"string","jsonPath":".status.moduleDigest"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Revision","type":"integer","jsonPath":".status.rollout.revision.number"}"#,
    printcolumn = r#"{"name":"Rollout","type":"string","jsonPath":".status.rollout.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.module.builtin) || self.module.builtin != 'helm' || has(self.helm)",
     "message": "module.builtin helm renders a chart: set spec.helm.chart"}
]))]
pub struct SynthesizerSpec {
    /// Where the module comes from; exactly one source must be set.
    pub module: ModuleSource,
    /// The inputs the synthesizer takes, each under a key that Compositions bind (keys are
    /// unique).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["key"]))]
    pub refs: Vec<Ref>,
    /// Instance mode: every object of this kind gets an implicit Composition bound under `self`.
    #[serde(default, rename = "for", skip_serializing_if = "Option::is_none")]
    pub for_kind: Option<GroupVersionKind>,
    /// Limits for each run of the module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// Environment variables set for every run. They are the platform's policy: a Composition's
    /// `synthesisEnv` cannot override them (a variable of the same name is dropped).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// `reproducible` (default): seeded randomness and a fixed clock; `secure`: real entropy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entropy: Option<Entropy>,
    /// Re-synthesize when the live state of an emitted resource changes (its observed outputs),
    /// e.g. to mirror a child's status or keep fields a person changed. Observed outputs are
    /// passed to every synthesis; this makes a change to them a trigger too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub watch_outputs: bool,
    /// Accept an output with no resources when the current synthesis has some (it deletes
    /// them all), for every Composition of this Synthesizer. Off by default (`EmptyOutput`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_empty: bool,
    /// Instance mode: the ServiceAccount (in each implicit Composition's namespace) that the
    /// implicit Compositions act as — their `spec.serviceAccountName`. Unset: the controller's
    /// `--default-service-account`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// A Helm chart to render (with `module.builtin: helm`, Helm's own engine in the sandbox):
    /// the controller fetches the chart like a module and passes it to the module as the input
    /// `chart`, and `values` as the input `helm-values`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm: Option<HelmSpec>,
    /// Give each synthesis the target cluster's Kubernetes version and served API versions
    /// (`group/version` and `group/version/Kind`, read from discovery as `helm install` reads
    /// a chart's `.Capabilities`) as `HELM_KUBE_VERSION` and `HELM_API_VERSIONS`; a change of
    /// either synthesizes again. A variable set in `env` or a Composition's `synthesisEnv`
    /// wins. Unset: on with `helm`, off otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_capabilities: Option<bool>,
    /// The namespaces whose Compositions may use this Synthesizer (a label selector on
    /// Namespaces; `{}` selects every namespace). Unset: every namespace. A Composition in
    /// another namespace gets `Synthesized=False` reason `SynthesizerNotAllowed` and nothing is
    /// synthesized or applied for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// How a new revision reaches the Compositions: Eno's cooldown (default) or progressive
    /// waves gated by health. Changing only this field makes no new revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::Rollout>,
}

/// A Helm chart and the values every Composition of the Synthesizer renders it with.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HelmSpec {
    /// Where the packaged chart (`.tgz`, what `helm package` writes) comes from; exactly one
    /// source must be set.
    pub chart: ChartSource,
    /// Values merged over the chart's `values.yaml`, as `helm -f` merges a file; a
    /// Composition's bound `values` inputs are merged over these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub values: Option<serde_json::Value>,
    /// Whose Helm shim the chart is rendered as: `enoki` (the default: the release is named
    /// after the Composition and installed in its namespace; hooks are left out) or `eno`
    /// (Eno's pkg/helmshim: release `eno-helm-shim` in namespace `default`, hook manifests
    /// emitted after the rest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shim: Option<HelmShim>,
}

/// Whose Helm shim a chart is rendered as.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum HelmShim {
    /// The release is the Composition (its name and namespace); hooks are left out.
    #[default]
    Enoki,
    /// As Eno's pkg/helmshim: release `eno-helm-shim` in namespace `default`, hooks emitted.
    Eno,
}

/// Where a packaged Helm chart comes from. Exactly one of `configMap`, `oci`, `url` is set.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "[has(self.configMap), has(self.oci), has(self.url)].filter(x, x).size() == 1",
     "message": "exactly one of configMap, oci, url must be set"},
    {"rule": "!has(self.url) || has(self.sha256)",
     "message": "a url chart needs sha256 (the hex SHA-256 of the .tgz)"},
    {"rule": "!has(self.sha256) || has(self.url)",
     "message": "sha256 is for a url chart"},
    {"rule": "!has(self.pullSecret) || has(self.oci)",
     "message": "pullSecret is for an oci chart"}
]))]
pub struct ChartSource {
    /// A chart stored in a ConfigMap's `binaryData` under `key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapModule>,
    /// A chart pushed with `helm push`, pinned by digest:
    /// `registry/repo:version@sha256:…` (tag-only references are refused: a tag can move).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.matches('^[^@]+@sha256:[a-f0-9]{64}$')",
         "message": "oci must be pinned by digest: <registry>/<repository>:<version>@sha256:<64 hex digits>"}
    ]), length(max = 1024))]
    pub oci: Option<String>,
    /// Credentials for the `oci` registry (as `spec.module.pullSecret`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret: Option<SecretRef>,
    /// An `https://` URL of the `.tgz`; `sha256` must also be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.startsWith('https://')", "message": "url must be an https:// URL"}
    ]), length(max = 2048))]
    pub url: Option<String>,
    /// The expected SHA-256 (hex) of the `.tgz` fetched from `url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(sha256:)?[a-fA-F0-9]{64}$"))]
    pub sha256: Option<String>,
}

impl ChartSource {
    /// The same source as a module source (the fetch code is shared).
    pub fn as_module_source(&self) -> ModuleSource {
        ModuleSource {
            builtin: None,
            config_map: self.config_map.clone(),
            oci: self.oci.clone(),
            pull_secret: self.pull_secret.clone(),
            url: self.url.clone(),
            sha256: self.sha256.clone(),
        }
    }
}

/// Any JSON object, kept as written (`x-kubernetes-preserve-unknown-fields`).
fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// Where a synthesizer's WebAssembly module comes from. Exactly one field is set.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "[has(self.builtin), has(self.configMap), has(self.oci), has(self.url)].filter(x, x).size() == 1",
     "message": "exactly one of builtin, configMap, oci, url must be set"},
    {"rule": "!has(self.url) || has(self.sha256)",
     "message": "a url module needs sha256 (the hex SHA-256 of the module)"},
    {"rule": "!has(self.pullSecret) || has(self.oci)",
     "message": "pullSecret is for an oci module"}
]))]
pub struct ModuleSource {
    /// The name of a synthesizer built into enoki (`trustee`, `quota`, `lepton`; `helm`: the
    /// Helm module the controller ships, rendering `spec.helm.chart`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub builtin: Option<String>,
    /// A module stored in a ConfigMap's `binaryData` (optionally gzip-compressed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapModule>,
    /// An OCI artifact pinned by digest: `registry/repo:tag@sha256:…` (tag-only references are
    /// refused: a tag can move).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.matches('^[^@]+@sha256:[a-f0-9]{64}$')",
         "message": "oci must be pinned by digest: <registry>/<repository>:<tag>@sha256:<64 hex digits>"}
    ]), length(max = 1024))]
    pub oci: Option<String>,
    /// Credentials for the `oci` registry: a Secret of type `kubernetes.io/dockerconfigjson`
    /// (what `kubectl create secret docker-registry` writes), read by the controller. When the
    /// controller is confined to its namespace (`--no-cross-namespace-refs`, the default
    /// install) the Secret must live there, like a module ConfigMap. Its content never appears
    /// in status, Events or logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret: Option<SecretRef>,
    /// An `https://` URL; `sha256` must also be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.startsWith('https://')", "message": "url must be an https:// URL"}
    ]), length(max = 2048))]
    pub url: Option<String>,
    /// The expected SHA-256 (hex) of the module fetched from `url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(sha256:)?[a-fA-F0-9]{64}$"))]
    pub sha256: Option<String>,
}

/// The one source a [`ModuleSource`] names, as a type: every use matches all of them, so a
/// new kind of source cannot be forgotten in one place.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ModuleSourceKind<'a> {
    /// A synthesizer built into enoki, by name.
    Builtin(&'a str),
    /// A module in a ConfigMap's `binaryData`.
    ConfigMap(&'a ConfigMapModule),
    /// An OCI artifact pinned by digest, with the Secret of its registry's credentials.
    Oci {
        /// `registry/repo:tag@sha256:…`.
        reference: &'a str,
        /// `pullSecret`.
        pull_secret: Option<&'a SecretRef>,
    },
    /// An `https://` URL and the SHA-256 its content must have.
    Url {
        /// The URL.
        url: &'a str,
        /// `sha256` (hex, optionally `sha256:`-prefixed).
        sha256: &'a str,
    },
}

impl ModuleSource {
    /// The one source this names. The API server's validation says the same; this is what
    /// the controller believes (an object written before the validation, or a chart source
    /// converted from its own type).
    ///
    /// # Errors
    /// A message naming the fields: none or several sources set, a `url` without `sha256`,
    /// a `pullSecret` without `oci`.
    pub fn kind(&self) -> Result<ModuleSourceKind<'_>, String> {
        let n = self.sources_set();
        if n != 1 {
            return Err(format!(
                "exactly one of builtin, configMap, oci, url must be set ({n} are)"
            ));
        }
        if self.pull_secret.is_some() && self.oci.is_none() {
            return Err("pullSecret is for an oci source; this one is not".into());
        }
        match (&self.builtin, &self.config_map, &self.oci, &self.url) {
            (Some(name), _, _, _) => Ok(ModuleSourceKind::Builtin(name)),
            (_, Some(cm), _, _) => Ok(ModuleSourceKind::ConfigMap(cm)),
            (_, _, Some(reference), _) => Ok(ModuleSourceKind::Oci {
                reference,
                pull_secret: self.pull_secret.as_ref(),
            }),
            (_, _, _, Some(url)) => match self.sha256.as_deref() {
                Some(sha256) => Ok(ModuleSourceKind::Url { url, sha256 }),
                None => Err("a url module needs sha256 (the hex SHA-256 of the module)".into()),
            },
            (None, None, None, None) => Err("no source is set".into()),
        }
    }

    /// How many of the mutually exclusive sources are set (valid specs have exactly one).
    pub fn sources_set(&self) -> usize {
        [
            self.builtin.is_some(),
            self.config_map.is_some(),
            self.oci.is_some(),
            self.url.is_some(),
        ]
        .into_iter()
        .filter(|set| *set)
        .count()
    }
}

/// A Secret named by namespace and name.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct SecretRef {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
}

/// A module stored in a ConfigMap.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct ConfigMapModule {
    /// Namespace of the ConfigMap.
    pub namespace: String,
    /// Name of the ConfigMap.
    pub name: String,
    /// Key in `binaryData` holding the module.
    pub key: String,
}

/// An input the synthesizer takes: one object (`resource`) or a list (`collection`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Ref {
    /// The key the input is bound and delivered under (`enoki.dev/input-key`).
    pub key: String,
    /// A single object; name/namespace may be left to the Composition's binding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceRef>,
    /// Every object of a kind that matches the selectors, delivered as a list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collection: Option<CollectionRef>,
    /// A missing optional input is left out instead of failing the synthesis.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
    /// Changes to a deferred input re-synthesize only after other pending work (Eno semantics).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub defer: bool,
}

/// A reference to one object by group/version/kind and optional name/namespace.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRef {
    /// API group (empty for the core group).
    #[serde(default)]
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Object name, if fixed by the synthesizer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Object namespace, if fixed by the synthesizer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Instance mode: a dotted path into `self` whose string value names the object (in the
    /// instance's namespace), e.g. `spec.httpsSpec.tlsSecretName`. When the path is unset the
    /// input is absent (make the ref `optional`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_from: Option<String>,
}

/// A reference to every object of a kind matching optional selectors.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CollectionRef {
    /// API group (empty for the core group).
    #[serde(default)]
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Label selector (`a=b,c!=d` syntax) for namespaces to look in; all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<String>,
    /// Label selector (`a=b,c!=d` syntax) for the objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    /// Instance mode: a dotted path into `self` holding a Kubernetes LabelSelector that the
    /// objects themselves must match (ANDed with `labelSelector`). A missing selector selects
    /// nothing; `{}` selects everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector_from: Option<String>,
    /// Instance mode: a dotted path into `self` (e.g. `spec.namespaceSelector`) holding a
    /// Kubernetes LabelSelector (`matchLabels` / `matchExpressions`) for the namespaces to look
    /// in. A missing selector selects no namespace; `{}` selects every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector_from: Option<String>,
    /// Only these fields of each object are delivered (dotted paths, `[*]` maps over a list,
    /// e.g. `status.containerStatuses[*].state.terminated`), plus `apiVersion`, `kind` and
    /// the name, namespace, labels and annotations. Changes to other fields do not
    /// re-synthesize. Everything when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
}

/// An API group, version and kind.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
pub struct GroupVersionKind {
    /// API group (empty for the core group).
    #[serde(default)]
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
}

/// Per-run limits, in human units (`10s`, `256Mi`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct Limits {
    /// Wall-clock deadline of one run (a duration: `10s`, `1m 30s`; default `10s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.matches('^\\\\s*([0-9]+(\\\\.[0-9]+)?\\\\s*[a-zA-Zµ]+\\\\s*)+$')",
         "message": "timeout must be a duration such as 10s, 1.5s, 500ms or 1m 30s"}
    ]), length(max = 64))]
    pub timeout: Option<String>,
    /// Linear memory cap (a whole number of bytes as a Kubernetes quantity: `256Mi`, `1.5Gi`,
    /// `512M`; default `256Mi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.matches('^\\\\s*\\\\+?([0-9]+(\\\\.[0-9]*)?|\\\\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?\\\\s*$')",
         "message": "memory must be a quantity of bytes such as 256Mi, 1.5Gi or 512M"}
    ]), length(max = 64))]
    pub memory: Option<String>,
    /// Stdout cap, and what one synthesis may store in ResourceSlices (a quantity of bytes;
    /// default: the controller's `--synthesis-output`, 4Mi).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.matches('^\\\\s*\\\\+?([0-9]+(\\\\.[0-9]*)?|\\\\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?\\\\s*$')",
         "message": "output must be a quantity of bytes such as 16Mi or 1Gi"}
    ]), length(max = 64))]
    pub output: Option<String>,
}

/// An environment variable.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct EnvVar {
    /// Variable name.
    pub name: String,
    /// Variable value.
    #[serde(default)]
    pub value: String,
}

/// Where a run's randomness and clock come from.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Entropy {
    /// Seeded randomness and a fixed clock: same inputs, byte-identical output.
    #[default]
    Reproducible,
    /// Real entropy and clock; output is not reproducible.
    Secure,
}

/// Observed state of a Synthesizer.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SynthesizerStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `sha256:<hex>` of the module that was fetched and compiled (`builtin:<name>@<version>` for
    /// a built-in; with `spec.helm`, followed by `+chart:sha256:<hex>` of the chart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_digest: Option<String>,
    /// `Ready`: the module was fetched and compiled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The revision being rolled out and where it stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::RolloutStatus>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(v: serde_json::Value) -> ModuleSource {
        serde_json::from_value(v).unwrap_or_default()
    }

    #[test]
    fn a_module_source_is_exactly_one_kind() {
        let oci = source(serde_json::json!({"oci": "r/m:1@sha256:00",
            "pullSecret": {"name": "p", "namespace": "n"}}));
        assert!(matches!(
            oci.kind(),
            Ok(ModuleSourceKind::Oci {
                reference: "r/m:1@sha256:00",
                pull_secret: Some(_)
            })
        ));
        let url = source(serde_json::json!({"url": "https://m", "sha256": "ab"}));
        assert_eq!(
            url.kind(),
            Ok(ModuleSourceKind::Url {
                url: "https://m",
                sha256: "ab"
            })
        );
        assert_eq!(
            source(serde_json::json!({"builtin": "quota"})).kind(),
            Ok(ModuleSourceKind::Builtin("quota"))
        );
        for (bad, says) in [
            (serde_json::json!({}), "(0 are)"),
            (
                serde_json::json!({"builtin": "quota", "url": "https://m"}),
                "(2 are)",
            ),
            (serde_json::json!({"url": "https://m"}), "needs sha256"),
            (
                serde_json::json!({"builtin": "quota", "pullSecret": {"name": "p", "namespace": "n"}}),
                "pullSecret is for an oci source",
            ),
        ] {
            let err = source(bad.clone()).kind().unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
