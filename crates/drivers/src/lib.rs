//! The drivers of fastpath: listening sockets and the concurrency models that run connections.
//!
//! A driver moves bytes and knows no protocol. It accepts connections, reads what arrives into
//! a connection's [`Input`], hands it to a [`Handler`], and sends what the handler queued in the
//! connection's [`Output`] (inline bytes, shared cache buffers, file ranges sent with sendfile).
//! The handler answers each call with a [`Next`] that says what the connection waits for. The
//! HTTP server is one such handler; every model runs the same handler code, so a model is
//! chosen by configuration without touching the protocol.
//!
//! Models live in files of their own behind one entry point, [`run`], which takes the [`Model`]:
//! the epoll event loop (`epoll.rs`), the io_uring completion loop (`uring.rs`), pinned
//! per-core loops (`percore.rs`), a thread pool with a bound on running threads
//! (`threads.rs`) and preforked single-threaded processes (`prefork.rs`). The last three reuse
//! the epoll loop's connection engine: a pool thread or child runs it over one connection at
//! a time and blocks in its wait, so every model honours the same contract towards the
//! handler and the choice is one of speed, isolation and memory, never of features. The
//! epoll model works everywhere; [`uring_available`] says whether the io_uring one can run
//! here.
//!
//! Timers are coarse: deadlines are checked by a sweep every [`TICK`], which costs one pass over
//! a worker's connections and no timer structure updates on the hot path.
//!
//! ```no_run
//! use std::sync::atomic::AtomicBool;
//! use std::time::Duration;
//! use fastpath_drivers::{bind_listeners, run, DriverConfig, Handler, Io, Model, Next, CloseReason, Opened};
//!
//! /// Greets, then echoes every byte back; a client silent for 10 s is closed.
//! struct Echo;
//! impl Handler for Echo {
//!     type Conn = ();
//!     fn on_open(&mut self, _opened: Opened, io: &mut Io<'_>) -> ((), Next) {
//!         io.write(b"hello\n");
//!         *io.deadline = Some(io.now + Duration::from_secs(10));
//!         ((), Next::Read)
//!     }
//!     fn on_ready(&mut self, _conn: &mut (), io: &mut Io<'_>) -> Next {
//!         let data = io.input.data().to_vec();
//!         io.write(&data);
//!         io.input.consume(data.len());
//!         *io.deadline = Some(io.now + Duration::from_secs(10));
//!         if io.eof { Next::Close } else { Next::Read }
//!     }
//!     fn on_timeout(&mut self, _conn: &mut (), _io: &mut Io<'_>) -> Next { Next::Close }
//!     fn on_close(&mut self, _conn: (), _reason: CloseReason) {}
//! }
//!
//! static STOP: AtomicBool = AtomicBool::new(false);
//! let config = DriverConfig::default();
//! let listeners = bind_listeners(&["127.0.0.1:7000".parse().unwrap()], 2).unwrap();
//! let model = if fastpath_drivers::uring_available().is_ok() { Model::Uring } else { Model::Epoll };
//! run(model, listeners, &config, |_worker| Echo, &STOP).unwrap();
//! ```
#![deny(missing_docs)]

mod buffers;
mod common;
mod connection;
mod contract;
mod epoll;
mod listener;
mod percore;
pub mod prefork;
pub mod signals;
mod slab;
mod splice;
mod sys;
mod threads;
mod upstream;
mod uring;

use std::io;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

pub use buffers::{BufferPool, Input, Output, BUFFER_SIZE};
pub use contract::{CloseReason, Handler, Io, Next, Opened};
pub use listener::{
    bind_listeners, bind_listeners_with, ListenOptions, ListenerFeatures, Listeners,
    DEFER_ACCEPT_SECS, LISTEN_BACKLOG,
};
pub use percore::{allowed_cpus, PercoreConfig};
pub use prefork::PreforkConfig;
pub use sys::ignore_sigpipe;
pub use threads::ThreadsConfig;
pub use upstream::{Spliced, UpstreamAddr, UpstreamPort, UpstreamState};

/// How often deadlines are checked and [`Handler::on_tick`] runs.
pub const TICK: Duration = Duration::from_millis(100);

/// Transport settings shared by every model.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// Connections open at once across all workers; past it new ones are refused.
    pub max_connections: usize,
    /// A connection whose queued output makes no progress for this long is closed.
    pub send_timeout: Duration,
    /// After a graceful close, late input is discarded for at most this long.
    pub linger_timeout: Duration,
    /// Input a handler may leave unconsumed before the connection is aborted; handlers enforce
    /// their own, smaller limits, this one only guards against a handler that does not.
    pub max_input: usize,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            max_connections: 10_000,
            send_timeout: Duration::from_secs(60),
            linger_timeout: Duration::from_secs(2),
            max_input: 1024 * 1024,
        }
    }
}

/// A concurrency model: how connections are spread over threads or processes and how a
/// worker learns that its connections can make progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Model {
    /// One edge-triggered epoll loop per worker, with a system call per read and per send.
    Epoll,
    /// One io_uring completion loop per worker: multishot accept and receive, and the sends of
    /// a whole loop iteration submitted in one system call. Check [`uring_available`] first.
    Uring,
    /// One epoll loop per CPU, pinned to it, sharing nothing (`percore.rs`).
    Percore(PercoreConfig),
    /// A pool of threads, each serving one connection at a time, with a bound on how many run
    /// at once (`threads.rs`).
    Threads(ThreadsConfig),
    /// A pool of single-threaded child processes, each serving one connection at a time
    /// (`prefork.rs`). Must be started before the process has other threads.
    Prefork(PreforkConfig),
}

impl Model {
    /// The model's name, as the configuration spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Model::Epoll => "epoll",
            Model::Uring => "uring",
            Model::Percore(_) => "percore",
            Model::Threads(_) => "threads",
            Model::Prefork(_) => "prefork",
        }
    }
}

/// Checks whether the io_uring model can run on this kernel: a ring can be set up (it can be
/// compiled out, or disabled by `kernel.io_uring_disabled`), it has timed waits and every
/// operation the model uses, and a provided-buffer ring can be registered. The error says
/// what is missing.
pub fn uring_available() -> Result<(), io::Error> {
    uring::probe()
}

/// Runs `model` until `stop` is set; `make_handler(worker)` builds each worker's handler on
/// the thread (or, for prefork, in the child process) that uses it. A server whose handlers
/// need per-process setup after a fork (threads of their own) calls [`prefork::run`] directly.
pub fn run<H, F>(
    model: Model,
    listeners: Listeners,
    config: &DriverConfig,
    make_handler: F,
    stop: &'static AtomicBool,
) -> io::Result<()>
where
    H: Handler,
    F: Fn(usize) -> H + Sync,
{
    match model {
        Model::Epoll => epoll::run(listeners, config, &make_handler, stop),
        Model::Uring => uring::run(listeners, config, &make_handler, stop),
        Model::Percore(percore) => percore::run(listeners, config, &make_handler, stop, percore),
        Model::Threads(threads) => threads::run(listeners, config, &make_handler, stop, threads),
        Model::Prefork(prefork) => prefork::run(listeners, config, prefork, stop, &|child| {
            let handler = make_handler(child.slot());
            child.serve(handler)
        }),
    }
}
