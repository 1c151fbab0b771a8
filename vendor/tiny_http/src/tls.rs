//! (trigd patch) TLS on accepted connections with rustls 0.23, the version
//!  the application links (upstream: optional openssl and rustls 0.20
//!  modes, removed). The handshake runs on the connection's own thread,
//!  never on the accept thread, and under a deadline: a client that sends
//!  nothing, or stops in the middle of its handshake, holds only its own
//!  thread, and only until `Tls::handshake_timeout`.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustls::{ServerConfig, ServerConnection, StreamOwned};

use crate::connection::Connection;

/// TLS settings of a server (`ServerLimits::tls`).
#[derive(Debug, Clone)]
pub struct Tls {
    /// The rustls configuration: certificates (a resolver may swap them
    ///  while the server runs), protocol versions, ALPN.
    pub config: Arc<ServerConfig>,
    /// Time a client has, from the accept, to complete its handshake.
    pub handshake_timeout: Duration,
    /// Raw bytes (status line, headers, body) sent to a client that speaks
    ///  plain HTTP to the TLS port, before the connection is closed.
    pub plain_http_response: Vec<u8>,
}

/// The first byte of a TLS handshake record (a ClientHello).
const HANDSHAKE_RECORD: u8 = 0x16;

/// Bytes of a plain-HTTP request read (and dropped) after answering it, so
///  that closing does not reset the connection before the answer arrives.
const PLAIN_DRAIN: usize = 64 * 1024;

type Owned = StreamOwned<ServerConnection, Connection>;

/// A TLS connection, shared by the read and the write half of a client
///  connection (`RefinedTcpStream`). Both halves are used from the
///  connection's one thread, so the lock is never contended.
#[derive(Clone)]
pub(crate) struct TlsStream(Arc<Mutex<Owned>>);

impl TlsStream {
    fn lock(&self) -> MutexGuard<'_, Owned> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn peer_addr(&self) -> io::Result<Option<SocketAddr>> {
        self.lock().sock.peer_addr()
    }

    /// Shutting down the write side sends `close_notify` first, so that
    ///  the client can tell the end of the connection from a truncation.
    pub(crate) fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        let mut guard = self.lock();
        let s = &mut *guard;
        if how != Shutdown::Read {
            s.conn.send_close_notify();
            while s.conn.wants_write() {
                if s.conn.write_tls(&mut s.sock).is_err() {
                    break;
                }
            }
        }
        s.sock.shutdown(how)
    }
}

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.lock().read(buf)
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.lock().write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.lock().flush()
    }
}

/// Run the server side of a handshake on `sock`, within
///  `tls.handshake_timeout`; the TLS stream, with the socket's timeouts set
///  back to `socket_timeout`. `None` when the client is not a TLS client or
///  fails or does not finish its handshake in time: the socket is closed
///  (after a plain-HTTP answer, or a TLS alert when rustls has one).
pub(crate) fn accept(mut sock: Connection, tls: &Tls, socket_timeout: Duration) -> Option<TlsStream> {
    let deadline = Instant::now() + tls.handshake_timeout;
    let mut first = [0u8; 1];
    if !matches!(read_by(&mut sock, deadline, &mut first), Ok(1)) {
        return None;
    }
    match first[0] {
        HANDSHAKE_RECORD => {}
        // A request line starts with an upper-case method: plain HTTP.
        b'A'..=b'Z' => {
            answer_plain(sock, &tls.plain_http_response);
            return None;
        }
        _ => return None,
    }
    let mut conn = ServerConnection::new(Arc::clone(&tls.config)).ok()?;
    conn.read_tls(&mut &first[..]).ok()?;
    if let Err(e) = handshake(&mut conn, &mut sock, deadline) {
        log::debug!("TLS handshake failed: {}", e);
        return None;
    }
    sock.set_timeouts(socket_timeout);
    Some(TlsStream(Arc::new(Mutex::new(StreamOwned::new(conn, sock)))))
}

/// Exchange handshake records until the handshake is done or `deadline`.
///  A read or write woken by a signal (`EINTR`, see `client.rs`
///  `DeadlineReader`) is tried again within the same deadline.
fn handshake(conn: &mut ServerConnection, sock: &mut Connection, deadline: Instant) -> io::Result<()> {
    loop {
        while conn.wants_write() {
            arm(sock, deadline)?;
            again(conn.write_tls(sock))?;
        }
        if !conn.is_handshaking() {
            return Ok(());
        }
        arm(sock, deadline)?;
        match again(conn.read_tls(sock))? {
            Some(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Some(_) => {}
            None => continue,
        }
        if let Err(e) = conn.process_new_packets() {
            // rustls has queued an alert saying why: send it, then close.
            // It may sit behind records of the server's flight (a ServerHello
            // before `no_application_protocol`), and one `write_tls` sends
            // one record here: write until nothing is queued.
            while conn.wants_write() {
                match arm(sock, deadline).and_then(|()| again(conn.write_tls(sock))) {
                    Ok(Some(0)) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            return Err(io::Error::new(ErrorKind::InvalidData, e));
        }
    }
}

/// `None` for an `EINTR` (try again), else the result.
fn again(r: io::Result<usize>) -> io::Result<Option<usize>> {
    match r {
        Err(e) if e.kind() == ErrorKind::Interrupted => Ok(None),
        r => r.map(Some),
    }
}

/// Set the socket's timeouts to what is left until `deadline`.
fn arm(sock: &Connection, deadline: Instant) -> io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(ErrorKind::TimedOut, "TLS handshake took too long"));
    }
    sock.set_timeouts(left);
    Ok(())
}

/// Read into `buf` before `deadline`; a signal's `EINTR` reads again.
fn read_by(sock: &mut Connection, deadline: Instant, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        arm(sock, deadline)?;
        match sock.read(buf) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// Answer a plain-HTTP client with `response`, then read what it sent (up
///  to `PLAIN_DRAIN` bytes, for at most a second) so that the close does not
///  reset the connection before the answer is read.
fn answer_plain(mut sock: Connection, response: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(1);
    if arm(&sock, deadline).is_err() || sock.write_all(response).is_err() {
        return;
    }
    let _ = sock.shutdown(Shutdown::Write);
    let mut buf = [0u8; 4096];
    let mut drained = 0;
    while drained < PLAIN_DRAIN {
        match read_by(&mut sock, deadline, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
}
