//! Program files → [`Program`]s: identity (id, name, workspace), functions,
//! Webhook Triggers (`[functions.webhook]`), outputs, steps with their `{name}` templates, and `call`
//! references (missing functions, argument counts, cycles). Called by
//! `validate` for every file; errors are collected, never fatal.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use toml::Spanned;

use super::raw::{self, RawFunction, RawProgram, RawStep};
use super::stamp::{Checked, Pos, Source};
use super::types::{
    config_dir, count, duration, env_vars, error, is_ident, line_col, par_map, parse, templates,
    workspace_ref, Errors, Known, Src,
};
use super::{resolve, Function, Program, Server, Step, WebhookTrigger, Workspace};
use crate::state::delivery::Outcome;

/// Every program file, checked, by id. Files that are TOML but not valid
/// programs add their id to `known.broken`; unparsable ones clear
/// `known.complete`. Programs reused from the current snapshot are not
/// checked again, only against the others (ids and names are unique).
pub(super) fn load_programs(
    files: &[&(PathBuf, Source)],
    server: &Server,
    wss: &BTreeMap<String, Workspace>,
    known: &mut Known,
    errs: &mut Errors,
) -> BTreeMap<u64, Arc<Program>> {
    let mut names: HashMap<&str, &Path> = HashMap::with_capacity(files.len());
    // By id, the first program with it (whose `file` a duplicate names).
    let mut out: BTreeMap<u64, Arc<Program>> = BTreeMap::new();
    // Parsing dominates the load of thousands of files: do it on every core.
    let wss_known = known.workspaces_known.then_some(wss);
    let unchecked = files.iter().any(|(_, s)| matches!(s, Source::Text { .. }));
    let found: Vec<_> = match unchecked {
        true => par_map(files, |(file, source)| {
            found(file, source, server, wss_known)
        }),
        // Checked by the threads that read them: nothing left to spread.
        false => files
            .iter()
            .map(|(file, source)| found(file, source, server, wss_known))
            .collect(),
    };
    for ((file, _), (found, file_errs)) in files.iter().zip(&found) {
        errs.0.extend(file_errs.0.iter().cloned());
        let f = match found {
            Ok(f) => f,
            Err(id) => {
                note_broken(*id, known);
                continue;
            }
        };
        let at = |errs: &mut Errors, pos: Option<Pos>, key: &str, msg: String| {
            let (line, col) = pos.unwrap_or((0, 0));
            let mut e = error(file, key, msg);
            (e.line, e.col) = (line, col);
            errs.0.push(e);
        };
        let id = u64::try_from(f.id).ok();
        let id_span = f.at.map(|a| a.0);
        match id.map(|id| out.get(&id).map(|p| p.file.as_path())) {
            None => at(
                errs,
                id_span,
                "id",
                "program id must be a non-negative integer".into(),
            ),
            Some(Some(first)) => {
                let msg = format!(
                    "program id {} is used by both {} and {}",
                    f.id,
                    first.display(),
                    file.display()
                );
                at(errs, id_span, "id", msg);
            }
            Some(None) => {}
        }
        let name = f.program.name.as_str();
        match names.get(name) {
            Some(first) => {
                let msg = format!(
                    "program name \"{name}\" is used by both {} and {}",
                    first.display(),
                    file.display()
                );
                at(errs, f.at.map(|a| a.1), "name", msg);
            }
            None => {
                names.insert(name, file);
            }
        }
        if let Some(id) = id {
            out.entry(id).or_insert_with(|| Arc::clone(&f.program));
        }
    }
    out
}

/// One program file's program, with what the cross-file checks point at.
struct Found {
    program: Arc<Program>,
    /// The id as written (it may be negative).
    id: i64,
    /// Where `id` and `name` are in the file; `None` for a program reused
    /// unread.
    at: Option<(Pos, Pos)>,
}

