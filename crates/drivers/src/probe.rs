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
//! use fastpath_drivers::{choose_model, probe_models, ModelKind, HTTP_LOADS, MODEL_MARGIN};
//!
//! let kinds = [ModelKind::Epoll, ModelKind::Uring];
//! let probes = probe_models(&kinds, &HTTP_LOADS, Duration::from_millis(60))?;
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

/// One kind of traffic a probe measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeLoad {
    /// A GET answered with [`SMALL_BODY`] bytes copied from memory.
    SmallFile,
    /// A GET answered with [`LARGE_BODY`] bytes sent from a file.
    LargeFile,
    /// A message of this many bytes echoed back (the services).
    Echo(usize),
}

impl ProbeLoad {
    /// What the traffic is, for the log.
    pub fn describe(self) -> String {
        match self {
            ProbeLoad::SmallFile => format!("{} KiB from memory", SMALL_BODY / 1024),
            ProbeLoad::LargeFile => format!("{} KiB from a file", LARGE_BODY / 1024),
            ProbeLoad::Echo(size) => format!("{size} B echoed"),
        }
    }
}

/// What a web server's `auto` measures: both ends of a site.
pub const HTTP_LOADS: [ProbeLoad; 2] = [ProbeLoad::SmallFile, ProbeLoad::LargeFile];
/// What a service's `auto` measures: a short message and a longer one.
pub const ECHO_LOADS: [ProbeLoad; 2] = [ProbeLoad::Echo(64), ProbeLoad::Echo(1024)];

/// What the probe measured for one loop: server CPU time per request (or message),
/// microseconds, for each load in the order asked.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelProbe {
    /// The loop measured.
    pub kind: ModelKind,
    /// Each load with its figure.
    pub figures: Vec<(ProbeLoad, f64)>,
}

impl ModelProbe {
    /// One figure for all the loads, their geometric mean: each counts the same whatever
    /// its size.
    pub fn score(&self) -> f64 {
        let logs: f64 = self.figures.iter().map(|(_, us)| us.ln()).sum();
        (logs / self.figures.len().max(1) as f64).exp()
    }
}

/// Measures each loop of `kinds` that can run here (epoll, and io_uring when the kernel
/// allows it; the pools of threads and processes are never `auto`'s choice, and are
/// skipped) on each of `loads`, `each` per loop and load in all. An error when a loop
/// could not serve.
pub fn probe_models(
    kinds: &[ModelKind],
    loads: &[ProbeLoad],
    each: Duration,
) -> io::Result<Vec<ModelProbe>> {
    let responses = Arc::new(Responses::new()?);
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
        servers.push((
            kind,
            ProbeServer::start(model, responses.clone(), server_cpu)?,
        ));
    }
    let turn = each / ROUNDS;
    let mut turns = vec![vec![Vec::new(); loads.len()]; servers.len()];
    for _ in 0..ROUNDS {
        for (i, (_, server)) in servers.iter().enumerate() {
            for (j, &load) in loads.iter().enumerate() {
                turns[i][j].push(server.turn(&responses, load, turn, client_cpu)?);
            }
        }
    }
    // Every loop told to stop before any is waited for: their grace periods overlap.
    for (_, server) in &servers {
        server.stop.store(true, Ordering::SeqCst);
    }
    let mut probes = Vec::with_capacity(servers.len());
    for ((kind, server), per_load) in servers.into_iter().zip(turns) {
        server.stop()?;
        probes.push(ModelProbe {
            kind,
            figures: loads
                .iter()
                .copied()
                .zip(per_load.into_iter().map(median))
                .collect(),
        });
    }
    Ok(probes)
}

/// What `model = "auto"` runs, measured on `loads`: epoll and io_uring (where the kernel
/// allows it) probed for [`PROBE_TIME`] each, epoll kept unless io_uring is
/// [`MODEL_MARGIN`] times ahead; with the figures behind the choice ([`describe_probes`]).
pub fn auto_model(loads: &[ProbeLoad]) -> io::Result<(ModelKind, String)> {
    let probes = probe_models(&[ModelKind::Epoll, ModelKind::Uring], loads, PROBE_TIME)?;
    let kind = choose_model(&probes, ModelKind::Epoll, MODEL_MARGIN);
    Ok((kind, describe_probes(&probes)))
}

