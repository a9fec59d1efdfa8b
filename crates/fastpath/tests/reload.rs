//! Reload (SIGHUP, `fastpath reload`) and binary upgrade (SIGUSR2): the listening sockets are
//! handed to a new server process, which takes over once ready, while the old one finishes
//! what it is doing. Under load no request fails.

use std::fs;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::util::*;
use fastpath_testkit::read_response;

/// The pid the pid file names, once it names one other than `not`.
fn pid_other_than(pid_file: &Path, not: u32) -> Option<u32> {
    wait_for(Duration::from_secs(10), || {
        let pid: u32 = fs::read_to_string(pid_file).ok()?.trim().parse().ok()?;
        (pid != not).then_some(pid)
    })
}

fn alive(pid: u32) -> bool {
    // A zombie is gone for our purpose: its exit status waits for its parent.
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

fn wait_gone(pid: u32) -> bool {
    wait_for(Duration::from_secs(10), || (!alive(pid)).then_some(())).is_some()
}

fn kill(pid: u32, sig: libc::c_int) {
    // SAFETY: plain kill(2).
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// Reloads the server whose pid file is `pid_file` with `signal` and waits until its
/// successor has written the pid file and the old process is gone; the successor's pid.
pub(crate) fn replace(pid_file: &Path, signal: libc::c_int) -> u32 {
    let old: u32 = fs::read_to_string(pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    kill(old, signal);
    let new = pid_other_than(pid_file, old).expect("no new pid in the pid file within 10 s");
    assert!(
        wait_gone(old),
        "the old server {old} did not exit within 10 s"
    );
    new
}

/// The listening sockets process `pid` holds (client connections come and go).
fn sockets(pid: u32) -> usize {
    let mut listening = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        for line in fs::read_to_string(table)
            .unwrap_or_default()
            .lines()
            .skip(1)
        {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // st (the fourth field) 0A is LISTEN; the inode is the tenth.
            if fields.len() > 9 && fields[3] == "0A" {
                listening.push(format!("socket:[{}]", fields[9]));
            }
        }
    }
    fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter(|fd| {
            fs::read_link(fd.path())
                .is_ok_and(|t| listening.contains(&t.to_string_lossy().into_owned()))
        })
        .count()
}

/// The pipes process `pid` holds past standard input, output and error (the test runner's
/// own may be inherited).
fn pipes(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter(|fd| fd.file_name().to_string_lossy().parse::<u32>().unwrap_or(0) > 2)
        .filter(|fd| {
            fs::read_link(fd.path()).is_ok_and(|t| t.to_string_lossy().starts_with("pipe:"))
        })
        .count()
}

/// Stops whatever server the pid file names when dropped (a successor is no child of ours).
struct StopAtEnd(PathBuf);

impl Drop for StopAtEnd {
    fn drop(&mut self) {
        if let Some(pid) = fs::read_to_string(&self.0)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
        {
            kill(pid, libc::SIGINT);
        }
    }
}

httptest!(
    a_changed_root_is_served_after_sighup_and_fastpath_reload,
    |model| {
        let site = Site::new();
        site.file("a.txt", "one");
        site.write("root2/a.txt", "two");
        site.write("root3/a.txt", "three");
        let pid_file = site.base().join("fastpath.pid");
        let config = site.config("root = \"root\"\n");
        let srv = site
            .server(model)
            .config("root = \"root\"\n")
            .arg("--pid-file")
            .arg(pid_file.to_str().unwrap())
            .start();
        let _stop = StopAtEnd(pid_file.clone());
        srv.get("/a.txt").assert_ok(200, "one");
        assert_eq!(
            fs::read_to_string(&pid_file).unwrap().trim(),
            srv.pid().to_string()
        );
        let first_sockets = sockets(srv.pid());
        let first_pipes = pipes(srv.pid());
        // At least a listener and the duplicate kept for a reload.
        assert!(first_sockets >= 2, "{first_sockets} listening sockets");

        fs::write(&config, "root = \"root2\"\n").unwrap();
        let second = replace(&pid_file, libc::SIGHUP);
        srv.get("/a.txt").assert_ok(200, "two");

        fs::write(&config, "root = \"root3\"\n").unwrap();
        let out = Command::new(BIN)
            .args(["reload", "--pid-file"])
            .arg(&pid_file)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.contains(&format!("process {second}")), "{said}");
        let third = pid_other_than(&pid_file, second).expect("no third server");
        assert!(wait_gone(second));
        srv.get("/a.txt").assert_ok(200, "three");
        assert!(
            srv.stderr().contains("reload: the new server"),
            "{}",
            srv.report()
        );
        // The new process holds what the first one held (its listening sockets, and their
        // duplicates kept for the next reload): no descriptor of an old one is left over.
        let same = wait_for(Duration::from_secs(3), || {
            (sockets(third) == first_sockets).then_some(())
        });
        assert!(
            same.is_some(),
            "sockets: {first_sockets} in the first server, {} in the third",
            sockets(third)
        );
        assert_eq!(
            pipes(third),
            first_pipes,
            "the readiness pipe was left open in the new server"
        );
    }
);

httptest!(
    an_invalid_configuration_is_refused_and_the_old_one_serves_on,
    |model| {
        let site = Site::new();
        site.file("a.txt", "one");
        let pid_file = site.base().join("fastpath.pid");
        let config = site.config("root = \"root\"\n");
        let mut srv = site
            .server(model)
            .config("root = \"root\"\n")
            .arg("--pid-file")
            .arg(pid_file.to_str().unwrap())
            .start();
        fs::write(&config, "root = \"root\"\nworkers = \"many\"\n").unwrap();
        srv.signal(libc::SIGHUP);
        assert!(
            srv.wait_stderr(Duration::from_secs(5), "reload refused"),
            "{}",
            srv.report()
        );
        let err = srv.stderr();
        assert!(err.contains("fastpath.toml:2:"), "{err}");
        assert!(err.contains("workers"), "{err}");
        assert!(srv.is_running());
        assert_eq!(
            fs::read_to_string(&pid_file).unwrap().trim(),
            srv.pid().to_string()
        );
        srv.get("/a.txt").assert_ok(200, "one");
        // `fastpath reload -c` refuses it up front too, with the same errors.
        let out = Command::new(BIN)
            .args(["reload", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("fastpath.toml:2:"));
        // An access log that cannot be opened passes the check but stops the new process
        // as it starts; the old one serves on.
        fs::write(
            &config,
            "root = \"root\"\n[log]\naccess = \"/nonexistent/dir/access.log\"\n",
        )
        .unwrap();
        srv.signal(libc::SIGHUP);
        assert!(
            srv.wait_stderr(Duration::from_secs(10), "reload failed"),
            "{}",
            srv.report()
        );
        assert!(srv.is_running());
        srv.get("/a.txt").assert_ok(200, "one");
        let status = srv.stop(libc::SIGTERM, Duration::from_secs(5));
        assert_eq!(status.code(), Some(0));
        assert!(!pid_file.exists(), "the pid file outlived the server");
    }
);

/// A backend answering every GET with `proxied`, keeping connections open.
fn backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || {
                let mut stream = stream;
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let reply = "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nproxied";
                        if stream.write_all(reply.as_bytes()).is_err() {
                            return;
                        }
                    }
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    addr
}

/// One response read off `stream`, which must be a 200: its body, and whether the server
/// closes after it.
fn read_ok(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<(Vec<u8>, bool)> {
    let response = read_response(stream, buf, "GET")?
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "closed before a response"))?;
    if response.status != 200 {
        return Err(io::Error::other(format!(
            "status: {}",
            response.status_line()
        )));
    }
    let close = response.connection_has("close");
    Ok((response.body, close))
}

