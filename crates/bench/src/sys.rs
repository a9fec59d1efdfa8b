//! The few system calls the load generator makes beyond fastpath-sys's, each wrapped once so
//! call sites get `io::Result`: non-blocking TCP sockets, clocks, limits and signals.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{IntoRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fastpath_sys::{getsockopt_int, syscall};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// Readiness a connection is registered for, once, when its socket is created. Edge
/// triggered, so the hot path never calls `epoll_ctl` again: reads run until a short read,
/// and writes wait for an edge only after the kernel said EAGAIN.
pub(crate) const CONN_EVENTS: u32 =
    (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;

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
    match getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ERROR) {
        Ok(err) => err,
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

/// [`send`] of several buffers in one call (sendmsg, which takes MSG_NOSIGNAL where writev
/// cannot).
pub(crate) fn send_vectored(fd: RawFd, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // IoSlice is guaranteed ABI-compatible with iovec on Unix.
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len().min(libc::UIO_MAXIOV as usize) as _;
    syscall!(sendmsg(fd, &msg, libc::MSG_NOSIGNAL)).map(|n| n as usize)
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
