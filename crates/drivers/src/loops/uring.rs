//! The io_uring model: one completion loop per worker thread.
//!
//! It has the shape of the epoll model (a worker per thread, each with its own SO_REUSEPORT
//! listeners, connections, buffer pool and handler, sharing only the connection count), but a
//! worker asks the kernel for completed work instead of readiness, and batches its requests:
//!
//! - every listener has one multishot accept armed, which yields each new connection;
//! - every connection has one multishot receive armed, whose bytes land in buffers the kernel
//!   takes from a ring the worker provides (see `bufring.rs`), so an idle connection holds no
//!   buffer. A received buffer becomes the connection's [`Input`] as it is when the handler
//!   left nothing unconsumed (no copy); otherwise its bytes are appended. Either way the ring
//!   gets a buffer back at once;
//! - the sends of every connection with output are prepared after all completions of one wait
//!   have been handled, and go to the kernel with the next wait in one io_uring_enter.
//!
//! Inline and shared bytes go out with IORING_OP_SENDMSG, its iovecs pointing into the
//! connection's [`Output`] (MSG_MORE when a file range follows, so the head leaves with the
//! first file bytes). File ranges go out with sendfile(2), called directly on the non-blocking
//! socket, with an IORING_OP_POLL_ADD to wait when the socket is full: the same system call per
//! chunk as the epoll model. The head before a file range is not sent directly, although the
//! sendfile then waits for its completion: measured with 16 keep-alive clients of a 64 KiB
//! file, a direct send made 2.1 system calls a request against 1.2 (the SENDMSG rides in the
//! io_uring_enter of every other connection's sends) and answered 17% fewer requests. Splicing file → pipe → socket with two linked requests was the
//! alternative; it was not taken because io_uring runs splice in its worker threads (a
//! blocked thread per slow client), a short first splice breaks the link and leaves bytes in
//! the pipe, and one pipe per worker would make every file send of the worker wait for the
//! slowest client. Registered (fixed) descriptors are not used either: sendfile, shutdown and
//! the refusal path need real descriptors, and the per-call lookup they would save is small
//! next to the batching. A graceful close calls shutdown(2) directly once the last send has
//! completed: it happens once per connection, and an IORING_OP_SHUTDOWN would have to wait
//! for that completion all the same.
//!
//! A linked connection (a proxy's backend connection, see `linked.rs`) is a connection like
//! any other: its own multishot receive and its own sends, batched with the rest. Its owner
//! may queue bytes for it while a SENDMSG of it is in flight: those go to buffers of their own
//! ([`Output`]'s freeze), so nothing the kernel reads moves. An idle one in the worker's pool
//! keeps its receive armed, so a backend that closes it (or sends anything unasked) is seen,
//! and it is closed rather than lent again.
//!
//! A join (the bridge hand-over) cancels both multishot receives; what they deliver until
//! they end crosses over through user space, and then the two sockets are spliced together
//! as in the epoll model, woken by one-shot IORING_OP_POLL_ADDs, each armed in its own slot
//! (see `Joining`). Body splices between a connection and a linked one are not offered
//! ([`crate::Io::can_splice`] says so): they would need the receives stopped and restarted
//! around every large body, so bodies are copied. A copied request body is received only as
//! fast as the backend takes it: the proxy waits ([`crate::Next::Wait`]) while the backend
//! connection is connecting or holds too much, and the client's receive pauses once
//! [`RECV_PAUSE`] has piled up.
//!
//! Rules that keep the kernel's view of our memory sound:
//!
//! - a connection has at most one receive and one send (SENDMSG or POLL_ADD) in flight, each
//!   counted on its slot; a slot, its descriptor and the memory a send reads are released
//!   only once every operation naming the slot has completed. The slot's generation is part
//!   of every operation's user_data, so a late cancellation can never hit the slot's next
//!   connection;
//! - the handler is not called while a SENDMSG of its connection is in flight, since a write
//!   may move the inline bytes the kernel is reading. Input that arrives meanwhile is kept and
//!   handed over when the send completes (and a deadline waits for the next tick);
//! - when the worker stops, every operation is cancelled and waited for before any buffer is
//!   freed; buffers are leaked rather than freed if the kernel does not finish in time.

mod bufring;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fastpath_sys::peer_addr;
use io_uring::{cqueue, opcode, squeue, types, IoUring, Probe};

use crate::buffers::{BufferPool, Flush, Input, Output, BUFFER_SIZE, MAX_IOVECS};
use crate::common::{self, warn_input_left, warn_out_of_descriptors, UNKNOWN_PEER};
use crate::connection::{self, Link, Parts, State};
use crate::contract::{JoinRequest, Outgoing};
use crate::linked::{self, HasLink, JointStep, Reach, LINKED_INPUT_MAX};
use crate::loops::{parts_of, Core, Engine, Env, EventLoop};
use crate::slab::{Slab, Token};
use crate::splice::{Carrier, Joint, Side, CARRIED_CHECK, CARRIED_RECHECK};
use crate::{CloseReason, Handler, Next, Opened, TICK};
use bufring::BufRing;

/// Submission queue size: the requests one wait can carry before an extra enter is needed.
const SQ_ENTRIES: u32 = 1024;
/// Completion queue size: room for the multishot completions that pile up between two waits.
const CQ_ENTRIES: u32 = 8192;
/// Receive buffers per worker (of [`BUFFER_SIZE`] each): more than the receives that complete
/// between two waits under load; when they run out a receive ends with ENOBUFS and is re-armed.
const RECV_BUFFERS: u16 = 256;
/// The buffer group of the receive ring.
const RECV_GROUP: u16 = 0;
/// Unconsumed input past which the receive is paused while the handler is not looking at
/// input (draining output) or has nowhere to put it (waiting on another connection: a
/// backend still connecting, or one that takes no more), so a client that pipelines without
/// reading, or uploads faster than the backend reads, is held back by TCP as under epoll
/// instead of filling memory.
const RECV_PAUSE: usize = 4 * BUFFER_SIZE;
/// How long a stopping worker waits for the kernel to finish its cancelled operations.
const STOP_DRAIN: Duration = Duration::from_secs(2);

/// Checks that this kernel has everything the model uses: a ring can be set up (io_uring may
/// be compiled out or disabled by `kernel.io_uring_disabled`), timed waits, the opcodes, and a
/// provided-buffer ring can be registered.
pub(crate) fn probe() -> io::Result<()> {
    // On a thread of its own: the kernel tears a ring down later, in the background, and
    // interrupts the blocking calls of every thread that used it, which would be the caller.
    std::thread::Builder::new()
        .name("fastpath-probe".into())
        .spawn(probe_here)?
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the io_uring probe panicked")))
}

