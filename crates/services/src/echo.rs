//! `fastpath echo`: Slick's echo benchmark service.

use std::net::SocketAddr;
use std::time::Duration;

use fastpath_sockets::{BufferedSocket, CloseReason, Handler, Io, Next, Opened, Worker};

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
pub struct Echo {
    config: EchoConfig,
}

impl Echo {
    /// A worker with `config`.
    pub fn new(config: EchoConfig) -> Self {
        Echo { config }
    }
}

/// An echo client: its address (for the log) and the buffer size it announced.
pub struct EchoConn {
    peer: SocketAddr,
    buffer: Option<u32>,
}

impl Handler for Echo {
    type Conn = EchoConn;

    fn on_open(&mut self, opened: Opened, io: &mut Io<'_>) -> (EchoConn, Next) {
        *io.deadline = Some(io.now + self.config.idle_timeout);
        let conn = EchoConn {
            peer: opened.peer(),
            buffer: self.config.plain.then_some(0),
        };
        (conn, Next::Read)
    }

    fn on_ready(&mut self, conn: &mut EchoConn, io: &mut Io<'_>) -> Next {
        *io.deadline = Some(io.now + self.config.idle_timeout);
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
        }
        let room = sock.room();
        sock.send_back(room);
        if sock.at_end() && sock.peek().is_empty() {
            return Next::Close;
        }
        sock.next()
    }

    fn on_timeout(&mut self, _conn: &mut EchoConn, _io: &mut Io<'_>) -> Next {
        Next::Close
    }

    fn on_drain(&mut self, conn: &mut EchoConn, io: &mut Io<'_>) -> Option<Next> {
        if conn.buffer.is_none() {
            return Some(Next::Close);
        }
        // What has arrived is echoed; nothing more is read.
        let mut sock = BufferedSocket::new(io);
        let all = sock.peek().len();
        sock.send_back(all);
        Some(Next::Close)
    }

    fn on_close(&mut self, _conn: EchoConn, _reason: CloseReason, _worker: &mut Worker<'_>) {}
}
