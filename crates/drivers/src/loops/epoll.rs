//! The event-loop model: one edge-triggered epoll loop per worker thread.
//!
//! Each worker owns its listeners (SO_REUSEPORT), its connections, its buffer pool and its
//! handler; the only thing shared between workers is the count of open connections, touched
//! once per accept and once per close.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fastpath_sys::{syscall, Event};

use crate::buffers::{BufferPool, Flush};
use crate::common::{self, warn_input_left, warn_out_of_descriptors, Gate, UNKNOWN_PEER};
use crate::connection::{self, Link, Parts, State};
use crate::contract::{JoinRequest, Outgoing};
use crate::linked::{self, HasLink, JointStep, Reach, LINKED_INPUT_MAX};
use crate::loops::{parts_of, Core, Engine, Env, EventLoop};
use crate::slab::{Slab, Token};
use crate::splice::{Joint, Side, CARRIED_CHECK, CARRIED_RECHECK};
use crate::{CloseReason, Handler, Next, Opened, TICK};

/// What an epoll token names (the kind of a packed [`Token`]).
const CONNECTION: u8 = 1;
/// A listener: the token's index is its place in the worker's list.
const LISTENER: u8 = 3;
/// Events taken from one epoll_wait.
const EVENTS_PER_WAIT: usize = 256;
/// Connections accepted per listener readiness before other work gets a turn.
const ACCEPT_BATCH: usize = 64;

/// The epoll loop as [`EventLoop`]: each worker with the default [`LoopOptions`].
pub(crate) struct Epoll;

impl EventLoop for Epoll {
    fn serve<H: Handler>(sockets: Vec<OwnedFd>, handler: H, env: Env<'_>) -> io::Result<()> {
        Worker::new(sockets, handler, env, LoopOptions::default())?.run()
    }
}

/// How a worker's loop waits, beyond what [`DriverConfig`] says.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LoopOptions {
    /// Keep polling without blocking for this long after the last event (the per-core
    /// model's low-latency option): the thread burns its core instead of sleeping.
    pub(crate) busy_poll: Option<Duration>,
}

fn new_events(n: usize) -> Vec<Event> {
    vec![Event::default(); n]
}

/// Readiness a connection (or its upstream) is registered for, edge-triggered: reads and
/// writes run until the kernel says EAGAIN.
const CONN_EVENTS: u32 = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;

/// The worker's epoll instance, for a call that needs one. A worker makes it before it has
/// anything to register ([`Worker::ensure_epoll`]); if it has none, the call fails as one on a
/// closed descriptor would.
fn made(epoll: Option<&fastpath_sys::Epoll>) -> io::Result<&fastpath_sys::Epoll> {
    epoll.ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))
}

/// Everything a worker holds for one connection: the shared [`Link`], the handler's state,
/// and what readiness said of the socket.
pub(crate) struct Slot<C> {
    link: Link,
    /// The kernel-side join with a linked connection, once the handler has asked for it.
    joint: Option<Box<Joint>>,
    /// The linked connection joined with this one.
    partner: Option<Token>,
    conn: C,
    readable: bool,
    writable: bool,
    /// The peer's FIN (or an error) has been signalled: read until the end is seen.
    hangup: bool,
    /// Both sockets are registered for their ends only ([`Joint::ends_only`]).
    ends_only: bool,
}

impl<C> HasLink for Slot<C> {
    fn link_mut(&mut self) -> Option<&mut Link> {
        Some(&mut self.link)
    }
}

