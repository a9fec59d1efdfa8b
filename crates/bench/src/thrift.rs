//! `fastpath bench thrift`: a load generator for the Thrift forwarder (Slick's section 3.3),
//! and `fastpath bench thrift-sink`, its sinks alone.
//!
//! The generator starts the sinks itself (listening on the `--sinks` addresses, destination
//! 0 first), then N client connections stream prerecorded oneway `msg` calls (see
//! [`crate::fwdmsg`]) to the forwarder as fast as TCP takes them. Each sink checks every
//! message byte for byte and its order per client. At the end the clients stop, finish the
//! message they were in the middle of, and the run waits (bounded by `drain`) until every
//! message sent has arrived somewhere; then it counts what was lost, duplicated, reordered,
//! corrupt or misrouted: all zero in a good run.
//!
//! The senders do no per-message system call and no allocation: each connection fills a
//! 64 KiB buffer with copies of ring messages, stamps them, and sends it in one call.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fastpath_sys::{Epoll, Event};
use fastpath_thrift::{Decoded, Decoder, Limits, Transport};
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::fwdmsg::{ring_len, Checker, Layout, Verdict, MAX_CLIENTS, STAMP};
use crate::stats::{histogram, Percentiles};
use crate::streams::{supervise, Tick};
use crate::sys::{self, CONN_EVENTS};

/// Bytes each client connection fills before one send: enough messages per system call
/// that the generator's cost per message is a copy, not a syscall.
const OUT_BYTES: usize = 64 * 1024;

/// Read buffer of a sink connection (grown for a larger message).
const SINK_BUFFER: usize = 256 * 1024;

/// Reads a sink connection makes in a row before the others get their turn.
const READS_PER_TURN: usize = 4;

/// Sends a client connection makes in a row before the others get their turn.
const SENDS_PER_TURN: usize = 8;

/// Longest sleep, so the end and the stop flag are noticed promptly.
const TICK: Duration = Duration::from_millis(50);

/// Events taken from epoll per wait.
const EVENTS: usize = 256;

/// Token bit of a listening socket in a sink thread's epoll set.
const LISTENER: u64 = 1 << 63;

/// The largest payload: Thrift's default frame limit, less the message around it.
pub const MAX_PAYLOAD: usize = 16_000_000;

/// What `fastpath bench thrift` runs.
#[derive(Debug, Clone)]
pub struct ThriftConfig {
    /// The forwarder under test.
    pub forwarder: SocketAddr,
    /// The destinations, in key order: the forwarder's `--to` list.
    pub sinks: Vec<SocketAddr>,
    /// Payload bytes per message (at least the 20-byte stamp).
    pub payload: usize,
    /// Client connections.
    pub connections: usize,
    /// How long the clients send.
    pub duration: Duration,
    /// Client threads; 0 = one per CPU the process may run on.
    pub threads: usize,
    /// Sink threads; 0 = as many as client threads (at most one per sink).
    pub sink_threads: usize,
    /// Framed (default) or unframed.
    pub transport: Transport,
    /// Longest wait, after the clients stop, for every message to arrive.
    pub drain: Duration,
    /// Ends the sending early when set.
    pub stop: Option<&'static AtomicBool>,
}

impl ThriftConfig {
    /// 16 framed connections for 10 s, one thread per CPU, 5 s to drain.
    pub fn new(forwarder: SocketAddr, sinks: Vec<SocketAddr>, payload: usize) -> ThriftConfig {
        ThriftConfig {
            forwarder,
            sinks,
            payload,
            connections: 16,
            duration: Duration::from_secs(10),
            threads: 0,
            sink_threads: 0,
            transport: Transport::Framed,
            drain: Duration::from_secs(5),
            stop: None,
        }
    }
}

/// What one sink received.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SinkCounts {
    /// Where it listened.
    pub addr: String,
    /// Messages the clients sent to it (0 for a sink alone, which cannot know).
    pub expected: u64,
    /// Right messages, in order.
    pub delivered: u64,
    /// Repeats of the message before.
    pub duplicated: u64,
    /// Messages older than one received before from the same client.
    pub reordered: u64,
    /// Messages with wrong bytes (or a stream that could not be read further).
    pub corrupt: u64,
    /// Right messages for another destination.
    pub misrouted: u64,
    /// Connections the forwarder opened to it.
    pub connections: u64,
}

