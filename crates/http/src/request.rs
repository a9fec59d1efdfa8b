//! Incremental request-head parser (RFC 9112 §2-§7, RFC 9110 field rules).
//!
//! The parser walks the head line by line and remembers how far it got, so a
//! client that trickles bytes costs O(n) in total, not O(n²). Each line is
//! validated the moment its LF arrives and limits are checked against fixed
//! offsets, so the outcome depends only on the bytes, never on how they were
//! split across reads. Field semantics (Host, framing, Connection, Expect)
//! are checked once, when the blank line ends the head.

use crate::error::RequestError;
use crate::limits::{Limits, MAX_LEADING_EMPTY_LINES};
use crate::syntax::{is_field_value_byte, is_ows, is_tchar, is_token, list_elements, trim_ows};
use crate::target::is_valid_host;

/// Protocol version of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0.
    Http10,
    /// HTTP/1.1, and any later HTTP/1.x (RFC 9110 §2.5: treat as 1.1).
    Http11,
}

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

/// Byte offsets of one header field inside the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FieldSpan {
    name: (usize, usize),
    /// Value with surrounding OWS already trimmed.
    value: (usize, usize),
}

/// Head-wide results computed once the head is complete.
#[derive(Debug, Clone, Copy)]
struct HeadInfo {
    framing: BodyFraming,
    keep_alive: bool,
    expect_continue: bool,
    host: Option<(usize, usize)>,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Skipping empty lines / waiting for the request line.
    RequestLine,
    /// Reading field lines.
    Fields,
    /// Head complete and valid; `head_len` and `info` are set.
    Complete(HeadInfo),
    /// A previous call failed; the same error is returned until `reset`.
    Failed(RequestError),
}

/// Reusable, per-connection request-head parser.
///
/// Holds the scan position and a `Vec` of field offsets that is reused
/// across requests, so steady-state parsing allocates nothing.
#[derive(Debug)]
pub struct Parser {
    limits: Limits,
    phase: Phase,
    /// Offset where the line currently being scanned starts.
    line_start: usize,
    /// Offset where the LF search resumes; bytes before it hold no LF of the
    /// current line.
    scan: usize,
    empty_lines: usize,
    method: (usize, usize),
    target: (usize, usize),
    version: Version,
    fields: Vec<FieldSpan>,
    head_len: usize,
    /// Bytes handed to memchr since the last reset, to test O(n) scanning.
    #[cfg(test)]
    scanned: usize,
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
    buf: &'a [u8],
    fields: &'a [FieldSpan],
}

impl<'a> Request<'a> {
    /// First value of the field `name` (ASCII case-insensitive), OWS-trimmed.
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.header_values(name).next()
    }

    /// Every value of the field `name` in order, for list-valued fields sent
    /// as several lines.
    pub fn header_values<'n>(&self, name: &'n str) -> impl Iterator<Item = &'a [u8]> + 'n
    where
        'a: 'n,
    {
        let buf = self.buf;
        self.fields.iter().filter_map(move |f| {
            let n = &buf[f.name.0..f.name.1];
            n.eq_ignore_ascii_case(name.as_bytes())
                .then(|| &buf[f.value.0..f.value.1])
        })
    }

    /// All fields in order as (name as sent, OWS-trimmed value).
    pub fn headers(&self) -> impl Iterator<Item = (&'a str, &'a [u8])> + use<'a> {
        let buf = self.buf;
        self.fields.iter().map(move |f| {
            (
                ascii_str(&buf[f.name.0..f.name.1]),
                &buf[f.value.0..f.value.1],
            )
        })
    }

    /// Number of header fields.
    pub fn header_count(&self) -> usize {
        self.fields.len()
    }
}

/// Converts bytes already validated as ASCII; never fails in practice, and
/// falls back to "" rather than panicking if that invariant were broken.
fn ascii_str(b: &[u8]) -> &str {
    std::str::from_utf8(b).unwrap_or_default()
}

const fn bad(reason: &'static str) -> RequestError {
    RequestError::bad_request(reason)
}

impl Parser {
    /// Creates a parser enforcing `limits`.
    pub fn new(limits: Limits) -> Parser {
        Parser {
            limits,
            phase: Phase::RequestLine,
            line_start: 0,
            scan: 0,
            empty_lines: 0,
            method: (0, 0),
            target: (0, 0),
            version: Version::Http11,
            fields: Vec::with_capacity(16),
            head_len: 0,
            #[cfg(test)]
            scanned: 0,
        }
    }

