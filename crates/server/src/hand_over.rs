//! A worker's side of the hand-over: what a request the routes send to a backend gets at
//! once (a redirect, an answer from the backend response cache, or an exchange started on
//! an upstream connection), and what is kept when an exchange ends.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fastpath_content::CacheStats;
use fastpath_drivers::Carrier;
use fastpath_drivers::{BufferPool, Output};
use fastpath_handover::exchange::{redirect, CacheSlot, Exchange, OutputSink, Start};
use fastpath_handover::{BackendState, Found, HandoverMethod, SharedCache};
use fastpath_http::{
    only_chunked, write_age_and_end, BodyForwarding, BodyFraming, Framing, Http1Body, Limits,
    Metadata, Method, Noted, Piece, Request, ResponseParser, Version,
};

use crate::access_log::Peer;
use crate::kernel_bridge::KernelBridge;
use crate::metrics::WorkerMetrics;
use crate::modules::compress::ProxiedCompression;
use crate::reply::{Answer, Writer};

/// The interim answer to `Expect: 100-continue` for a body read before the backend is asked.
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Backend response parsers a worker keeps for reuse.
const MAX_POOLED_PARSERS: usize = 1024;
/// How soon a request waiting for another's fetch of the same page looks again at first,
/// and at most: it looks again after as long as it has waited so far, within these bounds.
const FILL_POLL_FIRST: Duration = Duration::from_millis(1);
const FILL_POLL_MAX: Duration = Duration::from_millis(50);

/// One worker's backends: its view of each, the responses they allowed it to keep, and the
/// parsers its exchanges borrow.
pub(crate) struct Backends {
    /// Health and open connections of each backend, by index.
    pub(crate) states: Vec<BackendState>,
    /// Backend responses that said they may be kept (TUX-style), the process's, and a reused
    /// key buffer.
    cache: Arc<SharedCache>,
    cache_key: Vec<u8>,
    /// The worker whose metrics carry the shared cache's figures (`usize::MAX` until one
    /// has used the cache): one per process, so that sums over workers are the process's.
    reporter: Arc<AtomicUsize>,
    /// Backend response parsers not lent to any exchange.
    #[allow(clippy::vec_box)]
    parsers: Vec<Box<ResponseParser>>,
    limits: Limits,
    /// Lookups in `cache` that answered a request, and that did not.
    cache_hits: u64,
    cache_misses: u64,
    metrics: Option<WorkerMetrics>,
    /// The kernel path of bridged connections, if loaded.
    pub(crate) kernel_bridge: Option<Arc<fastpath_kernel::BridgePath>>,
}

/// A request the routes handed over, as the client sent it.
pub(crate) struct Incoming<'r> {
    pub(crate) peer: Peer,
    /// The client came over TLS (`X-Forwarded-Proto: https`).
    pub(crate) https: bool,
    pub(crate) request: &'r Request<'r>,
    /// The request head as read.
    pub(crate) raw_head: &'r [u8],
    /// The client asked to close after this response. A body relayed to a backend is
    /// neither discarded nor refused, so only the request decides whether a relayed
    /// exchange closes the connection.
    pub(crate) client_close: bool,
    /// The request is a stream of an HTTP/2 connection, whose siblings on the same worker
    /// may hold every backend connection its share allows.
    pub(crate) stream: bool,
}

/// The parts of a connection's I/O that handing a request over writes to, taken apart so
/// that the request (which borrows the input) can be read meanwhile.
pub(crate) struct Sink<'s> {
    pub(crate) output: &'s mut Output,
    pub(crate) pool: &'s mut BufferPool,
    pub(crate) deadline: &'s mut Option<Instant>,
    pub(crate) now: Instant,
    /// Lines every response head on the connection carries (its host's
    /// `Strict-Transport-Security` over TLS).
    pub(crate) also: Option<&'s Arc<[u8]>>,
    /// Rules this request's response head goes through (a module's), whoever makes it.
    pub(crate) edit: Option<Arc<dyn fastpath_http::HeadEdit>>,
    /// How a backend's response to this request may be compressed (a module's policy).
    pub(crate) compress: Option<Arc<fastpath_modules::compress::Policy>>,
}

impl Sink<'_> {
    /// Where answers made at once go; `date` is the `Date` of this second.
    pub(crate) fn writer<'w>(&'w mut self, date: &'w [u8]) -> Writer<'w> {
        Writer {
            output: self.output,
            pool: self.pool,
            date,
            also: self.also.map_or(&[], |also| also),
            edit: self.edit.as_deref(),
        }
    }
}

