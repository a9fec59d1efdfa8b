//! [`BufferedSocket`]: a connection seen as Slick's buffered socket, during one handler call.

use std::io;

use fastpath_drivers::{ConnRef, Io, Next, UpstreamAddr, Worker};

/// Output a [`BufferedSocket`] queues before it counts as full, unless told otherwise.
pub const OUTPUT_LIMIT: usize = 256 * 1024;

/// One connection during a handler call: what has arrived (peek, discard, read) and what to
/// send (write, write_all), with the output bounded.
///
/// Reads never block and never come up short in a surprising way: [`BufferedSocket::peek`]
/// shows everything received so far, so a service looks for a whole message there and
/// discards it once handled. Writes are queued by the driver and sent as the peer takes
/// them; [`BufferedSocket::write_all`] queues its bytes whole, so a message is never sent in
/// part. The queue is bounded by a limit ([`OUTPUT_LIMIT`] unless given): once it is reached
/// the socket [`is_full`](BufferedSocket::is_full), [`BufferedSocket::write`] takes no more,
/// and [`BufferedSocket::next`] answers [`Next::Drain`] so the service reads nothing more
/// from this peer until it has taken what is queued: a peer that stops reading stops its own
/// input, and nothing grows without bound.
///
/// ```
/// use fastpath_sockets::{BufferedSocket, Io, Next};
///
/// /// Answers each line with its length; a line is handled once it has arrived whole.
/// fn on_ready(io: &mut Io<'_>) -> Next {
///     let mut sock = BufferedSocket::new(io);
///     while let Some(end) = sock.peek().iter().position(|&b| b == b'\n') {
///         let answer = format!("{end}\n");
///         sock.write_all(answer.as_bytes());
///         sock.discard(end + 1);
///     }
///     sock.next()
/// }
/// ```
pub struct BufferedSocket<'s, 'io> {
    io: &'s mut Io<'io>,
    limit: usize,
}

impl<'s, 'io> BufferedSocket<'s, 'io> {
    /// The connection of this call, its output bounded by [`OUTPUT_LIMIT`].
    pub fn new(io: &'s mut Io<'io>) -> Self {
        Self::with_limit(io, OUTPUT_LIMIT)
    }

    /// The connection of this call, its output bounded by `limit` bytes.
    pub fn with_limit(io: &'s mut Io<'io>, limit: usize) -> Self {
        BufferedSocket { io, limit }
    }

    /// Everything received and not yet discarded.
    pub fn peek(&self) -> &[u8] {
        self.io.input().data()
    }

    /// Drops the first `n` received bytes (fewer if fewer are there); returns how many.
    pub fn discard(&mut self, n: usize) -> usize {
        let n = n.min(self.io.input().len());
        self.io.input_mut().consume(n);
        n
    }

    /// Moves up to `buf.len()` received bytes into `buf`; returns how many.
    pub fn read(&mut self, buf: &mut [u8]) -> usize {
        let data = self.io.input().data();
        let n = data.len().min(buf.len());
        buf[..n].copy_from_slice(&data[..n]);
        self.io.input_mut().consume(n);
        n
    }

    /// Queues as much of `bytes` as the room left allows ([`BufferedSocket::room`]) and
    /// returns how much, like a non-blocking send.
    pub fn write(&mut self, bytes: &[u8]) -> usize {
        let n = bytes.len().min(self.room());
        self.io.write(&bytes[..n]);
        n
    }

    /// Queues all of `bytes`, even past the limit: a message is never cut. The socket is
    /// full afterwards if the limit is passed.
    pub fn write_all(&mut self, bytes: &[u8]) {
        self.io.write(bytes);
    }

    /// Queues the first `n` received bytes (fewer if fewer are there) for sending back and
    /// discards them: an echo, copied once from the input buffer to the output buffer.
    /// Returns how many.
    pub fn send_back(&mut self, n: usize) -> usize {
        let parts = self.io.parts();
        let data = parts.input.data();
        let n = n.min(data.len());
        parts
            .output
            .write_with(parts.pool, |out| out.extend_from_slice(&data[..n]));
        parts.input.consume(n);
        n
    }

    /// Queues all of `data`, whole, and leaves it empty; a large batch queued while nothing
    /// else is moves into the output without a copy (see `Output::append_vec`).
    pub fn write_vec(&mut self, data: &mut Vec<u8>) {
        let (output, pool) = self.io.output_and_pool();
        output.append_vec(pool, data);
    }

    /// Queues bytes written by `write` straight into the output buffer, whole.
    pub fn write_with<R>(&mut self, write: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        self.io.write_with(write)
    }

    /// Bytes queued and not yet taken by the kernel.
    pub fn queued(&self) -> usize {
        self.io.output().pending() as usize
    }

    /// Bytes that may still be queued before the limit.
    pub fn room(&self) -> usize {
        self.limit.saturating_sub(self.queued())
    }

    /// The output limit is reached: take no more input for this peer until it drains.
    pub fn is_full(&self) -> bool {
        self.room() == 0
    }

    /// Bytes handed to the kernel over the connection's life.
    pub fn sent(&self) -> u64 {
        self.io.output().sent()
    }

    /// The peer has finished sending: what [`BufferedSocket::peek`] shows is all there is.
    pub fn at_end(&self) -> bool {
        self.io.eof()
    }

    /// What to wait for now: the output to drain if the socket is full, input otherwise.
    pub fn next(&self) -> Next {
        if self.is_full() {
            Next::Drain
        } else {
            Next::Read
        }
    }

    /// This connection's name, for another connection to wake it.
    pub fn me(&self) -> ConnRef {
        self.io.me()
    }

    /// Wakes another connection of the worker (see [`Io::wake`]).
    pub fn wake(&mut self, other: ConnRef) {
        self.io.wake(other);
    }

    /// Opens an outgoing connection (see [`Io::connect`]).
    pub fn connect(&mut self, addr: impl Into<UpstreamAddr>, tag: u64) -> io::Result<()> {
        self.io.connect(addr, tag)
    }

    /// The worker, to wake several connections or open several.
    pub fn worker(&mut self) -> Worker<'_> {
        self.io.worker()
    }

    /// The driver's view of the connection, for what this wrapper does not cover (deadlines,
    /// shared buffers and files, the graceful-stop flag).
    pub fn io(&mut self) -> &mut Io<'io> {
        self.io
    }
}
