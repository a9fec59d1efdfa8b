//! HTTP/2 on the web server's connections: the protocol machine of
//! [`fastpath_http::h2::Connection`] below, and above it each stream served as one request
//! of the HTTP/1 path, lent buffers and a deadline of its own ([`Io::lend`]).
//!
//! Why through the HTTP/1 path: what a request gets (routing, virtual hosts, the static
//! reply, both caches, hand-over, HSTS, the access log and the metrics) is then written
//! once and means the same on both protocols. A stream's header block becomes an HTTP/1.1
//! head with `Connection: close`, so the path answers exactly one request and says when it
//! is done. What the path queues is read back here: the response head, parsed once (a few
//! hundred bytes, whose fields become HPACK), and the body's pieces moved into DATA frames
//! as they are: a shared cache buffer stays shared, a file range is read into its frame
//! (frames of the usual 16 KiB would each cost a sendfile and a sendmsg; read, a window of
//! them leaves in one), and only a chunked body (relayed from a backend, in memory) is
//! unframed.
//! Frames go out by urgency (RFC 9218), one frame per stream in turn within an urgency,
//! while the connection's output is under its high-water mark; past it nothing more is read
//! (a client that does not read its replies stops being read).

use std::time::Instant;

use fastpath_drivers::{BufferPool, CloseReason, FlushError, Input, Io, Next, Output};
use fastpath_http::h2::{
    Connection, ErrorCode, Event, Field, Http1Head, Priority, RequestBody, ServerSettings,
    FRAME_HEADER_LEN,
};
use fastpath_http::{ChunkedDecoder, Limits, Parser, ResponseFraming, ResponseParser};

use super::{HttpConn, HttpHandler, Phase, DRAIN_IDLE_WAIT, OUTPUT_HIGH_WATER};

/// How long a graceful stop waits for the client to acknowledge the GOAWAY it announced
/// (a round trip) before it names the last stream it takes.
const GOAWAY_ACK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
/// DATA frames up to this size whose bytes come from a file are read into memory, so that
/// many frames leave in one send (see `data_read_from_file`); larger ones, which a client
/// allows with SETTINGS_MAX_FRAME_SIZE, stay file ranges for sendfile, one frame a call.
const READ_FILE_FRAMES_UP_TO: u64 = 64 * 1024;
/// Bytes of a response head looked at first; doubled while the head is longer.
const HEAD_PEEK: usize = 1024;
/// The fields an HTTP/1 response head may have that HTTP/2 forbids (RFC 9113 §8.2.2).
const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// An HTTP/2 connection's state beyond the HTTP/1 path's.
pub(crate) struct H2Session {
    conn: Connection,
    /// The streams being served. Boxed: they are sorted by priority and taken out as they
    /// end, which moves a pointer each rather than a stream's few hundred bytes (moving
    /// the streams themselves was a third of the instructions of a request at 100 streams).
    #[allow(clippy::vec_box)]
    streams: Vec<Box<Stream>>,
    /// Reads each stream's response head.
    parser: Box<ResponseParser>,
    /// Frames the protocol machine wrote while reading, moved to the output after.
    frames: Vec<u8>,
    /// A response head (or chunked body bytes) read from a stream's output.
    peeked: Vec<u8>,
    /// A response's field names, lowercased, back to back.
    names: Vec<u8>,
    /// A chunked body's bytes, unframed.
    unchunked: Vec<u8>,
    /// Streams the peer reset or a stream error ended.
    ended: Vec<u32>,
    /// Requests answered at once without the HTTP/1 path (header list too large).
    rejected: Vec<(u32, u16)>,
    /// When the connection last had no stream, for the idle timeout.
    idle_since: Instant,
    /// Since when a stream's output has waited on a window the peer keeps shut.
    stalled_since: Option<Instant>,
    /// Streams opened over the connection's life.
    opened: u64,
    /// The peer sent GOAWAY: no new streams, the connection ends with its last.
    peer_leaving: bool,
    /// When a graceful stop announced its GOAWAY.
    announced_at: Option<Instant>,
    /// When the connection began speaking HTTP/2.
    started: Instant,
    /// The most request body bytes dropped while an answer waits for the body's end.
    max_discard: u64,
}

/// One stream: one request of the HTTP/1 path, and its response on the way out.
struct Stream {
    id: u32,
    http: HttpConn,
    /// The request as HTTP/1.1: the head, then the body as it arrives.
    input: Input,
    /// What the HTTP/1 path queued and has not gone into frames yet.
    output: Output,
    deadline: Option<Instant>,
    /// All of the request body has arrived (END_STREAM).
    request_ended: bool,
    /// The body goes to the HTTP/1 path chunked (the request gave no length).
    chunked: bool,
    head_request: bool,
    /// Body bytes put in `input` that the protocol machine has not been told were taken:
    /// they hold the stream's and the connection's receive windows.
    held: usize,
    /// Body bytes dropped, unwanted by the HTTP/1 path (a static file's request).
    discarded: u64,
    /// The answer to a request whose body is unwanted no longer waits for the body's end.
    wait_over: bool,
    /// What the HTTP/1 path last answered; `Close`, `Linger` or `Abort` once it is done.
    next: Next,
    response: Response,
    priority: Priority,
}

