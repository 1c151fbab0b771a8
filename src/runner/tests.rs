//! The runner: the queue's bookkeeping without threads (hand-on order,
//! per-function limits, slots freed), then real runs: waiting in data, a
//! runner without a run log, panics inside runs, the run handle.

use super::*;
use crate::config::group::Policy;
use crate::state::test_dir::TestDir;
use std::sync::OnceLock;

fn ticket(program: u64, function: &str, concurrency: usize) -> Arc<Ticket> {
    Arc::new(Ticket {
        run: format!("{program}-{function}"),
        key: (Owner::Program(program), function.to_string()),
        concurrency,
        group: None,
        granted: AtomicBool::new(false),
        cancelled: AtomicBool::new(false),
        superseded_by: OnceLock::new(),
        wake: Condvar::new(),
    })
}

/// [`ticket`] in group `key` (limit `limit`, `policy`).
fn grouped(program: u64, function: &str, key: &str, limit: usize, policy: Policy) -> Arc<Ticket> {
    let t = ticket(program, function, usize::MAX);
    let mut t = Arc::try_unwrap(t).unwrap_or_else(|_| unreachable!());
    t.group = Some(GroupClaim {
        key: key.into(),
        limit,
        policy,
    });
    Arc::new(t)
}

fn granted(t: &Arc<Ticket>) -> bool {
    t.granted.load(Ordering::SeqCst)
}

/// Whether `g` hands the slot to the sync caller of ticket `t`.
fn to_caller(g: &Option<Granted>, t: &Arc<Ticket>) -> bool {
    matches!(g, Some(Granted::Sync(x)) if Arc::ptr_eq(x, t))
}

#[test]
fn a_freed_slot_goes_to_the_first_waiter_in_order() {
    let mut s = Slots {
        max: 1,
        ..Slots::default()
    };
    let a = (Owner::Program(1), "a".to_string());
    s.take(&a, "1-a", None);
    let (first, second) = (ticket(1, "b", 9), ticket(1, "c", 9));
    s.push_back(Waiter::Sync(Arc::clone(&first)));
    s.push_back(Waiter::Sync(Arc::clone(&second)));
    assert!(s.fill().is_empty() && !granted(&first), "no free slot yet");
    let (next, freed) = s.release(&a, "1-a", Kind::Sync);
    assert!(!freed, "the slot is handed on, not freed");
    // The caller comes back to be woken once the slots lock is released.
    assert!(to_caller(&next, &first), "handed to the first waiter");
    assert!(granted(&first) && !granted(&second));
    assert_eq!(s.used, 1);
    let (next, freed) = s.release(&(Owner::Program(1), "b".to_string()), "1-b", Kind::Sync);
    assert!(!freed && granted(&second) && to_caller(&next, &second));
    let (_, freed) = s.release(&(Owner::Program(1), "c".to_string()), "1-c", Kind::Sync);
    assert!(freed, "nobody waits: the slot is freed");
    assert_eq!((s.used, s.per_fn.len()), (0, 0));
}

#[test]
fn a_function_at_its_limit_does_not_hold_up_the_others() {
    let mut s = Slots {
        max: 2,
        ..Slots::default()
    };
    let a = (Owner::Program(1), "a".to_string());
    s.take(&a, "1-a", None);
    let (same, other) = (ticket(1, "a", 1), ticket(1, "b", 1));
    s.push_back(Waiter::Sync(Arc::clone(&same)));
    s.push_back(Waiter::Sync(Arc::clone(&other)));
    let filled = s.fill();
    assert_eq!(filled.len(), 1);
    assert!(to_caller(&filled.into_iter().next(), &other));
    assert!(!granted(&same), "function a runs at its concurrency of 1");
    assert!(
        granted(&other),
        "the free slot goes to the next runnable waiter"
    );
    let (_, freed) = s.release(&a, "1-a", Kind::Sync);
    assert!(!freed && granted(&same));
    assert_eq!(s.used, 2);
}

