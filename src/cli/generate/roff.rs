//! The little roff (man(7) macros) that the man pages need, written by
//! hand: escaping text, `code` spans as bold, paragraphs and tagged items.
//! The output is plain ASCII, so it needs no `preconv`.

/// `text` escaped for roff: backslashes, hyphens (as `\-`, so flags copy
/// as ASCII minus signs), a control character at a line start, and every
/// non-ASCII character as a `\[uXXXX]` escape.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if line.starts_with(['.', '\'']) {
            out.push_str("\\&");
        }
        out.push_str(&chars(line));
    }
    out
}

/// Each character of `text` escaped, with no regard to line starts.
fn chars(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\e"),
            '-' => out.push_str("\\-"),
            c if c.is_ascii() => out.push(c),
            c => out.push_str(&format!("\\[u{:04X}]", u32::from(c))),
        }
    }
    out
}

/// Prose on one line: [`escape`]d, with each `` `code` `` span in bold.
pub fn prose(text: &str) -> String {
    let parts: Vec<&str> = text.split('`').collect();
    if parts.len() % 2 == 0 {
        // An unpaired backtick: leave every one as written.
        return escape(text);
    }
    let mut out = String::new();
    if text.starts_with(['.', '\'']) {
        out.push_str("\\&");
    }
    for (i, part) in parts.iter().enumerate() {
        if i % 2 == 1 {
            out.push_str(&format!("\\fB{}\\fR", chars(part)));
        } else {
            out.push_str(&chars(part));
        }
    }
    out
}

/// Paragraphs of `text` (separated by a blank line) with their lines
/// joined, as `.PP` blocks.
pub fn paragraphs(text: &str) -> String {
    text.split("\n\n")
        .map(|p| {
            let joined: Vec<&str> = p.lines().map(str::trim).collect();
            format!(".PP\n{}\n", prose(&joined.join(" ")))
        })
        .collect()
}

/// A `.TP` item: the `tag` line as given (already roff) and its body.
pub fn item(tag: &str, body: &str) -> String {
    let joined: Vec<&str> = body.lines().map(str::trim).collect();
    format!(".TP\n{tag}\n{}\n", prose(&joined.join(" ")))
}

/// A bold word, escaped.
pub fn bold(text: &str) -> String {
    format!("\\fB{}\\fR", escape(text))
}

/// An italic word, escaped.
pub fn italic(text: &str) -> String {
    format!("\\fI{}\\fR", escape(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_roff_would_read_as_requests() {
        assert_eq!(escape(".x\n'y\\z"), "\\&.x\n\\&'y\\ez");
        assert_eq!(escape("--a — b"), "\\-\\-a \\[u2014] b");
        assert_eq!(prose("run `trigd check`."), "run \\fBtrigd check\\fR.");
        assert_eq!(prose("one ` tick"), "one ` tick");
    }
}
