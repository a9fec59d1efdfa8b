//! Request-head parser (RFC 9112 §2-§7, RFC 9110 field rules).
//!
//! Line scanning, limits and field-line syntax are shared with the response
//! parser (see `head.rs` and `fields.rs`); this module holds what is
//! particular to requests: the request line and the field semantics (Host,
//! framing, Connection, Expect), checked once, when the blank line ends the
//! head.

use crate::error::RequestError;
use crate::fields::{fold_content_length, ConnectionOptions, FieldSpan, Fields};
use crate::head::{HeadScanner, ScanErrors, StartLine};
use crate::limits::Limits;
use crate::method::Method;
use crate::syntax::{is_tchar, is_token, list_elements, trim_ows};
use crate::target::is_valid_host;
use crate::version::Version;

/// How the request body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No Content-Length or Transfer-Encoding: no body.
    None,
    /// Content-Length: exactly this many bytes follow the head (may be 0).
    Length(u64),
    /// Transfer-Encoding ending in chunked: use [`crate::ChunkedDecoder`].
    Chunked,
}

/// Head-wide results computed once the head is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeadInfo {
    framing: BodyFraming,
    keep_alive: bool,
    expect_continue: bool,
    host: Option<(usize, usize)>,
    noted: NotedAt,
}

/// The fields the server acts on beyond framing and routing, each read by
/// [`Request::noted`] as its first value (OWS-trimmed). They are found in the one pass that
/// checks the head, so routing, the static path, the hand-over and the access log do not
/// scan the fields again; only the ones a reader asks for are made into slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Noted {
    /// `Referer`.
    Referer,
    /// `User-Agent`.
    UserAgent,
    /// `Accept-Encoding`.
    AcceptEncoding,
    /// `Authorization`.
    Authorization,
    /// `If-Match`.
    IfMatch,
    /// `If-None-Match`.
    IfNoneMatch,
    /// `If-Modified-Since`.
    IfModifiedSince,
    /// `If-Unmodified-Since`.
    IfUnmodifiedSince,
    /// `If-Range`.
    IfRange,
    /// `Range`.
    Range,
}

impl HeadInfo {
    /// What analysing an HTTP/2 request's head written with `Connection: close` and no
    /// `Expect` finds: the request's framing, `Host`'s value and the noted fields.
    pub(crate) fn parsed(framing: BodyFraming, host: (usize, usize), noted: NotedAt) -> Self {
        HeadInfo {
            framing,
            keep_alive: false,
            expect_continue: false,
            host: Some(host),
            noted,
        }
    }
}

impl Noted {
    /// The noted field `name` (in any case) names, if any.
    #[inline]
    pub(crate) fn of(name: &[u8]) -> Option<Noted> {
        Noted::named(name, |a, b| a.eq_ignore_ascii_case(b))
    }

    /// [`Noted::of`] for a name known to be lower case (an HTTP/2 one), compared as it is.
    #[inline]
    pub(crate) fn of_lowercase(name: &[u8]) -> Option<Noted> {
        Noted::named(name, |a, b| a == b)
    }

    /// The one table both look names up in, with `same` as the comparison.
    #[inline(always)]
    fn named(name: &[u8], same: impl Fn(&[u8], &[u8]) -> bool) -> Option<Noted> {
        // Dispatch on length first: most fields match none of these.
        let is = |known: &[u8]| same(name, known);
        match name.len() {
            5 if is(b"range") => Some(Noted::Range),
            7 if is(b"referer") => Some(Noted::Referer),
            8 if is(b"if-match") => Some(Noted::IfMatch),
            8 if is(b"if-range") => Some(Noted::IfRange),
            10 if is(b"user-agent") => Some(Noted::UserAgent),
            13 if is(b"authorization") => Some(Noted::Authorization),
            13 if is(b"if-none-match") => Some(Noted::IfNoneMatch),
            15 if is(b"accept-encoding") => Some(Noted::AcceptEncoding),
            17 if is(b"if-modified-since") => Some(Noted::IfModifiedSince),
            19 if is(b"if-unmodified-since") => Some(Noted::IfUnmodifiedSince),
            _ => None,
        }
    }

    /// Every noted field, in declaration order.
    pub const ALL: [Noted; 10] = [
        Noted::Referer,
        Noted::UserAgent,
        Noted::AcceptEncoding,
        Noted::Authorization,
        Noted::IfMatch,
        Noted::IfNoneMatch,
        Noted::IfModifiedSince,
        Noted::IfUnmodifiedSince,
        Noted::IfRange,
        Noted::Range,
    ];
}

