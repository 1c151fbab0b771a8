//! The HTTP server: a tiny_http listener, a fixed pool of worker threads,
//! one access-log line per request, and the shutdown sequence.
//!
//! Each worker converts a tiny_http request into a plain [`Request`] (body
//! bounded by `max_body_bytes`), calls [`routes::handle`] inside
//! `catch_unwind` so that a bug answers 500 instead of killing the server,
//! logs, and responds. Workers poll with a short timeout so they notice
//! shutdown without needing one `unblock()` per thread.

use std::io::{self, Read, Write};
use std::net::{Ipv6Addr, SocketAddr, TcpListener, ToSocketAddrs};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::app::App;
use crate::config;
use crate::error::Error;
use crate::http::{ApiError, Request};
use crate::metrics::Metrics;
use crate::reload;
use crate::routes;
use crate::runner::Runner;
use crate::store::RunStore;
use crate::sys::{self, Signal};

/// `trigd serve`: load, bind, print `listening on http://ADDR`, serve until
/// SIGTERM/SIGINT, then shut down gracefully.
///
/// # Errors
/// The config does not load, the address cannot be bound, or the state dir
/// cannot be opened.
pub fn serve(config_path: &Path, listen: Option<String>) -> Result<(), Error> {
    let cfg = config::load(config_path).map_err(Error::Config)?;
    let addr = listen.unwrap_or_else(|| cfg.server.listen.clone());
    let listener = bind(&addr)?;
    let local = listener.local_addr().map_err(|source| Error::Bind {
        addr: addr.clone(),
        source,
    })?;
    let state_dir = cfg.server.state_dir.clone();
    let store =
        RunStore::open(&state_dir, cfg.server.run_retention).map_err(|source| Error::Io {
            path: state_dir.join("runs.log"),
            source,
        })?;
    let store = Arc::new(store);
    let runner = Runner::new(Some(Arc::clone(&store)), Arc::new(Metrics::default()))
        .map_err(|e| Error::Other(format!("cannot create the runner: {e}")))?;
    let (workers, grace) = (cfg.server.workers, cfg.server.shutdown_grace);
    let nofile = sys::raise_nofile_limit();
    let app = Arc::new(App::new(cfg, store, Arc::new(runner)));
    let server =
        tiny_http::Server::from_listener_with_limits(listener, None, limits(&app.config().server))
            .map_err(|e| Error::Other(format!("cannot start the HTTP server: {e}")))?;
    let server = Arc::new(server);
    let handles: Vec<_> = (0..workers)
        .map(|i| {
            let (app, server) = (Arc::clone(&app), Arc::clone(&server));
            thread::Builder::new()
                .name(format!("http-{i}"))
                .spawn(move || worker(&app, &server))
                .map_err(|e| Error::Other(format!("cannot start worker threads: {e}")))
        })
        .collect::<Result<_, _>>()?;
    let reload = reload::start(Arc::clone(&app), config_path.to_path_buf());
    println!("listening on http://{local}");
    let _ = io::stdout().flush();
    log::info!("listening on http://{local} with {workers} workers (open files limit {nofile})");
    while sys::wait_signal() == Signal::Hup {
        log::info!("SIGHUP: reloading the configuration");
        let _ = reload.send(reload::Trigger::Signal);
    }
    log::info!("shutting down: waiting up to {grace:?} for runs to finish");
    app.closing.store(true, Ordering::SeqCst);
    app.runner.shutdown(grace);
    for h in handles {
        let _ = h.join();
    }
    log::info!("stopped");
    Ok(())
}

/// Connection and request bounds for the (patched) tiny_http.
fn limits(s: &config::Server) -> tiny_http::ServerLimits {
    let body = r#"{"Error":"Too many open connections. Retry shortly.","Code":"busy"}"#;
    let overload = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n\
         Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tiny_http::ServerLimits {
        max_connections: s.max_connections,
        head: tiny_http::HeadLimits {
            max_request_line: s.max_url_bytes,
            max_header_bytes: s.max_header_bytes,
            max_headers: 100,
            timeout: s.request_timeout,
        },
        socket_timeout: s.request_timeout,
        overload_response: overload.into_bytes(),
    }
}

/// Resolve and bind `addr` (`host:port`).
fn bind(addr: &str) -> Result<TcpListener, Error> {
    let err = |source| Error::Bind {
        addr: addr.to_string(),
        source,
    };
    let addrs = resolve(addr).map_err(err)?;
    TcpListener::bind(&addrs[..]).map_err(err)
}

