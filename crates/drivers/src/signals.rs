//! The signals a server answers, turned into flags that workers look at on their ticks.
//!
//! - SIGTERM and SIGQUIT ask for a graceful stop ([`DRAIN`]): the workers stop accepting,
//!   let the connections they have finish within the grace period
//!   ([`crate::DriverConfig::shutdown_timeout`]) and then stop. A second SIGTERM or SIGQUIT
//!   stops at once, as SIGINT always does ([`STOP`]).
//! - SIGUSR1 asks for the log files to be reopened ([`reopen_generation`] moves on).
//! - SIGHUP reopens the logs too and is noted ([`take_hangup`]) for the service to say what it
//!   does with it (fastpath reloads); SIGUSR2 is noted the same way ([`take_usr2`]). The
//!   service looks at them in its supervisor ([`set_supervisor`]), which the process model's
//!   parent calls on its turns ([`supervise`]); the other models run it on a thread of the
//!   service's own.
//! - A service that handed its listening sockets over to another process says so
//!   ([`set_handed_over`]) before it asks for the graceful stop: the stop then closes only
//!   its own copies of the sockets and leaves them listening for the process that took them.
//!
//! The handlers only touch atomics (nothing else is async-signal-safe); everything a signal
//! leads to happens on a worker's tick, within [`crate::TICK`]. In the process model the
//! parent passes the signals on to its children, which have handlers of their own (a forked
//! child keeps its parent's), so the flags mean the same in every process.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::time::Duration;

/// Set when the process must stop at once.
pub static STOP: AtomicBool = AtomicBool::new(false);

/// Set when the process has been asked to stop gracefully.
pub static DRAIN: AtomicBool = AtomicBool::new(false);

/// Moves on at each request to reopen the log files.
static REOPEN: AtomicU64 = AtomicU64::new(0);
static HANGUP: AtomicBool = AtomicBool::new(false);
static USR2: AtomicBool = AtomicBool::new(false);
static HANDED_OVER: AtomicBool = AtomicBool::new(false);
/// The two ends of a pipe the handler writes a byte to, so that a thread can sleep until a
/// signal comes ([`wait_for_signal`]) instead of waking to look; -1 before it is made.
static WAKE_READ: AtomicI32 = AtomicI32::new(-1);
static WAKE_WRITE: AtomicI32 = AtomicI32::new(-1);

type Supervisor = Box<dyn FnMut() + Send>;
static SUPERVISOR: std::sync::Mutex<Option<Supervisor>> = std::sync::Mutex::new(None);

extern "C" fn on_signal(signal: libc::c_int) {
    // Only atomic operations: nothing else is async-signal-safe here.
    match signal {
        libc::SIGTERM | libc::SIGQUIT => {
            // The second request to stop gracefully is one not to wait any more.
            if DRAIN.swap(true, Ordering::SeqCst) {
                STOP.store(true, Ordering::SeqCst);
            }
        }
        libc::SIGUSR1 => {
            REOPEN.fetch_add(1, Ordering::SeqCst);
        }
        libc::SIGHUP => {
            REOPEN.fetch_add(1, Ordering::SeqCst);
            HANGUP.store(true, Ordering::SeqCst);
        }
        libc::SIGUSR2 => USR2.store(true, Ordering::SeqCst),
        _ => STOP.store(true, Ordering::SeqCst),
    }
    let wake = WAKE_WRITE.load(Ordering::SeqCst);
    if wake >= 0 {
        // write(2) is async-signal-safe; errno is kept for the code the signal interrupted.
        // A full pipe (EAGAIN) already holds a wake-up.
        // SAFETY: a one-byte write from a static to a descriptor this module owns.
        unsafe {
            let errno = *libc::__errno_location();
            libc::write(wake, b"s".as_ptr().cast(), 1);
            *libc::__errno_location() = errno;
        }
    }
}

/// Sleeps until one of the signals of [`install_stop_handler`] arrives, or `timeout` passes;
/// returns at once if one came since the last call. For a thread that acts on signals (the
/// reload thread): it does not wake while nothing happens.
pub fn wait_for_signal(timeout: Duration) {
    let fd = WAKE_READ.load(Ordering::SeqCst);
    if fd < 0 {
        std::thread::sleep(timeout);
        return;
    }
    let mut pollfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: one pollfd on the stack; then reads into a local buffer from a non-blocking pipe.
    unsafe {
        if libc::poll(&mut pollfd, 1, ms) > 0 {
            let mut buf = [0u8; 64];
            while libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) > 0 {}
        }
    }
}

/// Installs the handlers described in the module doc; returns the flag that stops at once.
pub fn install_stop_handler() -> &'static AtomicBool {
    if WAKE_READ.load(Ordering::SeqCst) < 0 {
        let mut ends = [-1; 2];
        // SAFETY: pipe2 fills `ends` on success. Without it, wait_for_signal sleeps instead.
        if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } == 0 {
            WAKE_WRITE.store(ends[1], Ordering::SeqCst);
            WAKE_READ.store(ends[0], Ordering::SeqCst);
        }
    }
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    for signal in [
        libc::SIGTERM,
        libc::SIGQUIT,
        libc::SIGINT,
        libc::SIGUSR1,
        libc::SIGHUP,
        libc::SIGUSR2,
    ] {
        // SAFETY: sigaction with a handler that only touches atomics. SA_RESTART: a blocking
        // call in a thread that is not a loop (a log write) is resumed rather than failed.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
    &STOP
}

/// Whether a graceful stop has been asked for.
pub fn draining() -> bool {
    DRAIN.load(Ordering::Relaxed)
}

/// How many times the log files have been asked to be reopened: a writer that last opened its
/// file at another value reopens it.
pub fn reopen_generation() -> u64 {
    REOPEN.load(Ordering::Relaxed)
}

/// Whether SIGHUP arrived since the last call (true for one caller per signal).
pub fn take_hangup() -> bool {
    HANGUP.swap(false, Ordering::Relaxed)
}

/// Whether SIGUSR2 arrived since the last call (true for one caller per signal).
pub fn take_usr2() -> bool {
    USR2.swap(false, Ordering::Relaxed)
}

/// Notes that the listening sockets were handed over to another process, which now accepts on
/// them: a graceful stop must not shut them down for everyone, only close this process's copies.
pub fn set_handed_over() {
    HANDED_OVER.store(true, Ordering::SeqCst);
}

/// Whether the listening sockets were handed over ([`set_handed_over`]).
pub fn handed_over() -> bool {
    HANDED_OVER.load(Ordering::Relaxed)
}

/// Sets what the process model's parent runs on each of its turns (after a signal, and at
/// least once a second): the service's look at [`take_hangup`] and [`take_usr2`].
pub fn set_supervisor(supervisor: Box<dyn FnMut() + Send>) {
    *SUPERVISOR.lock().unwrap_or_else(|e| e.into_inner()) = Some(supervisor);
}

/// Whether a supervisor is set ([`set_supervisor`]).
pub fn has_supervisor() -> bool {
    SUPERVISOR
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .is_some()
}

/// Runs the supervisor, if one is set.
pub fn supervise() {
    if let Some(supervisor) = SUPERVISOR
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_mut()
    {
        supervisor();
    }
}