/// Where a stream's response is.
enum Response {
    /// No final head has gone yet.
    Head,
    /// The head has gone as HEADERS; so much body follows.
    Body(Left),
    /// END_STREAM has gone, or the stream was reset.
    Done,
}

/// What is left of a response body.
enum Left {
    Length(u64),
    Chunked(Box<ChunkedDecoder>),
    /// Until the HTTP/1 path is done (a backend's body delimited by its close).
    UntilEnd,
}

impl Stream {
    fn path_done(&self) -> bool {
        matches!(self.next, Next::Close | Next::Linger | Next::Abort)
    }
}

/// The settings of the server's HTTP/2 connections.
pub(crate) fn server_settings(
    limits: &fastpath_http::Limits,
    max_requests: u64,
    max_concurrent_streams: u32,
) -> ServerSettings {
    let mut settings = ServerSettings {
        max_concurrent_streams,
        max_requests,
        ..ServerSettings::default()
    };
    settings.header_limits.max_header_list_size = limits.max_header_bytes;
    settings.header_limits.max_fields = limits.max_headers;
    settings.parsed_heads = Some(*limits);
    settings
}

impl H2Session {
    /// A session whose server preface goes into `output`.
    pub(crate) fn start(
        settings: ServerSettings,
        (limits, max_discard): (fastpath_http::Limits, u64),
        now: Instant,
        output: &mut Output,
        pool: &mut BufferPool,
    ) -> Box<H2Session> {
        let mut conn = Connection::new(settings);
        output.write_with(pool, |buf| conn.start(buf));
        Box::new(H2Session {
            conn,
            streams: Vec::new(),
            parser: Box::new(ResponseParser::new(limits)),
            frames: Vec::new(),
            peeked: Vec::new(),
            names: Vec::new(),
            unchunked: Vec::new(),
            ended: Vec::new(),
            rejected: Vec::new(),
            idle_since: now,
            stalled_since: None,
            opened: 0,
            peer_leaving: false,
            announced_at: None,
            started: now,
            max_discard,
        })
    }

    /// Reads the frames in the connection's input, opening streams and feeding their bodies.
    fn read(&mut self, io: &mut Io<'_>, origin: &HttpConn, parsers: &mut Parsers<'_>) -> bool {
        let parts = io.parts();
        let H2Session {
            conn,
            streams,
            frames,
            ended,
            rejected,
            opened,
            peer_leaving,
            ..
        } = self;
        let pool = parts.pool;
        let mut released = Vec::new();
        let used = conn.receive(parts.input.data(), frames, &mut |event| match event {
            Event::Request {
                stream,
                head,
                body,
                priority,
            } => {
                *opened += 1;
                let mut input = Input::default();
                let mut http = origin.for_stream();
                let head_request = match head {
                    Http1Head::Text(head) => {
                        // The head ends with its empty line: `Connection: close` goes before it.
                        let fields = head.strip_suffix(b"\r\n").unwrap_or(head);
                        input.append_with(pool, |buf| {
                            buf.extend_from_slice(fields);
                            buf.extend_from_slice(b"Connection: close\r\n\r\n");
                        });
                        head.starts_with(b"HEAD ")
                    }
                    Http1Head::Parsed(head) => {
                        // Its bytes go first, and the parser holds what parsing them found.
                        input.append_with(pool, |buf| buf.extend_from_slice(head.bytes()));
                        let mut parser = parsers.take();
                        parser.take_parsed(head);
                        http.parser = Some(parser);
                        head.method() == b"HEAD"
                    }
                };
                streams.push(Box::new(Stream {
                    id: stream,
                    http,
                    input,
                    output: Output::default(),
                    deadline: None,
                    request_ended: body == RequestBody::None,
                    chunked: body == RequestBody::Chunked,
                    head_request,
                    held: 0,
                    discarded: 0,
                    wait_over: false,
                    next: Next::Read,
                    response: Response::Head,
                    priority,
                }));
            }
            Event::Data {
                stream,
                data,
                end_stream,
            } => {
                let Some(s) = streams.iter_mut().find(|s| s.id == stream) else {
                    // The body of a request answered already: not wanted (RFC 9113 §8.1), so
                    // the client is asked to stop sending it, and what came is given back.
                    // Asked only once a byte of it comes: a client that merely left its
                    // stream open has nothing to be stopped.
                    released.push((stream, data.len(), true));
                    return;
                };
                if s.next == Next::Linger {
                    // The path answered without wanting the body: dropped as it comes.
                    released.push((stream, data.len(), false));
                    s.discarded += data.len() as u64;
                    s.request_ended |= end_stream;
                    return;
                }
                s.input.append_with(pool, |buf| {
                    if !s.chunked {
                        buf.extend_from_slice(data);
                        return;
                    }
                    if !data.is_empty() {
                        buf.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
                        buf.extend_from_slice(data);
                        buf.extend_from_slice(b"\r\n");
                    }
                    if end_stream {
                        buf.extend_from_slice(b"0\r\n\r\n");
                    }
                });
                s.held += data.len();
                s.request_ended |= end_stream;
            }
            Event::Reset { stream, .. } => ended.push(stream),
            Event::Rejected { stream, status } => rejected.push((stream, status)),
            Event::PriorityChanged { stream, priority } => {
                if let Some(s) = streams.iter_mut().find(|s| s.id == stream) {
                    s.priority = priority;
                }
            }
            Event::WindowOpened => {}
            Event::GoAway { .. } => *peer_leaving = true,
        });
        parts.input.consume(used);
        for (stream, n, stop) in released {
            conn.consumed(stream, n, frames);
            if stop {
                conn.reset(stream, ErrorCode::NoError, frames);
            }
        }
        parts.output.append_vec(pool, frames);
        used > 0
    }

