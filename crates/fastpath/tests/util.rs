//! The test harness.
//!
//! Every test builds a [`Site`] (a temporary directory with a document root in
//! it), starts the real `fastpath` binary on it with `--listen 127.0.0.1:0`, and
//! talks to it over plain TCP with [`Conn`], which writes raw bytes and parses
//! the responses with the test kit's small HTTP/1.1 reader, so that a test sees
//! exactly what went over the wire. The server is killed when the [`Server`]
//! value is dropped; when the test fails, the command line, the files of the
//! site and everything the server printed are written to the test's output.

#![allow(dead_code)]

use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_fastpath");

/// How long a read or a write on a test connection may block before the
/// test fails: generous, since a server that answers at all answers in
/// microseconds here, and a hang must fail rather than stall the suite.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the server has to print its `listening on` line.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A concurrency model name, as given to `--model`.
pub type Model = &'static str;

// ---------------------------------------------------------------------------
// Sites

/// A temporary directory laid out as:
///
/// ```text
/// BASE/root/       the document root served by default
/// BASE/outside/    a directory outside the root, for escaping symlinks
/// BASE/*.toml      configuration files written by the test
/// ```
pub struct Site {
    tmp: tempfile::TempDir,
}

impl Default for Site {
    fn default() -> Self {
        Self::new()
    }
}

impl Site {
    pub fn new() -> Site {
        let tmp = tempfile::Builder::new()
            .prefix("fastpath-test-")
            .tempdir()
            .expect("create temporary directory");
        Site::made(tmp)
    }

    /// A site in memory (/dev/shm where there is one), for tests that rewrite files as fast
    /// as they can and time the server's answers: on a disk shared with other work, a file
    /// renamed over another is flushed by the file system (ext4) and an open in the same
    /// directory can wait seconds behind it, which is the disk's latency, not the server's.
    pub fn in_memory() -> Site {
        let shm = Path::new("/dev/shm");
        let mut builder = tempfile::Builder::new();
        builder.prefix("fastpath-test-");
        let tmp = if shm.is_dir() {
            builder.tempdir_in(shm)
        } else {
            builder.tempdir()
        };
        Site::made(tmp.expect("create temporary directory"))
    }

    fn made(tmp: tempfile::TempDir) -> Site {
        fs::create_dir(tmp.path().join("root")).unwrap();
        fs::create_dir(tmp.path().join("outside")).unwrap();
        Site { tmp }
    }

    /// The temporary directory that holds everything.
    pub fn base(&self) -> &Path {
        self.tmp.path()
    }

    /// The default document root, `BASE/root`.
    pub fn root(&self) -> PathBuf {
        self.base().join("root")
    }

    /// Writes `BASE/rel`, creating its parent directories.
    pub fn write(&self, rel: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.base().join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(&path, contents).unwrap();
        path
    }

    /// Writes the file `rel` inside the document root.
    pub fn file(&self, rel: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        self.write(&format!("root/{rel}"), contents)
    }

    /// Creates the directory `rel` inside the document root.
    pub fn mkdir(&self, rel: &str) -> PathBuf {
        let path = self.root().join(rel);
        fs::create_dir_all(&path).unwrap();
        path
    }

    /// Creates a symbolic link `rel` inside the document root pointing at `target`.
    pub fn symlink(&self, target: impl AsRef<Path>, rel: &str) -> PathBuf {
        let path = self.root().join(rel);
        std::os::unix::fs::symlink(target, &path).unwrap();
        path
    }

    /// Creates a named pipe `rel` inside the document root.
    pub fn mkfifo(&self, rel: &str) -> PathBuf {
        let path = self.root().join(rel);
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path.
        let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
        assert_eq!(
            rc,
            0,
            "mkfifo {}: {}",
            path.display(),
            io::Error::last_os_error()
        );
        path
    }

