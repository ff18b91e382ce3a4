//! `enoki ui`: a local web page of the fleet, served by the CLI on 127.0.0.1 with the user's
//! own kubeconfig and RBAC — nothing new runs in the cluster. The fleet (every Composition
//! with its state, Synthesizers, Symphonies) comes from watch caches ([`live`]); one
//! Composition's page ([`detail`]) is read when asked, with its readiness-group DAG
//! ([`graph`]); the page follows changes through server-sent events. A token printed with
//! the address guards against other local users ([`auth`]); the assets are embedded.

mod auth;
mod detail;
mod fleet;
mod graph;
mod live;

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
    live: live::Live,
    scope: live::Scope,
    token: String,
    port: u16,
}

/// The bytes of the embedded assets (the page, its script and style).
pub fn asset_bytes() -> usize {
    ASSETS.iter().map(|(_, _, body)| body.len()).sum()
}

/// `enoki ui`: serves the page until interrupted.
///
/// # Errors
/// The cluster cannot be reached, or the port cannot be bound.
pub async fn serve(args: &UiArgs) -> anyhow::Result<()> {
    let (client, default_ns) = crate::verbs::connect(&args.cluster).await?;
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
        live,
        scope,
        token,
        port,
    });
    let mut out = std::io::stdout().lock();
    writeln!(out, "enoki ui: {url}")?;
    out.flush()?;
    drop(out);
    eprintln!("Serving the fleet on 127.0.0.1:{port} (loopback only); Ctrl-C stops.");
    if !args.no_open {
        open_browser(&url);
    }
    axum::serve(listener, router(ui))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

fn router(ui: Arc<Ui>) -> Router {
    let mut r = Router::new()
        .route("/api/fleet", get(fleet_json))
        .route("/api/compositions/{namespace}/{name}", get(detail_json))
        .route("/api/watch", get(watch));
    for (path, kind, body) in ASSETS {
        r = r.route(
            path,
            get(move || async move { ([(header::CONTENT_TYPE, kind)], body) }),
        );
    }
    r.layer(middleware::from_fn_with_state(ui.clone(), guard))
        .with_state(ui)
}

/// Serves loopback requests with the token only, and sets the headers every answer needs.
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
            value(header::HOST),
            req.uri().query(),
            value(header::COOKIE),
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
        auth::Decision::Allow { set_cookie } => {
            let mut resp = next.run(req).await;
            if set_cookie
                && let Ok(v) = HeaderValue::from_str(&auth::set_cookie(ui.port, &ui.token))
            {
                resp.headers_mut().append(header::SET_COOKIE, v);
            }
            resp
        }
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

/// How long the fleet's first answer waits for the watches' first list.
const FIRST_LIST_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The fleet, with the scope and the watches' errors (`listing` until the Compositions'
/// first list is in, so the page does not show an empty fleet meanwhile).
async fn fleet_json(State(ui): State<Arc<Ui>>) -> Response {
    let listed = tokio::time::timeout(FIRST_LIST_WAIT, ui.live.compositions.wait_until_ready())
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
        "errors": *ui.live.errors.lock(),
        "fleet": fleet,
    });
    json(&body)
}

/// One Composition's page (404 when it does not exist, 502 with the reason when unreadable).
async fn detail_json(
    State(ui): State<Arc<Ui>>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    match detail::detail(&ui.client, &ui.live, &namespace, &name).await {
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

/// Opens `url` in the user's browser when there is one (`$BROWSER`, `open` on macOS,
/// `xdg-open` under a graphical session); otherwise the printed address is the way in.
fn open_browser(url: &str) {
    let program = match std::env::var("BROWSER") {
        Ok(b) if !b.is_empty() => b,
        _ if cfg!(target_os = "macos") => "open".to_string(),
        _ if std::env::var_os("DISPLAY").is_some()
            || std::env::var_os("WAYLAND_DISPLAY").is_some() =>
        {
            "xdg-open".to_string()
        }
        _ => return,
    };
    let _ = std::process::Command::new(program)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
}
