//! The HTTP bridge in the kernel (`bridge.bpf.c`): a client socket and its backend socket are
//! joined in a sockhash, each one's ingress redirected to the other's egress, instead of
//! being spliced through pipes by the engine.
//!
//! The engine keeps both descriptors and their events (the peers' ends and resets, which a
//! socket in a sockhash still reports), and the server's carrier ([`BridgePath::join`]) only
//! puts pairs in and takes them out.

use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;

use crate::{
    map_delete, map_lookup, map_update, socket_cookie, Mode, TakeOverError, Unavailable,
    BPF_NOEXIST,
};

/// The in-kernel bridge: one per process, shared by its workers (and inherited by prefork's
/// processes, whose descriptors point at the same maps).
pub struct BridgePath {
    #[cfg(kernel_path)]
    _loaded: imp::Loaded,
    map_fd: RawFd,
    state_fd: RawFd,
    pairs: u32,
    limit: u32,
}

impl fmt::Debug for BridgePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BridgePath")
            .field("map_fd", &self.map_fd)
            .field("pairs", &self.pairs)
            .field("limit", &self.limit)
            .finish()
    }
}

/// `struct bridge_state` of bridge.bpf.c.
#[repr(C)]
#[derive(Default)]
struct BridgeState {
    peer: u64,
    redirected: u64,
    base_seq: u32,
    limit: u32,
    state: u32,
    pad: u32,
}

const BRIDGE_OVERFLOW: u32 = 2;

/// A pair the kernel bridges: the two sockets' cookies, the keys of their entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Joined {
    client: u64,
    backend: u64,
}

impl BridgePath {
    /// Loads the bridge program and its map for `pairs` joined pairs, each direction of which
    /// may have up to `limit` bytes waiting in the kernel beyond the destination's send buffer.
    pub fn load(pairs: u32, limit: u32) -> Result<BridgePath, Unavailable> {
        #[cfg(kernel_path)]
        {
            let loaded = imp::load(pairs.saturating_mul(2).max(2))?;
            Ok(BridgePath {
                map_fd: loaded.map_fd(),
                state_fd: loaded.state_fd(),
                _loaded: loaded,
                pairs,
                limit,
            })
        }
        #[cfg(not(kernel_path))]
        {
            let _ = (pairs, limit);
            Err(Unavailable::NotBuilt)
        }
    }

    /// How many pairs the map holds at most.
    pub fn capacity(&self) -> u32 {
        self.pairs
    }

    /// Bytes the kernel may hold for a destination beyond its send buffer.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Joins `client` and `backend` (connected TCP sockets): from now on what arrives on
    /// either is sent to the other by the kernel. As with the echo, the caller must have sent
    /// everything it read before and nothing may wait unread in either socket (`unread`),
    /// or the kernel would pass on again the part of an skb user space had read.
    ///
    /// [`TakeOverError::Full`] when the map is full: the caller bridges in user space.
    pub fn join(
        &self,
        client: BorrowedFd<'_>,
        backend: BorrowedFd<'_>,
    ) -> Result<Joined, TakeOverError> {
        let joined = Joined {
            client: socket_cookie(client).map_err(TakeOverError::Io)?,
            backend: socket_cookie(backend).map_err(TakeOverError::Io)?,
        };
        // The states first: the program passes up what arrives on a socket it has no state
        // for, which would end the connection.
        for (me, peer) in [
            (joined.client, joined.backend),
            (joined.backend, joined.client),
        ] {
            let state = BridgeState {
                peer,
                limit: self.limit,
                ..BridgeState::default()
            };
            if let Err(e) = map_update(self.state_fd, &me, &state, BPF_NOEXIST) {
                self.forget(joined);
                return Err(full_or(e));
            }
        }
        // Until both are in, a socket's verdict would find no peer (and pass its bytes up to
        // user space, see bridge.bpf.c): a high SO_RCVLOWAT keeps the kernel from running it
        // (tcp_data_ready calls the socket's data-ready callback only past the low-water mark),
        // so what arrives meanwhile waits in the receive queue, and setting it back to 1 below
        // runs the verdict over it with both in the map.
        for fd in [client, backend] {
            set_rcvlowat(fd, HOLD_LOWAT);
        }
        for (cookie, fd) in [(joined.backend, backend), (joined.client, client)] {
            let raw = fd.as_raw_fd() as u64;
            if let Err(e) = map_update(self.map_fd, &cookie, &raw, BPF_NOEXIST) {
                self.leave(joined);
                for fd in [client, backend] {
                    set_rcvlowat(fd, 1);
                }
                return Err(full_or(e));
            }
        }
        // Bytes that arrived between the caller's check and the attachment wait in the
        // receive queue until the next arrival runs the verdict: setting SO_RCVLOWAT runs the
        // socket's data-ready callback now (tcp_set_rcvlowat), so they go on at once, in order.
        for fd in [client, backend] {
            set_rcvlowat(fd, 1);
        }
        Ok(joined)
    }

