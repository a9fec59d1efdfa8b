//! Exchanges: one request handed over to a backend, from the moment the routes send it there
//! to the moment its answer has gone (or it has failed, or been handed over for good). Each
//! method of the hand-over is a type of its own with its stages spelled out:
//!
//! - [`ProxyExchange`]: the request is relayed over a backend connection and its response
//!   relayed back, framed anew for the client; the client connection stays with fastpath,
//!   and the backend connection goes back to the worker's idle ones when the response
//!   allowed it. Its request side and response side move on their own (a backend may answer
//!   before it has the whole body), as hyper's `Writing` and `Reading` do.
//! - [`BridgeExchange`]: the request head goes to a backend connection, then the two
//!   connections are joined in the kernel for good ([`fastpath_drivers::Io::join`]).
//! - [`redirect`]: the client is sent to the backend's own address.
//!
//! An exchange lives on the client connection: the backend connection is linked to it
//! ([`fastpath_drivers::Io::connect_linked`]), its events wake the client connection, and
//! each step of the exchange reaches both connections' buffers at once
//! ([`fastpath_drivers::Io::linked`]), once per step. The server composes exchanges with
//! everything else a request meets (routing, the access log, metrics); what an exchange
//! decides about the client connection comes back as a [`Progress`].
//!
//! Failures keep their meaning for the client: a backend that refuses or cannot be reached
//! gives 502, one that does not answer in time 504, one that answers garbage 502; one that
//! stops in the middle of a response makes the client connection close, so a truncated
//! response never looks complete. A kept connection the backend closed while it was idle is
//! not a failure of the backend: a request with an idempotent method and no body (or one
//! read whole) goes again on another connection; any other request gets 502 rather than risk
//! running twice.

mod body;
mod bridge;
mod proxy;
pub mod redirect;

use std::time::Instant;

use fastpath_drivers::{Carrier, CloseReason, Next};
use fastpath_http::{BodyForwarding, BodyFraming, Version};

pub use body::OutputSink;
pub use bridge::BridgeExchange;
pub use proxy::ProxyExchange;

use crate::{Capture, Fill};

/// Why an exchange ended without a complete answer, as the access log says it.
pub const CLIENT_GONE: &str = "client-gone";
/// The backend failed in the middle of an answer (or of taking the request).
pub const BACKEND_FAILED: &str = "backend-failed";
/// The backend stopped moving bytes for its response timeout.
pub const BACKEND_TIMEOUT: &str = "backend-timeout";

/// How an exchange ended, or what it waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Waiting; the client connection waits as `Next` says.
    Wait(Next),
    /// The response is complete; the client connection closes if `close`.
    Finished {
        /// The client connection closes after this response.
        close: bool,
    },
    /// Nothing of the response was sent yet: answer the client with this status.
    Failed(u16),
    /// A response was partly relayed (or the request partly sent) and cannot be completed:
    /// drop the client connection. Says why, for the access log.
    Broken(&'static str),
    /// A bridge: the client connection is joined with the backend's in the kernel and no
    /// longer the handler's.
    Joined,
}

/// What keeping a backend response in the cache takes: how to name it, and the bytes
/// relayed so far.
pub struct CacheSlot {
    /// The request's host, a part of the cache key.
    pub host: Vec<u8>,
    /// The request's target, a part of the cache key.
    pub target: Vec<u8>,
    /// The request's `Accept-Encoding`, a part of the key of a response that varies on it.
    pub accept_encoding: Option<Vec<u8>>,
    /// Largest response kept.
    pub max: usize,
    /// The response being kept, once its head said it may be.
    pub capture: Option<Capture>,
    /// When the request was handed over: a kept response's age counts from here, so the
    /// time the backend took to answer counts too (RFC 9111 §4.2.3).
    pub since: Instant,
    /// When the captured response expires.
    pub expires: Option<Instant>,
    /// The captured response varies on `Accept-Encoding`.
    pub vary: bool,
    /// This request's claim on the page's fetch, which others wait for: dropped with the
    /// slot if the exchange is cut short, so the next request claims it.
    pub fill: Option<Fill>,
}

