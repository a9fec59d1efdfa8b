//! The command lines of `fastpath echo` and `fastpath forward`, and their configuration
//! files: TOML with the same names as the options (`listen`, `model`, `workers`, ...);
//! an option given on the command line wins over the file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use fastpath_kernel::Mode as KernelMode;
use fastpath_sockets::thrift::{Limits, Transport};
use fastpath_sockets::{serve, units, DriverConfig, ListenAddr, ModelKind, ServiceOptions};
use toml_edit::{DocumentMut, Item, Value};

use crate::{Echo, EchoConfig, ForwardConfig, ForwardStats, Forwarder, AUTO_KERNEL_FROM};

/// What both services take.
#[derive(Args, Debug, Clone, Default)]
pub struct CommonArgs {
    /// Address to listen on, IP:PORT or unix:PATH (repeat for several).
    #[arg(long, short)]
    listen: Vec<ListenAddr>,
    /// Concurrency model: auto, epoll, uring, percore, threads or prefork.
    #[arg(long)]
    model: Option<String>,
    /// Workers of the event-loop models; 0 means one per CPU.
    #[arg(long)]
    workers: Option<usize>,
    /// Configuration file (TOML, keys named like these options).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Most connections open at once.
    #[arg(long)]
    max_connections: Option<usize>,
    /// Close a client silent this long (e.g. 60s).
    #[arg(long, value_parser = parse_duration)]
    idle_timeout: Option<Duration>,
    /// Started as root, run as root rather than refuse.
    #[arg(long)]
    run_as_root: bool,
}

/// `fastpath echo`.
#[derive(Args, Debug, Clone)]
pub struct EchoArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Plain echo: no 4-byte buffer-size header first.
    #[arg(long)]
    plain: bool,
    /// Echo in the kernel (a BPF sockmap program): auto, on or off.
    #[arg(long, value_parser = parse_kernel_path)]
    kernel_path: Option<KernelMode>,
    /// Sockets the kernel path holds at once; past it connections are echoed in user space.
    #[arg(long)]
    kernel_sockets: Option<u32>,
}

fn parse_kernel_path(s: &str) -> Result<KernelMode, String> {
    s.parse()
}

/// `fastpath forward`.
#[derive(Args, Debug, Clone)]
pub struct ForwardArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Destinations in key order: ADDR:PORT,ADDR:PORT,...
    #[arg(long, value_delimiter = ',')]
    to: Vec<SocketAddr>,
    /// framed (4-byte length before each message) or unframed.
    #[arg(long)]
    transport: Option<String>,
    /// Largest message a client may send (e.g. 16m).
    #[arg(long, value_parser = parse_size)]
    max_message: Option<u64>,
    /// Bytes queued per destination and worker before clients wait (e.g. 1m).
    #[arg(long, value_parser = parse_size)]
    queue_limit: Option<u64>,
    /// Forward in the kernel (BPF sockmap programs): auto, on or off.
    #[arg(long, value_parser = parse_kernel_path)]
    kernel_path: Option<KernelMode>,
    /// Client sockets the kernel path holds at once; past it clients stay in user space.
    #[arg(long)]
    kernel_sockets: Option<u32>,
}

/// Settings read from a configuration file.
#[derive(Default)]
struct FileSettings {
    listen: Vec<ListenAddr>,
    model: Option<String>,
    workers: Option<usize>,
    max_connections: Option<usize>,
    idle_timeout: Option<Duration>,
    run_as_root: bool,
    plain: bool,
    kernel_path: Option<KernelMode>,
    kernel_sockets: Option<u32>,
    to: Vec<SocketAddr>,
    transport: Option<String>,
    max_message: Option<u64>,
    queue_limit: Option<u64>,
}

const COMMON_KEYS: &[&str] = &[
    "listen",
    "model",
    "workers",
    "max_connections",
    "idle_timeout",
    "run_as_root",
];

