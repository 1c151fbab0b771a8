//! Known vectors: GitHub's documented example, Slack's documented example,
//! and values computed with `openssl dgst -hmac` (independent of this code).
use super::*;
use crate::state::test_dir::TestDir;
use std::cell::Cell;

thread_local! {
    /// HMACs computed on this thread (by `Algo::mac`).
    pub static MACS: Cell<usize> = const { Cell::new(0) };
}

fn macs_during(f: impl FnOnce()) -> usize {
    let before = MACS.with(Cell::get);
    f();
    MACS.with(Cell::get) - before
}

const GH_SECRET: &str = "It's a Secret to Everybody";
const GH_BODY: &[u8] = b"Hello, World!";
const GH_256: &str = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
const GH_1: &str = "01dc10d0c83e72ed246219cdd91669667fe2ca59";
const GH_512_B64: &str =
    "Ee01WmF+mBNOhCASp5RMz1nBAlbLGCNXvX46QgE/8Hw3b4wUz1zBkj2iC1HWQlay+4678QCqZ6YTJvYf6oERvA==";

fn verifier(scheme: Scheme, header: &str, prefix: &str, secret: &str) -> Verifier {
    Verifier {
        scheme,
        header: header.into(),
        prefix: prefix.into(),
        encoding: Encoding::Hex,
        secret: Secret::new(secret.as_bytes().to_vec()),
        tolerance: Duration::from_secs(300),
        secret_file: None,
    }
}

fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn github_sha256_and_sha1() {
    let v = verifier(
        Scheme::Hmac(Algo::Sha256),
        "x-hub-signature-256",
        "sha256=",
        GH_SECRET,
    );
    let ok = h(&[("x-hub-signature-256", &format!("sha256={GH_256}"))]);
    assert_eq!(v.verify(&ok, GH_BODY, 0), Ok(()));
    assert_eq!(
        v.verify(&ok, b"Hello, World?", 0),
        Err(SigError::Mismatch {
            header: "x-hub-signature-256".into(),
            token: false,
        })
    );
    let v1 = verifier(
        Scheme::Hmac(Algo::Sha1),
        "x-hub-signature",
        "sha1=",
        GH_SECRET,
    );
    let ok1 = h(&[("x-hub-signature", &format!("sha1={GH_1}"))]);
    assert_eq!(v1.verify(&ok1, GH_BODY, 0), Ok(()));
    // Upper-case hex is accepted too.
    let up = h(&[("x-hub-signature", &format!("sha1={}", GH_1.to_uppercase()))]);
    assert_eq!(v1.verify(&up, GH_BODY, 0), Ok(()));
}

#[test]
fn several_signatures_in_one_header() {
    let v = verifier(Scheme::Hmac(Algo::Sha256), "x-sig", "sha256=", GH_SECRET);
    let wrong = "0".repeat(64);
    let both = h(&[(
        "x-sig",
        &format!("sha256={wrong}, sha1={GH_1}, sha256={GH_256}"),
    )]);
    assert_eq!(v.verify(&both, GH_BODY, 0), Ok(()));
    let none = h(&[("x-sig", &format!("sha256={wrong},sha256={wrong}"))]);
    assert!(matches!(
        v.verify(&none, GH_BODY, 0),
        Err(SigError::Mismatch { .. })
    ));
}

#[test]
fn base64_sha512() {
    let mut v = verifier(Scheme::Hmac(Algo::Sha512), "x-sig", "", GH_SECRET);
    v.encoding = Encoding::Base64;
    assert_eq!(v.verify(&h(&[("x-sig", GH_512_B64)]), GH_BODY, 0), Ok(()));
    let bad = h(&[("x-sig", "***")]);
    assert!(matches!(
        v.verify(&bad, GH_BODY, 0),
        Err(SigError::Malformed { .. })
    ));
}