fn probe_here() -> io::Result<()> {
    let ring = IoUring::new(8)
        .map_err(|e| io::Error::new(e.kind(), format!("io_uring_setup failed: {e}")))?;
    if !ring.params().is_feature_ext_arg() {
        return Err(io::Error::other(
            "the kernel has no timed io_uring waits (5.11)",
        ));
    }
    let mut probe = Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(|e| io::Error::new(e.kind(), format!("io_uring probe failed: {e}")))?;
    let needed = [
        (opcode::AcceptMulti::CODE, "ACCEPT"),
        (opcode::RecvMulti::CODE, "RECV"),
        (opcode::SendMsg::CODE, "SENDMSG"),
        (opcode::PollAdd::CODE, "POLL_ADD"),
        (opcode::AsyncCancel::CODE, "ASYNC_CANCEL"),
        // Not used, but it came with multishot receive (6.0), which the probe cannot see.
        (opcode::SendZc::CODE, "SEND_ZC (multishot receive)"),
    ];
    for (code, name) in needed {
        if !probe.is_supported(code) {
            return Err(io::Error::other(format!(
                "the kernel has no IORING_OP_{name}"
            )));
        }
    }
    let mut pool = BufferPool::default();
    let mut buffers = BufRing::new(&ring, RECV_GROUP, 1, &mut pool)?;
    buffers.retire(&ring);
    Ok(())
}

/// The io_uring loop as [`EventLoop`].
pub(crate) struct Uring;

impl EventLoop for Uring {
    fn serve<H: Handler>(sockets: Vec<OwnedFd>, handler: H, env: Env<'_>) -> io::Result<()> {
        Worker::new(sockets, handler, env)?.run()
    }
}

/// Sets up a worker's ring. Only the worker's thread submits, and it wants completions only
/// when it waits, which lets the kernel skip locking and run completion work in batches at the
/// wait; older kernels without those flags get a plain ring.
fn build_ring() -> io::Result<IoUring> {
    let tuned = IoUring::builder()
        .setup_cqsize(CQ_ENTRIES)
        .setup_submit_all()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(SQ_ENTRIES);
    match tuned {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => IoUring::builder()
            .setup_cqsize(CQ_ENTRIES)
            .build(SQ_ENTRIES),
        other => other,
    }
}

/// What an operation is, kept in the top byte of its user_data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Accept = 1,
    Recv = 2,
    Send = 3,
    Poll = 4,
    /// A cancellation request: its own completion carries nothing we need.
    Cancel = 5,
}

/// user_data of an operation: its kind, and the slot (or listener) and generation it is for.
fn token(op: Op, index: usize, generation: u32) -> u64 {
    Token::new(index, generation).pack(op as u8)
}

fn untoken(user_data: u64) -> (Option<Op>, usize, u32) {
    let (kind, token) = Token::unpack(user_data);
    let op = match kind {
        1 => Some(Op::Accept),
        2 => Some(Op::Recv),
        3 => Some(Op::Send),
        4 => Some(Op::Poll),
        5 => Some(Op::Cancel),
        _ => None,
    };
    (op, token.index(), token.generation)
}

fn cancel(user_data: u64) -> squeue::Entry {
    opcode::AsyncCancel::new(user_data)
        .build()
        .user_data(token(Op::Cancel, 0, 0))
}

/// The send operation a connection has in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sending {
    Idle,
    /// A SENDMSG reading the connection's output.
    Msg,
    /// A POLL_ADD waiting for room to sendfile into.
    Poll,
}

/// Whether a connection's receive should be armed.
fn wants_input<C>(c: &Conn<C>) -> bool {
    // A joined connection's bytes are the joint's to move.
    if c.link.eof || c.join.is_some() || c.link.state == State::Joined {
        return false;
    }
    if c.link.owner().is_some() {
        // A linked connection holds at most so much its owner has not taken.
        return c.link.state == State::Reading && c.link.input.len() < LINKED_INPUT_MAX;
    }
    match c.link.state {
        // Late input is read and discarded, as the epoll model does while lingering; on an
        // idle connection, anything that arrives makes it unfit for reuse.
        State::Closing | State::Lingering | State::Idle => true,
        // While the handler cannot take input (a send in flight, draining, or waiting on
        // another connection), the receive pauses once some has piled up; only then, so that
        // a request without a body costs no cancel.
        State::Reading if !c.ready_pending => true,
        State::Reading | State::Draining | State::Waiting => c.link.input.len() < RECV_PAUSE,
        // Joined connections are the joint's (checked above).
        State::Joined => false,
    }
}

/// Everything a worker holds for one open connection: the shared [`Link`], the handler's
/// state, and the ring operations it has armed.
struct Conn<C> {
    link: Link,
    conn: C,
    recv_armed: bool,
    /// A cancellation of the armed receive has been requested.
    recv_cancelled: bool,
    sending: Sending,
    /// Input (or its end) arrived while a SENDMSG was in flight: call the handler once it
    /// completes.
    ready_pending: bool,
    /// Listed in `Worker::dirty`.
    dirty: bool,
    /// Being joined with a linked connection (the bridge hand-over).
    join: Option<Box<Joining>>,
}

impl<C> Conn<C> {
    /// A send operation has been queued: the send timeout runs from the first one that
    /// waits.
    fn start_sending(&mut self, sending: Sending, core: &Core<'_>) {
        self.sending = sending;
        self.link
            .send_deadline
            .get_or_insert(core.now + core.config.send_timeout);
    }
}

/// A connection the handler asked to join with a linked connection, its partner. Both
/// multishot receives are cancelled first; whatever they deliver until they end crosses over
/// through user space (each side's input to the other's output). Once neither can take bytes
/// any more and the partner has no send in flight, a [`Joint`] splices the rest through
/// pipes, woken by one-shot polls on the two sockets (each armed in its own slot): the same
/// kernel-side join as in the epoll model, with readiness from the ring.
struct Joining {
    partner: Token,
    idle: Duration,
    /// What the handler offered to move the bytes instead of pipes, until the joint is made.
    carrier: Option<Box<dyn Carrier>>,
    joint: Option<Joint>,
    /// Readiness of the owner's socket (`[0]`) and the partner's (`[1]`).
    readable: [bool; 2],
    writable: [bool; 2],
    /// Events the armed one-shot poll on each socket waits for (0: none armed). A poll that
    /// lacks an event now needed is cancelled; its completion re-arms it with all of them.
    polled: [i16; 2],
    poll_cancelled: [bool; 2],
}

/// What one completion of a multishot receive delivered.
enum Received {
    /// Bytes, in ring buffer `.0`.
    Bytes(u16, Vec<u8>),
    /// The peer's end of stream.
    End,
    /// Nothing: the receive stopped for a reason that calls for re-arming it.
    Stopped,
    /// A socket error.
    Failed,
}

/// Keeps a receive's buffer as `input` and gives the ring one back in its place: the buffer
/// the input let go of (no copy when the input was empty), or one from the pool when that is
/// too small.
fn keep_received(
    ring: &mut BufRing,
    pool: &mut BufferPool,
    input: &mut Input,
    bid: u16,
    buf: Vec<u8>,
) {
    let spare = input.receive(buf);
    let spare = if spare.capacity() >= BUFFER_SIZE {
        spare
    } else {
        pool.take()
    };
    ring.provide(bid, spare);
}

