//! The per-thread event loop: one epoll instance, a slab of connections, and the schedule
//! of the chosen load (closed loop, request rate or connection rate).
//!
//! Every request that is issued ends as exactly one of: a reply, an error of one class, or
//! in flight when the window closed. A new connection is always opened *for* a request (its
//! first), so a connection that fails costs that request and nothing is retried behind the
//! user's back; a refused port with `-n 10` gives ten `refused`.
//!
//! Times are nanoseconds since a base instant shared by all threads, so the open-loop
//! schedules of the threads interleave into one even schedule.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fastpath_sys::{Epoll, Event};
use rustls::{ClientConnection, HandshakeKind};
use socket2::SockAddr;

use crate::response::{ParseError, Reply, ResponseParser};
use crate::stats::{ErrorClass, Stats};
use crate::sys;
use crate::target::{render_request, Expect, Picker, Target};
use crate::tls::{failure_reason, Negotiated, TlsClient};

/// Events taken from epoll per wait.
const EVENTS: usize = 512;

/// Read buffer per thread. Large, so a big reply drains in few reads; bodies are parsed
/// where they land and never copied out of it.
const READ_BUFFER: usize = 256 * 1024;

/// Plaintext taken from rustls at a time (HTTPS): what it decrypts from the records it
/// was given, at most 16 KiB before it wants them taken.
const PLAIN_BUFFER: usize = 64 * 1024;

/// Longest sleep when a stop flag may be set, so Ctrl-C is answered promptly.
const STOP_POLL: Duration = Duration::from_millis(100);

/// Open loop: most scheduled events one pass of the scheduler makes before it returns to
/// the event loop, so a client that fell behind still answers its sockets and enforces its
/// timeouts while it catches up, instead of opening its whole backlog in one burst.
const BATCH: u32 = 64;

/// "No connection" in the timeout list links.
const NONE: u32 = u32::MAX;

/// How a thread applies load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Shape {
    /// Each connection issues its next request when a reply completes.
    Closed,
    /// Requests are due on a fixed schedule and go to any connection with room.
    Rate,
    /// Connections are opened on a fixed schedule, each making `calls` requests.
    ConnRate,
}

/// The part of a run one thread carries out.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub shape: Shape,
    /// When load starts (all threads at once); also the first open-loop event.
    pub start: u64,
    /// Most connections open at once (closed loop and request rate).
    pub connections: usize,
    pub pipeline: usize,
    pub keepalive: bool,
    /// Requests per connection; `u64::MAX` for unlimited.
    pub calls: u64,
    pub timeout_ns: u64,
    pub verify: bool,
    /// Measured requests to issue (connections to open in `ConnRate`); `None` = until `end`.
    pub budget: Option<u64>,
    /// Start of the measured window (end of warm-up).
    pub measure_start: u64,
    /// End of the run, if it runs for a duration.
    pub end: Option<u64>,
    /// Open loop: time between this thread's scheduled events, and its phase.
    pub interval_ns: f64,
    pub offset_ns: f64,
    pub seed: u64,
    /// Ends the run early when set.
    pub stop: Option<&'static AtomicBool>,
}

/// Counters a worker publishes for the progress line.
#[derive(Debug, Default)]
pub(crate) struct Live {
    pub requests: AtomicU64,
    pub replies: AtomicU64,
    pub errors: AtomicU64,
}

/// What a worker hands back.
pub(crate) struct Outcome {
    pub stats: Stats,
    /// When the worker stopped.
    pub finished: u64,
    /// CPU time the thread used inside the measured window.
    pub cpu: Duration,
    /// Most connections it had open at once.
    pub max_open: usize,
}

/// A request on a connection, from issue to reply.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    /// When the latency clock starts: the intended send time in open-loop modes.
    issued: u64,
    /// When its bytes were queued for sending (0: not yet, the connection is connecting).
    sent: u64,
    /// First byte of its reply (0: none yet).
    first_byte: u64,
    req: u32,
    measured: bool,
}

/// All state of one connection, in one place.
struct Conn {
    /// -1 when the slot is free.
    fd: RawFd,
    /// Bumped when the slot is freed, so stale epoll events are recognised.
    gen: u32,
    /// TCP connected.
    connected: bool,
    /// Ready for requests: connected, and over TLS the handshake finished.
    established: bool,
    /// HTTPS: the TLS state; requests go through it, and replies come out of it.
    tls: Option<Box<ClientConnection>>,
    /// When TCP connected (the handshake's start).
    connected_at: u64,
    /// The server said it closes after the last reply: issue nothing more here.
    closing: bool,
    calls_left: u64,
    connect_start: u64,
    /// Opened inside the measured window.
    measured: bool,
    inflight: VecDeque<InFlight>,
    out: Vec<u8>,
    out_pos: usize,
    parser: ResponseParser,
    /// Timeout list: the connection must see a reply (or connect) by `deadline`.
    deadline: u64,
    prev: u32,
    next: u32,
    timed: bool,
    /// Listed in `avail` (request rate: has room for another request).
    in_avail: bool,
}