/// Reads `path`, accepting the common keys and `extra` ones; every error is one line.
fn read_file(path: &Path, extra: &[&str]) -> Result<FileSettings, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    let doc: DocumentMut = text.parse().map_err(|e| format!("not TOML: {e}"))?;
    let mut settings = FileSettings::default();
    for (key, item) in doc.iter() {
        if !COMMON_KEYS.contains(&key) && !extra.contains(&key) {
            let mut known: Vec<&str> = COMMON_KEYS.to_vec();
            known.extend_from_slice(extra);
            return Err(format!(
                "unknown key `{key}` (expected one of {})",
                known.join(", ")
            ));
        }
        let bad = |what: &str| format!("`{key}` must be {what}");
        let string = || item.as_str().ok_or_else(|| bad("a string"));
        match key {
            "listen" | "to" => {
                let values: Vec<&Value> = match item {
                    Item::Value(Value::Array(array)) => array.iter().collect(),
                    Item::Value(value @ Value::String(_)) => vec![value],
                    _ => return Err(bad("an address or a list of addresses")),
                };
                for value in values {
                    let text = value.as_str().ok_or_else(|| bad("a list of strings"))?;
                    if key == "listen" {
                        let addr = text
                            .parse()
                            .map_err(|e| format!("`{key}`: `{text}`: {e}"))?;
                        settings.listen.push(addr);
                    } else {
                        let addr = text
                            .parse()
                            .map_err(|_| format!("`{key}`: `{text}` is not an ADDR:PORT"))?;
                        settings.to.push(addr);
                    }
                }
            }
            "model" => settings.model = Some(string()?.to_string()),
            "kernel_path" => settings.kernel_path = Some(string()?.parse()?),
            "kernel_sockets" => {
                let n = item
                    .as_integer()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|&n| n > 0)
                    .ok_or_else(|| bad("a whole number from 1"))?;
                settings.kernel_sockets = Some(n);
            }
            "transport" => settings.transport = Some(string()?.to_string()),
            "workers" | "max_connections" => {
                let n = item
                    .as_integer()
                    .filter(|&n| n >= 0)
                    .ok_or_else(|| bad("a whole number"))? as usize;
                if key == "workers" {
                    settings.workers = Some(n);
                } else {
                    settings.max_connections = Some(n);
                }
            }
            "idle_timeout" => settings.idle_timeout = Some(parse_duration(string()?)?),
            "max_message" => settings.max_message = Some(parse_size(string()?)?),
            "queue_limit" => settings.queue_limit = Some(parse_size(string()?)?),
            "run_as_root" | "plain" => {
                let on = item.as_bool().ok_or_else(|| bad("true or false"))?;
                if key == "plain" {
                    settings.plain = on;
                } else {
                    settings.run_as_root = on;
                }
            }
            _ => unreachable!("keys are checked above"),
        }
    }
    Ok(settings)
}

/// A size as the web server's configuration writes it (`64k`, `16MiB`, a bare number of
/// bytes).
fn parse_size(s: &str) -> Result<u64, String> {
    units::parse_size(s.trim()).ok_or_else(|| format!("`{s}` is not a size (e.g. 64k, 16MiB)"))
}

/// A duration as the web server's configuration writes it (`500ms`, `60s`, `2m`, a bare
/// number of seconds).
fn parse_duration(s: &str) -> Result<Duration, String> {
    units::parse_duration(s.trim())
        .ok_or_else(|| format!("`{s}` is not a duration (e.g. 500ms, 60s, 2m)"))
}

/// The service options from the command line over the file; an error says what is wrong.
fn options(
    common: &CommonArgs,
    file: &FileSettings,
    default_port: u16,
) -> Result<(ServiceOptions, Option<Duration>), String> {
    let mut options = ServiceOptions::listening(if !common.listen.is_empty() {
        common.listen.clone()
    } else if !file.listen.is_empty() {
        file.listen.clone()
    } else {
        vec![ListenAddr::Tcp(SocketAddr::from((
            [127, 0, 0, 1],
            default_port,
        )))]
    });
    let model = common.model.clone().or(file.model.clone());
    options.model = match model.as_deref() {
        None | Some("auto") => {
            if fastpath_sockets::uring_available().is_ok() {
                ModelKind::Uring
            } else {
                ModelKind::Epoll
            }
        }
        Some(name) => ModelKind::from_name(name).ok_or_else(|| {
            let names: Vec<&str> = ModelKind::ALL.iter().map(|k| k.name()).collect();
            format!(
                "unknown model `{name}` (expected auto or one of {})",
                names.join(", ")
            )
        })?,
    };
    options.workers = common.workers.or(file.workers).unwrap_or(0);
    let mut driver = DriverConfig::default();
    if let Some(max) = common.max_connections.or(file.max_connections) {
        driver.max_connections = max;
    }
    options.driver = driver;
    let run_as_root = common.run_as_root || file.run_as_root;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 && !run_as_root {
        return Err(
            "refusing to run as root: these services need no privileges (pass --run-as-root \
             to run as root anyway)"
                .to_string(),
        );
    }
    Ok((options, common.idle_timeout.or(file.idle_timeout)))
}

