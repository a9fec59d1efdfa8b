//! Whether, and how long, a backend response may be answered from memory: the
//! shared-cache rules of RFC 9111, reduced to what a cache that never
//! revalidates can honour.

use std::time::Duration;

use fastpath_http::parse_http_date;

/// Statuses whose responses may be kept. These are the ones RFC 9110 §15.1
/// calls cacheable by default, less those a cache keyed on method and target
/// cannot serve correctly: 206 (answers one Range), 300 and 405, 414, 501
/// (rare, and worth no memory). A 304 answers a conditional request and is
/// never kept either.
pub const CACHEABLE_STATUSES: &[u16] = &[200, 203, 204, 301, 308, 404, 410];

/// The longest lifetime granted, whatever the backend says. RFC 9111 §1.2.2
/// caps delta-seconds at 2^31; one year is what `immutable` assets use, and
/// keeps `Instant + lifetime` far from overflowing.
pub const MAX_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// How long a backend response may be served from the cache, if at all.
///
/// Kept only when all of these hold:
/// * the request was a GET (a HEAD response has no body to serve a GET with)
///   without `Authorization` (even where RFC 9111 §3.5 would allow it, the
///   cache key does not hold the credentials, so the safe choice is never);
/// * the status is in [`CACHEABLE_STATUSES`];
/// * `Cache-Control` has no `no-store`, `private` or `no-cache` (with or
///   without field names: this cache cannot drop single fields);
/// * there is no `Set-Cookie` (one client's cookie must not reach another);
/// * `Vary` names nothing but `Accept-Encoding` (which the caller puts in the
///   key, see [`vary_accept_encoding`]); `Vary: *` is never kept;
/// * the response gives an explicit lifetime: `s-maxage`, else `max-age`, else
///   `Expires` minus `Date` (both from the backend's clock, so no clock skew
///   enters). `public` alone is not enough: this cache never guesses a
///   lifetime from `Last-Modified`, because a dynamic page the application
///   did not mark cacheable must not be served stale.
///
/// The result is that lifetime minus `Age`, capped at [`MAX_LIFETIME`]; `None`
/// when nothing is left. Invalid freshness information (`max-age=soon`, two
/// different `max-age`s, an `Expires` that is not a date, such as the common
/// `0`) counts as already expired (RFC 9111 §4.2.1, §5.3); an invalid `Age` is
/// ignored (§5.1). Header names are matched ignoring ASCII case; repeated
/// `Cache-Control` and `Vary` fields are read as one list.
pub fn cache_lifetime(
    request_method: &str,
    request_has_authorization: bool,
    status: u16,
    response_headers: &[(&str, &[u8])],
) -> Option<Duration> {
    ResponseFields::read(response_headers.iter().copied()).lifetime(
        request_method,
        request_has_authorization,
        status,
    )
}

/// What the cache needs of a backend response's fields, read in one pass over them: how
/// long it may be kept ([`ResponseFields::lifetime`]), whether its key holds the request's
/// `Accept-Encoding` ([`ResponseFields::varies_on_accept_encoding`]), and the `Age` and
/// validators a kept copy answers with.
#[derive(Debug, Default)]
pub struct ResponseFields<'a> {
    directives: Directives,
    /// A `Cache-Control` gave invalid freshness information: already expired.
    invalid: bool,
    set_cookie: bool,
    /// `Vary` names something besides `Accept-Encoding` (or `*`).
    vary_other: bool,
    vary_accept_encoding: bool,
    /// The first `Age` field's value (`Some(None)`: invalid, ignored).
    age: Option<Option<u64>>,
    date: Option<&'a [u8]>,
    expires: Option<&'a [u8]>,
    /// The last `ETag` and `Last-Modified` fields.
    etag: Option<&'a [u8]>,
    last_modified: Option<&'a [u8]>,
    /// The values of the `Connection` fields: the fields they name were meant for the hop to
    /// fastpath, not for a client, so a kept copy does not take its `Age` or validators from
    /// them.
    connection: [&'a [u8]; 4],
    connection_len: usize,
    connection_more: Vec<&'a [u8]>,
}

