//! `fastpath forward`: Slick's Thrift forwarder.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fastpath_kernel::{ForwardPath, Joined, TakeOverError};

use fastpath_sockets::thrift::{Decoded, Decoder, ForwarderMsg, Limits, Transport};
use fastpath_sockets::{
    BufferedSocket, CloseReason, Handler, Io, Next, Opened, Origin, Posted, Relay, ThriftSocket,
    Undelivered, Worker,
};

/// How the forwarder behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardConfig {
    /// The destinations, in key order: a message goes to `key.rem_euclid(len)`.
    pub destinations: Vec<SocketAddr>,
    /// How messages are delimited, from clients and to destinations alike.
    pub transport: Transport,
    /// What a client may send; past it the client is closed.
    pub limits: Limits,
    /// A client silent this long is closed.
    pub idle_timeout: Duration,
    /// Bytes queued for one destination (per worker) before its sources wait.
    pub queue_limit: usize,
    /// After a destination could not be reached, how long its messages are given up (and
    /// counted) before the next attempt.
    pub retry_after: Duration,
}

impl Default for ForwardConfig {
    fn default() -> Self {
        ForwardConfig {
            destinations: Vec::new(),
            transport: Transport::Framed,
            limits: Limits::default(),
            idle_timeout: Duration::from_secs(60),
            queue_limit: 1024 * 1024,
            retry_after: Duration::from_secs(1),
        }
    }
}

/// Totals over every worker of a process.
#[derive(Debug, Default)]
pub struct ForwardStats {
    /// Messages taken from clients and queued for their destination.
    pub forwarded: AtomicU64,
    /// Messages given up: their destination could not be reached, or its connection ended
    /// before they were sent.
    pub undelivered: AtomicU64,
    /// Clients closed for bad input.
    pub refused_clients: AtomicU64,
    /// Clients put in the kernel path (whose canonical messages then go without passing
    /// user space, and are not counted in `forwarded`).
    pub kernel_clients: AtomicU64,
}

/// Bytes of messages one client may forward in one call before the others get a turn: under
/// load, a client woken when a queue has room would otherwise take all of it, again and again,
/// while the clients behind it starve.
const TURN_BYTES: usize = 64 * 1024;

/// Tags of the worker's outgoing connections: a destination's is its route; an injector's
/// is this plus the route of the destination it feeds.
const INJECTOR_TAG: u64 = 1 << 32;

/// How soon an injector held back (its destination has more than its share waiting in the
/// kernel), or a destination waiting to join the kernel path, looks again.
const KERNEL_CHECK: Duration = Duration::from_millis(5);

/// How soon a client looks again whether its worker's destinations have all joined the
/// kernel path (they connect, or one is down).
const REGISTER_CHECK: Duration = Duration::from_millis(50);

/// How often a client in the kernel path checks whether the kernel gave up on it (more
/// went up than user space took out, see [`fastpath_kernel::Counts::overflowed`]).
const OVERFLOW_CHECK: Duration = Duration::from_millis(250);

/// Per-process numbers for the workers' tags in the kernel's maps.
static NEXT_TAG: AtomicU32 = AtomicU32::new(0);

/// The kernel path of one worker (see `docs/kernel-path.md`, "The forwarder"): its
/// destinations' sockets registered in the kernel's map once user space has nothing queued
/// for them, and one injector per destination, a loopback connection whose receiving end
/// the kernel reads like a client's: the messages user space forwards to a registered
/// destination go through it, so that they reach the destination whole and in order with
/// what the kernel sends it.
struct Kernel {
    path: Arc<ForwardPath>,
    /// This worker's name in the kernel's maps (unique across workers and processes).
    tag: u64,
    /// Bytes the kernel may hold for one destination before its injector is held back.
    max_held: u64,
    /// Where the injectors connect, until all have.
    listener: Option<TcpListener>,
    /// Injectors' receiving ends accepted before their own turn.
    accepted: Vec<TcpStream>,
    injectors: Vec<Option<Injector>>,
    registered: Vec<Option<Registered>>,
    started: bool,
}

/// An injector's receiving end, in the kernel's map.
struct Injector {
    end: TcpStream,
    joined: Joined,
    /// Bytes posted to it over its life (to know when the kernel has routed all).
    posted: u64,
    /// Messages the kernel dropped (its destination gone), already counted.
    lost: u64,
}

/// A destination's socket in the kernel's map.
struct Registered {
    fd: RawFd,
    /// What user space had written to it when it was registered.
    base_written: u64,
}

