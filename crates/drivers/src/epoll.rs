//! The event-loop model: one edge-triggered epoll loop per worker thread.
//!
//! Each worker owns its listeners (SO_REUSEPORT), its connections, its buffer pool and its
//! handler; the only thing shared between workers is the count of open connections, touched
//! once per accept and once per close.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::buffers::{BufferPool, Flush, FlushError, Input, Output};
use crate::common::{
    self, warn_input_left, warn_out_of_descriptors, AcceptPause, Expired, Gate, UNKNOWN_PEER,
};
use crate::splice::{Joint, Side};
use crate::sys::{self, syscall};
use crate::upstream::{JointStep, Registry, UpstreamPool, UpstreamPort, IDLE_UPSTREAMS_PER_KEY};
use crate::{CloseReason, DriverConfig, Handler, Io, Listeners, Next, TICK};

/// Set in a connection token's index half for events of its upstream socket.
const UPSTREAM_BIT: u64 = 1 << 31;
/// Tokens at and above this value name listeners, below it connection slots.
const LISTENER_TOKEN: u64 = u64::MAX - 1024;
/// Events taken from one epoll_wait.
const EVENTS_PER_WAIT: usize = 256;
/// Connections accepted per listener readiness before other work gets a turn.
const ACCEPT_BATCH: usize = 64;

pub(crate) fn run<H, F>(
    listeners: Listeners,
    config: &DriverConfig,
    make_handler: &F,
    stop: &'static AtomicBool,
) -> io::Result<()>
where
    H: Handler,
    F: Fn(usize) -> H + Sync,
{
    common::run_workers(
        listeners,
        make_handler,
        |_worker, sockets, handler, active| {
            Worker::new(
                sockets,
                handler,
                config,
                active,
                stop,
                LoopOptions::default(),
            )?
            .run()
        },
    )
}

/// How a worker's loop waits, beyond what [`DriverConfig`] says.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LoopOptions {
    /// Keep polling without blocking for this long after the last event (the per-core
    /// model's low-latency option): the thread burns its core instead of sleeping.
    pub(crate) busy_poll: Option<Duration>,
}

fn new_events(n: usize) -> Vec<libc::epoll_event> {
    vec![libc::epoll_event { events: 0, u64: 0 }; n]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Reading,
    Draining,
    Closing,
    Lingering,
    /// Joined with its upstream in the kernel ([`crate::UpstreamPort::join`]).
    Joined,
}

/// Everything a worker holds for one connection.
struct Slot<C> {
    fd: OwnedFd,
    conn: C,
    input: Input,
    output: Output,
    state: State,
    deadline: Option<Instant>,
    send_deadline: Option<Instant>,
    readable: bool,
    writable: bool,
    /// The peer's FIN (or an error) has been signalled: read until the end is seen.
    hangup: bool,
    /// Discard late input before closing even if none is buffered ([`Next::Linger`]).
    linger: bool,
    eof: bool,
    upstream: UpstreamPort,
    joint: Option<Box<Joint>>,
}

/// One event loop: its listeners (none for a worker fed connections by someone else), its
/// connections and its handler.
pub(crate) struct Worker<'a, H: Handler> {
    /// Made when first needed: a pool thread or child that never serves holds no descriptor.
    epoll: Option<OwnedFd>,
    /// Called when the last connection is about to close, before its FIN goes out, so that a
    /// pool thread is back on the idle stack by the time its client can connect again.
    on_last_close: Option<Box<dyn Fn() + 'a>>,
    options: LoopOptions,
    last_event: Instant,
    open_connections: usize,
    listeners: Vec<OwnedFd>,
    handler: H,
    slots: Vec<Option<Slot<H::Conn>>>,
    generations: Vec<u32>,
    free: Vec<usize>,
    pool: BufferPool,
    config: &'a DriverConfig,
    active: &'a AtomicUsize,
    stop: &'static AtomicBool,
    now: Instant,
    accept_pause: AcceptPause,
    upstreams: UpstreamPool,
}

