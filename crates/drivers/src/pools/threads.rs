//! The thread-pool model: a fixed pool of threads, each serving one connection at a time with
//! blocking waits, fed by one accepting thread.
//!
//! Two ideas from the completion-port design shape it. Idle threads are woken last-in
//! first-out, so the few threads that keep getting work stay warm in the caches while the rest
//! sleep. And the number of threads running at once is bounded apart from the pool size: a
//! thread holds a turn while it runs handler code and gives it back whenever it blocks, so a
//! thread waiting for a slow client or backend lets another run, while no more threads than
//! the bound compete for the cores.
//!
//! A pool thread runs the same loop as the epoll model over its one connection (and the
//! connections linked to it), so every feature of the handler works unchanged; it blocks in
//! that loop's wait. Its idle linked connections (a proxy's kept backend connections) stay
//! with it for its next client. The accepting thread accepts only while some pool thread is idle: clients
//! beyond the pool wait in the listen backlog, as with Apache's worker MPM.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use fastpath_sys::{Epoll, Event};

use crate::common::{self, warn_out_of_descriptors, AcceptPause, Gate, UNKNOWN_PEER};
use crate::listener::address_index;
use crate::loops::epoll::{LoopOptions, Worker};
use crate::loops::Env;
use crate::{signals, DriverConfig, Handler, Listeners, Opened, TICK};

/// How long blocked threads wait before they look at the stop flag again.
const STOP_POLL: Duration = Duration::from_millis(100);

/// The thread-pool model's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadsConfig {
    /// Threads in the pool: the most connections served at once.
    pub threads: usize,
    /// Threads running handler code at once (the rest wait for a turn); 0 means one per CPU.
    pub max_active: usize,
    /// Stack size of a pool thread, in bytes.
    pub stack_size: usize,
}

impl Default for ThreadsConfig {
    fn default() -> Self {
        ThreadsConfig {
            threads: 256,
            max_active: 0,
            // The handler keeps its buffers on the heap; a small stack lets a large pool cost
            // little address space.
            stack_size: 256 * 1024,
        }
    }
}

/// The bound on threads running at once: a counting semaphore.
pub(crate) struct ActiveBound {
    running: Mutex<usize>,
    turn_free: Condvar,
    max: usize,
}

impl ActiveBound {
    pub(crate) fn new(max: usize) -> Self {
        ActiveBound {
            running: Mutex::new(0),
            turn_free: Condvar::new(),
            max: max.max(1),
        }
    }
}

impl Gate for ActiveBound {
    fn leave(&self) {
        let mut running = lock(&self.running);
        *running -= 1;
        drop(running);
        self.turn_free.notify_one();
    }

    fn enter(&self) {
        let mut running = lock(&self.running);
        while *running >= self.max {
            running = self
                .turn_free
                .wait(running)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *running += 1;
    }
}

/// A handler panicking while holding a lock leaves the protected data consistent (each
/// critical section is a single update), so a poisoned lock is used as it is.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Where the accepting thread hands a connection to one pool thread.
#[derive(Default)]
struct Mailbox {
    connection: Mutex<Option<(OwnedFd, Opened)>>,
    delivered: Condvar,
}

/// What the accepting thread and the pool threads share.
struct Pool {
    /// Idle threads, the most recently idle last: it is the one woken next.
    idle: Mutex<Vec<usize>>,
    some_idle: Condvar,
    mailboxes: Vec<Mailbox>,
    bound: ActiveBound,
    /// What a refused connection is sent, by listener, taken from the first pool thread's
    /// handler.
    refusals: OnceLock<Vec<Vec<u8>>>,
}

pub(crate) fn run<H, F>(
    listeners: Listeners,
    config: &DriverConfig,
    make_handler: &F,
    stop: &AtomicBool,
    threads: ThreadsConfig,
) -> io::Result<()>
where
    H: Handler,
    F: Fn(usize) -> H + Sync,
{
    let addresses = listeners.local_addrs.len();
    let sockets = listeners.into_flat();
    let max_active = crate::worker_count(threads.max_active);
    let pool = Pool {
        idle: Mutex::new(Vec::with_capacity(threads.threads)),
        some_idle: Condvar::new(),
        mailboxes: (0..threads.threads).map(|_| Mailbox::default()).collect(),
        bound: ActiveBound::new(max_active),
        refusals: OnceLock::new(),
    };
    let active = AtomicUsize::new(0);
    let (pool, active) = (&pool, &active);
    std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for id in 0..threads.threads {
            let handle = std::thread::Builder::new()
                .name(format!("fastpath-t{id}"))
                .stack_size(threads.stack_size)
                .spawn_scoped(scope, move || -> io::Result<()> {
                    let handler = make_handler(id);
                    let refusals = (0..addresses).map(|a| handler.refusal(a).to_vec());
                    let _ = pool.refusals.set(refusals.collect());
                    let worker = Worker::new(
                        Vec::new(),
                        handler,
                        Env {
                            config,
                            active,
                            stop,
                        },
                        LoopOptions::default(),
                    )?;
                    serve_handed_connections(id, worker, pool, stop)
                });
            match handle {
                Ok(handle) => handles.push(handle),
                Err(e) => {
                    // Fewer threads than configured would silently shrink the server: stop.
                    stop.store(true, Ordering::Relaxed);
                    tracing::error!("cannot start pool thread {id}: {e}");
                    break;
                }
            }
        }
        let accepted = accept_loop(sockets, addresses, config, pool, active, stop);
        // A graceful stop ends the loop: the beat that sees it.
        crate::liveness::beat();
        if signals::draining() {
            // The pool threads let their connections finish within the grace period and then
            // close them (`Worker::serve_connection`); the margin covers their last turn.
            let give_up = Instant::now() + config.shutdown_timeout + TICK * 5;
            while active.load(Ordering::Relaxed) > 0
                && !stop.load(Ordering::Relaxed)
                && Instant::now() < give_up
            {
                std::thread::sleep(TICK);
            }
        }
        stop.store(true, Ordering::Relaxed);
        for mailbox in &pool.mailboxes {
            mailbox.delivered.notify_all();
        }
        let mut result = accepted;
        for handle in handles {
            match handle.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = Err(e),
                Err(_) => result = Err(io::Error::other("a pool thread panicked")),
            }
        }
        result
    })
}

