//! Hook definitions (`file.rs`) → endpoints: each adnanh/webhook hook
//! becomes an [`Endpoint`] like every other entry point — public, read the
//! webhook way, with its arguments, environment and files, and webhook's
//! answer (all three in the one [`Hook`] its [`Dialect::HooksFile`]
//! carries), a rule tree of the same [`Rule`] leaves signed endpoints use
//! (the HMAC checks of `signature.rs`), and a one-function program of its
//! own ([`Target::Own`]) that the runner runs like any other.
//!
//! Everything is checked here, once: a source, rule type, range or regex
//! that webhook would only trip over per request is a load error naming the
//! file, the hook id and the option.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use regex_lite::Regex;

use super::{Hook, HookAnswer, HookFile, HookValues, Reading};
use crate::access::cidr::Cidr;
use crate::compat::webhook::file::{
    parse_file, ArgDef, HookDef, HookError, MatchDef, RuleDef, MAX_HOOKS,
};
use crate::config::types::{error, Errors};
use crate::config::{
    resolve, ConfigError, Credentials, Dialect, Endpoint, Entry, Function, Hooks, Methods,
    OutputMode, Piece, Program, Server, StampCell, Step, Target, Template, Values,
};
use crate::http::Method;
use crate::receive::rules::{Leaf, Rule};
use crate::receive::signature::{Algo, Encoding, Scheme, Secret, Verifier};
use crate::receive::values::{JsonPath, RequestField, Source, Whole};
use crate::receive::Receive;

/// First path segments trigd serves itself: a prefix must not start so.
use crate::http::FIRST_SEGMENTS as RESERVED;

/// Load every hooks file (already read: path and text) into [`Hooks`].
pub(crate) fn load(
    files: &[(PathBuf, String)],
    prefix: &str,
    config: &Path,
    server: &Server,
    errs: &mut Errors,
) -> Hooks {
    let segs: Vec<String> = prefix
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if segs.is_empty() || RESERVED.contains(&segs[0].as_str()) {
        let msg = format!("\"{prefix}\" cannot be the hooks' URL prefix: it must be non-empty and not start with a path trigd serves itself ({})", RESERVED.join(", "));
        errs.0.push(error(config, "server.hooks_url_prefix", msg));
    } else if let Some(why) = super::file::unreachable_path(prefix.trim_matches('/')) {
        // No request path names a hook under it, as for a hook id.
        let msg = format!("\"{prefix}\" cannot be the hooks' URL prefix: {why}");
        errs.0.push(error(config, "server.hooks_url_prefix", msg));
    }
    let dir = crate::config::types::config_dir(config);
    let mut by_id: BTreeMap<String, Endpoint> = BTreeMap::new();
    let mut count = 0;
    for (file, text) in files {
        let defs = match parse_file(text) {
            Ok(defs) => defs,
            Err(e) => {
                errs.0.push(located(file, e));
                continue;
            }
        };
        count += defs.len();
        if count > MAX_HOOKS {
            let msg = format!("the hooks files hold more than {MAX_HOOKS} hooks together");
            errs.0.push(error(file, "", msg));
            break;
        }
        for (i, def) in defs.into_iter().enumerate() {
            let compiled = def.and_then(|d| match compile(&d, &dir, server) {
                Ok(endpoint) => Ok((d, endpoint)),
                Err(msg) => Err(herr(i, &d, msg)),
            });
            match compiled {
                Ok((d, _)) if by_id.contains_key(&d.id) => {
                    let msg = format!(
                        "hook id \"{}\" is already defined (ids are unique across hooks files)",
                        d.id
                    );
                    errs.0.push(located(file, herr(i, &d, msg)));
                }
                Ok((d, endpoint)) => {
                    by_id.insert(d.id, endpoint);
                }
                Err(e) => errs.0.push(located(file, e)),
            }
        }
    }
    Hooks {
        prefix: segs,
        by_id,
    }
}

fn herr(i: usize, d: &HookDef, msg: String) -> HookError {
    HookError {
        at: Some(d.at),
        index: Some(i),
        id: Some(d.id.clone()),
        msg,
    }
}

/// `e` of hooks file `file` as a load error at its line and column.
fn located(file: &Path, e: HookError) -> ConfigError {
    let key = e.key();
    let mut out = error(file, &key, e.msg);
    if let Some(at) = e.at {
        (out.line, out.col) = (at.line, at.col);
    }
    out
}

