//! `--qps` and `--burst` (Eno's flags): a token bucket shared by every client of a cluster
//! (the controller's own and each impersonating one), in front of every request but the
//! Lease renewals (leader election is never delayed by a busy reconcile). A request that finds
//! the bucket empty waits for its token; none is refused.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use http::Request;

/// A token bucket: `qps` tokens a second, at most `burst` saved up.
#[derive(Debug)]
pub(crate) struct Bucket {
    qps: f64,
    burst: f64,
    /// Tokens now (negative: reserved by requests still waiting) and when that was.
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    /// A bucket of `qps` requests a second and `burst` at once; `None` when `qps` is not
    /// positive (no limit, as client-go reads a negative QPS).
    pub(crate) fn new(qps: f64, burst: u32) -> Option<Arc<Bucket>> {
        (qps.is_finite() && qps > 0.0).then(|| {
            let burst = f64::from(burst.max(1));
            Arc::new(Bucket {
                qps,
                burst,
                state: Mutex::new((burst, Instant::now())),
            })
        })
    }

    /// Takes one token; how long to wait before using it.
    pub(crate) fn reserve(&self) -> Duration {
        let Ok(mut s) = self.state.lock() else {
            return Duration::ZERO;
        };
        let now = Instant::now();
        let refill = now.duration_since(s.1).as_secs_f64() * self.qps;
        s.0 = (s.0 + refill).min(self.burst) - 1.0;
        s.1 = now;
        if s.0 >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-s.0 / self.qps)
        }
    }
}

/// The layer that puts a [`Bucket`] in front of a client (none: no limit).
#[derive(Clone)]
pub(crate) struct RateLimitLayer(pub Option<Arc<Bucket>>);

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = Limited<S>;
    fn layer(&self, inner: S) -> Limited<S> {
        Limited {
            inner,
            bucket: self.0.clone(),
        }
    }
}

/// A client service whose requests wait for a token.
#[derive(Clone)]
pub(crate) struct Limited<S> {
    inner: S,
    bucket: Option<Arc<Bucket>>,
}

impl<S, B, R> tower::Service<Request<B>> for Limited<S>
where
    S: tower::Service<Request<B>, Response = R>,
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

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let lease = req.uri().path().contains("/leases");
        let wait = match &self.bucket {
            Some(b) if !lease => b.reserve(),
            _ => Duration::ZERO,
        };
        // The request is handed to the (ready) inner service now; its future sends nothing
        // until it is polled, which happens once the token is due.
        let fut = self.inner.call(req);
        Box::pin(async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            fut.await.map_err(Into::into)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_lets_a_burst_through_then_spaces_requests_by_qps() {
        assert!(Bucket::new(0.0, 10).is_none());
        assert!(Bucket::new(-1.0, 10).is_none());
        let b = Bucket::new(10.0, 3).unwrap();
        let waits: Vec<Duration> = (0..5).map(|_| b.reserve()).collect();
        assert!(waits[..3].iter().all(Duration::is_zero), "{waits:?}");
        // The 4th and 5th wait about 0.1 s and 0.2 s (less the little time that passed).
        assert!(waits[3] > Duration::from_millis(50) && waits[3] <= Duration::from_millis(100));
        assert!(waits[4] > Duration::from_millis(150) && waits[4] <= Duration::from_millis(200));
    }
}
