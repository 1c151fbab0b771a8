//! The connection-thread stack is big enough for the deepest work a
//! connection thread does: a sync run whose step prints the deepest JSON
//! serde_json accepts (parsed into the Result, written to the run record,
//! written in the answer), and an argon2 password check. The requests run through [`routes::handle`] on a thread
//! with half of [`CONNECTION_STACK`], so the real size has a margin of two
//! at least (a stack overflow would abort this test process).
//!
//! `TRIGD_TEST_STACK_KIB=<n>` runs the same requests on an `n` KiB stack
//! instead: the figures at [`CONNECTION_STACK`] were found by lowering it
//! until the test process aborted (debug and `--release` builds).

use std::sync::Arc;
use std::thread;

use argon2::password_hash::{PasswordHasher, SaltString};
use argon2::Argon2;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::CONNECTION_STACK;
use crate::http::app::App;
use crate::http::metrics::Metrics;
use crate::http::routes;
use crate::http::Request;
use crate::runner::Runner;
use crate::state::store::RunStore;
use crate::state::test_dir::TestDir;

const KEY: &str = "stack-test-key-0123456789";

/// The deepest nesting of JSON objects serde_json parses.
fn deepest_json() -> String {
    let nest = |d: usize| format!("{}1{}", "{\"a\":".repeat(d), "}".repeat(d));
    let depth = (1..1000)
        .take_while(|&d| serde_json::from_str::<Value>(&nest(d)).is_ok())
        .last()
        .expect("some depth parses");
    assert!(depth >= 100, "serde_json accepts only {depth} levels");
    nest(depth)
}

fn app(dir: &std::path::Path) -> App {
    let json_file = dir.join("deep.json");
    std::fs::write(&json_file, deepest_json()).unwrap();
    let hash = Argon2::default()
        .hash_password(
            b"pw",
            &SaltString::encode_b64(&rand::random::<[u8; 16]>()).unwrap(),
        )
        .unwrap()
        .to_string();
    let config = format!(
        "[server]\nstate_dir = {state:?}\n\n[[users]]\nname = \"alice\"\npassword = {hash:?}\n\n\
         [[api_keys]]\nname = \"k\"\nsha256 = \"{key}\"\n",
        state = dir.join("state").display().to_string(),
        key = hex::encode(Sha256::digest(KEY)),
    );
    let program = format!(
        "id = 1\nname = \"deep\"\n[[functions]]\nname = \"f\"\ncommand = [\"cat\", {:?}]\n\
         webhook = {{ active = true, outputs = [] }}\n",
        json_file.display().to_string()
    );
    let progs = vec![(dir.join("programs/deep.toml"), program)];
    let cfg = crate::config::load_str(&dir.join("config.toml"), &config, &progs)
        .unwrap_or_else(|e| panic!("{e:?}"));
    let (store, _) =
        RunStore::open(&cfg.server.state_dir, cfg.server.run_retention, |_| false).unwrap();
    let store = Arc::new(store);
    let runner = Runner::new(Some(Arc::clone(&store)), Arc::new(Metrics::default()));
    let state = crate::state::State::new(&cfg.server.state_dir, &cfg.server.shared_state_dir);
    let keys = crate::runs::idempotency::Keys::open(&state, cfg.server.idempotency_window).unwrap();
    App::new(cfg, state, store, Arc::new(runner), keys)
}

fn request(method: &str, target: &str, body: &str) -> Request {
    let mut req = Request::new(method, target).unwrap();
    req.headers = vec![
        ("user-agent".into(), "stack-test".into()),
        (
            "content-type".into(),
            "application/x-www-form-urlencoded".into(),
        ),
    ];
    req.body = body.as_bytes().to_vec();
    req
}

/// The deepest requests, answered on this thread.
fn deepest_requests(app: &App) {
    let run = routes::handle(
        app,
        &mut request("POST", &format!("/api?api_key={KEY}&program_id=1"), ""),
    );
    // serde_json parsed the output to its deepest, then the element stayed
    // text: deeper than a Result element may be.
    let body = String::from_utf8_lossy(&run.body);
    assert_eq!(run.status, 200, "{body}");
    assert!(body.contains(r#""Result":["{\"a\":{\"a\":"#), "{body}");

    let login = routes::handle(
        app,
        &mut request("POST", "/login", "username=alice&password=pw"),
    );
    assert!(
        matches!(login.status, 200 | 303),
        "login answered {}: {}",
        login.status,
        String::from_utf8_lossy(&login.body)
    );
}

#[test]
fn the_deepest_requests_fit_in_half_a_connection_stack() {
    let dir = TestDir::new("stack");
    std::fs::create_dir_all(dir.join("state")).unwrap();
    std::fs::create_dir_all(dir.join("programs")).unwrap();
    let app = Arc::new(app(dir.path()));
    let stack = std::env::var("TRIGD_TEST_STACK_KIB")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .map_or(CONNECTION_STACK / 2, |k| k * 1024);
    let worker = Arc::clone(&app);
    thread::Builder::new()
        .stack_size(stack)
        .spawn(move || deepest_requests(&worker))
        .unwrap()
        .join()
        .expect("the requests failed");
}
