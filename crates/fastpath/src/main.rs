//! `fastpath`: the command-line entry point. It only parses arguments and wires the crates
//! together; exit codes are decided here and nowhere else.
//!
//! ```text
//! fastpath serve [DIR] [--listen ADDR:PORT|unix:PATH] [--config FILE] [--workers N] [--model NAME]
//!                [--run-as-root]
//! fastpath check [--service echo|forward] FILE   (or --config FILE)
//! fastpath reload [--pid-file FILE | --config FILE] [--upgrade]
//! fastpath bench [OPTIONS] URL...   (see fastpath-bench)
//! fastpath echo [--listen ADDR:PORT] [--plain] [--model NAME] [--config FILE] ...
//! fastpath forward --to ADDR:PORT,... [--listen ADDR:PORT] [--transport framed|unframed] ...
//! fastpath nest check SPEC | fastpath nest build SPEC [-o DIR] [--runtime PATH] [--no-compile]
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fastpath_server::config::{Config, ConfigError, LogTarget, Model, MAX_WORKERS};

#[derive(Parser)]
#[command(
    name = "fastpath",
    version,
    about = "A fast static web server with hand-over to a backend"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a directory (or the sites of a configuration file).
    Serve {
        /// Document root of the default host (overrides `root` in the file). Default: "."
        dir: Option<PathBuf>,
        /// Address to listen on, e.g. 127.0.0.1:8080, [::1]:8080 or unix:/run/fastpath.sock;
        /// replaces `listen`.
        #[arg(long, short)]
        listen: Vec<fastpath_drivers::ListenAddr>,
        /// Address to listen on with TLS (HTTPS), with the certificates of the
        /// configuration's hosts; replaces `listen`, as --listen does.
        #[arg(long)]
        tls_listen: Vec<fastpath_drivers::ListenAddr>,
        /// Configuration file (TOML).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Worker threads, at most 4096; 0 means one per CPU.
        #[arg(long, value_parser = parse_workers)]
        workers: Option<usize>,
        /// Concurrency model: auto, epoll, uring, percore, threads or prefork.
        #[arg(long)]
        model: Option<String>,
        /// Started as root without `user`, run as root rather than refuse (`run_as_root`).
        #[arg(long)]
        run_as_root: bool,
        /// Write the process id here once serving (replaces `pid_file`).
        #[arg(long)]
        pid_file: Option<PathBuf>,
    },
    /// Reload a running server's configuration (SIGHUP), or with --upgrade replace it with
    /// the executable now on disk (SIGUSR2); the server is found by its pid file.
    Reload {
        /// The pid file the server wrote (`--pid-file` or `pid_file`).
        #[arg(long, conflicts_with = "config")]
        pid_file: Option<PathBuf>,
        /// The server's configuration file, whose `pid_file` names the pid file.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Upgrade the binary (SIGUSR2) instead of reloading the configuration.
        #[arg(long)]
        upgrade: bool,
    },
    /// Validate a configuration file and print every error with its line and column, then
    /// what it gets on this machine (model, kernel path).
    Check {
        /// Configuration file (TOML).
        #[arg(required_unless_present = "config", conflicts_with = "config")]
        file: Option<PathBuf>,
        /// Configuration file (TOML), as `serve --config` takes it.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Check a configuration of `fastpath echo` or `fastpath forward` rather than of the
        /// server.
        #[arg(long, value_enum)]
        service: Option<fastpath_services::cli::Service>,
    },
    /// Load-test HTTP servers: closed loop, open loop by request or connection rate.
    Bench(Box<fastpath_bench::cli::BenchArgs>),
    /// Echo service: after a 4-byte buffer size (unless --plain), every byte comes back.
    Echo(fastpath_services::cli::EchoArgs),
    /// Thrift forwarder: each `msg(key, payload)` goes to destination key mod N.
    Forward(fastpath_services::cli::ForwardArgs),
    /// NEST: check a server specification, or compile it to a server (docs/nest.md).
    Nest(fastpath_nest::cli::NestArgs),
    /// Certificates of the hosts with `tls = "auto"` (docs/operations.md).
    #[command(subcommand)]
    Acme(AcmeCommand),
}

#[derive(Subcommand)]
enum AcmeCommand {
    /// Revoke a host's certificate at the CA and set it aside: the running server obtains a
    /// new one, with a new key, within seconds, and serves the old one until then.
    Revoke {
        /// One of the host's names.
        name: String,
        /// The server's configuration file (TOML).
        #[arg(long, short)]
        config: PathBuf,
        /// Why (RFC 5280): unspecified, keyCompromise, affiliationChanged, superseded or
        /// cessationOfOperation.
        #[arg(long, value_parser = parse_revocation_reason)]
        reason: Option<u8>,
    },
}

