//! Response header rules per route, in the manner of nginx's `add_header` and `expires`
//! (and `more_clear_headers` for removal): fields added, set or removed on the way out.
//!
//! Decisions, and why:
//! - Rules apply in the order configured, to the response's fields as a list of
//!   `(name, value)` pairs; names compare without regard to case.
//! - `add` appends a field, `set` replaces every field of the name with one (where the
//!   first of them was, else at the end), `remove` drops every field of the name.
//! - `add`, `set`, `cache_control` and `expires` apply, as nginx's `add_header` and
//!   `expires` do, to 200, 201, 204, 206, 301, 302, 303, 304, 307 and 308 only, unless
//!   given `always`: caching or security fields meant for content should not stick to an
//!   error page by accident. `remove` applies to every status, as `more_clear_headers`
//!   does: a field one wants gone (`X-Powered-By` from a backend, say) is unwanted on
//!   errors most of all.
//! - Names must be tokens and values visible text (tabs and spaces inside, no control
//!   bytes: never CR, LF or NUL), non-empty and without surrounding whitespace, which a
//!   parser would strip. nginx's empty value meaning "add nothing" is not kept: a rule
//!   that does nothing is an error here.
//! - Fields the server must own are refused when the rules are made, with the reason:
//!   framing (`Content-Length`, `Transfer-Encoding`, `Content-Range`), the connection's
//!   (`Connection`, `Keep-Alive`, `Proxy-Connection`, `Upgrade`, `TE`, `Trailer`, which
//!   HTTP/2 also forbids), `Content-Encoding` (the server picks the precompressed variant
//!   the body is), and `Date` and `Server`, which the server writes itself.
//! - `cache_control` checks its value's grammar (RFC 9111 §5.2: comma-separated
//!   directives, `token [= token / quoted-string]`), that `max-age`, `s-maxage`,
//!   `stale-while-revalidate` and `stale-if-error` have whole seconds and that directives
//!   without arguments get none; it then sets `Cache-Control`.
//! - `expires` supports nginx's forms but `modified` and `@time`: a duration
//!   (`Expires` = the response's date plus it, `Cache-Control: max-age=N`), a negative one
//!   (`Expires` in the past, `Cache-Control: no-cache`), `epoch`, `max` and `off`
//!   ([`Expires::parse`]). Both fields are set, replacing any. Durations are whole seconds
//!   and at most 2^31 - 1 of them, the most a cache is required to take (RFC 9111 §1.2.2).

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A response's fields, as the rules edit them: `(name, value)` in order.
pub type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// Whether rules without `always` apply to a response with `status` (nginx's list).
pub fn applies_by_default(status: u16) -> bool {
    matches!(
        status,
        200 | 201 | 204 | 206 | 301 | 302 | 303 | 304 | 307 | 308
    )
}

/// The longest duration `expires` takes, in seconds: 2^31 - 1.
pub const MAX_EXPIRES_SECS: u64 = (1 << 31) - 1;

/// What `expires` sets; see [`Expires::parse`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expires {
    /// `Expires` this long after the response's date, `Cache-Control: max-age=` as many
    /// seconds.
    After(Duration),
    /// `Expires` this long before the response's date, `Cache-Control: no-cache`.
    Before(Duration),
    /// `Expires: Thu, 01 Jan 1970 00:00:01 GMT`, `Cache-Control: no-cache`.
    Epoch,
    /// `Expires: Thu, 31 Dec 2037 23:55:55 GMT`, `Cache-Control: max-age=315360000` (ten
    /// years), nginx's values.
    Max,
}

const EPOCH_DATE: &[u8] = b"Thu, 01 Jan 1970 00:00:01 GMT";
const MAX_DATE: &[u8] = b"Thu, 31 Dec 2037 23:55:55 GMT";
const MAX_MAX_AGE: &[u8] = b"max-age=315360000";
/// 9999-12-31T23:59:59Z, the last time an HTTP-date can say.
const LAST_HTTP_DATE_SECS: u64 = 253_402_300_799;

