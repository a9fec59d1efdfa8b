//! inetd mode (`%option inetd`, examples/rot13_inetd.rs) on pipes, under
//! `systemd-socket-activate --inetd` and under a real inetd (openbsd-inetd); and a
//! standalone server on sockets passed by systemd (`LISTEN_FDS`), on every model.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{example, read_to_close, read_until, send, skip, Server, MODELS};
use fastpath_testkit::{free_port, openbsd_inetd, Reaped, OPENBSD_INETD};

/// Connects once the superserver listens.
fn connect(port: u16) -> TcpStream {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                return s;
            }
            Err(e) if Instant::now() > until => panic!("nothing listens on {port}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// One rot13 session over a superserver's connection: every reply, END's included.
fn session(port: u16) {
    let mut c = connect(port);
    assert_eq!(read_until(&mut c, "\n"), "rot13 server ready\n");
    send(&mut c, b"Hello\n");
    assert_eq!(read_until(&mut c, "\n"), "Uryyb\n");
    send(&mut c, b"QUIT\r\n");
    assert_eq!(read_to_close(&mut c), "bye\nclosing\n");
}

#[test]
fn on_pipes() {
    let dir = tempfile::tempdir().unwrap();
    let run = |input: &[u8], config: Option<&Path>| {
        let mut cmd = Command::new(example("rot13_inetd"));
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match config {
            Some(c) => cmd.env("NEST_CONFIG", c),
            None => cmd.env_remove("NEST_CONFIG"),
        };
        let mut child = cmd.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input).unwrap();
        let started = Instant::now();
        // With a config (an idle timeout), input is kept open: the peer has not finished.
        let keep = config.map(|_| stdin);
        let out = child.wait_with_output().unwrap();
        drop(keep);
        (out, started.elapsed())
    };
    // Lines, then the end of input: END, exit 0.
    let (out, _) = run(b"abc\nsplit", None);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "rot13 server ready\nnop\nclosing\n"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("peer closed with unmatched input"), "{err}");
    // Silent past the idle timeout while input stays open: END, exit.
    let config = dir.path().join("config.nest");
    std::fs::write(&config, "idleTimeout 300ms\n").unwrap();
    let (out, took) = run(b"x\n", Some(&config));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "rot13 server ready\nk\nclosing\n"
    );
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("idle timeout"));
}

#[test]
fn under_systemd_socket_activate_inetd() {
    if !Path::new("/usr/bin/systemd-socket-activate").exists() {
        return skip(
            "nest inetd",
            "systemd-socket-activate is not installed (apt-get install systemd)",
        );
    }
    let port = free_port();
    let child = Command::new("/usr/bin/systemd-socket-activate")
        .args(["--inetd", "--accept", "-l", &format!("127.0.0.1:{port}")])
        .arg(example("rot13_inetd"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _reaped = Reaped(child);
    session(port);
    // A second connection gets a process of its own.
    session(port);
}

#[test]
fn a_listening_socket_is_refused_with_the_fix() {
    if !Path::new("/usr/bin/systemd-socket-activate").exists() {
        return skip(
            "nest inetd",
            "systemd-socket-activate is not installed (apt-get install systemd)",
        );
    }
    // Without --accept the listener itself is standard input (inetd's `wait` mode).
    let port = free_port();
    let child = Command::new("/usr/bin/systemd-socket-activate")
        .args(["--inetd", "-l", &format!("127.0.0.1:{port}")])
        .arg(example("rot13_inetd"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reaped = Reaped(child);
    let _c = connect(port);
    let status = reaped.0.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    let mut err = String::new();
    reaped
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        err.contains("standard input is a listening socket"),
        "{err}"
    );
    assert!(err.contains("--inetd --accept"), "{err}");
}

#[test]
fn under_openbsd_inetd() {
    if !Path::new(OPENBSD_INETD).exists() {
        return skip(
            "nest inetd",
            "inetd is not installed (apt-get install openbsd-inetd)",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = example("rot13_inetd");
    let inetd = openbsd_inetd(
        dir.path(),
        &format!(
            "127.0.0.1:{port} stream tcp nowait root {} rot13_inetd",
            server.display()
        ),
    );
    session(port);
    session(port);
    // inetd passes the socket as standard error too: the server must not log into it,
    // which the exact replies above show. Done: stop inetd and look at what it said.
    let err = inetd.stop();
    assert!(!err.contains("exit status 0x1"), "{err}");
}

#[test]
fn standalone_under_socket_activation() {
    if !Path::new("/usr/bin/systemd-socket-activate").exists() {
        return skip(
            "nest inetd",
            "systemd-socket-activate is not installed (apt-get install systemd)",
        );
    }
    for model in MODELS {
        let port = free_port();
        let child = Command::new("/usr/bin/systemd-socket-activate")
            .args(["-l", &format!("127.0.0.1:{port}")])
            .arg(example("rot13"))
            .args(["--model", model])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // systemd-socket-activate starts the server at the first connection.
        session(port);
        let server = Server::adopt(child);
        assert_eq!(server.addr.port(), port, "{model}");
        assert!(
            server.log().contains("(inherited;"),
            "{model}: {}",
            server.log()
        );
        session(port);
    }
}