impl SinkCounts {
    /// Messages that arrived, whatever their state: what the drain waits for.
    fn arrived(&self) -> u64 {
        self.delivered + self.reordered + self.corrupt + self.misrouted
    }

    fn bad(&self) -> u64 {
        self.duplicated + self.reordered + self.corrupt + self.misrouted
    }
}

/// Everything a forwarder run measured: its `--json` object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThriftReport {
    /// Always `thrift`.
    pub mode: &'static str,
    /// The forwarder.
    pub forwarder: String,
    /// `framed` or `unframed`.
    pub transport: &'static str,
    /// Payload bytes per message.
    pub payload: usize,
    /// Bytes per message on the wire.
    pub wire_bytes: usize,
    /// Client connections.
    pub connections: usize,
    /// Client threads.
    pub threads: usize,
    /// Sink threads.
    pub sink_threads: usize,
    /// Length of the sending window, seconds.
    pub duration_s: f64,
    /// Messages the clients sent whole.
    pub sent: u64,
    /// Sent per second.
    pub sent_per_s: f64,
    /// Right messages received, in order.
    pub delivered: u64,
    /// Sent and never received (after the drain).
    pub lost: u64,
    /// See [`SinkCounts`].
    pub duplicated: u64,
    /// See [`SinkCounts`].
    pub reordered: u64,
    /// See [`SinkCounts`].
    pub corrupt: u64,
    /// See [`SinkCounts`].
    pub misrouted: u64,
    /// Everything that went wrong, one number (0 in a good run): lost, duplicated,
    /// reordered, corrupt and misrouted messages, and failed client connections.
    pub errors: u64,
    /// Messages delivered inside the sending window, per second.
    pub delivered_per_s: f64,
    /// Their payload bytes per second.
    pub payload_bytes_per_s: f64,
    /// Send time (stamped in the message) to its check at the sink, µs.
    pub latency_us: Percentiles,
    /// How long the wait for the last messages took, seconds.
    pub drain_s: f64,
    /// Client connections established.
    pub conns_established: u64,
    /// Client connections that failed (refused, reset, closed by the forwarder).
    pub conns_failed: u64,
    /// Per destination, in key order.
    pub sinks: Vec<SinkCounts>,
    /// CPU time of the client threads, seconds.
    pub cpu_s: f64,
    /// Client CPU per message sent, µs.
    pub cpu_us_per_message: f64,
    /// CPU time of the sink threads (which check every byte), seconds.
    pub sink_cpu_s: f64,
    /// Every message arrived once, in order, intact, where it should.
    pub clean: bool,
}

