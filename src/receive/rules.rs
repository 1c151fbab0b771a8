//! Rules that decide whether a request runs at all: `and` / `or` / `not`
//! over matches — a value equal to a string, a value matching a regular
//! expression, the client address in CIDR ranges, a valid signature.
//!
//! Owns: [`Rule`], its evaluation, [`Cidr`], and the reason given for a
//! request that does not match. A reason names where in the rule it failed
//! and which request value was read, never the expected value or a secret,
//! so an answer cannot be used to guess them.

use std::time::{SystemTime, UNIX_EPOCH};

use regex_lite::Regex;

use super::signature::Verifier;
use super::values::{Incoming, Source, ValueError};
use crate::access::cidr::Cidr;

/// A rule tree, compiled at config load.
#[derive(Debug, Clone)]
pub enum Rule {
    /// Every child matches.
    And(Vec<Rule>),
    /// At least one child matches.
    Or(Vec<Rule>),
    /// The child does not match.
    Not(Box<Rule>),
    /// A leaf, with its place in the rule for messages (`rule.and[1]`).
    Match(Leaf, String),
}

/// One test of a request.
#[derive(Debug, Clone)]
pub enum Leaf {
    /// The value is present and equal to the string.
    Equals(Source, String),
    /// The value is present and the regex matches it somewhere (anchor it
    /// with `^…$` for a whole match).
    Regex(Source, Regex),
    /// The client address is in one of the ranges.
    Cidr(Vec<Cidr>),
    /// The request carries a valid signature.
    Signature(Verifier),
    /// The value of the source is a valid HMAC signature of the body
    /// (adnanh/webhook's `payload-hmac-*`, which names where the signature
    /// is).
    SignatureIn(Source, Verifier),
}

/// Whether a request matched, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Run it.
    Match,
    /// Ignore it; the reason is safe to show the caller.
    NoMatch(String),
}

impl Rule {
    /// Evaluate against a request.
    ///
    /// # Errors
    /// The body could not be read as a source needs (see [`ValueError`]):
    /// that is a bad request, not a non-match.
    pub fn eval(&self, inc: &Incoming<'_>) -> Result<Verdict, ValueError> {
        match self {
            Rule::And(all) => {
                for r in all {
                    if let Verdict::NoMatch(why) = r.eval(inc)? {
                        return Ok(Verdict::NoMatch(why));
                    }
                }
                Ok(Verdict::Match)
            }
            Rule::Or(any) => {
                let mut whys = Vec::new();
                for r in any {
                    match r.eval(inc)? {
                        Verdict::Match => return Ok(Verdict::Match),
                        Verdict::NoMatch(why) => whys.push(why),
                    }
                }
                Ok(Verdict::NoMatch(format!(
                    "none matched: {}",
                    whys.join("; ")
                )))
            }
            Rule::Not(inner) => Ok(match inner.eval(inc)? {
                Verdict::Match => {
                    Verdict::NoMatch(format!("{} matched, but must not", inner.place()))
                }
                Verdict::NoMatch(_) => Verdict::Match,
            }),
            Rule::Match(leaf, place) => leaf.eval(inc, place),
        }
    }

    /// Strip `prefix` from every leaf's place (config keys become
    /// `rule.and[1]` in answers).
    pub fn relative_to(self, prefix: &str) -> Rule {
        match self {
            Rule::And(v) => Rule::And(v.into_iter().map(|r| r.relative_to(prefix)).collect()),
            Rule::Or(v) => Rule::Or(v.into_iter().map(|r| r.relative_to(prefix)).collect()),
            Rule::Not(r) => Rule::Not(Box::new(r.relative_to(prefix))),
            Rule::Match(l, place) => {
                let place = place
                    .strip_prefix(prefix)
                    .map_or(place.clone(), str::to_string);
                Rule::Match(l, place)
            }
        }
    }

