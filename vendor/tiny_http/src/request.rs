use std::io::Error as IoError;
use std::io::{self, Cursor, ErrorKind, Read, Write};

use std::cell::RefCell;
use std::fmt;
use std::net::SocketAddr;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;

use crate::util::{ChunkedReader, EqualReader, FusedReader};
use crate::{HTTPVersion, Header, Method, Response, StatusCode};

/// Represents an HTTP request made by a client.
///
/// A `Request` object is what is produced by the server, and is your what
/// your code must analyse and answer.
///
/// This object implements the `Send` trait, therefore you can dispatch your requests to
/// worker threads.
///
/// # Pipelining
///
/// If a client sends multiple requests in a row (without waiting for the response), then you will
/// get multiple `Request` objects simultaneously. This is called *requests pipelining*.
/// Tiny-http automatically reorders the responses so that you don't need to worry about the order
/// in which you call `respond` or `into_writer`.
///
/// This mechanic is disabled if:
///
///  - The body of a request is large enough (handling requires pipelining requires storing the
///    body of the request in a buffer ; if the body is too big, tiny-http will avoid doing that)
///  - A request sends a `Expect: 100-continue` header (which means that the client waits to
///    know whether its body will be processed before sending it)
///  - A request sends a `Connection: close` header or `Connection: upgrade` header (used for
///    websockets), which indicates that this is the last request that will be received on this
///    connection
///
/// # Automatic cleanup
///
/// If a `Request` object is destroyed without `into_writer` or `respond` being called,
/// an empty response with a 500 status code (internal server error) will automatically be
/// sent back to the client.
/// This means that if your code fails during the handling of a request, this "internal server
/// error" response will automatically be sent during the stack unwinding.
///
/// # Testing
///
/// If you want to build fake requests to test your server, use [`TestRequest`](crate::test::TestRequest).
pub struct Request {
    // where to read the body from
    data_reader: Option<Box<dyn Read + Send + 'static>>,

    // if this writer is empty, then the request has been answered
    response_writer: Option<Box<dyn Write + Send + 'static>>,

    remote_addr: Option<SocketAddr>,

    // true if HTTPS, false if HTTP
    secure: bool,

    method: Method,

    path: String,

    http_version: HTTPVersion,

    headers: Vec<Header>,

    body_length: Option<usize>,

    // (trigd patch) whether the body was read to its end (or had none)
    body_done: Arc<AtomicBool>,

    // true if a `100 Continue` response must be sent when `as_reader()` is called
    must_send_continue: bool,

    // If Some, a message must be sent after responding
    notify_when_responded: Option<Sender<()>>,
}

struct NotifyOnDrop<R> {
    sender: Sender<()>,
    inner: R,
}

impl<R: Read> Read for NotifyOnDrop<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf)
    }
}
impl<R: Write> Write for NotifyOnDrop<R> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
impl<R> Drop for NotifyOnDrop<R> {
    fn drop(&mut self) {
        self.sender.send(()).unwrap();
    }
}

/// Error that can happen when building a `Request` object.
#[derive(Debug)]
pub enum RequestCreationError {
    /// The client sent an `Expect` header that was not recognized by tiny-http.
    ExpectationFailed,

    /// Error while reading data from the socket during the creation of the `Request`.
    CreationIoError(IoError),

    /// (trigd patch) The body's framing headers disagree or cannot be
    ///  read (RFC 9112 §6.3): the server cannot know where the body ends.
    BadFraming,
}

impl From<IoError> for RequestCreationError {
    fn from(err: IoError) -> RequestCreationError {
        RequestCreationError::CreationIoError(err)
    }
}

