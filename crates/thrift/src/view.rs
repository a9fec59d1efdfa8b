//! Borrowed views of a checked message: nothing is copied, scalars are
//! decoded when reached.

use crate::wire::{Cursor, Header};
use crate::{ArgsError, MessageType, TType, Transport};

/// One whole message, checked, borrowed from the caller's buffer.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    wire: &'a [u8],
    /// Where the message starts in `wire` (4 when framed).
    start: usize,
    name: &'a [u8],
    message_type: MessageType,
    seq_id: i32,
    strict: bool,
    transport: Transport,
    /// The argument struct's fields, through to the end of the message.
    body: &'a [u8],
}

impl<'a> Message<'a> {
    pub(crate) fn new(wire: &'a [u8], start: usize, h: Header, transport: Transport) -> Self {
        let msg = wire.get(start..).unwrap_or_default();
        Message {
            wire,
            start,
            name: msg.get(h.name.0..h.name.1).unwrap_or_default(),
            message_type: h.message_type,
            seq_id: h.seq_id,
            strict: h.strict,
            transport,
            body: msg.get(h.body..).unwrap_or_default(),
        }
    }

    /// The method name, as sent.
    pub fn name(&self) -> &'a [u8] {
        self.name
    }

    /// The method name, if it is UTF-8 (Thrift requires it, but does not check it).
    pub fn name_str(&self) -> Option<&'a str> {
        std::str::from_utf8(self.name).ok()
    }

    /// Call, reply, exception or oneway.
    pub fn message_type(&self) -> MessageType {
        self.message_type
    }

    /// The sequence id, which a reply repeats.
    pub fn seq_id(&self) -> i32 {
        self.seq_id
    }

    /// Whether the header is the strict (versioned) one.
    pub fn is_strict(&self) -> bool {
        self.strict
    }

    /// The transport the message came in.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// The message's length on the wire, frame header included: the bytes to
    /// discard or forward.
    pub fn wire_len(&self) -> usize {
        self.wire.len()
    }

    /// The message exactly as it came, frame header included: forwarding
    /// writes these bytes unchanged.
    pub fn wire_bytes(&self) -> &'a [u8] {
        self.wire
    }

    /// The message without its frame header (all of it when unframed).
    pub fn message_bytes(&self) -> &'a [u8] {
        self.wire.get(self.start..).unwrap_or_default()
    }

    /// The argument struct (or, in a reply, the result struct).
    pub fn args(&self) -> StructView<'a> {
        StructView { data: self.body }
    }

    /// The top-level fields, in wire order.
    pub fn fields(&self) -> Fields<'a> {
        self.args().fields()
    }
}

