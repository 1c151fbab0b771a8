//! The HTTP server: a tiny_http listener, one access-log line per request,
//! and the shutdown sequence.
//!
//! Every open connection has a thread of its own in the (patched)
//! tiny_http, bounded by `max_connections`, and its requests are answered on
//! that thread: no request crosses threads, which was the largest cost per
//! request (two context switches). [`handle`] converts a tiny_http request
//! into a plain [`Request`] (body bounded by `max_body_bytes`), calls
//! [`routes::handle`] inside `catch_unwind` so that a bug answers 500
//! instead of killing the server, logs, and responds.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use crate::cli::error::Error;
use crate::config;
use crate::config::reload;
use crate::http::acme;
use crate::http::app::App;
use crate::http::listen;
use crate::http::logging;
use crate::http::metrics::Metrics;
use crate::http::routes;
use crate::http::systemd;
use crate::http::tls;
use crate::http::{ApiError, Peer, Request, Response};
use crate::runner::Runner;
use crate::runs::callback;
use crate::runs::idempotency::Keys;
use crate::state::pg::{Db, DbError};
use crate::state::record::RunRecord;
use crate::state::{HoldError, Kept, State};
use crate::sys::{self, Signal};

/// `trigd serve`: load, bind (or take the socket systemd passed), print
/// `listening on http(s)://ADDR` (or `unix:PATH`), tell systemd `READY=1`,
/// serve until SIGTERM/SIGINT, then shut down gracefully.
///
/// # Errors
/// The config does not load, the address cannot be bound, the socket
/// systemd passed is not one trigd can serve, or the state dir cannot be
/// opened.
pub fn serve(config_path: &Path, listen: Option<String>) -> Result<(), Error> {
    // Both take variables out of the environment: before any thread starts.
    let passed = sys::systemd::take_listen_fds().map_err(|e| Error::Other(e.to_string()))?;
    systemd::init();
    sys::tune_malloc(sys::cores());
    let (mut watch, mut early) = (None, None);
    let cfg =
        crate::cli::firststart::load_for_serve(config_path, listen.as_deref(), &mut |before| {
            match before {
                config::Before::Config => {
                    watch.get_or_insert_with(|| reload::Watch::new(config_path));
                }
                config::Before::Files(server) => {
                    if let Some(w) = watch.as_mut() {
                        w.add(config_path, server);
                    }
                    // Bound while the program files are read: a request
                    // waits in the listen backlog until the first load is
                    // done (nothing is accepted before), instead of being
                    // refused. A socket systemd passed is bound already.
                    if passed.is_none() {
                        let addr = listen.as_ref().unwrap_or(&server.listen);
                        early.get_or_insert_with(|| {
                            (addr.clone(), listen::bind(addr, &server.socket))
                        });
                    }
                }
            }
        })?;
    // Parsing thousands of program files leaves freed memory in every
    // thread's arena: the reload thread gives it back as it starts, while
    // the first requests are answered (`reload::start`).
    let addr = listen.unwrap_or_else(|| cfg.server.listen.clone());
    let acme = new_acme(&cfg.server);
    let certs = match &acme {
        Some(a) => Some(a.initial_certs().map_err(Error::Other)?),
        None => tls::start_certs(&cfg.server)?,
    };
    let bound = listener(passed, early, &addr, &cfg.server.socket)?;
    bound.warn_if_exposed(certs.is_some());
    let shown = bound.shown(certs.is_some());
    let (created, reach, port) = (bound.created.clone(), bound.reach.clone(), bound.port());
    let grace = cfg.server.shutdown_grace;
    let nofile = sys::raise_nofile_limit();
    let app = open_app(cfg)?;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let server = start_http(&app, bound.listener, &in_flight, certs.as_ref())?;
    let _redirect = match (&certs, port) {
        (Some(_), Some(port)) => start_redirect(&app, port, acme.as_ref())?,
        (Some(_), None) => no_redirect_on_a_socket(&app, &shown)?,
        _ => None,
    };
    if let (Some(a), Some(c)) = (acme, &certs) {
        start_acme(&app, a, c)?;
    }
    systemd::start(&app, reach, &shown);
    systemd::ready(&app);
    let reload = reload::start(Arc::clone(&app), config_path.to_path_buf(), watch);
    // Logged before stdout says it: whoever waits for the stdout line (a
    // test counting log lines) finds the log line already written.
    log::info!("listening on {shown} (open files limit {nofile})");
    println!("listening on {shown}");
    let _ = io::stdout().flush();
    serve_until_stopped(&reload, certs.as_ref());
    systemd::stopping();
    drain(&app, &reload);
    log::info!("shutting down: waiting up to {grace:?} for runs to finish");
    app.closing.store(true, Ordering::SeqCst);
    drop(server); // closes the listener: no new connections
    listen::remove_created(created.as_deref());
    app.runner.shutdown(grace);
    // Let the requests whose runs just ended write their responses.
    let deadline = Instant::now() + Duration::from_secs(5);
    while in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    app.runner.leave();
    log::info!("stopped");
    Ok(())
}

