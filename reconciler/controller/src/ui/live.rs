//! What keeps `enoki ui` live: watches of Compositions, Synthesizers and Symphonies (cached,
//! so the fleet is served without a request to the API server) and of ResourceSlices'
//! metadata (their status carries each resource's readiness; their manifests, which may hold
//! Secrets, are never read here). Every change is announced on a broadcast channel the page
//! listens to through server-sent events.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::{Stream, StreamExt as _};
use kube::api::{Api, ListParams};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Resource, ResourceExt as _};
use serde::Serialize;
use tokio::sync::broadcast;

use crds::{Composition, ResourceSlice, Symphony, Synthesizer};

/// A change the page may want to show: what changed (`kind` `*` after a watch (re)listed).
#[derive(Clone, Debug, Serialize)]
pub struct Change {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
}

/// The last error of each watch: kind → (message, when it last failed).
pub type Errors = Arc<parking_lot::Mutex<BTreeMap<&'static str, (String, std::time::Instant)>>>;

/// How long an error is shown after the watch last failed: a watch that resumes after an error
/// says nothing (no event until something changes), and a failing one retries every 30–60 s
/// (the backoff's cap with its jitter), plus the request's own time.
const ERROR_SHOWN_FOR: std::time::Duration = std::time::Duration::from_secs(120);

/// The errors of the watches still failing.
pub fn current(errors: &Errors) -> BTreeMap<&'static str, String> {
    errors
        .lock()
        .iter()
        .filter(|(_, (_, at))| at.elapsed() < ERROR_SHOWN_FOR)
        .map(|(k, (e, _))| (*k, e.clone()))
        .collect()
}

/// Which namespaces the page shows, and why not all.
#[derive(Clone, Debug, Serialize)]
pub struct Scope {
    /// One namespace, or every one (None).
    pub namespace: Option<String>,
    /// Why it is one namespace when the user did not ask for it.
    pub note: Option<String>,
}

/// The caches and the channel of changes.
#[derive(Clone)]
pub struct Live {
    pub compositions: Store<Composition>,
    pub synthesizers: Store<Synthesizer>,
    pub symphonies: Store<Symphony>,
    pub changes: broadcast::Sender<Change>,
    /// The last error of each watch (kind → message, when), cleared when it works again.
    pub errors: Errors,
    /// The namespace watched (None: every one).
    namespace: Option<String>,
}

/// Every namespace when the account may list Compositions across them (or `asked`), else
/// the kubeconfig's namespace, with a note saying so.
///
/// # Errors
/// The API server cannot be reached, or refuses the namespace's list too.
pub async fn scope(
    client: &kube::Client,
    asked: Option<&str>,
    default_ns: &str,
) -> anyhow::Result<Scope> {
    if let Some(ns) = asked {
        // Refused at once, not as an empty page.
        Api::<Composition>::namespaced(client.clone(), ns)
            .list_metadata(&ListParams::default().limit(1))
            .await
            .map_err(|e| crate::verbs::api_error(&format!("listing Compositions in {ns}"), e))?;
        return Ok(Scope {
            namespace: Some(ns.to_string()),
            note: None,
        });
    }
    let all: Api<Composition> = Api::all(client.clone());
    match all.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(Scope {
            namespace: None,
            note: None,
        }),
        Err(kube::Error::Api(e)) if e.code == 403 => Ok(Scope {
            namespace: Some(default_ns.to_string()),
            note: Some(format!(
                "listing Compositions in every namespace is forbidden for this account; \
                 showing namespace {default_ns} (`enoki ui -n <namespace>` for another)"
            )),
        }),
        Err(e) => Err(crate::verbs::api_error("listing Compositions", e)),
    }
}

