//! Accept-Encoding negotiation input (RFC 9110 §12.5.3), reduced to the
//! codings fastpath can send: br, zstd and gzip, plus what the client says
//! about identity (no coding at all).

use crate::syntax::{list_elements, trim_ows};

/// Client preference for the codings we can serve, as q-values in 0.0..=1.0.
/// 0.0 means not acceptable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AcceptEncoding {
    /// q-value for br.
    pub br: f32,
    /// q-value for gzip (or its alias x-gzip).
    pub gzip: f32,
    /// q-value for zstd (RFC 9659).
    pub zstd: f32,
    /// q-value the client gave identity, by an `identity` item or else by `*`;
    /// `None` when it named neither. Kept apart from the codings because an
    /// unnamed identity is acceptable without ranking above anything
    /// (RFC 9110 §12.5.3): `gzip;q=0.5` alone still asks for gzip.
    pub identity: Option<f32>,
}

impl AcceptEncoding {
    /// Whether a response without content coding may be sent: false only for
    /// `identity;q=0`, or `*;q=0` with no `identity` item (RFC 9110 §12.5.3).
    pub fn identity_acceptable(&self) -> bool {
        self.identity.is_none_or(|q| q > 0.0)
    }
}

/// Reads an Accept-Encoding value.
///
/// Explicit entries win over `*`, which covers codings not listed (identity
/// included); `x-gzip` counts as gzip; the first mention of a coding wins; an
/// invalid q-value makes that item 0. An absent header gives 0 for every
/// coding, so only identity is sent to clients that did not ask for
/// compression.
pub fn parse_accept_encoding(header: Option<&[u8]>) -> AcceptEncoding {
    let mut br: Option<f32> = None;
    let mut gzip: Option<f32> = None;
    let mut zstd: Option<f32> = None;
    let mut identity: Option<f32> = None;
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
            } else if coding.eq_ignore_ascii_case(b"zstd") {
                &mut zstd
            } else if coding.eq_ignore_ascii_case(b"identity") {
                &mut identity
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
        zstd: zstd.unwrap_or(fallback),
        identity: identity.or(star),
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

    fn full(h: Option<&str>) -> AcceptEncoding {
        parse_accept_encoding(h.map(str::as_bytes))
    }

    #[test]
    fn zstd_is_read_like_the_others() {
        let a = full(Some("zstd, br;q=0.9, gzip;q=0.8"));
        assert_eq!((a.zstd, a.br, a.gzip), (1.0, 0.9, 0.8));
        assert_eq!(full(Some("ZSTD;q=0.3")).zstd, 0.3);
        assert_eq!(full(Some("gzip, br")).zstd, 0.0);
        assert_eq!(full(Some("*;q=0.4, br")).zstd, 0.4);
        assert_eq!(full(Some("zstd;q=0, *")).zstd, 0.0);
        assert_eq!(full(Some("zstd;q=5, gzip")).zstd, 0.0);
        assert_eq!(full(Some("x-zstd")).zstd, 0.0);
        assert_eq!(full(None).zstd, 0.0);
    }

    #[test]
    fn identity_named_or_covered_by_star() {
        assert_eq!(full(None).identity, None);
        assert_eq!(full(Some("")).identity, None);
        assert_eq!(full(Some("gzip;q=0.5")).identity, None);
        assert_eq!(full(Some("identity")).identity, Some(1.0));
        assert_eq!(full(Some("Identity;q=0.2")).identity, Some(0.2));
        assert_eq!(full(Some("*;q=0.6")).identity, Some(0.6));
        assert_eq!(full(Some("*;q=0, identity;q=0.1")).identity, Some(0.1));
        assert_eq!(full(Some("identity;q=0.7, *;q=0")).identity, Some(0.7));
        assert_eq!(full(Some("identity;q=0, identity")).identity, Some(0.0));
        assert_eq!(full(Some("identity;q=x")).identity, Some(0.0));
    }

    #[test]
    fn identity_excluded_only_by_q_zero() {
        let acceptable = |h: Option<&str>| full(h).identity_acceptable();
        assert!(acceptable(None));
        assert!(acceptable(Some("")));
        assert!(acceptable(Some("gzip;q=0, br;q=0")));
        assert!(acceptable(Some("identity;q=0.001")));
        assert!(acceptable(Some("*;q=0, identity")));
        assert!(acceptable(Some("*;q=0.5")));
        assert!(!acceptable(Some("identity;q=0")));
        assert!(!acceptable(Some("gzip, identity;q=0")));
        assert!(!acceptable(Some("*;q=0")));
        assert!(!acceptable(Some("br, *;q=0")));
        assert!(!acceptable(Some("identity;q=0, *")));
    }
}