/// What a load loop counted.
#[derive(Default)]
struct Counts {
    ok: AtomicUsize,
    failed: AtomicUsize,
    errors: std::sync::Mutex<Vec<String>>,
}

/// Requests `path` (expecting `body`) until `stop`, on keep-alive connections or one per
/// request.
fn load(
    addr: SocketAddr,
    path: &'static str,
    body: &'static [u8],
    keep_alive: bool,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let request = if keep_alive {
            format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n")
        } else {
            format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        };
        let mut conn: Option<TcpStream> = None;
        let mut buf = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let result = (|| -> io::Result<bool> {
                if conn.is_none() {
                    buf.clear();
                    conn = Some(TcpStream::connect(addr)?);
                }
                let stream = conn.as_mut().unwrap();
                stream.set_read_timeout(Some(Duration::from_secs(10)))?;
                stream.write_all(request.as_bytes())?;
                let (got, close) = read_ok(stream, &mut buf)?;
                if got != body {
                    return Err(io::Error::other("wrong body"));
                }
                Ok(close)
            })();
            match result {
                Ok(close) => {
                    counts.ok.fetch_add(1, Ordering::Relaxed);
                    if close || !keep_alive {
                        conn = None;
                    }
                }
                Err(e) => {
                    counts.failed.fetch_add(1, Ordering::Relaxed);
                    counts
                        .errors
                        .lock()
                        .unwrap()
                        .push(format!("{path} keep-alive={keep_alive}: {e}"));
                    conn = None;
                }
            }
        }
    })
}

