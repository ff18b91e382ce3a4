//! Adding and removing finalizers with a merge patch guarded by `resourceVersion`, for every
//! kind enoki puts a finalizer on (Compositions, Symphonies, instances).

use kube::api::Api;

/// Adds (`present`) or removes enoki's cleanup finalizer on `obj`, keeping every other
/// finalizer. The merge patch carries `resource_version` when given, so a list another writer
/// changed meanwhile is not overwritten (the request fails with a conflict and is retried).
pub(crate) async fn set_cleanup_finalizer<K>(
    api: &Api<K>,
    obj: &K,
    present: bool,
    resource_version: Option<String>,
) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let add = present.then_some(crds::names::FINALIZER);
    set_finalizers(api, obj, &[crds::names::FINALIZER], add, resource_version).await
}

/// Removes every finalizer in `remove` from `obj` and adds `add`, keeping every other
/// finalizer; guarded by `resource_version` like [`set_cleanup_finalizer`].
pub(crate) async fn set_finalizers<K>(
    api: &Api<K>,
    obj: &K,
    remove: &[&str],
    add: Option<&str>,
    resource_version: Option<String>,
) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use kube::ResourceExt;
    let mut finalizers: Vec<String> = obj
        .finalizers()
        .iter()
        .filter(|f| !remove.contains(&f.as_str()) && Some(f.as_str()) != add)
        .cloned()
        .collect();
    if let Some(f) = add {
        finalizers.push(f.to_string());
    }
    let mut metadata = serde_json::json!({"finalizers": finalizers});
    if let Some(rv) = resource_version {
        metadata["resourceVersion"] = serde_json::json!(rv);
    }
    api.patch(
        &obj.name_any(),
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({ "metadata": metadata })),
    )
    .await?;
    Ok(())
}
