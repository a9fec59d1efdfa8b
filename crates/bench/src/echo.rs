//! `fastpath bench echo`: a closed-loop load generator for echo servers (Slick's echo
//! benchmark, section 3.2 of the documents behind fastpath).
//!
//! Each connection sends its message size as a 4-byte big-endian header (unless `plain`),
//! then writes one message of `size` bytes, reads `size` bytes back, checks them against
//! what it sent and starts the next: one round trip per message. Every message carries its
//! sequence number in its first bytes, so an echo of a stale message is caught too.
//!
//! Like the HTTP engine: one epoll loop per thread, edge-triggered registration once per
//! socket, one reused read buffer per thread, and each connection's message built once (only
//! its sequence number changes), so nothing is allocated per message. A connection that
//! fails is counted and not reopened, which keeps the counts exact.

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fastpath_sys::{Epoll, Event};
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::stats::{histogram, ErrorClass, Percentiles};
use crate::streams::{supervise, Tick};
use crate::sys::{self, CONN_EVENTS};

/// Largest message: the header is a u32, and a larger message only measures memcpy.
pub const MAX_SIZE: usize = 64 << 20;

/// Read buffer per thread: a whole 16 KiB echo (the largest of the tables) in one read.
const READ_BUFFER: usize = 64 * 1024;

/// Longest sleep, so the stop flag, the end and timeouts are noticed promptly.
const TICK: Duration = Duration::from_millis(100);

/// Events taken from epoll per wait.
const EVENTS: usize = 256;

/// What `fastpath bench echo` runs.
#[derive(Debug, Clone)]
pub struct EchoConfig {
    /// The echo server.
    pub addr: SocketAddr,
    /// Bytes per message.
    pub size: usize,
    /// Connections, each with one message in flight.
    pub connections: usize,
    /// Length of the run.
    pub duration: Duration,
    /// Worker threads; 0 = one per CPU the process may run on.
    pub threads: usize,
    /// No 4-byte size header: plain echo.
    pub plain: bool,
    /// Longest wait for a connection or for a whole echo.
    pub timeout: Duration,
    /// Ends the run early when set.
    pub stop: Option<&'static AtomicBool>,
}

impl EchoConfig {
    /// 16 connections for 10 s, one thread per CPU, 5 s timeout, with the header.
    pub fn new(addr: SocketAddr, size: usize) -> EchoConfig {
        EchoConfig {
            addr,
            size,
            connections: 16,
            duration: Duration::from_secs(10),
            threads: 0,
            plain: false,
            timeout: Duration::from_secs(5),
            stop: None,
        }
    }
}

/// Failures, each counted once: mismatched messages, and connections that ended early.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct EchoErrors {
    /// Sum of the classes below.
    pub total: u64,
    /// Messages whose echo was not the bytes sent (or that came with bytes never sent).
    pub mismatch: u64,
    /// Connections refused.
    pub refused: u64,
    /// Connections reset (or EPIPE).
    pub reset: u64,
    /// Connections the server closed in the middle of the run.
    pub closed: u64,
    /// Connections with no echo (or no connect) within the timeout.
    pub timeout: u64,
    /// Connections that failed any other way.
    pub other: u64,
}

impl EchoErrors {
    fn merge(&mut self, o: &EchoErrors) {
        self.mismatch += o.mismatch;
        self.refused += o.refused;
        self.reset += o.reset;
        self.closed += o.closed;
        self.timeout += o.timeout;
        self.other += o.other;
        self.sum();
    }

    fn sum(&mut self) {
        self.total =
            self.mismatch + self.refused + self.reset + self.closed + self.timeout + self.other;
    }

    fn conn_failure(&mut self, class: ErrorClass) {
        match class {
            ErrorClass::Refused => self.refused += 1,
            ErrorClass::Reset => self.reset += 1,
            ErrorClass::Timeout => self.timeout += 1,
            _ => self.other += 1,
        }
    }
}

/// Everything an echo run measured: its `--json` object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EchoReport {
    /// Always `echo`.
    pub mode: &'static str,
    /// The server.
    pub addr: String,
    /// Bytes per message.
    pub size: usize,
    /// Whether the size header was left out.
    pub plain: bool,
    /// Connections asked for.
    pub connections: usize,
    /// Worker threads.
    pub threads: usize,
    /// Length of the run, seconds.
    pub duration_s: f64,
    /// Round trips completed with the right bytes.
    pub messages: u64,
    /// Messages per second.
    pub messages_per_s: f64,
    /// Payload bytes of those messages, one direction.
    pub bytes: u64,
    /// Payload bytes per second, one direction.
    pub bytes_per_s: f64,
    /// Message written to its whole echo read, µs.
    pub rtt_us: Percentiles,
    /// Connections established.
    pub conns_established: u64,
    /// Connections that ended before the run did (refused, reset, closed, timed out).
    pub conns_failed: u64,
    /// Failures by class.
    pub errors: EchoErrors,
    /// CPU time of the worker threads (user + system), seconds.
    pub cpu_s: f64,
    /// That CPU time per message, µs: what the generator costs per round trip.
    pub cpu_us_per_message: f64,
}

