//! Charts rendered again when the target cluster serves other API versions (or another
//! Kubernetes version): every `--capabilities-refresh`, each Composition whose current
//! synthesis took the target's capabilities (input revision `enoki.dev/capabilities`) is
//! compared with what discovery says now, and one rendered for other capabilities is woken.
//! Its pass sees the changed input and synthesizes again (identical output keeps its slices).

use std::sync::Arc;

use kube::runtime::reflector::ObjectRef;

use super::super::capabilities::CAPABILITIES_REVISION_KEY;
use super::super::context::Context;
use crds::Composition;

/// Runs until aborted.
pub(super) async fn wake_on_capabilities(ctx: Arc<Context>) {
    loop {
        tokio::time::sleep(ctx.opts.capabilities_refresh).await;
        let taking: Vec<(ObjectRef<Composition>, String)> = ctx
            .compositions
            .state()
            .iter()
            .filter_map(|c| Some((ObjectRef::from_obj(c.as_ref()), rendered_for(c)?)))
            .collect();
        if taking.is_empty() {
            continue;
        }
        let now = match ctx.target.capabilities.get(&ctx.target.client).await {
            Ok(now) => now,
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the target cluster's discovery");
                continue;
            }
        };
        for (comp, digest) in taking {
            if digest != now.digest {
                tracing::debug!(composition = %comp, "rendered for other capabilities; woken");
                ctx.watches.wake(comp);
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
