//! A request body parsed once, by its `Content-Type`: JSON, form fields
//! (`application/x-www-form-urlencoded` or `multipart/form-data`), XML, or
//! raw bytes.
//!
//! Owns: parsing a body of each kind into a [`Payload`] (XML and
//! urlencoded forms here) within the bounds of `shape.rs`. The body is
//! already bounded by `max_body_bytes` when it gets here; its nesting
//! ([`MAX_DEPTH`]), XML elements ([`MAX_ELEMENTS`]) and attributes
//! ([`MAX_ATTRIBUTES`]), form fields and parts ([`MAX_FIELDS`]) are bounded
//! too, and every parser is linear, so a hostile body costs at most linear
//! work and memory ([`Why::Bound`] says a bound was hit).
//!
//! XML becomes a JSON tree the way adnanh/webhook's XML support reads it:
//! the root element is the one key of the top object; an element with
//! attributes or child elements is an object (attributes as `-name`,
//! text as `#text`), a repeated child becomes an array, an element with
//! only text is that text. So `order.item.0.-sku` reads
//! `<order><item sku="a"/><item sku="b"/></order>`.
//!
//! multipart/form-data is read in `multipart.rs`, JSON checked in
//! `json.rs` (depth; natively, a key twice in an object is refused).

use quick_xml::events::{BytesStart, Event};
use serde_json::{Map, Value};

pub use super::multipart::Part;
pub use super::shape::{
    Kind, PayloadError, Why, MAX_ATTRIBUTES, MAX_DEPTH, MAX_ELEMENTS, MAX_FIELDS,
};

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

impl Payload {
    /// Parse `body` as `content_type` says. An empty body is [`Payload::Raw`].
    ///
    /// # Errors
    /// A body that is not what its `Content-Type` says.
    pub fn parse(content_type: Option<&str>, body: &[u8]) -> Result<Payload, PayloadError> {
        let kind = Kind::of(content_type);
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Payload::Raw);
        }
        match kind {
            Kind::Json => json(body).map(Payload::Json),
            Kind::Form => form(body).map(Payload::Form),
            Kind::Multipart => super::multipart::parse(content_type.unwrap_or(""), body)
                .map(|ps| Payload::Form(ps.into_iter().map(|p| (p.name, p.data)).collect())),
            Kind::Xml => xml_to_json(body).map(Payload::Xml),
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

/// A JSON body, natively: within [`MAX_DEPTH`], no key twice in an object.
fn json(body: &[u8]) -> Result<Value, PayloadError> {
    use super::json::JsonError;
    let (msg, why) = match super::json::check(body, true, false) {
        Ok(()) => {
            return serde_json::from_slice(body).map_err(|e| PayloadError {
                kind: Kind::Json,
                msg: format!("invalid JSON: {e}"),
                why: Why::Invalid,
            })
        }
        Err(JsonError::Invalid(e)) => (format!("invalid JSON: {e}"), Why::Invalid),
        Err(JsonError::Duplicate(k)) => (
            format!("an object has the key '{}' twice", shown(&k)),
            Why::Invalid,
        ),
        Err(JsonError::TooDeep) => (
            format!("JSON nested deeper than {MAX_DEPTH} arrays and objects"),
            Why::Bound,
        ),
    };
    Err(PayloadError {
        kind: Kind::Json,
        msg,
        why,
    })
}

/// A key as a message shows it: at most 64 characters, controls escaped.
pub fn shown(key: &str) -> String {
    let cut: String = key.chars().take(64).collect();
    let more = if cut.len() < key.len() { "…" } else { "" };
    format!("{}{more}", cut.escape_default())
}

/// The pairs of an urlencoded body (`+` is a space, `%XX` a byte), each
/// name and value UTF-8, at most [`MAX_FIELDS`].
fn form(body: &[u8]) -> Result<Vec<(String, Vec<u8>)>, PayloadError> {
    let err = |msg: String, why| PayloadError {
        kind: Kind::Form,
        msg,
        why,
    };
    let mut fields = Vec::new();
    for pair in body.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
        if fields.len() == MAX_FIELDS {
            return Err(err(format!("more than {MAX_FIELDS} fields"), Why::Bound));
        }
        let eq = memchr::memchr(b'=', pair).unwrap_or(pair.len());
        let name = decoded(&pair[..eq]);
        let value = decoded(pair.get(eq + 1..).unwrap_or_default());
        let name = String::from_utf8(name).map_err(|_| {
            err(
                format!("field {} has a name that is not UTF-8", fields.len() + 1),
                Why::Invalid,
            )
        })?;
        if std::str::from_utf8(&value).is_err() {
            let msg = format!("the value of field '{}' is not UTF-8", shown(&name));
            return Err(err(msg, Why::Invalid));
        }
        fields.push((name, value));
    }
    Ok(fields)
}

