//! The KRM `ResourceList` that goes in on stdin and comes out on stdout, and the lookups a
//! synthesizer needs: bound inputs by key, inputs by kind, observed outputs, environment.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Error;
use crate::annotations::{INPUT_KEY, OBSERVED};

/// A KRM function `ResourceList` (`apiVersion: config.kubernetes.io/v1`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceList {
    /// Always `config.kubernetes.io/v1`.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// Always `ResourceList`.
    #[serde(default = "kind")]
    pub kind: String,
    /// Inputs (stdin) or desired resources (stdout).
    #[serde(default)]
    pub items: Vec<Value>,
    /// What the host tells the synthesizer (stdin only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_config: Option<FunctionConfig>,
    /// What the synthesizer reports (stdout only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<SynthesisResult>,
}

fn api_version() -> String {
    "config.kubernetes.io/v1".into()
}
fn kind() -> String {
    "ResourceList".into()
}

/// `functionConfig`: the Composition's metadata and the synthesis environment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionConfig {
    /// The Composition being synthesized.
    #[serde(default)]
    pub composition: CompositionMeta,
    /// `synthesisEnv` merged over the Synthesizer's `env`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// The Composition's identity.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CompositionMeta {
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// metadata.generation.
    #[serde(default)]
    pub generation: i64,
}

/// Severity of a result; any `error` fails the synthesis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Fails the synthesis.
    Error,
    /// Shown to users.
    Warning,
    /// Recorded.
    Info,
}

/// One result (KRM function result).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SynthesisResult {
    /// Severity.
    pub severity: Severity,
    /// Message.
    pub message: String,
    /// The resource it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_ref: Option<Value>,
    /// KRM tags. [`EVENT_REASON_TAG`] turns the result into a Kubernetes Event.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tags: std::collections::BTreeMap<String, String>,
}

/// Tag of a result that enoki also publishes as a Kubernetes Event with this reason: on the
/// instance in instance mode, otherwise on the Composition; `info` results are Normal Events,
/// `warning` and `error` ones Warning Events. Published once per synthesis.
pub const EVENT_REASON_TAG: &str = "enoki.dev/event-reason";

impl SynthesisResult {
    /// An `error` result.
    pub fn error(message: impl Into<String>) -> Self {
        SynthesisResult {
            severity: Severity::Error,
            message: message.into(),
            resource_ref: None,
            tags: std::collections::BTreeMap::new(),
        }
    }
    /// A `warning` result.
    pub fn warning(message: impl Into<String>) -> Self {
        SynthesisResult {
            severity: Severity::Warning,
            message: message.into(),
            resource_ref: None,
            tags: std::collections::BTreeMap::new(),
        }
    }
    /// An `info` result.
    pub fn info(message: impl Into<String>) -> Self {
        SynthesisResult {
            severity: Severity::Info,
            message: message.into(),
            resource_ref: None,
            tags: std::collections::BTreeMap::new(),
        }
    }
}

/// What a synthesizer reads: the stdin ResourceList.
pub type Input = ResourceList;

fn annotation<'a>(item: &'a Value, key: &crate::annotations::Key) -> Option<&'a str> {
    let annotations = item.pointer("/metadata/annotations")?;
    annotations
        .get(key.enoki)
        .or_else(|| annotations.get(key.eno))
        .and_then(Value::as_str)
}

impl ResourceList {
    /// The bound input under `key` (the first, for collections).
    ///
    /// # Errors
    /// [`Error::MissingInput`] when nothing is bound under `key`.
    pub fn input(&self, key: &str) -> Result<&Value, Error> {
        self.optional_input(key)
            .ok_or_else(|| Error::MissingInput { key: key.into() })
    }

    /// The bound input under `key`, if any (for optional refs).
    pub fn optional_input(&self, key: &str) -> Option<&Value> {
        self.items
            .iter()
            .find(|i| annotation(i, &INPUT_KEY) == Some(key))
    }

