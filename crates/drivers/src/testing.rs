//! An engine whose connections' peers are the test: a [`Handler`] runs over in-memory
//! connections with the same engine code every loop shares (`connection.rs`,
//! `loops/mod.rs`), so a service's glue (the HTTP handler, its exchanges, its logs) is
//! tested with a real [`crate::Io`] and no socket, the way rustls drives both ends of a
//! handshake in memory.
//!
//! The test plays every peer: it opens client connections and writes their bytes
//! ([`TestWorker::connect`], [`TestWorker::send`]), reads what the server sent
//! ([`TestWorker::received`]), ends or resets them, holds their reading back (a slow
//! client), and answers the connections the handler opens ([`TestWorker::opened`]: a
//! scripted backend reads the request and writes the response with the same calls). Time
//! passes only when the test says so ([`TestWorker::advance`]), so deadlines are exact.
//! Bodies of file ranges are read with pread; joins move bytes between the two peers;
//! body splices are not offered ([`crate::Io::can_splice`] is false), as on io_uring.
//!
//! ```
//! use fastpath_drivers::testing::TestWorker;
//! use fastpath_drivers::{CloseReason, Handler, Io, Next, Opened, Worker};
//!
//! struct Echo;
//! impl Handler for Echo {
//!     type Conn = ();
//!     fn on_open(&mut self, _: Opened, _: &mut Io<'_>) -> ((), Next) { ((), Next::Read) }
//!     fn on_ready(&mut self, _: &mut (), io: &mut Io<'_>) -> Next {
//!         let data = io.input().data().to_vec();
//!         io.input_mut().consume(data.len());
//!         io.write(&data);
//!         if io.eof() { Next::Close } else { Next::Read }
//!     }
//!     fn on_timeout(&mut self, _: &mut (), _: &mut Io<'_>) -> Next { Next::Close }
//!     fn on_close(&mut self, _: (), _: CloseReason, _: &mut Worker<'_>) {}
//! }
//!
//! let mut worker = TestWorker::new(Echo);
//! let client = worker.connect();
//! worker.send(client, b"hello");
//! assert_eq!(worker.received(client), b"hello");
//! worker.shutdown_write(client);
//! assert_eq!(worker.closed(client), Some(CloseReason::Done));
//! ```

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::time::{Duration, Instant};

use crate::buffers::BufferPool;
use crate::connection::{self, Link, Parts, State};
use crate::contract::{JoinRequest, Outgoing};
use crate::linked::{self, HasLink, Reach, LINKED_INPUT_MAX};
use crate::loops::{parts_of, Core, Engine, Env};
use crate::slab::{Slab, Token};
use crate::{CloseReason, ConnRef, DriverConfig, Handler, Next, Opened, UpstreamAddr, TICK};

/// A connection of a [`TestWorker`], as the test names it: one it opened, or one the
/// handler opened ([`TestWorker::opened`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TestConn(Token);

impl TestConn {
    /// The connection's name in the worker, as the handler's [`crate::Io::me`] has it.
    pub fn conn_ref(self) -> ConnRef {
        ConnRef(self.0)
    }
}

/// The test's side of one connection.
#[derive(Default)]
struct Peer {
    /// Bytes the peer sent that the connection has not read yet.
    unread: Vec<u8>,
    /// The peer has finished sending (after `unread`).
    ended: bool,
    /// The peer vanished: the next look at the connection fails.
    reset: bool,
    /// What the connection sent the peer and the test has not taken.
    received: Vec<u8>,
    /// How many more bytes the peer takes; `None` for any number.
    window: Option<usize>,
    /// Where an outgoing connection goes.
    addr: Option<UpstreamAddr>,
    /// The connection has been shut down for sending (its end reached the peer).
    shut: bool,
}

/// One connection: the engine's link, the handler's state, the test's peer.
pub(crate) struct Slot<C> {
    link: Link,
    conn: C,
    peer: Peer,
    /// The connection joined with this one ([`crate::Io::join`]), on both.
    partner: Option<Token>,
}