/// Check the program file `file` holding `text` on its own; `stamp` is
/// kept in its program. `wss`: the workspaces, when they are known.
pub fn check_one(
    file: &Path,
    text: &str,
    stamp: Option<super::Stamp>,
    server: &Server,
    wss: Option<&BTreeMap<String, Workspace>>,
) -> Checked {
    let mut errs = Errors::default();
    let src = Src { file, text };
    let Some(raw) = parse::<RawProgram>(&src, &mut errs) else {
        return Checked {
            program: None,
            errs,
            broken_id: broken_id(text),
        };
    };
    if let (Some(ws), Some(wss)) = (&raw.workspace, wss) {
        workspace_ref(&src, ws, wss, "workspace".into(), &mut errs);
    }
    let mut program = program(&src, &raw, server, &mut errs);
    program.stamp = super::StampCell::new(stamp);
    program.digest = super::stamp::digest(text);
    let at = |span: Range<usize>| line_col(text, span.start);
    let at = (at(raw.id.span()), at(raw.name.span()));
    Checked {
        program: Some((Arc::new(program), *raw.id.get_ref(), at)),
        errs,
        broken_id: None,
    }
}

/// Check one file on its own: the program, or for a file that is not
/// one what its text says of its id ([`Checked::broken_id`]); with the
/// errors found in it.
fn found(
    file: &Path,
    source: &Source,
    server: &Server,
    wss: Option<&BTreeMap<String, Workspace>>,
) -> (Result<Found, Option<u64>>, Errors) {
    let checked = match source {
        Source::Loaded(p) => {
            let id = i64::try_from(p.id).unwrap_or(i64::MAX);
            let (program, at) = (Arc::clone(p), None);
            return (Ok(Found { program, id, at }), Errors::default());
        }
        Source::Text { text, stamp } => check_one(file, text, *stamp, server, wss),
        Source::Checked(checked) => Checked {
            program: checked.program.clone(),
            errs: Errors(checked.errs.0.clone()),
            broken_id: checked.broken_id,
        },
    };
    let Checked {
        program,
        errs,
        broken_id,
    } = checked;
    let found = program.map(|(program, id, at)| Found {
        program,
        id,
        at: Some(at),
    });
    (found.ok_or(broken_id), errs)
}

/// The id a program file that does not load gives anyway: a TOML file
/// with a non-negative integer `id`.
fn broken_id(text: &str) -> Option<u64> {
    let id = text
        .parse::<toml::Table>()
        .ok()
        .and_then(|t| t.get("id")?.as_integer());
    id.and_then(|id| u64::try_from(id).ok())
}

/// Remember what can be known about a program file that failed to load.
fn note_broken(id: Option<u64>, known: &mut Known) {
    match id {
        Some(id) => {
            known.broken.insert(id);
        }
        None => known.complete = false,
    }
}

/// The first `[functions.webhook]` table as written (a second is an error).
fn raw_trigger(f: &RawFunction) -> Option<&raw::RawWebhook> {
    f.webhook.as_ref().and_then(|w| match w.get_ref() {
        raw::WebhookSlot::One(w) => Some(w),
        raw::WebhookSlot::Many(all) => all.first().map(|w| w.get_ref()),
    })
}

/// The function's outputs as written, with their key: the function's
/// `outputs`, else its Webhook Trigger's.
fn raw_outputs<'a>(f: &'a RawFunction, key: &str) -> Option<(&'a [Spanned<String>], String)> {
    if let Some(o) = &f.outputs {
        return Some((o.get_ref(), format!("{key}.outputs")));
    }
    let o = raw_trigger(f)?.outputs.as_ref()?;
    Some((o.get_ref(), format!("{key}.webhook.outputs")))
}

/// The names a function's values bind to, as written.
fn raw_inputs(f: &RawFunction) -> Vec<String> {
    raw_outputs(f, "")
        .map(|(o, _)| o.iter().map(|o| o.get_ref().clone()).collect())
        .unwrap_or_default()
}

