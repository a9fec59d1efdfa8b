//! Per-connection input and output buffers, and the per-worker pool that lends them.
//!
//! An idle connection owns no buffer memory: buffers are borrowed from the worker's pool while
//! bytes are in flight and returned as soon as they are empty, so 10,000 idle keep-alive
//! connections cost a few hundred bytes each, not 10,000 buffers.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use fastpath_sys::syscall;

/// Size of a pooled buffer: large enough for any ordinary request head or response head.
pub const BUFFER_SIZE: usize = 16 * 1024;
/// A buffer that grew past this (a huge pipelined burst) is dropped instead of pooled.
const MAX_POOLED_CAPACITY: usize = 256 * 1024;
/// Buffers kept for reuse per worker; more than that are freed.
const MAX_POOLED_BUFFERS: usize = 256;
/// Segments a pooled queue starts with: a head, a body and a little more.
const SEGMENTS_PER_QUEUE: usize = 8;
/// iovecs gathered into one sendmsg.
pub(crate) const MAX_IOVECS: usize = 64;
/// Largest count passed to one sendfile call (the kernel's own per-call cap).
const MAX_SENDFILE: u64 = 0x7fff_f000;

/// A worker's stock of empty buffers.
#[derive(Default)]
pub struct BufferPool {
    free: Vec<Vec<u8>>,
    /// Empty segment queues, so an idle connection's `Output` holds no allocation.
    queues: Vec<VecDeque<Segment>>,
}

impl BufferPool {
    /// Takes an empty buffer with at least [`BUFFER_SIZE`] capacity.
    pub fn take(&mut self) -> Vec<u8> {
        self.free
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BUFFER_SIZE))
    }

    /// Returns a buffer; it is cleared, and dropped if it grew too large or the pool is full.
    pub fn give(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() < BUFFER_SIZE
            || buf.capacity() > MAX_POOLED_CAPACITY
            || self.free.len() >= MAX_POOLED_BUFFERS
        {
            return;
        }
        buf.clear();
        self.free.push(buf);
    }

    fn take_queue(&mut self) -> VecDeque<Segment> {
        self.queues
            .pop()
            .unwrap_or_else(|| VecDeque::with_capacity(SEGMENTS_PER_QUEUE))
    }

    fn give_queue(&mut self, queue: VecDeque<Segment>) {
        if queue.is_empty() && self.queues.len() < MAX_POOLED_BUFFERS {
            self.queues.push(queue);
        }
    }
}

/// Bytes received on a connection and not yet consumed by the handler.
#[derive(Default)]
pub struct Input {
    buf: Vec<u8>,
    start: usize,
    /// A byte has arrived at some time.
    received: bool,
    /// The last read filled all the space it was offered: the peer sends in bulk.
    bulk: bool,
}

/// How far the input buffer of a connection whose reads keep filling it grows: a peer that
/// streams (pipelined requests, a stream of messages) is read in a quarter as many calls as
/// with [`BUFFER_SIZE`], while a connection of single requests keeps the small buffer.
const BULK_READ: usize = 64 * 1024;

