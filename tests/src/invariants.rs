//! The invariants of a converged Composition, checked from the API alone (no access to
//! enoki's memory or logs), so that chaos tests and ordinary e2e suites can end with the same
//! verdict:
//!
//! 1. the Composition is `Ready=True` and its current synthesis observed its generation;
//! 2. every resource of the current synthesis exists, is labelled for the Composition and
//!    holds the emitted content (every emitted field, apart from `metadata` and `status`, is
//!    present with the same value; objects with overrides or `disable-updates` are only
//!    checked to exist);
//! 3. every tombstone (a resource dropped by the current synthesis) is gone, unless it is
//!    orphaned (`deletion-strategy: orphan`);
//! 4. no object of a kind the Composition emits carries its `enoki.dev/managed-by` label
//!    without being desired;
//! 5. no ResourceSlice owned by the Composition belongs to neither the current nor the
//!    previous synthesis.

use std::collections::BTreeSet;

use kube::api::{Api, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use serde_json::Value;

const MANAGED_BY: &str = "enoki.dev/managed-by";

/// Whether every field of `want` is in `have` with the same value; the first differing path.
fn subset(want: &Value, have: &Value, path: &str) -> Result<(), String> {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => {
            for (k, v) in w {
                let p = format!("{path}.{k}");
                match h.get(k) {
                    Some(hv) => subset(v, hv, &p)?,
                    None if v.is_null() => {}
                    None => return Err(format!("{p} is missing")),
                }
            }
            Ok(())
        }
        (Value::Array(w), Value::Array(h)) if w.len() == h.len() => w
            .iter()
            .zip(h)
            .enumerate()
            .try_for_each(|(i, (w, h))| subset(w, h, &format!("{path}[{i}]"))),
        (Value::Number(w), Value::Number(h)) if w.as_f64() == h.as_f64() => Ok(()),
        (w, h) if w == h => Ok(()),
        (w, h) => Err(format!("{path}: want {w}, have {h}")),
    }
}

/// (GVK, namespace, name) of a manifest.
fn identity(m: &Value, default_ns: &str) -> (GroupVersionKind, String, String) {
    let api_version = m["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, m["kind"].as_str().unwrap_or_default());
    let ns = m
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or(default_ns)
        .to_string();
    let name = m
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    (gvk, ns, name)
}

fn annotation<'a>(m: &'a Value, key: &str) -> Option<&'a str> {
    m.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// (group, version, kind) of the kinds a Composition emits.
type Kinds = BTreeSet<(String, String, String)>;
/// (kind, namespace, name) of the objects it wants.
type Wanted = BTreeSet<(String, String, String)>;

/// One check of one Composition: its client, namespace, UID and the violations found.
struct Check<'a> {
    client: &'a Client,
    namespace: &'a str,
    uid: String,
    out: Vec<String>,
}

