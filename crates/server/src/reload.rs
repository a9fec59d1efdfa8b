//! Reload (SIGHUP) and binary upgrade (SIGUSR2) by handing the listening sockets to a new
//! server process (docs/operations.md, "Reload and upgrade").
//!
//! The running server checks the configuration file again; if it has errors they are logged
//! as `fastpath check` prints them and nothing else happens. Otherwise it starts the
//! executable again (`/proc/self/exe` for a reload, which stays the running image even if the
//! file was replaced; the path it was started from for an upgrade) with the same arguments,
//! passing every listening socket it holds: `FASTPATH_LISTENERS=FD=ADDR,...` names each
//! descriptor with the configured address it was bound for (`systemd` for sockets systemd
//! passed), `FASTPATH_READY_FD` is the write end of a pipe, and `FASTPATH_TICKET_KEYS_FD`
//! the memory file of the TLS session ticket keys, so that sessions resume across it. The new
//! process serves the inherited sockets of the addresses it is configured for, binds the
//! others afresh and closes those no longer configured; once it listens, with every root and
//! log opened, it writes one byte to the pipe (and writes the pid file). Only then does the
//! old server stop gracefully, closing its own copies of the sockets without shutting them
//! down. If the new process fails before that, the old one logs why and goes on as it was.
//! A change of the TLS files ([`WatchedFiles`]) starts a reload as SIGHUP does.

use std::ffi::OsString;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fastpath_drivers::{
    bind_listeners, bind_listeners_with, shared_by_every_set, signals, ListenAddr, ListenOptions,
    Listeners, UnixSocketFile,
};

use crate::config::Config;
use crate::systemd::Notify;

const LISTENERS_VAR: &str = "FASTPATH_LISTENERS";
const READY_VAR: &str = "FASTPATH_READY_FD";
const TICKET_KEYS_VAR: &str = "FASTPATH_TICKET_KEYS_FD";
/// The event loop the replaced server's `model = "auto"` measured, kept by its successor
/// rather than measured again while the old one serves (a restart measures again).
pub(crate) const AUTO_MODEL_VAR: &str = "FASTPATH_AUTO_MODEL";
/// The name handed-over sockets of systemd's carry: they are served whatever `listen` says.
pub(crate) const SYSTEMD_NAME: &str = "systemd";
/// How long a new server has to say it is ready before the old one gives up on it.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// What the server this process replaces handed over, read by [`Handed::from_env`].
#[derive(Default)]
pub(crate) struct Handed {
    /// Listening sockets, each with the name of the address it was bound for.
    pub(crate) sockets: Vec<(OwnedFd, String)>,
    /// Where to say that this process is ready.
    ready: Option<OwnedFd>,
    /// The memory file of the TLS session ticket keys, so that sessions resume across the
    /// reload.
    pub(crate) ticket_keys: Option<OwnedFd>,
    /// What the replaced server's `model = "auto"` runs.
    pub(crate) auto_model: Option<fastpath_drivers::ModelKind>,
}

/// Reads and removes a variable.
fn take_var(name: &str) -> Option<OsString> {
    let value = std::env::var_os(name);
    std::env::remove_var(name);
    value
}

