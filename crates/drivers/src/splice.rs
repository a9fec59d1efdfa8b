//! Joining two sockets in the kernel: each direction moves through a pipe with splice(2), so
//! the bytes of a bridged connection never enter user space.
//!
//! A [`Joint`] holds one pipe per direction. Pumping a direction moves what the pipe holds to
//! the destination, then refills the pipe from the source, until neither can make progress;
//! when the source has ended and the pipe is empty, the destination's sending side is shut
//! down, so each side's end of stream reaches the other. The joint is finished when the
//! upstream's end has reached the client, as with a proxy that does not wait for half-closed
//! clients: a client that half-closes after its request still gets the whole answer.
//!
//! The sockets are non-blocking and edge-triggered, so "cannot make progress" must be exact:
//! a splice into a pipe can also fail with EAGAIN because the pipe has no free slot (a
//! socket's data may take one slot per packet), so a source counts as drained only when it
//! says EAGAIN to an empty pipe.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use fastpath_sys::{send_queue, syscall, tcp_info, unread, TCP_ESTABLISHED};

/// One pipe and what it holds.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Bytes in the pipe.
    len: usize,
    /// The pipe's capacity.
    capacity: usize,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let mut fds = [0; 2];
        syscall!(pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC))?;
        // SAFETY: pipe2 returned two fresh descriptors that nothing else owns.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let capacity = syscall!(fcntl(write.as_raw_fd(), libc::F_GETPIPE_SZ))
            .map_or(64 * 1024, |n| n as usize);
        Ok(Pipe {
            read,
            write,
            len: 0,
            capacity,
        })
    }
}

/// One direction: a source, a pipe and a destination.
pub(crate) struct Direction {
    pipe: Pipe,
    /// Bytes still to take from the source; `None` for everything until its end.
    limit: Option<u64>,
    /// The source has ended (or the limit was reached).
    ended: bool,
    /// Shut the destination's sending side down once everything has moved.
    shut_on_end: bool,
    /// The destination's sending side has been shut down.
    shut: bool,
}

impl Direction {
    /// A direction that moves `limit` bytes (or everything, for `None`) and then, with
    /// `shut_on_end`, shuts the destination's sending side down.
    pub(crate) fn new(limit: Option<u64>, shut_on_end: bool) -> io::Result<Direction> {
        Ok(Direction {
            pipe: Pipe::new()?,
            limit,
            ended: limit == Some(0),
            shut_on_end,
            shut: false,
        })
    }

    /// Everything has moved: the source ended or gave its `limit`, and the pipe is empty.
    pub(crate) fn is_done(&self) -> bool {
        self.ended && self.pipe.len == 0
    }

    /// The source ended before giving its `limit`.
    pub(crate) fn fell_short(&self) -> bool {
        self.ended && self.limit.is_some_and(|n| n > 0)
    }

    /// Moves what can move from `from` to `to`; true when anything moved. An error says which
    /// side failed.
    pub(crate) fn pump(
        &mut self,
        from: RawFd,
        readable: &mut bool,
        to: RawFd,
        writable: &mut bool,
    ) -> Result<bool, Failure> {
        pump(self, from, readable, to, writable)
    }
}

/// Readiness of one socket, as the event loop tracks it.
pub(crate) struct Side<'a> {
    pub(crate) fd: RawFd,
    pub(crate) readable: &'a mut bool,
    pub(crate) writable: &'a mut bool,
}

/// What a pump achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Pumped {
    /// Some bytes (or an end of stream) moved.
    pub(crate) moved: bool,
    /// The upstream has ended and everything it sent has been passed to the client: the
    /// joint is done. The client's end of stream alone is only passed on (a client may
    /// half-close after its request and still wait for the answer).
    pub(crate) finished: bool,
    /// A carried joint waits for the kernel to send what a side sent before its end: pump
    /// again in [`CARRIED_RECHECK`].
    pub(crate) recheck: bool,
}

/// Which side failed, for the close reason.
#[derive(Debug)]
pub(crate) enum PumpError {
    Client(io::Error),
    Upstream(io::Error),
}

