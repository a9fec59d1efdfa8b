//! Upstream connections: a second socket a handler can attach to a client connection, to
//! talk to a backend on the same event loop (the proxy hand-over).
//!
//! The handler never touches descriptors. During a call it asks its connection's
//! [`UpstreamPort`] to connect (to an address, under a pool key) or to release the upstream
//! (back to the worker's keep-alive pool, or closed); the driver carries the request out
//! after the call, does the socket I/O, and calls the handler again whenever something
//! happened upstream: connected, failed, bytes arrived, the output drained, the end came.
//! While the upstream is connecting or takes no more of its output, the driver stops reading
//! the client, so a request body arrives no faster than the backend reads it.
//! A connection released for reuse stays parked on its client connection, still registered
//! with the event loop, so that the client's next request to the same backend takes it back
//! without a system call (the common case of a keep-alive client whose requests all go to
//! one backend); an event on a parked connection (the backend closed it or sent something
//! unasked) marks it stale. When the client connection closes or asks for another backend,
//! the parked connection moves to the worker's pool, kept per pool key and reused after a
//! check that the backend has not closed it meanwhile.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use fastpath_sys::{getsockopt_int, setsockopt_int, syscall};

use crate::buffers::{BufferPool, Flush, FlushError, Input, Output};
use crate::linked::Spliced;
use crate::splice::{Carrier, Direction, Failure, Joint, PumpError, Side};
use crate::CloseReason;

/// Where an upstream connection goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum UpstreamAddr {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix stream socket path.
    Unix(PathBuf),
}

impl From<SocketAddr> for UpstreamAddr {
    fn from(addr: SocketAddr) -> Self {
        UpstreamAddr::Tcp(addr)
    }
}

/// Where an upstream connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamState {
    /// None attached.
    None,
    /// The connect is under way.
    Connecting,
    /// Connected (newly or taken from the pool); bytes can flow.
    Connected,
    /// The connect or the connection failed.
    Failed(io::ErrorKind),
    /// The backend finished sending (end of stream); what it sent is still in `input`.
    Ended,
}

/// One body splice under way, and the idle time after which the handler's deadline fires.
pub(crate) struct BodySplice {
    pub(crate) direction: Direction,
    pub(crate) idle: Duration,
}

/// Where a joined connection stands after a pump.
pub(crate) enum JointStep {
    /// Still joined; `moved` when bytes (or an end of stream) moved; `recheck` when it must
    /// be pumped again soon ([`crate::splice::CARRIED_RECHECK`]) whatever happens.
    Going { moved: bool, recheck: bool },
    /// The backend's end has reached the client: the joint is done.
    Finished,
    /// A side failed: close the connection for this reason.
    Close(CloseReason),
}

/// What the handler asked of the port during a call.
#[derive(Debug)]
enum Request {
    Connect {
        key: u64,
        addr: UpstreamAddr,
        idle: Duration,
    },
    Release {
        reuse: bool,
    },
}

/// The upstream side of one client connection, as a handler sees it. Everything but the
/// model's abilities lives in a box made on first use, so that the many connections that
/// never hand over a request carry one pointer for it.
#[derive(Default)]
pub struct UpstreamPort {
    port: Option<Box<Port>>,
    /// The model can run upstream connections; when false, `connect` fails at once.
    supported: bool,
    /// The model can splice bodies; when false, a body splice fails at once with
    /// `Unsupported`.
    splicing: bool,
    /// A state change not yet shown to the handler (set by the driver).
    pub(crate) notify: bool,
}

/// The state of an [`UpstreamPort`] in use.
#[derive(Default)]
struct Port {
    conn: Option<Upstream>,
    request: Option<Request>,
    supported: bool,
    splicing: bool,
    /// A connect that failed before any socket existed, reported within the same call.
    failed_now: Option<io::ErrorKind>,
    /// The handler asked to join the connections, ending when idle this long, through a
    /// carrier if it gave one.
    join_request: Option<(Duration, Option<Box<dyn Carrier>>)>,
    /// Body splices asked for during the call: bytes and idle time, towards the client and
    /// towards the upstream.
    splice_requests: [Option<(u64, Duration)>; 2],
}

