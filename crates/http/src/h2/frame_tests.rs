use super::*;

/// A frame's bytes, built by hand so that tests can send what the writers
/// never would.
fn raw(frame_type: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    out.push(frame_type);
    out.push(flags);
    out.extend_from_slice(&stream_id.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

fn read(bytes: &[u8]) -> Frame<'_> {
    let (frame, used) = FrameReader::default()
        .parse(bytes)
        .unwrap_or_else(|e| panic!("{e} in {bytes:02x?}"))
        .expect("a whole frame");
    assert_eq!(used, bytes.len(), "{frame:?} left bytes");
    frame
}

fn refuse(bytes: &[u8]) -> FrameError {
    FrameReader::default()
        .parse(bytes)
        .expect_err("frame accepted")
}

fn conn(reason: Reason) -> FrameError {
    FrameError::connection(reason)
}

const DATA: u8 = FrameType::Data as u8;
const HEADERS: u8 = FrameType::Headers as u8;
const PRIORITY: u8 = FrameType::Priority as u8;
const RST_STREAM: u8 = FrameType::RstStream as u8;
const SETTINGS: u8 = FrameType::Settings as u8;
const PUSH_PROMISE: u8 = FrameType::PushPromise as u8;
const PING: u8 = FrameType::Ping as u8;
const GOAWAY: u8 = FrameType::GoAway as u8;
const WINDOW_UPDATE: u8 = FrameType::WindowUpdate as u8;
const CONTINUATION: u8 = FrameType::Continuation as u8;
const PRIORITY_UPDATE: u8 = FrameType::PriorityUpdate as u8;

#[test]
fn preface_detection() {
    assert_eq!(PREFACE.len(), 24);
    assert_eq!(detect_preface(PREFACE), PrefaceMatch::Http2);
    let mut more = PREFACE.to_vec();
    more.extend_from_slice(&raw(SETTINGS, 0, 0, &[]));
    assert_eq!(detect_preface(&more), PrefaceMatch::Http2);
    for n in 0..PREFACE.len() {
        assert_eq!(detect_preface(&PREFACE[..n]), PrefaceMatch::NeedMore, "{n}");
    }
    for http1 in [
        &b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..],
        b"G",
        b"PRI / HTTP/1.1\r\n",
        b"PRI * HTTP/1.1\r\n",
        b"PRI * HTTP/2.0\r\n\r\nXX",
        b"\x16\x03\x01", // a TLS ClientHello on the plaintext port
    ] {
        assert_eq!(detect_preface(http1), PrefaceMatch::NotHttp2, "{http1:?}");
    }
}

#[test]
fn frame_header_round_trip_ignores_reserved_bit() {
    let header = FrameHeader {
        length: 0x00ab_cdef,
        frame_type: 0xfe,
        flags: 0x5a,
        stream_id: MAX_WINDOW_SIZE,
    };
    let mut out = Vec::new();
    header.write(&mut out);
    assert_eq!(out, [0xab, 0xcd, 0xef, 0xfe, 0x5a, 0x7f, 0xff, 0xff, 0xff]);
    assert_eq!(FrameHeader::parse(out[..].try_into().unwrap()), header);
    assert_eq!(header.frame_len(), 9 + 0x00ab_cdef);

    out[5] |= 0x80;
    let read = FrameHeader::parse(out[..].try_into().unwrap());
    assert_eq!(read.stream_id, MAX_WINDOW_SIZE);
}

#[test]
#[should_panic(expected = "stream id")]
fn frame_header_refuses_to_write_a_32_bit_stream_id() {
    FrameHeader {
        length: 0,
        frame_type: 0,
        flags: 0,
        stream_id: 1 << 31,
    }
    .write(&mut Vec::new());
}

#[test]
fn need_more_until_the_frame_is_whole() {
    let bytes = raw(DATA, flags::END_STREAM, 1, b"hello");
    let reader = FrameReader::default();
    for n in 0..bytes.len() {
        assert_eq!(reader.parse(&bytes[..n]), Ok(None), "{n} bytes");
    }
    let mut two = bytes.clone();
    two.extend_from_slice(&bytes);
    let (_, used) = reader.parse(&two).unwrap().unwrap();
    assert_eq!(used, bytes.len());
}

