//! A run: split the load across threads, start them together, show progress, merge.

use std::fmt;
use std::io;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::engine::{Live, Outcome, Plan, Shape, Worker};
use crate::stats::{Report, ReportMeta, Stats};
use crate::sys;
use crate::target::Target;
use crate::tls::{TlsClient, TlsOptions};

/// Time given to the threads to start before the first scheduled event, so the open-loop
/// schedule does not begin with a burst of requests that are late already.
const START_DELAY: Duration = Duration::from_millis(10);

/// How the load is applied.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    /// Closed loop: every connection issues its next request when a reply completes
    /// (with pipelining, keeps `pipeline` requests outstanding).
    Closed,
    /// Open loop by request rate (requests/s): requests are due on a fixed schedule
    /// whatever the server does, and latency runs from when each was due.
    Rate(f64),
    /// Open loop by connection rate (connections/s), each connection making `calls`
    /// requests, like httperf's `--rate` with `--num-calls`.
    ConnRate {
        /// Connections opened per second.
        rate: f64,
        /// Requests made on each connection.
        calls: u32,
    },
}

/// Everything a run needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the requests go.
    pub target: Target,
    /// How load is applied.
    pub load: Load,
    /// Connections open at once (closed loop and request rate; ignored by connection rate).
    pub connections: usize,
    /// Requests written ahead on a connection before their replies (1 = no pipelining).
    pub pipeline: usize,
    /// Reuse connections; if false every request gets a connection of its own and says
    /// `Connection: close`.
    pub keepalive: bool,
    /// How long to wait for a connection or a reply.
    pub timeout: Duration,
    /// Length of the measured window (after warm-up); with `requests`, whichever ends first.
    pub duration: Option<Duration>,
    /// Requests to issue in the measured window (connections, with [`Load::ConnRate`]).
    pub requests: Option<u64>,
    /// Load applied before the measured window and not counted.
    pub warmup: Duration,
    /// Worker threads; 0 = one per CPU the process may run on.
    pub threads: usize,
    /// Check each 2xx body against its expected length and checksum.
    pub verify: bool,
    /// Set to end the run early (Ctrl-C); what was measured until then is reported.
    pub stop: Option<&'static AtomicBool>,
    /// How an `https://` target is reached (roots, resumption, pinned version and cipher).
    pub tls: TlsOptions,
}

impl Config {
    /// A closed-loop configuration with the defaults of the command line: 16 connections,
    /// keep-alive, 5 s timeout, 10 s, one thread per CPU.
    pub fn new(target: Target) -> Config {
        Config {
            target,
            load: Load::Closed,
            connections: 16,
            pipeline: 1,
            keepalive: true,
            timeout: Duration::from_secs(5),
            duration: Some(Duration::from_secs(10)),
            requests: None,
            warmup: Duration::ZERO,
            threads: 0,
            verify: false,
            stop: None,
            tls: TlsOptions::default(),
        }
    }
}

/// Why a run could not be made.
#[derive(Debug)]
pub enum BenchError {
    /// The configuration is inconsistent.
    Config(String),
    /// A system call failed outside any connection (epoll, threads).
    Io(io::Error),
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::Config(s) => f.write_str(s),
            BenchError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for BenchError {}

impl From<io::Error> for BenchError {
    fn from(e: io::Error) -> Self {
        BenchError::Io(e)
    }
}

/// A snapshot for the progress line, taken once a second.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Time since the start (warm-up included).
    pub elapsed: Duration,
    /// Still warming up: the counts are zero until the window opens.
    pub warming_up: bool,
    /// Requests issued in the window so far.
    pub requests: u64,
    /// Replies so far.
    pub replies: u64,
    /// Failed requests so far.
    pub errors: u64,
}

