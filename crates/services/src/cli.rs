//! The command lines of `fastpath echo` and `fastpath forward`, and their configuration
//! files: TOML with the same names as the options (`listen`, `model`, `workers`, ...);
//! an option given on the command line wins over the file.

use std::io::Write;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use fastpath_kernel::Mode as KernelMode;
use fastpath_sockets::thrift::{Limits, Transport};
use fastpath_sockets::{serve, units, DriverConfig, ListenAddr, ModelKind, ServiceOptions};
use toml_edit::{Document, Item, Value};

use crate::{Echo, EchoConfig, ForwardConfig, ForwardStats, Forwarder};

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
    /// Speak TLS on every address, with this certificate chain (PEM); needs --tls-key.
    #[arg(long, requires = "tls_key")]
    tls_certificate: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, requires = "tls_certificate")]
    tls_key: Option<PathBuf>,
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
    /// auto or off: the forwarder has no kernel path (withdrawn, see docs/framework.md); on
    /// is refused, saying why.
    #[arg(long, value_parser = parse_kernel_path)]
    kernel_path: Option<KernelMode>,
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
    tls_certificate: Option<PathBuf>,
    tls_key: Option<PathBuf>,
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
    "tls_certificate",
    "tls_key",
];

/// Reads `path`, accepting the common keys and `extra` ones; every error is one line,
/// `FILE:LINE:COLUMN: what` where the parser gives a position.
fn read_file(path: &Path, extra: &[&str]) -> Result<FileSettings, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read it: {e}", path.display()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    parse_file(&text, extra, base).map_err(|(span, e)| match span {
        Some(span) => {
            let (line, column) = position(&text, span.start);
            format!("{}:{line}:{column}: {e}", path.display())
        }
        None => format!("{}: {e}", path.display()),
    })
}

/// 1-based line and column (in characters) of a byte offset in `text`.
fn position(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (
        before.matches('\n').count() + 1,
        before[line_start..].chars().count() + 1,
    )
}

/// An error, and where in the text it is when the parser knows.
type Located = (Option<Range<usize>>, String);

/// Reads the file's `text`; paths in it are relative to `base`, the file's directory.
fn parse_file(text: &str, extra: &[&str], base: &Path) -> Result<FileSettings, Located> {
    let doc =
        Document::parse(text).map_err(|e| (e.span(), format!("not TOML: {}", e.message())))?;
    let table = doc.as_table();
    let mut settings = FileSettings::default();
    for (key, item) in table.iter() {
        if !COMMON_KEYS.contains(&key) && !extra.contains(&key) {
            let mut known: Vec<&str> = COMMON_KEYS.to_vec();
            known.extend_from_slice(extra);
            return Err((
                table.key(key).and_then(|k| k.span()),
                format!("unknown key `{key}` (expected one of {})", known.join(", ")),
            ));
        }
        read_key(&mut settings, key, item, base)
            .map_err(|(span, e)| (span.or_else(|| item.span()), e))?;
    }
    if settings.tls_certificate.is_some() != settings.tls_key.is_some() {
        let (given, missing) = if settings.tls_certificate.is_some() {
            ("tls_certificate", "tls_key")
        } else {
            ("tls_key", "tls_certificate")
        };
        return Err((
            table.key(given).and_then(|k| k.span()),
            format!("`{given}` needs `{missing}` too"),
        ));
    }
    Ok(settings)
}

