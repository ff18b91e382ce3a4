//! Requests of every API client enoki builds, counted by verb and HTTP code
//! (`enoki_api_requests_total`), and their latency by verb
//! (`enoki_api_request_duration_seconds`; watches are long by design and not timed): a tower
//! layer in front of each client ([`MetricsLayer`]). The series are process-wide, so the clients
//! of both clusters and the impersonating ones all count.

use std::sync::LazyLock;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::BoxFuture;
use http::{Method, Request};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of a request count.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete` or `other`.
    pub verb: String,
    /// The HTTP status code, or `error` when no response came.
    pub code: String,
}

/// Labels of a latency.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabel {
    /// As in [`RequestLabels::verb`].
    pub verb: String,
}

fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

static REQUESTS: LazyLock<Family<RequestLabels, Counter>> = LazyLock::new(Family::default);
static LATENCY: LazyLock<Family<VerbLabel, Histogram>> =
    LazyLock::new(|| Family::new_with_constructor(latency_histogram));

/// Registers the API client series in `registry`.
pub fn register(registry: &mut Registry) {
    registry.register(
        "enoki_api_requests",
        "API server requests by verb and HTTP code",
        REQUESTS.clone(),
    );
    registry.register(
        "enoki_api_request_duration_seconds",
        "API server request latency by verb (watches excluded)",
        LATENCY.clone(),
    );
}

/// The Kubernetes verb of a request (collection GETs are `list`).
pub fn verb(method: &Method, path: &str, query: Option<&str>) -> &'static str {
    match *method {
        Method::GET => {
            let watching =
                query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
            if watching {
                "watch"
            } else if is_collection(path) {
                "list"
            } else {
                "get"
            }
        }
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "other",
    }
}

/// Whether an API path names a collection (`…/configmaps`) rather than an object.
fn is_collection(path: &str) -> bool {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segs.first() {
        Some(&"api") => segs.get(2..),
        Some(&"apis") => segs.get(3..),
        _ => None,
    };
    let Some(mut rest) = rest else {
        return false;
    };
    if rest.first() == Some(&"namespaces") && rest.len() >= 3 {
        rest = &rest[2..];
    }
    rest.len() == 1
}

/// The layer that measures a client's requests.
#[derive(Clone, Copy, Debug, Default)]
pub struct MetricsLayer;

impl<S> tower::Layer<S> for MetricsLayer {
    type Service = Measured<S>;
    fn layer(&self, inner: S) -> Measured<S> {
        Measured { inner }
    }
}

/// A client service whose requests are counted and timed.
#[derive(Clone)]
pub struct Measured<S> {
    inner: S,
}

impl<S, B> tower::Service<Request<kube::client::Body>> for Measured<S>
where
    S: tower::Service<Request<kube::client::Body>, Response = http::Response<B>>,
    S::Error: Into<tower::BoxError>,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<B>;
    type Error = tower::BoxError;
    type Future = BoxFuture<'static, Result<http::Response<B>, tower::BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<kube::client::Body>) -> Self::Future {
        let verb = verb(req.method(), req.uri().path(), req.uri().query());
        let start = Instant::now();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let result = fut.await.map_err(Into::into);
            let code = match &result {
                Ok(resp) => resp.status().as_u16().to_string(),
                Err(_) => "error".to_string(),
            };
            REQUESTS
                .get_or_create(&RequestLabels {
                    verb: verb.to_string(),
                    code,
                })
                .inc();
            if verb != "watch" {
                LATENCY
                    .get_or_create(&VerbLabel {
                        verb: verb.to_string(),
                    })
                    .observe(start.elapsed().as_secs_f64());
            }
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_follow_the_api_path() {
        let get = Method::GET;
        assert_eq!(verb(&get, "/api/v1/namespaces/a/configmaps", None), "list");
        assert_eq!(verb(&get, "/api/v1/namespaces/a/configmaps/x", None), "get");
        assert_eq!(
            verb(
                &get,
                "/api/v1/namespaces/a/configmaps",
                Some("watch=true&rv=1")
            ),
            "watch"
        );
        assert_eq!(
            verb(&get, "/apis/enoki.dev/v1alpha1/compositions", None),
            "list"
        );
        assert_eq!(verb(&get, "/api/v1/namespaces", None), "list");
        assert_eq!(verb(&get, "/api/v1/namespaces/a", None), "get");
        assert_eq!(
            verb(
                &get,
                "/apis/apps/v1/namespaces/a/deployments/d/status",
                None
            ),
            "get"
        );
        assert_eq!(
            verb(&Method::PATCH, "/api/v1/namespaces/a/configmaps/x", None),
            "patch"
        );
        assert_eq!(verb(&get, "/version", None), "get");
    }
}