impl Kernel {
    /// Bytes the kernel holds for destination `route` beyond its send buffer.
    fn held(&self, route: usize) -> u64 {
        let Some(reg) = &self.registered[route] else {
            return 0;
        };
        // SAFETY: the descriptor is the open destination connection's; it is forgotten in
        // its on_close, before the driver closes it.
        let socket = unsafe { BorrowedFd::borrow_raw(reg.fd) };
        let written = fastpath_kernel::bytes_written(socket)
            .unwrap_or(reg.base_written)
            .saturating_sub(reg.base_written);
        self.path
            .redirected(self.tag, route as u32)
            .saturating_sub(written)
    }

    /// The kernel has routed everything posted to injector `route`.
    fn injector_drained(&self, route: usize) -> bool {
        match &self.injectors[route] {
            Some(inj) => self
                .path
                .counts(inj.joined)
                .is_some_and(|c| c.seen == inj.posted),
            None => true,
        }
    }
}

/// Where a destination's connection stands, per worker.
#[derive(Debug, Clone, Copy, Default)]
struct Destination {
    connecting: bool,
    /// Unreachable until then: its messages are given up meanwhile.
    down_until: Option<Instant>,
    /// Messages given up in the call under way, counted and logged once at its end.
    unreachable: Undelivered,
}

/// One worker of the forwarder: every message from any client goes, byte for byte as it
/// came, to destination `key mod N` (Euclidean, so a negative key lands in `0..N` too) over a
/// connection this worker keeps to it, in the order the client sent it. Messages are never
/// decoded and encoded again, only checked and read for their key.
///
/// A destination's connection is opened when its first message comes and reopened when it
/// ends while messages wait. A destination that cannot be reached has its messages given up
/// for [`ForwardConfig::retry_after`] and then tried again; what is given up, and what a
/// connection had not sent when it ended, is counted ([`ForwardStats`]) and logged, never
/// dropped in silence. A destination that stops reading makes its clients wait (their
/// input is left in their sockets) once its queue passes [`ForwardConfig::queue_limit`].
pub struct Forwarder {
    config: Arc<ForwardConfig>,
    stats: Arc<ForwardStats>,
    decoder: Decoder,
    /// Routes `0..n` are the destinations' connections, `n..2n` their injectors.
    relay: Relay,
    destinations: Vec<Destination>,
    kernel: Option<Kernel>,
}

/// A client of the forwarder.
pub struct ClientConn {
    /// Its address, for the log.
    peer: SocketAddr,
    kernel: ClientKernel,
}

/// Where a client stands with the kernel path.
struct ClientKernel {
    peer: SocketAddr,
    /// Its socket's handle in the kernel's map, once it has joined.
    joined: Option<Joined>,
    /// Bytes user space took from it over its life.
    taken: u64,
    /// The kernel path could not take it: it stays in user space.
    refused: bool,
    /// Its deadline is a look at the injectors (see `client_to_kernel`).
    recheck: bool,
    /// It has finished, and the kernel still has bytes on their way up: since the driver
    /// reads nothing after the end, they are read here (`finish_from_kernel`).
    tail: Option<Vec<u8>>,
}

/// A forwarder connection: a client, or the connection to a destination.
pub enum ForwardConn {
    /// A client sending messages.
    Client(ClientConn),
    /// The connection to destination `route`.
    Destination {
        /// The destination's number.
        route: usize,
        /// Bytes the kernel took over its life (known when it closes).
        sent: u64,
    },
    /// The injector of destination `route` (kernel path).
    Injector {
        /// The destination's number.
        route: usize,
    },
}

impl Forwarder {
    /// A worker forwarding as `config` says, counting into `stats`.
    pub fn new(config: Arc<ForwardConfig>, stats: Arc<ForwardStats>) -> Self {
        Self::with_kernel(config, stats, None)
    }

    /// A worker that forwards canonical `msg` calls in the kernel with `kernel` (see
    /// [`ForwardPath`]) where it can, the rest as [`Forwarder::new`]'s does.
    pub fn with_kernel(
        config: Arc<ForwardConfig>,
        stats: Arc<ForwardStats>,
        kernel: Option<Arc<ForwardPath>>,
    ) -> Self {
        let routes = config.destinations.len();
        let kernel = kernel.map(|path| Kernel {
            path,
            tag: (u64::from(std::process::id()) << 32)
                | u64::from(NEXT_TAG.fetch_add(1, Ordering::Relaxed)),
            max_held: (config.queue_limit as u64).saturating_mul(4),
            listener: None,
            accepted: Vec::new(),
            injectors: (0..routes).map(|_| None).collect(),
            registered: (0..routes).map(|_| None).collect(),
            started: false,
        });
        Forwarder {
            decoder: Decoder::new(config.transport, config.limits),
            relay: Relay::new(2 * routes, config.queue_limit),
            destinations: vec![Destination::default(); routes],
            config,
            stats,
            kernel,
        }
    }

