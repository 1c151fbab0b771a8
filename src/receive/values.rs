//! Where a value comes from in a request, and reading it: query parameter,
//! header, form field, JSON path, XML path, the whole payload / headers /
//! query as one JSON value, the raw body as text, or the path of a
//! temporary file holding the raw body.
//!
//! Owns: [`Source`], [`Incoming`] (the request as sources see it, with its
//! body parsed at most once) and the rule that a value is a string: a
//! JSON string is itself, any other JSON value becomes its JSON text.
//! Does not own: creating the temporary file (the caller does, and gives
//! its path in [`Incoming::body_file`]) or deciding what a missing value
//! means (values and rules differ).

use std::cell::{Cell, OnceCell};
use std::net::IpAddr;
use std::path::PathBuf;

use serde_json::{Map, Value};

use super::payload::{Kind, Payload, PayloadError, Why};

/// A dotted path into a JSON (or XML-as-JSON) tree: `commits.0.id`. A
/// segment that is a number indexes an array, and names a key otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonPath(Vec<String>);

impl JsonPath {
    /// Parse `a.b.0`.
    ///
    /// # Errors
    /// An empty path or an empty segment (`a..b`).
    pub fn parse(s: &str) -> Result<JsonPath, String> {
        let segs: Vec<String> = s.split('.').map(str::to_string).collect();
        if segs.iter().any(String::is_empty) {
            return Err(format!(
                "\"{s}\" is not a path like \"head_commit.author.email\" or \"commits.0.id\""
            ));
        }
        Ok(JsonPath(segs))
    }

    /// The value at this path in `v`, if any.
    pub fn get<'v>(&self, mut v: &'v Value) -> Option<&'v Value> {
        for seg in &self.0 {
            v = match v {
                Value::Object(m) => m.get(seg)?,
                Value::Array(a) => a.get(seg.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        Some(v)
    }
}

impl std::fmt::Display for JsonPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join("."))
    }
}

/// One of the whole-request values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whole {
    /// The parsed body as JSON (form fields as an object, XML as its tree).
    Payload,
    /// Every header as an object, lower-case names (repeats joined by
    /// `, `), without trigd's own credentials ([`CREDENTIAL_HEADERS`]).
    Headers,
    /// Every query parameter as an object (a repeated one as an array).
    Query,
}

/// A fact about the request itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestField {
    /// The method, upper case.
    Method,
    /// The client address (see [`Incoming::client`]).
    RemoteAddr,
}

/// Headers that carry a caller's credentials for trigd itself (an
/// application key, a session cookie): never handed to a program as part of
/// `whole = "headers"` (a `header` source can still name one).
pub const CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "cookie", "proxy-authorization"];

/// Where a value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A query parameter (refused when repeated: which one counts would
    /// depend on who reads the request).
    Query(String),
    /// A header, by lower-case name (the first, when repeated).
    Header(String),
    /// A form field of an urlencoded or multipart body (refused when
    /// repeated, like a query parameter).
    Form(String),
    /// A path into a JSON body.
    Json(JsonPath),
    /// A path into an XML body (see `payload.rs` for the tree).
    Xml(JsonPath),
    /// A path into the parsed body, whatever its kind (JSON, XML, form
    /// fields as an object), as adnanh/webhook's `payload` source reads.
    Payload(JsonPath),
    /// A fixed string.
    Literal(String),
    /// The method or the client address.
    Request(RequestField),
    /// A whole part of the request as one JSON value.
    Whole(Whole),
    /// The raw body as text (it must be UTF-8).
    BodyText,
    /// The path of a temporary file holding the raw body.
    BodyFile,
}

impl Source {
    /// The body kind this source requires, if any.
    pub fn needs(&self) -> Option<Kind> {
        match self {
            Source::Json(_) => Some(Kind::Json),
            Source::Xml(_) => Some(Kind::Xml),
            Source::Form(_) => Some(Kind::Form),
            _ => None,
        }
    }

    /// How the source is named in messages: `json head_commit.id`.
    pub fn describe(&self) -> String {
        match self {
            Source::Query(n) => format!("query parameter '{n}'"),
            Source::Header(n) => format!("header '{n}'"),
            Source::Form(n) => format!("form field '{n}'"),
            Source::Json(p) => format!("JSON path '{p}'"),
            Source::Xml(p) => format!("XML path '{p}'"),
            Source::Payload(p) => format!("payload path '{p}'"),
            Source::Literal(_) => "a fixed string".into(),
            Source::Request(RequestField::Method) => "the method".into(),
            Source::Request(RequestField::RemoteAddr) => "the client address".into(),
            Source::Whole(Whole::Payload) => "the payload".into(),
            Source::Whole(Whole::Headers) => "the headers".into(),
            Source::Whole(Whole::Query) => "the query".into(),
            Source::BodyText => "the body".into(),
            Source::BodyFile => "the body file".into(),
        }
    }
}