fn load(common: &CommonArgs, extra: &[&str]) -> Result<FileSettings, String> {
    match &common.config {
        Some(path) => read_file(path, extra).map_err(|e| format!("{}: {e}", path.display())),
        None => Ok(FileSettings::default()),
    }
}

/// The file's settings, and the service options from the command line over them.
fn settings(
    common: &CommonArgs,
    extra: &[&str],
    default_port: u16,
) -> Result<(FileSettings, ServiceOptions, Option<Duration>), String> {
    let file = load(common, extra)?;
    let (options, idle) = options(common, &file, default_port)?;
    Ok((file, options, idle))
}

fn fail(why: impl std::fmt::Display) -> ExitCode {
    eprintln!("fastpath: {why}");
    ExitCode::FAILURE
}

/// Sockets the echo's and the forwarder's kernel paths hold by default.
const DEFAULT_KERNEL_SOCKETS: u32 = 65536;

/// Destination sockets (workers × destinations) the forwarder's kernel path holds.
const KERNEL_DESTINATIONS: u32 = 65536;

/// The longest message the forwarder's kernel path frames; a client that sends a longer one
/// is forwarded in user space from there on.
const KERNEL_MAX_FRAME: usize = 32 * 1024;

/// Whether `kernel_path = "auto"` forwards in the kernel: not on this kind of machine, where
/// it is slower than user space and resets clients at saturation (BENCHMARKS.md, "Kernel
/// path: the in-kernel Thrift forwarder").
const AUTO_KERNEL_FORWARD: bool = false;

