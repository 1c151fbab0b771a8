//! # Simple usage
//!
//! ## Creating the server
//!
//! The easiest way to create a server is to call `Server::http()`.
//!
//! The `http()` function returns an `IoResult<Server>` which will return an error
//! in the case where the server creation fails (for example if the listening port is already
//! occupied).
//!
//! ```no_run
//! let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! ```
//!
//! A newly-created `Server` will immediately start listening for incoming connections and HTTP
//! requests.
//!
//! ## Receiving requests
//!
//! Calling `server.recv()` will block until the next request is available.
//! This function returns an `IoResult<Request>`, so you need to handle the possible errors.
//!
//! ```no_run
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//!
//! loop {
//!     // blocks until the next request is received
//!     let request = match server.recv() {
//!         Ok(rq) => rq,
//!         Err(e) => { println!("error: {}", e); break }
//!     };
//!
//!     // do something with the request
//!     // ...
//! }
//! ```
//!
//! In a real-case scenario, you will probably want to spawn multiple worker tasks and call
//! `server.recv()` on all of them. Like this:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use std::thread;
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! let server = Arc::new(server);
//! let mut guards = Vec::with_capacity(4);
//!
//! for _ in (0 .. 4) {
//!     let server = server.clone();
//!
//!     let guard = thread::spawn(move || {
//!         loop {
//!             let rq = server.recv().unwrap();
//!
//!             // ...
//!         }
//!     });
//!
//!     guards.push(guard);
//! }
//! ```
//!
//! If you don't want to block, you can call `server.try_recv()` instead.
//!
//! ## Handling requests
//!
//! The `Request` object returned by `server.recv()` contains informations about the client's request.
//! The most useful methods are probably `request.method()` and `request.url()` which return
//! the requested method (`GET`, `POST`, etc.) and url.
//!
//! To handle a request, you need to create a `Response` object. See the docs of this object for
//! more infos. Here is an example of creating a `Response` from a file:
//!
//! ```no_run
//! # use std::fs::File;
//! # use std::path::Path;
//! let response = tiny_http::Response::from_file(File::open(&Path::new("image.png")).unwrap());
//! ```
//!
//! All that remains to do is call `request.respond()`:
//!
//! ```no_run
//! # use std::fs::File;
//! # use std::path::Path;
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! # let request = server.recv().unwrap();
//! # let response = tiny_http::Response::from_file(File::open(&Path::new("image.png")).unwrap());
//! let _ = request.respond(response);
//! ```
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![allow(clippy::match_like_matches_macro)]

use std::error::Error;
use std::io::Error as IoError;
use std::io::ErrorKind as IoErrorKind;
use std::io::Result as IoResult;
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use client::ClientConnection;
use connection::Connection;
use util::MessagesQueue;

pub use client::HeadLimits;
pub use common::{HTTPVersion, Header, HeaderField, Method, StatusCode};
pub use connection::{ConfigListenAddr, ListenAddr, Listener};
pub use request::{ReadWrite, Request};
pub use response::{Response, ResponseBox};
pub use test::TestRequest;
pub use tls::Tls;

mod client;
mod common;
mod connection;
mod request;
mod response;
mod test;
mod tls;
mod util;

/// The main class of this library.
///
/// Destroying this object will immediately close the listening socket and the reading
///  part of all the client's connections. Requests that have already been returned by
///  the `recv()` function will not close and the responses will be transferred to the client.
pub struct Server {
    // should be false as long as the server exists
    // when set to true, all the subtasks will close within a few hundreds ms
    close: Arc<AtomicBool>,

    // queue for messages received by child threads
    messages: Arc<MessagesQueue<Message>>,

    // result of TcpListener::local_addr()
    listening_addr: ListenAddr,

    // (trigd patch) connections open now
    open: Arc<AtomicUsize>,
}

/// (trigd patch) Counts one open connection until dropped.
struct OpenGuard(Arc<AtomicUsize>);