/// A pool thread: waits idle until the accepting thread hands it a connection, serves it to
/// the end, and goes back to the idle stack.
fn serve_handed_connections<'a, H: Handler>(
    id: usize,
    mut worker: Worker<'a, H>,
    pool: &'a Pool,
    stop: &AtomicBool,
) -> io::Result<()> {
    let mailbox = &pool.mailboxes[id];
    let go_idle = move || {
        lock(&pool.idle).push(id);
        pool.some_idle.notify_one();
    };
    // Back on the idle stack as the connection closes, before its client sees the end: a
    // client that connects again at once finds this warm thread on top.
    go_idle();
    worker.set_on_last_close(Box::new(go_idle));
    loop {
        let mut slot = lock(&mailbox.connection);
        let (fd, opened) = loop {
            if let Some(connection) = slot.take() {
                break connection;
            }
            if stop.load(Ordering::Relaxed) {
                drop(slot);
                worker.finish();
                return Ok(());
            }
            let (guard, waited) = mailbox
                .delivered
                .wait_timeout(slot, STOP_POLL)
                .unwrap_or_else(PoisonError::into_inner);
            slot = guard;
            if waited.timed_out() && id == 0 {
                // One idle thread keeps ticking, so that what a signal asks of the handler
                // (see `crate::signals`) is done with no traffic too.
                drop(slot);
                worker.tick();
                slot = lock(&mailbox.connection);
            }
        };
        drop(slot);
        pool.bound.enter();
        // The clock and the logs have not been ticked while the thread slept.
        worker.tick();
        let served = worker.serve_connection(fd, opened, &pool.bound);
        // Flush the connection's log lines now: an idle thread has no ticks.
        worker.tick();
        pool.bound.leave();
        served?;
    }
}

/// Accepts connections while a pool thread is idle and hands each to the thread that became
/// idle last. Returns when the stop flag is set, or at a graceful stop, closing the listeners
/// then so that new clients are refused at once.
fn accept_loop(
    sockets: Vec<OwnedFd>,
    addresses: usize,
    config: &DriverConfig,
    pool: &Pool,
    active: &AtomicUsize,
    stop: &AtomicBool,
) -> io::Result<()> {
    let epoll = Epoll::new()?;
    for (i, socket) in sockets.iter().enumerate() {
        epoll.add(socket.as_raw_fd(), libc::EPOLLIN as u32, i as u64)?;
    }
    let mut pause = AcceptPause::default();
    let mut events = vec![Event::default(); sockets.len().max(1)];
    while !stop.load(Ordering::Relaxed) && !signals::draining() {
        crate::liveness::beat();
        if !wait_for_idle_thread(pool, stop) {
            break;
        }
        let n = epoll.wait(&mut events, STOP_POLL.as_millis() as i32)?;
        for event in &events[..n] {
            let listener = sockets[event.token() as usize].as_raw_fd();
            let (fd, peer) = match fastpath_sys::accept(listener) {
                Ok(accepted) => accepted,
                Err(e) => match e.raw_os_error() {
                    Some(errno) if common::out_of_descriptors(errno) => {
                        let now = Instant::now();
                        warn_out_of_descriptors!(pause, now, &e, active.load(Ordering::Relaxed));
                        std::thread::sleep(common::ACCEPT_PAUSE);
                        continue;
                    }
                    _ => continue,
                },
            };
            let address = address_index(event.token() as usize, addresses);
            let refusal = pool
                .refusals
                .get()
                .and_then(|refusals| refusals.get(address))
                .map_or(&[][..], Vec::as_slice);
            if !common::admit_with(active, config.max_connections, &fd, refusal) {
                continue;
            }
            let opened = Opened::new(peer.unwrap_or(UNKNOWN_PEER), address);
            let Some(id) = lock(&pool.idle).pop() else {
                // Cannot happen: only this thread takes idle threads off the stack, and it
                // saw one. Refusing is the safe answer if it ever does.
                active.fetch_sub(1, Ordering::Relaxed);
                continue;
            };
            let mailbox = &pool.mailboxes[id];
            *lock(&mailbox.connection) = Some((fd, opened));
            mailbox.delivered.notify_one();
            // One connection per idle thread: look for the next idle one first.
            break;
        }
    }
    Ok(())
}

/// Waits until some pool thread is idle; false when the stop flag was set meanwhile.
fn wait_for_idle_thread(pool: &Pool, stop: &AtomicBool) -> bool {
    let mut idle = lock(&pool.idle);
    while idle.is_empty() {
        if stop.load(Ordering::Relaxed) || signals::draining() {
            return false;
        }
        // Every thread busy (long downloads) is no sign of a hung server.
        crate::liveness::beat();
        idle = pool
            .some_idle
            .wait_timeout(idle, STOP_POLL)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    true
}
