//! Fuzz entry points, shared by the cargo-fuzz targets and the stable-Rust
//! corpus replay test. Each function runs the public API on arbitrary bytes
//! and panics when an invariant breaks; allocation here is fine because this
//! is never on the serving path.

use std::fmt;

use crate::{
    etag_list_matches, normalize_path, parse_accept_encoding, parse_http_date, parse_range,
    parse_target, write_header, write_http_date, BodyFraming, ChunkedDecoder, Limits, Parser,
    RangeRequest, Request, RequestError, Target, Version, MAX_RANGES,
};

mod chunked_reference;
pub use chunked_reference::{reference_chunked, ChunkedOutcome};
mod h2_connection;
pub use h2_connection::{h2_connection, h2_serve, H2_CONNECTION_SETTINGS};
mod h2_frames;
pub use h2_frames::{h2_frames, h2_read, H2_BLOCK_LIMITS, H2_MAX_FRAME_SIZE};
mod hpack;
pub use hpack::{hpack_decode, HPACK_LIMITS, HPACK_TABLE_SIZE};
mod response;
pub use response::response;
#[cfg(test)]
pub(crate) use response::{ResponseOutcome, ResponseSummary, ResponseTo};

/// An owned copy of everything a [`Request`] exposes, for comparisons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) method: String,
    pub(crate) target: String,
    pub(crate) version: Version,
    pub(crate) head_len: usize,
    pub(crate) framing: BodyFraming,
    pub(crate) keep_alive: bool,
    pub(crate) expect_continue: bool,
    pub(crate) host: Option<String>,
    pub(crate) headers: Vec<(String, Vec<u8>)>,
}

/// What parsing a head gave, owned so that results can be compared.
pub(crate) type Parsed<S> = Result<Option<S>, RequestError>;

pub(crate) type Outcome = Parsed<Summary>;

pub(crate) fn summarize(r: Result<Option<Request<'_>>, RequestError>) -> Outcome {
    r.map(|o| {
        o.map(|r| Summary {
            method: r.method.to_owned(),
            target: r.target.to_owned(),
            version: r.version,
            head_len: r.head_len,
            framing: r.framing,
            keep_alive: r.keep_alive,
            expect_continue: r.expect_continue,
            host: r.host.map(str::to_owned),
            headers: r
                .headers()
                .map(|(n, v)| (n.to_owned(), v.to_vec()))
                .collect(),
        })
    })
}

/// A head parser seen through owned summaries, so that one set of split
/// checks serves requests and responses.
pub(crate) trait SummaryParser {
    type Summary: fmt::Debug + PartialEq;

    fn parse_summary(&mut self, data: &[u8]) -> Parsed<Self::Summary>;

    fn reset(&mut self);

    /// Where the summarised head ends in the input.
    fn head_len(summary: &Self::Summary) -> usize;
}

impl SummaryParser for Parser {
    type Summary = Summary;

    fn parse_summary(&mut self, data: &[u8]) -> Outcome {
        summarize(self.parse(data))
    }

    fn reset(&mut self) {
        Parser::reset(self);
    }

    fn head_len(summary: &Summary) -> usize {
        summary.head_len
    }
}

