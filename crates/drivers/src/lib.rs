//! The drivers of fastpath: listening sockets and the concurrency models that run connections.
//!
//! Where it sits among fastpath's crates, and what it must not do: docs/architecture.md.
//!
//! A driver moves bytes and knows no protocol. A service implements [`Handler`]: it is called
//! when a connection opens ([`Handler::on_open`], where it may greet the client and must arm a
//! deadline), when input arrives or queued output has drained ([`Handler::on_ready`]), when its
//! deadline passes ([`Handler::on_timeout`]) and when the connection is gone
//! ([`Handler::on_close`]). Each call sees the connection through an [`Io`]: the [`Input`]
//! received and not yet consumed, the [`Output`] to queue inline bytes, shared buffers or file
//! ranges in (sent with sendfile), and the deadline. It answers with a [`Next`] that says what
//! the connection waits for. Connections of a worker reach each other: a call may wake another
//! connection ([`Io::wake`], by the [`ConnRef`] it kept from [`Io::me`]), a connection may
//! wait for such a wake instead of input ([`Next::Wait`]), and a service may open outgoing
//! connections ([`Io::connect`]) that are then served like accepted ones; the service API in
//! `fastpath-sockets` builds on these. A connection may also open connections linked to it
//! ([`Io::connect_linked`]: a proxy's backend connections, any number at once, reused from
//! the worker's idle ones without a system call), whose events wake it and whose buffers its
//! calls reach ([`Io::linked`]); it may splice a body between itself and one of them, or join
//! with one for good in the kernel ([`Io::join`]). The HTTP server is one such handler; every model runs the same handler code, so a
//! model is chosen by configuration without touching the protocol.
//!
//! The layout of the crate follows that split:
//!
//! - `contract.rs`: what a service implements and sees ([`Handler`], [`Io`], [`Next`]);
//! - `linked.rs`: linked connections, the idle pool, and the splices between a connection and
//!   a linked one; `outgoing.rs`: where outgoing connections go and how a connect starts;
//! - `connection.rs`: the connection engine every loop shares (states, the handler's
//!   [`Next`] applied, the closing and deadline rules, close accounting), `worker_core.rs`,
//!   what a worker keeps besides its connections, and `slab.rs`, the slots that events name
//!   by index and generation;
//! - `loops/`: the event loops. What is the same for every loop (opening a connection,
//!   calling the handler and applying its answer, deadlines and the tick sweep, wakes, a
//!   graceful stop) is written once in `loops/mod.rs` as the provided methods of the loops'
//!   `Engine` trait; each loop only says where its connections are and how it waits and
//!   moves bytes: epoll readiness (`loops/epoll.rs`) and io_uring completions
//!   (`loops/uring.rs`);
//! - `pools/`: the models that spread connections over threads or processes on the epoll
//!   loop's worker: pinned per-core loops, a thread pool with a bound on running threads,
//!   preforked single-threaded processes;
//! - `model.rs`: each [`Model`]'s name, [`Layout`] and the entry points [`run`] and
//!   [`run_service`];
//! - `listener.rs`: the listening sockets, bound per worker ([`bind_listeners`]) or inherited
//!   from a service manager and shared ([`Listeners::from_inherited`]), and [`liveness`], the
//!   loops' heartbeat for a supervisor's watchdog.
//!
//! Every model honours the same contract, so the choice is one of speed, isolation and
//! memory, never of features. The epoll model works everywhere; [`uring_available`] says
//! whether the io_uring one can run here.
//!
//! A graceful stop ([`signals::DRAIN`], set by SIGTERM) is part of the contract: each worker
//! closes its listeners, calls [`Handler::on_drain`] for its connections and sets
//! [`Io::draining`] in every later call, and stops once its connections are closed or the grace
//! period ([`DriverConfig::shutdown_timeout`]) is over; see `contract.rs` and [`signals`].
//!
//! Deadlines are checked by a sweep every [`TICK`], which costs one pass over a worker's
//! connections and no timer structure updates on the hot path for the usual long timeouts; a
//! deadline that falls before the next sweep is also kept in a small heap, so that a service's
//! short timer fires on time.
//!
//! ```no_run
//! use std::sync::atomic::AtomicBool;
//! use std::time::Duration;
//! use fastpath_drivers::{bind_listeners, run, DriverConfig, Handler, Io, Model, Next, CloseReason, Opened, Worker};
//!
//! /// Greets, then echoes every byte back; a client silent for 10 s is closed.
//! struct Echo;
//! impl Handler for Echo {
//!     type Conn = ();
//!     fn on_open(&mut self, _opened: Opened, io: &mut Io<'_>) -> ((), Next) {
//!         io.write(b"hello\n");
//!         io.set_deadline(Some(io.now() + Duration::from_secs(10)));
//!         ((), Next::Read)
//!     }
//!     fn on_ready(&mut self, _conn: &mut (), io: &mut Io<'_>) -> Next {
//!         // The input and the output side by side: the bytes are copied once.
//!         let parts = io.parts();
//!         let n = parts.input.len();
//!         parts.output.write_with(parts.pool, |out| out.extend_from_slice(parts.input.data()));
//!         parts.input.consume(n);
//!         io.set_deadline(Some(io.now() + Duration::from_secs(10)));
//!         if io.eof() { Next::Close } else { Next::Read }
//!     }
//!     fn on_timeout(&mut self, _conn: &mut (), _io: &mut Io<'_>) -> Next { Next::Close }
//!     fn on_close(&mut self, _conn: (), _reason: CloseReason, _worker: &mut Worker<'_>) {}
//! }
//!
//! // Set by anything that outlives the call (another thread, a signal handler: see
//! // `signals::install_stop_handler`) to stop every worker.
//! let stop = AtomicBool::new(false);
//! let config = DriverConfig::default();
//! let listeners = bind_listeners(&["127.0.0.1:7000".parse().unwrap()], 2).unwrap();
//! let model = if fastpath_drivers::uring_available().is_ok() { Model::Uring } else { Model::Epoll };
//! run(model, listeners, &config, |_worker| Echo, &stop).unwrap();
//! ```
#![deny(missing_docs)]

