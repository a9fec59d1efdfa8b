//! Whether the in-kernel echo moves more messages than user space on the machine it runs
//! on, measured at start rather than assumed.
//!
//! The sockmap redirect is finished by a kernel worker, a wake-up per message, and what
//! that costs against a read and a write in user space depends on the kernel and the
//! machine (BENCHMARKS.md, "Kernel path": the same program won from 2 KiB on one run and
//! moved 0.42 × user space's messages at 4 KiB on another). So `kernel_path = "auto"` asks
//! [`probe_echo`]: over a few loopback connections, messages of each size go out and come
//! back, echoed once by a plain read and write in user space and once by the kernel, for a
//! few tens of milliseconds each, in turn. The user-space side here is the cheapest echo
//! there is (no event loop), so the probe leans towards user space: the kernel is chosen
//! only where it wins by that measure too.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use crate::EchoPath;

/// The message sizes `auto` probes: small, the seed's 4 KiB, large.
pub const PROBE_SIZES: [u32; 3] = [512, 4096, 65536];

/// How long each path echoes each size, in all: [`ROUNDS`] turns each.
pub const PROBE_TIME: Duration = Duration::from_millis(90);

/// Turns of each path per size, interleaved, the median kept: a moment of load elsewhere on
/// the machine then falls on one turn rather than on one path.
const ROUNDS: u32 = 3;

/// How far ahead the kernel must be to be chosen: on a loaded machine turns of one path
/// differ by tens of percent, and a tie is user space's (no BPF state per connection).
pub const KERNEL_MARGIN: f64 = 1.1;

/// Connections echoing at once, so that the kernel's worker and the probe overlap as they
/// would under load.
const CONNECTIONS: usize = 8;

/// How long a message may take to come back (or arrive) before a probe gives up on a path.
const ROUND_TRIP_LIMIT: Duration = Duration::from_secs(2);

/// What a probe of the kernel path measured at one size: how many messages (the echo) or
/// round trips (the bridge) a second each way moved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelProbe {
    /// The message size, bytes.
    pub size: u32,
    /// Per second in user space: a read and a write for the echo, splice for the bridge.
    pub user: f64,
    /// Per second in the kernel.
    pub kernel: f64,
}

impl KernelProbe {
    /// The kernel's figure over user space's.
    pub fn ratio(&self) -> f64 {
        self.kernel / self.user.max(f64::MIN_POSITIVE)
    }
}

/// Echoes messages of each of `sizes` through user space and through `path`, for `each`
/// per path and size in interleaved turns; an error when either path fails to echo (the
/// caller then keeps to user space).
pub fn probe_echo(path: &EchoPath, sizes: &[u32], each: Duration) -> io::Result<Vec<KernelProbe>> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    interleaved(
        sizes,
        each,
        |size, turn| user_turn(&listener, size, turn),
        |size, turn| kernel_turn(path, &listener, size, turn),
    )
}

