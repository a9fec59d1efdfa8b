//! The proxy: a request relayed to a backend over a connection linked to the client's, and
//! its response relayed back.
//!
//! Buffering (per backend, on by default, as nginx's `proxy_request_buffering` and
//! `proxy_buffering` are): a request body is read whole before a backend connection is
//! taken ([`Writing::Buffering`]), and a response is read as fast as the backend sends it,
//! past memory into a temporary file (`Spill`), so a slow client holds neither a backend
//! worker nor a backend connection. Either way a relayed request body is framed anew from
//! what the chunked decoder gave, never passed on as received: by length when read whole, in
//! chunks of fastpath's own when streamed; chunk extensions and trailers are dropped.
//!
//! Each step lends the exchange both connections' buffers once ([`Linked`]): `advance`
//! moves the request and the response as far as they go with those alone and says what
//! comes next ([`Outcome`]); `settle` then does what takes the connection itself (setting
//! the deadline, letting the backend connection go, sending the request again).

use std::io;
use std::time::{Duration, Instant};

use fastpath_drivers::{ConnRef, Io, Linked, Next, PoolKey, Spliced};
use fastpath_http::{
    BodyForwarding, BodyFraming, BodyRelay, ChunkedDecoder, Framing, Http1Body, Recode,
    RecodeOffer, Recoding, ResponseParser, Version,
};

use super::body::{
    forward_body, relay_body, BodyBuffer, BodySink, Coded, OutputSink, Spill, Streaming,
};
use super::{
    pool_key, why_closed, CacheSlot, Progress, Start, BACKEND_FAILED, BACKEND_TIMEOUT, CLIENT_GONE,
};
use crate::{BackendState, Capture, ResponseFields};

/// Client output queued past which relaying from the backend pauses.
const RELAY_HIGH_WATER: u64 = 256 * 1024;
/// Backend output queued past which the client's request body is not read: what the client
/// sends meanwhile has nowhere to go, and TCP holds it back instead of its bytes piling up
/// here. Reading resumes once the backend takes bytes again (its drain wakes the exchange).
const BACKEND_HIGH_WATER: u64 = 64 * 1024;
/// Times a request is sent again after a reused backend connection turned out closed. Each
/// try takes another kept connection or opens a new one; a new one that fails ends it.
const MAX_REPLAYS: u8 = 4;
/// How often a request waiting for a backend connection looks again when nothing else
/// wakes it (a sibling stream letting one go wakes it at once).
const CONNECTION_POLL: Duration = Duration::from_millis(5);
/// Bodies (of requests and responses framed by length) with at least this much left to move
/// go through a kernel pipe (splice) instead of user space. Below it, a pipe's extra system
/// calls cost more than copying the bytes.
const SPLICE_MIN_BODY: u64 = 64 * 1024;

/// The backend connection.
#[derive(Debug, Clone, Copy)]
enum Conn {
    /// Not asked for yet (the first step asks).
    Unasked,
    /// The connect could not even start (no descriptor left, an unusable address).
    CannotStart(io::ErrorKind),
    /// Asked for: a kept one (`reused`) or a new one; `connected` once a byte has moved.
    Open {
        conn: ConnRef,
        reused: bool,
        connected: bool,
    },
}

/// The request side (hyper's `Writing`).
enum Writing {
    /// Reading the body whole before a backend is asked (request buffering).
    Buffering(Box<BodyBuffer>),
    /// The head (and a body read whole) wait to be queued on the backend connection.
    Head,
    /// Streaming a body as it arrives, or done with it.
    Streaming(Streaming),
    /// The rest of a body framed by length moves through a kernel pipe.
    Spliced,
}

/// The response side (hyper's `Reading`).
enum Reading {
    /// Waiting for (the rest of) the response head.
    Head,
    /// Relaying the body; `remaining` counts bytes for `BodyRelay::Length`.
    Body {
        relay: BodyRelay,
        remaining: u64,
        decoder: Option<Box<ChunkedDecoder>>,
        /// Frames what is relayed for the client.
        encoder: Http1Body,
        /// Codes the body on the way (the compress module's filter), when it is.
        filter: Option<Box<Coded>>,
    },
    /// The rest of the body, `len` bytes, moves from the backend through a kernel pipe.
    Spliced { len: u64 },
}

