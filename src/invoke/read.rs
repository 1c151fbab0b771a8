//! The request as rules and value sources see it, read in the endpoint's
//! [`Dialect`]: trigd's own ([`Incoming`]) or adnanh/webhook's
//! ([`WebhookRequest`]). The rule step and every value read go through
//! [`Read`], so each step of `invoke` is written once for both.

use std::path::PathBuf;

use crate::access::client_ip;
use crate::compat::webhook::receive::{BodyError, Fault, WebhookRequest};
use crate::config::{Config, Dialect};
use crate::http::{ApiError, Request};
use crate::receive::payload::{Kind, PayloadError, Why};
use crate::receive::rules::Verdict;
use crate::receive::values::{Incoming, Source, ValueError};
use crate::receive::Receive;

/// One request, read in an endpoint's dialect.
pub enum Read<'a> {
    /// trigd's own reading.
    Native(Incoming<'a>),
    /// adnanh/webhook's reading, and whether a failed signature in an
    /// `or` is only a non-match (`trigger-signature-soft-failures`).
    Webhook(WebhookRequest<'a>, bool),
}

impl<'a> Read<'a> {
    /// Read `req` in `dialect`.
    ///
    /// # Errors
    /// `invalid_payload` for a multipart body webhook cannot parse,
    /// `payload_too_complex` for one over a bound (other bodies are parsed
    /// lazily, when a rule or a source first needs them, in both readings).
    pub fn new(cfg: &Config, req: &'a Request, dialect: &Dialect) -> Result<Read<'a>, ApiError> {
        match dialect {
            Dialect::Native => {
                let client = client_ip(&cfg.server, req);
                let mut inc = Incoming::new(&req.headers, &req.query, &req.body, client);
                inc.method = req.method.as_str();
                Ok(Read::Native(inc))
            }
            Dialect::Webhook(w) => {
                let json_parts: Vec<String> = w
                    .json_params
                    .iter()
                    .filter_map(|s| match s {
                        Source::Payload(p) => Some(p.to_string()),
                        _ => None,
                    })
                    .collect();
                let mut wr = WebhookRequest::new(
                    req.method.as_str(),
                    req.remote,
                    &req.headers,
                    &req.query,
                    &req.body,
                    w.content_type.as_deref(),
                    &json_parts,
                )
                .map_err(|e| match e {
                    BodyError::Multipart => ApiError::InvalidPayload {
                        msg: "The multipart body cannot be parsed.".into(),
                    },
                    BodyError::TooComplex(msg) => ApiError::PayloadTooComplex {
                        msg: format!("The multipart request body is over a bound: {msg}."),
                    },
                })?;
                wr.parse_json_params(&w.json_params);
                Ok(Read::Webhook(wr, w.soft_signatures))
            }
        }
    }

    /// Evaluate the endpoint's rule (`receive.rule`), if it has one.
    ///
    /// # Errors
    /// `rules_not_matched` with `receive.answer.ignored_status` when it
    /// does not match. Natively, `invalid_payload` /
    /// `unsupported_media_type` when a source cannot read the body; read
    /// the webhook way, `rule_error` when a value cannot be evaluated (a
    /// signature that does not match), as webhook tells it from a
    /// non-match.
    pub fn rule(&self, rcv: &Receive) -> Result<(), ApiError> {
        let Some(rule) = &rcv.rule else { return Ok(()) };
        let ignored = |reason: String| ApiError::Ignored {
            status: rcv.answer.ignored_status,
            reason,
        };
        match self {
            Read::Native(inc) => match rule.eval(inc).map_err(body_error)? {
                Verdict::Match => Ok(()),
                Verdict::NoMatch(reason) => Err(ignored(reason)),
            },
            Read::Webhook(wr, soft) => match wr.eval(rule, *soft) {
                (_, Some(Fault::TooComplex(msg))) => Err(too_complex(msg)),
                (_, Some(Fault::Signature)) => Err(ApiError::RuleError {
                    reason: "a signature does not match".into(),
                }),
                (_, Some(Fault::Other(reason))) => Err(ApiError::RuleError { reason }),
                (false, _) => Err(ignored("the trigger rule was not satisfied".into())),
                (true, _) => Ok(()),
            },
        }
    }

    /// The value of `src`: `None` when the request does not carry it.
    ///
    /// # Errors
    /// Natively, a body that cannot be read for it.
    pub fn get(&self, src: &Source) -> Result<Option<String>, ValueError> {
        match self {
            Read::Native(inc) => inc.get(src),
            Read::Webhook(wr, _) => match wr.get(src) {
                Err(Fault::TooComplex(msg)) => Err(ValueError::Payload(PayloadError {
                    kind: Kind::of(Some(wr.content_type())),
                    msg,
                    why: Why::Bound,
                })),
                got => Ok(got.ok()),
            },
        }
    }

    /// Note the temporary file that holds the raw body (a `body_file`
    /// source reads its path).
    pub fn set_body_file(&mut self, path: Option<PathBuf>) {
        if let Read::Native(inc) = self {
            inc.body_file = path;
        }
    }
}

/// A body over a bound, read the webhook way.
fn too_complex(msg: String) -> ApiError {
    ApiError::PayloadTooComplex {
        msg: format!("The request body is over a bound: {msg}."),
    }
}

/// A body a source cannot read, as the caller is told.
pub fn body_error(e: ValueError) -> ApiError {
    match &e {
        ValueError::WrongType { .. } => ApiError::UnsupportedMediaType { msg: e.message() },
        ValueError::Payload(p) if p.why == Why::Bound => {
            ApiError::PayloadTooComplex { msg: e.message() }
        }
        ValueError::Repeated { name, .. } => ApiError::InvalidParameter {
            name: name.clone(),
            msg: e.message(),
        },
        _ => ApiError::InvalidPayload { msg: e.message() },
    }
}
