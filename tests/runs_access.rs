//! Who may read, follow and cancel a run, and what a cancel answers: hook
//! runs owned by their hook (not by a program 0), authentication before
//! the run lookup (401 and the failed-authentication limiter on status,
//! output and cancel alike), a cancel's answer agreeing with the record
//! when it races the run's end, `/metrics` label escaping, and the shipped
//! demo config's Runs page.

use std::thread;

use serde_json::{json, Value};

use crate::util::*;

/// Program 7: `quick` exits at once.
const QUICK: &str = r#"
id = 7
name = "quick"

[[functions]]
name = "quick"
command = ["true"]
[functions.webhook]
"#;

/// The record of run `id` once it has ended.
#[track_caller]
fn final_record(t: &Trigd, id: &str) -> Value {
    let mut rec = Value::Null;
    let ended = wait_until(WAIT, || {
        rec = t.get(&format!("/api/runs/{id}?api_key={KEY}")).ok();
        !matches!(rec["State"].as_str(), Some("queued" | "running"))
    });
    if !ended {
        t.fail(format!("run {id} did not end: {rec}"));
    }
    rec
}

#[test]
fn a_cancel_racing_the_end_of_a_run_agrees_with_its_record() {
    let (_dir, t) = serve("cancel_race", "", &[("quick.toml", QUICK)]);
    let races = |n: usize| {
        let c = t.client();
        let mut seen = Vec::new();
        for _ in 0..n {
            let r = c.post(&format!(
                "/api?api_key={KEY}&program_id=7&run_async=true"
            ));
            let id = r.run_id(&r.ok());
            let answer = c.post(&format!("/api/runs/{id}/cancel?api_key={KEY}"));
            seen.push((id, answer.status, answer.json()));
        }
        seen
    };
    let all: Vec<_> = thread::scope(|s| {
        let hs: Vec<_> = (0..4).map(|_| s.spawn(|| races(50))).collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let (mut cancelled, mut ended) = (0, 0);
    for (id, status, answer) in &all {
        let rec = final_record(&t, id);
        let state = rec["State"].as_str().unwrap_or_default();
        match status {
            200 | 202 => {
                cancelled += 1;
                assert_eq!(answer["Success"], json!("Run cancelled."), "{answer}");
                assert_eq!(state, "cancelled", "answered {status} {answer}; record {rec}");
            }
            409 => {
                ended += 1;
                assert_eq!(answer["Code"], json!("run_ended"), "{answer}");
                assert_eq!(answer["State"], json!(state), "answer {answer}; record {rec}");
                assert_ne!(state, "cancelled", "409 for a cancelled run: {rec}");
            }
            other => panic!("cancel of {id}: {other} {answer}"),
        }
    }
    assert_eq!(cancelled + ended, 200);
    eprintln!("200 races: {cancelled} cancelled, {ended} ended first");
}