/// What a step's work with both connections' buffers came to; `settle` carries it out.
enum Outcome {
    /// The client connection waits as `next` says, with its deadline as `deadline` says.
    Wait(Next, Deadline),
    /// The response is complete: the backend connection goes (kept if it may be).
    Done,
    /// The backend connection must not carry another request: dropped, then this.
    Drop(Progress),
    /// The backend connection failed (the log says why): sent again, 502, or broken.
    Failed(&'static str),
    /// The response ended with the backend's connection before it began, on a kept
    /// connection: sent again on another.
    Replay,
}

/// What a wait does to the client connection's deadline.
enum Deadline {
    /// Left as it is (the driver pushes it on while a splice moves bytes).
    Keep,
    Set(Instant),
    Clear,
}

/// One request relayed to a backend.
pub struct ProxyExchange {
    /// The backend, by index.
    pub backend: usize,
    address: usize,
    conn: Conn,
    /// The address was counted as an open connection in the backend state.
    counted: bool,
    /// A body read whole waits for a backend connection when the worker's share is in use,
    /// until then, instead of failing with 503 (an HTTP/2 stream, whose siblings hold the
    /// share: see `Start::wait_for_connection`).
    awaiting: Option<Instant>,
    wait_for_connection: bool,
    /// The request head waiting for a connection; kept after sending while the request may
    /// be sent again.
    staged: Vec<u8>,
    /// A body read whole, sent after the head on each connection the request goes to.
    whole: Option<Box<BodyBuffer>>,
    writing: Writing,
    /// What follows the head on the connection: a body streamed as it arrives.
    after_head: Option<Streaming>,
    /// The request may be sent again on another connection if a reused one closes before
    /// answering: an idempotent method and no body, or one read whole (RFC 9110 §9.2.2,
    /// RFC 9112 §9.3.1.1).
    replayable: bool,
    replays: u8,
    reading: Reading,
    parser: Box<ResponseParser>,
    client_version: Version,
    head_request: bool,
    /// The client asked to close after this response.
    pub client_close: bool,
    /// Lines the relayed head carries besides the backend's.
    also: Option<std::sync::Arc<[u8]>>,
    /// Rules the relayed head goes through (a module's).
    edit: Option<std::sync::Arc<dyn fastpath_http::HeadEdit>>,
    /// Asked at the head whether the body is coded on the way.
    recode: Option<Box<dyn RecodeOffer>>,
    /// Status relayed, for the access log.
    pub status: u16,
    /// Body bytes relayed, for the access log.
    pub relayed: u64,
    /// The response is read ahead of the client (response buffering); `None` unbuffered.
    spill: Option<Box<Spill>>,
    /// Decoded bytes of a streamed chunked body, against the backend's `max_body_size`.
    streamed: u64,
    /// What was still to send to the backend when the deadline was last set, while a body
    /// read whole goes to it (see `timed_out`).
    unsent_at_deadline: u64,
    /// The response allows reusing the backend connection.
    reusable: bool,
    /// The connection was seen connected in this step: the backend's health hears of it.
    just_connected: bool,
    /// When the backend must have answered (or connected) by.
    pub deadline: Instant,
    /// Set when the response may be kept in the backend response cache.
    pub cache: Option<CacheSlot>,
    /// When the request was handed over, for the backend response time.
    pub started: Instant,
}

/// What a step works with besides the exchange and the two connections: the backend's
/// settings, read once, and the moment.
struct Context<'a> {
    response_timeout: Duration,
    max_body: u64,
    /// Response buffering's memory, largest file and directory.
    spill: (u64, u64, &'a std::path::Path),
    now: Instant,
    /// The loop can splice bodies.
    can_splice: bool,
    /// The client connection's deadline as the step found it (a splice pushes it on).
    deadline: Option<Instant>,
}

impl ProxyExchange {
    /// Starts an exchange: the backend connection is asked for at its first step, once the
    /// request head has been consumed (or once a body read whole is); `Err(status)` when
    /// none can be used (every address is at the connection limit: 503).
    pub(crate) fn start(
        start: Start,
        backends: &mut [BackendState],
        now: Instant,
        parser: Box<ResponseParser>,
    ) -> Result<ProxyExchange, (u16, Box<ResponseParser>)> {
        let state = &mut backends[start.backend];
        let config = state.config();
        let (body_timeout, connect_timeout, response_buffering) = (
            config.body_timeout,
            config.connect_timeout,
            config.response_buffering,
        );
        let buffered = start.forwarding != BodyForwarding::Streamed;
        let (writing, after_head) = match start.framing {
            BodyFraming::None | BodyFraming::Length(0) => (Writing::Head, None),
            BodyFraming::Length(n) if buffered => (
                Writing::Buffering(Box::new(BodyBuffer::new(Some(n), start.forwarding))),
                None,
            ),
            BodyFraming::Chunked if buffered => (
                Writing::Buffering(Box::new(BodyBuffer::new(None, start.forwarding))),
                None,
            ),
            BodyFraming::Length(n) => (Writing::Head, Some(Streaming::Length(n))),
            BodyFraming::Chunked => (
                Writing::Head,
                Some(Streaming::Chunked(Box::new(ChunkedDecoder::new()))),
            ),
        };
        // A body read whole first takes no backend connection until it is whole: the
        // connect waits, and the deadline is the body's.
        let reading_body = matches!(writing, Writing::Buffering(_));
        let address = if reading_body {
            0
        } else {
            match state.pick(now) {
                Some(address) => address,
                None => return Err((503, parser)),
            }
        };
        let deadline = now
            + if reading_body {
                body_timeout
            } else {
                connect_timeout
            };
        let spill = response_buffering.then(Box::<Spill>::default);
        let counted = !reading_body;
        if counted {
            // Counted now, so the next request sees the connection taken.
            state.opened(address);
        }
        Ok(ProxyExchange {
            backend: start.backend,
            address,
            conn: Conn::Unasked,
            counted,
            awaiting: None,
            wait_for_connection: start.wait_for_connection,
            staged: start.staged,
            whole: None,
            writing,
            // A body read whole can be sent again as well as a request without one.
            replayable: start.idempotent && after_head.is_none(),
            after_head,
            replays: 0,
            reading: Reading::Head,
            parser,
            client_version: start.client_version,
            head_request: start.head_request,
            client_close: start.client_close,
            also: start.also,
            edit: start.edit,
            recode: start.recode,
            status: 0,
            relayed: 0,
            spill,
            streamed: 0,
            unsent_at_deadline: 0,
            reusable: false,
            just_connected: false,
            deadline,
            cache: start.cache,
            started: now,
        })
    }

