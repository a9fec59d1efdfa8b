//! The process model: a parent that never touches a request and a pool of single-threaded
//! child processes, each serving one connection at a time.
//!
//! The parent binds the listeners, forks the children and then only keeps the pool at the
//! right size. Children report whether they are idle or busy on a scoreboard in shared
//! memory, one word each, which the parent reads. The parent sleeps until one of three things:
//!
//! - a child ended (SIGCHLD): it is reaped, and replaced at once if it crashed or served its
//!   `max_connections_per_child`;
//! - a child took a connection and saw no other child idle or starting ([`WAKE_SIGNAL`], sent
//!   by that child): the pool grows at once, by one batch (`ChildPool::grow`) sized to the
//!   connections already waiting in the listen backlog plus `min_spare`, up to
//!   `max_children`;
//! - every `MAINTENANCE_INTERVAL` (100 ms): the pool grows by the same batch while fewer than
//!   `min_spare` are idle, and while more than `max_spare` are, a quarter of the idle children
//!   beyond `max_spare` are retired (`retirements`).
//!
//! A child counts as busy from the moment it accepts its connection, whether it is still
//! waiting for the request head or not: the "waited too long for a head" threshold is zero.
//! A child serves its connection until it closes, so a child waiting for a head, however
//! briefly, can take no one else; any threshold would only hold the pool back by that long
//! behind a slow client, and a fast client's connection needs the child for its whole life
//! as much as a slow one's. Apache's prefork MPM counts a child reading a request as busy too
//! (only starting and ready children are idle in its `perform_idle_server_maintenance`); where
//! it is slow is the rate it grows at: one child in the first second without an idle one,
//! then 2, 4, ... up to 32 a second, so 50 clients that hold a child each keep a new request
//! waiting for seconds. Here one batch takes them all.
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

use fastpath_sys::{syscall, tcp_info, Epoll, Event, SharedMapping, TCP_LISTEN};

use crate::common::{self, NoGate, UNKNOWN_PEER};
use crate::listener::address_index;
use crate::loops::epoll::{LoopOptions, Worker};
use crate::loops::Env;
use crate::{signals, DriverConfig, Handler, Listeners, Opened};

/// How often the parent looks at the pool when no child asks it to.
const MAINTENANCE_INTERVAL: Duration = Duration::from_millis(100);
/// The signal a child sends the parent when it takes a connection and no other child is idle
/// or starting: the parent waits for it with SIGCHLD. SIGURG because nothing else here uses
/// it (no socket asks for out-of-band notice) and its default action is to ignore it, so a
/// late one that reaches some other process after the parent is gone does no harm; being a
/// standard signal, several sent before the parent wakes are one wake.
pub const WAKE_SIGNAL: libc::c_int = libc::SIGURG;
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
/// pool (for the connection limit), and one word per child slot (all EMPTY at first).
struct Scoreboard {
    active: SharedMapping<AtomicUsize>,
    words: SharedMapping<AtomicU32>,
}

impl Scoreboard {
    fn new(len: usize) -> io::Result<Scoreboard> {
        Ok(Scoreboard {
            active: SharedMapping::new(1)?,
            words: SharedMapping::new(len)?,
        })
    }

    /// Connections open across the pool.
    fn active(&self) -> &AtomicUsize {
        &self.active[0]
    }

    fn word(&self, slot: usize) -> &AtomicU32 {
        &self.words[slot]
    }