/// Builds a new request.
///
/// After the request line and headers have been read from the socket, a new `Request` object
/// is built.
///
/// You must pass a `Read` that will allow the `Request` object to read from the incoming data.
/// It is the responsibility of the `Request` to read only the data of the request and not further.
///
/// The `Write` object will be used by the `Request` to write the response.
/// (trigd patch) `unread` is the connection's: set when a request is
///  dropped before its body was read to its end (`BodyEnd`), so that the
///  connection closes instead of reading the rest of that body as the next
///  request.
#[allow(clippy::too_many_arguments)]
pub fn new_request<R, W>(
    secure: bool,
    method: Method,
    path: String,
    version: HTTPVersion,
    headers: Vec<Header>,
    remote_addr: Option<SocketAddr>,
    source_data: R,
    writer: W,
    unread: Arc<AtomicBool>,
) -> Result<Request, RequestCreationError>
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    let framing = framing(&headers)?;
    let expects_continue = expects_continue(&headers)?;
    // (trigd patch) `Connection: upgrade` is not special: trigd upgrades
    //  nothing, and upstream handed such a request the rest of the stream
    //  as its body, so that reading the body waited for the deadline.
    let done = Arc::new(AtomicBool::new(true));
    let (reader, content_length) = match framing {
        Framing::Empty(length) => (Box::new(io::empty()) as Box<dyn Read + Send>, length),
        Framing::Sized(n) if n <= 1024 && !expects_continue => {
            // small enough: read at once, so the socket is past the body
            let buffer = read_small_body(&mut { source_data }, n)?;
            (Box::new(Cursor::new(buffer)) as Box<dyn Read + Send>, Some(n))
        }
        Framing::Sized(n) => {
            done.store(false, Ordering::SeqCst);
            let body = EqualReader::new(source_data, n);
            (body_end(body, &done, unread), Some(n))
        }
        Framing::Chunked => {
            done.store(false, Ordering::SeqCst);
            // chunked applies to the whole message (RFC 9112 §7)
            (body_end(ChunkedReader::new(source_data), &done, unread), None)
        }
    };

    Ok(Request {
        data_reader: Some(reader),
        response_writer: Some(Box::new(writer) as Box<dyn Write + Send + 'static>),
        remote_addr,
        secure,
        method,
        path,
        http_version: version,
        headers,
        body_length: content_length,
        body_done: done,
        must_send_continue: expects_continue,
        notify_when_responded: None,
    })
}

/// (trigd patch) How a request's body is framed.
enum Framing {
    /// No body; `Some(0)` when a `Content-Length: 0` said so.
    Empty(Option<usize>),
    /// `Content-Length` bytes.
    Sized(usize),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// (trigd patch) The framing of a body, by RFC 9112 §6.3: a
///  `Transfer-Encoding` other than exactly `chunked`, one together with a
///  `Content-Length`, a `Content-Length` that is not digits or that
///  differs between its headers is refused. Upstream used the first
///  `Content-Length` that parsed (or none), so a request whose framing a
///  proxy reads another way carried a second request in its body
///  (request smuggling).
fn framing(headers: &[Header]) -> Result<Framing, RequestCreationError> {
    let named = |name: &'static str| {
        headers
            .iter()
            .filter(move |h| h.field.equiv(name))
            .map(|h| h.value.as_str().trim())
    };
    let mut te = named("Transfer-Encoding");
    let mut cl = named("Content-Length");
    if let Some(coding) = te.next() {
        let chunked = coding.eq_ignore_ascii_case("chunked");
        if !chunked || te.next().is_some() || cl.next().is_some() {
            return Err(RequestCreationError::BadFraming);
        }
        return Ok(Framing::Chunked);
    }
    let Some(first) = cl.next() else {
        return Ok(Framing::Empty(None));
    };
    let digits = !first.is_empty() && first.bytes().all(|b| b.is_ascii_digit());
    if !digits || cl.any(|v| v != first) {
        return Err(RequestCreationError::BadFraming);
    }
    match first.parse::<usize>() {
        Ok(0) => Ok(Framing::Empty(Some(0))),
        Ok(n) => Ok(Framing::Sized(n)),
        Err(_) => Err(RequestCreationError::BadFraming),
    }
}

/// (trigd patch) `body` as a request's reader that notes its end.
fn body_end<R: Read + Send + 'static>(
    body: R,
    done: &Arc<AtomicBool>,
    unread: Arc<AtomicBool>,
) -> Box<dyn Read + Send + 'static> {
    Box::new(FusedReader::new(BodyEnd {
        inner: body,
        done: Arc::clone(done),
        unread,
    }))
}

/// (trigd patch) A body's reader that sets `done` at its end, and the
///  connection's `unread` when it is dropped before: the stream is then
///  somewhere inside the body, and the connection must close. (Upstream's
///  `EqualReader` read the rest of a sized body when dropped, into one
///  buffer of the size the client claimed: `Content-Length: 1000000000000`
///  on a refused request aborted the server; a chunked body was left
///  where it stood and its rest read as the next request.)
struct BodyEnd<R> {
    inner: R,
    done: Arc<AtomicBool>,
    unread: Arc<AtomicBool>,
}