    /// Answers the requests refused before the HTTP/1 path saw them.
    fn answer_rejected(&mut self, io: &mut Io<'_>) {
        let (output, pool) = io.output_and_pool();
        for (stream, status) in self.rejected.drain(..) {
            let conn = &mut self.conn;
            output.write_with(pool, |buf| {
                conn.send_headers(
                    stream,
                    status,
                    &[Field::new(b"content-length", b"0")],
                    true,
                    buf,
                )
            });
        }
    }

    /// Moves responses into frames, by urgency, while the output takes them; says whether
    /// anything went.
    fn send(&mut self, io: &mut Io<'_>, heads: &mut PreparedHeads) -> bool {
        // Lower urgency first; within one, the older stream first, a frame each in turn.
        self.streams.sort_by_key(|s| (s.priority.urgency, s.id));
        let mut sent_any = false;
        let mut stalled = false;
        loop {
            let mut sent = false;
            for at in 0..self.streams.len() {
                if io.output().pending() >= OUTPUT_HIGH_WATER {
                    return sent_any;
                }
                match self.send_one(at, io, heads) {
                    Sent::Frame => sent = true,
                    Sent::Stalled => stalled = true,
                    Sent::Nothing => {}
                }
            }
            sent_any |= sent;
            if !sent {
                break;
            }
        }
        if !stalled {
            self.stalled_since = None;
        } else if self.stalled_since.is_none() {
            self.stalled_since = Some(io.now());
        }
        sent_any
    }

