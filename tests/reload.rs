//! Hot reload (docs/hot-reload.md) against the running binary: every way an operator or
//! a tool edits the files (in place, rename over, delete and create, new and
//! removed files, config edits, a Kubernetes ConfigMap symlink swap), editor
//! files that must not count, invalid edits that must change nothing, reloads
//! that look only at the files the watcher named, SIGHUP, runs in progress,
//! and a reload of 10,000 program files under traffic.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{symlink, MetadataExt};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::*;

/// Bound for a change to become live: "within a fraction of a second" on
/// an idle machine; a bound for a reload that never comes, not a measure
/// (a loaded 2-core CI machine can take seconds).
const LIVE: Duration = Duration::from_secs(30);

/// Program `id` called `p<id>` whose one triggered function prints `text`.
fn prog(id: u64, text: &str) -> String {
    format!(
        "id = {id}\nname = \"p{id}\"\n\n[[functions]]\nname = \"f\"\ncommand = [\"printf\", \"%s\", \"{text}\"]\n[functions.webhook]\n"
    )
}

/// What program `id` answers now: `Ok(first Result element)` on 200,
/// `Err(Code)` otherwise.
fn served(t: &Trigd, id: u64) -> Result<String, String> {
    let r = t.post(&format!("/api?api_key={KEY}&program_id={id}"));
    let v = r.json();
    if r.status == 200 {
        Ok(v["Result"][0].as_str().unwrap_or_default().to_string())
    } else {
        Err(v["Code"].as_str().unwrap_or_default().to_string())
    }
}

/// Wait until program `id` answers `want`.
fn wait_served(t: &Trigd, id: u64, want: Result<&str, &str>) {
    let want = want.map(str::to_string).map_err(str::to_string);
    let mut last = Ok(String::new());
    if !wait_until(LIVE, || {
        last = served(t, id);
        last == want
    }) {
        t.fail(format!(
            "program {id} still answers {last:?} after {LIVE:?}, want {want:?}"
        ))
    }
}

/// `GET /healthz` as JSON.
fn health(t: &Trigd) -> Value {
    t.get("/healthz").ok()
}

fn generation(t: &Trigd) -> u64 {
    health(t)["Generation"]
        .as_u64()
        .unwrap_or_else(|| t.fail("/healthz has no integer Generation"))
}

/// Wait until `/healthz` shows no reload error (a transient one can appear
/// while an editor is half-way through a save).
fn wait_no_reload_error(t: &Trigd) {
    let mut last = Value::Null;
    if !wait_until(LIVE, || {
        last = health(t);
        last["LastReloadError"].is_null()
    }) {
        t.fail(format!("LastReloadError stays set: {last}"))
    }
}

/// Overwrite `rel` in place: same inode, truncated and rewritten.
fn write_in_place(dir: &TestDir, rel: &str, text: &str) {
    let mut f = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(dir.path(rel))
        .unwrap_or_else(|e| panic!("cannot open {rel}: {e}"));
    f.write_all(text.as_bytes()).expect("write");
}

fn inode(dir: &TestDir, rel: &str) -> u64 {
    fs::metadata(dir.path(rel)).expect("stat").ino()
}

/// `kill -HUP <server>`.
fn sighup(t: &Trigd) {
    let st = Command::new("kill")
        .args(["-HUP", &t.pid().to_string()])
        .status()
        .expect("run kill");
    assert!(st.success(), "kill -HUP failed");
}

fn log_has(t: &Trigd, needle: &str) -> bool {
    fs::read_to_string(&t.stderr_log).is_ok_and(|s| s.contains(needle))
}

