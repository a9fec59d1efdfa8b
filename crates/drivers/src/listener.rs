//! Listening sockets: one per worker and TCP address, bound with SO_REUSEPORT so the kernel
//! spreads connections over the workers and no accept lock is shared; one per Unix-domain
//! path (which has no SO_REUSEPORT), shared by every worker; or sockets inherited from a
//! service manager (systemd socket activation), which every worker shares too.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use fastpath_sys::{getsockopt_int, setsockopt_int, syscall};

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

/// Where a listener listens: a TCP address, or the path of a Unix-domain stream socket.
/// Written `IP:PORT` (`[::1]:8080` for IPv6) or `unix:PATH`, the form an upstream address
/// ([`crate::UpstreamAddr`]) takes in the configuration too.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ListenAddr {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix-domain stream socket at this path.
    Unix(PathBuf),
}

impl ListenAddr {
    /// The TCP address, if it is one.
    pub fn tcp(&self) -> Option<SocketAddr> {
        match self {
            ListenAddr::Tcp(addr) => Some(*addr),
            ListenAddr::Unix(_) => None,
        }
    }
}

impl PartialEq<SocketAddr> for ListenAddr {
    fn eq(&self, other: &SocketAddr) -> bool {
        self.tcp() == Some(*other)
    }
}

impl From<SocketAddr> for ListenAddr {
    fn from(addr: SocketAddr) -> Self {
        ListenAddr::Tcp(addr)
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Tcp(addr) => addr.fmt(f),
            ListenAddr::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl FromStr for ListenAddr {
    type Err = String;

    /// `IP:PORT` or `unix:PATH`; the error says which form was expected.
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(
                    "`unix:` needs the socket's path (for example unix:/run/fastpath.sock)".into(),
                );
            }
            if path.contains('\0') {
                return Err("a socket path cannot contain a NUL byte".into());
            }
            // sun_path holds 108 bytes with the terminating NUL.
            if path.len() > 107 {
                return Err(format!(
                    "the socket path is {} bytes long; Unix sockets allow 107 at most",
                    path.len()
                ));
            }
            return Ok(ListenAddr::Unix(PathBuf::from(path)));
        }
        s.parse::<SocketAddr>().map(ListenAddr::Tcp).map_err(|_| {
            "not IP:PORT or unix:PATH (for example \"127.0.0.1:8080\", \"[::1]:8080\" or \
             \"unix:/run/fastpath.sock\")"
                .to_owned()
        })
    }
}

/// The file of a Unix-domain listening socket this process serves: removed when the value is
/// dropped (the listener has stopped), if it is still the same file, this is the process
/// that took charge of it (not a preforked child), and the sockets were not handed to a
/// successor that goes on serving them ([`crate::signals::set_handed_over`],
/// [`UnixSocketFile::keep`]).
#[derive(Debug)]
pub struct UnixSocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
    pid: u32,
}

