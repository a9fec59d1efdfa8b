//! Sans-I/O decoder for chunked bodies (RFC 9112 §7.1).
//!
//! A byte-at-a-time state machine for the framing lines and whole-slice
//! hand-off for chunk data, so data is never copied and the decoder's state
//! is a few words regardless of how the body is split across reads.
//!
//! It is strict, because a body the proxy reads one way and a backend reads
//! another lets a client smuggle a request past it: request bodies go to the
//! backend framed anew from what this decoder gave (extensions and trailers
//! dropped), and chunked responses are relayed as they came once it has read
//! them. So every line ends in CRLF (a bare CR or LF is an error,
//! never a line end), the chunk size is 1*HEXDIG with nothing else on the line
//! but extensions, extensions follow RFC 9112's chunk-ext grammar exactly, and
//! trailer fields are checked like header fields (RFC 9110 §5.1, §5.5): a
//! token name, a colon straight after it, a value of field-value bytes, no
//! obs-fold, and none of the fields in [`FORBIDDEN_TRAILERS`].
//!
//! Where the RFC leaves a choice: BWS (spaces and tabs) is accepted where the
//! chunk-ext grammar puts it, before and after ';' and around '=', because
//! RFC 9110 §5.6.3 tells recipients to parse and remove it; whitespace that no
//! extension follows (`5 \r\n`, `5;a \r\n`) is outside the grammar and refused.

use crate::error::RequestError;
use crate::limits::{MAX_CHUNK_LINE, MAX_CHUNK_SIZE_DIGITS, MAX_TRAILER_BYTES, MAX_TRAILER_FIELDS};
use crate::syntax::{is_field_value_byte, is_ows, is_tchar};

const FRAMING: &str = "framing field in trailer section";
const CONNECTION: &str = "connection field in trailer section";
const ROUTING: &str = "routing field in trailer section";
const AUTHENTICATION: &str = "authentication field in trailer section";
const MODIFIER: &str = "request modifier in trailer section";
const CONTENT: &str = "content format field in trailer section";

/// Fields a trailer section must not carry, lower case, each with the reason
/// its rejection gives. RFC 9110 §6.5.1 names the kinds of field that have to
/// be known before the content is processed (framing, routing,
/// authentication, request modifiers, response controls, content format);
/// these are those kinds' fields that a backend acts on. A request's trailers
/// are dropped by the proxy, but a response's are relayed as they came, and
/// a peer that merges trailers into the header section would otherwise take
/// these from the body, past every check made on the head (and past the
/// forwarding fields the proxy wrote).
pub const FORBIDDEN_TRAILERS: &[(&str, &str)] = &[
    // Message framing (RFC 9112 §6, §7).
    ("content-length", FRAMING),
    ("transfer-encoding", FRAMING),
    ("trailer", FRAMING),
    ("te", FRAMING),
    // Connection management, hop-by-hop (RFC 9110 §7.6.1).
    ("connection", CONNECTION),
    ("keep-alive", CONNECTION),
    ("proxy-connection", CONNECTION),
    ("upgrade", CONNECTION),
    // Routing, and what a proxy says about the client (RFC 9110 §7.2, §7.6;
    // RFC 7239).
    ("host", ROUTING),
    ("forwarded", ROUTING),
    ("x-forwarded-for", ROUTING),
    ("x-forwarded-host", ROUTING),
    ("x-forwarded-proto", ROUTING),
    ("via", ROUTING),
    ("max-forwards", ROUTING),
    // Authentication (RFC 9110 §11) and its usual carrier.
    ("authorization", AUTHENTICATION),
    ("proxy-authorization", AUTHENTICATION),
    ("cookie", AUTHENTICATION),
    // Request modifiers: expectations, conditionals, ranges, cache controls
    // (RFC 9110 §10.1, §13, §14; RFC 9111 §5.2, §5.4).
    ("expect", MODIFIER),
    ("range", MODIFIER),
    ("if-match", MODIFIER),
    ("if-none-match", MODIFIER),
    ("if-modified-since", MODIFIER),
    ("if-unmodified-since", MODIFIER),
    ("if-range", MODIFIER),
    ("cache-control", MODIFIER),
    ("pragma", MODIFIER),
    // Content format (RFC 9110 §8).
    ("content-type", CONTENT),
    ("content-encoding", CONTENT),
    ("content-range", CONTENT),
];

