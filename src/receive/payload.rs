//! A request body parsed once, by its `Content-Type`: JSON, form fields
//! (`application/x-www-form-urlencoded` or `multipart/form-data`), XML, or
//! raw bytes.
//!
//! Owns: recognising the media type, parsing, and the errors that say what
//! is wrong with a body. The body is already bounded by `max_body_bytes`
//! when it gets here; nesting is bounded too ([`MAX_DEPTH`]), so a hostile
//! body costs at most linear work and memory.
//!
//! XML becomes a JSON tree the way adnanh/webhook's XML support reads it:
//! the root element is the one key of the top object; an element with
//! attributes or child elements is an object (attributes as `-name`,
//! text as `#text`), a repeated child becomes an array, an element with
//! only text is that text. So `order.item.0.-sku` reads
//! `<order><item sku="a"/><item sku="b"/></order>`.
//!
//! multipart/form-data is parsed here by hand (~50 lines over a body that is
//! already in memory and bounded): the maintained Rust multipart parsers are
//! async (`multer`), and the blocking `multipart` crate is unmaintained.

use quick_xml::events::{BytesStart, Event};
use serde_json::{Map, Value};

/// Deepest nesting of XML elements accepted (JSON has serde_json's own
/// recursion limit of 128).
pub const MAX_DEPTH: usize = 128;

/// The kind of body, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `application/json` or `*/*+json`.
    Json,
    /// `application/x-www-form-urlencoded`.
    Form,
    /// `multipart/form-data`.
    Multipart,
    /// `application/xml`, `text/xml` or `*/*+xml`.
    Xml,
    /// Anything else, or no `Content-Type`.
    Other,
}

impl Kind {
    /// The kind named by a `Content-Type` value.
    pub fn of(content_type: Option<&str>) -> Kind {
        let Some(ct) = content_type else {
            return Kind::Other;
        };
        let essence = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match essence.as_str() {
            "application/json" => Kind::Json,
            "application/x-www-form-urlencoded" => Kind::Form,
            "multipart/form-data" => Kind::Multipart,
            "application/xml" | "text/xml" => Kind::Xml,
            e if e.ends_with("+json") => Kind::Json,
            e if e.ends_with("+xml") => Kind::Xml,
            _ => Kind::Other,
        }
    }

    /// How the kind is named in messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Json => "JSON",
            Kind::Form => "form (application/x-www-form-urlencoded)",
            Kind::Multipart => "multipart/form-data",
            Kind::Xml => "XML",
            Kind::Other => "other",
        }
    }
}

/// A parsed body.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// A JSON document.
    Json(Value),
    /// Form fields in order, repeats kept (urlencoded or multipart; a
    /// multipart file part is a field too, by its name).
    Form(Vec<(String, Vec<u8>)>),
    /// An XML document as a JSON tree (see the module docs).
    Xml(Value),
    /// Not parsed (another media type, or an empty body).
    Raw,
}

/// Why a body could not be parsed. Messages quote no body content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadError {
    /// The kind the body claimed (or was expected) to be.
    pub kind: Kind,
    /// What is wrong, with a position where the parser gives one.
    pub msg: String,
}

impl Payload {
    /// Parse `body` as `content_type` says. An empty body is [`Payload::Raw`].
    ///
    /// # Errors
    /// A body that is not what its `Content-Type` says.
    pub fn parse(content_type: Option<&str>, body: &[u8]) -> Result<Payload, PayloadError> {
        let kind = Kind::of(content_type);
        let err = |msg: String| PayloadError { kind, msg };
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Payload::Raw);
        }
        match kind {
            Kind::Json => serde_json::from_slice(body)
                .map(Payload::Json)
                .map_err(|e| err(format!("invalid JSON: {e}"))),
            Kind::Form => Ok(Payload::Form(
                form_urlencoded::parse(body)
                    .map(|(k, v)| (k.into_owned(), v.into_owned().into_bytes()))
                    .collect(),
            )),
            Kind::Multipart => {
                let boundary = content_type.and_then(boundary).ok_or_else(|| {
                    err("multipart/form-data without a boundary parameter".into())
                })?;
                multipart(body, &boundary).map(Payload::Form).map_err(err)
            }
            Kind::Xml => xml_to_json(body).map(Payload::Xml).map_err(err),
            Kind::Other => Ok(Payload::Raw),
        }
    }

    /// The payload as one JSON value: JSON and XML as their trees, form
    /// fields as an object (a repeated field as an array; non-UTF-8 bytes
    /// replaced), a raw body as `null`.
    pub fn to_json(&self) -> Value {
        match self {
            Payload::Json(v) | Payload::Xml(v) => v.clone(),
            Payload::Form(fields) => {
                let mut map = Map::new();
                for (k, v) in fields {
                    push_repeat(
                        &mut map,
                        k,
                        Value::String(String::from_utf8_lossy(v).into()),
                    );
                }
                Value::Object(map)
            }
            Payload::Raw => Value::Null,
        }
    }
}