    /// Whether the kernel stopped carrying what `joined`'s client (`from_client`) or
    /// backend sends, because its destination fell more than [`BridgePath::limit`] bytes
    /// behind (it does not read): then the bytes it carried that way before. What the side
    /// sends from then on waits unread in its socket (readable as usual, and held back by TCP
    /// once the socket's receive buffer is full) for user space to pass on, after those.
    pub fn stopped(&self, joined: Joined, from_client: bool) -> Option<u64> {
        let cookie = if from_client {
            joined.client
        } else {
            joined.backend
        };
        let mut state = BridgeState::default();
        (map_lookup(self.state_fd, &cookie, &mut state).is_ok() && state.state == BRIDGE_OVERFLOW)
            .then_some(state.redirected)
    }

    /// Takes the pair out of the map: both sockets are ordinary sockets again (whatever the
    /// kernel still held for them is dropped: leave only once it has all been sent).
    pub fn leave(&self, joined: Joined) {
        let _ = map_delete(self.map_fd, &joined.client);
        let _ = map_delete(self.map_fd, &joined.backend);
        self.forget(joined);
    }

    fn forget(&self, joined: Joined) {
        let _ = map_delete(self.state_fd, &joined.client);
        let _ = map_delete(self.state_fd, &joined.backend);
    }
}

/// The receive low-water mark that holds a socket's verdict back while a pair goes in.
const HOLD_LOWAT: libc::c_int = 256 * 1024;

fn set_rcvlowat(fd: BorrowedFd<'_>, bytes: libc::c_int) {
    let _ =
        fastpath_sys::setsockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT, bytes);
}

fn full_or(e: std::io::Error) -> TakeOverError {
    match e.raw_os_error() {
        Some(libc::E2BIG) | Some(libc::ENOMEM) | Some(libc::ENOSPC) => TakeOverError::Full,
        _ => TakeOverError::Io(e),
    }
}

/// Loads the bridge for `mode`, and logs in one line whether the kernel path is on for
/// bridged connections and, if not, why. `Ok(None)`: splice (off, or auto where it cannot be
/// had); `Err`: `mode` is [`Mode::On`] and it cannot be had, the start must fail with this
/// reason.
pub fn bridge_path(
    mode: Mode,
    pairs: u32,
    limit: u32,
    scope: &str,
) -> Result<Option<Arc<BridgePath>>, String> {
    if mode == Mode::Off {
        tracing::info!("kernel path: off for {scope} (kernel_path = \"off\")");
        return Ok(None);
    }
    match BridgePath::load(pairs, limit) {
        Ok(path) => {
            tracing::info!(
                "kernel path: on for {scope} (bridge: sk_skb stream verdict redirecting each \
                 socket to its peer, sockhash of {pairs} pairs; kernel_path = \"{}\")",
                mode.name()
            );
            Ok(Some(Arc::new(path)))
        }
        Err(why) if mode == Mode::On => Err(format!("kernel path: cannot be had: {why}")),
        Err(why) => {
            tracing::info!("kernel path: off for {scope}: {why}");
            Ok(None)
        }
    }
}

#[cfg(kernel_path)]
mod imp {
    use std::os::fd::{AsFd, AsRawFd};

    use aya::maps::Map;
    use aya::EbpfLoader;

    pub(super) use crate::imp::Loaded;
    use crate::imp::{load_and_attach, load_object};
    use crate::Unavailable;

    const BPF_SK_SKB_STREAM_VERDICT: u32 = 5;

    static BRIDGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/bridge.bpf.o"));

