//! The values of a run: read by position (`variables`), by name (query
//! and JSON object body) or from a trigger's receive sources, then checked
//! against the function's inputs and the size limits, the same way for
//! every endpoint (a hooks-file hook's arguments, environment and files
//! are made in `compat/webhook/values.rs`).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::Value;

use super::read::{body_error, Read};
use crate::config::{Dialect, Endpoint, Server, Values};
use crate::http::{ApiError, Request};
use crate::receive::json::{self, JsonError};
use crate::receive::payload;
use crate::receive::values::Source;
use crate::receive::{read_values, Receive, ValuesError};
use crate::state::bodies::BodyFile;

/// The query parameters `POST /api` accepts.
const PARAMS: [&str; 7] = [
    "api_key",
    "program_id",
    "variables",
    "function",
    "run_async",
    "callback",
    "stream",
];

/// What the values step makes for a run: its values (by input position),
/// its variables, the files it reads, and what else of the request the
/// run gets (for an `Idempotency-Key`'s fingerprint).
pub struct Made<'e> {
    /// The values, one per input.
    pub values: Vec<String>,
    /// The run's variables: the endpoint's, or a hook's environment.
    pub vars: Cow<'e, BTreeMap<String, String>>,
    /// A hook's `pass-file-to-command` files, removed after the run.
    pub files: Vec<BodyFile>,
    /// `NAME=value` of every variable and file taken from the request.
    pub request: Vec<String>,
}

/// The values step: make the values of `req` for `inputs` the way the
/// endpoint's [`Values`] says, and check them.
///
/// # Errors
/// Those of [`named_values`], the receive sources
/// (`invalid_payload`, `unsupported_media_type`, `variables_mismatch`) and
/// [`check_values`]; a hooks-file hook's, only over a bound
/// (`compat::webhook::values::make`).
pub fn make<'e>(
    server: &Server,
    req: &Request,
    endpoint: &'e Endpoint,
    read: &Read<'_>,
    inputs: &[String],
) -> Result<Made<'e>, ApiError> {
    if let Dialect::HooksFile(h) = &endpoint.dialect {
        let get = |s: &Source| read.get(s).map_err(body_error);
        let m = crate::compat::webhook::values::make(server, &h.values, get)?;
        return Ok(Made {
            values: m.values,
            vars: Cow::Owned(m.vars),
            files: m.files,
            request: m.request,
        });
    }
    let values = match &endpoint.values {
        Values::Positional => req.query_all("variables").map(str::to_string).collect(),
        Values::ByName => match sourced(&endpoint.receive, read, req, inputs)? {
            Some(values) => values,
            None => named_values(req, inputs)?,
        },
    };
    check_values(server, &endpoint.values, inputs, &values)?;
    Ok(Made {
        values,
        vars: Cow::Borrowed(&endpoint.vars),
        files: Vec::new(),
        request: Vec::new(),
    })
}

/// The values from the trigger's sources (`values`); `None` when the
/// endpoint reads values its own way. A trigger with other receive
/// settings but no `values` takes values by name from the query only: its
/// body is the sender's payload.
///
/// # Errors
/// `invalid_payload`, `unsupported_media_type`, and `variables_mismatch`
/// for a value the request does not carry.
fn sourced(
    rcv: &Receive,
    read: &Read<'_>,
    req: &Request,
    inputs: &[String],
) -> Result<Option<Vec<String>>, ApiError> {
    match &rcv.values {
        Some(specs) => read_values(|s| read.get(s), specs)
            .map(Some)
            .map_err(|e| values_error(e, inputs)),
        None if rcv.is_configured() => named_values_from(&req.query, b"", inputs).map(Some),
        None => Ok(None),
    }
}

fn values_error(e: ValuesError, inputs: &[String]) -> ApiError {
    match e {
        ValuesError::Body(e) => body_error(e),
        ValuesError::Missing { output, source } => ApiError::ValuesMismatch {
            msg: format!("Value '{output}' ({source}) is not in the request."),
            outputs: inputs.to_vec(),
        },
    }
}

/// Collect one string per input, by name, from the query and a JSON object
/// body.
///
/// # Errors
/// `variables_mismatch` (with the inputs) for missing, extra, repeated or
/// non-string values, or a body that is not a JSON object.
pub fn named_values(req: &Request, inputs: &[String]) -> Result<Vec<String>, ApiError> {
    named_values_from(&req.query, &req.body, inputs)
}

