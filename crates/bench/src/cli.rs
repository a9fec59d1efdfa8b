//! The `fastpath bench` command line: arguments, the order of runs (one, compared, swept),
//! the progress line and the outputs. The `fastpath` binary only forwards to [`main`].

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};

use fastpath_thrift::Transport;

use crate::docroot::{apply_manifest, make_docroot, mix_target, read_manifest, MANIFEST};
use crate::echo::{render_echo, run_echo, EchoConfig};
use crate::report::{render, render_compare, render_sweep};
use crate::run::{run, Config, Load, Progress};
use crate::stats::Report;
use crate::streams::{write_json, Tick};
use crate::svg::{latency_chart, sweep_chart};
use crate::sys::stop_on_interrupt;
use crate::target::{read_url_list, Target, Url};
use crate::thrift::{render_sinks, render_thrift, run_sinks, run_thrift, ThriftConfig};
use crate::tls::{TlsOptions, TlsVersion};

/// Arguments of `fastpath bench`.
#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: Option<BenchCommand>,

    /// Target URLs (http://host:port/path or https://...), requested in turn; all on one
    /// host and port.
    #[arg(value_name = "URL")]
    targets: Vec<String>,

    /// Connections open at once (closed loop and --rate).
    #[arg(short = 'c', long, default_value_t = 16, value_name = "N")]
    connections: usize,

    /// Requests written ahead on each connection before their replies.
    #[arg(long, default_value_t = 1, value_name = "D")]
    pipeline: usize,

    /// A new connection per request, sending `Connection: close`.
    #[arg(long)]
    no_keepalive: bool,

    /// Open loop: R requests/s on a fixed schedule; latency runs from each request's
    /// intended send time. The value may be left out with --sweep.
    #[arg(long, value_name = "R", num_args = 0..=1, conflicts_with = "conn_rate")]
    rate: Option<Option<f64>>,

    /// Open loop: a new connection every 1/R s whatever the server does, each making
    /// --calls requests. The value may be left out with --sweep.
    #[arg(long, value_name = "R", num_args = 0..=1)]
    conn_rate: Option<Option<f64>>,

    /// Requests per connection with --conn-rate.
    #[arg(long, default_value_t = 1, value_name = "K")]
    calls: u32,

    /// Longest wait for a connection or a reply (e.g. 5s, 500ms).
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "TIME")]
    timeout: Duration,

    /// Length of the measured window (default 10s unless -n is given).
    #[arg(short = 'd', long, value_parser = parse_duration, value_name = "TIME")]
    duration: Option<Duration>,

    /// Requests to make (connections with --conn-rate, like httperf's --num-conns).
    #[arg(short = 'n', long, value_name = "N")]
    requests: Option<u64>,

    /// Load applied first and not counted.
    #[arg(long, default_value = "0s", value_parser = parse_duration, value_name = "TIME")]
    warmup: Duration,

    /// Worker threads (default: the CPUs in this process's affinity mask).
    #[arg(short = 't', long, value_name = "N")]
    threads: Option<usize>,

    /// A file of URLs or paths (one per line), paths joined to the target URL.
    #[arg(long = "urls", value_name = "FILE")]
    url_list: Option<PathBuf>,

    /// Request the files of a document root made by `make-docroot` with this mix.
    #[arg(long, value_enum, value_name = "MIX")]
    mix: Option<Mix>,

    /// Document root made by `make-docroot` (its manifest gives sizes and checksums).
    #[arg(long, value_name = "DIR")]
    docroot: Option<PathBuf>,

    /// Manifest file (default: DOCROOT/specweb96.manifest).
    #[arg(long, value_name = "FILE")]
    manifest: Option<PathBuf>,

    /// Check every 2xx body against the manifest's size and checksum (or --expect-length).
    #[arg(long)]
    verify: bool,

    /// Expected body length of every 2xx reply (implies --verify).
    #[arg(long, value_name = "BYTES")]
    expect_length: Option<u64>,

    /// Print every figure as JSON on stdout instead of the table.
    #[arg(long)]
    json: bool,

    /// Run these targets in turn with the same load and print them side by side.
    #[arg(long, num_args = 1.., value_name = "NAME=URL")]
    compare: Vec<String>,

    /// Repeat the run for each offered rate FROM, FROM+STEP, ... TO (of --rate, or of
    /// --conn-rate if given).
    #[arg(long, value_name = "FROM:TO:STEP")]
    sweep: Option<String>,

    /// Write an SVG chart: latency percentiles per target, or the sweep.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,

    /// No progress line.
    #[arg(short = 'q', long)]
    quiet: bool,

    /// HTTPS: trust the certificates in this PEM file (the server's CA).
    #[arg(long, value_name = "FILE", help_heading = "HTTPS")]
    cacert: Option<PathBuf>,

    /// HTTPS without --cacert: accept any certificate (the handshake's signatures are
    /// still checked).
    #[arg(long, help_heading = "HTTPS")]
    insecure: bool,

    /// HTTPS: send and verify this server name instead of the URL's host (the Host
    /// header stays the URL's).
    #[arg(long, value_name = "NAME", help_heading = "HTTPS")]
    sni: Option<String>,

    /// HTTPS: keep the sessions servers give so later connections resume them (without
    /// it every handshake is a full one).
    #[arg(long, help_heading = "HTTPS")]
    tls_resume: bool,

    /// HTTPS: only this protocol version.
    #[arg(long, value_enum, value_name = "VERSION", help_heading = "HTTPS")]
    tls_version: Option<TlsVersionArg>,

    /// HTTPS: only this cipher suite, e.g. TLS13_AES_128_GCM_SHA256 or
    /// TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256.
    #[arg(long, value_name = "SUITE", help_heading = "HTTPS")]
    tls_cipher: Option<String>,
}

