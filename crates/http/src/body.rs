//! Response bodies as sequences of pieces, and their HTTP/1.x framing.
//!
//! Every response fastpath sends (a static file, a cached page, a proxied answer, an error
//! page) is a head and a body, and the body is a sequence of [`Piece`]s with an end: bytes
//! made for this response, a buffer shared with a cache, or a range of a file. Producers hand
//! pieces to an encoder; the encoder frames them for the protocol and passes them to a
//! [`Sink`] (a connection's output, in the server): a file range stays a file range, so it
//! can leave with sendfile, until something has to read its bytes.
//!
//! [`Http1Body`] is the HTTP/1.x encoder: framed by length (pieces pass as they are, the
//! length checked), chunked (each piece a chunk, then the last chunk), delimited by the close
//! (pieces pass as they are; the connection closes after), or already framed (a backend's
//! chunked body relayed as it came). The seams beside it, by design:
//!
//! - HTTP/2 is another encoder over the same pieces: a piece becomes DATA frames (a file
//!   range read, or sent from the file, as the frame writer can), the end an END_STREAM.
//! - TLS sits below the sink (a transport of the engine): a file range is read and
//!   encrypted there, the encoder does not change.
//! - An output filter (compression) sits between the producer and the encoder, taking pieces
//!   and giving others: one that needs the bytes reads a file range, one that does not lets
//!   it pass.
//!
//! ```
//! use std::sync::Arc;
//! use fastpath_http::{Framing, Http1Body, Piece, Sink};
//!
//! #[derive(Default)]
//! struct Bytes(Vec<u8>);
//! impl Sink for Bytes {
//!     fn write_with<R>(&mut self, write: impl FnOnce(&mut Vec<u8>) -> R) -> R { write(&mut self.0) }
//!     fn shared(&mut self, data: Arc<[u8]>) { self.0.extend_from_slice(&data) }
//!     fn file(&mut self, _: Arc<std::fs::File>, _: u64, _: u64) { unimplemented!() }
//! }
//!
//! let mut out = Bytes::default();
//! let mut body = Http1Body::new(Framing::Chunked);
//! body.piece(Piece::Bytes(b"hello, "), &mut out);
//! body.piece(Piece::Shared(Arc::from(&b"world"[..])), &mut out);
//! body.end(&mut out);
//! assert_eq!(out.0, b"7\r\nhello, \r\n5\r\nworld\r\n0\r\n\r\n");
//! ```

use std::fs::File;
use std::sync::Arc;

/// One piece of a response body.
#[derive(Debug, Clone)]
pub enum Piece<'a> {
    /// Bytes copied where they go: small ones, or ones made for this response.
    Bytes(&'a [u8]),
    /// Bytes shared with a cache, passed on without a copy.
    Shared(Arc<[u8]>),
    /// `len` bytes of `file` from `offset`, sent from the file where the transport can.
    File {
        /// The open file.
        file: Arc<File>,
        /// Where the range starts.
        offset: u64,
        /// Its length.
        len: u64,
    },
}

impl Piece<'_> {
    /// The piece's length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Piece::Bytes(bytes) => bytes.len() as u64,
            Piece::Shared(data) => data.len() as u64,
            Piece::File { len, .. } => *len,
        }
    }

    /// Whether the piece holds no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where an encoder puts what it makes: bytes written in place, shared buffers and file
/// ranges passed on as they are. The server's is a connection's output.
pub trait Sink {
    /// Appends bytes that `write` writes.
    fn write_with<R>(&mut self, write: impl FnOnce(&mut Vec<u8>) -> R) -> R;
    /// Appends a shared buffer.
    fn shared(&mut self, data: Arc<[u8]>);
    /// Appends `len` bytes of `file` from `offset`.
    fn file(&mut self, file: Arc<File>, offset: u64, len: u64);

    /// Appends a copy of `bytes`.
    fn bytes(&mut self, bytes: &[u8]) {
        self.write_with(|out| out.extend_from_slice(bytes));
    }

    /// Appends a piece as it is.
    fn piece(&mut self, piece: Piece<'_>) {
        match piece {
            Piece::Bytes(bytes) => self.bytes(bytes),
            Piece::Shared(data) => self.shared(data),
            Piece::File { file, offset, len } => self.file(file, offset, len),
        }
    }
}

/// How a body is delimited on an HTTP/1.x connection (RFC 9112 §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body follows the head (HEAD, 1xx, 204, 304): pieces are dropped.
    None,
    /// `Content-Length`: exactly this many bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked` (HTTP/1.1): each piece a chunk, then the last chunk.
    Chunked,
    /// Delimited by the close of the connection (an HTTP/1.0 client, a length nobody knows).
    Close,
    /// Already framed by its producer: a backend's chunked body relayed as it came, its
    /// chunk lines and trailers included.
    Framed,
}

/// The HTTP/1.x encoder of one body: frames the pieces it is given into a [`Sink`].
#[derive(Debug, Clone)]
pub struct Http1Body {
    framing: Framing,
    /// Bytes passed on so far (body bytes, framing not counted).
    written: u64,
    ended: bool,
}

impl Http1Body {
    /// An encoder for a body framed by `framing`.
    pub fn new(framing: Framing) -> Self {
        Http1Body {
            framing,
            written: 0,
            ended: false,
        }
    }

