//! The error log: `tracing` events written to stderr, stdout or a file.
//!
//! A file is reopened at its configured path when asked (SIGUSR1, SIGHUP: see
//! `fastpath_drivers::signals`), before the next line is written to it.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use fastpath_drivers::signals;

use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogTarget};

/// The most rustls writes to the error log unless `FASTPATH_LOG` says otherwise.
const RUSTLS_LEVEL: &str = "rustls=error";

/// Installs the global error log described by `log`. The level may be overridden with the
/// `FASTPATH_LOG` environment variable (a `tracing` filter such as `debug`).
pub fn init_error_log(log: &LogConfig) -> io::Result<()> {
    let filter = EnvFilter::try_from_env("FASTPATH_LOG").unwrap_or_else(|_| {
        // rustls logs what a peer does (a renegotiation refused, a warning alert) at warn,
        // naming no peer: a client could write such lines at will. The transport logs why a
        // connection ended, with the peer, at debug; FASTPATH_LOG=rustls=debug shows rustls's.
        EnvFilter::new(&log.level).add_directive(RUSTLS_LEVEL.parse().expect("a directive"))
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_thread_names(false);
    let result = match &log.error {
        LogTarget::Stdout => builder.with_writer(io::stdout).with_ansi(false).try_init(),
        LogTarget::File(path) => {
            let file = ReopeningFile {
                file: open_append(path)?,
                path: path.clone(),
                generation: signals::reopen_generation(),
            };
            builder
                .with_writer(Mutex::new(file))
                .with_ansi(false)
                .try_init()
        }
        LogTarget::Stderr | LogTarget::Off => {
            builder.with_writer(io::stderr).with_ansi(false).try_init()
        }
    };
    result.map_err(|e| io::Error::other(e.to_string()))
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// The error log file, reopened at its path before the first line written after a request
/// to reopen the logs.
struct ReopeningFile {
    file: File,
    path: PathBuf,
    /// [`signals::reopen_generation`] when the file was opened.
    generation: u64,
}

impl Write for ReopeningFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let generation = signals::reopen_generation();
        if generation != self.generation {
            self.generation = generation;
            // A file that cannot be opened leaves the old one in use: the line is not lost,
            // and it cannot be reported anywhere but here.
            match open_append(&self.path) {
                Ok(file) => self.file = file,
                Err(e) => {
                    let _ = writeln!(
                        self.file,
                        "cannot reopen the error log {}: {e}",
                        self.path.display()
                    );
                }
            }
        }
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}