#[test]
fn oversized_frame_refused_from_its_header() {
    let reader = FrameReader::new(DEFAULT_MAX_FRAME_SIZE);
    let mut header = Vec::new();
    FrameHeader {
        length: DEFAULT_MAX_FRAME_SIZE + 1,
        frame_type: DATA,
        flags: 0,
        stream_id: 1,
    }
    .write(&mut header);
    assert_eq!(
        reader.parse(&header),
        Err(conn(Reason::FrameTooLarge {
            frame_type: DATA,
            len: DEFAULT_MAX_FRAME_SIZE + 1,
            max: DEFAULT_MAX_FRAME_SIZE,
        }))
    );
    assert_eq!(reader.parse(&header[..8]), Ok(None));

    // At the limit it is waited for, and read.
    let full = raw(DATA, 0, 1, &vec![7; DEFAULT_MAX_FRAME_SIZE as usize]);
    assert_eq!(reader.parse(&full[..100]), Ok(None));
    assert!(reader.parse(&full).unwrap().is_some());

    // Any type, known or not, on any stream.
    let unknown = raw(0xee, 0, 0, &[0; 20]);
    let e = FrameReader::new(16).parse(&unknown).unwrap_err();
    assert!(e.is_connection_error());
    assert_eq!(e.code(), ErrorCode::FrameSizeError);

    let mut reader = FrameReader::new(u32::MAX);
    assert_eq!(reader.max_frame_size(), MAX_FRAME_SIZE_LIMIT);
    reader.set_max_frame_size(20_000);
    assert_eq!(reader.max_frame_size(), 20_000);
}

#[test]
fn data_frames() {
    assert_eq!(
        read(&raw(DATA, 0, 3, b"abc")),
        Frame::Data {
            stream_id: 3,
            data: b"abc",
            end_stream: false,
            flow_controlled_len: 3
        }
    );
    assert_eq!(
        read(&raw(DATA, flags::END_STREAM, 3, b"")),
        Frame::Data {
            stream_id: 3,
            data: b"",
            end_stream: true,
            flow_controlled_len: 0
        }
    );
    // Padding is removed, and still counted by flow control.
    assert_eq!(
        read(&raw(
            DATA,
            flags::PADDED | flags::END_STREAM,
            5,
            b"\x02abc\0\0"
        )),
        Frame::Data {
            stream_id: 5,
            data: b"abc",
            end_stream: true,
            flow_controlled_len: 6
        }
    );
    // All padding, the pad length one less than the payload: allowed.
    assert_eq!(
        read(&raw(DATA, flags::PADDED, 5, b"\x02\0\0")),
        Frame::Data {
            stream_id: 5,
            data: b"",
            end_stream: false,
            flow_controlled_len: 3
        }
    );
    // Unknown flags are ignored.
    assert!(matches!(
        read(&raw(DATA, 0xf6, 1, b"x")),
        Frame::Data {
            end_stream: false,
            ..
        }
    ));
}

#[test]
fn data_frame_errors() {
    assert_eq!(
        refuse(&raw(DATA, 0, 0, b"abc")),
        conn(Reason::StreamIdZero {
            frame_type: FrameType::Data
        })
    );
    // A pad length equal to the payload's length is PROTOCOL_ERROR.
    let e = refuse(&raw(DATA, flags::PADDED, 1, b"\x03\0\0"));
    assert_eq!(
        e,
        conn(Reason::PaddingTooLong {
            frame_type: FrameType::Data,
            pad_len: 3,
            room: 2
        })
    );
    assert_eq!(e.code(), ErrorCode::ProtocolError);
    assert_eq!(
        refuse(&raw(DATA, flags::PADDED, 1, b"\xff")).code(),
        ErrorCode::ProtocolError
    );
    // PADDED with no room for the pad length.
    let e = refuse(&raw(DATA, flags::PADDED, 1, b""));
    assert_eq!(
        e,
        conn(Reason::TooShort {
            frame_type: FrameType::Data,
            len: 0,
            min: 1
        })
    );
    assert_eq!(e.code(), ErrorCode::FrameSizeError);
}

