//! systemd integration, against the real `systemd-socket-activate`: it listens on a socket,
//! waits for the first client and then execs fastpath with the socket as descriptor 3 and
//! `LISTEN_PID`, `LISTEN_FDS` and `LISTEN_FDNAMES` set, as a socket unit does. The notification
//! socket is one the test binds, so it reads what fastpath tells systemd.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::util::*;

const ACTIVATE: &str = "/usr/bin/systemd-socket-activate";

/// A process started under `systemd-socket-activate` (which execs itself into fastpath, so the
/// pid is fastpath's), in a process group of its own that is killed on drop.
struct Activated {
    child: Option<Child>,
    stderr: Arc<Mutex<String>>,
    cmdline: String,
}

impl Activated {
    /// `None` (after saying why) when systemd-socket-activate is not installed.
    fn start(test: &str, activate_args: &[&str], envs: &[String], serve: &[&str]) -> Option<Self> {
        if !std::path::Path::new(ACTIVATE).exists() {
            skip(
                test,
                Missing::Installable,
                "systemd-socket-activate is not installed (Debian package systemd)",
            );
            return None;
        }
        let mut cmd = Command::new(ACTIVATE);
        cmd.args(activate_args);
        for env in envs {
            cmd.arg(format!("--setenv={env}"));
        }
        cmd.arg(BIN).arg("serve").arg("--run-as-root").args(serve);
        Some(Self::spawn(cmd))
    }

    fn spawn(mut cmd: Command) -> Self {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let cmdline = format!("{cmd:?}");
        let mut child = cmd.spawn().expect("start the server");
        let stderr = Arc::new(Mutex::new(String::new()));
        let pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                let mut text = sink.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
        });
        Activated {
            child: Some(child),
            stderr,
            cmdline,
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    fn wait_stderr(&self, needle: &str) {
        if wait_for(START_TIMEOUT, || {
            self.stderr().contains(needle).then_some(())
        })
        .is_none()
        {
            panic!("no `{needle}` in time\n{}", self.report());
        }
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.pid() as libc::pid_t, signal) };
    }

    /// Waits for the process to exit by itself.
    fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                thread::sleep(Duration::from_millis(100));
                self.child = None;
                return status;
            }
            if Instant::now() > deadline {
                panic!("did not exit within {timeout:?}\n{}", self.report());
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    fn report(&self) -> String {
        format!(
            "---- command ----\n{}\n---- stderr ----\n{}\n",
            self.cmdline,
            self.stderr()
        )
    }
}

impl Drop for Activated {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the process group our child leads.
            unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
            let _ = child.wait();
        }
        if thread::panicking() {
            eprintln!("{}", self.report());
        }
    }
}

/// The notifications received on `socket` within `timeout`, until `until` is true of one.
fn notifications(
    socket: &UnixDatagram,
    timeout: Duration,
    until: impl Fn(&str) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        socket
            .set_read_timeout(Some(
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1)),
            ))
            .unwrap();
        let Ok(n) = socket.recv(&mut buf) else { break };
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        let done = until(&text);
        got.push(text);
        if done {
            break;
        }
    }
    got
}

// Served on an inherited socket by every model: the first client (the one whose connection
// made systemd-socket-activate start fastpath, waiting in the backlog meanwhile) and the next
// ones, with `--listen` ignored; SIGTERM then stops gracefully with status 0.
httptest!(activation_serves_inherited_socket, |model| {
    let site = Site::new();
    site.file("index.html", "activated\n");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let root = site.root();
    let Some(mut server) = Activated::start(
        "systemd::activation_serves_inherited_socket",
        &["--listen", &listen, "--fdname=web"],
        &[],
        &[
            root.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--model",
            model,
            "--workers",
            "2",
        ],
    ) else {
        return;
    };
    server.wait_stderr(&format!("Listening on {listen}"));
    let addr: SocketAddr = listen.parse().unwrap();
    let mut first = Conn::open(addr);
    first
        .exchange(req("GET", "/index.html", &[]))
        .assert_ok(200, "activated\n");
    server.wait_stderr(&format!(
        "listening on {listen} (inherited socket fd 3 \"web\"; {model}"
    ));
    assert!(
        !server.stderr().contains("listening on 127.0.0.1:0"),
        "{}",
        server.report()
    );
    for _ in 0..6 {
        Conn::open(addr)
            .exchange(req("GET", "/index.html", &[]))
            .assert_ok(200, "activated\n");
    }
    // Keep-alive on the first connection still works.
    first
        .exchange(req("GET", "/index.html", &[]))
        .assert_ok(200, "activated\n");
    drop(first);
    server.signal(libc::SIGTERM);
    let status = server.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "exit {status:?}\n{}", server.report());
});