    /// Makes the next frame (or the head's) of the stream at `at`.
    fn send_one(&mut self, at: usize, io: &mut Io<'_>, heads: &mut PreparedHeads) -> Sent {
        let max_discard = self.max_discard;
        let H2Session {
            conn,
            streams,
            parser,
            peeked,
            names,
            unchunked,
            ..
        } = self;
        let s = &mut streams[at];
        let (output, pool) = io.output_and_pool();
        if s.next == Next::Abort {
            if !matches!(s.response, Response::Done) {
                return Self::cut(conn, s, output, pool);
            }
            return Sent::Nothing;
        }
        match &mut s.response {
            Response::Done => {
                // The body's excess, if the path ever wrote past its length, goes nowhere.
                let left = s.output.pending();
                s.output.skip_front(left);
                Sent::Nothing
            }
            Response::Head if s.next == Next::Linger && !s.request_ended && !s.wait_over => {
                // The answer to a request whose body the path does not want waits for the
                // body's end, which is dropped meanwhile, as an HTTP/1 server reads and drops
                // it: a malformed end (trailers) is then still a stream error, as h2spec
                // wants, rather than a reset after a whole answer. Up to `max_discard_body`
                // bytes, or the header timeout.
                if s.discarded > max_discard {
                    s.wait_over = true;
                }
                Sent::Nothing
            }
            Response::Head => {
                let mut limit = HEAD_PEEK;
                loop {
                    peeked.clear();
                    let Ok(got) = s.output.peek_front(limit, peeked) else {
                        return Self::broken(conn, s, output, pool);
                    };
                    // A head prepared before is known by its bytes, which were parsed when
                    // it was first seen: it is not parsed again.
                    let prepared = heads.head_end.find(peeked).and_then(|end| {
                        let head = &peeked[..end + 4];
                        let key = heads.key(head)?;
                        let at = heads.find(head, &key, s.head_request)?;
                        Some((at, key.date_value, head.len()))
                    });
                    if let Some((at, date_value, head_len)) = prepared {
                        let (block, date, framing) = heads.block_and_date(at, &peeked[date_value]);
                        let (end, left) = match framing {
                            ResponseFraming::Length(n) if n > 0 => (false, Some(Left::Length(n))),
                            ResponseFraming::UntilClose => (false, Some(Left::UntilEnd)),
                            _ => (true, None),
                        };
                        output.write_with(pool, |buf| {
                            conn.send_prepared_headers(s.id, block, date, end, buf)
                        });
                        s.output.skip_front(head_len as u64);
                        s.response = match left {
                            Some(left) => Response::Body(left),
                            None => Response::Done,
                        };
                        return Sent::Frame;
                    }
                    parser.reset();
                    let head = match parser.parse(peeked, s.head_request) {
                        Ok(Some(head)) => head,
                        Ok(None) if got == limit => {
                            limit *= 2;
                            continue;
                        }
                        Ok(None) => {
                            if s.path_done() && s.output.pending() == got as u64 {
                                // The path ended without a whole head: nothing to answer with.
                                return Self::cut(conn, s, output, pool);
                            }
                            return Sent::Nothing;
                        }
                        Err(error) => {
                            tracing::warn!(
                                "stream {}: the response head cannot be read: {error}",
                                s.id
                            );
                            return Self::cut(conn, s, output, pool);
                        }
                    };
                    let interim = (100..200).contains(&head.status) && head.status != 101;
                    let head_len = head.head_len;
                    let framing = head.framing;
                    let (end, left) = match framing {
                        _ if interim => (false, None),
                        ResponseFraming::None | ResponseFraming::Length(0) => (true, None),
                        ResponseFraming::Length(n) => (false, Some(Left::Length(n))),
                        ResponseFraming::Chunked => {
                            (false, Some(Left::Chunked(Box::new(ChunkedDecoder::new()))))
                        }
                        ResponseFraming::UntilClose => (false, Some(Left::UntilEnd)),
                    };
                    names.clear();
                    let mut spans = Vec::with_capacity(head.header_count());
                    for (name, value) in head.headers() {
                        if CONNECTION_SPECIFIC
                            .iter()
                            .any(|special| name.eq_ignore_ascii_case(special))
                        {
                            continue;
                        }
                        let start = names.len();
                        names.extend(name.bytes().map(|b| b.to_ascii_lowercase()));
                        spans.push((start..names.len(), value));
                    }
                    let fields: Vec<Field<'_>> = spans
                        .iter()
                        .map(|(name, value)| Field::new(&names[name.clone()], value))
                        .collect();
                    let status = head.status;
                    // Heads that may come again are noted, and prepared the second time.
                    if !interim && framing != ResponseFraming::Chunked {
                        let head = &peeked[..head_len];
                        if let Some(key) = heads.key(head) {
                            let seen = SeenHead {
                                head_request: s.head_request,
                                status,
                                framing,
                            };
                            heads.seen(head, &key, seen, &fields);
                        }
                    }
                    output.write_with(pool, |buf| {
                        conn.send_headers(s.id, status, &fields, end, buf)
                    });
                    s.output.skip_front(head_len as u64);
                    if !interim {
                        s.response = match left {
                            Some(left) => Response::Body(left),
                            None => Response::Done,
                        };
                    }
                    return Sent::Frame;
                }
            }
            Response::Body(left) => {
                let window = conn.send_window(s.id).min(conn.max_frame_size());
                let pending = s.output.pending();
                match left {
                    Left::Length(remaining) => {
                        let n = (window as u64).min(*remaining).min(pending);
                        if n == 0 {
                            return if pending > 0 {
                                Sent::Stalled
                            } else if s.path_done() {
                                // Short of its length: the response can never pass for whole.
                                Self::cut(conn, s, output, pool)
                            } else {
                                Sent::Nothing
                            };
                        }
                        let end = *remaining == n;
                        if s.output.front_is_file() && n <= READ_FILE_FRAMES_UP_TO {
                            if Self::data_read_from_file(
                                conn,
                                s.id,
                                &mut s.output,
                                n,
                                end,
                                output,
                                pool,
                                peeked,
                            )
                            .is_err()
                            {
                                return Self::broken(conn, s, output, pool);
                            }
                        } else {
                            output
                                .write_with(pool, |buf| conn.send_data(s.id, n as usize, end, buf));
                            s.output.move_front(n, output, pool);
                        }
                        *remaining -= n;
                        if end {
                            s.response = Response::Done;
                        }
                        Sent::Frame
                    }
                    Left::UntilEnd => {
                        let n = (window as u64).min(pending);
                        if n == 0 {
                            return if pending > 0 {
                                Sent::Stalled
                            } else if s.path_done() {
                                output.write_with(pool, |buf| conn.send_data(s.id, 0, true, buf));
                                s.response = Response::Done;
                                Sent::Frame
                            } else {
                                Sent::Nothing
                            };
                        }
                        output.write_with(pool, |buf| conn.send_data(s.id, n as usize, false, buf));
                        s.output.move_front(n, output, pool);
                        Sent::Frame
                    }
                    Left::Chunked(decoder) => {
                        if window == 0 {
                            return if pending > 0 {
                                Sent::Stalled
                            } else {
                                Sent::Nothing
                            };
                        }
                        // At most a window's worth of framed bytes: what they unframe to is
                        // never more, so it all goes in this frame.
                        peeked.clear();
                        if s.output.peek_front(window, peeked).is_err() {
                            return Self::broken(conn, s, output, pool);
                        }
                        unchunked.clear();
                        let (used, done) =
                            match decoder.feed(peeked, |data| unchunked.extend_from_slice(data)) {
                                Ok(fed) => fed,
                                Err(error) => {
                                    tracing::warn!("stream {}: bad chunked body: {error}", s.id);
                                    return Self::cut(conn, s, output, pool);
                                }
                            };
                        s.output.skip_front(used as u64);
                        if unchunked.is_empty() && !done {
                            if s.path_done() && s.output.is_empty() {
                                return Self::cut(conn, s, output, pool);
                            }
                            return Sent::Nothing;
                        }
                        output.write_with(pool, |buf| {
                            conn.send_data(s.id, unchunked.len(), done, buf);
                            buf.extend_from_slice(unchunked);
                        });
                        if done {
                            s.response = Response::Done;
                        }
                        Sent::Frame
                    }
                }
            }
        }
    }

