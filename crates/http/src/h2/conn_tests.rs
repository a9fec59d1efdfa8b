use super::*;
use crate::h2::{
    write_ping, Assembled as BlockPart, Decoder, Encoder, HeaderBlockAssembler as Joiner,
    HeaderBlockLimits as JoinLimits,
};

/// A request's pseudo-header fields.
const GET: [(&str, &str); 4] = [
    (":method", "GET"),
    (":scheme", "https"),
    (":authority", "a.test"),
    (":path", "/"),
];

const POST: [(&str, &str); 4] = [
    (":method", "POST"),
    (":scheme", "https"),
    (":authority", "a.test"),
    (":path", "/up"),
];

fn with<'a>(base: &[(&'a str, &'a str)], extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    base.iter().chain(extra).copied().collect()
}

/// Appends one frame of any type, as sent.
fn frame(frame_type: u8, flags: u8, stream_id: u32, payload: &[u8], out: &mut Vec<u8>) {
    FrameHeader {
        length: payload.len() as u32,
        frame_type,
        flags,
        stream_id,
    }
    .write(out);
    out.extend_from_slice(payload);
}

/// A client: its HPACK encoder and the bytes it has sent.
struct Client {
    encoder: Encoder,
    wire: Vec<u8>,
}

impl Client {
    /// The preface and an empty SETTINGS, as a client starts.
    fn new() -> Client {
        let mut c = Client::bare();
        c.wire.extend_from_slice(PREFACE);
        c.settings(&[]);
        c
    }

    /// Nothing sent yet.
    fn bare() -> Client {
        Client {
            encoder: Encoder::new(),
            wire: Vec::new(),
        }
    }

    fn block(&mut self, fields: &[(&str, &str)]) -> Vec<u8> {
        let mut block = Vec::new();
        self.encoder.encode(
            fields
                .iter()
                .map(|(n, v)| Field::new(n.as_bytes(), v.as_bytes())),
            &mut block,
        );
        block
    }

    fn headers(&mut self, id: u32, fields: &[(&str, &str)], end_stream: bool) -> &mut Self {
        let block = self.block(fields);
        write_headers(id, &block, end_stream, 16_384, &mut self.wire);
        self
    }

    /// HEADERS with the RFC 7540 priority fields, naming `depends_on`.
    fn headers_with_priority(
        &mut self,
        id: u32,
        depends_on: u32,
        fields: &[(&str, &str)],
        end_stream: bool,
    ) -> &mut Self {
        let mut payload = depends_on.to_be_bytes().to_vec();
        payload.push(15); // weight
        payload.extend(self.block(fields));
        let end = if end_stream { flags::END_STREAM } else { 0 };
        frame(
            1,
            flags::PRIORITY | flags::END_HEADERS | end,
            id,
            &payload,
            &mut self.wire,
        );
        self
    }

    fn get(&mut self, id: u32) -> &mut Self {
        self.headers(id, &GET, true)
    }

    /// A POST whose body follows, with a content-length if given.
    fn post(&mut self, id: u32, content_length: Option<usize>) -> &mut Self {
        let length = content_length.map(|n| n.to_string());
        let mut fields = POST.to_vec();
        if let Some(n) = &length {
            fields.push(("content-length", n));
        }
        self.headers(id, &fields, false)
    }

    fn data(&mut self, id: u32, data: &[u8], end_stream: bool) -> &mut Self {
        write_data_header(id, data.len(), end_stream, &mut self.wire);
        self.wire.extend_from_slice(data);
        self
    }

    fn padded_data(&mut self, id: u32, data: &[u8], pad: u8, end_stream: bool) -> &mut Self {
        let mut payload = vec![pad];
        payload.extend_from_slice(data);
        payload.extend(std::iter::repeat_n(0, usize::from(pad)));
        let end = if end_stream { flags::END_STREAM } else { 0 };
        frame(0, flags::PADDED | end, id, &payload, &mut self.wire);
        self
    }

    fn settings(&mut self, settings: &[Setting]) -> &mut Self {
        write_settings(settings, &mut self.wire);
        self
    }

    fn settings_ack(&mut self) -> &mut Self {
        write_settings_ack(&mut self.wire);
        self
    }

    fn ping(&mut self, data: [u8; 8]) -> &mut Self {
        write_ping(data, &mut self.wire);
        self
    }

    fn ping_ack(&mut self, data: [u8; 8]) -> &mut Self {
        write_ping_ack(data, &mut self.wire);
        self
    }

    fn rst(&mut self, id: u32, code: ErrorCode) -> &mut Self {
        write_rst_stream(id, code, &mut self.wire);
        self
    }

    fn window_update(&mut self, id: u32, increment: u32) -> &mut Self {
        // Written by hand: the writer refuses an increment of 0.
        frame(8, 0, id, &increment.to_be_bytes(), &mut self.wire);
        self
    }

    fn priority(&mut self, id: u32, depends_on: u32) -> &mut Self {
        let mut payload = depends_on.to_be_bytes().to_vec();
        payload.push(15);
        frame(2, 0, id, &payload, &mut self.wire);
        self
    }

    fn priority_update(&mut self, id: u32, value: &str) -> &mut Self {
        let mut payload = id.to_be_bytes().to_vec();
        payload.extend_from_slice(value.as_bytes());
        frame(0x10, 0, 0, &payload, &mut self.wire);
        self
    }

    fn goaway(&mut self, last: u32, code: ErrorCode) -> &mut Self {
        write_goaway(last, code, b"bye", &mut self.wire);
        self
    }

    fn raw(&mut self, bytes: &[u8]) -> &mut Self {
        self.wire.extend_from_slice(bytes);
        self
    }

    fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.wire)
    }
}

/// An event, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ev {
    Request {
        stream: u32,
        head: String,
        body: RequestBody,
        priority: Priority,
    },
    Data {
        stream: u32,
        data: Vec<u8>,
        end_stream: bool,
    },
    Reset {
        stream: u32,
        code: ErrorCode,
    },
    Rejected {
        stream: u32,
        status: u16,
    },
    PriorityChanged {
        stream: u32,
        priority: Priority,
    },
    WindowOpened,
    GoAway {
        last_stream_id: u32,
        code: ErrorCode,
    },
}

fn own(event: Event<'_>) -> Ev {
    match event {
        Event::Request {
            stream,
            head,
            body,
            priority,
        } => Ev::Request {
            stream,
            head: match head {
                Http1Head::Text(text) => String::from_utf8(text.to_vec()).expect("an ASCII head"),
                Http1Head::Parsed(parsed) => panic!("a parsed head: {parsed:?}"),
            },
            body,
            priority,
        },
        Event::Data {
            stream,
            data,
            end_stream,
        } => Ev::Data {
            stream,
            data: data.to_vec(),
            end_stream,
        },
        Event::Reset { stream, code } => Ev::Reset { stream, code },
        Event::Rejected { stream, status } => Ev::Rejected { stream, status },
        Event::PriorityChanged { stream, priority } => Ev::PriorityChanged { stream, priority },
        Event::WindowOpened => Ev::WindowOpened,
        Event::GoAway {
            last_stream_id,
            code,
        } => Ev::GoAway {
            last_stream_id,
            code,
        },
    }
}

/// A frame the server wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sent {
    Settings(Vec<Setting>),
    SettingsAck,
    PingAck([u8; 8]),
    Ping([u8; 8]),
    Rst(u32, ErrorCode),
    WindowUpdate(u32, u32),
    GoAway(u32, ErrorCode),
    /// A whole response block: stream, END_STREAM, fields.
    Headers(u32, bool, Vec<(String, String)>),
    /// Stream, payload length, END_STREAM.
    Data(u32, usize, bool),
}

/// Response heads are the server's own: bounded only for the test's sake.
const RESPONSE_LIMITS: DecodeLimits = DecodeLimits {
    max_header_list_size: 1 << 20,
    max_fields: 1000,
};

/// The server under test, with what it wrote read back as a client would.
struct Server {
    conn: Connection,
    out: Vec<u8>,
    read: usize,
    input: Vec<u8>,
    events: Vec<Ev>,
    decoder: Decoder,
    joiner: Joiner,
}

impl Server {
    fn new(settings: ServerSettings) -> Server {
        let mut s = Server {
            conn: Connection::new(settings),
            out: Vec::new(),
            read: 0,
            input: Vec::new(),
            events: Vec::new(),
            decoder: Decoder::new(4096),
            joiner: Joiner::new(JoinLimits {
                max_block_size: 1 << 20,
                max_continuations: 1000,
            }),
        };
        s.conn.start(&mut s.out);
        s
    }

    /// Started, with the client's preface and SETTINGS read and its answer
    /// taken.
    fn ready(settings: ServerSettings) -> (Server, Client) {
        let mut s = Server::new(settings);
        let mut c = Client::new();
        s.feed(&c.take());
        s.sent();
        (s, c)
    }

    /// Feeds bytes as they arrive, calling `receive` again while it makes
    /// progress (it stops at the high-water mark); returns the bytes still
    /// unread.
    fn feed(&mut self, bytes: &[u8]) -> usize {
        self.input.extend_from_slice(bytes);
        loop {
            let events = &mut self.events;
            let used = self
                .conn
                .receive(&self.input, &mut self.out, &mut |e| events.push(own(e)));
            assert!(used <= self.input.len());
            self.input.drain(..used);
            if used == 0 {
                return self.input.len();
            }
        }
    }

    fn events(&mut self) -> Vec<Ev> {
        std::mem::take(&mut self.events)
    }

    /// The frames written since the last call.
    fn sent(&mut self) -> Vec<Sent> {
        let reader = FrameReader::new(MAX_FRAME_SIZE_LIMIT);
        let mut sent = Vec::new();
        while let Some((frame, used)) = reader.parse(&self.out[self.read..]).expect("a frame") {
            let code = |c| ErrorCode::from_u32(c).expect("a known code");
            match self.joiner.push(&frame).expect("a field block") {
                BlockPart::Pending => {}
                BlockPart::Complete(b) => {
                    let mut fields = Vec::new();
                    self.decoder
                        .decode(b.block, &RESPONSE_LIMITS, |n, v, _| {
                            fields.push((
                                String::from_utf8_lossy(n).into_owned(),
                                String::from_utf8_lossy(v).into_owned(),
                            ))
                        })
                        .expect("a response block");
                    sent.push(Sent::Headers(b.stream_id, b.end_stream, fields));
                }
                BlockPart::Other => sent.push(match frame {
                    Frame::Settings { ack: true, .. } => Sent::SettingsAck,
                    Frame::Settings { settings, .. } => Sent::Settings(settings.iter().collect()),
                    Frame::Ping { ack: true, data } => Sent::PingAck(data),
                    Frame::Ping { ack: false, data } => Sent::Ping(data),
                    Frame::RstStream {
                        stream_id,
                        error_code,
                    } => Sent::Rst(stream_id, code(error_code)),
                    Frame::WindowUpdate {
                        stream_id,
                        increment,
                    } => Sent::WindowUpdate(stream_id, increment),
                    Frame::GoAway {
                        last_stream_id,
                        error_code,
                        ..
                    } => Sent::GoAway(last_stream_id, code(error_code)),
                    Frame::Data {
                        stream_id,
                        data,
                        end_stream,
                        ..
                    } => Sent::Data(stream_id, data.len(), end_stream),
                    other => panic!("the server sent {other:?}"),
                }),
            }
            self.read += used;
        }
        sent
    }

    /// A whole response with a body of `len` bytes.
    fn respond(&mut self, id: u32, len: usize) {
        self.conn
            .send_headers(id, 200, &[], len == 0, &mut self.out);
        if len > 0 {
            assert!(self.conn.send_window(id) >= len);
            self.conn.send_data(id, len, true, &mut self.out);
            self.out.extend(std::iter::repeat_n(b'x', len));
        }
    }
}

fn request(stream: u32) -> Ev {
    Ev::Request {
        stream,
        head: "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n".into(),
        body: RequestBody::None,
        priority: Priority::default(),
    }
}

fn data(stream: u32, data: &[u8], end_stream: bool) -> Ev {
    Ev::Data {
        stream,
        data: data.to_vec(),
        end_stream,
    }
}

/// Expects the connection closed with GOAWAY(`last`, `code`) as the last
/// frame written.
fn assert_closed(s: &mut Server, last: u32, code: ErrorCode) {
    let sent = s.sent();
    assert_eq!(sent.last(), Some(&Sent::GoAway(last, code)), "{sent:?}");
    assert!(s.conn.is_closed());
    assert_eq!(s.conn.error(), Some(code));
    // Nothing more is read.
    let mut c = Client::bare();
    c.ping([1; 8]);
    let before = s.input.len();
    assert_eq!(s.feed(&c.take()), before + 17);
    assert_eq!(s.sent(), []);
}

fn defaults() -> ServerSettings {
    ServerSettings::default()
}

