//! The service API of fastpath: what a TCP service other than the web server is written
//! against, on the same engine and the same five concurrency models.
//!
//! Where it sits among fastpath's crates, and what it must not do: docs/architecture.md.
//!
//! It is Slick's klibevent, BufferedSocket and ThriftSocket, in user space. A service is a
//! [`Handler`]: the driver calls it when a connection opens (accepted, or opened by the
//! service itself with [`Io::connect`]), when input has arrived or output has drained, when
//! the connection's deadline passes, and when the connection is gone. In each call the
//! connection is seen through a [`BufferedSocket`] (peek, discard, read, write, write_all,
//! bounded output) or a [`ThriftSocket`] (whole Thrift messages: next, discard, write,
//! forward). Connections of one worker reach each other through [`ConnRef`]s: a call may
//! wake another connection ([`Io::wake`]), which the driver then calls, and a [`Relay`]
//! queues whole messages from many sources for many destinations with backpressure (a
//! destination that takes no more makes its sources [`Next::Wait`]). Everything runs on one
//! thread per worker, so a handler's state needs no lock; per-worker state is the handler
//! itself, and state shared by the workers of a process is built once by
//! [`run_service`]. The concurrency model is one value ([`ModelKind`]), and [`serve`] runs a
//! service the way the shipped ones run (`fastpath echo`, `fastpath forward`): bound
//! listeners, signals for a graceful stop, and the model.
//!
//! A whole service, run here on four of the models (the fifth, prefork, forks, which a test
//! program with threads should not; the shipped services' tests run it on all five):
//!
//! ```
//! use std::io::{BufRead, BufReader, Write};
//! use std::net::TcpStream;
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::time::Duration;
//! use fastpath_sockets::{
//!     bind_listeners, run, uring_available, BufferedSocket, CloseReason, DriverConfig, Handler,
//!     Io, ModelKind, ModelSettings, Next, Opened, Worker,
//! };
//!
//! /// Upper-cases every line it gets; a client silent for 30 s is closed.
//! struct Shout;
//!
//! impl Handler for Shout {
//!     type Conn = ();
//!
//!     fn on_open(&mut self, _opened: Opened, io: &mut Io<'_>) -> ((), Next) {
//!         io.set_deadline(Some(io.now() + Duration::from_secs(30)));
//!         ((), Next::Read)
//!     }
//!
//!     fn on_ready(&mut self, _conn: &mut (), io: &mut Io<'_>) -> Next {
//!         io.set_deadline(Some(io.now() + Duration::from_secs(30)));
//!         let mut sock = BufferedSocket::new(io);
//!         while let Some(end) = sock.peek().iter().position(|&b| b == b'\n') {
//!             let line = sock.peek()[..=end].to_ascii_uppercase();
//!             sock.write_all(&line);
//!             sock.discard(end + 1);
//!         }
//!         if sock.at_end() { Next::Close } else { sock.next() }
//!     }
//!
//!     fn on_timeout(&mut self, _conn: &mut (), _io: &mut Io<'_>) -> Next {
//!         Next::Close
//!     }
//!
//!     fn on_close(&mut self, _conn: (), _reason: CloseReason, _worker: &mut Worker<'_>) {}
//! }
//!
//! for kind in [ModelKind::Epoll, ModelKind::Uring, ModelKind::Percore, ModelKind::Threads] {
//!     if kind == ModelKind::Uring && uring_available().is_err() {
//!         continue;
//!     }
//!     let model = kind.with(&ModelSettings::default());
//!     let listeners = bind_listeners(&["127.0.0.1:0".parse().unwrap()], 2).unwrap();
//!     let addr = listeners.local_addrs[0].tcp().unwrap();
//!     let stop = AtomicBool::new(false);
//!     std::thread::scope(|scope| {
//!         let server = scope.spawn(|| run(model, listeners, &DriverConfig::default(), |_| Shout, &stop));
//!         let mut client = TcpStream::connect(addr).unwrap();
//!         client.write_all(b"hello\nworld\n").unwrap();
//!         let mut lines = BufReader::new(client).lines();
//!         assert_eq!(lines.next().unwrap().unwrap(), "HELLO");
//!         assert_eq!(lines.next().unwrap().unwrap(), "WORLD");
//!         stop.store(true, Ordering::Relaxed);
//!         server.join().unwrap().unwrap();
//!     });
//! }
//! ```
//!
//! [`serve`] runs such a service as the binary runs its own: `serve("shout", &options, |_|
//! Shout)` with `ServiceOptions::listening(addrs)`, until SIGTERM.
#![deny(missing_docs)]

mod buffered;
mod relay;
mod service;
mod thrift_socket;

pub use buffered::{BufferedSocket, OUTPUT_LIMIT};
pub use relay::{Posted, Relay, Undelivered};
pub use service::{serve, ServiceOptions};
pub use thrift_socket::ThriftSocket;

pub use fastpath_drivers::{
    bind_listeners, run, run_service, uring_available, worker_count, CloseReason, ConnRef,
    DriverConfig, Handler, Io, IoParts, Layers, ListenAddr, ListenOptions, Listeners, Model,
    ModelKind, ModelSettings, Next, Opened, Origin, Process, TransportInfo, Transports,
    UpstreamAddr, Worker, TICK,
};

/// Which event loop `model = "auto"` runs, measured at start.
pub use fastpath_drivers::{auto_model, ProbeLoad, ECHO_LOADS, MODEL_MARGIN};

/// Sizes and durations as configurations write them.
pub use fastpath_drivers::units;

/// The Thrift codec ThriftSocket reads and writes with.
pub use fastpath_thrift as thrift;