impl<C> HasLink for Slot<C> {
    fn link_mut(&mut self) -> Option<&mut Link> {
        Some(&mut self.link)
    }
}

/// What is left of a closed connection for the test to look at.
struct Closed {
    reason: CloseReason,
    received: Vec<u8>,
}

/// A worker over in-memory connections (see the module doc).
pub struct TestWorker<H: Handler> {
    handler: H,
    slots: Slab<Slot<H::Conn>>,
    core: Core<'static>,
    /// Connections with something to move.
    dirty: Vec<usize>,
    /// Connections the handler opened that the test has not been shown.
    new_outgoing: Vec<TestConn>,
    /// Where outgoing connections whose slots are not filled yet go.
    addrs: HashMap<Token, UpstreamAddr>,
    closed: HashMap<Token, Closed>,
    /// Addresses whose connects fail.
    refused: HashSet<UpstreamAddr>,
    /// Addresses whose connects never complete.
    stalled: HashSet<UpstreamAddr>,
    next_port: u16,
}

/// A descriptor that stands in for a socket: nothing is ever read from or written to it (a
/// socket option set on it fails, harmlessly).
fn stand_in() -> io::Result<OwnedFd> {
    Ok(File::open("/dev/null")?.into())
}

impl<H: Handler> TestWorker<H> {
    /// A worker with the default configuration.
    pub fn new(handler: H) -> Self {
        Self::with_config(handler, DriverConfig::default())
    }

    /// A worker with `config` (timeouts, limits).
    pub fn with_config(handler: H, config: DriverConfig) -> Self {
        // What a worker shares with others in a real model: one per test worker, for the
        // life of the test.
        let env = Env {
            config: Box::leak(Box::new(config)),
            active: Box::leak(Box::new(AtomicUsize::new(0))),
            stop: Box::leak(Box::new(AtomicBool::new(false))),
        };
        let mut core = Core::new(env, BufferPool::default());
        core.requests.connector = |_| stand_in();
        // Ticks on the worker's own clock, exactly a tick apart.
        core.next_tick = core.now + TICK;
        TestWorker {
            handler,
            slots: Slab::default(),
            core,
            dirty: Vec::new(),
            new_outgoing: Vec::new(),
            addrs: HashMap::new(),
            closed: HashMap::new(),
            refused: HashSet::new(),
            stalled: HashSet::new(),
            next_port: 40000,
        }
    }

    /// The handler, to look at what it kept.
    pub fn handler(&mut self) -> &mut H {
        &mut self.handler
    }

    /// The worker's clock, which moves only with [`TestWorker::advance`].
    pub fn now(&self) -> Instant {
        self.core.now
    }

    /// Accepts a client connection on listener 0 (from 127.0.0.1, a port of its own).
    pub fn connect(&mut self) -> TestConn {
        self.next_port += 1;
        let peer = SocketAddr::from(([127, 0, 0, 1], self.next_port));
        self.connect_from(0, peer)
    }

    /// Accepts a client connection from `peer` on listener `listener`.
    pub fn connect_from(&mut self, listener: usize, peer: SocketAddr) -> TestConn {
        let fd = stand_in().expect("/dev/null opens");
        let token = self.slots.reserve();
        self.open_slot(Link::new(fd), Opened::new(peer, listener), Some(token));
        self.run();
        TestConn(token)
    }

    /// The connections the handler opened since the last call, with where each goes.
    pub fn opened(&mut self) -> Vec<(TestConn, UpstreamAddr)> {
        self.run();
        std::mem::take(&mut self.new_outgoing)
            .into_iter()
            .filter_map(|conn| Some((conn, self.addr(conn)?)))
            .collect()
    }

    /// Where outgoing connection `conn` goes.
    pub fn addr(&mut self, conn: TestConn) -> Option<UpstreamAddr> {
        self.slots.get_mut(conn.0)?.peer.addr.clone()
    }

