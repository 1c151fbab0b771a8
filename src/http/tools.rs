//! Generated tool endpoints `METHOD /tools/<tool>/<env>/<trigger>` and the
//! endpoint view `GET /tools/<tool>/endpoints` as JSON.
//!
//! Every `endpoint` trigger of a tool exists once per environment of the
//! tool, compiled at load into that environment's endpoints; a call goes
//! through `invoke` like every other run request.

use std::sync::Arc;

use crate::config::Config;
use crate::http::app::App;
use crate::http::{ApiError, Request, Response};
use crate::invoke::{authenticate, invoke};
use crate::ui::view::ToolView;

/// Call a generated endpoint.
///
/// # Errors
/// 404 for an unknown tool or environment; the credentials' errors, and
/// only then 404 for an unknown trigger (so nothing about a protected
/// environment shows without credentials); then those of
/// `invoke::invoke`.
pub fn call(
    app: &App,
    cfg: &Arc<Config>,
    req: &mut Request,
    names: [String; 3],
) -> Result<Response, ApiError> {
    let [tool, env, trigger] = names;
    let tool = cfg.tools.get(&tool).ok_or(ApiError::NotFound)?;
    let env = tool.environments.get(&env).ok_or(ApiError::NotFound)?;
    match env.endpoints.get(&trigger) {
        Some(endpoint) => invoke(app, cfg, req, endpoint),
        None => {
            authenticate(app, cfg, req, &env.credentials)?;
            Err(ApiError::NotFound)
        }
    }
}

/// `GET /tools/<tool>/endpoints` as JSON: each environment with its public
/// switch and each endpoint with method, full URL and access. Members only.
///
/// # Errors
/// 404 for an unknown tool; 401/403 for a caller who is not a member.
pub fn view(app: &App, cfg: &Config, req: &Request, tool: &str) -> Result<Response, ApiError> {
    let tool = cfg.tools.get(tool).ok_or(ApiError::NotFound)?;
    app.access.member(cfg, req, &tool.workspace)?;
    let view = ToolView::of(cfg, req, tool);
    let body = serde_json::to_value(&view).map_err(|_| ApiError::Internal)?;
    Ok(Response::json(200, &body))
}