impl<'a, H: Handler> Worker<'a, H> {
    pub(crate) fn new(
        listeners: Vec<OwnedFd>,
        handler: H,
        config: &'a DriverConfig,
        active: &'a AtomicUsize,
        stop: &'static AtomicBool,
        options: LoopOptions,
    ) -> io::Result<Self> {
        let mut worker = Worker {
            epoll: None,
            on_last_close: None,
            options,
            last_event: Instant::now(),
            open_connections: 0,
            listeners,
            handler,
            slots: Vec::new(),
            generations: Vec::new(),
            free: Vec::new(),
            pool: BufferPool::default(),
            config,
            active,
            stop,
            now: Instant::now(),
            accept_pause: AcceptPause::default(),
            upstreams: UpstreamPool::new(IDLE_UPSTREAMS_PER_KEY),
        };
        if !worker.listeners.is_empty() {
            worker.ensure_epoll()?;
            worker.watch_listeners(true)?;
        }
        Ok(worker)
    }

    /// Makes the epoll instance if there is none yet.
    fn ensure_epoll(&mut self) -> io::Result<()> {
        if self.epoll.is_none() {
            self.epoll = Some(sys::epoll_create()?);
        }
        Ok(())
    }

    fn epoll_fd(&self) -> RawFd {
        self.epoll.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }

    /// Sets the hook called before the last open connection closes.
    pub(crate) fn set_on_last_close(&mut self, hook: Box<dyn Fn() + 'a>) {
        self.on_last_close = Some(hook);
    }