impl UnixSocketFile {
    /// Takes charge of the socket file at `path` as it is now: for a socket bound here, or
    /// one handed over by the server this process replaces.
    pub fn new(path: &Path) -> io::Result<Self> {
        let meta = std::fs::symlink_metadata(path)?;
        Ok(UnixSocketFile {
            path: path.to_owned(),
            dev: meta.dev(),
            ino: meta.ino(),
            pid: std::process::id(),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Leaves the file in place: for a socket handed to another process that goes on
    /// listening on it.
    pub fn keep(mut self) {
        self.pid = 0;
    }
}

impl Drop for UnixSocketFile {
    fn drop(&mut self) {
        if self.pid != std::process::id() || crate::signals::handed_over() {
            return;
        }
        let same = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|meta| meta.dev() == self.dev && meta.ino() == self.ino);
        if same {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The bound listeners: `per_worker[w]` holds worker `w`'s socket for every address.
pub struct Listeners {
    /// Sockets per worker, in the order of `local_addrs`.
    pub per_worker: Vec<Vec<OwnedFd>>,
    /// The addresses actually bound (an ephemeral port 0 resolved).
    pub local_addrs: Vec<ListenAddr>,
    /// The files of the Unix-domain sockets bound here, removed when the listeners are
    /// dropped (once the model has stopped serving them); take them out to decide otherwise.
    pub unix_files: Vec<UnixSocketFile>,
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
    unix_mode: Option<u32>,
}

impl Default for ListenOptions {
    /// For protocols whose client speaks first (HTTP): with TCP_DEFER_ACCEPT; a Unix socket's
    /// file with the permissions the umask leaves.
    fn default() -> Self {
        ListenOptions {
            defer_accept: true,
            unix_mode: None,
        }
    }
}

impl ListenOptions {
    /// Options for a protocol whose server speaks first (SMTP, FTP, a greeting): without
    /// TCP_DEFER_ACCEPT, which would hold every connection back until the client sends a
    /// byte, and so delay the greeting it waits for by the defer time.
    pub fn server_speaks_first() -> Self {
        ListenOptions {
            defer_accept: false,
            ..ListenOptions::default()
        }
    }

    /// These options with a Unix socket's file given permissions `mode` (`0o660`: the
    /// owner and its group may connect); no effect on a TCP listener.
    pub fn with_unix_mode(self, mode: u32) -> Self {
        ListenOptions {
            unix_mode: Some(mode & 0o777),
            ..self
        }
    }

    /// The permissions a Unix socket's file is given, if set.
    pub fn unix_mode(&self) -> Option<u32> {
        self.unix_mode
    }

    /// Whether connections are accepted only once the client has sent something (or after
    /// [`DEFER_ACCEPT_SECS`]), where the kernel supports it.
    pub fn defer_accept(&self) -> bool {
        self.defer_accept
    }
}

impl Listeners {
    /// No listener yet, for `sets` listener sets (workers): addresses are added with
    /// [`Listeners::push`] and [`Listeners::append`], so that every way of getting sockets
    /// (bound here, inherited, handed over) assembles them the same way.
    pub fn empty(sets: usize) -> Listeners {
        Listeners {
            per_worker: (0..sets.max(1)).map(|_| Vec::new()).collect(),
            local_addrs: Vec::new(),
            unix_files: Vec::new(),
            features: ListenerFeatures { defer_accept: true },
            inherited: false,
        }
    }

    /// Adds the address `addr`, served by `sockets`: one a listener set, in set order (a
    /// socket every set shares is given once per set, as duplicates).
    pub fn push(&mut self, addr: ListenAddr, sockets: Vec<OwnedFd>) {
        assert_eq!(
            sockets.len(),
            self.per_worker.len(),
            "one socket a listener set for {addr}"
        );
        for (set, socket) in self.per_worker.iter_mut().zip(sockets) {
            set.push(socket);
        }
        self.local_addrs.push(addr);
    }

    /// Adds the listeners `more` holds after these: their addresses and sockets, the files of
    /// their Unix sockets, and what the kernel supported for them. Both have as many
    /// listener sets.
    pub fn append(&mut self, more: Listeners) {
        let Listeners {
            per_worker,
            local_addrs,
            unix_files,
            features,
            inherited,
        } = more;
        assert_eq!(
            per_worker.len(),
            self.per_worker.len(),
            "as many listener sets"
        );
        for (set, sockets) in self.per_worker.iter_mut().zip(per_worker) {
            set.extend(sockets);
        }
        self.local_addrs.extend(local_addrs);
        self.unix_files.extend(unix_files);
        self.features.defer_accept &= features.defer_accept;
        self.inherited |= inherited;
    }

    /// Every worker's sockets in one list, for a model that accepts from all of them in one
    /// place (a thread pool, preforked children). Entry `i` listens on address
    /// `i % local_addrs.len()`.
    pub(crate) fn into_flat(self) -> Vec<OwnedFd> {
        self.per_worker.into_iter().flatten().collect()
    }

    /// Adopts listening sockets handed over by a service manager (systemd's `LISTEN_FDS`):
    /// `sockets` holds each descriptor with a label for messages (its number and name). Each
    /// must be a listening stream socket, TCP or Unix-domain; it is made non-blocking and
    /// close-on-exec, a TCP one gets TCP_NODELAY as our own listeners do, and each is
    /// otherwise left as the manager set it up (a Unix socket's file too, which stays)
    /// (backlog, TCP_DEFER_ACCEPT: the socket unit's `DeferAcceptSec=`). SO_REUSEPORT cannot
    /// give each worker a socket of its own here, so every worker gets a duplicate of the one
    /// socket and accepts from it (the loops wait on it with EPOLLEXCLUSIVE where they can,
    /// so one new client wakes one worker, not all).
    pub fn from_inherited(
        sockets: Vec<(OwnedFd, String)>,
        workers: usize,
    ) -> io::Result<Listeners> {
        let mut listeners = Listeners::empty(workers);
        listeners.inherited = true;
        for (fd, label) in sockets {
            let addr = adopt(&fd).map_err(|e| io::Error::new(e.kind(), format!("{label}: {e}")))?;
            let copies = shared_by_every_set(fd, listeners.per_worker.len())?;
            listeners.push(addr, copies);
        }
        Ok(listeners)
    }
}

/// `socket` for each of `sets` listener sets: the socket itself and duplicates of it, for a
/// socket every worker accepts from (an inherited one, a Unix-domain one).
pub fn shared_by_every_set(socket: OwnedFd, sets: usize) -> io::Result<Vec<OwnedFd>> {
    let mut copies = Vec::with_capacity(sets.max(1));
    for _ in 1..sets.max(1) {
        copies.push(socket.try_clone()?);
    }
    copies.push(socket);
    Ok(copies)
}

/// Checks that an inherited descriptor is a listening stream socket (TCP or Unix-domain) and
/// readies it: the error says what it is instead, and what to change in the socket unit.
fn adopt(fd: &OwnedFd) -> io::Result<ListenAddr> {
    let raw = fd.as_raw_fd();
    // SAFETY: fstat into a zeroed struct of the right type.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    syscall!(fstat(raw, &mut stat))?;
    if stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a socket (fastpath serves listening stream sockets: ListenStream=ADDR:PORT or \
             ListenStream=/PATH)",
        ));
    }
    let domain = getsockopt_int(raw, libc::SOL_SOCKET, libc::SO_DOMAIN)?;
    let kind = getsockopt_int(raw, libc::SOL_SOCKET, libc::SO_TYPE)?;
    if ![libc::AF_INET, libc::AF_INET6, libc::AF_UNIX].contains(&domain) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a socket of address family {domain}, not TCP or Unix-domain (use \
                 ListenStream=ADDR:PORT or ListenStream=/PATH)"
            ),
        ));
    }
    if kind != libc::SOCK_STREAM {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a stream socket (ListenDatagram= or ListenSequentialPacket=?): fastpath needs \
             ListenStream=",
        ));
    }
    if getsockopt_int(raw, libc::SOL_SOCKET, libc::SO_ACCEPTCONN)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a socket that is not listening (a connection, as systemd passes with \
             Accept=yes?): fastpath needs the listening socket, Accept=no",
        ));
    }
    let socket = socket2::SockRef::from(fd);
    socket.set_nonblocking(true)?;
    socket.set_cloexec(true)?;
    let local = socket.local_addr()?;
    if domain == libc::AF_UNIX {
        return local
            .as_pathname()
            .map(|path| ListenAddr::Unix(path.to_owned()))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a Unix socket without a path (abstract or unnamed): fastpath serves \
                     sockets with a path, ListenStream=/PATH",
                )
            });
    }
    // As on our own listeners: accepted sockets inherit it.
    let _ = socket.set_tcp_nodelay(true);
    local
        .as_socket()
        .map(ListenAddr::Tcp)
        .ok_or_else(|| io::Error::other("listener has no inet address"))
}

