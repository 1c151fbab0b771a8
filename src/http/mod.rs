//! Plain HTTP data at the boundary: [`Request`], [`Response`] and the one
//! error enum of the HTTP side, [`ApiError`], with its single conversion to a
//! JSON error body.
//!
//! Handlers never see tiny_http types: `server.rs` converts a tiny_http
//! request into a [`Request`] (bounded body, decoded path and query) and a
//! [`Response`] back. The table of statuses and codes lives in [`ApiError::status`] and
//! [`ApiError::code`], each one `match`, so the compiler checks that every
//! error has a status and a code.

pub mod acme;
pub mod api;
pub mod app;
pub mod listen;
pub mod logging;
pub mod metrics;
pub mod routes;
pub mod server;
pub mod systemd;
pub mod tls;
pub mod tools;

use std::borrow::Cow;
use std::fmt;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use serde_json::{json, Map, Value};

use crate::receive::signature::SigError;

/// The first path segment of every route of `routes.rs`: a hooks file's
/// `hooks_url_prefix` must not start with one (its hooks would hide the
/// route). A test checks it against the match.
pub const FIRST_SEGMENTS: [&str; 13] = [
    "api",
    "tools",
    "healthz",
    "livez",
    "metrics",
    "openapi.json",
    "login",
    "logout",
    "static",
    "workspaces",
    "runs",
    "schedules",
    ".well-known",
];

/// An HTTP method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Method {
    /// `GET`
    #[default]
    Get,
    /// `HEAD`
    Head,
    /// `POST`
    Post,
    /// `PUT`
    Put,
    /// `PATCH`
    Patch,
    /// `DELETE`
    Delete,
    /// `OPTIONS`
    Options,
    /// Any other method; no route serves it.
    Other,
}

impl Method {
    /// The method named `s`, in any case.
    pub fn parse(s: &str) -> Method {
        const ALL: [Method; 7] = [
            Method::Get,
            Method::Head,
            Method::Post,
            Method::Put,
            Method::Patch,
            Method::Delete,
            Method::Options,
        ];
        ALL.into_iter()
            .find(|m| m.as_str().eq_ignore_ascii_case(s))
            .unwrap_or(Method::Other)
    }

    /// The method of a request line, where the name is case-sensitive
    /// (RFC 9110 §9.1): `post` is no `POST`, and so gets `405`.
    pub fn of_request(s: &str) -> Method {
        match Method::parse(s) {
            m if m.as_str() == s => m,
            _ => Method::Other,
        }
    }

    /// The upper-case name (`OTHER` for [`Method::Other`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Other => "OTHER",
        }
    }
}

impl serde::Serialize for Method {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An HTTP request as handlers see it.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// The method.
    pub method: Method,
    /// The raw path, without the query string.
    pub path: String,
    /// Percent-decoded path segments, empty ones dropped.
    pub segments: Vec<String>,
    /// Percent-decoded query pairs, in order, repeats kept.
    pub query: Vec<(String, String)>,
    /// Headers with lower-case names, in order.
    pub headers: Vec<(String, String)>,
    /// The body (bounded by `max_body_bytes` before it gets here).
    pub body: Vec<u8>,
    /// The other end of the connection.
    pub remote: Peer,
}

/// The other end of a connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Peer {
    /// Not known (a request not read from a connection).
    #[default]
    Unknown,
    /// A TCP peer.
    Ip(SocketAddr),
    /// A peer on the Unix socket (it has no address).
    Unix,
}

impl Peer {
    /// The TCP peer's address.
    pub fn addr(self) -> Option<SocketAddr> {
        match self {
            Peer::Ip(a) => Some(a),
            Peer::Unknown | Peer::Unix => None,
        }
    }
}

impl Request {
    /// Build a request from a method and a target such as `/api?x=1`.
    ///
    /// # Errors
    /// A query that is not valid percent-encoded UTF-8 gives
    /// [`ApiError::InvalidParameter`]; a bad path gives [`ApiError::NotFound`].
    pub fn new(method: &str, target: &str) -> Result<Request, ApiError> {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let mut segments = Vec::new();
        for raw in path.split('/').filter(|s| !s.is_empty()) {
            let seg = percent_decode(raw, false).ok_or(ApiError::NotFound)?;
            // A decoded slash or dot segment never names anything we serve.
            if seg.contains('/') || seg == "." || seg == ".." {
                return Err(ApiError::NotFound);
            }
            segments.push(seg);
        }
        Ok(Request {
            method: Method::of_request(method),
            path: path.to_string(),
            segments,
            query: parse_query(query)?,
            ..Request::default()
        })
    }

    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of header `name` (lower case) that may appear at most
    /// once: of two, neither would be safe to pick. `shown` is its name in
    /// the answer.
    ///
    /// # Errors
    /// [`ApiError::InvalidParameter`] when it is repeated.
    pub fn header_one(&self, name: &str, shown: &str) -> Result<Option<&str>, ApiError> {
        let mut it = self.headers.iter().filter(|(k, _)| k == name);
        let first = it.next().map(|(_, v)| v.as_str());
        if it.next().is_some() {
            return Err(ApiError::InvalidParameter {
                name: shown.to_string(),
                msg: format!("header '{shown}' may be given only once"),
            });
        }
        Ok(first)
    }

    /// Every value of query parameter `name`, in order.
    pub fn query_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.query
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of a query parameter that may appear at most once.
    ///
    /// # Errors
    /// [`ApiError::InvalidParameter`] when it is repeated.
    pub fn query_one<'a>(&'a self, name: &'a str) -> Result<Option<&'a str>, ApiError> {
        let mut it = self.query_all(name);
        let first = it.next();
        if it.next().is_some() {
            return Err(ApiError::InvalidParameter {
                name: name.to_string(),
                msg: format!("parameter '{name}' may be given only once"),
            });
        }
        Ok(first)
    }