/// Takes descriptor `text` as an owned one if it is open.
fn open_fd(text: &str) -> Option<OwnedFd> {
    let fd: RawFd = text.parse().ok().filter(|&fd| fd > 2)?;
    // SAFETY: fcntl only asks whether the descriptor is open.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        return None;
    }
    // Close-on-exec again, so that no later child of ours inherits it.
    // SAFETY: sets a flag on an open descriptor.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    // SAFETY: the old server passed this descriptor to this process alone.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Handed {
    /// Reads `FASTPATH_LISTENERS`, `FASTPATH_READY_FD`, `FASTPATH_TICKET_KEYS_FD` and
    /// `FASTPATH_AUTO_MODEL` and unsets them. Like `Systemd::from_env`, before the process has
    /// other threads.
    pub(crate) fn from_env() -> Handed {
        let listeners = take_var(LISTENERS_VAR);
        let ready = take_var(READY_VAR);
        let ticket_keys = take_var(TICKET_KEYS_VAR);
        let auto_model = take_var(AUTO_MODEL_VAR);
        let mut handed = Handed::default();
        if let Some(list) = listeners.as_ref().and_then(|l| l.to_str()) {
            for entry in list.split(',').filter(|e| !e.is_empty()) {
                let Some((fd, name)) = entry.split_once('=') else {
                    continue;
                };
                match open_fd(fd) {
                    Some(fd) => handed.sockets.push((fd, name.to_owned())),
                    None => tracing::warn!("{LISTENERS_VAR}: descriptor {fd} is not open"),
                }
            }
        }
        handed.ready = ready.as_ref().and_then(|r| open_fd(r.to_str()?));
        handed.ticket_keys = ticket_keys.as_ref().and_then(|t| open_fd(t.to_str()?));
        handed.auto_model = auto_model
            .as_ref()
            .and_then(|m| fastpath_drivers::ModelKind::from_name(m.to_str()?));
        handed
    }

    /// Tells the old server that this one is ready (it then stops gracefully).
    pub(crate) fn ready(&mut self) {
        if let Some(fd) = self.ready.take() {
            // SAFETY: writes one byte from a live buffer to a pipe we own.
            unsafe { libc::write(fd.as_raw_fd(), b"1".as_ptr().cast(), 1) };
        }
    }
}

/// The handed-over sockets named `name`, taken out of `sockets`.
fn take_named(sockets: &mut Vec<(OwnedFd, String)>, name: &str) -> Vec<(OwnedFd, String)> {
    let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(sockets)
        .into_iter()
        .partition(|(_, n)| n == name);
    *sockets = rest;
    mine
}

/// The listener for `addr`, `sets` sockets, from the sockets handed over under its name
/// (taken out of `sockets`), or bound anew when none was: `options` say how.
pub(crate) fn adopt_or_bind(
    addr: &ListenAddr,
    options: ListenOptions,
    sockets: &mut Vec<(OwnedFd, String)>,
    sets: usize,
) -> io::Result<Listeners> {
    let name = addr.to_string();
    match addr {
        ListenAddr::Tcp(tcp) => adopt_or_bind_tcp(*tcp, &name, sockets, sets),
        ListenAddr::Unix(path) => adopt_or_bind_unix(path, &name, options, sockets, sets),
    }
}

/// The listener of the Unix-domain socket at `path`, one socket shared by every listener set:
/// the one handed over under `name` (its file now this process's to remove at the end), or
/// one bound anew.
fn adopt_or_bind_unix(
    path: &std::path::Path,
    name: &str,
    options: ListenOptions,
    sockets: &mut Vec<(OwnedFd, String)>,
    sets: usize,
) -> io::Result<Listeners> {
    // The predecessor passed a copy per listener set: one is enough.
    let Some((socket, _)) = take_named(sockets, name).into_iter().next() else {
        let spec = (ListenAddr::Unix(path.to_owned()), options);
        let fresh = bind_listeners_with(&[spec], sets)?;
        tracing::info!("reload: {name} is a new address, bound");
        return Ok(fresh);
    };
    fastpath_drivers::adopt_handed(&socket)
        .map_err(|e| io::Error::new(e.kind(), format!("handed-over socket for {name}: {e}")))?;
    let mut listener = Listeners::empty(sets);
    listener.unix_files.push(UnixSocketFile::new(path)?);
    let copies = shared_by_every_set(socket, listener.per_worker.len())?;
    listener.push(ListenAddr::Unix(path.to_owned()), copies);
    Ok(listener)
}

