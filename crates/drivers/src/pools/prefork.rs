//! The process model: a parent that never touches a request and a pool of single-threaded
//! child processes, each serving one connection at a time.
//!
//! The parent binds the listeners, forks the children and then only keeps the pool at the
//! right size: woken by SIGCHLD, it reaps children that ended and replaces at once one that
//! crashed or served its `max_connections_per_child`; every 100 ms it also forks more
//! when fewer than `min_spare` are idle (doubling the number forked per round while the
//! shortage lasts, up to [`MAX_SPAWN_RATE`], as Apache's prefork MPM does) and retires one
//! idle child per round while more than `max_spare` are. Children report whether they are idle
//! or busy on a scoreboard in shared memory, one word each, which the parent reads.
//!
//! A crash costs the connection of the child that crashed and nothing else: every other
//! connection lives in another process. The price is a process (and its own caches) per
//! connection being served, so this model suits backends-style isolation more than speed.
//!
//! Forking is only safe from a process with one thread: [`run`] refuses to start otherwise,
//! and the child body runs in the child after the fork, so everything a child needs is made
//! there. The HTTP server keeps its children single-threaded too (no log writer or file
//! watcher threads): a child serves one connection, so doing that work itself holds up no
//! one.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::{self, NoGate, UNKNOWN_PEER};
use crate::listener::address_index;
use crate::loops::epoll::{LoopOptions, Worker};
use crate::loops::Env;
use crate::sys::{self, syscall};
use crate::{signals, DriverConfig, Handler, Listeners, Opened};

/// How often the parent looks at the pool.
const MAINTENANCE_INTERVAL: Duration = Duration::from_millis(100);
/// Most children forked in one maintenance round (Apache's limit too).
pub const MAX_SPAWN_RATE: usize = 32;
/// How long an idle child waits for a connection before it looks at its scoreboard word and
/// the stop flag again; bounds how long retiring an idle child takes.
const IDLE_WAIT: Duration = Duration::from_millis(500);
/// Children in a row that fail before they ever serve, after which the parent gives up: a
/// child that cannot start (a root that vanished, a log that cannot be opened) would
/// otherwise be replaced as fast as it fails, for ever.
const MAX_FAILED_STARTS: usize = 10;
/// How long the parent waits for children to finish after asking them to stop, before it
/// kills them.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The process model's settings (Apache prefork's names in brackets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreforkConfig {
    /// Children forked at start (StartServers).
    pub start: usize,
    /// Fork more children while fewer than this are idle (MinSpareServers).
    pub min_spare: usize,
    /// Retire children while more than this are idle (MaxSpareServers).
    pub max_spare: usize,
    /// Most children at once: the most connections served at once (MaxRequestWorkers).
    pub max_children: usize,
    /// A child exits after serving this many connections, 0 for never
    /// (MaxConnectionsPerChild): bounds what a slow leak in a child can grow to.
    pub max_connections_per_child: u64,
}

impl Default for PreforkConfig {
    fn default() -> Self {
        PreforkConfig {
            start: 5,
            min_spare: 5,
            max_spare: 10,
            max_children: 256,
            max_connections_per_child: 0,
        }
    }
}

impl PreforkConfig {
    /// The settings made consistent: at least one child, spares within the maximum.
    fn normalised(mut self) -> Self {
        self.max_children = self.max_children.max(1);
        self.min_spare = self.min_spare.clamp(1, self.max_children);
        self.max_spare = self.max_spare.max(self.min_spare + 1);
        self.start = self.start.clamp(1, self.max_children);
        self
    }
}

/// A child's scoreboard word.
mod state {
    /// No child in this slot.
    pub const EMPTY: u32 = 0;
    /// Forked, not yet waiting for connections.
    pub const STARTING: u32 = 1;
    /// Waiting for a connection.
    pub const IDLE: u32 = 2;
    /// Serving a connection.
    pub const BUSY: u32 = 3;
    /// Asked by the parent to exit (only ever set on an idle child).
    pub const RETIRE: u32 = 4;
}

/// Memory shared by the parent and all children: the count of connections open across the
/// pool (for the connection limit), then one word per child slot.
struct Scoreboard {
    base: *mut libc::c_void,
    len: usize,
}

/// Where the slot words start, after the connection count.
const WORDS_OFFSET: usize = std::mem::size_of::<AtomicUsize>();

