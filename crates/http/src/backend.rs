//! Response-head parser for responses read from a backend (RFC 9112 §4-§6,
//! RFC 9110 field rules).
//!
//! It scans like [`crate::Parser`], with the same shared code (`head.rs`,
//! `fields.rs`): lines are validated as their LF arrives, limits are checked
//! against fixed offsets, and field semantics are judged once the head is
//! complete, so the result depends only on the bytes and never on how reads
//! split them. Every error is a 502: a backend that breaks the protocol is a
//! bad gateway from the client's point of view, and the connection to it
//! must not be reused.

use crate::error::RequestError;
use crate::fields::{fold_content_length, ConnectionOptions, FieldSpan, Fields};
use crate::head::{HeadScanner, ScanErrors, StartLine};
use crate::limits::Limits;
use crate::syntax::{ascii_str, is_field_value_byte, is_token, list_elements, trim_ows};
use crate::version::Version;

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

/// Head-wide results computed once the head is complete. They do not depend
/// on the request method, so a later call may ask about HEAD differently.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeadInfo {
    /// Framing as if the request had not been HEAD.
    declared: ResponseFraming,
    /// Valid Content-Length, unless Transfer-Encoding overrides it.
    content_length: Option<u64>,
    /// Both Transfer-Encoding and Content-Length: a smuggling signal.
    te_and_cl: bool,
    connection: ConnectionOptions,
}

/// The parsed status line; the reason is offsets into the buffer.
#[derive(Debug)]
pub(crate) struct StatusLine {
    version: Version,
    status: u16,
    reason: (usize, usize),
}

/// Reusable, per-backend-connection response-head parser.
///
/// Like [`crate::Parser`] it keeps its scan position between calls and
/// reuses its field table across responses, so steady-state parsing
/// allocates nothing.
#[derive(Debug)]
pub struct ResponseParser {
    head: HeadScanner<StatusLine>,
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
    RequestError::new(502, reason)
}

const MALFORMED_STATUS_LINE: RequestError = bad("malformed status line");

impl ResponseParser {
    /// Creates a parser enforcing `limits`: the status line is bounded by
    /// `max_request_line`, the head by `max_header_bytes` and the field count
    /// by `max_headers`.
    pub fn new(limits: Limits) -> ResponseParser {
        let line = StatusLine {
            version: Version::Http11,
            status: 0,
            reason: (0, 0),
        };
        ResponseParser {
            head: HeadScanner::new(limits, line),
        }
    }

    /// The limits this parser enforces.
    pub fn limits(&self) -> Limits {
        self.head.limits()
    }

    /// Forgets all scan state (keeping the field table's capacity). Call
    /// after consuming a response (head and body) from the buffer, after a
    /// 1xx before parsing the final response, or to parse an unrelated
    /// buffer.
    pub fn reset(&mut self) {
        self.head.reset();
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
        let Some(info) = self.head.parse(buf)? else {
            return Ok(None);
        };
        let line = self.head.start_line();
        let framing = if request_was_head {
            ResponseFraming::None
        } else {
            info.declared
        };
        let keep_alive = info.connection.persistent(line.version)
            && !info.te_and_cl
            && framing != ResponseFraming::UntilClose
            && line.status != 101;
        Ok(Some(ResponseHead {
            version: line.version,
            status: line.status,
            reason: ascii_str(&buf[line.reason.0..line.reason.1]),
            head_len: self.head.head_len(),
            framing,
            keep_alive,
            content_length: info.content_length,
            buf,
            fields: self.head.fields(),
        }))
    }
}

impl StartLine for StatusLine {
    type Info = HeadInfo;

    const ERRORS: ScanErrors = ScanErrors {
        line_too_long: bad("status line too long"),
        head_too_large: bad("response head too large"),
        too_many_empty_lines: bad("too many empty lines before response"),
        too_many_fields: bad("too many header fields"),
        bad_field_status: 502,
    };

    /// Refuses a backend that answers with something other than HTTP/1.x
    /// (HTTP/0.9, TLS, garbage) without waiting for a line end that may
    /// never come. A final CR may begin the line's CRLF (an empty line) and
    /// is left for the whole line.
    fn check_partial(partial: &[u8]) -> Result<(), RequestError> {
        match partial.split_last() {
            Some((b'\r', rest)) => check_prefix(rest),
            _ => check_prefix(partial),
        }
    }

    fn check_start(line: &[u8]) -> Result<(), RequestError> {
        check_prefix(line)
    }

    /// status-line = HTTP-version SP status-code SP [ reason-phrase ]
    ///
    /// A missing SP after the code is tolerated too: the reason phrase
    /// carries no meaning (RFC 9112 §4) and servers that omit it exist.
    fn parse(&mut self, line: &[u8], base: usize) -> Result<(), RequestError> {
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
    #[inline]
    fn analyze(&self, buf: &[u8], fields: &[FieldSpan]) -> Result<HeadInfo, RequestError> {
        let mut content_length: Option<u64> = None;
        let mut te_seen = false;
        let mut chunked_seen = false;
        let mut chunked_last = false;
        let mut connection = ConnectionOptions::default();

        for f in fields {
            let name = f.name_in(buf);
            let value = f.value_in(buf);
            // Dispatch on length first: most fields match none of these.
            match name.len() {
                14 if name.eq_ignore_ascii_case(b"content-length") => {
                    // Validated even where no body follows: for HEAD and 304
                    // the value is relayed to the client.
                    content_length = Some(fold_content_length(value, content_length).map_err(bad)?);
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
                10 if name.eq_ignore_ascii_case(b"connection") => connection.add(value),
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
            connection,
        })
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

#[cfg(test)]
#[path = "backend_tests.rs"]
mod tests;
