//! Stopping and signals: the graceful stop on SIGTERM (requests in progress finish, idle
//! connections close, new clients are refused, the grace period bounds it), SIGINT at once,
//! and the signals that must not stop the server (SIGHUP, SIGUSR1, SIGUSR2).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::util::*;

/// A body large enough to be in progress when the signal comes (the client does not read it
/// until then), with a pattern that shows a missing or repeated piece.
fn large_body() -> Vec<u8> {
    (0..20_000_000u32).map(|i| (i % 251) as u8).collect()
}

fn site() -> Site {
    let site = Site::new();
    site.file("a.txt", "hello");
    site
}

/// Waits until the server refuses new connections (its listeners are closed).
fn wait_refused(srv: &Server) -> bool {
    let addr = srv.addr();
    wait_for(Duration::from_secs(3), || {
        TcpStream::connect_timeout(&addr, Duration::from_millis(200))
            .is_err()
            .then_some(())
    })
    .is_some()
}

httptest!(a_download_in_progress_at_sigterm_completes, |model| {
    let site = site();
    let body = large_body();
    site.file("big.bin", &body);
    let mut srv = site.serve(model);
    let mut stream = TcpStream::connect(srv.addr()).unwrap();
    stream
        .write_all(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    // The head and a first piece, so the response has begun.
    let mut got = vec![0u8; 65536];
    stream.read_exact(&mut got).unwrap();
    srv.signal(libc::SIGTERM);
    assert!(
        wait_refused(&srv),
        "new connections still accepted after SIGTERM"
    );
    assert!(
        srv.is_running(),
        "the server exited with a download in progress"
    );
    stream.read_to_end(&mut got).unwrap();
    let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(
        got.len() - head_end,
        body.len(),
        "the download was cut short"
    );
    assert!(got[head_end..] == body[..], "the download arrived damaged");
    let status = srv.stop(libc::SIGTERM, Duration::from_secs(5));
    assert_eq!(status.code(), Some(0), "exit status: {status}");
    let log = srv.stdout();
    assert!(
        log.contains("\"GET /big.bin HTTP/1.1\" 200 20000000"),
        "access log:\n{log}"
    );
});

httptest!(
    sigterm_closes_idle_connections_and_finishes_requests,
    |model| {
        let site = site();
        let mut srv = site.serve(model);
        let mut idle = srv.connect();
        idle.exchange(req("GET", "/a.txt", &[]))
            .assert_ok(200, "hello");
        let mut busy = srv.connect();
        busy.send("GET /a.txt HTTP/1.1\r\nHost: x\r\n");
        // The partial head is read (and the connection accepted) before the signal.
        std::thread::sleep(Duration::from_millis(300));
        srv.signal(libc::SIGTERM);
        idle.expect_closed();
        busy.send("\r\n");
        let response = busy.read_response();
        response.assert_ok(200, "hello");
        assert_eq!(response.header("connection"), Some("close"));
        busy.expect_closed();
        let status = srv.stop(libc::SIGTERM, Duration::from_secs(5));
        assert_eq!(status.code(), Some(0), "exit status: {status}");
    }
);

httptest!(the_grace_period_ends_a_stuck_client, |model| {
    let site = site();
    let mut srv = site.serve_config(model, "root = \"root\"\n[timeouts]\nshutdown = \"1s\"\n");
    let mut stuck = srv.connect();
    stuck.send("GET /a.txt HTTP/1.1\r\n");
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let status = srv.stop(libc::SIGTERM, Duration::from_secs(8));
    assert_eq!(status.code(), Some(0), "exit status: {status}");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "stopped before the grace period was over"
    );
    stuck.expect_closed();
    let err = srv.stderr();
    assert!(err.contains("grace period over"), "stderr:\n{err}");
});

httptest!(a_second_sigterm_or_sigint_stops_at_once, |model| {
    let site = site();
    for second in [libc::SIGTERM, libc::SIGINT] {
        let mut srv = site.serve(model);
        let mut stuck = srv.connect();
        stuck.send("GET /a.txt HTTP/1.1\r\n");
        std::thread::sleep(Duration::from_millis(300));
        srv.signal(libc::SIGTERM);
        assert!(
            wait_refused(&srv),
            "new connections still accepted after SIGTERM"
        );
        let status = srv.stop(second, Duration::from_secs(5));
        assert_eq!(status.code(), Some(0), "exit status: {status}");
        stuck.expect_closed();
    }
});