    /// Whether a child other than the one in `slot` (which has just turned busy) is idle or
    /// starting, so it will take the next connection. Two children turning busy at once
    /// both see the other's word as busy at worst (the fence orders each one's store before
    /// its loads), so the last free child never goes unnoticed; at worst both wake the
    /// parent, which costs one look at the scoreboard.
    fn any_available(&self, slot: usize) -> bool {
        std::sync::atomic::fence(Ordering::SeqCst);
        (0..self.words.len()).any(|other| {
            other != slot
                && matches!(
                    self.word(other).load(Ordering::SeqCst),
                    state::IDLE | state::STARTING
                )
        })
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
    /// The parent's process id, to wake it.
    parent: libc::pid_t,
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
        let epoll = Epoll::new()?;
        for (i, listener) in self.listeners.iter().enumerate() {
            // EPOLLEXCLUSIVE: a new connection wakes one idle child, not all of them.
            epoll.add(
                listener.as_raw_fd(),
                (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32,
                i as u64,
            )?;
        }
        let active = self.scoreboard.active();
        let refusals: Vec<Vec<u8>> = (0..self.addresses)
            .map(|address| handler.refusal(address).to_vec())
            .collect();
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
        let mut events = vec![Event::default(); self.listeners.len()];
        // The listeners the last wait reported that this child has not accepted from yet.
        let mut owed: Vec<usize> = Vec::with_capacity(self.listeners.len());
        let mut served = 0u64;
        let mut result = Ok(());
        'serving: loop {
            // At a graceful stop an idle child leaves at once and a busy one once its
            // connection is done (`serve_connection` lets it finish within the grace period).
            let done = self.prefork.max_connections_per_child > 0
                && served >= self.prefork.max_connections_per_child;
            if done || self.stop.load(Ordering::Relaxed) || signals::draining() || !turn_idle(word)
            {
                // A wait that reported a listener may have taken the one wake-up of a new
                // client (EPOLLEXCLUSIVE wakes one waiting child), and no other child hears of
                // that client until another one comes: on a reload, none of the new server's
                // does. So before it goes, the child takes one connection from each listener
                // it was told of, and serves them in turn (at a stop, closes them).
                for listener in owed.drain(..) {
                    if let Err(e) = self.serve_one(&mut worker, listener, &refusals) {
                        result = Err(e);
                        break;
                    }
                }
                break;
            }
            // Staying on: the next wait reports again a listener still readable (the
            // registration is level-triggered).
            owed.clear();
            let n = match epoll.wait(&mut events, IDLE_WAIT.as_millis() as i32) {
                Ok(n) => n,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            if n == 0 {
                // Keep the clock and the logs current while idle, and look at the word again.
                worker.tick();
                continue;
            }
            // Busy from here, whatever was asked meanwhile: a retirement is called off (the
            // parent retires another idle child on a later round), a stop waits for the
            // connections owed.
            word.store(state::BUSY, Ordering::SeqCst);
            owed.extend(events[..n].iter().map(|event| event.token() as usize));
            // One connection at a time, from the first listener that has one: the child is
            // idle again before it takes another.
            while !owed.is_empty() {
                match self.serve_one(&mut worker, owed.remove(0), &refusals) {
                    Ok(Taken::Nothing) => {}
                    Ok(Taken::Refused) => break,
                    Ok(Taken::Served) => {
                        served += 1;
                        break;
                    }
                    Err(e) => {
                        result = Err(e);
                        break 'serving;
                    }
                }
            }
        }
        worker.finish();
        result
    }

    /// Accepts a connection from listener `listener` if one waits, and serves it to the end
    /// (or refuses it, at the connection limit).
    fn serve_one<H: Handler>(
        &self,
        worker: &mut Worker<'_, H>,
        listener: usize,
        refusals: &[Vec<u8>],
    ) -> io::Result<Taken> {
        let Some((fd, peer)) = accept(self.listeners[listener].as_raw_fd()) else {
            return Ok(Taken::Nothing);
        };
        // This child is busy from now until the connection closes: if it was the last one
        // free, the pool must grow now, not at the parent's next round.
        if !self.scoreboard.any_available(self.slot) {
            // SAFETY: signalling the parent, whose pid was taken before the fork.
            unsafe { libc::kill(self.parent, WAKE_SIGNAL) };
        }
        let address = address_index(listener, self.addresses);
        let refusal = refusals.get(address).map_or(&[][..], Vec::as_slice);
        let active = self.scoreboard.active();
        if !common::admit_with(active, self.config.max_connections, &fd, refusal) {
            return Ok(Taken::Refused);
        }
        worker.tick();
        worker.serve_connection(fd, Opened::new(peer, address), &NoGate)?;
        worker.tick();
        Ok(Taken::Served)
    }
}

/// What [`Child::serve_one`] found on a listener.
enum Taken {
    /// No connection waited (another child took it).
    Nothing,
    /// One, refused at the connection limit.
    Refused,
    /// One, served to its end.
    Served,
}

/// Marks a child idle before it waits; false when the parent has retired it (only ever while
/// it was idle).
fn turn_idle(word: &AtomicU32) -> bool {
    let current = word.load(Ordering::Acquire);
    current == state::IDLE
        || (current != state::RETIRE
            && word
                .compare_exchange(current, state::IDLE, Ordering::AcqRel, Ordering::Acquire)
                .is_ok())
}

/// Accepts one connection if one is waiting (another child may have taken it).
fn accept(listener: i32) -> Option<(OwnedFd, SocketAddr)> {
    match fastpath_sys::accept(listener) {
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
    // The parent waits for SIGCHLD and WAKE_SIGNAL rather than sleeping, so a child that ends
    // is replaced, and a pool with no idle child grown, at once; children unblock them again
    // (see `become_child`).
    let wake_set = parent_signals();
    // SAFETY: changes this (only) thread's signal mask.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &wake_set, std::ptr::null_mut()) };
    // Each child would otherwise detect the CPU's features itself on its first search for a
    // byte (memchr asks std, which runs cpuid: a trap to the hypervisor on a virtual machine,
    // 13% of the CPU time of 200 children starting here). Detected once in the parent, the
    // answer is inherited with its memory.
    #[cfg(target_arch = "x86_64")]
    let _ = std::is_x86_feature_detected!("avx2");
    pool.spawn(prefork.start, child_main);
    let mut next_maintenance = Instant::now() + MAINTENANCE_INTERVAL;
    let mut reopen = signals::reopen_generation();
    while !stop.load(Ordering::Relaxed) && !signals::draining() {
        crate::liveness::beat();
        wait_for_signal(&wake_set, next_maintenance);
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
        // Whatever woke the parent, a pool short of idle children grows now: a child that
        // found none free has asked for it, and the periodic round is only the safety net.
        let (idle, alive) = pool.count();
        if idle < prefork.min_spare && alive < prefork.max_children {
            pool.grow(idle, alive, child_main);
        }
        if Instant::now() < next_maintenance {
            continue;
        }
        next_maintenance = Instant::now() + MAINTENANCE_INTERVAL;
        pool.retire(retirements(idle, prefork.max_spare));
    }
    if !stop.load(Ordering::Relaxed) {
        crate::liveness::beat();
        pool.drain(config.shutdown_timeout);
    }
    pool.stop_all();
    Ok(())
}

/// The signals the parent waits for: SIGCHLD and [`WAKE_SIGNAL`].
fn parent_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set before sigaddset reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigaddset(&mut set, WAKE_SIGNAL);
        set
    }
}

