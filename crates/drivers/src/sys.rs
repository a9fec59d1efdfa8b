//! Thin wrappers over the system calls the drivers use, each returning `io::Result`.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Calls a libc function and turns a `-1` return into `io::Error::last_os_error()`, so every
/// call site gets an `io::Result`. Exported for the other crates of fastpath that make system
/// calls of their own (the load generator), so the wrapper is written once.
///
/// The arguments go to the C function unchecked: pointers and lengths must be valid for it,
/// as for any call into libc. That is the caller's to uphold, which is why the macro is only
/// for fastpath's own crates.
///
/// ```
/// let pid = fastpath_drivers::syscall!(getpid()).unwrap();
/// assert!(pid > 0);
/// ```
#[macro_export]
macro_rules! syscall {
    ($fn: ident ( $($arg: expr),* $(,)* ) ) => {{
        #[allow(unused_unsafe)]
        let res = unsafe { $crate::__libc::$fn($($arg, )*) };
        if res == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(res)
        }
    }};
}
pub(crate) use syscall;

/// Makes an epoll instance.
pub(crate) fn epoll_create() -> io::Result<OwnedFd> {
    let epfd = syscall!(epoll_create1(libc::EPOLL_CLOEXEC))?;
    // SAFETY: epoll_create1 returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(epfd) })
}

/// Adds `fd` to an epoll instance for `events`, tagged with `token`.
pub(crate) fn epoll_add(epoll: &OwnedFd, fd: RawFd, events: i32, token: u64) -> io::Result<()> {
    let mut event = libc::epoll_event {
        events: events as u32,
        u64: token,
    };
    syscall!(epoll_ctl(
        epoll.as_raw_fd(),
        libc::EPOLL_CTL_ADD,
        fd,
        &mut event
    ))
    .map(|_| ())
}

/// Waits for events for at most `timeout_ms` (0: do not wait); an interrupted wait is an
/// empty one.
pub(crate) fn epoll_wait(
    epoll: &OwnedFd,
    events: &mut [libc::epoll_event],
    timeout_ms: i32,
) -> io::Result<usize> {
    match syscall!(epoll_wait(
        epoll.as_raw_fd(),
        events.as_mut_ptr(),
        events.len() as i32,
        timeout_ms
    )) {
        Ok(n) => Ok(n as usize),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        Err(e) => Err(e),
    }
}

/// Accepts a connection from a listener, non-blocking and close-on-exec itself, with the
/// peer's address when the kernel gives a usable one.
pub(crate) fn accept(listener: RawFd) -> io::Result<(OwnedFd, Option<SocketAddr>)> {
    // SAFETY: all-zero is a valid sockaddr_storage, filled in by the kernel.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let fd = syscall!(accept4(
        listener,
        &mut storage as *mut _ as *mut libc::sockaddr,
        &mut len,
        libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC
    ))?;
    // SAFETY: accept4 returned a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok((fd, socket_addr(&storage)))
}

/// Sets an integer socket option.
pub(crate) fn setsockopt_int(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    syscall!(setsockopt(
        fd,
        level,
        name,
        &value as *const i32 as *const libc::c_void,
        std::mem::size_of::<i32>() as libc::socklen_t
    ))
    .map(|_| ())
}

/// Reads into the spare capacity of `buf`, at most `max` bytes; returns the count (0 = end of stream).
pub(crate) fn read_into(fd: RawFd, buf: &mut Vec<u8>, max: usize) -> io::Result<usize> {
    buf.reserve(max);
    let spare = buf.capacity() - buf.len();
    let want = spare.min(max);
    let n = syscall!(read(
        fd,
        buf.as_mut_ptr().add(buf.len()) as *mut libc::c_void,
        want
    ))? as usize;
    // SAFETY: the kernel initialised `n` bytes past the old length.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// Turns a connection away at the limit: drain what it sent (so closing does not reset the
/// refusal away), send the refusal, close.
pub(crate) fn refuse(fd: RawFd, refusal: &[u8]) {
    let mut scratch = [0u8; 4096];
    let _ = syscall!(recv(
        fd,
        scratch.as_mut_ptr() as *mut libc::c_void,
        scratch.len(),
        libc::MSG_DONTWAIT
    ));
    if !refusal.is_empty() {
        let _ = syscall!(send(
            fd,
            refusal.as_ptr() as *const libc::c_void,
            refusal.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL
        ));
    }
    let _ = syscall!(shutdown(fd, libc::SHUT_WR));
}

/// The address of a connected socket's peer.
pub(crate) fn peer_addr(fd: RawFd) -> Option<SocketAddr> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    syscall!(getpeername(
        fd,
        &mut storage as *mut _ as *mut libc::sockaddr,
        &mut len
    ))
    .ok()?;
    socket_addr(&storage)
}

/// Reads an IPv4 or IPv6 address the kernel filled in; `None` for other families.
pub(crate) fn socket_addr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match storage.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in.
            let sin = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let sin6 = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Ignores SIGPIPE process-wide: a peer that goes away must give EPIPE, not kill the server
/// (sendfile has no MSG_NOSIGNAL).
pub fn ignore_sigpipe() {
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}