/// Make `name` in `dir` a FIFO: a server reading it waits there until a
/// writer comes.
fn make_fifo(dir: &TestDir, name: &str) {
    let fifo = std::ffi::CString::new(dir.path_str(name)).expect("path");
    // SAFETY: a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// An edit made while the server starts, after it read the file and
/// before it answers, is served: the edit must not fall between the read
/// and the watch. The hooks file, read after the program files, is a FIFO,
/// so the server waits there, with `a.toml` read, until the test has
/// edited `a.toml` (and put a regular hooks file in the FIFO's place for
/// the reloads that follow).
#[test]
fn an_edit_while_the_server_starts_is_served() {
    let dir = setup(
        "reload_edit_at_start",
        "hooks_files = [\"hooks.json\"]",
        &[("a.toml", &prog(1, "one"))],
    );
    let hooks = r#"[{"id": "h", "execute-command": "/bin/true"}]"#;
    make_fifo(&dir, "hooks.json");
    let t = thread::scope(|scope| {
        let starting = scope.spawn(|| Trigd::start(&dir));
        // Opening the FIFO for writing waits until the server opens it for
        // reading: the program files are read by then.
        let mut pipe = OpenOptions::new()
            .write(true)
            .open(dir.path("hooks.json"))
            .expect("open the FIFO");
        write_in_place(&dir, "programs/a.toml", &prog(1, "two"));
        dir.write("hooks.tmp", hooks);
        fs::rename(dir.path("hooks.tmp"), dir.path("hooks.json")).expect("rename");
        pipe.write_all(hooks.as_bytes()).expect("write the FIFO");
        drop(pipe);
        starting.join().expect("the server starts")
    });
    wait_served(&t, 1, Ok("two"));
    wait_no_reload_error(&t);
}

/// A request sent while the server reads its program files waits for the
/// load and is answered from the loaded config: the port is bound before
/// the files are read (a client is not refused), and nothing is answered
/// before they are loaded. The server waits at the hooks file, a FIFO read
/// after the program files, until the request has been sent.
#[test]
fn a_request_during_the_first_load_waits_for_it() {
    let dir = setup(
        "start_request_waits",
        "hooks_files = [\"hooks.json\"]",
        &[("a.toml", &prog(1, "one"))],
    );
    make_fifo(&dir, "hooks.json");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let log = fs::File::create(dir.path("stderr.log")).expect("log");
    let child = Command::new(BIN)
        .args(["serve", "--config", &dir.path_str("config.toml")])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn trigd");
    let _server = KillOnDrop(child);
    let mut pipe = OpenOptions::new()
        .write(true)
        .open(dir.path("hooks.json"))
        .expect("open the FIFO");
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port))
        .expect("the port is bound while the program files are read");
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("send");
    let hooks = r#"[{"id": "h", "execute-command": "/bin/true"}]"#;
    dir.write("hooks.tmp", hooks);
    fs::rename(dir.path("hooks.tmp"), dir.path("hooks.json")).expect("rename");
    pipe.write_all(hooks.as_bytes()).expect("write the FIFO");
    drop(pipe);
    let reply = read_reply(&mut std::io::BufReader::new(conn)).expect("an answer");
    let v = reply.ok();
    assert_eq!(v["Programs"], json!(1), "{v}");
    assert_eq!(v["Generation"], json!(1), "{v}");
}

/// A child process killed (and reaped) when dropped.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn in_place_write_is_served() {
    let (dir, t) = serve("reload_in_place", "", &[("a.toml", &prog(1, "one"))]);
    wait_served(&t, 1, Ok("one"));
    let ino = inode(&dir, "programs/a.toml");
    write_in_place(&dir, "programs/a.toml", &prog(1, "two"));
    assert_eq!(
        inode(&dir, "programs/a.toml"),
        ino,
        "the write kept the inode"
    );
    wait_served(&t, 1, Ok("two"));
    wait_no_reload_error(&t);
    // A second in-place edit: the watch survives the first reload.
    write_in_place(&dir, "programs/a.toml", &prog(1, "three"));
    wait_served(&t, 1, Ok("three"));
}

#[test]
fn write_temp_then_rename_over_is_served() {
    let (dir, t) = serve("reload_rename", "", &[("a.toml", &prog(1, "one"))]);
    wait_served(&t, 1, Ok("one"));
    for (round, text) in ["two", "three"].into_iter().enumerate() {
        let ino = inode(&dir, "programs/a.toml");
        // sed -i writes `sedXXXXXX` next to the file; vim writes the new
        // file after moving the old one aside. Both end in a rename.
        let tmp = format!("programs/sed{round}Xy7Q");
        dir.write(&tmp, &prog(1, text));
        fs::rename(dir.path(&tmp), dir.path("programs/a.toml")).expect("rename");
        assert_ne!(
            inode(&dir, "programs/a.toml"),
            ino,
            "rename replaced the inode"
        );
        wait_served(&t, 1, Ok(text));
    }
    wait_no_reload_error(&t);
}