#[test]
fn headers_frames() {
    assert_eq!(
        read(&raw(HEADERS, flags::END_HEADERS, 1, b"\x82\x84")),
        Frame::Headers {
            stream_id: 1,
            fragment: b"\x82\x84",
            end_stream: false,
            end_headers: true
        }
    );
    assert_eq!(
        read(&raw(HEADERS, flags::END_STREAM, 1, b"\x82")),
        Frame::Headers {
            stream_id: 1,
            fragment: b"\x82",
            end_stream: true,
            end_headers: false
        }
    );
    // PADDED and PRIORITY: pad length, 5 bytes of priority, fragment, padding.
    let payload = b"\x01\x80\0\0\x03\x10\x82\x84\0";
    assert_eq!(
        read(&raw(
            HEADERS,
            flags::PADDED | flags::PRIORITY | flags::END_HEADERS,
            7,
            payload
        )),
        Frame::Headers {
            stream_id: 7,
            fragment: b"\x82\x84",
            end_stream: false,
            end_headers: true
        }
    );
    // Priority alone, with an empty fragment.
    assert_eq!(
        read(&raw(HEADERS, flags::PRIORITY, 7, b"\0\0\0\x05\xff")),
        Frame::Headers {
            stream_id: 7,
            fragment: b"",
            end_stream: false,
            end_headers: false
        }
    );
}

#[test]
fn headers_frame_errors() {
    assert_eq!(
        refuse(&raw(HEADERS, flags::END_HEADERS, 0, b"\x82")),
        conn(Reason::StreamIdZero {
            frame_type: FrameType::Headers
        })
    );
    // The padding may fill what the priority fields leave, no more.
    assert!(matches!(
        read(&raw(
            HEADERS,
            flags::PADDED | flags::PRIORITY,
            1,
            b"\x02\0\0\0\0\0\0\0"
        )),
        Frame::Headers { fragment: b"", .. }
    ));
    assert_eq!(
        refuse(&raw(
            HEADERS,
            flags::PADDED | flags::PRIORITY,
            1,
            b"\x03\0\0\0\0\0\0\0"
        )),
        conn(Reason::PaddingTooLong {
            frame_type: FrameType::Headers,
            pad_len: 3,
            room: 2
        })
    );
    assert_eq!(
        refuse(&raw(HEADERS, flags::PRIORITY, 1, b"\0\0\0\0")),
        conn(Reason::TooShort {
            frame_type: FrameType::Headers,
            len: 4,
            min: 5
        })
    );
    assert_eq!(
        refuse(&raw(
            HEADERS,
            flags::PADDED | flags::PRIORITY,
            1,
            b"\0\0\0\0\0"
        )),
        conn(Reason::TooShort {
            frame_type: FrameType::Headers,
            len: 5,
            min: 6
        })
    );
    // Depending on itself, exclusive bit or not.
    for dependency in [b"\0\0\0\x03", b"\x80\0\0\x03"] {
        let mut payload = dependency.to_vec();
        payload.push(16);
        assert_eq!(
            refuse(&raw(
                HEADERS,
                flags::PRIORITY | flags::END_HEADERS,
                3,
                &payload
            )),
            conn(Reason::SelfDependency {
                frame_type: FrameType::Headers,
                stream_id: 3
            })
        );
    }
}

#[test]
fn priority_frames() {
    assert_eq!(
        read(&raw(PRIORITY, 0, 3, b"\x80\0\0\x01\x10")),
        Frame::Priority { stream_id: 3 }
    );
    assert_eq!(
        refuse(&raw(PRIORITY, 0, 0, b"\0\0\0\x01\x10")),
        conn(Reason::StreamIdZero {
            frame_type: FrameType::Priority
        })
    );
    // A wrong length ends only the stream.
    for payload in [&b"\0\0\0\x01"[..], b"\0\0\0\x01\x10\0", b""] {
        let e = refuse(&raw(PRIORITY, 0, 3, payload));
        assert_eq!(
            e,
            FrameError::stream(
                3,
                Reason::WrongLength {
                    frame_type: FrameType::Priority,
                    len: payload.len() as u32,
                    expected: 5
                }
            )
        );
        assert_eq!(e.code(), ErrorCode::FrameSizeError);
        assert!(!e.is_connection_error());
    }
    assert_eq!(
        refuse(&raw(PRIORITY, 0, 3, b"\0\0\0\x03\x10")),
        FrameError::stream(
            3,
            Reason::SelfDependency {
                frame_type: FrameType::Priority,
                stream_id: 3
            }
        )
    );
}

