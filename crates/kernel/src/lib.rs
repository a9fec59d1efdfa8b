//! fastpath's kernel layer (docs/architecture.md): BPF programs written in C (`src/bpf`),
//! compiled by clang in `build.rs`, embedded in the binary and loaded with aya. Always
//! optional: a machine without clang at build time, without BPF privileges or without
//! sockmap support gets the user-space path, and [`echo_path`] says why in one line.
//!
//! Nothing is pinned: programs and maps live as long as the descriptors of the process that
//! loaded them, so they go when it exits, however it exits.
//!
//! The engine (`fastpath-drivers`) knows nothing of this crate: a service asks it to take a
//! connection's socket over ([`EchoPath::take_over`]) and keeps serving the descriptor
//! itself (its deadline, and the peer's end, which a socket in a sockmap still reports).

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::str::FromStr;
use std::sync::Arc;

mod bridge;
mod bridge_probe;
mod probe;
pub use bridge::{bridge_path, BridgePath, Joined as BridgeJoined};
pub use bridge_probe::{kernel_bridges_best, probe_bridge, BRIDGE_PROBE_SIZES, BRIDGE_PROBE_TIME};
pub use probe::{
    describe, kernel_wins_from, probe_echo, KernelProbe, KERNEL_MARGIN, PROBE_SIZES, PROBE_TIME,
};

/// Whether a service uses the kernel path (`kernel_path` in its configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Only where it wins (see [`Mode::Auto`]'s use in each service), and only if it can be had.
    #[default]
    Auto,
    /// Always; the service does not start without it.
    On,
    /// Never: user space does all the work.
    Off,
}

impl Mode {
    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::On => "on",
            Mode::Off => "off",
        }
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "auto" => Ok(Mode::Auto),
            "on" => Ok(Mode::On),
            "off" => Ok(Mode::Off),
            _ => Err(format!(
                "unknown kernel path `{s}` (expected auto, on or off)"
            )),
        }
    }
}

/// Why the kernel path cannot be had here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unavailable {
    /// This binary was built without clang: no programs are embedded.
    NotBuilt,
    /// The process lacks CAP_BPF (or CAP_SYS_ADMIN) and CAP_NET_ADMIN.
    NoPrivileges(String),
    /// The kernel has no sockmap / sk_skb stream verdict support.
    NoKernelSupport(String),
    /// The verifier refused a program; its log.
    Refused(String),
    /// Anything else, with the error.
    Failed(String),
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unavailable::NotBuilt => write!(
                f,
                "built without the kernel path (clang was missing when it was built)"
            ),
            Unavailable::NoPrivileges(e) => {
                write!(f, "no CAP_BPF/CAP_NET_ADMIN to load BPF programs ({e})")
            }
            Unavailable::NoKernelSupport(e) => write!(
                f,
                "kernel without sockmap/stream parser support (CONFIG_BPF_STREAM_PARSER): {e}"
            ),
            Unavailable::Refused(log) => {
                write!(f, "program refused by the verifier: {}", log.trim())
            }
            Unavailable::Failed(e) => write!(f, "{e}"),
        }
    }
}

/// Why a connection stays in user space ([`EchoPath::take_over`]).
#[derive(Debug)]
pub enum TakeOverError {
    /// The map holds as many sockets as it can.
    Full,
    /// Another error from the kernel.
    Io(io::Error),
}

impl fmt::Display for TakeOverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TakeOverError::Full => write!(f, "the kernel path's socket map is full"),
            TakeOverError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// The in-kernel echo: a sockhash whose stream verdict program redirects every socket's
/// ingress to its own egress. One per process, shared by its workers (and inherited by
/// prefork's processes, whose descriptors point at the same map).
pub struct EchoPath {
    #[cfg(kernel_path)]
    _loaded: imp::Loaded,
    map_fd: RawFd,
    state_fd: RawFd,
    capacity: u32,
    max_held: u32,
}