impl Live {
    /// Starts the watches (they retry with a backoff for as long as the process lives).
    pub fn start(client: &kube::Client, scope: &Scope) -> Live {
        let (changes, _) = broadcast::channel(4096);
        let errors = Arc::new(parking_lot::Mutex::new(BTreeMap::new()));
        let ns = scope.namespace.as_deref();
        let live = Live {
            compositions: cached(api(client, ns), &changes, &errors),
            synthesizers: cached(Api::all(client.clone()), &changes, &errors),
            symphonies: cached(api(client, ns), &changes, &errors),
            changes,
            errors,
            namespace: scope.namespace.clone(),
        };
        let slices: Api<PartialObjectMeta<ResourceSlice>> = match ns {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        let events = watcher(slices, watcher::Config::default()).default_backoff();
        // A slice's change is its Composition's.
        tokio::spawn(announce(
            events,
            live.changes.clone(),
            live.errors.clone(),
            |m| {
                Some(
                    m.labels()
                        .get(crds::names::SLICE_COMPOSITION_LABEL)
                        .cloned()
                        .unwrap_or_default(),
                )
            },
        ));
        live
    }
}

impl Live {
    /// Whether the caches hold namespace `ns` (a Composition missing there does not exist).
    pub fn covers(&self, ns: &str) -> bool {
        self.namespace.as_deref().is_none_or(|n| n == ns)
    }
}

fn api<K>(client: &kube::Client, ns: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// A cache of `api`'s objects kept by a watch that announces each change.
fn cached<K>(api: Api<K>, changes: &broadcast::Sender<Change>, errors: &Errors) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let events = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|o: &mut K| o.meta_mut().managed_fields = None)
        .reflect(writer);
    tokio::spawn(announce(events, changes.clone(), errors.clone(), |_| None));
    store
}

/// Announces each event of `events`: an object's change as its own kind (or as the
/// Composition `composition_of` says it belongs to), a (re)list once it is done, an error by
/// kind.
async fn announce<K, S>(
    events: S,
    changes: broadcast::Sender<Change>,
    errors: Errors,
    composition_of: impl Fn(&K) -> Option<String>,
) where
    K: Resource<DynamicType = ()>,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    let kind: &'static str = leak_kind::<K>();
    let mut events = std::pin::pin!(events);
    let star = || Change {
        kind: "*",
        namespace: String::new(),
        name: String::new(),
    };
    while let Some(event) = events.next().await {
        // Listed, or an object arrived: the watch works again (a resumed watch sends no
        // InitDone). The page hears of every change of the errors.
        if matches!(
            event,
            Ok(watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_))
        ) && errors.lock().remove(kind).is_some()
        {
            let _ = changes.send(star());
        }
        let object = match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => o,
            Ok(watcher::Event::InitDone) => {
                let _ = changes.send(star());
                continue;
            }
            Ok(_) => continue,
            Err(e) => {
                let text = watch_error(&e);
                let now = std::time::Instant::now();
                let before = errors.lock().insert(kind, (text.clone(), now));
                if before.is_none_or(|(t, _)| t != text) {
                    let _ = changes.send(star());
                }
                continue;
            }
        };
        let namespace = object.meta().namespace.clone().unwrap_or_default();
        let (kind, name) = match composition_of(&object) {
            Some(c) if c.is_empty() => continue,
            Some(c) => ("Composition", c),
            None => (kind, object.meta().name.clone().unwrap_or_default()),
        };
        let _ = changes.send(Change {
            kind,
            namespace,
            name,
        });
    }
}

/// The kind of `K` as a `&'static str` (the four kinds watched here).
fn leak_kind<K: Resource<DynamicType = ()>>() -> &'static str {
    match K::kind(&()).as_ref() {
        "Composition" => "Composition",
        "Synthesizer" => "Synthesizer",
        "Symphony" => "Symphony",
        _ => "ResourceSlice",
    }
}

/// A watch error as the page says it (a refusal as what it means).
fn watch_error(e: &watcher::Error) -> String {
    let refused = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 403,
        watcher::Error::WatchError(s) => s.code == 403,
        _ => false,
    };
    if refused {
        "your account may not list them here (forbidden); the rest of the page is unaffected".into()
    } else {
        e.to_string()
    }
}