/// One event loop: its listeners (none for a worker fed connections by someone else), its
/// connections and its handler.
pub(crate) struct Worker<'a, H: Handler> {
    /// Made when first needed: a pool thread or child that never serves holds no descriptor.
    epoll: Option<fastpath_sys::Epoll>,
    /// Called when the last connection is about to close, before its FIN goes out, so that a
    /// pool thread is back on the idle stack by the time its client can connect again. Once
    /// per [`Worker::serve_connection`] (`last_close_told`): the hook puts the thread where
    /// the next client can be handed to it, and a second call would let two be handed at
    /// once, the first lost.
    on_last_close: Option<Box<dyn Fn() + 'a>>,
    last_close_told: bool,
    options: LoopOptions,
    last_event: Instant,
    listeners: Vec<OwnedFd>,
    handler: H,
    slots: Slab<Slot<H::Conn>>,
    /// Slots whose deadlines came this turn (kept for its allocation).
    core: Core<'a>,
}

impl<'a, H: Handler> Worker<'a, H> {
    pub(crate) fn new(
        listeners: Vec<OwnedFd>,
        handler: H,
        env: Env<'a>,
        options: LoopOptions,
    ) -> io::Result<Self> {
        let mut worker = Worker {
            epoll: None,
            on_last_close: None,
            last_close_told: false,
            options,
            last_event: Instant::now(),
            listeners,
            handler,
            slots: Slab::default(),
            core: Core::new(env, BufferPool::default()),
        };
        // Its readiness tells when a socket can give or take: bodies can go socket to socket
        // through a pipe.
        worker.core.can_splice = true;
        if !worker.listeners.is_empty() {
            worker.ensure_epoll()?;
            worker.watch_listeners(true)?;
        }
        Ok(worker)
    }

    /// Makes the epoll instance if there is none yet.
    fn ensure_epoll(&mut self) -> io::Result<()> {
        if self.epoll.is_none() {
            self.epoll = Some(fastpath_sys::Epoll::new()?);
        }
        Ok(())
    }

    /// Sets the hook called before the last open connection closes.
    pub(crate) fn set_on_last_close(&mut self, hook: Box<dyn Fn() + 'a>) {
        self.on_last_close = Some(hook);
    }

    fn watch_listeners(&self, on: bool) -> io::Result<()> {
        for (i, listener) in self.listeners.iter().enumerate() {
            // EPOLLEXCLUSIVE: an inherited listener is shared by every worker, and a new client
            // should wake one of them, not all (our own SO_REUSEPORT listeners are in one epoll
            // set each, where it changes nothing). Kernels before 4.5 refuse it: then without.
            let epoll = made(self.epoll.as_ref())?;
            let fd = listener.as_raw_fd();
            if !on {
                epoll.delete(fd)?;
                continue;
            }
            let token = Token::new(i, 0).pack(LISTENER);
            let readable = libc::EPOLLIN as u32;
            let added = epoll.add(fd, readable | libc::EPOLLEXCLUSIVE as u32, token);
            if matches!(&added, Err(e) if e.raw_os_error() == Some(libc::EINVAL)) {
                epoll.add(fd, readable, token)?;
            } else {
                added?;
            }
        }
        Ok(())
    }

    /// Serves the listeners until the stop flag is set, or a graceful stop has let every
    /// connection finish (or its grace period is over), then closes every connection.
    pub(crate) fn run(mut self) -> io::Result<()> {
        let mut events = new_events(EVENTS_PER_WAIT);
        while !self.core.stop.load(Ordering::Relaxed) && !self.drained() {
            self.turn(&mut events, &common::NoGate)?;
        }
        self.finish();
        Ok(())
    }

    /// Moves a graceful stop on: begins it when it has been asked for, and says whether the
    /// worker is done with it (no connection left, or the grace period over: those left are
    /// then closed by the caller, and counted in the error log here).
    fn drained(&mut self) -> bool {
        if self.core.drain_begins() {
            self.begin_drain();
        }
        if !self.core.draining {
            return false;
        }
        let open = self.open_count();
        self.core.drain_done(open)
    }

