//! The access log in Combined Log Format.
//!
//! Each worker appends lines to its own buffer and hands full buffers (or, every tick, whatever
//! it has) to one writer thread over a bounded channel. A worker never waits for the disk or a
//! slow stdout reader: when the channel is full the lines are dropped and counted, and the
//! count is reported in the error log.
//!
//! A log file is reopened at its configured path when asked (SIGUSR1, SIGHUP: see
//! `fastpath_drivers::signals`), within a tick, by whoever writes it: lines written before go
//! to the file as it was (renamed by logrotate, say), later ones to the new file.
//!
//! A process that must stay single-threaded (a prefork child) writes its buffers itself
//! instead ([`AccessLog::start_direct`]): it serves one connection, so waiting for the write
//! holds up no one else, and a file opened for appending keeps the children's lines whole.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use fastpath_drivers::signals;

use fastpath_http::{Method, Noted, Request, Version};

use crate::config::LogTarget;

/// A worker hands its buffer over once it holds this much.
const FLUSH_AT: usize = 32 * 1024;
/// Buffers queued for the writer before workers start dropping lines.
const CHANNEL_DEPTH: usize = 256;

/// Where workers' buffers go.
#[derive(Clone)]
enum Destination {
    /// To the writer thread.
    Writer(SyncSender<Vec<u8>>),
    /// Written by the worker itself.
    Direct(Arc<Mutex<Sink>>),
}

/// Where the lines are written, and what it takes to reopen it.
struct Sink {
    out: Box<dyn Write + Send>,
    /// The file's path; `None` for a standard stream, which is never reopened.
    path: Option<std::path::PathBuf>,
    /// [`signals::reopen_generation`] when the file was opened.
    generation: u64,
}

impl Sink {
    /// Reopens the file if that has been asked for since it was opened. A file that cannot
    /// be opened is reported and the old one kept, so that no line is lost.
    fn reopen_if_asked(&mut self) {
        let generation = signals::reopen_generation();
        if generation == self.generation {
            return;
        }
        self.generation = generation;
        let Some(path) = &self.path else {
            return;
        };
        let _ = self.out.flush();
        match open_append(path) {
            Ok(file) => self.out = Box::new(file),
            Err(e) => tracing::error!("cannot reopen the access log {}: {e}", path.display()),
        }
    }

    fn write_chunk(&mut self, chunk: &[u8]) {
        self.reopen_if_asked();
        if let Err(e) = self.out.write_all(chunk).and_then(|_| self.out.flush()) {
            tracing::error!("access log write failed: {e}");
        }
    }
}

/// The writer thread and the way to reach it.
pub struct AccessLog {
    sender: Option<Destination>,
    writer: Option<JoinHandle<()>>,
    /// Lines end with the TLS fields (`[log] tls_fields`).
    tls_fields: bool,
}

impl AccessLog {
    /// Opens the target and starts the writer; `Off` gives a log that records nothing.
    pub fn start(target: &LogTarget) -> io::Result<AccessLog> {
        let Some(sink) = open_sink(target)? else {
            return Ok(AccessLog {
                sender: None,
                writer: None,
                tls_fields: false,
            });
        };
        let (sender, receiver) = sync_channel(CHANNEL_DEPTH);
        let writer = std::thread::Builder::new()
            .name("fastpath-access-log".into())
            .spawn(move || write_loop(receiver, sink))?;
        Ok(AccessLog {
            sender: Some(Destination::Writer(sender)),
            writer: Some(writer),
            tls_fields: false,
        })
    }

    /// Opens the target for workers that write their buffers themselves, with no thread.
    pub fn start_direct(target: &LogTarget) -> io::Result<AccessLog> {
        let sink = open_sink(target)?;
        Ok(AccessLog {
            sender: sink.map(|sink| Destination::Direct(Arc::new(Mutex::new(sink)))),
            writer: None,
            tls_fields: false,
        })
    }

    /// Its lines end with the TLS fields if `on` (see [`AccessLogBuffer::record`]).
    pub fn with_tls_fields(mut self, on: bool) -> AccessLog {
        self.tls_fields = on;
        self
    }

    /// A buffer for one worker.
    pub(crate) fn buffer(&self) -> Option<AccessLogBuffer> {
        let tls_fields = self.tls_fields;
        self.sender.as_ref().map(|sender| AccessLogBuffer {
            buf: Vec::with_capacity(FLUSH_AT + 1024),
            sender: sender.clone(),
            dropped: 0,
            tls_fields,
        })
    }

