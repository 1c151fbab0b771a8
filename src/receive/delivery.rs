//! The sender's delivery id of a signed request: what GitHub, GitLab,
//! Stripe and Standard Webhooks senders repeat when they deliver the same
//! event again (a retry after a timeout, a "Redeliver" click). A signed
//! endpoint deduplicates by it when the request has no `Idempotency-Key`
//! (`verify.deduplicate`).
//!
//! Where it is read, by verify scheme (the first present):
//!
//! | scheme | delivery id |
//! |---|---|
//! | `hmac-*` | `X-GitHub-Delivery`, `X-Gitea-Delivery` |
//! | `token` | `X-Gitlab-Event-UUID` |
//! | `stripe` | the body's top-level `id` (`evt_…`) |
//! | `standard-webhooks` | `webhook-id`, `svix-id` |
//! | `slack` | none (a slash command has no delivery id) |

use serde::Deserialize;

use super::signature::{header, Scheme, Verifier};

/// Longest delivery id used, in bytes; a longer one is not used.
pub const MAX_ID_BYTES: usize = 255;

/// The headers that carry a delivery id for `scheme`, in order.
fn headers_of(scheme: Scheme) -> &'static [&'static str] {
    match scheme {
        Scheme::Hmac(_) => &["x-github-delivery", "x-gitea-delivery"],
        Scheme::Token => &["x-gitlab-event-uuid"],
        Scheme::StandardWebhooks => &["webhook-id", "svix-id"],
        Scheme::Stripe | Scheme::Slack | Scheme::Scalr => &[],
    }
}

/// A Stripe event: only its id is read (every other field is skipped).
#[derive(Deserialize)]
struct StripeEvent {
    id: Option<String>,
}

/// The delivery id of a request that passed `v`, if it carries a usable
/// one (1 to [`MAX_ID_BYTES`] printable ASCII bytes).
pub fn id(v: &Verifier, headers: &[(String, String)], body: &[u8]) -> Option<String> {
    let found = match v.scheme {
        Scheme::Stripe => serde_json::from_slice::<StripeEvent>(body)
            .ok()
            .and_then(|e| e.id),
        s => headers_of(s)
            .iter()
            .find_map(|h| header(headers, h))
            .map(|v| v.trim().to_string()),
    }?;
    let usable = !found.is_empty()
        && found.len() <= MAX_ID_BYTES
        && found.bytes().all(|b| (0x20..0x7f).contains(&b));
    usable.then_some(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receive::signature::{Algo, Encoding, Secret};
    use std::time::Duration;

    fn v(scheme: Scheme) -> Verifier {
        Verifier {
            scheme,
            header: String::new(),
            prefix: String::new(),
            encoding: Encoding::Hex,
            secret: Secret::new(b"s".to_vec()),
            tolerance: Duration::from_secs(300),
            secret_file: None,
        }
    }

    fn h(k: &str, val: &str) -> Vec<(String, String)> {
        vec![(k.to_string(), val.to_string())]
    }

    #[test]
    fn each_scheme_reads_its_senders_id() {
        let gh = h("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958");
        assert_eq!(
            id(&v(Scheme::Hmac(Algo::Sha256)), &gh, b"{}").as_deref(),
            Some("72d3162e-cc78-11e3-81ab-4c9367dc0958")
        );
        let gl = h(
            "x-gitlab-event-uuid",
            "13792a34-cac6-4fda-95a8-c58e00a3954e",
        );
        assert!(id(&v(Scheme::Token), &gl, b"").is_some());
        let body = br#"{"data":{"object":{"id":"pi_1"}},"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy"}"#;
        assert_eq!(
            id(&v(Scheme::Stripe), &[], body).as_deref(),
            Some("evt_1NG8Du2eZvKYlo2CUI79vXWy")
        );
        assert_eq!(id(&v(Scheme::Stripe), &[], b"not json"), None);
        assert_eq!(id(&v(Scheme::Stripe), &[], br#"{"id":5}"#), None);
        let svix = h("svix-id", "msg_p5jXN8AQM9LWM0D4loKWxJek");
        assert!(id(&v(Scheme::StandardWebhooks), &svix, b"").is_some());
        assert_eq!(id(&v(Scheme::Slack), &gh, b""), None);
        // Another scheme's header is not read.
        assert_eq!(id(&v(Scheme::Token), &gh, b""), None);
    }

    #[test]
    fn unusable_ids_are_not_used() {
        let s = v(Scheme::StandardWebhooks);
        for bad in ["", "  ", "caf\u{e9}", "a\u{1}b"] {
            assert_eq!(id(&s, &h("webhook-id", bad), b""), None, "{bad:?}");
        }
        let long = "x".repeat(MAX_ID_BYTES + 1);
        assert_eq!(id(&s, &h("webhook-id", &long), b""), None);
        let max = "x".repeat(MAX_ID_BYTES);
        assert_eq!(
            id(&s, &h("webhook-id", &max), b"").as_deref(),
            Some(max.as_str())
        );
    }
}