/// One urlencoded name or value, decoded to bytes.
fn decoded(raw: &[u8]) -> Vec<u8> {
    let plus: Vec<u8> = raw
        .iter()
        .map(|&b| if b == b'+' { b' ' } else { b })
        .collect();
    percent_encoding::percent_decode(&plus).collect()
}

/// The parts of a multipart/form-data body with `content_type` (which
/// holds the boundary); see `multipart.rs`.
///
/// # Errors
/// No boundary, a body that is not multipart, or one over a bound.
pub fn parts(content_type: &str, body: &[u8]) -> Result<Vec<Part>, String> {
    super::multipart::parse(content_type, body).map_err(|e| e.msg)
}

/// One open element while reading XML.
struct Open {
    name: String,
    map: Map<String, Value>,
    text: String,
}

/// Parse XML into the JSON tree described in the module docs.
fn xml_to_json(body: &[u8]) -> Result<Value, PayloadError> {
    let mut reader = quick_xml::Reader::from_reader(body);
    reader.config_mut().trim_text(true);
    let mut tree = Tree::default();
    loop {
        let at = reader.buffer_position();
        let event = reader
            .read_event()
            .map_err(|e| xml_invalid(format!("invalid XML at byte {at}: {e}")))?;
        if matches!(event, Event::Eof) {
            return tree.finish();
        }
        tree.take(event)?;
    }
}

fn xml_invalid(msg: String) -> PayloadError {
    PayloadError {
        kind: Kind::Xml,
        msg,
        why: Why::Invalid,
    }
}

/// An XML document read so far: its open elements, the root once closed,
/// and how many elements it has.
#[derive(Default)]
struct Tree {
    stack: Vec<Open>,
    root: Option<Value>,
    elements: usize,
}

impl Tree {
    /// Add one event of the document.
    fn take(&mut self, event: Event<'_>) -> Result<(), PayloadError> {
        match event {
            Event::Start(e) => {
                let element = self.open(&e)?;
                self.stack.push(element);
            }
            Event::Empty(e) => {
                let element = self.open(&e)?;
                self.close(element)?;
            }
            Event::End(_) => {
                let done = self
                    .stack
                    .pop()
                    .ok_or_else(|| xml_invalid("invalid XML: unbalanced end tag".into()))?;
                self.close(done)?;
            }
            Event::Text(t) => {
                let text = t
                    .unescape()
                    .map_err(|e| xml_invalid(format!("invalid XML text: {e}")))?;
                self.text(&text);
            }
            Event::CData(c) => self.text(&String::from_utf8_lossy(&c)),
            _ => {}
        }
        Ok(())
    }

    /// A new element, within [`MAX_ELEMENTS`] and [`MAX_DEPTH`].
    fn open(&mut self, e: &BytesStart<'_>) -> Result<Open, PayloadError> {
        self.elements += 1;
        if self.elements > MAX_ELEMENTS || self.stack.len() >= MAX_DEPTH {
            return Err(PayloadError {
                kind: Kind::Xml,
                msg: format!("XML over {MAX_ELEMENTS} elements or nested deeper than {MAX_DEPTH}"),
                why: Why::Bound,
            });
        }
        open(e)
    }