impl Conn {
    fn new(pipeline: usize) -> Conn {
        Conn {
            fd: -1,
            gen: 0,
            connected: false,
            established: false,
            tls: None,
            connected_at: 0,
            closing: false,
            calls_left: 0,
            connect_start: 0,
            measured: false,
            inflight: VecDeque::with_capacity(pipeline),
            out: Vec::with_capacity(512),
            out_pos: 0,
            parser: ResponseParser::new(),
            deadline: 0,
            prev: NONE,
            next: NONE,
            timed: false,
            in_avail: false,
        }
    }
}

pub(crate) struct Worker<'a> {
    plan: Plan,
    tls: Option<&'a TlsClient>,
    /// HTTPS: plaintext taken out of rustls, parsed where it lies like `rbuf`.
    pbuf: Vec<u8>,
    base: Instant,
    ep: Epoll,
    addr: SockAddr,
    rendered: Vec<Vec<u8>>,
    expects: Vec<Expect>,
    picker: Picker,
    conns: Vec<Conn>,
    free: Vec<u32>,
    live: usize,
    max_open: usize,
    timer_head: u32,
    timer_tail: u32,
    avail: Vec<u32>,
    rbuf: Vec<u8>,
    stats: Stats,
    /// Next scheduled event (open loop).
    next_k: u64,
    measured_issued: u64,
    measured_opens: u64,
    /// Open loop: measured events skipped because they fell due too long ago (see
    /// `skip_stale`); they count against the budget like the ones made.
    measured_skipped: u64,
    /// Requests in flight on all connections.
    outstanding: u64,
    measuring: bool,
    cpu_at_start: Duration,
    progress: &'a Live,
}