/// Length of the longest name in [`FORBIDDEN_TRAILERS`]: a trailer name is
/// kept only up to this long, since a longer one cannot be forbidden.
const FORBIDDEN_NAME_MAX: usize = {
    let mut max = 0;
    let mut i = 0;
    while i < FORBIDDEN_TRAILERS.len() {
        if FORBIDDEN_TRAILERS[i].0.len() > max {
            max = FORBIDDEN_TRAILERS[i].0.len();
        }
        i += 1;
    }
    max
};

/// The reason a trailer field name is refused, if it is.
fn forbidden_trailer(name: &[u8]) -> Option<&'static str> {
    FORBIDDEN_TRAILERS
        .iter()
        .find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
        .map(|&(_, reason)| reason)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading hex digits of a chunk size; `digits` counts them.
    Size { digits: usize },
    /// BWS after the size or an extension: only more BWS or ';' may follow.
    ExtBws,
    /// After ';' and any BWS: an extension name must start.
    ExtNameStart,
    /// Inside an extension name.
    ExtName,
    /// BWS after an extension name: '=' or ';' must follow.
    ExtNameBws,
    /// After '=' and any BWS: a token or a quoted string must start.
    ExtValueStart,
    /// Inside a token extension value.
    ExtToken,
    /// Inside a quoted extension value.
    ExtQuoted,
    /// After a backslash inside a quoted value.
    ExtQuotedPair,
    /// A quoted value has ended.
    ExtQuotedEnd,
    /// Saw CR ending the size line; LF must follow.
    SizeLf,
    /// Inside chunk data with this many bytes left.
    Data { left: u64 },
    /// Chunk data done; CRLF must follow.
    DataCr,
    /// Saw CR after chunk data; LF must follow.
    DataLf,
    /// At the start of a trailer field line or of the final empty line.
    TrailerStart,
    /// Inside a trailer field name.
    TrailerName,
    /// Inside a trailer field value (after the colon).
    TrailerValue,
    /// Saw CR ending a trailer field line; LF must follow.
    TrailerLf,
    /// Saw CR of the empty line ending the trailer section; LF must follow.
    EndLf,
    /// The body and its trailer section are complete.
    Done,
    /// A previous call failed; the error repeats.
    Failed(RequestError),
}

/// Incremental decoder for a `Transfer-Encoding: chunked` body.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    /// The chunk size read so far.
    size: u64,
    /// Bytes of the current size line, bounded by [`MAX_CHUNK_LINE`].
    line_len: usize,
    /// Bytes of the trailer section, bounded by [`MAX_TRAILER_BYTES`].
    trailer_len: usize,
    /// Trailer fields started, bounded by [`MAX_TRAILER_FIELDS`].
    trailer_fields: usize,
    /// The current trailer name, as far as it could be forbidden.
    name: [u8; FORBIDDEN_NAME_MAX],
    /// Length of the current trailer name (counted on past the array).
    name_len: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

const fn bad(reason: &'static str) -> RequestError {
    RequestError::bad_request(reason)
}

/// `qdtext` (RFC 9110 §5.6.4): a field-value byte other than DQUOTE and '\'.
fn is_qdtext(b: u8) -> bool {
    is_field_value_byte(b) && b != b'"' && b != b'\\'
}

impl ChunkedDecoder {
    /// A decoder positioned at the start of a chunked body.
    pub fn new() -> Self {
        ChunkedDecoder {
            state: State::Size { digits: 0 },
            size: 0,
            line_len: 0,
            trailer_len: 0,
            trailer_fields: 0,
            name: [0; FORBIDDEN_NAME_MAX],
            name_len: 0,
        }
    }

    /// Data bytes the chunk being read still owes, once its size line is read: a reader
    /// with a bound on the body refuses a chunk too large before its bytes arrive.
    pub fn chunk_left(&self) -> u64 {
        match self.state {
            State::Data { left } => left,
            _ => 0,
        }
    }