    /// The relay route of destination `route`'s messages: its injector once it is in the
    /// kernel's map, its connection otherwise.
    fn target(&self, route: usize) -> usize {
        match &self.kernel {
            Some(k) if k.registered[route].is_some() => self.destinations.len() + route,
            _ => route,
        }
    }

    /// Counts `len` bytes posted for `route`'s injector when they go through it (`target` is
    /// not the destination itself: the kernel routes to it).
    fn count_injected(&mut self, route: usize, target: usize, len: usize) {
        if target == route {
            return;
        }
        if let Some(injector) = self
            .kernel
            .as_mut()
            .and_then(|k| k.injectors[route].as_mut())
        {
            injector.posted += len as u64;
        }
    }

    /// How long a client's deadline is: its idle timeout, or the next overflow check once it
    /// is in the kernel path.
    fn client_check(&self, joined: bool) -> Duration {
        if joined {
            OVERFLOW_CHECK.min(self.config.idle_timeout)
        } else {
            self.config.idle_timeout
        }
    }

    /// Whether the kernel gave up on a client (it sent more than user space took, while its
    /// destinations did not take it); logs why.
    fn overflowed(&self, client: &ClientKernel) -> bool {
        let (Some(k), Some(j)) = (&self.kernel, client.joined) else {
            return false;
        };
        if !k.path.counts(j).is_some_and(|c| c.overflowed) {
            return false;
        }
        self.stats.refused_clients.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            "forward: client {}: sent more than {} bytes its destinations did not take; \
             resetting",
            client.peer,
            k.max_held
        );
        true
    }

    /// A client in the kernel path has finished: the end can reach user space before the
    /// last bytes the kernel sends up (they go through a queue of the socket's own, emptied
    /// by a kernel worker), and the driver reads nothing after the end. So what the kernel
    /// has passed up and user space has not taken is read here, straight from the socket,
    /// and forwarded; the connection closes once it is all taken (or after the idle
    /// timeout, if it never comes).
    fn finish_from_kernel(&mut self, client: &mut ClientKernel, io: &mut Io<'_>) -> Next {
        let (Some(k), Some(j)) = (&self.kernel, client.joined) else {
            return Next::Close;
        };
        let Some(counts) = k.path.counts(j) else {
            return Next::Close;
        };
        let first = client.tail.is_none();
        let mut tail = client.tail.take().unwrap_or_default();
        if first && !io.input().is_empty() {
            // What the driver read and forward_from left (a message cut by the end).
            tail.extend_from_slice(io.input().data());
            let n = io.input().len();
            io.input_mut().consume(n);
        }
        let mut buf = [0u8; 65536];
        loop {
            // SAFETY: recv writes at most buf.len() bytes into buf.
            let n = unsafe {
                libc::recv(
                    io.socket().as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n <= 0 {
                break;
            }
            tail.extend_from_slice(&buf[..n as usize]);
        }
        let routes = self.destinations.len() as i64;
        let decoder = self.decoder;
        let me = io.me();
        let mut consumed = 0;
        while consumed < tail.len() {
            let rest = &tail[consumed..];
            let (key, len) =
                match ForwarderMsg::peek_canonical(rest, decoder.transport(), decoder.limits()) {
                    Some(found) => found,
                    None => match decoder.decode(rest) {
                        Ok(Decoded::Message(m)) => match ForwarderMsg::from_message(&m) {
                            Ok(args) => (args.key, m.wire_len()),
                            Err(e) => {
                                tracing::warn!("forward: client {}: {e}; closing", client.peer);
                                return Next::Abort;
                            }
                        },
                        Ok(Decoded::NeedMore(_)) => break,
                        Err(e) => {
                            tracing::warn!("forward: client {}: {e}; closing", client.peer);
                            return Next::Abort;
                        }
                    },
                };
            let route = (key as i64).rem_euclid(routes) as usize;
            if self.reach(route, io.now(), &mut io.worker()) {
                let target = self.target(route);
                self.count_injected(route, target, len);
                // At the end the queue may pass its limit: the kernel bounded what came up.
                self.relay.post(target, &tail[consumed..consumed + len], me);
                self.stats.forwarded.fetch_add(1, Ordering::Relaxed);
            } else {
                self.give_up(
                    route,
                    Undelivered {
                        messages: 1,
                        bytes: len as u64,
                    },
                    "it cannot be reached",
                );
            }
            consumed += len;
            client.taken += len as u64;
        }
        tail.drain(..consumed);
        self.relay.wake(&mut io.worker());
        let start = counts.start.unwrap_or(client.taken);
        let up_taken = client.taken.saturating_sub(start);
        let quiet =
            fastpath_kernel::since_last_input(io.socket()).unwrap_or(self.config.idle_timeout);
        if counts.passed <= up_taken || quiet >= self.config.idle_timeout {
            if !tail.is_empty() {
                tracing::warn!(
                    "forward: client {}: the connection ended inside a message ({} bytes dropped)",
                    client.peer,
                    tail.len()
                );
            }
            return Next::Close;
        }
        client.tail = Some(tail);
        io.set_deadline(Some(io.now() + KERNEL_CHECK));
        Next::Wait
    }

    /// Opens the injectors and the destinations' connections, once, at the first client.
    fn start_kernel(&mut self, now: Instant, worker: &mut Worker<'_>) {
        let Some(k) = &mut self.kernel else {
            return;
        };
        if k.started {
            return;
        }
        k.started = true;
        let listener = match TcpListener::bind("127.0.0.1:0").and_then(|l| {
            let addr = l.local_addr()?;
            Ok((l, addr))
        }) {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!("forward: the kernel path's injectors cannot listen ({e}); forwarding in user space");
                self.kernel = None;
                return;
            }
        };
        let (listener, addr) = listener;
        for route in 0..self.destinations.len() {
            if let Err(e) = worker.connect(addr, INJECTOR_TAG + route as u64) {
                tracing::warn!("forward: injector {route} cannot connect ({e}); destination {route} stays in user space");
            }
        }
        // Accepted only once a connection is reported open: never waits.
        if let Err(e) = listener.set_nonblocking(true) {
            tracing::warn!("forward: the kernel path's injectors: {e}");
        }
        k.listener = Some(listener);
        for route in 0..self.destinations.len() {
            self.reach(route, now, worker);
        }
    }

    /// Injector `route`'s connection is open: finds its other end and puts it in the map.
    fn open_injector(&mut self, route: usize, io: &mut Io<'_>) -> Next {
        let n = self.destinations.len();
        let Some(k) = &mut self.kernel else {
            return Next::Close;
        };
        let Some(port) = local_port(io.socket()) else {
            return Next::Close;
        };
        let mut end = k
            .accepted
            .iter()
            .position(|s| s.peer_addr().is_ok_and(|a| a.port() == port))
            .map(|i| k.accepted.swap_remove(i));
        while end.is_none() {
            let Some(listener) = &k.listener else { break };
            match listener.accept() {
                Ok((s, a)) if a.port() == port => end = Some(s),
                Ok((s, _)) => k.accepted.push(s),
                Err(e) => {
                    tracing::warn!("forward: injector {route}: {e}");
                    break;
                }
            }
        }
        let Some(end) = end else {
            return Next::Close;
        };
        match k.path.join_injector(end.as_fd(), k.tag, route as u32) {
            Ok(joined) => {
                k.injectors[route] = Some(Injector {
                    end,
                    joined,
                    posted: 0,
                    lost: 0,
                });
            }
            Err(e) => {
                tracing::warn!("forward: injector {route}: the kernel cannot take it ({e}); destination {route} stays in user space");
                return Next::Close;
            }
        }
        if k.injectors.iter().all(Option::is_some) {
            k.listener = None;
        }
        self.relay.attach(n + route, io.me());
        // The destination may be waiting for its injector to join the kernel path.
        if let Some(dest) = self.relay.connection(route) {
            io.wake(dest);
        }
        self.deliver_injector(route, io)
    }

    /// Moves what waits for injector `route` into it, unless its destination has its share
    /// waiting in the kernel already.
    fn deliver_injector(&mut self, route: usize, io: &mut Io<'_>) -> Next {
        let n = self.destinations.len();
        let Some(k) = &mut self.kernel else {
            return Next::Close;
        };
        if let Some(inj) = &mut k.injectors[route] {
            let lost = k.path.counts(inj.joined).map_or(0, |c| c.lost);
            if lost > inj.lost {
                let messages = lost - inj.lost;
                inj.lost = lost;
                self.give_up(
                    route,
                    Undelivered { messages, bytes: 0 },
                    "its connection ended with them in the kernel",
                );
            }
        }
        let k = self.kernel.as_ref().expect("checked above");
        if k.held(route) > k.max_held {
            io.set_deadline(Some(io.now() + KERNEL_CHECK));
            return Next::Wait;
        }
        let mut sock = BufferedSocket::with_limit(io, self.config.queue_limit);
        let unasked = sock.peek().len();
        sock.discard(unasked);
        let more = self.relay.deliver(n + route, &mut sock);
        self.relay.wake(&mut sock.worker());
        if let Some(dest) = self.relay.connection(route) {
            // A destination waiting for this injector to drain before it joins.
            if self
                .kernel
                .as_ref()
                .is_some_and(|k| k.registered[route].is_none())
            {
                sock.wake(dest);
            }
        }
        if more {
            return Next::Drain;
        }
        if sock.io().draining() && sock.queued() == 0 && self.relay.queued(n + route) == 0 {
            // Closing drops what the kernel has not yet taken from the injector: wait until
            // it has routed everything.
            if self
                .kernel
                .as_ref()
                .is_some_and(|k| !k.injector_drained(route))
            {
                let io = sock.io();
                io.set_deadline(Some(io.now() + KERNEL_CHECK));
                return Next::Wait;
            }
            return Next::Close;
        }
        Next::Read
    }

    /// Registers destination `route`'s connection in the kernel's map if user space has
    /// nothing queued for it and its injector is drained; the answer for the connection if
    /// it must wait for that.
    fn register(&mut self, route: usize, sock: &mut BufferedSocket<'_, '_>) -> Option<Next> {
        let n = self.destinations.len();
        let k = self.kernel.as_mut()?;
        if k.registered[route].is_some() || k.injectors[route].is_none() {
            return None;
        }
        if self.relay.queued(route) > 0 || sock.queued() > 0 {
            // Called again once the output has gone to the kernel.
            return Some(Next::Drain);
        }
        if self.relay.queued(n + route) > 0 || !k.injector_drained(route) {
            // What the injector still carries was meant for the connection before this
            // one: it must be gone (dropped, counted) before this one joins.
            let io = sock.io();
            io.set_deadline(Some(io.now() + KERNEL_CHECK));
            return None;
        }
        let socket = sock.io().socket();
        let base_written = fastpath_kernel::bytes_written(socket).unwrap_or(0);
        match k.path.register(socket, k.tag, route as u32) {
            Ok(()) => {
                k.registered[route] = Some(Registered {
                    fd: socket.as_raw_fd(),
                    base_written,
                });
                tracing::debug!("forward: destination {route}: in the kernel path");
            }
            Err(e) => {
                tracing::warn!(
                    "forward: destination {route}: the kernel cannot take it ({e}); its \
                     messages stay in user space"
                );
                k.injectors[route] = None;
            }
        }
        None
    }

    /// At a quiet moment of a client (nothing of its input held here): puts it in the
    /// kernel's map, or tells the kernel that user space has forwarded all it passed up.
    /// Sets `recheck` when that must wait for the injectors: the client's deadline is then
    /// the next look.
    fn client_to_kernel(&mut self, client: &mut ClientKernel, io: &mut Io<'_>) {
        let Some(k) = &self.kernel else {
            return;
        };
        if client.refused || !io.input().is_empty() || io.eof() {
            return;
        }
        let routes = self.destinations.len();
        if (0..routes).any(|r| k.registered[r].is_none()) {
            // Its destinations are still connecting (or down): look again later.
            client.recheck = true;
            io.set_deadline(Some(io.now() + REGISTER_CHECK));
            return;
        }
        // Everything it sent before must be in the kernel's queues (or gone with its
        // connection) before anything it sends now can go there: until then the kernel
        // passes it all up.
        let drained =
            (0..routes).all(|r| self.relay.queued(routes + r) == 0 && k.injector_drained(r));
        if !drained {
            client.recheck = true;
            io.set_deadline(Some(io.now() + KERNEL_CHECK));
        }
        if let Some(j) = client.joined {
            // What it takes beyond `start` came up from the kernel; until it has taken all
            // it read before, those bytes are still to be forwarded.
            let Some(start) = k.path.counts(j).and_then(|c| c.start) else {
                return;
            };
            let read = client.taken.saturating_sub(start);
            k.path.report(j, read, drained && client.taken >= start);
            return;
        }
        if fastpath_kernel::unread(io.socket()).map_or(true, |n| n > 0) {
            return;
        }
        // Passing at first: a receive under way may still deliver bytes read before (the
        // kernel says how many once it has begun, `Counts::start`).
        match k.path.join(io.socket(), k.tag, routes as u32, true) {
            Ok(j) => {
                client.joined = Some(j);
                client.recheck = true;
                io.set_deadline(Some(io.now() + KERNEL_CHECK));
                self.stats.kernel_clients.fetch_add(1, Ordering::Relaxed);
            }
            Err(TakeOverError::Full) => {
                tracing::debug!(
                    "forward: client {}: the kernel path is full ({} sockets); forwarding in \
                     user space",
                    client.peer,
                    k.path.capacity()
                );
                client.refused = true;
            }
            Err(e) => {
                tracing::debug!(
                    "forward: client {}: the kernel cannot take it ({e}); forwarding in user \
                     space",
                    client.peer
                );
                client.refused = true;
            }
        }
    }

    /// Counts and logs what was given up for destination `route`.
    fn give_up(&self, route: usize, lost: Undelivered, why: &str) {
        if lost.messages == 0 {
            return;
        }
        self.stats
            .undelivered
            .fetch_add(lost.messages, Ordering::Relaxed);
        tracing::warn!(
            "forward: destination {} ({}): {} message{} ({} bytes) undelivered: {why}",
            route,
            self.config.destinations[route],
            lost.messages,
            if lost.messages == 1 { "" } else { "s" },
            lost.bytes
        );
    }

    /// Opens a connection to destination `route` unless one is open or on its way; false
    /// when the destination is down (its messages are to be given up).
    fn reach(&mut self, route: usize, now: Instant, worker: &mut Worker<'_>) -> bool {
        let dest = &mut self.destinations[route];
        if self.relay.connection(route).is_some() || dest.connecting {
            return true;
        }
        if dest.down_until.is_some_and(|until| now < until) {
            return false;
        }
        let addr = self.config.destinations[route];
        match worker.connect(addr, route as u64) {
            Ok(()) => {
                dest.connecting = true;
                dest.down_until = None;
                true
            }
            Err(e) => {
                dest.down_until = Some(now + self.config.retry_after);
                tracing::warn!("forward: destination {route} ({addr}): cannot connect: {e}");
                false
            }
        }
    }

    /// Takes every whole message a client has sent; the answer for the client. `taken`
    /// counts the bytes taken.
    fn forward_from(&mut self, peer: SocketAddr, taken_bytes: &mut u64, io: &mut Io<'_>) -> Next {
        let now = io.now();
        let routes = self.destinations.len() as i64;
        let mut full = false;
        let mut turn_over = false;
        let mut taken = 0;
        let mut bad = None;
        let decoder = self.decoder;
        let (transport, limits) = (decoder.transport(), *decoder.limits());
        let mut forwarded = 0;
        let mut gave_up = false;
        let mut sock = ThriftSocket::new(BufferedSocket::new(io), &decoder);
        loop {
            if taken >= TURN_BYTES {
                turn_over = true;
                break;
            }
            // The usual shape is read in place (every byte checked); anything else goes
            // through the full decoder, which reads it or says what is wrong.
            let canonical =
                ForwarderMsg::peek_canonical(sock.buffered().peek(), transport, &limits);
            let (key, len, decoded) = match canonical {
                Some((key, len)) => (key, len, false),
                None => match sock.next() {
                    Ok(Some(message)) => match ForwarderMsg::from_message(&message) {
                        Ok(args) => (args.key, message.wire_len(), true),
                        Err(e) => {
                            bad = Some(e.to_string());
                            break;
                        }
                    },
                    Ok(None) => break,
                    Err(e) => {
                        bad = Some(e.to_string());
                        break;
                    }
                },
            };
            let route = (key as i64).rem_euclid(routes) as usize;
            *taken_bytes += len as u64;
            if !self.reach(route, now, &mut sock.buffered().worker()) {
                sock.buffered().discard(len);
                let lost = &mut self.destinations[route].unreachable;
                lost.messages += 1;
                lost.bytes += len as u64;
                gave_up = true;
                continue;
            }
            forwarded += 1;
            taken += len;
            let target = self.target(route);
            self.count_injected(route, target, len);
            let posted = if decoded {
                sock.forward(&mut self.relay, target)
            } else {
                let sock = sock.buffered();
                let me = sock.me();
                let posted = self.relay.post(target, &sock.peek()[..len], me);
                sock.discard(len);
                Some(posted)
            };
            if posted == Some(Posted::Full) {
                full = true;
                break;
            }
        }
        self.stats.forwarded.fetch_add(forwarded, Ordering::Relaxed);
        if gave_up {
            // One line per destination and read, not one per message.
            for route in 0..self.destinations.len() {
                let lost = std::mem::take(&mut self.destinations[route].unreachable);
                self.give_up(route, lost, "it cannot be reached");
            }
        }
        let sock = sock.buffered();
        self.relay.wake(&mut sock.worker());
        if let Some(reason) = bad {
            self.stats.refused_clients.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("forward: client {peer}: {reason}; closing");
            return Next::Abort;
        }
        if full {
            return Next::Wait;
        }
        if turn_over {
            // The rest after the others' turn: woken again in the worker's next round.
            let me = sock.me();
            sock.wake(me);
            return Next::Wait;
        }
        if sock.at_end() {
            if !sock.peek().is_empty() {
                tracing::warn!(
                    "forward: client {peer}: the connection ended inside a message ({} bytes \
                     dropped)",
                    sock.peek().len()
                );
            }
            return Next::Close;
        }
        if sock.io().draining() {
            return Next::Close;
        }
        Next::Read
    }

    /// Moves what waits for destination `route` into its connection; the answer for it.
    fn deliver(&mut self, route: usize, io: &mut Io<'_>) -> Next {
        let mut sock = BufferedSocket::with_limit(io, self.config.queue_limit);
        // A destination never answers a oneway message: whatever it sends is dropped.
        let unasked = sock.peek().len();
        sock.discard(unasked);
        let more = self.relay.deliver(route, &mut sock);
        self.relay.wake(&mut sock.worker());
        if sock.at_end() {
            return Next::Close;
        }
        if more {
            return Next::Drain;
        }
        if let Some(next) = self.register(route, &mut sock) {
            return next;
        }
        if sock.io().draining() && sock.queued() == 0 {
            let n = self.destinations.len();
            if self.kernel.as_ref().is_some_and(|k| {
                k.held(route) > 0
                    || (k.registered[route].is_some()
                        && (self.relay.queued(n + route) > 0 || !k.injector_drained(route)))
            }) {
                // The kernel still sends what it took, or what its injector carries: closing
                // now would drop it.
                let io = sock.io();
                io.set_deadline(Some(io.now() + KERNEL_CHECK));
                return Next::Wait;
            }
            return Next::Close;
        }
        Next::Read
    }
}