/// One attached upstream connection.
pub(crate) struct Upstream {
    pub(crate) fd: OwnedFd,
    key: u64,
    pub(crate) input: Input,
    pub(crate) output: Output,
    state: UpstreamState,
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    pub(crate) hangup: bool,
    /// The output was non-empty at the last look (so draining it is news).
    had_output: bool,
    /// Released for reuse at this time and kept on the client connection.
    parked: Option<Instant>,
    /// Carried an earlier exchange (taken back from parking or from the pool).
    reused: bool,
    /// Kept idle for reuse at most this long.
    idle_timeout: Duration,
    /// A body moving from the upstream to the client through a pipe.
    pub(crate) to_client: Option<Box<BodySplice>>,
    /// A body moving from the client to the upstream through a pipe.
    pub(crate) to_upstream: Option<Box<BodySplice>>,
    /// How the last splice each way ended, until the handler looks.
    pub(crate) outcomes: [Spliced; 2],
}

/// Indexes of [`Upstream::outcomes`] and [`UpstreamPort`]'s splice requests.
pub(crate) const TO_CLIENT: usize = 0;
pub(crate) const TO_UPSTREAM: usize = 1;

impl Port {
    fn connect(&mut self, key: u64, addr: UpstreamAddr, idle: Duration) {
        if !self.supported {
            self.conn = None;
            self.request = None;
            self.failed_now = Some(io::ErrorKind::Unsupported);
            return;
        }
        self.failed_now = None;
        self.request = Some(Request::Connect { key, addr, idle });
    }

    fn release(&mut self, reuse: bool) {
        self.failed_now = None;
        if self.conn.is_some() || matches!(self.request, Some(Request::Connect { .. })) {
            self.request = Some(Request::Release { reuse });
        }
    }

    fn join(&mut self, idle: Duration, carrier: Option<Box<dyn Carrier>>) {
        self.join_request = Some((idle, carrier));
    }

    fn splice_to_client(&mut self, len: u64, idle: Duration) {
        self.splice_requests[TO_CLIENT] = Some((len, idle));
    }

    fn splice_to_upstream(&mut self, len: u64, idle: Duration) {
        self.splice_requests[TO_UPSTREAM] = Some((len, idle));
    }

    fn to_client(&self) -> Spliced {
        self.spliced(TO_CLIENT)
    }

    fn to_upstream(&self) -> Spliced {
        self.spliced(TO_UPSTREAM)
    }

    fn spliced(&self, way: usize) -> Spliced {
        if self.splice_requests[way].is_some() {
            return Spliced::Running;
        }
        self.conn
            .as_ref()
            .map_or(Spliced::None, |up| up.outcomes[way])
    }

    /// Starts the splices the handler asked for during the call; a direction that cannot get
    /// a pipe fails at once. True when one failed that way (the handler must hear of it).
    fn start_splices(&mut self) -> bool {
        let requests = std::mem::take(&mut self.splice_requests);
        let Some(up) = self.conn.as_mut().filter(|up| up.parked.is_none()) else {
            return requests.iter().any(Option::is_some);
        };
        let mut failed = false;
        for (way, request) in requests.into_iter().enumerate() {
            let Some((len, idle)) = request else {
                continue;
            };
            let made = if self.splicing {
                Direction::new(Some(len), false)
            } else {
                Err(io::ErrorKind::Unsupported.into())
            };
            match made {
                Ok(direction) => {
                    up.outcomes[way] = Spliced::Running;
                    let splice = Some(Box::new(BodySplice { direction, idle }));
                    if way == TO_CLIENT {
                        up.to_client = splice;
                    } else {
                        up.to_upstream = splice;
                    }
                }
                Err(e) => {
                    if self.splicing {
                        tracing::warn!("cannot make a pipe to splice a body through: {e}");
                    }
                    up.outcomes[way] = Spliced::Failed(e.kind());
                    failed = true;
                }
            }
        }
        failed
    }

    fn state(&self) -> UpstreamState {
        if let Some(kind) = self.failed_now {
            return UpstreamState::Failed(kind);
        }
        match (&self.conn, &self.request) {
            (_, Some(Request::Connect { .. })) => UpstreamState::Connecting,
            (_, Some(Request::Release { .. })) | (None, None) => UpstreamState::None,
            (Some(up), None) if up.parked.is_some() => UpstreamState::None,
            (Some(up), None) => up.state,
        }
    }

    fn input(&mut self) -> Option<&mut Input> {
        self.live().map(|up| &mut up.input)
    }

    fn output(&mut self) -> Option<&mut Output> {
        self.live().map(|up| &mut up.output)
    }

    fn pending_input(&self) -> usize {
        match (&self.conn, &self.request) {
            (Some(up), None) if up.parked.is_none() => up.input.len(),
            _ => 0,
        }
    }

    fn pending_output(&self) -> u64 {
        match (&self.conn, &self.request) {
            (Some(up), None) if up.parked.is_none() => up.output.pending(),
            _ => 0,
        }
    }