    /// The token of an `Authorization: Bearer <token>` header.
    pub fn bearer(&self) -> Option<&str> {
        let v = self.header("authorization")?;
        let (scheme, token) = v.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
    }

    /// The path and query as they may appear in a log: values of
    /// `api_key` replaced, so that no secret reaches a log line. Written
    /// as it is formatted (no allocation).
    pub fn log_target(&self) -> LogTarget<'_> {
        LogTarget(self)
    }
}

/// A request's path and query for a log line ([`Request::log_target`]):
/// each query pair percent-encoded again, `api_key`'s value `[redacted]`.
pub struct LogTarget<'a>(&'a Request);

impl LogTarget<'_> {
    /// Write the target to `out`.
    ///
    /// # Errors
    /// Those of `out`.
    pub fn write_to(&self, out: &mut impl fmt::Write) -> fmt::Result {
        out.write_str(&self.0.path)?;
        for (i, (k, v)) in self.0.query.iter().enumerate() {
            out.write_str(if i == 0 { "?" } else { "&" })?;
            utf8_percent_encode(k, NOT_UNRESERVED).try_for_each(|p| out.write_str(p))?;
            out.write_str("=")?;
            if k == "api_key" {
                out.write_str("[redacted]")?;
            } else {
                utf8_percent_encode(v, NOT_UNRESERVED).try_for_each(|p| out.write_str(p))?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for LogTarget<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_to(f)
    }
}

/// Parse a query string into decoded pairs.
fn parse_query(q: &str) -> Result<Vec<(String, String)>, ApiError> {
    form_pairs(q).map_err(|k| ApiError::InvalidParameter {
        msg: format!("query parameter '{k}' is not valid percent-encoded UTF-8"),
        name: k,
    })
}

/// Decode `application/x-www-form-urlencoded` text (`a=1&b=x+y`, also the
/// query string) into pairs, in order, repeats kept.
///
/// # Errors
/// The raw key of the first pair that is not valid percent-encoded UTF-8.
pub fn form_pairs(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for part in text.split('&').filter(|s| !s.is_empty()) {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        match (percent_decode(k, true), percent_decode(v, true)) {
            (Some(key), Some(value)) => out.push((key, value)),
            _ => return Err(k.to_string()),
        }
    }
    Ok(out)
}

/// Decode `%XX` escapes (and `+` as space when `plus` is set). `None` for a
/// malformed escape or a result that is not UTF-8.
fn percent_decode(s: &str, plus: bool) -> Option<String> {
    let escaped = s.contains('%') || (plus && s.contains('+'));
    if !escaped {
        return Some(s.to_string()); // nothing to decode (most names and values)
    }
    let b = s.as_bytes();
    let malformed = b.iter().enumerate().any(|(i, &c)| {
        c == b'%'
            && !b
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    if malformed {
        return None;
    }
    // One allocation for the result (two when `+` must become a space).
    let s: Cow<str> = if plus && s.contains('+') {
        s.replace('+', " ").into()
    } else {
        s.into()
    };
    let decoded = percent_decode_str(&s).decode_utf8().ok()?;
    Some(decoded.into_owned())
}

/// Everything but the unreserved characters of RFC 3986.
const NOT_UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encode everything but unreserved characters.
pub fn percent_encode(s: &str) -> String {
    utf8_percent_encode(s, NOT_UNRESERVED).to_string()
}

/// An HTTP response as handlers build it.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Extra headers (Content-Type included).
    pub headers: Vec<(String, String)>,
    /// Body bytes.
    pub body: Vec<u8>,
    /// Run id to show in the access log, when the request made a run.
    pub run: Option<String>,
    /// A body written as it is read (chunked), instead of `body`.
    pub stream: Option<StreamBody>,
}

/// A response body produced while it is sent: the server copies it to the
/// connection with chunked encoding, flushing each piece.
#[derive(Clone)]
pub struct StreamBody(Arc<Mutex<Option<Box<dyn Read + Send>>>>);

impl StreamBody {
    /// A body read from `r`.
    pub fn new(r: impl Read + Send + 'static) -> StreamBody {
        StreamBody(Arc::new(Mutex::new(Some(Box::new(r)))))
    }

    /// The reader (once).
    pub fn take(&self) -> Option<Box<dyn Read + Send>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl std::fmt::Debug for StreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamBody")
    }
}

impl Response {
    /// A JSON response.
    pub fn json(status: u16, value: &Value) -> Response {
        let mut body = serde_json::to_vec(value).unwrap_or_default();
        body.push(b'\n');
        Response::json_bytes(status, body)
    }

    /// A JSON response whose body is already serialized.
    pub(crate) fn json_bytes(status: u16, body: Vec<u8>) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body,
            run: None,
            stream: None,
        }
    }

    /// A plain text response.
    pub fn text(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: body.into(),
            run: None,
            stream: None,
        }
    }

    /// A response whose body is read from `body` while it is sent.
    pub fn streaming(
        status: u16,
        content_type: &str,
        body: impl Read + Send + 'static,
    ) -> Response {
        let mut r = Response::text(status, content_type, Vec::new());
        r.stream = Some(StreamBody::new(body));
        r
    }

    /// The body as JSON (`Null` when it is not JSON).
    pub fn json_body(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// Add a header.
    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Response {
        self.headers.push((name.to_string(), value.into()));
        self
    }

    /// Note the run id for the access log.
    pub fn with_run(mut self, run: &str) -> Response {
        self.run = Some(run.to_string());
        self
    }
}