impl Handler for Forwarder {
    type Conn = ForwardConn;

    fn on_open(&mut self, opened: Opened, io: &mut Io<'_>) -> (ForwardConn, Next) {
        match opened.origin() {
            Origin::Outgoing { tag } if tag >= INJECTOR_TAG => {
                let route = (tag - INJECTOR_TAG) as usize;
                let next = self.open_injector(route, io);
                (ForwardConn::Injector { route }, next)
            }
            Origin::Outgoing { tag } => {
                let route = tag as usize;
                self.destinations[route].connecting = false;
                self.relay.attach(route, io.me());
                let next = self.deliver(route, io);
                (ForwardConn::Destination { route, sent: 0 }, next)
            }
            _ => {
                io.set_deadline(Some(io.now() + self.config.idle_timeout));
                let peer = opened.peer();
                let now = io.now();
                self.start_kernel(now, &mut io.worker());
                let conn = ForwardConn::Client(ClientConn {
                    peer,
                    kernel: ClientKernel {
                        peer,
                        joined: None,
                        taken: 0,
                        refused: false,
                        recheck: false,
                        tail: None,
                    },
                });
                (conn, Next::Read)
            }
        }
    }

    fn on_ready(&mut self, conn: &mut ForwardConn, io: &mut Io<'_>) -> Next {
        match conn {
            ForwardConn::Client(client) => {
                io.set_deadline(Some(
                    io.now() + self.client_check(client.kernel.joined.is_some()),
                ));
                client.kernel.recheck = false;
                if self.overflowed(&client.kernel) {
                    return Next::Abort;
                }
                let next = self.forward_from(client.peer, &mut client.kernel.taken, io);
                if next == Next::Read {
                    self.client_to_kernel(&mut client.kernel, io);
                }
                if next == Next::Close && io.eof() && client.kernel.joined.is_some() {
                    return self.finish_from_kernel(&mut client.kernel, io);
                }
                next
            }
            ForwardConn::Destination { route, .. } => self.deliver(*route, io),
            ForwardConn::Injector { route } => self.deliver_injector(*route, io),
        }
    }

