//! `fastpath forward`: Slick's Thrift forwarder.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fastpath_sockets::thrift::{Decoder, ForwarderMsg, Limits, Transport};
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
}

/// Bytes of messages one client may forward in one call before the others get a turn: under
/// load, a client woken when a queue has room would otherwise take all of it, again and again,
/// while the clients behind it starve.
const TURN_BYTES: usize = 64 * 1024;

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
    relay: Relay,
    destinations: Vec<Destination>,
}

/// A forwarder connection: a client, or the connection to a destination.
pub enum ForwardConn {
    /// A client sending messages.
    Client {
        /// Its address, for the log.
        peer: SocketAddr,
    },
    /// The connection to destination `route`.
    Destination {
        /// The destination's number.
        route: usize,
        /// Bytes the kernel took over its life (known when it closes).
        sent: u64,
    },
}

impl Forwarder {
    /// A worker forwarding as `config` says, counting into `stats`.
    pub fn new(config: Arc<ForwardConfig>, stats: Arc<ForwardStats>) -> Self {
        let routes = config.destinations.len();
        Forwarder {
            decoder: Decoder::new(config.transport, config.limits),
            relay: Relay::new(routes, config.queue_limit),
            destinations: vec![Destination::default(); routes],
            config,
            stats,
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

    /// Takes every whole message a client has sent; the answer for the client.
    fn forward_from(&mut self, peer: SocketAddr, io: &mut Io<'_>) -> Next {
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
            let posted = if decoded {
                sock.forward(&mut self.relay, route)
            } else {
                let sock = sock.buffered();
                let me = sock.me();
                let posted = self.relay.post(route, &sock.peek()[..len], me);
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
        if sock.io().draining() && sock.queued() == 0 {
            return Next::Close;
        }
        Next::Read
    }
}

impl Handler for Forwarder {
    type Conn = ForwardConn;

    fn on_open(&mut self, opened: Opened, io: &mut Io<'_>) -> (ForwardConn, Next) {
        match opened.origin() {
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
                (ForwardConn::Client { peer }, Next::Read)
            }
        }
    }

    fn on_ready(&mut self, conn: &mut ForwardConn, io: &mut Io<'_>) -> Next {
        match *conn {
            ForwardConn::Client { peer } => {
                io.set_deadline(Some(io.now() + self.config.idle_timeout));
                self.forward_from(peer, io)
            }
            ForwardConn::Destination { route, .. } => self.deliver(route, io),
        }
    }

    fn on_timeout(&mut self, _conn: &mut ForwardConn, _io: &mut Io<'_>) -> Next {
        Next::Close
    }

    fn on_drain(&mut self, conn: &mut ForwardConn, io: &mut Io<'_>) -> Option<Next> {
        match *conn {
            // What has arrived whole is forwarded; nothing more is read.
            ForwardConn::Client { peer } => match self.forward_from(peer, io) {
                Next::Wait => None,
                _ => Some(Next::Close),
            },
            ForwardConn::Destination { route, .. } => Some(self.deliver(route, io)),
        }
    }

    fn on_closing(&mut self, conn: &mut ForwardConn, sent_now: u64) {
        if let ForwardConn::Destination { sent, .. } = conn {
            *sent = sent_now;
        }
    }

    fn on_close(&mut self, conn: ForwardConn, reason: CloseReason, worker: &mut Worker<'_>) {
        let ForwardConn::Destination { route, sent } = conn else {
            return;
        };
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
