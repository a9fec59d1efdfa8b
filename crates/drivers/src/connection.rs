//! The connection engine every event loop shares: what the driver keeps for one connection
//! (a [`Link`]), the states it moves through, how a handler's [`Next`] moves it, the closing
//! rule, the deadline rule of the tick sweep, and the calls into the handler ([`Parts`]). The
//! steps built on these, the same for every loop, are the provided methods of
//! [`crate::loops::Engine`].
//!
//! A loop (epoll readiness or io_uring completions) decides only *when* bytes can move and
//! moves them; *what happens next* to a connection is decided here, once, so that every model
//! treats a handler the same way and a new rule is one edit.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::Instant;

use fastpath_sys::syscall;

use crate::buffers::{BufferPool, Input, Output};
use crate::linked::{LinkEntry, PoolKey, Reach, Splices};
use crate::loops::Core;
use crate::slab::Token;
use crate::{CloseReason, Handler, Io, Next, Opened, Worker};

/// Where a connection is in its life, as far as the driver is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Waiting for input; queued output is sent meanwhile.
    Reading,
    /// Waiting for queued output to drain before the handler is called again.
    Draining,
    /// Sending the last output; then closed, or shut down for writing and lingering.
    Closing,
    /// Shut down for writing; late input is read and dropped until the peer's end or the
    /// linger time, so that closing does not reset the response away.
    Lingering,
    /// Joined with another connection in the kernel ([`crate::Io::join`]): the owner carries
    /// the joint, and its partner (a linked connection) is moved with it.
    Joined,
    /// Reading nothing and making no call until woken ([`Next::Wait`]); queued output is sent.
    Waiting,
    /// A linked connection released for reuse, in the worker's pool: nothing is expected on
    /// it, so anything that arrives (bytes, an end) closes it, as does its idle deadline.
    Idle,
}

/// The driver's half of one connection: everything but the handler's own state.
pub(crate) struct Link {
    pub(crate) fd: OwnedFd,
    pub(crate) input: Input,
    pub(crate) output: Output,
    pub(crate) state: State,
    /// When the handler's [`Handler::on_timeout`] is due (set through [`Io::set_deadline`]).
    pub(crate) deadline: Option<Instant>,
    /// When queued output that makes no progress ends the connection.
    pub(crate) send_deadline: Option<Instant>,
    /// The peer has finished sending.
    pub(crate) eof: bool,
    /// Discard late input before closing even if none is buffered ([`Next::Linger`]).
    pub(crate) linger: bool,
    /// The handler has heard of the graceful stop ([`Handler::on_drain`]), or the connection
    /// was opened after it began.
    pub(crate) drain_told: bool,
    /// The service opened this connection ([`Io::connect`]).
    pub(crate) outgoing: bool,
    /// The connections linked to this one.
    pub(crate) links: Vec<LinkEntry>,
    /// Counted against the connection limit (linked connections are not: they are the
    /// clients' own, and a client refused for its backend's connection would be wrong).
    pub(crate) counted: bool,
    /// What a linked connection is to its owner and the idle pool; boxed, as most
    /// connections are not linked and every connection's state is kept small.
    pub(crate) side: Option<Box<LinkedSide>>,
}

/// What a linked connection ([`Io::connect_linked`]) is to its owner and to the idle pool.
#[derive(Default)]
pub(crate) struct LinkedSide {
    /// The connection this one is linked to; `None` for an idle one.
    pub(crate) owner: Option<Token>,
    /// Where it goes when released for reuse.
    pub(crate) pool: Option<PoolKey>,
    /// Taken from the idle pool: it carried an earlier exchange.
    pub(crate) reused: bool,
    /// Body splices with its owner.
    pub(crate) splices: Option<Box<Splices>>,
    /// The owner asked to be woken once its output has all been sent
    /// ([`crate::Linked::wake_when_sent`]).
    pub(crate) wake_when_sent: bool,
}

