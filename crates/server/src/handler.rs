//! The HTTP/1.x connection handler: the same code runs under every concurrency model.
//!
//! All state for one connection lives in [`HttpConn`]; everything shared by a worker's
//! connections (the clock, the access-log buffer, scratch space) lives in [`HttpHandler`].
//! This module runs the phase machine of a connection (read a head, answer it, discard
//! or relay a body) and keeps the access log; what a request gets is decided by the
//! router (`routing`), answered by the writers of `reply`, or handed over to a backend
//! (`hand_over`, `proxy`).

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fastpath_content::ContentCache;
use fastpath_drivers::{CloseReason, Handler, Io, Next, Opened, Origin, Worker};
use fastpath_handover::{BackendState, HandoverMethod, Routes, SharedCache};
use fastpath_http::{BodyFraming, ChunkedDecoder, Metadata, Method, Parser, Request};
use fastpath_sys::setsockopt_int;

use crate::access_log::{
    request_line, AccessLogBuffer, Client, Entry, Logged, Peer, Said, TlsFields,
};
use crate::clock::Clock;
use crate::config::Config;
use crate::hand_over::{Backends, HandOver, Incoming, Sink};
use crate::metrics::{self, WorkerMetrics};
use crate::modules::WorkerModules;
use crate::reply::{Answer, Writer};
use crate::routing::{route_by_modules, Route, Router};
use crate::vhosts::VirtualHosts;
use fastpath_handover::exchange::{Exchange, Progress, CLIENT_GONE};

mod h2;

/// Queued output past which pipelined requests wait until it is sent: bounds the memory a
/// client can make the server hold by pipelining without reading.
const OUTPUT_HIGH_WATER: u64 = 64 * 1024;
/// Parsers a worker keeps for reuse: enough for every connection that is mid-head at once
/// in ordinary traffic; more are freed when they come back.
const MAX_POOLED_PARSERS: usize = 1024;
/// A static response whose body is larger than this is logged once it has been sent, or cut
/// short, with the bytes that really left; a smaller one, which the kernel takes in one send,
/// as it is queued. Not below [`OUTPUT_HIGH_WATER`]: a larger body makes the connection wait
/// for its output before the next request, so a connection holds one such entry at a time.
const DEFER_LOG_OVER: u64 = OUTPUT_HIGH_WATER;
/// How long a graceful stop leaves a connection idle between requests for a request already
/// on its way: about a round trip of a distant client, and short next to any grace period.
const DRAIN_IDLE_WAIT: Duration = Duration::from_millis(500);
/// Longest request line quoted in the access log for a request that could not be parsed.
const MAX_LOGGED_BAD_LINE: usize = 256;
/// Sent to connections turned away at the connection limit.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nServer: fastpath\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 32\r\nRetry-After: 1\r\nConnection: close\r\n\r\nToo many connections, try again\n";

/// What the handler knows of each listener, by listener index.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListenerFacts {
    /// The name of each Unix-domain listener (`None` for TCP ones), which its clients go by
    /// in the logs.
    pub unix_names: Vec<Option<&'static str>>,
    /// The HTTPS port a plain listener redirects every request to (`redirect_to_https`).
    pub https_redirects: Vec<Option<u16>>,
    /// The plain listeners whose connections speak HTTP/2 from the first byte.
    pub http2_only: Vec<bool>,
}

/// Settings the handler needs, taken from the configuration once.
pub(crate) struct HandlerSettings {
    pub limits: fastpath_http::Limits,
    pub header_timeout: Duration,
    pub keepalive_timeout: Duration,
    pub max_discard_body: u64,
    pub max_requests_per_connection: u64,
    /// What the handler knows of each listener, by listener index.
    pub listeners: ListenerFacts,
    /// SO_SNDBUF for client connections; 0 leaves the kernel's autotuning.
    pub send_buffer: libc::c_int,
    /// The path of the health check (`health_check`).
    pub health_check: Option<Box<str>>,
    /// How long a connection may take no output (an HTTP/2 one: whose window stays shut).
    pub send_timeout: Duration,
    /// HTTP/2 connections' settings; `None` when HTTP/2 is off.
    pub h2: Option<fastpath_http::h2::ServerSettings>,
    /// Where the ACME client writes the http-01 key authorizations, by token, when it
    /// answers http-01.
    pub acme_challenges: Option<std::path::PathBuf>,
}

impl HandlerSettings {
    pub(crate) fn from_config(config: &Config) -> Self {
        let limits = fastpath_http::Limits {
            max_request_line: config.limits.max_request_line,
            max_header_bytes: config.limits.max_header_bytes,
            max_headers: config.limits.max_headers,
        };
        HandlerSettings {
            limits,
            header_timeout: config.timeouts.header,
            keepalive_timeout: config.timeouts.keepalive,
            max_discard_body: config.limits.max_discard_body,
            max_requests_per_connection: config.limits.max_requests_per_connection,
            listeners: ListenerFacts::default(),
            send_buffer: libc::c_int::try_from(config.limits.send_buffer)
                .unwrap_or(libc::c_int::MAX),
            health_check: config.health_check.as_deref().map(Box::from),
            send_timeout: config.timeouts.send,
            acme_challenges: (config.acme_hosts().next().is_some()
                && config.acme.challenge == fastpath_acme::ChallengeKind::Http01)
                .then(|| config.acme.challenges_dir()),
            h2: config.http2.enabled.then(|| {
                h2::server_settings(
                    &limits,
                    config.limits.max_requests_per_connection,
                    config.http2.max_concurrent_streams,
                )
            }),
        }
    }
}

/// One worker's HTTP handler.
pub(crate) struct HttpHandler {
    settings: Arc<HandlerSettings>,
    clock: Clock,
    access_log: Option<AccessLogBuffer>,
    /// Decides what each request gets.
    router: Router,
    /// This worker's backends, and the response cache of the process.
    backends: Backends,
    /// Parsers not lent to any connection, boxed as connections hold them, so lending one
    /// moves a pointer rather than the parser.
    #[allow(clippy::vec_box)]
    parsers: Vec<Box<Parser>>,
    /// This worker's counters, when metrics are on.
    metrics: Option<WorkerMetrics>,
    /// Reused text of a scrape.
    scrape: String,
    /// HTTP/2 response heads kept ready to send.
    h2_heads: h2::PreparedHeads,
    /// This worker's modules; `None` when the configuration has none, so that requests
    /// then take the path they took before modules existed.
    modules: Option<Box<WorkerModules>>,
}

