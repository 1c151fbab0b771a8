//! The URL table: one `match` on method and path segments. This is the only
//! file that knows URL shapes; handlers get their path parameters already
//! split out.

use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use serde_json::json;

use crate::http::api;
use crate::http::app::App;
use crate::http::metrics::Gauges;
use crate::http::tls;
use crate::http::tools;
use crate::http::{ApiError, Method, Request, Response};
use crate::runs;
use crate::runs::cluster;
use crate::ui;

/// The OpenAPI 3.0 description of every route below, served at
/// `GET /openapi.json`: the file `openapi.json`, minified and deflated by
/// `build.rs` (the static binary's size), inflated at the first request.
pub fn openapi() -> &'static str {
    static PACKED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/openapi.min.json.deflate"));
    static DOC: OnceLock<String> = OnceLock::new();
    // build.rs wrote it: it inflates to UTF-8 (the unit test below checks it).
    DOC.get_or_init(|| {
        miniz_oxide::inflate::decompress_to_vec(PACKED)
            .ok()
            .and_then(|doc| String::from_utf8(doc).ok())
            .unwrap_or_default()
    })
}

/// Answer one request.
pub fn handle(app: &App, req: &mut Request) -> Response {
    use Method::{Get, Head, Post, Put};
    let cfg = app.config();
    // Paths under the hooks files' URL prefix are theirs (`compat/`).
    if let Some(answer) = crate::compat::webhook::route(app, &cfg, req) {
        return answer;
    }
    let cfg = if is_call(req) {
        app.config_for_request()
    } else {
        cfg
    };
    let segs: Vec<&str> = req.segments.iter().map(String::as_str).collect();
    let result = match (req.method, segs.as_slice()) {
        (Get | Head, ["healthz"]) => Ok(healthz(app)),
        (Get | Head, ["livez"]) => Ok(Response::json(200, &json!({ "Status": "alive" }))),
        (Get | Head, ["metrics"]) => Ok(metrics(app)),
        (Get | Head, ["openapi.json"]) => Ok(Response::text(200, "application/json", openapi())),
        (Get | Head, [".well-known", "acme-challenge", token]) => Ok(acme_challenge(app, token)),
        (Post, ["api"]) => api::run(app, &cfg, req),
        (Get | Head, ["api", "overdue"]) => api::overdue(app, &cfg, req),
        (Get | Head, ["api", "schedules"]) => api::schedules(app, &cfg, req),
        (Get | Head, ["api", "runs"]) => runs::list::list(app, &cfg, req),
        (Get | Head, ["api", "runs", id]) => api::run_status(app, &cfg, req, id),
        (Get | Head, ["api", "runs", id, "output"]) => runs::output(app, &cfg, req, id),
        (Post, ["api", "runs", id, "cancel"]) => runs::cancel(app, &cfg, req, id),
        (Post, ["api", "runs", id, "rerun"]) => runs::rerun(app, &cfg, req, id),
        (Post, ["api", "runs", id, "callbacks", d, "redeliver"]) => {
            runs::redeliver(app, &cfg, req, id, d)
        }
        (Get | Head, []) => ui::home(app, &cfg, req),
        (Get | Head, ["login"]) => ui::login_form(app, &cfg, req),
        (Post, ["login"]) => ui::login(app, &cfg, req),
        (Post, ["logout"]) => ui::logout(app, &cfg, req),
        (Get | Head, ["workspaces", ws, "settings"]) => ui::settings(app, &cfg, req, ws),
        (Post, ["workspaces", ws, "settings", "application-key"]) => {
            ui::regenerate(app, &cfg, req, ws)
        }
        (Post, ["workspaces", ws, "settings", "application-key", "revoke"]) => {
            ui::revoke_key(app, &cfg, req, ws)
        }
        (Get | Head, ["runs"]) => ui::runs_list(app, &cfg, req),
        (Get | Head, ["schedules"]) => ui::schedules_page(app, &cfg, req),
        (Get | Head, ["runs", id]) => ui::run_show(app, &cfg, req, id),
        (Post, ["runs", id, "cancel"]) => ui::run_cancel(app, &cfg, req, id),
        (Post, ["runs", id, "rerun"]) => ui::run_rerun(app, &cfg, req, id),
        (Post, ["runs", id, "callbacks", d, "redeliver"]) => {
            ui::run_redeliver(app, &cfg, req, id, d)
        }
        (Get | Head, ["static", name]) => ui::asset(name),
        (Get | Head, ["tools", tool, "endpoints"]) if ui::wants_html(req) => {
            ui::endpoints(app, &cfg, req, tool)
        }
        (Get | Head, ["tools", tool, "endpoints"]) => tools::view(app, &cfg, req, tool),
        (Put, ["tools", tool, "environments", env, "public"]) => {
            ui::switch_put(app, &cfg, req, [tool, env])
        }
        (Post, ["tools", tool, "environments", env, "public"]) => {
            ui::switch_post(app, &cfg, req, [tool, env])
        }
        (_, ["tools", tool, env, trigger]) => {
            // Owned, so that the run may let go of the request's body.
            let names = [tool, env, trigger].map(|s| s.to_string());
            tools::call(app, &cfg, req, names)
        }
        // Known paths, other methods: 405 with the methods they take.
        (
            _,
            ["api"]
            | ["api", "runs", _, "cancel" | "rerun"]
            | ["api", "runs", _, "callbacks", _, "redeliver"]
            | ["logout"]
            | ["runs", _, "cancel" | "rerun"]
            | ["runs", _, "callbacks", _, "redeliver"]
            | ["workspaces", _, "settings", "application-key"]
            | ["workspaces", _, "settings", "application-key", "revoke"],
        ) => only(&["POST"]),
        (_, ["login"]) => only(&["GET", "HEAD", "POST"]),
        (_, ["tools", _, "environments", _, "public"]) => only(&["PUT", "POST"]),
        (
            _,
            []
            | ["healthz" | "livez" | "metrics" | "openapi.json" | "runs" | "schedules"]
            | ["api", "overdue" | "schedules" | "runs"]
            | ["api", "runs", _]
            | ["api", "runs", _, "output"]
            | ["runs" | "static", _]
            | ["tools", _, "endpoints"]
            | ["workspaces", _, "settings"],
        ) => only(&["GET", "HEAD"]),
        _ => ui::not_found(req),
    };
    result.unwrap_or_else(Response::from)
}

