//! The proxy and bridge hand-over: a request the routes send to a backend is relayed over
//! an upstream connection on the client's own event loop.
//!
//! An [`Exchange`] is one request in flight to a backend. Proxy mode parses the backend's
//! response head, relays it with hop-by-hop fields replaced, and relays the body by its
//! framing, so the client connection stays with fastpath and its next request may be
//! static again; the backend connection goes back to the worker's pool when the response
//! allowed it. The backend connection is a connection of the worker linked to the client's
//! ([`Io::connect_linked`]): its events wake the client connection, whose calls step the
//! exchange with both connections' buffers at hand ([`Io::linked`]). Bridge mode hands the
//! connection over for good: once the backend connection is up, the request head goes to it
//! and the driver joins the two connections in the kernel (splice through pipes,
//! [`Io::join`]): the bytes read after the head and everything after them go to the
//! backend, its bytes come back, and nothing is parsed or even copied through fastpath
//! again.
//!
//! Buffering (per backend, on by default, as nginx's `proxy_request_buffering` and
//! `proxy_buffering` are): a request body is read whole before a backend connection is
//! taken ([`BodyBuffer`]), and a response is read as fast as the backend sends it, past
//! memory into a temporary file ([`Spill`]), so a slow client holds neither a backend worker
//! nor a backend connection. Either way a relayed request body is framed anew from what the
//! chunked decoder gave, never passed on as received: by length when read whole, in chunks of
//! fastpath's own when streamed; chunk extensions and trailers are dropped.
//!
//! Failures keep their meaning for the client: a backend that refuses or cannot be reached
//! gives 502, one that does not answer in time 504, one that answers garbage 502; one that
//! stops in the middle of a response makes fastpath close the client connection, so a
//! truncated response never looks complete. A kept connection the backend closed while it
//! was idle is not a failure of the backend: a request with an idempotent method and no body
//! goes again on another connection; any other request gets 502 rather than risk running
//! twice.

use std::fs::File;
use std::io::{self, Write as _};
use std::path::Path;
use std::sync::Arc;

use crate::kernel_bridge::KernelBridge;
use std::time::Instant;

use fastpath_drivers::{
    BufferPool, CloseReason, ConnRef, Input, Io, Next, Output, PoolKey, Spliced,
};
use fastpath_handover::{cache_lifetime, vary_accept_encoding, BackendState, Capture, Fill};
use fastpath_http::{
    BodyForwarding, BodyFraming, BodyRelay, ChunkedDecoder, Http1Body, Piece, ResponseFraming,
    ResponseParser, Sink, Version,
};

/// Client output queued past which relaying from the backend pauses.
const RELAY_HIGH_WATER: u64 = 256 * 1024;
/// Backend output queued past which the client's request body is not read: what the client
/// sends meanwhile has nowhere to go, and TCP holds it back instead of its bytes piling up
/// here. Reading resumes once the backend takes bytes again (its drain wakes the exchange).
const BACKEND_HIGH_WATER: u64 = 64 * 1024;
/// Times a request is sent again after a reused backend connection turned out closed. Each
/// try takes another kept connection or opens a new one; a new one that fails ends it.
const MAX_REPLAYS: u8 = 4;
/// Bodies (of requests and responses framed by length) with at least this much left to move
/// go through a kernel pipe (splice) instead of user space. Below it, a pipe's extra system
/// calls cost more than copying the bytes.
const SPLICE_MIN_BODY: u64 = 64 * 1024;

/// Why an exchange ended without a complete answer, as the access log says it.
pub(crate) const CLIENT_GONE: &str = "client-gone";
pub(crate) const BACKEND_FAILED: &str = "backend-failed";
pub(crate) const BACKEND_TIMEOUT: &str = "backend-timeout";

/// Bytes of the request body still to forward to the backend.
enum RequestBody {
    None,
    Length(u64),
    /// The rest is being spliced from the client to the backend.
    Spliced,
    /// Streamed: decoded, and sent on in chunks of fastpath's own (see `forward_body`).
    Chunked(Box<ChunkedDecoder>),
    /// Being read whole before a backend connection is taken (request buffering).
    Reading(Box<BodyBuffer>),
    /// Read whole: sent after the head, on each connection the request goes to.
    Whole(Box<BodyBuffer>),
}

/// A request body read whole before the backend is asked, as nginx's
/// `proxy_request_buffering` does: in memory up to the backend's `request_buffer_memory`,
/// then in an unlinked temporary file (O_TMPFILE where the file system has it, so nothing is
/// ever left behind), which goes to the backend with sendfile.
struct BodyBuffer {
    /// Left to read of a body framed by length; a chunked body has its decoder instead.
    left: u64,
    decoder: Option<ChunkedDecoder>,
    memory: Vec<u8>,
    file: Option<Arc<File>>,
    /// Body bytes read (decoded, for a chunked body).
    len: u64,
    /// The head was staged open (`BodyForwarding::Open`): `Content-Length` ends it.
    open_head: bool,
    /// Codings other than chunked stay with the body, which then goes as one chunk.
    chunk: bool,
}

