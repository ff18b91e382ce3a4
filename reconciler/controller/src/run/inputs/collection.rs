//! Collection inputs: every object of a kind (in the namespaces a selector picks, with the
//! labels a selector asks for), read page by page as the Composition's account, projected and
//! bounded while read.

use super::*;

/// Makes a change to any object of the collection (`scope` `""`: every namespace) wake
/// `comp`: the input watch, and with `--shards` the watch of managed objects there (a
/// collection may hold objects another shard's Compositions manage).
fn watch_collection(
    rd: Reads<'_>,
    comp: &Composition,
    (gvk, ar): (&GroupVersionKind, &kube::core::ApiResource),
    scope: &str,
) {
    let Some(kept) = rd.kept else { return };
    kept.caches.watches.track(gvk, ar, scope, "*", comp);
    if rd.clusters.target_is_management() {
        kept.caches
            .watches
            .foreign_holds((gvk, ar), scope, "*", comp);
    }
}

/// Lists a collection for `comp`: its objects (projected, sorted by namespace and name) and
/// their digest. Error: an API failure; [`Outcome::Waits`]: a problem to report (kind not
/// served, bad selector).
pub async fn collection(
    rd: Reads<'_>,
    comp: &Composition,
    key: &str,
    c: &CollectionRef,
    instance: Option<&Value>,
) -> Result<Outcome<(Vec<Value>, String)>, Error> {
    let gvk = gvk_of(&c.group, &c.version, &c.kind);
    let (ar, namespaced) = match rd.clusters.resolve(&gvk).await {
        Ok(x) => x,
        Err(e) => {
            return Ok(Outcome::Waits(format!(
                "input {key:?}: kind {}/{} is not served: {e}",
                c.version, c.kind
            )));
        }
    };
    // Under --no-cross-namespace-refs a collection is read in the Composition's namespace
    // only: its trigger watch is scoped the same way.
    let scope = if namespaced && rd.no_cross_namespace_refs {
        comp.namespace().unwrap_or_default()
    } else {
        String::new()
    };
    watch_collection(rd, comp, (&gvk, &ar), &scope);
    let namespaces = match selected_namespaces(rd, comp, key, c, instance).await? {
        Outcome::Ready(n) => n,
        Outcome::Waits(message) => return Ok(Outcome::Waits(message)),
    };
    if !namespaced && namespaces.is_some() {
        return Ok(Outcome::Waits(format!(
            "input {key:?}: {} is cluster-scoped; a namespace selector does not apply",
            c.kind
        )));
    }
    let selectors = match label_selectors(key, c, instance) {
        Ok(Some(selectors)) => selectors,
        // The instance names no selector: an empty collection.
        Ok(None) => return Ok(Outcome::Ready((Vec::new(), digest(&json!([]))))),
        Err(message) => return Ok(Outcome::Waits(message)),
    };
    // As the Composition's account; under --no-cross-namespace-refs only its own namespace.
    let client = rd
        .clusters
        .client_for(comp)
        .map_err(api_err(Step::ImpersonatingClient))?;
    let api: Api<DynamicObject> = if namespaced && rd.no_cross_namespace_refs {
        Api::namespaced_with(client, &comp.namespace().unwrap_or_default(), &ar)
    } else {
        Api::all_with(client, &ar)
    };
    let mut lp = ListParams::default();
    if !selectors.is_empty() {
        lp = lp.labels(&selectors.join(","));
    }
    let read = Listing {
        api,
        ar: &ar,
        namespaces: namespaces.as_ref(),
        fields: &c.fields,
    };
    let mut items = match read.items(key, lp).await? {
        Outcome::Ready(items) => items,
        Outcome::Waits(message) => return Ok(Outcome::Waits(message)),
    };
    items.sort_by_key(|o| {
        (
            o.pointer("/metadata/namespace").map(Value::to_string),
            o.pointer("/metadata/name").map(Value::to_string),
        )
    });
    let d = digest(&Value::Array(items.clone()));
    Ok(Outcome::Ready((items, d)))
}

