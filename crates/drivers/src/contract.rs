//! The contract between a driver and the service it runs: the [`Handler`] a service
//! implements, the [`Io`] view of a connection it gets in each call, and the [`Next`] it
//! answers with. Every model honours it the same way; nothing here knows a protocol.
//!
//! A connection's life: [`Handler::on_open`] as soon as it is accepted (with an `Io`, so a
//! service can greet the client first and must arm a deadline for a client that never
//! speaks), then [`Handler::on_ready`] whenever input arrives or queued output has drained,
//! [`Handler::on_timeout`] when its deadline passes, and [`Handler::on_close`] once, whatever
//! ended it.
//!
//! A graceful stop (SIGTERM, see [`crate::signals`]) is part of that life: the worker stops
//! accepting (its listeners are closed, so new clients are refused rather than left in a
//! backlog nobody serves), calls [`Handler::on_drain`] once for every open connection, and
//! from then on every call's [`Io::draining`] is true, so a service finishes what it has
//! begun and ends the connection instead of waiting for another request (HTTP answers with
//! `Connection: close`). The worker stops once its connections are all closed, or when the
//! grace period ([`crate::DriverConfig::shutdown_timeout`]) is over: those still open are then
//! closed with [`CloseReason::Shutdown`].

use std::io;
use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::buffers::{BufferPool, Input, Output};
use crate::connection::{Link, LinkedSide, State};
use crate::linked::{IdlePool, LinkEntry, Linked, PoolKey, Reach};
use crate::outgoing::{start_connect, UpstreamAddr};
use crate::slab::Token;
use crate::splice::Carrier;
use crate::transport::TransportInfo;

/// How often deadlines are checked and [`Handler::on_tick`] runs.
pub const TICK: Duration = Duration::from_millis(100);

/// What a connection waits for after a handler call.
///
/// Non-exhaustive, as the ways to wait will grow (timers finer than the sweep, several
/// outgoing connections): a service returns a `Next` far more often than it matches one, and
/// building one is not affected; code that does match one (a handler wrapping another) keeps
/// a `_` arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Next {
    /// More input: call [`Handler::on_ready`] again when bytes arrive (queued output is sent
    /// meanwhile).
    Read,
    /// Queued output must be sent first: call [`Handler::on_ready`] again once it all has been
    /// (used for backpressure on pipelined requests and large responses).
    Drain,
    /// Send what is queued, then close: the FIN follows the last byte at once. If input the
    /// handler has not consumed is already buffered, late input is discarded for the linger
    /// time first (as with [`Next::Linger`]), so closing does not reset the response away.
    Close,
    /// Like [`Next::Close`], but always shut down the sending side and discard what the peer
    /// still sends for the linger time: for a connection whose request body was not read, which
    /// may still be arriving.
    Linger,
    /// Close at once, dropping queued output.
    Abort,
    /// Send what is queued but read nothing more and make no call until another connection
    /// of the worker wakes this one ([`Io::wake`]) or its deadline passes: for a connection
    /// whose input must wait, such as a source whose destination takes no more
    /// (backpressure). Input that arrives meanwhile stays in the socket, so the peer is slowed
    /// down by TCP itself.
    Wait,
}

/// Why a connection ended, for the handler's bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseReason {
    /// The handler asked for it ([`Next::Close`] or [`Next::Abort`]).
    Done,
    /// The peer closed or reset the connection.
    PeerGone,
    /// The peer accepted no output for the send timeout.
    SendTimeout,
    /// A file ended before the length that was promised for it.
    FileShrunk,
    /// A socket error.
    Error,
    /// The server is shutting down.
    Shutdown,
    /// An outgoing connection ([`Io::connect`]) ended before a byte moved either way: the
    /// connect failed (refused, unreachable, timed out), or the peer closed it at once.
    ConnectFailed,
}