impl fmt::Debug for EchoPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EchoPath")
            .field("map_fd", &self.map_fd)
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl EchoPath {
    /// Loads the echo program and its map of `capacity` sockets, each of which may have up
    /// to `max_held` bytes waiting in the kernel beyond its send buffer.
    pub fn load(capacity: u32, max_held: u32) -> Result<EchoPath, Unavailable> {
        #[cfg(kernel_path)]
        {
            let loaded = imp::load(capacity, max_held)?;
            Ok(EchoPath {
                map_fd: loaded.map_fd(),
                state_fd: loaded.state_fd(),
                _loaded: loaded,
                capacity,
                max_held,
            })
        }
        #[cfg(not(kernel_path))]
        {
            let _ = (capacity, max_held);
            Err(Unavailable::NotBuilt)
        }
    }

    /// How many sockets the map holds at most.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Puts `socket` (a connected TCP socket) in the map: from now on what arrives on it is
    /// sent back by the kernel. The caller must have sent everything it read from the socket
    /// before, or the echo could overtake it. The socket leaves the map when it is closed;
    /// bytes the kernel had taken but not yet sent then are dropped, so a caller closes only
    /// once [`bytes_written`] has caught up with [`bytes_received`].
    ///
    /// The kernel cannot stop reading a socket in its map (the receive window stays open), so
    /// it holds what the send buffer has not taken yet: up to `limit` bytes (at least
    /// [`EchoPath::max_held`]), past which it drops and marks the socket
    /// ([`EchoPath::overflowed`]) for the caller to reset.
    ///
    /// Nothing may wait unread in the socket: the kernel (6.x) runs the verdict over whole
    /// skbs from the receive queue, so the part of one that user space had already read
    /// would be echoed twice. The caller checks (`FIONREAD`, [`unread`]) first; bytes that
    /// arrive after that come in whole skbs, which are safe.
    pub fn take_over(&self, socket: BorrowedFd<'_>, limit: u32) -> Result<Taken, TakeOverError> {
        let cookie = socket_cookie(socket).map_err(TakeOverError::Io)?;
        let state = EchoState {
            limit: limit.max(self.max_held),
            ..EchoState::default()
        };
        map_update(self.state_fd, &cookie, &state, 0).map_err(TakeOverError::Io)?;
        let fd = socket.as_raw_fd() as u64;
        match map_update(self.map_fd, &cookie, &fd, BPF_NOEXIST) {
            Ok(()) => {
                // Bytes that arrived between the caller's check and the program's attachment
                // wait in the receive queue until the next arrival runs the verdict over them.
                // Setting SO_RCVLOWAT runs the socket's data-ready callback now
                // (tcp_set_rcvlowat), so the kernel sends them back at once, in order, and
                // user space never reads them.
                let _ = fastpath_sys::setsockopt_int(
                    socket.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVLOWAT,
                    1,
                );
                Ok(Taken(cookie))
            }
            Err(e) => {
                let _ = map_delete(self.state_fd, &cookie);
                match e.raw_os_error() {
                    Some(libc::E2BIG) | Some(libc::ENOMEM) => Err(TakeOverError::Full),
                    _ => Err(TakeOverError::Io(e)),
                }
            }
        }
    }
}

/// A socket the kernel has taken over: its cookie, the key of its entries in the maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken(u64);

impl EchoPath {
    /// Whether the kernel gave up on `taken` because its peer sent more than its limit
    /// ([`EchoPath::take_over`]) beyond what its send buffer took (a peer that does not read
    /// its echo): what arrived since was dropped, so the connection must be reset.
    pub fn overflowed(&self, taken: Taken) -> bool {
        let mut state = EchoState::default();
        map_lookup(self.state_fd, &taken.0, &mut state).is_ok() && state.state == ECHO_OVERFLOW
    }

    /// Forgets `taken`'s count, once its connection is closed (the socket leaves the sockhash
    /// by itself).
    pub fn release(&self, taken: Taken) {
        let _ = map_delete(self.state_fd, &taken.0);
    }

    /// Bytes the kernel holds at least, for any socket, beyond its send buffer.
    pub fn max_held(&self) -> u32 {
        self.max_held
    }
}

/// `struct echo_state` of echo.bpf.c.
#[repr(C)]
#[derive(Default)]
struct EchoState {
    redirected: u64,
    base_seq: u32,
    limit: u32,
    state: u32,
    pad: u32,
}

