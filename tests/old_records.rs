//! A state dir written by an earlier trigd (2207e7f, before the run record
//! was typed) loads, and its runs are served exactly as that version
//! served them: `GET /api/runs/<id>`, the runs pages, and the answer to a
//! repeated Idempotency-Key request. The lines of `runs.log` and
//! `idempotency.log` and the answers below are copied from what the
//! 2207e7f binary wrote and answered for the same config.

use std::fs;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::ui::{cookie, login, ui_config, HTML};
use crate::util::*;

/// The runs in the old state dir: a `call` step with its callee's steps and
/// a delivered callback; a failed step (exit code, stdout) whose request
/// had an Idempotency-Key; a step killed by a signal; a public tool run; a
/// tool run with an application key.
const RUNS: [&str; 5] = [
    "vm-b85d8114ee592fd465dfb78e575de412",
    "vm-d27ee28aa5ff5cfd36fff8f9056feb2c",
    "vm-d5542be28c64a5d3f19a6537b007e573",
    "vm-977a50498e3484ee4bfcfe5703babeac",
    "vm-95cb271b6e06cf0de46c962cc14eaae9",
];

/// The application key whose hash is in the old `app_keys.json`.
const APP_KEY: &str = "tk_98a322fd4950187c8f9454142ea42ad9826099aca843aa0bb4b45866bc2a3ae2";

/// When the old Idempotency-Key was claimed (unix seconds in
/// `idempotency.log`); moved to now, so that the key is in its window.
const CLAIMED_AT: &str = "1795715706";

/// A file of the old state dir or of the old version's answers.
fn old(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/state-2207e7f")
        .join(rel);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The part of `page` from `from` to the end of `to`.
/// `page` without what later versions added to a run's page: the Re-run
/// and Redeliver buttons (issue 35) and the empty cells of their column.
fn without_buttons(page: &str) -> String {
    let mut out = String::with_capacity(page.len());
    let mut rest = page;
    while let Some(at) = rest.find("<form method=\"post\" action=\"/runs/") {
        out.push_str(&rest[..at]);
        let end = rest[at..]
            .find("</form>")
            .map_or(rest.len(), |e| at + e + 7);
        rest = &rest[end..];
    }
    out.push_str(rest);
    loop {
        let next = out
            .replace("<th></th></tr>", "</tr>")
            .replace("<td></td></tr>", "</tr>");
        if next == out {
            return out;
        }
        out = next;
    }
}

fn part<'p>(page: &'p str, from: &str, to: &str) -> &'p str {
    let start = page
        .find(from)
        .unwrap_or_else(|| panic!("no {from} in {page}"));
    let end = page[start..]
        .find(to)
        .unwrap_or_else(|| panic!("no {to} after {from} in {page}"));
    &page[start..start + end + to.len()]
}

/// Program 1 (the `inventory` tool's) and program 2, whose functions
/// leave every kind of step report: a failed shell step (exit code), a
/// shell step killed by a signal, and a `call` step with its callee's
/// steps.
const PROGRAMS: [(&str, &str); 2] = [
    (
        "inv.toml",
        r#"id = 1
name = "inv"
workspace = "ops"

[[functions]]
name = "list"
command = ["printf", "[1,2]"]

[[functions]]
name = "add"
command = ["printf", "%s", "{item}"]
[functions.webhook]
outputs = ["item"]
"#,
    ),
    (
        "old.toml",
        r#"id = 2
name = "old"
workspace = "ops"

[[functions]]
name = "fails"
steps = [{ shell = 'echo partial; echo oops >&2; exit 3' }]
[functions.webhook]

[[functions]]
name = "killed"
steps = [{ shell = 'kill -9 $$' }]
[functions.webhook]

[[functions]]
name = "nested"
steps = [{ shell = 'echo one' }, { call = "inner" }, { command = ["printf", "[3]"] }]
[functions.webhook]

[[functions]]
name = "inner"
command = ["printf", "two"]
[functions.webhook]
"#,
    ),
];

