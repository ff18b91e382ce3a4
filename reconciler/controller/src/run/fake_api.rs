//! A fake Kubernetes API for the call-sequence tier (`make test-unit`): a `tower-test` mock
//! service behind a real `kube::Client`, answering from an in-memory object store and
//! recording every request (verb, resource, subresource) in order. It is enough of the API for
//! one Composition's passes — discovery of the kinds it serves, get, list, create, replace,
//! merge/JSON/apply patches (an apply merges maps and replaces lists), delete with finalizers,
//! dry runs — and holds watches open without events (reads fall back to GETs). The e2e suite
//! against the real API server stays the proof of behaviour; this tier proves what a pass
//! reads and writes, in which order, in seconds.

use std::collections::BTreeMap;
use std::sync::Arc;

use http::{Request, Response, StatusCode};
use kube::client::Body;
use parking_lot::Mutex;
use serde_json::{Value, json};

/// One request as recorded: `GET configmaps/out`, `PATCH compositions/app/status (merge)`.
pub(crate) type Call = String;

/// The kinds the fake serves: (group/version path, plural, kind, namespaced).
const KINDS: &[(&str, &str, &str, bool)] = &[
    ("/api/v1", "configmaps", "ConfigMap", true),
    ("/api/v1", "secrets", "Secret", true),
    ("/api/v1", "namespaces", "Namespace", false),
    (
        "/apis/enoki.dev/v1alpha1",
        "compositions",
        "Composition",
        true,
    ),
    (
        "/apis/enoki.dev/v1alpha1",
        "synthesizers",
        "Synthesizer",
        false,
    ),
    (
        "/apis/enoki.dev/v1alpha1",
        "resourceslices",
        "ResourceSlice",
        true,
    ),
    ("/apis/enoki.dev/v1alpha1", "symphonies", "Symphony", true),
    ("/apis/events.k8s.io/v1", "events", "Event", true),
];

/// Kinds whose status is a subresource (a write of the object leaves it alone).
const WITH_STATUS: &[&str] = &[
    "compositions",
    "synthesizers",
    "resourceslices",
    "symphonies",
];

#[derive(Default)]
struct Store {
    /// Object path (`/api/v1/namespaces/ns/configmaps/out`) → object.
    objects: BTreeMap<String, Value>,
    rv: u64,
    calls: Vec<Call>,
    /// Requests (`GET configmaps/module`) held open, never answered.
    hung: Vec<String>,
}

/// The fake API: its client, and the store and record the test reads and changes.
#[derive(Clone)]
pub(crate) struct FakeApi {
    store: Arc<Mutex<Store>>,
}

/// Where a request points.
struct Target {
    /// The collection's path (`/api/v1/namespaces/ns/configmaps`).
    collection: String,
    plural: String,
    name: Option<String>,
    sub: Option<String>,
}

