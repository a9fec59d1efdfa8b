//! Range header parsing (RFC 9110 §14.2). Anything we do not understand is
//! ignored rather than rejected, because serving the whole 200 is always a
//! correct answer to a Range request.

use crate::limits::MAX_RANGES;
use crate::syntax::{list_elements, trim_ows};

/// What to do with a Range header for a representation of a given size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeRequest {
    /// No header, an unknown unit, bad syntax or too many ranges: send 200.
    Ignore,
    /// Valid syntax but no range overlaps the representation: send 416.
    Unsatisfiable,
    /// Satisfiable ranges as inclusive (first, last) byte offsets, clamped to
    /// size-1, in the order sent; unsatisfiable specs are dropped.
    Ranges(Vec<(u64, u64)>),
}

/// Parses `Range: bytes=...` against a representation of `size` bytes.
///
/// The unit is case-insensitive; specs are "a-b" (a > b is bad syntax),
/// "a-" and "-n". A spec is satisfiable when its first position is below
/// `size`, or, for a suffix, when n > 0 and size > 0. More than
/// [`MAX_RANGES`] specs gives [`RangeRequest::Ignore`].
pub fn parse_range(header: Option<&[u8]>, size: u64) -> RangeRequest {
    let Some(value) = header else {
        return RangeRequest::Ignore;
    };
    let value = trim_ows(value);
    let Some(eq) = memchr::memchr(b'=', value) else {
        return RangeRequest::Ignore;
    };
    if !value[..eq].eq_ignore_ascii_case(b"bytes") {
        return RangeRequest::Ignore;
    }
    let mut ranges = Vec::new();
    let mut specs = 0usize;
    for spec in list_elements(&value[eq + 1..]) {
        specs += 1;
        if specs > MAX_RANGES {
            return RangeRequest::Ignore;
        }
        let Some(range) = parse_spec(spec) else {
            return RangeRequest::Ignore;
        };
        let resolved = match range {
            Spec::From(first, last) if first < size => Some((first, last.min(size - 1))),
            Spec::Suffix(n) if n > 0 && size > 0 => Some((size - n.min(size), size - 1)),
            _ => None,
        };
        if let Some(r) = resolved {
            ranges.push(r);
        }
    }
    if specs == 0 {
        RangeRequest::Ignore
    } else if ranges.is_empty() {
        RangeRequest::Unsatisfiable
    } else {
        RangeRequest::Ranges(ranges)
    }
}

enum Spec {
    /// first-pos "-" [ last-pos ]; an open end is u64::MAX.
    From(u64, u64),
    /// "-" suffix-length.
    Suffix(u64),
}

fn parse_spec(spec: &[u8]) -> Option<Spec> {
    let dash = memchr::memchr(b'-', spec)?;
    let (a, b) = (&spec[..dash], &spec[dash + 1..]);
    if a.is_empty() {
        return Some(Spec::Suffix(digits(b)?));
    }
    let first = digits(a)?;
    if b.is_empty() {
        return Some(Spec::From(first, u64::MAX));
    }
    let last = digits(b)?;
    (first <= last).then_some(Spec::From(first, last))
}

/// 1*DIGIT, saturating: a huge offset is valid syntax that simply lies past
/// any real file, so it must not turn into a parse error.
fn digits(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0u64, |n, &d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(h: &str, size: u64) -> RangeRequest {
        parse_range(Some(h.as_bytes()), size)
    }

    fn ranges(v: &[(u64, u64)]) -> RangeRequest {
        RangeRequest::Ranges(v.to_vec())
    }

    #[test]
    fn closed_ranges() {
        assert_eq!(r("bytes=0-99", 1000), ranges(&[(0, 99)]));
        assert_eq!(r("bytes=5-5", 10), ranges(&[(5, 5)]));
        assert_eq!(r("bytes=5-50", 10), ranges(&[(5, 9)]));
        assert_eq!(r("bytes=10-20", 10), RangeRequest::Unsatisfiable);
        assert_eq!(r("bytes=5-4", 10), RangeRequest::Ignore);
    }

    #[test]
    fn open_and_suffix_ranges() {
        assert_eq!(r("bytes=3-", 10), ranges(&[(3, 9)]));
        assert_eq!(r("bytes=10-", 10), RangeRequest::Unsatisfiable);
        assert_eq!(r("bytes=-3", 10), ranges(&[(7, 9)]));
        assert_eq!(r("bytes=-30", 10), ranges(&[(0, 9)]));
        assert_eq!(r("bytes=-0", 10), RangeRequest::Unsatisfiable);
        assert_eq!(r("bytes=-99999999999999999999999", 10), ranges(&[(0, 9)]));
        assert_eq!(
            r("bytes=99999999999999999999999-", 10),
            RangeRequest::Unsatisfiable
        );
        assert_eq!(r("bytes=0-99999999999999999999999", 10), ranges(&[(0, 9)]));
    }

    #[test]
    fn multiple_ranges_keep_order_and_drop_unsatisfiable() {
        assert_eq!(
            r("bytes=5-6, 0-1 ,-2,100-200", 10),
            ranges(&[(5, 6), (0, 1), (8, 9)])
        );
        assert_eq!(r("bytes=0-1,,2-3,", 10), ranges(&[(0, 1), (2, 3)]));
        assert_eq!(r("bytes=20-30,-0", 10), RangeRequest::Unsatisfiable);
    }

    #[test]
    fn bad_syntax_is_ignored() {
        for h in [
            "bytes=",
            "bytes=,",
            "bytes=a-b",
            "bytes=-",
            "bytes=1",
            "bytes=1-2-3",
            "bytes=--1",
            "bytes=+1-2",
            "bytes=1 -2",
            "bytes=0-1,x",
            "bytes 0-1",
            "bytes",
        ] {
            assert_eq!(r(h, 10), RangeRequest::Ignore, "{h}");
        }
        assert_eq!(parse_range(None, 10), RangeRequest::Ignore);
    }

    #[test]
    fn unit_is_case_insensitive_and_unknown_units_ignored() {
        assert_eq!(r("Bytes=0-0", 10), ranges(&[(0, 0)]));
        assert_eq!(r("BYTES=0-0", 10), ranges(&[(0, 0)]));
        assert_eq!(r("items=0-0", 10), RangeRequest::Ignore);
        assert_eq!(r("bytes =0-0", 10), RangeRequest::Ignore);
    }

    #[test]
    fn empty_representation() {
        assert_eq!(r("bytes=0-", 0), RangeRequest::Unsatisfiable);
        assert_eq!(r("bytes=-5", 0), RangeRequest::Unsatisfiable);
        assert_eq!(r("bytes=0-0", 0), RangeRequest::Unsatisfiable);
        assert_eq!(r("bytes=0-0", 1), ranges(&[(0, 0)]));
    }

    #[test]
    fn too_many_ranges_are_ignored() {
        let list = |n: usize| {
            let specs: Vec<String> = (0..n).map(|i| format!("{i}-{i}")).collect();
            format!("bytes={}", specs.join(","))
        };
        match r(&list(MAX_RANGES), 1000) {
            RangeRequest::Ranges(v) => assert_eq!(v.len(), MAX_RANGES),
            other => panic!("{other:?}"),
        }
        assert_eq!(r(&list(MAX_RANGES + 1), 1000), RangeRequest::Ignore);
    }
}