impl Expires {
    /// Reads nginx's `expires` argument: `off` (`None`: no rule), `epoch`, `max`, or a
    /// duration, optionally negative: a number of seconds, or numbers with units in
    /// decreasing order, each at most once, spaces allowed between them (`30d`,
    /// `1h 30m`, `-1h`): `y` (365 days), `M` (30 days), `w`, `d`, `h`, `m`, `s`.
    pub fn parse(text: &str) -> Result<Option<Expires>, HeaderError> {
        match text {
            "off" => return Ok(None),
            "epoch" => return Ok(Some(Expires::Epoch)),
            "max" => return Ok(Some(Expires::Max)),
            _ => {}
        }
        let bad = |why: &'static str| HeaderError::BadDuration {
            text: text.to_owned(),
            why,
        };
        let (negative, rest) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        const UNITS: [(u8, u64); 7] = [
            (b'y', 365 * 86_400),
            (b'M', 30 * 86_400),
            (b'w', 7 * 86_400),
            (b'd', 86_400),
            (b'h', 3600),
            (b'm', 60),
            (b's', 1),
        ];
        let bytes = rest.as_bytes();
        let mut total: u64 = 0;
        // Index into UNITS of the next unit allowed: units go in decreasing order.
        let mut next_unit = 0;
        let mut i = 0;
        if bytes.is_empty() {
            return Err(bad("no duration given"));
        }
        while i < bytes.len() {
            let digits = bytes[i..].iter().take_while(|b| b.is_ascii_digit()).count();
            if digits == 0 {
                return Err(bad("expected a number"));
            }
            let number: u64 = rest[i..i + digits]
                .parse()
                .map_err(|_| bad("number too large"))?;
            i += digits;
            let scale = match bytes.get(i) {
                None => {
                    // A bare number is seconds, and only alone or last.
                    if next_unit == UNITS.len() {
                        return Err(bad("units must decrease, each at most once"));
                    }
                    1
                }
                Some(&unit) => {
                    if rest[i..].starts_with("ms") {
                        return Err(bad("milliseconds are not supported: whole seconds only"));
                    }
                    let Some(at) = UNITS.iter().position(|&(u, _)| u == unit) else {
                        return Err(bad("unknown unit (y, M, w, d, h, m, s)"));
                    };
                    if at < next_unit {
                        return Err(bad("units must decrease, each at most once"));
                    }
                    next_unit = at + 1;
                    i += 1;
                    let spaces = bytes[i..].iter().take_while(|&&b| b == b' ').count();
                    i += spaces;
                    if spaces > 0 && i == bytes.len() {
                        return Err(bad("expected a number"));
                    }
                    UNITS[at].1
                }
            };
            total = number
                .checked_mul(scale)
                .and_then(|n| total.checked_add(n))
                .filter(|&n| n <= MAX_EXPIRES_SECS)
                .ok_or_else(|| bad("longer than 2147483647 seconds"))?;
        }
        let duration = Duration::from_secs(total);
        Ok(Some(if negative && total > 0 {
            Expires::Before(duration)
        } else {
            Expires::After(duration)
        }))
    }

    /// The `Expires` and `Cache-Control` values for a response dated `now`.
    fn values(&self, now: SystemTime) -> (Vec<u8>, Vec<u8>) {
        match *self {
            Expires::After(d) => (
                http_date(now.checked_add(d)),
                format!("max-age={}", d.as_secs()).into_bytes(),
            ),
            Expires::Before(d) => (http_date(now.checked_sub(d)), b"no-cache".to_vec()),
            Expires::Epoch => (EPOCH_DATE.to_vec(), b"no-cache".to_vec()),
            Expires::Max => (MAX_DATE.to_vec(), MAX_MAX_AGE.to_vec()),
        }
    }
}

/// An HTTP-date, clamped to the range one can say (1970 to 9999): a clock so far off
/// must not bring a response down.
fn http_date(time: Option<SystemTime>) -> Vec<u8> {
    let last = UNIX_EPOCH + Duration::from_secs(LAST_HTTP_DATE_SECS);
    let time = time.unwrap_or(UNIX_EPOCH).clamp(UNIX_EPOCH, last);
    httpdate::fmt_http_date(time).into_bytes()
}

