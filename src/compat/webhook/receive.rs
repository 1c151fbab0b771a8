//! The adnanh/webhook way of reading a request, for hooks files: headers
//! under canonical names (`X-Hub-Signature`) and query parameters with
//! their first value, the body parsed by a `Content-Type` that *contains*
//! `json`, `x-www-form-urlencoded` or `xml` (or is multipart) — and a body
//! that does not parse is simply no payload —, dotted names where a key
//! with the dots wins, values printed as Go prints them, and its rule
//! outcome: a missing value is no match, a failed signature an error.
//!
//! Owns: [`HookRequest`], [`Fault`] and [`go_json`]. The sources,
//! rules and signature checks are the native ones (`values`, `rules`,
//! `signature`); this module only reads them the way webhook does.
//!
//! Unlike webhook, a JSON, XML or urlencoded body is parsed only when the
//! rule or a value first reads the payload: a rule that checks a
//! signature in a header first refuses a bad request before its body is
//! parsed. A multipart body is parsed at once, as webhook does, because
//! webhook answers one it cannot parse before any rule. A body over one of
//! the payload bounds (`shape.rs`) is refused ([`Fault::TooComplex`]),
//! where webhook would spend what it takes.

use std::cell::OnceCell;
use std::net::SocketAddr;

use serde_json::{Map, Value};

use super::gojson::as_go_reads;
use crate::receive::json::{self, JsonError};
use crate::receive::payload::{self, Payload, Why};
use crate::receive::rules::{unix_now, Leaf, Rule};
use crate::receive::values::{RequestField, Source, Whole};

/// Why a value or rule could not be evaluated, as webhook tells them apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The value is not in the request (webhook's parameter-node error: a
    /// rule reading it does not match).
    Missing,
    /// A signature did not match (an error, unless soft in an `or`).
    Signature,
    /// Anything else (an error).
    Other(String),
    /// The body is over a bound of `shape.rs` (trigd's refusal,
    /// `payload_too_complex`).
    TooComplex(String),
}

/// The request as a hooks-file hook reads it.
pub struct HookRequest<'a> {
    method: &'a str,
    remote: String,
    body: &'a [u8],
    headers: &'a [(String, String)],
    go_headers: Value,
    query: Value,
    /// The body's `Content-Type` (the hook's, else the request's).
    content_type: String,
    /// The parsed payload, on first use; `Null` when the body does not
    /// parse (webhook's nil map).
    payload: OnceCell<Result<Value, Fault>>,
    /// `parse-parameters-as-json` names in the payload, applied when it
    /// is parsed.
    json_payload_params: Vec<String>,
}

/// Why a request cannot be read at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// The multipart body could not be parsed (webhook answers 500).
    Multipart,
    /// The multipart body is over a bound (`payload_too_complex`).
    TooComplex(String),
}

