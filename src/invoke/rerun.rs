//! A re-run (`POST /api/runs/<id>/rerun`, the run page's Re-run button):
//! a new run of the same function with the same values, taken through the
//! same steps as any run request, in the same order:
//!
//! credentials (who may see the run, `runs::authorize`) → the function and
//! its trigger, as the config has them now → values (checked against the
//! function's inputs now) → callbacks (the function's) → start → answer
//!
//! The trigger's rule and signature are not evaluated again: they judged
//! the original request, whose body is gone; the values are the ones that
//! request made. The two records are linked both ways: the new one's
//! `RerunOf` names the original, the original's `Reruns` lists it.

use std::sync::Arc;

use super::{answer, check_values, job};
use crate::config::{Config, Function, Program, Values};
use crate::http::app::App;
use crate::http::{ApiError, Response};
use crate::runs::callback;
use crate::state::delivery::Source;
use crate::state::record::{Origin, Owner, RunRecord, MAX_RERUNS};
use crate::state::store::new_run_id;

/// Start a re-run of `orig` (an ended run `by` may see) for `by`, async
/// unless `run_async` says otherwise; the answer of a run request.
///
/// # Errors
/// 409 `run_not_ended`, `rerun_target_gone`, `rerun_unavailable`; 400
/// `variables_mismatch` when the function's inputs changed; the errors of
/// a run's start (`busy`, `disk_full`, …).
pub fn rerun(
    app: &App,
    cfg: &Arc<Config>,
    orig: &RunRecord,
    by: Origin,
    run_async: bool,
) -> Result<Response, ApiError> {
    if !orig.state.is_terminal() {
        return Err(ApiError::RunNotEnded {
            run: orig.run.clone(),
            state: orig.state.name(),
        });
    }
    let (program, function) = target(cfg, orig)?;
    let input = match &orig.rerun_input {
        Some(i) if !i.body => i,
        Some(_) => {
            return Err(ApiError::RerunUnavailable {
                reason: "it read its request body or files from temporary files, which are gone",
            })
        }
        None => {
            return Err(ApiError::RerunUnavailable {
                reason: "its values were not kept (a run recorded by an earlier version of trigd, or a skipped occurrence)",
            })
        }
    };
    check_values(
        &cfg.server,
        &Values::Positional,
        function.inputs(),
        &input.values,
    )?;
    let mut job = job(
        cfg,
        program,
        function,
        input.values.clone(),
        &input.vars,
        by,
    );
    job.tool = orig.tool.clone();
    job.callbacks = callback::targets(
        &cfg.server.callbacks,
        &[(function.callback.as_ref(), Source::Function)],
        None,
        false,
    )?;
    let id = new_run_id(&cfg.server.instance);
    job.id = Some(id.clone());
    job.rerun_of = Some(orig.run.clone());
    link(app, &orig.run, &id, true);
    let answer = answer::start(app, job, run_async);
    if answer.is_err() && app.store.get(&id).is_none() {
        link(app, &orig.run, &id, false);
    }
    answer
}

/// Add re-run `id` to (or, when it did not start, take it off) the
/// `Reruns` of run `orig`, durably.
fn link(app: &App, orig: &str, id: &str, add: bool) {
    let changed = app.store.update(orig, true, |r| {
        if add {
            r.reruns.push(id.to_string());
            let extra = r.reruns.len().saturating_sub(MAX_RERUNS);
            r.reruns.drain(..extra);
        } else {
            r.reruns.retain(|x| x != id);
        }
        true
    });
    if let Err(e) = changed {
        log::error!("run {orig}: cannot record its re-run {id}: {e}");
    }
}

/// The program and function the run ran, and the trigger it came
/// through, as the config has them now.
///
/// # Errors
/// 409 `rerun_target_gone` naming what is gone.
fn target<'c>(
    cfg: &'c Config,
    orig: &RunRecord,
) -> Result<(&'c Arc<Program>, &'c Function), ApiError> {
    let gone = |what: String| ApiError::RerunTargetGone { what };
    let name = orig.function.as_str();
    let Some(program) = crate::runner::program_of(cfg, orig.owner, name) else {
        return Err(gone(match orig.owner {
            Owner::Program(id) => match cfg.program(id) {
                Some(_) => format!("function '{name}' of program {id}"),
                None => format!("program {id}"),
            },
            Owner::Hook => format!("hook '{name}'"),
        }));
    };
    let function = program
        .function(name)
        .ok_or_else(|| gone(format!("function '{name}' of program {}", program.id)))?;
    trigger(cfg, orig, program, function).map_err(gone)?;
    Ok((program, function))
}

/// Whether the trigger the run came through still exists: its schedule,
/// its tool environment with a trigger of the function, or (`POST /api`,
/// `trigd run`) the function's active webhook trigger. A hook is its own
/// trigger. `Err` names what is gone.
fn trigger(cfg: &Config, orig: &RunRecord, p: &Program, f: &Function) -> Result<(), String> {
    if orig.owner == Owner::Hook {
        return Ok(());
    }
    if let Origin::Schedule(sid) = &orig.by {
        let found = crate::schedule::timer::schedules(cfg).any(|(id, ..)| id == *sid);
        return if found {
            Ok(())
        } else {
            Err(format!("schedule '{sid}'"))
        };
    }
    if let Some(t) = &orig.tool {
        let tool = cfg.tools.get(&t.tool);
        let env = tool.and_then(|x| x.environments.get(&t.environment));
        let runs_it = tool.is_some_and(|x| {
            x.triggers
                .iter()
                .any(|tr| tr.program == p.id && tr.function == f.name)
        });
        return if env.is_some() && runs_it {
            Ok(())
        } else {
            Err(format!(
                "the trigger of tool environment '{t}' for this function"
            ))
        };
    }
    match &f.webhook_trigger {
        Some(w) if w.active => Ok(()),
        _ => Err(format!(
            "the active webhook trigger of function '{}'",
            f.name
        )),
    }
}