impl Check<'_> {
    /// The API of `gvk` in `ns` (all namespaces for cluster-scoped kinds) and whether it is
    /// namespaced; `None` when the kind is not served.
    async fn api(&self, gvk: &GroupVersionKind, ns: &str) -> Option<(Api<DynamicObject>, bool)> {
        let (ar, caps) = kube::discovery::pinned_kind(self.client, gvk).await.ok()?;
        let namespaced = caps.scope == kube::discovery::Scope::Namespaced;
        Some(if namespaced {
            (Api::namespaced_with(self.client.clone(), ns, &ar), true)
        } else {
            (Api::all_with(self.client.clone(), &ar), false)
        })
    }

    /// The manifests of the current synthesis: (desired, tombstones).
    async fn manifests(&mut self, current: &crds::Synthesis) -> (Vec<Value>, Vec<Value>) {
        let slices: Api<crds::ResourceSlice> = Api::namespaced(self.client.clone(), self.namespace);
        let (mut desired, mut tombstones) = (Vec::new(), Vec::new());
        for r in &current.resource_slices {
            let Some(slice) = slices.get_opt(&r.name).await.expect("reading a slice") else {
                self.out.push(format!(
                    "ResourceSlice {} of the current synthesis is missing",
                    r.name
                ));
                continue;
            };
            for m in &slice.spec.resources {
                let plain_secret = serde_json::from_str::<Value>(&m.manifest).is_ok_and(|v| {
                    v["apiVersion"] == "v1"
                        && v["kind"] == "Secret"
                        && (v.get("data").is_some() || v.get("stringData").is_some())
                });
                if plain_secret {
                    self.out.push(format!(
                        "slice {} holds a Secret's values in plain text",
                        r.name
                    ));
                }
                // A sealed Secret is compared without its values (the redacted manifest).
                match serde_json::from_str::<Value>(&m.manifest) {
                    Ok(v) if m.deleted => tombstones.push(v),
                    Ok(v) => desired.push(v),
                    Err(_) => self.out.push(format!(
                        "slice {} holds a manifest that is not JSON",
                        r.name
                    )),
                }
            }
        }
        (desired, tombstones)
    }

    /// Every desired object exists, is labelled and holds the emitted content.
    async fn desired(&mut self, desired: &[Value], kinds: &mut Kinds, wanted: &mut Wanted) {
        for m in desired {
            let (gvk, ns, obj_name) = identity(m, self.namespace);
            let Some((api, namespaced)) = self.api(&gvk, &ns).await else {
                self.out.push(format!("kind {gvk:?} is not served"));
                continue;
            };
            let ns = if namespaced { ns } else { String::new() };
            kinds.insert((gvk.group.clone(), gvk.version.clone(), gvk.kind.clone()));
            wanted.insert((gvk.kind.clone(), ns.clone(), obj_name.clone()));
            let what = format!("{} {ns}/{obj_name}", gvk.kind);
            let Some(live) = api.get_opt(&obj_name).await.expect("reading an object") else {
                self.out
                    .push(format!("{what} is desired but does not exist"));
                continue;
            };
            if live.labels().get(MANAGED_BY) != Some(&self.uid) {
                self.out.push(format!(
                    "{what} is not labelled {MANAGED_BY}={}: {:?}",
                    self.uid,
                    live.labels().get(MANAGED_BY)
                ));
            }
            if annotation(m, "enoki.dev/overrides").is_some()
                || annotation(m, "enoki.dev/disable-updates") == Some("true")
            {
                continue;
            }
            let live = serde_json::to_value(&live).expect("an object is JSON");
            let mut want = m.clone();
            if let Some(o) = want.as_object_mut() {
                for k in ["metadata", "status", "apiVersion", "kind"] {
                    o.remove(k);
                }
            }
            if let Err(e) = subset(&want, &live, "") {
                self.out
                    .push(format!("{what} differs from the emitted manifest: {e}"));
            }
        }
    }

    /// Every dropped object (not orphaned) is gone.
    async fn tombstones(&mut self, tombstones: &[Value], kinds: &mut Kinds) {
        for m in tombstones {
            let (gvk, ns, obj_name) = identity(m, self.namespace);
            if annotation(m, "enoki.dev/deletion-strategy") == Some("orphan") {
                continue;
            }
            let Some((api, _)) = self.api(&gvk, &ns).await else {
                continue;
            };
            kinds.insert((gvk.group.clone(), gvk.version.clone(), gvk.kind.clone()));
            if let Some(live) = api.get_opt(&obj_name).await.expect("reading an object")
                && live.labels().get(MANAGED_BY) == Some(&self.uid)
            {
                self.out.push(format!(
                    "{} {ns}/{obj_name} was dropped but still exists",
                    gvk.kind
                ));
            }
        }
    }

    /// Nothing of these kinds is labelled for the Composition beyond what it wants.
    async fn labelled(&mut self, kinds: &Kinds, wanted: &Wanted) {
        for (group, version, kind) in kinds {
            let gvk = GroupVersionKind::gvk(group, version, kind);
            let Ok((ar, caps)) = kube::discovery::pinned_kind(self.client, &gvk).await else {
                continue;
            };
            let namespaced = caps.scope == kube::discovery::Scope::Namespaced;
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
            let selector = format!("{MANAGED_BY}={}", self.uid);
            let labelled = api
                .list_metadata(&ListParams::default().labels(&selector))
                .await
                .expect("listing labelled objects");
            for o in labelled.items {
                let ns = if namespaced {
                    o.namespace().unwrap_or_default()
                } else {
                    String::new()
                };
                if !wanted.contains(&(kind.clone(), ns.clone(), o.name_any())) {
                    self.out.push(format!(
                        "{kind} {ns}/{} carries {selector} but is not desired",
                        o.name_any()
                    ));
                }
            }
        }
    }

    /// No ResourceSlice of the Composition outside its current and previous synthesis.
    async fn slices(&mut self, st: &crds::CompositionStatus) {
        let keep: BTreeSet<String> = [&st.current_synthesis, &st.previous_synthesis]
            .into_iter()
            .flatten()
            .flat_map(|s| s.resource_slices.iter().map(|r| r.name.clone()))
            .collect();
        let slices: Api<crds::ResourceSlice> = Api::namespaced(self.client.clone(), self.namespace);
        for s in slices
            .list(&ListParams::default())
            .await
            .expect("listing slices")
            .items
        {
            let owned = s.owner_references().iter().any(|o| o.uid == self.uid);
            if owned && !keep.contains(&s.name_any()) {
                self.out.push(format!(
                    "ResourceSlice {} belongs to neither the current nor the previous synthesis",
                    s.name_any()
                ));
            }
        }
    }
}

