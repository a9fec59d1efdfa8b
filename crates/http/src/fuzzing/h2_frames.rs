//! Checks for the HTTP/2 frame layer: a stream of frames (after the
//! preface, if it starts with one) is read under a small frame size and
//! field block budget, whole, cut in two and a byte at a time, with the
//! same frames, blocks and errors each way; every frame that has a writer
//! is written again and must read the same, every field block is split
//! again and must join the same, and flow-control windows follow a model
//! in i64.

use std::collections::BTreeMap;

use super::hash;
use crate::h2::{
    detect_preface, write_data_header, write_goaway, write_headers, write_ping, write_ping_ack,
    write_rst_stream, write_settings, write_settings_ack, write_window_update, Assembled,
    ErrorCode, ErrorScope, Frame, FrameError, FrameHeader, FrameReader, HeaderBlockAssembler,
    HeaderBlockLimits, PrefaceMatch, Reason, Setting, Window, DEFAULT_INITIAL_WINDOW_SIZE,
    FRAME_HEADER_LEN, MAX_WINDOW_SIZE, PREFACE,
};

/// The reader's SETTINGS_MAX_FRAME_SIZE: far below what a server
/// advertises, so that inputs reach it.
pub const H2_MAX_FRAME_SIZE: u32 = 256;

/// A small field block budget, so that inputs reach it.
pub const H2_BLOCK_LIMITS: HeaderBlockLimits = HeaderBlockLimits {
    max_block_size: 512,
    max_continuations: 4,
};

/// What reading a stream of frames led to, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event<'a> {
    Frame(Frame<'a>),
    /// A whole field block: stream, END_STREAM, bytes.
    Block(u32, bool, Vec<u8>),
    /// A stream error, after which reading goes on, or a connection
    /// error, which ends the events.
    Error(FrameError),
}

/// What reading a stream of frames gave.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Read<'a> {
    events: Vec<Event<'a>>,
    /// The bytes taken by whole frames, up to a connection error.
    consumed: usize,
    /// Whether a field block was left open.
    block_open: bool,
}

/// Reads `data` as a connection would, with `ends` the successive amounts
/// of it that have arrived.
fn read_stream(data: &[u8], ends: impl IntoIterator<Item = usize>) -> Read<'_> {
    let reader = FrameReader::new(H2_MAX_FRAME_SIZE);
    let mut assembler = HeaderBlockAssembler::new(H2_BLOCK_LIMITS);
    let mut events = Vec::new();
    let mut pos = 0;
    let done = |events, pos, assembler: &HeaderBlockAssembler| Read {
        events,
        consumed: pos,
        block_open: assembler.open_stream().is_some(),
    };
    for end in ends {
        loop {
            match reader.parse(&data[pos..end]) {
                Ok(None) => break,
                Ok(Some((frame, used))) => {
                    assert!(used >= FRAME_HEADER_LEN && pos + used <= end);
                    pos += used;
                    events.push(Event::Frame(frame));
                    match assembler.push(&frame) {
                        Ok(Assembled::Other | Assembled::Pending) => {}
                        Ok(Assembled::Complete(b)) => {
                            events.push(Event::Block(b.stream_id, b.end_stream, b.block.to_vec()))
                        }
                        Err(e) => {
                            assert!(e.is_connection_error());
                            events.push(Event::Error(e));
                            return done(events, pos, &assembler);
                        }
                    }
                }
                Err(e) => {
                    let e = assembler.check_error(e);
                    events.push(Event::Error(e));
                    if e.is_connection_error() {
                        return done(events, pos, &assembler);
                    }
                    // A stream error comes only once the frame is whole.
                    let header = data[pos..end].first_chunk().expect("a frame header");
                    let len = FrameHeader::parse(header).frame_len();
                    assert!(pos + len <= end, "stream error before the frame was whole");
                    pos += len;
                }
            }
        }
    }
    done(events, pos, &assembler)
}

