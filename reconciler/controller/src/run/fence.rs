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
use std::sync::Arc;

use parking_lot::Mutex;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use futures::future::BoxFuture;
use http::{Method, Request};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

/// How long a write waits for a closed fence to open before it fails ([`FencedWrite`]).
pub const FENCE_WAIT: Duration = Duration::from_secs(5);

/// The deadlines of the Leases this process holds (by Lease name).
#[derive(Default)]
pub struct Fence {
    until: Mutex<HashMap<String, Instant>>,
    /// A Lease was lost: closed for good.
    lost: std::sync::atomic::AtomicBool,
}

impl Fence {
    /// Whether writes may go out now: every held Lease is confirmed until later than now.
    pub fn open(&self) -> bool {
        let now = Instant::now();
        !self.lost.load(std::sync::atomic::Ordering::Relaxed)
            && self.until.lock().values().all(|t| *t > now)
    }

    /// Waits until writes may go out; whether they may. A Lease renewed late (a busy API
    /// server) holds writes back for a moment instead of failing them: until
    /// [`FENCE_WAIT`] after the earliest deadline passed, after which writes fail at once
    /// (as they do once a Lease is known lost). Nothing is written while the fence is closed.
    pub async fn wait_open(&self) -> bool {
        loop {
            if self.open() {
                return true;
            }
            let closed_since = self.until.lock().values().min().copied();
            if self.lost.load(std::sync::atomic::Ordering::Relaxed)
                || closed_since.is_none_or(|t| t.elapsed() >= FENCE_WAIT)
            {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Marks a Lease as lost: the fence stays closed and writes fail at once.
    pub fn lose(&self) {
        self.lost.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Moves the deadline of a held `lease` to `until` (monotonic); a Lease let go stays
    /// gone.
    fn confirm(&self, lease: &str, until: Instant) {
        if let Some(t) = self.until.lock().get_mut(lease) {
            *t = until;
        }
    }

    /// Marks `lease` as held but unconfirmed (writes wait for the first confirmation).
    pub fn hold(&self, lease: &str) {
        self.until.lock().insert(lease.to_string(), Instant::now());
    }

    /// Stops fencing writes by `lease` (handed back: the writes it covered have stopped);
    /// its [`Fence::keep`] loop ends.
    pub fn let_go(&self, lease: &str) {
        self.until.lock().remove(lease);
    }

    /// Whether `lease` is among the Leases fenced.
    fn holds(&self, lease: &str) -> bool {
        self.until.lock().contains_key(lease)
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
        // Confirmed before it is fenced: a Lease taken while others are held does not close
        // their writes while it is read. Unconfirmed, it is fenced as held until then.
        let until = Self::read_deadline(&api, &lease, &identity, duration).await;
        self.until
            .lock()
            .insert(lease.clone(), until.unwrap_or_else(Instant::now));
        let fence = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(duration / 8).await;
                if !fence.holds(&lease) {
                    break;
                }
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
        if let Some(until) = Self::read_deadline(api, lease, identity, duration).await {
            self.confirm(lease, until);
        }
    }

    /// Reads the Lease: when this replica holds it, how long writes may go out
    /// (`renewTime + duration - duration / 8`). A hung read answers nothing (the fence
    /// closes on its own).
    async fn read_deadline(
        api: &Api<Lease>,
        lease: &str,
        identity: &str,
        duration: Duration,
    ) -> Option<Instant> {
        let l = tokio::time::timeout(duration / 8, api.get(lease))
            .await
            .ok()?
            .ok()?;
        let spec = l.spec?;
        if spec.holder_identity.as_deref() != Some(identity) {
            return None;
        }
        let renewed = SystemTime::from(spec.renew_time?.0);
        let expires = renewed + duration - duration / 8;
        let left = expires
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        Some(Instant::now() + left)
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
        && !(req.uri().path().starts_with("/apis/coordination.k8s.io/")
            && (req.uri().path().contains("/leases/") || req.uri().path().ends_with("/leases")))
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
        let fence = is_write(&req).then(|| self.fence.clone());
        // As in the rate limiter: the inner future sends nothing until it is polled, which
        // happens once the fence is open.
        let fut = self.inner.call(req);
        Box::pin(async move {
            if let Some(f) = fence
                && !f.wait_open().await
            {
                return Err(FencedWrite.into());
            }
            fut.await.map_err(Into::into)
        })
    }
}
