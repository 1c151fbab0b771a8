//! raw → [`Receive`]: the `verify`, `values`, `rule`, `stdin` and
//! `response` settings of an endpoint trigger, checked with located errors
//! and compiled once (regexes built, secrets read, header names lower-cased)
//! so that a request does no parsing of configuration.
//!
//! Secrets come only from an environment variable (`secret_env`) or a file
//! (`secret_file`, relative to config.toml); there is no inline secret, so
//! config files can be shared and committed. A secret is never part of an
//! error message.

use std::path::{Path, PathBuf};
use std::time::Duration;

use regex_lite::Regex;
use toml::Spanned;

use super::raw::{RawResponse, RawRule, RawSource, RawTrigger, RawVerify};
use super::types::{duration, Errors, Src};
use crate::access::cidr::Cidr;
use crate::receive::rules::{Leaf, Rule};
use crate::receive::signature::{Algo, Encoding, Scheme, Secret, Verifier};
use crate::receive::values::{JsonPath, RequestField, Source, Whole};
use crate::receive::{Answer, AnswerBody, Receive, ValueSpec};

/// Default `tolerance` of the timestamped schemes.
pub const TOLERANCE: Duration = Duration::from_secs(300);

/// Deepest rule nesting accepted.
const MAX_RULE_DEPTH: usize = 32;

/// Compile the receive settings of trigger `tr` (at `key`), whose function
/// has `outputs` (when known).
pub(super) fn receive(
    src: &Src,
    tr: &RawTrigger,
    key: &str,
    outputs: Option<&[String]>,
    dir: &Path,
    errs: &mut Errors,
) -> Receive {
    let verify = tr
        .verify
        .as_ref()
        .and_then(|v| verifier(src, v, &format!("{key}.verify"), dir, errs));
    let values = values(src, tr, key, outputs, errs);
    let rule = tr
        .rule
        .as_ref()
        .and_then(|r| rule(src, r, &format!("{key}.rule"), dir, 0, errs))
        .map(|r| r.relative_to(&format!("{key}.")));
    let stdin_body = match &tr.stdin {
        Some(s) if s.get_ref() == "body" => true,
        Some(s) => {
            let msg = format!(
                "unknown stdin \"{}\"; the only value is \"body\"",
                s.get_ref()
            );
            errs.at(src, s.span(), format!("{key}.stdin"), msg);
            false
        }
        None => false,
    };
    let answer = answer(src, tr.response.as_ref(), &format!("{key}.response"), errs);
    let deduplicate = verify.is_some()
        && tr
            .verify
            .as_ref()
            .and_then(|v| v.get_ref().deduplicate.as_ref())
            .is_none_or(|d| *d.get_ref());
    Receive {
        verify,
        deduplicate,
        values,
        rule,
        stdin_body,
        answer,
    }
}

/// `values`: one source per output, every output covered.
fn values(
    src: &Src,
    tr: &RawTrigger,
    key: &str,
    outputs: Option<&[String]>,
    errs: &mut Errors,
) -> Option<Vec<ValueSpec>> {
    if tr.values.is_empty() {
        return None;
    }
    let outputs = outputs?;
    for name in tr.values.keys().filter(|n| !outputs.contains(n.get_ref())) {
        let msg = format!(
            "\"{}\" is not an output of the function; its outputs are [{}]",
            name.get_ref(),
            outputs.join(", ")
        );
        errs.at(
            src,
            name.span(),
            format!("{key}.values.{}", name.get_ref()),
            msg,
        );
    }
    let mut specs = Vec::new();
    for output in outputs {
        let Some((_, raw)) = tr.values.iter().find(|(k, _)| k.get_ref() == output) else {
            let msg = format!("output \"{output}\" has no source; give every output one (e.g. {output} = {{ json = \"path\" }})");
            let at = tr.values.keys().next().map_or(0..0, Spanned::span);
            errs.at(src, at, format!("{key}.values"), msg);
            continue;
        };
        let k = format!("{key}.values.{output}");
        let fields = source_fields(raw.get_ref());
        if let Some(source) = source(src, fields, raw.span(), &k, true, errs) {
            specs.push(ValueSpec {
                output: output.clone(),
                source,
                default: raw.get_ref().default.clone(),
            });
        }
    }
    Some(specs)
}