    /// Sets the modification time of `BASE/root/rel`.
    pub fn set_mtime(&self, rel: &str, time: SystemTime) {
        let f = fs::File::options()
            .write(true)
            .open(self.root().join(rel))
            .unwrap();
        f.set_modified(time).unwrap();
    }

    /// Writes `BASE/fastpath.toml` and returns its path.
    pub fn config(&self, text: &str) -> PathBuf {
        self.write("fastpath.toml", text)
    }

    /// Starts `fastpath serve BASE/root` with `model`.
    pub fn serve(&self, model: Model) -> Server {
        self.server(model).start()
    }

    /// Writes `text` as `BASE/fastpath.toml` and starts `fastpath serve --config` on it.
    /// Relative roots in `text` resolve against BASE: `root = "root"` is the default root.
    pub fn serve_config(&self, model: Model, text: &str) -> Server {
        self.server(model).config(text).start()
    }

    /// A builder for a server with more options.
    pub fn server(&self, model: Model) -> ServerBuilder<'_> {
        ServerBuilder {
            site: self,
            model,
            config: None,
            args: Vec::new(),
            nofile: None,
            listening_in: None,
            run_as_root: true,
            service: None,
            tls: false,
            configured_listen: false,
        }
    }

    /// A listing of the files in the site, for failure reports.
    pub fn listing(&self) -> String {
        fn walk(dir: &Path, base: &Path, out: &mut String) {
            let Ok(entries) = fs::read_dir(dir) else {
                return;
            };
            let mut entries: Vec<_> = entries.flatten().collect();
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                let path = e.path();
                let rel = path.strip_prefix(base).unwrap_or(&path);
                let meta = fs::symlink_metadata(&path);
                match meta {
                    Ok(m) if m.file_type().is_symlink() => {
                        let target = fs::read_link(&path).unwrap_or_default();
                        out.push_str(&format!("  {} -> {}\n", rel.display(), target.display()));
                    }
                    Ok(m) if m.is_dir() => {
                        out.push_str(&format!("  {}/\n", rel.display()));
                        walk(&path, base, out);
                    }
                    Ok(m) => out.push_str(&format!("  {} ({} bytes)\n", rel.display(), m.len())),
                    Err(_) => {}
                }
            }
        }
        let mut out = String::new();
        walk(self.base(), self.base(), &mut out);
        out
    }
}

/// Options for starting a server.
pub struct ServerBuilder<'a> {
    site: &'a Site,
    model: Model,
    config: Option<PathBuf>,
    args: Vec<String>,
    nofile: Option<u64>,
    listening_in: Option<PathBuf>,
    run_as_root: bool,
    /// A service to run (`echo`, `forward`) instead of `serve`.
    service: Option<&'static str>,
    /// Listen with TLS (`--tls-listen`) instead of plain.
    tls: bool,
    /// Listen where the configuration says, with no `--listen`.
    configured_listen: bool,
}

