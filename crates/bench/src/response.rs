//! Sans-I/O parser for HTTP/1.x responses, incremental and copy-free for bodies.
//!
//! The load generator reads into one buffer per thread and hands each slice here. Body bytes
//! are only counted (and hashed when verifying), never copied; the only bytes kept across
//! reads are those of a response head split between two reads, in a buffer that is reused.
//! Framing follows RFC 9112 §6.3: no body for 1xx/204/304, then chunked, then
//! Content-Length, else the body runs to the end of the connection.

use fastpath_http::ChunkedDecoder;

/// Largest response head accepted; a server that sends more is answering garbage.
pub const MAX_HEAD: usize = 64 * 1024;

/// Header fields parsed per response head; more is treated as a bad response.
const MAX_HEADERS: usize = 64;

/// Why a response could not be parsed. Every variant is counted as a bad response,
/// except [`ParseError::Short`], which is a body cut short by the end of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// The status line or a header field is malformed.
    BadHead,
    /// The head is larger than [`MAX_HEAD`] or has too many fields.
    HeadTooLarge,
    /// Content-Length or chunked framing is invalid.
    BadFraming,
    /// The connection ended inside a head or a body.
    Short,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ParseError::BadHead => "malformed response head",
            ParseError::HeadTooLarge => "response head too large",
            ParseError::BadFraming => "invalid body framing",
            ParseError::Short => "connection closed inside a response",
        })
    }
}

impl std::error::Error for ParseError {}

/// A complete response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Whether the connection may carry another request after this response.
    pub keep_alive: bool,
    /// An interim (1xx) response: the final response to the same request follows.
    pub interim: bool,
    /// Body bytes after unframing.
    pub body_len: u64,
    /// Bytes on the wire: head, body and chunk framing.
    pub wire_len: u64,
    /// CRC-32 of the body, when hashing was asked for.
    pub crc32: Option<u32>,
}

#[derive(Debug)]
enum State {
    Head,
    Length { left: u64 },
    Chunked(ChunkedDecoder),
    UntilClose,
}

/// Incremental response parser; one per connection, reused for every response on it.
#[derive(Debug)]
pub struct ResponseParser {
    state: State,
    /// A head split across reads, kept until it is complete.
    partial: Vec<u8>,
    hasher: Option<crc32fast::Hasher>,
    status: u16,
    keep_alive: bool,
    body_len: u64,
    wire_len: u64,
}

impl Default for ResponseParser {
    fn default() -> Self {
        Self::new()
    }
}

struct Head {
    status: u16,
    keep_alive: bool,
    framing: Framing,
}

enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

impl ResponseParser {
    /// A parser waiting for the first byte of a response.
    pub fn new() -> Self {
        ResponseParser {
            state: State::Head,
            partial: Vec::new(),
            hasher: None,
            status: 0,
            keep_alive: false,
            body_len: 0,
            wire_len: 0,
        }
    }

    /// Forgets any response in progress (the connection is being reused for another socket).
    pub fn reset(&mut self) {
        self.state = State::Head;
        self.partial.clear();
        self.hasher = None;
    }

    /// Whether no byte of the next response has been seen.
    pub fn is_idle(&self) -> bool {
        matches!(self.state, State::Head) && self.partial.is_empty()
    }

    /// Consumes bytes of the response; returns how many were used and the response if it
    /// completed (bytes past its end belong to the next one). With `hash`, the body's CRC-32
    /// is computed (decided per response, when its head completes).
    pub fn feed(&mut self, input: &[u8], hash: bool) -> Result<(usize, Option<Reply>), ParseError> {
        let mut used = 0;
        if let State::Head = self.state {
            let n = self.feed_head(input, hash)?;
            used = n;
            if let State::Head = self.state {
                // Still incomplete (all input consumed), or an interim response finished.
                return Ok((used, self.take_interim()));
            }
            if let Some(reply) = self.try_finish_empty() {
                return Ok((used, Some(reply)));
            }
        }
        let rest = &input[used..];
        let hasher = &mut self.hasher;
        match &mut self.state {
            State::Head => unreachable!("handled above"),
            State::Length { left } => {
                let n = (*left).min(rest.len() as u64) as usize;
                if let Some(h) = hasher {
                    h.update(&rest[..n]);
                }
                *left -= n as u64;
                self.body_len += n as u64;
                self.wire_len += n as u64;
                used += n;
                if *left == 0 {
                    return Ok((used, Some(self.finish())));
                }
                Ok((used, None))
            }
            State::Chunked(decoder) => {
                let mut data = 0u64;
                let (n, done) = decoder
                    .feed(rest, |d| {
                        data += d.len() as u64;
                        if let Some(h) = hasher.as_mut() {
                            h.update(d);
                        }
                    })
                    .map_err(|_| ParseError::BadFraming)?;
                self.body_len += data;
                self.wire_len += n as u64;
                used += n;
                if done {
                    return Ok((used, Some(self.finish())));
                }
                Ok((used, None))
            }
            State::UntilClose => {
                if let Some(h) = hasher {
                    h.update(rest);
                }
                self.body_len += rest.len() as u64;
                self.wire_len += rest.len() as u64;
                Ok((input.len(), None))
            }
        }
    }