    /// Whether the last-chunk and trailer section have been consumed.
    pub fn is_finished(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes as much of `input` as it can, calling `on_data` for each
    /// piece of body data (borrowed from `input`, never copied).
    ///
    /// Returns (bytes consumed, finished). All of `input` is consumed unless
    /// the body finishes inside it; bytes after the end belong to the next
    /// message. Trailer fields are checked, then skipped. An error comes at
    /// the first byte that no valid body could continue with: bad syntax
    /// (a bare CR or LF included), a size of more than
    /// [`MAX_CHUNK_SIZE_DIGITS`] digits, a size line over [`MAX_CHUNK_LINE`]
    /// bytes or a forbidden trailer field give 400; a trailer section over
    /// [`MAX_TRAILER_BYTES`] bytes or [`MAX_TRAILER_FIELDS`] fields gives 431.
    /// After an error, every call returns it again.
    pub fn feed(
        &mut self,
        input: &[u8],
        mut on_data: impl FnMut(&[u8]),
    ) -> Result<(usize, bool), RequestError> {
        match self.state {
            State::Failed(e) => return Err(e),
            State::Done => return Ok((0, true)),
            _ => {}
        }
        let mut i = 0;
        while i < input.len() {
            if let State::Data { left } = self.state {
                let avail = input.len() - i;
                let n = if left < avail as u64 {
                    left as usize
                } else {
                    avail
                };
                on_data(&input[i..i + n]);
                i += n;
                let left = left - n as u64;
                self.state = if left == 0 {
                    State::DataCr
                } else {
                    State::Data { left }
                };
                continue;
            }
            let b = input[i];
            i += 1;
            match self.step(b) {
                Ok(()) => {}
                Err(e) => {
                    self.state = State::Failed(e);
                    return Err(e);
                }
            }
            if self.state == State::Done {
                return Ok((i, true));
            }
        }
        Ok((i, false))
    }

    /// Advances the framing state machine by one byte.
    fn step(&mut self, b: u8) -> Result<(), RequestError> {
        use State::*;
        match self.state {
            Size { .. }
            | ExtBws
            | ExtNameStart
            | ExtName
            | ExtNameBws
            | ExtValueStart
            | ExtToken
            | ExtQuoted
            | ExtQuotedPair
            | ExtQuotedEnd
            | SizeLf => {
                self.line_len += 1;
                if self.line_len > MAX_CHUNK_LINE {
                    return Err(bad("chunk size line too long"));
                }
            }
            TrailerStart | TrailerName | TrailerValue | TrailerLf | EndLf => {
                self.trailer_len += 1;
                if self.trailer_len > MAX_TRAILER_BYTES {
                    return Err(RequestError::new(431, "chunked trailer section too large"));
                }
            }
            Data { .. } | DataCr | DataLf | Done | Failed(_) => {}
        }
        self.state = match self.state {
            Size { digits } => match b {
                b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                    if digits == MAX_CHUNK_SIZE_DIGITS {
                        return Err(bad("chunk size has too many digits"));
                    }
                    let d = (b as char).to_digit(16).unwrap_or(0) as u64;
                    self.size = (self.size << 4) | d;
                    Size { digits: digits + 1 }
                }
                _ if digits == 0 => return Err(bad("missing chunk size")),
                b';' => ExtNameStart,
                b' ' | b'\t' => ExtBws,
                b'\r' => SizeLf,
                b'\n' => return Err(bad("bare LF in chunk size line")),
                _ => return Err(bad("invalid chunk size")),
            },
            ExtBws => match b {
                b' ' | b'\t' => ExtBws,
                b';' => ExtNameStart,
                b'\r' | b'\n' => return Err(bad("whitespace at end of chunk size line")),
                _ => return Err(bad("whitespace not followed by ';' in chunk size line")),
            },
            ExtNameStart => match b {
                b' ' | b'\t' => ExtNameStart,
                _ if is_tchar(b) => ExtName,
                _ => return Err(bad("missing chunk extension name")),
            },
            ExtName => match b {
                _ if is_tchar(b) => ExtName,
                b'=' => ExtValueStart,
                b';' => ExtNameStart,
                b' ' | b'\t' => ExtNameBws,
                b'\r' => SizeLf,
                b'\n' => return Err(bad("bare LF in chunk size line")),
                _ => return Err(bad("invalid byte in chunk extension name")),
            },
            ExtNameBws => match b {
                b' ' | b'\t' => ExtNameBws,
                b'=' => ExtValueStart,
                b';' => ExtNameStart,
                b'\r' | b'\n' => return Err(bad("whitespace at end of chunk size line")),
                _ => return Err(bad("invalid byte after chunk extension name")),
            },
            ExtValueStart => match b {
                b' ' | b'\t' => ExtValueStart,
                b'"' => ExtQuoted,
                _ if is_tchar(b) => ExtToken,
                _ => return Err(bad("missing chunk extension value")),
            },
            ExtToken => match b {
                _ if is_tchar(b) => ExtToken,
                b';' => ExtNameStart,
                b' ' | b'\t' => ExtBws,
                b'\r' => SizeLf,
                b'\n' => return Err(bad("bare LF in chunk size line")),
                _ => return Err(bad("invalid byte in chunk extension value")),
            },
            ExtQuoted => match b {
                b'"' => ExtQuotedEnd,
                b'\\' => ExtQuotedPair,
                _ if is_qdtext(b) => ExtQuoted,
                _ => return Err(bad("invalid byte in quoted chunk extension value")),
            },
            ExtQuotedPair => match b {
                _ if is_field_value_byte(b) => ExtQuoted,
                _ => return Err(bad("invalid quoted-pair in chunk extension value")),
            },
            ExtQuotedEnd => match b {
                b';' => ExtNameStart,
                b' ' | b'\t' => ExtBws,
                b'\r' => SizeLf,
                b'\n' => return Err(bad("bare LF in chunk size line")),
                _ => return Err(bad("invalid byte after quoted chunk extension value")),
            },
            SizeLf => match b {
                b'\n' => self.size_line_done(),
                _ => return Err(bad("bare CR in chunk size line")),
            },
            DataCr => match b {
                b'\r' => DataLf,
                b'\n' => return Err(bad("bare LF after chunk data")),
                _ => return Err(bad("missing CRLF after chunk data")),
            },
            DataLf => match b {
                b'\n' => Size { digits: 0 },
                _ => return Err(bad("bare CR after chunk data")),
            },
            TrailerStart => match b {
                b'\r' => EndLf,
                b'\n' => return Err(bad("bare LF in trailer section")),
                _ if self.trailer_fields == MAX_TRAILER_FIELDS => {
                    return Err(RequestError::new(431, "too many trailer fields"))
                }
                _ if is_ows(b) => return Err(bad("obs-fold or whitespace in trailer section")),
                b':' => return Err(bad("empty trailer field name")),
                _ if is_tchar(b) => {
                    self.trailer_fields += 1;
                    self.name_len = 0;
                    self.push_name(b);
                    TrailerName
                }
                _ => return Err(bad("invalid byte in trailer field name")),
            },
            TrailerName => match b {
                _ if is_tchar(b) => {
                    self.push_name(b);
                    TrailerName
                }
                b':' => {
                    let name = &self.name[..self.name_len.min(FORBIDDEN_NAME_MAX)];
                    if self.name_len <= FORBIDDEN_NAME_MAX {
                        if let Some(reason) = forbidden_trailer(name) {
                            return Err(bad(reason));
                        }
                    }
                    TrailerValue
                }
                b' ' | b'\t' => return Err(bad("whitespace before colon in trailer field")),
                b'\r' | b'\n' => return Err(bad("trailer field line without colon")),
                _ => return Err(bad("invalid byte in trailer field name")),
            },
            TrailerValue => match b {
                _ if is_field_value_byte(b) => TrailerValue,
                b'\r' => TrailerLf,
                b'\n' => return Err(bad("bare LF in trailer section")),
                0 => return Err(bad("NUL in trailer field value")),
                _ => return Err(bad("control byte in trailer field value")),
            },
            TrailerLf => match b {
                b'\n' => TrailerStart,
                _ => return Err(bad("bare CR in trailer section")),
            },
            EndLf => match b {
                b'\n' => Done,
                _ => return Err(bad("bare CR in trailer section")),
            },
            // Data is handled in `feed`; Done/Failed never reach here.
            s @ (Data { .. } | Done | Failed(_)) => s,
        };
        Ok(())
    }

