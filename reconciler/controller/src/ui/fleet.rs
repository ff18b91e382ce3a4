//! The fleet as `enoki ui` shows it: every Composition with one state word (the stuck ones
//! first), the counts per state, the Synthesizers with how far their current generation has
//! reached, and the Symphonies. Pure: built from the watch caches.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crds::names::{conditions, rollout};
use crds::{Composition, StatusWord, Symphony, Synthesizer};

/// How long a Composition may be not Ready (and not failed) before it counts as stuck.
pub const STUCK_AFTER_SECONDS: i64 = 300;

/// One Composition of the fleet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub namespace: String,
    pub name: String,
    pub synthesizer: String,
    /// `ready`, `waiting`, `failed`, `suspended` or `deleting`.
    pub state: &'static str,
    /// `status.simplified.status` (empty before the controller's first pass).
    pub status: String,
    /// The most relevant error or the Ready condition's message.
    pub message: String,
    /// Since when it is in its Ready state (RFC 3339), if known.
    pub since: String,
    /// Not Ready for longer than [`STUCK_AFTER_SECONDS`], or failed.
    pub stuck: bool,
    /// The Synthesizer generation its current synthesis ran (None before the first).
    pub synthesizer_generation: Option<i64>,
}

/// One Synthesizer: its generation and how many Compositions run it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SynthRow {
    pub name: String,
    pub generation: i64,
    /// `sha256:…` of the module the controller compiled last.
    pub module_digest: String,
    /// The Ready condition (`True`, `False`, `Unknown`, or empty).
    pub ready: String,
    pub message: String,
    /// Compositions that use it (in the page's scope; not suspended or being deleted).
    pub compositions: usize,
    /// Of those, the ones whose current synthesis ran the generation rolling out (its
    /// rollout's revision when it has one, else its own).
    pub updated: usize,
    /// `complete`, `rolling out` or `unused`; with a rollout, its revision first, and its
    /// phase (and reason) when it is paused, halted or undone: `revision 3: halted
    /// (WaveFailed)`.
    pub rollout: String,
}

/// One Symphony.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SymphonyRow {
    pub namespace: String,
    pub name: String,
    pub variations: usize,
    pub ready: bool,
}

/// The whole fleet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fleet {
    pub compositions: Vec<Row>,
    /// Compositions per state.
    pub counts: BTreeMap<&'static str, usize>,
    pub synthesizers: Vec<SynthRow>,
    pub symphonies: Vec<SymphonyRow>,
}

/// The fleet at `now` (stuck first, then failed, waiting, the rest; by namespace and name).
pub fn fleet(
    comps: &[&Composition],
    synths: &[&Synthesizer],
    symphonies: &[&Symphony],
    now: Timestamp,
) -> Fleet {
    let mut rows: Vec<Row> = comps.iter().map(|c| row(c, now)).collect();
    rows.sort_by(|a, b| {
        (!a.stuck, rank(a.state), &a.namespace, &a.name).cmp(&(
            !b.stuck,
            rank(b.state),
            &b.namespace,
            &b.name,
        ))
    });
    let mut counts = BTreeMap::new();
    for s in ["ready", "waiting", "failed", "suspended", "deleting"] {
        counts.insert(s, 0);
    }
    for r in &rows {
        *counts.entry(r.state).or_insert(0) += 1;
    }
    let mut synthesizers: Vec<SynthRow> = synths.iter().map(|s| synth_row(s, &rows)).collect();
    // The ones in use first.
    synthesizers.sort_by(|a, b| (b.compositions, &a.name).cmp(&(a.compositions, &b.name)));
    let mut symphonies: Vec<SymphonyRow> = symphonies.iter().map(|s| symphony_row(s)).collect();
    symphonies.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Fleet {
        compositions: rows,
        counts,
        synthesizers,
        symphonies,
    }
}

/// The order of states in the list: what needs a look first.
fn rank(state: &str) -> u8 {
    match state {
        "failed" => 0,
        "waiting" => 1,
        "deleting" => 2,
        "suspended" => 3,
        _ => 4,
    }
}