/// Wait for SIGTERM or SIGINT; each SIGHUP reloads the configuration and
/// the certificate files.
fn serve_until_stopped(reload: &mpsc::Sender<reload::Trigger>, certs: Option<&Arc<tls::Certs>>) {
    while sys::wait_signal() == Signal::Hup {
        log::info!("SIGHUP: reloading the configuration");
        let _ = reload.send(reload::Trigger::Signal);
        if let Some(c) = certs {
            let _ = c.reload();
        }
    }
}

/// HTTPS on a Unix socket: fine, unless `redirect_http` is set, which
/// names the HTTPS port it sends to (and carries `[acme]`'s HTTP-01
/// answers): a socket has none, so trigd refuses to start.
///
/// # Errors
/// `redirect_http` is set.
fn no_redirect_on_a_socket(app: &App, shown: &str) -> Result<Option<tiny_http::Server>, Error> {
    match app.config().server.tls.redirect_http {
        None => Ok(None),
        Some(_) => Err(Error::Other(format!(
            "redirect_http (and [acme], which needs it) sends to an HTTPS port, but trigd \
             listens on {shown}: listen on HOST:PORT, or drop redirect_http and [acme] and \
             give tls_cert/tls_key (docs/https.md)"
        ))),
    }
}

/// The socket to serve: the one systemd passed, else `addr`, bound early
/// (while the program files were read) or now.
fn listener(
    passed: Option<(sys::systemd::Inherited, String)>,
    early: Option<(String, Result<listen::Bound, Error>)>,
    addr: &str,
    socket: &config::SocketFile,
) -> Result<listen::Bound, Error> {
    if let Some((socket, name)) = passed {
        log::info!("serving the socket systemd passed ({name}); listen = {addr:?} is not used");
        return listen::inherited(socket);
    }
    match early {
        Some((at, Ok(bound))) if at == addr => Ok(bound),
        _ => listen::bind(addr, socket),
    }
}

/// Open the state under `cfg` (run store, callbacks, idempotency keys)
/// and start the accepted runs that had not started before the last stop.
/// How long a server waits for the state dir's lock before it refuses to
/// start: a server killed a moment ago (`kill -9`, then a start) still
/// holds it until its process has ended.
const STATE_LOCK_WAIT: Duration = Duration::from_secs(5);