impl BodyBuffer {
    /// Keeps decoded body bytes: in memory while they fit, else in the temporary file.
    fn keep(&mut self, data: &[u8], memory_max: u64, dir: &Path) -> io::Result<()> {
        if self.file.is_none() && self.len + data.len() as u64 > memory_max {
            let mut file = tempfile::tempfile_in(dir)?;
            file.write_all(&self.memory)?;
            self.memory = Vec::new();
            self.file = Some(Arc::new(file));
        }
        match self.file.as_ref() {
            Some(file) => (&**file).write_all(data)?,
            None => self.memory.extend_from_slice(data),
        }
        self.len += data.len() as u64;
        Ok(())
    }

    /// Queues the body for the backend, after its head.
    fn send(&self, out: &mut Output, pool: &mut BufferPool) {
        if self.chunk && self.len > 0 {
            out.write_with(pool, |b| {
                b.extend_from_slice(format!("{:x}\r\n", self.len).as_bytes())
            });
        }
        match self.file.as_ref() {
            Some(file) => out.push_file(Arc::clone(file), 0, self.len),
            None => out.write_with(pool, |b| b.extend_from_slice(&self.memory)),
        }
        if self.chunk {
            let end: &[u8] = if self.len > 0 {
                b"\r\n0\r\n\r\n"
            } else {
                b"0\r\n\r\n"
            };
            out.write_with(pool, |b| b.extend_from_slice(end));
        }
    }
}

/// A response read ahead of a slow client (response buffering, nginx's `proxy_buffering`):
/// past the backend's `response_buffer_memory` of output waiting for the client, what the
/// backend sends is appended to an unlinked temporary file and queued as ranges of it, which
/// go to the client with sendfile. Past `max_temp_file_size`, or if no file can be made, the
/// response goes at the client's pace, as it does unbuffered.
#[derive(Default)]
struct Spill {
    file: Option<Arc<File>>,
    written: u64,
    /// No more goes to the file.
    full: bool,
}

/// Where relayed response bytes go: the client's output (through the temporary file when
/// buffering), and the copy being kept for the cache.
struct BodySink<'a> {
    out: &'a mut Output,
    pool: &'a mut BufferPool,
    capture: Option<&'a mut Capture>,
    /// When buffering: the spill, its memory threshold, its largest file and its directory.
    spill: Option<(&'a mut Spill, u64, u64, &'a Path)>,
}

impl Sink for BodySink<'_> {
    fn write_with<R>(&mut self, write: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        // Framing the encoder makes (none for what is relayed today): kept and spilled like
        // the body bytes around it.
        let mut bytes = Vec::new();
        let result = write(&mut bytes);
        self.put(&bytes);
        result
    }

    fn bytes(&mut self, bytes: &[u8]) {
        self.put(bytes);
    }

    fn shared(&mut self, data: Arc<[u8]>) {
        self.put(&data);
    }

    fn file(&mut self, file: Arc<File>, offset: u64, len: u64) {
        self.out.push_file(file, offset, len);
    }
}

/// A connection's output as the encoders' sink.
pub(crate) struct OutputSink<'a> {
    pub(crate) output: &'a mut Output,
    pub(crate) pool: &'a mut BufferPool,
}

impl Sink for OutputSink<'_> {
    fn write_with<R>(&mut self, write: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        self.output.write_with(self.pool, write)
    }

    fn shared(&mut self, data: Arc<[u8]>) {
        self.output.push_shared(data);
    }

    fn file(&mut self, file: Arc<File>, offset: u64, len: u64) {
        self.output.push_file(file, offset, len);
    }
}

impl BodySink<'_> {
    fn put(&mut self, data: &[u8]) {
        if let Some(capture) = self.capture.as_mut() {
            capture.push(data);
        }
        if let Some((spill, memory, max, dir)) = self.spill.as_mut() {
            let spilling = spill.file.is_some() || self.out.pending() + data.len() as u64 > *memory;
            if spilling && !spill.full {
                if spill.written + data.len() as u64 > *max {
                    spill.full = true;
                } else {
                    match Self::append(spill, dir, data) {
                        Ok(file) => {
                            self.out.push_file(file, spill.written, data.len() as u64);
                            spill.written += data.len() as u64;
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(
                                "cannot buffer a response in {}: {e}; it goes at the client's pace",
                                dir.display()
                            );
                            spill.full = true;
                        }
                    }
                }
            }
        }
        self.out
            .write_with(self.pool, |b| b.extend_from_slice(data));
    }

    fn append(spill: &mut Spill, dir: &Path, data: &[u8]) -> io::Result<Arc<File>> {
        if spill.file.is_none() {
            spill.file = Some(Arc::new(tempfile::tempfile_in(dir)?));
        }
        let file = spill.file.as_ref().expect("made above");
        (&**file).write_all(data)?;
        Ok(Arc::clone(file))
    }
}

/// Where the response stands.
enum Response {
    /// Waiting for (the rest of) the response head.
    AwaitingHead,
    /// Relaying the body; `remaining` counts bytes for `BodyRelay::Length`.
    Body {
        relay: BodyRelay,
        remaining: u64,
        decoder: Option<Box<ChunkedDecoder>>,
        /// Frames what is relayed for the client.
        encoder: Http1Body,
    },
}

