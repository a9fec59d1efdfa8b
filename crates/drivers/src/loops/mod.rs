//! The event loops: how a worker learns that its connections can make progress. Each moves
//! bytes and completions and leaves what happens next to a connection to the shared engine
//! in `connection.rs`: the epoll loop waits for readiness and makes a system call per read and
//! per send; the io_uring loop asks for completed work and batches its requests.

pub(crate) mod epoll;
pub(crate) mod uring;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use crate::buffers::BufferPool;
use crate::common::AcceptPause;
use crate::connection::{self, Expiry, Link, Parts};
use crate::contract::{Outgoing, Requests};
use crate::slab::{Slab, Token};
use crate::upstream::UpstreamPort;
use crate::upstream::{UpstreamPool, IDLE_UPSTREAMS_PER_KEY};
use crate::{common, signals, CloseReason, DriverConfig, Handler, Listeners, Next, Opened, TICK};

/// What a worker shares with the other workers of its model.
#[derive(Clone, Copy)]
pub(crate) struct Env<'a> {
    pub(crate) config: &'a DriverConfig,
    /// Open connections across all workers, for the connection limit.
    pub(crate) active: &'a AtomicUsize,
    pub(crate) stop: &'a AtomicBool,
}

/// Rounds of wakes ([`crate::Io::wake`]) carried out before the loop looks at the kernel
/// again: wakes that wake others are followed a few steps, while a connection that keeps
/// waking itself (a service taking its turn in parts) cannot keep the loop from its events.
pub(crate) const WAKE_ROUNDS: usize = 4;

/// Runs the handler's [`Handler::on_tick`] with the worker's requests at hand.
pub(crate) fn tick_handler<H: Handler>(handler: &mut H, core: &mut Core<'_>, now: Instant) {
    let mut worker = crate::Worker {
        requests: &mut core.requests,
    };
    handler.on_tick(now, &mut worker);
}

/// What every loop's worker keeps besides its connections and its kernel interface.
pub(crate) struct Core<'a> {
    pub(crate) config: &'a DriverConfig,
    pub(crate) active: &'a AtomicUsize,
    pub(crate) stop: &'a AtomicBool,
    pub(crate) pool: BufferPool,
    /// The time of this loop iteration.
    pub(crate) now: Instant,
    pub(crate) accept_pause: AcceptPause,
    /// Idle upstream connections, kept for reuse.
    pub(crate) upstreams: UpstreamPool,
    /// When the tick work (the deadline sweep, [`Handler::on_tick`]) is due next.
    pub(crate) next_tick: Instant,
    /// Deadlines the sweep would find late: those due before the next tick, earliest first,
    /// with the slot they were set for. An entry outlives a deadline that was moved or a
    /// connection that closed; the slot's current deadline decides when it comes due.
    timers: BinaryHeap<Reverse<(Instant, usize, u32)>>,
    /// A graceful stop has begun in this worker ([`Core::drain_begins`]).
    pub(crate) draining: bool,
    /// When the grace period of a graceful stop is over.
    drain_deadline: Option<Instant>,
    /// What handlers asked of the worker beyond their own connection ([`crate::Io::wake`],
    /// [`crate::Io::connect`]), carried out by the loop after the events at hand.
    pub(crate) requests: Requests,
}

impl<'a> Core<'a> {
    pub(crate) fn new(env: Env<'a>, pool: BufferPool) -> Self {
        Core {
            config: env.config,
            active: env.active,
            stop: env.stop,
            pool,
            now: Instant::now(),
            accept_pause: AcceptPause::default(),
            upstreams: UpstreamPool::new(IDLE_UPSTREAMS_PER_KEY),
            next_tick: Instant::now() + TICK,
            timers: BinaryHeap::new(),
            draining: false,
            drain_deadline: None,
            requests: Requests::default(),
        }
    }