#[test]
fn delete_then_create_is_served() {
    let (dir, t) = serve("reload_git", "", &[("a.toml", &prog(1, "one"))]);
    wait_served(&t, 1, Ok("one"));
    for text in ["two", "three"] {
        fs::remove_file(dir.path("programs/a.toml")).expect("remove");
        dir.write("programs/a.toml", &prog(1, text));
        wait_served(&t, 1, Ok(text));
    }
    wait_no_reload_error(&t);
}

#[test]
fn new_program_file_is_served() {
    let (dir, t) = serve("reload_new", "", &[("a.toml", &prog(1, "one"))]);
    wait_served(&t, 2, Err("program_not_found"));
    let g = generation(&t);
    dir.write("programs/b.toml", &prog(2, "bee"));
    wait_served(&t, 2, Ok("bee"));
    let h = health(&t);
    assert_eq!(h["Programs"], json!(2), "{h}");
    assert_eq!(h["Generation"], json!(g + 1), "one file, one reload: {h}");
    assert_eq!(served(&t, 1), Ok("one".to_string()));
}

/// Append a line to `file` every 2 ms until `stop` (or `n` lines): a
/// comment, or an empty line in a JSON hooks file. Each is a modify
/// event, which keeps the file changing and defers its reload (3 ms of
/// quiet, or at most 100 ms).
fn keep_writing(mut file: fs::File, n: usize, stop: Arc<AtomicBool>) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        for i in 0..n {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            file.write_all(format!("# {i}\n").as_bytes())
                .expect("append");
            thread::sleep(Duration::from_millis(2));
        }
    })
}

/// [`keep_writing`] for a JSON file: empty lines.
fn keep_writing_json(mut file: fs::File, n: usize) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        for _ in 0..n {
            file.write_all(b"\n").expect("append");
            thread::sleep(Duration::from_millis(2));
        }
    })
}

/// A call that arrives while a change the watcher saw is still to be
/// reloaded waits for that reload: a program file still being written
/// (appended to every 2 ms) is called in the middle of the writing and
/// answers with the program once the reload comes, not
/// `404 program_not_found` from the configuration before the write (what
/// it answered before the wait existed: checked by taking it out).
#[test]
fn a_call_while_its_file_is_written_waits_for_the_reload() {
    let (dir, t) = serve("reload_wait", "", &[("a.toml", &prog(1, "one"))]);
    wait_served(&t, 1, Ok("one"));
    let mut file = fs::File::create(dir.path("programs/b.toml")).expect("create");
    file.write_all(prog(2, "bee").as_bytes()).expect("write");
    let writer = keep_writing(file, 25, Arc::default());
    // Long enough for the watcher to note the first events, well before
    // the writing stops (about 50 ms on).
    thread::sleep(Duration::from_millis(15));
    let answer = served(&t, 2);
    writer.join().expect("writer");
    assert_eq!(answer, Ok("bee".to_string()), "{}", t.stderr_tail());
}

/// The same for a hook added to a hooks file (`hooks_files`) while it is
/// written: not webhook's `404 Hook not found.`
#[test]
fn a_hook_called_while_its_file_is_written_waits_for_the_reload() {
    let dir = setup("reload_wait_hook", "hooks_files = [\"hooks.json\"]", &[]);
    dir.write(
        "hooks.json",
        r#"[{"id": "h", "execute-command": "/bin/true"}]"#,
    );
    let t = Trigd::start(&dir);
    assert_eq!(t.post("/hooks/h").status, 200);
    let mut file = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(dir.path("hooks.json"))
        .expect("open");
    let hooks = r#"[{"id": "h", "execute-command": "/bin/true"},
                    {"id": "g", "execute-command": "/bin/true"}]"#;
    file.write_all(hooks.as_bytes()).expect("write");
    let writer = keep_writing_json(file, 25);
    thread::sleep(Duration::from_millis(15));
    let answer = t.post("/hooks/g");
    writer.join().expect("writer");
    assert_eq!(answer.status, 200, "{answer:?} {}", t.stderr_tail());
}

