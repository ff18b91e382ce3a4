//! The API server's audit log read back: which requests enoki (or anyone) made since a moment.

use super::*;

/// One request the API server's audit log recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// `get`, `list`, `watch`, `create`, `patch`, `update`, `delete`, …
    pub verb: String,
    /// The resource (`configmaps`), with `/status` for the subresource.
    pub resource: String,
    /// The object's name (empty for lists and watches).
    pub name: String,
    /// The client's User-Agent.
    pub user_agent: String,
    /// When the API server received it (RFC 3339, microseconds).
    pub received: String,
    /// The request URI (path and query: label selectors, watch).
    pub uri: String,
    /// The HTTP status code of the response (`409` for a Conflict).
    pub code: u16,
}

impl Request {
    /// Whether enoki made it (its User-Agent is `enoki/<version>`).
    pub fn by_enoki(&self) -> bool {
        self.user_agent.starts_with("enoki/")
    }

    /// Whether it changes something.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }
}

/// The requests the audit log (written by `hack/testenv.sh`) recorded in `namespace` after
/// `since` (RFC 3339).
///
/// # Panics
/// When the audit log cannot be read.
pub fn audited_requests(namespace: &str, since: &str) -> Vec<Request> {
    audited(since, |e| e["objectRef"]["namespace"] == namespace)
}

/// The requests the audit log recorded after `since` with no namespace: cluster-scoped
/// objects, and lists and watches across every namespace.
///
/// # Panics
/// When the audit log cannot be read.
pub fn audited_cluster_wide(since: &str) -> Vec<Request> {
    audited(since, |e| e["objectRef"]["namespace"].is_null())
}

/// Waits until the audit log has caught up with every request made before this call: makes
/// one marker request (a GET of a ConfigMap that does not exist) and waits for it to appear.
///
/// # Panics
/// When the marker does not reach the audit log within [`WAIT`].
pub async fn audit_barrier(env: &TestEnv) {
    let marker = format!("audit-barrier-{:08x}", rand::random::<u32>());
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = env.api();
    let _ = cms.get_opt(&marker).await;
    eventually("the audit log to catch up", WAIT, || async {
        std::fs::read_to_string(audit_log_path())
            .ok()?
            .contains(&marker)
            .then_some(())
    })
    .await;
}

fn audit_log_path() -> PathBuf {
    std::env::var("TESTENV_AUDIT_LOG")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            kubeconfig_path()
                .parent()
                .expect("the kubeconfig has a directory")
                .join("audit.log")
        })
}

/// The watches the audit log recorded as started after `since` (in any namespace or none): a
/// long watch is recorded complete only when it ends.
///
/// # Panics
/// When the audit log cannot be read.
pub fn audited_watches(since: &str) -> Vec<Request> {
    audited_at("ResponseStarted", since, |e| e["verb"] == "watch")
}

fn audited(since: &str, keep: impl Fn(&serde_json::Value) -> bool) -> Vec<Request> {
    audited_at("ResponseComplete", since, keep)
}

fn audited_at(stage: &str, since: &str, keep: impl Fn(&serde_json::Value) -> bool) -> Vec<Request> {
    let path = audit_log_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (hack/testenv.sh writes it)", path.display()));
    let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["stage"] == stage)
        .filter(|e| keep(e))
        .filter(|e| {
            e["requestReceivedTimestamp"]
                .as_str()
                .is_some_and(|t| t > since)
        })
        .map(|e| {
            let sub = s(&e["objectRef"]["subresource"]);
            Request {
                verb: s(&e["verb"]),
                resource: if sub.is_empty() {
                    s(&e["objectRef"]["resource"])
                } else {
                    format!("{}/{sub}", s(&e["objectRef"]["resource"]))
                },
                name: s(&e["objectRef"]["name"]),
                user_agent: s(&e["userAgent"]),
                received: s(&e["requestReceivedTimestamp"]),
                uri: s(&e["requestURI"]),
                code: e["responseStatus"]["code"]
                    .as_u64()
                    .and_then(|c| u16::try_from(c).ok())
                    .unwrap_or(0),
            }
        })
        .collect()
}

/// Now, as RFC 3339 (for [`audited_requests`]).
pub fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}