    fn close(&mut self, done: Open) -> Result<(), PayloadError> {
        close(&mut self.stack, &mut self.root, done).map_err(xml_invalid)
    }

    fn text(&mut self, text: &str) {
        if let Some(top) = self.stack.last_mut() {
            top.text.push_str(text);
        }
    }

    /// The tree of a document that has ended.
    fn finish(self) -> Result<Value, PayloadError> {
        if !self.stack.is_empty() {
            return Err(xml_invalid(
                "invalid XML: the document ends inside an element".into(),
            ));
        }
        self.root
            .ok_or_else(|| xml_invalid("invalid XML: no root element".into()))
    }
}

/// An element's name and attributes (at most [`MAX_ATTRIBUTES`]; of one
/// name twice, the last).
fn open(e: &BytesStart<'_>) -> Result<Open, PayloadError> {
    let err = |msg: String, why| PayloadError {
        kind: Kind::Xml,
        msg,
        why,
    };
    let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
    let mut map = Map::new();
    // quick-xml's duplicate check compares each attribute with every
    // earlier one (quadratic: 111,847 attributes took 8 s); the map keeps
    // the last of a name instead, in linear time.
    for (n, a) in e.attributes().with_checks(false).enumerate() {
        if n == MAX_ATTRIBUTES {
            let msg = format!("an XML element has more than {MAX_ATTRIBUTES} attributes");
            return Err(err(msg, Why::Bound));
        }
        let a = a.map_err(|e| err(format!("invalid XML attribute: {e}"), Why::Invalid))?;
        let key = format!("-{}", String::from_utf8_lossy(a.key.as_ref()));
        let value = a
            .unescape_value()
            .map_err(|e| err(format!("invalid XML attribute value: {e}"), Why::Invalid))?;
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
        assert!(e.msg.contains("deeper") && e.why == Why::Bound, "{}", e.msg);
    }

    /// The issue's body: 1 MiB, 111,847 attributes on one element (8 s of
    /// CPU with quick-xml's quadratic duplicate check) is refused at the
    /// bound; an element at the bound, with a name twice, reads the last.
    #[test]
    fn xml_bounds_attributes_and_elements() {
        let attrs: String = (0..111_847).map(|i| format!(" a{i}=\"\"")).collect();
        let bomb = format!("<r{attrs}/>");
        let e = Payload::parse(Some("application/xml"), bomb.as_bytes()).unwrap_err();
        assert_eq!(e.why, Why::Bound, "{}", e.msg);
        assert!(e.msg.contains("more than 100 attributes"), "{}", e.msg);
        let attrs: String = (0..MAX_ATTRIBUTES - 1)
            .map(|i| format!(" a{i}=\"{i}\""))
            .collect();
        let fits = format!("<r{attrs} a0=\"last\"/>");
        let p = Payload::parse(Some("application/xml"), fits.as_bytes()).unwrap();
        assert_eq!(p.to_json()["r"]["-a0"], "last");
        let many = format!("<r>{}</r>", "<e/>".repeat(MAX_ELEMENTS));
        let e = Payload::parse(Some("application/xml"), many.as_bytes()).unwrap_err();
        assert_eq!(e.why, Why::Bound, "{}", e.msg);
        let fits = format!("<r>{}</r>", "<e/>".repeat(MAX_ELEMENTS - 1));
        assert!(Payload::parse(Some("application/xml"), fits.as_bytes()).is_ok());
    }

    #[test]
    fn json_depth_and_duplicate_keys() {
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        let e = Payload::parse(Some("application/json"), deep.as_bytes()).unwrap_err();
        assert_eq!(e.why, Why::Bound, "{}", e.msg);
        let e = Payload::parse(Some("application/json"), br#"{"k":1,"k":2}"#).unwrap_err();
        assert_eq!(e.why, Why::Invalid);
        assert!(e.msg.contains("'k' twice"), "{}", e.msg);
    }
}
