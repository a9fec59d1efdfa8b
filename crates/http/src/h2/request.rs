//! An HTTP/2 request's header block, checked against RFC 9113 §8 and written as the
//! HTTP/1.1 head the rest of fastpath reads: routing, hand-over, the caches and the access
//! log take a [`crate::Request`] parsed from it, so that a stream is served by the same code
//! as an HTTP/1 request, and a proxied one goes to an HTTP/1.1 backend as it is.
//!
//! The fields arrive one at a time, as the HPACK decoder emits them; [`RequestHead`] checks
//! each (lower-case names, no connection-specific fields, pseudo-header fields once and
//! before the others) and [`RequestHead::finish`] the whole (the pseudo-header fields a
//! request needs, `:authority` against `Host`, `content-length` against `END_STREAM`).
//! Anything else is a malformed request: a stream error (RFC 9113 §8.1.1), not the
//! connection's.
//!
//! ```
//! use fastpath_http::h2::{RequestBody, RequestHead};
//!
//! let mut head = RequestHead::default();
//! for (name, value) in [
//!     (&b":method"[..], &b"GET"[..]),
//!     (b":scheme", b"https"),
//!     (b":authority", b"example.com"),
//!     (b":path", b"/index.html"),
//!     (b"accept", b"*/*"),
//! ] {
//!     head.field(name, value).unwrap();
//! }
//! let mut http1 = Vec::new();
//! let framing = head.finish(true, &mut http1).unwrap();
//! assert_eq!(framing, RequestBody::None);
//! assert_eq!(
//!     http1,
//!     b"GET /index.html HTTP/1.1\r\nHost: example.com\r\naccept: */*\r\n\r\n"
//! );
//! ```

use std::fmt;
use std::ops::Range;

use crate::fields::FieldSpan;
use crate::limits::Limits;
use crate::request::{BodyFraming, HeadInfo, Noted, NotedAt};
use crate::syntax::{is_field_value_byte, is_tchar, trim_ows};
use crate::target::is_valid_host;

/// Why a request's header block is malformed (RFC 9113 §8.1.1): the stream is reset with
/// PROTOCOL_ERROR, or answered 400 where the head was whole enough to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MalformedRequest {
    /// A field name with an upper-case letter (§8.2.1).
    UppercaseName,
    /// A field name that is empty or has a character a token may not (§8.2.1).
    BadName,
    /// A value with NUL, CR or LF, or starting or ending with a space or tab (§8.2.1).
    BadValue,
    /// A connection-specific field (`connection`, `keep-alive`, `proxy-connection`,
    /// `transfer-encoding`, `upgrade`) or a `te` other than `trailers` (§8.2.2).
    ConnectionSpecific(&'static str),
    /// A pseudo-header field that requests do not have (§8.3).
    UnknownPseudoHeader,
    /// A pseudo-header field after a regular one (§8.3).
    PseudoHeaderAfterField,
    /// A pseudo-header field twice (§8.3.1).
    RepeatedPseudoHeader(&'static str),
    /// A pseudo-header field the request needs is missing (§8.3.1); `:authority` stands
    /// for both it and `host`, one of which a request needs.
    Missing(&'static str),
    /// `:path` that is neither origin-form nor `*` for OPTIONS (§8.3.1).
    BadPath,
    /// `:authority` or `host` that is no host (with a port), `:authority` with userinfo,
    /// or a `host` naming another authority than `:authority` (§8.3.1).
    BadAuthority,
    /// A `content-length` that is not a number, disagrees with another, or disagrees with
    /// a request that ends with its header block (§8.1.1).
    BadContentLength,
    /// CONNECT, which fastpath does not carry over HTTP/2 (§8.5).
    Connect,
}

impl fmt::Display for MalformedRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MalformedRequest::UppercaseName => f.write_str("a field name has an upper-case letter"),
            MalformedRequest::BadName => f.write_str("a field name is empty or not a token"),
            MalformedRequest::BadValue => {
                f.write_str("a field value has NUL, CR or LF, or starts or ends with white space")
            }
            MalformedRequest::ConnectionSpecific(name) => {
                write!(f, "the connection-specific field `{name}`")
            }
            MalformedRequest::UnknownPseudoHeader => {
                f.write_str("a pseudo-header field that requests do not have")
            }
            MalformedRequest::PseudoHeaderAfterField => {
                f.write_str("a pseudo-header field after a regular field")
            }
            MalformedRequest::RepeatedPseudoHeader(name) => write!(f, "`{name}` twice"),
            MalformedRequest::Missing(name) => write!(f, "no `{name}`"),
            MalformedRequest::BadPath => f.write_str("`:path` is not a path"),
            MalformedRequest::BadAuthority => {
                f.write_str("`:authority` has userinfo, or `host` names another authority")
            }
            MalformedRequest::BadContentLength => f.write_str("a bad `content-length`"),
            MalformedRequest::Connect => f.write_str("CONNECT is not carried over HTTP/2"),
        }
    }
}