impl EchoReport {
    /// True if echoes came back and nothing failed. A run with no echo at all is not
    /// clean even without errors (a server that never answers within the duration, which
    /// is shorter than the timeout).
    pub fn clean(&self) -> bool {
        self.errors.total == 0 && self.messages > 0
    }
}

struct Conn {
    fd: RawFd,
    established: bool,
    /// The size header, then the message; `out[HEADER..]` is the message.
    out: Vec<u8>,
    /// Next byte of `out` to send.
    sent: usize,
    /// Bytes of the current message's echo received so far.
    recv: usize,
    /// The echo differed somewhere.
    bad: bool,
    seq: u64,
    /// When the current message (or the connect) started.
    started: u64,
}

const HEADER: usize = 4;

struct Outcome {
    messages: u64,
    errors: EchoErrors,
    established: u64,
    failed: u64,
    rtt: Histogram<u64>,
    cpu: Duration,
}

struct Worker<'a> {
    ep: Epoll,
    conns: Vec<Conn>,
    live: usize,
    rbuf: Vec<u8>,
    size: usize,
    plain: bool,
    timeout_ns: u64,
    end: Instant,
    stop: Option<&'static AtomicBool>,
    messages: u64,
    errors: EchoErrors,
    established: u64,
    failed: u64,
    rtt: Histogram<u64>,
    progress: &'a [AtomicU64; 2],
}

/// Runs the echo load; `tick` is called about once a second with (messages, errors, 0).
pub fn run_echo(config: &EchoConfig, tick: Option<Tick<'_>>) -> io::Result<EchoReport> {
    if config.size == 0 || config.size > MAX_SIZE {
        return Err(io::Error::other(format!(
            "--size must be 1..={MAX_SIZE} bytes, not {}",
            config.size
        )));
    }
    if config.connections == 0 {
        return Err(io::Error::other("need at least one connection"));
    }
    if config.duration.is_zero() || config.timeout.is_zero() {
        return Err(io::Error::other(
            "the duration and timeout must be positive",
        ));
    }
    let threads = match config.threads {
        0 => sys::available_cpus(),
        n => n,
    }
    .min(config.connections);
    let start = Instant::now();
    let end = start + config.duration;
    let share =
        |t: usize| config.connections / threads + usize::from(t < config.connections % threads);
    let counters: Vec<[AtomicU64; 2]> = (0..threads).map(|_| Default::default()).collect();
    let outcomes = supervise(
        threads,
        |t| {
            let mut w = Worker::new(config, end, &counters[t])?;
            w.open(config.addr, share(t))?;
            w.run()
        },
        tick,
        &|| {
            counters.iter().fold([0; 3], |a, c| {
                [
                    a[0] + c[0].load(Ordering::Relaxed),
                    a[1] + c[1].load(Ordering::Relaxed),
                    0,
                ]
            })
        },
    )?;
    let duration_s = start.elapsed().min(config.duration).as_secs_f64();
    let mut errors = EchoErrors::default();
    let mut rtt = histogram();
    let (mut messages, mut established, mut failed, mut cpu) = (0, 0, 0, Duration::ZERO);
    for o in &outcomes {
        messages += o.messages;
        errors.merge(&o.errors);
        established += o.established;
        failed += o.failed;
        cpu += o.cpu;
        let _ = rtt.add(&o.rtt);
    }
    let per_s = |n: u64| n as f64 / duration_s.max(1e-9);
    Ok(EchoReport {
        mode: "echo",
        addr: config.addr.to_string(),
        size: config.size,
        plain: config.plain,
        connections: config.connections,
        threads,
        duration_s,
        messages,
        messages_per_s: per_s(messages),
        bytes: messages * config.size as u64,
        bytes_per_s: per_s(messages * config.size as u64),
        rtt_us: Percentiles::from_histogram(&rtt),
        conns_established: established,
        conns_failed: failed,
        errors,
        cpu_s: cpu.as_secs_f64(),
        cpu_us_per_message: if messages > 0 {
            cpu.as_secs_f64() * 1e6 / messages as f64
        } else {
            0.0
        },
    })
}

impl<'a> Worker<'a> {
    fn new(config: &EchoConfig, end: Instant, progress: &'a [AtomicU64; 2]) -> io::Result<Self> {
        Ok(Worker {
            ep: Epoll::new()?,
            conns: Vec::new(),
            live: 0,
            rbuf: vec![0; READ_BUFFER],
            size: config.size,
            plain: config.plain,
            timeout_ns: config.timeout.as_nanos() as u64,
            end,
            stop: config.stop,
            messages: 0,
            errors: EchoErrors::default(),
            established: 0,
            failed: 0,
            rtt: histogram(),
            progress,
        })
    }

