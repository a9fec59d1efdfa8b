//! The error log: `tracing` events written to stderr, stdout or a file.

use std::fs::OpenOptions;
use std::io;
use std::sync::Mutex;

use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogTarget};

/// Installs the global error log described by `log`. The level may be overridden with the
/// `FASTPATH_LOG` environment variable (a `tracing` filter such as `debug`).
pub fn init_error_log(log: &LogConfig) -> io::Result<()> {
    let filter =
        EnvFilter::try_from_env("FASTPATH_LOG").unwrap_or_else(|_| EnvFilter::new(&log.level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_thread_names(false);
    let result = match &log.error {
        LogTarget::Stdout => builder.with_writer(io::stdout).with_ansi(false).try_init(),
        LogTarget::File(path) => {
            let file = OpenOptions::new().create(true).append(true).open(path)?;
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
