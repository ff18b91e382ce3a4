//! Annotations -> typed [`Settings`] for one synthesized resource.
//!
//! Both spellings are accepted (`enoki.dev/<key>` wins over `eno.azure.io/<key>`). The
//! cascading keys (`disable-updates`, `disable-reconciliation`, `replace`,
//! `deletion-strategy`, `reconcile-interval`, `drift`, `adopt`, `health`) fall back to the
//! Composition's annotations, as in Eno. `fail-open` is the resource's own, read as Go's
//! `strconv.ParseBool` reads it (a value it refuses fails the synthesis), before overrides —
//! as Eno reads it; without it the controller's `--fail-open` applies. Kinds in Eno's infra list default to readiness group
//! -100. Errors name the resource and the key as written.

use std::collections::BTreeMap;
use std::time::Duration;

use crds::names::{Key, annotations as keys};
use serde::Serialize;

use crate::error::PlanError;
use crate::key::ResourceKey;

/// Readiness group of Eno's infra kinds when not annotated (Helm's install order).
pub const INFRA_READINESS_GROUP: i64 = -100;

/// Kinds (matched by name in any group) that default to [`INFRA_READINESS_GROUP`].
pub const INFRA_KINDS: &[&str] = &[
    "PriorityClass",
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "EtcdCluster",
];

/// What happens to a resource when its Composition is deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeletionStrategy {
    /// Delete it and move on once the delete is accepted.
    #[default]
    Background,
    /// Leave it in the cluster.
    Orphan,
    /// Delete it and wait until it is gone.
    Foreground,
}

/// How drift is detected for a resource.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Drift {
    /// A metadata watch sees foreign writes and re-applies at once.
    #[default]
    Watch,
    /// Only `reconcile-interval` re-applies.
    Interval,
    /// Never re-applied unless the synthesis changes.
    Off,
}

/// What "ready" means for a resource without readiness checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// Ready once it exists (Eno's rule); a CRD once it is `Established`.
    #[default]
    Exists,
    /// The kstatus convention: `Ready`/`Available` conditions True, `observedGeneration`
    /// caught up.
    Kstatus,
}

/// Typed settings of one resource.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Settings {
    /// Lower groups are applied (and must be ready) first.
    pub readiness_group: i64,
    /// Explicit deletion group (lower deleted first on composition deletion).
    pub deletion_group: Option<i64>,
    /// Periodic re-apply.
    #[serde(with = "humantime_opt")]
    pub reconcile_interval: Option<Duration>,
    /// Create only.
    pub disable_updates: bool,
    /// Never touch.
    pub disable_reconciliation: bool,
    /// PUT instead of server-side apply.
    pub replace: bool,
    /// What composition deletion does.
    pub deletion_strategy: DeletionStrategy,
    /// Report reconciled even when reconciliation fails (and ready, without readiness
    /// checks): the resource's own `fail-open`; `None` takes the controller's `--fail-open`.
    /// In a [`crate::Step`] it is resolved (`Some`), `Some(false)` for a foreground delete.
    pub fail_open: Option<bool>,
    /// Drift detection mode.
    pub drift: Drift,
    /// `adopt: never`: an existing object enoki does not manage is refused, not adopted.
    pub adopt_never: bool,
    /// `prune: disabled`: never deleted, neither when dropped from the output nor on
    /// Composition deletion.
    pub prune_disabled: bool,
    /// Readiness when there are no CEL checks.
    pub health: Health,
    /// Cascading values that did not parse and were read as Eno reads them (the default),
    /// each naming the resource, the key and the value: reported, never blocking.
    #[serde(skip)]
    pub warnings: Vec<String>,
    /// Values Eno refuses when a synthesis is made but reads leniently from stored output (a
    /// `fail-open` that is not a Go bool): a synthesis carrying one fails; a stored one is
    /// read as absent.
    #[serde(skip)]
    pub refused: Vec<String>,
}

mod humantime_opt {
    use std::time::Duration;
    pub fn serialize<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&humantime::format_duration(*d).to_string()),
            None => s.serialize_none(),
        }
    }
}