/// The wait is for the changes seen before the call, not for the files to
/// stop changing: a file appended to for up to 30 s does not hold a call
/// that long (a burst reloads at least every 100 ms, and a call waits at
/// most 250 ms).
#[test]
fn a_file_that_keeps_changing_does_not_hold_calls() {
    let (dir, t) = serve("reload_busy", "", &[("a.toml", &prog(1, "one"))]);
    wait_served(&t, 1, Ok("one"));
    let file = fs::File::create(dir.path("programs/b.toml")).expect("create");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = keep_writing(file, 15_000, Arc::clone(&stop));
    thread::sleep(Duration::from_millis(20));
    for _ in 0..5 {
        assert_eq!(served(&t, 1), Ok("one".to_string()));
    }
    let stopped_first = writer.is_finished();
    stop.store(true, Ordering::SeqCst);
    writer.join().expect("writer");
    assert!(
        !stopped_first,
        "the calls returned only after 30 s of writing: they waited for the file to stop changing"
    );
}

#[test]
fn removed_program_file_is_no_longer_served() {
    let (dir, t) = serve(
        "reload_removed",
        "",
        &[("a.toml", &prog(1, "one")), ("b.toml", &prog(2, "bee"))],
    );
    wait_served(&t, 2, Ok("bee"));
    fs::remove_file(dir.path("programs/b.toml")).expect("remove");
    wait_served(&t, 2, Err("program_not_found"));
    assert_eq!(served(&t, 1), Ok("one".to_string()));
    assert_eq!(health(&t)["Programs"], json!(1));
}

#[test]
fn config_edit_adds_an_api_key() {
    let (dir, t) = serve("reload_config", "", &[("a.toml", &prog(1, "one"))]);
    let new_key = "trigd-test-reload-new-key-5a5a";
    let url = format!("/api?api_key={new_key}&program_id=1");
    t.post(&url).err(401, "invalid_api_key");
    let line = format!(
        "\n[[api_keys]]\nname = \"late\"\nsha256 = \"{}\"\n",
        sha256_hex(new_key)
    );
    // Rewrite the file in place, as an editor without backup does.
    let text = format!("{}{line}", dir.read("config.toml"));
    write_in_place(&dir, "config.toml", &text);
    let mut last = None;
    if !wait_until(LIVE, || {
        let r = t.post(&url);
        let ok = r.status == 200;
        last = Some(r);
        ok
    }) {
        last.expect("polled")
            .fail("the key added to config.toml never worked")
    }
    wait_no_reload_error(&t);
}

// ---------------------------------------------------------------------------
// Kubernetes ConfigMap: everything reached through a `..data` symlink that
// is swapped atomically.

/// `..<name>/config.toml` (with `programs_dir`) and its programs.
fn configmap_version(dir: &TestDir, name: &str, programs_dir: &str, programs: &[(u64, &str)]) {
    let server = format!("programs_dir = \"{programs_dir}\"");
    dir.write(&format!("{name}/config.toml"), &config(&server));
    dir.mkdir(&format!("{name}/programs"));
    for (id, text) in programs {
        dir.write(&format!("{name}/programs/p{id}.toml"), &prog(*id, text));
    }
}

/// Point `..data` at `target` atomically: a temp symlink renamed over it,
/// then the old version removed, as the kubelet does.
fn swap_data(dir: &TestDir, target: &str, old: &str) {
    let tmp = dir.path("..data_tmp");
    symlink(target, &tmp).expect("symlink");
    fs::rename(&tmp, dir.path("..data")).expect("rename over ..data");
    fs::remove_dir_all(dir.path(old)).expect("remove the old version");
}