#[test]
fn rst_stream_frames() {
    assert_eq!(
        read(&raw(RST_STREAM, 0, 5, b"\0\0\0\x08")),
        Frame::RstStream {
            stream_id: 5,
            error_code: ErrorCode::Cancel.code()
        }
    );
    // An unknown code is carried as it is.
    assert_eq!(
        read(&raw(RST_STREAM, 0, 5, b"\xde\xad\xbe\xef")),
        Frame::RstStream {
            stream_id: 5,
            error_code: 0xdead_beef
        }
    );
    assert_eq!(
        refuse(&raw(RST_STREAM, 0, 0, b"\0\0\0\x08")),
        conn(Reason::StreamIdZero {
            frame_type: FrameType::RstStream
        })
    );
    for payload in [&b"\0\0\0"[..], b"\0\0\0\0\0"] {
        assert_eq!(
            refuse(&raw(RST_STREAM, 0, 5, payload)),
            conn(Reason::WrongLength {
                frame_type: FrameType::RstStream,
                len: payload.len() as u32,
                expected: 4
            })
        );
    }
}

fn setting(id: u16, value: u32) -> Vec<u8> {
    let mut out = id.to_be_bytes().to_vec();
    out.extend_from_slice(&value.to_be_bytes());
    out
}

#[test]
fn settings_frames() {
    let mut payload = Vec::new();
    for (id, value) in [
        (1, 0),
        (2, 0),
        (3, 100),
        (4, MAX_WINDOW_SIZE),
        (5, MAX_FRAME_SIZE_LIMIT),
        (6, 8192),
        (0x99, 12345), // unknown: ignored
        (8, 1),
        (9, 1),
        (5, 16_384),
    ] {
        payload.extend_from_slice(&setting(id, value));
    }
    let bytes = raw(SETTINGS, 0, 0, &payload);
    let Frame::Settings { ack, settings } = read(&bytes) else {
        panic!("not SETTINGS");
    };
    assert!(!ack);
    assert_eq!(
        settings.iter().collect::<Vec<_>>(),
        [
            Setting::HeaderTableSize(0),
            Setting::EnablePush(false),
            Setting::MaxConcurrentStreams(100),
            Setting::InitialWindowSize(MAX_WINDOW_SIZE),
            Setting::MaxFrameSize(MAX_FRAME_SIZE_LIMIT),
            Setting::MaxHeaderListSize(8192),
            Setting::EnableConnectProtocol(true),
            Setting::NoRfc7540Priorities(true),
            Setting::MaxFrameSize(16_384),
        ]
    );

    let bytes = raw(SETTINGS, flags::ACK, 0, b"");
    let Frame::Settings { ack, settings } = read(&bytes) else {
        panic!("not SETTINGS");
    };
    assert!(ack && settings.is_empty());
    let bytes = raw(SETTINGS, 0, 0, &setting(0x99, 1));
    let Frame::Settings { settings, .. } = read(&bytes) else {
        panic!("not SETTINGS");
    };
    assert!(!settings.is_empty());
    assert_eq!(settings.iter().count(), 0);
}

#[test]
fn settings_frame_errors() {
    assert_eq!(
        refuse(&raw(SETTINGS, 0, 1, b"")),
        conn(Reason::StreamIdNotZero {
            frame_type: FrameType::Settings,
            stream_id: 1
        })
    );
    let e = refuse(&raw(SETTINGS, flags::ACK, 0, &setting(3, 1)));
    assert_eq!(e, conn(Reason::SettingsAckWithPayload { len: 6 }));
    assert_eq!(e.code(), ErrorCode::FrameSizeError);
    for len in [1, 5, 7, 13] {
        let e = refuse(&raw(SETTINGS, 0, 0, &vec![0; len]));
        assert_eq!(e, conn(Reason::SettingsLength { len: len as u32 }));
        assert_eq!(e.code(), ErrorCode::FrameSizeError);
    }
    for (id, value) in [
        (2, 2),
        (5, 16_383),
        (5, 0),
        (5, MAX_FRAME_SIZE_LIMIT + 1),
        (8, 2),
        (9, u32::MAX),
    ] {
        // A bad value after a good setting still refuses the frame.
        let mut payload = setting(3, 10);
        payload.extend_from_slice(&setting(id, value));
        let e = refuse(&raw(SETTINGS, 0, 0, &payload));
        assert_eq!(
            e,
            conn(Reason::InvalidSetting { id, value }),
            "{id} {value}"
        );
        assert_eq!(e.code(), ErrorCode::ProtocolError);
    }
    let e = refuse(&raw(SETTINGS, 0, 0, &setting(4, 1 << 31)));
    assert_eq!(
        e,
        conn(Reason::InitialWindowSizeTooLarge { value: 1 << 31 })
    );
    assert_eq!(e.code(), ErrorCode::FlowControlError);
}

