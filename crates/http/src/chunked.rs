//! Sans-I/O decoder for chunked request bodies (RFC 9112 §7.1).
//!
//! A byte-at-a-time state machine for the framing lines and whole-slice
//! hand-off for chunk data, so data is never copied and the decoder's state
//! is a few words regardless of how the body is split across reads.

use crate::error::RequestError;
use crate::limits::{MAX_CHUNK_LINE, MAX_TRAILER_BYTES};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading hex digits of a chunk size; `digits` counts them.
    Size { size: u64, digits: usize },
    /// Whitespace (BWS) after the size, before ';' or CRLF.
    SizeWs { size: u64 },
    /// Inside chunk extensions, skipped up to CRLF.
    Ext { size: u64 },
    /// Saw CR ending the size line; LF must follow.
    SizeLf { size: u64 },
    /// Inside chunk data with this many bytes left.
    Data { left: u64 },
    /// Chunk data done; CRLF must follow.
    DataCr,
    /// Saw CR after chunk data; LF must follow.
    DataLf,
    /// At the start of a trailer line (or the final empty line).
    TrailerStart,
    /// Inside a trailer field line, skipped.
    TrailerLine,
    /// Saw CR inside or ending a trailer line; LF must follow.
    TrailerLf { empty: bool },
    /// The body and its trailer section are complete.
    Done,
    /// A previous call failed; the error repeats.
    Failed(RequestError),
}

/// Incremental decoder for a `Transfer-Encoding: chunked` request body.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    /// Bytes of the current size line, bounded by [`MAX_CHUNK_LINE`].
    line_len: usize,
    /// Bytes of the trailer section, bounded by [`MAX_TRAILER_BYTES`].
    trailer_len: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

const fn bad(reason: &'static str) -> RequestError {
    RequestError::bad_request(reason)
}

impl ChunkedDecoder {
    /// A decoder positioned at the start of a chunked body.
    pub fn new() -> Self {
        ChunkedDecoder {
            state: State::Size { size: 0, digits: 0 },
            line_len: 0,
            trailer_len: 0,
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
    /// request. Trailer fields are skipped. Errors: bad syntax or a size that
    /// overflows u64 → 400; an over-long size line → 400; an over-large
    /// trailer section → 431. After an error, every call returns it again.
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
        if matches!(
            self.state,
            State::Size { .. } | State::SizeWs { .. } | State::Ext { .. } | State::SizeLf { .. }
        ) {
            self.line_len += 1;
            if self.line_len > MAX_CHUNK_LINE {
                return Err(bad("chunk size line too long"));
            }
        }
        if matches!(
            self.state,
            State::TrailerStart | State::TrailerLine | State::TrailerLf { .. }
        ) {
            self.trailer_len += 1;
            if self.trailer_len > MAX_TRAILER_BYTES {
                return Err(RequestError::new(431, "chunked trailer section too large"));
            }
        }
        self.state = match self.state {
            State::Size { size, digits } => match b {
                b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                    let d = (b as char).to_digit(16).unwrap_or(0) as u64;
                    if size > u64::MAX >> 4 {
                        return Err(bad("chunk size overflow"));
                    }
                    State::Size {
                        size: (size << 4) | d,
                        digits: digits + 1,
                    }
                }
                _ if digits == 0 => return Err(bad("missing chunk size")),
                b' ' | b'\t' => State::SizeWs { size },
                b';' => State::Ext { size },
                b'\r' => State::SizeLf { size },
                b'\n' => self.size_line_done(size),
                _ => return Err(bad("invalid chunk size")),
            },
            State::SizeWs { size } => match b {
                b' ' | b'\t' => State::SizeWs { size },
                b';' => State::Ext { size },
                b'\r' => State::SizeLf { size },
                b'\n' => self.size_line_done(size),
                _ => return Err(bad("invalid chunk size line")),
            },
            State::Ext { size } => match b {
                b'\r' => State::SizeLf { size },
                b'\n' => self.size_line_done(size),
                // Extensions are ignored, but control bytes there are noise
                // no real client sends.
                0..=0x08 | 0x0a..=0x1f | 0x7f => {
                    return Err(bad("control byte in chunk extension"))
                }
                _ => State::Ext { size },
            },
            State::SizeLf { size } => match b {
                b'\n' => self.size_line_done(size),
                _ => return Err(bad("bare CR in chunk size line")),
            },
            State::DataCr => match b {
                b'\r' => State::DataLf,
                b'\n' => State::Size { size: 0, digits: 0 },
                _ => return Err(bad("missing CRLF after chunk data")),
            },
            State::DataLf => match b {
                b'\n' => State::Size { size: 0, digits: 0 },
                _ => return Err(bad("missing CRLF after chunk data")),
            },
            State::TrailerStart => match b {
                b'\r' => State::TrailerLf { empty: true },
                b'\n' => State::Done,
                _ => State::TrailerLine,
            },
            State::TrailerLine => match b {
                b'\r' => State::TrailerLf { empty: false },
                b'\n' => State::TrailerStart,
                _ => State::TrailerLine,
            },
            State::TrailerLf { empty } => match b {
                b'\n' if empty => State::Done,
                b'\n' => State::TrailerStart,
                _ => return Err(bad("bare CR in trailer section")),
            },
            // Data is handled in `feed`; Done/Failed never reach here.
            s @ (State::Data { .. } | State::Done | State::Failed(_)) => s,
        };
        Ok(())
    }