impl Scoreboard {
    fn bytes(len: usize) -> usize {
        WORDS_OFFSET + len * std::mem::size_of::<AtomicU32>()
    }

    fn new(len: usize) -> io::Result<Scoreboard> {
        let bytes = Self::bytes(len);
        // SAFETY: an anonymous shared mapping, checked for failure; zeroed memory is a valid
        // count and array of AtomicU32 (all EMPTY).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Scoreboard { base: ptr, len })
    }

    /// Connections open across the pool.
    fn active(&self) -> &AtomicUsize {
        // SAFETY: the start of the page-aligned mapping, which lives as long as self.
        unsafe { &*(self.base as *const AtomicUsize) }
    }

    fn word(&self, slot: usize) -> &AtomicU32 {
        assert!(slot < self.len);
        // SAFETY: in bounds of the mapping, 4-byte aligned, which lives as long as self.
        unsafe { &*((self.base as *const u8).add(WORDS_OFFSET) as *const AtomicU32).add(slot) }
    }
}

impl Drop for Scoreboard {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new(), unmapped once.
        unsafe {
            libc::munmap(self.base, Self::bytes(self.len));
        }
    }
}

/// What a child process gets: its slot, the inherited listeners and the way to serve them.
pub struct Child<'a> {
    slot: usize,
    scoreboard: &'a Scoreboard,
    listeners: &'a [OwnedFd],
    addresses: usize,
    config: &'a DriverConfig,
    prefork: PreforkConfig,
    stop: &'a AtomicBool,
}

impl Child<'_> {
    /// The child's slot number, below `max_children`: stable for the life of the child, and
    /// reused by a later child once this one is gone.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// Accepts and serves one connection at a time with `handler` until the parent retires
    /// this child, the stop flag is set or `max_connections_per_child` is reached.
    pub fn serve<H: Handler>(self, handler: H) -> io::Result<()> {
        let word = self.scoreboard.word(self.slot);
        let epoll = sys::epoll_create()?;
        for (i, listener) in self.listeners.iter().enumerate() {
            // EPOLLEXCLUSIVE: a new connection wakes one idle child, not all of them.
            sys::epoll_add(
                &epoll,
                listener.as_raw_fd(),
                libc::EPOLLIN | libc::EPOLLEXCLUSIVE,
                i as u64,
            )?;
        }
        let active = self.scoreboard.active();
        let refusal = handler.refusal().to_vec();
        let mut worker = Worker::new(
            Vec::new(),
            handler,
            Env {
                config: self.config,
                active,
                stop: self.stop,
            },
            LoopOptions::default(),
        )?;
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; self.listeners.len()];
        let mut served = 0u64;
        let mut result = Ok(());
        // At a graceful stop an idle child leaves at once and a busy one once its connection
        // is done (`serve_connection` lets it finish within the grace period).
        'serving: while !self.stop.load(Ordering::Relaxed) && !signals::draining() {
            let current = word.load(Ordering::Acquire);
            if current == state::RETIRE
                || (current != state::IDLE
                    && word
                        .compare_exchange(current, state::IDLE, Ordering::AcqRel, Ordering::Acquire)
                        .is_err())
            {
                // Retired by the parent while idle.
                break;
            }
            let n = match sys::epoll_wait(&epoll, &mut events, IDLE_WAIT.as_millis() as i32) {
                Ok(n) => n,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            if n == 0 || self.stop.load(Ordering::Relaxed) || signals::draining() {
                // Keep the clock and the logs current while idle, and look at the word again.
                worker.tick();
                continue;
            }
            if word
                .compare_exchange(
                    state::IDLE,
                    state::BUSY,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_err()
            {
                break;
            }
            for event in &events[..n] {
                let listener = event.u64 as usize;
                let Some((fd, peer)) = accept(self.listeners[listener].as_raw_fd()) else {
                    continue;
                };
                if !common::admit_with(active, self.config.max_connections, &fd, &refusal) {
                    break;
                }
                worker.tick();
                if let Err(e) = worker.serve_connection(
                    fd,
                    Opened::new(peer, address_index(listener, self.addresses)),
                    &NoGate,
                ) {
                    result = Err(e);
                    break 'serving;
                }
                worker.tick();
                served += 1;
                if self.prefork.max_connections_per_child > 0
                    && served >= self.prefork.max_connections_per_child
                {
                    break 'serving;
                }
                // One connection at a time: back to idle before taking another.
                break;
            }
        }
        worker.finish();
        result
    }
}