impl FakeApi {
    /// A fake API and a client talking to it (default namespace `default`).
    pub(crate) fn start() -> (FakeApi, kube::Client) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let fake = FakeApi {
            store: Arc::default(),
        };
        let server = fake.clone();
        tokio::spawn(async move {
            // Watches are held open (never answered) for as long as the fake lives.
            let mut held = Vec::new();
            while let Some((req, send)) = handle.next_request().await {
                let watch = req
                    .uri()
                    .query()
                    .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
                let call = format!("{} {}", req.method(), short(req.uri().path()));
                if watch {
                    server.record(format!("WATCH {}", short(req.uri().path())));
                    held.push(send);
                    continue;
                }
                if server.store.lock().hung.contains(&call) {
                    server.record(call);
                    held.push(send);
                    continue;
                }
                let response = server.answer(req).await;
                send.send_response(response);
            }
        });
        (fake, kube::Client::new(service, "default"))
    }

    /// Every request so far, in order.
    pub(crate) fn calls(&self) -> Vec<Call> {
        self.store.lock().calls.clone()
    }

    /// Holds every later `call` (`GET configmaps/module`) open without an answer.
    pub(crate) fn hang(&self, call: &str) {
        self.store.lock().hung.push(call.to_string());
    }

    /// Forgets the requests recorded so far.
    pub(crate) fn clear_calls(&self) {
        self.store.lock().calls.clear();
    }

    /// The object at `path`, if any.
    pub(crate) fn get(&self, path: &str) -> Option<Value> {
        self.store.lock().objects.get(path).cloned()
    }

    /// Stores `obj` at `path` as a client would create or replace it (a new resourceVersion).
    pub(crate) fn put(&self, path: &str, mut obj: Value) {
        let mut s = self.store.lock();
        s.rv += 1;
        let rv = s.rv.to_string();
        let meta = &mut obj["metadata"];
        meta["resourceVersion"] = json!(rv);
        if meta.get("uid").is_none() {
            meta["uid"] = json!(format!("uid-{rv}"));
        }
        if meta.get("generation").is_none() {
            meta["generation"] = json!(1);
        }
        if meta.get("creationTimestamp").is_none() {
            meta["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        s.objects.insert(path.to_string(), obj);
    }

    fn record(&self, call: Call) {
        self.store.lock().calls.push(call);
    }

    async fn answer(&self, req: Request<Body>) -> Response<Body> {
        let (parts, body) = req.into_parts();
        let body = body.collect_bytes().await.unwrap_or_default();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let path = parts.uri.path().to_string();
        let query = parts.uri.query().unwrap_or_default().to_string();
        let dry_run = query.contains("dryRun=All");
        let content_type = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        if let Some(list) = discovery(&path) {
            self.record(format!("DISCOVER {path}"));
            return reply(StatusCode::OK, &list);
        }
        let Some(t) = target(&path) else {
            self.record(format!("{} {path} (unknown)", parts.method));
            return status(StatusCode::NOT_FOUND, "NotFound", &path);
        };
        let mut label = format!("{} {}", parts.method, short(&path));
        if parts.method == http::Method::PATCH {
            label.push_str(&format!(" ({})", patch_kind(&content_type)));
        }
        if dry_run {
            label.push_str(" [dry run]");
        }
        self.record(label);
        let mut s = self.store.lock();
        match (parts.method.as_str(), &t.name) {
            ("GET", None) => reply(StatusCode::OK, &s.list(&t, &query)),
            ("GET", Some(name)) => match s.objects.get(&format!("{}/{name}", t.collection)) {
                Some(obj) => reply(StatusCode::OK, obj),
                None => status(StatusCode::NOT_FOUND, "NotFound", name),
            },
            ("POST", None) => s.create(&t, body, dry_run),
            ("PUT", Some(_)) => s.write(&t, &body, &Write::Replace, dry_run),
            ("PATCH", Some(_)) => s.write(&t, &body, &Write::Patch(content_type), dry_run),
            ("DELETE", Some(_)) => s.delete(&t, dry_run),
            _ => status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", &path),
        }
    }
}

/// How a write changes the stored object.
enum Write {
    Replace,
    /// A patch of this content type.
    Patch(String),
}

impl Store {
    fn next_rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    fn list(&self, t: &Target, query: &str) -> Value {
        let selector = query
            .split('&')
            .find_map(|p| p.strip_prefix("labelSelector="))
            .map(|s| s.replace("%3D", "=").replace("%2C", ","));
        let prefix = format!("{}/", t.collection);
        let items: Vec<Value> = self
            .objects
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix) && !k[prefix.len()..].contains('/'))
            .map(|(_, v)| v.clone())
            .filter(|v| selector.as_deref().is_none_or(|sel| matches_labels(v, sel)))
            .collect();
        let kind = KINDS
            .iter()
            .find(|k| k.1 == t.plural)
            .map_or("List".to_string(), |k| format!("{}List", k.2));
        json!({"kind": kind, "apiVersion": "v1",
            "metadata": {"resourceVersion": self.rv.to_string()}, "items": items})
    }

    fn create(&mut self, t: &Target, mut obj: Value, dry_run: bool) -> Response<Body> {
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .map(String::from)
            .or_else(|| {
                let prefix = obj.pointer("/metadata/generateName")?.as_str()?;
                Some(format!("{prefix}{}", self.rv + 1))
            })
            .unwrap_or_default();
        let path = format!("{}/{name}", t.collection);
        if self.objects.contains_key(&path) {
            return status(StatusCode::CONFLICT, "AlreadyExists", &name);
        }
        let rv = self.next_rv();
        let meta = &mut obj["metadata"];
        meta["name"] = json!(name);
        meta["uid"] = json!(format!("uid-{rv}"));
        meta["resourceVersion"] = json!(rv);
        meta["generation"] = json!(1);
        meta["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        if let Some(ns) = namespace_of(&t.collection) {
            meta["namespace"] = json!(ns);
        }
        if !dry_run {
            self.objects.insert(path, obj.clone());
        }
        reply(StatusCode::CREATED, &obj)
    }

    fn write(&mut self, t: &Target, body: &Value, how: &Write, dry_run: bool) -> Response<Body> {
        let name = t.name.clone().unwrap_or_default();
        let path = format!("{}/{name}", t.collection);
        let old = self.objects.get(&path).cloned();
        let apply = matches!(how, Write::Patch(ct) if ct.contains("apply-patch"));
        let Some(old) = old.or_else(|| apply.then(|| json!({"metadata": {}}))) else {
            return status(StatusCode::NOT_FOUND, "NotFound", &name);
        };
        let sent_rv = body
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str);
        let old_rv = old
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str);
        if sent_rv.is_some() && old_rv.is_some() && sent_rv != old_rv {
            return status(StatusCode::CONFLICT, "Conflict", &name);
        }
        let mut new = match how {
            Write::Replace => body.clone(),
            Write::Patch(ct) if ct.contains("json-patch") => {
                let mut doc = old.clone();
                let ops: json_patch::Patch = match serde_json::from_value(body.clone()) {
                    Ok(p) => p,
                    Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", &e.to_string()),
                };
                if let Err(e) = json_patch::patch(&mut doc, &ops) {
                    return status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", &e.to_string());
                }
                doc
            }
            Write::Patch(ct) if ct.contains("apply-patch") => {
                let mut doc = old.clone();
                merge_apply(&mut doc, body);
                doc
            }
            Write::Patch(_) => {
                let mut doc = old.clone();
                json_patch::merge(&mut doc, body);
                doc
            }
        };
        self.settle(t, &old, &mut new, &name);
        if self.objects.contains_key(&path) && old == new {
            return reply(StatusCode::OK, &new);
        }
        new["metadata"]["resourceVersion"] = json!(self.next_rv());
        let created = !self.objects.contains_key(&path);
        if !dry_run {
            if finalized(&new) {
                self.objects.remove(&path);
            } else {
                self.objects.insert(path, new.clone());
            }
        }
        reply(
            if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            },
            &new,
        )
    }

    /// What the API server keeps whatever a write says: identity, the other half of a status
    /// subresource, the generation (bumped by a change outside status and metadata).
    fn settle(&mut self, t: &Target, old: &Value, new: &mut Value, name: &str) {
        let status_kind = WITH_STATUS.contains(&t.plural.as_str());
        match (t.sub.as_deref(), status_kind) {
            (Some("status"), _) => {
                let status = new.get("status").cloned();
                *new = old.clone();
                match status {
                    Some(s) => new["status"] = s,
                    None => drop(new.as_object_mut().map(|o| o.remove("status"))),
                }
            }
            (_, true) => match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => drop(new.as_object_mut().map(|o| o.remove("status"))),
            },
            _ => {}
        }
        let fixed = [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "generation",
        ];
        for key in fixed {
            match old.pointer(&format!("/metadata/{key}")) {
                Some(v) => new["metadata"][key] = v.clone(),
                None if key == "uid" => {
                    new["metadata"][key] = json!(format!("uid-{}", self.rv + 1))
                }
                None => {}
            }
        }
        new["metadata"]["name"] = json!(name);
        if let Some(ns) = namespace_of(&t.collection) {
            new["metadata"]["namespace"] = json!(ns);
        }
        let outside = |v: &Value| {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut() {
                o.remove("metadata");
                o.remove("status");
            }
            v
        };
        let generation = old.pointer("/metadata/generation").and_then(Value::as_i64);
        new["metadata"]["generation"] = json!(match generation {
            Some(g) if outside(old) != outside(new) => g + 1,
            Some(g) => g,
            None => 1,
        });
    }

    fn delete(&mut self, t: &Target, dry_run: bool) -> Response<Body> {
        let name = t.name.clone().unwrap_or_default();
        let path = format!("{}/{name}", t.collection);
        let Some(mut obj) = self.objects.get(&path).cloned() else {
            return status(StatusCode::NOT_FOUND, "NotFound", &name);
        };
        if dry_run {
            return reply(StatusCode::OK, &obj);
        }
        let finalizers = obj
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array);
        if finalizers.is_some_and(|f| !f.is_empty()) {
            if obj.pointer("/metadata/deletionTimestamp").is_none() {
                obj["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:01Z");
                obj["metadata"]["resourceVersion"] = json!(self.next_rv());
                self.objects.insert(path, obj.clone());
            }
            return reply(StatusCode::OK, &obj);
        }
        self.objects.remove(&path);
        reply(StatusCode::OK, &obj)
    }
}