/// The source keys of a value, by name.
type Fields<'a> = [(&'static str, Option<&'a Spanned<String>>); 10];

fn source_fields(r: &RawSource) -> Fields<'_> {
    [
        ("query", r.query.as_ref()),
        ("header", r.header.as_ref()),
        ("form", r.form.as_ref()),
        ("json", r.json.as_ref()),
        ("xml", r.xml.as_ref()),
        ("whole", r.whole.as_ref()),
        ("body", r.body.as_ref()),
        ("payload", r.payload.as_ref()),
        ("literal", r.literal.as_ref()),
        ("request", r.request.as_ref()),
    ]
}

fn rule_fields(r: &RawRule) -> Fields<'_> {
    [
        ("query", r.query.as_ref()),
        ("header", r.header.as_ref()),
        ("form", r.form.as_ref()),
        ("json", r.json.as_ref()),
        ("xml", r.xml.as_ref()),
        ("whole", r.whole.as_ref()),
        ("body", r.body.as_ref()),
        ("payload", r.payload.as_ref()),
        ("literal", r.literal.as_ref()),
        ("request", r.request.as_ref()),
    ]
}

/// Exactly one source key, compiled. `file_ok`: `body = "file"` allowed.
fn source(
    src: &Src,
    fields: Fields<'_>,
    span: std::ops::Range<usize>,
    key: &str,
    file_ok: bool,
    errs: &mut Errors,
) -> Option<Source> {
    let given: Vec<_> = fields
        .iter()
        .filter_map(|(n, v)| v.map(|v| (*n, v)))
        .collect();
    let [(name, v)] = given.as_slice() else {
        let msg = "give exactly one source: query, header, form, json, xml, payload, whole, body, request or literal";
        errs.at(src, span, key, msg);
        return None;
    };
    let (s, k) = (v.get_ref().as_str(), format!("{key}.{name}"));
    let bad = |msg: String| errs.at(src, v.span(), k.clone(), msg);
    let path = |s: &str| JsonPath::parse(s);
    let out = match *name {
        "query" | "form" if s.is_empty() => Err("must not be empty".to_string()),
        "header" if s.is_empty() || !s.bytes().all(|b| b.is_ascii_graphic() && b != b':') => {
            Err(format!("\"{s}\" is not a header name"))
        }
        "query" => Ok(Source::Query(s.into())),
        "form" => Ok(Source::Form(s.into())),
        "header" => Ok(Source::Header(s.to_ascii_lowercase())),
        "json" => path(s).map(Source::Json),
        "payload" => path(s).map(Source::Payload),
        "literal" => Ok(Source::Literal(s.into())),
        "request" => match s {
            "method" => Ok(Source::Request(RequestField::Method)),
            "remote_addr" => Ok(Source::Request(RequestField::RemoteAddr)),
            _ => Err(format!(
                "unknown request \"{s}\"; use \"method\" or \"remote_addr\""
            )),
        },
        "xml" => path(s).map(Source::Xml),
        "whole" => match s {
            "payload" => Ok(Source::Whole(Whole::Payload)),
            "headers" => Ok(Source::Whole(Whole::Headers)),
            "query" => Ok(Source::Whole(Whole::Query)),
            _ => Err(format!(
                "unknown whole \"{s}\"; use \"payload\", \"headers\" or \"query\""
            )),
        },
        _ => match s {
            "text" => Ok(Source::BodyText),
            "file" if file_ok => Ok(Source::BodyFile),
            _ if file_ok => Err(format!("unknown body \"{s}\"; use \"text\" or \"file\"")),
            _ => Err(format!(
                "unknown body \"{s}\"; a rule reads the body as \"text\""
            )),
        },
    };
    out.map_err(bad).ok()
}

