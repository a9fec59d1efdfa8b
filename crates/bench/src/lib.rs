//! `fastpath bench`: an httperf-class HTTP/1.1 load generator, and the comparison suite
//! that runs it against several servers in turn.
//!
//! Where it sits among fastpath's crates, and what it must not do: docs/architecture.md.
//!
//! It applies load three ways:
//! - **closed loop** ([`Load::Closed`]): `-c N` connections, each sending its next request
//!   when a reply completes (keep-alive, optionally pipelined, or a new connection per
//!   request). Simple and the way wrk works, but a slow server slows the client down with
//!   it, so it hides overload.
//! - **open loop by request rate** ([`Load::Rate`]): requests are due on a fixed schedule;
//!   a request that waits for a free connection keeps the time it was due, and its latency
//!   runs from then. That corrects for coordinated omission: a server stall shows up in
//!   every request it delayed, not only in the one it held.
//! - **open loop by connection rate** ([`Load::ConnRate`]): like httperf's `--rate` with
//!   `--num-calls`, a new connection every 1/R seconds whatever the server does. Overload
//!   then shows up as it does for real clients: refused and reset connections, timeouts and
//!   growing latency, instead of a politely slower client.
//!
//! It measures what the documents behind fastpath measured (httperf and http_load): the
//! connection time, the time to the first byte of the reply, the transfer time and the
//! total, as percentiles from HDR histograms; requests, replies and bytes per second;
//! failures in httperf's classes (refused, reset, timeout, fd-unavail, addr-unavail) plus
//! short and malformed replies and, with `--verify`, bodies whose length or checksum is not
//! the one the manifest gives; and replies by status class. Every issued request ends as
//! exactly one reply, one error, or "in flight at the end", so the figures add up.
//!
//! Why it is shaped so:
//! - **It must not be the bottleneck.** One event loop per thread over epoll, written
//!   directly on libc rather than mio: edge-triggered registration once per socket (no
//!   `epoll_ctl` on the hot path, where wrk re-arms write interest per request), and
//!   `epoll_pwait2` nanosecond timeouts, which open-loop schedules need and mio (whole
//!   milliseconds) does not give. Request bytes are rendered once per URL; each thread
//!   reads into one reused buffer; the response parser (`response`) is sans-I/O and counts
//!   or hashes body bytes where they lie, copying only a head split across two reads.
//!   Nothing is allocated per request once connections are warm.
//! - **Threads default to the CPUs in the affinity mask**, so `taskset -c 1 fastpath bench`
//!   runs one thread on one core instead of many threads fighting over it.
//! - **A connection is opened for a request**, never behind the user's back: a refused
//!   port with `-n 10` gives exactly ten `refused`, which is what makes error counts exact
//!   and testable.
//! - **Protocol code does no I/O.** [`ResponseParser`] takes byte slices and is tested
//!   with every split of a reply; the chunked decoder is the server's, from `fastpath-http`.
//!
//! ```no_run
//! use std::time::Duration;
//! use fastpath_bench::{run, Config, Load, Target, Url};
//!
//! let url = Url::parse("http://127.0.0.1:8080/index.html").unwrap();
//! let mut config = Config::new(Target::from_urls("fastpath", &[url]).unwrap());
//! config.load = Load::Rate(20_000.0);
//! config.connections = 64;
//! config.duration = Some(Duration::from_secs(5));
//! let report = run(&config, None).unwrap();
//! println!("{} replies/s, p99 {} µs, {} errors", report.rps, report.latency_us.p99, report.errors.total);
//! ```
//!
//! **HTTPS.** An `https://` URL is loaded over TLS with rustls (aws-lc-rs, the provider of
//! the server's `fastpath-tls`), in the same event loop: each connection carries a
//! `ClientConnection` fed from and drained into its socket, and its replies are parsed from
//! the plaintext as over TCP. `--cacert FILE` gives the roots to trust; without it
//! `--insecure` accepts any certificate (the handshake's signatures are still checked), and
//! an https URL with neither is refused. `--sni NAME` sends and verifies another name than
//! the URL's host. Every connection makes a full handshake unless `--tls-resume` keeps the
//! sessions servers give (TLS 1.3 tickets, TLS 1.2 sessions) for the next ones;
//! `--no-keepalive` then measures handshakes per second, full or resumed.
//! `--tls-version 1.2|1.3` and `--tls-cipher SUITE` pin what is negotiated. The connect time
//! runs to the end of the handshake; the report's `tls` object gives the handshakes (full,
//! resumed, failed by reason, with the first failure's message), what was negotiated
//! (protocol, cipher suite, key exchange group) and the handshake times, and a failed
//! handshake fails its requests as `errors.tls`.
//!
//! ```text
//! fastpath bench --cacert ca.pem -c 64 https://localhost:8443/1k.bin
//! fastpath bench --cacert ca.pem --no-keepalive --tls-resume -c 32 https://localhost:8443/1k.bin
//! fastpath bench --insecure --tls-version 1.2 --tls-cipher TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 https://10.0.0.2/
//! ```
//!
//! Two more modes load the non-HTTP services, on the same kind of event loop:
//! - **`echo`** ([`run_echo`]): Slick's echo benchmark. Each connection sends its message
//!   size (a 4-byte header, unless plain), then a message, waits for the whole echo, checks
//!   it byte for byte and sends the next. Per message: one `send`, one `read` and a share of
//!   an `epoll_pwait2`, nothing allocated.
//! - **`thrift`** ([`run_thrift`]): Slick's forwarder benchmark. The generator starts the
//!   sinks itself, then streams oneway `msg` calls ([`fwdmsg`] says what they hold) to the
//!   forwarder as fast as TCP takes them, a 64 KiB buffer of copied and stamped messages per
//!   send. The sinks check every byte and the order per client; after the clients stop, the
//!   run waits (bounded) for every message, so lost, duplicated, reordered, corrupt and
//!   misrouted are exact and all zero in a good run. One-way latency comes from the send
//!   time in each message (CLOCK_MONOTONIC, so a sink in another process reads it too); at
//!   full speed it is mostly the depth of the socket buffers.
//!
//! ```text
//! fastpath bench echo 127.0.0.1:9000 --size 32 -c 64 -d 10s --json echo.json
//! fastpath bench thrift 127.0.0.1:9100 --sinks 127.0.0.1:9201,127.0.0.1:9202 --payload 1024 -c 32
//! fastpath bench thrift-sink --listen 127.0.0.1:9201,127.0.0.1:9202
//! ```
//!
//! `--json` prints one [`Report`] object for a run, `{"runs": [Report...]}` for
//! `--compare`, and `{"sweep": {"mode": "rate"|"conn-rate", "points": [Report...]}}` for
//! `--sweep` (each point names its target and `offered_rate`). Times are µs, as
//! `{count, min, mean, p50, p90, p99, p999, max}`; `errors` and `status` count by class.
//!
//! On the command line (`fastpath bench --help` lists every option):
//!
//! ```text
//! fastpath bench -c 64 -d 10s http://127.0.0.1:8080/index.html
//! fastpath bench --rate 20000 -c 128 --json http://127.0.0.1:8080/
//! fastpath bench --conn-rate 500 --calls 5 --timeout 2s http://127.0.0.1:8080/
//! fastpath bench make-docroot /srv/specweb
//! fastpath bench --mix specweb96 --docroot /srv/specweb --verify http://127.0.0.1:8080/
//! fastpath bench --compare fastpath=http://127.0.0.1:8080/ nginx=http://127.0.0.1:8081/ \
//!     --conn-rate --sweep 500:5000:500 -d 5s --svg sweep.svg
//! ```
#![deny(missing_docs)]