    /// The start of a graceful stop: takes in the clients already waiting in the backlog
    /// (the kernel has completed their handshakes, and closing the listener would reset
    /// them), closes the listeners so that new clients are refused at once, and tells every
    /// connection.
    fn begin_drain(&mut self) {
        self.core.now = Instant::now();
        self.accept_all();
        // Closing a listener takes it out of the epoll set only when no other descriptor of
        // it is left, and an inherited one has copies in the other workers and the service
        // manager: take it out first (if accepting was paused it is out already).
        let _ = self.watch_listeners(false);
        self.listeners.clear();
        self.tell_drain();
    }

    /// Serves one connection that was accepted elsewhere, until it is closed or the stop flag
    /// is set: the loop of the process and thread-pool models, where a worker owns one client
    /// connection (and its upstream) at a time. `gate` is left while the loop waits.
    pub(crate) fn serve_connection(
        &mut self,
        fd: OwnedFd,
        opened: Opened,
        gate: &dyn Gate,
    ) -> io::Result<()> {
        self.core.now = Instant::now();
        self.core.next_tick = self.core.now + TICK;
        if let Err(e) = self.ensure_epoll() {
            // Out of descriptors: this connection cannot be served; the caller counted it in.
            self.core.active.fetch_sub(1, Ordering::Relaxed);
            if let Some(hook) = &self.on_last_close {
                hook();
            }
            tracing::warn!("cannot serve a connection: {e}");
            return Ok(());
        }
        self.last_close_told = false;
        self.open(fd, opened);
        // Room for the client and its upstream, each with a few events.
        let mut events = new_events(8);
        let mut client_gone = false;
        // Outgoing connections the handler asked for open at the end of a turn: the client
        // may be gone before they are, and they still have its messages to send.
        while self.open_count() > 0 || !self.core.requests.outgoing.is_empty() {
            if self.core.stop.load(Ordering::Relaxed) || self.drained() {
                self.close_all(CloseReason::Shutdown);
                break;
            }
            self.turn(&mut events, gate)?;
            if !client_gone
                && self
                    .slots
                    .values()
                    .all(|slot| slot.link.outgoing || slot.link.state == State::Idle)
            {
                client_gone = true;
                self.close_outgoing();
            }
        }
        self.tell_last_close();
        Ok(())
    }

    /// Open connections, less the idle linked ones kept for reuse: those wait for the next
    /// client of a worker serving one at a time, and close at a graceful stop.
    fn open_count(&self) -> usize {
        self.slots.len().saturating_sub(self.core.idle.len())
    }

    /// Calls the last-close hook, once per served connection.
    fn tell_last_close(&mut self) {
        if std::mem::replace(&mut self.last_close_told, true) {
            return;
        }
        if let Some(hook) = &self.on_last_close {
            hook();
        }
    }

    /// Here a worker serves one client at a time, so the outgoing connections its service
    /// opened were that client's: once it is gone they are drained as at a graceful stop
    /// (`on_drain`, and `Io::draining` from then on), so that the service sends what it still
    /// holds for them (the forwarder's queued messages) before it closes them; one the
    /// service leaves as it is ([`Handler::on_drain`]'s default) is closed after sending
    /// what its output holds. Closing them at once lost the messages a forwarder had queued
    /// for a destination beyond its output (prefork and threads, 1-2 % of a fast client's).
    fn close_outgoing(&mut self) {
        for index in 0..self.slots.capacity() {
            let Some(slot) = self.slots.at(index) else {
                continue;
            };
            if !matches!(
                slot.link.state,
                State::Reading | State::Draining | State::Waiting
            ) {
                continue;
            }
            let next = match self.parts(index).and_then(Parts::drain) {
                Some(next) => self.after_call(index, next),
                None => Next::Close,
            };
            if self.apply(index, next) {
                self.drive(index);
            }
        }
    }

    /// Runs the periodic work now: for a worker that was idle, whose clock and logs have not
    /// been ticked meanwhile.
    pub(crate) fn tick(&mut self) {
        self.core.now = Instant::now();
        let now = self.core.now;
        crate::loops::tick_handler(&mut self.handler, &mut self.core, now);
    }