/// What a connection is doing between requests.
enum Phase {
    /// Waiting for (the rest of) a request head.
    Head,
    /// Discarding this many more bytes of a request body.
    DiscardLength(u64),
    /// Discarding a chunked request body; counts what was discarded.
    DiscardChunked(Box<ChunkedDecoder>, u64),
    /// Relaying a request to a backend and its response back, or bridged to one.
    Proxy(Box<Handed>),
    /// The request at the head of the input waits, unread, for another request's fetch of
    /// the same page to fill the response cache: handed over again at `again` (its
    /// deadline), having first waited at `since`.
    AwaitFill { since: Instant, again: Instant },
    /// The connection speaks HTTP/2: each of its streams is a request of its own.
    H2(Box<h2::H2Session>),
}

/// Everything the server keeps for one connection.
pub(crate) struct HttpConn {
    peer: Peer,
    phase: Phase,
    /// Lent from the worker while a request head is being read; an idle connection holds
    /// none, which keeps idle keep-alive connections small.
    parser: Option<Box<Parser>>,
    requests: u64,
    head_started: Option<Instant>,
    /// The access-log entry of a large response still being sent.
    deferred: Option<Box<Deferred>>,
    /// The connection came in on the metrics listener.
    scrape: bool,
    /// Counted as idle between requests in the metrics.
    idle: bool,
    /// A backend connection of a client connection's exchange: its events step that
    /// exchange, so the handler is never called for it but at its open and close.
    backend: bool,
    /// The connection speaks TLS, and the server name its client asked for, if it did
    /// (boxed: a plain connection pays one word for it).
    tls: Option<Box<Tls>>,
    /// Its listener redirects every request to HTTPS on this port.
    to_https: Option<u16>,
    /// A stream of an HTTP/2 connection, served as a request of its own: it is never joined
    /// with a backend (the bytes must pass through the stream's framing).
    stream: bool,
}

/// What a TLS connection's requests need of its handshake.
#[derive(Clone)]
pub(crate) struct Tls {
    /// The SNI name, in lower case: every request's `Host` must name it (RFC 9110 §7.4:
    /// a request for another host on this connection gets 421).
    server_name: Option<Box<str>>,
    /// What the access log says of it.
    fields: TlsFields,
    /// The `Strict-Transport-Security` line of the host it is for, if that host has one.
    hsts: Option<Arc<[u8]>>,
}

/// How the client reached the server, as a request answered on the connection sees it.
#[derive(Clone, Copy, Default)]
pub(crate) struct Scheme<'c> {
    /// Over TLS.
    pub(crate) https: bool,
    /// Requests are answered with a redirect to HTTPS on this port.
    pub(crate) to_https: Option<u16>,
    /// The TLS server name the client asked for.
    pub(crate) server_name: Option<&'c str>,
    /// The TLS agreed, for the access log.
    pub(crate) tls: Option<TlsFields>,
    /// The request is one of an HTTP/2 connection's streams.
    pub(crate) stream: bool,
}

/// The health check's answer: small, never cached by anything between.
const HEALTH_FIELDS: &[u8] = b"Content-Type: text/plain\r\nCache-Control: no-store\r\n";

/// The lines every response on a connection whose TLS side is `tls` carries: its host's
/// `Strict-Transport-Security` (none over plain HTTP, RFC 6797 §7.2). Taken from the TLS
/// side alone, for callers that hold other parts of the connection borrowed.
fn hsts_of(tls: &Option<Box<Tls>>) -> &[u8] {
    tls.as_ref()
        .and_then(|tls| tls.hsts.as_deref())
        .unwrap_or_default()
}

impl<'c> Scheme<'c> {
    /// The scheme of a connection whose TLS side is `tls` (of an HTTP/2 `stream`).
    fn of(tls: &'c Option<Box<Tls>>, to_https: Option<u16>, stream: bool) -> Self {
        match tls {
            Some(tls) => Scheme {
                https: true,
                to_https: None,
                server_name: tls.server_name.as_deref(),
                tls: Some(tls.fields),
                stream,
            },
            None => Scheme {
                to_https,
                stream,
                ..Scheme::default()
            },
        }
    }
}

/// Where a request for `target` on `host` (maybe with a port) goes over HTTPS on `port`:
/// the same host and path and query, the port written unless it is 443. A target in
/// absolute form keeps its path; `*` (OPTIONS) goes to `/`.
fn https_location(host: &str, port: u16, target: &str) -> String {
    let name = crate::vhosts::host_without_port(host);
    let path = if target.starts_with('/') {
        target
    } else {
        // absolute-form: after the scheme and the authority.
        target
            .split_once("://")
            .and_then(|(_, rest)| rest.find('/').map(|at| &rest[at..]))
            .unwrap_or("/")
    };
    if port == 443 {
        format!("https://{name}{path}")
    } else {
        format!("https://{name}:{port}{path}")
    }
}

/// Whether a request's `Host` (maybe with a port, maybe with a trailing dot, any case) names
/// the TLS server name `sni`. A request without Host (HTTP/1.0) is taken to mean it.
fn host_is_server_name(host: Option<&str>, sni: &str) -> bool {
    host.is_none_or(|host| crate::vhosts::host_name(host).eq_ignore_ascii_case(sni))
}

/// What the access log says of a connection whose TLS side is `tls` (`None` over plain
/// HTTP); from that side alone, like [`hsts_of`].
fn tls_fields_of(tls: &Option<Box<Tls>>) -> Option<TlsFields> {
    tls.as_ref().map(|tls| tls.fields)
}

impl HttpConn {
    /// Who the connection's requests come from, as the access log names them.
    fn client(&self) -> Client {
        Client {
            peer: self.peer,
            tls: tls_fields_of(&self.tls),
        }
    }

    /// A new connection's state; `backend` for a connection to a backend.
    fn new(peer: Peer, backend: bool) -> Self {
        HttpConn {
            peer,
            phase: Phase::Head,
            parser: None,
            requests: 0,
            head_started: None,
            deferred: None,
            scrape: false,
            idle: false,
            backend,
            tls: None,
            to_https: None,
            stream: false,
        }
    }

    /// The state of a stream of this HTTP/2 connection: who it is from and how they came.
    fn for_stream(&self) -> HttpConn {
        HttpConn {
            tls: self.tls.clone(),
            to_https: self.to_https,
            scrape: self.scrape,
            stream: true,
            ..HttpConn::new(self.peer, false)
        }
    }