impl Input {
    /// The unconsumed bytes.
    pub fn data(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// Number of unconsumed bytes.
    pub fn len(&self) -> usize {
        self.buf.len() - self.start
    }

    /// True when every received byte has been consumed.
    pub fn is_empty(&self) -> bool {
        self.start == self.buf.len()
    }

    /// Whether a byte has ever arrived on the connection.
    pub(crate) fn ever_received(&self) -> bool {
        self.received
    }

    /// Marks `n` bytes at the front as consumed.
    pub fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.buf.len());
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
    }

    /// Reads from `fd` into this buffer, borrowing a pooled buffer when empty. Returns the
    /// byte count and whether the read filled all the space offered: a read that did not
    /// took everything the socket had, so the next one would only say EAGAIN.
    pub(crate) fn read_from(
        &mut self,
        fd: RawFd,
        pool: &mut BufferPool,
    ) -> io::Result<(usize, bool)> {
        if self.buf.capacity() == 0 {
            self.buf = pool.take();
        } else if self.start > 0 && self.buf.capacity() - self.buf.len() < BUFFER_SIZE / 4 {
            // Slide the unconsumed tail to the front instead of growing.
            self.buf.drain(..self.start);
            self.start = 0;
        }
        if self.bulk && self.buf.capacity() < BULK_READ {
            self.buf.reserve(BULK_READ - self.buf.len());
        }
        let want = (self.buf.capacity() - self.buf.len()).max(BUFFER_SIZE / 4);
        let n = crate::sys::read_into(fd, &mut self.buf, want)?;
        self.received |= n > 0;
        self.bulk = n == want;
        Ok((n, n == want))
    }

    /// Takes in freshly received bytes held in `buf`. When nothing is left unconsumed, `buf`
    /// itself becomes the input, with no copy, and the previous (empty) buffer is returned;
    /// otherwise the bytes are appended after the unconsumed ones and `buf` is returned. The
    /// returned buffer is empty, ready to receive again.
    pub(crate) fn receive(&mut self, mut buf: Vec<u8>) -> Vec<u8> {
        self.received |= !buf.is_empty();
        if self.is_empty() {
            std::mem::swap(&mut self.buf, &mut buf);
            self.start = 0;
        } else {
            if self.start > 0 && self.buf.capacity() - self.buf.len() < buf.len() {
                // Slide the unconsumed tail to the front instead of growing.
                self.buf.drain(..self.start);
                self.start = 0;
            }
            self.buf.extend_from_slice(&buf);
        }
        buf.clear();
        buf
    }

    /// Moves the unconsumed bytes to the end of `to` (what a connection received before it
    /// was joined with another goes to the other).
    pub(crate) fn move_to(&mut self, to: &mut Output, pool: &mut BufferPool) {
        let unread = self.data();
        if unread.is_empty() {
            return;
        }
        to.write_with(pool, |buf| buf.extend_from_slice(unread));
        let n = unread.len();
        self.consume(n);
        self.release_if_empty(pool);
    }

    /// Appends bytes made by `fill` (a transport's plaintext, an HTTP/2 stream's request)
    /// after the unconsumed ones, borrowing a pooled buffer when there is none.
    pub fn append_with<R>(
        &mut self,
        pool: &mut BufferPool,
        fill: impl FnOnce(&mut Vec<u8>) -> R,
    ) -> R {
        if self.buf.capacity() == 0 {
            self.buf = pool.take();
        } else if self.start > 0 && self.buf.capacity() - self.buf.len() < BUFFER_SIZE / 4 {
            // Slide the unconsumed tail to the front instead of growing.
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let before = self.buf.len();
        let made = fill(&mut self.buf);
        self.received |= self.buf.len() > before;
        made
    }

    /// Hands the buffer back to the pool if nothing is left in it.
    pub fn release_if_empty(&mut self, pool: &mut BufferPool) {
        if self.is_empty() && self.buf.capacity() > 0 {
            pool.give(std::mem::take(&mut self.buf));
            self.start = 0;
        }
    }
}

enum Segment {
    /// Bytes of `Output::buf` up to this end offset.
    Inline { end: usize },
    /// Bytes `pos..end` of a buffer shared with a cache (`pos` moves as they are sent).
    Shared {
        data: Arc<[u8]>,
        pos: usize,
        end: usize,
    },
    /// Inline bytes written while the kernel was reading `Output::buf` (see
    /// [`Output::freeze`]), in a buffer of their own; `pos` bytes already sent.
    Owned { data: Vec<u8>, pos: usize },
    /// A file range sent with sendfile.
    File {
        file: Arc<File>,
        offset: u64,
        remaining: u64,
    },
}

/// Why flushing output stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum Flush {
    /// Everything queued has been handed to the kernel.
    Done,
    /// The socket buffer is full; wait until it is writable.
    WouldBlock,
}

/// Error from flushing: the socket failed, or a file ended before the promised length
/// (it shrank while being sent), in which case the connection must be closed.
#[derive(Debug)]
pub enum FlushError {
    /// The socket reported an error (the peer reset the connection, say).
    Io(io::Error),
    /// A file delivered fewer bytes than queued.
    FileShrunk,
}

impl FlushError {
    /// Why a client connection whose send failed this way ends.
    pub(crate) fn close_reason(self) -> crate::CloseReason {
        match self {
            FlushError::FileShrunk => crate::CloseReason::FileShrunk,
            FlushError::Io(e) => {
                tracing::debug!("send failed: {e}");
                crate::CloseReason::PeerGone
            }
        }
    }
}