    /// True once, on the first look after a graceful stop was asked for ([`signals::DRAIN`]):
    /// the worker then stops accepting and tells its connections; the grace period starts.
    pub(crate) fn drain_begins(&mut self) -> bool {
        if self.draining || !signals::draining() {
            return false;
        }
        self.draining = true;
        self.drain_deadline = Some(Instant::now() + self.config.shutdown_timeout);
        crate::liveness::beat();
        true
    }

    /// Whether a graceful stop has been asked for, for what a handler is told: the flag itself
    /// and not only this worker's having begun, so that a request that arrives in the same
    /// turn as the signal is answered as the last one.
    pub(crate) fn stopping(&self) -> bool {
        self.draining || signals::draining()
    }

    /// Whether a graceful stop's grace period is over.
    pub(crate) fn grace_over(&self) -> bool {
        self.drain_deadline.is_some_and(|at| Instant::now() >= at)
    }

    /// Whether a draining worker with `open` connections is done: none is left, or the grace
    /// period is over (which is logged with the number it cuts off).
    pub(crate) fn drain_done(&self, open: usize) -> bool {
        if open > 0 && self.grace_over() {
            tracing::warn!(
                "shutdown grace period over: closing {open} connection{} still open",
                if open == 1 { "" } else { "s" }
            );
            return true;
        }
        open == 0
    }

    /// Notes the deadline a handler left on slot `token` if the sweep, every [`TICK`], would
    /// find it late: a service's short timer fires on time, while the usual long ones (header
    /// and keep-alive timeouts) cost one comparison.
    pub(crate) fn note_deadline(&mut self, token: Token, deadline: Option<Instant>) {
        if let Some(at) = deadline.filter(|&at| at < self.next_tick) {
            self.timers
                .push(Reverse((at, token.index, token.generation)));
        }
    }

    /// When the loop must be awake next: the next tick, or an earlier noted deadline.
    pub(crate) fn wake_at(&self) -> Instant {
        match self.timers.peek() {
            Some(Reverse((at, _, _))) => (*at).min(self.next_tick),
            None => self.next_tick,
        }
    }

    /// The next slot whose noted deadline has come by `now`, if any.
    fn next_due(&mut self) -> Option<Token> {
        let &Reverse((at, index, generation)) = self.timers.peek()?;
        if at > self.now {
            return None;
        }
        self.timers.pop();
        Some(Token { index, generation })
    }

    /// Whether the tick work is due now; if it is, the next one is a [`TICK`] away.
    fn tick_due(&mut self) -> bool {
        if self.now < self.next_tick {
            return false;
        }
        self.next_tick = self.now + TICK;
        crate::liveness::beat();
        true
    }

    /// Counts a newly accepted connection in: true when it may open, false when the limit was
    /// reached and it has been refused (the caller then drops, and so closes, `fd`).
    pub(crate) fn admit<H: Handler>(&self, fd: &OwnedFd, handler: &H) -> bool {
        common::admit_with(
            self.active,
            self.config.max_connections,
            fd,
            handler.refusal(),
        )
    }
}