    /// Every item bound under `key` (collections deliver several).
    pub fn inputs<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.items
            .iter()
            .filter(move |i| annotation(i, &INPUT_KEY) == Some(key))
    }

    /// The input under `key` deserialized into a typed struct (e.g. a k8s-openapi type).
    ///
    /// # Errors
    /// [`Error::MissingInput`] or [`Error::InvalidInput`].
    pub fn input_as<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<T, Error> {
        serde_json::from_value(self.input(key)?.clone()).map_err(|e| Error::InvalidInput {
            key: key.into(),
            message: e.to_string(),
        })
    }

    /// Every input (not observed output) of a kind.
    pub fn inputs_of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.items.iter().filter(move |i| {
            i.get("kind").and_then(Value::as_str) == Some(kind)
                && annotation(i, &OBSERVED).is_none()
        })
    }

    /// The live state of resources this composition emitted last time.
    pub fn observed(&self) -> impl Iterator<Item = &Value> {
        self.items
            .iter()
            .filter(|i| annotation(i, &OBSERVED) == Some("true"))
    }

    /// The observed output with this kind and name, if any.
    pub fn observed_named(&self, kind: &str, name: &str) -> Option<&Value> {
        self.observed().find(|i| {
            i.get("kind").and_then(Value::as_str) == Some(kind)
                && i.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
        })
    }

    /// A synthesis environment variable (functionConfig first, then the process env).
    pub fn env(&self, name: &str) -> Option<String> {
        self.function_config
            .as_ref()
            .and_then(|f| f.env.get(name).cloned())
            .or_else(|| std::env::var(name).ok())
    }

    /// The Composition being synthesized.
    pub fn composition(&self) -> CompositionMeta {
        self.function_config
            .as_ref()
            .map(|f| f.composition.clone())
            .unwrap_or_default()
    }
}

/// What a synthesizer returns: desired resources and results.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Output {
    /// Desired resources.
    pub items: Vec<Value>,
    /// Results; any `error` fails the synthesis.
    pub results: Vec<SynthesisResult>,
}

impl Output {
    /// Adds a desired resource (a [`crate::Resource`], a k8s-openapi object, or JSON).
    pub fn push(&mut self, item: impl Into<Value>) -> &mut Self {
        self.items.push(item.into());
        self
    }

    /// Adds any serializable object as a desired resource.
    ///
    /// # Errors
    /// When the object does not serialize to JSON.
    pub fn push_typed(&mut self, item: &impl Serialize) -> Result<&mut Self, Error> {
        self.items.push(serde_json::to_value(item)?);
        Ok(self)
    }

    /// Adds a warning result.
    pub fn warn(&mut self, message: impl Into<String>) -> &mut Self {
        self.results.push(SynthesisResult::warning(message));
        self
    }

    /// Adds an info result.
    pub fn info(&mut self, message: impl Into<String>) -> &mut Self {
        self.results.push(SynthesisResult::info(message));
        self
    }

    /// Adds a result that enoki also publishes as an Event with `reason` (a Warning Event
    /// when `warning`, else Normal); see [`EVENT_REASON_TAG`].
    pub fn event(&mut self, warning: bool, reason: &str, message: impl Into<String>) -> &mut Self {
        let mut r = if warning {
            SynthesisResult::warning(message)
        } else {
            SynthesisResult::info(message)
        };
        r.tags
            .insert(EVENT_REASON_TAG.to_string(), reason.to_string());
        self.results.push(r);
        self
    }

    /// Fails the synthesis with an error result that enoki also publishes as a Warning Event
    /// with `reason` (on the instance in instance mode); see [`EVENT_REASON_TAG`].
    pub fn fail_event(&mut self, reason: &str, message: impl Into<String>) -> &mut Self {
        let mut r = SynthesisResult::error(message);
        r.tags
            .insert(EVENT_REASON_TAG.to_string(), reason.to_string());
        self.results.push(r);
        self
    }

    /// The stdout ResourceList.
    pub fn into_resource_list(self) -> ResourceList {
        ResourceList {
            items: self.items,
            results: self.results,
            ..ResourceList::default()
        }
    }
}

impl Default for ResourceList {
    fn default() -> Self {
        ResourceList {
            api_version: api_version(),
            kind: kind(),
            items: Vec::new(),
            function_config: None,
            results: Vec::new(),
        }
    }
}