    fn watch_listeners(&self, on: bool) -> io::Result<()> {
        for (i, listener) in self.listeners.iter().enumerate() {
            let mut event = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: LISTENER_TOKEN + i as u64,
            };
            let op = if on {
                libc::EPOLL_CTL_ADD
            } else {
                libc::EPOLL_CTL_DEL
            };
            syscall!(epoll_ctl(
                self.epoll_fd(),
                op,
                listener.as_raw_fd(),
                &mut event
            ))?;
        }
        Ok(())
    }

    /// Serves the listeners until the stop flag is set, then closes every connection.
    pub(crate) fn run(mut self) -> io::Result<()> {
        let mut events = new_events(EVENTS_PER_WAIT);
        let mut next_tick = Instant::now() + TICK;
        while !self.stop.load(Ordering::Relaxed) {
            self.turn(&mut events, &mut next_tick, &common::NoGate)?;
        }
        self.finish();
        Ok(())
    }

    /// Serves one connection that was accepted elsewhere, until it is closed or the stop flag
    /// is set: the loop of the process and thread-pool models, where a worker owns one client
    /// connection (and its upstream) at a time. `gate` is left while the loop waits.
    pub(crate) fn serve_connection(
        &mut self,
        fd: OwnedFd,
        peer: SocketAddr,
        gate: &dyn Gate,
    ) -> io::Result<()> {
        self.now = Instant::now();
        let mut next_tick = self.now + TICK;
        if let Err(e) = self.ensure_epoll() {
            // Out of descriptors: this connection cannot be served; the caller counted it in.
            self.active.fetch_sub(1, Ordering::Relaxed);
            if let Some(hook) = &self.on_last_close {
                hook();
            }
            tracing::warn!("cannot serve a connection: {e}");
            return Ok(());
        }
        self.open(fd, peer);
        // Room for the client and its upstream, each with a few events.
        let mut events = new_events(8);
        while self.open_connections > 0 {
            if self.stop.load(Ordering::Relaxed) {
                self.close_all(CloseReason::Shutdown);
                break;
            }
            self.turn(&mut events, &mut next_tick, gate)?;
        }
        Ok(())
    }

    /// Runs the periodic work now: for a worker that was idle, whose clock and logs have not
    /// been ticked meanwhile.
    pub(crate) fn tick(&mut self) {
        self.now = Instant::now();
        self.upstreams.sweep(self.now);
        self.handler.on_tick(self.now);
    }

    /// Closes every connection and tells the handler the worker stops.
    pub(crate) fn finish(mut self) {
        self.close_all(CloseReason::Shutdown);
        self.handler.on_stop();
    }

    fn close_all(&mut self, reason: CloseReason) {
        for index in 0..self.slots.len() {
            if self.slots[index].is_some() {
                self.close(index, reason);
            }
        }
    }

    /// Waits for events, at most until the next tick, handles them, and runs the tick work
    /// when it is due. With busy polling, the wait does not block (and `gate` is kept) while
    /// the last event is more recent than the busy-poll time.
    fn turn(
        &mut self,
        events: &mut [libc::epoll_event],
        next_tick: &mut Instant,
        gate: &dyn Gate,
    ) -> io::Result<()> {
        let spinning = self
            .options
            .busy_poll
            .is_some_and(|spin| self.now.duration_since(self.last_event) < spin);
        let timeout = if spinning {
            0
        } else {
            (next_tick
                .saturating_duration_since(Instant::now())
                .as_millis() as i32)
                .max(1)
        };
        if !spinning {
            gate.leave();
        }
        let waited = match &self.epoll {
            Some(epoll) => sys::epoll_wait(epoll, events, timeout),
            None => Ok(0),
        };
        if !spinning {
            gate.enter();
        }
        let n = waited?;
        self.now = Instant::now();
        if n > 0 {
            self.last_event = self.now;
        }
        for event in &events[..n] {
            self.dispatch(*event);
        }
        if self.now >= *next_tick {
            *next_tick = self.now + TICK;
            self.sweep();
            self.upstreams.sweep(self.now);
            self.handler.on_tick(self.now);
        }
        Ok(())
    }

    fn dispatch(&mut self, event: libc::epoll_event) {
        let token = event.u64;
        if token >= LISTENER_TOKEN {
            self.accept((token - LISTENER_TOKEN) as usize);
            return;
        }
        let index = (token & (UPSTREAM_BIT - 1)) as usize;
        let generation = (token >> 32) as u32;
        if self.generations.get(index) != Some(&generation) {
            return;
        }
        let Some(slot) = self.slots[index].as_mut() else {
            return;
        };
        let flags = event.events as i32;
        if token & UPSTREAM_BIT != 0 {
            if let Some(up) = slot.upstream.attached() {
                let hup = libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR;
                if flags & (libc::EPOLLIN | hup) != 0 {
                    up.readable = true;
                }
                if flags & hup != 0 {
                    up.hangup = true;
                }
                if flags & (libc::EPOLLOUT | libc::EPOLLHUP | libc::EPOLLERR) != 0 {
                    up.writable = true;
                }
                self.drive(index);
            }
            return;
        }
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
        self.drive(index);
    }

    fn accept(&mut self, listener_index: usize) {
        if self.accept_pause.is_paused() {
            return;
        }
        let listen_fd = self.listeners[listener_index].as_raw_fd();
        for _ in 0..ACCEPT_BATCH {
            match sys::accept(listen_fd) {
                Ok((fd, peer)) => {
                    let peer = peer.unwrap_or(UNKNOWN_PEER);
                    if !common::admit(self.active, self.config.max_connections, &fd, &self.handler)
                    {
                        continue;
                    }
                    self.open(fd, peer);
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
            self.accept_pause,
            self.now,
            error,
            self.slots.iter().filter(|s| s.is_some()).count()
        );
        if self.watch_listeners(false).is_ok() {
            self.accept_pause.pause(self.now);
        }
    }

    fn open(&mut self, fd: OwnedFd, peer: SocketAddr) {
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                self.slots.push(None);
                self.generations.push(0);
                self.slots.len() - 1
            }
        };
        self.open_connections += 1;
        let conn = self.handler.on_open(peer, self.now);
        self.slots[index] = Some(Slot {
            fd,
            conn,
            input: Input::default(),
            output: Output::default(),
            state: State::Reading,
            deadline: None,
            send_deadline: None,
            // With TCP_DEFER_ACCEPT the request is usually already here: read it at once.
            readable: true,
            writable: true,
            hangup: false,
            linger: false,
            eof: false,
            upstream: UpstreamPort::new(true, true),
            joint: None,
        });
        self.drive(index);
        // Registered only if it must wait: a connection answered and closed in its first turn
        // (one request, `Connection: close`) costs no epoll_ctl at all. Edge-triggered
        // registration reports what is ready by then, so nothing that arrived meanwhile is
        // missed.
        let Some(slot) = self.slots[index].as_ref() else {
            return;
        };
        let token = ((self.generations[index] as u64) << 32) | index as u64;
        let mut event = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: token,
        };
        let fd = slot.fd.as_raw_fd();
        if let Err(e) = syscall!(epoll_ctl(
            self.epoll_fd(),
            libc::EPOLL_CTL_ADD,
            fd,
            &mut event
        )) {
            tracing::error!("epoll_ctl add failed: {e}");
            self.close(index, CloseReason::Error);
        }
    }

    /// Moves a connection forward as far as it can go without blocking.
    fn drive(&mut self, index: usize) {
        loop {
            let Some(slot) = self.slots[index].as_mut() else {
                return;
            };
            let fd = slot.fd.as_raw_fd();
            if !slot.output.is_empty() && slot.writable {
                match slot.output.flush(fd, &mut self.pool) {
                    Ok(Flush::Done) => slot.send_deadline = None,
                    Ok(Flush::WouldBlock) => {
                        slot.writable = false;
                        slot.send_deadline = Some(self.now + self.config.send_timeout);
                    }
                    Err(FlushError::FileShrunk) => {
                        self.close(index, CloseReason::FileShrunk);
                        return;
                    }
                    Err(FlushError::Io(e)) => {
                        tracing::debug!("send failed: {e}");
                        self.close(index, CloseReason::PeerGone);
                        return;
                    }
                }
            }
            if slot.state == State::Joined {
                if !self.pump(index) {
                    return;
                }
                continue;
            }
            let mut upstream_news = std::mem::take(&mut slot.upstream.notify);
            if let Some(up) = slot.upstream.attached() {
                if up.to_client.is_some() || up.to_upstream.is_some() {
                    let pumped = up.pump_splices(
                        Side {
                            fd,
                            readable: &mut slot.readable,
                            writable: &mut slot.writable,
                        },
                        !slot.output.is_empty(),
                    );
                    if let Some(idle) = pumped.moved {
                        slot.deadline = Some(self.now + idle);
                    }
                    upstream_news |= pumped.news;
                }
                upstream_news |= up.service(&mut self.pool);
            }
            match slot.state {
                // Handled before the upstream's service above.
                State::Joined => return,
                State::Draining => {
                    if !slot.output.is_empty() {
                        if !upstream_news {
                            return;
                        }
                        let next = self.call(index, false);
                        if !self.apply(index, next) {
                            return;
                        }
                        continue;
                    }
                    slot.state = State::Reading;
                    let next = self.call(index, false);
                    if !self.apply(index, next) {
                        return;
                    }
                }
                State::Closing => {
                    if !slot.output.is_empty() {
                        return;
                    }
                    // Nothing unread and nothing more expected: close at once, the FIN right
                    // behind the last response byte (as nginx does without a pending body).
                    let quiet = !slot.linger && slot.input.is_empty() && !slot.readable;
                    if slot.eof || quiet {
                        self.close(index, CloseReason::Done);
                        return;
                    }
                    let _ = syscall!(shutdown(fd, libc::SHUT_WR));
                    slot.state = State::Lingering;
                    slot.deadline = Some(self.now + self.config.linger_timeout);
                    let unread = slot.input.len();
                    slot.input.consume(unread);
                    slot.input.release_if_empty(&mut self.pool);
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
                State::Reading => {
                    let mut got = false;
                    // A splice to the upstream takes the client's bytes itself, and a
                    // backend that takes no more holds the client back.
                    let splicing = slot
                        .upstream
                        .attached()
                        .is_some_and(|up| up.to_upstream.is_some());
                    let held = slot.upstream.holds_client_back();
                    if slot.readable && !slot.eof && !splicing && !held {
                        if slot.input.len() >= self.config.max_input {
                            warn_input_left!(slot.input.len(), self.config.max_input);
                            self.close(index, CloseReason::Error);
                            return;
                        }
                        match slot.input.read_from(fd, &mut self.pool) {
                            Ok((0, _)) => {
                                slot.eof = true;
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
                                slot.input.release_if_empty(&mut self.pool);
                            }
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                            Err(_) => {
                                self.close(index, CloseReason::PeerGone);
                                return;
                            }
                        }
                    }
                    if !got && !upstream_news {
                        return;
                    }
                    let next = self.call(index, false);
                    if !self.apply(index, next) {
                        return;
                    }
                }
            }
        }
    }

    /// Calls the handler's `on_ready` (or `on_timeout`) for a connection, then carries out what
    /// it asked of the upstream.
    fn call(&mut self, index: usize, timeout: bool) -> Next {
        let epoll = self.epoll_fd();
        let slot = self.slots[index].as_mut().expect("live slot");
        let io = Io {
            input: &mut slot.input,
            output: &mut slot.output,
            pool: &mut self.pool,
            eof: slot.eof,
            now: self.now,
            deadline: &mut slot.deadline,
            upstream: &mut slot.upstream,
        };
        let next = common::call_handler(&mut self.handler, &mut slot.conn, io, timeout);
        let token = ((self.generations[index] as u64) << 32) | index as u64 | UPSTREAM_BIT;
        let mut registry = EpollRegistry { epoll, token };
        let join =
            slot.upstream
                .after_call(&mut registry, &mut self.upstreams, &mut self.pool, self.now);
        match join {
            Some(idle) => self.join(index, idle, next),
            None => next,
        }
    }

    /// Joins a connection with its upstream as the handler asked; Abort when it cannot be.
    fn join(&mut self, index: usize, idle: Duration, next: Next) -> Next {
        let slot = self.slots[index].as_mut().expect("live slot");
        let Some(up) = slot.upstream.attached() else {
            return Next::Abort;
        };
        let joint = match Joint::new(idle) {
            Ok(joint) => joint,
            Err(e) => {
                tracing::warn!("cannot join a connection with its upstream: {e}");
                return Next::Abort;
            }
        };
        // What either side sent that the handler has not passed on goes first.
        up.cross_over(&mut slot.input, &mut slot.output, &mut self.pool);
        slot.joint = Some(Box::new(joint));
        slot.deadline = Some(self.now + idle);
        next
    }

    /// Moves bytes of a joined connection; closes it when the joint is broken. When the joint
    /// is done, the connection closes like any other (its late input discarded for the linger
    /// time, so the answer is not reset away): true then, to drive it on.
    fn pump(&mut self, index: usize) -> bool {
        let epoll = self.epoll_fd();
        let slot = self.slots[index].as_mut().expect("live slot");
        let (Some(joint), Some(up)) = (slot.joint.as_mut(), slot.upstream.attached()) else {
            self.close(index, CloseReason::Error);
            return false;
        };
        if !up.output.is_empty() && up.writable {
            match up.output.flush(up.fd.as_raw_fd(), &mut self.pool) {
                Ok(Flush::Done) => {}
                Ok(Flush::WouldBlock) => up.writable = false,
                Err(_) => {
                    self.close(index, CloseReason::Error);
                    return false;
                }
            }
        }
        let client = Side {
            fd: slot.fd.as_raw_fd(),
            readable: &mut slot.readable,
            writable: &mut slot.writable,
        };
        match up.pump_joint(joint, client, !slot.output.is_empty()) {
            JointStep::Going { moved } => {
                if moved {
                    slot.deadline = Some(self.now + joint.idle);
                }
                false
            }
            JointStep::Finished => {
                slot.joint = None;
                let mut registry = EpollRegistry { epoll, token: 0 };
                slot.upstream
                    .close(&mut registry, &mut self.upstreams, &mut self.pool, self.now);
                slot.state = State::Closing;
                slot.linger = true;
                true
            }
            JointStep::Close(reason) => {
                self.close(index, reason);
                false
            }
        }
    }

    /// Records what the handler asked for; false when the connection is gone.
    fn apply(&mut self, index: usize, next: Next) -> bool {
        let slot = self.slots[index].as_mut().expect("live slot");
        slot.state = match next {
            Next::Abort => {
                self.close(index, CloseReason::Done);
                return false;
            }
            _ if slot.joint.is_some() => State::Joined,
            // Nothing more can arrive, so waiting for input would wait forever.
            Next::Read if slot.eof => State::Closing,
            Next::Read => State::Reading,
            Next::Drain => State::Draining,
            Next::Close => State::Closing,
            Next::Linger => {
                slot.linger = true;
                State::Closing
            }
        };
        true
    }

    /// Checks deadlines: send timeouts, handler deadlines, linger ends, paused accepts.
    fn sweep(&mut self) {
        if self.accept_pause.is_over(self.now) && self.watch_listeners(true).is_ok() {
            self.accept_pause.resume();
            for i in 0..self.listeners.len() {
                self.accept(i);
            }
        }
        for index in 0..self.slots.len() {
            let Some(slot) = self.slots[index].as_mut() else {
                continue;
            };
            match common::expired(self.now, slot.send_deadline, &slot.output, slot.deadline) {
                None => continue,
                Some(Expired::Send) => {
                    self.close(index, CloseReason::SendTimeout);
                    continue;
                }
                Some(Expired::Handler) => {}
            }
            slot.deadline = None;
            match slot.state {
                // A joint idle for its whole idle time ends.
                State::Lingering | State::Joined => self.close(index, CloseReason::Done),
                State::Closing => {}
                State::Reading | State::Draining => {
                    let next = self.call(index, true);
                    if self.apply(index, next) {
                        self.drive(index);
                    }
                }
            }
        }
    }

    fn close(&mut self, index: usize, reason: CloseReason) {
        let Some(mut slot) = self.slots[index].take() else {
            return;
        };
        slot.output.clear(&mut self.pool);
        let mut registry = EpollRegistry {
            epoll: self.epoll_fd(),
            token: 0,
        };
        slot.upstream
            .close(&mut registry, &mut self.upstreams, &mut self.pool, self.now);
        let unread = slot.input.len();
        slot.input.consume(unread);
        slot.input.release_if_empty(&mut self.pool);
        if self.open_connections == 1 {
            if let Some(hook) = &self.on_last_close {
                hook();
            }
        }
        // Closing the descriptor also removes it from the epoll set.
        drop(slot.fd);
        self.handler.on_close(slot.conn, reason);
        self.open_connections -= 1;
        self.active.fetch_sub(1, Ordering::Relaxed);
        self.generations[index] = self.generations[index].wrapping_add(1);
        self.free.push(index);
    }
}

/// Registers upstream sockets of one connection with the worker's epoll instance.
struct EpollRegistry {
    epoll: RawFd,
    token: u64,
}

impl Registry for EpollRegistry {
    fn register(&mut self, fd: RawFd) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: self.token,
        };
        syscall!(epoll_ctl(self.epoll, libc::EPOLL_CTL_ADD, fd, &mut event)).map(|_| ())
    }

    fn deregister(&mut self, fd: RawFd) {
        let mut event = libc::epoll_event { events: 0, u64: 0 };
        let _ = syscall!(epoll_ctl(self.epoll, libc::EPOLL_CTL_DEL, fd, &mut event));
    }
}