const ECHO_OVERFLOW: u32 = 2;

/// Loads the echo path for `mode`, and logs in one line whether the kernel path is on and, if
/// not, why. `Ok(None)`: user space (off, or auto where it cannot be had); `Err`: `mode` is
/// [`Mode::On`] and it cannot be had, the start must fail with this reason.
///
/// `scope` says which connections will use it, for the log line.
pub fn echo_path(
    mode: Mode,
    capacity: u32,
    max_held: u32,
    scope: &str,
) -> Result<Option<Arc<EchoPath>>, String> {
    let (path, line) = echo_outcome(mode, capacity, max_held, scope)?;
    tracing::info!("{line}");
    Ok(path)
}

/// [`echo_path`] without the log: the path and the line saying what was decided, for a
/// caller that prints it elsewhere (`fastpath check --service echo`). The path, if loaded, is
/// released when dropped.
pub fn echo_outcome(
    mode: Mode,
    capacity: u32,
    max_held: u32,
    scope: &str,
) -> Result<(Option<Arc<EchoPath>>, String), String> {
    if mode == Mode::Off {
        return Ok((None, "kernel path: off (kernel_path = \"off\")".to_string()));
    }
    match EchoPath::load(capacity, max_held) {
        Ok(path) => Ok((
            Some(Arc::new(path)),
            format!(
                "kernel path: on for {scope} (echo: sk_skb stream verdict redirecting each \
                 socket to itself, sockhash of {capacity} sockets; kernel_path = \"{}\")",
                mode.name()
            ),
        )),
        Err(why) if mode == Mode::On => Err(format!("kernel path: cannot be had: {why}")),
        Err(why) => Ok((None, format!("kernel path: off: {why}"))),
    }
}

/// All bytes ever written to `socket`: TCP_INFO's bytes acked plus its send queue. For a
/// socket in the echo map, whose echo the kernel may still hold in a queue of its own, this
/// tells when every byte received has been sent back and closing loses none.
pub fn bytes_written(socket: BorrowedFd<'_>) -> io::Result<u64> {
    let info = fastpath_sys::tcp_info(socket.as_raw_fd())?;
    let outq = fastpath_sys::send_queue(socket.as_raw_fd())?;
    Ok(info.bytes_acked + outq)
}

/// Bytes waiting unread in `socket` (FIONREAD).
pub fn unread(socket: BorrowedFd<'_>) -> io::Result<usize> {
    fastpath_sys::unread(socket.as_raw_fd())
}

/// Bytes received on `socket` since it opened (TCP_INFO).
pub fn bytes_received(socket: BorrowedFd<'_>) -> io::Result<u64> {
    Ok(fastpath_sys::tcp_info(socket.as_raw_fd())?.bytes_received)
}

/// Time since the last data arrived on `socket` (TCP_INFO), for an idle timeout on a socket
/// whose bytes user space no longer sees.
pub fn since_last_input(socket: BorrowedFd<'_>) -> io::Result<std::time::Duration> {
    Ok(std::time::Duration::from_millis(
        fastpath_sys::tcp_info(socket.as_raw_fd())?.last_data_recv as u64,
    ))
}

pub(crate) fn socket_cookie(socket: BorrowedFd<'_>) -> io::Result<u64> {
    let mut cookie: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: the kernel writes one u64.
    let r = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_COOKIE,
            (&mut cookie as *mut u64).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cookie)
}

const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
pub(crate) const BPF_NOEXIST: u64 = 1;

/// `union bpf_attr` for the map element commands.
#[repr(C)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// A map element command straight through the system call: it needs only the map's
/// descriptor, so workers use the maps without sharing a lock.
fn map_elem(cmd: libc::c_long, map_fd: RawFd, key: u64, value: u64, flags: u64) -> io::Result<()> {
    let attr = MapElemAttr {
        map_fd: map_fd as u32,
        _pad: 0,
        key,
        value,
        flags,
    };
    // SAFETY: the caller's key and value pointers are valid for the duration of the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            &attr as *const MapElemAttr,
            std::mem::size_of::<MapElemAttr>() as u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) fn map_update<K, V>(map_fd: RawFd, key: &K, value: &V, flags: u64) -> io::Result<()> {
    map_elem(
        BPF_MAP_UPDATE_ELEM,
        map_fd,
        key as *const K as u64,
        value as *const V as u64,
        flags,
    )
}