/// Function name → inputs, for checking calls; the first of a name wins.
type Inputs<'a> = HashMap<&'a str, Vec<String>>;

/// One program file's functions, checked.
fn program(src: &Src, raw: &RawProgram, server: &Server, errs: &mut Errors) -> Program {
    if raw.functions.is_empty() {
        let msg = "a program needs at least one [[functions]] entry";
        errs.at(src, raw.name.span(), "functions", msg);
    }
    let mut inputs = Inputs::new();
    for f in &raw.functions {
        inputs
            .entry(f.name.get_ref())
            .or_insert_with(|| raw_inputs(f));
    }
    let dir = config_dir(src.file);
    let mut seen = HashMap::new();
    let mut functions = Vec::with_capacity(raw.functions.len());
    for (i, f) in raw.functions.iter().enumerate() {
        let key = format!("functions[{i}]");
        let name_key = format!("{key}.name");
        errs.name(src, &f.name, &name_key, "function");
        errs.unique(src, &mut seen, &f.name, &name_key, "function name");
        functions.push(function(src, f, &key, &inputs, &dir, server, errs));
    }
    cycles(src, raw, errs);
    Program {
        id: u64::try_from(*raw.id.get_ref()).unwrap_or(0),
        name: raw.name.get_ref().clone(),
        workspace: raw.workspace.as_ref().map(|w| w.get_ref().clone()),
        file: src.file.to_path_buf(),
        functions,
        stamp: super::StampCell::default(),
        digest: 0,
        hook: false,
    }
}

/// One function, checked.
fn function(
    src: &Src,
    f: &RawFunction,
    key: &str,
    inputs: &Inputs,
    dir: &Path,
    server: &Server,
    errs: &mut Errors,
) -> Function {
    let webhook_trigger = webhook_trigger(src, f, key, errs);
    let outputs = outputs(src, f, key, errs);
    let own = raw_inputs(f);
    let steps = steps(src, f, key, (&own, inputs), errs);
    // The keys of optional fields are formatted only when the field is
    // given: with thousands of functions, formatting them all shows.
    let timeout = f.timeout.as_ref().map_or(server.run_timeout, |t| {
        let key = format!("{key}.timeout");
        duration(src, Some(t), &key, server.run_timeout, errs)
    });
    let env = if f.env.is_empty() {
        BTreeMap::new()
    } else {
        env_vars(src, &f.env, &format!("{key}.env"), errs)
    };
    let workdir = f
        .workdir
        .as_deref()
        .map_or(dir.to_path_buf(), |w| resolve(dir, Path::new(w)));
    let concurrency = f.concurrency.as_ref().map(|_| {
        count(
            src,
            &f.concurrency,
            &format!("{key}.concurrency"),
            1,
            1,
            errs,
        )
    });
    let (user, group) = identity(src, f, key, errs);
    let callback = f.callback.as_ref().and_then(|raw| {
        let key = format!("{key}.callback");
        let place = super::callbacks::Place::Function;
        super::callbacks::fixed(src, &server.callbacks, Some(raw), &key, place, errs)
    });
    let schedules = super::schedules::compile(src, f, key, &outputs, errs);
    let expect_every = f.expect_every.as_ref().and_then(|e| {
        let key = format!("{key}.expect_every");
        let every = duration(src, Some(e), &key, std::time::Duration::ZERO, errs);
        if every.is_zero() {
            errs.at(src, e.span(), key, "expect_every must be longer than 0s");
            return None;
        }
        Some(every)
    });
    overdue_needs_expect_every(src, f, callback.as_ref(), key, errs);
    let name = f.name.get_ref().clone();
    Function {
        name,
        steps,
        timeout,
        env,
        workdir,
        concurrency,
        retry_on_restart: f.retry_on_restart,
        output: f.output,
        outputs,
        webhook_trigger,
        user,
        group,
        callback,
        env_inputs: true,
        combined_output: false,
        expect_every,
        schedules,
        retry: f
            .retry
            .as_ref()
            .map(|r| super::retry::compile(src, r, &format!("{key}.retry"), errs)),
        concurrency_group: f.concurrency_group.as_ref().and_then(|g| {
            let key = format!("{key}.concurrency_group");
            super::group::compile(src, g, &key, &own, errs)
        }),
    }
}