/// Something outside the engine that can move a joined connection's bytes itself, in place of
/// the pipes: the server's in-kernel bridge (a BPF sockmap). The engine hands it both sockets
/// once user space holds nothing for either and nothing waits unread in them, and goes on
/// watching the descriptors for the ends, resets and the idle time; the bytes it no longer
/// sees are counted by TCP_INFO (what a side received against what was written to the other).
///
/// A carrier may stop carrying one way (its destination does not read, and the carrier cannot
/// hold the source back): what the source sends from then on waits in its socket, readable
/// as usual, and the engine copies it, after the carrier's bytes, with the usual backpressure.
pub trait Carrier {
    /// Takes the two sockets over: from now on what arrives on either reaches the other
    /// without the engine. An error leaves the connection to the pipes.
    fn carry(&mut self, client: BorrowedFd<'_>, upstream: BorrowedFd<'_>) -> io::Result<()>;
    /// Whether the carrier stopped carrying what the client (`from_client`) or the upstream
    /// sends: then the bytes it carried that way, which must reach the destination first.
    fn stopped(&self, from_client: bool) -> Option<u64>;
    /// Lets go of both sockets; called once, when the joint ends, after everything carried
    /// has reached the destinations' send queues (or when the connection is failing anyway).
    fn release(&mut self);
}

/// How often a carried joint whose source has ended checks whether everything it sent has
/// reached the other side, so the end can follow.
pub(crate) const CARRIED_RECHECK: Duration = Duration::from_millis(1);

/// How often a carried joint looks at its sockets whatever happens: input on a socket the
/// carrier no longer carries wakes no loop (see [`Joint::ends_only`]) unless its destination
/// reported room, so this bounds how long such a leg can wait to be copied.
pub(crate) const CARRIED_CHECK: Duration = Duration::from_secs(1);

/// How a joint moves its bytes.
enum Way {
    /// Through a pipe each way.
    Pipes {
        to_upstream: Direction,
        to_client: Direction,
    },
    /// A carrier was offered; it takes over at the first quiet moment, else the pipes.
    Offered(Box<dyn Carrier>),
    /// The carrier moves the bytes.
    Carried(Box<Carried>),
    /// Only while [`Joint::offer`] decides.
    Deciding,
}

/// A joint the carrier moves, one leg each way.
struct Carried {
    carrier: Box<dyn Carrier>,
    /// From the client to the upstream.
    up: Leg,
    /// From the upstream to the client.
    down: Leg,
}

/// One way of a carried joint.
struct Leg {
    /// What the source had received when the carrier took over.
    received: u64,
    /// What the destination had been written then.
    written: u64,
    /// The source's end has been seen.
    ended: bool,
    /// The destination's sending side has been shut down.
    shut: bool,
    /// The carrier stopped carrying this way: user space copies.
    copy: Option<Box<Copy>>,
}

/// A leg user space copies: through `buf`, once the carrier's bytes have left.
struct Copy {
    /// Bytes the carrier moved this way before it stopped.
    carried: u64,
    /// The carrier's bytes have all reached the destination's send queue.
    flowing: bool,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes copied.
    copied: u64,
}

/// Bytes a copying leg holds at most: what it read and could not send yet.
const COPY_BUFFER: usize = 64 * 1024;

impl Drop for Carried {
    fn drop(&mut self) {
        self.carrier.release();
    }
}

/// Two sockets joined in the kernel.
pub(crate) struct Joint {
    way: Way,
    /// The joint ends when nothing moves for this long.
    pub(crate) idle: Duration,
}

impl Joint {
    /// A joint through pipes; with a `carrier`, through it if it can take the sockets.
    pub(crate) fn new(idle: Duration, carrier: Option<Box<dyn Carrier>>) -> io::Result<Joint> {
        let way = match carrier {
            Some(carrier) => Way::Offered(carrier),
            None => Way::Pipes {
                to_upstream: Direction::new(None, true)?,
                to_client: Direction::new(None, true)?,
            },
        };
        Ok(Joint { way, idle })
    }

