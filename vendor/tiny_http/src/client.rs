use std::io::Error as IoError;
use std::io::Result as IoResult;
use std::io::{BufRead, BufReader, BufWriter, ErrorKind, Read};

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{HTTPVersion, Method};
use crate::util::RefinedTcpStream;
use crate::util::{SequentialReader, SequentialReaderBuilder, SequentialWriterBuilder};
use crate::{Refusals, Request};

/// A ClientConnection is an object that will store a socket to a client
/// and return Request objects.
pub struct ClientConnection {
    // address of the client
    /// (trigd patch) `None` also when the address could not be read (a
    ///  client gone right after `accept`: upstream panicked on it).
    remote_addr: Option<SocketAddr>,

    // sequence of Readers to the stream, so that the data is not read in
    //  the wrong order
    source: SequentialReaderBuilder<BufReader<DeadlineReader<RefinedTcpStream>>>,

    // sequence of Writers to the stream, to avoid writing response #2 before
    //  response #1
    sink: SequentialWriterBuilder<BufWriter<RefinedTcpStream>>,

    // Reader to read the next header from
    next_header_source: SequentialReader<BufReader<DeadlineReader<RefinedTcpStream>>>,

    // (trigd patch) bounds on one request head, and the deadline shared
    //  with the socket reader
    limits: HeadLimits,
    deadline: Arc<Mutex<Deadline>>,
    // (trigd patch) the bodies of the answers to refused requests
    refusals: Arc<Refusals>,
    // (trigd patch) the line of the head being read, kept from line to line
    line: Vec<u8>,
    // (trigd patch) set when a request went without its body read to the
    //  end: the stream is inside that body, so no request follows
    unread: Arc<AtomicBool>,

    // set to true if we know that the previous request is the last one
    no_more_requests: bool,

    // true if the connection goes through SSL
    secure: bool,
}

/// Error that can happen when reading a request.
#[derive(Debug)]
enum ReadError {
    WrongRequestLine,
    WrongHeader(HTTPVersion),
    /// the client sent an unrecognized `Expect` header
    ExpectationFailed(HTTPVersion),
    ReadIoError(IoError),
    /// (trigd patch) the request line (414) or the headers (431) are too large
    TooLarge(u16),
}

/// (trigd patch) Bounds on reading one request.
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    /// Longest request line, in bytes (past it: 414).
    pub max_request_line: usize,
    /// Largest header section, in bytes (past it: 431).
    pub max_header_bytes: usize,
    /// Most header fields (past it: 431).
    pub max_headers: usize,
    /// Time from the first byte read of a request (or from the start of
    ///  waiting for it) until its head and body must be read (past it: 408).
    pub timeout: Duration,
}

impl Default for HeadLimits {
    fn default() -> Self {
        HeadLimits {
            max_request_line: 8192,
            max_header_bytes: 32768,
            max_headers: 100,
            timeout: Duration::from_secs(10),
        }
    }
}

/// (trigd patch) When the current request must be read by. Armed when a
///  head read starts; the clock starts at the first socket read after that,
///  so time spent answering the previous request does not count.
#[derive(Debug, Default)]
struct Deadline {
    armed: Option<Duration>,
    at: Option<Instant>,
    /// (trigd patch) some byte of the current request has arrived
    started: bool,
}

/// (trigd patch) A reader that fails with `TimedOut` once the deadline of
///  the request being read has passed. Checked once per socket read, so a
///  client that trickles one byte at a time (slowloris) is still cut off.
pub struct DeadlineReader<R> {
    inner: R,
    deadline: Arc<Mutex<Deadline>>,
}

