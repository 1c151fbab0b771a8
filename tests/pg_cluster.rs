//! The PostgreSQL backend (`[state] url`) with real parts: the harness's
//! PostgreSQL (`tests/util/pg.rs`), trigd instances sharing one database,
//! three of them behind a real HAProxy started from `dist/haproxy.cfg`.

use serde_json::json;

use crate::util::*;

/// The harness itself: a server from Debian's binaries as a non-root
/// user, a fresh database per test, stop and start on the same port.
#[test]
fn the_harness_starts_postgresql_and_gives_each_test_a_database() {
    let a = pg_database("harness_a");
    let b = pg_database("harness_b");
    assert_ne!(a.name, b.name);
    a.psql("CREATE TABLE t (x int); INSERT INTO t VALUES (1), (2)");
    assert_eq!(a.count("SELECT count(*) FROM t"), 2);
    assert!(
        b.try_psql("SELECT count(*) FROM t").is_err(),
        "databases are separate"
    );
    assert_eq!(a.psql("SHOW fsync"), "on");

    let own = Pg::start("harness_own");
    let db = own.database("x");
    db.psql("CREATE TABLE k (v text); INSERT INTO k VALUES ('kept')");
    own.stop(true);
    assert!(db.try_psql("SELECT 1").is_err(), "stopped");
    own.start_again();
    assert_eq!(
        db.psql("SELECT v FROM k"),
        "kept",
        "committed rows survive a crash"
    );
    let _ = json!(null);
}