/// Response bytes queued on a connection, in order: inline bytes, shared buffers and file ranges.
#[derive(Default)]
pub struct Output {
    buf: Vec<u8>,
    /// Offset in `buf` of the first unsent inline byte.
    sent: usize,
    segments: VecDeque<Segment>,
    pending: u64,
    /// Bytes ever queued and not dropped by [`Output::clear`]: what was sent is this less
    /// what is pending.
    queued: u64,
    /// The kernel is reading the inline buffer (an io_uring send in flight): writes go to
    /// buffers of their own, which cannot move what it reads.
    frozen: bool,
    /// What [`Output::clear`] dropped while frozen, kept until the kernel is done reading.
    retired: Option<Box<(Vec<u8>, VecDeque<Segment>)>>,
}

impl Output {
    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// Bytes queued and not yet sent (file ranges included).
    pub fn pending(&self) -> u64 {
        self.pending
    }

    /// Bytes handed to the kernel over the connection's life (what was queued and dropped
    /// unsent by [`Output::clear`] is not counted); the position, in that count, at which
    /// a response queued now ends is `sent() + pending()`.
    pub fn sent(&self) -> u64 {
        self.queued - self.pending
    }

    /// Appends inline bytes written by `write` into the connection's buffer, which is borrowed
    /// from `pool` if the connection holds none.
    pub fn write_with<R>(
        &mut self,
        pool: &mut BufferPool,
        write: impl FnOnce(&mut Vec<u8>) -> R,
    ) -> R {
        if self.frozen {
            let mut data = pool.take();
            let result = write(&mut data);
            self.push_owned(data, pool);
            return result;
        }
        if self.buf.capacity() == 0 {
            self.buf = pool.take();
        }
        if self.segments.capacity() == 0 {
            self.segments = pool.take_queue();
        }
        let before = self.buf.len();
        let result = write(&mut self.buf);
        let end = self.buf.len();
        if end > before {
            self.pending += (end - before) as u64;
            self.queued += (end - before) as u64;
            match self.segments.back_mut() {
                Some(Segment::Inline { end: last }) => *last = end,
                _ => self.segments.push_back(Segment::Inline { end }),
            }
        }
        result
    }

    /// Queues all of `data`, leaving it empty. With nothing else queued, `data`'s allocation
    /// itself becomes the output and `data` gets the output's empty buffer (from `pool` if it
    /// had none): a large batch is queued without a copy. Otherwise its bytes are copied.
    pub fn append_vec(&mut self, pool: &mut BufferPool, data: &mut Vec<u8>) {
        if data.is_empty() {
            return;
        }
        if !self.segments.is_empty() || data.len() < BUFFER_SIZE / 4 {
            self.write_with(pool, |buf| buf.extend_from_slice(data));
            data.clear();
            return;
        }
        if self.segments.capacity() == 0 {
            self.segments = pool.take_queue();
        }
        std::mem::swap(&mut self.buf, data);
        if data.capacity() == 0 {
            *data = pool.take();
        }
        data.clear();
        self.sent = 0;
        let len = self.buf.len();
        self.pending += len as u64;
        self.queued += len as u64;
        self.segments.push_back(Segment::Inline { end: len });
    }

    /// Queues `data` as it is, in its own allocation (an empty one goes back to `pool`).
    fn push_owned(&mut self, data: Vec<u8>, pool: &mut BufferPool) {
        if data.is_empty() {
            pool.give(data);
            return;
        }
        self.pending += data.len() as u64;
        self.queued += data.len() as u64;
        self.segments.push_back(Segment::Owned { data, pos: 0 });
    }

    /// The kernel reads the inline buffer from now until [`Output::thaw`] (an io_uring send
    /// is in flight): bytes written meanwhile go to buffers of their own, so that nothing it
    /// reads moves. Shared buffers and file ranges are queued as always.
    pub(crate) fn freeze(&mut self) {
        self.frozen = true;
    }

    /// The kernel is done reading (see [`Output::freeze`]).
    pub(crate) fn thaw(&mut self) {
        self.frozen = false;
        self.retired = None;
    }

    /// Queues a buffer shared with a cache.
    pub fn push_shared(&mut self, data: Arc<[u8]>) {
        let end = data.len();
        self.push_shared_range(data, 0, end);
    }

