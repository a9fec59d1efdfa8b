//! systemd integration: socket activation (`LISTEN_PID`, `LISTEN_FDS`, `LISTEN_FDNAMES`) and the
//! notification protocol (`NOTIFY_SOCKET`: `READY=1`, `STATUS=`, `STOPPING=1`, and `WATCHDOG=1`
//! under `WATCHDOG_USEC`). See docs/operations.md.
//!
//! Written on libc rather than with a crate: the protocol is one datagram sent to a Unix socket
//! and a few environment variables, less code than a dependency's features to review, and the
//! crates for it pull in more than this needs.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What systemd handed to this process, read once from the environment by [`Systemd::from_env`].
pub struct Systemd {
    /// The inherited sockets, each with its label for messages (`fd 3 "web"`), or why they
    /// could not be taken.
    pub(crate) sockets: io::Result<Vec<(OwnedFd, String)>>,
    /// The notification socket, or why it cannot be used.
    notify: Option<io::Result<Notifier>>,
    /// Half the watchdog interval, when a watchdog is asked for: how often to ping.
    watchdog: Option<Duration>,
    /// `NOTIFY_SOCKET` and `WATCHDOG_USEC` as they were, for the server that replaces this
    /// one on a reload (see `reload`), which notifies in its place.
    pub(crate) pass_on: Vec<(&'static str, OsString)>,
}

impl Default for Systemd {
    /// Nothing from systemd: bind the configured addresses, notify nobody.
    fn default() -> Self {
        Systemd {
            sockets: Ok(Vec::new()),
            notify: None,
            watchdog: None,
            pass_on: Vec::new(),
        }
    }
}

/// Reads and removes an environment variable.
fn take_var(name: &str) -> Option<OsString> {
    let value = std::env::var_os(name);
    std::env::remove_var(name);
    value
}

impl Systemd {
    /// Reads the variables systemd sets and unsets them all, so that no process started later
    /// (a child of ours) takes them for its own. Must run before the process has other threads
    /// (the environment is not safe to change while another thread may read it): first thing
    /// in `main`.
    ///
    /// Sockets are taken only when `LISTEN_PID` is this process (otherwise they were meant for
    /// a parent that exec'd us without clearing them); the watchdog only when `WATCHDOG_PID`
    /// is this process or absent.
    pub fn from_env() -> Systemd {
        let pid = std::process::id().to_string();
        let listen_pid = take_var("LISTEN_PID");
        let listen_fds = take_var("LISTEN_FDS");
        let names = take_var("LISTEN_FDNAMES");
        let notify = take_var("NOTIFY_SOCKET");
        let watchdog_usec = take_var("WATCHDOG_USEC");
        let watchdog_pid = take_var("WATCHDOG_PID");
        let ours = |value: &Option<OsString>| value.as_deref() == Some(pid.as_ref());
        let sockets = fastpath_drivers::inherited_sockets(
            listen_pid.as_deref(),
            listen_fds.as_deref(),
            names.as_deref(),
        );
        let mut pass_on = Vec::new();
        if let Some(path) = &notify {
            pass_on.push(("NOTIFY_SOCKET", path.clone()));
        }
        if let Some(usec) = &watchdog_usec {
            pass_on.push(("WATCHDOG_USEC", usec.clone()));
        }
        let watchdog = watchdog_usec
            .filter(|_| watchdog_pid.is_none() || ours(&watchdog_pid))
            .and_then(|usec| usec.to_str()?.parse::<u64>().ok())
            .filter(|&usec| usec > 0)
            .map(|usec| Duration::from_micros(usec) / 2);
        Systemd {
            sockets,
            notify: notify.map(|path| Notifier::connect(&path)),
            watchdog,
            pass_on,
        }
    }
}

/// A datagram socket connected to nothing, sending to the manager's notification socket.
pub(crate) struct Notifier {
    fd: OwnedFd,
    addr: libc::sockaddr_un,
    len: libc::socklen_t,
}

impl Notifier {
    /// The notifier for `NOTIFY_SOCKET`: a path, or an abstract address written `@name`.
    fn connect(path: &OsString) -> io::Result<Notifier> {
        let bytes = path.as_bytes();
        // SAFETY: an all-zero sockaddr_un is valid.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let abstract_name = bytes.first() == Some(&b'@');
        if !(abstract_name || bytes.first() == Some(&b'/')) || bytes.len() >= addr.sun_path.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("NOTIFY_SOCKET={path:?} is neither an absolute path nor an @abstract name that fits"),
            ));
        }
        for (to, &from) in addr.sun_path.iter_mut().zip(bytes) {
            *to = from as libc::c_char;
        }
        let base = std::mem::size_of::<libc::sa_family_t>();
        let len = if abstract_name {
            // An abstract name starts with a NUL byte and its length is exactly what is given.
            addr.sun_path[0] = 0;
            base + bytes.len()
        } else {
            base + bytes.len() + 1
        };
        // SAFETY: plain socket(2).
        let fd = unsafe {
            libc::socket(
                libc::AF_UNIX,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                0,
            )
        };
        if fd == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(Notifier {
            // SAFETY: a descriptor socket(2) just returned.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            addr,
            len: len as libc::socklen_t,
        })
    }

    /// Sends one notification (lines of `KEY=VALUE`). Non-blocking: a manager that does not
    /// keep up loses a ping rather than stalling a worker.
    pub(crate) fn send(&self, message: &str) -> io::Result<()> {
        // SAFETY: sendto with a buffer and an address that outlive the call.
        let sent = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                message.as_ptr().cast(),
                message.len(),
                libc::MSG_NOSIGNAL,
                (&self.addr as *const libc::sockaddr_un).cast(),
                self.len,
            )
        };
        if sent == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Tells systemd how the server is doing, when it listens for that.