/// A ConfigMap mount: the config through `..data`, programs through
/// `programs_dir`; with `programs_link`, through a `programs` symlink.
fn configmap_swap(name: &str, programs_link: bool) {
    let dir = TestDir::new(name);
    let programs_dir = if programs_link {
        "programs"
    } else {
        "..data/programs"
    };
    configmap_version(&dir, "..2026_a", programs_dir, &[(1, "a1")]);
    symlink("..2026_a", dir.path("..data")).expect("symlink");
    symlink("..data/config.toml", dir.path("config.toml")).expect("symlink");
    if programs_link {
        symlink("..data/programs", dir.path("programs")).expect("symlink");
    }
    let t = Trigd::start(&dir);
    wait_served(&t, 1, Ok("a1"));

    configmap_version(&dir, "..2026_b", programs_dir, &[(1, "b1"), (2, "b2")]);
    swap_data(&dir, "..2026_b", "..2026_a");
    wait_served(&t, 2, Ok("b2"));
    assert_eq!(served(&t, 1), Ok("b1".to_string()));

    // A second swap: the watches were set up again after the first one.
    configmap_version(&dir, "..2026_c", programs_dir, &[(3, "c3")]);
    swap_data(&dir, "..2026_c", "..2026_b");
    wait_served(&t, 3, Ok("c3"));
    wait_served(&t, 1, Err("program_not_found"));
    wait_served(&t, 2, Err("program_not_found"));

    // The programs directory watched now is the new target's.
    write_in_place(&dir, "..2026_c/programs/p3.toml", &prog(3, "c3-edited"));
    wait_served(&t, 3, Ok("c3-edited"));
    wait_no_reload_error(&t);
}

#[test]
fn configmap_symlink_swap_with_programs_dir_through_data() {
    configmap_swap("reload_configmap_dir", false);
}

#[test]
fn configmap_symlink_swap_with_programs_symlink() {
    configmap_swap("reload_configmap_link", true);
}

// ---------------------------------------------------------------------------
// Files that must not count, and edits that must change nothing.

#[test]
fn editor_swap_and_backup_files_do_not_reload() {
    let (dir, t) = serve("reload_swapfiles", "", &[("a.toml", &prog(1, "one"))]);
    wait_served(&t, 1, Ok("one"));
    let g = generation(&t);
    // Valid programs with new ids: if any of these files were read, its
    // program would be served (or the duplicate id 1 would be an error).
    dir.write("programs/.a.toml.swp", &prog(7, "swap"));
    dir.write("programs/a.toml~", &prog(8, "backup"));
    dir.write("programs/a.toml.tmp", &prog(9, "tmp"));
    dir.write("programs/.b.toml.swp", &prog(1, "swap-dup"));
    // Now a real change; once it is live, any reload the editor files
    // caused has happened too.
    write_in_place(&dir, "programs/a.toml", &prog(1, "two"));
    wait_served(&t, 1, Ok("two"));
    let h = health(&t);
    assert_eq!(h["Generation"], json!(g + 1), "exactly one reload: {h}");
    assert_eq!(h["Programs"], json!(1), "{h}");
    assert!(h["LastReloadError"].is_null(), "{h}");
    for id in [7, 8, 9] {
        assert_eq!(served(&t, id), Err("program_not_found".to_string()));
    }
    // Editing the editor files again changes nothing either.
    write_in_place(&dir, "programs/a.toml~", &prog(8, "backup2"));
    write_in_place(&dir, "programs/a.toml", &prog(1, "three"));
    wait_served(&t, 1, Ok("three"));
    assert_eq!(generation(&t), g + 2);
}

/// Apply `bad` (file, content), check that nothing served changes and that
/// `/healthz` names the problem (every string of `want`), then fix it and
/// check the recovery.
fn invalid_edit_changes_nothing(name: &str, bad: (&str, &str), want: &[&str]) {
    let (dir, t) = serve(name, "", &[("a.toml", &prog(1, "one"))]);
    wait_served(&t, 1, Ok("one"));
    let g = generation(&t);
    dir.write(bad.0, bad.1);
    // Wait for the error about the final content (a save can pass through
    // an empty file first).
    let mut last = Value::Null;
    if !wait_until(LIVE, || {
        last = health(&t);
        let err = last["LastReloadError"].as_str().unwrap_or_default();
        want.iter().all(|w| err.contains(w))
    }) {
        t.fail(format!(
            "LastReloadError does not name all of {want:?} after an invalid edit: {last}"
        ))
    }
    assert_eq!(last["Generation"], json!(g), "generation unchanged: {last}");
    assert_eq!(last["Programs"], json!(1), "{last}");
    assert_eq!(
        served(&t, 1),
        Ok("one".to_string()),
        "the old program serves"
    );
    // Logged before /healthz shows it, but a line another thread's log
    // write holds up may come a moment later.
    t.wait_for(LIVE, "the error in the log", || {
        log_has(&t, "reload refused")
    });
    // Fix it: live without a restart, error cleared.
    fs::remove_file(dir.path("programs/bad.toml")).ok();
    dir.write("config.toml", &config(""));
    dir.write("programs/a.toml", &prog(1, "fixed"));
    wait_served(&t, 1, Ok("fixed"));
    wait_no_reload_error(&t);
    assert_eq!(generation(&t), g + 1);
}

