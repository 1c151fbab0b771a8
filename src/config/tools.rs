//! `[[tools]]` → [`Tool`]s: environments, triggers, and the endpoint that
//! each trigger generates in each environment.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use super::callbacks::{self, Callbacks};
use super::raw::{self, RawConfig};
use super::types::{self, env_vars, workspace_ref, Errors, Known, Src};
use super::{
    Credentials, Dialect, Endpoint, Entry, Environment, Methods, Target, Tool, Trigger,
    TriggerKind, TriggerName, Values, Workspace,
};
use crate::http::Method;
use crate::receive::{Answer, Receive};

/// `[[tools]]` by name.
pub fn tools(
    src: &Src,
    raw: &RawConfig,
    wss: &BTreeMap<String, Workspace>,
    known: &Known,
    cb: &Callbacks,
    dir: &Path,
    errs: &mut Errors,
) -> BTreeMap<String, Tool> {
    let mut seen = HashMap::new();
    let mut out = BTreeMap::new();
    for (i, t) in raw.tools.iter().enumerate() {
        let key = format!("tools[{i}]");
        errs.name(src, &t.name, &format!("{key}.name"), "tool");
        errs.unique(src, &mut seen, &t.name, &format!("{key}.name"), "tool");
        workspace_ref(src, &t.workspace, wss, format!("{key}.workspace"), errs);
        let triggers = triggers(src, t, &key, known, cb, dir, errs);
        let mut environments = Vec::with_capacity(t.environments.len());
        for (name, env) in &t.environments {
            let key = format!("{key}.environments.{}", name.get_ref());
            errs.name(src, name, &key, "environment");
            let vars = env_vars(src, &env.vars, &format!("{key}.vars"), errs);
            let name = name.get_ref().clone();
            let env = environment(
                t.name.get_ref(),
                name.clone(),
                env.public,
                vars,
                t.workspace.get_ref(),
                &triggers,
            );
            environments.push((name, env));
        }
        let (name, workspace) = (t.name.get_ref().clone(), t.workspace.get_ref().clone());
        out.insert(
            name.clone(),
            Tool {
                name,
                workspace,
                environments: environments.into_iter().collect(),
                triggers,
            },
        );
    }
    out
}

/// The triggers of one tool.
fn triggers(
    src: &Src,
    t: &raw::RawTool,
    key: &str,
    known: &Known,
    cb: &Callbacks,
    dir: &Path,
    errs: &mut Errors,
) -> Vec<Trigger> {
    let mut seen = HashMap::new();
    let mut out = Vec::with_capacity(t.triggers.len());
    for (j, tr) in t.triggers.iter().enumerate() {
        let key = format!("{key}.triggers[{j}]");
        let kind = types::parse_trigger_kind(tr.kind.get_ref())
            .map_err(|msg| errs.at(src, tr.kind.span(), format!("{key}.kind"), msg));
        errs.name(src, &tr.name, &format!("{key}.name"), "trigger");
        errs.unique(
            src,
            &mut seen,
            &tr.name,
            &format!("{key}.name"),
            "trigger name",
        );
        let method = tr.method.as_ref().map_or(Ok(Method::Post), |m| {
            types::parse_method(m.get_ref())
                .map_err(|msg| errs.at(src, m.span(), format!("{key}.method"), msg))
        });
        let id = *tr.program.get_ref();
        let program = u64::try_from(id)
            .ok()
            .and_then(|id| known.programs.get(&id));
        if known.missing(id) {
            errs.at(
                src,
                tr.program.span(),
                format!("{key}.program"),
                format!("program {id} does not exist"),
            );
        } else if let Some(p) = program.filter(|p| p.function(tr.function.get_ref()).is_none()) {
            let msg = format!(
                "program {id} ({}) has no function \"{}\"",
                p.name,
                tr.function.get_ref()
            );
            errs.at(src, tr.function.span(), format!("{key}.function"), msg);
        }
        let callback = callbacks::fixed(
            src,
            cb,
            tr.callback.as_ref(),
            &format!("{key}.callback"),
            callbacks::Place::Trigger,
            errs,
        );
        let request_callbacks = callbacks::permit(
            src,
            cb,
            tr.request_callbacks.as_ref(),
            &format!("{key}.request_callbacks"),
            errs,
        );
        let outputs = program
            .and_then(|p| p.function(tr.function.get_ref()))
            .map(|f| f.inputs());
        let receive = shared(super::receive::receive(src, tr, &key, outputs, dir, errs));
        // Without the function's outputs (its program is broken, reported
        // there) the key cannot be checked.
        let group = tr
            .concurrency_group
            .as_ref()
            .zip(outputs)
            .and_then(|(g, o)| {
                let key = format!("{key}.concurrency_group");
                super::group::compile(src, g, &key, o, errs)
            });
        let (Ok(kind), Ok(method), Ok(program)) = (kind, method, u64::try_from(id)) else {
            continue;
        };
        out.push(Trigger {
            kind,
            name: tr.name.get_ref().clone(),
            method,
            program,
            function: tr.function.get_ref().clone(),
            callback,
            request_callbacks,
            receive,
            group,
        });
    }
    out
}

/// `receive` in an `Arc`; the plain one (no receive settings, the default
/// answer), which most triggers have, is one `Arc` for all of them.
fn shared(receive: Receive) -> Arc<Receive> {
    static PLAIN: OnceLock<Arc<Receive>> = OnceLock::new();
    if receive.is_configured() || receive.answer != Answer::default() {
        return Arc::new(receive);
    }
    Arc::clone(PLAIN.get_or_init(|| Arc::new(receive)))
}

/// An environment with its endpoints, one per trigger.
fn environment(
    tool: &str,
    name: String,
    public: bool,
    vars: BTreeMap<String, String>,
    workspace: &str,
    triggers: &[Trigger],
) -> Environment {
    let credentials = if public {
        Credentials::Public
    } else {
        Credentials::Member {
            workspace: workspace.to_string(),
        }
    };
    let endpoints = triggers
        .iter()
        .map(|t| {
            // The kind decides how the endpoint reads its values.
            let values = match t.kind {
                TriggerKind::Endpoint => Values::ByName,
            };
            let endpoint = Endpoint {
                methods: Methods::One(t.method),
                credentials: credentials.clone(),
                dialect: Dialect::Native,
                values,
                target: Target::Fixed {
                    program: t.program,
                    function: t.function.clone(),
                },
                vars: vars.clone(),
                callback: t.callback.clone(),
                request_callbacks: t.request_callbacks,
                receive: Arc::clone(&t.receive),
                group: t.group.clone(),
                entry: Entry::Tool(TriggerName {
                    tool: tool.to_string(),
                    environment: name.clone(),
                    trigger: t.name.clone(),
                }),
            };
            (t.name.clone(), endpoint)
        })
        .collect();
    Environment {
        name,
        public,
        credentials,
        endpoints,
    }
}