/// What a hand-over did at once.
pub(crate) enum HandOver {
    /// An exchange with the backend is under way.
    Started(Exchange),
    /// The request was answered (status, body bytes): a redirect, a cached response or an
    /// error.
    Answered(u16, u64),
    /// The request was refused before its body was read (status, body bytes): the
    /// connection closes after the answer.
    Refused(u16, u64),
    /// Another request is fetching the same page for the cache: hand this one over again
    /// at the instant given, unanswered meanwhile.
    Wait(Instant),
}

impl Backends {
    pub(crate) fn new(
        states: Vec<BackendState>,
        (cache, reporter): (Arc<SharedCache>, Arc<AtomicUsize>),
        limits: Limits,
        metrics: Option<WorkerMetrics>,
    ) -> Self {
        Backends {
            states,
            cache,
            cache_key: Vec::with_capacity(256),
            reporter,
            parsers: Vec::new(),
            limits,
            cache_hits: 0,
            cache_misses: 0,
            metrics,
            kernel_bridge: None,
        }
    }

    /// Publishes this worker's hits and misses in the response cache, and the shared
    /// cache's evictions, memory and entries on the series of one worker of the process
    /// (the first to use the cache), so that sums over workers are the process's figures;
    /// and sweeps the cache's expired entries when it is this worker's turn.
    pub(crate) fn tick_cache(&self, now: Instant, metrics: Option<&WorkerMetrics>) {
        self.cache.sweep(now);
        let Some(metrics) = metrics else { return };
        let me = metrics.worker();
        let used = self.cache_hits + self.cache_misses > 0;
        let reporter = match self.reporter.load(Ordering::Relaxed) {
            usize::MAX if used => self
                .reporter
                .compare_exchange(usize::MAX, me, Ordering::Relaxed, Ordering::Relaxed)
                .unwrap_or_else(|current| current),
            current => current,
        };
        let stats = CacheStats {
            hits: self.cache_hits,
            misses: self.cache_misses,
            evictions: 0,
        };
        if reporter == me {
            let (evictions, memory, entries) = self.cache.figures();
            let stats = CacheStats { evictions, ..stats };
            metrics.response_cache(stats, memory, entries);
            return;
        }
        metrics.response_cache(stats, 0, 0);
        if used && reporter != usize::MAX {
            // The reporter may be idle and not ticking (a pool thread): figures it would
            // publish are published for it.
            let (evictions, memory, entries) = self.cache.figures();
            metrics.response_cache_of(reporter, evictions, memory, entries);
        }
    }