/// How an exchange ended, or what it waits for.
pub(crate) enum Progress {
    /// Waiting; the connection waits as `Next` says.
    Wait(Next),
    /// The response is complete; the client connection closes if `close`.
    Finished { close: bool },
    /// Nothing of the response was sent yet: answer the client with this status.
    Failed(u16),
    /// A response was partly relayed (or the request partly sent) and cannot be completed:
    /// drop the client connection. Says why, for the access log.
    Broken(&'static str),
    /// Bridge mode: the connection is joined with the backend's in the kernel and no longer
    /// the handler's.
    Joined,
}

/// One request relayed to a backend.
pub(crate) struct Exchange {
    pub(crate) backend: usize,
    address: usize,
    bridge: bool,
    /// A bridge joins in the kernel with this (see crate::kernel_bridge), else splices.
    kernel: Option<Arc<fastpath_kernel::BridgePath>>,
    /// The request head (and for a bridge, the bytes read after it) waiting for the
    /// connection; kept after sending while the request may be sent again.
    staged: Vec<u8>,
    /// `staged` is on its way to the current connection.
    staged_sent: bool,
    /// The request may be sent again on another connection if a reused one closes before
    /// answering: an idempotent method and no body (RFC 9110 §9.2.2, RFC 9112 §9.3.1.1).
    replayable: bool,
    replays: u8,
    body: RequestBody,
    parser: Box<ResponseParser>,
    response: Response,
    client_version: Version,
    head_request: bool,
    /// The client asked to close after this response.
    pub(crate) client_close: bool,
    /// Status relayed, for the access log.
    pub(crate) status: u16,
    /// Body bytes relayed, for the access log.
    pub(crate) relayed: u64,
    /// Response body bytes being spliced from the backend to the client.
    splicing: Option<u64>,
    /// The response is read ahead of the client (response buffering); `None` unbuffered.
    spill: Option<Box<Spill>>,
    /// Decoded bytes of a streamed chunked body, against the backend's `max_body_size`.
    streamed: u64,
    /// What was still to send to the backend when the deadline was last set, while a body
    /// read whole goes to it (see `timed_out`).
    unsent_at_deadline: u64,
    /// The response allows reusing the backend connection.
    reusable: bool,
    /// The address was counted as an open connection in the backend state.
    counted: bool,
    /// The connection to the backend has been established.
    connected: bool,
    /// The backend connection, a connection of the worker linked to the client's; `None`
    /// until it is asked for (the first step, or once a body read whole is).
    conn: Option<ConnRef>,
    /// The connect could not even start (no descriptor left, an unusable address).
    connect_error: Option<io::ErrorKind>,
    /// The backend connection was taken from the idle ones (see `may_replay`).
    reused: bool,
    /// When the backend must have answered (or connected) by.
    pub(crate) deadline: Instant,
    pub(crate) log_line: Vec<u8>,
    pub(crate) referer: Option<Vec<u8>>,
    pub(crate) user_agent: Option<Vec<u8>>,
    /// Set when the response may be kept in the backend response cache.
    pub(crate) cache: Option<CacheSlot>,
    /// The access log has the request's line (a bridge's, as it was handed over).
    pub(crate) logged: bool,
    /// When the request was handed over, for the backend response time.
    pub(crate) started: Instant,
}

/// What keeping a backend response in the cache takes: how to name it, and the bytes
/// relayed so far.
pub(crate) struct CacheSlot {
    pub host: Vec<u8>,
    pub target: Vec<u8>,
    pub accept_encoding: Option<Vec<u8>>,
    /// Largest response kept.
    pub max: usize,
    /// The response being kept, once its head said it may be.
    pub capture: Option<Capture>,
    /// When the request was handed over: a kept response's age counts from here, so the
    /// time the backend took to answer counts too (RFC 9111 §4.2.3).
    pub since: Instant,
    /// When the captured response expires, and whether it varies on Accept-Encoding.
    pub expires: Option<Instant>,
    pub vary: bool,
    /// This request's claim on the page's fetch, which others wait for: dropped with the
    /// slot if the exchange is cut short, so the next request claims it.
    pub fill: Option<Fill>,
}

/// The pool key of a backend address: backend and address index.
fn pool_key(backend: usize, address: usize) -> u64 {
    ((backend as u64) << 32) | address as u64
}

/// What starting an exchange needs to know about the request.
pub(crate) struct Start<'a> {
    pub backend: usize,
    pub bridge: bool,
    /// A bridge joins in the kernel with this, if loaded.
    pub kernel: Option<Arc<fastpath_kernel::BridgePath>>,
    pub staged: Vec<u8>,
    /// The method is idempotent (GET, HEAD, OPTIONS, TRACE, PUT, DELETE).
    pub idempotent: bool,
    pub framing: BodyFraming,
    /// How the body goes: read whole first unless `Streamed`.
    pub buffered: BodyForwarding,
    pub client_version: Version,
    pub head_request: bool,
    pub client_close: bool,
    pub log_line: Vec<u8>,
    pub referer: Option<&'a [u8]>,
    pub user_agent: Option<&'a [u8]>,
    pub cache: Option<CacheSlot>,
}

impl Exchange {
    /// A graceful stop began: a response whose head is not written yet says
    /// `Connection: close` and the connection closes after it (one already on its way said
    /// keep-alive, and the connection then waits a moment for the client's next request).
    pub(crate) fn close_if_head_unsent(&mut self) {
        if matches!(self.response, Response::AwaitingHead) {
            self.client_close = true;
        }
    }

