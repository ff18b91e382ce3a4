//! `--qps` and `--burst` (Eno's flags): a token bucket shared by every client of a cluster
//! (the controller's own and each impersonating one), in front of every request but the
//! Lease renewals (leader election is never delayed by a busy reconcile). A request that finds
//! the bucket empty waits for its token; none is refused, and one dropped while it waits (its
//! `--timeout` passed) takes none. Waiting requests are served namespace by namespace in
//! turn (the namespace whose Composition's reconcile makes the request, [`FLOW`]; outside a
//! reconcile the namespace in the request's path, cluster-scoped requests one more), each
//! namespace's in order: a namespace with hundreds of writes queued delays another's next
//! request by one token, not by its whole queue.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

use futures::future::BoxFuture;
use http::Request;

use super::fence::{Fence, FencedWrite, is_write};

/// A token bucket: `qps` tokens a second, at most `burst` saved up.
#[derive(Debug)]
pub(crate) struct Bucket {
    qps: f64,
    burst: f64,
    /// Tokens now and when that was.
    state: Mutex<(f64, Instant)>,
    /// The requests waiting for a token (locked before `state` where both are).
    waiting: Mutex<Waiting>,
}

/// Clears the dispatcher's mark when it ends other than by running out of waiters (its task
/// dropped with the runtime, a panic): the waiters left go on without a token, and the next
/// request starts a dispatcher.
struct Stopped(Arc<Bucket>, bool);

impl Drop for Stopped {
    fn drop(&mut self) {
        if !self.1 {
            return;
        }
        let mut w = self.0.waiting.lock();
        w.dispatching = false;
        w.turns.clear();
        w.by_namespace.clear();
    }
}

/// Requests waiting for a token, per namespace.
#[derive(Debug, Default)]
struct Waiting {
    /// The namespaces with requests waiting, in turn order.
    turns: VecDeque<Box<str>>,
    /// Per namespace, its waiting requests in arrival order.
    by_namespace: HashMap<Box<str>, VecDeque<oneshot::Sender<()>>>,
    /// Whether a task hands out tokens now.
    dispatching: bool,
}

/// The lowest `--qps` that is not 0 (no limit).
pub(crate) const MIN_QPS: f64 = 0.001;

impl Bucket {
    /// A bucket of `qps` requests a second and `burst` at once; `None` when `qps` is 0 (no
    /// limit). Callers refuse a `qps` below [`MIN_QPS`] that is not 0.
    pub(crate) fn new(qps: f64, burst: u32) -> Option<Arc<Bucket>> {
        (qps.is_finite() && qps >= MIN_QPS).then(|| {
            let burst = f64::from(burst.max(1));
            Arc::new(Bucket {
                qps,
                burst,
                state: Mutex::new((burst, Instant::now())),
                waiting: Mutex::default(),
            })
        })
    }

    /// Takes a token if one is there; otherwise how long until one is.
    pub(crate) fn try_take(&self) -> Result<(), Duration> {
        let mut s = self.state.lock();
        let now = Instant::now();
        let refill = now.duration_since(s.1).as_secs_f64() * self.qps;
        s.0 = (s.0 + refill).min(self.burst);
        s.1 = now;
        if s.0 >= 1.0 {
            s.0 -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - s.0) / self.qps;
            Err(Duration::try_from_secs_f64(wait).unwrap_or(Duration::from_secs(3600)))
        }
    }

    /// A token not used after all.
    fn give_back(&self) {
        let mut s = self.state.lock();
        s.0 = (s.0 + 1.0).min(self.burst);
    }

    /// Waits for a token for a request in `namespace`: at once when nothing waits and a token
    /// is there, else in the namespace's queue, served in turn with the other namespaces'. A
    /// request dropped while it waits (its deadline passed, shutdown) never took one.
    pub(crate) async fn acquire(self: &Arc<Self>, namespace: &str) {
        let (turn, start) = {
            let mut w = self.waiting.lock();
            if w.turns.is_empty() && self.try_take().is_ok() {
                return;
            }
            let (tx, rx) = oneshot::channel();
            let Waiting {
                turns,
                by_namespace,
                dispatching,
            } = &mut *w;
            let queue = by_namespace.entry(namespace.into()).or_default();
            if queue.is_empty() {
                turns.push_back(namespace.into());
            }
            queue.push_back(tx);
            let start = !*dispatching;
            *dispatching = true;
            (rx, start)
        };
        if start {
            // Outside the lock: a future the runtime drops at once (shutting down) drops its
            // guard, which takes the lock to clear the mark.
            let guard = Stopped(self.clone(), true);
            tokio::spawn(self.clone().dispatch(guard));
        }
        // The dispatcher gone (the runtime shutting down, a panic): the request goes on.
        let _ = turn.await;
    }

    /// Hands out tokens as they come, to the next namespace in turn, until nothing waits.
    async fn dispatch(self: Arc<Self>, mut stopped: Stopped) {
        loop {
            while let Err(wait) = self.try_take() {
                tokio::time::sleep(wait).await;
            }
            let mut w = self.waiting.lock();
            let mut given = false;
            while !given && let Some(ns) = w.turns.pop_front() {
                let Some(queue) = w.by_namespace.get_mut(&ns) else {
                    continue;
                };
                let next = queue.pop_front();
                if queue.is_empty() {
                    w.by_namespace.remove(&ns);
                } else {
                    w.turns.push_back(ns);
                }
                // A request dropped while it waited takes none: the token goes to the next.
                given = next.is_some_and(|tx| tx.send(()).is_ok());
            }
            if !given {
                self.give_back();
            }
            if w.turns.is_empty() {
                w.dispatching = false;
                // Ended as it should: a dispatcher started after this one keeps its waiters.
                drop(w);
                stopped.1 = false;
                return;
            }
        }
    }
}

