//! Writing messages.

use crate::view::Value;
use crate::{MessageType, TType, Transport};

/// A message header to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'n> {
    /// The method name.
    pub name: &'n [u8],
    /// Call, reply, exception or oneway.
    pub message_type: MessageType,
    /// The sequence id (a reply repeats the call's).
    pub seq_id: i32,
    /// Strict (versioned) header, as the official libraries write by default;
    /// `false` writes the old unversioned one.
    pub strict: bool,
}

/// Appends one message to a buffer, in the shape of Thrift's `TProtocol`:
/// a field header, then its value; containers are a header followed by
/// their elements; a nested struct ends with [`stop`](Self::stop).
/// [`finish`](Self::finish) ends the argument struct and fills in the frame
/// length.
///
/// Lengths over `i32::MAX` cannot be written in Thrift: the methods that take
/// one panic on them.
#[derive(Debug)]
pub struct Encoder<'b> {
    out: &'b mut Vec<u8>,
    start: usize,
    transport: Transport,
}

fn len32(n: usize) -> [u8; 4] {
    i32::try_from(n)
        .expect("Thrift lengths fit in an i32")
        .to_be_bytes()
}

impl<'b> Encoder<'b> {
    /// Starts a message at the end of `out`.
    pub fn new(out: &'b mut Vec<u8>, transport: Transport, header: Header<'_>) -> Self {
        let start = out.len();
        if transport == Transport::Framed {
            out.extend_from_slice(&[0; 4]);
        }
        if header.strict {
            let word = 0x8001_0000u32 | header.message_type as u32;
            out.extend_from_slice(&word.to_be_bytes());
            out.extend_from_slice(&len32(header.name.len()));
            out.extend_from_slice(header.name);
        } else {
            out.extend_from_slice(&len32(header.name.len()));
            out.extend_from_slice(header.name);
            out.push(header.message_type as u8);
        }
        out.extend_from_slice(&header.seq_id.to_be_bytes());
        Encoder {
            out,
            start,
            transport,
        }
    }

    /// A field header: its type and id; the value follows.
    pub fn field(&mut self, id: i16, ty: TType) -> &mut Self {
        self.out.push(ty as u8);
        self.out.extend_from_slice(&id.to_be_bytes());
        self
    }

    /// The end of a nested struct.
    pub fn stop(&mut self) -> &mut Self {
        self.out.push(0);
        self
    }

    /// A `bool`.
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.out.push(v as u8);
        self
    }

    /// A `byte`.
    pub fn byte(&mut self, v: i8) -> &mut Self {
        self.out.push(v as u8);
        self
    }

    /// An `i16`.
    pub fn i16(&mut self, v: i16) -> &mut Self {
        self.out.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// An `i32` (or an enum).
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.out.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// An `i64`.
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.out.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// A `double`.
    pub fn double(&mut self, v: f64) -> &mut Self {
        self.out.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// A `binary` (or a `string`'s UTF-8 bytes).
    pub fn binary(&mut self, v: &[u8]) -> &mut Self {
        self.out.extend_from_slice(&len32(v.len()));
        self.out.extend_from_slice(v);
        self
    }

    /// A `string`.
    pub fn string(&mut self, v: &str) -> &mut Self {
        self.binary(v.as_bytes())
    }

    /// A `uuid`.
    pub fn uuid(&mut self, v: [u8; 16]) -> &mut Self {
        self.out.extend_from_slice(&v);
        self
    }

    /// A list header; `len` elements follow.
    pub fn list(&mut self, elem: TType, len: usize) -> &mut Self {
        self.out.push(elem as u8);
        self.out.extend_from_slice(&len32(len));
        self
    }

    /// A set header; `len` elements follow.
    pub fn set(&mut self, elem: TType, len: usize) -> &mut Self {
        self.list(elem, len)
    }

    /// A map header; `len` key, value pairs follow.
    pub fn map(&mut self, key: TType, value: TType, len: usize) -> &mut Self {
        self.out.push(key as u8);
        self.out.push(value as u8);
        self.out.extend_from_slice(&len32(len));
        self
    }

    /// A value read from another message, written again element by element.
    pub fn value(&mut self, v: &Value<'_>) -> &mut Self {
        match *v {
            Value::Bool(b) => self.bool(b),
            Value::Byte(b) => self.byte(b),
            Value::I16(n) => self.i16(n),
            Value::I32(n) => self.i32(n),
            Value::I64(n) => self.i64(n),
            Value::Double(d) => self.double(d),
            Value::Binary(b) => self.binary(b),
            Value::Uuid(u) => {
                self.out.extend_from_slice(u);
                self
            }
            Value::Struct(s) => {
                for f in s.fields() {
                    self.field(f.id, f.value.ttype()).value(&f.value);
                }
                self.stop()
            }
            Value::List(l) | Value::Set(l) => {
                self.list(l.elem_type(), l.len());
                for e in l.iter() {
                    self.value(&e);
                }
                self
            }
            Value::Map(m) => {
                self.map(m.key_type(), m.value_type(), m.len());
                for (k, e) in m.iter() {
                    self.value(&k).value(&e);
                }
                self
            }
        }
    }

    /// Ends the argument struct and, when framed, fills in the frame length;
    /// returns the message's length on the wire.
    pub fn finish(self) -> usize {
        self.out.push(0);
        let wire = self.out.len() - self.start;
        if self.transport == Transport::Framed {
            let len = len32(wire - 4);
            self.out[self.start..self.start + 4].copy_from_slice(&len);
        }
        wire
    }
}

/// Appends the forwarder call `msg(key, payload)` (oneway) to `out`; returns
/// its length on the wire.
pub fn encode_forwarder_msg(
    out: &mut Vec<u8>,
    transport: Transport,
    strict: bool,
    seq_id: i32,
    key: i32,
    payload: &[u8],
) -> usize {
    let mut e = Encoder::new(
        out,
        transport,
        Header {
            name: b"msg",
            message_type: MessageType::Oneway,
            seq_id,
            strict,
        },
    );
    e.field(1, TType::I32).i32(key);
    e.field(2, TType::String).binary(payload);
    e.finish()
}