impl ServerBuilder<'_> {
    /// Runs `fastpath NAME` (a service: `echo`, `forward`) instead of `fastpath serve`; the
    /// arguments given with [`ServerBuilder::arg`] follow.
    pub fn service(mut self, name: &'static str) -> Self {
        self.service = Some(name);
        self
    }

    /// Writes `text` as `BASE/fastpath.toml` and passes `--config` instead of a root.
    pub fn config(mut self, text: &str) -> Self {
        self.config = Some(self.site.config(text));
        self
    }

    /// Appends a command-line argument.
    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_string());
        self
    }

    /// Listens with TLS (`--tls-listen 127.0.0.1:0`) instead of plain: the configuration
    /// must name a certificate.
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Passes no `--listen`: the server listens where its configuration says (its first
    /// `listening on` line gives the address the tests talk to).
    pub fn configured_listen(mut self) -> Self {
        self.configured_listen = true;
        self
    }

    /// Leaves out `--run-as-root`, which every other server gets: the tests run as root (CI
    /// does), where fastpath refuses to start without `user` or that opt-in. A `user` in the
    /// configuration still wins over it.
    pub fn without_run_as_root(mut self) -> Self {
        self.run_as_root = false;
        self
    }

    /// Starts the server with RLIMIT_NOFILE (soft and hard) set to `n`.
    pub fn nofile(mut self, n: u64) -> Self {
        self.nofile = Some(n);
        self
    }

    /// The error log goes to `path` rather than stderr: wait for the
    /// `listening on` line there.
    pub fn listening_line_in(mut self, path: PathBuf) -> Self {
        self.listening_in = Some(path);
        self
    }

    pub fn start(self) -> Server {
        let mut cmd = Command::new(BIN);
        match (self.service, &self.config) {
            (Some(service), _) => {
                cmd.arg(service);
            }
            (None, Some(path)) => {
                cmd.arg("serve").arg("--config").arg(path);
            }
            (None, None) => {
                cmd.arg("serve").arg(self.site.root());
            }
        }
        let listen = if self.tls { "--tls-listen" } else { "--listen" };
        if !self.configured_listen {
            cmd.args([listen, "127.0.0.1:0"]);
        }
        cmd.args(["--model", self.model]);
        if self.run_as_root {
            cmd.arg("--run-as-root");
        }
        cmd.args(&self.args);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // The server leads a process group of its own, so that dropping it
        // ends every process it started, and it is killed when the thread
        // that started it goes away, so that no server outlives its test.
        cmd.process_group(0);
        let nofile = self.nofile;
        // SAFETY: prctl and setrlimit are async-signal-safe; nothing else runs
        // in the child between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if let Some(n) = nofile {
                    let lim = libc::rlimit {
                        rlim_cur: n as libc::rlim_t,
                        rlim_max: n as libc::rlim_t,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut cmdline = format!("{cmd:?}");
        if let Some(n) = self.nofile {
            cmdline = format!("(ulimit -n {n}) {cmdline}");
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmdline}: {e}"));

        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel::<SocketAddr>();
        {
            let mut pipe = child.stdout.take().unwrap();
            let stdout = stdout.clone();
            thread::spawn(move || {
                let mut buf = [0u8; 8192];
                loop {
                    match pipe.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => stdout.lock().unwrap().extend_from_slice(&buf[..n]),
                    }
                }
            });
        }
        {
            let pipe = child.stderr.take().unwrap();
            let stderr = stderr.clone();
            let watch = self.listening_in.is_none();
            thread::spawn(move || {
                let mut reader = BufReader::new(pipe);
                let mut line = Vec::new();
                let mut sent = false;
                loop {
                    line.clear();
                    match reader.read_until(b'\n', &mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                    stderr.lock().unwrap().extend_from_slice(&line);
                    if watch && !sent {
                        if let Some(addr) = listening_addr(&String::from_utf8_lossy(&line)) {
                            sent = tx.send(addr).is_ok();
                        }
                    }
                }
            });
        }

        let mut server = Server {
            group: child.id() as libc::pid_t,
            child: Some(child),
            addr: "127.0.0.1:0".parse().unwrap(),
            cmdline,
            stdout,
            stderr,
            listing: self.site.listing(),
            config: self
                .config
                .as_ref()
                .map(|p| fs::read_to_string(p).unwrap_or_default()),
        };
        let found = match &self.listening_in {
            None => match rx.recv_timeout(START_TIMEOUT) {
                Ok(addr) => Ok(addr),
                Err(mpsc::RecvTimeoutError::Timeout) => Err("no `listening on` line in time"),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    Err("the server closed its stderr before saying `listening on`")
                }
            },
            Some(path) => {
                let deadline = Instant::now() + START_TIMEOUT;
                loop {
                    let text = fs::read_to_string(path).unwrap_or_default();
                    if let Some(addr) = text.lines().find_map(listening_addr) {
                        break Ok(addr);
                    }
                    if Instant::now() > deadline {
                        break Err("no `listening on` line in the error log file in time");
                    }
                    if let Ok(Some(_)) = server.child.as_mut().unwrap().try_wait() {
                        break Err("the server exited");
                    }
                    thread::sleep(Duration::from_millis(20));
                }
            }
        };
        match found {
            Ok(addr) => server.addr = addr,
            Err(why) => {
                // Give the pipes a moment so the report holds the whole story.
                let child = server.child.as_mut().unwrap();
                let deadline = Instant::now() + Duration::from_millis(300);
                while Instant::now() < deadline {
                    if let Ok(Some(_)) = child.try_wait() {
                        break;
                    }
                    thread::sleep(Duration::from_millis(20));
                }
                thread::sleep(Duration::from_millis(50));
                panic!("server did not start: {why}\n{}", server.report());
            }
        }
        server
    }
}

