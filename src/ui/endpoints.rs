//! The endpoint view for browsers, `GET /tools/<tool>/endpoints` with
//! `Accept: text/html`: the [`ToolView`] (the same value the JSON answer
//! serialises) as a page, with a curl command and a copy button per
//! endpoint, and each environment's public switch with its control
//! (`switch`). A browser signs in with its session; a client sending a
//! bearer application key gets the same page, without forms.

use maud::{html, Markup};
use serde_json::{Map, Value};

use super::switch::{self, Controls, Viewer};
use super::{finish, html_response, login_required, page, top_bar};
use crate::config::Config;
use crate::http::app::App;
use crate::http::{percent_encode, ApiError, Method, Request, Response};
use crate::ui::view::{Access, EndpointView, EnvironmentView, ToolView};

/// `GET /tools/<tool>/endpoints` for browsers: environments with their
/// public switch, endpoints with method, URL, access and a curl command.
///
/// # Errors
/// 404 for an unknown tool; 401/403 for a caller who is not a member.
pub fn endpoints(app: &App, cfg: &Config, req: &Request, tool: &str) -> Result<Response, ApiError> {
    finish(req, endpoints_inner(app, cfg, req, tool))
}

fn endpoints_inner(
    app: &App,
    cfg: &Config,
    req: &Request,
    name: &str,
) -> Result<Response, ApiError> {
    let session = if req.bearer().is_some() {
        None
    } else {
        match app.access.session(cfg, req)? {
            Some(s) => Some(s.session),
            None => {
                return login_required(req, &format!("/tools/{}/endpoints", percent_encode(name)))
            }
        }
    };
    let tool = cfg.tools.get(name).ok_or(ApiError::NotFound)?;
    let member = app.access.member(cfg, req, &tool.workspace)?;
    let viewer = match &session {
        Some(s) => Viewer::Session(s),
        None => Viewer::Bearer,
    };
    let controls = Controls::of(cfg, tool, &member.user);
    let view = ToolView::of(cfg, req, tool);
    let body = html! {
        @match &session {
            Some(s) => (top_bar(s)),
            None => (switch::bearer_bar(&member.user)),
        }
        main {
            h1 { "Tool " (view.tool) " " span class="muted" { "workspace " (view.workspace) } }
            p {
                "Protected endpoints take a member's application key ("
                a href={ "/workspaces/" (percent_encode(&view.workspace)) "/settings" } { "workspace settings" }
                "): the curl commands read it from " code { "$TRIGD_APP_KEY" } ". The public switch of an \
                 environment is kept in " code { "config.toml" } ": changing it here writes the file."
            }
            @for (i, env) in view.environments.iter().enumerate() {
                (env_section(i, env, switch::control(&controls, &viewer, &tool.name, &env.name, env.public)))
            }
            @if view.environments.is_empty() {
                p { "This tool has no environments, so no endpoints." }
            }
        }
    };
    Ok(html_response(
        200,
        page(&format!("{} endpoints", tool.name), body),
    ))
}

fn env_section(i: usize, env: &EnvironmentView, control: Markup) -> Markup {
    let (switch, note) = if env.public {
        ("on", "anyone can call these endpoints, without credentials")
    } else {
        (
            "off",
            "calls need a member's application key or login session",
        )
    };
    html! {
        section class="card" aria-labelledby={ "env-" (i) } {
            h2 id={ "env-" (i) } { "Environment " (env.name) }
            p {
                "Public switch: "
                strong class={ "switch " (switch) } id={ "switch-state-" (env.name) } { (switch) }
                " — " (note) "."
            }
            (control)
            table {
                thead { tr {
                    th scope="col" { "Method" }
                    th scope="col" { "URL and curl command" }
                    th scope="col" { "Access" }
                } }
                tbody {
                    @for (j, ep) in env.endpoints.iter().enumerate() {
                        (endpoint_row(&format!("curl-{i}-{j}"), ep))
                    }
                    @if env.endpoints.is_empty() {
                        tr { td colspan="3" { "No endpoint triggers." } }
                    }
                }
            }
        }
    }
}

fn endpoint_row(id: &str, ep: &EndpointView) -> Markup {
    let access = ep.access.as_str();
    html! {
        tr {
            td { span class="method" { (ep.method) } }
            td {
                code class="url" { (ep.url) }
                code id=(id) class="curl" { (curl_command(ep)) }
                button type="button" class="copy" data-copy=(id) hidden { "Copy curl command" }
                span id={ (id) "-status" } class="copy-status" aria-live="polite" {}
            }
            td { span class={ "access " (access) } { (access) } }
        }
    }
}

/// Quote `s` for a POSIX shell.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A curl command line for one endpoint of the view.
fn curl_command(ep: &EndpointView) -> String {
    let mut url = ep.url.clone();
    let mut cmd = String::from("curl");
    if ep.method != Method::Get {
        cmd.push_str(&format!(" -X {}", ep.method));
    }
    if ep.access == Access::Protected {
        cmd.push_str(" -A 'my-script/1.0' -H \"Authorization: Bearer $TRIGD_APP_KEY\"");
    }
    if !ep.inputs.is_empty() && ep.method == Method::Get {
        let q: Vec<String> = ep.inputs.iter().map(|o| format!("{o}=VALUE")).collect();
        url = format!("{url}?{}", q.join("&"));
    } else if !ep.inputs.is_empty() {
        let obj: Map<String, Value> = ep
            .inputs
            .iter()
            .map(|o| (o.clone(), Value::String("VALUE".into())))
            .collect();
        cmd.push_str(" -H 'Content-Type: application/json' -d ");
        cmd.push_str(&sh_quote(&Value::Object(obj).to_string()));
    }
    cmd.push(' ');
    cmd.push_str(&sh_quote(&url));
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting() {
        assert_eq!(sh_quote("it's"), "'it'\\''s'");
    }
}
