//! The event loops: how a worker learns that its connections can make progress. Each moves
//! bytes and completions and leaves what happens next to a connection to the shared engine
//! in `connection.rs`: the epoll loop waits for readiness and makes a system call per read and
//! per send; the io_uring loop asks for completed work and batches its requests.

pub(crate) mod epoll;
pub(crate) mod uring;

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::connection::{self, Departure, Expiry, Link, Parts, State};
use crate::contract::{JoinRequest, Outgoing};
use crate::linked::{HasLink, Reach};
use crate::slab::{Slab, Token};
pub(crate) use crate::worker_core::{tick_handler, Core, Env};
use crate::{common, CloseReason, DriverConfig, Handler, Listeners, Next, Opened};

/// The parts of slot `index` of a loop's `slots`: `split` picks the connection's link and
/// handler state out of the loop's slot, and says whether the handler is busy and whether
/// the connection is joined. `None` for a slot without a live connection.
pub(crate) fn parts_of<'w, 'a, H: Handler, T: HasLink>(
    (handler, core): (&'w mut H, &'w mut Core<'a>),
    slots: &'w mut Slab<T>,
    index: usize,
    split: impl FnOnce(&'w mut T) -> Option<(&'w mut Link, &'w mut H::Conn, bool, bool)>,
) -> Option<Parts<'w, 'a, H>> {
    let token = slots.token(index);
    let (slot, reach) = crate::linked::lend(slots, index)?;
    let (link, conn, busy, joined) = split(slot)?;
    let parts = Parts::new(handler, core, (link, conn), reach, token);
    Some(Parts {
        busy,
        joined,
        ..parts
    })
}

/// Rounds of wakes ([`crate::Io::wake`]) carried out before the loop looks at the kernel
/// again: wakes that wake others are followed a few steps, while a connection that keeps
/// waking itself (a service taking its turn in parts) cannot keep the loop from its events.
pub(crate) const WAKE_ROUNDS: usize = 4;

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
    type Slot: HasLink;

    /// The worker's handler and core, borrowed together.
    fn handler_and_core(&mut self) -> (&mut Self::H, &mut Core<'a>);
    /// The handler and core with the loop's slots seen for a call that borrows no slot yet
    /// (a connection's `on_open`, before it has one).
    fn open_parts(&mut self) -> (&mut Self::H, &mut Core<'a>, Reach<'_>);
    /// The loop's connection slots.
    fn slots(&mut self) -> &mut Slab<Self::Slot>;
    /// The live connection in slot `index` with the handler and core, or `None` (a free slot,
    /// or one whose connection is closed while the kernel still has operations on it).
    fn parts(&mut self, index: usize) -> Option<Parts<'_, 'a, Self::H>>;
    /// Puts a connection just opened in the slot reserved for it.
    fn insert(&mut self, token: Token, link: Link, conn: <Self::H as Handler>::Conn);
    /// Joins connection `index` with one of its linked connections as its call asked; the
    /// answer to apply, Abort when the join cannot be made.
    fn join(&mut self, index: usize, join: JoinRequest, next: Next) -> Next;
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

    /// Whether `token` still names the connection it was made for, open or closing.
    fn is_current(&mut self, token: Token) -> bool {
        self.slots().get_mut(token).is_some()
    }

    /// Whether `token` names a connection that is still open.
    fn is_live(&mut self, token: Token) -> bool {
        self.slots()
            .get_mut(token)
            .is_some_and(|slot| slot.link_mut().is_some())
    }

    /// Opens a connection in a slot (the one reserved for it, or a new one): the handler's
    /// `on_open`, its deadline noted, its answer applied. The slot's index, or `None` when the
    /// connection is already closed.
    fn open_slot(&mut self, link: Link, opened: Opened, token: Option<Token>) -> Option<usize> {
        let token = token.unwrap_or_else(|| self.slots().reserve());
        let (handler, core, reach) = self.open_parts();
        let (link, conn, next) = connection::open(handler, link, opened, core, reach, token);
        let deadline = link.deadline;
        self.insert(token, link, conn);
        self.core().note_deadline(token, deadline);
        let index = token.index();
        let next = self.after_call(index, next);
        self.apply(index, next).then_some(index)
    }

    /// Calls the handler's `on_ready` (or `on_timeout`) for connection `index`, then carries
    /// out what it asked of its linked connections.
    fn call(&mut self, index: usize, timeout: bool) -> Next {
        let next = self.parts(index).expect("live connection").call(timeout);
        self.after_call(index, next)
    }

    /// Carries out what a call of connection `index` asked beyond its own connection: a join
    /// (whose failure turns the answer into Abort), and what it did to linked connections.
    fn after_call(&mut self, index: usize, next: Next) -> Next {
        let next = match self.core().requests.join.take() {
            Some(join) => self.join(index, join, next),
            None => next,
        };
        self.after_links();
        next
    }

    /// Carries out what a call asked of linked connections: those let go of and unfit for
    /// reuse are closed, those it reached are moved on (their output sent, their reading
    /// resumed).
    fn after_links(&mut self) {
        let requests = &mut self.core().requests;
        if requests.to_close.is_empty() && requests.touched.is_empty() {
            return;
        }
        for token in std::mem::take(&mut self.core().requests.to_close) {
            if self.is_live(token) {
                self.close(token.index(), CloseReason::Done);
            }
        }
        let mut touched = std::mem::take(&mut self.core().requests.touched);
        touched.dedup();
        for &token in &touched {
            // A joined one is moved with its owner, whose call this is: not from inside it.
            let moves_alone = self
                .slots()
                .get_mut(token)
                .and_then(|slot| slot.link_mut())
                .is_some_and(|link| link.state != State::Joined);
            if moves_alone {
                self.proceed(token.index());
            }
        }
        touched.clear();
        if self.core().requests.touched.is_empty() {
            // Kept for its allocation.
            self.core().requests.touched = touched;
        }
    }

    /// The end of a close once the loop has let go of the connection's slot: what it leaves
    /// beyond it is settled ([`Engine::settle`]), then the handler hears why
    /// ([`connection::closed`]).
    fn end_close(
        &mut self,
        me: Token,
        departure: Departure,
        conn: <Self::H as Handler>::Conn,
        reason: CloseReason,
        counted: bool,
    ) {
        self.settle(me, departure, reason);
        let (handler, core) = self.handler_and_core();
        connection::closed(handler, conn, reason, counted, core);
    }

    /// A draining connection whose output has all gone reads again, and its handler is
    /// called; false when the connection is gone.
    fn output_drained(&mut self, index: usize) -> bool {
        if let Some(parts) = self.parts(index) {
            parts.link.state = State::Reading;
        }
        self.call_and_apply(index, false)
    }

    /// A closing connection whose output has all gone closes now or lingers (see
    /// [`Link::finish_closing`]; `input_waiting`: the loop knows of input not read yet):
    /// true while it lingers.
    fn finish_closing(&mut self, index: usize, input_waiting: bool) -> bool {
        let Some(parts) = self.parts(index) else {
            return false;
        };
        if parts.link.finish_closing(parts.core, input_waiting) == connection::Closing::Now {
            self.close(index, CloseReason::Done);
            return false;
        }
        true
    }

    /// What closing connection `me` leaves to settle beyond its slot: its owner hears why it
    /// closed (and is woken), an idle one leaves the pool, and the connections it held close
    /// with it (those not opened yet are dropped when their turn comes).
    fn settle(&mut self, me: Token, departure: Departure, reason: CloseReason) {
        if let Some(owner) = departure.owner {
            if let Some(parts) = self.slots().get_mut(owner) {
                if let Some(link) = parts.link_mut() {
                    if let Some(entry) = link.links.iter_mut().find(|e| e.token == me) {
                        entry.closed = Some(reason);
                    }
                    self.core().requests.woken.push(owner);
                }
            }
        }
        if let Some(key) = departure.idle_key {
            self.core().idle.remove(key, me);
        }
        for entry in departure.links {
            if entry.closed.is_none() && self.is_live(entry.token) {
                self.close(entry.token.index(), CloseReason::Done);
            }
        }
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
        // A linked connection's news is its owner's to handle: woken, with nothing of this
        // connection to lend or apply.
        let owner = self
            .slots()
            .at(index)
            .and_then(|slot| slot.link_mut())
            .and_then(|link| link.owner());
        if let Some(owner) = owner {
            self.core().requests.woken.push(owner);
            return true;
        }
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
    /// (those busy now are told by a later sweep), after closing the idle linked ones.
    fn tell_drain(&mut self) {
        for token in self.core().idle.drain() {
            if self.is_live(token) {
                self.close(token.index(), CloseReason::Done);
            }
        }
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
        let Some(parts) = self.parts(token.index()) else {
            return;
        };
        if !parts.link.take_wake() {
            return;
        }
        if parts.busy {
            self.call_later(token.index());
        } else if !self.call_and_apply(token.index(), false) {
            return;
        }
        self.proceed(token.index());
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
                let Some(token) = outgoing.token else {
                    self.core().active.fetch_add(1, Ordering::Relaxed);
                    self.open_outgoing(outgoing);
                    continue;
                };
                let Some(owner) = outgoing.link.owner().filter(|&owner| self.is_live(owner)) else {
                    // A linked connection whose owner closed before it was opened.
                    self.slots().unreserve(token);
                    continue;
                };
                self.open_outgoing(outgoing);
                // It can be reached now (a join, a splice).
                self.core().requests.woken.push(owner);
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
                self.expire(token.index());
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
        let now = self.core().now;
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