/// Whether `obj` is being deleted and its last finalizer is gone.
fn finalized(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some()
        && obj
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
}

/// An apply's merge: maps merged key by key, anything else (lists included) replaced.
fn merge_apply(doc: &mut Value, patch: &Value) {
    match (doc, patch) {
        (Value::Object(d), Value::Object(p)) => {
            for (k, v) in p {
                match d.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => {
                        merge_apply(existing, v)
                    }
                    _ => {
                        d.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (doc, patch) => *doc = patch.clone(),
    }
}

fn matches_labels(obj: &Value, selector: &str) -> bool {
    selector.split(',').filter(|p| !p.is_empty()).all(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = v.trim_start_matches('=');
        obj.pointer("/metadata/labels")
            .and_then(|l| l.get(k))
            .and_then(Value::as_str)
            .is_some_and(|have| v.is_empty() || have == v)
    })
}

/// The APIResourceList of a group/version path the fake serves.
fn discovery(path: &str) -> Option<Value> {
    let resources: Vec<Value> = KINDS
        .iter()
        .filter(|k| k.0 == path)
        .map(|(_, plural, kind, namespaced)| {
            json!({"name": plural, "singularName": kind.to_lowercase(), "namespaced": namespaced,
                "kind": kind, "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]})
        })
        .collect();
    if resources.is_empty() {
        return None;
    }
    let group_version = path
        .trim_start_matches("/apis/")
        .trim_start_matches("/api/");
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1",
        "groupVersion": group_version, "resources": resources}))
}

/// The collection, name and subresource a resource path points at.
fn target(path: &str) -> Option<Target> {
    let (prefix, rest) = KINDS
        .iter()
        .map(|k| k.0)
        .filter_map(|p| Some((p, path.strip_prefix(p)?.strip_prefix('/')?)))
        .next()?;
    let segs: Vec<&str> = rest.split('/').collect();
    let (ns, segs) = match segs.as_slice() {
        ["namespaces", ns, more @ ..] if !more.is_empty() => (Some(*ns), more.to_vec()),
        _ => (None, segs),
    };
    let plural = segs.first()?.to_string();
    let collection = match ns {
        Some(ns) => format!("{prefix}/namespaces/{ns}/{plural}"),
        None => format!("{prefix}/{plural}"),
    };
    Some(Target {
        collection,
        plural,
        name: segs.get(1).map(|s| s.to_string()),
        sub: segs.get(2).map(|s| s.to_string()),
    })
}

fn namespace_of(collection: &str) -> Option<String> {
    let (_, after) = collection.split_once("/namespaces/")?;
    Some(after.split('/').next()?.to_string())
}

/// `configmaps/out`, `compositions/app/status`: a path without its group, version and
/// namespace.
fn short(path: &str) -> String {
    let Some(t) = target(path) else {
        return path.to_string();
    };
    [Some(t.plural), t.name, t.sub]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("/")
}

fn patch_kind(content_type: &str) -> &'static str {
    match content_type {
        c if c.contains("apply-patch") => "apply",
        c if c.contains("json-patch") => "json",
        c if c.contains("strategic") => "strategic",
        _ => "merge",
    }
}

fn reply(code: StatusCode, body: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap_or_default()))
        .expect("a response")
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    reply(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": message, "reason": reason, "code": code.as_u16()}),
    )
}
