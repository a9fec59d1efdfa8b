//! Socket calls that socket2 has no cheap form of: accepting straight into a non-blocking
//! descriptor with the peer's address, and integer socket options by level and name.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use crate::syscall;

/// Accepts a connection from a listener, non-blocking and close-on-exec itself (`accept4`),
/// with the peer's address when the kernel gives an IPv4 or IPv6 one.
pub fn accept(listener: RawFd) -> io::Result<(OwnedFd, Option<SocketAddr>)> {
    // SAFETY: all-zero is a valid sockaddr_storage, filled in by the kernel.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes of address into `storage`.
    let fd = syscall!(accept4(
        listener,
        (&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr>(),
        &mut len,
        libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC
    ))?;
    // SAFETY: accept4 returned a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok((fd, socket_addr(&storage)))
}

/// The address of a connected socket's peer: `None` for a family other than IPv4 and IPv6
/// (a Unix-domain peer).
pub fn peer_addr(fd: RawFd) -> io::Result<Option<SocketAddr>> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes of address into `storage`.
    syscall!(getpeername(
        fd,
        (&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr>(),
        &mut len
    ))?;
    Ok(socket_addr(&storage))
}

/// Sets an integer socket option (`setsockopt` with an `int`), such as
/// `(SOL_SOCKET, SO_SNDBUF)` or `(IPPROTO_TCP, TCP_NODELAY)`.
pub fn setsockopt_int(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: the kernel reads one int from `value`, of the size passed.
    syscall!(setsockopt(
        fd,
        level,
        name,
        (&value as *const libc::c_int).cast::<libc::c_void>(),
        std::mem::size_of::<libc::c_int>() as libc::socklen_t
    ))
    .map(|_| ())
}

/// Reads an integer socket option (`getsockopt` into an `int`), such as
/// `(SOL_SOCKET, SO_ERROR)` or `(SOL_SOCKET, SO_TYPE)`.
pub fn getsockopt_int(fd: RawFd, level: i32, name: i32) -> io::Result<i32> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes, one int, into `value`.
    syscall!(getsockopt(
        fd,
        level,
        name,
        (&mut value as *mut libc::c_int).cast::<libc::c_void>(),
        &mut len
    ))?;
    Ok(value)
}

/// Reads an IPv4 or IPv6 address the kernel filled in; `None` for other families.
fn socket_addr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match storage.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in, and sockaddr_storage
            // is large and aligned enough for any address.
            let sin =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6 (as above).
            let sin6 = unsafe {
                &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn accept_gives_a_nonblocking_cloexec_socket_and_the_peer() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (fd, peer) = accept(listener.as_raw_fd()).unwrap();
        assert_eq!(peer, Some(client.local_addr().unwrap()));
        // SAFETY: F_GETFL and F_GETFD take no argument beyond the descriptor.
        let status = syscall!(fcntl(fd.as_raw_fd(), libc::F_GETFL)).unwrap();
        assert_ne!(status & libc::O_NONBLOCK, 0);
        // SAFETY: as above.
        let flags = syscall!(fcntl(fd.as_raw_fd(), libc::F_GETFD)).unwrap();
        assert_ne!(flags & libc::FD_CLOEXEC, 0);
        assert_eq!(
            peer_addr(fd.as_raw_fd()).unwrap(),
            Some(client.local_addr().unwrap())
        );
    }

    #[test]
    fn accept_with_nobody_waiting_would_block() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let err = accept(listener.as_raw_fd()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn peer_addr_of_a_unix_socket_is_none_and_of_a_listener_an_error() {
        let (ours, _theirs) = UnixStream::pair().unwrap();
        assert_eq!(peer_addr(ours.as_raw_fd()).unwrap(), None);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let err = peer_addr(listener.as_raw_fd()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN));
    }

    #[test]
    fn int_options_set_and_read_back() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let fd = stream.as_raw_fd();
        setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1).unwrap();
        assert_eq!(
            getsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY).unwrap(),
            1
        );
        assert_eq!(
            getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TYPE).unwrap(),
            libc::SOCK_STREAM
        );
        assert_eq!(
            getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ERROR).unwrap(),
            0
        );
        // The kernel doubles SO_SNDBUF for its bookkeeping.
        setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, 64 * 1024).unwrap();
        assert_eq!(
            getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF).unwrap(),
            128 * 1024
        );
        let err = setsockopt_int(-1, libc::SOL_SOCKET, libc::SO_SNDBUF, 1).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EBADF));
    }
}
