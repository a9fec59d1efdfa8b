//! [`run`]: a generated server's `main`: command line, options, config.nest, then serving.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{error::ErrorKind, value_parser, Arg, ArgAction, ArgMatches, Command};

use fastpath_drivers::{DriverConfig, Transports};
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

/// The generated server's command line. The flags that set options are kept in the order
/// given, so that the last of `--port` and `--listen` decides the port, as the last of two
/// lines in config.nest would.
fn command_line(name: &'static str, file: &'static str) -> Command {
    Command::new(name)
        .about(format!("A server built from {file}"))
        .after_help("A standalone server also serves the sockets systemd passes (LISTEN_FDS).")
        .arg(
            Arg::new("config")
                .long("config")
                .value_name("PATH")
                .value_parser(value_parser!(PathBuf))
                .help(
                    "The runtime options file (default: config.nest beside the binary; the \
                     NEST_CONFIG environment variable sets it too)",
                ),
        )
        .arg(
            Arg::new("port")
                .long("port")
                .value_name("P")
                .action(ArgAction::Append)
                .value_parser(value_parser!(u16))
                .help("Listen on port P (the serverPort option)"),
        )
        .arg(
            Arg::new("listen")
                .long("listen")
                .value_name("ADDR:PORT")
                .action(ArgAction::Append)
                .value_parser(value_parser!(SocketAddr))
                .help("Listen on ADDR:PORT (serverAddress and serverPort)"),
        )
        .arg(
            Arg::new("model")
                .long("model")
                .value_name("'NAME [N]'")
                .action(ArgAction::Append)
                .value_parser(parse_model)
                .help(
                    "Run on another model than the specification's (processServer N, \
                     threadServer N, eventServer [N], uringServer [N], percoreServer)",
                ),
        )
}

/// `--model 'NAME [N]'`: a model option's name and its value.
fn parse_model(v: &str) -> Result<(&'static str, String), String> {
    let (name, n) = v.split_once(' ').unwrap_or((v, ""));
    let name = crate::options::names()
        .iter()
        .copied()
        .find(|known| *known == name && crate::options::is_model(known))
        .ok_or_else(|| format!("`{name}` is not a model option"))?;
    Ok((name, n.trim().to_string()))
}