#[test]
fn start_sends_settings_and_raises_the_connection_window() {
    let mut s = Server::new(defaults());
    assert_eq!(
        s.sent(),
        [
            Sent::Settings(vec![
                Setting::MaxConcurrentStreams(100),
                Setting::MaxHeaderListSize(16_384),
                Setting::EnablePush(false),
                Setting::NoRfc7540Priorities(true),
            ]),
            Sent::WindowUpdate(0, (1 << 20) - 65_535),
        ]
    );
    // Only once.
    s.conn.start(&mut s.out);
    assert_eq!(s.sent(), []);

    let mut s = Server::new(ServerSettings {
        initial_window_size: 1000,
        connection_window_size: 65_535,
        max_frame_size: 32_768,
        max_concurrent_streams: 7,
        ..defaults()
    });
    assert_eq!(
        s.sent(),
        [Sent::Settings(vec![
            Setting::MaxConcurrentStreams(7),
            Setting::InitialWindowSize(1000),
            Setting::MaxFrameSize(32_768),
            Setting::MaxHeaderListSize(16_384),
            Setting::EnablePush(false),
            Setting::NoRfc7540Priorities(true),
        ])]
    );
}

#[test]
fn the_preface_is_awaited_whole_and_a_wrong_one_ends_the_connection() {
    let mut s = Server::new(defaults());
    s.sent();
    for n in 0..PREFACE.len() {
        assert_eq!(s.conn.receive(&PREFACE[..n], &mut s.out, &mut |_| {}), 0);
    }
    assert!(!s.conn.is_closed());
    assert_eq!(s.feed(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0);
    assert_eq!(s.sent(), []);

    let mut s = Server::new(defaults());
    s.sent();
    assert_eq!(
        s.conn
            .receive(b"GET / HTTP/1.1\r\n", &mut s.out, &mut |_| {}),
        0
    );
    assert_closed(&mut s, 0, ErrorCode::ProtocolError);
}

#[test]
fn the_first_frame_must_be_settings() {
    let mut s = Server::new(defaults());
    s.sent();
    let mut c = Client::bare();
    c.raw(PREFACE).ping([0; 8]);
    s.feed(&c.take());
    assert_closed(&mut s, 0, ErrorCode::ProtocolError);
}

#[test]
fn settings_and_pings_are_answered() {
    let (mut s, mut c) = Server::ready(defaults());
    assert_eq!(s.sent(), []);
    c.settings(&[Setting::EnablePush(false)])
        .ping(*b"12345678")
        .raw(&[0, 0, 8, 6, 1, 0, 0, 0, 0]) // a PING ACK: not answered
        .raw(b"abcdefgh")
        .settings_ack();
    assert_eq!(s.feed(&c.take()), 0);
    assert_eq!(s.sent(), [Sent::SettingsAck, Sent::PingAck(*b"12345678")]);
    assert_eq!(s.events(), []);
}

#[test]
fn a_get_becomes_a_request_event_and_its_response_closes_the_stream() {
    let (mut s, mut c) = Server::ready(defaults());
    c.headers(
        1,
        &with(
            &GET,
            &[("accept", "*/*"), ("cookie", "a=1"), ("cookie", "b=2")],
        ),
        true,
    );
    s.feed(&c.take());
    assert_eq!(
        s.events(),
        [Ev::Request {
            stream: 1,
            head: "GET / HTTP/1.1\r\nHost: a.test\r\naccept: */*\r\ncookie: a=1; b=2\r\n\r\n"
                .into(),
            body: RequestBody::None,
            priority: Priority::default(),
        }]
    );
    assert_eq!(s.conn.active_streams(), 1);
    s.conn.send_headers(
        1,
        200,
        &[
            Field::new(b"content-type", b"text/plain"),
            Field::never_indexed(b"x-secret", b"s"),
        ],
        false,
        &mut s.out,
    );
    assert_eq!(s.conn.send_window(1), 65_535);
    s.conn.send_data(1, 5, true, &mut s.out);
    s.out.extend_from_slice(b"hello");
    assert_eq!(
        s.sent(),
        [
            Sent::Headers(
                1,
                false,
                vec![
                    (":status".into(), "200".into()),
                    ("content-type".into(), "text/plain".into()),
                    ("x-secret".into(), "s".into()),
                ]
            ),
            Sent::Data(1, 5, true),
        ]
    );
    assert_eq!(s.conn.active_streams(), 0);
    assert_eq!(s.conn.send_window(1), 0);
    // Sending more on it writes nothing.
    s.conn.send_headers(1, 200, &[], true, &mut s.out);
    s.conn.send_data(1, 0, true, &mut s.out);
    assert_eq!(s.sent(), []);
}

#[test]
fn an_interim_response_leaves_the_stream_open() {
    let (mut s, mut c) = Server::ready(defaults());
    c.post(1, Some(2));
    s.feed(&c.take());
    s.conn.send_headers(1, 100, &[], false, &mut s.out);
    s.conn.send_headers(1, 204, &[], true, &mut s.out);
    assert_eq!(
        s.sent(),
        [
            Sent::Headers(1, false, vec![(":status".into(), "100".into())]),
            Sent::Headers(1, true, vec![(":status".into(), "204".into())]),
        ]
    );
    // The request body may still come.
    assert_eq!(s.conn.active_streams(), 1);
    c.data(1, b"ab", true);
    s.feed(&c.take());
    assert_eq!(s.conn.active_streams(), 0);
}

#[test]
fn request_bodies_come_as_data_events() {
    let (mut s, mut c) = Server::ready(defaults());
    c.post(1, Some(5))
        .data(1, b"he", false)
        .padded_data(1, b"llo", 4, true)
        .post(3, None)
        .data(3, b"abc", false)
        .data(3, b"", true);
    s.feed(&c.take());
    assert_eq!(
        s.events(),
        [
            Ev::Request {
                stream: 1,
                head: "POST /up HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\n".into(),
                body: RequestBody::Length(5),
                priority: Priority::default(),
            },
            data(1, b"he", false),
            data(1, b"llo", true),
            Ev::Request {
                stream: 3,
                head: "POST /up HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n"
                    .into(),
                body: RequestBody::Chunked,
                priority: Priority::default(),
            },
            data(3, b"abc", false),
            data(3, b"", true),
        ]
    );
    // Nothing was answered: the windows are far from half taken.
    assert_eq!(s.sent(), []);
}

#[test]
fn trailers_end_the_body_and_are_checked() {
    let (mut s, mut c) = Server::ready(defaults());
    c.post(1, None)
        .data(1, b"x", false)
        .headers(1, &[("grpc-status", "0")], true);
    s.feed(&c.take());
    let events = s.events();
    assert_eq!(events[1..], [data(1, b"x", false), data(1, b"", true)]);

    // Trailers that do not end the stream, or carry a pseudo-header field.
    c.post(3, None).headers(3, &[("x", "1")], false);
    c.post(5, None).headers(5, &[(":path", "/")], true);
    s.feed(&c.take());
    let events = s.events();
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Ev::Reset { .. }))
            .count(),
        2
    );
    assert!(events.contains(&Ev::Reset {
        stream: 3,
        code: ErrorCode::ProtocolError
    }));
    assert_eq!(
        s.sent(),
        [
            Sent::Rst(3, ErrorCode::ProtocolError),
            Sent::Rst(5, ErrorCode::ProtocolError)
        ]
    );
}

#[test]
fn content_length_must_match_the_data() {
    let (mut s, mut c) = Server::ready(defaults());
    // Too much, found as soon as it passes the length.
    c.post(1, Some(3))
        .data(1, b"ab", false)
        .data(1, b"cd", false);
    // Too little, found at the end: by DATA or by trailers.
    c.post(3, Some(3)).data(3, b"ab", true);
    c.post(5, Some(3))
        .data(5, b"ab", false)
        .headers(5, &[("x", "1")], true);
    // A length with END_STREAM on HEADERS is malformed.
    c.headers(7, &with(&POST, &[("content-length", "3")]), true);
    // Just right.
    c.post(9, Some(3)).data(9, b"abc", true);
    s.feed(&c.take());
    assert_eq!(
        s.sent(),
        [
            Sent::Rst(1, ErrorCode::ProtocolError),
            Sent::Rst(3, ErrorCode::ProtocolError),
            Sent::Rst(5, ErrorCode::ProtocolError),
            Sent::Rst(7, ErrorCode::ProtocolError),
        ]
    );
    let events = s.events();
    assert!(events.contains(&data(1, b"ab", false)));
    assert!(!events
        .iter()
        .any(|e| matches!(e, Ev::Request { stream: 7, .. })));
    assert_eq!(events.last(), Some(&data(9, b"abc", true)));
}

#[test]
fn a_malformed_request_is_reset_without_an_event() {
    let (mut s, mut c) = Server::ready(defaults());
    c.headers(1, &with(&GET, &[("X-Upper", "1")]), true)
        .headers(3, &with(&GET, &[("connection", "close")]), true)
        .headers(5, &GET[1..], true)
        .get(7);
    s.feed(&c.take());
    assert_eq!(s.events(), [request(7)]);
    assert_eq!(
        s.sent(),
        [
            Sent::Rst(1, ErrorCode::ProtocolError),
            Sent::Rst(3, ErrorCode::ProtocolError),
            Sent::Rst(5, ErrorCode::ProtocolError),
        ]
    );
}

#[test]
fn an_hpack_error_ends_the_connection() {
    let (mut s, mut c) = Server::ready(defaults());
    c.get(1);
    // A literal with incremental indexing and no name: cut short.
    frame(
        1,
        flags::END_HEADERS | flags::END_STREAM,
        3,
        &[0x40],
        &mut c.wire,
    );
    s.feed(&c.take());
    assert_eq!(s.events(), [request(1)]);
    assert_closed(&mut s, 1, ErrorCode::CompressionError);
}

#[test]
fn a_header_list_over_the_limits_is_rejected_with_431_and_hpack_kept_in_step() {
    let settings = ServerSettings {
        header_limits: DecodeLimits {
            max_header_list_size: 400,
            max_fields: 10,
        },
        ..defaults()
    };
    let (mut s, mut c) = Server::ready(settings);
    let big = "v".repeat(300);
    // The large field enters the client's table; the next request refers
    // to another it added while the first was refused.
    c.headers(1, &with(&GET, &[("x-a", "1"), ("x-big", &big)]), false)
        .data(1, &[1; 100], false)
        .data(1, &[2; 100], true);
    let many: Vec<(&str, &str)> = (0..11).map(|_| ("x-n", "1")).collect();
    c.headers(3, &with(&GET, &many), true);
    c.headers(5, &with(&GET, &[("x-a", "1")]), true);
    s.feed(&c.take());
    assert_eq!(
        s.events(),
        [
            Ev::Rejected {
                stream: 1,
                status: 431
            },
            Ev::Rejected {
                stream: 3,
                status: 431
            },
            Ev::Request {
                stream: 5,
                head: "GET / HTTP/1.1\r\nHost: a.test\r\nx-a: 1\r\n\r\n".into(),
                body: RequestBody::None,
                priority: Priority::default(),
            },
        ]
    );
    // The rejected body was given back, not held.
    assert_eq!(s.sent(), []);
    assert_eq!(s.conn.st.conn_pending, 200);
    s.conn.send_headers(1, 431, &[], true, &mut s.out);
    s.conn.send_headers(3, 431, &[], true, &mut s.out);
    assert_eq!(s.sent().len(), 2);
    assert_eq!(s.conn.active_streams(), 1);
}

#[test]
fn a_rejected_request_still_sending_its_body_is_reset_with_no_error_after_its_answer() {
    let settings = ServerSettings {
        header_limits: DecodeLimits {
            max_header_list_size: 200,
            max_fields: 10,
        },
        ..defaults()
    };
    let (mut s, mut c) = Server::ready(settings);
    c.headers(1, &with(&POST, &[("x-big", &"v".repeat(200))]), false)
        .data(1, b"abc", false);
    s.feed(&c.take());
    assert_eq!(
        s.events(),
        [Ev::Rejected {
            stream: 1,
            status: 431
        }]
    );
    s.conn.send_headers(1, 431, &[], true, &mut s.out);
    assert_eq!(s.sent()[1..], [Sent::Rst(1, ErrorCode::NoError)]);
    // What the client sent before it saw that is ignored.
    c.data(1, b"more", true);
    s.feed(&c.take());
    assert_eq!(s.sent(), []);
    assert_eq!(s.events(), []);
    assert!(!s.conn.is_closed());
}