impl<R: Read> Read for BodyEnd<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.done.store(true, Ordering::SeqCst);
        }
        Ok(n)
    }
}

impl<R> Drop for BodyEnd<R> {
    fn drop(&mut self) {
        if !self.done.load(Ordering::SeqCst) {
            self.unread.store(true, Ordering::SeqCst);
        }
    }
}

/// The value of the first header called `name` (case-insensitive).
fn header<'h>(headers: &'h [Header], name: &'static str) -> Option<&'h str> {
    headers
        .iter()
        .find(|h| h.field.equiv(name))
        .map(|h| h.value.as_str())
}

/// Whether the client sent `Expect: 100-continue`; any other expectation
/// cannot be met.
fn expects_continue(headers: &[Header]) -> Result<bool, RequestCreationError> {
    match header(headers, "Expect") {
        None => Ok(false),
        Some(v) if v.eq_ignore_ascii_case("100-continue") => Ok(true),
        _ => Err(RequestCreationError::ExpectationFailed),
    }
}

/// Read exactly `content_length` bytes of body.
fn read_small_body<R: Read>(
    source_data: &mut R,
    content_length: usize,
) -> Result<Vec<u8>, RequestCreationError> {
    let mut buffer = vec![0; content_length];
    let mut offset = 0;
    while offset != content_length {
        let read = source_data.read(&mut buffer[offset..])?;
        if read == 0 {
            // the socket returned EOF, but we were before the expected content-length
            // aborting
            let info = "Connection has been closed before we received enough data";
            let err = IoError::new(ErrorKind::ConnectionAborted, info);
            return Err(RequestCreationError::CreationIoError(err));
        }
        offset += read;
    }
    Ok(buffer)
}

impl Request {
    /// Returns true if the request was made through HTTPS.
    #[inline]
    pub fn secure(&self) -> bool {
        self.secure
    }

    /// Returns the method requested by the client (eg. `GET`, `POST`, etc.).
    #[inline]
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// Returns the resource requested by the client.
    #[inline]
    pub fn url(&self) -> &str {
        &self.path
    }

    /// Returns a list of all headers sent by the client.
    #[inline]
    pub fn headers(&self) -> &[Header] {
        &self.headers
    }

    /// (trigd patch) Moves the headers out of the request, without
    ///  copying them, except those the response still reads: `TE`, to
    ///  choose its transfer encoding (moved), and `Connection`, to say
    ///  `Connection: close` when the request ends its connection (copied:
    ///  the caller gets it too). [`Request::headers`] then lists only
    ///  those.
    pub fn take_headers(&mut self) -> Vec<Header> {
        let mut all = std::mem::take(&mut self.headers);
        let read_by_response = |h: &Header| h.field.equiv("TE") || h.field.equiv("Connection");
        if all.iter().any(read_by_response) {
            self.headers = all.iter().filter(|h| read_by_response(h)).cloned().collect();
            all.retain(|h| !h.field.equiv("TE"));
        }
        all
    }

    /// Returns the HTTP version of the request.
    #[inline]
    pub fn http_version(&self) -> &HTTPVersion {
        &self.http_version
    }

    /// Returns the length of the body in bytes.
    ///
    /// Returns `None` if the length is unknown.
    #[inline]
    pub fn body_length(&self) -> Option<usize> {
        self.body_length
    }

    /// Returns the address of the client that sent this request.
    ///
    /// The address is always `Some` for TCP listeners, but always `None` for UNIX listeners
    /// (as the remote address of a UNIX client is almost always unnamed).
    ///
    /// Note that this is gathered from the socket. If you receive the request from a proxy,
    /// this function will return the address of the proxy and not the address of the actual
    /// user.
    #[inline]
    pub fn remote_addr(&self) -> Option<&SocketAddr> {
        self.remote_addr.as_ref()
    }