impl std::error::Error for MalformedRequest {}

/// How the body of the HTTP/1.1 head [`RequestHead::finish`] writes is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestBody {
    /// No body: the header block ended the stream.
    None,
    /// `Content-Length: n`: the DATA frames carry n bytes (checked by the stream).
    Length(u64),
    /// No length was given: the head says `Transfer-Encoding: chunked`, and the DATA
    /// frames' payloads are to be passed on as chunks, the stream's end as the last chunk.
    Chunked,
}

/// The pseudo-header fields of a request, as ranges into [`RequestHead`]'s buffer.
#[derive(Debug, Default, Clone)]
struct Pseudo {
    method: Option<Range<usize>>,
    scheme: Option<Range<usize>>,
    authority: Option<Range<usize>>,
    path: Option<Range<usize>>,
}

/// A request's header block as its fields arrive, checked field by field; one per stream.
#[derive(Debug, Default)]
pub struct RequestHead {
    /// The pseudo-header fields' values, `host`'s, and the regular fields' names and
    /// values, back to back; [`RequestHead::finish_parsed`] adds what the HTTP/1 head has
    /// beyond them.
    values: Vec<u8>,
    pseudo: Pseudo,
    host: Option<Range<usize>>,
    /// The regular fields but `host`, `cookie` and `content-length`, in order, in `values`.
    regular: Vec<FieldSpan>,
    /// The `cookie` fields' values joined with `; ` (§8.2.3).
    cookie: Vec<u8>,
    content_length: Option<u64>,
    regular_seen: bool,
    /// A value with a byte HTTP/1 refuses in a field (a control character, DEL): the
    /// HTTP/1 parser is to judge the head as text.
    unclean: bool,
    /// An `expect` field, whose answers the HTTP/1 parser gives.
    expect: bool,
    /// The head as the HTTP/1 path takes it, once [`RequestHead::finish_parsed`] made it.
    parsed: ParsedRequest,
}

/// A request's head laid out as the HTTP/1 parser would have parsed the text
/// [`RequestHead::finish`] writes (with `Connection: close` at its end), without the text
/// or the parse: its [`ParsedRequest::bytes`] go first in the stream's input, and
/// [`crate::Parser::take_parsed`] gives the [`crate::Request`] over them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ParsedRequest {
    /// The fields' names and values the spans point into.
    bytes: Vec<u8>,
    /// The fields in the text's order: `Host`, the regular fields, `cookie`, the
    /// framing, `Connection`.
    pub(crate) fields: Vec<FieldSpan>,
    pub(crate) method: Range<usize>,
    pub(crate) target: Range<usize>,
    pub(crate) info: Option<HeadInfo>,
}

impl ParsedRequest {
    /// What goes first in the stream's input: the head's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The request's method.
    pub fn method(&self) -> &[u8] {
        &self.bytes[self.method.clone()]
    }
}

