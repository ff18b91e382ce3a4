//! A fake Kubernetes API for the call-sequence tier (`make test-unit`): a `tower-test` mock
//! service behind real `kube::Client`s, answering from an in-memory object store and recording
//! every request in order (verb, namespace, resource, subresource, patch type, the user it
//! impersonates). It serves what one Composition's passes use: discovery of the kinds it
//! serves, get, list and watch (label and field selectors; a watch gets every later change, and
//! the changes after the resourceVersion it asks from), create, replace, merge/JSON/apply
//! patches, delete with finalizers, dry runs. An apply merges maps and replaces lists: it does
//! not remove what a manager stopped setting, merge keyed lists, or return `managedFields`
//! (ownership repair is proved by the e2e suite against the real API server, which stays the
//! proof of behaviour; this tier proves what a pass reads and writes, in which order, in
//! seconds).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt as _;
use kube::client::Body;
use parking_lot::Mutex;
use serde_json::{Value, json};

mod select;
mod store;
use select::{Selection, Target, discovery, query};
use store::{Answer, Store, Write, failure};

/// One request as recorded: `GET team/configmaps/out`, `PATCH team/compositions/app/status
/// (merge)`, `GET team/configmaps/in as team:reader`.
pub(crate) type Call = String;

type FakeBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;
type Mock = tower_test::mock::Mock<Request<Body>, Response<FakeBody>>;

/// The fake API: clients for it, and the store and record the test reads and changes.
#[derive(Clone)]
pub(crate) struct FakeApi {
    store: Arc<Mutex<Store>>,
    service: Mock,
}

