//! Where outgoing connections go, and how their connects start.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

use fastpath_sys::{setsockopt_int, syscall};

/// Where an outgoing connection goes: a backend, a destination.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum UpstreamAddr {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix stream socket path.
    Unix(PathBuf),
}

impl From<SocketAddr> for UpstreamAddr {
    fn from(addr: SocketAddr) -> Self {
        UpstreamAddr::Tcp(addr)
    }
}

/// Starts a non-blocking connect; true when it completed at once.
pub(crate) fn start_connect(addr: &UpstreamAddr) -> io::Result<(OwnedFd, bool)> {
    let (domain, storage) = match addr {
        UpstreamAddr::Tcp(sa) => {
            let domain = if sa.is_ipv4() {
                libc::AF_INET
            } else {
                libc::AF_INET6
            };
            (domain, socket2::SockAddr::from(*sa))
        }
        UpstreamAddr::Unix(path) => (libc::AF_UNIX, socket2::SockAddr::unix(path)?),
    };
    let fd = syscall!(socket(
        domain,
        libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        0
    ))?;
    // SAFETY: a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    if domain != libc::AF_UNIX {
        setsockopt_int(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)?;
    }
    match syscall!(connect(
        fd.as_raw_fd(),
        storage.as_ptr() as *const _,
        storage.len()
    )) {
        Ok(_) => Ok((fd, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok((fd, false)),
        // A Unix socket whose backlog is full says EAGAIN: the backend is overloaded.
        Err(e) => Err(e),
    }
}