    /// Waits until every worker's buffer has been written (workers must have stopped).
    pub fn finish(&mut self) {
        self.sender = None;
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// Opens where the lines go; `None` for a log that is off.
fn open_sink(target: &LogTarget) -> io::Result<Option<Sink>> {
    let generation = signals::reopen_generation();
    let (out, path): (Box<dyn Write + Send>, _) = match target {
        LogTarget::Off => return Ok(None),
        LogTarget::Stdout => (Box::new(io::stdout()), None),
        LogTarget::Stderr => (Box::new(io::stderr()), None),
        LogTarget::File(path) => (Box::new(open_append(path)?), Some(path.clone())),
    };
    Ok(Some(Sink {
        out,
        path,
        generation,
    }))
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// How often an idle writer looks whether its file is to be reopened.
const REOPEN_POLL: Duration = Duration::from_millis(100);

fn write_loop(receiver: Receiver<Vec<u8>>, mut sink: Sink) {
    loop {
        match receiver.recv_timeout(REOPEN_POLL) {
            Ok(chunk) => sink.write_chunk(&chunk),
            Err(RecvTimeoutError::Timeout) => sink.reopen_if_asked(),
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// What the access log (and the metrics) say of a request: its method, its line, its
/// referer and user agent, borrowed from the request as it was read.
#[derive(Clone, Copy)]
pub(crate) struct Said<'a> {
    pub method: Method,
    /// The request line's parts, written joined by spaces.
    pub line: &'a [&'a [u8]],
    pub referer: Option<&'a [u8]>,
    pub user_agent: Option<&'a [u8]>,
    /// The user a module authenticated the request as (`basic_auth`).
    pub user: Option<&'a [u8]>,
}

impl<'a> Said<'a> {
    /// What is said of a parsed request, its `line` from [`request_line`].
    pub(crate) fn of(request: &Request<'a>, line: &'a [&'a [u8]; 3]) -> Said<'a> {
        Said {
            method: request.kind,
            line,
            referer: request.noted(Noted::Referer),
            user_agent: request.noted(Noted::UserAgent),
            user: None,
        }
    }

    /// What is said of bytes that did not parse as a request (its first `line`): the method
    /// is the first word, if it names one.
    pub(crate) fn unparsed(line: &'a [&'a [u8]; 1]) -> Said<'a> {
        let word = line[0].split(|&b| b == b' ').next().unwrap_or_default();
        Said {
            method: std::str::from_utf8(word).map_or(Method::Other, Method::of),
            line,
            referer: None,
            user_agent: None,
            user: None,
        }
    }
}

/// [`Said`], owned: for a request logged after its buffer has moved on (an exchange, a
/// large response still being sent).
pub(crate) struct Logged {
    method: Method,
    line: Vec<u8>,
    referer: Option<Vec<u8>>,
    user_agent: Option<Vec<u8>>,
    user: Option<Vec<u8>>,
}

impl Logged {
    pub(crate) fn of(request: &Request<'_>, h2: bool) -> Logged {
        Logged {
            method: request.kind,
            line: request_line(request, h2).join(&b' '),
            referer: request.noted(Noted::Referer).map(<[u8]>::to_vec),
            user_agent: request.noted(Noted::UserAgent).map(<[u8]>::to_vec),
            user: None,
        }
    }

    /// The same, with the user a module authenticated the request as.
    pub(crate) fn with_user(mut self, user: Option<&str>) -> Logged {
        self.user = user.map(|u| u.as_bytes().to_vec());
        self
    }

    /// The request line, as quoted.
    pub(crate) fn line(&self) -> &[u8] {
        &self.line
    }

    /// What the log says, from these.
    pub(crate) fn said<'a>(&'a self, line: &'a [&'a [u8]; 1]) -> Said<'a> {
        Said {
            method: self.method,
            line,
            referer: self.referer.as_deref(),
            user_agent: self.user_agent.as_deref(),
            user: self.user.as_deref(),
        }
    }
}

/// The request line of `request` as the access log quotes it, in its three parts.
pub(crate) fn request_line<'r>(request: &Request<'r>, h2: bool) -> [&'r [u8]; 3] {
    let version: &[u8] = match request.version {
        // As nginx writes it: the stream's request was made HTTP/1.1 to be served.
        _ if h2 => b"HTTP/2.0",
        Version::Http10 => b"HTTP/1.0",
        Version::Http11 => b"HTTP/1.1",
    };
    [
        request.method.as_bytes(),
        request.target.as_bytes(),
        version,
    ]
}

/// One worker's pending access-log lines.
pub(crate) struct AccessLogBuffer {
    buf: Vec<u8>,
    sender: Destination,
    dropped: u64,
    /// Each line ends with the connection's TLS protocol, cipher and whether its session
    /// was resumed (`[log] tls_fields`).
    tls_fields: bool,
}

