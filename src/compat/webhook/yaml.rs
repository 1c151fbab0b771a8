//! YAML text (JSON is a subset) → a JSON value, as adnanh/webhook reads a
//! hooks file, built from yaml-rust2's events so that nothing the text
//! says can cost more than the text: an alias (`*name`) is refused where
//! it stands instead of being expanded (a 1 KB file of aliases of aliases
//! expands to gigabytes), and nesting deeper than [`MAX_DEPTH`] is refused
//! where it goes too deep. The value is built with a stack, and every
//! later walk of it (into typed hooks, the template check, dropping it)
//! recurses at most [`MAX_DEPTH`] levels.

use serde_json::{Map, Number, Value};
use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};
use yaml_rust2::Yaml;

/// How deeply lists and mappings may nest: a hooks file needs about 70
/// (a hook in the list, its rule tree of at most 32 levels, each an
/// object and a list).
pub const MAX_DEPTH: usize = 128;

/// A place in the text: 1-based line and column (in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Pos {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1.
    pub col: usize,
}

impl Pos {
    fn of(m: Marker) -> Pos {
        Pos {
            line: m.line(),
            col: m.col() + 1,
        }
    }
}

/// Why the text is not a value, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    /// Where the problem is.
    pub at: Pos,
    /// What it is.
    pub msg: String,
}

/// The first document of a text.
#[derive(Debug)]
pub struct Doc {
    /// The document as JSON.
    pub value: Value,
    /// Where each item starts, when the document is a list.
    pub items: Vec<Pos>,
}

/// A list or mapping being built.
enum Open {
    Seq(Vec<Value>, Pos),
    /// The mapping, the key whose value comes next, and where it starts.
    Map(Map<String, Value>, Option<String>, Pos),
}

/// The document under construction.
#[derive(Default)]
struct Builder {
    open: Vec<Open>,
    items: Vec<Pos>,
    root: Option<Value>,
}

/// The first document of `text` (`None`: there is none). Later documents
/// are parsed for errors, not built.
///
/// # Errors
/// The text is not YAML, holds an alias, nests deeper than [`MAX_DEPTH`],
/// has a mapping key that is not a scalar, or a tagged scalar that is not
/// what its tag says.
pub fn parse(text: &str) -> Result<Option<Doc>, YamlError> {
    let mut parser = Parser::new_from_str(text);
    let mut b = Builder::default();
    loop {
        let (ev, at) = next(&mut parser)?;
        match ev {
            Event::StreamEnd => break,
            Event::DocumentEnd => return drain(&mut parser).map(|()| b.done()),
            Event::Nothing | Event::StreamStart | Event::DocumentStart => {}
            Event::Alias(_) => return Err(alias(at)),
            Event::Scalar(v, style, _, tag) => {
                let v = scalar(v, style, tag.as_ref()).ok_or_else(|| YamlError {
                    at,
                    msg: "a tagged value that is not what its tag says (!!int, !!float, !!bool or !!null)".into(),
                })?;
                b.put(v, at)?;
            }
            Event::SequenceStart(..) => b.open(Open::Seq(Vec::new(), at), at)?,
            Event::MappingStart(..) => b.open(Open::Map(Map::new(), None, at), at)?,
            Event::SequenceEnd | Event::MappingEnd => b.close()?,
        }
    }
    Ok(b.done())
}

/// The next event and where it is.
fn next(parser: &mut Parser<std::str::Chars>) -> Result<(Event, Pos), YamlError> {
    match parser.next_token() {
        Ok((ev, m)) => Ok((ev, Pos::of(m))),
        // The scanner's own bound on `[`/`{` nesting (255) is met before
        // ours when it looks ahead: say it in the same words.
        Err(e) if e.info() == "recursion limit exceeded" => Err(too_deep(Pos::of(*e.marker()))),
        Err(e) => Err(YamlError {
            at: Pos::of(*e.marker()),
            msg: format!("not YAML or JSON: {}", e.info()),
        }),
    }
}

/// The rest of the stream, checked for syntax only (webhook reads the
/// first document too; a broken rest was an error before and stays one).
fn drain(parser: &mut Parser<std::str::Chars>) -> Result<(), YamlError> {
    while !matches!(next(parser)?.0, Event::StreamEnd) {}
    Ok(())
}