/// Runs the forwarder load; `tick` is called about once a second with the messages arrived
/// at the sinks, sent, and arrived bad.
pub fn run_thrift(config: &ThriftConfig, tick: Option<Tick<'_>>) -> io::Result<ThriftReport> {
    let n = config.sinks.len();
    if n == 0 {
        return Err(io::Error::other("--sinks needs at least one address"));
    }
    if n > MAX_CLIENTS as usize {
        return Err(io::Error::other("too many sinks"));
    }
    if config.payload < STAMP || config.payload > MAX_PAYLOAD {
        return Err(io::Error::other(format!(
            "--payload must be {STAMP}..={MAX_PAYLOAD} bytes (the first {STAMP} carry the client, sequence number and send time), not {}",
            config.payload
        )));
    }
    if config.connections == 0 || config.connections > MAX_CLIENTS as usize {
        return Err(io::Error::other(format!("-c must be 1..={MAX_CLIENTS}")));
    }
    if config.duration.is_zero() {
        return Err(io::Error::other("the duration must be positive"));
    }
    // The sinks listen before anything connects to the forwarder.
    let sinks = Sinks::bind(&config.sinks, config.transport)?;
    let threads = match config.threads {
        0 => sys::available_cpus(),
        t => t,
    }
    .min(config.connections);
    let sink_threads = match config.sink_threads {
        0 => threads,
        t => t,
    }
    .min(n);
    let layout = Layout::new(config.transport);
    let ring = layout.ring(n, config.payload);
    let wire = layout.wire_len(config.payload);
    let start_ns = sys::monotonic_ns();
    let end_ns = start_ns + config.duration.as_nanos() as u64;
    let sink_stop = AtomicBool::new(false);
    let sent_live: Vec<AtomicU64> = (0..threads).map(|_| AtomicU64::new(0)).collect();

    let (clients, sink_results, drain_s) = std::thread::scope(|scope| {
        let sink_handles = sinks.spawn(scope, sink_threads, end_ns, &sink_stop);
        let sample = || {
            let sent = sent_live.iter().map(|a| a.load(Ordering::Relaxed)).sum();
            let (arrived, bad) = sinks.live();
            [arrived, sent, bad]
        };
        let clients = supervise(
            threads,
            |t| {
                let conns: Vec<u32> = (t..config.connections)
                    .step_by(threads)
                    .map(|c| c as u32)
                    .collect();
                Client::new(config, &layout, &ring, wire, end_ns, &sent_live[t])?.run(&conns)
            },
            tick,
            &sample,
        );
        // Every message sent must arrive: wait for it, bounded.
        let drain_start = Instant::now();
        if let Ok(clients) = &clients {
            let sent: u64 = clients.iter().map(|c| c.sent.iter().sum::<u64>()).sum();
            while sinks.live().0 < sent && drain_start.elapsed() < config.drain {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let drain_s = drain_start.elapsed().as_secs_f64();
        sink_stop.store(true, Ordering::Relaxed);
        let sink_results: Vec<io::Result<SinkOutcome>> = sink_handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("a sink thread died")))
            })
            .collect();
        (clients, sink_results, drain_s)
    });
    let clients = clients?;
    let mut sink_out = SinkOutcome::new(&config.sinks);
    for r in sink_results {
        sink_out.merge(&r?);
    }
    // Client c sent sequence numbers 0..S_c; number k went to destination k % n.
    let mut sent = 0;
    let (mut established, mut failed, mut cpu) = (0, 0, Duration::ZERO);
    for c in &clients {
        for &s in &c.sent {
            sent += s;
            for (d, sink) in sink_out.counts.iter_mut().enumerate() {
                sink.expected += s / n as u64 + u64::from((d as u64) < s % n as u64);
            }
        }
        established += c.established;
        failed += c.failed;
        cpu += c.cpu;
        for &fd in &c.fds {
            sys::close(fd);
        }
    }
    let sum = |f: fn(&SinkCounts) -> u64| sink_out.counts.iter().map(f).sum::<u64>();
    let arrived = sum(SinkCounts::arrived);
    let duration_s = (Duration::from_nanos(end_ns - start_ns))
        .min(Duration::from_nanos(
            clients.iter().map(|c| c.stopped_ns).max().unwrap_or(end_ns) - start_ns,
        ))
        .as_secs_f64()
        .max(1e-9);
    let mut report = ThriftReport {
        mode: "thrift",
        forwarder: config.forwarder.to_string(),
        transport: match config.transport {
            Transport::Framed => "framed",
            Transport::Unframed => "unframed",
        },
        payload: config.payload,
        wire_bytes: wire,
        connections: config.connections,
        threads,
        sink_threads,
        duration_s,
        sent,
        sent_per_s: sent as f64 / duration_s,
        delivered: sum(|s| s.delivered),
        lost: sent.saturating_sub(arrived),
        duplicated: sum(|s| s.duplicated),
        reordered: sum(|s| s.reordered),
        corrupt: sum(|s| s.corrupt),
        misrouted: sum(|s| s.misrouted),
        errors: 0,
        delivered_per_s: sink_out.in_window as f64 / duration_s,
        payload_bytes_per_s: (sink_out.in_window * config.payload as u64) as f64 / duration_s,
        latency_us: Percentiles::from_histogram(&sink_out.latency),
        drain_s,
        conns_established: established,
        conns_failed: failed,
        sinks: sink_out.counts,
        cpu_s: cpu.as_secs_f64(),
        cpu_us_per_message: if sent > 0 {
            cpu.as_secs_f64() * 1e6 / sent as f64
        } else {
            0.0
        },
        sink_cpu_s: sink_out.cpu.as_secs_f64(),
        clean: false,
    };
    report.errors = report.lost
        + report.duplicated
        + report.reordered
        + report.corrupt
        + report.misrouted
        + report.conns_failed;
    report.clean = report.sent > 0 && report.errors == 0 && report.delivered == report.sent;
    Ok(report)
}

// ---- clients ---------------------------------------------------------------------------

struct ClientConn {
    fd: RawFd,
    id: u32,
    established: bool,
    out: Vec<u8>,
    pos: usize,
    /// Bytes the kernel took.
    sent_bytes: u64,
    /// Next sequence number to stamp.
    seq: u64,
    /// Waiting for EPOLLOUT (the last send said EAGAIN).
    blocked: bool,
    dead: bool,
}