    fn open(&mut self, addr: SocketAddr, n: usize) -> io::Result<()> {
        let addr = sys::sock_addr(addr);
        for idx in 0..n {
            let mut out = vec![0u8; HEADER + self.size];
            out[..HEADER].copy_from_slice(&(self.size as u32).to_be_bytes());
            // A pattern that differs per connection and per byte, so a misplaced or
            // crossed byte shows.
            for (i, b) in out[HEADER..].iter_mut().enumerate() {
                *b = (i as u8).wrapping_mul(31).wrapping_add(idx as u8 ^ 0x5a);
            }
            let mut c = Conn {
                fd: -1,
                established: false,
                out,
                sent: if self.plain { HEADER } else { 0 },
                recv: 0,
                bad: false,
                seq: 0,
                started: sys::monotonic_ns(),
            };
            stamp(&mut c);
            match sys::start_connect(&addr) {
                Ok((fd, connected)) => {
                    c.fd = fd;
                    self.ep.add(fd, CONN_EVENTS, idx as u64)?;
                    self.conns.push(c);
                    self.live += 1;
                    if connected {
                        self.on_established(idx);
                    }
                }
                Err(e) => {
                    self.errors.conn_failure(ErrorClass::from_io(&e));
                    self.failed += 1;
                    self.conns.push(c);
                }
            }
        }
        Ok(())
    }

