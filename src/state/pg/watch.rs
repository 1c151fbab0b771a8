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

use super::{limits, Db};

/// How often the watcher pings its connection.
pub const PING: Duration = Duration::from_secs(1);
/// How long a ping may take before the connection counts as lost.
const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// How often ended limiter windows are removed.
const SWEEP: Duration = Duration::from_secs(60);
/// What the watcher tells the copy it keeps current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    /// A notification came (or one may have been missed): reload.
    Changed,
    /// Every change committed before this moment has been seen.
    Confirmed(Instant),
    /// The connection is lost: the copy cannot be trusted until it is back.
    Lost,
}

/// Start the watcher of `channel` in `db`, telling `tell` what it sees.
///
/// # Errors
/// The thread cannot be started.
pub(super) fn start(
    db: Arc<Db>,
    channel: &'static str,
    tell: impl Fn(Seen) + Send + 'static,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("state-db-watch".into())
        .spawn(move || run(&db, channel, &tell))
        .map(drop)
}

/// Connect, watch until the connection fails, tell it is lost, wait,
/// again; for the life of the process.
fn run(db: &Db, channel: &str, tell: &dyn Fn(Seen)) {
    let mut wait = Duration::from_secs(1);
    loop {
        if db.health().migrated {
            match db.open() {
                Ok(mut client) => {
                    wait = Duration::from_secs(1);
                    if let Err(e) = watch(&mut client, channel, tell) {
                        log::warn!(
                            "state: the watcher of application keys lost the database: {}",
                            super::describe(&e)
                        );
                    }
                }
                Err(e) => log::debug!("state: the watcher cannot connect: {e}"),
            }
        }
        tell(Seen::Lost);
        std::thread::sleep(wait);
        wait = (wait * 2).min(Duration::from_secs(10));
    }
}

/// `LISTEN`, then take notifications and ping, until an error.
fn watch(client: &mut Client, channel: &str, tell: &dyn Fn(Seen)) -> Result<(), postgres::Error> {
    client.batch_execute(&format!("LISTEN {channel}"))?;
    // Anything may have changed while nobody listened.
    tell(Seen::Changed);
    tell(Seen::Confirmed(Instant::now()));
    log::debug!("state: watching application keys");
    let mut swept = Instant::now();
    loop {
        // One notification (or none within PING), then a ping: a stream of
        // changes cannot starve the confirmation.
        if client.notifications().timeout_iter(PING).next()?.is_some() {
            tell(Seen::Changed);
        }
        let sent = Instant::now();
        client.is_valid(PING_TIMEOUT)?;
        if client.notifications().iter().count()? > 0 {
            tell(Seen::Changed);
        }
        tell(Seen::Confirmed(sent));
        if swept.elapsed() >= SWEEP {
            swept = Instant::now();
            let gone = limits::sweep(client)?;
            log::debug!("state: {gone} ended limiter windows removed");
        }
    }
}