/// Where each [`Noted`] field is among the head's fields: its index plus one, 0 when the
/// head has none (a head's fields number far fewer than `u32::MAX`: its size is limited).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NotedAt([u32; Noted::ALL.len()]);

impl NotedAt {
    /// Notes the field at `index` as `field`, unless an earlier one was.
    pub(crate) fn note(&mut self, field: Noted, index: usize) {
        let slot = &mut self.0[field as usize];
        if *slot == 0 {
            *slot = index as u32 + 1;
        }
    }
}

/// The parsed request line, as offsets into the buffer.
#[derive(Debug)]
pub(crate) struct RequestLine {
    method: (usize, usize),
    target: (usize, usize),
    version: Version,
}

/// Reusable, per-connection request-head parser.
///
/// Holds the scan position and a `Vec` of field offsets that is reused
/// across requests, so steady-state parsing allocates nothing.
#[derive(Debug)]
pub struct Parser {
    head: HeadScanner<RequestLine>,
}

/// A parsed request head, borrowing the caller's buffer and the parser.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// Method token, e.g. "GET". Case-sensitive per RFC 9110 §9.1.
    pub method: &'a str,
    /// The raw request-target as sent; see [`crate::parse_target`].
    pub target: &'a str,
    /// Protocol version.
    pub version: Version,
    /// Length of the head in the buffer, including any skipped leading empty
    /// lines and the final blank line; the body (if any) starts here.
    pub head_len: usize,
    /// How the body is delimited.
    pub framing: BodyFraming,
    /// Whether the connection may be reused after this exchange:
    /// HTTP/1.1 unless "Connection: close"; HTTP/1.0 only with
    /// "Connection: keep-alive" and without "close".
    pub keep_alive: bool,
    /// "Expect: 100-continue" was sent (ignored for HTTP/1.0, RFC 9110 §10.1.1).
    pub expect_continue: bool,
    /// Value of the single Host field, OWS-trimmed, if present.
    pub host: Option<&'a str>,
    /// The method as the server acts on it.
    pub kind: Method,
    /// Where the other fields the server acts on are, found while the head was checked
    /// (read by [`Request::noted`]).
    noted: NotedAt,
    buf: &'a [u8],
    fields: &'a [FieldSpan],
}

impl<'a> Request<'a> {
    /// The first value (OWS-trimmed) of a field the server acts on beyond framing and
    /// routing, found in the pass that checked the head.
    #[inline]
    pub fn noted(&self, field: Noted) -> Option<&'a [u8]> {
        match self.noted.0[field as usize] {
            0 => None,
            at => Some(self.fields[at as usize - 1].value_in(self.buf)),
        }
    }

    /// First value of the field `name` (ASCII case-insensitive), OWS-trimmed.
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.fields().header(name)
    }

    /// Every value of the field `name` in order, for list-valued fields sent
    /// as several lines.
    pub fn header_values<'n>(&self, name: &'n str) -> impl Iterator<Item = &'a [u8]> + 'n
    where
        'a: 'n,
    {
        self.fields().header_values(name)
    }

    /// All fields in order as (name as sent, OWS-trimmed value).
    pub fn headers(&self) -> impl Iterator<Item = (&'a str, &'a [u8])> + use<'a> {
        self.fields().headers()
    }

    /// Number of header fields.
    pub fn header_count(&self) -> usize {
        self.fields().header_count()
    }

    fn fields(&self) -> Fields<'a> {
        Fields::new(self.buf, self.fields)
    }
}

const fn bad(reason: &'static str) -> RequestError {
    RequestError::bad_request(reason)
}

impl Parser {
    /// Creates a parser enforcing `limits`.
    pub fn new(limits: Limits) -> Parser {
        let line = RequestLine {
            method: (0, 0),
            target: (0, 0),
            version: Version::Http11,
        };
        Parser {
            head: HeadScanner::new(limits, line),
        }
    }

    /// The limits this parser enforces.
    pub fn limits(&self) -> Limits {
        self.head.limits()
    }

    /// Forgets all scan state (keeping the field table's capacity). Call
    /// after consuming a request (head and body) from the buffer, or to
    /// parse an unrelated buffer.
    pub fn reset(&mut self) {
        self.head.reset();
    }

