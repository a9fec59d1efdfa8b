//! Field blocks (RFC 9113 §4.3, §6.10): a HEADERS frame and the
//! CONTINUATION frames after it joined into the one block HPACK decodes,
//! under a budget.
//!
//! A field block spread over frames holds the connection: until its last
//! CONTINUATION, no other frame may come, and HPACK cannot decode a part.
//! So the [`HeaderBlockAssembler`] sees every frame read, refuses any other
//! frame in the middle of a block as a connection PROTOCOL_ERROR, and bounds
//! both the block's bytes and its CONTINUATION count: empty CONTINUATION
//! frames cost a peer nothing to send and the server a frame each to read
//! (CVE-2024-27316), so they count like any other.
//!
//! ```
//! use fastpath_http::h2::{
//!     write_headers, Assembled, FrameReader, HeaderBlockAssembler, HeaderBlockLimits,
//! };
//!
//! let mut wire = Vec::new();
//! write_headers(1, b"\x82\x86\x84", true, 2, &mut wire); // HEADERS + CONTINUATION
//!
//! let reader = FrameReader::default();
//! let mut assembler = HeaderBlockAssembler::new(HeaderBlockLimits::default());
//! let mut input = &wire[..];
//! let block = loop {
//!     let (frame, used) = reader.parse(input).unwrap().unwrap();
//!     input = &input[used..];
//!     match assembler.push(&frame).unwrap() {
//!         Assembled::Complete(block) => break block.block.to_vec(),
//!         Assembled::Pending => {}
//!         Assembled::Other => unreachable!("only header frames here"),
//!     }
//! };
//! assert_eq!(block, b"\x82\x86\x84");
//! ```
//!
//! A block in one HEADERS frame, as most are, is handed on borrowed from
//! the frame, with no copy; only a block in several frames is copied into
//! the assembler's buffer.

use super::frame::{ErrorScope, Frame, FrameError, Reason};

/// Default [`HeaderBlockLimits::max_block_size`]: twice the default header
/// list budget, since HPACK seldom makes a block larger than the list it
/// carries and the list is bounded again when it is decoded.
pub const DEFAULT_MAX_BLOCK_SIZE: usize = 2 * super::hpack::DEFAULT_MAX_HEADER_LIST_SIZE;

/// Default [`HeaderBlockLimits::max_continuations`]: a block of the default
/// size fits in two 16 KiB frames; a few more allow for peers that split
/// blocks small.
pub const DEFAULT_MAX_CONTINUATIONS: usize = 8;

/// A buffer that grew past this is freed once its block is done, so that
/// one large block does not cost a connection memory for its lifetime.
const RETAINED_CAPACITY: usize = 4096;

/// The budget of one field block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderBlockLimits {
    /// Most bytes in the block: the fragments of all its frames, padding
    /// and priority fields left out.
    pub max_block_size: usize,
    /// Most CONTINUATION frames after the HEADERS frame, empty ones
    /// included.
    pub max_continuations: usize,
}

impl Default for HeaderBlockLimits {
    fn default() -> Self {
        HeaderBlockLimits {
            max_block_size: DEFAULT_MAX_BLOCK_SIZE,
            max_continuations: DEFAULT_MAX_CONTINUATIONS,
        }
    }
}

/// A whole field block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderBlock<'a> {
    /// The stream it opens or ends.
    pub stream_id: u32,
    /// Whether its HEADERS frame carried END_STREAM.
    pub end_stream: bool,
    /// The block, for HPACK.
    pub block: &'a [u8],
}

/// What a frame did to the field block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assembled<'a> {
    /// The frame is not part of a field block: the caller handles it.
    Other,
    /// The frame began or continued a block that is not done.
    Pending,
    /// The frame ended a block.
    Complete(HeaderBlock<'a>),
}

/// Joins HEADERS and CONTINUATION frames into field blocks, for one
/// connection.
#[derive(Debug, Clone)]
pub struct HeaderBlockAssembler {
    limits: HeaderBlockLimits,
    /// The block's fragments so far, while one is open.
    buf: Vec<u8>,
    /// The stream and END_STREAM of the open block.
    open: Option<(u32, bool)>,
    continuations: usize,
}

impl HeaderBlockAssembler {
    /// An assembler with no block open.
    pub fn new(limits: HeaderBlockLimits) -> Self {
        HeaderBlockAssembler {
            limits,
            buf: Vec::new(),
            open: None,
            continuations: 0,
        }
    }

