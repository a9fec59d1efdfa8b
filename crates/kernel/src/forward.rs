//! The Thrift forwarder in the kernel (`src/bpf/forward.bpf.c`): a stream parser frames the
//! framed transport's messages on the clients' sockets, and a stream verdict sends each
//! canonical `msg` call to its destination's socket, the rest up to user space.
//!
//! The rules a service follows to keep every client's messages whole and in order per
//! destination (the program's header says why):
//! - a client joins ([`ForwardPath::join`]) only when user space holds nothing of its input
//!   and every message it forwarded for it has reached the kernel's queues;
//! - a destination socket is registered ([`ForwardPath::register`]) once user space has
//!   nothing queued for it, and from then on user space never writes to it: its own messages
//!   go through the worker's injector ([`ForwardPath::join_injector`]), a connection the
//!   verdict routes like a client;
//! - what goes up is forwarded by user space, which then says how much it took
//!   ([`ForwardPath::report`]); the kernel goes back to routing the client only when that
//!   is all that went up.

use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;

use crate::{
    map_delete, map_lookup, map_update, socket_cookie, Mode, TakeOverError, Unavailable,
    BPF_NOEXIST,
};

/// The kernel's handle on a socket in the forwarder's map: its cookie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Joined(u64);

/// What the verdict did with a joined socket's input so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Bytes passed up to user space.
    pub passed: u64,
    /// Bytes the verdict has seen.
    pub seen: u64,
    /// Messages dropped (an injector's, whose destination was gone).
    pub lost: u64,
    /// Everything that comes goes up (`FWD_PASSING` or `FWD_UNFRAMED`).
    pub passing: bool,
    /// More went up than user space took out ([`ForwardPath::report`]): what came since was
    /// dropped, so the connection must be reset.
    pub overflowed: bool,
    /// Once the kernel has begun to parse the socket: the bytes user space had read from it
    /// by then (its receives may deliver some after the socket joined). What user space
    /// takes beyond those came up from the kernel.
    pub start: Option<u64>,
}

/// `struct fwd_taken` of forward.bpf.c.
#[repr(C)]
struct FwdTaken {
    forwarded: u64,
    read: u64,
}

/// `struct fwd_state` of forward.bpf.c.
#[repr(C)]
#[derive(Default)]
struct FwdState {
    tag: u64,
    passed: u64,
    seen: u64,
    lost: u64,
    routes: u32,
    state: u32,
    msg_seq: u32,
    head_seq: u32,
    msg_len: u32,
    flags: u32,
    start_bytes: u64,
}

/// `struct dest_held` of forward.bpf.c.
#[repr(C)]
#[derive(Default)]
struct DestHeld {
    redirected: u64,
    base_seq: u32,
    fresh: u32,
}

/// `struct dest_key` of forward.bpf.c.
#[repr(C)]
struct DestKey {
    tag: u64,
    route: u32,
    pad: u32,
}

const FWD_KERNEL: u32 = 0;
const FWD_PASSING: u32 = 1;
const FWD_UNFRAMED: u32 = 2;
const FWD_INJECTOR: u32 = 3;
const FWD_OVERFLOW: u32 = 4;
const FLAG_STARTED: u32 = 1;

/// The in-kernel forwarder: the clients' sockhash (with the parser and verdict), the
/// destinations' sockhash, and the per-socket state. One per process, shared by its workers
/// (and prefork's processes); each worker names its destinations with a tag of its own.
pub struct ForwardPath {
    #[cfg(kernel_path)]
    _loaded: imp::Loaded,
    clients_fd: RawFd,
    dests_fd: RawFd,
    state_fd: RawFd,
    taken_fd: RawFd,
    held_fd: RawFd,
    capacity: u32,
    max_frame: u32,
}