// The metrics listener is bound by fastpath itself next to the sockets systemd passed, and
// counts what they served.
#[test]
fn activation_with_metrics_listener() {
    let site = Site::new();
    site.file("index.html", "activated\n");
    let listen = format!("127.0.0.1:{}", free_port());
    let metrics = format!("127.0.0.1:{}", free_port());
    let config = site.config(&format!(
        "root = \"root\"\nworkers = 1\n[metrics]\nlisten = \"{metrics}\"\n"
    ));
    let Some(server) = Activated::start(
        "systemd::activation_with_metrics_listener",
        &["--listen", &listen],
        &[],
        &["--config", config.to_str().unwrap(), "--model", "epoll"],
    ) else {
        return;
    };
    server.wait_stderr(&format!("Listening on {listen}"));
    let addr: SocketAddr = listen.parse().unwrap();
    Conn::open(addr)
        .exchange(req("GET", "/index.html", &[]))
        .assert_ok(200, "activated\n");
    server.wait_stderr(&format!("metrics on http://{metrics}/metrics"));
    let scrape = Conn::open(metrics.parse().unwrap()).exchange(req("GET", "/metrics", &[]));
    scrape.assert_status(200);
    let text = scrape.text();
    assert!(
        text.contains("fastpath_http_requests_total{worker=\"0\",method=\"GET\",code=\"2xx\"} 1\n"),
        "{text}\n{}",
        server.report()
    );
    // The inherited socket does not serve them.
    Conn::open(addr)
        .exchange(req("GET", "/metrics", &[]))
        .assert_status(404);
}

// A reload under socket activation hands the metrics listener over under its own name, beside
// systemd's sockets: the new server serves the site on the socket systemd passed and the
// metrics on theirs (taken for a site's socket, the metrics socket kept the new server from
// binding the metrics address, and the reload failed).
#[test]
fn a_reload_under_activation_keeps_the_metrics_listener() {
    let site = Site::new();
    site.file("index.html", "activated\n");
    let listen = format!("127.0.0.1:{}", free_port());
    let metrics = format!("127.0.0.1:{}", free_port());
    let config = site.config(&format!(
        "root = \"root\"\nworkers = 2\n[metrics]\nlisten = \"{metrics}\"\n"
    ));
    let Some(mut server) = Activated::start(
        "systemd::a_reload_under_activation_keeps_the_metrics_listener",
        &["--listen", &listen],
        &[],
        &["--config", config.to_str().unwrap(), "--model", "epoll"],
    ) else {
        return;
    };
    server.wait_stderr(&format!("Listening on {listen}"));
    let addr: SocketAddr = listen.parse().unwrap();
    let metrics: SocketAddr = metrics.parse().unwrap();
    Conn::open(addr)
        .exchange(req("GET", "/index.html", &[]))
        .assert_ok(200, "activated\n");
    server.wait_stderr(&format!("metrics on http://{metrics}/metrics"));
    server.signal(libc::SIGHUP);
    server.wait_stderr("is ready; this one");
    let status = server.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "exit {status:?}\n{}", server.report());
    let log = server.stderr();
    let new: libc::pid_t = log
        .split("the new server (pid ")
        .nth(1)
        .and_then(|rest| rest.split(')').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no pid of the new server\n{}", server.report()));
    Conn::open(addr)
        .exchange(req("GET", "/index.html", &[]))
        .assert_ok(200, "activated\n");
    let scrape = Conn::open(metrics).exchange(req("GET", "/metrics", &[]));
    scrape.assert_status(200);
    assert!(scrape.text().contains("fastpath_build_info"), "{scrape}");
    Conn::open(addr)
        .exchange(req("GET", "/metrics", &[]))
        .assert_status(404);
    // SAFETY: plain kill(2) on the new server, a process of this test's group.
    unsafe { libc::kill(new, libc::SIGINT) };
}