pub mod cli;
mod docroot;
mod echo;
mod engine;
pub mod fwdmsg;
mod report;
mod response;
mod run;
mod stats;
mod streams;
mod svg;
mod sys;
mod target;
mod thrift;
mod tls;

pub use docroot::{
    apply_manifest, file_size, make_docroot, mix_target, read_manifest, Entry, CLASS_SHARE,
    FILE_SHARE, MANIFEST,
};
pub use echo::{render_echo, run_echo, EchoConfig, EchoErrors, EchoReport};
pub use report::{render, render_compare, render_sweep};
pub use response::{ParseError, Reply, ResponseParser, MAX_HEAD};
pub use run::{run, BenchError, Config, Load, Progress};
pub use stats::TlsReport;
pub use stats::{ErrorClass, Errors, Percentiles, Report, ReportMeta, Stats, StatusClasses};
pub use streams::Tick;
pub use svg::{latency_chart, sweep_chart};
pub use sys::available_cpus;
pub use target::{read_url_list, Expect, Request, Selection, Target, TargetError, Url};
pub use thrift::{
    render_sinks, render_thrift, run_sinks, run_thrift, SinkCounts, SinkReport, ThriftConfig,
    ThriftReport,
};
pub use tls::{TlsOptions, TlsVersion, FAILURE_REASONS as TLS_FAILURE_REASONS};