    /// The connection ended: completes a body that runs to the end of the connection, is an
    /// error inside any other response, and is `None` between responses.
    pub fn eof(&mut self) -> Result<Option<Reply>, ParseError> {
        match self.state {
            State::UntilClose => Ok(Some(self.finish())),
            State::Head if self.partial.is_empty() => Ok(None),
            _ => Err(ParseError::Short),
        }
    }

    /// Parses (part of) a head; returns bytes consumed from `input`.
    fn feed_head(&mut self, input: &[u8], hash: bool) -> Result<usize, ParseError> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        if self.partial.is_empty() {
            // Common case: the whole head is in this read; parse it where it lies.
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(input) {
                Ok(httparse::Status::Complete(n)) => {
                    let head = interpret(&resp)?;
                    self.start(head, n, hash);
                    Ok(n)
                }
                Ok(httparse::Status::Partial) => {
                    if input.len() > MAX_HEAD {
                        return Err(ParseError::HeadTooLarge);
                    }
                    self.partial.extend_from_slice(input);
                    Ok(input.len())
                }
                Err(e) => Err(head_error(e)),
            }
        } else {
            let before = self.partial.len();
            let take = input.len().min(MAX_HEAD + 1 - before);
            self.partial.extend_from_slice(&input[..take]);
            let parsed = {
                let mut resp = httparse::Response::new(&mut headers);
                match resp.parse(&self.partial) {
                    Ok(httparse::Status::Complete(n)) => interpret(&resp).map(|h| Some((h, n))),
                    Ok(httparse::Status::Partial) if self.partial.len() > MAX_HEAD => {
                        Err(ParseError::HeadTooLarge)
                    }
                    Ok(httparse::Status::Partial) => Ok(None),
                    Err(e) => Err(head_error(e)),
                }
            };
            match parsed? {
                Some((head, n)) => {
                    self.partial.clear();
                    self.start(head, n, hash);
                    Ok(n - before)
                }
                None => Ok(take),
            }
        }
    }

    fn start(&mut self, head: Head, head_len: usize, hash: bool) {
        self.status = head.status;
        self.keep_alive = head.keep_alive;
        self.body_len = 0;
        self.wire_len = head_len as u64;
        self.hasher = hash.then(crc32fast::Hasher::new);
        self.state = match head.framing {
            Framing::None => State::Length { left: 0 },
            Framing::Length(n) => State::Length { left: n },
            Framing::Chunked => State::Chunked(ChunkedDecoder::new()),
            Framing::UntilClose => State::UntilClose,
        };
        if (100..200).contains(&head.status) && head.status != 101 {
            // Interim: reported by `take_interim`, then the final response follows.
            self.state = State::Head;
            self.status = head.status | INTERIM_FLAG;
        }
    }

    fn take_interim(&mut self) -> Option<Reply> {
        if self.status & INTERIM_FLAG == 0 {
            return None;
        }
        self.status &= !INTERIM_FLAG;
        let mut reply = self.finish();
        reply.interim = true;
        Some(reply)
    }

    fn try_finish_empty(&mut self) -> Option<Reply> {
        match self.state {
            State::Length { left: 0 } => Some(self.finish()),
            _ => None,
        }
    }

    fn finish(&mut self) -> Reply {
        let crc32 = self.hasher.take().map(|h| h.finalize());
        let reply = Reply {
            status: self.status,
            keep_alive: self.keep_alive && !matches!(self.state, State::UntilClose),
            interim: false,
            body_len: self.body_len,
            wire_len: self.wire_len,
            crc32,
        };
        self.state = State::Head;
        reply
    }
}

/// Marks a parsed interim status until `take_interim` reports it (status codes fit in 10 bits).
const INTERIM_FLAG: u16 = 0x8000;

fn head_error(e: httparse::Error) -> ParseError {
    match e {
        httparse::Error::TooManyHeaders => ParseError::HeadTooLarge,
        _ => ParseError::BadHead,
    }
}

fn interpret(resp: &httparse::Response<'_, '_>) -> Result<Head, ParseError> {
    let status = resp.code.ok_or(ParseError::BadHead)?;
    if !(100..=999).contains(&status) {
        return Err(ParseError::BadHead);
    }
    let http11 = resp.version == Some(1);
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut transfer_coded = false;
    let mut close = false;
    let mut keep_alive_token = false;
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = parse_length(h.value).ok_or(ParseError::BadFraming)?;
            if length.is_some_and(|m| m != n) {
                return Err(ParseError::BadFraming);
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            transfer_coded = true;
            // Chunked must be the last coding to frame the message.
            chunked = h
                .value
                .rsplit(|&b| b == b',')
                .next()
                .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive_token |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        }
    }
    let keep_alive = if http11 {
        !close
    } else {
        keep_alive_token && !close
    };
    let framing = if (100..200).contains(&status) || status == 204 || status == 304 {
        Framing::None
    } else if chunked {
        Framing::Chunked
    } else if transfer_coded {
        Framing::UntilClose
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        Framing::UntilClose
    };
    Ok(Head {
        status,
        keep_alive,
        framing,
    })
}