/// A rule tree.
fn rule(
    src: &Src,
    raw: &Spanned<RawRule>,
    key: &str,
    dir: &Path,
    depth: usize,
    errs: &mut Errors,
) -> Option<Rule> {
    if depth > MAX_RULE_DEPTH {
        errs.at(
            src,
            raw.span(),
            key,
            format!("rules nest deeper than {MAX_RULE_DEPTH}"),
        );
        return None;
    }
    let r = raw.get_ref();
    let has_source = rule_fields(r).iter().any(|(_, v)| v.is_some());
    let kinds = [
        r.and.is_some(),
        r.or.is_some(),
        r.not.is_some(),
        r.client_ip.is_some(),
        r.signature.is_some(),
        has_source || r.equals.is_some() || r.regex.is_some(),
    ];
    if kinds.iter().filter(|k| **k).count() != 1 {
        let msg = "a rule is exactly one of: and = [..], or = [..], not = {..}, client_ip = [..], signature = {..}, or a source (query, header, form, json, xml, payload, whole, body, request) with equals or regex";
        errs.at(src, raw.span(), key, msg);
        return None;
    }
    let list = |all: &Vec<Spanned<RawRule>>, op: &str, errs: &mut Errors| {
        if all.is_empty() {
            errs.at(
                src,
                raw.span(),
                format!("{key}.{op}"),
                "must list at least one rule",
            );
        }
        let rules: Vec<Option<Rule>> = all
            .iter()
            .enumerate()
            .map(|(i, c)| rule(src, c, &format!("{key}.{op}[{i}]"), dir, depth + 1, errs))
            .collect();
        rules.into_iter().collect::<Option<Vec<Rule>>>()
    };
    if let Some(all) = &r.and {
        return list(all, "and", errs).map(Rule::And);
    }
    if let Some(any) = &r.or {
        return list(any, "or", errs).map(Rule::Or);
    }
    if let Some(inner) = &r.not {
        let inner = rule(src, inner, &format!("{key}.not"), dir, depth + 1, errs)?;
        return Some(Rule::Not(Box::new(inner)));
    }
    let place = key.to_string();
    if let Some(ranges) = &r.client_ip {
        return client_ip(src, ranges, key, errs).map(|c| Rule::Match(Leaf::Cidr(c), place));
    }
    if let Some(sig) = &r.signature {
        if let Some(d) = &sig.get_ref().deduplicate {
            let msg = "deduplicate belongs to the trigger's verify table, not to a rule";
            errs.at(src, d.span(), format!("{key}.signature.deduplicate"), msg);
        }
        let v = verifier(src, sig, &format!("{key}.signature"), dir, errs)?;
        return Some(Rule::Match(Leaf::Signature(v), place));
    }
    leaf(src, raw, key, errs).map(|l| Rule::Match(l, place))
}

/// A source with `equals` or `regex`.
fn leaf(src: &Src, raw: &Spanned<RawRule>, key: &str, errs: &mut Errors) -> Option<Leaf> {
    let r = raw.get_ref();
    let source = source(src, rule_fields(r), raw.span(), key, false, errs);
    match (&r.equals, &r.regex) {
        (Some(e), None) => Some(Leaf::Equals(source?, e.get_ref().clone())),
        (None, Some(re)) => match Regex::new(re.get_ref()) {
            Ok(compiled) => Some(Leaf::Regex(source?, compiled)),
            Err(e) => {
                let msg = format!("invalid regex: {}", e.to_string().replace('\n', " "));
                errs.at(src, re.span(), format!("{key}.regex"), msg);
                None
            }
        },
        _ => {
            errs.at(
                src,
                raw.span(),
                key,
                "a source in a rule needs exactly one of equals or regex",
            );
            None
        }
    }
}

fn client_ip(
    src: &Src,
    raw: &Spanned<Vec<Spanned<String>>>,
    key: &str,
    errs: &mut Errors,
) -> Option<Vec<Cidr>> {
    if raw.get_ref().is_empty() {
        errs.at(
            src,
            raw.span(),
            format!("{key}.client_ip"),
            "must list at least one range",
        );
        return None;
    }
    let parsed: Vec<Option<Cidr>> = raw
        .get_ref()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            Cidr::parse(c.get_ref())
                .map_err(|msg| errs.at(src, c.span(), format!("{key}.client_ip[{i}]"), msg))
                .ok()
        })
        .collect();
    parsed.into_iter().collect()
}