    fn live(&mut self) -> Option<&mut Upstream> {
        if self.request.is_some() {
            return None;
        }
        self.conn.as_mut().filter(|up| up.parked.is_none())
    }

    fn attached(&mut self) -> Option<&mut Upstream> {
        self.conn.as_mut()
    }
}

impl UpstreamPort {
    pub(crate) fn new(supported: bool, splicing: bool) -> Self {
        UpstreamPort {
            port: None,
            supported,
            splicing,
            notify: false,
        }
    }

    /// The port's state, made on first use.
    fn port(&mut self) -> &mut Port {
        let (supported, splicing) = (self.supported, self.splicing);
        self.port.get_or_insert_with(|| {
            Box::new(Port {
                supported,
                splicing,
                ..Port::default()
            })
        })
    }

    /// Whether this model can splice bodies: [`UpstreamPort::splice_to_client`] and
    /// [`UpstreamPort::splice_to_upstream`] work. Where they do not (the io_uring model,
    /// whose receives take the bytes as they arrive), handlers copy instead.
    /// [`UpstreamPort::join`] works on every model.
    pub fn can_splice(&self) -> bool {
        self.splicing
    }

    /// Asks for an upstream connection to `addr`, reusing an idle one kept under `key` if
    /// there is one. Takes effect after the call; the handler is called again once it is
    /// connected or has failed. Any attached upstream is released (not reused) first. Once
    /// released for reuse, the connection is kept for at most `idle`.
    pub fn connect(&mut self, key: u64, addr: UpstreamAddr, idle: Duration) {
        self.port().connect(key, addr, idle)
    }

    /// Whether the attached connection carried an earlier exchange. A backend may close an
    /// idle connection at any moment (RFC 9112 §9.3.1), so one that fails or ends before
    /// answering may have been closed before the request reached it, and an idempotent
    /// request can be sent again on another connection (§9.3.1.1).
    pub fn reused(&self) -> bool {
        self.port
            .as_ref()
            .and_then(|port| port.conn.as_ref())
            .is_some_and(|up| up.reused)
    }

    /// Lets go of the upstream after the call: kept for reuse under its key when `reuse`
    /// is true and nothing is left unread or unsent, else closed.
    pub fn release(&mut self, reuse: bool) {
        if let Some(port) = self.port.as_mut() {
            port.release(reuse);
        }
    }

    /// Joins the client connection and the connected upstream for good, after the call:
    /// bytes queued on either side are sent first, then everything either side sends goes to
    /// the other through kernel pipes (splice), each end of stream is passed on, and the
    /// connection closes when both directions have ended, either side fails, or nothing
    /// moves for `idle`. The handler is not called again for the connection except
    /// [`crate::Handler::on_close`]; unconsumed client input goes to the upstream and
    /// unconsumed upstream input to the client. Without a connected upstream the connection
    /// is aborted.
    pub fn join(&mut self, idle: Duration) {
        self.port().join(idle, None)
    }

    /// As [`UpstreamPort::join`], but the bytes are moved by `carrier` (see [`Carrier`]) once
    /// what user space holds for either side has been sent, if nothing waits unread in either
    /// socket then and the carrier takes them; otherwise through pipes as `join` does.
    pub fn join_carried(&mut self, idle: Duration, carrier: Box<dyn Carrier>) {
        self.port().join(idle, Some(carrier))
    }

    /// After the call, moves exactly `len` bytes of the upstream's stream to the client through
    /// a kernel pipe (splice), after what the client output and the upstream input already
    /// hold; meanwhile nothing is read from the upstream into [`UpstreamPort::input`]. The
    /// handler is called again when it is over ([`UpstreamPort::to_client`]). Each time bytes
    /// move, the connection's deadline is pushed to `idle` from then, so the handler's
    /// timeout fires only when nothing moved for that long.
    pub fn splice_to_client(&mut self, len: u64, idle: Duration) {
        self.port().splice_to_client(len, idle)
    }

    /// After the call, moves exactly `len` bytes of the client's stream to the upstream through
    /// a kernel pipe, after what the upstream output already holds; meanwhile nothing is read
    /// from the client into the connection's input. As [`UpstreamPort::splice_to_client`]
    /// otherwise.
    pub fn splice_to_upstream(&mut self, len: u64, idle: Duration) {
        self.port().splice_to_upstream(len, idle)
    }

    /// Where the splice towards the client stands; a finished one's outcome is shown until
    /// another splice that way, or until the upstream is released.
    pub fn to_client(&self) -> Spliced {
        self.port
            .as_ref()
            .map_or(Spliced::None, |port| port.to_client())
    }