    /// A graceful stop began: a response whose head is not written yet says
    /// `Connection: close` and the connection closes after it (one already on its way said
    /// keep-alive, and the connection then waits a moment for the client's next request).
    pub(crate) fn close_if_head_unsent(&mut self) {
        if matches!(self.reading, Reading::Head) {
            self.client_close = true;
        }
    }

    /// Whether the response may be read from the backend while the client's output is
    /// still full: buffering, with room left in the temporary file.
    pub(crate) fn reads_ahead(&self) -> bool {
        self.spill.as_ref().is_some_and(|s| !s.full)
    }

    /// The client's HTTP version.
    pub(crate) fn client_version(&self) -> Version {
        self.client_version
    }

    /// The request was HEAD.
    pub(crate) fn is_head(&self) -> bool {
        self.head_request
    }

    /// Part of the request body has not been forwarded or read (it may still be arriving).
    pub(crate) fn body_unsent(&self) -> bool {
        match &self.writing {
            Writing::Buffering(_) | Writing::Spliced => true,
            Writing::Head => self.after_head.is_some(),
            Writing::Streaming(streaming) => !matches!(streaming, Streaming::Done),
        }
    }

    /// What the worker takes back when the exchange is over.
    pub(crate) fn into_parts(self) -> (Box<ResponseParser>, Option<CacheSlot>) {
        (self.parser, self.cache)
    }

    /// The backend connection, once one has been asked for.
    pub(crate) fn link(&self) -> Option<ConnRef> {
        match self.conn {
            Conn::Open { conn, .. } => Some(conn),
            _ => None,
        }
    }

    /// Forgets the connection count when the client connection is gone.
    pub(crate) fn forget(&mut self, backends: &mut [BackendState]) {
        if self.counted {
            backends[self.backend].closed(self.address);
            self.counted = false;
        }
    }

    /// Moves the exchange forward with whatever arrived on either side.
    pub(crate) fn step(&mut self, backends: &mut [BackendState], io: &mut Io<'_>) -> Progress {
        if let Writing::Buffering(_) = self.writing {
            return self.buffer_body(backends, io);
        }
        if self.awaiting.is_some() {
            if let Some(progress) = self.take_connection(backends, io) {
                return progress;
            }
        }
        let conn = match self.conn {
            Conn::Unasked => {
                self.connect(backends, io);
                return self.step(backends, io);
            }
            Conn::CannotStart(kind) => {
                return self.connection_failed(backends, io, &format!("{kind:?}"))
            }
            Conn::Open { conn, .. } => conn,
        };
        let config = backends[self.backend].config();
        let cx = Context {
            response_timeout: config.response_timeout,
            max_body: config.max_body_size,
            spill: (
                config.response_buffer_memory,
                config.max_temp_file_size,
                config.temp_dir.as_path(),
            ),
            now: io.now(),
            can_splice: io.can_splice(),
            deadline: io.deadline(),
        };
        let outcome = match io.linked(conn) {
            Ok(mut linked) => {
                let outcome = self.advance(&mut linked, &cx);
                if self.waits_on_output() {
                    linked.wake_when_sent();
                }
                outcome
            }
            Err(reason) => Outcome::Failed(why_closed(reason)),
        };
        if std::mem::take(&mut self.just_connected) {
            backends[self.backend].succeeded(self.address);
        }
        self.settle(outcome, backends, io)
    }