/// What the tick sweep does with a connection whose deadline has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// End the connection.
    Close(CloseReason),
    /// Call the handler's `on_timeout`.
    CallTimeout,
    /// A joined connection's deadline: the loop asks its joint (a carried one may still be
    /// busy, or due a recheck), else ends it.
    Joint,
}

/// What the closing rule decided once a closing connection's output has all been sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closing {
    /// Close now: the FIN goes right behind the last byte.
    Now,
    /// Shut down for writing and now lingering (see [`State::Lingering`]).
    Lingering,
}

impl Link {
    #[inline]
    pub(crate) fn new(fd: OwnedFd) -> Self {
        Link {
            fd,
            input: Input::default(),
            output: Output::default(),
            state: State::Reading,
            deadline: None,
            send_deadline: None,
            eof: false,
            linger: false,
            drain_told: false,
            outgoing: false,
            links: Vec::new(),
            counted: true,
            side: None,
        }
    }

    /// The connection this one is linked to ([`Io::connect_linked`]); `None` for one that
    /// serves itself, or an idle linked one.
    #[inline]
    pub(crate) fn owner(&self) -> Option<Token> {
        self.side.as_ref().and_then(|side| side.owner)
    }

    /// What this connection is as a linked one, made on first use.
    pub(crate) fn side(&mut self) -> &mut LinkedSide {
        self.side.get_or_insert_with(Box::default)
    }

    /// Its body splices with its owner, if any were made.
    pub(crate) fn splices(&self) -> Option<&Splices> {
        self.side.as_ref()?.splices.as_deref()
    }

    /// As [`Link::splices`], to change them.
    pub(crate) fn splices_mut(&mut self) -> Option<&mut Splices> {
        self.side.as_mut()?.splices.as_deref_mut()
    }

    /// Everything queued has been sent: no send deadline, and the owner of a linked
    /// connection (not joined: a joint moves its bytes) hears of it if it asked to. Most
    /// owners do not: a proxy's request head gone to a kept backend connection is no news
    /// until the response arrives, and waking it for nothing costs a call per request.
    pub(crate) fn output_sent(&mut self, woken: &mut Vec<Token>) {
        self.send_deadline = None;
        let asked = self
            .side
            .as_mut()
            .is_some_and(|side| std::mem::take(&mut side.wake_when_sent));
        if asked {
            if let Some(owner) = self.owner().filter(|_| self.state != State::Joined) {
                woken.push(owner);
            }
        }
    }

    /// A linked connection that may go back to the idle pool: connected, its exchange
    /// finished on both sides (nothing unread or unsent), its peer still there.
    pub(crate) fn fit_for_reuse(&self) -> bool {
        self.state == State::Reading
            && !self.eof
            && self.input.is_empty()
            && self.output.is_empty()
            && self.splices().is_none_or(|splices| splices.idle())
            && (self.output.sent() > 0 || self.input.ever_received())
    }