#[test]
fn response_blocks_follow_the_clients_table_size_and_frame_size() {
    let (mut s, mut c) = Server::ready(defaults());
    c.settings(&[Setting::HeaderTableSize(0), Setting::MaxFrameSize(16_500)])
        .get(1)
        .get(3);
    s.feed(&c.take());
    assert_eq!(s.conn.max_frame_size(), 16_500);
    assert_eq!(s.sent(), [Sent::SettingsAck]);
    let big = vec![b'v'; 40_000];
    let at = s.out.len();
    s.conn
        .send_headers(1, 200, &[Field::new(b"x-big", &big)], true, &mut s.out);
    // The size update first, then no indexing at all.
    let first = &s.out[at..];
    let headers = FrameHeader::parse(first.first_chunk().unwrap());
    assert_eq!(headers.length, 16_500);
    assert_eq!(first[FRAME_HEADER_LEN], 0x20);
    let sent = s.sent();
    assert!(matches!(&sent[..], [Sent::Headers(1, true, f)] if f[1].1.len() == 40_000));
    // Three frames: 16,500 + 16,500 + the rest.
    let frames = {
        let reader = FrameReader::new(MAX_FRAME_SIZE_LIMIT);
        let mut rest = &s.out[at..];
        let mut n = 0;
        while let Ok(Some((_, used))) = reader.parse(rest) {
            rest = &rest[used..];
            n += 1;
        }
        n
    };
    assert_eq!(frames, 3);
    s.conn
        .send_headers(3, 200, &[Field::new(b"x-a", b"1")], true, &mut s.out);
    s.sent();
    assert_eq!(s.conn.st.encoder.dynamic_table_size(), 0);
}

// Stream states (RFC 9113 §5.1).

#[test]
fn client_streams_are_odd_and_increasing() {
    let (mut s, mut c) = Server::ready(defaults());
    c.headers(2, &GET, true);
    s.feed(&c.take());
    assert_closed(&mut s, 0, ErrorCode::ProtocolError);

    let (mut s, mut c) = Server::ready(defaults());
    c.get(5).get(3);
    s.feed(&c.take());
    assert_eq!(s.events(), [request(5)]);
    assert_closed(&mut s, 5, ErrorCode::ProtocolError);
}

#[test]
fn frames_on_idle_streams_end_the_connection() {
    let idle: [fn(&mut Client); 4] = [
        |c| {
            c.data(1, b"x", true);
        },
        |c| {
            c.window_update(1, 10);
        },
        |c| {
            c.rst(1, ErrorCode::Cancel);
        },
        // Even streams are the server's, which opens none.
        |c| {
            c.get(1).data(2, b"x", true);
        },
    ];
    for send in idle {
        let (mut s, mut c) = Server::ready(defaults());
        send(&mut c);
        s.feed(&c.take());
        let last = s.conn.st.last_accepted;
        assert_closed(&mut s, last, ErrorCode::ProtocolError);
    }
    // PRIORITY may come on an idle stream.
    let (mut s, mut c) = Server::ready(defaults());
    c.priority(9, 0).get(1);
    s.feed(&c.take());
    assert_eq!(s.events(), [request(1)]);
    assert!(!s.conn.is_closed());
}

#[test]
fn frames_after_the_clients_end_stream_are_stream_errors() {
    let (mut s, mut c) = Server::ready(defaults());
    c.get(1).data(1, b"x", false);
    c.get(3).headers(3, &[("x", "1")], true);
    s.feed(&c.take());
    assert_eq!(
        s.sent(),
        [
            Sent::Rst(1, ErrorCode::StreamClosed),
            Sent::Rst(3, ErrorCode::StreamClosed)
        ]
    );
    assert_eq!(
        s.events(),
        [
            request(1),
            Ev::Reset {
                stream: 1,
                code: ErrorCode::StreamClosed
            },
            request(3),
            Ev::Reset {
                stream: 3,
                code: ErrorCode::StreamClosed
            },
        ]
    );
    // The DATA's bytes went back to the connection.
    assert_eq!(s.conn.st.conn_pending, 1);
    // Sending on them writes nothing.
    s.conn.send_headers(1, 200, &[], true, &mut s.out);
    assert_eq!(s.sent(), []);
}

#[test]
fn frames_after_the_clients_reset() {
    let (mut s, mut c) = Server::ready(defaults());
    c.post(1, None).rst(1, ErrorCode::Cancel);
    s.feed(&c.take());
    assert_eq!(
        s.events()[1..],
        [Ev::Reset {
            stream: 1,
            code: ErrorCode::Cancel
        }]
    );
    // WINDOW_UPDATE, RST_STREAM and PRIORITY are ignored ...
    c.window_update(1, 5)
        .rst(1, ErrorCode::Cancel)
        .priority(1, 0);
    s.feed(&c.take());
    assert_eq!(s.sent(), []);
    // ... DATA and HEADERS are stream errors STREAM_CLOSED.
    c.data(1, b"x", true);
    s.feed(&c.take());
    assert_eq!(s.sent(), [Sent::Rst(1, ErrorCode::StreamClosed)]);
    // After which this side has reset it: ignored.
    c.data(1, b"x", true).headers(1, &[("x", "1")], true);
    s.feed(&c.take());
    assert_eq!(s.sent(), []);
    assert_eq!(s.events(), []);

    let (mut s, mut c) = Server::ready(defaults());
    c.post(1, None)
        .rst(1, ErrorCode::Cancel)
        .headers(1, &[("x", "1")], true);
    s.feed(&c.take());
    assert_eq!(s.sent(), [Sent::Rst(1, ErrorCode::StreamClosed)]);
    // The block was decoded all the same: HPACK is in step.
    c.headers(3, &[("x", "1")], true);
    s.feed(&c.take());
    assert!(!s.conn.is_closed());
}

#[test]
fn frames_after_end_stream_both_ways() {
    let (mut s, mut c) = Server::ready(defaults());
    c.get(1);
    s.feed(&c.take());
    s.respond(1, 0);
    s.sent();
    c.window_update(1, 5)
        .rst(1, ErrorCode::Cancel)
        .priority(1, 0);
    s.feed(&c.take());
    assert_eq!(s.sent(), []);
    c.data(1, b"x", true);
    s.feed(&c.take());
    assert_eq!(s.sent(), [Sent::Rst(1, ErrorCode::StreamClosed)]);
    assert!(!s.conn.is_closed());

    let (mut s, mut c) = Server::ready(defaults());
    c.get(1);
    s.feed(&c.take());
    s.respond(1, 3);
    c.get(1);
    s.feed(&c.take());
    assert_closed(&mut s, 1, ErrorCode::StreamClosed);
}

#[test]
fn frames_after_this_sides_reset_are_ignored_and_their_bytes_given_back() {
    let (mut s, mut c) = Server::ready(defaults());
    c.post(1, None).data(1, &[0; 1000], false);
    s.feed(&c.take());
    s.events();
    s.conn.reset(1, ErrorCode::Cancel, &mut s.out);
    // Once only.
    s.conn.reset(1, ErrorCode::Cancel, &mut s.out);
    assert_eq!(s.sent(), [Sent::Rst(1, ErrorCode::Cancel)]);
    assert_eq!(s.conn.st.conn_pending, 1000);
    c.data(1, &[0; 500], false).headers(1, &[("x", "1")], true);
    s.feed(&c.take());
    assert_eq!(s.sent(), []);
    assert_eq!(s.events(), []);
    assert_eq!(s.conn.st.conn_pending, 1500);
    assert_eq!(s.conn.active_streams(), 0);
}

#[test]
fn streams_long_closed_are_connection_errors() {
    let (mut s, mut c) = Server::ready(defaults());
    for id in (1..).step_by(2).take(RECENTLY_CLOSED + 1) {
        c.get(id);
        s.feed(&c.take());
        s.respond(id, 0);
    }
    s.events();
    s.sent();
    // Stream 1 has been forgotten: DATA on it is a connection error.
    c.data(1, b"x", true);
    s.feed(&c.take());
    let last = s.conn.st.last_accepted;
    assert_closed(&mut s, last, ErrorCode::StreamClosed);
}

#[test]
fn streams_past_max_concurrent_streams_are_refused() {
    let settings = ServerSettings {
        max_concurrent_streams: 2,
        ..defaults()
    };
    let (mut s, mut c) = Server::ready(settings);
    c.post(1, None)
        .post(3, None)
        .headers(5, &with(&GET, &[("x-new", "1")]), true)
        .headers(7, &with(&GET, &[("x-new", "1")]), true);
    s.feed(&c.take());
    assert_eq!(
        s.sent(),
        [
            Sent::Rst(5, ErrorCode::RefusedStream),
            Sent::Rst(7, ErrorCode::RefusedStream)
        ]
    );
    assert_eq!(s.conn.active_streams(), 2);
    c.data(1, b"", true);
    s.feed(&c.take());
    s.respond(1, 0);
    // A slot is free, and HPACK followed the refused blocks.
    c.headers(9, &with(&GET, &[("x-new", "1")]), true);
    s.feed(&c.take());
    assert!(matches!(
        s.events().last(),
        Some(Ev::Request { stream: 9, head, .. }) if head.contains("x-new: 1")
    ));
}

#[test]
fn rfc7540_priorities_are_ignored_but_self_dependency_is_a_stream_error() {
    let (mut s, mut c) = Server::ready(defaults());
    c.headers_with_priority(1, 0, &GET, true)
        .priority(1, 3)
        .priority(1, 1)
        .headers_with_priority(5, 5, &with(&GET, &[("x-a", "1")]), true)
        .headers(7, &with(&GET, &[("x-a", "1")]), true);
    s.feed(&c.take());
    assert_eq!(
        s.sent(),
        [
            Sent::Rst(1, ErrorCode::ProtocolError),
            Sent::Rst(5, ErrorCode::ProtocolError)
        ]
    );
    let events = s.events();
    assert_eq!(events[0], request(1));
    assert_eq!(
        events[1],
        Ev::Reset {
            stream: 1,
            code: ErrorCode::ProtocolError
        }
    );
    // Stream 7 refers to the entry stream 5's block added.
    assert!(matches!(&events[2], Ev::Request { stream: 7, head, .. } if head.contains("x-a: 1")));
    assert!(!s.conn.is_closed());

    // On an idle stream there is no stream to reset: the connection ends.
    let (mut s, mut c) = Server::ready(defaults());
    c.priority(1, 1);
    s.feed(&c.take());
    assert_closed(&mut s, 0, ErrorCode::ProtocolError);
}

#[test]
fn a_self_dependent_headers_frame_split_over_continuations() {
    let (mut s, mut c) = Server::ready(defaults());
    let block = c.block(&GET);
    let mut payload = 1u32.to_be_bytes().to_vec();
    payload.push(0);
    payload.extend_from_slice(&block[..2]);
    frame(
        1,
        flags::PRIORITY | flags::END_STREAM,
        1,
        &payload,
        &mut c.wire,
    );
    frame(9, flags::END_HEADERS, 1, &block[2..], &mut c.wire);
    c.get(3);
    s.feed(&c.take());
    assert_eq!(s.sent(), [Sent::Rst(1, ErrorCode::ProtocolError)]);
    assert_eq!(s.events(), [request(3)]);
}

// Flow control (RFC 9113 §6.9).

#[test]
fn send_windows_follow_window_updates_and_initial_size_changes() {
    let (mut s, mut c) = Server::ready(defaults());
    c.get(1).get(3);
    s.feed(&c.take());
    s.events();
    s.conn.send_headers(1, 200, &[], false, &mut s.out);
    for len in [16_384, 16_384, 16_384, 10_848] {
        s.conn.send_data(1, len, false, &mut s.out);
        s.out.extend(std::iter::repeat_n(0, len));
    }
    assert_eq!(s.conn.send_window(1), 5535);
    assert_eq!(s.conn.send_window(3), 5535); // the connection's window
    c.window_update(0, 100_000);
    s.feed(&c.take());
    assert_eq!(s.events(), [Ev::WindowOpened]);
    assert_eq!(s.conn.send_window(1), 5535);
    assert_eq!(s.conn.send_window(3), 65_535);
    // Shrinking the initial size may leave a window negative.
    c.settings(&[Setting::InitialWindowSize(1000)]);
    s.feed(&c.take());
    assert_eq!(
        s.conn.st.streams[s.conn.st.index(1).unwrap()].send.size(),
        -59_000
    );
    assert_eq!(s.conn.send_window(1), 0);
    assert_eq!(s.conn.send_window(3), 1000);
    assert_eq!(s.events(), []);
    c.settings(&[Setting::InitialWindowSize(70_000)]);
    s.feed(&c.take());
    assert_eq!(s.events(), [Ev::WindowOpened]);
    assert_eq!(s.conn.send_window(1), 10_000);
    c.window_update(1, 50_000);
    s.feed(&c.take());
    assert_eq!(s.events(), [Ev::WindowOpened]);
    assert_eq!(s.conn.send_window(1), 60_000);
}