/// [`ui_config`] with the key [`KEY`] (which may name a callback) and
/// callbacks to loopback.
fn setup_dir(name: &str) -> TestDir {
    let dir = TestDir::new(name);
    let extra = format!(
        "\n[[api_keys]]\nname = \"all\"\nsha256 = \"{}\"\nrequest_callbacks = true\n\n\
         [callbacks]\nallow = [\"127.0.0.1\"]\nallow_private = [\"127.0.0.1\"]\n\
         secret_file = \"cb.secret\"\n",
        sha256_hex(KEY)
    );
    // The old runs were made on an instance named `vm`.
    dir.write("config.toml", &(ui_config("instance = \"vm\"") + &extra));
    dir.write("cb.secret", "old-records-callback-secret-0123456789\n");
    for (file, text) in PROGRAMS {
        dir.write(&format!("programs/{file}"), text);
    }
    dir
}

/// A new server on the old state dir, with the old Idempotency-Key's
/// claim moved to now.
fn start_on_old_state() -> (TestDir, Trigd) {
    let dir = setup_dir("old_records");
    dir.mkdir("state");
    dir.write("state/runs.log", &old("runs.log"));
    dir.write("state/app_keys.json", &old("app_keys.json"));
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let keys = old("idempotency.log").replace(CLAIMED_AT, &now.to_string());
    dir.write("state/idempotency.log", &keys);
    let t = Trigd::start(&dir);
    (dir, t)
}

#[test]
fn a_state_dir_written_by_2207e7f_loads_and_is_served_the_same() {
    let (dir, t) = start_on_old_state();
    // Start-up reads the log and leaves its lines as they are (a
    // compaction writes them back byte for byte: the unit test
    // `lines_written_by_2207e7f_read_and_write_back_the_same`).
    let now = dir.read("state/runs.log");
    t.check(
        now.starts_with(&old("runs.log")),
        format!("start-up changed the old lines of runs.log:\n{now}"),
    );
    for id in RUNS {
        let r = t.get(&format!("/api/runs/{id}?api_key={KEY}"));
        r.status_is(200);
        r.check_eq(r.text(), old(&format!("answers/get-{id}.json")), id);
    }
    // The repeat of the old request with the same key: answered from the
    // old record (exit code from its last step), not run again.
    let r = t.request(
        "POST",
        &format!("/api?api_key={KEY}&program_id=2&function=fails"),
        &[("Idempotency-Key", "old-1")],
        b"",
    );
    r.status_is(500);
    r.check_eq(r.text(), old("answers/replay.json"), "the replayed answer");
    // The old application key still opens the protected environment.
    let r = t.request(
        "GET",
        "/tools/inventory/production/list",
        &[
            ("Authorization", &format!("Bearer {APP_KEY}")),
            ("User-Agent", "old/1"),
        ],
        b"",
    );
    r.ok();
}

#[test]
fn pages_of_runs_written_by_2207e7f_read_the_same() {
    let (_dir, t) = start_on_old_state();
    let alice = cookie(&login(&t, "alice"));
    let get = |path: &str| {
        let r = t.request("GET", path, &[HTML, ("Cookie", alice.as_str())], b"");
        r.status_is(200);
        r.text()
    };
    for id in RUNS {
        let (new, was) = (
            without_buttons(&get(&format!("/runs/{id}"))),
            without_buttons(&old(&format!("answers/page-{id}.html"))),
        );
        // Facts (times, duration, origin), steps, Result, callbacks; the
        // output (not copied) and the session's CSRF token aside.
        let (from, to) = ("<main>", "<h2>Output</h2>");
        t.check(
            part(&new, from, to) == part(&was, from, to),
            format!(
                "page of {id}:\n{}\nwas:\n{}",
                part(&new, from, to),
                part(&was, from, to)
            ),
        );
    }
    let (new, was) = (get("/runs"), old("answers/list.html"));
    let (from, to) = ("<tbody>", "</tbody>");
    t.check(
        part(&new, from, to) == part(&was, from, to),
        format!(
            "the runs list:\n{}\nwas:\n{}",
            part(&new, from, to),
            part(&was, from, to)
        ),
    );
    let (new, was) = (
        get("/workspaces/ops/settings"),
        old("answers/settings.html"),
    );
    let (from, to) = ("<dl>", "</dl>");
    t.check(
        part(&new, from, to) == part(&was, from, to),
        format!("the key's creation time:\n{}", part(&new, from, to)),
    );
}
