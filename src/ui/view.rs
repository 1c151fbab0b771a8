//! The endpoint view of a tool, one typed value that both the JSON answer
//! (`tools::view`) and the HTML page (`ui::endpoints`) render.

use serde::Serialize;

use crate::config::{Config, Tool};
use crate::http::{Method, Request};

/// A tool with its environments and their endpoints.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ToolView {
    /// Tool name.
    pub tool: String,
    /// Owning workspace.
    pub workspace: String,
    /// Environments by name.
    pub environments: Vec<EnvironmentView>,
}

/// One environment of the view.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct EnvironmentView {
    /// Environment name.
    pub name: String,
    /// The public switch.
    pub public: bool,
    /// One per trigger of the tool.
    pub endpoints: Vec<EndpointView>,
}

/// One generated endpoint.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct EndpointView {
    /// Trigger name.
    pub name: String,
    /// The method it serves.
    pub method: Method,
    /// Full URL.
    pub url: String,
    /// Whether it takes credentials.
    pub access: Access,
    /// Program id.
    pub program: u64,
    /// Function name.
    pub function: String,
    /// The names its values go by (for a sample call).
    #[serde(skip)]
    pub inputs: Vec<String>,
}

/// Who may call an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Anyone.
    Public,
    /// Members of the workspace.
    Protected,
}

impl Access {
    /// The lower-case name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Public => "public",
            Access::Protected => "protected",
        }
    }
}

impl ToolView {
    /// The view of `tool`, with URLs under [`base_url`].
    pub fn of(cfg: &Config, req: &Request, tool: &Tool) -> ToolView {
        let base = base_url(cfg, req);
        let environments = tool
            .environments
            .values()
            .map(|env| {
                let access = if env.public {
                    Access::Public
                } else {
                    Access::Protected
                };
                let endpoints = tool
                    .triggers
                    .iter()
                    .map(|t| EndpointView {
                        name: t.name.clone(),
                        method: t.method,
                        url: format!("{base}/tools/{}/{}/{}", tool.name, env.name, t.name),
                        access,
                        program: t.program,
                        function: t.function.clone(),
                        inputs: cfg
                            .program(t.program)
                            .and_then(|p| p.function(&t.function))
                            .map(|f| f.inputs().to_vec())
                            .unwrap_or_default(),
                    })
                    .collect();
                EnvironmentView {
                    name: env.name.clone(),
                    public: env.public,
                    endpoints,
                }
            })
            .collect();
        ToolView {
            tool: tool.name.clone(),
            workspace: tool.workspace.clone(),
            environments,
        }
    }
}

/// `public_url` when configured, else `http://<Host header>`, else
/// `http://<listen>`; never with a trailing slash.
pub fn base_url(cfg: &Config, req: &Request) -> String {
    let url = match (&cfg.server.public_url, req.header("host")) {
        (Some(u), _) => u.clone(),
        (None, Some(h)) if h.bytes().all(|b| b.is_ascii_graphic()) => format!("http://{h}"),
        _ => format!("http://{}", cfg.server.listen),
    };
    url.trim_end_matches('/').to_string()
}
