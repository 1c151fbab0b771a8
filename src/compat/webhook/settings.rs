//! The `[server]` keys of hooks files (`hooks_files`, `hooks_url_prefix`,
//! `hooks_http_methods`), checked and resolved into [`Settings`].

use std::path::Path;

use toml::Spanned;

use super::Settings;
use crate::config::raw::RawServer;
use crate::config::resolve;
use crate::config::types::{Errors, Src};
use crate::http::Method;

/// The hooks files' settings of `raw`, paths resolved against `dir`.
pub fn settings(src: &Src, raw: &RawServer, dir: &Path, errs: &mut Errors) -> Settings {
    Settings {
        files: raw
            .hooks_files
            .iter()
            .map(|f| resolve(dir, Path::new(f.get_ref())))
            .collect(),
        url_prefix: raw
            .hooks_url_prefix
            .as_ref()
            .map_or_else(|| "hooks".to_string(), |p| p.get_ref().clone()),
        http_methods: hooks_http_methods(src, &raw.hooks_http_methods, errs),
        deduplicate: raw.hooks_deduplicate.unwrap_or(true),
    }
}

/// `hooks_http_methods`: each a method trigd serves, in any case, spaces
/// around allowed (webhook's `-http-methods`).
fn hooks_http_methods(src: &Src, raw: &[Spanned<String>], errs: &mut Errors) -> Vec<Method> {
    let mut out = Vec::new();
    for (i, m) in raw.iter().enumerate() {
        match Method::parse(m.get_ref().trim()) {
            Method::Other => {
                let msg = format!(
                    "\"{}\" is not a method trigd serves (GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS)",
                    m.get_ref()
                );
                errs.at(
                    src,
                    m.span(),
                    format!("server.hooks_http_methods[{i}]"),
                    msg,
                );
            }
            method => out.push(method),
        }
    }
    out
}