/// Who a connection is from, as the logs name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peer {
    /// A TCP client.
    Tcp(SocketAddr),
    /// A client of the Unix-domain listener of this name (`unix:PATH`): such clients have
    /// no address of their own.
    Unix(&'static str),
}

impl Peer {
    /// The client's IP address; `None` for a client of a Unix-domain listener.
    pub(crate) fn client_ip(&self) -> Option<IpAddr> {
        match self {
            Peer::Tcp(addr) => Some(addr.ip()),
            Peer::Unix(_) => None,
        }
    }

    /// The client's IP address, for `X-Forwarded-For`; `0.0.0.0` for a Unix-domain client.
    pub(crate) fn ip(&self) -> IpAddr {
        match self {
            Peer::Tcp(addr) => addr.ip(),
            Peer::Unix(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        }
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Tcp(addr) => addr.fmt(f),
            Peer::Unix(name) => f.write_str(name),
        }
    }
}

/// What the access log says of a connection's TLS, with `[log] tls_fields`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TlsFields {
    /// `TLSv1.3`.
    pub protocol: &'static str,
    /// `TLS13_AES_128_GCM_SHA256`.
    pub cipher: &'static str,
    /// The session was resumed.
    pub resumed: bool,
}

/// Who a request came from, as its access-log line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Client {
    pub peer: Peer,
    /// Over TLS, as agreed; `None` for a plain connection.
    pub tls: Option<TlsFields>,
}

/// The fields of one access-log line.
pub(crate) struct Entry<'a> {
    pub client: Client,
    pub time: &'a [u8],
    pub said: Said<'a>,
    pub status: u16,
    pub body_bytes: u64,
    /// Why the request ended without a complete answer (the connection ended first): one
    /// more field at the end of the line.
    pub ended: Option<&'a str>,
}

impl AccessLogBuffer {
    /// Appends one line:
    /// `host - user [time] "request" status bytes "referer" "user-agent"`, then with
    /// `tls_fields` the TLS protocol, cipher and `r` for a resumed session or `.` for a full
    /// handshake (nginx's `$ssl_protocol $ssl_cipher $ssl_session_reused`), each `-` on a
    /// plain connection, then why the request ended early, if it did.
    pub(crate) fn record(&mut self, entry: &Entry<'_>) {
        let buf = &mut self.buf;
        let _ = match entry.client.peer {
            Peer::Tcp(addr) => write!(buf, "{} - ", addr.ip()),
            Peer::Unix(name) => write!(buf, "{name} - "),
        };
        // The user a module authenticated (nginx's `$remote_user`), escaped as the request
        // line is (it came from the client), and its spaces too: the field is not quoted.
        match entry.said.user {
            Some(user) if !user.is_empty() => {
                for word in user.split_inclusive(|&b| b == b' ') {
                    match word.strip_suffix(b" ") {
                        Some(word) => {
                            escape_into(word, buf);
                            buf.extend_from_slice(b"\\x20");
                        }
                        None => escape_into(word, buf),
                    }
                }
            }
            _ => buf.push(b'-'),
        }
        buf.push(b' ');
        buf.extend_from_slice(entry.time);
        buf.extend_from_slice(b" \"");
        if entry.said.line.is_empty() {
            buf.push(b'-');
        }
        for (i, part) in entry.said.line.iter().enumerate() {
            if i > 0 {
                buf.push(b' ');
            }
            escape_into(part, buf);
        }
        // Status 0: not known here (a bridged connection, whose backend answers unseen), or
        // none was sent.
        if entry.status == 0 {
            buf.extend_from_slice(b"\" - ");
        } else {
            let _ = write!(buf, "\" {} ", entry.status);
        }
        if entry.body_bytes == 0 {
            buf.push(b'-');
        } else {
            let _ = write!(buf, "{}", entry.body_bytes);
        }
        for field in [entry.said.referer, entry.said.user_agent] {
            buf.extend_from_slice(b" \"");
            match field {
                Some(value) => escape_into(value, buf),
                None => buf.push(b'-'),
            }
            buf.push(b'"');
        }
        if self.tls_fields {
            let _ = match entry.client.tls {
                Some(tls) => write!(
                    buf,
                    " {} {} {}",
                    tls.protocol,
                    tls.cipher,
                    if tls.resumed { 'r' } else { '.' }
                ),
                None => write!(buf, " - - -"),
            };
        }
        if let Some(ended) = entry.ended {
            buf.push(b' ');
            buf.extend_from_slice(ended.as_bytes());
        }
        buf.push(b'\n');
        if self.buf.len() >= FLUSH_AT {
            self.flush();
        }
    }

