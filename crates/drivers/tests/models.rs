//! The driver contract, checked on every concurrency model over real sockets on 127.0.0.1.
//!
//! Each test is written once with `for_each_model!` and runs once per model, so a test named
//! `echo_round_trips::uring` is the io_uring run of `echo_round_trips`. The handlers are small
//! (an echo, and a line protocol that queues inline bytes and file ranges) so that a failure
//! points at the driver, not at HTTP.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use fastpath_drivers::{
    bind_listeners_with, run, CloseReason, DriverConfig, Handler, Io, ListenOptions, Model, Next,
    Opened, PercoreConfig, ThreadsConfig, Worker,
};

/// How long a client read or write may block before the test fails.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Queued output past which the test handlers ask to drain, like the HTTP handler does.
const HIGH_WATER: u64 = 64 * 1024;
const WORKERS: usize = 2;

/// Defines a test once and runs it on each of the models listed (by name: `epoll`, `uring`,
/// `percore`, `threads`); a model this kernel cannot run is skipped with a message.
macro_rules! for_models {
    ($name:ident, [$($model:ident),*], $body:expr) => {
        mod $name {
            use super::*;

            $(
                #[test]
                fn $model() {
                    if let Some(model) = model_named(stringify!($model)) {
                        let f: fn(Model) = $body;
                        f(model)
                    }
                }
            )*
        }
    };
}

/// Defines a test once and runs it on every model (upstream connections included).
macro_rules! for_each_model {
    ($name:ident, $body:expr) => {
        for_models!($name, [epoll, uring, percore, threads], $body);
    };
}

/// Joins run on every model: the io_uring loop stops its receives first, then splices.
macro_rules! for_each_joining_model {
    ($name:ident, $body:expr) => {
        for_models!($name, [epoll, uring, percore, threads], $body);
    };
}

/// Body splices run on the models built on the epoll loop.
macro_rules! for_each_splicing_model {
    ($name:ident, $body:expr) => {
        for_models!($name, [epoll, percore, threads], $body);
    };
}

/// The model a test is named after; `None` (with a message) when this kernel cannot run it.
fn model_named(name: &str) -> Option<Model> {
    match name {
        "epoll" => Some(Model::Epoll),
        "uring" => match fastpath_drivers::uring_available() {
            Ok(()) => Some(Model::Uring),
            Err(e) => {
                // Past the harness's capture, so the skip shows beside the `ok`.
                let _ = io::stderr().write_all(
                    format!("SKIPPED {name} model: io_uring unavailable ({e})\n").as_bytes(),
                );
                None
            }
        },
        "percore" => Some(Model::Percore(PercoreConfig::default())),
        "threads" => Some(Model::Threads(TEST_THREADS)),
        other => panic!("no model named {other}"),
    }
}

/// The thread pool of the tests: enough threads for the most connections a test holds open.
const TEST_THREADS: ThreadsConfig = ThreadsConfig {
    threads: 8,
    max_active: 2,
    stack_size: 256 * 1024,
};

/// Handlers a model runs: one per worker, or one per pool thread.
fn handler_count(model: Model) -> usize {
    match model {
        Model::Threads(threads) => threads.threads,
        _ => WORKERS,
    }
}

/// What the handlers saw, for the tests to check.
#[derive(Default)]
struct Log {
    closes: Mutex<Vec<CloseReason>>,
    opens: AtomicUsize,
    stops: AtomicUsize,
}

impl Log {
    fn closes(&self) -> Vec<CloseReason> {
        self.closes.lock().unwrap().clone()
    }