    /// Collect the signature checks of this rule.
    pub fn verifiers<'a>(&'a self, out: &mut Vec<&'a Verifier>) {
        match self {
            Rule::And(v) | Rule::Or(v) => v.iter().for_each(|r| r.verifiers(out)),
            Rule::Not(r) => r.verifiers(out),
            Rule::Match(Leaf::Signature(v) | Leaf::SignatureIn(_, v), _) => out.push(v),
            Rule::Match(..) => {}
        }
    }

    /// Whether the rule checks a signature or token somewhere: then it
    /// guards a secret, and `invoke` treats it as an authentication.
    pub fn checks_signatures(&self) -> bool {
        let mut found = Vec::new();
        self.verifiers(&mut found);
        !found.is_empty()
    }

    /// The signature check every match of this rule passes, if there is
    /// one: a signature leaf of an `and` (at any depth), or of every
    /// branch of an `or` (of one scheme: the delivery id is read by it).
    pub fn required_signature(&self) -> Option<&Verifier> {
        match self {
            Rule::Match(Leaf::Signature(v) | Leaf::SignatureIn(_, v), _) => Some(v),
            Rule::Match(..) | Rule::Not(_) => None,
            Rule::And(children) => children.iter().find_map(Rule::required_signature),
            Rule::Or(children) => {
                let mut each = children.iter().map(Rule::required_signature);
                let first = each.next()??;
                each.all(|v| v.is_some_and(|v| v.scheme == first.scheme))
                    .then_some(first)
            }
        }
    }

    /// Where this rule is, for messages.
    fn place(&self) -> String {
        match self {
            Rule::Match(_, place) => place.clone(),
            Rule::And(_) => "an 'and'".into(),
            Rule::Or(_) => "an 'or'".into(),
            Rule::Not(inner) => format!("not {}", inner.place()),
        }
    }
}

impl Leaf {
    fn eval(&self, inc: &Incoming<'_>, place: &str) -> Result<Verdict, ValueError> {
        let no = |what: String| Ok(Verdict::NoMatch(format!("{place}: {what}")));
        match self {
            Leaf::Equals(src, want) => match inc.get(src)? {
                // Not constant-time: rule values are not secrets (use a
                // signature or token check for those).
                Some(v) if v == *want => Ok(Verdict::Match),
                Some(_) => no(format!("{} is not the expected value", src.describe())),
                None => no(format!("{} is missing", src.describe())),
            },
            Leaf::Regex(src, re) => match inc.get(src)? {
                Some(v) if re.is_match(&v) => Ok(Verdict::Match),
                Some(_) => no(format!("{} does not match the pattern", src.describe())),
                None => no(format!("{} is missing", src.describe())),
            },
            Leaf::Cidr(ranges) => {
                if ranges.iter().any(|c| c.contains(inc.client)) {
                    Ok(Verdict::Match)
                } else {
                    no("the client address is not in the allowed ranges".into())
                }
            }
            Leaf::Signature(v) => match v.verify(inc.headers, inc.body, unix_now()) {
                Ok(()) => Ok(Verdict::Match),
                Err(e) => {
                    inc.signature_failed.set(true);
                    no(format!("signature check failed ({})", e.message()))
                }
            },
            Leaf::SignatureIn(src, v) => match inc.get(src)? {
                Some(sig) => match v.verify_value(&sig, inc.body) {
                    Ok(()) => Ok(Verdict::Match),
                    Err(_) => {
                        inc.signature_failed.set(true);
                        no(format!(
                            "the signature in {} does not match",
                            src.describe()
                        ))
                    }
                },
                None => no(format!("{} is missing", src.describe())),
            },
        }
    }
}

