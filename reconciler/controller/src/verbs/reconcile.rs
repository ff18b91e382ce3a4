//! `enoki reconcile`, `enoki suspend` and `enoki resume` (flux's verbs): each changes the
//! Composition, then waits — with a progress line on a terminal — until its controller has
//! answered in the status, or fails (exit 1) when it stalls or `--timeout` passes.

use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::{api_error, condition, connect, find_condition, first_line, short, text};
use crate::cli::{ReconcileArgs, SuspendArgs};
use crate::run::tree::clean;

/// The annotation `enoki reconcile` sets (Flux's `reconcile.fluxcd.io/requestedAt`); the
/// controller answers it in `status.lastHandledReconcileAt`.
pub const REQUESTED_AT: &str = crds::names::RECONCILE_REQUESTED_AT;

/// A Composition a verb acts on: its API, `Composition ns/name` and the deadline.
struct Target {
    api: Api<crds::Composition>,
    name: String,
    what: String,
    timeout: String,
    deadline: std::time::Instant,
}

impl Target {
    async fn of(
        cluster: &crate::cli::ClusterArgs,
        namespace: Option<&String>,
        name: &str,
        timeout: &str,
    ) -> anyhow::Result<Self> {
        let (client, default_ns) = connect(cluster).await?;
        let ns = namespace.cloned().unwrap_or(default_ns);
        let wait = humantime::parse_duration(timeout)
            .map_err(|e| anyhow::anyhow!("--timeout {timeout:?}: {e}"))?;
        Ok(Self {
            api: Api::namespaced(client, &ns),
            name: name.to_string(),
            what: format!("Composition {ns}/{name}"),
            timeout: timeout.to_string(),
            deadline: std::time::Instant::now() + wait,
        })
    }

    /// The Composition as JSON.
    async fn get(&self) -> Result<Value, kube::Error> {
        let c = self.api.get(&self.name).await?;
        Ok(serde_json::to_value(c).unwrap_or_default())
    }

    /// A merge patch of the Composition; the object it made.
    async fn patch(&self, patch: &Value) -> anyhow::Result<Value> {
        let c = self
            .api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(|e| api_error(&self.what, e))?;
        Ok(serde_json::to_value(c)?)
    }