/// What a handler sees of one connection during a call.
pub struct Io<'a> {
    /// Bytes received and not yet consumed.
    pub(crate) input: &'a mut Input,
    /// Bytes queued for sending.
    pub(crate) output: &'a mut Output,
    /// The worker's buffer pool, lent to [`Output::write_with`].
    pub(crate) pool: &'a mut BufferPool,
    /// The peer has finished sending (nothing more will arrive).
    pub(crate) eof: bool,
    /// The time of this loop iteration.
    pub(crate) now: Instant,
    /// When [`Handler::on_timeout`] should be called; `None` for never.
    pub(crate) deadline: &'a mut Option<Instant>,
    /// The server is stopping gracefully: finish what has begun (the request being read, the
    /// response being sent) and then close, taking no further requests.
    pub(crate) draining: bool,
    /// This connection's name in its worker.
    pub(crate) me: Token,
    /// The connection's socket, lent for the call ([`Io::socket`]).
    pub(crate) fd: RawFd,
    /// What the handler asks of the worker beyond this connection, carried out after the call.
    pub(crate) requests: &'a mut Requests,
    /// The connections linked to this one ([`Io::connect_linked`]).
    pub(crate) links: &'a mut Vec<LinkEntry>,
    /// The worker's other connections, for the linked ones, and its slot names.
    pub(crate) reach: Reach<'a>,
    /// The worker's idle linked connections.
    pub(crate) idle: &'a mut IdlePool,
    /// The loop can splice bodies between linked connections.
    pub(crate) can_splice: bool,
    /// What the connection's transport agreed, for one under a transport.
    pub(crate) transport: Option<&'a TransportInfo>,
}

/// What [`Io::parts`] lends: the parts of a connection that a call may need at once.
#[non_exhaustive]
pub struct IoParts<'b> {
    /// Bytes received and not yet consumed.
    pub input: &'b mut Input,
    /// Bytes queued for sending.
    pub output: &'b mut Output,
    /// The worker's buffer pool.
    pub pool: &'b mut BufferPool,
    /// When [`Handler::on_timeout`] should be called ([`Io::set_deadline`]).
    pub deadline: &'b mut Option<Instant>,
}

/// A connection of the worker, named by [`Io::me`]: what a service keeps to write to it or
/// wake it from another connection's call. A `ConnRef` outliving its connection names nothing:
/// waking it does nothing, even once its slot serves a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnRef(pub(crate) Token);

impl ConnRef {
    /// A name made up from numbers, for tests of code that keeps `ConnRef`s; it names no
    /// connection a worker would wake unless one happens to have these numbers.
    #[doc(hidden)]
    pub fn from_raw(index: u32, generation: u32) -> Self {
        ConnRef(Token::new(index as usize, generation))
    }
}

/// What handlers asked of their worker during calls: connections to wake and outgoing
/// connections to open. The loop carries them out once the current events are handled, so a
/// burst of events that all write to one destination wakes it once.
/// Starts the connect of an outgoing connection to an address.
pub(crate) type Connector = fn(&UpstreamAddr) -> io::Result<OwnedFd>;

pub(crate) struct Requests {
    pub(crate) woken: Vec<Token>,
    pub(crate) outgoing: Vec<Outgoing>,
    /// Linked connections a call reached ([`Io::linked`]): moved on after it.
    pub(crate) touched: Vec<Token>,
    /// Linked connections let go of and not fit for reuse: closed after the call.
    pub(crate) to_close: Vec<Token>,
    /// The join the call asked for ([`Io::join`]).
    pub(crate) join: Option<JoinRequest>,
    /// How an outgoing connection's connect starts: a socket and a non-blocking connect, or
    /// for an engine over memory, a stand-in descriptor.
    pub(crate) connector: Connector,
    /// Kept for its allocation: the wakes already taken in [`Requests::take_woken`].
    seen: std::collections::HashSet<Token>,
}

impl Default for Requests {
    fn default() -> Self {
        Requests {
            woken: Vec::new(),
            outgoing: Vec::new(),
            touched: Vec::new(),
            to_close: Vec::new(),
            join: None,
            connector: |addr| start_connect(addr).map(|(fd, _)| fd),
            seen: Default::default(),
        }
    }
}

impl Requests {
    pub(crate) fn is_empty(&self) -> bool {
        self.woken.is_empty() && self.outgoing.is_empty()
    }