#[test]
#[should_panic(expected = "send window")]
fn data_past_the_send_window_is_a_bug() {
    let (mut s, mut c) = Server::ready(defaults());
    c.settings(&[Setting::InitialWindowSize(10)]).get(1);
    s.feed(&c.take());
    s.conn.send_data(1, 11, false, &mut s.out);
}

#[test]
fn window_update_overflow_and_zero_increments() {
    let (mut s, mut c) = Server::ready(defaults());
    c.get(1)
        .window_update(1, MAX_WINDOW_SIZE)
        .get(3)
        .window_update(3, 0);
    s.feed(&c.take());
    assert_eq!(
        s.sent(),
        [
            Sent::Rst(1, ErrorCode::FlowControlError),
            Sent::Rst(3, ErrorCode::ProtocolError)
        ]
    );
    c.window_update(0, MAX_WINDOW_SIZE);
    s.feed(&c.take());
    assert_closed(&mut s, 3, ErrorCode::FlowControlError);

    let (mut s, mut c) = Server::ready(defaults());
    c.window_update(0, 0);
    s.feed(&c.take());
    assert_closed(&mut s, 0, ErrorCode::ProtocolError);
}

#[test]
fn an_initial_window_size_past_the_maximum_is_a_flow_control_error() {
    let (mut s, mut c) = Server::ready(defaults());
    c.raw(&[0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 4, 0x80, 0, 0, 0]);
    s.feed(&c.take());
    assert_closed(&mut s, 0, ErrorCode::FlowControlError);

    // Or one that takes an open stream's window past it.
    let (mut s, mut c) = Server::ready(defaults());
    c.get(1).window_update(1, MAX_WINDOW_SIZE - 65_535);
    c.settings(&[Setting::InitialWindowSize(65_536)]);
    s.feed(&c.take());
    assert_closed(&mut s, 1, ErrorCode::FlowControlError);
}

/// A server whose SETTINGS the client has acknowledged.
fn acked(settings: ServerSettings) -> (Server, Client) {
    let (mut s, mut c) = Server::ready(settings);
    c.settings_ack();
    s.feed(&c.take());
    (s, c)
}

#[test]
fn receive_windows_are_enforced_padding_included() {
    let settings = ServerSettings {
        initial_window_size: 100,
        connection_window_size: 65_535,
        ..defaults()
    };
    let (mut s, mut c) = acked(settings);
    c.post(1, None)
        .data(1, &[0; 90], false)
        .padded_data(1, b"", 9, false);
    s.feed(&c.take());
    assert_eq!(s.sent(), []);
    c.data(1, b"x", false);
    s.feed(&c.take());
    assert_eq!(s.sent(), [Sent::Rst(1, ErrorCode::FlowControlError)]);
    assert!(s.events().contains(&Ev::Reset {
        stream: 1,
        code: ErrorCode::FlowControlError
    }));

    // The connection's window: a connection error.
    let settings = ServerSettings {
        connection_window_size: 65_535,
        ..defaults()
    };
    let (mut s, mut c) = acked(settings);
    for id in [1, 3] {
        c.post(id, None)
            .data(id, &[0; 16_384], false)
            .data(id, &[0; 16_383], false);
    }
    c.data(3, &[0; 2], false);
    s.feed(&c.take());
    assert_closed(&mut s, 3, ErrorCode::FlowControlError);
}

#[test]
fn the_client_is_held_to_the_default_window_until_it_acknowledges() {
    let settings = ServerSettings {
        initial_window_size: 100,
        ..defaults()
    };
    let (mut s, mut c) = Server::ready(settings);
    c.post(1, None).data(1, &[0; 1000], false);
    s.feed(&c.take());
    assert_eq!(s.sent(), []);
    c.settings_ack();
    s.feed(&c.take());
    // 1000 taken from a window now of 100.
    assert_eq!(s.conn.st.streams[0].recv.size(), -900);
}

#[test]
fn consumed_bytes_reopen_the_windows_once_half_is_taken() {
    let settings = ServerSettings {
        initial_window_size: 1000,
        connection_window_size: 4000,
        ..defaults()
    };
    let (mut s, mut c) = acked(settings);
    c.post(1, None)
        .data(1, &[0; 499], false)
        .padded_data(1, &[0; 400], 99, false);
    s.feed(&c.take());
    s.conn.consumed(1, 400, &mut s.out);
    // 400 consumed and 100 of padding (with its length byte): half.
    assert_eq!(s.sent(), [Sent::WindowUpdate(1, 500)]);
    // More than the stream has outstanding (499) counts as that.
    s.conn.consumed(1, 10_000, &mut s.out);
    assert_eq!(s.sent(), []);
    c.data(1, b"x", false);
    s.feed(&c.take());
    s.conn.consumed(1, 1, &mut s.out);
    assert_eq!(s.sent(), [Sent::WindowUpdate(1, 500)]);
    c.data(1, &[0; 1000], false);
    s.feed(&c.take());
    s.conn.consumed(1, 1000, &mut s.out);
    assert_eq!(s.sent(), [Sent::WindowUpdate(1, 1000)]);
    // The connection's window is at least 65,535: half of it is not yet
    // taken.
    assert_eq!(s.conn.st.conn_pending, 2000);
    // Once the client has ended the stream only the connection's window
    // is updated.
    c.data(1, &[0; 1000], true);
    s.feed(&c.take());
    s.conn.consumed(1, 1000, &mut s.out);
    assert_eq!(s.sent(), []);
    assert_eq!(s.conn.st.conn_pending, 3000);

    // Closing a stream gives back what the glue never consumed.
    let (mut s, mut c) = acked(settings);
    c.post(1, None)
        .data(1, &[0; 1000], true)
        .post(3, None)
        .data(3, &[0; 900], false);
    s.feed(&c.take());
    s.respond(1, 0);
    s.conn.reset(3, ErrorCode::Cancel, &mut s.out);
    assert_eq!(s.sent()[1..], [Sent::Rst(3, ErrorCode::Cancel)]);
    assert_eq!(s.conn.st.conn_pending, 1900);

    // The connection's window is updated once half of it is taken.
    let (mut s, mut c) = acked(ServerSettings {
        connection_window_size: 65_535,
        ..defaults()
    });
    c.post(1, None).data(1, &[0; 16_384], false);
    c.post(3, None).data(3, &[0; 16_384], false);
    s.feed(&c.take());
    s.conn.consumed(1, 16_384, &mut s.out);
    assert_eq!(s.sent(), []);
    s.conn.consumed(3, 16_383, &mut s.out);
    assert_eq!(s.sent(), [Sent::WindowUpdate(0, 32_767)]);
}

// Graceful shutdown and GOAWAY (RFC 9113 §6.8).

#[test]
fn go_away_ignores_newer_streams_and_lets_older_ones_finish() {
    let (mut s, mut c) = Server::ready(defaults());
    c.post(1, None);
    s.feed(&c.take());
    s.events();
    s.conn.go_away(&mut s.out);
    s.conn.go_away(&mut s.out);
    assert!(s.conn.is_going_away());
    assert_eq!(s.sent(), [Sent::GoAway(1, ErrorCode::NoError)]);
    c.post(3, None)
        .data(3, b"ignored", true)
        .headers(5, &with(&GET, &[("x-a", "1")]), true)
        .data(1, b"body", true);
    s.feed(&c.take());
    assert_eq!(s.events(), [data(1, b"body", true)]);
    assert_eq!(s.sent(), []);
    s.respond(1, 2);
    assert_eq!(s.conn.active_streams(), 0);
    assert!(!s.conn.is_closed());
}

#[test]
fn an_announced_shutdown_takes_streams_until_its_ping_comes_back() {
    let (mut s, mut c) = Server::ready(defaults());
    c.get(1);
    s.feed(&c.take());
    s.events();
    s.conn.announce_go_away(&mut s.out);
    s.conn.announce_go_away(&mut s.out);
    assert_eq!(
        s.sent(),
        [
            Sent::GoAway((1 << 31) - 1, ErrorCode::NoError),
            Sent::Ping(*b"goingawy")
        ]
    );
    assert!(s.conn.is_announced() && !s.conn.is_going_away());
    // Sent before the client saw the announcement: still served.
    c.get(3).ping_ack(*b"another!");
    s.feed(&c.take());
    assert_eq!(s.events(), [request(3)]);
    assert_eq!(s.sent(), []);
    c.ping_ack(*b"goingawy").get(5);
    s.feed(&c.take());
    assert_eq!(s.sent(), [Sent::GoAway(3, ErrorCode::NoError)]);
    assert!(s.conn.is_going_away());
    assert_eq!(s.events(), [], "stream 5 came after the GOAWAY");
    // One that will not wait for the acknowledgement ends it at once.
    let (mut s, mut c) = Server::ready(defaults());
    c.get(1);
    s.feed(&c.take());
    s.conn.announce_go_away(&mut s.out);
    s.conn.go_away(&mut s.out);
    assert_eq!(s.sent().last(), Some(&Sent::GoAway(1, ErrorCode::NoError)));
}

#[test]
fn a_prepared_head_goes_with_the_fields_that_change() {
    let (mut s, mut c) = Server::ready(defaults());
    c.get(1).get(3);
    s.feed(&c.take());
    s.events();
    let mut prepared = Vec::new();
    crate::h2::encode_without_table(
        [Field::new(b":status", b"200"), Field::new(b"x-kept", b"1")],
        &mut prepared,
    );
    let mut date = Vec::new();
    crate::h2::encode_without_table(
        [Field::new(b"date", b"Sat, 28 Nov 2026 21:00:00 GMT")],
        &mut date,
    );
    s.conn
        .send_prepared_headers(1, &prepared, &date, true, &mut s.out);
    let fields = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|&(n, v)| (n.to_owned(), v.to_owned()))
            .collect::<Vec<_>>()
    };
    let want = fields(&[
        (":status", "200"),
        ("x-kept", "1"),
        ("date", "Sat, 28 Nov 2026 21:00:00 GMT"),
    ]);
    assert_eq!(s.sent(), [Sent::Headers(1, true, want.clone())]);
    // A table the client made smaller is said first, as in any block.
    c.settings(&[Setting::HeaderTableSize(0)]);
    s.feed(&c.take());
    s.sent();
    s.conn
        .send_prepared_headers(3, &prepared, &date, true, &mut s.out);
    assert_eq!(s.sent(), [Sent::Headers(3, true, want)]);
    assert_eq!(s.conn.active_streams(), 0);
}

#[test]
fn max_requests_ends_with_a_graceful_goaway() {
    let settings = ServerSettings {
        max_requests: 2,
        ..defaults()
    };
    let (mut s, mut c) = Server::ready(settings);
    c.get(1).get(3).get(5);
    s.feed(&c.take());
    assert_eq!(s.events(), [request(1), request(3)]);
    assert_eq!(s.sent(), [Sent::GoAway(3, ErrorCode::NoError)]);
    assert!(s.conn.is_going_away());
    assert!(!s.conn.is_closed());
}

#[test]
fn the_clients_goaway_is_reported() {
    let (mut s, mut c) = Server::ready(defaults());
    c.goaway(0, ErrorCode::NoError)
        .goaway(0, ErrorCode::NoError);
    // An unknown code reads as INTERNAL_ERROR.
    c.raw(&[0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff]);
    s.feed(&c.take());
    assert_eq!(
        s.events(),
        [
            Ev::GoAway {
                last_stream_id: 0,
                code: ErrorCode::NoError
            },
            Ev::GoAway {
                last_stream_id: 0,
                code: ErrorCode::NoError
            },
            Ev::GoAway {
                last_stream_id: 0,
                code: ErrorCode::InternalError
            },
        ]
    );
}

#[test]
fn a_connection_error_names_the_last_stream_accepted_and_stops_reading() {
    let (mut s, mut c) = Server::ready(defaults());
    c.get(1).get(3);
    // A refused stream is not accepted.
    c.headers(5, &GET[1..], true);
    c.raw(&[0, 0, 1, 6, 0, 0, 0, 0, 0, 0]); // PING of 1 byte
    let input = c.take();
    let left = s.feed(&input);
    assert_eq!(left, 10);
    assert_closed(&mut s, 3, ErrorCode::FrameSizeError);
}

#[test]
fn nothing_is_written_after_the_goaway_of_a_connection_error() {
    let (mut s, mut c) = Server::ready(defaults());
    c.get(1).window_update(0, 0);
    s.feed(&c.take());
    assert_eq!(s.sent(), [Sent::GoAway(1, ErrorCode::ProtocolError)]);
    assert_eq!(s.conn.send_window(1), 0);
    s.conn.send_headers(1, 200, &[], false, &mut s.out);
    s.conn.send_data(1, 0, true, &mut s.out);
    s.conn.reset(1, ErrorCode::Cancel, &mut s.out);
    s.conn.go_away(&mut s.out);
    s.conn.consumed(1, 10, &mut s.out);
    assert_eq!(s.sent(), []);
}