/// The namespaces a collection reads (`None`: all): from the instance
/// (`namespaceSelectorFrom`), from a fixed `namespaceSelector`, or all.
/// [`Outcome::Waits`]: a bad selector, named.
pub(super) async fn selected_namespaces(
    rd: Reads<'_>,
    comp: &Composition,
    key: &str,
    c: &CollectionRef,
    instance: Option<&Value>,
) -> Result<Outcome<Option<BTreeSet<String>>>, Error> {
    let selector = match (&c.namespace_selector_from, &c.namespace_selector) {
        (Some(path), _) => {
            let pointer = format!("/{}", path.replace('.', "/"));
            match instance.and_then(|i| i.pointer(&pointer)) {
                None | Some(Value::Null) => Some(None),
                Some(sel) => match selector_string(sel) {
                    Ok(s) => Some(Some(s)),
                    Err(e) => {
                        return Ok(Outcome::Waits(format!("input {key:?}: self.{path}: {e}")));
                    }
                },
            }
        }
        (None, Some(s)) => Some(Some(s.clone())),
        (None, None) => None,
    };
    let sel = match selector {
        None => return Ok(Outcome::Ready(None)),
        Some(None) => return Ok(Outcome::Ready(Some(BTreeSet::new()))),
        Some(Some(sel)) => sel,
    };
    let ns_gvk = gvk_of("", "v1", "Namespace");
    let ns_ar = kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&());
    watch_collection(rd, comp, (&ns_gvk, &ns_ar), "");
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(rd.clusters.client().clone());
    let lp = ListParams::default().labels(&sel);
    let names = super::super::paging::list_bounded(
        &lp,
        0,
        |lp: ListParams| {
            let api = api.clone();
            async move { api.list_metadata(&lp).await }
        },
        |n| Some((n.metadata.name?, 0)),
    );
    match names.await {
        Ok(names) => Ok(Outcome::Ready(Some(names.into_iter().collect()))),
        Err(super::super::paging::Stop::Api(kube::Error::Api(e))) if e.code == 400 => {
            Ok(Outcome::Waits(format!(
                "input {key:?}: namespace selector {sel:?}: {}",
                e.message
            )))
        }
        Err(super::super::paging::Stop::Api(e)) => {
            Err(api_err(Step::ListNamespaces(key.to_string()))(e))
        }
        Err(super::super::paging::Stop::TooLarge(_)) => Ok(Outcome::Ready(Some(BTreeSet::new()))),
    }
}

/// The label selectors of a collection: its own and the one the instance names
/// (`labelSelectorFrom`). `None`: the instance names none (null or absent), so the
/// collection is empty; an error names the bad selector.
fn label_selectors(
    key: &str,
    c: &CollectionRef,
    instance: Option<&Value>,
) -> Result<Option<Vec<String>>, String> {
    let mut selectors: Vec<String> = c.label_selector.iter().cloned().collect();
    let Some(path) = &c.label_selector_from else {
        return Ok(Some(selectors));
    };
    let pointer = format!("/{}", path.replace('.', "/"));
    match instance.and_then(|i| i.pointer(&pointer)) {
        None | Some(Value::Null) => Ok(None),
        Some(sel) => match selector_string(sel) {
            Ok(s) if s.is_empty() => Ok(Some(selectors)),
            Ok(s) => {
                selectors.push(s);
                Ok(Some(selectors))
            }
            Err(e) => Err(format!("input {key:?}: self.{path}: {e}")),
        },
    }
}

/// How a collection is listed: the API (as the Composition's account), its kind, the
/// namespaces kept (`None`: all) and the fields projected.
struct Listing<'a> {
    api: Api<DynamicObject>,
    ar: &'a kube::core::ApiResource,
    namespaces: Option<&'a BTreeSet<String>>,
    fields: &'a [String],
}

impl Listing<'_> {
    /// The collection's items, read page by page, projected as they come and bounded while
    /// read. Inner error: over the bound, a bad selector or a refusal, named.
    async fn items(&self, key: &str, lp: ListParams) -> Result<Outcome<Vec<Value>>, Error> {
        let in_scope = |o: &DynamicObject| {
            self.namespaces.is_none_or(|set| {
                o.metadata
                    .namespace
                    .as_ref()
                    .is_some_and(|n| set.contains(n))
            })
        };
        let keep = |o: DynamicObject| {
            if !in_scope(&o) {
                return None;
            }
            let mut v = serde_json::to_value(o).unwrap_or_default();
            if v.get("apiVersion").is_none() {
                v["apiVersion"] = json!(self.ar.api_version);
                v["kind"] = json!(self.ar.kind);
            }
            let v = project(&v, self.fields);
            let size = serde_json::to_vec(&v).map_or(0, |b| b.len());
            Some((v, size))
        };
        let max = crate::synthesis::MAX_INPUT_BYTES;
        let fetch = |lp: ListParams| {
            let api = self.api.clone();
            async move { api.list(&lp).await }
        };
        let listed = super::super::paging::list_bounded(&lp, max, fetch, keep);
        let items = match listed.await {
            Ok(items) => items,
            Err(super::super::paging::Stop::TooLarge(n)) => {
                return Ok(Outcome::Waits(format!(
                    "input {key:?}: the collection is over {max} bytes ({n})"
                )));
            }
            Err(super::super::paging::Stop::Api(kube::Error::Api(e))) if e.code == 400 => {
                return Ok(Outcome::Waits(format!(
                    "input {key:?}: label selector: {}",
                    e.message
                )));
            }
            Err(super::super::paging::Stop::Api(kube::Error::Api(e))) if e.code == 403 => {
                return Ok(Outcome::Waits(format!("input {key:?}: {}", e.message)));
            }
            Err(super::super::paging::Stop::Api(e)) => {
                return Err(api_err(Step::ListInput(key.to_string()))(e));
            }
        };
        Ok(Outcome::Ready(items))
    }
}
