//! The Thrift codec of fastpath: Apache Thrift's binary protocol, with no I/O.
//!
//! Where it sits among fastpath's crates, and what it must not do: docs/architecture.md.
//!
//! This is the protocol half of the framework's ThriftSocket. Bytes go in,
//! messages come out: a [`Decoder`] looks at what a connection has buffered
//! and says whether it holds a whole message ([`Decoded::Message`]), needs
//! more bytes ([`Decoded::NeedMore`]), or is bad ([`Error`], which says why;
//! the socket closes that connection and logs it). An [`Encoder`] writes
//! messages.
//!
//! Why it is shaped this way:
//! - **Sans-I/O.** The socket layer owns buffers and sockets; everything here
//!   works on byte slices, so every rule is tested, and fuzzed, alone.
//! - **Whole messages, borrowed.** A [`Message`] is a view into the caller's
//!   buffer: name, type, sequence id, and the fields, read in place (scalars
//!   decoded when reached, strings as `&[u8]`, structs and containers as
//!   nested iterators). [`Message::wire_len`] is what `discard` drops and
//!   [`Message::wire_bytes`] what `forward` writes, unchanged: forwarding
//!   never decodes and re-encodes.
//! - **Checked before use, allocation-free.** A message is walked field by
//!   field when it is complete (for the unframed transport that walk is how
//!   its end is found); every length is checked against [`Limits`] before it
//!   is used, nesting is bounded, and nothing is allocated, so no input can
//!   panic, exhaust memory or overflow the stack. The views then read data
//!   already checked.
//! - **Both headers, both transports.** Strict (versioned) and old
//!   non-strict message headers are read; the framed transport (4-byte
//!   length, then the message) and the plain one are both supported.
//!
//! ```
//! use fastpath_thrift::{encode_forwarder_msg, Decoded, Decoder, ForwarderMsg, Limits, Transport};
//!
//! let mut wire = Vec::new();
//! let len = encode_forwarder_msg(&mut wire, Transport::Framed, true, 7, 3, b"hello");
//! let decoder = Decoder::new(Transport::Framed, Limits::default());
//!
//! // A prefix is not a message yet; the frame header says how much is missing.
//! assert!(matches!(decoder.decode(&wire[..6]).unwrap(), Decoded::NeedMore(n) if n == len - 6));
//!
//! let Decoded::Message(msg) = decoder.decode(&wire).unwrap() else { panic!("whole message") };
//! assert_eq!(msg.name(), b"msg");
//! assert_eq!(msg.seq_id(), 7);
//! assert_eq!(msg.wire_len(), len);
//! let args = ForwarderMsg::from_message(&msg).unwrap();
//! assert_eq!((args.key, args.payload), (3, &b"hello"[..]));
//!
//! // Garbage gets a precise reason.
//! let err = decoder.decode(b"GET / HTTP/1.1\r\n").unwrap_err();
//! assert_eq!(err.to_string(), "frame length 1195725856 over the limit of 16384000");
//! ```
#![deny(missing_docs)]

mod decode;
mod encode;
mod error;
mod view;
mod wire;

#[doc(hidden)]
pub mod fuzzing;

pub use decode::{Decoded, Decoder};
pub use encode::{encode_forwarder_msg, Encoder, Header};
pub use error::{ArgsError, Error, LengthOf};
pub use view::{
    Elements, Entries, Field, Fields, ForwarderMsg, ListView, MapView, Message, StructView, Value,
};
pub use wire::DEPTH_CAP;

/// How messages are delimited on the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `TFramedTransport`: each message follows a 4-byte big-endian length.
    Framed,
    /// The plain (buffered) transport: messages back to back; the end of one
    /// is found by walking its fields.
    Unframed,
}

/// Limits on what a peer may send; anything beyond closes the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest message, frame header not counted. A whole message is
    /// buffered before it is handed on, so this bounds the memory one
    /// connection can hold. Default 16,384,000: Apache Thrift's default
    /// maximum frame size.
    pub max_message_bytes: usize,
    /// The longest string, binary or method name. Default 16,384,000 (any
    /// string that fits in a message).
    pub max_string_bytes: usize,
    /// The most elements in one list, set or map. Every element takes at
    /// least a byte, so the message limit bounds this already; a lower limit
    /// protects code that allocates per element. Default 1,048,576.
    pub max_container_elements: usize,
    /// The deepest nesting of structs and containers, the argument struct
    /// being level 1. Default 64, Apache Thrift's default recursion limit;
    /// never more than [`DEPTH_CAP`].
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_bytes: 16_384_000,
            max_string_bytes: 16_384_000,
            max_container_elements: 1 << 20,
            max_depth: 64,
        }
    }
}

/// The kind of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MessageType {
    /// A call that expects a reply.
    Call = 1,
    /// A reply to a call.
    Reply = 2,
    /// An exception in place of a reply (a `TApplicationException`).
    Exception = 3,
    /// A call that expects no reply.
    Oneway = 4,
}

impl MessageType {
    /// The type with this wire id.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => MessageType::Call,
            2 => MessageType::Reply,
            3 => MessageType::Exception,
            4 => MessageType::Oneway,
            _ => return None,
        })
    }
}

/// A value type on the wire (`TType`); STOP and VOID are not value types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TType {
    /// `bool`, one byte.
    Bool = 2,
    /// `byte`, one byte.
    Byte = 3,
    /// `double`, 8 bytes.
    Double = 4,
    /// `i16`.
    I16 = 6,
    /// `i32`, also enums.
    I32 = 8,
    /// `i64`.
    I64 = 10,
    /// `string` and `binary`: a 4-byte length, then the bytes.
    String = 11,
    /// A struct: fields, then a STOP byte.
    Struct = 12,
    /// `map`: key type, value type, count, then the pairs.
    Map = 13,
    /// `set`: element type, count, then the elements.
    Set = 14,
    /// `list`: element type, count, then the elements.
    List = 15,
    /// `uuid`, 16 bytes.
    Uuid = 16,
}

impl TType {
    /// The type with this wire id.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            2 => TType::Bool,
            3 => TType::Byte,
            4 => TType::Double,
            6 => TType::I16,
            8 => TType::I32,
            10 => TType::I64,
            11 => TType::String,
            12 => TType::Struct,
            13 => TType::Map,
            14 => TType::Set,
            15 => TType::List,
            16 => TType::Uuid,
            _ => return None,
        })
    }

    /// The encoded size of a value of this type, if it is fixed.
    pub fn fixed_size(self) -> Option<usize> {
        match self {
            TType::Bool | TType::Byte => Some(1),
            TType::I16 => Some(2),
            TType::I32 => Some(4),
            TType::Double | TType::I64 => Some(8),
            TType::Uuid => Some(16),
            TType::String | TType::Struct | TType::Map | TType::Set | TType::List => None,
        }
    }
}

#[cfg(test)]
mod tests;