/// Every error an HTTP handler can answer with.
#[derive(Debug, Clone, PartialEq)]
pub enum ApiError {
    /// No api_key parameter and no bearer token.
    MissingApiKey,
    /// The key matches no configured key.
    InvalidApiKey,
    /// program_id missing or not a non-negative integer.
    InvalidProgramId,
    /// Unknown program, or one outside the key's scope.
    ProgramNotFound,
    /// Unknown function; lists the triggered functions.
    FunctionNotFound {
        /// The requested name.
        name: String,
        /// Functions with an active webhook trigger.
        functions: Vec<String>,
    },
    /// The function has no active webhook trigger.
    TriggerInactive {
        /// The function.
        name: String,
    },
    /// Several triggered functions and no `function` parameter.
    FunctionRequired {
        /// Functions with an active webhook trigger.
        functions: Vec<String>,
    },
    /// No function of the program has an active webhook trigger.
    NoActiveTrigger,
    /// The number of values differs from the outputs.
    VariablesMismatch {
        /// The outputs, in order.
        outputs: Vec<String>,
        /// How many values were sent.
        got: usize,
    },
    /// Values by name (generated endpoints) missing, extra, repeated, not
    /// strings, or oversized.
    ValuesMismatch {
        /// What is wrong.
        msg: String,
        /// The outputs, in order.
        outputs: Vec<String>,
    },
    /// A bad, unknown or repeated parameter.
    InvalidParameter {
        /// The parameter.
        name: String,
        /// What is wrong with it.
        msg: String,
    },
    /// Method not served on this path.
    MethodNotAllowed {
        /// Methods that are.
        allow: Vec<&'static str>,
    },
    /// A step exited non-zero, was killed, or could not start.
    RunFailed {
        /// Run id.
        run: String,
        /// Index of the failing top-level step.
        step: usize,
        /// Exit code, when it exited.
        exit_code: Option<i32>,
        /// Signal, when it was killed.
        signal: Option<i32>,
        /// Tail of its stderr (or the spawn error).
        stderr: String,
        /// Tail of its stdout (may be empty).
        stdout: String,
    },
    /// The sync run passed its timeout.
    RunTimeout {
        /// Run id.
        run: String,
    },
    /// The run was stopped because trigd is shutting down.
    RunInterrupted {
        /// Run id.
        run: String,
    },
    /// The sync run was cancelled (`POST /api/runs/<id>/cancel`).
    RunCancelled {
        /// Run id.
        run: String,
    },
    /// A newer run of its concurrency group replaced the run while it
    /// waited (`replace_pending`, `cancel_running`).
    RunSuperseded {
        /// Run id.
        run: String,
        /// The newer run.
        by: String,
    },
    /// The run's concurrency group was at its limit (`policy = "skip"`).
    RunSkipped {
        /// Run id.
        run: String,
        /// The group key.
        group: String,
    },
    /// Cancel of a run that has already ended.
    RunEnded {
        /// Run id.
        run: String,
        /// Its final state.
        state: &'static str,
    },
    /// A re-run of a run that has not ended (`POST /api/runs/<id>/rerun`).
    RunNotEnded {
        /// Run id.
        run: String,
        /// Its state.
        state: &'static str,
    },
    /// A redelivery of a callback delivery that is not over: still
    /// `waiting` or `pending` (`POST /api/runs/<id>/callbacks/<delivery>/
    /// redeliver`). Code `run_not_ended`, as the manual lists it.
    DeliveryNotOver {
        /// Run id.
        run: String,
        /// The delivery's state.
        state: &'static str,
    },
    /// A re-run of a run whose values were not kept.
    RerunUnavailable {
        /// Why.
        reason: &'static str,
    },
    /// A re-run whose function or trigger no longer exists.
    RerunTargetGone {
        /// What is gone.
        what: String,
    },
    /// No callback delivery of this id in the run's record.
    DeliveryNotFound,
    /// No run slot or the queue is full.
    Busy {
        /// Seconds for `Retry-After`.
        retry_after: u64,
        /// Why.
        msg: String,
    },
    /// The run could not be recorded durably (state dir unwritable).
    StorageUnavailable,
    /// The PostgreSQL database (`[state] url`) cannot be reached.
    StateUnavailable,
    /// The state dir's disk is full: no new run can be recorded.
    DiskFull,
    /// An `Idempotency-Key` already used for a different request.
    IdempotencyMismatch,
    /// trigd is shutting down and accepts no new runs.
    ShuttingDown,
    /// Too many requests (failed logins, failed authentications of an
    /// address, or a key's `rate_per_minute`).
    RateLimited {
        /// Seconds for `Retry-After`.
        retry_after: u64,
    },
    /// Unknown run id (or not visible to this key).
    RunNotFound,
    /// The run id names another instance, which owns the run.
    RunOnOtherInstance {
        /// The owner's instance name.
        instance: String,
    },
    /// Missing or bad credentials on a protected endpoint.
    Unauthorized,
    /// Valid credentials of someone who is not a member of the workspace.
    Forbidden,
    /// A bearer request without a valid User-Agent header.
    UserAgentRequired,
    /// A state-changing request authenticated by a session cookie that
    /// carries no proof of coming from a trigd page (CSRF protection).
    CsrfRejected,
    /// Wrong user name or password (never says which).
    LoginFailed,
    /// A member who is not in the workspace's `admins` tried to flip a
    /// public switch.
    AdminRequired,
    /// The config file cannot be written (read-only mount, permissions), so
    /// the public switch cannot be flipped from trigd.
    ConfigNotWritable {
        /// Why, in words.
        reason: String,
    },
    /// The config file does not define what the edit changes, or the edited
    /// file would not validate; nothing was written.
    ConfigInvalid {
        /// What is wrong.
        msg: String,
    },
    /// The client stopped sending the request body before `request_timeout`.
    RequestTimeout,
    /// The request line or a header is not valid HTTP/1.1 (answered by the
    /// HTTP server itself, before routing).
    BadRequest,
    /// Plain HTTP sent to the HTTPS port (answered by the HTTP server
    /// itself, before the TLS handshake; nginx's 497).
    HttpsRequired,
    /// The request line is longer than `max_url_bytes` (HTTP server).
    UriTooLong,
    /// The header section is larger than `max_header_bytes`, or has more
    /// than 100 headers (HTTP server).
    HeadersTooLarge,
    /// Request body larger than `max_body_bytes`.
    PayloadTooLarge {
        /// The limit.
        limit: usize,
    },
    /// The request names a callback URL, but neither the key nor the
    /// trigger has `request_callbacks = true`.
    CallbackNotPermitted,
    /// The requested callback URL is malformed or outside `[callbacks]`.
    CallbackRefused {
        /// Why.
        msg: String,
    },
    /// No such path.
    NotFound,
    /// A signed endpoint's signature or token is missing (401), malformed,
    /// wrong or outside its replay window (403).
    Signature(crate::receive::signature::SigError),
    /// The body is not what its `Content-Type` says (invalid JSON, XML,
    /// multipart), or a value in it is not text.
    InvalidPayload {
        /// What is wrong (no body content quoted).
        msg: String,
    },
    /// The body's shape is over a bound (nesting, XML elements or
    /// attributes, form fields, multipart parts or part headers).
    PayloadTooComplex {
        /// Which bound (no body content quoted).
        msg: String,
    },
    /// The endpoint reads its values from another kind of body.
    UnsupportedMediaType {
        /// What is expected and what came.
        msg: String,
    },
    /// The endpoint's rule does not match the request: nothing ran. Not a
    /// failure: answered with the trigger's `ignored_status`.
    Ignored {
        /// The status to answer with.
        status: u16,
        /// Where the rule failed (never an expected value or a secret).
        reason: String,
    },
    /// A hooks-file hook's rule could not be evaluated (read as
    /// adnanh/webhook reads it: a signature that does not match): nothing
    /// ran. Only hooks of hooks files meet it, answered with webhook's
    /// text.
    RuleError {
        /// What failed (never a value or a secret).
        reason: String,
    },
    /// A run finished, but its trigger answers with the last step's stdout
    /// as JSON (`response.body = "stdout_json"`) and it is not JSON.
    AnswerNotJson,
    /// A bug: a handler panicked or an invariant broke.
    Internal,
    /// A repeat with an `Idempotency-Key` answered with its original
    /// run's error (`run_failed`, `run_timeout`…): that error, marked
    /// `Idempotent-Replayed: true` as a replayed success is.
    Replayed(Box<ApiError>),
}

