//! Transports: what a listener's connections speak below the handler contract (TLS).
//!
//! A listener may name a [`TransportSetup`]; each connection accepted on it then gets a
//! [`Transport`] of its own, and [`Transported`] (which every model wraps around the
//! service's handler) runs it: the handshake first, under the setup's handshake timeout, and
//! only then the handler's `on_open`; afterwards the ciphertext the loops read goes through
//! the transport into a plaintext [`Input`] the handler sees, and the handler's plaintext
//! [`Output`] (inline bytes, shared buffers, file ranges read with pread) is encoded a bounded
//! amount ahead of the socket. So every service gets TLS without a change, and this crate
//! knows no TLS library: the implementation lives behind the trait (`fastpath-tls`).
//!
//! A listener may also expect a PROXY protocol header (v1 or v2, [`ProxyProtocol`]) from the
//! load balancer in front of it: it is read first, from trusted sources only and within the
//! header timeout, and the client address it carries becomes the connection's peer
//! ([`Opened::peer`]) for everything after it (the TLS handshake, the handler, its logs).
//!
//! Connections of listeners without either, and outgoing and linked ones, are passed
//! straight to the handler.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::buffers::{FlushError, Input, Output};
use crate::contract::Io;
use crate::{CloseReason, Handler, Next, Opened, Worker};

/// One connection's transport: bytes from the peer in, plaintext out, and back.
pub trait Transport: Send {
    /// Takes in bytes received from the peer from the front of `wire`, appending what they
    /// decode to (plaintext) to `plain`. Whatever it has to answer (handshake messages, an
    /// alert) it queues for [`Transport::take_wire`]. `Err` when the peer broke the protocol:
    /// the connection ends once the queued bytes are sent.
    fn receive(&mut self, wire: &[u8], plain: &mut Vec<u8>) -> Result<Received, TransportError>;

    /// Encodes `plain` (all of it, as one record where it fits) to be sent.
    fn send(&mut self, plain: &[u8]) -> Result<(), TransportError>;

    /// Appends the bytes queued for the peer to `wire`.
    fn take_wire(&mut self, wire: &mut Vec<u8>);

    /// Whether bytes are queued for the peer.
    fn wants_wire(&self) -> bool;

    /// Whether the handshake is over and plaintext may flow both ways.
    fn is_established(&self) -> bool;

    /// Queues the end of the stream (TLS close_notify).
    fn close(&mut self);

    /// What the handshake agreed, once [`Transport::is_established`].
    fn info(&self) -> TransportInfo;
}

/// What [`Transport::receive`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Received {
    /// Bytes of `wire` taken; the rest is offered again with more.
    pub taken: usize,
    /// The peer ended its stream properly (close_notify): no more plaintext will come.
    pub ended: bool,
}

/// Why a transport gave up on a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportError {
    /// What went wrong, for the error log.
    pub message: String,
    /// A short fixed name for the metrics (`bad_record`, `no_shared_cipher`, ...).
    pub kind: &'static str,
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TransportError {}

/// What a connection's handshake agreed, as the handler sees it ([`Io::transport`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TransportInfo {
    /// The server name the client asked for (TLS SNI), in lower case.
    pub server_name: Option<Box<str>>,
    /// The application protocol agreed by ALPN.
    pub alpn: Option<Box<[u8]>>,
    /// The protocol version (`TLSv1.3`).
    pub protocol: &'static str,
    /// The cipher suite (`TLS13_AES_128_GCM_SHA256`).
    pub cipher: &'static str,
    /// The session was resumed (no full handshake).
    pub resumed: bool,
}

/// What a listener's connections run under: makes each connection's [`Transport`].
pub trait TransportSetup: Send + Sync {
    /// The transport of a connection just accepted from `opened`.
    fn start(&self, opened: &Opened) -> Box<dyn Transport>;

    /// How long a handshake may take, from the accept, before the connection is closed.
    fn handshake_timeout(&self) -> Duration;

