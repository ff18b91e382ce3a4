//! Charts rendered again when the target cluster serves other API versions (or another
//! Kubernetes version): every `--capabilities-refresh`, each Composition whose current
//! synthesis took the target's capabilities (input revision `enoki.dev/capabilities`) is
//! compared with what discovery says now, and one rendered for other capabilities is woken
//! once for them. Its pass sees the changed input and synthesizes again under the rollout
//! cooldown (identical output keeps its slices); one that cannot (blocked, failing) is not
//! woken again for the same capabilities.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kube::runtime::reflector::ObjectRef;

use super::super::capabilities::CAPABILITIES_REVISION_KEY;
use super::super::context::Context;
use crds::Composition;

/// Runs until aborted.
pub(super) async fn wake_on_capabilities(ctx: Arc<Context>) {
    // Composition -> the capabilities it was last woken for.
    let mut woken: HashMap<ObjectRef<Composition>, String> = HashMap::new();
    loop {
        tokio::time::sleep(ctx.opts.synthesis.capabilities_refresh).await;
        let taking: Vec<(ObjectRef<Composition>, String)> = ctx
            .caches
            .compositions
            .state()
            .iter()
            .filter_map(|c| Some((ObjectRef::from_obj(c.as_ref()), rendered_for(c)?)))
            .collect();
        if taking.is_empty() {
            continue;
        }
        let now = match ctx
            .clusters
            .target()
            .capabilities
            .get(&ctx.clusters.target().client)
            .await
        {
            Ok(now) => now,
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the target cluster's discovery");
                continue;
            }
        };
        let live: HashSet<&ObjectRef<Composition>> = taking.iter().map(|(r, _)| r).collect();
        woken.retain(|r, _| live.contains(r));
        for (comp, digest) in &taking {
            let again = woken.get(comp) == Some(&now.digest);
            if *digest != now.digest && !again {
                tracing::debug!(composition = %comp, "rendered for other capabilities; woken");
                woken.insert(comp.clone(), now.digest.clone());
                ctx.caches.watches.wake(comp.clone());
            }
        }
    }
}

/// The capabilities digest `c`'s current synthesis was rendered for, when it took them and
/// reacts to input changes (not `ignore-side-effects: "true"`).
fn rendered_for(c: &Composition) -> Option<String> {
    if super::super::composition::ignores_side_effects(c) || c.metadata.deletion_timestamp.is_some()
    {
        return None;
    }
    c.status
        .as_ref()?
        .current_synthesis
        .as_ref()?
        .input_revisions
        .iter()
        .find(|r| r.key == CAPABILITIES_REVISION_KEY)?
        .digest
        .clone()
}