/// A signature or token check, with its secret read now.
pub(super) fn verifier(
    src: &Src,
    raw: &Spanned<RawVerify>,
    key: &str,
    dir: &Path,
    errs: &mut Errors,
) -> Option<Verifier> {
    let r = raw.get_ref();
    let s = r.scheme.get_ref().as_str();
    let (scheme, default_header, default_prefix) = match s {
        "hmac-sha1" => (Scheme::Hmac(Algo::Sha1), None, ""),
        "hmac-sha256" => (Scheme::Hmac(Algo::Sha256), None, ""),
        "hmac-sha512" => (Scheme::Hmac(Algo::Sha512), None, ""),
        "token" => (Scheme::Token, None, ""),
        "stripe" => (Scheme::Stripe, Some("stripe-signature"), ""),
        "slack" => (Scheme::Slack, Some("x-slack-signature"), "v0="),
        "standard-webhooks" => (Scheme::StandardWebhooks, Some("webhook-signature"), ""),
        _ => {
            let msg = format!("unknown scheme \"{s}\"; use hmac-sha1, hmac-sha256, hmac-sha512, token, stripe, slack or standard-webhooks");
            errs.at(src, r.scheme.span(), format!("{key}.scheme"), msg);
            return None;
        }
    };
    let header = match (&r.header, default_header) {
        (Some(h), _) => h.get_ref().trim().to_ascii_lowercase(),
        (None, Some(d)) => d.to_string(),
        (None, None) => {
            let msg =
                format!("scheme \"{s}\" needs a header, e.g. header = \"X-Hub-Signature-256\"");
            errs.at(src, raw.span(), format!("{key}.header"), msg);
            return None;
        }
    };
    let encoding = match r.encoding.as_ref().map(|e| (e, e.get_ref().as_str())) {
        None | Some((_, "hex")) => Encoding::Hex,
        Some((_, "base64")) => Encoding::Base64,
        Some((e, other)) => {
            let msg = format!("unknown encoding \"{other}\"; use \"hex\" or \"base64\"");
            errs.at(src, e.span(), format!("{key}.encoding"), msg);
            return None;
        }
    };
    let tolerance = duration(
        src,
        r.tolerance.as_ref(),
        &format!("{key}.tolerance"),
        TOLERANCE,
        errs,
    );
    if let (Scheme::StandardWebhooks, Some(h)) = (scheme, &r.header) {
        let msg =
            "scheme \"standard-webhooks\" reads the webhook-* (or svix-*) headers; remove header";
        errs.at(src, h.span(), format!("{key}.header"), msg);
        return None;
    }
    let (mut secret, secret_file) = secret(src, raw, key, dir, errs)?;
    if scheme == Scheme::StandardWebhooks {
        let Some(k) = secret.standard_key() else {
            let msg =
                "a Standard Webhooks secret is base64, usually after whsec_ (\"whsec_MfKQ9r8G…\")";
            errs.at(src, raw.span(), format!("{key}.secret"), msg);
            return None;
        };
        secret = k;
    }
    Some(Verifier {
        scheme,
        header,
        prefix: r
            .prefix
            .clone()
            .unwrap_or_else(|| default_prefix.to_string()),
        encoding,
        secret,
        tolerance,
        secret_file,
    })
}

/// The secret of a check, from exactly one of `secret_env` and
/// `secret_file`, with the file it came from.
fn secret(
    src: &Src,
    raw: &Spanned<RawVerify>,
    key: &str,
    dir: &Path,
    errs: &mut Errors,
) -> Option<(Secret, Option<PathBuf>)> {
    let r = raw.get_ref();
    match (&r.secret_env, &r.secret_file) {
        (Some(var), None) => match std::env::var(var.get_ref()) {
            Ok(v) if !v.is_empty() => Some((Secret::new(v.into_bytes()), None)),
            _ => {
                let msg = format!("environment variable {} is not set or empty", var.get_ref());
                errs.at(src, var.span(), format!("{key}.secret_env"), msg);
                None
            }
        },
        (None, Some(file)) => {
            let path = match super::secret_path(dir, file.get_ref()) {
                Ok(path) => path,
                Err(msg) => {
                    errs.at(src, file.span(), format!("{key}.secret_file"), msg);
                    return None;
                }
            };
            match Secret::from_file(&path) {
                Ok(s) => Some((s, Some(path))),
                Err(msg) => {
                    errs.at(src, file.span(), format!("{key}.secret_file"), msg);
                    None
                }
            }
        }
        _ => {
            let msg =
                "give the secret as exactly one of secret_env = \"VAR\" or secret_file = \"path\"";
            errs.at(src, raw.span(), key, msg);
            None
        }
    }
}

