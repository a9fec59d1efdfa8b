//! Limits and timeouts: slow and idle clients, connection and descriptor
//! exhaustion, many idle connections, and configured size limits.

use std::thread;
use std::time::{Duration, Instant};

use crate::util::*;

fn site() -> Site {
    let site = Site::new();
    site.file("a.txt", "hello");
    site
}

/// Waits for the server to give up on `c`: a 408 response or the end of the
/// connection, whichever comes first, and returns when that was (from
/// `since`). After a 408 the connection must then end too.
fn ended_after(c: &mut Conn, since: Instant, what: &str) -> Duration {
    let res = c.try_read_response("GET");
    let took = since.elapsed();
    match res {
        Ok(None) => {}
        Ok(Some(r)) => {
            r.assert_status(408);
            if let Err(e) = c.wait_closed(IO_TIMEOUT) {
                panic!("{what}: after the 408: {e}");
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("{what}: the server did not close the connection: {e}"),
    }
    took
}

httptest!(header_timeout, |model| {
    let site = site();
    let srv = site.serve_config(model, "root = \"root\"\n[timeouts]\nheader = \"1s\"\n");
    let mut slow = srv.connect();
    let start = Instant::now();
    slow.send("GET /a.txt HT");
    // Everyone else is served at full speed meanwhile: 50 requests on new and
    // kept-alive connections all finish well before the stalled client is
    // let go (a server stuck on it would only answer after the timeout).
    let mut c = srv.connect();
    for i in 0..50 {
        if i % 10 == 0 {
            c = srv.connect();
        }
        c.exchange(req("GET", "/a.txt", &[]))
            .assert_ok(200, "hello");
    }
    assert!(
        start.elapsed() < Duration::from_millis(900),
        "50 requests took {:?} while a client stalled",
        start.elapsed()
    );
    let took = ended_after(&mut slow, start, "stalled request line");
    assert!(
        took >= Duration::from_millis(900),
        "closed after {took:?}, before the 1 s header timeout"
    );
    assert!(took < Duration::from_secs(3), "closed only after {took:?}");
});

httptest!(silent_connection_closed_after_header_timeout, |model| {
    // Clients that connect and never send a byte get the header timeout too, and then the
    // end of the connection with nothing sent (there is no request to answer), so that they
    // cannot hold every connection slot: with a limit of 3 and 3 silent clients, a real
    // client gets in as soon as they are gone. (A listener with TCP_DEFER_ACCEPT hands such a
    // connection over only after the defer time, which the bounds below allow for.)
    let site = site();
    let srv = site.serve_config(
        model,
        "root = \"root\"\n[timeouts]\nheader = \"1s\"\n[limits]\nmax_connections = 3\n",
    );
    let start = Instant::now();
    let mut silent: Vec<Conn> = (0..3).map(|_| srv.connect()).collect();
    let closers: Vec<_> = silent
        .drain(..)
        .map(|mut c| {
            thread::spawn(move || {
                let how = c.wait_closed(Duration::from_secs(8));
                (how, start.elapsed())
            })
        })
        .collect();
    for closer in closers {
        let (how, took) = closer.join().unwrap();
        if let Err(e) = how {
            panic!("a silent connection: {e}\n{}", srv.report());
        }
        assert!(
            took >= Duration::from_millis(900),
            "closed after {took:?}, before the 1 s header timeout"
        );
    }
    assert!(
        start.elapsed() < Duration::from_secs(6),
        "silent connections were closed only after {:?}",
        start.elapsed()
    );
    let mut c = srv.connect();
    c.exchange(req("GET", "/a.txt", &[]))
        .assert_ok(200, "hello");
});

httptest!(header_timeout_counts_whole_head, |model| {
    let site = site();
    let srv = site.serve_config(model, "root = \"root\"\n[timeouts]\nheader = 1\n");
    // (An integer is a number of seconds.) A client that trickles its head a
    // byte at a time never finishes.
    let mut slow = srv.connect();
    let mut writer = slow.stream().try_clone().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let start = Instant::now();
    let trickle = {
        let stop = stop.clone();
        thread::spawn(move || {
            use std::io::Write;
            let raw = format!(
                "GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
                "p".repeat(100)
            );
            for b in raw.bytes() {
                if stop.load(std::sync::atomic::Ordering::Relaxed)
                    || writer.write_all(&[b]).is_err()
                    || start.elapsed() > Duration::from_secs(4)
                {
                    break;
                }
                thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let took = ended_after(&mut slow, start, "trickled head");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    trickle.join().unwrap();
    assert!(
        took < Duration::from_secs(3),
        "a trickling client held on for {took:?}"
    );
});

httptest!(keepalive_timeout, |model| {
    let site = site();
    let srv = site.serve_config(model, "root = \"root\"\n[timeouts]\nkeepalive = \"1s\"\n");
    // Each request starts the idle time anew.
    let mut c = srv.connect();
    for _ in 0..3 {
        c.exchange(req("GET", "/a.txt", &[]))
            .assert_ok(200, "hello");
        thread::sleep(Duration::from_millis(500));
    }
    c.exchange(req("GET", "/a.txt", &[]))
        .assert_ok(200, "hello");
    let idle = Instant::now();
    match c.wait_closed(Duration::from_secs(4)) {
        Ok(_) => {}
        Err(e) => panic!("idle keep-alive connection: {e}"),
    }
    let took = idle.elapsed();
    assert!(
        took >= Duration::from_millis(900),
        "closed after {took:?}, before the 1 s keep-alive timeout"
    );
    assert!(took < Duration::from_secs(3), "closed only after {took:?}");
});

httptest!(keepalive_timeout_in_milliseconds, |model| {
    let site = site();
    let srv = site.serve_config(
        model,
        "root = \"root\"\n[timeouts]\nkeepalive = \"300ms\"\n",
    );
    let mut c = srv.connect();
    c.exchange(req("GET", "/a.txt", &[]))
        .assert_ok(200, "hello");
    let idle = Instant::now();
    if let Err(e) = c.wait_closed(Duration::from_secs(3)) {
        panic!("idle keep-alive connection: {e}");
    }
    let took = idle.elapsed();
    assert!(took >= Duration::from_millis(250), "closed after {took:?}");
    assert!(
        took < Duration::from_millis(2000),
        "closed only after {took:?}"
    );
});

httptest!(max_requests_per_connection, |model| {
    let site = site();
    let srv = site.serve_config(
        model,
        "root = \"root\"\n[limits]\nmax_requests_per_connection = 3\n",
    );
    let mut c = srv.connect();
    let mut all = String::new();
    for _ in 0..5 {
        all.push_str(&req("GET", "/a.txt", &[]));
    }
    c.send(all);
    let rs = c.read_responses(&["GET"; 3]);
    for r in &rs {
        r.assert_ok(200, "hello");
    }
    assert!(!rs[0].connection_has("close"), "{}", rs[0]);
    assert!(
        rs[2].connection_has("close"),
        "the last response must say close:\n{}",
        rs[2]
    );
    if let Err(e) = c.wait_closed(IO_TIMEOUT) {
        panic!("after the third response: {e}");
    }
});

httptest!(max_connections, |model| {
    let site = site();
    let srv = site.serve_config(model, "root = \"root\"\n[limits]\nmax_connections = 4\n");
    let mut held: Vec<Conn> = (0..4)
        .map(|_| {
            let mut c = srv.connect();
            c.exchange(req("GET", "/a.txt", &[]))
                .assert_ok(200, "hello");
            c
        })
        .collect();
    // The fifth is closed at once, possibly after a 503. (It sends its
    // request, as clients do: a listener with TCP_DEFER_ACCEPT only hands
    // over connections that have data.)
    for _ in 0..3 {
        let mut extra = srv.connect();
        let start = Instant::now();
        let _ = extra.try_send(req("GET", "/a.txt", &[]));
        match extra.try_read_response("GET") {
            Ok(None) => {}
            Ok(Some(r)) => {
                r.assert_status(503);
                if let Err(e) = extra.wait_closed(IO_TIMEOUT) {
                    panic!("connection over the limit, after the 503: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("connection over the limit was not closed: {e}"),
        }
        assert!(start.elapsed() < Duration::from_secs(2));
    }
    // The four still work.
    for c in &mut held {
        c.exchange(req("GET", "/a.txt", &[]))
            .assert_ok(200, "hello");
    }
    // Once one goes, a new client gets in.
    held.pop();
    let served = wait_for(Duration::from_secs(3), || {
        let mut c = srv.connect();
        c.send(req("GET", "/a.txt", &[]));
        match c.try_read_response("GET") {
            Ok(Some(r)) if r.status == 200 => Some(c),
            _ => {
                thread::sleep(Duration::from_millis(50));
                None
            }
        }
    });
    let mut c = served.expect("no connection served within 3 s after one closed");
    c.exchange(req("GET", "/a.txt", &[]))
        .assert_ok(200, "hello");
});

httptest!(descriptor_exhaustion, |model| {
    let site = site();
    let mut srv = site.server(model).nofile(64).start();
    srv.get("/a.txt").assert_ok(200, "hello");
    let mut conns = Vec::new();
    for _ in 0..100 {
        let c = Conn::open(srv.addr());
        conns.push(c);
    }
    // Ask on all of them: some are served, the rest wait or are refused.
    for c in &mut conns {
        let _ = c.try_send(req("GET", "/a.txt", &[]));
    }
    // A prefork child holds one connection, so no process comes near its descriptor limit:
    // the pool grows instead, and there is nothing to report.
    if model != "prefork" {
        let said = wait_for(Duration::from_secs(5), || {
            let err = srv.stderr();
            (err.contains("descriptors") || err.contains("Too many open files")).then_some(())
        });
        assert!(
            said.is_some(),
            "the error log does not mention running out of descriptors"
        );
    }
    assert!(srv.is_running(), "the server died");
    drop(conns);
    // After the clients leave, service is back to normal.
    let ok = wait_for(Duration::from_secs(5), || {
        let mut c = srv.connect();
        c.send(req("GET", "/a.txt", &[]));
        match c.try_read_response("GET") {
            Ok(Some(r)) if r.status == 200 && r.body == b"hello" => Some(()),
            _ => None,
        }
    });
    assert!(
        ok.is_some(),
        "not serving again 5 s after the connections closed"
    );
    // Repeatedly.
    for _ in 0..20 {
        srv.get("/a.txt").assert_ok(200, "hello");
    }
    assert!(srv.is_running());
});

httptest!(thousand_idle_keepalive_connections, |model| {
    let limit = raise_nofile();
    if limit < 2200 {
        skip(
            "thousand_idle_keepalive_connections",
            Missing::Installable,
            &format!("RLIMIT_NOFILE is {limit}, need 2200 (raise ulimit -n)"),
        );
        return;
    }
    let site = site();
    // In the pool models an idle keep-alive connection holds a thread or a process (as in
    // Apache's worker and prefork MPMs): the pool is sized for the test, a little larger than
    // the idle connections, so that the other client still finds room. Processes are heavier,
    // so the prefork run holds fewer.
    let (idle_count, srv) = match model {
        "threads" => (
            1000,
            site.serve_config(model, "root = \"root\"\n[threads]\nthreads = 1010\n"),
        ),
        "prefork" => (
            200,
            site.serve_config(model, "root = \"root\"\n[prefork]\nmax_children = 210\n"),
        ),
        _ => (1000, site.serve(model)),
    };
    let mut idle: Vec<Conn> = Vec::with_capacity(idle_count);
    for _ in 0..idle_count {
        let mut c = srv.connect();
        c.exchange(req("GET", "/a.txt", &[]))
            .assert_ok(200, "hello");
        idle.push(c);
    }
    // Another client completes 200 requests while they sit there.
    let start = Instant::now();
    let mut c = srv.connect();
    for i in 0..200 {
        if i % 50 == 0 {
            c = srv.connect();
        }
        c.exchange(req("GET", "/a.txt", &[]))
            .assert_ok(200, "hello");
    }
    let took = start.elapsed();
    assert!(took < Duration::from_secs(5), "200 requests took {took:?}");
    // All of them are still open and usable.
    for (i, c) in idle.iter_mut().enumerate() {
        c.send(req("GET", "/a.txt", &[]));
        match c.try_read_response("GET") {
            Ok(Some(r)) => r.assert_ok(200, "hello"),
            other => panic!("idle connection {i}: {other:?}"),
        };
    }
});

httptest!(configured_size_limits, |model| {
    let site = site();
    let srv = site.serve_config(
        model,
        "root = \"root\"\n[limits]\nmax_request_line = 100\nmax_header_bytes = 600\nmax_headers = 5\n",
    );
    let check = |raw: String, status: u16| {
        let mut c = srv.connect();
        let r = c.exchange(&raw);
        assert_eq!(r.status, status, "request {raw:?}; response:\n{r}");
        if status != 200 {
            if let Err(e) = c.wait_closed(IO_TIMEOUT) {
                panic!("after the {status}: {e}");
            }
        }
    };
    check(
        format!("GET /a.txt?{} HTTP/1.1\r\nHost: x\r\n\r\n", "q".repeat(60)),
        200,
    );
    check(
        format!("GET /a.txt?{} HTTP/1.1\r\nHost: x\r\n\r\n", "q".repeat(150)),
        414,
    );
    check(
        format!(
            "GET /a.txt HTTP/1.1\r\nHost: x\r\nX-A: {}\r\n\r\n",
            "v".repeat(400)
        ),
        200,
    );
    check(
        format!(
            "GET /a.txt HTTP/1.1\r\nHost: x\r\nX-A: {}\r\n\r\n",
            "v".repeat(800)
        ),
        431,
    );
    check(
        "GET /a.txt HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n".into(),
        200,
    );
    check(
        "GET /a.txt HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n".into(),
        431,
    );
});

httptest!(send_timeout_drops_stalled_reader, |model| {
    let site = site();
    // Larger than everything the socket buffers of both ends can hold.
    let size = 64 * 1024 * 1024;
    site.file("big.bin", vec![b'b'; size]);
    let srv = site.serve_config(model, "root = \"root\"\n[timeouts]\nsend = \"1s\"\n");
    let mut c = srv.connect();
    c.send(req("GET", "/big.bin", &[]));
    // Read nothing for a while: the server can make no progress and gives up.
    thread::sleep(Duration::from_secs(3));
    let mut received = 0usize;
    let mut buf = vec![0u8; 1 << 20];
    let ended = loop {
        use std::io::Read;
        match c.stream().read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => received += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => break false,
        }
        if received > size {
            break false;
        }
    };
    assert!(ended, "the connection did not end");
    assert!(
        received < size,
        "received {received} bytes: the whole response, the stalled reader was not dropped"
    );
    // Others are served as usual.
    srv.get("/a.txt").assert_ok(200, "hello");
});

httptest!(send_buffer_sets_the_client_sockets_sndbuf, |model| {
    // A file many times the buffer is sent whole (through many full-buffer waits), twice on
    // one connection, and the server's end of it has the configured buffer (doubled by the
    // kernel for its bookkeeping), which ss reports as `tb`.
    let site = Site::new();
    let body: Vec<u8> = (0..3 * 1024 * 1024u32)
        .map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()[3])
        .collect();
    site.file("big.bin", &body);
    let srv = site.serve_config(
        model,
        "root = \"root\"\n[limits]\nsend_buffer = \"64KiB\"\n[log]\naccess = \"off\"\n",
    );
    let mut conn = Conn::open(srv.addr());
    for _ in 0..2 {
        let r = conn.exchange("GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(r.status, 200, "{r}");
        assert!(r.body == body, "{} bytes, not the file", r.body.len());
    }
    let port = srv.addr().port();
    let ss = std::process::Command::new("ss")
        .args([
            "-tmnH",
            "state",
            "established",
            "sport",
            "=",
            &format!(":{port}"),
        ])
        .output();
    let Ok(ss) = ss else {
        skip(
            "limits::send_buffer_sets_the_client_sockets_sndbuf",
            Missing::Installable,
            "no ss (iproute2)",
        );
        return;
    };
    let text = String::from_utf8_lossy(&ss.stdout);
    let listening = std::process::Command::new("ss")
        .args(["-tlmnH", "sport", "=", &format!(":{port}")])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    assert!(
        text.contains("tb131072"),
        "port {port}, ss -tm:\n{text}\nlistening:\n{listening}"
    );
});

#[test]
fn send_buffer_must_be_a_size() {
    let site = site();
    let config = site.config("root = \"root\"\n[limits]\nsend_buffer = \"lots\"\n");
    let out = std::process::Command::new(BIN)
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("send_buffer"), "{text}");
}