    /// The exchange's next step waits on the request's bytes leaving, not only on the
    /// response: the connect is confirmed by them (the response timeout starts), a body read
    /// whole has gone (it starts again), or a streamed body has room to go on. Otherwise a
    /// request queued whole (a GET to a kept connection) needs no call until the answer.
    fn waits_on_output(&self) -> bool {
        let connected = matches!(
            self.conn,
            Conn::Open {
                connected: true,
                ..
            }
        );
        !connected
            || self.unsent_at_deadline > 0
            || matches!(
                self.writing,
                Writing::Streaming(Streaming::Length(_) | Streaming::Chunked(_))
            )
    }

    /// The request and the response moved as far as they go with both connections'
    /// buffers, the backend's stream in `linked`.
    fn advance(&mut self, linked: &mut Linked<'_>, cx: &Context<'_>) -> Outcome {
        if let Writing::Head = self.writing {
            // The head, then a body read whole, on this connection.
            linked
                .output
                .write_with(linked.pool, |b| b.extend_from_slice(&self.staged));
            if let Some(whole) = &self.whole {
                whole.send(linked.output, linked.pool);
                self.unsent_at_deadline = linked.output.pending();
            }
            if !self.replayable {
                // Never sent again: a connection need not hold it for its life.
                self.staged = Vec::new();
            }
            self.writing = Writing::Streaming(self.after_head.take().unwrap_or(Streaming::Done));
        }
        if let Some(outcome) = self.forward(linked, cx) {
            return outcome;
        }
        let connected = linked.connected();
        if !connected {
            // The request waits in the connection's output; the client is not read
            // meanwhile, so that a body has nowhere to pile up.
            return Outcome::Wait(Next::Wait, Deadline::Set(self.deadline));
        }
        if let Conn::Open {
            connected: seen, ..
        } = &mut self.conn
        {
            if !*seen {
                *seen = true;
                self.just_connected = true;
                self.deadline = cx.now + cx.response_timeout;
            }
        }
        let unsent = linked.output.pending();
        if self.unsent_at_deadline > 0 && unsent == 0 {
            // The last of a body read whole has gone to the backend: the request has ended
            // here, and the response timeout counts from now.
            self.unsent_at_deadline = 0;
            self.deadline = cx.now + cx.response_timeout;
        }
        match self.receive(linked, cx) {
            // A body still to forward waits while the backend takes no more of it.
            Outcome::Wait(Next::Read, deadline)
                if unsent >= BACKEND_HIGH_WATER
                    && matches!(
                        self.writing,
                        Writing::Streaming(Streaming::Length(_) | Streaming::Chunked(_))
                    ) =>
            {
                Outcome::Wait(Next::Wait, deadline)
            }
            outcome => outcome,
        }
    }

    /// The request body, streamed (copied, or spliced once it is long): `Some` when the
    /// exchange cannot go on.
    fn forward(&mut self, linked: &mut Linked<'_>, cx: &Context<'_>) -> Option<Outcome> {
        if let Writing::Streaming(body) = &mut self.writing {
            if linked.output.pending() < RELAY_HIGH_WATER {
                match forward_body(
                    body,
                    linked.own_input,
                    linked.output,
                    linked.pool,
                    &mut self.streamed,
                    cx.max_body,
                ) {
                    Ok(0) => {}
                    // The response timeout counts from the end of the request: a body that
                    // takes longer than it to upload is not a backend failing to answer.
                    Ok(_) => self.deadline = cx.now + cx.response_timeout,
                    Err(status) => {
                        // The backend has part of a body that will never be whole. A
                        // response already begun cannot be followed by an error page.
                        return Some(Outcome::Drop(if self.status == 0 {
                            Progress::Failed(status)
                        } else {
                            Progress::Broken(CLIENT_GONE)
                        }));
                    }
                }
                if let Streaming::Length(left) = *body {
                    if left >= SPLICE_MIN_BODY
                        && linked.own_input.is_empty()
                        && cx.can_splice
                        && !linked.is_new()
                    {
                        linked.splice_out(left, cx.response_timeout);
                        self.writing = Writing::Spliced;
                    }
                }
            }
        }
        if let Writing::Spliced = self.writing {
            match linked.spliced_out() {
                // The driver pushes the client connection's deadline on while bytes move.
                Spliced::Running => {
                    if let Some(moving) = cx.deadline {
                        self.deadline = self.deadline.max(moving);
                    }
                }
                Spliced::Done => {
                    self.writing = Writing::Streaming(Streaming::Done);
                    self.deadline = cx.now + cx.response_timeout;
                }
                // The client stopped sending in the middle of the body, or the backend
                // stopped taking it.
                Spliced::Failed(kind) => {
                    let why = if kind == io::ErrorKind::UnexpectedEof {
                        CLIENT_GONE
                    } else {
                        BACKEND_FAILED
                    };
                    return Some(Outcome::Drop(Progress::Broken(why)));
                }
                Spliced::None => return Some(Outcome::Drop(Progress::Broken(BACKEND_FAILED))),
            }
        }
        None
    }