/// A Thrift value borrowed from a message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    /// `bool`: any non-zero byte is true, as the official libraries read it.
    Bool(bool),
    /// `byte` (`i8`).
    Byte(i8),
    /// `i16`.
    I16(i16),
    /// `i32`, and enums.
    I32(i32),
    /// `i64`.
    I64(i64),
    /// `double`.
    Double(f64),
    /// `string` or `binary`: the bytes as sent (a string should be UTF-8).
    Binary(&'a [u8]),
    /// `uuid`, 16 bytes.
    Uuid(&'a [u8]),
    /// A nested struct.
    Struct(StructView<'a>),
    /// A map.
    Map(MapView<'a>),
    /// A set: the same layout as a list.
    Set(ListView<'a>),
    /// A list.
    List(ListView<'a>),
}

impl<'a> Value<'a> {
    /// The wire type of this value.
    pub fn ttype(&self) -> TType {
        match self {
            Value::Bool(_) => TType::Bool,
            Value::Byte(_) => TType::Byte,
            Value::I16(_) => TType::I16,
            Value::I32(_) => TType::I32,
            Value::I64(_) => TType::I64,
            Value::Double(_) => TType::Double,
            Value::Binary(_) => TType::String,
            Value::Uuid(_) => TType::Uuid,
            Value::Struct(_) => TType::Struct,
            Value::Map(_) => TType::Map,
            Value::Set(_) => TType::Set,
            Value::List(_) => TType::List,
        }
    }

    /// The value if it is an `i32`.
    pub fn as_i32(&self) -> Option<i32> {
        match *self {
            Value::I32(v) => Some(v),
            _ => None,
        }
    }

    /// The value if it is an `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I64(v) => Some(v),
            _ => None,
        }
    }

    /// The bytes if it is a `string` or `binary`.
    pub fn as_bytes(&self) -> Option<&'a [u8]> {
        match *self {
            Value::Binary(v) => Some(v),
            _ => None,
        }
    }

    /// The text if it is a `string` holding UTF-8.
    pub fn as_str(&self) -> Option<&'a str> {
        self.as_bytes().and_then(|b| std::str::from_utf8(b).ok())
    }

    /// The struct if it is one.
    pub fn as_struct(&self) -> Option<StructView<'a>> {
        match *self {
            Value::Struct(v) => Some(v),
            _ => None,
        }
    }

    /// Reads the value of type `ty` at `pos`; returns it and where it ends.
    /// `data` has been checked, so `None` cannot happen in practice.
    fn read(data: &'a [u8], pos: usize, ty: TType) -> Option<(Self, usize)> {
        let c = Cursor::trusted(data);
        let end = c.skip_value(pos, ty, 0).ok()?;
        let raw = data.get(pos..end)?;
        let v = match ty {
            TType::Bool => Value::Bool(*raw.first()? != 0),
            TType::Byte => Value::Byte(*raw.first()? as i8),
            TType::I16 => Value::I16(i16::from_be_bytes(raw.try_into().ok()?)),
            TType::I32 => Value::I32(i32::from_be_bytes(raw.try_into().ok()?)),
            TType::I64 => Value::I64(i64::from_be_bytes(raw.try_into().ok()?)),
            TType::Double => Value::Double(f64::from_be_bytes(raw.try_into().ok()?)),
            TType::Uuid => Value::Uuid(raw),
            TType::String => Value::Binary(raw.get(4..)?),
            TType::Struct => Value::Struct(StructView { data: raw }),
            TType::List | TType::Set => {
                let elem = TType::from_u8(*raw.first()?)?;
                let view = ListView {
                    elem,
                    len: i32::from_be_bytes(raw.get(1..5)?.try_into().ok()?) as usize,
                    data: raw.get(5..)?,
                };
                if ty == TType::List {
                    Value::List(view)
                } else {
                    Value::Set(view)
                }
            }
            TType::Map => Value::Map(MapView {
                key: TType::from_u8(*raw.first()?)?,
                value: TType::from_u8(*raw.get(1)?)?,
                len: i32::from_be_bytes(raw.get(2..6)?.try_into().ok()?) as usize,
                data: raw.get(6..)?,
            }),
        };
        Some((v, end))
    }
}

/// A struct's fields, borrowed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StructView<'a> {
    data: &'a [u8],
}

impl<'a> StructView<'a> {
    /// The fields in wire order.
    pub fn fields(&self) -> Fields<'a> {
        Fields {
            data: self.data,
            pos: 0,
        }
    }

    /// The first field with this id, if any.
    pub fn field(&self, id: i16) -> Option<Value<'a>> {
        self.fields().find(|f| f.id == id).map(|f| f.value)
    }
}

/// One field of a struct.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Field<'a> {
    /// The field id from the IDL.
    pub id: i16,
    /// Its value (its type is [`Value::ttype`]).
    pub value: Value<'a>,
}

/// The fields of a struct, in wire order.
#[derive(Debug, Clone)]
pub struct Fields<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for Fields<'a> {
    type Item = Field<'a>;

    fn next(&mut self) -> Option<Field<'a>> {
        let head = self.data.get(self.pos..self.pos + 3)?;
        let ty = TType::from_u8(head[0])?;
        let id = i16::from_be_bytes([head[1], head[2]]);
        let (value, end) = Value::read(self.data, self.pos + 3, ty)?;
        self.pos = end;
        Some(Field { id, value })
    }
}

/// A list's or set's elements, borrowed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ListView<'a> {
    elem: TType,
    len: usize,
    data: &'a [u8],
}

impl<'a> ListView<'a> {
    /// The element type.
    pub fn elem_type(&self) -> TType {
        self.elem
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements in wire order.
    pub fn iter(&self) -> Elements<'a> {
        Elements {
            data: self.data,
            pos: 0,
            left: self.len,
            elem: self.elem,
        }
    }
}

/// The elements of a list or set.
#[derive(Debug, Clone)]
pub struct Elements<'a> {
    data: &'a [u8],
    pos: usize,
    left: usize,
    elem: TType,
}

impl<'a> Iterator for Elements<'a> {
    type Item = Value<'a>;

    fn next(&mut self) -> Option<Value<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let (v, end) = Value::read(self.data, self.pos, self.elem)?;
        self.pos = end;
        Some(v)
    }
}

/// A map's entries, borrowed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MapView<'a> {
    key: TType,
    value: TType,
    len: usize,
    data: &'a [u8],
}

impl<'a> MapView<'a> {
    /// The key type.
    pub fn key_type(&self) -> TType {
        self.key
    }