struct ClientOutcome {
    /// Messages sent whole, per connection.
    sent: Vec<u64>,
    established: u64,
    failed: u64,
    cpu: Duration,
    stopped_ns: u64,
    /// Kept open until the sinks are done, so a forwarder never sees a client leave early.
    fds: Vec<RawFd>,
}

struct Client<'a> {
    ep: Epoll,
    layout: &'a Layout,
    ring: &'a [u8],
    wire: usize,
    slots: u64,
    end_ns: u64,
    drain: Duration,
    stop: Option<&'static AtomicBool>,
    forwarder: SocketAddr,
    conns: Vec<ClientConn>,
    live: &'a AtomicU64,
    failed: u64,
}

impl<'a> Client<'a> {
    fn new(
        config: &ThriftConfig,
        layout: &'a Layout,
        ring: &'a [u8],
        wire: usize,
        end_ns: u64,
        live: &'a AtomicU64,
    ) -> io::Result<Client<'a>> {
        Ok(Client {
            ep: Epoll::new()?,
            layout,
            ring,
            wire,
            slots: ring_len(config.sinks.len()) as u64,
            end_ns,
            drain: config.drain,
            stop: config.stop,
            forwarder: config.forwarder,
            conns: Vec::new(),
            live,
            failed: 0,
        })
    }

    fn run(mut self, ids: &[u32]) -> io::Result<ClientOutcome> {
        let addr = sys::sock_addr(self.forwarder);
        let cap = OUT_BYTES.max(2 * self.wire);
        for (idx, &id) in ids.iter().enumerate() {
            let mut c = ClientConn {
                fd: -1,
                id,
                established: false,
                out: Vec::with_capacity(cap),
                pos: 0,
                sent_bytes: 0,
                seq: 0,
                blocked: true,
                dead: false,
            };
            match sys::start_connect(&addr) {
                Ok((fd, connected)) => {
                    c.fd = fd;
                    c.established = connected;
                    c.blocked = !connected;
                    self.ep.add(fd, CONN_EVENTS, idx as u64)?;
                }
                Err(_) => {
                    c.dead = true;
                    self.failed += 1;
                }
            }
            self.conns.push(c);
        }
        let cpu_start = sys::thread_cpu_time();
        let mut events = vec![Event::default(); EVENTS];
        let mut stopping = false;
        let mut stopped_ns = self.end_ns;
        let mut drain_deadline = None;
        loop {
            let now = sys::monotonic_ns();
            if !stopping
                && (now >= self.end_ns || self.stop.is_some_and(|s| s.load(Ordering::Relaxed)))
            {
                stopping = true;
                stopped_ns = now.min(self.end_ns);
                drain_deadline = Some(Instant::now() + self.drain);
                self.cut_to_whole_messages();
            }
            if stopping {
                let flushed = self.conns.iter().all(|c| c.dead || c.pos == c.out.len());
                if flushed || drain_deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
            }
            let any_ready = self
                .conns
                .iter()
                .any(|c| !c.dead && c.established && !c.blocked);
            let wait = if any_ready {
                Duration::ZERO
            } else if stopping {
                TICK
            } else {
                Duration::from_nanos(self.end_ns.saturating_sub(now)).min(TICK)
            };
            let n = self.ep.wait_precise(&mut events, Some(wait))?;
            for ev in &events[..n] {
                self.on_event(ev.token() as usize, ev.events());
            }
            for idx in 0..self.conns.len() {
                let c = &self.conns[idx];
                if !c.dead && c.established && !c.blocked {
                    self.pump(idx, !stopping);
                }
            }
            let sent: u64 = self.conns.iter().map(|c| c.sent_bytes).sum::<u64>() / self.wire as u64;
            self.live.store(sent, Ordering::Relaxed);
        }
        let cpu = sys::thread_cpu_time().saturating_sub(cpu_start);
        let wire = self.wire as u64;
        Ok(ClientOutcome {
            sent: self.conns.iter().map(|c| c.sent_bytes / wire).collect(),
            established: self.conns.iter().filter(|c| c.established).count() as u64,
            failed: self.failed,
            cpu,
            stopped_ns,
            fds: self
                .conns
                .iter()
                .filter(|c| c.fd >= 0)
                .map(|c| c.fd)
                .collect(),
        })
    }

    /// At the end: drops what is buffered beyond the message being sent, so the forwarder
    /// gets whole messages only.
    fn cut_to_whole_messages(&mut self) {
        let wire = self.wire as u64;
        for c in &mut self.conns {
            let partial = (c.sent_bytes % wire) as usize;
            let keep = if partial == 0 { 0 } else { self.wire - partial };
            let end = (c.pos + keep).min(c.out.len());
            c.out.truncate(end);
        }
    }

    fn on_event(&mut self, idx: usize, flags: u32) {
        let c = &mut self.conns[idx];
        if c.dead {
            return;
        }
        if !c.established {
            if flags & (libc::EPOLLOUT | libc::EPOLLERR | libc::EPOLLHUP) as u32 == 0 {
                return;
            }
            if sys::socket_error(c.fd) != 0 {
                self.kill(idx);
                return;
            }
            c.established = true;
        }
        if flags & libc::EPOLLOUT as u32 != 0 {
            c.blocked = false;
        }
        if flags & (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0
        {
            // Oneway calls get no answer: a readable forwarder socket is a close or an error.
            let mut buf = [0u8; 512];
            loop {
                match sys::read(c.fd, &mut buf) {
                    Ok(0) => {
                        self.kill(idx);
                        return;
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        self.kill(idx);
                        return;
                    }
                }
            }
        }
    }

    /// Fills and sends, a few times, until the kernel pushes back.
    fn pump(&mut self, idx: usize, refill: bool) {
        for _ in 0..SENDS_PER_TURN {
            let c = &mut self.conns[idx];
            if c.pos == c.out.len() {
                c.out.clear();
                c.pos = 0;
                if !refill {
                    return;
                }
                self.fill(idx);
            }
            let c = &mut self.conns[idx];
            match sys::send(c.fd, &c.out[c.pos..]) {
                Ok(n) => {
                    c.pos += n;
                    c.sent_bytes += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    c.blocked = true;
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.kill(idx);
                    return;
                }
            }
        }
    }

    /// Copies ring messages into the connection's buffer and stamps them. One clock read
    /// for the batch: it leaves in one send.
    fn fill(&mut self, idx: usize) {
        let now = sys::monotonic_ns();
        let c = &mut self.conns[idx];
        let cap = c.out.capacity();
        while c.out.len() + self.wire <= cap {
            let slot = (c.seq % self.slots) as usize;
            let at = c.out.len();
            c.out
                .extend_from_slice(&self.ring[slot * self.wire..(slot + 1) * self.wire]);
            self.layout
                .stamp(&mut c.out[at..at + self.wire], c.id, c.seq, now);
            c.seq += 1;
        }
    }

    fn kill(&mut self, idx: usize) {
        let c = &mut self.conns[idx];
        if !c.dead {
            c.dead = true;
            self.failed += 1;
            // Not closed yet: the outcome closes every descriptor once the sinks are done.
        }
    }
}

