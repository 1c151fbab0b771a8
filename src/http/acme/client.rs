//! instant-acme's HTTP over trigd's blocking client (ureq): the ACME server
//! is remote input, so every request has a time limit (`[acme] timeout`,
//! connection included), follows no redirect, and reads at most
//! [`MAX_RESPONSE_BYTES`] of an answer. The request runs to its end inside
//! [`HttpClient::request`]; the future handed back is already complete, so
//! `pollster` drives instant-acme without a runtime.

use std::future::{ready, Future};
use std::io::Read;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response};
use http_body::Body;
use instant_acme::{BodyWrapper, BytesResponse, Error, HttpClient};

/// The largest answer read from the ACME server: a directory, an order or
/// a certificate chain is a few KiB.
pub const MAX_RESPONSE_BYTES: u64 = 1 << 20;

/// Response headers kept at most (a hostile server could send thousands).
const MAX_HEADERS: usize = 100;

/// ureq, bounded, as instant-acme's HTTP client.
pub struct Ureq {
    agent: ureq::Agent,
}

impl Ureq {
    /// A client trusting `tls`'s roots, each request limited to `timeout`.
    pub fn new(tls: Arc<rustls::ClientConfig>, timeout: Duration) -> Ureq {
        let agent = ureq::AgentBuilder::new()
            .timeout(timeout)
            .redirects(0)
            .tls_config(tls)
            .user_agent(concat!("trigd/", env!("CARGO_PKG_VERSION")))
            .build();
        Ureq { agent }
    }

    /// Send `req` and read its answer, whatever its status.
    fn send(&self, req: Request<BodyWrapper<Bytes>>) -> Result<BytesResponse, Error> {
        let (parts, body) = req.into_parts();
        let body = body_bytes(body);
        let mut call = self
            .agent
            .request(parts.method.as_str(), &parts.uri.to_string());
        for (name, value) in &parts.headers {
            if let Ok(v) = value.to_str() {
                call = call.set(name.as_str(), v);
            }
        }
        let answer = match call.send_bytes(&body) {
            Ok(r) | Err(ureq::Error::Status(_, r)) => r,
            Err(ureq::Error::Transport(t)) => return Err(other(t.to_string())),
        };
        response(answer)
    }
}

impl HttpClient for Ureq {
    fn request(
        &self,
        req: Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, Error>> + Send>> {
        Box::pin(ready(self.send(req)))
    }
}

/// The bytes of a request body (instant-acme's are whole in memory: each
/// frame is ready at once).
fn body_bytes(mut body: BodyWrapper<Bytes>) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(Ok(frame)) = pollster::block_on(std::future::poll_fn(|cx| {
        Pin::new(&mut body).poll_frame(cx)
    })) {
        if let Ok(data) = frame.into_data() {
            out.extend_from_slice(&data);
        }
    }
    out
}

/// A ureq answer as instant-acme's response, its body read up to the bound.
fn response(answer: ureq::Response) -> Result<BytesResponse, Error> {
    let mut builder = Response::builder().status(answer.status());
    for name in answer.headers_names().iter().take(MAX_HEADERS) {
        let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
            continue;
        };
        for value in answer.all(name.as_str()) {
            if let Ok(v) = HeaderValue::from_str(value) {
                builder = builder.header(name.clone(), v);
            }
        }
    }
    let mut bytes = Vec::new();
    answer
        .into_reader()
        .take(MAX_RESPONSE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| other(format!("reading the answer: {e}")))?;
    if bytes.len() as u64 > MAX_RESPONSE_BYTES {
        return Err(other(format!(
            "the ACME server's answer is larger than {MAX_RESPONSE_BYTES} bytes"
        )));
    }
    let (parts, ()) = builder.body(()).map_err(Error::Http)?.into_parts();
    Ok(BytesResponse {
        parts,
        body: Box::new(Bytes::from(bytes)),
    })
}

/// An error of the transport, as instant-acme carries it.
fn other(msg: String) -> Error {
    Error::Other(msg.into())
}