    /// Sends a response with a `Connection: upgrade` header, then turns the `Request` into a `Stream`.
    ///
    /// The main purpose of this function is to support websockets.
    /// If you detect that the request wants to use some kind of protocol upgrade, you can
    ///  call this function to obtain full control of the socket stream.
    ///
    /// If you call this on a non-websocket request, tiny-http will wait until this `Stream` object
    ///  is destroyed before continuing to read or write on the socket. Therefore you should always
    ///  destroy it as soon as possible.
    pub fn upgrade<R: Read>(
        mut self,
        protocol: &str,
        response: Response<R>,
    ) -> Box<dyn ReadWrite + Send> {
        use crate::util::CustomStream;

        response
            .raw_print(
                self.response_writer.as_mut().unwrap().by_ref(),
                self.http_version.clone(),
                &self.headers,
                false,
                Some(protocol),
            )
            .ok(); // TODO: unused result

        self.response_writer.as_mut().unwrap().flush().ok(); // TODO: unused result

        let stream = CustomStream::new(self.extract_reader_impl(), self.extract_writer_impl());
        if let Some(sender) = self.notify_when_responded.take() {
            let stream = NotifyOnDrop {
                sender,
                inner: stream,
            };
            Box::new(stream) as Box<dyn ReadWrite + Send>
        } else {
            Box::new(stream) as Box<dyn ReadWrite + Send>
        }
    }

    /// Allows to read the body of the request.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # extern crate tiny_http;
    /// # use std::io::Read;
    /// # fn get_content_type(_: &tiny_http::Request) -> &'static str { "" }
    /// # fn main() {
    /// # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
    /// let mut request = server.recv().unwrap();
    ///
    /// if get_content_type(&request) == "application/json" {
    ///     let mut content = String::new();
    ///     request.as_reader().read_to_string(&mut content).unwrap();
    /// }
    /// # }
    /// ```
    ///
    /// If the client sent a `Expect: 100-continue` header with the request, calling this
    ///  function will send back a `100 Continue` response.
    #[inline]
    pub fn as_reader(&mut self) -> &mut dyn Read {
        if self.must_send_continue {
            let msg = Response::new_empty(StatusCode(100));
            msg.raw_print(
                self.response_writer.as_mut().unwrap().by_ref(),
                self.http_version.clone(),
                &self.headers,
                true,
                None,
            )
            .ok();
            self.response_writer.as_mut().unwrap().flush().ok();
            self.must_send_continue = false;
        }

        self.data_reader.as_mut().unwrap()
    }