// ---- sinks -----------------------------------------------------------------------------

/// Listening sockets of the sinks, bound before the clients start, and their live counters.
pub(crate) struct Sinks {
    listeners: Vec<TcpListener>,
    addrs: Vec<SocketAddr>,
    transport: Transport,
    /// Per sink: messages arrived (any state), and bad ones.
    arrived: Vec<AtomicU64>,
    bad: Vec<AtomicU64>,
}

struct SinkOutcome {
    counts: Vec<SinkCounts>,
    in_window: u64,
    latency: Histogram<u64>,
    cpu: Duration,
}

impl SinkOutcome {
    fn new(addrs: &[SocketAddr]) -> SinkOutcome {
        SinkOutcome {
            counts: addrs
                .iter()
                .map(|a| SinkCounts {
                    addr: a.to_string(),
                    ..SinkCounts::default()
                })
                .collect(),
            in_window: 0,
            latency: histogram(),
            cpu: Duration::ZERO,
        }
    }

    fn merge(&mut self, o: &SinkOutcome) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            a.delivered += b.delivered;
            a.duplicated += b.duplicated;
            a.reordered += b.reordered;
            a.corrupt += b.corrupt;
            a.misrouted += b.misrouted;
            a.connections += b.connections;
        }
        self.in_window += o.in_window;
        let _ = self.latency.add(&o.latency);
        self.cpu += o.cpu;
    }
}