/// What starting an exchange needs to know about the request.
pub struct Start {
    /// The backend, by index.
    pub backend: usize,
    /// The request as it goes to the backend: the head rewritten for it (a proxy), or as the
    /// client sent it (a bridge).
    pub staged: Vec<u8>,
    /// The method is idempotent (GET, HEAD, OPTIONS, TRACE, PUT, DELETE).
    pub idempotent: bool,
    /// How the request's body is framed.
    pub framing: BodyFraming,
    /// How the body goes: read whole first unless `Streamed`.
    pub forwarding: BodyForwarding,
    /// The client's HTTP version.
    pub client_version: Version,
    /// The request is HEAD.
    pub head_request: bool,
    /// The client asked to close after this response.
    pub client_close: bool,
    /// Lines the response head relayed to the client carries besides the backend's
    /// (`Strict-Transport-Security` on a TLS connection): see
    /// [`fastpath_http::write_relayed_response_head`].
    pub also: Option<std::sync::Arc<[u8]>>,
    /// Rules the relayed head goes through (a module's header rules).
    pub edit: Option<std::sync::Arc<dyn fastpath_http::HeadEdit>>,
    /// Decides whether the response's body is coded on the way (a module's compression).
    pub recode: Option<Box<dyn fastpath_http::RecodeOffer>>,
    /// Where the response may be kept, for a request the cache can answer.
    pub cache: Option<CacheSlot>,
    /// A bridge's joint is carried by this (the kernel path), else by pipes.
    pub carrier: Option<Box<dyn Carrier>>,
    /// When the worker's share of the backend's connections is in use as a body read whole
    /// needs one, wait (up to the response timeout) for one to be let go of rather than fail
    /// with 503: for an HTTP/2 stream, whose siblings on the connection hold the share.
    pub wait_for_connection: bool,
}

/// The pool key of a backend address: backend and address index.
fn pool_key(backend: usize, address: usize) -> u64 {
    ((backend as u64) << 32) | address as u64
}

/// What the log says of a backend connection that closed, by why it did.
fn why_closed(reason: CloseReason) -> &'static str {
    match reason {
        CloseReason::ConnectFailed => "the connect failed",
        CloseReason::PeerGone => "the backend closed it",
        CloseReason::SendTimeout => "the backend took nothing for the send timeout",
        _ => "a socket error",
    }
}

/// One request handed over to a backend, by proxy or by bridge.
pub enum Exchange {
    /// Relayed, the client connection kept.
    Proxy(Box<ProxyExchange>),
    /// Joined with the backend connection for good.
    Bridge(Box<BridgeExchange>),
}

impl Exchange {
    /// Starts an exchange by proxy or, with `bridge`, by bridge; `Err(status)` when no
    /// backend address can be used (503), with the parser back.
    pub fn start(
        start: Start,
        bridge: bool,
        backends: &mut [crate::BackendState],
        now: Instant,
        parser: Box<fastpath_http::ResponseParser>,
    ) -> Result<Exchange, (u16, Box<fastpath_http::ResponseParser>)> {
        if bridge {
            let Some(exchange) = BridgeExchange::start(start, backends, now) else {
                return Err((503, parser));
            };
            // A bridge parses nothing: the parser goes back with the exchange's end.
            return Ok(Exchange::Bridge(Box::new(exchange.with_parser(parser))));
        }
        ProxyExchange::start(start, backends, now, parser)
            .map(|exchange| Exchange::Proxy(Box::new(exchange)))
    }

    /// When the exchange must have moved on by (the client connection's deadline).
    pub fn deadline(&self) -> Instant {
        match self {
            Exchange::Proxy(e) => e.deadline,
            Exchange::Bridge(e) => e.deadline,
        }
    }