/// Finds `listening on ADDR` in a log line.
fn listening_addr(line: &str) -> Option<SocketAddr> {
    let at = line.find("listening on ")?;
    let rest = &line[at + "listening on ".len()..];
    let rest = rest.trim_start_matches(['"', '\'', '`']);
    let end = rest
        .find(|c: char| !(c.is_ascii_hexdigit() || matches!(c, '.' | ':' | '[' | ']')))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

// ---------------------------------------------------------------------------
// Servers

/// A running `fastpath serve`, killed on drop.
pub struct Server {
    child: Option<Child>,
    /// The process group the server leads: what a reload starts joins it, and it outlives
    /// the first process, so it is what is killed at the end.
    group: libc::pid_t,
    addr: SocketAddr,
    cmdline: String,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    listing: String,
    config: Option<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        // The whole group, even once the first process has stopped: a server a reload or an
        // upgrade started lives on in it.
        // SAFETY: plain kill(2) on the process group our child leads.
        let rc = unsafe { libc::kill(-self.group, libc::SIGKILL) };
        if let Some(mut child) = self.child.take() {
            if rc != 0 {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
        if thread::panicking() {
            eprintln!("{}", self.report());
        }
    }
}

impl Server {
    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// The process id of the server.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Opens a new connection.
    pub fn connect(&self) -> Conn {
        Conn::open(self.addr)
    }

    /// Everything the server wrote to stdout so far.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned()
    }

    /// Everything the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Waits until stdout holds a line for which `pred` is true; returns that line.
    pub fn wait_stdout_line(
        &self,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Option<String> {
        wait_for(timeout, || {
            self.stdout().lines().find(|l| pred(l)).map(str::to_string)
        })
    }

    /// Waits until stderr contains `needle`.
    pub fn wait_stderr(&self, timeout: Duration, needle: &str) -> bool {
        wait_for(timeout, || self.stderr().contains(needle).then_some(())).is_some()
    }

    /// Sends `sig` to the server.
    pub fn signal(&self, sig: libc::c_int) {
        if let Some(child) = &self.child {
            // SAFETY: plain kill(2) on our own child.
            unsafe {
                libc::kill(child.id() as libc::pid_t, sig);
            }
        }
    }

    /// Sends `sig` and waits up to `timeout` for the server to exit; panics if it does not.
    pub fn stop(&mut self, sig: libc::c_int, timeout: Duration) -> ExitStatus {
        self.signal(sig);
        let deadline = Instant::now() + timeout;
        loop {
            let child = self.child.as_mut().expect("server already stopped");
            if let Some(status) = child.try_wait().unwrap() {
                // Let the reader threads drain the pipes.
                thread::sleep(Duration::from_millis(100));
                self.child = None;
                return status;
            }
            if Instant::now() > deadline {
                panic!("server did not exit within {timeout:?} of signal {sig}");
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether the server process is still running.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Sends `raw` on a new connection and reads one response (a HEAD
    /// response if `raw` starts with `HEAD `). In a test run over HTTP/2 ([`over_h2`]), the
    /// same request goes as one stream of a prior-knowledge connection, sent by curl.
    pub fn request(&self, raw: impl AsRef<[u8]>) -> Response {
        if OVER_H2.get() {
            return h2_request(self.addr, raw.as_ref());
        }
        let mut conn = self.connect();
        conn.exchange(raw)
    }

    /// `GET path` with `Host: localhost` on a new connection.
    pub fn get(&self, path: &str) -> Response {
        self.request(req("GET", path, &[]))
    }

    /// `GET path` with extra header fields on a new connection.
    pub fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        self.request(req("GET", path, headers))
    }

    /// `HEAD path` with extra header fields on a new connection.
    pub fn head_with(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        self.request(req("HEAD", path, headers))
    }

    /// The failure report: command line, configuration, files, and output.
    pub fn report(&self) -> String {
        let mut out = String::new();
        out.push_str("---- server command ----\n");
        out.push_str(&self.cmdline);
        out.push('\n');
        if let Some(config) = &self.config {
            out.push_str("---- configuration ----\n");
            out.push_str(config);
            if !config.ends_with('\n') {
                out.push('\n');
            }
        }
        out.push_str("---- site ----\n");
        out.push_str(&self.listing);
        out.push_str("---- server stdout ----\n");
        out.push_str(&tail(&self.stdout(), 8000));
        out.push_str("\n---- server stderr ----\n");
        out.push_str(&tail(&self.stderr(), 8000));
        out.push_str("\n------------------------\n");
        out
    }
}

fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("[... {start} bytes cut ...]{}", &s[start..])
}

/// Calls `f` every 20 ms until it returns `Some` or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Builds `METHOD path HTTP/1.1` with `Host: localhost` (unless `headers`
/// has a Host) and the given fields.
pub fn req(method: &str, path: &str, headers: &[(&str, &str)]) -> String {
    let mut s = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        s.push_str("Host: localhost\r\n");
    }
    for (n, v) in headers {
        s.push_str(&format!("{n}: {v}\r\n"));
    }
    s.push_str("\r\n");
    s
}

// ---------------------------------------------------------------------------
// HTTP/2

thread_local! {
    /// This test's requests go over HTTP/2 (`httptest!` with `h2`).
    static OVER_H2: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `test` with [`Server::request`] (and so `get`, `get_with`, `head_with`) sending each
/// request over HTTP/2 with prior knowledge, by curl: the same assertions then hold of both
/// protocols.
pub fn over_h2(test: impl FnOnce()) {
    OVER_H2.set(true);
    test();
    OVER_H2.set(false);
}

/// Whether this test's requests go over HTTP/2.
pub fn is_over_h2() -> bool {
    OVER_H2.get()
}

/// The fields curl must not be given for an HTTP/2 request: HTTP/2 has no such fields
/// (RFC 9113 §8.2.2), and their meaning is the connection's.
const HTTP1_ONLY: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// Sends the HTTP/1.1 request `raw` (head and body) as an HTTP/2 request with curl, over a
/// prior-knowledge connection to `addr`, and reads its response as [`Response`] (version
/// `HTTP/2`, the fields as curl shows them).
pub fn h2_request(addr: SocketAddr, raw: &[u8]) -> Response {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a request head");
    let head = std::str::from_utf8(&raw[..split]).expect("a UTF-8 request head");
    let body = &raw[split + 4..];
    let mut lines = head.split("\r\n");
    let mut start = lines.next().unwrap().split(' ');
    let (method, target) = (start.next().unwrap(), start.next().unwrap());
    let mut args: Vec<String> = ["-sS", "--http2-prior-knowledge", "--path-as-is", "-D", "-"]
        .map(String::from)
        .to_vec();
    // curl's own fields would be extra: only what the test wrote is sent.
    args.extend(["-H", "User-Agent:", "-H", "Accept:"].map(String::from));
    let mut authority = "localhost".to_owned();
    for line in lines {
        let (name, value) = line.split_once(':').expect("a field line");
        if name.eq_ignore_ascii_case("host") {
            authority = value.trim().to_owned();
        } else if !HTTP1_ONLY.iter().any(|n| name.eq_ignore_ascii_case(n)) {
            args.push("-H".into());
            args.push(format!("{name}: {}", value.trim()));
        }
    }
    let url = match target.strip_prefix("http://") {
        // Absolute form: its authority is the request's.
        Some(rest) => format!("http://{rest}"),
        None => format!("http://{authority}{target}"),
    };
    args.push("--connect-to".into());
    args.push(format!("::{}:{}", addr.ip(), addr.port()));
    match method {
        "HEAD" => args.push("--head".into()),
        "GET" => {}
        other => {
            args.push("-X".into());
            args.push(other.into());
        }
    }
    if !body.is_empty() {
        args.push("--data-binary".into());
        args.push("@-".into());
    }
    args.push(url);
    let out = Command::new("curl")
        .args(["--max-time", "10"])
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(body)?;
            drop(stdin);
            child.wait_with_output()
        })
        .unwrap_or_else(|e| panic!("run curl (HTTP/2 tests need it): {e}"));
    assert!(
        out.status.success(),
        "curl {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    parse_curl_h2(&out.stdout).unwrap_or_else(|| {
        panic!(
            "curl {args:?} printed no HTTP/2 response: {:?}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Reads curl's `-D -` output of an HTTP/2 exchange: interim heads, the final head, the body.
fn parse_curl_h2(mut out: &[u8]) -> Option<Response> {
    loop {
        let end = out.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&out[..end]).into_owned();
        let mut lines = head.split("\r\n");
        let status_line = lines.next()?;
        let mut parts = status_line.split(' ');
        let version = parts.next()?.to_owned();
        let status: u16 = parts.next()?.parse().ok()?;
        out = &out[end + 4..];
        if (100..200).contains(&status) {
            continue;
        }
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.to_owned(), v.trim().to_owned()))
            .collect();
        return Some(Response {
            version,
            status,
            reason: String::new(),
            headers,
            body: out.to_vec(),
            head: format!("{head}\r\n\r\n"),
        });
    }
}

// ---------------------------------------------------------------------------
// Connections

/// How a connection ended when the test expected it to end.
#[derive(Debug, PartialEq, Eq)]
pub enum Closed {
    /// read returned 0: the server closed (or shut down) its side.
    Eof,
    /// The server reset the connection.
    Reset,
}

/// One client connection with a read buffer.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
            .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        Conn {
            stream,
            buf: Vec::new(),
        }
    }

    /// The underlying socket.
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Writes all of `bytes`; panics on error.
    pub fn send(&mut self, bytes: impl AsRef<[u8]>) {
        let bytes = bytes.as_ref();
        self.stream
            .write_all(bytes)
            .unwrap_or_else(|e| panic!("send {} bytes: {e}", bytes.len()));
    }

    /// Writes all of `bytes`, returning the error instead of panicking.
    pub fn try_send(&mut self, bytes: impl AsRef<[u8]>) -> io::Result<()> {
        self.stream.write_all(bytes.as_ref())
    }

    /// Closes the writing half (sends FIN).
    pub fn shutdown_write(&self) {
        let _ = self.stream.shutdown(Shutdown::Write);
    }

    /// Sends `raw` and reads one response, a HEAD response if `raw` starts with `HEAD `.
    pub fn exchange(&mut self, raw: impl AsRef<[u8]>) -> Response {
        let raw = raw.as_ref();
        self.send(raw);
        let method = if raw.starts_with(b"HEAD ") {
            "HEAD"
        } else {
            "GET"
        };
        self.read_response_to(method)
    }

    /// Reads one response to a request that may carry a body (not HEAD).
    pub fn read_response(&mut self) -> Response {
        self.read_response_to("GET")
    }

    /// Reads one response to a HEAD request.
    pub fn read_head_response(&mut self) -> Response {
        self.read_response_to("HEAD")
    }

    /// Reads one response, skipping interim (1xx) responses.
    pub fn read_final_response(&mut self) -> Response {
        loop {
            let r = self.read_response();
            if !(100..200).contains(&r.status) {
                return r;
            }
        }
    }

    /// Reads one response to a request with `method`; panics with what was
    /// received on error, timeout or end of stream.
    pub fn read_response_to(&mut self, method: &str) -> Response {
        match self.try_read_response(method) {
            Ok(Some(r)) => r,
            Ok(None) => panic!("the server closed the connection instead of responding"),
            Err(e) => panic!(
                "reading a response: {e}; received so far: {:?}",
                String::from_utf8_lossy(&self.buf)
            ),
        }
    }

    /// Reads the responses to pipelined requests, one per method, in order.
    pub fn read_responses(&mut self, methods: &[&str]) -> Vec<Response> {
        methods.iter().map(|m| self.read_response_to(m)).collect()
    }

    /// Reads one response; `Ok(None)` if the connection ends cleanly before
    /// the first byte of it.
    pub fn try_read_response(&mut self, method: &str) -> io::Result<Option<Response>> {
        fastpath_testkit::read_response(&mut self.stream, &mut self.buf, method)
    }

    /// Waits up to `timeout` for the server to close the connection; returns
    /// how it closed, or `Err` with a description if it did not (or sent
    /// more bytes instead).
    pub fn wait_closed(&mut self, timeout: Duration) -> Result<Closed, String> {
        if !self.buf.is_empty() {
            return Err(format!(
                "unexpected bytes after the response: {:?}",
                String::from_utf8_lossy(&self.buf)
            ));
        }
        self.stream.set_read_timeout(Some(timeout)).unwrap();
        let mut tmp = [0u8; 4096];
        let res = self.stream.read(&mut tmp);
        self.stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        match res {
            Ok(0) => Ok(Closed::Eof),
            Ok(n) => Err(format!(
                "expected the connection to be closed, got more bytes: {:?}",
                String::from_utf8_lossy(&tmp[..n])
            )),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Ok(Closed::Reset),
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut =>
            {
                Err(format!("the connection is still open after {timeout:?}"))
            }
            Err(e) => Err(format!("read error instead of a close: {e}")),
        }
    }

    /// Asserts that the server closes the connection (read returns 0, or the
    /// connection is reset) within [`IO_TIMEOUT`], with nothing more sent.
    pub fn expect_closed(&mut self) -> Closed {
        self.wait_closed(IO_TIMEOUT)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Asserts that the connection stays open and silent for `d`.
    pub fn expect_open_for(&mut self, d: Duration) {
        match self.wait_closed(d) {
            Err(e) if e.starts_with("the connection is still open") => {}
            Err(e) => panic!("{e}"),
            Ok(how) => panic!("the server closed the connection ({how:?}) within {d:?}"),
        }
    }
}

// ---------------------------------------------------------------------------
// Other helpers

/// Formats `t` as an HTTP date (IMF-fixdate).
pub fn http_date(t: SystemTime) -> String {
    httpdate::fmt_http_date(t)
}

/// A fixed point in time (2020-01-01T00:00:00Z) for modification times.
pub fn jan_2020() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_577_836_800)
}