    /// What the handler sees of this connection in a call.
    pub(crate) fn io<'a>(
        &'a mut self,
        core: &'a mut Core<'_>,
        reach: Reach<'a>,
        me: Token,
        draining: bool,
    ) -> Io<'a> {
        let now = core.now;
        Io {
            me,
            fd: self.fd.as_raw_fd(),
            requests: &mut core.requests,
            idle: &mut core.idle,
            links: &mut self.links,
            reach,
            can_splice: core.can_splice,
            pool: &mut core.pool,
            input: &mut self.input,
            output: &mut self.output,
            eof: self.eof,
            now,
            deadline: &mut self.deadline,
            draining,
            transport: None,
        }
    }

    /// Records what the handler asked for; false for [`Next::Abort`], which the caller carries
    /// out by closing the connection. A joined connection stays joined whatever it asked,
    /// until the joint ends.
    pub(crate) fn apply(&mut self, next: Next, joined: bool) -> bool {
        if self.owner().is_some() {
            // A linked connection's state is its owner's to change (release, join).
            return true;
        }
        self.state = match next {
            Next::Abort => return false,
            _ if joined => State::Joined,
            // Nothing more can arrive, so waiting for input would wait forever.
            Next::Read if self.eof => State::Closing,
            Next::Read => State::Reading,
            Next::Drain => State::Draining,
            Next::Wait => State::Waiting,
            Next::Close => State::Closing,
            Next::Linger => {
                self.linger = true;
                State::Closing
            }
        };
        true
    }

    /// The closing rule, once a closing connection's output has all been sent. Nothing unread
    /// and nothing more expected: close at once, the FIN right behind the last byte (as nginx
    /// does without a pending body). Otherwise shut the sending side down and linger, dropping
    /// what is unread. `input_waiting`: the loop knows of input not yet read from the socket.
    pub(crate) fn finish_closing(&mut self, core: &mut Core<'_>, input_waiting: bool) -> Closing {
        let quiet = !self.linger && self.input.is_empty() && !input_waiting;
        if self.eof || quiet {
            return Closing::Now;
        }
        let _ = syscall!(shutdown(self.fd.as_raw_fd(), libc::SHUT_WR));
        self.state = State::Lingering;
        self.deadline = Some(core.now + core.config.linger_timeout);
        self.drop_input(&mut core.pool);
        Closing::Lingering
    }

    /// The deadline rule of every sweep: the send deadline counts only while output is queued
    /// and wins over the handler's deadline; each is due once `now` has reached it. A lingering
    /// or joined connection whose time is up ends; a closing one waits for its output (and
    /// its send deadline); a reading or draining one gets `on_timeout`, unless the loop cannot
    /// let the handler write now (`handler_busy`), in which case the next sweep tries again.
    pub(crate) fn expiry(&mut self, now: Instant, handler_busy: bool) -> Option<Expiry> {
        if self.send_deadline.is_some_and(|d| d <= now) && !self.output.is_empty() {
            return Some(Expiry::Close(CloseReason::SendTimeout));
        }
        if self.deadline.is_none_or(|d| d > now) {
            return None;
        }
        match self.state {
            State::Lingering | State::Idle => Some(Expiry::Close(CloseReason::Done)),
            State::Joined => {
                self.deadline = None;
                Some(Expiry::Joint)
            }
            State::Closing => {
                self.deadline = None;
                None
            }
            State::Reading | State::Draining | State::Waiting if handler_busy => None,
            State::Reading | State::Draining | State::Waiting => {
                self.deadline = None;
                Some(Expiry::CallTimeout)
            }
        }
    }

    /// Why the connection ends when the loop saw it end for `reason`: an outgoing connection
    /// over which no byte ever moved did not connect.
    pub(crate) fn close_reason(&self, reason: CloseReason) -> CloseReason {
        let silent = self.output.sent() == 0 && !self.input.ever_received();
        match reason {
            CloseReason::PeerGone | CloseReason::Error if self.outgoing && silent => {
                CloseReason::ConnectFailed
            }
            reason => reason,
        }
    }

    /// Whether the loop should call the handler for a wake ([`Io::wake`]): only while it waits
    /// on its peer or on a wake; a closing, lingering or joined connection has nothing more
    /// for the handler to decide. A waiting one reads again from now on.
    pub(crate) fn take_wake(&mut self) -> bool {
        if self.owner().is_some() {
            // Its owner is called for it instead.
            return false;
        }
        match self.state {
            State::Waiting => {
                self.state = State::Reading;
                true
            }
            State::Reading | State::Draining => true,
            State::Closing | State::Lingering | State::Joined | State::Idle => false,
        }
    }

    /// The joint is done (the partner's end has reached this connection's peer): the
    /// connection closes like any other, its late input discarded for the linger time so the
    /// answer is not reset away.
    pub(crate) fn unjoin(&mut self) {
        self.state = State::Closing;
        self.linger = true;
        self.deadline = None;
    }

    /// Gives back what a closed connection holds: its queued output and unread input to the
    /// pool.
    pub(crate) fn release(&mut self, core: &mut Core<'_>) {
        self.output.clear(&mut core.pool);
        self.drop_input(&mut core.pool);
    }

    /// Drops what the peer sent and the handler has not consumed.
    pub(crate) fn drop_input(&mut self, pool: &mut BufferPool) {
        let unread = self.input.len();
        self.input.consume(unread);
        self.input.release_if_empty(pool);
    }
}