    /// Moves the exchange forward with whatever arrived on either side.
    pub fn step(
        &mut self,
        backends: &mut [crate::BackendState],
        io: &mut fastpath_drivers::Io<'_>,
    ) -> Progress {
        match self {
            Exchange::Proxy(e) => e.step(backends, io),
            Exchange::Bridge(e) => e.step(backends, io),
        }
    }

    /// The deadline passed.
    pub fn timed_out(
        &mut self,
        backends: &mut [crate::BackendState],
        io: &mut fastpath_drivers::Io<'_>,
    ) -> Progress {
        match self {
            Exchange::Proxy(e) => e.timed_out(backends, io),
            Exchange::Bridge(e) => e.timed_out(backends, io),
        }
    }

    /// Whether the response may be read from the backend while the client's output is
    /// still full (response buffering).
    pub fn reads_ahead(&self) -> bool {
        matches!(self, Exchange::Proxy(e) if e.reads_ahead())
    }

    /// A graceful stop began: a response whose head is not written yet says
    /// `Connection: close`.
    pub fn close_if_head_unsent(&mut self) {
        if let Exchange::Proxy(e) = self {
            e.close_if_head_unsent();
        }
    }

    /// Forgets the backend's connection count: the client connection is gone.
    pub fn forget(&mut self, backends: &mut [crate::BackendState]) {
        match self {
            Exchange::Proxy(e) => e.forget(backends),
            Exchange::Bridge(e) => e.forget(backends),
        }
    }

    /// The backend connection of a proxied exchange, once one has been asked for: what a
    /// client connection that goes on without the exchange (an HTTP/2 stream reset) lets go
    /// of.
    pub fn link(&self) -> Option<fastpath_drivers::ConnRef> {
        match self {
            Exchange::Proxy(e) => e.link(),
            Exchange::Bridge(_) => None,
        }
    }

    /// The backend, by index.
    pub fn backend(&self) -> usize {
        match self {
            Exchange::Proxy(e) => e.backend,
            Exchange::Bridge(e) => e.backend,
        }
    }

    /// When the request was handed over.
    pub fn started(&self) -> Instant {
        match self {
            Exchange::Proxy(e) => e.started,
            Exchange::Bridge(e) => e.started,
        }
    }

    /// The status relayed so far (0: none yet).
    pub fn status(&self) -> u16 {
        match self {
            Exchange::Proxy(e) => e.status,
            Exchange::Bridge(_) => 0,
        }
    }

    /// Body bytes relayed so far.
    pub fn relayed(&self) -> u64 {
        match self {
            Exchange::Proxy(e) => e.relayed,
            Exchange::Bridge(_) => 0,
        }
    }

    /// The client's HTTP version.
    pub fn client_version(&self) -> Version {
        match self {
            Exchange::Proxy(e) => e.client_version(),
            Exchange::Bridge(e) => e.client_version,
        }
    }

    /// The request is HEAD.
    pub fn is_head(&self) -> bool {
        matches!(self, Exchange::Proxy(e) if e.is_head())
    }

    /// The client asked to close after this response.
    pub fn client_close(&self) -> bool {
        match self {
            Exchange::Proxy(e) => e.client_close,
            Exchange::Bridge(_) => true,
        }
    }

    /// Part of the request body has not been forwarded or read (it may still be arriving).
    pub fn body_unsent(&self) -> bool {
        matches!(self, Exchange::Proxy(e) if e.body_unsent())
    }

    /// What the worker takes back when the exchange is over: the response parser, and the
    /// cache slot of a response that may be kept.
    pub fn into_parts(self) -> (Box<fastpath_http::ResponseParser>, Option<CacheSlot>) {
        match self {
            Exchange::Proxy(e) => e.into_parts(),
            Exchange::Bridge(e) => (e.into_parser(), None),
        }
    }
}
