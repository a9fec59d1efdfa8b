//! The binary protocol's wire format, read: a message header, and values
//! skipped by their types with every length checked on the way. The
//! decoder walks a message with it to find where the message ends; the
//! views read checked bytes with it.
//!
//! The walk reads each field by its type and skips it; it allocates nothing
//! and recurses at most [`DEPTH_CAP`] deep, so no input and no configuration
//! can exhaust the heap or the stack.

use crate::{Error, LengthOf, MessageType, TType};

/// The most nesting levels ever walked, whatever
/// [`Limits::max_depth`](crate::Limits::max_depth) says: the walk recurses
/// once per level, and 256 small frames fit any thread's stack.
pub const DEPTH_CAP: usize = 256;

const VERSION_MASK: u32 = 0xffff_0000;
const VERSION_1: u32 = 0x8001_0000;

/// Why a walk stopped early.
pub(crate) enum Stop {
    /// The input must extend to at least this offset.
    Need(usize),
    /// The input is bad.
    Bad(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Bad(e)
    }
}

/// Bytes being walked: `data` is what has arrived, `end` where the message
/// must end at the latest (the frame end, or the message size limit).
pub(crate) struct Cursor<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) end: usize,
    /// Framed: going past `end` means the message overruns its frame.
    pub(crate) framed: bool,
    pub(crate) max_string: usize,
    pub(crate) max_elements: usize,
    pub(crate) max_depth: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor over bytes already checked, so the limits cannot trigger.
    pub(crate) fn trusted(data: &'a [u8]) -> Self {
        Cursor {
            data,
            end: data.len(),
            framed: false,
            max_string: usize::MAX,
            max_elements: usize::MAX,
            max_depth: DEPTH_CAP,
        }
    }

    /// The offset `n` bytes past `pos`, once it is known to be in the input.
    fn advance(&self, pos: usize, n: u64) -> Result<usize, Stop> {
        let end = (pos as u64).saturating_add(n);
        if end > self.end as u64 {
            return Err(Stop::Bad(if self.framed {
                Error::FrameMismatch {
                    frame: self.end,
                    message: None,
                }
            } else {
                Error::OverLimit {
                    of: LengthOf::Message,
                    len: end,
                    limit: self.end as u64,
                }
            }));
        }
        // end <= self.end, a usize.
        let end = end as usize;
        if end > self.data.len() {
            return Err(Stop::Need(end));
        }
        Ok(end)
    }

    pub(crate) fn bytes(&self, pos: usize, n: usize) -> Result<&'a [u8], Stop> {
        let end = self.advance(pos, n as u64)?;
        Ok(self.data.get(pos..end).unwrap_or_default())
    }

    pub(crate) fn u8(&self, pos: usize) -> Result<u8, Stop> {
        Ok(self.bytes(pos, 1)?.first().copied().unwrap_or(0))
    }

    pub(crate) fn i32(&self, pos: usize) -> Result<i32, Stop> {
        let b = self.bytes(pos, 4)?;
        Ok(i32::from_be_bytes(b.try_into().unwrap_or([0; 4])))
    }

    /// A length field: checked for sign and limit before anything uses it.
    fn length(&self, pos: usize, of: LengthOf, limit: usize) -> Result<usize, Stop> {
        let len = self.i32(pos)?;
        if len < 0 {
            return Err(Stop::Bad(Error::NegativeLength { of, len }));
        }
        if len as u64 > limit as u64 {
            return Err(Stop::Bad(Error::OverLimit {
                of,
                len: len as u64,
                limit: limit as u64,
            }));
        }
        Ok(len as usize)
    }

    fn ttype(&self, pos: usize) -> Result<TType, Stop> {
        let t = self.u8(pos)?;
        TType::from_u8(t).ok_or(Stop::Bad(Error::UnknownType(t)))
    }

    fn enter(&self, depth: usize) -> Result<(), Stop> {
        if depth > self.max_depth {
            return Err(Stop::Bad(Error::DepthOverLimit {
                limit: self.max_depth,
            }));
        }
        Ok(())
    }

    /// Skips the fields of a struct starting at `pos` (at nesting `depth`)
    /// through its STOP byte; returns the offset after it.
    pub(crate) fn skip_struct(&self, mut pos: usize, depth: usize) -> Result<usize, Stop> {
        self.enter(depth)?;
        loop {
            if self.u8(pos)? == 0 {
                return Ok(pos + 1);
            }
            let ty = self.ttype(pos)?;
            pos = self.advance(pos, 3)?;
            pos = self.skip_value(pos, ty, depth)?;
        }
    }

    /// Skips one value of type `ty` inside a container at nesting `depth`.
    pub(crate) fn skip_value(&self, pos: usize, ty: TType, depth: usize) -> Result<usize, Stop> {
        if let Some(n) = ty.fixed_size() {
            return self.advance(pos, n as u64);
        }
        match ty {
            TType::String => {
                let len = self.length(pos, LengthOf::String, self.max_string)?;
                self.advance(pos + 4, len as u64)
            }
            TType::Struct => self.skip_struct(pos, depth + 1),
            TType::List | TType::Set => {
                let elem = self.ttype(pos)?;
                let n = self.length(pos + 1, LengthOf::Container, self.max_elements)?;
                self.skip_elements(pos + 5, n, elem, None, depth + 1)
            }
            TType::Map => {
                let key = self.ttype(pos)?;
                let value = self.ttype(pos + 1)?;
                let n = self.length(pos + 2, LengthOf::Container, self.max_elements)?;
                self.skip_elements(pos + 6, n, key, Some(value), depth + 1)
            }
            // Every other type has a fixed size.
            _ => Ok(pos),
        }
    }

    fn skip_elements(
        &self,
        mut pos: usize,
        n: usize,
        a: TType,
        b: Option<TType>,
        depth: usize,
    ) -> Result<usize, Stop> {
        self.enter(depth)?;
        // Fixed-size elements are skipped in one step, which also tells a
        // caller waiting for more input exactly how much is missing.
        let fixed = match (a.fixed_size(), b.map(TType::fixed_size)) {
            (Some(x), None) => Some(x),
            (Some(x), Some(Some(y))) => Some(x + y),
            _ => None,
        };
        if let Some(size) = fixed {
            return self.advance(pos, n as u64 * size as u64);
        }
        for _ in 0..n {
            pos = self.skip_value(pos, a, depth)?;
            if let Some(b) = b {
                pos = self.skip_value(pos, b, depth)?;
            }
        }
        Ok(pos)
    }
}