/// Insert `v` under `k`; a second value turns the entry into an array.
fn push_repeat(map: &mut Map<String, Value>, k: &str, v: Value) {
    match map.get_mut(k) {
        None => {
            map.insert(k.to_string(), v);
        }
        Some(Value::Array(a)) => a.push(v),
        Some(first) => {
            let first = first.take();
            map.insert(k.to_string(), Value::Array(vec![first, v]));
        }
    }
}

/// The `boundary` parameter of a multipart `Content-Type`.
fn boundary(ct: &str) -> Option<String> {
    ct.split(';').skip(1).find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        let v = v.trim().trim_matches('"');
        (k.trim().eq_ignore_ascii_case("boundary") && !v.is_empty()).then(|| v.to_string())
    })
}

/// The parts of a multipart/form-data body (RFC 7578): name and content.
fn multipart(body: &[u8], boundary: &str) -> Result<Vec<(String, Vec<u8>)>, String> {
    Ok(parts_of(body, boundary)?
        .into_iter()
        .map(|p| (p.name, p.data))
        .collect())
}

/// One part of a multipart/form-data body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// `name` of its `Content-Disposition`.
    pub name: String,
    /// Whether it is a file (its `Content-Disposition` has a `filename`).
    pub file: bool,
    /// Its `Content-Type` header, when it has one.
    pub content_type: Option<String>,
    /// Its content.
    pub data: Vec<u8>,
}

/// The parts of a multipart/form-data body with `content_type` (which
/// holds the boundary).
///
/// # Errors
/// No boundary, or a body that is not multipart.
pub fn parts(content_type: &str, body: &[u8]) -> Result<Vec<Part>, String> {
    let boundary =
        boundary(content_type).ok_or("multipart/form-data without a boundary parameter")?;
    parts_of(body, &boundary)
}

fn parts_of(body: &[u8], boundary: &str) -> Result<Vec<Part>, String> {
    let delim = format!("--{boundary}");
    let finder = memchr::memmem::Finder::new(delim.as_bytes());
    let starts: Vec<usize> = finder.find_iter(body).collect();
    if starts.is_empty() {
        return Err("multipart body without its boundary".into());
    }
    let mut fields = Vec::new();
    for pair in starts.windows(2) {
        let part = &body[pair[0] + delim.len()..pair[1]];
        let part = part
            .strip_prefix(b"\r\n")
            .ok_or("a multipart boundary line must end with CRLF")?;
        // Content ends with the CRLF that precedes the next delimiter.
        let part = part
            .strip_suffix(b"\r\n")
            .ok_or("a multipart part must end with CRLF")?;
        let split = memchr::memmem::find(part, b"\r\n\r\n")
            .ok_or("a multipart part has no blank line after its headers")?;
        let head = std::str::from_utf8(&part[..split])
            .map_err(|_| "multipart part headers are not UTF-8")?;
        let name = head
            .split("\r\n")
            .find_map(disposition_name)
            .ok_or("a multipart part has no Content-Disposition: form-data; name=\"…\"")?;
        let lines = || head.split("\r\n");
        let file = lines().any(|l| {
            let l = l.to_ascii_lowercase();
            l.starts_with("content-disposition:") && l.contains("filename=")
        });
        let content_type = lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        });
        fields.push(Part {
            name,
            file,
            content_type,
            data: part[split + 4..].to_vec(),
        });
    }
    let last = starts[starts.len() - 1];
    if !body[last + delim.len()..].starts_with(b"--") {
        return Err("multipart body without its closing boundary".into());
    }
    Ok(fields)
}

/// `name` of a `Content-Disposition: form-data; name="x"` header line.
fn disposition_name(line: &str) -> Option<String> {
    let (k, v) = line.split_once(':')?;
    if !k.trim().eq_ignore_ascii_case("content-disposition") {
        return None;
    }
    v.split(';').skip(1).find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("name")
            .then(|| v.trim().trim_matches('"').to_string())
    })
}

/// One open element while reading XML.
struct Open {
    name: String,
    map: Map<String, Value>,
    text: String,
}

/// Parse XML into the JSON tree described in the module docs.
fn xml_to_json(body: &[u8]) -> Result<Value, String> {
    let mut reader = quick_xml::Reader::from_reader(body);
    reader.config_mut().trim_text(true);
    let mut stack: Vec<Open> = Vec::new();
    let mut root: Option<Value> = None;
    let mut buf = Vec::new();
    loop {
        let at = reader.buffer_position();
        let event = reader
            .read_event_into(&mut buf)
            .map_err(|e| format!("invalid XML at byte {at}: {e}"))?;
        match event {
            Event::Start(e) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(format!("XML nested deeper than {MAX_DEPTH} elements"));
                }
                stack.push(open(&e)?);
            }
            Event::Empty(e) => {
                let done = open(&e)?;
                close(&mut stack, &mut root, done)?;
            }
            Event::End(_) => {
                let done = stack.pop().ok_or("invalid XML: unbalanced end tag")?;
                close(&mut stack, &mut root, done)?;
            }
            Event::Text(t) => {
                let text = t.unescape().map_err(|e| format!("invalid XML text: {e}"))?;
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&text);
                }
            }
            Event::CData(c) => {
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&String::from_utf8_lossy(&c));
                }
            }
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    if !stack.is_empty() {
        return Err("invalid XML: the document ends inside an element".into());
    }
    root.ok_or_else(|| "invalid XML: no root element".into())
}