/// Raises this process's soft RLIMIT_NOFILE to its hard limit; returns the new soft limit.
#[allow(clippy::unnecessary_cast)] // rlim_t is not u64 everywhere
pub fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain getrlimit/setrlimit on a valid struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        if lim.rlim_cur < lim.rlim_max {
            let want = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                lim = want;
            }
        }
    }
    lim.rlim_cur as u64
}

/// Visible skips, shared with the other crates' tests.
pub use fastpath_testkit::{free_port, skip, Missing, Response};

/// Runs `curl` with `args`; `None` (after saying so) if curl is not installed.
pub fn curl(args: &[&str]) -> Option<Output> {
    let ok = Command::new("curl")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        skip("curl", Missing::Installable, "curl is not installed");
        return None;
    }
    let out = Command::new("curl")
        .args(["--max-time", "10"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run curl");
    Some(out)
}

/// Runs curl over HTTPS for `https://NAME:PORT/PATH`, the name resolved to 127.0.0.1 and
/// the test CA `ca` trusted, with `extra` arguments; `None` if curl is not installed.
pub fn curl_https(ca: &Path, name: &str, port: u16, path: &str, extra: &[&str]) -> Option<Output> {
    let resolve = format!("{name}:{port}:127.0.0.1");
    let url = format!("https://{name}:{port}{path}");
    let ca = ca.to_str().expect("a UTF-8 path");
    let mut args = vec!["-sS", "--cacert", ca, "--resolve", &resolve];
    args.extend_from_slice(extra);
    args.push(&url);
    curl(&args)
}

/// Whether `python3` can import `module`.
pub fn python_has(module: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A gzip member holding `data` in stored (uncompressed) deflate blocks:
/// enough for a client to decode, with no compressor needed.
pub fn gzip_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];
    let mut chunks = data.chunks(65535).peekable();
    if chunks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(chunk) = chunks.next() {
        let last = chunks.peek().is_none();
        out.push(u8::from(last));
        let len = chunk.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    out.extend_from_slice(&crc32(data).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xedb8_8320 & mask);
        }
    }
    !crc
}