    /// The response side: the head (after any interim ones), then the body.
    fn receive(&mut self, linked: &mut Linked<'_>, cx: &Context<'_>) -> Outcome {
        let ended = linked.eof();
        loop {
            // Buffering, the backend is read whatever the client's pace (see `Spill`).
            if linked.own_output.pending() >= RELAY_HIGH_WATER && !self.reads_ahead() {
                return Outcome::Wait(Next::Drain, Deadline::Clear);
            }
            match self.reading {
                Reading::Head => {}
                Reading::Body { .. } | Reading::Spliced { .. } => {
                    return self.receive_body(linked, cx, ended);
                }
            }
            match self.receive_head(linked) {
                // Relayed (an interim head, or the final one): go on with what follows.
                Ok(true) => continue,
                Ok(false) if ended && linked.input.is_empty() && self.may_replay() => {
                    return Outcome::Replay;
                }
                Ok(false) if ended => {
                    self.parser.reset();
                    return Outcome::Drop(Progress::Failed(502));
                }
                Ok(false) => return Outcome::Wait(Next::Read, Deadline::Set(self.deadline)),
                Err(()) => {
                    self.parser.reset();
                    return Outcome::Drop(Progress::Failed(502));
                }
            }
        }
    }

    /// Reads and relays a response head if a whole one has arrived: `Ok(false)` if not
    /// yet, `Err` if the backend broke the protocol (the client gets 502).
    fn receive_head(&mut self, linked: &mut Linked<'_>) -> Result<bool, ()> {
        let body_unsent = self.body_unsent();
        let input = &mut *linked.input;
        let head = match self.parser.parse(input.data(), self.head_request) {
            Ok(Some(head)) => head,
            Ok(None) => return Ok(false),
            Err(e) => {
                tracing::warn!("backend sent a bad response: {e}");
                return Err(());
            }
        };
        let head_len = head.head_len;
        let status = head.status;
        if status == 101 {
            // Upgrade is never passed on in proxy mode, so a switch of protocols is the
            // backend's error (RFC 9110 §15.2.2); nothing HTTP follows.
            tracing::warn!("backend switched protocols unasked");
            return Err(());
        }
        if (100..200).contains(&status) {
            // Interim responses go to 1.1 clients as they are; the final one follows.
            if self.client_version == Version::Http11 {
                let bytes = &input.data()[..head_len];
                linked
                    .own_output
                    .write_with(linked.pool, |b| b.extend_from_slice(bytes));
            }
            self.parser.reset();
            input.consume(head_len);
            return Ok(true);
        }
        self.reusable = head.keep_alive;
        let framing = head.framing;
        let recode = match &self.recode {
            Some(offer) => offer.consider(&head),
            None => Recode::Unchanged,
        };
        let recoding = recode.head();
        if let Some(slot) = self.cache.as_mut() {
            // Read once, for the lifetime, the key and the copy kept.
            let fields = ResponseFields::read(head.headers());
            if let Some(ttl) = fields.lifetime("GET", false, status) {
                slot.expires = Some(slot.since + ttl);
                // A response coded for this client's Accept-Encoding, or one that would
                // have been for another's, is kept per Accept-Encoding.
                slot.vary = fields.varies_on_accept_encoding() || recoding != Recoding::Unchanged;
                // The cache keeps its own copy of the head, from the parsed one.
                slot.capture = Capture::new(&head, self.client_version, &fields, recoding);
            }
            if slot.capture.is_none() {
                // Nothing will be kept: requests waiting for this fetch go to the backend
                // now, not when this body has been relayed.
                if let Some(fill) = slot.fill.take() {
                    fill.pass(slot.since);
                }
            }
        }
        if body_unsent {
            // The backend answered before taking the whole request body (say, 401 to an
            // `Expect: 100-continue`). What the client still sends is body, never a
            // request, so the connection closes after this response (RFC 9110 §10.1.1)
            // and says so.
            self.client_close = true;
        }
        let (relay, encoder) = fastpath_http::start_relayed_response(
            &head,
            (self.client_version, self.client_close),
            (
                self.also.as_deref().unwrap_or_default(),
                self.edit.as_deref(),
            ),
            recoding,
            &mut OutputSink {
                output: linked.own_output,
                pool: linked.pool,
            },
        );
        self.parser.reset();
        input.consume(head_len);
        self.status = status;
        let remaining = match framing {
            fastpath_http::ResponseFraming::Length(n) => n,
            _ => 0,
        };
        let decoder = matches!(relay, BodyRelay::Chunked | BodyRelay::Dechunk)
            .then(|| Box::new(ChunkedDecoder::new()));
        if encoder.framing() == Framing::Close {
            self.client_close = true;
        }
        let filter = match recode {
            Recode::Coded(filter) if relay != BodyRelay::None => Some(Box::new(Coded::new(filter))),
            _ => None,
        };
        self.reading = Reading::Body {
            relay,
            remaining,
            decoder,
            encoder,
            filter,
        };
        Ok(true)
    }