#[test]
fn missing_malformed_and_wrong_length() {
    let v = verifier(
        Scheme::Hmac(Algo::Sha256),
        "x-hub-signature-256",
        "sha256=",
        GH_SECRET,
    );
    assert!(matches!(
        v.verify(&[], GH_BODY, 0),
        Err(SigError::Missing { .. })
    ));
    let empty = h(&[("x-hub-signature-256", "  ")]);
    assert!(matches!(
        v.verify(&empty, GH_BODY, 0),
        Err(SigError::Missing { .. })
    ));
    // Like adnanh/webhook: a lone signature may come without the prefix.
    let no_prefix = h(&[("x-hub-signature-256", GH_256)]);
    assert_eq!(v.verify(&no_prefix, GH_BODY, 0), Ok(()));
    let only_prefix = h(&[("x-hub-signature-256", "sha256=")]);
    assert!(matches!(
        v.verify(&only_prefix, GH_BODY, 0),
        Err(SigError::Malformed { .. })
    ));
    let short = h(&[("x-hub-signature-256", &format!("sha256={}", &GH_256[..40]))]);
    let err = v.verify(&short, GH_BODY, 0).unwrap_err();
    assert!(
        err.message().contains("wrong length: 20 bytes"),
        "{}",
        err.message()
    );
    let not_hex = h(&[("x-hub-signature-256", "sha256=zz")]);
    assert!(v
        .verify(&not_hex, GH_BODY, 0)
        .unwrap_err()
        .message()
        .contains("not hexadecimal"));
}

#[test]
fn token_is_compared_whole() {
    let v = verifier(Scheme::Token, "x-gitlab-token", "", "s3cret-token");
    assert_eq!(
        v.verify(&h(&[("x-gitlab-token", "s3cret-token")]), b"", 0),
        Ok(())
    );
    for wrong in ["s3cret-toke", "s3cret-token2", "S3CRET-TOKEN"] {
        let r = v.verify(&h(&[("x-gitlab-token", wrong)]), b"", 0);
        assert!(matches!(r, Err(SigError::Mismatch { .. })), "{wrong}");
        // A token is no signature of the body: the message says so.
        let msg = r.unwrap_err().message();
        assert_eq!(
            msg,
            "The token in header 'x-gitlab-token' is not the shared secret."
        );
    }
}

#[test]
fn stripe_signature_and_replay_window() {
    let v = verifier(Scheme::Stripe, "stripe-signature", "", "whsec_test");
    let sig = "c89214b5b5da833daed6f0b8c5bb6bd58cea9022bd80ccc78230f3942d632925";
    let body = br#"{"id":"evt_1"}"#;
    let hdr = h(&[("stripe-signature", &format!("t=1700000000,v1={sig},v0=abc"))]);
    assert_eq!(v.verify(&hdr, body, 1_700_000_100), Ok(()));
    assert_eq!(v.verify(&hdr, body, 1_699_999_800), Ok(()));
    assert!(matches!(
        v.verify(&hdr, body, 1_700_000_301),
        Err(SigError::Expired { tolerance: 300, .. })
    ));
    // A changed timestamp breaks the signature (it is signed too).
    let moved = h(&[("stripe-signature", &format!("t=1700000001,v1={sig}"))]);
    assert!(matches!(
        v.verify(&moved, body, 1_700_000_000),
        Err(SigError::Mismatch { .. })
    ));
    let no_t = h(&[("stripe-signature", &format!("v1={sig}"))]);
    assert!(matches!(
        v.verify(&no_t, body, 0),
        Err(SigError::Malformed { .. })
    ));
    let no_v1 = h(&[("stripe-signature", "t=1700000000")]);
    assert!(matches!(
        v.verify(&no_v1, body, 0),
        Err(SigError::Malformed { .. })
    ));
}

#[test]
fn slack_documented_example() {
    let body = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    let v = verifier(
        Scheme::Slack,
        "x-slack-signature",
        "v0=",
        "8f742231b10e8888abcd99yyyzzz85a5",
    );
    let sig = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
    let hdr = h(&[("x-slack-signature", sig), (SLACK_TIMESTAMP, "1531420618")]);
    assert_eq!(v.verify(&hdr, body.as_bytes(), 1_531_420_618), Ok(()));
    assert!(matches!(
        v.verify(&hdr, body.as_bytes(), 1_531_420_618 + 301),
        Err(SigError::Expired { .. })
    ));
    let no_ts = h(&[("x-slack-signature", sig)]);
    assert_eq!(
        v.verify(&no_ts, body.as_bytes(), 0),
        Err(SigError::Missing {
            header: SLACK_TIMESTAMP.into()
        })
    );
}