struct SinkConn {
    stream: TcpStream,
    sink: usize,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    open: bool,
    /// Listed in `ready`: the socket may hold more bytes.
    ready: bool,
}

/// Where a sink connection's turn left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    /// Nothing more to read until the next edge.
    Drained,
    /// Its turn ended with bytes possibly left.
    More,
    /// Closed, or a stream that cannot be read further.
    Ended,
}

impl Sinks {
    /// Listens on every address (destination `i` on `addrs[i]`).
    pub(crate) fn bind(addrs: &[SocketAddr], transport: Transport) -> io::Result<Sinks> {
        let mut listeners = Vec::new();
        for a in addrs {
            let l = TcpListener::bind(a)
                .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {a}: {e}")))?;
            l.set_nonblocking(true)?;
            listeners.push(l);
        }
        Ok(Sinks {
            addrs: addrs.to_vec(),
            listeners,
            transport,
            arrived: addrs.iter().map(|_| AtomicU64::new(0)).collect(),
            bad: addrs.iter().map(|_| AtomicU64::new(0)).collect(),
        })
    }

    /// Messages arrived and bad messages so far, all sinks.
    fn live(&self) -> (u64, u64) {
        let sum = |v: &[AtomicU64]| v.iter().map(|a| a.load(Ordering::Relaxed)).sum();
        (sum(&self.arrived), sum(&self.bad))
    }

    fn spawn<'s, 'e>(
        &'s self,
        scope: &'s std::thread::Scope<'s, 'e>,
        threads: usize,
        window_end_ns: u64,
        stop: &'s AtomicBool,
    ) -> Vec<std::thread::ScopedJoinHandle<'s, io::Result<SinkOutcome>>> {
        (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mine: Vec<usize> = (t..self.listeners.len()).step_by(threads).collect();
                    self.serve(&mine, window_end_ns, stop)
                })
            })
            .collect()
    }

    /// One sink thread: accepts on its listeners and checks everything that arrives until
    /// `stop` is set.
    fn serve(
        &self,
        mine: &[usize],
        window_end_ns: u64,
        stop: &AtomicBool,
    ) -> io::Result<SinkOutcome> {
        let cpu_start = sys::thread_cpu_time();
        let ep = Epoll::new()?;
        let n = self.addrs.len();
        for &s in mine {
            ep.add(
                self.listeners[s].as_raw_fd(),
                libc::EPOLLIN as u32,
                LISTENER | s as u64,
            )?;
        }
        let first = Checker::new(self.transport, n, 0);
        let mut checkers: Vec<Option<Checker>> = (0..n)
            .map(|s| mine.contains(&s).then(|| Checker::sharing(&first, s)))
            .collect();
        let decoder = Decoder::new(self.transport, Limits::default());
        let mut out = SinkOutcome::new(&self.addrs);
        let mut conns: Vec<SinkConn> = Vec::new();
        let mut events = vec![Event::default(); EVENTS];
        let mut ready: Vec<usize> = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let wait = if ready.is_empty() {
                TICK
            } else {
                Duration::ZERO
            };
            let k = ep.wait_precise(&mut events, Some(wait))?;
            for ev in &events[..k] {
                if ev.token() & LISTENER != 0 {
                    let s = (ev.token() & !LISTENER) as usize;
                    while let Ok((stream, _)) = self.listeners[s].accept() {
                        stream.set_nonblocking(true)?;
                        ep.add(stream.as_raw_fd(), CONN_EVENTS, conns.len() as u64)?;
                        out.counts[s].connections += 1;
                        conns.push(SinkConn {
                            stream,
                            sink: s,
                            buf: vec![0; SINK_BUFFER],
                            start: 0,
                            end: 0,
                            open: true,
                            ready: false,
                        });
                    }
                    continue;
                }
                let idx = ev.token() as usize;
                if conns[idx].open && !conns[idx].ready {
                    conns[idx].ready = true;
                    ready.push(idx);
                }
            }
            // Every connection with bytes waiting gets a bounded turn, so one busy client
            // stream cannot starve the others (which would show as their latency).
            let mut i = 0;
            while i < ready.len() {
                let conn = &mut conns[ready[i]];
                let s = conn.sink;
                let checker = checkers[s].as_mut().expect("a checker per own sink");
                let state = read_and_check(conn, &decoder, checker, &mut out, window_end_ns);
                let c = &out.counts[s];
                self.arrived[s].store(c.arrived(), Ordering::Relaxed);
                self.bad[s].store(c.bad(), Ordering::Relaxed);
                match state {
                    Read::More => i += 1,
                    Read::Drained | Read::Ended => {
                        if state == Read::Ended {
                            conn.open = false;
                            // Closed for good when the thread ends (and the stream drops).
                            let _ = conn.stream.shutdown(std::net::Shutdown::Both);
                        }
                        conn.ready = false;
                        ready.swap_remove(i);
                    }
                }
            }
        }
        out.cpu = sys::thread_cpu_time().saturating_sub(cpu_start);
        Ok(out)
    }
}

