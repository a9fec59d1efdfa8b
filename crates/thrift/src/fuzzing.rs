//! Fuzz entry points, shared by the cargo-fuzz target and the stable-Rust
//! corpus replay test. They run the public API on arbitrary bytes and panic
//! when an invariant breaks; allocation here is fine, this is never on the
//! serving path.

use crate::{Decoded, Decoder, Encoder, Header, Limits, Message, Transport, Value};

/// An owned copy of a value, for comparisons (doubles by their bits, so NaN
/// compares equal to itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owned {
    /// Any scalar, as its type id and bits.
    Scalar(u8, u64),
    /// A string, binary or uuid.
    Bytes(Vec<u8>),
    /// A struct's fields.
    Struct(Vec<(i16, Owned)>),
    /// A list or set.
    List(u8, Vec<Owned>),
    /// A map.
    Map(u8, u8, Vec<(Owned, Owned)>),
}

/// Copies a borrowed value.
pub fn owned(v: &Value<'_>) -> Owned {
    let t = v.ttype() as u8;
    match *v {
        Value::Bool(b) => Owned::Scalar(t, b as u64),
        Value::Byte(n) => Owned::Scalar(t, n as u64),
        Value::I16(n) => Owned::Scalar(t, n as u64),
        Value::I32(n) => Owned::Scalar(t, n as u64),
        Value::I64(n) => Owned::Scalar(t, n as u64),
        Value::Double(d) => Owned::Scalar(t, d.to_bits()),
        Value::Binary(b) | Value::Uuid(b) => Owned::Bytes(b.to_vec()),
        Value::Struct(s) => Owned::Struct(s.fields().map(|f| (f.id, owned(&f.value))).collect()),
        Value::List(l) | Value::Set(l) => Owned::List(t, l.iter().map(|e| owned(&e)).collect()),
        Value::Map(m) => Owned::Map(
            m.key_type() as u8,
            m.value_type() as u8,
            m.iter().map(|(k, v)| (owned(&k), owned(&v))).collect(),
        ),
    }
}

fn summary(m: &Message<'_>) -> (Vec<u8>, u8, i32, bool, Owned) {
    (
        m.name().to_vec(),
        m.message_type() as u8,
        m.seq_id(),
        m.is_strict(),
        owned(&Value::Struct(m.args())),
    )
}

/// Decodes `data` with both transports and two sets of limits, and checks:
/// a whole message re-encodes to one that decodes the same; every prefix of
/// it is "need more" by no more than is really missing; a prefix of bad
/// input is "need more" or the same error.
pub fn message(data: &[u8]) {
    let small = Limits {
        max_message_bytes: 512,
        max_string_bytes: 64,
        max_container_elements: 16,
        max_depth: 4,
    };
    for transport in [Transport::Framed, Transport::Unframed] {
        for limits in [Limits::default(), small] {
            check(Decoder::new(transport, limits), data);
        }
    }
}

fn check(d: Decoder, data: &[u8]) {
    let full = d.decode(data);
    // The forwarder's fast path accepts nothing the decoder would not read the same way.
    if let Some((key, len)) = crate::ForwarderMsg::peek_canonical(data, d.transport(), d.limits()) {
        let Ok(Decoded::Message(m)) = &full else {
            panic!("peek_canonical took input the decoder refuses: {full:?}");
        };
        let args = crate::ForwarderMsg::from_message(m).expect("a msg call");
        assert_eq!((args.key, m.wire_len()), (key, len));
    }
    let cuts = [0, 1, 3, 4, 5, 8, 9, 12, 13, 17, 31];
    match full {
        Ok(Decoded::Message(m)) => {
            let len = m.wire_len();
            assert!(len <= data.len());
            assert_eq!(m.wire_bytes(), &data[..len]);
            let mut cut: Vec<usize> = cuts.iter().copied().filter(|&c| c < len).collect();
            cut.extend([len - 1, len / 2]);
            for c in cut {
                match d.decode(&data[..c]) {
                    Ok(Decoded::NeedMore(n)) => assert!(n >= 1 && c + n <= len, "cut {c}: {n}"),
                    other => panic!("prefix of {c} of a {len}-byte message: {other:?}"),
                }
            }
            // Re-encode from the views and decode again.
            let mut out = Vec::new();
            let mut e = Encoder::new(
                &mut out,
                d.transport(),
                Header {
                    name: m.name(),
                    message_type: m.message_type(),
                    seq_id: m.seq_id(),
                    strict: m.is_strict(),
                },
            );
            for f in m.fields() {
                e.field(f.id, f.value.ttype()).value(&f.value);
            }
            let n = e.finish();
            assert_eq!(n, out.len());
            match d.decode(&out) {
                Ok(Decoded::Message(again)) => {
                    assert_eq!(again.wire_len(), out.len());
                    assert_eq!(summary(&again), summary(&m));
                }
                other => panic!("re-encoded message: {other:?}"),
            }
        }
        Ok(Decoded::NeedMore(n)) => {
            assert!(n >= 1);
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            for c in cuts.iter().copied().filter(|&c| c < data.len()) {
                match d.decode(&data[..c]) {
                    Ok(Decoded::NeedMore(_)) => {}
                    Err(e2) => assert_eq!(e2, e, "prefix of {c}"),
                    other => panic!("prefix of {c} of bad input: {other:?}"),
                }
            }
        }
    }
}