    /// The backend connection of the exchange under way, if one is.
    fn backend_link(&self) -> Option<fastpath_drivers::ConnRef> {
        match &self.phase {
            Phase::Proxy(handed) => handed.exchange.link(),
            _ => None,
        }
    }
}

/// A request handed over to a backend, and what the access log will say of it.
pub(crate) struct Handed {
    exchange: Exchange,
    logged: Logged,
    /// The access log has the request's line (a bridge's, as it was handed over).
    written: bool,
}

/// An access-log entry held until its response has been sent or cut short.
struct Deferred {
    time: Vec<u8>,
    logged: Logged,
    status: u16,
    body_bytes: u64,
    /// Where the response ends in the connection's count of sent bytes
    /// ([`fastpath_drivers::Output::sent`]).
    end: u64,
    /// A backend's response read ahead of the client: one cut short says why it ended,
    /// as an exchange does, once the connection's close reason is known.
    relayed: bool,
    /// The connection is closing with this many bytes sent (set by `on_closing`).
    closing_sent: Option<u64>,
}

/// What answering a request decided about the connection.
struct Outcome {
    head_len: usize,
    close: bool,
    /// The request has a body that has not been read.
    body_pending: bool,
    discard: Phase,
    /// The access-log entry, if it waits for the response to be sent.
    deferred: Option<Box<Deferred>>,
}