fn alias(at: Pos) -> YamlError {
    YamlError {
        at,
        msg: "YAML aliases (*name) are not supported: write the value out where it is used".into(),
    }
}

fn too_deep(at: Pos) -> YamlError {
    YamlError {
        at,
        msg: format!("lists and mappings nest deeper than {MAX_DEPTH} levels"),
    }
}

impl Builder {
    /// Start a list or mapping at `at`.
    fn open(&mut self, o: Open, at: Pos) -> Result<(), YamlError> {
        if self.open.len() >= MAX_DEPTH {
            return Err(too_deep(at));
        }
        self.open.push(o);
        Ok(())
    }

    /// End the innermost list or mapping, which becomes a value.
    fn close(&mut self) -> Result<(), YamlError> {
        let (v, start) = match self.open.pop() {
            Some(Open::Seq(items, start)) => (Value::Array(items), start),
            Some(Open::Map(m, _, start)) => (Value::Object(m), start),
            None => return Ok(()),
        };
        self.put(v, start)
    }

    /// Put a finished value that starts at `at` into what is open (a
    /// mapping takes it as its next key or as that key's value).
    fn put(&mut self, v: Value, at: Pos) -> Result<(), YamlError> {
        if let [Open::Seq(..)] = self.open.as_slice() {
            self.items.push(at);
        }
        match self.open.last_mut() {
            None => self.root = Some(v),
            Some(Open::Seq(items, _)) => items.push(v),
            Some(Open::Map(m, key, start)) => match key.take() {
                Some(k) => {
                    m.insert(k, v);
                }
                None => {
                    // A block mapping's start event is at its first `:`.
                    *start = (*start).min(at);
                    *key = Some(key_text(v, at)?);
                }
            },
        }
        Ok(())
    }

    fn done(self) -> Option<Doc> {
        let items = self.items;
        self.root.map(|value| Doc { value, items })
    }
}

/// A mapping key as text, as webhook's YAML reader takes it.
fn key_text(v: Value, at: Pos) -> Result<String, YamlError> {
    match v {
        Value::String(s) => Ok(s),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        _ => Err(YamlError {
            at,
            msg: "a mapping key must be a string".into(),
        }),
    }
}

/// A scalar as YAML 1.2's core schema reads it (as yaml-rust2's loader
/// does); `None` for a tagged value that is not what its tag says.
fn scalar(v: String, style: TScalarStyle, tag: Option<&Tag>) -> Option<Value> {
    let y = match tag {
        _ if style != TScalarStyle::Plain => Yaml::String(v),
        None => return plain(Yaml::from_str(&v), v),
        Some(t) if t.handle == "tag:yaml.org,2002:" => tagged(v, &t.suffix),
        Some(_) => Yaml::String(v),
    };
    value_of(y)
}

/// A plain scalar without a tag, read as `y`, written as `text`. A number
/// stays a number only when written as JSON writes it (`200`, `-1`,
/// `2.5`): `010`, `0x1F`, `0o17`, `+5`, `1e3` stay the text written
/// (docs/from-webhook.md: "YAML 1.2: they stay text"), so that a rule's
/// value or a secret is what the file says, not `8`, `31` or `1e+3`.
fn plain(y: Yaml, text: String) -> Option<Value> {
    let as_written = match &y {
        Yaml::Integer(i) => i.to_string() == text,
        Yaml::Real(r) => serde_json::from_str::<Number>(r).is_ok_and(|n| n.to_string() == text),
        _ => true,
    };
    if as_written {
        value_of(y)
    } else {
        Some(Value::String(text))
    }
}

/// `y` as JSON; `None` for what a hooks file cannot hold.
fn value_of(y: Yaml) -> Option<Value> {
    Some(match y {
        Yaml::Null => Value::Null,
        Yaml::Boolean(b) => Value::Bool(b),
        Yaml::Integer(i) => Value::Number(i.into()),
        Yaml::Real(r) => match serde_json::from_str::<Number>(&r) {
            Ok(n) => Value::Number(n),
            Err(_) => Value::String(r),
        },
        Yaml::String(s) => Value::String(s),
        _ => return None,
    })
}