fn parse_length(value: &[u8]) -> Option<u64> {
    let value = value.trim_ascii();
    if value.is_empty() || value.len() > 19 {
        return None;
    }
    value.iter().try_fold(0u64, |acc, &b| {
        b.is_ascii_digit().then(|| acc * 10 + u64::from(b - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `bytes` cut at `cut`, returning every reply and the first error.
    fn feed_split(bytes: &[u8], cut: usize, hash: bool) -> (Vec<Reply>, Option<ParseError>) {
        let mut p = ResponseParser::new();
        let mut replies = Vec::new();
        for part in [&bytes[..cut], &bytes[cut..]] {
            let mut rest = part;
            while !rest.is_empty() {
                match p.feed(rest, hash) {
                    Ok((n, reply)) => {
                        rest = &rest[n..];
                        replies.extend(reply);
                    }
                    Err(e) => return (replies, Some(e)),
                }
            }
        }
        match p.eof() {
            Ok(reply) => replies.extend(reply),
            Err(e) => return (replies, Some(e)),
        }
        (replies, None)
    }

    /// Every split point gives the same result, as the read boundaries must not matter.
    fn at_every_cut(bytes: &[u8], hash: bool) -> (Vec<Reply>, Option<ParseError>) {
        let whole = feed_split(bytes, 0, hash);
        for cut in 1..=bytes.len() {
            assert_eq!(feed_split(bytes, cut, hash), whole, "cut at {cut}");
        }
        whole
    }

    #[test]
    fn content_length_and_keep_alive() {
        let (replies, err) = at_every_cut(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            true,
        );
        assert_eq!(err, None);
        assert_eq!(replies.len(), 2);
        assert_eq!(replies[0].status, 200);
        assert_eq!(replies[0].body_len, 5);
        assert_eq!(replies[0].wire_len, 43);
        assert_eq!(replies[0].crc32, Some(crc32fast::hash(b"hello")));
        assert!(replies[0].keep_alive);
        assert_eq!(replies[1].status, 404);
        assert!(!replies[1].keep_alive);
    }

    #[test]
    fn chunked_body_is_unframed() {
        let (replies, err) = at_every_cut(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nT: 1\r\n\r\n",
            true,
        );
        assert_eq!(err, None);
        assert_eq!(replies.len(), 1);
        assert_eq!(replies[0].body_len, 11);
        assert_eq!(replies[0].crc32, Some(crc32fast::hash(b"hello world")));
    }

    #[test]
    fn body_until_close_and_http10() {
        let (replies, err) = at_every_cut(b"HTTP/1.0 200 OK\r\n\r\nabc", false);
        assert_eq!(err, None);
        assert_eq!(replies.len(), 1);
        assert_eq!(replies[0].body_len, 3);
        assert!(!replies[0].keep_alive);
        let (replies, _) = at_every_cut(
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
            false,
        );
        assert!(replies[0].keep_alive);
    }

    #[test]
    fn interim_then_final() {
        let (replies, err) = at_every_cut(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
            false,
        );
        assert_eq!(err, None);
        assert_eq!(replies.len(), 2);
        assert!(replies[0].interim);
        assert_eq!(replies[0].status, 100);
        assert!(!replies[1].interim);
        assert_eq!(replies[1].status, 204);
    }

    #[test]
    fn short_and_bad_responses() {
        let (r, err) = at_every_cut(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", false);
        assert!(r.is_empty());
        assert_eq!(err, Some(ParseError::Short));
        let (_, err) = feed_split(b"HTTP/1.1 200 OK\r\nContent-Le", 5, false);
        assert_eq!(err, Some(ParseError::Short));
        let (_, err) = feed_split(b"garbage garbage\r\n\r\n", 3, false);
        assert_eq!(err, Some(ParseError::BadHead));
        let (_, err) = feed_split(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", 3, false);
        assert_eq!(err, Some(ParseError::BadFraming));
        let (_, err) = feed_split(
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            3,
            false,
        );
        assert_eq!(err, Some(ParseError::BadFraming));
        let (_, err) = feed_split(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            3,
            false,
        );
        assert_eq!(err, Some(ParseError::BadFraming));
        let huge = vec![b'a'; MAX_HEAD + 10];
        let mut p = ResponseParser::new();
        assert_eq!(p.feed(b"HTTP/1.1 200 OK\r\nX: ", false), Ok((20, None)));
        assert_eq!(p.feed(&huge, false), Err(ParseError::HeadTooLarge));
    }
}