impl<'a> Worker<'a> {
    pub(crate) fn new(
        plan: Plan,
        base: Instant,
        target: &Target,
        tls: Option<&'a TlsClient>,
        progress: &'a Live,
    ) -> io::Result<Worker<'a>> {
        let rendered = target
            .requests
            .iter()
            .map(|r| render_request(&r.path, &target.host, plan.keepalive))
            .collect();
        let expects = target.requests.iter().map(|r| r.expect).collect();
        let picker = Picker::new(target, plan.seed);
        Ok(Worker {
            ep: Epoll::new()?,
            addr: sys::sock_addr(target.addr),
            rendered,
            expects,
            picker,
            conns: Vec::new(),
            free: Vec::new(),
            live: 0,
            max_open: 0,
            timer_head: NONE,
            timer_tail: NONE,
            avail: Vec::new(),
            rbuf: vec![0; READ_BUFFER],
            pbuf: if tls.is_some() {
                vec![0; PLAIN_BUFFER]
            } else {
                Vec::new()
            },
            tls,
            stats: Stats::new(),
            next_k: 0,
            measured_issued: 0,
            measured_opens: 0,
            measured_skipped: 0,
            outstanding: 0,
            measuring: false,
            cpu_at_start: Duration::ZERO,
            progress,
            base,
            plan,
        })
    }

    #[inline]
    fn now(&self) -> u64 {
        // Never 0, which marks "not yet" in `InFlight`.
        (self.base.elapsed().as_nanos() as u64).max(1)
    }

    /// Runs until the duration ends or the budget is spent and every reply is in.
    pub(crate) fn run(mut self) -> io::Result<Outcome> {
        if self.plan.shape != Shape::Closed {
            sys::tight_timer_slack();
        }
        let start = self.base + Duration::from_nanos(self.plan.start);
        if let Some(wait) = start.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let mut events = vec![Event::default(); EVENTS];
        let finished = loop {
            let now = self.now();
            if !self.measuring && now >= self.plan.measure_start {
                self.measuring = true;
                self.cpu_at_start = sys::thread_cpu_time();
            }
            if let Some(end) = self.plan.end {
                if now >= end {
                    // One last bounded pass for what fell due before the end while this
                    // thread was late (it is in flight at the end); whatever is still due
                    // after it counts as missed.
                    if self.plan.shape != Shape::Closed {
                        self.schedule(now);
                    }
                    break end;
                }
            }
            if self.done() || self.plan.stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                break now;
            }
            self.expire(now);
            let busy = self.schedule(now);
            if self.done() {
                break now;
            }
            let mut timeout = if busy {
                Some(Duration::ZERO)
            } else {
                self.next_wake(now)
            };
            if self.plan.stop.is_some() {
                timeout = Some(timeout.map_or(STOP_POLL, |t| t.min(STOP_POLL)));
            }
            let n = self.ep.wait_precise(&mut events, timeout)?;
            for ev in &events[..n] {
                let (token, flags) = (ev.token(), ev.events());
                self.on_event(token, flags);
            }
            self.publish();
        };
        let cpu = if self.measuring {
            sys::thread_cpu_time().saturating_sub(self.cpu_at_start)
        } else {
            Duration::ZERO
        };
        self.finish(finished);
        self.publish();
        Ok(Outcome {
            stats: std::mem::take(&mut self.stats),
            finished,
            cpu,
            max_open: self.max_open,
        })
    }

    fn publish(&self) {
        let p = self.progress;
        p.requests.store(self.stats.requests, Ordering::Relaxed);
        p.replies.store(self.stats.replies, Ordering::Relaxed);
        p.errors.store(self.stats.error_total(), Ordering::Relaxed);
    }

    /// The budget is spent and nothing is left to wait for.
    fn done(&self) -> bool {
        let Some(budget) = self.plan.budget else {
            return false;
        };
        match self.plan.shape {
            Shape::ConnRate => {
                self.measured_opens + self.measured_skipped >= budget && self.live == 0
            }
            _ => self.measured_issued + self.measured_skipped >= budget && self.outstanding == 0,
        }
    }

    fn before_end(&self, at: u64) -> bool {
        self.plan.end.is_none_or(|end| at < end)
    }

    /// Whether a request issued at `at` may be issued (duration and budget allow it).
    fn may_issue(&self, at: u64) -> bool {
        if !self.before_end(at) {
            return false;
        }
        if self.plan.shape == Shape::ConnRate || at < self.plan.measure_start {
            return true;
        }
        self.plan
            .budget
            .is_none_or(|b| self.measured_issued + self.measured_skipped < b)
    }

    /// Connection rate: whether a connection scheduled at `at` may be opened.
    fn may_open(&self, at: u64) -> bool {
        self.before_end(at)
            && (at < self.plan.measure_start
                || self
                    .plan
                    .budget
                    .is_none_or(|b| self.measured_opens + self.measured_skipped < b))
    }

    /// Scheduled time of open-loop event `k`.
    #[inline]
    fn intended(&self, k: u64) -> u64 {
        (self.plan.offset_ns + k as f64 * self.plan.interval_ns) as u64
    }

    /// Open loop: events that fell due more than a timeout ago are not made late, where
    /// their requests could only time out anyway; they are skipped and count as missed
    /// (`finish` counts every due event that was not made). Skipped measured events count
    /// against the budget, so a budget still bounds the scheduled events.
    fn skip_stale(&mut self, now: u64) {
        let horizon = now.saturating_sub(self.plan.timeout_ns);
        if self.intended(self.next_k) >= horizon {
            return;
        }
        let mut k = self.first_k_at(horizon);
        if let Some(end) = self.plan.end {
            // Events at or after the end are never due; leave them alone.
            k = k.min(self.first_k_at(end));
        }
        let first_measured = self.next_k.max(self.first_k_at(self.plan.measure_start));
        if k > first_measured {
            let mut skipped = k - first_measured;
            if let Some(budget) = self.plan.budget {
                let used = match self.plan.shape {
                    Shape::ConnRate => self.measured_opens,
                    _ => self.measured_issued,
                } + self.measured_skipped;
                let left = budget.saturating_sub(used);
                if skipped > left {
                    skipped = left;
                    k = first_measured + left;
                }
            }
            self.measured_skipped += skipped;
        }
        self.next_k = self.next_k.max(k);
    }

    /// Issues what is due; returns whether there is more to do at once (closed loop: a
    /// connection to replace that failed immediately; open loop: due events left over
    /// when a pass made its `BATCH`).
    fn schedule(&mut self, now: u64) -> bool {
        match self.plan.shape {
            Shape::Closed => {
                // Bounded, so a port that refuses at once cannot keep us here.
                for _ in 0..self.plan.connections {
                    if self.live >= self.plan.connections || !self.may_issue(now) {
                        break;
                    }
                    self.open(now, now, self.plan.calls);
                }
                self.live < self.plan.connections && self.may_issue(now)
            }
            Shape::Rate => {
                self.skip_stale(now);
                for _ in 0..BATCH {
                    let at = self.intended(self.next_k);
                    if at > now || !self.may_issue(at) {
                        return false;
                    }
                    if let Some(idx) = self.pop_avail() {
                        self.next_k += 1;
                        self.record_lag(at, now);
                        self.issue_and_send(idx, at, now);
                    } else if self.live < self.plan.connections {
                        self.next_k += 1;
                        self.record_lag(at, now);
                        self.open(now, at, self.plan.calls);
                    } else {
                        // Every connection is busy: the request waits and its latency grows.
                        return false;
                    }
                }
                self.due(now)
            }
            Shape::ConnRate => {
                self.skip_stale(now);
                for _ in 0..BATCH {
                    let at = self.intended(self.next_k);
                    if at > now || !self.may_open(at) {
                        return false;
                    }
                    self.next_k += 1;
                    self.record_lag(at, now);
                    self.open(now, at, self.plan.calls);
                }
                self.due(now)
            }
        }
    }

    /// Open loop: whether the next scheduled event is due and may still be made.
    fn due(&self, now: u64) -> bool {
        let at = self.intended(self.next_k);
        at <= now
            && match self.plan.shape {
                Shape::ConnRate => self.may_open(at),
                _ => self.may_issue(at),
            }
    }

    /// Open loop: how late an event went out after its scheduled time.
    #[inline]
    fn record_lag(&mut self, at: u64, now: u64) {
        if at >= self.plan.measure_start {
            self.stats
                .send_lag
                .saturating_record(now.saturating_sub(at).max(1));
        }
    }

    fn next_wake(&self, now: u64) -> Option<Duration> {
        let mut wake = u64::MAX;
        if self.timer_head != NONE {
            wake = wake.min(self.conns[self.timer_head as usize].deadline);
        }
        if self.plan.shape != Shape::Closed {
            let at = self.intended(self.next_k);
            // A request already due waits for a connection, which an event will free.
            if at > now && self.before_end(at) {
                wake = wake.min(at);
            }
        }
        if let Some(end) = self.plan.end {
            wake = wake.min(end);
        }
        if !self.measuring {
            wake = wake.min(self.plan.measure_start);
        }
        (wake != u64::MAX).then(|| Duration::from_nanos(wake.saturating_sub(now)))
    }

    /// Opens a connection for a request issued at `at`.
    fn open(&mut self, now: u64, at: u64, calls: u64) {
        let measured_conn = at >= self.plan.measure_start;
        if measured_conn {
            self.stats.conns_opened += 1;
            self.measured_opens += 1;
        }
        let (fd, connected) = match sys::start_connect(&self.addr) {
            Ok(v) => v,
            Err(e) => {
                // No connection to carry it: the request fails where it stands.
                if at >= self.plan.measure_start {
                    self.stats.requests += 1;
                    self.measured_issued += 1;
                    self.stats.error(ErrorClass::from_io(&e));
                }
                return;
            }
        };
        let idx = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                self.conns.push(Conn::new(self.plan.pipeline));
                self.conns.len() - 1
            }
        };
        let c = &mut self.conns[idx];
        c.fd = fd;
        c.connected = false;
        c.established = false;
        c.closing = false;
        c.calls_left = calls;
        c.connect_start = now;
        c.measured = measured_conn;
        let token = u64::from(c.gen) << 32 | idx as u64;
        self.live += 1;
        self.max_open = self.max_open.max(self.live);
        self.issue(idx, at, now);
        if let Some(client) = self.tls {
            match ClientConnection::new(client.config.clone(), client.name.clone()) {
                Ok(mut tls) => {
                    // Requests are small and bounded by the pipeline depth.
                    tls.set_buffer_limit(None);
                    self.conns[idx].tls = Some(Box::new(tls));
                }
                Err(e) => {
                    self.tls_failed(idx, &e);
                    return;
                }
            }
        }
        if let Err(e) = self.ep.add(fd, sys::CONN_EVENTS, token) {
            let class = ErrorClass::from_io(&e);
            self.fail(idx, class, class);
            return;
        }
        self.arm(idx, now);
        if connected {
            self.on_connected(idx, now);
        }
    }

    /// TCP is up: plain HTTP may send; TLS starts its handshake.
    fn on_connected(&mut self, idx: usize, now: u64) {
        let c = &mut self.conns[idx];
        c.connected = true;
        c.connected_at = now;
        if c.tls.is_none() {
            self.on_established(idx, now);
        } else {
            // The ClientHello is queued already.
            self.flush(idx);
        }
    }

    /// The TLS handshake finished: counted, then the connection takes requests.
    fn on_handshaken(&mut self, idx: usize, now: u64) {
        let c = &self.conns[idx];
        let tls = c.tls.as_deref().expect("a TLS connection");
        if c.measured {
            let t = &mut self.stats.tls;
            match tls.handshake_kind() {
                Some(HandshakeKind::Resumed) => t.resumed += 1,
                _ => t.full += 1,
            }
            t.handshake
                .saturating_record(now.saturating_sub(c.connected_at).max(1));
            if t.negotiated.is_none() {
                t.negotiated = Some(Negotiated::of(tls));
            }
        }
        self.on_established(idx, now);
    }

    /// TLS failed on the connection: counted by reason, the peer told with rustls's alert
    /// (best effort), and its requests failed as `tls`.
    fn tls_failed(&mut self, idx: usize, error: &rustls::Error) {
        let c = &mut self.conns[idx];
        if let Some(tls) = c.tls.as_deref_mut() {
            let _ = tls.write_tls(&mut Socket(c.fd));
        }
        if c.measured {
            let t = &mut self.stats.tls;
            t.failures[failure_reason(error)] += 1;
            if t.first_failure.is_none() {
                t.first_failure = Some(error.to_string());
            }
        }
        // A failed connection says no close_notify.
        c.tls = None;
        self.fail(idx, ErrorClass::Tls, ErrorClass::Tls);
    }

    /// Puts a request on a connection; its bytes are queued now if it is established.
    fn issue(&mut self, idx: usize, at: u64, now: u64) {
        let req = self.picker.pick();
        let measured = at >= self.plan.measure_start;
        if measured {
            self.stats.requests += 1;
            self.measured_issued += 1;
        }
        self.outstanding += 1;
        let c = &mut self.conns[idx];
        c.calls_left -= 1;
        let sent = if c.established {
            c.out.extend_from_slice(&self.rendered[req]);
            now
        } else {
            0
        };
        c.inflight.push_back(InFlight {
            issued: at,
            sent,
            first_byte: 0,
            req: req as u32,
            measured,
        });
    }

    /// Request rate: issues on an established connection that had room, and sends.
    fn issue_and_send(&mut self, idx: usize, at: u64, now: u64) {
        let was_idle = self.conns[idx].inflight.is_empty();
        self.issue(idx, at, now);
        if was_idle {
            self.arm(idx, now);
        }
        if self.flush(idx) {
            self.offer(idx);
        }
    }

    fn can_take(&self, idx: usize) -> bool {
        let c = &self.conns[idx];
        c.fd >= 0
            && c.established
            && !c.closing
            && c.calls_left > 0
            && c.inflight.len() < self.plan.pipeline
    }

    /// Request rate: lists a connection that has room for another request.
    fn offer(&mut self, idx: usize) {
        if self.plan.shape == Shape::Rate && !self.conns[idx].in_avail && self.can_take(idx) {
            self.conns[idx].in_avail = true;
            self.avail.push(idx as u32);
        }
    }

    fn pop_avail(&mut self) -> Option<usize> {
        while let Some(i) = self.avail.pop() {
            let i = i as usize;
            if !self.conns[i].in_avail {
                continue; // stale: the slot was closed (and maybe reused) since
            }
            self.conns[i].in_avail = false;
            if self.can_take(i) {
                return Some(i);
            }
        }
        None
    }

    /// Issues as many requests as the load shape allows on this connection.
    fn refill(&mut self, idx: usize, now: u64) {
        match self.plan.shape {
            Shape::Closed | Shape::ConnRate => {
                while self.can_take(idx) && self.may_issue(now) {
                    self.issue(idx, now, now);
                }
            }
            Shape::Rate => {
                // Requests already due (a backlog) go out at once, on this connection
                // (bounded by the pipeline depth), except those too late to make.
                self.skip_stale(now);
                while self.can_take(idx) {
                    let at = self.intended(self.next_k);
                    if at > now || !self.may_issue(at) {
                        break;
                    }
                    self.next_k += 1;
                    self.record_lag(at, now);
                    self.issue(idx, at, now);
                }
                self.offer(idx);
            }
        }
    }

    fn on_established(&mut self, idx: usize, now: u64) {
        let c = &mut self.conns[idx];
        c.established = true;
        if c.measured {
            self.stats.conns_established += 1;
            self.stats
                .connect
                .saturating_record((now - c.connect_start).max(1));
        }
        for rec in c.inflight.iter_mut() {
            c.out.extend_from_slice(&self.rendered[rec.req as usize]);
            rec.sent = now;
        }
        self.refill(idx, now);
        self.arm(idx, now);
        if self.flush(idx) {
            self.offer(idx);
        }
    }

    /// Whether the connection has bytes to send (requests, or TLS records).
    fn has_output(&self, idx: usize) -> bool {
        let c = &self.conns[idx];
        c.out_pos < c.out.len() || c.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    /// Sends queued bytes; false if the connection failed (and is gone).
    fn flush(&mut self, idx: usize) -> bool {
        let c = &mut self.conns[idx];
        let sent = match c.tls.as_deref_mut() {
            Some(tls) => {
                if c.out_pos < c.out.len() {
                    // Without a buffer limit rustls takes it all: the requests become records.
                    let _ = tls.writer().write_all(&c.out[c.out_pos..]);
                    c.out.clear();
                    c.out_pos = 0;
                }
                let fd = c.fd;
                send_all(|| {
                    tls.wants_write()
                        .then(|| tls.write_tls(&mut Socket(fd)).map(drop))
                })
            }
            None => {
                let sent = send_all(|| {
                    (c.out_pos < c.out.len())
                        .then(|| sys::send(c.fd, &c.out[c.out_pos..]).map(|n| c.out_pos += n))
                });
                if matches!(sent, Ok(true)) {
                    c.out.clear();
                    c.out_pos = 0;
                }
                sent
            }
        };
        match sent {
            Ok(_) => true,
            Err(e) => {
                let class = ErrorClass::from_io(&e);
                self.fail(idx, class, class);
                false
            }
        }
    }

    fn alive(&self, idx: usize, gen: u32) -> bool {
        let c = &self.conns[idx];
        c.fd >= 0 && c.gen == gen
    }

    fn on_event(&mut self, token: u64, flags: u32) {
        let idx = (token & 0xffff_ffff) as usize;
        let gen = (token >> 32) as u32;
        if idx >= self.conns.len() || !self.alive(idx, gen) {
            return;
        }
        let readable = (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32;
        if !self.conns[idx].connected {
            if flags & (libc::EPOLLOUT | libc::EPOLLERR | libc::EPOLLHUP) as u32 == 0 {
                return;
            }
            let err = sys::socket_error(self.conns[idx].fd);
            if err != 0 {
                self.fail(idx, ErrorClass::from_errno(err), ErrorClass::Reset);
                return;
            }
            let now = self.now();
            self.on_connected(idx, now);
            if !self.alive(idx, gen) {
                return;
            }
        } else if flags & libc::EPOLLOUT as u32 != 0 && self.has_output(idx) && !self.flush(idx) {
            return;
        }
        if flags & readable != 0 {
            let hangup = (libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32;
            self.on_readable(idx, flags & hangup != 0);
        }
    }

    /// Reads until the socket is drained. `hangup`: the peer's FIN (or an error) came with
    /// this edge, so read on to the end instead of trusting a short read.
    fn on_readable(&mut self, idx: usize, hangup: bool) {
        let mut rbuf = std::mem::take(&mut self.rbuf);
        loop {
            match sys::read(self.conns[idx].fd, &mut rbuf) {
                Ok(0) => {
                    self.on_eof(idx);
                    break;
                }
                Ok(n) => {
                    let now = self.now();
                    let open = if self.conns[idx].tls.is_some() {
                        self.on_records(idx, &rbuf[..n], now)
                    } else {
                        self.on_data(idx, &rbuf[..n], now)
                    };
                    if !open {
                        break;
                    }
                    // A short read emptied the socket; the next bytes bring a new edge.
                    if n < rbuf.len() && !hangup {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let class = ErrorClass::from_io(&e);
                    self.fail(idx, class, class);
                    break;
                }
            }
        }
        self.rbuf = rbuf;
    }

    /// HTTPS: gives received records to rustls, finishes the handshake, and parses the
    /// plaintext; false if the connection was closed.
    fn on_records(&mut self, idx: usize, mut wire: &[u8], now: u64) -> bool {
        let mut plain = std::mem::take(&mut self.pbuf);
        let open = 'records: loop {
            let c = &mut self.conns[idx];
            let tls = c.tls.as_deref_mut().expect("a TLS connection");
            if wire.is_empty() {
                break true;
            }
            // rustls takes at most a few KiB at a time, and advances `wire` past them.
            match tls.read_tls(&mut wire) {
                // close_notify came: whatever follows is not read.
                Ok(0) => break true,
                Ok(_) => {}
                Err(e) => {
                    let error = rustls::Error::General(e.to_string());
                    self.tls_failed(idx, &error);
                    break false;
                }
            }
            if let Err(e) = tls.process_new_packets() {
                self.tls_failed(idx, &e);
                break false;
            }
            if !c.established && !tls.is_handshaking() {
                self.on_handshaken(idx, now);
                if self.conns[idx].fd < 0 {
                    break false;
                }
            }
            loop {
                let tls = self.conns[idx].tls.as_deref_mut().expect("open");
                match tls.reader().read(&mut plain) {
                    // The peer's close_notify: the end of the stream, as a FIN would be.
                    Ok(0) => {
                        self.on_eof(idx);
                        break 'records false;
                    }
                    Ok(n) => {
                        if !self.on_data(idx, &plain[..n], now) {
                            break 'records false;
                        }
                    }
                    // Nothing more decrypted; or a FIN without close_notify, which the
                    // socket's end of file reports.
                    Err(_) => break,
                }
            }
            // What processing queued: the handshake's last flight, tickets' answers, alerts.
            if self.has_output(idx) && !self.flush(idx) {
                break false;
            }
        };
        self.pbuf = plain;
        open
    }

    /// Parses received bytes; false if the connection was closed.
    fn on_data(&mut self, idx: usize, mut data: &[u8], now: u64) -> bool {
        while !data.is_empty() {
            let c = &mut self.conns[idx];
            let Some(front) = c.inflight.front_mut() else {
                // Bytes nobody asked for: the last reply was longer than its framing said,
                // and it was already counted. Nothing to charge them to; drop the connection.
                self.close(idx);
                return false;
            };
            if front.first_byte == 0 {
                front.first_byte = now;
            }
            let hash = self.plan.verify && self.expects[front.req as usize].crc32.is_some();
            match c.parser.feed(data, hash) {
                Ok((n, None)) => data = &data[n..],
                Ok((n, Some(reply))) => {
                    data = &data[n..];
                    if !self.on_reply(idx, reply, now, !data.is_empty()) {
                        return false;
                    }
                }
                Err(e) => {
                    let class = match e {
                        ParseError::Short => ErrorClass::ShortBody,
                        _ => ErrorClass::BadResponse,
                    };
                    self.fail(idx, class, ErrorClass::BadResponse);
                    return false;
                }
            }
        }
        true
    }

    /// A complete response for the front request; false if the connection was closed.
    fn on_reply(&mut self, idx: usize, reply: Reply, now: u64, more: bool) -> bool {
        let c = &mut self.conns[idx];
        let rec = *c.inflight.front().expect("a reply needs a request");
        if reply.interim {
            if rec.measured {
                self.stats.status(reply.status);
            }
            return true;
        }
        if more && c.inflight.len() == 1 {
            // More bytes follow a reply no request is waiting behind: its framing was wrong.
            if rec.measured {
                self.stats.status(reply.status);
            }
            self.fail(idx, ErrorClass::BadResponse, ErrorClass::BadResponse);
            return false;
        }
        c.inflight.pop_front();
        if !reply.keep_alive {
            c.closing = true;
        }
        self.outstanding -= 1;
        if rec.measured {
            let s = &mut self.stats;
            s.status(reply.status);
            if self.plan.verify && !matches_expect(&self.expects[rec.req as usize], &reply) {
                s.error(ErrorClass::Verify);
            } else {
                s.replies += 1;
                s.bytes += reply.wire_len;
                s.body_bytes += reply.body_len;
                s.latency
                    .saturating_record(now.saturating_sub(rec.issued).max(1));
                s.first_byte
                    .saturating_record(rec.first_byte.saturating_sub(rec.sent).max(1));
                s.transfer
                    .saturating_record(now.saturating_sub(rec.first_byte).max(1));
            }
        }
        let c = &self.conns[idx];
        if c.inflight.is_empty() && (c.closing || c.calls_left == 0) {
            self.close(idx);
            return false;
        }
        self.refill(idx, now);
        if self.conns[idx].inflight.is_empty() {
            self.disarm(idx);
        } else {
            self.arm(idx, now);
        }
        self.flush(idx)
    }

    fn on_eof(&mut self, idx: usize) {
        match self.conns[idx].parser.eof() {
            Ok(Some(reply)) => {
                let now = self.now();
                if !self.on_reply(idx, reply, now, false) {
                    return;
                }
            }
            Ok(None) => {}
            Err(_) => {
                self.fail(idx, ErrorClass::ShortBody, ErrorClass::Reset);
                return;
            }
        }
        if self.conns[idx].inflight.is_empty() {
            self.close(idx);
        } else {
            // Closed before answering: httperf counts this as a reset too.
            self.fail(idx, ErrorClass::Reset, ErrorClass::Reset);
        }
    }

    /// Charges the connection's requests to error classes (the front one to `first`) and
    /// closes it.
    fn fail(&mut self, idx: usize, first: ErrorClass, rest: ErrorClass) {
        let c = &mut self.conns[idx];
        for (i, rec) in c.inflight.iter().enumerate() {
            if rec.measured {
                self.stats.error(if i == 0 { first } else { rest });
            }
        }
        self.outstanding -= c.inflight.len() as u64;
        c.inflight.clear();
        self.close(idx);
    }

    fn close(&mut self, idx: usize) {
        self.disarm(idx);
        let c = &mut self.conns[idx];
        debug_assert!(c.inflight.is_empty());
        if let Some(mut tls) = c.tls.take() {
            // As a browser or curl does, best effort: the socket is closed either way.
            if !tls.is_handshaking() {
                tls.send_close_notify();
                let _ = tls.write_tls(&mut Socket(c.fd));
            }
        }
        sys::close(c.fd);
        c.fd = -1;
        c.gen = c.gen.wrapping_add(1);
        c.in_avail = false;
        c.out.clear();
        c.out_pos = 0;
        c.parser.reset();
        self.free.push(idx as u32);
        self.live -= 1;
    }

    /// (Re)starts the connection's timeout: a reply (or the connection) must come by
    /// now + timeout. Every deadline is now + the same timeout, so appending keeps the list
    /// sorted and expiry only looks at its head.
    fn arm(&mut self, idx: usize, now: u64) {
        self.disarm(idx);
        let tail = self.timer_tail;
        let c = &mut self.conns[idx];
        c.deadline = now.saturating_add(self.plan.timeout_ns);
        c.timed = true;
        c.prev = tail;
        c.next = NONE;
        if tail == NONE {
            self.timer_head = idx as u32;
        } else {
            self.conns[tail as usize].next = idx as u32;
        }
        self.timer_tail = idx as u32;
    }

    fn disarm(&mut self, idx: usize) {
        let c = &mut self.conns[idx];
        if !c.timed {
            return;
        }
        c.timed = false;
        let (prev, next) = (c.prev, c.next);
        if prev == NONE {
            self.timer_head = next;
        } else {
            self.conns[prev as usize].next = next;
        }
        if next == NONE {
            self.timer_tail = prev;
        } else {
            self.conns[next as usize].prev = prev;
        }
    }

    fn expire(&mut self, now: u64) {
        while self.timer_head != NONE {
            let idx = self.timer_head as usize;
            if self.conns[idx].deadline > now {
                break;
            }
            self.fail(idx, ErrorClass::Timeout, ErrorClass::Timeout);
        }
    }

    /// Closes the window at `at`: counts what is still in flight and what was never issued.
    fn finish(&mut self, at: u64) {
        for idx in 0..self.conns.len() {
            if self.conns[idx].fd < 0 {
                continue;
            }
            let c = &mut self.conns[idx];
            self.stats.in_flight_at_end += c.inflight.iter().filter(|r| r.measured).count() as u64;
            self.outstanding -= c.inflight.len() as u64;
            c.inflight.clear();
            self.close(idx);
        }
        if self.plan.shape != Shape::Closed {
            let mut due = self
                .first_k_at(at)
                .saturating_sub(self.first_k_at(self.plan.measure_start));
            if let Some(budget) = self.plan.budget {
                due = due.min(budget);
            }
            let done = match self.plan.shape {
                Shape::ConnRate => self.measured_opens,
                _ => self.measured_issued,
            };
            self.stats.missed = due.saturating_sub(done);
        }
    }

    /// The first open-loop event scheduled at or after `t`.
    fn first_k_at(&self, t: u64) -> u64 {
        let mut k = ((t as f64 - self.plan.offset_ns) / self.plan.interval_ns)
            .ceil()
            .max(0.0) as u64;
        while self.intended(k) < t {
            k += 1;
        }
        while k > 0 && self.intended(k - 1) >= t {
            k -= 1;
        }
        k
    }
}

impl Drop for Worker<'_> {
    fn drop(&mut self) {
        for c in &self.conns {
            if c.fd >= 0 {
                sys::close(c.fd);
            }
        }
    }
}

/// A connection's socket as rustls writes to it: vectored, so a flight of records goes out
/// in one system call.
struct Socket(RawFd);

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        sys::send(self.0, buf)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        sys::send_vectored(self.0, bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn matches_expect(expect: &Expect, reply: &Reply) -> bool {
    if !(200..300).contains(&reply.status) {
        return true; // an error page is not the file; its status is what gets counted
    }
    expect.len.is_none_or(|n| n == reply.body_len)
        && expect.crc32.is_none_or(|c| reply.crc32 == Some(c))
}

/// Runs `send` (one write, `None` once nothing is left) until all is sent (`Ok(true)`), the
/// socket would block (`Ok(false)`) or it fails; an interrupted write is tried again.
fn send_all(mut send: impl FnMut() -> Option<io::Result<()>>) -> io::Result<bool> {
    while let Some(result) = send() {
        match result {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}