    /// Starts an exchange: the backend connection is asked for at its first step, once the
    /// request head has been consumed; `Err(status)` when none can be used (every address is
    /// at the connection limit: 503).
    pub(crate) fn start(
        start: Start<'_>,
        backends: &mut [BackendState],
        deadline: &mut Option<Instant>,
        now: Instant,
        parser: Box<ResponseParser>,
    ) -> Result<Exchange, (u16, Box<ResponseParser>)> {
        let state = &mut backends[start.backend];
        let config = state.config();
        let (response_buffering, body_timeout, connect_timeout) = (
            config.response_buffering,
            config.body_timeout,
            config.connect_timeout,
        );
        let buffered = start.buffered != BodyForwarding::Streamed;
        // A bridge passes the body on with everything else when it joins.
        let body = match start.framing {
            _ if start.bridge => RequestBody::None,
            BodyFraming::None | BodyFraming::Length(0) => RequestBody::None,
            BodyFraming::Length(n) if buffered => RequestBody::Reading(Box::new(BodyBuffer {
                left: n,
                decoder: None,
                memory: Vec::new(),
                file: None,
                len: 0,
                open_head: false,
                chunk: false,
            })),
            BodyFraming::Chunked if buffered => RequestBody::Reading(Box::new(BodyBuffer {
                left: 0,
                decoder: Some(ChunkedDecoder::new()),
                memory: Vec::new(),
                file: None,
                len: 0,
                open_head: start.buffered == BodyForwarding::Open,
                chunk: start.buffered != BodyForwarding::Open,
            })),
            BodyFraming::Length(n) => RequestBody::Length(n),
            BodyFraming::Chunked => RequestBody::Chunked(Box::new(ChunkedDecoder::new())),
        };
        let spill = (response_buffering && !start.bridge).then(Box::<Spill>::default);
        // A body read whole first takes no backend connection until it is whole: the
        // connect waits, and the deadline is the body's.
        let reading = matches!(body, RequestBody::Reading(_));
        let address = if reading {
            0
        } else {
            match state.pick(now) {
                Some(address) => address,
                None => return Err((503, parser)),
            }
        };
        let first_deadline = now
            + if reading {
                body_timeout
            } else {
                connect_timeout
            };
        let mut exchange = Exchange {
            backend: start.backend,
            address,
            bridge: start.bridge,
            kernel: start.kernel,
            staged: start.staged,
            staged_sent: false,
            // A body read whole can be sent again as well as a request without one.
            replayable: start.idempotent
                && !start.bridge
                && (matches!(start.framing, BodyFraming::None | BodyFraming::Length(0))
                    || buffered),
            replays: 0,
            body,
            parser,
            response: Response::AwaitingHead,
            client_version: start.client_version,
            head_request: start.head_request,
            client_close: start.client_close,
            status: 0,
            relayed: 0,
            splicing: None,
            spill,
            streamed: 0,
            unsent_at_deadline: 0,
            reusable: false,
            counted: false,
            connected: false,
            conn: None,
            connect_error: None,
            reused: false,
            deadline: first_deadline,
            log_line: start.log_line,
            referer: start.referer.map(<[u8]>::to_vec),
            user_agent: start.user_agent.map(<[u8]>::to_vec),
            cache: start.cache,
            logged: false,
            started: now,
        };
        if !reading {
            // Counted now, so the next request sees the connection taken; connected at the
            // first step.
            backends[exchange.backend].opened(exchange.address);
            exchange.counted = true;
        }
        *deadline = Some(first_deadline);
        Ok(exchange)
    }

    /// Whether the response may be read from the backend while the client's output is
    /// still full: buffering, with room left in the temporary file.
    pub(crate) fn reads_ahead(&self) -> bool {
        self.spill.as_ref().is_some_and(|s| !s.full)
    }

