//! Live state of the resources of a synthesis, from the shared metadata cache.
//!
//! Decides, per resource, whether the cached metadata is enough ([`needs_get`], pure) — an
//! in-sync resource whose readiness has latched costs no request at all, a new one the cache
//! lacks none either (its first write is guarded) — and fetches the rest with bounded
//! concurrency. Also builds what the planner needs to know about earlier
//! applies ([`recorded`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, GroupVersionKind};
use plan::plan::PreparedResource;
use plan::{Recorded, ResourceKey};
use serde_json::{Value, json};

use super::super::slices::Loaded;
use super::super::watches::ManagedView;
use super::{Context, Error};
use reconciler_core::model::gvk_of_manifest;

/// A resource's live state.
pub(crate) struct Observation {
    /// Its API (`None`: the kind is not served yet).
    pub api: Option<Api<DynamicObject>>,
    /// The live object: full when fetched, metadata only when the cache sufficed.
    pub live: Option<Value>,
    /// Read with a GET in this pass (not from a watch's cache).
    pub read: bool,
}

/// What the caller needs full objects for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Needs {
    /// The Composition is being deleted (existence is all that matters).
    pub deleting: bool,
    /// Every live object in full (observed outputs are compared).
    pub everything: bool,
}

/// What the cache says about one resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cached<'a> {
    /// No synced cache for the kind.
    Unknown,
    /// The synced cache does not have it.
    Absent,
    /// The cache has it at this resourceVersion.
    Present(Option<&'a str>),
}

/// Whether a resource must be read with a GET, given what the cache says. Pure.
///
/// The cache is enough when it confirms what the last apply recorded and nothing needs the
/// object's body: the resourceVersion matches, readiness has latched (or the resource is
/// being deleted) and no override reads `self`. A cache that disagrees with the record (it
/// may lag behind enoki's own write, or someone else wrote) costs a GET, never a write.
pub(crate) fn needs_get(
    r: &PreparedResource,
    recorded: Option<&Recorded>,
    cached: Cached<'_>,
    needs: Needs,
    deleted: bool,
) -> bool {
    if needs.everything {
        return true;
    }
    let applied = recorded.and_then(|r| r.applied_hash.as_ref()).is_some();
    let recorded_rv = recorded.and_then(|r| r.applied_resource_version.as_deref());
    let removing = needs.deleting || r.tombstone;
    match cached {
        Cached::Unknown => true,
        // Confirmed deleted earlier: nothing to check. Applied and now missing from the cache:
        // confirm (the cache may lag behind).
        Cached::Absent if removing => applied && !deleted,
        // Absent from a synced cache, yet it may exist: the cache can lag behind another
        // Composition's create of the same object by a few milliseconds, and applying blind
        // would take it over. Never applied: not read, its first write is guarded instead (it
        // creates only; see `execute`). Applied before and now missing: read (the cache may
        // lag behind enoki's own write, or someone deleted it). A resource enoki never writes
        // (`disable-reconciliation`) has no guarded write to find it: read.
        Cached::Absent => applied || r.settings.disable_reconciliation,
        Cached::Present(_) if removing => false,
        Cached::Present(rv) => {
            rv.is_none()
                || rv != recorded_rv
                || !r.overrides.is_empty()
                || recorded.is_none_or(|rec| rec.ready.is_none())
        }
    }
}

/// Observes every resource of `prepared`; GETs (and the writes that reuse their APIs) go
/// through `client` (the Composition's impersonating client, or the controller's).
///
/// # Errors
/// A GET that failed for another reason than absence.
pub(crate) async fn observe(
    ctx: &Arc<Context>,
    client: &kube::Client,
    comp: &crds::Composition,
    prepared: &plan::Prepared,
    recorded: &HashMap<ResourceKey, Recorded>,
    deleted_keys: &std::collections::BTreeSet<ResourceKey>,
    needs: Needs,
) -> Result<HashMap<ResourceKey, Observation>, Error> {
    let mut views: HashMap<String, Option<ManagedView>> = HashMap::new();
    let mut out = HashMap::new();
    let mut fetch = Vec::new();
    let uid = comp.metadata.uid.as_deref().unwrap_or_default();
    let read_first = ctx.state.memory.apply(uid, |m| m.read_first.clone());
    for r in &prepared.resources {
        let deleted = deleted_keys.contains(&r.key);
        let cached = from_cache(ctx, client, comp, r, &mut views, |cached| {
            // A guarded write found it existing where the cache has nothing: read it.
            let cached = match cached {
                Cached::Absent if read_first.contains(&r.key) => Cached::Unknown,
                other => other,
            };
            needs_get(r, recorded.get(&r.key), cached, needs, deleted)
        })
        .await;
        match cached {
            FromCache::Done(o) => {
                out.insert(r.key.clone(), o);
            }
            FromCache::Fetch(api, gvk) => fetch.push((r.key.clone(), api, gvk)),
        }
    }
    ctx.report.metrics.observe_gets.inc_by(fetch.len() as u64);
    ctx.report
        .metrics
        .resource_checks
        .inc_by(prepared.resources.len() as u64);
    let fetched: Vec<Result<(ResourceKey, Observation), Error>> = futures::stream::iter(fetch)
        .map(|(key, api, gvk)| fetch_one(ctx, key, api, gvk))
        .buffer_unordered(ctx.opts.apply.apply_concurrency.max(1))
        .collect()
        .await;
    for f in fetched {
        let (key, o) = f?;
        out.insert(key, o);
    }
    if !read_first.is_empty() {
        ctx.state
            .memory
            .apply(uid, |m| still_read_first(&mut m.read_first, &out));
    }
    Ok(out)
}