#[test]
fn toml_syntax_error_changes_nothing() {
    let bad = "id = 1\nname = \"p1\"\n\n[[functions]\nname = \"f\"\n";
    invalid_edit_changes_nothing(
        "reload_bad_syntax",
        ("programs/a.toml", bad),
        &["programs/a.toml:4:", "functions"],
    );
}

#[test]
fn unknown_field_changes_nothing() {
    let bad = prog(1, "nope").replace("command", "comand");
    invalid_edit_changes_nothing(
        "reload_bad_field",
        ("programs/a.toml", &bad),
        &[
            "programs/a.toml:6:1",
            "functions[0].comand",
            "unknown field",
        ],
    );
}

#[test]
fn duplicate_program_id_changes_nothing() {
    invalid_edit_changes_nothing(
        "reload_bad_dup",
        ("programs/bad.toml", &prog(1, "dup").replace("p1", "dup")),
        &[
            "programs/bad.toml:1:6",
            "id",
            "program id 1 is used by both",
        ],
    );
}

#[test]
fn dangling_reference_changes_nothing() {
    let tool = "\n[[tools]]\nname = \"t\"\nworkspace = \"ops\"\n[tools.environments.prod]\n\
                [[tools.triggers]]\nkind = \"endpoint\"\nname = \"go\"\nprogram = 9\nfunction = \"f\"\n";
    let text = format!("{}{tool}", config(""));
    let line = text.lines().position(|l| l == "program = 9").expect("line") + 1;
    let at = format!("config.toml:{line}:");
    invalid_edit_changes_nothing(
        "reload_bad_ref",
        ("config.toml", &text),
        &[&at, "tools[0].triggers[0].program", "program 9"],
    );
}

#[test]
fn an_emptied_config_file_is_not_swapped_in() {
    // What a writer that truncates and then writes leaves in between: as a
    // config it is valid, with no keys, users or tools.
    let (dir, t) = serve("reload_empty", "", &[("a.toml", &prog(1, "one"))]);
    wait_served(&t, 1, Ok("one"));
    let g = generation(&t);
    dir.write("config.toml", "");
    let mut last = Value::Null;
    let refused = wait_until(LIVE, || {
        last = health(&t);
        let err = last["LastReloadError"].as_str().unwrap_or_default();
        err.contains("config.toml: the file is empty")
    });
    t.check(
        refused,
        format!("no reload error for an empty config.toml: {last}"),
    );
    assert_eq!(last["Generation"], json!(g), "{last}");
    assert_eq!(
        served(&t, 1),
        Ok("one".to_string()),
        "the API key still works"
    );
    // The same text again: nothing changed, the error goes.
    dir.write("config.toml", &config(""));
    wait_no_reload_error(&t);
    assert_eq!(generation(&t), g);
}

// ---------------------------------------------------------------------------
// Reloads that look only at the files the watcher named.

/// Wait until `rel` changed longer ago than trigd's window for files
/// written while read (50 ms): a load then trusts its times.
fn wait_settled(dir: &TestDir, rel: &str) {
    let ctime = |m: &fs::Metadata| {
        std::time::UNIX_EPOCH
            + Duration::new(m.ctime() as u64, m.ctime_nsec() as u32)
            + Duration::from_millis(100)
    };
    let meta = fs::metadata(dir.path(rel)).expect("stat");
    assert!(
        wait_until(LIVE, || std::time::SystemTime::now() > ctime(&meta)),
        "the clock does not move"
    );
}