/// Runs `fastpath echo`.
pub fn echo(args: EchoArgs) -> ExitCode {
    let (file, options, idle) = match settings(
        &args.common,
        &["plain", "kernel_path", "kernel_sockets"],
        9000,
    ) {
        Ok(settings) => settings,
        Err(e) => return fail(e),
    };
    let mut config = EchoConfig {
        plain: args.plain || file.plain,
        ..EchoConfig::default()
    };
    if let Some(idle) = idle {
        config.idle_timeout = idle;
    }
    let mode = args.kernel_path.or(file.kernel_path).unwrap_or_default();
    let sockets = args
        .kernel_sockets
        .or(file.kernel_sockets)
        .unwrap_or(DEFAULT_KERNEL_SOCKETS);
    if sockets == 0 {
        return fail("--kernel-sockets must be at least 1");
    }
    // What the kernel may hold for a client beyond its send buffer: as much as user space
    // queues for one.
    let max_held = config.output_limit.min(u32::MAX as usize) as u32;
    // auto: only where it wins (the buffer sizes measured in BENCHMARKS.md).
    let (from, scope) = match mode {
        KernelMode::Auto => (
            AUTO_KERNEL_FROM,
            format!("buffers of {AUTO_KERNEL_FROM} bytes and more, where it wins"),
        ),
        _ => (0, "every connection".to_string()),
    };
    let kernel = if mode == KernelMode::Auto && config.plain {
        tracing::info!(
            "kernel path: off (kernel_path = \"auto\": plain echo announces no buffer size, \
             so nothing tells where it would win)"
        );
        None
    } else {
        match fastpath_kernel::echo_path(mode, sockets, max_held, &scope) {
            Ok(kernel) => kernel,
            Err(e) => return fail(e),
        }
    };
    match serve("echo", &options, |_| {
        Echo::with_kernel(config, kernel.clone(), from)
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// Runs `fastpath forward`.
pub fn forward(args: ForwardArgs) -> ExitCode {
    let extra = [
        "to",
        "transport",
        "max_message",
        "queue_limit",
        "kernel_path",
        "kernel_sockets",
    ];
    let (file, options, idle) = match settings(&args.common, &extra, 9100) {
        Ok(settings) => settings,
        Err(e) => return fail(e),
    };
    let mut config = ForwardConfig {
        destinations: if args.to.is_empty() {
            file.to.clone()
        } else {
            args.to.clone()
        },
        ..ForwardConfig::default()
    };
    if config.destinations.is_empty() {
        return fail("forward: no destinations: give --to ADDR:PORT,ADDR:PORT,... (in key order)");
    }
    config.transport = match args.transport.as_deref().or(file.transport.as_deref()) {
        None | Some("framed") => Transport::Framed,
        Some("unframed") => Transport::Unframed,
        Some(other) => {
            return fail(format!(
                "unknown transport `{other}` (expected framed or unframed)"
            ))
        }
    };
    if let Some(max) = args.max_message.or(file.max_message) {
        config.limits = Limits {
            max_message_bytes: max.min(i32::MAX as u64) as usize,
            ..Limits::default()
        };
    }
    if let Some(limit) = args.queue_limit.or(file.queue_limit) {
        config.queue_limit = limit as usize;
    }
    if let Some(idle) = idle {
        config.idle_timeout = idle;
    }
    let mode = args.kernel_path.or(file.kernel_path).unwrap_or_default();
    let sockets = args
        .kernel_sockets
        .or(file.kernel_sockets)
        .unwrap_or(DEFAULT_KERNEL_SOCKETS);
    if sockets == 0 {
        return fail("--kernel-sockets must be at least 1");
    }
    let kernel = match (mode, config.transport) {
        (KernelMode::Off, _) => {
            tracing::info!("kernel path: off (kernel_path = \"off\")");
            None
        }
        (KernelMode::On, Transport::Unframed) => {
            return fail(
                "kernel path: cannot be had: the kernel frames messages by their length, which \
                 the unframed transport does not send",
            )
        }
        (KernelMode::Auto, Transport::Unframed) => {
            tracing::info!(
                "kernel path: off (kernel_path = \"auto\": the unframed transport has no \
                 lengths for the kernel to frame messages by)"
            );
            None
        }
        (KernelMode::On, _) if matches!(options.model, ModelKind::Threads | ModelKind::Prefork) => {
            // The Apache Thrift interop test loses messages on these two models with the
            // kernel path (BENCHMARKS.md, "Kernel path: the in-kernel Thrift forwarder"):
            // until that is understood, they stay in user space.
            return fail(format!(
                "kernel path: cannot be had on the {} model (messages were lost there in \
                 testing): use epoll, uring or percore",
                options.model.name()
            ));
        }
        (KernelMode::Auto, Transport::Framed) if !AUTO_KERNEL_FORWARD => {
            tracing::info!(
                "kernel path: off (kernel_path = \"auto\": the in-kernel forwarder does not win \
                 on this kind of machine and resets clients at saturation, see BENCHMARKS.md; \
                 \"on\" forces it)"
            );
            None
        }
        _ => {
            // Below the receive buffer, past which the stream parser would abort a socket.
            let max_frame = config.limits.max_message_bytes.min(KERNEL_MAX_FRAME) as u32;
            let max_held = (config.queue_limit as u64 * 4).min(u64::from(u32::MAX)) as u32;
            match fastpath_kernel::forward_path(
                mode,
                sockets,
                KERNEL_DESTINATIONS,
                max_frame,
                max_held,
            ) {
                Ok(kernel) => kernel,
                Err(e) => return fail(e),
            }
        }
    };
    let config = Arc::new(config);
    let stats = Arc::new(ForwardStats::default());
    let to: Vec<String> = config.destinations.iter().map(|a| a.to_string()).collect();
    tracing::info!(
        "forward: {} destination{}: {}",
        to.len(),
        if to.len() == 1 { "" } else { "s" },
        to.join(", ")
    );
    let served = serve("forward", &options, |_| {
        Forwarder::with_kernel(config.clone(), stats.clone(), kernel.clone())
    });
    tracing::info!(
        "forward: {} messages forwarded, {} undelivered, {} clients closed for bad input{}",
        stats.forwarded.load(Ordering::Relaxed),
        stats.undelivered.load(Ordering::Relaxed),
        stats.refused_clients.load(Ordering::Relaxed),
        if kernel.is_some() {
            format!(
                "; {} clients in the kernel path (their messages the kernel forwarded are not \
                 counted)",
                stats.kernel_clients.load(Ordering::Relaxed)
            )
        } else {
            String::new()
        }
    );
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}