fn open_app(cfg: config::Config) -> Result<Arc<App>, Error> {
    let mut state = State::new(&cfg.server.state_dir, &cfg.server.shared_state_dir)
        .hold(STATE_LOCK_WAIT)
        .map_err(|e| match e {
            HoldError::Io(path, source) => Error::Io { path, source },
            in_use => Error::Other(in_use.to_string()),
        })?;
    if let Some(settings) = &cfg.server.state_db {
        state = state.with_db(open_db(settings)?);
    }
    let io_error = |kept: Kept| {
        let path = state.path(kept);
        move |source| Error::Io { path, source }
    };
    let retry = |r: &mut RunRecord| {
        crate::runner::again_after_crash(r, &cfg, crate::state::store::STOPPED_UNSEEN)
    };
    let (store, resumed) = state
        .open_runs(cfg.server.run_retention, &cfg.server.instance, retry)
        .map_err(io_error(Kept::Runs))?;
    let metrics = Arc::new(Metrics::default());
    // Before any of them is started again or called back about.
    let uids = crate::runner::orphans::step_uids(&cfg);
    let grace = cfg.server.kill_grace;
    for how in crate::runner::orphans::stop(store.running_at_open(), &uids, grace) {
        metrics.orphan_group_stopped(how.label());
    }
    let store = Arc::new(store);
    store.start_flusher();
    seed_successes(&store, &metrics, cfg.server.run_retention);
    let runner = Runner::new(Some(Arc::clone(&store)), metrics);
    let interrupted = store.interrupted_at_open().to_vec();
    let callbacks = callback::Service::start(
        &state,
        &cfg.server.instance,
        Arc::clone(&store),
        &cfg.server.callbacks,
        &interrupted,
    )
    .map_err(io_error(Kept::Callbacks))?;
    runner.attach_callbacks(callbacks);
    let keys =
        Keys::open(&state, cfg.server.idempotency_window).map_err(io_error(Kept::Idempotency))?;
    let app = Arc::new(App::new(cfg, state, store, Arc::new(runner), keys));
    if !resumed.is_empty() {
        log::info!(
            "{} accepted runs did not start before trigd stopped; starting them in order",
            resumed.len()
        );
        app.runner.resume(&app.config(), resumed);
    }
    share_runs(&app)?;
    crate::schedule::timer::start(&app, crate::schedule::Clock::SYSTEM)
        .map_err(|e| Error::Other(format!("cannot start the schedule timer: {e}")))?;
    crate::schedule::overdue::watch(&app)
        .map_err(|e| Error::Other(format!("cannot start the overdue watch: {e}")))?;
    Ok(app)
}

/// With `[state] url`, share the run queue with the other instances on
/// the database: the lease thread (`runner::cluster`).
fn share_runs(app: &Arc<App>) -> Result<(), Error> {
    let cfg = app.config();
    let (Some(db), Some(settings)) = (app.state.db(), cfg.server.state_db.as_ref()) else {
        return Ok(());
    };
    let weak = Arc::downgrade(app);
    let first = Arc::clone(&cfg);
    let config: crate::runner::cluster::ConfigFn = Box::new(move || {
        weak.upgrade()
            .map_or_else(|| Arc::clone(&first), |a| a.config())
    });
    let mine = crate::runner::cluster::claim(db, &cfg.server.instance, settings.lease)
        .map_err(Error::Other)?;
    app.runner
        .share(
            Arc::clone(db),
            &cfg.server.instance,
            settings.lease,
            mine,
            config,
        )
        .map_err(|e| Error::Other(format!("cannot start the lease thread: {e}")))
}

/// The database of `[state] url`, its schema migrated. When it cannot be
/// reached yet, trigd starts anyway, not ready (`/healthz`), and a thread
/// tries again with backoff (1s doubling to 30s) until it migrates; a
/// schema newer than this trigd stops the start.
fn open_db(settings: &Arc<config::StateDb>) -> Result<Arc<Db>, Error> {
    let db = Arc::new(Db::new(Arc::clone(settings)));
    match db.migrate() {
        Ok(()) => log::info!("state: PostgreSQL at {}", db.url()),
        Err(e @ DbError::Schema(_)) => return Err(Error::Other(e.to_string())),
        Err(e) => {
            log::warn!("state: {e}; not ready until it answers (retrying)");
            let retry = Arc::clone(&db);
            std::thread::Builder::new()
                .name("state-db-connect".into())
                .spawn(move || connect_later(&retry))
                .map_err(|e| Error::Other(format!("cannot start a thread: {e}")))?;
        }
    }
    Ok(db)
}

/// Try to migrate `db` until it works (or its schema is refused), waiting
/// 1s, 2s, 4s … 30s between attempts.
fn connect_later(db: &Db) {
    let mut wait = std::time::Duration::from_secs(1);
    loop {
        std::thread::sleep(wait);
        match db.migrate() {
            Ok(()) => return log::info!("state: PostgreSQL at {} reached", db.url()),
            Err(e @ DbError::Schema(_)) => return log::error!("state: {e}"),
            Err(e) => log::warn!("state: {e}; retrying in {}s", wait.as_secs()),
        }
        wait = (wait * 2).min(std::time::Duration::from_secs(30));
    }
}