    /// The connections woken since the last time, each once, in the order they were first
    /// woken: a relay wakes its waiting sources longest-waiting first, and that order is what
    /// keeps one source from starving the others.
    pub(crate) fn take_woken(&mut self) -> Vec<Token> {
        let mut woken = std::mem::take(&mut self.woken);
        match woken.len() {
            0 | 1 => {}
            // The usual few (a client woken by its backend connection's news): compared
            // with the ones kept before them, cheaper than hashing.
            2..=SMALL_WAKES => {
                let mut kept = 0;
                for i in 0..woken.len() {
                    let token = woken[i];
                    if !woken[..kept].contains(&token) {
                        woken[kept] = token;
                        kept += 1;
                    }
                }
                woken.truncate(kept);
            }
            _ => {
                self.seen.clear();
                woken.retain(|token| self.seen.insert(*token));
            }
        }
        woken
    }
}

/// Wakes deduplicated by comparing each with those before it; more go through a set.
const SMALL_WAKES: usize = 16;

/// A join of the calling connection with one of its linked connections.
pub(crate) struct JoinRequest {
    pub(crate) partner: Token,
    pub(crate) idle: Duration,
    pub(crate) carrier: Option<Box<dyn Carrier>>,
}

/// An outgoing connection whose connect is under way, to be opened as a connection of the
/// worker: its link is made at once, so that an owner can queue bytes for it in the call
/// that opened it.
pub(crate) struct Outgoing {
    pub(crate) link: Box<Link>,
    pub(crate) opened: Opened,
    /// Where it goes.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) addr: UpstreamAddr,
    /// The slot reserved for a linked connection (whose owner has its name already).
    pub(crate) token: Option<Token>,
}