/// A plain scalar with a core-schema tag (`!!int 3`).
fn tagged(v: String, suffix: &str) -> Yaml {
    match suffix {
        "bool" => match v.as_str() {
            "true" | "True" | "TRUE" => Yaml::Boolean(true),
            "false" | "False" | "FALSE" => Yaml::Boolean(false),
            _ => Yaml::BadValue,
        },
        "int" => v.parse().map_or(Yaml::BadValue, Yaml::Integer),
        "float" if is_float(&v) => Yaml::Real(v),
        "float" => Yaml::BadValue,
        "null" if v == "~" || v == "null" => Yaml::Null,
        "null" => Yaml::BadValue,
        _ => Yaml::String(v),
    }
}

/// Whether yaml-rust2 reads `v` as a float.
fn is_float(v: &str) -> bool {
    matches!(
        v,
        ".inf"
            | ".Inf"
            | ".INF"
            | "+.inf"
            | "+.Inf"
            | "+.INF"
            | "-.inf"
            | "-.Inf"
            | "-.INF"
            | ".nan"
            | ".NaN"
            | ".NAN"
    ) || (v.bytes().any(|b| b.is_ascii_digit()) && v.parse::<f64>().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str) -> Value {
        parse(text).unwrap().unwrap().value
    }

    fn err(text: &str) -> YamlError {
        parse(text).unwrap_err()
    }

    #[test]
    fn reads_as_yaml_rust2_s_loader_does() {
        let v = value("a: [1, 2.5, true, ~, \"x\", 0x10, !!str 3, !!int 4, b]\n3: {c: d}\n");
        assert_eq!(
            v,
            // `0x10` stays text: not written as JSON writes a number.
            serde_json::json!({"a": [1, 2.5, true, null, "x", "0x10", "3", 4, "b"], "3": {"c": "d"}})
        );
        assert!(parse("").unwrap().is_none());
        assert_eq!(value("---\n"), Value::Null);
        // Only the first document is built; the rest must still parse.
        assert_eq!(value("- a\n---\n- b\n"), serde_json::json!(["a"]));
        assert!(parse("- a\n---\n- [\n").is_err());
        assert_eq!(value("[1, 2]").as_array().unwrap().len(), 2);
    }

    #[test]
    fn item_positions_are_where_each_item_starts() {
        let doc = parse("- id: a\n  x: 1\n- b\n-\n  - c\n").unwrap().unwrap();
        let at: Vec<(usize, usize)> = doc.items.iter().map(|p| (p.line, p.col)).collect();
        assert_eq!(at, [(1, 3), (3, 3), (5, 3)]);
        let doc = parse("[\n {\"id\": 1},\n {\"id\": 2}]").unwrap().unwrap();
        assert_eq!(doc.items[1], Pos { line: 3, col: 2 });
    }

    #[test]
    fn aliases_are_refused_where_they_stand() {
        let e = err("a: &x [1, 2]\nb: *x\n");
        assert_eq!(e.at, Pos { line: 2, col: 4 });
        assert!(e.msg.contains("aliases"), "{e:?}");
        // An anchor alone is harmless.
        assert_eq!(value("a: &x 1"), serde_json::json!({"a": 1}));
    }

    #[test]
    fn nesting_is_bounded_at_max_depth() {
        let ok = format!("{}x", "- ".repeat(MAX_DEPTH));
        assert!(parse(&ok).is_ok());
        let deep = format!("{}x", "- ".repeat(5000));
        let e = err(&deep);
        assert_eq!(
            e.at,
            Pos {
                line: 1,
                col: 2 * MAX_DEPTH + 1
            }
        );
        assert!(e.msg.contains("deeper than 128"), "{e:?}");
        let json = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(
            err(&json).at,
            Pos {
                line: 1,
                col: MAX_DEPTH + 1
            }
        );
        // Past the scanner's own bound, in the same words.
        let e = err(&"[".repeat(5000));
        assert!(e.msg.contains("deeper than 128"), "{e:?}");
    }

    #[test]
    fn bad_keys_and_tags_are_located() {
        let e = err("a: 1\n[b]: 2\n");
        assert_eq!(
            (e.at.line, e.msg.as_str()),
            (2, "a mapping key must be a string")
        );
        assert_eq!(err("a: !!int x").at, Pos { line: 1, col: 10 });
        assert!(err("a: [").msg.starts_with("not YAML or JSON"));
    }
}