/// A request's head as the stream's HTTP/1 side is given it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Http1Head<'a> {
    /// The HTTP/1.1 head, with no Connection fields and ending with its empty line.
    Text(&'a [u8]),
    /// The same head, parsed already.
    Parsed(&'a ParsedRequest),
}

/// The names the HTTP/1 head adds, which the parsed head's spans point to.
const ADDED_NAMES: &[u8] = b"HostConnectionclosecookieContent-LengthTransfer-Encodingchunked";
const HOST_AT: Range<usize> = 0..4;
const CONNECTION_AT: Range<usize> = 4..14;
const CLOSE_AT: Range<usize> = 14..19;
const COOKIE_AT: Range<usize> = 19..25;
const CONTENT_LENGTH_AT: Range<usize> = 25..39;
const TRANSFER_ENCODING_AT: Range<usize> = 39..56;
const CHUNKED_AT: Range<usize> = 56..63;

/// The connection-specific fields (RFC 9113 §8.2.2), which an HTTP/2 message must not have.
const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

impl RequestHead {
    /// Empties the head for the next request's block, keeping its buffers, so that a
    /// connection reuses one for all its streams.
    pub fn clear(&mut self) {
        self.values.clear();
        self.pseudo = Pseudo::default();
        self.host = None;
        self.regular.clear();
        self.cookie.clear();
        self.content_length = None;
        self.regular_seen = false;
        self.unclean = false;
        self.expect = false;
    }

    /// Takes one field of the block, in order.
    pub fn field(&mut self, name: &[u8], value: &[u8]) -> Result<(), MalformedRequest> {
        self.unclean |= !check_value(value)?;
        if let Some(pseudo) = name.strip_prefix(b":") {
            return self.pseudo_header(pseudo, value);
        }
        check_name(name)?;
        self.regular_seen = true;
        if let Some(special) = CONNECTION_SPECIFIC
            .iter()
            .find(|special| special.as_bytes() == name)
        {
            return Err(MalformedRequest::ConnectionSpecific(special));
        }
        match name {
            b"te" if value != b"trailers" => {
                return Err(MalformedRequest::ConnectionSpecific("te"))
            }
            b"host" => {
                if self.host.is_some() {
                    return Err(MalformedRequest::BadAuthority);
                }
                self.host = Some(self.keep(value));
                return Ok(());
            }
            b"cookie" => {
                if !self.cookie.is_empty() {
                    self.cookie.extend_from_slice(b"; ");
                }
                self.cookie.extend_from_slice(value);
                return Ok(());
            }
            b"content-length" => {
                let n = parse_length(value).ok_or(MalformedRequest::BadContentLength)?;
                if self.content_length.is_some_and(|seen| seen != n) {
                    return Err(MalformedRequest::BadContentLength);
                }
                self.content_length = Some(n);
                // Written once, by finish.
                return Ok(());
            }
            b"expect" => self.expect = true,
            _ => {}
        }
        let name = self.keep(name);
        let value = self.keep(value);
        self.regular.push(FieldSpan::new(name, value));
        Ok(())
    }

    fn pseudo_header(&mut self, name: &[u8], value: &[u8]) -> Result<(), MalformedRequest> {
        if self.regular_seen {
            return Err(MalformedRequest::PseudoHeaderAfterField);
        }
        let kept = self.keep(value);
        let (slot, full) = match name {
            b"method" => (&mut self.pseudo.method, ":method"),
            b"scheme" => (&mut self.pseudo.scheme, ":scheme"),
            b"authority" => (&mut self.pseudo.authority, ":authority"),
            b"path" => (&mut self.pseudo.path, ":path"),
            _ => return Err(MalformedRequest::UnknownPseudoHeader),
        };
        if slot.replace(kept).is_some() {
            return Err(MalformedRequest::RepeatedPseudoHeader(full));
        }
        Ok(())
    }

    fn keep(&mut self, value: &[u8]) -> Range<usize> {
        let start = self.values.len();
        self.values.extend_from_slice(value);
        start..self.values.len()
    }

    fn value(&self, range: &Option<Range<usize>>) -> Option<&[u8]> {
        range.as_ref().map(|r| &self.values[r.clone()])
    }

    /// Checks the whole block: the framing of its body, and the range in `values` of the
    /// authority the head names (from `:authority`, else the `host` field).
    fn check(&self, end_stream: bool) -> Result<(RequestBody, Range<usize>), MalformedRequest> {
        let method = self
            .value(&self.pseudo.method)
            .ok_or(MalformedRequest::Missing(":method"))?;
        if !method.iter().all(|&b| is_tchar(b)) || method.is_empty() {
            return Err(MalformedRequest::BadName);
        }
        if method == b"CONNECT" {
            return Err(MalformedRequest::Connect);
        }
        let scheme = self
            .value(&self.pseudo.scheme)
            .ok_or(MalformedRequest::Missing(":scheme"))?;
        if scheme.is_empty() {
            return Err(MalformedRequest::Missing(":scheme"));
        }
        let path = self
            .value(&self.pseudo.path)
            .ok_or(MalformedRequest::Missing(":path"))?;
        let origin_form = path.first() == Some(&b'/');
        let asterisk = path == b"*" && method == b"OPTIONS";
        if !(origin_form || asterisk) || path.iter().any(|&b| b <= b' ' || b == 0x7f) {
            return Err(MalformedRequest::BadPath);
        }
        let authority = self.value(&self.pseudo.authority);
        let host = self.value(&self.host);
        // The syntax HTTP/1.1's Host has (no userinfo among it), so that the head written
        // below is one the server reads.
        if authority.is_some_and(|a| a.contains(&b'@') || !is_valid_host(a))
            || host.is_some_and(|h| !is_valid_host(h))
        {
            return Err(MalformedRequest::BadAuthority);
        }
        if let (Some(authority), Some(host)) = (authority, host) {
            if !authority.eq_ignore_ascii_case(host) {
                return Err(MalformedRequest::BadAuthority);
            }
        }
        let framing = match (end_stream, self.content_length) {
            (true, None | Some(0)) => RequestBody::None,
            (true, Some(_)) => return Err(MalformedRequest::BadContentLength),
            (false, Some(n)) => RequestBody::Length(n),
            (false, None) => RequestBody::Chunked,
        };
        // Neither: there is no host to route by, as for an HTTP/1.1 request without Host
        // (RFC 9112 §3.2), which is refused the same way.
        let authority = self
            .pseudo
            .authority
            .clone()
            .or(self.host.clone())
            .ok_or(MalformedRequest::Missing(":authority"))?;
        Ok((framing, authority))
    }

    /// Checks the whole block and appends the HTTP/1.1 head it stands for to `out`:
    /// `METHOD PATH HTTP/1.1`, `Host` (from `:authority`, else the `host` field), the
    /// regular fields in order, the cookies joined, and the body's framing. `end_stream`:
    /// the header block ended the stream (no body).
    pub fn finish(
        &self,
        end_stream: bool,
        out: &mut Vec<u8>,
    ) -> Result<RequestBody, MalformedRequest> {
        let (framing, authority) = self.check(end_stream)?;
        let values = &self.values;
        out.extend_from_slice(self.value(&self.pseudo.method).unwrap_or_default());
        out.push(b' ');
        out.extend_from_slice(self.value(&self.pseudo.path).unwrap_or_default());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        out.extend_from_slice(b"Host: ");
        out.extend_from_slice(&values[authority]);
        out.extend_from_slice(b"\r\n");
        for field in &self.regular {
            out.extend_from_slice(field.name_in(values));
            out.extend_from_slice(b": ");
            out.extend_from_slice(field.value_in(values));
            out.extend_from_slice(b"\r\n");
        }
        if !self.cookie.is_empty() {
            out.extend_from_slice(b"cookie: ");
            out.extend_from_slice(&self.cookie);
            out.extend_from_slice(b"\r\n");
        }
        match framing {
            RequestBody::None => {
                if self.content_length == Some(0) {
                    out.extend_from_slice(b"Content-Length: 0\r\n");
                }
            }
            RequestBody::Length(n) => {
                out.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes());
            }
            RequestBody::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        }
        out.extend_from_slice(b"\r\n");
        Ok(framing)
    }

    /// Checks the whole block as [`RequestHead::finish`] does, and lays out the head it
    /// would write, with `Connection: close` added, as the HTTP/1 parser held to `limits`
    /// parses it: `Some` with that head, `None` where the parser is to judge the text (a
    /// head over its limits, a byte it refuses, an `expect` field), so that such requests
    /// get the answers they get over HTTP/1.
    pub fn finish_parsed(
        &mut self,
        end_stream: bool,
        limits: &Limits,
    ) -> Result<(RequestBody, Option<&ParsedRequest>), MalformedRequest> {
        let (framing, authority) = self.check(end_stream)?;
        let method = self.pseudo.method.clone().unwrap_or_default();
        let target = self.pseudo.path.clone().unwrap_or_default();
        let line = method.len() + 1 + target.len() + b" HTTP/1.1".len();
        // The text's length and its fields, counted as the parser would find them.
        let mut text = line + 2 + b"Host: \r\n".len() + authority.len();
        let mut fields = 2 + self.regular.len();
        for field in &self.regular {
            text += field.len() + b": \r\n".len();
        }
        if !self.cookie.is_empty() {
            text += b"cookie: \r\n".len() + self.cookie.len();
            fields += 1;
        }
        let mut digits = itoa_buffer();
        let length = match framing {
            RequestBody::None if self.content_length == Some(0) => Some(format_u64(0, &mut digits)),
            RequestBody::None => None,
            RequestBody::Length(n) => Some(format_u64(n, &mut digits)),
            RequestBody::Chunked => {
                text += b"Transfer-Encoding: chunked\r\n".len();
                fields += 1;
                None
            }
        };
        if let Some(digits) = length {
            text += b"Content-Length: \r\n".len() + digits.len();
            fields += 1;
        }
        text += b"Connection: close\r\n\r\n".len();
        let values = &self.values;
        let target_clean = values[target.clone()]
            .iter()
            .all(|b| (0x21..=0x7e).contains(b));
        if self.unclean
            || self.expect
            || !target_clean
            || line > limits.max_request_line
            || text > limits.max_header_bytes
            || fields > limits.max_headers
        {
            return Ok((framing, None));
        }
        let mut noted = NotedAt::default();
        for (index, field) in self.regular.iter().enumerate() {
            if let Some(which) = Noted::of_lowercase(field.name_in(values)) {
                noted.note(which, index + 1);
            }
        }
        let parsed = &mut self.parsed;
        std::mem::swap(&mut self.values, &mut parsed.bytes);
        let bytes = &mut parsed.bytes;
        let at = |range: Range<usize>, base: usize| range.start + base..range.end + base;
        let base = bytes.len();
        bytes.extend_from_slice(ADDED_NAMES);
        parsed.fields.clear();
        parsed
            .fields
            .push(FieldSpan::new(at(HOST_AT, base), authority.clone()));
        parsed.fields.extend_from_slice(&self.regular);
        if !self.cookie.is_empty() {
            // Trimmed as the parser trims a value: an empty last cookie leaves `; `.
            let start = bytes.len();
            bytes.extend_from_slice(trim_ows(&self.cookie));
            parsed
                .fields
                .push(FieldSpan::new(at(COOKIE_AT, base), start..bytes.len()));
        }
        if let Some(digits) = length {
            let start = bytes.len();
            bytes.extend_from_slice(digits);
            parsed.fields.push(FieldSpan::new(
                at(CONTENT_LENGTH_AT, base),
                start..bytes.len(),
            ));
        }
        if framing == RequestBody::Chunked {
            parsed.fields.push(FieldSpan::new(
                at(TRANSFER_ENCODING_AT, base),
                at(CHUNKED_AT, base),
            ));
        }
        parsed
            .fields
            .push(FieldSpan::new(at(CONNECTION_AT, base), at(CLOSE_AT, base)));
        let host = parsed.fields[0].value_span();
        parsed.method = method;
        parsed.target = target;
        parsed.info = Some(HeadInfo::parsed(
            match (framing, length) {
                (RequestBody::Length(n), _) => BodyFraming::Length(n),
                (RequestBody::Chunked, _) => BodyFraming::Chunked,
                (RequestBody::None, Some(_)) => BodyFraming::Length(0),
                (RequestBody::None, None) => BodyFraming::None,
            },
            host,
            noted,
        ));
        Ok((framing, Some(&self.parsed)))
    }
}