/// A callback with `on` overdue needs the function's `expect_every`:
/// without it the function is never overdue, and the callback (or that
/// part of it) could never be sent.
fn overdue_needs_expect_every(
    src: &Src,
    f: &RawFunction,
    callback: Option<&super::callbacks::Fixed>,
    key: &str,
    errs: &mut Errors,
) {
    let overdue = callback.is_some_and(|c| c.on.contains(&Outcome::Overdue));
    if let (true, None, Some(raw)) = (overdue, &f.expect_every, &f.callback) {
        let msg = "on has overdue, but the function has no expect_every: it is never overdue; \
                   set expect_every or leave overdue out";
        errs.at(src, raw.span(), format!("{key}.callback"), msg);
    }
}

/// `user` and `group`, resolved to numeric ids now (so a run never looks
/// names up). A `user` without `group` takes the user's primary group from
/// /etc/passwd; a numeric `user` without an entry there needs `group`.
fn identity(
    src: &Src,
    f: &RawFunction,
    key: &str,
    errs: &mut Errors,
) -> (Option<u32>, Option<u32>) {
    let bad_id = |v: &Spanned<raw::RawId>, what: &str, errs: &mut Errors| {
        let msg = format!("{what} id must be between 0 and {}", u32::MAX - 1);
        errs.at(src, v.span(), format!("{key}.{what}"), msg);
    };
    let mut primary = None;
    let user = f.user.as_ref().and_then(|u| match u.get_ref() {
        raw::RawId::Id(n) => match u32::try_from(*n) {
            Ok(uid) if uid != u32::MAX => {
                primary = crate::sys::primary_group_of(uid);
                if primary.is_none() && f.group.is_none() {
                    let msg = format!(
                        "uid {uid} has no entry in /etc/passwd, so its group is unknown: set `group` too"
                    );
                    errs.at(src, u.span(), format!("{key}.user"), msg);
                }
                Some(uid)
            }
            _ => {
                bad_id(u, "user", errs);
                None
            }
        },
        raw::RawId::Name(name) => match crate::sys::user_by_name(name) {
            Some((uid, gid)) => {
                primary = Some(gid);
                Some(uid)
            }
            None => {
                let msg = format!("no user \"{name}\" in /etc/passwd (give a user of another source by uid)");
                errs.at(src, u.span(), format!("{key}.user"), msg);
                None
            }
        },
    });
    let group = match &f.group {
        None => primary,
        Some(g) => {
            match g.get_ref() {
                raw::RawId::Id(n) => match u32::try_from(*n) {
                    Ok(gid) if gid != u32::MAX => Some(gid),
                    _ => {
                        bad_id(g, "group", errs);
                        None
                    }
                },
                raw::RawId::Name(name) => {
                    let gid = crate::sys::group_by_name(name);
                    if gid.is_none() {
                        let msg = format!("no group \"{name}\" in /etc/group (give a group of another source by gid)");
                        errs.at(src, g.span(), format!("{key}.group"), msg);
                    }
                    gid
                }
            }
        }
    };
    (user, group)
}

/// The Webhook Trigger (`[functions.webhook]`): at most one.
fn webhook_trigger(
    src: &Src,
    f: &RawFunction,
    key: &str,
    errs: &mut Errors,
) -> Option<WebhookTrigger> {
    let slot = f.webhook.as_ref()?;
    if let raw::WebhookSlot::Many(all) = slot.get_ref() {
        if let Some(second) = all.get(1) {
            errs.at(
                src,
                second.span(),
                format!("{key}.webhook"),
                raw::ONE_WEBHOOK,
            );
        }
    }
    let w = raw_trigger(f)?;
    Some(WebhookTrigger {
        active: w.active,
        lists_outputs: w.outputs.is_some(),
    })
}