/// The response header marking an answer to a repeat with an
/// `Idempotency-Key` (`runs::replay`), its error too
/// ([`ApiError::Replayed`]).
pub const REPLAYED: &str = "Idempotent-Replayed";

impl ApiError {
    /// Whether this is the outcome of a run that was started (it failed,
    /// timed out, was interrupted or cancelled), as opposed to a refusal.
    pub fn is_run_outcome(&self) -> bool {
        match self {
            ApiError::Replayed(e) => e.is_run_outcome(),
            e => matches!(
                e,
                ApiError::RunFailed { .. }
                    | ApiError::RunTimeout { .. }
                    | ApiError::RunInterrupted { .. }
                    | ApiError::RunCancelled { .. }
            ),
        }
    }

    /// The error itself, without a [`ApiError::Replayed`] mark.
    pub fn unmarked(&self) -> &ApiError {
        match self {
            ApiError::Replayed(e) => e.unmarked(),
            e => e,
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> u16 {
        use ApiError::*;
        match self {
            Replayed(e) => e.status(),
            MissingApiKey | InvalidApiKey => 401,
            InvalidProgramId | FunctionRequired { .. } | VariablesMismatch { .. } => 400,
            InvalidParameter { .. } | ValuesMismatch { .. } => 400,
            CallbackRefused { .. } => 400,
            CallbackNotPermitted => 403,
            Unauthorized | LoginFailed => 401,
            Forbidden | UserAgentRequired | CsrfRejected | AdminRequired => 403,
            ProgramNotFound | FunctionNotFound { .. } | RunNotFound | NotFound => 404,
            RunOnOtherInstance { .. } => 421,
            TriggerInactive { .. } | NoActiveTrigger => 409,
            RunCancelled { .. } | RunEnded { .. } => 409,
            RunSuperseded { .. } | RunSkipped { .. } => 409,
            RunNotEnded { .. }
            | DeliveryNotOver { .. }
            | RerunUnavailable { .. }
            | RerunTargetGone { .. } => 409,
            DeliveryNotFound => 404,
            ConfigNotWritable { .. } | ConfigInvalid { .. } => 409,
            MethodNotAllowed { .. } => 405,
            Ignored { status, .. } => *status,
            RuleError { .. } | AnswerNotJson => 500,
            Signature(SigError::Missing { .. }) => 401,
            Signature(_) => 403,
            InvalidPayload { .. } => 400,
            PayloadTooComplex { .. } => 413,
            UnsupportedMediaType { .. } => 415,
            RequestTimeout => 408,
            HttpsRequired => 400,
            BadRequest => 400,
            UriTooLong => 414,
            HeadersTooLarge => 431,
            PayloadTooLarge { .. } => 413,
            RateLimited { .. } => 429,
            RunFailed { .. } | Internal => 500,
            Busy { .. } | StorageUnavailable | ShuttingDown | RunInterrupted { .. } => 503,
            StateUnavailable => 503,
            DiskFull => 503,
            IdempotencyMismatch => 422,
            RunTimeout { .. } => 504,
        }
    }

    /// The stable snake_case code.
    pub fn code(&self) -> &'static str {
        use ApiError::*;
        match self {
            Replayed(e) => e.code(),
            MissingApiKey => "missing_api_key",
            InvalidApiKey => "invalid_api_key",
            InvalidProgramId => "invalid_program_id",
            ProgramNotFound => "program_not_found",
            FunctionNotFound { .. } => "function_not_found",
            TriggerInactive { .. } => "trigger_inactive",
            FunctionRequired { .. } => "function_required",
            NoActiveTrigger => "no_active_trigger",
            VariablesMismatch { .. } | ValuesMismatch { .. } => "variables_mismatch",
            Unauthorized => "unauthorized",
            Forbidden => "forbidden",
            UserAgentRequired => "user_agent_required",
            CsrfRejected => "csrf_rejected",
            LoginFailed => "login_failed",
            AdminRequired => "admin_required",
            ConfigNotWritable { .. } => "config_not_writable",
            ConfigInvalid { .. } => "config_invalid",
            InvalidParameter { .. } => "invalid_parameter",
            MethodNotAllowed { .. } => "method_not_allowed",
            RunFailed { .. } => "run_failed",
            RunTimeout { .. } => "run_timeout",
            RunInterrupted { .. } => "run_interrupted",
            RunCancelled { .. } => "run_cancelled",
            RunSuperseded { .. } => "run_superseded",
            RunSkipped { .. } => "run_skipped",
            RunEnded { .. } => "run_ended",
            RunNotEnded { .. } | DeliveryNotOver { .. } => "run_not_ended",
            RerunUnavailable { .. } => "rerun_unavailable",
            RerunTargetGone { .. } => "rerun_target_gone",
            DeliveryNotFound => "delivery_not_found",
            Busy { .. } => "busy",
            StorageUnavailable => "storage_unavailable",
            StateUnavailable => "state_unavailable",
            DiskFull => "disk_full",
            IdempotencyMismatch => "idempotency_key_reused",
            ShuttingDown => "shutting_down",
            RateLimited { .. } => "rate_limited",
            RunNotFound => "run_not_found",
            RunOnOtherInstance { .. } => "run_on_other_instance",
            RequestTimeout => "request_timeout",
            HttpsRequired => "https_required",
            BadRequest => "bad_request",
            UriTooLong => "uri_too_long",
            HeadersTooLarge => "headers_too_large",
            PayloadTooLarge { .. } => "payload_too_large",
            CallbackNotPermitted => "callback_not_permitted",
            CallbackRefused { .. } => "callback_refused",
            NotFound => "not_found",
            Ignored { .. } => "rules_not_matched",
            RuleError { .. } => "rule_error",
            AnswerNotJson => "answer_not_json",
            Signature(SigError::Missing { .. }) => "signature_missing",
            Signature(SigError::Malformed { .. }) => "signature_malformed",
            Signature(SigError::Mismatch { .. }) => "signature_mismatch",
            Signature(SigError::Expired { .. }) => "signature_expired",
            InvalidPayload { .. } => "invalid_payload",
            PayloadTooComplex { .. } => "payload_too_complex",
            UnsupportedMediaType { .. } => "unsupported_media_type",
            Internal => "internal_error",
        }
    }

    /// A sentence a person can act on.
    pub fn message(&self) -> Cow<'static, str> {
        use ApiError::*;
        match self {
            Replayed(e) => e.message(),
            MissingApiKey => "An API key is required: pass api_key=<key> in the query string or an 'Authorization: Bearer <key>' header.".into(),
            InvalidApiKey => "The API key is not valid. Check it, or create one with 'trigd keygen'.".into(),
            InvalidProgramId => "program_id is required and must be a non-negative integer.".into(),
            ProgramNotFound => "No program with this program_id is available to this API key.".into(),
            FunctionNotFound { name, .. } => format!("The program has no function '{name}'. See Functions for the ones you can run.").into(),
            TriggerInactive { name } => format!("Function '{name}' has no active webhook trigger, so it cannot be run over HTTP.").into(),
            FunctionRequired { .. } => "This program has several functions with webhook triggers: name one with function=<name> (see Functions).".into(),
            NoActiveTrigger => "No function of this program has an active webhook trigger.".into(),
            VariablesMismatch { outputs, got } => format!(
                "expected {} variable{} for outputs [{}], got {got}: send one variables=<value> per output, in this order.",
                outputs.len(),
                if outputs.len() == 1 { "" } else { "s" },
                outputs.join(", ")
            )
            .into(),
            InvalidParameter { msg, .. } | ValuesMismatch { msg, .. } => msg.clone().into(),
            Unauthorized => "Authentication required: send 'Authorization: Bearer <application key>' (see your workspace settings, item \"Application Key\") or log in.".into(),
            Forbidden => "These credentials do not belong to a member of this tool's workspace.".into(),
            UserAgentRequired => "Requests with a bearer key must send a User-Agent header (printable ASCII, not empty), e.g. 'User-Agent: my-script/1.0'.".into(),
            CsrfRejected => "Request refused as possibly cross-site: with a session cookie, a request that changes something must come from a trigd page (same origin) or send the page's X-CSRF-Token header. Scripts should use 'Authorization: Bearer <application key>' instead.".into(),
            LoginFailed => "Wrong user name or password.".into(),
            AdminRequired => "Only the workspace's admins may change the public switch of its tools (see `admins` of the workspace in config.toml).".into(),
            ConfigNotWritable { reason } => format!("The public switch cannot be changed from trigd: {reason}. Change `public` in the config file instead.").into(),
            ConfigInvalid { msg } => format!("Nothing was changed: {msg}.").into(),
            MethodNotAllowed { allow } => format!("Method not allowed here; use {}.", allow.join(" or ")).into(),
            RunFailed { step, exit_code, signal, .. } => match (exit_code, signal) {
                (Some(c), _) => format!("The program failed: step {step} exited with status {c}.").into(),
                (None, Some(s)) => format!("The program failed: step {step} was killed by signal {s}.").into(),
                (None, None) => format!("The program failed: step {step} could not be started.").into(),
            },
            RunTimeout { .. } => "The program did not finish within its timeout and was stopped.".into(),
            RunInterrupted { .. } => "trigd is shutting down; the run was stopped before it finished.".into(),
            RunCancelled { .. } => "The run was cancelled before it finished: by POST /api/runs/<id>/cancel, or by a newer run of its concurrency group (cancel_running).".into(),
            RunSuperseded { by, .. } => format!("The run did not run: run {by}, a newer run of its concurrency group, replaced it while it waited (see SupersededBy in its record).").into(),
            RunSkipped { group, .. } => format!("The run did not run: its concurrency group {group:?} was at its limit (policy skip). Retry once the group's run has ended.").into(),
            RunEnded { state, .. } => format!("The run has already ended ({state}); only a queued or running run can be cancelled.").into(),
            RunNotEnded { state, .. } => format!("The run has not ended yet ({state}); re-run it once it has (or cancel it first).").into(),
            DeliveryNotOver { state, .. } => format!("The callback delivery is still {state}; redeliver it once it is over (delivered, failed or skipped).").into(),
            RerunUnavailable { reason } => format!("This run cannot be re-run: {reason}. Start a new run with its values instead.").into(),
            RerunTargetGone { what } => format!("This run cannot be re-run: {what} no longer exists in the config.").into(),
            DeliveryNotFound => "The run has no callback delivery with this id (see Callbacks in its record).".into(),
            Busy { msg, .. } => msg.clone().into(),
            StorageUnavailable => "The run could not be recorded (state directory not writable), so it was not started. Retry later.".into(),
            StateUnavailable => "The database holding trigd's state cannot be reached; nothing was done. Retry after Retry-After seconds.".into(),
            DiskFull => "The disk of trigd's state directory is full, so no new run can be recorded and none is started. Runs already accepted are kept. Retry after Retry-After seconds.".into(),
            IdempotencyMismatch => "This Idempotency-Key was already used for a different request (another program, trigger, function or values). Use a new key for a new request.".into(),
            ShuttingDown => "trigd is shutting down and accepts no new runs. Retry shortly.".into(),
            RateLimited { retry_after } => format!("Too many requests (failed attempts, or the key's rate_per_minute). Wait {retry_after} seconds (Retry-After), then try again.").into(),
            RunNotFound => "No run with this id is visible to this API key.".into(),
            RunOnOtherInstance { instance } => format!("This run belongs to trigd instance '{instance}', not to this one; ask that instance (a load balancer routes /api/runs/{instance}-… there while it is up).").into(),
            RequestTimeout => "The request was not received in time (request_timeout); send the whole body promptly.".into(),
            HttpsRequired => "This port speaks HTTPS: use an https:// URL.".into(),
            BadRequest => "The request is not valid HTTP/1.1.".into(),
            UriTooLong => "The request line (method and URL) is longer than the limit (max_url_bytes).".into(),
            HeadersTooLarge => "The request headers are larger than the limit (max_header_bytes, at most 100 headers).".into(),
            PayloadTooLarge { limit } => format!("The request body is larger than the limit of {limit} bytes.").into(),
            CallbackNotPermitted => "This request names a callback URL, which this key or trigger may not do (the config needs request_callbacks = true).".into(),
            CallbackRefused { msg } => format!("The callback URL is refused: {msg}.").into(),
            NotFound => "Not found.".into(),
            Signature(e) => e.message().into(),
            Ignored { .. } => "The request does not match this endpoint's rule, so nothing ran.".into(),
            RuleError { reason } => format!("The endpoint's rule could not be evaluated ({reason}), so nothing ran.").into(),
            AnswerNotJson => "The run finished, but this trigger answers with the last step's stdout as JSON (response.body = \"stdout_json\") and it is not JSON; the run's record has its Result.".into(),
            InvalidPayload { msg } | UnsupportedMediaType { msg } => msg.clone().into(),
            PayloadTooComplex { msg } => format!("{msg} (See \"Inputs and their bounds\" in the manual, docs/security.md.)").into(),
            Internal => "Internal error. The server log has the details.".into(),
        }
    }

