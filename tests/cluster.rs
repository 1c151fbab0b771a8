//! Several instances: run ids that name their instance, 421 for another
//! instance's run, old run ids, `/healthz` readiness and draining, and three
//! real trigd instances behind a real HAProxy started from
//! `dist/haproxy.cfg` (run-id routing, kill -9 and SIGTERM under load,
//! application keys shared through `shared_state_dir`, sticky sessions),
//! and `dist/kubernetes.yaml` checked as shipped.
//!
//! The HAProxy test is `#[ignore]`d, like the browser tests: a plain
//! `cargo test` lists it as `ignored`, and `cargo test -- --include-ignored`
//! (as `.ci/run` does) runs it and fails with install advice when `haproxy`
//! is missing.

use std::collections::BTreeMap;
use std::env;
use std::fs;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::util::*;

/// Program 1: `quick` answers at once, `slow` takes 2 s, `gated` ends
/// once `go` exists in the directory above the program file (at most
/// 60 s): a run that holds its slot until the test says, however slow the
/// machine.
pub(crate) const WORK: &str = r#"
id = 1
name = "work"
workspace = "ops"

[[functions]]
name = "quick"
steps = [{ shell = "printf ok" }]
[functions.webhook]

[[functions]]
name = "slow"
steps = [{ shell = "sleep 2; printf slow" }]
[functions.webhook]

[[functions]]
name = "gated"
steps = [{ shell = "i=0; while [ ! -e ../go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; printf gated" }]
[functions.webhook]
"#;

/// A run id of nobody: 32 hex digits.
pub(crate) const HEX: &str = "0123456789abcdef0123456789abcdef";

pub(crate) fn run_url(id: &str) -> String {
    format!("/api/runs/{id}?api_key={KEY}")
}

pub(crate) fn async_url(function: &str) -> String {
    format!("/api?api_key={KEY}&program_id=1&function={function}&run_async=true")
}

/// Accept `n` async runs of `slow` through `c`; their ids.
pub(crate) fn accept_slow(c: &Client, n: usize) -> Vec<String> {
    accept_runs(c, "slow", n)
}

/// Accept `n` async runs of `function` through `c`; their ids.
pub(crate) fn accept_runs(c: &Client, function: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let r = c.post(&async_url(function));
            r.run_id(&r.ok())
        })
        .collect()
}

/// Wait until every run of `ids` is `running` (read through `c`).
fn wait_running(c: &Client, ids: &[String]) {
    let mut states = Vec::new();
    let running = wait_until(WAIT, || {
        states = ids.iter().map(|id| state(c, id)).collect();
        states.iter().all(|s| s == "running")
    });
    assert!(running, "runs {ids:?} not running: {states:?}");
}

/// The last line of `state/runs.log` of `dir` naming run `id` (empty
/// when there is none).
fn last_log_line(dir: &TestDir, id: &str) -> String {
    dir.read("state/runs.log")
        .lines()
        .rfind(|l| l.contains(id))
        .unwrap_or("")
        .to_string()
}

// ---------------------------------------------------------------------------
// One instance

