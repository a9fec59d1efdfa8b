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
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::sys::syscall;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pumped {
    /// Some bytes (or an end of stream) moved.
    pub(crate) moved: bool,
    /// The upstream has ended and everything it sent has been passed to the client: the
    /// joint is done. The client's end of stream alone is only passed on (a client may
    /// half-close after its request and still wait for the answer).
    pub(crate) finished: bool,
}

/// Which side failed, for the close reason.
#[derive(Debug)]
pub(crate) enum PumpError {
    Client(io::Error),
    Upstream(io::Error),
}

/// Two sockets joined in the kernel.
pub(crate) struct Joint {
    to_upstream: Direction,
    to_client: Direction,
    /// The joint ends when nothing moves for this long.
    pub(crate) idle: Duration,
}

impl Joint {
    pub(crate) fn new(idle: Duration) -> io::Result<Joint> {
        Ok(Joint {
            to_upstream: Direction::new(None, true)?,
            to_client: Direction::new(None, true)?,
            idle,
        })
    }

    /// Moves what can move in both directions. `client_first` and `upstream_first` say
    /// whether bytes queued in user space before the join are still unsent towards that side,
    /// in which case nothing may overtake them yet.
    pub(crate) fn pump(
        &mut self,
        client: Side<'_>,
        upstream: Side<'_>,
        client_output_pending: bool,
        upstream_output_pending: bool,
    ) -> Result<Pumped, PumpError> {
        let mut moved = false;
        if !upstream_output_pending {
            moved |= pump(
                &mut self.to_upstream,
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
                &mut self.to_client,
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
            finished: self.to_client.shut,
        })
    }
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