#[test]
fn push_promise_refused() {
    let e = refuse(&raw(PUSH_PROMISE, flags::END_HEADERS, 1, b"\0\0\0\x02\x82"));
    assert_eq!(e, conn(Reason::PushPromise));
    assert_eq!(e.code(), ErrorCode::ProtocolError);
}

#[test]
fn ping_frames() {
    assert_eq!(
        read(&raw(PING, 0, 0, b"12345678")),
        Frame::Ping {
            ack: false,
            data: *b"12345678"
        }
    );
    assert_eq!(
        read(&raw(PING, flags::ACK, 0, b"abcdefgh")),
        Frame::Ping {
            ack: true,
            data: *b"abcdefgh"
        }
    );
    assert_eq!(
        refuse(&raw(PING, 0, 1, b"12345678")),
        conn(Reason::StreamIdNotZero {
            frame_type: FrameType::Ping,
            stream_id: 1
        })
    );
    for payload in [&b"1234567"[..], b"123456789", b""] {
        let e = refuse(&raw(PING, 0, 0, payload));
        assert_eq!(
            e,
            conn(Reason::WrongLength {
                frame_type: FrameType::Ping,
                len: payload.len() as u32,
                expected: 8
            })
        );
        assert_eq!(e.code(), ErrorCode::FrameSizeError);
    }
}

#[test]
fn goaway_frames() {
    assert_eq!(
        read(&raw(GOAWAY, 0, 0, b"\x80\0\0\x07\0\0\0\x0bcalm down")),
        Frame::GoAway {
            last_stream_id: 7,
            error_code: ErrorCode::EnhanceYourCalm.code(),
            debug_data: b"calm down"
        }
    );
    assert_eq!(
        read(&raw(GOAWAY, 0, 0, &[0; 8])),
        Frame::GoAway {
            last_stream_id: 0,
            error_code: 0,
            debug_data: b""
        }
    );
    assert_eq!(
        refuse(&raw(GOAWAY, 0, 3, &[0; 8])),
        conn(Reason::StreamIdNotZero {
            frame_type: FrameType::GoAway,
            stream_id: 3
        })
    );
    assert_eq!(
        refuse(&raw(GOAWAY, 0, 0, &[0; 7])),
        conn(Reason::TooShort {
            frame_type: FrameType::GoAway,
            len: 7,
            min: 8
        })
    );
}

#[test]
fn window_update_frames() {
    assert_eq!(
        read(&raw(WINDOW_UPDATE, 0, 0, b"\0\x01\0\0")),
        Frame::WindowUpdate {
            stream_id: 0,
            increment: 65536
        }
    );
    // The reserved bit is ignored.
    assert_eq!(
        read(&raw(WINDOW_UPDATE, 0, 9, b"\xff\xff\xff\xff")),
        Frame::WindowUpdate {
            stream_id: 9,
            increment: MAX_WINDOW_SIZE
        }
    );
    // An increment of 0 ends the stream on a stream, the connection on 0;
    // the reserved bit does not make it non-zero.
    let e = refuse(&raw(WINDOW_UPDATE, 0, 9, b"\x80\0\0\0"));
    assert_eq!(e, FrameError::stream(9, Reason::ZeroWindowIncrement));
    assert_eq!(e.code(), ErrorCode::ProtocolError);
    assert_eq!(
        refuse(&raw(WINDOW_UPDATE, 0, 0, b"\0\0\0\0")),
        conn(Reason::ZeroWindowIncrement)
    );
    // A wrong length ends the connection, even on a stream.
    for stream_id in [0, 9] {
        assert_eq!(
            refuse(&raw(WINDOW_UPDATE, 0, stream_id, b"\0\0\x01")),
            conn(Reason::WrongLength {
                frame_type: FrameType::WindowUpdate,
                len: 3,
                expected: 4
            })
        );
    }
}