/// The value and the key as written, `enoki.dev/` first.
fn spelled(map: &BTreeMap<String, String>, key: Key) -> Option<(&str, &'static str)> {
    if let Some(v) = map.get(key.enoki) {
        Some((v.as_str(), key.enoki))
    } else {
        map.get(key.eno).map(|v| (v.as_str(), key.eno))
    }
}

struct Lookup<'a> {
    resource: &'a ResourceKey,
    own: &'a BTreeMap<String, String>,
    composition: &'a BTreeMap<String, String>,
    warnings: std::cell::RefCell<Vec<String>>,
}

impl Lookup<'_> {
    /// The value and the key as written, from the resource or (if `cascade`) the composition.
    fn get(&self, key: Key, cascade: bool) -> Option<(&str, &'static str)> {
        spelled(self.own, key).or_else(|| {
            if cascade {
                spelled(self.composition, key)
            } else {
                None
            }
        })
    }

    fn error(&self, key: &str, message: impl Into<String>) -> PlanError {
        PlanError::Annotation {
            resource: self.resource.to_string(),
            key: key.to_string(),
            message: message.into(),
        }
    }

    /// One of a fixed set of values (`choices`, matched trimmed and case-insensitively; the
    /// resource's own annotation, else the composition's); `default` when absent, and, with a
    /// warning naming what was `expected`, for anything else (read as `read_as`, as Eno).
    fn choice<T: Copy>(
        &self,
        key: Key,
        choices: &[(&str, T)],
        (default, expected, read_as): (T, &str, &str),
    ) -> T {
        let Some((v, k)) = self.get(key, true) else {
            return default;
        };
        let lower = v.trim().to_ascii_lowercase();
        match choices.iter().find(|(name, _)| *name == lower) {
            Some((_, value)) => *value,
            None => self.lenient(k, v, expected, default, read_as),
        }
    }

    /// A cascading value that does not parse: read as `default`, as Eno does, and reported.
    /// The value is quoted up to [`QUOTED_VALUE`] characters: a warning costs the same
    /// whatever the annotation holds.
    fn lenient<T>(&self, key: &str, value: &str, expected: &str, default: T, read_as: &str) -> T {
        if let Ok(mut w) = self.warnings.try_borrow_mut() {
            let quoted = match value.char_indices().nth(QUOTED_VALUE) {
                Some((cut, _)) => format!("{:?}… ({} bytes)", &value[..cut], value.len()),
                None => format!("{value:?}"),
            };
            w.push(format!(
                "{}: {key}: {quoted} is not {expected}; read as {read_as} (Eno)",
                self.resource
            ));
        }
        default
    }

    /// Eno's rule for its spelling (`cascadeAnnotation(…) == "true"`): only the exact string
    /// `"true"` is true. enoki's spelling also reads `"True"`, `" true "`. Anything else that
    /// is not `"false"` is false and reported.
    fn bool(&self, key: Key, cascade: bool) -> bool {
        match self.get(key, cascade) {
            None => false,
            Some((v, k)) => {
                let read = if k.starts_with(crds::names::ENO_PREFIX) {
                    v.to_string()
                } else {
                    v.trim().to_ascii_lowercase()
                };
                match read.as_str() {
                    "true" => true,
                    "false" | "" => false,
                    _ => self.lenient(k, v, "\"true\" or \"false\"", false, "false"),
                }
            }
        }
    }

    /// Go's `strconv.ParseBool`, byte for byte (no trimming, no case folding beyond its own
    /// list), on the resource's own annotation only; a value it refuses is an error.
    fn go_bool(&self, key: Key, refused: &mut Vec<String>) -> Option<bool> {
        let (v, k) = self.get(key, false)?;
        match v {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
            "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
            _ => {
                refused.push(
                    self.error(
                        k,
                        format!(
                            "{v:?} is not a boolean (Go's strconv.ParseBool: 1, t, true, 0, f, false, …)"
                        ),
                    )
                    .to_string(),
                );
                None
            }
        }
    }

    fn int(&self, key: Key) -> Result<Option<i64>, PlanError> {
        match self.get(key, false) {
            None => Ok(None),
            Some((v, k)) => v
                .trim()
                .parse::<i64>()
                .map(Some)
                .map_err(|_| self.error(k, format!("{v:?} is not an integer"))),
        }
    }
}

/// The values of `deletion-strategy` (Eno's spellings).
/// Characters of an annotation value a warning quotes.
pub const QUOTED_VALUE: usize = 64;