    /// The stream whose block is open, if one is: then only a CONTINUATION
    /// on that stream may come.
    pub fn open_stream(&self) -> Option<u32> {
        self.open.map(|(id, _)| id)
    }

    /// Takes every frame read, in order. HEADERS and CONTINUATION frames
    /// make up blocks; any other frame is [`Assembled::Other`] when no
    /// block is open and a connection error when one is.
    ///
    /// An error ends the connection, and the assembler with it.
    pub fn push<'a>(&'a mut self, frame: &Frame<'a>) -> Result<Assembled<'a>, FrameError> {
        if self.open.is_none() && self.buf.capacity() > RETAINED_CAPACITY {
            self.buf = Vec::new();
        }
        match (self.open, *frame) {
            (
                None,
                Frame::Headers {
                    stream_id,
                    fragment,
                    end_stream,
                    end_headers,
                },
            ) => {
                self.check_size(fragment.len())?;
                if end_headers {
                    return Ok(Assembled::Complete(HeaderBlock {
                        stream_id,
                        end_stream,
                        block: fragment,
                    }));
                }
                self.buf.clear();
                self.buf.extend_from_slice(fragment);
                self.open = Some((stream_id, end_stream));
                self.continuations = 0;
                Ok(Assembled::Pending)
            }
            (None, Frame::Continuation { .. }) => {
                Err(FrameError::connection(Reason::UnexpectedContinuation))
            }
            (None, _) => Ok(Assembled::Other),
            (
                Some((open_id, end_stream)),
                Frame::Continuation {
                    stream_id,
                    fragment,
                    end_headers,
                },
            ) if stream_id == open_id => {
                self.continuations += 1;
                if self.continuations > self.limits.max_continuations {
                    return Err(FrameError::connection(Reason::TooManyContinuations {
                        limit: self.limits.max_continuations,
                    }));
                }
                self.check_size(self.buf.len() + fragment.len())?;
                self.buf.extend_from_slice(fragment);
                if !end_headers {
                    return Ok(Assembled::Pending);
                }
                self.open = None;
                Ok(Assembled::Complete(HeaderBlock {
                    stream_id,
                    end_stream,
                    block: &self.buf,
                }))
            }
            (Some((open_id, _)), other) => {
                Err(self.interrupted(open_id, other.frame_type(), other.stream_id()))
            }
        }
    }

    /// What an error the reader returned means given the block: a frame
    /// refused on its stream is still a frame where only a CONTINUATION
    /// could come, so while a block is open it ends the connection.
    pub fn check_error(&self, error: FrameError) -> FrameError {
        match (self.open, error.scope) {
            (Some((open_id, _)), ErrorScope::Stream(stream_id)) => {
                FrameError::connection(Reason::ExpectedContinuation {
                    stream_id: open_id,
                    // Stream errors all come from a frame of a known type.
                    got_type: error.reason.frame_type().map_or(u8::MAX, |t| t as u8),
                    got_stream: stream_id,
                })
            }
            _ => error,
        }
    }

    fn interrupted(&self, stream_id: u32, got_type: u8, got_stream: u32) -> FrameError {
        FrameError::connection(Reason::ExpectedContinuation {
            stream_id,
            got_type,
            got_stream,
        })
    }

    fn check_size(&self, size: usize) -> Result<(), FrameError> {
        if size > self.limits.max_block_size {
            return Err(FrameError::connection(Reason::HeaderBlockTooLarge {
                limit: self.limits.max_block_size,
            }));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h2::{write_headers, ErrorCode, FrameReader};

    fn headers(stream_id: u32, fragment: &[u8], end_headers: bool) -> Frame<'_> {
        Frame::Headers {
            stream_id,
            fragment,
            end_stream: true,
            end_headers,
        }
    }

    fn continuation(stream_id: u32, fragment: &[u8], end_headers: bool) -> Frame<'_> {
        Frame::Continuation {
            stream_id,
            fragment,
            end_headers,
        }
    }

