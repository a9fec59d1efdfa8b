//! The HTTP/1.x connection handler: the same code runs under every concurrency model.
//!
//! All state for one connection lives in [`HttpConn`]; everything shared by a worker's
//! connections (the clock, the access-log buffer, scratch space) lives in [`HttpHandler`].

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fastpath_content::handover::{
    cache_key, redirect_location, BackendState, HandoverMethod, ResponseCache, RouteRequest, Routes,
};
use fastpath_content::{Body, ContentCache, Part, Reply, Source, StaticRequest};
use fastpath_drivers::{BufferPool, CloseReason, Handler, Io, Next, Output, UpstreamPort};
use fastpath_http::{
    normalize_path, parse_target, write_header, write_header_u64, write_status_line, BodyFraming,
    ChunkedDecoder, Parser, Request, Target, Version,
};

use crate::access_log::{AccessLogBuffer, Entry};
use crate::clock::Clock;
use crate::config::Config;
use crate::proxy::{CacheSlot, Exchange, Progress, Start, CLIENT_GONE};
use crate::vhosts::VirtualHosts;

/// Queued output past which pipelined requests wait until it is sent: bounds the memory a
/// client can make the server hold by pipelining without reading.
const OUTPUT_HIGH_WATER: u64 = 64 * 1024;
/// Parsers a worker keeps for reuse: enough for every connection that is mid-head at once
/// in ordinary traffic; more are freed when they come back.
const MAX_POOLED_PARSERS: usize = 1024;
/// Longest request line quoted in the access log for a request that could not be parsed.
const MAX_LOGGED_BAD_LINE: usize = 256;
/// The methods a static path allows.
const ALLOW: &[u8] = b"GET, HEAD";
/// Sent to connections turned away at the connection limit.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nServer: fastpath\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 32\r\nRetry-After: 1\r\nConnection: close\r\n\r\nToo many connections, try again\n";

/// Settings the handler needs, taken from the configuration once.
pub(crate) struct HandlerSettings {
    pub limits: fastpath_http::Limits,
    pub header_timeout: Duration,
    pub keepalive_timeout: Duration,
    pub max_discard_body: u64,
    pub max_requests_per_connection: u64,
}

impl HandlerSettings {
    pub(crate) fn from_config(config: &Config) -> Self {
        HandlerSettings {
            limits: fastpath_http::Limits {
                max_request_line: config.limits.max_request_line,
                max_header_bytes: config.limits.max_header_bytes,
                max_headers: config.limits.max_headers,
            },
            header_timeout: config.timeouts.header,
            keepalive_timeout: config.timeouts.keepalive,
            max_discard_body: config.limits.max_discard_body,
            max_requests_per_connection: config.limits.max_requests_per_connection,
        }
    }
}

/// One worker's HTTP handler.
pub(crate) struct HttpHandler {
    hosts: Arc<VirtualHosts>,
    settings: Arc<HandlerSettings>,
    clock: Clock,
    access_log: Option<AccessLogBuffer>,
    cache: ContentCache,
    path: Vec<u8>,
    /// Hand-over rules (shared) and this worker's view of each backend.
    routes: Arc<Routes>,
    backends: Vec<BackendState>,
    /// Backend responses that said they may be kept (TUX-style), and a reused key buffer.
    response_cache: ResponseCache,
    cache_key: Vec<u8>,
    /// Backend response parsers not lent to any exchange.
    #[allow(clippy::vec_box)]
    response_parsers: Vec<Box<fastpath_http::ResponseParser>>,
    /// Parsers not lent to any connection, boxed as connections hold them, so lending one
    /// moves a pointer rather than the parser.
    #[allow(clippy::vec_box)]
    parsers: Vec<Box<Parser>>,
}

/// What a connection is doing between requests.
enum Phase {
    /// Waiting for (the rest of) a request head.
    Head,
    /// Discarding this many more bytes of a request body.
    DiscardLength(u64),
    /// Discarding a chunked request body; counts what was discarded.
    DiscardChunked(Box<ChunkedDecoder>, u64),
    /// Relaying a request to a backend and its response back.
    Proxy(Box<Exchange>),
}