#[test]
fn continuation_frames() {
    assert_eq!(
        read(&raw(
            CONTINUATION,
            flags::END_HEADERS | flags::PADDED,
            1,
            b"\x84"
        )),
        Frame::Continuation {
            stream_id: 1,
            fragment: b"\x84",
            end_headers: true
        }
    );
    assert_eq!(
        read(&raw(CONTINUATION, 0, 1, b"")),
        Frame::Continuation {
            stream_id: 1,
            fragment: b"",
            end_headers: false
        }
    );
    assert_eq!(
        refuse(&raw(CONTINUATION, flags::END_HEADERS, 0, b"\x84")),
        conn(Reason::StreamIdZero {
            frame_type: FrameType::Continuation
        })
    );
}

#[test]
fn priority_update_frames() {
    assert_eq!(
        read(&raw(PRIORITY_UPDATE, 0, 0, b"\0\0\0\x05u=1, i")),
        Frame::PriorityUpdate {
            prioritized_stream_id: 5,
            field_value: b"u=1, i"
        }
    );
    assert_eq!(
        read(&raw(PRIORITY_UPDATE, 0, 0, b"\x80\0\0\x05")),
        Frame::PriorityUpdate {
            prioritized_stream_id: 5,
            field_value: b""
        }
    );
    assert_eq!(
        refuse(&raw(PRIORITY_UPDATE, 0, 5, b"\0\0\0\x05u=1")),
        conn(Reason::StreamIdNotZero {
            frame_type: FrameType::PriorityUpdate,
            stream_id: 5
        })
    );
    assert_eq!(
        refuse(&raw(PRIORITY_UPDATE, 0, 0, b"\0\0\0")),
        conn(Reason::TooShort {
            frame_type: FrameType::PriorityUpdate,
            len: 3,
            min: 4
        })
    );
    assert_eq!(
        refuse(&raw(PRIORITY_UPDATE, 0, 0, b"\0\0\0\0u=1")),
        conn(Reason::PriorityUpdateForStreamZero)
    );
}

#[test]
fn unknown_frames_pass_through() {
    for (frame_type, stream_id) in [(0x0a, 0), (0x0f, 3), (0xff, 0)] {
        let bytes = raw(frame_type, 0xaa, stream_id, b"anything");
        let frame = read(&bytes);
        assert_eq!(
            frame,
            Frame::Unknown {
                frame_type,
                flags: 0xaa,
                stream_id,
                payload: b"anything"
            }
        );
        assert_eq!(frame.frame_type(), frame_type);
        assert_eq!(frame.stream_id(), stream_id);
    }
}

/// One of each frame type (and a few shapes), as a client would send them.
fn stream_of_frames() -> Vec<u8> {
    let mut wire = Vec::new();
    for bytes in [
        raw(
            SETTINGS,
            0,
            0,
            &[setting(3, 100), setting(4, 1 << 20)].concat(),
        ),
        raw(WINDOW_UPDATE, 0, 0, b"\0\x0f\0\x01"),
        raw(SETTINGS, flags::ACK, 0, b""),
        raw(HEADERS, flags::PRIORITY, 1, b"\0\0\0\0\x0f\x82\x86"),
        raw(CONTINUATION, 0, 1, b""),
        raw(CONTINUATION, flags::END_HEADERS, 1, b"\x84"),
        raw(DATA, flags::PADDED, 1, b"\x03body\0\0\0"),
        raw(DATA, flags::END_STREAM, 1, b""),
        raw(PRIORITY, 0, 3, b"\0\0\0\x01\x20"),
        raw(PRIORITY_UPDATE, 0, 0, b"\0\0\0\x03u=0"),
        raw(
            HEADERS,
            flags::END_HEADERS | flags::END_STREAM | flags::PADDED,
            3,
            b"\x01\x82\0",
        ),
        raw(RST_STREAM, 0, 3, b"\0\0\0\x08"),
        raw(PING, 0, 0, b"\0\x01\x02\x03\x04\x05\x06\x07"),
        raw(0x42, 0x01, 0, b"extension"),
        raw(GOAWAY, 0, 0, b"\0\0\0\x03\0\0\0\0bye"),
    ] {
        wire.extend_from_slice(&bytes);
    }
    wire
}