/// Reads one resource with a GET (its API, and its kind for discovery).
async fn fetch_one(
    ctx: &Arc<Context>,
    key: ResourceKey,
    api: Api<DynamicObject>,
    gvk: GroupVersionKind,
) -> Result<(ResourceKey, Observation), Error> {
    let live = match api.get_opt(&key.name).await {
        Ok(found) => found.map(|o| serde_json::to_value(o).unwrap_or_default()),
        // The kind went away (its CRD was deleted): not served. Discovery forgets it, so
        // the CR waits for its CRD (applied again) and the kind is looked up afresh.
        Err(e) if crate::run::error::kind_not_served(&e) => {
            ctx.clusters.forget_target(&gvk);
            let unserved = Observation {
                api: None,
                live: None,
                read: true,
            };
            return Ok((key, unserved));
        }
        // The Composition's ServiceAccount may not read it: planned as absent, so the
        // write is attempted and its 403 becomes this resource's error, not the pass's.
        Err(kube::Error::Api(resp)) if resp.code == 403 => None,
        Err(source) => {
            return Err(Error::ReadResource {
                key: key.clone(),
                source,
            });
        }
    };
    Ok((
        key,
        Observation {
            api: Some(api),
            live,
            read: true,
        },
    ))
}

/// Keys no longer emitted are not read first any more. The others stay until a write of
/// them succeeds (see `execute`): one that exists may never reach the cache (not labelled as
/// enoki's, another shard's), and a guarded write would only be refused again.
fn still_read_first(
    keys: &mut std::collections::BTreeSet<ResourceKey>,
    out: &HashMap<ResourceKey, Observation>,
) {
    keys.retain(|k| out.contains_key(k));
}

/// What the cache answered for one resource.
enum FromCache {
    /// Enough: the observation (metadata only, or absent, or the kind is not served).
    Done(Observation),
    /// Read it with this API (of this kind).
    Fetch(Api<DynamicObject>, GroupVersionKind),
}