/// [`named_values`] over a query and a body (empty: no values from a body).
///
/// # Errors
/// As [`named_values`].
pub fn named_values_from(
    query: &[(String, String)],
    body: &[u8],
    inputs: &[String],
) -> Result<Vec<String>, ApiError> {
    let mismatch = |msg: String| ApiError::ValuesMismatch {
        msg,
        outputs: inputs.to_vec(),
    };
    let mut got: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in query.iter().filter(|(k, _)| k != "run_async") {
        if got.insert(k.clone(), v.clone()).is_some() {
            return Err(mismatch(format!("Value '{k}' is given more than once.")));
        }
    }
    if !body.iter().all(u8::is_ascii_whitespace) {
        // A key twice is refused like a query name twice; any other fault
        // (too deep included: values must be strings) is serde_json's.
        if let Err(JsonError::Duplicate(k)) = json::check(body, true, false) {
            let k = payload::shown(&k);
            return Err(mismatch(format!("Value '{k}' is given more than once.")));
        }
        let body: Value = serde_json::from_slice(body)
            .map_err(|e| mismatch(format!("The body must be a JSON object of strings: {e}.")))?;
        let Value::Object(map) = body else {
            return Err(mismatch(
                "The body must be a JSON object of strings, by output name.".into(),
            ));
        };
        for (k, v) in map {
            let Value::String(s) = v else {
                return Err(mismatch(format!("Value '{k}' must be a JSON string.")));
            };
            if got.insert(k.clone(), s).is_some() {
                return Err(mismatch(format!(
                    "Value '{k}' is given both in the query and in the body."
                )));
            }
        }
    }
    let expected = || format!("Expected outputs: [{}].", inputs.join(", "));
    if let Some(extra) = got.keys().find(|k| !inputs.contains(k)) {
        return Err(mismatch(format!("Unknown value '{extra}'. {}", expected())));
    }
    inputs
        .iter()
        .map(|o| {
            got.remove(o)
                .ok_or_else(|| mismatch(format!("Missing value '{o}'. {}", expected())))
        })
        .collect()
}

/// Check the values against the inputs and the size limits.
///
/// # Errors
/// `variables_mismatch` for a wrong count; `invalid_parameter` for more
/// than `max_variables` values, a value over `max_variable_bytes` or one
/// holding a NUL byte (`Parameter` is `variables`, or the input's name for
/// values by name).
pub fn check_values(
    server: &Server,
    source: &Values,
    inputs: &[String],
    values: &[String],
) -> Result<(), ApiError> {
    if values.len() != inputs.len() {
        return Err(ApiError::VariablesMismatch {
            outputs: inputs.to_vec(),
            got: values.len(),
        });
    }
    if values.len() > server.max_variables {
        return Err(ApiError::InvalidParameter {
            name: "variables".into(),
            msg: format!("At most {} variables are accepted.", server.max_variables),
        });
    }
    let bad = |i: usize, what: String| {
        let (name, value) = match source {
            Values::Positional => (
                "variables".to_string(),
                format!("Value {} (output '{}')", i + 1, inputs[i]),
            ),
            Values::ByName => (inputs[i].clone(), format!("Value '{}'", inputs[i])),
        };
        let msg = format!("{value} {what}");
        ApiError::InvalidParameter { name, msg }
    };
    let max = server.max_variable_bytes;
    if let Some(i) = values.iter().position(|v| v.len() > max) {
        return Err(bad(i, format!("is longer than the limit of {max} bytes.")));
    }
    // A NUL byte cannot be passed in an argument or an environment
    // variable: refuse it here rather than fail the run.
    if let Some(i) = values.iter().position(|v| v.contains('\0')) {
        return Err(bad(
            i,
            "contains a NUL byte, which a program cannot receive.".into(),
        ));
    }
    Ok(())
}

/// Refuse a request body where the values come from the query alone
/// ([`Values::Positional`], `POST /api`): a body silently ignored would
/// surface as an unrelated error.
///
/// # Errors
/// `invalid_parameter` (`Parameter`: `body`).
pub fn reject_body(req: &Request, source: &Values) -> Result<(), ApiError> {
    if !matches!(source, Values::Positional) || req.body.is_empty() {
        return Ok(());
    }
    Err(ApiError::InvalidParameter {
        name: "body".into(),
        msg: format!(
            "POST /api takes no request body (got {} bytes): send program_id, function, \
             run_async and one variables=<value> per output as query parameters, with an \
             empty body. A JSON body of values is accepted by the tool endpoints \
             (/tools/<tool>/<environment>/<trigger>).",
            req.body.len()
        ),
    })
}

/// Refuse query parameters `POST /api` does not know, naming the first.
///
/// # Errors
/// `invalid_parameter`.
pub fn reject_unknown(req: &Request) -> Result<(), ApiError> {
    match req
        .query
        .iter()
        .find(|(k, _)| !PARAMS.contains(&k.as_str()))
    {
        Some((k, _)) => Err(ApiError::InvalidParameter {
            name: k.clone(),
            msg: format!("Unknown parameter '{k}'. Accepted: {}.", PARAMS.join(", ")),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_parameter_is_named() {
        let r = Request::new("POST", "/api?api_key=k&color=red").unwrap();
        match reject_unknown(&r).unwrap_err() {
            ApiError::InvalidParameter { name, .. } => assert_eq!(name, "color"),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn an_over_long_value_is_the_same_fault_on_both_paths() {
        let cfg = crate::config::load_str(std::path::Path::new("c.toml"), "", &[]).unwrap();
        let mut server = cfg.server.clone();
        server.max_variable_bytes = 3;
        let inputs = ["a".to_string(), "b".to_string()];
        let values = ["x".to_string(), "long".to_string()];
        for (source, param) in [(Values::Positional, "variables"), (Values::ByName, "b")] {
            match check_values(&server, &source, &inputs, &values).unwrap_err() {
                ApiError::InvalidParameter { name, msg } => {
                    assert_eq!(name, param);
                    assert!(msg.contains("'b'") && msg.contains("3 bytes"), "{msg}");
                }
                e => panic!("{e:?}"),
            }
        }
    }
}