/// Whether `req` calls what the config files define (`POST /api`, a
/// tool's endpoint; a hook is `compat/`'s): a call is served once the
/// config changes the watcher saw before it arrived are reloaded
/// ([`App::config_for_request`]), so that a program written and then
/// called is found. The rest (health, metrics, runs, pages) is answered
/// at once by the config in place, also during a long reload.
fn is_call(req: &Request) -> bool {
    match req.segments.as_slice() {
        [api] => api == "api" && req.method == Method::Post,
        [tools, _, _, _] => tools == "tools",
        _ => false,
    }
}

/// 405 `method_not_allowed` for a known path, with the methods it takes.
fn only(allow: &[&'static str]) -> Result<Response, ApiError> {
    Err(ApiError::MethodNotAllowed {
        allow: allow.to_vec(),
    })
}

/// `GET /healthz`: readiness (200 `ok`, else 503 `draining` or
/// `not_ready` with the `Reason`), with the config generation and counts.
fn healthz(app: &App) -> Response {
    let cfg = app.config();
    let ready = app.readiness();
    let reason = match &ready {
        cluster::Readiness::NotReady(why) => Some(why.clone()),
        _ => None,
    };
    let mut body = json!({
        "Status": ready.status(),
        "Ready": ready == cluster::Readiness::Ready,
        "Reason": reason,
        "Instance": cfg.server.instance,
        "Generation": app.generation(),
        "Programs": cfg.programs.len(),
        "Tools": cfg.tools.len(),
        "RunsInFlight": app.runner.in_flight(),
        "RunsQueued": app.runner.queued(),
        "StatesUnwritten": app.store.unwritten(),
        "IdempotencyKeys": app.idempotency.count(),
        "LastReloadError": app.last_reload_error(),
    });
    // Only with HTTPS: a plain server's answer stays as it was.
    if let (Some(certs), Some(map)) = (app.tls.get(), body.as_object_mut()) {
        map.insert("Tls".into(), tls::health(&certs.status()));
    }
    // Likewise only with `[acme]`.
    if let (Some(acme), Some(map)) = (app.acme.get(), body.as_object_mut()) {
        map.insert("Acme".into(), acme.health());
    }
    let status = if ready == cluster::Readiness::Ready {
        200
    } else {
        503
    };
    Response::json(status, &body)
}

/// `GET /.well-known/acme-challenge/<token>`: the key authorization of a
/// pending HTTP-01 challenge (RFC 8555 §8.3), else 404.
fn acme_challenge(app: &App, token: &str) -> Response {
    match app.acme.get().and_then(|a| a.challenges().get(token)) {
        Some(answer) => Response::text(200, "application/octet-stream", answer),
        None => Response::text(404, "text/plain", "no such ACME challenge\n"),
    }
}

/// `GET /metrics`: Prometheus text.
fn metrics(app: &App) -> Response {
    let (reloads, reload_errors) = app.reload_counts();
    let server = &app.config().server;
    let g = Gauges {
        in_flight: app.runner.in_flight(),
        slots: server.max_concurrent_runs,
        async_slots: server.max_concurrent_async_runs,
        queued: app.runner.queued(),
        children: app.runner.children(),
        connections: app
            .connections
            .get()
            .map_or(0, |c| c.load(Ordering::Relaxed)),
        reloads,
        reload_errors,
        generation: app.generation(),
        run_log_fsyncs: app.runner.run_log_fsyncs(),
    };
    let mut text = app.runner.metrics.render(&g);
    text.push_str(&crate::schedule::overdue::prometheus(&api::expectations(
        app,
        &app.config(),
        |_| true,
    )));
    if let Some(cb) = app.runner.callbacks() {
        text.push_str(&cb.render_metrics());
    }
    if let Some(certs) = app.tls.get() {
        tls::render_metrics(&certs.status(), &mut text);
    }
    if let Some(acme) = app.acme.get() {
        acme.render_metrics(&mut text);
    }
    if let Some(db) = app.state.db() {
        let _ = std::fmt::Write::write_fmt(
            &mut text,
            format_args!("# HELP trigd_state_db_round_trips_total Statements sent to the PostgreSQL database of [state] url (one round trip each).\n\
             # TYPE trigd_state_db_round_trips_total counter\n\
             trigd_state_db_round_trips_total {}\n\
             # HELP trigd_state_db_background_trips_total Statements sent to the database by background threads (heartbeats, queue polls, health checks).\n\
             # TYPE trigd_state_db_background_trips_total counter\n\
             trigd_state_db_background_trips_total {}\n",
            db.round_trips(),
            db.background_trips()
        ));
    }
    Response::text(200, "text/plain; version=0.0.4", text)
}

#[cfg(test)]
mod tests {
    /// The deflated copy build.rs stored inflates to `openapi.json` itself.
    #[test]
    fn openapi_inflates_to_the_document() {
        let served: serde_json::Value = serde_json::from_str(super::openapi()).unwrap();
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json"));
        let file: serde_json::Value = serde_json::from_str(&text.unwrap()).unwrap();
        assert_eq!(served, file);
    }

    /// Each first segment the match serves is in `FIRST_SEGMENTS`: read
    /// from this file's own patterns (`["seg"` or `[Method…, ["seg"`).
    #[test]
    fn every_first_segment_is_reserved_for_the_hooks_prefix() {
        let source = include_str!("routes.rs");
        let mut seen = std::collections::BTreeSet::new();
        for line in source.lines() {
            let line = line.trim_start();
            let pattern = line
                .strip_prefix("(_, [\"")
                .or_else(|| line.split_once(", [\"").map(|(_, rest)| rest))
                .filter(|_| line.starts_with('(') && line.contains("=>"));
            if let Some(seg) = pattern.and_then(|rest| rest.split('"').next()) {
                seen.insert(seg.to_string());
            }
        }
        assert!(seen.len() >= 10, "patterns read: {seen:?}");
        for seg in &seen {
            assert!(
                crate::http::FIRST_SEGMENTS.contains(&seg.as_str()),
                "{seg} not reserved"
            );
        }
    }
}