/// Why a rule could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// The name is not a token (RFC 9110 §5.1).
    BadName(String),
    /// The field is the server's to write.
    ServerOwned {
        /// The name as given.
        name: String,
        /// Why the server owns it.
        why: &'static str,
    },
    /// An empty value.
    EmptyValue {
        /// The field's name.
        name: String,
    },
    /// A byte a field value cannot hold (a control byte: CR, LF, NUL, ...).
    BadValueByte {
        /// The field's name.
        name: String,
        /// The byte.
        byte: u8,
        /// Its offset in the value.
        at: usize,
    },
    /// Spaces or tabs at the start or end of a value.
    SurroundingWhitespace {
        /// The field's name.
        name: String,
    },
    /// A `Cache-Control` value that is not one.
    BadCacheControl {
        /// The value.
        value: String,
        /// What is wrong.
        why: String,
    },
    /// An `expires` argument that is not one.
    BadDuration {
        /// The text.
        text: String,
        /// What is wrong.
        why: &'static str,
    },
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderError::BadName(name) => write!(
                f,
                "`{name}` is not a field name (letters, digits and !#$%&'*+-.^_`|~ only)"
            ),
            HeaderError::ServerOwned { name, why } => {
                write!(f, "{name} cannot be configured: {why}")
            }
            HeaderError::EmptyValue { name } => write!(
                f,
                "{name} has an empty value (to drop the field, remove it)"
            ),
            HeaderError::BadValueByte { name, byte, at } => write!(
                f,
                "{name}: byte {byte:#04x} at offset {at} of the value is a control character"
            ),
            HeaderError::SurroundingWhitespace { name } => write!(
                f,
                "{name}: the value starts or ends with whitespace, which recipients strip"
            ),
            HeaderError::BadCacheControl { value, why } => {
                write!(f, "Cache-Control `{value}`: {why}")
            }
            HeaderError::BadDuration { text, why } => {
                write!(f, "expires `{text}`: {why}")
            }
        }
    }
}

impl std::error::Error for HeaderError {}

/// The fields the server writes or that frame the message, and why.
const SERVER_OWNED: [(&str, &str); 12] = [
    (
        "content-length",
        "it frames the body, which the server measures",
    ),
    (
        "transfer-encoding",
        "it frames the body, which the server encodes",
    ),
    ("content-range", "range responses are made by the server"),
    (
        "content-encoding",
        "the server says which coding the body it picked has",
    ),
    ("connection", "the connection is the server's to manage"),
    ("keep-alive", "the connection is the server's to manage"),
    (
        "proxy-connection",
        "the connection is the server's to manage",
    ),
    ("upgrade", "the connection is the server's to manage"),
    ("te", "the connection is the server's to manage"),
    ("trailer", "it announces trailers, which the server frames"),
    ("date", "the server writes it from its clock"),
    ("server", "the server writes it"),
];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Add(Vec<u8>, Vec<u8>),
    Set(Vec<u8>, Vec<u8>),
    Remove(Vec<u8>),
    Expires(Expires),
}

/// A route's header rules, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderRules {
    rules: Vec<(Op, bool)>,
}

impl HeaderRules {
    /// No rules.
    pub fn new() -> Self {
        HeaderRules::default()
    }

    /// Whether there are no rules (the server can skip the call).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Appends a field `name: value` (nginx's `add_header`); with `always`, on every
    /// status.
    pub fn add(&mut self, name: &str, value: &str, always: bool) -> Result<(), HeaderError> {
        check_name(name)?;
        check_value(name, value)?;
        self.rules
            .push((Op::Add(name.into(), value.into()), always));
        Ok(())
    }

    /// Replaces every field `name` with one `name: value`; with `always`, on every status.
    pub fn set(&mut self, name: &str, value: &str, always: bool) -> Result<(), HeaderError> {
        check_name(name)?;
        check_value(name, value)?;
        self.rules
            .push((Op::Set(name.into(), value.into()), always));
        Ok(())
    }

