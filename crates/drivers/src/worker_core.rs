//! What every loop's worker keeps besides its connections and its kernel interface
//! ([`Core`]): the configuration and the figures shared with the other workers ([`Env`]),
//! the buffer pool, the clock of the iteration, deadlines, the graceful stop, the idle linked
//! connections and what handlers asked of the worker during their calls.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::time::Instant;

use crate::buffers::BufferPool;
use crate::common::{self, AcceptPause};
use crate::contract::Requests;
use crate::linked::IdlePool;
use crate::slab::Token;
use crate::{signals, DriverConfig, Handler, TICK};

/// What a worker shares with the other workers of its model.
#[derive(Clone, Copy)]
pub(crate) struct Env<'a> {
    pub(crate) config: &'a DriverConfig,
    /// Open connections across all workers, for the connection limit.
    pub(crate) active: &'a AtomicUsize,
    pub(crate) stop: &'a AtomicBool,
}

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
    /// Idle linked connections, kept for reuse ([`crate::Io::release`]).
    pub(crate) idle: IdlePool,
    /// The loop can splice bodies between linked connections (the epoll loop).
    pub(crate) can_splice: bool,
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
            idle: IdlePool::default(),
            can_splice: false,
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
                .push(Reverse((at, token.index(), token.generation)));
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
    pub(crate) fn next_due(&mut self) -> Option<Token> {
        let &Reverse((at, index, generation)) = self.timers.peek()?;
        if at > self.now {
            return None;
        }
        self.timers.pop();
        Some(Token::new(index, generation))
    }

    /// Whether the tick work is due now; if it is, the next one is a [`TICK`] away.
    pub(crate) fn tick_due(&mut self) -> bool {
        if self.now < self.next_tick {
            return false;
        }
        self.next_tick = self.now + TICK;
        crate::liveness::beat();
        true
    }

    /// Counts a newly accepted connection in: true when it may open, false when the limit was
    /// reached and it has been refused (the caller then drops, and so closes, `fd`).
    pub(crate) fn admit<H: Handler>(&self, fd: &OwnedFd, handler: &H, listener: usize) -> bool {
        common::admit_with(
            self.active,
            self.config.max_connections,
            fd,
            handler.refusal(listener),
        )
    }
}
