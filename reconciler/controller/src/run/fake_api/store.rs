//! The fake API's objects and what changes them: create, replace, patch (merge, JSON, apply),
//! delete with finalizers; each change gets a resourceVersion, is kept in a history and is
//! sent to the watches that select it.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use serde_json::{Value, json};

use super::select::{Selection, Target};

/// Kinds whose status is a subresource (a write of the object leaves it alone).
const WITH_STATUS: &[&str] = &[
    "compositions",
    "synthesizers",
    "resourceslices",
    "symphonies",
];

/// An answer: a status code and a JSON body.
pub(super) type Answer = (u16, Value);

/// An open watch: what it selects, and where its events go.
pub(super) struct Watching {
    pub(super) selection: Selection,
    pub(super) events: tokio::sync::mpsc::UnboundedSender<Bytes>,
}

/// How a write changes the stored object.
pub(super) enum Write {
    Replace,
    /// A patch of this content type.
    Patch(String),
}

#[derive(Default)]
pub(super) struct Store {
    /// Object path (`/api/v1/namespaces/ns/configmaps/out`) → object.
    pub(super) objects: BTreeMap<String, Value>,
    rv: u64,
    /// Every change: (resourceVersion, event type, path, object).
    history: Vec<(u64, &'static str, String, Value)>,
    pub(super) watches: Vec<Watching>,
    pub(super) calls: Vec<String>,
    /// Requests held open, never answered.
    pub(super) hung: Vec<String>,
}

impl Store {
    /// Stores `obj` at `path` (or removes it: `None`) under a new resourceVersion, and tells the
    /// watches.
    pub(super) fn commit(&mut self, path: &str, obj: Option<Value>) -> Value {
        self.rv += 1;
        let rv = self.rv;
        let (kind, obj) = match obj {
            Some(mut o) => {
                o["metadata"]["resourceVersion"] = json!(rv.to_string());
                let kind = if self.objects.contains_key(path) {
                    "MODIFIED"
                } else {
                    "ADDED"
                };
                self.objects.insert(path.to_string(), o.clone());
                (kind, o)
            }
            None => {
                let mut o = self.objects.remove(path).unwrap_or(Value::Null);
                o["metadata"]["resourceVersion"] = json!(rv.to_string());
                ("DELETED", o)
            }
        };
        let line = event_line(kind, &obj);
        self.watches
            .retain(|w| !w.selection.matches(path, &obj) || w.events.send(line.clone()).is_ok());
        self.history.push((rv, kind, path.to_string(), obj.clone()));
        obj
    }

    /// Opens a watch of `selection` from resourceVersion `since`: the changes after it first.
    pub(super) fn watch(
        &mut self,
        selection: Selection,
        since: u64,
    ) -> tokio::sync::mpsc::UnboundedReceiver<Bytes> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        for (rv, kind, path, obj) in &self.history {
            if *rv > since && selection.matches(path, obj) {
                let _ = tx.send(event_line(kind, obj));
            }
        }
        self.watches.push(Watching {
            selection,
            events: tx,
        });
        rx
    }

    pub(super) fn list(&self, t: &Target, q: &HashMap<String, String>) -> Value {
        let selection = Selection::of(t, q);
        let items: Vec<Value> = self
            .objects
            .iter()
            .filter(|(path, obj)| selection.matches(path, obj))
            .map(|(_, v)| v.clone())
            .collect();
        json!({"kind": format!("{}List", t.kind()), "apiVersion": "v1",
            "metadata": {"resourceVersion": self.rv.to_string()}, "items": items})
    }

    pub(super) fn create(&mut self, t: &Target, mut obj: Value, dry_run: bool) -> Answer {
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .map(String::from)
            .or_else(|| {
                let prefix = obj.pointer("/metadata/generateName")?.as_str()?;
                Some(format!("{prefix}{}", self.rv + 1))
            })
            .unwrap_or_default();
        let path = t.object_path(&name);
        if self.objects.contains_key(&path) {
            return failure(409, "AlreadyExists", &name);
        }
        let meta = &mut obj["metadata"];
        meta["name"] = json!(name);
        meta["uid"] = json!(format!("uid-{}", self.rv + 1));
        meta["generation"] = json!(1);
        meta["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        if let Some(ns) = &t.namespace {
            meta["namespace"] = json!(ns);
        }
        if dry_run {
            return (201, obj);
        }
        (201, self.commit(&path, Some(obj)))
    }