    /// Removes every field `name`, whatever the status.
    pub fn remove(&mut self, name: &str) -> Result<(), HeaderError> {
        check_name(name)?;
        self.rules.push((Op::Remove(name.into()), true));
        Ok(())
    }

    /// Sets `Cache-Control` to `value` once checked (see the module's documentation);
    /// with `always`, on every status.
    pub fn cache_control(&mut self, value: &str, always: bool) -> Result<(), HeaderError> {
        check_value("Cache-Control", value)?;
        check_cache_control(value).map_err(|why| HeaderError::BadCacheControl {
            value: value.to_owned(),
            why,
        })?;
        self.rules
            .push((Op::Set(b"Cache-Control".to_vec(), value.into()), always));
        Ok(())
    }

    /// Sets `Expires` and `Cache-Control` as `expires` says; with `always`, on every
    /// status.
    pub fn expires(&mut self, expires: Expires, always: bool) {
        self.rules.push((Op::Expires(expires), always));
    }

    /// Applies the rules to the fields of a response with `status`, dated `now` (the
    /// time its `Date` field says, so that `Expires` agrees with it).
    pub fn apply(&self, fields: &mut Fields, status: u16, now: SystemTime) {
        let by_default = applies_by_default(status);
        for (op, always) in &self.rules {
            if !(*always || by_default) {
                continue;
            }
            match op {
                Op::Add(name, value) => fields.push((name.clone(), value.clone())),
                Op::Set(name, value) => set(fields, name, value.clone()),
                Op::Remove(name) => fields.retain(|(n, _)| !n.eq_ignore_ascii_case(name)),
                Op::Expires(expires) => {
                    let (date, cache_control) = expires.values(now);
                    set(fields, b"Expires", date);
                    set(fields, b"Cache-Control", cache_control);
                }
            }
        }
    }
}

/// Replaces every field `name` by one with `value`, where the first was, else at the end.
fn set(fields: &mut Fields, name: &[u8], value: Vec<u8>) {
    match fields
        .iter()
        .position(|(n, _)| n.eq_ignore_ascii_case(name))
    {
        Some(first) => {
            fields[first].1 = value;
            let mut index = 0;
            fields.retain(|(n, _)| {
                index += 1;
                index - 1 == first || !n.eq_ignore_ascii_case(name)
            });
        }
        None => fields.push((name.to_vec(), value)),
    }
}

/// RFC 9110's `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn check_name(name: &str) -> Result<(), HeaderError> {
    if name.is_empty() || !name.bytes().all(is_tchar) {
        return Err(HeaderError::BadName(name.to_owned()));
    }
    if let Some((_, why)) = SERVER_OWNED
        .iter()
        .find(|(owned, _)| owned.eq_ignore_ascii_case(name))
    {
        return Err(HeaderError::ServerOwned {
            name: name.to_owned(),
            why,
        });
    }
    Ok(())
}

