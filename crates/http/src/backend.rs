//! Incremental response-head parser for responses read from a backend
//! (RFC 9112 §4-§6, RFC 9110 field rules).
//!
//! It follows [`crate::Parser`]: lines are validated as their LF arrives,
//! limits are checked against fixed offsets, and field semantics are judged
//! once the head is complete, so the result depends only on the bytes and
//! never on how reads split them. Every error is a 502: a backend that
//! breaks the protocol is a bad gateway from the client's point of view, and
//! the connection to it must not be reused.

use crate::error::RequestError;
use crate::limits::{Limits, MAX_LEADING_EMPTY_LINES};
use crate::request::Version;
use crate::syntax::{is_field_value_byte, is_ows, is_tchar, is_token, list_elements, trim_ows};

/// How the body of a backend response is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseFraming {
    /// No body: a response to HEAD, or a 1xx, 204 or 304 response, whatever
    /// its framing fields say.
    None,
    /// Content-Length: exactly this many bytes follow the head (may be 0).
    Length(u64),
    /// Transfer-Encoding ending in chunked: use [`crate::ChunkedDecoder`].
    Chunked,
    /// The body runs until the backend closes the connection: no framing
    /// fields, or a Transfer-Encoding whose final coding is not chunked.
    UntilClose,
}

/// Byte offsets of one header field inside the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FieldSpan {
    name: (usize, usize),
    /// Value with surrounding OWS already trimmed.
    value: (usize, usize),
}

/// Head-wide results computed once the head is complete. They do not depend
/// on the request method, so a later call may ask about HEAD differently.
#[derive(Debug, Clone, Copy)]
struct HeadInfo {
    /// Framing as if the request had not been HEAD.
    declared: ResponseFraming,
    /// Valid Content-Length, unless Transfer-Encoding overrides it.
    content_length: Option<u64>,
    /// Both Transfer-Encoding and Content-Length: a smuggling signal.
    te_and_cl: bool,
    close: bool,
    keep_alive_token: bool,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Skipping empty lines / waiting for the status line.
    StatusLine,
    /// Reading field lines.
    Fields,
    /// Head complete and valid; `head_len` and `info` are set.
    Complete(HeadInfo),
    /// A previous call failed; the same error is returned until `reset`.
    Failed(RequestError),
}

/// Reusable, per-backend-connection response-head parser.
///
/// Like [`crate::Parser`] it keeps its scan position between calls and
/// reuses its field table across responses, so steady-state parsing
/// allocates nothing.
#[derive(Debug)]
pub struct ResponseParser {
    limits: Limits,
    phase: Phase,
    /// Offset where the line currently being scanned starts.
    line_start: usize,
    /// Offset where the LF search resumes; bytes before it hold no LF of the
    /// current line.
    scan: usize,
    empty_lines: usize,
    version: Version,
    status: u16,
    reason: (usize, usize),
    fields: Vec<FieldSpan>,
    head_len: usize,
    /// Bytes handed to memchr since the last reset, to test O(n) scanning.
    #[cfg(test)]
    pub(crate) scanned: usize,
}

/// A parsed backend response head, borrowing the caller's buffer and the
/// parser.
#[derive(Debug, Clone)]
pub struct ResponseHead<'a> {
    /// Protocol version of the status line.
    pub version: Version,
    /// Status code, always in 100..=599.
    pub status: u16,
    /// Reason phrase as sent; "" when absent or when it holds non-ASCII
    /// bytes (obs-text has no defined charset, so it is not passed on).
    pub reason: &'a str,
    /// Length of the head in the buffer, including any skipped leading empty
    /// lines and the final blank line; the body (if any) starts here.
    pub head_len: usize,
    /// How the body is delimited.
    pub framing: ResponseFraming,
    /// Whether the backend connection may be reused after this response
    /// (and its body): HTTP/1.1 unless "Connection: close"; HTTP/1.0 only
    /// with "Connection: keep-alive"; never when the body runs until close,
    /// when both Transfer-Encoding and Content-Length were sent, or after a
    /// 101 (the connection no longer speaks HTTP/1.1).
    pub keep_alive: bool,
    pub(crate) content_length: Option<u64>,
    buf: &'a [u8],
    fields: &'a [FieldSpan],
}

impl<'a> ResponseHead<'a> {
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
    RequestError::new(502, reason)
}

const MALFORMED_STATUS_LINE: RequestError = bad("malformed status line");