/// The connection engine a loop runs on. What is the same for every loop is written here
/// once, as provided methods: calling the handler and applying its [`Next`], opening a
/// connection, deadlines and the tick sweep, wakes, telling connections of a graceful stop,
/// carrying out what handlers asked of the worker. A loop supplies the rest: where its
/// connections are ([`Engine::parts`]), how it watches and moves bytes ([`Engine::proceed`]),
/// its upstream registrations and how it lets a connection go ([`Engine::close`]).
pub(crate) trait Engine<'a> {
    /// The service.
    type H: Handler;
    /// What the loop keeps for one connection slot.
    type Slot;

    /// The worker's handler and core, borrowed together.
    fn handler_and_core(&mut self) -> (&mut Self::H, &mut Core<'a>);
    /// The loop's connection slots.
    fn slots(&mut self) -> &mut Slab<Self::Slot>;
    /// The live connection in slot `index` with the handler and core, or `None` (a free slot,
    /// or one whose connection is closed while the kernel still has operations on it).
    fn parts(&mut self, index: usize) -> Option<Parts<'_, 'a, Self::H>>;
    /// Puts a connection just opened in a slot.
    fn insert(&mut self, link: Link, conn: <Self::H as Handler>::Conn) -> Token;
    /// Carries out what a handler call asked of the upstream (registering it with the
    /// kernel interface, a join); the answer to apply, Abort when a join cannot be made.
    fn after_call(&mut self, index: usize, next: Next) -> Next;
    /// Moves connection `index` on after a call: sends, reads, closes as far as it can go
    /// (epoll), or lists it for the preparation of the next submission (io_uring).
    fn proceed(&mut self, index: usize);
    /// Ends connection `index` for `reason`.
    fn close(&mut self, index: usize, reason: CloseReason);
    /// A joined connection's deadline came ([`Expiry::Joint`]): a carried joint that has
    /// moved bytes since (the loop does not see them: TCP_INFO tells) or waits for a recheck
    /// goes on; otherwise the joint was idle for its time and the connection ends.
    fn joint_expired(&mut self, index: usize);
    /// Calls the handler for connection `index` once the kernel has let go of its output
    /// ([`Parts::busy`]); a loop whose handler is never busy never needs to.
    fn call_later(&mut self, _index: usize) {}
    /// Asks the kernel to report the listeners again after an accept pause; false when that
    /// failed (the next tick tries again).
    fn watch_listeners_again(&mut self) -> bool;
    /// Accepts on every listener (or arms the accepts).
    fn accept_all(&mut self);
    /// Opens a connection the handler started with [`crate::Io::connect`].
    fn open_outgoing(&mut self, outgoing: Outgoing);

    fn core(&mut self) -> &mut Core<'a> {
        self.handler_and_core().1
    }

    /// Whether `token` still names the connection it was made for.
    fn is_current(&mut self, token: Token) -> bool {
        self.slots().get_mut(token).is_some()
    }

    /// Opens a connection in a new slot: the handler's `on_open`, its deadline noted, its
    /// answer applied. The slot's index, or `None` when the connection is already closed.
    fn open_slot(&mut self, fd: OwnedFd, opened: Opened, upstream: UpstreamPort) -> Option<usize> {
        let token = self.slots().next_token();
        let (handler, core) = self.handler_and_core();
        let (link, conn, next) = connection::open(handler, fd, opened, upstream, core, token);
        let deadline = link.deadline;
        let token = self.insert(link, conn);
        self.core().note_deadline(token, deadline);
        let index = token.index;
        let next = self.after_call(index, next);
        self.apply(index, next).then_some(index)
    }

    /// Calls the handler's `on_ready` (or `on_timeout`) for connection `index`, then carries
    /// out what it asked of the upstream.
    fn call(&mut self, index: usize, timeout: bool) -> Next {
        let next = self.parts(index).expect("live connection").call(timeout);
        self.after_call(index, next)
    }

    /// Records what the handler asked for; false when the connection is gone.
    fn apply(&mut self, index: usize, next: Next) -> bool {
        let parts = self.parts(index).expect("live connection");
        if parts.link.apply(next, parts.joined) {
            return true;
        }
        self.close(index, CloseReason::Done);
        false
    }

    /// Calls the handler and records what it asked for; false when the connection is gone.
    fn call_and_apply(&mut self, index: usize, timeout: bool) -> bool {
        let next = self.call(index, timeout);
        self.apply(index, next)
    }

    /// Ends connection `index`, or calls its handler's `on_timeout`, if one of its deadlines
    /// has passed ([`Link::expiry`]).
    fn expire(&mut self, index: usize) {
        let Some(parts) = self.parts(index) else {
            return;
        };
        match parts.link.expiry(parts.core.now, parts.busy) {
            None => {}
            Some(Expiry::Close(reason)) => self.close(index, reason),
            Some(Expiry::CallTimeout) if self.call_and_apply(index, true) => self.proceed(index),
            Some(Expiry::CallTimeout) => {}
            Some(Expiry::Joint) => self.joint_expired(index),
        }
    }

    /// Calls `on_drain` for the connections that have not heard of the graceful stop yet
    /// (those busy now are told by a later sweep).
    fn tell_drain(&mut self) {
        for index in 0..self.slots().capacity() {
            let Some(next) = self.parts(index).and_then(Parts::drain) else {
                continue;
            };
            let next = self.after_call(index, next);
            if self.apply(index, next) {
                self.proceed(index);
            }
        }
    }

    /// Calls the handler for a connection another one woke ([`crate::Io::wake`]), if it
    /// still waits on its peer or on a wake; one whose output the kernel is reading is called
    /// once that is over.
    fn wake(&mut self, token: Token) {
        if !self.is_current(token) {
            return;
        }
        let Some(parts) = self.parts(token.index) else {
            return;
        };
        if !parts.link.take_wake() {
            return;
        }
        if parts.busy {
            self.call_later(token.index);
        } else if !self.call_and_apply(token.index, false) {
            return;
        }
        self.proceed(token.index);
    }

    /// Carries out what handlers asked of the worker ([`crate::Io::wake`],
    /// [`crate::Io::connect`]), including what the calls made here ask in turn, for a few
    /// rounds ([`WAKE_ROUNDS`]); what is left waits for the loop's next turn, which then
    /// does not block.
    fn run_requests(&mut self) {
        for _ in 0..WAKE_ROUNDS {
            if self.core().requests.is_empty() {
                break;
            }
            for outgoing in std::mem::take(&mut self.core().requests.outgoing) {
                self.core().active.fetch_add(1, Ordering::Relaxed);
                self.open_outgoing(outgoing);
            }
            let mut woken = self.core().requests.take_woken();
            for token in woken.drain(..) {
                self.wake(token);
            }
            if self.core().requests.woken.is_empty() {
                // Kept for its allocation.
                self.core().requests.woken = woken;
            }
        }
    }

    /// Does the time-driven work that has come due by `core().now`: after each turn, the
    /// deadlines noted as coming before the next tick; every [`TICK`], the sweep (accepting
    /// again after a pause, every connection's deadlines, telling a draining worker's
    /// connections), the idle upstream connections and [`Handler::on_tick`].
    fn keep_time(&mut self) {
        while let Some(token) = self.core().next_due() {
            if self.is_current(token) {
                self.expire(token.index);
            }
        }
        if !self.core().tick_due() {
            return;
        }
        let core = self.core();
        if core.accept_pause.is_over(core.now) && self.watch_listeners_again() {
            self.core().accept_pause.resume();
            self.accept_all();
        }
        for index in 0..self.slots().capacity() {
            self.expire(index);
        }
        if self.core().draining {
            self.tell_drain();
        }
        let core = self.core();
        let now = core.now;
        core.upstreams.sweep(now);
        let (handler, core) = self.handler_and_core();
        tick_handler(handler, core, now);
    }
}

/// What every event loop provides: one worker serving its own listeners until the stop flag
/// is set.
pub(crate) trait EventLoop {
    fn serve<H: Handler>(sockets: Vec<OwnedFd>, handler: H, env: Env<'_>) -> io::Result<()>;
}

/// Runs loop `L` on one thread per worker.
pub(crate) fn run<L: EventLoop, H, F>(
    listeners: Listeners,
    config: &DriverConfig,
    make_handler: &F,
    stop: &AtomicBool,
) -> io::Result<()>
where
    H: Handler,
    F: Fn(usize) -> H + Sync,
{
    common::run_workers(
        listeners,
        make_handler,
        |_worker, sockets, handler, active| {
            let env = Env {
                config,
                active,
                stop,
            };
            L::serve(sockets, handler, env)
        },
    )
}
