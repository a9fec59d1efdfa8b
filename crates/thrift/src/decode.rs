//! Splitting a byte stream into messages: the frame header where there is
//! one, and the walk of `wire` that checks each message and, unframed, finds
//! where it ends.

use crate::view::Message;
use crate::wire::{header, walk, Cursor, Stop, DEPTH_CAP};
use crate::{Error, LengthOf, Limits, Transport};

/// What the bytes buffered so far hold.
#[derive(Debug, Clone, Copy)]
pub enum Decoded<'a> {
    /// Not a whole message yet: at least this many more bytes are needed
    /// (exactly this many for a framed message whose frame header arrived).
    NeedMore(usize),
    /// A whole, checked message at the start of the buffer.
    Message(Message<'a>),
}

/// Splits a byte stream into Thrift binary-protocol messages.
///
/// It keeps no state between calls: give [`decode`](Self::decode) everything
/// buffered since the last message was consumed. A framed message is checked
/// once its frame has arrived (its header as soon as it arrives, so garbage is
/// refused early); an unframed one is walked from its start at each call, and
/// [`Decoded::NeedMore`] says how much to wait for to avoid needless walks.
///
/// That walk costs time in proportion to the bytes buffered, so a large
/// unframed message of many small values, arriving in many reads, is walked
/// once per read: a lower [`Limits::max_message_bytes`] bounds that for
/// unframed connections. Framed messages cost nothing until their frame is
/// complete, which is why Thrift's own non-blocking servers require framing.
#[derive(Debug, Clone, Copy)]
pub struct Decoder {
    transport: Transport,
    limits: Limits,
}

impl Decoder {
    /// A decoder for `transport` that refuses input beyond `limits`.
    pub fn new(transport: Transport, limits: Limits) -> Self {
        Decoder { transport, limits }
    }

    /// The transport this decoder reads.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn cursor<'a>(&self, data: &'a [u8], end: usize, framed: bool) -> Cursor<'a> {
        Cursor {
            data,
            end,
            framed,
            max_string: self.limits.max_string_bytes,
            max_elements: self.limits.max_container_elements,
            max_depth: self.limits.max_depth.min(DEPTH_CAP),
        }
    }

    /// Looks at the start of `buf` for one message.
    ///
    /// Never panics and never allocates, whatever `buf` holds. An error means
    /// the stream cannot be read further.
    pub fn decode<'a>(&self, buf: &'a [u8]) -> Result<Decoded<'a>, Error> {
        match self.transport {
            Transport::Framed => self.decode_framed(buf),
            Transport::Unframed => self.decode_unframed(buf),
        }
    }

    fn decode_framed<'a>(&self, buf: &'a [u8]) -> Result<Decoded<'a>, Error> {
        let Some(head) = buf.get(..4) else {
            return Ok(Decoded::NeedMore(4 - buf.len()));
        };
        let len = i32::from_be_bytes(head.try_into().unwrap_or([0; 4]));
        if len < 0 {
            return Err(Error::NegativeLength {
                of: LengthOf::Frame,
                len,
            });
        }
        let frame = len as usize;
        if frame > self.limits.max_message_bytes {
            return Err(Error::OverLimit {
                of: LengthOf::Frame,
                len: frame as u64,
                limit: self.limits.max_message_bytes as u64,
            });
        }
        let total = 4 + frame;
        let payload = buf.get(4..total.min(buf.len())).unwrap_or_default();
        let c = self.cursor(payload, frame, true);
        if buf.len() < total {
            // Check the header as soon as it is there: a stream that is not
            // Thrift at all is refused before its whole "frame" is awaited.
            return match header(&c) {
                Err(Stop::Bad(e)) => Err(e),
                _ => Ok(Decoded::NeedMore(total - buf.len())),
            };
        }
        let (h, end) = match walk(&c) {
            Ok(done) => done,
            Err(Stop::Bad(e)) => return Err(e),
            Err(Stop::Need(_)) => {
                return Err(Error::FrameMismatch {
                    frame,
                    message: None,
                })
            }
        };
        if end != frame {
            return Err(Error::FrameMismatch {
                frame,
                message: Some(end),
            });
        }
        Ok(Decoded::Message(Message::new(
            buf.get(..total).unwrap_or_default(),
            4,
            h,
            self.transport,
        )))
    }

    fn decode_unframed<'a>(&self, buf: &'a [u8]) -> Result<Decoded<'a>, Error> {
        let c = self.cursor(buf, self.limits.max_message_bytes, false);
        match walk(&c) {
            Ok((h, end)) => Ok(Decoded::Message(Message::new(
                buf.get(..end).unwrap_or_default(),
                0,
                h,
                self.transport,
            ))),
            Err(Stop::Bad(e)) => Err(e),
            Err(Stop::Need(end)) => Ok(Decoded::NeedMore(end.saturating_sub(buf.len()).max(1))),
        }
    }
}