    fn run(mut self) -> io::Result<Outcome> {
        let cpu_start = sys::thread_cpu_time();
        let mut events = vec![Event::default(); EVENTS];
        let mut next_expiry = Instant::now();
        while self.live > 0 {
            let now = Instant::now();
            if now >= self.end || self.stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                break;
            }
            // Timeouts are seconds: a scan of the connections every tick is enough, and
            // one per wake-up would cost as much as the messages with many connections.
            if now >= next_expiry {
                self.expire(sys::monotonic_ns());
                next_expiry = now + TICK;
            }
            let wait = (self.end - now).min(TICK);
            let n = self.ep.wait_precise(&mut events, Some(wait))?;
            for ev in &events[..n] {
                self.on_event(ev.token() as usize, ev.events());
            }
            self.progress[0].store(self.messages, Ordering::Relaxed);
            self.progress[1].store(self.errors.total, Ordering::Relaxed);
        }
        let cpu = sys::thread_cpu_time().saturating_sub(cpu_start);
        for c in &mut self.conns {
            if c.fd >= 0 {
                sys::close(c.fd);
                c.fd = -1;
            }
        }
        self.errors.sum();
        Ok(Outcome {
            messages: self.messages,
            errors: self.errors,
            established: self.established,
            failed: self.failed,
            rtt: std::mem::replace(&mut self.rtt, histogram()),
            cpu,
        })
    }

    fn on_event(&mut self, idx: usize, flags: u32) {
        if self.conns[idx].fd < 0 {
            return;
        }
        if !self.conns[idx].established {
            if flags & (libc::EPOLLOUT | libc::EPOLLERR | libc::EPOLLHUP) as u32 == 0 {
                return;
            }
            let err = sys::socket_error(self.conns[idx].fd);
            if err != 0 {
                self.fail(idx, ErrorClass::from_errno(err));
                return;
            }
            self.on_established(idx);
        } else if flags & libc::EPOLLOUT as u32 != 0 && !self.flush(idx) {
            return;
        }
        if flags & (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0
        {
            let hangup = (libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32;
            self.on_readable(idx, flags & hangup != 0);
        }
    }

    fn on_established(&mut self, idx: usize) {
        let c = &mut self.conns[idx];
        c.established = true;
        c.started = sys::monotonic_ns();
        self.established += 1;
        self.flush(idx);
    }

    /// Sends what is left of the message; false if the connection failed.
    fn flush(&mut self, idx: usize) -> bool {
        let c = &mut self.conns[idx];
        while c.sent < c.out.len() {
            match sys::send(c.fd, &c.out[c.sent..]) {
                Ok(n) => c.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.fail(idx, ErrorClass::from_io(&e));
                    return false;
                }
            }
        }
        true
    }

    /// Reads until the socket is drained. `hangup`: the peer's FIN (or an error) came with
    /// this edge, so read on to the end instead of trusting a short read.
    fn on_readable(&mut self, idx: usize, hangup: bool) {
        let mut rbuf = std::mem::take(&mut self.rbuf);
        loop {
            let fd = self.conns[idx].fd;
            match sys::read(fd, &mut rbuf) {
                Ok(0) => {
                    // The server closed: an echo server never does on its own.
                    self.fail(idx, ErrorClass::ShortBody);
                    break;
                }
                Ok(n) => {
                    // A short read emptied the socket (edge-triggered: new bytes bring a new
                    // edge), so skip the read that would only say EAGAIN.
                    if !self.on_data(idx, &rbuf[..n]) || (n < rbuf.len() && !hangup) {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.fail(idx, ErrorClass::from_io(&e));
                    break;
                }
            }
        }
        self.rbuf = rbuf;
    }

    /// Checks echoed bytes against the message; false if the connection was closed.
    fn on_data(&mut self, idx: usize, mut data: &[u8]) -> bool {
        while !data.is_empty() {
            let size = self.size;
            let c = &mut self.conns[idx];
            // Only bytes already sent can come back; anything beyond is not an echo.
            let sent_payload = c.sent.saturating_sub(HEADER);
            let room = sent_payload - c.recv;
            if room == 0 {
                self.errors.mismatch += 1;
                self.fail(idx, ErrorClass::BadResponse);
                return false;
            }
            let n = room.min(data.len());
            let want = &c.out[HEADER + c.recv..HEADER + c.recv + n];
            if want != &data[..n] {
                c.bad = true;
            }
            c.recv += n;
            data = &data[n..];
            if c.recv == size {
                let now = sys::monotonic_ns();
                if c.bad {
                    self.errors.mismatch += 1;
                } else {
                    self.messages += 1;
                    self.rtt
                        .saturating_record(now.saturating_sub(c.started).max(1));
                }
                c.bad = false;
                c.recv = 0;
                c.seq += 1;
                stamp(c);
                c.sent = HEADER;
                c.started = now;
                if !data.is_empty() {
                    // Bytes past the echo of a message the server could not have seen yet.
                    self.errors.mismatch += 1;
                    self.fail(idx, ErrorClass::BadResponse);
                    return false;
                }
                if !self.flush(idx) {
                    return false;
                }
            }
        }
        true
    }

    fn expire(&mut self, now: u64) {
        for idx in 0..self.conns.len() {
            let c = &self.conns[idx];
            if c.fd >= 0 && now.saturating_sub(c.started) > self.timeout_ns {
                self.fail(idx, ErrorClass::Timeout);
            }
        }
    }

    fn fail(&mut self, idx: usize, class: ErrorClass) {
        let c = &mut self.conns[idx];
        if c.fd < 0 {
            return;
        }
        sys::close(c.fd);
        c.fd = -1;
        self.live -= 1;
        self.failed += 1;
        match class {
            // Mismatches were counted where found; the connection ends with them.
            ErrorClass::BadResponse => {}
            ErrorClass::ShortBody => self.errors.closed += 1,
            other => self.errors.conn_failure(other),
        }
        self.errors.sum();
    }
}

/// Writes the sequence number into the first bytes of the message (as many as fit).
fn stamp(c: &mut Conn) {
    let seq = c.seq.to_be_bytes();
    let n = seq.len().min(c.out.len() - HEADER);
    c.out[HEADER..HEADER + n].copy_from_slice(&seq[..n]);
}

/// Human-readable summary of an echo run.
pub fn render_echo(r: &EchoReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "echo {}  ({} B messages{}, {} connections, {} thread{})",
        r.addr,
        r.size,
        if r.plain { ", plain" } else { "" },
        r.connections,
        r.threads,
        if r.threads == 1 { "" } else { "s" }
    );
    let _ = writeln!(s, "window        {:.2} s", r.duration_s);
    let _ = writeln!(
        s,
        "messages      {:<12} {:.1}/s",
        r.messages, r.messages_per_s
    );
    let _ = writeln!(
        s,
        "payload       {:<12} {}/s (one direction)",
        crate::report::bytes(r.bytes as f64),
        crate::report::bytes(r.bytes_per_s)
    );
    let _ = writeln!(
        s,
        "connections   {} established, {} failed",
        r.conns_established, r.conns_failed
    );
    let _ = writeln!(
        s,
        "client cpu    {:.2} s  ({:.2} µs per message)",
        r.cpu_s, r.cpu_us_per_message
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<14}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "time (µs)", "p50", "p90", "p99", "p99.9", "max", "mean", "count"
    );
    let p = &r.rtt_us;
    let _ = writeln!(
        s,
        "{:<14}{:>10.1}{:>10.1}{:>10.1}{:>10.1}{:>10.1}{:>10.1}{:>10}",
        "round trip", p.p50, p.p90, p.p99, p.p999, p.max, p.mean, p.count
    );
    let _ = writeln!(s);
    let e = &r.errors;
    let _ = writeln!(
        s,
        "errors        total {}  mismatch {}  refused {}  reset {}  closed {}  timeout {}  other {}",
        e.total, e.mismatch, e.refused, e.reset, e.closed, e.timeout, e.other
    );
    s
}
