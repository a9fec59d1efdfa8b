use crate::*;

fn decoder(t: Transport) -> Decoder {
    Decoder::new(t, Limits::default())
}

fn whole(d: &Decoder, buf: &[u8]) -> usize {
    match d.decode(buf) {
        Ok(Decoded::Message(m)) => m.wire_len(),
        other => panic!("{other:?}"),
    }
}

fn err(d: &Decoder, buf: &[u8]) -> Error {
    match d.decode(buf) {
        Err(e) => e,
        other => panic!("{other:?}"),
    }
}

fn msg(t: Transport, strict: bool, key: i32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_forwarder_msg(&mut out, t, strict, 1, key, payload);
    out
}

/// An unframed strict call of method "m" whose argument struct is `body`
/// (without its final STOP).
fn call(body: &[u8]) -> Vec<u8> {
    let mut v = vec![0x80, 1, 0, 1, 0, 0, 0, 1, b'm', 0, 0, 0, 9];
    v.extend_from_slice(body);
    v.push(0);
    v
}

#[test]
fn forwarder_all_header_and_transport_combinations() {
    for t in [Transport::Framed, Transport::Unframed] {
        for strict in [true, false] {
            let wire = msg(t, strict, -5, b"payload");
            let d = decoder(t);
            let Ok(Decoded::Message(m)) = d.decode(&wire) else {
                panic!()
            };
            assert_eq!(m.wire_len(), wire.len());
            assert_eq!(m.is_strict(), strict);
            assert_eq!(m.message_type(), MessageType::Oneway);
            assert_eq!(m.name_str(), Some("msg"));
            let f = ForwarderMsg::from_message(&m).unwrap();
            assert_eq!(f.key, -5);
            assert_eq!(f.payload, b"payload");
            let framed = t == Transport::Framed;
            assert_eq!(m.message_bytes().len() + 4 * framed as usize, wire.len());
        }
    }
}

#[test]
fn known_bytes() {
    // msg(1: 7, 2: "ab"), strict, oneway, seq 3, as the Thrift libraries write it.
    let wire = [
        0x80, 1, 0, 4, 0, 0, 0, 3, b'm', b's', b'g', 0, 0, 0, 3, 8, 0, 1, 0, 0, 0, 7, 11, 0, 2, 0,
        0, 0, 2, b'a', b'b', 0,
    ];
    assert_eq!(msg(Transport::Unframed, true, 7, b"ab")[..8], wire[..8]);
    let mut out = Vec::new();
    encode_forwarder_msg(&mut out, Transport::Unframed, true, 3, 7, b"ab");
    assert_eq!(out, wire);
}

#[test]
fn split_at_every_offset_and_back_to_back() {
    for t in [Transport::Framed, Transport::Unframed] {
        let d = decoder(t);
        let mut wire = msg(t, true, 1, b"first");
        let first = wire.len();
        wire.extend(msg(t, false, 2, b"second message"));
        for cut in 0..first {
            match d.decode(&wire[..cut]) {
                Ok(Decoded::NeedMore(n)) => assert!(n >= 1 && cut + n <= first),
                other => panic!("{cut}: {other:?}"),
            }
        }
        assert_eq!(whole(&d, &wire), first);
        let rest = &wire[first..];
        let Ok(Decoded::Message(m)) = d.decode(rest) else {
            panic!()
        };
        assert_eq!(m.wire_len(), rest.len());
        assert_eq!(ForwarderMsg::from_message(&m).unwrap().key, 2);
    }
}

#[test]
fn framed_need_more_is_exact() {
    let d = decoder(Transport::Framed);
    let wire = msg(Transport::Framed, true, 1, &[b'x'; 100]);
    assert!(matches!(d.decode(&wire[..2]), Ok(Decoded::NeedMore(2))));
    assert!(matches!(d.decode(&wire[..10]), Ok(Decoded::NeedMore(n)) if n == wire.len() - 10));
}

#[test]
fn unframed_need_more_skips_a_long_string() {
    let d = decoder(Transport::Unframed);
    let wire = msg(Transport::Unframed, true, 1, &[b'x'; 1000]);
    // Once the string's length is in, the whole string is awaited at once
    // (all of it but the final STOP byte, which is not known to be next).
    let cut = wire.len() - 900;
    assert!(matches!(d.decode(&wire[..cut]), Ok(Decoded::NeedMore(899))));
}