    /// Only the sockets' ends and errors (and, where the loop can be told of it once, room on
    /// a socket that was full) matter now: the carrier moves every byte, so a loop need not be
    /// woken when bytes arrive (a socket in a sockmap still wakes its readers for every
    /// arrival). The loop then wakes the joint at least every [`CARRIED_CHECK`].
    pub(crate) fn ends_only(&self) -> bool {
        match &self.way {
            Way::Carried(c) => c.up.copy.is_none() && c.down.copy.is_none(),
            _ => false,
        }
    }

    /// For a carried joint, how long since either socket last received a byte (the engine
    /// sees none of them): its idle time. `None` for pipes, whose idle time the loop keeps.
    pub(crate) fn carried_idle(&self, client: RawFd, upstream: RawFd) -> Option<Duration> {
        match self.way {
            Way::Carried(_) => Some(since_last_input(client).min(since_last_input(upstream))),
            _ => None,
        }
    }

    /// Moves what can move in both directions. `client_first` and `upstream_first` say
    /// whether bytes queued in user space before the join are still unsent towards that side,
    /// in which case nothing may overtake them yet. `upstream_read`: user space has read from
    /// the upstream socket (so the socket's first unread skb may be one it read in part).
    pub(crate) fn pump(
        &mut self,
        client: Side<'_>,
        upstream: Side<'_>,
        client_output_pending: bool,
        upstream_output_pending: bool,
        upstream_read: bool,
    ) -> Result<Pumped, PumpError> {
        if let Way::Offered(_) = self.way {
            if client_output_pending || upstream_output_pending {
                return Ok(Pumped::default());
            }
            self.offer(client.fd, upstream.fd, upstream_read)
                .map_err(PumpError::Client)?;
        }
        match &mut self.way {
            Way::Pipes {
                to_upstream,
                to_client,
            } => {
                let mut moved = false;
                if !upstream_output_pending {
                    moved |= pump(
                        to_upstream,
                        client.fd,
                        client.readable,
                        upstream.fd,
                        upstream.writable,
                    )
                    .map_err(|e| match e {
                        Failure::Source(e) => PumpError::Client(e),
                        Failure::Destination(e) => PumpError::Upstream(e),
                    })?;
                }
                if !client_output_pending {
                    moved |= pump(
                        to_client,
                        upstream.fd,
                        upstream.readable,
                        client.fd,
                        client.writable,
                    )
                    .map_err(|e| match e {
                        Failure::Source(e) => PumpError::Upstream(e),
                        Failure::Destination(e) => PumpError::Client(e),
                    })?;
                }
                Ok(Pumped {
                    moved,
                    finished: to_client.shut,
                    recheck: false,
                })
            }
            Way::Carried(carried) => carried.pump(client, upstream),
            Way::Offered(_) | Way::Deciding => unreachable!("decided above"),
        }
    }