/// Everything the server keeps for one connection.
pub(crate) struct HttpConn {
    peer: SocketAddr,
    phase: Phase,
    /// Lent from the worker while a request head is being read; an idle connection holds
    /// none, which keeps idle keep-alive connections small.
    parser: Option<Box<Parser>>,
    requests: u64,
    head_started: Option<Instant>,
}

/// What answering a request decided about the connection.
struct Outcome {
    head_len: usize,
    close: bool,
    /// The request has a body that has not been read.
    body_pending: bool,
    discard: Phase,
}

impl HttpHandler {
    pub(crate) fn new(
        hosts: Arc<VirtualHosts>,
        settings: Arc<HandlerSettings>,
        access_log: Option<AccessLogBuffer>,
        cache: ContentCache,
        routes: Arc<Routes>,
        backends: Vec<BackendState>,
        response_cache: ResponseCache,
    ) -> Self {
        HttpHandler {
            routes,
            backends,
            response_cache,
            cache_key: Vec::with_capacity(256),
            response_parsers: Vec::new(),
            hosts,
            settings,
            clock: Clock::new(),
            access_log,
            cache,
            path: Vec::with_capacity(256),
            parsers: Vec::new(),
        }
    }

    fn give_parser(&mut self, mut parser: Box<Parser>) {
        if self.parsers.len() < MAX_POOLED_PARSERS {
            parser.reset();
            self.parsers.push(parser);
        }
    }