const DELETION_STRATEGIES: &[(&str, DeletionStrategy)] = &[
    ("orphan", DeletionStrategy::Orphan),
    ("foreground", DeletionStrategy::Foreground),
    ("", DeletionStrategy::Background),
    ("background", DeletionStrategy::Background),
    ("delete", DeletionStrategy::Background),
];

/// The values of `drift`.
const DRIFTS: &[(&str, Drift)] = &[
    ("", Drift::Watch),
    ("watch", Drift::Watch),
    ("interval", Drift::Interval),
    ("off", Drift::Off),
];

/// The values of `adopt`, as whether adoption is refused.
const ADOPT_NEVER: &[(&str, bool)] = &[
    ("", false),
    ("always", false),
    ("true", false),
    ("never", true),
    ("false", true),
];

/// The values of `prune`, as whether pruning is disabled.
const PRUNE_DISABLED: &[(&str, bool)] = &[
    ("", false),
    ("enabled", false),
    ("true", false),
    ("disabled", true),
    ("false", true),
];

/// The values of `health`.
const HEALTHS: &[(&str, Health)] = &[
    ("", Health::Exists),
    ("exists", Health::Exists),
    ("kstatus", Health::Kstatus),
];

/// Parses the settings of one resource.
///
/// # Errors
/// [`PlanError::Annotation`] naming the resource and the key when a structural value (a
/// readiness or deletion group) does not parse; cascading values that do not parse are read
/// as Eno reads them and listed in [`Settings::warnings`].
pub fn parse(
    resource: &ResourceKey,
    own: &BTreeMap<String, String>,
    composition: &BTreeMap<String, String>,
) -> Result<Settings, PlanError> {
    parse_as(resource, &resource.kind, own, composition)
}

/// [`parse`] with the defaults of `kind` (a Patch takes its target kind's, as in Eno).
///
/// # Errors
/// As [`parse`].
pub fn parse_as(
    resource: &ResourceKey,
    kind: &str,
    own: &BTreeMap<String, String>,
    composition: &BTreeMap<String, String>,
) -> Result<Settings, PlanError> {
    let l = Lookup {
        resource,
        own,
        composition,
        warnings: std::cell::RefCell::new(Vec::new()),
    };
    let readiness_group = l
        .int(keys::READINESS_GROUP)?
        .unwrap_or(if INFRA_KINDS.contains(&kind) {
            INFRA_READINESS_GROUP
        } else {
            0
        });
    // Zero or unparseable: the shortest interval (the controller's
    // `--min-reconcile-interval`), as Eno clamps it.
    let reconcile_interval = l.get(keys::RECONCILE_INTERVAL, true).map(|(v, k)| {
        humantime::parse_duration(v.trim()).unwrap_or_else(|_| {
            l.lenient(k, v, "a duration", Duration::ZERO, "the minimum interval")
        })
    });
    let deletion_strategy = l.choice(
        keys::DELETION_STRATEGY,
        DELETION_STRATEGIES,
        (
            DeletionStrategy::Background,
            "\"orphan\" or \"foreground\"",
            "a background delete",
        ),
    );
    let drift = l.choice(
        keys::DRIFT,
        DRIFTS,
        (Drift::Watch, "watch, interval or off", "watch"),
    );
    let adopt_never = l.choice(
        keys::ADOPT,
        ADOPT_NEVER,
        (false, "\"never\" or \"always\"", "always"),
    );
    let prune_disabled = l.choice(
        keys::PRUNE,
        PRUNE_DISABLED,
        (false, "\"disabled\" or \"enabled\"", "enabled"),
    );
    let health = l.choice(
        keys::HEALTH,
        HEALTHS,
        (Health::Exists, "\"exists\" or \"kstatus\"", "exists"),
    );
    let mut refused = Vec::new();
    let fail_open = l.go_bool(keys::FAIL_OPEN, &mut refused);
    let mut settings = Settings {
        health,
        adopt_never,
        prune_disabled,
        readiness_group,
        deletion_group: l.int(keys::DELETION_GROUP)?,
        reconcile_interval,
        disable_updates: l.bool(keys::DISABLE_UPDATES, true),
        disable_reconciliation: l.bool(keys::DISABLE_RECONCILIATION, true),
        replace: l.bool(keys::REPLACE, true),
        deletion_strategy,
        fail_open,
        drift,
        warnings: Vec::new(),
        refused,
    };
    settings.warnings = l.warnings.into_inner();
    Ok(settings)
}