httptest!(twenty_reloads_under_load_fail_no_request, |model| {
    let site = Site::new();
    site.file("a.txt", "static");
    let backend = backend();
    let text = format!(
        "root = \"root\"\n[[backend]]\nname = \"app\"\naddresses = \"{backend}\"\n\
         [[route]]\nbackend = \"app\"\nprefix = \"/app/\"\n"
    );
    let pid_file = site.base().join("fastpath.pid");
    let srv = site
        .server(model)
        .config(&text)
        .arg("--pid-file")
        .arg(pid_file.to_str().unwrap())
        .start();
    let _stop = StopAtEnd(pid_file.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let mut loops = Vec::new();
    for keep_alive in [true, false] {
        loops.push(load(
            srv.addr(),
            "/a.txt",
            b"static",
            keep_alive,
            stop.clone(),
            counts.clone(),
        ));
        loops.push(load(
            srv.addr(),
            "/app/x",
            b"proxied",
            keep_alive,
            stop.clone(),
            counts.clone(),
        ));
    }
    thread::sleep(Duration::from_millis(200));
    for _ in 0..20 {
        replace(&pid_file, libc::SIGHUP);
        thread::sleep(Duration::from_millis(50));
    }
    thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        l.join().unwrap();
    }
    let ok = counts.ok.load(Ordering::Relaxed);
    let failed = counts.failed.load(Ordering::Relaxed);
    let errors = counts.errors.lock().unwrap();
    assert_eq!(
        failed,
        0,
        "{ok} ok, {failed} failed: {:?}\n{}",
        &errors[..errors.len().min(10)],
        srv.report()
    );
    assert!(ok > 100, "only {ok} requests");
});

httptest!(a_download_in_flight_completes_across_a_reload, |model| {
    let site = Site::new();
    let body: Vec<u8> = (0..20_000_000u32).map(|i| (i % 251) as u8).collect();
    site.file("big.bin", &body);
    let pid_file = site.base().join("fastpath.pid");
    let srv = site
        .server(model)
        .config("root = \"root\"\n")
        .arg("--pid-file")
        .arg(pid_file.to_str().unwrap())
        .start();
    let _stop = StopAtEnd(pid_file.clone());
    let mut stream = TcpStream::connect(srv.addr()).unwrap();
    stream
        .write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut first = [0u8; 1024];
    stream.read_exact(&mut first).unwrap();
    let old = srv.pid();
    kill(old, libc::SIGHUP);
    pid_other_than(&pid_file, old).expect("no new server");
    // The old server waits for this download; new clients go to the new one meanwhile.
    srv.get("/big.bin").assert_status(200);
    assert!(
        alive(old),
        "the old server left before its download was done"
    );
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).unwrap();
    let mut all = first.to_vec();
    all.extend_from_slice(&rest);
    // The head went out before the reload, saying keep-alive; the old server closed the
    // connection once the body was sent and no request came (read_to_end saw the end).
    let head_end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(all[head_end..] == body[..], "the body arrived damaged");
    assert!(wait_gone(old));
});

/// A server started by hand from `exe` (not through the builder, which fixes `--listen`),
/// stopped through its pid file at the end.
struct Hand {
    pid_file: PathBuf,
    log: PathBuf,
}

