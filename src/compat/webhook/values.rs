//! A hooks-file hook's values: its arguments, environment and files, made
//! as adnanh/webhook passes them (`invoke`'s values step calls [`make`]
//! for a hook).

use std::collections::BTreeMap;

use base64::Engine as _;

use super::HookValues;
use crate::config::Server;
use crate::http::ApiError;
use crate::receive::values::Source;
use crate::state::bodies::BodyFile;

/// What a hook's values step makes (`invoke::Made`'s parts).
#[derive(Default)]
pub struct Made {
    /// `pass-arguments-to-command`, by position.
    pub values: Vec<String>,
    /// `pass-environment-to-command`, and each file's path.
    pub vars: BTreeMap<String, String>,
    /// `pass-file-to-command` files, removed after the run.
    pub files: Vec<BodyFile>,
    /// `NAME=value` of every variable and file taken from the request.
    pub request: Vec<String>,
}

/// A hook's values as webhook passes them: each argument (a missing one
/// is empty), each environment variable and file (a missing one is left
/// out; a file that cannot be written is logged and left out). An argument
/// or a variable is bounded by `max_variable_bytes` like every other value
/// (webhook has no bound: the kernel's 128 KiB per string would fail the
/// run); a file's content by the body's `max_body_bytes` only.
///
/// # Errors
/// `invalid_parameter` for a value over `max_variable_bytes`;
/// `payload_too_complex` for a body over a bound.
pub fn make(
    server: &Server,
    h: &HookValues,
    get: impl Fn(&Source) -> Result<Option<String>, ApiError>,
) -> Result<Made, ApiError> {
    let max = server.max_variable_bytes;
    let bounded = |name: String, v: Option<String>| match v {
        Some(v) if v.len() > max => Err(ApiError::InvalidParameter {
            msg: format!("Value '{name}' is longer than the limit of {max} bytes."),
            name,
        }),
        v => Ok(v),
    };
    let mut made = Made::default();
    for (i, s) in h.args.iter().enumerate() {
        let name = format!("pass-arguments-to-command[{i}]");
        made.values
            .push(bounded(name, get(s)?)?.unwrap_or_default());
    }
    for (name, s) in &h.env {
        if let Some(v) = bounded(name.clone(), get(s)?)? {
            made.request.push(format!("{name}={v}"));
            made.vars.insert(name.clone(), v);
        }
    }
    for f in &h.files {
        let Some(v) = get(&f.source)? else { continue };
        made.request.push(format!("{}={v}", f.env));
        let data = if f.base64 {
            base64::engine::general_purpose::STANDARD
                .decode(v.as_bytes())
                .unwrap_or_default()
        } else {
            v.into_bytes()
        };
        match BodyFile::write_named(&h.file_dir, &f.env, &data) {
            Ok(file) => {
                made.vars
                    .insert(f.env.clone(), file.path().display().to_string());
                made.files.push(file);
            }
            Err(e) => log::error!(
                "cannot write a hook's file in {}: {e}",
                h.file_dir.display()
            ),
        }
    }
    Ok(made)
}