fn read_all<'a>(reader: &FrameReader, mut input: &'a [u8]) -> Vec<Frame<'a>> {
    let mut frames = Vec::new();
    while let Some((frame, used)) = reader.parse(input).unwrap() {
        frames.push(frame);
        input = &input[used..];
    }
    assert!(input.is_empty(), "{} bytes left", input.len());
    frames
}

#[test]
fn stream_cut_at_every_byte_reads_the_same_frames() {
    let wire = stream_of_frames();
    let reader = FrameReader::default();
    let whole = read_all(&reader, &wire);
    assert_eq!(whole.len(), 15);
    let types: Vec<u8> = whole.iter().map(Frame::frame_type).collect();
    assert_eq!(
        types,
        [4, 8, 4, 1, 9, 9, 0, 0, 2, 0x10, 1, 3, 6, 0x42, 7],
        "{whole:#?}"
    );

    // As a connection reads: what has come so far, frames taken off the
    // front as they complete.
    for cut in 0..=wire.len() {
        let mut frames = Vec::new();
        let mut pos = 0;
        for available in [cut, wire.len()] {
            while let Some((frame, used)) = reader.parse(&wire[pos..available]).unwrap() {
                frames.push(frame);
                pos += used;
            }
        }
        assert_eq!(frames, whole, "cut at {cut}");
    }
    // And one byte at a time.
    let mut frames = Vec::new();
    let mut pos = 0;
    for available in 0..=wire.len() {
        if let Some((frame, used)) = reader.parse(&wire[pos..available]).unwrap() {
            frames.push(frame);
            pos += used;
        }
    }
    assert_eq!(frames, whole);
}

#[test]
fn writers_round_trip() {
    let reader = FrameReader::default();
    let mut out = Vec::new();
    let settings = [
        Setting::HeaderTableSize(4096),
        Setting::EnablePush(false),
        Setting::MaxConcurrentStreams(128),
        Setting::InitialWindowSize(1 << 20),
        Setting::MaxFrameSize(1 << 16),
        Setting::MaxHeaderListSize(16_384),
        Setting::EnableConnectProtocol(true),
        Setting::NoRfc7540Priorities(true),
    ];
    write_settings(&settings, &mut out);
    let Frame::Settings {
        ack: false,
        settings: got,
    } = read(&out)
    else {
        panic!("not SETTINGS");
    };
    assert_eq!(got.iter().collect::<Vec<_>>(), settings);

    out.clear();
    write_settings_ack(&mut out);
    assert_eq!(out, raw(SETTINGS, flags::ACK, 0, b""));

    out.clear();
    write_ping(*b"pingpong", &mut out);
    assert_eq!(
        read(&out),
        Frame::Ping {
            ack: false,
            data: *b"pingpong"
        }
    );
    out.clear();
    write_ping_ack(*b"pingpong", &mut out);
    assert_eq!(
        read(&out),
        Frame::Ping {
            ack: true,
            data: *b"pingpong"
        }
    );

    out.clear();
    write_goaway(MAX_WINDOW_SIZE, ErrorCode::ProtocolError, b"why", &mut out);
    assert_eq!(
        read(&out),
        Frame::GoAway {
            last_stream_id: MAX_WINDOW_SIZE,
            error_code: 1,
            debug_data: b"why"
        }
    );
    // Debug data is cut to fit the smallest frame size a peer may have.
    out.clear();
    write_goaway(1, ErrorCode::NoError, &[b'x'; 20_000], &mut out);
    let Frame::GoAway { debug_data, .. } = read(&out) else {
        panic!("not GOAWAY");
    };
    assert_eq!(debug_data.len(), DEFAULT_MAX_FRAME_SIZE as usize - 8);

    out.clear();
    write_rst_stream(3, ErrorCode::RefusedStream, &mut out);
    assert_eq!(
        read(&out),
        Frame::RstStream {
            stream_id: 3,
            error_code: 7
        }
    );

    for (stream_id, increment) in [(0, 1), (5, MAX_WINDOW_SIZE)] {
        out.clear();
        write_window_update(stream_id, increment, &mut out);
        assert_eq!(
            read(&out),
            Frame::WindowUpdate {
                stream_id,
                increment
            }
        );
    }

    for end_stream in [false, true] {
        out.clear();
        write_data_header(9, 4, end_stream, &mut out);
        assert_eq!(out.len(), FRAME_HEADER_LEN);
        assert_eq!(reader.parse(&out), Ok(None));
        out.extend_from_slice(b"body");
        assert_eq!(
            read(&out),
            Frame::Data {
                stream_id: 9,
                data: b"body",
                end_stream,
                flow_controlled_len: 4
            }
        );
    }
}