    /// A handshake ended: it succeeded (with the session resumed or not), or failed for the
    /// reason named by `failure` (a [`TransportError::kind`], or `timeout`). For the
    /// metrics; the default counts nothing.
    fn handshake_done(&self, _resumed: bool, _failure: Option<&'static str>) {}
}

/// What one listener's connections run under.
#[derive(Clone, Default)]
pub struct Layers {
    /// A PROXY protocol header is expected first.
    pub proxy: Option<Arc<ProxyProtocol>>,
    /// Then a transport (TLS).
    pub transport: Option<Arc<dyn TransportSetup>>,
}

impl Layers {
    /// Whether the listener's connections go to the handler as they are.
    pub fn is_plain(&self) -> bool {
        self.proxy.is_none() && self.transport.is_none()
    }
}

/// The layers of each listener, by the listener's index (see [`Opened::listener`]);
/// listeners past the end are plain, unless every listener has the same layers.
#[derive(Clone, Default)]
pub struct Transports {
    by_listener: Arc<[Layers]>,
    /// The layers of every listener, for a service whose addresses all speak alike.
    every: Option<Arc<Layers>>,
}

impl Transports {
    /// Listener `i` runs under `layers[i]`.
    pub fn new(layers: Vec<Layers>) -> Self {
        Transports {
            by_listener: layers.into(),
            every: None,
        }
    }

    /// Every listener runs under `layers`, however many sockets the model binds.
    pub fn every_listener(layers: Layers) -> Self {
        Transports {
            by_listener: Arc::new([]),
            every: Some(Arc::new(layers)),
        }
    }

    /// The layers of listener `index`, if it has any.
    pub fn of(&self, index: usize) -> Option<&Layers> {
        self.by_listener
            .get(index)
            .or(self.every.as_deref())
            .filter(|layers| !layers.is_plain())
    }

    /// Whether some listener has a layer (PROXY protocol or a transport).
    fn any_layered(&self) -> bool {
        self.by_listener
            .iter()
            .chain(self.every.as_deref())
            .any(|layers| !layers.is_plain())
    }
}

impl fmt::Debug for Transports {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let layered: Vec<usize> = (0..self.by_listener.len())
            .filter(|&i| self.of(i).is_some())
            .collect();
        f.debug_struct("Transports")
            .field("listeners", &layered)
            .finish()
    }
}

/// A listener whose clients come through a load balancer that sends the PROXY protocol
/// header (HAProxy's `send-proxy` or `send-proxy-v2`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyProtocol {
    /// The addresses the header is accepted from (the load balancers); a connection from
    /// anywhere else is closed, as is one whose first bytes are no valid header.
    pub trusted: Vec<Cidr>,
    /// How long the header may take to arrive (the header timeout).
    pub timeout: Duration,
}

/// The longest PROXY header taken: v1 is at most 107 bytes; v2 may carry up to 64 KiB of
/// extensions, which no load balancer in front of a web server needs.
pub const PROXY_HEADER_MAX: usize = 1024;