impl Hand {
    fn start(exe: &Path, config: &Path, dir: &Path) -> Hand {
        let log = dir.join("stderr.log");
        let pid_file = dir.join("fastpath.pid");
        let mut cmd = Command::new(exe);
        cmd.args(["serve", "--run-as-root", "--pid-file"])
            .arg(&pid_file)
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .process_group(0);
        let child = cmd.spawn().unwrap();
        let hand = Hand { pid_file, log };
        let pid = wait_for(Duration::from_secs(10), || {
            fs::read_to_string(&hand.pid_file)
                .ok()?
                .trim()
                .parse::<u32>()
                .ok()
        });
        assert_eq!(pid, Some(child.id()), "{}", hand.log());
        // Reaped by a thread: the test holds no zombie that would look alive.
        thread::spawn(move || {
            let mut child = child;
            let _ = child.wait();
        });
        hand
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Hand {
    fn drop(&mut self) {
        drop(StopAtEnd(self.pid_file.clone()));
    }
}

fn get(port: u16) -> io::Result<Vec<u8>> {
    get_path(port, "/a.txt")
}

httptest!(
    a_reload_opens_added_addresses_and_closes_removed_ones,
    |model| {
        let site = Site::new();
        site.file("a.txt", "hi");
        let (one, two, three) = (free_port(), free_port(), free_port());
        let config = site.config(&format!(
        "root = \"root\"\nmodel = \"{model}\"\nlisten = [\"127.0.0.1:{one}\", \"127.0.0.1:{two}\"]\n"
    ));
        let hand = Hand::start(Path::new(BIN), &config, site.base());
        assert_eq!(get(one).unwrap(), b"hi");
        assert_eq!(get(two).unwrap(), b"hi");
        assert!(get(three).is_err());
        fs::write(
        &config,
        format!("root = \"root\"\nmodel = \"{model}\"\nlisten = [\"127.0.0.1:{two}\", \"127.0.0.1:{three}\"]\n"),
    )
    .unwrap();
        replace(&hand.pid_file, libc::SIGHUP);
        assert_eq!(get(two).unwrap(), b"hi", "{}", hand.log());
        assert_eq!(get(three).unwrap(), b"hi", "{}", hand.log());
        assert!(
            get(one).is_err(),
            "the removed address still answers\n{}",
            hand.log()
        );
        assert!(hand
            .log()
            .contains(&format!("127.0.0.1:{one} is no longer configured")));
    }
);

#[test]
fn sigusr2_replaces_the_binary_with_the_one_on_disk() {
    let site = Site::new();
    site.file("a.txt", "hi");
    let port = free_port();
    let config = site.config(&format!(
        "root = \"root\"\nmodel = \"epoll\"\nlisten = [\"127.0.0.1:{port}\"]\n"
    ));
    let dir = site.base().join("bin");
    fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("fastpath");
    fs::copy(BIN, &exe).unwrap();
    let hand = Hand::start(&exe, &config, site.base());
    let old: u32 = fs::read_to_string(&hand.pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(get(port).unwrap(), b"hi");
    // A new file in place of the old (as a package upgrade does: the running image stays).
    let staged = dir.join("fastpath.new");
    fs::copy(BIN, &staged).unwrap();
    fs::rename(&staged, &exe).unwrap();
    let new = replace(&hand.pid_file, libc::SIGUSR2);
    assert_ne!(new, old);
    let image = fs::read_link(format!("/proc/{new}/exe")).unwrap();
    assert_eq!(
        image, exe,
        "the new server does not run the file now on disk"
    );
    assert_eq!(get(port).unwrap(), b"hi");
    // Replaced again, a reload keeps running the image it has (now deleted from the disk);
    // an upgrade from there still starts the file at the path.
    fs::copy(BIN, &staged).unwrap();
    fs::rename(&staged, &exe).unwrap();
    let reloaded = replace(&hand.pid_file, libc::SIGHUP);
    let image = fs::read_link(format!("/proc/{reloaded}/exe")).unwrap();
    assert!(
        image.to_string_lossy().ends_with("(deleted)"),
        "a reload ran {}",
        image.display()
    );
    let upgraded = replace(&hand.pid_file, libc::SIGUSR2);
    let image = fs::read_link(format!("/proc/{upgraded}/exe")).unwrap();
    assert_eq!(image, exe, "{}", hand.log());
    assert_eq!(get(port).unwrap(), b"hi");
    assert!(
        hand.log().contains("binary upgrade: the new server"),
        "{}",
        hand.log()
    );
}

#[test]
fn fastpath_reload_says_precisely_why_it_cannot_signal() {
    let site = Site::new();
    let pid_file = site.base().join("fastpath.pid");
    let run = |args: &[&str]| {
        let out = Command::new(BIN).arg("reload").args(args).output().unwrap();
        assert!(!out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let path = pid_file.to_str().unwrap();
    let err = run(&["--pid-file", path]);
    assert!(err.contains("cannot read the pid file"), "{err}");
    fs::write(&pid_file, "not a pid\n").unwrap();
    let err = run(&["--pid-file", path]);
    assert!(err.contains("not a process id"), "{err}");
    // A pid no process has: past the kernel's largest.
    fs::write(&pid_file, "4194304\n").unwrap();
    let err = run(&["--pid-file", path]);
    assert!(err.contains("is stale"), "{err}");
    let config = site.config("root = \"root\"\n");
    let err = run(&["--config", config.to_str().unwrap()]);
    assert!(err.contains("has no `pid_file`"), "{err}");
    let err = run(&[]);
    assert!(err.contains("--pid-file"), "{err}");
}

/// The real uid of process `pid`.
fn uid_of(pid: u32) -> u32 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next()?.parse().ok())
        .unwrap()
}

// Started as root with `user`: the prefork parent stays root, so its successor starts as root
// and switches as the first one did; the other models switched the whole process, so their
// successor runs as the user from the start, on the inherited sockets, writing the pid file
// in a directory the user may write to.
httptest!(a_reload_after_the_switch_to_user_serves_on, |model| {
    // SAFETY: cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        skip(
            "reload::a_reload_after_the_switch_to_user_serves_on",
            Missing::Environment,
            "needs root: it checks a reload after the switch from root to another user",
        );
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let site = Site::new();
    site.file("a.txt", "one");
    site.write("root2/a.txt", "two");
    fs::set_permissions(site.base(), fs::Permissions::from_mode(0o755)).unwrap();
    let run = site.base().join("run");
    fs::create_dir(&run).unwrap();
    let nobody = c"nobody";
    // SAFETY: a lookup copied out at once.
    let (uid, gid) = unsafe {
        let pw = libc::getpwnam(nobody.as_ptr());
        assert!(!pw.is_null());
        ((*pw).pw_uid, (*pw).pw_gid)
    };
    std::os::unix::fs::chown(&run, Some(uid), Some(gid)).unwrap();
    let pid_file = run.join("fastpath.pid");
    let config = site.config("root = \"root\"\nuser = \"nobody\"\n");
    let srv = site
        .server(model)
        .config("root = \"root\"\nuser = \"nobody\"\n")
        .without_run_as_root()
        .arg("--pid-file")
        .arg(pid_file.to_str().unwrap())
        .start();
    srv.get("/a.txt").assert_ok(200, "one");
    fs::write(&config, "root = \"root2\"\nuser = \"nobody\"\n").unwrap();
    let new = replace(&pid_file, libc::SIGHUP);
    srv.get("/a.txt").assert_ok(200, "two");
    let expected = if model == "prefork" { 0 } else { uid };
    assert_eq!(uid_of(new), expected, "{}", srv.report());
});

#[test]
fn a_pid_file_that_cannot_be_written_stops_the_start() {
    let site = Site::new();
    site.file("a.txt", "hi");
    let out = Command::new(BIN)
        .args([
            "serve",
            "--run-as-root",
            "--listen",
            "127.0.0.1:0",
            "--pid-file",
        ])
        .arg(site.base().join("missing/fastpath.pid"))
        .arg(site.root())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot write the pid file"), "{err}");
    assert!(err.contains("missing/fastpath.pid"), "{err}");
}

fn get_path(port: u16, path: &str) -> io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())?;
    let mut buf = Vec::new();
    read_ok(&mut stream, &mut buf).map(|(body, _)| body)
}