/// What the command line asks for.
#[derive(Debug, PartialEq)]
struct CommandLine {
    config: Option<PathBuf>,
    /// Options set on the command line, in its order: (option, value).
    overrides: Vec<(&'static str, String)>,
}

/// Reads `args`; `None` when the help was asked for (and printed).
fn parse_command_line(
    name: &'static str,
    file: &'static str,
    args: impl IntoIterator<Item = String>,
) -> Result<Option<CommandLine>, String> {
    let matches = match command_line(name, file)
        .try_get_matches_from(std::iter::once(name.to_string()).chain(args))
    {
        Ok(matches) => matches,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp) => {
            let _ = e.print();
            return Ok(None);
        }
        Err(e) => return Err(e.render().to_string().trim_end().to_string()),
    };
    // (position on the command line, option, value)
    let mut overrides: Vec<(usize, &'static str, String)> = Vec::new();
    for (at, port) in indexed::<u16>(&matches, "port") {
        overrides.push((at, "serverPort", port.to_string()));
    }
    for (at, addr) in indexed::<SocketAddr>(&matches, "listen") {
        overrides.push((at, "serverAddress", addr.ip().to_string()));
        overrides.push((at, "serverPort", addr.port().to_string()));
    }
    for (at, (option, n)) in indexed::<(&'static str, String)>(&matches, "model") {
        overrides.push((at, option, n.clone()));
    }
    // Stable: --listen's address stays before its port.
    overrides.sort_by_key(|o| o.0);
    Ok(Some(CommandLine {
        config: matches.get_one::<PathBuf>("config").cloned(),
        overrides: overrides.into_iter().map(|(_, o, v)| (o, v)).collect(),
    }))
}

/// Runs `server` with command-line arguments `args` (without the program's name); returns
/// once it has stopped (or printed its help), or why it could not start.
pub fn run_with_args<S: Server>(
    server: S,
    args: impl IntoIterator<Item = String>,
) -> Result<(), String> {
    let spec = server.spec();
    let mut options = Options::from_spec(spec.file, spec.options)?;
    let Some(CommandLine { config, overrides }) = parse_command_line(spec.name, spec.file, args)?
    else {
        return Ok(());
    };
    let config = config.or_else(|| std::env::var_os("NEST_CONFIG").map(PathBuf::from));
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
    // Read before the server changes directory: the paths are the caller's.
    let transports = tls_transports(&options)?;
    // After config.nest and the command line are read (their relative paths are the
    // caller's), before the patterns are compiled and anything is served.
    if let Some(dir) = &options.directory {
        std::env::set_current_dir(dir).map_err(|e| format!("directory {}: {e}", dir.display()))?;
    }
    let inetd = options.inetd;
    let engine = Arc::new(Engine::new(server, options)?);
    if inetd {
        if transports.is_some() {
            return Err(
                "tlsCertificate: a server started by inetd is handed a connection \
                 without TLS; terminate TLS in front of it, or run it standalone"
                    .to_string(),
            );
        }
        return crate::inetd::serve(&engine);
    }
    standalone(engine, transports)
}

/// TLS on the server's address when `tlsCertificate` and `tlsKey` are set (both or
/// neither); the handshake is held to `idleTimeout`.
fn tls_transports(options: &Options) -> Result<Option<Transports>, String> {
    match (&options.tls_certificate, &options.tls_key) {
        (None, None) => Ok(None),
        (Some(chain), Some(key)) => fastpath_tls::every_listener(chain, key, options.idle_timeout)
            .map(Some)
            .map_err(|e| format!("TLS: {e}")),
        (Some(_), None) => Err("tlsCertificate needs tlsKey too".to_string()),
        (None, Some(_)) => Err("tlsKey needs tlsCertificate too".to_string()),
    }
}

/// The values of the flag `id` with their positions on the command line.
fn indexed<'m, T: Clone + Send + Sync + 'static>(
    matches: &'m ArgMatches,
    id: &str,
) -> impl Iterator<Item = (usize, &'m T)> {
    let values = matches.get_many::<T>(id).into_iter().flatten();
    let at = matches.indices_of(id).into_iter().flatten();
    at.zip(values)
}

fn standalone<S: Server>(
    engine: Arc<Engine<S>>,
    transports: Option<Transports>,
) -> Result<(), String> {
    let o = &engine.options;
    let name = engine.server.spec().name;
    if let (Some(_), Some(chain)) = (&transports, &o.tls_certificate) {
        tracing::info!("{name}: TLS with the certificate in {}", chain.display());
    }
    let mut driver = DriverConfig {
        max_connections: o.max_connections,
        send_timeout: o.send_timeout,
        transports: transports.unwrap_or_default(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<CommandLine>, String> {
        parse_command_line("rot13", "rot13.nest", args.iter().map(|a| a.to_string()))
    }

    #[test]
    fn the_last_of_port_and_listen_decides_the_port() {
        let line = parse(&["--listen", "127.0.0.2:7000", "--port=7001"])
            .unwrap()
            .unwrap();
        assert_eq!(
            line.overrides,
            vec![
                ("serverAddress", "127.0.0.2".to_string()),
                ("serverPort", "7000".to_string()),
                ("serverPort", "7001".to_string()),
            ]
        );
        let line = parse(&["--port", "7001", "--listen", "127.0.0.2:7000"])
            .unwrap()
            .unwrap();
        assert_eq!(line.overrides.last().unwrap().1, "7000");
        assert_eq!(line.config, None);
    }

    #[test]
    fn a_model_with_its_count_and_a_config_file() {
        let line = parse(&["--model", "threadServer 8", "--config", "my.nest"])
            .unwrap()
            .unwrap();
        assert_eq!(line.overrides, vec![("threadServer", "8".to_string())]);
        assert_eq!(line.config, Some(PathBuf::from("my.nest")));
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        let e = parse(&["--model", "fastServer"]).unwrap_err();
        assert!(e.contains("`fastServer` is not a model option"), "{e}");
        let e = parse(&["--listen", "nowhere"]).unwrap_err();
        assert!(e.contains("--listen"), "{e}");
        let e = parse(&["--port", "99999"]).unwrap_err();
        assert!(e.contains("99999"), "{e}");
        let e = parse(&["--bogus"]).unwrap_err();
        assert!(e.contains("--bogus"), "{e}");
        // A model option that is not a model.
        let e = parse(&["--model", "serverPort 80"]).unwrap_err();
        assert!(e.contains("not a model option"), "{e}");
    }
}