/// The socket addresses of `host:port`. IP literals, `localhost` and an
/// empty host (all interfaces) are resolved here, without the C resolver: a
/// static glibc binary cannot load NSS modules, so `getaddrinfo` may fail
/// on a host without a matching glibc. Other names go to the resolver.
fn resolve(addr: &str) -> io::Result<Vec<SocketAddr>> {
    if let Ok(a) = addr.parse::<SocketAddr>() {
        return Ok(vec![a]);
    }
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "expected HOST:PORT, e.g. 127.0.0.1:8080",
        )
    };
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    match host {
        "" | "*" => Ok(vec![SocketAddr::from(([0, 0, 0, 0], port))]),
        h if h.eq_ignore_ascii_case("localhost") => Ok(vec![
            SocketAddr::from(([127, 0, 0, 1], port)),
            SocketAddr::from((Ipv6Addr::LOCALHOST, port)),
        ]),
        _ => Ok(addr.to_socket_addrs()?.collect()),
    }
}

/// One worker: take requests until shutdown.
fn worker(app: &App, server: &tiny_http::Server) {
    while !app.closing.load(Ordering::SeqCst) {
        match server.recv_timeout(Duration::from_millis(200)) {
            Ok(Some(rq)) => handle(app, rq),
            Ok(None) => {}
            Err(e) => {
                log::error!("accepting a request failed: {e}");
                thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Answer one request and write its access-log line.
fn handle(app: &App, mut rq: tiny_http::Request) {
    let started = Instant::now();
    let max_body = app.config().server.max_body_bytes;
    let (target, resp) = match read_request(&mut rq, max_body) {
        Ok(req) => {
            let resp =
                catch_unwind(AssertUnwindSafe(|| routes::handle(app, &req))).unwrap_or_else(|_| {
                    log::error!("handler panicked on {} {}", req.method, req.path);
                    ApiError::Internal.into()
                });
            (req.log_target(), resp)
        }
        Err(e) => (
            rq.url().split('?').next().unwrap_or("").to_string(),
            e.into(),
        ),
    };
    app.runner.metrics.http(resp.status);
    let remote = rq
        .remote_addr()
        .map_or_else(|| "-".to_string(), |a| a.ip().to_string());
    log::info!(
        target: "access",
        "{remote} {} {target} {} {}ms{}",
        rq.method(),
        resp.status,
        started.elapsed().as_millis(),
        resp.run.as_deref().map(|r| format!(" run={r}")).unwrap_or_default()
    );
    let mut out = tiny_http::Response::from_data(resp.body).with_status_code(resp.status);
    for (k, v) in &resp.headers {
        if let Ok(h) = tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()) {
            out.add_header(h);
        }
    }
    if let Err(e) = rq.respond(out) {
        log::debug!("client went away before the response: {e}");
    }
}

/// Convert a tiny_http request into a [`Request`], reading at most
/// `max_body` bytes of body.
fn read_request(rq: &mut tiny_http::Request, max_body: usize) -> Result<Request, ApiError> {
    let mut req = Request::new(rq.method().as_str(), rq.url())?;
    req.headers = rq
        .headers()
        .iter()
        .map(|h| {
            (
                h.field.as_str().as_str().to_ascii_lowercase(),
                h.value.as_str().to_string(),
            )
        })
        .collect();
    req.remote = rq.remote_addr().copied();
    if rq.body_length().is_some_and(|n| n > max_body) {
        return Err(ApiError::PayloadTooLarge { limit: max_body });
    }
    let mut body = Vec::new();
    rq.as_reader()
        .take(max_body as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|_| ApiError::InvalidParameter {
            name: "body".into(),
            msg: "The request body could not be read.".into(),
        })?;
    if body.len() > max_body {
        return Err(ApiError::PayloadTooLarge { limit: max_body });
    }
    req.body = body;
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_without_the_c_resolver() {
        let v4 = |port| SocketAddr::from(([127, 0, 0, 1], port));
        assert_eq!(resolve("127.0.0.1:0").unwrap(), vec![v4(0)]);
        assert_eq!(resolve("[::1]:80").unwrap()[0].port(), 80);
        assert_eq!(resolve("localhost:8080").unwrap()[0], v4(8080));
        let any = SocketAddr::from(([0, 0, 0, 0], 9000));
        assert_eq!(resolve(":9000").unwrap(), vec![any]);
        assert!(resolve("localhost").is_err());
        assert!(resolve("localhost:http").is_err());
    }
}
