//! Request-target forms (RFC 9112 §3.2), Host/authority validation and path
//! normalisation. Normalisation is the security boundary between a URL and a
//! file path, so it decodes exactly once and refuses anything ambiguous.

use crate::error::RequestError;
use std::fmt;

/// A request-target split into its RFC 9112 §3.2 form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    /// `/path?query`, the normal form.
    Origin {
        /// Absolute path, still percent-encoded; starts with '/'.
        path: &'a str,
        /// Text after the first '?', if any.
        query: Option<&'a str>,
    },
    /// `http://authority/path?query`, sent to proxies but valid for origins.
    Absolute {
        /// "http" or "https" as sent (any case).
        scheme: &'a str,
        /// `host[:port]` from the URI.
        authority: &'a str,
        /// Path, "/" when the URI had none.
        path: &'a str,
        /// Text after the first '?', if any.
        query: Option<&'a str>,
    },
    /// `host:port`, only meaningful for CONNECT.
    Authority(&'a str),
    /// `*`, only meaningful for server-wide OPTIONS.
    Asterisk,
}

const BAD_TARGET: RequestError = RequestError::bad_request("invalid request-target");

/// Splits a raw request-target into its form.
///
/// Absolute-form is accepted for `http`/`https` (any case) with a non-empty,
/// valid authority; an empty path means "/". A `#` anywhere, bytes outside
/// visible ASCII, and anything not matching a form give 400.
pub fn parse_target(target: &str) -> Result<Target<'_>, RequestError> {
    let bytes = target.as_bytes();
    if bytes.is_empty() || !bytes.iter().all(|&b| (0x21..=0x7e).contains(&b)) {
        return Err(BAD_TARGET);
    }
    if memchr::memchr(b'#', bytes).is_some() {
        return Err(RequestError::bad_request("fragment in request-target"));
    }
    if bytes[0] == b'/' {
        let (path, query) = split_query(target);
        return Ok(Target::Origin { path, query });
    }
    if target == "*" {
        return Ok(Target::Asterisk);
    }
    if let Some(colon) = memchr::memchr(b':', bytes) {
        let scheme = &target[..colon];
        let rest = &target[colon + 1..];
        if (scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"))
            && rest.starts_with("//")
        {
            let rest = &rest[2..];
            let end = rest.find(['/', '?']).unwrap_or(rest.len());
            let authority = &rest[..end];
            if authority.is_empty() || !is_valid_host(authority.as_bytes()) {
                return Err(RequestError::bad_request(
                    "invalid authority in request-target",
                ));
            }
            let (path, query) = split_query(&rest[end..]);
            let path = if path.is_empty() { "/" } else { path };
            return Ok(Target::Absolute {
                scheme,
                authority,
                path,
                query,
            });
        }
        // authority-form = uri-host ":" port, with a non-empty port.
        let port = &target[target.rfind(':').unwrap_or(colon) + 1..];
        if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) && is_valid_host(bytes) {
            return Ok(Target::Authority(target));
        }
    }
    Err(BAD_TARGET)
}

fn split_query(s: &str) -> (&str, Option<&str>) {
    match s.find('?') {
        Some(q) => (&s[..q], Some(&s[q + 1..])),
        None => (s, None),
    }
}

/// Whether `v` is `uri-host [ ":" port ]` (RFC 9110 §7.2). An empty value is
/// valid (Host for URIs without authority). Rejects userinfo, whitespace,
/// path/query/fragment delimiters and ports that do not fit in 16 bits.
pub fn is_valid_host(v: &[u8]) -> bool {
    let (host, port) = if v.first() == Some(&b'[') {
        let Some(close) = memchr::memchr(b']', v) else {
            return false;
        };
        let inner = &v[1..close];
        if inner.is_empty() || !inner.iter().all(|&b| is_ip_literal_byte(b)) {
            return false;
        }
        match &v[close + 1..] {
            [] => (&v[..0], None),
            [b':', port @ ..] => (&v[..0], Some(port)),
            _ => return false,
        }
    } else {
        match memchr::memchr(b':', v) {
            Some(c) => (&v[..c], Some(&v[c + 1..])),
            None => (v, None),
        }
    };
    if !is_reg_name(host) {
        return false;
    }
    match port {
        None => true,
        // port = *DIGIT, so empty is allowed; beyond 65535 cannot be real.
        Some(p) => {
            p.len() <= 5
                && p.iter().all(u8::is_ascii_digit)
                && crate::syntax::parse_u64(p).is_none_or(|n| n <= 65535)
        }
    }
}