// A socket unit's Unix socket (`ListenStream=/PATH`) is served like a TCP one; its file is
// the unit's and stays when the server stops.
#[test]
fn activation_serves_a_unix_socket() {
    let site = Site::new();
    site.file("index.html", "over unix\n");
    let path = site.base().join("web.sock");
    let root = site.root();
    let Some(mut server) = Activated::start(
        "systemd::activation_serves_a_unix_socket",
        &["--listen", path.to_str().unwrap()],
        &[],
        &[root.to_str().unwrap()],
    ) else {
        return;
    };
    server.wait_stderr("Listening on");
    let answer = crate::unix_sockets::get_over(&path, "/index.html");
    assert_eq!(answer.status, 200, "{answer}\n{}", server.report());
    assert_eq!(answer.text(), "over unix\n", "{answer}");
    server.signal(libc::SIGTERM);
    assert!(
        server.wait_exit(START_TIMEOUT).success(),
        "{}",
        server.report()
    );
    assert!(path.exists(), "the unit's socket file is left to it");
}

#[test]
fn activation_refuses_datagram_socket() {
    let site = Site::new();
    let listen = format!("127.0.0.1:{}", free_port());
    let root = site.root();
    let Some(mut server) = Activated::start(
        "systemd::activation_refuses_datagram_socket",
        &["--datagram", "--listen", &listen],
        &[],
        &[root.to_str().unwrap()],
    ) else {
        return;
    };
    server.wait_stderr("Listening on");
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.send_to(b"wake", &listen).unwrap();
    let status = server.wait_exit(START_TIMEOUT);
    assert!(!status.success());
    assert!(
        server
            .stderr()
            .contains("inherited socket fd 3: not a stream socket"),
        "{}",
        server.report()
    );
}

// Accept=yes passes each connection instead of the listening socket.
#[test]
fn activation_refuses_connection_socket() {
    let site = Site::new();
    let listen = format!("127.0.0.1:{}", free_port());
    let root = site.root();
    let Some(server) = Activated::start(
        "systemd::activation_refuses_connection_socket",
        &["--accept", "--listen", &listen],
        &[],
        &[root.to_str().unwrap()],
    ) else {
        return;
    };
    server.wait_stderr("Listening on");
    let _client = std::net::TcpStream::connect(&listen).unwrap();
    // With --accept, systemd-socket-activate forks a child per connection and keeps running.
    let refused = wait_for(START_TIMEOUT, || {
        server
            .stderr()
            .contains("inherited socket fd 3: a socket that is not listening")
            .then_some(())
    });
    assert!(refused.is_some(), "{}", server.report());
    drop(server);
}