#[test]
fn run_ids_name_their_instance_and_another_instance_gets_421() {
    let (_dir, t) = serve("cluster_ids", r#"instance = "alpha""#, &[("w.toml", WORK)]);
    let r = t.post(&format!("/api?api_key={KEY}&program_id=1&function=quick"));
    let id = r.run_id(&r.ok());
    r.check(
        id.starts_with("alpha-"),
        "a run id starts with `<instance>-`",
    );
    let r = t.get(&run_url(&id));
    r.check_eq(&r.ok()["Run"], &json!(id), "Run read back");

    let r = t.get(&run_url(&format!("beta-{HEX}")));
    let v = r.err(421, "run_on_other_instance");
    r.check_eq(&v["Instance"], &json!("beta"), "Instance names the owner");
    let r = t.get(&run_url(&format!("be-ta_2-{HEX}")));
    r.check_eq(
        &r.err(421, "run_on_other_instance")["Instance"],
        &json!("be-ta_2"),
        "Instance",
    );
    // Our own name, or no name, and unknown: a true 404.
    t.get(&run_url(&format!("alpha-{HEX}")))
        .err(404, "run_not_found");
    t.get(&run_url(HEX)).err(404, "run_not_found");
    // Not run ids at all.
    for bad in [
        "Beta-0123",
        "beta-XYZ",
        "-",
        "beta-",
        &format!("Beta-{HEX}"),
    ] {
        t.get(&run_url(bad)).err(404, "run_not_found");
    }
    // The same id with another owner is not this run.
    let hex = id.rsplit_once('-').unwrap().1;
    let r = t.get(&run_url(&format!("gamma-{hex}")));
    r.err(421, "run_on_other_instance");
    // The key check comes first.
    t.get(&format!("/api/runs/beta-{HEX}"))
        .err(401, "missing_api_key");

    let r = t.get("/healthz");
    let v = r.ok();
    r.check_eq(&v["Instance"], &json!("alpha"), "healthz Instance");
    r.check_eq(&v["Ready"], &json!(true), "healthz Ready");
    r.check_eq(&v["Status"], &json!("ok"), "healthz Status");
    let r = t.get("/livez");
    r.check_eq(&r.ok()["Status"], &json!("alive"), "livez");
    t.post("/livez").err(405, "method_not_allowed");
}

#[test]
fn a_bad_instance_name_is_a_config_error() {
    for bad in ["Web1", "-web", "web.1", "", &"a".repeat(64)] {
        let dir = setup("cluster_bad_name", &format!("instance = {bad:?}"), &[]);
        let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
        out.code_is(1);
        out.check(
            out.stderr.contains("server.instance"),
            format!("the error names server.instance for {bad:?}"),
        );
    }
}

#[test]
fn the_default_instance_comes_from_the_host_name_and_old_ids_still_resolve() {
    let dir = setup("cluster_old_ids", "", &[("w.toml", WORK)]);
    // A run recorded before run ids named their instance.
    let old = json!({"Run": HEX, "State": "finished", "Program": 1, "Function": "quick",
        "Async": true, "By": "api_key:all", "CreatedAt": "2026-01-01T00:00:00.000Z",
        "FinishedAt": "2026-01-01T00:00:01.000Z", "Steps": [], "Result": ["old"]});
    dir.mkdir("state");
    dir.write("state/runs.log", &format!("{old}\n"));
    let t = Trigd::start(&dir);
    let r = t.get(&run_url(HEX));
    let v = r.ok();
    r.check_eq(&v["Run"], &json!(HEX), "an old id resolves");
    r.check_eq(&v["Result"], &json!(["old"]), "its Result");

    let name = t.get("/healthz").ok()["Instance"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let host = fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let label = host
        .trim()
        .split('.')
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    t.check(
        !name.is_empty() && (label.starts_with(&name) || name == "trigd"),
        format!("default instance {name:?} comes from the host name {host:?}"),
    );
    let r = t.post(&async_url("quick"));
    let id = r.run_id(&r.ok());
    r.check(
        id.starts_with(&format!("{name}-")),
        "new ids carry the default name",
    );
}

#[test]
fn healthz_is_not_ready_while_the_run_log_cannot_be_written() {
    let (dir, t) = serve("cluster_not_ready", "", &[("w.toml", WORK)]);
    t.get("/healthz").ok();
    fs::rename(dir.path("state/runs.log"), dir.path("state/runs.log.away")).unwrap();
    let r = t.get("/healthz");
    r.status_is(503);
    let v = r.json();
    r.check_eq(&v["Status"], &json!("not_ready"), "Status");
    r.check_eq(&v["Ready"], &json!(false), "Ready");
    r.check(
        v["Reason"]
            .as_str()
            .is_some_and(|s| s.contains("state dir")),
        "Reason says what is missing",
    );
    t.get("/livez").ok();
    fs::rename(dir.path("state/runs.log.away"), dir.path("state/runs.log")).unwrap();
    t.get("/healthz").ok();
}

#[test]
fn sigterm_drains_then_runs_the_queue_within_the_grace() {
    let (dir, mut t) = serve(
        "cluster_drain",
        "max_concurrent_runs = 1\nmax_concurrent_async_runs = 1\ndrain_delay = \"30s\"\nshutdown_grace = \"30s\"",
        &[("w.toml", WORK)],
    );
    let ids = accept_slow(&t.client(), 3);
    t.sigterm();
    t.wait_for(WAIT, "/healthz to answer 503 draining", || {
        let r = t.get("/healthz");
        r.status == 503 && r.json()["Status"] == json!("draining")
    });
    // Still serving while draining: a new run, a status read.
    let mut ids = ids;
    let r = t.post(&async_url("quick"));
    ids.push(r.run_id(&r.ok()));
    t.get(&run_url(&ids[0])).ok();
    t.get("/livez").ok();
    // A second signal ends the drain early; the queued runs still run.
    t.sigterm();
    let st = t
        .wait_exit(Duration::from_secs(40))
        .unwrap_or_else(|| t.fail("trigd did not exit within 40s of SIGTERM"));
    t.check(st.success(), format!("exit status after SIGTERM: {st}"));
    for id in &ids {
        let last = last_log_line(&dir, id);
        t.check(
            last.contains(r#""State":"finished""#),
            format!("queued run {id} ran within the grace: {last}"),
        );
    }
}

// ---------------------------------------------------------------------------
// Three instances behind HAProxy

/// A free loopback port (bound then released).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The `haproxy` binary; panics with install advice when it is missing.
pub(crate) fn haproxy_bin() -> PathBuf {
    [
        "/usr/sbin/haproxy",
        "/usr/local/sbin/haproxy",
        "/usr/bin/haproxy",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
    .expect(
        "haproxy is not installed: apt-get install haproxy \
         (or leave out --include-ignored to skip this test)",
    )
}

/// One trigd instance on a fixed port (it must come back on the same one).
pub(crate) struct Node {
    pub(crate) name: String,
    pub(crate) dir: PathBuf,
    pub(crate) port: u16,
    child: Option<Child>,
}

impl Node {
    pub(crate) fn new(root: &TestDir, name: &str, shared: &Path) -> Node {
        let shared = format!("shared_state_dir = {:?}", shared.display().to_string());
        Node::with_config(root, name, &shared, |_| String::new())
    }

    /// An instance with `server` added to `[server]` and `tail(dir)`
    /// appended to its config (e.g. a `[state]` table).
    pub(crate) fn with_config(
        root: &TestDir,
        name: &str,
        server: &str,
        tail: impl FnOnce(&Path) -> String,
    ) -> Node {
        let dir = root.path(name);
        fs::create_dir_all(dir.join("programs")).unwrap();
        let server = format!(
            "instance = {name:?}\nmax_concurrent_runs = 2\nmax_concurrent_async_runs = 2\ndrain_delay = \"30s\"\n\
             shutdown_grace = \"30s\"\ntrusted_proxies = [\"127.0.0.1\"]\n{server}"
        );
        let text = cluster_config(&server) + &tail(&dir);
        fs::write(dir.join("config.toml"), text).unwrap();
        fs::write(dir.join("programs/w.toml"), WORK).unwrap();
        let mut n = Node {
            name: name.into(),
            dir,
            port: free_port(),
            child: None,
        };
        n.start();
        n
    }

    pub(crate) fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub(crate) fn log(&self) -> PathBuf {
        self.dir.join("stderr.log")
    }

    pub(crate) fn client(&self) -> Client {
        Client::for_addr(&self.addr(), &self.log())
    }

    /// Start (again) on the same port; wait for its `listening on` line.
    pub(crate) fn start(&mut self) {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log())
            .unwrap();
        let mut child = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(self.dir.join("config.toml"))
            .args(["--listen", &self.addr()])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("spawn trigd");
        // A bound for a start that never comes (as the harness's 30 s).
        let line = first_line(child.stdout.take().unwrap()).recv_timeout(Duration::from_secs(30));
        self.child = Some(child);
        match line {
            Ok(Ok(l)) if l.starts_with("listening on") => {}
            other => panic!(
                "{}: no `listening on` line ({other:?})\n{}",
                self.name,
                fs::read_to_string(self.log()).unwrap_or_default()
            ),
        }
    }

    pub(crate) fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub(crate) fn sigterm(&self) {
        let pid = self.child.as_ref().unwrap().id().to_string();
        let st = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(st.success());
    }

    pub(crate) fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    pub(crate) fn wait_exit(&mut self, bound: Duration) -> Option<ExitStatus> {
        let mut status = None;
        wait_until(bound, || {
            status = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            status.is_some()
        });
        if status.is_some() {
            self.child = None;
        }
        status
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// [`config`] plus user alice (password `alice-pw`) in workspace `ops` and
/// a tool of `ops` whose endpoints take application keys.
pub(crate) fn cluster_config(server: &str) -> String {
    let base = config(server).replace(
        "name = \"ops\"\nmembers = []",
        "name = \"ops\"\nmembers = [\"alice\"]",
    );
    format!(
        "{base}\n[[users]]\nname = \"alice\"\npassword = \"{}\"\n\n\
         [[tools]]\nname = \"jobs\"\nworkspace = \"ops\"\n[tools.environments.main]\n\
         [[tools.triggers]]\nkind = \"endpoint\"\nname = \"quick\"\nmethod = \"POST\"\n\
         program = 1\nfunction = \"quick\"\n",
        cheap_hash("alice-pw")
    )
}

/// HAProxy started from `dist/haproxy.cfg` for `nodes`.
pub(crate) struct Haproxy {
    child: Child,
    socket: PathBuf,
    addr: String,
    log: PathBuf,
}

impl Haproxy {
    /// `file_mode`: the instances keep their state in their state dirs
    /// (no `[state] url`): the recipe's `#file# ` lines (run-id routing,
    /// sticky sessions) are uncommented, as its comment tells operators.
    pub(crate) fn start(bin: &Path, root: &TestDir, nodes: &[Node], file_mode: bool) -> Haproxy {
        let template = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/dist/haproxy.cfg"))
            .expect("dist/haproxy.cfg");
        let socket = root.path("haproxy.sock");
        let addr = format!("127.0.0.1:{}", free_port());
        let servers: String = nodes
            .iter()
            .map(|n| {
                let cookie = if file_mode {
                    format!(" cookie {}", n.name)
                } else {
                    String::new()
                };
                format!("    server {} {}{cookie}\n", n.name, n.addr())
            })
            .collect();
        let mut cfg = template.clone();
        if file_mode {
            assert!(
                cfg.contains("\n#file# "),
                "dist/haproxy.cfg no longer has its `#file# ` lines"
            );
            cfg = cfg.replace("\n#file# ", "\n");
        }
        // Each replaced piece must be in the template: a changed template
        // fails here instead of silently testing something else.
        let checks = "check inter 2s fastinter 500ms downinter 1s fall 2 rise 2";
        for (from, to) in [
            ("/run/haproxy/trigd.sock", socket.display().to_string()),
            ("    bind :80\n", format!("    bind {addr}\n")),
            (
                checks,
                "check inter 250ms fastinter 100ms downinter 250ms fall 2 rise 2".into(),
            ),
        ] {
            assert!(
                cfg.contains(from),
                "dist/haproxy.cfg no longer has {from:?}"
            );
            cfg = cfg.replace(from, &to);
        }
        let first = cfg
            .find("    server web1")
            .expect("server lines in dist/haproxy.cfg");
        let last = cfg.find("    server web3").expect("web3 line");
        let end = cfg[last..].find('\n').expect("end of the web3 line") + last + 1;
        cfg.replace_range(first..end, &servers);
        let path = root.path("haproxy.cfg");
        fs::write(&path, cfg).unwrap();
        let log = root.path("haproxy.log");
        let out = fs::File::create(&log).unwrap();
        let child = Command::new(bin)
            .args(["-db", "-f"])
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawn haproxy");
        let h = Haproxy {
            child,
            socket,
            addr,
            log,
        };
        for n in nodes {
            h.wait_status(&n.name, "UP", WAIT);
        }
        h
    }

    pub(crate) fn client(&self) -> Client {
        Client::for_addr(&self.addr, &self.log)
    }

    /// Server name → status (`UP`, `DOWN`, …) from `show stat`.
    pub(crate) fn statuses(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Ok(mut s) = UnixStream::connect(&self.socket) else {
            return out;
        };
        let _ = s.write_all(b"show stat\n");
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        let mut lines = text.lines();
        let header: Vec<&str> = lines
            .next()
            .unwrap_or("")
            .trim_start_matches("# ")
            .split(',')
            .collect();
        let col = |name: &str| header.iter().position(|h| *h == name);
        let (Some(px), Some(sv), Some(st)) = (col("pxname"), col("svname"), col("status")) else {
            return out;
        };
        for l in lines {
            let f: Vec<&str> = l.split(',').collect();
            if f.get(px) == Some(&"trigd") && f.len() > st {
                out.insert(f[sv].to_string(), f[st].to_string());
            }
        }
        out
    }

    /// Wait until HAProxy reports `server` as `status`; how long it took.
    pub(crate) fn wait_status(&self, server: &str, status: &str, bound: Duration) -> Duration {
        let start = Instant::now();
        let ok = wait_until(bound, || {
            self.statuses()
                .get(server)
                .is_some_and(|s| s.starts_with(status))
        });
        assert!(
            ok,
            "HAProxy did not report {server} {status} within {bound:?}: {:?}\n{}",
            self.statuses(),
            fs::read_to_string(&self.log).unwrap_or_default()
        );
        start.elapsed()
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the load clients saw: accepted run ids, and failed requests with
/// the time they were sent.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) accepted: Vec<String>,
    pub(crate) failed: Vec<(Instant, String)>,
}

/// Clients starting async runs through the balancer and reading each one
/// back at once, until stopped.
pub(crate) struct Load {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Load {
    pub(crate) fn start(lb: &Client, clients: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let threads = (0..clients)
            .map(|_| {
                let (lb, stop, seen) = (lb.clone(), Arc::clone(&stop), Arc::clone(&seen));
                thread::spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        let sent = Instant::now();
                        match one_run(&lb) {
                            Ok(id) => seen.lock().unwrap().accepted.push(id),
                            Err(e) => seen.lock().unwrap().failed.push((sent, e)),
                        }
                        // Pace the clients below what the instances run.
                        thread::sleep(Duration::from_millis(30));
                    }
                })
            })
            .collect();
        Load {
            stop,
            seen,
            threads,
        }
    }

    pub(crate) fn accepted(&self) -> usize {
        self.seen.lock().unwrap().accepted.len()
    }

    pub(crate) fn wait_accepted(&self, more: usize, what: &str) {
        let want = self.accepted() + more;
        assert!(
            wait_until(Duration::from_secs(30), || self.accepted() >= want),
            "{what}: fewer than {want} runs accepted within 30s; failures: {:?}",
            self.seen.lock().unwrap().failed
        );
    }

    pub(crate) fn finish(self) -> Seen {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            t.join().expect("load thread");
        }
        Arc::try_unwrap(self.seen)
            .ok()
            .expect("no other owner")
            .into_inner()
            .unwrap()
    }
}

/// Start an async run through the balancer and read it back through it.
pub(crate) fn one_run(lb: &Client) -> Result<String, String> {
    let r = lb.try_request("POST", &async_url("quick"), &[], b"")?;
    if r.status != 200 {
        return Err(format!("POST /api: {} {}", r.status, r.text()));
    }
    let id = r.json()["Run"].as_str().unwrap_or_default().to_string();
    let g = lb.try_request("GET", &run_url(&id), &[], b"")?;
    if g.status != 200 || g.json()["Run"] != json!(id) {
        return Err(format!("GET {id}: {} {}", g.status, g.text()));
    }
    Ok(id)
}

pub(crate) fn owner(id: &str) -> &str {
    id.rsplit_once('-').map_or("", |(o, _)| o)
}

/// The state of run `id`, read through `c`.
pub(crate) fn state(c: &Client, id: &str) -> String {
    c.try_request("GET", &run_url(id), &[], b"")
        .ok()
        .filter(|r| r.status == 200)
        .and_then(|r| r.json()["State"].as_str().map(String::from))
        .unwrap_or_default()
}

/// Wait until every run in `ids` is in a terminal state; their states.
pub(crate) fn wait_terminal(c: &Client, ids: &[String]) -> BTreeMap<String, String> {
    let mut states = BTreeMap::new();
    let done = wait_until(Duration::from_secs(40), || {
        for id in ids {
            let s = state(c, id);
            states.insert(id.clone(), s);
        }
        states.values().all(|s| {
            [
                "finished",
                "failed",
                "timed_out",
                "interrupted",
                "cancelled",
            ]
            .contains(&s.as_str())
        })
    });
    assert!(done, "runs not terminal within 40s: {states:?}");
    states
}

pub(crate) fn bearer_call(c: &Client, key: &str) -> u16 {
    let auth = format!("Bearer {key}");
    c.request(
        "POST",
        "/tools/jobs/main/quick",
        &[("Authorization", &auth), ("User-Agent", "cluster-test/1.0")],
        b"",
    )
    .status
}

pub(crate) fn app_key(node: &Node, member: &str) -> String {
    let config = node.dir.join("config.toml").display().to_string();
    let out = trigd(
        &[
            "app-key",
            "--workspace",
            "ops",
            "--member",
            member,
            "--config",
            &config,
        ],
        None,
    );
    out.code_is(0);
    out.stdout.trim().to_string()
}

#[test]
#[ignore = "needs HAProxy: cargo test -- --include-ignored (as .ci/run does)"]
fn three_instances_behind_haproxy() {
    let bin = haproxy_bin();
    let root = TestDir::new("cluster_haproxy");
    let shared = root.path("shared");
    let mut nodes: Vec<Node> = ["t1", "t2", "t3"]
        .iter()
        .map(|n| Node::new(&root, n, &shared))
        .collect();
    let hx = Haproxy::start(&bin, &root, &nodes, true);
    let lb = hx.client();

    routing_by_run_id(&lb, &nodes);
    shared_keys_and_sticky_sessions(&lb, &nodes);
    kill9_under_load(&hx, &lb, &mut nodes);
    sigterm_under_load(&hx, &lb, &mut nodes);
}

/// Runs spread over the instances; each read back through the balancer
/// from its owner; asked directly, another instance answers 421.
fn routing_by_run_id(lb: &Client, nodes: &[Node]) {
    let mut ids: Vec<String> = Vec::new();
    let mut owners = std::collections::BTreeSet::new();
    // Round robin: three in a row reach all three, unless a health check
    // flapped on a loaded machine; bounded.
    while owners.len() < 3 && ids.len() < 30 {
        let r = lb.post(&async_url("quick"));
        let id = r.run_id(&r.ok());
        owners.insert(owner(&id).to_string());
        ids.push(id);
    }
    assert_eq!(
        owners.len(),
        3,
        "runs spread over all three instances: {ids:?}"
    );
    for _ in 0..2 {
        for id in &ids {
            let r = lb.get(&run_url(id));
            r.check_eq(
                &r.ok()["Run"],
                &json!(id),
                "status read through the balancer",
            );
        }
    }
    let states = wait_terminal(lb, &ids);
    assert!(states.values().all(|s| s == "finished"), "{states:?}");
    let t1_run = ids.iter().find(|i| owner(i) == "t1").unwrap();
    let r = nodes[1].client().get(&run_url(t1_run));
    r.check_eq(
        &r.err(421, "run_on_other_instance")["Instance"],
        &json!("t1"),
        "owner",
    );
}

/// Application keys live in the shared dir: made through one instance,
/// valid on all, revoked on all. Browser sessions stay on one instance
/// through HAProxy's cookie.
fn shared_keys_and_sticky_sessions(lb: &Client, nodes: &[Node]) {
    let first = app_key(&nodes[0], "alice");
    for n in nodes {
        assert_eq!(
            bearer_call(&n.client(), &first),
            200,
            "key made via t1 works on {}",
            n.name
        );
    }
    let second = app_key(&nodes[2], "alice");
    for n in nodes {
        assert_eq!(
            bearer_call(&n.client(), &first),
            401,
            "old key revoked on {}",
            n.name
        );
        assert_eq!(
            bearer_call(&n.client(), &second),
            200,
            "new key works on {}",
            n.name
        );
    }
    assert_eq!(bearer_call(lb, &second), 200, "through the balancer");

    let r = lb.request(
        "POST",
        "/login",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        b"username=alice&password=alice-pw",
    );
    r.ok();
    let cookies: Vec<String> = r
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("set-cookie"))
        .filter_map(|(_, v)| v.split(';').next().map(String::from))
        .collect();
    r.check(
        cookies.iter().any(|c| c.starts_with("trigd_lb=")),
        format!("HAProxy sets its cookie: {cookies:?}"),
    );
    let cookie = cookies.join("; ");
    for _ in 0..6 {
        let r = lb.request("GET", "/", &[("Cookie", &cookie)], b"");
        r.check(r.status == 200, "the session works on every request");
    }
}

/// kill -9 of t2 under load: HAProxy drops it within its check interval,
/// nothing sent after that fails, the survivors' runs finish, and t2's runs
/// reach a final state once it is back.
fn kill9_under_load(hx: &Haproxy, lb: &Client, nodes: &mut [Node]) {
    // Runs accepted by t2 before the kill: two running, two queued. The
    // running ones are gated: a 2 s run could end before the kill on a
    // loaded machine.
    let t2 = nodes[1].client();
    let mut t2_slow = accept_runs(&t2, "gated", 2);
    wait_running(&t2, &t2_slow);
    t2_slow.extend(accept_slow(&t2, 2));
    let load = Load::start(lb, 3);
    load.wait_accepted(15, "before the kill");
    nodes[1].kill9();
    // The gated processes outlive trigd: let them end.
    fs::write(nodes[1].dir.join("go"), "").unwrap();
    let took = hx.wait_status("t2", "DOWN", Duration::from_secs(30));
    eprintln!("HAProxy marked t2 DOWN {took:?} after kill -9 (inter 250ms, fall 2)");
    let down = Instant::now();
    load.wait_accepted(15, "after t2 was marked down");
    let seen = load.finish();
    let late: Vec<&(Instant, String)> = seen.failed.iter().filter(|(t, _)| *t > down).collect();
    assert!(
        late.is_empty(),
        "requests sent after t2 was down failed: {late:?}"
    );
    eprintln!(
        "kill -9 phase: {} runs accepted, {} requests failed around the kill",
        seen.accepted.len(),
        seen.failed.len()
    );
    let (t2_runs, survivors): (Vec<String>, Vec<String>) =
        seen.accepted.into_iter().partition(|i| owner(i) == "t2");
    let states = wait_terminal(lb, &survivors);
    let not_finished: Vec<_> = states.iter().filter(|(_, s)| *s != "finished").collect();
    assert!(not_finished.is_empty(), "survivors' runs: {not_finished:?}");

    // While t2 is down, its runs are answered by another instance with a
    // clear error naming the owner, never a false 404.
    let r = lb.get(&run_url(&t2_slow[0]));
    let v = r.err(421, "run_on_other_instance");
    r.check_eq(
        &v["Instance"],
        &json!("t2"),
        "the owner of a run of a down instance",
    );

    nodes[1].start();
    hx.wait_status("t2", "UP", WAIT);
    let mut all_t2 = t2_slow.clone();
    all_t2.extend(t2_runs);
    // Every run t2 accepted reaches a final state once it is back.
    let states = wait_terminal(lb, &all_t2);
    // The ones running at the kill could not finish.
    for id in &t2_slow[..2] {
        assert_eq!(states[id], "interrupted", "{id}, running at the kill");
    }
    // Today the store records the queued ones `interrupted` at restart too.
    for id in &t2_slow[2..] {
        assert!(
            ["interrupted", "finished"].contains(&states[id].as_str()),
            "{id}, queued at the kill: {}",
            states[id]
        );
    }
    eprintln!("t2's runs after its restart: {states:?}");
}

/// SIGTERM of t3 under load: it drains (HAProxy marks it down while it
/// still serves), finishes what it accepted, exits 0; no request fails.
fn sigterm_under_load(hx: &Haproxy, lb: &Client, nodes: &mut [Node]) {
    // Gated runs: t3 cannot finish them, and exit, before the checks of
    // its draining below (2 s runs could end first on a loaded machine).
    let t3_slow = accept_runs(&nodes[2].client(), "gated", 3);
    let load = Load::start(lb, 3);
    load.wait_accepted(15, "before SIGTERM");
    nodes[2].sigterm();
    hx.wait_status("t3", "DOWN", Duration::from_secs(30));
    // The balancer stopped sending before t3 stopped accepting: t3 still
    // answers, and says it is draining.
    assert!(
        nodes[2].running(),
        "t3 is marked down while it still drains"
    );
    let r = nodes[2].client().get("/healthz");
    r.status_is(503);
    r.check_eq(&r.json()["Status"], &json!("draining"), "t3's /healthz");
    // Its runs are still read from it through the balancer (`option
    // persist`), though HAProxy marks it down.
    let r = lb.get(&run_url(&t3_slow[0]));
    r.check_eq(
        &r.ok()["Run"],
        &json!(t3_slow[0]),
        "a draining instance's run",
    );
    // The drain (30 s: HAProxy's marking down may take seconds on a
    // loaded machine) is ended early by a second signal, as operators do.
    fs::write(nodes[2].dir.join("go"), "").unwrap();
    nodes[2].sigterm();
    let st = nodes[2]
        .wait_exit(Duration::from_secs(40))
        .expect("t3 exits within 40s of SIGTERM");
    assert!(st.success(), "t3 exit status {st}");
    load.wait_accepted(15, "after t3 exited");
    let seen = load.finish();
    assert!(
        seen.failed.is_empty(),
        "requests failed during a graceful stop: {:?}",
        seen.failed
    );
    eprintln!(
        "SIGTERM phase: {} runs accepted, none failed",
        seen.accepted.len()
    );
    let (t3_runs, others): (Vec<String>, Vec<String>) =
        seen.accepted.into_iter().partition(|i| owner(i) == "t3");
    let states = wait_terminal(lb, &others);
    assert!(states.values().all(|s| s == "finished"), "{states:?}");
    // t3 finished everything it accepted before it exited.
    nodes[2].start();
    hx.wait_status("t3", "UP", WAIT);
    let mut all_t3 = t3_slow;
    all_t3.extend(t3_runs);
    let states = wait_terminal(lb, &all_t3);
    let lost: Vec<_> = states.iter().filter(|(_, s)| *s != "finished").collect();
    assert!(
        lost.is_empty(),
        "t3's accepted runs after a graceful stop: {lost:?}"
    );
}

#[test]
fn runs_still_queued_when_the_grace_ends_run_at_the_next_start() {
    let (dir, mut t) = serve(
        "cluster_grace_ends",
        "max_concurrent_runs = 1\nmax_concurrent_async_runs = 1\nshutdown_grace = \"1s\"\nkill_grace = \"1s\"",
        &[("w.toml", WORK)],
    );
    let ids = accept_slow(&t.client(), 3);
    t.sigterm();
    let st = t
        .wait_exit(Duration::from_secs(30))
        .unwrap_or_else(|| t.fail("trigd did not exit within 30s of SIGTERM (grace 1s)"));
    t.check(st.success(), format!("exit status after SIGTERM: {st}"));
    // 2 s runs, one slot, 1 s grace: the last one never started; accepted,
    // it stays queued for the next start.
    let queued = last_log_line(&dir, &ids[2]);
    t.check(
        queued.contains(r#""State":"queued""#),
        format!("a run still queued at the end of the grace: {queued}"),
    );
    t.restart();
    for id in &ids {
        let mut state = String::new();
        t.wait_for(
            Duration::from_secs(30),
            "every run to have a final state",
            || {
                let v = run_record(&t, id);
                state = v["State"].as_str().unwrap_or("").to_string();
                state == "interrupted" || state == "finished"
            },
        );
    }
    let v = run_record(&t, &ids[2]);
    t.check(
        v["State"] == "finished",
        format!("the queued run ran after the restart: {v}"),
    );
}

/// The block scalar `key: |` of `dist/kubernetes.yaml`'s ConfigMap (its
/// lines indented four spaces), unindented.
fn configmap_file(yaml: &str, key: &str) -> String {
    let head = format!("\n  {key}: |\n");
    let start = yaml
        .find(&head)
        .unwrap_or_else(|| panic!("no {key} in dist/kubernetes.yaml"))
        + head.len();
    yaml[start..]
        .lines()
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `dist/kubernetes.yaml` as shipped: its config.toml and program pass
/// `trigd check` (the key's placeholder replaced, the password from the
/// Secret's environment variable), and the program's command is the one
/// file the `FROM scratch` image has besides its data (`/usr/bin/trigd`).
#[test]
fn the_kubernetes_recipe_passes_check_and_runs_what_its_image_has() {
    let yaml = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/dist/kubernetes.yaml"))
        .expect("read dist/kubernetes.yaml");
    let dir = TestDir::new("k8s_recipe");
    let config = configmap_file(&yaml, "config.toml")
        .replace("/var/lib/trigd", &dir.path_str("state"))
        .replace(
            "replace-with-the-output-of-trigd-keygen",
            &sha256_hex("k8s-key"),
        );
    dir.write("config.toml", &config);
    let mut programs = 0;
    for key in yaml
        .lines()
        .filter_map(|l| l.strip_prefix("  programs."))
        .filter_map(|l| l.strip_suffix(": |"))
    {
        let program = configmap_file(&yaml, &format!("programs.{key}"));
        for line in program.lines().filter(|l| l.starts_with("command")) {
            assert!(
                line.contains("[\"/usr/bin/trigd\""),
                "{key}: the image has no other command: {line}"
            );
        }
        dir.write(&format!("programs/{key}"), &program);
        programs += 1;
    }
    assert!(programs > 0, "the ConfigMap holds a program");
    let child = Command::new(BIN)
        .args(["check", "--config", &dir.path_str("config.toml")])
        .env("TRIGD_DB_PASSWORD", "from-the-secret")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn trigd check");
    let out = wait_bounded(child, "trigd check");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "trigd check: {text}");
    assert!(text.contains("ok: 1 program"), "{text}");
}