    /// Closes every connection and tells the handler the worker stops.
    pub(crate) fn finish(mut self) {
        self.close_all(CloseReason::Shutdown);
        self.handler.on_stop();
    }

    fn close_all(&mut self, reason: CloseReason) {
        for index in 0..self.slots.capacity() {
            self.close(index, reason);
        }
    }

    /// Waits for events, at most until the next tick or an earlier deadline, handles them and
    /// the deadlines that came, and runs the tick work when it is due. With busy polling, the
    /// wait does not block (and `gate` is kept) while the last event is more recent than the
    /// busy-poll time.
    fn turn(&mut self, events: &mut [Event], gate: &dyn Gate) -> io::Result<()> {
        let spinning = self
            .options
            .busy_poll
            .is_some_and(|spin| self.core.now.duration_since(self.last_event) < spin);
        // Wakes left for the next round: look at the kernel without waiting.
        let timeout = if spinning || !self.core.requests.is_empty() {
            0
        } else {
            // Rounded up: a wait that ends before the deadline only costs another turn.
            let wait = self
                .core
                .wake_at()
                .saturating_duration_since(Instant::now());
            (wait.as_micros().div_ceil(1000) as i32).max(1)
        };
        if !spinning {
            gate.leave();
        }
        let waited = match &self.epoll {
            Some(epoll) => epoll.wait(events, timeout),
            None => Ok(0),
        };
        if !spinning {
            gate.enter();
        }
        let n = waited?;
        self.core.now = Instant::now();
        if n > 0 {
            self.last_event = self.core.now;
        }
        for event in &events[..n] {
            self.dispatch(*event);
        }
        self.run_requests();
        self.keep_time();
        self.run_requests();
        Ok(())
    }

    fn dispatch(&mut self, event: Event) {
        let (kind, token) = Token::unpack(event.token());
        if kind == LISTENER {
            self.accept(token.index());
            return;
        }
        let Some(slot) = self.slots.get_mut(token) else {
            return;
        };
        let flags = event.events() as i32;
        if flags & (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) != 0 {
            slot.readable = true;
        }
        if flags & (libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) != 0 {
            // The end is coming: keep reading past short reads until it is seen, as no
            // further edge will announce it.
            slot.hangup = true;
        }
        if flags & (libc::EPOLLOUT | libc::EPOLLHUP | libc::EPOLLERR) != 0 {
            slot.writable = true;
        }
        self.drive(token.index());
    }

    fn accept(&mut self, listener_index: usize) {
        if self.core.accept_pause.is_paused() {
            return;
        }
        // An event read before a graceful stop closed the listeners names one that is gone.
        let Some(listener) = self.listeners.get(listener_index) else {
            return;
        };
        let listen_fd = listener.as_raw_fd();
        for _ in 0..ACCEPT_BATCH {
            match fastpath_sys::accept(listen_fd) {
                Ok((fd, peer)) => {
                    let peer = peer.unwrap_or(UNKNOWN_PEER);
                    if !self.core.admit(&fd, &self.handler, listener_index) {
                        continue;
                    }
                    self.open(fd, Opened::new(peer, listener_index));
                }
                Err(e) => match e.raw_os_error() {
                    Some(libc::EAGAIN) => return,
                    Some(libc::EINTR) | Some(libc::ECONNABORTED) | Some(libc::EPROTO) => {}
                    Some(errno) if common::out_of_descriptors(errno) => {
                        self.pause_accepting(&e);
                        return;
                    }
                    _ => {
                        tracing::error!("accept failed: {e}");
                        return;
                    }
                },
            }
        }
    }

