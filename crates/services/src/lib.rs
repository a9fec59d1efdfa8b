//! Services built on fastpath's service API ([`fastpath_sockets`]) alone, shipped in the
//! binary as `fastpath echo` and `fastpath forward`: Slick's two benchmark services. They
//! use nothing of the engine that a third-party service could not, so they also show how
//! one is written.
//!
//! Where it sits among fastpath's crates, and what it must not do: docs/architecture.md.
//!
//! ```no_run
//! use std::sync::Arc;
//! use fastpath_services::{ForwardConfig, ForwardStats, Forwarder};
//! use fastpath_sockets::{serve, ModelKind, ServiceOptions};
//!
//! let config = Arc::new(ForwardConfig {
//!     destinations: vec!["127.0.0.1:9201".parse().unwrap(), "127.0.0.1:9202".parse().unwrap()],
//!     ..ForwardConfig::default()
//! });
//! let stats = Arc::new(ForwardStats::default());
//! let mut options = ServiceOptions::listening(vec!["127.0.0.1:9100".parse().unwrap()]);
//! options.model = ModelKind::Uring;
//! serve("forward", &options, |_worker| Forwarder::new(config.clone(), stats.clone())).unwrap();
//! ```
#![deny(missing_docs)]

pub mod cli;
mod echo;
mod forward;

pub use echo::{Echo, EchoConfig, EchoConn};
pub use forward::{ForwardConfig, ForwardConn, ForwardStats, Forwarder};