    fn size_line_done(&mut self, size: u64) -> State {
        self.line_len = 0;
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

    /// Feeds all of `input` at once: (consumed, finished, body).
    fn decode(input: &[u8]) -> Result<(usize, bool, Vec<u8>), RequestError> {
        let mut d = ChunkedDecoder::new();
        let mut body = Vec::new();
        let (n, done) = d.feed(input, |b| body.extend_from_slice(b))?;
        Ok((n, done, body))
    }

    fn status(input: &[u8]) -> u16 {
        decode(input).expect_err("should fail").status
    }

    #[test]
    fn simple_body() {
        let input = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
        assert_eq!(
            decode(input),
            Ok((input.len(), true, b"hello world".to_vec()))
        );
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
        assert_eq!(decode(input), Ok((13, true, b"abc".to_vec())));
        let mut d = ChunkedDecoder::new();
        d.feed(input, |_| {}).unwrap();
        assert!(d.is_finished());
        assert_eq!(
            d.feed(b"more", |_| panic!("no data after end")),
            Ok((0, true))
        );
    }

    #[test]
    fn extensions_are_skipped() {
        let input = b"5;name=value;flag\r\nhello\r\n3 ; q=\"a;b\"\r\nabc\r\n0;last\r\n\r\n";
        assert_eq!(decode(input).unwrap().2, b"helloabc");
        let mut long = b"1;".to_vec();
        long.resize(MAX_CHUNK_LINE + 10, b'x');
        long.extend_from_slice(b"\r\na\r\n0\r\n\r\n");
        assert_eq!(status(&long), 400);
        assert_eq!(status(b"1;a\x01b\r\nx\r\n0\r\n\r\n"), 400);
    }

    #[test]
    fn trailers_are_skipped() {
        let input = b"2\r\nhi\r\n0\r\nX-Checksum: abc\r\nX-Other: d\r\n\r\nNEXT";
        assert_eq!(decode(input), Ok((input.len() - 4, true, b"hi".to_vec())));
        let mut big = b"0\r\n".to_vec();
        while big.len() < MAX_TRAILER_BYTES + 100 {
            big.extend_from_slice(b"X-Pad: aaaaaaaaaaaaaaaa\r\n");
        }
        big.extend_from_slice(b"\r\n");
        assert_eq!(status(&big), 431);
    }

    #[test]
    fn bare_lf_is_accepted() {
        let input = b"2\nhi\n0\nT: x\n\n";
        assert_eq!(decode(input), Ok((input.len(), true, b"hi".to_vec())));
    }

    #[test]
    fn bad_syntax() {
        for bad in [
            &b"\r\n"[..],
            b"x\r\n",
            b"-1\r\n",
            b"+1\r\n",
            b" 1\r\n",
            b"1 x\r\n",
            b"1\rx",
            b"1\r\nab\r\n",
            b"1\r\na\rx",
            b"0\r\nX: y\rz",
            b"0\r\n\rx",
            b"0x1\r\n",
        ] {
            assert_eq!(status(bad), 400, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn size_overflow() {
        assert_eq!(status(b"10000000000000000\r\n"), 400);
        // The largest size is fine syntactically (the caller limits bodies).
        let mut d = ChunkedDecoder::new();
        assert_eq!(d.feed(b"ffffffffffffffff\r\nab", |_| {}), Ok((20, false)));
    }

    #[test]
    fn errors_repeat() {
        let mut d = ChunkedDecoder::new();
        let e = d.feed(b"zz", |_| {}).unwrap_err();
        assert_eq!(d.feed(b"0\r\n\r\n", |_| {}), Err(e));
    }

    #[test]
    fn split_at_every_offset() {
        let input: &[u8] =
            b"4;x=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nT: v\r\n\r\n";
        let want = b"Wikipedia in\r\n\r\nchunks.".to_vec();
        for a in 0..=input.len() {
            for b in a..=input.len() {
                let mut d = ChunkedDecoder::new();
                let mut body = Vec::new();
                let mut total = 0;
                let mut finished = false;
                for piece in [&input[..a], &input[a..b], &input[b..]] {
                    let (n, done) = d.feed(piece, |x| body.extend_from_slice(x)).unwrap();
                    total += n;
                    finished = done;
                    assert!(done || n == piece.len());
                }
                assert!(finished, "split {a}/{b}");
                assert_eq!(total, input.len());
                assert_eq!(body, want, "split {a}/{b}");
            }
        }
    }

    #[test]
    fn partial_input_is_not_finished() {
        let input = b"5\r\nhello\r\n0\r\n\r\n";
        for k in 0..input.len() {
            let (n, done, _) = decode(&input[..k]).unwrap();
            assert_eq!((n, done), (k, false));
        }
    }
}