/// Protocol versions for `--tls-version`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum TlsVersionArg {
    /// TLS 1.2.
    #[value(name = "1.2")]
    V12,
    /// TLS 1.3.
    #[value(name = "1.3")]
    V13,
}

impl From<TlsVersionArg> for TlsVersion {
    fn from(v: TlsVersionArg) -> TlsVersion {
        match v {
            TlsVersionArg::V12 => TlsVersion::Tls12,
            TlsVersionArg::V13 => TlsVersion::Tls13,
        }
    }
}

#[derive(Subcommand, Debug, Clone)]
enum BenchCommand {
    /// Load an echo server: each connection sends a message, waits for its echo, checks it
    /// and sends the next (Slick's echo benchmark).
    Echo(EchoArgs),
    /// Load a Thrift forwarder: start sinks on --sinks, stream oneway `msg` calls through
    /// the forwarder to them, and check that every one arrives once, in order, intact.
    Thrift(ThriftArgs),
    /// Only the sinks of `thrift`: listen, count and check what arrives, print a summary on
    /// SIGINT or SIGTERM.
    ThriftSink(SinkArgs),
    /// Write the SPECweb96 file set and its manifest into DIR.
    MakeDocroot {
        /// Directory to fill (created if missing).
        dir: PathBuf,
        /// Directories of 36 files each (SPECweb96 scales the set this way).
        #[arg(long, default_value_t = 1)]
        dirs: usize,
    },
}

/// Arguments of `fastpath bench echo`.
#[derive(Args, Debug, Clone)]
struct EchoArgs {
    /// The echo server, ADDR:PORT.
    addr: SocketAddr,
    /// Bytes per message.
    #[arg(long, value_name = "BYTES")]
    size: usize,
    /// Connections, each with one message in flight.
    #[arg(short = 'c', long, default_value_t = 16, value_name = "N")]
    connections: usize,
    /// Length of the run (e.g. 10s, 500ms).
    #[arg(short = 'd', long, default_value = "10s", value_parser = parse_duration, value_name = "TIME")]
    duration: Duration,
    /// Worker threads (default: the CPUs in this process's affinity mask).
    #[arg(short = 't', long, value_name = "N")]
    threads: Option<usize>,
    /// No 4-byte size header before the messages: plain echo.
    #[arg(long)]
    plain: bool,
    /// Longest wait for a connection or an echo.
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "TIME")]
    timeout: Duration,
    /// Also write every figure as JSON to FILE (`-`: stdout, instead of the summary).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// No progress line.
    #[arg(short = 'q', long)]
    quiet: bool,
}

