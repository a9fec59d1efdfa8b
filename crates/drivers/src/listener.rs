//! Listening sockets: one per worker and address, bound with SO_REUSEPORT so the kernel spreads
//! connections over the workers and no accept lock is shared.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};

use socket2::{Domain, Protocol, Socket, Type};

use crate::sys::setsockopt_int;

/// Listen backlog: the kernel caps it at net.core.somaxconn anyway.
pub const LISTEN_BACKLOG: i32 = 4096;
/// Seconds TCP_DEFER_ACCEPT waits for the first request bytes before waking the server anyway.
/// Short, so a client that connects and waits to be spoken to is not kept waiting long.
pub const DEFER_ACCEPT_SECS: i32 = 1;

/// Kernel features found while binding, reported once in the log by the caller.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListenerFeatures {
    /// TCP_DEFER_ACCEPT was accepted: connections wake us only once a request has arrived.
    pub defer_accept: bool,
}

/// The bound listeners: `per_worker[w]` holds worker `w`'s socket for every address.
pub struct Listeners {
    /// Sockets per worker, in the order of `local_addrs`.
    pub per_worker: Vec<Vec<OwnedFd>>,
    /// The addresses actually bound (an ephemeral port 0 resolved).
    pub local_addrs: Vec<SocketAddr>,
    /// What the kernel supported.
    pub features: ListenerFeatures,
}

/// Binds `workers` SO_REUSEPORT sockets on each address. Port 0 is resolved by the first
/// socket and reused by the others, so all workers share one ephemeral port.
pub fn bind_listeners(addrs: &[SocketAddr], workers: usize) -> io::Result<Listeners> {
    let workers = workers.max(1);
    let mut per_worker: Vec<Vec<OwnedFd>> = (0..workers).map(|_| Vec::new()).collect();
    let mut local_addrs = Vec::with_capacity(addrs.len());
    let mut features = ListenerFeatures { defer_accept: true };
    for addr in addrs {
        let mut bound = *addr;
        for sockets in per_worker.iter_mut() {
            let (socket, defer) = bind_one(bound)?;
            features.defer_accept &= defer;
            if bound.port() == 0 {
                bound = socket
                    .local_addr()?
                    .as_socket()
                    .ok_or_else(|| io::Error::other("listener has no inet address"))?;
            }
            sockets.push(socket.into());
        }
        local_addrs.push(bound);
    }
    Ok(Listeners {
        per_worker,
        local_addrs,
        features,
    })
}

fn bind_one(addr: SocketAddr) -> io::Result<(Socket, bool)> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.set_cloexec(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    // Accepted sockets inherit TCP_NODELAY from the listener on Linux, which saves a
    // setsockopt per connection; responses are written whole, so Nagle only adds delay.
    socket.set_tcp_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    let defer = setsockopt_int(
        socket.as_raw_fd(),
        libc::IPPROTO_TCP,
        libc::TCP_DEFER_ACCEPT,
        DEFER_ACCEPT_SECS,
    )
    .is_ok();
    Ok((socket, defer))
}