    /// Waits until `n` connections have closed; returns their reasons.
    fn wait_closes(&self, n: usize) -> Vec<CloseReason> {
        let until = Instant::now() + IO_TIMEOUT;
        loop {
            let closes = self.closes();
            if closes.len() >= n || Instant::now() > until {
                return closes;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A server running a model on its own thread, stopped when dropped.
struct Server {
    addr: SocketAddr,
    stop: &'static AtomicBool,
    thread: Option<JoinHandle<io::Result<()>>>,
    log: Arc<Log>,
}

impl Server {
    fn start<H, F>(model: Model, config: DriverConfig, make: F) -> Server
    where
        H: Handler,
        F: Fn(usize, Arc<Log>) -> H + Send + Sync + 'static,
    {
        Server::start_with(model, config, ListenOptions::default(), make)
    }

    /// [`Server::start`] with the listener set up by `options`.
    fn start_with<H, F>(
        model: Model,
        config: DriverConfig,
        options: ListenOptions,
        make: F,
    ) -> Server
    where
        H: Handler,
        F: Fn(usize, Arc<Log>) -> H + Send + Sync + 'static,
    {
        // A client that goes away during a sendfile must give EPIPE, as in the server.
        fastpath_drivers::ignore_sigpipe();
        let listeners =
            bind_listeners_with(&[("127.0.0.1:0".parse().unwrap(), options)], WORKERS).unwrap();
        let addr = listeners.local_addrs[0].tcp().expect("a TCP listener");
        // The server thread outlives this call and keeps the flag: one small leak per test.
        let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let log = Arc::new(Log::default());
        let handler_log = log.clone();
        let thread = thread::spawn(move || {
            run(
                model,
                listeners,
                &config,
                |worker| make(worker, handler_log.clone()),
                stop,
            )
        });
        Server {
            addr,
            stop,
            thread: Some(thread),
            log,
        }
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr).unwrap();
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        stream
    }

    /// Sets the stop flag and waits for run() to return.
    fn stop(&mut self) -> io::Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        match self.thread.take() {
            Some(thread) => thread.join().expect("run() panicked"),
            None => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Echoes every byte; optionally sets a deadline after each call and says "timeout" when it
/// fires.
struct Echo {
    log: Arc<Log>,
    deadline: Option<Duration>,
    refusal: &'static [u8],
}

impl Handler for Echo {
    type Conn = ();

    fn on_open(&mut self, _opened: Opened, _io: &mut Io<'_>) -> ((), Next) {
        self.log.opens.fetch_add(1, Ordering::SeqCst);
        ((), Next::Read)
    }

    fn on_ready(&mut self, _conn: &mut (), io: &mut Io<'_>) -> Next {
        if io.output().pending() >= HIGH_WATER {
            return Next::Drain;
        }
        let take = io.input().len().min(HIGH_WATER as usize);
        let parts = io.parts();
        parts.output.write_with(parts.pool, |out| {
            out.extend_from_slice(&parts.input.data()[..take])
        });
        parts.input.consume(take);
        if let Some(wait) = self.deadline {
            io.set_deadline(Some(io.now() + wait));
        }
        if !io.input().is_empty() || io.output().pending() >= HIGH_WATER {
            return Next::Drain;
        }
        if io.eof() {
            Next::Close
        } else {
            Next::Read
        }
    }

    fn on_timeout(&mut self, _conn: &mut (), io: &mut Io<'_>) -> Next {
        io.write(b"timeout\n");
        Next::Close
    }

    fn on_close(&mut self, _conn: (), reason: CloseReason, _worker: &mut Worker<'_>) {
        self.log.closes.lock().unwrap().push(reason);
    }

    fn on_stop(&mut self) {
        self.log.stops.fetch_add(1, Ordering::SeqCst);
    }

    fn refusal(&self, _listener: usize) -> &[u8] {
        self.refusal
    }
}

fn echo(log: Arc<Log>) -> Echo {
    Echo {
        log,
        deadline: None,
        refusal: b"",
    }
}

/// A line protocol:
/// - `file OFF LEN` answers `LEN\n`, LEN bytes of the file from OFF, then `end\n`;
/// - `big N` answers N bytes of a pattern (inline);
/// - `bye` closes gracefully after what is queued; `abort` closes at once.
struct Lines {
    log: Arc<Log>,
    file: Arc<File>,
}

impl Handler for Lines {
    type Conn = ();

    fn on_open(&mut self, _opened: Opened, _io: &mut Io<'_>) -> ((), Next) {
        self.log.opens.fetch_add(1, Ordering::SeqCst);
        ((), Next::Read)
    }

    fn on_ready(&mut self, _conn: &mut (), io: &mut Io<'_>) -> Next {
        loop {
            if io.output().pending() >= HIGH_WATER {
                return Next::Drain;
            }
            let Some(end) = io.input().data().iter().position(|&b| b == b'\n') else {
                return if io.eof() { Next::Close } else { Next::Read };
            };
            let line = String::from_utf8_lossy(&io.input().data()[..end]).into_owned();
            io.input_mut().consume(end + 1);
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["file", offset, len] => {
                    let (offset, len): (u64, u64) = (offset.parse().unwrap(), len.parse().unwrap());
                    io.write(format!("{len}\n").as_bytes());
                    io.output_mut().push_file(self.file.clone(), offset, len);
                    io.write(b"end\n");
                }
                ["big", n] => {
                    let n: usize = n.parse().unwrap();
                    io.write_with(|out| out.extend((0..n).map(pattern)));
                }
                ["bye"] => return Next::Close,
                ["linger"] => return Next::Linger,
                ["abort"] => return Next::Abort,
                _ => return Next::Abort,
            }
        }
    }

    fn on_timeout(&mut self, _conn: &mut (), _io: &mut Io<'_>) -> Next {
        Next::Close
    }

    fn on_close(&mut self, _conn: (), reason: CloseReason, _worker: &mut Worker<'_>) {
        self.log.closes.lock().unwrap().push(reason);
    }

    fn on_stop(&mut self) {
        self.log.stops.fetch_add(1, Ordering::SeqCst);
    }
}

fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

/// A temporary file of `len` pattern bytes.
fn data_file(len: usize) -> Arc<File> {
    let file = tempfile::tempfile().unwrap();
    let bytes: Vec<u8> = (0..len).map(|i| pattern(i * 7)).collect();
    file.write_all_at(&bytes, 0).unwrap();
    Arc::new(file)
}

fn lines_server(model: Model, config: DriverConfig, file: Arc<File>) -> Server {
    Server::start(model, config, move |_, log| Lines {
        log,
        file: file.clone(),
    })
}

/// Reads one `file` answer and checks it against the file.
fn read_file_answer(reader: &mut impl BufRead, file: &File, offset: u64, len: u64) {
    let mut head = String::new();
    reader.read_line(&mut head).unwrap();
    assert_eq!(head, format!("{len}\n"));
    let mut got = vec![0u8; len as usize];
    reader.read_exact(&mut got).unwrap();
    let mut want = vec![0u8; len as usize];
    file.read_exact_at(&mut want, offset).unwrap();
    assert!(got == want, "file bytes differ");
    let mut end = String::new();
    reader.read_line(&mut end).unwrap();
    assert_eq!(end, "end\n");
}

/// Reads until the peer closes; true for an orderly end (FIN), false for a reset.
fn read_to_end(stream: &mut impl Read) -> (Vec<u8>, bool) {
    let mut all = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return (all, true),
            Ok(n) => all.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return (all, false),
            // Retried, as std's read_to_end does.
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => panic!("read failed: {e}"),
        }
    }
}

/// Speaks first: greets each connection at open with the listener it came on, gives a silent
/// client `silence` before saying "bye" and closing, and answers each line with "ok".
struct Greeter {
    log: Arc<Log>,
    silence: Duration,
}

impl Handler for Greeter {
    type Conn = ();

    fn on_open(&mut self, opened: Opened, io: &mut Io<'_>) -> ((), Next) {
        self.log.opens.fetch_add(1, Ordering::SeqCst);
        io.write(
            format!(
                "hello from listener {}\n",
                opened.listener().unwrap_or(usize::MAX)
            )
            .as_bytes(),
        );
        io.set_deadline(Some(io.now() + self.silence));
        ((), Next::Read)
    }

    fn on_ready(&mut self, _conn: &mut (), io: &mut Io<'_>) -> Next {
        while let Some(end) = io.input().data().iter().position(|&b| b == b'\n') {
            io.input_mut().consume(end + 1);
            io.write(b"ok\n");
        }
        io.set_deadline(Some(io.now() + self.silence));
        if io.eof() {
            Next::Close
        } else {
            Next::Read
        }
    }

    fn on_timeout(&mut self, _conn: &mut (), io: &mut Io<'_>) -> Next {
        io.write(b"bye\n");
        Next::Close
    }

    fn on_close(&mut self, _conn: (), reason: CloseReason, _worker: &mut Worker<'_>) {
        self.log.closes.lock().unwrap().push(reason);
    }
}

fn greeter_server(model: Model, silence: Duration) -> Server {
    Server::start_with(
        model,
        DriverConfig::default(),
        ListenOptions::server_speaks_first(),
        move |_, log| Greeter { log, silence },
    )
}

for_each_model!(a_handler_greets_at_open, |model| {
    let server = greeter_server(model, Duration::from_secs(5));
    let conn = server.connect();
    let started = Instant::now();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "hello from listener 0\n");
    // Without TCP_DEFER_ACCEPT the greeting does not wait for the client to speak.
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "greeting took {:?}",
        started.elapsed()
    );
    (&conn).write_all(b"one\ntwo\n").unwrap();
    line.clear();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "ok\n");
    line.clear();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "ok\n");
    conn.shutdown(Shutdown::Write).unwrap();
    let (rest, clean) = read_to_end(&mut reader);
    assert!(rest.is_empty() && clean);
    assert_eq!(server.log.wait_closes(1), vec![CloseReason::Done]);
});