/// Why a value could not be read: the body is not what it must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueError {
    /// The body could not be parsed as its `Content-Type` says.
    Payload(PayloadError),
    /// The source needs another body kind than the request's `Content-Type`.
    WrongType {
        /// What the source needs.
        want: Kind,
        /// The request's `Content-Type`, as sent (or empty).
        got: String,
    },
    /// A value is not UTF-8 text (a raw body or a multipart part).
    NotText {
        /// The source.
        source: String,
    },
    /// A value read by name is in the request more than once.
    Repeated {
        /// The source.
        source: String,
        /// The parameter or field name.
        name: String,
    },
}

impl ValueError {
    /// A sentence for the caller.
    pub fn message(&self) -> String {
        match self {
            ValueError::Payload(e) if e.why == Why::Bound => format!(
                "The {} request body is over a bound: {}.",
                e.kind.name(),
                e.msg
            ),
            ValueError::Payload(e) => format!(
                "The request body is not valid {}: {}.",
                e.kind.name(),
                e.msg
            ),
            ValueError::WrongType { want, got } => {
                let got = if got.is_empty() {
                    "none".to_string()
                } else {
                    format!("'{got}'")
                };
                format!(
                    "This endpoint reads a {} body, but the Content-Type is {got}.",
                    want.name()
                )
            }
            ValueError::NotText { source } => format!("The value of {source} is not UTF-8 text."),
            ValueError::Repeated { source, .. } => format!(
                "The request has {source} more than once; send it once (which one counts would depend on who reads the request)."
            ),
        }
    }
}

/// The request as sources see it. The body is parsed on first use and at
/// most once.
pub struct Incoming<'a> {
    /// The method, upper case.
    pub method: &'a str,
    /// Headers, lower-case names, in order.
    pub headers: &'a [(String, String)],
    /// Decoded query pairs, in order.
    pub query: &'a [(String, String)],
    /// The raw body.
    pub body: &'a [u8],
    /// The client address (behind trusted proxies: from `X-Forwarded-For`).
    pub client: IpAddr,
    /// Path of the temporary body file, when one was made.
    pub body_file: Option<PathBuf>,
    /// Set when a rule's signature check failed on this request (it then
    /// counts as a failed authentication: `invoke`).
    pub signature_failed: Cell<bool>,
    payload: OnceCell<Result<Payload, PayloadError>>,
}

impl<'a> Incoming<'a> {
    /// A view of one request (`method` empty until set).
    pub fn new(
        headers: &'a [(String, String)],
        query: &'a [(String, String)],
        body: &'a [u8],
        client: IpAddr,
    ) -> Self {
        Incoming {
            method: "",
            headers,
            query,
            body,
            client,
            body_file: None,
            signature_failed: Cell::new(false),
            payload: OnceCell::new(),
        }
    }

    fn content_type(&self) -> Option<&str> {
        super::signature::header(self.headers, "content-type")
    }

    /// The parsed body.
    ///
    /// # Errors
    /// The body is not what its `Content-Type` says.
    pub fn payload(&self) -> Result<&Payload, ValueError> {
        let parsed = self
            .payload
            .get_or_init(|| Payload::parse(self.content_type(), self.body));
        parsed.as_ref().map_err(|e| ValueError::Payload(e.clone()))
    }

    /// The parsed body, which must be of kind `want` (urlencoded and
    /// multipart both count as a form). An empty body of any type reads as
    /// nothing.
    fn payload_of(&self, want: Kind) -> Result<Option<&Payload>, ValueError> {
        let kind = Kind::of(self.content_type());
        let p = self.payload()?;
        let fits = kind == want || (want == Kind::Form && kind == Kind::Multipart);
        match p {
            Payload::Raw if self.body.iter().all(u8::is_ascii_whitespace) => Ok(None),
            _ if fits => Ok(Some(p)),
            _ => Err(ValueError::WrongType {
                want,
                got: self.content_type().unwrap_or("").to_string(),
            }),
        }
    }