/// FNV-1a: a cheap, deterministic way to derive split points from the input.
fn hash(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Exercises the request parser and every helper that reads request data.
pub fn request(data: &[u8]) {
    let whole = check_parser(data, Limits::default());
    if let Ok(Some(s)) = &whole {
        compare_with_httparse(data, s);
        check_target(&s.target);
    }
    let _ = check_parser(
        data,
        Limits {
            max_request_line: 32,
            max_header_bytes: 128,
            max_headers: 4,
        },
    );
    check_pipeline(data);
    if let Ok(s) = std::str::from_utf8(data) {
        check_target(s);
        check_path(s);
    }
    check_range(data);
    check_helpers(data);
}

/// Parses `data` whole, split once at a derived offset, and grown one byte at
/// a time with one reused parser; all must agree. Returns the whole result.
fn check_parser(data: &[u8], limits: Limits) -> Outcome {
    let whole = Parser::new(limits).parse_summary(data);
    check_request_invariants(data, &whole, limits);
    check_splits(data, &whole, Parser::new(limits));
    whole
}

/// Feeds `data` to `reused` in two pieces cut at a derived offset, then,
/// after a reset, one byte at a time (the slow-loris path); both must end
/// with `whole`, the result of parsing it in one piece.
fn check_splits<P: SummaryParser>(data: &[u8], whole: &Parsed<P::Summary>, mut reused: P) {
    let cut = (hash(data) % (data.len() as u64 + 1)) as usize;
    let first = reused.parse_summary(&data[..cut]);
    check_prefix::<P>(&first, whole, cut);
    let second = reused.parse_summary(data);
    assert_eq!(&second, whole, "split at {cut} changed the result");

    reused.reset();
    for n in 0..=data.len() {
        let r = reused.parse_summary(&data[..n]);
        if n == data.len() {
            assert_eq!(&r, whole, "byte-by-byte result differs");
        } else {
            check_prefix::<P>(&r, whole, n);
            if !matches!(r, Ok(None)) {
                break;
            }
        }
    }
}

/// A prefix of `n` bytes may only say "need more", or already give the
/// result the whole input gives.
fn check_prefix<P: SummaryParser>(
    prefix: &Parsed<P::Summary>,
    whole: &Parsed<P::Summary>,
    n: usize,
) {
    match prefix {
        Ok(None) => {
            if let Ok(Some(s)) = whole {
                assert!(P::head_len(s) > n, "complete head not seen in prefix");
            }
        }
        other => assert_eq!(other, whole, "prefix of {n} bytes disagrees"),
    }
}

fn check_request_invariants(data: &[u8], outcome: &Outcome, limits: Limits) {
    match outcome {
        Ok(Some(s)) => {
            check_head_bounds(data, limits, s.head_len, &s.headers);
            assert!(!s.method.is_empty());
            assert!(!s.target.is_empty());
            assert!(s.target.len() <= limits.max_request_line);
            assert!(s.target.bytes().all(|b| (0x21..=0x7e).contains(&b)));
            if s.version == Version::Http11 {
                assert!(s.host.is_some(), "HTTP/1.1 without Host accepted");
            }
            if s.framing == BodyFraming::Chunked {
                assert_eq!(s.version, Version::Http11);
            }
        }
        Ok(None) => {}
        Err(e) => {
            assert!(
                matches!(e.status, 400 | 414 | 417 | 431 | 501 | 505),
                "unexpected status {e}"
            );
        }
    }
}

/// What holds for any accepted head, request or response: it lies within
/// the input and the limits, and its fields are clean tokens and values.
fn check_head_bounds(data: &[u8], limits: Limits, head_len: usize, headers: &[(String, Vec<u8>)]) {
    assert!(head_len <= data.len());
    assert!(head_len <= limits.max_header_bytes);
    assert!(headers.len() <= limits.max_headers);
    for (name, value) in headers {
        assert!(!name.is_empty() && crate::syntax::is_token(name.as_bytes()));
        assert!(!value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0));
    }
}

/// httparse is an independent HTTP/1 parser: every head we accept that it
/// understands (HTTP/1.0 and 1.1 only) must parse identically there.
fn compare_with_httparse(data: &[u8], s: &Summary) {
    let Some(t_end) = find_target_end(data, s) else {
        return;
    };
    let raw_version = &data[t_end + 1..t_end + 9];
    if raw_version != b"HTTP/1.0" && raw_version != b"HTTP/1.1" {
        return;
    }
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(data) {
        Ok(httparse::Status::Complete(len)) => {
            assert_eq!(len, s.head_len, "httparse head length differs");
            assert_eq!(req.method, Some(s.method.as_str()));
            assert_eq!(req.path, Some(s.target.as_str()));
            compare_fields(req.headers, &s.headers);
        }
        other => panic!("we accepted a head httparse rejects: {other:?}"),
    }
}