    /// The fields besides `Error` and `Code` that help the caller.
    fn extra(&self, body: &mut Map<String, Value>) {
        use ApiError::*;
        match self {
            Replayed(e) => e.extra(body),
            FunctionNotFound { functions, .. } | FunctionRequired { functions } => {
                body.insert("Functions".into(), json!(functions));
            }
            VariablesMismatch { outputs, got } => {
                body.insert("Outputs".into(), json!(outputs));
                body.insert("Got".into(), json!(got));
            }
            ValuesMismatch { outputs, .. } => {
                body.insert("Outputs".into(), json!(outputs));
            }
            InvalidParameter { name, .. } => {
                body.insert("Parameter".into(), json!(name));
            }
            ConfigNotWritable { reason } => {
                body.insert("Reason".into(), json!(reason));
            }
            MethodNotAllowed { allow } => {
                body.insert("Allow".into(), json!(allow));
            }
            RunFailed {
                run,
                step,
                exit_code,
                signal,
                stderr,
                stdout,
            } => {
                body.insert("Run".into(), json!(run));
                body.insert("Step".into(), json!(step));
                if let Some(c) = exit_code {
                    body.insert("ExitCode".into(), json!(c));
                }
                if let Some(s) = signal {
                    body.insert("Signal".into(), json!(s));
                }
                body.insert("Stderr".into(), json!(stderr));
                body.insert("Stdout".into(), json!(stdout));
            }
            RunOnOtherInstance { instance } => {
                body.insert("Instance".into(), json!(instance));
            }
            RunTimeout { run } | RunInterrupted { run } | RunCancelled { run } => {
                body.insert("Run".into(), json!(run));
            }
            RunSuperseded { run, by } => {
                body.insert("Run".into(), json!(run));
                body.insert("SupersededBy".into(), json!(by));
            }
            RunSkipped { run, group } => {
                body.insert("Run".into(), json!(run));
                body.insert("Group".into(), json!(group));
            }
            RunEnded { run, state }
            | RunNotEnded { run, state }
            | DeliveryNotOver { run, state } => {
                body.insert("Run".into(), json!(run));
                body.insert("State".into(), json!(state));
            }
            Busy { retry_after, .. } | RateLimited { retry_after } => {
                body.insert("RetryAfter".into(), json!(retry_after));
            }
            _ => {}
        }
    }