    /// One DATA frame of `n` bytes whose front is a file range, read into the connection's
    /// buffer behind the frame's header. A file is read, not left to sendfile, because each
    /// frame would otherwise cost two system calls (the header's sendmsg and the range's
    /// sendfile, frame after frame): read, a whole window of frames leaves in one sendmsg.
    /// Nothing is written when the file ends early, so the stream can be reset with the
    /// connection's framing and windows intact.
    #[allow(clippy::too_many_arguments)]
    fn data_read_from_file(
        conn: &mut Connection,
        id: u32,
        body: &mut Output,
        n: u64,
        end: bool,
        output: &mut Output,
        pool: &mut BufferPool,
        header: &mut Vec<u8>,
    ) -> Result<(), FlushError> {
        output.write_with(pool, |buf| {
            // The header's place is kept and the data read behind it; the header itself is
            // written once the read succeeded, as the frame is then certain.
            let at = buf.len();
            buf.resize(at + FRAME_HEADER_LEN, 0);
            if let Err(error) = body.peek_front(n as usize, buf) {
                buf.truncate(at);
                return Err(error);
            }
            header.clear();
            conn.send_data(id, n as usize, end, header);
            if header.len() < FRAME_HEADER_LEN {
                // The stream was closed meanwhile: nothing of it may go out.
                buf.truncate(at);
            } else {
                buf[at..at + FRAME_HEADER_LEN].copy_from_slice(&header[..FRAME_HEADER_LEN]);
                // What ending the stream wrote after the header follows the data.
                buf.extend_from_slice(&header[FRAME_HEADER_LEN..]);
            }
            Ok(())
        })?;
        body.skip_front(n);
        Ok(())
    }

    /// Resets a stream whose response cannot go on (its spilled body's file failed).
    fn broken(
        conn: &mut Connection,
        s: &mut Stream,
        output: &mut Output,
        pool: &mut BufferPool,
    ) -> Sent {
        tracing::warn!(
            "stream {}: its response could not be read back; reset",
            s.id
        );
        Self::cut(conn, s, output, pool)
    }

    /// Resets a stream whose response cannot be whole, and sends nothing more of it.
    fn cut(
        conn: &mut Connection,
        s: &mut Stream,
        output: &mut Output,
        pool: &mut BufferPool,
    ) -> Sent {
        output.write_with(pool, |buf| conn.reset(s.id, ErrorCode::InternalError, buf));
        s.response = Response::Done;
        Sent::Frame
    }

    /// The earliest deadline among the streams, the idle timeout, a stalled window and the
    /// end of an announced shutdown's wait.
    fn deadline(&self, idle: std::time::Duration, stall: std::time::Duration) -> Option<Instant> {
        let streams = self.streams.iter().filter_map(|s| s.deadline).min();
        let idle = self.streams.is_empty().then_some(self.idle_since + idle);
        let stalled = self.stalled_since.map(|since| since + stall);
        let announced = self
            .announced_at
            .filter(|_| !self.conn.is_going_away())
            .map(|at| at + GOAWAY_ACK_WAIT);
        [streams, idle, stalled, announced]
            .into_iter()
            .flatten()
            .min()
    }
}

/// Response heads seen more than once, kept ready to send, per worker. A static file's head
/// is the same from one request to the next but for its date: its HPACK block, made once
/// without the dynamic table (so any connection can send it), then costs a copy, where
/// encoding it was a quarter of a request's instructions at 100 streams, and the head is
/// known by comparing its bytes, where parsing it again was a fifth. A head is prepared
/// the second time it is seen, so that heads seen once (a backend's, with its cookies and
/// dates) cost no more than a look.
pub(crate) struct PreparedHeads {
    entries: Vec<PreparedHead>,
    /// The hashes of heads seen once lately.
    seen: [u64; PREPARED_HEADS],
    /// Where the next entry and the next hash go, round the rings.
    next_entry: usize,
    next_seen: usize,
    /// The last date sent with a prepared head, and its field encoded: the same for a
    /// second's responses.
    date: Vec<u8>,
    date_block: Vec<u8>,
    /// Searchers made once: making one costs more than a search of a head.
    head_end: memchr::memmem::Finder<'static>,
    date_line: memchr::memmem::Finder<'static>,
}

