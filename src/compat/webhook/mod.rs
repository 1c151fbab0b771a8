//! adnanh/webhook compatibility: its *hooks files* served as they are
//! (`ANY /<hooks_url_prefix>/<id>`, `[server] hooks_files`) and
//! `trigd import-webhook` (`import.rs`). Each hook is an endpoint compiled
//! at load (`compile.rs`) and goes through `invoke` like every other run
//! request; the one value its endpoint carries ([`Hook`], in
//! `Dialect::HooksFile`) says how it reads the request (`receive.rs`,
//! `read.rs`), makes its values (`values.rs`) and answers as webhook 2.8
//! answers (`answer.rs`).

pub mod answer;
pub mod compile;
pub mod file;
pub mod gojson;
pub mod hook;
pub mod import;
pub mod lint;
pub mod read;
pub mod receive;
pub mod settings;
pub mod values;
pub mod yaml;

pub use hook::{Hook, HookAnswer, HookFile, HookValues, Reading, Settings};

use std::sync::Arc;

use crate::config::Config;
use crate::http::app::App;
use crate::http::{ApiError, Request, Response};
use crate::invoke::invoke;

/// Whether the request target `target` (as sent, not decoded) lies under
/// the hooks' URL prefix of `cfg` (never without hooks files). A path there that
/// cannot be read as a hook id (an encoded `/`, a `.` or `..` segment) is
/// still answered in webhook's words, [`not_found`].
pub fn under_prefix(cfg: &Config, target: &str) -> bool {
    let prefix = &cfg.hooks.prefix;
    let path = target.split('?').next().unwrap_or_default();
    let mut segs = path.split('/').filter(|s| !s.is_empty());
    !prefix.is_empty() && prefix.iter().all(|p| segs.next() == Some(p.as_str()))
}

/// webhook's answer to a path that names no hook.
pub fn not_found() -> Response {
    answer::text(404, answer::NOT_FOUND)
}

/// The answer to a request whose path lies under the hooks' URL prefix
/// (`None`: not such a path, or no hooks files): hook `id`'s, or
/// webhook's `Hook not found.`. The URL table (`http::routes`) asks this
/// first.
pub fn route(app: &App, cfg: &Arc<Config>, req: &mut Request) -> Option<Response> {
    let id = hook_id(&cfg.hooks.prefix, &req.segments)?;
    // A call: served once the config changes seen before it are reloaded.
    let cfg = app.config_for_request();
    Some(call(app, &cfg, req, &id).unwrap_or_else(Response::from))
}

/// The hook id of a path under the hooks' URL prefix (the rest of the
/// path, which may hold `/`; empty for the prefix itself, which names no
/// hook and is answered `Hook not found.` as webhook does), when hooks
/// files are configured.
fn hook_id(prefix: &[String], segs: &[String]) -> Option<String> {
    if prefix.is_empty() || segs.len() < prefix.len() {
        return None;
    }
    let (head, rest) = segs.split_at(prefix.len());
    head.iter()
        .zip(prefix)
        .all(|(a, b)| a == b)
        .then(|| rest.join("/"))
}

/// Call hook `id`.
///
/// # Errors
/// Those of `invoke::invoke` that a hook does not say in webhook's words:
/// trigd's own limits (`busy`, `shutting_down`, `storage_unavailable`,
/// `disk_full`) and a bad or reused `Idempotency-Key`.
fn call(app: &App, cfg: &Arc<Config>, req: &mut Request, id: &str) -> Result<Response, ApiError> {
    match cfg.hooks.by_id.get(id) {
        Some(endpoint) => invoke(app, cfg, req, endpoint),
        None => Ok(not_found()),
    }
}