/// Reads one known key into `settings`; an error without a position is the value's.
fn read_key(
    settings: &mut FileSettings,
    key: &str,
    item: &Item,
    base: &Path,
) -> Result<(), Located> {
    let bad = |what: &str| (None, format!("`{key}` must be {what}"));
    let string = || item.as_str().ok_or_else(|| bad("a string"));
    match key {
        "listen" | "to" => {
            let values: Vec<&Value> = match item {
                Item::Value(Value::Array(array)) => array.iter().collect(),
                Item::Value(value @ Value::String(_)) => vec![value],
                _ => return Err(bad("an address or a list of addresses")),
            };
            for element in values {
                let at = element.span();
                let text = element
                    .as_str()
                    .ok_or_else(|| (at.clone(), format!("`{key}` must be a list of strings")))?;
                if key == "listen" {
                    let addr = text
                        .parse()
                        .map_err(|e| (at, format!("`{key}`: `{text}`: {e}")))?;
                    settings.listen.push(addr);
                } else {
                    let addr = text
                        .parse()
                        .map_err(|_| (at, format!("`{key}`: `{text}` is not an ADDR:PORT")))?;
                    settings.to.push(addr);
                }
            }
        }
        "model" => {
            let name = string()?;
            value(model_kind(name))?;
            settings.model = Some(name.to_string());
        }
        "kernel_path" => settings.kernel_path = Some(value(string()?.parse())?),
        "kernel_sockets" => {
            let n = item
                .as_integer()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| bad("a whole number from 1"))?;
            settings.kernel_sockets = Some(n);
        }
        "transport" => {
            let name = string()?;
            value(transport(name))?;
            settings.transport = Some(name.to_string());
        }
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
        "idle_timeout" => settings.idle_timeout = Some(value(parse_duration(string()?))?),
        "tls_certificate" => settings.tls_certificate = Some(base.join(string()?)),
        "tls_key" => settings.tls_key = Some(base.join(string()?)),
        "max_message" => settings.max_message = Some(value(parse_size(string()?))?),
        "queue_limit" => settings.queue_limit = Some(value(parse_size(string()?))?),
        "run_as_root" | "plain" => {
            let on = item.as_bool().ok_or_else(|| bad("true or false"))?;
            if key == "plain" {
                settings.plain = on;
            } else {
                settings.run_as_root = on;
            }
        }
        _ => unreachable!("keys are checked before"),
    }
    Ok(())
}

/// A value's error, at the value.
fn value<T>(read: Result<T, String>) -> Result<T, Located> {
    read.map_err(|e| (None, e))
}

/// A model by its name; `None` for auto.
fn model_kind(name: &str) -> Result<Option<ModelKind>, String> {
    if name == "auto" {
        return Ok(None);
    }
    ModelKind::from_name(name).map(Some).ok_or_else(|| {
        let names: Vec<&str> = ModelKind::ALL.iter().map(|k| k.name()).collect();
        format!(
            "unknown model `{name}` (expected auto or one of {})",
            names.join(", ")
        )
    })
}

/// What `model = "auto"` runs where io_uring can: the loop a probe at start measured to
/// echo messages at the least CPU each (`fastpath_sockets::auto_model`; a service's work
/// is a read and a write per message, as an echo's), epoll unless io_uring is
/// [`fastpath_sockets::MODEL_MARGIN`] times ahead; and the note that says so.
fn measured_model() -> (ModelKind, String) {
    use fastpath_sockets::{ECHO_LOADS, MODEL_MARGIN};
    match fastpath_sockets::auto_model(&ECHO_LOADS) {
        Ok((kind, figures)) => {
            let note = format!(
                "; model = \"auto\": the least CPU per message in a start-up probe, io_uring \
                 only when {MODEL_MARGIN}× ahead ({figures})"
            );
            (kind, note)
        }
        Err(e) => (
            ModelKind::Epoll,
            format!("; model = \"auto\": the start-up probe failed ({e})"),
        ),
    }
}

