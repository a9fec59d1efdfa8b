//! TLS for fastpath's listeners: rustls behind the engine's transport trait.
//!
//! Where it sits among fastpath's crates: docs/architecture.md. The engine
//! (`fastpath-drivers`) runs a [`fastpath_drivers::Transport`] per connection of a listener
//! that has a [`fastpath_drivers::TransportSetup`]; this crate provides both for TLS:
//! [`TlsSetup`] is built once from [`TlsSettings`] (certificates chosen by SNI, protocol
//! versions, ALPN, session resumption with ticket keys shared by every serving process and
//! handed to the server a reload starts) and makes a [`TlsSession`] per connection, a rustls
//! `ServerConnection` fed from and drained into the engine's buffers. Handlers see plaintext
//! and [`fastpath_drivers::TransportInfo`]; they do not change.
//!
//! [`inspect`] reads a certificate and its key the way `fastpath check` reports them: the
//! names covered, the expiry, whether the key matches.
//!
//! ```no_run
//! use std::sync::Arc;
//! use fastpath_drivers::{DriverConfig, Layers, TransportSetup, Transports};
//! use fastpath_tls::{CertificateFiles, TlsSettings, TlsSetup};
//!
//! let settings = TlsSettings {
//!     certificates: vec![CertificateFiles {
//!         names: vec!["example.com".into()],
//!         chain: "/etc/fastpath/example.com.pem".into(),
//!         key: "/etc/fastpath/example.com.key".into(),
//!     }],
//!     ..TlsSettings::default()
//! };
//! let setup: Arc<dyn TransportSetup> = Arc::new(TlsSetup::new(&settings).unwrap());
//! // Listener 0 speaks TLS.
//! let layers = Layers { proxy: None, transport: Some(setup) };
//! let config = DriverConfig { transports: Transports::new(vec![layers]), ..DriverConfig::default() };
//! ```
//!
//! Copies per direction, with rustls 0.23's buffered API: incoming records are copied from
//! the engine's input into rustls's buffer, decrypted in place, and the plaintext copied out
//! into the handler's input; outgoing plaintext is encrypted into rustls's queue (a file
//! range is first read into a buffer with pread) and copied from there into the engine's
//! output. The unbuffered API (encrypting into and decrypting from the caller's buffers)
//! would remove the copy out of rustls on each side; it is left for when the engine's
//! buffers can lend rustls their spare room directly.

#![deny(missing_docs)]

mod acme;
mod certs;
mod error;
mod session;
mod setup;
mod tickets;

pub use acme::{FileStamp, ACME_TLS_ALPN, ALPN_CHALLENGES};
pub use certs::{inspect, CertificateFiles, CertificateReport};
pub use error::TlsError;
pub use session::TlsSession;
pub use setup::{
    every_listener, HandshakeCounts, TlsSettings, TlsSetup, TlsVersions, UnknownName,
    FAILURE_REASONS,
};
pub use tickets::{SessionTickets, TicketKeys, TicketOrigin};