httptest!(sigint_stops_at_once, |model| {
    let site = site();
    let mut srv = site.serve(model);
    let mut stuck = srv.connect();
    stuck.send("GET /a.txt HTTP/1.1\r\n");
    std::thread::sleep(Duration::from_millis(300));
    let status = srv.stop(libc::SIGINT, Duration::from_secs(5));
    assert_eq!(status.code(), Some(0), "exit status: {status}");
    stuck.expect_closed();
});

/// The lines of the file at `path` that contain `needle`.
fn lines_with(path: &std::path::Path, needle: &str) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

httptest!(
    sigusr1_reopens_the_logs_and_sighup_hands_over_to_a_new_server,
    |model| {
        let site = site();
        site.file("b.txt", "bee");
        let access = site.base().join("access.log");
        let error = site.base().join("error.log");
        let mut srv = site
            .server(model)
            .config(&format!(
                "root = \"root\"\n[log]\naccess = \"{}\"\nerror = \"{}\"\n",
                access.display(),
                error.display()
            ))
            .listening_line_in(error.clone())
            .start();
        srv.get("/a.txt").assert_ok(200, "hello");
        let written = wait_for(Duration::from_secs(3), || {
            (lines_with(&access, "/a.txt") == 1).then_some(())
        });
        assert!(written.is_some(), "no access log line within 3 s");
        // What logrotate does: rename, then signal.
        let (access_old, error_old) = (
            access.with_extension("log.1"),
            error.with_extension("log.1"),
        );
        std::fs::rename(&access, &access_old).unwrap();
        std::fs::rename(&error, &error_old).unwrap();
        srv.signal(libc::SIGUSR1);
        // Reopened within a tick; a request before that would be logged in the old file.
        let reopened = wait_for(Duration::from_secs(3), || access.exists().then_some(()));
        assert!(
            reopened.is_some(),
            "the access log was not reopened within 3 s"
        );
        srv.get("/b.txt").assert_ok(200, "bee");
        let written = wait_for(Duration::from_secs(3), || {
            (lines_with(&access, "/b.txt") == 1).then_some(())
        });
        assert!(
            written.is_some(),
            "no line in the reopened access log within 3 s"
        );
        assert_eq!(lines_with(&access_old, "/a.txt"), 1);
        assert_eq!(lines_with(&access_old, "/b.txt"), 0);
        assert_eq!(lines_with(&access, "/a.txt"), 0);

        // SIGHUP reloads (see reload.rs): a new server takes over, logging to the reopened
        // error log, and the old one leaves, its own exit a success.
        srv.signal(libc::SIGHUP);
        let said = wait_for(Duration::from_secs(5), || {
            (lines_with(&error, "reload: the new server") == 1).then_some(())
        });
        assert!(
            said.is_some(),
            "no reload line in the new error log within 5 s"
        );
        assert_eq!(lines_with(&error_old, "reload"), 0);
        assert_eq!(lines_with(&error_old, "listening on"), 1);
        assert_eq!(lines_with(&error, "listening on"), 1);
        srv.get("/a.txt").assert_ok(200, "hello");
        let status = srv.stop(libc::SIGTERM, Duration::from_secs(5));
        assert_eq!(status.code(), Some(0), "exit status: {status}");
        srv.get("/b.txt").assert_ok(200, "bee");
    }
);

/// The access-log line of `GET /big.bin`, once it is there.
fn big_line(srv: &Server) -> Option<String> {
    srv.stdout()
        .lines()
        .find(|l| l.contains("\"GET /big.bin HTTP/1.1\""))
        .map(str::to_owned)
}

/// The byte count of an access-log line: the field after the status.
fn logged_bytes(line: &str) -> u64 {
    let after = line.split("HTTP/1.1\" ").nth(1).expect("a request line");
    let field = after.split(' ').nth(1).expect("a byte count");
    field.parse().unwrap_or(0)
}