impl<'a> HookRequest<'a> {
    /// Read a request: `headers` with lower-case names, decoded `query`
    /// pairs, the peer address, and the hook's `incoming-payload-content-type`
    /// and `parse-parameters-as-json` payload names (a multipart file part
    /// of one of those names is read as JSON).
    ///
    /// # Errors
    /// A multipart body that is not valid or is over a bound.
    pub fn new(
        method: &'a str,
        remote: Option<SocketAddr>,
        headers: &'a [(String, String)],
        query: &[(String, String)],
        body: &'a [u8],
        content_type: Option<&str>,
        json_parts: &[String],
    ) -> Result<HookRequest<'a>, BodyError> {
        let mut go_headers = Map::new();
        // Go keeps Host and Transfer-Encoding out of a request's headers.
        for (k, v) in headers
            .iter()
            .filter(|(k, _)| k != "host" && k != "transfer-encoding")
        {
            go_headers
                .entry(canonical(k))
                .or_insert_with(|| Value::String(v.clone()));
        }
        let ct = content_type
            .map(str::to_string)
            .or_else(|| {
                crate::receive::signature::header(headers, "content-type").map(str::to_string)
            })
            .unwrap_or_default();
        Ok(HookRequest {
            method,
            remote: remote.map_or_else(String::new, go_addr),
            body,
            headers,
            go_headers: Value::Object(go_headers),
            query: Value::Object(first_values(
                query.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            )),
            payload: match ct.starts_with("multipart/form-data;") {
                true => OnceCell::from(Ok(multipart(&ct, body, json_parts)?)),
                false => OnceCell::new(),
            },
            content_type: ct,
            json_payload_params: Vec::new(),
        })
    }

    /// The payload, parsed on first use (with the `parse-parameters-as-json`
    /// names in it applied).
    ///
    /// # Errors
    /// [`Fault::TooComplex`] for a body over a bound.
    fn payload(&self) -> Result<&Value, Fault> {
        let parsed = self.payload.get_or_init(|| {
            let mut tree = parse_payload(&self.content_type, self.body)?;
            for name in &self.json_payload_params {
                let text = get_parameter(name, &tree).map(go_string);
                if let Some(obj) = text.ok().and_then(|t| json_object(&t)) {
                    replace_parameter(name, &mut tree, obj);
                }
            }
            Ok(tree)
        });
        parsed.as_ref().map_err(Clone::clone)
    }

    /// The body's `Content-Type` (the hook's, else the request's).
    pub fn content_type(&self) -> &str {
        &self.content_type
    }

    /// The value of `src` as webhook passes it to a command.
    ///
    /// # Errors
    /// [`Fault::Missing`] when the request does not carry it.
    pub fn get(&self, src: &Source) -> Result<String, Fault> {
        let node = |name: &str, v: &Value| get_parameter(name, v).map(go_string);
        match src {
            Source::Header(n) => node(&canonical(n), &self.go_headers),
            Source::Query(n) => node(n, &self.query),
            Source::Payload(p) => node(&p.to_string(), self.payload()?),
            Source::Literal(s) => Ok(s.clone()),
            Source::BodyText => Ok(String::from_utf8_lossy(self.body).into_owned()),
            Source::Request(RequestField::Method) => Ok(self.method.to_string()),
            Source::Request(RequestField::RemoteAddr) => Ok(self.remote.clone()),
            Source::Whole(Whole::Payload) => Ok(go_json(self.payload()?)),
            Source::Whole(Whole::Headers) => Ok(go_json(&self.go_headers)),
            Source::Whole(Whole::Query) => Ok(go_json(&self.query)),
            other => Err(Fault::Other(format!(
                "{} is not a webhook source",
                other.describe()
            ))),
        }
    }

    /// `parse-parameters-as-json`: each value that is a JSON object replaces
    /// the text it was read from (other values stay as they are). Names in
    /// the payload are applied when it is parsed.
    pub fn parse_json_params(&mut self, params: &[Source]) {
        for src in params {
            let (tree, key) = match src {
                Source::Header(n) => (&mut self.go_headers, canonical(n)),
                Source::Query(n) => (&mut self.query, n.clone()),
                Source::Payload(p) => {
                    let name = p.to_string();
                    match self.payload.get_mut() {
                        Some(Ok(tree)) => (tree, name),
                        Some(Err(_)) => continue,
                        None => {
                            self.json_payload_params.push(name);
                            continue;
                        }
                    }
                }
                _ => continue,
            };
            let text = get_parameter(&key, tree).map(go_string);
            if let Some(obj) = text.ok().and_then(|t| json_object(&t)) {
                replace_parameter(&key, tree, obj);
            }
        }
    }

    /// Evaluate `rule` as webhook does: the outcome, and the fault met on
    /// the way (a missing value makes an `and` fail and is skipped by an
    /// `or`; with `soft`, so is a failed signature).
    pub fn eval(&self, rule: &Rule, soft: bool) -> (bool, Option<Fault>) {
        match rule {
            Rule::And(all) => {
                for r in all {
                    match self.eval(r, soft) {
                        (_, Some(f)) => return (false, Some(f)),
                        (false, None) => return (false, None),
                        (true, None) => {}
                    }
                }
                (true, None)
            }
            Rule::Or(any) => {
                for r in any {
                    let (ok, fault) = self.eval(r, soft);
                    match fault {
                        None | Some(Fault::Missing) => {}
                        Some(Fault::Signature) if soft => {}
                        Some(f) => return (false, Some(f)),
                    }
                    if ok {
                        return (true, None);
                    }
                }
                (false, None)
            }
            Rule::Not(inner) => {
                let (ok, fault) = self.eval(inner, soft);
                (!ok, fault)
            }
            Rule::Match(leaf, _) => self.leaf(leaf),
        }
    }

    fn leaf(&self, leaf: &Leaf) -> (bool, Option<Fault>) {
        let value = |src: &Source| self.get(src);
        match leaf {
            Leaf::Equals(src, want) => match value(src) {
                Ok(v) => (constant_eq(v.as_bytes(), want.as_bytes()), None),
                Err(f) => (false, Some(f)),
            },
            Leaf::Regex(src, re) => match value(src) {
                Ok(v) => (re.is_match(&v), None),
                Err(f) => (false, Some(f)),
            },
            Leaf::Cidr(ranges) => match client_ip(&self.remote) {
                Some(ip) => (ranges.iter().any(|c| c.contains(ip)), None),
                None => (false, Some(Fault::Other("no client address".into()))),
            },
            Leaf::SignatureIn(src, v) => match value(src) {
                Ok(sig) => match v.verify_value(&sig, self.body) {
                    Ok(()) => (true, None),
                    Err(_) => (false, Some(Fault::Signature)),
                },
                Err(f) => (false, Some(f)),
            },
            Leaf::Signature(v) => self.scalr(v),
        }
    }

    /// `scalr-signature`: without the `X-Signature` and `Date` headers, no
    /// match; otherwise the signature and the date must hold.
    fn scalr(&self, v: &crate::receive::signature::Verifier) -> (bool, Option<Fault>) {
        let has = |h: &str| crate::receive::signature::header(self.headers, h).is_some();
        if !has("x-signature") || !has("date") {
            return (false, None);
        }
        match v.verify(self.headers, self.body, unix_now()) {
            Ok(()) => (true, None),
            Err(crate::receive::signature::SigError::Malformed { .. }) => {
                (false, Some(Fault::Other("bad Date header".into())))
            }
            Err(_) => (false, Some(Fault::Signature)),
        }
    }
}