pub(crate) fn map_lookup<K, V>(map_fd: RawFd, key: &K, value: &mut V) -> io::Result<()> {
    map_elem(
        BPF_MAP_LOOKUP_ELEM,
        map_fd,
        key as *const K as u64,
        value as *mut V as u64,
        0,
    )
}

pub(crate) fn map_delete<K>(map_fd: RawFd, key: &K) -> io::Result<()> {
    map_elem(BPF_MAP_DELETE_ELEM, map_fd, key as *const K as u64, 0, 0)
}

const BPF_PROG_ATTACH: libc::c_long = 8;

/// `union bpf_attr` for BPF_PROG_ATTACH.
#[repr(C)]
struct ProgAttachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

/// Attaches a program to a sockmap (aya's attach wants its own 4-byte-valued map type).
#[cfg_attr(not(kernel_path), allow(dead_code))]
pub(crate) fn prog_attach(prog_fd: RawFd, map_fd: RawFd, attach_type: u32) -> io::Result<()> {
    let attr = ProgAttachAttr {
        target_fd: map_fd as u32,
        attach_bpf_fd: prog_fd as u32,
        attach_type,
        attach_flags: 0,
        replace_bpf_fd: 0,
    };
    // SAFETY: attr is a valid bpf_attr prefix for the duration of the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_ATTACH,
            &attr as *const ProgAttachAttr,
            std::mem::size_of::<ProgAttachAttr>() as u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(kernel_path)]
pub(crate) mod imp {
    use std::os::fd::{AsFd, AsRawFd, RawFd};

    use aya::maps::{Map, MapData, MapError};
    use aya::programs::{ProgramError, SkSkb};
    use aya::{Ebpf, EbpfError, EbpfLoader};

    use super::Unavailable;

    const BPF_SK_SKB_STREAM_VERDICT: u32 = 5;

    static ECHO: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/echo.bpf.o"));

    /// What must stay open for a path of one socket map and one state map to work (the echo,
    /// the bridge): the object (program and its attachment) and the maps.
    pub(crate) struct Loaded {
        _ebpf: Ebpf,
        map: MapData,
        state: MapData,
    }

    // SAFETY: nothing here is touched after loading but the maps' descriptors, which any
    // thread may use; the object is only kept to be dropped.
    unsafe impl Sync for Loaded {}
    unsafe impl Send for Loaded {}

    impl Loaded {
        pub(crate) fn new(ebpf: Ebpf, map: MapData, state: MapData) -> Loaded {
            Loaded {
                _ebpf: ebpf,
                map,
                state,
            }
        }

        pub(crate) fn map_fd(&self) -> RawFd {
            self.map.fd().as_fd().as_raw_fd()
        }

        pub(crate) fn state_fd(&self) -> RawFd {
            self.state.fd().as_fd().as_raw_fd()
        }
    }

    /// Loads the BPF object `bytes` (named `object` in messages) with `loader`'s settings.
    pub(crate) fn load_object(
        loader: &mut EbpfLoader<'_>,
        bytes: &[u8],
        object: &str,
    ) -> Result<Ebpf, Unavailable> {
        loader.load(bytes).map_err(|e| match e {
            EbpfError::MapError(MapError::CreateError { name, io_error }) => {
                io_reason(&io_error, &format!("creating the map `{name}`"))
            }
            other => Unavailable::Failed(format!("loading the {object} object: {other}")),
        })
    }