#[test]
fn headers_split_at_max_frame_size() {
    let block: Vec<u8> = (0..=255).collect();
    let reader = FrameReader::new(100);
    for (max, frames) in [(100, 3), (128, 2), (256, 1), (1000, 1), (1, 256)] {
        for end_stream in [false, true] {
            let mut out = Vec::new();
            write_headers(11, &block, end_stream, max, &mut out);
            let frames_read = read_all(&FrameReader::new(max as u32), &out);
            assert_eq!(frames_read.len(), frames, "max {max}");
            let mut joined = Vec::new();
            for (i, frame) in frames_read.iter().enumerate() {
                let last = i + 1 == frames;
                match *frame {
                    Frame::Headers {
                        stream_id: 11,
                        fragment,
                        end_stream: es,
                        end_headers,
                    } if i == 0 => {
                        assert_eq!(es, end_stream);
                        assert_eq!(end_headers, last);
                        joined.extend_from_slice(fragment);
                    }
                    Frame::Continuation {
                        stream_id: 11,
                        fragment,
                        end_headers,
                    } if i > 0 => {
                        assert_eq!(end_headers, last);
                        joined.extend_from_slice(fragment);
                    }
                    other => panic!("frame {i}: {other:?}"),
                }
                assert!(!frame_is_empty(frame) || block.is_empty());
            }
            assert_eq!(joined, block);
        }
    }
    // An empty block is one HEADERS frame that ends it.
    let mut out = Vec::new();
    write_headers(1, b"", true, 16_384, &mut out);
    assert_eq!(
        read_all(&reader, &out),
        [Frame::Headers {
            stream_id: 1,
            fragment: b"",
            end_stream: true,
            end_headers: true
        }]
    );
}

fn frame_is_empty(frame: &Frame<'_>) -> bool {
    matches!(
        frame,
        Frame::Headers { fragment: b"", .. } | Frame::Continuation { fragment: b"", .. }
    )
}

#[test]
fn error_codes_and_messages() {
    for code in 0..=0xd {
        let e = ErrorCode::from_u32(code).unwrap();
        assert_eq!(e.code(), code);
    }
    assert_eq!(ErrorCode::from_u32(0xe), None);
    assert_eq!(ErrorCode::Http11Required.to_string(), "HTTP_1_1_REQUIRED");
    for t in 0..=0xff {
        if let Some(frame_type) = FrameType::from_u8(t) {
            assert_eq!(frame_type as u8, t);
        }
    }
    assert_eq!(FrameType::from_u8(0xa), None);

    assert_eq!(
        refuse(&raw(DATA, 0, 0, b"")).to_string(),
        "connection error PROTOCOL_ERROR: DATA frame on stream 0"
    );
    assert_eq!(
        refuse(&raw(PRIORITY, 0, 5, b"")).to_string(),
        "stream error FRAME_SIZE_ERROR on stream 5: PRIORITY frame with 0 bytes of payload, not 5"
    );
    assert_eq!(
        FrameReader::new(16_384)
            .parse(&raw(0xbb, 0, 1, &[0; 16_385]))
            .unwrap_err()
            .to_string(),
        "connection error FRAME_SIZE_ERROR: frame of type 0xbb with 16385 bytes of payload, past SETTINGS_MAX_FRAME_SIZE 16384"
    );
    assert_eq!(
        refuse(&raw(SETTINGS, 0, 0, &setting(2, 7))).to_string(),
        "connection error PROTOCOL_ERROR: setting SETTINGS_ENABLE_PUSH with value 7 out of its range"
    );
}
