//! Malformed and unacceptable requests over real sockets, on every model: each gets a
//! precise status, and then the server closes the connection without reading another
//! request. The parser's verdicts on heads (request lines, versions, limits, fields,
//! framing) and the handler's answers to them are checked in memory, in the server's
//! `glue_tests.rs` and the parser's own tests; what is here takes the sockets themselves
//! (a handshake refused at once, bodies, a server that survives a stream of garbage).

use std::time::Duration;

use crate::util::*;

fn site() -> Site {
    let site = Site::new();
    site.file("a.txt", "hello");
    site
}

/// Sends `raw` followed by a valid pipelined request, and asserts that the
/// answer is one response with `status`, after which the connection closes
/// (the pipelined request is never answered).
#[track_caller]
fn rejects(srv: &Server, raw: impl AsRef<[u8]>, status: u16) {
    let raw = raw.as_ref();
    let mut c = srv.connect();
    let mut all = raw.to_vec();
    all.extend_from_slice(req("GET", "/a.txt", &[]).as_bytes());
    c.send(&all);
    let r = c.read_response();
    assert_eq!(
        r.status,
        status,
        "request {:?}; response:\n{r}",
        String::from_utf8_lossy(raw)
    );
    r.assert_common(false);
    if let Err(e) = c.wait_closed(IO_TIMEOUT) {
        panic!(
            "request {:?}: after the {status} response: {e}",
            String::from_utf8_lossy(raw)
        );
    }
}

httptest!(tls_handshake_is_rejected_at_once, |model| {
    let site = site();
    let srv = site.serve(model);
    // The start of a TLS ClientHello: no line end will ever come, and the
    // first byte is already not a method token.
    let hello = [
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03, 0xaa, 0xbb,
    ];
    let mut c = srv.connect();
    c.send(hello);
    let start = std::time::Instant::now();
    let r = c.read_response();
    r.assert_status(400).assert_common(false);
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "took {:?}",
        start.elapsed()
    );
    c.expect_closed();
});

httptest!(bad_chunked_body, |model| {
    let site = site();
    let srv = site.serve(model);
    for body in [
        "zz\r\nhello\r\n0\r\n\r\n",
        "5\r\nhelloXX0\r\n\r\n",
        "-5\r\nhello\r\n0\r\n\r\n",
        "fffffffffffffffffffffff\r\n",
    ] {
        let raw =
            format!("POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{body}");
        let mut c = srv.connect();
        c.send(format!("{raw}{}", req("GET", "/a.txt", &[])));
        // The server may answer the method (405) before it meets the broken
        // body, or the body (400) first; either way the connection ends there.
        let r = c.read_response();
        assert!(
            r.status == 400 || r.status == 405,
            "chunked body {body:?}; response:\n{r}"
        );
        if let Err(e) = c.wait_closed(IO_TIMEOUT) {
            panic!(
                "chunked body {body:?}: after the {} response: {e}",
                r.status
            );
        }
    }
});

httptest!(bad_absolute_form_targets_close_the_connection, |model| {
    // Like every other malformed request: a 400, then the end of the connection.
    let site = site();
    let srv = site.serve(model);
    for target in [
        "http://user@h/a.txt",
        "ftp://x/a.txt",
        "http://h:99999/a.txt",
        "http://[::1/a.txt",
    ] {
        rejects(
            &srv,
            format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n"),
            400,
        );
    }
});

httptest!(server_survives_bad_input, |model| {
    let site = site();
    let srv = site.serve(model);
    for raw in [
        &b"\r\n\r\n\r\n\r\nGET"[..],
        b"\xff\xfe\xfd\r\n\r\n",
        b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: \xff\r\n\r\n",
    ] {
        let mut c = srv.connect();
        c.send(raw);
        c.shutdown_write();
        // Whatever the answer, the server neither hangs nor dies.
        let _ = c.try_read_response("GET");
    }
    srv.get("/a.txt").assert_ok(200, "hello");
});