#[test]
fn unknown_frames_are_ignored_except_inside_a_field_block() {
    let (mut s, mut c) = Server::ready(defaults());
    frame(0xfa, 0xff, 1, b"whatever", &mut c.wire);
    c.get(1);
    s.feed(&c.take());
    assert_eq!(s.events(), [request(1)]);

    let (mut s, mut c) = Server::ready(defaults());
    let block = c.block(&GET);
    frame(1, flags::END_STREAM, 1, &block, &mut c.wire);
    frame(0xfa, 0, 0, b"", &mut c.wire);
    s.feed(&c.take());
    assert_closed(&mut s, 0, ErrorCode::ProtocolError);
}

// Priorities (RFC 9218).

fn prio(urgency: u8, incremental: bool) -> Priority {
    Priority {
        urgency,
        incremental,
    }
}

#[test]
fn priority_field_values_are_read_as_structured_dictionaries() {
    let cases: [(&str, Option<Priority>); 24] = [
        ("", Some(prio(3, false))),
        ("u=0", Some(prio(0, false))),
        ("u=7", Some(prio(7, false))),
        ("i", Some(prio(3, true))),
        ("i=?1", Some(prio(3, true))),
        ("i=?0", Some(prio(3, false))),
        ("u=1, i", Some(prio(1, true))),
        ("  u=2,i  ", Some(prio(2, true))),
        ("u=2;a=1;b, i;c=\"x\"", Some(prio(2, true))),
        // Out of range, or of another type: the parameter is ignored.
        ("u=8", Some(prio(3, false))),
        ("u=-1, i", Some(prio(3, true))),
        ("u=1.5", Some(prio(3, false))),
        ("u=\"1\"", Some(prio(3, false))),
        ("i=1", Some(prio(3, false))),
        // The last of a name counts, whatever it holds.
        ("u=1, u=9", Some(prio(3, false))),
        ("u=9, u=1", Some(prio(1, false))),
        // Other members, however shaped, are ignored.
        (
            "x=(a b;c \"d\"), y=:AAE=:, z=tok/en:1, u=4",
            Some(prio(4, false)),
        ),
        ("*k=?1, u=5", Some(prio(5, false))),
        // Not a dictionary at all.
        ("u=", None),
        ("u=1,", None),
        ("U=1", None),
        ("u=1 i", None),
        ("x=\"unterminated", None),
        ("u=1234567890123456", None),
    ];
    for (value, expected) in cases {
        assert_eq!(Priority::parse(value.as_bytes()), expected, "{value:?}");
    }
}

