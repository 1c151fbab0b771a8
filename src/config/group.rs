//! `[functions.concurrency_group]`: runs whose group key (a template over
//! the run's values) renders the same share a limit, across functions and
//! programs, and a policy says what a run that finds the group at its
//! limit does (the runner applies it, `runner/queue.rs`; this module reads
//! the table).

use toml::Spanned;

use super::raw::RawGroup;
use super::types::{inner, parse_template, Errors, Src};
use super::Template;

/// Most runs of one group key at once.
pub const MAX_LIMIT: i64 = 10_000;

/// What a run does when its group is at its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// It waits in the queue (the default).
    Queue,
    /// It waits, and replaces the run of the group already waiting: at
    /// most one waits per key; the replaced one ends `superseded`.
    ReplacePending,
    /// The oldest running run of the group is cancelled (it ends
    /// `cancelled`, naming the run that superseded it) and any waiting one
    /// is superseded; the new one starts once the cancelled one has ended.
    CancelRunning,
    /// It does not run: it ends `skipped`.
    Skip,
}

impl Policy {
    /// The name as written in the config.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Queue => "queue",
            Policy::ReplacePending => "replace_pending",
            Policy::CancelRunning => "cancel_running",
            Policy::Skip => "skip",
        }
    }
}

impl Policy {
    /// The policy named `name` (as in the config).
    pub fn from_name(name: &str) -> Option<Policy> {
        POLICIES.into_iter().find(|x| x.name() == name)
    }
}

const POLICIES: [Policy; 4] = [
    Policy::Queue,
    Policy::ReplacePending,
    Policy::CancelRunning,
    Policy::Skip,
];

/// A function's concurrency group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// The group key: `{name}` placeholders take the run's values.
    pub key: Template,
    /// Runs of one key executing at once.
    pub limit: usize,
    /// What a run finding its key at `limit` does.
    pub policy: Policy,
}

impl Group {
    /// The key of a run with `values` (indexed like the function's inputs).
    pub fn key_of(&self, values: &[String]) -> String {
        self.key.render(values)
    }
}

/// Read `[functions.concurrency_group]` at `key`; `inputs` are the names a
/// placeholder may take. `None` when the key is not valid.
pub fn compile(
    src: &Src,
    raw: &Spanned<RawGroup>,
    key: &str,
    inputs: &[String],
    errs: &mut Errors,
) -> Option<Group> {
    let r = raw.get_ref();
    let limit = match &r.limit {
        None => 1,
        Some(l) if (1..=MAX_LIMIT).contains(l.get_ref()) => *l.get_ref() as usize,
        Some(l) => {
            let msg = format!("limit must be from 1 to {MAX_LIMIT}, got {}", l.get_ref());
            errs.at(src, l.span(), format!("{key}.limit"), msg);
            1
        }
    };
    let policy = match &r.policy {
        None => Policy::Queue,
        Some(p) => match Policy::from_name(p.get_ref()) {
            Some(x) => x,
            None => {
                let msg = format!(
                    "policy must be \"queue\", \"replace_pending\", \"cancel_running\" or \
                     \"skip\", got \"{}\"",
                    p.get_ref()
                );
                errs.at(src, p.span(), format!("{key}.policy"), msg);
                Policy::Queue
            }
        },
    };
    if r.key.get_ref().is_empty() {
        errs.at(
            src,
            r.key.span(),
            format!("{key}.key"),
            "key must not be empty",
        );
        return None;
    }
    match parse_template(r.key.get_ref(), inputs) {
        Ok(t) => Some(Group {
            key: t,
            limit,
            policy,
        }),
        Err((offset, msg)) => {
            errs.at(
                src,
                inner(src.text, &r.key, offset),
                format!("{key}.key"),
                msg,
            );
            None
        }
    }
}