/// Deterministic pseudo-random bytes (xorshift), for large files.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// The processes whose parent is `parent`.
pub fn children(parent: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name is in parentheses and may hold spaces: fields resume after ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
            continue;
        };
        let ppid = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok());
        if ppid == Some(parent) {
            found.push(pid);
        }
    }
    found
}

/// Descriptors of deleted files (the unlinked temporary files of buffered bodies) held by
/// the process `pid` and its children.
pub fn temporary_files(pid: u32) -> usize {
    std::iter::once(pid)
        .chain(children(pid))
        .filter_map(|p| std::fs::read_dir(format!("/proc/{p}/fd")).ok())
        .flat_map(|fds| fds.flatten())
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter(|target| target.to_string_lossy().ends_with("(deleted)"))
        .count()
}

/// Connected TCP sockets (any state but LISTEN) and pipes (past standard input and output)
/// held by the process `pid` and its children: what a leak of client, backend or joint
/// descriptors would grow.
pub fn sockets_and_pipes(pid: u32) -> usize {
    let (connected, pipes) = held_sockets_and_pipes(pid);
    connected + pipes
}

/// Connected TCP sockets (any state but LISTEN) held by the process `pid` and its children,
/// without the pipes: a prefork pool's children come and go with pipes of their own.
pub fn connected_sockets(pid: u32) -> usize {
    held_sockets_and_pipes(pid).0
}