/// Measures each of `sizes` in [`ROUNDS`] turns of user space's way and the kernel's, in
/// alternation, `each` per way and size in all; the medians.
pub(crate) fn interleaved(
    sizes: &[u32],
    each: Duration,
    mut user: impl FnMut(u32, Duration) -> io::Result<f64>,
    mut kernel: impl FnMut(u32, Duration) -> io::Result<f64>,
) -> io::Result<Vec<KernelProbe>> {
    let turn = each / ROUNDS;
    let mut results = Vec::with_capacity(sizes.len());
    for &size in sizes {
        let mut users = Vec::with_capacity(ROUNDS as usize);
        let mut kernels = Vec::with_capacity(ROUNDS as usize);
        for _ in 0..ROUNDS {
            users.push(user(size, turn)?);
            kernels.push(kernel(size, turn)?);
        }
        results.push(KernelProbe {
            size,
            user: median(users),
            kernel: median(kernels),
        });
    }
    Ok(results)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Messages per second echoed by user space at `size`, for `turn`.
fn user_turn(listener: &TcpListener, size: u32, turn: Duration) -> io::Result<f64> {
    let mut pairs = connect_pairs(listener)?;
    run(&mut pairs, size as usize, turn, false)
}

/// Messages per second echoed by the kernel at `size`, for `turn`.
fn kernel_turn(
    path: &EchoPath,
    listener: &TcpListener,
    size: u32,
    turn: Duration,
) -> io::Result<f64> {
    let mut pairs = connect_pairs(listener)?;
    let mut taken = Vec::with_capacity(pairs.len());
    for (_, server) in &pairs {
        match path.take_over(server.as_fd(), size.saturating_mul(2)) {
            Ok(t) => taken.push(t),
            Err(e) => {
                release(path, &taken);
                return Err(io::Error::other(format!("{e:?}")));
            }
        }
    }
    let echoed = run(&mut pairs, size as usize, turn, true);
    // The sockets leave the map as they close; then their counts are forgotten.
    drop(pairs);
    release(path, &taken);
    echoed
}

/// The smallest probed size from which the kernel moved [`KERNEL_MARGIN`] times user space's
/// messages or more, at that size and at every larger one: where `auto` hands connections to
/// it. `None` when it did not at the largest.
pub fn kernel_wins_from(results: &[KernelProbe]) -> Option<u32> {
    let mut by_size: Vec<&KernelProbe> = results.iter().collect();
    by_size.sort_by_key(|r| r.size);
    let mut from = None;
    for r in by_size.iter().rev() {
        if r.kernel >= r.user * KERNEL_MARGIN {
            from = Some(r.size);
        } else {
            break;
        }
    }
    from
}

/// The figures behind a choice, for the start-up log and `fastpath check`:
/// "512 B 0.74×, 4096 B 0.42×, 65536 B 1.10×" (the kernel's figure over user space's).
pub fn describe(results: &[KernelProbe]) -> String {
    results
        .iter()
        .map(|r| format!("{} B {:.2}×", r.size, r.ratio()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn release(path: &EchoPath, taken: &[crate::Taken]) {
    for &t in taken {
        path.release(t);
    }
}

/// Client and server ends of fresh loopback connections.
fn connect_pairs(listener: &TcpListener) -> io::Result<Vec<(TcpStream, TcpStream)>> {
    (0..CONNECTIONS).map(|_| connected(listener)).collect()
}

/// A fresh loopback connection to `listener`, both ends: no Nagle, and reads and writes
/// that give up after [`ROUND_TRIP_LIMIT`].
pub(crate) fn connected(listener: &TcpListener) -> io::Result<(TcpStream, TcpStream)> {
    let client = TcpStream::connect(listener.local_addr()?)?;
    let (server, _) = listener.accept()?;
    for s in [&client, &server] {
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(ROUND_TRIP_LIMIT))?;
        s.set_write_timeout(Some(ROUND_TRIP_LIMIT))?;
    }
    Ok((client, server))
}

/// Messages per second: each round sends one message on every connection, echoes them in
/// user space unless `in_kernel` (the kernel does), and reads every echo back whole.
fn run(
    pairs: &mut [(TcpStream, TcpStream)],
    size: usize,
    each: Duration,
    in_kernel: bool,
) -> io::Result<f64> {
    let message = vec![0x5a_u8; size];
    let mut buf = vec![0_u8; size];
    let mut echoed = 0_u64;
    let start = Instant::now();
    while start.elapsed() < each {
        for (client, _) in pairs.iter_mut() {
            client.write_all(&message)?;
        }
        if !in_kernel {
            for (_, server) in pairs.iter_mut() {
                echo_in_user_space(server, size, &mut buf)?;
            }
        }
        for (client, _) in pairs.iter_mut() {
            client.read_exact(&mut buf)?;
        }
        echoed += pairs.len() as u64;
    }
    Ok(echoed as f64 / start.elapsed().as_secs_f64())
}

/// Reads `size` bytes from `server` and writes each piece back as it comes, as the echo
/// service does.
fn echo_in_user_space(server: &mut TcpStream, size: usize, buf: &mut [u8]) -> io::Result<()> {
    let mut left = size;
    while left > 0 {
        let n = server.read(&mut buf[..left])?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        server.write_all(&buf[..n])?;
        left -= n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(size: u32, user: f64, kernel: f64) -> KernelProbe {
        KernelProbe { size, user, kernel }
    }

    #[test]
    fn the_kernel_is_chosen_from_where_it_wins_to_the_largest_size() {
        let wins_from_4k = [
            probe(512, 100.0, 80.0),
            probe(4096, 100.0, 120.0),
            probe(65536, 10.0, 19.0),
        ];
        assert_eq!(kernel_wins_from(&wins_from_4k), Some(4096));
        // A win at a small size alone does not count: larger messages would go to the
        // kernel and lose.
        let wins_small_only = [
            probe(512, 100.0, 130.0),
            probe(4096, 100.0, 90.0),
            probe(65536, 10.0, 19.0),
        ];
        assert_eq!(kernel_wins_from(&wins_small_only), Some(65536));
        let loses = [probe(512, 100.0, 80.0), probe(65536, 10.0, 4.2)];
        assert_eq!(kernel_wins_from(&loses), None);
        // A lead inside the noise is no win.
        let ties = [probe(4096, 100.0, 105.0), probe(65536, 10.0, 10.9)];
        assert_eq!(kernel_wins_from(&ties), None);
        assert_eq!(kernel_wins_from(&[]), None);
        assert_eq!(
            describe(&[probe(512, 100.0, 74.0), probe(4096, 100.0, 42.0)]),
            "512 B 0.74×, 4096 B 0.42×"
        );
    }
}
