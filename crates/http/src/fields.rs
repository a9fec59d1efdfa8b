//! Header fields as both parsers see them: the field-line syntax, the
//! borrowed view behind the `header*` accessors, and the field rules that
//! requests and responses share. Errors here are bare reasons; the caller
//! picks the status (400 for a client, 502 for a backend).

use crate::syntax::{is_field_value_byte, is_ows, is_tchar, list_elements, parse_u64, trim_ows};
use crate::version::Version;

/// Byte offsets of one header field inside the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FieldSpan {
    name: (usize, usize),
    /// Value with surrounding OWS already trimmed.
    value: (usize, usize),
}

impl FieldSpan {
    /// A field whose name and (trimmed) value are at these ranges of a buffer.
    #[inline]
    pub(crate) fn new(name: std::ops::Range<usize>, value: std::ops::Range<usize>) -> Self {
        FieldSpan {
            name: (name.start, name.end),
            value: (value.start, value.end),
        }
    }

    /// The bytes of its name and value together.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.name.1 - self.name.0 + self.value.1 - self.value.0
    }

    /// The name as sent, from the buffer the field was parsed from.
    #[inline]
    pub(crate) fn name_in<'b>(&self, buf: &'b [u8]) -> &'b [u8] {
        &buf[self.name.0..self.name.1]
    }

    /// The OWS-trimmed value, from the buffer the field was parsed from.
    #[inline]
    pub(crate) fn value_in<'b>(&self, buf: &'b [u8]) -> &'b [u8] {
        &buf[self.value.0..self.value.1]
    }

    /// Offsets of the value, for results kept while the buffer is not borrowed.
    #[inline]
    pub(crate) fn value_span(&self) -> (usize, usize) {
        self.value
    }
}

/// The fields of a parsed head: what `Request` and `ResponseHead` answer
/// header queries from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fields<'a> {
    buf: &'a [u8],
    spans: &'a [FieldSpan],
}

impl<'a> Fields<'a> {
    #[inline]
    pub(crate) fn new(buf: &'a [u8], spans: &'a [FieldSpan]) -> Self {
        Fields { buf, spans }
    }

    /// First value of the field `name` (ASCII case-insensitive).
    #[inline]
    pub(crate) fn header(self, name: &str) -> Option<&'a [u8]> {
        self.header_values(name).next()
    }

    /// Every value of the field `name` in order.
    #[inline]
    pub(crate) fn header_values<'n>(self, name: &'n str) -> impl Iterator<Item = &'a [u8]> + 'n
    where
        'a: 'n,
    {
        let buf = self.buf;
        self.spans
            .iter()
            .filter(move |f| f.name_in(buf).eq_ignore_ascii_case(name.as_bytes()))
            .map(move |f| f.value_in(buf))
    }

    /// All fields in order as (name, value).
    #[inline]
    pub(crate) fn headers(self) -> impl Iterator<Item = (&'a str, &'a [u8])> + use<'a> {
        let buf = self.buf;
        self.spans.iter().map(move |f| {
            let name = f.name_in(buf);
            debug_assert!(name.iter().all(|&b| is_tchar(b)));
            // SAFETY: parse_field_line stores only names made of tchar bytes, which are
            // ASCII, so valid UTF-8. Forwarding iterates every field of every relayed
            // message, where checking the names again cost a tenth of the proxy's
            // instructions.
            (
                unsafe { std::str::from_utf8_unchecked(name) },
                f.value_in(buf),
            )
        })
    }

    #[inline]
    pub(crate) fn header_count(self) -> usize {
        self.spans.len()
    }
}

/// field-line = field-name ":" OWS field-value OWS
///
/// `line` is non-empty and has no line terminator; `base` is its offset in
/// the buffer, so the span can be stored without borrowing it. Always
/// inlined: it runs once per field line, and a call per line measurably
/// slows request parsing.
#[inline(always)]
pub(crate) fn parse_field_line(line: &[u8], base: usize) -> Result<FieldSpan, &'static str> {
    if is_ows(line[0]) {
        // obs-fold (RFC 9112 §5.2) or whitespace before the first field.
        return Err("obs-fold or leading whitespace in field line");
    }
    let Some(colon) = memchr::memchr(b':', line) else {
        return Err("field line without colon");
    };
    if colon == 0 {
        return Err("empty field name");
    }
    for &b in &line[..colon] {
        if !is_tchar(b) {
            return Err(match b {
                b' ' | b'\t' => "whitespace before colon",
                b'\r' => "bare CR in field line",
                _ => "invalid field name",
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
                "bare CR in field line"
            } else {
                "control character in field value"
            });
        }
    }
    Ok(FieldSpan {
        name: (base, base + colon),
        value: (base + vs, base + ve),
    })
}

/// Folds one Content-Length field into the length `seen` in earlier ones.
/// Strict 1*DIGIT; a list of identical values is one value (RFC 9110 §8.6),
/// differing values are a smuggling risk.
#[inline]
pub(crate) fn fold_content_length(value: &[u8], seen: Option<u64>) -> Result<u64, &'static str> {
    let mut length = seen;
    for part in value.split(|&b| b == b',') {
        let n = parse_u64(trim_ows(part)).ok_or("invalid Content-Length")?;
        if length.is_some_and(|c| c != n) {
            return Err("conflicting Content-Length");
        }
        length = Some(n);
    }
    // `split` yields at least one part, so this only guards the invariant.
    length.ok_or("invalid Content-Length")
}

/// The Connection options that decide whether a connection persists
/// (RFC 9112 §9.3), gathered over every Connection field.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ConnectionOptions {
    close: bool,
    keep_alive: bool,
}

impl ConnectionOptions {
    /// Takes in the value of one Connection field.
    #[inline]
    pub(crate) fn add(&mut self, value: &[u8]) {
        for token in list_elements(value) {
            if token.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if token.eq_ignore_ascii_case(b"keep-alive") {
                self.keep_alive = true;
            }
        }
    }

    /// HTTP/1.1 persists unless "close" was sent; HTTP/1.0 only with
    /// "keep-alive" and without "close".
    #[inline]
    pub(crate) fn persistent(self, version: Version) -> bool {
        match version {
            Version::Http11 => !self.close,
            Version::Http10 => self.keep_alive && !self.close,
        }
    }
}