/// Heads kept ready, and hashes of heads seen once: a worker serves a few hot files at a
/// time, and each entry is a head and its block (about 400 bytes).
const PREPARED_HEADS: usize = 64;

/// How the `Date` line of a head starts.
const DATE_LINE: &[u8] = b"\r\nDate: ";

struct PreparedHead {
    /// The HTTP/1 head without its `Date` line.
    head: Vec<u8>,
    hash: u64,
    /// What was read from the head when it was parsed.
    parsed: SeenHead,
    /// `:status` and the fields but the date, encoded without the dynamic table.
    block: Vec<u8>,
}

/// What parsing a head found that sending it again needs. The framing depends on the
/// request too (a response to HEAD has no body), which is part of the head's identity.
#[derive(Clone, Copy)]
struct SeenHead {
    head_request: bool,
    status: u16,
    framing: ResponseFraming,
}

/// Where a head's `Date` line is, and its hash without it.
struct HeadKey {
    date_line: std::ops::Range<usize>,
    date_value: std::ops::Range<usize>,
    hash: u64,
}

impl Default for PreparedHeads {
    fn default() -> Self {
        PreparedHeads {
            entries: Vec::new(),
            seen: [0; PREPARED_HEADS],
            next_entry: 0,
            next_seen: 0,
            date: Vec::new(),
            date_block: Vec::new(),
            head_end: memchr::memmem::Finder::new(b"\r\n\r\n"),
            date_line: memchr::memmem::Finder::new(DATE_LINE),
        }
    }
}

impl PreparedHeads {
    /// The key of an HTTP/1 head as the server's writers make it (`Date: ` after the first
    /// lines); `None` for one without such a line, which is then never prepared.
    fn key(&self, head: &[u8]) -> Option<HeadKey> {
        let at = self.date_line.find(head)? + 2;
        let value_start = at + DATE_LINE.len() - 2;
        let value_end = value_start + memchr::memchr(b'\r', &head[value_start..])?;
        let date_line = at..value_end + 2;
        let hash = hash_words(
            hash_words(HASH_SEED, &head[..date_line.start]),
            &head[date_line.end..],
        );
        Some(HeadKey {
            date_line,
            date_value: value_start..value_end,
            hash,
        })
    }

    /// Which entry holds `head` prepared for a response to such a request, if one does.
    fn find(&self, head: &[u8], key: &HeadKey, head_request: bool) -> Option<usize> {
        let (before, after) = (&head[..key.date_line.start], &head[key.date_line.end..]);
        self.entries.iter().position(|e| {
            e.hash == key.hash
                && e.parsed.head_request == head_request
                && e.head.len() == before.len() + after.len()
                && e.head[..before.len()] == *before
                && e.head[before.len()..] == *after
        })
    }

    /// The prepared block of the entry `at`, the date field's block for `date` and the
    /// response's framing.
    fn block_and_date(&mut self, at: usize, date: &[u8]) -> (&[u8], &[u8], ResponseFraming) {
        if self.date != date {
            self.date.clear();
            self.date.extend_from_slice(date);
            self.date_block.clear();
            fastpath_http::h2::encode_without_table(
                [Field::new(b"date", date)],
                &mut self.date_block,
            );
        }
        let entry = &self.entries[at];
        (&entry.block, &self.date_block, entry.parsed.framing)
    }

    /// Notes a head sent without a prepared block: prepared if it was seen before.
    fn seen(&mut self, head: &[u8], key: &HeadKey, parsed: SeenHead, fields: &[Field<'_>]) {
        let Some(at) = self.seen.iter().position(|&h| h == key.hash) else {
            self.seen[self.next_seen] = key.hash;
            self.next_seen = (self.next_seen + 1) % PREPARED_HEADS;
            return;
        };
        self.seen[at] = 0;
        let status = parsed.status;
        let digits = [
            b'0' + (status / 100 % 10) as u8,
            b'0' + (status / 10 % 10) as u8,
            b'0' + (status % 10) as u8,
        ];
        let mut block = Vec::new();
        fastpath_http::h2::encode_without_table(
            std::iter::once(Field::new(b":status", &digits))
                .chain(fields.iter().copied().filter(|f| f.name != b"date")),
            &mut block,
        );
        let mut kept = Vec::with_capacity(head.len() - key.date_line.len());
        kept.extend_from_slice(&head[..key.date_line.start]);
        kept.extend_from_slice(&head[key.date_line.end..]);
        let entry = PreparedHead {
            head: kept,
            hash: key.hash,
            parsed,
            block,
        };
        if self.entries.len() < PREPARED_HEADS {
            self.entries.push(entry);
        } else {
            self.entries[self.next_entry] = entry;
            self.next_entry = (self.next_entry + 1) % PREPARED_HEADS;
        }
    }
}

const HASH_SEED: u64 = 0xcbf2_9ce4_8422_2325;

/// A head's hash, eight bytes a step (the multiplier is FxHash's): a few hundred bytes
/// in a few dozen steps. Collisions cost only a comparison, since entries are compared
/// whole.
fn hash_words(mut hash: u64, bytes: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let word = u64::from_le_bytes(word.try_into().expect("eight bytes"));
        hash = (hash.rotate_left(5) ^ word).wrapping_mul(K);
    }
    for &b in words.remainder() {
        hash = (hash.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
    }
    hash
}

/// The worker's request parsers, lent to streams whose heads come parsed.
struct Parsers<'a> {
    /// Boxed as the handler's pool holds them.
    #[allow(clippy::vec_box)]
    pool: &'a mut Vec<Box<Parser>>,
    limits: Limits,
}