httptest!(
    the_metrics_listener_is_handed_over_and_the_successor_keeps_its_name,
    |model| {
        let site = Site::new();
        site.file("a.txt", "hi");
        let (port, metrics) = (free_port(), free_port());
        let config = site.config(&format!(
            "root = \"root\"\nmodel = \"{model}\"\nlisten = [\"127.0.0.1:{port}\"]\n\
             [metrics]\nlisten = \"127.0.0.1:{metrics}\"\n"
        ));
        let hand = Hand::start(Path::new(BIN), &config, site.base());
        assert_eq!(get(port).unwrap(), b"hi");
        let scrape = get_path(metrics, "/metrics").unwrap();
        assert!(String::from_utf8_lossy(&scrape).contains("fastpath_build_info"));
        let new = replace(&hand.pid_file, libc::SIGHUP);
        let scrape = get_path(metrics, "/metrics").unwrap_or_default();
        assert!(
            String::from_utf8_lossy(&scrape).contains("fastpath_build_info"),
            "no metrics after the reload\n{}",
            hand.log()
        );
        assert_eq!(get(port).unwrap(), b"hi", "{}", hand.log());
        // Not named "exe" after /proc/self/exe, so that ps and pgrep still find it.
        let comm = fs::read_to_string(format!("/proc/{new}/comm")).unwrap();
        assert_eq!(comm.trim(), "fastpath");
        // The metrics address is one the new server took over, not one it bound anew.
        assert!(
            !hand
                .log()
                .contains(&format!("127.0.0.1:{metrics} is a new address")),
            "{}",
            hand.log()
        );
    }
);

