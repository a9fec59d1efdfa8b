//! [`run`]: a generated server's `main`: command line, options, config.nest, then serving.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use fastpath_drivers::DriverConfig;
use fastpath_sockets::{serve, ListenAddr, ServiceOptions};

use crate::machine::Engine;
use crate::options::Options;
use crate::service::NestService;
use crate::Server;

/// Runs `server` with the process's command line and exits: 0 after a graceful stop (or once
/// inetd's connection is served), 1 with a message on standard error if it cannot start.
pub fn run<S: Server>(server: S) -> ! {
    let name = server.spec().name;
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run_with_args(server, args) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::exit(1)
        }
    }
}

const HELP: &str = "\
Options:
  --config PATH      the runtime options file (default: config.nest beside the binary;
                     the NEST_CONFIG environment variable sets it too)
  --port P           listen on port P (the serverPort option)
  --listen ADDR:PORT listen on ADDR:PORT (serverAddress and serverPort)
  --model 'NAME [N]' run on another model than the specification's (processServer N,
                     threadServer N, eventServer [N], uringServer [N], percoreServer)
  --help             this text
A standalone server also serves the sockets systemd passes (LISTEN_FDS).";

/// Runs `server` with command-line arguments `args` (without the program's name); returns
/// once it has stopped, or why it could not start.
pub fn run_with_args<S: Server>(
    server: S,
    args: impl IntoIterator<Item = String>,
) -> Result<(), String> {
    let spec = server.spec();
    let mut options = Options::from_spec(spec.file, spec.options)?;
    let mut config: Option<PathBuf> = std::env::var_os("NEST_CONFIG").map(PathBuf::from);
    let mut overrides: Vec<(&str, String)> = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |flag: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--help" | "-h" => {
                println!("{}: a server built from {}\n{HELP}", spec.name, spec.file);
                return Ok(());
            }
            "--config" => config = Some(PathBuf::from(value("--config")?)),
            "--port" => overrides.push(("serverPort", value("--port")?)),
            "--listen" => {
                let v = value("--listen")?;
                let addr: SocketAddr = v
                    .parse()
                    .map_err(|_| format!("--listen: `{v}` is not ADDR:PORT"))?;
                overrides.push(("serverAddress", addr.ip().to_string()));
                overrides.push(("serverPort", addr.port().to_string()));
            }
            "--model" => {
                let v = value("--model")?;
                let (name, n) = v.split_once(' ').unwrap_or((&v, ""));
                if !crate::options::is_model(name) {
                    return Err(format!("--model: `{name}` is not a model option"));
                }
                let name = crate::options::names()
                    .iter()
                    .find(|n| **n == name)
                    .expect("a model option");
                overrides.push((name, n.trim().to_string()));
            }
            _ => return Err(format!("unknown argument `{arg}` (try --help)")),
        }
    }
    // config.nest: a given path must exist; the default one may not.
    let (path, given) = match config {
        Some(p) => (p, true),
        None => {
            let exe =
                std::env::current_exe().map_err(|e| format!("cannot find the binary: {e}"))?;
            (exe.with_file_name("config.nest"), false)
        }
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => options.apply_config(&path, &text)?,
        Err(e) if !given && e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", path.display())),
    }
    for (name, value) in overrides {
        options
            .set_from_command_line(name, &value)
            .map_err(|e| format!("command line: {e}"))?;
    }
    init_log(&options);
    // After config.nest and the command line are read (their relative paths are the
    // caller's), before the patterns are compiled and anything is served.
    if let Some(dir) = &options.directory {
        std::env::set_current_dir(dir).map_err(|e| format!("directory {}: {e}", dir.display()))?;
    }
    let inetd = options.inetd;
    let engine = Arc::new(Engine::new(server, options)?);
    if inetd {
        return crate::inetd::serve(&engine);
    }
    standalone(engine)
}

fn standalone<S: Server>(engine: Arc<Engine<S>>) -> Result<(), String> {
    let o = &engine.options;
    let name = engine.server.spec().name;
    let mut driver = DriverConfig {
        max_connections: o.max_connections,
        send_timeout: o.send_timeout,
        ..DriverConfig::default()
    };
    // The driver's own guard stays above the input buffer, which the runtime enforces.
    driver.max_input = driver
        .max_input
        .max(o.input_buffer.saturating_mul(2) + 64 * 1024);
    let mut service =
        ServiceOptions::listening(vec![ListenAddr::Tcp(SocketAddr::new(o.address, o.port))]);
    service.model = o.model;
    service.workers = o.workers;
    service.settings = o.settings;
    service.driver = driver;
    // START may greet the client: TCP_DEFER_ACCEPT only when it cannot. Under systemd's
    // socket activation `serve` serves the sockets it passed instead of binding these.
    service.client_speaks_first = engine.server.client_speaks_first();
    serve(name, &service, |_| NestService::new(engine.clone())).map_err(|e| e.to_string())
}

/// Logs to standard error at the logLevel option; under inetd, standard error is often the
/// connection itself (inetd passes the socket as 0, 1 and 2), where a log line would reach
/// the client: then nothing is logged.
fn init_log(options: &Options) {
    if options.inetd && is_socket(2) {
        return;
    }
    let level = match options.log_level.as_str() {
        "error" => tracing::Level::ERROR,
        "warn" => tracing::Level::WARN,
        "debug" => tracing::Level::DEBUG,
        "trace" => tracing::Level::TRACE,
        _ => tracing::Level::INFO,
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .try_init();
}

fn is_socket(fd: i32) -> bool {
    // SAFETY: fstat into a zeroed struct of the right type.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstat(fd, &mut stat) }) == 0 && stat.st_mode & libc::S_IFMT == libc::S_IFSOCK
}