    /// Read `source`. `Ok(None)` when the request does not carry it.
    ///
    /// # Errors
    /// The body is invalid, of another kind than the source needs, or not
    /// text where text is needed.
    pub fn get(&self, source: &Source) -> Result<Option<String>, ValueError> {
        Ok(match source {
            Source::Query(n) => only(self.query.iter().map(|(k, v)| (k, v.as_bytes())), n, source)?,
            Source::Header(n) => first(self.headers, n),
            Source::Form(n) => match self.payload_of(Kind::Form)? {
                Some(Payload::Form(fields)) => {
                    only(fields.iter().map(|(k, v)| (k, v.as_slice())), n, source)?
                }
                _ => None,
            },
            Source::Payload(path) => path.get(&self.payload()?.to_json()).map(as_text),
            Source::Literal(s) => Some(s.clone()),
            Source::Request(RequestField::Method) => Some(self.method.to_string()),
            Source::Request(RequestField::RemoteAddr) => Some(self.client.to_string()),
            Source::Json(path) | Source::Xml(path) => {
                let want = source.needs().unwrap_or(Kind::Json);
                match self.payload_of(want)? {
                    Some(Payload::Json(v) | Payload::Xml(v)) => path.get(v).map(as_text),
                    _ => None,
                }
            }
            Source::Whole(w) => Some(as_text(&self.whole(*w)?)),
            Source::BodyText => Some(text(self.body, source)?),
            Source::BodyFile => self.body_file.as_ref().map(|p| p.display().to_string()),
        })
    }

    fn whole(&self, w: Whole) -> Result<Value, ValueError> {
        Ok(match w {
            Whole::Payload => self.payload()?.to_json(),
            Whole::Headers => {
                let mut map = Map::new();
                let shown = self
                    .headers
                    .iter()
                    .filter(|(k, _)| !CREDENTIAL_HEADERS.contains(&k.as_str()));
                for (k, v) in shown {
                    match map.get_mut(k) {
                        Some(Value::String(s)) => {
                            s.push_str(", ");
                            s.push_str(v);
                        }
                        _ => {
                            map.insert(k.clone(), Value::String(v.clone()));
                        }
                    }
                }
                Value::Object(map)
            }
            Whole::Query => {
                let form: Vec<(String, Vec<u8>)> = self
                    .query
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
                    .collect();
                Payload::Form(form).to_json()
            }
        })
    }
}

/// A JSON value as a program sees it: a string as itself, anything else as
/// its JSON text.
pub fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The first value named `n` (headers: a repeated header is legitimate).
fn first(pairs: &[(String, String)], n: &str) -> Option<String> {
    pairs.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone())
}

/// The one value named `n` among `pairs`, as text.
///
/// # Errors
/// `Repeated` when `n` is there twice; `NotText` when it is not UTF-8.
fn only<'p>(
    mut pairs: impl Iterator<Item = (&'p String, &'p [u8])>,
    n: &str,
    source: &Source,
) -> Result<Option<String>, ValueError> {
    let mut named = pairs.by_ref().filter(|(k, _)| *k == n);
    let Some((_, v)) = named.next() else {
        return Ok(None);
    };
    if named.next().is_some() {
        return Err(ValueError::Repeated {
            source: source.describe(),
            name: n.to_string(),
        });
    }
    text(v, source).map(Some)
}