    /// Reads the request body whole (request buffering), then takes a backend connection.
    fn read_body(&mut self, backends: &mut [BackendState], io: &mut Io<'_>) -> Progress {
        let config = backends[self.backend].config();
        let (memory_max, max_body) = (config.request_buffer_memory, config.max_body_size);
        let RequestBody::Reading(buffer) = &mut self.body else {
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
        let RequestBody::Reading(buffer) = std::mem::replace(&mut self.body, RequestBody::None)
        else {
            unreachable!("checked above");
        };
        if buffer.open_head {
            // RFC 9112 §6.1: the body goes framed by length, as a client that knew it would
            // have sent it; no Transfer-Encoding and no trailers.
            let staged = &mut self.staged;
            fastpath_http::write_header_u64("Content-Length", buffer.len, staged);
            staged.extend_from_slice(b"\r\n");
        }
        self.body = RequestBody::Whole(buffer);
        // Only now is a backend connection taken.
        let state = &mut backends[self.backend];
        let Some(address) = state.pick(io.now()) else {
            return Progress::Failed(503);
        };
        self.address = address;
        self.deadline = io.now() + state.config().connect_timeout;
        state.opened(address);
        self.counted = true;
        self.connect(backends, io);
        io.set_deadline(Some(self.deadline));
        self.step(backends, io)
    }

    /// Asks for a backend connection to the chosen address (counted already): an idle one
    /// kept for it if there is one, else a new one.
    fn connect(&mut self, backends: &mut [BackendState], io: &mut Io<'_>) {
        let state = &backends[self.backend];
        let addr = state.address(self.address).clone();
        let pool = PoolKey {
            key: pool_key(self.backend, self.address),
            idle: state.config().idle_timeout,
        };
        self.staged_sent = false;
        match io.connect_linked(addr, Some(pool)) {
            Ok(conn) => {
                self.conn = Some(conn);
                self.reused = io.linked(conn).is_ok_and(|linked| linked.reused());
            }
            Err(e) => self.connect_error = Some(e.kind()),
        }
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
        !matches!(self.body, RequestBody::None | RequestBody::Whole(_))
    }

    /// What the access log and the worker's pools take back when the exchange is over.
    #[allow(clippy::type_complexity)]
    pub(crate) fn into_parts(
        self,
    ) -> (
        Box<ResponseParser>,
        Vec<u8>,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        Option<CacheSlot>,
    ) {
        (
            self.parser,
            self.log_line,
            self.referer,
            self.user_agent,
            self.cache,
        )
    }

    /// Lets go of the backend connection (for reuse when the response allowed it).
    pub(crate) fn release(&mut self, backends: &mut [BackendState], io: &mut Io<'_>) {
        if let Some(conn) = self.conn.take() {
            io.release(conn, self.reusable && !self.bridge);
        }
        self.forget(backends);
    }

    /// Forgets the connection count when the client connection is gone.
    pub(crate) fn forget(&mut self, backends: &mut [BackendState]) {
        if self.counted {
            backends[self.backend].closed(self.address);
            self.counted = false;
        }
    }

    /// The deadline passed: 504 if nothing was relayed yet, else the response is broken.
    pub(crate) fn timed_out(&mut self, backends: &mut [BackendState], io: &mut Io<'_>) -> Progress {
        if let RequestBody::Reading(_) = self.body {
            // The client did not send its body in time; no backend was asked.
            return Progress::Failed(408);
        }
        if let RequestBody::Whole(_) = self.body {
            // A body read whole is queued at once, and the driver says nothing until the
            // backend has taken all of it: the response timeout counts from the end of the
            // request, so while the backend still takes the body it starts again.
            let unsent = self.backend_output(io);
            if unsent > 0 && unsent < self.unsent_at_deadline {
                self.unsent_at_deadline = unsent;
                self.deadline = io.now() + backends[self.backend].config().response_timeout;
                io.set_deadline(Some(self.deadline));
                return Progress::Wait(Next::Read);
            }
        }
        let connecting = match self.conn {
            Some(conn) => io.linked(conn).is_ok_and(|linked| !linked.connected()),
            None => self.counted,
        };
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
            && self.reused
    }

    /// Sends the request again on another connection to the same address: the closed one
    /// is dropped, and the backend is not marked as failing.
    fn replay(&mut self, backends: &mut [BackendState], io: &mut Io<'_>) -> Progress {
        self.replays += 1;
        self.parser.reset();
        self.reusable = false;
        if let Some(conn) = self.conn.take() {
            io.release(conn, false);
        }
        self.connected = false;
        self.connect(backends, io);
        self.deadline = io.now() + backends[self.backend].config().connect_timeout;
        io.set_deadline(Some(self.deadline));
        self.step(backends, io)
    }

    /// Bytes queued for the backend and not sent yet.
    fn backend_output(&self, io: &mut Io<'_>) -> u64 {
        self.conn
            .and_then(|conn| io.linked(conn).ok())
            .map_or(0, |linked| linked.output.pending())
    }

    /// Moves the exchange forward with whatever arrived on either side.
    pub(crate) fn step(&mut self, backends: &mut [BackendState], io: &mut Io<'_>) -> Progress {
        if let RequestBody::Reading(_) = self.body {
            return self.read_body(backends, io);
        }
        if self.conn.is_none() && self.connect_error.is_none() {
            self.connect(backends, io);
        }
        if let Some(kind) = self.connect_error.take() {
            return self.connection_failed(backends, io, &format!("{kind:?}"));
        }
        let conn = self.conn.expect("asked for above");
        let (connected, ended) = match io.linked(conn) {
            Ok(linked) => (linked.connected(), linked.eof()),
            Err(reason) => return self.connection_failed(backends, io, why_closed(reason)),
        };
        if let Some(progress) = self.send(backends, io, connected) {
            return progress;
        }
        if !connected {
            // The request waits in the connection's output; the client is not read
            // meanwhile, so that a body has nowhere to pile up.
            io.set_deadline(Some(self.deadline));
            return Progress::Wait(Next::Wait);
        }
        if !self.connected {
            self.connected = true;
            backends[self.backend].succeeded(self.address);
            self.deadline = io.now() + backends[self.backend].config().response_timeout;
        }
        let unsent = self.backend_output(io);
        if self.unsent_at_deadline > 0 && unsent == 0 {
            // The last of a body read whole has gone to the backend: the request has ended
            // here, and the response timeout counts from now.
            self.unsent_at_deadline = 0;
            self.deadline = io.now() + backends[self.backend].config().response_timeout;
        }
        match self.receive(backends, io, ended) {
            // A body still to forward waits while the backend takes no more of it.
            Progress::Wait(Next::Read)
                if unsent >= BACKEND_HIGH_WATER
                    && matches!(self.body, RequestBody::Length(_) | RequestBody::Chunked(_)) =>
            {
                Progress::Wait(Next::Wait)
            }
            progress => progress,
        }
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

    /// The request side: the staged head, then body bytes from the client. `Some` when
    /// the exchange goes no further as a proxy: joined (a bridge), or failed.
    fn send(
        &mut self,
        backends: &mut [BackendState],
        io: &mut Io<'_>,
        connected: bool,
    ) -> Option<Progress> {
        let now = io.now();
        let can_splice = io.can_splice();
        let conn = self.conn?;
        let response_timeout = backends[self.backend].config().response_timeout;
        let mut linked = io.linked(conn).ok()?;
        if !self.staged_sent && !self.staged.is_empty() {
            self.staged_sent = true;
            let staged = &self.staged;
            linked
                .output
                .write_with(linked.pool, |b| b.extend_from_slice(staged));
            if let RequestBody::Whole(buffer) = &self.body {
                buffer.send(linked.output, linked.pool);
                self.unsent_at_deadline = linked.output.pending();
            }
            if !self.replayable {
                // Never sent again: a bridged connection need not hold it for its life.
                self.staged = Vec::new();
            }
        }
        if self.bridge {
            if !connected {
                return None;
            }
            // From here on the kernel moves the bytes (splice through pipes); what the client
            // sent after the head is passed on by the join. The joint ends when the backend's
            // end reaches the client, or after the response timeout without a byte either
            // way. The backend connection stays counted until the client connection closes.
            match self.kernel.take() {
                Some(path) => {
                    io.join_carried(conn, response_timeout, Box::new(KernelBridge::new(path)))
                }
                None => io.join(conn, response_timeout),
            }
            return Some(Progress::Joined);
        }
        if linked.output.pending() < RELAY_HIGH_WATER && !matches!(self.body, RequestBody::Spliced)
        {
            let max_body = backends[self.backend].config().max_body_size;
            match forward_body(
                &mut self.body,
                linked.own_input,
                linked.output,
                linked.pool,
                &mut self.streamed,
                max_body,
            ) {
                Ok(0) => {}
                // The response timeout counts from the end of the request: a body that
                // takes longer than it to upload is not a backend failing to answer.
                Ok(_) => self.deadline = now + response_timeout,
                Err(status) => {
                    // The backend has part of a body that will never be whole. A response
                    // already begun cannot be followed by an error page.
                    let progress = if self.status == 0 {
                        Progress::Failed(status)
                    } else {
                        Progress::Broken(CLIENT_GONE)
                    };
                    return Some(self.drop_connection(backends, io, progress));
                }
            }
            if let RequestBody::Length(left) = self.body {
                if left >= SPLICE_MIN_BODY
                    && linked.own_input.is_empty()
                    && can_splice
                    && !linked.is_new()
                {
                    linked.splice_out(left, response_timeout);
                    self.body = RequestBody::Spliced;
                }
            }
        }
        if let RequestBody::Spliced = self.body {
            match linked.spliced_out() {
                // The driver pushes the connection's deadline on while bytes move.
                Spliced::Running => {
                    if let Some(moving) = io.deadline() {
                        self.deadline = self.deadline.max(moving);
                    }
                }
                Spliced::Done => {
                    self.body = RequestBody::None;
                    self.deadline = io.now() + response_timeout;
                }
                // The client stopped sending in the middle of the body, or the backend
                // stopped taking it.
                Spliced::Failed(kind) => {
                    let why = if kind == io::ErrorKind::UnexpectedEof {
                        CLIENT_GONE
                    } else {
                        BACKEND_FAILED
                    };
                    return Some(self.drop_connection(backends, io, Progress::Broken(why)));
                }
                Spliced::None => {
                    let broken = Progress::Broken(BACKEND_FAILED);
                    return Some(self.drop_connection(backends, io, broken));
                }
            }
        }
        None
    }

    /// The response side: the head (after any interim ones), then the body; `ended` when
    /// the backend has finished sending.
    fn receive(&mut self, backends: &mut [BackendState], io: &mut Io<'_>, ended: bool) -> Progress {
        let Some(conn) = self.conn else {
            return Progress::Failed(502);
        };
        loop {
            // Buffering, the backend is read whatever the client's pace (see `Spill`).
            if io.output().pending() >= RELAY_HIGH_WATER && !self.reads_ahead() {
                io.set_deadline(None);
                return Progress::Wait(Next::Drain);
            }
            if let Response::Body { .. } = self.response {
                return self.receive_body(backends, io, ended);
            }
            let Ok(linked) = io.linked(conn) else {
                return Progress::Failed(502);
            };
            let replay_on_end = ended && linked.input.is_empty() && self.may_replay();
            match self.receive_head(linked.input, linked.own_output, linked.pool) {
                // Relayed (an interim head, or the final one): go on with what follows.
                Ok(true) => continue,
                Ok(false) if replay_on_end => return self.replay(backends, io),
                Ok(false) if ended => {
                    self.parser.reset();
                    return self.drop_connection(backends, io, Progress::Failed(502));
                }
                Ok(false) => {
                    io.set_deadline(Some(self.deadline));
                    return Progress::Wait(Next::Read);
                }
                Err(()) => {
                    self.parser.reset();
                    return self.drop_connection(backends, io, Progress::Failed(502));
                }
            }
        }
    }

    /// Reads and relays a response head if a whole one has arrived: `Ok(false)` if not
    /// yet, `Err` if the backend broke the protocol (the client gets 502).
    fn receive_head(
        &mut self,
        input: &mut Input,
        output: &mut Output,
        pool: &mut BufferPool,
    ) -> Result<bool, ()> {
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
                output.write_with(pool, |b| b.extend_from_slice(bytes));
            }
            self.parser.reset();
            input.consume(head_len);
            return Ok(true);
        }
        self.reusable = head.keep_alive;
        let framing = head.framing;
        if let Some(slot) = self.cache.as_mut() {
            let headers: Vec<(&str, &[u8])> = head.headers().collect();
            if let Some(ttl) = cache_lifetime("GET", false, status, &headers) {
                slot.expires = Some(slot.since + ttl);
                slot.vary = vary_accept_encoding(&headers);
                // The cache keeps its own copy of the head, from the parsed one.
                slot.capture = Capture::new(&head, self.client_version);
            }
            if slot.capture.is_none() {
                // Nothing will be kept: requests waiting for this fetch go to the backend
                // now, not when this body has been relayed.
                if let Some(fill) = slot.fill.take() {
                    fill.pass(slot.since);
                }
            }
        }
        if !matches!(self.body, RequestBody::None | RequestBody::Whole(_)) {
            // The backend answered before taking the whole request body (say, 401 to an
            // `Expect: 100-continue`). What the client still sends is body, never a
            // request, so the connection closes after this response (RFC 9110 §10.1.1)
            // and says so.
            self.client_close = true;
        }
        let (relay, encoder) = fastpath_http::start_relayed_response(
            &head,
            self.client_version,
            self.client_close,
            &mut OutputSink { output, pool },
        );
        self.parser.reset();
        input.consume(head_len);
        self.status = status;
        let remaining = match framing {
            ResponseFraming::Length(n) => n,
            _ => 0,
        };
        let decoder = matches!(relay, BodyRelay::Chunked | BodyRelay::Dechunk)
            .then(|| Box::new(ChunkedDecoder::new()));
        if matches!(relay, BodyRelay::Dechunk | BodyRelay::UntilClose) {
            self.client_close = true;
        }
        self.response = Response::Body {
            relay,
            remaining,
            decoder,
            encoder,
        };
        Ok(true)
    }

