//! The fuzz harnesses on stable Rust, without libFuzzer: each runs on its
//! seed inputs and on random mutations of them (byte flips, inserts,
//! deletes, splices of tokens the parsers care about), from a fixed seed so
//! that a failure reproduces. `FUZZ_ITERS` sets the mutations per harness
//! (default 3000); `FUZZ_SEED` the seed.
//!
//!     cd fuzz && cargo test --release
//!     FUZZ_ITERS=200000 cargo test --release

use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Tokens spliced in by the mutator.
const TOKENS: &[&str] = &[
    "\n",
    "\0",
    "=",
    "\"",
    "'",
    "[",
    "]",
    "[[",
    "]]",
    "{",
    "}",
    "{{",
    "}}",
    ",",
    ".",
    "#",
    "%",
    "%zz",
    "%2F",
    "%2e%2e",
    "%00",
    "%ff",
    "+",
    "&",
    "?",
    "/",
    "..",
    "api_key=",
    "program_id=",
    "cursor=",
    "limit=",
    "since=",
    "state=",
    "variables=",
    "run_async=",
    "id = ",
    "name = ",
    "[[functions]]",
    "[functions.webhook]",
    "outputs = [",
    "\r\n",
    "--XyZ",
    "Content-Disposition: form-data; name=",
    "<a>",
    "</a>",
    "<![CDATA[",
    "&amp;",
    "command = [",
    "steps = [",
    "{ call = ",
    "{ shell = ",
    "args = [",
    "timeout = ",
    "\"1m30s\"",
    "-1",
    "18446744073709551616",
    "9223372036854775808",
    "1e309",
    "[server]",
    "[[tools]]",
    "[[tools.triggers]]",
    "[tools.environments.",
    "é",
    "\u{FEFF}",
    "\r\n",
    "\t",
    "\\u0000",
    "true",
    "[[users]]",
    "[[workspaces]]",
    "members = [",
];

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("seeds")
        .join(target);
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no seeds in {}", dir.display());
    out
}

fn mutate(rng: &mut StdRng, input: &[u8], pool: &[Vec<u8>]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..rng.gen_range(1..=8) {
        let at = if v.is_empty() {
            0
        } else {
            rng.gen_range(0..=v.len())
        };
        match rng.gen_range(0..6) {
            0 if at < v.len() => v[at] ^= 1 << rng.gen_range(0..8),
            1 => v.insert(at, rng.gen()),
            2 if at < v.len() => {
                let end = (at + rng.gen_range(1..16)).min(v.len());
                v.drain(at..end);
            }
            3 | 4 => {
                let t = TOKENS[rng.gen_range(0..TOKENS.len())].as_bytes();
                v.splice(at..at, t.iter().copied());
            }
            _ => {
                let other = &pool[rng.gen_range(0..pool.len())];
                if !other.is_empty() {
                    let a = rng.gen_range(0..other.len());
                    let b = rng.gen_range(a..=other.len());
                    v.splice(at..at, other[a..b].iter().copied());
                }
            }
        }
    }
    v.truncate(64 * 1024);
    v
}

/// Cap this process's address space at 4 GiB (once), so that an input
/// that expands without bound (an alias bomb) fails the test, as
/// libFuzzer's `-rss_limit_mb` fails the fuzz target, instead of taking
/// the machine's memory.
fn cap_memory() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let cap = libc::rlimit {
            rlim_cur: 4 << 30,
            rlim_max: 4 << 30,
        };
        // SAFETY: setrlimit reads the struct given; no memory is shared.
        unsafe { libc::setrlimit(libc::RLIMIT_AS, &cap) };
    });
}

fn run(target: &str, harness: fn(&[u8])) {
    cap_memory();
    let iters: usize = std::env::var("FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    let seed: u64 = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x7419d);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut pool = seeds(target);
    for s in &pool {
        harness(s);
    }
    for i in 0..iters {
        let base = pool[rng.gen_range(0..pool.len())].clone();
        let input = mutate(&mut rng, &base, &pool);
        let ok = std::panic::catch_unwind(|| harness(&input));
        if ok.is_err() {
            let path = std::env::temp_dir().join(format!("trigd-fuzz-{target}-{i}"));
            std::fs::write(&path, &input).unwrap();
            panic!(
                "{target}: harness failed on mutation {i} (seed {seed}); input saved to {}\n{:?}",
                path.display(),
                String::from_utf8_lossy(&input)
            );
        }
        if i % 64 == 0 && pool.len() < 512 {
            pool.push(input);
        }
    }
}

#[test]
fn config_load() {
    run("config_load", trigd_fuzz::config_load);
}

#[test]
fn http_request() {
    run("http_request", trigd_fuzz::http_request);
}

#[test]
fn tool_values() {
    run("tool_values", trigd_fuzz::tool_values);
}

#[test]
fn payload() {
    run("payload", trigd_fuzz::payload);
}

#[test]
fn hooks_file() {
    run("hooks_file", trigd_fuzz::hooks_file);
}

#[test]
fn hooks_yaml() {
    run("hooks_yaml", trigd_fuzz::hooks_yaml);
}

#[test]
fn xml_payload() {
    run("xml_payload", trigd_fuzz::xml_payload);
}

#[test]
fn multipart_payload() {
    run("multipart_payload", trigd_fuzz::multipart_payload);
}

#[test]
fn signature_header() {
    run("signature_header", trigd_fuzz::signature_header);
}

#[test]
fn cert_not_after() {
    run("cert_not_after", trigd_fuzz::cert_not_after);
}

#[test]
fn cron_expr() {
    run("cron_expr", trigd_fuzz::cron_expr);
}

#[test]
fn notify_inputs() {
    run("notify_inputs", trigd_fuzz::notify_inputs);
}

#[test]
fn run_list_query() {
    run("run_list_query", trigd_fuzz::run_list_query);
}

#[test]
fn output_frames() {
    run("output_frames", trigd_fuzz::output_frames);
}

/// The committed seeds of `output_frames` are what trigd's writer makes
/// today (`trigd_fuzz::output_seeds`), so that a change of the format
/// cannot leave them describing another one; `FUZZ_WRITE_SEEDS=1`
/// rewrites them.
#[test]
fn output_frames_seeds_are_the_writers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/output_frames");
    for (name, bytes) in trigd_fuzz::output_seeds() {
        let path = dir.join(name);
        if std::env::var_os("FUZZ_WRITE_SEEDS").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        }
        let committed = std::fs::read(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            committed == bytes,
            "seed {name} is not what the writer makes"
        );
    }
}