/// Runs the load and returns what it measured. `progress` is called about once a second
/// from the calling thread while the workers run.
pub fn run(
    config: &Config,
    mut progress: Option<&mut dyn FnMut(&Progress)>,
) -> Result<Report, BenchError> {
    let (shape, rate, calls) = match config.load {
        Load::Closed => (Shape::Closed, None, None),
        Load::Rate(r) => (Shape::Rate, Some(r), None),
        Load::ConnRate { rate, calls } => (Shape::ConnRate, Some(rate), Some(calls)),
    };
    validate(config, rate, calls)?;
    let tls = match &config.target.tls_name {
        Some(host) => Some(TlsClient::new(&config.tls, host).map_err(BenchError::Config)?),
        None => None,
    };
    let pipeline = if config.keepalive { config.pipeline } else { 1 };
    let mut threads = if config.threads == 0 {
        sys::available_cpus()
    } else {
        config.threads
    };
    if shape != Shape::ConnRate {
        threads = threads.min(config.connections);
    }
    if let Some(n) = config.requests {
        threads = threads.min(n.max(1) as usize);
    }
    let threads = threads.max(1);
    let calls_per_conn = match (shape, config.keepalive) {
        (_, false) => 1,
        (Shape::ConnRate, true) => u64::from(calls.unwrap_or(1)),
        _ => u64::MAX,
    };
    let warmup_ns = START_DELAY.as_nanos() as u64 + config.warmup.as_nanos() as u64;
    let end = config
        .duration
        .map(|d| warmup_ns.saturating_add(d.as_nanos() as u64));
    let share = |total: u64, t: usize| {
        total / threads as u64 + u64::from((t as u64) < total % threads as u64)
    };
    let plans: Vec<Plan> = (0..threads)
        .map(|t| {
            // Thread t takes every threads-th event of one even global schedule.
            let global_interval = rate.map_or(0.0, |r| 1e9 / r);
            Plan {
                shape,
                start: START_DELAY.as_nanos() as u64,
                connections: share(config.connections as u64, t) as usize,
                pipeline,
                keepalive: config.keepalive,
                calls: calls_per_conn,
                timeout_ns: config.timeout.as_nanos() as u64,
                verify: config.verify,
                budget: config.requests.map(|n| share(n, t)),
                measure_start: warmup_ns,
                end,
                interval_ns: global_interval * threads as f64,
                offset_ns: START_DELAY.as_nanos() as f64 + global_interval * t as f64,
                seed: 0x5eed + t as u64,
                stop: config.stop,
            }
        })
        .collect();

    let base = Instant::now();
    let lives: Vec<Live> = (0..threads).map(|_| Live::default()).collect();
    let outcomes = std::thread::scope(|scope| -> Result<Vec<Outcome>, BenchError> {
        let (tx, rx) = mpsc::channel();
        for (plan, live) in plans.into_iter().zip(&lives) {
            let tx = tx.clone();
            let target = &config.target;
            let tls = tls.as_ref();
            std::thread::Builder::new()
                .name("bench-worker".into())
                .spawn_scoped(scope, move || {
                    let result = Worker::new(plan, base, target, tls, live).and_then(Worker::run);
                    let _ = tx.send(result);
                })?;
        }
        drop(tx);
        let mut outcomes = Vec::with_capacity(threads);
        let mut tick = base + START_DELAY + Duration::from_secs(1);
        while outcomes.len() < threads {
            let wait = tick.saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(result) => outcomes.push(result?),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Some(cb) = progress.as_mut() {
                        let sum = |f: fn(&Live) -> u64| lives.iter().map(f).sum();
                        let elapsed = base.elapsed();
                        cb(&Progress {
                            elapsed,
                            warming_up: elapsed.as_nanos() < u128::from(warmup_ns),
                            requests: sum(|l| {
                                l.requests.load(std::sync::atomic::Ordering::Relaxed)
                            }),
                            replies: sum(|l| l.replies.load(std::sync::atomic::Ordering::Relaxed)),
                            errors: sum(|l| l.errors.load(std::sync::atomic::Ordering::Relaxed)),
                        });
                    }
                    tick += Duration::from_secs(1);
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(BenchError::Io(io::Error::other("a worker thread died")))
                }
            }
        }
        Ok(outcomes)
    })?;

    let mut stats = Stats::new();
    let mut finished = warmup_ns;
    let mut cpu = Duration::ZERO;
    let mut max_open = 0;
    for o in &outcomes {
        stats.merge(&o.stats);
        finished = finished.max(o.finished);
        cpu += o.cpu;
        max_open += o.max_open;
    }
    let duration_s = (finished - warmup_ns) as f64 / 1e9;
    let meta = ReportMeta {
        name: config.target.name.clone(),
        url: config.target.url.clone(),
        mode: match shape {
            Shape::Closed => "closed",
            Shape::Rate => "rate",
            Shape::ConnRate => "conn-rate",
        },
        offered_rate: rate,
        calls: calls.filter(|_| shape == Shape::ConnRate),
        threads,
        connections: if shape == Shape::ConnRate {
            0
        } else {
            config.connections
        },
        pipeline,
        keepalive: config.keepalive,
    };
    let mut report = Report::new(meta, &stats, duration_s, cpu.as_secs_f64());
    report.max_open = max_open;
    if tls.is_some() {
        report.tls = Some(stats.tls.report());
    }
    Ok(report)
}

fn validate(config: &Config, rate: Option<f64>, calls: Option<u32>) -> Result<(), BenchError> {
    let bad = |s: &str| Err(BenchError::Config(s.to_string()));
    if config.target.requests.is_empty() {
        return bad("the target has no request");
    }
    if config.connections == 0 {
        return bad("need at least one connection");
    }
    if config.pipeline == 0 {
        return bad("pipeline depth must be at least 1");
    }
    if rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
        return bad("the rate must be a positive number");
    }
    if calls == Some(0) {
        return bad("--calls must be at least 1");
    }
    if !config.keepalive && calls.is_some_and(|c| c > 1) {
        return bad("several calls per connection need keep-alive");
    }
    if config.duration.is_none() && config.requests.is_none() {
        return bad("give a duration or a number of requests");
    }
    if config.duration.is_some_and(|d| d.is_zero()) || config.requests == Some(0) {
        return bad("the duration and the number of requests must be positive");
    }
    if config.timeout.is_zero() {
        return bad("the timeout must be positive");
    }
    Ok(())
}