    fn process(&mut self, conn: &mut HttpConn, io: &mut Io<'_>) -> Next {
        loop {
            if io.output.pending() >= OUTPUT_HIGH_WATER {
                *io.deadline = None;
                return Next::Drain;
            }
            match &mut conn.phase {
                Phase::Head => {}
                Phase::Proxy(exchange) => {
                    let progress = exchange.step(&mut self.backends, io);
                    match self.finish_exchange(conn, io, progress) {
                        Some(next) => return next,
                        None => continue,
                    }
                }
                Phase::DiscardLength(remaining) => {
                    let take = (*remaining).min(io.input.len() as u64);
                    io.input.consume(take as usize);
                    *remaining -= take;
                    if *remaining > 0 {
                        *io.deadline = Some(io.now + self.settings.header_timeout);
                        return Next::Read;
                    }
                    conn.phase = Phase::Head;
                }
                Phase::DiscardChunked(decoder, discarded) => {
                    match decoder.feed(io.input.data(), |_| {}) {
                        Ok((used, done)) => {
                            io.input.consume(used);
                            *discarded += used as u64;
                            if *discarded > self.settings.max_discard_body {
                                // The response has been queued already: close after it.
                                return Next::Linger;
                            }
                            if !done {
                                *io.deadline = Some(io.now + self.settings.header_timeout);
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
            if io.input.is_empty() {
                conn.head_started = None;
                if let Some(parser) = conn.parser.take() {
                    self.give_parser(parser);
                }
                if io.eof {
                    return Next::Close;
                }
                // The first request gets the header timeout, later ones the idle timeout.
                let wait = if conn.requests == 0 {
                    self.settings.header_timeout
                } else {
                    self.settings.keepalive_timeout
                };
                *io.deadline = Some(io.now + wait);
                return Next::Read;
            }
            let started = *conn.head_started.get_or_insert(io.now);
            let peer = conn.peer;
            let requests = conn.requests;
            let limits = self.settings.limits;
            let parser = conn.parser.get_or_insert_with(|| {
                self.parsers
                    .pop()
                    .unwrap_or_else(|| Box::new(Parser::new(limits)))
            });
            let outcome = match parser.parse(io.input.data()) {
                Ok(None) => {
                    if io.eof {
                        return Next::Close;
                    }
                    *io.deadline = Some(started + self.settings.header_timeout);
                    return Next::Read;
                }
                Err(e) => {
                    tracing::debug!("{peer}: bad request: {e}");
                    let line = first_line(io.input.data());
                    let sent = self.error_reply(
                        io.output,
                        io.pool,
                        e.status,
                        Version::Http11,
                        false,
                        true,
                    );
                    self.log(peer, &[line], e.status, sent, None, None, None);
                    return Next::Close;
                }
                Ok(Some(request)) => {
                    let raw_head = &io.input.data()[..request.head_len];
                    let mut sink = Sink {
                        output: io.output,
                        pool: io.pool,
                        upstream: io.upstream,
                        deadline: io.deadline,
                        now: io.now,
                    };
                    self.respond(peer, requests, &request, raw_head, &mut sink)
                }
            };
            io.input.consume(outcome.head_len);
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

    /// Answers one parsed request by queueing the whole response.
    fn respond(
        &mut self,
        peer: SocketAddr,
        served: u64,
        request: &Request<'_>,
        raw_head: &[u8],
        sink: &mut Sink<'_>,
    ) -> Outcome {
        let head = request.method == "HEAD";
        let mut close =
            !request.keep_alive || served + 1 >= self.settings.max_requests_per_connection;
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
        let version = request.version;
        let (output, pool) = (&mut *sink.output, &mut *sink.pool);
        let (status, body_bytes) = match self.route(request) {
            Route::Handover(backend, method) => {
                match self.hand_over(
                    peer,
                    request,
                    raw_head,
                    backend,
                    method,
                    (close, relay_close),
                    sink,
                ) {
                    HandOver::Started(exchange) => {
                        // Logged when the exchange ends; the body goes to the backend.
                        return Outcome {
                            head_len: request.head_len,
                            close: false,
                            body_pending: false,
                            discard: Phase::Proxy(exchange),
                        };
                    }
                    HandOver::Answered(status, bytes) => (status, bytes),
                }
            }
            Route::Error(status) => (
                status,
                self.error_reply(output, pool, status, version, head, close),
            ),
            Route::MethodNotAllowed => (
                405,
                self.error_reply_with(output, pool, 405, version, head, close, |out| {
                    write_header("Allow", ALLOW, out)
                }),
            ),
            Route::Static(reply) => self.static_reply(output, pool, &reply, version, head, close),
        };
        let version_text: &[u8] = match version {
            Version::Http10 => b"HTTP/1.0",
            Version::Http11 => b"HTTP/1.1",
        };
        self.log(
            peer,
            &[
                request.method.as_bytes(),
                request.target.as_bytes(),
                version_text,
            ],
            status,
            body_bytes,
            request.header("referer"),
            request.header("user-agent"),
            None,
        );
        Outcome {
            head_len: request.head_len,
            close,
            body_pending,
            discard,
        }
    }

    /// Decides what a request gets: a static reply, or an error status.
    fn route(&mut self, request: &Request<'_>) -> Route {
        let target = match parse_target(request.target) {
            Ok(target) => target,
            Err(e) => return Route::Error(e.status),
        };
        let (authority, raw_path, query) = match target {
            Target::Origin { path, query } => (None, path, query),
            Target::Absolute {
                authority,
                path,
                query,
                ..
            } => (Some(authority), path, query),
            Target::Authority(_) | Target::Asterisk => {
                return match request.method {
                    "CONNECT" | "OPTIONS" => Route::MethodNotAllowed,
                    _ => Route::Error(400),
                }
            }
        };
        if let Err(e) = normalize_path(raw_path, &mut self.path) {
            return Route::Error(e.status());
        }
        // An absolute-form target's authority wins over Host (RFC 9112 §3.2.2).
        let host = authority.or(request.host);
        let mut host_name = [0u8; 256];
        let route_request = RouteRequest {
            method: request.method,
            path: &self.path,
            query,
            host: host.and_then(|h| lower_host_name(h, &mut host_name)),
        };
        if !self.routes.is_empty() {
            if let Some(rule) = self.routes.classify(&route_request) {
                return Route::Handover(rule.backend, rule.method);
            }
        }
        match request.method {
            "GET" | "HEAD" => {}
            "POST" | "PUT" | "DELETE" | "CONNECT" | "OPTIONS" | "TRACE" | "PATCH" => {
                return self.fallback_or(&route_request, Route::MethodNotAllowed)
            }
            _ => return self.fallback_or(&route_request, Route::Error(501)),
        }
        let site = self.hosts.select(host.map(str::as_bytes));
        if self.path.ends_with(b"/") && !self.routes.is_empty() {
            // A directory's index file that a route claims (index.php, say) goes to the
            // backend, as the request it stands for: never served as static source.
            let mut candidate = Vec::with_capacity(self.path.len() + 16);
            for name in &site.options().index {
                candidate.clear();
                candidate.extend_from_slice(&self.path);
                candidate.extend_from_slice(name.as_bytes());
                let claimed = self.routes.classify(&RouteRequest {
                    path: &candidate,
                    ..route_request
                });
                let index = site.serve_cached(
                    &mut self.cache,
                    &StaticRequest {
                        head: true,
                        path: &candidate,
                        raw_path,
                        ..StaticRequest::default()
                    },
                );
                if index.status == 200 {
                    if let Some(rule) = claimed {
                        return Route::Handover(rule.backend, rule.method);
                    }
                    break;
                }
            }
        }
        let reply = site.serve_cached(
            &mut self.cache,
            &StaticRequest {
                head: request.method == "HEAD",
                path: &self.path,
                raw_path,
                query,
                if_match: request.header("if-match"),
                if_none_match: request.header("if-none-match"),
                if_modified_since: request.header("if-modified-since"),
                if_unmodified_since: request.header("if-unmodified-since"),
                if_range: request.header("if-range"),
                range: request.header("range"),
                accept_encoding: request.header("accept-encoding"),
            },
        );
        if reply.status == 404 {
            return self.fallback_or(&route_request, Route::Static(reply));
        }
        Route::Static(reply)
    }

    /// The fallback hand-over for a request nothing static answers, else `otherwise`.
    fn fallback_or(&self, request: &RouteRequest<'_>, otherwise: Route) -> Route {
        match self.routes.fallback(request) {
            Some(rule) => Route::Handover(rule.backend, rule.method),
            None => otherwise,
        }
    }

    /// Starts handing a request over to a backend, or answers it (redirect, or an error
    /// when no connection can be had).
    #[allow(clippy::too_many_arguments)]
    fn hand_over(
        &mut self,
        peer: SocketAddr,
        request: &Request<'_>,
        raw_head: &[u8],
        backend: usize,
        method: HandoverMethod,
        (close, relay_close): (bool, bool),
        sink: &mut Sink<'_>,
    ) -> HandOver {
        let version = request.version;
        let head = request.method == "HEAD";
        let config = self.backends[backend].config();
        if method == HandoverMethod::Redirect {
            let location =
                redirect_location(config.public_url.as_deref().unwrap_or(""), request.target);
            let sent =
                self.error_reply_with(sink.output, sink.pool, 307, version, head, close, |out| {
                    write_header("Location", location.as_bytes(), out)
                });
            return HandOver::Answered(307, sent);
        }
        let bridge = method == HandoverMethod::Bridge;
        // Cached backend responses are kept as relayed to an HTTP/1.1 client that keeps the
        // connection: only such a GET, without credentials, can be answered from them, or
        // fill the cache; a HEAD is answered with the head of a cached GET (RFC 9111 §4).
        let cache_usable = !bridge
            && config.cache
            && version == Version::Http11
            && !close
            && request.header("authorization").is_none();
        let cacheable_request = cache_usable && request.method == "GET";
        let cache_lookup = cacheable_request || (cache_usable && head);
        let host = request.host.unwrap_or("").as_bytes();
        let accept_encoding = request.header("accept-encoding");
        if cache_lookup {
            for with_encoding in [None, accept_encoding] {
                cache_key(
                    &mut self.cache_key,
                    host,
                    request.target.as_bytes(),
                    with_encoding,
                );
                if let Some(hit) = self.response_cache.get(&self.cache_key, sink.now) {
                    // Only the Age field is written per hit; the head and body are shared.
                    // A conditional request its validators satisfy gets 304 (RFC 9111
                    // §4.3.2).
                    let not_modified = hit.validators.as_ref().filter(|v| {
                        v.not_modified(
                            request.header("if-none-match"),
                            request.header("if-modified-since"),
                        )
                    });
                    let (status, start, body) = match not_modified {
                        Some(v) => (304, Arc::clone(&v.not_modified), None),
                        None if head => (hit.status, hit.head, None),
                        None => (hit.status, hit.head, Some(hit.body)),
                    };
                    sink.output.push_shared(start);
                    sink.output.write_with(sink.pool, |out| {
                        write_header_u64("Age", hit.age, out);
                        out.extend_from_slice(b"\r\n");
                    });
                    let body_len = body.as_ref().map_or(0, |b| b.len() as u64);
                    if let Some(body) = body {
                        sink.output.push_shared(body);
                    }
                    return HandOver::Answered(status, body_len);
                }
                if accept_encoding.is_none() {
                    break;
                }
            }
        }
        let max_response = self.response_cache.max_response();
        let cache = cacheable_request.then(|| CacheSlot {
            host: host.to_vec(),
            target: request.target.as_bytes().to_vec(),
            accept_encoding: accept_encoding.map(<[u8]>::to_vec),
            max: max_response,
            capture: None,
            since: sink.now,
            expires: None,
            vary: false,
        });
        let mut staged = Vec::with_capacity(raw_head.len() + 256);
        if bridge {
            staged.extend_from_slice(raw_head);
        } else {
            fastpath_http::write_forwarded_request(
                request,
                &fastpath_http::ForwardOptions {
                    client: peer.ip(),
                    proto: "http",
                    forwarded: config.forwarded,
                    host: None,
                },
                &mut staged,
            );
        }
        let version_text: &[u8] = match version {
            Version::Http10 => b"HTTP/1.0",
            Version::Http11 => b"HTTP/1.1",
        };
        let mut log_line = Vec::with_capacity(request.target.len() + 20);
        log_line.extend_from_slice(request.method.as_bytes());
        log_line.push(b' ');
        log_line.extend_from_slice(request.target.as_bytes());
        log_line.push(b' ');
        log_line.extend_from_slice(version_text);
        let parser = self
            .response_parsers
            .pop()
            .unwrap_or_else(|| Box::new(fastpath_http::ResponseParser::new(self.settings.limits)));
        let start = Start {
            backend,
            bridge,
            staged,
            idempotent: matches!(
                request.method,
                "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE"
            ),
            framing: request.framing,
            client_version: version,
            head_request: head,
            client_close: relay_close,
            log_line,
            referer: request.header("referer"),
            user_agent: request.header("user-agent"),
            cache,
        };
        match Exchange::start(
            start,
            &mut self.backends,
            sink.upstream,
            sink.deadline,
            sink.now,
            parser,
        ) {
            Ok(exchange) => HandOver::Started(Box::new(exchange)),
            Err((status, parser)) => {
                self.response_parsers.push(parser);
                let sent = self.error_reply(sink.output, sink.pool, status, version, head, close);
                HandOver::Answered(status, sent)
            }
        }
    }

    /// Acts on how a step of an exchange went: `None` to go on with the next request.
    fn finish_exchange(
        &mut self,
        conn: &mut HttpConn,
        io: &mut Io<'_>,
        progress: Progress,
    ) -> Option<Next> {
        let Phase::Proxy(exchange) = &mut conn.phase else {
            return None;
        };
        let finished = matches!(progress, Progress::Finished { .. });
        let mut ended = None;
        let (status, bytes, next) = match progress {
            Progress::Wait(next) => return Some(next),
            Progress::Joined => {
                // Logged as it is handed over, status and size unknown ("-"): what follows is
                // the backend's to log. The exchange stays in place so that closing the
                // connection releases its count of backend connections.
                let entry_line: [&[u8]; 1] = [&exchange.log_line];
                let (referer, user_agent) = (exchange.referer.clone(), exchange.user_agent.clone());
                self.log(
                    conn.peer,
                    &entry_line,
                    0,
                    0,
                    referer.as_deref(),
                    user_agent.as_deref(),
                    None,
                );
                exchange.logged = true;
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
                (exchange.status, exchange.relayed, close.then_some(how))
            }
            Progress::Failed(status) => {
                let close = exchange.client_close || exchange.body_unsent();
                let sent = self.error_reply(
                    io.output,
                    io.pool,
                    status,
                    exchange.client_version(),
                    exchange.is_head(),
                    close,
                );
                (status, sent, close.then_some(Next::Linger))
            }
            // What arrived goes out, then the close: short of its announced length, the
            // response can never pass for complete.
            Progress::Broken(why) => {
                ended = Some(why);
                (exchange.status, exchange.relayed, Some(Next::Close))
            }
        };
        let exchange = match std::mem::replace(&mut conn.phase, Phase::Head) {
            Phase::Proxy(exchange) => exchange,
            _ => unreachable!("the phase was checked above"),
        };
        let (parser, log_line, referer, user_agent, cache) = exchange.into_parts();
        if let (Some(slot), true) = (cache, finished) {
            if let (Some(capture), Some(expires)) = (slot.capture, slot.expires) {
                let encoding = if slot.vary {
                    slot.accept_encoding.as_deref()
                } else {
                    None
                };
                cache_key(&mut self.cache_key, &slot.host, &slot.target, encoding);
                self.response_cache
                    .insert(&self.cache_key, &capture, slot.since, expires);
            }
        }
        if self.response_parsers.len() < MAX_POOLED_PARSERS {
            self.response_parsers.push(parser);
        }
        let entry_line: [&[u8]; 1] = [&log_line];
        self.log(
            conn.peer,
            &entry_line,
            status,
            bytes,
            referer.as_deref(),
            user_agent.as_deref(),
            ended,
        );
        next
    }

    /// Writes the status line and the headers every response has.
    fn write_common(&self, out: &mut Vec<u8>, status: u16) {
        write_status_line(status, out);
        out.extend_from_slice(b"Server: fastpath\r\nDate: ");
        out.extend_from_slice(self.clock.http_date());
        out.extend_from_slice(b"\r\n");
    }

    fn write_connection(out: &mut Vec<u8>, version: Version, close: bool) {
        if close {
            out.extend_from_slice(b"Connection: close\r\n");
        } else if version == Version::Http10 {
            out.extend_from_slice(b"Connection: keep-alive\r\n");
        }
    }

    fn static_reply(
        &self,
        output: &mut Output,
        pool: &mut BufferPool,
        reply: &Reply,
        version: Version,
        head: bool,
        close: bool,
    ) -> (u16, u64) {
        let status = reply.status;
        if matches!(reply.body, Body::None) && (status >= 400 || status == 301) {
            let sent = self.error_reply_with(output, pool, status, version, head, close, |out| {
                write_reply_fields(reply, out)
            });
            return (status, sent);
        }
        output.write_with(pool, |out| {
            self.write_common(out, status);
            match &reply.fields {
                Some(fields) => out.extend_from_slice(fields),
                None => {
                    write_reply_fields(reply, out);
                    if status != 304 {
                        write_content_length(reply.content_length, out);
                    }
                }
            }
            Self::write_connection(out, version, close);
            out.extend_from_slice(b"\r\n");
        });
        if head || status == 304 {
            return (status, 0);
        }
        match &reply.body {
            Body::None => {}
            Body::File { file, offset, len } => output.push_file(file.clone(), *offset, *len),
            // A whole in-memory file goes out shared with the cache; a slice is copied.
            Body::Memory { data, offset, len } if *offset == 0 && *len == data.len() => {
                output.push_shared(data.clone())
            }
            Body::Memory { data, offset, len } => {
                let slice = &data[*offset..*offset + *len];
                output.write_with(pool, |out| out.extend_from_slice(slice));
            }
            Body::Parts { source, parts } => {
                for part in parts {
                    match (part, source) {
                        (Part::Bytes(bytes), _) => {
                            output.write_with(pool, |out| out.extend_from_slice(bytes))
                        }
                        (Part::File { offset, len }, Source::File(file)) => {
                            output.push_file(file.clone(), *offset, *len)
                        }
                        (Part::File { offset, len }, Source::Memory(data)) => {
                            let slice = &data[*offset as usize..(*offset + *len) as usize];
                            output.write_with(pool, |out| out.extend_from_slice(slice));
                        }
                    }
                }
            }
        }
        (status, reply.content_length)
    }

    fn error_reply(
        &self,
        output: &mut Output,
        pool: &mut BufferPool,
        status: u16,
        version: Version,
        head: bool,
        close: bool,
    ) -> u64 {
        self.error_reply_with(output, pool, status, version, head, close, |_| {})
    }

    /// A short HTML page for an error or redirect status, with extra headers from `extra`.
    #[allow(clippy::too_many_arguments)]
    fn error_reply_with(
        &self,
        output: &mut Output,
        pool: &mut BufferPool,
        status: u16,
        version: Version,
        head: bool,
        close: bool,
        extra: impl FnOnce(&mut Vec<u8>),
    ) -> u64 {
        let reason = fastpath_http::reason_phrase(status);
        output.write_with(pool, |out| {
            self.write_common(out, status);
            extra(out);
            let page_len = PAGE_OVERHEAD + 2 * (4 + reason.len());
            out.extend_from_slice(b"Content-Type: text/html; charset=utf-8\r\n");
            write_content_length(page_len as u64, out);
            Self::write_connection(out, version, close);
            out.extend_from_slice(b"\r\n");
            if !head {
                let before = out.len();
                let _ = write!(
                    out,
                    "<!DOCTYPE html>\n<html><head><title>{status} {reason}</title></head><body><h1>{status} {reason}</h1></body></html>\n"
                );
                debug_assert_eq!(out.len() - before, page_len);
            }
        });
        if head {
            0
        } else {
            (PAGE_OVERHEAD + 2 * (4 + reason.len())) as u64
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn log(
        &mut self,
        peer: SocketAddr,
        request_line: &[&[u8]],
        status: u16,
        body_bytes: u64,
        referer: Option<&[u8]>,
        user_agent: Option<&[u8]>,
        ended: Option<&str>,
    ) {
        if let Some(log) = self.access_log.as_mut() {
            log.record(&Entry {
                peer,
                time: self.clock.log_time(),
                request_line,
                status,
                body_bytes,
                referer,
                user_agent,
                ended,
            });
        }
    }

    /// Logs an exchange the connection's end cut off: the status as sent (`-` if none was),
    /// the body bytes relayed and why it ended; in the error log too when the failure was on
    /// this side.
    fn log_cut_exchange(&mut self, peer: SocketAddr, exchange: Box<Exchange>, reason: CloseReason) {
        let ended = match reason {
            // The handler never ends an exchange this way: the client's end of stream did.
            CloseReason::Done | CloseReason::PeerGone => CLIENT_GONE,
            CloseReason::SendTimeout => "send-timeout",
            CloseReason::Shutdown => "shutdown",
            CloseReason::Error | CloseReason::FileShrunk => "error",
        };
        let (status, relayed) = (exchange.status, exchange.relayed);
        let (parser, log_line, referer, user_agent, _) = exchange.into_parts();
        if self.response_parsers.len() < MAX_POOLED_PARSERS {
            self.response_parsers.push(parser);
        }
        let request = String::from_utf8_lossy(&log_line);
        if matches!(reason, CloseReason::Error | CloseReason::FileShrunk) {
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
        self.log(
            peer,
            &[&log_line],
            status,
            relayed,
            referer.as_deref(),
            user_agent.as_deref(),
            Some(ended),
        );
    }
}

/// Bytes of the error page without its two "NNN Reason" strings.
const PAGE_OVERHEAD: usize =
    "<!DOCTYPE html>\n<html><head><title></title></head><body><h1></h1></body></html>\n".len();

enum Route {
    Static(Reply),
    MethodNotAllowed,
    Error(u16),
    /// To a backend (its index), by a hand-over method.
    Handover(usize, HandoverMethod),
}

/// What a hand-over did at once.
enum HandOver {
    /// An exchange with the backend is under way.
    Started(Box<Exchange>),
    /// The request was answered (status, body bytes): a redirect or an error.
    Answered(u16, u64),
}

/// The parts of a connection's [`Io`] that answering a request writes to, taken apart so
/// that the request (which borrows the input) can be read meanwhile.
struct Sink<'s> {
    output: &'s mut Output,
    pool: &'s mut BufferPool,
    upstream: &'s mut UpstreamPort,
    deadline: &'s mut Option<Instant>,
    now: Instant,
}

/// The host name a route condition is compared with: lower case, without the port.
fn lower_host_name<'b>(host: &str, buf: &'b mut [u8; 256]) -> Option<&'b str> {
    let name = match host.strip_prefix('[') {
        Some(_) => host.split_inclusive(']').next().unwrap_or(host),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || name.len() > buf.len() {
        return None;
    }
    let out = &mut buf[..name.len()];
    for (dst, src) in out.iter_mut().zip(name.bytes()) {
        *dst = src.to_ascii_lowercase();
    }
    std::str::from_utf8(out).ok()
}

fn write_content_length(len: u64, out: &mut Vec<u8>) {
    let _ = write!(out, "Content-Length: {len}\r\n");
}

/// The headers a static reply carries besides the common ones and Content-Length.
fn write_reply_fields(reply: &Reply, out: &mut Vec<u8>) {
    if let Some(location) = &reply.location {
        write_header("Location", location.as_bytes(), out);
    }
    if reply.status < 300 || reply.status == 304 {
        if let Some(content_type) = &reply.content_type {
            if reply.status != 304 {
                write_header("Content-Type", content_type.as_bytes(), out);
            }
        }
        if let Some(encoding) = reply.content_encoding {
            write_header("Content-Encoding", encoding.as_bytes(), out);
        }
    }
    if let Some(modified) = reply.last_modified {
        out.extend_from_slice(b"Last-Modified: ");
        fastpath_http::write_http_date(modified, out);
        out.extend_from_slice(b"\r\n");
    }
    if let Some(etag) = &reply.etag {
        write_header("ETag", etag.as_bytes(), out);
    }
    if reply.accept_ranges {
        out.extend_from_slice(b"Accept-Ranges: bytes\r\n");
    }
    if let Some(range) = &reply.content_range {
        write_header("Content-Range", range.as_bytes(), out);
    }
    if reply.vary_accept_encoding {
        out.extend_from_slice(b"Vary: Accept-Encoding\r\n");
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

    fn on_open(&mut self, peer: SocketAddr, _now: Instant) -> HttpConn {
        HttpConn {
            peer,
            phase: Phase::Head,
            parser: None,
            requests: 0,
            head_started: None,
        }
    }

    fn on_ready(&mut self, conn: &mut HttpConn, io: &mut Io<'_>) -> Next {
        self.process(conn, io)
    }

    fn on_timeout(&mut self, conn: &mut HttpConn, io: &mut Io<'_>) -> Next {
        if let Phase::Proxy(exchange) = &mut conn.phase {
            let progress = exchange.timed_out(&mut self.backends, io);
            return match self.finish_exchange(conn, io, progress) {
                Some(next) => next,
                None => self.process(conn, io),
            };
        }
        if matches!(conn.phase, Phase::Head) && conn.head_started.is_some() {
            // A request began but did not finish in time: say so, then close.
            let sent = self.error_reply(io.output, io.pool, 408, Version::Http11, false, true);
            let line = first_line(io.input.data());
            self.log(conn.peer, &[line], 408, sent, None, None, None);
            let unread = io.input.len();
            io.input.consume(unread);
            // The client may still be trickling the rest in.
            return Next::Linger;
        }
        Next::Close
    }

    fn on_close(&mut self, mut conn: HttpConn, reason: CloseReason) {
        if let Phase::Proxy(mut exchange) = std::mem::replace(&mut conn.phase, Phase::Head) {
            // The connection ended mid-exchange: the driver closes the backend connection.
            exchange.forget(&mut self.backends);
            // A joined bridge was logged as it was handed over; any other request cut off
            // here has had no line yet, and must not end unseen.
            if !exchange.logged {
                self.log_cut_exchange(conn.peer, exchange, reason);
            }
        }
        if let Some(parser) = conn.parser {
            self.give_parser(parser);
        }
    }

    fn on_tick(&mut self, _now: Instant) {
        self.clock.refresh();
        self.hosts.poll_changes();
        if let Some(log) = self.access_log.as_mut() {
            log.flush();
        }
    }

    fn on_stop(&mut self) {
        if let Some(log) = self.access_log.as_mut() {
            log.flush();
        }
    }

    fn refusal(&self) -> &[u8] {
        REFUSAL
    }
}