fn parse_revocation_reason(text: &str) -> Result<u8, String> {
    fastpath_server::REVOCATION_REASONS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(text))
        .map(|&(_, code)| code)
        .ok_or_else(|| {
            let names: Vec<&str> = fastpath_server::REVOCATION_REASONS
                .iter()
                .map(|(name, _)| *name)
                .collect();
            format!("one of {}", names.join(", "))
        })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check {
            file,
            config,
            service,
        } => {
            let path = file.or(config).expect("clap requires one");
            match service {
                Some(service) => fastpath_services::cli::check(service, &path),
                None => check(&path),
            }
        }
        Command::Bench(args) => fastpath_bench::cli::main(*args),
        Command::Echo(args) => with_log(|| fastpath_services::cli::echo(args)),
        Command::Forward(args) => with_log(|| fastpath_services::cli::forward(args)),
        Command::Nest(args) => fastpath_nest::cli::main(args),
        Command::Acme(AcmeCommand::Revoke {
            name,
            config,
            reason,
        }) => with_log(|| revoke(&config, &name, reason)),
        Command::Serve {
            dir,
            listen,
            tls_listen,
            config,
            workers,
            model,
            run_as_root,
            pid_file,
        } => serve(
            dir,
            (listen, tls_listen),
            config,
            workers,
            model,
            run_as_root,
            pid_file,
        ),
        Command::Reload {
            pid_file,
            config,
            upgrade,
        } => reload(pid_file, config, upgrade),
    }
}

/// Runs a service with the error log on stderr (level `info`, or `FASTPATH_LOG`).
fn with_log(service: impl FnOnce() -> ExitCode) -> ExitCode {
    let log = fastpath_server::config::LogConfig::default();
    if let Err(e) = fastpath_server::init_error_log(&log) {
        eprintln!("fastpath: cannot start the error log: {e}");
        return ExitCode::FAILURE;
    }
    service()
}