    /// The value type.
    pub fn value_type(&self) -> TType {
        self.value
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The entries in wire order.
    pub fn iter(&self) -> Entries<'a> {
        Entries {
            data: self.data,
            pos: 0,
            left: self.len,
            key: self.key,
            value: self.value,
        }
    }
}

/// The entries of a map.
#[derive(Debug, Clone)]
pub struct Entries<'a> {
    data: &'a [u8],
    pos: usize,
    left: usize,
    key: TType,
    value: TType,
}

impl<'a> Iterator for Entries<'a> {
    type Item = (Value<'a>, Value<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let (k, end) = Value::read(self.data, self.pos, self.key)?;
        let (v, end) = Value::read(self.data, end, self.value)?;
        self.pos = end;
        Some((k, v))
    }
}

/// The arguments of the forwarder's one method,
/// `oneway void msg(1: i32 key, 2: string payload)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwarderMsg<'a> {
    /// Which destination the message is for.
    pub key: i32,
    /// The payload, as sent.
    pub payload: &'a [u8],
}

impl<'a> ForwarderMsg<'a> {
    /// The method name.
    pub const METHOD: &'static str = "msg";

    /// The key and wire length of the `msg` call at the start of `buf`, if it is whole and
    /// laid out exactly as Apache Thrift's libraries write one: a strict oneway (or call)
    /// header named `msg`, field 1 an i32, field 2 a string (no longer than
    /// `limits.max_string_bytes`), then the end of the struct, framed (the frame ending
    /// right there) if `transport` says so, no longer than `limits.max_message_bytes`.
    /// Every byte of such a message is checked here, so it needs no other decoding to be
    /// forwarded; `None` for anything else (another shape, a message still arriving, bad
    /// input), which the full [`crate::Decoder`] then reads or refuses with its reason.
    #[inline]
    pub fn peek_canonical(
        buf: &[u8],
        transport: crate::Transport,
        limits: &crate::Limits,
    ) -> Option<(i32, usize)> {
        let (start, frame) = match transport {
            crate::Transport::Framed => {
                let len = u32::from_be_bytes(*buf.first_chunk::<4>()?) as usize;
                (4, Some(len))
            }
            crate::Transport::Unframed => (0, None),
        };
        // Header: version word with type, name length 3, "msg", sequence id; field 1 i32.
        const FIXED: usize = 4 + 4 + 3 + 4 + 3 + 4 + 3 + 4;
        let m = buf.get(start..start + FIXED)?;
        let word = u32::from_be_bytes([m[0], m[1], m[2], m[3]]);
        if word != 0x8001_0004 && word != 0x8001_0001 {
            return None;
        }
        if m[4..11] != [0, 0, 0, 3, b'm', b's', b'g'] || m[15..18] != [8, 0, 1] {
            return None;
        }
        let key = i32::from_be_bytes([m[18], m[19], m[20], m[21]]);
        if m[22..25] != [11, 0, 2] {
            return None;
        }
        let payload = u32::from_be_bytes([m[25], m[26], m[27], m[28]]) as usize;
        if payload > limits.max_string_bytes || payload > i32::MAX as usize {
            return None;
        }
        let body = FIXED + payload + 1;
        if body > limits.max_message_bytes || frame.is_some_and(|len| len != body) {
            return None;
        }
        if *buf.get(start + body - 1)? != 0 {
            return None;
        }
        Some((key, start + body))
    }

    /// Reads the arguments of a `msg` call (oneway, or call from an old
    /// client); unknown fields are skipped, as Thrift does.
    pub fn from_message(m: &Message<'a>) -> Result<Self, ArgsError> {
        if m.name() != Self::METHOD.as_bytes() {
            return Err(ArgsError::WrongMethod);
        }
        if !matches!(m.message_type(), MessageType::Oneway | MessageType::Call) {
            return Err(ArgsError::WrongMessageType(m.message_type()));
        }
        let (mut key, mut payload) = (None, None);
        for f in m.fields() {
            let want = match f.id {
                1 => TType::I32,
                2 => TType::String,
                _ => continue,
            };
            match (f.id, f.value) {
                (1, Value::I32(k)) => key = Some(k),
                (2, Value::Binary(p)) => payload = Some(p),
                (id, v) => {
                    return Err(ArgsError::WrongType {
                        id,
                        expected: want,
                        found: v.ttype(),
                    })
                }
            }
        }
        Ok(ForwarderMsg {
            key: key.ok_or(ArgsError::Missing(1))?,
            payload: payload.ok_or(ArgsError::Missing(2))?,
        })
    }
}