    /// Takes a head an HTTP/2 stream's fields were laid out as
    /// ([`crate::h2::RequestHead::finish_parsed`]), its bytes first in the buffer the next
    /// [`Parser::parse`] is given: that parse gives the request at once, as parsing the
    /// head's text would have.
    pub fn take_parsed(&mut self, head: &crate::h2::ParsedRequest) {
        let Some(info) = head.info else {
            return;
        };
        let line = RequestLine {
            method: (head.method.start, head.method.end),
            target: (head.target.start, head.target.end),
            version: Version::Http11,
        };
        self.head
            .set_complete(line, &head.fields, head.bytes().len(), info);
    }

    /// Looks for a complete request head at the start of `buf`.
    ///
    /// `Ok(None)` means more bytes are needed and no limit is exceeded yet.
    /// Scanning is incremental: calling again with a longer `buf` that starts
    /// with the same bytes resumes where the previous call stopped (passing a
    /// shorter buffer is treated as a new request). Once an error is
    /// returned, it is returned again until [`Parser::reset`].
    pub fn parse<'a>(&'a mut self, buf: &'a [u8]) -> Result<Option<Request<'a>>, RequestError> {
        let Some(info) = self.head.parse(buf)? else {
            return Ok(None);
        };
        let line = self.head.start_line();
        let method = checked_ascii(&buf[line.method.0..line.method.1]);
        Ok(Some(Request {
            method,
            kind: Method::of(method),
            noted: info.noted,
            target: checked_ascii(&buf[line.target.0..line.target.1]),
            version: line.version,
            head_len: self.head.head_len(),
            framing: info.framing,
            keep_alive: info.keep_alive,
            expect_continue: info.expect_continue,
            host: info.host.map(|(s, e)| checked_ascii(&buf[s..e])),
            buf,
            fields: self.head.fields(),
        }))
    }
}

impl StartLine for RequestLine {
    type Info = HeadInfo;

    const ERRORS: ScanErrors = ScanErrors {
        line_too_long: RequestError::new(414, "request line too long"),
        head_too_large: RequestError::new(431, "request head too large"),
        too_many_empty_lines: bad("too many empty lines before request"),
        too_many_fields: RequestError::new(431, "too many header fields"),
        bad_field_status: 400,
    };

    /// Rejects a request line whose method is already invalid (a TLS
    /// ClientHello, say) without waiting for a line end that never comes.
    /// A final CR may begin the line's CRLF and is left for the complete
    /// line to judge.
    fn check_partial(partial: &[u8]) -> Result<(), RequestError> {
        match partial.split_last() {
            Some((b'\r', rest)) if memchr::memchr(b' ', partial).is_none() => check_method(rest),
            _ => check_method(partial),
        }
    }

    fn check_start(line: &[u8]) -> Result<(), RequestError> {
        check_method(line)
    }

    /// request-line = method SP request-target SP HTTP-version
    fn parse(&mut self, line: &[u8], base: usize) -> Result<(), RequestError> {
        if memchr::memchr(b'\r', line).is_some() {
            return Err(bad("bare CR in request line"));
        }
        let Some(sp1) = memchr::memchr(b' ', line) else {
            return Err(bad("malformed request line"));
        };
        if !is_token(&line[..sp1]) {
            return Err(bad("invalid method"));
        }
        let rest = &line[sp1 + 1..];
        let Some(sp2) = memchr::memchr(b' ', rest) else {
            return Err(bad("malformed request line"));
        };
        let target = &rest[..sp2];
        if target.is_empty() {
            return Err(bad("empty request-target"));
        }
        if !target.iter().all(|&b| (0x21..=0x7e).contains(&b)) {
            return Err(bad("invalid byte in request-target"));
        }
        self.version = parse_version(&rest[sp2 + 1..])?;
        self.method = (base, base + sp1);
        let t = base + sp1 + 1;
        self.target = (t, t + sp2);
        Ok(())
    }