impl fmt::Debug for ForwardPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ForwardPath")
            .field("clients_fd", &self.clients_fd)
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl ForwardPath {
    /// Loads the forwarder's programs and maps: `capacity` client sockets, `destinations`
    /// destination sockets (workers × routes), messages framed up to `max_frame` bytes, and
    /// up to `max_held` bytes held in the kernel for a destination whose send buffer is full
    /// before clients' messages go up instead (and as much gone up to a client's user space
    /// and not taken out before the client is given up).
    pub fn load(
        capacity: u32,
        destinations: u32,
        max_frame: u32,
        max_held: u32,
    ) -> Result<Self, Unavailable> {
        #[cfg(kernel_path)]
        {
            let loaded = imp::load(capacity, destinations, max_frame, max_held)?;
            Ok(ForwardPath {
                clients_fd: loaded.fd("fwd_clients"),
                dests_fd: loaded.fd("fwd_dests"),
                state_fd: loaded.fd("fwd_state"),
                taken_fd: loaded.fd("fwd_taken"),
                held_fd: loaded.fd("fwd_held"),
                _loaded: loaded,
                capacity,
                max_frame,
            })
        }
        #[cfg(not(kernel_path))]
        {
            let _ = (capacity, destinations, max_frame, max_held);
            Err(Unavailable::NotBuilt)
        }
    }

    /// How many client sockets the map holds at most.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// The longest frame the kernel routes; a client that sends a longer one is left to user
    /// space from there on.
    pub fn max_frame(&self) -> u32 {
        self.max_frame
    }

    /// Puts client `socket` in the map: its messages go to worker `tag`'s destinations
    /// (`key mod routes`). Nothing may wait unread in the socket or in user space. With
    /// `passing`, everything it sends goes up until user space calls
    /// [`ForwardPath::report`] (what it forwarded before is still on its way).
    pub fn join(
        &self,
        socket: BorrowedFd<'_>,
        tag: u64,
        routes: u32,
        passing: bool,
    ) -> Result<Joined, TakeOverError> {
        let state = if passing { FWD_PASSING } else { FWD_KERNEL };
        self.add(socket, tag, routes, state)
    }

    /// Puts the receiving end of worker `tag`'s injector for destination `route` in the
    /// map: each message user space writes into its other end goes whole to that destination
    /// behind what the kernel queued for it already, and nothing comes up.
    pub fn join_injector(
        &self,
        socket: BorrowedFd<'_>,
        tag: u64,
        route: u32,
    ) -> Result<Joined, TakeOverError> {
        self.add(socket, tag, route, FWD_INJECTOR)
    }

    fn add(
        &self,
        socket: BorrowedFd<'_>,
        tag: u64,
        routes: u32,
        state: u32,
    ) -> Result<Joined, TakeOverError> {
        let cookie = socket_cookie(socket).map_err(TakeOverError::Io)?;
        let st = FwdState {
            tag,
            routes,
            state,
            ..FwdState::default()
        };
        map_update(self.state_fd, &cookie, &st, 0).map_err(TakeOverError::Io)?;
        // Never what went up (0) before user space says so.
        let taken = FwdTaken {
            forwarded: u64::MAX,
            read: 0,
        };
        map_update(self.taken_fd, &cookie, &taken, 0).map_err(TakeOverError::Io)?;
        let fd = socket.as_raw_fd() as u64;
        match map_update(self.clients_fd, &cookie, &fd, BPF_NOEXIST) {
            Ok(()) => {
                // Bytes that arrived between the caller's check and now: the socket's
                // data-ready callback runs the parser over them (see EchoPath::take_over).
                kick(socket);
                Ok(Joined(cookie))
            }
            Err(e) => {
                self.release(Joined(cookie));
                Err(full_or(e))
            }
        }
    }

    /// Registers `socket` as worker `tag`'s destination `route` (replacing a socket gone
    /// since). User space must have nothing queued for it, and writes nothing to it from now.
    pub fn register(
        &self,
        socket: BorrowedFd<'_>,
        tag: u64,
        route: u32,
    ) -> Result<(), TakeOverError> {
        let key = DestKey { tag, route, pad: 0 };
        let held = DestHeld {
            redirected: 0,
            base_seq: 0,
            fresh: 1,
        };
        map_update(self.held_fd, &key, &held, 0).map_err(full_or)?;
        let fd = socket.as_raw_fd() as u64;
        map_update(self.dests_fd, &key, &fd, 0).map_err(|e| {
            let _ = map_delete(self.held_fd, &key);
            full_or(e)
        })
    }

    /// Bytes the kernel has redirected to worker `tag`'s destination `route` since it was
    /// registered. Less what has reached its send queue since, it is what the kernel holds.
    pub fn redirected(&self, tag: u64, route: u32) -> u64 {
        let key = DestKey { tag, route, pad: 0 };
        let mut held = DestHeld::default();
        match map_lookup(self.held_fd, &key, &mut held) {
            Ok(()) => held.redirected,
            Err(_) => 0,
        }
    }

    /// Takes worker `tag`'s destination `route` out (its connection is closing); the kernel
    /// closing the socket takes it out too.
    pub fn unregister(&self, tag: u64, route: u32) {
        let key = DestKey { tag, route, pad: 0 };
        let _ = map_delete(self.dests_fd, &key);
        let _ = map_delete(self.held_fd, &key);
    }

    /// What the verdict did with `joined`'s input so far.
    pub fn counts(&self, joined: Joined) -> Option<Counts> {
        let mut st = FwdState::default();
        map_lookup(self.state_fd, &joined.0, &mut st).ok()?;
        Some(Counts {
            passed: st.passed,
            seen: st.seen,
            lost: st.lost,
            passing: st.state == FWD_PASSING || st.state == FWD_UNFRAMED,
            overflowed: st.state == FWD_OVERFLOW,
            start: (st.flags & FLAG_STARTED != 0).then_some(st.start_bytes),
        })
    }

    /// User space has taken the first `read` bytes of what went up from `joined` out of it;
    /// with `forwarded`, it also holds none of its input and has forwarded all of them into
    /// the kernel's queues: once that is all that went up, the kernel routes its messages
    /// again.
    pub fn report(&self, joined: Joined, read: u64, forwarded: bool) {
        let taken = FwdTaken {
            forwarded: if forwarded { read } else { u64::MAX },
            read,
        };
        let _ = map_update(self.taken_fd, &joined.0, &taken, 0);
    }

    /// Forgets `joined`'s state, once its connection is closed (the socket leaves the
    /// sockhash by itself).
    pub fn release(&self, joined: Joined) {
        let _ = map_delete(self.state_fd, &joined.0);
        let _ = map_delete(self.taken_fd, &joined.0);
    }
}