for_each_model!(
    a_silent_connection_meets_the_deadline_set_at_open,
    |model| {
        // The client never sends a byte: only the deadline armed in on_open can end it.
        let silence = Duration::from_millis(400);
        let server = greeter_server(model, silence);
        let mut conn = server.connect();
        let started = Instant::now();
        let (got, clean) = read_to_end(&mut conn);
        let took = started.elapsed();
        assert_eq!(
            String::from_utf8_lossy(&got),
            "hello from listener 0\nbye\n"
        );
        assert!(clean, "connection was reset");
        assert!(
            took >= silence,
            "closed after {took:?}, before the deadline"
        );
        assert!(
            took < silence + Duration::from_secs(2),
            "closed only after {took:?}"
        );
        assert_eq!(server.log.wait_closes(1), vec![CloseReason::Done]);
    }
);

/// Ticks on its own short timer: at each deadline writes a byte and arms the next one, and
/// closes after `ticks` of them.
struct Ticker {
    log: Arc<Log>,
    every: Duration,
    ticks: usize,
}

impl Handler for Ticker {
    type Conn = usize;

    fn on_open(&mut self, _opened: Opened, io: &mut Io<'_>) -> (usize, Next) {
        io.set_deadline(Some(io.now() + self.every));
        (0, Next::Read)
    }

    fn on_ready(&mut self, _fired: &mut usize, io: &mut Io<'_>) -> Next {
        if io.eof() {
            Next::Close
        } else {
            Next::Read
        }
    }

    fn on_timeout(&mut self, fired: &mut usize, io: &mut Io<'_>) -> Next {
        *fired += 1;
        io.write(b".");
        if *fired == self.ticks {
            return Next::Close;
        }
        io.set_deadline(Some(io.now() + self.every));
        Next::Read
    }

    fn on_close(&mut self, _fired: usize, reason: CloseReason, _worker: &mut Worker<'_>) {
        self.log.closes.lock().unwrap().push(reason);
    }
}

for_each_model!(deadlines_shorter_than_a_tick_fire_on_time, |model| {
    // Ten timers of 20 ms in a row: if they waited for the 100 ms sweep they would take a
    // second at least; on time they take about 200 ms.
    let server = Server::start_with(
        model,
        DriverConfig::default(),
        ListenOptions::server_speaks_first(),
        |_, log| Ticker {
            log,
            every: Duration::from_millis(20),
            ticks: 10,
        },
    );
    let mut conn = server.connect();
    let started = Instant::now();
    let (got, clean) = read_to_end(&mut conn);
    let took = started.elapsed();
    assert_eq!(got, b"..........");
    assert!(clean, "connection was reset");
    assert!(
        took >= Duration::from_millis(200),
        "ten 20 ms timers took {took:?}"
    );
    assert!(
        took < Duration::from_millis(700),
        "ten 20 ms timers took {took:?}: they waited for the sweep"
    );
});

for_each_model!(echo_round_trips, |model| {
    let server = Server::start(model, DriverConfig::default(), |_, log| echo(log));
    let mut conn = server.connect();
    for i in 0..200 {
        let message = format!("message {i}\n");
        conn.write_all(message.as_bytes()).unwrap();
        let mut got = vec![0u8; message.len()];
        conn.read_exact(&mut got).unwrap();
        assert_eq!(got, message.as_bytes());
    }
    conn.shutdown(Shutdown::Write).unwrap();
    let (rest, clean) = read_to_end(&mut conn);
    assert!(rest.is_empty() && clean);
    assert_eq!(server.log.wait_closes(1), vec![CloseReason::Done]);
});

for_each_model!(pipelined_echo_with_backpressure, |model| {
    // The client writes far more than the socket buffers hold before it reads anything, so
    // the handler drains, and input must be held back rather than lost or piled up.
    let server = Server::start(model, DriverConfig::default(), |_, log| echo(log));
    let conn = server.connect();
    let total = 8 << 20;
    let mut writer = conn.try_clone().unwrap();
    let sender = thread::spawn(move || {
        let data: Vec<u8> = (0..total).map(pattern).collect();
        for chunk in data.chunks(100_000) {
            writer.write_all(chunk).unwrap();
        }
        writer.shutdown(Shutdown::Write).unwrap();
    });
    thread::sleep(Duration::from_millis(300));
    let mut reader = conn;
    let (got, clean) = read_to_end(&mut reader);
    sender.join().unwrap();
    assert!(clean, "connection was reset");
    assert_eq!(got.len(), total);
    assert!(got.iter().enumerate().all(|(i, &b)| b == pattern(i)));
});

for_each_model!(pipelined_requests, |model| {
    let file = data_file(10_000);
    let server = lines_server(model, DriverConfig::default(), file.clone());
    let mut conn = server.connect();
    conn.write_all(b"file 0 100\nbig 10\nfile 5000 3000\nfile 9999 1\nbye\n")
        .unwrap();
    let mut reader = BufReader::new(conn);
    read_file_answer(&mut reader, &file, 0, 100);
    let mut big = [0u8; 10];
    reader.read_exact(&mut big).unwrap();
    assert_eq!(big.to_vec(), (0..10).map(pattern).collect::<Vec<u8>>());
    read_file_answer(&mut reader, &file, 5000, 3000);
    read_file_answer(&mut reader, &file, 9999, 1);
    let (rest, clean) = read_to_end(&mut reader);
    assert!(rest.is_empty() && clean);
});

for_each_model!(file_range_of_5_mib, |model| {
    let file = data_file(6 << 20);
    let server = lines_server(model, DriverConfig::default(), file.clone());
    let mut conn = server.connect();
    conn.write_all(b"file 12345 5242880\nfile 1 2\n").unwrap();
    let mut reader = BufReader::new(conn);
    // Read slowly at first so the socket fills and the send has to wait for room.
    thread::sleep(Duration::from_millis(200));
    read_file_answer(&mut reader, &file, 12345, 5 << 20);
    read_file_answer(&mut reader, &file, 1, 2);
});