impl<R: Read> Read for DeadlineReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        loop {
            self.check()?;
            match self.inner.read(buf) {
                Ok(n) => {
                    if n > 0 {
                        let mut d = self.deadline.lock().unwrap_or_else(|e| e.into_inner());
                        d.started = true;
                    }
                    return Ok(n);
                }
                // (trigd patch) a socket with a receive timeout fails a
                //  blocked read with EINTR whenever the thread is woken
                //  by a signal, even one that is then ignored (SIGCHLD
                //  queued while the thread that spawned a child blocks
                //  signals; SIGSTOP/SIGCONT). Some readers above (the
                //  small body read of `new_request`, `EqualReader`'s
                //  drop) gave up on it and the connection closed with
                //  no answer: read again, within the same deadline.
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.timeout_in_request(e)),
            }
        }
    }
}

impl<R> DeadlineReader<R> {
    /// (trigd patch) Start the deadline if it was just armed; fail with
    ///  `TimedOut` once it has passed.
    fn check(&self) -> IoResult<()> {
        let mut d = self.deadline.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = d.armed.take() {
            d.at = Some(Instant::now() + t);
            d.started = false;
        }
        if d.at.is_some_and(|at| Instant::now() >= at) {
            return Err(IoError::new(ErrorKind::TimedOut, "request took too long"));
        }
        Ok(())
    }

    /// (trigd patch) the socket timeout fired (EAGAIN) in the middle of a
    ///  request: report it as the request's timeout, so the client gets
    ///  408 instead of a silent close. An idle keep-alive connection
    ///  (nothing of a request yet) still closes silently.
    fn timeout_in_request(&self, e: IoError) -> IoError {
        let timed_out = e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut;
        let d = self.deadline.lock().unwrap_or_else(|e| e.into_inner());
        if timed_out && d.started {
            IoError::new(ErrorKind::TimedOut, "request took too long")
        } else {
            e
        }
    }
}

impl ClientConnection {
    /// Creates a new `ClientConnection` that takes ownership of the `TcpStream`.
    pub fn new(
        write_socket: RefinedTcpStream,
        mut read_socket: RefinedTcpStream,
        limits: HeadLimits,
        refusals: Arc<Refusals>,
    ) -> ClientConnection {
        let remote_addr = read_socket.peer_addr().ok().flatten();
        let secure = read_socket.secure();

        let deadline = Arc::new(Mutex::new(Deadline::default()));
        let read_socket = DeadlineReader {
            inner: read_socket,
            deadline: Arc::clone(&deadline),
        };
        let mut source = SequentialReaderBuilder::new(BufReader::with_capacity(1024, read_socket));
        let first_header = source.next().unwrap();

        ClientConnection {
            source,
            sink: SequentialWriterBuilder::new(BufWriter::with_capacity(1024, write_socket)),
            remote_addr,
            next_header_source: first_header,
            no_more_requests: false,
            secure,
            limits,
            deadline,
            refusals,
            line: Vec::new(),
            unread: Arc::new(AtomicBool::new(false)),
        }
    }

    /// true if the connection is HTTPS
    pub fn secure(&self) -> bool {
        self.secure
    }

    /// (trigd patch) Answer a request refused while its head was read;
    ///  the connection then closes (`None`).
    fn refuse(&mut self, status: u16, version: HTTPVersion) -> Option<Request> {
        let writer = self.sink.next().unwrap();
        self.refusal(status)
            .raw_print(writer, version, &[], false, None)
            .ok();
        if let Some(hook) = &self.refusals.on_refusal {
            hook(status, self.remote_addr);
        }
        None
    }

    /// (trigd patch) The answer to a request refused with `status` while
    ///  its head was read, with the application's body for it.
    fn refusal(&self, status: u16) -> crate::Response<std::io::Cursor<Vec<u8>>> {
        let r = &self.refusals;
        let body = match status {
            408 => &r.request_timeout,
            414 => &r.uri_too_long,
            431 => &r.headers_too_large,
            _ => &r.bad_request,
        };
        let response = crate::Response::from_data(body.clone()).with_status_code(status);
        match crate::Header::from_bytes(&b"Content-Type"[..], r.content_type.as_bytes()) {
            Ok(h) if !body.is_empty() && !r.content_type.is_empty() => response.with_header(h),
            _ => response,
        }
    }