impl<'a> ResponseFields<'a> {
    /// Reads `headers` (name as sent, OWS-trimmed value), once.
    pub fn read(headers: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Self {
        let mut fields = ResponseFields::default();
        for (name, value) in headers {
            // Dispatch on length first: most fields match none of these.
            match name.len() {
                3 if name.eq_ignore_ascii_case("age") => {
                    // The first field counts (RFC 9111 §5.1).
                    fields.age = fields.age.or_else(|| Some(age_value(value)));
                }
                4 if name.eq_ignore_ascii_case("date") => {
                    fields.date = fields.date.or(Some(value));
                }
                4 if name.eq_ignore_ascii_case("vary") => {
                    for v in list(value) {
                        if v.eq_ignore_ascii_case(b"accept-encoding") {
                            fields.vary_accept_encoding = true;
                        } else {
                            fields.vary_other = true;
                        }
                    }
                }
                4 if name.eq_ignore_ascii_case("etag") => fields.etag = Some(value),
                7 if name.eq_ignore_ascii_case("expires") => {
                    fields.expires = fields.expires.or(Some(value));
                }
                10 if name.eq_ignore_ascii_case("set-cookie") => fields.set_cookie = true,
                10 if name.eq_ignore_ascii_case("connection") => {
                    if fields.connection_len < fields.connection.len() {
                        fields.connection[fields.connection_len] = value;
                        fields.connection_len += 1;
                    } else {
                        fields.connection_more.push(value);
                    }
                }
                13 if name.eq_ignore_ascii_case("cache-control") => {
                    fields.invalid |= fields.directives.read(value).is_none();
                }
                13 if name.eq_ignore_ascii_case("last-modified") => {
                    fields.last_modified = Some(value);
                }
                _ => {}
            }
        }
        fields
    }

    /// How long the response may be served from the cache, if at all (see
    /// [`cache_lifetime`], whose rules these are).
    pub fn lifetime(
        &self,
        request_method: &str,
        request_has_authorization: bool,
        status: u16,
    ) -> Option<Duration> {
        if request_method != "GET"
            || request_has_authorization
            || !CACHEABLE_STATUSES.contains(&status)
        {
            return None;
        }
        let directives = &self.directives;
        if self.invalid
            || self.set_cookie
            || self.vary_other
            || directives.no_store
            || directives.no_cache
            || directives.private
        {
            return None;
        }
        let lifetime = match directives.s_maxage.or(directives.max_age) {
            Some(seconds) => seconds,
            None => {
                let expires = parse_http_date(self.expires?)?;
                let date = parse_http_date(self.date?)?;
                expires.duration_since(date).ok()?.as_secs()
            }
        };
        let age = self.age.flatten().unwrap_or(0);
        let left = lifetime.saturating_sub(age);
        (left > 0).then(|| Duration::from_secs(left).min(MAX_LIFETIME))
    }

    /// Whether the response's `Vary` names `Accept-Encoding`, so the cache key must hold
    /// the request's `Accept-Encoding`.
    pub fn varies_on_accept_encoding(&self) -> bool {
        self.vary_accept_encoding
    }

    /// Whether the field `name` was meant for the hop to fastpath only.
    fn hop_by_hop(&self, name: &str) -> bool {
        let named = self.connection[..self.connection_len]
            .iter()
            .chain(&self.connection_more)
            .copied();
        fastpath_http::HopByHop::new(named).contains(name)
    }

    /// The `Age` a kept copy counts from: the first `Age` field as relayed, 0 without one.
    pub(crate) fn relayed_age(&self) -> u64 {
        if self.hop_by_hop("age") {
            return 0;
        }
        self.age.flatten().unwrap_or(0)
    }

    /// The last `ETag` and `Last-Modified` fields as relayed.
    pub(crate) fn validators(&self) -> (Option<&'a [u8]>, Option<&'a [u8]>) {
        let relayed = |name, value: Option<&'a [u8]>| value.filter(|_| !self.hop_by_hop(name));
        (
            relayed("etag", self.etag),
            relayed("last-modified", self.last_modified),
        )
    }
}

/// The seconds an `Age` field value gives: its first member if that is a
/// valid delta-seconds, else `None`, in which case the field is ignored (RFC
/// 9111 §5.1). Huge values saturate.
pub(crate) fn age_value(value: &[u8]) -> Option<u64> {
    list(value).next().and_then(delta_seconds)
}

/// Whether the response's `Vary` names `Accept-Encoding`, so the cache key must
/// hold the request's `Accept-Encoding` (see [`super::cache_key`]).
pub fn vary_accept_encoding(response_headers: &[(&str, &[u8])]) -> bool {
    ResponseFields::read(response_headers.iter().copied()).varies_on_accept_encoding()
}

/// The `Cache-Control` directives that decide caching.
#[derive(Debug, Default)]
struct Directives {
    no_store: bool,
    no_cache: bool,
    private: bool,
    max_age: Option<u64>,
    s_maxage: Option<u64>,
}

impl Directives {
    /// Reads one `Cache-Control` field value; `None` when its freshness
    /// information is invalid, which makes the response uncacheable.
    fn read(&mut self, value: &[u8]) -> Option<()> {
        for element in list(value) {
            let (name, arg) = match element.iter().position(|&b| b == b'=') {
                Some(eq) => (trim(&element[..eq]), Some(trim(&element[eq + 1..]))),
                None => (element, None),
            };
            if name.eq_ignore_ascii_case(b"no-store") {
                self.no_store = true;
            } else if name.eq_ignore_ascii_case(b"no-cache") {
                self.no_cache = true;
            } else if name.eq_ignore_ascii_case(b"private") {
                self.private = true;
            } else if name.eq_ignore_ascii_case(b"max-age") {
                set_once(&mut self.max_age, arg)?;
            } else if name.eq_ignore_ascii_case(b"s-maxage") {
                set_once(&mut self.s_maxage, arg)?;
            }
        }
        Some(())
    }
}

/// Stores a delta-seconds argument; a missing or malformed one, or a second
/// one that disagrees with the first, is invalid (RFC 9111 §4.2.1).
fn set_once(slot: &mut Option<u64>, arg: Option<&[u8]>) -> Option<()> {
    let arg = arg?;
    // RFC 9111 §5.2 asks recipients to accept the quoted form too.
    let arg = match arg {
        [b'"', inner @ .., b'"'] => inner,
        _ => arg,
    };
    let seconds = delta_seconds(arg)?;
    match *slot {
        Some(old) if old != seconds => None,
        _ => {
            *slot = Some(seconds);
            Some(())
        }
    }
}

/// `1*DIGIT`, saturating rather than failing on huge values (RFC 9111 §1.2.2).
fn delta_seconds(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0u64, |n, &d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

/// The elements of a comma-separated list (RFC 9110 §5.6.1): commas inside
/// quoted strings do not split, whitespace around elements is dropped, empty
/// elements are skipped.
fn list(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = value;
    std::iter::from_fn(move || {
        while !rest.is_empty() {
            let mut quoted = false;
            let mut escaped = false;
            let mut end = rest.len();
            for (i, &b) in rest.iter().enumerate() {
                match b {
                    _ if escaped => escaped = false,
                    b'\\' if quoted => escaped = true,
                    b'"' => quoted = !quoted,
                    b',' if !quoted => {
                        end = i;
                        break;
                    }
                    _ => {}
                }
            }
            let element = trim(&rest[..end]);
            rest = rest.get(end + 1..).unwrap_or_default();
            if !element.is_empty() {
                return Some(element);
            }
        }
        None
    })
}

fn trim(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&b| b != b' ' && b != b'\t');
    let end = s.iter().rposition(|&b| b != b' ' && b != b'\t');
    match (start, end) {
        (Some(start), Some(end)) => &s[start..=end],
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Response fields, and the lifetime they should give.
    type Case = (&'static [(&'static str, &'static str)], Option<Duration>);
    type Fields = &'static [(&'static str, &'static [u8])];

    const DATE: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
    const DATE_PLUS_100: &str = "Sun, 06 Nov 1994 08:51:17 GMT";
    const DATE_MINUS_1: &str = "Sun, 06 Nov 1994 08:49:36 GMT";

    fn secs(n: u64) -> Option<Duration> {
        Some(Duration::from_secs(n))
    }

    /// A 200 response to a GET without Authorization, with these fields.
    fn lifetime(headers: &[(&str, &str)]) -> Option<Duration> {
        let headers: Vec<(&str, &[u8])> = headers.iter().map(|&(n, v)| (n, v.as_bytes())).collect();
        cache_lifetime("GET", false, 200, &headers)
    }

    #[test]
    fn cache_control_combinations() {
        let cases: &[Case] = &[
            (&[], None),
            (&[("Cache-Control", "public")], None),
            (&[("Cache-Control", "max-age=60")], secs(60)),
            (&[("Cache-Control", "public, max-age=60")], secs(60)),
            (&[("cache-control", "PUBLIC, MAX-AGE=60")], secs(60)),
            (&[("Cache-Control", "max-age=\"60\"")], secs(60)),
            (&[("Cache-Control", " max-age = 60 ")], secs(60)),
            (&[("Cache-Control", "s-maxage=30, max-age=60")], secs(30)),
            (&[("Cache-Control", "max-age=60, s-maxage=90")], secs(90)),
            (&[("Cache-Control", "s-maxage=0, max-age=60")], None),
            (&[("Cache-Control", "s-maxage=30")], secs(30)),
            (&[("Cache-Control", "max-age=0")], None),
            (&[("Cache-Control", "max-age=60, no-store")], None),
            (&[("Cache-Control", "max-age=60, private")], None),
            (
                &[("Cache-Control", "max-age=60, private=\"X-A, X-B\"")],
                None,
            ),
            (&[("Cache-Control", "max-age=60, no-cache")], None),
            (
                &[("Cache-Control", "max-age=60, no-cache=\"Set-Cookie\"")],
                None,
            ),
            (&[("Cache-Control", "NO-STORE, max-age=60")], None),
            (
                &[("Cache-Control", "max-age=60, must-revalidate, immutable")],
                secs(60),
            ),
            (
                &[("Cache-Control", "max-age=60, ext=\"a, no-store\"")],
                secs(60),
            ),
            (&[("Cache-Control", "max-age=60,,,")], secs(60)),
            // Invalid freshness information: treated as stale.
            (&[("Cache-Control", "max-age=soon")], None),
            (&[("Cache-Control", "max-age=")], None),
            (&[("Cache-Control", "max-age")], None),
            (&[("Cache-Control", "max-age=-1")], None),
            (&[("Cache-Control", "max-age=1.5")], None),
            (&[("Cache-Control", "max-age=60, max-age=30")], None),
            (&[("Cache-Control", "max-age=60, max-age=60")], secs(60)),
            // Repeated fields are one list.
            (
                &[
                    ("Cache-Control", "max-age=60"),
                    ("Cache-Control", "no-store"),
                ],
                None,
            ),
            (
                &[("Cache-Control", "public"), ("Cache-Control", "max-age=5")],
                secs(5),
            ),
            // Huge values are capped.
            (
                &[("Cache-Control", "max-age=99999999999999999999999")],
                Some(MAX_LIFETIME),
            ),
            (&[("Cache-Control", "max-age=31536001")], Some(MAX_LIFETIME)),
        ];
        for (headers, want) in cases {
            assert_eq!(lifetime(headers), *want, "{headers:?}");
        }
    }

    #[test]
    fn age_is_subtracted() {
        let cases: &[Case] = &[
            (&[("Cache-Control", "max-age=60"), ("Age", "10")], secs(50)),
            (&[("Cache-Control", "max-age=60"), ("age", "59")], secs(1)),
            (&[("Cache-Control", "max-age=60"), ("Age", "60")], None),
            (&[("Cache-Control", "max-age=60"), ("Age", "600")], None),
            (&[("Cache-Control", "max-age=60"), ("Age", "0")], secs(60)),
            // Invalid Age is ignored; a list uses its first member.
            (&[("Cache-Control", "max-age=60"), ("Age", "old")], secs(60)),
            (
                &[("Cache-Control", "max-age=60"), ("Age", "10, 20")],
                secs(50),
            ),
            (
                &[
                    ("Cache-Control", "max-age=60"),
                    ("Age", "10"),
                    ("Age", "30"),
                ],
                secs(50),
            ),
            (
                &[("Cache-Control", "s-maxage=60, max-age=5"), ("Age", "10")],
                secs(50),
            ),
        ];
        for (headers, want) in cases {
            assert_eq!(lifetime(headers), *want, "{headers:?}");
        }
    }

    #[test]
    fn age_values() {
        let cases: &[(&[u8], Option<u64>)] = &[
            (b"0", Some(0)),
            (b" 58 ", Some(58)),
            (b"10, 20", Some(10)),
            (b"99999999999999999999999", Some(u64::MAX)),
            (b"", None),
            (b"old", None),
            (b"-1", None),
            (b"1.5", None),
            (b", 5", Some(5)),
        ];
        for &(value, want) in cases {
            assert_eq!(
                age_value(value),
                want,
                "{:?}",
                String::from_utf8_lossy(value)
            );
        }
    }

    #[test]
    fn expires_and_date() {
        let cases: &[Case] = &[
            (&[("Expires", DATE_PLUS_100), ("Date", DATE)], secs(100)),
            (
                &[("expires", DATE_PLUS_100), ("DATE", DATE), ("Age", "40")],
                secs(60),
            ),
            (&[("Expires", DATE_PLUS_100)], None),
            (&[("Expires", DATE), ("Date", DATE)], None),
            (&[("Expires", DATE_MINUS_1), ("Date", DATE)], None),
            (&[("Expires", "0"), ("Date", DATE)], None),
            (&[("Expires", "-1"), ("Date", DATE)], None),
            (&[("Expires", DATE_PLUS_100), ("Date", "yesterday")], None),
            // Obsolete date formats are dates too.
            (
                &[
                    ("Expires", "Sunday, 06-Nov-94 08:51:17 GMT"),
                    ("Date", DATE),
                ],
                secs(100),
            ),
            // max-age overrides Expires, both ways.
            (
                &[
                    ("Cache-Control", "max-age=5"),
                    ("Expires", DATE_PLUS_100),
                    ("Date", DATE),
                ],
                secs(5),
            ),
            (
                &[
                    ("Cache-Control", "max-age=5"),
                    ("Expires", "0"),
                    ("Date", DATE),
                ],
                secs(5),
            ),
            (
                &[
                    ("Cache-Control", "public"),
                    ("Expires", DATE_PLUS_100),
                    ("Date", DATE),
                ],
                secs(100),
            ),
            (
                &[
                    ("Cache-Control", "no-cache"),
                    ("Expires", DATE_PLUS_100),
                    ("Date", DATE),
                ],
                None,
            ),
        ];
        for (headers, want) in cases {
            assert_eq!(lifetime(headers), *want, "{headers:?}");
        }
    }

    #[test]
    fn cookies_and_vary() {
        const CC: (&str, &str) = ("Cache-Control", "max-age=60");
        let cases: &[Case] = &[
            (&[CC, ("Set-Cookie", "a=b")], None),
            (&[CC, ("set-cookie", "")], None),
            (&[CC, ("Vary", "Accept-Encoding")], secs(60)),
            (
                &[CC, ("vary", "accept-encoding, ACCEPT-ENCODING")],
                secs(60),
            ),
            (&[CC, ("Vary", "")], secs(60)),
            (&[CC, ("Vary", "*")], None),
            (&[CC, ("Vary", "Accept-Encoding, *")], None),
            (&[CC, ("Vary", "Cookie")], None),
            (
                &[CC, ("Vary", "Accept-Encoding"), ("Vary", "User-Agent")],
                None,
            ),
            (&[CC, ("Vary", "Accept-Language")], None),
            (&[CC, ("Set-Cookie2", "a=b"), ("X-Other", "1")], secs(60)),
        ];
        for (headers, want) in cases {
            assert_eq!(lifetime(headers), *want, "{headers:?}");
        }
    }

    #[test]
    fn request_and_status() {
        let headers: &[(&str, &[u8])] = &[("Cache-Control", b"max-age=60")];
        let cases = [
            ("GET", false, 200, secs(60)),
            ("HEAD", false, 200, None),
            ("POST", false, 200, None),
            ("get", false, 200, None),
            ("GET", true, 200, None),
            ("GET", false, 203, secs(60)),
            ("GET", false, 204, secs(60)),
            ("GET", false, 301, secs(60)),
            ("GET", false, 308, secs(60)),
            ("GET", false, 404, secs(60)),
            ("GET", false, 410, secs(60)),
            ("GET", false, 206, None),
            ("GET", false, 302, None),
            ("GET", false, 304, None),
            ("GET", false, 307, None),
            ("GET", false, 500, None),
            ("GET", false, 503, None),
        ];
        for (method, auth, status, want) in cases {
            assert_eq!(
                cache_lifetime(method, auth, status, headers),
                want,
                "{method} auth={auth} {status}"
            );
        }
    }

    #[test]
    fn vary_detection() {
        let cases: &[(Fields, bool)] = &[
            (&[], false),
            (&[("Vary", b"Accept-Encoding")], true),
            (&[("VARY", b"cookie, accept-encoding")], true),
            (&[("Vary", b"Accept-Language")], false),
            (&[("X-Vary", b"Accept-Encoding")], false),
        ];
        for (headers, want) in cases {
            assert_eq!(vary_accept_encoding(headers), *want, "{headers:?}");
        }
    }

    #[test]
    fn list_splitting() {
        let cases: &[(&[u8], &[&[u8]])] = &[
            (b"", &[]),
            (b" , ,", &[]),
            (b"a,b", &[b"a", b"b"]),
            (b" a ,\tb\t", &[b"a", b"b"]),
            (b"a=\"x, y\", b", &[b"a=\"x, y\"", b"b"]),
            (b"a=\"x\\\", y\", b", &[b"a=\"x\\\", y\"", b"b"]),
            (b"a=\"open, b", &[b"a=\"open, b"]),
        ];
        for (value, want) in cases {
            let got: Vec<&[u8]> = list(value).collect();
            assert_eq!(&got, want, "{:?}", String::from_utf8_lossy(value));
        }
    }
}