/// The address index of entry `flat_index` of [`Listeners::into_flat`], for `addresses` bound
/// addresses.
pub(crate) fn address_index(flat_index: usize, addresses: usize) -> usize {
    flat_index % addresses.max(1)
}

/// Binds `workers` SO_REUSEPORT sockets on each TCP address, with the default
/// [`ListenOptions`]. Port 0 is resolved by the first socket and reused by the others, so all
/// workers share one ephemeral port.
pub fn bind_listeners(addrs: &[SocketAddr], workers: usize) -> io::Result<Listeners> {
    let specs: Vec<(ListenAddr, ListenOptions)> = addrs
        .iter()
        .map(|&addr| (ListenAddr::Tcp(addr), ListenOptions::default()))
        .collect();
    bind_listeners_with(&specs, workers)
}

/// [`bind_listeners`] for TCP and Unix-domain addresses, each with options of its own. A
/// Unix-domain socket is bound once and shared by the workers; a file left at its path by a
/// server that is gone (a socket no one listens on) is removed first, anything else there is
/// an error, and the file is removed again when the [`Listeners`] are dropped.
pub fn bind_listeners_with(
    specs: &[(ListenAddr, ListenOptions)],
    workers: usize,
) -> io::Result<Listeners> {
    let workers = workers.max(1);
    let mut listeners = Listeners::empty(workers);
    for (addr, options) in specs {
        let addr = match addr {
            ListenAddr::Tcp(addr) => *addr,
            ListenAddr::Unix(path) => {
                let (socket, file) = bind_unix(path, *options).map_err(|e| {
                    io::Error::new(e.kind(), format!("unix:{}: {e}", path.display()))
                })?;
                // Bound before the others are tried, so that an error later removes it again.
                listeners.unix_files.push(file);
                let copies = shared_by_every_set(socket.into(), workers)?;
                listeners.push(ListenAddr::Unix(path.clone()), copies);
                continue;
            }
        };
        refuse_if_taken(addr).map_err(|e| bind_error(addr, workers, e))?;
        let mut bound = addr;
        let mut sockets = Vec::with_capacity(workers);
        for _ in 0..workers {
            let (socket, defer) =
                bind_one(bound, *options).map_err(|e| bind_error(addr, workers, e))?;
            if options.defer_accept {
                listeners.features.defer_accept &= defer;
            }
            if bound.port() == 0 {
                bound = socket
                    .local_addr()?
                    .as_socket()
                    .ok_or_else(|| io::Error::other("listener has no inet address"))?;
            }
            sockets.push(socket.into());
        }
        listeners.push(ListenAddr::Tcp(bound), sockets);
    }
    Ok(listeners)
}