/// `data` after the preface, if it starts with one.
fn after_preface(data: &[u8]) -> &[u8] {
    for n in 0..=data.len().min(PREFACE.len()) {
        let expected = if data[..n] != PREFACE[..n] {
            PrefaceMatch::NotHttp2
        } else if n < PREFACE.len() {
            PrefaceMatch::NeedMore
        } else {
            PrefaceMatch::Http2
        };
        assert_eq!(detect_preface(&data[..n]), expected, "{n} bytes");
    }
    match detect_preface(data) {
        PrefaceMatch::Http2 => &data[PREFACE.len()..],
        _ => data,
    }
}

/// Reads the input (after the preface, if any) as the corpus replay checks
/// it, flow control included: the first error, or how many frames were
/// read and whether they took every byte with no field block left open.
pub fn h2_read(data: &[u8]) -> Result<(usize, bool), FrameError> {
    let body = after_preface(data);
    let read = read_stream(body, [body.len()]);
    let mut frames = 0;
    let mut windows = Windows::new();
    for event in &read.events {
        match event {
            Event::Error(e) => return Err(*e),
            Event::Frame(frame) => {
                frames += 1;
                windows.apply(frame)?;
            }
            Event::Block(..) => {}
        }
    }
    Ok((frames, read.consumed == body.len() && !read.block_open))
}

/// The fuzz target: reads the input every way, checks what was read and
/// writes it back.
pub fn h2_frames(data: &[u8]) {
    let body = after_preface(data);
    let whole = read_stream(body, [body.len()]);
    let cut = (hash(data) % (body.len() as u64 + 1)) as usize;
    assert_eq!(read_stream(body, [cut, body.len()]), whole, "cut at {cut}");
    assert_eq!(read_stream(body, 0..=body.len()), whole, "byte by byte");

    let mut windows = Windows::new();
    let events = &whole.events;
    for (i, event) in events.iter().enumerate() {
        match event {
            Event::Frame(frame) => {
                check_frame(frame);
                check_written(frame);
                // Refused changes leave the window as it was: go on.
                let _ = windows.apply(frame);
            }
            Event::Block(stream_id, end_stream, block) => {
                check_block(*stream_id, *end_stream, block, hash(block));
            }
            Event::Error(e) => {
                let last = i + 1 == events.len();
                assert!(!e.is_connection_error() || last, "events after {e}");
                // Only PRIORITY and WINDOW_UPDATE are refused on their stream.
                if let ErrorScope::Stream(id) = e.scope {
                    assert_ne!(id, 0);
                    assert!(matches!(
                        e.reason,
                        Reason::WrongLength { .. }
                            | Reason::SelfDependency { .. }
                            | Reason::ZeroWindowIncrement
                    ));
                }
                assert!(!e.to_string().is_empty());
            }
        }
    }
}

/// What holds for any frame read.
fn check_frame(frame: &Frame<'_>) {
    assert!(frame.stream_id() <= MAX_WINDOW_SIZE);
    match *frame {
        Frame::Data {
            stream_id,
            data,
            flow_controlled_len,
            ..
        } => {
            assert_ne!(stream_id, 0);
            assert!(data.len() <= flow_controlled_len as usize);
            assert!(flow_controlled_len <= H2_MAX_FRAME_SIZE);
        }
        Frame::Headers { stream_id, .. }
        | Frame::Continuation { stream_id, .. }
        | Frame::Priority { stream_id }
        | Frame::RstStream { stream_id, .. } => assert_ne!(stream_id, 0),
        Frame::Settings { ack, settings } => {
            assert!(!ack || settings.is_empty());
            for s in settings.iter() {
                assert_eq!(Setting::from_wire(s.id(), s.value()), Ok(Some(s)));
            }
        }
        Frame::WindowUpdate { increment, .. } => {
            assert!((1..=MAX_WINDOW_SIZE).contains(&increment))
        }
        Frame::PriorityUpdate {
            prioritized_stream_id,
            ..
        } => assert_ne!(prioritized_stream_id, 0),
        Frame::Ping { .. } | Frame::GoAway { .. } | Frame::Unknown { .. } => {}
    }
}