#[test]
fn a_requests_priority_comes_from_its_priority_fields() {
    let (mut s, mut c) = Server::ready(defaults());
    c.headers(1, &with(&GET, &[("priority", "u=1")]), true)
        .headers(
            3,
            &with(&GET, &[("priority", "u=5"), ("priority", "i")]),
            true,
        )
        .headers(5, &with(&GET, &[("priority", "u=nonsense")]), true);
    s.feed(&c.take());
    let priorities: Vec<Priority> = s
        .events()
        .iter()
        .map(|e| match e {
            Ev::Request { priority, .. } => *priority,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(priorities, [prio(1, false), prio(5, true), prio(3, false)]);
    assert_eq!(s.conn.priority(3), prio(5, true));
    assert_eq!(s.conn.priority(7), Priority::default());
}

#[test]
fn priority_updates_change_open_streams_and_wait_for_idle_ones() {
    let (mut s, mut c) = Server::ready(defaults());
    c.get(1)
        .priority_update(1, "u=0")
        .priority_update(1, "u=0")
        .priority_update(1, "garbage=")
        .priority_update(5, "u=6, i")
        .priority_update(3, "u=2");
    s.feed(&c.take());
    assert_eq!(
        s.events(),
        [
            request(1),
            Ev::PriorityChanged {
                stream: 1,
                priority: prio(0, false)
            },
        ]
    );
    assert_eq!(s.conn.priority(1), prio(0, false));
    // The frame overrides the field: it was sent later.
    c.headers(5, &with(&GET, &[("priority", "u=1")]), true);
    s.feed(&c.take());
    assert!(matches!(
        s.events()[..],
        [Ev::Request {
            stream: 5,
            priority: Priority {
                urgency: 6,
                incremental: true
            },
            ..
        }]
    ));
    // Stream 3 will never open: its update was dropped.
    assert!(s.conn.st.pending_priorities.is_empty());
    // A closed stream's update is ignored.
    s.respond(1, 0);
    c.priority_update(1, "u=7");
    s.feed(&c.take());
    assert_eq!(s.events(), []);
}

#[test]
fn priority_updates_for_idle_streams_are_bounded() {
    let (mut s, mut c) = Server::ready(defaults());
    for id in (1..).step_by(2).take(PENDING_PRIORITIES + 4) {
        c.priority_update(id, "u=0");
    }
    s.feed(&c.take());
    assert_eq!(s.conn.st.pending_priorities.len(), PENDING_PRIORITIES);
    // The oldest went first.
    c.get(1).get(9);
    s.feed(&c.take());
    let events = s.events();
    assert!(matches!(events[0], Ev::Request { priority, .. } if priority == Priority::default()));
    assert!(matches!(events[1], Ev::Request { priority, .. } if priority == prio(0, false)));
}

#[test]
fn a_priority_update_for_stream_zero_ends_the_connection() {
    let (mut s, mut c) = Server::ready(defaults());
    c.priority_update(0, "u=1");
    s.feed(&c.take());
    assert_closed(&mut s, 0, ErrorCode::ProtocolError);
}

// Budgets (attacks).

/// Sends `n` times what `send` writes, all at once.
fn flood(s: &mut Server, c: &mut Client, n: u64, send: impl Fn(&mut Client, u64)) {
    for i in 0..n {
        send(c, i);
    }
    s.feed(&c.take());
}

/// The frames the handshake already counted: the client's first SETTINGS.
const HANDSHAKE_FRAMES: u64 = 1;

#[test]
fn rapid_reset_is_cut_off_past_the_reset_budget() {
    let (mut s, mut c) = Server::ready(defaults());
    let stream = |i: u64| 1 + 2 * i as u32;
    flood(&mut s, &mut c, RESET_BUDGET_BASE, |c, i| {
        c.get(stream(i)).rst(stream(i), ErrorCode::Cancel);
    });
    assert!(!s.conn.is_closed());
    flood(&mut s, &mut c, 1, |c, _| {
        c.get(401).rst(401, ErrorCode::Cancel);
    });
    assert_closed(&mut s, 401, ErrorCode::EnhanceYourCalm);
}

#[test]
fn resets_after_the_response_completed_are_not_counted() {
    let (mut s, mut c) = Server::ready(defaults());
    for i in 0..RESET_BUDGET_BASE + 10 {
        let id = 1 + 2 * i as u32;
        c.post(id, None);
        s.feed(&c.take());
        s.respond(id, 1);
        // The client's body was not needed: it stops with a reset.
        c.rst(id, ErrorCode::Cancel);
        s.feed(&c.take());
    }
    assert!(!s.conn.is_closed());
}

#[test]
fn completed_streams_raise_the_reset_budget() {
    let (mut s, mut c) = Server::ready(defaults());
    let completed = 100;
    for i in 0..completed {
        let id = 1 + 2 * i as u32;
        c.get(id);
        s.feed(&c.take());
        s.respond(id, 0);
    }
    let allowed = RESET_BUDGET_BASE + completed / RESETS_PER_COMPLETED_STREAM;
    let first = 1 + 2 * completed as u32;
    flood(&mut s, &mut c, allowed, |c, i| {
        let id = first + 2 * i as u32;
        c.get(id).rst(id, ErrorCode::Cancel);
    });
    assert!(!s.conn.is_closed());
    let last = first + 2 * allowed as u32;
    c.get(last).rst(last, ErrorCode::Cancel);
    s.feed(&c.take());
    assert_closed(&mut s, last, ErrorCode::EnhanceYourCalm);
}

#[test]
fn made_you_reset_shares_the_reset_budget() {
    // Stream errors the client provokes, each a reset this side sends,
    // after half the budget went on the client's own resets.
    let (mut s, mut c) = Server::ready(defaults());
    let half = RESET_BUDGET_BASE / 2;
    flood(&mut s, &mut c, half, |c, i| {
        let id = 1 + 2 * i as u32;
        c.get(id).rst(id, ErrorCode::Cancel);
    });
    let provokers: [fn(&mut Client, u32); 4] = [
        |c, id| {
            c.get(id).window_update(id, 0);
        },
        |c, id| {
            c.get(id).data(id, b"x", true);
        },
        |c, id| {
            c.get(id).window_update(id, MAX_WINDOW_SIZE);
        },
        |c, id| {
            c.post(id, Some(1)).data(id, b"xy", true);
        },
    ];
    let first = 1 + 2 * half as u32;
    flood(&mut s, &mut c, RESET_BUDGET_BASE - half, |c, i| {
        provokers[i as usize % 4](c, first + 2 * i as u32)
    });
    assert!(!s.conn.is_closed());
    let last = first + 2 * (RESET_BUDGET_BASE - half) as u32;
    c.get(last).window_update(last, 0);
    s.feed(&c.take());
    assert_closed(&mut s, last, ErrorCode::EnhanceYourCalm);
}

#[test]
fn refused_and_malformed_streams_count_as_resets() {
    let settings = ServerSettings {
        max_concurrent_streams: 1,
        ..defaults()
    };
    let (mut s, mut c) = Server::ready(settings);
    c.post(1, None);
    flood(&mut s, &mut c, RESET_BUDGET_BASE, |c, i| {
        let id = 3 + 2 * i as u32;
        if i % 2 == 0 {
            c.get(id);
        } else {
            c.headers(id, &GET[1..], true);
        }
    });
    assert!(!s.conn.is_closed());
    c.get(3 + 2 * RESET_BUDGET_BASE as u32);
    s.feed(&c.take());
    assert_closed(&mut s, 1, ErrorCode::EnhanceYourCalm);
}

/// Floods with frames that move no request forward, up to the budget and
/// one past it.
fn control_flood(send: impl Fn(&mut Client, u64), setup: impl Fn(&mut Client)) {
    let (mut s, mut c) = Server::ready(defaults());
    setup(&mut c);
    s.feed(&c.take());
    let accepted = s.conn.st.requests;
    let before = s.conn.st.unproductive - HANDSHAKE_FRAMES;
    let budget = CONTROL_FRAME_BUDGET_BASE + accepted * CONTROL_FRAMES_PER_REQUEST;
    flood(&mut s, &mut c, budget - HANDSHAKE_FRAMES - before, &send);
    assert!(!s.conn.is_closed(), "closed before the budget was spent");
    flood(&mut s, &mut c, 1, &send);
    let last = s.conn.st.last_accepted;
    assert_closed(&mut s, last, ErrorCode::EnhanceYourCalm);
}

#[test]
fn ping_flood() {
    control_flood(
        |c, i| {
            c.ping(i.to_be_bytes());
        },
        |_| {},
    );
}

#[test]
fn settings_flood() {
    control_flood(
        |c, _| {
            c.settings(&[Setting::HeaderTableSize(4096)]);
        },
        |_| {},
    );
}

#[test]
fn priority_flood() {
    control_flood(
        |c, i| {
            c.priority(1 + 2 * (i % 1000) as u32, 0);
        },
        |_| {},
    );
}

#[test]
fn priority_update_flood() {
    control_flood(
        |c, i| {
            c.priority_update(1, if i % 2 == 0 { "u=1" } else { "u=2" });
        },
        |c| {
            c.post(1, None);
        },
    );
}

#[test]
fn window_update_flood_with_nothing_sent() {
    control_flood(
        |c, i| {
            c.window_update(if i % 2 == 0 { 0 } else { 1 }, 1);
        },
        |c| {
            c.post(1, None);
        },
    );
}

#[test]
fn empty_data_flood() {
    control_flood(
        |c, _| {
            c.data(1, b"", false);
        },
        |c| {
            c.post(1, None);
        },
    );
}

#[test]
fn empty_field_block_frames_flood() {
    // Blocks of an empty HEADERS and an empty CONTINUATION on a stream this
    // side reset: three frames of no use each (two empty, one ignored).
    let (mut s, mut c) = Server::ready(defaults());
    c.post(1, None);
    s.feed(&c.take());
    s.conn.reset(1, ErrorCode::Cancel, &mut s.out);
    let empty_block = |c: &mut Client, _| {
        frame(1, flags::END_STREAM, 1, b"", &mut c.wire);
        frame(9, flags::END_HEADERS, 1, b"", &mut c.wire);
    };
    let budget = CONTROL_FRAME_BUDGET_BASE + CONTROL_FRAMES_PER_REQUEST - HANDSHAKE_FRAMES;
    flood(&mut s, &mut c, budget / 3, empty_block);
    assert!(!s.conn.is_closed());
    flood(&mut s, &mut c, 1, empty_block);
    assert_closed(&mut s, 1, ErrorCode::EnhanceYourCalm);
}

#[test]
fn unknown_frame_flood() {
    control_flood(
        |c, _| {
            frame(0xfa, 0, 0, b"", &mut c.wire);
        },
        |_| {},
    );
}

#[test]
fn frames_on_closed_streams_are_budgeted() {
    control_flood(
        |c, i| {
            if i % 2 == 0 {
                c.window_update(1, 1);
            } else {
                c.rst(1, ErrorCode::Cancel);
            }
        },
        |c| {
            c.get(1).rst(1, ErrorCode::Cancel);
        },
    );
}

#[test]
fn the_control_budget_grows_with_requests() {
    control_flood(
        |c, i| {
            c.ping(i.to_be_bytes());
        },
        |c| {
            for id in (1..).step_by(2).take(20) {
                c.get(id);
            }
        },
    );
}

#[test]
fn window_updates_after_data_sent_are_not_counted() {
    let settings = ServerSettings {
        max_concurrent_streams: 1,
        ..defaults()
    };
    let (mut s, mut c) = Server::ready(settings);
    c.get(1);
    s.feed(&c.take());
    s.conn.send_headers(1, 200, &[], false, &mut s.out);
    for _ in 0..CONTROL_FRAME_BUDGET_BASE + 10 {
        s.conn.send_data(1, 1, false, &mut s.out);
        s.out.push(b'x');
        c.window_update(1, 1).window_update(0, 1);
        s.feed(&c.take());
    }
    assert!(!s.conn.is_closed());
    assert_eq!(s.conn.send_window(1), 65_535);
}

#[test]
fn replies_stop_reading_at_the_high_water_mark() {
    let (mut s, mut c) = Server::ready(defaults());
    for i in 0..5000u64 {
        c.ping(i.to_be_bytes());
    }
    let input = c.take();
    let mut out = Vec::new();
    let used = s.conn.receive(&input, &mut out, &mut |_| {});
    assert!(used < input.len());
    assert_eq!(used % 17, 0);
    assert!(out.len() > CONTROL_HIGH_WATER);
    assert!(out.len() <= CONTROL_HIGH_WATER + 17);
    // Called again once the glue has sent it, it goes on.
    let more = s.conn.receive(&input[used..], &mut Vec::new(), &mut |_| {});
    assert_eq!(used + more, input.len());
    assert!(!s.conn.is_closed());
}

// Replays: the same conversation however it is cut.

/// A client's side of a conversation: settings, several requests with
/// bodies (padded, chunked, with trailers), field blocks split over
/// CONTINUATION frames, window updates, pings, priorities, resets, stream
/// errors and a GOAWAY.
fn conversation() -> Vec<u8> {
    let mut c = Client::new();
    c.settings(&[
        Setting::HeaderTableSize(1024),
        Setting::InitialWindowSize(100_000),
        Setting::MaxFrameSize(20_000),
    ])
    .window_update(0, 1_000_000)
    .headers(1, &with(&GET, &[("priority", "u=1, i")]), true)
    .post(3, Some(10))
    .data(3, b"hello", false)
    .ping(*b"pingpong")
    .padded_data(3, b"world", 3, true)
    .settings_ack()
    .post(5, None)
    .data(5, b"chunk", false)
    .priority_update(5, "u=6")
    .headers(5, &[("x-trailer", "t")], true);
    let block = c.block(&with(&POST, &[("x-long", &"l".repeat(40))]));
    write_headers(7, &block, false, 16, &mut c.wire);
    c.rst(7, ErrorCode::Cancel)
        .priority(9, 1)
        .priority_update(11, "u=0")
        .window_update(1, 10)
        .get(11)
        .get(13)
        .window_update(13, 0) // a stream error
        .data(13, b"late", false); // on a stream this side reset: ignored
    frame(0xfa, 0, 0, b"unknown", &mut c.wire);
    c.post(15, Some(3))
        .data(15, b"abcd", true) // past its content-length
        .headers(17, &with(&GET, &[("X-Bad", "1")]), true)
        .goaway(17, ErrorCode::NoError)
        .ping(*b"lastping");
    c.take()
}

/// The same conversation ending with a connection error, and bytes after it.
fn conversation_ending_in_error() -> Vec<u8> {
    let mut input = conversation();
    let mut c = Client::bare();
    c.data(99, b"idle", true).ping(*b"unread!!");
    input.extend(c.take());
    input
}

/// What feeding `input` cut at `cuts` gave: events, output, bytes left
/// unread and the error met.
fn replay(
    input: &[u8],
    cuts: impl IntoIterator<Item = usize>,
) -> (Vec<Ev>, Vec<u8>, usize, Option<ErrorCode>) {
    let mut s = Server::new(defaults());
    let mut at = 0;
    for cut in cuts.into_iter().chain([input.len()]) {
        s.feed(&input[at..cut]);
        at = cut;
    }
    (s.events(), s.out, s.input.len(), s.conn.error())
}

#[test]
fn a_conversation_reads_the_same_however_it_is_cut() {
    for input in [conversation(), conversation_ending_in_error()] {
        let whole = replay(&input, []);
        for cut in 0..=input.len() {
            assert_eq!(replay(&input, [cut]), whole, "cut at {cut}");
        }
        assert_eq!(replay(&input, 0..input.len()), whole, "byte by byte");
    }
}

#[test]
fn the_conversation_does_what_it_says() {
    let (events, out, left, error) = replay(&conversation(), []);
    assert_eq!(left, 0);
    assert_eq!(error, None);
    let requests: Vec<u32> = events
        .iter()
        .filter_map(|e| match e {
            Ev::Request { stream, .. } => Some(*stream),
            _ => None,
        })
        .collect();
    assert_eq!(requests, [1, 3, 5, 7, 11, 13, 15]);
    assert!(events.contains(&data(3, b"world", true)));
    assert!(events.contains(&data(5, b"", true)));
    assert!(events.contains(&Ev::Reset {
        stream: 7,
        code: ErrorCode::Cancel
    }));
    assert!(events.contains(&Ev::PriorityChanged {
        stream: 5,
        priority: prio(6, false)
    }));
    assert!(events.contains(&Ev::GoAway {
        last_stream_id: 17,
        code: ErrorCode::NoError
    }));
    assert!(matches!(
        events.iter().find(|e| matches!(e, Ev::Request { stream: 11, .. })),
        Some(Ev::Request { priority, .. }) if *priority == prio(0, false)
    ));
    let mut s = Server::new(defaults());
    s.out = out;
    let sent = s.sent();
    let rsts: Vec<_> = sent.iter().filter(|f| matches!(f, Sent::Rst(..))).collect();
    assert_eq!(
        rsts,
        [
            &Sent::Rst(13, ErrorCode::ProtocolError),
            &Sent::Rst(15, ErrorCode::ProtocolError),
            &Sent::Rst(17, ErrorCode::ProtocolError),
        ]
    );
    assert_eq!(sent.iter().filter(|f| **f == Sent::SettingsAck).count(), 2);
    assert!(sent.contains(&Sent::PingAck(*b"lastping")));

    let (_, _, left, error) = replay(&conversation_ending_in_error(), []);
    assert_eq!(error, Some(ErrorCode::ProtocolError));
    assert_eq!(left, 2 * 9 + 4 + 8);
}

// The cases of h2spec (github.com/summerwind/h2spec, http2/) about the
// connection, each answered as h2spec accepts.

/// Any of these codes on an RST_STREAM or a GOAWAY.
fn assert_stream_error(s: &mut Server, codes: &[ErrorCode]) {
    let sent = s.sent();
    assert!(
        sent.iter().any(|f| matches!(f,
            Sent::Rst(_, code) | Sent::GoAway(_, code) if codes.contains(code))),
        "{sent:?} has no {codes:?}"
    );
}

/// Any of these codes on a GOAWAY, the connection closed.
fn assert_connection_error(s: &mut Server, codes: &[ErrorCode]) {
    let sent = s.sent();
    assert!(
        sent.iter()
            .any(|f| matches!(f, Sent::GoAway(_, code) if codes.contains(code))),
        "{sent:?} has no GOAWAY with {codes:?}"
    );
    assert!(s.conn.is_closed());
}

/// The client's frames after the handshake.
fn h2spec(send: impl FnOnce(&mut Client)) -> Server {
    let (mut s, mut c) = Server::ready(defaults());
    send(&mut c);
    s.feed(&c.take());
    s
}

fn ping_answered(mut s: Server) {
    let mut c = Client::bare();
    c.ping(*b"h2spec!!");
    s.feed(&c.take());
    assert!(s.sent().contains(&Sent::PingAck(*b"h2spec!!")));
}

use ErrorCode::{
    CompressionError as COMPRESSION, FlowControlError as FLOW_CONTROL,
    FrameSizeError as FRAME_SIZE, ProtocolError as PROTOCOL, RefusedStream as REFUSED,
    StreamClosed as STREAM_CLOSED,
};

/// h2spec's dummy header: a long field, so that a few pass a frame.
fn dummy(n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| (format!("x-dummy{i}"), "d".repeat(4000)))
        .collect()
}

fn get_with(extra: &[(String, String)]) -> Vec<(&str, &str)> {
    GET.iter()
        .copied()
        .chain(extra.iter().map(|(n, v)| (n.as_str(), v.as_str())))
        .collect()
}

#[test]
fn h2spec_3_5_connection_preface() {
    let mut s = Server::new(defaults());
    assert!(matches!(s.sent()[0], Sent::Settings(_)));
    let mut s = Server::new(defaults());
    s.sent();
    s.feed(b"INVALID CONNECTION PREFACE\r\n\r\n");
    assert_connection_error(&mut s, &[PROTOCOL]);
}

#[test]
fn h2spec_4_1_frame_format() {
    // Unknown type, undefined flags, the reserved bit: all ignored.
    ping_answered(h2spec(|c| {
        c.raw(b"\x00\x00\x08\x16\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00");
    }));
    let s = h2spec(|c| {
        c.raw(b"\x00\x00\x08\x06\x16\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00");
    });
    ping_answered(s);
    let mut s = h2spec(|c| {
        c.raw(b"\x00\x00\x08\x06\x16\x80\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00");
    });
    assert_eq!(s.sent(), [Sent::PingAck([0; 8])]);
}

#[test]
fn h2spec_4_2_frame_size() {
    let mut s = h2spec(|c| {
        c.headers(1, &GET, false).data(1, &[b'x'; 16_384], true);
    });
    assert_eq!(s.events()[1], data(1, &[b'x'; 16_384], true));
    let mut s = h2spec(|c| {
        c.headers(1, &GET, false).data(1, &[b'x'; 16_385], true);
    });
    assert_stream_error(&mut s, &[FRAME_SIZE]);
    let mut s = h2spec(|c| {
        // Five of h2spec's; HPACK makes these shorter.
        let dummies = dummy(8);
        let fields = get_with(&dummies);
        let block = c.block(&fields);
        frame(
            1,
            flags::END_HEADERS | flags::END_STREAM,
            1,
            &block,
            &mut c.wire,
        );
    });
    assert_connection_error(&mut s, &[FRAME_SIZE]);
}

#[test]
fn h2spec_4_3_header_compression_and_decompression() {
    let mut s = h2spec(|c| {
        c.raw(b"\x00\x00\x01\x01\x05\x00\x00\x00\x01\x40");
    });
    assert_connection_error(&mut s, &[COMPRESSION]);
    let mut s = h2spec(|c| {
        let block = c.block(&GET);
        frame(1, flags::END_STREAM, 1, &block, &mut c.wire);
        c.priority(1, 0);
        let dummy = c.block(&get_with(&dummy(1))[4..]);
        frame(9, flags::END_HEADERS, 1, &dummy, &mut c.wire);
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
    let mut s = h2spec(|c| {
        let block = c.block(&GET);
        frame(1, flags::END_STREAM, 1, &block, &mut c.wire);
        frame(1, flags::END_STREAM, 3, &block, &mut c.wire);
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
}

#[test]
fn h2spec_5_1_stream_states_idle() {
    let mut s = h2spec(|c| {
        c.data(1, b"test", true);
    });
    assert_stream_error(&mut s, &[PROTOCOL, STREAM_CLOSED]);
    let mut s = h2spec(|c| {
        c.rst(1, ErrorCode::Cancel);
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
    let mut s = h2spec(|c| {
        c.window_update(1, 100);
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
    let mut s = h2spec(|c| {
        let block = c.block(&GET);
        frame(9, flags::END_HEADERS, 1, &block, &mut c.wire);
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
}

#[test]
fn h2spec_5_1_stream_states_half_closed_remote() {
    let mut s = h2spec(|c| {
        c.get(1).data(1, b"test", true);
    });
    assert_stream_error(&mut s, &[STREAM_CLOSED]);
    let mut s = h2spec(|c| {
        c.get(1).get(1);
    });
    assert_stream_error(&mut s, &[STREAM_CLOSED]);
    let mut s = h2spec(|c| {
        c.get(1);
        let block = c.block(&get_with(&dummy(1))[4..]);
        frame(9, flags::END_HEADERS, 1, &block, &mut c.wire);
    });
    assert_stream_error(&mut s, &[STREAM_CLOSED, PROTOCOL]);
}

#[test]
fn h2spec_5_1_stream_states_closed_after_rst_stream() {
    let mut s = h2spec(|c| {
        c.headers(1, &GET, false)
            .rst(1, ErrorCode::Cancel)
            .data(1, b"test", true);
    });
    assert_stream_error(&mut s, &[STREAM_CLOSED]);
    let mut s = h2spec(|c| {
        c.headers(1, &GET, false)
            .rst(1, ErrorCode::Cancel)
            .headers(1, &GET, true);
    });
    assert_stream_error(&mut s, &[STREAM_CLOSED]);
    let mut s = h2spec(|c| {
        c.headers(1, &GET, false).rst(1, ErrorCode::Cancel);
        let block = c.block(&get_with(&dummy(1))[4..]);
        frame(9, flags::END_HEADERS, 1, &block, &mut c.wire);
    });
    assert_stream_error(&mut s, &[STREAM_CLOSED, PROTOCOL]);
}

#[test]
fn h2spec_5_1_stream_states_closed() {
    for last in 0..3 {
        let (mut s, mut c) = Server::ready(defaults());
        c.get(1);
        s.feed(&c.take());
        s.respond(1, 4);
        s.sent();
        match last {
            0 => {
                c.data(1, b"test", true);
                s.feed(&c.take());
                assert_stream_error(&mut s, &[STREAM_CLOSED]);
            }
            1 => {
                c.get(1);
                s.feed(&c.take());
                assert_connection_error(&mut s, &[STREAM_CLOSED]);
            }
            _ => {
                let block = c.block(&get_with(&dummy(1))[4..]);
                frame(9, flags::END_HEADERS, 1, &block, &mut c.wire);
                s.feed(&c.take());
                assert_connection_error(&mut s, &[STREAM_CLOSED, PROTOCOL]);
            }
        }
    }
}

#[test]
fn h2spec_5_1_1_stream_identifiers() {
    let mut s = h2spec(|c| {
        c.headers(2, &GET, true);
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
    let mut s = h2spec(|c| {
        c.get(5).get(3);
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
}

#[test]
fn h2spec_5_1_2_stream_concurrency() {
    let (mut s, mut c) = Server::ready(defaults());
    // A window of 0, so that no response could complete meanwhile.
    c.settings(&[Setting::InitialWindowSize(0)]);
    for id in (1..)
        .step_by(2)
        .take(DEFAULT_MAX_CONCURRENT_STREAMS as usize + 1)
    {
        c.get(id);
    }
    s.feed(&c.take());
    assert_stream_error(&mut s, &[PROTOCOL, REFUSED]);
}

#[test]
fn h2spec_5_3_1_stream_dependencies() {
    let mut s = h2spec(|c| {
        c.headers_with_priority(1, 1, &GET, true);
    });
    assert_stream_error(&mut s, &[PROTOCOL]);
    let mut s = h2spec(|c| {
        c.priority(1, 1);
    });
    assert_stream_error(&mut s, &[PROTOCOL]);
}

#[test]
fn h2spec_5_4_1_connection_error_handling() {
    let mut s = h2spec(|c| {
        c.raw(b"\x00\x00\x08\x06\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x00");
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
}

#[test]
fn h2spec_5_5_extending_http2() {
    ping_answered(h2spec(|c| {
        c.raw(b"\x00\x00\x08\x16\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00");
    }));
    let mut s = h2spec(|c| {
        let block = c.block(&GET);
        frame(1, flags::END_STREAM, 1, &block, &mut c.wire);
        c.raw(b"\x00\x00\x08\x16\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00");
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
}

#[test]
fn h2spec_6_1_data() {
    let mut s = h2spec(|c| {
        frame(0, flags::END_STREAM, 0, b"test", &mut c.wire);
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
    let mut s = h2spec(|c| {
        c.get(1).data(1, b"test", true);
    });
    assert_stream_error(&mut s, &[STREAM_CLOSED]);
    let mut s = h2spec(|c| {
        c.headers(1, &with(&POST, &[("content-length", "4")]), false)
            .raw(b"\x00\x00\x05\x00\x09\x00\x00\x00\x01\x06\x54\x65\x73\x74");
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
}

#[test]
fn h2spec_6_2_headers() {
    let mut s = h2spec(|c| {
        let block = c.block(&GET);
        frame(1, flags::END_STREAM, 1, &block, &mut c.wire);
        c.priority(1, 0);
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
    let mut s = h2spec(|c| {
        let block = c.block(&GET);
        frame(
            1,
            flags::END_HEADERS | flags::END_STREAM,
            0,
            &block,
            &mut c.wire,
        );
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
    let mut s = h2spec(|c| {
        let block = c.block(&GET);
        let mut payload = vec![block.len() as u8 + 2];
        payload.extend_from_slice(&block);
        frame(1, 0x0d, 1, &payload, &mut c.wire);
    });
    assert_stream_error(&mut s, &[PROTOCOL]);
}

#[test]
fn h2spec_6_3_priority() {
    let mut s = h2spec(|c| {
        c.priority(0, 1);
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
    let mut s = h2spec(|c| {
        c.headers(1, &GET, false)
            .raw(b"\x00\x00\x04\x02\x00\x00\x00\x00\x01\x80\x00\x00\x01");
    });
    assert_stream_error(&mut s, &[FRAME_SIZE]);
    // Only the stream: the connection goes on.
    ping_answered(s);
    // As h2spec sends it to a server that answers at once: the stream is closed both ways
    // when the PRIORITY comes, and the error is still said.
    let (mut s, mut c) = Server::ready(defaults());
    c.headers(1, &GET, true);
    s.feed(&c.take());
    let mut out = Vec::new();
    s.conn.send_headers(1, 204, &[], true, &mut out);
    s.sent();
    let mut c = Client::bare();
    c.raw(b"\x00\x00\x04\x02\x00\x00\x00\x00\x01\x80\x00\x00\x01");
    s.feed(&c.take());
    assert_stream_error(&mut s, &[FRAME_SIZE]);
    ping_answered(s);
}

#[test]
fn h2spec_6_4_rst_stream() {
    let mut s = h2spec(|c| {
        c.raw(b"\x00\x00\x04\x03\x00\x00\x00\x00\x00\x00\x00\x00\x08");
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
    let mut s = h2spec(|c| {
        c.rst(1, ErrorCode::Cancel);
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
    let mut s = h2spec(|c| {
        c.headers(1, &GET, false)
            .raw(b"\x00\x00\x03\x03\x00\x00\x00\x00\x01\x00\x00\x00");
    });
    assert_stream_error(&mut s, &[FRAME_SIZE]);
}

#[test]
fn h2spec_6_5_settings() {
    let mut s = h2spec(|c| {
        c.raw(b"\x00\x00\x01\x04\x01\x00\x00\x00\x00\x00");
    });
    assert_connection_error(&mut s, &[FRAME_SIZE]);
    let mut s = h2spec(|c| {
        c.raw(b"\x00\x00\x06\x04\x00\x00\x00\x00\x01\x00\x03\x00\x00\x00\x64");
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
    let mut s = h2spec(|c| {
        c.raw(b"\x00\x00\x03\x04\x00\x00\x00\x00\x00\x00\x03\x00");
    });
    assert_stream_error(&mut s, &[FRAME_SIZE]);
}

#[test]
fn h2spec_6_5_2_defined_settings_parameters() {
    let bad = [
        (2u16, 2u32, PROTOCOL),
        (4, 1 << 31, FLOW_CONTROL),
        (5, 16_383, PROTOCOL),
        (5, 1 << 24, PROTOCOL),
    ];
    for (id, value, code) in bad {
        let mut s = h2spec(|c| {
            let mut payload = id.to_be_bytes().to_vec();
            payload.extend_from_slice(&value.to_be_bytes());
            frame(4, 0, 0, &payload, &mut c.wire);
        });
        assert_connection_error(&mut s, &[code]);
    }
    ping_answered(h2spec(|c| {
        frame(4, 0, 0, b"\x00\xff\x00\x00\x00\x00", &mut c.wire);
    }));
}

#[test]
fn h2spec_6_5_3_settings_synchronization() {
    let mut s = h2spec(|c| {
        c.settings(&[
            Setting::InitialWindowSize(100),
            Setting::InitialWindowSize(1),
        ])
        .get(1);
    });
    assert_eq!(s.sent(), [Sent::SettingsAck]);
    assert_eq!(s.conn.send_window(1), 1);
    let mut s = h2spec(|c| {
        c.settings(&[Setting::EnablePush(false)]);
    });
    assert_eq!(s.sent(), [Sent::SettingsAck]);
}

#[test]
fn h2spec_6_7_ping() {
    let mut s = h2spec(|c| {
        c.ping(*b"h2spec\0\0");
    });
    assert_eq!(s.sent(), [Sent::PingAck(*b"h2spec\0\0")]);
    let mut s = h2spec(|c| {
        c.raw(b"\x00\x00\x08\x06\x01\x00\x00\x00\x00unexpect")
            .ping(*b"expected");
    });
    assert_eq!(s.sent(), [Sent::PingAck(*b"expected")]);
    let mut s = h2spec(|c| {
        c.raw(b"\x00\x00\x08\x06\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00");
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
    let mut s = h2spec(|c| {
        c.raw(b"\x00\x00\x06\x06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00");
    });
    assert_connection_error(&mut s, &[FRAME_SIZE]);
}

#[test]
fn h2spec_6_8_goaway() {
    let mut s = h2spec(|c| {
        c.raw(b"\x00\x00\x08\x07\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00");
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
}

#[test]
fn h2spec_6_9_window_update() {
    let mut s = h2spec(|c| {
        c.window_update(0, 0);
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
    let mut s = h2spec(|c| {
        c.headers(1, &GET, false).window_update(1, 0);
    });
    assert_stream_error(&mut s, &[PROTOCOL]);
    let mut s = h2spec(|c| {
        c.raw(b"\x00\x00\x03\x08\x00\x00\x00\x00\x00\x00\x00\x01");
    });
    assert_connection_error(&mut s, &[FRAME_SIZE]);
}

#[test]
fn h2spec_6_9_1_the_flow_control_window() {
    let s = h2spec(|c| {
        c.settings(&[Setting::InitialWindowSize(1)]).get(1);
    });
    assert_eq!(s.conn.send_window(1), 1);
    let mut s = h2spec(|c| {
        c.window_update(0, MAX_WINDOW_SIZE)
            .window_update(0, MAX_WINDOW_SIZE);
    });
    assert_connection_error(&mut s, &[FLOW_CONTROL]);
    let mut s = h2spec(|c| {
        c.headers(1, &GET, false)
            .window_update(1, MAX_WINDOW_SIZE)
            .window_update(1, MAX_WINDOW_SIZE);
    });
    assert_eq!(s.sent(), [Sent::Rst(1, FLOW_CONTROL)]);
}

#[test]
fn h2spec_6_9_2_initial_flow_control_window_size() {
    let (mut s, mut c) = Server::ready(defaults());
    c.settings(&[Setting::InitialWindowSize(0)]).get(1);
    s.feed(&c.take());
    assert_eq!(s.conn.send_window(1), 0);
    c.settings(&[Setting::InitialWindowSize(1)]);
    s.feed(&c.take());
    assert_eq!(s.conn.send_window(1), 1);

    // Negative windows are tracked.
    let (mut s, mut c) = Server::ready(defaults());
    c.settings(&[Setting::InitialWindowSize(3)]).get(1);
    s.feed(&c.take());
    s.conn.send_headers(1, 200, &[], false, &mut s.out);
    s.conn.send_data(1, 3, false, &mut s.out);
    s.out.extend_from_slice(b"abc");
    c.settings(&[Setting::InitialWindowSize(1)])
        .window_update(1, 2);
    s.feed(&c.take());
    assert_eq!(s.conn.send_window(1), 0);
    c.window_update(1, 1);
    s.feed(&c.take());
    assert_eq!(s.conn.send_window(1), 1);

    let mut s = h2spec(|c| {
        c.raw(b"\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x04\x80\x00\x00\x00");
    });
    assert_connection_error(&mut s, &[FLOW_CONTROL]);
}

#[test]
fn h2spec_6_10_continuation() {
    let mut s = h2spec(|c| {
        let block = c.block(&GET);
        frame(1, flags::END_STREAM, 1, &block, &mut c.wire);
        let dummy = c.block(&get_with(&dummy(1))[4..]);
        frame(9, 0, 1, &dummy, &mut c.wire);
        frame(9, flags::END_HEADERS, 1, &dummy, &mut c.wire);
    });
    assert!(matches!(s.events()[..], [Ev::Request { stream: 1, .. }]));
    let dummy_block = |c: &mut Client| c.block(&get_with(&dummy(1))[4..]);
    let cases: [fn(&mut Client, Vec<u8>); 5] = [
        |c, dummy| {
            let block = c.block(&GET);
            frame(1, flags::END_STREAM, 1, &block, &mut c.wire);
            frame(9, 0, 1, &dummy, &mut c.wire);
            c.data(1, b"test", true);
        },
        |c, dummy| {
            let block = c.block(&GET);
            frame(1, flags::END_STREAM, 1, &block, &mut c.wire);
            frame(9, flags::END_HEADERS, 0, &dummy, &mut c.wire);
        },
        |c, dummy| {
            c.get(1);
            frame(9, flags::END_HEADERS, 1, &dummy, &mut c.wire);
        },
        |c, dummy| {
            let block = c.block(&GET);
            frame(1, flags::END_STREAM, 1, &block, &mut c.wire);
            frame(9, flags::END_HEADERS, 1, &dummy, &mut c.wire);
            frame(9, flags::END_HEADERS, 1, &dummy, &mut c.wire);
        },
        |c, dummy| {
            c.headers(1, &GET, false).data(1, b"test", true);
            frame(9, 0, 1, &dummy, &mut c.wire);
            frame(9, flags::END_HEADERS, 0, &dummy, &mut c.wire);
        },
    ];
    for case in cases {
        let mut s = h2spec(|c| {
            let dummy = dummy_block(c);
            case(c, dummy)
        });
        assert_connection_error(&mut s, &[PROTOCOL]);
    }
}

#[test]
fn h2spec_7_error_codes() {
    let s = h2spec(|c| {
        c.raw(b"\x00\x00\x08\x07\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff");
    });
    ping_answered(s);
    let s = h2spec(|c| {
        c.headers(1, &GET, false)
            .raw(b"\x00\x00\x04\x03\x00\x00\x00\x00\x01\x00\x00\x00\xff");
    });
    ping_answered(s);
}

#[test]
fn h2spec_8_1_http_request_response_exchange() {
    let mut s = h2spec(|c| {
        c.headers(1, &GET, false)
            .data(1, b"test", false)
            .headers(1, &[("x-test", "ok")], false);
    });
    assert_stream_error(&mut s, &[PROTOCOL]);
}

#[test]
fn h2spec_8_1_2_http_header_fields() {
    let malformed: [&[(&str, &str)]; 14] = [
        &with(&GET, &[("X-TEST", "ok")]),
        &with(&GET, &[(":test", "ok")]),
        &[
            (":method", "GET"),
            (":scheme", "https"),
            (":authority", "a"),
            (":status", "200"),
            (":path", "/"),
        ],
        &[
            (":method", "GET"),
            ("x-a", "1"),
            (":scheme", "https"),
            (":authority", "a"),
            (":path", "/"),
        ],
        &with(&GET, &[("connection", "keep-alive")]),
        &with(&GET, &[("te", "trailers, deflate")]),
        &[
            (":method", "GET"),
            (":scheme", "https"),
            (":authority", "a"),
            (":path", ""),
        ],
        &GET[1..],
        &[(":method", "GET"), (":authority", "a"), (":path", "/")],
        &[
            (":method", "GET"),
            (":scheme", "https"),
            (":authority", "a"),
        ],
        &with(&GET, &[(":method", "GET")]),
        &with(&GET, &[(":scheme", "https")]),
        &with(&GET, &[(":path", "/")]),
        &with(&GET, &[("content-length", "1")]),
    ];
    for fields in malformed {
        let mut s = h2spec(|c| {
            c.headers(1, fields, true);
        });
        assert_stream_error(&mut s, &[PROTOCOL]);
    }
}

#[test]
fn h2spec_8_1_2_6_malformed_requests_and_responses() {
    let mut s = h2spec(|c| {
        c.headers(1, &with(&POST, &[("content-length", "1")]), false)
            .data(1, b"test", true);
    });
    assert_stream_error(&mut s, &[PROTOCOL]);
    let mut s = h2spec(|c| {
        c.headers(1, &with(&POST, &[("content-length", "1")]), false)
            .data(1, b"test", false)
            .data(1, b"test", true);
    });
    assert_stream_error(&mut s, &[PROTOCOL]);
}

#[test]
fn h2spec_8_2_server_push() {
    let mut s = h2spec(|c| {
        let block = c.block(&GET);
        let mut payload = 3u32.to_be_bytes().to_vec();
        payload.extend_from_slice(&block);
        frame(5, flags::END_HEADERS, 1, &payload, &mut c.wire);
    });
    assert_connection_error(&mut s, &[PROTOCOL]);
}

// The fuzz target's seeds.

/// Seeds for `fuzz/corpus/h2_connection`: conversations and attacks under
/// the fuzz target's small settings, with the client's preface, each a few
/// hundred bytes (exceeding the connection's window takes 64 KiB, so that
/// one is left to the unit tests). Those named `seed-bad-*` end in a
/// connection error. `FASTPATH_WRITE_H2_CONNECTION_SEEDS=<dir>` writes them
/// there.
fn fuzz_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut seeds = Vec::new();
    let mut seed = |name: &'static str, send: &dyn Fn(&mut Client)| {
        let mut c = Client::new();
        send(&mut c);
        seeds.push((name, c.take()));
    };
    seed("seed-get", &|c| {
        c.get(1);
    });
    seed("seed-gets-sharing-the-table", &|c| {
        for id in [1, 3, 5] {
            c.headers(
                id,
                &with(&GET, &[("accept", "*/*"), ("user-agent", "fuzz")]),
                true,
            );
        }
    });
    seed("seed-post-with-length", &|c| {
        c.post(1, Some(10))
            .data(1, b"hello", false)
            .data(1, b"world", true);
    });
    seed("seed-post-chunked-with-trailers", &|c| {
        c.post(1, None)
            .data(1, b"chunk", false)
            .headers(1, &[("x-t", "1")], true);
    });
    seed("seed-padded-data", &|c| {
        c.post(1, None)
            .padded_data(1, b"abc", 10, false)
            .padded_data(1, b"", 0, true);
    });
    seed("seed-continuation", &|c| {
        let block = c.block(&with(&GET, &[("x-long", &"l".repeat(60))]));
        write_headers(1, &block, true, 16, &mut c.wire);
    });
    seed("seed-priorities", &|c| {
        c.priority_update(3, "u=0, i")
            .headers(1, &with(&GET, &[("priority", "u=5")]), false)
            .priority_update(1, "u=1")
            .get(3)
            .priority(5, 1)
            .headers_with_priority(5, 1, &GET, true);
    });
    seed("seed-window-updates-and-settings", &|c| {
        c.settings_ack()
            .settings(&[
                Setting::InitialWindowSize(10),
                Setting::HeaderTableSize(0),
                Setting::MaxFrameSize(20_000),
            ])
            .get(1)
            .window_update(1, 100)
            .window_update(0, 1000)
            .settings(&[Setting::InitialWindowSize(0)]);
    });
    seed("seed-body-past-the-stream-window", &|c| {
        c.settings_ack()
            .post(1, None)
            .data(1, &[0; 900], false)
            .data(1, &[0; 200], false)
            .get(3);
    });
    seed("seed-pings-and-unknown-frames", &|c| {
        c.ping(*b"12345678")
            .raw(b"\x00\x00\x08\x06\x01\x00\x00\x00\x00unasked!");
        frame(0xfa, 0xff, 7, b"unknown", &mut c.wire);
        c.get(1);
    });
    seed("seed-client-goaway", &|c| {
        c.get(1).goaway(0, ErrorCode::NoError).get(3);
    });
    seed("seed-rapid-reset", &|c| {
        for id in (1..).step_by(2).take(30) {
            c.get(id).rst(id, ErrorCode::Cancel);
        }
    });
    seed("seed-made-you-reset", &|c| {
        for id in (1..).step_by(2).take(10) {
            c.get(id).window_update(id, 0).data(id, b"x", true);
        }
    });
    seed("seed-refused-streams", &|c| {
        for id in (1..).step_by(2).take(6) {
            c.post(id, None);
        }
        c.data(1, b"x", true);
    });
    seed("seed-max-requests", &|c| {
        for id in (1..).step_by(2).take(18) {
            c.get(id).rst(id, ErrorCode::Cancel);
        }
    });
    seed("seed-header-list-too-large", &|c| {
        c.headers(1, &with(&POST, &[("x-big", &"b".repeat(600))]), false)
            .data(1, b"ignored", true)
            .headers(3, &with(&GET, &[("x-big", &"b".repeat(600))]), true);
    });
    seed("seed-malformed-requests", &|c| {
        c.headers(1, &with(&GET, &[("X-Upper", "1")]), true)
            .headers(3, &GET[1..], true)
            .headers(5, &with(&GET, &[("connection", "close")]), true)
            .post(7, Some(1))
            .data(7, b"toolong", true)
            .post(9, None)
            .headers(9, &[("x", "1")], false);
    });
    seed("seed-stream-closed", &|c| {
        c.get(1)
            .data(1, b"x", true)
            .get(3)
            .rst(3, ErrorCode::Cancel)
            .data(3, b"x", true);
    });
    seed("seed-ping-flood", &|c| {
        for i in 0..50u64 {
            c.ping(i.to_be_bytes());
        }
    });
    seed("seed-empty-frames", &|c| {
        c.post(1, None);
        for _ in 0..20 {
            c.data(1, b"", false);
        }
        frame(1, 0, 3, b"", &mut c.wire);
        let block = c.block(&GET);
        frame(9, 0, 3, b"", &mut c.wire);
        frame(9, flags::END_HEADERS, 3, &block, &mut c.wire);
    });
    seed("seed-conversation", &|c| {
        c.raw(&conversation()[PREFACE.len() + 9..]);
    });
    seed("seed-bad-conversation-ending-in-error", &|c| {
        c.raw(&conversation_ending_in_error()[PREFACE.len() + 9..]);
    });
    seed("seed-bad-idle-data", &|c| {
        c.data(1, b"x", true);
    });
    seed("seed-bad-even-stream", &|c| {
        c.headers(2, &GET, true);
    });
    seed("seed-bad-decreasing-stream", &|c| {
        c.get(5).get(3);
    });
    seed("seed-bad-hpack", &|c| {
        frame(
            1,
            flags::END_HEADERS | flags::END_STREAM,
            1,
            &[0x40],
            &mut c.wire,
        );
    });
    seed("seed-bad-connection-window-overflow", &|c| {
        c.window_update(0, MAX_WINDOW_SIZE);
    });
    seed("seed-bad-push-promise", &|c| {
        frame(5, flags::END_HEADERS, 1, &[0, 0, 0, 2, 0x82], &mut c.wire);
    });
    seed("seed-headers-after-reset", &|c| {
        c.get(1).rst(1, ErrorCode::Cancel).get(1).get(1);
    });
    seed("seed-bad-continuation-interrupted", &|c| {
        let block = c.block(&GET);
        frame(1, flags::END_STREAM, 1, &block, &mut c.wire);
        c.ping([0; 8]);
    });
    seed("seed-bad-settings-ack-with-payload", &|c| {
        c.raw(b"\x00\x00\x01\x04\x01\x00\x00\x00\x00\x00");
    });
    seed("seed-bad-self-dependent-priority-on-idle", &|c| {
        c.priority(1, 1);
    });
    seed("seed-bad-first-frame-not-settings", &|c| {
        c.wire.truncate(PREFACE.len());
        c.ping([0; 8]);
    });
    seed("seed-bad-preface", &|c| {
        c.wire.clear();
        c.raw(b"PRI * HTTP/1.1\r\n\r\n");
    });
    seeds
}

#[test]
fn fuzz_seeds_pass_the_fuzz_checks() {
    let seeds = fuzz_seeds();
    assert!(seeds.len() >= 30);
    let dir = std::env::var_os("FASTPATH_WRITE_H2_CONNECTION_SEEDS");
    for (name, data) in seeds {
        crate::fuzzing::h2_connection(&data);
        let (requests, error) = crate::fuzzing::h2_serve(&data);
        assert_eq!(
            error.is_some(),
            name.starts_with("seed-bad-"),
            "{name}: {error:?}"
        );
        assert!(
            requests > 0 || name.starts_with("seed-bad-") || name.contains("flood"),
            "{name} made no request"
        );
        if let Some(dir) = &dir {
            std::fs::write(std::path::Path::new(dir).join(name), &data).unwrap();
        }
    }
}