    /// Connects to `addr` fail from now on (refused).
    pub fn refuse(&mut self, addr: UpstreamAddr) {
        self.refused.insert(addr);
    }

    /// Connects to `addr` never complete from now on: nothing moves either way (a backend
    /// that does not answer its SYN).
    pub fn stall_connects(&mut self, addr: UpstreamAddr) {
        self.stalled.insert(addr);
    }

    /// The peer of `conn` sends `bytes`; the worker runs until quiet.
    pub fn send(&mut self, conn: TestConn, bytes: &[u8]) {
        if let Some(slot) = self.slots.get_mut(conn.0) {
            slot.peer.unread.extend_from_slice(bytes);
            self.dirty.push(conn.0.index());
        }
        self.run();
    }

    /// The peer of `conn` finishes sending (its FIN).
    pub fn shutdown_write(&mut self, conn: TestConn) {
        if let Some(slot) = self.slots.get_mut(conn.0) {
            slot.peer.ended = true;
            self.dirty.push(conn.0.index());
        }
        self.run();
    }

    /// The peer of `conn` vanishes (a reset): the connection fails at its next look.
    pub fn reset(&mut self, conn: TestConn) {
        if let Some(slot) = self.slots.get_mut(conn.0) {
            slot.peer.reset = true;
            self.dirty.push(conn.0.index());
        }
        self.run();
    }

    /// The peer of `conn` takes at most `bytes` more of what is sent to it (`None`: all),
    /// so output piles up behind it like behind a client that does not read.
    pub fn window(&mut self, conn: TestConn, bytes: Option<usize>) {
        if let Some(slot) = self.slots.get_mut(conn.0) {
            slot.peer.window = bytes;
            self.dirty.push(conn.0.index());
        }
        self.run();
    }

    /// What the connection sent its peer since the last call (also after it closed).
    pub fn received(&mut self, conn: TestConn) -> Vec<u8> {
        self.run();
        match self.slots.get_mut(conn.0) {
            Some(slot) => std::mem::take(&mut slot.peer.received),
            None => self
                .closed
                .get_mut(&conn.0)
                .map(|closed| std::mem::take(&mut closed.received))
                .unwrap_or_default(),
        }
    }

    /// Whether the connection is open.
    pub fn is_open(&mut self, conn: TestConn) -> bool {
        self.run();
        self.slots.get_mut(conn.0).is_some()
    }

    /// Why the connection closed, once it has.
    pub fn closed(&mut self, conn: TestConn) -> Option<CloseReason> {
        self.run();
        self.closed.get(&conn.0).map(|closed| closed.reason)
    }

    /// Whether the connection has sent its peer its end (closing, or lingering after a
    /// shutdown).
    pub fn ended_to_peer(&mut self, conn: TestConn) -> bool {
        self.run();
        match self.slots.get_mut(conn.0) {
            Some(slot) => slot.peer.shut,
            None => self.closed.contains_key(&conn.0),
        }
    }

    /// Bytes queued on the connection and not taken by its peer.
    pub fn queued(&mut self, conn: TestConn) -> u64 {
        self.run();
        self.slots
            .get_mut(conn.0)
            .map_or(0, |slot| slot.link.output.pending())
    }

    /// Lets `by` pass, a tick at a time: deadlines that come are handled as a loop would.
    pub fn advance(&mut self, by: Duration) {
        let until = self.core.now + by;
        while self.core.now < until {
            self.core.now = (self.core.now + TICK).min(until);
            self.keep_time();
            self.run();
        }
    }

    /// Begins a graceful stop: every connection's handler hears of it (`on_drain`), as on
    /// a loop's next tick after the stop signal.
    pub fn drain(&mut self) {
        self.core.draining = true;
        self.tell_drain();
        self.run();
    }

