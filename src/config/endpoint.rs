//! Entry points as compiled at load: an [`Endpoint`] says which methods and
//! credentials a request must carry, how the request is read, how the
//! run's values are made, which function it runs and how it answers.
//! `invoke` takes a request through one, whatever its kind: `POST /api`,
//! a generated tool endpoint (with or without signed-endpoint settings) or
//! a hook of a hooks file. What differs between kinds is data here, each
//! difference an enum that one step of `invoke` matches on:
//!
//! | step | enum | kinds |
//! |---|---|---|
//! | method | [`Methods`] | one, a set (`http-methods`), any |
//! | reading, values, answer | [`Dialect`] | trigd's own, a hooks file's (`compat::webhook::Hook`) |
//! | values, natively | [`Values`] | positional, by name (or from `receive` sources) |
//! | function | [`Target`] | chosen by the request, fixed, the endpoint's own program |
//! | logs and metrics | [`Entry`] | `/api`, a tool trigger, a hook |
//!
//! A hooks-file hook differs in one place: its [`Dialect::HooksFile`]
//! carries everything adnanh/webhook-specific, and each step that reads
//! it has one match arm that calls into `compat/webhook/`.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Program;
use crate::http::Method;
use crate::receive::Receive;

/// One entry point.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The methods it serves.
    pub methods: Methods,
    /// Which credentials it takes.
    pub credentials: Credentials,
    /// How the request is read for rules and values, the values made and
    /// the answer said: natively, or a hooks file's way.
    pub dialect: Dialect,
    /// How the values are made, natively (a hooks-file hook's are its
    /// dialect's).
    pub values: Values,
    /// Which function it runs.
    pub target: Target,
    /// Variables given to the run (a tool environment's `vars`).
    pub vars: BTreeMap<String, String>,
    /// The completion callback of every run through it (a trigger's
    /// `callback`), besides the function's own.
    pub callback: Option<super::callbacks::Fixed>,
    /// Whether a caller may name a callback URL (a trigger's
    /// `request_callbacks`; on `POST /api` the API key decides).
    pub request_callbacks: bool,
    /// Signature, rule, value sources and the native answer's shape of a
    /// signed endpoint (a tool trigger with those settings; the default:
    /// none of them); a hook's rule and mismatch status.
    pub receive: Arc<Receive>,
    /// What it is, as logs, metrics and run records name it.
    pub entry: Entry,
    /// The concurrency group of runs through it, in place of the
    /// function's (a tool trigger's `concurrency_group`).
    pub group: Option<super::group::Group>,
}

/// The methods an endpoint serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Methods {
    /// One (an endpoint trigger's `method`, `POST /api`).
    One(Method),
    /// Several (a hook's `http-methods`).
    Set(Vec<Method>),
    /// Any (a hook without `http-methods`).
    Any,
}

impl Methods {
    /// Whether `m` is served.
    pub fn allows(&self, m: Method) -> bool {
        match self {
            Methods::One(one) => *one == m,
            Methods::Set(set) => set.contains(&m),
            Methods::Any => true,
        }
    }

    /// The methods served, for an `Allow` header.
    pub fn allow(&self) -> Vec<&'static str> {
        match self {
            Methods::One(one) => vec![one.as_str()],
            Methods::Set(set) => set.iter().map(|m| m.as_str()).collect(),
            Methods::Any => Vec::new(),
        }
    }
}

/// How a request is read for rules and values, its values made and its
/// answer said.
#[derive(Debug, Clone)]
pub enum Dialect {
    /// trigd's own (`receive::values::Incoming`): the body parsed by its
    /// `Content-Type`, a body that does not parse an error, the client
    /// address behind trusted proxies; values as `Values` says; the run
    /// endpoint's JSON answer, shaped by `receive.answer`.
    Native,
    /// A hook of an adnanh/webhook hooks file: read, valued and answered
    /// as webhook does (`compat/webhook/`). The only variant outside
    /// `compat/` that carries a compat value.
    HooksFile(Arc<crate::compat::webhook::Hook>),
}

/// The names of the tool trigger an endpoint serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerName {
    /// The tool.
    pub tool: String,
    /// The environment.
    pub environment: String,
    /// The trigger.
    pub trigger: String,
}

/// What an endpoint is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// `POST /api`.
    Api,
    /// A tool trigger in one environment.
    Tool(TriggerName),
    /// A hook of a hooks file, by id.
    Hook(String),
}

/// The credentials an endpoint takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    /// An `[[api_keys]]` key (`api_key` or a bearer token), rate limited.
    ApiKey,
    /// A member of the workspace: bearer application key or session cookie.
    Member {
        /// The workspace.
        workspace: String,
    },
    /// None: anyone may call.
    Public,
}

/// How the values of a run are made.
#[derive(Debug, Clone)]
pub enum Values {
    /// Repeated `variables` query parameters, by position.
    Positional,
    /// One value per input, by name, from the query and/or a JSON object
    /// body — or from the trigger's `receive` sources when it has any.
    /// (A hooks-file hook's endpoint says `ByName`: it takes no
    /// positional `variables`; its dialect makes its values.)
    ByName,
}

/// The function an endpoint runs.
#[derive(Debug, Clone)]
pub enum Target {
    /// Chosen by the request (`program_id` and `function`), within the API
    /// key's scope, among functions with an active Webhook Trigger.
    Chosen,
    /// Always this one.
    Fixed {
        /// Program id.
        program: u64,
        /// Function name.
        function: String,
    },
    /// The first function of a program compiled with the endpoint (a
    /// hook's one-function program, which no program file holds).
    Own(Arc<Program>),
}

impl Endpoint {
    /// `POST /api`.
    pub fn run_endpoint() -> Endpoint {
        Endpoint {
            methods: Methods::One(Method::Post),
            credentials: Credentials::ApiKey,
            dialect: Dialect::Native,
            values: Values::Positional,
            target: Target::Chosen,
            vars: BTreeMap::new(),
            callback: None,
            request_callbacks: false,
            receive: Arc::default(),
            entry: Entry::Api,
            group: None,
        }
    }
}

/// The hooks of every `hooks_files` entry, served under one URL prefix
/// (compiled by `compat::webhook::compile`; kept here, beside
/// [`Endpoint`], so that the config holds them without depending on
/// `compat`'s code).
#[derive(Debug, Default)]
pub struct Hooks {
    /// Path segments before the hook id (`hooks_url_prefix`, split at `/`).
    pub prefix: Vec<String>,
    /// Hooks by id, each compiled into the endpoint it is.
    pub by_id: BTreeMap<String, Endpoint>,
}

impl Hooks {
    /// The one-function program of hook `id`.
    pub fn program(&self, id: &str) -> Option<&Arc<Program>> {
        match &self.by_id.get(id)?.target {
            Target::Own(program) => Some(program),
            _ => None,
        }
    }
}