    /// Out of descriptors (or memory): stop watching the listeners for a moment instead of
    /// spinning on a level-triggered listener that cannot be served; pending clients wait in the
    /// backlog and get in as soon as descriptors are free again.
    fn pause_accepting(&mut self, error: &io::Error) {
        warn_out_of_descriptors!(
            self.core.accept_pause,
            self.core.now,
            error,
            self.slots.len()
        );
        if self.watch_listeners(false).is_ok() {
            self.core.accept_pause.pause(self.core.now);
        }
    }

    fn open(&mut self, fd: OwnedFd, opened: Opened) {
        self.open_link(Link::new(fd), opened, None);
    }

    /// Opens a connection (in the slot reserved for it, if one was), serves it as far as it
    /// goes, and registers it if it must wait.
    fn open_link(&mut self, link: Link, opened: Opened, token: Option<Token>) {
        let Some(index) = self.open_slot(link, opened, token) else {
            return;
        };
        self.drive(index);
        // Registered only if it must wait: a connection answered and closed in its first turn
        // (one request, `Connection: close`) costs no epoll_ctl at all. Edge-triggered
        // registration reports what is ready by then, so nothing that arrived meanwhile is
        // missed.
        let token = self.slots.token(index);
        let Some(slot) = self.slots.at(index) else {
            return;
        };
        let fd = slot.link.fd.as_raw_fd();
        let added = made(self.epoll.as_ref())
            .and_then(|epoll| epoll.add(fd, CONN_EVENTS, token.pack(CONNECTION)));
        if let Err(e) = added {
            tracing::error!("epoll_ctl add failed: {e}");
            self.close(index, CloseReason::Error);
        }
    }