    /// Queues `len` bytes of `file` from `offset`, to be sent with sendfile.
    pub fn push_file(&mut self, file: Arc<File>, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        self.pending += len;
        self.queued += len;
        self.segments.push_back(Segment::File {
            file,
            offset,
            remaining: len,
        });
    }

    /// Copies at most `limit` leading bytes to the end of `out`, leaving them queued: bytes
    /// held in memory as they are, file ranges read with pread. Returns how many. For a
    /// protocol that reads what a handler wrote before passing it on in another framing (an
    /// HTTP/2 stream reads the response head its HTTP/1 writer made, and unframes a chunked
    /// body, which a slow reader's share may have put in a file). A file that ends early is
    /// [`FlushError::FileShrunk`].
    pub fn peek_front(&self, limit: usize, out: &mut Vec<u8>) -> Result<usize, FlushError> {
        use std::os::unix::fs::FileExt;
        let mut copied = 0;
        let mut inline_pos = self.sent;
        for segment in self.segments.iter() {
            if copied == limit {
                break;
            }
            let bytes: &[u8] = match segment {
                Segment::Inline { end } => {
                    let bytes = &self.buf[inline_pos..*end];
                    inline_pos = *end;
                    bytes
                }
                Segment::Shared { data, pos, end } => &data[*pos..*end],
                Segment::Owned { data, pos } => &data[*pos..],
                Segment::File {
                    file,
                    offset,
                    remaining,
                } => {
                    let want = (*remaining).min((limit - copied) as u64) as usize;
                    let at = out.len();
                    out.resize(at + want, 0);
                    let mut filled = 0;
                    while filled < want {
                        let n = file
                            .read_at(&mut out[at + filled..], offset + filled as u64)
                            .map_err(FlushError::Io)?;
                        if n == 0 {
                            out.truncate(at);
                            return Err(FlushError::FileShrunk);
                        }
                        filled += n;
                    }
                    copied += want;
                    continue;
                }
            };
            let n = bytes.len().min(limit - copied);
            out.extend_from_slice(&bytes[..n]);
            copied += n;
        }
        Ok(copied)
    }

    /// Drops at most `n` leading bytes, file ranges too, as if they had been sent; returns
    /// how many.
    pub fn skip_front(&mut self, n: u64) -> u64 {
        let mut skipped = 0;
        while skipped < n {
            match self.segments.front_mut() {
                None => break,
                Some(Segment::File {
                    offset, remaining, ..
                }) => {
                    let take = (*remaining).min(n - skipped);
                    *offset += take;
                    *remaining -= take;
                    self.pending -= take;
                    skipped += take;
                    if *remaining == 0 {
                        self.segments.pop_front();
                    }
                }
                Some(_) => {
                    let held = self.front_in_memory();
                    let take = (held as u64).min(n - skipped);
                    self.advance(take as usize);
                    skipped += take;
                }
            }
        }
        skipped
    }

    /// Moves at most `n` leading bytes to the end of `to`, each piece as what it is: inline
    /// bytes copied, a shared buffer and a file range (or the part of one that fits) queued
    /// by reference and never read. Returns how many. For a protocol that frames what a
    /// handler queued (HTTP/2 DATA frames around a file range that stays one).
    pub fn move_front(&mut self, n: u64, to: &mut Output, pool: &mut BufferPool) -> u64 {
        let mut moved = 0;
        while moved < n {
            let want = n - moved;
            let take = match self.segments.front() {
                None => break,
                Some(Segment::File {
                    file,
                    offset,
                    remaining,
                }) => {
                    let take = (*remaining).min(want);
                    to.push_file(Arc::clone(file), *offset, take);
                    take
                }
                Some(Segment::Shared { data, pos, end }) => {
                    let take = ((*end - *pos) as u64).min(want) as usize;
                    to.push_shared_range(Arc::clone(data), *pos, *pos + take);
                    take as u64
                }
                Some(Segment::Inline { end }) => {
                    let take = ((*end - self.sent) as u64).min(want) as usize;
                    let bytes = &self.buf[self.sent..self.sent + take];
                    to.write_with(pool, |buf| buf.extend_from_slice(bytes));
                    take as u64
                }
                Some(Segment::Owned { data, pos }) => {
                    let take = ((data.len() - *pos) as u64).min(want) as usize;
                    let bytes = &data[*pos..*pos + take];
                    to.write_with(pool, |buf| buf.extend_from_slice(bytes));
                    take as u64
                }
            };
            self.skip_front(take);
            moved += take;
        }
        moved
    }