/// Looks a resource up in the metadata cache of its kind (started on first use) and asks
/// `get` (given what the cache says) whether that suffices.
async fn from_cache(
    ctx: &Arc<Context>,
    client: &kube::Client,
    comp: &crds::Composition,
    r: &PreparedResource,
    views: &mut HashMap<String, Option<ManagedView>>,
    get: impl Fn(Cached<'_>) -> bool,
) -> FromCache {
    let unknown = || {
        FromCache::Done(Observation {
            api: None,
            live: None,
            read: false,
        })
    };
    // A Patch observes its target (never labelled by enoki, so always read in full).
    let target;
    let manifest = match &r.patch {
        Some((api_version, kind)) => {
            target = json!({"apiVersion": api_version, "kind": kind});
            &target
        }
        None => &r.manifest,
    };
    let Some(gvk) = gvk_of_manifest(manifest) else {
        return unknown();
    };
    // Not served (yet): e.g. a CRD from this synthesis is not Established.
    let Ok((ar, namespaced)) = ctx.clusters.resolve_target(&gvk).await else {
        return unknown();
    };
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(client.clone(), &r.key.namespace, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    let view_key = format!("{}/{}/{}", gvk.group, gvk.version, gvk.kind);
    if !views.contains_key(&view_key) {
        let uid = comp.metadata.uid.as_deref().unwrap_or_default();
        let view = ctx.caches.watches.managed(&gvk, &ar, uid).await;
        views.insert(view_key.clone(), view);
    }
    let ns = if namespaced {
        r.key.namespace.as_str()
    } else {
        ""
    };
    let meta = views
        .get(&view_key)
        .and_then(Option::as_ref)
        .map(|v| v.get(ns, &r.key.name));
    let cached = match &meta {
        None => Cached::Unknown,
        Some(None) => Cached::Absent,
        Some(Some(m)) => Cached::Present(m.resource_version.as_deref()),
    };
    if r.patch.is_some() {
        // A Patch's target is someone else's object (not labelled by enoki): watched like an
        // input, so a foreign change to a patched field is patched again at once. Only on the
        // management cluster, where the input watches are.
        if ctx.clusters.target_is_management() {
            ctx.caches.watches.track(&gvk, &ar, ns, &r.key.name, comp);
            ctx.caches
                .watches
                .foreign_holds((&gvk, &ar), ns, &r.key.name, comp);
        }
        return FromCache::Fetch(api, gvk);
    }
    if get(cached) {
        return FromCache::Fetch(api, gvk);
    }
    let live = meta.flatten().map(|m| stub_of(r, ns, &m));
    FromCache::Done(Observation {
        api: Some(api),
        live,
        read: false,
    })
}

/// What the planner reads of a live object it does not need in full, from the managed-object
/// cache: identity, version, deletion, owner.
fn stub_of(r: &PreparedResource, ns: &str, m: &super::super::watches::Live) -> Value {
    let mut metadata = serde_json::Map::new();
    metadata.insert("name".into(), json!(r.key.name));
    if !ns.is_empty() {
        metadata.insert("namespace".into(), json!(ns));
    }
    metadata.insert("resourceVersion".into(), json!(m.resource_version));
    metadata.insert("uid".into(), json!(m.uid()));
    if let Some(t) = &m.deletion_timestamp {
        metadata.insert("deletionTimestamp".into(), json!(t));
    }
    if let Some(owner) = &m.owner {
        metadata.insert(
            "labels".into(),
            json!({ crds::names::annotations::MANAGED_BY.enoki: &**owner }),
        );
    }
    json!({
        "apiVersion": r.manifest.get("apiVersion"),
        "kind": r.manifest.get("kind"),
        "metadata": metadata,
    })
}

/// Whether the observed outputs differ from the digest the synthesis recorded.
pub(crate) fn outputs_changed(
    prepared: &plan::Prepared,
    observations: &HashMap<ResourceKey, Observation>,
    seen: &str,
) -> bool {
    let now = super::super::inputs::observed_digest(
        prepared
            .resources
            .iter()
            .filter(|r| !r.tombstone)
            .filter_map(|r| Some((&r.key, observations.get(&r.key)?.live.as_ref()?))),
    );
    now != seen
}

/// What earlier passes recorded per resource: the applied hash and resourceVersion (carried
/// over from the previous synthesis when this one has none yet), the latched ready time, and
/// whether a `drift: interval` check is due (marked as done now).
pub(crate) fn recorded(
    ctx: &Context,
    uid: &str,
    prepared: &plan::Prepared,
    loaded: &Loaded,
    carried: &HashMap<ResourceKey, (Option<String>, Option<String>)>,
) -> HashMap<ResourceKey, Recorded> {
    let started = Instant::now();
    let due: std::collections::BTreeSet<ResourceKey> = ctx.state.memory.apply(uid, |m| {
        prepared
            .resources
            .iter()
            .filter(|r| r.settings.drift == plan::Drift::Interval)
            .filter_map(|r| {
                let interval = r
                    .settings
                    .reconcile_interval?
                    .max(ctx.opts.apply.min_reconcile_interval);
                let is_due = m
                    .interval_checks
                    .get(&r.key)
                    .is_none_or(|t| started.duration_since(*t) >= interval);
                if is_due {
                    m.interval_checks.insert(r.key.clone(), started);
                }
                is_due.then(|| r.key.clone())
            })
            .collect()
    });
    loaded
        .resources
        .iter()
        .map(|r| {
            let state = loaded.slices[r.slice].states.get(r.index);
            let (hash, rv) = match state {
                Some(s) if s.applied_hash.is_some() => {
                    (s.applied_hash.clone(), s.applied_resource_version.clone())
                }
                _ => carried.get(&r.key).cloned().unwrap_or_default(),
            };
            let rec = Recorded {
                applied_hash: hash,
                applied_resource_version: rv,
                ready: state
                    .and_then(|s| s.ready.as_ref())
                    .map(|t| t.0.to_string()),
                interval_due: due.contains(&r.key),
            };
            (r.key.clone(), rec)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(overrides: bool, tombstone: bool) -> PreparedResource {
        let manifest = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "n", "annotations": if overrides {
                json!({"enoki.dev/overrides": r#"[{"path": "self.data.x", "value": "1"}]"#})
            } else { json!({}) }}});
        let info = plan::CompositionInfo {
            name: "c".into(),
            namespace: "n".into(),
            uid: "u".into(),
            labels: Default::default(),
            annotations: Default::default(),
            deleting: false,
            deletion_timestamp: None,
            gone_owners: Default::default(),
            unrecorded: false,
            shard: None,
        };
        let p = plan::prepare(
            &[plan::Desired {
                manifest,
                tombstone,
            }],
            &info,
        )
        .unwrap();
        p.resources.into_iter().next().unwrap()
    }

    fn rec(rv: &str, ready: bool) -> Recorded {
        Recorded {
            applied_hash: Some("v1:h".into()),
            applied_resource_version: Some(rv.into()),
            ready: ready.then(|| "2026-01-01T00:00:00Z".into()),
            interval_due: false,
        }
    }

    /// What the last apply recorded of the resource.
    #[derive(Clone, Copy)]
    enum Record {
        None,
        /// Applied at this resourceVersion, readiness latched or not.
        Applied(&'static str, bool),
        /// Confirmed deleted (no applied hash).
        Gone,
    }

    /// What a pass needs the object for.
    #[derive(Clone, Copy)]
    enum Pass {
        Apply,
        Everything,
    }

    /// Whether a GET is needed, case by case (the resource: its overrides read `self`, it is a
    /// tombstone, or it is created plainly (`replace`)).
    #[test]
    fn a_hands_off_resource_absent_from_the_cache_is_read() {
        // Never written by enoki: no guarded write would find it; whether it exists and how
        // ready it is are read.
        let mut r = resource(false, false);
        r.settings.disable_reconciliation = true;
        let needs = Needs {
            deleting: false,
            everything: false,
        };
        assert!(needs_get(&r, None, Cached::Absent, needs, false));
    }

    #[rstest::rstest]
    #[case::in_sync_and_ready_needs_no_request(
        false,
        false,
        false,
        Record::Applied("7", true),
        Cached::Present(Some("7")),
        Pass::Apply,
        false
    )]
    #[case::the_cache_ahead_of_the_record(
        false,
        false,
        false,
        Record::Applied("7", true),
        Cached::Present(Some("8")),
        Pass::Apply,
        true
    )]
    #[case::applied_and_absent_from_the_cache(
        false,
        false,
        false,
        Record::Applied("7", true),
        Cached::Absent,
        Pass::Apply,
        true
    )]
    #[case::no_synced_cache(
        false,
        false,
        false,
        Record::Applied("7", true),
        Cached::Unknown,
        Pass::Apply,
        true
    )]
    #[case::readiness_not_latched(
        false,
        false,
        false,
        Record::Applied("7", false),
        Cached::Present(Some("7")),
        Pass::Apply,
        true
    )]
    #[case::overrides_read_self(
        true,
        false,
        false,
        Record::Applied("7", true),
        Cached::Present(Some("7")),
        Pass::Apply,
        true
    )]
    // Another Composition may have created it a moment ago (the cache lags behind): not read,
    // its first write is guarded (a plain create is refused by nature).
    #[case::new_and_absent_from_the_cache(
        false,
        false,
        false,
        Record::None,
        Cached::Absent,
        Pass::Apply,
        false
    )]
    #[case::new_plain_create_absent(
        false,
        false,
        true,
        Record::None,
        Cached::Absent,
        Pass::Apply,
        false
    )]
    // Applied before and missing from the cache: read (lag behind enoki's own write, or gone).
    #[case::applied_and_absent_from_the_cache(
        false,
        false,
        false,
        Record::Applied("7", true),
        Cached::Absent,
        Pass::Apply,
        true
    )]
    // Deletion trusts the cache for existence.
    #[case::tombstone_present_at_another_version(
        false,
        true,
        false,
        Record::Applied("7", true),
        Cached::Present(Some("9")),
        Pass::Apply,
        false
    )]
    #[case::tombstone_confirmed_gone(
        false,
        true,
        false,
        Record::Gone,
        Cached::Absent,
        Pass::Apply,
        false
    )]
    #[case::tombstone_gone_but_every_object_needed(
        false,
        true,
        false,
        Record::Gone,
        Cached::Absent,
        Pass::Everything,
        true
    )]
    fn needs_a_get(
        #[case] overrides: bool,
        #[case] tombstone: bool,
        #[case] replace: bool,
        #[case] record: Record,
        #[case] cached: Cached<'static>,
        #[case] pass: Pass,
        #[case] expected: bool,
    ) {
        let mut r = resource(overrides, tombstone);
        r.settings.replace = replace;
        let recorded = match record {
            Record::None => None,
            Record::Applied(rv, ready) => Some(rec(rv, ready)),
            Record::Gone => Some(Recorded {
                applied_hash: None,
                ..rec("7", true)
            }),
        };
        let needs = Needs {
            deleting: false,
            everything: matches!(pass, Pass::Everything),
        };
        assert_eq!(
            needs_get(&r, recorded.as_ref(), cached, needs, false),
            expected
        );
    }
}