    /// Moves a connection forward as far as it can go without blocking.
    fn drive(&mut self, index: usize) {
        loop {
            let Some(slot) = self.slots.at(index) else {
                return;
            };
            let link = &mut slot.link;
            let fd = link.fd.as_raw_fd();
            if !link.output.is_empty() && slot.writable {
                match link.output.flush(fd, &mut self.core.pool) {
                    Ok(Flush::Done) => link.output_sent(&mut self.core.requests.woken),
                    Ok(Flush::WouldBlock) => {
                        slot.writable = false;
                        link.send_deadline = Some(self.core.now + self.core.config.send_timeout);
                    }
                    Err(e) => {
                        self.close(index, e.close_reason());
                        return;
                    }
                }
            }
            if link.state == State::Joined {
                if let Some(owner) = link.owner() {
                    // A joined linked connection is moved with its owner.
                    if self.is_live(owner) {
                        self.drive(owner.index());
                    }
                    return;
                }
                if !self.pump(index) {
                    return;
                }
                continue;
            }
            // Body splices with linked connections go on whenever either side is ready; the
            // socket a splice reads from is not read into the input meanwhile.
            let mut feeding = false;
            if link.links.iter().any(|entry| entry.splicing) {
                feeding = self.pump_owned_splices(index);
            } else if let Some(owner) = link.owner().filter(|_| link.splices().is_some()) {
                self.pump_splice(owner, index);
            }
            let Some(slot) = self.slots.at(index) else {
                return;
            };
            let link = &mut slot.link;
            match link.state {
                // Handled above.
                State::Joined => return,
                // Nothing is read until a wake.
                State::Waiting => return,
                State::Draining => {
                    if !link.output.is_empty() || !self.output_drained(index) {
                        return;
                    }
                }
                State::Closing => {
                    let readable = slot.readable;
                    if !link.output.is_empty() || !self.finish_closing(index, readable) {
                        return;
                    }
                }
                State::Lingering => {
                    if !slot.readable {
                        return;
                    }
                    let mut scratch = [0u8; 4096];
                    match syscall!(read(
                        fd,
                        scratch.as_mut_ptr() as *mut libc::c_void,
                        scratch.len()
                    )) {
                        Ok(0) => {
                            self.close(index, CloseReason::Done);
                            return;
                        }
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            slot.readable = false;
                            return;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => {
                            self.close(index, CloseReason::Done);
                            return;
                        }
                    }
                }
                State::Idle => {
                    // Nothing is due on an idle connection: anything that comes makes it
                    // unfit for reuse.
                    if !slot.readable {
                        return;
                    }
                    let mut byte = [0u8; 1];
                    match syscall!(read(fd, byte.as_mut_ptr() as *mut libc::c_void, 1)) {
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            slot.readable = false;
                            return;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        _ => {
                            self.close(index, CloseReason::PeerGone);
                            return;
                        }
                    }
                }
                State::Reading => {
                    let mut got = false;
                    // A linked connection holds at most so much its owner has not taken, and
                    // reads nothing while a splice takes its bytes to the owner.
                    let held = link.owner().is_some()
                        && (link.input.len() >= LINKED_INPUT_MAX
                            || link.splices().is_some_and(|s| s.inward.is_some()));
                    if slot.readable && !link.eof && !feeding && !held {
                        if link.input.len() >= self.core.config.max_input {
                            warn_input_left!(link.input.len(), self.core.config.max_input);
                            self.close(index, CloseReason::Error);
                            return;
                        }
                        match link.input.read_from(fd, &mut self.core.pool) {
                            Ok((0, _)) => {
                                link.eof = true;
                                got = true;
                            }
                            // A short read emptied the socket: with edge triggering the next
                            // arrival brings a new event, so skip the read that would say
                            // EAGAIN; unless the FIN was already signalled, which brings no
                            // new event.
                            Ok((_, false)) => {
                                slot.readable = slot.hangup;
                                got = true;
                            }
                            Ok((_, true)) => got = true,
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                slot.readable = false;
                                link.input.release_if_empty(&mut self.core.pool);
                            }
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                            Err(_) => {
                                self.close(index, CloseReason::PeerGone);
                                return;
                            }
                        }
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

    /// Moves bytes of a joined connection and its partner; closes them when the joint is
    /// broken. When the joint is done, the partner closes and the connection closes like any
    /// other (its late input discarded for the linger time, so the answer is not reset
    /// away): true then, to drive it on.
    fn pump(&mut self, index: usize) -> bool {
        let token = self.slots.token(index);
        let partner = self
            .slots
            .at(index)
            .and_then(|slot| slot.partner)
            .filter(|&p| self.is_live(p));
        let epoll = self.epoll.as_ref();
        let pair = partner.and_then(|p| self.slots.pair(index, p.index()));
        let Some((slot, other)) = pair else {
            self.close(index, CloseReason::Error);
            return false;
        };
        let partner = partner.expect("paired above");
        // What user space holds for the partner goes first.
        if !other.link.output.is_empty() && other.writable {
            match other
                .link
                .output
                .flush(other.link.fd.as_raw_fd(), &mut self.core.pool)
            {
                Ok(Flush::Done) => {}
                Ok(Flush::WouldBlock) => other.writable = false,
                Err(_) => {
                    self.close(index, CloseReason::Error);
                    return false;
                }
            }
        }
        let joint = slot
            .joint
            .as_mut()
            .expect("a joined connection has its joint");
        let pumped = joint.pump(
            Side {
                fd: slot.link.fd.as_raw_fd(),
                readable: &mut slot.readable,
                writable: &mut slot.writable,
            },
            Side {
                fd: other.link.fd.as_raw_fd(),
                readable: &mut other.readable,
                writable: &mut other.writable,
            },
            !slot.link.output.is_empty(),
            !other.link.output.is_empty(),
            other.link.input.ever_received(),
        );
        let ends_only = joint.ends_only();
        if ends_only != slot.ends_only {
            // Room on a destination that was full (the kernel's sender waits for it, and a leg
            // it stopped carrying may want copying), reported once per edge.
            let events = if ends_only {
                (libc::EPOLLRDHUP | libc::EPOLLOUT | libc::EPOLLET) as u32
            } else {
                CONN_EVENTS
            };
            let mut ok = true;
            for (fd, token) in [
                (slot.link.fd.as_raw_fd(), token),
                (other.link.fd.as_raw_fd(), partner),
            ] {
                ok &= made(epoll)
                    .and_then(|epoll| epoll.modify(fd, events, token.pack(CONNECTION)))
                    .is_ok();
            }
            if ok {
                slot.ends_only = ends_only;
            }
        }
        let link = &mut slot.link;
        match JointStep::of(pumped) {
            JointStep::Going { moved, recheck } => {
                if moved {
                    link.deadline = Some(self.core.now + joint.idle);
                }
                if ends_only {
                    let at = self.core.now + CARRIED_CHECK;
                    link.deadline = Some(link.deadline.map_or(at, |d| d.min(at)));
                }
                if recheck {
                    let at = self.core.now + CARRIED_RECHECK;
                    link.deadline = Some(link.deadline.map_or(at, |d| d.min(at)));
                    self.core.note_deadline(token, link.deadline);
                }
                false
            }
            JointStep::Finished => {
                slot.joint = None;
                slot.partner = None;
                link.unjoin();
                self.close(partner.index(), CloseReason::Done);
                true
            }
            JointStep::Close(reason) => {
                self.close(index, reason);
                false
            }
        }
    }

    /// Pumps the body splices of the connections linked to owner `index`; true while one of
    /// them takes the owner's own bytes (its socket is not read into its input meanwhile).
    fn pump_owned_splices(&mut self, index: usize) -> bool {
        let owner = self.slots.token(index);
        let splicing: Vec<Token> = self.slots[index]
            .link
            .links
            .iter()
            .filter(|entry| entry.splicing)
            .map(|entry| entry.token)
            .collect();
        let mut feeding = false;
        for linked in splicing {
            if self.is_live(linked) {
                feeding |= self.pump_splice(owner, linked.index());
            }
        }
        feeding
    }

    /// Moves the body splices between linked connection `index` and its `owner`, each after
    /// what user space still holds for the same destination; the owner is woken when one is
    /// over. True while one takes the owner's bytes.
    fn pump_splice(&mut self, owner: Token, index: usize) -> bool {
        if !self.is_live(owner) {
            return false;
        }
        let token = self.slots.token(index);
        let Some((slot, linked)) = self.slots.pair(owner.index(), index) else {
            return false;
        };
        let me = linked.link.fd.as_raw_fd();
        let linked_output_queued = !linked.link.output.is_empty();
        let Some(splices) = linked.link.splices_mut() else {
            return false;
        };
        let pumped = splices.pump(
            Side {
                fd: slot.link.fd.as_raw_fd(),
                readable: &mut slot.readable,
                writable: &mut slot.writable,
            },
            Side {
                fd: me,
                readable: &mut linked.readable,
                writable: &mut linked.writable,
            },
            !slot.link.output.is_empty(),
            linked_output_queued,
        );
        let feeding = splices.outward.is_some();
        if splices.idle() {
            if let Some(entry) = slot.link.links.iter_mut().find(|e| e.token == token) {
                entry.splicing = false;
            }
        }
        if let Some(idle) = pumped.moved {
            slot.link.deadline = Some(self.core.now + idle);
        }
        if pumped.news {
            self.core.requests.woken.push(owner);
        }
        feeding
    }
}

impl<'a, H: Handler> Engine<'a> for Worker<'a, H> {
    type H = H;
    type Slot = Slot<H::Conn>;

    fn handler_and_core(&mut self) -> (&mut H, &mut Core<'a>) {
        (&mut self.handler, &mut self.core)
    }

    fn open_parts(&mut self) -> (&mut H, &mut Core<'a>, Reach<'_>) {
        (
            &mut self.handler,
            &mut self.core,
            linked::reach(&mut self.slots),
        )
    }

    fn parts(&mut self, index: usize) -> Option<Parts<'_, 'a, H>> {
        let worker = (&mut self.handler, &mut self.core);
        parts_of(worker, &mut self.slots, index, |slot| {
            let joined = slot.joint.is_some();
            Some((&mut slot.link, &mut slot.conn, false, joined))
        })
    }

    /// Joins connection `index` with its linked connection as its call asked; Abort when it
    /// cannot be.
    fn join(&mut self, index: usize, join: JoinRequest, next: Next) -> Next {
        let joint = match Joint::new(join.idle, join.carrier) {
            Ok(joint) => joint,
            Err(e) => {
                tracing::warn!("cannot join a connection with its linked connection: {e}");
                return Next::Abort;
            }
        };
        let deadline = self.core.now + join.idle;
        let pool = &mut self.core.pool;
        let Some((slot, _)) =
            linked::join_slots(&mut self.slots, index, join.partner, pool, deadline)
        else {
            return Next::Abort;
        };
        slot.joint = Some(Box::new(joint));
        slot.partner = Some(join.partner);
        next
    }

    fn slots(&mut self) -> &mut Slab<Slot<H::Conn>> {
        &mut self.slots
    }

    fn insert(&mut self, token: Token, link: Link, conn: H::Conn) {
        self.slots.insert_at(
            token,
            Slot {
                link,
                joint: None,
                partner: None,
                ends_only: false,
                conn,
                // With TCP_DEFER_ACCEPT the request is usually already here: read it at once.
                readable: true,
                writable: true,
                hangup: false,
            },
        );
    }

    fn proceed(&mut self, index: usize) {
        self.drive(index);
    }

    fn joint_expired(&mut self, index: usize) {
        let partner = self.slots.at(index).and_then(|slot| slot.partner);
        let partner_fd = partner
            .and_then(|p| self.slots.get_mut(p))
            .map(|p| p.link.fd.as_raw_fd());
        let slot = self.slots.at(index).expect("live slot");
        let link = &mut slot.link;
        let idle = match (slot.joint.as_ref(), partner_fd) {
            (Some(joint), Some(fd)) => joint
                .carried_idle(link.fd.as_raw_fd(), fd)
                .map(|quiet| (quiet, joint.idle)),
            _ => None,
        };
        match idle {
            Some((quiet, limit)) if quiet < limit => {
                link.deadline = Some(self.core.now + (limit - quiet));
                self.drive(index);
            }
            _ => self.close(index, CloseReason::Done),
        }
    }

    fn close(&mut self, index: usize, reason: CloseReason) {
        let token = self.slots.token(index);
        let Some(mut slot) = self.slots.remove(index) else {
            return;
        };
        let reason = connection::closing(&mut self.handler, &mut slot.conn, &slot.link, reason);
        slot.link.release(&mut self.core);
        let mut departure = slot.link.departure();
        if let Some(key) = departure.idle_key.take() {
            // Out of the pool before the count below, which leaves idle ones aside.
            self.core.idle.remove(key, token);
        }
        let counted = slot.link.counted;
        // The last connection (its linked ones, which close with it, and the idle ones
        // aside) is closing: told before its FIN goes out.
        let closing_with_it = departure
            .links
            .iter()
            .filter(|entry| entry.closed.is_none())
            .count();
        if self.open_count() <= closing_with_it && self.core.requests.outgoing.is_empty() {
            self.tell_last_close();
        }
        // Closing the descriptor also removes it from the epoll set.
        drop(slot.link);
        self.end_close(token, departure, slot.conn, reason, counted);
    }

    fn watch_listeners_again(&mut self) -> bool {
        self.watch_listeners(true).is_ok()
    }

    fn accept_all(&mut self) {
        for i in 0..self.listeners.len() {
            self.accept(i);
        }
    }

    fn open_outgoing(&mut self, outgoing: Outgoing) {
        self.open_link(*outgoing.link, outgoing.opened, outgoing.token);
    }
}
