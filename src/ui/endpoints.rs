//! The endpoint view for browsers, `GET /tools/<tool>/endpoints` with
//! `Accept: text/html`: the data of `tools::describe` as a page, with a curl
//! command and a copy button per endpoint, and each environment's public
//! switch with its control (`switch`). A browser signs in with its session;
//! a client sending a bearer application key gets the same page, without
//! forms.

use serde_json::Value;

use super::switch::{self, Controls, Viewer};
use super::{escape, finish, html, login_required, page, top_bar};
use crate::app::App;
use crate::auth;
use crate::config::Config;
use crate::http::{percent_encode, ApiError, Request, Response};
use crate::tools;

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
    let session = match app.sessions.of_request(cfg, req) {
        _ if req.bearer().is_some() => None,
        Some((_, s)) => Some(s),
        None => return login_required(req, &format!("/tools/{}/endpoints", percent_encode(name))),
    };
    let tool = cfg.tools.get(name).ok_or(ApiError::NotFound)?;
    let member = auth::authenticate(app, cfg, req, &tool.workspace)?;
    let viewer = match &session {
        Some(s) => Viewer::Session(s),
        None => Viewer::Bearer,
    };
    let controls = Controls::of(cfg, tool, &member.user);
    let view = tools::describe(cfg, req, tool);
    let mut sections = String::new();
    for (i, env) in view["Environments"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let public = env["Public"].as_bool().unwrap_or(false);
        let name = env["Name"].as_str().unwrap_or("");
        let control = switch::control(&controls, &viewer, &tool.name, name, public);
        sections.push_str(&env_section(cfg, i, env, &control));
    }
    if tool.environments.is_empty() {
        sections = "<p>This tool has no environments, so no endpoints.</p>".into();
    }
    let body = format!(
        "{bar}\n<main>\n<h1>Tool {tool} <span class=\"muted\">workspace {ws}</span></h1>\n\
         <p>Protected endpoints take a member's application key \
         (<a href=\"/workspaces/{wsurl}/settings\">workspace settings</a>): the curl commands \
         read it from <code>$TRIGD_APP_KEY</code>. The public switch of an environment is kept \
         in <code>config.toml</code>: changing it here writes the file.</p>\n{sections}</main>",
        bar = session
            .as_ref()
            .map_or_else(|| switch::bearer_bar(&member.user), top_bar),
        tool = escape(&tool.name),
        ws = escape(&tool.workspace),
        wsurl = percent_encode(&tool.workspace),
    );
    Ok(html(200, page(&format!("{} endpoints", tool.name), &body)))
}

fn text(v: &Value) -> String {
    escape(v.as_str().unwrap_or(""))
}

fn env_section(cfg: &Config, i: usize, env: &Value, control: &str) -> String {
    let public = env["Public"].as_bool().unwrap_or(false);
    let (switch, note) = if public {
        ("on", "anyone can call these endpoints, without credentials")
    } else {
        (
            "off",
            "calls need a member's application key or login session",
        )
    };
    let mut rows = String::new();
    for (j, ep) in env["Endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let id = format!("curl-{i}-{j}");
        rows.push_str(&format!(
            "<tr>\n<td><span class=\"method\">{m}</span></td>\n\
             <td><code class=\"url\">{url}</code>\n<code id=\"{id}\" class=\"curl\">{curl}</code>\n\
             <button type=\"button\" class=\"copy\" data-copy=\"{id}\" hidden>Copy curl command</button>\n\
             <span id=\"{id}-status\" class=\"copy-status\" aria-live=\"polite\"></span></td>\n\
             <td><span class=\"access {access}\">{access}</span></td>\n</tr>\n",
            m = text(&ep["Method"]),
            url = text(&ep["Url"]),
            access = text(&ep["Access"]),
            curl = escape(&curl_command(cfg, ep, public)),
        ));
    }
    if rows.is_empty() {
        rows = "<tr><td colspan=\"3\">No endpoint triggers.</td></tr>\n".into();
    }
    format!(
        "<section class=\"card\" aria-labelledby=\"env-{i}\">\n<h2 id=\"env-{i}\">Environment {name}</h2>\n\
         <p>Public switch: <strong class=\"switch {switch}\" id=\"switch-state-{name}\">{switch}</strong> — {note}.</p>\n{control}\n\
         <table>\n<thead><tr><th scope=\"col\">Method</th>\
         <th scope=\"col\">URL and curl command</th><th scope=\"col\">Access</th></tr></thead>\n<tbody>\n{rows}</tbody>\n</table>\n</section>\n",
        name = text(&env["Name"]),
    )
}

/// Quote `s` for a POSIX shell.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A curl command line for one endpoint of the view.
fn curl_command(cfg: &Config, ep: &Value, public: bool) -> String {
    let method = ep["Method"].as_str().unwrap_or("POST");
    let mut url = ep["Url"].as_str().unwrap_or("").to_string();
    let inputs: Vec<String> = ep["Program"]
        .as_u64()
        .and_then(|p| cfg.program(p))
        .and_then(|p| p.function(ep["Function"].as_str().unwrap_or("")))
        .map(|f| f.inputs().to_vec())
        .unwrap_or_default();
    let mut cmd = String::from("curl");
    if method != "GET" {
        cmd.push_str(&format!(" -X {method}"));
    }
    if !public {
        cmd.push_str(" -A 'my-script/1.0' -H \"Authorization: Bearer $TRIGD_APP_KEY\"");
    }
    if !inputs.is_empty() && method == "GET" {
        let q: Vec<String> = inputs.iter().map(|o| format!("{o}=VALUE")).collect();
        url = format!("{url}?{}", q.join("&"));
    } else if !inputs.is_empty() {
        let obj: serde_json::Map<String, Value> = inputs
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
