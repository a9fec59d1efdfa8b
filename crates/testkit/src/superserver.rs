//! Superservers a test starts around a server (inetd, systemd-socket-activate), stopped on
//! drop.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Where Debian's openbsd-inetd puts inetd.
pub const OPENBSD_INETD: &str = "/usr/sbin/inetd";

/// A child the test stops by SIGTERM and reaps on drop.
pub struct Reaped(pub Child);

impl Reaped {
    /// Stops it and returns what it wrote on its standard error, if that was piped.
    pub fn stop(mut self) -> String {
        // SAFETY: signals our own child by its pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let mut err = String::new();
        if let Some(mut stderr) = self.0.stderr.take() {
            let _ = stderr.read_to_string(&mut err);
        }
        err
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        // SAFETY: signals our own child by its pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// Starts openbsd-inetd in the foreground (`-d`, its debugging lines on standard error,
/// piped) on an inetd.conf written in `dir` with the one service `line`.
pub fn openbsd_inetd(dir: &Path, line: &str) -> Reaped {
    let conf = dir.join("inetd.conf");
    std::fs::write(&conf, format!("{line}\n")).unwrap();
    let child = Command::new(OPENBSD_INETD)
        .arg("-d")
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Reaped(child)
}
