//! `enoki ui`: a local web page of the fleet, served by the CLI on 127.0.0.1 with the user's
//! own kubeconfig and RBAC — nothing new runs in the cluster. The fleet (every Composition
//! with its state, Synthesizers, Symphonies) comes from watch caches (`live`); one
//! Composition's page (`detail`) is read when asked, with its readiness-group DAG
//! (`graph`); the page follows changes through server-sent events. A token printed with
//! the address guards the API against other local users and other pages (`auth`); the
//! browser is opened on a private file, never with the token on a command line (`open`);
//! the assets are embedded.

mod auth;
mod detail;
mod fleet;
mod graph;
mod live;
mod open;

use std::convert::Infallible;
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::Stream;
use tokio::sync::broadcast::error::RecvError;

use crate::cli::UiArgs;

/// The embedded assets: (path, content type, body).
const ASSETS: [(&str, &str, &str); 3] = [
    (
        "/",
        "text/html; charset=utf-8",
        include_str!("ui/assets/index.html"),
    ),
    (
        "/app.js",
        "text/javascript; charset=utf-8",
        include_str!("ui/assets/app.js"),
    ),
    (
        "/app.css",
        "text/css; charset=utf-8",
        include_str!("ui/assets/app.css"),
    ),
];

/// What every handler shares.
struct Ui {
    client: kube::Client,
    /// Where the live objects are read (`--remote-kubeconfig`, else `client`).
    target: kube::Client,
    live: live::Live,
    /// The first fleet answer waited for the first list (later ones do not wait).
    waited: std::sync::atomic::AtomicBool,
    scope: live::Scope,
    token: String,
    port: u16,
}

/// `enoki ui`: serves the page until interrupted.
///
/// # Errors
/// The cluster cannot be reached, or the port cannot be bound.
pub async fn serve(args: &UiArgs) -> anyhow::Result<()> {
    let (client, default_ns) = crate::verbs::connect(&args.cluster).await?;
    let target = match &args.remote_kubeconfig {
        Some(path) => {
            kube::Client::try_from(crate::run::start::cluster_config(Some(path), None).await?)?
        }
        None => client.clone(),
    };
    let scope = live::scope(&client, args.namespace.as_deref(), &default_ns).await?;
    let live = live::Live::start(&client, &scope);
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, args.port))
        .await
        .map_err(|e| anyhow::anyhow!("binding 127.0.0.1:{}: {e}", args.port))?;
    let port = listener.local_addr()?.port();
    let token = auth::token()?;
    let url = format!("http://127.0.0.1:{port}/?token={token}");
    let ui = Arc::new(Ui {
        client,
        target,
        live,
        waited: std::sync::atomic::AtomicBool::new(false),
        scope,
        token,
        port,
    });
    let mut out = std::io::stdout().lock();
    writeln!(out, "enoki ui: {url}")?;
    out.flush()?;
    drop(out);
    eprintln!("Serving the fleet on 127.0.0.1:{port} (loopback only); Ctrl-C stops.");
    let _launcher = if args.no_open {
        None
    } else {
        open::open_browser(&url)
    };
    // Ctrl-C (or SIGTERM, SIGHUP) ends at once: open pages hold event streams that never
    // finish by themselves. The redirect page is removed on the way out.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    tokio::select! {
        served = axum::serve(listener, router(ui)) => served?,
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        _ = hup.recv() => {}
    }
    Ok(())
}

fn router(ui: Arc<Ui>) -> Router {
    let mut r = Router::new()
        .route("/api/fleet", get(fleet_json))
        .route("/api/compositions/{namespace}/{name}", get(detail_json))
        .route("/api/watch", get(watch))
        // Whether a token is the server's (the page adopts a new one only then).
        .route("/api/ping", get(|| async { StatusCode::NO_CONTENT }));
    for (path, kind, body) in ASSETS {
        r = r.route(
            path,
            get(move || async move { ([(header::CONTENT_TYPE, kind)], body) }),
        );
    }
    r.layer(middleware::from_fn_with_state(ui.clone(), guard))
        .with_state(ui)
}

/// Serves loopback requests only, the API with the token only, and sets the headers every
/// answer needs.
async fn guard(State(ui): State<Arc<Ui>>, req: Request, next: Next) -> Response {
    let decision = {
        let headers = req.headers();
        let value = |name| {
            headers
                .get(name)
                .and_then(|v: &HeaderValue| v.to_str().ok())
        };
        auth::check(
            &ui.token,
            ui.port,
            req.uri().path(),
            value(header::HOST.as_str()),
            value(auth::HEADER),
            req.uri().query(),
        )
    };
    let mut resp = match decision {
        auth::Decision::BadHost => (
            StatusCode::FORBIDDEN,
            "enoki ui answers only to 127.0.0.1 and localhost\n",
        )
            .into_response(),
        auth::Decision::NoToken => (
            StatusCode::UNAUTHORIZED,
            "open the address `enoki ui` printed: it carries the token\n",
        )
            .into_response(),
        auth::Decision::Allow => next.run(req).await,
    };
    let h = resp.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    resp
}

/// How long the fleet's first answer waits for the watches' first list (later answers say
/// `listing` until it is in).
const FIRST_LIST_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The fleet, with the scope and the watches' errors (`listing` until the Compositions'
/// first list is in, so the page does not show an empty fleet meanwhile).
async fn fleet_json(State(ui): State<Arc<Ui>>) -> Response {
    let wait = if ui.waited.swap(true, std::sync::atomic::Ordering::Relaxed) {
        std::time::Duration::ZERO
    } else {
        FIRST_LIST_WAIT
    };
    let listed = tokio::time::timeout(wait, ui.live.compositions.wait_until_ready())
        .await
        .is_ok_and(|r| r.is_ok());
    let comps = ui.live.compositions.state();
    let synths = ui.live.synthesizers.state();
    let syms = ui.live.symphonies.state();
    let fleet = fleet::fleet(
        &comps.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
        &synths.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
        &syms.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
        k8s_openapi::jiff::Timestamp::now(),
    );
    let body = serde_json::json!({
        "scope": ui.scope,
        "listing": !listed,
        "errors": live::current(&ui.live.errors),
        "fleet": fleet,
    });
    json(&body)
}

/// One Composition's page (404 when it does not exist, 502 with the reason when unreadable).
async fn detail_json(
    State(ui): State<Arc<Ui>>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    if !is_name(&namespace) || !is_name(&name) {
        return (StatusCode::BAD_REQUEST, "not a namespace and name\n").into_response();
    }
    match detail::detail((&ui.client, &ui.target), &ui.live, &namespace, &name).await {
        Ok(Some(d)) => json(&d),
        Ok(None) => (
            StatusCode::NOT_FOUND,
            format!("Composition {namespace}/{name} does not exist\n"),
        )
            .into_response(),
        Err(e) => (StatusCode::BAD_GATEWAY, format!("{e:#}\n")).into_response(),
    }
}

/// `value` as a JSON answer.
fn json(value: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// The changes, as server-sent events (`change` with the object, `resync` when some were
/// missed).
async fn watch(State(ui): State<Arc<Ui>>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = ui.live.changes.subscribe();
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        let event = match rx.recv().await {
            Ok(c) => Event::default()
                .event("change")
                .data(serde_json::to_string(&c).unwrap_or_default()),
            Err(RecvError::Lagged(_)) => Event::default().event("resync").data("{}"),
            Err(RecvError::Closed) => return None,
        };
        Some((Ok(event), rx))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// A Kubernetes object name or namespace (DNS subdomain: lower-case letters, digits, `-`
/// and `.`, at most 253).
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}
