//! Conditional-request helpers (RFC 9110 §13): entity-tag lists for
//! If-Match / If-None-Match and HTTP-date parsing and formatting.

use crate::syntax::trim_ows;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Whether an If-Match / If-None-Match value matches the server's `etag`.
///
/// `etag` is the server's tag with quotes, e.g. `"5f-1a"` or `W/"5f-1a"`.
/// `*` matches any tag. `strong` selects strong comparison (If-Match: both
/// tags must be strong and equal); otherwise weak comparison (If-None-Match:
/// equal opaque-tags, W/ ignored). A malformed list matches nothing from the
/// point it breaks, which makes the request unconditional or fail safely.
pub fn etag_list_matches(header: &[u8], etag: &str, strong: bool) -> bool {
    let header = trim_ows(header);
    if header == b"*" {
        return true;
    }
    let Some((server_weak, server_tag)) = split_etag(etag.as_bytes()) else {
        return false;
    };
    if strong && server_weak {
        return false;
    }
    let mut rest = header;
    loop {
        rest = trim_ows(rest);
        // Skip empty list elements (RFC 9110 §5.6.1).
        while let [b',', tail @ ..] = rest {
            rest = trim_ows(tail);
        }
        if rest.is_empty() {
            return false;
        }
        let (weak, body) = match rest {
            [b'W', b'/', tail @ ..] => (true, tail),
            _ => (false, rest),
        };
        // opaque-tag = DQUOTE *etagc DQUOTE; etagc has no '"' so the next
        // quote closes the tag, commas inside it included.
        let [b'"', inner @ ..] = body else {
            return false;
        };
        let Some(close) = memchr::memchr(b'"', inner) else {
            return false;
        };
        let tag = &inner[..close];
        if tag == server_tag && !(strong && weak) {
            return true;
        }
        rest = trim_ows(&inner[close + 1..]);
        match rest {
            [] => return false,
            [b',', tail @ ..] => rest = tail,
            _ => return false,
        }
    }
}

/// Splits `W/"x"` / `"x"` into (weak, x); `None` if not a quoted tag.
fn split_etag(t: &[u8]) -> Option<(bool, &[u8])> {
    let (weak, t) = match t {
        [b'W', b'/', rest @ ..] => (true, rest),
        _ => (false, t),
    };
    match t {
        [b'"', inner @ .., b'"'] => Some((weak, inner)),
        _ => None,
    }
}

/// Parses an HTTP-date in any of the three RFC 9110 §5.6.7 formats
/// (IMF-fixdate, RFC 850, asctime). `None` if invalid: an invalid date in a
/// conditional header means the condition is ignored.
pub fn parse_http_date(value: &[u8]) -> Option<SystemTime> {
    let s = std::str::from_utf8(trim_ows(value)).ok()?;
    httpdate::parse_http_date(s).ok()
}

/// Last second an IMF-fixdate can show (9999-12-31T23:59:59Z).
const MAX_HTTP_DATE_SECS: u64 = 253_402_300_799;

/// Appends `t` as a 29-byte IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT").
/// Times before 1970 or after 9999 are clamped rather than panicking.
pub fn write_http_date(t: SystemTime, out: &mut Vec<u8>) {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        .min(MAX_HTTP_DATE_SECS);
    let t = UNIX_EPOCH + Duration::from_secs(secs);
    use std::io::Write;
    // Writing to a Vec cannot fail; formatting does not allocate.
    let _ = write!(out, "{}", httpdate::HttpDate::from(t));
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`): the dates the server writes in its own formats (the access log's,
/// a listing's), where `httpdate` writes HTTP's.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAG: &str = "\"5f-1a\"";

    #[test]
    fn star_matches_anything() {
        assert!(etag_list_matches(b"*", TAG, true));
        assert!(etag_list_matches(b" * ", TAG, false));
        assert!(etag_list_matches(b"*", "W/\"x\"", false));
    }

    #[test]
    fn weak_comparison() {
        assert!(etag_list_matches(b"\"5f-1a\"", TAG, false));
        assert!(etag_list_matches(b"W/\"5f-1a\"", TAG, false));
        assert!(etag_list_matches(b"\"5f-1a\"", "W/\"5f-1a\"", false));
        assert!(etag_list_matches(b"W/\"5f-1a\"", "W/\"5f-1a\"", false));
        assert!(!etag_list_matches(b"\"5f-1b\"", TAG, false));
        assert!(!etag_list_matches(b"5f-1a", TAG, false));
        assert!(!etag_list_matches(b"w/\"5f-1a\"", TAG, false));
    }

    #[test]
    fn strong_comparison() {
        assert!(etag_list_matches(b"\"5f-1a\"", TAG, true));
        assert!(!etag_list_matches(b"W/\"5f-1a\"", TAG, true));
        assert!(!etag_list_matches(b"\"5f-1a\"", "W/\"5f-1a\"", true));
    }

    #[test]
    fn lists() {
        assert!(etag_list_matches(b"\"a\", \"5f-1a\"", TAG, true));
        assert!(etag_list_matches(b"\"a\",W/\"b\" ,\t\"5f-1a\"", TAG, false));
        assert!(etag_list_matches(b", ,\"a\",,\"5f-1a\",", TAG, false));
        assert!(!etag_list_matches(b"\"a\", \"b\"", TAG, false));
        // Commas inside a tag belong to the tag.
        assert!(etag_list_matches(b"\"x,y\"", "\"x,y\"", true));
        assert!(!etag_list_matches(b"\"x,y\"", "\"x\"", true));
        assert!(!etag_list_matches(b"", TAG, false));
        assert!(!etag_list_matches(b"\"a\", *", TAG, false));
        // Malformed from some point: earlier tags still count.
        assert!(etag_list_matches(b"\"5f-1a\" junk", TAG, false));
        assert!(!etag_list_matches(b"junk, \"5f-1a\"", TAG, false));
        assert!(!etag_list_matches(b"\"unterminated", TAG, false));
    }

    #[test]
    fn malformed_server_tag_matches_nothing() {
        assert!(!etag_list_matches(b"\"x\"", "x", false));
    }

    #[test]
    fn dates_in_all_three_formats() {
        let t = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"), Some(t));
        assert_eq!(parse_http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"), Some(t));
        assert_eq!(parse_http_date(b"Sun Nov  6 08:49:37 1994"), Some(t));
        assert_eq!(parse_http_date(b" Sun, 06 Nov 1994 08:49:37 GMT "), Some(t));
        assert_eq!(parse_http_date(b"yesterday"), None);
        assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 08:49:37 \xff"), None);
        assert_eq!(parse_http_date(b""), None);
    }

    #[test]
    fn writes_imf_fixdate() {
        let mut out = b"Date: ".to_vec();
        write_http_date(UNIX_EPOCH + Duration::from_secs(784_111_777), &mut out);
        assert_eq!(out, b"Date: Sun, 06 Nov 1994 08:49:37 GMT");
        let mut out = Vec::new();
        write_http_date(UNIX_EPOCH - Duration::from_secs(1), &mut out);
        assert_eq!(out, b"Thu, 01 Jan 1970 00:00:00 GMT");
        let mut out = Vec::new();
        write_http_date(UNIX_EPOCH + Duration::from_secs(u64::MAX / 4), &mut out);
        assert_eq!(out, b"Fri, 31 Dec 9999 23:59:59 GMT");
        let mut out = Vec::new();
        write_http_date(SystemTime::now(), &mut out);
        assert_eq!(out.len(), 29);
    }
}