impl HttpHandler {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        hosts: Arc<VirtualHosts>,
        settings: Arc<HandlerSettings>,
        access_log: Option<AccessLogBuffer>,
        cache: (ContentCache, Arc<AtomicUsize>),
        routes: Arc<Routes>,
        backends: Vec<BackendState>,
        response_cache: (Arc<SharedCache>, Arc<AtomicUsize>),
        metrics: Option<WorkerMetrics>,
    ) -> Self {
        HttpHandler {
            backends: Backends::new(backends, response_cache, settings.limits, metrics.clone()),
            metrics,
            scrape: String::new(),
            h2_heads: h2::PreparedHeads::default(),
            router: Router::new(hosts, routes, cache),
            settings,
            clock: Clock::new(),
            access_log,
            parsers: Vec::new(),
            modules: None,
        }
    }

    /// Runs `modules` for this worker's requests.
    pub(crate) fn with_modules(mut self, modules: Option<Box<WorkerModules>>) -> Self {
        self.modules = modules;
        self
    }

    /// Joins bridged connections in the kernel with `path` (splice without).
    pub(crate) fn with_kernel_bridge(
        mut self,
        path: Option<Arc<fastpath_kernel::BridgePath>>,
    ) -> Self {
        self.backends.kernel_bridge = path;
        self
    }

    /// The content cache's hits and misses, for tests.
    #[cfg(test)]
    pub(crate) fn router_cache_stats(&self) -> fastpath_content::CacheStats {
        self.router.cache_stats()
    }

    fn give_parser(&mut self, mut parser: Box<Parser>) {
        if self.parsers.len() < MAX_POOLED_PARSERS {
            parser.reset();
            self.parsers.push(parser);
        }
    }

    fn process(&mut self, conn: &mut HttpConn, io: &mut Io<'_>) -> Next {
        if let Phase::H2(_) = conn.phase {
            return self.serve_h2(conn, io, false);
        }
        if conn.idle {
            conn.idle = false;
            if let Some(metrics) = &self.metrics {
                metrics.idle(false);
            }
        }
        if conn.deferred.is_some() {
            self.settle(conn, io.output().sent(), false);
        }
        // When the request at the head of the input first waited for another's fetch.
        let mut waiting = None;
        loop {
            // An exchange buffering its response goes on reading the backend meanwhile, so
            // the backend connection is free as soon as the backend is done.
            let reads_ahead = matches!(&conn.phase, Phase::Proxy(h) if h.exchange.reads_ahead());
            if io.output().pending() >= OUTPUT_HIGH_WATER && !reads_ahead {
                io.set_deadline(None);
                return Next::Drain;
            }
            match &mut conn.phase {
                Phase::Head => {}
                Phase::H2(_) => return self.serve_h2(conn, io, false),
                &mut Phase::AwaitFill { since, again } => {
                    if io.now() < again {
                        io.set_deadline(Some(again));
                        return Next::Read;
                    }
                    waiting = Some(since);
                    conn.phase = Phase::Head;
                }
                Phase::Proxy(handed) => {
                    let progress = handed.exchange.step(&mut self.backends.states, io);
                    match self.finish_exchange(conn, io, progress) {
                        Some(next) => return next,
                        None => continue,
                    }
                }
                Phase::DiscardLength(remaining) => {
                    let take = (*remaining).min(io.input().len() as u64);
                    io.input_mut().consume(take as usize);
                    *remaining -= take;
                    if *remaining > 0 {
                        io.set_deadline(Some(io.now() + self.settings.header_timeout));
                        return Next::Read;
                    }
                    conn.phase = Phase::Head;
                }
                Phase::DiscardChunked(decoder, discarded) => {
                    match decoder.feed(io.input().data(), |_| {}) {
                        Ok((used, done)) => {
                            io.input_mut().consume(used);
                            *discarded += used as u64;
                            if *discarded > self.settings.max_discard_body {
                                // The response has been queued already: close after it.
                                return Next::Linger;
                            }
                            if !done {
                                io.set_deadline(Some(io.now() + self.settings.header_timeout));
                                return Next::Read;
                            }
                            conn.phase = Phase::Head;
                        }
                        Err(e) => {
                            tracing::debug!("{}: bad chunked body: {e}", conn.peer);
                            return Next::Linger;
                        }
                    }
                }
            }
            if io.input().is_empty() {
                conn.head_started = None;
                if let Some(parser) = conn.parser.take() {
                    self.give_parser(parser);
                }
                if io.eof() {
                    return Next::Close;
                }
                // The first request gets the header timeout, later ones the idle timeout; a
                // stopping server's connection that had one (its last response, begun before
                // the stop, said keep-alive: a relayed one) waits only a moment for the
                // client's next request, answered with `Connection: close`, as `on_drain`
                // has idle connections do: closing at once could cut that request off.
                let wait = if conn.requests == 0 {
                    self.settings.header_timeout
                } else if io.draining() {
                    DRAIN_IDLE_WAIT.min(self.settings.keepalive_timeout)
                } else {
                    if let Some(metrics) = &self.metrics {
                        conn.idle = true;
                        metrics.idle(true);
                    }
                    self.settings.keepalive_timeout
                };
                io.set_deadline(Some(io.now() + wait));
                return Next::Read;
            }
            if conn.requests == 0 && conn.parser.is_none() && !conn.stream {
                if let Some(next) = self.detect_h2c(conn, io) {
                    return next;
                }
            }
            let started = *conn.head_started.get_or_insert(io.now());
            let peer = conn.peer;
            let requests = conn.requests;
            let limits = self.settings.limits;
            let parser = conn.parser.get_or_insert_with(|| {
                self.parsers
                    .pop()
                    .unwrap_or_else(|| Box::new(Parser::new(limits)))
            });
            let (eof, now, draining) = (io.eof(), io.now(), io.draining());
            let parts = io.parts();
            let outcome = match parser.parse(parts.input.data()) {
                Ok(None) => {
                    if eof {
                        return Next::Close;
                    }
                    *parts.deadline = Some(started + self.settings.header_timeout);
                    return Next::Read;
                }
                Err(e) => {
                    tracing::debug!("{peer}: bad request: {e}");
                    let line = first_line(parts.input.data());
                    let sent = Writer {
                        output: parts.output,
                        pool: parts.pool,
                        date: self.clock.http_date(),
                        also: hsts_of(&conn.tls),
                        edit: None,
                    }
                    .error(e.status, Answer::BAD_REQUEST);
                    let client = Client {
                        peer,
                        tls: tls_fields_of(&conn.tls),
                    };
                    self.log(client, Said::unparsed(&[line]), e.status, sent, None);
                    return Next::Close;
                }
                Ok(Some(request)) => {
                    let raw_head = &parts.input.data()[..request.head_len];
                    let mut sink = Sink {
                        output: parts.output,
                        pool: parts.pool,
                        deadline: parts.deadline,
                        now,
                        also: conn.tls.as_ref().and_then(|tls| tls.hsts.as_ref()),
                        edit: None,
                        compress: None,
                    };
                    let scrape = conn.scrape;
                    let served = (requests, scrape, waiting.take());
                    let scheme = Scheme::of(&conn.tls, conn.to_https, conn.stream);
                    self.respond(
                        (peer, scheme),
                        served,
                        &request,
                        raw_head,
                        &mut sink,
                        draining,
                    )
                }
            };
            if let Phase::AwaitFill { .. } = outcome.discard {
                // Parked unread, its head still first in the input: the parser keeps what it
                // found and gives it again when its turn comes, without a second scan.
                conn.phase = outcome.discard;
                continue;
            }
            if let Some(deferred) = outcome.deferred {
                // Cannot happen (see DEFER_LOG_OVER); an entry is never lost if it does.
                self.settle(conn, io.output().sent(), true);
                conn.deferred = Some(deferred);
            }
            io.input_mut().consume(outcome.head_len);
            if let Some(parser) = conn.parser.as_mut() {
                parser.reset();
            }
            conn.head_started = None;
            conn.requests += 1;
            if outcome.close {
                // An unread body may still be arriving: drain it a while so that closing
                // does not reset the response away.
                return if outcome.body_pending {
                    Next::Linger
                } else {
                    Next::Close
                };
            }
            conn.phase = outcome.discard;
        }
    }

    /// Starts HTTP/2 on a plain connection whose first bytes are its preface (prior
    /// knowledge, h2c): `Some` with what the connection does next when they are, or may be
    /// once more arrive; `None` for HTTP/1.
    fn detect_h2c(&mut self, conn: &mut HttpConn, io: &mut Io<'_>) -> Option<Next> {
        let settings = self.settings.h2.as_ref()?;
        if conn.tls.is_some() || conn.scrape {
            // Over TLS, ALPN says which protocol it is; the metrics speak HTTP/1.
            return None;
        }
        match fastpath_http::h2::detect_preface(io.input().data()) {
            fastpath_http::h2::PrefaceMatch::NotHttp2 => None,
            fastpath_http::h2::PrefaceMatch::NeedMore => {
                if io.eof() {
                    return Some(Next::Close);
                }
                let started = *conn.head_started.get_or_insert(io.now());
                io.set_deadline(Some(started + self.settings.header_timeout));
                Some(Next::Read)
            }
            fastpath_http::h2::PrefaceMatch::Http2 => {
                self.start_h2(conn, io, *settings);
                Some(self.serve_h2(conn, io, false))
            }
        }
    }

    /// Makes `conn` an HTTP/2 connection, its server preface queued.
    fn start_h2(
        &mut self,
        conn: &mut HttpConn,
        io: &mut Io<'_>,
        settings: fastpath_http::h2::ServerSettings,
    ) {
        let now = io.now();
        let (output, pool) = io.output_and_pool();
        let discard = (self.settings.limits, self.settings.max_discard_body);
        let session = h2::H2Session::start(settings, discard, now, output, pool);
        conn.head_started = None;
        conn.phase = Phase::H2(session);
    }

    /// Whether `target` asks for the health check (a query is allowed: some balancers add
    /// one to tell their checks apart).
    fn is_health_check(&self, target: &str) -> bool {
        self.settings.health_check.as_deref().is_some_and(|path| {
            target
                .split_once('?')
                .map_or(target, |(path, _)| path)
                .eq(path)
        })
    }

    /// The answer to an ACME http-01 validation (`/.well-known/acme-challenge/TOKEN`): the
    /// key authorization the ACME client wrote for the token, else 404. `None` for any
    /// other request, or when no host gets its certificate over http-01.
    fn acme_challenge(&self, request: &Request<'_>) -> Option<Route> {
        let dir = self.settings.acme_challenges.as_deref()?;
        let token = request.target.strip_prefix(fastpath_acme::HTTP01_PREFIX)?;
        if !matches!(request.kind, Method::Get | Method::Head) {
            return Some(Route::MethodNotAllowed);
        }
        // A token is base64url (RFC 8555 section 8.3): nothing else names a file.
        let token_ok = !token.is_empty()
            && token.len() <= 256
            && token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !token_ok {
            return Some(Route::Error(404));
        }
        match std::fs::read(dir.join(token)) {
            Ok(key_authorization) => {
                let mut response = crate::module::Response::new(200);
                response.body = Some(("application/octet-stream".to_owned(), key_authorization));
                Some(Route::Module(Box::new(response)))
            }
            Err(_) => Some(Route::Error(404)),
        }
    }

    /// `route`, or, if it is an error a page was named for (`error_pages`), that page with
    /// its status: a module's answer keeps its fields (a 401's challenge), the page
    /// becoming its body when the page's file is held in memory.
    fn with_error_page(
        &mut self,
        route: Route,
        pages: &crate::module::ErrorPages,
        request: &Request<'_>,
    ) -> Route {
        let status = match &route {
            Route::Error(status) => *status,
            Route::MethodNotAllowed => 405,
            Route::Static(reply) if reply.status >= 400 => reply.status,
            Route::Module(response) if response.body.is_none() && response.status >= 400 => {
                response.status
            }
            _ => return route,
        };
        let Some(path) = pages.page(status) else {
            return route;
        };
        let head = request.kind == Method::Head;
        let Some(page) = self.router.error_page(request.host, path, status, head) else {
            return route;
        };
        match route {
            Route::Module(mut response) => {
                if let fastpath_content::Body::Memory { data, offset, len } = &page.body {
                    let content_type = page.content_type.as_deref().unwrap_or("text/html");
                    response.body = Some((
                        content_type.to_owned(),
                        data[*offset..*offset + *len].to_vec(),
                    ));
                }
                Route::Module(response)
            }
            _ => Route::Static(page),
        }
    }

    /// Answers one parsed request by queueing the whole response.
    #[inline]
    fn respond(
        &mut self,
        (peer, scheme): (Peer, Scheme<'_>),
        (served, scrape, waiting): (u64, bool, Option<Instant>),
        request: &Request<'_>,
        raw_head: &[u8],
        sink: &mut Sink<'_>,
        draining: bool,
    ) -> Outcome {
        let head = request.kind == Method::Head;
        // A stopping server answers with `Connection: close` (relayed answers too).
        let mut close = draining
            || !request.keep_alive
            || served + 1 >= self.settings.max_requests_per_connection;
        // A body relayed to a backend is neither discarded nor refused, so only the request
        // decides whether a relayed exchange closes the connection.
        let relay_close = close;
        // A body we do not want is read and dropped, unless it is too large or the client
        // waits for 100 Continue before sending it: then the connection closes after the reply.
        let body_pending = !matches!(request.framing, BodyFraming::None | BodyFraming::Length(0));
        let discard = match request.framing {
            BodyFraming::None | BodyFraming::Length(0) => Phase::Head,
            _ if request.expect_continue => {
                close = true;
                Phase::Head
            }
            BodyFraming::Length(n) if n > self.settings.max_discard_body => {
                close = true;
                Phase::Head
            }
            BodyFraming::Length(n) => Phase::DiscardLength(n),
            BodyFraming::Chunked => Phase::DiscardChunked(Box::new(ChunkedDecoder::new()), 0),
        };
        // The user a module authenticated the request as, for the access log.
        let mut user = None;
        let route = if scrape {
            match metrics::status(request.method, request.target) {
                200 => Route::Metrics,
                405 => Route::MethodNotAllowed,
                status => Route::Error(status),
            }
        } else if let Some(answer) = self.acme_challenge(request) {
            // Before redirects, hosts and modules: the CA asks the plain listener for it.
            answer
        } else if self.is_health_check(request.target) {
            match request.kind {
                Method::Get | Method::Head => Route::Health,
                _ => Route::MethodNotAllowed,
            }
        } else if let Some(port) = scheme.to_https {
            if request.host.is_some() {
                Route::ToHttps(port)
            } else {
                Route::Error(400)
            }
        } else if scheme
            .server_name
            .is_some_and(|sni| !host_is_server_name(request.host, sni))
        {
            Route::Error(421)
        } else if let Some(modules) = &mut self.modules {
            let metrics = self.metrics.as_ref().map(WorkerMetrics::all);
            let (route, notes) = route_by_modules(
                &mut self.router,
                modules,
                request,
                peer,
                scheme.https,
                metrics,
            );
            user = notes.user;
            sink.edit = notes.head_edit;
            sink.compress = notes.compress;
            match notes.error_pages {
                Some(pages) => self.with_error_page(route, &pages, request),
                None => route,
            }
        } else {
            self.router.route(request)
        };
        if matches!(route, Route::Error(400)) {
            // A request that cannot be made sense of ends the connection, as one that cannot
            // be parsed does: nothing says the bytes after it start a request.
            close = true;
        }
        let version = request.version;
        let answer = Answer {
            version,
            head,
            close,
        };
        let date = self.clock.http_date();
        let (status, body_bytes) = match route {
            Route::Handover(backend, method) => {
                // A bridge moves the connection's bytes around the server, so it cannot
                // carry TLS: a request that came over TLS is proxied instead.
                let method = match method {
                    HandoverMethod::Bridge if scheme.https || scheme.stream => {
                        HandoverMethod::Proxy
                    }
                    other => other,
                };
                let incoming = Incoming {
                    peer,
                    https: scheme.https,
                    request,
                    raw_head,
                    client_close: relay_close,
                    stream: scheme.stream,
                };
                let to = (backend, method);
                let now = sink.now;
                match self
                    .backends
                    .hand_over(to, &incoming, answer, sink, (date, waiting))
                {
                    HandOver::Wait(again) => {
                        // Nothing is answered or logged yet.
                        return Outcome {
                            head_len: 0,
                            close: false,
                            body_pending: false,
                            discard: Phase::AwaitFill {
                                since: waiting.unwrap_or(now),
                                again,
                            },
                            deferred: None,
                        };
                    }
                    HandOver::Started(exchange) => {
                        // Logged when the exchange ends; the body goes to the backend.
                        let handed = Handed {
                            exchange,
                            logged: Logged::of(request, scheme.stream).with_user(user.as_deref()),
                            written: false,
                        };
                        return Outcome {
                            head_len: request.head_len,
                            close: false,
                            body_pending: false,
                            discard: Phase::Proxy(Box::new(handed)),
                            deferred: None,
                        };
                    }
                    HandOver::Answered(status, bytes) => (status, bytes),
                    HandOver::Refused(status, bytes) => {
                        close = true;
                        (status, bytes)
                    }
                }
            }
            Route::Error(status) => (status, sink.writer(date).error(status, answer)),
            Route::ToHttps(port) => {
                let location = https_location(request.host.unwrap_or(""), port, request.target);
                // 308 keeps the method and body of what is not a GET or HEAD.
                let status = match request.kind {
                    Method::Get | Method::Head => 301,
                    _ => 308,
                };
                let meta = Metadata {
                    location: Some(&location),
                    ..Metadata::default()
                };
                (status, sink.writer(date).page(status, answer, meta))
            }
            Route::MethodNotAllowed => (405, sink.writer(date).method_not_allowed(answer)),
            Route::Module(response) => (
                response.status,
                sink.writer(date).module_response(&response, answer),
            ),
            Route::Static(reply) => sink.writer(date).static_reply(&reply, answer),
            Route::Health => (
                200,
                sink.writer(date).document(answer, HEALTH_FIELDS, b"ok\n"),
            ),
            Route::Metrics => {
                self.scrape.clear();
                if let Some(metrics) = &self.metrics {
                    metrics.all().render(&mut self.scrape);
                }
                let body = self.scrape.as_bytes();
                (
                    200,
                    sink.writer(date)
                        .document(answer, metrics::CONTENT_TYPE, body),
                )
            }
        };
        // Deferred only where there is a log to write: the copies it takes cost a large
        // response its share of allocations for nothing otherwise.
        if body_bytes > DEFER_LOG_OVER && self.access_log.is_some() {
            let deferred = Deferred {
                time: self.clock.log_time().to_vec(),
                logged: Logged::of(request, scheme.stream).with_user(user.as_deref()),
                status,
                body_bytes,
                end: sink.output.sent() + sink.output.pending(),
                relayed: false,
                closing_sent: None,
            };
            return Outcome {
                head_len: request.head_len,
                close,
                body_pending,
                discard,
                deferred: Some(Box::new(deferred)),
            };
        }
        let line = request_line(request, scheme.stream);
        let client = Client {
            peer,
            tls: scheme.tls,
        };
        let said = Said {
            user: user.as_deref().map(str::as_bytes),
            ..Said::of(request, &line)
        };
        self.log(client, said, status, body_bytes, None);
        Outcome {
            head_len: request.head_len,
            close,
            body_pending,
            discard,
            deferred: None,
        }
    }

    /// Logs a deferred entry once its response has been sent (`sent` is the connection's
    /// [`fastpath_drivers::Output::sent`]), or, `closing`, with the body bytes that did leave.
    fn settle(&mut self, conn: &mut HttpConn, sent: u64, closing: bool) {
        self.settle_because(conn, sent, closing, None);
    }

    /// [`HttpHandler::settle`]; a relayed response cut short is logged with `ended`.
    fn settle_because(
        &mut self,
        conn: &mut HttpConn,
        sent: u64,
        closing: bool,
        ended: Option<&str>,
    ) {
        let Some(deferred) = conn.deferred.take_if(|d| closing || sent >= d.end) else {
            return;
        };
        let unsent = deferred.end.saturating_sub(sent).min(deferred.body_bytes);
        let ended = ended.filter(|_| deferred.relayed && unsent > 0);
        let line = [deferred.logged.line()];
        let said = deferred.logged.said(&line);
        if let Some(metrics) = &self.metrics {
            metrics.request(said.method, deferred.status, deferred.body_bytes - unsent);
        }
        if let Some(log) = self.access_log.as_mut() {
            log.record(&Entry {
                client: conn.client(),
                time: &deferred.time,
                said,
                status: deferred.status,
                body_bytes: deferred.body_bytes - unsent,
                ended,
            });
        }
    }

    /// Acts on how a step of an exchange went: `None` to go on with the next request.
    fn finish_exchange(
        &mut self,
        conn: &mut HttpConn,
        io: &mut Io<'_>,
        progress: Progress,
    ) -> Option<Next> {
        let Phase::Proxy(handed) = &mut conn.phase else {
            return None;
        };
        let exchange = &handed.exchange;
        let finished = matches!(progress, Progress::Finished { .. });
        if let Some(metrics) = &self.metrics {
            match progress {
                Progress::Finished { .. } => metrics.backend_response(
                    exchange.backend(),
                    io.now().saturating_duration_since(exchange.started()),
                ),
                Progress::Failed(_) | Progress::Broken(_) => {
                    metrics.backend_error(exchange.backend())
                }
                Progress::Wait(_) | Progress::Joined => {}
            }
        }
        let mut ended = None;
        let (status, bytes, next) = match progress {
            Progress::Wait(next) => return Some(next),
            Progress::Joined => {
                // Logged as it is handed over, status and size unknown ("-"): what follows is
                // the backend's to log. The exchange stays in place so that closing the
                // connection releases its count of backend connections.
                if !handed.written {
                    handed.written = true;
                    let line = [handed.logged.line()];
                    let said = handed.logged.said(&line);
                    // The connection's other parts: its phase is borrowed.
                    let client = Client {
                        peer: conn.peer,
                        tls: tls_fields_of(&conn.tls),
                    };
                    Self::record(
                        &self.metrics,
                        &mut self.access_log,
                        &mut self.modules,
                        &self.clock,
                        client,
                        said,
                        0,
                        0,
                        None,
                    );
                }
                return Some(Next::Read);
            }
            Progress::Finished { close } => {
                // Body bytes the backend did not wait for may still be arriving: they are
                // read and dropped while the connection lingers, so they cannot reset the
                // response away.
                let how = if exchange.body_unsent() {
                    Next::Linger
                } else {
                    Next::Close
                };
                (exchange.status(), exchange.relayed(), close.then_some(how))
            }
            Progress::Failed(status) => {
                let close = exchange.client_close() || exchange.body_unsent();
                let answer = Answer {
                    version: exchange.client_version(),
                    head: exchange.is_head(),
                    close,
                };
                let (output, pool) = io.output_and_pool();
                let sent = Writer {
                    output,
                    pool,
                    date: self.clock.http_date(),
                    also: hsts_of(&conn.tls),
                    edit: None,
                }
                .error(status, answer);
                (status, sent, close.then_some(Next::Linger))
            }
            // What arrived goes out, then the close: short of its announced length, the
            // response can never pass for complete.
            Progress::Broken(why) => {
                ended = Some(why);
                (exchange.status(), exchange.relayed(), Some(Next::Close))
            }
        };
        let handed = match std::mem::replace(&mut conn.phase, Phase::Head) {
            Phase::Proxy(handed) => handed,
            _ => unreachable!("the phase was checked above"),
        };
        let Handed {
            exchange, logged, ..
        } = *handed;
        self.backends.exchange_ended(exchange, finished);
        // A buffered response is over for the backend while the client may still be
        // downloading it: like a large static response, it is logged once sent, with the
        // bytes that really left. A connection holds one such entry at a time: if an
        // earlier one is still being sent, this one is logged now.
        let unsent = io.output().pending();
        self.settle(conn, io.output().sent(), false);
        if finished
            && unsent > DEFER_LOG_OVER
            && self.access_log.is_some()
            && conn.deferred.is_none()
        {
            let deferred = Deferred {
                time: self.clock.log_time().to_vec(),
                logged,
                status,
                body_bytes: bytes,
                end: io.output().sent() + unsent,
                relayed: true,
                closing_sent: None,
            };
            conn.deferred = Some(Box::new(deferred));
            return next;
        }
        let line = [logged.line()];
        self.log(conn.client(), logged.said(&line), status, bytes, ended);
        next
    }

    fn log(
        &mut self,
        client: Client,
        said: Said<'_>,
        status: u16,
        body_bytes: u64,
        ended: Option<&str>,
    ) {
        Self::record(
            &self.metrics,
            &mut self.access_log,
            &mut self.modules,
            &self.clock,
            client,
            said,
            status,
            body_bytes,
            ended,
        );
    }

    /// Counts a request in the metrics and writes its access-log line (the handler's parts
    /// it needs, apart, for a caller that holds a connection's request borrowed).
    #[allow(clippy::too_many_arguments)]
    fn record(
        metrics: &Option<WorkerMetrics>,
        access_log: &mut Option<AccessLogBuffer>,
        modules: &mut Option<Box<WorkerModules>>,
        clock: &Clock,
        client: Client,
        said: Said<'_>,
        status: u16,
        body_bytes: u64,
        ended: Option<&str>,
    ) {
        if let Some(metrics) = metrics {
            metrics.request(said.method, status, body_bytes);
        }
        if let Some(modules) = modules {
            modules.log(&crate::module::LogRecord {
                line: said.line,
                status,
                body_bytes,
                client: client.peer.client_ip(),
            });
        }
        if let Some(log) = access_log.as_mut() {
            log.record(&Entry {
                client,
                time: clock.log_time(),
                said,
                status,
                body_bytes,
                ended,
            });
        }
    }

    /// Logs an exchange the connection's end cut off: the status as sent (`-` if none was),
    /// the body bytes relayed and why it ended; in the error log too when the failure was on
    /// this side.
    fn log_cut_exchange(&mut self, client: Client, handed: Handed, reason: CloseReason) {
        let peer = client.peer;
        let ended = ended_because(reason);
        let Handed {
            exchange, logged, ..
        } = handed;
        let (status, relayed) = (exchange.status(), exchange.relayed());
        // Cut short: nothing of it is kept.
        self.backends.exchange_ended(exchange, false);
        let request = String::from_utf8_lossy(logged.line());
        if ended == "error" {
            // Neither the client's doing nor the backend's: a failure on this side.
            tracing::warn!(
                "{peer}: \"{}\" ended without a complete answer: the connection failed",
                request.escape_debug()
            );
        } else {
            tracing::debug!(
                "{peer}: \"{}\" ended without a complete answer: {ended}",
                request.escape_debug()
            );
        }
        let line = [logged.line()];
        self.log(client, logged.said(&line), status, relayed, Some(ended));
    }
}