#[test]
fn messages_and_debug_hold_no_secret() {
    let v = verifier(Scheme::Hmac(Algo::Sha256), "x-sig", "sha256=", GH_SECRET);
    assert!(!format!("{v:?}").contains("Secret to"));
    let sent = format!("sha256={}", "ab".repeat(32));
    let err = v.verify(&h(&[("x-sig", &sent)]), GH_BODY, 0).unwrap_err();
    assert!(!err.message().contains("abab"));
    assert!(!err.message().contains(GH_256));
}

#[test]
fn secret_files_lose_one_newline_and_changes_are_seen() {
    let dir = TestDir::new("secret");
    let f = dir.join("s");
    std::fs::write(&f, "abc\r\n").unwrap();
    assert_eq!(Secret::from_file(&f).unwrap(), Secret::new(b"abc".to_vec()));
    std::fs::write(&f, "\n").unwrap();
    assert!(Secret::from_file(&f).unwrap_err().contains("is empty"));
    std::fs::write(&f, "abc\n").unwrap();
    let mut v = verifier(Scheme::Token, "x-t", "", "abc");
    v.secret_file = Some(f.clone());
    assert!(!v.secret_file_changed());
    std::fs::write(&f, "abd\n").unwrap();
    assert!(v.secret_file_changed());
    std::fs::remove_file(&f).unwrap();
    assert!(v.secret_file_changed());
}

#[test]
fn many_signatures_cost_one_mac_and_too_many_are_refused() {
    let v = verifier(
        Scheme::Hmac(Algo::Sha256),
        "x-hub-signature-256",
        "sha256=",
        GH_SECRET,
    );
    let wrong = format!("sha256={}", "0".repeat(64));
    let mut list = vec![wrong.as_str(); MAX_SIGNATURES - 1];
    let good = format!("sha256={GH_256}");
    list.push(&good);
    let hs = h(&[("x-hub-signature-256", &list.join(","))]);
    assert_eq!(
        macs_during(|| assert_eq!(v.verify(&hs, GH_BODY, 0), Ok(()))),
        1
    );
    let bad = h(&[(
        "x-hub-signature-256",
        &list[..MAX_SIGNATURES - 1].join(", "),
    )]);
    let n = macs_during(|| {
        assert!(matches!(
            v.verify(&bad, GH_BODY, 0),
            Err(SigError::Mismatch { .. })
        ))
    });
    assert_eq!(n, 1);
    // One entry over the bound: refused before any HMAC.
    let over = vec![good.as_str(); MAX_SIGNATURES + 1].join(",");
    let hs = h(&[("x-hub-signature-256", &over)]);
    let n = macs_during(|| match v.verify(&hs, GH_BODY, 0) {
        Err(SigError::Malformed { why, .. }) => assert!(why.contains("more than 16"), "{why}"),
        other => panic!("{other:?}"),
    });
    assert_eq!(n, 0);
    let s = verifier(Scheme::Stripe, "stripe-signature", "", "whsec");
    let t = format!("t=1,{}", vec!["v1=00"; MAX_SIGNATURES].join(","));
    let hs = h(&[("stripe-signature", &t)]);
    assert!(matches!(
        s.verify(&hs, b"{}", 1),
        Err(SigError::Malformed { .. })
    ));
}

/// The Standard Webhooks test vector of the official libraries
/// (`TestWebhookSign`, github.com/standard-webhooks/standard-webhooks).
const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SW_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
const SW_T: u64 = 1_614_265_330;
const SW_BODY: &[u8] = br#"{"test": 2432232314}"#;
const SW_SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

fn standard() -> Verifier {
    let mut v = verifier(Scheme::StandardWebhooks, "webhook-signature", "", SW_SECRET);
    v.secret = v.secret.standard_key().unwrap();
    v
}

fn sw_headers(family: &str, sig: &str, t: &str) -> Vec<(String, String)> {
    h(&[
        (&format!("{family}id"), SW_ID),
        (&format!("{family}timestamp"), t),
        (&format!("{family}signature"), sig),
    ])
}

