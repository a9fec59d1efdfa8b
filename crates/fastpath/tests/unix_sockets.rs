//! Unix-domain listening sockets (`listen = ["unix:PATH"]`, `--listen unix:PATH`): HTTP over
//! one with curl, a service over one with Python, on every model; the socket file's life (a
//! stale one replaced, anything else refused, removed at the end) and its permissions.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::check::run;
use crate::util::*;

fn unix_arg(path: &Path) -> String {
    format!("unix:{}", path.display())
}

httptest!(http_over_a_unix_socket, |model| {
    let site = Site::new();
    site.file("a.txt", "hello");
    let path = site.base().join("http.sock");
    // Left by a server that is gone: replaced.
    drop(UnixListener::bind(&path).unwrap());
    let mut srv = site
        .server(model)
        .arg("--listen")
        .arg(&unix_arg(&path))
        .start();
    let sock = path.to_str().unwrap();
    let Some(out) = curl(&["-sS", "--unix-socket", sock, "http://localhost/a.txt"]) else {
        return;
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"hello");
    // TCP goes on beside it.
    srv.get("/a.txt").assert_status(200);
    // A client of a Unix socket has no address: the log names the listener.
    let line = srv.wait_stdout_line(Duration::from_secs(5), |l| l.starts_with("unix:"));
    let expected = format!("{} - - [", unix_arg(&path));
    assert!(
        line.as_deref().is_some_and(|l| l.starts_with(&expected)),
        "{line:?}"
    );
    assert!(srv.stop(libc::SIGTERM, Duration::from_secs(10)).success());
    assert!(!path.exists(), "the socket file is removed at exit");
});

httptest!(a_service_over_a_unix_socket, |model| {
    let site = Site::new();
    let path = site.base().join("echo.sock");
    let _srv = site
        .server(model)
        .service("echo")
        .arg("--plain")
        .arg("--listen")
        .arg(&unix_arg(&path))
        .start();
    let script = "import socket, sys\n\
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n\
        s.settimeout(10)\n\
        s.connect(sys.argv[1])\n\
        s.sendall(b'\\x00\\x00hello')\n\
        got = b''\n\
        while len(got) < 7:\n\
        \x20   chunk = s.recv(64)\n\
        \x20   if not chunk: break\n\
        \x20   got += chunk\n\
        sys.stdout.write(repr(got))\n";
    let mut cmd = Command::new("python3");
    cmd.arg("-c").arg(script).arg(&path);
    if Command::new("python3").arg("--version").output().is_err() {
        skip(
            "a_service_over_a_unix_socket",
            Missing::Installable,
            "python3 is not installed",
        );
        return;
    }
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "b'\\x00\\x00hello'");
});

#[test]
fn a_unix_socket_file_gets_the_configured_mode() {
    let site = Site::new();
    site.file("a.txt", "hello");
    let (own, shared) = (
        site.base().join("own.sock"),
        site.base().join("shared.sock"),
    );
    let root = site.root();
    // `--listen` replaces the addresses; a `[[listen]]` table's mode still applies to its path.
    let config = format!(
        "root = {:?}\nunix_mode = \"0640\"\n[[listen]]\naddress = \"{}\"\nunix_mode = \"0600\"\n",
        root.to_str().unwrap(),
        unix_arg(&own)
    );
    let _srv = site
        .server("epoll")
        .config(&config)
        .arg("--listen")
        .arg(&unix_arg(&own))
        .arg("--listen")
        .arg(&unix_arg(&shared))
        .start();
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&own), 0o600);
    assert_eq!(mode(&shared), 0o640);
}

#[test]
fn what_is_not_a_stale_socket_is_never_removed() {
    let site = Site::new();
    let path = site.base().join("taken");
    let serve = |path: &Path| {
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .arg(site.root())
            .args(["--run-as-root", "--listen"])
            .arg(unix_arg(path));
        run(cmd)
    };
    std::fs::write(&path, "data").unwrap();
    let out = serve(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("is not a socket"), "{stderr}");
    assert_eq!(std::fs::read(&path).unwrap(), b"data");

    let path = site.base().join("live.sock");
    let _live = UnixListener::bind(&path).unwrap();
    let out = serve(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("another process is listening"), "{stderr}");
    assert!(path.exists());
}

/// One request over the Unix socket at `path`: its response.
pub(crate) fn get_over(path: &Path, target: &str) -> Response {
    let mut client = UnixStream::connect(path).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let request = format!("GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    client.write_all(request.as_bytes()).unwrap();
    fastpath_testkit::read_response(&mut client, &mut Vec::new(), "GET")
        .unwrap_or_else(|e| panic!("reading the response over {}: {e}", path.display()))
        .unwrap_or_else(|| panic!("{} closed without a response", path.display()))
}

// A reload hands the Unix socket to the new server, which serves it; the old server leaves
// the file to it, and the new one removes it when it stops.
httptest!(a_reload_hands_the_unix_socket_over, |model| {
    let site = Site::new();
    site.file("a.txt", "hello");
    let path = site.base().join("reload.sock");
    let mut srv = site
        .server(model)
        .arg("--listen")
        .arg(&unix_arg(&path))
        .start();
    get_over(&path, "/a.txt").assert_ok(200, "hello");
    srv.signal(libc::SIGHUP);
    let pid = wait_for(Duration::from_secs(10), || {
        let stderr = srv.stderr();
        let at = stderr.find("the new server (pid ")?;
        let rest = &stderr[at + "the new server (pid ".len()..];
        rest[..rest.find(')')?].parse::<i32>().ok()
    })
    .unwrap_or_else(|| panic!("no reload\n{}", srv.report()));
    let gone = wait_for(Duration::from_secs(10), || {
        (!srv.is_running()).then_some(())
    });
    assert!(
        gone.is_some(),
        "the old server did not stop\n{}",
        srv.report()
    );
    assert!(path.exists(), "the old server left the file to the new one");
    get_over(&path, "/a.txt").assert_ok(200, "hello");
    // SAFETY: plain kill(2) on the new server's pid.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let removed = wait_for(Duration::from_secs(10), || (!path.exists()).then_some(()));
    assert!(
        removed.is_some(),
        "the new server removes the file at exit\n{}",
        srv.report()
    );
});