    /// Head-wide field semantics, run once on a complete head.
    fn analyze(&self, buf: &[u8], fields: &[FieldSpan]) -> Result<HeadInfo, RequestError> {
        let mut host = None;
        let mut host_count = 0usize;
        let mut content_length: Option<u64> = None;
        let mut te_seen = false;
        let mut te_chunked_last = false;
        let mut te_error: Option<RequestError> = None;
        let mut connection = ConnectionOptions::default();
        let mut expect_continue = false;
        let mut expect_other = false;
        let mut noted = NotedAt::default();

        for (index, f) in fields.iter().enumerate() {
            let name = f.name_in(buf);
            let value = f.value_in(buf);
            if let Some(which) = Noted::of(name) {
                noted.note(which, index);
                continue;
            }
            match name.len() {
                4 if name.eq_ignore_ascii_case(b"host") => {
                    host_count += 1;
                    if host_count > 1 {
                        return Err(bad("multiple Host fields"));
                    }
                    if !is_valid_host(value) {
                        return Err(bad("invalid Host"));
                    }
                    host = Some(f.value_span());
                }
                14 if name.eq_ignore_ascii_case(b"content-length") => {
                    content_length = Some(fold_content_length(value, content_length).map_err(bad)?);
                }
                17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                    te_seen = true;
                    for elem in list_elements(value) {
                        let coding = trim_ows(match memchr::memchr(b';', elem) {
                            Some(p) => &elem[..p],
                            None => elem,
                        });
                        if te_error.is_some() {
                            continue;
                        }
                        if te_chunked_last {
                            // Anything after chunked, including a second
                            // chunked, makes the framing ambiguous.
                            te_error = Some(bad("chunked is not the final coding"));
                        } else if coding.eq_ignore_ascii_case(b"chunked") {
                            te_chunked_last = true;
                        } else if !is_token(coding) {
                            te_error = Some(bad("invalid transfer-coding"));
                        } else if !is_known_coding(coding) {
                            te_error = Some(RequestError::new(501, "unknown transfer-coding"));
                        }
                    }
                }
                10 if name.eq_ignore_ascii_case(b"connection") => connection.add(value),
                6 if name.eq_ignore_ascii_case(b"expect") => {
                    for e in list_elements(value) {
                        if e.eq_ignore_ascii_case(b"100-continue") {
                            expect_continue = true;
                        } else {
                            expect_other = true;
                        }
                    }
                }
                _ => {}
            }
        }

        if self.version == Version::Http11 && host_count == 0 {
            return Err(bad("missing Host"));
        }
        let framing = if te_seen {
            if self.version == Version::Http10 {
                return Err(bad("Transfer-Encoding in HTTP/1.0"));
            }
            if content_length.is_some() {
                return Err(bad("both Transfer-Encoding and Content-Length"));
            }
            if let Some(e) = te_error {
                return Err(e);
            }
            if !te_chunked_last {
                return Err(bad("chunked is not the final coding"));
            }
            BodyFraming::Chunked
        } else {
            match content_length {
                Some(n) => BodyFraming::Length(n),
                None => BodyFraming::None,
            }
        };
        if expect_other {
            return Err(RequestError::new(417, "unsupported expectation"));
        }
        Ok(HeadInfo {
            framing,
            keep_alive: connection.persistent(self.version),
            expect_continue: expect_continue && self.version == Version::Http11,
            host,
            noted,
        })
    }
}

/// The method, target or Host of a head found whole: ASCII, as the checks that found it
/// make sure (a token; bytes 0x21 to 0x7e; `is_valid_host`), so it is not checked again.
#[inline]
fn checked_ascii(bytes: &[u8]) -> &str {
    debug_assert!(bytes.is_ascii());
    // SAFETY: ASCII is UTF-8; see above. Checking these three again cost about as much as
    // the rest of a parsed HTTP/2 request's hand-over to the HTTP/1 path.
    unsafe { std::str::from_utf8_unchecked(bytes) }
}

/// Transfer-codings we can at least frame (we never decode request bodies).
fn is_known_coding(c: &[u8]) -> bool {
    ["gzip", "x-gzip", "deflate", "compress", "x-compress"]
        .iter()
        .any(|k| c.eq_ignore_ascii_case(k.as_bytes()))
}

/// HTTP-version = "HTTP/" DIGIT "." DIGIT (case-sensitive).
fn parse_version(v: &[u8]) -> Result<Version, RequestError> {
    match v {
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            match (major, minor) {
                (b'1', b'0') => Ok(Version::Http10),
                (b'1', _) => Ok(Version::Http11),
                _ => Err(RequestError::new(505, "HTTP version not supported")),
            }
        }
        _ => Err(bad("malformed HTTP version")),
    }
}

/// Checks that every byte of a request line before its first space is a token character.
fn check_method(line: &[u8]) -> Result<(), RequestError> {
    let method_end = memchr::memchr(b' ', line).unwrap_or(line.len());
    if line[..method_end].iter().all(|&b| is_tchar(b)) {
        Ok(())
    } else {
        Err(bad("invalid method"))
    }
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
