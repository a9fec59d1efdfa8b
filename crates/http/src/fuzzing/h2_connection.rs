//! Checks for the server side of an HTTP/2 connection: any bytes (after
//! the preface, which is put in front unless the input starts like one)
//! are read by a [`Connection`] under small settings, whole, cut in two and
//! a byte at a time, with the same events and output each way; then read
//! again in small pieces by a connection whose glue answers every request,
//! consumes every body and resets or goes away now and then. Throughout:
//! no panic, never more consumed than given, nothing consumed once closed,
//! events that follow the stream states, no more body held than the
//! windows advertised, and output that a client reads as valid frames and
//! header blocks.

use std::collections::BTreeMap;

use super::hash;
use crate::h2::{
    Assembled, Connection, DecodeLimits, Decoder, ErrorCode, Event, Field, Frame, FrameReader,
    HeaderBlockAssembler, HeaderBlockLimits, Http1Head, Priority, RequestBody, ServerSettings,
    DEFAULT_INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE_LIMIT, PREFACE,
};

/// Small limits, so that inputs reach them: four streams at once, 1000-byte
/// stream windows, 512-byte header lists, sixteen requests, heads parsed for
/// an HTTP/1 parser of 256 bytes and 8 fields.
pub const H2_CONNECTION_SETTINGS: ServerSettings = ServerSettings {
    max_concurrent_streams: 4,
    initial_window_size: 1000,
    connection_window_size: DEFAULT_INITIAL_WINDOW_SIZE,
    max_frame_size: 16_384,
    header_limits: DecodeLimits {
        max_header_list_size: 512,
        max_fields: 16,
    },
    max_requests: 16,
    // Small too, so that heads are given both parsed and as text.
    parsed_heads: Some(crate::Limits {
        max_request_line: 64,
        max_header_bytes: 256,
        max_headers: 8,
    }),
};

/// An event, owned, for comparisons.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Owned {
    Request(u32, Vec<u8>, RequestBody, Priority),
    Data(u32, Vec<u8>, bool),
    Reset(u32, ErrorCode),
    Rejected(u32, u16),
    PriorityChanged(u32, Priority),
    WindowOpened,
    GoAway(u32, ErrorCode),
}

fn own(e: Event<'_>) -> Owned {
    match e {
        Event::Request {
            stream,
            head,
            body,
            priority,
        } => Owned::Request(
            stream,
            match head {
                Http1Head::Text(text) => text.to_vec(),
                Http1Head::Parsed(parsed) => parsed.bytes().to_vec(),
            },
            body,
            priority,
        ),
        Event::Data {
            stream,
            data,
            end_stream,
        } => Owned::Data(stream, data.to_vec(), end_stream),
        Event::Reset { stream, code } => Owned::Reset(stream, code),
        Event::Rejected { stream, status } => Owned::Rejected(stream, status),
        Event::PriorityChanged { stream, priority } => Owned::PriorityChanged(stream, priority),
        Event::WindowOpened => Owned::WindowOpened,
        Event::GoAway {
            last_stream_id,
            code,
        } => Owned::GoAway(last_stream_id, code),
    }
}

/// What the glue knows of a stream, from the events alone.
#[derive(Debug, Default)]
struct Seen {
    /// Body bytes given and not yet consumed.
    held: usize,
    ended: bool,
}

/// Follows the events as a glue would, checking that they make sense.
#[derive(Debug, Default)]
struct Tracker {
    streams: BTreeMap<u32, Seen>,
    last_request: u32,
}

impl Tracker {
    fn see(&mut self, e: &Owned) {
        match *e {
            Owned::Request(id, ..) | Owned::Rejected(id, _) => {
                assert!(
                    !id.is_multiple_of(2) && id > self.last_request,
                    "stream {id} opened"
                );
                self.last_request = id;
                let ended = matches!(e, Owned::Request(_, _, RequestBody::None, _));
                self.streams.insert(id, Seen { held: 0, ended });
            }
            Owned::Data(id, ref data, end_stream) => {
                let s = self.streams.get_mut(&id).expect("data for a known stream");
                assert!(!s.ended, "data after the end of stream {id}");
                assert!(!data.is_empty() || end_stream, "an empty data event");
                s.held += data.len();
                s.ended = end_stream;
            }
            Owned::Reset(id, _) => {
                self.streams.remove(&id).expect("a reset of a known stream");
            }
            Owned::PriorityChanged(id, p) => {
                assert!(p.urgency <= 7);
                assert!(self.streams.contains_key(&id), "priority of stream {id}");
            }
            Owned::WindowOpened | Owned::GoAway(..) => {}
        }
    }

