//! The server side of an HTTP/2 connection (RFC 9113), sans-I/O: the bytes a
//! client sent go in, per-stream [`Event`]s and the frames that answer them
//! come out, with no socket and no clock.
//!
//! [`Connection::receive`] reads frames with the frame layer
//! ([`super::frame`], [`super::block`]), decodes every field block with the
//! connection's HPACK decoder (so that its table stays in step even for
//! streams that are refused or ignored), checks each request with
//! [`super::request`] and keeps the stream states of RFC 9113 §5.1. The glue
//! that owns the socket answers with [`Connection::send_headers`] and
//! [`Connection::send_data`] within the windows [`Connection::send_window`]
//! reports, and says with [`Connection::consumed`] how much request body it
//! has passed on, which is what reopens the client's windows: the server
//! never holds more unconsumed body than it advertised.
//!
//! ```
//! use fastpath_http::h2::conn::{Connection, Event, ServerSettings};
//! use fastpath_http::h2::{write_headers, write_settings, Encoder, Field, Http1Head, PREFACE};
//!
//! let mut conn = Connection::new(ServerSettings::default());
//! let mut out = Vec::new();
//! conn.start(&mut out); // SETTINGS and the connection's WINDOW_UPDATE
//!
//! // A client's first flight: preface, SETTINGS, one GET.
//! let mut input = PREFACE.to_vec();
//! write_settings(&[], &mut input);
//! let mut block = Vec::new();
//! Encoder::new().encode(
//!     [
//!         Field::new(b":method", b"GET"),
//!         Field::new(b":scheme", b"https"),
//!         Field::new(b":authority", b"example.com"),
//!         Field::new(b":path", b"/"),
//!     ],
//!     &mut block,
//! );
//! write_headers(1, &block, true, 16_384, &mut input);
//!
//! let mut heads = Vec::new();
//! let used = conn.receive(&input, &mut out, &mut |event| {
//!     if let Event::Request { stream, head: Http1Head::Text(head), .. } = event {
//!         heads.push((stream, head.to_vec()));
//!     }
//! });
//! assert_eq!(used, input.len());
//! assert_eq!(heads, [(1, b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n".to_vec())]);
//!
//! conn.send_headers(1, 200, &[Field::new(b"content-type", b"text/plain")], false, &mut out);
//! assert!(conn.send_window(1) >= 2);
//! conn.send_data(1, 2, true, &mut out);
//! out.extend_from_slice(b"hi"); // the payload follows its header
//! assert_eq!(conn.active_streams(), 0);
//! ```
//!
//! Abuse is budgeted, each past its budget a connection error
//! ENHANCE_YOUR_CALM: streams reset before their response completed, by
//! the client (Rapid Reset, CVE-2023-44487) or by this side because of the
//! client's frames (MadeYouReset, CVE-2025-8671), share one budget that
//! grows with the streams that complete ([`RESET_BUDGET_BASE`]); frames that
//! move no request forward (PING, SETTINGS, PRIORITY, PRIORITY_UPDATE,
//! WINDOW_UPDATE nothing was waiting for, empty DATA, HEADERS and
//! CONTINUATION, unknown frames; CVE-2019-9512, 9513, 9515, 9518) share
//! another ([`CONTROL_FRAME_BUDGET_BASE`]); and the replies one call writes
//! are bounded ([`CONTROL_HIGH_WATER`]), so that a client that does not read
//! stops being read. A connection serves at most
//! [`ServerSettings::max_requests`] streams, then says GOAWAY.

use std::collections::VecDeque;

use super::block::{Assembled, HeaderBlockAssembler, HeaderBlockLimits, DEFAULT_MAX_CONTINUATIONS};
use super::frame::{
    flags, write_data_header, write_goaway, write_headers, write_ping, write_ping_ack,
    write_rst_stream, write_settings, write_settings_ack, write_window_update, ErrorCode,
    ErrorScope, Frame, FrameHeader, FrameReader, FrameType, Reason, Setting, Settings,
    DEFAULT_INITIAL_WINDOW_SIZE, DEFAULT_MAX_FRAME_SIZE, FRAME_HEADER_LEN, MAX_FRAME_SIZE_LIMIT,
    MAX_WINDOW_SIZE, PREFACE,
};
use super::hpack::{DecodeLimits, Decoder, Encoder, Field, DEFAULT_TABLE_SIZE};
use super::request::{check_trailer_field, Http1Head, RequestBody, RequestHead};
use super::window::Window;
use crate::Limits;

/// Default [`ServerSettings::max_concurrent_streams`]: what RFC 9113 §6.5.2
/// recommends as the least, and what most servers advertise.
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 100;

/// Default [`ServerSettings::connection_window_size`]: 1 MiB, so that a few
/// uploads at once are not held to one stream's 64 KiB.
pub const DEFAULT_CONNECTION_WINDOW_SIZE: u32 = 1 << 20;

/// Default [`ServerSettings::max_requests`]: nginx's `keepalive_requests`,
/// after which a connection is closed gracefully so that its memory (HPACK
/// tables, buffers grown by large requests) is returned now and then.
pub const DEFAULT_MAX_REQUESTS: u64 = 1000;

/// Streams a client may have reset before their response completed, by
/// RST_STREAM or by provoking a stream error, beyond
/// [`RESETS_PER_COMPLETED_STREAM`]'s share of the streams that completed.
/// A browser cancels a few streams per page (navigation, aborted fetches);
/// Rapid Reset (CVE-2023-44487) and MadeYouReset (CVE-2025-8671) open and
/// reset thousands per second to make the server start work it then drops,
/// without ever being held to MAX_CONCURRENT_STREAMS.
pub const RESET_BUDGET_BASE: u64 = 200;

/// One more reset allowed per this many streams that completed normally, so
/// that a long-lived connection that cancels now and then is not cut off.
pub const RESETS_PER_COMPLETED_STREAM: u64 = 2;

/// Frames that move no request forward a client may send before
/// [`CONTROL_FRAMES_PER_REQUEST`] per accepted request: PING, SETTINGS,
/// PRIORITY, PRIORITY_UPDATE, WINDOW_UPDATE with no DATA sent since the last
/// one, unknown frame types, DATA without payload or END_STREAM, empty
/// HEADERS or CONTINUATION, and frames on streams already closed. Each costs
/// the server a frame's work and some a reply; floods of them
/// (CVE-2019-9512 ping, 9513 priority, 9515 settings, 9518 empty frames) are
/// cheap to send. Ten thousand is far beyond what any client's
/// keep-alive pings and settings changes need.
pub const CONTROL_FRAME_BUDGET_BASE: u64 = 10_000;

/// More frames of [`CONTROL_FRAME_BUDGET_BASE`]'s kind allowed per accepted
/// request: priority updates, window updates and pings scale with the work a
/// client asks for.
pub const CONTROL_FRAMES_PER_REQUEST: u64 = 100;

/// Most bytes one [`Connection::receive`] call writes before it stops
/// reading: the replies to PING and SETTINGS and the RST_STREAMs a client
/// provokes grow the output without bound if the client does not read them
/// (CVE-2019-9512, 9515, 9517). Stopping hands the glue, which stops reading
/// while its output is full, the back-pressure TCP gives it.
pub const CONTROL_HIGH_WATER: usize = 64 * 1024;

/// The highest stream id there can be: a GOAWAY naming it announces a shutdown without
/// refusing a stream.
const MAX_STREAM_ID: u32 = (1 << 31) - 1;

/// The PING that follows an announced shutdown; its acknowledgement is the client's word
/// that it has seen the GOAWAY.
const GOAWAY_PING: [u8; 8] = *b"goingawy";

/// Closed streams remembered, to tell a frame on a stream closed a moment
/// ago (ignored, or a stream error) from one on a stream long gone (a
/// connection error). At 8 bytes each, 1 KiB per connection: enough for the
/// frames in flight on every stream of a full default concurrency when
/// they all end at once.
const RECENTLY_CLOSED: usize = 128;