/// What a closing connection leaves to settle beyond its slot (see
/// [`crate::loops::Engine::settle`]).
pub(crate) struct Departure {
    pub(crate) owner: Option<Token>,
    pub(crate) links: Vec<LinkEntry>,
    /// The pool key of an idle linked connection.
    pub(crate) idle_key: Option<u64>,
}

impl Link {
    /// Takes what [`Departure`] says from a closing connection.
    pub(crate) fn departure(&mut self) -> Departure {
        Departure {
            owner: self.owner(),
            links: std::mem::take(&mut self.links),
            idle_key: self
                .side
                .as_ref()
                .and_then(|side| side.pool)
                .filter(|_| self.state == State::Idle)
                .map(|pool| pool.key),
        }
    }
}

/// Builds a new connection's [`Link`] and calls the handler's `on_open` with it.
#[inline]
/// `token` is the slot the connection will be put in.
pub(crate) fn open<H: Handler>(
    handler: &mut H,
    mut link: Link,
    opened: Opened,
    core: &mut Core<'_>,
    reach: Reach<'_>,
    token: Token,
) -> (Link, H::Conn, Next) {
    link.drain_told = core.draining;
    link.outgoing = opened.is_outgoing();
    let draining = core.stopping();
    let (conn, next) = handler.on_open(opened, &mut link.io(core, reach, token, draining));
    link.input.release_if_empty(&mut core.pool);
    (link, conn, next)
}

/// One live connection of a loop as the shared engine works on it: the worker's handler and
/// [`Core`] with the connection's [`Link`] and handler state, borrowed together for one step
/// (see [`crate::loops::Engine::parts`]).
pub(crate) struct Parts<'w, 'a, H: Handler> {
    pub(crate) handler: &'w mut H,
    pub(crate) core: &'w mut Core<'a>,
    pub(crate) link: &'w mut Link,
    pub(crate) conn: &'w mut H::Conn,
    /// The loop's other connections, for the linked ones.
    pub(crate) reach: Reach<'w>,
    pub(crate) token: Token,
    /// The kernel is reading the connection's output (an io_uring send in flight): the
    /// handler, which may write, must not be called now.
    pub(crate) busy: bool,
    /// Joined with another connection: whatever the handler answers, it stays joined.
    pub(crate) joined: bool,
}

impl<'w, 'a, H: Handler> Parts<'w, 'a, H> {
    /// One connection's parts: its `link` and handler state, the handler and the core, the
    /// reach of the other connections; not busy, not joined until said.
    pub(crate) fn new(
        handler: &'w mut H,
        core: &'w mut Core<'a>,
        (link, conn): (&'w mut Link, &'w mut H::Conn),
        reach: Reach<'w>,
        token: Token,
    ) -> Self {
        Parts {
            handler,
            core,
            link,
            conn,
            reach,
            token,
            busy: false,
            joined: false,
        }
    }
}

impl<H: Handler> Parts<'_, '_, H> {
    /// Calls the handler's `on_ready` (or `on_timeout`), then gives an emptied input buffer
    /// back to the pool and notes a deadline the sweep would find late.
    #[inline]
    pub(crate) fn call(self, timeout: bool) -> Next {
        if let Some(owner) = self.link.owner() {
            // A linked connection's news is its owner's to handle.
            self.core.requests.woken.push(owner);
            return Next::Read;
        }
        // A connection told to drain on its own (an outgoing one whose client is gone, see
        // the epoll loop's `close_outgoing`) goes on seeing it.
        let draining = self.core.stopping() || self.link.drain_told;
        let mut io = self.link.io(self.core, self.reach, self.token, draining);
        let next = if timeout {
            self.handler.on_timeout(self.conn, &mut io)
        } else {
            self.handler.on_ready(self.conn, &mut io)
        };
        self.link.input.release_if_empty(&mut self.core.pool);
        self.core.note_deadline(self.token, self.link.deadline);
        next
    }