impl Io<'_> {
    /// Bytes received and not yet consumed.
    pub fn input(&self) -> &Input {
        self.input
    }

    /// Bytes received and not yet consumed, to [`Input::consume`] what the service takes.
    pub fn input_mut(&mut self) -> &mut Input {
        self.input
    }

    /// Bytes queued for sending. To queue inline bytes, [`Io::write`] and [`Io::write_with`]
    /// lend the worker's buffer pool themselves.
    pub fn output(&self) -> &Output {
        self.output
    }

    /// Bytes queued for sending, to queue shared buffers and file ranges; the [`Output`]
    /// methods that also take the buffer pool have [`Io::output_and_pool`].
    pub fn output_mut(&mut self) -> &mut Output {
        self.output
    }

    /// The worker's buffer pool, for [`Output`]'s and [`Input`]'s methods that take one.
    pub fn pool(&mut self) -> &mut BufferPool {
        self.pool
    }

    /// The output and the buffer pool at once, for the [`Output`] methods that take the pool
    /// ([`Output::append_vec`], [`Output::clear`]...).
    pub fn output_and_pool(&mut self) -> (&mut Output, &mut BufferPool) {
        (self.output, self.pool)
    }

    /// The connection's buffers lent at once, for code that works on several of them
    /// together (relaying input to output). [`Io::linked`] lends a linked connection's
    /// buffers beside this one's.
    pub fn parts(&mut self) -> IoParts<'_> {
        IoParts {
            input: self.input,
            output: self.output,
            pool: self.pool,
            deadline: self.deadline,
        }
    }

    /// Whether the peer has finished sending (nothing more will arrive).
    pub fn eof(&self) -> bool {
        self.eof
    }

    /// The time of this loop iteration: cheaper than [`Instant::now`], and the clock the
    /// deadlines are checked against.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// When [`Handler::on_timeout`] will be called; `None` for never.
    pub fn deadline(&self) -> Option<Instant> {
        *self.deadline
    }

    /// Sets (or with `None` clears) when [`Handler::on_timeout`] is called. Every connection
    /// should have one while it waits on its peer: a connection without a deadline may stay
    /// open for ever if its peer goes silent.
    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        *self.deadline = deadline;
    }

    /// Whether the server is stopping gracefully: finish what has begun (the request being
    /// read, the response being sent) and then close, taking no further requests.
    pub fn draining(&self) -> bool {
        self.draining
    }

    /// Queues inline bytes.
    pub fn write(&mut self, bytes: &[u8]) {
        self.output
            .write_with(self.pool, |buf| buf.extend_from_slice(bytes));
    }

    /// Queues inline bytes produced by `write`.
    pub fn write_with<R>(&mut self, write: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        self.output.write_with(self.pool, write)
    }

    /// The connection's socket, for socket options and for handing its bytes to the kernel
    /// (a sockmap). The driver keeps owning it: reading, writing or closing it behind the
    /// driver's back breaks the connection.
    pub fn socket(&self) -> BorrowedFd<'_> {
        // SAFETY: the driver keeps the descriptor open for as long as this call lasts.
        unsafe { BorrowedFd::borrow_raw(self.fd) }
    }

    /// This connection's name, to wake it from another connection's call.
    pub fn me(&self) -> ConnRef {
        ConnRef(self.me)
    }

    /// The worker this connection runs on: to wake its other connections or open outgoing
    /// ones ([`Io::wake`] and [`Io::connect`] are short for the same).
    pub fn worker(&mut self) -> Worker<'_> {
        Worker {
            requests: self.requests,
        }
    }

    /// Wakes connection `other` of this worker: see [`Worker::wake`].
    pub fn wake(&mut self, other: ConnRef) {
        self.worker().wake(other);
    }

    /// Opens an outgoing connection: see [`Worker::connect`].
    pub fn connect(&mut self, addr: impl Into<UpstreamAddr>, tag: u64) -> io::Result<()> {
        self.worker().connect(addr, tag)
    }

    /// Opens a connection to `addr` linked to this one (see the `linked` module of this
    /// crate): its events wake this connection, whose calls reach it with [`Io::linked`]. With
    /// `pool`, an idle connection released under the same key is taken if there is one (no
    /// system call: it is ready at once, [`Linked::reused`] says so), and a released one goes
    /// back there ([`Io::release`]). Otherwise the connect starts now; bytes queued meanwhile
    /// go once it has completed, and a connect that fails closes it with
    /// [`CloseReason::ConnectFailed`]. An error here means no connection was started (no
    /// descriptor left, an address that cannot be used).
    pub fn connect_linked(
        &mut self,
        addr: impl Into<UpstreamAddr>,
        pool: Option<PoolKey>,
    ) -> io::Result<ConnRef> {
        if let Some(pool) = pool {
            while let Some(token) = self.idle.take(pool.key) {
                let Some(link) = self.reach.link(token, self.me) else {
                    continue;
                };
                if link.state != State::Idle {
                    continue;
                }
                link.state = State::Reading;
                link.deadline = None;
                // The last exchange's splice outcomes and asks are not this one's.
                *link.side() = LinkedSide {
                    owner: Some(self.me),
                    pool: Some(pool),
                    reused: true,
                    splices: None,
                    wake_when_sent: false,
                };
                self.links.push(LinkEntry::new(token));
                self.requests.touched.push(token);
                return Ok(ConnRef(token));
            }
        }
        let addr = addr.into();
        let fd = (self.requests.connector)(&addr)?;
        let peer = match addr {
            UpstreamAddr::Tcp(addr) => addr,
            UpstreamAddr::Unix(_) => crate::common::UNKNOWN_PEER,
        };
        let token = self.reach.ids.reserve();
        let mut link = Box::new(Link::new(fd));
        *link.side() = LinkedSide {
            owner: Some(self.me),
            pool,
            ..LinkedSide::default()
        };
        link.counted = false;
        self.requests.outgoing.push(Outgoing {
            link,
            addr,
            opened: Opened {
                peer,
                origin: Origin::Linked {
                    owner: ConnRef(self.me),
                },
            },
            token: Some(token),
        });
        self.links.push(LinkEntry::new(token));
        Ok(ConnRef(token))
    }

    /// The linked connection `conn` ([`Io::connect_linked`]), lent with this connection's
    /// own buffers, to take its input and queue its output during this call; what is queued
    /// is sent once the call is over. `Err` with why it closed once it has (then
    /// [`Io::release`] forgets it), or [`CloseReason::Done`] for one this connection does not
    /// hold.
    pub fn linked(&mut self, conn: ConnRef) -> Result<Linked<'_>, CloseReason> {
        let token = conn.0;
        let Some(at) = self.links.iter().position(|entry| entry.token == token) else {
            return Err(CloseReason::Done);
        };
        let entry = &mut self.links[at];
        if let Some(reason) = entry.closed {
            return Err(reason);
        }
        let pending = self
            .requests
            .outgoing
            .iter_mut()
            .find(|outgoing| outgoing.token == Some(token));
        let (link, pending) = match pending {
            Some(outgoing) => (&mut *outgoing.link, true),
            None => {
                let Some(link) = self.reach.link(token, self.me) else {
                    return Err(CloseReason::Error);
                };
                if self.requests.touched.last() != Some(&token) {
                    self.requests.touched.push(token);
                }
                (link, false)
            }
        };
        let eof = link.eof;
        let side = link.side.get_or_insert_with(Box::default);
        Ok(Linked {
            input: &mut link.input,
            output: &mut link.output,
            own_input: self.input,
            own_output: self.output,
            pool: self.pool,
            eof,
            reused: side.reused,
            token,
            pending,
            splices: &mut side.splices,
            wake_when_sent: &mut side.wake_when_sent,
            entry,
            can_splice: self.can_splice,
        })
    }

    /// What the connection's transport (TLS) agreed, for a connection accepted on a
    /// listener that has one; `None` for a plain connection.
    pub fn transport(&self) -> Option<&TransportInfo> {
        self.transport
    }

    /// This call's view for the handler of a connection under a transport: the plaintext
    /// buffers in place of the wire's, no body splices and no join (the bytes must pass
    /// through the transport), the rest shared.
    pub(crate) fn layered<'b>(
        &'b mut self,
        input: &'b mut Input,
        output: &'b mut Output,
        transport: &'b TransportInfo,
        eof: bool,
    ) -> Io<'b> {
        let mut io = self.narrowed(input, output, None, eof);
        io.transport = Some(transport);
        io
    }

    /// This call's view for one of several exchanges a protocol carries on this connection
    /// (an HTTP/2 stream): `input`, `output`, `deadline` and `eof` are the exchange's own,
    /// while its linked connections, the worker and the transport are the connection's.
    /// Bodies are not spliced and nothing is joined: the bytes must pass through the
    /// protocol's framing (a join asked for in the lent view is dropped, see
    /// [`Io::take_join`]).
    pub fn lend<'b>(
        &'b mut self,
        input: &'b mut Input,
        output: &'b mut Output,
        deadline: &'b mut Option<Instant>,
        eof: bool,
    ) -> Io<'b> {
        self.narrowed(input, output, Some(deadline), eof)
    }

    /// This call's view with other buffers (and deadline, if given), which cannot splice:
    /// what [`Io::layered`] and [`Io::lend`] have in common.
    fn narrowed<'b>(
        &'b mut self,
        input: &'b mut Input,
        output: &'b mut Output,
        deadline: Option<&'b mut Option<Instant>>,
        eof: bool,
    ) -> Io<'b> {
        Io {
            input,
            output,
            pool: self.pool,
            eof,
            now: self.now,
            deadline: match deadline {
                Some(deadline) => deadline,
                None => self.deadline,
            },
            draining: self.draining,
            me: self.me,
            fd: self.fd,
            requests: self.requests,
            links: self.links,
            reach: self.reach.reborrow(),
            idle: self.idle,
            can_splice: false,
            transport: self.transport,
        }
    }

    /// Drops a join asked for during this call, saying whether there was one: for a caller
    /// that lent this connection to an exchange ([`Io::lend`]) which must not join it.
    pub fn take_join(&mut self) -> bool {
        self.requests.join.take().is_some()
    }

    /// Whether this loop can splice bodies between linked connections
    /// ([`Linked::splice_in`], [`Linked::splice_out`]). Where it cannot (the io_uring loop,
    /// whose receives take the bytes as they arrive), handlers copy instead. [`Io::join`]
    /// works on every loop.
    pub fn can_splice(&self) -> bool {
        self.can_splice
    }

    /// Joins this connection and the linked connection `conn` for good, after the call:
    /// bytes queued on either side are sent first, then everything either side sends goes
    /// to the other through kernel pipes (splice), each end of stream is passed on, and both
    /// close when both directions have ended, either side fails, or nothing moves for
    /// `idle`. Neither is called again except [`Handler::on_close`]; unconsumed input of
    /// either goes to the other. A connection that cannot be joined (gone, not opened yet)
    /// is aborted.
    pub fn join(&mut self, conn: ConnRef, idle: Duration) {
        self.requests.join = Some(JoinRequest {
            partner: conn.0,
            idle,
            carrier: None,
        });
    }

    /// As [`Io::join`], but the bytes are moved by `carrier` (see [`Carrier`]) once what user
    /// space holds for either side has been sent, if nothing waits unread in either socket
    /// then and the carrier takes them; otherwise through pipes as `join` does.
    pub fn join_carried(&mut self, conn: ConnRef, idle: Duration, carrier: Box<dyn Carrier>) {
        self.requests.join = Some(JoinRequest {
            partner: conn.0,
            idle,
            carrier: Some(carrier),
        });
    }

    /// The connections linked to this one, open or closed, that it has not let go of.
    pub fn links(&self) -> impl Iterator<Item = ConnRef> + '_ {
        self.links.iter().map(|entry| ConnRef(entry.token))
    }

    /// Lets go of the linked connection `conn`: with `reuse`, if it was opened with a pool key
    /// and holds nothing unread or unsent (its peer may send nothing unasked), it goes to the
    /// worker's idle connections for the next [`Io::connect_linked`] under that key, at once
    /// (the next request of this very call may take it); otherwise it is closed after the
    /// call. A connection that has closed is forgotten.
    pub fn release(&mut self, conn: ConnRef, reuse: bool) {
        let token = conn.0;
        let Some(at) = self.links.iter().position(|entry| entry.token == token) else {
            return;
        };
        let entry = self.links.swap_remove(at);
        if entry.closed.is_some() {
            return;
        }
        if let Some(at) = self
            .requests
            .outgoing
            .iter()
            .position(|outgoing| outgoing.token == Some(token))
        {
            // Not opened yet: dropping it closes its descriptor.
            self.requests.outgoing.swap_remove(at);
            self.reach.ids.unreserve(token);
            return;
        }
        let draining = self.draining;
        let now = self.now;
        let Some(link) = self.reach.link(token, self.me) else {
            return;
        };
        let pool = link
            .side
            .as_ref()
            .and_then(|side| side.pool)
            .filter(|_| reuse && !draining && link.fit_for_reuse());
        if let Some(pool) = pool {
            if self.idle.put(pool.key, token) {
                link.state = State::Idle;
                link.side().owner = None;
                link.deadline = Some(now + pool.idle);
                return;
            }
        }
        self.requests.to_close.push(token);
    }
}

