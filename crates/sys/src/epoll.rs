//! An epoll instance: registration by descriptor with an event mask and a `u64` token, and
//! waits that treat an interrupted wait as an empty one.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::syscall;

/// Whether `epoll_pwait2` answered ENOSYS once (a kernel before 5.11): it will every time,
/// for every instance, so later precise waits go straight to `epoll_wait`.
static PWAIT2_MISSING: AtomicBool = AtomicBool::new(false);

/// An epoll instance, closed on drop. Its descriptor is close-on-exec.
///
/// Descriptors are registered by their raw number: the kernel checks it, and a registration
/// ends when the last descriptor of the open file is closed, or with [`Epoll::delete`].
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

/// One readiness report: the events that happened and the token the descriptor was
/// registered with. The same layout as the kernel's `struct epoll_event`, so a slice of them
/// is what `epoll_wait` fills.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct Event(libc::epoll_event);

impl Event {
    /// An event mask and a token, as registered.
    pub const fn new(events: u32, token: u64) -> Event {
        Event(libc::epoll_event { events, u64: token })
    }

    /// The token the descriptor was registered with.
    pub fn token(&self) -> u64 {
        self.0.u64
    }

    /// What happened: `EPOLLIN`, `EPOLLOUT`, `EPOLLRDHUP`, `EPOLLHUP`, `EPOLLERR`...
    pub fn events(&self) -> u32 {
        self.0.events
    }
}

impl Default for Event {
    /// Nothing happened, token 0: what a slice to wait into starts as.
    fn default() -> Event {
        Event::new(0, 0)
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("events", &format_args!("{:#x}", self.events()))
            .field("token", &self.token())
            .finish()
    }
}

impl Epoll {
    /// Makes an epoll instance (`epoll_create1(EPOLL_CLOEXEC)`).
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: no pointers; a flag the kernel checks.
        let fd = syscall!(epoll_create1(libc::EPOLL_CLOEXEC))?;
        // SAFETY: epoll_create1 returned a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Epoll { fd })
    }

    /// Registers `fd` for `events` (`EPOLLIN`, `EPOLLET`, ... as a mask), reported with `token`.
    pub fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    /// Changes the events and token of a registered `fd`.
    pub fn modify(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    /// Takes `fd` out of the set.
    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        // Kernels before 2.6.9 wanted an event even here; one costs nothing.
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    fn ctl(&self, op: i32, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut event = libc::epoll_event { events, u64: token };
        // SAFETY: `event` is a valid epoll_event, read by the kernel during the call only.
        syscall!(epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut event)).map(|_| ())
    }

    /// Waits at most `timeout_ms` milliseconds (0: do not wait, -1: no limit) for events,
    /// filling the start of `events`; returns how many. A wait interrupted by a signal is an
    /// empty one: the caller's loop looks at its flags and waits again.
    pub fn wait(&self, events: &mut [Event], timeout_ms: i32) -> io::Result<usize> {
        let max = events.len().min(i32::MAX as usize) as i32;
        // SAFETY: Event is a transparent epoll_event, and the kernel writes at most `max` of
        // them into the slice.
        let waited = syscall!(epoll_wait(
            self.fd.as_raw_fd(),
            events.as_mut_ptr().cast::<libc::epoll_event>(),
            max,
            timeout_ms
        ));
        interrupted_is_empty(waited)
    }

    /// [`Epoll::wait`] with a timeout to the nanosecond (`None`: no limit), for schedules
    /// that need sub-millisecond wake-ups. Uses `epoll_pwait2` (Linux 5.11); older kernels get
    /// `epoll_wait` with the timeout rounded up to whole milliseconds.
    pub fn wait_precise(
        &self,
        events: &mut [Event],
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let max = events.len().min(i32::MAX as usize) as i32;
        if !PWAIT2_MISSING.load(Ordering::Relaxed) {
            let ts = timeout.map(|t| libc::timespec {
                tv_sec: t.as_secs() as libc::time_t,
                tv_nsec: t.subsec_nanos() as libc::c_long,
            });
            let ts_ptr = ts
                .as_ref()
                .map_or(std::ptr::null(), |t| t as *const libc::timespec);
            // SAFETY: as in `wait`; `ts_ptr` is null or points at `ts`, alive for the call;
            // a null signal mask leaves the thread's as it is.
            let waited = syscall!(epoll_pwait2(
                self.fd.as_raw_fd(),
                events.as_mut_ptr().cast::<libc::epoll_event>(),
                max,
                ts_ptr,
                std::ptr::null()
            ));
            match waited {
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                    PWAIT2_MISSING.store(true, Ordering::Relaxed);
                }
                waited => return interrupted_is_empty(waited),
            }
        }
        let ms = match timeout {
            None => -1,
            Some(t) => t.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32,
        };
        self.wait(events, ms)
    }
}