    /// The headers this error needs.
    fn headers(&self) -> Vec<(String, String)> {
        match self {
            ApiError::Replayed(e) => {
                let mut h = e.headers();
                h.push((REPLAYED.into(), "true".into()));
                h
            }
            ApiError::MethodNotAllowed { allow } => vec![("Allow".into(), allow.join(", "))],
            ApiError::Busy { retry_after, .. } | ApiError::RateLimited { retry_after } => {
                vec![("Retry-After".into(), retry_after.to_string())]
            }
            ApiError::Unauthorized => {
                vec![("WWW-Authenticate".into(), "Bearer realm=\"trigd\"".into())]
            }
            ApiError::StorageUnavailable | ApiError::ShuttingDown | ApiError::DiskFull => {
                vec![("Retry-After".into(), "5".into())]
            }
            ApiError::StateUnavailable => vec![(
                "Retry-After".into(),
                crate::state::pg::RETRY_AFTER_SECS.to_string(),
            )],
            _ => Vec::new(),
        }
    }
}

impl ApiError {
    /// The answer to a use of the database that failed: 503
    /// `state_unavailable` when it may pass, else `internal_error` (logged).
    pub fn db(err: &crate::state::pg::DbError) -> ApiError {
        use crate::state::pg::DbError;
        match err {
            DbError::Unavailable(_) | DbError::Schema(_) => {
                log::warn!("state: {err}");
                ApiError::StateUnavailable
            }
            DbError::Query(_) => {
                log::error!("state: {err}");
                ApiError::Internal
            }
            // Answered as a repeat by `runs::replay` before this is seen.
            DbError::Claimed(_) => ApiError::StateUnavailable,
        }
    }