    /// Moves every connection on, and carries out what handlers asked, until nothing is
    /// left to do.
    pub fn run(&mut self) {
        for _ in 0..10_000 {
            if self.dirty.is_empty() && self.core.requests.is_empty() {
                return;
            }
            let mut dirty = std::mem::take(&mut self.dirty);
            dirty.sort_unstable();
            dirty.dedup();
            for index in dirty {
                self.step(index);
            }
            self.run_requests();
        }
        panic!("the worker never went quiet");
    }

    /// The memory loop's drive: moves bytes between a connection and its peer, applies the
    /// closing rules and calls the handler, as far as it goes.
    fn step(&mut self, index: usize) {
        loop {
            let Some(slot) = self.slots.at(index) else {
                return;
            };
            if slot.peer.reset {
                self.close(index, CloseReason::PeerGone);
                return;
            }
            let link = &mut slot.link;
            if !link.output.is_empty() {
                let limit = slot.peer.window.unwrap_or(usize::MAX);
                match link.output.copy_to(&mut slot.peer.received, limit) {
                    Ok(n) => {
                        if let Some(window) = slot.peer.window.as_mut() {
                            *window -= n;
                        }
                        if link.output.is_empty() {
                            link.output_sent(&mut self.core.requests.woken);
                        } else {
                            link.send_deadline
                                .get_or_insert(self.core.now + self.core.config.send_timeout);
                        }
                    }
                    Err(e) => {
                        self.close(index, e.close_reason());
                        return;
                    }
                }
            }
            let Some(slot) = self.slots.at(index) else {
                return;
            };
            let link = &mut slot.link;
            match link.state {
                State::Joined => {
                    self.move_joined(index);
                    return;
                }
                State::Waiting => return,
                State::Idle => {
                    if !slot.peer.unread.is_empty() || slot.peer.ended {
                        self.close(index, CloseReason::PeerGone);
                    }
                    return;
                }
                State::Draining => {
                    if !link.output.is_empty() || !self.output_drained(index) {
                        return;
                    }
                }
                State::Closing => {
                    let waiting = !slot.peer.unread.is_empty();
                    if !link.output.is_empty() || !self.finish_closing(index, waiting) {
                        return;
                    }
                    let slot = self.slots.at(index).expect("lingering");
                    slot.peer.shut = true;
                }
                State::Lingering => {
                    slot.peer.unread.clear();
                    if slot.peer.ended {
                        self.close(index, CloseReason::Done);
                    }
                    return;
                }
                State::Reading => {
                    let room = if link.owner().is_some() {
                        LINKED_INPUT_MAX.saturating_sub(link.input.len())
                    } else {
                        usize::MAX
                    };
                    let mut got = false;
                    if !slot.peer.unread.is_empty() && !link.eof && room > 0 {
                        if link.owner().is_none() && link.input.len() >= self.core.config.max_input
                        {
                            self.close(index, CloseReason::Error);
                            return;
                        }
                        let n = slot.peer.unread.len().min(room);
                        let bytes: Vec<u8> = slot.peer.unread.drain(..n).collect();
                        let _ = link.input.receive(bytes);
                        got = true;
                    } else if slot.peer.ended && slot.peer.unread.is_empty() && !link.eof {
                        link.eof = true;
                        got = true;
                    }
                    if !got {
                        return;
                    }
                    if !self.call_and_apply(index, false) {
                        return;
                    }
                }
            }
        }
    }

    /// Moves the bytes of a joined pair: what either peer sends goes to the other, each end
    /// is passed on, and both close once the partner's end has reached the owner's peer.
    fn move_joined(&mut self, index: usize) {
        let token = self.slots.token(index);
        let Some(partner) = self.slots.at(index).and_then(|slot| slot.partner) else {
            return;
        };
        // The owner holds the joint: the partner is moved with it.
        let owner = match self.slots.at(index).and_then(|slot| slot.link.owner()) {
            Some(owner) if owner == partner => {
                self.dirty.push(owner.index());
                return;
            }
            _ => token,
        };
        let Some((a, b)) = self.slots.pair(owner.index(), partner.index()) else {
            self.close(index, CloseReason::Error);
            return;
        };
        if !a.link.output.is_empty() || !b.link.output.is_empty() {
            return;
        }
        b.peer.received.append(&mut a.peer.unread);
        a.peer.received.append(&mut b.peer.unread);
        if a.peer.ended {
            b.peer.shut = true;
        }
        if b.peer.ended {
            // The partner's end reached the owner's peer: the joint is done.
            self.close(partner.index(), CloseReason::Done);
            self.close(owner.index(), CloseReason::Done);
        }
    }
}