impl Parsers<'_> {
    fn take(&mut self) -> Box<Parser> {
        self.pool
            .pop()
            .unwrap_or_else(|| Box::new(Parser::new(self.limits)))
    }
}

/// What one turn of a stream at the output did.
enum Sent {
    Frame,
    /// It has bytes to send and no window.
    Stalled,
    Nothing,
}

impl HttpHandler {
    /// Serves an HTTP/2 connection: reads its frames, runs its streams through the HTTP/1
    /// path, sends their responses; `timed_out` when its deadline passed.
    pub(super) fn serve_h2(
        &mut self,
        conn: &mut HttpConn,
        io: &mut Io<'_>,
        timed_out: bool,
    ) -> Next {
        // Taken out for the call, so that the connection's other parts are the streams'
        // pattern meanwhile.
        let Phase::H2(mut session) = std::mem::replace(&mut conn.phase, Phase::Head) else {
            unreachable!("only an HTTP/2 connection is served here");
        };
        let next = self.serve_session(conn, &mut session, io, timed_out);
        conn.phase = Phase::H2(session);
        next
    }

    fn serve_session(
        &mut self,
        conn: &HttpConn,
        session: &mut H2Session,
        io: &mut Io<'_>,
        timed_out: bool,
    ) -> Next {
        let now = io.now();
        if timed_out {
            if session.streams.is_empty()
                && now >= session.idle_since + self.settings.keepalive_timeout
            {
                let (output, pool) = io.output_and_pool();
                output.write_with(pool, |buf| session.conn.go_away(buf));
                return Next::Linger;
            }
            if session
                .stalled_since
                .is_some_and(|since| now >= since + self.settings.send_timeout)
            {
                tracing::debug!("{}: HTTP/2 output held at a shut window; closed", conn.peer);
                return Next::Abort;
            }
            for at in 0..session.streams.len() {
                let s = &mut session.streams[at];
                if s.deadline.is_some_and(|at| at <= now) {
                    if s.path_done() {
                        // An answer that waited for an unwanted body's end waits no more.
                        s.wait_over = true;
                        s.deadline = None;
                    } else {
                        self.run_stream(&mut session.conn, &mut session.frames, s, io, true);
                    }
                }
            }
        }
        // A connection that has not sent its first request yet is left a moment for it, as
        // an HTTP/1 one is (`DRAIN_IDLE_WAIT`): a client told GOAWAY before it could send a
        // request may fail it rather than open another connection.
        let first_awaited = session.opened == 0 && now < session.started + DRAIN_IDLE_WAIT;
        if io.draining() && !first_awaited {
            // Announced first, so that requests already on their way are served; the last
            // stream is named once the client has seen it, or after a moment at most.
            let (output, pool) = io.output_and_pool();
            let announced_at = *session.announced_at.get_or_insert(now);
            if now >= announced_at + GOAWAY_ACK_WAIT {
                output.write_with(pool, |buf| session.conn.go_away(buf));
            } else {
                output.write_with(pool, |buf| session.conn.announce_go_away(buf));
            }
        }
        // Round after round while one gets something done: input left unread here would wait
        // for the next bytes to arrive. Each round reads input or moves output, both bounded.
        loop {
            let mut progress = false;
            if !session.conn.is_closed()
                && io.output().pending() < OUTPUT_HIGH_WATER
                && !io.input().is_empty()
            {
                let mut parsers = Parsers {
                    pool: &mut self.parsers,
                    limits: self.settings.limits,
                };
                progress |= session.read(io, conn, &mut parsers);
            }
            session.answer_rejected(io);
            for id in std::mem::take(&mut session.ended) {
                if let Some(at) = session.streams.iter().position(|s| s.id == id) {
                    let s = session.streams.remove(at);
                    self.close_stream(s, io, CloseReason::PeerGone);
                }
            }
            let backends_open = self.backends_open();
            for at in 0..session.streams.len() {
                let s = &mut session.streams[at];
                let runnable = !s.path_done() && (s.next != Next::Drain || s.output.is_empty());
                if runnable {
                    progress |=
                        self.run_stream(&mut session.conn, &mut session.frames, s, io, false);
                }
            }
            if self.backends_open() < backends_open {
                // A backend connection was let go of: the streams waiting for one try now
                // rather than at their next look.
                for s in &mut session.streams {
                    if let Phase::AwaitFill { again, .. } = &mut s.http.phase {
                        *again = now;
                    }
                }
            }
            progress |= session.send(io, &mut self.h2_heads);
            // Streams whose response has gone and whose path is done end here.
            let mut at = 0;
            while at < session.streams.len() {
                let s = &session.streams[at];
                if matches!(s.response, Response::Done) && s.path_done() {
                    let s = session.streams.remove(at);
                    self.close_stream(s, io, CloseReason::Done);
                    progress = true;
                } else {
                    at += 1;
                }
            }
            if !session.frames.is_empty() {
                let (output, pool) = io.output_and_pool();
                output.append_vec(pool, &mut session.frames);
            }
            if session.streams.is_empty() && progress {
                session.idle_since = now;
            }
            if !progress {
                break;
            }
        }
        // Closing lingers: frames the client sent before it saw the GOAWAY must not make
        // the kernel reset the connection, and what was sent with it, away.
        if session.conn.is_closed() {
            return Next::Linger;
        }
        let leaving = session.conn.is_going_away() || session.peer_leaving;
        if leaving && session.streams.is_empty() {
            return Next::Linger;
        }
        if io.output().pending() >= OUTPUT_HIGH_WATER {
            return Next::Drain;
        }
        if io.eof() && session.streams.is_empty() {
            return Next::Linger;
        }
        let mut deadline =
            session.deadline(self.settings.keepalive_timeout, self.settings.send_timeout);
        if io.draining() && first_awaited {
            let until = session.started + DRAIN_IDLE_WAIT;
            deadline = Some(deadline.map_or(until, |at| at.min(until)));
        }
        io.set_deadline(deadline);
        Next::Read
    }