#[test]
fn a_reload_looks_only_at_the_files_the_watcher_named() {
    let dir = setup("reload_partial", "", &[("a.toml", &prog(1, "one"))]);
    // b.toml is a second name of a file outside the watched directories:
    // an edit through that other name makes no event in programs/.
    dir.write("elsewhere/b.toml", &prog(2, "two"));
    fs::hard_link(dir.path("elsewhere/b.toml"), dir.path("programs/b.toml")).expect("link");
    wait_settled(&dir, "programs/b.toml");
    let t = Trigd::start(&dir);
    wait_served(&t, 2, Ok("two"));

    // A new program, written twice in a row: the last text is served.
    dir.write("programs/c.toml", &prog(3, "c1"));
    write_in_place(&dir, "programs/c.toml", &prog(3, "c2"));
    wait_served(&t, 3, Ok("c2"));
    wait_no_reload_error(&t);

    // b edited where no event reaches trigd, then a deleted: the reload
    // looks at a only, so b keeps the program it had.
    write_in_place(&dir, "elsewhere/b.toml", &prog(2, "changed"));
    fs::remove_file(dir.path("programs/a.toml")).expect("remove");
    wait_served(&t, 1, Err("program_not_found"));
    assert_eq!(served(&t, 2), Ok("two".to_string()), "b was not looked at");
    assert_eq!(served(&t, 3), Ok("c2".to_string()));
    // The log line follows the swap: it may come a moment after the
    // answer.
    t.wait_for(LIVE, "the log to name what a reload looked at", || {
        log_has(&t, "looked at the 1 program file the watcher named")
    });

    // SIGHUP looks at every file.
    sighup(&t);
    wait_served(&t, 2, Ok("changed"));
    t.wait_for(LIVE, "the log to say every file was looked at", || {
        log_has(&t, "looked at every program file")
    });
    assert_eq!(health(&t)["Programs"], json!(2));
}

#[test]
fn renames_into_and_out_of_the_programs_dir_are_served() {
    let (dir, t) = serve("reload_rename_in_out", "", &[("a.toml", &prog(1, "one"))]);
    wait_served(&t, 1, Ok("one"));
    dir.write("outside/b.toml", &prog(2, "two"));
    fs::rename(dir.path("outside/b.toml"), dir.path("programs/b.toml")).expect("rename in");
    wait_served(&t, 2, Ok("two"));
    fs::rename(dir.path("programs/a.toml"), dir.path("outside/a.toml")).expect("rename out");
    wait_served(&t, 1, Err("program_not_found"));
    // Renamed to a name that is not a program file's (a backup), and back.
    fs::rename(dir.path("programs/b.toml"), dir.path("programs/b.toml~")).expect("rename");
    wait_served(&t, 2, Err("program_not_found"));
    fs::rename(dir.path("programs/b.toml~"), dir.path("programs/b.toml")).expect("rename");
    wait_served(&t, 2, Ok("two"));
    wait_no_reload_error(&t);
    assert_eq!(health(&t)["Programs"], json!(1));
}

#[test]
fn a_programs_dir_replaced_by_another_is_listed_again() {
    let (dir, t) = serve("reload_dir_replaced", "", &[("a.toml", &prog(1, "one"))]);
    wait_served(&t, 1, Ok("one"));
    dir.write("next/b.toml", &prog(2, "two"));
    fs::rename(dir.path("programs"), dir.path("previous")).expect("rename away");
    fs::rename(dir.path("next"), dir.path("programs")).expect("rename in");
    wait_served(&t, 2, Ok("two"));
    wait_served(&t, 1, Err("program_not_found"));
    // The new directory is watched: a file added to it is served.
    dir.write("programs/c.toml", &prog(3, "three"));
    wait_served(&t, 3, Ok("three"));
    wait_no_reload_error(&t);
}

// ---------------------------------------------------------------------------
// SIGHUP, runs in progress, scale.

#[test]
fn sighup_reloads_what_the_watcher_cannot_see() {
    // The program file is a symlink to a file in a directory trigd does not
    // watch: editing the target makes no event, so only SIGHUP reloads it.
    let dir = setup("reload_sighup", "", &[]);
    dir.write("elsewhere/a.toml", &prog(1, "one"));
    symlink(dir.path("elsewhere/a.toml"), dir.path("programs/a.toml")).expect("symlink");
    let t = Trigd::start(&dir);
    wait_served(&t, 1, Ok("one"));
    let g = generation(&t);

    // Nothing changed: the reload still happens and says so.
    sighup(&t);
    t.wait_for(LIVE, "a SIGHUP reload of an unchanged config", || {
        log_has(&t, "SIGHUP") && log_has(&t, "configuration unchanged")
    });
    assert_eq!(generation(&t), g, "unchanged config, same generation");

    write_in_place(&dir, "elsewhere/a.toml", &prog(1, "two"));
    sighup(&t);
    wait_served(&t, 1, Ok("two"));
    let h = health(&t);
    assert_eq!(h["Generation"], json!(g + 1), "{h}");
    assert_eq!(h["Status"], json!("ok"), "{h}");
}