/// Reads (a few times at most) what a sink connection has and checks every whole message.
fn read_and_check(
    c: &mut SinkConn,
    decoder: &Decoder,
    checker: &mut Checker,
    out: &mut SinkOutcome,
    window_end_ns: u64,
) -> Read {
    let fd = c.stream.as_raw_fd();
    for _ in 0..READS_PER_TURN {
        if c.end == c.buf.len() {
            if c.start > 0 {
                c.buf.copy_within(c.start..c.end, 0);
                c.end -= c.start;
                c.start = 0;
            } else {
                // One message bigger than the buffer: grow it (bounded by the decoder's
                // limits, which refuse larger frames).
                let len = c.buf.len();
                c.buf.resize(len * 2, 0);
            }
        }
        let short = match sys::read(fd, &mut c.buf[c.end..]) {
            Ok(0) => return Read::Ended,
            Ok(n) => {
                c.end += n;
                c.end < c.buf.len()
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Read::Drained,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Read::Ended,
        };
        let now = sys::monotonic_ns();
        let counts = &mut out.counts[c.sink];
        loop {
            match decoder.decode(&c.buf[c.start..c.end]) {
                Ok(Decoded::NeedMore(_)) => break,
                Ok(Decoded::Message(m)) => {
                    let len = m.wire_len();
                    match checker.check(&c.buf[c.start..c.start + len]) {
                        Verdict::Delivered { sent_ns, .. } => {
                            counts.delivered += 1;
                            if now <= window_end_ns {
                                out.in_window += 1;
                            }
                            out.latency
                                .saturating_record(now.saturating_sub(sent_ns).max(1));
                        }
                        Verdict::Duplicated => counts.duplicated += 1,
                        Verdict::Reordered => counts.reordered += 1,
                        Verdict::Corrupt => counts.corrupt += 1,
                        Verdict::Misrouted => counts.misrouted += 1,
                    }
                    c.start += len;
                }
                Err(_) => {
                    // Not Thrift (or beyond the limits): the rest of the stream is lost.
                    counts.corrupt += 1;
                    return Read::Ended;
                }
            }
        }
        if c.start == c.end {
            c.start = 0;
            c.end = 0;
        }
        if short {
            // The socket was emptied. A FIN that came with these bytes goes unseen, which
            // costs nothing: every byte before it was read, and a sink never writes.
            return Read::Drained;
        }
    }
    Read::More
}

/// Runs the sinks alone until `stop` is set (SIGINT/SIGTERM); returns their counts.
pub fn run_sinks(
    addrs: &[SocketAddr],
    transport: Transport,
    threads: usize,
    stop: &AtomicBool,
    ready: impl FnOnce(),
) -> io::Result<SinkReport> {
    if addrs.is_empty() {
        return Err(io::Error::other("--listen needs at least one address"));
    }
    let sinks = Sinks::bind(addrs, transport)?;
    ready();
    let threads = match threads {
        0 => sys::available_cpus(),
        t => t,
    }
    .min(addrs.len());
    let results = std::thread::scope(|scope| {
        sinks
            .spawn(scope, threads, u64::MAX, stop)
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("a sink thread died")))
            })
            .collect::<Vec<_>>()
    });
    let mut out = SinkOutcome::new(addrs);
    for r in results {
        out.merge(&r?);
    }
    let sum = |f: fn(&SinkCounts) -> u64| out.counts.iter().map(f).sum::<u64>();
    Ok(SinkReport {
        mode: "thrift-sink",
        delivered: sum(|s| s.delivered),
        duplicated: sum(|s| s.duplicated),
        reordered: sum(|s| s.reordered),
        corrupt: sum(|s| s.corrupt),
        misrouted: sum(|s| s.misrouted),
        latency_us: Percentiles::from_histogram(&out.latency),
        sinks: out.counts,
    })
}