/// Equal bytes, compared in constant time (as webhook compares values).
fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// `addr` as Go prints a peer: an IPv4-mapped address (a client of a
/// dual-stack listener) as IPv4, `10.1.2.3:4567`, not `[::ffff:10.1.2.3]:4567`.
fn go_addr(addr: SocketAddr) -> String {
    SocketAddr::new(addr.ip().to_canonical(), addr.port()).to_string()
}

/// The IP of `ip:port` (webhook's remote address).
fn client_ip(remote: &str) -> Option<std::net::IpAddr> {
    remote
        .parse::<SocketAddr>()
        .map(|a| a.ip())
        .ok()
        .or_else(|| remote.trim_matches(['[', ']', ' ']).parse().ok())
}

/// The first JSON value of `text`, when it is an object (read as Go reads
/// it: [`as_go_reads`]).
fn json_object(text: &str) -> Option<Value> {
    let text = as_go_reads(text.as_bytes());
    let mut de = serde_json::Deserializer::from_slice(&text).into_iter::<Value>();
    match de.next() {
        Some(Ok(obj @ Value::Object(_))) => Some(obj),
        _ => None,
    }
}

/// The payload webhook reads from a body (not multipart) with
/// Content-Type `ct`: `Null` when it reads none.
///
/// # Errors
/// [`Fault::TooComplex`] for a body over a bound.
fn parse_payload(ct: &str, body: &[u8]) -> Result<Value, Fault> {
    if ct.contains("json") {
        json_payload(body)
    } else if ct.contains("x-www-form-urlencoded") {
        Ok(form(body)?.map_or(Value::Null, Value::Object))
    } else if ct.contains("xml") {
        match Payload::parse(Some("application/xml"), body) {
            Ok(Payload::Xml(v @ Value::Object(_))) => Ok(v),
            Err(e) if e.why == Why::Bound => Err(Fault::TooComplex(e.msg)),
            _ => Ok(Value::Null),
        }
    } else {
        Ok(Value::Null)
    }
}

/// A JSON body: an object, or an array under `root`; only the first value
/// is read (text after it is ignored, as Go's decoder does; of a key
/// given twice, the last counts, as in Go; a lone surrogate escape or a
/// byte that is not UTF-8 is U+FFFD, as in Go: [`as_go_reads`]).
///
/// # Errors
/// [`Fault::TooComplex`] past [`payload::MAX_DEPTH`].
fn json_payload(body: &[u8]) -> Result<Value, Fault> {
    let body = as_go_reads(body);
    let body: &[u8] = &body;
    if json::check(body, false, true) == Err(JsonError::TooDeep) {
        return Err(Fault::TooComplex(format!(
            "JSON nested deeper than {} arrays and objects",
            payload::MAX_DEPTH
        )));
    }
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    let mut values = serde_json::Deserializer::from_slice(body).into_iter::<Value>();
    Ok(match (first, values.next()) {
        (Some(b'['), Some(Ok(v))) => {
            let mut m = Map::new();
            m.insert("root".into(), v);
            Value::Object(m)
        }
        (_, Some(Ok(v @ Value::Object(_)))) => v,
        _ => Value::Null,
    })
}