impl OpenGuard {
    fn new(open: &Arc<AtomicUsize>) -> OpenGuard {
        open.fetch_add(1, Relaxed);
        OpenGuard(Arc::clone(open))
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// (trigd patch) Answer a connection past the cap without blocking the
///  accept thread, then close it (TCP or Unix: upstream answered only TCP).
fn refuse(sock: Connection, response: &[u8]) {
    sock.refuse(&with_server_and_date(response));
}

/// (trigd patch) `response` (raw bytes given once, at start) with the
///  `Server` and `Date` headers every other answer carries, after its
///  status line.
fn with_server_and_date(response: &[u8]) -> Vec<u8> {
    let Some(end) = response.windows(2).position(|w| w == b"\r\n") else {
        return response.to_vec();
    };
    let mut out = Vec::with_capacity(response.len() + 64);
    out.extend_from_slice(&response[..end + 2]);
    out.extend_from_slice(b"Server: ");
    out.extend_from_slice(response::SERVER.as_bytes());
    out.extend_from_slice(b"\r\nDate: ");
    response::push_date(&mut out);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&response[end + 2..]);
    out
}

enum Message {
    Error(IoError),
    NewRequest(Request),
}

impl From<IoError> for Message {
    fn from(e: IoError) -> Message {
        Message::Error(e)
    }
}

impl From<Request> for Message {
    fn from(rq: Request) -> Message {
        Message::NewRequest(rq)
    }
}

// (trigd patch) Server implements Sync and Send, checked at compile time
//  (upstream: a trait that newer compilers report as unused)
const _: fn() = || {
    fn sync_and_send<T: Sync + Send>() {}
    sync_and_send::<Server>();
};

pub struct IncomingRequests<'a> {
    server: &'a Server,
}

/// (trigd patch) The accept thread: accepts connections and gives each a
///  thread of the pool, where its TLS handshake (if any) and its requests
///  run (upstream: one closure inside `Server::new`, with the TLS handshake
///  on the accept thread).
struct Acceptor {
    listener: Listener,
    max_connections: usize,
    overload_response: Vec<u8>,
    min_threads: usize,
    thread_stack: usize,
    setup: Arc<Setup>,
    open: Arc<AtomicUsize>,
    close: Arc<AtomicBool>,
}

/// (trigd patch) What a connection's thread needs to serve it.
struct Setup {
    head: HeadLimits,
    socket_timeout: Duration,
    tls: Option<Tls>,
    refusals: Arc<Refusals>,
    handler: Option<Handler>,
    messages: Arc<MessagesQueue<Message>>,
}

impl Acceptor {
    fn run(self) {
        // a tasks pool is used to dispatch the connections into threads
        let tasks_pool = util::TaskPool::new(self.min_threads, self.thread_stack);

        log::debug!("Running accept thread");
        while !self.close.load(Relaxed) {
            match self.listener.accept() {
                // (trigd patch) past the cap: answer and close at once
                Ok((sock, _)) if self.open.load(Relaxed) >= self.max_connections => {
                    refuse(sock, &self.overload_response);
                }
                Ok((sock, _)) => {
                    // (trigd patch) count the connection while it lives
                    let guard = OpenGuard::new(&self.open);
                    let setup = Arc::clone(&self.setup);
                    let mut sock = Some(sock);
                    tasks_pool.spawn(Box::new(move || {
                        let _guard = &guard;
                        if let Some(sock) = sock.take() {
                            setup.serve(sock);
                        }
                    }));
                }

                // (trigd patch) an accept error (EMFILE when descriptors
                //  run out, ECONNABORTED, ...) no longer ends the accept
                //  thread for good: wait a moment and accept again
                Err(e) => {
                    if self.close.load(Relaxed) {
                        break;
                    }
                    log::warn!("Error accepting new client: {}", e);
                    thread::sleep(Duration::from_millis(20));
                }
            }
        }
        log::debug!("Terminating accept thread");
    }
}

impl Setup {
    /// Serve an accepted socket on the calling (pool) thread: its TLS
    ///  handshake if the server has TLS, then its requests.
    fn serve(&self, sock: Connection) {
        match self.client(sock) {
            Ok(Some(client)) => serve_connection(client, self.handler.as_ref(), &self.messages),
            Ok(None) => {}
            // (trigd patch) duplicating the socket can fail (EMFILE): this
            //  connection is closed, the others go on
            Err(e) => log::warn!("Error setting up a connection: {}", e),
        }
    }

    /// The connection of an accepted socket; `None` when it is a TLS
    ///  socket whose handshake failed or timed out (the socket is closed).
    fn client(&self, sock: Connection) -> IoResult<Option<ClientConnection>> {
        // (trigd patch) timeouts on Unix connections too; TCP_NODELAY
        sock.prepare(self.socket_timeout);
        let halves = match self.tls {
            None => util::RefinedTcpStream::new(sock),
            Some(ref tls) => match tls::accept(sock, tls, self.socket_timeout) {
                Some(stream) => util::RefinedTcpStream::new(stream),
                None => return Ok(None),
            },
        };
        let (read_closable, write_closable) = halves?;
        Ok(Some(ClientConnection::new(
            write_closable,
            read_closable,
            self.head,
            Arc::clone(&self.refusals),
        )))
    }
}