/// Binds a Unix-domain stream socket at `path` and listens on it: after removing a stale
/// socket file there ([`remove_stale`]), with the file's permissions set to the options'
/// mode before the first client can connect.
fn bind_unix(path: &Path, options: ListenOptions) -> io::Result<(Socket, UnixSocketFile)> {
    remove_stale(path)?;
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    socket.set_nonblocking(true)?;
    socket.set_cloexec(true)?;
    socket.bind(&SockAddr::unix(path)?)?;
    let file = UnixSocketFile::new(path)?;
    if let Some(mode) = options.unix_mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    socket.listen(LISTEN_BACKLOG)?;
    Ok((socket, file))
}

/// Clears the way for a Unix socket at `path`: nothing there is fine; a socket file that
/// refuses a connection was left by a server that is gone, and is removed; a socket that
/// accepts one is another server's, and anything else is not ours to remove: both errors.
fn remove_stale(path: &Path) -> io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        other => other?,
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "the path exists and is not a socket: remove it, or choose another path",
        ));
    }
    let probe = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    // Non-blocking, so that a listener with a full backlog is seen as alive, not waited on.
    probe.set_nonblocking(true)?;
    match probe.connect(&SockAddr::unix(path)?) {
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => std::fs::remove_file(path),
        Ok(()) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            "another process is listening on this socket: stop it, or choose another path",
        )),
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            "another process is listening on this socket: stop it, or choose another path",
        )),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("a socket file is there and connecting to it failed ({e}); not removed"),
        )),
    }
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

/// The listening sockets a service manager passed (systemd's socket activation): descriptors
/// 3.. as `listen_fds` counts them, labelled with their `listen_fdnames`, when `listen_pid` is
/// this process (else they were meant for a parent that exec'd this one without clearing
/// them, and nothing is taken). The caller reads the three variables; [`take_inherited`]
/// reads and removes them.
pub fn inherited_sockets(
    listen_pid: Option<&std::ffi::OsStr>,
    listen_fds: Option<&std::ffi::OsStr>,
    listen_fdnames: Option<&std::ffi::OsStr>,
) -> io::Result<Vec<(OwnedFd, String)>> {
    use std::os::fd::FromRawFd;
    let ours = listen_pid.and_then(|p| p.to_str()) == Some(&std::process::id().to_string());
    let Some(count) = listen_fds.filter(|_| ours) else {
        return Ok(Vec::new());
    };
    let count: i32 = count
        .to_str()
        .and_then(|c| c.parse().ok())
        .filter(|c| (0..=4096).contains(c))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("LISTEN_FDS={count:?} is not a count of descriptors"),
            )
        })?;
    let names: Vec<String> = listen_fdnames
        .map(|n| n.to_string_lossy().split(':').map(str::to_owned).collect())
        .unwrap_or_default();
    let mut sockets = Vec::new();
    for i in 0..count {
        let fd = 3 + i;
        // SAFETY: fcntl on a descriptor number only asks whether it is open.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("LISTEN_FDS={count} but descriptor {fd} is not open"),
            ));
        }
        // SAFETY: the service manager passed descriptors 3..3+LISTEN_FDS to this process
        // (LISTEN_PID is ours) and nothing else in it owns them.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let label = match names.get(i as usize).filter(|n| !n.is_empty()) {
            Some(name) => format!("inherited socket fd {fd} \"{name}\""),
            None => format!("inherited socket fd {fd}"),
        };
        sockets.push((owned, label));
    }
    Ok(sockets)
}