fn check_value(name: &str, value: &str) -> Result<(), HeaderError> {
    if value.is_empty() {
        return Err(HeaderError::EmptyValue {
            name: name.to_owned(),
        });
    }
    // RFC 9110 §5.5: visible characters, spaces and tabs inside, and bytes of non-ASCII
    // text (obs-text); every other control byte, DEL included, is refused.
    if let Some((at, byte)) = value
        .bytes()
        .enumerate()
        .find(|&(_, b)| (b < 0x20 && b != b'\t') || b == 0x7f)
    {
        return Err(HeaderError::BadValueByte {
            name: name.to_owned(),
            byte,
            at,
        });
    }
    let ws = |b: u8| b == b' ' || b == b'\t';
    let bytes = value.as_bytes();
    if ws(bytes[0]) || ws(bytes[bytes.len() - 1]) {
        return Err(HeaderError::SurroundingWhitespace {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// Cache directives whose argument is a number of seconds.
const SECONDS_DIRECTIVES: [&str; 4] = [
    "max-age",
    "s-maxage",
    "stale-while-revalidate",
    "stale-if-error",
];

/// Cache directives of responses that take no argument.
const BARE_DIRECTIVES: [&str; 7] = [
    "must-revalidate",
    "proxy-revalidate",
    "no-store",
    "no-transform",
    "public",
    "must-understand",
    "immutable",
];

/// Checks a `Cache-Control` value (RFC 9111 §5.2; `cache-directive = token [ "=" ( token
/// / quoted-string ) ]`, comma-separated).
fn check_cache_control(value: &str) -> Result<(), String> {
    let bytes = value.as_bytes();
    let mut i = 0;
    loop {
        while matches!(bytes.get(i), Some(b' ' | b'\t')) {
            i += 1;
        }
        let start = i;
        while bytes.get(i).is_some_and(|&b| is_tchar(b)) {
            i += 1;
        }
        let name = &value[start..i];
        if name.is_empty() {
            return Err(format!("expected a directive at offset {start}"));
        }
        let lower = name.to_ascii_lowercase();
        if bytes.get(i) == Some(&b'=') {
            i += 1;
            let arg_start = i;
            let argument = if bytes.get(i) == Some(&b'"') {
                i += 1;
                loop {
                    match bytes.get(i) {
                        None => {
                            return Err(format!("unclosed quoted string at offset {arg_start}"))
                        }
                        Some(b'"') => break,
                        Some(b'\\') if i + 1 < bytes.len() => i += 2,
                        Some(_) => i += 1,
                    }
                }
                i += 1;
                None
            } else {
                while bytes.get(i).is_some_and(|&b| is_tchar(b)) {
                    i += 1;
                }
                if i == arg_start {
                    return Err(format!("{name} has `=` but no argument"));
                }
                Some(&value[arg_start..i])
            };
            if SECONDS_DIRECTIVES.contains(&lower.as_str())
                && !argument.is_some_and(|a| a.bytes().all(|b| b.is_ascii_digit()))
            {
                return Err(format!("{name} takes a number of seconds, unquoted"));
            }
            if BARE_DIRECTIVES.contains(&lower.as_str()) {
                return Err(format!("{name} takes no argument"));
            }
        } else if SECONDS_DIRECTIVES.contains(&lower.as_str()) {
            return Err(format!("{name} needs a number of seconds (`{name}=N`)"));
        }
        while matches!(bytes.get(i), Some(b' ' | b'\t')) {
            i += 1;
        }
        match bytes.get(i) {
            None => return Ok(()),
            Some(b',') => i += 1,
            Some(_) => return Err(format!("unexpected character at offset {i}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sun, 06 Nov 1994 08:49:37 GMT, RFC 9110's example date.
    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(784_111_777)
    }

    fn fields(list: &[(&str, &str)]) -> Fields {
        list.iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    fn applied(rules: &HeaderRules, start: &[(&str, &str)], status: u16) -> Fields {
        let mut f = fields(start);
        rules.apply(&mut f, status, now());
        f
    }

    #[test]
    fn add_appends() {
        let mut rules = HeaderRules::new();
        rules.add("X-Frame-Options", "DENY", false).unwrap();
        rules.add("Link", "</a.css>; rel=preload", false).unwrap();
        rules.add("Link", "</b.js>; rel=preload", false).unwrap();
        assert_eq!(
            applied(&rules, &[("Link", "</x>"), ("ETag", "\"1\"")], 200),
            fields(&[
                ("Link", "</x>"),
                ("ETag", "\"1\""),
                ("X-Frame-Options", "DENY"),
                ("Link", "</a.css>; rel=preload"),
                ("Link", "</b.js>; rel=preload"),
            ])
        );
    }

    #[test]
    fn set_replaces_every_field_of_the_name() {
        let mut rules = HeaderRules::new();
        rules.set("vary", "Accept-Encoding, Accept", false).unwrap();
        rules.set("X-New", "1", false).unwrap();
        assert_eq!(
            applied(
                &rules,
                &[
                    ("Content-Type", "text/html"),
                    ("Vary", "Accept-Encoding"),
                    ("ETag", "\"1\""),
                    ("VARY", "Origin"),
                ],
                200
            ),
            fields(&[
                ("Content-Type", "text/html"),
                ("Vary", "Accept-Encoding, Accept"),
                ("ETag", "\"1\""),
                ("X-New", "1"),
            ])
        );
    }

    #[test]
    fn remove_drops_every_field_of_the_name_on_every_status() {
        let mut rules = HeaderRules::new();
        rules.remove("x-powered-by").unwrap();
        let start = [
            ("X-Powered-By", "PHP"),
            ("Content-Type", "text/html"),
            ("x-powered-by", "Zend"),
        ];
        for status in [200, 404, 500, 502] {
            assert_eq!(
                applied(&rules, &start, status),
                fields(&[("Content-Type", "text/html")]),
                "{status}"
            );
        }
    }

    #[test]
    fn statuses_and_always() {
        let mut rules = HeaderRules::new();
        rules.add("X-Content", "yes", false).unwrap();
        rules.add("X-Always", "yes", true).unwrap();
        for status in [200, 201, 204, 206, 301, 302, 303, 304, 307, 308] {
            assert_eq!(
                applied(&rules, &[], status),
                fields(&[("X-Content", "yes"), ("X-Always", "yes")]),
                "{status}"
            );
        }
        for status in [100, 202, 203, 300, 305, 400, 403, 404, 416, 500, 503] {
            assert_eq!(
                applied(&rules, &[], status),
                fields(&[("X-Always", "yes")]),
                "{status}"
            );
        }
    }

    #[test]
    fn rules_apply_in_order() {
        let mut rules = HeaderRules::new();
        rules.add("X-A", "1", false).unwrap();
        rules.remove("X-A").unwrap();
        rules.add("X-A", "2", false).unwrap();
        assert_eq!(applied(&rules, &[], 200), fields(&[("X-A", "2")]));
    }

    #[test]
    fn cache_control_is_checked_then_set() {
        let mut rules = HeaderRules::new();
        rules
            .cache_control("public, max-age=3600, stale-if-error=60", false)
            .unwrap();
        assert_eq!(
            applied(&rules, &[("Cache-Control", "no-cache")], 200),
            fields(&[("Cache-Control", "public, max-age=3600, stale-if-error=60")])
        );
        assert_eq!(
            applied(&rules, &[("Cache-Control", "no-cache")], 404),
            fields(&[("Cache-Control", "no-cache")])
        );
        for good in [
            "no-store",
            "private, no-cache=\"Set-Cookie, X-Token\"",
            "Max-Age=0,must-revalidate",
            "immutable, max-age=31536000",
            "x-extension=\"a \\\" b\", other=token",
        ] {
            assert_eq!(check_cache_control(good), Ok(()), "{good}");
        }
        let err = |value: &str| {
            let Err(HeaderError::BadCacheControl { why, .. }) =
                HeaderRules::new().cache_control(value, false)
            else {
                panic!("{value} accepted");
            };
            why
        };
        assert_eq!(
            err("max-age"),
            "max-age needs a number of seconds (`max-age=N`)"
        );
        assert_eq!(
            err("max-age=1h"),
            "max-age takes a number of seconds, unquoted"
        );
        assert_eq!(
            err("max-age=\"60\""),
            "max-age takes a number of seconds, unquoted"
        );
        assert_eq!(err("no-store=1"), "no-store takes no argument");
        assert_eq!(err("public,,max-age=1"), "expected a directive at offset 7");
        assert_eq!(err("public;"), "unexpected character at offset 6");
        assert_eq!(err("private=\"a"), "unclosed quoted string at offset 8");
        assert_eq!(err("s-maxage="), "s-maxage has `=` but no argument");
        assert_eq!(
            HeaderRules::new().cache_control("max-age=1\r\n", false),
            Err(HeaderError::BadValueByte {
                name: "Cache-Control".into(),
                byte: b'\r',
                at: 9
            })
        );
    }

    #[test]
    fn expires_after_before_epoch_max() {
        let run = |expires: Expires, status: u16| {
            let mut rules = HeaderRules::new();
            rules.expires(expires, false);
            applied(
                &rules,
                &[
                    ("Cache-Control", "private"),
                    ("Expires", "0"),
                    ("Cache-Control", "x"),
                ],
                status,
            )
        };
        assert_eq!(
            run(Expires::After(Duration::from_secs(3600)), 200),
            fields(&[
                ("Cache-Control", "max-age=3600"),
                ("Expires", "Sun, 06 Nov 1994 09:49:37 GMT"),
            ])
        );
        assert_eq!(
            run(Expires::After(Duration::ZERO), 304),
            fields(&[
                ("Cache-Control", "max-age=0"),
                ("Expires", "Sun, 06 Nov 1994 08:49:37 GMT"),
            ])
        );
        assert_eq!(
            run(Expires::Before(Duration::from_secs(86_400)), 200),
            fields(&[
                ("Cache-Control", "no-cache"),
                ("Expires", "Sat, 05 Nov 1994 08:49:37 GMT"),
            ])
        );
        assert_eq!(
            run(Expires::Epoch, 200),
            fields(&[
                ("Cache-Control", "no-cache"),
                ("Expires", "Thu, 01 Jan 1970 00:00:01 GMT"),
            ])
        );
        assert_eq!(
            run(Expires::Max, 200),
            fields(&[
                ("Cache-Control", "max-age=315360000"),
                ("Expires", "Thu, 31 Dec 2037 23:55:55 GMT"),
            ])
        );
        // Not on an error without `always`.
        assert_eq!(
            run(Expires::Max, 404),
            fields(&[
                ("Cache-Control", "private"),
                ("Expires", "0"),
                ("Cache-Control", "x")
            ])
        );
        let mut always = HeaderRules::new();
        always.expires(Expires::Epoch, true);
        assert_eq!(
            applied(&always, &[], 500),
            fields(&[
                ("Expires", "Thu, 01 Jan 1970 00:00:01 GMT"),
                ("Cache-Control", "no-cache"),
            ])
        );
    }

    #[test]
    fn expires_dates_stay_sayable() {
        let before = Expires::Before(Duration::from_secs(MAX_EXPIRES_SECS));
        assert_eq!(
            before.values(UNIX_EPOCH + Duration::from_secs(10)).0,
            b"Thu, 01 Jan 1970 00:00:00 GMT".to_vec()
        );
        let after = Expires::After(Duration::from_secs(MAX_EXPIRES_SECS));
        let far = UNIX_EPOCH + Duration::from_secs(LAST_HTTP_DATE_SECS);
        assert_eq!(
            after.values(far).0,
            b"Fri, 31 Dec 9999 23:59:59 GMT".to_vec()
        );
    }

    #[test]
    fn expires_parses_nginx_forms() {
        let secs = |s: u64| Ok(Some(Expires::After(Duration::from_secs(s))));
        assert_eq!(Expires::parse("off"), Ok(None));
        assert_eq!(Expires::parse("epoch"), Ok(Some(Expires::Epoch)));
        assert_eq!(Expires::parse("max"), Ok(Some(Expires::Max)));
        assert_eq!(Expires::parse("0"), secs(0));
        assert_eq!(Expires::parse("-0"), secs(0));
        assert_eq!(Expires::parse("90"), secs(90));
        assert_eq!(Expires::parse("30d"), secs(30 * 86_400));
        assert_eq!(Expires::parse("1h 30m"), secs(5400));
        assert_eq!(Expires::parse("1h30m15"), secs(5415));
        assert_eq!(
            Expires::parse("1y 1M 1w 1d 1h 1m 1s"),
            secs(365 * 86_400 + 30 * 86_400 + 7 * 86_400 + 86_400 + 3600 + 61)
        );
        assert_eq!(
            Expires::parse("-1h"),
            Ok(Some(Expires::Before(Duration::from_secs(3600))))
        );
        assert_eq!(Expires::parse("2147483647s"), secs(MAX_EXPIRES_SECS));
        let why = |text: &str| match Expires::parse(text) {
            Err(HeaderError::BadDuration { why, .. }) => why,
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(why(""), "no duration given");
        assert_eq!(why("-"), "no duration given");
        assert_eq!(why("h"), "expected a number");
        assert_eq!(why("1x"), "unknown unit (y, M, w, d, h, m, s)");
        assert_eq!(
            why("1ms"),
            "milliseconds are not supported: whole seconds only"
        );
        assert_eq!(why("30m 1h"), "units must decrease, each at most once");
        assert_eq!(why("1h 1h"), "units must decrease, each at most once");
        assert_eq!(why("1s 5"), "units must decrease, each at most once");
        assert_eq!(why("2147483648"), "longer than 2147483647 seconds");
        assert_eq!(why("69y"), "longer than 2147483647 seconds");
        assert_eq!(why("99999999999999999999"), "number too large");
        assert_eq!(why("1h "), "expected a number");
        assert_eq!(why("Off"), "expected a number");
        assert_eq!(
            Expires::parse("30m 1h").unwrap_err().to_string(),
            "expires `30m 1h`: units must decrease, each at most once"
        );
    }

    #[test]
    fn names_and_values_are_checked() {
        let mut rules = HeaderRules::new();
        assert_eq!(
            rules.add("X Bad", "1", false),
            Err(HeaderError::BadName("X Bad".into()))
        );
        assert_eq!(
            rules.add("X-Bad:", "1", false),
            Err(HeaderError::BadName("X-Bad:".into()))
        );
        assert_eq!(
            rules.set("", "1", false),
            Err(HeaderError::BadName("".into()))
        );
        assert_eq!(
            rules.remove("a\nb"),
            Err(HeaderError::BadName("a\nb".into()))
        );
        assert_eq!(
            rules.add("X-A", "", false),
            Err(HeaderError::EmptyValue { name: "X-A".into() })
        );
        for (value, byte, at) in [("a\r\nB: c", b'\r', 1), ("a\nb", b'\n', 1), ("a\0", 0, 1)] {
            assert_eq!(
                rules.add("X-A", value, true),
                Err(HeaderError::BadValueByte {
                    name: "X-A".into(),
                    byte,
                    at
                })
            );
        }
        assert_eq!(
            rules.set("X-A", "a\x7f", true),
            Err(HeaderError::BadValueByte {
                name: "X-A".into(),
                byte: 0x7f,
                at: 1
            })
        );
        assert_eq!(
            rules.add("X-A", " a", false),
            Err(HeaderError::SurroundingWhitespace { name: "X-A".into() })
        );
        assert_eq!(
            rules.add("X-A", "a\t", false),
            Err(HeaderError::SurroundingWhitespace { name: "X-A".into() })
        );
        // Tabs and spaces inside, and text that is not ASCII, are field content.
        rules.add("X-A", "a\tb c é", false).unwrap();
        assert_eq!(
            applied(&rules, &[], 200),
            vec![(b"X-A".to_vec(), "a\tb c é".as_bytes().to_vec())]
        );
        assert_eq!(
            HeaderError::BadValueByte {
                name: "X-A".into(),
                byte: b'\n',
                at: 3
            }
            .to_string(),
            "X-A: byte 0x0a at offset 3 of the value is a control character"
        );
    }

    #[test]
    fn server_owned_fields_are_refused() {
        let mut rules = HeaderRules::new();
        for name in [
            "Content-Length",
            "transfer-encoding",
            "Content-Range",
            "Content-Encoding",
            "Connection",
            "Keep-Alive",
            "Proxy-Connection",
            "Upgrade",
            "TE",
            "Trailer",
            "DATE",
            "Server",
        ] {
            assert!(
                matches!(
                    rules.add(name, "x", true),
                    Err(HeaderError::ServerOwned { .. })
                ),
                "{name}"
            );
            assert!(matches!(
                rules.set(name, "x", true),
                Err(HeaderError::ServerOwned { .. })
            ));
            assert!(matches!(
                rules.remove(name),
                Err(HeaderError::ServerOwned { .. })
            ));
        }
        assert!(rules.is_empty());
        assert_eq!(
            rules
                .set("Content-Length", "0", false)
                .unwrap_err()
                .to_string(),
            "Content-Length cannot be configured: it frames the body, which the server measures"
        );
        // What only looks like one is fine.
        rules.add("Content-Length-Hint", "1", false).unwrap();
        rules.set("Content-Type", "text/plain", false).unwrap();
        assert!(!rules.is_empty());
    }
}