    /// Where the splice towards the upstream stands.
    pub fn to_upstream(&self) -> Spliced {
        self.port
            .as_ref()
            .map_or(Spliced::None, |port| port.to_upstream())
    }

    /// Where the upstream stands.
    pub fn state(&self) -> UpstreamState {
        self.port
            .as_ref()
            .map_or(UpstreamState::None, |port| port.state())
    }

    /// Bytes received from the backend and not consumed yet.
    pub fn input(&mut self) -> Option<&mut Input> {
        self.port.as_mut()?.input()
    }

    /// Bytes queued for the backend.
    pub fn output(&mut self) -> Option<&mut Output> {
        self.port.as_mut()?.output()
    }

    /// Bytes received and not consumed (0 without an upstream).
    pub fn pending_input(&self) -> usize {
        self.port.as_ref().map_or(0, |port| port.pending_input())
    }

    /// Bytes queued for the backend and not sent yet.
    pub fn pending_output(&self) -> u64 {
        self.port.as_ref().map_or(0, |port| port.pending_output())
    }

    pub(crate) fn attached(&mut self) -> Option<&mut Upstream> {
        self.port.as_mut()?.attached()
    }

    /// The upstream in use (attached and not parked), if any.
    fn in_use(&self) -> Option<&Upstream> {
        let port = self.port.as_ref()?;
        port.conn.as_ref().filter(|up| up.parked.is_none())
    }

    /// Whether the driver should stop reading the client: the upstream is still connecting,
    /// or its socket is full with [`MAX_UPSTREAM_OUTPUT`] or more waiting behind it. What the
    /// client sends meanwhile (a request body, as a rule) has nowhere to go, and TCP holds the
    /// client back instead of its bytes piling up here. Reading resumes once the upstream
    /// takes bytes again; the handler hears of it when its output has drained.
    pub(crate) fn holds_client_back(&self) -> bool {
        self.in_use().is_some_and(|up| {
            up.state == UpstreamState::Connecting
                || (!up.writable && up.output.pending() >= MAX_UPSTREAM_OUTPUT)
        })
    }

    /// Whether unconsumed client input may be waiting for the upstream rather than for the
    /// handler: the upstream is connecting or has output it has not sent yet (a handler
    /// forwarding a body stops while that is large).
    pub(crate) fn waits_to_send(&self) -> bool {
        self.in_use()
            .is_some_and(|up| up.state == UpstreamState::Connecting || !up.output.is_empty())
    }

    /// Starts the splices the handler asked for during the call; true when one failed at
    /// once (the handler must hear of it).
    fn start_splices(&mut self) -> bool {
        self.port.as_mut().is_some_and(|port| port.start_splices())
    }

    /// The join the handler asked for during the call, if any.
    fn take_join_request(&mut self) -> Option<(Duration, Option<Box<dyn Carrier>>)> {
        self.port.as_mut()?.join_request.take()
    }

    /// Carries out what the handler asked of the port during a call (connect, release,
    /// splices), marking `notify` when the handler must hear of something at once; returns the
    /// join it asked for, which each model carries out (or refuses) itself.
    /// The handler never used the port: there is nothing to carry out after its calls (the
    /// static path's case, checked before anything else is set up for one).
    #[inline]
    pub(crate) fn unused(&self) -> bool {
        self.port.is_none()
    }

    pub(crate) fn after_call(
        &mut self,
        registry: &mut dyn Registry,
        pool: &mut UpstreamPool,
        buffers: &mut BufferPool,
        now: Instant,
    ) -> Option<(Duration, Option<Box<dyn Carrier>>)> {
        if self.apply(registry, pool, buffers, now) {
            self.notify = true;
        }
        if self.start_splices() {
            self.notify = true;
        }
        self.take_join_request()
    }

    /// Carries out what the handler asked during the call. Returns true when the handler
    /// must be called again at once (a connect finished or failed immediately).
    fn apply(
        &mut self,
        registry: &mut dyn Registry,
        pool: &mut UpstreamPool,
        buffers: &mut BufferPool,
        now: Instant,
    ) -> bool {
        match self.port.as_mut() {
            Some(port) => port.apply(registry, pool, buffers, now),
            None => false,
        }
    }

    /// Drops the upstream with the client connection; a parked one goes to the pool.
    pub(crate) fn close(
        &mut self,
        registry: &mut dyn Registry,
        pool: &mut UpstreamPool,
        buffers: &mut BufferPool,
        now: Instant,
    ) {
        if let Some(port) = self.port.as_mut() {
            port.close(registry, pool, buffers, now);
        }
    }
}

