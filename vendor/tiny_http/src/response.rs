use crate::common::{HTTPVersion, Header, StatusCode};
use httpdate::HttpDate;
use std::cell::Cell;
use std::cmp::Ordering;
use std::sync::mpsc::Receiver;

use std::io::Result as IoResult;
use std::io::{self, Cursor, Read, Write};

use std::fs::File;

use std::str::FromStr;
use std::time::SystemTime;

/// The `Server` header of every answer that sets none (trigd patch: upstream
/// says `tiny-http (Rust)`). The product's name only, no version: the
/// name of a library and its version tell a prober more than a caller
/// needs.
pub const SERVER: &str = "trigd";

/// Object representing an HTTP response whose purpose is to be given to a `Request`.
///
/// Some headers cannot be changed. Trying to define the value
/// of one of these will have no effect:
///
///  - `Connection`
///  - `Trailer`
///  - `Transfer-Encoding`
///  - `Upgrade`
///
/// Some headers have special behaviors:
///
///  - `Content-Encoding`: If you define this header, the library
///     will assume that the data from the `Read` object has the specified encoding
///     and will just pass-through.
///
///  - `Content-Length`: The length of the data should be set manually
///     using the `Reponse` object's API. Attempting to set the value of this
///     header will be equivalent to modifying the size of the data but the header
///     itself may not be present in the final result.
///
///  - `Content-Type`: You may only set this header to one value at a time. If you
///     try to set it more than once, the existing value will be overwritten. This
///     behavior differs from the default for most headers, which is to allow them to
///     be set multiple times in the same response.
///
pub struct Response<R> {
    reader: R,
    status_code: StatusCode,
    headers: Vec<Header>,
    data_length: Option<usize>,
    chunked_threshold: Option<usize>,
}

/// A `Response` without a template parameter.
pub type ResponseBox = Response<Box<dyn Read + Send>>;

/// Transfer encoding to use when sending the message.
/// Note that only *supported* encoding are listed here.
#[derive(Copy, Clone)]
enum TransferEncoding {
    Identity,
    Chunked,
}

impl FromStr for TransferEncoding {
    type Err = ();

    fn from_str(input: &str) -> Result<TransferEncoding, ()> {
        if input.eq_ignore_ascii_case("identity") {
            Ok(TransferEncoding::Identity)
        } else if input.eq_ignore_ascii_case("chunked") {
            Ok(TransferEncoding::Chunked)
        } else {
            Err(())
        }
    }
}

/// Builds a Date: header with the current date.
fn build_date_header() -> Header {
    let mut value = Vec::with_capacity(29);
    push_date(&mut value);
    Header::from_bytes(&b"Date"[..], value).unwrap()
}

/// (trigd patch) Append the current date as a `Date` header value. It is
///  formatted once a second on each thread, not for every response.
pub(crate) fn push_date(out: &mut Vec<u8>) {
    use std::convert::TryFrom;
    thread_local! {
        static DATE: Cell<(u64, [u8; 29])> = const { Cell::new((u64::MAX, [0; 29])) };
    }
    let now = SystemTime::now();
    let secs = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    DATE.with(|cell| {
        let (at, cached) = cell.get();
        if at == secs {
            out.extend_from_slice(&cached);
            return;
        }
        let text = HttpDate::from(now).to_string();
        out.extend_from_slice(text.as_bytes());
        if let Ok(bytes) = <[u8; 29]>::try_from(text.as_bytes()) {
            cell.set((secs, bytes));
        }
    });
}