/// PRIORITY_UPDATE frames kept for streams not yet open (RFC 9218 §7.1 lets
/// a server bound them); the oldest goes first.
const PENDING_PRIORITIES: usize = 16;

/// The status a request over [`ServerSettings::header_limits`] is answered
/// with (RFC 6585 §5).
const HEADER_FIELDS_TOO_LARGE: u16 = 431;

/// What a server advertises and allows on one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerSettings {
    /// Streams a client may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS);
    /// one more is refused with REFUSED_STREAM.
    pub max_concurrent_streams: u32,
    /// Each stream's receive window (SETTINGS_INITIAL_WINDOW_SIZE): the most
    /// request body held for a stream before the glue consumes it.
    pub initial_window_size: u32,
    /// The connection's receive window, raised from 65,535 with a
    /// WINDOW_UPDATE in [`Connection::start`]: the most request body held
    /// for all streams together.
    pub connection_window_size: u32,
    /// The longest frame payload accepted (SETTINGS_MAX_FRAME_SIZE).
    pub max_frame_size: u32,
    /// A request's header list size and field count
    /// (SETTINGS_MAX_HEADER_LIST_SIZE); a larger one is answered 431.
    pub header_limits: DecodeLimits,
    /// Streams accepted on one connection; after the last, a graceful GOAWAY
    /// (NO_ERROR) and newer streams are ignored.
    pub max_requests: u64,
    /// Requests are given parsed ([`Http1Head::Parsed`]) for an HTTP/1 parser held to
    /// these limits, save those it is to judge as text; `None`: always as text.
    pub parsed_heads: Option<Limits>,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            max_concurrent_streams: DEFAULT_MAX_CONCURRENT_STREAMS,
            initial_window_size: DEFAULT_INITIAL_WINDOW_SIZE,
            connection_window_size: DEFAULT_CONNECTION_WINDOW_SIZE,
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            header_limits: DecodeLimits::default(),
            max_requests: DEFAULT_MAX_REQUESTS,
            parsed_heads: None,
        }
    }
}

/// A stream's priority (RFC 9218 §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    /// 0 (most urgent) to 7.
    pub urgency: u8,
    /// Whether the response may be sent interleaved with others of the same
    /// urgency, rather than one after the other.
    pub incremental: bool,
}

impl Default for Priority {
    fn default() -> Self {
        Priority {
            urgency: DEFAULT_URGENCY,
            incremental: false,
        }
    }
}

/// RFC 9218 §4.1's default urgency.
const DEFAULT_URGENCY: u8 = 3;

/// The least urgent urgency (RFC 9218 §4.1).
const MAX_URGENCY: i64 = 7;

impl Priority {
    /// Reads a Priority field value (the `priority` request field, or a
    /// PRIORITY_UPDATE frame's): a Structured Fields dictionary (RFC 8941
    /// §3.2) whose `u` (an integer 0 to 7) and `i` (a boolean) are read and
    /// every other member ignored, as is a `u` or `i` of another type or
    /// range (RFC 9218 §4). `None` if the value is no dictionary at all;
    /// absent parameters take their defaults.
    pub fn parse(value: &[u8]) -> Option<Priority> {
        let mut p = SfParser { s: value, pos: 0 };
        let mut urgency = None;
        let mut incremental = None;
        p.skip_spaces();
        while !p.done() {
            let key = p.key()?;
            let item = if p.eat(b'=') {
                p.member_value()?
            } else {
                p.parameters()?;
                Item::Boolean(true)
            };
            // A dictionary's later member of the same name replaces the
            // earlier one (RFC 8941 §4.2.2), before its type is judged.
            match key {
                b"u" => urgency = Some(item),
                b"i" => incremental = Some(item),
                _ => {}
            }
            p.skip_ows();
            if p.done() {
                break;
            }
            if !p.eat(b',') {
                return None;
            }
            p.skip_ows();
            if p.done() {
                return None;
            }
        }
        let mut priority = Priority::default();
        if let Some(Item::Integer(u)) = urgency {
            if (0..=MAX_URGENCY).contains(&u) {
                priority.urgency = u as u8;
            }
        }
        if let Some(Item::Boolean(i)) = incremental {
            priority.incremental = i;
        }
        Some(priority)
    }
}

/// A Structured Fields bare item, as far as priorities care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    Integer(i64),
    Boolean(bool),
    /// A decimal, string, token, byte sequence or inner list.
    Other,
}

/// A cursor over a Structured Fields value (RFC 8941 §4.2).
struct SfParser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl<'a> SfParser<'a> {
    fn done(&self) -> bool {
        self.pos >= self.s.len()
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        self.pos += usize::from(hit);
        hit
    }

    fn skip_spaces(&mut self) {
        while self.eat(b' ') {}
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
    }

    /// A key: lower-case letter or `*`, then lower-case letters, digits,
    /// `_`, `-`, `.` and `*`.
    fn key(&mut self) -> Option<&'a [u8]> {
        let start = self.pos;
        if !matches!(self.peek(), Some(b'a'..=b'z' | b'*')) {
            return None;
        }
        while matches!(
            self.peek(),
            Some(b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*')
        ) {
            self.pos += 1;
        }
        Some(&self.s[start..self.pos])
    }

    /// `;key[=item]`, as many as there are; their values are not wanted.
    fn parameters(&mut self) -> Option<()> {
        while self.eat(b';') {
            self.skip_spaces();
            self.key()?;
            if self.eat(b'=') {
                self.bare_item()?;
            }
        }
        Some(())
    }

    /// An item or an inner list, with its parameters.
    fn member_value(&mut self) -> Option<Item> {
        if self.eat(b'(') {
            loop {
                self.skip_spaces();
                if self.eat(b')') {
                    break;
                }
                self.bare_item()?;
                self.parameters()?;
                if !matches!(self.peek(), Some(b' ' | b')')) {
                    return None;
                }
            }
            self.parameters()?;
            return Some(Item::Other);
        }
        let item = self.bare_item()?;
        self.parameters()?;
        Some(item)
    }

    fn bare_item(&mut self) -> Option<Item> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => self.number(),
            b'"' => {
                self.pos += 1;
                loop {
                    match self.peek()? {
                        b'"' => break,
                        b'\\' => {
                            self.pos += 1;
                            if !matches!(self.peek()?, b'"' | b'\\') {
                                return None;
                            }
                        }
                        0x20..=0x7e => {}
                        _ => return None,
                    }
                    self.pos += 1;
                }
                self.pos += 1;
                Some(Item::Other)
            }
            b'*' | b'a'..=b'z' | b'A'..=b'Z' => {
                self.pos += 1;
                while self
                    .peek()
                    .is_some_and(|b| crate::syntax::is_tchar(b) || b == b':' || b == b'/')
                {
                    self.pos += 1;
                }
                Some(Item::Other)
            }
            b':' => {
                self.pos += 1;
                while self
                    .peek()
                    .is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
                {
                    self.pos += 1;
                }
                self.eat(b':').then_some(Item::Other)
            }
            b'?' => {
                self.pos += 1;
                let b = match self.peek()? {
                    b'0' => false,
                    b'1' => true,
                    _ => return None,
                };
                self.pos += 1;
                Some(Item::Boolean(b))
            }
            _ => None,
        }
    }

    /// An integer (at most 15 digits) or a decimal (at most 12 digits, a
    /// dot, 1 to 3 digits), RFC 8941 §4.2.4.
    fn number(&mut self) -> Option<Item> {
        let negative = self.eat(b'-');
        let start = self.pos;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
        let digits = self.pos - start;
        if digits == 0 {
            return None;
        }
        if self.eat(b'.') {
            let frac = self.pos;
            while self.peek().is_some_and(|b| b.is_ascii_digit()) {
                self.pos += 1;
            }
            let frac_digits = self.pos - frac;
            return (digits <= 12 && (1..=3).contains(&frac_digits)).then_some(Item::Other);
        }
        if digits > 15 {
            return None;
        }
        let n = self.s[start..self.pos]
            .iter()
            .fold(0i64, |n, &d| n * 10 + i64::from(d - b'0'));
        Some(Item::Integer(if negative { -n } else { n }))
    }
}