/// `fastpath acme revoke`.
fn revoke(path: &Path, name: &str, reason: Option<u8>) -> ExitCode {
    let config = match Config::load(path) {
        Ok(config) => config,
        Err(errors) => {
            print_config_errors(path, &errors);
            return ExitCode::FAILURE;
        }
    };
    match fastpath_server::revoke_certificate(&config, name, reason) {
        Ok(done) => {
            println!("{done}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("fastpath: {name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `fastpath reload`: finds the server by its pid file and signals it.
fn reload(pid_file: Option<PathBuf>, config: Option<PathBuf>, upgrade: bool) -> ExitCode {
    let path = match (pid_file, config) {
        (Some(path), _) => path,
        (None, Some(config)) => match Config::load(&config) {
            Ok(loaded) => match loaded.pid_file {
                Some(path) => path,
                None => {
                    eprintln!(
                        "fastpath: {} has no `pid_file`: give --pid-file FILE",
                        config.display()
                    );
                    return ExitCode::FAILURE;
                }
            },
            Err(errors) => {
                print_config_errors(&config, &errors);
                eprintln!(
                    "fastpath: {} has {} error(s): a running server would refuse it too",
                    config.display(),
                    errors.len()
                );
                return ExitCode::FAILURE;
            }
        },
        (None, None) => {
            eprintln!("fastpath: which server? give --pid-file FILE or --config FILE");
            return ExitCode::FAILURE;
        }
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => {
            eprintln!(
                "fastpath: cannot read the pid file {}: {e} (is the server running, with this pid file?)",
                path.display()
            );
            return ExitCode::FAILURE;
        }
    };
    let pid = match text.trim().parse::<libc::pid_t>() {
        Ok(pid) if pid > 0 => pid,
        _ => {
            eprintln!(
                "fastpath: the pid file {} holds {:?}, not a process id",
                path.display(),
                text.trim()
            );
            return ExitCode::FAILURE;
        }
    };
    let (signal, name) = if upgrade {
        (libc::SIGUSR2, "SIGUSR2 (binary upgrade)")
    } else {
        (libc::SIGHUP, "SIGHUP (reload)")
    };
    // SAFETY: plain kill(2).
    if unsafe { libc::kill(pid, signal) } != 0 {
        let e = std::io::Error::last_os_error();
        let why = match e.raw_os_error() {
            Some(libc::ESRCH) => format!(
                "no process {pid} is running: the pid file {} is stale (the server stopped                  without removing it?)",
                path.display()
            ),
            Some(libc::EPERM) => format!(
                "not allowed to signal process {pid} (it runs as another user: run this as                  that user or root)"
            ),
            _ => format!("cannot signal process {pid}: {e}"),
        };
        eprintln!("fastpath: {why}");
        return ExitCode::FAILURE;
    }
    println!("fastpath: sent {name} to process {pid}");
    ExitCode::SUCCESS
}

fn print_config_errors(path: &Path, errors: &[ConfigError]) {
    for error in errors {
        eprintln!(
            "{}:{}:{}: {}",
            path.display(),
            error.line,
            error.column,
            error.message
        );
    }
}

fn check(path: &Path) -> ExitCode {
    match Config::load(path) {
        Ok(config) => {
            let shown = path.display();
            let mut report = String::new();
            let notes = config.model_notes().into_iter().chain(config.http2_notes());
            for note in notes.chain(config.tls_notes()) {
                report.push_str(&format!("{shown}: note: {note}\n"));
            }
            if config.model == fastpath_server::config::Model::Auto {
                let (_, note) = fastpath_server::auto_model();
                report.push_str(&format!("{shown}: note: {note}\n"));
            }
            if let Some(kernel) = fastpath_server::kernel_report(&config) {
                report.push_str(&format!("{shown}: note: {kernel}\n"));
            }
            report.push_str(&format!("{shown}: configuration ok\n"));
            // Written once, and a reader that went away (`| head -1`) is not an error of the
            // configuration: println! would panic on the broken pipe.
            let _ = std::io::Write::write_all(&mut std::io::stdout(), report.as_bytes());
            ExitCode::SUCCESS
        }
        Err(errors) => {
            print_config_errors(path, &errors);
            eprintln!("{}: {} error(s)", path.display(), errors.len());
            ExitCode::FAILURE
        }
    }
}

fn serve(
    dir: Option<PathBuf>,
    (listen, tls_listen): (
        Vec<fastpath_drivers::ListenAddr>,
        Vec<fastpath_drivers::ListenAddr>,
    ),
    config_path: Option<PathBuf>,
    workers: Option<usize>,
    model: Option<String>,
    run_as_root: bool,
    pid_file: Option<PathBuf>,
) -> ExitCode {
    // First, while the process has one thread: it unsets the variables it reads.
    let inherited = fastpath_server::Inherited::from_env();
    let mut config = match &config_path {
        Some(path) => match Config::load(path) {
            Ok(config) => config,
            Err(errors) => {
                print_config_errors(path, &errors);
                return ExitCode::FAILURE;
            }
        },
        None => Config::default(),
    };
    if let Some(dir) = dir {
        if let Err(e) = config.set_root(&dir) {
            eprintln!("fastpath: {e}");
            return ExitCode::FAILURE;
        }
    }
    // The addresses on the command line, plain and TLS, replace the file's.
    if !listen.is_empty() || !tls_listen.is_empty() {
        config.listen = listen;
        config.tls.listen.clear();
        config.proxy_protocol.clear();
        config.https_redirects.clear();
    }
    for addr in tls_listen {
        config.add_tls_listener(addr);
    }
    if let Some(workers) = workers {
        config.workers = workers;
    }
    if let Some(name) = model {
        match Model::from_name(&name) {
            Some(model) => config.model = model,
            None => {
                eprintln!(
                    "fastpath: unknown model `{name}` (expected one of {})",
                    Model::valid_names()
                );
                return ExitCode::FAILURE;
            }
        }
    }
    if run_as_root {
        config.run_as_root = true;
    }
    if pid_file.is_some() {
        config.pid_file = pid_file;
    }
    if let Err(e) = fastpath_server::init_error_log(&config.log) {
        eprintln!("fastpath: cannot open the error log: {e}");
        return ExitCode::FAILURE;
    }
    let stop = fastpath_drivers::signals::install_stop_handler();
    match fastpath_server::serve_with(&config, stop, inherited) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Said once on the terminal; the error log has it too when it is somewhere else.
            if !matches!(config.log.error, LogTarget::Stderr | LogTarget::Off) {
                tracing::error!("{e}");
            }
            eprintln!("fastpath: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--workers`: the same bound as the configuration's `workers`.
fn parse_workers(s: &str) -> Result<usize, String> {
    let n: usize = s
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number"))?;
    if n > MAX_WORKERS {
        return Err(format!("{n} is more than {MAX_WORKERS}"));
    }
    Ok(n)
}