impl FakeApi {
    /// A fake API and a client talking to it with the controller's identity.
    pub(crate) fn start() -> (FakeApi, kube::Client) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<FakeBody>>();
        let fake = FakeApi {
            store: Arc::default(),
            service: service.clone(),
        };
        let server = fake.clone();
        tokio::spawn(async move {
            // Hung requests are held (never answered) for as long as the fake lives.
            let mut held = Vec::new();
            while let Some((req, send)) = handle.next_request().await {
                match server.serve(req).await {
                    Some(response) => send.send_response(response),
                    None => held.push(send),
                }
            }
        });
        (fake, kube::Client::new(service, "default"))
    }

    /// A client whose requests carry `headers` (`impersonate-user`, `impersonate-group`, or
    /// the fake's own `x-fake-origin`).
    fn client_with(&self, headers: Vec<(&'static str, String)>) -> kube::Client {
        let headers: Vec<(&'static str, http::HeaderValue)> = headers
            .into_iter()
            .map(|(k, v)| (k, http::HeaderValue::from_str(&v).expect("a header value")))
            .collect();
        let service = tower::ServiceBuilder::new()
            .map_request(move |mut r: Request<Body>| {
                for (k, v) in &headers {
                    r.headers_mut().append(*k, v.clone());
                }
                r
            })
            .service(self.service.clone());
        kube::Client::new(service, "default")
    }

    /// The client a kube configuration would make: it impersonates the user and groups the
    /// configuration names (as `Impersonate-User`/`Impersonate-Group` headers).
    pub(crate) fn client_for(&self, config: &kube::Config) -> kube::Client {
        let auth = &config.auth_info;
        let user = auth
            .impersonate
            .iter()
            .map(|u| ("impersonate-user", u.clone()));
        let groups = auth
            .impersonate_groups
            .iter()
            .flatten()
            .map(|g| ("impersonate-group", g.clone()));
        self.client_with(user.chain(groups).collect())
    }

    /// A client for the controller's caches: its requests are recorded as `[cache] …`, apart
    /// from what passes request.
    pub(crate) fn cache_client(&self) -> kube::Client {
        self.client_with(vec![("x-fake-origin", "cache".into())])
    }

    /// Tells the watches of every change since the last call (the API server's watch events
    /// come a moment after its writes; the tier delivers them between passes, so a pass never
    /// finds its own writes in a cache).
    pub(crate) fn deliver(&self) {
        self.store.lock().deliver();
    }

    /// Every request so far, in order.
    pub(crate) fn calls(&self) -> Vec<Call> {
        self.store.lock().calls.clone()
    }

    /// Holds every later `call` (`GET enoki-system/configmaps/module`) open without an answer.
    pub(crate) fn hang(&self, call: &str) {
        self.store.lock().hung.push(call.to_string());
    }

    /// Stores `obj` at `path` as another client would, just before the first later request
    /// recorded as `call` reaches the server; watches hear of it only at the next
    /// [`FakeApi::deliver`] (a cache lagging behind that client's create).
    pub(crate) fn create_before(&self, call: &str, path: &str, obj: Value) {
        self.store
            .lock()
            .created_before
            .push((call.to_string(), path.to_string(), obj));
    }

    /// Forgets the requests recorded so far.
    pub(crate) fn clear_calls(&self) {
        self.store.lock().calls.clear();
    }

    /// The object at `path`, if any.
    pub(crate) fn get(&self, path: &str) -> Option<Value> {
        self.store.lock().objects.get(path).cloned()
    }

    /// Deletes the object at `path` as a client's delete would (finalizers aside).
    pub(crate) fn remove(&self, path: &str) {
        self.store.lock().commit(path, None);
    }

    /// Every object whose path starts with `prefix`.
    pub(crate) fn objects_under(&self, prefix: &str) -> Vec<Value> {
        let s = self.store.lock();
        s.objects
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Stores `obj` at `path` as a client's create or replace would (a new resourceVersion;
    /// watches hear of it).
    pub(crate) fn put(&self, path: &str, mut obj: Value) {
        let mut s = self.store.lock();
        let uid = s.uid();
        let meta = &mut obj["metadata"];
        let mut defaults = vec![
            ("uid", json!(uid)),
            ("creationTimestamp", json!("2026-01-01T00:00:00Z")),
        ];
        if Target::parse(path).is_some_and(|t| t.has_generation()) {
            defaults.push(("generation", json!(1)));
        }
        for (key, value) in defaults {
            if meta.get(key).is_none() {
                meta[key] = value;
            }
        }
        s.commit(path, Some(obj));
    }

    /// The answer to one request; `None`: held open.
    async fn serve(&self, req: Request<Body>) -> Option<Response<FakeBody>> {
        let (parts, body) = req.into_parts();
        let body = body.collect_bytes().await.unwrap_or_default();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let path = parts.uri.path().to_string();
        let q = query(parts.uri.query());
        let from_cache =
            header(&parts.headers, "x-fake-origin".parse().expect("a name")) == "cache";
        let origin = if from_cache { "[cache] " } else { "" };
        if let Some(list) = discovery(&path) {
            self.record(format!("{origin}DISCOVER {path}"));
            return Some(reply(200, &list));
        }
        let Some(t) = Target::parse(&path) else {
            self.record(format!("{origin}{} {path} (not served)", parts.method));
            return Some(reply(404, &failure(404, "NotFound", &path).1));
        };
        let watch = q.get("watch").is_some_and(|w| w == "true" || w == "1");
        let verb = match (parts.method.as_str(), &t.name) {
            ("GET", None) if watch => "WATCH",
            ("GET", None) => "LIST",
            (m, _) => m,
        };
        let content_type = header(&parts.headers, http::header::CONTENT_TYPE);
        let call = format!("{verb} {}", t.short());
        let dry_run = q.get("dryRun").is_some_and(|d| d == "All");
        let label = format!(
            "{origin}{call}{}",
            decorations(verb, &content_type, &q, &parts.headers, &body)
        );
        let mut s = self.store.lock();
        if let Some(i) = s.created_before.iter().position(|(c, _, _)| *c == label) {
            let (_, path, obj) = s.created_before.remove(i);
            s.commit(&path, Some(obj));
        }
        s.calls.push(label);
        if s.hung.contains(&call) && !from_cache {
            return None;
        }
        if watch {
            let since = q
                .get("resourceVersion")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let events = s.watch(Selection::of(&t, &q), since);
            return Some(streaming(events));
        }
        let (code, answer): Answer = match (verb, &t.name) {
            ("LIST", _) => (200, s.list(&t, &q)),
            ("GET", Some(name)) => match s.objects.get(&t.object_path(name)) {
                Some(obj) => (200, obj.clone()),
                None => failure(404, "NotFound", name),
            },
            ("POST", None) => s.create(&t, body, dry_run),
            ("PUT", Some(_)) => s.write(&t, &body, &Write::Replace, dry_run),
            ("PATCH", Some(_)) => s.write(&t, &body, &Write::Patch(content_type), dry_run),
            ("DELETE", Some(_)) => s.delete(&t, dry_run),
            _ => failure(405, "MethodNotAllowed", &path),
        };
        Some(reply(code, &answer))
    }

    fn record(&self, call: Call) {
        self.store.lock().calls.push(call);
    }
}

/// What a recorded call says besides its verb and resource: the patch type (and an apply's
/// field manager, force and version guard), a dry run, the user and groups it impersonates.
fn decorations(
    verb: &str,
    content_type: &str,
    q: &std::collections::HashMap<String, String>,
    headers: &http::HeaderMap,
    body: &Value,
) -> String {
    let mut label = String::new();
    if verb == "PATCH" {
        let manager = q.get("fieldManager").map(String::as_str).unwrap_or("-");
        let force = if q.get("force").is_some_and(|f| f == "true") {
            ", force"
        } else {
            ""
        };
        // An apply that names a resourceVersion no object has creates only.
        let guard = match body
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
        {
            Some(super::apply::execute::NO_OBJECT_HAS) => ", if absent".to_string(),
            Some(rv) => format!(", at {rv}"),
            None => String::new(),
        };
        label.push_str(&match patch_kind(content_type) {
            "apply" => format!(" (apply, {manager}{force}{guard})"),
            kind => format!(" ({kind})"),
        });
    }
    if q.get("dryRun").is_some_and(|d| d == "All") {
        label.push_str(" [dry run]");
    }
    let user = header(headers, "impersonate-user".parse().expect("a name"));
    if !user.is_empty() {
        let user = user.trim_start_matches("system:serviceaccount:");
        label.push_str(&format!(" as {user}"));
    }
    let groups: Vec<&str> = headers
        .get_all("impersonate-group")
        .iter()
        .filter_map(|g| g.to_str().ok())
        .collect();
    if !groups.is_empty() {
        label.push_str(&format!(" in {}", groups.join(",")));
    }
    label
}

fn header(headers: &http::HeaderMap, name: http::HeaderName) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

fn patch_kind(content_type: &str) -> &'static str {
    match content_type {
        c if c.contains("apply-patch") => "apply",
        c if c.contains("json-patch") => "json",
        c if c.contains("strategic") => "strategic",
        _ => "merge",
    }
}

fn reply(code: u16, body: &Value) -> Response<FakeBody> {
    let bytes = Bytes::from(serde_json::to_vec(body).unwrap_or_default());
    Response::builder()
        .status(code)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(http_body_util::Full::new(bytes).boxed())
        .expect("a response")
}

/// A watch's answer: one JSON line per event, for as long as the fake lives.
fn streaming(events: tokio::sync::mpsc::UnboundedReceiver<Bytes>) -> Response<FakeBody> {
    let frames = futures::stream::unfold(events, |mut rx| async move {
        let line = rx.recv().await?;
        Some((Ok::<_, Infallible>(http_body::Frame::data(line)), rx))
    });
    Response::builder()
        .status(200)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(http_body_util::StreamBody::new(frames).boxed())
        .expect("a response")
}
