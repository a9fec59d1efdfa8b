//! Which event loop serves HTTP at the least CPU per request on the machine it runs on,
//! measured at start rather than assumed: what the model `auto` runs.
//!
//! Whether io_uring's batched submissions beat a system call per read and per send depends
//! on the kernel and the machine: in one run of the benchmarks the io_uring loop used 0.74 ×
//! the epoll loop's CPU per request on 1 KiB files and 1.11 × on the SPECweb96 mix
//! (BENCHMARKS.md). So [`probe_models`] measures it: each loop runs a canned HTTP server (one
//! worker, the real loop and engine, a handler that answers every request with bytes it
//! holds), and a client thread keeps [`CONNECTIONS`] keep-alive connections busy with it, for
//! a few tens of milliseconds per loop and response, in interleaved turns whose median is
//! kept. Two responses stand for the two ends of a site: [`SMALL_BODY`] bytes copied from
//! memory, and [`LARGE_BODY`] bytes sent from a file (`sendfile`, or whatever the loop does
//! with a file range). What is compared is the process's CPU time, less the client
//! thread's, per request: the loop's own system calls and user-space work, and the kernel's
//! TCP work done in its context.
//!
//! ```no_run
//! use std::time::Duration;
//! use fastpath_drivers::{choose_model, probe_models, ModelKind, MODEL_MARGIN};
//!
//! let probes = probe_models(&[ModelKind::Epoll, ModelKind::Uring], Duration::from_millis(60))?;
//! let kind = choose_model(&probes, ModelKind::Epoll, MODEL_MARGIN);
//! # Ok::<(), std::io::Error>(())
//! ```

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{
    bind_listeners, run, CloseReason, DriverConfig, Handler, Io, Model, ModelKind, Next, Opened,
    Worker,
};

/// The small response's body: a small static file, copied from memory.
pub const SMALL_BODY: usize = 1024;
/// The large response's body: a file large enough to be sent from its descriptor.
pub const LARGE_BODY: usize = 64 * 1024;
/// How long `auto` measures each loop with each response, in all.
pub const PROBE_TIME: Duration = Duration::from_millis(60);
/// How far ahead another loop must be to be chosen over the default: turns differ by
/// several percent on a busy machine, and a tie is the default's.
pub const MODEL_MARGIN: f64 = 1.1;

/// Turns of each loop per response, interleaved, the median kept: a moment of load
/// elsewhere on the machine falls on one turn rather than on one loop.
const ROUNDS: u32 = 3;
/// Connections kept busy at once, so that a loop has several ready at each wake-up, as
/// under load.
const CONNECTIONS: usize = 16;
/// Requests answered before a turn's clock starts (connections accepted, buffers grown).
const WARM_UP: usize = 64;

/// What the probe measured for one loop: server CPU time per request, microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelProbe {
    /// The loop measured.
    pub kind: ModelKind,
    /// Per request for the small response (copied from memory).
    pub small_us: f64,
    /// Per request for the large response (sent from a file).
    pub large_us: f64,
}

impl ModelProbe {
    /// One figure for both responses, their geometric mean: each counts the same whatever
    /// its size.
    pub fn score(&self) -> f64 {
        (self.small_us * self.large_us).sqrt()
    }
}

/// Measures each loop of `kinds` that can run here (epoll, and io_uring when the kernel
/// allows it; the pools of threads and processes are never `auto`'s choice, and are
/// skipped), `each` per loop and response in all. An error when a loop could not serve.
pub fn probe_models(kinds: &[ModelKind], each: Duration) -> io::Result<Vec<ModelProbe>> {
    let small = Arc::new(Responses::new()?);
    // The loops on one CPU and the client on another, as in the benchmarks: where the two
    // sides run would otherwise change from turn to turn, and the cost of a request with it.
    let cpus = crate::allowed_cpus();
    let (server_cpu, client_cpu) = match cpus.as_slice() {
        [first, .., last] => (Some(*first), Some(*last)),
        _ => (None, None),
    };
    let mut servers = Vec::new();
    for &kind in kinds {
        let model = match kind {
            ModelKind::Epoll => Model::Epoll,
            ModelKind::Uring if crate::uring_available().is_ok() => Model::Uring,
            _ => continue,
        };
        servers.push((kind, ProbeServer::start(model, small.clone(), server_cpu)?));
    }
    let turn = each / ROUNDS;
    let mut figures = vec![(Vec::new(), Vec::new()); servers.len()];
    for _ in 0..ROUNDS {
        for (i, (_, server)) in servers.iter().enumerate() {
            figures[i]
                .0
                .push(server.turn(&small, false, turn, client_cpu)?);
            figures[i]
                .1
                .push(server.turn(&small, true, turn, client_cpu)?);
        }
    }
    let mut probes = Vec::with_capacity(servers.len());
    for ((kind, server), (smalls, larges)) in servers.into_iter().zip(figures) {
        server.stop()?;
        probes.push(ModelProbe {
            kind,
            small_us: median(smalls),
            large_us: median(larges),
        });
    }
    Ok(probes)
}