#[test]
fn standard_webhooks_vector_under_both_header_families() {
    let v = standard();
    let t = SW_T.to_string();
    for family in STANDARD_FAMILIES {
        let ok = sw_headers(family, SW_SIG, &t);
        assert_eq!(v.verify(&ok, SW_BODY, SW_T), Ok(()), "{family}");
        assert_eq!(v.verify(&ok, SW_BODY, SW_T + 300), Ok(()), "{family}");
        let e = v.verify(&ok, SW_BODY, SW_T + 301).unwrap_err();
        assert!(matches!(e, SigError::Expired { .. }), "{e:?}");
        let e = v.verify(&ok, b"{}", SW_T).unwrap_err();
        assert!(matches!(e, SigError::Mismatch { .. }), "{e:?}");
    }
    // Several signatures (a rotation, or an asymmetric v1a beside): any v1.
    let many =
        format!("v1a,AAAA v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v2,x {SW_SIG} v1,!!");
    assert_eq!(
        v.verify(&sw_headers("webhook-", &many, &t), SW_BODY, SW_T),
        Ok(())
    );
    // The id is signed: another id does not match.
    let mut other = sw_headers("webhook-", SW_SIG, &t);
    other[0].1 = "msg_other".into();
    assert!(matches!(
        v.verify(&other, SW_BODY, SW_T),
        Err(SigError::Mismatch { .. })
    ));
    // An unpadded secret is the same key.
    let mut unpadded = verifier(
        Scheme::StandardWebhooks,
        "",
        "",
        "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    );
    unpadded.secret = unpadded.secret.standard_key().unwrap();
    assert_eq!(unpadded.secret, v.secret);
    assert!(Secret::new(b"whsec_!!!".to_vec()).standard_key().is_none());
    assert!(Secret::new(b"whsec_".to_vec()).standard_key().is_none());
}

#[test]
fn standard_webhooks_hostile_headers_are_answered_cheaply() {
    let v = standard();
    let t = SW_T.to_string();
    let code = |hs: &[(String, String)]| match v.verify(hs, SW_BODY, SW_T) {
        Err(SigError::Missing { header }) => format!("missing {header}"),
        Err(SigError::Malformed { header, .. }) => format!("malformed {header}"),
        other => format!("{other:?}"),
    };
    assert_eq!(code(&h(&[])), "missing webhook-signature");
    assert_eq!(
        code(&h(&[
            ("webhook-signature", SW_SIG),
            ("webhook-timestamp", &t)
        ])),
        "missing webhook-id"
    );
    assert_eq!(
        code(&sw_headers("svix-", SW_SIG, "yesterday")),
        "malformed svix-timestamp"
    );
    assert_eq!(
        code(&sw_headers("webhook-", SW_SIG, "-5")),
        "malformed webhook-timestamp"
    );
    let mut long_id = sw_headers("webhook-", SW_SIG, &t);
    long_id[0].1 = "x".repeat(MAX_MESSAGE_ID + 1);
    assert_eq!(code(&long_id), "malformed webhook-id");
    assert_eq!(
        code(&sw_headers("webhook-", "v1,not*base64", &t)),
        "malformed webhook-signature"
    );
    assert_eq!(
        code(&sw_headers("webhook-", "v1a,AAAA", &t)),
        "malformed webhook-signature"
    );
    // A megabyte of signatures: refused after MAX_SIGNATURES + 1 entries,
    // before any HMAC.
    let huge = format!("{SW_SIG} ").repeat(40_000);
    let n = macs_during(|| {
        assert_eq!(
            code(&sw_headers("webhook-", &huge, &t)),
            "malformed webhook-signature"
        );
    });
    assert_eq!(n, 0);
    // Sixteen wrong signatures and the right one last: one HMAC.
    let wrong = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= ".repeat(MAX_SIGNATURES - 1);
    let n = macs_during(|| {
        let hs = sw_headers("webhook-", &format!("{wrong}{SW_SIG}"), &t);
        assert_eq!(v.verify(&hs, SW_BODY, SW_T), Ok(()));
    });
    assert_eq!(n, 1);
}