    pub(super) fn write(&mut self, t: &Target, body: &Value, how: &Write, dry_run: bool) -> Answer {
        let name = t.name.clone().unwrap_or_default();
        let path = t.object_path(&name);
        let old = self.objects.get(&path).cloned();
        let apply = matches!(how, Write::Patch(ct) if ct.contains("apply-patch"));
        let Some(old) = old.or_else(|| apply.then(|| json!({"metadata": {}}))) else {
            return failure(404, "NotFound", &name);
        };
        let sent_rv = body
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str);
        let old_rv = old
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str);
        if sent_rv.is_some() && old_rv.is_some() && sent_rv != old_rv {
            return failure(409, "Conflict", &name);
        }
        let mut new = match changed(&old, body, how) {
            Ok(new) => new,
            Err(answer) => return answer,
        };
        self.settle(t, &old, &mut new, &name);
        let created = !self.objects.contains_key(&path);
        if !created && old == new {
            return (200, new);
        }
        if dry_run {
            return (if created { 201 } else { 200 }, new);
        }
        let stored = if finalized(&new) {
            self.commit(&path, None)
        } else {
            self.commit(&path, Some(new))
        };
        (if created { 201 } else { 200 }, stored)
    }

    /// What the API server keeps whatever a write says: identity, the other half of a status
    /// subresource, the generation (bumped by a change outside status and metadata).
    fn settle(&mut self, t: &Target, old: &Value, new: &mut Value, name: &str) {
        let status_kind = WITH_STATUS.contains(&t.plural.as_str());
        let keep_status = |from: &Value, into: &mut Value| match from.get("status") {
            Some(s) => into["status"] = s.clone(),
            None => drop(into.as_object_mut().map(|o| o.remove("status"))),
        };
        match (t.sub.as_deref(), status_kind) {
            (Some("status"), _) => {
                let written = new.clone();
                *new = old.clone();
                keep_status(&written, new);
            }
            (_, true) => keep_status(old, new),
            _ => {}
        }
        for key in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "generation",
        ] {
            match old.pointer(&format!("/metadata/{key}")) {
                Some(v) => new["metadata"][key] = v.clone(),
                None if key == "uid" => {
                    new["metadata"][key] = json!(format!("uid-{}", self.rv + 1))
                }
                None => {}
            }
        }
        new["metadata"]["name"] = json!(name);
        if let Some(ns) = &t.namespace {
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

    pub(super) fn delete(&mut self, t: &Target, dry_run: bool) -> Answer {
        let name = t.name.clone().unwrap_or_default();
        let path = t.object_path(&name);
        let Some(mut obj) = self.objects.get(&path).cloned() else {
            return failure(404, "NotFound", &name);
        };
        if dry_run {
            return (200, obj);
        }
        let finalizers = obj
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array);
        if finalizers.is_some_and(|f| !f.is_empty()) {
            if obj.pointer("/metadata/deletionTimestamp").is_some() {
                return (200, obj);
            }
            obj["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:01Z");
            return (200, self.commit(&path, Some(obj)));
        }
        (200, self.commit(&path, None))
    }
}

/// `old` changed as `how` says with `body`.
fn changed(old: &Value, body: &Value, how: &Write) -> Result<Value, Answer> {
    let mut doc = old.clone();
    match how {
        Write::Replace => return Ok(body.clone()),
        Write::Patch(ct) if ct.contains("json-patch") => {
            let ops: json_patch::Patch = serde_json::from_value(body.clone())
                .map_err(|e| failure(400, "BadRequest", &e.to_string()))?;
            json_patch::patch(&mut doc, &ops)
                .map_err(|e| failure(422, "Invalid", &e.to_string()))?;
        }
        Write::Patch(ct) if ct.contains("apply-patch") => merge_apply(&mut doc, body),
        Write::Patch(_) => json_patch::merge(&mut doc, body),
    }
    Ok(doc)
}

/// Whether `obj` is being deleted and its last finalizer is gone.
fn finalized(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some()
        && obj
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
}

/// An apply's merge: maps merged key by key, anything else (lists included) replaced. (A real
/// server-side apply also removes what the manager no longer sets and merges keyed lists; the
/// tier's objects never need either.)
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

/// One watch event as the API server streams it: a JSON line.
fn event_line(kind: &str, obj: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": obj})).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

/// A `Status` failure.
pub(super) fn failure(code: u16, reason: &str, message: &str) -> Answer {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": message, "reason": reason, "code": code}),
    )
}