    /// Tells the handler of a graceful stop through its `on_drain`, once per connection, if
    /// the connection waits on its client (reading, draining or waiting: one that is closing
    /// or joined has no more for the handler to decide) and the handler may write now (not
    /// [`Parts::busy`]; a later sweep tries again). `None` when the handler was not called or
    /// leaves the connection as it is.
    pub(crate) fn drain(self) -> Option<Next> {
        if self.link.drain_told || self.busy || self.link.owner().is_some() {
            return None;
        }
        self.link.drain_told = true;
        if !matches!(
            self.link.state,
            State::Reading | State::Draining | State::Waiting
        ) {
            return None;
        }
        let next = self.handler.on_drain(
            self.conn,
            &mut self.link.io(self.core, self.reach, self.token, true),
        );
        self.link.input.release_if_empty(&mut self.core.pool);
        self.core.note_deadline(self.token, self.link.deadline);
        next
    }
}

/// The start of a connection's close: why it ends (see [`Link::close_reason`]), after the
/// handler has heard what its output delivered ([`Handler::on_closing`]).
pub(crate) fn closing<H: Handler>(
    handler: &mut H,
    conn: &mut H::Conn,
    link: &Link,
    reason: CloseReason,
) -> CloseReason {
    handler.on_closing(conn, link.output.sent());
    link.close_reason(reason)
}