    fn on_timeout(&mut self, conn: &mut ForwardConn, io: &mut Io<'_>) -> Next {
        match conn {
            // User space sees none of a joined client's bytes: the socket says when it last
            // sent.
            ForwardConn::Client(client) if client.kernel.tail.is_some() => {
                self.finish_from_kernel(&mut client.kernel, io)
            }
            ForwardConn::Client(client)
                if client.kernel.recheck || client.kernel.joined.is_some() =>
            {
                if self.overflowed(&client.kernel) {
                    return Next::Abort;
                }
                let quiet = fastpath_kernel::since_last_input(io.socket())
                    .unwrap_or(self.config.idle_timeout);
                if quiet >= self.config.idle_timeout {
                    return Next::Close;
                }
                let check = self.client_check(client.kernel.joined.is_some());
                io.set_deadline(Some(io.now() + check.min(self.config.idle_timeout - quiet)));
                if std::mem::take(&mut client.kernel.recheck) {
                    self.client_to_kernel(&mut client.kernel, io);
                }
                Next::Read
            }
            ForwardConn::Client(_) => Next::Close,
            // A check of the kernel path's (KERNEL_CHECK).
            ForwardConn::Destination { route, .. } => self.deliver(*route, io),
            ForwardConn::Injector { route } => self.deliver_injector(*route, io),
        }
    }