/// The loop to run: the one with the lowest [`ModelProbe::score`] when it is at least
/// `margin` times below `default`'s, else `default` (also when `default` was not measured).
pub fn choose_model(probes: &[ModelProbe], default: ModelKind, margin: f64) -> ModelKind {
    let Some(base) = probes.iter().find(|p| p.kind == default) else {
        return default;
    };
    probes
        .iter()
        .filter(|p| p.score() * margin <= base.score())
        .min_by(|a, b| a.score().total_cmp(&b.score()))
        .map_or(default, |p| p.kind)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The canned responses, and the file the large one's body is sent from.
struct Responses {
    small: Arc<[u8]>,
    large_head: Arc<[u8]>,
    large_file: Arc<File>,
}

impl Responses {
    fn new() -> io::Result<Responses> {
        let head = |len: usize| {
            format!(
                "HTTP/1.1 200 OK\r\nServer: fastpath\r\nContent-Type: application/octet-stream\r\n\
                 Content-Length: {len}\r\n\r\n"
            )
            .into_bytes()
        };
        let mut small = head(SMALL_BODY);
        small.resize(small.len() + SMALL_BODY, b'x');
        // A memory file: nothing on disk to clean up, and `sendfile` reads it like a page-
        // cached file.
        // SAFETY: the name is a C string; the descriptor returned is ours to own.
        let fd = unsafe { libc::memfd_create(c"fastpath-probe".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let mut file = unsafe { File::from_raw_fd(fd) };
        file.write_all(&vec![b'y'; LARGE_BODY])?;
        Ok(Responses {
            small: small.into(),
            large_head: head(LARGE_BODY).into(),
            large_file: Arc::new(file),
        })
    }

    /// Bytes of one whole response.
    fn len(&self, large: bool) -> usize {
        if large {
            self.large_head.len() + LARGE_BODY
        } else {
            self.small.len()
        }
    }
}

/// The probe's HTTP handler: each request (`GET /s` or `GET /l`, ended by an empty line)
/// gets its canned response.
struct Canned {
    responses: Arc<Responses>,
}

impl Handler for Canned {
    type Conn = ();

    fn on_open(&mut self, _: Opened, io: &mut Io<'_>) -> ((), Next) {
        io.set_deadline(Some(io.now() + Duration::from_secs(10)));
        ((), Next::Read)
    }

    fn on_ready(&mut self, _: &mut (), io: &mut Io<'_>) -> Next {
        while let Some(end) = io.input().data().windows(4).position(|w| w == b"\r\n\r\n") {
            let large = io.input().data().get(5) == Some(&b'l');
            io.input_mut().consume(end + 4);
            let output = io.output_mut();
            if large {
                output.push_shared(self.responses.large_head.clone());
                output.push_file(self.responses.large_file.clone(), 0, LARGE_BODY as u64);
            } else {
                output.push_shared(self.responses.small.clone());
            }
        }
        if io.eof() {
            Next::Close
        } else {
            Next::Read
        }
    }

    fn on_timeout(&mut self, _: &mut (), _: &mut Io<'_>) -> Next {
        Next::Close
    }

    fn on_close(&mut self, _: (), _: CloseReason, _: &mut Worker<'_>) {}
}

/// A canned server on one loop, on a loopback port of its own.
struct ProbeServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<io::Result<()>>,
}

impl ProbeServer {
    fn start(
        model: Model,
        responses: Arc<Responses>,
        cpu: Option<usize>,
    ) -> io::Result<ProbeServer> {
        let listeners = bind_listeners(&[([127, 0, 0, 1], 0).into()], 1)?;
        let addr = listeners.local_addrs[0]
            .tcp()
            .ok_or_else(|| io::Error::other("no TCP address"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let config = DriverConfig {
            shutdown_timeout: Duration::from_millis(200),
            ..DriverConfig::default()
        };
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("probe".into())
            .spawn(move || {
                // Its worker threads are made by this one, and keep its CPU.
                if let Some(cpu) = cpu {
                    crate::pools::percore::pin_to_cpu(cpu)?;
                }
                run(
                    model,
                    listeners,
                    &config,
                    |_| Canned {
                        responses: responses.clone(),
                    },
                    &flag,
                )
            })?;
        Ok(ProbeServer { addr, stop, thread })
    }

    /// One turn: the connections kept busy with `large` or small requests for `length`;
    /// the server's CPU time per request, microseconds.
    fn turn(
        &self,
        responses: &Responses,
        large: bool,
        length: Duration,
        cpu: Option<usize>,
    ) -> io::Result<f64> {
        let addr = self.addr;
        let request: &[u8] = if large {
            b"GET /l HTTP/1.1\r\nHost: probe\r\n\r\n"
        } else {
            b"GET /s HTTP/1.1\r\nHost: probe\r\n\r\n"
        };
        let expected = responses.len(large);
        // The client runs on a thread of its own, so that its CPU time is its thread's.
        std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        crate::pools::percore::pin_to_cpu(cpu)?;
                    }
                    client_turn(addr, request, expected, length)
                })
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the probe's client panicked")))
        })
    }

    fn stop(self) -> io::Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("a probed loop panicked")))
    }
}