    /// Relays response body bytes, or waits on a splice of them; the exchange is over
    /// when the body is complete, or cut short by the backend's end.
    fn receive_body(&mut self, linked: &mut Linked<'_>, cx: &Context<'_>, ended: bool) -> Outcome {
        // Splicing goes at the client's pace: not while reading ahead of it.
        let can_splice = cx.can_splice && !self.reads_ahead();
        let idle = cx.response_timeout;
        if let Reading::Spliced { len } = self.reading {
            return match linked.spliced_in() {
                // The driver pushes the deadline on while bytes move.
                Spliced::Running => Outcome::Wait(Next::Read, Deadline::Keep),
                Spliced::Done => {
                    self.relayed += len;
                    self.finish(linked)
                }
                // The backend's body ended early, or the client failed.
                Spliced::Failed(kind) => {
                    let why = if kind == io::ErrorKind::UnexpectedEof {
                        BACKEND_FAILED
                    } else {
                        CLIENT_GONE
                    };
                    Outcome::Drop(Progress::Broken(why))
                }
                Spliced::None => Outcome::Drop(Progress::Broken(BACKEND_FAILED)),
            };
        }
        let Reading::Body {
            relay,
            remaining,
            decoder,
            encoder,
            filter,
        } = &mut self.reading
        else {
            unreachable!("the body is received after the head");
        };
        let relay = *relay;
        let capture = self.cache.as_mut().and_then(|c| {
            if c.capture.as_ref().is_some_and(|b| b.size() > c.max) {
                // Too large to keep: stop copying it, and let those waiting for it go.
                c.capture = None;
                if let Some(fill) = c.fill.take() {
                    fill.pass(c.since);
                }
            }
            c.capture.as_mut()
        });
        let capturing = capture.is_some();
        let (memory, max_file, dir) = cx.spill;
        let mut sink = BodySink {
            out: linked.own_output,
            pool: linked.pool,
            capture,
            spill: self
                .spill
                .as_deref_mut()
                .map(|spill| (spill, memory, max_file, dir)),
        };
        let relayed = relay_body(
            &relay,
            remaining,
            decoder,
            linked.input,
            (encoder, filter.as_deref_mut()),
            &mut sink,
        );
        // A body delimited by the close is whole when the backend closes.
        let ended_by_close = ended && relay == BodyRelay::UntilClose;
        let done = match relayed {
            Ok((moved, done)) => {
                self.relayed += moved;
                done || ended_by_close
            }
            Err(()) => return Outcome::Drop(Progress::Broken(BACKEND_FAILED)),
        };
        if let Some(coded) = filter.as_deref_mut() {
            // What was coded so far goes now: at the end, or as the backend pauses (a body
            // that streams must reach the client as it is made).
            let before = encoder.written();
            coded.end_or_flush(done, encoder, &mut sink);
            self.relayed += encoder.written() - before;
        }
        if done {
            // Through the body's sink: a coded body's last chunk is kept and spilled with
            // the rest of it.
            encoder.end(&mut sink);
            if ended_by_close {
                // The backend's connection is gone; the client's goes on only when the
                // body went framed (chunked, as coded on the way).
                return Outcome::Drop(Progress::Finished {
                    close: self.client_close,
                });
            }
            return self.finish(linked);
        }
        // The rest of a long body framed by length moves through a kernel pipe, unless it is
        // being kept for the cache.
        if !capturing
            && filter.is_none()
            && can_splice
            && matches!(relay, BodyRelay::Length(_))
            && *remaining >= SPLICE_MIN_BODY
            && linked.input.is_empty()
        {
            let len = *remaining;
            linked.splice_in(len, idle);
            self.reading = Reading::Spliced { len };
            return Outcome::Wait(Next::Read, Deadline::Set(cx.now + idle));
        }
        if ended {
            // Any body but one delimited by the close is cut.
            return Outcome::Drop(Progress::Broken(BACKEND_FAILED));
        }
        Outcome::Wait(Next::Read, Deadline::Set(cx.now + idle))
    }

    /// The response is whole: the backend connection may carry another request if the
    /// response allowed it, the request went whole and nothing came past the response.
    fn finish(&mut self, linked: &Linked<'_>) -> Outcome {
        self.reusable &= !self.body_unsent() && linked.input.is_empty();
        Outcome::Done
    }

