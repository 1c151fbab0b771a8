//! The one HTTP/1.1 client of the tests: [`Client`] for well-formed
//! requests, [`send_raw`] and [`read_reply`] for bytes a client would never
//! send (malformed, oversized, stalled) and for connections held open; all
//! answer a [`Reply`] with the same assertions.

use std::fmt::{self, Debug, Display};
use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::server::{floor_char, tail_of};
use super::Explain;

/// Read and write timeout of every test connection.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection to `addr` with the timeouts of every test client.
#[track_caller]
pub fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(READ_TIMEOUT)).unwrap();
    s
}

/// Send `bytes` exactly as given on a new connection and read one reply;
/// panics when there is none.
#[track_caller]
pub fn send_raw(addr: &str, bytes: &[u8]) -> Reply {
    let mut s = connect(addr);
    s.write_all(bytes).expect("send");
    let mut r = std::io::BufReader::new(s);
    let mut reply = read_reply(&mut r)
        .unwrap_or_else(|e| panic!("reading the reply: {e}\n--- request ---\n{}", shown(bytes)));
    reply.request = shown(bytes);
    reply
}

/// The first bytes of a raw request, for failure messages.
fn shown(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(2000)]).into_owned()
}

/// Read one reply off an open connection: its head, then a body framed by
/// `Content-Length`, by chunks, or by the end of the connection.
pub fn read_reply(r: &mut impl BufRead) -> Result<Reply, String> {
    let mut raw = Vec::new();
    loop {
        let before = raw.len();
        r.read_until(b'\n', &mut raw)
            .map_err(|e| format!("reading the head: {e}"))?;
        match raw.len() - before {
            0 if raw.is_empty() => return Err("connection closed before a reply".into()),
            0 => return Err("connection closed inside the head".into()),
            2 if raw.ends_with(b"\r\n") => break,
            _ => {}
        }
    }
    let head = String::from_utf8_lossy(&raw).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|n| n.trim().parse::<usize>().ok());
    if let Some(n) = length {
        let start = raw.len();
        raw.resize(start + n, 0);
        r.read_exact(&mut raw[start..])
            .map_err(|e| format!("reading the body: {e}"))?;
    } else if head.contains("transfer-encoding: chunked") {
        while !reply_complete(&raw) {
            if r.read_until(b'\n', &mut raw)
                .map_err(|e| format!("body: {e}"))?
                == 0
            {
                break;
            }
        }
    } else {
        r.read_to_end(&mut raw)
            .map_err(|e| format!("reading the body: {e}"))?;
    }
    let (status, headers, body) = parse_reply(&raw)?;
    Ok(Reply {
        status,
        headers,
        body,
        request: "(sent on an open connection)".into(),
        stderr_log: PathBuf::new(),
    })
}

/// A raw HTTP/1.1 client for one server (`Connection: close`, one request
/// per connection).
#[derive(Clone)]
pub struct Client {
    /// `IP:PORT`.
    pub addr: String,
    stderr_log: PathBuf,
}

impl Client {
    /// A client for any HTTP server at `addr` (`IP:PORT`); failures show
    /// the tail of `log`.
    pub fn for_addr(addr: &str, log: &Path) -> Client {
        Client {
            addr: addr.to_string(),
            stderr_log: log.to_path_buf(),
        }
    }

    /// `POST path` with no body.
    #[track_caller]
    pub fn post(&self, path: &str) -> Reply {
        self.request("POST", path, &[], b"")
    }

    /// `GET path`.
    #[track_caller]
    pub fn get(&self, path: &str) -> Reply {
        self.request("GET", path, &[], b"")
    }

    /// Send a request; panics (with the log) when the exchange itself fails.
    #[track_caller]
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Reply {
        self.try_request(method, path, headers, body)
            .unwrap_or_else(|e| {
                panic!(
                    "\n{e}\n--- server stderr.log (tail) ---\n{}\n",
                    tail_of(&self.stderr_log)
                )
            })
    }

    /// Send a request; `Err` describes a connection or protocol failure.
    pub fn try_request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Reply, String> {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.addr
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if !body.is_empty() || method != "GET" {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        let request = format!(
            "{}{}",
            head.trim_end(),
            if body.is_empty() {
                String::new()
            } else {
                format!("\n\n{}", String::from_utf8_lossy(body))
            }
        );
        let fail = |what: String| format!("{what}\n--- request ---\n{request}");
        let mut s = TcpStream::connect(&self.addr)
            .map_err(|e| fail(format!("cannot connect to {}: {e}", self.addr)))?;
        s.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        s.set_write_timeout(Some(READ_TIMEOUT)).unwrap();
        s.write_all(head.as_bytes())
            .and_then(|_| s.write_all(body))
            .map_err(|e| fail(format!("cannot send the request: {e}")))?;
        let mut raw = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    raw.extend_from_slice(&buf[..n]);
                    // Stop at the end of a complete reply: a server may keep
                    // the connection open despite `Connection: close`.
                    if reply_complete(&raw) {
                        break;
                    }
                }
                // A reset after a complete reply is fine; anything else is not.
                Err(e) if raw.is_empty() => {
                    return Err(fail(format!("cannot read the reply: {e}")))
                }
                Err(_) => break,
            }
        }
        let (status, headers, body) = parse_reply(&raw).map_err(|e| {
            fail(format!(
                "malformed reply ({e}):\n{}",
                String::from_utf8_lossy(&raw[..raw.len().min(4000)])
            ))
        })?;
        Ok(Reply {
            status,
            headers,
            body,
            request,
            stderr_log: self.stderr_log.clone(),
        })
    }
}