#[test]
fn a_group_key_is_one_limit_across_functions_and_programs() {
    let mut s = Slots {
        max: 4,
        ..Slots::default()
    };
    let g = |p, f| grouped(p, f, "site-main", 1, Policy::Queue);
    let (first, same_key, other_key) = (g(1, "deploy"), g(2, "publish"), ticket(1, "other", 9));
    s.push_back(Waiter::Sync(Arc::clone(&first)));
    s.push_back(Waiter::Sync(Arc::clone(&same_key)));
    s.push_back(Waiter::Sync(Arc::clone(&other_key)));
    assert_eq!(s.fill().len(), 2, "the key's first run and the other one");
    assert!(granted(&first) && !granted(&same_key) && granted(&other_key));
    assert_eq!(s.groups["site-main"], vec!["1-deploy".to_string()]);
    let (next, _) = s.release(&first.key, "1-deploy", Kind::Sync);
    assert!(to_caller(&next, &same_key), "the key's place goes on");
    assert_eq!(s.groups["site-main"], vec!["2-publish".to_string()]);
    let (_, freed) = s.release(&same_key.key, "2-publish", Kind::Sync);
    assert!(freed && s.groups.is_empty() && s.group_of.is_empty());
}

#[test]
fn make_room_supersedes_the_waiting_and_names_the_running_to_cancel() {
    let mut s = Slots {
        max: 4,
        ..Slots::default()
    };
    let running = grouped(1, "a", "k", 1, Policy::ReplacePending);
    s.take(&running.key, "1-a", running.group.as_ref());
    let waiting = grouped(1, "b", "k", 1, Policy::ReplacePending);
    s.push_back(Waiter::Sync(Arc::clone(&waiting)));
    let replace = grouped(1, "c", "k", 1, Policy::ReplacePending);
    let room = s.make_room(replace.group.as_ref(), "1-c");
    assert_eq!(room.superseded.len(), 1);
    assert!(room.cancel.is_none() && s.queue.is_empty());
    assert_eq!(waiting.superseded_by.get().map(String::as_str), Some("1-c"));
    let cancel = grouped(1, "d", "k", 1, Policy::CancelRunning);
    assert_eq!(
        s.make_room(cancel.group.as_ref(), "1-d").cancel.as_deref(),
        Some("1-a")
    );
    // `queue` and `skip` make no room; `skip` counts waiting runs too.
    let skip = grouped(1, "e", "k", 2, Policy::Skip);
    assert!(s
        .make_room(skip.group.as_ref(), "1-e")
        .superseded
        .is_empty());
    assert!(!s.skips(skip.group.as_ref()), "1 of 2 places used");
    s.queue
        .push_back(Waiter::Sync(grouped(1, "f", "k", 2, Policy::Queue)));
    assert!(s.skips(skip.group.as_ref()), "1 running and 1 waiting");
}

#[test]
fn a_stopping_queue_hands_nothing_on() {
    let mut s = Slots {
        max: 1,
        ..Slots::default()
    };
    let a = (Owner::Program(1), "a".to_string());
    s.take(&a, "1-a", None);
    let t = ticket(1, "a", 9);
    s.push_back(Waiter::Sync(Arc::clone(&t)));
    s.stopping = true;
    let (_, freed) = s.release(&a, "1-a", Kind::Sync);
    assert!(freed && !granted(&t));
}

/// The function name of a run that panics when it executes (a bug inside
/// it), for the tests below.
const PANICS: &str = "panics";

/// A bug inside a run, where a test asks for one.
pub(super) fn maybe_panic(job: &Job) {
    if job.function == PANICS {
        panic!("a bug inside a run (test)");
    }
}

/// A job of program 1, function `f`, running `script` in a shell.
fn job(server: &str, script: &str) -> Job {
    let config = format!("[server]\n{server}\n");
    let program = format!(
        "id = 1\nname = \"p\"\n[[functions]]\nname = \"f\"\nsteps = [{{ shell = {script:?} }}]\n\
         webhook = {{ active = true, outputs = [] }}\n"
    );
    let dir = std::env::temp_dir();
    let progs = vec![(std::path::PathBuf::from("programs/p.toml"), program)];
    let cfg = crate::config::load_str(&dir.join("config.toml"), &config, &progs)
        .unwrap_or_else(|e| panic!("{e:?}"));
    let cfg = Arc::new(cfg);
    let program = Arc::clone(cfg.program(1).expect("program 1"));
    Job {
        cfg,
        program,
        function: "f".into(),
        values: Vec::new(),
        vars: BTreeMap::new(),
        by: crate::state::record::Origin::Cli,
        id: None,
        tool: None,
        body_file: None,
        stdin_body: false,
        files: Vec::new(),
        callbacks: Vec::new(),
        occurrence: None,
        rerun_of: None,
        group: None,
    }
}