/// The function's outputs (`outputs`, else `[functions.webhook]`'s):
/// unique identifiers. Given in both places, they must be the same list.
fn outputs(src: &Src, f: &RawFunction, key: &str, errs: &mut Errors) -> Vec<String> {
    let Some((list, okey)) = raw_outputs(f, key) else {
        return Vec::new();
    };
    let names = |l: &[Spanned<String>]| l.iter().map(|o| o.get_ref().clone()).collect::<Vec<_>>();
    let in_trigger = raw_trigger(f).and_then(|w| w.outputs.as_ref());
    if let (Some(own), Some(theirs)) = (&f.outputs, in_trigger) {
        if names(own.get_ref()) != names(theirs.get_ref()) {
            let msg = format!(
                "the Webhook Trigger's outputs differ from the function's `outputs` ({}): \
                 declare them once, as `outputs = [...]` on the function",
                names(own.get_ref()).join(", ")
            );
            errs.at(src, theirs.span(), format!("{key}.webhook.outputs"), msg);
        }
    }
    let mut seen = HashMap::new();
    for (j, o) in list.iter().enumerate() {
        let okey = format!("{okey}[{j}]");
        if is_ident(o.get_ref()) {
            errs.unique(src, &mut seen, o, &okey, "output");
        } else {
            let msg = format!(
                "output \"{}\" must be an identifier [A-Za-z_][A-Za-z0-9_]*",
                o.get_ref()
            );
            errs.at(src, o.span(), okey, msg);
        }
    }
    names(list)
}

/// The function's own inputs and every function's inputs.
type Scope<'a> = (&'a [String], &'a Inputs<'a>);

/// `command` or `steps`, exactly one, not empty.
fn steps(src: &Src, f: &RawFunction, key: &str, scope: Scope, errs: &mut Errors) -> Vec<Step> {
    match (&f.command, &f.steps) {
        (Some(_), Some(s)) => {
            let msg = "give either `command` or `steps`, not both";
            errs.at(src, s.span(), format!("{key}.steps"), msg);
            Vec::new()
        }
        (None, None) => {
            errs.at(
                src,
                f.name.span(),
                key,
                "a function needs `command` or `steps`",
            );
            Vec::new()
        }
        (Some(c), None) => command(src, c, &format!("{key}.command"), scope.0, errs)
            .into_iter()
            .collect(),
        (None, Some(s)) => {
            if s.get_ref().is_empty() {
                errs.at(
                    src,
                    s.span(),
                    format!("{key}.steps"),
                    "steps must not be empty",
                );
            }
            let each = s.get_ref().iter().enumerate();
            each.filter_map(|(j, st)| step(src, st, &format!("{key}.steps[{j}]"), scope, errs))
                .collect()
        }
    }
}

/// A command step: a non-empty argv of templates.
fn command(
    src: &Src,
    argv: &raw::Argv,
    key: &str,
    inputs: &[String],
    errs: &mut Errors,
) -> Option<Step> {
    if argv.get_ref().is_empty() {
        errs.at(
            src,
            argv.span(),
            key,
            "command must not be empty: give at least the program to run",
        );
        return None;
    }
    templates(src, argv.get_ref(), key, inputs, errs).map(Step::Command)
}

/// One element of `steps`: exactly one of command, shell, call.
fn step(
    src: &Src,
    st: &Spanned<RawStep>,
    key: &str,
    scope: Scope,
    errs: &mut Errors,
) -> Option<Step> {
    let s = st.get_ref();
    let given = [s.command.is_some(), s.shell.is_some(), s.call.is_some()];
    if given.iter().filter(|g| **g).count() != 1 {
        errs.at(
            src,
            st.span(),
            key,
            "a step needs exactly one of `command`, `shell` or `call`",
        );
        return None;
    }
    if let (Some(args), None) = (&s.args, &s.call) {
        errs.at(
            src,
            args.span(),
            format!("{key}.args"),
            "`args` only goes with `call`",
        );
    }
    if let Some(c) = &s.command {
        return command(src, c, &format!("{key}.command"), scope.0, errs);
    }
    if let Some(sh) = &s.shell {
        if sh.get_ref().trim().is_empty() {
            errs.at(
                src,
                sh.span(),
                format!("{key}.shell"),
                "shell script must not be empty",
            );
        }
        return Some(Step::Shell(sh.get_ref().clone()));
    }
    call(src, s.call.as_ref()?, s.args.as_ref(), key, scope, errs)
}