/// An urlencoded body, first value of each name; `None` when any pair is
/// malformed (webhook then has no payload at all).
///
/// # Errors
/// [`Fault::TooComplex`] for more than [`payload::MAX_FIELDS`] fields.
fn form(body: &[u8]) -> Result<Option<Map<String, Value>>, Fault> {
    let Ok(text) = std::str::from_utf8(body) else {
        return Ok(None);
    };
    let mut pairs = Vec::new();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        if pairs.len() == payload::MAX_FIELDS {
            let n = payload::MAX_FIELDS;
            return Err(Fault::TooComplex(format!("more than {n} form fields")));
        }
        if pair.contains(';') {
            return Ok(None);
        }
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (Some(k), Some(v)) = (unescape(k), unescape(v)) else {
            return Ok(None);
        };
        pairs.push((k, v));
    }
    Ok(Some(first_values(
        pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    )))
}

/// Go's `url.QueryUnescape`: `+` is a space, `%XX` a byte; anything else
/// after `%` is an error.
fn unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// A multipart body: every non-file field's first value, and file parts
/// that are JSON (by part `Content-Type` or a `parse-parameters-as-json`
/// name) as their object.
fn multipart(ct: &str, body: &[u8], json_parts: &[String]) -> Result<Value, BodyError> {
    let parts = crate::receive::multipart::parse(ct, body).map_err(|e| match e.why {
        Why::Bound => BodyError::TooComplex(e.msg),
        Why::Invalid => BodyError::Multipart,
    })?;
    let mut m = Map::new();
    for p in parts.iter().filter(|p| !p.file) {
        let v = Value::String(String::from_utf8_lossy(&p.data).into_owned());
        m.entry(p.name.clone()).or_insert(v);
    }
    for p in parts.iter().filter(|p| p.file) {
        let json =
            json_parts.contains(&p.name) || p.content_type.as_deref() == Some("application/json");
        if json && !m.contains_key(&p.name) {
            let data = as_go_reads(&p.data);
            let mut de = serde_json::Deserializer::from_slice(&data).into_iter::<Value>();
            let v = match de.next() {
                Some(Ok(v @ Value::Object(_))) => v,
                _ => Value::Null,
            };
            m.insert(p.name.clone(), v);
        }
    }
    Ok(if m.is_empty() {
        Value::Null
    } else {
        Value::Object(m)
    })
}

/// First value of each name.
fn first_values<'k>(pairs: impl Iterator<Item = (&'k str, &'k str)>) -> Map<String, Value> {
    let mut m = Map::new();
    for (k, v) in pairs {
        m.entry(k.to_string())
            .or_insert_with(|| Value::String(v.to_string()));
    }
    m
}

/// Go's `CanonicalMIMEHeaderKey`: `x-hub-signature` → `X-Hub-Signature`
/// (a name with other characters than letters, digits and `-` is kept).
pub fn canonical(name: &str) -> String {
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return name.to_string();
    }
    let mut upper = true;
    name.chars()
        .map(|c| {
            let out = if upper {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            upper = c == '-';
            out
        })
        .collect()
}

/// webhook's `GetParameter`: a key with the whole (dotted) name wins;
/// else the part before the first dot, then the rest below it; a number
/// indexes an array.
fn get_parameter<'v>(name: &str, v: &'v Value) -> Result<&'v Value, Fault> {
    match v {
        Value::Array(items) if !items.is_empty() => {
            let (head, rest) = match name.split_once('.') {
                Some((h, r)) => (h, Some(r)),
                None => (name, None),
            };
            let item = head
                .parse::<usize>()
                .ok()
                .and_then(|i| items.get(i))
                .ok_or(Fault::Missing)?;
            rest.map_or(Ok(item), |r| get_parameter(r, item))
        }
        Value::Object(m) => {
            if let Some(v) = m.get(name) {
                return Ok(v);
            }
            let (head, rest) = name.split_once('.').ok_or(Fault::Missing)?;
            get_parameter(rest, m.get(head).ok_or(Fault::Missing)?)
        }
        _ => Err(Fault::Missing),
    }
}

/// Put `value` at dotted `name` in `tree`, only where a value already is.
fn replace_parameter(name: &str, tree: &mut Value, value: Value) {
    match tree {
        Value::Object(m) => {
            if let Some(slot) = m.get_mut(name) {
                *slot = value;
            } else if let Some((head, rest)) = name.split_once('.') {
                if let Some(child) = m.get_mut(head) {
                    replace_parameter(rest, child, value);
                }
            }
        }
        Value::Array(items) => {
            if let Some((head, rest)) = name.split_once('.') {
                if let Some(child) = head.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                    replace_parameter(rest, child, value);
                }
            }
        }
        _ => {}
    }
}

/// A value as Go's `fmt` prints it: a string as itself, `null` as
/// `<nil>`, an object or array as [`go_json`], a number as written.
pub fn go_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "<nil>".into(),
        Value::Object(_) | Value::Array(_) => go_json(v),
        other => other.to_string(),
    }
}