impl ResponseParser {
    /// Creates a parser enforcing `limits`: the status line is bounded by
    /// `max_request_line`, the head by `max_header_bytes` and the field count
    /// by `max_headers`.
    pub fn new(limits: Limits) -> ResponseParser {
        ResponseParser {
            limits,
            phase: Phase::StatusLine,
            line_start: 0,
            scan: 0,
            empty_lines: 0,
            version: Version::Http11,
            status: 0,
            reason: (0, 0),
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
    /// after consuming a response (head and body) from the buffer, after a
    /// 1xx before parsing the final response, or to parse an unrelated
    /// buffer.
    pub fn reset(&mut self) {
        self.phase = Phase::StatusLine;
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

    /// Looks for a complete response head at the start of `buf`.
    ///
    /// `request_was_head` says whether the request this answers was HEAD,
    /// which decides whether a body follows (RFC 9112 §6.3 rule 1); it only
    /// affects `framing` and `keep_alive`, never errors.
    ///
    /// `Ok(None)` means more bytes are needed and no limit is exceeded yet.
    /// Scanning is incremental: calling again with a longer `buf` that starts
    /// with the same bytes resumes where the previous call stopped (passing a
    /// shorter buffer is treated as a new response). Once an error is
    /// returned, it is returned again until [`ResponseParser::reset`]. Every
    /// error has status 502.
    pub fn parse<'a>(
        &'a mut self,
        buf: &'a [u8],
        request_was_head: bool,
    ) -> Result<Option<ResponseHead<'a>>, RequestError> {
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
        let framing = if request_was_head {
            ResponseFraming::None
        } else {
            info.declared
        };
        let persistent = match self.version {
            Version::Http11 => !info.close,
            Version::Http10 => info.keep_alive_token && !info.close,
        };
        let keep_alive = persistent
            && !info.te_and_cl
            && framing != ResponseFraming::UntilClose
            && self.status != 101;
        Ok(Some(ResponseHead {
            version: self.version,
            status: self.status,
            reason: ascii_str(&buf[self.reason.0..self.reason.1]),
            head_len: self.head_len,
            framing,
            keep_alive,
            content_length: info.content_length,
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
            // line limit or the head limit is the tighter decides the reason.
            let head_cap = self.limits.max_header_bytes;
            let (window, over) = match self.phase {
                Phase::StatusLine => {
                    let line_cap = self
                        .line_start
                        .saturating_add(self.limits.max_request_line)
                        .saturating_add(2);
                    if line_cap <= head_cap {
                        (line_cap, bad("status line too long"))
                    } else {
                        (head_cap, bad("response head too large"))
                    }
                }
                _ => (head_cap, bad("response head too large")),
            };
            let end = buf.len().min(window);
            let from = self.scan.min(end);
            #[cfg(test)]
            {
                self.scanned += end - from;
            }
            let Some(i) = memchr::memchr(b'\n', &buf[from..end]) else {
                self.scan = end;
                if matches!(self.phase, Phase::StatusLine) {
                    // Refuse a backend that answers with something other than
                    // HTTP/1.x (HTTP/0.9, TLS, garbage) without waiting for a
                    // line end that may never come.
                    check_partial_prefix(&buf[self.line_start..end])?;
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
                Phase::StatusLine => {
                    if line.is_empty() {
                        // Tolerated for the same reason as before requests:
                        // some backends send a stray CRLF after a body.
                        self.empty_lines += 1;
                        if self.empty_lines > MAX_LEADING_EMPTY_LINES {
                            return Err(bad("too many empty lines before response"));
                        }
                        continue;
                    }
                    // The prefix is judged before the length, as it is while
                    // the line is still arriving, so the error does not
                    // depend on how bytes are split.
                    check_prefix(line)?;
                    if line.len() > self.limits.max_request_line {
                        return Err(bad("status line too long"));
                    }
                    self.parse_status_line(line, start)?;
                    self.phase = Phase::Fields;
                }
                _ => {
                    if line.is_empty() {
                        self.head_len = lf + 1;
                        return Ok(true);
                    }
                    if self.fields.len() >= self.limits.max_headers {
                        return Err(bad("too many header fields"));
                    }
                    let span = parse_field_line(line, start)?;
                    self.fields.push(span);
                }
            }
        }
    }

    /// status-line = HTTP-version SP status-code SP [ reason-phrase ]
    ///
    /// A missing SP after the code is tolerated too: the reason phrase
    /// carries no meaning (RFC 9112 §4) and servers that omit it exist.
    fn parse_status_line(&mut self, line: &[u8], base: usize) -> Result<(), RequestError> {
        if memchr::memchr(b'\r', line).is_some() {
            return Err(bad("bare CR in status line"));
        }
        let [b'H', b'T', b'T', b'P', b'/', major, b'.', minor, b' ', s1, s2, s3, rest @ ..] = line
        else {
            return Err(MALFORMED_STATUS_LINE);
        };
        if !major.is_ascii_digit() || !minor.is_ascii_digit() {
            return Err(MALFORMED_STATUS_LINE);
        }
        if *major != b'1' {
            return Err(bad("unsupported HTTP version"));
        }
        if ![s1, s2, s3].iter().all(|b| b.is_ascii_digit()) {
            return Err(MALFORMED_STATUS_LINE);
        }
        let status = u16::from(s1 - b'0') * 100 + u16::from(s2 - b'0') * 10 + u16::from(s3 - b'0');
        // RFC 9110 §15: codes outside 100..=599 are invalid; passing one on
        // would hand the client something it cannot interpret either.
        if !(100..=599).contains(&status) {
            return Err(bad("invalid status code"));
        }
        let reason = match rest {
            [] => &[][..],
            [b' ', reason @ ..] => reason,
            _ => return Err(MALFORMED_STATUS_LINE),
        };
        if !reason.iter().all(|&b| is_field_value_byte(b)) {
            return Err(bad("control character in reason phrase"));
        }
        let reason_start = base + (line.len() - reason.len());
        self.reason = if reason.is_ascii() {
            (reason_start, reason_start + reason.len())
        } else {
            (reason_start, reason_start)
        };
        self.version = if *minor == b'0' {
            Version::Http10
        } else {
            Version::Http11
        };
        self.status = status;
        Ok(())
    }

    /// Head-wide field semantics, run once on a complete head.
    fn analyze(&self, buf: &[u8]) -> Result<HeadInfo, RequestError> {
        let mut content_length: Option<u64> = None;
        let mut te_seen = false;
        let mut chunked_seen = false;
        let mut chunked_last = false;
        let mut close = false;
        let mut keep_alive_token = false;

        for f in &self.fields {
            let name = &buf[f.name.0..f.name.1];
            let value = &buf[f.value.0..f.value.1];
            // Dispatch on length first: most fields match none of these.
            match name.len() {
                14 if name.eq_ignore_ascii_case(b"content-length") => {
                    // Validated even where no body follows: for HEAD and 304
                    // the value is relayed to the client. A list of identical
                    // values is one value (RFC 9110 §8.6).
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
                    let mut any = false;
                    for elem in list_elements(value) {
                        any = true;
                        let coding = trim_ows(match memchr::memchr(b';', elem) {
                            Some(p) => &elem[..p],
                            None => elem,
                        });
                        if !is_token(coding) {
                            return Err(bad("invalid Transfer-Encoding"));
                        }
                        if coding.eq_ignore_ascii_case(b"chunked") {
                            // Forbidden by RFC 9112 §6.1, and which layer of
                            // chunking ends the body would be ambiguous.
                            if chunked_seen {
                                return Err(bad("chunked applied more than once"));
                            }
                            chunked_seen = true;
                            chunked_last = true;
                        } else {
                            chunked_last = false;
                        }
                    }
                    if !any {
                        return Err(bad("invalid Transfer-Encoding"));
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
                _ => {}
            }
        }

        if te_seen && self.version == Version::Http10 {
            // RFC 9112 §6.1: the framing of such a message is faulty.
            return Err(bad("Transfer-Encoding in HTTP/1.0 response"));
        }
        let no_body = matches!(self.status, 100..=199 | 204 | 304);
        let declared = if no_body {
            ResponseFraming::None
        } else if te_seen {
            if chunked_last {
                ResponseFraming::Chunked
            } else {
                ResponseFraming::UntilClose
            }
        } else {
            match content_length {
                Some(n) => ResponseFraming::Length(n),
                None => ResponseFraming::UntilClose,
            }
        };
        Ok(HeadInfo {
            declared,
            // RFC 9112 §6.3 rule 3: Transfer-Encoding overrides, and the
            // Content-Length must not be passed on.
            content_length: if te_seen { None } else { content_length },
            te_and_cl: te_seen && content_length.is_some(),
            close,
            keep_alive_token,
        })
    }
}

/// Checks that a status line still arriving can begin "HTTP/". A final CR may
/// begin the line's CRLF (an empty line) and is left for the whole line.
fn check_partial_prefix(partial: &[u8]) -> Result<(), RequestError> {
    match partial.split_last() {
        Some((b'\r', rest)) => check_prefix(rest),
        _ => check_prefix(partial),
    }
}

/// Checks that the first bytes of a status line agree with "HTTP/".
fn check_prefix(line: &[u8]) -> Result<(), RequestError> {
    let n = line.len().min(5);
    if line[..n] == b"HTTP/"[..n] {
        Ok(())
    } else {
        Err(MALFORMED_STATUS_LINE)
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
#[path = "backend_tests.rs"]
mod tests;
