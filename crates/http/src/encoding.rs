//! Accept-Encoding negotiation input (RFC 9110 §12.5.3), reduced to the two
//! codings we can serve precompressed: br and gzip.

use crate::syntax::{list_elements, trim_ows};

/// Client preference for the codings we can serve, as q-values in 0.0..=1.0.
/// 0.0 means not acceptable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AcceptEncoding {
    /// q-value for br.
    pub br: f32,
    /// q-value for gzip (or its alias x-gzip).
    pub gzip: f32,
}

/// Reads an Accept-Encoding value.
///
/// Explicit entries win over `*`, which covers codings not listed; `x-gzip`
/// counts as gzip; the first mention of a coding wins; an invalid q-value
/// makes that item 0. An absent header gives 0 for both, so only identity is
/// sent to clients that did not ask for compression.
pub fn parse_accept_encoding(header: Option<&[u8]>) -> AcceptEncoding {
    let mut br: Option<f32> = None;
    let mut gzip: Option<f32> = None;
    let mut star: Option<f32> = None;
    if let Some(value) = header {
        for item in list_elements(value) {
            let mut parts = item.split(|&b| b == b';');
            let coding = trim_ows(parts.next().unwrap_or_default());
            let mut q = 1.0;
            for param in parts {
                let param = trim_ows(param);
                if let Some(eq) = memchr::memchr(b'=', param) {
                    if trim_ows(&param[..eq]).eq_ignore_ascii_case(b"q") {
                        q = parse_qvalue(trim_ows(&param[eq + 1..])).unwrap_or(0.0);
                    }
                }
            }
            let slot = if coding.eq_ignore_ascii_case(b"br") {
                &mut br
            } else if coding.eq_ignore_ascii_case(b"gzip") || coding.eq_ignore_ascii_case(b"x-gzip")
            {
                &mut gzip
            } else if coding == b"*" {
                &mut star
            } else {
                continue;
            };
            slot.get_or_insert(q);
        }
    }
    let fallback = star.unwrap_or(0.0);
    AcceptEncoding {
        br: br.unwrap_or(fallback),
        gzip: gzip.unwrap_or(fallback),
    }
}

/// qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )
fn parse_qvalue(v: &[u8]) -> Option<f32> {
    let (int, frac) = match memchr::memchr(b'.', v) {
        Some(p) => (&v[..p], &v[p + 1..]),
        None => (v, &v[..0]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let thousandths = frac
        .iter()
        .chain(std::iter::repeat(&b'0'))
        .take(3)
        .fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    match int {
        b"0" => Some(thousandths as f32 / 1000.0),
        b"1" if thousandths == 0 => Some(1.0),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ae(h: &str) -> (f32, f32) {
        let a = parse_accept_encoding(Some(h.as_bytes()));
        (a.br, a.gzip)
    }

    #[test]
    fn absent_or_empty_means_identity_only() {
        let a = parse_accept_encoding(None);
        assert_eq!((a.br, a.gzip), (0.0, 0.0));
        assert_eq!(ae(""), (0.0, 0.0));
        assert_eq!(ae("identity"), (0.0, 0.0));
    }

    #[test]
    fn plain_lists() {
        assert_eq!(ae("gzip, deflate, br"), (1.0, 1.0));
        assert_eq!(ae("gzip"), (0.0, 1.0));
        assert_eq!(ae("BR"), (1.0, 0.0));
        assert_eq!(ae("x-gzip"), (0.0, 1.0));
    }

    #[test]
    fn q_values() {
        assert_eq!(ae("br;q=0.5, gzip;q=0.8"), (0.5, 0.8));
        assert_eq!(ae("br ; Q=0.25 , gzip ;q=1.000"), (0.25, 1.0));
        assert_eq!(ae("br;q=0, gzip;q=0.001"), (0.0, 0.001));
        assert_eq!(ae("br;q=1., gzip;q=0."), (1.0, 0.0));
        assert_eq!(ae("br;level=5;q=0.7"), (0.7, 0.0));
    }

    #[test]
    fn bad_q_values_mean_zero() {
        for bad in [
            "q=2", "q=1.5", "q=0.1234", "q=-1", "q=abc", "q=", "q=.5", "q=1.001",
        ] {
            assert_eq!(ae(&format!("br;{bad}, gzip")), (0.0, 1.0), "{bad}");
        }
    }

    #[test]
    fn star_covers_unlisted() {
        assert_eq!(ae("*"), (1.0, 1.0));
        assert_eq!(ae("*;q=0.3"), (0.3, 0.3));
        assert_eq!(ae("gzip;q=0, *"), (1.0, 0.0));
        assert_eq!(ae("*;q=0, br"), (1.0, 0.0));
        assert_eq!(ae("br;q=0.2, *;q=0.9"), (0.2, 0.9));
    }

    #[test]
    fn first_mention_wins() {
        assert_eq!(ae("gzip;q=0.4, x-gzip;q=0.9"), (0.0, 0.4));
        assert_eq!(ae("br, br;q=0"), (1.0, 0.0));
    }
}