/// The state word of a Composition.
pub fn state_of(c: &Composition) -> &'static str {
    if c.metadata.deletion_timestamp.is_some() {
        return "deleting";
    }
    if c.spec.suspend {
        return "suspended";
    }
    let word = c
        .status
        .as_ref()
        .and_then(|s| s.simplified.as_ref())
        .map(|s| &s.status);
    match word {
        Some(StatusWord::Ready) => "ready",
        Some(StatusWord::Suspended) => "suspended",
        Some(StatusWord::Deleting) => "deleting",
        Some(
            StatusWord::Failed
            | StatusWord::SynthesisBackoff
            | StatusWord::MissingInputs
            | StatusWord::MissingSynthesizer
            | StatusWord::MismatchedInputs,
        ) => "failed",
        _ => "waiting",
    }
}

fn row(c: &Composition, now: Timestamp) -> Row {
    let status = c.status.clone().unwrap_or_default();
    let ready = status
        .conditions
        .iter()
        .find(|k| k.type_ == conditions::READY);
    let simplified = status.simplified.as_ref();
    let message = simplified
        .and_then(|s| s.error.clone())
        .filter(|e| !e.is_empty())
        .or_else(|| ready.map(|k| k.message.clone()))
        .unwrap_or_default();
    // Since Ready last changed, or since creation when it never had one (as the stuck metric).
    let since = ready
        .map(|k| k.last_transition_time.0)
        .or_else(|| c.metadata.creation_timestamp.as_ref().map(|t| t.0));
    let state = state_of(c);
    let waited = since.map_or(0, |t| now.as_second() - t.as_second());
    let stuck = state == "failed" || (state == "waiting" && waited > STUCK_AFTER_SECONDS);
    Row {
        namespace: c.metadata.namespace.clone().unwrap_or_default(),
        name: c.metadata.name.clone().unwrap_or_default(),
        synthesizer: c.spec.synthesizer.name.clone(),
        state,
        status: simplified.map(|s| s.status.to_string()).unwrap_or_default(),
        message,
        since: since.map(|t| t.to_string()).unwrap_or_default(),
        stuck,
        synthesizer_generation: status
            .current_synthesis
            .as_ref()
            .and_then(|s| s.observed_synthesizer_generation),
    }
}

fn synth_row(s: &Synthesizer, rows: &[Row]) -> SynthRow {
    let name = s.metadata.name.clone().unwrap_or_default();
    let generation = s.metadata.generation.unwrap_or_default();
    let status = s.status.clone().unwrap_or_default();
    let ready = status
        .conditions
        .iter()
        .find(|k| k.type_ == conditions::READY);
    // Suspended and deleting Compositions take no new synthesis: not counted.
    let users: Vec<&Row> = rows
        .iter()
        .filter(|r| r.synthesizer == name && !matches!(r.state, "suspended" | "deleting"))
        .collect();
    // A synthesis records the generation of the revision it ran; a `rollout`-only edit
    // makes no revision.
    let ro = status.rollout.as_ref();
    let target = ro.map_or(generation, |r| r.revision.generation);
    let updated = users
        .iter()
        .filter(|r| r.synthesizer_generation == Some(target))
        .count();
    let reached = match (users.len(), updated) {
        (0, _) => "unused".to_string(),
        (n, u) if n == u => "complete".to_string(),
        _ => "rolling out".to_string(),
    };
    let stopped = [rollout::PAUSED, rollout::HALTED, rollout::UNDONE];
    SynthRow {
        rollout: match ro {
            None => reached,
            Some(r) if stopped.contains(&r.phase.as_str()) => {
                let reason = r.reason.as_ref().map(|x| format!(" ({x})"));
                let (n, phase) = (r.revision.number, r.phase.to_lowercase());
                format!("revision {n}: {phase}{}", reason.unwrap_or_default())
            }
            Some(r) => format!("revision {}: {reached}", r.revision.number),
        },
        name,
        generation,
        module_digest: status.module_digest.unwrap_or_default(),
        ready: ready.map(|k| k.status.clone()).unwrap_or_default(),
        message: ready.map(|k| k.message.clone()).unwrap_or_default(),
        compositions: users.len(),
        updated,
    }
}

fn symphony_row(s: &Symphony) -> SymphonyRow {
    let ready = s.status.as_ref().is_some_and(|st| {
        st.conditions
            .iter()
            .any(|k| k.type_ == conditions::READY && k.status == "True")
    });
    SymphonyRow {
        namespace: s.metadata.namespace.clone().unwrap_or_default(),
        name: s.metadata.name.clone().unwrap_or_default(),
        variations: s.spec.variations.len(),
        ready,
    }
}

#[cfg(test)]
mod tests;