/// JSON as Go's `encoding/json` writes it: keys sorted, no spaces, and
/// `<`, `>`, `&`, U+2028, U+2029 escaped as `\u003c` etc.
pub fn go_json(v: &Value) -> String {
    let mut out = String::new();
    write_go_json(v, &mut out);
    out
}

fn write_go_json(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            out.push('{');
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_string(k, out);
                out.push(':');
                write_go_json(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(x, out);
            }
            out.push(']');
        }
        Value::String(s) => write_go_string(s, out),
        other => out.push_str(&other.to_string()),
    }
}

fn write_go_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receive::values::JsonPath;

    fn req<'a>(h: &'a [(String, String)], body: &'a [u8]) -> HookRequest<'a> {
        let q = vec![
            ("q".to_string(), "1".to_string()),
            ("q".to_string(), "2".to_string()),
        ];
        let remote = Some("10.1.2.3:4567".parse().unwrap());
        HookRequest::new("POST", remote, h, &q, body, None, &[]).unwrap()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn payload(p: &str) -> Source {
        Source::Payload(JsonPath::parse(p).unwrap())
    }

    #[test]
    fn values_read_as_webhook_prints_them() {
        let h = pairs(&[
            ("content-type", "application/json; charset=utf-8"),
            ("x-event", "push"),
        ]);
        let body = br#"{"a.b": "raw key", "a": {"b": "nested"}, "n": 1.50, "t": true, "z": null,
            "list": [{"id": 7}], "html": {"k": "<&>"}} trailing"#;
        let r = req(&h, body);
        assert_eq!(r.get(&payload("a.b")).unwrap(), "raw key");
        assert_eq!(r.get(&payload("list.0.id")).unwrap(), "7");
        assert_eq!(r.get(&payload("n")).unwrap(), "1.50");
        assert_eq!(r.get(&payload("t")).unwrap(), "true");
        assert_eq!(r.get(&payload("z")).unwrap(), "<nil>");
        assert_eq!(
            r.get(&payload("html")).unwrap(),
            r#"{"k":"\u003c\u0026\u003e"}"#
        );
        assert_eq!(r.get(&payload("list.1.id")), Err(Fault::Missing));
        assert_eq!(r.get(&Source::Header("x-event".into())).unwrap(), "push");
        assert_eq!(r.get(&Source::Query("q".into())).unwrap(), "1");
        assert_eq!(r.get(&Source::Whole(Whole::Query)).unwrap(), r#"{"q":"1"}"#);
        assert_eq!(
            r.get(&Source::Request(RequestField::RemoteAddr)).unwrap(),
            "10.1.2.3:4567"
        );
        let hs = r.get(&Source::Whole(Whole::Headers)).unwrap();
        assert!(hs.contains(r#""X-Event":"push""#), "{hs}");
    }

    #[test]
    fn bodies_that_do_not_parse_are_no_payload() {
        for (ct, body) in [
            ("application/json", "{bad"),
            ("application/json", "\"a string\""),
            ("application/x-www-form-urlencoded", "a=%zz&b=1"),
            ("text/plain", "a=1"),
        ] {
            let h = pairs(&[("content-type", ct)]);
            let r = req(&h, body.as_bytes());
            assert_eq!(
                r.get(&Source::Whole(Whole::Payload)).unwrap(),
                "null",
                "{ct} {body}"
            );
        }
        let h = pairs(&[("content-type", "application/json")]);
        let r = req(&h, b" [1, 2]");
        assert_eq!(r.get(&payload("root.1")).unwrap(), "2");
        let h = pairs(&[("content-type", "multipart/form-data; boundary=x")]);
        let q = Vec::new();
        assert!(HookRequest::new("POST", None, &h, &q, b"nope", None, &[]).is_err());
    }

    #[test]
    fn json_parameters_replace_their_text() {
        let h = pairs(&[("content-type", "application/x-www-form-urlencoded")]);
        let body = b"payload=%7B%22canon_url%22%3A%22https%3A%2F%2Fx%22%7D";
        let mut r = req(&h, body);
        assert_eq!(r.get(&payload("payload.canon_url")), Err(Fault::Missing));
        r.parse_json_params(&[payload("payload")]);
        assert_eq!(r.get(&payload("payload.canon_url")).unwrap(), "https://x");
    }

    #[test]
    fn canonical_header_names() {
        assert_eq!(canonical("x-hub-signature"), "X-Hub-Signature");
        assert_eq!(canonical("content-TYPE"), "Content-Type");
        assert_eq!(canonical("odd name"), "odd name");
    }
}