fn read_one(bytes: &[u8]) -> Frame<'_> {
    match FrameReader::new(u32::MAX).parse(bytes) {
        Ok(Some((frame, used))) if used == bytes.len() => frame,
        other => panic!("written frame {bytes:02x?} read as {other:?}"),
    }
}

/// Writes the frame again with the writers, where there is one, and reads
/// it back: the same frame, padding aside.
fn check_written(frame: &Frame<'_>) {
    let mut out = Vec::new();
    match *frame {
        Frame::Data {
            stream_id,
            data,
            end_stream,
            ..
        } => {
            write_data_header(stream_id, data.len(), end_stream, &mut out);
            out.extend_from_slice(data);
            assert_eq!(
                read_one(&out),
                Frame::Data {
                    stream_id,
                    data,
                    end_stream,
                    flow_controlled_len: data.len() as u32
                }
            );
        }
        Frame::Settings { ack, settings } => {
            let list: Vec<Setting> = settings.iter().collect();
            if ack {
                write_settings_ack(&mut out);
            } else {
                write_settings(&list, &mut out);
            }
            let Frame::Settings {
                ack: ack2,
                settings: again,
            } = read_one(&out)
            else {
                panic!("SETTINGS read as another frame");
            };
            assert_eq!(ack2, ack);
            assert_eq!(again.iter().collect::<Vec<_>>(), list);
        }
        Frame::Ping { ack, data } => {
            if ack {
                write_ping_ack(data, &mut out);
            } else {
                write_ping(data, &mut out);
            }
            assert_eq!(read_one(&out), *frame);
        }
        Frame::GoAway {
            last_stream_id,
            error_code,
            debug_data,
        } => {
            if let Some(code) = ErrorCode::from_u32(error_code) {
                write_goaway(last_stream_id, code, debug_data, &mut out);
                assert_eq!(read_one(&out), *frame);
            }
        }
        Frame::RstStream {
            stream_id,
            error_code,
        } => {
            if let Some(code) = ErrorCode::from_u32(error_code) {
                write_rst_stream(stream_id, code, &mut out);
                assert_eq!(read_one(&out), *frame);
            }
        }
        Frame::WindowUpdate {
            stream_id,
            increment,
        } => {
            write_window_update(stream_id, increment, &mut out);
            assert_eq!(read_one(&out), *frame);
        }
        // Joined into blocks and checked as blocks; fastpath writes none of
        // the others.
        Frame::Headers { .. }
        | Frame::Continuation { .. }
        | Frame::Priority { .. }
        | Frame::PriorityUpdate { .. }
        | Frame::Unknown { .. } => {}
    }
}

/// Splits a whole field block again at a derived frame size and joins it
/// with a fresh assembler.
fn check_block(stream_id: u32, end_stream: bool, block: &[u8], h: u64) {
    assert!(block.len() <= H2_BLOCK_LIMITS.max_block_size);
    let max = (h % u64::from(H2_MAX_FRAME_SIZE)) as usize + 1;
    let mut out = Vec::new();
    write_headers(stream_id, block, end_stream, max, &mut out);
    let reader = FrameReader::new(max as u32);
    let mut assembler = HeaderBlockAssembler::new(HeaderBlockLimits {
        max_block_size: block.len(),
        max_continuations: block.len(),
    });
    let mut input = &out[..];
    let mut joined = None;
    while let Some((frame, used)) = reader.parse(input).expect("a written frame refused") {
        input = &input[used..];
        match assembler.push(&frame).expect("a written block refused") {
            Assembled::Complete(b) => {
                assert!(joined.is_none(), "two blocks from one");
                assert_eq!((b.stream_id, b.end_stream), (stream_id, end_stream));
                joined = Some(b.block.to_vec());
            }
            Assembled::Pending => {}
            Assembled::Other => panic!("{frame:?} written for a block"),
        }
    }
    assert!(input.is_empty());
    assert_eq!(joined.as_deref(), Some(block), "split at {max}");
}