/// The listener for the TCP address `addr`, one socket a listener set: those handed over
/// under `name` (taken out of `sockets`), with more bound into their group when there are
/// fewer than `sets`, extra ones closed; bound anew when none was handed over.
pub(crate) fn adopt_or_bind_tcp(
    addr: SocketAddr,
    name: &str,
    sockets: &mut Vec<(OwnedFd, String)>,
    sets: usize,
) -> io::Result<Listeners> {
    let sets = sets.max(1);
    let mut mine = take_named(sockets, name);
    if mine.is_empty() {
        let fresh = bind_listeners(&[addr], sets)?;
        tracing::info!("reload: {addr} is a new address, bound");
        return Ok(fresh);
    }
    let mut bound = None;
    for (fd, _) in &mine {
        let adopted = fastpath_drivers::adopt_handed(fd)
            .map_err(|e| io::Error::new(e.kind(), format!("handed-over socket for {name}: {e}")))?;
        bound = Some(adopted.tcp().ok_or_else(|| {
            io::Error::other(format!("handed-over socket for {name} is a Unix socket"))
        })?);
    }
    let bound = bound.expect("at least one socket");
    if mine.len() > sets {
        tracing::warn!(
            "reload: {} sockets were handed over for {bound} and {sets} are served; \
             closing {} (clients queued on them may be reset)",
            mine.len(),
            mine.len() - sets
        );
        mine.truncate(sets);
    }
    let more = fastpath_drivers::bind_into_group(bound, sets - mine.len())?;
    let fds = mine.into_iter().map(|(fd, _)| fd).chain(more).collect();
    let mut listener = Listeners::empty(sets);
    listener.push(ListenAddr::Tcp(bound), fds);
    Ok(listener)
}

/// Closes the handed-over sockets no configured address took, saying so.
pub(crate) fn close_unused(sockets: Vec<(OwnedFd, String)>) {
    let mut closed: Vec<String> = sockets.into_iter().map(|(_, name)| name).collect();
    closed.dedup();
    for name in closed {
        tracing::info!("reload: {name} is no longer configured; its listener is closed");
    }
}

/// Names a successor started from /proc/self/exe as the server it replaces: the kernel
/// names a process after the file it executed ("exe"), which `ps`, `pgrep fastpath` and
/// `killall` would then not find.
pub(crate) fn name_process() {
    let name = std::env::current_exe()
        .ok()
        .and_then(|path| path.file_name().map(|n| n.to_string_lossy().into_owned()))
        .map(|name| name.trim_end_matches(" (deleted)").to_owned())
        .filter(|name| name != "exe")
        .unwrap_or_else(|| "fastpath".to_owned());
    // The kernel keeps 15 bytes and a NUL.
    let mut bytes: Vec<u8> = name.into_bytes();
    bytes.truncate(15);
    bytes.push(0);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, bytes.as_ptr() as libc::c_ulong, 0, 0, 0) };
}

/// The pid file (`pid_file`): written once the server is ready, removed when it stops if it
/// still names this process (a successor has written its own by then).
pub(crate) struct PidFile {
    path: PathBuf,
}

impl PidFile {
    pub(crate) fn write(path: &Path) -> io::Result<PidFile> {
        let tmp = path.with_extension("pid.tmp");
        std::fs::write(&tmp, format!("{}\n", std::process::id()))?;
        // A rename, so `fastpath reload` never reads a half-written file.
        std::fs::rename(&tmp, path)?;
        Ok(PidFile {
            path: path.to_owned(),
        })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let ours = std::fs::read_to_string(&self.path)
            .is_ok_and(|text| text.trim() == std::process::id().to_string());
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The path an upgrade starts: where the executable was started from. Read at start, since
/// /proc/self/exe reads "PATH (deleted)" once the file is replaced; a server started by a
/// reload after such a replacement (from /proc/self/exe, the old image) reads that already,
/// and the path is the same without the note.
fn on_disk(exe: &Path) -> PathBuf {
    let text = exe.as_os_str().as_encoded_bytes();
    match text.strip_suffix(b" (deleted)") {
        // SAFETY: a prefix of an OsStr's bytes cut at an ASCII boundary.
        Some(path) => PathBuf::from(unsafe { std::ffi::OsStr::from_encoded_bytes_unchecked(path) }),
        None => exe.to_owned(),
    }
}

/// What the running server needs to start its successor: looked at on SIGHUP and SIGUSR2.
pub(crate) struct Reloader {
    /// The configuration file, checked before anything starts; `None` when the server was
    /// started without one (a reload then starts the same command again).
    pub(crate) config_path: Option<PathBuf>,
    /// The executable as it was started, for an upgrade (the file there may be a new one).
    pub(crate) exe: Option<PathBuf>,
    /// Duplicates of every listening socket, with the names to pass them under.
    pub(crate) sockets: Vec<(OwnedFd, String)>,
    /// Variables to pass on (systemd's notification socket and watchdog).
    pub(crate) pass_on: Vec<(&'static str, OsString)>,
    /// The memory file of the TLS session ticket keys, passed on too.
    pub(crate) ticket_keys: Option<OwnedFd>,
    pub(crate) notify: Option<Arc<Notify>>,
    /// Set once the sockets are handed over: later signals are ignored.
    done: bool,
    /// The certificate, key and ticket key files: a change reloads.
    watched: WatchedFiles,
}

/// How often the watched files are looked at.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// Files whose change reloads the server (the TLS certificates, their keys and the ticket
/// key files), looked at once a second. A change is acted on once the file has stayed the
/// same for one look, so that a certificate and key written one after the other, or a file
/// written in several steps, are read whole; a certificate renewed by certbot (a symbolic
/// link moved to new files) is seen through the link.
pub(crate) struct WatchedFiles {
    files: Vec<Watched>,
    next_look: Instant,
}

struct Watched {
    path: PathBuf,
    /// As the running server read it.
    loaded: Option<Stamp>,
    /// As the last look found it.
    seen: Option<Stamp>,
}

/// What tells one version of a file from the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    device: u64,
    inode: u64,
    size: u64,
    modified: Option<std::time::SystemTime>,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        device: meta.dev(),
        inode: meta.ino(),
        size: meta.len(),
        modified: meta.modified().ok(),
    })
}