/// The figures of `probes`, for the log and `fastpath check`: "µs of CPU per request for
/// LOADS: epoll A and B; uring C and D".
pub fn describe_probes(probes: &[ModelProbe]) -> String {
    let Some(first) = probes.first() else {
        return "nothing measured".to_owned();
    };
    let loads: Vec<String> = first.figures.iter().map(|(l, _)| l.describe()).collect();
    let each: Vec<String> = probes
        .iter()
        .map(|p| {
            let us: Vec<String> = p.figures.iter().map(|(_, us)| format!("{us:.1}")).collect();
            format!("{} {}", p.kind.name(), us.join(" and "))
        })
        .collect();
    format!(
        "µs of CPU per request for {}: {}",
        loads.join(" and "),
        each.join("; ")
    )
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

    /// What the client sends for `load`, and how many bytes come back.
    fn exchange(&self, load: ProbeLoad) -> (Vec<u8>, usize) {
        match load {
            ProbeLoad::SmallFile => (
                b"GET /s HTTP/1.1\r\nHost: probe\r\n\r\n".to_vec(),
                self.small.len(),
            ),
            ProbeLoad::LargeFile => (
                b"GET /l HTTP/1.1\r\nHost: probe\r\n\r\n".to_vec(),
                self.large_head.len() + LARGE_BODY,
            ),
            ProbeLoad::Echo(size) => (vec![b'e'; size.max(1)], size.max(1)),
        }
    }
}

/// The probe's handler: a connection whose first byte is `G` is HTTP, each request
/// (`GET /s` or `GET /l`, ended by an empty line) getting its canned response; any other
/// connection has every byte echoed.
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
        if io.input().data().first().is_some_and(|&b| b != b'G') {
            let data = io.input().data().to_vec();
            io.input_mut().consume(data.len());
            io.write(&data);
        }
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

    /// One turn: the connections kept busy with `load` for `length`; the server's CPU
    /// time per request, microseconds.
    fn turn(
        &self,
        responses: &Responses,
        load: ProbeLoad,
        length: Duration,
        cpu: Option<usize>,
    ) -> io::Result<f64> {
        let addr = self.addr;
        let (request, expected) = responses.exchange(load);
        // The client runs on a thread of its own, so that its CPU time is its thread's.
        std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        crate::pools::percore::pin_to_cpu(cpu)?;
                    }
                    client_turn(addr, &request, expected, length)
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
    fn each_loop_serves_every_load_and_is_measured() {
        let loads = [
            ProbeLoad::SmallFile,
            ProbeLoad::LargeFile,
            ProbeLoad::Echo(512),
        ];
        let kinds = [ModelKind::Epoll, ModelKind::Uring, ModelKind::Threads];
        let probes = probe_models(&kinds, &loads, Duration::from_millis(30)).unwrap();
        let measured: Vec<ModelKind> = probes.iter().map(|p| p.kind).collect();
        if crate::uring_available().is_ok() {
            assert_eq!(measured, [ModelKind::Epoll, ModelKind::Uring]);
        } else {
            assert_eq!(measured, [ModelKind::Epoll]);
        }
        for probe in &probes {
            let us: Vec<f64> = probe.figures.iter().map(|&(_, us)| us).collect();
            assert!(us.iter().all(|&us| us > 0.0), "{probe:?}");
            // A 64 KiB response costs more than a 1 KiB one on any loop.
            assert!(us[1] > us[0], "{probe:?}");
        }
    }

    #[test]
    fn another_loop_is_chosen_only_when_ahead_by_the_margin() {
        let probe = |kind, small, large| ModelProbe {
            kind,
            figures: vec![(ProbeLoad::SmallFile, small), (ProbeLoad::LargeFile, large)],
        };
        let epoll = probe(ModelKind::Epoll, 4.0, 20.0);
        let close = probe(ModelKind::Uring, 3.8, 19.0);
        let choose = |probes: &[ModelProbe]| choose_model(probes, ModelKind::Epoll, MODEL_MARGIN);
        assert_eq!(choose(&[epoll.clone(), close]), ModelKind::Epoll);
        let ahead = probe(ModelKind::Uring, 3.0, 19.0);
        assert_eq!(choose(&[epoll.clone(), ahead.clone()]), ModelKind::Uring);
        // Ahead on small responses, behind on large ones: the geometric mean decides.
        let mixed = probe(ModelKind::Uring, 2.0, 36.0);
        assert_eq!(choose(&[epoll, mixed]), ModelKind::Epoll);
        // Nothing measured for the default: the default.
        assert_eq!(choose(&[ahead]), ModelKind::Epoll);
    }
}