    /// The answer to a run that could not be recorded: `disk_full` when
    /// the state dir's disk (or quota) is full, `state_unavailable` when
    /// the database failed, else `storage_unavailable`.
    pub fn storage(err: &std::io::Error) -> ApiError {
        if let Some(db) = err
            .get_ref()
            .and_then(|e| e.downcast_ref::<crate::state::pg::DbError>())
        {
            return ApiError::db(db);
        }
        log::error!("cannot record a run, so it is refused: {err}");
        match err.raw_os_error() {
            Some(libc::ENOSPC | libc::EDQUOT) => ApiError::DiskFull,
            _ => ApiError::StorageUnavailable,
        }
    }
}

impl Response {
    /// The whole response as raw HTTP/1.1 bytes (status line, headers with
    /// `Content-Length` and `Connection: close`, body), for the HTTP server
    /// to send by itself.
    pub fn to_raw(&self) -> Vec<u8> {
        use std::fmt::Write as _;
        let mut head = format!("HTTP/1.1 {} {}\r\n", self.status, reason(self.status));
        for (k, v) in &self.headers {
            let _ = write!(head, "{k}: {v}\r\n");
        }
        let _ = write!(
            head,
            "Connection: close\r\nContent-Length: {}\r\n\r\n",
            self.body.len()
        );
        let mut raw = head.into_bytes();
        raw.extend_from_slice(&self.body);
        raw
    }

    /// The `Content-Type` header, if set.
    pub fn content_type(&self) -> &str {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            .map_or("", |(_, v)| v.as_str())
    }
}

