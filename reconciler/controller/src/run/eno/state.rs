//! What the bridge's controllers share: the engine's context, and why each Eno Synthesizer
//! has no mirror.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::run::Context;

/// Field manager of every mirror write.
pub(crate) const FIELD_MANAGER: &str = "enoki-eno-api";

/// Objects whose last reason is remembered, at most.
const SAID_BOUND: usize = 10_000;

/// The bridge's state: the engine's context, why each Eno Synthesizer has no mirror, what
/// each blocked object was last told (an Event only when it changes), and how often each
/// Synthesizer's module failed to resolve (its backoff).
#[derive(Default)]
pub(crate) struct Memory {
    /// Eno Synthesizer name → why it has no module (Compositions on it say so).
    unresolved: BTreeMap<String, String>,
    /// Object UID → the reason last told in an Event.
    said: BTreeMap<String, String>,
    /// Eno Synthesizer name → failed resolutions in a row.
    attempts: BTreeMap<String, u32>,
}

/// The bridge's state.
pub(crate) struct Bridge {
    pub(crate) ctx: Arc<Context>,
    pub(super) memory: Mutex<Memory>,
}

impl Bridge {
    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why the Eno Synthesizer `name` has no module, if it has none.
    pub(crate) fn unresolved(&self, name: &str) -> Option<String> {
        self.memory().unresolved.get(name).cloned()
    }

    /// Records why `name` has no module (`None`: it has one, or is gone); with a reason, the
    /// failures in a row (for its backoff), which it returns.
    pub(super) fn set_unresolved(&self, name: &str, why: Option<String>) -> u32 {
        let mut m = self.memory();
        match why {
            Some(why) => {
                m.unresolved.insert(name.to_string(), why);
                let n = m.attempts.entry(name.to_string()).or_default();
                *n = n.saturating_add(1);
                *n
            }
            None => {
                m.unresolved.remove(name);
                m.attempts.remove(name);
                0
            }
        }
    }

    /// Whether `why` is new for the object `uid` (then it is remembered as told).
    pub(super) fn say(&self, uid: &str, why: &str) -> bool {
        let mut m = self.memory();
        if m.said.get(uid).is_some_and(|w| w == why) {
            return false;
        }
        if m.said.len() >= SAID_BOUND {
            // Objects deleted while blocked are never forgotten one by one: one goes.
            m.said.pop_first();
        }
        m.said.insert(uid.to_string(), why.to_string());
        true
    }

    /// Forgets what the object `uid` was told.
    pub(super) fn forget(&self, uid: &str) {
        self.memory().said.remove(uid);
    }
}