    /// Hands `incoming` over to `backend` by `method`: answers it (a redirect, a cached
    /// response, or an error when no connection can be had; `date` is for those), starts
    /// an exchange, or has it wait for another request's fetch of the same page. `waiting`
    /// is when a request that waited first did.
    pub(crate) fn hand_over(
        &mut self,
        (backend, method): (usize, HandoverMethod),
        incoming: &Incoming<'_>,
        answer: Answer,
        sink: &mut Sink<'_>,
        (date, waiting): (&[u8], Option<Instant>),
    ) -> HandOver {
        let request = incoming.request;
        let config = self.states[backend].config();
        if method == HandoverMethod::Redirect {
            let location = redirect::location(config.public_url.as_deref(), request.target);
            let meta = Metadata {
                location: Some(&location),
                ..Metadata::default()
            };
            let sent = sink.writer(date).page(redirect::STATUS, answer, meta);
            return HandOver::Answered(redirect::STATUS, sent);
        }
        let (cache_on, forwarded) = (config.cache, config.forwarded);
        let config_response_timeout = config.response_timeout;
        let bridge = method == HandoverMethod::Bridge;
        // A body larger than the backend takes is refused before a byte of it is read, as
        // nginx's `client_max_body_size` does; a bridge passes everything on unread.
        let max_body = config.max_body_size;
        if let BodyFraming::Length(n) = request.framing {
            if !bridge && max_body > 0 && n > max_body {
                let refused = Answer {
                    close: true,
                    ..answer
                };
                let sent = sink.writer(date).error(413, refused);
                return HandOver::Refused(413, sent);
            }
        }
        let has_body = !matches!(request.framing, BodyFraming::None | BodyFraming::Length(0));
        let buffered = !bridge && config.request_buffering && has_body;
        let body = match request.framing {
            _ if !buffered => BodyForwarding::Streamed,
            BodyFraming::Chunked if only_chunked(request) => BodyForwarding::Open,
            _ => BodyForwarding::Buffered,
        };
        // Whether a response is kept or served from the cache depends on the request and
        // the response (RFC 9111), not on the client's connection or version: a kept head
        // has no Connection field, each client gets its own. A GET without credentials can
        // be answered from the cache or fill it; a HEAD is answered with the head of a
        // cached GET (RFC 9111 §4).
        let cache_usable = !bridge && cache_on && request.noted(Noted::Authorization).is_none();
        let cacheable_request = cache_usable && request.kind == Method::Get;
        let mut fill = None;
        if cacheable_request || (cache_usable && answer.head) {
            // A GET that misses claims the page's fetch, or waits for the one under way.
            let claim = cacheable_request.then(|| waiting.unwrap_or(sink.now));
            match self.answer_from_cache(request, answer, sink, claim) {
                Ok(answered) => {
                    self.cache_hits += 1;
                    return answered;
                }
                Err(Found::Wait) => {
                    // Looked at again soon, then less often: a fetch that is quick is met
                    // quickly, a slow one does not cost many lookups.
                    let waited = sink
                        .now
                        .saturating_duration_since(waiting.unwrap_or(sink.now));
                    let again = waited.clamp(FILL_POLL_FIRST, FILL_POLL_MAX);
                    return HandOver::Wait(sink.now + again);
                }
                Err(Found::Fill(claim)) => fill = Some(claim),
                Err(_) => {}
            }
            self.cache_misses += 1;
        }
        let cache = cacheable_request.then(|| CacheSlot {
            host: request.host.unwrap_or("").as_bytes().to_vec(),
            target: request.target.as_bytes().to_vec(),
            accept_encoding: request.noted(Noted::AcceptEncoding).map(<[u8]>::to_vec),
            max: self.cache.max_response(),
            capture: None,
            since: sink.now,
            expires: None,
            vary: false,
            fill,
        });
        let mut staged = Vec::with_capacity(incoming.raw_head.len() + 256);
        if bridge {
            staged.extend_from_slice(incoming.raw_head);
        } else {
            fastpath_http::write_forwarded_request(
                request,
                &fastpath_http::ForwardOptions {
                    client: incoming.peer.ip(),
                    proto: if incoming.https { "https" } else { "http" },
                    forwarded,
                    host: None,
                    body,
                },
                &mut staged,
            );
        }
        let limits = self.limits;
        let parser = self
            .parsers
            .pop()
            .unwrap_or_else(|| Box::new(ResponseParser::new(limits)));
        let carrier = self
            .kernel_bridge
            .as_ref()
            .filter(|_| bridge)
            .map(|path| Box::new(KernelBridge::new(path.clone())) as Box<dyn Carrier>);
        let start = Start {
            backend,
            staged,
            idempotent: request.kind.is_idempotent(),
            framing: request.framing,
            forwarding: body,
            client_version: answer.version,
            head_request: answer.head,
            client_close: incoming.client_close,
            also: sink.also.cloned(),
            edit: sink.edit.clone(),
            recode: sink.compress.take().map(|policy| {
                let accept_encoding = request.noted(Noted::AcceptEncoding);
                Box::new(ProxiedCompression::new(policy, accept_encoding))
                    as Box<dyn fastpath_http::RecodeOffer>
            }),
            cache,
            carrier,
            wait_for_connection: incoming.stream,
        };
        if let Some(metrics) = &self.metrics {
            metrics.backend_request(backend);
        }
        match Exchange::start(start, bridge, &mut self.states, sink.now, parser) {
            Ok(exchange) => {
                *sink.deadline = Some(exchange.deadline());
                // The body is read here rather than by the backend: a client waiting for
                // 100 Continue gets it from here (RFC 9110 §10.1.1), as nginx sends it.
                if buffered && request.expect_continue && answer.version == Version::Http11 {
                    sink.output
                        .write_with(sink.pool, |b| b.extend_from_slice(CONTINUE));
                }
                HandOver::Started(exchange)
            }
            Err((status, parser)) => {
                self.parsers.push(parser);
                // A stream whose siblings hold the worker's share of the backend's
                // connections waits for one of them to be done, as a client of another
                // worker waits in its turn, rather than fail: the share is the operator's
                // bound on the backend, and an HTTP/2 client sends its requests all at once.
                // Up to the backend's response timeout, then 503 as any request.
                let waited = sink
                    .now
                    .saturating_duration_since(waiting.unwrap_or(sink.now));
                if incoming.stream
                    && self.states[backend].is_at_limit()
                    && waited < config_response_timeout
                {
                    return HandOver::Wait(sink.now + waited.clamp(FILL_POLL_FIRST, FILL_POLL_MAX));
                }
                if let Some(metrics) = &self.metrics {
                    metrics.backend_error(backend);
                }
                let sent = sink.writer(date).error(status, answer);
                HandOver::Answered(status, sent)
            }
        }
    }