tokio::task_local! {
    /// The namespace whose work a task does (a Composition's reconcile sets its own): the
    /// queue its requests wait in, whatever namespace their objects are in.
    pub(crate) static FLOW: Arc<str>;
}

/// The namespace of a request's object (`…/namespaces/<ns>/<resource>…`), or `""` for a
/// cluster-scoped one (a Namespace itself included).
fn namespace_of(path: &str) -> &str {
    let mut segments = path.split('/');
    while let Some(s) = segments.next() {
        if s == "namespaces" {
            let ns = segments.next().unwrap_or_default();
            return if segments.next().is_some() { ns } else { "" };
        }
    }
    ""
}

/// Whether a request renews one of the Leases enoki holds (leader election, shards): never
/// delayed, so a busy reconcile cannot cost the lead.
fn is_lease(req: &Request<kube::client::Body>) -> bool {
    let path = req.uri().path();
    let mut segments = path.rsplit('/');
    path.starts_with("/apis/coordination.k8s.io/")
        && (segments.next() == Some("leases") || segments.next() == Some("leases"))
}

/// The layer that puts a [`Bucket`] in front of a client (none: no limit). With leader
/// election, a write that waited for its token is checked against the fence again before it
/// goes out: one queued while the Lease was held is not sent once it may have expired.
#[derive(Clone)]
pub(crate) struct RateLimitLayer {
    pub bucket: Option<Arc<Bucket>>,
    pub fence: Option<Arc<Fence>>,
}

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = Limited<S>;
    fn layer(&self, inner: S) -> Limited<S> {
        Limited {
            inner,
            bucket: self.bucket.clone(),
            fence: self.fence.clone(),
        }
    }
}

/// A client service whose requests wait for a token.
#[derive(Clone)]
pub(crate) struct Limited<S> {
    inner: S,
    bucket: Option<Arc<Bucket>>,
    fence: Option<Arc<Fence>>,
}