for_each_model!(quiet_close_ends_the_connection_at_once, |model| {
    // Nothing unread and no Linger: the connection ends right after the output, with no
    // wait for the linger time.
    let config = DriverConfig {
        linger_timeout: Duration::from_secs(30),
        ..DriverConfig::default()
    };
    let server = lines_server(model, config, data_file(10));
    let mut conn = server.connect();
    let start = std::time::Instant::now();
    conn.write_all(b"big 1000\nbye\n").unwrap();
    let (got, clean) = read_to_end(&mut conn);
    assert!(clean, "connection was reset");
    assert_eq!(got.len(), 1000);
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(server.log.wait_closes(1), vec![CloseReason::Done]);
});

for_each_model!(close_delivers_all_output_then_eof, |model| {
    let server = lines_server(model, DriverConfig::default(), data_file(10));
    let mut conn = server.connect();
    conn.write_all(b"big 3000000\nlinger\n").unwrap();
    thread::sleep(Duration::from_millis(100));
    // Input after the close is discarded, not answered with a reset.
    conn.write_all(b"late input\n").unwrap();
    let (got, clean) = read_to_end(&mut conn);
    assert!(clean, "connection was reset");
    assert_eq!(got.len(), 3_000_000);
    assert!(got.iter().enumerate().all(|(i, &b)| b == pattern(i)));
    drop(conn);
    assert_eq!(server.log.wait_closes(1), vec![CloseReason::Done]);
});

for_each_model!(abort_closes_at_once, |model| {
    let server = lines_server(model, DriverConfig::default(), data_file(10));
    let mut conn = server.connect();
    conn.write_all(b"abort\n").unwrap();
    let (got, _) = read_to_end(&mut conn);
    assert!(got.is_empty());
    assert_eq!(server.log.wait_closes(1), vec![CloseReason::Done]);
});

for_each_model!(peer_eof_reaches_the_handler, |model| {
    let server = Server::start(model, DriverConfig::default(), |_, log| echo(log));
    let mut conn = server.connect();
    conn.write_all(b"last words").unwrap();
    conn.shutdown(Shutdown::Write).unwrap();
    let (got, clean) = read_to_end(&mut conn);
    assert_eq!(got, b"last words");
    assert!(clean);
});

for_each_model!(a_shrunk_file_closes_the_connection, |model| {
    let file = data_file(1000);
    let server = lines_server(model, DriverConfig::default(), file);
    let mut conn = server.connect();
    conn.write_all(b"file 0 5000\n").unwrap();
    let (got, _) = read_to_end(&mut conn);
    assert_eq!(&got[..5], b"5000\n");
    assert_eq!(got.len(), 5 + 1000, "the file's bytes, then the end");
    assert_eq!(server.log.wait_closes(1), vec![CloseReason::FileShrunk]);
});

for_each_model!(max_connections_refuses_the_next, |model| {
    let config = DriverConfig {
        max_connections: 1,
        ..DriverConfig::default()
    };
    let server = Server::start(model, config, |_, log| Echo {
        refusal: b"busy\n",
        ..echo(log)
    });
    let mut first = server.connect();
    first.write_all(b"hello").unwrap();
    let mut got = [0u8; 5];
    first.read_exact(&mut got).unwrap();
    let mut second = server.connect();
    second.write_all(b"hello").unwrap();
    let (refused, clean) = read_to_end(&mut second);
    assert_eq!(refused, b"busy\n");
    assert!(clean);
    drop(first);
    server.log.wait_closes(1);
    // The slot is free again.
    let mut third = server.connect();
    third.write_all(b"again").unwrap();
    let mut got = [0u8; 5];
    third.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"again");
    assert_eq!(server.log.opens.load(Ordering::SeqCst), 2);
});

for_each_model!(a_deadline_calls_on_timeout, |model| {
    let server = Server::start(model, DriverConfig::default(), |_, log| Echo {
        deadline: Some(Duration::from_millis(300)),
        ..echo(log)
    });
    let mut conn = server.connect();
    let started = Instant::now();
    conn.write_all(b"hi\n").unwrap();
    let (got, clean) = read_to_end(&mut conn);
    assert_eq!(got, b"hi\ntimeout\n");
    assert!(clean);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
});

for_each_model!(a_peer_that_reads_nothing_times_out, |model| {
    let config = DriverConfig {
        send_timeout: Duration::from_millis(300),
        ..DriverConfig::default()
    };
    let server = lines_server(model, config, data_file(10));
    let mut conn = server.connect();
    conn.write_all(b"big 50000000\n").unwrap();
    let closes = server.log.wait_closes(1);
    assert_eq!(closes, vec![CloseReason::SendTimeout]);
});

