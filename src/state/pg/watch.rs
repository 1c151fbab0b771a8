//! The watcher: one thread per server on a connection of its own (outside
//! the pool, not counted in [`Db::round_trips`]) that `LISTEN`s for changes
//! of the application keys and keeps this instance's copy of them current
//! ([`super::keys`]), pings the database every [`PING`] to confirm it has
//! every notification, and once a minute removes the limiter windows that
//! ended ([`super::limits::sweep`]).
//!
//! A ping's answer comes after every notification committed before the
//! ping was sent, so "answered" means "nothing missed up to then". When the
//! connection breaks, the copy is distrusted at once (lookups ask the
//! database), and the watcher connects again after 1 s, doubling to 10 s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use postgres::fallible_iterator::FallibleIterator;
use postgres::Client;

use super::keys::Copy;
use super::{limits, Db};

/// How often the watcher pings its connection.
pub const PING: Duration = Duration::from_secs(1);
/// How long a ping may take before the connection counts as lost.
const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// How often ended limiter windows are removed.
const SWEEP: Duration = Duration::from_secs(60);
/// The channel the trigger of `trigd_app_keys` notifies.
const CHANNEL: &str = "trigd_app_keys";

/// Start the watcher of `db` for `copy`.
///
/// # Errors
/// The thread cannot be started.
pub(super) fn start(db: Arc<Db>, copy: Arc<Copy>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("state-db-watch".into())
        .spawn(move || run(&db, &copy))
        .map(drop)
}

/// Connect, watch until the connection fails, distrust the copy, wait,
/// again; for the life of the process.
fn run(db: &Db, copy: &Copy) {
    let mut wait = Duration::from_secs(1);
    loop {
        if db.health().migrated {
            match db.open() {
                Ok(mut client) => {
                    wait = Duration::from_secs(1);
                    if let Err(e) = watch(&mut client, copy) {
                        log::warn!("state: the watcher of application keys lost the database: {e}");
                    }
                }
                Err(e) => log::debug!("state: the watcher cannot connect: {e}"),
            }
        }
        copy.distrust();
        std::thread::sleep(wait);
        wait = (wait * 2).min(Duration::from_secs(10));
    }
}

/// `LISTEN`, then take notifications and ping, until an error.
fn watch(client: &mut Client, copy: &Copy) -> Result<(), postgres::Error> {
    client.batch_execute(&format!("LISTEN {CHANNEL}"))?;
    // Anything may have changed while nobody listened.
    copy.invalidate();
    copy.confirm(Instant::now());
    log::debug!("state: watching application keys");
    let mut swept = Instant::now();
    loop {
        // One notification (or none within PING), then a ping: a stream of
        // changes cannot starve the confirmation.
        if client.notifications().timeout_iter(PING).next()?.is_some() {
            copy.invalidate();
        }
        let sent = Instant::now();
        client.is_valid(PING_TIMEOUT)?;
        if client.notifications().iter().count()? > 0 {
            copy.invalidate();
        }
        copy.confirm(sent);
        if swept.elapsed() >= SWEEP {
            swept = Instant::now();
            let gone = limits::sweep(client)?;
            log::debug!("state: {gone} ended limiter windows removed");
        }
    }
}