/// The connection's window and the streams' windows as DATA, WINDOW_UPDATE
/// and SETTINGS_INITIAL_WINDOW_SIZE move them, each checked against the
/// same arithmetic in i64.
struct Windows {
    initial: u32,
    connection: (Window, i64),
    streams: BTreeMap<u32, (Window, i64)>,
}

impl Windows {
    fn new() -> Self {
        let w = Window::new(DEFAULT_INITIAL_WINDOW_SIZE);
        Windows {
            initial: DEFAULT_INITIAL_WINDOW_SIZE,
            connection: (w, i64::from(DEFAULT_INITIAL_WINDOW_SIZE)),
            streams: BTreeMap::new(),
        }
    }

    fn stream(&mut self, id: u32) -> &mut (Window, i64) {
        let initial = self.initial;
        // A bounded map: the first few streams stand for all.
        let id = if self.streams.len() >= 8 && !self.streams.contains_key(&id) {
            *self.streams.keys().next().expect("not empty")
        } else {
            id
        };
        self.streams
            .entry(id)
            .or_insert_with(|| (Window::new(initial), i64::from(initial)))
    }

    /// Applies the frame to the windows, checking each change against the
    /// model; the first change refused is returned.
    fn apply(&mut self, frame: &Frame<'_>) -> Result<(), FrameError> {
        let max = i64::from(MAX_WINDOW_SIZE);
        let mut first = Ok(());
        match *frame {
            Frame::Data {
                stream_id,
                flow_controlled_len: len,
                ..
            } => {
                let delta = -i64::from(len);
                let (w, model) = &mut self.connection;
                let ok = i64::from(len) <= (*model).max(0);
                first = first.and(check(w.consume(len, 0), ok, w, model, delta));
                let (w, model) = self.stream(stream_id);
                let ok = i64::from(len) <= (*model).max(0);
                first = first.and(check(w.consume(len, stream_id), ok, w, model, delta));
            }
            Frame::WindowUpdate {
                stream_id,
                increment,
            } => {
                let (w, model) = if stream_id == 0 {
                    &mut self.connection
                } else {
                    self.stream(stream_id)
                };
                let ok = *model + i64::from(increment) <= max;
                first = check(
                    w.increase(increment, stream_id),
                    ok,
                    w,
                    model,
                    i64::from(increment),
                );
            }
            Frame::Settings { settings, .. } => {
                for s in settings.iter() {
                    let Setting::InitialWindowSize(new) = s else {
                        continue;
                    };
                    let delta = i64::from(new) - i64::from(self.initial);
                    for (w, model) in self.streams.values_mut() {
                        let sum = *model + delta;
                        let ok = (-max..=max).contains(&sum);
                        let r = w.apply_initial_size_change(self.initial, new);
                        if let Err(e) = r {
                            assert!(e.is_connection_error());
                        }
                        first = first.and(check(r, ok, w, model, delta));
                    }
                    self.initial = new;
                }
            }
            _ => {}
        }
        first
    }
}

/// A window operation agrees with the model: accepted exactly when the
/// model says so, the window moved by `delta` if it was and unchanged if
/// not, and refused with FLOW_CONTROL_ERROR. Returns `r`.
fn check(
    r: Result<(), FrameError>,
    ok: bool,
    w: &Window,
    model: &mut i64,
    delta: i64,
) -> Result<(), FrameError> {
    match r {
        Ok(()) => {
            assert!(ok, "window {model} accepted a change of {delta}");
            *model += delta;
        }
        Err(e) => {
            assert!(!ok, "window {model} refused a change of {delta}: {e}");
            assert_eq!(e.code(), ErrorCode::FlowControlError);
        }
    }
    assert_eq!(i64::from(w.size()), *model);
    r
}