/// Note the last successful run of each function the run log still holds
/// (for `expect_every`: a restart does not make a function overdue).
///
/// Every finished run is looked at (a run started earlier may have
/// finished later), a page of [`SEED_PAGE`] at a time: read at once, the
/// finished runs of a log of 1,000,000 runs held about 300 MB at start-up.
fn seed_successes(store: &crate::state::store::RunStore, metrics: &Metrics, retention: usize) {
    let mut page = crate::state::store::RunFilter {
        state: Some(crate::state::record::RunState::Finished),
        limit: SEED_PAGE.min(retention),
        ..Default::default()
    };
    let mut seen = 0;
    loop {
        let runs = store.list(&page);
        for r in &runs.runs {
            if let (Some(id), Some(at)) = (r.owner.program(), r.finished_at) {
                metrics.succeeded(id, &r.function, at.timestamp());
            }
        }
        seen += runs.runs.len();
        match runs.next {
            Some(cursor) if seen < retention => page.before = Some(cursor),
            _ => break,
        }
    }
}

/// Finished runs read at a time by [`seed_successes`].
const SEED_PAGE: usize = 1000;

/// The ACME manager of `[acme]`, not started.
fn new_acme(server: &config::Server) -> Option<Arc<acme::Acme>> {
    let settings = server.acme.as_deref()?;
    let state = State::new(&server.state_dir, &server.shared_state_dir);
    Some(acme::Acme::new(settings.clone(), state.acme_files()))
}

/// Start `acme`'s thread once the listeners answer: each new certificate
/// is loaded into `certs`, the HTTPS store.
fn start_acme(app: &App, acme: Arc<acme::Acme>, certs: &Arc<tls::Certs>) -> Result<(), Error> {
    let store = Arc::clone(certs);
    acme.on_installed(Box::new(move || {
        store.reload().map(|_| ()).map_err(|e| e.to_string())
    }));
    acme.start().map_err(|source| Error::Io {
        path: acme.certificate_path(),
        source,
    })?;
    let _ = app.acme.set(acme);
    Ok(())
}

/// Serve `listener`: each request is answered on its connection's thread
/// ([`handle`]), counted in `in_flight` while it is; over TLS with the
/// certificates of `certs` when given.
fn start_http(
    app: &Arc<App>,
    listener: tiny_http::Listener,
    in_flight: &Arc<AtomicUsize>,
    certs: Option<&Arc<tls::Certs>>,
) -> Result<tiny_http::Server, Error> {
    let handler: tiny_http::Handler = {
        let (app, in_flight) = (Arc::clone(app), Arc::clone(in_flight));
        Arc::new(move |rq| {
            in_flight.fetch_add(1, Ordering::SeqCst);
            handle(&app, rq);
            in_flight.fetch_sub(1, Ordering::SeqCst);
        })
    };
    let server_cfg = &app.config().server;
    let mut limits = limits(server_cfg);
    if let Some(certs) = certs {
        limits.tls = Some(tiny_http::Tls {
            config: tls::server_config(certs).map_err(Error::Other)?,
            handshake_timeout: server_cfg.tls.handshake_timeout,
            plain_http_response: Response::from(ApiError::HttpsRequired).to_raw(),
        });
        let _ = app.tls.set(Arc::clone(certs));
    }
    let server = tiny_http::Server::from_listener_with_handler(listener, limits, handler)
        .map_err(|e| Error::Other(format!("cannot start the HTTP server: {e}")))?;
    let _ = app.connections.set(server.open_connections_counter());
    Ok(server)
}

/// The `redirect_http` listener, when set: plain HTTP answered with
/// redirects to this HTTPS port (`https_port`) or `public_url`.
fn start_redirect(
    app: &App,
    https_port: u16,
    acme: Option<&Arc<acme::Acme>>,
) -> Result<Option<tiny_http::Server>, Error> {
    let cfg = app.config();
    let Some(addr) = &cfg.server.tls.redirect_http else {
        return Ok(None);
    };
    let listener = listen::bind_tcp(addr)?;
    let target = tls::redirect::Target {
        fixed: tls::redirect::fixed_base(cfg.server.public_url.as_deref()),
        https_port,
    };
    let local = listener.local_addr().map_err(|source| Error::Bind {
        addr: addr.clone(),
        source,
    })?;
    // ACME's HTTP-01 answers come first there.
    let challenges = acme.map(|a| {
        let pending = a.challenges();
        Arc::new(move |token: &str| pending.get(token)) as tls::redirect::Challenges
    });
    let server = tls::redirect::start(listener, limits(&cfg.server), target, challenges)
        .map_err(Error::Other)?;
    log::info!("redirecting http://{local} to HTTPS");
    Ok(Some(server))
}