    /// Carries out what a step came to with the connection itself.
    fn settle(
        &mut self,
        outcome: Outcome,
        backends: &mut [BackendState],
        io: &mut Io<'_>,
    ) -> Progress {
        match outcome {
            Outcome::Wait(next, deadline) => {
                match deadline {
                    Deadline::Keep => {}
                    Deadline::Set(at) => io.set_deadline(Some(at)),
                    Deadline::Clear => io.set_deadline(None),
                }
                Progress::Wait(next)
            }
            Outcome::Done => {
                self.release(backends, io);
                Progress::Finished {
                    close: self.client_close,
                }
            }
            Outcome::Drop(progress) => self.drop_connection(backends, io, progress),
            Outcome::Failed(why) => self.connection_failed(backends, io, why),
            Outcome::Replay => self.replay(backends, io),
        }
    }

    /// Reads the request body whole (request buffering), then takes a backend connection.
    fn buffer_body(&mut self, backends: &mut [BackendState], io: &mut Io<'_>) -> Progress {
        let config = backends[self.backend].config();
        let (memory_max, max_body) = (config.request_buffer_memory, config.max_body_size);
        let Writing::Buffering(buffer) = &mut self.writing else {
            unreachable!("called while reading the body");
        };
        let dir = config.temp_dir.as_path();
        let mut kept = Ok(());
        let done = match buffer.decoder.as_mut() {
            None => {
                let n = buffer.left.min(io.input().len() as u64) as usize;
                kept = buffer.keep(&io.input().data()[..n], memory_max, dir);
                io.input_mut().consume(n);
                buffer.left -= n as u64;
                buffer.left == 0
            }
            Some(_) => {
                // Taken out for the feed, whose pieces the buffer keeps.
                let mut decoder = buffer.decoder.take().expect("matched above");
                let mut over = false;
                let fed = decoder.feed(io.input().data(), |piece| {
                    if kept.is_err() || over {
                        return;
                    }
                    if max_body > 0 && buffer.len + piece.len() as u64 > max_body {
                        over = true;
                        return;
                    }
                    kept = buffer.keep(piece, memory_max, dir);
                });
                buffer.decoder = Some(decoder);
                if over {
                    return Progress::Failed(413);
                }
                match fed {
                    Ok((used, done)) => {
                        io.input_mut().consume(used);
                        done
                    }
                    Err(e) => return Progress::Failed(e.status),
                }
            }
        };
        if let Err(e) = kept {
            tracing::error!(
                "cannot buffer a request body in {}: {e}",
                config.temp_dir.display()
            );
            return Progress::Failed(500);
        }
        if !done {
            if io.eof() {
                return Progress::Broken(CLIENT_GONE);
            }
            io.set_deadline(Some(self.deadline));
            return Progress::Wait(Next::Read);
        }
        let Writing::Buffering(buffer) = std::mem::replace(&mut self.writing, Writing::Head) else {
            unreachable!("checked above");
        };
        if buffer.open_head {
            // RFC 9112 §6.1: the body goes framed by length, as a client that knew it would
            // have sent it; no Transfer-Encoding and no trailers.
            fastpath_http::write_header_u64("Content-Length", buffer.len, &mut self.staged);
            self.staged.extend_from_slice(b"\r\n");
        }
        self.whole = Some(buffer);
        // Only now is a backend connection taken.
        if let Some(progress) = self.take_connection(backends, io) {
            return progress;
        }
        self.step(backends, io)
    }

    /// Takes a backend connection for a body read whole; `Some` with how the exchange goes
    /// when none can be had now: 503, or for one that may wait, a look again soon.
    fn take_connection(
        &mut self,
        backends: &mut [BackendState],
        io: &mut Io<'_>,
    ) -> Option<Progress> {
        let state = &mut backends[self.backend];
        let now = io.now();
        let Some(address) = state.pick(now) else {
            if self.wait_for_connection && state.is_at_limit() {
                let until = *self
                    .awaiting
                    .get_or_insert(now + state.config().response_timeout);
                if now < until {
                    io.set_deadline(Some((now + CONNECTION_POLL).min(until)));
                    return Some(Progress::Wait(Next::Read));
                }
            }
            self.awaiting = None;
            return Some(Progress::Failed(503));
        };
        self.awaiting = None;
        self.address = address;
        self.deadline = now + state.config().connect_timeout;
        state.opened(address);
        self.counted = true;
        io.set_deadline(Some(self.deadline));
        None
    }