    /// Relays response body bytes, or waits on a splice of them; the exchange is over
    /// when the body is complete, or cut short by the backend's end.
    fn receive_body(
        &mut self,
        backends: &mut [BackendState],
        io: &mut Io<'_>,
        ended: bool,
    ) -> Progress {
        // Splicing goes at the client's pace: not while reading ahead of it.
        let can_splice = io.can_splice() && !self.reads_ahead();
        let config = backends[self.backend].config();
        let idle = config.response_timeout;
        let spill_limits = (
            config.response_buffer_memory,
            config.max_temp_file_size,
            config.temp_dir.as_path(),
        );
        let now = io.now();
        let Some(Ok(mut linked)) = self.conn.map(|conn| io.linked(conn)) else {
            return Progress::Failed(502);
        };
        let Response::Body {
            relay,
            remaining,
            decoder,
            encoder,
        } = &mut self.response
        else {
            unreachable!("the body is received after the head");
        };
        let relay = *relay;
        let done = if let Some(len) = self.splicing {
            match linked.spliced_in() {
                // The driver pushes the deadline on while bytes move.
                Spliced::Running => return Progress::Wait(Next::Read),
                Spliced::Done => {
                    self.splicing = None;
                    self.relayed += len;
                    *remaining = 0;
                    true
                }
                // The backend's body ended early, or the client failed.
                Spliced::Failed(kind) => {
                    self.splicing = None;
                    let why = if kind == io::ErrorKind::UnexpectedEof {
                        BACKEND_FAILED
                    } else {
                        CLIENT_GONE
                    };
                    return self.drop_connection(backends, io, Progress::Broken(why));
                }
                Spliced::None => {
                    self.splicing = None;
                    let broken = Progress::Broken(BACKEND_FAILED);
                    return self.drop_connection(backends, io, broken);
                }
            }
        } else {
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
            let mut sink = BodySink {
                out: linked.own_output,
                pool: linked.pool,
                capture,
                spill: self
                    .spill
                    .as_deref_mut()
                    .map(|spill| (spill, spill_limits.0, spill_limits.1, spill_limits.2)),
            };
            let done =
                match relay_body(&relay, remaining, decoder, linked.input, encoder, &mut sink) {
                    Ok((moved, done)) => {
                        self.relayed += moved;
                        done
                    }
                    Err(()) => {
                        let broken = Progress::Broken(BACKEND_FAILED);
                        return self.drop_connection(backends, io, broken);
                    }
                };
            // The rest of a long body framed by length moves through a kernel pipe, unless
            // it is being kept for the cache.
            if !done
                && !capturing
                && can_splice
                && matches!(relay, BodyRelay::Length(_))
                && *remaining >= SPLICE_MIN_BODY
                && linked.input.is_empty()
            {
                linked.splice_in(*remaining, idle);
                self.splicing = Some(*remaining);
                io.set_deadline(Some(now + idle));
                return Progress::Wait(Next::Read);
            }
            done
        };
        if done {
            if let Response::Body { encoder, .. } = &mut self.response {
                encoder.end(&mut OutputSink {
                    output: linked.own_output,
                    pool: linked.pool,
                });
            }
            // Whatever the backend sent past the response leaves its connection unusable.
            let body_sent = !self.body_unsent();
            self.reusable &= body_sent && linked.input.is_empty();
            self.release(backends, io);
            return Progress::Finished {
                close: self.client_close,
            };
        }
        if ended {
            // A body delimited by the close is complete now; any other is cut.
            let progress = if relay == BodyRelay::UntilClose {
                Progress::Finished { close: true }
            } else {
                Progress::Broken(BACKEND_FAILED)
            };
            return self.drop_connection(backends, io, progress);
        }
        io.set_deadline(Some(now + idle));
        Progress::Wait(Next::Read)
    }
}