    /// Reads the next line from self.next_header_source.
    ///
    /// Reads until `CRLF` is reached. The next read will start
    ///  at the first byte of the new line.
    ///
    /// (trigd patch) At most `max` bytes: past that, `Ok(None)`. The line
    ///  (ASCII) is left in `self.line`, which is kept from line to line.
    fn read_next_line(&mut self, max: usize, request_line: bool) -> IoResult<Option<()>> {
        // (trigd patch) `max` bytes of line, then its CR: a line of
        //  exactly `max` bytes was refused (the CR made it one too long)
        let max = max + 1;
        let buf = &mut self.line;
        buf.clear();
        let mut prev_byte_was_cr = false;
        // (trigd patch) scan the buffered bytes in place: reading them one
        //  `read` call at a time through the reader layers was a third of
        //  the instructions of a short request
        let reader = self.next_header_source.get_mut();
        loop {
            if buf.len() > max {
                return Ok(None);
            }
            let chunk = match reader.fill_buf() {
                Ok([]) => return Err(IoError::new(ErrorKind::ConnectionAborted, "Unexpected EOF")),
                Ok(chunk) => chunk,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            // at most what keeps the line within `max + 1` bytes
            let room = (max - buf.len()).saturating_add(1);
            let window = &chunk[..chunk.len().min(room)];
            let mut from = 0;
            let end = loop {
                let Some(at) = window[from..].iter().position(|&b| b == b'\n') else {
                    break None;
                };
                let i = from + at;
                let cr = if i == 0 {
                    prev_byte_was_cr
                } else {
                    window[i - 1] == b'\r'
                };
                if cr {
                    break Some(i);
                }
                from = i + 1;
            };
            let Some(i) = end else {
                buf.extend_from_slice(window);
                prev_byte_was_cr = window.last() == Some(&b'\r');
                let n = window.len();
                reader.consume(n);
                continue;
            };
            buf.extend_from_slice(&window[..i]);
            reader.consume(i + 1);
            buf.pop(); // removing the '\r' (perhaps from the previous chunk)
            if !request_line {
                // (trigd patch) a header byte outside ASCII (obs-text,
                //  e.g. UTF-8) becomes DEL instead of dropping the
                //  connection unanswered: the application sees a value
                //  that is not printable ASCII and can answer it
                for b in buf.iter_mut().filter(|b| !b.is_ascii()) {
                    *b = 0x7f;
                }
            }
            if !buf.is_ascii() {
                return Err(IoError::new(
                    ErrorKind::InvalidInput,
                    "Header is not in ASCII",
                ));
            }
            return Ok(Some(()));
        }
    }

    /// Reads the header lines of a request, up to the empty line.
    fn read_headers(&mut self, version: &HTTPVersion) -> Result<Vec<crate::Header>, ReadError> {
        let limits = self.limits;
        let mut headers = Vec::new();
        let mut head_bytes = 0;
        loop {
            let left = limits.max_header_bytes.saturating_sub(head_bytes);
            self.read_next_line(left, false)
                .map_err(ReadError::ReadIoError)?
                .ok_or(ReadError::TooLarge(431))?;
            let line = ascii_line(&self.line);
            head_bytes += line.len() + 2;

            if line.is_empty() {
                // (trigd patch) one Host at most (RFC 9112 §3.2): of two,
                //  a proxy and trigd could each take another
                let hosts = headers.iter().filter(|h: &&crate::Header| h.field.equiv("Host"));
                if hosts.count() > 1 {
                    return Err(ReadError::WrongHeader(version.clone()));
                }
                return Ok(headers);
            };
            if headers.len() >= limits.max_headers {
                return Err(ReadError::TooLarge(431));
            }
            if !valid_field_line(line.as_bytes()) {
                return Err(ReadError::WrongHeader(version.clone()));
            }
            headers.push(match FromStr::from_str(line.trim()) {
                // TODO: remove this conversion
                Ok(h) => h,
                _ => return Err(ReadError::WrongHeader(version.clone())),
            });
        }
    }

    /// Reads a request from the stream.
    /// Blocks until the header has been read.
    fn read(&mut self) -> Result<Request, ReadError> {
        // (trigd patch) arm the deadline for this request
        {
            let mut d = self.deadline.lock().unwrap_or_else(|e| e.into_inner());
            d.armed = Some(self.limits.timeout);
        }
        let limits = self.limits;
        let (method, path, version, headers) = {
            // reading the request line
            let (method, path, version) = {
                let line = self.read_next_line(limits.max_request_line, true);
                // (trigd patch) the previous request's body was left
                //  unread: this is no request line (with `recv()`, its
                //  reader may only be gone now that this read could start)
                if self.unread.load(Ordering::SeqCst) {
                    let e = IoError::new(ErrorKind::ConnectionAborted, "body left unread");
                    return Err(ReadError::ReadIoError(e));
                }
                line.map_err(|e| match e.kind() {
                        // (trigd patch) a non-ASCII request line is a 400
                        ErrorKind::InvalidInput => ReadError::WrongRequestLine,
                        _ => ReadError::ReadIoError(e),
                    })?
                    .ok_or(ReadError::TooLarge(414))?;

                parse_request_line(ascii_line(&self.line).trim())?
            };

            // getting all headers
            let headers = self.read_headers(&version)?;
            // (trigd patch) a long head's line buffer is not kept
            if self.line.capacity() > 4096 {
                self.line = Vec::new();
            }

            (method, path, version, headers)
        };

        // building the writer for the request
        let writer = self.sink.next().unwrap();

        // follow-up for next potential request
        let mut data_source = self.source.next().unwrap();
        std::mem::swap(&mut self.next_header_source, &mut data_source);

        // building the next reader
        let request = crate::request::new_request(
            self.secure,
            method,
            path,
            version.clone(),
            headers,
            self.remote_addr,
            data_source,
            writer,
            Arc::clone(&self.unread),
        )
        .map_err(|e| {
            use crate::request;
            match e {
                request::RequestCreationError::CreationIoError(e) => ReadError::ReadIoError(e),
                // (trigd patch) where the body ends is unknown: 400, close
                request::RequestCreationError::BadFraming => ReadError::WrongHeader(version),
                request::RequestCreationError::ExpectationFailed => {
                    ReadError::ExpectationFailed(version)
                }
            }
        })?;

        // return the request
        Ok(request)
    }
}

impl Iterator for ClientConnection {
    type Item = Request;