/// An element's name and attributes.
fn open(e: &BytesStart<'_>) -> Result<Open, String> {
    let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
    let mut map = Map::new();
    for a in e.attributes() {
        let a = a.map_err(|e| format!("invalid XML attribute: {e}"))?;
        let key = format!("-{}", String::from_utf8_lossy(a.key.as_ref()));
        let value = a
            .unescape_value()
            .map_err(|e| format!("invalid XML attribute value: {e}"))?;
        map.insert(key, Value::String(value.into_owned()));
    }
    Ok(Open {
        name,
        map,
        text: String::new(),
    })
}

/// Attach a finished element to its parent, or make it the root.
fn close(stack: &mut [Open], root: &mut Option<Value>, done: Open) -> Result<(), String> {
    let value = if done.map.is_empty() {
        Value::String(done.text)
    } else {
        let mut map = done.map;
        if !done.text.is_empty() {
            map.insert("#text".into(), Value::String(done.text));
        }
        Value::Object(map)
    };
    match stack.last_mut() {
        Some(parent) => push_repeat(&mut parent.map, &done.name, value),
        None if root.is_none() => {
            let mut top = Map::new();
            top.insert(done.name, value);
            *root = Some(Value::Object(top));
        }
        None => return Err("invalid XML: more than one root element".into()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_from_content_type() {
        assert_eq!(
            Kind::of(Some("application/json; charset=utf-8")),
            Kind::Json
        );
        assert_eq!(Kind::of(Some("application/vnd.api+json")), Kind::Json);
        assert_eq!(
            Kind::of(Some("Application/X-WWW-Form-Urlencoded")),
            Kind::Form
        );
        assert_eq!(
            Kind::of(Some("multipart/form-data; boundary=x")),
            Kind::Multipart
        );
        assert_eq!(Kind::of(Some("text/xml")), Kind::Xml);
        assert_eq!(Kind::of(Some("application/atom+xml")), Kind::Xml);
        assert_eq!(Kind::of(Some("text/plain")), Kind::Other);
        assert_eq!(Kind::of(None), Kind::Other);
    }

    #[test]
    fn json_and_bad_json() {
        let p = Payload::parse(Some("application/json"), br#"{"a":[1,{"b":"c"}]}"#).unwrap();
        assert_eq!(p.to_json(), json!({"a":[1,{"b":"c"}]}));
        let e = Payload::parse(Some("application/json"), b"{\"a\":").unwrap_err();
        assert!(e.msg.starts_with("invalid JSON"), "{}", e.msg);
        assert_eq!(
            Payload::parse(Some("application/json"), b" \n").unwrap(),
            Payload::Raw
        );
    }

    #[test]
    fn form_fields_keep_repeats() {
        let p = Payload::parse(
            Some("application/x-www-form-urlencoded"),
            b"text=hello+world&x=%2Fdeploy&x=2",
        )
        .unwrap();
        assert_eq!(
            p.to_json(),
            json!({"text": "hello world", "x": ["/deploy", "2"]})
        );
    }

    #[test]
    fn multipart_fields() {
        let body = "--XyZ\r\nContent-Disposition: form-data; name=\"msg\"\r\n\r\nhi\r\nthere\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\nfile body\r\n--XyZ--\r\n";
        let p = Payload::parse(
            Some("multipart/form-data; boundary=\"XyZ\""),
            body.as_bytes(),
        )
        .unwrap();
        assert_eq!(
            p.to_json(),
            json!({"msg": "hi\r\nthere", "file": "file body"})
        );
        let cut = &body[..body.len() - 9];
        let e =
            Payload::parse(Some("multipart/form-data; boundary=XyZ"), cut.as_bytes()).unwrap_err();
        assert!(e.msg.contains("closing boundary"), "{}", e.msg);
        let e = Payload::parse(Some("multipart/form-data"), body.as_bytes()).unwrap_err();
        assert!(e.msg.contains("boundary"), "{}", e.msg);
    }

    #[test]
    fn xml_tree_like_webhook() {
        let x = br#"<?xml version="1.0"?><order id="7"><item sku="a">one</item><item sku="b"/><note>hi &amp; bye</note><empty/></order>"#;
        let p = Payload::parse(Some("application/xml"), x).unwrap();
        assert_eq!(
            p.to_json(),
            json!({"order": {"-id": "7", "item": [{"-sku": "a", "#text": "one"}, {"-sku": "b"}], "note": "hi & bye", "empty": ""}})
        );
        for bad in [&b"<a><b></a>"[..], b"<a>", b"<a/><b/>", b"just text"] {
            let e = Payload::parse(Some("text/xml"), bad).unwrap_err();
            assert!(e.msg.contains("XML"), "{}", e.msg);
        }
        let deep = format!("{}{}", "<a>".repeat(200), "</a>".repeat(200));
        let e = Payload::parse(Some("text/xml"), deep.as_bytes()).unwrap_err();
        assert!(e.msg.contains("deeper"), "{}", e.msg);
    }
}
