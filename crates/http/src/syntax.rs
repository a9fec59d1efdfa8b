//! Shared RFC 9110 character classes and list splitting. Tables instead of
//! `match` chains because these run once per byte of every request head.

/// The table of the bytes that are ASCII letters or digits, or one of `others`.
pub(crate) const fn alphanumeric_and(others: &[u8]) -> [bool; 256] {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = (i as u8).is_ascii_alphanumeric();
        i += 1;
    }
    let mut j = 0;
    while j < others.len() {
        t[others[j] as usize] = true;
        j += 1;
    }
    t
}

const fn field_value_table() -> [bool; 256] {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        // field-content: VCHAR, SP, HTAB and obs-text; never CTLs or DEL.
        t[i] = i == 0x09 || (i >= 0x20 && i != 0x7f);
        i += 1;
    }
    t
}

static TCHAR: [bool; 256] = alphanumeric_and(b"!#$%&'*+-.^_`|~");
static FIELD_VALUE: [bool; 256] = field_value_table();

/// `tchar` from RFC 9110 §5.6.2.
#[inline]
pub(crate) fn is_tchar(b: u8) -> bool {
    TCHAR[b as usize]
}

/// `token` = 1*tchar.
#[inline]
pub(crate) fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| is_tchar(b))
}

/// A byte allowed inside a field value (after OWS trimming).
#[inline]
pub(crate) fn is_field_value_byte(b: u8) -> bool {
    FIELD_VALUE[b as usize]
}

/// SP or HTAB.
#[inline]
pub(crate) fn is_ows(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// Strips optional whitespace (SP / HTAB) from both ends.
#[inline]
pub(crate) fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !is_ows(*first) {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !is_ows(*last) {
            break;
        }
        s = rest;
    }
    s
}

/// Iterates the elements of a `#rule` list (RFC 9110 §5.6.1): splits on
/// commas outside quoted strings, trims OWS and skips empty elements, as the
/// RFC requires recipients to tolerate them.
pub(crate) fn list_elements(value: &[u8]) -> ListElements<'_> {
    ListElements { rest: value }
}

/// Iterator returned by [`list_elements`].
pub(crate) struct ListElements<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for ListElements<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        while !self.rest.is_empty() {
            let s = self.rest;
            let mut in_quotes = false;
            let mut escaped = false;
            let mut end = s.len();
            for (i, &b) in s.iter().enumerate() {
                if escaped {
                    escaped = false;
                } else if in_quotes {
                    match b {
                        b'\\' => escaped = true,
                        b'"' => in_quotes = false,
                        _ => {}
                    }
                } else if b == b'"' {
                    in_quotes = true;
                } else if b == b',' {
                    end = i;
                    break;
                }
            }
            let elem = trim_ows(&s[..end]);
            self.rest = if end < s.len() { &s[end + 1..] } else { &[] };
            if !elem.is_empty() {
                return Some(elem);
            }
        }
        None
    }
}

/// Converts bytes already validated as ASCII; never fails in practice, and
/// falls back to "" rather than panicking if that invariant were broken.
#[inline]
pub(crate) fn ascii_str(b: &[u8]) -> &str {
    std::str::from_utf8(b).unwrap_or_default()
}

/// Parses 1*DIGIT into a u64; `None` for empty input, non-digits or overflow.
pub(crate) fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tchar_class() {
        assert!(is_token(b"GET"));
        assert!(is_token(b"x-Custom_1.~!"));
        assert!(!is_token(b""));
        assert!(!is_token(b"a b"));
        assert!(!is_token(b"a:b"));
        assert!(!is_token(b"\"a\""));
    }

    #[test]
    fn field_value_class() {
        assert!(is_field_value_byte(b'\t'));
        assert!(is_field_value_byte(b' '));
        assert!(is_field_value_byte(0x80));
        assert!(!is_field_value_byte(0));
        assert!(!is_field_value_byte(b'\r'));
        assert!(!is_field_value_byte(0x7f));
    }

    #[test]
    fn trims_ows() {
        assert_eq!(trim_ows(b" \t a b \t"), b"a b");
        assert_eq!(trim_ows(b"   "), b"");
        assert_eq!(trim_ows(b""), b"");
    }

    #[test]
    fn splits_lists() {
        let v: Vec<&[u8]> = list_elements(b" a , ,b,\"c,d\";q=1 ,, ").collect();
        assert_eq!(v, vec![&b"a"[..], b"b", b"\"c,d\";q=1"]);
        assert_eq!(list_elements(b" , ,").count(), 0);
        let v: Vec<&[u8]> = list_elements(br#""a\",b", c"#).collect();
        assert_eq!(v, vec![&br#""a\",b""#[..], b"c"]);
    }

    #[test]
    fn parses_u64() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"+1"), None);
        assert_eq!(parse_u64(b"1 2"), None);
    }
}