    /// Loads program `name` of the BPF object `object` (named in messages) and attaches it
    /// to the sockmap or sockhash `map_fd` as `attach_type` (stream parser or verdict).
    pub(crate) fn load_and_attach(
        ebpf: &mut Ebpf,
        object: &str,
        name: &str,
        map_fd: RawFd,
        attach_type: u32,
    ) -> Result<(), Unavailable> {
        let program: &mut SkSkb = ebpf
            .program_mut(name)
            .ok_or_else(|| Unavailable::Failed(format!("the {object} object has no `{name}`")))?
            .try_into()
            .map_err(|e: ProgramError| Unavailable::Failed(format!("{name}: {e}")))?;
        program
            .load()
            .map_err(|e| program_reason(e, &format!("loading {name}")))?;
        let prog_fd = program
            .fd()
            .map_err(|e| program_reason(e, name))?
            .as_fd()
            .as_raw_fd();
        super::prog_attach(prog_fd, map_fd, attach_type)
            .map_err(|e| io_reason(&e, &format!("attaching {name} to the sockhash")))
    }

    pub(crate) fn io_reason(e: &std::io::Error, what: &str) -> Unavailable {
        match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => {
                Unavailable::NoPrivileges(format!("{what}: {e}"))
            }
            Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => {
                Unavailable::NoKernelSupport(format!("{what}: {e}"))
            }
            _ => Unavailable::Failed(format!("{what}: {e}")),
        }
    }

    pub(crate) fn program_reason(e: ProgramError, what: &str) -> Unavailable {
        match e {
            ProgramError::LoadError {
                io_error,
                verifier_log,
            } => match io_error.raw_os_error() {
                Some(libc::EPERM) => io_reason(&io_error, what),
                _ => {
                    let log = verifier_log.to_string();
                    if log.trim().is_empty() {
                        io_reason(&io_error, what)
                    } else {
                        Unavailable::Refused(format!("{what}: {io_error}: {log}"))
                    }
                }
            },
            ProgramError::SyscallError(e) => io_reason(&e.io_error, what),
            other => Unavailable::Failed(format!("{what}: {other}")),
        }
    }

    pub(super) fn load(capacity: u32, max_held: u32) -> Result<Loaded, Unavailable> {
        let mut ebpf = load_object(
            EbpfLoader::new()
                .map_max_entries("echo_socks", capacity)
                .map_max_entries("echo_state", capacity)
                .override_global("max_held", &max_held, true),
            ECHO,
            "echo",
        )?;
        let map = ebpf
            .take_map("echo_socks")
            .ok_or_else(|| Unavailable::Failed("the echo object has no map `echo_socks`".into()))?;
        // Not aya's SockHash, which wants 4-byte values: 8-byte ones read back as the
        // socket's cookie.
        let Map::SockHash(map) = map else {
            return Err(Unavailable::Failed("`echo_socks` is not a sockhash".into()));
        };
        let Some(Map::LruHashMap(state)) = ebpf.take_map("echo_state") else {
            return Err(Unavailable::Failed(
                "the echo object has no LRU hash `echo_state`".into(),
            ));
        };
        let map_fd = map.fd().as_fd().as_raw_fd();
        load_and_attach(
            &mut ebpf,
            "echo",
            "echo_verdict",
            map_fd,
            BPF_SK_SKB_STREAM_VERDICT,
        )?;
        Ok(Loaded::new(ebpf, map, state))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_by_name() {
        for mode in [Mode::Auto, Mode::On, Mode::Off] {
            assert_eq!(mode.name().parse::<Mode>(), Ok(mode));
        }
        assert_eq!(
            "yes".parse::<Mode>(),
            Err("unknown kernel path `yes` (expected auto, on or off)".to_string())
        );
    }

    #[test]
    fn tcp_info_reads_the_byte_counts() {
        // A connected pair on loopback: what one side sent is what the other received.
        use std::io::{Read, Write};
        use std::os::fd::AsFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        client.write_all(&[7; 1000]).unwrap();
        let mut buf = [0; 1000];
        server.read_exact(&mut buf).unwrap();
        assert_eq!(bytes_received(server.as_fd()).unwrap(), 1000);
        assert_eq!(unread(server.as_fd()).unwrap(), 0);
        server.write_all(&[8; 300]).unwrap();
        client.read_exact(&mut buf[..300]).unwrap();
        assert_eq!(bytes_written(server.as_fd()).unwrap(), 300);
        assert!(since_last_input(server.as_fd()).unwrap() < std::time::Duration::from_secs(5));
    }
}