/// A call step: the callee exists and gets one argument per input.
fn call(
    src: &Src,
    callee: &Spanned<String>,
    args: Option<&Spanned<Vec<Spanned<String>>>>,
    key: &str,
    (own, inputs): Scope,
    errs: &mut Errors,
) -> Option<Step> {
    let Some(wanted) = inputs.get(callee.get_ref().as_str()) else {
        let msg = format!(
            "calls function \"{}\", which this program does not define",
            callee.get_ref()
        );
        errs.at(src, callee.span(), format!("{key}.call"), msg);
        return None;
    };
    let given = args.map_or(&[][..], |a| a.get_ref().as_slice());
    if given.len() != wanted.len() {
        let msg = format!(
            "call of \"{}\" passes {} argument(s), but it has {} input(s) [{}]",
            callee.get_ref(),
            given.len(),
            wanted.len(),
            wanted.join(", ")
        );
        let span = args.map_or(callee.span(), |a| a.span());
        errs.at(src, span, format!("{key}.args"), msg);
    }
    let args = templates(src, given, &format!("{key}.args"), own, errs)?;
    Some(Step::Call {
        function: callee.get_ref().clone(),
        args,
    })
}

/// A call edge: callee index, span and key of the `call` value.
type Edge = (usize, Range<usize>, String);

/// Report every call cycle once, at the call that closes it.
fn cycles(src: &Src, raw: &RawProgram, errs: &mut Errors) {
    let names: Vec<&str> = raw
        .functions
        .iter()
        .map(|f| f.name.get_ref().as_str())
        .collect();
    let edges: Vec<Vec<Edge>> = raw
        .functions
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let steps = f.steps.as_ref().map_or(&[][..], |s| s.get_ref().as_slice());
            steps
                .iter()
                .enumerate()
                .filter_map(|(j, st)| {
                    let call = st.get_ref().call.as_ref()?;
                    let to = names.iter().position(|n| *n == call.get_ref())?;
                    Some((to, call.span(), format!("functions[{i}].steps[{j}].call")))
                })
                .collect()
        })
        .collect();
    let mut color = vec![0u8; names.len()];
    for i in 0..names.len() {
        if color[i] == 0 {
            visit(
                i,
                &edges,
                &mut color,
                &mut Vec::new(),
                &mut |stack, edge| {
                    let path: Vec<&str> =
                        stack.iter().chain([&edge.0]).map(|n| names[*n]).collect();
                    let msg = format!(
                        "call cycle {}; a function may not call itself, directly or indirectly",
                        path.join(" -> ")
                    );
                    errs.at(src, edge.1.clone(), &edge.2, msg);
                },
            );
        }
    }
}

/// Depth-first search; `found` gets the cycle's stack and closing edge.
fn visit(
    i: usize,
    edges: &[Vec<Edge>],
    color: &mut [u8],
    stack: &mut Vec<usize>,
    found: &mut dyn FnMut(&[usize], &Edge),
) {
    color[i] = 1;
    stack.push(i);
    for e in &edges[i] {
        match color[e.0] {
            0 => visit(e.0, edges, color, stack, found),
            1 => {
                let from = stack.iter().position(|n| *n == e.0).unwrap_or(0);
                found(&stack[from..], e);
            }
            _ => {}
        }
    }
    stack.pop();
    color[i] = 2;
}