#[test]
fn run_in_progress_keeps_its_definition() {
    let old = r#"
id = 1
name = "slow"

[[functions]]
name = "f"
workdir = "../work"
timeout = "20s"
steps = [
  { shell = 'touch started; while [ ! -e release ] && [ -e "$PWD" ]; do sleep 0.02; done; echo old-1' },
  { shell = 'echo old-2' },
]
[functions.webhook]
"#;
    let new = old
        .replace(
            "touch started; while [ ! -e release ] && [ -e \"$PWD\" ]; do sleep 0.02; done; echo old-1",
            "echo new-1",
        )
        .replace("old-2", "new-2");
    let (dir, t) = serve("reload_in_progress", "", &[("slow.toml", old)]);
    let client = t.client();
    let run = thread::spawn(move || client.post(&format!("/api?api_key={KEY}&program_id=1")));
    t.wait_for(LIVE, "the run to start", || dir.exists("work/started"));
    let g = generation(&t);
    dir.write("programs/slow.toml", &new);
    t.wait_for(LIVE, "the reload", || generation(&t) == g + 1);
    // The new definition serves while the old run still waits.
    let r = t.post(&format!("/api?api_key={KEY}&program_id=1"));
    let v = r.ok();
    r.check_eq(
        &v["Result"],
        &json!(["new-1", "new-2"]),
        "Result of a new run",
    );
    r.check(!dir.exists("work/release"), "the old run is still waiting");
    dir.write("work/release", "");
    let r = run.join().expect("run thread");
    let v = r.ok();
    r.check_eq(
        &v["Result"],
        &json!(["old-1", "old-2"]),
        "Result of the run in progress",
    );
}

#[test]
fn reload_of_ten_thousand_programs_does_not_stall_serving() {
    const N: u64 = 10_000;
    let (dir, t) = serve("reload_10k", "", &[("p1.toml", &prog(1, "one"))]);
    wait_served(&t, 1, Ok("one"));
    let stop = Arc::new(AtomicBool::new(false));
    let poller = {
        let (client, stop) = (t.client(), Arc::clone(&stop));
        thread::spawn(move || {
            let (mut n, mut worst) = (0u32, Duration::ZERO);
            while !stop.load(Ordering::SeqCst) {
                let start = Instant::now();
                let r = client.get("/healthz");
                assert_eq!(r.status, 200, "{r:?}");
                worst = worst.max(start.elapsed());
                n += 1;
                thread::sleep(Duration::from_millis(10));
            }
            (n, worst)
        })
    };
    let started = Instant::now();
    for id in 2..=N + 1 {
        dir.write(
            &format!("programs/p{id}.toml"),
            &prog(id, &format!("n{id}")),
        );
    }
    let written = started.elapsed();
    let bound = Duration::from_secs(25);
    let mut last = Value::Null;
    let live = wait_until(bound, || {
        last = health(&t);
        last["Programs"] == json!(N + 1)
    });
    stop.store(true, Ordering::SeqCst);
    let (n, worst) = poller.join().expect("poller");
    if !live {
        t.fail(format!(
            "{N} new programs not live {bound:?} after writing them ({written:?}): {last}"
        ))
    }
    assert_eq!(served(&t, N + 1), Ok(format!("n{}", N + 1)));
    assert!(last["LastReloadError"].is_null(), "{last}");
    assert!(n >= 10, "only {n} /healthz answers while reloading");
    // A bound against serving held up for good by the reload, not a
    // measure: the whole reload takes about a second, and a loaded 2-core
    // CI machine can hold any one request for seconds.
    assert!(
        worst < Duration::from_secs(15),
        "a /healthz request took {worst:?} during the reload"
    );
}