/// Answer the requests of one connection, on the calling (pool) thread.
fn serve_connection(
    client: ClientConnection,
    handler: Option<&Handler>,
    messages: &Arc<MessagesQueue<Message>>,
) {
    // (trigd patch) handler mode: answer on this thread
    if let Some(handler) = handler {
        for rq in client {
            handler(rq);
        }
        return;
    }
    // Synchronization is needed for HTTPS requests to avoid a deadlock
    if client.secure() {
        let (sender, receiver) = mpsc::channel();
        for rq in client {
            messages.push(rq.with_notify_sender(sender.clone()).into());
            receiver.recv().unwrap();
        }
    } else {
        for rq in client {
            messages.push(rq.into());
        }
    }
}

/// Represents the parameters required to create a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The addresses to try to listen to.
    pub addr: ConfigListenAddr,
}

/// (trigd patch) A function that answers requests on the connection's own
///  thread (see `Server::from_listener_with_handler`).
pub type Handler = Arc<dyn Fn(Request) + Send + Sync + 'static>;

/// (trigd patch) Bounds on connections and on reading requests.
#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// Connection threads kept ready while idle.
    pub min_threads: usize,
    /// Open connections at most; a connection past it gets
    ///  `overload_response` and is closed at once.
    pub max_connections: usize,
    /// Bounds on one request head, and the time to read it.
    pub head: HeadLimits,
    /// Read and write timeout of each socket (an idle keep-alive
    ///  connection is closed after it).
    pub socket_timeout: Duration,
    /// Raw bytes (status line, headers, body) sent to a connection refused
    ///  for being past `max_connections`.
    pub overload_response: Vec<u8>,
    /// Stack size of each connection thread, in bytes. In handler mode the
    ///  handler runs on it.
    pub thread_stack: usize,
    /// Bodies of the answers to requests refused while reading them.
    pub refusals: Refusals,
    /// (trigd patch) TLS on every connection, when set.
    pub tls: Option<Tls>,
}

/// (trigd patch) Told of each request refused while its head was read:
///  the status sent and the client's address (`None` on a Unix socket),
///  so that the application can log it as it logs the requests it answers.
pub type RefusalHook = Arc<dyn Fn(u16, Option<std::net::SocketAddr>) + Send + Sync>;

/// (trigd patch) The bodies of the answers the server gives by itself, to
///  requests refused while their head is read (the application is not
///  called). Empty bodies by default.
#[derive(Clone, Default)]
pub struct Refusals {
    /// Called after each such answer, when set.
    pub on_refusal: Option<RefusalHook>,
    /// `Content-Type` of the bodies below; no header when empty.
    pub content_type: String,
    /// 400: the request line or a header is not valid HTTP/1.1.
    pub bad_request: Vec<u8>,
    /// 408: the request was not read within `HeadLimits::timeout`, or the
    ///  client stopped sending in the middle of it.
    pub request_timeout: Vec<u8>,
    /// 414: the request line is longer than `HeadLimits::max_request_line`.
    pub uri_too_long: Vec<u8>,
    /// 431: the headers pass `HeadLimits::max_header_bytes` or
    ///  `HeadLimits::max_headers`.
    pub headers_too_large: Vec<u8>,
}

impl std::fmt::Debug for Refusals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refusals")
            .field("content_type", &self.content_type)
            .field("on_refusal", &self.on_refusal.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            min_threads: 4,
            max_connections: 1024,
            head: HeadLimits::default(),
            socket_timeout: Duration::from_secs(10),
            overload_response: b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n".to_vec(),
            thread_stack: 2 * 1024 * 1024,
            refusals: Refusals::default(),
            tls: None,
        }
    }
}

