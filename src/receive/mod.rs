//! *Signed endpoints*: requests from third parties (GitHub, Stripe, Slack…),
//! signed or carrying a token. The building blocks that an endpoint
//! takes a request through — verify its signature, decide from rules
//! whether it runs, read values out of it — and the shape of its answer.
//!
//! Each block is plain data plus a pure function of the request, so any
//! entry point (a tool's endpoint trigger, a hook of an adnanh/webhook
//! hooks file) compiles
//! its configuration into a [`Receive`] once, at load, and calls the steps
//! in order: [`signature`], then [`rules`], then [`values`].
//!
//! Rules come before values on purpose: a sender's other events (GitHub's
//! `ping` has no `head_commit`) must be *ignored* by a rule, not refused
//! because a value the run would need is absent.

pub mod delivery;
pub mod json;
pub mod multipart;
pub mod payload;
pub mod rules;
pub mod shape;
pub mod signature;
pub mod values;

use rules::Rule;
use signature::Verifier;
use values::{Source, ValueError};

/// How one trigger receives requests, compiled from its configuration.
/// The default is today's behaviour: no verification, no rule, values by
/// output name from the query and a flat JSON object body.
#[derive(Debug, Clone, Default)]
pub struct Receive {
    /// Checked before anything else is read (`verify`).
    pub verify: Option<Verifier>,
    /// A request without `Idempotency-Key` that carries its sender's
    /// delivery id ([`delivery::id`]) is deduplicated by it
    /// (`verify.deduplicate`, on by default).
    pub deduplicate: bool,
    /// Where each output's value comes from, in output order (`values`);
    /// `None`: by output name from the query and a flat JSON object.
    pub values: Option<Vec<ValueSpec>>,
    /// Must match, or the request is ignored (`rule`).
    pub rule: Option<Rule>,
    /// Give the raw body to every step on its stdin (`stdin = "body"`).
    pub stdin_body: bool,
    /// The answer's shape (`response`).
    pub answer: Answer,
}

impl Receive {
    /// Whether any receive setting is given (else the trigger behaves as
    /// a plain generated endpoint).
    pub fn is_configured(&self) -> bool {
        self.verify.is_some() || self.values.is_some() || self.rule.is_some() || self.stdin_body
    }

    /// Every signature check of this trigger: `verify` and the rule's
    /// `signature` leaves.
    pub fn verifiers(&self) -> Vec<&Verifier> {
        let mut out: Vec<&Verifier> = self.verify.iter().collect();
        if let Some(rule) = &self.rule {
            rule.verifiers(&mut out);
        }
        out
    }

    /// Whether a run needs the raw body in a temporary file.
    pub fn needs_body_file(&self) -> bool {
        self.stdin_body
            || self
                .values
                .iter()
                .flatten()
                .any(|v| v.source == Source::BodyFile)
    }
}

/// One output's source.
#[derive(Debug, Clone)]
pub struct ValueSpec {
    /// The output name.
    pub output: String,
    /// Where the value comes from.
    pub source: Source,
    /// Used when the request does not carry the value; without it, a
    /// missing value is a 400.
    pub default: Option<String>,
}

/// Why values could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValuesError {
    /// The body is invalid or of the wrong kind.
    Body(ValueError),
    /// An output's value is absent and has no default.
    Missing {
        /// The output.
        output: String,
        /// Its source, described.
        source: String,
    },
}

/// Read every output's value, in order, with `get` (a request's reading,
/// such as [`values::Incoming::get`]).
///
/// # Errors
/// See [`ValuesError`].
pub fn read_values(
    get: impl Fn(&Source) -> Result<Option<String>, ValueError>,
    specs: &[ValueSpec],
) -> Result<Vec<String>, ValuesError> {
    specs
        .iter()
        .map(|s| match get(&s.source).map_err(ValuesError::Body)? {
            Some(v) => Ok(v),
            None => s.default.clone().ok_or_else(|| ValuesError::Missing {
                output: s.output.clone(),
                source: s.source.describe(),
            }),
        })
        .collect()
}

/// The answer's shape for one trigger (`[tools.triggers.response]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Status of a successful answer (`status`, default 200).
    pub status: u16,
    /// Extra headers on every answer of this trigger (`headers`).
    pub headers: Vec<(String, String)>,
    /// Whether the run's output (`Result`, and `Stderr` of a failed run)
    /// is in the answer (`output`, default true).
    pub output: bool,
    /// Run asynchronously unless the request says `run_async=false`
    /// (`run_async`, default false).
    pub run_async: bool,
    /// Status of the answer to a request the rule ignores
    /// (`ignored_status`, default 200: senders retry other statuses).
    pub ignored_status: u16,
    /// The body of a success answer (`text` or `body`), instead of trigd's
    /// JSON.
    pub body: Option<AnswerBody>,
    /// Its `Content-Type` (`content_type`); by default `text/plain;
    /// charset=utf-8`, `application/json` for `stdout_json`.
    pub content_type: Option<String>,
}

/// What a success answer's body is (`[tools.triggers.response]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerBody {
    /// This fixed text (`text`), sync or async.
    Text(String),
    /// The last step's stdout, as text (`body = "stdout"`); a sync run's.
    Stdout,
    /// The last step's stdout, which must be JSON (`body =
    /// "stdout_json"`), as JSON; a sync run's.
    StdoutJson,
}

impl Default for Answer {
    fn default() -> Self {
        Answer {
            status: 200,
            headers: Vec::new(),
            output: true,
            run_async: false,
            ignored_status: 200,
            body: None,
            content_type: None,
        }
    }
}