/// What a one-shot poll of a joined socket says to try: reading, writing. All of it when the
/// poll was cancelled or failed: an error shows in the next splice, and a socket that is not
/// ready says EAGAIN again.
fn poll_readiness(result: i32) -> (bool, bool) {
    let events = if result < 0 { -1 } else { result };
    let readable = (libc::POLLIN | libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) as i32;
    let writable = (libc::POLLOUT | libc::POLLHUP | libc::POLLERR) as i32;
    (events & readable != 0, events & writable != 0)
}

/// The msghdr and iovecs of a SENDMSG, boxed so they stay put for the kernel. About 1 KiB, so
/// a slot holds one only while its send is in flight and the worker keeps the spares.
struct SendMsg {
    hdr: libc::msghdr,
    iov: [libc::iovec; MAX_IOVECS],
}

impl SendMsg {
    fn boxed() -> Box<SendMsg> {
        Box::new(SendMsg {
            // SAFETY: all-zero is a valid msghdr and iovec (null pointers, zero lengths);
            // they are filled in before each send.
            hdr: unsafe { std::mem::zeroed() },
            iov: unsafe { std::mem::zeroed() },
        })
    }
}

/// Spare SENDMSG boxes a worker keeps: enough for the sends of one busy loop iteration.
const SPARE_SEND_MSGS: usize = 1024;

/// A connection slot: outlives its connection until the kernel is done with it.
pub(crate) struct Slot<C> {
    /// Operations submitted (or queued) for this slot that have not completed for good.
    in_flight: u32,
    /// The SENDMSG in flight's msghdr and iovecs.
    msg: Option<Box<SendMsg>>,
    /// The descriptor of a closed connection, kept open until its operations have completed
    /// so its number cannot be reused under them.
    retired_fd: Option<OwnedFd>,
    /// The output of a closed connection that an in-flight SENDMSG may still be reading.
    retired_output: Option<Output>,
    conn: Option<Conn<C>>,
}

impl<C> HasLink for Slot<C> {
    fn link_mut(&mut self) -> Option<&mut Link> {
        self.conn.as_mut().map(|c| &mut c.link)
    }
}

/// The live connection in slot `index` with the generation its operations carry and the
/// count of its slot's operations in flight; `None` for a free slot or a closed connection.
fn live<C>(slots: &mut Slab<Slot<C>>, index: usize) -> Option<(u32, &mut u32, &mut Conn<C>)> {
    let generation = slots.generation(index);
    let Slot {
        in_flight, conn, ..
    } = slots.at(index)?;
    Some((generation, in_flight, conn.as_mut()?))
}

struct Listener {
    /// Closed at a graceful stop, once no accept is armed on it.
    fd: Option<OwnedFd>,
    armed: bool,
}

struct Worker<'a, H: Handler> {
    ring: IoUring,
    buffers: BufRing,
    listeners: Vec<Listener>,
    handler: H,
    slots: Slab<Slot<H::Conn>>,
    /// Connections to look at before the next wait: output to send, state to advance.
    dirty: Vec<usize>,
    /// Spare SENDMSG boxes; boxed so that handing one to a slot moves a pointer, and the
    /// kernel's copy of its address stays right while the slot holds it.
    #[allow(clippy::vec_box)]
    send_msgs: Vec<Box<SendMsg>>,
    /// Requests prepared for the next enter.
    sqes: Vec<squeue::Entry>,
    /// Completions taken from the ring (user_data, result, flags).
    cqes: Vec<(u64, i32, u32)>,
    core: Core<'a>,
    stopping: bool,
}

impl<'a, H: Handler> Worker<'a, H> {
    fn new(listeners: Vec<OwnedFd>, handler: H, env: Env<'a>) -> io::Result<Self> {
        let ring = build_ring()?;
        let mut pool = BufferPool::default();
        let buffers = BufRing::new(&ring, RECV_GROUP, RECV_BUFFERS, &mut pool)?;
        Ok(Worker {
            ring,
            buffers,
            listeners: listeners
                .into_iter()
                .map(|fd| Listener {
                    fd: Some(fd),
                    armed: false,
                })
                .collect(),
            handler,
            slots: Slab::default(),
            dirty: Vec::new(),
            send_msgs: Vec::new(),
            sqes: Vec::with_capacity(SQ_ENTRIES as usize),
            cqes: Vec::with_capacity(CQ_ENTRIES as usize),
            core: Core::new(env, pool),
            stopping: false,
        })
    }

    fn run(mut self) -> io::Result<()> {
        self.accept_all();
        let result = self.serve();
        self.shutdown();
        result
    }

    fn serve(&mut self) -> io::Result<()> {
        while !self.core.stop.load(Ordering::Relaxed) && !self.drained() {
            self.submit_and_wait(self.core.wake_at())?;
            self.core.now = Instant::now();
            self.reap();
            self.run_requests();
            self.keep_time();
            self.run_requests();
            self.flush_dirty();
        }
        Ok(())
    }