    /// Blocks until the next Request is available.
    /// Returns None when no new Requests will come from the client.
    fn next(&mut self) -> Option<Request> {
        use crate::{Response, StatusCode};

        // the client sent a "connection: close" header in this previous request
        //  or is using HTTP 1.0, meaning that no new request will come
        if self.no_more_requests || self.unread.load(Ordering::SeqCst) {
            return None;
        }

        loop {
            let rq = match self.read() {
                // we don't know where the next request would start, so we
                //  have to close
                Err(ReadError::WrongRequestLine) => return self.refuse(400, HTTPVersion(1, 1)),
                Err(ReadError::WrongHeader(ver)) => return self.refuse(400, ver),

                // request timeout: closing the connection
                Err(ReadError::ReadIoError(ref err)) if err.kind() == ErrorKind::TimedOut => {
                    return self.refuse(408, HTTPVersion(1, 1));
                }

                Err(ReadError::ExpectationFailed(ver)) => {
                    let writer = self.sink.next().unwrap();
                    let response = Response::new_empty(StatusCode(417));
                    response.raw_print(writer, ver, &[], true, None).ok();
                    return None; // TODO: should be recoverable, but needs handling in case of body
                }

                // (trigd patch) answer 414/431 and close: the rest of the
                //  head was not read
                Err(ReadError::TooLarge(status)) => return self.refuse(status, HTTPVersion(1, 1)),

                Err(ReadError::ReadIoError(_)) => return None,

                Ok(rq) => rq,
            };

            // updating the status of the connection: (trigd patch) the
            //  same rule as the answer's `Connection: close`
            if crate::response::says_close(rq.headers(), rq.http_version()) {
                self.no_more_requests = true;
            }

            // returning the request
            return Some(rq);
        }
    }
}

/// (trigd patch) Whether a header line is `name: value` as RFC 9110 §5
///  writes it: the name a token (no white space before or in it, so no
///  obs-fold continuation line, RFC 9112 §5.2), the value without control
///  bytes but tab (no NUL, no bare LF, no VT or FF that a trim would drop).
///  Upstream trimmed the line and took the rest: `\tTransfer-Encoding:
///  chunked` or `Content-Length: \x0c5` framed a body that a proxy in front
///  may read otherwise. DEL stays: it is what `read_next_line` makes of a
///  byte outside ASCII, which the application answers.
fn valid_field_line(line: &[u8]) -> bool {
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return false;
    };
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    let tchar = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    !name.is_empty()
        && name.iter().all(tchar)
        && value.iter().all(|&b| b == b'\t' || !(b < 0x20))
}