#[test]
fn bad_headers() {
    let u = decoder(Transport::Unframed);
    assert_eq!(
        err(&u, &[0x80, 2, 0, 1, 0, 0, 0, 0]),
        Error::BadVersion(0x8002_0001)
    );
    assert_eq!(
        err(&u, &[0x80, 1, 0, 9, 0, 0, 0, 0]),
        Error::BadMessageType(9)
    );
    assert_eq!(
        err(&u, &[0x80, 1, 0, 1, 0xff, 0xff, 0xff, 0xfe]),
        Error::NegativeLength {
            of: LengthOf::Name,
            len: -2
        }
    );
    // Non-strict: the first word is the name length; HTTP is a huge one.
    assert_eq!(
        err(&u, b"GET / HTTP/1.1\r\n"),
        Error::OverLimit {
            of: LengthOf::Name,
            len: 0x4745_5420,
            limit: 16_384_000
        }
    );
    assert_eq!(
        err(&u, &[0, 0, 0, 1, b'm', 7, 0, 0, 0, 0]),
        Error::BadMessageType(7)
    );
    let f = decoder(Transport::Framed);
    assert_eq!(
        err(&f, &[0xff, 0xff, 0xff, 0xff]),
        Error::NegativeLength {
            of: LengthOf::Frame,
            len: -1
        }
    );
    // A bad version inside a frame is refused before the frame is complete.
    assert_eq!(
        err(&f, &[0, 0, 1, 0, 0x80, 3, 0, 1]),
        Error::BadVersion(0x8003_0001)
    );
    assert!(err(&f, &[0x7f, 0, 0, 0])
        .to_string()
        .contains("over the limit"));
}

#[test]
fn bad_fields() {
    let u = decoder(Transport::Unframed);
    assert_eq!(err(&u, &call(&[1, 0, 1])), Error::UnknownType(1));
    assert_eq!(err(&u, &call(&[17, 0, 1])), Error::UnknownType(17));
    assert_eq!(
        err(&u, &call(&[11, 0, 1, 0x80, 0, 0, 0])),
        Error::NegativeLength {
            of: LengthOf::String,
            len: i32::MIN
        }
    );
    assert_eq!(
        err(&u, &call(&[15, 0, 1, 8, 0xff, 0xff, 0xff, 0xff])),
        Error::NegativeLength {
            of: LengthOf::Container,
            len: -1
        }
    );
    assert_eq!(
        err(&u, &call(&[13, 0, 1, 8, 0, 0x7f, 0xff, 0xff, 0xff])),
        Error::UnknownType(0)
    );
    assert_eq!(
        err(&u, &call(&[15, 0, 1, 8, 0x7f, 0xff, 0xff, 0xff])),
        Error::OverLimit {
            of: LengthOf::Container,
            len: i32::MAX as u64,
            limit: 1 << 20
        }
    );
    // Fixed-size elements whose total passes the message limit are
    // refused at once, before they arrive.
    let small = Decoder::new(
        Transport::Unframed,
        Limits {
            max_message_bytes: 1000,
            ..Limits::default()
        },
    );
    assert_eq!(
        err(&small, &call(&[15, 0, 1, 10, 0, 0, 0, 200])),
        Error::OverLimit {
            of: LengthOf::Message,
            len: 21 + 8 * 200,
            limit: 1000
        }
    );
}

#[test]
fn truncated_and_padded_frames() {
    let f = decoder(Transport::Framed);
    let mut wire = msg(Transport::Framed, true, 1, b"abc");
    // Frame one byte short: the message runs past it.
    let len = (wire.len() - 4) as u32;
    let mut short = wire.clone();
    short[..4].copy_from_slice(&(len - 1).to_be_bytes());
    short.pop();
    assert_eq!(
        err(&f, &short),
        Error::FrameMismatch {
            frame: len as usize - 1,
            message: None
        }
    );
    // Frame one byte long: trailing bytes the message does not account for.
    wire[..4].copy_from_slice(&(len + 1).to_be_bytes());
    wire.push(0);
    assert_eq!(
        err(&f, &wire),
        Error::FrameMismatch {
            frame: len as usize + 1,
            message: Some(len as usize)
        }
    );
    assert_eq!(
        err(&f, &[0, 0, 0, 0]),
        Error::FrameMismatch {
            frame: 0,
            message: None
        }
    );
}

