//! With `--shards`, the inputs a changed Composition of a held shard binds are wanted by the
//! input caches before its first pass, so a copy the input watch brought serves that pass
//! (see `watches::arrivals`). The events that pass here are those `composition_change` lets
//! through: its creation, and changes of its generation (spec), labels, annotations,
//! finalizers (the one enoki adds too) or deletion; and its listing when this replica takes
//! its shard over or relists (unless an event of it passed here within the last hour and it
//! did not change since: kube-runtime's predicate cache keeps an hour). Once a pass of it
//! has started here, a name kept whole by an input table it reads through is not wanted
//! again.

use std::sync::Arc;

use futures::StreamExt;
use kube::ResourceExt;

use super::super::tenancy::ref_namespace;
use super::super::watches::Watches;
use crds::Composition;

/// The Composition events of a stack's controller.
type Events =
    futures::stream::BoxStream<'static, Result<Composition, kube::runtime::watcher::Error>>;

/// The Composition events, each Composition's bound inputs wanted by `watches` as it passes.
pub(super) fn first_reads(events: Events, watches: Arc<Watches>, no_cross: bool) -> Events {
    if !watches.expects_reads() {
        return events;
    }
    events
        .inspect(move |c| {
            if let Ok(c) = c {
                let uid = c.metadata.uid.as_deref();
                watches.expect_reads(uid, bound_inputs(c, no_cross).into_iter());
            }
        })
        .boxed()
}

/// The inputs `c` binds that its first pass reads from the input cache, by namespace and
/// name: none when it is being deleted, suspended or reads as a ServiceAccount of its own; under
/// `--no-cross-namespace-refs`, only those in its namespace.
fn bound_inputs(c: &Composition, no_cross: bool) -> Vec<(String, &str)> {
    let own_account = c
        .spec
        .service_account_name
        .as_deref()
        .is_some_and(|s| !s.is_empty());
    if c.metadata.deletion_timestamp.is_some() || own_account || c.spec.suspend {
        return Vec::new();
    }
    let home = c.namespace().unwrap_or_default();
    c.spec
        .bindings
        .iter()
        .map(|b| {
            let ns = b.resource.namespace.as_deref();
            (ref_namespace(&home, ns), b.resource.name.as_str())
        })
        .filter(|(ns, _)| !no_cross || *ns == home)
        .collect()
}
