//! inetd mode: the one connection is standard input and output (a socket from inetd or
//! `systemd-socket-activate --inetd`, or a pair of pipes). The same state machine as the
//! models run, with blocking reads and writes in a small loop: a process serves one
//! connection, so there is nothing to multiplex.

use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::cx::Sink;
use crate::machine::{Engine, InputBuf, Step};
use crate::Server;

/// Standard output, written whole; files are copied to it by the kernel (sendfile or splice,
/// through `io::copy`'s specialisations).
struct Stdout {
    fd: ManuallyDrop<File>,
    buf: Vec<u8>,
    failed: bool,
}

impl Stdout {
    fn flush(&mut self) {
        if self.failed || self.buf.is_empty() {
            self.buf.clear();
            return;
        }
        if let Err(e) = self.fd.write_all(&self.buf) {
            tracing::debug!("inetd: write: {e}");
            self.failed = true;
        }
        self.buf.clear();
    }
}

impl Sink for Stdout {
    fn bytes(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    fn text(&mut self, args: fmt::Arguments<'_>) {
        let _ = self.buf.write_fmt(args);
    }

    fn copy_file(&mut self, file: &File, len: u64) -> io::Result<u64> {
        crate::cx::read_into(file, len, &mut self.buf)
    }

    fn file(&mut self, file: Arc<File>, len: u64) {
        self.flush();
        if self.failed {
            return;
        }
        let mut from = io::Read::take(&*file, len);
        match io::copy(&mut from, &mut *self.fd) {
            Ok(n) if n == len => {}
            Ok(n) => {
                tracing::info!(
                    "inetd: a file replied shrank while being sent ({n} of {len} bytes)"
                );
                self.failed = true;
            }
            Err(e) => {
                tracing::debug!("inetd: sending a file: {e}");
                self.failed = true;
            }
        }
    }

    fn queued(&self) -> usize {
        // Written out after each batch of input, blocking: never more than one batch's.
        0
    }

    fn failed(&self) -> bool {
        self.failed
    }
}

struct Buf {
    data: Vec<u8>,
    start: usize,
}

impl InputBuf for Buf {
    fn data(&self) -> &[u8] {
        &self.data[self.start..]
    }
    fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.data.len());
        if self.start == self.data.len() {
            self.data.clear();
            self.start = 0;
        }
    }
}

/// Whether descriptor 0 is a listening socket: inetd's `wait` mode, or
/// systemd-socket-activate without `--accept`, which hand over the listener, not a connection.
fn stdin_is_listening() -> bool {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt into an int of the right size; fails harmlessly on a non-socket.
    let r = unsafe {
        libc::getsockopt(
            0,
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    r == 0 && value != 0
}

/// Serves the connection on descriptors 0 and 1 until it ends; END runs before the return.
pub(crate) fn serve<S: Server>(engine: &Engine<S>) -> Result<(), String> {
    if stdin_is_listening() {
        return Err(
            "standard input is a listening socket, not a connection: an inetd server \
                    takes one connection per process (inetd.conf: `nowait`; \
                    systemd-socket-activate: --inetd --accept; a socket unit: Accept=yes)"
                .to_string(),
        );
    }
    fastpath_drivers::ignore_sigpipe();
    let stop = fastpath_drivers::signals::install_stop_handler();
    let peer = crate::peer_of(0);
    let mut out = Stdout {
        // SAFETY: descriptor 1 is the connection, open for the process's life; ManuallyDrop
        // keeps this File from closing it.
        fd: ManuallyDrop::new(unsafe { File::from_raw_fd(1) }),
        buf: Vec::new(),
        failed: false,
    };
    let mut scratch = engine.scratch();
    let (mut m, mut step) = engine.open(peer, &mut out);
    out.flush();
    let mut input = Buf {
        data: Vec::new(),
        start: 0,
    };
    let chunk = 16 * 1024;
    while step != Step::Close {
        // Wait for input, at most the idle timeout, waking for a stop signal.
        let deadline = Instant::now() + engine.options.idle_timeout;
        let ready = loop {
            if stop.load(Ordering::Relaxed) {
                break Err("server stopping");
            }
            let now = Instant::now();
            if now >= deadline {
                break Err("idle timeout");
            }
            let wait = (deadline - now).min(std::time::Duration::from_millis(100));
            let mut pfd = libc::pollfd {
                fd: 0,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, wait.as_millis() as i32) };
            if n > 0 {
                break Ok(());
            }
        };
        if let Err(why) = ready {
            let why = if why == "idle timeout" {
                format!(
                    "idle timeout (no input for {:?})",
                    engine.options.idle_timeout
                )
            } else {
                why.to_string()
            };
            engine.end(&mut m, &mut out, &why);
            break;
        }
        let len = input.data.len();
        input.data.resize(len + chunk, 0);
        // SAFETY: reads into the `chunk` bytes just made room for.
        let n = unsafe { libc::read(0, input.data[len..].as_mut_ptr().cast(), chunk) };
        if n < 0 {
            input.data.truncate(len);
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted || e.kind() == io::ErrorKind::WouldBlock {
                continue;
            }
            engine.end(&mut m, &mut out, &format!("read error: {e}"));
            break;
        }
        input.data.truncate(len + n as usize);
        let eof = n == 0;
        step = engine.feed(&mut m, &mut scratch, &mut input, eof, &mut out);
        out.flush();
    }
    out.flush();
    Ok(())
}