impl RequestHead {
    /// The head [`RequestHead::finish_parsed`] last laid out.
    pub fn parsed(&self) -> Option<&ParsedRequest> {
        self.parsed.info.is_some().then_some(&self.parsed)
    }
}

/// Room for a `u64` in decimal.
fn itoa_buffer() -> [u8; 20] {
    [0; 20]
}

/// `n` in decimal, written at the end of `buf`.
fn format_u64(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

/// A trailer block's field (RFC 9113 §8.1): as a request's regular fields, and no
/// pseudo-header fields.
pub fn check_trailer_field(name: &[u8], value: &[u8]) -> Result<(), MalformedRequest> {
    check_value(value)?;
    if name.first() == Some(&b':') {
        return Err(MalformedRequest::PseudoHeaderAfterField);
    }
    check_name(name)?;
    match CONNECTION_SPECIFIC
        .iter()
        .find(|special| special.as_bytes() == name)
    {
        Some(special) => Err(MalformedRequest::ConnectionSpecific(special)),
        None => Ok(()),
    }
}

/// A regular field name: a token, in lower case (§8.2.1).
fn check_name(name: &[u8]) -> Result<(), MalformedRequest> {
    if name.is_empty() {
        return Err(MalformedRequest::BadName);
    }
    for &b in name {
        if b.is_ascii_uppercase() {
            return Err(MalformedRequest::UppercaseName);
        }
        if !is_tchar(b) {
            return Err(MalformedRequest::BadName);
        }
    }
    Ok(())
}

/// A field value: no NUL, CR or LF, and no white space at either end (§8.2.1). `Ok(false)`
/// for one HTTP/1 refuses nonetheless (another control character, DEL).
fn check_value(value: &[u8]) -> Result<bool, MalformedRequest> {
    let padded =
        matches!(value.first(), Some(b' ' | b'\t')) || matches!(value.last(), Some(b' ' | b'\t'));
    if padded {
        return Err(MalformedRequest::BadValue);
    }
    // The bytes HTTP/1 refuses include NUL, CR and LF: one pass over a clean value.
    if value.iter().all(|&b| is_field_value_byte(b)) {
        return Ok(true);
    }
    if value.iter().any(|&b| matches!(b, 0 | b'\r' | b'\n')) {
        return Err(MalformedRequest::BadValue);
    }
    Ok(false)
}

/// A `content-length` value: digits only, at most 19 of them (fits in u64).
fn parse_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