impl WatchedFiles {
    /// Watches `paths`, as they are now.
    pub(crate) fn new(paths: Vec<PathBuf>) -> WatchedFiles {
        let files = paths
            .into_iter()
            .map(|path| {
                let loaded = stamp(&path);
                Watched {
                    path,
                    loaded,
                    seen: loaded,
                }
            })
            .collect();
        WatchedFiles {
            files,
            next_look: Instant::now() + WATCH_EVERY,
        }
    }

    /// A file that changed since the server read it and has stayed so since the last look,
    /// if it is time to look.
    fn changed(&mut self, now: Instant) -> Option<&Path> {
        if self.files.is_empty() || now < self.next_look {
            return None;
        }
        self.next_look = now + WATCH_EVERY;
        let mut settled = None;
        for file in &mut self.files {
            let now_seen = stamp(&file.path);
            if now_seen != file.loaded && now_seen == file.seen && settled.is_none() {
                settled = Some(file.path.as_path());
            }
            file.seen = now_seen;
        }
        settled
    }

    /// Takes the files as they are now as read (after a reload, done or refused, so that
    /// one change starts one reload).
    fn settle(&mut self) {
        for file in &mut self.files {
            file.loaded = file.seen;
        }
    }
}

impl Reloader {
    pub(crate) fn new(
        config_path: Option<PathBuf>,
        sockets: Vec<(OwnedFd, String)>,
        pass_on: Vec<(&'static str, OsString)>,
        ticket_keys: Option<OwnedFd>,
        watched: WatchedFiles,
        notify: Option<Arc<Notify>>,
    ) -> Reloader {
        Reloader {
            config_path,
            exe: std::env::current_exe().ok().map(|exe| on_disk(&exe)),
            sockets,
            pass_on,
            ticket_keys,
            notify,
            done: false,
            watched,
        }
    }

    /// Answers the signals that arrived since the last look.
    pub(crate) fn poll(&mut self) {
        let hangup = signals::take_hangup();
        let usr2 = signals::take_usr2();
        if self.done || signals::draining() {
            if hangup || usr2 {
                tracing::info!("already stopping: the reload or upgrade asked for is not done");
            }
            return;
        }
        if hangup {
            self.replace(Path::new("/proc/self/exe"), "reload");
        } else if let Some(path) = self.watched.changed(Instant::now()) {
            tracing::info!("{} changed", path.display());
            self.replace(Path::new("/proc/self/exe"), "reload");
            self.watched.settle();
        } else if usr2 {
            match self.exe.clone() {
                Some(exe) => self.replace(&exe, "binary upgrade"),
                None => tracing::error!(
                    "binary upgrade: the path of the executable is not known; nothing done"
                ),
            }
        }
    }

    fn replace(&mut self, exe: &Path, what: &str) {
        if let Some(path) = &self.config_path {
            if let Err(errors) = Config::load(path) {
                for e in &errors {
                    tracing::error!("{}:{}:{}: {}", path.display(), e.line, e.column, e.message);
                }
                tracing::error!(
                    "{what} refused: {} has {} error(s); still serving the configuration \
                     loaded before",
                    path.display(),
                    errors.len()
                );
                return;
            }
        }
        if let Some(notify) = &self.notify {
            notify.send(&format!(
                "RELOADING=1\nSTATUS={what}: starting a new server"
            ));
        }
        tracing::info!(
            "{what}: starting a new server ({}) on the same listening sockets",
            exe.display()
        );
        match self.start(exe) {
            Ok(pid) => {
                tracing::info!(
                    "{what}: the new server (pid {pid}) is ready; this one (pid {}) stops \
                     gracefully",
                    std::process::id()
                );
                self.done = true;
                signals::set_handed_over();
                signals::DRAIN.store(true, Ordering::SeqCst);
            }
            Err(e) => {
                tracing::error!("{what} failed: {e}; still serving as before");
                if let Some(notify) = &self.notify {
                    notify.send("READY=1\nSTATUS=serving (the last reload failed)");
                }
            }
        }
    }

    /// Starts `exe` with this process's arguments and the sockets; waits until it is ready.
    fn start(&self, exe: &Path) -> io::Result<u32> {
        let mut pipe = [0; 2];
        // SAFETY: pipe2 into a two-element array.
        if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 just returned both descriptors.
        let (read, write) =
            unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
        let list: Vec<String> = self
            .sockets
            .iter()
            .map(|(fd, name)| format!("{}={name}", fd.as_raw_fd()))
            .collect();
        let mut passed: Vec<RawFd> = self.sockets.iter().map(|(fd, _)| fd.as_raw_fd()).collect();
        passed.push(write.as_raw_fd());
        passed.extend(self.ticket_keys.as_ref().map(|fd| fd.as_raw_fd()));
        let mut command = Command::new(exe);
        if let Some(arg0) = std::env::args_os().next() {
            command.arg0(arg0);
        }
        command
            .args(std::env::args_os().skip(1))
            .env(LISTENERS_VAR, list.join(","))
            .env(READY_VAR, write.as_raw_fd().to_string());
        for (name, value) in &self.pass_on {
            command.env(name, value);
        }
        if let Some(fd) = &self.ticket_keys {
            command.env(TICKET_KEYS_VAR, fd.as_raw_fd().to_string());
        }
        // SAFETY: only fcntl, which is async-signal-safe, between fork and exec: the passed
        // descriptors lose close-on-exec in the child alone.
        unsafe {
            command.pre_exec(move || {
                for &fd in &passed {
                    let flags = libc::fcntl(fd, libc::F_GETFD);
                    if flags == -1
                        || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) == -1
                    {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(|e| {
            io::Error::new(e.kind(), format!("cannot start {}: {e}", exe.display()))
        })?;
        drop(write);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let mut poll = libc::pollfd {
                fd: read.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll on one pollfd we own.
            let n = unsafe { libc::poll(&mut poll, 1, 100) };
            if n > 0 {
                let mut byte = [0u8; 1];
                // SAFETY: reads into a live one-byte buffer.
                let got = unsafe { libc::read(read.as_raw_fd(), byte.as_mut_ptr().cast(), 1) };
                if got == 1 {
                    return Ok(child.id());
                }
                // The pipe closed without a word: the new server stopped before it was ready.
                let status = child.wait()?;
                return Err(io::Error::other(format!(
                    "the new server stopped before it was ready ({status}; its messages are above)"
                )));
            }
            if Instant::now() >= deadline || signals::STOP.load(Ordering::Relaxed) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::other(format!(
                    "the new server was not ready within {} s; it was killed",
                    READY_TIMEOUT.as_secs()
                )));
            }
        }
    }
}
