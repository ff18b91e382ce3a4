//! A Symphony's status, rolled up from the Compositions of its non-optional variations. Pure.
//!
//! The times (`synthesized`, `reconciled`, `ready`) are Eno's: each is set once every such
//! Composition got there. The conditions are what kstatus, Flux and Argo CD read:
//! - `Synthesized`: every one has a current synthesis of its newest spec;
//! - `Ready`: every one is `Ready=True` for its newest generation;
//! - `Reconciling`: not Ready and nothing failed (names the first Compositions waited for);
//! - `Stalled`: one of them failed to synthesize its newest spec (`Stalled=True` there), the
//!   Symphony's own spec is refused, or its variations form a `dependsOn` cycle.

use std::collections::BTreeMap;

use crds::names::{conditions, reasons};
use crds::{Composition, Symphony, SymphonyStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

use reconciler_core::condition::{holds, set_condition};

/// The status: each time once every non-optional variation's Composition got there, and the
/// conditions that roll them up. `composition_name` names a variation's Composition (by the
/// Symphony's name and the synthesizer's); `cycle`: variations caught in a `dependsOn` cycle
/// (not created or changed: the Symphony is Stalled).
pub(super) fn roll_up(
    sym: &Symphony,
    current: &BTreeMap<String, Composition>,
    composition_name: impl Fn(&str, &str) -> String,
    cycle: &[String],
) -> SymphonyStatus {
    let name = sym.name_any();
    let required: Vec<(String, Option<&Composition>)> = sym
        .spec
        .variations
        .iter()
        .filter(|v| !v.optional)
        .map(|v| {
            let n = composition_name(&name, &v.synthesizer.name);
            let c = current.get(&n);
            (n, c)
        })
        .collect();
    let latest = |pick: &dyn Fn(&crds::Synthesis) -> Option<Time>| -> Option<Time> {
        let mut latest: Option<Time> = None;
        for (_, c) in &required {
            let c = (*c)?;
            if c.metadata.deletion_timestamp.is_some() {
                return None;
            }
            let s = c.status.as_ref()?.current_synthesis.as_ref()?;
            if s.observed_composition_generation != c.metadata.generation {
                return None;
            }
            let t = pick(s)?;
            if latest.as_ref().is_none_or(|l| l.0 < t.0) {
                latest = Some(t);
            }
        }
        latest
    };
    let mut status = SymphonyStatus {
        observed_generation: sym.metadata.generation,
        synthesized: latest(&|s| s.synthesized.clone()),
        reconciled: latest(&|s| s.reconciled.clone()),
        ready: latest(&|s| s.ready.clone()),
        conditions: sym
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default(),
    };
    set_conditions(&mut status, &required, sym.metadata.generation);
    if !cycle.is_empty() {
        let message = format!(
            "variations {} form a dependsOn cycle and are not created or changed",
            cycle.join(", ")
        );
        let generation = sym.metadata.generation;
        let c = &mut status.conditions;
        let reason = reasons::CIRCULAR_DEPENDENCY;
        set_condition(c, conditions::STALLED, true, reason, &message, generation);
        set_condition(
            c,
            conditions::RECONCILING,
            false,
            reason,
            &message,
            generation,
        );
        set_condition(c, conditions::READY, false, reason, &message, generation);
    }
    status
}

/// A Composition's condition of `type_`, when its status speaks for its newest generation.
fn current<'a>(c: &'a Composition, type_: &str) -> Option<&'a Condition> {
    let st = c.status.as_ref()?;
    if st.observed_generation != c.metadata.generation || c.metadata.deletion_timestamp.is_some() {
        return None;
    }
    st.conditions.iter().find(|x| x.type_ == type_)
}

fn is(c: &Composition, type_: &str) -> bool {
    current(c, type_).is_some_and(holds)
}

/// The first few names of a list, and how many more.
fn listed(names: &[String]) -> String {
    let first: Vec<&str> = names.iter().take(3).map(String::as_str).collect();
    match names.len().saturating_sub(first.len()) {
        0 => first.join(", "),
        more => format!("{} and {more} more", first.join(", ")),
    }
}

fn set_conditions(
    status: &mut SymphonyStatus,
    required: &[(String, Option<&Composition>)],
    generation: Option<i64>,
) {
    let mut missing = Vec::new();
    let (mut unsynthesized, mut unready, mut failed) = (Vec::new(), Vec::new(), Vec::new());
    for (name, c) in required {
        let Some(c) = c else {
            missing.push(name.clone());
            continue;
        };
        if is(c, conditions::STALLED) {
            let why = current(c, conditions::STALLED).map_or("", |x| x.reason.as_str());
            failed.push(format!("{name} ({why})"));
        }
        if !is(c, conditions::SYNTHESIZED) {
            unsynthesized.push(name.clone());
        }
        if !is(c, conditions::READY) {
            unready.push(name.clone());
        }
    }
    unsynthesized.splice(0..0, missing.iter().cloned());
    unready.splice(0..0, missing);
    let c = &mut status.conditions;
    let synthesized = unsynthesized.is_empty();
    let (reason, message) = if synthesized {
        (reasons::SYNTHESIS_SUCCEEDED, String::new())
    } else {
        (
            reasons::SYNTHESIZING,
            format!("waiting for {}", listed(&unsynthesized)),
        )
    };
    set_condition(
        c,
        conditions::SYNTHESIZED,
        synthesized,
        reason,
        &message,
        generation,
    );
    let ready = unready.is_empty();
    let (reason, message) = if ready {
        (reasons::ALL_READY, "every Composition is ready".to_string())
    } else {
        (
            reasons::NOT_READY,
            format!("waiting for {}", listed(&unready)),
        )
    };
    set_condition(c, conditions::READY, ready, reason, &message, generation);
    set_stalled(c, &failed, (!ready).then_some(&unready[..]), generation);
}