/// Seconds since the epoch (0 if the clock is before it).
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receive::values::JsonPath;
    use std::net::IpAddr;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn cidr_ranges() {
        let gh = Cidr::parse("192.30.252.0/22").unwrap();
        assert!(gh.contains(ip("192.30.255.254")));
        assert!(!gh.contains(ip("192.30.251.1")));
        assert!(gh.contains(ip("::ffff:192.30.252.9")));
        let v6 = Cidr::parse("2001:db8::/32").unwrap();
        assert!(v6.contains(ip("2001:db8:ffff::1")));
        assert!(!v6.contains(ip("2001:db9::1")));
        assert!(!v6.contains(ip("192.30.252.1")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        assert!(Cidr::parse("10.0.0.1").unwrap().contains(ip("10.0.0.1")));
        assert!(!Cidr::parse("10.0.0.1").unwrap().contains(ip("10.0.0.2")));
        for bad in ["10.0.0.0/33", "nope/8", "10.0.0.0/x", "::/129"] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }

    fn leaf(l: Leaf, place: &str) -> Rule {
        Rule::Match(l, place.into())
    }

    #[test]
    fn and_or_not_with_reasons_that_hide_expected_values() {
        let h = vec![
            ("content-type".to_string(), "application/json".to_string()),
            ("x-github-event".to_string(), "push".to_string()),
        ];
        let body = br#"{"ref":"refs/heads/main","head_commit":{"message":"fix [skip ci]"}}"#;
        let inc = Incoming::new(&h, &[], body, ip("192.30.252.7"));
        let json = |p: &str| Source::Json(JsonPath::parse(p).unwrap());
        let event = leaf(
            Leaf::Equals(Source::Header("x-github-event".into()), "push".into()),
            "rule.and[0]",
        );
        let branch = leaf(
            Leaf::Regex(
                json("ref"),
                Regex::new("^refs/heads/(main|release/.+)$").unwrap(),
            ),
            "rule.and[1]",
        );
        let range = leaf(
            Leaf::Cidr(vec![Cidr::parse("192.30.252.0/22").unwrap()]),
            "rule.and[2]",
        );
        let ok = Rule::And(vec![event.clone(), branch.clone(), range.clone()]);
        assert_eq!(ok.eval(&inc).unwrap(), Verdict::Match);

        let skip = leaf(
            Leaf::Regex(
                json("head_commit.message"),
                Regex::new(r"\[skip ci\]").unwrap(),
            ),
            "rule.and[1].not",
        );
        let r = Rule::And(vec![event.clone(), Rule::Not(Box::new(skip))]);
        let Verdict::NoMatch(why) = r.eval(&inc).unwrap() else {
            panic!()
        };
        assert_eq!(why, "rule.and[1].not matched, but must not");

        let tag = leaf(
            Leaf::Equals(
                Source::Header("x-github-event".into()),
                "release-secret-name".into(),
            ),
            "rule.or[0]",
        );
        let missing = leaf(Leaf::Equals(json("nope"), "x".into()), "rule.or[1]");
        let Verdict::NoMatch(why) = Rule::Or(vec![tag, missing]).eval(&inc).unwrap() else {
            panic!()
        };
        assert!(!why.contains("release-secret-name"), "{why}");
        assert!(
            why.contains("rule.or[0]: header 'x-github-event' is not the expected value"),
            "{why}"
        );
        assert!(
            why.contains("rule.or[1]: JSON path 'nope' is missing"),
            "{why}"
        );

        let elsewhere = Incoming::new(&h, &[], body, ip("10.1.2.3"));
        let Verdict::NoMatch(why) = range.eval(&elsewhere).unwrap() else {
            panic!()
        };
        assert!(why.contains("not in the allowed ranges"));
    }

    #[test]
    fn a_bad_body_is_an_error_not_a_non_match() {
        let h = vec![("content-type".to_string(), "application/json".to_string())];
        let inc = Incoming::new(&h, &[], b"{bad", ip("127.0.0.1"));
        let r = leaf(
            Leaf::Equals(Source::Json(JsonPath::parse("a").unwrap()), "b".into()),
            "rule",
        );
        assert!(r.eval(&inc).is_err());
    }
}