/// What a client's frames mean to the glue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// A new request: its header block checked by
    /// [`RequestHead`] and written as an HTTP/1.1 head (with no Connection
    /// fields), or laid out as one parsed (see
    /// [`ServerSettings::parsed_heads`]). `body` says how the DATA frames
    /// are to be passed on; [`RequestBody::None`] when HEADERS had
    /// END_STREAM.
    Request {
        /// The stream.
        stream: u32,
        /// The HTTP/1.1 head, as text or parsed.
        head: Http1Head<'a>,
        /// How the body that follows is delimited.
        body: RequestBody,
        /// From the `priority` field and any PRIORITY_UPDATE sent before
        /// the stream opened.
        priority: Priority,
    },
    /// Request body bytes (padding removed); `end_stream` with the last,
    /// which may be empty (END_STREAM on an empty DATA frame, or a trailer
    /// block, whose fields are checked and dropped).
    Data {
        /// The stream.
        stream: u32,
        /// The body bytes, borrowed from the input.
        data: &'a [u8],
        /// The request body ends here.
        end_stream: bool,
    },
    /// A stream the glue knows (it had its Request or Rejected) ended
    /// without completing: the client's RST_STREAM, or a stream error this
    /// side met. The glue drops all its work for it.
    Reset {
        /// The stream.
        stream: u32,
        /// The client's code, or the one sent.
        code: ErrorCode,
    },
    /// A request the server answers with this status instead of serving
    /// it: 431 when the header list is over [`ServerSettings::header_limits`]
    /// (the block was still decoded, to keep HPACK in step). The glue writes
    /// the answer; the connection discards the request's body and, once the
    /// answer is sent, resets the stream with NO_ERROR if the client is still
    /// sending it.
    Rejected {
        /// The stream.
        stream: u32,
        /// The status to answer with.
        status: u16,
    },
    /// A PRIORITY_UPDATE changed an open stream's priority.
    PriorityChanged {
        /// The stream.
        stream: u32,
        /// Its new priority.
        priority: Priority,
    },
    /// Some send window grew (WINDOW_UPDATE, or a larger
    /// SETTINGS_INITIAL_WINDOW_SIZE): streams waiting on flow control may
    /// send.
    WindowOpened,
    /// The client's GOAWAY.
    GoAway {
        /// The last stream the client may have processed: none of this
        /// server's, which pushes nothing.
        last_stream_id: u32,
        /// Why; an unknown code reads as INTERNAL_ERROR (RFC 9113 §7).
        code: ErrorCode,
    },
}

/// How a stream that left the table was closed, for the frames that may
/// still come on it (RFC 9113 §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closed {
    /// This side sent RST_STREAM: whatever the client sent before it saw
    /// that is ignored.
    ResetHere,
    /// The client sent RST_STREAM: DATA or HEADERS after it are a stream
    /// error STREAM_CLOSED.
    ResetByPeer,
    /// END_STREAM both ways: DATA is a stream error STREAM_CLOSED, HEADERS a
    /// connection error.
    Ended,
}

/// The streams closed lately, each once, the oldest replaced first. The ids are kept apart
/// from their kinds, in a fixed array, so that looking one up (each time a stream ends) is
/// a few vector compares rather than a walk of a queue of pairs.
#[derive(Debug)]
struct Recent {
    /// [`Recent::EMPTY`] where none is yet.
    ids: [u32; RECENTLY_CLOSED],
    kinds: [Closed; RECENTLY_CLOSED],
    /// Where the next goes: the oldest, once every place is taken.
    next: usize,
}

impl Recent {
    /// No stream's id: they have 31 bits.
    const EMPTY: u32 = u32::MAX;

    fn new() -> Recent {
        Recent {
            ids: [Recent::EMPTY; RECENTLY_CLOSED],
            kinds: [Closed::Ended; RECENTLY_CLOSED],
            next: 0,
        }
    }

    fn find(&self, id: u32) -> Option<usize> {
        if id == Recent::EMPTY {
            return None;
        }
        // Whether it is there at all, without an early exit, which would keep the
        // compiler from comparing many at once; most ids looked up are not.
        let there = self.ids.iter().fold(false, |there, &i| there | (i == id));
        if !there {
            return None;
        }
        self.ids.iter().position(|&i| i == id)
    }

    fn remember(&mut self, id: u32, kind: Closed) {
        if let Some(at) = self.find(id) {
            self.kinds[at] = kind;
            return;
        }
        self.ids[self.next] = id;
        self.kinds[self.next] = kind;
        self.next = (self.next + 1) % RECENTLY_CLOSED;
    }
}

/// A stream that is open or half-closed either way.
#[derive(Debug, Clone)]
struct Stream {
    id: u32,
    /// The client may still send DATA or trailers.
    recv_open: bool,
    /// This side may still send.
    send_open: bool,
    /// The glue had an event for it, so it hears of its end.
    known: bool,
    /// Answered with [`Event::Rejected`]: its body is discarded.
    rejected: bool,
    /// What the client may still send.
    recv: Window,
    /// Body bytes handed to the glue and not yet consumed.
    unconsumed: u32,
    /// Bytes consumed (or padding) not yet given back with WINDOW_UPDATE.
    pending: u32,
    /// What this side may still send.
    send: Window,
    /// DATA was sent since the client's last WINDOW_UPDATE for the stream;
    /// an update with none sent was not needed.
    sent_since_update: bool,
    content_length: Option<u64>,
    received: u64,
    priority: Priority,
}

/// A connection error: the code for GOAWAY.
type ConnResult<T = ()> = Result<T, ErrorCode>;

/// Everything but the frame reader and the field block assembler, so that a
/// block borrowed from the assembler can be handled by `&mut self` methods.
#[derive(Debug)]
struct State {
    max_concurrent_streams: usize,
    initial_window_size: u32,
    connection_window_size: u32,
    max_frame_size: u32,
    header_limits: DecodeLimits,
    max_requests: u64,
    parsed_heads: Option<Limits>,

    streams: Vec<Stream>,
    recent: Recent,
    pending_priorities: VecDeque<(u32, Priority)>,
    /// The highest stream a client's HEADERS named: every odd stream above
    /// it is idle, every one at or below open or closed.
    highest: u32,
    /// The last stream accepted (Request or Rejected), for GOAWAY.
    last_accepted: u32,
    requests: u64,
    completed: u64,
    resets: u64,
    unproductive: u64,

    decoder: Decoder,
    encoder: Encoder,
    request: RequestHead,
    /// The HTTP/1.1 head of the request being reported.
    head: Vec<u8>,
    /// The `priority` fields of the block being decoded, joined.
    priority_field: Vec<u8>,
    /// A response's header block being written.
    block: Vec<u8>,

    conn_recv: Window,
    conn_pending: u32,
    conn_send: Window,
    conn_sent_since_update: bool,
    /// The stream window the client is held to: 65,535 until it has
    /// acknowledged the SETTINGS that announced
    /// [`ServerSettings::initial_window_size`].
    recv_initial: u32,
    /// The client's SETTINGS_INITIAL_WINDOW_SIZE.
    send_initial: u32,
    /// The client's SETTINGS_MAX_FRAME_SIZE.
    peer_max_frame_size: u32,
    /// The frames read are held to this: the default until the client
    /// acknowledged a larger one.
    read_max_frame_size: u32,
    settings_sent: bool,
    settings_acked: bool,
    settings_received: bool,

    /// The last stream id of the GOAWAY sent, once one was.
    goaway: Option<u32>,
    /// A graceful shutdown was announced ([`Connection::announce_go_away`]): the GOAWAY
    /// naming the last stream follows the acknowledgement of [`GOAWAY_PING`].
    announced: bool,
    closed: Option<ErrorCode>,
}

/// The server side of one HTTP/2 connection.
#[derive(Debug)]
pub struct Connection {
    preface_done: bool,
    assembler: HeaderBlockAssembler,
    /// The field block open was begun by a HEADERS frame making its stream
    /// depend on itself: a stream error once the block is decoded.
    self_dependent: bool,
    st: State,
}