/// `Stalled` (a Composition failed: `failed`) and `Reconciling` (not stalled, and the
/// Compositions `unready` are not Ready yet).
fn set_stalled(
    c: &mut Vec<Condition>,
    failed: &[String],
    unready: Option<&[String]>,
    generation: Option<i64>,
) {
    let stalled = !failed.is_empty();
    let message = if stalled {
        format!("failed: {}", listed(failed))
    } else {
        String::new()
    };
    let reason = if stalled {
        reasons::COMPOSITION_FAILED
    } else {
        reasons::SYNTHESIS_SUCCEEDED
    };
    set_condition(
        c,
        conditions::STALLED,
        stalled,
        reason,
        &message,
        generation,
    );
    let (reconciling, message) = match unready {
        Some(unready) if !stalled => (true, format!("waiting for {}", listed(unready))),
        _ => (false, String::new()),
    };
    set_condition(
        c,
        conditions::RECONCILING,
        reconciling,
        reasons::NOT_READY,
        &message,
        generation,
    );
}

/// The conditions of a Symphony whose spec is refused (nothing is created or changed).
pub(super) fn refused(sym: &Symphony, message: &str) -> SymphonyStatus {
    let mut status = sym.status.clone().unwrap_or_default();
    status.observed_generation = sym.metadata.generation;
    let generation = sym.metadata.generation;
    let c = &mut status.conditions;
    set_condition(
        c,
        conditions::STALLED,
        true,
        reasons::INVALID_SPEC,
        message,
        generation,
    );
    set_condition(
        c,
        conditions::RECONCILING,
        false,
        reasons::INVALID_SPEC,
        message,
        generation,
    );
    set_condition(
        c,
        conditions::READY,
        false,
        reasons::INVALID_SPEC,
        message,
        generation,
    );
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crds::{CompositionStatus, SymphonySpec, SynthesizerRef, Variation};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn sym(variations: &[&str]) -> Symphony {
        let mut s = Symphony::new(
            "stack",
            SymphonySpec {
                variations: variations
                    .iter()
                    .map(|v| Variation {
                        synthesizer: SynthesizerRef { name: (*v).into() },
                        ..Variation::default()
                    })
                    .collect(),
                ..SymphonySpec::default()
            },
        );
        s.metadata.generation = Some(3);
        s
    }

    fn comp(name: &str, generation: i64, conds: &[(&str, bool, &str)]) -> Composition {
        let mut st = CompositionStatus {
            observed_generation: Some(generation),
            ..CompositionStatus::default()
        };
        for (t, v, r) in conds {
            set_condition(&mut st.conditions, t, *v, r, "", Some(generation));
        }
        Composition {
            metadata: ObjectMeta {
                name: Some(name.into()),
                generation: Some(generation),
                ..ObjectMeta::default()
            },
            spec: crds::CompositionSpec::default(),
            status: Some(st),
        }
    }

    fn name(symphony: &str, synthesizer: &str) -> String {
        format!("{symphony}-{synthesizer}")
    }

    fn get<'a>(st: &'a SymphonyStatus, t: &str) -> (&'a str, &'a str) {
        st.conditions
            .iter()
            .find(|c| c.type_ == t)
            .map(|c| (c.status.as_str(), c.reason.as_str()))
            .unwrap_or_default()
    }

    #[test]
    fn every_composition_ready_makes_the_symphony_ready() {
        let ok = [
            (conditions::SYNTHESIZED, true, "S"),
            (conditions::READY, true, "R"),
            (conditions::STALLED, false, "S"),
        ];
        let current: BTreeMap<_, _> = [("stack-a", &ok), ("stack-b", &ok)]
            .into_iter()
            .map(|(n, c)| (n.to_string(), comp(n, 2, c)))
            .collect();
        let st = roll_up(&sym(&["a", "b"]), &current, name, &[]);
        assert_eq!(get(&st, conditions::READY).0, "True");
        assert_eq!(get(&st, conditions::SYNTHESIZED).0, "True");
        assert_eq!(get(&st, conditions::RECONCILING).0, "False");
        assert_eq!(get(&st, conditions::STALLED).0, "False");
        assert_eq!(st.conditions[0].observed_generation, Some(3));
    }

    #[test]
    fn a_missing_or_failed_composition_is_named() {
        let failed = [
            (conditions::SYNTHESIZED, false, "Trap"),
            (conditions::STALLED, true, "Trap"),
        ];
        let current: BTreeMap<_, _> = [("stack-a".to_string(), comp("stack-a", 1, &failed))]
            .into_iter()
            .collect();
        let st = roll_up(&sym(&["a", "b"]), &current, name, &[]);
        assert_eq!(
            get(&st, conditions::STALLED),
            ("True", reasons::COMPOSITION_FAILED)
        );
        assert_eq!(get(&st, conditions::RECONCILING).0, "False");
        let ready = st.conditions.iter().find(|c| c.type_ == conditions::READY);
        assert!(ready.is_some_and(|c| c.message.contains("stack-b") && c.status == "False"));
        // Without the failure the Symphony is in progress.
        let st = roll_up(&sym(&["a", "b"]), &BTreeMap::new(), name, &[]);
        assert_eq!(get(&st, conditions::RECONCILING).0, "True");
        // A dependsOn cycle: Stalled, whatever the Compositions say.
        let st = roll_up(&sym(&["a", "b"]), &BTreeMap::new(), name, &["a".into()]);
        assert_eq!(
            get(&st, conditions::STALLED),
            ("True", reasons::CIRCULAR_DEPENDENCY)
        );
        assert_eq!(get(&st, conditions::RECONCILING).0, "False");
    }
}