/// Keeps [`CONNECTIONS`] connections asking `request` and reading its `expected` bytes
/// back, all sent before any is read, for `length` after a warm-up; the process's CPU time
/// outside this thread per request, microseconds.
fn client_turn(
    addr: SocketAddr,
    request: &[u8],
    expected: usize,
    length: Duration,
) -> io::Result<f64> {
    let mut conns = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        let conn = TcpStream::connect(addr)?;
        conn.set_nodelay(true)?;
        conn.set_read_timeout(Some(Duration::from_secs(5)))?;
        conns.push(conn);
    }
    let mut buf = vec![0u8; expected];
    let mut cycle = |conns: &mut Vec<TcpStream>| -> io::Result<()> {
        for conn in conns.iter_mut() {
            conn.write_all(request)?;
        }
        for conn in conns.iter_mut() {
            conn.read_exact(&mut buf)?;
        }
        Ok(())
    };
    for _ in 0..WARM_UP.div_ceil(CONNECTIONS) {
        cycle(&mut conns)?;
    }
    let (process, thread) = (cpu_time(libc::RUSAGE_SELF), cpu_time(libc::RUSAGE_THREAD));
    let start = Instant::now();
    let mut requests = 0usize;
    while start.elapsed() < length {
        cycle(&mut conns)?;
        requests += CONNECTIONS;
    }
    let server = (cpu_time(libc::RUSAGE_SELF) - process) - (cpu_time(libc::RUSAGE_THREAD) - thread);
    Ok(server.as_secs_f64() * 1e6 / requests as f64)
}

/// User plus system time of `who` (`RUSAGE_SELF`: the process, `RUSAGE_THREAD`: this
/// thread).
fn cpu_time(who: libc::c_int) -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut usage);
        usage
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_loop_serves_both_responses_and_is_measured() {
        let probes = probe_models(
            &[ModelKind::Epoll, ModelKind::Uring],
            Duration::from_millis(30),
        )
        .unwrap();
        assert!(probes.iter().any(|p| p.kind == ModelKind::Epoll));
        assert_eq!(
            probes.iter().any(|p| p.kind == ModelKind::Uring),
            crate::uring_available().is_ok()
        );
        for probe in &probes {
            assert!(probe.small_us > 0.0 && probe.large_us > 0.0, "{probe:?}");
            // A 64 KiB response costs more than a 1 KiB one on any loop.
            assert!(probe.large_us > probe.small_us, "{probe:?}");
        }
    }

    #[test]
    fn another_loop_is_chosen_only_when_ahead_by_the_margin() {
        let probe = |kind, small_us, large_us| ModelProbe {
            kind,
            small_us,
            large_us,
        };
        let epoll = probe(ModelKind::Epoll, 4.0, 20.0);
        let close = probe(ModelKind::Uring, 3.8, 19.0);
        assert_eq!(
            choose_model(&[epoll, close], ModelKind::Epoll, MODEL_MARGIN),
            ModelKind::Epoll
        );
        let ahead = probe(ModelKind::Uring, 3.0, 19.0);
        assert_eq!(
            choose_model(&[epoll, ahead], ModelKind::Epoll, MODEL_MARGIN),
            ModelKind::Uring
        );
        // Ahead on small responses, behind on large ones: the geometric mean decides.
        let mixed = probe(ModelKind::Uring, 2.0, 36.0);
        assert_eq!(
            choose_model(&[epoll, mixed], ModelKind::Epoll, MODEL_MARGIN),
            ModelKind::Epoll
        );
        // Nothing measured for the default: the default.
        assert_eq!(
            choose_model(&[ahead], ModelKind::Epoll, MODEL_MARGIN),
            ModelKind::Epoll
        );
    }
}