/// httparse leaves trailing OWS on values; otherwise the fields must match.
fn compare_fields(theirs: &[httparse::Header<'_>], ours: &[(String, Vec<u8>)]) {
    assert_eq!(theirs.len(), ours.len());
    for (h, (name, value)) in theirs.iter().zip(ours) {
        assert_eq!(h.name, name);
        assert_eq!(crate::syntax::trim_ows(h.value), &value[..]);
    }
}

/// Offset of the SP after the request-target, from the target's position.
fn find_target_end(data: &[u8], s: &Summary) -> Option<usize> {
    // The request line is the first non-empty line.
    let mut start = 0;
    while data.get(start) == Some(&b'\r') || data.get(start) == Some(&b'\n') {
        start += 1;
    }
    let t_start = start + s.method.len() + 1;
    let t_end = t_start + s.target.len();
    (data.len() >= t_end + 9 && &data[t_start..t_end] == s.target.as_bytes()).then_some(t_end)
}

/// Serves pipelined requests the way the server will: parse, skip the body,
/// reset, continue with the rest.
fn check_pipeline(data: &[u8]) {
    let mut parser = Parser::new(Limits::default());
    let mut pos = 0;
    for _ in 0..16 {
        let rest = &data[pos..];
        let (head_len, framing) = match parser.parse(rest) {
            Ok(Some(r)) => (r.head_len, r.framing),
            _ => return,
        };
        let body = &rest[head_len..];
        let body_len = match framing {
            BodyFraming::None => Some(0),
            BodyFraming::Length(n) => sized_body(n, body),
            BodyFraming::Chunked => chunked_body(body),
        };
        let Some(body_len) = body_len else {
            return;
        };
        pos += head_len + body_len;
        parser.reset();
    }
}

/// The length of a body of `n` bytes, if all of it is in `rest`.
fn sized_body(n: u64, rest: &[u8]) -> Option<usize> {
    usize::try_from(n).ok().filter(|&n| n <= rest.len())
}

/// The length of the chunked body at the start of `rest`, if it is complete.
fn chunked_body(rest: &[u8]) -> Option<usize> {
    match ChunkedDecoder::new().feed(rest, |_| {}) {
        Ok((n, true)) => Some(n),
        _ => None,
    }
}

fn check_target(s: &str) {
    let Ok(t) = parse_target(s) else {
        return;
    };
    assert!(!s.contains('#'));
    match t {
        Target::Origin { path, query } => {
            assert!(path.starts_with('/'));
            assert!(!path.contains('?'));
            assert_eq!(path.len() + query.map_or(0, |q| q.len() + 1), s.len());
            check_path(path);
        }
        Target::Absolute {
            scheme,
            authority,
            path,
            ..
        } => {
            assert!(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"));
            assert!(!authority.is_empty());
            assert!(path.starts_with('/'));
            check_path(path);
        }
        Target::Authority(a) => assert!(a.contains(':')),
        Target::Asterisk => assert_eq!(s, "*"),
    }
}

/// Checks `normalize_path` against its invariants and a naive reference.
fn check_path(s: &str) {
    let mut out = Vec::new();
    let result = normalize_path(s, &mut out);
    assert_eq!(result.map(|_| out.clone()), reference_normalize(s));
    if result.is_ok() {
        assert_eq!(out.first(), Some(&b'/'));
        assert!(!out.contains(&0));
        assert!(!out.contains(&b'\\'));
        let inner = &out[1..];
        let inner = inner.strip_suffix(b"/").unwrap_or(inner);
        if !inner.is_empty() {
            for seg in inner.split(|&b| b == b'/') {
                assert!(!seg.is_empty(), "empty segment in {out:?}");
                assert!(seg != b"." && seg != b"..", "dot segment in {out:?}");
            }
        }
    }
}

/// The obvious allocating implementation of the normalisation rules.
fn reference_normalize(s: &str) -> Result<Vec<u8>, crate::PathError> {
    use crate::PathError;
    let raw = s.as_bytes();
    let mut decoded = Vec::new();
    let mut i = 0;
    // Decoding errors are reported in input order, before any ".." check.
    while i < raw.len() {
        let b = if raw[i] == b'%' {
            let hex = raw.get(i + 1..i + 3).ok_or(PathError::BadEscape)?;
            let hex = std::str::from_utf8(hex).map_err(|_| PathError::BadEscape)?;
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(PathError::BadEscape);
            }
            i += 3;
            u8::from_str_radix(hex, 16).map_err(|_| PathError::BadEscape)?
        } else {
            i += 1;
            raw[i - 1]
        };
        match b {
            0 => return Err(PathError::Nul),
            b'\\' => return Err(PathError::Backslash),
            _ => decoded.push(b),
        }
    }
    let mut stack: Vec<&[u8]> = Vec::new();
    let segs: Vec<&[u8]> = decoded.split(|&b| b == b'/').collect();
    let mut dir = false;
    for seg in &segs {
        dir = true;
        match *seg {
            b"" | b"." => {}
            b".." => {
                stack.pop().ok_or(PathError::AboveRoot)?;
            }
            _ => {
                stack.push(seg);
                dir = false;
            }
        }
    }
    let mut out = vec![b'/'];
    out.extend(stack.join(&b'/'));
    if dir && !stack.is_empty() {
        out.push(b'/');
    }
    Ok(out)
}

fn check_range(data: &[u8]) {
    let h = hash(data);
    for size in [0, 1, 1000, h % 100_000, u64::MAX] {
        match parse_range(Some(data), size) {
            RangeRequest::Ranges(r) => {
                assert!(!r.is_empty() && r.len() <= MAX_RANGES);
                for (a, b) in r {
                    assert!(a <= b && b < size, "bad range {a}-{b} for size {size}");
                }
            }
            RangeRequest::Unsatisfiable | RangeRequest::Ignore => {}
        }
    }
}

fn check_helpers(data: &[u8]) {
    for etag in ["\"abc\"", "W/\"abc\"", "\"\""] {
        let strong = etag_list_matches(data, etag, true);
        let weak = etag_list_matches(data, etag, false);
        assert!(!strong || weak, "strong match without weak match");
    }

    let ae = parse_accept_encoding(Some(data));
    for q in [ae.br, ae.gzip] {
        assert!((0.0..=1.0).contains(&q), "q-value {q} out of range");
    }

    if let Some(t) = parse_http_date(data) {
        let mut out = Vec::new();
        write_http_date(t, &mut out);
        assert_eq!(out.len(), 29);
        assert_eq!(parse_http_date(&out), Some(t), "date did not round-trip");
    }

    let mut out = Vec::new();
    write_header("X-Fuzz", data, &mut out);
    assert!(out.ends_with(b"\r\n"));
    let body = &out[..out.len() - 2];
    assert!(
        !body.contains(&b'\r') && !body.contains(&b'\n'),
        "header injection"
    );
}

/// Exercises the chunked decoder: whole vs. split feeds, each compared with
/// the reference decoder, plus a round trip of a body encoded from the input.
pub fn chunked(data: &[u8]) {
    let whole = decode(data, &[]);
    let h = hash(data);
    // Piece sizes derived from the input, between 1 and 16 bytes.
    let pieces: Vec<usize> = (0..data.len())
        .map(|i| ((h >> (i % 60)) & 0xf) as usize + 1)
        .collect();
    assert_eq!(decode(data, &pieces), whole, "split feed differs");
    assert_eq!(decode(data, &[1]), whole, "byte-by-byte feed differs");
    if let Ok((consumed, finished, _)) = &whole {
        assert!(*consumed <= data.len());
        assert!(*finished || *consumed == data.len());
    }
    assert_eq!(
        outcome(whole),
        reference_chunked(data),
        "the decoder and the reference disagree"
    );

    // Round trip: encode the input as a chunked body and decode it back.
    let mut encoded = Vec::new();
    let mut rest = data;
    let mut i = 0;
    while !rest.is_empty() {
        let n = (((h >> (i % 56)) & 0xff) as usize + 1).min(rest.len());
        encoded.extend_from_slice(format!("{n:x}").as_bytes());
        if i % 3 == 1 {
            encoded.extend_from_slice(b" ;ext=\"v\";x");
        }
        encoded.extend_from_slice(b"\r\n");
        encoded.extend_from_slice(&rest[..n]);
        encoded.extend_from_slice(b"\r\n");
        rest = &rest[n..];
        i += 1;
    }
    encoded.extend_from_slice(b"0\r\nX-Trailer: x\r\n\r\nNEXT");
    let trailing = b"NEXT".len();
    for split in [&[][..], &[1][..], &pieces[..]] {
        match decode(&encoded, split) {
            Ok((consumed, true, body)) => {
                assert_eq!(body, data, "round trip changed the body");
                assert_eq!(consumed, encoded.len() - trailing);
            }
            other => panic!("valid encoding rejected: {other:?}"),
        }
    }
    assert_eq!(
        reference_chunked(&encoded),
        ChunkedOutcome::Done {
            consumed: encoded.len() - trailing,
            body: data.to_vec()
        },
        "the reference rejects a valid encoding"
    );
}

/// A decoder result in the reference decoder's terms.
fn outcome(r: Result<(usize, bool, Vec<u8>), RequestError>) -> ChunkedOutcome {
    match r {
        Ok((consumed, true, body)) => ChunkedOutcome::Done { consumed, body },
        Ok((_, false, body)) => ChunkedOutcome::Partial { body },
        Err(e) => ChunkedOutcome::Invalid { status: e.status },
    }
}

/// Feeds `data` in pieces of the given sizes (cycled; empty = whole) and
/// returns (consumed, finished, body) or the error.
fn decode(data: &[u8], pieces: &[usize]) -> Result<(usize, bool, Vec<u8>), RequestError> {
    let mut dec = ChunkedDecoder::new();
    let mut body = Vec::new();
    let mut pos = 0;
    let mut k = 0;
    loop {
        let n = if pieces.is_empty() {
            data.len() - pos
        } else {
            pieces[k % pieces.len()].min(data.len() - pos)
        };
        k += 1;
        let piece = &data[pos..pos + n];
        let (used, finished) = dec.feed(piece, |d| body.extend_from_slice(d))?;
        assert!(used <= piece.len());
        assert!(
            finished || used == piece.len(),
            "unfinished decoder left bytes"
        );
        assert_eq!(finished, dec.is_finished());
        pos += used;
        if finished || pos == data.len() {
            return Ok((pos, finished, body));
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn smoke() {
        super::request(b"GET /a/../b?c HTTP/1.1\r\nHost: h\r\nRange: bytes=0-1\r\n\r\n");
        super::request(b"GET http://h/%2e%2e HTTP/1.0\r\n\r\n");
        super::request(b"Sun, 06 Nov 1994 08:49:37 GMT");
        super::request(b"");
        super::chunked(b"5\r\nhello\r\n0\r\n\r\n");
        super::chunked(b"arbitrary bytes \x00\xff");
        super::chunked(b"");
        super::h2_frames(b"");
        super::h2_frames(crate::h2::PREFACE);
        super::h2_frames(b"\0\0\0\x04\x01\0\0\0\0");
    }
}