    /// Hands both sockets to the carrier if nothing waits unread in them, else (or if it
    /// refuses) makes the pipes.
    fn offer(&mut self, client: RawFd, upstream: RawFd, upstream_read: bool) -> io::Result<()> {
        let Way::Offered(mut carrier) = std::mem::replace(&mut self.way, Way::Deciding) else {
            return Ok(());
        };
        // The pipes, made only if the carrier does not take the sockets.
        let pipes = || -> io::Result<Way> {
            Ok(Way::Pipes {
                to_upstream: Direction::new(None, true)?,
                to_client: Direction::new(None, true)?,
            })
        };
        // Bytes user space never read are whole skbs, which the carrier may take; after a
        // read, only an empty socket proves no skb was read in part.
        let quiet =
            unread(client).ok() == Some(0) && (!upstream_read || unread(upstream).ok() == Some(0));
        if !quiet {
            tracing::debug!("joint: bytes wait unread; spliced instead");
            self.way = pipes()?;
            return Ok(());
        }
        // A side whose end has come already: the counts could not tell its FIN (see
        // `received_before_end`), and little is left to carry.
        if !established(client) || !established(upstream) {
            tracing::debug!("joint: a side has ended already; spliced instead");
            self.way = pipes()?;
            return Ok(());
        }
        let (client_received, upstream_received) =
            (bytes_received(client), bytes_received(upstream));
        // Exact counts: nothing writes to either socket now (user space holds nothing for them
        // and the carrier has not taken them yet).
        let (client_written, upstream_written) = (
            bytes_written_exactly(client),
            bytes_written_exactly(upstream),
        );
        let (
            Some(client_received),
            Some(upstream_received),
            Some(client_written),
            Some(upstream_written),
        ) = (
            client_received,
            upstream_received,
            client_written,
            upstream_written,
        )
        else {
            self.way = pipes()?;
            return Ok(());
        };
        // SAFETY: both descriptors are open for the duration of the call (the caller's).
        let (c, u) = unsafe {
            (
                BorrowedFd::borrow_raw(client),
                BorrowedFd::borrow_raw(upstream),
            )
        };
        match carrier.carry(c, u) {
            Ok(()) => {
                self.way = Way::Carried(Box::new(Carried {
                    carrier,
                    up: Leg::new(client_received, upstream_written),
                    down: Leg::new(upstream_received, client_written),
                }));
            }
            Err(e) => {
                tracing::debug!("joint: the carrier cannot take it ({e}); spliced instead");
                self.way = pipes()?;
            }
        }
        Ok(())
    }
}

impl Carried {
    /// Watches both sockets: an end is passed on once everything its side sent has reached
    /// the other's send queue; a leg the carrier stopped carrying is copied. A reset, or
    /// input the carrier did not give up, fails the joint and resets both sides, so each
    /// peer learns that bytes may be lost.
    fn pump(&mut self, client: Side<'_>, upstream: Side<'_>) -> Result<Pumped, PumpError> {
        let (cfd, ufd) = (client.fd, upstream.fd);
        let up = self
            .up
            .step(
                &*self.carrier,
                true,
                cfd,
                client.readable,
                ufd,
                upstream.writable,
            )
            .map_err(|e| match e {
                Failure::Source(e) => PumpError::Client(e),
                Failure::Destination(e) => PumpError::Upstream(e),
            });
        let down = up.and_then(|up| {
            self.down
                .step(
                    &*self.carrier,
                    false,
                    ufd,
                    upstream.readable,
                    cfd,
                    client.writable,
                )
                .map(|down| (up, down))
                .map_err(|e| match e {
                    Failure::Source(e) => PumpError::Upstream(e),
                    Failure::Destination(e) => PumpError::Client(e),
                })
        });
        match down {
            Ok(((up_moved, up_recheck), (down_moved, down_recheck))) => Ok(Pumped {
                moved: up_moved || down_moved,
                finished: self.down.shut,
                recheck: up_recheck || down_recheck,
            }),
            Err(e) => {
                abort(cfd, ufd);
                Err(e)
            }
        }
    }
}

impl Leg {
    fn new(received: u64, written: u64) -> Leg {
        Leg {
            received,
            written,
            ended: false,
            shut: false,
            copy: None,
        }
    }