/// The forwarder's transport by its name.
fn transport(name: &str) -> Result<Transport, String> {
    match name {
        "framed" => Ok(Transport::Framed),
        "unframed" => Ok(Transport::Unframed),
        other => Err(format!(
            "unknown transport `{other}` (expected framed or unframed)"
        )),
    }
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

/// What a service's command line and configuration file come to, decided before it serves;
/// `fastpath check --service` prints it, the start serves it.
struct Setup {
    options: ServiceOptions,
    idle_timeout: Option<Duration>,
    run_as_root: bool,
    /// The model chosen, and why when not named.
    model_note: String,
    /// The certificate chain when every address speaks TLS.
    tls: Option<PathBuf>,
}

impl Setup {
    /// What the listeners speak, for the log and the check.
    fn tls_note(&self) -> String {
        match &self.tls {
            Some(chain) => format!(
                "TLS on every address, with the certificate in {}",
                chain.display()
            ),
            None => "no TLS (plain TCP on every address)".to_string(),
        }
    }
}

/// The service options from the command line over the file; an error says what is wrong.
/// `starting`: refuses root without `run_as_root` (the check only notes it).
fn options(
    common: &CommonArgs,
    file: &FileSettings,
    default_port: u16,
    starting: bool,
) -> Result<Setup, String> {
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
    let uring = fastpath_sockets::uring_available();
    // The model configured, the one that runs (io_uring falls back to epoll at start, in
    // fastpath_sockets::serve), and why they differ or how the model was chosen.
    let (configured, runs, why) = match model_kind(model.as_deref().unwrap_or("auto"))? {
        None => match &uring {
            Ok(()) => {
                let (kind, why) = measured_model();
                (kind, kind, why)
            }
            Err(why) => (
                ModelKind::Epoll,
                ModelKind::Epoll,
                format!("; model = \"auto\": io_uring cannot run here: {why}"),
            ),
        },
        Some(ModelKind::Uring) => match &uring {
            Ok(()) => (ModelKind::Uring, ModelKind::Uring, String::new()),
            Err(why) => (
                ModelKind::Uring,
                ModelKind::Epoll,
                format!("; io_uring cannot run here: {why}, so uring falls back to epoll"),
            ),
        },
        Some(kind) => (kind, kind, String::new()),
    };
    options.model = configured;
    options.workers = common.workers.or(file.workers).unwrap_or(0);
    // The shape the listening line gives at start.
    let shape = runs
        .with(&options.settings)
        .shape(fastpath_sockets::worker_count(options.workers));
    let model_note = format!("model: {} ({shape}{why})", runs.name());
    let mut driver = DriverConfig::default();
    if let Some(max) = common.max_connections.or(file.max_connections) {
        driver.max_connections = max;
    }
    let idle_timeout = common.idle_timeout.or(file.idle_timeout);
    let tls = match (&common.tls_certificate, &common.tls_key) {
        (Some(chain), Some(key)) => Some((chain, key)),
        _ => file.tls_certificate.as_ref().zip(file.tls_key.as_ref()),
    };
    if let Some((chain, key)) = tls {
        // The handshake is held to the idle timeout, else to TLS listeners' default.
        let handshake =
            idle_timeout.unwrap_or(fastpath_tls::TlsSettings::default().handshake_timeout);
        driver.transports =
            fastpath_tls::every_listener(chain, key, handshake).map_err(|e| format!("TLS: {e}"))?;
    }
    options.driver = driver;
    let run_as_root = common.run_as_root || file.run_as_root;
    if let Some(why) = root_refusal(run_as_root).filter(|_| starting) {
        return Err(why.to_string());
    }
    Ok(Setup {
        options,
        idle_timeout,
        run_as_root,
        model_note,
        tls: tls.map(|(chain, _)| chain.clone()),
    })
}

/// Why a service started as root without `run_as_root` refuses to run; `None` if it runs.
fn root_refusal(run_as_root: bool) -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions.
    (unsafe { libc::geteuid() } == 0 && !run_as_root).then_some(
        "refusing to run as root: these services need no privileges (pass --run-as-root to run \
         as root anyway)",
    )
}

fn load(common: &CommonArgs, extra: &[&str]) -> Result<FileSettings, String> {
    match &common.config {
        Some(path) => read_file(path, extra),
        None => Ok(FileSettings::default()),
    }
}

fn fail(why: impl std::fmt::Display) -> ExitCode {
    eprintln!("fastpath: {why}");
    ExitCode::FAILURE
}

/// Sockets the echo's kernel path holds by default.
const DEFAULT_KERNEL_SOCKETS: u32 = 65536;

/// Why the Thrift forwarder has no kernel path (docs/framework.md, "The forwarder in the
/// kernel, withdrawn"). Its stream parser reached a kernel BUG (tcp_collapse, under receive
/// memory pressure, in the stream parser's work): the oops killed the kernel's one stream
/// parser worker, after which every sockmap stream parser on the machine stalls until a
/// reboot. It also lost messages at saturation and was slower than user space.
const FORWARD_KERNEL_WITHDRAWN: &str = "the forwarder's kernel path is withdrawn: its BPF \
     stream parser drove this kernel generation (6.14 and later) into a BUG under load, which \
     leaves every stream parser on the machine stalled until a reboot (docs/framework.md)";

const ECHO_KEYS: &[&str] = &["plain", "kernel_path", "kernel_sockets"];

const FORWARD_KEYS: &[&str] = &[
    "to",
    "transport",
    "max_message",
    "queue_limit",
    "kernel_path",
];

/// The echo as it will run.
struct EchoSetup {
    setup: Setup,
    config: EchoConfig,
    kernel: Option<Arc<fastpath_kernel::EchoPath>>,
    /// Buffer size from which connections go to the kernel path.
    from: u32,
    /// What the kernel path's outcome is, and why: the start-up log line.
    kernel_line: String,
}

