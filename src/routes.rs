//! The URL table: one `match` on method and path segments. This is the only
//! file that knows URL shapes; handlers get their path parameters already
//! split out.

use serde_json::json;

use crate::api;
use crate::app::App;
use crate::http::{ApiError, Request, Response};

/// Answer one request.
pub fn handle(app: &App, req: &Request) -> Response {
    let cfg = app.config();
    let segs: Vec<&str> = req.segments.iter().map(String::as_str).collect();
    let method = req.method.as_str();
    let result = match (method, segs.as_slice()) {
        ("GET" | "HEAD", ["healthz"]) => Ok(healthz(app)),
        (_, ["api"]) => api::run(app, &cfg, req),
        ("GET", ["api", "runs", id]) => api::run_status(app, &cfg, req, id),
        (_, ["api", "runs", _]) => Err(ApiError::MethodNotAllowed { allow: vec!["GET"] }),
        _ => Err(ApiError::NotFound),
    };
    result.unwrap_or_else(Response::from)
}

/// `GET /healthz`: ready, with the config generation and counts.
fn healthz(app: &App) -> Response {
    let cfg = app.config();
    let body = json!({
        "Status": "ok",
        "Generation": app.generation(),
        "Programs": cfg.programs.len(),
        "Tools": cfg.tools.len(),
        "RunsInFlight": app.runner.in_flight(),
        "RunsQueued": app.runner.queued(),
        "LastReloadError": app.last_reload_error(),
    });
    Response::json(200, &body)
}