for_each_model!(many_connections_at_once, |model| {
    let server = Server::start(model, DriverConfig::default(), |_, log| echo(log));
    let clients: Vec<_> = (0..8)
        .map(|t| {
            let addr = server.addr;
            thread::spawn(move || {
                for i in 0..40 {
                    let mut conn = TcpStream::connect(addr).unwrap();
                    conn.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
                    let message = format!("client {t} connection {i}");
                    conn.write_all(message.as_bytes()).unwrap();
                    let mut got = vec![0u8; message.len()];
                    conn.read_exact(&mut got).unwrap();
                    assert_eq!(got, message.as_bytes());
                    if i % 2 == 0 {
                        conn.shutdown(Shutdown::Write).unwrap();
                        let (rest, _) = read_to_end(&mut conn);
                        assert!(rest.is_empty());
                    }
                }
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }
    assert_eq!(server.log.wait_closes(320).len(), 320);
});

for_each_model!(stop_ends_run_and_closes_everything, |model| {
    let file = data_file(4 << 20);
    let mut server = lines_server(model, DriverConfig::default(), file);
    let mut conns: Vec<TcpStream> = (0..3).map(|_| server.connect()).collect();
    for conn in &mut conns {
        conn.write_all(b"big 3\n").unwrap();
        let mut got = [0u8; 3];
        conn.read_exact(&mut got).unwrap();
    }
    // One more in the middle of a large send that its client does not read.
    let mut stuck = server.connect();
    stuck.write_all(b"file 0 4194304\n").unwrap();
    thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    server.stop().unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    for conn in &mut conns {
        let (rest, _) = read_to_end(conn);
        assert!(rest.is_empty());
    }
    let (_, _) = read_to_end(&mut stuck);
    let closes = server.log.closes();
    assert_eq!(closes.len(), 4);
    assert!(closes.iter().all(|&r| r == CloseReason::Shutdown));
    assert_eq!(
        server.log.stops.load(Ordering::SeqCst),
        handler_count(model)
    );
});

// ---------------------------------------------------------------------------
// Linked connections: outgoing connections that serve the connection that opened them.

use fastpath_drivers::{ConnRef, PoolKey, Spliced, UpstreamAddr};

/// A line server behind: answers each line upper-cased, counts connections.
struct UpperServer {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
}

fn upper_server() -> UpperServer {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            counter.fetch_add(1, Ordering::SeqCst);
            thread::spawn(move || {
                let mut writer = stream.try_clone().unwrap();
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { return };
                    if writer
                        .write_all(format!("{}\n", line.to_uppercase()).as_bytes())
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    UpperServer { addr, accepted }
}

/// Relays each client line to a backend over a linked connection and its answer back; with
/// `pool`, the backend connection is released for reuse after every answer. A line of
/// several words goes to as many backend connections at once, and their answers come back
/// in order, joined by spaces.
struct LinkedRelay {
    upstream: UpstreamAddr,
    pool: Option<PoolKey>,
    log: Arc<Log>,
}

#[derive(Default)]
struct LinkedRelayConn {
    /// The backend connections of the line in flight, one per word, in order.
    backends: Vec<ConnRef>,
    /// The answers received so far.
    answers: Vec<String>,
}

impl LinkedRelay {
    /// Collects what the backends answered; true once every one has.
    fn collect(&self, conn: &mut LinkedRelayConn, io: &mut Io<'_>) -> bool {
        while let Some(&backend) = conn.backends.get(conn.answers.len()) {
            let answer = match io.linked(backend) {
                Err(reason) => format!("failed:{reason:?}"),
                Ok(linked) => {
                    let data = linked.input.data();
                    if let Some(end) = data.iter().position(|&b| b == b'\n') {
                        let answer = String::from_utf8_lossy(&data[..end]).into_owned();
                        linked.input.consume(end + 1);
                        answer
                    } else if linked.eof() {
                        "ended".to_owned()
                    } else {
                        return false;
                    }
                }
            };
            conn.answers.push(answer);
        }
        for backend in conn.backends.drain(..) {
            io.release(backend, true);
        }
        let line = conn.answers.join(" ");
        conn.answers.clear();
        io.write(format!("{line}\n").as_bytes());
        true
    }
}

impl Handler for LinkedRelay {
    type Conn = LinkedRelayConn;

    fn on_open(&mut self, opened: Opened, io: &mut Io<'_>) -> (LinkedRelayConn, Next) {
        if let fastpath_drivers::Origin::Linked { .. } = opened.origin() {
            self.log.opens.fetch_add(1, Ordering::SeqCst);
        }
        io.set_deadline(Some(io.now() + IO_TIMEOUT));
        (LinkedRelayConn::default(), Next::Read)
    }

    fn on_ready(&mut self, conn: &mut LinkedRelayConn, io: &mut Io<'_>) -> Next {
        loop {
            if !conn.backends.is_empty() && !self.collect(conn, io) {
                return Next::Read;
            }
            let Some(end) = io.input().data().iter().position(|&b| b == b'\n') else {
                return if io.eof() { Next::Close } else { Next::Read };
            };
            let line = String::from_utf8_lossy(&io.input().data()[..end]).into_owned();
            io.input_mut().consume(end + 1);
            for word in line.split(' ') {
                match io.connect_linked(self.upstream.clone(), self.pool) {
                    Ok(backend) => {
                        let mut linked = io.linked(backend).expect("just opened");
                        linked.write(format!("{word}\n").as_bytes());
                        conn.backends.push(backend);
                    }
                    Err(e) => io.write(format!("cannot connect: {:?}\n", e.kind()).as_bytes()),
                }
            }
        }
    }

    fn on_timeout(&mut self, _conn: &mut LinkedRelayConn, _io: &mut Io<'_>) -> Next {
        Next::Close
    }

    fn on_close(&mut self, _conn: LinkedRelayConn, reason: CloseReason, _worker: &mut Worker<'_>) {
        self.log.closes.lock().unwrap().push(reason);
    }
}

fn linked_relay_server(model: Model, upstream: UpstreamAddr, pooled: bool) -> Server {
    let pool = pooled.then_some(PoolKey {
        key: 1,
        idle: Duration::from_secs(4),
    });
    Server::start(model, DriverConfig::default(), move |_, log| LinkedRelay {
        upstream: upstream.clone(),
        pool,
        log,
    })
}

/// Sends `line` and returns the answer line, without its newline.
fn ask(conn: &mut TcpStream, reader: &mut BufReader<TcpStream>, line: &str) -> String {
    conn.write_all(format!("{line}\n").as_bytes()).unwrap();
    let mut answer = String::new();
    reader.read_line(&mut answer).unwrap();
    answer.trim_end_matches('\n').to_owned()
}

for_each_model!(linked_round_trips_reuse_one_backend_connection, |model| {
    let upper = upper_server();
    let server = linked_relay_server(model, UpstreamAddr::Tcp(upper.addr), true);
    let mut conn = server.connect();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    for word in ["one", "two", "three", "four"] {
        assert_eq!(ask(&mut conn, &mut reader, word), word.to_uppercase());
    }
    // Released after each answer and taken again from the worker's idle connections.
    assert_eq!(upper.accepted.load(Ordering::SeqCst), 1);
    assert_eq!(server.log.opens.load(Ordering::SeqCst), 1);
});

for_each_model!(
    a_connection_holds_many_linked_connections_at_once,
    |model| {
        let upper = upper_server();
        let server = linked_relay_server(model, UpstreamAddr::Tcp(upper.addr), false);
        let mut conn = server.connect();
        let mut reader = BufReader::new(conn.try_clone().unwrap());
        let words: Vec<String> = (0..12).map(|i| format!("word{i}")).collect();
        let line = words.join(" ");
        assert_eq!(ask(&mut conn, &mut reader, &line), line.to_uppercase());
        assert_eq!(ask(&mut conn, &mut reader, &line), line.to_uppercase());
        // Not pooled: every word had a connection of its own, each closed once answered.
        assert_eq!(upper.accepted.load(Ordering::SeqCst), 24);
        let closes = server.log.wait_closes(24);
        assert!(closes.iter().all(|&r| r == CloseReason::Done), "{closes:?}");
    }
);

for_each_model!(
    a_refused_linked_connection_is_reported_to_its_owner,
    |model| {
        // A port nobody listens on: bind, note the port, close.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let server = linked_relay_server(model, UpstreamAddr::Tcp(closed), true);
        let mut conn = server.connect();
        let mut reader = BufReader::new(conn.try_clone().unwrap());
        assert_eq!(ask(&mut conn, &mut reader, "hello"), "failed:ConnectFailed");
        // The owner goes on: the next line tries again.
        assert_eq!(ask(&mut conn, &mut reader, "again"), "failed:ConnectFailed");
        assert_eq!(
            server.log.wait_closes(2),
            [CloseReason::ConnectFailed, CloseReason::ConnectFailed]
        );
    }
);

for_each_model!(
    an_idle_linked_connection_its_peer_closed_is_not_reused,
    |model| {
        // A backend that answers one line per connection, then closes it.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                counter.fetch_add(1, Ordering::SeqCst);
                let mut writer = stream.try_clone().unwrap();
                let mut line = String::new();
                if BufReader::new(stream).read_line(&mut line).is_ok() {
                    let _ = writer.write_all(line.to_uppercase().as_bytes());
                }
            }
        });
        let server = linked_relay_server(model, UpstreamAddr::Tcp(addr), true);
        let mut conn = server.connect();
        let mut reader = BufReader::new(conn.try_clone().unwrap());
        for word in ["first", "second", "third"] {
            assert_eq!(ask(&mut conn, &mut reader, word), word.to_uppercase());
            // The backend's end reaches the idle connection, which is closed, not lent again.
            let until = Instant::now() + IO_TIMEOUT;
            while server.log.closes().len() < accepted.load(Ordering::SeqCst)
                && Instant::now() < until
            {
                thread::sleep(Duration::from_millis(5));
            }
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
    }
);

for_each_model!(linked_connections_close_with_their_owner, |model| {
    // A backend that never answers, and says when its connection ends.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (ended_tx, ended) = std::sync::mpsc::channel();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let ended_tx = ended_tx.clone();
            thread::spawn(move || {
                let mut sink = Vec::new();
                let _ = stream.read_to_end(&mut sink);
                let _ = ended_tx.send(sink);
            });
        }
    });
    let server = linked_relay_server(model, UpstreamAddr::Tcp(addr), true);
    let mut conn = server.connect();
    conn.write_all(b"a b c\n").unwrap();
    thread::sleep(Duration::from_millis(100));
    drop(conn);
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(
            ended
                .recv_timeout(IO_TIMEOUT)
                .expect("the backend connection ended"),
        );
    }
    seen.sort();
    assert_eq!(seen, [b"a\n".to_vec(), b"b\n".to_vec(), b"c\n".to_vec()]);
});