type Parsed = (u16, Vec<(String, String)>, Vec<u8>);

/// Whether `raw` holds a whole reply with a `Content-Length` body (or a
/// finished chunked body); replies without either end at EOF.
fn reply_complete(raw: &[u8]) -> bool {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let body = &raw[end + 4..];
    if head.contains("transfer-encoding: chunked") {
        return body.ends_with(b"0\r\n\r\n");
    }
    head.lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|n| n.trim().parse::<usize>().ok())
        .is_some_and(|n| body.len() >= n)
}

fn parse_reply(raw: &[u8]) -> Result<Parsed, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "headers are not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or("empty reply")?;
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(format!("bad status line {status_line:?}"));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut headers = Vec::new();
    for l in lines {
        let (k, v) = l
            .split_once(':')
            .ok_or_else(|| format!("bad header {l:?}"))?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let rest = &raw[end + 4..];
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let body =
        if get("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked")) {
            dechunk(rest)?
        } else if let Some(len) = get("content-length") {
            let len: usize = len
                .parse()
                .map_err(|_| format!("bad content-length {len:?}"))?;
            if rest.len() < len {
                return Err(format!(
                    "body has {} bytes, content-length {len}",
                    rest.len()
                ));
            }
            rest[..len].to_vec()
        } else {
            rest.to_vec()
        };
    Ok((status, headers, body))
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("chunk size line without CRLF")?;
        let line = std::str::from_utf8(&rest[..eol]).map_err(|_| "chunk size is not UTF-8")?;
        let size_hex = line.split(';').next().unwrap_or("").trim();
        let size =
            usize::from_str_radix(size_hex, 16).map_err(|_| format!("bad chunk size {line:?}"))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if rest.len() < size + 2 {
            return Err("truncated chunk".into());
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// A parsed HTTP reply, with what is needed to explain a failed assertion.
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Headers in order.
    pub headers: Vec<(String, String)>,
    /// Body (de-chunked).
    pub body: Vec<u8>,
    request: String,
    stderr_log: PathBuf,
}

impl Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "HTTP {}", self.status)?;
        for (k, v) in &self.headers {
            writeln!(f, "{k}: {v}")?;
        }
        let text = self.text();
        if text.len() > 6000 {
            write!(
                f,
                "\n{}… ({} bytes)",
                &text[..floor_char(&text, 6000)],
                text.len()
            )
        } else {
            write!(f, "\n{text}")
        }
    }
}

impl Explain for Reply {
    /// Panic with `msg`, the request, this reply and the server log.
    #[track_caller]
    fn fail(&self, msg: impl Display) -> ! {
        panic!(
            "\n{msg}\n--- request ---\n{}\n--- reply ---\n{self:?}\n--- server stderr.log (tail) ---\n{}\n",
            self.request,
            tail_of(&self.stderr_log)
        )
    }
}

impl Reply {
    /// The body as text (lossy UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON; fails when it is not.
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| self.fail(format!("the body is not JSON: {e}")))
    }

    /// Fail unless the status is `status`.
    #[track_caller]
    pub fn status_is(&self, status: u16) -> &Self {
        if self.status != status {
            self.fail(format!("status is {}, want {status}", self.status))
        }
        self
    }

    /// 200 with a JSON object body; returns the body.
    #[track_caller]
    pub fn ok(&self) -> Value {
        self.status_is(200);
        let v = self.json();
        self.check(v.is_object(), "the body is not a JSON object");
        v
    }

    /// An error reply: `status`, a JSON object with a non-empty `Error`
    /// sentence and `Code == code`; returns the body.
    #[track_caller]
    pub fn err(&self, status: u16, code: &str) -> Value {
        self.status_is(status);
        let v = self.json();
        self.check(v.is_object(), "the error body is not a JSON object");
        self.check(
            v["Error"].as_str().is_some_and(|s| !s.trim().is_empty()),
            "the error body has no non-empty string \"Error\"",
        );
        self.check_eq(v["Code"].as_str(), Some(code), "\"Code\"");
        v
    }

    /// The `Run` field, checked to be a 32-hex-digit run id.
    #[track_caller]
    pub fn run_id(&self, v: &Value) -> String {
        match v["Run"].as_str() {
            Some(id) if is_run_id(id) => id.to_string(),
            other => self.fail(format!(
                "\"Run\" is {other:?}, want <instance>-<32 hex digits>"
            )),
        }
    }
}

/// Whether `s` is a run id: an instance name, `-`, then 32 hex digits
/// (or, for runs recorded before instance names, the 32 hex digits alone).
pub fn is_run_id(s: &str) -> bool {
    let hex = s
        .rsplit_once('-')
        .map_or(s, |(name, hex)| if name.is_empty() { "" } else { hex });
    hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit())
}
