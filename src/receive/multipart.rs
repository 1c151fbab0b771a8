//! multipart/form-data bodies (RFC 7578), read the way Go's
//! `mime/multipart` reads them, so a hooks file gets what adnanh/webhook
//! gets: lines may end in CRLF or, when the first boundary line does, in a
//! bare LF (Plex sends that); text before the first boundary and after the
//! closing one is ignored; a part without a `name` is skipped; a boundary
//! string inside content only counts at the start of a line and followed
//! by `--`, a space, a tab, CR, LF or the end.
//!
//! Owns: finding the parts and their headers, and the bounds on them
//! ([`MAX_FIELDS`](super::shape::MAX_FIELDS) parts,
//! [`MAX_PART_HEADER_BYTES`] of headers a part). Hand-written (~100
//! lines over a body already in memory and bounded): the maintained Rust
//! multipart parsers are async (`multer`), the blocking `multipart` crate
//! is unmaintained. One pass with `memchr`: linear in the body.

use memchr::memmem::Finder;

use super::shape::{Kind, PayloadError, Why, MAX_FIELDS};

/// Most bytes of one part's header section (Go allows more in total, but
/// a form field's headers are a line or two).
pub const MAX_PART_HEADER_BYTES: usize = 8 * 1024;

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

/// The parts of a multipart/form-data body whose `Content-Type` (with its
/// `boundary`) is `content_type`, in order.
///
/// # Errors
/// No boundary; a body that is not multipart (no boundary line, a part
/// without its headers' end or its closing boundary, malformed headers);
/// more than [`MAX_FIELDS`] parts or a part's headers over
/// [`MAX_PART_HEADER_BYTES`] ([`Why::Bound`]).
pub fn parse(content_type: &str, body: &[u8]) -> Result<Vec<Part>, PayloadError> {
    let boundary = boundary(content_type)
        .ok_or_else(|| invalid("multipart/form-data without a boundary parameter"))?;
    let dash = format!("--{boundary}").into_bytes();
    let Some((mut at, nl)) = first_boundary(body, &dash)? else {
        return Ok(Vec::new());
    };
    let nl_dash = [nl, &dash].concat();
    let finder = Finder::new(&nl_dash);
    let mut parts = Vec::new();
    for _ in 0..MAX_FIELDS {
        let (headers, start) = headers(body, at)?;
        let (end, after) = content_end(body, start, &dash, &finder)?;
        if let Some(p) = part(&headers, &body[start..end]) {
            parts.push(p);
        }
        let rest = &body[after..];
        if rest.starts_with(b"--") {
            return Ok(parts);
        }
        let line = skip_lwsp(rest);
        if !line.starts_with(nl) {
            return Err(invalid(
                "a multipart boundary line has text after the boundary",
            ));
        }
        at = body.len() - line.len() + nl.len();
    }
    Err(PayloadError {
        kind: Kind::Multipart,
        msg: format!("more than {MAX_FIELDS} parts"),
        why: Why::Bound,
    })
}

fn invalid(msg: &str) -> PayloadError {
    PayloadError {
        kind: Kind::Multipart,
        msg: msg.to_string(),
        why: Why::Invalid,
    }
}

/// The `boundary` parameter of a multipart `Content-Type`.
pub fn boundary(ct: &str) -> Option<String> {
    ct.split(';').skip(1).find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        let v = v.trim().trim_matches('"');
        (k.trim().eq_ignore_ascii_case("boundary") && !v.is_empty()).then(|| v.to_string())
    })
}

/// Spaces and tabs skipped.
fn skip_lwsp(b: &[u8]) -> &[u8] {
    let n = b.iter().take_while(|c| matches!(c, b' ' | b'\t')).count();
    &b[n..]
}

/// The line of `body` starting at `at`, with its `\n` (none at the end).
fn line_at(body: &[u8], at: usize) -> &[u8] {
    let end = memchr::memchr(b'\n', &body[at..]).map_or(body.len(), |i| at + i + 1);
    &body[at..end]
}

/// The first boundary line (lines before it are a preamble): where the
/// first part starts and the line ending the body uses (`\r\n`, or `\n`
/// when that line ends so); `None` when it is the closing boundary.
fn first_boundary(
    body: &[u8],
    dash: &[u8],
) -> Result<Option<(usize, &'static [u8])>, PayloadError> {
    let mut at = 0;
    while at < body.len() {
        let line = line_at(body, at);
        at += line.len();
        let Some(rest) = line.strip_prefix(dash) else {
            continue;
        };
        if let Some(end) = rest.strip_prefix(b"--") {
            if matches!(skip_lwsp(end), b"" | b"\n" | b"\r\n") {
                return Ok(None);
            }
        }
        match skip_lwsp(rest) {
            b"\r\n" => return Ok(Some((at, b"\r\n"))),
            b"\n" => return Ok(Some((at, b"\n"))),
            _ => {}
        }
    }
    Err(invalid("multipart body without its boundary"))
}

/// A part's headers (name, value) from `at`, and where its content starts
/// (after the blank line).
fn headers(body: &[u8], mut at: usize) -> Result<(Vec<(String, String)>, usize), PayloadError> {
    let start = at;
    let mut out: Vec<(String, String)> = Vec::new();
    loop {
        if at - start > MAX_PART_HEADER_BYTES {
            return Err(PayloadError {
                kind: Kind::Multipart,
                msg: format!("a part's headers are over {MAX_PART_HEADER_BYTES} bytes"),
                why: Why::Bound,
            });
        }
        let line = line_at(body, at);
        if !line.ends_with(b"\n") {
            return Err(invalid(
                "a multipart part has no blank line after its headers",
            ));
        }
        at += line.len();
        let text = std::str::from_utf8(line)
            .map_err(|_| invalid("multipart part headers are not UTF-8"))?
            .trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            return Ok((out, at));
        }
        match (
            text.starts_with([' ', '\t']),
            out.last_mut(),
            text.split_once(':'),
        ) {
            (true, Some(last), _) => last.1.push_str(text),
            (false, _, Some((k, v))) => out.push((k.trim().to_string(), v.trim().to_string())),
            _ => return Err(invalid("a multipart header line has no ':'")),
        }
    }
}