/// One hook definition → its `Endpoint`: public, webhook's reading,
/// its values, its own program, webhook's answer.
///
/// # Errors
/// A sentence naming the option that cannot be served.
pub fn compile(d: &HookDef, dir: &Path, server: &Server) -> Result<Endpoint, String> {
    let json_params = d
        .parse_parameters_as_json
        .iter()
        .enumerate()
        .map(|(i, a)| json_param(a, &format!("parse-parameters-as-json[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let rule = match &d.trigger_rule {
        Some(r) => Some(rule(r, "trigger-rule", 0)?.unwrap_or_else(never)),
        None => None,
    };
    let cwd = (!d.command_working_directory.is_empty())
        .then(|| resolve(dir, Path::new(&d.command_working_directory)));
    let values = values(d, cwd.clone().unwrap_or_else(std::env::temp_dir))?;
    let program = program(d, &cwd, dir, server, values.args.len());
    // A redelivery deduplicated by its delivery id only where a signature
    // guards the hook (the id is then the sender's): webhook itself runs
    // every delivery, and a first delivery is answered as it would be.
    let deduplicate =
        server.hooks.deduplicate && rule.as_ref().and_then(Rule::required_signature).is_some();
    let mut receive = Receive {
        rule,
        deduplicate,
        ..Receive::default()
    };
    receive.answer.ignored_status =
        known_status(d.trigger_rule_mismatch_http_response_code).unwrap_or(200);
    let mut methods = methods(&d.http_methods, "http-methods")?;
    if methods.is_empty() {
        // webhook's -http-methods: the default of a hook without its own.
        methods.clone_from(&server.hooks.http_methods);
    }
    Ok(Endpoint {
        methods: if methods.is_empty() {
            Methods::Any
        } else {
            Methods::Set(methods)
        },
        credentials: Credentials::Public,
        dialect: Dialect::HooksFile(Arc::new(Hook {
            reading: Reading {
                content_type: (!d.incoming_payload_content_type.is_empty())
                    .then(|| d.incoming_payload_content_type.clone()),
                json_params,
                soft_signatures: d.trigger_signature_soft_failures,
            },
            values,
            answer: answer(d)?,
        })),
        // No positional `variables`: the dialect makes the values.
        values: Values::ByName,
        target: Target::Own(Arc::new(program)),
        vars: BTreeMap::new(),
        // A hooks-file hook has no completion callback (the file format
        // has none).
        callback: None,
        request_callbacks: false,
        receive: Arc::new(receive),
        entry: Entry::Hook(d.id.clone()),
        group: None,
    })
}

/// The arguments, environment and files of a hook.
fn values(d: &HookDef, file_dir: PathBuf) -> Result<HookValues, String> {
    let args = d
        .pass_arguments_to_command
        .iter()
        .enumerate()
        .map(|(i, a)| source(a, &format!("pass-arguments-to-command[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let mut env = Vec::new();
    for (i, a) in d.pass_environment_to_command.iter().enumerate() {
        let name = if a.envname.is_empty() {
            format!("HOOK_{}", a.name)
        } else {
            a.envname.clone()
        };
        let at = format!("pass-environment-to-command[{i}]");
        env.push((env_name(name, &at)?, source(a, &at)?));
    }
    let mut files = Vec::new();
    for (i, a) in d.pass_file_to_command.iter().enumerate() {
        let name = if a.envname.is_empty() {
            format!("HOOK_{}", a.name.to_uppercase())
        } else {
            a.envname.clone()
        };
        let at = format!("pass-file-to-command[{i}]");
        files.push(HookFile {
            env: env_name(name, &at)?,
            source: source(a, &at)?,
            base64: a.base64decode,
        });
    }
    Ok(HookValues {
        args,
        env,
        files,
        file_dir,
    })
}

/// Methods as written (any case, spaces around) → [`Method`]s; `option`
/// names the list in the error.
fn methods(list: &[String], option: &str) -> Result<Vec<Method>, String> {
    let mut out = Vec::new();
    for (i, m) in list.iter().enumerate() {
        match Method::parse(m.trim()) {
            Method::Other => {
                return Err(format!("option {option}[{i}]: \"{m}\" is not a method trigd serves (GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS)"))
            }
            method => out.push(method),
        }
    }
    Ok(out)
}

fn env_name(name: String, at: &str) -> Result<String, String> {
    if name.is_empty() || name.contains(['=', '\0']) {
        return Err(format!(
            "option {at}: \"{name}\" cannot be an environment variable name"
        ));
    }
    Ok(name)
}

fn answer(d: &HookDef) -> Result<HookAnswer, String> {
    let mut headers = Vec::new();
    for (i, h) in d.response_headers.iter().enumerate() {
        let name_ok =
            !h.name.is_empty() && h.name.bytes().all(|b| b.is_ascii_graphic() && b != b':');
        let value_ok = h
            .value
            .bytes()
            .all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
        if !name_ok || !value_ok {
            return Err(format!(
                "option response-headers[{i}]: \"{}\" is not a header trigd can send",
                h.name
            ));
        }
        headers.push((h.name.clone(), h.value.clone()));
    }
    Ok(HookAnswer {
        message: d.response_message.clone(),
        headers,
        success: known_status(d.success_http_response_code).unwrap_or(200),
        output: d.include_command_output_in_response,
        output_on_error: d.include_command_output_in_response_on_error,
    })
}

/// A status webhook would send: one Go's `net/http` has a text for (an
/// unknown one, or 0, leaves 200).
pub fn known_status(code: i64) -> Option<u16> {
    const KNOWN: &[u16] = &[
        100, 101, 102, 103, 200, 201, 202, 203, 204, 205, 206, 207, 208, 226, 300, 301, 302, 303,
        304, 305, 307, 308, 400, 401, 402, 403, 404, 405, 406, 407, 408, 409, 410, 411, 412, 413,
        414, 415, 416, 417, 418, 421, 422, 423, 424, 425, 426, 428, 429, 431, 451, 500, 501, 502,
        503, 504, 505, 506, 507, 508, 510, 511,
    ];
    u16::try_from(code)
        .ok()
        .filter(|c| *c != 0 && KNOWN.contains(c))
}

/// The one-function program of a hook.
fn program(d: &HookDef, cwd: &Option<PathBuf>, dir: &Path, server: &Server, n: usize) -> Program {
    let cmd = Path::new(&d.execute_command);
    let argv0 = match cwd {
        _ if cmd.is_absolute() => d.execute_command.clone(),
        Some(cwd) => cwd.join(cmd).display().to_string(),
        None if d.execute_command.contains('/') => dir.join(cmd).display().to_string(),
        None => d.execute_command.clone(),
    };
    let inputs: Vec<String> = (0..n).map(|i| format!("arg{i}")).collect();
    let mut argv = vec![Template(vec![Piece::Lit(argv0)])];
    argv.extend((0..n).map(|i| Template(vec![Piece::Var(i)])));
    let function = Function {
        name: d.id.clone(),
        steps: vec![Step::Command(argv)],
        timeout: server.run_timeout,
        env: BTreeMap::new(),
        workdir: cwd.clone().unwrap_or_else(|| dir.to_path_buf()),
        concurrency: None,
        output: OutputMode::Raw,
        outputs: inputs,
        webhook_trigger: None,
        user: None,
        group: None,
        env_inputs: false,
        combined_output: true,
        expect_every: None,
        schedules: Vec::new(),
        retry: None,
        concurrency_group: None,
        // A hooks-file hook has no completion callback (the file format
        // has none).
        callback: None,
        retry_on_restart: false,
    };
    Program {
        id: 0,
        name: format!("hook {}", d.id),
        workspace: None,
        file: dir.to_path_buf(),
        functions: vec![function],
        stamp: StampCell::default(),
        digest: 0,
        hook: true,
    }
}

/// A request value reference → [`Source`].
fn source(a: &ArgDef, at: &str) -> Result<Source, String> {
    let path = |n: &str| JsonPath::parse(n).map_err(|e| format!("option {at}.name: {e}"));
    Ok(match a.source.as_str() {
        "header" => Source::Header(a.name.to_ascii_lowercase()),
        "url" | "query" => Source::Query(a.name.clone()),
        "payload" => Source::Payload(path(&a.name)?),
        "string" => Source::Literal(a.name.clone()),
        "raw-request-body" => Source::BodyText,
        "entire-payload" => Source::Whole(Whole::Payload),
        "entire-query" => Source::Whole(Whole::Query),
        "entire-headers" => Source::Whole(Whole::Headers),
        "request" => match a.name.to_ascii_lowercase().as_str() {
            "method" => Source::Request(RequestField::Method),
            "remote-addr" => Source::Request(RequestField::RemoteAddr),
            other => {
                return Err(format!(
                    "option {at}.name: unknown request value \"{other}\"; use \"method\" or \"remote-addr\""
                ))
            }
        },
        other => {
            return Err(format!("option {at}.source: unknown source \"{other}\"; use header, url, query, payload, request, string, raw-request-body, entire-payload, entire-query or entire-headers"))
        }
    })
}

/// A `parse-parameters-as-json` entry: header, url/query or payload.
fn json_param(a: &ArgDef, at: &str) -> Result<Source, String> {
    match source(a, at)? {
        s @ (Source::Header(_) | Source::Query(_) | Source::Payload(_)) => Ok(s),
        _ => Err(format!(
            "option {at}.source: only header, url, query and payload values can be parsed as JSON"
        )),
    }
}

/// Deepest rule nesting accepted.
const MAX_DEPTH: usize = 32;

/// A `trigger-rule` → [`Rule`] (`None`: an empty rule, which webhook never
/// matches; see [`never`]).
fn rule(r: &RuleDef, at: &str, depth: usize) -> Result<Option<Rule>, String> {
    if depth > MAX_DEPTH {
        return Err(format!("option {at}: rules nest deeper than {MAX_DEPTH}"));
    }
    let list = |all: &[RuleDef], op: &str| -> Result<Vec<Rule>, String> {
        all.iter()
            .enumerate()
            .map(|(i, c)| {
                rule(c, &format!("{at}.{op}[{i}]"), depth + 1).map(|r| r.unwrap_or_else(never))
            })
            .collect()
    };
    Ok(Some(if let Some(all) = &r.and {
        Rule::And(list(all, "and")?)
    } else if let Some(any) = &r.or {
        Rule::Or(list(any, "or")?)
    } else if let Some(inner) = &r.not {
        let inner = rule(inner, &format!("{at}.not"), depth + 1)?.unwrap_or_else(never);
        Rule::Not(Box::new(inner))
    } else if let Some(m) = &r.matches {
        let place = format!("{at}.match");
        Rule::Match(leaf(m, &place)?, place)
    } else {
        return Ok(None);
    }))
}

/// A rule that never matches (webhook's empty rule object).
fn never() -> Rule {
    Rule::Or(Vec::new())
}

/// A `match` rule → [`Leaf`].
fn leaf(m: &MatchDef, at: &str) -> Result<Leaf, String> {
    let param = || source(&m.parameter, &format!("{at}.parameter"));
    let hmac = |algo| -> Result<Leaf, String> {
        if m.secret.is_empty() {
            return Err(format!(
                "option {at}.secret: a signature check needs a secret"
            ));
        }
        Ok(Leaf::SignatureIn(
            param()?,
            verifier(Scheme::Hmac(algo), &m.secret, ""),
        ))
    };
    Ok(match m.kind.as_str() {
        "value" => Leaf::Equals(param()?, m.value.clone()),
        "regex" => Leaf::Regex(
            param()?,
            Regex::new(&m.regex)
                .map_err(|e| format!("option {at}.regex: {}", e.to_string().replace('\n', " ")))?,
        ),
        "payload-hmac-sha1" | "payload-hash-sha1" => hmac(Algo::Sha1)?,
        "payload-hmac-sha256" | "payload-hash-sha256" => hmac(Algo::Sha256)?,
        "payload-hmac-sha512" | "payload-hash-sha512" => hmac(Algo::Sha512)?,
        "ip-whitelist" => Leaf::Cidr(ranges(&m.ip_range, at)?),
        "scalr-signature" => {
            if m.secret.is_empty() {
                return Err(format!("option {at}.secret: a signature check needs a secret"));
            }
            Leaf::Signature(verifier(Scheme::Scalr, &m.secret, "x-signature"))
        }
        other => return Err(format!("option {at}.type: unknown match type \"{other}\"; use value, regex, payload-hmac-sha1, payload-hmac-sha256, payload-hmac-sha512, ip-whitelist or scalr-signature")),
    })
}

fn verifier(scheme: Scheme, secret: &str, header: &str) -> Verifier {
    let prefix = match scheme {
        Scheme::Hmac(Algo::Sha1) => "sha1=",
        Scheme::Hmac(Algo::Sha256) => "sha256=",
        Scheme::Hmac(Algo::Sha512) => "sha512=",
        _ => "",
    };
    Verifier {
        scheme,
        header: header.to_string(),
        prefix: prefix.to_string(),
        encoding: Encoding::Hex,
        secret: Secret::new(secret.as_bytes().to_vec()),
        tolerance: std::time::Duration::from_secs(300),
        secret_file: None,
    }
}

/// `ip-range`: ranges separated by white space; a bare IPv4 address is a
/// /32 (and a bare IPv6 address a /128, where webhook says /32).
fn ranges(s: &str, at: &str) -> Result<Vec<Cidr>, String> {
    let out: Vec<Cidr> = s
        .split_whitespace()
        .map(|r| Cidr::parse(r).map_err(|e| format!("option {at}.ip-range: {e}")))
        .collect::<Result<_, _>>()?;
    if out.is_empty() {
        return Err(format!("option {at}.ip-range: no range given"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compat::webhook::file::parse_file;

    fn server() -> Server {
        crate::config::load_str(Path::new("config.toml"), "", &[])
            .unwrap()
            .server
    }

    fn compile_one(json: &str) -> Result<Endpoint, String> {
        let text = format!(r#"[{{"id": "h", "execute-command": "run.sh", {json}}}]"#);
        let def = parse_file(&text).unwrap().remove(0).unwrap();
        compile(&def, Path::new("/etc/trigd"), &server())
    }

    #[test]
    fn what_webhook_would_trip_over_per_request_is_a_load_error() {
        for (json, want) in [
            (
                r#""pass-arguments-to-command": [{"source": "body"}]"#,
                "unknown source \"body\"",
            ),
            (
                r#""pass-arguments-to-command": [{"source": "request", "name": "path"}]"#,
                "unknown request value",
            ),
            (
                r#""trigger-rule": {"match": {"type": "regex", "regex": "(", "parameter": {"source": "url", "name": "q"}}}"#,
                "trigger-rule.match.regex",
            ),
            (
                r#""trigger-rule": {"match": {"type": "ip-whitelist", "ip-range": "10.0.0.0/40"}}"#,
                "ip-range",
            ),
            (
                r#""trigger-rule": {"and": [{"match": {"type": "payload-hmac-sha256", "parameter": {"source": "header", "name": "X-Sig"}}}]}"#,
                "trigger-rule.and[0].match.secret",
            ),
            (
                r#""trigger-rule": {"match": {"type": "payload-hmac-md5", "secret": "s"}}"#,
                "unknown match type",
            ),
            (
                r#""parse-parameters-as-json": [{"source": "string", "name": "x"}]"#,
                "parsed as JSON",
            ),
            (
                r#""pass-environment-to-command": [{"source": "string", "name": "x", "envname": "A=B"}]"#,
                "environment variable name",
            ),
            (r#""http-methods": ["PO ST"]"#, "http-methods[0]"),
            (
                r#""response-headers": [{"name": "Bad Name", "value": "x"}]"#,
                "response-headers[0]",
            ),
        ] {
            let e = compile_one(json)
                .err()
                .unwrap_or_else(|| panic!("{json} loads"));
            assert!(e.contains(want) && e.contains("option"), "{json}: {e}");
        }
    }

    #[test]
    fn commands_names_and_statuses() {
        let h = compile_one(r#""command-working-directory": "work", "success-http-response-code": 299, "trigger-rule-mismatch-http-response-code": 403, "http-methods": [" post"], "pass-environment-to-command": [{"source": "payload", "name": "a.b"}], "pass-file-to-command": [{"source": "payload", "name": "data"}]"#).unwrap();
        let Target::Own(program) = &h.target else {
            panic!()
        };
        let f = &program.functions[0];
        let Step::Command(argv) = &f.steps[0] else {
            panic!()
        };
        assert_eq!(
            argv[0],
            Template(vec![Piece::Lit("/etc/trigd/work/run.sh".into())])
        );
        assert_eq!(f.workdir, Path::new("/etc/trigd/work"));
        let Dialect::HooksFile(hook) = &h.dialect else {
            panic!()
        };
        let (values, answer) = (&hook.values, &hook.answer);
        assert_eq!(values.file_dir, Path::new("/etc/trigd/work"));
        assert_eq!(h.methods, Methods::Set(vec![Method::Post]));
        assert_eq!(
            (answer.success, h.receive.answer.ignored_status),
            (200, 403)
        );
        assert_eq!(values.env[0].0, "HOOK_a.b");
        assert_eq!(values.files[0].env, "HOOK_DATA");
        let bare = compile_one(r#""trigger-rule": {}"#).unwrap();
        assert_eq!(bare.methods, Methods::Any);
        let Target::Own(program) = &bare.target else {
            panic!()
        };
        let Step::Command(argv) = &program.functions[0].steps[0] else {
            panic!()
        };
        assert_eq!(
            argv[0],
            Template(vec![Piece::Lit("run.sh".into())]),
            "a bare name is looked up in PATH"
        );
        assert!(
            matches!(bare.receive.rule, Some(Rule::Or(ref v)) if v.is_empty()),
            "an empty rule never matches"
        );
        assert_eq!(known_status(418), Some(418));
        assert_eq!(known_status(299), None);
        assert_eq!(known_status(0), None);
    }
}