httptest!(
    a_download_cut_short_is_logged_with_the_bytes_sent,
    |model| {
        let site = site();
        site.file("big.bin", large_body());
        // The client goes away mid-download.
        let mut srv = site.serve(model);
        {
            let mut stream = TcpStream::connect(srv.addr()).unwrap();
            stream
                .write_all(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            let mut got = vec![0u8; 65536];
            stream.read_exact(&mut got).unwrap();
        }
        let line = wait_for(Duration::from_secs(5), || big_line(&srv)).expect("no access-log line");
        let bytes = logged_bytes(&line);
        assert!(
            bytes > 0 && bytes < 20_000_000,
            "a download cut short logged as {bytes} bytes: {line}"
        );
        srv.stop(libc::SIGINT, Duration::from_secs(5));

        // A stop whose grace period ends with the download unread.
        let mut srv =
            site.serve_config(model, "root = \"root\"\n[timeouts]\nshutdown = \"500ms\"\n");
        let mut stream = TcpStream::connect(srv.addr()).unwrap();
        stream
            .write_all(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut got = vec![0u8; 65536];
        stream.read_exact(&mut got).unwrap();
        let status = srv.stop(libc::SIGTERM, Duration::from_secs(8));
        assert_eq!(status.code(), Some(0), "exit status: {status}");
        let line = big_line(&srv).expect("no access-log line");
        let bytes = logged_bytes(&line);
        assert!(
            bytes > 0 && bytes < 20_000_000,
            "a download ended by the grace period logged as {bytes} bytes: {line}"
        );
    }
);

/// A figure of `fastpath bench --json`'s output (the first field of that name).
fn figure(json: &str, name: &str) -> u64 {
    let key = format!("\"{name}\": ");
    let at = json
        .find(&key)
        .unwrap_or_else(|| panic!("no {name} in {json}"))
        + key.len();
    let digits: String = json[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap()
}

/// Runs `fastpath bench` at full load on `url` and sends the server SIGTERM in the middle.
fn bench_through_sigterm(srv: &Server, url: &str, keepalive: bool) -> String {
    let mut bench = std::process::Command::new(BIN);
    bench.args([
        "bench", "-q", "--json", "-c", "8", "-t", "1", "-d", "1500ms",
    ]);
    if !keepalive {
        bench.arg("--no-keepalive");
    }
    let bench = bench
        .arg(url)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(600));
    srv.signal(libc::SIGTERM);
    let out = bench.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap()
}

httptest!(no_request_fails_under_load_at_sigterm, |model| {
    let site = site();
    site.file("page.html", vec![b'x'; 3000]);
    let backend = site.serve("epoll");
    let proxied = format!(
        "root = \"root\"\n[[backend]]\nname = \"app\"\naddresses = \"{}\"\n\
         [[route]]\nbackend = \"app\"\nprefix = \"/\"\n",
        backend.addr()
    );
    for (config, what) in [
        ("root = \"root\"\n", "static"),
        (proxied.as_str(), "proxied"),
    ] {
        for keepalive in [true, false] {
            let mut srv = site.serve_config(model, config);
            let json = bench_through_sigterm(&srv, &srv.url("/page.html"), keepalive);
            let exited = wait_for(Duration::from_secs(5), || (!srv.is_running()).then_some(()));
            assert!(exited.is_some(), "{what}: still running 5 s after SIGTERM");
            let status = srv.stop(libc::SIGTERM, Duration::from_secs(1));
            assert_eq!(status.code(), Some(0), "{what}: exit status {status}");
            assert!(figure(&json, "2xx") > 0, "{what}: nothing served: {json}");
            // Refused: connections tried after the listeners closed. Reset: a connection
            // whose handshake the kernel completed in the instant between a listener's last
            // accept and its close (it was never accepted): a few, at most one per client and
            // listener. Anything else is a request the server took and did not answer.
            let errors = figure(&json, "total");
            let (refused, reset) = (figure(&json, "refused"), figure(&json, "reset"));
            assert_eq!(
                errors - refused - reset,
                0,
                "{what}, keep-alive {keepalive}: failed requests: {json}"
            );
            assert!(
                reset <= 16,
                "{what}, keep-alive {keepalive}: {reset} resets: {json}"
            );
        }
    }
});
