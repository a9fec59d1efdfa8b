//! `fastpath echo`: Slick's echo benchmark service.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fastpath_kernel::{EchoPath, TakeOverError, Taken};
use fastpath_sockets::{BufferedSocket, CloseReason, Handler, Io, Next, Opened, Worker};

/// How often a connection whose peer has finished checks whether the kernel has sent back
/// all of its bytes before it is closed.
const FLUSH_CHECK: Duration = Duration::from_millis(5);

/// How often a connection in the kernel checks whether the kernel gave up on it (a peer
/// that does not read its echo, see [`EchoPath::overflowed`]).
const OVERFLOW_CHECK: Duration = Duration::from_millis(250);

/// How the echo service behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoConfig {
    /// No size header: every byte comes back from the first.
    pub plain: bool,
    /// The largest buffer size a client may announce.
    pub max_buffer: u32,
    /// A client silent this long is closed.
    pub idle_timeout: Duration,
    /// Echoed bytes queued for a client that does not read them before its input is left
    /// unread (the client is slowed down by TCP, nothing piles up).
    pub output_limit: usize,
}

impl Default for EchoConfig {
    fn default() -> Self {
        EchoConfig {
            plain: false,
            max_buffer: 16 * 1024 * 1024,
            idle_timeout: Duration::from_secs(60),
            output_limit: 256 * 1024,
        }
    }
}

/// One worker of the echo service. The seed's protocol: the client first sends its buffer
/// size as a 4-byte big-endian integer (1 up to [`EchoConfig::max_buffer`]), then every byte
/// it sends comes back; with [`EchoConfig::plain`] there is no header. Bytes are echoed as
/// they arrive, not held back to make up whole buffers: a client that waits for its
/// buffer to come back gets it as soon as it has all arrived.
///
/// With the kernel path ([`Echo::with_kernel`]) a connection's socket is handed to the kernel
/// once its header is read and nothing is buffered either way (so the kernel's echo cannot
/// overtake user space's): from then on a BPF program sends back what arrives and no payload
/// byte passes user space. The driver keeps the descriptor: a socket in the map still reports
/// the peer's end (a read returns 0) and its errors, so the connection ends as in user space,
/// once the kernel has sent back everything it received (TCP_INFO's counts tell).
pub struct Echo {
    config: EchoConfig,
    kernel: Option<Arc<EchoPath>>,
    kernel_from: u32,
}

impl Echo {
    /// A worker with `config`, in user space.
    pub fn new(config: EchoConfig) -> Self {
        Echo {
            config,
            kernel: None,
            kernel_from: 0,
        }
    }

    /// A worker with `config` that hands the kernel the connections that announce a buffer
    /// of at least `from` bytes (`0`: every connection, plain ones included).
    pub fn with_kernel(config: EchoConfig, kernel: Option<Arc<EchoPath>>, from: u32) -> Self {
        Echo {
            config,
            kernel,
            kernel_from: from,
        }
    }
}

/// Where a connection's echo is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// In user space, for good.
    User,
    /// In user space until the next quiet moment, then in the kernel.
    ToKernel,
    /// In the kernel.
    Kernel,
    /// In the kernel, and the peer has finished: waiting for the kernel to send back the last
    /// bytes before closing, since closing drops what it still holds.
    Flushing { since: Instant, written: u64 },
}

/// An echo client: its address (for the log) and the buffer size it announced.
pub struct EchoConn {
    peer: SocketAddr,
    buffer: Option<u32>,
    path: Path,
    /// The kernel's name for the socket, once it has taken it over.
    taken: Option<Taken>,
}

impl Echo {
    /// Bytes of the stream that are not echoed (the header).
    fn header_len(&self) -> u64 {
        if self.config.plain {
            0
        } else {
            4
        }
    }

    /// Hands the connection to the kernel if nothing is buffered either way: what user space
    /// read has all been written, and nothing waits unread in the socket. Otherwise the echo
    /// goes on in user space until such a moment.
    fn try_take_over(&self, conn: &mut EchoConn, io: &mut Io<'_>) {
        let Some(kernel) = &self.kernel else {
            conn.path = Path::User;
            return;
        };
        if !io.input().is_empty() || !io.output().is_empty() || io.eof() {
            return;
        }
        if fastpath_kernel::unread(io.socket()).map_or(true, |n| n > 0) {
            // Perhaps part of an skb user space has read: see EchoPath::take_over.
            return;
        }
        // A client that follows the protocol has at most one buffer on its way back.
        let limit = conn.buffer.unwrap_or(0);
        match kernel.take_over(io.socket(), limit) {
            Ok(taken) => {
                conn.path = Path::Kernel;
                conn.taken = Some(taken);
                self.arm(io);
            }
            Err(TakeOverError::Full) => {
                tracing::debug!(
                    "echo: client {}: the kernel path is full ({} sockets); echoing in user space",
                    conn.peer,
                    kernel.capacity()
                );
                conn.path = Path::User;
            }
            Err(e) => {
                tracing::debug!(
                    "echo: client {}: the kernel cannot take it ({e}); echoing in user space",
                    conn.peer
                );
                conn.path = Path::User;
            }
        }
    }

    /// The deadline of a connection in the kernel: its next overflow check.
    fn arm(&self, io: &mut Io<'_>) {
        io.set_deadline(Some(
            io.now() + OVERFLOW_CHECK.min(self.config.idle_timeout),
        ));
    }