/// Everything `fastpath echo` decides before serving, the kernel path loaded if it is on.
fn echo_setup(args: &EchoArgs, starting: bool) -> Result<EchoSetup, String> {
    let file = load(&args.common, ECHO_KEYS)?;
    let setup = options(&args.common, &file, 9000, starting)?;
    let mut config = EchoConfig {
        plain: args.plain || file.plain,
        ..EchoConfig::default()
    };
    if let Some(idle) = setup.idle_timeout {
        config.idle_timeout = idle;
    }
    let mode = args.kernel_path.or(file.kernel_path).unwrap_or_default();
    let sockets = args
        .kernel_sockets
        .or(file.kernel_sockets)
        .unwrap_or(DEFAULT_KERNEL_SOCKETS);
    if sockets == 0 {
        return Err("--kernel-sockets must be at least 1".to_string());
    }
    // What the kernel may hold for a client beyond its send buffer: as much as user space
    // queues for one.
    let max_held = config.output_limit.min(u32::MAX as usize) as u32;
    let (mut from, scope) = match mode {
        // Narrowed below to where the probe finds that the kernel wins.
        KernelMode::Auto => (u32::MAX, "the buffer sizes where it wins".to_string()),
        _ => (0, "every connection".to_string()),
    };
    let (kernel, kernel_line) = if setup.tls.is_some() {
        // The in-kernel echo sends back what arrives, ciphertext included; without kTLS
        // (which this kernel does not have) nothing can decrypt and encrypt it there.
        if mode == KernelMode::On {
            return Err(
                "kernel_path = \"on\" cannot echo over TLS: the kernel would send \
                 back the bytes as they arrive, which only user space can decrypt"
                    .to_string(),
            );
        }
        (
            None,
            "kernel path: off (TLS: only user space decrypts and encrypts)".to_string(),
        )
    } else if mode == KernelMode::Auto && config.plain {
        (
            None,
            "kernel path: off (kernel_path = \"auto\": plain echo announces no buffer size, \
             so nothing tells where it would win)"
                .to_string(),
        )
    } else {
        let (kernel, line) = fastpath_kernel::echo_outcome(mode, sockets, max_held, &scope)?;
        match kernel {
            Some(path) if mode == KernelMode::Auto => {
                let (chosen, line) = auto_echo_from(&path);
                from = chosen.unwrap_or(u32::MAX);
                (chosen.map(|_| path), line)
            }
            kernel => (kernel, line),
        }
    };
    Ok(EchoSetup {
        setup,
        config,
        kernel,
        from,
        kernel_line,
    })
}

/// Where `kernel_path = "auto"` hands connections to the kernel, by a probe of both paths
/// on this machine: the smallest announced buffer from which the kernel's echo moved at
/// least as many messages as user space's (`None`: nowhere), and the log line that says so
/// with the figures.
fn auto_echo_from(path: &fastpath_kernel::EchoPath) -> (Option<u32>, String) {
    let sizes = fastpath_kernel::PROBE_SIZES;
    match fastpath_kernel::probe_echo(path, &sizes, fastpath_kernel::PROBE_TIME) {
        Ok(results) => {
            let figures = format!(
                "the kernel's echo against user space's messages per second, {:.1} × needed: {}",
                fastpath_kernel::KERNEL_MARGIN,
                fastpath_kernel::describe(&results)
            );
            match fastpath_kernel::kernel_wins_from(&results) {
                Some(from) => (
                    Some(from),
                    format!(
                        "kernel path: on for buffers of {from} bytes and more (kernel_path = \
                         \"auto\": measured at start, {figures})"
                    ),
                ),
                None => (
                    None,
                    format!(
                        "kernel path: off (kernel_path = \"auto\": measured at start, \
                         {figures})"
                    ),
                ),
            }
        }
        Err(e) => (
            None,
            format!("kernel path: off (kernel_path = \"auto\": the probe of it failed: {e})"),
        ),
    }
}