/// Where the content from `start` ends (before the line ending that
/// precedes the next boundary) and where the text after that boundary
/// starts.
fn content_end(
    body: &[u8],
    start: usize,
    dash: &[u8],
    finder: &Finder<'_>,
) -> Result<(usize, usize), PayloadError> {
    // Go's rule: a boundary ends with `--`, LWSP, CR, LF or the body.
    let ends = |p: usize| match body.get(p) {
        None | Some(b' ' | b'\t' | b'\r' | b'\n') => true,
        Some(b'-') => body.get(p + 1) == Some(&b'-'),
        Some(_) => false,
    };
    if body[start..].starts_with(dash) && ends(start + dash.len()) {
        return Ok((start, start + dash.len()));
    }
    let nl_dash = finder.needle().len();
    finder
        .find_iter(&body[start..])
        .map(|i| start + i)
        .find(|&i| ends(i + nl_dash))
        .map(|i| (i, i + nl_dash))
        .ok_or_else(|| invalid("multipart body without its closing boundary"))
}

/// The part of `headers` and `data`; `None` without a `name` (Go's form
/// reader skips it).
fn part(headers: &[(String, String)], data: &[u8]) -> Option<Part> {
    let header = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.as_str())
    };
    let disposition = header("content-disposition")?;
    let params = || {
        disposition.split(';').skip(1).filter_map(|p| {
            let (k, v) = p.trim().split_once('=')?;
            Some((k.trim().to_ascii_lowercase(), v.trim().trim_matches('"')))
        })
    };
    let name = params().find(|(k, _)| k == "name")?.1.to_string();
    Some(Part {
        name,
        file: params().any(|(k, _)| k == "filename"),
        content_type: header("content-type").map(str::to_string),
        data: data.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(ct: &str, body: &str) -> Vec<(String, String)> {
        parse(ct, body.as_bytes())
            .unwrap()
            .into_iter()
            .map(|p| (p.name, String::from_utf8(p.data).unwrap()))
            .collect()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn crlf_lf_preamble_and_boundaries_in_content() {
        let ct = "multipart/form-data; boundary=xxx";
        let crlf = "preamble\r\n--xxx\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\none\r\n--xxxy\r\n--xxx \r\nContent-Disposition: form-data; name=\"b\"\r\n\r\n\r\n--xxx--\r\nepilogue";
        assert_eq!(names(ct, crlf), pairs(&[("a", "one\r\n--xxxy"), ("b", "")]));
        // Plex (adnanh/webhook's test): every line ends in LF.
        let lf = "--xxx\nContent-Disposition: form-data; name=\"payload\"\n\n{\"a\": 1}\n\n--xxx\nContent-Disposition: form-data; name=\"thumb\"; filename=\"t.jpg\"\nContent-Type: application/octet-stream\n\nbinary data\n--xxx--";
        let ps = parse(ct, lf.as_bytes()).unwrap();
        assert_eq!(ps[0].data, b"{\"a\": 1}\n");
        assert!(ps[1].file && ps[1].content_type.as_deref() == Some("application/octet-stream"));
        assert_eq!(ps[1].data, b"binary data");
        // An empty part, a part without a name (skipped), only a closing line.
        let odd = "--xxx\r\nContent-Disposition: form-data; name=\"e\"\r\n\r\n--xxx\r\nX-A: 1\r\n\r\nz\r\n--xxx--";
        assert_eq!(names(ct, odd), pairs(&[("e", "")]));
        assert!(names(ct, "--xxx--\r\n").is_empty());
    }

    #[test]
    fn bad_bodies_and_bounds() {
        let ct = "multipart/form-data; boundary=b";
        for (body, says) in [
            ("no boundary at all", "without its boundary"),
            (
                "--b\r\nContent-Disposition: form-data; name=a\r\n",
                "blank line",
            ),
            (
                "--b\r\nContent-Disposition: form-data; name=a\r\n\r\nx",
                "closing",
            ),
            ("--b\r\nnot a header\r\n\r\nx\r\n--b--", "':'"),
            ("--b\r\nA: 1\r\n\r\nx\r\n--b junk\r\n", "text after"),
        ] {
            let e = parse(ct, body.as_bytes()).unwrap_err();
            assert!(
                e.msg.contains(says) && e.why == Why::Invalid,
                "{body:?}: {}",
                e.msg
            );
        }
        assert!(parse("multipart/form-data", b"--b--").is_err());
        let one = "--b\r\nContent-Disposition: form-data; name=a\r\n\r\nx\r\n";
        let many = format!("{}--b--", one.repeat(MAX_FIELDS + 1));
        let e = parse(ct, many.as_bytes()).unwrap_err();
        assert_eq!(e.why, Why::Bound, "{}", e.msg);
        let fits = format!("{}--b--", one.repeat(MAX_FIELDS));
        assert_eq!(parse(ct, fits.as_bytes()).unwrap().len(), MAX_FIELDS);
        let big = format!(
            "--b\r\nX: {}\r\n\r\nx\r\n--b--",
            "y".repeat(MAX_PART_HEADER_BYTES)
        );
        assert_eq!(parse(ct, big.as_bytes()).unwrap_err().why, Why::Bound);
    }
}