/// What the access log says of a response a connection's close cut short.
fn ended_because(reason: CloseReason) -> &'static str {
    match reason {
        // The handler never ends an exchange this way: the client's end of stream did.
        CloseReason::Done | CloseReason::PeerGone => CLIENT_GONE,
        CloseReason::SendTimeout => "send-timeout",
        CloseReason::Shutdown => "shutdown",
        // A socket error, a file that shrank, or a reason this version does not know.
        _ => "error",
    }
}

/// The first line of what a client sent, for logging a request that could not be parsed.
fn first_line(data: &[u8]) -> &[u8] {
    let end = data
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(data.len())
        .min(MAX_LOGGED_BAD_LINE);
    &data[..end]
}

impl Handler for HttpHandler {
    type Conn = HttpConn;

    fn on_open(&mut self, opened: Opened, io: &mut Io<'_>) -> (HttpConn, Next) {
        if let Origin::Linked { .. } = opened.origin() {
            return (HttpConn::new(Peer::Tcp(opened.peer()), true), Next::Read);
        }
        if self.settings.send_buffer > 0 {
            set_send_buffer(io, self.settings.send_buffer);
        }
        // A client that connects and never sends a byte gets the header timeout like one that
        // stops halfway, and is then closed without an answer (there is no request to answer).
        io.set_deadline(Some(io.now() + self.settings.header_timeout));
        let unix = opened
            .listener()
            .and_then(|i| *self.settings.listeners.unix_names.get(i)?);
        let mut conn = HttpConn::new(unix.map_or(Peer::Tcp(opened.peer()), Peer::Unix), false);
        conn.to_https = opened
            .listener()
            .and_then(|i| *self.settings.listeners.https_redirects.get(i)?);
        conn.tls = io.transport().map(|agreed| {
            Box::new(Tls {
                server_name: agreed.server_name.clone(),
                fields: TlsFields {
                    protocol: agreed.protocol,
                    cipher: agreed.cipher,
                    resumed: agreed.resumed,
                },
                hsts: self.router.hsts(agreed.server_name.as_deref()),
            })
        });
        if let Some(metrics) = &self.metrics {
            metrics.opened();
            conn.scrape = opened.listener() == Some(metrics.all().listener());
        }
        let alpn_h2 = io
            .transport()
            .is_some_and(|agreed| agreed.alpn.as_deref() == Some(b"h2"));
        let http2_only = opened
            .listener()
            .is_some_and(|i| self.settings.listeners.http2_only.get(i) == Some(&true));
        if let Some(settings) = self.settings.h2.as_ref().filter(|_| alpn_h2 || http2_only) {
            self.start_h2(&mut conn, io, *settings);
        }
        (conn, Next::Read)
    }

