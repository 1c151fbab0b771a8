//! JSON text as Go's `encoding/json` reads its strings, rewritten so that
//! serde_json reads it the same way: webhook decodes a lone UTF-16
//! surrogate escape (`"\ud800"`) and a byte that is not UTF-8 as U+FFFD and
//! keeps the rest of the payload, where serde_json refuses the whole text
//! (and the hook would see no payload at all).
//!
//! Owns: [`as_go_reads`], one linear pass over the bytes. Only the hooks
//! files' payloads go through it: trigd's own endpoints refuse such a body
//! (`400 invalid_payload`), as a value that is not text should be.

use std::borrow::Cow;

/// U+FFFD as UTF-8: what Go puts for each byte that is not UTF-8.
const REPLACEMENT: &[u8] = "\u{fffd}".as_bytes();

/// U+FFFD as a JSON escape: what Go puts for a lone surrogate escape.
const REPLACEMENT_ESCAPE: &[u8] = br"\ufffd";

/// `text` with every lone surrogate escape (`\ud800` not followed by a low
/// surrogate escape, or a low one alone) written `\ufffd`, and every byte
/// that is not part of a UTF-8 character written U+FFFD, as Go's decoder
/// reads them; borrowed when there is none. A backslash is only ever the
/// start of an escape in a JSON string (elsewhere the text is not JSON,
/// rewritten or not), so no string boundaries need tracking.
pub fn as_go_reads(text: &[u8]) -> Cow<'_, [u8]> {
    let mut out = Rewrite::new(text);
    let mut i = 0;
    while i < text.len() {
        i = match text[i] {
            b'\\' if text.get(i + 1) == Some(&b'u') => out.escape(i),
            // Another escape: its second byte is never the start of one.
            b'\\' => i + 2,
            b if b.is_ascii() => i + 1,
            _ => out.non_ascii(i),
        };
    }
    out.finish()
}

/// The text being rewritten: `out` holds it up to `done`, once there was
/// something to rewrite.
struct Rewrite<'t> {
    text: &'t [u8],
    out: Option<Vec<u8>>,
    done: usize,
}

impl<'t> Rewrite<'t> {
    fn new(text: &'t [u8]) -> Self {
        Rewrite {
            text,
            out: None,
            done: 0,
        }
    }

    /// Put `with` in place of `text[at..end]`.
    fn replace(&mut self, at: usize, end: usize, with: &[u8]) {
        let out = self
            .out
            .get_or_insert_with(|| Vec::with_capacity(self.text.len() + 8));
        out.extend_from_slice(&self.text[self.done..at]);
        out.extend_from_slice(with);
        self.done = end;
    }

    /// The `\u` escape at `at`; where the next byte to look at is. A valid
    /// surrogate pair is kept whole; a lone surrogate becomes `\ufffd`, and
    /// what follows it is read on its own (as Go does).
    fn escape(&mut self, at: usize) -> usize {
        let Some(unit) = hex4(self.text, at) else {
            return at + 2; // not an escape Go reads either: serde refuses it
        };
        let next = at + 6;
        match unit {
            0xd800..=0xdbff => match hex4(self.text, next) {
                Some(0xdc00..=0xdfff) => next + 6,
                _ => self.lone(at),
            },
            0xdc00..=0xdfff => self.lone(at),
            _ => next,
        }
    }

    /// `\ufffd` for the lone surrogate escape at `at`.
    fn lone(&mut self, at: usize) -> usize {
        self.replace(at, at + 6, REPLACEMENT_ESCAPE);
        at + 6
    }

    /// The non-ASCII byte at `at`: a whole UTF-8 character is kept; else
    /// each byte of its broken start becomes U+FFFD (Go's decoder replaces
    /// byte by byte).
    fn non_ascii(&mut self, at: usize) -> usize {
        let window = &self.text[at..self.text.len().min(at + 4)];
        let broken = std::str::from_utf8(window)
            .err()
            .filter(|e| e.valid_up_to() == 0)
            .map(|e| e.error_len().unwrap_or(window.len()));
        match broken {
            None => at + utf8_width(self.text[at]),
            Some(n) => {
                self.replace(at, at + n, &REPLACEMENT.repeat(n));
                at + n
            }
        }
    }

    fn finish(self) -> Cow<'t, [u8]> {
        match self.out {
            Some(mut out) => {
                out.extend_from_slice(&self.text[self.done..]);
                Cow::Owned(out)
            }
            None => Cow::Borrowed(self.text),
        }
    }
}

/// The length of the UTF-8 character that starts with `lead`.
fn utf8_width(lead: u8) -> usize {
    match lead {
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        _ => 4,
    }
}

/// The code unit of the `\uXXXX` escape at `at`, if there is one.
fn hex4(text: &[u8], at: usize) -> Option<u32> {
    let esc = text.get(at..at + 6)?;
    if &esc[..2] != br"\u" {
        return None;
    }
    esc[2..].iter().try_fold(0, |n, &b| {
        let d = char::from(b).to_digit(16)?;
        Some(n * 16 + d)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn go(text: &str) -> String {
        String::from_utf8(as_go_reads(text.as_bytes()).into_owned()).unwrap()
    }

    #[test]
    fn lone_surrogates_become_the_replacement_character() {
        assert_eq!(
            go(r#"{"a":"\ud800","ref":"main"}"#),
            r#"{"a":"\ufffd","ref":"main"}"#
        );
        assert_eq!(go(r#""\uDC00x""#), r#""\ufffdx""#);
        // A high one before another high one, then a valid pair.
        assert_eq!(go(r#""\ud800\ud83d\ude00""#), r#""\ufffd\ud83d\ude00""#);
        // A low one before a high one: each alone.
        assert_eq!(go(r#""\udc00\ud800""#), r#""\ufffd\ufffd""#);
        assert_eq!(go(r#""\ud800\u0041""#), r#""\ufffd\u0041""#);
        assert_eq!(go(r#""\ud800"#), r#""\ufffd"#);
    }

    #[test]
    fn what_serde_reads_stays_borrowed() {
        for text in [r#"{"a":"\ud83d\ude00 é \\ud800 \"\n"}"#, r#""\u12""#, "\\"] {
            assert!(
                matches!(as_go_reads(text.as_bytes()), Cow::Borrowed(_)),
                "{text}"
            );
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_become_one_replacement_each() {
        let got = as_go_reads(b"\"a\xff\xe2\x82b\xe2\x82\xac\xed\xa0\x80\xf0\x9f\x98\"");
        let want = "\"a\u{fffd}\u{fffd}\u{fffd}b\u{20ac}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\"";
        assert_eq!(String::from_utf8(got.into_owned()).unwrap(), want);
    }

    #[test]
    fn serde_reads_the_rewritten_text() {
        let v: serde_json::Value =
            serde_json::from_slice(&as_go_reads(br#"{"a":"x\ud800y","ref":"main"}"#)).unwrap();
        assert_eq!(v["a"], "x\u{fffd}y");
        assert_eq!(v["ref"], "main");
    }
}