/// (trigd patch) A line `read_next_line` left: ASCII, so always text.
fn ascii_line(line: &[u8]) -> &str {
    std::str::from_utf8(line).unwrap_or("")
}

/// Parses a "HTTP/1.1" string.
fn parse_http_version(version: &str) -> Result<HTTPVersion, ReadError> {
    let (major, minor) = match version {
        // (trigd patch) HTTP/1.0 and 1.1 only: the 505 upstream answered
        //  to `HTTP/2.0` and `HTTP/3.0` waited for the request's own
        //  answer to be written first, which came only after it: the
        //  connection hung for good (an h2 preface, `PRI * HTTP/2.0`, did
        //  that too). Now 400, as for any request line not read.
        "HTTP/1.0" => (1, 0),
        "HTTP/1.1" => (1, 1),
        _ => return Err(ReadError::WrongRequestLine),
    };

    Ok(HTTPVersion(major, minor))
}

/// Parses the request line of the request.
/// eg. GET / HTTP/1.1
///
/// (trigd patch) Exactly three parts, the target in origin-form (`/…`),
///  absolute-form (`http://…`) or asterisk-form (`*`): upstream ignored
///  anything after the version and took any target.
fn parse_request_line(line: &str) -> Result<(Method, String, HTTPVersion), ReadError> {
    let mut parts = line.split(' ');

    let method = parts.next().and_then(|w| w.parse().ok());
    let path = parts
        .next()
        .filter(|p| p.starts_with('/') || *p == "*" || p.contains("://"))
        .map(ToOwned::to_owned);
    let version = parts.next().and_then(|w| parse_http_version(w).ok());
    if parts.next().is_some() {
        return Err(ReadError::WrongRequestLine);
    }

    method
        .and_then(|method| Some((method, path?, version?)))
        .ok_or(ReadError::WrongRequestLine)
}

#[cfg(test)]
mod test {
    #[test]
    fn test_parse_request_line() {
        let (method, path, ver) = super::parse_request_line("GET /hello HTTP/1.1").unwrap();

        assert!(method == crate::Method::Get);
        assert!(path == "/hello");
        assert!(ver == crate::common::HTTPVersion(1, 1));

        assert!(super::parse_request_line("GET /hello").is_err());
        assert!(super::parse_request_line("qsd qsd qsd").is_err());
        assert!(super::parse_request_line("GET /hello HTTP/1.1 extra").is_err());
        assert!(super::parse_request_line("GET hello HTTP/1.1").is_err());
        assert!(super::parse_request_line("OPTIONS * HTTP/1.1").is_ok());
        assert!(super::parse_request_line("GET http://x/y HTTP/1.1").is_ok());
    }
}
