//! Running several instances behind a load balancer: the instance name that
//! every run id carries, which instance owns a run id, and the readiness
//! states of `/healthz` (`App::readiness` decides).
//!
//! A run id is `<instance>-<32 hex digits>`. The instance name is made of
//! `a-z`, `0-9`, `_` and `-`, so the id stays URL-safe, and the owner is
//! everything before the last `-` (the hex part has none), which a balancer
//! can match with a path regex such as `^/api/runs/web1-[0-9a-f]{32}$`.
//! Run ids written before instance names existed are plain 32 hex digits
//! and have no owner: the instance whose state dir holds them serves them.

use std::fs;

/// Longest instance name, in bytes.
pub const MAX_NAME: usize = 63;

/// Whether `name` may be an instance name: 1 to 63 of `a-z 0-9 _ -`,
/// starting with a letter or a digit.
pub fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_NAME
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-')
}

/// The instance name used when `[server] instance` is not set: the first
/// label of the host name, made valid by [`from_hostname`].
pub fn default_name() -> String {
    let host = fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    from_hostname(&host)
}

/// A valid instance name from a host name: its first label, lower-cased,
/// other characters replaced by `-`, cut to [`MAX_NAME`]; `trigd` when
/// nothing is left.
pub fn from_hostname(host: &str) -> String {
    let label = host.trim().split('.').next().unwrap_or("");
    let mut name: String = label
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    name = name.trim_matches(|c| c == '-' || c == '_').to_string();
    name.truncate(MAX_NAME);
    if valid_name(&name) {
        name
    } else {
        "trigd".into()
    }
}

/// A new random run id of `instance`: `<instance>-<32 hex digits>`.
pub fn new_run_id(instance: &str) -> String {
    format!("{instance}-{}", hex::encode(rand::random::<[u8; 16]>()))
}

/// The parts of a run id: the owning instance (`None` for an id without
/// one) and the 32 hex digits. `None` when `id` is not a run id.
pub fn parse_run_id(id: &str) -> Option<(Option<&str>, &str)> {
    let (owner, hex) = match id.rsplit_once('-') {
        Some((owner, hex)) if valid_name(owner) => (Some(owner), hex),
        Some(_) => return None,
        None => (None, id),
    };
    let is_hex = hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    is_hex.then_some((owner, hex))
}

/// The instance that owns `id`, when it is another one than `me`.
pub fn foreign_owner<'a>(id: &'a str, me: &str) -> Option<&'a str> {
    parse_run_id(id)
        .and_then(|(owner, _)| owner)
        .filter(|owner| *owner != me)
}

/// Whether this instance should get traffic now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Config loaded, state dir writable, not shutting down.
    Ready,
    /// SIGTERM received: still serving, but asking the balancer to stop
    /// sending (`drain_delay`), or already closing.
    Draining,
    /// Something it needs is missing; the text says what.
    NotReady(String),
}

impl Readiness {
    /// The `Status` field of `/healthz`.
    pub fn status(&self) -> &'static str {
        match self {
            Readiness::Ready => "ok",
            Readiness::Draining => "draining",
            Readiness::NotReady(_) => "not_ready",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_host_names() {
        assert_eq!(from_hostname("Web-1.example.com\n"), "web-1");
        assert_eq!(from_hostname("ip-10-0-0-7"), "ip-10-0-0-7");
        assert_eq!(from_hostname("--x y--"), "x-y");
        assert_eq!(from_hostname(""), "trigd");
        assert_eq!(from_hostname("...."), "trigd");
        assert_eq!(from_hostname(&"a".repeat(100)).len(), MAX_NAME);
        assert!(valid_name(&default_name()));
        assert!(!valid_name("-a") && !valid_name("A") && !valid_name("a.b") && !valid_name(""));
    }

    #[test]
    fn run_ids_name_their_owner() {
        let id = new_run_id("web-1");
        let (owner, hex) = parse_run_id(&id).unwrap();
        assert_eq!(owner, Some("web-1"));
        assert_eq!(hex.len(), 32);
        let old = "0123456789abcdef0123456789abcdef";
        assert_eq!(parse_run_id(old), Some((None, old)));
        assert_eq!(foreign_owner(&id, "web-2"), Some("web-1"));
        assert_eq!(foreign_owner(&id, "web-1"), None);
        assert_eq!(foreign_owner(old, "web-1"), None);
        for bad in ["", "x", "a-123", "-0123456789abcdef0123456789abcdef"] {
            assert_eq!(parse_run_id(bad), None, "{bad}");
        }
        assert_eq!(parse_run_id(&old.to_uppercase()), None);
    }
}
