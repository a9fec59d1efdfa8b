//! The event-loop model: one edge-triggered epoll loop per worker thread.
//!
//! Each worker owns its listeners (SO_REUSEPORT), its connections, its buffer pool and its
//! handler; the only thing shared between workers is the count of open connections, touched
//! once per accept and once per close.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::buffers::{BufferPool, Flush, FlushError, Input, Output};
use crate::common::{self, warn_out_of_descriptors, AcceptPause, Expired, UNKNOWN_PEER};
use crate::sys::{socket_addr, syscall};
use crate::upstream::{Registry, UpstreamPool, UpstreamPort};
use crate::{CloseReason, DriverConfig, Handler, Io, Listeners, Next, TICK};

/// Set in a connection token's index half for events of its upstream socket.
const UPSTREAM_BIT: u64 = 1 << 31;
/// Idle upstream connections kept per backend address and worker.
const IDLE_UPSTREAMS_PER_KEY: usize = 64;
/// Idle upstream connections older than this are closed, not reused (backends commonly
/// close idle keep-alive connections after 5 to 75 seconds).
const UPSTREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(4);
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
    common::run_workers(listeners, make_handler, |sockets, handler, active| {
        Worker::new(sockets, handler, config, active, stop)?.run()
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Reading,
    Draining,
    Closing,
    Lingering,
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
}

struct Worker<'a, H: Handler> {
    epoll: OwnedFd,
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
    fn new(
        listeners: Vec<OwnedFd>,
        handler: H,
        config: &'a DriverConfig,
        active: &'a AtomicUsize,
        stop: &'static AtomicBool,
    ) -> io::Result<Self> {
        let epfd = syscall!(epoll_create1(libc::EPOLL_CLOEXEC))?;
        // SAFETY: epoll_create1 returned a fresh descriptor that nothing else owns.
        let epoll = unsafe { OwnedFd::from_raw_fd(epfd) };
        let worker = Worker {
            epoll,
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
            upstreams: UpstreamPool::new(UPSTREAM_IDLE_TIMEOUT, IDLE_UPSTREAMS_PER_KEY),
        };
        worker.watch_listeners(true)?;
        Ok(worker)
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
                self.epoll.as_raw_fd(),
                op,
                listener.as_raw_fd(),
                &mut event
            ))?;
        }
        Ok(())
    }

    fn run(mut self) -> io::Result<()> {
        let mut events: Vec<libc::epoll_event> =
            vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS_PER_WAIT];
        let mut next_tick = Instant::now() + TICK;
        while !self.stop.load(Ordering::Relaxed) {
            let timeout = next_tick
                .saturating_duration_since(Instant::now())
                .as_millis() as i32;
            let n = match syscall!(epoll_wait(
                self.epoll.as_raw_fd(),
                events.as_mut_ptr(),
                EVENTS_PER_WAIT as i32,
                timeout.max(1)
            )) {
                Ok(n) => n as usize,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                Err(e) => return Err(e),
            };
            self.now = Instant::now();
            for event in &events[..n] {
                let token = event.u64;
                if token >= LISTENER_TOKEN {
                    self.accept((token - LISTENER_TOKEN) as usize);
                    continue;
                }
                let index = (token & (UPSTREAM_BIT - 1)) as usize;
                let generation = (token >> 32) as u32;
                if self.generations.get(index) != Some(&generation) {
                    continue;
                }
                let Some(slot) = self.slots[index].as_mut() else {
                    continue;
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
                    continue;
                }
                if flags & (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) != 0
                {
                    slot.readable = true;
                }
                if flags & (libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) != 0 {
                    // The end is coming: keep reading past short reads until it is seen, as
                    // no further edge will announce it.
                    slot.hangup = true;
                }
                if flags & (libc::EPOLLOUT | libc::EPOLLHUP | libc::EPOLLERR) != 0 {
                    slot.writable = true;
                }
                self.drive(index);
            }
            if self.now >= next_tick {
                next_tick = self.now + TICK;
                self.sweep();
                self.upstreams.sweep(self.now);
                self.handler.on_tick(self.now);
            }
        }
        for index in 0..self.slots.len() {
            if self.slots[index].is_some() {
                self.close(index, CloseReason::Shutdown);
            }
        }
        self.handler.on_stop();
        Ok(())
    }

    fn accept(&mut self, listener_index: usize) {
        if self.accept_pause.is_paused() {
            return;
        }
        let listen_fd = self.listeners[listener_index].as_raw_fd();
        for _ in 0..ACCEPT_BATCH {
            let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            let accepted = syscall!(accept4(
                listen_fd,
                &mut storage as *mut _ as *mut libc::sockaddr,
                &mut len,
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC
            ));
            match accepted {
                Ok(fd) => {
                    // SAFETY: accept4 returned a fresh descriptor that nothing else owns.
                    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                    let peer = socket_addr(&storage).unwrap_or(UNKNOWN_PEER);
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
        let token = ((self.generations[index] as u64) << 32) | index as u64;
        let mut event = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: token,
        };
        if let Err(e) = syscall!(epoll_ctl(
            self.epoll.as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            fd.as_raw_fd(),
            &mut event
        )) {
            tracing::error!("epoll_ctl add failed: {e}");
            self.free.push(index);
            self.active.fetch_sub(1, Ordering::Relaxed);
            return;
        }
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
            upstream: UpstreamPort::new(true),
        });
        self.drive(index);
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
            let mut upstream_news = std::mem::take(&mut slot.upstream.notify);
            if let Some(up) = slot.upstream.attached() {
                upstream_news |= up.service(&mut self.pool);
            }
            match slot.state {
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
                    if slot.readable && !slot.eof {
                        if slot.input.len() >= self.config.max_input {
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

    /// Calls the handler's `on_ready` (or `on_timeout`) for a connection.
    fn call(&mut self, index: usize, timeout: bool) -> Next {
        let slot = self.slots[index].as_mut().expect("live slot");
        let mut io = Io {
            input: &mut slot.input,
            output: &mut slot.output,
            pool: &mut self.pool,
            eof: slot.eof,
            now: self.now,
            deadline: &mut slot.deadline,
            upstream: &mut slot.upstream,
        };
        let next = if timeout {
            self.handler.on_timeout(&mut slot.conn, &mut io)
        } else {
            self.handler.on_ready(&mut slot.conn, &mut io)
        };
        slot.input.release_if_empty(&mut self.pool);
        let token = ((self.generations[index] as u64) << 32) | index as u64 | UPSTREAM_BIT;
        let mut registry = EpollRegistry {
            epoll: self.epoll.as_raw_fd(),
            token,
        };
        if slot
            .upstream
            .apply(&mut registry, &mut self.upstreams, &mut self.pool, self.now)
        {
            slot.upstream.notify = true;
        }
        next
    }

    /// Records what the handler asked for; false when the connection is gone.
    fn apply(&mut self, index: usize, next: Next) -> bool {
        let slot = self.slots[index].as_mut().expect("live slot");
        slot.state = match next {
            // Nothing more can arrive, so waiting for input would wait forever.
            Next::Read if slot.eof => State::Closing,
            Next::Read => State::Reading,
            Next::Drain => State::Draining,
            Next::Close => State::Closing,
            Next::Linger => {
                slot.linger = true;
                State::Closing
            }
            Next::Abort => {
                self.close(index, CloseReason::Done);
                return false;
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
                State::Lingering => self.close(index, CloseReason::Done),
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
        slot.upstream.close(&mut self.pool);
        let unread = slot.input.len();
        slot.input.consume(unread);
        slot.input.release_if_empty(&mut self.pool);
        // Closing the descriptor also removes it from the epoll set.
        drop(slot.fd);
        self.handler.on_close(slot.conn, reason);
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