    /// Keeps a trailer name's byte while the name could still be forbidden.
    fn push_name(&mut self, b: u8) {
        if let Some(slot) = self.name.get_mut(self.name_len) {
            *slot = b;
        }
        self.name_len = self.name_len.saturating_add(1);
    }

    fn size_line_done(&mut self) -> State {
        self.line_len = 0;
        let size = std::mem::take(&mut self.size);
        if size == 0 {
            State::TrailerStart
        } else {
            State::Data { left: size }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Decoded = Result<(usize, bool, Vec<u8>), RequestError>;

    /// Feeds `input` in pieces cut at `cuts` (ascending offsets), stopping
    /// where the body ends: (consumed, finished, body) or the error.
    fn decode_cut(input: &[u8], cuts: &[usize]) -> Decoded {
        let mut d = ChunkedDecoder::new();
        let mut body = Vec::new();
        let mut bounds = cuts.to_vec();
        bounds.push(input.len());
        let mut start = 0;
        let mut total = 0;
        for end in bounds {
            let piece = &input[start..end];
            let (n, done) = d.feed(piece, |b| body.extend_from_slice(b))?;
            total += n;
            if done {
                return Ok((total, true, body));
            }
            assert_eq!(n, piece.len(), "an unfinished decoder left bytes");
            start = end;
        }
        Ok((total, false, body))
    }

    /// Feeds all of `input` at once.
    fn decode(input: &[u8]) -> Decoded {
        decode_cut(input, &[])
    }

    /// Decodes `input` whole, cut once at every offset, cut twice at every
    /// pair of offsets (short inputs) and one byte at a time: all must agree.
    fn decode_every_split(input: &[u8]) -> Decoded {
        let whole = decode(input);
        let show = String::from_utf8_lossy(input);
        for a in 0..=input.len() {
            assert_eq!(decode_cut(input, &[a]), whole, "{show:?} cut at {a}");
            if input.len() <= 64 {
                for b in a..=input.len() {
                    assert_eq!(decode_cut(input, &[a, b]), whole, "{show:?} cut {a}/{b}");
                }
            }
        }
        let bytes: Vec<usize> = (1..input.len()).collect();
        assert_eq!(decode_cut(input, &bytes), whole, "{show:?} byte by byte");
        whole
    }

    /// The error `input` gives, however it is split.
    fn error(input: &[u8]) -> RequestError {
        decode_every_split(input).expect_err(&format!("{:?}", String::from_utf8_lossy(input)))
    }

    /// Asserts a complete body decoding to `want`, however it is split.
    #[track_caller]
    fn accepts(input: &[u8], want: &[u8]) {
        assert_eq!(
            decode_every_split(input),
            Ok((input.len(), true, want.to_vec())),
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }

    /// Asserts a 400 with `reason`, however the input is split.
    #[track_caller]
    fn rejects(input: &[u8], reason: &str) {
        let e = error(input);
        assert_eq!(
            (e.status, e.reason),
            (400, reason),
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }

    #[test]
    fn simple_body() {
        accepts(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", b"hello world");
        accepts(b"0\r\n\r\n", b"");
    }

    #[test]
    fn hex_sizes_any_case() {
        let mut input = b"A\r\n0123456789\r\nb\r\n0123456789a\r\n0\r\n\r\n".to_vec();
        let (_, done, body) = decode(&input).unwrap();
        assert!(done);
        assert_eq!(body.len(), 21);
        input.splice(0..1, b"000a".iter().copied());
        assert_eq!(decode(&input).unwrap().2.len(), 21);
    }

    #[test]
    fn stops_at_end_of_body() {
        let input = b"3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\n";
        assert_eq!(decode_every_split(input), Ok((13, true, b"abc".to_vec())));
        let mut d = ChunkedDecoder::new();
        d.feed(input, |_| {}).unwrap();
        assert!(d.is_finished());
        assert_eq!(
            d.feed(b"more", |_| panic!("no data after end")),
            Ok((0, true))
        );
    }

    #[test]
    fn valid_extensions() {
        accepts(
            b"5;name=value;flag\r\nhello\r\n3;q=\"a;b\"\r\nabc\r\n0;last\r\n\r\n",
            b"helloabc",
        );
        // BWS where the chunk-ext grammar allows it.
        accepts(b"3 ;a\r\nabc\r\n0\r\n\r\n", b"abc");
        accepts(b"3\t; \ta \t= \tb ;c\r\nabc\r\n0\r\n\r\n", b"abc");
        accepts(b"3;a=\"b\" ;c=d\r\nabc\r\n0\r\n\r\n", b"abc");
        // Quoted strings: escapes, separators, obs-text.
        accepts(b"1;a=\"x\\\"; \\\\\t=\x80\"\r\nz\r\n0\r\n\r\n", b"z");
        accepts(b"1;a=\"\"\r\nz\r\n0\r\n\r\n", b"z");
        accepts(b"1;!#$%&'*+-.^_`|~=!#$%&'*+-.^_`|~\r\nz\r\n0\r\n\r\n", b"z");
    }

    #[test]
    fn bad_extensions() {
        // The funky-chunks shapes: an empty extension, a bare LF in or after one.
        rejects(b"2;\nxx\r\n45\r\n0\r\n\r\n", "missing chunk extension name");
        rejects(b"2;\r\nxx\r\n0\r\n\r\n", "missing chunk extension name");
        rejects(b"5;foo\nhello\r\n0\r\n\r\n", "bare LF in chunk size line");
        rejects(b"5;a=b\nhello\r\n0\r\n\r\n", "bare LF in chunk size line");
        rejects(
            b"5;a=\"b\"\nhello\r\n0\r\n\r\n",
            "bare LF in chunk size line",
        );
        rejects(
            b"5;a=\"b\nc\"\r\nhello\r\n0\r\n\r\n",
            "invalid byte in quoted chunk extension value",
        );
        rejects(
            b"5;a=\"b\rc\"\r\nhello\r\n0\r\n\r\n",
            "invalid byte in quoted chunk extension value",
        );
        rejects(b"5;foo\rhello\r\n0\r\n\r\n", "bare CR in chunk size line");
        rejects(
            b"5;;a\r\nhello\r\n0\r\n\r\n",
            "missing chunk extension name",
        );
        rejects(
            b"5;=a\r\nhello\r\n0\r\n\r\n",
            "missing chunk extension name",
        );
        rejects(
            b"5;a=\r\nhello\r\n0\r\n\r\n",
            "missing chunk extension value",
        );
        rejects(
            b"5;a=;b\r\nhello\r\n0\r\n\r\n",
            "missing chunk extension value",
        );
        rejects(
            b"5;a b\r\nhello\r\n0\r\n\r\n",
            "invalid byte after chunk extension name",
        );
        rejects(
            b"5;a=b c\r\nhello\r\n0\r\n\r\n",
            "whitespace not followed by ';' in chunk size line",
        );
        rejects(
            b"5;a=\"b\"c\r\nhello\r\n0\r\n\r\n",
            "invalid byte after quoted chunk extension value",
        );
        rejects(
            b"5;a=b\"c\"\r\nhello\r\n0\r\n\r\n",
            "invalid byte in chunk extension value",
        );
        rejects(
            b"5;a@b\r\nhello\r\n0\r\n\r\n",
            "invalid byte in chunk extension name",
        );
        rejects(
            b"5;a=\"b\\\x01\"\r\nhello\r\n0\r\n\r\n",
            "invalid quoted-pair in chunk extension value",
        );
        rejects(
            b"5;a=\"b\x7f\"\r\nhello\r\n0\r\n\r\n",
            "invalid byte in quoted chunk extension value",
        );
        rejects(
            b"1;a\x01b\r\nx\r\n0\r\n\r\n",
            "invalid byte in chunk extension name",
        );
        rejects(
            b"1;a\x00\r\nx\r\n0\r\n\r\n",
            "invalid byte in chunk extension name",
        );
        // Whitespace that no extension follows.
        rejects(
            b"5;a \r\nhello\r\n0\r\n\r\n",
            "whitespace at end of chunk size line",
        );
        rejects(
            b"5;a=b\t\r\nhello\r\n0\r\n\r\n",
            "whitespace at end of chunk size line",
        );
        // An unterminated quoted string runs into the line limit.
        let mut long = b"1;a=\"".to_vec();
        long.resize(MAX_CHUNK_LINE + 10, b'x');
        rejects(&long, "chunk size line too long");
    }

    #[test]
    fn line_limit() {
        let mut line = b"1;a=".to_vec();
        line.resize(MAX_CHUNK_LINE - 2, b'x');
        line.extend_from_slice(b"\r\n");
        let mut input = line.clone();
        input.extend_from_slice(b"z\r\n0\r\n\r\n");
        assert_eq!(decode(&input), Ok((input.len(), true, b"z".to_vec())));
        line.insert(5, b'x');
        line.extend_from_slice(b"z\r\n0\r\n\r\n");
        assert_eq!(
            decode(&line).unwrap_err().reason,
            "chunk size line too long"
        );
    }

    #[test]
    fn bad_sizes() {
        rejects(
            b"5 \r\nhello\r\n0\r\n\r\n",
            "whitespace at end of chunk size line",
        );
        rejects(
            b"5\t\r\nhello\r\n0\r\n\r\n",
            "whitespace at end of chunk size line",
        );
        rejects(
            b"5 5\r\nhello\r\n0\r\n\r\n",
            "whitespace not followed by ';' in chunk size line",
        );
        rejects(b"\t5\r\nhello\r\n0\r\n\r\n", "missing chunk size");
        rejects(b" 5\r\nhello\r\n0\r\n\r\n", "missing chunk size");
        rejects(b"+5\r\nhello\r\n0\r\n\r\n", "missing chunk size");
        rejects(b"-5\r\nhello\r\n0\r\n\r\n", "missing chunk size");
        rejects(b"0x5\r\nhello\r\n0\r\n\r\n", "invalid chunk size");
        rejects(b"5g\r\nhello\r\n0\r\n\r\n", "invalid chunk size");
        rejects(b"\r\nhello\r\n0\r\n\r\n", "missing chunk size");
        rejects(b";a\r\nhello\r\n0\r\n\r\n", "missing chunk size");
        rejects(b"5\nhello\r\n0\r\n\r\n", "bare LF in chunk size line");
        rejects(b"5\rhello\r\n0\r\n\r\n", "bare CR in chunk size line");
        rejects(b"0\n\r\n", "bare LF in chunk size line");
        rejects(b"1\r\na\r\n\r\n", "missing chunk size");
    }

    #[test]
    fn size_digits() {
        // Sixteen digits, leading zeros included, and no more.
        accepts(b"0000000000000005\r\nhello\r\n0\r\n\r\n", b"hello");
        accepts(b"0000000000000000\r\n\r\n", b"");
        rejects(
            b"00000000000000005\r\nhello\r\n0\r\n\r\n",
            "chunk size has too many digits",
        );
        rejects(b"10000000000000000\r\n", "chunk size has too many digits");
        // The largest size is fine syntactically (the caller limits bodies).
        let mut d = ChunkedDecoder::new();
        assert_eq!(d.feed(b"ffffffffffffffff\r\nab", |_| {}), Ok((20, false)));
    }

    #[test]
    fn bad_data_ends() {
        rejects(b"5\r\nhello\n0\r\n\r\n", "bare LF after chunk data");
        rejects(b"5\r\nhello\r0\r\n\r\n", "bare CR after chunk data");
        rejects(b"5\r\nhelloX\r\n0\r\n\r\n", "missing CRLF after chunk data");
        rejects(b"5\r\nhello0\r\n\r\n", "missing CRLF after chunk data");
        rejects(b"1\r\nab\r\n", "missing CRLF after chunk data");
    }

    #[test]
    fn valid_trailers() {
        let input = b"2\r\nhi\r\n0\r\nX-Checksum: abc\r\nX-Other: d\r\n\r\nNEXT";
        assert_eq!(
            decode_every_split(input),
            Ok((input.len() - 4, true, b"hi".to_vec()))
        );
        accepts(b"0\r\nX-Empty:\r\n\r\n", b"");
        accepts(b"0\r\nX-Ows: \t a \t b \t\r\n\r\n", b"");
        accepts(b"0\r\nX-Obs-Text: \x80\xff\r\n\r\n", b"");
        accepts(b"0\r\nx:y\r\nServer-Timing: db;dur=53\r\n\r\n", b"");
        // A name that only starts like a forbidden one is fine.
        accepts(b"0\r\nHosts: a\r\nContent-Lengths: 1\r\nT: x\r\n\r\n", b"");
        let long = format!("0\r\n{}: x\r\n\r\n", "a".repeat(100));
        accepts(long.as_bytes(), b"");
    }

    #[test]
    fn bad_trailers() {
        rejects(b"0\r\nhello\r\n\r\n", "trailer field line without colon");
        rejects(b"0\r\nX: a\x00b\r\n\r\n", "NUL in trailer field value");
        rejects(
            b"0\r\nX: a\x01b\r\n\r\n",
            "control byte in trailer field value",
        );
        rejects(
            b"0\r\nX: a\x7fb\r\n\r\n",
            "control byte in trailer field value",
        );
        rejects(
            b"0\r\nX: a\r\n b\r\n\r\n",
            "obs-fold or whitespace in trailer section",
        );
        rejects(
            b"0\r\nX: a\r\n\tb\r\n\r\n",
            "obs-fold or whitespace in trailer section",
        );
        rejects(
            b"0\r\n X: a\r\n\r\n",
            "obs-fold or whitespace in trailer section",
        );
        rejects(
            b"0\r\nX : a\r\n\r\n",
            "whitespace before colon in trailer field",
        );
        rejects(b"0\r\n: a\r\n\r\n", "empty trailer field name");
        rejects(b"0\r\nX(: a\r\n\r\n", "invalid byte in trailer field name");
        rejects(
            b"0\r\n\x00: a\r\n\r\n",
            "invalid byte in trailer field name",
        );
        rejects(b"0\r\nX: a\nY: b\r\n\r\n", "bare LF in trailer section");
        rejects(b"0\r\nX: a\rY: b\r\n\r\n", "bare CR in trailer section");
        rejects(b"0\r\nX: a\r\n\n", "bare LF in trailer section");
        rejects(b"0\r\n\n", "bare LF in trailer section");
        rejects(b"0\r\n\rx", "bare CR in trailer section");
        rejects(b"0\r\nX\n\r\n", "trailer field line without colon");
    }

    #[test]
    fn forbidden_trailers() {
        for &(name, reason) in FORBIDDEN_TRAILERS {
            for spelled in [name.to_string(), name.to_ascii_uppercase()] {
                let input = format!("1\r\nx\r\n0\r\nX-Fine: 1\r\n{spelled}: 5\r\n\r\n");
                rejects(input.as_bytes(), reason);
            }
        }
        rejects(b"0\r\nContent-Length: 0\r\n\r\n", FRAMING);
        rejects(b"0\r\nTransfer-Encoding: chunked\r\n\r\n", FRAMING);
        rejects(b"0\r\nHost: evil\r\n\r\n", ROUTING);
        assert_eq!(
            FORBIDDEN_NAME_MAX,
            FORBIDDEN_TRAILERS
                .iter()
                .map(|(n, _)| n.len())
                .max()
                .unwrap()
        );
        for (name, _) in FORBIDDEN_TRAILERS {
            assert_eq!(name.to_ascii_lowercase(), *name);
        }
    }

    #[test]
    fn trailer_limits() {
        let mut big = b"0\r\n".to_vec();
        while big.len() < MAX_TRAILER_BYTES + 100 {
            big.extend_from_slice(format!("X-Pad: {}\r\n", "a".repeat(500)).as_bytes());
        }
        big.extend_from_slice(b"\r\n");
        let e = decode(&big).unwrap_err();
        assert_eq!(
            (e.status, e.reason),
            (431, "chunked trailer section too large")
        );

        let mut many = b"0\r\n".to_vec();
        for _ in 0..MAX_TRAILER_FIELDS {
            many.extend_from_slice(b"X: y\r\n");
        }
        let mut ok = many.clone();
        ok.extend_from_slice(b"\r\n");
        assert_eq!(decode(&ok), Ok((ok.len(), true, Vec::new())));
        many.extend_from_slice(b"X: y\r\n\r\n");
        let e = decode(&many).unwrap_err();
        assert_eq!((e.status, e.reason), (431, "too many trailer fields"));
    }

    #[test]
    fn errors_repeat() {
        let mut d = ChunkedDecoder::new();
        let e = d.feed(b"zz", |_| {}).unwrap_err();
        assert_eq!(d.feed(b"0\r\n\r\n", |_| {}), Err(e));
    }

    #[test]
    fn errors_come_at_the_first_bad_byte() {
        // Nothing after the offending byte is looked at: the decoder fails on
        // the prefix that ends with it, whatever follows.
        for (input, at) in [
            (&b"2;\nxx\r\n45\r\n0\r\n\r\n"[..], 3),
            (b"5\r\nhello\n0\r\n\r\n", 9),
            (b"5 \r\nhello\r\n0\r\n\r\n", 3),
            (b"0\r\nhello\r\n\r\n", 9),
        ] {
            assert_eq!(decode(&input[..at - 1]).map(|r| r.1), Ok(false));
            assert!(decode(&input[..at]).is_err());
        }
    }

    #[test]
    fn split_at_every_offset() {
        let input: &[u8] =
            b"4;x=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nT: v\r\n\r\n";
        accepts(input, b"Wikipedia in\r\n\r\nchunks.");
    }

    #[test]
    fn partial_input_is_not_finished() {
        let input = b"5;a=\"b\"\r\nhello\r\n0\r\nT: v\r\n\r\n";
        for k in 0..input.len() {
            let (n, done, _) = decode(&input[..k]).unwrap();
            assert_eq!((n, done), (k, false));
        }
    }
}