    /// Queues bytes `pos..end` of a buffer shared with a cache.
    fn push_shared_range(&mut self, data: Arc<[u8]>, pos: usize, end: usize) {
        if pos == end {
            return;
        }
        self.pending += (end - pos) as u64;
        self.queued += (end - pos) as u64;
        self.segments.push_back(Segment::Shared { data, pos, end });
    }

    /// The unsent bytes of the front segment, which is held in memory.
    fn front_in_memory(&self) -> usize {
        match self.segments.front() {
            Some(Segment::Inline { end }) => *end - self.sent,
            Some(Segment::Shared { pos, end, .. }) => *end - *pos,
            Some(Segment::Owned { data, pos }) => data.len() - *pos,
            Some(Segment::File { .. }) | None => 0,
        }
    }

    /// Drops everything queued.
    pub fn clear(&mut self, pool: &mut BufferPool) {
        if self.frozen && !self.segments.is_empty() {
            // The kernel may still read these bytes: kept whole until it is done.
            let buf = std::mem::take(&mut self.buf);
            let segments = std::mem::take(&mut self.segments);
            self.retired = Some(Box::new((buf, segments)));
        }
        self.segments.clear();
        self.queued -= self.pending;
        self.pending = 0;
        self.sent = 0;
        self.buf.clear();
        self.release(pool);
    }

    fn release(&mut self, pool: &mut BufferPool) {
        if self.buf.capacity() > 0 {
            pool.give(std::mem::take(&mut self.buf));
        }
        if self.segments.is_empty() && self.segments.capacity() > 0 {
            pool.give_queue(std::mem::take(&mut self.segments));
        }
    }