// A descriptor that is not a socket at all, passed by hand as systemd would.
#[test]
fn activation_refuses_non_socket() {
    let site = Site::new();
    let file = site.file("not-a-socket", "x");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(r#"LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=web exec "$0" serve --run-as-root "$1" 3<"$2""#)
        .arg(BIN)
        .arg(site.root())
        .arg(&file);
    let mut server = Activated::spawn(cmd);
    let status = server.wait_exit(START_TIMEOUT);
    assert!(!status.success());
    assert!(
        server
            .stderr()
            .contains("inherited socket fd 3 \"web\": not a socket"),
        "{}",
        server.report()
    );
}

// The notifications on every model: READY=1 with the main pid and a status once listening,
// WATCHDOG=1 again and again under WATCHDOG_USEC (from the loops' beats, so every model's loop
// is proven to turn), STOPPING=1 once SIGTERM begins the graceful stop.
httptest!(notify_ready_watchdog_stopping, |model| {
    let site = Site::new();
    site.file("index.html", "notified\n");
    let notify_path = site.base().join("notify");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let root = site.root();
    let Some(mut server) = Activated::start(
        "systemd::notify_ready_watchdog_stopping",
        &["--listen", &listen],
        &[
            format!("NOTIFY_SOCKET={}", notify_path.display()),
            // 400 ms: a ping every 200 ms.
            "WATCHDOG_USEC=400000".to_string(),
        ],
        &[root.to_str().unwrap(), "--model", model, "--workers", "2"],
    ) else {
        return;
    };
    server.wait_stderr("Listening on");
    Conn::open(listen.parse().unwrap())
        .exchange(req("GET", "/index.html", &[]))
        .assert_ok(200, "notified\n");
    let ready = notifications(&notify, START_TIMEOUT, |m| m.contains("READY=1"));
    let ready = ready.last().cloned().unwrap_or_default();
    assert!(ready.contains("READY=1"), "{ready:?}\n{}", server.report());
    assert!(
        ready.contains(&format!("MAINPID={}", server.pid())),
        "{ready:?}"
    );
    assert!(
        ready.contains(&format!("STATUS=serving on {listen} ({model}")),
        "{ready:?}"
    );
    // Within 2 s at 200 ms: at least 4 pings, and never stopping meanwhile.
    let got = notifications(&notify, Duration::from_secs(2), |_| false);
    let pings = got.iter().filter(|m| *m == "WATCHDOG=1").count();
    assert!(pings >= 4, "{got:?}\n{}", server.report());
    assert!(!got.iter().any(|m| m.contains("STOPPING")), "{got:?}");
    server.signal(libc::SIGTERM);
    let got = notifications(&notify, Duration::from_secs(5), |m| {
        m.contains("STOPPING=1")
    });
    assert!(
        got.iter().any(|m| m.contains("STOPPING=1")),
        "{got:?}\n{}",
        server.report()
    );
    let status = server.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "exit {status:?}\n{}", server.report());
    let after = notifications(&notify, Duration::from_millis(200), |_| false);
    assert!(
        after.iter().all(|m| !m.contains("STOPPING")),
        "STOPPING=1 said twice: {after:?}"
    );
});

// An abstract notification address (`@name`, as systemd's own manager uses), without socket
// activation (fastpath binds its `--listen` address) and without a watchdog: no pings.
#[test]
fn notify_abstract_socket() {
    let site = Site::new();
    let name = format!("fastpath-test-notify-{}", std::process::id());
    let notify = {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        UnixDatagram::bind_addr(&addr).unwrap()
    };
    let mut cmd = Command::new(BIN);
    cmd.arg("serve")
        .arg("--run-as-root")
        .arg(site.root())
        .args(["--listen", "127.0.0.1:0", "--model", "epoll"])
        .env("NOTIFY_SOCKET", format!("@{name}"));
    let mut server = Activated::spawn(cmd);
    let got = notifications(&notify, START_TIMEOUT, |m| m.contains("READY=1"));
    assert!(
        got.iter().any(|m| m.contains("READY=1")),
        "{got:?}\n{}",
        server.report()
    );
    let quiet = notifications(&notify, Duration::from_millis(500), |_| false);
    assert!(quiet.is_empty(), "{quiet:?}");
    server.signal(libc::SIGINT);
    let got = notifications(&notify, Duration::from_secs(5), |m| {
        m.contains("STOPPING=1")
    });
    assert!(got.iter().any(|m| m.contains("STOPPING=1")), "{got:?}");
    assert!(server.wait_exit(Duration::from_secs(10)).success());
}