#[test]
fn depth_limit() {
    let u = decoder(Transport::Unframed);
    // Nested structs: field 1 of type struct, n times.
    let nested = |n: usize| {
        let mut body = Vec::new();
        for _ in 0..n {
            body.extend([12, 0, 1]);
        }
        body.extend(std::iter::repeat_n(0, n));
        call(&body)
    };
    // The argument struct is level 1: 63 more levels is the limit of 64.
    assert!(matches!(u.decode(&nested(63)), Ok(Decoded::Message(_))));
    assert_eq!(err(&u, &nested(64)), Error::DepthOverLimit { limit: 64 });
    // Lists of lists count too, and a huge configured depth is capped.
    let lists = |n: usize| {
        let mut body = vec![15, 0, 1];
        for _ in 0..n {
            body.extend([15, 0, 0, 0, 1]);
        }
        body.extend([8, 0, 0, 0, 0]);
        call(&body)
    };
    assert!(matches!(u.decode(&lists(62)), Ok(Decoded::Message(_))));
    assert_eq!(err(&u, &lists(63)), Error::DepthOverLimit { limit: 64 });
    let deep = Decoder::new(
        Transport::Unframed,
        Limits {
            max_depth: usize::MAX,
            ..Limits::default()
        },
    );
    assert_eq!(
        err(&deep, &nested(100_000)),
        Error::DepthOverLimit { limit: DEPTH_CAP }
    );
}

#[test]
fn string_limit_applies_to_names_and_values() {
    let d = Decoder::new(
        Transport::Unframed,
        Limits {
            max_string_bytes: 4,
            ..Limits::default()
        },
    );
    assert!(matches!(
        d.decode(&msg(Transport::Unframed, true, 1, b"four")),
        Ok(Decoded::Message(_))
    ));
    assert_eq!(
        err(&d, &msg(Transport::Unframed, true, 1, b"fives")),
        Error::OverLimit {
            of: LengthOf::String,
            len: 5,
            limit: 4
        }
    );
}

#[test]
fn unframed_message_limit() {
    let d = Decoder::new(
        Transport::Unframed,
        Limits {
            max_message_bytes: 64,
            ..Limits::default()
        },
    );
    assert!(matches!(
        d.decode(&msg(Transport::Unframed, true, 1, &[0; 30])),
        Ok(Decoded::Message(_))
    ));
    assert!(matches!(
        err(&d, &msg(Transport::Unframed, true, 1, &[0; 60])),
        Error::OverLimit {
            of: LengthOf::Message,
            limit: 64,
            ..
        }
    ));
}

#[test]
fn every_type_round_trips_through_the_views() {
    let mut out = Vec::new();
    let mut e = Encoder::new(
        &mut out,
        Transport::Framed,
        Header {
            name: b"echo",
            message_type: MessageType::Call,
            seq_id: -9,
            strict: false,
        },
    );
    e.field(1, TType::Bool).bool(true);
    e.field(2, TType::Byte).byte(-1);
    e.field(3, TType::I16).i16(-300);
    e.field(4, TType::I32).i32(70_000);
    e.field(5, TType::I64).i64(-1 << 40);
    e.field(6, TType::Double).double(2.5);
    e.field(7, TType::String).string("é");
    e.field(8, TType::Uuid).uuid([7; 16]);
    e.field(9, TType::List)
        .list(TType::String, 2)
        .string("a")
        .string("bc");
    e.field(10, TType::Set).set(TType::I16, 1).i16(4);
    e.field(11, TType::Map)
        .map(TType::I32, TType::Struct, 1)
        .i32(5);
    e.field(1, TType::I64).i64(6).stop();
    e.field(-3, TType::Struct)
        .field(2, TType::Bool)
        .bool(false)
        .stop();
    let len = e.finish();
    assert_eq!(len, out.len());
    let d = decoder(Transport::Framed);
    let Ok(Decoded::Message(m)) = d.decode(&out) else {
        panic!()
    };
    assert!(!m.is_strict());
    assert_eq!(m.seq_id(), -9);
    let f: Vec<Field<'_>> = m.fields().collect();
    assert_eq!(f.len(), 12);
    assert_eq!(f[0].value, Value::Bool(true));
    assert_eq!(f[1].value, Value::Byte(-1));
    assert_eq!(f[2].value, Value::I16(-300));
    assert_eq!(f[3].value.as_i32(), Some(70_000));
    assert_eq!(f[4].value.as_i64(), Some(-1 << 40));
    assert_eq!(f[5].value, Value::Double(2.5));
    assert_eq!(f[6].value.as_str(), Some("é"));
    assert_eq!(f[7].value, Value::Uuid(&[7; 16]));
    let Value::List(l) = f[8].value else { panic!() };
    assert_eq!(l.elem_type(), TType::String);
    let items: Vec<_> = l.iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(items, ["a", "bc"]);
    let Value::Set(s) = f[9].value else { panic!() };
    assert_eq!(s.iter().collect::<Vec<_>>(), [Value::I16(4)]);
    let Value::Map(mv) = f[10].value else {
        panic!()
    };
    let (k, v) = mv.iter().next().unwrap();
    assert_eq!(k, Value::I32(5));
    assert_eq!(v.as_struct().unwrap().field(1), Some(Value::I64(6)));
    assert_eq!(f[11].id, -3);
    assert_eq!(
        f[11].value.as_struct().unwrap().field(2),
        Some(Value::Bool(false))
    );
    assert_eq!(m.args().field(4), Some(Value::I32(70_000)));
    assert_eq!(m.args().field(99), None);
    crate::fuzzing::message(&out);
}

