//! `ANY /<hooks_url_prefix>/<id>`: the hooks of adnanh/webhook hooks files
//! (`[server] hooks_files`). Each hook is an endpoint compiled at load
//! (`compile.rs`) and goes through `invoke` like every other
//! run request; its endpoint reads the request the webhook way and answers
//! as webhook 2.8 answers (`answer.rs`).

pub mod answer;
pub mod compile;
pub mod file;
pub mod import;
pub mod receive;

use std::sync::Arc;

use crate::config::Config;
use crate::http::app::App;
use crate::http::{ApiError, Request, Response};
use crate::invoke::{hook_text, invoke, HOOK_NOT_FOUND};

/// Whether the request target `target` (as sent, not decoded) lies under
/// the hooks' URL prefix `prefix` (empty: no hooks files). A path there that
/// cannot be read as a hook id (an encoded `/`, a `.` or `..` segment) is
/// still answered in webhook's words, [`not_found`].
pub fn under_prefix(prefix: &[String], target: &str) -> bool {
    let path = target.split('?').next().unwrap_or_default();
    let mut segs = path.split('/').filter(|s| !s.is_empty());
    !prefix.is_empty() && prefix.iter().all(|p| segs.next() == Some(p.as_str()))
}

/// webhook's answer to a path that names no hook.
pub fn not_found() -> Response {
    hook_text(404, HOOK_NOT_FOUND)
}

/// Call hook `id`.
///
/// # Errors
/// Those of `invoke::invoke` that a hook does not say in webhook's words:
/// trigd's own limits (`busy`, `shutting_down`, `storage_unavailable`,
/// `disk_full`) and a bad or reused `Idempotency-Key`.
pub fn call(
    app: &App,
    cfg: &Arc<Config>,
    req: &mut Request,
    id: &str,
) -> Result<Response, ApiError> {
    match cfg.hooks.by_id.get(id) {
        Some(endpoint) => invoke(app, cfg, req, endpoint),
        None => Ok(not_found()),
    }
}