    fn held(&self) -> usize {
        self.streams.values().map(|s| s.held).sum()
    }
}

/// The input as a connection reads it: the preface in front, unless the
/// input starts as one would (so that wrong prefaces are tried too).
fn with_preface(data: &[u8]) -> Vec<u8> {
    if data.starts_with(b"PRI ") {
        data.to_vec()
    } else {
        [&PREFACE[..], data].concat()
    }
}

/// What reading gave: events, output, bytes consumed and the error met.
type Passive = (Vec<Owned>, Vec<u8>, usize, Option<ErrorCode>);

/// Reads `input` arriving in pieces ending at `ends`, with a glue that does
/// nothing but read.
fn passive(input: &[u8], ends: impl IntoIterator<Item = usize>) -> Passive {
    let mut conn = Connection::new(H2_CONNECTION_SETTINGS);
    let mut out = Vec::new();
    conn.start(&mut out);
    let mut events = Vec::new();
    let mut tracker = Tracker::default();
    let mut pos = 0;
    for end in ends {
        loop {
            let closed = conn.is_closed();
            let used = conn.receive(&input[pos..end], &mut out, &mut |e| events.push(own(e)));
            assert!(used <= end - pos);
            assert!(!closed || used == 0, "read after the connection closed");
            pos += used;
            if used == 0 {
                break;
            }
        }
    }
    for e in &events {
        tracker.see(e);
    }
    // Nothing consumed: the client can have sent no more than the windows.
    let stream_window = DEFAULT_INITIAL_WINDOW_SIZE.max(H2_CONNECTION_SETTINGS.initial_window_size);
    for s in tracker.streams.values() {
        assert!(s.held <= stream_window as usize, "{} held", s.held);
    }
    assert!(tracker.held() <= DEFAULT_INITIAL_WINDOW_SIZE as usize);
    assert!(conn.active_streams() <= H2_CONNECTION_SETTINGS.max_concurrent_streams as usize);
    check_output(&out, conn.error());
    (events, out, pos, conn.error())
}

/// The server's output read as a client would: whole valid frames, blocks
/// that decode, a GOAWAY with the error last if there was one.
fn check_output(out: &[u8], error: Option<ErrorCode>) {
    let reader = FrameReader::new(MAX_FRAME_SIZE_LIMIT);
    let mut assembler = HeaderBlockAssembler::new(HeaderBlockLimits {
        max_block_size: 1 << 20,
        max_continuations: 1 << 10,
    });
    let mut decoder = Decoder::new(4096);
    let limits = DecodeLimits {
        max_header_list_size: 1 << 20,
        max_fields: 1 << 10,
    };
    let mut rest = out;
    let mut last = None;
    while !rest.is_empty() {
        let (frame, used) = match reader.parse(rest) {
            Ok(Some(f)) => f,
            other => panic!("the server wrote {other:?}"),
        };
        rest = &rest[used..];
        match assembler.push(&frame).expect("a server's field block") {
            Assembled::Complete(b) => {
                let mut status = None;
                decoder
                    .decode(b.block, &limits, |n, v, _| {
                        if n == b":status" {
                            status = Some(v.to_vec());
                        }
                    })
                    .expect("a server's header block");
                assert!(status.is_some_and(|s| s.len() == 3));
            }
            Assembled::Pending | Assembled::Other => {}
        }
        last = Some(frame);
    }
    if let Some(code) = error {
        assert!(
            matches!(last, Some(Frame::GoAway { error_code, .. }) if error_code == code.code()),
            "closed with {code} but last wrote {last:?}"
        );
    }
}