#[test]
fn forwarder_args_errors() {
    let d = decoder(Transport::Unframed);
    let mut out = Vec::new();
    let mut e = Encoder::new(
        &mut out,
        Transport::Unframed,
        Header {
            name: b"msg",
            message_type: MessageType::Oneway,
            seq_id: 0,
            strict: true,
        },
    );
    e.field(1, TType::I64).i64(1);
    e.finish();
    let Ok(Decoded::Message(m)) = d.decode(&out) else {
        panic!()
    };
    assert_eq!(
        ForwarderMsg::from_message(&m),
        Err(ArgsError::WrongType {
            id: 1,
            expected: TType::I32,
            found: TType::I64
        })
    );
    let mut out = Vec::new();
    let mut e = Encoder::new(
        &mut out,
        Transport::Unframed,
        Header {
            name: b"msg",
            message_type: MessageType::Call,
            seq_id: 0,
            strict: true,
        },
    );
    e.field(1, TType::I32).i32(1);
    e.field(3, TType::Bool).bool(true);
    e.finish();
    let Ok(Decoded::Message(m)) = d.decode(&out) else {
        panic!()
    };
    assert_eq!(ForwarderMsg::from_message(&m), Err(ArgsError::Missing(2)));
}

#[test]
fn random_bytes_never_panic() {
    // A small xorshift: deterministic, no dependency.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let valid = msg(Transport::Unframed, true, 3, b"hello world");
    for round in 0..3000 {
        let mut buf = if round % 2 == 0 {
            valid.clone()
        } else {
            vec![0; 40]
        };
        for _ in 0..(round % 7 + 1) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = (x as usize) % buf.len();
            buf[i] = (x >> 32) as u8;
        }
        crate::fuzzing::message(&buf);
    }
}

/// The forwarder's fast path never accepts what the full decoder would refuse or read
/// differently: for canonical messages, every prefix, and every one-byte change of them.
#[test]
fn peek_canonical_agrees_with_the_decoder() {
    let limits = Limits::default();
    for transport in [Transport::Framed, Transport::Unframed] {
        let decoder = Decoder::new(transport, limits);
        for (key, payload) in [
            (7, &b""[..]),
            (-3, b"hello"),
            (i32::MIN, &[0xffu8; 300][..]),
        ] {
            let mut wire = Vec::new();
            let len = encode_forwarder_msg(&mut wire, transport, true, 5, key, payload);
            assert_eq!(
                ForwarderMsg::peek_canonical(&wire, transport, &limits),
                Some((key, len))
            );
            for cut in 0..wire.len() {
                assert_eq!(
                    ForwarderMsg::peek_canonical(&wire[..cut], transport, &limits),
                    None
                );
            }
            for at in 0..wire.len() {
                for flip in [0x01u8, 0x80, 0xff] {
                    let mut bad = wire.clone();
                    bad[at] ^= flip;
                    if let Some((k, n)) = ForwarderMsg::peek_canonical(&bad, transport, &limits) {
                        let Ok(Decoded::Message(m)) = decoder.decode(&bad) else {
                            panic!("fast path took what the decoder refuses (byte {at})");
                        };
                        let args = ForwarderMsg::from_message(&m).expect("a msg call");
                        assert_eq!((args.key, m.wire_len()), (k, n), "byte {at}");
                    }
                }
            }
        }
    }
}