/// The worker a handler runs on, as far as one connection's call may reach beyond its own
/// connection: given in every [`Io`] ([`Io::worker`]) and to [`Handler::on_close`] and
/// [`Handler::on_tick`]. What is asked here is carried out once the call returns.
pub struct Worker<'a> {
    pub(crate) requests: &'a mut Requests,
}

impl Worker<'_> {
    /// Asks for [`Handler::on_ready`] to be called for connection `other` of this worker once
    /// the events at hand are handled (once, however often it was woken meanwhile): how a
    /// service hands work from one connection to another (a message for a destination queued
    /// in the service's state, a source that may read again). Also ends a [`Next::Wait`]. A
    /// connection that is gone, closing or joined is not called.
    pub fn wake(&mut self, other: ConnRef) {
        self.requests.woken.push(other.0);
    }

    /// Opens an outgoing connection to `addr` (TCP, or a Unix stream socket) on this worker. The connect is started
    /// now; after this call the connection is opened like an accepted one, with
    /// [`Handler::on_open`] (its [`Opened::origin`] is [`Origin::Outgoing`] with `tag`, for the
    /// service to know what it is for). What the service writes in `on_open` is sent once the
    /// connect completes; a connect that fails ends the connection with
    /// [`CloseReason::ConnectFailed`]. An error here means no connection was started (no
    /// descriptor left, an address that cannot be used): `on_open` will not be called.
    pub fn connect(&mut self, addr: impl Into<UpstreamAddr>, tag: u64) -> io::Result<()> {
        let addr = addr.into();
        let fd = (self.requests.connector)(&addr)?;
        let peer = match addr {
            UpstreamAddr::Tcp(addr) => addr,
            UpstreamAddr::Unix(_) => crate::common::UNKNOWN_PEER,
        };
        self.requests.outgoing.push(Outgoing {
            link: Box::new(Link::new(fd)),
            addr,
            opened: Opened {
                peer,
                origin: Origin::Outgoing { tag },
            },
            token: None,
        });
        Ok(())
    }
}