    /// Sends as much as the socket takes. Inline and shared bytes go out in one gathered
    /// sendmsg, with MSG_MORE when a file range follows so the head leaves in the same
    /// packet as the first file data; file ranges go with sendfile.
    pub(crate) fn flush(&mut self, fd: RawFd, pool: &mut BufferPool) -> Result<Flush, FlushError> {
        loop {
            if self.segments.is_empty() {
                self.release_if_empty(pool);
                return Ok(Flush::Done);
            }
            if self.front_is_file() {
                if self.send_files(fd)? == Flush::WouldBlock {
                    return Ok(Flush::WouldBlock);
                }
                continue;
            }
            match self.send_gathered(fd) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Flush::WouldBlock),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(FlushError::Io(e)),
            }
        }
    }

    /// True when the next bytes to send belong to a file range.
    pub fn front_is_file(&self) -> bool {
        matches!(self.segments.front(), Some(Segment::File { .. }))
    }

    /// Sends the file ranges at the front with sendfile until the front holds something else
    /// (or nothing), which is `Done`, or the socket is full.
    pub(crate) fn send_files(&mut self, fd: RawFd) -> Result<Flush, FlushError> {
        while let Some(Segment::File {
            file,
            offset,
            remaining,
        }) = self.segments.front_mut()
        {
            let mut off = *offset as libc::off_t;
            let count = (*remaining).min(MAX_SENDFILE) as usize;
            match syscall!(sendfile(fd, file.as_raw_fd(), &mut off, count)) {
                Ok(0) => return Err(FlushError::FileShrunk),
                Ok(n) => {
                    let n = n as u64;
                    *offset += n;
                    *remaining -= n;
                    self.pending -= n;
                    if *remaining == 0 {
                        self.segments.pop_front();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Flush::WouldBlock),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(FlushError::Io(e)),
            }
        }
        Ok(Flush::Done)
    }

    /// Gives the inline buffer back to the pool once everything queued has been sent.
    pub fn release_if_empty(&mut self, pool: &mut BufferPool) {
        if self.segments.is_empty() {
            self.sent = 0;
            self.buf.clear();
            self.release(pool);
        }
    }

    /// Takes up to `limit` queued bytes from the front, in order, handing each run of them to
    /// `take`: inline and shared bytes where they lie, file ranges read with pread into
    /// `scratch` (at most [`BUFFER_SIZE`] at a time). For what must see the bytes before they
    /// go (a transport that encrypts them, or a peer in memory). Returns how many were taken;
    /// a file that ends early is [`FlushError::FileShrunk`].
    pub(crate) fn take_front(
        &mut self,
        limit: usize,
        scratch: &mut Vec<u8>,
        mut take: impl FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<usize, FlushError> {
        use std::os::unix::fs::FileExt;
        let mut taken = 0;
        while taken < limit && !self.segments.is_empty() {
            if let Some(Segment::File {
                file,
                offset,
                remaining,
            }) = self.segments.front_mut()
            {
                let want = (*remaining).min((limit - taken).min(BUFFER_SIZE) as u64) as usize;
                // Zeroed once as it grows, not before every read: the read overwrites what
                // it returns.
                if scratch.len() < want {
                    scratch.resize(want, 0);
                }
                let n = file
                    .read_at(&mut scratch[..want], *offset)
                    .map_err(FlushError::Io)?;
                if n == 0 {
                    return Err(FlushError::FileShrunk);
                }
                take(&scratch[..n]).map_err(FlushError::Io)?;
                *offset += n as u64;
                *remaining -= n as u64;
                self.pending -= n as u64;
                taken += n;
                if *remaining == 0 {
                    self.segments.pop_front();
                }
                continue;
            }
            let mut iov: [libc::iovec; MAX_IOVECS] = unsafe { std::mem::zeroed() };
            let (count, _) = self.gather(&mut iov);
            let mut run = 0;
            for v in &iov[..count] {
                let n = v.iov_len.min(limit - taken - run);
                // SAFETY: `gather` points at bytes the output holds, unchanged until advance.
                let bytes = unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, n) };
                if let Err(error) = take(bytes) {
                    self.advance(run);
                    return Err(FlushError::Io(error));
                }
                run += n;
                if taken + run == limit {
                    break;
                }
            }
            self.advance(run);
            taken += run;
        }
        Ok(taken)
    }

    /// Copies up to `limit` queued bytes to the end of `out`, as a send would take them: for
    /// an engine whose peers are in memory. Returns how many.
    #[cfg(feature = "testing")]
    pub(crate) fn copy_to(&mut self, out: &mut Vec<u8>, limit: usize) -> Result<usize, FlushError> {
        let mut scratch = Vec::new();
        self.take_front(limit, &mut scratch, |bytes| {
            out.extend_from_slice(bytes);
            Ok(())
        })
    }

    /// One sendmsg over the leading inline/shared segments.
    fn send_gathered(&mut self, fd: RawFd) -> io::Result<()> {
        let mut iov: [libc::iovec; MAX_IOVECS] = unsafe { std::mem::zeroed() };
        let (count, file_follows) = self.gather(&mut iov);
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = count as _;
        let flags = libc::MSG_NOSIGNAL | if file_follows { libc::MSG_MORE } else { 0 };
        let n = syscall!(sendmsg(fd, &msg, flags))? as usize;
        self.advance(n);
        Ok(())
    }

    /// Points `iov` at the leading inline and shared bytes, up to the first file range or the
    /// end of `iov`; returns how many entries were filled and whether a file range follows
    /// them. The bytes stay where they are until [`Output::advance`] or [`Output::clear`], as
    /// long as nothing is written meanwhile (a write may move the inline buffer).
    pub(crate) fn gather(&self, iov: &mut [libc::iovec]) -> (usize, bool) {
        let mut count = 0;
        let mut inline_pos = self.sent;
        let mut file_follows = false;
        for segment in self.segments.iter() {
            if count == iov.len() {
                break;
            }
            let slice: &[u8] = match segment {
                Segment::Inline { end } => {
                    let s = &self.buf[inline_pos..*end];
                    inline_pos = *end;
                    s
                }
                Segment::Shared { data, pos, end } => &data[*pos..*end],
                Segment::Owned { data, pos } => &data[*pos..],
                Segment::File { .. } => {
                    file_follows = true;
                    break;
                }
            };
            iov[count] = libc::iovec {
                iov_base: slice.as_ptr() as *mut libc::c_void,
                iov_len: slice.len(),
            };
            count += 1;
        }
        (count, file_follows)
    }

    /// Marks the first `n` gathered bytes as sent.
    pub(crate) fn advance(&mut self, mut n: usize) {
        self.pending -= n as u64;
        while n > 0 {
            let Some(front) = self.segments.front_mut() else {
                break;
            };
            match front {
                Segment::Inline { end } => {
                    let left = *end - self.sent;
                    if n >= left {
                        n -= left;
                        self.sent = *end;
                        self.segments.pop_front();
                    } else {
                        self.sent += n;
                        n = 0;
                    }
                }
                Segment::Shared { pos, end, .. } => {
                    if take(*end, pos, &mut n) {
                        self.segments.pop_front();
                    }
                }
                Segment::Owned { data, pos } => {
                    if take(data.len(), pos, &mut n) {
                        self.segments.pop_front();
                    }
                }
                Segment::File { .. } => break,
            }
        }
    }
}

