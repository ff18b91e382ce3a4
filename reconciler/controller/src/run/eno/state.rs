//! What the bridge's controllers share: the engine's context, and why each Eno Synthesizer
//! has no mirror.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::run::Context;

/// Field manager of every mirror write.
pub(crate) const FIELD_MANAGER: &str = "enoki-eno-api";

/// The bridge's state: the engine's context, and why each Eno Synthesizer has no mirror.
pub(crate) struct Bridge {
    pub(crate) ctx: Arc<Context>,
    /// Eno Synthesizer name → why it has no module (Compositions on it say so).
    pub(super) unresolved: Mutex<BTreeMap<String, String>>,
}

impl Bridge {
    /// Why the Eno Synthesizer `name` has no module, if it has none.
    pub(crate) fn unresolved(&self, name: &str) -> Option<String> {
        self.unresolved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    pub(super) fn set_unresolved(&self, name: &str, why: Option<String>) {
        let mut map = self.unresolved.lock().unwrap_or_else(|e| e.into_inner());
        match why {
            Some(why) => map.insert(name.to_string(), why),
            None => map.remove(name),
        };
    }
}