    /// The limits this parser enforces.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Forgets all scan state (keeping the field table's capacity). Call
    /// after consuming a request (head and body) from the buffer, or to
    /// parse an unrelated buffer.
    pub fn reset(&mut self) {
        self.phase = Phase::RequestLine;
        self.line_start = 0;
        self.scan = 0;
        self.empty_lines = 0;
        self.fields.clear();
        self.head_len = 0;
        #[cfg(test)]
        {
            self.scanned = 0;
        }
    }

    /// Looks for a complete request head at the start of `buf`.
    ///
    /// `Ok(None)` means more bytes are needed and no limit is exceeded yet.
    /// Scanning is incremental: calling again with a longer `buf` that starts
    /// with the same bytes resumes where the previous call stopped (passing a
    /// shorter buffer is treated as a new request). Once an error is
    /// returned, it is returned again until [`Parser::reset`].
    pub fn parse<'a>(&'a mut self, buf: &'a [u8]) -> Result<Option<Request<'a>>, RequestError> {
        let info = match self.phase {
            Phase::Failed(e) => return Err(e),
            Phase::Complete(info) if buf.len() >= self.head_len => info,
            _ => {
                if buf.len() < self.scan || buf.len() < self.head_len {
                    // Not a continuation of what we scanned; start over
                    // rather than trust stale offsets.
                    self.reset();
                }
                let checked = match self.advance(buf) {
                    Ok(true) => self.analyze(buf),
                    Ok(false) => return Ok(None),
                    Err(e) => Err(e),
                };
                match checked {
                    Ok(info) => {
                        self.phase = Phase::Complete(info);
                        info
                    }
                    Err(e) => {
                        self.phase = Phase::Failed(e);
                        return Err(e);
                    }
                }
            }
        };
        Ok(Some(Request {
            method: ascii_str(&buf[self.method.0..self.method.1]),
            target: ascii_str(&buf[self.target.0..self.target.1]),
            version: self.version,
            head_len: self.head_len,
            framing: info.framing,
            keep_alive: info.keep_alive,
            expect_continue: info.expect_continue,
            host: info.host.map(|(s, e)| ascii_str(&buf[s..e])),
            buf,
            fields: &self.fields,
        }))
    }

    /// Scans complete lines from `self.scan`; Ok(true) once the blank line
    /// ending the head has been seen.
    fn advance(&mut self, buf: &[u8]) -> Result<bool, RequestError> {
        if buf.is_empty() {
            return Ok(false);
        }
        loop {
            // The LF ending this line must lie before `window`; whether the
            // line limit or the head limit is the tighter decides the status.
            let head_cap = self.limits.max_header_bytes;
            let (window, over) = match self.phase {
                Phase::RequestLine => {
                    let line_cap = self
                        .line_start
                        .saturating_add(self.limits.max_request_line)
                        .saturating_add(2);
                    if line_cap <= head_cap {
                        (line_cap, RequestError::new(414, "request line too long"))
                    } else {
                        (head_cap, RequestError::new(431, "request head too large"))
                    }
                }
                _ => (head_cap, RequestError::new(431, "request head too large")),
            };
            let end = buf.len().min(window);
            let from = self.scan.min(end);
            #[cfg(test)]
            {
                self.scanned += end - from;
            }
            let Some(i) = memchr::memchr(b'\n', &buf[from..end]) else {
                self.scan = end;
                if matches!(self.phase, Phase::RequestLine) {
                    // Reject a request line whose method is already invalid (a TLS
                    // ClientHello, say) without waiting for a line end that never comes.
                    check_partial_method(&buf[self.line_start..end])?;
                }
                return if buf.len() >= window {
                    Err(over)
                } else {
                    Ok(false)
                };
            };
            let lf = from + i;
            let start = self.line_start;
            // Accept CRLF or a bare LF (RFC 9112 §2.2).
            let content_end = if lf > start && buf[lf - 1] == b'\r' {
                lf - 1
            } else {
                lf
            };
            self.line_start = lf + 1;
            self.scan = lf + 1;
            let line = &buf[start..content_end];
            match self.phase {
                Phase::RequestLine => {
                    if line.is_empty() {
                        self.empty_lines += 1;
                        if self.empty_lines > MAX_LEADING_EMPTY_LINES {
                            return Err(bad("too many empty lines before request"));
                        }
                        continue;
                    }
                    // The method is judged before the length, as it is while the line is
                    // still arriving, so the error does not depend on how bytes are split.
                    check_method(line)?;
                    if line.len() > self.limits.max_request_line {
                        return Err(RequestError::new(414, "request line too long"));
                    }
                    self.parse_request_line(line, start)?;
                    self.phase = Phase::Fields;
                }
                _ => {
                    if line.is_empty() {
                        self.head_len = lf + 1;
                        return Ok(true);
                    }
                    if self.fields.len() >= self.limits.max_headers {
                        return Err(RequestError::new(431, "too many header fields"));
                    }
                    let span = parse_field_line(line, start)?;
                    self.fields.push(span);
                }
            }
        }
    }