#[test]
fn a_linked_connection_over_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("upper.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let mut writer = stream.try_clone().unwrap();
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                let _ = writer.write_all(format!("{}\n", line.to_uppercase()).as_bytes());
            }
        }
    });
    let server = linked_relay_server(Model::Epoll, UpstreamAddr::Unix(path), true);
    let mut conn = server.connect();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    assert_eq!(ask(&mut conn, &mut reader, "unix"), "UNIX");
}

// ---------------------------------------------------------------------------
// The thread pool's own promises.

/// Counts handler calls running at once across all pool threads, keeping the highest count,
/// and which pool thread served each connection.
#[derive(Default)]
struct Concurrency {
    running: AtomicUsize,
    most: AtomicUsize,
    served_by: Mutex<Vec<usize>>,
}

/// Answers each line after computing for a while, so that calls overlap when they can.
struct Busy {
    worker: usize,
    shared: Arc<Concurrency>,
    log: Arc<Log>,
}

impl Handler for Busy {
    type Conn = ();

    fn on_open(&mut self, _opened: Opened, _io: &mut Io<'_>) -> ((), Next) {
        self.shared.served_by.lock().unwrap().push(self.worker);
        self.log.opens.fetch_add(1, Ordering::SeqCst);
        ((), Next::Read)
    }

    fn on_ready(&mut self, _conn: &mut (), io: &mut Io<'_>) -> Next {
        let now_running = self.shared.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.shared.most.fetch_max(now_running, Ordering::SeqCst);
        // Compute rather than sleep: a sleeping handler still holds its turn, and spinning
        // makes the overlap visible on few cores too.
        let until = Instant::now() + Duration::from_millis(30);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        self.shared.running.fetch_sub(1, Ordering::SeqCst);
        let data = io.input().data().to_vec();
        io.input_mut().consume(data.len());
        io.write(&data);
        if io.eof() {
            Next::Close
        } else {
            Next::Read
        }
    }

    fn on_timeout(&mut self, _conn: &mut (), _io: &mut Io<'_>) -> Next {
        Next::Close
    }

    fn on_close(&mut self, _conn: (), reason: CloseReason, _worker: &mut Worker<'_>) {
        self.log.closes.lock().unwrap().push(reason);
    }
}

fn busy_server(threads: ThreadsConfig) -> (Server, Arc<Concurrency>) {
    let shared = Arc::new(Concurrency::default());
    let handler_shared = shared.clone();
    let server = Server::start(
        Model::Threads(threads),
        DriverConfig::default(),
        move |worker, log| Busy {
            worker,
            shared: handler_shared.clone(),
            log,
        },
    );
    (server, shared)
}