fn held_sockets_and_pipes(pid: u32) -> (usize, usize) {
    let mut inodes = Vec::new();
    let mut pipes = 0;
    for p in std::iter::once(pid).chain(children(pid)) {
        let Ok(fds) = fs::read_dir(format!("/proc/{p}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            // Standard input and output may be pipes to whoever started the server.
            if ["0", "1", "2"].contains(&fd.file_name().to_string_lossy().as_ref()) {
                continue;
            }
            let Ok(target) = fs::read_link(fd.path()) else {
                continue;
            };
            let target = target.to_string_lossy().into_owned();
            if target.starts_with("pipe:") {
                pipes += 1;
            } else if let Some(inode) = target
                .strip_prefix("socket:[")
                .and_then(|rest| rest.strip_suffix(']'))
            {
                inodes.push(inode.to_owned());
            }
        }
    }
    let mut connected = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // st is the fourth field (0A: LISTEN), inode the tenth.
            if fields.len() > 9 && fields[3] != "0A" && inodes.iter().any(|i| i == fields[9]) {
                connected += 1;
            }
        }
    }
    (connected, pipes)
}

/// A backend that answers every request on every connection with `answer` (a whole
/// response), after reading the request's head up to its blank line.
pub fn canned_backend(answer: &'static str) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || {
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::new(stream);
                loop {
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    if writer.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}