/// Counts up to `n` sent bytes of a buffer of `len` bytes whose first `pos` had gone; true
/// when all of it has.
fn take(len: usize, pos: &mut usize, n: &mut usize) -> bool {
    let left = len - *pos;
    if *n >= left {
        *n -= left;
        true
    } else {
        *pos += *n;
        *n = 0;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    #[test]
    fn sent_counts_what_left_and_not_what_was_dropped() {
        let mut pool = BufferPool::default();
        let mut out = Output::default();
        out.write_with(&mut pool, |buf| buf.extend_from_slice(b"head:"));
        out.push_shared(Arc::from(&b"body"[..]));
        assert_eq!((out.sent(), out.pending()), (0, 9));
        out.advance(7);
        assert_eq!((out.sent(), out.pending()), (7, 2));
        out.clear(&mut pool);
        assert_eq!((out.sent(), out.pending()), (7, 0));
        out.write_with(&mut pool, |buf| buf.extend_from_slice(b"x"));
        assert_eq!(
            out.sent() + out.pending(),
            8,
            "where a response queued now ends"
        );
        out.clear(&mut pool);
    }

    #[test]
    fn moving_the_front_keeps_each_piece_what_it_is() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut pool = BufferPool::default();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"0123456789").unwrap();
        let mut from = Output::default();
        from.write_with(&mut pool, |b| b.extend_from_slice(b"HEAD\r\n\r\n"));
        from.push_shared(Arc::from(&b"shared"[..]));
        from.push_file(Arc::new(file), 1, 8);
        from.write_with(&mut pool, |b| b.extend_from_slice(b"tail"));
        let mut head = Vec::new();
        assert_eq!(
            from.peek_front(16, &mut head).unwrap(),
            16,
            "into the file range"
        );
        assert_eq!(head, b"HEAD\r\n\r\nshared12");
        head.clear();
        assert_eq!(from.peek_front(100, &mut head).unwrap(), 26);
        assert_eq!(head, b"HEAD\r\n\r\nshared12345678tail");
        assert_eq!(from.skip_front(6), 6);
        let mut to = Output::default();
        // The head's last two bytes and four of the shared ones, then the rest of those and
        // five of the file's.
        assert_eq!(from.move_front(6, &mut to, &mut pool), 6);
        to.write_with(&mut pool, |b| b.extend_from_slice(b"|"));
        assert!(!from.front_is_file());
        assert_eq!(from.move_front(7, &mut to, &mut pool), 7);
        assert!(from.front_is_file());
        to.write_with(&mut pool, |b| b.extend_from_slice(b"|"));
        assert_eq!(from.move_front(100, &mut to, &mut pool), 7);
        assert!(from.is_empty());
        assert_eq!((from.sent(), from.pending()), (26, 0));
        assert_eq!(to.pending(), 22);
        assert_eq!(to.flush(a.as_raw_fd(), &mut pool).unwrap(), Flush::Done);
        drop(a);
        let mut got = String::new();
        b.read_to_string(&mut got).unwrap();
        assert_eq!(got, "\r\nshar|ed12345|678tail");
    }

    #[test]
    fn flush_sends_inline_shared_and_file_in_order() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut pool = BufferPool::default();
        let mut out = Output::default();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"0123456789").unwrap();
        out.write_with(&mut pool, |b| b.extend_from_slice(b"head:"));
        out.push_file(Arc::new(file), 2, 5);
        out.write_with(&mut pool, |b| b.extend_from_slice(b":mid:"));
        out.push_shared(Arc::from(&b"shared"[..]));
        assert_eq!(out.pending(), 5 + 5 + 5 + 6);
        assert_eq!(out.flush(a.as_raw_fd(), &mut pool).unwrap(), Flush::Done);
        assert!(out.is_empty());
        drop(a);
        let mut got = String::new();
        b.read_to_string(&mut got).unwrap();
        assert_eq!(got, "head:23456:mid:shared");
    }

    #[test]
    fn a_file_shorter_than_queued_is_an_error() {
        let (a, _b) = UnixStream::pair().unwrap();
        let mut pool = BufferPool::default();
        let mut out = Output::default();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"abc").unwrap();
        out.push_file(Arc::new(file), 0, 10);
        assert!(matches!(
            out.flush(a.as_raw_fd(), &mut pool),
            Err(FlushError::FileShrunk)
        ));
    }

    #[test]
    fn input_receive_takes_the_buffer_when_empty_and_appends_otherwise() {
        let mut input = Input::default();
        let mut buf = Vec::with_capacity(BUFFER_SIZE);
        buf.extend_from_slice(b"hello");
        let at = buf.as_ptr();
        let spare = input.receive(buf);
        assert_eq!(input.data(), b"hello");
        assert_eq!(input.data().as_ptr(), at, "no copy");
        assert!(spare.is_empty());
        input.consume(2);
        let spare = input.receive(b" world".to_vec());
        assert_eq!(input.data(), b"llo world");
        assert!(spare.is_empty() && spare.capacity() >= 6);
    }

    #[test]
    fn gather_and_advance_follow_partial_sends() {
        let mut pool = BufferPool::default();
        let mut out = Output::default();
        let file = tempfile::tempfile().unwrap();
        out.write_with(&mut pool, |b| b.extend_from_slice(b"head"));
        out.push_shared(Arc::from(&b"shared"[..]));
        out.push_file(Arc::new(file), 0, 3);
        let mut iov: [libc::iovec; 4] = unsafe { std::mem::zeroed() };
        assert_eq!(out.gather(&mut iov), (2, true));
        assert_eq!((iov[0].iov_len, iov[1].iov_len), (4, 6));
        out.advance(5);
        assert_eq!(out.gather(&mut iov), (1, true));
        assert_eq!(iov[0].iov_len, 5);
        assert_eq!(out.pending(), 5 + 3);
        out.advance(5);
        assert!(out.front_is_file());
        assert_eq!(out.gather(&mut iov), (0, true));
    }

    #[test]
    fn writes_while_frozen_leave_the_inline_bytes_where_they_are() {
        let mut pool = BufferPool::default();
        let mut out = Output::default();
        out.write_with(&mut pool, |b| b.extend_from_slice(b"head"));
        let mut iov: [libc::iovec; 4] = unsafe { std::mem::zeroed() };
        assert_eq!(out.gather(&mut iov), (1, false));
        let reading = iov[0].iov_base;
        out.freeze();
        for _ in 0..64 {
            out.write_with(&mut pool, |b| b.extend_from_slice(&[b'x'; 1024]));
        }
        assert_eq!(out.gather(&mut iov).0, 4);
        assert_eq!(
            iov[0].iov_base, reading,
            "the bytes being sent did not move"
        );
        out.advance(4);
        out.thaw();
        out.write_with(&mut pool, |b| b.extend_from_slice(b"tail"));
        assert_eq!(out.pending(), 64 * 1024 + 4);
        let (a, mut b) = UnixStream::pair().unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            b.read_to_end(&mut got).unwrap();
            got
        });
        assert_eq!(out.flush(a.as_raw_fd(), &mut pool).unwrap(), Flush::Done);
        drop(a);
        let got = reader.join().unwrap();
        assert_eq!(got.len(), 64 * 1024 + 4);
        assert!(got.ends_with(b"xtail"));
    }

    #[test]
    fn input_consumes_and_returns_its_buffer() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut pool = BufferPool::default();
        let mut input = Input::default();
        a.write_all(b"hello").unwrap();
        assert_eq!(
            input.read_from(b.as_raw_fd(), &mut pool).unwrap(),
            (5, false)
        );
        assert_eq!(input.data(), b"hello");
        input.consume(2);
        assert_eq!(input.data(), b"llo");
        input.consume(3);
        input.release_if_empty(&mut pool);
        assert_eq!(pool.free.len(), 1);
    }
}