/// Reads `input` in pieces of a size derived from it, with a glue that
/// answers every request with a small body as windows allow, consumes every
/// body byte, and resets a stream or goes away now and then.
fn active(input: &[u8], h: u64) {
    let mut conn = Connection::new(H2_CONNECTION_SETTINGS);
    let mut out = Vec::new();
    conn.start(&mut out);
    let mut tracker = Tracker::default();
    // Body bytes still to send, per stream answered.
    let mut sending: BTreeMap<u32, usize> = BTreeMap::new();
    let piece = (h % 61) as usize + 1;
    let (mut pos, mut arrived) = (0, 0);
    let mut round = 0u64;
    loop {
        arrived = (arrived + piece).min(input.len());
        let mut events = Vec::new();
        let closed = conn.is_closed();
        let used = conn.receive(&input[pos..arrived], &mut out, &mut |e| events.push(own(e)));
        assert!(used <= arrived - pos);
        assert!(!closed || used == 0, "read after the connection closed");
        pos += used;
        for e in &events {
            tracker.see(e);
            round += 1;
            match *e {
                Owned::Request(id, ..) => {
                    if (h >> (round % 61)) & 7 == 0 {
                        conn.reset(id, ErrorCode::Cancel, &mut out);
                        continue;
                    }
                    if round.is_multiple_of(5) {
                        conn.send_headers(
                            id,
                            103,
                            &[Field::new(b"link", b"</a>")],
                            false,
                            &mut out,
                        );
                    }
                    conn.send_headers(
                        id,
                        200,
                        &[Field::new(b"content-type", b"text/plain")],
                        false,
                        &mut out,
                    );
                    sending.insert(id, (h >> (round % 32)) as usize % 3000);
                }
                Owned::Rejected(id, status) => {
                    conn.send_headers(id, status, &[], true, &mut out);
                }
                Owned::Data(id, ref data, _) => {
                    conn.consumed(id, data.len(), &mut out);
                    if let Some(s) = tracker.streams.get_mut(&id) {
                        s.held -= data.len();
                    }
                }
                Owned::Reset(id, _) => {
                    sending.remove(&id);
                }
                _ => {}
            }
        }
        if (h >> (round % 64)) & 0xff == 0x5a {
            conn.go_away(&mut out);
        }
        // Every stream sends what its windows allow; one with nothing left
        // to send ends with an empty DATA frame.
        sending.retain(|&id, left| {
            if *left == 0 {
                conn.send_data(id, 0, true, &mut out);
                return false;
            }
            loop {
                let n = conn.send_window(id).min(conn.max_frame_size()).min(*left);
                if n == 0 {
                    return true;
                }
                *left -= n;
                conn.send_data(id, n, *left == 0, &mut out);
                out.extend(std::iter::repeat_n(b'x', n));
                if *left == 0 {
                    return false;
                }
            }
        });
        assert!(conn.active_streams() <= H2_CONNECTION_SETTINGS.max_concurrent_streams as usize);
        assert_eq!(tracker.held(), 0);
        if conn.is_closed() || (used == 0 && arrived == input.len()) {
            break;
        }
    }
    check_output(&out, conn.error());
}

/// The fuzz target: reads the input whole, cut in two and a byte at a time
/// with the same outcome, then again with a glue that answers.
pub fn h2_connection(data: &[u8]) {
    let input = with_preface(data);
    let len = input.len();
    let whole = passive(&input, [len]);
    let h = hash(data);
    let cut = (h % (len as u64 + 1)) as usize;
    assert_eq!(passive(&input, [cut, len]), whole, "cut at {cut}");
    assert_eq!(passive(&input, 1..=len), whole, "byte by byte");
    active(&input, h);
}

/// Reads the input as the corpus replay checks it: the requests and
/// rejections reported, and the connection error met, if any.
pub fn h2_serve(data: &[u8]) -> (usize, Option<ErrorCode>) {
    let input = with_preface(data);
    let (events, _, _, error) = passive(&input, [input.len()]);
    let requests = events
        .iter()
        .filter(|e| matches!(e, Owned::Request(..) | Owned::Rejected(..)))
        .count();
    (requests, error)
}
