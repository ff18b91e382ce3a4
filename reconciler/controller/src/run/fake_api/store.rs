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

/// An open watch: what it selects, where its events go, and the resourceVersion it has seen.
pub(super) struct Watching {
    pub(super) selection: Selection,
    pub(super) events: tokio::sync::mpsc::UnboundedSender<Bytes>,
    pub(super) since: u64,
}

/// How a write changes the stored object.
pub(super) enum Write {
    Replace,
    /// A patch of this content type.
    Patch(String),
}

/// One change: its resourceVersion, the path, the object before and after (`None`: absent).
type Change = (u64, String, Option<Value>, Option<Value>);

#[derive(Default)]
pub(super) struct Store {
    /// Object path (`/api/v1/namespaces/ns/configmaps/out`) → object.
    pub(super) objects: BTreeMap<String, Value>,
    rv: u64,
    /// Every change sent to the watches, in order.
    history: Vec<Change>,
    /// Changes made since the watches were last told (see [`Store::deliver`]).
    pending: Vec<Change>,
    pub(super) watches: Vec<Watching>,
    pub(super) calls: Vec<String>,
    /// Requests held open, never answered.
    pub(super) hung: Vec<String>,
    /// Objects another client creates just before the first request with this label reaches
    /// the server (their watch events come later: at the next `deliver`).
    pub(super) created_before: Vec<(String, String, Value)>,
    /// The last UID handed out.
    uids: u64,
}

impl Store {
    /// A new UID.
    pub(super) fn uid(&mut self) -> String {
        self.uids += 1;
        format!("00000000-0000-4000-8000-{:012}", self.uids)
    }

    /// Stores `obj` at `path` (or removes it: `None`) under a new resourceVersion; the watches
    /// hear of it at the next [`Store::deliver`].
    pub(super) fn commit(&mut self, path: &str, obj: Option<Value>) -> Value {
        self.rv += 1;
        let rv = self.rv;
        let before = self.objects.get(path).cloned();
        let after = obj.map(|mut o| {
            o["metadata"]["resourceVersion"] = json!(rv.to_string());
            self.objects.insert(path.to_string(), o.clone());
            o
        });
        if after.is_none() {
            self.objects.remove(path);
        }
        self.pending
            .push((rv, path.to_string(), before.clone(), after.clone()));
        after.or(before).unwrap_or(Value::Null)
    }

    /// Tells the watches of every change made since the last call, as the API server does a
    /// moment after each write: an object that starts matching a watch's selectors is ADDED
    /// to it, one that stops matching (or is deleted) DELETED.
    pub(super) fn deliver(&mut self) {
        for change in std::mem::take(&mut self.pending) {
            for w in &mut self.watches {
                if let Some(line) = event_for(&w.selection, w.since, &change) {
                    let _ = w.events.send(line);
                    w.since = change.0;
                }
            }
            self.watches.retain(|w| !w.events.is_closed());
            self.history.push(change);
        }
    }

    /// Opens a watch of `selection` from resourceVersion `since` (the changes after it first,
    /// as the API server replays them; none before it, so a watch of a fresh list sees no
    /// change twice).
    pub(super) fn watch(
        &mut self,
        selection: Selection,
        since: u64,
    ) -> tokio::sync::mpsc::UnboundedReceiver<Bytes> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        for change in &self.history {
            if let Some(line) = event_for(&selection, since, change) {
                let _ = tx.send(line);
            }
        }
        self.watches.push(Watching {
            selection,
            events: tx,
            since: since.max(self.history.last().map_or(0, |c| c.0)),
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
        let uid = self.uid();
        let meta = &mut obj["metadata"];
        meta["name"] = json!(name);
        meta["uid"] = json!(uid);
        if t.has_generation() {
            meta["generation"] = json!(1);
        }
        meta["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        if let Some(ns) = &t.namespace {
            meta["namespace"] = json!(ns);
        }
        // A create never sets the status of a kind whose status is a subresource.
        if WITH_STATUS.contains(&t.plural.as_str())
            && let Some(o) = obj.as_object_mut()
        {
            o.remove("status");
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
        // An apply creates a missing object (not a missing object's status).
        let apply =
            matches!(how, Write::Patch(ct) if ct.contains("apply-patch")) && t.sub.is_none();
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
        for key in ["uid", "creationTimestamp", "deletionTimestamp"] {
            match old.pointer(&format!("/metadata/{key}")) {
                Some(v) => new["metadata"][key] = v.clone(),
                None if key == "uid" => new["metadata"][key] = json!(self.uid()),
                None if key == "creationTimestamp" => {
                    new["metadata"][key] = json!("2026-01-01T00:00:00Z")
                }
                None => drop(new["metadata"].as_object_mut().map(|m| m.remove(key))),
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
        if !t.has_generation() {
            return;
        }
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
            // Graceful deletion: the timestamp set, the generation bumped.
            obj["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:01Z");
            if let Some(g) = obj.pointer("/metadata/generation").and_then(Value::as_i64) {
                obj["metadata"]["generation"] = json!(g + 1);
            }
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

/// The event `change` makes for a watch of `selection` that has seen up to `since`.
fn event_for(selection: &Selection, since: u64, change: &Change) -> Option<Bytes> {
    let (rv, path, before, after) = change;
    if *rv <= since {
        return None;
    }
    let was = before.as_ref().is_some_and(|o| selection.matches(path, o));
    let is = after.as_ref().is_some_and(|o| selection.matches(path, o));
    let (kind, obj) = match (was, is, after) {
        (false, true, Some(o)) => ("ADDED", o.clone()),
        (true, true, Some(o)) => ("MODIFIED", o.clone()),
        (true, false, Some(o)) => ("DELETED", o.clone()),
        (true, false, None) => {
            let mut gone = before.clone().unwrap_or(Value::Null);
            gone["metadata"]["resourceVersion"] = json!(rv.to_string());
            ("DELETED", gone)
        }
        _ => return None,
    };
    Some(event_line(kind, &obj))
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
