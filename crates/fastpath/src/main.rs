//! `fastpath`: the command-line entry point. It only parses arguments and wires the crates
//! together; exit codes are decided here and nowhere else.
//!
//! ```text
//! fastpath serve [DIR] [--listen ADDR:PORT] [--config FILE] [--workers N] [--model NAME]
//!                [--run-as-root]
//! fastpath check --config FILE
//! fastpath bench [OPTIONS] URL...   (see fastpath-bench)
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
        /// Address to listen on, e.g. 127.0.0.1:8080 or [::1]:8080; replaces `listen`.
        #[arg(long, short)]
        listen: Vec<std::net::SocketAddr>,
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
    },
    /// Validate a configuration file and print every error with its line and column.
    Check {
        /// Configuration file (TOML).
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Load-test HTTP servers: closed loop, open loop by request or connection rate.
    Bench(Box<fastpath_bench::cli::BenchArgs>),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { config } => check(&config),
        Command::Bench(args) => fastpath_bench::cli::main(*args),
        Command::Serve {
            dir,
            listen,
            config,
            workers,
            model,
            run_as_root,
        } => serve(dir, listen, config, workers, model, run_as_root),
    }
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
            for note in config.model_notes() {
                println!("{}: note: {note}", path.display());
            }
            println!("{}: configuration ok", path.display());
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
    listen: Vec<std::net::SocketAddr>,
    config_path: Option<PathBuf>,
    workers: Option<usize>,
    model: Option<String>,
    run_as_root: bool,
) -> ExitCode {
    // First, while the process has one thread: it unsets the variables it reads.
    let systemd = fastpath_server::systemd::Systemd::from_env();
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
    if !listen.is_empty() {
        config.listen = listen;
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
    if let Err(e) = fastpath_server::init_error_log(&config.log) {
        eprintln!("fastpath: cannot open the error log: {e}");
        return ExitCode::FAILURE;
    }
    let stop = fastpath_drivers::signals::install_stop_handler();
    match fastpath_server::serve_with(&config, stop, systemd) {
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