/// Runs `fastpath echo`.
pub fn echo(args: EchoArgs) -> ExitCode {
    let echo = match echo_setup(&args, true) {
        Ok(echo) => echo,
        Err(e) => return fail(e),
    };
    tracing::info!("{}", echo.kernel_line);
    tracing::info!("{}", echo.setup.tls_note());
    let EchoSetup {
        setup,
        config,
        kernel,
        from,
        ..
    } = echo;
    match serve("echo", &setup.options, |_| {
        Echo::with_kernel(config, kernel.clone(), from)
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// The forwarder as it will run.
struct ForwardSetup {
    setup: Setup,
    config: ForwardConfig,
    /// What the kernel path's outcome is, and why: the start-up log line.
    kernel_line: String,
}

/// Everything `fastpath forward` decides before serving, the kernel path loaded if it is on.
fn forward_setup(args: &ForwardArgs, starting: bool) -> Result<ForwardSetup, String> {
    let file = load(&args.common, FORWARD_KEYS)?;
    let setup = options(&args.common, &file, 9100, starting)?;
    let mut config = ForwardConfig {
        destinations: if args.to.is_empty() {
            file.to.clone()
        } else {
            args.to.clone()
        },
        ..ForwardConfig::default()
    };
    if config.destinations.is_empty() {
        return Err(
            "forward: no destinations: give --to ADDR:PORT,ADDR:PORT,... (in key order)"
                .to_string(),
        );
    }
    config.transport = match args.transport.as_deref().or(file.transport.as_deref()) {
        None => Transport::Framed,
        Some(name) => transport(name)?,
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
    if let Some(idle) = setup.idle_timeout {
        config.idle_timeout = idle;
    }
    let kernel_line = match args.kernel_path.or(file.kernel_path).unwrap_or_default() {
        KernelMode::On => {
            return Err(format!(
                "kernel path: cannot be had: {FORWARD_KERNEL_WITHDRAWN}"
            ))
        }
        KernelMode::Off => "kernel path: off (kernel_path = \"off\")".to_string(),
        KernelMode::Auto => format!("kernel path: off ({FORWARD_KERNEL_WITHDRAWN})"),
    };
    Ok(ForwardSetup {
        setup,
        config,
        kernel_line,
    })
}

/// Runs `fastpath forward`.
pub fn forward(args: ForwardArgs) -> ExitCode {
    let forward = match forward_setup(&args, true) {
        Ok(forward) => forward,
        Err(e) => return fail(e),
    };
    tracing::info!("{}", forward.kernel_line);
    tracing::info!("{}", forward.setup.tls_note());
    let ForwardSetup { setup, config, .. } = forward;
    let config = Arc::new(config);
    let stats = Arc::new(ForwardStats::default());
    let to: Vec<String> = config.destinations.iter().map(|a| a.to_string()).collect();
    tracing::info!(
        "forward: {} destination{}: {}",
        to.len(),
        if to.len() == 1 { "" } else { "s" },
        to.join(", ")
    );
    let served = serve("forward", &setup.options, |_| {
        Forwarder::new(config.clone(), stats.clone())
    });
    tracing::info!(
        "forward: {} messages forwarded, {} undelivered, {} clients closed for bad input",
        stats.forwarded.load(Ordering::Relaxed),
        stats.undelivered.load(Ordering::Relaxed),
        stats.refused_clients.load(Ordering::Relaxed),
    );
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// Which service a configuration file is for (`fastpath check --service`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// `fastpath echo`.
    Echo,
    /// `fastpath forward`.
    Forward,
}

/// `fastpath check --service echo|forward FILE`: reads `path` as the service would at start
/// and prints what it gets on this machine (the model, the kernel path's outcome), as `FILE:
/// note: ...` lines. A configuration the service would refuse fails, with the reason. The
/// kernel path, if loaded to find out, is released on return.
pub fn check(service: Service, path: &Path) -> ExitCode {
    let common = CommonArgs {
        config: Some(path.to_path_buf()),
        ..CommonArgs::default()
    };
    let outcome = match service {
        Service::Echo => echo_setup(
            &EchoArgs {
                common,
                plain: false,
                kernel_path: None,
                kernel_sockets: None,
            },
            false,
        )
        .map(|echo| (echo.setup, echo.kernel_line)),
        Service::Forward => forward_setup(
            &ForwardArgs {
                common,
                to: Vec::new(),
                transport: None,
                max_message: None,
                queue_limit: None,
                kernel_path: None,
            },
            false,
        )
        .map(|forward| (forward.setup, forward.kernel_line)),
    };
    let shown = path.display();
    match outcome {
        Ok((setup, kernel_line)) => {
            let mut report = format!(
                "{shown}: note: {}\n{shown}: note: {kernel_line}\n{shown}: note: {}\n",
                setup.model_note,
                setup.tls_note()
            );
            // A note, not an error: the service may be started as another user than the check.
            if root_refusal(setup.run_as_root).is_some() {
                report.push_str(&format!(
                    "{shown}: note: started as root, as this check is, the service refuses to \
                     run without `run_as_root = true` (it needs no privileges)\n"
                ));
            }
            report.push_str(&format!("{shown}: configuration ok\n"));
            // Not println!, which panics when the reader has gone (`| head -1`): the verdict
            // is the exit status.
            let _ = std::io::stdout().lock().write_all(report.as_bytes());
            ExitCode::SUCCESS
        }
        Err(e) => {
            // Errors from the file already name it; the others are about its settings.
            if e.starts_with(&*shown.to_string()) {
                eprintln!("{e}");
            } else {
                eprintln!("{shown}: {e}");
            }
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_at(text: &str, extra: &[&str]) -> ((usize, usize), String) {
        let (span, e) = parse_file(text, extra, Path::new("/etc"))
            .err()
            .expect("an error");
        (position(text, span.expect("a position").start), e)
    }

    #[test]
    fn positions_count_lines_and_characters() {
        assert_eq!(position("", 0), (1, 1));
        assert_eq!(position("ab\ncd", 4), (2, 2));
        // Columns are characters, not bytes.
        assert_eq!(position("# é\nx", 5), (2, 1));
        assert_eq!(position("é = 1", 3), (1, 3));
    }

    #[test]
    fn errors_point_at_the_key_or_the_value() {
        let (at, e) = error_at("workers = 1\n  nope = 2\n", ECHO_KEYS);
        assert_eq!(at, (2, 3));
        assert!(e.starts_with("unknown key `nope`"), "{e}");
        let (at, e) = error_at("workers = -1\n", ECHO_KEYS);
        assert_eq!(
            (at, e.as_str()),
            ((1, 11), "`workers` must be a whole number")
        );
        // A bad element of a list: that element.
        let (at, e) = error_at("to = [\"127.0.0.1:1\", 5]\n", FORWARD_KEYS);
        assert_eq!(
            (at, e.as_str()),
            ((1, 22), "`to` must be a list of strings")
        );
        let (at, _) = error_at("plain = \"yes\"\n", ECHO_KEYS);
        assert_eq!(at, (1, 9));
        // A key only the forwarder knows.
        let (at, e) = error_at("to = \"127.0.0.1:1\"\n", ECHO_KEYS);
        assert_eq!(at, (1, 1));
        assert!(e.starts_with("unknown key `to`"), "{e}");
        // A certificate without its key, at the key given.
        let (at, e) = error_at("workers = 1\ntls_certificate = \"c.pem\"\n", ECHO_KEYS);
        assert_eq!(
            (at, e.as_str()),
            ((2, 1), "`tls_certificate` needs `tls_key` too")
        );
    }

    #[test]
    fn a_good_file_reads_every_key() {
        let text = "listen = [\"127.0.0.1:1\"]\nmodel = \"auto\"\nworkers = 2\n\
                    max_connections = 10\nidle_timeout = \"5s\"\nrun_as_root = true\n\
                    to = \"127.0.0.1:2\"\ntransport = \"unframed\"\nmax_message = \"1m\"\n\
                    queue_limit = \"64k\"\nkernel_path = \"off\"\n\
                    tls_certificate = \"tls/cert.pem\"\ntls_key = \"/keys/key.pem\"\n";
        let s = parse_file(text, FORWARD_KEYS, Path::new("/etc/fp"))
            .map_err(|e| e.1)
            .unwrap();
        assert_eq!(s.listen.len(), 1);
        assert_eq!(s.model.as_deref(), Some("auto"));
        assert_eq!((s.workers, s.max_connections), (Some(2), Some(10)));
        assert_eq!(s.idle_timeout, Some(Duration::from_secs(5)));
        assert!(s.run_as_root);
        assert_eq!(s.to, vec!["127.0.0.1:2".parse::<SocketAddr>().unwrap()]);
        assert_eq!(s.transport.as_deref(), Some("unframed"));
        assert_eq!(
            (s.max_message, s.queue_limit),
            (Some(1 << 20), Some(64 << 10))
        );
        assert_eq!(s.kernel_path, Some(KernelMode::Off));
        // Relative to the file's directory.
        assert_eq!(
            s.tls_certificate.as_deref(),
            Some(Path::new("/etc/fp/tls/cert.pem"))
        );
        assert_eq!(s.tls_key.as_deref(), Some(Path::new("/keys/key.pem")));
        let s = parse_file("kernel_sockets = 3\n", ECHO_KEYS, Path::new("."))
            .map_err(|e| e.1)
            .unwrap();
        assert_eq!(s.kernel_sockets, Some(3));
    }
}