    /// Submits every prepared request and waits for at least one completion or `until`.
    fn submit_and_wait(&mut self, until: Instant) -> io::Result<()> {
        self.push_sqes()?;
        if !self.core.requests.is_empty() {
            // Wakes left for the next round: take what has completed without waiting.
            return match self.ring.submit() {
                Ok(_) => Ok(()),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY)) => {
                    Ok(())
                }
                Err(e) => Err(e),
            };
        }
        let wait = until
            .saturating_duration_since(Instant::now())
            .max(Duration::from_micros(100));
        let timespec = types::Timespec::from(wait);
        let args = types::SubmitArgs::new().timespec(&timespec);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => Ok(()),
            Err(e) => match e.raw_os_error() {
                // Timed out, interrupted, or completions must be reaped first.
                Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY) => Ok(()),
                _ => Err(e),
            },
        }
    }

    /// Moves prepared requests into the submission queue, submitting early when it fills.
    fn push_sqes(&mut self) -> io::Result<()> {
        let mut done = 0;
        while done < self.sqes.len() {
            {
                let mut queue = self.ring.submission();
                for entry in &self.sqes[done..] {
                    // SAFETY: every buffer a request points to (msghdr and iovecs in the
                    // slot's box, output bytes, ring buffers) stays alive and in place until
                    // the request completes; see the module docs.
                    if unsafe { queue.push(entry) }.is_err() {
                        break;
                    }
                    done += 1;
                }
            }
            if done < self.sqes.len() {
                match self.ring.submit() {
                    Ok(_) => {}
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::EINTR)) => {
                        // The rest waits for the next round, after completions are reaped.
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        self.sqes.drain(..done);
        Ok(())
    }

    /// Handles every completion in the ring.
    fn reap(&mut self) {
        loop {
            let mut cqes = std::mem::take(&mut self.cqes);
            cqes.clear();
            cqes.extend(
                self.ring
                    .completion()
                    .map(|cqe| (cqe.user_data(), cqe.result(), cqe.flags())),
            );
            if cqes.is_empty() {
                self.cqes = cqes;
                return;
            }
            // A connection's received bytes first, then everything else, each in ring order:
            // a handler called for another completion (its send finished) then sees every
            // byte the kernel has taken from its socket. A handler that hands its socket to
            // the kernel when it holds no input (the echo's kernel path) could otherwise do
            // so with bytes still waiting here, and they would be sent after later ones the
            // kernel had passed on itself. Receives run only inside the wait (the ring defers
            // its task work), so none can be taken between this batch and the handler.
            for &(user_data, result, flags) in &cqes {
                if untoken(user_data).0 == Some(Op::Recv) {
                    self.complete(user_data, result, flags);
                }
            }
            for &(user_data, result, flags) in &cqes {
                if untoken(user_data).0 != Some(Op::Recv) {
                    self.complete(user_data, result, flags);
                }
            }
            self.cqes = cqes;
        }
    }

    fn complete(&mut self, user_data: u64, result: i32, flags: u32) {
        let (op, index, generation) = untoken(user_data);
        match op {
            Some(Op::Accept) => self.on_accept(index, result, flags),
            Some(Op::Recv) => self.on_recv(index, generation, result, flags),
            Some(Op::Send) => self.on_send(index, generation, result),
            Some(Op::Poll) => self.on_poll(index, generation, result),
            Some(Op::Cancel) | None => {}
        }
    }

    /// Accounts for a completion of a slot's operation (`last`: the operation is over);
    /// true when the slot holds the live connection the operation belongs to.
    fn op_done(&mut self, index: usize, generation: u32, last: bool) -> bool {
        let Some(slot) = self.slots.get_mut(Token::new(index, generation)) else {
            return false;
        };
        if last {
            slot.in_flight = slot.in_flight.saturating_sub(1);
        }
        if slot.conn.is_some() {
            return true;
        }
        if slot.in_flight == 0 {
            self.free_slot(index);
        }
        false
    }

    /// Moves a graceful stop on: begins it when it has been asked for, and says whether the
    /// worker is done with it (no connection left, or the grace period over: those left are
    /// then closed by `shutdown`, and counted in the error log here).
    fn drained(&mut self) -> bool {
        if self.core.drain_begins() {
            self.begin_drain();
        }
        if !self.core.draining {
            return false;
        }
        let open = self.slots.values().filter(|s| s.conn.is_some()).count();
        self.core.drain_done(open)
    }

    /// The start of a graceful stop: the armed accepts are cancelled and each listener is
    /// closed once its accept has ended (the ring holds a reference to the socket until then),
    /// so that new clients are refused; connections accepted meanwhile are served, draining.
    /// Then every connection is told.
    fn begin_drain(&mut self) {
        self.core.now = Instant::now();
        // Clients already in the backlog were completed by the kernel and closing the
        // listener would reset them: they are taken in now, with plain accepts beside the
        // multishot one (both take from the same queue), until the queue is empty.
        for index in 0..self.listeners.len() {
            if let Some(fd) = self.listeners[index].fd.as_ref().map(AsRawFd::as_raw_fd) {
                self.take_backlog(index, fd);
            }
        }
        for (index, listener) in self.listeners.iter_mut().enumerate() {
            if listener.armed {
                self.sqes.push(cancel(token(Op::Accept, index, 0)));
            } else {
                listener.fd = None;
            }
        }
        self.tell_drain();
    }

    fn arm_accept(&mut self, index: usize) {
        if self.stopping || self.core.draining || self.core.accept_pause.is_paused() {
            return;
        }
        let listener = &mut self.listeners[index];
        let Some(fd) = &listener.fd else {
            return;
        };
        if listener.armed {
            return;
        }
        listener.armed = true;
        let entry = opcode::AcceptMulti::new(types::Fd(fd.as_raw_fd()))
            .flags(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
            .build()
            .user_data(token(Op::Accept, index, 0));
        self.sqes.push(entry);
    }

    /// Accepts the clients waiting on listener `index` (its socket `fd`) until none is left.
    fn take_backlog(&mut self, index: usize, fd: RawFd) {
        while let Ok((fd, _)) = fastpath_sys::accept(fd) {
            if self.core.admit(&fd, &self.handler, index) {
                self.open(fd, index);
            }
        }
    }

    fn on_accept(&mut self, index: usize, result: i32, flags: u32) {
        let Some(listener) = self.listeners.get_mut(index) else {
            return;
        };
        let more = cqueue::more(flags);
        let mut closing = None;
        if !more {
            listener.armed = false;
            if self.core.draining {
                closing = listener.fd.take();
            }
        }
        self.accepted(index, result, more);
        // (A stop at once takes no one in: the listener just closes.)
        if let Some(fd) = closing.filter(|_| !self.stopping) {
            // The armed accept may have taken the wake-up of a client it never accepted: the
            // cancel of a graceful stop ends it even after the kernel woke it (an exclusive
            // wake-up, which no other waiter on the socket then gets; on a reload, the new
            // server's). Now that it no longer waits, the backlog is taken in once more.
            self.take_backlog(index, fd.as_raw_fd());
        }
    }

    /// What an accept completed with: a connection, or why none.
    fn accepted(&mut self, index: usize, result: i32, more: bool) {
        if result >= 0 {
            // SAFETY: the accept completed with a fresh descriptor that nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(result) };
            if self.stopping {
                return;
            }
            if !more {
                self.arm_accept(index);
            }
            if !self.core.admit(&fd, &self.handler, index) {
                return;
            }
            self.open(fd, index);
            return;
        }
        let error = io::Error::from_raw_os_error(-result);
        match -result {
            libc::ECANCELED => {}
            libc::EINTR | libc::EAGAIN | libc::ECONNABORTED | libc::EPROTO => {
                if !more {
                    self.arm_accept(index);
                }
            }
            errno if common::out_of_descriptors(errno) => self.pause_accepting(&error),
            _ => {
                tracing::error!("accept failed: {error}");
                // Retried after a pause rather than at once, so a lasting error cannot spin.
                self.core.accept_pause.pause(self.core.now);
            }
        }
    }

    /// Out of descriptors (or memory): the multishot accept has ended; it is re-armed after a
    /// pause (by the tick sweep) instead of at once, so pending clients wait in the backlog
    /// until descriptors are free again rather than the worker spinning on errors.
    fn pause_accepting(&mut self, error: &io::Error) {
        warn_out_of_descriptors!(
            self.core.accept_pause,
            self.core.now,
            error,
            self.slots.values().filter(|s| s.conn.is_some()).count()
        );
        self.core.accept_pause.pause(self.core.now);
    }

    fn open(&mut self, fd: OwnedFd, listener: usize) {
        // Multishot accept reports no address; one getpeername per connection stands in.
        let peer = peer_addr(fd.as_raw_fd())
            .ok()
            .flatten()
            .unwrap_or(UNKNOWN_PEER);
        let link = Link::new(fd);
        self.open_with(link, Opened::new(peer, listener), None);
    }

    fn open_with(&mut self, link: Link, opened: Opened, token: Option<Token>) {
        // The receive is armed before the next wait; with TCP_DEFER_ACCEPT the request is
        // usually there already and completes within that same enter.
        if let Some(index) = self.open_slot(link, opened, token) {
            self.mark_dirty(index);
        }
    }

    fn mark_dirty(&mut self, index: usize) {
        if let Some(c) = self.slots.at(index).and_then(|slot| slot.conn.as_mut()) {
            if !c.dirty {
                c.dirty = true;
                self.dirty.push(index);
            }
        }
    }

    /// What a multishot receive's completion delivered. A ring buffer that carries no bytes
    /// goes back to the ring at once.
    fn received(&mut self, result: i32, flags: u32) -> Received {
        let mut data = None;
        if let Some(bid) = cqueue::buffer_select(flags) {
            match self.buffers.take(bid, result.max(0) as usize) {
                Some(buf) if result > 0 => data = Some((bid, buf)),
                Some(buf) => self.buffers.provide(bid, buf),
                None => tracing::error!("receive completed with an unknown buffer {bid}"),
            }
        }
        match (result, data) {
            (n, Some((bid, buf))) if n > 0 => Received::Bytes(bid, buf),
            // Bytes without a buffer: the ring is not what the kernel thinks it is.
            (n, _) if n > 0 => Received::Failed,
            (0, _) => Received::End,
            // The ring ran dry (it is refilled by now), the receive was paused, or it was
            // interrupted: re-armed by the flush where input is wanted.
            (e, _)
                if matches!(
                    -e,
                    libc::ENOBUFS | libc::ECANCELED | libc::EINTR | libc::EAGAIN
                ) =>
            {
                Received::Stopped
            }
            (_, _) => Received::Failed,
        }
    }

    /// Gives the ring back the buffer of bytes nobody will take.
    fn drop_received(&mut self, received: Received) {
        if let Received::Bytes(bid, buf) = received {
            self.buffers.provide(bid, buf);
        }
    }

    fn on_recv(&mut self, index: usize, generation: u32, result: i32, flags: u32) {
        let more = cqueue::more(flags);
        let received = self.received(result, flags);
        if !self.op_done(index, generation, !more) {
            self.drop_received(received);
            return;
        }
        let c = self.slots[index].conn.as_mut().expect("live connection");
        if !more {
            c.recv_armed = false;
            c.recv_cancelled = false;
        }
        if c.join.is_some() || c.link.state == State::Joined {
            // The last bytes before the receive ends: they cross over to the partner, in the
            // owner's flush.
            let carrier = c.link.owner().unwrap_or(Token::new(index, generation));
            match received {
                Received::Bytes(bid, buf) => keep_received(
                    &mut self.buffers,
                    &mut self.core.pool,
                    &mut c.link.input,
                    bid,
                    buf,
                ),
                Received::End => c.link.eof = true,
                Received::Stopped => {}
                Received::Failed => {
                    self.close(index, CloseReason::PeerGone);
                    return;
                }
            }
            self.mark_dirty(carrier.index());
            return;
        }
        if c.link.state == State::Idle {
            // An idle connection that hears anything is unfit for reuse.
            match received {
                Received::Stopped => self.mark_dirty(index),
                received => {
                    self.drop_received(received);
                    self.close(index, CloseReason::PeerGone);
                }
            }
            return;
        }
        match received {
            Received::Bytes(bid, buf) => {
                if matches!(c.link.state, State::Closing | State::Lingering) {
                    // Late input after the last response is discarded.
                    self.buffers.provide(bid, buf);
                    if !more {
                        self.mark_dirty(index);
                    }
                    return;
                }
                // The guard against a handler that leaves input unconsumed; input that piled
                // up while the handler was not looking (draining, waiting, or a send in flight)
                // is not its doing (the receive goes on delivering until its pause takes
                // effect).
                if c.link.state == State::Reading
                    && !c.ready_pending
                    && c.link.owner().is_none()
                    && c.link.input.len() >= self.core.config.max_input
                {
                    warn_input_left!(c.link.input.len(), self.core.config.max_input);
                    self.buffers.provide(bid, buf);
                    self.close(index, CloseReason::Error);
                    return;
                }
                keep_received(
                    &mut self.buffers,
                    &mut self.core.pool,
                    &mut c.link.input,
                    bid,
                    buf,
                );
                if c.link.state == State::Reading && !self.ready(index) {
                    return;
                }
                self.pause_receive_if_unwanted(index);
                self.mark_dirty(index);
            }
            Received::End => {
                c.link.eof = true;
                match c.link.state {
                    State::Lingering => self.close(index, CloseReason::Done),
                    // Seen by the handler once the output has drained; a joint sees it itself.
                    State::Closing | State::Draining | State::Joined | State::Waiting => {}
                    State::Idle => unreachable!("handled above"),
                    State::Reading => {
                        if self.ready(index) {
                            self.mark_dirty(index);
                        }
                    }
                }
            }
            Received::Stopped => self.mark_dirty(index),
            Received::Failed if c.link.state == State::Lingering => {
                self.close(index, CloseReason::Done)
            }
            Received::Failed => self.close(index, CloseReason::PeerGone),
        }
    }

    /// New input for a reading connection: calls the handler now, or once the in-flight send
    /// completes. False when the connection is gone.
    fn ready(&mut self, index: usize) -> bool {
        let c = self.slots[index].conn.as_mut().expect("live connection");
        if c.sending == Sending::Msg {
            c.ready_pending = true;
            return true;
        }
        self.call_and_apply(index, false)
    }

    /// Cancels the receive while input piles up that the handler is not looking at.
    fn pause_receive_if_unwanted(&mut self, index: usize) {
        let Some((generation, _, c)) = live(&mut self.slots, index) else {
            return;
        };
        if c.recv_armed && !c.recv_cancelled && !wants_input(c) {
            c.recv_cancelled = true;
            self.sqes.push(cancel(token(Op::Recv, index, generation)));
        }
    }

    fn on_send(&mut self, index: usize, generation: u32, result: i32) {
        if let Some(slot) = self.slots.get_mut(Token::new(index, generation)) {
            if let Some(msg) = slot.msg.take() {
                if self.send_msgs.len() < SPARE_SEND_MSGS {
                    self.send_msgs.push(msg);
                }
            }
        }
        if !self.op_done(index, generation, true) {
            return;
        }
        let c = self.slots[index].conn.as_mut().expect("live connection");
        c.sending = Sending::Idle;
        c.link.output.thaw();
        if result < 0 && matches!(-result, libc::EAGAIN | libc::EINTR) {
            self.mark_dirty(index);
            return;
        }
        if result <= 0 {
            tracing::debug!("send failed: {}", io::Error::from_raw_os_error(-result));
            self.close(index, CloseReason::PeerGone);
            return;
        }
        c.link.output.advance(result as usize);
        c.link.send_deadline = None;
        if c.link.output.is_empty() {
            // (A joined partner's flush below hands it to its owner's joint.)
            c.link.output_sent(&mut self.core.requests.woken);
        }
        if c.ready_pending && c.link.state == State::Reading {
            c.ready_pending = false;
            if !self.call_and_apply(index, false) {
                return;
            }
        }
        self.mark_dirty(index);
    }

    fn on_poll(&mut self, index: usize, generation: u32, result: i32) {
        if !self.op_done(index, generation, true) {
            return;
        }
        let c = self.slots[index].conn.as_mut().expect("live connection");
        c.sending = Sending::Idle;
        c.link.send_deadline = None;
        let (readable, writable) = poll_readiness(result);
        if let Some(joining) = c.join.as_mut() {
            joining.polled[0] = 0;
            joining.poll_cancelled[0] = false;
            joining.readable[0] |= readable;
            joining.writable[0] |= writable;
            self.mark_dirty(index);
            return;
        }
        if c.link.state == State::Joined {
            // A joined partner's poll: its readiness is the owner's joint's to use.
            if let Some(owner) = c.link.owner() {
                if let Some(joining) = self
                    .slots
                    .get_mut(owner)
                    .and_then(|slot| slot.conn.as_mut())
                    .and_then(|c| c.join.as_mut())
                {
                    joining.polled[1] = 0;
                    joining.poll_cancelled[1] = false;
                    joining.readable[1] |= readable;
                    joining.writable[1] |= writable;
                }
                self.mark_dirty(owner.index());
            }
            return;
        }
        if result < 0 && !matches!(-result, libc::EAGAIN | libc::EINTR) {
            self.close(index, CloseReason::PeerGone);
            return;
        }
        // Room to send (or an error, which the next sendfile reports).
        self.mark_dirty(index);
    }

    /// Advances every connection that had something happen, preparing their sends.
    fn flush_dirty(&mut self) {
        while !self.dirty.is_empty() {
            let mut dirty = std::mem::take(&mut self.dirty);
            for &index in &dirty {
                self.flush(index);
            }
            dirty.clear();
            if self.dirty.is_empty() {
                // Keep the allocation for the next round.
                self.dirty = dirty;
            }
        }
    }

    /// Moves a connection forward as far as it goes without waiting: calls the handler when
    /// output has drained, starts the next send, closes, and arms the receive.
    fn flush(&mut self, index: usize) {
        if self
            .slots
            .at(index)
            .and_then(|slot| slot.conn.as_ref())
            .is_some_and(|c| c.join.is_some())
        {
            self.flush_joined(index);
            return;
        }
        if let Some(c) = self.slots.at(index).and_then(|slot| slot.conn.as_mut()) {
            if c.link.state == State::Joined && c.join.is_none() {
                // A joined partner is moved with its owner.
                c.dirty = false;
                if let Some(owner) = c.link.owner() {
                    self.mark_dirty(owner.index());
                }
                return;
            }
        }
        loop {
            let Some(c) = self.slots.at(index).and_then(|slot| slot.conn.as_mut()) else {
                return;
            };
            if c.join.is_some() {
                // The handler asked for the join just now.
                self.flush_joined(index);
                return;
            }
            c.dirty = false;
            if c.sending != Sending::Idle {
                break;
            }
            if c.ready_pending && c.link.state == State::Reading {
                c.ready_pending = false;
                if !self.call_and_apply(index, false) {
                    return;
                }
                continue;
            }
            if !c.link.output.is_empty() {
                if c.link.output.front_is_file() {
                    match c.link.output.send_files(c.link.fd.as_raw_fd()) {
                        Ok(Flush::Done) => {
                            c.link.send_deadline = None;
                            continue;
                        }
                        Ok(Flush::WouldBlock) => {
                            self.start_poll(index);
                            break;
                        }
                        Err(e) => {
                            self.close(index, e.close_reason());
                            return;
                        }
                    }
                }
                self.start_sendmsg(index);
                break;
            }
            c.link.send_deadline = None;
            c.link.output.release_if_empty(&mut self.core.pool);
            match c.link.state {
                // A joined connection was handed to flush_joined above.
                State::Reading
                | State::Lingering
                | State::Joined
                | State::Waiting
                | State::Idle => break,
                State::Draining => {
                    if !self.output_drained(index) {
                        return;
                    }
                }
                State::Closing => {
                    // The receive holds what has arrived: nothing waits unread in the socket.
                    if !self.finish_closing(index, false) {
                        return;
                    }
                    break;
                }
            }
        }
        self.arm_receive(index);
        self.pause_receive_if_unwanted(index);
    }

    /// Carries a connection joined with its partner (see [`Joining`]).
    fn flush_joined(&mut self, index: usize) {
        let owner = self.slots.token(index);
        let Some(partner) = self
            .slots
            .at(index)
            .and_then(|slot| slot.conn.as_mut())
            .and_then(|c| c.join.as_ref())
            .map(|joining| joining.partner)
        else {
            return;
        };
        if !self.is_live(partner) {
            self.close(index, CloseReason::Error);
            return;
        }
        // Both receives end first: what they deliver meanwhile crosses over below.
        for side in [owner, partner] {
            let Some((generation, _, c)) = live(&mut self.slots, side.index()) else {
                continue;
            };
            c.dirty = false;
            if c.recv_armed && !c.recv_cancelled {
                c.recv_cancelled = true;
                self.sqes
                    .push(cancel(token(Op::Recv, side.index(), generation)));
            }
        }
        let (slot, other) = self
            .slots
            .pair(index, partner.index())
            .expect("two live connections");
        let (Some(c), Some(p)) = (slot.conn.as_mut(), other.conn.as_mut()) else {
            return;
        };
        let joining = c.join.as_mut().expect("joined above");
        let pool = &mut self.core.pool;
        // What either side sent that reached user space goes across first.
        linked::cross_over(&mut c.link, &mut p.link, pool);
        // The partner's queued bytes go by plain sends once no send of its own is in flight.
        if p.sending == Sending::Idle && !p.link.output.is_empty() && joining.writable[1] {
            match p.link.output.flush(p.link.fd.as_raw_fd(), pool) {
                Ok(Flush::Done) => {}
                Ok(Flush::WouldBlock) => joining.writable[1] = false,
                Err(_) => {
                    self.close(index, CloseReason::Error);
                    return;
                }
            }
        }
        if joining.joint.is_none() && !c.recv_armed && !p.recv_armed && p.sending != Sending::Msg {
            match Joint::new(joining.idle, joining.carrier.take()) {
                Ok(joint) => {
                    joining.joint = Some(joint);
                    joining.readable[1] = true;
                }
                Err(e) => {
                    tracing::warn!("cannot join a connection with its linked connection: {e}");
                    self.close(index, CloseReason::Error);
                    return;
                }
            }
        }
        if let Some(joint) = joining.joint.as_mut() {
            let ([owner_readable, partner_readable], [owner_writable, partner_writable]) =
                (&mut joining.readable, &mut joining.writable);
            let pumped = joint.pump(
                Side {
                    fd: c.link.fd.as_raw_fd(),
                    readable: owner_readable,
                    writable: owner_writable,
                },
                Side {
                    fd: p.link.fd.as_raw_fd(),
                    readable: partner_readable,
                    writable: partner_writable,
                },
                !c.link.output.is_empty(),
                !p.link.output.is_empty(),
                p.link.input.ever_received(),
            );
            match JointStep::of(pumped) {
                JointStep::Going { moved, recheck } => {
                    if moved {
                        c.link.deadline = Some(self.core.now + joint.idle);
                    }
                    if joint.ends_only() {
                        let at = self.core.now + CARRIED_CHECK;
                        c.link.deadline = Some(c.link.deadline.map_or(at, |d| d.min(at)));
                    }
                    if recheck {
                        let at = self.core.now + CARRIED_RECHECK;
                        c.link.deadline = Some(c.link.deadline.map_or(at, |d| d.min(at)));
                        self.core.note_deadline(owner, c.link.deadline);
                    }
                }
                JointStep::Finished => {
                    // The partner's end has reached the owner's peer: the owner closes like
                    // any other connection, its late input discarded for the linger time.
                    c.join = None;
                    c.link.unjoin();
                    self.close(partner.index(), CloseReason::Done);
                    self.mark_dirty(index);
                    return;
                }
                JointStep::Close(reason) => {
                    self.close(index, reason);
                    return;
                }
            }
        }
        // Wait for what is missing: room or bytes on either socket; only the ends while a
        // carrier moves the bytes (see Joint::ends_only).
        let joined = joining.joint.is_some();
        let input = if joining.joint.as_ref().is_some_and(Joint::ends_only) {
            libc::POLLRDHUP
        } else {
            libc::POLLIN | libc::POLLRDHUP
        };
        let wanted = |readable: bool, writable: bool, output: bool| {
            let mut events: i16 = 0;
            if joined && !readable {
                events |= input;
            }
            if !writable && (joined || output) {
                events |= libc::POLLOUT;
            }
            events
        };
        let owner_events = wanted(joining.readable[0], joining.writable[0], false);
        let partner_events = wanted(
            joining.readable[1],
            joining.writable[1],
            !p.link.output.is_empty(),
        );
        let owner_sends = !c.link.output.is_empty();
        // Bytes that reached user space before the joint go to the owner's peer by the
        // usual send.
        if owner_sends {
            if c.sending == Sending::Idle {
                self.start_sendmsg(index);
            }
        } else {
            self.poll_joined(index, 0, owner_events);
        }
        self.poll_joined(index, 1, partner_events);
    }

    /// Arms (or, lacking an event now wanted, cancels) the one-shot poll of a joined socket,
    /// in its own slot: the owner's (`side` 0) or its partner's (1), whose polls' state the
    /// owner's [`Joining`] keeps.
    fn poll_joined(&mut self, owner: usize, side: usize, events: i16) {
        if events == 0 {
            return;
        }
        let Some(joining) = self
            .slots
            .at(owner)
            .and_then(|slot| slot.conn.as_ref())
            .and_then(|c| c.join.as_ref())
        else {
            return;
        };
        let (polled, cancelled) = (joining.polled[side], joining.poll_cancelled[side]);
        let index = if side == 0 {
            owner
        } else {
            joining.partner.index()
        };
        let Some((generation, in_flight, c)) = live(&mut self.slots, index) else {
            return;
        };
        let fd = c.link.fd.as_raw_fd();
        let armed = match c.sending {
            Sending::Idle => {
                *in_flight += 1;
                c.sending = Sending::Poll;
                let entry = opcode::PollAdd::new(types::Fd(fd), events as u32)
                    .build()
                    .user_data(token(Op::Poll, index, generation));
                self.sqes.push(entry);
                true
            }
            Sending::Poll if events & !polled != 0 && !cancelled => {
                self.sqes.push(cancel(token(Op::Poll, index, generation)));
                false
            }
            _ => return,
        };
        let joining = self.slots[owner]
            .conn
            .as_mut()
            .and_then(|c| c.join.as_mut())
            .expect("looked at above");
        if armed {
            joining.polled[side] = events;
        } else {
            joining.poll_cancelled[side] = true;
        }
    }

    fn arm_receive(&mut self, index: usize) {
        let Some((generation, in_flight, c)) = live(&mut self.slots, index) else {
            return;
        };
        if c.recv_armed || !wants_input(c) {
            return;
        }
        c.recv_armed = true;
        c.recv_cancelled = false;
        *in_flight += 1;
        let entry = opcode::RecvMulti::new(types::Fd(c.link.fd.as_raw_fd()), self.buffers.group())
            .build()
            .user_data(token(Op::Recv, index, generation));
        self.sqes.push(entry);
    }

    /// Queues a SENDMSG of the leading inline and shared bytes.
    fn start_sendmsg(&mut self, index: usize) {
        let mut msg = self.send_msgs.pop().unwrap_or_else(SendMsg::boxed);
        let Some((generation, in_flight, c)) = live(&mut self.slots, index) else {
            return;
        };
        let (count, file_follows) = c.link.output.gather(&mut msg.iov);
        // Until the send completes: bytes its owner queues for a linked connection meanwhile
        // must not move these.
        c.link.output.freeze();
        // SAFETY: all-zero is a valid msghdr; the fields that matter are set below.
        msg.hdr = unsafe { std::mem::zeroed() };
        msg.hdr.msg_iov = msg.iov.as_mut_ptr();
        msg.hdr.msg_iovlen = count as _;
        let flags = libc::MSG_NOSIGNAL | if file_follows { libc::MSG_MORE } else { 0 };
        let entry = opcode::SendMsg::new(types::Fd(c.link.fd.as_raw_fd()), &msg.hdr)
            .flags(flags as u32)
            .build()
            .user_data(token(Op::Send, index, generation));
        *in_flight += 1;
        self.sqes.push(entry);
        c.start_sending(Sending::Msg, &self.core);
        self.slots[index].msg = Some(msg);
    }

    /// Queues a wait for room in the socket, for sendfile to go on.
    fn start_poll(&mut self, index: usize) {
        let Some((generation, in_flight, c)) = live(&mut self.slots, index) else {
            return;
        };
        let entry = opcode::PollAdd::new(types::Fd(c.link.fd.as_raw_fd()), libc::POLLOUT as u32)
            .build()
            .user_data(token(Op::Poll, index, generation));
        *in_flight += 1;
        self.sqes.push(entry);
        c.start_sending(Sending::Poll, &self.core);
    }

    /// Releases a slot whose connection is closed and whose operations have all completed.
    fn free_slot(&mut self, index: usize) {
        let Some(mut slot) = self.slots.remove(index) else {
            return;
        };
        // Closing the descriptor here, once, after the kernel has let go of it.
        slot.retired_fd = None;
        if let Some(mut output) = slot.retired_output.take() {
            output.clear(&mut self.core.pool);
        }
    }

    fn ops_in_flight(&self) -> usize {
        let slots: usize = self.slots.values().map(|s| s.in_flight as usize).sum();
        slots + self.listeners.iter().filter(|l| l.armed).count()
    }

    /// Closes every connection, cancels every operation and waits for the kernel to finish
    /// them, so no buffer is freed under it.
    fn shutdown(&mut self) {
        self.stopping = true;
        self.core.now = Instant::now();
        for index in 0..self.slots.capacity() {
            self.close(index, CloseReason::Shutdown);
        }
        for (index, listener) in self.listeners.iter().enumerate() {
            if listener.armed {
                self.sqes.push(cancel(token(Op::Accept, index, 0)));
            }
        }
        let give_up = Instant::now() + STOP_DRAIN;
        while self.ops_in_flight() > 0 && Instant::now() < give_up {
            let until = (Instant::now() + TICK).min(give_up);
            if let Err(e) = self.submit_and_wait(until) {
                tracing::error!("io_uring wait failed while stopping: {e}");
                break;
            }
            self.core.now = Instant::now();
            self.reap();
        }
        self.dirty.clear();
        let left = self.ops_in_flight();
        if left == 0 {
            self.buffers.retire(&self.ring);
        } else {
            tracing::warn!(
                "{left} io_uring operations still in flight at stop; leaving their buffers allocated"
            );
            for slot in self.slots.values_mut() {
                slot.retired_fd = None;
                if let Some(output) = slot.retired_output.take() {
                    std::mem::forget(output);
                }
                if let Some(msg) = slot.msg.take() {
                    std::mem::forget(msg);
                }
            }
        }
        self.handler.on_stop();
    }
}

impl<'a, H: Handler> Engine<'a> for Worker<'a, H> {
    type H = H;
    type Slot = Slot<H::Conn>;

    fn handler_and_core(&mut self) -> (&mut H, &mut Core<'a>) {
        (&mut self.handler, &mut self.core)
    }

    fn slots(&mut self) -> &mut Slab<Slot<H::Conn>> {
        &mut self.slots
    }

    fn open_parts(&mut self) -> (&mut H, &mut Core<'a>, Reach<'_>) {
        (
            &mut self.handler,
            &mut self.core,
            linked::reach(&mut self.slots),
        )
    }

    fn parts(&mut self, index: usize) -> Option<Parts<'_, 'a, H>> {
        let worker = (&mut self.handler, &mut self.core);
        parts_of(worker, &mut self.slots, index, |slot| {
            let c = slot.conn.as_mut()?;
            // Busy: the handler may write, which must wait until the kernel has read the
            // bytes it is sending.
            let (busy, joined) = (c.sending == Sending::Msg, c.join.is_some());
            Some((&mut c.link, &mut c.conn, busy, joined))
        })
    }

    fn insert(&mut self, token: Token, link: Link, conn: H::Conn) {
        self.slots.insert_at(
            token,
            Slot {
                in_flight: 0,
                msg: None,
                retired_fd: None,
                retired_output: None,
                conn: Some(Conn {
                    link,
                    conn,
                    recv_armed: false,
                    recv_cancelled: false,
                    sending: Sending::Idle,
                    ready_pending: false,
                    dirty: false,
                    join: None,
                }),
            },
        );
    }

    /// Joins connection `index` with its linked connection as its call asked; Abort when it
    /// cannot be.
    fn join(&mut self, index: usize, join: JoinRequest, next: Next) -> Next {
        let owner = self.slots.token(index);
        let partner = join.partner;
        let Some(p) = self
            .slots
            .get_mut(partner)
            .and_then(|slot| slot.conn.as_mut())
            .filter(|p| linked::joinable(owner, &p.link))
        else {
            return Next::Abort;
        };
        p.link.state = State::Joined;
        // A poll armed before the join waits for room to send.
        let partner_polled = if p.sending == Sending::Poll {
            libc::POLLOUT
        } else {
            0
        };
        let c = self.slots[index].conn.as_mut().expect("live connection");
        let owner_polled = if c.sending == Sending::Poll {
            libc::POLLOUT
        } else {
            0
        };
        c.join = Some(Box::new(Joining {
            partner,
            idle: join.idle,
            carrier: join.carrier,
            joint: None,
            readable: [true, true],
            writable: [true, true],
            polled: [owner_polled, partner_polled],
            poll_cancelled: [false, false],
        }));
        c.link.deadline = Some(self.core.now + join.idle);
        self.mark_dirty(index);
        next
    }

    fn proceed(&mut self, index: usize) {
        self.mark_dirty(index);
    }

    /// Ends a connection for the handler at once; the slot follows when the kernel is done.
    fn joint_expired(&mut self, index: usize) {
        let Some(c) = self.slots.at(index).and_then(|slot| slot.conn.as_mut()) else {
            return;
        };
        let partner = c.join.as_ref().map(|joining| joining.partner);
        let partner_fd = partner
            .and_then(|p| self.slots.get_mut(p))
            .and_then(|slot| slot.conn.as_ref())
            .map(|p| p.link.fd.as_raw_fd());
        let c = self.slots[index].conn.as_mut().expect("live connection");
        let client_fd = c.link.fd.as_raw_fd();
        let idle = match (c.join.as_ref(), partner_fd) {
            (Some(joining), Some(fd)) => joining.joint.as_ref().and_then(|joint| {
                joint
                    .carried_idle(client_fd, fd)
                    .map(|quiet| (quiet, joint.idle))
            }),
            _ => None,
        };
        match idle {
            Some((quiet, limit)) if quiet < limit => {
                c.link.deadline = Some(self.core.now + (limit - quiet));
                self.mark_dirty(index);
            }
            _ => self.close(index, CloseReason::Done),
        }
    }

    fn close(&mut self, index: usize, reason: CloseReason) {
        let generation = self.slots.generation(index);
        let Some(slot) = self.slots.at(index) else {
            return;
        };
        let Some(mut c) = slot.conn.take() else {
            return;
        };
        // A send still in flight is counted as not sent: it is being cancelled.
        let reason = connection::closing(&mut self.handler, &mut c.conn, &c.link, reason);
        if c.recv_armed && !c.recv_cancelled {
            self.sqes.push(cancel(token(Op::Recv, index, generation)));
        }
        match c.sending {
            Sending::Idle => {}
            Sending::Msg => {
                self.sqes.push(cancel(token(Op::Send, index, generation)));
                slot.retired_output = Some(std::mem::take(&mut c.link.output));
            }
            Sending::Poll => {
                self.sqes.push(cancel(token(Op::Poll, index, generation)));
            }
        }
        c.link.release(&mut self.core);
        let departure = c.link.departure();
        let counted = c.link.counted;
        slot.retired_fd = Some(c.link.fd);
        if slot.in_flight == 0 {
            self.free_slot(index);
        }
        self.end_close(
            Token::new(index, generation),
            departure,
            c.conn,
            reason,
            counted,
        );
    }

    fn call_later(&mut self, index: usize) {
        if let Some((_, _, c)) = live(&mut self.slots, index) {
            c.ready_pending = true;
        }
    }

    fn watch_listeners_again(&mut self) -> bool {
        true
    }

    fn accept_all(&mut self) {
        for i in 0..self.listeners.len() {
            self.arm_accept(i);
        }
    }

    fn open_outgoing(&mut self, outgoing: Outgoing) {
        self.open_with(*outgoing.link, outgoing.opened, outgoing.token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_round_trip_through_user_data() {
        for op in [Op::Accept, Op::Recv, Op::Send, Op::Poll, Op::Cancel] {
            assert_eq!(untoken(token(op, 12345, 7)), (Some(op), 12345, 7));
        }
    }
}