/// `model = "auto"` runs what a start-up probe measured cheapest, says so, and a reload keeps
/// that choice instead of measuring again while the old server is serving.
#[test]
fn auto_keeps_the_model_it_measured_across_a_reload() {
    let site = Site::new();
    site.file("a.txt", "one");
    let pid_file = site.base().join("fastpath.pid");
    let srv = site
        .server("auto")
        .config("root = \"root\"\n")
        .arg("--pid-file")
        .arg(pid_file.to_str().unwrap())
        .start();
    let _stop = StopAtEnd(pid_file.clone());
    srv.get("/a.txt").assert_ok(200, "one");
    assert!(
        srv.wait_stderr(Duration::from_secs(5), "in a start-up probe"),
        "{}",
        srv.report()
    );
    let err = srv.stderr();
    let at = err.find("model \"auto\" runs \"").unwrap() + "model \"auto\" runs \"".len();
    let chosen = err[at..].split('"').next().unwrap().to_owned();
    assert!(chosen == "epoll" || chosen == "uring", "{err}");
    replace(&pid_file, libc::SIGHUP);
    srv.get("/a.txt").assert_ok(200, "one");
    let kept =
        format!("model \"auto\" runs \"{chosen}\", as measured by the server this one replaces");
    assert!(
        srv.wait_stderr(Duration::from_secs(5), &kept),
        "{}",
        srv.report()
    );
    assert_eq!(srv.stderr().matches("in a start-up probe").count(), 1);
}
/// Whether process `pid` is blocked waiting for epoll events (an idle prefork child).
fn in_epoll_wait(pid: u32) -> bool {
    let Ok(text) = fs::read_to_string(format!("/proc/{pid}/syscall")) else {
        return false;
    };
    let Some(nr) = text
        .split_whitespace()
        .next()
        .and_then(|n| n.parse::<libc::c_long>().ok())
    else {
        return false;
    };
    #[cfg(target_arch = "x86_64")]
    if nr == libc::SYS_epoll_wait {
        return true;
    }
    nr == libc::SYS_epoll_pwait || nr == libc::SYS_epoll_pwait2
}