pub(crate) struct Notify {
    notifier: Notifier,
    /// A failed send is said once.
    failed: AtomicBool,
    stopping: AtomicBool,
}

impl Notify {
    /// Takes the notifier out of `systemd`, warning once if `NOTIFY_SOCKET` was unusable.
    pub(crate) fn start(systemd: &mut Systemd) -> Option<Arc<Notify>> {
        match systemd.notify.take()? {
            Ok(notifier) => Some(Arc::new(Notify {
                notifier,
                failed: AtomicBool::new(false),
                stopping: AtomicBool::new(false),
            })),
            Err(e) => {
                tracing::warn!("cannot notify systemd: {e}");
                None
            }
        }
    }

    pub(crate) fn send(&self, message: &str) {
        if let Err(e) = self.notifier.send(message) {
            if !self.failed.swap(true, Ordering::Relaxed) {
                tracing::warn!("cannot notify systemd ({e}); later failures are not logged");
            }
        }
    }

    /// Says a stop has begun, once (not after a hand-over to a new server).
    pub(crate) fn stopping(&self) {
        if fastpath_drivers::signals::handed_over() {
            return;
        }
        if !self.stopping.swap(true, Ordering::Relaxed) {
            self.send("STOPPING=1\nSTATUS=stopping");
        }
    }

    /// Pings the watchdog and says when a graceful stop begins, from the loops' beats
    /// (`fastpath_drivers::liveness`): a ping then proves that a loop turns. Only this process
    /// notifies (preforked children beat too, but systemd listens to the main process).
    pub(crate) fn watch(self: &Arc<Notify>, systemd: &Systemd) {
        let notify = self.clone();
        let every = systemd.watchdog;
        let main_pid = std::process::id();
        let epoch = Instant::now();
        let last_ping = AtomicU64::new(0);
        fastpath_drivers::liveness::on_beat(move || {
            if std::process::id() != main_pid {
                return;
            }
            // A server that handed its sockets over is replaced, not stopping: its successor
            // has said READY=1 with its own MAINPID.
            if fastpath_drivers::signals::draining() && !fastpath_drivers::signals::handed_over() {
                notify.stopping();
            }
            let Some(every) = every else { return };
            let now = epoch.elapsed().as_millis() as u64;
            let last = last_ping.load(Ordering::Relaxed);
            // The first beat pings at once; then one ping per half interval, sent by whichever
            // worker wins the exchange.
            if (last == 0 || now.saturating_sub(last) >= every.as_millis() as u64)
                && last_ping
                    .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                notify.send("WATCHDOG=1");
            }
        });
    }
}