/// Where a new connection came from, given to [`Handler::on_open`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Opened {
    peer: SocketAddr,
    origin: Origin,
}

/// How a connection came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// Accepted on the listening address of this index, in the order the addresses were given
    /// to [`crate::bind_listeners`].
    Accepted {
        /// The listener's index.
        listener: usize,
    },
    /// Opened by the service with [`Io::connect`], under the tag it gave.
    Outgoing {
        /// The service's tag.
        tag: u64,
    },
    /// Opened by connection `owner` with [`Io::connect_linked`]: it serves that connection,
    /// whose calls handle its events (see [`Io::linked`]).
    Linked {
        /// The connection that opened it.
        owner: ConnRef,
    },
}

impl Opened {
    pub(crate) fn new(peer: SocketAddr, listener: usize) -> Self {
        Opened {
            peer,
            origin: Origin::Accepted { listener },
        }
    }

    /// The same connection with `peer` as its peer: the client a PROXY protocol header
    /// names.
    pub(crate) fn with_peer(self, peer: SocketAddr) -> Opened {
        Opened { peer, ..self }
    }

    /// The peer's address (`0.0.0.0:0` when the kernel reported none); for an outgoing
    /// connection, the address it was opened to.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// How the connection came to be.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// The index of the listening address an accepted connection came in on, in the order the
    /// addresses were given to [`crate::bind_listeners`]; `None` for an outgoing one.
    pub fn listener(&self) -> Option<usize> {
        match self.origin {
            Origin::Accepted { listener } => Some(listener),
            Origin::Outgoing { .. } | Origin::Linked { .. } => None,
        }
    }

