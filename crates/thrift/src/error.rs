//! Why a message was refused.

use std::fmt;

/// Which length field of the input an [`Error`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LengthOf {
    /// The 4-byte frame header of the framed transport.
    Frame,
    /// A whole unframed message, as far as it was walked.
    Message,
    /// The method name in the message header.
    Name,
    /// A string or binary value.
    String,
    /// The element count of a list, set or map.
    Container,
}

impl fmt::Display for LengthOf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LengthOf::Frame => "frame",
            LengthOf::Message => "message",
            LengthOf::Name => "method name",
            LengthOf::String => "string",
            LengthOf::Container => "container",
        })
    }
}

/// Malformed or oversized input: the connection it came from cannot be
/// resynchronised, so the caller closes it and logs this reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// A strict header whose version word is not `0x8001_xxxx`.
    BadVersion(u32),
    /// A message type other than call (1), reply (2), exception (3), oneway (4).
    BadMessageType(u8),
    /// A negative length or element count.
    NegativeLength {
        /// What the length is of.
        of: LengthOf,
        /// The value read.
        len: i32,
    },
    /// A length (or, for [`LengthOf::Message`], a position reached while
    /// walking) over the configured limit.
    OverLimit {
        /// What the length is of.
        of: LengthOf,
        /// The value read or reached.
        len: u64,
        /// The limit from [`Limits`](crate::Limits).
        limit: u64,
    },
    /// A field or element type id that is not a Thrift type.
    UnknownType(u8),
    /// Structs and containers nested deeper than the limit.
    DepthOverLimit {
        /// The depth limit in force.
        limit: usize,
    },
    /// The frame length disagrees with the message inside it.
    FrameMismatch {
        /// The frame length (without its 4-byte header).
        frame: usize,
        /// Where the message ended, or `None` when it runs past the frame.
        message: Option<usize>,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::BadVersion(v) => write!(f, "bad protocol version 0x{v:08x}"),
            Error::BadMessageType(t) => write!(f, "unknown message type {t}"),
            Error::NegativeLength { of, len } => write!(f, "negative {of} length {len}"),
            Error::OverLimit { of, len, limit } => {
                write!(f, "{of} length {len} over the limit of {limit}")
            }
            Error::UnknownType(t) => write!(f, "unknown type id {t}"),
            Error::DepthOverLimit { limit } => write!(f, "nesting deeper than {limit}"),
            Error::FrameMismatch {
                frame,
                message: Some(end),
            } => write!(f, "frame of {frame} bytes holds a message of {end} bytes"),
            Error::FrameMismatch {
                frame,
                message: None,
            } => write!(f, "message runs past its frame of {frame} bytes"),
        }
    }
}

impl std::error::Error for Error {}

/// Why [`ForwarderMsg::from_message`](crate::ForwarderMsg::from_message)
/// refused a well-formed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgsError {
    /// The method is not `msg`.
    WrongMethod,
    /// A reply or exception, where a call or oneway was expected.
    WrongMessageType(crate::MessageType),
    /// A required argument is absent.
    Missing(i16),
    /// An argument has another type than the IDL says.
    WrongType {
        /// The field id.
        id: i16,
        /// The type in the IDL.
        expected: crate::TType,
        /// The type on the wire.
        found: crate::TType,
    },
}

impl fmt::Display for ArgsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ArgsError::WrongMethod => f.write_str("not the method msg"),
            ArgsError::WrongMessageType(t) => {
                write!(f, "message type {t:?} where a call was expected")
            }
            ArgsError::Missing(id) => write!(f, "argument {id} missing"),
            ArgsError::WrongType {
                id,
                expected,
                found,
            } => write!(f, "argument {id} is {found:?}, expected {expected:?}"),
        }
    }
}

impl std::error::Error for ArgsError {}