/// [`inherited_sockets`] from the environment, whose three variables it removes so that no
/// process started later takes them for its own. Call it before the process starts threads
/// (the environment is not safe to change while another thread may read it).
pub fn take_inherited() -> io::Result<Vec<(OwnedFd, String)>> {
    let take = |name: &str| {
        let value = std::env::var_os(name);
        std::env::remove_var(name);
        value
    };
    let (pid, fds, names) = (
        take("LISTEN_PID"),
        take("LISTEN_FDS"),
        take("LISTEN_FDNAMES"),
    );
    inherited_sockets(pid.as_deref(), fds.as_deref(), names.as_deref())
}

/// Readies a listening socket handed over by the server this process replaces (see
/// [`Listeners::from_inherited`] for the checks): its address.
pub fn adopt_handed(fd: &OwnedFd) -> io::Result<ListenAddr> {
    adopt(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::{UnixListener, UnixStream};

    fn unix(path: &Path) -> Vec<(ListenAddr, ListenOptions)> {
        vec![(ListenAddr::Unix(path.to_owned()), ListenOptions::default())]
    }

    #[test]
    fn addresses_are_tcp_or_unix_paths_and_print_as_written() {
        for text in [
            "127.0.0.1:8080",
            "[::1]:8080",
            "unix:/run/fastpath.sock",
            "unix:rel.sock",
        ] {
            let addr: ListenAddr = text.parse().unwrap();
            assert_eq!(addr.to_string(), text);
        }
        assert_eq!(
            "unix:/x".parse::<ListenAddr>(),
            Ok(ListenAddr::Unix("/x".into()))
        );
        assert!("unix:"
            .parse::<ListenAddr>()
            .unwrap_err()
            .contains("needs the socket's path"));
        let long = format!("unix:/{}", "a".repeat(107));
        assert!(long
            .parse::<ListenAddr>()
            .unwrap_err()
            .contains("107 at most"));
        assert!("localhost:80"
            .parse::<ListenAddr>()
            .unwrap_err()
            .contains("unix:PATH"));
    }

    #[test]
    fn a_unix_socket_is_shared_by_the_workers_and_its_file_removed_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let options = ListenOptions::default().with_unix_mode(0o600);
        let spec = [(ListenAddr::Unix(path.clone()), options)];
        let listeners = bind_listeners_with(&spec, 3).unwrap();
        assert_eq!(listeners.local_addrs, [ListenAddr::Unix(path.clone())]);
        assert_eq!(listeners.per_worker.len(), 3);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        UnixStream::connect(&path).expect("listening");
        drop(listeners);
        assert!(
            !path.exists(),
            "the socket file is removed with the listeners"
        );
    }

    #[test]
    fn a_stale_socket_file_is_replaced_and_anything_else_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        // A server that is gone leaves its file; connecting to it is refused.
        drop(UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let listeners = bind_listeners_with(&unix(&path), 1).expect("stale file replaced");
        UnixStream::connect(&path).expect("listening");
        drop(listeners);

        let live = UnixListener::bind(&path).unwrap();
        let e = bind_listeners_with(&unix(&path), 1).err().expect("refused");
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
        assert!(
            e.to_string().contains("another process is listening"),
            "{e}"
        );
        assert!(path.exists(), "another server's socket is left alone");
        drop(live);
        std::fs::remove_file(&path).unwrap();

        std::fs::write(&path, "data").unwrap();
        let e = bind_listeners_with(&unix(&path), 1).err().expect("refused");
        assert!(e.to_string().contains("is not a socket"), "{e}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"data",
            "a file is never removed"
        );
    }

    #[test]
    fn a_socket_file_replaced_meanwhile_is_left_to_its_new_owner() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listeners = bind_listeners_with(&unix(&path), 1).unwrap();
        std::fs::remove_file(&path).unwrap();
        let other = UnixListener::bind(&path).unwrap();
        drop(listeners);
        assert!(path.exists(), "not ours any more");
        drop(other);
    }
}