/// A message header, read from the start of the message.
pub(crate) struct Header {
    pub(crate) name: (usize, usize),
    pub(crate) message_type: MessageType,
    pub(crate) seq_id: i32,
    pub(crate) strict: bool,
    /// Where the argument struct starts.
    pub(crate) body: usize,
}

pub(crate) fn header(c: &Cursor<'_>) -> Result<Header, Stop> {
    let word = c.i32(0)?;
    if word < 0 {
        let word = word as u32;
        if word & VERSION_MASK != VERSION_1 {
            return Err(Stop::Bad(Error::BadVersion(word)));
        }
        let message_type = message_type(word as u8)?;
        let len = c.length(4, LengthOf::Name, c.max_string)?;
        c.advance(8, len as u64)?;
        let seq_id = c.i32(8 + len)?;
        Ok(Header {
            name: (8, 8 + len),
            message_type,
            seq_id,
            strict: true,
            body: 12 + len,
        })
    } else {
        let len = c.length(0, LengthOf::Name, c.max_string)?;
        c.advance(4, len as u64)?;
        let message_type = message_type(c.u8(4 + len)?)?;
        let seq_id = c.i32(5 + len)?;
        Ok(Header {
            name: (4, 4 + len),
            message_type,
            seq_id,
            strict: false,
            body: 9 + len,
        })
    }
}

fn message_type(t: u8) -> Result<MessageType, Stop> {
    MessageType::from_u8(t).ok_or(Stop::Bad(Error::BadMessageType(t)))
}

/// The header of the message `c` holds and where the message ends.
pub(crate) fn walk(c: &Cursor<'_>) -> Result<(Header, usize), Stop> {
    let h = header(c)?;
    let end = c.skip_struct(h.body, 1)?;
    Ok((h, end))
}