    fn on_drain(&mut self, conn: &mut ForwardConn, io: &mut Io<'_>) -> Option<Next> {
        match conn {
            // What has arrived whole is forwarded; nothing more is read.
            ForwardConn::Client(client) => {
                match self.forward_from(client.peer, &mut client.kernel.taken, io) {
                    Next::Wait => None,
                    _ => Some(Next::Close),
                }
            }
            ForwardConn::Destination { route, .. } => Some(self.deliver(*route, io)),
            ForwardConn::Injector { route } => Some(self.deliver_injector(*route, io)),
        }
    }

    fn on_closing(&mut self, conn: &mut ForwardConn, sent_now: u64) {
        if let ForwardConn::Destination { sent, .. } = conn {
            *sent = sent_now;
        }
    }

    fn on_close(&mut self, conn: ForwardConn, reason: CloseReason, worker: &mut Worker<'_>) {
        let (route, sent) = match conn {
            ForwardConn::Destination { route, sent } => (route, sent),
            ForwardConn::Client(client) => {
                if let (Some(k), Some(j)) = (&self.kernel, client.kernel.joined) {
                    k.path.release(j);
                }
                return;
            }
            ForwardConn::Injector { route } => {
                // Only at the end: its other end is the worker's own.
                if let Some(k) = &mut self.kernel {
                    if let Some(inj) = k.injectors[route].take() {
                        k.path.release(inj.joined);
                        drop(inj.end);
                    }
                }
                return;
            }
        };
        if let Some(k) = &mut self.kernel {
            if k.registered[route].is_some() {
                let held = k.held(route);
                k.path.unregister(k.tag, route as u32);
                k.registered[route] = None;
                if held > 0 && reason != CloseReason::Done {
                    tracing::warn!(
                        "forward: destination {route} ({}): {held} bytes the kernel held for \
                         it are lost with its connection ({reason:?})",
                        self.config.destinations[route]
                    );
                }
            }
        }
        let lost = self.relay.detach(route, sent);
        self.give_up(route, lost, &format!("its connection ended ({reason:?})"));
        let now = Instant::now();
        if reason == CloseReason::ConnectFailed {
            tracing::warn!(
                "forward: destination {route} ({}): connection failed; retrying in {:?}",
                self.config.destinations[route],
                self.config.retry_after
            );
            self.destinations[route].down_until = Some(now + self.config.retry_after);
            let dropped = self.relay.drop_queue(route);
            self.give_up(route, dropped, "it cannot be reached");
        } else if self.relay.queued(route) > 0 && !self.reach(route, now, worker) {
            let dropped = self.relay.drop_queue(route);
            self.give_up(route, dropped, "it cannot be reached");
        }
        self.relay.wake(worker);
    }
}

/// The local port of a connected socket.
fn local_port(socket: BorrowedFd<'_>) -> Option<u16> {
    // SAFETY: sockaddr_storage is plain data, filled by the kernel up to `len`.
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `addr`.
    let r = unsafe {
        libc::getsockname(
            socket.as_raw_fd(),
            (&mut addr as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    };
    if r < 0 || i32::from(addr.ss_family) != libc::AF_INET {
        return None;
    }
    // SAFETY: an AF_INET address is a sockaddr_in.
    let sin = unsafe { &*(&addr as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
    Some(u16::from_be(sin.sin_port))
}
