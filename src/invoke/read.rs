//! The request as rules and value sources see it, read in the endpoint's
//! [`Dialect`]: trigd's own ([`Incoming`]) or a hooks-file hook's
//! (`compat::webhook::read::HookRead`). The rule step and every value read
//! go through [`Read`], so each step of `invoke` is written once for both.

use std::path::PathBuf;

use crate::access::client_ip;
use crate::compat::webhook::read::HookRead;
use crate::config::{Config, Dialect};
use crate::http::{ApiError, Request};
use crate::receive::payload::Why;
use crate::receive::rules::Verdict;
use crate::receive::values::{Incoming, Source, ValueError};
use crate::receive::Receive;

/// One request, read in an endpoint's dialect.
pub enum Read<'a> {
    /// trigd's own reading.
    Native(Incoming<'a>),
    /// A hooks-file hook's (adnanh/webhook's) reading.
    HooksFile(HookRead<'a>),
}

impl<'a> Read<'a> {
    /// Read `req` in `dialect`.
    ///
    /// # Errors
    /// A hooks-file hook's (`HookRead::new`); natively none: a body is
    /// parsed lazily, when a rule or a source first needs it.
    pub fn new(cfg: &Config, req: &'a Request, dialect: &Dialect) -> Result<Read<'a>, ApiError> {
        match dialect {
            Dialect::Native => {
                let client = client_ip(&cfg.server, req);
                let mut inc = Incoming::new(&req.headers, &req.query, &req.body, client);
                inc.method = req.method.as_str();
                Ok(Read::Native(inc))
            }
            Dialect::HooksFile(h) => Ok(Read::HooksFile(HookRead::new(req, &h.reading)?)),
        }
    }

    /// Evaluate the endpoint's rule (`receive.rule`), if it has one.
    ///
    /// # Errors
    /// `rules_not_matched` with `receive.answer.ignored_status` when it
    /// does not match. Natively, `invalid_payload` /
    /// `unsupported_media_type` when a source cannot read the body; a
    /// hooks-file hook's as `HookRead::rule` says.
    pub fn rule(&self, rcv: &Receive) -> Result<(), ApiError> {
        let Some(rule) = &rcv.rule else { return Ok(()) };
        match self {
            Read::Native(inc) => match rule.eval(inc).map_err(body_error)? {
                Verdict::Match => Ok(()),
                Verdict::NoMatch(reason) => Err(ApiError::Ignored {
                    status: rcv.answer.ignored_status,
                    reason,
                }),
            },
            Read::HooksFile(hook) => hook.rule(rcv),
        }
    }

    /// Whether the rule met a signature or token that does not hold (the
    /// request is then a failed authentication: `invoke`).
    pub fn signature_failed(&self) -> bool {
        match self {
            Read::Native(inc) => inc.signature_failed.get(),
            Read::HooksFile(hook) => hook.signature_failed(),
        }
    }

    /// The value of `src`: `None` when the request does not carry it.
    ///
    /// # Errors
    /// A body that cannot be read for it.
    pub fn get(&self, src: &Source) -> Result<Option<String>, ValueError> {
        match self {
            Read::Native(inc) => inc.get(src),
            Read::HooksFile(hook) => hook.get(src),
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