/// Idle upstream connections a worker keeps per backend address.
pub(crate) const IDLE_UPSTREAMS_PER_KEY: usize = 64;

/// Idle upstream connections kept for reuse, per pool key, by one worker.
pub(crate) struct UpstreamPool {
    idle: HashMap<u64, Vec<PooledUpstream>>,
    /// Idle connections kept per key.
    pub(crate) per_key: usize,
}

/// An idle connection in the pool.
struct PooledUpstream {
    fd: OwnedFd,
    /// Idle since.
    since: Instant,
    /// Closed rather than reused once idle this long.
    idle_timeout: Duration,
    /// The connection slot whose operations may still use the descriptor (see
    /// [`Registry::holder`]); not lent until they are over.
    held_by: Option<(usize, u32)>,
}

impl PooledUpstream {
    fn expired(&self, now: Instant) -> bool {
        now.duration_since(self.since) >= self.idle_timeout
    }
}

impl UpstreamPool {
    pub(crate) fn new(per_key: usize) -> Self {
        UpstreamPool {
            idle: HashMap::new(),
            per_key,
        }
    }

    /// An idle connection under `key` that is still open and held by nobody, if any.
    fn take(&mut self, key: u64, now: Instant) -> Option<OwnedFd> {
        let list = self.idle.get_mut(&key)?;
        while let Some(i) = list.iter().rposition(|p| p.held_by.is_none()) {
            let pooled = list.remove(i);
            if !pooled.expired(now) && still_open(pooled.fd.as_raw_fd()) {
                return Some(pooled.fd);
            }
        }
        None
    }

    fn put(
        &mut self,
        key: u64,
        fd: OwnedFd,
        since: Instant,
        idle_timeout: Duration,
        held_by: Option<(usize, u32)>,
    ) {
        let list = self.idle.entry(key).or_default();
        if list.len() < self.per_key {
            list.push(PooledUpstream {
                fd,
                since,
                idle_timeout,
                held_by,
            });
        }
    }

    /// The operations of slot `holder` are over: its descriptors may be lent.
    pub(crate) fn release_holds(&mut self, holder: (usize, u32)) {
        for pooled in self.idle.values_mut().flatten() {
            if pooled.held_by == Some(holder) {
                pooled.held_by = None;
            }
        }
    }

    /// Drops the descriptors slot `holder` still holds: one of its operations saw bytes or
    /// an end of stream on a connection that should have been idle.
    pub(crate) fn discard_held(&mut self, holder: (usize, u32)) {
        for list in self.idle.values_mut() {
            list.retain(|pooled| pooled.held_by != Some(holder));
        }
    }

    /// Closes connections idle past their timeout.
    pub(crate) fn sweep(&mut self, now: Instant) {
        for list in self.idle.values_mut() {
            list.retain(|pooled| !pooled.expired(now));
        }
    }
}

