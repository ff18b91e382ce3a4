//! Waiting on conditions: [`eventually`] polls until a check holds or panics with what it
//! waited for; [`WAIT`] is the usual bound; [`delete_and_wait`], [`wait_ready`] and
//! [`wait_event`] are the waits the suites share. To assert that something did *not* happen,
//! first let the controller have its chance: [`Enoki::wait_passes`].

use super::*;

/// Polls `check` every 250 ms until it returns `Some`, or panics after `timeout` naming `what`.
///
/// # Panics
/// When `check` has not succeeded within `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// How long the suites wait for a convergence the controller makes within seconds.
pub const WAIT: Duration = Duration::from_secs(60);

/// Deletes `name` and waits until the API server no longer has it (finalizers done).
///
/// # Panics
/// When the delete is refused or the object is still there after [`WAIT`].
pub async fn delete_and_wait<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &kube::api::DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("deleting {name}: {e}"),
    }
    eventually(&format!("{name} to be gone"), WAIT, || async {
        api.get_opt(name)
            .await
            .expect("the API server answers")
            .is_none()
            .then_some(())
    })
    .await;
}

/// Waits until Composition `name` in the test's namespace is `Ready=True`.
///
/// # Panics
/// When it is not Ready after [`WAIT`].
pub async fn wait_ready(env: &TestEnv, name: &str) {
    eventually(&format!("Composition {name} Ready"), WAIT, || async {
        composition_ready(env, name).await.then_some(())
    })
    .await;
}

/// Waits for an Event in the test's namespace (events.k8s.io) that `matches`; returns it.
///
/// # Panics
/// When none matches after [`WAIT`].
pub async fn wait_event(
    env: &TestEnv,
    what: &str,
    matches: impl Fn(&k8s_openapi::api::events::v1::Event) -> bool,
) -> k8s_openapi::api::events::v1::Event {
    let events: Api<k8s_openapi::api::events::v1::Event> = env.api();
    eventually(what, WAIT, || async {
        events
            .list(&Default::default())
            .await
            .expect("Events can be listed")
            .items
            .into_iter()
            .find(|e| matches(e))
    })
    .await
}