/// The first step of a graceful stop: for `drain_delay`, `/healthz`
/// answers 503 `draining` while every request is still served, so that a
/// balancer checking it stops sending before the listener closes. A second
/// SIGTERM or SIGINT ends the wait early; SIGHUP still reloads.
fn drain(app: &App, reload: &mpsc::Sender<reload::Trigger>) {
    let delay = app.config().server.drain_delay;
    if delay.is_zero() {
        return;
    }
    log::info!("draining: /healthz answers 503 for {delay:?}, then trigd stops accepting");
    app.draining.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + delay;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match sys::wait_signal_timeout(left) {
            None => return,
            Some(Signal::Hup) => {
                let _ = reload.send(reload::Trigger::Signal);
            }
            Some(_) => {
                log::info!("second stop signal: ending the drain early");
                return;
            }
        }
    }
}

/// Stack of each connection thread, which reads requests and answers
/// them: sync runs, argon2 logins and JSON results included. Measured need
/// of the deepest of these (a sync run printing the deepest JSON serde_json
/// accepts, then a login): 45-48 KiB in a release build, 257-264 KiB in a
/// debug build; `server_stack_tests.rs` checks that half of this suffices.
/// Only the pages a thread touches take memory.
pub const CONNECTION_STACK: usize = 1024 * 1024;

/// Connection and request bounds for the (patched) tiny_http, with the
/// answers it gives by itself taken from [`ApiError`].
fn limits(s: &config::Server) -> tiny_http::ServerLimits {
    let overload = ApiError::Busy {
        retry_after: 1,
        msg: "Too many open connections. Retry shortly.".into(),
    };
    let body = |e: ApiError| Response::from(e).body;
    tiny_http::ServerLimits {
        min_threads: s.workers,
        max_connections: s.max_connections,
        head: tiny_http::HeadLimits {
            max_request_line: s.max_url_bytes,
            max_header_bytes: s.max_header_bytes,
            max_headers: 100,
            timeout: s.request_timeout,
        },
        socket_timeout: s.request_timeout,
        overload_response: Response::from(overload).to_raw(),
        thread_stack: CONNECTION_STACK,
        refusals: tiny_http::Refusals {
            on_refusal: Some(Arc::new(log_refusal)),
            content_type: Response::from(ApiError::BadRequest)
                .content_type()
                .to_string(),
            bad_request: body(ApiError::BadRequest),
            request_timeout: body(ApiError::RequestTimeout),
            uri_too_long: body(ApiError::UriTooLong),
            headers_too_large: body(ApiError::HeadersTooLarge),
        },
        tls: None,
    }
}

/// Answer one request and write its access-log line.
fn handle(app: &App, mut rq: tiny_http::Request) {
    let started = Instant::now();
    let max_body = app.config().server.max_body_bytes;
    let (req, resp) = match read_request(&mut rq, max_body) {
        Ok(req) if app.closing.load(Ordering::SeqCst) => (Ok(req), ApiError::ShuttingDown.into()),
        Ok(mut req) => {
            let resp = catch_unwind(AssertUnwindSafe(|| routes::handle(app, &mut req)))
                .unwrap_or_else(|_| {
                    log::error!("handler panicked on {} {}", req.method, req.path);
                    ApiError::Internal.into()
                });
            (Ok(req), resp)
        }
        Err(ApiError::NotFound)
            if crate::compat::webhook::under_prefix(&app.config(), rq.url()) =>
        {
            (Err(()), crate::compat::webhook::not_found())
        }
        Err(e) => (Err(()), Response::from(e)),
    };
    app.runner.metrics.http(resp.status);
    if !is_watchdog_check(&req) {
        log_access(&rq, &req, &resp, started);
    }
    drop(req);
    let sent = match resp.stream.as_ref().and_then(|s| s.take()) {
        // No length: tiny_http sends it chunked, a chunk per piece read.
        Some(body) => {
            let headers: Vec<tiny_http::Header> = resp
                .headers
                .iter()
                .filter_map(|(k, v)| tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()).ok())
                .collect();
            rq.respond(tiny_http::Response::new(
                resp.status.into(),
                headers,
                body,
                None,
                None,
            ))
        }
        None => rq.respond_bytes(resp.status, &resp.headers, resp.body),
    };
    if let Err(e) = sent {
        log::debug!("client went away before the response: {e}");
    }
}

