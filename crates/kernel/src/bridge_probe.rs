//! Whether the in-kernel bridge relays more round trips than splice on the machine it runs
//! on, measured at start rather than assumed: what a bridged route's `kernel_path = "auto"`
//! runs.
//!
//! A bridged connection's bytes pass between two sockets the server holds, a client's and
//! its backend's: joined in the kernel ([`BridgePath::join`]), each arrival is redirected to
//! the other socket by a verdict program and finished by a kernel worker; spliced, the engine
//! moves them through a pipe with two `splice` calls a direction. Which moves more depends on
//! the kernel and the machine (BENCHMARKS.md, "Hand-over: the bridge in the kernel": the
//! kernel had fewer replies per second at 1 KiB on a quiet machine, and the most at 100
//! KiB). So [`probe_bridge`] measures both over [`PAIRS`] loopback pairs of connections: a
//! request of each size goes from a client end to a backend end and an answer of the same
//! size comes back, relayed in turn by the kernel and by splice (a plain loop, no event
//! loop: the cheapest splice there is, so the probe leans towards splice).

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::bridge::BridgePath;
use crate::probe::{connected, interleaved, KernelProbe};

/// The sizes probed: a small response, a mid-size one, a large one.
pub const BRIDGE_PROBE_SIZES: [u32; 3] = [1024, 16 * 1024, 64 * 1024];

/// How long each way relays each size, in all: three interleaved turns.
pub const BRIDGE_PROBE_TIME: Duration = Duration::from_millis(90);

/// Pairs relaying at once.
const PAIRS: usize = 8;

/// Relays round trips of each of `sizes` by splice and through `path`, for `each` per way
/// and size in interleaved turns; an error when either way fails (the caller then splices).
/// A [`KernelProbe`]'s user-space figure is splice's.
pub fn probe_bridge(
    path: &BridgePath,
    sizes: &[u32],
    each: Duration,
) -> io::Result<Vec<KernelProbe>> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    interleaved(
        sizes,
        each,
        |size, turn| splice_turn(&listener, size as usize, turn),
        |size, turn| kernel_turn(path, &listener, size as usize, turn),
    )
}

/// Whether the kernel should bridge: it relayed [`crate::KERNEL_MARGIN`] times splice's
/// round trips or more at every size probed (a connection's sizes are not known when it is
/// joined, so a loss at any size is a loss).
pub fn kernel_bridges_best(results: &[KernelProbe]) -> bool {
    !results.is_empty()
        && results
            .iter()
            .all(|r| r.kernel >= r.user * crate::KERNEL_MARGIN)
}

/// One relayed pair: the client's end and the server's socket for it, the backend's end
/// and the server's socket to it.
struct Pair {
    client: TcpStream,
    near: TcpStream,
    far: TcpStream,
    backend: TcpStream,
}

fn pairs(listener: &TcpListener) -> io::Result<Vec<Pair>> {
    (0..PAIRS)
        .map(|_| {
            let (client, near) = connected(listener)?;
            let (far, backend) = connected(listener)?;
            Ok(Pair {
                client,
                near,
                far,
                backend,
            })
        })
        .collect()
}

/// Round trips per second relayed by splice through a pipe per direction.
fn splice_turn(listener: &TcpListener, size: usize, turn: Duration) -> io::Result<f64> {
    let mut pairs = pairs(listener)?;
    let pipe = Pipe::new()?;
    run(&mut pairs, size, turn, |from, to, size| {
        pipe.relay(from, to, size)
    })
}

/// Round trips per second relayed by the kernel.
fn kernel_turn(
    path: &BridgePath,
    listener: &TcpListener,
    size: usize,
    turn: Duration,
) -> io::Result<f64> {
    let mut pairs = pairs(listener)?;
    let mut joined = Vec::with_capacity(pairs.len());
    for pair in &pairs {
        match path.join(pair.near.as_fd(), pair.far.as_fd()) {
            Ok(j) => joined.push(j),
            Err(e) => {
                joined.into_iter().for_each(|j| path.leave(j));
                return Err(io::Error::other(format!("{e:?}")));
            }
        }
    }
    let relayed = run(&mut pairs, size, turn, |_, _, _| Ok(()));
    for j in joined {
        path.leave(j);
    }
    relayed
}

/// Round trips per second: each round sends a request on every client end, relays it with
/// `relay` (nothing to do when the kernel does it), reads it whole at the backend end,
/// answers with as many bytes, relays and reads that back.
fn run(
    pairs: &mut [Pair],
    size: usize,
    turn: Duration,
    relay: impl Fn(&TcpStream, &TcpStream, usize) -> io::Result<()>,
) -> io::Result<f64> {
    let message = vec![0x5a_u8; size];
    let mut buf = vec![0_u8; size];
    let mut trips = 0_u64;
    let start = Instant::now();
    while start.elapsed() < turn {
        for pair in pairs.iter_mut() {
            pair.client.write_all(&message)?;
        }
        for pair in pairs.iter_mut() {
            relay(&pair.near, &pair.far, size)?;
            pair.backend.read_exact(&mut buf)?;
            pair.backend.write_all(&message)?;
        }
        for pair in pairs.iter_mut() {
            relay(&pair.far, &pair.near, size)?;
            pair.client.read_exact(&mut buf)?;
        }
        trips += pairs.len() as u64;
    }
    Ok(trips as f64 / start.elapsed().as_secs_f64())
}

/// A pipe that `size` bytes are spliced through from one socket to another.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills a two-element array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just opened and are owned by nothing else.
        Ok(unsafe {
            Pipe {
                read: OwnedFd::from_raw_fd(fds[0]),
                write: OwnedFd::from_raw_fd(fds[1]),
            }
        })
    }

    /// Moves `size` bytes from `from` to `to`, as they arrive.
    fn relay(&self, from: &TcpStream, to: &TcpStream, size: usize) -> io::Result<()> {
        let mut left = size;
        while left > 0 {
            let moved = splice(from.as_raw_fd(), self.write.as_raw_fd(), left)?;
            if moved == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let mut queued = moved;
            while queued > 0 {
                queued -= splice(self.read.as_raw_fd(), to.as_raw_fd(), queued)?;
            }
            left -= moved;
        }
        Ok(())
    }
}

fn splice(from: libc::c_int, to: libc::c_int, len: usize) -> io::Result<usize> {
    // SAFETY: splice between two open descriptors, with no offsets.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(size: u32, splice: f64, kernel: f64) -> KernelProbe {
        KernelProbe {
            size,
            user: splice,
            kernel,
        }
    }

    #[test]
    fn the_kernel_bridges_only_when_ahead_at_every_size() {
        let everywhere = [probe(1024, 100.0, 120.0), probe(65536, 10.0, 30.0)];
        assert!(kernel_bridges_best(&everywhere));
        let small_loss = [probe(1024, 100.0, 80.0), probe(65536, 10.0, 30.0)];
        assert!(!kernel_bridges_best(&small_loss));
        let within_noise = [probe(1024, 100.0, 105.0), probe(65536, 10.0, 30.0)];
        assert!(!kernel_bridges_best(&within_noise));
        assert!(!kernel_bridges_best(&[]));
    }

    #[test]
    fn splice_relays_whole_messages_both_ways() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let trips = splice_turn(&listener, 64 * 1024, Duration::from_millis(20)).unwrap();
        assert!(trips > 0.0);
    }
}
