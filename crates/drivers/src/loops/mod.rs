//! The event loops: how a worker learns that its connections can make progress. Each moves
//! bytes and completions and leaves what happens next to a connection to the shared engine
//! in `connection.rs`: the epoll loop waits for readiness and makes a system call per read and
//! per send; the io_uring loop asks for completed work and batches its requests.

pub(crate) mod epoll;
pub(crate) mod uring;

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicUsize};

use crate::{common, DriverConfig, Handler, Listeners};

/// What every event loop provides: one worker serving its own listeners until the stop flag
/// is set, counting its connections in `active` (shared by all workers, for the limit).
pub(crate) trait EventLoop {
    fn serve<H: Handler>(
        sockets: Vec<OwnedFd>,
        handler: H,
        config: &DriverConfig,
        active: &AtomicUsize,
        stop: &AtomicBool,
    ) -> io::Result<()>;
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
        |_worker, sockets, handler, active| L::serve(sockets, handler, config, active, stop),
    )
}