    /// Moves this leg on: (moved, recheck).
    fn step(
        &mut self,
        carrier: &dyn Carrier,
        from_client: bool,
        from: RawFd,
        readable: &mut bool,
        to: RawFd,
        writable: &mut bool,
    ) -> Result<(bool, bool), Failure> {
        if self.shut {
            return Ok((false, false));
        }
        let mut moved = false;
        if self.copy.is_none() {
            // Looked at on every wake, whatever woke the loop: while the carrier moves the
            // bytes the loop is woken for the ends, for room on a destination that was full,
            // and by the periodic check (CARRIED_CHECK), and input may show on either socket
            // (a leg the carrier stopped).
            if !self.ended {
                match peek(from) {
                    Ok(0) => {
                        *readable = false;
                        self.ended = true;
                        moved = true;
                    }
                    Ok(_) => match carrier.stopped(from_client) {
                        Some(carried) => {
                            tracing::debug!(
                                "joint: the carrier stopped after {carried} bytes from the {}; \
                                 copying the rest",
                                if from_client { "client" } else { "upstream" }
                            );
                            self.copy = Some(Box::new(Copy {
                                carried,
                                flowing: false,
                                buf: vec![0; COPY_BUFFER],
                                start: 0,
                                end: 0,
                                copied: 0,
                            }));
                        }
                        None => {
                            return Err(Failure::Source(io::Error::other(
                                "input reached user space on a carried connection",
                            )))
                        }
                    },
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => *readable = false,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(Failure::Source(e)),
                }
            }
            if self.copy.is_none() {
                // The carrier writes: the engine never waits for room.
                *writable = true;
                if !self.ended {
                    return Ok((moved, false));
                }
                if drained(from, self.received, to, self.written) {
                    self.shut = true;
                    let _ = syscall!(shutdown(to, libc::SHUT_WR));
                    return Ok((true, false));
                }
                return Ok((moved, true));
            }
        }
        let copy = self.copy.as_mut().expect("copying");
        if !copy.flowing {
            // Nothing may overtake what the carrier still holds for the destination.
            match bytes_written(to) {
                Some(w) if w.saturating_sub(self.written) >= copy.carried => {
                    copy.flowing = true;
                    *writable = true;
                }
                Some(_) => return Ok((moved, true)),
                None => return Err(Failure::Destination(io::Error::last_os_error())),
            }
        }
        loop {
            if copy.start < copy.end {
                if !*writable {
                    break;
                }
                match syscall!(send(
                    to,
                    copy.buf[copy.start..].as_ptr().cast(),
                    copy.end - copy.start,
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT
                )) {
                    Ok(n) => {
                        copy.start += n as usize;
                        moved = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => *writable = false,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(Failure::Destination(e)),
                }
                continue;
            }
            if self.ended {
                // Bytes the source received may still be on their way to its queue: the end
                // follows only once every one has come through.
                let got = received_before_end(from, self.received).unwrap_or(0);
                if got > copy.carried + copy.copied {
                    self.ended = false;
                    *readable = true;
                    return Ok((moved, true));
                }
                self.shut = true;
                let _ = syscall!(shutdown(to, libc::SHUT_WR));
                return Ok((true, false));
            }
            if !*readable {
                break;
            }
            match syscall!(recv(
                from,
                copy.buf.as_mut_ptr().cast(),
                copy.buf.len(),
                libc::MSG_DONTWAIT
            )) {
                Ok(0) => {
                    self.ended = true;
                    *readable = false;
                }
                Ok(n) => {
                    copy.start = 0;
                    copy.end = n as usize;
                    copy.copied += n as u64;
                    moved = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => *readable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Failure::Source(e)),
            }
        }
        Ok((moved, false))
    }
}

/// Looks at a socket without taking anything: 0 at its end.
fn peek(fd: RawFd) -> io::Result<usize> {
    let mut byte = 0u8;
    syscall!(recv(
        fd,
        (&mut byte as *mut u8).cast(),
        1,
        libc::MSG_PEEK | libc::MSG_DONTWAIT
    ))
    .map(|n| n as usize)
}

/// Sets both sockets to be reset when closed.
fn abort(client: RawFd, upstream: RawFd) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    for fd in [client, upstream] {
        // SAFETY: SO_LINGER reads one struct linger.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            )
        };
    }
}

/// Bytes `fd` received since its count was `received`, once its end has come: TCP_INFO counts
/// the FIN as one more (it advances rcv_nxt), which no one sends on. A joint is carried only
/// while both sockets are established, so the FIN always came after `received`.
fn received_before_end(fd: RawFd, received: u64) -> Option<u64> {
    bytes_received(fd).map(|r| r.saturating_sub(received).saturating_sub(1))
}

/// Whether everything `from` received since `received`, up to its end, has been written to
/// `to` (whose count was `written` then): its end may follow.
fn drained(from: RawFd, received: u64, to: RawFd, written: u64) -> bool {
    match (received_before_end(from, received), bytes_written(to)) {
        (Some(r), Some(w)) => w.saturating_sub(written) >= r,
        // A socket that cannot say has failed; its error shows on the next look.
        _ => true,
    }
}

