//! What the watches of labelled (managed) objects share: the label, the metadata they keep,
//! and how a refused watch shows.

use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;

/// Metadata of a managed object as the cache holds it.
pub type Meta = PartialObjectMeta<DynamicObject>;

/// Whether a watch failed because enoki may not list or watch the kind.
pub(super) fn forbidden_watch(e: &watcher::Error) -> bool {
    matches!(e,
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) if s.code == 403)
}

/// The label on every object enoki manages (its value: the owning Composition's UID).
pub(super) fn managed_label() -> &'static str {
    crds::names::annotations::MANAGED_BY.enoki
}