/// Arguments of `fastpath bench thrift`.
#[derive(Args, Debug, Clone)]
struct ThriftArgs {
    /// The forwarder under test, ADDR:PORT (started with `--to` the same list as --sinks).
    forwarder: SocketAddr,
    /// Addresses the sinks listen on, destination 0 first: the forwarder's `--to`.
    #[arg(
        long,
        value_delimiter = ',',
        required = true,
        value_name = "ADDR,ADDR,..."
    )]
    sinks: Vec<SocketAddr>,
    /// Payload bytes per message (at least 20: client id, sequence number, send time).
    #[arg(long, value_name = "BYTES")]
    payload: usize,
    /// Client connections to the forwarder.
    #[arg(short = 'c', long, default_value_t = 16, value_name = "N")]
    connections: usize,
    /// How long the clients send (e.g. 10s, 500ms).
    #[arg(short = 'd', long, default_value = "10s", value_parser = parse_duration, value_name = "TIME")]
    duration: Duration,
    /// Client threads (default: the CPUs in this process's affinity mask).
    #[arg(short = 't', long, value_name = "N")]
    threads: Option<usize>,
    /// Sink threads (default: as many as client threads, at most one per sink).
    #[arg(long, value_name = "N")]
    sink_threads: Option<usize>,
    /// How messages are delimited.
    #[arg(long, value_enum, default_value = "framed")]
    transport: TransportArg,
    /// Longest wait, after sending stops, for every message to arrive.
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "TIME")]
    drain: Duration,
    /// Also write every figure as JSON to FILE (`-`: stdout, instead of the summary).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// No progress line.
    #[arg(short = 'q', long)]
    quiet: bool,
}

/// Arguments of `fastpath bench thrift-sink`.
#[derive(Args, Debug, Clone)]
struct SinkArgs {
    /// Addresses to listen on, destination 0 first.
    #[arg(
        long,
        value_delimiter = ',',
        required = true,
        value_name = "ADDR,ADDR,..."
    )]
    listen: Vec<SocketAddr>,
    /// How messages are delimited.
    #[arg(long, value_enum, default_value = "framed")]
    transport: TransportArg,
    /// Sink threads (default: one per CPU, at most one per sink).
    #[arg(short = 't', long, value_name = "N")]
    threads: Option<usize>,
    /// Also write the counts as JSON to FILE (`-`: stdout, instead of the summary).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// Thrift transports for `--transport`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum TransportArg {
    /// Each message after its 4-byte big-endian length.
    Framed,
    /// Messages back to back.
    Unframed,
}

impl From<TransportArg> for Transport {
    fn from(t: TransportArg) -> Transport {
        match t {
            TransportArg::Framed => Transport::Framed,
            TransportArg::Unframed => Transport::Unframed,
        }
    }
}

/// File-size mixes for `--mix`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Mix {
    /// 35% < 1 KiB, 50% 1-10 KiB, 14% 10-100 KiB, 1% 100 KiB-1 MiB.
    Specweb96,
}