/// unreserved and sub-delims (RFC 3986 §3.2.2), as a table rather than a chain of
/// comparisons: every request's host goes through it.
static REG_NAME: [bool; 256] = crate::syntax::alphanumeric_and(b"-._~!$&'()*+,;=");

/// unreserved / sub-delims (RFC 3986), plus '%' checked by the caller.
#[inline]
fn is_reg_name_byte(b: u8) -> bool {
    REG_NAME[b as usize]
}

fn is_ip_literal_byte(b: u8) -> bool {
    // IPv6address and IPvFuture characters; brackets already stripped.
    is_reg_name_byte(b) || b == b':'
}

fn is_reg_name(s: &[u8]) -> bool {
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        if b == b'%' {
            if i + 2 >= s.len() || !(s[i + 1].is_ascii_hexdigit() && s[i + 2].is_ascii_hexdigit()) {
                return false;
            }
            i += 3;
        } else if is_reg_name_byte(b) {
            i += 1;
        } else {
            return false;
        }
    }
    true
}

/// Why a path was refused by [`normalize_path`]. Every variant maps to 400.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// A '%' not followed by two hex digits.
    BadEscape,
    /// A NUL byte, literal or decoded; file APIs would truncate at it.
    Nul,
    /// A backslash, literal or decoded; a path separator on some systems.
    Backslash,
    /// ".." segments climbing above the document root.
    AboveRoot,
}

impl PathError {
    /// The response status for this error (always 400).
    pub fn status(self) -> u16 {
        400
    }

    /// Short reason for the error log.
    pub fn reason(self) -> &'static str {
        match self {
            PathError::BadEscape => "bad percent-escape in path",
            PathError::Nul => "NUL in path",
            PathError::Backslash => "backslash in path",
            PathError::AboveRoot => "path climbs above root",
        }
    }
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

impl std::error::Error for PathError {}