    /// Reads the Composition every second until `done` gives the answer; fails when
    /// `failed` says why, when the Composition is gone, or when the deadline passes before it
    /// is `goal` (a read that fails otherwise — an outage, throttling — is tried again until
    /// then). `step` names what it waits for in the progress line.
    async fn wait(
        &self,
        goal: &str,
        failed: impl Fn(&Value) -> Option<String>,
        done: impl Fn(&Value) -> Option<String>,
        step: impl Fn(&Value) -> &'static str,
    ) -> anyhow::Result<String> {
        loop {
            let state = match self.get().await {
                Ok(c) => {
                    if let Some(answer) = done(&c) {
                        return Ok(answer);
                    }
                    if let Some(why) = failed(&c) {
                        anyhow::bail!("{} {}", self.what, clean(&why));
                    }
                    let state = clean(&text(&c, "/status/simplified/status"));
                    crate::progress(&format!("{}: {}… ({state})", self.what, step(&c)));
                    state
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    anyhow::bail!("{} was deleted while waiting", self.what)
                }
                Err(e) => api_error("reading it", e).to_string(),
            };
            if std::time::Instant::now() >= self.deadline {
                anyhow::bail!(
                    "{} is not {goal} after {}: {state}",
                    self.what,
                    self.timeout
                );
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    }
}

/// Whether the Composition stalled for its newest spec (a stall of an older generation, or
/// one recorded before a suspension that is not yet lifted, is not its answer yet).
fn stalled(c: &Value) -> bool {
    condition(c, "Stalled") == "True"
        && current(c)
        && condition(c, crds::names::conditions::SUSPENDED).is_empty()
}

/// `stalled: <error>` when the Composition [`stalled`].
fn stall(c: &Value) -> Option<String> {
    stalled(c).then(|| {
        format!(
            "stalled: {}",
            first_line(&text(c, "/status/simplified/error"))
        )
    })
}

/// `failed: <message>` when the pass failed (`Reconciled=False`, `ReconcileFailed`).
fn pass_failed(c: &Value) -> Option<String> {
    find_condition(c, "Reconciled")
        .filter(|x| x["status"] == "False" && x["reason"] == crds::names::reasons::RECONCILE_FAILED)
        .map(|x| format!("failed: {}", first_line(&text(x, "/message"))))
}

/// Whether the status speaks for the Composition's newest generation.
fn current(c: &Value) -> bool {
    text(c, "/status/observedGeneration") == text(c, "/metadata/generation")
}

/// The UUID of an object's current synthesis (empty without one).
fn synthesis_of(c: &Value) -> String {
    text(c, "/status/currentSynthesis/uuid")
}

/// `enoki reconcile`: asks for a pass of a Composition (`--with-synthesis`: a new synthesis,
/// through `enoki.dev/force-resynthesis`), then waits until it is Ready for its current
/// generation (and, with a synthesis, one made after the request), with a progress line.
///
/// # Errors
/// The Composition is missing, refused or suspended, it stalls, or `--timeout` passes first.
pub async fn reconcile(args: &ReconcileArgs) -> anyhow::Result<String> {
    let t = Target::of(
        &args.cluster,
        args.namespace.as_ref(),
        &args.name,
        &args.timeout,
    )
    .await?;
    let before = t.get().await.map_err(|e| api_error(&t.what, e))?;
    if before.pointer("/spec/suspend") == Some(&Value::Bool(true)) {
        anyhow::bail!("{} is suspended: `enoki resume` it first", t.what);
    }
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let mut annotations = serde_json::Map::new();
    annotations.insert(REQUESTED_AT.into(), json!(now));
    if args.with_synthesis {
        let key = crds::names::annotations::FORCE_RESYNTHESIS.enoki;
        annotations.insert(key.into(), json!(now));
    }
    t.patch(&json!({"metadata": {"annotations": annotations}}))
        .await?;
    let old = synthesis_of(&before);
    // The pass that answers the request records it; with a synthesis, it is the pass that
    // applies one made after the request.
    let handled = |c: &Value| text(c, "/status/lastHandledReconcileAt") == now;
    let synthesized = |c: &Value| {
        !args.with_synthesis
            || (synthesis_of(c) != old
                && text(c, "/status/currentSynthesis/forceResynthesis") == now)
    };
    // With a synthesis, a stall is the forced attempt's only once that attempt was made.
    let attempted = |c: &Value| {
        !args.with_synthesis || text(c, "/status/inFlightSynthesis/forceResynthesis") == now
    };
    t.wait(
        "Ready",
        |c| {
            if !handled(c) {
                return None;
            }
            pass_failed(c).or_else(|| stall(c).filter(|_| attempted(c) || synthesized(c)))
        },
        |c| {
            // Ready for the current generation, and for the current synthesis (a synthesis
            // recorded but not yet applied has no ready time).
            let ready = condition(c, "Ready") == "True"
                && current(c)
                && !text(c, "/status/currentSynthesis/ready").is_empty();
            (handled(c) && synthesized(c) && ready).then(|| {
                format!(
                    "{} is Ready (synthesis {})\n",
                    t.what,
                    short(&synthesis_of(c))
                )
            })
        },
        |c| {
            if synthesized(c) {
                "reconciling"
            } else {
                "synthesizing"
            }
        },
    )
    .await
}

/// `enoki suspend`: sets `spec.suspend` and waits until the controller reports the
/// Composition `Suspended` for that generation.
///
/// # Errors
/// The Composition is missing or the patch refused, or `--timeout` passes first.
pub async fn suspend(args: &SuspendArgs) -> anyhow::Result<String> {
    let t = Target::of(
        &args.cluster,
        args.namespace.as_ref(),
        &args.name,
        &args.timeout,
    )
    .await?;
    let patched = t.patch(&json!({"spec": {"suspend": true}})).await?;
    if patched.pointer("/spec/suspend") != Some(&Value::Bool(true)) {
        anyhow::bail!(
            "{}: the cluster's Composition CRD has no spec.suspend (it dropped the field): \
             install this version's CRDs (`enoki crds | kubectl apply -f -`)",
            t.what
        );
    }
    let generation = patched
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    t.wait(
        "suspended",
        |_| None,
        |c| {
            let marked = find_condition(c, crds::names::conditions::SUSPENDED).is_some_and(|x| {
                x["status"] == "True" && x["observedGeneration"].as_i64() >= generation
            });
            marked.then(|| format!("{} is suspended\n", t.what))
        },
        |_| "suspending",
    )
    .await
}

/// `enoki resume`: clears `spec.suspend` and waits until the Composition is Ready for its
/// newest generation (a suspended one first synthesizes what changed meanwhile).
///
/// # Errors
/// The Composition is missing or the patch refused, it stalls, or `--timeout` passes first.
pub async fn resume(args: &SuspendArgs) -> anyhow::Result<String> {
    let t = Target::of(
        &args.cluster,
        args.namespace.as_ref(),
        &args.name,
        &args.timeout,
    )
    .await?;
    t.patch(&json!({"spec": {"suspend": null}})).await?;
    t.wait(
        "Ready",
        stall,
        |c| {
            let resumed = condition(c, crds::names::conditions::SUSPENDED).is_empty();
            (resumed && condition(c, "Ready") == "True" && current(c)).then(|| {
                format!(
                    "{} is resumed and Ready (synthesis {})\n",
                    t.what,
                    short(&synthesis_of(c))
                )
            })
        },
        |_| "resuming",
    )
    .await
}