/// An address block, `10.0.0.0/8` or `2001:db8::/32`; a lone address is its own block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` is in the block (an IPv4 address written as IPv6, `::ffff:a.b.c.d`, is
    /// taken as the IPv4 one).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, prefix) = match s.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("\"{s}\" is not an address or an address block"))?;
        let addr = addr.to_canonical();
        let most = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => most,
            Some(p) => match p.parse::<u8>() {
                Ok(p) if p <= most => p,
                _ => return Err(format!("\"{s}\": the prefix length must be 0 to {most}")),
            },
        };
        Ok(Cidr { addr, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// What a PROXY header at the front of `input` says: `Ok(None)` while it is incomplete,
/// `Ok(Some((length, client)))` once whole (`client` is `None` for a header that carries no
/// client address: `LOCAL`, a health check of the balancer's own, or `UNKNOWN`), `Err` for
/// bytes that are no header.
pub fn parse_proxy_header(input: &[u8]) -> Result<Option<(usize, Option<SocketAddr>)>, String> {
    use ppp::{HeaderResult, PartialResult};
    // A v2 header says its length up front: one over the limit is refused at once.
    const V2_SIGNATURE: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";
    if input.len() >= 16 && input.starts_with(V2_SIGNATURE) {
        let length = 16 + usize::from(u16::from_be_bytes([input[14], input[15]]));
        if length > PROXY_HEADER_MAX {
            return Err(format!("a PROXY v2 header of {length} bytes"));
        }
    }
    let parsed = HeaderResult::parse(input);
    if parsed.is_incomplete() {
        if input.len() >= PROXY_HEADER_MAX {
            return Err(format!("no PROXY header within {PROXY_HEADER_MAX} bytes"));
        }
        return Ok(None);
    }
    match parsed {
        HeaderResult::V1(Ok(header)) => {
            let client = match header.addresses {
                ppp::v1::Addresses::Tcp4(a) => {
                    Some(SocketAddr::from((a.source_address, a.source_port)))
                }
                ppp::v1::Addresses::Tcp6(a) => {
                    Some(SocketAddr::from((a.source_address, a.source_port)))
                }
                ppp::v1::Addresses::Unknown => None,
            };
            Ok(Some((header.header.len(), client)))
        }
        HeaderResult::V2(Ok(header)) => {
            if header.len() > PROXY_HEADER_MAX {
                return Err(format!("a PROXY v2 header of {} bytes", header.len()));
            }
            let client = match (header.command, header.addresses) {
                (ppp::v2::Command::Local, _) => None,
                (_, ppp::v2::Addresses::IPv4(a)) => {
                    Some(SocketAddr::from((a.source_address, a.source_port)))
                }
                (_, ppp::v2::Addresses::IPv6(a)) => {
                    Some(SocketAddr::from((a.source_address, a.source_port)))
                }
                (_, _) => None,
            };
            Ok(Some((header.len(), client)))
        }
        HeaderResult::V1(Err(e)) => Err(format!("not a PROXY header: {e}")),
        HeaderResult::V2(Err(e)) => Err(format!("not a PROXY header: {e}")),
    }
}

/// How far ahead of the socket a transport encodes: the encoded bytes queued and not yet
/// sent stay under this, so a large response (a file) is read and encrypted as the peer
/// takes it, not all at once.
pub const ENCODE_AHEAD: u64 = 64 * 1024;

/// Records carry about one TCP segment each while a burst is young, so a client gets its
/// first bytes (a response head, the start of a page) without waiting for a 16 KiB record
/// to arrive whole; past [`SMALL_RECORD_BURST`] bytes they grow to the full 16 KiB, which
/// costs the least per byte. h2o sizes its records the same way.
const SMALL_RECORD: usize = 1400;
const FULL_RECORD: usize = 16 * 1024;
const SMALL_RECORD_BURST: u64 = 16 * 1024;

/// A handler whose connections from some listeners run under a [`Transport`]: the way
/// every model serves TLS listeners (see the module doc). It passes everything else straight
/// to `inner`.
pub struct Transported<H> {
    inner: H,
    transports: Transports,
    /// Some listener has layers: without any, a connection's open is the inner handler's.
    layered: bool,
    /// File bytes read to be encoded, kept for its allocation.
    scratch: Vec<u8>,
}

impl<H: Handler> Transported<H> {
    /// `inner`, with the connections of the listeners `transports` names run under theirs.
    pub fn new(inner: H, transports: Transports) -> Self {
        let layered = transports.any_layered();
        Transported {
            inner,
            transports,
            layered,
            scratch: Vec::new(),
        }
    }

    /// The handler inside.
    pub fn inner(&mut self) -> &mut H {
        &mut self.inner
    }

    /// [`Handler::on_open`] of a connection of a listener with layers: a PROXY header to
    /// wait for (from a trusted address only), or the transport's handshake to start.
    #[inline(never)]
    fn open_under(
        &mut self,
        opened: Opened,
        layers: Layers,
        io: &mut Io<'_>,
    ) -> (Layered<H::Conn>, Next) {
        let transport = layers.transport;
        let Some(proxy) = layers.proxy else {
            return self.open_layers(opened, transport, io);
        };
        let conn = Layered::Preamble { opened, transport };
        if !proxy
            .trusted
            .iter()
            .any(|net| net.contains(opened.peer().ip()))
        {
            tracing::warn!(
                "{}: a PROXY header is accepted only from a trusted address; closed",
                opened.peer()
            );
            return (conn, Next::Abort);
        }
        io.set_deadline(Some(io.now() + proxy.timeout));
        (conn, Next::Read)
    }

    /// A connection whose layers below the handler start now: its transport's handshake,
    /// or the handler's `on_open` for a plain one.
    fn open_layers(
        &mut self,
        opened: Opened,
        transport: Option<Arc<dyn TransportSetup>>,
        io: &mut Io<'_>,
    ) -> (Layered<H::Conn>, Next) {
        let Some(setup) = transport else {
            let (conn, next) = self.inner.on_open(opened, io);
            return (Layered::Plain(conn), next);
        };
        io.set_deadline(Some(io.now() + setup.handshake_timeout()));
        let secured = Secured {
            transport: setup.start(&opened),
            setup,
            opened,
            conn: None,
            info: TransportInfo::default(),
            input: Input::default(),
            output: Output::default(),
            then: Next::Read,
            ended: false,
            closed: false,
            burst: 0,
        };
        (Layered::Secured(Box::new(secured)), Next::Read)
    }

    /// Reads a connection's PROXY header: once it is whole, the client it names is the
    /// connection's peer, and the connection goes on under its layers with what followed.
    #[inline(never)]
    fn preamble_ready(&mut self, conn: &mut Layered<H::Conn>, io: &mut Io<'_>) -> Next {
        let Layered::Preamble { opened, transport } = conn else {
            return Next::Abort;
        };
        let (length, client) = match parse_proxy_header(io.input.data()) {
            Ok(Some(parsed)) => parsed,
            Ok(None) if io.eof => return Next::Close,
            Ok(None) => return Next::Read,
            Err(why) => {
                tracing::warn!("{}: {why}; closed", opened.peer());
                return Next::Abort;
            }
        };
        io.input.consume(length);
        let opened = match client {
            Some(client) => opened.with_peer(client),
            None => *opened,
        };
        let transport = transport.take();
        io.set_deadline(None);
        let (opened_conn, next) = self.open_layers(opened, transport, io);
        *conn = opened_conn;
        // What came with the header is not announced again by the socket.
        if next == Next::Read && (!io.input.is_empty() || io.eof) {
            return self.on_ready(conn, io);
        }
        next
    }

    /// [`Handler::on_ready`] of a connection under a transport; kept out of line, so that a
    /// plain connection's call is the inner handler's call and a match.
    #[inline(never)]
    fn secured_ready(&mut self, secured: &mut Secured<H::Conn>, io: &mut Io<'_>) -> Next {
        let arrived = !io.input.is_empty();
        let plain_before = secured.input.len();
        let ended_before = secured.ended;
        if !secured.receive(io) {
            secured.flush_wire(io);
            return Next::Close;
        }
        if secured.conn.is_none() {
            secured.flush_wire(io);
            if !secured.transport.is_established() {
                secured.input.release_if_empty(io.pool);
                return if io.eof { Next::Close } else { Next::Read };
            }
            // The handshake is over: the handler hears of the connection now.
            secured.info = secured.transport.info();
            secured.setup.handshake_done(secured.info.resumed, None);
            io.set_deadline(None);
            let inner = &mut self.inner;
            let next = secured.call(io, |conn, plain, opened| {
                let (opened_conn, next) = inner.on_open(opened, plain);
                *conn = Some(opened_conn);
                next
            });
            let has_input = !secured.input.is_empty() || secured.ended;
            if next != Next::Read || !has_input {
                return secured.settle(io, next, &mut self.scratch);
            }
        } else {
            let news =
                secured.input.len() != plain_before || secured.ended != ended_before || io.eof;
            // Bytes that complete no record are nothing for the handler yet; a call with no
            // bytes is a wake or the socket having taken the encoded output, which goes on
            // being encoded while the handler waits for all of it to go.
            let encode_only = if arrived {
                !news
            } else {
                secured.then == Next::Drain && !secured.output.is_empty()
            };
            if encode_only {
                return secured.settle(io, secured.then, &mut self.scratch);
            }
        }
        let inner = &mut self.inner;
        let next = secured.call(io, |conn, plain, _| match conn {
            Some(conn) => inner.on_ready(conn, plain),
            None => Next::Abort,
        });
        secured.settle(io, next, &mut self.scratch)
    }
}

/// A connection of a [`Transported`] handler.
pub enum Layered<C> {
    /// Served by the handler as it is.
    Plain(C),
    /// Under a transport.
    Secured(Box<Secured<C>>),
    /// Waiting for its PROXY header, then to go on under `transport` or plain.
    Preamble {
        /// The connection as accepted.
        opened: Opened,
        /// What it runs under once the header is read.
        transport: Option<Arc<dyn TransportSetup>>,
    },
}

/// A connection under a transport: the transport, the plaintext buffers the handler sees,
/// and the handler's own state once the handshake is over.
pub struct Secured<C> {
    transport: Box<dyn Transport>,
    setup: Arc<dyn TransportSetup>,
    opened: Opened,
    /// The handler's state, from its `on_open` (after the handshake).
    conn: Option<C>,
    info: TransportInfo,
    input: Input,
    output: Output,
    /// The handler's last answer, carried out once its output is all encoded.
    then: Next,
    /// The peer ended its stream (close_notify).
    ended: bool,
    /// close_notify is queued: nothing more is encoded.
    closed: bool,
    /// Bytes encoded since the output was last idle (record sizing).
    burst: u64,
}

impl<C> Secured<C> {
    /// A call of the handler with the plaintext buffers lent in place of the wire's.
    fn call<R>(
        &mut self,
        io: &mut Io<'_>,
        call: impl FnOnce(&mut Option<C>, &mut Io<'_>, Opened) -> R,
    ) -> R {
        let eof = self.ended || io.eof;
        let mut plain = io.layered(&mut self.input, &mut self.output, &self.info, eof);
        call(&mut self.conn, &mut plain, self.opened)
    }

    /// Takes in what arrived: false when the transport gave up (its alert is queued).
    fn receive(&mut self, io: &mut Io<'_>) -> bool {
        loop {
            let wire = io.input.data();
            if wire.is_empty() {
                return true;
            }
            let transport = &mut self.transport;
            let received = self
                .input
                .append_with(io.pool, |plain| transport.receive(wire, plain));
            match received {
                Ok(received) => {
                    io.input.consume(received.taken);
                    self.ended |= received.ended;
                    if received.taken == 0 {
                        return true;
                    }
                }
                Err(error) => {
                    if self.conn.is_none() {
                        self.setup.handshake_done(false, Some(error.kind));
                    }
                    tracing::debug!(peer = %self.opened.peer(), "transport: {error}");
                    let n = io.input.len();
                    io.input.consume(n);
                    return false;
                }
            }
        }
    }

    /// Encodes the handler's output up to [`ENCODE_AHEAD`] ahead of the socket, then queues
    /// what the transport has for the peer.
    fn encode(&mut self, io: &mut Io<'_>, scratch: &mut Vec<u8>) -> Result<(), FlushError> {
        if io.output.is_empty() && self.output.is_empty() {
            self.burst = 0;
        }
        while !self.output.is_empty() && io.output.pending() < ENCODE_AHEAD {
            let room = (ENCODE_AHEAD - io.output.pending()) as usize;
            let transport = &mut self.transport;
            let burst = &mut self.burst;
            // The output's pieces are joined into records rather than sealed one each: an
            // HTTP/2 response is a frame header, a header block and a body, each a piece,
            // and a record costs its seal and 22 bytes however little it holds.
            let mut joined = io.pool.take();
            let mut seal = |joined: &mut Vec<u8>, burst: &mut u64, all: bool| {
                let mut at = 0;
                while at < joined.len() {
                    let record = if *burst < SMALL_RECORD_BURST {
                        SMALL_RECORD
                    } else {
                        FULL_RECORD
                    };
                    if !all && joined.len() - at < record {
                        break;
                    }
                    let end = joined.len().min(at + record);
                    transport
                        .send(&joined[at..end])
                        .map_err(std::io::Error::other)?;
                    *burst += (end - at) as u64;
                    at = end;
                }
                joined.drain(..at);
                Ok::<(), std::io::Error>(())
            };
            let taken = self.output.take_front(room, scratch, |bytes| {
                joined.extend_from_slice(bytes);
                seal(&mut joined, burst, false)
            });
            let sealed = seal(&mut joined, burst, true);
            io.pool.give(joined);
            taken?;
            sealed.map_err(FlushError::Io)?;
            self.output.release_if_empty(io.pool);
            self.flush_wire(io);
        }
        self.flush_wire(io);
        Ok(())
    }

    fn flush_wire(&mut self, io: &mut Io<'_>) {
        if self.transport.wants_wire() {
            let transport = &mut self.transport;
            io.output
                .write_with(io.pool, |wire| transport.take_wire(wire));
        }
    }

    /// What the engine is to do once the handler has answered `next`: the handler's output
    /// is encoded as far as it may be, and the answer carried out once all of it is.
    fn settle(&mut self, io: &mut Io<'_>, next: Next, scratch: &mut Vec<u8>) -> Next {
        // The plaintext taken in goes back to the pool once the handler has read it all, as
        // the wire's input does: an idle connection holds no buffer.
        self.input.release_if_empty(io.pool);
        if io.requests.join.take().is_some() {
            // Joining moves bytes in the kernel, around the transport.
            tracing::error!("a connection under a transport cannot be joined; closed");
            return Next::Abort;
        }
        self.then = next;
        if next == Next::Abort {
            return Next::Abort;
        }
        if let Err(error) = self.encode(io, scratch) {
            tracing::debug!(peer = %self.opened.peer(), "transport: output ended: {error:?}");
            return Next::Abort;
        }
        if !self.output.is_empty() {
            // Called again once the socket has taken what is encoded.
            return Next::Drain;
        }
        match next {
            Next::Close | Next::Linger => {
                if !self.closed {
                    self.closed = true;
                    self.transport.close();
                    self.flush_wire(io);
                }
                next
            }
            other => other,
        }
    }
}

impl<H: Handler> Handler for Transported<H> {
    type Conn = Layered<H::Conn>;

    #[inline]
    fn on_open(&mut self, opened: Opened, io: &mut Io<'_>) -> (Self::Conn, Next) {
        let layers = match opened.listener() {
            Some(index) if self.layered => self.transports.of(index).cloned(),
            _ => None,
        };
        match layers {
            None => {
                let (conn, next) = self.inner.on_open(opened, io);
                (Layered::Plain(conn), next)
            }
            Some(layers) => self.open_under(opened, layers, io),
        }
    }

    #[inline]
    fn on_ready(&mut self, conn: &mut Self::Conn, io: &mut Io<'_>) -> Next {
        match conn {
            Layered::Plain(conn) => self.inner.on_ready(conn, io),
            Layered::Secured(secured) => self.secured_ready(secured, io),
            Layered::Preamble { .. } => self.preamble_ready(conn, io),
        }
    }

    fn on_timeout(&mut self, conn: &mut Self::Conn, io: &mut Io<'_>) -> Next {
        let secured = match conn {
            Layered::Plain(conn) => return self.inner.on_timeout(conn, io),
            Layered::Secured(secured) => secured,
            Layered::Preamble { opened, .. } => {
                tracing::debug!("{}: no PROXY header in time; closed", opened.peer());
                return Next::Abort;
            }
        };
        if secured.conn.is_none() {
            secured.setup.handshake_done(false, Some("timeout"));
            return Next::Abort;
        }
        let inner = &mut self.inner;
        let next = secured.call(io, |conn, plain, _| match conn {
            Some(conn) => inner.on_timeout(conn, plain),
            None => Next::Abort,
        });
        secured.settle(io, next, &mut self.scratch)
    }

    fn on_closing(&mut self, conn: &mut Self::Conn, sent: u64) {
        match conn {
            Layered::Plain(conn) => self.inner.on_closing(conn, sent),
            // The plaintext handed to the transport: what of it the peer has is not known
            // record by record.
            Layered::Secured(secured) => {
                let sent = secured.output.sent();
                if let Some(conn) = secured.conn.as_mut() {
                    self.inner.on_closing(conn, sent);
                }
            }
            Layered::Preamble { .. } => {}
        }
    }

    #[inline]
    fn on_close(&mut self, conn: Self::Conn, reason: CloseReason, worker: &mut Worker<'_>) {
        match conn {
            Layered::Plain(conn) => self.inner.on_close(conn, reason, worker),
            Layered::Secured(secured) => {
                if let Some(conn) = secured.conn {
                    self.inner.on_close(conn, reason, worker);
                }
            }
            Layered::Preamble { .. } => {}
        }
    }

    fn on_drain(&mut self, conn: &mut Self::Conn, io: &mut Io<'_>) -> Option<Next> {
        // A PROXY header or a handshake under way when the stop began goes on, bounded by
        // its timeout: the client's first request is then answered (with `Connection:
        // close`), as a plain connection's is. Cutting it would fail handshakes in every
        // reload and graceful stop.
        let secured = match conn {
            Layered::Plain(conn) => return self.inner.on_drain(conn, io),
            Layered::Secured(secured) => secured,
            Layered::Preamble { .. } => return None,
        };
        secured.conn.as_ref()?;
        let inner = &mut self.inner;
        let next = secured.call(io, |conn, plain, _| {
            conn.as_mut().and_then(|conn| inner.on_drain(conn, plain))
        })?;
        Some(secured.settle(io, next, &mut self.scratch))
    }

    fn on_tick(&mut self, now: Instant, worker: &mut Worker<'_>) {
        self.inner.on_tick(now, worker);
    }

    fn on_stop(&mut self) {
        self.inner.on_stop();
    }

    fn refusal(&self, listener: usize) -> &[u8] {
        // Plaintext, which a TLS client would take for a broken record, and which must not
        // come before a PROXY header is read: such listeners refuse with the close alone.
        match self.transports.of(listener) {
            None => self.inner.refusal(listener),
            Some(_) => b"",
        }
    }
}