impl Server {
    /// Shortcut for a simple server on a specific address.
    #[inline]
    pub fn http<A>(addr: A) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::from_socket_addrs(addr)?,
        })
    }

    #[cfg(unix)]
    #[inline]
    /// Shortcut for a UNIX socket server at a specific path
    pub fn http_unix(
        path: &std::path::Path,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::unix_from_path(path),
        })
    }

    /// Builds a new server that listens on the specified address.
    pub fn new(config: ServerConfig) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        let listener = config.addr.bind()?;
        Self::from_listener(listener)
    }

    /// Builds a new server using the specified TCP listener.
    ///
    /// This is useful if you've constructed TcpListener using some less usual method
    /// such as from systemd. For other cases, you probably want the `new()` function.
    pub fn from_listener<L: Into<Listener>>(
        listener: L,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Server::from_listener_with_limits(listener, ServerLimits::default())
    }

    /// (trigd patch) Like `from_listener`, with explicit bounds (and TLS:
    ///  `ServerLimits::tls`; upstream's `SslConfig` is removed).
    pub fn from_listener_with_limits<L: Into<Listener>>(
        listener: L,
        limits: ServerLimits,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Server::build(listener.into(), limits, None)
    }

    /// (trigd patch) Serve every request by calling `handler` on the thread
    ///  of its connection, in order, instead of queueing it for `recv()`.
    ///  Each open connection has a thread of its own (at most
    ///  `max_connections`), so a slow request holds up only its own
    ///  connection, and no request crosses threads: this saves two context
    ///  switches per request. `recv()` is not used in this mode.
    pub fn from_listener_with_handler<L: Into<Listener>>(
        listener: L,
        limits: ServerLimits,
        handler: Handler,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Server::build(listener.into(), limits, Some(handler))
    }

    fn build(
        listener: Listener,
        limits: ServerLimits,
        handler: Option<Handler>,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        let open = Arc::new(AtomicUsize::new(0));
        // building the "close" variable
        let close_trigger = Arc::new(AtomicBool::new(false));
        let local_addr = listener.local_addr()?;
        log::debug!("Server listening on {}", local_addr);

        // creating a task where server.accept() is continuously called
        // and ClientConnection objects are pushed in the messages queue
        let messages = MessagesQueue::with_capacity(8);

        let acceptor = Acceptor {
            listener,
            max_connections: limits.max_connections,
            min_threads: limits.min_threads,
            thread_stack: limits.thread_stack,
            setup: Arc::new(Setup {
                head: limits.head,
                socket_timeout: limits.socket_timeout,
                refusals: Arc::new(limits.refusals),
                tls: limits.tls,
                handler,
                messages: messages.clone(),
            }),
            overload_response: limits.overload_response,
            open: Arc::clone(&open),
            close: close_trigger.clone(),
        };
        thread::spawn(move || acceptor.run());

        // result
        Ok(Server {
            messages,
            close: close_trigger,
            listening_addr: local_addr,
            open,
        })
    }

    /// (trigd patch) Connections open now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Relaxed)
    }

    /// (trigd patch) The live counter behind `open_connections`, for a
    ///  reader that does not hold the server.
    pub fn open_connections_counter(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.open)
    }

    /// Returns an iterator for all the incoming requests.
    ///
    /// The iterator will return `None` if the server socket is shutdown.
    #[inline]
    pub fn incoming_requests(&self) -> IncomingRequests<'_> {
        IncomingRequests { server: self }
    }

    /// Returns the address the server is listening to.
    #[inline]
    pub fn server_addr(&self) -> ListenAddr {
        self.listening_addr.clone()
    }

    /// Returns the number of clients currently connected to the server.
    pub fn num_connections(&self) -> usize {
        unimplemented!()
        //self.requests_receiver.lock().len()
    }

    /// Blocks until an HTTP request has been submitted and returns it.
    pub fn recv(&self) -> IoResult<Request> {
        match self.messages.pop() {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(rq),
            None => Err(IoError::new(IoErrorKind::Other, "thread unblocked")),
        }
    }

    /// Same as `recv()` but doesn't block longer than timeout
    pub fn recv_timeout(&self, timeout: Duration) -> IoResult<Option<Request>> {
        match self.messages.pop_timeout(timeout) {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(Some(rq)),
            None => Ok(None),
        }
    }

    /// Same as `recv()` but doesn't block.
    pub fn try_recv(&self) -> IoResult<Option<Request>> {
        match self.messages.try_pop() {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(Some(rq)),
            None => Ok(None),
        }
    }

    /// Unblock thread stuck in recv() or incoming_requests().
    /// If there are several such threads, only one is unblocked.
    /// This method allows graceful shutdown of server.
    pub fn unblock(&self) {
        self.messages.unblock();
    }
}

impl Iterator for IncomingRequests<'_> {
    type Item = Request;
    fn next(&mut self) -> Option<Request> {
        self.server.recv().ok()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.close.store(true, Relaxed);
        // Connect briefly to ourselves to unblock the accept thread
        let maybe_stream = match &self.listening_addr {
            ListenAddr::IP(addr) => TcpStream::connect(addr).map(Connection::from),
            #[cfg(unix)]
            ListenAddr::Unix(addr) => {
                // TODO: use connect_addr when its stabilized.
                let path = addr.as_pathname().unwrap();
                std::os::unix::net::UnixStream::connect(path).map(Connection::from)
            }
        };
        if let Ok(stream) = maybe_stream {
            let _ = stream.shutdown(Shutdown::Both);
        }
        // (trigd patch) the socket file is not removed here: a socket
        //  systemd passed is systemd's, and the application removes the
        //  ones it created itself
    }
}