    /// Answers a GET or HEAD from a kept response, if one is fresh: under the key without
    /// `Accept-Encoding` first, then (for a response that varies on it) with it. Otherwise
    /// says what the lookup found: with `claim` (see [`SharedCache::find`]), a claim on the
    /// page's fetch or a wait for another's.
    fn answer_from_cache(
        &mut self,
        request: &Request<'_>,
        answer: Answer,
        sink: &mut Sink<'_>,
        claim: Option<Instant>,
    ) -> Result<HandOver, Found> {
        let head = answer.head;
        let page = (
            request.host.unwrap_or("").as_bytes(),
            request.target.as_bytes(),
            request.noted(Noted::AcceptEncoding),
        );
        // A body kept chunked can go as it is to an HTTP/1.1 client only; an HTTP/1.0 one is
        // sent the backend's answer, dechunked.
        let usable =
            |hit: &fastpath_handover::Hit| !hit.chunked || answer.version == Version::Http11;
        // Validators are looked at only for a conditional request.
        let if_none_match = request.noted(Noted::IfNoneMatch);
        let if_modified_since = request.noted(Noted::IfModifiedSince);
        let conditional = if_none_match.is_some() || if_modified_since.is_some();
        let hit = match self.cache.find(
            &mut self.cache_key,
            page,
            sink.now,
            (usable, conditional),
            claim,
        ) {
            Found::Hit(hit) => hit,
            other => return Err(other),
        };
        // Only the Age field is written per hit; the head and body are shared. A conditional
        // request its validators satisfy gets 304 (RFC 9111 §4.3.2).
        let not_modified = hit
            .validators
            .as_ref()
            .filter(|v| v.not_modified(if_none_match, if_modified_since));
        let (status, start, body) = match not_modified {
            Some(v) => (304, Arc::clone(&v.not_modified), None),
            None if head => (hit.status, hit.head, None),
            None => (hit.status, hit.head, Some(hit.body)),
        };
        let also = sink.also.map_or(&[][..], |also| also);
        match &sink.edit {
            // The kept head is shared with the cache; one that rules change is copied.
            Some(edit) => sink.output.write_with(sink.pool, |out| {
                let from = out.len();
                out.extend_from_slice(&start);
                write_age_and_end(hit.age, answer.version, answer.close, also, out);
                edit.edit(out, from);
            }),
            None => {
                sink.output.push_shared(start);
                sink.output.write_with(sink.pool, |out| {
                    write_age_and_end(hit.age, answer.version, answer.close, also, out)
                });
            }
        }
        // Kept as it was relayed (framed by length, or chunked for a 1.1 client): it goes
        // as it is, shared with the cache.
        let framing = if body.is_some() {
            Framing::Framed
        } else {
            Framing::None
        };
        let mut encoder = Http1Body::new(framing);
        let mut out = OutputSink {
            output: sink.output,
            pool: sink.pool,
        };
        if let Some(body) = body {
            encoder.piece(Piece::Shared(body), &mut out);
        }
        encoder.end(&mut out);
        Ok(HandOver::Answered(status, encoder.written()))
    }

    /// Takes back what an ended exchange borrowed, and keeps its response if it was
    /// `complete` and allowed to be kept.
    pub(crate) fn exchange_ended(&mut self, exchange: Exchange, complete: bool) {
        let (parser, cache) = exchange.into_parts();
        if let (Some(mut slot), true) = (cache, complete) {
            let fill = slot.fill.take();
            if let (Some(capture), Some(expires)) = (slot.capture, slot.expires) {
                let encoding = if slot.vary {
                    slot.accept_encoding.as_deref()
                } else {
                    None
                };
                match fill {
                    Some(fill) => {
                        fill.keep(&mut self.cache_key, encoding, capture, slot.since, expires)
                    }
                    None => {
                        let page = (&slot.host[..], &slot.target[..], encoding);
                        self.cache
                            .insert(&mut self.cache_key, page, capture, slot.since, expires);
                    }
                }
            } else if let Some(fill) = fill {
                fill.pass(Instant::now());
            }
        }
        // A claim of an exchange cut short goes with its slot, dropped here.
        if self.parsers.len() < MAX_POOLED_PARSERS {
            self.parsers.push(parser);
        }
    }
}