    fn complete(stream_id: u32, block: &[u8]) -> Assembled<'_> {
        Assembled::Complete(HeaderBlock {
            stream_id,
            end_stream: true,
            block,
        })
    }

    #[test]
    fn one_frame_block_is_borrowed() {
        let mut a = HeaderBlockAssembler::new(HeaderBlockLimits::default());
        let fragment = b"\x82\x84".to_vec();
        let frame = headers(1, &fragment, true);
        let Assembled::Complete(block) = a.push(&frame).unwrap() else {
            panic!("not complete");
        };
        assert_eq!(block.block.as_ptr(), fragment.as_ptr());
        assert_eq!(a.open_stream(), None);
    }

    #[test]
    fn blocks_join_across_continuations() {
        let mut a = HeaderBlockAssembler::new(HeaderBlockLimits::default());
        assert_eq!(a.push(&headers(3, b"ab", false)), Ok(Assembled::Pending));
        assert_eq!(a.open_stream(), Some(3));
        assert_eq!(a.push(&continuation(3, b"", false)), Ok(Assembled::Pending));
        assert_eq!(
            a.push(&continuation(3, b"cd", false)),
            Ok(Assembled::Pending)
        );
        assert_eq!(
            a.push(&continuation(3, b"e", true)),
            Ok(complete(3, b"abcde"))
        );
        assert_eq!(a.open_stream(), None);

        // The next block starts afresh, and other frames pass between blocks.
        let ping = Frame::Ping {
            ack: false,
            data: [0; 8],
        };
        assert_eq!(a.push(&ping), Ok(Assembled::Other));
        assert_eq!(a.push(&headers(5, b"x", false)), Ok(Assembled::Pending));
        assert_eq!(a.push(&continuation(5, b"y", true)), Ok(complete(5, b"xy")));
    }

    #[test]
    fn end_stream_comes_from_the_headers_frame() {
        let mut a = HeaderBlockAssembler::new(HeaderBlockLimits::default());
        let first = Frame::Headers {
            stream_id: 1,
            fragment: b"a",
            end_stream: false,
            end_headers: false,
        };
        a.push(&first).unwrap();
        assert_eq!(
            a.push(&continuation(1, b"b", true)),
            Ok(Assembled::Complete(HeaderBlock {
                stream_id: 1,
                end_stream: false,
                block: b"ab"
            }))
        );
    }

    #[test]
    fn any_other_frame_inside_a_block_ends_the_connection() {
        let others = [
            headers(1, b"", true),
            headers(3, b"", true),
            continuation(3, b"", true),
            Frame::Data {
                stream_id: 1,
                data: b"",
                end_stream: false,
                flow_controlled_len: 0,
            },
            Frame::Priority { stream_id: 1 },
            Frame::WindowUpdate {
                stream_id: 0,
                increment: 1,
            },
            Frame::Settings {
                ack: true,
                settings: Default::default(),
            },
            Frame::Unknown {
                frame_type: 0xfa,
                flags: 0,
                stream_id: 1,
                payload: b"",
            },
        ];
        for other in others {
            let mut a = HeaderBlockAssembler::new(HeaderBlockLimits::default());
            a.push(&headers(1, b"a", false)).unwrap();
            let e = a.push(&other).unwrap_err();
            assert_eq!(
                e,
                FrameError::connection(Reason::ExpectedContinuation {
                    stream_id: 1,
                    got_type: other.frame_type(),
                    got_stream: other.stream_id(),
                }),
                "{other:?}"
            );
            assert_eq!(e.code(), ErrorCode::ProtocolError);
        }
    }

    #[test]
    fn continuation_without_a_block() {
        let mut a = HeaderBlockAssembler::new(HeaderBlockLimits::default());
        assert_eq!(
            a.push(&continuation(1, b"a", true)),
            Err(FrameError::connection(Reason::UnexpectedContinuation))
        );
        // Nor after a block has ended.
        a.push(&headers(1, b"a", true)).unwrap();
        assert_eq!(
            a.push(&continuation(1, b"a", true)),
            Err(FrameError::connection(Reason::UnexpectedContinuation))
        );
    }

    #[test]
    fn stream_errors_inside_a_block_end_the_connection() {
        let reader = FrameReader::default();
        // PRIORITY of 4 bytes on stream 3: a stream error on its own.
        let bad_priority = b"\0\0\x04\x02\0\0\0\0\x03\0\0\0\x01";
        let e = reader.parse(bad_priority).unwrap_err();
        assert!(!e.is_connection_error());

        let mut a = HeaderBlockAssembler::new(HeaderBlockLimits::default());
        assert_eq!(a.check_error(e), e);
        a.push(&headers(1, b"a", false)).unwrap();
        assert_eq!(
            a.check_error(e),
            FrameError::connection(Reason::ExpectedContinuation {
                stream_id: 1,
                got_type: 2,
                got_stream: 3,
            })
        );
        let zero_increment = FrameError::stream(5, Reason::ZeroWindowIncrement);
        assert_eq!(
            a.check_error(zero_increment),
            FrameError::connection(Reason::ExpectedContinuation {
                stream_id: 1,
                got_type: 8,
                got_stream: 5,
            })
        );
        // Connection errors stay as they are.
        let c = FrameError::connection(Reason::PushPromise);
        assert_eq!(a.check_error(c), c);
    }

    #[test]
    fn block_size_limit() {
        let limits = HeaderBlockLimits {
            max_block_size: 10,
            max_continuations: 100,
        };
        let mut a = HeaderBlockAssembler::new(limits);
        assert!(matches!(
            a.push(&headers(1, &[0; 10], true)),
            Ok(Assembled::Complete(_))
        ));
        let too_large = FrameError::connection(Reason::HeaderBlockTooLarge { limit: 10 });
        assert_eq!(a.push(&headers(1, &[0; 11], true)), Err(too_large));
        assert_eq!(too_large.code(), ErrorCode::EnhanceYourCalm);

        let mut a = HeaderBlockAssembler::new(limits);
        a.push(&headers(1, &[0; 4], false)).unwrap();
        a.push(&continuation(1, &[0; 6], false)).unwrap();
        assert_eq!(a.push(&continuation(1, &[0; 1], true)), Err(too_large));

        let mut a = HeaderBlockAssembler::new(limits);
        a.push(&headers(1, &[0; 4], false)).unwrap();
        assert_eq!(
            a.push(&continuation(1, &[0; 6], true)),
            Ok(complete(1, &[0; 10]))
        );
    }

    #[test]
    fn continuation_count_limit_counts_empty_frames() {
        let limits = HeaderBlockLimits {
            max_block_size: 1000,
            max_continuations: 3,
        };
        let mut a = HeaderBlockAssembler::new(limits);
        a.push(&headers(1, b"a", false)).unwrap();
        for _ in 0..3 {
            assert_eq!(a.push(&continuation(1, b"", false)), Ok(Assembled::Pending));
        }
        let e = a.push(&continuation(1, b"", true)).unwrap_err();
        assert_eq!(
            e,
            FrameError::connection(Reason::TooManyContinuations { limit: 3 })
        );
        assert_eq!(e.code(), ErrorCode::EnhanceYourCalm);

        // The count starts again with each block.
        let mut a = HeaderBlockAssembler::new(limits);
        for stream_id in [1, 3, 5] {
            a.push(&headers(stream_id, b"a", false)).unwrap();
            for _ in 0..2 {
                a.push(&continuation(stream_id, b"b", false)).unwrap();
            }
            assert_eq!(
                a.push(&continuation(stream_id, b"c", true)),
                Ok(complete(stream_id, b"abbc"))
            );
        }
    }

    #[test]
    fn large_buffer_is_freed_after_its_block() {
        let mut a = HeaderBlockAssembler::new(HeaderBlockLimits::default());
        a.push(&headers(1, &[1; 10_000], false)).unwrap();
        a.push(&continuation(1, &[2; 10_000], true)).unwrap();
        assert!(a.buf.capacity() >= 20_000);
        let ping = Frame::Ping {
            ack: false,
            data: [0; 8],
        };
        a.push(&ping).unwrap();
        assert_eq!(a.buf.capacity(), 0);
    }

    #[test]
    fn written_blocks_reassemble() {
        let block: Vec<u8> = (0..200u8).collect();
        for max in [1, 7, 64, 199, 200, 1000] {
            let mut wire = Vec::new();
            write_headers(9, &block, true, max, &mut wire);
            let reader = FrameReader::new(max as u32);
            let mut a = HeaderBlockAssembler::new(HeaderBlockLimits {
                max_block_size: 200,
                max_continuations: 199,
            });
            let mut input = &wire[..];
            let mut got = None;
            while let Some((frame, used)) = reader.parse(input).unwrap() {
                input = &input[used..];
                if let Assembled::Complete(b) = a.push(&frame).unwrap() {
                    got = Some(b.block.to_vec());
                }
            }
            assert_eq!(got.as_deref(), Some(&block[..]), "max {max}");
        }
    }
}