// A graceful stop leaves an inherited socket listening, as systemd keeps it across restarts:
// fastpath (every model, the prefork parent included, which shuts its own sockets down) only
// closes its copies, and a client that connects after the stop waits in the backlog for the
// next start instead of being refused. The socket is the test's here, passed as systemd does.
httptest!(graceful_stop_leaves_inherited_socket_listening, |model| {
    let site = Site::new();
    site.file("index.html", "kept\n");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&listener);
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(r#"LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" serve --run-as-root "$1" --model "$2" --workers 2"#)
        .arg(BIN)
        .arg(site.root())
        .arg(model);
    // SAFETY: dup2 is async-signal-safe; the copy at 3 is not close-on-exec, as systemd's.
    unsafe {
        cmd.pre_exec(move || {
            // The listener may itself be descriptor 3 (a test run alone has few open), and
            // dup2 onto itself would leave it close-on-exec: clear the flag instead.
            let done = if fd == 3 {
                libc::fcntl(3, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, 3)
            };
            if done == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut server = Activated::spawn(cmd);
    server.wait_stderr(&format!("listening on {addr} (inherited socket fd 3;"));
    Conn::open(addr)
        .exchange(req("GET", "/index.html", &[]))
        .assert_ok(200, "kept\n");
    server.signal(libc::SIGTERM);
    let status = server.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "exit {status:?}\n{}", server.report());
    let late = std::net::TcpStream::connect_timeout(&addr, IO_TIMEOUT);
    assert!(
        late.is_ok(),
        "refused after the stop: {late:?}\n{}",
        server.report()
    );
    // The client is in the socket's backlog, for the next server.
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_ok(), "{}", server.report());
});

// A reload under systemd: RELOADING=1, then the new process says READY=1 with its own
// MAINPID (the unit's NotifyAccess=all lets systemd take it), the old one no STOPPING=1; the
// socket systemd passed is served on by the new process, `--listen` still not used.
httptest!(reload_keeps_the_inherited_socket_and_notifies, |model| {
    let site = Site::new();
    site.file("index.html", "reloaded\n");
    let notify_path = site.base().join("notify");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let root = site.root();
    let Some(mut server) = Activated::start(
        "systemd::reload_keeps_the_inherited_socket_and_notifies",
        &["--listen", &listen],
        &[format!("NOTIFY_SOCKET={}", notify_path.display())],
        &[
            root.to_str().unwrap(),
            "--model",
            model,
            "--listen",
            "127.0.0.1:0",
        ],
    ) else {
        return;
    };
    server.wait_stderr("Listening on");
    let addr: SocketAddr = listen.parse().unwrap();
    Conn::open(addr)
        .exchange(req("GET", "/index.html", &[]))
        .assert_ok(200, "reloaded\n");
    notifications(&notify, START_TIMEOUT, |m| m.contains("READY=1"));
    let old = server.pid();
    server.signal(libc::SIGHUP);
    let got = notifications(&notify, Duration::from_secs(10), |m| m.contains("READY=1"));
    assert!(
        got.iter().any(|m| m.contains("RELOADING=1")),
        "{got:?}\n{}",
        server.report()
    );
    let ready = got.last().cloned().unwrap_or_default();
    let new: u32 = ready
        .lines()
        .find_map(|l| l.strip_prefix("MAINPID="))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no MAINPID in {got:?}\n{}", server.report()));
    assert_ne!(new, old);
    let status = server.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "exit {status:?}\n{}", server.report());
    let after = notifications(&notify, Duration::from_millis(300), |_| false);
    assert!(
        after.iter().all(|m| !m.contains("STOPPING")),
        "the replaced server said STOPPING=1: {after:?}"
    );
    Conn::open(addr)
        .exchange(req("GET", "/index.html", &[]))
        .assert_ok(200, "reloaded\n");
    assert!(
        server.stderr().contains("systemd socket fd"),
        "{}",
        server.report()
    );
    // SAFETY: plain kill(2) on the new server, a process of this test's group.
    unsafe { libc::kill(new as libc::pid_t, libc::SIGINT) };
});