/// Every `readiness` / `readiness-<name>` annotation as `(check name, key as written, CEL)`,
/// sorted by name; `enoki.dev/` wins over `eno.azure.io/` for the same name.
pub fn readiness_annotations(own: &BTreeMap<String, String>) -> Vec<(String, String, String)> {
    let mut checks: BTreeMap<String, (String, String)> = BTreeMap::new();
    for prefix in [crds::names::ENO_PREFIX, crds::names::PREFIX] {
        for (k, v) in own {
            let Some(rest) = k.strip_prefix(prefix) else {
                continue;
            };
            let name = if rest == "readiness" {
                "default".to_string()
            } else if let Some(name) = rest.strip_prefix("readiness-") {
                if name == "group" || name.is_empty() {
                    continue;
                }
                name.to_string()
            } else {
                continue;
            };
            // enoki.dev/ comes second and overwrites the alias.
            checks.insert(name, (k.clone(), v.clone()));
        }
    }
    checks
        .into_iter()
        .map(|(name, (key, cel))| (name, key, cel))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn key(kind: &str) -> ResourceKey {
        ResourceKey {
            group: String::new(),
            kind: kind.into(),
            namespace: "ns".into(),
            name: "x".into(),
        }
    }
    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[rstest]
    #[case::enoki("enoki.dev/readiness-group", "3", 3)]
    #[case::eno_alias("eno.azure.io/readiness-group", "-2", -2)]
    fn readiness_group_is_read_from_either_prefix(
        #[case] k: &str,
        #[case] v: &str,
        #[case] want: i64,
    ) {
        let s = parse(&key("Deployment"), &map(&[(k, v)]), &BTreeMap::new()).unwrap();
        assert_eq!(s.readiness_group, want);
    }

    #[test]
    fn health_defaults_to_exists_cascades_and_names_a_bad_value() {
        let none = BTreeMap::new();
        let d = key("Deployment");
        assert_eq!(parse(&d, &none, &none).unwrap().health, Health::Exists);
        let comp = map(&[("enoki.dev/health", "kstatus")]);
        assert_eq!(parse(&d, &none, &comp).unwrap().health, Health::Kstatus);
        let own = map(&[("eno.azure.io/health", "exists")]);
        assert_eq!(parse(&d, &own, &comp).unwrap().health, Health::Exists);
        let s = parse(&d, &map(&[("enoki.dev/health", "green")]), &none).unwrap();
        assert_eq!(s.health, Health::Exists);
        assert!(
            s.warnings[0].contains("enoki.dev/health"),
            "{:?}",
            s.warnings
        );
    }

    #[test]
    fn enoki_prefix_wins_over_the_eno_alias() {
        let own = map(&[
            ("enoki.dev/readiness-group", "1"),
            ("eno.azure.io/readiness-group", "2"),
        ]);
        assert_eq!(
            parse(&key("Deployment"), &own, &BTreeMap::new())
                .unwrap()
                .readiness_group,
            1
        );
    }

    #[rstest]
    #[case::config_map("ConfigMap", -100)]
    #[case::crd("CustomResourceDefinition", -100)]
    #[case::namespace("Namespace", -100)]
    #[case::deployment("Deployment", 0)]
    fn infra_kinds_default_to_group_minus_100(#[case] kind: &str, #[case] want: i64) {
        assert_eq!(
            parse(&key(kind), &BTreeMap::new(), &BTreeMap::new())
                .unwrap()
                .readiness_group,
            want
        );
    }

    #[test]
    fn composition_annotations_are_defaults_for_cascading_keys() {
        let comp = map(&[
            ("eno.azure.io/deletion-strategy", "orphan"),
            ("enoki.dev/replace", "true"),
            ("enoki.dev/reconcile-interval", "1m"),
            ("enoki.dev/readiness-group", "7"),
        ]);
        let s = parse(&key("Deployment"), &BTreeMap::new(), &comp).unwrap();
        assert_eq!(s.deletion_strategy, DeletionStrategy::Orphan);
        assert!(s.replace);
        assert_eq!(s.reconcile_interval, Some(Duration::from_secs(60)));
        assert_eq!(s.readiness_group, 0, "readiness-group does not cascade");
        let own = map(&[("enoki.dev/replace", "false")]);
        assert!(
            !parse(&key("Deployment"), &own, &comp).unwrap().replace,
            "resource wins"
        );
    }

    /// Structural values are refused (Eno's strict validation at synthesis).
    #[rstest]
    #[case::group("enoki.dev/readiness-group", "one")]
    #[case::deletion_group("eno.azure.io/deletion-group", "1.5")]
    fn bad_structural_values_name_the_resource_and_key(#[case] k: &str, #[case] v: &str) {
        let err = parse(&key("Deployment"), &map(&[(k, v)]), &BTreeMap::new()).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("Deployment/ns/x") && msg.contains(k), "{msg}");
    }

    /// Cascading values are read as Eno reads them, with a warning naming resource and key.
    #[rstest]
    #[case::interval("enoki.dev/reconcile-interval", "soon")]
    #[case::flag("enoki.dev/disable-updates", "yes")]
    #[case::capitalised("eno.azure.io/disable-updates", "True")]
    #[case::padded("eno.azure.io/disable-updates", " true")]
    #[case::strategy("enoki.dev/deletion-strategy", "shred")]
    #[case::drift("eno.azure.io/drift", "sometimes")]
    #[case::adopt("enoki.dev/adopt", "maybe")]
    fn bad_cascading_values_are_read_as_eno_reads_them(#[case] k: &str, #[case] v: &str) {
        let s = parse(&key("Deployment"), &map(&[(k, v)]), &BTreeMap::new()).unwrap();
        assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
        assert!(
            s.warnings[0].contains("Deployment/ns/x") && s.warnings[0].contains(k),
            "{:?}",
            s.warnings
        );
        assert!(!s.disable_updates && !s.adopt_never);
        assert_eq!(s.deletion_strategy, DeletionStrategy::Background);
        assert_eq!(s.drift, Drift::Watch);
        // An interval that does not parse is the shortest (clamped by the controller).
        if k.ends_with("reconcile-interval") {
            assert_eq!(s.reconcile_interval, Some(Duration::ZERO));
        }
        // Zero is clamped too, silently.
        let z = parse(
            &key("D"),
            &map(&[("enoki.dev/reconcile-interval", "0s")]),
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(z.reconcile_interval, Some(Duration::ZERO));
        assert!(z.warnings.is_empty());
    }

    /// Eno's `cascadeAnnotation(comp, copy, "eno.azure.io/disable-reconciliation") == "true"`
    /// (`internal/resource/resource.go`): the exact string, nothing Go's ParseBool accepts.
    #[rstest]
    #[case("true", true)]
    #[case("True", false)]
    #[case("TRUE", false)]
    #[case(" true", false)]
    #[case("1", false)]
    #[case("false", false)]
    fn disable_reconciliation_is_the_exact_string_true(#[case] v: &str, #[case] on: bool) {
        let own = map(&[("eno.azure.io/disable-reconciliation", v)]);
        let s = parse(&key("ConfigMap"), &own, &BTreeMap::new()).unwrap();
        assert_eq!(s.disable_reconciliation, on, "{v:?}");
        // enoki's own spelling keeps reading any case and padding.
        let own = map(&[("enoki.dev/disable-reconciliation", v)]);
        let s = parse(&key("ConfigMap"), &own, &BTreeMap::new()).unwrap();
        let lenient = v.trim().eq_ignore_ascii_case("true");
        assert_eq!(s.disable_reconciliation, lenient, "{v:?}");
    }

    #[test]
    fn readiness_annotations_are_collected_by_name() {
        let own = map(&[
            ("enoki.dev/readiness", "true"),
            ("eno.azure.io/readiness-pods", "a"),
            ("enoki.dev/readiness-pods", "b"),
            ("enoki.dev/readiness-group", "1"),
        ]);
        let checks = readiness_annotations(&own);
        let names: Vec<_> = checks
            .iter()
            .map(|(n, _, c)| (n.as_str(), c.as_str()))
            .collect();
        assert_eq!(names, [("default", "true"), ("pods", "b")]);
    }
}