    fn on_ready(&mut self, conn: &mut HttpConn, io: &mut Io<'_>) -> Next {
        self.process(conn, io)
    }

    fn on_timeout(&mut self, conn: &mut HttpConn, io: &mut Io<'_>) -> Next {
        if let Phase::H2(_) = conn.phase {
            return self.serve_h2(conn, io, true);
        }
        if let Phase::AwaitFill { .. } = conn.phase {
            return self.process(conn, io);
        }
        if let Phase::Proxy(handed) = &mut conn.phase {
            let progress = handed.exchange.timed_out(&mut self.backends.states, io);
            return match self.finish_exchange(conn, io, progress) {
                Some(next) => next,
                None => self.process(conn, io),
            };
        }
        if matches!(conn.phase, Phase::Head) && conn.head_started.is_some() {
            // A request began but did not finish in time: say so, then close.
            let (output, pool) = io.output_and_pool();
            let sent = Writer {
                output,
                pool,
                date: self.clock.http_date(),
                also: hsts_of(&conn.tls),
                edit: None,
            }
            .error(408, Answer::BAD_REQUEST);
            let line = first_line(io.input().data());
            self.log(conn.client(), Said::unparsed(&[line]), 408, sent, None);
            let unread = io.input().len();
            io.input_mut().consume(unread);
            // The client may still be trickling the rest in.
            return Next::Linger;
        }
        Next::Close
    }

