//! Listening sockets: one per worker and address, bound with SO_REUSEPORT so the kernel spreads
//! connections over the workers and no accept lock is shared; or sockets inherited from a
//! service manager (systemd socket activation), which every worker shares.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};

use socket2::{Domain, Protocol, Socket, Type};

use crate::sys::{setsockopt_int, syscall};

/// Listen backlog: the kernel caps it at net.core.somaxconn anyway.
pub const LISTEN_BACKLOG: i32 = 4096;
/// Seconds TCP_DEFER_ACCEPT waits for the first request bytes before waking the server anyway.
/// Short, so a client that connects and waits to be spoken to is not kept waiting long.
pub const DEFER_ACCEPT_SECS: i32 = 1;

/// Kernel features found while binding, reported once in the log by the caller.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListenerFeatures {
    /// TCP_DEFER_ACCEPT was accepted on every listener that asked for it: connections wake us
    /// only once a request has arrived.
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
    /// The sockets were inherited ([`Listeners::from_inherited`]): every worker holds a
    /// duplicate of the same socket, and the service manager may hold it too, so a graceful
    /// stop closes ours without shutting the socket down for everyone.
    pub inherited: bool,
}

/// How one listening address is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListenOptions {
    defer_accept: bool,
}

impl Default for ListenOptions {
    /// For protocols whose client speaks first (HTTP): with TCP_DEFER_ACCEPT.
    fn default() -> Self {
        ListenOptions { defer_accept: true }
    }
}

impl ListenOptions {
    /// Options for a protocol whose server speaks first (SMTP, FTP, a greeting): without
    /// TCP_DEFER_ACCEPT, which would hold every connection back until the client sends a
    /// byte, and so delay the greeting it waits for by the defer time.
    pub fn server_speaks_first() -> Self {
        ListenOptions {
            defer_accept: false,
        }
    }

    /// Whether connections are accepted only once the client has sent something (or after
    /// [`DEFER_ACCEPT_SECS`]), where the kernel supports it.
    pub fn defer_accept(&self) -> bool {
        self.defer_accept
    }
}

impl Listeners {
    /// Every worker's sockets in one list, for a model that accepts from all of them in one
    /// place (a thread pool, preforked children). Entry `i` listens on address
    /// `i % local_addrs.len()`.
    pub(crate) fn into_flat(self) -> Vec<OwnedFd> {
        self.per_worker.into_iter().flatten().collect()
    }

    /// Adopts listening sockets handed over by a service manager (systemd's `LISTEN_FDS`):
    /// `sockets` holds each descriptor with a label for messages (its number and name). Each
    /// must be a listening TCP stream socket; it is made non-blocking and close-on-exec, gets
    /// TCP_NODELAY as our own listeners do, and is otherwise left as the manager set it up
    /// (backlog, TCP_DEFER_ACCEPT: the socket unit's `DeferAcceptSec=`). SO_REUSEPORT cannot
    /// give each worker a socket of its own here, so every worker gets a duplicate of the one
    /// socket and accepts from it (the loops wait on it with EPOLLEXCLUSIVE where they can,
    /// so one new client wakes one worker, not all).
    pub fn from_inherited(
        sockets: Vec<(OwnedFd, String)>,
        workers: usize,
    ) -> io::Result<Listeners> {
        let workers = workers.max(1);
        let mut per_worker: Vec<Vec<OwnedFd>> = (0..workers).map(|_| Vec::new()).collect();
        let mut local_addrs = Vec::with_capacity(sockets.len());
        for (fd, label) in sockets {
            let addr = adopt(&fd).map_err(|e| io::Error::new(e.kind(), format!("{label}: {e}")))?;
            for sockets in per_worker.iter_mut().skip(1) {
                sockets.push(fd.try_clone()?);
            }
            per_worker[0].push(fd);
            local_addrs.push(addr);
        }
        Ok(Listeners {
            per_worker,
            local_addrs,
            features: ListenerFeatures { defer_accept: true },
            inherited: true,
        })
    }
}

/// Checks that an inherited descriptor is a listening TCP socket and readies it: the error says
/// what it is instead, and what to change in the socket unit.
fn adopt(fd: &OwnedFd) -> io::Result<SocketAddr> {
    let raw = fd.as_raw_fd();
    // SAFETY: fstat into a zeroed struct of the right type.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    syscall!(fstat(raw, &mut stat))?;
    if stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a socket (fastpath serves only listening TCP sockets: ListenStream=ADDR:PORT)",
        ));
    }
    let domain = getsockopt_int(raw, libc::SO_DOMAIN)?;
    let kind = getsockopt_int(raw, libc::SO_TYPE)?;
    if domain == libc::AF_UNIX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a Unix socket, which fastpath does not serve yet (use ListenStream=ADDR:PORT or \
             ListenStream=PORT, a TCP socket)",
        ));
    }
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a socket of address family {domain}, not TCP (use ListenStream=ADDR:PORT)"),
        ));
    }
    if kind != libc::SOCK_STREAM {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a stream socket (ListenDatagram= or ListenSequentialPacket=?): fastpath needs \
             ListenStream=",
        ));
    }
    if getsockopt_int(raw, libc::SO_ACCEPTCONN)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a TCP socket that is not listening (a connection, as systemd passes with \
             Accept=yes?): fastpath needs the listening socket, Accept=no",
        ));
    }
    let socket = socket2::SockRef::from(fd);
    socket.set_nonblocking(true)?;
    socket.set_cloexec(true)?;
    // As on our own listeners: accepted sockets inherit it.
    let _ = socket.set_tcp_nodelay(true);
    socket
        .local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("listener has no inet address"))
}

