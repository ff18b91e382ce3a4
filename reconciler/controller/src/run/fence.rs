//! Fencing: a replica that may have lost its Lease writes nothing.
//!
//! Leader election alone does not stop an old leader in time: a process that was paused
//! (SIGSTOP, a long GC-like stall, a frozen VM) past its Lease's expiry wakes up with reconciles
//! in flight and writes before its Lease manager notices that another replica took over.
//! With leader election on, every client enoki makes carries a [`FenceLayer`]: a write
//! (anything but GET/HEAD/OPTIONS/watch) is refused locally unless every Lease this process
//! holds was confirmed — read back with this replica as holder — recently enough that it
//! cannot have expired yet: confirmed at `renewTime`, valid until `renewTime + duration`, with
//! a quarter of the duration kept as margin, measured on the monotonic clock (which keeps
//! running while the process is stopped). Lease writes themselves pass, so renewals work.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use futures::future::BoxFuture;
use http::{Method, Request};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

/// The deadlines of the Leases this process holds (by Lease name).
#[derive(Default)]
pub struct Fence {
    until: Mutex<HashMap<String, Instant>>,
}

impl Fence {
    /// Whether writes may go out now: every held Lease is confirmed until later than now.
    pub fn open(&self) -> bool {
        let now = Instant::now();
        self.until
            .lock()
            .map(|u| u.values().all(|t| *t > now))
            .unwrap_or(false)
    }

    /// Records that `lease` is held until `until` (monotonic).
    fn confirm(&self, lease: &str, until: Instant) {
        if let Ok(mut u) = self.until.lock() {
            u.insert(lease.to_string(), until);
        }
    }

    /// Marks `lease` as held but unconfirmed (writes wait for the first confirmation).
    pub fn hold(&self, lease: &str) {
        self.confirm(lease, Instant::now());
    }

    /// Keeps `namespace/lease` confirmed while this process holds it: confirms it once
    /// before returning (so the controllers start with an open fence), then reads it every
    /// `duration / 8` and moves its deadline to `renewTime + duration - duration / 8`.
    pub async fn keep(
        self: &Arc<Self>,
        api: Api<Lease>,
        lease: String,
        identity: String,
        duration: Duration,
    ) {
        self.hold(&lease);
        self.confirm_from(&api, &lease, &identity, duration).await;
        let fence = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(duration / 8).await;
                fence.confirm_from(&api, &lease, &identity, duration).await;
            }
        });
    }

    /// Reads the Lease; when this replica holds it, moves its deadline.
    async fn confirm_from(
        &self,
        api: &Api<Lease>,
        lease: &str,
        identity: &str,
        duration: Duration,
    ) {
        if let Ok(l) = api.get(lease).await
            && let Some(spec) = l.spec
            && spec.holder_identity.as_deref() == Some(identity)
            && let Some(renewed) = spec.renew_time
        {
            let renewed = SystemTime::from(renewed.0);
            let expires = renewed + duration - duration / 8;
            let left = expires
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO);
            self.confirm(lease, Instant::now() + left);
        }
    }
}

/// The layer that puts a [`Fence`] in front of a client's writes.
#[derive(Clone)]
pub struct FenceLayer(pub Arc<Fence>);

impl<S> tower::Layer<S> for FenceLayer {
    type Service = Fenced<S>;
    fn layer(&self, inner: S) -> Fenced<S> {
        Fenced {
            inner,
            fence: self.0.clone(),
        }
    }
}

/// A client service whose writes pass only while the fence is open.
#[derive(Clone)]
pub struct Fenced<S> {
    inner: S,
    fence: Arc<Fence>,
}

/// The error of a fenced write.
#[derive(Debug, thiserror::Error)]
#[error(
    "fenced: this replica's Lease may have expired, so it writes nothing (another replica may lead)"
)]
pub struct FencedWrite;

/// Whether a request writes (Lease writes excepted: they are how the fence is held).
pub(crate) fn is_write(req: &Request<kube::client::Body>) -> bool {
    !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
        && !req.uri().path().contains("/leases/")
        && !req.uri().path().ends_with("/leases")
}

impl<S, R> tower::Service<Request<kube::client::Body>> for Fenced<S>
where
    S: tower::Service<Request<kube::client::Body>, Response = R>,
    S::Error: Into<tower::BoxError>,
    S::Future: Send + 'static,
    R: Send + 'static,
{
    type Response = R;
    type Error = tower::BoxError;
    type Future = BoxFuture<'static, Result<R, tower::BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<kube::client::Body>) -> Self::Future {
        if is_write(&req) && !self.fence.open() {
            return Box::pin(futures::future::ready(Err(FencedWrite.into())));
        }
        let fut = self.inner.call(req);
        Box::pin(async move { fut.await.map_err(Into::into) })
    }
}
