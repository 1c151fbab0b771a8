//! JSON bodies checked before they are used: nesting at most
//! [`MAX_DEPTH`](super::shape::MAX_DEPTH) arrays and objects, and — read
//! natively — no object with the same key twice.
//!
//! Owns: the one pass that checks both, without building a tree (serde
//! drives a visitor that keeps, per open object, the set of its keys;
//! linear in the body). Why duplicates are refused: serde_json, like most
//! parsers, silently keeps the last value, another parser in front of
//! trigd may keep the first, so the value a program gets would depend on
//! who reads it; the same reason a query value given twice is refused.

use std::cell::Cell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::shape::MAX_DEPTH;

/// What is wrong with a JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonError {
    /// Not JSON (serde_json's message, with line and column).
    Invalid(String),
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// An object has this key twice.
    Duplicate(String),
}

/// Check `body` (one JSON value, nothing after it but white space when
/// `whole`; else only its first value is read, as Go's decoder does).
/// With `duplicates`, an object may repeat a key (adnanh/webhook's reading:
/// the last wins).
///
/// # Errors
/// See [`JsonError`].
pub fn check(body: &[u8], whole: bool, duplicates: bool) -> Result<(), JsonError> {
    let found = Cell::new(None);
    let seed = Check {
        depth: 0,
        duplicates,
        found: &found,
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let result = seed.deserialize(&mut de).and_then(|()| match whole {
        true => de.end(),
        false => Ok(()),
    });
    match (result, found.take()) {
        (_, Some(e)) => Err(e),
        (Err(e), None) => Err(JsonError::Invalid(e.to_string())),
        (Ok(()), None) => Ok(()),
    }
}

/// The visitor of one value at `depth`; the first fault goes to `found`
/// (a serde error carries only text).
#[derive(Clone, Copy)]
struct Check<'c> {
    depth: usize,
    duplicates: bool,
    found: &'c Cell<Option<JsonError>>,
}

impl Check<'_> {
    fn fail<E: de::Error>(self, e: JsonError) -> E {
        self.found.set(Some(e));
        E::custom("refused")
    }

    /// The visitor one level down, or an error past [`MAX_DEPTH`].
    fn deeper<E: de::Error>(self) -> Result<Self, E> {
        if self.depth >= MAX_DEPTH {
            return Err(self.fail(JsonError::TooDeep));
        }
        Ok(Check {
            depth: self.depth + 1,
            ..self
        })
    }
}

impl<'de> DeserializeSeed<'de> for Check<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// serde_json's `arbitrary_precision` hands a number over as a map with
/// this one key.
const NUMBER_KEY: &str = "$serde_json::private::Number";

impl<'de> Visitor<'de> for Check<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let inner = self.deeper()?;
        while seq.next_element_seed(inner)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut keys = HashSet::new();
        let mut inner = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == NUMBER_KEY && keys.is_empty() {
                map.next_value::<IgnoredAny>()?;
                return Ok(());
            }
            let seed = match inner {
                Some(s) => s,
                None => *inner.insert(self.deeper()?),
            };
            if !self.duplicates && keys.contains(&key) {
                return Err(self.fail(JsonError::Duplicate(key)));
            }
            map.next_value_seed(seed)?;
            if !self.duplicates {
                keys.insert(key);
            }
        }
        if inner.is_none() {
            self.deeper::<A::Error>()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_duplicates_and_numbers() {
        assert_eq!(
            check(br#"{"a":[1,2.5e300,{"b":null}]}"#, true, false),
            Ok(())
        );
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(check(ok.as_bytes(), true, false), Ok(()));
        let deep = format!(
            "{}1{}",
            "[".repeat(MAX_DEPTH + 1),
            "]".repeat(MAX_DEPTH + 1)
        );
        assert_eq!(check(deep.as_bytes(), true, false), Err(JsonError::TooDeep));
        let objs = format!(
            "{}{}",
            r#"{"a":"#.repeat(MAX_DEPTH + 1),
            "}".repeat(MAX_DEPTH + 1)
        );
        assert_eq!(check(objs.as_bytes(), true, true), Err(JsonError::TooDeep));
        // A number as deep as the bound allows is not one level more.
        let num = format!("{}7{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(check(num.as_bytes(), true, false), Ok(()));
        let dup = br#"{"x":{"a":1,"\u0061":2}}"#;
        assert_eq!(
            check(dup, true, false),
            Err(JsonError::Duplicate("a".into()))
        );
        assert_eq!(check(dup, true, true), Ok(()));
        assert!(matches!(
            check(b"{} x", true, false),
            Err(JsonError::Invalid(_))
        ));
        assert_eq!(check(b"{} x", false, false), Ok(()));
        assert!(
            matches!(check(b"{\"a\":", true, false), Err(JsonError::Invalid(m)) if m.contains("line 1"))
        );
    }
}