/// What the log says of a backend connection that closed, by why it did.
fn why_closed(reason: CloseReason) -> &'static str {
    match reason {
        CloseReason::ConnectFailed => "the connect failed",
        CloseReason::PeerGone => "the backend closed it",
        CloseReason::SendTimeout => "the backend took nothing for the send timeout",
        _ => "a socket error",
    }
}

/// Moves request body bytes from the client's input to the backend's output; returns how
/// many moved. A chunked body is decoded and sent on in chunks of its own, one per call:
/// never the client's framing, extensions or trailers (see `BodyForwarding`); `streamed`
/// counts its decoded bytes against `max_body` (0 for none): 413 past it.
fn forward_body(
    body: &mut RequestBody,
    input: &mut Input,
    out: &mut Output,
    pool: &mut BufferPool,
    streamed: &mut u64,
    max_body: u64,
) -> Result<usize, u16> {
    match body {
        RequestBody::None
        | RequestBody::Spliced
        | RequestBody::Reading(_)
        | RequestBody::Whole(_) => Ok(0),
        RequestBody::Length(remaining) => {
            let n = (*remaining).min(input.len() as u64) as usize;
            if n > 0 {
                let data = &input.data()[..n];
                out.write_with(pool, |b| b.extend_from_slice(data));
                input.consume(n);
                *remaining -= n as u64;
            }
            if *remaining == 0 {
                *body = RequestBody::None;
            }
            Ok(n)
        }
        RequestBody::Chunked(decoder) => {
            let data = input.data();
            let (used, done) = out
                .write_with(pool, |b| {
                    // The chunk's size goes before its data once known: room for it is left,
                    // then the header is written in and the data moved up to it.
                    let at = b.len();
                    b.extend_from_slice(&[0; CHUNK_HEADER_ROOM]);
                    let fed = decoder.feed(data, |piece| b.extend_from_slice(piece));
                    let len = b.len() - at - CHUNK_HEADER_ROOM;
                    if len == 0 {
                        b.truncate(at);
                    } else {
                        let header = format!("{len:x}\r\n");
                        let skip = CHUNK_HEADER_ROOM - header.len();
                        b[at + skip..at + CHUNK_HEADER_ROOM].copy_from_slice(header.as_bytes());
                        b.drain(at..at + skip);
                        b.extend_from_slice(b"\r\n");
                    }
                    if matches!(fed, Ok((_, true))) {
                        b.extend_from_slice(b"0\r\n\r\n");
                    }
                    *streamed += len as u64;
                    fed
                })
                .map_err(|e| e.status)?;
            if max_body > 0 && *streamed > max_body {
                return Err(413);
            }
            input.consume(used);
            if done {
                *body = RequestBody::None;
            }
            Ok(used)
        }
    }
}