/// (trigd patch) Append the decimal digits of `n`.
fn push_decimal(out: &mut Vec<u8>, mut n: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// (trigd patch) Put a whole response whose body is in memory into `out`:
///  exactly the bytes `Response::from_data(body)` with `status` and
///  `headers` would be printed as by `raw_print` (status line, `Server`,
///  `Date`, the headers, `Content-Length`, the body), without building a
///  `Header` per line. `false` (and `out` untouched) when that response
///  would take another way there: a body sent chunked (32 KiB and more,
///  or a `TE` header in the request), or a header that `add_header`
///  drops, rewrites or rejects (not ASCII, `Connection`, `Content-Length`,
///  a second `Content-Type`, ...).
pub(crate) fn compose_in_memory<K: AsRef<str>, V: AsRef<str>>(
    out: &mut Vec<u8>,
    http_version: &HTTPVersion,
    request_headers: &[Header],
    do_not_send_body: bool,
    status: u16,
    headers: &[(K, V)],
    body: &[u8],
) -> bool {
    if body.len() >= 32768 || request_headers.iter().any(|h| h.field.equiv("TE")) {
        return false;
    }
    let special = [
        "Connection",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Content-Length",
    ];
    let (mut date, mut server, mut content_type) = (false, false, 0);
    for (k, v) in headers {
        let (k, v) = (k.as_ref(), v.as_ref());
        if !k.is_ascii() || !v.is_ascii() || special.iter().any(|s| s.eq_ignore_ascii_case(k)) {
            return false;
        }
        date |= k.eq_ignore_ascii_case("Date");
        server |= k.eq_ignore_ascii_case("Server");
        content_type += usize::from(k.eq_ignore_ascii_case("Content-Type"));
    }
    if content_type > 1 {
        return false;
    }
    let status_code = StatusCode(status);
    out.extend_from_slice(b"HTTP/");
    push_decimal(out, http_version.0.into());
    out.push(b'.');
    push_decimal(out, http_version.1.into());
    out.push(b' ');
    push_decimal(out, status.into());
    out.push(b' ');
    out.extend_from_slice(status_code.default_reason_phrase().as_bytes());
    out.extend_from_slice(b"\r\n");
    if !server {
        out.extend_from_slice(b"Server: ");
        out.extend_from_slice(SERVER.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !date {
        out.extend_from_slice(b"Date: ");
        push_date(out);
        out.extend_from_slice(b"\r\n");
    }
    for (k, v) in headers {
        out.extend_from_slice(k.as_ref().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_ref().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if says_close(request_headers, http_version) {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"Content-Length: ");
    push_decimal(out, body.len());
    out.extend_from_slice(b"\r\n\r\n");
    let no_body = do_not_send_body || matches!(status, 100..=199 | 204 | 304);
    if !no_body {
        out.extend_from_slice(body);
    }
    true
}

/// (trigd patch) Whether the request ends its connection: a `close`
///  option, or HTTP/1.0 without `keep-alive` (`ClientConnection` closes
///  after answering it). The answer then says `Connection: close`, as RFC
///  9112 §9.6 asks (upstream sent none: a client that reused the
///  connection met a closed socket).
pub(crate) fn says_close(request_headers: &[Header], version: &HTTPVersion) -> bool {
    let option = request_headers
        .iter()
        .find(|h| h.field.equiv("Connection"))
        .map(|h| h.value.as_str().to_ascii_lowercase());
    match option {
        Some(v) if v.contains("close") => true,
        Some(v) => *version == HTTPVersion(1, 0) && !v.contains("keep-alive"),
        None => *version == HTTPVersion(1, 0),
    }
}

fn write_message_header<W>(
    mut writer: W,
    http_version: &HTTPVersion,
    status_code: &StatusCode,
    headers: &[Header],
) -> IoResult<()>
where
    W: Write,
{
    // (trigd patch) the head is put together in memory and written at
    //  once: a write call per piece (each through the connection's writer
    //  lock) cost more instructions than the rest of a short response
    let mut head = Vec::with_capacity(256);
    // writing status line
    write!(
        &mut head,
        "HTTP/{}.{} {} {}\r\n",
        http_version.0,
        http_version.1,
        status_code.0,
        status_code.default_reason_phrase()
    )?;

    // writing headers
    for header in headers.iter() {
        head.extend_from_slice(header.field.as_str().as_ref());
        head.extend_from_slice(b": ");
        head.extend_from_slice(header.value.as_str().as_ref());
        head.extend_from_slice(b"\r\n");
    }

    // separator between header and data
    head.extend_from_slice(b"\r\n");
    writer.write_all(&head)
}

/// The body reader and its length. If the transfer encoding is identity,
/// the content length must be known; therefore if we don't know it, we
/// buffer the entire response first here. While this is an expensive
/// operation, it is only ever needed for clients using HTTP 1.0.
fn sized_reader<'r, R: Read + 'r>(
    mut reader: R,
    data_length: Option<usize>,
    transfer_encoding: Option<TransferEncoding>,
) -> IoResult<(Box<dyn Read + 'r>, Option<usize>)> {
    Ok(match (data_length, transfer_encoding) {
        (Some(l), _) => (Box::new(reader), Some(l)),
        (None, Some(TransferEncoding::Identity)) => {
            let mut buf = Vec::new();
            reader.read_to_end(&mut buf)?;
            let l = buf.len();
            (Box::new(Cursor::new(buf)), Some(l))
        }
        _ => (Box::new(reader), None),
    })
}

/// The header that frames the body: `Transfer-Encoding: chunked` or
/// `Content-Length`.
fn framing_header(
    transfer_encoding: Option<TransferEncoding>,
    data_length: Option<usize>,
) -> Option<Header> {
    match transfer_encoding {
        Some(TransferEncoding::Chunked) => {
            Some(Header::from_bytes(&b"Transfer-Encoding"[..], &b"chunked"[..]).unwrap())
        }
        Some(TransferEncoding::Identity) => {
            assert!(data_length.is_some());
            let data_length = data_length.unwrap();
            Some(
                Header::from_bytes(
                    &b"Content-Length"[..],
                    format!("{}", data_length).as_bytes(),
                )
                .unwrap(),
            )
        }
        _ => None,
    }
}

/// Send the body in `transfer_encoding`.
fn write_body<W: Write>(
    reader: &mut dyn Read,
    mut writer: W,
    transfer_encoding: Option<TransferEncoding>,
    data_length: Option<usize>,
) -> IoResult<()> {
    match transfer_encoding {
        Some(TransferEncoding::Chunked) => {
            use chunked_transfer::Encoder;

            // (trigd patch) each piece read is sent at once: a body
            // produced while it is sent (a followed run's output)
            // reaches the client as it is written. The head goes out
            // first, before the reader is asked for a piece: a body whose
            // first bytes take time (a followed run that prints nothing
            // yet) must not hold back the status a client waits for.
            writer.flush()?;
            let mut writer = Encoder::with_flush_after_write(FlushEach(writer));
            io::copy(reader, &mut writer)?;
        }

        Some(TransferEncoding::Identity) => {
            assert!(data_length.is_some());
            let data_length = data_length.unwrap();

            if data_length >= 1 {
                io::copy(reader, &mut writer)?;
            }
        }

        _ => (),
    }
    Ok(())
}

fn choose_transfer_encoding(
    status_code: StatusCode,
    request_headers: &[Header],
    http_version: &HTTPVersion,
    entity_length: &Option<usize>,
    has_additional_headers: bool,
    chunked_threshold: usize,
) -> TransferEncoding {
    use crate::util;

    // HTTP 1.0 doesn't support other encoding
    if *http_version <= (1, 0) {
        return TransferEncoding::Identity;
    }

    // Per section 3.3.1 of RFC7230:
    // A server MUST NOT send a Transfer-Encoding header field in any response with a status code
    // of 1xx (Informational) or 204 (No Content).
    if status_code.0 < 200 || status_code.0 == 204 {
        return TransferEncoding::Identity;
    }

    // parsing the request's TE header
    let user_request = request_headers
        .iter()
        // finding TE
        .find(|h| h.field.equiv("TE"))
        // getting its value
        .map(|h| h.value.clone())
        // getting the corresponding TransferEncoding
        .and_then(|value| {
            // getting list of requested elements
            let mut parse = util::parse_header_value(value.as_str()); // TODO: remove conversion

            // sorting elements by most priority
            parse.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(Ordering::Equal));

            // trying to parse each requested encoding
            for value in parse.iter() {
                // q=0 are ignored
                if value.1 <= 0.0 {
                    continue;
                }

                if let Ok(te) = TransferEncoding::from_str(value.0) {
                    return Some(te);
                }
            }

            // encoding not found
            None
        });

    if let Some(user_request) = user_request {
        return user_request;
    }

    // if we have additional headers, using chunked
    if has_additional_headers {
        return TransferEncoding::Chunked;
    }

    // if we don't have a Content-Length, or if the Content-Length is too big, using chunks writer
    if entity_length
        .as_ref()
        .map_or(true, |val| *val >= chunked_threshold)
    {
        return TransferEncoding::Chunked;
    }

    // Identity by default
    TransferEncoding::Identity
}

impl<R> Response<R>
where
    R: Read,
{
    /// Creates a new Response object.
    ///
    /// The `additional_headers` argument is a receiver that
    ///  may provide headers even after the response has been sent.
    ///
    /// All the other arguments are straight-forward.
    pub fn new(
        status_code: StatusCode,
        headers: Vec<Header>,
        data: R,
        data_length: Option<usize>,
        additional_headers: Option<Receiver<Header>>,
    ) -> Response<R> {
        let mut response = Response {
            reader: data,
            status_code,
            headers: Vec::with_capacity(16),
            data_length,
            chunked_threshold: None,
        };

        for h in headers {
            response.add_header(h)
        }

        // dummy implementation
        if let Some(additional_headers) = additional_headers {
            for h in additional_headers.iter() {
                response.add_header(h)
            }
        }

        response
    }

    /// Set a threshold for `Content-Length` where we chose chunked
    /// transfer. Notice that chunked transfer might happen regardless of
    /// this threshold, for instance when the request headers indicate
    /// it is wanted or when there is no `Content-Length`.
    pub fn with_chunked_threshold(mut self, length: usize) -> Response<R> {
        self.chunked_threshold = Some(length);
        self
    }

    /// Convert the response into the underlying `Read` type.
    ///
    /// This is mainly useful for testing as it must consume the `Response`.
    pub fn into_reader(self) -> R {
        self.reader
    }

    /// The current `Content-Length` threshold for switching over to
    /// chunked transfer. The default is 32768 bytes. Notice that
    /// chunked transfer is mutually exclusive with sending a
    /// `Content-Length` header as per the HTTP spec.
    pub fn chunked_threshold(&self) -> usize {
        self.chunked_threshold.unwrap_or(32768)
    }

    /// Adds a header to the list.
    /// Does all the checks.
    pub fn add_header<H>(&mut self, header: H)
    where
        H: Into<Header>,
    {
        let header = header.into();

        // ignoring forbidden headers
        if header.field.equiv("Connection")
            || header.field.equiv("Trailer")
            || header.field.equiv("Transfer-Encoding")
            || header.field.equiv("Upgrade")
        {
            return;
        }

        // if the header is Content-Length, setting the data length
        if header.field.equiv("Content-Length") {
            if let Ok(val) = usize::from_str(header.value.as_str()) {
                self.data_length = Some(val)
            }

            return;
        // if the header is Content-Type and it's already set, overwrite it
        } else if header.field.equiv("Content-Type") {
            if let Some(content_type_header) = self
                .headers
                .iter_mut()
                .find(|h| h.field.equiv("Content-Type"))
            {
                content_type_header.value = header.value;
                return;
            }
        }

        self.headers.push(header);
    }

    /// Returns the same request, but with an additional header.
    ///
    /// Some headers cannot be modified and some other have a
    ///  special behavior. See the documentation above.
    #[inline]
    pub fn with_header<H>(mut self, header: H) -> Response<R>
    where
        H: Into<Header>,
    {
        self.add_header(header.into());
        self
    }

    /// Returns the same request, but with a different status code.
    #[inline]
    pub fn with_status_code<S>(mut self, code: S) -> Response<R>
    where
        S: Into<StatusCode>,
    {
        self.status_code = code.into();
        self
    }

    /// Returns the same request, but with different data.
    pub fn with_data<S>(self, reader: S, data_length: Option<usize>) -> Response<S>
    where
        S: Read,
    {
        Response {
            reader,
            headers: self.headers,
            status_code: self.status_code,
            data_length,
            chunked_threshold: self.chunked_threshold,
        }
    }

    /// Prints the HTTP response to a writer.
    ///
    /// This function is the one used to send the response to the client's socket.
    /// Therefore you shouldn't expect anything pretty-printed or even readable.
    ///
    /// The HTTP version and headers passed as arguments are used to
    ///  decide which features (most notably, encoding) to use.
    ///
    /// Note: does not flush the writer.
    pub fn raw_print<W: Write>(
        mut self,
        mut writer: W,
        http_version: HTTPVersion,
        request_headers: &[Header],
        do_not_send_body: bool,
        upgrade: Option<&str>,
    ) -> IoResult<()> {
        let mut transfer_encoding = Some(choose_transfer_encoding(
            self.status_code,
            request_headers,
            &http_version,
            &self.data_length,
            false, /* TODO */
            self.chunked_threshold(),
        ));

        self.add_default_headers();
        if let Some(upgrade) = upgrade {
            self.add_upgrade_headers(upgrade);
            transfer_encoding = None;
        } else if says_close(request_headers, &http_version)
            && !self.headers.iter().any(|h| h.field.equiv("Connection"))
        {
            self.headers
                .push(Header::from_bytes(&b"Connection"[..], &b"close"[..]).unwrap());
        }

        let (mut reader, data_length) =
            sized_reader(self.reader, self.data_length, transfer_encoding)?;

        // checking whether to ignore the body of the response
        let do_not_send_body = do_not_send_body
            || match self.status_code.0 {
                // status code 1xx, 204 and 304 MUST not include a body
                100..=199 | 204 | 304 => true,
                _ => false,
            };

        // preparing headers for transfer: (trigd patch) none on a 1xx or a
        //  204, which RFC 9110 §8.6 forbids a Content-Length (upstream
        //  sent `100 Continue` with `Content-Length: 0`)
        let no_framing = matches!(self.status_code.0, 100..=199 | 204);
        if let Some(h) = framing_header(transfer_encoding, data_length).filter(|_| !no_framing) {
            self.headers.push(h);
        }

        // sending headers
        write_message_header(
            writer.by_ref(),
            &http_version,
            &self.status_code,
            &self.headers,
        )?;

        // sending the body
        if !do_not_send_body {
            write_body(&mut reader, writer, transfer_encoding, data_length)?;
        }

        Ok(())
    }

    /// Add `Date` and `Server` unless the headers have them.
    fn add_default_headers(&mut self) {
        // add `Date` if not in the headers
        if !self.headers.iter().any(|h| h.field.equiv("Date")) {
            self.headers.insert(0, build_date_header());
        }

        // add `Server` if not in the headers
        if !self.headers.iter().any(|h| h.field.equiv("Server")) {
            self.headers.insert(
                0,
                Header::from_bytes(&b"Server"[..], SERVER.as_bytes()).unwrap(),
            );
        }
    }

    /// Add the headers of a protocol upgrade to `upgrade`.
    fn add_upgrade_headers(&mut self, upgrade: &str) {
        self.headers.insert(
            0,
            Header::from_bytes(&b"Upgrade"[..], upgrade.as_bytes()).unwrap(),
        );
        self.headers.insert(
            0,
            Header::from_bytes(&b"Connection"[..], &b"upgrade"[..]).unwrap(),
        );
    }

    /// Retrieves the current value of the `Response` status code
    pub fn status_code(&self) -> StatusCode {
        self.status_code
    }

    /// Retrieves the current value of the `Response` data length
    pub fn data_length(&self) -> Option<usize> {
        self.data_length
    }

    /// Retrieves the current list of `Response` headers
    pub fn headers(&self) -> &[Header] {
        &self.headers
    }
}

impl<R> Response<R>
where
    R: Read + Send + 'static,
{
    /// Turns this response into a `Response<Box<Read + Send>>`.
    pub fn boxed(self) -> ResponseBox {
        Response {
            reader: Box::new(self.reader) as Box<dyn Read + Send>,
            status_code: self.status_code,
            headers: self.headers,
            data_length: self.data_length,
            chunked_threshold: self.chunked_threshold,
        }
    }
}

impl Response<File> {
    /// Builds a new `Response` from a `File`.
    ///
    /// The `Content-Type` will **not** be automatically detected,
    ///  you must set it yourself.
    pub fn from_file(file: File) -> Response<File> {
        let file_size = file.metadata().ok().map(|v| v.len() as usize);

        Response::new(
            StatusCode(200),
            Vec::with_capacity(0),
            file,
            file_size,
            None,
        )
    }
}

impl Response<Cursor<Vec<u8>>> {
    pub fn from_data<D>(data: D) -> Response<Cursor<Vec<u8>>>
    where
        D: Into<Vec<u8>>,
    {
        let data = data.into();
        let data_len = data.len();

        Response::new(
            StatusCode(200),
            Vec::with_capacity(0),
            Cursor::new(data),
            Some(data_len),
            None,
        )
    }

    pub fn from_string<S>(data: S) -> Response<Cursor<Vec<u8>>>
    where
        S: Into<String>,
    {
        let data = data.into();
        let data_len = data.len();

        Response::new(
            StatusCode(200),
            vec![
                Header::from_bytes(&b"Content-Type"[..], &b"text/plain; charset=UTF-8"[..])
                    .unwrap(),
            ],
            Cursor::new(data.into_bytes()),
            Some(data_len),
            None,
        )
    }
}

impl Response<io::Empty> {
    /// Builds an empty `Response` with the given status code.
    pub fn empty<S>(status_code: S) -> Response<io::Empty>
    where
        S: Into<StatusCode>,
    {
        Response::new(
            status_code.into(),
            Vec::with_capacity(0),
            io::empty(),
            Some(0),
            None,
        )
    }

    /// DEPRECATED. Use `empty` instead.
    pub fn new_empty(status_code: StatusCode) -> Response<io::Empty> {
        Response::empty(status_code)
    }
}

impl Clone for Response<io::Empty> {
    fn clone(&self) -> Response<io::Empty> {
        Response {
            reader: io::empty(),
            status_code: self.status_code,
            headers: self.headers.clone(),
            data_length: self.data_length,
            chunked_threshold: self.chunked_threshold,
        }
    }
}

/// (trigd patch) A writer that flushes after every write, so that each
/// chunk reaches the socket at once.
struct FlushEach<W: Write>(W);

impl<W: Write> Write for FlushEach<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.0.write(buf)?;
        self.0.flush()?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes `raw_print` sends for `from_data(body)` with `status` and
    ///  `headers`, and those `compose_in_memory` puts together (if it
    ///  takes the response), with the dates masked.
    fn both(
        version: HTTPVersion,
        request: &[(&str, &str)],
        head_only: bool,
        status: u16,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (String, Option<String>) {
        let request: Vec<Header> = request
            .iter()
            .map(|(k, v)| Header::from_bytes(k.as_bytes(), v.as_bytes()).unwrap())
            .collect();
        let mut response = Response::from_data(body.to_vec()).with_status_code(status);
        for (k, v) in headers {
            if let Ok(h) = Header::from_bytes(k.as_bytes(), v.as_bytes()) {
                response.add_header(h);
            }
        }
        let mut printed = Vec::new();
        response
            .raw_print(&mut printed, version.clone(), &request, head_only, None)
            .unwrap();
        let mut composed = Vec::new();
        let taken = compose_in_memory(
            &mut composed,
            &version,
            &request,
            head_only,
            status,
            headers,
            body,
        );
        let mask = |b: &[u8]| {
            let text = String::from_utf8_lossy(b).into_owned();
            match text.find("Date: ") {
                Some(at) if !text[at..].starts_with("Date: then") => {
                    let end = at + text[at..].find("\r\n").unwrap();
                    format!("{}Date: X{}", &text[..at], &text[end..])
                }
                _ => text,
            }
        };
        (mask(&printed), taken.then(|| mask(&composed)))
    }

    #[test]
    fn responses_in_memory_are_the_bytes_raw_print_sends() {
        let v11 = HTTPVersion(1, 1);
        let json = [("Content-Type", "application/json")];
        let cases: Vec<(
            HTTPVersion,
            Vec<(&str, &str)>,
            bool,
            u16,
            Vec<(&str, &str)>,
            Vec<u8>,
        )> = vec![
            (
                v11.clone(),
                vec![],
                false,
                401,
                json.to_vec(),
                b"{\"Code\":\"x\"}\n".to_vec(),
            ),
            (
                HTTPVersion(1, 0),
                vec![],
                false,
                200,
                json.to_vec(),
                b"ok".to_vec(),
            ),
            (
                v11.clone(),
                vec![],
                true,
                200,
                json.to_vec(),
                b"not sent".to_vec(),
            ),
            (v11.clone(), vec![], false, 204, vec![], b"".to_vec()),
            (v11.clone(), vec![], false, 304, vec![], b"x".to_vec()),
            (
                v11.clone(),
                vec![],
                false,
                405,
                vec![("Allow", "POST"), ("Content-Type", "a/b")],
                vec![],
            ),
            (
                v11.clone(),
                vec![],
                false,
                200,
                vec![("Server", "me"), ("Date", "then")],
                b"x".to_vec(),
            ),
            (
                v11.clone(),
                vec![],
                false,
                200,
                vec![("X-Empty", "")],
                vec![b'y'; 32767],
            ),
        ];
        for (version, request, head_only, status, headers, body) in cases {
            let (printed, composed) = both(version, &request, head_only, status, &headers, &body);
            assert_eq!(
                composed.as_deref(),
                Some(printed.as_str()),
                "{status} {headers:?}"
            );
        }
    }

    #[test]
    fn responses_sent_another_way_are_left_to_raw_print() {
        let v11 = HTTPVersion(1, 1);
        let big = vec![b'x'; 32768];
        let te = [("TE", "chunked")];
        let refused: Vec<(Vec<(&str, &str)>, Vec<(&str, &str)>, &[u8])> = vec![
            (vec![], vec![], &big),
            (te.to_vec(), vec![], b"x"),
            (vec![], vec![("Connection", "close")], b"x"),
            (vec![], vec![("content-length", "3")], b"x"),
            (vec![], vec![("Transfer-Encoding", "chunked")], b"x"),
            (
                vec![],
                vec![("Content-Type", "a"), ("Content-Type", "b")],
                b"x",
            ),
            (vec![], vec![("X-Name", "caf\u{e9}")], b"x"),
        ];
        for (request, headers, body) in refused {
            let (_, composed) = both(v11.clone(), &request, false, 200, &headers, body);
            assert_eq!(composed, None, "{request:?} {headers:?}");
        }
    }

    #[test]
    fn the_date_is_a_date() {
        let mut a = Vec::new();
        push_date(&mut a);
        let mut b = Vec::new();
        push_date(&mut b);
        let text = String::from_utf8(a.clone()).unwrap();
        assert!(text.ends_with(" GMT") && text.len() == 29, "{text}");
        assert_eq!(b.len(), 29, "the cached date is as long");
        let mut n = Vec::new();
        push_decimal(&mut n, 0);
        n.push(b' ');
        push_decimal(&mut n, 1234567);
        assert_eq!(n, b"0 1234567");
    }
}