impl Connection {
    /// A connection with these settings, nothing read or written yet.
    pub fn new(settings: ServerSettings) -> Connection {
        let max_frame_size = settings
            .max_frame_size
            .clamp(DEFAULT_MAX_FRAME_SIZE, MAX_FRAME_SIZE_LIMIT);
        let limits = settings.header_limits;
        Connection {
            preface_done: false,
            assembler: HeaderBlockAssembler::new(HeaderBlockLimits {
                // HPACK seldom makes a block larger than its list, and the
                // list is bounded again when decoded; a block between the
                // two is still decoded, to answer 431.
                max_block_size: limits.max_header_list_size.saturating_mul(2),
                max_continuations: DEFAULT_MAX_CONTINUATIONS,
            }),
            self_dependent: false,
            st: State {
                max_concurrent_streams: settings.max_concurrent_streams as usize,
                initial_window_size: settings.initial_window_size.min(MAX_WINDOW_SIZE),
                connection_window_size: settings
                    .connection_window_size
                    .clamp(DEFAULT_INITIAL_WINDOW_SIZE, MAX_WINDOW_SIZE),
                max_frame_size,
                header_limits: limits,
                max_requests: settings.max_requests,
                parsed_heads: settings.parsed_heads,
                streams: Vec::new(),
                recent: Recent::new(),
                pending_priorities: VecDeque::new(),
                highest: 0,
                last_accepted: 0,
                announced: false,
                requests: 0,
                completed: 0,
                resets: 0,
                unproductive: 0,
                decoder: Decoder::new(DEFAULT_TABLE_SIZE),
                encoder: Encoder::new(),
                request: RequestHead::default(),
                head: Vec::new(),
                priority_field: Vec::new(),
                block: Vec::new(),
                conn_recv: Window::new(DEFAULT_INITIAL_WINDOW_SIZE),
                conn_pending: 0,
                conn_send: Window::new(DEFAULT_INITIAL_WINDOW_SIZE),
                conn_sent_since_update: false,
                recv_initial: DEFAULT_INITIAL_WINDOW_SIZE,
                send_initial: DEFAULT_INITIAL_WINDOW_SIZE,
                peer_max_frame_size: DEFAULT_MAX_FRAME_SIZE,
                read_max_frame_size: DEFAULT_MAX_FRAME_SIZE,
                settings_sent: false,
                settings_acked: false,
                settings_received: false,
                goaway: None,
                closed: None,
            },
        }
    }

    /// The server preface: SETTINGS (MAX_CONCURRENT_STREAMS,
    /// INITIAL_WINDOW_SIZE and MAX_FRAME_SIZE if not their defaults,
    /// MAX_HEADER_LIST_SIZE, ENABLE_PUSH 0, NO_RFC7540_PRIORITIES 1) and the
    /// WINDOW_UPDATE that raises the connection's window.
    pub fn start(&mut self, out: &mut Vec<u8>) {
        let st = &mut self.st;
        if st.settings_sent {
            return;
        }
        let mut settings = [Setting::EnablePush(false); 6];
        let mut n = 0;
        let mut add = |s| {
            settings[n] = s;
            n += 1;
        };
        add(Setting::MaxConcurrentStreams(
            u32::try_from(st.max_concurrent_streams).unwrap_or(u32::MAX),
        ));
        if st.initial_window_size != DEFAULT_INITIAL_WINDOW_SIZE {
            add(Setting::InitialWindowSize(st.initial_window_size));
        }
        if st.max_frame_size != DEFAULT_MAX_FRAME_SIZE {
            add(Setting::MaxFrameSize(st.max_frame_size));
        }
        add(Setting::MaxHeaderListSize(
            u32::try_from(st.header_limits.max_header_list_size).unwrap_or(u32::MAX),
        ));
        add(Setting::EnablePush(false));
        add(Setting::NoRfc7540Priorities(true));
        write_settings(&settings[..n], out);
        let raise = st.connection_window_size - DEFAULT_INITIAL_WINDOW_SIZE;
        if raise > 0 {
            write_window_update(0, raise, out);
            st.conn_recv = Window::new(st.connection_window_size);
        }
        st.settings_sent = true;
    }