    /// Asks for a backend connection to the chosen address (counted already): an idle one
    /// kept for it if there is one, else a new one. The head goes at the next step.
    fn connect(&mut self, backends: &mut [BackendState], io: &mut Io<'_>) {
        let state = &backends[self.backend];
        let addr = state.address(self.address).clone();
        let pool = PoolKey {
            key: pool_key(self.backend, self.address),
            idle: state.config().idle_timeout,
        };
        self.writing = Writing::Head;
        self.conn = match io.connect_linked(addr, Some(pool)) {
            Ok(conn) => Conn::Open {
                conn,
                reused: io.linked(conn).is_ok_and(|linked| linked.reused()),
                connected: false,
            },
            Err(e) => Conn::CannotStart(e.kind()),
        };
    }

    /// Lets go of the backend connection (for reuse when the response allowed it).
    fn release(&mut self, backends: &mut [BackendState], io: &mut Io<'_>) {
        if let Conn::Open { conn, .. } = std::mem::replace(&mut self.conn, Conn::Unasked) {
            io.release(conn, self.reusable);
        }
        self.forget(backends);
    }

    /// The deadline passed: 504 if nothing was relayed yet, else the response is broken.
    pub(crate) fn timed_out(&mut self, backends: &mut [BackendState], io: &mut Io<'_>) -> Progress {
        if self.awaiting.is_some() {
            // A look again for a connection: taken, or 503 once the wait is over.
            return self.step(backends, io);
        }
        if let Writing::Buffering(_) = self.writing {
            // The client did not send its body in time; no backend was asked.
            return Progress::Failed(408);
        }
        let linked = match self.conn {
            Conn::Open { conn, .. } => io
                .linked(conn)
                .ok()
                .map(|linked| (linked.output.pending(), linked.connected())),
            _ => None,
        };
        if self.whole.is_some() {
            // A body read whole is queued at once, and the driver says nothing until the
            // backend has taken all of it: the response timeout counts from the end of the
            // request, so while the backend still takes the body it starts again.
            // All of it may have gone since the last look without a word from the driver
            // (io_uring sends a file range's last bytes with sendfile and wakes nobody): that
            // counts as the request's end too.
            let unsent = linked.map_or(0, |(unsent, _)| unsent);
            if unsent < self.unsent_at_deadline {
                self.unsent_at_deadline = unsent;
                self.deadline = io.now() + backends[self.backend].config().response_timeout;
                io.set_deadline(Some(self.deadline));
                return Progress::Wait(Next::Read);
            }
        }
        let connecting = linked.map_or(self.counted, |(_, connected)| !connected);
        if connecting {
            backends[self.backend].failed(self.address, io.now());
        }
        let progress = if self.status == 0 {
            Progress::Failed(504)
        } else {
            Progress::Broken(BACKEND_TIMEOUT)
        };
        self.drop_connection(backends, io, progress)
    }

    /// Whether the request can go again on another connection: nothing of a response came
    /// back, and the connection that failed had carried an earlier exchange (so the backend
    /// may have closed it while it was idle, before the request reached it).
    fn may_replay(&self) -> bool {
        self.replayable
            && self.replays < MAX_REPLAYS
            && self.status == 0
            && self.relayed == 0
            && matches!(self.conn, Conn::Open { reused: true, .. })
    }

    /// Sends the request again on another connection to the same address: the closed one
    /// is dropped, and the backend is not marked as failing.
    fn replay(&mut self, backends: &mut [BackendState], io: &mut Io<'_>) -> Progress {
        self.replays += 1;
        self.parser.reset();
        self.reusable = false;
        if let Conn::Open { conn, .. } = self.conn {
            io.release(conn, false);
        }
        self.connect(backends, io);
        self.deadline = io.now() + backends[self.backend].config().connect_timeout;
        io.set_deadline(Some(self.deadline));
        self.step(backends, io)
    }

    /// Ends the exchange's use of a backend connection that must not carry another
    /// request (it failed, or is in an unknown state), and reports `progress`.
    fn drop_connection(
        &mut self,
        backends: &mut [BackendState],
        io: &mut Io<'_>,
        progress: Progress,
    ) -> Progress {
        self.reusable = false;
        self.release(backends, io);
        progress
    }

    /// The connection failed: the request goes again if it may, else the client gets
    /// 502 if nothing was relayed yet (and the address counts as failing), else the
    /// response is broken.
    fn connection_failed(
        &mut self,
        backends: &mut [BackendState],
        io: &mut Io<'_>,
        why: &str,
    ) -> Progress {
        self.reusable = false;
        if self.may_replay() {
            return self.replay(backends, io);
        }
        if self.status == 0 && self.relayed == 0 {
            tracing::warn!("backend connection failed: {why}");
            backends[self.backend].failed(self.address, io.now());
            return self.drop_connection(backends, io, Progress::Failed(502));
        }
        self.drop_connection(backends, io, Progress::Broken(BACKEND_FAILED))
    }
}