    /// Turns the `Request` into a writer.
    ///
    /// The writer has a raw access to the stream to the user.
    /// This function is useful for things like CGI.
    ///
    /// Note that the destruction of the `Writer` object may trigger
    /// some events. For exemple if a client has sent multiple requests and the requests
    /// have been processed in parallel, the destruction of a writer will trigger
    /// the writing of the next response.
    /// Therefore you should always destroy the `Writer` as soon as possible.
    #[inline]
    pub fn into_writer(mut self) -> Box<dyn Write + Send + 'static> {
        self.close_if_body_unread();
        let writer = self.extract_writer_impl();
        if let Some(sender) = self.notify_when_responded.take() {
            let writer = NotifyOnDrop {
                sender,
                inner: writer,
            };
            Box::new(writer) as Box<dyn Write + Send + 'static>
        } else {
            writer
        }
    }

    /// Extract the response `Writer` object from the Request, dropping this `Writer` has the same side effects
    /// as the object returned by `into_writer` above.
    ///
    /// This may only be called once on a single request.
    fn extract_writer_impl(&mut self) -> Box<dyn Write + Send + 'static> {
        use std::mem;

        assert!(self.response_writer.is_some());

        let mut writer = None;
        mem::swap(&mut self.response_writer, &mut writer);
        writer.unwrap()
    }

    /// Extract the body `Reader` object from the Request.
    ///
    /// This may only be called once on a single request.
    fn extract_reader_impl(&mut self) -> Box<dyn Read + Send + 'static> {
        use std::mem;

        assert!(self.data_reader.is_some());

        let mut reader = None;
        mem::swap(&mut self.data_reader, &mut reader);
        reader.unwrap()
    }

    /// Sends a response to this request.
    #[inline]
    pub fn respond<R>(mut self, response: Response<R>) -> Result<(), IoError>
    where
        R: Read,
    {
        let res = self.respond_impl(response);
        if let Some(sender) = self.notify_when_responded.take() {
            sender.send(()).unwrap();
        }
        res
    }

    /// (trigd patch) Sends a response whose body is in memory: the same
    ///  bytes as `respond(Response::from_data(body))` with `status` and the
    ///  `headers` that `Header::from_bytes` accepts, but put together in one
    ///  buffer the thread keeps and written at once, without a `Header` per
    ///  line. A response that would be sent another way (chunked, or with a
    ///  header `Response::add_header` treats specially) goes through
    ///  `respond`.
    pub fn respond_bytes<K, V>(
        mut self,
        status: u16,
        headers: &[(K, V)],
        body: Vec<u8>,
    ) -> Result<(), IoError>
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        thread_local! {
            static OUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
        }
        /// Capacity the kept buffer may keep between responses.
        const KEEP: usize = 8192;
        self.close_if_body_unread();
        let head_only = self.method == Method::Head;
        let sent = OUT.with(|cell| {
            let mut out = cell.try_borrow_mut().ok()?;
            out.clear();
            let composed = crate::response::compose_in_memory(
                &mut out,
                &self.http_version,
                &self.headers,
                head_only,
                status,
                headers,
                &body,
            );
            let result = composed.then(|| {
                let mut writer = self.extract_writer_impl();
                Self::ignore_client_closing_errors(writer.write_all(&out))
                    .and_then(|()| Self::ignore_client_closing_errors(writer.flush()))
            });
            if out.capacity() > KEEP {
                *out = Vec::new();
            }
            result
        });
        match sent {
            Some(result) => {
                if let Some(sender) = self.notify_when_responded.take() {
                    sender.send(()).unwrap();
                }
                result
            }
            None => {
                let mut response = Response::from_data(body).with_status_code(status);
                for (k, v) in headers {
                    let (k, v) = (k.as_ref().as_bytes(), v.as_ref().as_bytes());
                    if let Ok(h) = Header::from_bytes(k, v) {
                        response.add_header(h);
                    }
                }
                self.respond(response)
            }
        }
    }

    fn respond_impl<R>(&mut self, response: Response<R>) -> Result<(), IoError>
    where
        R: Read,
    {
        self.close_if_body_unread();
        let mut writer = self.extract_writer_impl();

        let do_not_send_body = self.method == Method::Head;

        Self::ignore_client_closing_errors(response.raw_print(
            writer.by_ref(),
            self.http_version.clone(),
            &self.headers,
            do_not_send_body,
            None,
        ))?;

        Self::ignore_client_closing_errors(writer.flush())
    }

    /// (trigd patch) An answer sent before the body was read to its end
    ///  says `Connection: close`: the connection closes after it (the
    ///  body's `BodyEnd` tells `ClientConnection`), since the rest of the
    ///  body is not read. The rule `says_close` reads is the request's
    ///  first `Connection` header, so the option goes first.
    fn close_if_body_unread(&mut self) {
        let unread = !self.body_done.load(Ordering::SeqCst);
        if unread && !crate::response::says_close(&self.headers, &self.http_version) {
            if let Ok(h) = Header::from_bytes(&b"Connection"[..], &b"close"[..]) {
                self.headers.insert(0, h);
            }
        }
    }

    fn ignore_client_closing_errors(result: io::Result<()>) -> io::Result<()> {
        result.or_else(|err| match err.kind() {
            ErrorKind::BrokenPipe => Ok(()),
            ErrorKind::ConnectionAborted => Ok(()),
            ErrorKind::ConnectionRefused => Ok(()),
            ErrorKind::ConnectionReset => Ok(()),
            _ => Err(err),
        })
    }

    pub(crate) fn with_notify_sender(mut self, sender: Sender<()>) -> Self {
        self.notify_when_responded = Some(sender);
        self
    }
}

impl fmt::Debug for Request {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> Result<(), fmt::Error> {
        write!(
            formatter,
            "Request({} {} from {:?})",
            self.method, self.path, self.remote_addr
        )
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if self.response_writer.is_some() {
            let response = Response::empty(500);
            let _ = self.respond_impl(response); // ignoring any potential error
            if let Some(sender) = self.notify_when_responded.take() {
                sender.send(()).unwrap();
            }
        }
    }
}

/// Dummy trait that regroups the `Read` and `Write` traits.
///
/// Automatically implemented on all types that implement both `Read` and `Write`.
pub trait ReadWrite: Read + Write {}
impl<T> ReadWrite for T where T: Read + Write {}

#[cfg(test)]
mod tests {
    use super::Request;

    #[test]
    fn must_be_send() {
        #![allow(dead_code)]
        fn f<T: Send>(_: &T) {}
        fn bar(rq: &Request) {
            f(rq);
        }
    }
}