/// Chunked bodies that lenient readers take in different ways (the "funky
/// chunks" smuggling class): a bare LF ending a size line or chunk data, a
/// bare ';', whitespace after the size, trailer lines that are not fields or
/// carry framing fields. Each comes with a request after it, inside the body
/// or after its end, that must never be served or relayed.
const FUNKY_CHUNKS: &[&[u8]] = &[
    b"2;\nxx\r\n45\r\n0\r\n\r\nGET /raw/smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
    b"2;\r\nxx\r\n0\r\n\r\nGET /raw/smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
    b"5;foo\nhello\r\n0\r\n\r\nGET /raw/smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
    b"5\r\nhello\n0\r\n\r\nGET /raw/smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
    b"5 \r\nhello\r\n0\r\n\r\nGET /raw/smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
    b"0\r\nhello\r\n\r\nGET /raw/smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
    b"0\r\nX: a\x00b\r\n\r\nGET /raw/smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
    b"0\r\nX: a\r\n b\r\n\r\nGET /raw/smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
    b"0\r\nContent-Length: 44\r\n\r\nGET /raw/smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
    b"0\r\nTransfer-Encoding: chunked\r\n\r\nGET /raw/smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
];

/// A backend that answers nothing and records all a connection brings, to
/// its end.
fn record(mut stream: std::net::TcpStream, log: &crate::handover::BackendLog) {
    use std::io::Read;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    log.requests
        .lock()
        .unwrap()
        .push(String::from_utf8_lossy(&raw).into_owned());
    if let Some(ends) = log.ends.lock().unwrap().as_ref() {
        let _ = ends.send(());
    }
}

httptest!(funky_chunks_are_refused_static_and_proxied, |model| {
    use std::sync::atomic::Ordering;
    let backend = crate::handover::Backend::start(record);
    let (ends_tx, ends) = std::sync::mpsc::channel();
    *backend.log.ends.lock().unwrap() = Some(ends_tx);
    let site = site();
    let srv = site.serve_config(
        model,
        &format!(
            "root = \"root\"\n[timeouts]\nlinger = \"1s\"\n[[backend]]\nname = \"app\"\n\
             addresses = \"{}\"\nconnect_timeout = \"1s\"\nresponse_timeout = \"5s\"\n\
             [[route]]\nbackend = \"app\"\nprefix = \"/raw/\"\n",
            backend.addr
        ),
    );
    for body in FUNKY_CHUNKS {
        let show = String::from_utf8_lossy(body);
        // A static path answers before it reads the body (405 for POST); the
        // body then ends the connection, and nothing after it is served.
        let mut raw =
            b"POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        raw.extend_from_slice(body);
        raw.extend_from_slice(req("GET", "/a.txt", &[]).as_bytes());
        let mut c = srv.connect();
        c.send(&raw);
        let r = c.read_response();
        assert!(
            r.status == 405 || r.status == 400,
            "static, body {show:?}; response:\n{r}"
        );
        if let Err(e) = c.wait_closed(IO_TIMEOUT) {
            panic!("static, body {show:?}: after the {}: {e}", r.status);
        }
        // A proxied path refuses it with 400 and closes; the backend gets
        // nothing from the first bad byte on.
        let mut raw =
            b"POST /raw/x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        raw.extend_from_slice(body);
        rejects(&srv, &raw, 400);
        // The same with the body's first bytes relayed before the rest comes.
        let head_len = raw.len() - body.len();
        let mut c = srv.connect();
        c.send(&raw[..head_len + 2]);
        std::thread::sleep(Duration::from_millis(30));
        c.send(&raw[head_len + 2..]);
        let r = c.read_response();
        assert_eq!(r.status, 400, "proxied in two parts, body {show:?}");
        if let Err(e) = c.wait_closed(IO_TIMEOUT) {
            panic!("proxied in two parts, body {show:?}: after the 400: {e}");
        }
    }
    // Every backend connection was dropped (a body cut short cannot be
    // reused), and none carried a second request.
    std::thread::sleep(Duration::from_millis(200));
    let connections = backend.log.connections.load(Ordering::SeqCst);
    for _ in 0..connections {
        ends.recv_timeout(IO_TIMEOUT)
            .expect("a backend connection left open after a refused body");
    }
    let seen = backend.log.requests.lock().unwrap().clone();
    assert_eq!(seen.len(), connections);
    for raw in &seen {
        assert!(
            raw.is_empty() || raw.starts_with("POST /raw/x HTTP/1.1\r\n"),
            "{raw:?}"
        );
        assert!(raw.matches(" HTTP/1.1\r\n").count() <= 1, "{raw:?}");
        assert!(
            !raw.contains("smuggled") && !raw.contains("/a.txt"),
            "{raw:?}"
        );
    }
});