#[test]
fn without_a_run_log_queued_runs_still_run() {
    let r = Arc::new(Runner::new(None, Arc::new(Metrics::default())));
    let server = "max_concurrent_runs = 1";
    r.start_async(job(server, "sleep 0.2")).unwrap();
    r.start_async(job(server, "true")).unwrap();
    assert_eq!(r.queued(), 1);
    assert!(
        r.wait_idle(Duration::from_secs(20)),
        "queued {}",
        r.queued()
    );
    let d = lock(&r.drain);
    assert_eq!(d.cur + d.prev, 2, "both runs ended");
}

#[test]
fn a_sync_run_waits_then_says_why_in_data() {
    let r = Arc::new(Runner::new(None, Arc::new(Metrics::default())));
    let server = "max_concurrent_runs = 1\nqueue_timeout = \"200ms\"";
    r.start_async(job(server, "sleep 5")).unwrap();
    match r.run_sync(job(server, "true")) {
        Err(RunError::WaitedTooLong {
            waited,
            retry_after,
            ..
        }) => {
            assert_eq!(waited, Duration::from_millis(200));
            assert!(retry_after >= 1);
        }
        other => panic!("expected WaitedTooLong, got {other:?}"),
    }
    assert_eq!(r.queued(), 0, "the waiter left the queue");
    r.shutdown(Duration::ZERO);
    assert_eq!(r.in_flight(), 0);
}

/// [`job`], as one that panics inside.
fn panicking(server: &str) -> Job {
    Job {
        function: PANICS.into(),
        ..job(server, "true")
    }
}

#[test]
fn a_panic_inside_a_sync_run_hands_its_slot_to_the_next_waiter() {
    let r = Arc::new(Runner::new(None, Arc::new(Metrics::default())));
    let server = "max_concurrent_runs = 1\nqueue_timeout = \"20s\"";
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        r.run_sync(panicking(server))
    }));
    assert!(panicked.is_err(), "the run should have panicked");
    assert_eq!(r.in_flight(), 0, "the slot was not given back");
    let (_, outcome) = r.run_sync(job(server, "echo next")).unwrap();
    assert_eq!(outcome.result, vec![serde_json::json!("next")]);
}

#[test]
fn a_panic_inside_an_async_run_frees_its_slot_for_the_queued_run() {
    let r = Arc::new(Runner::new(None, Arc::new(Metrics::default())));
    let server = "max_concurrent_runs = 1";
    r.start_async(panicking(server)).unwrap();
    r.start_async(job(server, "true")).unwrap();
    assert!(
        r.wait_idle(Duration::from_secs(20)),
        "in flight {}, queued {}",
        r.in_flight(),
        r.queued()
    );
    let (_, outcome) = r.run_sync(job(server, "echo free")).unwrap();
    assert_eq!(outcome.result, vec![serde_json::json!("free")]);
}

/// [`Queued`] run `run` of [`job`]'s function.
fn queued(run: &str) -> Queued {
    let j = job("", "true");
    Queued {
        run: run.into(),
        key: j.slot_key(),
        concurrency: j.concurrency(),
        group: None,
        cfg: j.cfg,
        program: j.program,
        taken: None,
    }
}

#[test]
fn async_runs_stop_at_their_limit_and_a_sync_caller_behind_them_gets_the_free_slot() {
    let mut s = Slots {
        max: 3,
        async_max: queue::AsyncMax(1),
        ..Slots::default()
    };
    let running = queued("1-running");
    s.take_async(&running.key, &running.run, None);
    s.push_back(Waiter::Async(queued("2-waits")));
    let caller = ticket(2, "g", 9);
    s.push_back(Waiter::Sync(Arc::clone(&caller)));
    let start = s.fill();
    assert_eq!(start.len(), 1, "only the sync caller starts");
    assert!(granted(&caller));
    assert_eq!((s.used, s.async_used, s.queue.len()), (2, 1, 1));
    // The async run's end hands its slot to the async run waiting.
    let (next, freed) = s.release(&running.key, &running.run, Kind::Async);
    assert!(matches!(next, Some(Granted::Async(q)) if q.run == "2-waits"));
    assert!(!freed);
    assert_eq!((s.used, s.async_used), (2, 1));
    // The sync call's end frees its slot: no async run may take it.
    s.push_back(Waiter::Async(queued("3-waits")));
    let (next, freed) = s.release(&caller.key, &caller.run, Kind::Sync);
    assert!(next.is_none() && freed);
    assert_eq!((s.used, s.async_used, s.queue.len()), (1, 1, 1));
}