/// Whether `fd` is an established TCP connection (no FIN received or sent yet).
fn established(fd: RawFd) -> bool {
    tcp_info(fd).is_ok_and(|i| i.state == TCP_ESTABLISHED)
}

/// Bytes received on `fd` since it opened (with the FIN, once it came).
fn bytes_received(fd: RawFd) -> Option<u64> {
    tcp_info(fd).ok().map(|i| i.bytes_received)
}

/// Every byte ever written to `fd` (acknowledged, plus what waits in its send queue), or
/// fewer: the two counts come from two calls, and the acknowledgement count is read first, so
/// an acknowledgement arriving in between makes the sum fall short, never overshoot. What
/// waits for the kernel to finish writing may therefore only be judged later, never early.
fn bytes_written(fd: RawFd) -> Option<u64> {
    let info = tcp_info(fd).ok()?;
    let outq = send_queue(fd).ok()?;
    Some(info.bytes_acked + outq)
}

/// Every byte ever written to `fd`, exactly, while nothing writes to it: the send queue is
/// read on both sides of the acknowledgement count, and only a reading whose queue did not
/// change between (no acknowledgement arrived) is taken. A baseline that fell short would
/// make every later [`bytes_written`] overshoot, and a leg would copy (or end) before the
/// carrier's last bytes reached the destination: bytes out of order, or cut short.
fn bytes_written_exactly(fd: RawFd) -> Option<u64> {
    for _ in 0..64 {
        let before = send_queue(fd).ok()?;
        let info = tcp_info(fd).ok()?;
        if send_queue(fd).ok()? == before {
            return Some(info.bytes_acked + before);
        }
    }
    // Acknowledgements kept arriving: the caller splices instead.
    None
}

/// Time since data last arrived on `fd` (zero if it cannot say, so nothing is cut short).
fn since_last_input(fd: RawFd) -> Duration {
    tcp_info(fd).map_or(Duration::ZERO, |i| {
        Duration::from_millis(i.last_data_recv as u64)
    })
}

/// Which end of a direction failed.
pub(crate) enum Failure {
    Source(io::Error),
    Destination(io::Error),
}

fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    let flags = libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE;
    syscall!(splice(
        from,
        std::ptr::null_mut(),
        to,
        std::ptr::null_mut(),
        len,
        flags
    ))
    .map(|n| n as usize)
}

/// Moves one direction as far as it goes; true when anything moved.
fn pump(
    d: &mut Direction,
    from: RawFd,
    readable: &mut bool,
    to: RawFd,
    writable: &mut bool,
) -> Result<bool, Failure> {
    let mut moved_any = false;
    loop {
        let mut moved = false;
        if d.pipe.len > 0 && *writable {
            match splice(d.pipe.read.as_raw_fd(), to, d.pipe.len) {
                Ok(n) => {
                    d.pipe.len -= n;
                    moved = n > 0;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => *writable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Failure::Destination(e)),
            }
        }
        if !d.ended && *readable && d.pipe.len < d.pipe.capacity {
            let room = d.pipe.capacity - d.pipe.len;
            let want = d
                .limit
                .map_or(room, |left| room.min(left.min(usize::MAX as u64) as usize));
            match splice(from, d.pipe.write.as_raw_fd(), want) {
                Ok(0) => {
                    d.ended = true;
                    moved = true;
                }
                Ok(n) => {
                    d.pipe.len += n;
                    moved = true;
                    if let Some(left) = d.limit.as_mut() {
                        *left -= n as u64;
                        if *left == 0 {
                            d.ended = true;
                        }
                    }
                }
                // Only an empty pipe proves the socket is drained (see the module doc).
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if d.pipe.len == 0 {
                        *readable = false;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Failure::Source(e)),
            }
        }
        if !moved {
            break;
        }
        moved_any = true;
    }
    if d.shut_on_end && d.ended && d.pipe.len == 0 && !d.shut {
        d.shut = true;
        // The peer may be gone already; the other direction's errors will say so.
        let _ = syscall!(shutdown(to, libc::SHUT_WR));
    }
    Ok(moved_any)
}