#[test]
fn the_pool_never_runs_more_threads_than_its_bound() {
    let (server, shared) = busy_server(ThreadsConfig {
        threads: 8,
        max_active: 2,
        ..TEST_THREADS
    });
    let clients: Vec<_> = (0..8)
        .map(|i| {
            let mut conn = server.connect();
            thread::spawn(move || {
                for round in 0..5 {
                    let message = format!("client {i} round {round}\n");
                    conn.write_all(message.as_bytes()).unwrap();
                    let mut got = vec![0u8; message.len()];
                    conn.read_exact(&mut got).unwrap();
                    assert_eq!(got, message.as_bytes());
                }
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }
    // All eight connections were open at once, each on a thread of its own ...
    let mut threads = shared.served_by.lock().unwrap().clone();
    threads.sort_unstable();
    threads.dedup();
    assert_eq!(threads.len(), 8);
    // ... yet never more than two ran at a time, and two did.
    assert_eq!(shared.most.load(Ordering::SeqCst), 2);
}

#[test]
fn the_pool_wakes_the_thread_that_went_idle_last() {
    let (server, shared) = busy_server(TEST_THREADS);
    for i in 0..6 {
        let mut conn = server.connect();
        conn.write_all(b"hello\n").unwrap();
        let mut got = [0u8; 6];
        conn.read_exact(&mut got).unwrap();
        drop(conn);
        server.log.wait_closes(i + 1);
        // Let the thread get back onto the idle stack.
        thread::sleep(Duration::from_millis(50));
    }
    let served_by = shared.served_by.lock().unwrap().clone();
    assert_eq!(served_by.len(), 6);
    // Last in, first out: the same warm thread serves every connection in turn.
    assert!(
        served_by.iter().all(|&t| t == served_by[0]),
        "served by {served_by:?}"
    );
}

#[test]
fn clients_beyond_the_pool_wait_for_a_thread() {
    let (server, _shared) = busy_server(ThreadsConfig {
        threads: 2,
        max_active: 2,
        ..TEST_THREADS
    });
    let mut first = server.connect();
    let mut second = server.connect();
    for conn in [&mut first, &mut second] {
        conn.write_all(b"held\n").unwrap();
        let mut got = [0u8; 5];
        conn.read_exact(&mut got).unwrap();
    }
    // Both threads hold a connection: a third client is not served ...
    let mut third = server.connect();
    third.write_all(b"third\n").unwrap();
    third
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut got = [0u8; 6];
    assert!(third.read_exact(&mut got).is_err());
    // ... until one of them is free.
    drop(first);
    third.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    third.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"third\n");
}

// ---------------------------------------------------------------------------
// Joined connections: a client and its linked connection spliced together in the kernel.

/// Opens a linked connection on the first input and joins the two once it is connected;
/// counts calls after the join.
struct Joiner {
    upstream: UpstreamAddr,
    idle: Duration,
    calls_after_join: Arc<AtomicUsize>,
    log: Arc<Log>,
}

#[derive(Default)]
struct JoinerConn {
    backend: Option<ConnRef>,
    joined: bool,
}

impl Handler for Joiner {
    type Conn = JoinerConn;

    fn on_open(&mut self, _opened: Opened, _io: &mut Io<'_>) -> (JoinerConn, Next) {
        (JoinerConn::default(), Next::Read)
    }

    fn on_ready(&mut self, conn: &mut JoinerConn, io: &mut Io<'_>) -> Next {
        if conn.joined {
            self.calls_after_join.fetch_add(1, Ordering::SeqCst);
            return Next::Read;
        }
        let Some(backend) = conn.backend else {
            if io.input().is_empty() {
                return Next::Read;
            }
            match io.connect_linked(self.upstream.clone(), None) {
                Ok(backend) => conn.backend = Some(backend),
                Err(_) => return Next::Abort,
            }
            // Woken again once the linked connection is open.
            return Next::Wait;
        };
        match io.linked(backend) {
            Err(_) => Next::Abort,
            Ok(linked) if linked.is_new() => Next::Wait,
            Ok(_) => {
                // Everything the client sent so far is still unconsumed: the join passes
                // it on.
                io.join(backend, self.idle);
                conn.joined = true;
                Next::Read
            }
        }
    }

    fn on_timeout(&mut self, _conn: &mut JoinerConn, _io: &mut Io<'_>) -> Next {
        Next::Close
    }

    fn on_close(&mut self, _conn: JoinerConn, reason: CloseReason, _worker: &mut Worker<'_>) {
        self.log.closes.lock().unwrap().push(reason);
    }
}

fn joiner_server(
    model: Model,
    upstream: UpstreamAddr,
    idle: Duration,
) -> (Server, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let handler_calls = calls.clone();
    let server = Server::start(model, DriverConfig::default(), move |_, log| Joiner {
        upstream: upstream.clone(),
        idle,
        calls_after_join: handler_calls.clone(),
        log,
    });
    (server, calls)
}

for_each_joining_model!(
    a_joined_connection_carries_both_directions_to_the_end,
    |model| {
        let upper = upper_server();
        let (server, calls) = joiner_server(model, UpstreamAddr::Tcp(upper.addr), IO_TIMEOUT);
        let conn = server.connect();
        let mut writer = conn.try_clone().unwrap();
        // Sent before the join: passed on by it.
        writer.write_all(b"first line\n").unwrap();
        let mut reader = BufReader::new(conn);
        let mut answer = String::new();
        reader.read_line(&mut answer).unwrap();
        assert_eq!(answer, "FIRST LINE\n");
        // Megabytes each way, written while the answers are read.
        let lines = 40_000;
        let sender = thread::spawn(move || {
            for i in 0..lines {
                writer
                    .write_all(format!("line {i} of a joined connection\n").as_bytes())
                    .unwrap();
            }
            writer.shutdown(Shutdown::Write).unwrap();
        });
        for i in 0..lines {
            answer.clear();
            reader.read_line(&mut answer).unwrap();
            assert_eq!(answer, format!("LINE {i} OF A JOINED CONNECTION\n"));
        }
        sender.join().unwrap();
        // The client's end of stream reached the backend, whose end came back.
        answer.clear();
        assert_eq!(reader.read_line(&mut answer).unwrap(), 0);
        // The client and its linked connection.
        assert_eq!(
            server.log.wait_closes(2),
            vec![CloseReason::Done, CloseReason::Done]
        );
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "the handler saw joined bytes"
        );
    }
);

for_each_joining_model!(an_idle_joint_ends, |model| {
    let upper = upper_server();
    let (server, _) = joiner_server(
        model,
        UpstreamAddr::Tcp(upper.addr),
        Duration::from_millis(300),
    );
    let mut conn = server.connect();
    conn.write_all(b"ping\n").unwrap();
    let started = Instant::now();
    let (got, _) = read_to_end(&mut conn);
    assert_eq!(got, b"PING\n");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    assert_eq!(
        server.log.wait_closes(2),
        vec![CloseReason::Done, CloseReason::Done]
    );
});

for_each_joining_model!(a_joint_whose_backend_vanishes_closes_the_client, |model| {
    // A backend that answers one line and then resets the connection.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut writer = stream.try_clone().unwrap();
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).unwrap();
        writer.write_all(b"bye\n").unwrap();
        drop(writer);
    });
    let (server, _) = joiner_server(model, UpstreamAddr::Tcp(addr), IO_TIMEOUT);
    let mut conn = server.connect();
    conn.write_all(b"hello\n").unwrap();
    let started = Instant::now();
    let (got, _) = read_to_end(&mut conn);
    assert_eq!(got, b"bye\n");
    assert!(started.elapsed() < Duration::from_secs(3));
    server.log.wait_closes(1);
});