mod buffers;
mod common;
mod connection;
mod contract;
mod linked;
mod listener;
pub mod liveness;
mod loops;
mod model;
mod outgoing;
mod pools;
mod probe;
pub mod signals;
mod slab;
mod splice;
mod sys;
#[cfg(feature = "testing")]
pub mod testing;
mod transport;
#[cfg(all(test, feature = "testing"))]
mod transport_tests;
pub mod units;
mod worker_core;

pub use buffers::{BufferPool, FlushError, Input, Output, BUFFER_SIZE};
pub use contract::{
    CloseReason, ConnRef, Handler, Io, IoParts, Next, Opened, Origin, Worker, TICK,
};
pub use linked::{Linked, PoolKey, Spliced, LINKED_INPUT_MAX};
pub use listener::{
    adopt_handed, bind_into_group, bind_listeners, bind_listeners_with, inherited_sockets,
    shared_by_every_set, take_inherited, ListenAddr, ListenOptions, ListenerFeatures, Listeners,
    UnixSocketFile, DEFER_ACCEPT_SECS, LISTEN_BACKLOG,
};
pub use model::{
    run, run_service, uring_available, worker_count, DriverConfig, Layout, Model, ModelKind,
    ModelSettings, Process,
};
pub use outgoing::UpstreamAddr;
pub use pools::percore::{allowed_cpus, PercoreConfig};
pub use pools::prefork::{self, PreforkConfig};
pub use pools::threads::ThreadsConfig;
pub use probe::{
    auto_model, choose_model, describe_probes, probe_models, ModelProbe, ProbeLoad, ECHO_LOADS,
    HTTP_LOADS, LARGE_BODY, MODEL_MARGIN, PROBE_TIME, SMALL_BODY,
};
pub use splice::Carrier;
pub use sys::ignore_sigpipe;
pub use transport::{
    parse_proxy_header, Cidr, Layered, Layers, ProxyProtocol, Received, Secured, Transport,
    TransportError, TransportInfo, TransportSetup, Transported, Transports, ENCODE_AHEAD,
    PROXY_HEADER_MAX,
};
