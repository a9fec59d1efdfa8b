//! [`Cx`], an action's view of its connection, and [`Captures`], its match.

use std::borrow::Cow;
use std::cell::UnsafeCell;
use std::fmt;
use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use regex_automata::util::captures::Captures as Slots;

use crate::options::Options;
use crate::receive::Receive;
use crate::{StateId, States};

/// Where an action's output goes: the driver's output queue, inetd's standard output, or
/// nowhere (END of a connection already gone).
pub(crate) trait Sink {
    /// Queues `bytes`.
    fn bytes(&mut self, bytes: &[u8]);
    /// Queues formatted text.
    fn text(&mut self, args: fmt::Arguments<'_>);
    /// Queues `len` bytes of `file` from its start.
    fn file(&mut self, file: Arc<File>, len: u64);
    /// Copies up to `len` bytes of `file` (from its current position, a fresh file's start)
    /// into the output; returns how many were copied.
    fn copy_file(&mut self, file: &File, len: u64) -> io::Result<u64> {
        let mut buf = Vec::new();
        let n = read_into(file, len, &mut buf);
        self.bytes(&buf);
        n
    }
    /// Bytes queued and not yet sent.
    fn queued(&self) -> usize;
    /// Output can no longer be delivered (inetd: a write failed).
    fn failed(&self) -> bool {
        false
    }
}

/// Appends up to `len` bytes of `file` to `out`, read straight into its spare capacity (no
/// zeroed buffer, no copy); what was read stays appended even when an error stops it.
pub(crate) fn read_into(file: &File, len: u64, out: &mut Vec<u8>) -> io::Result<u64> {
    out.reserve(len as usize);
    let before = out.len();
    let result = io::Read::read_to_end(&mut io::Read::take(file, len), out);
    let n = (out.len() - before) as u64;
    result.map(|_| n)
}

/// Output of a connection that has gone: dropped.
pub(crate) struct NoSink;

impl Sink for NoSink {
    fn bytes(&mut self, _: &[u8]) {}
    fn text(&mut self, _: fmt::Arguments<'_>) {}
    fn file(&mut self, _: Arc<File>, _: u64) {}
    fn queued(&self) -> usize {
        0
    }
}

/// A rule's match: `$1`..`$n` in the specification.
pub struct Captures<'a> {
    pub(crate) slots: &'a Slots,
    pub(crate) input: &'a [u8],
    /// Text made for groups that are not UTF-8: only pushed to, and each string is boxed, so
    /// a `&str` handed out stays valid as long as the `Captures`.
    pub(crate) lossy: UnsafeCell<Vec<Box<str>>>,
}

impl<'a> Captures<'a> {
    pub(crate) fn new(slots: &'a Slots, input: &'a [u8]) -> Self {
        Captures {
            slots,
            input,
            lossy: UnsafeCell::new(Vec::new()),
        }
    }
}

impl Captures<'_> {
    /// Group `n` as text: `""` if it did not take part in the match (or does not exist);
    /// bytes that are not UTF-8 become U+FFFD.
    pub fn text(&self, n: usize) -> &str {
        match String::from_utf8_lossy(self.bytes(n)) {
            Cow::Borrowed(s) => s,
            Cow::Owned(s) => {
                let boxed: Box<str> = s.into_boxed_str();
                let ptr: *const str = &*boxed;
                // SAFETY: `lossy` is only ever pushed to (never read, shrunk or cleared) while
                // `self` lives, and Captures is not Sync, so no other push runs meanwhile;
                // the str lives in its own heap box, which does not move when the Vec grows.
                unsafe { (*self.lossy.get()).push(boxed) };
                // SAFETY: see above: the box lives as long as `self`.
                unsafe { &*ptr }
            }
        }
    }

    /// Group `n`'s bytes (`$bytes(n)`): empty if it did not take part in the match.
    pub fn bytes(&self, n: usize) -> &[u8] {
        self.slots
            .get_group(n)
            .map_or(&[][..], |span| &self.input[span.range()])
    }

    /// Groups, group 0 (the whole match) included.
    pub fn len(&self) -> usize {
        self.slots.group_len()
    }