// ---------------------------------------------------------------------------
// Body splices: a counted stretch of one side's stream moved to the other in the kernel.

/// Serves `N\n` with N pattern bytes, and `up N\n` followed by N bytes with the count of
/// pattern bytes that were right.
fn bytes_server() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            thread::spawn(move || {
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 0 {
                    if let Some(n) = line.trim().strip_prefix("up ") {
                        let mut body = vec![0u8; n.parse().unwrap()];
                        reader.read_exact(&mut body).unwrap();
                        let right = body
                            .iter()
                            .enumerate()
                            .filter(|(i, b)| **b == pattern(*i))
                            .count();
                        writer.write_all(format!("{right}\n").as_bytes()).unwrap();
                    } else {
                        let n: usize = line.trim().parse().unwrap();
                        let body: Vec<u8> = (0..n).map(pattern).collect();
                        writer.write_all(&body).unwrap();
                    }
                    line.clear();
                }
            });
        }
    });
    addr
}

/// Relays one command line to the bytes server over a linked connection and splices the
/// counted bytes: a download's body to the client, an upload's body to the server.
struct Splicer {
    upstream: UpstreamAddr,
}

#[derive(Default)]
struct SplicerConn {
    /// The backend connection and the command's length and direction (`up`: an upload).
    command: Option<(ConnRef, u64, bool)>,
}

impl Handler for Splicer {
    type Conn = SplicerConn;

    fn on_open(&mut self, _opened: Opened, _io: &mut Io<'_>) -> (SplicerConn, Next) {
        (SplicerConn::default(), Next::Read)
    }

    fn on_ready(&mut self, conn: &mut SplicerConn, io: &mut Io<'_>) -> Next {
        let idle = Duration::from_secs(5);
        let Some((backend, n, up)) = conn.command else {
            let Some(end) = io.input().data().iter().position(|&b| b == b'\n') else {
                return Next::Read;
            };
            let line = io.input().data()[..=end].to_vec();
            io.input_mut().consume(end + 1);
            let text = String::from_utf8_lossy(&line).trim().to_string();
            let (n, up) = match text.strip_prefix("up ") {
                Some(n) => (n.parse().unwrap(), true),
                None => (text.parse().unwrap(), false),
            };
            let pool = PoolKey {
                key: 9,
                idle: Duration::from_secs(4),
            };
            let Ok(backend) = io.connect_linked(self.upstream.clone(), Some(pool)) else {
                return Next::Close;
            };
            let mut linked = io.linked(backend).expect("just opened");
            linked.write(&line);
            // A kept connection is not opened again: the next call comes once the command
            // has gone.
            linked.wake_when_sent();
            if up {
                // What already arrived goes through user space; the rest is spliced.
                let have = (linked.own_input.len() as u64).min(n);
                let data = linked.own_input.data()[..have as usize].to_vec();
                linked.own_input.consume(have as usize);
                linked.write(&data);
                // Spliced once the connection is open (the splice needs its socket).
                conn.command = Some((backend, n - have, true));
            } else {
                conn.command = Some((backend, n, false));
            }
            return Next::Wait;
        };
        let mut linked = match io.linked(backend) {
            Ok(linked) => linked,
            Err(reason) => {
                io.write(format!("backend gone: {reason:?}\n").as_bytes());
                return Next::Close;
            }
        };
        if linked.is_new() {
            return Next::Wait;
        }
        let spliced = if up {
            linked.spliced_out()
        } else {
            linked.spliced_in()
        };
        match spliced {
            Spliced::None if up => {
                linked.splice_out(n, idle);
                return Next::Wait;
            }
            Spliced::None => {
                // The answer may have begun to arrive already: that part goes through user
                // space, the rest is spliced.
                let have = (linked.input.len() as u64).min(n);
                let data = linked.input.data()[..have as usize].to_vec();
                linked.input.consume(have as usize);
                linked
                    .own_output
                    .write_with(linked.pool, |b| b.extend_from_slice(&data));
                if have < n {
                    linked.splice_in(n - have, idle);
                    return Next::Wait;
                }
                linked
                    .own_output
                    .write_with(linked.pool, |b| b.extend_from_slice(b"done\n"));
            }
            Spliced::Running => return Next::Wait,
            Spliced::Failed(kind) => {
                linked.own_output.write_with(linked.pool, |b| {
                    b.extend_from_slice(format!("failed {kind:?}\n").as_bytes())
                });
                return Next::Close;
            }
            Spliced::Done if up => {
                let Some(end) = linked.input.data().iter().position(|&b| b == b'\n') else {
                    return Next::Wait;
                };
                let answer = linked.input.data()[..=end].to_vec();
                linked.input.consume(end + 1);
                linked
                    .own_output
                    .write_with(linked.pool, |b| b.extend_from_slice(&answer));
            }
            Spliced::Done => linked
                .own_output
                .write_with(linked.pool, |b| b.extend_from_slice(b"done\n")),
        }
        io.release(backend, true);
        conn.command = None;
        // The next command may be here already.
        self.on_ready(conn, io)
    }

    fn on_timeout(&mut self, _conn: &mut SplicerConn, _io: &mut Io<'_>) -> Next {
        Next::Close
    }

    fn on_close(&mut self, _conn: SplicerConn, _reason: CloseReason, _worker: &mut Worker<'_>) {}
}

for_each_splicing_model!(body_splices_move_counted_bytes_both_ways, |model| {
    let upstream = UpstreamAddr::Tcp(bytes_server());
    let server = Server::start(model, DriverConfig::default(), move |_, _| Splicer {
        upstream: upstream.clone(),
    });
    let mut conn = server.connect();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    for n in [5usize << 20, 10, 300_000] {
        conn.write_all(format!("{n}\n").as_bytes()).unwrap();
        let mut body = vec![0u8; n];
        reader.read_exact(&mut body).unwrap();
        assert!(body.iter().enumerate().all(|(i, b)| *b == pattern(i)));
        let mut done = String::new();
        reader.read_line(&mut done).unwrap();
        assert_eq!(done, "done\n", "after {n} bytes");
    }
    for n in [3usize << 20, 1] {
        let body: Vec<u8> = (0..n).map(pattern).collect();
        conn.write_all(format!("up {n}\n").as_bytes()).unwrap();
        conn.write_all(&body).unwrap();
        let mut answer = String::new();
        reader.read_line(&mut answer).unwrap();
        assert_eq!(answer, format!("{n}\n"));
    }
});