fn full_or(e: std::io::Error) -> TakeOverError {
    match e.raw_os_error() {
        Some(libc::E2BIG) | Some(libc::ENOMEM) => TakeOverError::Full,
        _ => TakeOverError::Io(e),
    }
}

/// Runs the socket's data-ready callback (tcp_set_rcvlowat does), so that bytes already
/// queued are parsed now rather than at the next arrival.
fn kick(socket: BorrowedFd<'_>) {
    let one: libc::c_int = 1;
    // SAFETY: SO_RCVLOWAT reads one int.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// Loads the forwarder's kernel path for `mode` and logs in one line whether it is on and,
/// if not, why (as [`crate::echo_path`]).
pub fn forward_path(
    mode: Mode,
    capacity: u32,
    destinations: u32,
    max_frame: u32,
    max_held: u32,
) -> Result<Option<Arc<ForwardPath>>, String> {
    let (path, line) = forward_outcome(mode, capacity, destinations, max_frame, max_held)?;
    tracing::info!("{line}");
    Ok(path)
}

/// [`forward_path`] without the log: the path and the line saying what was decided (as
/// [`crate::echo_outcome`]).
pub fn forward_outcome(
    mode: Mode,
    capacity: u32,
    destinations: u32,
    max_frame: u32,
    max_held: u32,
) -> Result<(Option<Arc<ForwardPath>>, String), String> {
    if mode == Mode::Off {
        return Ok((None, "kernel path: off (kernel_path = \"off\")".to_string()));
    }
    match ForwardPath::load(capacity, destinations, max_frame, max_held) {
        Ok(path) => Ok((
            Some(Arc::new(path)),
            format!(
                "kernel path: on (forward: sk_skb stream parser framing messages up to {max_frame} \
                 bytes, verdict redirecting `msg` calls to their destination's socket, sockhash \
                 of {capacity} clients; kernel_path = \"{}\")",
                mode.name()
            ),
        )),
        Err(why) if mode == Mode::On => Err(format!("kernel path: cannot be had: {why}")),
        Err(why) => Ok((None, format!("kernel path: off: {why}"))),
    }
}

#[cfg(kernel_path)]
mod imp {
    use std::collections::HashMap;
    use std::os::fd::{AsFd, AsRawFd, RawFd};

    use aya::maps::{Map, MapData};
    use aya::{Ebpf, EbpfLoader};

    use crate::imp::{load_and_attach, load_object};
    use crate::Unavailable;

    const BPF_SK_SKB_STREAM_PARSER: u32 = 4;
    const BPF_SK_SKB_STREAM_VERDICT: u32 = 5;

    static FORWARD: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/forward.bpf.o"));

    /// The object (programs and their attachments) and the maps, kept open.
    pub(super) struct Loaded {
        _ebpf: Ebpf,
        maps: HashMap<&'static str, MapData>,
    }

    // SAFETY: as echo's: only the maps' descriptors are used after loading.
    unsafe impl Sync for Loaded {}
    unsafe impl Send for Loaded {}

    impl Loaded {
        pub(super) fn fd(&self, name: &str) -> RawFd {
            self.maps[name].fd().as_fd().as_raw_fd()
        }
    }

    pub(super) fn load(
        capacity: u32,
        destinations: u32,
        max_frame: u32,
        max_held: u32,
    ) -> Result<Loaded, Unavailable> {
        let states = capacity.saturating_mul(2).saturating_add(destinations);
        let mut ebpf = load_object(
            EbpfLoader::new()
                .map_max_entries("fwd_clients", capacity)
                .map_max_entries("fwd_dests", destinations.max(1))
                .map_max_entries("fwd_held", destinations.max(1))
                .map_max_entries("fwd_state", states)
                .map_max_entries("fwd_taken", states)
                .override_global("max_frame", &max_frame, true)
                .override_global("max_held", &max_held, true)
                .override_global("max_up", &max_held, true),
            FORWARD,
            "forward",
        )?;
        let mut maps = HashMap::new();
        for name in [
            "fwd_clients",
            "fwd_dests",
            "fwd_state",
            "fwd_taken",
            "fwd_held",
        ] {
            let data = match ebpf.take_map(name) {
                Some(Map::SockHash(m)) | Some(Map::LruHashMap(m)) | Some(Map::HashMap(m)) => m,
                _ => {
                    return Err(Unavailable::Failed(format!(
                        "the forward object has no map `{name}` of the expected type"
                    )))
                }
            };
            maps.insert(name, data);
        }
        let clients = maps["fwd_clients"].fd().as_fd().as_raw_fd();
        for (name, attach) in [
            ("fwd_parser", BPF_SK_SKB_STREAM_PARSER),
            ("fwd_verdict", BPF_SK_SKB_STREAM_VERDICT),
        ] {
            load_and_attach(&mut ebpf, "forward", name, clients, attach)?;
        }
        Ok(Loaded { _ebpf: ebpf, maps })
    }
}

#[cfg(all(test, kernel_path))]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;
    use std::time::Duration;

    use super::*;

    /// A connected pair on loopback: (the end that connected, the accepted end).
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (b, _) = listener.accept().unwrap();
        for s in [&a, &b] {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        (a, b)
    }

    /// A framed `msg(key, payload)`, strict, oneway; `name` replaces "msg".
    fn msg(name: &[u8; 3], key: i32, payload: &[u8]) -> Vec<u8> {
        let mut body = 0x8001_0004u32.to_be_bytes().to_vec();
        body.extend_from_slice(&3u32.to_be_bytes());
        body.extend_from_slice(name);
        body.extend_from_slice(&7i32.to_be_bytes());
        body.extend_from_slice(&[8, 0, 1]);
        body.extend_from_slice(&key.to_be_bytes());
        body.extend_from_slice(&[11, 0, 2]);
        body.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        body.extend_from_slice(payload);
        body.push(0);
        let mut framed = (body.len() as u32).to_be_bytes().to_vec();
        framed.extend_from_slice(&body);
        framed
    }

    /// The path, or None (said) where this process may not load BPF programs; any other
    /// failure fails the test.
    fn load_or_skip(max_frame: u32) -> Option<ForwardPath> {
        load_held_or_skip(max_frame, 1 << 20)
    }

    fn load_held_or_skip(max_frame: u32, max_held: u32) -> Option<ForwardPath> {
        match ForwardPath::load(64, 8, max_frame, max_held) {
            Ok(path) => Some(path),
            Err(Unavailable::NoPrivileges(why)) => {
                eprintln!("SKIP: no privileges to load BPF programs: {why}");
                None
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// Up to `n` bytes from `s`, fewer if it ends or is silent for its timeout.
    fn read_up_to(s: &mut TcpStream, n: usize) -> Vec<u8> {
        let mut buf = vec![0; n];
        let mut got = 0;
        while got < n {
            match s.read(&mut buf[got..]) {
                Ok(0) | Err(_) => break,
                Ok(k) => got += k,
            }
        }
        buf.truncate(got);
        buf
    }

    /// `n` bytes from `s`, or a failure saying how many came.
    fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
        let mut buf = vec![0; n];
        let mut got = 0;
        while got < n {
            match s.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) => panic!("{got} of {n} bytes came: {e}; {:?}", &buf[..got]),
            }
        }
        assert_eq!(got, n, "the connection ended");
        buf
    }

    #[test]
    fn routes_canonical_messages_and_passes_up_the_rest_in_order() {
        let Some(path) = load_or_skip(65536) else {
            return;
        };
        let tag = 42;
        // Two destinations: the forwarder's ends are registered, the tests read the others.
        let (d0, mut d0_peer) = pair();
        let (d1, mut d1_peer) = pair();
        path.register(d0.as_fd(), tag, 0).unwrap();
        path.register(d1.as_fd(), tag, 1).unwrap();
        let (mut client, mut served) = pair();
        let joined = path.join(served.as_fd(), tag, 2, false).unwrap();
        // Several messages in one write (one skb), keys of both signs.
        let (a, b, c) = (
            msg(b"msg", 4, b"aaaa"),
            msg(b"msg", -3, b"bb"),
            msg(b"msg", 1, b""),
        );
        let mut burst = a.clone();
        burst.extend_from_slice(&b);
        burst.extend_from_slice(&c);
        client.write_all(&burst).unwrap();
        assert_eq!(read_n(&mut d0_peer, a.len()), a);
        let mut want1 = b.clone();
        want1.extend_from_slice(&c);
        assert_eq!(read_n(&mut d1_peer, want1.len()), want1);
        // Another method goes up, and so does the routable message behind it.
        let other = msg(b"get", 0, b"x");
        let after = msg(b"msg", 0, b"after");
        let mut both = other.clone();
        both.extend_from_slice(&after);
        client.write_all(&both).unwrap();
        assert_eq!(read_n(&mut served, both.len()), both);
        let counts = path.counts(joined).unwrap();
        assert!(counts.passing);
        assert_eq!(counts.passed, both.len() as u64);
        // Once user space says it took all of it, the kernel routes again.
        path.report(joined, counts.passed, true);
        let again = msg(b"msg", 2, b"again");
        client.write_all(&again).unwrap();
        assert_eq!(read_n(&mut d0_peer, again.len()), again);
        assert!(!path.counts(joined).unwrap().passing);
        // A destination that is not registered: its message goes up.
        path.unregister(tag, 1);
        let lone = msg(b"msg", 1, b"lone");
        client.write_all(&lone).unwrap();
        assert_eq!(read_n(&mut served, lone.len()), lone);
        path.release(joined);
        drop((d0, d1));
    }

    #[test]
    fn messages_cut_anywhere_arrive_whole_and_in_order() {
        // No limit on what the kernel holds: nothing here forwards what would go up.
        let Some(path) = load_held_or_skip(65536, u32::MAX) else {
            return;
        };
        let (d0, mut d0_peer) = pair();
        let (d1, mut d1_peer) = pair();
        path.register(d0.as_fd(), 5, 0).unwrap();
        path.register(d1.as_fd(), 5, 1).unwrap();
        let (client, served) = pair();
        client.set_nodelay(true).unwrap();
        let joined = path.join(served.as_fd(), 5, 2, false).unwrap();
        let mut stream = Vec::new();
        let mut want = [Vec::new(), Vec::new()];
        for i in 0..2000usize {
            let key = i as i32 * 7 - 5000;
            let m = msg(b"msg", key, &vec![i as u8; (i * 37) % 3001]);
            want[key.rem_euclid(2) as usize].extend_from_slice(&m);
            stream.extend_from_slice(&m);
        }
        let writer = std::thread::spawn(move || {
            let mut client = client;
            // Cuts of every size from 1 byte to several messages.
            let mut at = 0;
            let mut n = 1;
            while at < stream.len() {
                let end = (at + n).min(stream.len());
                client.write_all(&stream[at..end]).unwrap();
                at = end;
                n = (n * 5 + 3) % 9001;
            }
            client
        });
        let [want0, want1] = want;
        let r1 = std::thread::spawn(move || read_up_to(&mut d1_peer, want1.len()) == want1);
        let got0 = read_up_to(&mut d0_peer, want0.len());
        let ok1 = r1.join().unwrap();
        assert!(
            got0 == want0 && ok1,
            "destination 0: {} of {} bytes, as sent: {}; destination 1 as sent: {ok1}; {:?}",
            got0.len(),
            want0.len(),
            want0.starts_with(&got0),
            path.counts(joined)
        );
        assert!(!path.counts(joined).unwrap().passing);
        drop((writer.join().unwrap(), served, d0, d1));
    }

    #[test]
    fn a_destination_that_does_not_read_sends_the_messages_up() {
        let Some(path) = load_held_or_skip(65536, 64 * 1024) else {
            return;
        };
        let (d0, d0_peer) = pair();
        path.register(d0.as_fd(), 3, 0).unwrap();
        let (client, served) = pair();
        let joined = path.join(served.as_fd(), 3, 1, false).unwrap();
        // The destination's peer never reads: its buffers fill, then the kernel's count.
        let stop = client.try_clone().unwrap();
        let writer = std::thread::spawn(move || {
            let mut client = client;
            let m = msg(b"msg", 0, &[1; 1000]);
            for _ in 0..32 * 1024 {
                if client.write_all(&m).is_err() {
                    break;
                }
            }
        });
        let passing = (0..500).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            let c = path.counts(joined).unwrap();
            c.passing || c.overflowed
        });
        assert!(passing, "the kernel never stopped redirecting");
        let redirected = path.redirected(3, 0);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(path.redirected(3, 0), redirected, "redirects went on");
        assert!(redirected < 16 << 20, "{redirected} bytes redirected");
        stop.shutdown(std::net::Shutdown::Both).unwrap();
        writer.join().unwrap();
        drop((served, d0, d0_peer));
    }

    #[test]
    fn an_injector_routes_and_counts_what_it_cannot() {
        let Some(path) = load_or_skip(65536) else {
            return;
        };
        let (d0, mut d0_peer) = pair();
        path.register(d0.as_fd(), 9, 0).unwrap();
        let (mut inject, injected) = pair();
        let joined = path.join_injector(injected.as_fd(), 9, 0).unwrap();
        // Any framed message goes, whatever its key or method.
        let (a, b) = (msg(b"msg", 1, b"one"), msg(b"get", 0, b"other"));
        inject.write_all(&a).unwrap();
        inject.write_all(&b).unwrap();
        let mut want = a.clone();
        want.extend_from_slice(&b);
        assert_eq!(read_n(&mut d0_peer, want.len()), want);
        // Its destination gone, what comes is dropped and counted.
        path.unregister(9, 0);
        inject.write_all(&a).unwrap();
        let counted = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            path.counts(joined).unwrap().lost == 1
        });
        assert!(counted);
        assert_eq!(
            path.counts(joined).unwrap().seen,
            (2 * a.len() + b.len()) as u64
        );
    }

    #[test]
    fn a_frame_past_the_limit_sends_the_rest_up() {
        let Some(path) = load_or_skip(1024) else {
            return;
        };
        let (d0, mut d0_peer) = pair();
        path.register(d0.as_fd(), 1, 0).unwrap();
        let (mut client, mut served) = pair();
        let joined = path.join(served.as_fd(), 1, 1, false).unwrap();
        let big = msg(b"msg", 0, &[5; 3000]);
        let small = msg(b"msg", 0, b"small");
        let mut both = big.clone();
        both.extend_from_slice(&small);
        client.write_all(&both).unwrap();
        assert_eq!(read_n(&mut served, both.len()), both);
        assert!(path.counts(joined).unwrap().passing);
        d0_peer
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        assert!(
            d0_peer.read(&mut [0; 16]).is_err(),
            "nothing reached the destination"
        );
        drop(d0);
    }
}
