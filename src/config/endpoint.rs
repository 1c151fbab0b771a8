//! Entry points as compiled at load: an [`Endpoint`] says which credentials
//! a request must carry, how its values are read, and which function it
//! runs with which variables. `invoke` takes a request through one.
//!
//! Every endpoint answers in the run endpoint's JSON; an endpoint trigger
//! with receive settings ([`Receive`]: signature, rule, value sources,
//! answer shape) changes what its steps check and how its answer looks.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::http::Method;
use crate::receive::Receive;

/// One entry point.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The method it serves.
    pub method: Method,
    /// Which credentials it takes.
    pub credentials: Credentials,
    /// How the values are read.
    pub values: Values,
    /// Which function it runs.
    pub target: Target,
    /// Variables given to the run (a tool environment's `vars`).
    pub vars: BTreeMap<String, String>,
    /// Signature, rule, value sources and answer shape of a tool trigger
    /// (the default: none of them).
    pub receive: Arc<Receive>,
    /// The tool trigger it serves (`None` for `POST /api`), as logs and
    /// metrics name it.
    pub trigger: Option<TriggerName>,
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

/// Where the values of a run come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Values {
    /// Repeated `variables` query parameters, by position.
    Positional,
    /// One value per input, by name, from the query and/or a JSON object
    /// body.
    ByName,
}

/// The function an endpoint runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Chosen by the request (`program_id` and `function`), within the API
    /// key's scope, among functions with an active API trigger.
    Chosen,
    /// Always this one.
    Fixed {
        /// Program id.
        program: u64,
        /// Function name.
        function: String,
    },
}

impl Endpoint {
    /// `POST /api`.
    pub fn run_endpoint() -> Endpoint {
        Endpoint {
            method: Method::Post,
            credentials: Credentials::ApiKey,
            values: Values::Positional,
            target: Target::Chosen,
            vars: BTreeMap::new(),
            receive: Arc::default(),
            trigger: None,
        }
    }
}