    /// The worker's open backend connections, all backends together.
    fn backends_open(&self) -> usize {
        self.backends
            .states
            .iter()
            .map(|state| state.open_connections())
            .sum()
    }

    /// Runs one stream's request on the HTTP/1 path; says whether anything changed.
    fn run_stream(
        &mut self,
        conn: &mut Connection,
        frames: &mut Vec<u8>,
        s: &mut Stream,
        io: &mut Io<'_>,
        timed_out: bool,
    ) -> bool {
        let before = (s.input.len(), s.output.sent() + s.output.pending(), s.next);
        let mut next = {
            let mut lent = io.lend(
                &mut s.input,
                &mut s.output,
                &mut s.deadline,
                s.request_ended,
            );
            if timed_out {
                fastpath_drivers::Handler::on_timeout(self, &mut s.http, &mut lent)
            } else {
                self.process(&mut s.http, &mut lent)
            }
        };
        if io.take_join() {
            tracing::error!("an HTTP/2 stream cannot be joined with a backend; reset");
            next = Next::Abort;
        }
        s.next = next;
        if next == Next::Linger && !s.request_ended {
            // The body is not wanted: what came of it goes, and the answer waits a while for
            // the rest (see `send_one`).
            let unread = s.input.len();
            s.input.consume(unread);
            s.deadline = Some(io.now() + self.settings.header_timeout);
        }
        // Body bytes the path took give their windows back.
        let unread = s.input.len();
        if s.held > unread {
            conn.consumed(s.id, s.held - unread, frames);
            s.held = unread;
        }
        s.input.release_if_empty(io.pool());
        before != (s.input.len(), s.output.sent() + s.output.pending(), s.next)
    }

    /// Ends a stream's request on the HTTP/1 path: logged (cut short if it was), its backend
    /// connection let go of.
    fn close_stream(&mut self, mut s: Box<Stream>, io: &mut Io<'_>, reason: CloseReason) {
        let sent = s.output.sent();
        fastpath_drivers::Handler::on_closing(self, &mut s.http, sent);
        if let Some(link) = s.http.backend_link() {
            io.release(link, false);
        }
        s.output.clear(io.pool());
        s.input.release_if_empty(io.pool());
        fastpath_drivers::Handler::on_close(self, s.http, reason, &mut io.worker());
    }

    /// Tells each stream of a closing HTTP/2 connection how much of its output left.
    pub(super) fn h2_closing(&mut self, session: &mut H2Session) {
        for s in &mut session.streams {
            let sent = s.output.sent();
            fastpath_drivers::Handler::on_closing(self, &mut s.http, sent);
        }
    }

    /// Ends every stream of a closed HTTP/2 connection.
    pub(super) fn h2_closed(
        &mut self,
        session: Box<H2Session>,
        reason: CloseReason,
        worker: &mut fastpath_drivers::Worker<'_>,
    ) {
        for s in session.streams {
            fastpath_drivers::Handler::on_close(self, s.http, reason, worker);
        }
    }
}