    /// Whether the kernel gave up on the connection; logs why.
    fn overflowed(&self, conn: &EchoConn) -> bool {
        let (Some(kernel), Some(taken)) = (&self.kernel, conn.taken) else {
            return false;
        };
        if !kernel.overflowed(taken) {
            return false;
        }
        tracing::warn!(
            "echo: client {}: does not read its echo (more than {} bytes held in the kernel); \
             resetting",
            conn.peer,
            conn.buffer.unwrap_or(0).max(kernel.max_held())
        );
        true
    }

    /// For a connection in the kernel whose peer has finished: close once the kernel has sent
    /// back every byte; until then check again shortly.
    fn finish(&self, conn: &mut EchoConn, io: &mut Io<'_>) -> Next {
        if self.overflowed(conn) {
            return Next::Abort;
        }
        let socket = io.socket();
        let (Ok(received), Ok(written)) = (
            fastpath_kernel::bytes_received(socket),
            fastpath_kernel::bytes_written(socket),
        ) else {
            return Next::Close;
        };
        // Once the peer has finished, its FIN counts as one byte received.
        let expected = received.saturating_sub(self.header_len() + u64::from(io.eof()));
        if written >= expected {
            return Next::Close;
        }
        let stalled = match conn.path {
            Path::Flushing {
                since,
                written: before,
            } if before == written => io.now().duration_since(since) >= self.config.idle_timeout,
            _ => {
                conn.path = Path::Flushing {
                    since: io.now(),
                    written,
                };
                false
            }
        };
        if stalled {
            tracing::debug!(
                "echo: client {}: reads none of its last {} bytes; closing",
                conn.peer,
                expected - written
            );
            return Next::Close;
        }
        io.set_deadline(Some(io.now() + FLUSH_CHECK));
        Next::Wait
    }
}

impl Handler for Echo {
    type Conn = EchoConn;

    fn on_open(&mut self, opened: Opened, io: &mut Io<'_>) -> (EchoConn, Next) {
        io.set_deadline(Some(io.now() + self.config.idle_timeout));
        let mut conn = EchoConn {
            peer: opened.peer(),
            buffer: self.config.plain.then_some(0),
            path: if self.kernel.is_some() {
                Path::ToKernel
            } else {
                Path::User
            },
            taken: None,
        };
        if conn.buffer.is_some() && conn.path == Path::ToKernel {
            if self.kernel_from > 0 {
                conn.path = Path::User;
            } else {
                self.try_take_over(&mut conn, io);
            }
        }
        (conn, Next::Read)
    }

    fn on_ready(&mut self, conn: &mut EchoConn, io: &mut Io<'_>) -> Next {
        match conn.path {
            Path::Kernel => self.arm(io),
            Path::Flushing { .. } => {}
            Path::User | Path::ToKernel => {
                io.set_deadline(Some(io.now() + self.config.idle_timeout))
            }
        }
        let mut sock = BufferedSocket::with_limit(io, self.config.output_limit);
        if conn.buffer.is_none() {
            let Some(header) = sock.peek().first_chunk::<4>() else {
                if sock.at_end() {
                    return Next::Close;
                }
                return Next::Read;
            };
            let size = u32::from_be_bytes(*header);
            if size == 0 || size > self.config.max_buffer {
                tracing::warn!(
                    "echo: client {}: buffer size {size} is not in 1..={}; closing",
                    conn.peer,
                    self.config.max_buffer
                );
                return Next::Abort;
            }
            sock.discard(4);
            conn.buffer = Some(size);
            if size < self.kernel_from {
                conn.path = Path::User;
            }
        }
        // In the kernel, what user space still sees is input that arrived as the socket was
        // handed over (echoed here, in order), and the peer's end.
        let room = sock.room();
        sock.send_back(room);
        let finished = sock.at_end() && sock.peek().is_empty();
        match conn.path {
            // Output still queued here is sent while the connection waits (Next::Wait).
            Path::Kernel | Path::Flushing { .. } if finished => self.finish(conn, sock.io()),
            _ if finished => Next::Close,
            Path::ToKernel => {
                self.try_take_over(conn, sock.io());
                match conn.path {
                    // Called again once the echo has left, to hand the socket over then.
                    Path::ToKernel if sock.queued() > 0 => Next::Drain,
                    _ => sock.next(),
                }
            }
            _ => sock.next(),
        }
    }

    fn on_timeout(&mut self, conn: &mut EchoConn, io: &mut Io<'_>) -> Next {
        match conn.path {
            Path::Flushing { .. } => self.finish(conn, io),
            Path::Kernel if self.overflowed(conn) => Next::Abort,
            // User space sees none of the bytes: the socket says when the peer last sent.
            Path::Kernel => match fastpath_kernel::since_last_input(io.socket()) {
                Ok(quiet) if quiet < self.config.idle_timeout => {
                    self.arm(io);
                    Next::Read
                }
                _ => Next::Close,
            },
            Path::User | Path::ToKernel => Next::Close,
        }
    }

    fn on_drain(&mut self, conn: &mut EchoConn, io: &mut Io<'_>) -> Option<Next> {
        if conn.buffer.is_none() {
            return Some(Next::Close);
        }
        if matches!(conn.path, Path::Kernel | Path::Flushing { .. }) {
            // The kernel has echoed what arrived: close once it has all left.
            return Some(self.finish(conn, io));
        }
        // What has arrived is echoed; nothing more is read.
        let mut sock = BufferedSocket::new(io);
        let all = sock.peek().len();
        sock.send_back(all);
        Some(Next::Close)
    }

    fn on_close(&mut self, conn: EchoConn, _reason: CloseReason, _worker: &mut Worker<'_>) {
        if let (Some(kernel), Some(taken)) = (&self.kernel, conn.taken) {
            kernel.release(taken);
        }
    }
}