    /// A graceful stop closes a connection idle between requests, after a moment
    /// ([`DRAIN_IDLE_WAIT`]) for a request already on its way or still unread in the socket,
    /// which is answered with `Connection: close` (see `process`); closing at once would reset
    /// it away. A connection reading a request or sending a response goes on, and closes after
    /// it. A new connection that has not sent its first request yet is left its header
    /// timeout: its request may be on the way.
    fn on_drain(&mut self, conn: &mut HttpConn, io: &mut Io<'_>) -> Option<Next> {
        if let Phase::H2(_) = conn.phase {
            // Says GOAWAY and ends the connection once its streams are done.
            return Some(self.serve_h2(conn, io, false));
        }
        if let Phase::Proxy(handed) = &mut conn.phase {
            handed.exchange.close_if_head_unsent();
        }
        let idle = matches!(conn.phase, Phase::Head) && conn.requests > 0 && io.input().is_empty();
        if idle {
            // The timeout closes it (`on_timeout`: no request begun).
            let by = io.now() + DRAIN_IDLE_WAIT.min(self.settings.keepalive_timeout);
            if io.deadline().is_none_or(|at| at > by) {
                io.set_deadline(Some(by));
            }
        }
        None
    }

    fn on_closing(&mut self, conn: &mut HttpConn, sent: u64) {
        if let Phase::H2(session) = &mut conn.phase {
            self.h2_closing(session);
        }
        // A relayed response waits for the close reason (`on_close`) to say why it was cut.
        if let Some(deferred) = conn.deferred.as_mut().filter(|d| d.relayed) {
            deferred.closing_sent = Some(sent);
            return;
        }
        self.settle(conn, sent, true);
    }