/// Waits until a child ends or asks for more children (both signals blocked in the parent),
/// another signal arrives, or `until`.
fn wait_for_signal(set: &libc::sigset_t, until: Instant) {
    let wait = until.saturating_duration_since(Instant::now());
    let timeout = libc::timespec {
        tv_sec: wait.as_secs() as libc::time_t,
        tv_nsec: wait.subsec_nanos() as libc::c_long,
    };
    // SAFETY: a blocked signal is taken from the pending set; nothing is written through the
    // null info pointer.
    unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &timeout) };
}

/// How many idle children one maintenance round retires: a quarter of those beyond
/// `max_spare`, at least one. The pool so shrinks back to the spare range within about two
/// seconds after any burst (200 extra children take 16 rounds), while a load that comes back
/// within a few rounds still finds most of the children it had, instead of paying for their
/// forks again. (Apache retires one a second: 200 extra children linger for minutes.)
fn retirements(idle: usize, max_spare: usize) -> usize {
    idle.saturating_sub(max_spare).div_ceil(4)
}

/// Connections waiting in the accept queues of `sockets`: established, not yet taken by a
/// child. For a listening socket Linux reports its accept queue's length as `tcpi_unacked`
/// (what `ss` shows as Recv-Q); a socket it cannot be read for counts none.
fn waiting_connections(sockets: &[OwnedFd]) -> usize {
    sockets
        .iter()
        .map(|socket| match tcp_info(socket.as_raw_fd()) {
            Ok(info) if info.state == TCP_LISTEN => info.unacked as usize,
            _ => 0,
        })
        .sum()
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
            // The parent blocks its signals to wait for them; a child has no use for that.
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &parent_signals(), std::ptr::null_mut());
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
            parent: self.parent as libc::pid_t,
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

    /// Forks one batch: enough children for the connections waiting in the listen backlog
    /// (none of the `idle` children will be free for them once they take the first ones) and
    /// `min_spare` idle ones after that, up to `max_children` in all. One batch, not
    /// Apache's doubling once a second: clients that hold a child each (slow clients, idle
    /// keep-alive connections) are all served within one round of forks.
    fn grow(
        &mut self,
        idle: usize,
        alive: usize,
        child_main: &dyn Fn(Child<'_>) -> io::Result<()>,
    ) {
        let wanted = (waiting_connections(&self.sockets) + self.prefork.min_spare)
            .saturating_sub(idle)
            .min(self.prefork.max_children - alive);
        self.spawn(wanted, child_main);
    }

    /// Asks up to `n` idle children (the highest slots, so low slots stay busy and warm) to
    /// exit.
    fn retire(&self, mut n: usize) {
        for slot in (0..self.pids.len()).rev() {
            if n == 0 {
                return;
            }
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
                n -= 1;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    /// `waiting_connections` of `socket` once it equals `n`, or what it is after a second
    /// (the handshake is finished by the kernel, a moment after `connect` returns at worst).
    fn waiting_once(socket: &OwnedFd, n: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            let waiting = waiting_connections(std::slice::from_ref(socket));
            if waiting == n || Instant::now() > deadline {
                return waiting;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn waiting_connections_is_the_accept_queue() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let socket = OwnedFd::from(listener.try_clone().unwrap());
        assert_eq!(waiting_once(&socket, 0), 0);
        let _clients: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
        assert_eq!(waiting_once(&socket, 3), 3);
        let _taken = listener.accept().unwrap();
        assert_eq!(waiting_once(&socket, 2), 2);
        // A connected socket is no listener: it has no accept queue to count.
        let connected = OwnedFd::from(TcpStream::connect(addr).unwrap());
        assert_eq!(waiting_connections(&[connected]), 0);
    }

    #[test]
    fn retirements_take_a_quarter_of_the_excess() {
        assert_eq!(retirements(0, 10), 0);
        assert_eq!(retirements(10, 10), 0);
        assert_eq!(retirements(11, 10), 1);
        assert_eq!(retirements(14, 10), 1);
        assert_eq!(retirements(15, 10), 2);
        assert_eq!(retirements(210, 10), 50);
    }
}