    /// Never true: group 0 is always there.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// Files smaller than this are copied into the output rather than sent with sendfile: below
/// it a copy costs less than sendfile's setup and a second send for the file alone.
pub const COPY_BELOW: u64 = 8 * 1024;

/// A file opened for a reply ([`Cx::open_reply`]).
pub struct ReplyFile {
    file: File,
    len: u64,
}

impl ReplyFile {
    /// Its size when it was opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it was empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// What an action asked for that the machine carries out after it.
#[derive(Default)]
pub(crate) struct Effects {
    pub(crate) close: bool,
    pub(crate) receive: Option<Receive>,
}

/// An action's view of its connection: its states, its output, and the server's options.
pub struct Cx<'a> {
    pub(crate) states: &'a mut States,
    pub(crate) sink: &'a mut dyn Sink,
    pub(crate) effects: &'a mut Effects,
    pub(crate) options: &'a Options,
    pub(crate) peer: Option<SocketAddr>,
    /// In END: `$close` and `$fileReceive` mean nothing any more.
    pub(crate) ending: bool,
}

impl Cx<'_> {
    /// `$seen(S)`: state `s` is now seen, and the last one seen.
    pub fn seen(&mut self, s: StateId) {
        self.states.set(s);
    }

    /// `$clear(S)`: state `s` is no longer seen (START cannot be cleared).
    pub fn clear(&mut self, s: StateId) {
        self.states.unset(s);
    }

    /// `$clear(*)`: every state but START is no longer seen.
    pub fn clear_all(&mut self) {
        self.states.unset_all();
    }

    /// The connection's states, as the qualifiers see them.
    pub fn states(&self) -> &States {
        self.states
    }

    /// `$reply(...)`: queues formatted text for the peer.
    pub fn reply(&mut self, args: fmt::Arguments<'_>) {
        self.sink.text(args);
    }

    /// Queues bytes for the peer.
    pub fn reply_bytes(&mut self, data: &[u8]) {
        self.sink.bytes(data);
    }

    /// `$close()`: once the action returns, END runs and the connection closes (after what is
    /// queued has been sent).
    pub fn close(&mut self) {
        if !self.ending {
            self.effects.close = true;
        }
    }

    /// `$fileReply(path)`: queues the file at `path`, whole, and returns its size. A path that
    /// cannot be opened or is not a regular file is an error, logged, and nothing is queued.
    /// A file of [`COPY_BELOW`] bytes or more is sent from the page cache with sendfile (no
    /// copy through the server); a smaller one is read into the output, where it leaves with
    /// what was queued before it in one send (fastpath's own crossover, bench/sizes.py).
    pub fn file_reply(&mut self, path: &str) -> io::Result<u64> {
        match self.open_reply(path) {
            Ok(file) => Ok(self.reply_file(file)),
            Err(e) => {
                tracing::info!("{}: $fileReply({path}): {e}", self.who());
                Err(e)
            }
        }
    }

    /// Opens the regular file at `path` for [`Cx::reply_file`], so that an action can send
    /// headers that depend on its size (`file.len()`) before it, with one open and one stat.
    /// Errors are the caller's to report (nothing is logged: a missing file may be an
    /// ordinary answer, such as a 404).
    pub fn open_reply(&self, path: &str) -> io::Result<ReplyFile> {
        let file = File::open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        Ok(ReplyFile {
            file,
            len: meta.len(),
        })
    }

    /// Queues a file opened by [`Cx::open_reply`], as `$fileReply` does; returns the bytes
    /// queued (fewer than its length only if a small file shrank since it was opened).
    pub fn reply_file(&mut self, file: ReplyFile) -> u64 {
        if file.len < COPY_BELOW {
            return match self.sink.copy_file(&file.file, file.len) {
                Ok(n) => n,
                Err(e) => {
                    tracing::info!("{}: reading a file to reply: {e}", self.who());
                    0
                }
            };
        }
        self.sink.file(Arc::new(file.file), file.len);
        file.len
    }

    /// `$fileReceive(path[, len])`: once the action returns, the next `len` bytes of input
    /// (all of it until the peer finishes sending, without `len`) go to the file at `path`
    /// unmatched; they are written to `PATH.part`, renamed to `path` once complete (removed if
    /// the connection ends first). Matching resumes after them. The `.part` file is created
    /// here, so a path that cannot be written is this call's error.
    pub fn file_receive(&mut self, path: &str, len: Option<u64>) -> io::Result<()> {
        if self.ending {
            return Err(io::Error::other(
                "$fileReceive in END: the connection is closing",
            ));
        }
        match Receive::start(path, len) {
            Ok(receive) => {
                self.effects.receive = Some(receive);
                Ok(())
            }
            Err(e) => {
                tracing::info!("{}: $fileReceive({path}): {e}", self.who());
                Err(e)
            }
        }
    }

    /// The serverName option.
    pub fn server_name(&self) -> &str {
        &self.options.server_name
    }

    /// The peer's address (`None` under inetd on pipes).
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// Option `name`'s value as text (as given in the specification, config.nest or on the
    /// command line); `None` if it was not given and has no default.
    pub fn option(&self, name: &str) -> Option<&str> {
        self.options.value(name)
    }

    fn who(&self) -> String {
        match self.peer {
            Some(p) => format!("client {p}"),
            None => "client".to_string(),
        }
    }
}