/// `response`, defaults filled in.
fn answer(src: &Src, raw: Option<&RawResponse>, key: &str, errs: &mut Errors) -> Answer {
    let mut a = Answer::default();
    let Some(r) = raw else { return a };
    let mut status = |v: &Option<Spanned<i64>>,
                      field: &str,
                      default: u16,
                      range: std::ops::RangeInclusive<i64>| match v {
        Some(s) if range.contains(s.get_ref()) => u16::try_from(*s.get_ref()).unwrap_or(default),
        Some(s) => {
            let msg = format!(
                "must be a status in {}..={}, got {}",
                range.start(),
                range.end(),
                s.get_ref()
            );
            errs.at(src, s.span(), format!("{key}.{field}"), msg);
            default
        }
        None => default,
    };
    a.status = status(&r.status, "status", 200, 200..=299);
    a.ignored_status = status(&r.ignored_status, "ignored_status", 200, 200..=499);
    for (name, value) in &r.headers {
        let n = name.get_ref();
        let reserved = [
            "content-type",
            "content-length",
            "transfer-encoding",
            "connection",
            "date",
            "server",
        ];
        let valid = !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !valid || reserved.contains(&n.to_ascii_lowercase().as_str()) {
            let msg = format!("\"{n}\" cannot be set here (a header name of letters, digits and '-', not one trigd sets itself)");
            errs.at(src, name.span(), format!("{key}.headers"), msg);
        } else if !value
            .get_ref()
            .bytes()
            .all(|b| b == b' ' || b == b'\t' || b.is_ascii_graphic())
        {
            errs.at(
                src,
                value.span(),
                format!("{key}.headers.{n}"),
                "a header value must be printable ASCII",
            );
        } else {
            a.headers.push((n.clone(), value.get_ref().clone()));
        }
    }
    a.output = r.output.unwrap_or(true);
    a.run_async = r.run_async.unwrap_or(false);
    a.body = answer_body(src, r, key, errs);
    a.content_type = r.content_type.as_ref().and_then(|c| {
        let v = c.get_ref();
        let ok =
            !v.is_empty() && v.len() <= 200 && v.bytes().all(|b| b == b' ' || b.is_ascii_graphic());
        if !ok {
            let msg = "content_type must be printable ASCII, e.g. \"text/plain; charset=utf-8\"";
            errs.at(src, c.span(), format!("{key}.content_type"), msg);
        }
        ok.then(|| v.clone())
    });
    a
}

/// `text` or `body` of `response`: at most one.
fn answer_body(src: &Src, r: &RawResponse, key: &str, errs: &mut Errors) -> Option<AnswerBody> {
    match (&r.text, &r.body) {
        (Some(t), Some(_)) => {
            let msg = "set text (a fixed body) or body (the step's stdout), not both";
            errs.at(src, t.span(), format!("{key}.text"), msg);
            None
        }
        (Some(t), None) => Some(AnswerBody::Text(t.get_ref().clone())),
        (None, Some(b)) => match b.get_ref().as_str() {
            "stdout" => Some(AnswerBody::Stdout),
            "stdout_json" => Some(AnswerBody::StdoutJson),
            other => {
                let msg = format!("unknown body \"{other}\"; use \"stdout\" or \"stdout_json\" (or text = \"…\" for a fixed body)");
                errs.at(src, b.span(), format!("{key}.body"), msg);
                None
            }
        },
        (None, None) => None,
    }
}