/// Parses `10s`, `500ms`, `250us`, `2m`, `1h`, `1.5s`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("bad duration `{s}` (e.g. 10s, 500ms)"))?;
    let scale = match unit {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("bad duration unit in `{s}` (use us, ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(value * scale).map_err(|e| format!("bad duration `{s}`: {e}"))
}

/// Parses `FROM:TO:STEP` into the rates it names.
pub fn parse_sweep(s: &str) -> Result<Vec<f64>, String> {
    let bad = || format!("bad sweep `{s}`: expected FROM:TO:STEP, e.g. 1000:10000:1000");
    let parts: Vec<f64> = s
        .split(':')
        .map(|p| p.trim().parse::<f64>().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let [from, to, step] = parts[..] else {
        return Err(bad());
    };
    if !(from > 0.0 && to >= from && step > 0.0) {
        return Err(bad());
    }
    let count = ((to - from) / step + 1e-9).floor() as usize + 1;
    if count > 1000 {
        return Err(format!("sweep `{s}` has {count} points; at most 1000"));
    }
    Ok((0..count).map(|i| from + step * i as f64).collect())
}

/// Runs `fastpath bench` and turns the outcome into an exit code.
pub fn main(args: BenchArgs) -> ExitCode {
    crate::sys::raise_fd_limit();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match execute_until(&args, &mut out, Some(stop_on_interrupt())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fastpath bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `fastpath bench`, writing the results to `out` (the progress line goes to stderr
/// when it is a terminal).
pub fn execute(args: &BenchArgs, out: &mut dyn Write) -> Result<(), String> {
    execute_until(args, out, None)
}

/// [`execute`], ending early (with the figures so far) once `stop` is set.
fn execute_until(
    args: &BenchArgs,
    out: &mut dyn Write,
    stop: Option<&'static AtomicBool>,
) -> Result<(), String> {
    match &args.command {
        Some(BenchCommand::Echo(a)) => return echo(a, out, stop),
        Some(BenchCommand::Thrift(a)) => return thrift(a, out, stop),
        Some(BenchCommand::ThriftSink(a)) => return thrift_sink(a, out, stop),
        _ => {}
    }
    if let Some(BenchCommand::MakeDocroot { dir, dirs }) = &args.command {
        let entries =
            make_docroot(dir, *dirs).map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
        let total: u64 = entries.iter().map(|e| e.size).sum();
        writeln!(
            out,
            "wrote {} files ({:.1} MB) and {}",
            entries.len(),
            total as f64 / 1e6,
            dir.join(MANIFEST).display()
        )
        .map_err(|e| e.to_string())?;
        return Ok(());
    }
    let targets = build_targets(args)?;
    let sweep = args.sweep.as_deref().map(parse_sweep).transpose()?;
    let conn_rate_mode = args.conn_rate.is_some();
    let fixed_rate = match (args.rate, args.conn_rate) {
        (Some(r), _) | (_, Some(r)) => r,
        (None, None) => None,
    };
    if sweep.is_none()
        && matches!(
            (args.rate, args.conn_rate),
            (Some(None), _) | (_, Some(None))
        )
    {
        return Err("--rate and --conn-rate need a value unless --sweep gives the rates".into());
    }
    let load_at = |rate: Option<f64>| -> Load {
        match rate {
            None => Load::Closed,
            Some(r) if conn_rate_mode => Load::ConnRate {
                rate: r,
                calls: args.calls,
            },
            Some(r) => Load::Rate(r),
        }
    };
    let tls = TlsOptions {
        ca_file: args.cacert.clone(),
        insecure: args.insecure,
        sni: args.sni.clone(),
        resume: args.tls_resume,
        version: args.tls_version.map(TlsVersion::from),
        cipher: args.tls_cipher.clone(),
    };
    let show_progress = !args.quiet && std::io::stderr().is_terminal();
    let mut reports = Vec::new();
    'targets: for target in &targets {
        let rates: Vec<Option<f64>> = match &sweep {
            Some(rates) => rates.iter().map(|r| Some(*r)).collect(),
            None => vec![fixed_rate],
        };
        for rate in rates {
            if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                break 'targets;
            }
            let config = Config {
                target: target.clone(),
                load: load_at(rate),
                connections: args.connections,
                pipeline: args.pipeline,
                keepalive: !args.no_keepalive,
                timeout: args.timeout,
                duration: args
                    .duration
                    .or(args.requests.is_none().then_some(Duration::from_secs(10))),
                requests: args.requests,
                warmup: args.warmup,
                threads: args.threads.unwrap_or(0),
                verify: args.verify || args.expect_length.is_some(),
                stop,
                tls: tls.clone(),
            };
            let label = match rate {
                Some(r) => format!("{} @ {r}/s", target.name),
                None => target.name.clone(),
            };
            let mut last = (Duration::ZERO, 0u64);
            let mut line = |p: &Progress| {
                let dt = (p.elapsed - last.0).as_secs_f64().max(1e-9);
                let rate = p.replies.saturating_sub(last.1) as f64 / dt;
                last = (p.elapsed, p.replies);
                eprint!(
                    "\r\x1b[K[{label}] {:>4.0}s {}requests {}  replies {} ({rate:.0}/s)  errors {}",
                    p.elapsed.as_secs_f64(),
                    if p.warming_up { "warm-up  " } else { "" },
                    p.requests,
                    p.replies,
                    p.errors
                );
            };
            let progress: Option<&mut dyn FnMut(&Progress)> =
                if show_progress { Some(&mut line) } else { None };
            let result = run(&config, progress);
            if show_progress {
                eprint!("\r\x1b[K");
            }
            reports.push(result.map_err(|e| format!("{}: {e}", target.name))?);
        }
    }
    if reports.is_empty() {
        return Err("interrupted".into());
    }
    write_outputs(
        args,
        &targets,
        sweep.is_some(),
        conn_rate_mode,
        &reports,
        out,
    )
}

/// The progress line of the stream modes, on stderr when it is a terminal and not `-q`.
fn stream_progress(
    quiet: bool,
    label: &'static str,
    names: [&'static str; 3],
) -> Option<impl FnMut(Duration, [u64; 3])> {
    let show = !quiet && std::io::stderr().is_terminal();
    let mut last = (Duration::ZERO, 0u64);
    show.then_some(move |elapsed: Duration, v: [u64; 3]| {
        // The first figure gets a rate; an unnamed figure is left out.
        let dt = (elapsed - last.0).as_secs_f64().max(1e-9);
        let rate = v[0].saturating_sub(last.1) as f64 / dt;
        last = (elapsed, v[0]);
        let mut line = format!(
            "[{label}] {:>4.0}s  {} {} ({rate:.0}/s)",
            elapsed.as_secs_f64(),
            names[0],
            v[0]
        );
        for (name, value) in names[1..].iter().zip(&v[1..]) {
            if !name.is_empty() {
                line.push_str(&format!("  {name} {value}"));
            }
        }
        eprint!("\r\x1b[K{line}");
    })
}

fn clear_progress(quiet: bool) {
    if !quiet && std::io::stderr().is_terminal() {
        eprint!("\r\x1b[K");
    }
}

/// Runs a stream mode (`run`) with its progress line (quiet, label, figure names), then writes
/// its report: as text unless `--json -` asked for JSON on stdout instead, and as JSON where
/// `--json` says.
fn run_stream<R: serde::Serialize>(
    (quiet, label, names): (bool, &'static str, [&'static str; 3]),
    json: Option<&std::path::Path>,
    out: &mut dyn Write,
    run: impl FnOnce(Option<Tick<'_>>) -> Result<R, String>,
    render: impl Fn(&R) -> String,
) -> Result<R, String> {
    let mut line = stream_progress(quiet, label, names);
    let tick: Option<Tick<'_>> = line.as_mut().map(|f| f as Tick<'_>);
    let report = run(tick);
    clear_progress(quiet);
    let report = report?;
    if json != Some(std::path::Path::new("-")) {
        out.write_all(render(&report).as_bytes())
            .map_err(|e| e.to_string())?;
    }
    if let Some(path) = json {
        write_json(&report, path, out)?;
    }
    Ok(report)
}

fn echo(
    a: &EchoArgs,
    out: &mut dyn Write,
    stop: Option<&'static AtomicBool>,
) -> Result<(), String> {
    let config = EchoConfig {
        addr: a.addr,
        size: a.size,
        connections: a.connections,
        duration: a.duration,
        threads: a.threads.unwrap_or(0),
        plain: a.plain,
        timeout: a.timeout,
        stop,
    };
    let report = run_stream(
        (a.quiet, "echo", ["messages", "errors", ""]),
        a.json.as_deref(),
        out,
        |tick| run_echo(&config, tick).map_err(|e| format!("echo {}: {e}", a.addr)),
        render_echo,
    )?;
    if report.messages == 0 && report.errors.total == 0 {
        return Err("no echo came back within the run".into());
    }
    if !report.clean() {
        return Err(format!(
            "{} errors ({} mismatched echoes, {} connections failed)",
            report.errors.total, report.errors.mismatch, report.conns_failed
        ));
    }
    Ok(())
}

fn thrift(
    a: &ThriftArgs,
    out: &mut dyn Write,
    stop: Option<&'static AtomicBool>,
) -> Result<(), String> {
    let config = ThriftConfig {
        forwarder: a.forwarder,
        sinks: a.sinks.clone(),
        payload: a.payload,
        connections: a.connections,
        duration: a.duration,
        threads: a.threads.unwrap_or(0),
        sink_threads: a.sink_threads.unwrap_or(0),
        transport: a.transport.into(),
        drain: a.drain,
        stop,
    };
    let report = run_stream(
        (a.quiet, "thrift", ["arrived", "sent", "bad"]),
        a.json.as_deref(),
        out,
        |tick| run_thrift(&config, tick).map_err(|e| format!("thrift {}: {e}", a.forwarder)),
        render_thrift,
    )?;
    if !report.clean {
        return Err(format!(
            "not every message arrived once, in order, intact: lost {}, duplicated {}, reordered {}, corrupt {}, misrouted {}, failed connections {}",
            report.lost, report.duplicated, report.reordered, report.corrupt, report.misrouted, report.conns_failed
        ));
    }
    Ok(())
}

fn thrift_sink(
    a: &SinkArgs,
    out: &mut dyn Write,
    stop: Option<&'static AtomicBool>,
) -> Result<(), String> {
    // Runs until a signal; without one (embedded use), until the process ends.
    static NEVER: AtomicBool = AtomicBool::new(false);
    let stop = stop
        .map(|_| crate::sys::stop_on_terminate())
        .unwrap_or(&NEVER);
    let addrs: Vec<String> = a.listen.iter().map(|a| a.to_string()).collect();
    let report = run_sinks(
        &a.listen,
        a.transport.into(),
        a.threads.unwrap_or(0),
        stop,
        || {
            eprintln!(
                "fastpath bench thrift-sink: listening on {}",
                addrs.join(",")
            );
        },
    )
    .map_err(|e| e.to_string())?;
    if a.json.as_deref() != Some(std::path::Path::new("-")) {
        out.write_all(render_sinks(&report).as_bytes())
            .map_err(|e| e.to_string())?;
    }
    if let Some(path) = &a.json {
        write_json(&report, path, out)?;
    }
    Ok(())
}

fn write_outputs(
    args: &BenchArgs,
    targets: &[Target],
    swept: bool,
    conn_rate_mode: bool,
    reports: &[Report],
    out: &mut dyn Write,
) -> Result<(), String> {
    let text = if args.json {
        // Serialised from structs, not `serde_json::Value`, so fields keep their order.
        #[derive(serde::Serialize)]
        struct Runs<'a> {
            runs: &'a [Report],
        }
        #[derive(serde::Serialize)]
        struct Sweep<'a> {
            mode: &'static str,
            points: &'a [Report],
        }
        #[derive(serde::Serialize)]
        struct Swept<'a> {
            sweep: Sweep<'a>,
        }
        let json = if swept {
            serde_json::to_string_pretty(&Swept {
                sweep: Sweep {
                    mode: if conn_rate_mode { "conn-rate" } else { "rate" },
                    points: reports,
                },
            })
        } else if !args.compare.is_empty() {
            serde_json::to_string_pretty(&Runs { runs: reports })
        } else {
            serde_json::to_string_pretty(&reports[0])
        };
        let mut s = json.map_err(|e| e.to_string())?;
        s.push('\n');
        s
    } else if swept {
        render_sweep(reports)
    } else if targets.len() > 1 {
        let mut s = String::new();
        for r in reports {
            s.push_str(&render(r));
            s.push('\n');
        }
        s.push_str(&render_compare(reports));
        s
    } else {
        render(&reports[0])
    };
    out.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    if let Some(path) = &args.svg {
        let svg = if swept {
            sweep_chart(reports)
        } else {
            latency_chart(reports)
        };
        std::fs::write(path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// The targets of this invocation: one from the URL arguments, or one per `--compare`.
fn build_targets(args: &BenchArgs) -> Result<Vec<Target>, String> {
    let bases: Vec<(String, Vec<Url>)> = if args.compare.is_empty() {
        let urls = args
            .targets
            .iter()
            .map(|s| Url::parse(s))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        if urls.is_empty() {
            return Err("no target URL given (see --help)".into());
        }
        let name = args.targets[0].clone();
        vec![(name, urls)]
    } else {
        if !args.targets.is_empty() {
            return Err("give targets either as URLs or with --compare, not both".into());
        }
        args.compare
            .iter()
            .map(|spec| {
                let (name, url) = spec
                    .split_once('=')
                    .ok_or_else(|| format!("--compare wants NAME=URL, got `{spec}`"))?;
                Ok((
                    name.to_string(),
                    vec![Url::parse(url).map_err(|e| e.to_string())?],
                ))
            })
            .collect::<Result<_, String>>()?
    };
    let manifest_path: Option<PathBuf> = args
        .manifest
        .clone()
        .or_else(|| args.docroot.as_ref().map(|d| d.join(MANIFEST)));
    let manifest = manifest_path
        .as_deref()
        .map(read_manifest)
        .transpose()
        .map_err(|e| e.to_string())?;
    if args.mix.is_some() && manifest.is_none() {
        return Err(
            "--mix needs --docroot DIR (or --manifest FILE) made by `fastpath bench make-docroot`"
                .into(),
        );
    }
    let mut targets = Vec::new();
    for (name, urls) in bases {
        let base = &urls[0];
        let mut target = if let (Some(Mix::Specweb96), Some(entries)) = (args.mix, &manifest) {
            mix_target(&name, base, entries)
        } else if let Some(list) = &args.url_list {
            read_url_list(list, base).and_then(|urls| Target::from_urls(&name, &urls))
        } else {
            Target::from_urls(&name, &urls)
        }
        .map_err(|e| e.to_string())?;
        if args.mix.is_none() {
            if let Some(entries) = &manifest {
                apply_manifest(&mut target, entries);
            }
        }
        if let Some(len) = args.expect_length {
            for req in &mut target.requests {
                req.expect.len = Some(len);
            }
        }
        targets.push(target);
    }
    Ok(targets)
}

/// Reads the arguments as the `fastpath` binary would (for tests and embedding).
pub fn parse_args<I, T>(args: I) -> Result<BenchArgs, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    #[derive(clap::Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: BenchArgs,
    }
    use clap::Parser;
    Wrapper::try_parse_from(args).map(|w| w.args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5x").is_err());
    }

    #[test]
    fn sweeps() {
        assert_eq!(parse_sweep("100:300:100"), Ok(vec![100.0, 200.0, 300.0]));
        assert_eq!(parse_sweep("1:2:0.5"), Ok(vec![1.0, 1.5, 2.0]));
        assert!(parse_sweep("1:2").is_err());
        assert!(parse_sweep("3:2:1").is_err());
        assert!(parse_sweep("1:2:0").is_err());
    }

    #[test]
    fn arguments() {
        let a = parse_args(["bench", "-c", "4", "--rate", "100", "http://127.0.0.1:1/"]).unwrap();
        assert_eq!(a.connections, 4);
        assert_eq!(a.rate, Some(Some(100.0)));
        assert_eq!(a.targets, vec!["http://127.0.0.1:1/"]);
        let a = parse_args(["bench", "make-docroot", "/tmp/x", "--dirs", "2"]).unwrap();
        assert!(matches!(
            a.command,
            Some(BenchCommand::MakeDocroot { dirs: 2, .. })
        ));
        let a = parse_args([
            "bench",
            "--conn-rate",
            "--sweep",
            "10:30:10",
            "--compare",
            "a=http://127.0.0.1:1/",
            "b=http://127.0.0.1:2/",
        ])
        .unwrap();
        assert_eq!(a.conn_rate, Some(None));
        assert_eq!(a.compare.len(), 2);
        assert!(parse_args(["bench", "--rate", "1", "--conn-rate", "2", "http://x/"]).is_err());
    }
}