    /// request-line = method SP request-target SP HTTP-version
    fn parse_request_line(&mut self, line: &[u8], base: usize) -> Result<(), RequestError> {
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
    fn analyze(&self, buf: &[u8]) -> Result<HeadInfo, RequestError> {
        let mut host = None;
        let mut host_count = 0usize;
        let mut content_length: Option<u64> = None;
        let mut te_seen = false;
        let mut te_chunked_last = false;
        let mut te_error: Option<RequestError> = None;
        let mut close = false;
        let mut keep_alive_token = false;
        let mut expect_continue = false;
        let mut expect_other = false;

        for f in &self.fields {
            let name = &buf[f.name.0..f.name.1];
            let value = &buf[f.value.0..f.value.1];
            // Dispatch on length first: most fields match none of these.
            match name.len() {
                4 if name.eq_ignore_ascii_case(b"host") => {
                    host_count += 1;
                    if host_count > 1 {
                        return Err(bad("multiple Host fields"));
                    }
                    if !is_valid_host(value) {
                        return Err(bad("invalid Host"));
                    }
                    host = Some(f.value);
                }
                14 if name.eq_ignore_ascii_case(b"content-length") => {
                    // Strict 1*DIGIT; a list of identical values is one value
                    // (RFC 9110 §8.6), differing values are a smuggling risk.
                    let mut any = false;
                    for part in value.split(|&b| b == b',') {
                        let n = crate::syntax::parse_u64(trim_ows(part))
                            .ok_or(bad("invalid Content-Length"))?;
                        if content_length.is_some_and(|c| c != n) {
                            return Err(bad("conflicting Content-Length"));
                        }
                        content_length = Some(n);
                        any = true;
                    }
                    if !any {
                        return Err(bad("invalid Content-Length"));
                    }
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
                10 if name.eq_ignore_ascii_case(b"connection") => {
                    for token in list_elements(value) {
                        if token.eq_ignore_ascii_case(b"close") {
                            close = true;
                        } else if token.eq_ignore_ascii_case(b"keep-alive") {
                            keep_alive_token = true;
                        }
                    }
                }
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
        let keep_alive = match self.version {
            Version::Http11 => !close,
            Version::Http10 => keep_alive_token && !close,
        };
        Ok(HeadInfo {
            framing,
            keep_alive,
            expect_continue: expect_continue && self.version == Version::Http11,
            host,
        })
    }
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

/// field-line = field-name ":" OWS field-value OWS
fn parse_field_line(line: &[u8], base: usize) -> Result<FieldSpan, RequestError> {
    if is_ows(line[0]) {
        // obs-fold (RFC 9112 §5.2) or whitespace before the first field.
        return Err(bad("obs-fold or leading whitespace in field line"));
    }
    let Some(colon) = memchr::memchr(b':', line) else {
        return Err(bad("field line without colon"));
    };
    if colon == 0 {
        return Err(bad("empty field name"));
    }
    for &b in &line[..colon] {
        if !is_tchar(b) {
            return Err(match b {
                b' ' | b'\t' => bad("whitespace before colon"),
                b'\r' => bad("bare CR in field line"),
                _ => bad("invalid field name"),
            });
        }
    }
    let mut vs = colon + 1;
    let mut ve = line.len();
    while vs < ve && is_ows(line[vs]) {
        vs += 1;
    }
    while ve > vs && is_ows(line[ve - 1]) {
        ve -= 1;
    }
    for &b in &line[vs..ve] {
        if !is_field_value_byte(b) {
            return Err(if b == b'\r' {
                bad("bare CR in field line")
            } else {
                bad("control character in field value")
            });
        }
    }
    Ok(FieldSpan {
        name: (base, base + colon),
        value: (base + vs, base + ve),
    })
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;

/// Checks the method of a request line that has not ended yet: every byte before the
/// first space must be a token character. A final CR may begin the line's CRLF and is
/// left for the complete line to judge.
fn check_partial_method(partial: &[u8]) -> Result<(), RequestError> {
    match partial.split_last() {
        Some((b'\r', rest)) if memchr::memchr(b' ', partial).is_none() => check_method(rest),
        _ => check_method(partial),
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
