//! A hooks-file hook's request as `invoke`'s rule and value steps see it
//! ([`HookRead`], behind `invoke::read::Read::HooksFile`): the reading of
//! `receive.rs` with the hook's options, and its faults said as trigd's
//! errors.

use std::cell::Cell;

use crate::http::{ApiError, Request};
use crate::receive::payload::{Kind, PayloadError, Why};
use crate::receive::values::{Source, ValueError};
use crate::receive::Receive;

use super::receive::{BodyError, Fault, HookRequest};
use super::Reading;

/// One request, read as adnanh/webhook reads it, and whether a failed
/// signature in an `or` is only a non-match
/// (`trigger-signature-soft-failures`).
pub struct HookRead<'a> {
    request: HookRequest<'a>,
    soft_signatures: bool,
    /// Set when the rule failed on a signature (`signature_failed`).
    signature_failed: Cell<bool>,
}

impl<'a> HookRead<'a> {
    /// Read `req` with the hook's options.
    ///
    /// # Errors
    /// `invalid_payload` for a multipart body webhook cannot parse,
    /// `payload_too_complex` for one over a bound (other bodies are parsed
    /// when a rule or a source first needs them).
    pub fn new(req: &'a Request, reading: &Reading) -> Result<HookRead<'a>, ApiError> {
        let json_parts: Vec<String> = reading
            .json_params
            .iter()
            .filter_map(|s| match s {
                Source::Payload(p) => Some(p.to_string()),
                _ => None,
            })
            .collect();
        let mut request = HookRequest::new(
            req.method.as_str(),
            req.remote.addr(),
            &req.headers,
            &req.query,
            &req.body,
            reading.content_type.as_deref(),
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
        request.parse_json_params(&reading.json_params);
        Ok(HookRead {
            request,
            soft_signatures: reading.soft_signatures,
            signature_failed: Cell::new(false),
        })
    }

    /// Evaluate the hook's rule (`receive.rule`), if it has one, with
    /// webhook's outcomes.
    ///
    /// # Errors
    /// `rules_not_matched` with `receive.answer.ignored_status` when it
    /// does not match; `rule_error` when a value cannot be evaluated (a
    /// signature that does not match), as webhook tells it from a
    /// non-match; `payload_too_complex` for a body over a bound.
    pub fn rule(&self, rcv: &Receive) -> Result<(), ApiError> {
        let Some(rule) = &rcv.rule else { return Ok(()) };
        match self.request.eval(rule, self.soft_signatures) {
            (_, Some(Fault::TooComplex(msg))) => Err(ApiError::PayloadTooComplex {
                msg: format!("The request body is over a bound: {msg}."),
            }),
            (_, Some(Fault::Signature)) => {
                self.signature_failed.set(true);
                Err(ApiError::RuleError {
                    reason: "a signature does not match".into(),
                })
            }
            (_, Some(Fault::Other(reason))) => Err(ApiError::RuleError { reason }),
            (false, _) => Err(ApiError::Ignored {
                status: rcv.answer.ignored_status,
                reason: "the trigger rule was not satisfied".into(),
            }),
            (true, _) => Ok(()),
        }
    }

    /// Whether [`HookRead::rule`] refused the request on a signature.
    pub fn signature_failed(&self) -> bool {
        self.signature_failed.get()
    }

    /// The value of `src`: `None` when the request does not carry it.
    ///
    /// # Errors
    /// A body over a bound.
    pub fn get(&self, src: &Source) -> Result<Option<String>, ValueError> {
        match self.request.get(src) {
            Err(Fault::TooComplex(msg)) => Err(ValueError::Payload(PayloadError {
                kind: Kind::of(Some(self.request.content_type())),
                msg,
                why: Why::Bound,
            })),
            got => Ok(got.ok()),
        }
    }
}