    /// Reads what it can of `input`, which begins with the client's 24-byte
    /// preface until that has been consumed (a wrong preface is a connection
    /// error PROTOCOL_ERROR), reporting events and writing replies (SETTINGS
    /// ACK, PING ACK, RST_STREAM, WINDOW_UPDATE, GOAWAY) to `out`. Returns
    /// how many bytes it consumed: less than `input.len()` when a frame is
    /// incomplete, when this call has written [`CONTROL_HIGH_WATER`] bytes
    /// (call again once they are sent), or once the connection is closed.
    pub fn receive(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> usize {
        if self.st.closed.is_some() {
            return 0;
        }
        let start = out.len();
        let mut pos = 0;
        if !self.preface_done {
            let n = input.len().min(PREFACE.len());
            if input[..n] != PREFACE[..n] {
                self.st.fail(ErrorCode::ProtocolError, out);
                return 0;
            }
            if n < PREFACE.len() {
                return 0;
            }
            self.preface_done = true;
            pos = n;
        }
        while self.st.closed.is_none() && out.len() - start <= CONTROL_HIGH_WATER {
            let rest = &input[pos..];
            let reader = FrameReader::new(self.st.read_max_frame_size);
            let result = match reader.parse(rest) {
                Ok(None) => break,
                Ok(Some((frame, used))) => self.on_frame(frame, out, on_event).map(|()| used),
                Err(e) => {
                    let e = self.assembler.check_error(e);
                    match (e.scope, e.reason) {
                        (
                            ErrorScope::Connection,
                            Reason::SelfDependency {
                                frame_type: FrameType::Headers,
                                ..
                            },
                        ) => {
                            // RFC 9113 §5.3.1 makes it a stream error; the
                            // reader refuses the frame whole, so it is read
                            // again here to decode its block first.
                            match self_dependent_headers(rest) {
                                Some((frame, used)) => {
                                    self.self_dependent = true;
                                    self.on_frame(frame, out, on_event).map(|()| used)
                                }
                                None => Err(e.code()),
                            }
                        }
                        (ErrorScope::Stream(id), _) => {
                            // A stream error comes once the frame is whole.
                            let len = rest
                                .first_chunk::<FRAME_HEADER_LEN>()
                                .map_or(rest.len(), |h| FrameHeader::parse(h).frame_len());
                            self.st
                                .on_frame_stream_error(id, e.code(), out, on_event)
                                .map(|()| len)
                        }
                        (ErrorScope::Connection, _) => Err(e.code()),
                    }
                }
            };
            match result {
                Ok(used) => pos += used,
                Err(code) => {
                    self.st.fail(code, out);
                    break;
                }
            }
        }
        pos
    }

    /// One whole frame, checked by the reader.
    fn on_frame(
        &mut self,
        frame: Frame<'_>,
        out: &mut Vec<u8>,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> ConnResult {
        let st = &mut self.st;
        if !st.settings_received {
            // The client's preface ends with a SETTINGS frame (§3.4).
            if !matches!(frame, Frame::Settings { ack: false, .. }) {
                return Err(ErrorCode::ProtocolError);
            }
            st.settings_received = true;
        }
        let empty = matches!(
            frame,
            Frame::Headers { fragment: &[], .. } | Frame::Continuation { fragment: &[], .. }
        );
        if empty {
            st.unproductive()?;
        }
        let self_dependent = self.self_dependent;
        match self.assembler.push(&frame) {
            Err(e) => Err(e.code()),
            Ok(Assembled::Other) => st.on_frame(frame, out, on_event),
            Ok(Assembled::Pending) => Ok(()),
            Ok(Assembled::Complete(block)) => {
                self.self_dependent = false;
                st.on_block(
                    block.stream_id,
                    block.end_stream,
                    block.block,
                    self_dependent,
                    out,
                    on_event,
                )
            }
        }
    }

    /// Whether a connection error was met (its GOAWAY written): nothing more
    /// is read; the glue sends what is queued and closes.
    pub fn is_closed(&self) -> bool {
        self.st.closed.is_some()
    }

    /// The connection error met, if one was.
    pub fn error(&self) -> Option<ErrorCode> {
        self.st.closed
    }

    /// Graceful shutdown: GOAWAY(NO_ERROR) naming the last stream accepted;
    /// HEADERS of newer streams are ignored from then on (RFC 9113 §6.8),
    /// while the streams accepted run to their end. Idempotent.
    pub fn go_away(&mut self, out: &mut Vec<u8>) {
        self.st.go_away(out);
    }

    /// The first step of a graceful shutdown that loses no request already on its way (RFC
    /// 9113 §6.8): GOAWAY naming the highest stream id there can be, then a PING. Streams
    /// are still accepted until the PING's acknowledgement, a round trip later, shows that
    /// the client has seen the GOAWAY; then the GOAWAY naming the last stream accepted
    /// follows by itself ([`Connection::is_going_away`] from then on). A caller that will
    /// not wait that long calls [`Connection::go_away`]. Idempotent.
    pub fn announce_go_away(&mut self, out: &mut Vec<u8>) {
        let st = &mut self.st;
        if st.closed.is_some() || st.goaway.is_some() || st.announced {
            return;
        }
        st.announced = true;
        write_goaway(MAX_STREAM_ID, ErrorCode::NoError, &[], out);
        write_ping(GOAWAY_PING, out);
    }

    /// Whether a shutdown was announced ([`Connection::announce_go_away`]) or a GOAWAY sent.
    pub fn is_announced(&self) -> bool {
        self.st.announced || self.st.goaway.is_some()
    }

    /// Whether a GOAWAY was sent, gracefully or for an error.
    pub fn is_going_away(&self) -> bool {
        self.st.goaway.is_some()
    }

    /// Streams not yet closed (open, or half-closed either way).
    pub fn active_streams(&self) -> usize {
        self.st.streams.len()
    }

    /// Writes a response's header block: `:status` then `fields`
    /// (lower-case names; fields marked never-indexed, and credentials,
    /// are never indexed), encoded with the connection's HPACK encoder
    /// (its table as large as the client's SETTINGS_HEADER_TABLE_SIZE
    /// allows, up to 4 KiB, the size update first when the client lowered
    /// it) and split into CONTINUATION frames by the client's
    /// SETTINGS_MAX_FRAME_SIZE. A 1xx status is an interim response, which
    /// cannot end the stream; otherwise `end_stream` closes the sending half.
    /// Nothing is written for a stream unknown, reset or closed for sending,
    /// nor once the connection is closed (its GOAWAY stays the last frame).
    pub fn send_headers(
        &mut self,
        stream: u32,
        status: u16,
        fields: &[Field<'_>],
        end_stream: bool,
        out: &mut Vec<u8>,
    ) {
        self.st
            .send_headers(stream, status, fields, end_stream, out);
    }

    /// A response's header block made of pieces encoded without the dynamic table
    /// ([`encode_without_table`](super::encode_without_table)): `prepared`, `:status` and the fields that stay the same
    /// from one response to the next, as a cache of heads keeps them, then `also`, the
    /// fields that change (the date), kept by the caller for as long as they hold. A table
    /// size update the client is owed goes first. Otherwise as [`Connection::send_headers`]
    /// for a final response.
    pub fn send_prepared_headers(
        &mut self,
        stream: u32,
        prepared: &[u8],
        also: &[u8],
        end_stream: bool,
        out: &mut Vec<u8>,
    ) {
        let st = &mut self.st;
        if st.closed.is_some() {
            return;
        }
        let Some(i) = st.index(stream).filter(|&i| st.streams[i].send_open) else {
            return;
        };
        st.block.clear();
        st.encoder.begin_block(&mut st.block);
        st.block.extend_from_slice(prepared);
        st.block.extend_from_slice(also);
        write_headers(
            stream,
            &st.block,
            end_stream,
            st.peer_max_frame_size as usize,
            out,
        );
        if end_stream {
            st.end_sending(i, out);
        }
    }

    /// How many DATA bytes the stream may send now: the lesser of the
    /// connection's and the stream's send windows; 0 for a stream that is
    /// unknown, reset or closed for sending, and for every stream once the
    /// connection is closed.
    pub fn send_window(&self, stream: u32) -> usize {
        self.st.send_window(stream)
    }

    /// The client's SETTINGS_MAX_FRAME_SIZE: the longest DATA payload to send.
    pub fn max_frame_size(&self) -> usize {
        self.st.peer_max_frame_size as usize
    }

    /// Takes `len` bytes from both send windows and writes a DATA frame
    /// header for them; the caller appends exactly `len` payload bytes right
    /// after it. `end_stream` closes the sending half. For a stream that may
    /// not send, `len` must be 0 and nothing is written.
    ///
    /// # Panics
    /// If `len` is over [`Connection::send_window`] or
    /// [`Connection::max_frame_size`]: the frame would break the client's
    /// flow control or frame size, a bug in the caller.
    pub fn send_data(&mut self, stream: u32, len: usize, end_stream: bool, out: &mut Vec<u8>) {
        self.st.send_data(stream, len, end_stream, out);
    }

    /// The server resets a stream (RST_STREAM with `code`) and forgets it;
    /// nothing is written for a stream already closed. No [`Event::Reset`]
    /// follows: the glue asked for it.
    pub fn reset(&mut self, stream: u32, code: ErrorCode, out: &mut Vec<u8>) {
        if self.st.closed.is_some() {
            return;
        }
        if let Some(i) = self.st.index(stream) {
            self.st.remove(i);
            write_rst_stream(stream, code, out);
            self.st.remember(stream, Closed::ResetHere);
            self.st.update_connection(out);
        }
    }

    /// The glue has passed on `n` request-body bytes of `stream` (given by
    /// [`Event::Data`]): WINDOW_UPDATEs for the stream and the connection
    /// once half of either window has been taken, so that the server never
    /// holds more unconsumed body than the windows it advertised. Bytes of
    /// closed or reset streams, and padding, are given back by the
    /// connection itself; `n` past what the stream has outstanding is
    /// ignored.
    pub fn consumed(&mut self, stream: u32, n: usize, out: &mut Vec<u8>) {
        if self.st.closed.is_some() {
            return;
        }
        self.st.consumed(stream, n, out);
    }

    /// The stream's priority (RFC 9218): from its `priority` request field,
    /// then PRIORITY_UPDATE frames; the default (urgency 3, not
    /// incremental) for a stream not open.
    pub fn priority(&self, stream: u32) -> Priority {
        self.st
            .index(stream)
            .map_or_else(Priority::default, |i| self.st.streams[i].priority)
    }
}

/// A HEADERS frame the reader refused for making its stream depend on
/// itself, read again so that its field block can still be decoded: the
/// reader checked everything else before that, so the frame is whole and
/// its padding fits.
fn self_dependent_headers(input: &[u8]) -> Option<(Frame<'_>, usize)> {
    let header = FrameHeader::parse(input.first_chunk::<FRAME_HEADER_LEN>()?);
    if header.frame_type != FrameType::Headers as u8 {
        return None;
    }
    let end = header.frame_len();
    let payload = input.get(FRAME_HEADER_LEN..end)?;
    let padded = header.flags & flags::PADDED != 0;
    let pad_len = if padded {
        usize::from(*payload.first()?)
    } else {
        0
    };
    let start = usize::from(padded) + 5;
    let fragment = payload.get(start..payload.len().checked_sub(pad_len)?)?;
    let frame = Frame::Headers {
        stream_id: header.stream_id,
        fragment,
        end_stream: header.flags & flags::END_STREAM != 0,
        end_headers: header.flags & flags::END_HEADERS != 0,
    };
    Some((frame, end))
}

impl State {
    fn index(&self, id: u32) -> Option<usize> {
        // A scan: at most MAX_CONCURRENT_STREAMS entries, 100 by default,
        // where a map would cost more to keep than it saves.
        self.streams.iter().position(|s| s.id == id)
    }

    /// An idle stream: above every stream the client opened, or
    /// even-numbered (server-initiated, and this server opens none).
    fn is_idle(&self, id: u32) -> bool {
        id > self.highest || id.is_multiple_of(2)
    }

    /// Newer than the GOAWAY sent: ignored, its bytes given back.
    fn is_ignored(&self, id: u32) -> bool {
        self.goaway.is_some_and(|last| id > last)
    }

    fn closed_kind(&self, id: u32) -> Option<Closed> {
        self.recent.find(id).map(|at| self.recent.kinds[at])
    }

    fn remember(&mut self, id: u32, kind: Closed) {
        self.recent.remember(id, kind);
    }

    /// Takes a stream out of the table, its unconsumed body given back to
    /// the connection's window (the caller writes the update).
    fn remove(&mut self, i: usize) -> Stream {
        let s = self.streams.swap_remove(i);
        self.conn_pending += s.unconsumed;
        s
    }

    fn fail(&mut self, code: ErrorCode, out: &mut Vec<u8>) {
        write_goaway(self.last_accepted, code, &[], out);
        // No stream is accepted after a GOAWAY: the id never grows.
        self.goaway = Some(self.last_accepted);
        self.closed = Some(code);
    }

    fn go_away(&mut self, out: &mut Vec<u8>) {
        if self.closed.is_some() || self.goaway.is_some() {
            return;
        }
        write_goaway(self.last_accepted, ErrorCode::NoError, &[], out);
        self.goaway = Some(self.last_accepted);
    }

    /// Counts a frame that moved no request forward.
    fn unproductive(&mut self) -> ConnResult {
        self.unproductive += 1;
        let budget = CONTROL_FRAME_BUDGET_BASE
            .saturating_add(self.requests.saturating_mul(CONTROL_FRAMES_PER_REQUEST));
        if self.unproductive > budget {
            return Err(ErrorCode::EnhanceYourCalm);
        }
        Ok(())
    }

    /// Counts a stream reset before its response completed.
    fn count_reset(&mut self) -> ConnResult {
        self.resets += 1;
        let budget = RESET_BUDGET_BASE + self.completed / RESETS_PER_COMPLETED_STREAM;
        if self.resets > budget {
            return Err(ErrorCode::EnhanceYourCalm);
        }
        Ok(())
    }

    /// A stream error this side raises because of the client's frames:
    /// RST_STREAM, the stream forgotten, the glue told if it knew the
    /// stream. Counted as a reset (MadeYouReset).
    fn stream_error(
        &mut self,
        id: u32,
        code: ErrorCode,
        out: &mut Vec<u8>,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> ConnResult {
        if let Some(i) = self.index(id) {
            let s = self.remove(i);
            if s.known {
                on_event(Event::Reset { stream: id, code });
            }
            self.update_connection(out);
        }
        write_rst_stream(id, code, out);
        self.remember(id, Closed::ResetHere);
        self.count_reset()
    }

    /// A stream error the frame reader found (a PRIORITY of the wrong
    /// length or depending on itself, a WINDOW_UPDATE of 0).
    fn on_frame_stream_error(
        &mut self,
        id: u32,
        code: ErrorCode,
        out: &mut Vec<u8>,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> ConnResult {
        if self.is_idle(id) {
            // RST_STREAM may not be sent on an idle stream (§6.4), and the
            // stream cannot be closed without closing every idle one below
            // it: the connection pays instead.
            return Err(code);
        }
        if self.index(id).is_none() {
            // Closed already, the error is still said: RST_STREAM is allowed on a closed
            // stream (§6.4 forbids it on idle ones only), and a client that sends a PRIORITY
            // of the wrong length once its response has come is told of it (h2spec 6.3 #2).
            // The client provoked it: it counts as a reset.
            write_rst_stream(id, code, out);
            return self.count_reset();
        }
        self.stream_error(id, code, out, on_event)
    }

    /// Gives back DATA bytes of a stream that will never be consumed.
    fn give_back(&mut self, len: u32, out: &mut Vec<u8>) {
        self.conn_pending += len;
        self.update_connection(out);
    }

    /// A connection WINDOW_UPDATE once half of the window waits to be
    /// given back.
    fn update_connection(&mut self, out: &mut Vec<u8>) {
        let threshold = (self.connection_window_size / 2).max(1);
        if self.conn_pending >= threshold {
            write_window_update(0, self.conn_pending, out);
            // Within the window's size, which is within 2^31 − 1.
            let _ = self.conn_recv.increase(self.conn_pending, 0);
            self.conn_pending = 0;
        }
    }

    /// A stream WINDOW_UPDATE once half of its window waits to be given
    /// back, while the client may still send on it.
    fn update_stream(&mut self, i: usize, out: &mut Vec<u8>) {
        let threshold = (self.recv_initial / 2).max(1);
        let s = &mut self.streams[i];
        if s.recv_open && s.pending >= threshold {
            write_window_update(s.id, s.pending, out);
            let _ = s.recv.increase(s.pending, s.id);
            s.pending = 0;
        }
    }

    /// The stream's sending half closed: the stream ends if the client's
    /// has; a rejected stream whose body is still coming is reset with
    /// NO_ERROR, which asks the client to stop sending it (§8.1).
    fn end_sending(&mut self, i: usize, out: &mut Vec<u8>) {
        let s = &mut self.streams[i];
        s.send_open = false;
        let id = s.id;
        if !s.recv_open {
            self.complete(i, Closed::Ended, out);
        } else if s.rejected {
            write_rst_stream(id, ErrorCode::NoError, out);
            self.complete(i, Closed::ResetHere, out);
        }
    }

    /// The client's half closed: the stream ends if this side's has.
    fn end_receiving(&mut self, i: usize, out: &mut Vec<u8>) {
        let s = &mut self.streams[i];
        s.recv_open = false;
        if !s.send_open {
            self.complete(i, Closed::Ended, out);
        }
    }

    /// The stream at `i` ends with its response complete, remembered as closed `how`.
    fn complete(&mut self, i: usize, how: Closed, out: &mut Vec<u8>) {
        let id = self.remove(i).id;
        self.completed += 1;
        self.remember(id, how);
        self.update_connection(out);
    }

    fn on_frame(
        &mut self,
        frame: Frame<'_>,
        out: &mut Vec<u8>,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> ConnResult {
        match frame {
            Frame::Data {
                stream_id,
                data,
                end_stream,
                flow_controlled_len,
            } => self.on_data(
                stream_id,
                data,
                end_stream,
                flow_controlled_len,
                out,
                on_event,
            ),
            Frame::RstStream {
                stream_id,
                error_code,
            } => self.on_rst_stream(stream_id, error_code, out, on_event),
            Frame::Settings { ack, settings } => self.on_settings(ack, settings, out, on_event),
            Frame::Ping { ack, data } => {
                self.unproductive()?;
                if !ack {
                    write_ping_ack(data, out);
                } else if data == GOAWAY_PING && self.announced {
                    // The client has seen the announcement: what it sent before is here.
                    self.go_away(out);
                }
                Ok(())
            }
            Frame::GoAway {
                last_stream_id,
                error_code,
                ..
            } => {
                self.unproductive()?;
                let code = ErrorCode::from_u32(error_code).unwrap_or(ErrorCode::InternalError);
                on_event(Event::GoAway {
                    last_stream_id,
                    code,
                });
                Ok(())
            }
            Frame::WindowUpdate {
                stream_id,
                increment,
            } => self.on_window_update(stream_id, increment, out, on_event),
            Frame::PriorityUpdate {
                prioritized_stream_id,
                field_value,
            } => self.on_priority_update(prioritized_stream_id, field_value, on_event),
            // RFC 7540 priorities are deprecated (RFC 9113 §5.3.2) and
            // this server said SETTINGS_NO_RFC7540_PRIORITIES.
            Frame::Priority { .. } | Frame::Unknown { .. } => self.unproductive(),
            // Taken by the assembler.
            Frame::Headers { .. } | Frame::Continuation { .. } => Ok(()),
        }
    }

    fn on_settings(
        &mut self,
        ack: bool,
        settings: Settings<'_>,
        out: &mut Vec<u8>,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> ConnResult {
        if ack {
            if self.settings_sent && !self.settings_acked {
                self.settings_acked = true;
                // The client holds itself to these from here on.
                for s in &mut self.streams {
                    let _ = s
                        .recv
                        .apply_initial_size_change(self.recv_initial, self.initial_window_size);
                }
                self.recv_initial = self.initial_window_size;
                self.read_max_frame_size = self.max_frame_size;
                return Ok(());
            }
            // An acknowledgement of nothing: harmless, but not free.
            return self.unproductive();
        }
        self.unproductive()?;
        let before = self.send_initial;
        for setting in settings.iter() {
            match setting {
                Setting::HeaderTableSize(size) => {
                    self.encoder.set_max_table_size(size as usize);
                }
                Setting::InitialWindowSize(size) => {
                    for s in &mut self.streams {
                        s.send
                            .apply_initial_size_change(self.send_initial, size)
                            .map_err(|e| e.code())?;
                    }
                    self.send_initial = size;
                }
                Setting::MaxFrameSize(size) => self.peer_max_frame_size = size,
                // Nothing is pushed, no stream opened by this side, and
                // response heads are the glue's to size.
                Setting::EnablePush(_)
                | Setting::MaxConcurrentStreams(_)
                | Setting::MaxHeaderListSize(_)
                | Setting::EnableConnectProtocol(_)
                | Setting::NoRfc7540Priorities(_) => {}
            }
        }
        write_settings_ack(out);
        if self.send_initial > before && !self.streams.is_empty() {
            on_event(Event::WindowOpened);
        }
        Ok(())
    }

    fn on_window_update(
        &mut self,
        id: u32,
        increment: u32,
        out: &mut Vec<u8>,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> ConnResult {
        if id == 0 {
            if !std::mem::take(&mut self.conn_sent_since_update) {
                self.unproductive()?;
            }
            self.conn_send
                .increase(increment, 0)
                .map_err(|e| e.code())?;
            on_event(Event::WindowOpened);
            return Ok(());
        }
        if let Some(i) = self.index(id) {
            if !std::mem::take(&mut self.streams[i].sent_since_update) {
                self.unproductive()?;
            }
            let s = &mut self.streams[i];
            if let Err(e) = s.send.increase(increment, id) {
                return self.stream_error(id, e.code(), out, on_event);
            }
            if s.send_open {
                on_event(Event::WindowOpened);
            }
            return Ok(());
        }
        if self.is_idle(id) {
            return Err(ErrorCode::ProtocolError);
        }
        // Closed: an update may cross the END_STREAM or RST_STREAM sent.
        self.unproductive()
    }

    fn on_rst_stream(
        &mut self,
        id: u32,
        code: u32,
        out: &mut Vec<u8>,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> ConnResult {
        let code = ErrorCode::from_u32(code).unwrap_or(ErrorCode::InternalError);
        if let Some(i) = self.index(id) {
            let s = self.remove(i);
            self.remember(id, Closed::ResetByPeer);
            if s.known {
                on_event(Event::Reset { stream: id, code });
            }
            self.update_connection(out);
            if s.send_open {
                // The response had not completed: Rapid Reset's pattern.
                return self.count_reset();
            }
            return Ok(());
        }
        if self.is_idle(id) && !self.is_ignored(id) {
            return Err(ErrorCode::ProtocolError);
        }
        self.unproductive()
    }

    fn on_priority_update(
        &mut self,
        id: u32,
        value: &[u8],
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> ConnResult {
        self.unproductive()?;
        // A value that does not parse changes nothing.
        let Some(priority) = Priority::parse(value) else {
            return Ok(());
        };
        if let Some(i) = self.index(id) {
            let s = &mut self.streams[i];
            if s.priority != priority {
                s.priority = priority;
                on_event(Event::PriorityChanged {
                    stream: id,
                    priority,
                });
            }
        } else if !id.is_multiple_of(2) && id > self.highest {
            // For a stream yet to open: kept for when it does (RFC 9218 §7.1).
            self.pending_priorities.retain(|&(i, _)| i != id);
            if self.pending_priorities.len() == PENDING_PRIORITIES {
                self.pending_priorities.pop_front();
            }
            self.pending_priorities.push_back((id, priority));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn on_data(
        &mut self,
        id: u32,
        data: &[u8],
        end_stream: bool,
        len: u32,
        out: &mut Vec<u8>,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> ConnResult {
        // Every DATA frame counts against the connection's window, whatever
        // becomes of it.
        self.conn_recv.consume(len, 0).map_err(|e| e.code())?;
        if data.is_empty() && !end_stream {
            self.unproductive()?;
        }
        let Some(i) = self.index(id) else {
            self.give_back(len, out);
            if self.is_ignored(id) {
                return Ok(());
            }
            if self.is_idle(id) {
                return Err(ErrorCode::ProtocolError);
            }
            return match self.closed_kind(id) {
                // Sent before the client saw the RST_STREAM (§5.1).
                Some(Closed::ResetHere) => self.unproductive(),
                Some(Closed::ResetByPeer | Closed::Ended) => {
                    self.stream_error(id, ErrorCode::StreamClosed, out, on_event)
                }
                None => Err(ErrorCode::StreamClosed),
            };
        };
        if !self.streams[i].recv_open {
            // Half-closed (remote): the client had ended the stream.
            self.give_back(len, out);
            return self.stream_error(id, ErrorCode::StreamClosed, out, on_event);
        }
        if let Err(e) = self.streams[i].recv.consume(len, id) {
            self.give_back(len, out);
            return self.stream_error(id, e.code(), out, on_event);
        }
        let s = &mut self.streams[i];
        s.received += data.len() as u64;
        // §8.1.1: DATA must add up to the content-length.
        if s.content_length
            .is_some_and(|n| s.received > n || (end_stream && s.received != n))
        {
            self.give_back(len, out);
            return self.stream_error(id, ErrorCode::ProtocolError, out, on_event);
        }
        let padding = len - data.len() as u32;
        if s.rejected {
            s.pending += len;
            self.conn_pending += len;
        } else {
            s.unconsumed += data.len() as u32;
            s.pending += padding;
            self.conn_pending += padding;
            if !data.is_empty() || end_stream {
                on_event(Event::Data {
                    stream: id,
                    data,
                    end_stream,
                });
            }
        }
        if end_stream {
            self.end_receiving(i, out);
        } else {
            self.update_stream(i, out);
        }
        self.update_connection(out);
        Ok(())
    }

    /// Decodes a block whose fields nobody wants, to keep HPACK in step.
    fn decode_ignored(&mut self, block: &[u8]) -> ConnResult {
        match self
            .decoder
            .decode(block, &self.header_limits, |_, _, _| {})
        {
            Err(e) if e.is_connection_error() => Err(ErrorCode::CompressionError),
            _ => Ok(()),
        }
    }

    fn on_block(
        &mut self,
        id: u32,
        end_stream: bool,
        block: &[u8],
        self_dependent: bool,
        out: &mut Vec<u8>,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> ConnResult {
        if id.is_multiple_of(2) {
            // Clients open odd-numbered streams (§5.1.1).
            return Err(ErrorCode::ProtocolError);
        }
        if let Some(i) = self.index(id) {
            return self.on_trailers(i, end_stream, block, self_dependent, out, on_event);
        }
        if id > self.highest {
            return self.on_request(id, end_stream, block, self_dependent, out, on_event);
        }
        if self.is_ignored(id) {
            self.decode_ignored(block)?;
            return self.unproductive();
        }
        match self.closed_kind(id) {
            Some(Closed::ResetHere) => {
                // Trailers the client sent before it saw the RST_STREAM.
                self.decode_ignored(block)?;
                self.unproductive()
            }
            Some(Closed::ResetByPeer) => {
                self.decode_ignored(block)?;
                self.stream_error(id, ErrorCode::StreamClosed, out, on_event)
            }
            Some(Closed::Ended) => Err(ErrorCode::StreamClosed),
            // Either a stream closed long ago or one never opened below the
            // highest (§5.1.1): no longer told apart.
            None => Err(ErrorCode::ProtocolError),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_request(
        &mut self,
        id: u32,
        end_stream: bool,
        block: &[u8],
        self_dependent: bool,
        out: &mut Vec<u8>,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> ConnResult {
        self.highest = id;
        self.request.clear();
        self.priority_field.clear();
        let mut malformed = false;
        let request = &mut self.request;
        let priority_field = &mut self.priority_field;
        let decoded = self
            .decoder
            .decode(block, &self.header_limits, |name, value, _| {
                if malformed {
                    return;
                }
                if name == b"priority" {
                    if !priority_field.is_empty() {
                        priority_field.extend_from_slice(b", ");
                    }
                    priority_field.extend_from_slice(value);
                }
                malformed = request.field(name, value).is_err();
            });
        let too_large = match decoded {
            Ok(()) => false,
            Err(e) if e.is_connection_error() => return Err(ErrorCode::CompressionError),
            Err(_) => true,
        };
        if self.goaway.is_some() {
            // Newer than the GOAWAY: the client knows it was not processed.
            return self.unproductive();
        }
        if self.streams.len() >= self.max_concurrent_streams {
            return self.stream_error(id, ErrorCode::RefusedStream, out, on_event);
        }
        if !too_large && (malformed || self_dependent) {
            return self.stream_error(id, ErrorCode::ProtocolError, out, on_event);
        }
        // Parsed for the HTTP/1 path where it can be, as text where not.
        let mut parsed = false;
        let body = if too_large {
            None
        } else {
            let finished = match &self.parsed_heads {
                Some(limits) => self
                    .request
                    .finish_parsed(end_stream, limits)
                    .map(|(body, head)| (body, head.is_some())),
                None => Ok((RequestBody::None, false)),
            };
            match finished {
                Ok((body, true)) => {
                    parsed = true;
                    Some(body)
                }
                Ok(_) => {
                    self.head.clear();
                    match self.request.finish(end_stream, &mut self.head) {
                        Ok(body) => Some(body),
                        Err(_) => {
                            return self.stream_error(id, ErrorCode::ProtocolError, out, on_event)
                        }
                    }
                }
                Err(_) => return self.stream_error(id, ErrorCode::ProtocolError, out, on_event),
            }
        };
        let mut priority = if self.priority_field.is_empty() {
            Priority::default()
        } else {
            Priority::parse(&self.priority_field).unwrap_or_default()
        };
        if let Some(n) = self.pending_priorities.iter().position(|&(i, _)| i == id) {
            // Sent after the request, though it arrived first.
            priority = self.pending_priorities[n].1;
            self.pending_priorities.remove(n);
        }
        self.pending_priorities.retain(|&(i, _)| i > id);
        self.streams.push(Stream {
            id,
            recv_open: !end_stream,
            send_open: true,
            known: true,
            rejected: body.is_none(),
            recv: Window::new(self.recv_initial),
            unconsumed: 0,
            pending: 0,
            send: Window::new(self.send_initial),
            sent_since_update: false,
            content_length: match body {
                Some(RequestBody::Length(n)) => Some(n),
                _ => None,
            },
            received: 0,
            priority,
        });
        self.requests += 1;
        self.last_accepted = id;
        match body {
            Some(body) => on_event(Event::Request {
                stream: id,
                head: match self.request.parsed() {
                    Some(head) if parsed => Http1Head::Parsed(head),
                    _ => Http1Head::Text(&self.head),
                },
                body,
                priority,
            }),
            None => on_event(Event::Rejected {
                stream: id,
                status: HEADER_FIELDS_TOO_LARGE,
            }),
        }
        if self.requests >= self.max_requests {
            self.go_away(out);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn on_trailers(
        &mut self,
        i: usize,
        end_stream: bool,
        block: &[u8],
        self_dependent: bool,
        out: &mut Vec<u8>,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> ConnResult {
        let mut malformed = false;
        let decoded = self
            .decoder
            .decode(block, &self.header_limits, |name, value, _| {
                malformed |= check_trailer_field(name, value).is_err();
            });
        let too_large = match decoded {
            Ok(()) => false,
            Err(e) if e.is_connection_error() => return Err(ErrorCode::CompressionError),
            Err(_) => true,
        };
        let s = &self.streams[i];
        let id = s.id;
        if !s.recv_open {
            return self.stream_error(id, ErrorCode::StreamClosed, out, on_event);
        }
        // A second HEADERS is a trailer block, which ends the stream (§8.1).
        let content_length_off = s.content_length.is_some_and(|n| s.received != n);
        if !end_stream || malformed || self_dependent || content_length_off {
            return self.stream_error(id, ErrorCode::ProtocolError, out, on_event);
        }
        if too_large {
            // Past the request's field budget after its head was served:
            // too late for 431, and no protocol error either.
            return self.stream_error(id, ErrorCode::EnhanceYourCalm, out, on_event);
        }
        if !s.rejected {
            on_event(Event::Data {
                stream: id,
                data: &[],
                end_stream: true,
            });
        }
        self.end_receiving(i, out);
        Ok(())
    }

    fn send_headers(
        &mut self,
        id: u32,
        status: u16,
        fields: &[Field<'_>],
        end_stream: bool,
        out: &mut Vec<u8>,
    ) {
        if self.closed.is_some() {
            return;
        }
        let Some(i) = self.index(id).filter(|&i| self.streams[i].send_open) else {
            return;
        };
        let interim = (100..200).contains(&status);
        debug_assert!(!(interim && end_stream), "a 1xx response ends no stream");
        debug_assert!((100..1000).contains(&status), "status {status}");
        let status = status % 1000;
        let digits = [
            b'0' + (status / 100) as u8,
            b'0' + (status / 10 % 10) as u8,
            b'0' + (status % 10) as u8,
        ];
        self.block.clear();
        self.encoder.encode(
            std::iter::once(Field::new(b":status", &digits)).chain(fields.iter().copied()),
            &mut self.block,
        );
        let end_stream = end_stream && !interim;
        write_headers(
            id,
            &self.block,
            end_stream,
            self.peer_max_frame_size as usize,
            out,
        );
        if end_stream {
            self.end_sending(i, out);
        }
    }

    fn send_window(&self, id: u32) -> usize {
        if self.closed.is_some() {
            // The GOAWAY written is the last frame.
            return 0;
        }
        match self.index(id).map(|i| &self.streams[i]) {
            Some(s) if s.send_open => s.send.available().min(self.conn_send.available()) as usize,
            _ => 0,
        }
    }

    fn send_data(&mut self, id: u32, len: usize, end_stream: bool, out: &mut Vec<u8>) {
        let window = self.send_window(id);
        assert!(
            len <= window,
            "{len} bytes of DATA on stream {id} with a send window of {window}"
        );
        assert!(
            len <= self.peer_max_frame_size as usize,
            "{len} bytes of DATA past the client's SETTINGS_MAX_FRAME_SIZE {}",
            self.peer_max_frame_size
        );
        if self.closed.is_some() {
            return;
        }
        let Some(i) = self.index(id).filter(|&i| self.streams[i].send_open) else {
            return;
        };
        // Within both windows, as asserted.
        let n = len as u32;
        let _ = self.conn_send.consume(n, 0);
        let s = &mut self.streams[i];
        let _ = s.send.consume(n, id);
        if n > 0 {
            self.conn_sent_since_update = true;
            s.sent_since_update = true;
        }
        write_data_header(id, len, end_stream, out);
        if end_stream {
            self.end_sending(i, out);
        }
    }

    fn consumed(&mut self, id: u32, n: usize, out: &mut Vec<u8>) {
        let Some(i) = self.index(id) else {
            return;
        };
        let s = &mut self.streams[i];
        let n = s.unconsumed.min(u32::try_from(n).unwrap_or(u32::MAX));
        s.unconsumed -= n;
        s.pending += n;
        self.conn_pending += n;
        self.update_stream(i, out);
        self.update_connection(out);
    }
}

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