/// The reason phrase of the statuses [`Response::to_raw`] is used with.
fn reason(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        408 => "Request Timeout",
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

impl From<ApiError> for Response {
    fn from(e: ApiError) -> Response {
        if let ApiError::Ignored { status, reason } = &e {
            // Not an error: no `Error` key, so clients that treat one as a
            // failure do not.
            let body = json!({"Ignored": e.message(), "Code": e.code(), "Reason": reason});
            return Response::json(*status, &body);
        }
        let mut body = Map::new();
        e.extra(&mut body);
        let mut r = if body.is_empty() {
            plain_error(e.status(), e.code(), &e.message())
        } else {
            body.insert("Error".into(), json!(e.message()));
            body.insert("Code".into(), json!(e.code()));
            Response::json(e.status(), &Value::Object(body))
        };
        r.headers.extend(e.headers());
        if let ApiError::RunFailed { run, .. }
        | ApiError::RunTimeout { run }
        | ApiError::RunInterrupted { run }
        | ApiError::RunCancelled { run }
        | ApiError::RunSuperseded { run, .. }
        | ApiError::RunSkipped { run, .. } = e.unmarked()
        {
            r.run = Some(run.clone());
        }
        r
    }
}

/// The JSON answer of an error with no fields besides `Code` and `Error`,
/// written directly: the same bytes as [`Response::json`] of that object
/// (keys in order, strings escaped by serde_json), without building it.
fn plain_error(status: u16, code: &str, message: &str) -> Response {
    let mut body = Vec::with_capacity(code.len() + message.len() + 24);
    body.extend_from_slice(b"{\"Code\":");
    let _ = serde_json::to_writer(&mut body, code);
    body.extend_from_slice(b",\"Error\":");
    let _ = serde_json::to_writer(&mut body, message);
    body.extend_from_slice(b"}\n");
    Response::json_bytes(status, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_errors_are_the_bytes_of_their_json_object() {
        let errors = [
            ApiError::InvalidApiKey,
            ApiError::MissingApiKey,
            ApiError::NotFound,
            ApiError::InvalidPayload {
                msg: "a \"quoted\" \\ line\nand\u{1} more, ü".into(),
            },
        ];
        for e in errors {
            let r = Response::from(e.clone());
            let object = json!({"Error": e.message(), "Code": e.code()});
            let mut expected = serde_json::to_vec(&object).unwrap();
            expected.push(b'\n');
            assert_eq!(
                String::from_utf8_lossy(&r.body),
                String::from_utf8_lossy(&expected)
            );
            assert_eq!(r.status, e.status());
            assert_eq!(r.content_type(), "application/json");
        }
    }

    #[test]
    fn query_keeps_order_and_repeats() {
        let r = Request::new("POST", "/api?variables=a&x=1&variables=b%20c&variables=d+e").unwrap();
        assert_eq!(r.method, Method::Post);
        assert_eq!(r.segments, ["api"]);
        let vars: Vec<_> = r.query_all("variables").collect();
        assert_eq!(vars, ["a", "b c", "d e"]);
    }

    #[test]
    fn methods_parse_in_any_case() {
        assert_eq!(Method::parse("patch"), Method::Patch);
        assert_eq!(Method::parse("BREW"), Method::Other);
        assert_eq!(Method::of_request("POST"), Method::Post);
        assert_eq!(Method::of_request("post"), Method::Other);
        assert_eq!(Method::of_request("pOST"), Method::Other);
        assert_eq!(Method::Delete.to_string(), "DELETE");
    }

    #[test]
    fn percent_coding_round_trips() {
        assert_eq!(percent_encode("a b/ü~"), "a%20b%2F%C3%BC~");
        assert_eq!(percent_decode("a%20b%2F%C3%BC~", false).unwrap(), "a b/ü~");
        assert_eq!(percent_decode("a+b", true).unwrap(), "a b");
        assert_eq!(percent_decode("a+b", false).unwrap(), "a+b");
        assert_eq!(percent_decode("%2", false), None);
        assert_eq!(percent_decode("100%", false), None);
    }

    #[test]
    fn bad_escapes_are_invalid_parameter() {
        let e = Request::new("POST", "/api?variables=%zz").unwrap_err();
        assert_eq!(e.code(), "invalid_parameter");
        let e = Request::new("POST", "/api?v=%ff").unwrap_err();
        assert_eq!(e.code(), "invalid_parameter");
    }

    #[test]
    fn traversal_segments_are_not_found() {
        assert_eq!(
            Request::new("GET", "/tools/a/%2e%2e/x").unwrap_err(),
            ApiError::NotFound
        );
        assert_eq!(
            Request::new("GET", "/tools/a%2Fb/x").unwrap_err(),
            ApiError::NotFound
        );
    }

    #[test]
    fn log_target_redacts_api_key() {
        let r = Request::new("POST", "/api?api_key=s3cret&program_id=1").unwrap();
        let t = r.log_target().to_string();
        assert!(!t.contains("s3cret"), "{t}");
        assert!(t.contains("program_id=1"));
        // Every api_key (repeated, its name escaped), the rest encoded again.
        let r = Request::new(
            "POST",
            "/api?api_key=s3cret&program_id=1&api%5Fkey=s%33cret&v=a%20b+c%2F%C3%BC&api_key",
        )
        .unwrap();
        assert_eq!(
            r.log_target().to_string(),
            "/api?api_key=[redacted]&program_id=1&api_key=[redacted]&v=a%20b%20c%2F%C3%BC&api_key=[redacted]"
        );
    }

    #[test]
    fn raw_response_is_complete_http() {
        let r: Response = ApiError::UriTooLong.into();
        let raw = String::from_utf8(r.to_raw()).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{head}");
        assert!(head.contains("Content-Type: application/json"), "{head}");
        assert!(
            head.contains(&format!("Content-Length: {}", body.len())),
            "{head}"
        );
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["Code"], "uri_too_long");
        assert_eq!(r.content_type(), "application/json");
    }

    #[test]
    fn error_body_has_code_and_headers() {
        let r: Response = ApiError::Busy {
            retry_after: 2,
            msg: "x".into(),
        }
        .into();
        assert_eq!(r.status, 503);
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["Code"], "busy");
        assert!(r
            .headers
            .iter()
            .any(|(k, v)| k == "Retry-After" && v == "2"));
    }
}