/// Room left before a chunk's data for its size line: 16 hex digits and CRLF.
const CHUNK_HEADER_ROOM: usize = 18;

/// Moves response body bytes from the backend's input through `encoder` to `sink`. Returns
/// the body bytes moved and whether the body is complete; `Err` for a malformed chunked
/// body.
fn relay_body(
    relay: &BodyRelay,
    remaining: &mut u64,
    decoder: &mut Option<Box<ChunkedDecoder>>,
    input: &mut Input,
    encoder: &mut Http1Body,
    sink: &mut BodySink<'_>,
) -> Result<(u64, bool), ()> {
    match relay {
        BodyRelay::None => Ok((0, true)),
        BodyRelay::Length(_) => {
            let n = (*remaining).min(input.len() as u64) as usize;
            if n > 0 {
                encoder.piece(Piece::Bytes(&input.data()[..n]), sink);
                input.consume(n);
                *remaining -= n as u64;
            }
            Ok((n as u64, *remaining == 0))
        }
        BodyRelay::UntilClose => {
            let n = input.len();
            if n > 0 {
                encoder.piece(Piece::Bytes(input.data()), sink);
                input.consume(n);
            }
            Ok((n as u64, false))
        }
        BodyRelay::Chunked => {
            // Passed as it came, chunk lines and trailers included: the decoder only finds
            // where it ends.
            let decoder = decoder.as_mut().ok_or(())?;
            let (used, done) = decoder.feed(input.data(), |_| {}).map_err(|_| ())?;
            if used > 0 {
                encoder.piece(Piece::Bytes(&input.data()[..used]), sink);
                input.consume(used);
            }
            Ok((used as u64, done))
        }
        BodyRelay::Dechunk => {
            let decoder = decoder.as_mut().ok_or(())?;
            let mut moved = 0u64;
            let data = input.data();
            let (used, done) = decoder
                .feed(data, |piece| {
                    moved += piece.len() as u64;
                    encoder.piece(Piece::Bytes(piece), sink);
                })
                .map_err(|_| ())?;
            input.consume(used);
            Ok((moved, done))
        }
    }
}