    /// The framing the body goes with.
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// Body bytes passed on so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Frames `piece` into `sink`. A body framed by length takes no more than its length:
    /// what is past it is dropped (the producer's bug, never sent as the next response).
    pub fn piece<S: Sink>(&mut self, piece: Piece<'_>, sink: &mut S) {
        if piece.is_empty() || self.ended {
            return;
        }
        match self.framing {
            Framing::None => {}
            Framing::Length(n) => {
                let room = n - self.written;
                let len = piece.len();
                debug_assert!(len <= room, "a body past its length");
                let piece = if len > room {
                    match cut(piece, room) {
                        Some(piece) => piece,
                        None => return,
                    }
                } else {
                    piece
                };
                self.written += piece.len();
                sink.piece(piece);
            }
            Framing::Chunked => {
                let len = piece.len();
                sink.write_with(|out| write_chunk_size(len, out));
                self.written += len;
                sink.piece(piece);
                sink.write_with(|out| out.extend_from_slice(b"\r\n"));
            }
            Framing::Close | Framing::Framed => {
                self.written += piece.len();
                sink.piece(piece);
            }
        }
    }

    /// Counts `len` body bytes the producer wrote into the sink itself, in place (a page
    /// formatted straight into the output): for a body framed by length or by the close,
    /// whose pieces pass as they are.
    pub fn wrote(&mut self, len: u64) {
        debug_assert!(
            matches!(self.framing, Framing::Length(_) | Framing::Close),
            "bytes written in place need no framing of their own"
        );
        self.written += len;
    }

    /// Ends the body: the last chunk of a chunked one. Whether it is whole is the caller's
    /// to know ([`Http1Body::is_complete`]).
    pub fn end<S: Sink>(&mut self, sink: &mut S) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        if self.framing == Framing::Chunked {
            sink.write_with(|out| out.extend_from_slice(b"0\r\n\r\n"));
        }
    }

    /// Whether every byte the framing promised has been passed on (a body framed by length);
    /// the others are whole once ended.
    pub fn is_complete(&self) -> bool {
        match self.framing {
            Framing::Length(n) => self.written == n,
            _ => self.ended,
        }
    }
}

/// The first `len` bytes of `piece`.
fn cut(piece: Piece<'_>, len: u64) -> Option<Piece<'_>> {
    if len == 0 {
        return None;
    }
    Some(match piece {
        Piece::Bytes(bytes) => Piece::Bytes(&bytes[..len as usize]),
        Piece::Shared(data) => Piece::Shared(Arc::from(&data[..len as usize])),
        Piece::File { file, offset, .. } => Piece::File { file, offset, len },
    })
}

/// A chunk's size line: hexadecimal digits and CRLF.
fn write_chunk_size(len: u64, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut n = len;
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = HEX[(n & 0xf) as usize];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::Record;

    fn file() -> Arc<File> {
        Arc::new(tempfile::tempfile().unwrap())
    }

    #[test]
    fn a_body_framed_by_length_passes_its_pieces_as_they_are() {
        let mut out = Record::default();
        let mut body = Http1Body::new(Framing::Length(10));
        body.piece(Piece::Bytes(b"head"), &mut out);
        assert!(!body.is_complete());
        body.piece(
            Piece::File {
                file: file(),
                offset: 3,
                len: 6,
            },
            &mut out,
        );
        body.end(&mut out);
        assert!(body.is_complete());
        assert_eq!(out.0, b"head[file 3+6]");
        assert_eq!(body.written(), 10);
    }

    #[test]
    fn a_chunked_body_frames_each_piece_and_ends_with_the_last_chunk() {
        let mut out = Record::default();
        let mut body = Http1Body::new(Framing::Chunked);
        body.piece(Piece::Bytes(&[b'x'; 300]), &mut out);
        body.piece(Piece::Bytes(b""), &mut out);
        body.piece(
            Piece::File {
                file: file(),
                offset: 0,
                len: 17,
            },
            &mut out,
        );
        body.end(&mut out);
        body.end(&mut out);
        let mut expected = b"12c\r\n".to_vec();
        expected.extend_from_slice(&[b'x'; 300]);
        expected.extend_from_slice(b"\r\n11\r\n[file 0+17]\r\n0\r\n\r\n");
        assert_eq!(out.0, expected);
        assert!(body.is_complete());
    }

    #[test]
    fn no_body_drops_its_pieces_and_a_length_is_never_passed() {
        let mut out = Record::default();
        let mut body = Http1Body::new(Framing::None);
        body.piece(Piece::Bytes(b"dropped"), &mut out);
        body.end(&mut out);
        assert!(out.0.is_empty());
        let mut body = Http1Body::new(Framing::Length(3));
        body.piece(Piece::Bytes(b"ab"), &mut out);
        // In a release build the excess is cut off; debug builds assert.
        if !cfg!(debug_assertions) {
            body.piece(Piece::Bytes(b"cdef"), &mut out);
            assert_eq!(out.0, b"abc");
        }
    }

    #[test]
    fn chunk_sizes_are_hexadecimal() {
        for (len, line) in [
            (1u64, "1\r\n"),
            (15, "f\r\n"),
            (16, "10\r\n"),
            (u64::MAX, "ffffffffffffffff\r\n"),
        ] {
            let mut out = Vec::new();
            write_chunk_size(len, &mut out);
            assert_eq!(out, line.as_bytes());
        }
    }
}
