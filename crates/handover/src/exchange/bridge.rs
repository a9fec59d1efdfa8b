//! The bridge: the request head goes to a backend connection linked to the client's, then
//! the two connections are joined in the kernel for good (splice through pipes, or the
//! kernel path's carrier): the bytes read after the head and everything after them go to the
//! backend, its bytes come back, and nothing is parsed or even copied through fastpath
//! again.

use std::time::Instant;

use fastpath_drivers::{Carrier, ConnRef, Io, Next, PoolKey};
use fastpath_http::{ResponseParser, Version};

use super::{pool_key, why_closed, Progress, Start};
use crate::BackendState;

/// Where a bridge stands.
enum Stage {
    /// The backend connection is not asked for yet (the first step asks).
    Unasked,
    /// The connect could not even start.
    CannotStart(std::io::ErrorKind),
    /// Connecting; the head waits in its output.
    Connecting(ConnRef),
    /// Joined: the kernel moves the bytes until either side ends.
    Joined,
}

/// One client connection handed to a backend for good.
pub struct BridgeExchange {
    /// The backend, by index.
    pub backend: usize,
    address: usize,
    stage: Stage,
    /// The address is counted as an open connection in the backend state (until the client
    /// connection closes).
    counted: bool,
    /// The request head as the client sent it.
    staged: Vec<u8>,
    carrier: Option<Box<dyn Carrier>>,
    /// The client's HTTP version, for an error answered before the join.
    pub client_version: Version,
    /// When the backend must have connected by.
    pub deadline: Instant,
    /// When the request was handed over.
    pub started: Instant,
    /// The worker's response parser, lent back when the exchange is over.
    parser: Option<Box<ResponseParser>>,
}

impl BridgeExchange {
    /// Starts a bridge to an address of the backend; `None` when none can be used.
    pub(crate) fn start(
        start: Start,
        backends: &mut [BackendState],
        now: Instant,
    ) -> Option<BridgeExchange> {
        let state = &mut backends[start.backend];
        let address = state.pick(now)?;
        state.opened(address);
        Some(BridgeExchange {
            backend: start.backend,
            address,
            stage: Stage::Unasked,
            counted: true,
            staged: start.staged,
            carrier: start.carrier,
            client_version: start.client_version,
            deadline: now + state.config().connect_timeout,
            started: now,
            parser: None,
        })
    }

    pub(crate) fn with_parser(mut self, parser: Box<ResponseParser>) -> Self {
        self.parser = Some(parser);
        self
    }

    pub(crate) fn into_parser(self) -> Box<ResponseParser> {
        self.parser.expect("lent at the start")
    }

    /// Moves the bridge on: asks for the backend connection and queues the head, waits for
    /// the connect (holding the client back), then joins.
    pub(crate) fn step(&mut self, backends: &mut [BackendState], io: &mut Io<'_>) -> Progress {
        let conn = match self.stage {
            Stage::Unasked => {
                let state = &backends[self.backend];
                let pool = PoolKey {
                    key: pool_key(self.backend, self.address),
                    idle: state.config().idle_timeout,
                };
                let addr = state.address(self.address).clone();
                self.stage = match io.connect_linked(addr, Some(pool)) {
                    Ok(conn) => {
                        if let Ok(mut linked) = io.linked(conn) {
                            linked.write(&std::mem::take(&mut self.staged));
                        }
                        Stage::Connecting(conn)
                    }
                    Err(e) => Stage::CannotStart(e.kind()),
                };
                return self.step(backends, io);
            }
            Stage::CannotStart(kind) => return self.failed(backends, io, &format!("{kind:?}")),
            Stage::Connecting(conn) => conn,
            Stage::Joined => return Progress::Joined,
        };
        let connected = match io.linked(conn) {
            Ok(mut linked) => {
                // The head leaving confirms the connect.
                linked.wake_when_sent();
                linked.connected()
            }
            Err(reason) => return self.failed(backends, io, why_closed(reason)),
        };
        if !connected {
            io.set_deadline(Some(self.deadline));
            return Progress::Wait(Next::Wait);
        }
        backends[self.backend].succeeded(self.address);
        // From here on the kernel moves the bytes; what the client sent after the head is
        // passed on by the join. The joint ends when the backend's end reaches the client,
        // or after the response timeout without a byte either way.
        let idle = backends[self.backend].config().response_timeout;
        match self.carrier.take() {
            Some(carrier) => io.join_carried(conn, idle, carrier),
            None => io.join(conn, idle),
        }
        self.stage = Stage::Joined;
        Progress::Joined
    }

    /// The connect did not complete in time: 504.
    pub(crate) fn timed_out(&mut self, backends: &mut [BackendState], io: &mut Io<'_>) -> Progress {
        backends[self.backend].failed(self.address, io.now());
        self.drop_connection(io);
        Progress::Failed(504)
    }

    /// The backend connection failed before the join: 502, and the address counts as
    /// failing.
    fn failed(&mut self, backends: &mut [BackendState], io: &mut Io<'_>, why: &str) -> Progress {
        tracing::warn!("backend connection failed: {why}");
        backends[self.backend].failed(self.address, io.now());
        self.drop_connection(io);
        Progress::Failed(502)
    }

    fn drop_connection(&mut self, io: &mut Io<'_>) {
        if let Stage::Connecting(conn) = std::mem::replace(&mut self.stage, Stage::Unasked) {
            io.release(conn, false);
        }
    }

    /// Forgets the connection count when the client connection is gone.
    pub(crate) fn forget(&mut self, backends: &mut [BackendState]) {
        if self.counted {
            backends[self.backend].closed(self.address);
            self.counted = false;
        }
    }
}