/// True when the backend has neither closed the connection nor sent anything unasked
/// (either makes an idle connection unusable).
fn still_open(fd: RawFd) -> bool {
    let mut byte = 0u8;
    let n = unsafe {
        libc::recv(
            fd,
            &mut byte as *mut u8 as *mut libc::c_void,
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock
}

/// Starts a non-blocking connect; true when it completed at once.
pub(crate) fn start_connect(addr: &UpstreamAddr) -> io::Result<(OwnedFd, bool)> {
    let (domain, storage) = match addr {
        UpstreamAddr::Tcp(sa) => {
            let domain = if sa.is_ipv4() {
                libc::AF_INET
            } else {
                libc::AF_INET6
            };
            (domain, socket2::SockAddr::from(*sa))
        }
        UpstreamAddr::Unix(path) => (libc::AF_UNIX, socket2::SockAddr::unix(path)?),
    };
    let fd = syscall!(socket(
        domain,
        libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        0
    ))?;
    // SAFETY: a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    if domain != libc::AF_UNIX {
        setsockopt_int(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)?;
    }
    match syscall!(connect(
        fd.as_raw_fd(),
        storage.as_ptr() as *const _,
        storage.len()
    )) {
        Ok(_) => Ok((fd, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok((fd, false)),
        // A Unix socket whose backlog is full says EAGAIN: the backend is overloaded.
        Err(e) => Err(e),
    }
}

/// What carrying out a port request needs from the driver: registering and deregistering
/// the upstream descriptor with the event mechanism.
pub(crate) trait Registry {
    fn register(&mut self, fd: RawFd) -> io::Result<()>;
    fn deregister(&mut self, fd: RawFd);
    /// Who may still be using a deregistered descriptor: a model whose operations on it
    /// complete later names the connection slot (index, generation) they belong to, and the
    /// pool lends the descriptor to nobody until [`UpstreamPool::release_holds`] says that
    /// slot's operations are over.
    fn holder(&self) -> Option<(usize, u32)> {
        None
    }
}

impl Port {
    /// Carries out what the handler asked during the call. Returns true when the handler
    /// must be called again at once (a connect finished or failed immediately).
    fn apply(
        &mut self,
        registry: &mut dyn Registry,
        pool: &mut UpstreamPool,
        buffers: &mut BufferPool,
        now: Instant,
    ) -> bool {
        match self.request.take() {
            None => false,
            Some(Request::Release { reuse }) => {
                match self.conn.as_mut() {
                    Some(up) if reuse && up.clean() => {
                        if up.parked.is_none() {
                            up.parked = Some(now);
                        }
                    }
                    _ => self.detach(registry, pool, buffers, now, reuse),
                }
                false
            }
            Some(Request::Connect { key, addr, idle }) => {
                if let Some(up) = self.conn.as_mut() {
                    let fresh = up
                        .parked
                        .is_some_and(|since| now.duration_since(since) < up.idle_timeout);
                    if fresh && up.key == key && up.clean() {
                        // Taken back from the client connection: still registered, no
                        // system call. Nothing is due to arrive until a request is sent.
                        up.parked = None;
                        up.reused = true;
                        up.idle_timeout = idle;
                        up.had_output = false;
                        up.outcomes = [Spliced::None; 2];
                        return true;
                    }
                }
                // A parked connection to another backend goes to the pool; a busy one is
                // dropped.
                let parked = self.conn.as_ref().is_some_and(|up| up.parked.is_some());
                self.detach(registry, pool, buffers, now, parked);
                let (fd, connected, reused) = match pool.take(key, now) {
                    Some(fd) => (fd, true, true),
                    None => match start_connect(&addr) {
                        Ok((fd, connected)) => (fd, connected, false),
                        Err(e) => {
                            self.failed_now = Some(e.kind());
                            return true;
                        }
                    },
                };
                if let Err(e) = registry.register(fd.as_raw_fd()) {
                    self.failed_now = Some(e.kind());
                    return true;
                }
                self.conn = Some(Upstream {
                    fd,
                    key,
                    input: Input::default(),
                    output: Output::default(),
                    state: if connected {
                        UpstreamState::Connected
                    } else {
                        UpstreamState::Connecting
                    },
                    // A pooled connection was checked empty: its response will announce itself,
                    // so reading before the request is sent would only say EAGAIN.
                    readable: false,
                    writable: connected,
                    hangup: false,
                    had_output: false,
                    parked: None,
                    reused,
                    idle_timeout: idle,
                    to_client: None,
                    to_upstream: None,
                    outcomes: [Spliced::None; 2],
                });
                connected
            }
        }
    }

    fn detach(
        &mut self,
        registry: &mut dyn Registry,
        pool: &mut UpstreamPool,
        buffers: &mut BufferPool,
        now: Instant,
        reuse: bool,
    ) {
        let Some(mut up) = self.conn.take() else {
            return;
        };
        registry.deregister(up.fd.as_raw_fd());
        let clean = up.clean();
        up.output.clear(buffers);
        up.input.release_if_empty(buffers);
        if reuse && clean {
            let since = up.parked.unwrap_or(now);
            pool.put(up.key, up.fd, since, up.idle_timeout, registry.holder());
        }
    }

    /// Drops the upstream with the client connection; a parked one goes to the pool.
    fn close(
        &mut self,
        registry: &mut dyn Registry,
        pool: &mut UpstreamPool,
        buffers: &mut BufferPool,
        now: Instant,
    ) {
        self.request = None;
        if self.conn.as_ref().is_some_and(|up| up.parked.is_some()) {
            self.detach(registry, pool, buffers, now, true);
            return;
        }
        if let Some(mut up) = self.conn.take() {
            up.output.clear(buffers);
            let unread = up.input.len();
            up.input.consume(unread);
            up.input.release_if_empty(buffers);
        }
    }
}

/// What pumping the body splices of an upstream achieved.
pub(crate) struct SplicePump {
    /// Bytes moved: push the deadline to `idle` from now.
    pub(crate) moved: Option<Duration>,
    /// A splice finished or failed: the handler must hear of it.
    pub(crate) news: bool,
}

impl Upstream {
    /// Moves body bytes spliced either way, each after what user space still holds for the
    /// same destination (`client_output_pending` for the client).
    pub(crate) fn pump_splices(
        &mut self,
        client: Side<'_>,
        client_output_pending: bool,
    ) -> SplicePump {
        let mut result = SplicePump {
            moved: None,
            news: false,
        };
        let fd = self.fd.as_raw_fd();
        if !client_output_pending {
            if let Some(splice) = self.to_client.as_mut() {
                let pumped =
                    splice
                        .direction
                        .pump(fd, &mut self.readable, client.fd, client.writable);
                if Self::settle(
                    &mut self.to_client,
                    &mut self.outcomes[TO_CLIENT],
                    pumped,
                    &mut result,
                ) {
                    result.news = true;
                }
            }
        }
        if self.output.is_empty() {
            if let Some(splice) = self.to_upstream.as_mut() {
                let pumped =
                    splice
                        .direction
                        .pump(client.fd, client.readable, fd, &mut self.writable);
                if Self::settle(
                    &mut self.to_upstream,
                    &mut self.outcomes[TO_UPSTREAM],
                    pumped,
                    &mut result,
                ) {
                    result.news = true;
                }
            }
        }
        result
    }

    /// Records a pump's result; true when the splice is over (done or failed).
    fn settle(
        slot: &mut Option<Box<BodySplice>>,
        outcome: &mut Spliced,
        pumped: Result<bool, Failure>,
        result: &mut SplicePump,
    ) -> bool {
        let Some(splice) = slot.as_ref() else {
            return false;
        };
        let over = match pumped {
            Ok(moved) => {
                if moved {
                    result.moved = Some(splice.idle);
                }
                if splice.direction.is_done() {
                    *outcome = if splice.direction.fell_short() {
                        Spliced::Failed(io::ErrorKind::UnexpectedEof)
                    } else {
                        Spliced::Done
                    };
                    true
                } else {
                    false
                }
            }
            // Which side failed matters to the handler (whose fault it was), not how.
            Err(Failure::Source(_)) => {
                *outcome = Spliced::Failed(io::ErrorKind::UnexpectedEof);
                true
            }
            Err(Failure::Destination(e)) => {
                *outcome = Spliced::Failed(e.kind());
                true
            }
        };
        if over {
            *slot = None;
        }
        over
    }
}

/// Upper bound of unconsumed upstream input before reading pauses (backpressure towards
/// the backend while the client is slow).
pub(crate) const MAX_UPSTREAM_INPUT: usize = 64 * 1024;

/// Unsent upstream output at which, once the socket is full, the client's input stops being
/// read (backpressure towards the client while the backend is slow to take a request body).
pub(crate) const MAX_UPSTREAM_OUTPUT: u64 = 64 * 1024;

impl Upstream {
    /// The socket.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The connect is under way.
    pub(crate) fn is_connecting(&self) -> bool {
        self.state == UpstreamState::Connecting
    }

    /// For a model that receives through completions: whether a receive should be armed
    /// (connected, or parked to notice the backend closing, and not holding too much input).
    pub(crate) fn wants_input(&self) -> bool {
        self.state == UpstreamState::Connected && self.input.len() < MAX_UPSTREAM_INPUT
    }

    /// The backend ended its stream (a parked connection is then stale).
    pub(crate) fn received_end(&mut self) {
        self.hangup = true;
        if self.state == UpstreamState::Connected {
            self.state = UpstreamState::Ended;
        }
    }

    /// The connection failed.
    pub(crate) fn failed(&mut self, kind: io::ErrorKind) {
        self.state = UpstreamState::Failed(kind);
    }

    /// Sends what is queued for a joined upstream while its socket takes it; an error means
    /// the joint is broken.
    pub(crate) fn flush_joined_output(&mut self, pool: &mut BufferPool) -> Result<(), ()> {
        if self.output.is_empty() || !self.writable {
            return Ok(());
        }
        match self.output.flush(self.fd.as_raw_fd(), pool) {
            Ok(Flush::Done) => Ok(()),
            Ok(Flush::WouldBlock) => {
                self.writable = false;
                Ok(())
            }
            Err(_) => Err(()),
        }
    }

    /// Passes on what either side sent that reached user space before a join: the client's
    /// unread input goes to the upstream's output, the upstream's unread input to the
    /// client's output.
    pub(crate) fn cross_over(
        &mut self,
        client_input: &mut Input,
        client_output: &mut Output,
        buffers: &mut BufferPool,
    ) {
        move_unread(client_input, &mut self.output, buffers);
        move_unread(&mut self.input, client_output, buffers);
    }

    /// Moves what can move between the client and this upstream through `joint`, after what
    /// user space still holds for either side (`client_output_pending` for the client).
    pub(crate) fn pump_joint(
        &mut self,
        joint: &mut Joint,
        client: Side<'_>,
        client_output_pending: bool,
    ) -> JointStep {
        let upstream_output_pending = !self.output.is_empty();
        let pumped = joint.pump(
            client,
            Side {
                fd: self.fd.as_raw_fd(),
                readable: &mut self.readable,
                writable: &mut self.writable,
            },
            client_output_pending,
            upstream_output_pending,
            self.input.ever_received(),
        );
        match pumped {
            Ok(pumped) if pumped.finished => JointStep::Finished,
            Ok(pumped) => JointStep::Going {
                moved: pumped.moved,
                recheck: pumped.recheck,
            },
            Err(PumpError::Client(e)) => {
                tracing::debug!("joined client failed: {e}");
                JointStep::Close(CloseReason::PeerGone)
            }
            Err(PumpError::Upstream(e)) => {
                tracing::debug!("joined upstream failed: {e}");
                JointStep::Close(CloseReason::Error)
            }
        }
    }

    /// A failure was seen on the connection.
    pub(crate) fn has_failed(&self) -> bool {
        matches!(self.state, UpstreamState::Failed(_))
    }

    /// Connected, with nothing unread, unsent or unasked: fit to carry another request.
    fn clean(&self) -> bool {
        self.to_client.is_none()
            && self.to_upstream.is_none()
            && self.state == UpstreamState::Connected
            && self.input.is_empty()
            && self.output.is_empty()
            && !self.hangup
            // On a parked connection, readiness may mean the backend sent or closed something,
            // or only that a read stopped at the end of a response without seeing EAGAIN, or
            // an event queued before the connection was parked: look once to tell.
            && !(self.parked.is_some() && self.readable && !still_open(self.fd.as_raw_fd()))
    }

    /// Moves bytes for an attached upstream: finishes a connect, sends queued output, reads
    /// what arrived. Returns true when something happened that the handler should see.
    pub(crate) fn service(&mut self, buffers: &mut BufferPool) -> bool {
        if self.parked.is_some() {
            // Its events only mark it stale (see `clean`); nothing is read here.
            return false;
        }
        let fd = self.fd.as_raw_fd();
        let mut news = false;
        if self.state == UpstreamState::Connecting {
            if !self.writable && !self.hangup {
                return false;
            }
            match socket_error(fd) {
                Ok(()) => {
                    self.state = UpstreamState::Connected;
                    news = true;
                }
                Err(e) => {
                    self.state = UpstreamState::Failed(e.kind());
                    return true;
                }
            }
        }
        if self.state != UpstreamState::Connected && self.state != UpstreamState::Ended {
            return news;
        }
        if !self.output.is_empty() {
            self.had_output = true;
            if self.writable {
                match self.output.flush(fd, buffers) {
                    Ok(Flush::Done) => {}
                    Ok(Flush::WouldBlock) => self.writable = false,
                    Err(FlushError::Io(e)) => {
                        self.state = UpstreamState::Failed(e.kind());
                        return true;
                    }
                    Err(FlushError::FileShrunk) => {
                        self.state = UpstreamState::Failed(io::ErrorKind::UnexpectedEof);
                        return true;
                    }
                }
            }
        }
        if self.had_output && self.output.is_empty() {
            self.had_output = false;
            news = true;
        }
        // A splice to the client takes the upstream's bytes itself.
        while self.state == UpstreamState::Connected
            && self.to_client.is_none()
            && self.readable
            && self.input.len() < MAX_UPSTREAM_INPUT
        {
            match self.input.read_from(fd, buffers) {
                Ok((0, _)) => {
                    self.state = UpstreamState::Ended;
                    news = true;
                }
                Ok((_, filled)) => {
                    news = true;
                    if !filled {
                        self.readable = self.hangup;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.readable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.state = UpstreamState::Failed(e.kind());
                    return true;
                }
            }
        }
        news
    }
}

fn socket_error(fd: RawFd) -> io::Result<()> {
    let err = getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ERROR)?;
    if err == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(err))
    }
}

/// Moves the unread bytes of `from` to the end of `to`.
fn move_unread(from: &mut Input, to: &mut Output, buffers: &mut BufferPool) {
    let unread = from.data();
    if unread.is_empty() {
        return;
    }
    to.write_with(buffers, |buf| buf.extend_from_slice(unread));
    let n = unread.len();
    from.consume(n);
    from.release_if_empty(buffers);
}