impl<H: Handler> Engine<'static> for TestWorker<H> {
    type H = H;
    type Slot = Slot<H::Conn>;

    fn handler_and_core(&mut self) -> (&mut H, &mut Core<'static>) {
        (&mut self.handler, &mut self.core)
    }

    fn open_parts(&mut self) -> (&mut H, &mut Core<'static>, Reach<'_>) {
        (
            &mut self.handler,
            &mut self.core,
            linked::reach(&mut self.slots),
        )
    }

    fn slots(&mut self) -> &mut Slab<Slot<H::Conn>> {
        &mut self.slots
    }

    fn parts(&mut self, index: usize) -> Option<Parts<'_, 'static, H>> {
        let worker = (&mut self.handler, &mut self.core);
        parts_of(worker, &mut self.slots, index, |slot| {
            let joined = slot.partner.is_some();
            Some((&mut slot.link, &mut slot.conn, false, joined))
        })
    }

    fn insert(&mut self, token: Token, link: Link, conn: H::Conn) {
        let addr = self.addrs.remove(&token);
        if addr.is_some() {
            self.new_outgoing.push(TestConn(token));
        }
        let stalled = addr
            .as_ref()
            .is_some_and(|addr| self.stalled.contains(addr));
        self.slots.insert_at(
            token,
            Slot {
                link,
                conn,
                peer: Peer {
                    addr,
                    window: stalled.then_some(0),
                    ..Peer::default()
                },
                partner: None,
            },
        );
    }

    fn join(&mut self, index: usize, join: JoinRequest, next: Next) -> Next {
        let owner = self.slots.token(index);
        let partner = join.partner;
        let deadline = self.core.now + join.idle;
        let pool = &mut self.core.pool;
        let Some((slot, other)) =
            linked::join_slots(&mut self.slots, index, partner, pool, deadline)
        else {
            return Next::Abort;
        };
        other.partner = Some(owner);
        slot.partner = Some(partner);
        self.dirty.push(index);
        self.dirty.push(partner.index());
        next
    }

    fn proceed(&mut self, index: usize) {
        self.dirty.push(index);
    }

    fn close(&mut self, index: usize, reason: CloseReason) {
        let token = self.slots.token(index);
        let Some(mut slot) = self.slots.remove(index) else {
            return;
        };
        let reason = connection::closing(&mut self.handler, &mut slot.conn, &slot.link, reason);
        slot.link.release(&mut self.core);
        let departure = slot.link.departure();
        let counted = slot.link.counted;
        self.closed.insert(
            token,
            Closed {
                reason,
                received: std::mem::take(&mut slot.peer.received),
            },
        );
        self.end_close(token, departure, slot.conn, reason, counted);
    }

    fn joint_expired(&mut self, index: usize) {
        self.close(index, CloseReason::Done);
    }

    fn watch_listeners_again(&mut self) -> bool {
        true
    }

    fn accept_all(&mut self) {}

    fn open_outgoing(&mut self, outgoing: Outgoing) {
        let refused = self.refused.contains(&outgoing.addr);
        let token = outgoing.token.unwrap_or_else(|| self.slots.reserve());
        self.addrs.insert(token, outgoing.addr);
        let Some(index) = self.open_slot(*outgoing.link, outgoing.opened, Some(token)) else {
            return;
        };
        if refused {
            self.close(index, CloseReason::ConnectFailed);
        } else {
            self.dirty.push(index);
        }
    }
}
