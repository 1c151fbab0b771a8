//! The `notAfter` time of a DER certificate, by a short walk over the DER
//! (RFC 5280 §4.1): the certificate, its `tbsCertificate`, past `version`,
//! `serialNumber`, `signature` and `issuer`, into `validity`. rustls keeps
//! the parsed certificate to itself and `x509-parser` would add a parser
//! stack to the binary for one field; this walk is fuzzed
//! (`fuzz/fuzz_targets/cert_not_after.rs`).

/// DER tags met on the way.
const SEQUENCE: u8 = 0x30;
const VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// `notAfter` of the DER certificate `der`, in seconds since the Unix
/// epoch; `None` when `der` is not a certificate of that shape.
pub fn not_after(der: &[u8]) -> Option<i64> {
    let (cert, _) = expect(der, SEQUENCE)?;
    let (tbs, _) = expect(cert, SEQUENCE)?;
    let mut rest = tbs;
    if rest.first() == Some(&VERSION) {
        rest = element(rest)?.2;
    }
    for _ in 0..3 {
        // serialNumber, signature, issuer
        rest = element(rest)?.2;
    }
    let (validity, _) = expect(rest, SEQUENCE)?;
    let after = element(validity)?.2;
    let (tag, time, _) = element(after)?;
    parse_time(tag, time)
}

/// The content of the element at the start of `input`, which must have
/// `tag`, and what follows it.
fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    match element(input)? {
        (t, content, rest) if t == tag => Some((content, rest)),
        _ => None,
    }
}

/// The tag, the content and the rest of the element at the start of
/// `input` (definite lengths of up to four bytes, as DER has).
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let (bytes, after) = rest.split_at(n);
        rest = after;
        bytes
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b))
    };
    if rest.len() < len {
        return None;
    }
    let (content, rest) = rest.split_at(len);
    Some((tag, content, rest))
}

/// `UTCTime` (`YYMMDDHHMMSSZ`, years 1950-2049) or `GeneralizedTime`
/// (`YYYYMMDDHHMMSSZ`) as Unix seconds.
fn parse_time(tag: u8, text: &[u8]) -> Option<i64> {
    let (year, rest) = match (tag, text.len()) {
        (UTC_TIME, 13) => {
            let yy = digits(&text[..2])?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &text[2..])
        }
        (GENERALIZED_TIME, 15) => (digits(&text[..4])?, &text[4..]),
        _ => return None,
    };
    if rest[10] != b'Z' {
        return None;
    }
    let field = |i: usize| digits(&rest[i..i + 2]);
    let (month, day) = (field(0)?, field(2)?);
    let (hour, minute, second) = (field(4)?, field(6)?, field(8)?);
    let valid = (1..=12).contains(&month)
        && (1..=31).contains(&day)
        && hour < 24
        && minute < 60
        && second < 60;
    if !valid {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(days * 86_400 + hour * 3600 + minute * 60 + second)
}

/// The number the ASCII digits `text` spell.
fn digits(text: &[u8]) -> Option<i64> {
    text.iter().try_fold(0i64, |acc, &b| {
        b.is_ascii_digit().then(|| acc * 10 + i64::from(b - b'0'))
    })
}

/// Days from 1970-01-01 to the given date of the proleptic Gregorian
/// calendar (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_of_both_kinds_convert_to_unix_seconds() {
        assert_eq!(parse_time(UTC_TIME, b"700101000000Z"), Some(0));
        assert_eq!(parse_time(UTC_TIME, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(
            parse_time(GENERALIZED_TIME, b"20380119031408Z"),
            Some(2_147_483_648)
        );
        assert_eq!(
            parse_time(GENERALIZED_TIME, b"20000229120000Z"),
            Some(951_825_600)
        );
        assert_eq!(parse_time(UTC_TIME, b"700101000000+"), None);
        assert_eq!(parse_time(UTC_TIME, b"701301000000Z"), None);
        assert_eq!(parse_time(GENERALIZED_TIME, b"2000022912000Z"), None);
    }

    #[test]
    fn certificates_made_by_openssl_give_their_not_after() {
        // `openssl x509 -noout -enddate`: Dec 26 22:14:30 2026 GMT and
        // Jan 15 22:14:30 2109 GMT (GeneralizedTime past 2049).
        let ec = include_bytes!("../../../fuzz/seeds/cert_not_after/ec-utctime.der");
        let rsa = include_bytes!("../../../fuzz/seeds/cert_not_after/rsa-generalizedtime.der");
        assert_eq!(not_after(ec), Some(1_798_323_270));
        assert_eq!(not_after(rsa), Some(4_387_731_270));
        for cut in 0..ec.len() {
            assert_eq!(not_after(&ec[..cut]), None, "cut at {cut}");
        }
    }

    #[test]
    fn truncated_and_odd_inputs_are_none() {
        assert_eq!(not_after(b""), None);
        assert_eq!(not_after(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(not_after(&[0x30, 0x80]), None);
        assert_eq!(not_after(&[0x30, 0x02, 0x30, 0x00]), None);
    }
}
