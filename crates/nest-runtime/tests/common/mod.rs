//! Shared by the runtime's integration tests: builds the example servers (hand-written to
//! the shape the compiler generates) and runs them as real processes on real sockets.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use fastpath_testkit::Listening;

/// Every model, as the `--model` option line names it.
pub const MODELS: [&str; 5] = [
    "processServer 3",
    "threadServer 8",
    "eventServer 2",
    "uringServer 2",
    "percoreServer",
];

/// Says visibly that a test did not run, and why: what is missing is installed by .ci/run,
/// so under CI a skip fails instead.
pub fn skip(test: &str, why: &str) {
    fastpath_testkit::skip(test, fastpath_testkit::Missing::Installable, why);
}

/// The example binary `name`, built once per test process with the cargo running the tests
/// (`cargo test` does not hand examples' paths to integration tests).
pub fn example(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        // For a test run with --release, the examples are built optimised too.
        let args = ["-p", "fastpath-nest-runtime", "--examples"];
        fastpath_testkit::build_beside_test(env!("CARGO"), env!("CARGO_MANIFEST_DIR"), &args)
            .join("examples")
    });
    dir.join(name)
}

/// A running example server; SIGTERM and wait on drop.
pub struct Server(Listening);

impl std::ops::Deref for Server {
    type Target = Listening;
    fn deref(&self) -> &Listening {
        &self.0
    }
}

impl Server {
    /// Starts example `name` with `args` in `dir`, and waits for its "listening on" line.
    pub fn start(name: &str, dir: &Path, args: &[&str]) -> Server {
        let child = Command::new(example(name))
            .args(args)
            .current_dir(dir)
            .env_remove("NEST_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the example");
        Server::adopt(child)
    }

    /// A started server (its standard error piped): waits for its "listening on" line.
    pub fn adopt(child: Child) -> Server {
        Server(Listening::adopt(child, Duration::from_secs(20)))
    }

    /// Waits until the log contains `text` (a line written as the connection closes may come
    /// a moment after the client saw the close).
    pub fn wait_log(&self, text: &str) -> String {
        self.0.wait_log(text, Duration::from_secs(5))
    }
}

/// Reads until `text` has arrived (or the peer closes, or 10 s pass); returns what arrived.
pub fn read_until(s: &mut TcpStream, text: &str) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let until = Instant::now() + Duration::from_secs(10);
    while !String::from_utf8_lossy(&got).contains(text) && Instant::now() < until {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("read: {e} (got {:?})", String::from_utf8_lossy(&got)),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Reads everything until the peer closes.
pub fn read_to_close(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    s.read_to_end(&mut got)
        .expect("the server closes the connection");
    String::from_utf8_lossy(&got).into_owned()
}

pub fn send(s: &mut TcpStream, data: &[u8]) {
    s.write_all(data).unwrap();
}

/// Reads one line, byte by byte, so that nothing after it is taken from the socket.
pub fn read_line_exact(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\n") {
        match s.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => got.push(byte[0]),
            Err(e) => panic!("read: {e} (got {:?})", String::from_utf8_lossy(&got)),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}