    /// Whether the service opened this connection ([`Io::connect`], [`Io::connect_linked`]).
    pub fn is_outgoing(&self) -> bool {
        matches!(self.origin, Origin::Outgoing { .. } | Origin::Linked { .. })
    }
}

/// The protocol side of a server: one value per worker, holding one `Conn` per connection.
pub trait Handler {
    /// Per-connection protocol state.
    type Conn;

    /// A connection was accepted from the listener `opened` names. `io` has no input yet
    /// (it may well be waiting in the socket: it comes with the first [`Handler::on_ready`]);
    /// what the handler writes is sent at once (a greeting), and it should set
    /// [`Io::set_deadline`]: a connection without a deadline may stay open for ever if its peer
    /// never sends a byte. The returned [`Next`] is applied as after any call, so a service
    /// can also refuse a connection with a message and [`Next::Close`].
    fn on_open(&mut self, opened: Opened, io: &mut Io<'_>) -> (Self::Conn, Next);

    /// New input arrived (or end of input), or the output drained after [`Next::Drain`].
    fn on_ready(&mut self, conn: &mut Self::Conn, io: &mut Io<'_>) -> Next;

    /// The deadline set with [`Io::set_deadline`] has passed.
    fn on_timeout(&mut self, conn: &mut Self::Conn, io: &mut Io<'_>) -> Next;

    /// The connection is closing, whatever the reason; `sent` is how many bytes of its output
    /// were handed to the kernel over its life ([`Output::sent`]: output still queued, which
    /// is now dropped, does not count). Called just before [`Handler::on_close`], for a
    /// service that accounts for what a response cut short (the peer gone, the send timeout,
    /// a stop past its grace period) really delivered.
    fn on_closing(&mut self, _conn: &mut Self::Conn, _sent: u64) {}

    /// The connection is gone. `worker` lets a service wake the connections that waited on
    /// this one, or open a replacement.
    fn on_close(&mut self, conn: Self::Conn, reason: CloseReason, worker: &mut Worker<'_>);

    /// The server has begun a graceful stop (see the module doc); called once for each
    /// connection open then, with [`Io::draining`] set. `None` lets the connection go on as it
    /// was (the next call sees [`Io::draining`] too), `Some(next)` is applied like any other
    /// answer: [`Next::Close`] for a connection idle between requests. The default carries
    /// on, so a service that ignores draining still has its connections ended by the grace
    /// period.
    fn on_drain(&mut self, _conn: &mut Self::Conn, _io: &mut Io<'_>) -> Option<Next> {
        None
    }

    /// Called every [`crate::TICK`] or so (flush logs, refresh clocks, retry what failed).
    fn on_tick(&mut self, _now: Instant, _worker: &mut Worker<'_>) {}

    /// Called once when the worker stops.
    fn on_stop(&mut self) {}

    /// Bytes sent to a connection of listener `listener` (see [`Opened::listener`]) refused
    /// because the connection limit is reached, before it is closed.
    fn refusal(&self, _listener: usize) -> &[u8] {
        b""
    }
}