fn getsockopt_int(fd: i32, name: i32) -> io::Result<i32> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    syscall!(getsockopt(
        fd,
        libc::SOL_SOCKET,
        name,
        (&mut value as *mut libc::c_int).cast(),
        &mut len
    ))?;
    Ok(value)
}

/// The address index of entry `flat_index` of [`Listeners::into_flat`], for `addresses` bound
/// addresses.
pub(crate) fn address_index(flat_index: usize, addresses: usize) -> usize {
    flat_index % addresses.max(1)
}

/// Binds `workers` SO_REUSEPORT sockets on each address, with the default [`ListenOptions`].
/// Port 0 is resolved by the first socket and reused by the others, so all workers share one
/// ephemeral port.
pub fn bind_listeners(addrs: &[SocketAddr], workers: usize) -> io::Result<Listeners> {
    let specs: Vec<(SocketAddr, ListenOptions)> = addrs
        .iter()
        .map(|&addr| (addr, ListenOptions::default()))
        .collect();
    bind_listeners_with(&specs, workers)
}

/// [`bind_listeners`] with options of each address's own.
pub fn bind_listeners_with(
    specs: &[(SocketAddr, ListenOptions)],
    workers: usize,
) -> io::Result<Listeners> {
    let workers = workers.max(1);
    let mut per_worker: Vec<Vec<OwnedFd>> = (0..workers).map(|_| Vec::new()).collect();
    let mut local_addrs = Vec::with_capacity(specs.len());
    let mut features = ListenerFeatures { defer_accept: true };
    for &(addr, options) in specs {
        refuse_if_taken(addr).map_err(|e| bind_error(addr, workers, e))?;
        let mut bound = addr;
        for sockets in per_worker.iter_mut() {
            let (socket, defer) =
                bind_one(bound, options).map_err(|e| bind_error(addr, workers, e))?;
            if options.defer_accept {
                features.defer_accept &= defer;
            }
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
        inherited: false,
    })
}

/// Refuses an address another socket already listens on. Our own listeners share their
/// address through SO_REUSEPORT, which the kernel would also grant a second server of the same
/// user: it would then take half of the connections. A plain bind (SO_REUSEADDR only, which
/// lets TIME_WAIT leftovers pass) fails if anyone listens there. Port 0 needs no check.
fn refuse_if_taken(addr: SocketAddr) -> io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let probe = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    probe.set_reuse_address(true)?;
    if addr.is_ipv6() {
        probe.set_only_v6(true)?;
    }
    probe.bind(&addr.into())
}

/// The error of binding `addr`, naming the address and, for the usual causes, what to do.
fn bind_error(addr: SocketAddr, workers: usize, error: io::Error) -> io::Error {
    let hint = match error.raw_os_error() {
        Some(libc::EADDRINUSE) => {
            " (another process is listening there: stop it, or choose another address)".to_owned()
        }
        Some(libc::EACCES) => {
            " (ports below 1024 need root or CAP_NET_BIND_SERVICE: start as root, or choose a \
             port of 1024 or more)"
                .to_owned()
        }
        Some(libc::EADDRNOTAVAIL) => " (no interface of this machine has that address)".to_owned(),
        Some(libc::EMFILE) | Some(libc::ENFILE) => format!(
            " ({workers} workers need {workers} listening sockets per address: use fewer \
             workers, or raise the open file limit, `ulimit -n`)"
        ),
        _ => String::new(),
    };
    io::Error::new(error.kind(), format!("{addr}: {error}{hint}"))
}

fn bind_one(addr: SocketAddr, options: ListenOptions) -> io::Result<(Socket, bool)> {
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
    let defer = options.defer_accept
        && setsockopt_int(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            DEFER_ACCEPT_SECS,
        )
        .is_ok();
    Ok((socket, defer))
}

/// Binds `n` more SO_REUSEPORT sockets on `addr`, joining the sockets already listening there
/// (handed over by the server this process replaces), without the check that refuses a taken
/// address: here it is taken by design.
pub fn bind_into_group(addr: SocketAddr, n: usize) -> io::Result<Vec<OwnedFd>> {
    (0..n)
        .map(|_| {
            bind_one(addr, ListenOptions::default())
                .map(|(socket, _)| socket.into())
                .map_err(|e| bind_error(addr, n, e))
        })
        .collect()
}

/// Readies a listening socket handed over by the server this process replaces (see
/// [`Listeners::from_inherited`] for the checks): its address.
pub fn adopt_handed(fd: &OwnedFd) -> io::Result<SocketAddr> {
    adopt(fd)
}