/// Accepts one connection if one is waiting (another child may have taken it).
fn accept(listener: i32) -> Option<(OwnedFd, SocketAddr)> {
    match sys::accept(listener) {
        Ok((fd, peer)) => Some((fd, peer.unwrap_or(UNKNOWN_PEER))),
        Err(e) => {
            if e.raw_os_error().is_some_and(common::out_of_descriptors) {
                tracing::warn!("accept failed: {e} (out of file descriptors or memory)");
                std::thread::sleep(common::ACCEPT_PAUSE);
            }
            None
        }
    }
}

/// Runs the pool until `stop` is set: forks children that each run `child_main`, keeps the
/// pool sized, then stops the children. Returns in the parent only; children end with
/// `_exit`, status 0 when `child_main` succeeded.
pub fn run(
    listeners: Listeners,
    config: &DriverConfig,
    prefork: PreforkConfig,
    stop: &AtomicBool,
    child_main: &dyn Fn(Child<'_>) -> io::Result<()>,
) -> io::Result<()> {
    let threads = std::fs::read_dir("/proc/self/task").map_or(1, |tasks| tasks.count());
    if threads > 1 {
        return Err(io::Error::other(format!(
            "the prefork model must start before any other thread ({threads} threads running)"
        )));
    }
    let prefork = prefork.normalised();
    let addresses = listeners.local_addrs.len();
    let inherited = listeners.inherited;
    let sockets = listeners.into_flat();
    let mut pool = ChildPool {
        inherited,
        scoreboard: Scoreboard::new(prefork.max_children)?,
        pids: vec![None; prefork.max_children],
        sockets,
        addresses,
        config,
        prefork,
        stop,
        parent: std::process::id(),
        failed_starts: 0,
    };
    // The parent waits for SIGCHLD rather than sleeping, so a child that ends is replaced at
    // once; children unblock it again (see `become_child`).
    let child_ended = sigchld_set();
    // SAFETY: changes this (only) thread's signal mask.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &child_ended, std::ptr::null_mut()) };
    pool.spawn(prefork.start, child_main);
    let mut spawn_rate = 1;
    let mut next_maintenance = Instant::now() + MAINTENANCE_INTERVAL;
    let mut reopen = signals::reopen_generation();
    while !stop.load(Ordering::Relaxed) && !signals::draining() {
        crate::liveness::beat();
        wait_for_child(&child_ended, next_maintenance);
        let ended = pool.reap();
        if stop.load(Ordering::Relaxed) || signals::draining() {
            break;
        }
        pool.pass_signals(&mut reopen);
        signals::supervise();
        if signals::draining() {
            break;
        }
        if pool.failed_starts >= MAX_FAILED_STARTS {
            pool.stop_all();
            return Err(io::Error::other(format!(
                "{MAX_FAILED_STARTS} children in a row failed before serving; giving up"
            )));
        }
        if ended > 0 {
            pool.spawn(ended, child_main);
        }
        if Instant::now() < next_maintenance {
            continue;
        }
        next_maintenance = Instant::now() + MAINTENANCE_INTERVAL;
        let (idle, alive) = pool.count();
        if idle < prefork.min_spare && alive < prefork.max_children {
            let wanted = (prefork.min_spare - idle).min(spawn_rate);
            pool.spawn(wanted, child_main);
            spawn_rate = (spawn_rate * 2).min(MAX_SPAWN_RATE);
        } else {
            spawn_rate = 1;
            if idle > prefork.max_spare {
                pool.retire_one();
            }
        }
    }
    if !stop.load(Ordering::Relaxed) {
        crate::liveness::beat();
        pool.drain(config.shutdown_timeout);
    }
    pool.stop_all();
    Ok(())
}

/// The signal set holding SIGCHLD.
fn sigchld_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set before sigaddset reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        set
    }
}

/// Waits until a child ends (SIGCHLD, blocked in the parent), another signal arrives, or
/// `until`.
fn wait_for_child(child_ended: &libc::sigset_t, until: Instant) {
    let wait = until.saturating_duration_since(Instant::now());
    let timeout = libc::timespec {
        tv_sec: wait.as_secs() as libc::time_t,
        tv_nsec: wait.subsec_nanos() as libc::c_long,
    };
    // SAFETY: a blocked signal is taken from the pending set; nothing is written through the
    // null info pointer.
    unsafe { libc::sigtimedwait(child_ended, std::ptr::null_mut(), &timeout) };
}