/// Whether a SIGTERM sent to process `pid` waits to be delivered: it has not run since.
fn sigterm_pending(pid: u32) -> bool {
    let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .filter_map(|l| {
            l.strip_prefix("ShdPnd:")
                .or_else(|| l.strip_prefix("SigPnd:"))
        })
        .filter_map(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .any(|mask| mask & (1 << (libc::SIGTERM - 1)) != 0)
}

/// A CPU cgroup that can hold its processes: while held they may run 1 ms a second, which
/// busy loops of its own (one on each CPU) take, so that a process in it that is woken (by a
/// client, by a signal) does not get back to its own code until it is released, as on a
/// loaded machine, only for longer. Released, it lets them run as they want.
struct Throttle {
    dir: PathBuf,
    /// cgroup v1's `cpu` hierarchy (`cpu.cfs_quota_us`), or else v2's `cpu.max`.
    v1: bool,
    /// Stopped while the group is released.
    hogs: Vec<std::process::Child>,
}

impl Throttle {
    /// `None` where no CPU controller can be used (not root, no such cgroup file system).
    fn new() -> Option<Throttle> {
        static MADE: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "fastpath-test-{}-{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        );
        let v1 = Path::new("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists();
        let dir = if v1 {
            Path::new("/sys/fs/cgroup/cpu").join(name)
        } else {
            let controllers = fs::read_to_string("/sys/fs/cgroup/cgroup.subtree_control");
            if !controllers.is_ok_and(|c| c.split_whitespace().any(|c| c == "cpu")) {
                return None;
            }
            Path::new("/sys/fs/cgroup").join(name)
        };
        fs::create_dir(&dir).ok()?;
        let mut throttle = Throttle {
            dir,
            v1,
            hogs: Vec::new(),
        };
        if v1 && fs::write(throttle.dir.join("cpu.cfs_period_us"), "1000000").is_err() {
            return None;
        }
        throttle.release();
        for cpu in fastpath_drivers::allowed_cpus() {
            let mut hog = Command::new("sh");
            hog.args(["-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // SAFETY: sched_setaffinity is async-signal-safe, and the set lives on the stack.
            unsafe {
                hog.pre_exec(move || {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut set);
                    libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
                    Ok(())
                });
            }
            let hog = hog.spawn().ok()?;
            kill(hog.id(), libc::SIGSTOP);
            let added = throttle.add(hog.id());
            throttle.hogs.push(hog);
            if !added {
                return None;
            }
        }
        Some(throttle)
    }

    /// Moves process `pid` (all its threads) into the group.
    fn add(&self, pid: u32) -> bool {
        fs::write(self.dir.join("cgroup.procs"), pid.to_string()).is_ok()
    }

    /// Moves every process but `kept` (and the busy loops) out of the group, to the
    /// hierarchy's root.
    fn take_out_all_but(&self, kept: u32) {
        let root = self.dir.parent().unwrap().join("cgroup.procs");
        for pid in fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|pid| pid.parse::<u32>().ok())
            .filter(|&pid| pid != kept && !self.hogs.iter().any(|hog| hog.id() == pid))
        {
            let _ = fs::write(&root, pid.to_string());
        }
    }

    fn hold(&self) {
        self.limit(true).expect("cannot limit the cgroup");
    }

    fn release(&self) {
        let _ = self.limit(false);
    }

    /// Held: the busy loops run and the group gets 1 ms a second; else they stop and the
    /// group runs unlimited.
    fn limit(&self, held: bool) -> io::Result<()> {
        for hog in &self.hogs {
            kill(hog.id(), if held { libc::SIGCONT } else { libc::SIGSTOP });
        }
        match (self.v1, held) {
            (true, true) => fs::write(self.dir.join("cpu.cfs_quota_us"), "1000"),
            (true, false) => fs::write(self.dir.join("cpu.cfs_quota_us"), "-1"),
            (false, true) => fs::write(self.dir.join("cpu.max"), "1000 1000000"),
            (false, false) => fs::write(self.dir.join("cpu.max"), "max 1000000"),
        }
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        for hog in &mut self.hogs {
            let _ = hog.kill();
            let _ = hog.wait();
        }
        self.release();
        self.take_out_all_but(0);
        wait_for(Duration::from_secs(5), || fs::remove_dir(&self.dir).ok());
    }
}

// A client that comes just as the old server is to stop is answered, by the old server or the
// new one. Here the old server is held back (as a loaded machine may do it) from the moment
// it has started the new one until the client has come. On prefork the kernel gives the
// client's wake-up to one of the old children, which are first in the listening socket's
// queue of waiters; that child then sees the stop as it runs again. A child that left without
// accepting left the client waiting until another came, as no child of the new server was
// woken for it.
httptest!(
    a_client_that_comes_as_the_old_server_stops_is_answered,
    |model| {
        let name = "reload::a_client_that_comes_as_the_old_server_stops_is_answered";
        // SAFETY: cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            skip(
                name,
                Missing::Environment,
                "needs root: it holds the old server back in a CPU cgroup",
            );
            return;
        }
        // The old server (prefork: its parent), and prefork's old children apart, to be released
        // one after the other.
        let (Some(server_group), Some(children_group)) = (Throttle::new(), Throttle::new()) else {
            skip(
                name,
                Missing::Environment,
                "no cgroup CPU controller to use",
            );
            return;
        };
        let prefork = model == "prefork";
        let site = Site::new();
        site.file("a.txt", "static");
        let pid_file = site.base().join("fastpath.pid");
        let mut config = "root = \"root\"\n".to_owned();
        if prefork {
            // Two children that stay two: the new server starts no child later, which would find
            // the client waiting as it begins to listen.
            config.push_str("[prefork]\nstart = 2\nmin_spare = 1\nmax_spare = 2\n");
        }
        let srv = site
            .server(model)
            .config(&config)
            .arg("--pid-file")
            .arg(pid_file.to_str().unwrap())
            .start();
        let _stop = StopAtEnd(pid_file.clone());
        srv.get("/a.txt").assert_ok(200, "static");
        let idle_children = |parent: u32| {
            wait_for(Duration::from_secs(5), || {
                let children = children(parent);
                (children.len() >= 2 && children.iter().all(|&c| in_epoll_wait(c)))
                    .then_some(children)
            })
            .unwrap_or_else(|| panic!("no idle children of {parent}\n{}", srv.report()))
        };
        // Rounds in which the client was taken by an old child while it was held.
        let mut taken_by_an_old_child = 0;
        for round in 0..6 {
            let old: u32 = fs::read_to_string(&pid_file)
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert!(server_group.add(old));
            let old_children = if prefork {
                idle_children(old)
            } else {
                Vec::new()
            };
            for &child in &old_children {
                assert!(children_group.add(child));
            }
            kill(old, libc::SIGHUP);
            // Held once it has started the new server: it cannot hear that the new one is ready,
            // and so does not stop yet (unless it was quicker than this loop).
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if children(old).iter().any(|c| !old_children.contains(c)) {
                    server_group.hold();
                    break;
                }
                if pid_other_than(&pid_file, old).is_some() {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the old server started no new one"
                );
                thread::sleep(Duration::from_millis(1));
            }
            // The new server was started in the old one's group: it is taken out, with what it
            // started already.
            server_group.take_out_all_but(old);
            let new = pid_other_than(&pid_file, old).expect("no new server");
            // The old children are held too, while they wait for clients behind the new ones.
            let mut waiting = false;
            if prefork {
                idle_children(new);
                waiting = old_children
                    .iter()
                    .all(|&c| in_epoll_wait(c) && !sigterm_pending(c));
                children_group.hold();
            }
            let mut client = TcpStream::connect(srv.addr()).unwrap();
            client
                .write_all(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n")
                .unwrap();
            thread::sleep(Duration::from_millis(100));
            // Unanswered yet: a held child took the wake-up (the new server's would have
            // answered at once).
            client.set_nonblocking(true).unwrap();
            let unanswered = matches!(
                client.peek(&mut [0u8; 1]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock
            );
            client.set_nonblocking(false).unwrap();
            if waiting && unanswered {
                taken_by_an_old_child += 1;
            }
            // The old server hears the new one is ready and tells its children to stop, which
            // they see as they run again. (A held process still runs a moment when a period
            // of its group begins: a child may have seen the signal already.)
            server_group.release();
            if prefork {
                wait_for(Duration::from_secs(2), || {
                    old_children
                        .iter()
                        .all(|&c| sigterm_pending(c) || !alive(c))
                        .then_some(())
                });
            }
            children_group.release();
            client
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut buf = Vec::new();
            let got = read_ok(&mut client, &mut buf);
            assert!(
                got.as_ref().is_ok_and(|(body, _)| body == b"static"),
                "round {round}: the client that came as the old server stopped got {got:?}\n{}",
                srv.report()
            );
            assert!(wait_gone(old), "the old server {old} did not stop");
            if !prefork || taken_by_an_old_child == 2 {
                break;
            }
        }
        if prefork && taken_by_an_old_child == 0 {
            eprintln!("{name}: no round had the client taken by an old child; nothing was shown");
        }
    }
);