#[test]
fn the_handle_follows_output_and_aborts_the_run() {
    let r = Arc::new(Runner::new(None, Arc::new(Metrics::default())));
    let script = "echo first; echo oops >&2; sleep 30; echo never";
    let id = r
        .start_async(job("max_concurrent_runs = 2", script))
        .unwrap();
    until_live(&r, &id);
    let h = r.handle(&id).expect("live run");
    // Two writes, one per stream; each wakes a waiting follower.
    let until = Instant::now() + Duration::from_secs(20);
    while h.writes() < 2 && Instant::now() < until {
        h.wait_output(h.writes(), Duration::from_secs(1));
    }
    assert!(h.writes() >= 2, "live output of the running step");
    // `sleep 30` outlives the bound below unless the abort stops it.
    h.abort();
    assert!(
        r.wait_idle(Duration::from_secs(20)),
        "the aborted run did not end"
    );
    assert!(r.handle(&id).is_none(), "a finished run has no handle");
    assert!(
        !h.wait_output(h.writes(), Duration::from_secs(20)),
        "a finished run's handle is closed"
    );
}

/// Wait (bounded) until run `id` executes.
fn until_live(r: &Runner, id: &str) {
    let until = Instant::now() + Duration::from_secs(20);
    while r.handle(id).is_none() && Instant::now() < until {
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn cancel_takes_waiting_runs_off_the_queue_and_stops_a_running_one() {
    let r = Arc::new(Runner::new(None, Arc::new(Metrics::default())));
    let server = "max_concurrent_runs = 1\nkill_grace = \"1s\"\nqueue_timeout = \"60s\"";
    let running = r.start_async(job(server, "sleep 30")).unwrap();
    let queued = r.start_async(job(server, "echo never")).unwrap();
    until_live(&r, &running);
    // A sync caller waits behind the queued async run.
    let r2 = Arc::clone(&r);
    let waiter = thread::spawn(move || r2.run_sync(job(server, "echo never either")));
    let until = Instant::now() + Duration::from_secs(20);
    while r.queued() < 2 && Instant::now() < until {
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(r.queued(), 2);
    let sync_id = match &lock(&r.slots).queue[1] {
        Waiter::Sync(t) => t.run.clone(),
        Waiter::Async(_) => panic!("the sync caller should wait second"),
    };
    assert_eq!(r.cancel(&queued), Cancel::Dequeued);
    assert_eq!(r.cancel(&sync_id), Cancel::Dequeued);
    assert_eq!(r.queued(), 0);
    assert_eq!(
        r.in_flight(),
        1,
        "a queued cancel frees no slot it did not hold"
    );
    match waiter.join().unwrap() {
        Err(RunError::Cancelled { run }) => assert_eq!(run, sync_id),
        other => panic!("expected Cancelled, got {other:?}"),
    }
    assert_eq!(r.cancel(&running), Cancel::Stopping);
    assert!(
        r.wait_idle(Duration::from_secs(20)),
        "the cancelled run did not end"
    );
    assert_eq!(r.cancel(&running), Cancel::NotActive);
    assert_eq!(r.in_flight(), 0);

    // A sync run's outcome says it was cancelled.
    let run = r.begin_sync(job(server, "sleep 30")).unwrap();
    let id = run.id().to_string();
    let r2 = Arc::clone(&r);
    let canceller = thread::spawn(move || {
        until_live(&r2, &id);
        r2.cancel(&id)
    });
    let outcome = run.execute();
    assert_eq!(canceller.join().unwrap(), Cancel::Stopping);
    assert_eq!(outcome.error, Some(StepError::Cancelled { step: 0 }));
}

#[test]
fn held_output_goes_to_the_end_record_unless_a_shutdown_stopped_the_run() {
    let d = TestDir::new("kept-inline");
    let outcome = |error| Outcome {
        result: Vec::new(),
        steps: Vec::new(),
        error,
    };
    let ended = OutputFile::new(&d.join("ended"), 100);
    ended.push(Stream::Stdout, b"done\n");
    assert!(kept_inline(&ended, &outcome(None)).is_some());
    assert!(!d.join("ended").exists(), "no file");
    // Stopped by a shutdown: it may be queued again, its output in its
    // file as before.
    let stopped = OutputFile::new(&d.join("stopped"), 100);
    stopped.push(Stream::Stdout, b"begun\n");
    let aborted = outcome(Some(StepError::Aborted { step: 0 }));
    assert!(kept_inline(&stopped, &aborted).is_none());
    assert_eq!(
        crate::state::output::read_whole(&d.join("stopped")).stdout,
        b"begun\n"
    );
}