    pub(super) fn load(sockets: u32) -> Result<Loaded, Unavailable> {
        let mut ebpf = load_object(
            EbpfLoader::new()
                .map_max_entries("bridge_socks", sockets)
                .map_max_entries("bridge_state", sockets),
            BRIDGE,
            "bridge",
        )?;
        let Some(Map::SockHash(map)) = ebpf.take_map("bridge_socks") else {
            return Err(Unavailable::Failed(
                "the bridge object has no sockhash `bridge_socks`".into(),
            ));
        };
        let Some(Map::HashMap(state)) = ebpf.take_map("bridge_state") else {
            return Err(Unavailable::Failed(
                "the bridge object has no hash `bridge_state`".into(),
            ));
        };
        let map_fd = map.fd().as_fd().as_raw_fd();
        load_and_attach(
            &mut ebpf,
            "bridge",
            "bridge_verdict",
            map_fd,
            BPF_SK_SKB_STREAM_VERDICT,
        )?;
        Ok(Loaded::new(ebpf, map, state))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::os::fd::AsFd;
    use std::time::Duration;

    /// A client connected to "the server" and "the server" connected to a backend: the two
    /// server-side sockets are what the bridge joins. (client, server_client, server_backend,
    /// backend)
    fn two_connections() -> (TcpStream, TcpStream, TcpStream, TcpStream) {
        let front = TcpListener::bind("127.0.0.1:0").unwrap();
        let back = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(front.local_addr().unwrap()).unwrap();
        let (server_client, _) = front.accept().unwrap();
        let server_backend = TcpStream::connect(back.local_addr().unwrap()).unwrap();
        let (backend, _) = back.accept().unwrap();
        (client, server_client, server_backend, backend)
    }

    fn peek(s: &TcpStream) -> std::io::Result<usize> {
        s.set_nonblocking(true).unwrap();
        let mut b = [0u8; 1];
        let r = s.peek(&mut b);
        s.set_nonblocking(false).unwrap();
        r
    }

    fn loaded(limit: u32) -> Option<BridgePath> {
        match BridgePath::load(4, limit) {
            Ok(path) => Some(path),
            Err(Unavailable::NotBuilt) | Err(Unavailable::NoPrivileges(_)) => {
                eprintln!("SKIP: the kernel path cannot be had here");
                None
            }
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_joined_pair_passes_bytes_both_ways_and_reports_ends() {
        let Some(path) = loaded(1 << 20) else { return };
        let (mut client, sc, sb, mut backend) = two_connections();
        let joined = path.join(sc.as_fd(), sb.as_fd()).unwrap();
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let mut buf = [0u8; 18];
        backend.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"GET / HTTP/1.1\r\n\r\n");
        let body = vec![7u8; 300_000];
        backend.write_all(&body).unwrap();
        let mut got = vec![0u8; body.len()];
        client.read_exact(&mut got).unwrap();
        assert!(got == body);
        // Nothing reaches the server's sockets' receive queues.
        assert!(matches!(peek(&sc), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock));
        assert_eq!(crate::bytes_received(sb.as_fd()).unwrap(), 300_000);
        // The client's FIN shows on its server-side socket as an end (a read of 0).
        client.shutdown(Shutdown::Write).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(peek(&sc).unwrap(), 0);
        assert_eq!(path.stopped(joined, true), None);
        assert_eq!(path.stopped(joined, false), None);
        path.leave(joined);
    }

    #[test]
    fn a_destination_that_does_not_read_overflows_at_the_limit() {
        let Some(path) = loaded(256 * 1024) else {
            return;
        };
        let (_client, sc, sb, mut backend) = two_connections();
        let joined = path.join(sc.as_fd(), sb.as_fd()).unwrap();
        backend
            .set_write_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let chunk = vec![1u8; 64 * 1024];
        let mut sent = 0usize;
        // The client never reads: the backend is held back once the kernel gives up.
        while sent < 64 << 20 {
            match backend.write(&chunk) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        assert_eq!(path.stopped(joined, true), None);
        let carried = path.stopped(joined, false).expect("stopped");
        assert!(carried <= sent as u64);
        assert!(sent < 64 << 20, "sent {sent} without being held back");
        // What arrived since waits unread in the server's socket.
        assert!(peek(&sb).unwrap() > 0);
        path.leave(joined);
    }
}