/// The accounting of a closed connection, once the loop has let go of its sockets: the
/// handler hears why, and the connection no longer counts against the limit.
pub(crate) fn closed<H: Handler>(
    handler: &mut H,
    conn: H::Conn,
    reason: CloseReason,
    counted: bool,
    core: &mut Core<'_>,
) {
    let mut worker = Worker {
        requests: &mut core.requests,
    };
    handler.on_close(conn, reason, &mut worker);
    if counted {
        core.active.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    fn link() -> Link {
        // Any descriptor will do for the rules tested here; shutdown on it is never reached
        // where the test expects Closing::Now.
        let fd = syscall!(dup(0)).expect("dup");
        // SAFETY: dup returned a fresh descriptor that nothing else owns.
        Link::new(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Runs `f` with a worker's [`Core`] under the default configuration.
    fn with_core(f: impl FnOnce(&mut Core<'_>)) {
        let config = crate::DriverConfig::default();
        let (active, stop) = (
            std::sync::atomic::AtomicUsize::new(0),
            std::sync::atomic::AtomicBool::new(false),
        );
        let env = crate::loops::Env {
            config: &config,
            active: &active,
            stop: &stop,
        };
        f(&mut Core::new(env, BufferPool::default()));
    }

    /// A loop slot with no connection, for a reach that lends nothing.
    struct NoSlot;

    impl crate::linked::HasLink for NoSlot {
        fn link_mut(&mut self) -> Option<&mut Link> {
            None
        }
    }

    /// Counts `on_drain` calls and answers them with `answer`.
    struct Drained {
        calls: usize,
        answer: Option<Next>,
    }

    impl Handler for Drained {
        type Conn = ();
        fn on_open(&mut self, _: Opened, _: &mut Io<'_>) -> ((), Next) {
            ((), Next::Read)
        }
        fn on_ready(&mut self, _: &mut (), _: &mut Io<'_>) -> Next {
            Next::Read
        }
        fn on_timeout(&mut self, _: &mut (), _: &mut Io<'_>) -> Next {
            Next::Close
        }
        fn on_close(&mut self, _: (), _: CloseReason, _: &mut Worker<'_>) {}
        fn on_drain(&mut self, _: &mut (), io: &mut Io<'_>) -> Option<Next> {
            assert!(io.draining());
            self.calls += 1;
            self.answer
        }
    }

    #[test]
    fn a_connection_hears_of_a_graceful_stop_once_and_only_while_it_waits_on_its_client() {
        with_core(|core| {
            let token = Token::new(0, 0);
            let mut handler = Drained {
                calls: 0,
                answer: Some(Next::Close),
            };
            let mut slots = crate::slab::Slab::<NoSlot>::default();
            let mut drain = |handler: &mut Drained, link: &mut Link, busy: bool| {
                let (raw, ids) = slots.split();
                Parts {
                    handler,
                    core: &mut *core,
                    link,
                    conn: &mut (),
                    reach: Reach::new(raw, ids),
                    token,
                    busy,
                    joined: false,
                }
                .drain()
            };
            let mut l = link();
            assert_eq!(drain(&mut handler, &mut l, true), None, "busy: not now");
            assert_eq!(handler.calls, 0);
            assert_eq!(drain(&mut handler, &mut l, false), Some(Next::Close));
            assert_eq!(drain(&mut handler, &mut l, false), None, "told once");
            assert_eq!(handler.calls, 1);
            for state in [State::Closing, State::Lingering, State::Joined] {
                let mut l = link();
                l.state = state;
                assert_eq!(drain(&mut handler, &mut l, false), None);
            }
            assert_eq!(handler.calls, 1, "nothing to decide once closing or joined");
        });
    }

    #[test]
    fn read_after_the_peers_end_closes() {
        let mut l = link();
        assert!(l.apply(Next::Read, false));
        assert_eq!(l.state, State::Reading);
        l.eof = true;
        assert!(l.apply(Next::Read, false));
        assert_eq!(l.state, State::Closing);
        assert!(!l.apply(Next::Abort, false));
    }

    #[test]
    fn a_joined_connection_stays_joined() {
        let mut l = link();
        assert!(l.apply(Next::Close, true));
        assert_eq!(l.state, State::Joined);
        assert!(!l.apply(Next::Abort, true));
    }

    #[test]
    fn linger_is_remembered() {
        let mut l = link();
        assert!(l.apply(Next::Linger, false));
        assert_eq!(l.state, State::Closing);
        assert!(l.linger);
    }

    #[test]
    fn a_quiet_close_is_immediate() {
        with_core(|core| {
            let mut l = link();
            l.apply(Next::Close, false);
            assert_eq!(l.finish_closing(core, false), Closing::Now);
        });
    }

    #[test]
    fn the_send_deadline_counts_only_with_output_queued() {
        let now = Instant::now();
        let mut pool = BufferPool::default();
        let mut l = link();
        l.send_deadline = Some(now);
        assert_eq!(l.expiry(now, false), None);
        l.output
            .write_with(&mut pool, |buf| buf.extend_from_slice(b"x"));
        l.deadline = Some(now);
        assert_eq!(
            l.expiry(now, false),
            Some(Expiry::Close(CloseReason::SendTimeout))
        );
        l.send_deadline = Some(now + std::time::Duration::from_secs(1));
        assert_eq!(l.expiry(now, true), None, "the handler is busy: next sweep");
        assert_eq!(l.deadline, Some(now));
        assert_eq!(l.expiry(now, false), Some(Expiry::CallTimeout));
        assert_eq!(l.deadline, None);
        l.output.clear(&mut pool);
    }

    #[test]
    fn deadlines_end_lingering_connections_and_ask_joints() {
        let now = Instant::now();
        let mut l = link();
        l.state = State::Lingering;
        l.deadline = Some(now);
        assert_eq!(l.expiry(now, false), Some(Expiry::Close(CloseReason::Done)));
        let mut l = link();
        l.state = State::Joined;
        l.deadline = Some(now);
        assert_eq!(l.expiry(now, false), Some(Expiry::Joint));
        let mut l = link();
        l.state = State::Closing;
        l.deadline = Some(now);
        assert_eq!(l.expiry(now, false), None);
        assert_eq!(l.deadline, None);
    }
}