    fn on_close(&mut self, mut conn: HttpConn, reason: CloseReason, worker: &mut Worker<'_>) {
        if conn.backend {
            // Its exchange heard why through the client connection's call.
            return;
        }
        if let Some(sent) = conn.deferred.as_ref().and_then(|d| d.closing_sent) {
            self.settle_because(&mut conn, sent, true, Some(ended_because(reason)));
        }
        // A stream of an HTTP/2 connection was never counted as a connection.
        if let Some(metrics) = self.metrics.as_ref().filter(|_| !conn.stream) {
            metrics.closed();
            if conn.idle {
                metrics.idle(false);
            }
        }
        match std::mem::replace(&mut conn.phase, Phase::Head) {
            Phase::H2(session) => self.h2_closed(session, reason, worker),
            Phase::Proxy(mut handed) => {
                // The connection ended mid-exchange: the driver closes the backend connection.
                handed.exchange.forget(&mut self.backends.states);
                // A joined bridge was logged as it was handed over; any other request cut off
                // here has had no line yet, and must not end unseen.
                if !handed.written {
                    self.log_cut_exchange(conn.client(), *handed, reason);
                } else {
                    self.backends.exchange_ended(handed.exchange, false);
                }
            }
            _ => {}
        }
        if let Some(parser) = conn.parser {
            self.give_parser(parser);
        }
    }

    fn on_tick(&mut self, now: Instant, _worker: &mut Worker<'_>) {
        self.clock.refresh();
        self.router.poll_changes();
        if let Some(metrics) = &self.metrics {
            self.router.publish_cache(metrics);
        }
        self.backends.tick_cache(now, self.metrics.as_ref());
        if let Some(log) = self.access_log.as_mut() {
            log.flush();
        }
    }

    fn on_stop(&mut self) {
        if let Some(log) = self.access_log.as_mut() {
            log.flush();
        }
    }

    fn refusal(&self, _listener: usize) -> &[u8] {
        REFUSAL
    }
}

/// Sets SO_SNDBUF on a client connection (`[limits] send_buffer`). Set here, on each
/// accepted socket, rather than once on the listeners: accepted sockets did not always
/// inherit it (on Linux 6.18, some kept the autotuned buffer under parallel load).
fn set_send_buffer(io: &Io<'_>, size: libc::c_int) {
    use std::os::fd::AsRawFd;
    if let Err(e) = setsockopt_int(
        io.socket().as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_SNDBUF,
        size,
    ) {
        tracing::debug!("SO_SNDBUF: {e}");
    }
}

#[cfg(test)]
mod scheme_tests {
    use super::{host_is_server_name, https_location};

    #[test]
    fn https_locations_keep_the_host_path_and_query() {
        assert_eq!(
            https_location("a.test", 443, "/x?y=1"),
            "https://a.test/x?y=1"
        );
        assert_eq!(
            https_location("a.test:8080", 8443, "/"),
            "https://a.test:8443/"
        );
        assert_eq!(https_location("[::1]:8080", 443, "/p"), "https://[::1]/p");
        assert_eq!(
            https_location("a.test", 443, "http://a.test/q?r"),
            "https://a.test/q?r"
        );
        assert_eq!(https_location("a.test", 443, "*"), "https://a.test/");
    }

    #[test]
    fn a_host_names_the_server_name_whatever_its_port_case_or_final_dot() {
        assert!(host_is_server_name(Some("A.Test.:8443"), "a.test"));
        assert!(host_is_server_name(None, "a.test"));
        assert!(!host_is_server_name(Some("b.test"), "a.test"));
        assert!(host_is_server_name(Some("[::1]:443"), "[::1]"));
    }
}