/// The count of a wait, none if a signal interrupted it.
fn interrupted_is_empty(waited: io::Result<i32>) -> io::Result<usize> {
    match waited {
        Ok(n) => Ok(n as usize),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        Err(e) => Err(e),
    }
}

impl AsRawFd for Epoll {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for Epoll {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::time::Instant;

    const IN: u32 = libc::EPOLLIN as u32;
    const OUT: u32 = libc::EPOLLOUT as u32;

    #[test]
    fn reports_readiness_with_the_token() {
        let (mut ours, mut theirs) = UnixStream::pair().unwrap();
        let epoll = Epoll::new().unwrap();
        epoll.add(theirs.as_raw_fd(), IN, 42).unwrap();
        let mut events = [Event::default(); 8];
        assert_eq!(epoll.wait(&mut events, 0).unwrap(), 0, "nothing sent yet");

        ours.write_all(b"hello").unwrap();
        let n = epoll.wait(&mut events, 1000).unwrap();
        assert_eq!(n, 1);
        assert_eq!(events[0].token(), 42);
        assert_ne!(events[0].events() & IN, 0);

        // Level-triggered: still readable until read.
        assert_eq!(epoll.wait(&mut events, 0).unwrap(), 1);
        let mut buf = [0u8; 5];
        theirs.read_exact(&mut buf).unwrap();
        assert_eq!(epoll.wait(&mut events, 0).unwrap(), 0);
    }

    #[test]
    fn modify_changes_events_and_token_and_delete_removes() {
        let (_ours, theirs) = UnixStream::pair().unwrap();
        let epoll = Epoll::new().unwrap();
        let fd = theirs.as_raw_fd();
        epoll.add(fd, IN, 1).unwrap();
        let mut events = [Event::default(); 8];
        assert_eq!(epoll.wait(&mut events, 0).unwrap(), 0);

        // An empty socket buffer has room: writable at once.
        epoll.modify(fd, IN | OUT, 2).unwrap();
        assert_eq!(epoll.wait(&mut events, 0).unwrap(), 1);
        assert_eq!(events[0].token(), 2);
        assert_eq!(events[0].events() & (IN | OUT), OUT);

        epoll.delete(fd).unwrap();
        assert_eq!(epoll.wait(&mut events, 0).unwrap(), 0);
        let gone = epoll.modify(fd, IN, 3).unwrap_err();
        assert_eq!(gone.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn errors_come_back_as_io_errors() {
        let epoll = Epoll::new().unwrap();
        let (ours, _theirs) = UnixStream::pair().unwrap();
        epoll.add(ours.as_raw_fd(), IN, 0).unwrap();
        let twice = epoll.add(ours.as_raw_fd(), IN, 0).unwrap_err();
        assert_eq!(twice.raw_os_error(), Some(libc::EEXIST));
        let closed = epoll.add(-1, IN, 0).unwrap_err();
        assert_eq!(closed.raw_os_error(), Some(libc::EBADF));
    }

    #[test]
    fn is_close_on_exec() {
        let epoll = Epoll::new().unwrap();
        // SAFETY: F_GETFD takes no argument beyond the descriptor.
        let flags = syscall!(fcntl(epoll.as_raw_fd(), libc::F_GETFD)).unwrap();
        assert_ne!(flags & libc::FD_CLOEXEC, 0);
    }

    #[test]
    fn precise_wait_times_out_and_reports() {
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        let epoll = Epoll::new().unwrap();
        epoll.add(theirs.as_raw_fd(), IN, 9).unwrap();
        let mut events = [Event::default(); 2];
        let start = Instant::now();
        let wait = Duration::from_micros(1500);
        assert_eq!(epoll.wait_precise(&mut events, Some(wait)).unwrap(), 0);
        assert!(start.elapsed() >= wait);

        ours.write_all(b"x").unwrap();
        assert_eq!(epoll.wait_precise(&mut events, None).unwrap(), 1);
        assert_eq!(events[0].token(), 9);
    }

    #[test]
    fn an_event_is_the_kernels_layout() {
        assert_eq!(
            std::mem::size_of::<Event>(),
            std::mem::size_of::<libc::epoll_event>()
        );
        let event = Event::new(OUT, u64::MAX - 1);
        assert_eq!((event.events(), event.token()), (OUT, u64::MAX - 1));
    }
}