/// Every violation of the invariants by Composition `namespace/name` (empty: converged).
///
/// # Panics
/// When the API server refuses a read.
pub async fn violations(client: &Client, namespace: &str, name: &str) -> Vec<String> {
    let comps: Api<crds::Composition> = Api::namespaced(client.clone(), namespace);
    let Some(comp) = comps.get_opt(name).await.expect("reading the Composition") else {
        return vec![format!("Composition {namespace}/{name} does not exist")];
    };
    let mut check = Check {
        client,
        namespace,
        uid: comp.uid().unwrap_or_default(),
        out: Vec::new(),
    };
    let st = comp.status.clone().unwrap_or_default();
    if !st
        .conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
    {
        check.out.push(format!("not Ready: {:?}", st.conditions));
    }
    let Some(current) = &st.current_synthesis else {
        check.out.push("no current synthesis".into());
        return check.out;
    };
    if current.observed_composition_generation != comp.metadata.generation {
        check.out.push(format!(
            "the current synthesis observed generation {:?}, the Composition is at {:?}",
            current.observed_composition_generation, comp.metadata.generation
        ));
    }
    let (desired, tombstones) = check.manifests(current).await;
    let (mut kinds, mut wanted) = (Kinds::new(), Wanted::new());
    check.desired(&desired, &mut kinds, &mut wanted).await;
    check.tombstones(&tombstones, &mut kinds).await;
    check.labelled(&kinds, &wanted).await;
    check.slices(&st).await;
    check.out
}

/// Asserts [`violations`] finds none.
///
/// # Panics
/// When an invariant does not hold (every violation is listed).
pub async fn assert_converged(client: &Client, namespace: &str, name: &str) {
    let v = violations(client, namespace, name).await;
    assert!(
        v.is_empty(),
        "Composition {namespace}/{name} breaks {} invariant(s):\n- {}",
        v.len(),
        v.join("\n- ")
    );
}

/// Waits up to `timeout` for [`violations`] to find none (a Composition converging after a
/// change).
///
/// # Panics
/// When invariants still fail at the deadline (the last violations are listed).
pub async fn wait_converged(
    client: &Client,
    namespace: &str,
    name: &str,
    timeout: std::time::Duration,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let v = violations(client, namespace, name).await;
        if v.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "Composition {namespace}/{name} did not converge within {timeout:?}:\n- {}",
            v.join("\n- ")
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::subset;
    use serde_json::json;

    #[test]
    fn subset_finds_the_first_difference() {
        let have = json!({"data": {"a": "1", "b": "2"}, "spec": {"n": 1.0, "l": [{"x": 1}]}});
        assert!(subset(&json!({"data": {"a": "1"}, "spec": {"n": 1}}), &have, "").is_ok());
        assert_eq!(
            subset(&json!({"data": {"a": "2"}}), &have, ""),
            Err(".data.a: want \"2\", have \"1\"".into())
        );
        assert_eq!(
            subset(&json!({"data": {"c": "1"}}), &have, ""),
            Err(".data.c is missing".into())
        );
        assert!(subset(&json!({"spec": {"l": [{"x": 1}, {"x": 2}]}}), &have, "").is_err());
    }
}