/// Whether `req` is the watchdog's own check (`http::systemd`), which is
/// not logged: one line every few seconds would bury the others.
fn is_watchdog_check(req: &Result<Request, ()>) -> bool {
    req.as_ref().is_ok_and(|r| {
        r.path == "/healthz" && r.header("user-agent") == Some(systemd::WATCHDOG_AGENT)
    })
}

/// The access-log line of a request tiny_http refused while its head was
/// read (400, 408, 414, 431): `-` for the method and the path it did not
/// read, `0ms`.
fn log_refusal(status: u16, addr: Option<std::net::SocketAddr>) {
    logging::access(|line| {
        push_remote(line, addr.map_or(Peer::Unknown, Peer::Ip));
        let _ = write!(line, " - - {status} 0ms");
    });
}

/// Write the access-log line of a request answered `resp`.
fn log_access(
    rq: &tiny_http::Request,
    req: &Result<Request, ()>,
    resp: &Response,
    started: Instant,
) {
    logging::access(|line| {
        push_remote(line, peer(rq));
        line.push(' ');
        line.push_str(rq.method().as_str());
        line.push(' ');
        match req {
            Ok(req) => {
                let _ = req.log_target().write_to(line);
            }
            // The query of a request that could not be read is not logged.
            Err(()) => line.push_str(rq.url().split('?').next().unwrap_or("")),
        }
        let _ = write!(line, " {} {}ms", resp.status, started.elapsed().as_millis());
        if let Some(run) = &resp.run {
            line.push_str(" run=");
            line.push_str(run);
        }
    });
}

/// The other end of `rq`'s connection: tiny_http knows the address of a
/// TCP peer and none for a peer on a Unix socket.
fn peer(rq: &tiny_http::Request) -> Peer {
    rq.remote_addr().map_or(Peer::Unix, |a| Peer::Ip(*a))
}

/// Append the peer for an access-log line: its address, `unix`, or `-`
/// when unknown.
fn push_remote(line: &mut String, remote: Peer) {
    match remote {
        Peer::Ip(addr) => {
            let _ = write!(line, "{}", addr.ip());
        }
        Peer::Unix => line.push_str("unix"),
        Peer::Unknown => line.push('-'),
    }
}

/// Convert a tiny_http request into a [`Request`], reading at most
/// `max_body` bytes of body.
fn read_request(rq: &mut tiny_http::Request, max_body: usize) -> Result<Request, ApiError> {
    let mut req = Request::new(rq.method().as_str(), rq.url())?;
    // Moved, not copied: the names lower-cased in place.
    req.headers = rq
        .take_headers()
        .into_iter()
        .map(|h| {
            let mut name = h.field.into_string();
            name.make_ascii_lowercase();
            (name, h.value.into())
        })
        .collect();
    req.remote = peer(rq);
    if rq.body_length().is_some_and(|n| n > max_body) {
        return Err(ApiError::PayloadTooLarge { limit: max_body });
    }
    let mut body = Vec::new();
    rq.as_reader()
        .take(max_body as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|e| match e.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => ApiError::RequestTimeout,
            _ => ApiError::InvalidParameter {
                name: "body".into(),
                msg: format!("The request body could not be read: {e}."),
            },
        })?;
    if body.len() > max_body {
        return Err(ApiError::PayloadTooLarge { limit: max_body });
    }
    req.body = body;
    Ok(req)
}

#[cfg(test)]
#[path = "server_stack_tests.rs"]
mod stack_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    #[test]
    fn access_lines_name_the_peer_or_a_dash() {
        let mut line = String::new();
        push_remote(
            &mut line,
            Peer::Ip(SocketAddr::from(([10, 2, 30, 255], 80))),
        );
        push_remote(&mut line, Peer::Unknown);
        push_remote(&mut line, Peer::Ip("[2001:db8::7]:80".parse().unwrap()));
        push_remote(&mut line, Peer::Unix);
        assert_eq!(line, "10.2.30.255-2001:db8::7unix");
    }
}