fn text(bytes: &[u8], source: &Source) -> Result<String, ValueError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| ValueError::NotText {
        source: source.describe(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const PUSH: &str = r#"{"ref":"refs/heads/main","commits":[{"id":"abc","added":["a.txt"]},{"id":"def"}],
        "head_commit":{"author":{"email":"dev@example.com","name":"Dev"}},"forced":false,"size":2}"#;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn get(
        h: &[(&str, &str)],
        q: &[(&str, &str)],
        body: &str,
        src: Source,
    ) -> Result<Option<String>, ValueError> {
        let (h, q) = (pairs(h), pairs(q));
        Incoming::new(&h, &q, body.as_bytes(), IpAddr::V4(Ipv4Addr::LOCALHOST)).get(&src)
    }

    fn json(p: &str) -> Source {
        Source::Json(JsonPath::parse(p).unwrap())
    }

    #[test]
    fn json_paths_nested_and_arrays() {
        let h = [("content-type", "application/json")];
        assert_eq!(
            get(&h, &[], PUSH, json("head_commit.author.email"))
                .unwrap()
                .unwrap(),
            "dev@example.com"
        );
        assert_eq!(
            get(&h, &[], PUSH, json("commits.1.id")).unwrap().unwrap(),
            "def"
        );
        assert_eq!(
            get(&h, &[], PUSH, json("commits.0.added"))
                .unwrap()
                .unwrap(),
            r#"["a.txt"]"#
        );
        assert_eq!(
            get(&h, &[], PUSH, json("forced")).unwrap().unwrap(),
            "false"
        );
        assert_eq!(get(&h, &[], PUSH, json("size")).unwrap().unwrap(), "2");
        assert_eq!(get(&h, &[], PUSH, json("commits.5.id")).unwrap(), None);
        assert_eq!(get(&h, &[], PUSH, json("ref.x")).unwrap(), None);
        assert!(JsonPath::parse("a..b").is_err());
    }

    #[test]
    fn wrong_or_bad_body_is_an_error() {
        let form = [("content-type", "application/x-www-form-urlencoded")];
        let e = get(&form, &[], "a=1", json("a")).unwrap_err();
        assert!(
            matches!(
                e,
                ValueError::WrongType {
                    want: Kind::Json,
                    ..
                }
            ),
            "{e:?}"
        );
        let j = [("content-type", "application/json")];
        let e = get(&j, &[], "{nope", json("a")).unwrap_err();
        assert!(e.message().contains("not valid JSON"), "{}", e.message());
        // Without a body, a JSON source is simply absent.
        assert_eq!(get(&[], &[], "", json("a")).unwrap(), None);
    }

    #[test]
    fn query_header_form_xml_whole() {
        let h = [
            ("content-type", "application/x-www-form-urlencoded"),
            ("x-event", "push"),
        ];
        let q = [("token", "t1"), ("token", "t2")];
        let body = "text=deploy+now&user=ann";
        assert!(matches!(
            get(&h, &q, body, Source::Query("token".into())),
            Err(ValueError::Repeated { name, .. }) if name == "token"
        ));
        assert_eq!(
            get(&h, &q, body, Source::Header("x-event".into()))
                .unwrap()
                .unwrap(),
            "push"
        );
        assert_eq!(
            get(&h, &q, body, Source::Form("text".into()))
                .unwrap()
                .unwrap(),
            "deploy now"
        );
        assert_eq!(
            get(&h, &q, body, Source::Form("none".into())).unwrap(),
            None
        );
        assert_eq!(
            get(&h, &q, body, Source::Whole(Whole::Query))
                .unwrap()
                .unwrap(),
            r#"{"token":["t1","t2"]}"#
        );
        assert_eq!(
            get(&h, &q, body, Source::Whole(Whole::Payload))
                .unwrap()
                .unwrap(),
            r#"{"text":"deploy now","user":"ann"}"#
        );
        let hs = get(&h, &q, body, Source::Whole(Whole::Headers))
            .unwrap()
            .unwrap();
        assert!(hs.contains(r#""x-event":"push""#), "{hs}");
        let creds = [
            ("authorization", "Bearer k"),
            ("cookie", "s=1"),
            ("x-a", "1"),
            ("x-a", "2"),
        ];
        let hs = get(&creds, &q, "", Source::Whole(Whole::Headers))
            .unwrap()
            .unwrap();
        assert_eq!(hs, r#"{"x-a":"1, 2"}"#);
        assert_eq!(get(&h, &q, body, Source::BodyText).unwrap().unwrap(), body);
        let src = Source::Payload(JsonPath::parse("text").unwrap());
        assert_eq!(get(&h, &q, body, src).unwrap().unwrap(), "deploy now");
        let lit = Source::Literal("fixed".into());
        assert_eq!(get(&h, &q, body, lit).unwrap().unwrap(), "fixed");
        let addr = Source::Request(RequestField::RemoteAddr);
        assert_eq!(get(&h, &q, body, addr).unwrap().unwrap(), "127.0.0.1");
        let x = [("content-type", "text/xml")];
        let xml = "<alert><status>firing</status><labels><l>a</l><l>b</l></labels></alert>";
        let src = Source::Xml(JsonPath::parse("alert.labels.l.1").unwrap());
        assert_eq!(get(&x, &[], xml, src).unwrap().unwrap(), "b");
    }

    #[test]
    fn repeated_non_utf8_duplicate_and_over_bound_bodies() {
        let form = [("content-type", "application/x-www-form-urlencoded")];
        let text = Source::Form("text".into());
        let e = get(&form, &[], "text=caf%E9", text.clone()).unwrap_err();
        assert!(e.message().contains("not UTF-8"), "{}", e.message());
        assert!(matches!(e, ValueError::Payload(ref p) if p.why == Why::Invalid));
        let e = get(&form, &[], "text=a&other=1&text=b", text.clone()).unwrap_err();
        assert!(matches!(e, ValueError::Repeated { .. }), "{e:?}");
        assert_eq!(
            get(&form, &[], "text=caf%C3%A9", text).unwrap().unwrap(),
            "café"
        );
        let j = [("content-type", "application/json")];
        let e = get(&j, &[], r#"{"a":{"b":1,"b":2}}"#, json("a.b")).unwrap_err();
        assert!(e.message().contains("key 'b' twice"), "{}", e.message());
        let many = "x=1&".repeat(crate::receive::payload::MAX_FIELDS + 1);
        let e = get(&form, &[], &many, Source::Form("x".into())).unwrap_err();
        assert!(
            matches!(e, ValueError::Payload(ref p) if p.why == Why::Bound),
            "{e:?}"
        );
    }
}
