//! What the models share outside their loops: starting and joining the workers, the connection
//! limit, and pausing accepts when descriptors run out. What they share inside their loops is
//! in `connection.rs`.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::sys::refuse;
use crate::{Handler, Listeners};

/// How long accepting pauses when the process is out of file descriptors: long enough for
/// connections to close, short enough that clients hardly notice.
pub(crate) const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// At most one "out of descriptors" message per worker per this interval.
pub(crate) const FD_WARNING_INTERVAL: Duration = Duration::from_secs(5);

/// The peer handed to the handler when the kernel reports no usable address.
pub(crate) const UNKNOWN_PEER: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));

/// Runs one worker per entry of `listeners.per_worker`, each on a thread of its own that builds
/// its handler with `make_handler(worker)` and then runs `work(worker, sockets, handler, active)`, where
/// `active` counts open connections across all workers. Waits for every worker; the result is
/// the error of the last one (in worker order) that failed.
pub(crate) fn run_workers<H, F, W>(
    listeners: Listeners,
    make_handler: &F,
    work: W,
) -> io::Result<()>
where
    H: Handler,
    F: Fn(usize) -> H + Sync,
    W: Fn(usize, Vec<OwnedFd>, H, &AtomicUsize) -> io::Result<()> + Sync,
{
    let active = AtomicUsize::new(0);
    let active = &active;
    let work = &work;
    std::thread::scope(|scope| {
        let mut threads = Vec::new();
        for (worker_id, sockets) in listeners.per_worker.into_iter().enumerate() {
            let thread = std::thread::Builder::new()
                .name(format!("fastpath-w{worker_id}"))
                .spawn_scoped(scope, move || -> io::Result<()> {
                    let handler = make_handler(worker_id);
                    work(worker_id, sockets, handler, active)
                })?;
            threads.push(thread);
        }
        let mut result = Ok(());
        for thread in threads {
            match thread.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = Err(e),
                Err(_) => result = Err(io::Error::other("a worker thread panicked")),
            }
        }
        result
    })
}

/// Counts a newly accepted connection in: true when it may open, false when the limit was
/// reached and it has been refused with `refusal` (the caller then drops, and so closes, `fd`).
pub(crate) fn admit_with(
    active: &AtomicUsize,
    max_connections: usize,
    fd: &OwnedFd,
    refusal: &[u8],
) -> bool {
    if active.fetch_add(1, Ordering::Relaxed) >= max_connections {
        active.fetch_sub(1, Ordering::Relaxed);
        refuse(fd.as_raw_fd(), refusal);
        return false;
    }
    true
}

/// Whether a failed accept means the process is out of descriptors (or memory), which pauses
/// accepting for [`ACCEPT_PAUSE`] instead of retrying at once.
pub(crate) fn out_of_descriptors(errno: i32) -> bool {
    matches!(
        errno,
        libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM
    )
}

/// A worker's accept pause, and when it last warned about running out of descriptors.
#[derive(Debug, Default)]
pub(crate) struct AcceptPause {
    until: Option<Instant>,
    last_warning: Option<Instant>,
}

impl AcceptPause {
    /// Accepting is paused (until the tick sweep resumes it).
    pub(crate) fn is_paused(&self) -> bool {
        self.until.is_some()
    }

    /// Pauses accepting for [`ACCEPT_PAUSE`] from `now`.
    pub(crate) fn pause(&mut self, now: Instant) {
        self.until = Some(now + ACCEPT_PAUSE);
    }

    /// The pause has run its course by `now`; it lasts until [`AcceptPause::resume`].
    pub(crate) fn is_over(&self, now: Instant) -> bool {
        self.until.is_some_and(|until| now >= until)
    }

    /// Ends the pause.
    pub(crate) fn resume(&mut self) {
        self.until = None;
    }

    /// Whether the warning may be logged at `now`, at most once per [`FD_WARNING_INTERVAL`];
    /// when it may, `now` counts as its last time.
    pub(crate) fn take_warning(&mut self, now: Instant) -> bool {
        let warn = self
            .last_warning
            .is_none_or(|at| now.duration_since(at) >= FD_WARNING_INTERVAL);
        if warn {
            self.last_warning = Some(now);
        }
        warn
    }
}

/// Logs that accepting failed for lack of descriptors, unless `pause` warned too recently;
/// `open` (the worker's open connections) is evaluated only when the warning is logged. A macro
/// so that the event keeps the calling model's module as its target, which log filters name.
macro_rules! warn_out_of_descriptors {
    ($pause:expr, $now:expr, $error:expr, $open:expr) => {
        if $pause.take_warning($now) {
            let error: &std::io::Error = $error;
            tracing::warn!(
                "accept failed: {error} (out of file descriptors or memory); pausing new connections for {} ms, open connections: {}",
                $crate::common::ACCEPT_PAUSE.as_millis(),
                $open
            );
        }
    };
}
pub(crate) use warn_out_of_descriptors;

/// Logs that a connection is being closed because its handler left `$len` bytes of input
/// unconsumed, `$max` or more ([`crate::DriverConfig::max_input`]): its request ends without
/// an answer, which must not go unexplained. A macro for the same reason as above.
macro_rules! warn_input_left {
    ($len:expr, $max:expr) => {
        tracing::warn!(
            "closing a connection: its handler left {} bytes of input unconsumed (the limit is {})",
            $len,
            $max
        )
    };
}
pub(crate) use warn_input_left;

/// What a loop holds while it runs handler code and lets go of while it waits: the thread-pool
/// model's bound on threads running at once. The other models run unbounded ([`NoGate`]).
pub(crate) trait Gate {
    /// The loop is about to wait for events.
    fn leave(&self);
    /// The loop has events to handle; may wait for a turn.
    fn enter(&self);
}

/// The gate of a loop that owns its thread outright.
pub(crate) struct NoGate;

impl Gate for NoGate {
    fn leave(&self) {}
    fn enter(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warning_is_rate_limited() {
        let mut pause = AcceptPause::default();
        let start = Instant::now();
        assert!(pause.take_warning(start));
        assert!(!pause.take_warning(start + FD_WARNING_INTERVAL - Duration::from_millis(1)));
        assert!(pause.take_warning(start + FD_WARNING_INTERVAL));
    }

    #[test]
    fn a_pause_lasts_until_resumed() {
        let mut pause = AcceptPause::default();
        let start = Instant::now();
        assert!(!pause.is_paused() && !pause.is_over(start));
        pause.pause(start);
        assert!(pause.is_paused());
        assert!(!pause.is_over(start + ACCEPT_PAUSE - Duration::from_millis(1)));
        assert!(pause.is_over(start + ACCEPT_PAUSE));
        assert!(pause.is_paused());
        pause.resume();
        assert!(!pause.is_paused());
    }
}
