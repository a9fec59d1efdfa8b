//! The few system calls the load generator makes, each wrapped once so call sites get
//! `io::Result`: epoll, non-blocking TCP sockets, and process CPU time.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{IntoRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use fastpath_sys::syscall;

/// Readiness a connection is registered for, once, when its socket is created. Edge
/// triggered, so the hot path never calls `epoll_ctl` again: reads run until a short read,
/// and writes wait for an edge only after the kernel said EAGAIN.
pub(crate) const CONN_EVENTS: u32 =
    (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;

/// An epoll instance.
pub(crate) struct Epoll {
    fd: RawFd,
    /// `epoll_pwait2` (nanosecond timeouts) works; if not, fall back to `epoll_wait`.
    precise: bool,
}

impl Epoll {
    pub(crate) fn new() -> io::Result<Epoll> {
        let fd = syscall!(epoll_create1(libc::EPOLL_CLOEXEC))?;
        Ok(Epoll { fd, precise: true })
    }

    pub(crate) fn add(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        syscall!(epoll_ctl(self.fd, libc::EPOLL_CTL_ADD, fd, &mut ev)).map(|_| ())
    }

    /// Waits for events; `None` waits forever. Open-loop schedules need sub-millisecond
    /// wake-ups, hence `epoll_pwait2`; kernels before 5.11 get `epoll_wait`, rounded up to
    /// whole milliseconds (late sends are still measured from their intended time).
    pub(crate) fn wait(
        &mut self,
        events: &mut [libc::epoll_event],
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let max = events.len() as i32;
        if self.precise {
            let ts = timeout.map(|t| libc::timespec {
                tv_sec: t.as_secs() as libc::time_t,
                tv_nsec: t.subsec_nanos() as libc::c_long,
            });
            let ts_ptr = ts
                .as_ref()
                .map_or(std::ptr::null(), |t| t as *const libc::timespec);
            match syscall!(epoll_pwait2(
                self.fd,
                events.as_mut_ptr(),
                max,
                ts_ptr,
                std::ptr::null()
            )) {
                Ok(n) => return Ok(n as usize),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => return Ok(0),
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => self.precise = false,
                Err(e) => return Err(e),
            }
        }
        let ms = match timeout {
            None => -1,
            Some(t) => t.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32,
        };
        match syscall!(epoll_wait(self.fd, events.as_mut_ptr(), max, ms)) {
            Ok(n) => Ok(n as usize),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(0),
            Err(e) => Err(e),
        }
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        close(self.fd);
    }
}

/// Creates a non-blocking TCP socket with TCP_NODELAY and starts connecting it.
/// Returns the descriptor and whether the connection is already established.
pub(crate) fn start_connect(addr: &SockAddr) -> io::Result<(RawFd, bool)> {
    let domain = if addr.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let socket = Socket::new(
        domain,
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?;
    // Requests are small and written whole; Nagle would only delay them.
    socket.set_tcp_nodelay(true)?;
    let connected = match socket.connect(addr) {
        Ok(()) => true,
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => false,
        Err(e) => return Err(e),
    };
    Ok((socket.into_raw_fd(), connected))
}

/// The socket address for `addr`, converted once per run.
pub(crate) fn sock_addr(addr: SocketAddr) -> SockAddr {
    SockAddr::from(addr)
}

/// The pending error of a socket (SO_ERROR), 0 if none.
pub(crate) fn socket_error(fd: RawFd) -> i32 {
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    match syscall!(getsockopt(
        fd,
        libc::SOL_SOCKET,
        libc::SO_ERROR,
        &mut err as *mut libc::c_int as *mut libc::c_void,
        &mut len
    )) {
        Ok(_) => err,
        Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
    }
}

/// Sends without raising SIGPIPE: a peer that went away must give EPIPE, counted as a reset.
pub(crate) fn send(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    syscall!(send(
        fd,
        buf.as_ptr() as *const libc::c_void,
        buf.len(),
        libc::MSG_NOSIGNAL
    ))
    .map(|n| n as usize)
}

pub(crate) fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    syscall!(read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len())).map(|n| n as usize)
}

pub(crate) fn close(fd: RawFd) {
    // Nothing useful can be done about a failed close of a socket we are done with.
    unsafe {
        libc::close(fd);
    }
}

/// Asks for timer wake-ups on time (1 ns of slack instead of the default 50 µs): an
/// open-loop schedule measures latency from when requests were due, so a late wake-up
/// would be charged to the server.
pub(crate) fn tight_timer_slack() {
    // Best effort: the default slack only makes sends a little late.
    let _ = syscall!(prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0));
}

/// CPU time of the calling thread.
pub(crate) fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    if syscall!(clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts)).is_err() {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Raises the soft limit on open descriptors to the hard limit, as httperf does: every
/// connection is a descriptor, and open-loop overload needs many.
pub fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    if syscall!(getrlimit(libc::RLIMIT_NOFILE, &mut lim)).is_ok() && lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // Best effort: without it, running out shows up as fd-unavail errors.
        let _ = syscall!(setrlimit(libc::RLIMIT_NOFILE, &lim));
    }
}

/// CPUs this process may run on: the affinity mask (so `taskset -c 1` gives 1), which is
/// what `available_parallelism` reads on Linux.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Set by the first SIGINT: the run ends early and reports what it measured.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_signal: libc::c_int) {
    // Only async-signal-safe work: a store, and giving SIGINT back its default so a
    // second Ctrl-C ends the process at once.
    INTERRUPTED.store(true, Ordering::SeqCst);
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
    }
}

/// Makes SIGINT (Ctrl-C) end the run early instead of the process; returns the flag.
pub fn stop_on_interrupt() -> &'static AtomicBool {
    let handler = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
    unsafe {
        libc::signal(libc::SIGINT, handler);
    }
    &INTERRUPTED
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process on the machine, so a
/// timestamp written by the generator can be read by a sink in another process.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // CLOCK_MONOTONIC cannot fail on Linux; a zero timestamp would only spoil a latency.
    let _ = syscall!(clock_gettime(libc::CLOCK_MONOTONIC, &mut ts));
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Makes SIGINT and SIGTERM end a run that has no end of its own (the standalone sinks),
/// so it prints what it counted; returns the flag they set.
pub fn stop_on_terminate() -> &'static AtomicBool {
    let handler = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
    &INTERRUPTED
}