/// What the standalone sinks counted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SinkReport {
    /// Always `thrift-sink`.
    pub mode: &'static str,
    /// See [`SinkCounts`].
    pub delivered: u64,
    /// See [`SinkCounts`].
    pub duplicated: u64,
    /// See [`SinkCounts`].
    pub reordered: u64,
    /// See [`SinkCounts`].
    pub corrupt: u64,
    /// See [`SinkCounts`].
    pub misrouted: u64,
    /// Send time to check, µs (the senders stamp CLOCK_MONOTONIC, one clock per machine).
    pub latency_us: Percentiles,
    /// Per destination.
    pub sinks: Vec<SinkCounts>,
}

fn sink_table(s: &mut String, sinks: &[SinkCounts], with_expected: bool) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "{:<22}{:>12}{:>12}{:>11}{:>10}{:>9}{:>10}{:>7}",
        "sink", "expected", "delivered", "duplicated", "reordered", "corrupt", "misrouted", "conns"
    );
    for c in sinks {
        let expected = if with_expected {
            c.expected.to_string()
        } else {
            "-".into()
        };
        let _ = writeln!(
            s,
            "{:<22}{:>12}{:>12}{:>11}{:>10}{:>9}{:>10}{:>7}",
            c.addr,
            expected,
            c.delivered,
            c.duplicated,
            c.reordered,
            c.corrupt,
            c.misrouted,
            c.connections
        );
    }
}

fn latency_row(s: &mut String, name: &str, p: &Percentiles) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "{:<14}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "time (µs)", "p50", "p90", "p99", "p99.9", "max", "mean", "count"
    );
    let _ = writeln!(
        s,
        "{:<14}{:>10.1}{:>10.1}{:>10.1}{:>10.1}{:>10.1}{:>10.1}{:>10}",
        name, p.p50, p.p90, p.p99, p.p999, p.max, p.mean, p.count
    );
}

/// Human-readable summary of a forwarder run.
pub fn render_thrift(r: &ThriftReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "thrift forwarder {}  ({} B payloads, {} B on the wire, {}, {} connections, {} client thread{}, {} sink thread{})",
        r.forwarder,
        r.payload,
        r.wire_bytes,
        r.transport,
        r.connections,
        r.threads,
        if r.threads == 1 { "" } else { "s" },
        r.sink_threads,
        if r.sink_threads == 1 { "" } else { "s" }
    );
    let _ = writeln!(
        s,
        "window        {:.2} s (then {:.2} s for the last messages to arrive)",
        r.duration_s, r.drain_s
    );
    let _ = writeln!(s, "sent          {:<12} {:.1}/s", r.sent, r.sent_per_s);
    let _ = writeln!(
        s,
        "delivered     {:<12} {:.1}/s in the window, payload {}/s",
        r.delivered,
        r.delivered_per_s,
        crate::report::bytes(r.payload_bytes_per_s)
    );
    let _ = writeln!(
        s,
        "lost {}  duplicated {}  reordered {}  corrupt {}  misrouted {}",
        r.lost, r.duplicated, r.reordered, r.corrupt, r.misrouted
    );
    let _ = writeln!(
        s,
        "connections   {} established, {} failed",
        r.conns_established, r.conns_failed
    );
    let _ = writeln!(
        s,
        "client cpu    {:.2} s  ({:.3} µs per message); sinks {:.2} s",
        r.cpu_s, r.cpu_us_per_message, r.sink_cpu_s
    );
    let _ = writeln!(s);
    latency_row(&mut s, "one way", &r.latency_us);
    let _ = writeln!(s);
    sink_table(&mut s, &r.sinks, true);
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "result        {}",
        if r.clean {
            "every message arrived once, in order, intact"
        } else {
            "FAILED: see lost, duplicated, reordered, corrupt, misrouted and failed connections"
        }
    );
    s
}

/// Human-readable summary of the standalone sinks.
pub fn render_sinks(r: &SinkReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "thrift sinks: delivered {}  duplicated {}  reordered {}  corrupt {}  misrouted {}",
        r.delivered, r.duplicated, r.reordered, r.corrupt, r.misrouted
    );
    let _ = writeln!(s);
    latency_row(&mut s, "one way", &r.latency_us);
    let _ = writeln!(s);
    sink_table(&mut s, &r.sinks, false);
    s
}