/// The parent's view of its children.
struct ChildPool<'a> {
    scoreboard: Scoreboard,
    pids: Vec<Option<libc::pid_t>>,
    sockets: Vec<OwnedFd>,
    /// The sockets are a service manager's (socket activation), to be left listening.
    inherited: bool,
    /// How many addresses the sockets listen on (see [`address_index`]).
    addresses: usize,
    config: &'a DriverConfig,
    prefork: PreforkConfig,
    stop: &'a AtomicBool,
    parent: u32,
    /// Children in a row that ended in failure before they were ever idle.
    failed_starts: usize,
}

impl ChildPool<'_> {
    /// Idle children and children alive; a child seen idle or busy ends a run of failed
    /// starts.
    fn count(&mut self) -> (usize, usize) {
        let mut idle = 0;
        let mut alive = 0;
        for (slot, pid) in self.pids.iter().enumerate() {
            if pid.is_some() {
                alive += 1;
                if matches!(
                    self.scoreboard.word(slot).load(Ordering::Acquire),
                    state::IDLE | state::BUSY
                ) {
                    self.failed_starts = 0;
                }
                // A starting child is about to be idle: counting it avoids forking twice.
                let word = self.scoreboard.word(slot).load(Ordering::Acquire);
                if word == state::IDLE || word == state::STARTING {
                    idle += 1;
                }
            }
        }
        (idle, alive)
    }

    /// Forks up to `n` children into free slots.
    fn spawn(&mut self, n: usize, child_main: &dyn Fn(Child<'_>) -> io::Result<()>) {
        for _ in 0..n {
            let Some(slot) = self.pids.iter().position(Option::is_none) else {
                return;
            };
            self.scoreboard
                .word(slot)
                .store(state::STARTING, Ordering::Release);
            // SAFETY: the process has one thread (checked in run), so the child starts
            // with consistent memory.
            let pid = unsafe { libc::fork() };
            if pid < 0 {
                let e = io::Error::last_os_error();
                self.scoreboard
                    .word(slot)
                    .store(state::EMPTY, Ordering::Release);
                tracing::error!("cannot fork a child: {e}");
                return;
            }
            if pid == 0 {
                self.become_child(slot, child_main);
            }
            self.pids[slot] = Some(pid);
        }
    }

    /// Runs in a freshly forked child and never returns.
    fn become_child(&self, slot: usize, child_main: &dyn Fn(Child<'_>) -> io::Result<()>) -> ! {
        // SAFETY: plain system calls in the child.
        unsafe {
            // The parent blocks SIGCHLD to wait for it; a child has no use for that.
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &sigchld_set(), std::ptr::null_mut());
            // A parent that dies without stopping its children (killed) takes them along;
            // SIGTERM, so they finish their connection first (a graceful stop, unbounded by
            // the parent's wait but by their own grace period).
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            if libc::getppid() as u32 != self.parent {
                libc::_exit(0);
            }
        }
        let child = Child {
            slot,
            scoreboard: &self.scoreboard,
            listeners: &self.sockets,
            addresses: self.addresses,
            config: self.config,
            prefork: self.prefork,
            stop: self.stop,
        };
        let status = match child_main(child) {
            Ok(()) => 0,
            Err(e) => {
                tracing::error!("child {slot} failed: {e}");
                1
            }
        };
        // SAFETY: ends the child without running anything inherited from the parent (buffered
        // output would otherwise be written twice).
        unsafe { libc::_exit(status) }
    }

    /// Collects children that ended; returns how many of them must be replaced: those that
    /// crashed (ended by a signal or with a failure status) and those that ended on their own
    /// after `max_connections_per_child`, but not those the parent retired.
    fn reap(&mut self) -> usize {
        let mut ended = 0;
        loop {
            let mut status = 0;
            // SAFETY: waitpid on our own children, without blocking.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                return ended;
            }
            let Some(slot) = self.pids.iter().position(|p| *p == Some(pid)) else {
                continue;
            };
            self.pids[slot] = None;
            let word = self
                .scoreboard
                .word(slot)
                .swap(state::EMPTY, Ordering::AcqRel);
            if libc::WIFSIGNALED(status) {
                let signal = libc::WTERMSIG(status);
                if !self.stop.load(Ordering::Relaxed) {
                    tracing::warn!(
                        "child {slot} (pid {pid}) was ended by signal {signal} while {}; replacing it",
                        if word == state::BUSY { "serving a connection" } else { "idle" }
                    );
                    ended += 1;
                }
            } else if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) != 0 {
                tracing::warn!(
                    "child {slot} (pid {pid}) exited with status {}; replacing it",
                    libc::WEXITSTATUS(status)
                );
                ended += 1;
                if word == state::STARTING {
                    self.failed_starts += 1;
                }
            } else if word != state::RETIRE && !self.stop.load(Ordering::Relaxed) {
                // Served its `max_connections_per_child`.
                ended += 1;
            }
        }
    }

    /// Asks one idle child (the highest slot, so low slots stay busy and warm) to exit.
    fn retire_one(&self) {
        for slot in (0..self.pids.len()).rev() {
            if self.pids[slot].is_some()
                && self
                    .scoreboard
                    .word(slot)
                    .compare_exchange(
                        state::IDLE,
                        state::RETIRE,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok()
            {
                return;
            }
        }
    }

    /// Sends `signal` to every child.
    fn signal_all(&self, signal: libc::c_int) {
        for pid in self.pids.iter().flatten() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(*pid, signal) };
        }
    }

    /// Passes on to the children what the signals asked of this process (the children have
    /// the same handlers, see `crate::signals`): every child reopens its logs after SIGUSR1
    /// or SIGHUP, and one child, the first alive, takes SIGHUP and SIGUSR2 so that what they
    /// lead to is said once.
    fn pass_signals(&self, reopen: &mut u64) {
        let generation = signals::reopen_generation();
        if generation != *reopen {
            *reopen = generation;
            self.signal_all(libc::SIGUSR1);
        }
        if signals::has_supervisor() {
            // The service's supervisor, in this process, answers them.
            return;
        }
        let first = self.pids.iter().flatten().next().copied();
        for (noted, signal) in [
            (signals::take_hangup(), libc::SIGHUP),
            (signals::take_usr2(), libc::SIGUSR2),
        ] {
            if let (true, Some(pid)) = (noted, first) {
                // SAFETY: signalling our own child.
                unsafe { libc::kill(pid, signal) };
            }
        }
    }

    /// A graceful stop: stops the listening sockets, asks every child to stop gracefully
    /// (SIGTERM: idle children leave, busy ones finish their connection) and waits for them
    /// within the grace period (theirs, plus a moment for their last turn). A second signal
    /// to stop (the stop flag) ends the wait.
    fn drain(&mut self, grace: Duration) {
        // An inherited socket is the service manager's, which keeps it listening across
        // restarts (clients wait in its backlog for the next start): only our copies close.
        // A socket handed over to a new server is its now, to be left listening as well.
        let shared = self.inherited || signals::handed_over();
        for socket in self.sockets.iter().filter(|_| !shared) {
            // On Linux shutdown(SHUT_RD) of a listening socket stops it listening for every
            // process that holds it (inet_shutdown disconnects a listener): new clients are
            // refused at once, while a busy child that holds a copy finishes its connection.
            let _ = syscall!(shutdown(socket.as_raw_fd(), libc::SHUT_RD));
        }
        self.sockets.clear();
        self.signal_all(libc::SIGTERM);
        let give_up = Instant::now() + grace + Duration::from_secs(1);
        while self.pids.iter().any(Option::is_some)
            && !self.stop.load(Ordering::Relaxed)
            && Instant::now() < give_up
        {
            self.reap();
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stops every child at once (SIGINT sets their stop flag: a SIGTERM would only begin a
    /// graceful stop), waits for them, and kills those still there after [`STOP_GRACE`].
    fn stop_all(&mut self) {
        self.signal_all(libc::SIGINT);
        let deadline = Instant::now() + STOP_GRACE;
        while self.pids.iter().any(Option::is_some) {
            self.reap();
            if Instant::now() >= deadline {
                for pid in self.pids.iter().flatten() {
                    // SAFETY: signalling our own child.
                    unsafe { libc::kill(*pid, libc::SIGKILL) };
                }
                let mut status = 0;
                for pid in self.pids.iter_mut() {
                    if let Some(p) = pid.take() {
                        // SAFETY: waiting for our own child, which was just killed.
                        unsafe { libc::waitpid(p, &mut status, 0) };
                    }
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