impl<S, R> tower::Service<Request<kube::client::Body>> for Limited<S>
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
        let bucket = self.bucket.clone().filter(|_| !is_lease(&req));
        let fence = self.fence.clone().filter(|_| is_write(&req));
        let path_namespace = namespace_of(req.uri().path()).to_string();
        // The request is handed to the (ready) inner service now; its future sends nothing
        // until it is polled, which happens once a token is taken.
        let fut = self.inner.call(req);
        Box::pin(async move {
            if let Some(b) = bucket {
                // Read here, not in `call`: the client's buffer calls this service from a
                // task of its own, while this future is polled by the task making the request.
                let flow = FLOW.try_with(|f| f.to_string()).unwrap_or(path_namespace);
                b.acquire(&flow).await;
                if let Some(f) = fence
                    && !f.wait_open().await
                {
                    return Err(FencedWrite.into());
                }
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
        // A burst of 3 at 10 per second. The takes are timed: a loaded machine may stretch
        // them (tried again, at most five times, until five takes fit in 50 ms).
        let (taken, spent) = (0..5)
            .find_map(|_| {
                let b = Bucket::new(10.0, 3).unwrap();
                let started = Instant::now();
                let taken: Vec<Result<(), Duration>> = (0..5).map(|_| b.try_take()).collect();
                let spent = started.elapsed();
                (spent < Duration::from_millis(50)).then_some((taken, spent))
            })
            .expect("five takes within 50 ms in one of five tries");
        assert!(taken[..3].iter().all(Result::is_ok), "{taken:?}");
        // No token left: the next comes 0.1 s after the burst began — the wait and the time
        // the takes took add up to it — and asking again takes none.
        let wait = taken[3].unwrap_err();
        assert!(wait <= Duration::from_millis(100), "{wait:?}");
        assert!(
            wait + spent >= Duration::from_millis(99),
            "{wait:?} + {spent:?}"
        );
        assert!(taken[4].unwrap_err() <= Duration::from_millis(100));
        // The slowest bucket still gives a finite wait.
        let slow = Bucket::new(MIN_QPS, 1).unwrap();
        assert!(slow.try_take().is_ok());
        assert!(slow.try_take().unwrap_err() <= Duration::from_secs(3600));
    }

    #[test]
    fn a_request_counts_for_the_namespace_of_its_object() {
        assert_eq!(namespace_of("/api/v1/namespaces/t/configmaps/x"), "t");
        assert_eq!(
            namespace_of("/apis/enoki.dev/v1alpha1/namespaces/t/compositions"),
            "t"
        );
        assert_eq!(
            namespace_of("/api/v1/namespaces/t"),
            "",
            "a Namespace is cluster-scoped"
        );
        assert_eq!(
            namespace_of("/apis/apiextensions.k8s.io/v1/customresourcedefinitions"),
            ""
        );
    }

    #[tokio::test]
    async fn a_request_waits_in_the_queue_of_the_work_that_makes_it() {
        use tower::{Layer as _, ServiceExt as _};
        let b = Bucket::new(50.0, 1).unwrap();
        b.acquire("victim").await;
        let order = Arc::new(Mutex::new(Vec::new()));
        // The victim's own requests wait in its queue.
        let mut tasks: Vec<_> = (0..10)
            .map(|_| {
                let (b, order) = (b.clone(), order.clone());
                tokio::spawn(async move {
                    b.acquire("victim").await;
                    order.lock().push("victim");
                })
            })
            .collect();
        tokio::task::yield_now().await;
        // A tenant's reconcile writes an object in the victim's namespace, through a buffer
        // in front of the limit as kube's client has (its service is called from another
        // task): it waits in the tenant's queue, not behind the victim's requests.
        let inner = tower::service_fn(|_: Request<kube::client::Body>| async {
            Ok::<_, std::convert::Infallible>(())
        });
        let layer = RateLimitLayer {
            bucket: Some(b.clone()),
            fence: None,
        };
        let client = tower::buffer::Buffer::new(layer.layer(inner), 8);
        let req = Request::builder()
            .uri("/api/v1/namespaces/victim/configmaps/x")
            .body(kube::client::Body::empty())
            .unwrap();
        FLOW.scope("tenant".into(), async {
            client.oneshot(req).await.unwrap();
            order.lock().push("tenant");
        })
        .await;
        for t in tasks.drain(..) {
            t.await.unwrap();
        }
        let order = order.lock();
        let tenant = order.iter().position(|n| *n == "tenant").unwrap();
        assert!(tenant <= 1, "served at {tenant}: {order:?}");
    }

    #[tokio::test]
    async fn a_busy_namespace_delays_another_by_one_token_not_its_whole_queue() {
        let b = Bucket::new(50.0, 1).unwrap();
        b.acquire("busy").await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let waiter = |ns: &'static str| {
            let (b, order) = (b.clone(), order.clone());
            tokio::spawn(async move {
                b.acquire(ns).await;
                order.lock().push(ns);
            })
        };
        let mut tasks: Vec<_> = (0..20).map(|_| waiter("busy")).collect();
        tokio::task::yield_now().await;
        // One of the busy namespace's requests dropped while it waits takes no token.
        let dropped = waiter("busy");
        tokio::task::yield_now().await;
        dropped.abort();
        tasks.push(waiter("quiet"));
        for t in tasks {
            t.await.unwrap();
        }
        let order = order.lock();
        let quiet = order.iter().position(|ns| *ns == "quiet").unwrap();
        assert!(
            quiet <= 1,
            "served at {quiet} of {}: {order:?}",
            order.len()
        );
        assert_eq!(order.len(), 21);
    }

    #[test]
    fn only_lease_requests_skip_the_bucket() {
        let req = |path: &str| {
            Request::builder()
                .uri(path)
                .body(kube::client::Body::empty())
                .unwrap()
        };
        assert!(is_lease(&req(
            "/apis/coordination.k8s.io/v1/namespaces/enoki-system/leases/enoki"
        )));
        assert!(!is_lease(&req(
            "/api/v1/namespaces/t/configmaps/leases-cache"
        )));
        assert!(!is_lease(&req(
            "/apis/example.com/v1/namespaces/t/leases/x"
        )));
    }
}