    /// Hands what is buffered to the writer without waiting.
    pub(crate) fn flush(&mut self) {
        if let Destination::Direct(sink) = &self.sender {
            let mut sink = sink.lock().unwrap_or_else(PoisonError::into_inner);
            // Called every tick: a file to reopen is reopened even with nothing to write.
            sink.reopen_if_asked();
            if !self.buf.is_empty() {
                sink.write_chunk(&self.buf);
                self.buf.clear();
            }
            return;
        }
        if self.buf.is_empty() {
            return;
        }
        let Destination::Writer(sender) = &self.sender else {
            return;
        };
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(FLUSH_AT + 1024));
        match sender.try_send(chunk) {
            Ok(()) => {
                if self.dropped > 0 {
                    tracing::warn!(
                        "access log could not keep up: {} lines dropped",
                        self.dropped
                    );
                    self.dropped = 0;
                }
            }
            Err(TrySendError::Full(chunk)) | Err(TrySendError::Disconnected(chunk)) => {
                self.dropped += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
            }
        }
    }
}

/// Escapes quotes, backslashes and non-printable bytes as nginx does (`\x22`), so a client
/// cannot forge log lines or fields.
fn escape_into(value: &[u8], out: &mut Vec<u8>) {
    for &b in value {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            let _ = write!(out, "\\x{b:02X}");
        } else {
            out.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain_client() -> Client {
        Client {
            peer: Peer::Tcp("127.0.0.1:5000".parse().unwrap()),
            tls: None,
        }
    }

    #[test]
    fn tls_fields_follow_the_user_agent_when_asked_for() {
        let (sender, receiver) = sync_channel(4);
        let mut buffer = AccessLogBuffer {
            buf: Vec::new(),
            sender: Destination::Writer(sender),
            dropped: 0,
            tls_fields: true,
        };
        let said = Said {
            method: Method::Get,
            line: &[b"GET", b"/", b"HTTP/1.1"],
            referer: None,
            user_agent: None,
            user: None,
        };
        let tls = TlsFields {
            protocol: "TLSv1.3",
            cipher: "TLS13_AES_128_GCM_SHA256",
            resumed: true,
        };
        for (client, ended) in [
            (
                Client {
                    tls: Some(tls),
                    ..plain_client()
                },
                None,
            ),
            (
                Client {
                    tls: Some(TlsFields {
                        resumed: false,
                        ..tls
                    }),
                    ..plain_client()
                },
                Some("client-gone"),
            ),
            (plain_client(), None),
        ] {
            buffer.record(&Entry {
                client,
                time: b"[t]",
                said,
                status: 200,
                body_bytes: 1,
                ended,
            });
        }
        buffer.flush();
        assert_eq!(
            String::from_utf8(receiver.recv().unwrap()).unwrap(),
            "127.0.0.1 - - [t] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\" TLSv1.3 TLS13_AES_128_GCM_SHA256 r\n\
             127.0.0.1 - - [t] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\" TLSv1.3 TLS13_AES_128_GCM_SHA256 . client-gone\n\
             127.0.0.1 - - [t] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\" - - -\n"
        );
    }

    #[test]
    fn records_a_combined_log_line() {
        let (sender, receiver) = sync_channel(4);
        let mut buffer = AccessLogBuffer {
            buf: Vec::new(),
            sender: Destination::Writer(sender),
            dropped: 0,
            tls_fields: false,
        };
        buffer.record(&Entry {
            client: plain_client(),
            time: b"[21/Nov/2026:22:50:00 +0000]",
            said: Said {
                method: Method::Other,
                line: &[b"GET", b"/a\"b", b"HTTP/1.1"],
                referer: None,
                user_agent: Some(b"curl/8"),
                user: None,
            },
            status: 200,
            body_bytes: 5,
            ended: None,
        });
        buffer.record(&Entry {
            client: plain_client(),
            time: b"[21/Nov/2026:22:50:01 +0000]",
            said: Said {
                method: Method::Other,
                line: &[b"POST", b"/app/upload", b"HTTP/1.1"],
                referer: None,
                user_agent: None,
                user: Some(b"al ice\"\n"),
            },
            status: 0,
            body_bytes: 0,
            ended: Some("client-gone"),
        });
        buffer.flush();
        let lines = receiver.recv().unwrap();
        assert_eq!(
            String::from_utf8(lines).unwrap(),
            "127.0.0.1 - - [21/Nov/2026:22:50:00 +0000] \"GET /a\\x22b HTTP/1.1\" 200 5 \"-\" \"curl/8\"\n\
             127.0.0.1 - al\\x20ice\\x22\\x0A [21/Nov/2026:22:50:01 +0000] \"POST /app/upload HTTP/1.1\" - - \"-\" \"-\" client-gone\n"
        );
    }
}