impl From<PathError> for RequestError {
    fn from(e: PathError) -> Self {
        RequestError::new(e.status(), e.reason())
    }
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Percent-decodes `raw_path` once and resolves it into `out` (cleared first).
///
/// The result starts with '/', has no empty, "." or ".." segments, and keeps
/// a trailing '/' when the raw path ended in '/' or its last segment was "."
/// or "..". A decoded `%2f` separates segments like a literal '/', so the
/// output can be joined to a root without further checks. Decoding happens
/// exactly once: "%252e" becomes the literal text "%2e", never ".".
/// The output need not be UTF-8.
pub fn normalize_path(raw_path: &str, out: &mut Vec<u8>) -> Result<(), PathError> {
    let result = normalize_into(raw_path, out);
    if result.is_err() {
        // Never leave a half-built path where a caller might use it.
        out.clear();
    }
    result
}

fn normalize_into(raw_path: &str, out: &mut Vec<u8>) -> Result<(), PathError> {
    out.clear();
    out.push(b'/');
    // Start of the segment being built inside `out`; out[seg - 1] == b'/'.
    let mut seg = 1;
    // Climbing above the root is reported only after the whole path decoded,
    // so a bad escape or NUL later in the path wins (decode errors first).
    let mut above_root = false;
    let raw = raw_path.as_bytes();
    let mut i = 0;
    while i < raw.len() {
        let mut b = raw[i];
        i += 1;
        if b == b'%' {
            let hi = raw.get(i).copied().and_then(hex_val);
            let lo = raw.get(i + 1).copied().and_then(hex_val);
            match (hi, lo) {
                (Some(h), Some(l)) => b = (h << 4) | l,
                _ => return Err(PathError::BadEscape),
            }
            i += 2;
        }
        match b {
            0 => return Err(PathError::Nul),
            b'\\' => return Err(PathError::Backslash),
            b'/' => {
                end_segment(out, &mut seg, &mut above_root);
            }
            _ => out.push(b),
        }
    }
    // An ordinary last segment names a file: no trailing '/'. An empty, "."
    // or ".." last segment names a directory, which end_segment leaves
    // ending in '/'.
    if matches!(&out[seg..], [] | [b'.'] | [b'.', b'.']) {
        end_segment(out, &mut seg, &mut above_root);
    }
    if above_root {
        return Err(PathError::AboveRoot);
    }
    Ok(())
}

/// Closes the segment out[*seg..]: drops "" and ".", resolves "..", and
/// otherwise terminates it with '/'. Afterwards `out` ends with '/'.
fn end_segment(out: &mut Vec<u8>, seg: &mut usize, above_root: &mut bool) {
    match &out[*seg..] {
        [] | [b'.'] => out.truncate(*seg),
        [b'.', b'.'] => {
            out.truncate(*seg);
            if *seg == 1 {
                *above_root = true;
                return;
            }
            // Drop the previous segment: find the '/' before it.
            let prev = memchr::memrchr(b'/', &out[..*seg - 1]).unwrap_or(0);
            out.truncate(prev + 1);
            *seg = prev + 1;
        }
        _ => {
            out.push(b'/');
            *seg = out.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(p: &str) -> Result<String, PathError> {
        let mut out = b"garbage".to_vec();
        normalize_path(p, &mut out).map(|()| String::from_utf8_lossy(&out).into_owned())
    }

    #[test]
    fn origin_form() {
        assert_eq!(
            parse_target("/a/b?x=1&y=/?"),
            Ok(Target::Origin {
                path: "/a/b",
                query: Some("x=1&y=/?")
            })
        );
        assert_eq!(
            parse_target("/"),
            Ok(Target::Origin {
                path: "/",
                query: None
            })
        );
        assert_eq!(
            parse_target("/?"),
            Ok(Target::Origin {
                path: "/",
                query: Some("")
            })
        );
    }

    #[test]
    fn absolute_form() {
        assert_eq!(
            parse_target("http://example.com/x?q"),
            Ok(Target::Absolute {
                scheme: "http",
                authority: "example.com",
                path: "/x",
                query: Some("q")
            })
        );
        assert_eq!(
            parse_target("HTTPS://example.com:8443"),
            Ok(Target::Absolute {
                scheme: "HTTPS",
                authority: "example.com:8443",
                path: "/",
                query: None
            })
        );
        assert_eq!(
            parse_target("http://[::1]?a"),
            Ok(Target::Absolute {
                scheme: "http",
                authority: "[::1]",
                path: "/",
                query: Some("a")
            })
        );
        for bad in [
            "http:///x",
            "http://",
            "http://user@host/",
            "http://a b/",
            "ftp://example.com/",
            "http:/example.com/",
            "http:example.com",
            "http://h:port/",
        ] {
            assert_eq!(parse_target(bad).map_err(|e| e.status), Err(400), "{bad}");
        }
    }

    #[test]
    fn authority_and_asterisk() {
        assert_eq!(
            parse_target("example.com:443"),
            Ok(Target::Authority("example.com:443"))
        );
        assert_eq!(
            parse_target("[::1]:8080"),
            Ok(Target::Authority("[::1]:8080"))
        );
        assert_eq!(parse_target("*"), Ok(Target::Asterisk));
        for bad in [
            "example.com",
            "example.com:",
            "a:b",
            "**",
            "",
            "index.html",
            "*/",
        ] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn fragment_and_bad_bytes_rejected() {
        for bad in [
            "/a#b",
            "/#",
            "http://h/#x",
            "/a?b#c",
            "/a b",
            "/\u{e9}",
            "/\x7f",
        ] {
            assert_eq!(parse_target(bad).map_err(|e| e.status), Err(400), "{bad:?}");
        }
    }

    #[test]
    fn host_validation() {
        assert!(is_valid_host(b""));
        assert!(is_valid_host(b"a.b-c_d~e:65535"));
        assert!(is_valid_host(b"[v1.fe80::a+en1]"));
        assert!(!is_valid_host(b"h:65536"));
        assert!(!is_valid_host(b"[::1]:x"));
        assert!(!is_valid_host(b"a\tb"));
    }

    #[test]
    fn normalizes_dot_segments() {
        assert_eq!(norm("/"), Ok("/".into()));
        assert_eq!(norm(""), Ok("/".into()));
        assert_eq!(norm("/a/b/c"), Ok("/a/b/c".into()));
        assert_eq!(norm("/a/./b"), Ok("/a/b".into()));
        assert_eq!(norm("/a/../b"), Ok("/b".into()));
        assert_eq!(norm("/a/b/.."), Ok("/a/".into()));
        assert_eq!(norm("/a/b/."), Ok("/a/b/".into()));
        assert_eq!(norm("/a/.."), Ok("/".into()));
        assert_eq!(norm("/."), Ok("/".into()));
        assert_eq!(norm("/..."), Ok("/...".into()));
        assert_eq!(norm("/.a/..b/c.."), Ok("/.a/..b/c..".into()));
        assert_eq!(norm("a/b"), Ok("/a/b".into()));
    }

    #[test]
    fn collapses_slashes_and_keeps_trailing() {
        assert_eq!(norm("//a///b//"), Ok("/a/b/".into()));
        assert_eq!(norm("/a/"), Ok("/a/".into()));
        assert_eq!(norm("////"), Ok("/".into()));
    }

    #[test]
    fn above_root_is_rejected() {
        assert_eq!(norm("/.."), Err(PathError::AboveRoot));
        assert_eq!(norm("/../a"), Err(PathError::AboveRoot));
        assert_eq!(norm("/a/b/../../.."), Err(PathError::AboveRoot));
        assert_eq!(norm("/a/../../b"), Err(PathError::AboveRoot));
        assert_eq!(norm("/a/b/../../c"), Ok("/c".into()));
    }

    #[test]
    fn encoded_dots_and_slashes() {
        assert_eq!(norm("/%2e%2e"), Err(PathError::AboveRoot));
        assert_eq!(norm("/%2E%2e"), Err(PathError::AboveRoot));
        assert_eq!(norm("/a/%2e%2E/%2e%2e/x"), Err(PathError::AboveRoot));
        assert_eq!(norm("/a/%2e/b"), Ok("/a/b".into()));
        assert_eq!(norm("/a/.%2e"), Ok("/".into()));
        // A decoded %2f separates segments, so it cannot smuggle "..".
        assert_eq!(norm("/a%2fb"), Ok("/a/b".into()));
        assert_eq!(norm("/a%2F..%2F..%2Fetc"), Err(PathError::AboveRoot));
        assert_eq!(norm("/a/b%2f"), Ok("/a/b/".into()));
        // Double encoding is decoded once only.
        assert_eq!(norm("/%252e%252e"), Ok("/%2e%2e".into()));
        assert_eq!(norm("/%252e%252e/%252f"), Ok("/%2e%2e/%2f".into()));
        assert_eq!(norm("/a%20b"), Ok("/a b".into()));
    }

    #[test]
    fn nul_backslash_and_bad_escapes() {
        assert_eq!(norm("/a%00b"), Err(PathError::Nul));
        assert_eq!(norm("/a\0b"), Err(PathError::Nul));
        assert_eq!(norm("/a%5cb"), Err(PathError::Backslash));
        assert_eq!(norm("/a%5C..%5C..%5Cx"), Err(PathError::Backslash));
        assert_eq!(norm("/a\\b"), Err(PathError::Backslash));
        assert_eq!(norm("/%"), Err(PathError::BadEscape));
        assert_eq!(norm("/%4"), Err(PathError::BadEscape));
        assert_eq!(norm("/%zz"), Err(PathError::BadEscape));
        assert_eq!(norm("/%+1"), Err(PathError::BadEscape));
        // Decoding errors win over ".." found earlier.
        assert_eq!(norm("/../%zz"), Err(PathError::BadEscape));
        let mut out = Vec::new();
        assert!(normalize_path("/a/%zz", &mut out).is_err());
        assert!(out.is_empty(), "no half-built path after an error");
    }

    #[test]
    fn non_utf8_output_is_allowed() {
        let mut out = Vec::new();
        normalize_path("/%ff%fe", &mut out).unwrap();
        assert_eq!(out, b"/\xff\xfe");
    }

    #[test]
    fn path_error_maps_to_400() {
        for e in [
            PathError::BadEscape,
            PathError::Nul,
            PathError::Backslash,
            PathError::AboveRoot,
        ] {
            let r: RequestError = e.into();
            assert_eq!(r.status, 400);
            assert_eq!(r.reason, e.to_string());
        }
    }
}
