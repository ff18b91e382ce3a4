//! How every watch of the controller rides out an API server that goes away: a failing watch
//! is retried after 250–500 ms, doubling up to 2.5–5 s with jitter (the server is asked again
//! at least every 5 s while it is away; the backoff starts over after 30 s without an error),
//! and a watch that comes back to `410 Expired` — its resourceVersion compacted while the
//! server was away — is not an error to wait on: the watcher lists again at once. A change
//! made just after the server returns is seen within seconds, not after a second, longer
//! backoff. Every controller of enoki watches this way ([`controller`], [`dynamic_controller`],
//! [`recovering`]), kube's own `Controller::new` is not used.

use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::reflector;
use kube::runtime::utils::{ResetTimerBackoff, StreamBackoff};
use kube::runtime::watcher::{self, ExponentialBackoff, watcher};
use kube::runtime::{Controller, WatchStreamExt};

/// The backoff of a failing watch.
pub(crate) fn backoff() -> ResetTimerBackoff<ExponentialBackoff> {
    let exponential = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(250))
        // Jitter adds up to the delay itself: at most 5 s between two tries.
        .with_max_delay(Duration::from_millis(2500))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetTimerBackoff::new(exponential.into(), Duration::from_secs(30))
}

/// Whether a watch error is `410 Expired`/`Gone`: the watcher relists by itself.
fn expired<T>(item: &watcher::Result<T>) -> bool {
    match item {
        Err(watcher::Error::WatchError(status)) => status.code == 410,
        Err(
            watcher::Error::InitialListFailed(kube::Error::Api(s))
            | watcher::Error::WatchStartFailed(kube::Error::Api(s))
            | watcher::Error::WatchFailed(kube::Error::Api(s)),
        ) => s.code == 410,
        _ => false,
    }
}

/// `events` with [`backoff`] on errors, `410 Expired` passed over (logged) so the relist it
/// causes is not delayed.
pub(crate) fn recovering<S, T>(
    events: S,
) -> StreamBackoff<
    impl Stream<Item = watcher::Result<T>> + Send,
    ResetTimerBackoff<ExponentialBackoff>,
>
where
    S: Stream<Item = watcher::Result<T>> + Send,
    T: Send,
{
    let events = events.filter(|item| {
        let gone = expired(item);
        if gone {
            tracing::debug!("watch expired (410); listing again at once");
        }
        futures::future::ready(!gone)
    });
    StreamBackoff::new(events, backoff())
}

/// `make()`'s watch, started again (a fresh list) whenever `held` changes, so that the
/// cache it feeds gets the objects of the shards added to the set (the filters downstream
/// read the set at each event). A `held` whose sender is gone never changes again.
/// `listing_for` records the sets the watch was started for (before each start).
pub(crate) fn relisting<T: Send + 'static>(
    make: impl Fn() -> futures::stream::BoxStream<'static, T> + Send + 'static,
    held: super::shard::Held,
    listing_for: Option<std::sync::Arc<parking_lot::Mutex<super::shard::Listing>>>,
) -> impl Stream<Item = T> + Send {
    enum Next<T> {
        Item(Option<T>),
        Grown(bool),
    }
    let mut held = held;
    let record = move |held: &mut super::shard::Held| {
        let now = *held.borrow_and_update();
        if let Some(cell) = &listing_for {
            cell.lock().restarted(now);
        }
    };
    record(&mut held);
    let first = make();
    futures::stream::unfold(
        (first, Some(held), make, record),
        |(mut inner, mut held, make, record)| async move {
            loop {
                let next = {
                    let grown = async {
                        match held.as_mut() {
                            Some(h) => h.changed().await.is_ok(),
                            None => futures::future::pending().await,
                        }
                    };
                    tokio::select! {
                        item = inner.next() => Next::Item(item),
                        ok = grown => Next::Grown(ok),
                    }
                };
                match next {
                    Next::Item(item) => return item.map(|i| (i, (inner, held, make, record))),
                    Next::Grown(true) => {
                        tracing::debug!("shards added: listing again");
                        if let Some(h) = held.as_mut() {
                            record(h);
                        }
                        inner = make();
                    }
                    Next::Grown(false) => held = None,
                }
            }
        },
    )
}

/// A `Controller` for `api` whose watch recovers as every other watch of the controller
/// ([`recovering`]), and whose trigger stream backs off as briefly ([`backoff`]; kube's
/// default waits up to 30 s after a failing watch before it looks again).
pub(crate) fn controller<K>(api: kube::Api<K>, wc: watcher::Config) -> Controller<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = recovering(watcher(api, wc))
        .reflect(writer)
        .applied_objects()
        .boxed();
    Controller::for_stream(stream, reader).trigger_backoff(backoff())
}

/// [`controller`] for objects of a kind known at run time (`DynamicObject`s of `ar`).
pub(crate) fn dynamic_controller(
    api: kube::Api<kube::api::DynamicObject>,
    wc: watcher::Config,
    ar: kube::api::ApiResource,
) -> Controller<kube::api::DynamicObject> {
    let writer = reflector::store::Writer::<kube::api::DynamicObject>::new(ar.clone());
    let reader = writer.as_reader();
    let stream = recovering(watcher(api, wc))
        .reflect(writer)
        .applied_objects()
        .boxed();
    Controller::for_stream_with(stream, reader, ar).trigger_backoff(backoff())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::utils::Backoff;

    #[test]
    fn a_failing_watch_is_retried_within_five_seconds_and_expired_is_no_error() {
        let mut b = backoff();
        let waits: Vec<Duration> = (0..12).map(|_| b.next().unwrap()).collect();
        assert!(
            waits.iter().all(|w| *w <= Duration::from_secs(5)),
            "{waits:?}"
        );
        b.reset();
        assert!(b.next().unwrap() <= Duration::from_millis(500));
        let gone = kube::core::Status {
            code: 410,
            ..Default::default()
        };
        let expired_item: watcher::Result<()> = Err(watcher::Error::WatchError(Box::new(gone)));
        assert!(expired(&expired_item));
        let other: watcher::Result<()> = Err(watcher::Error::NoResourceVersion);
        assert!(!expired(&other));
        assert!(!expired(&Ok(())));
    }
}
