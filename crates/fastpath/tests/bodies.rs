//! Request bodies sent to static paths: read and discarded, never taken for
//! the next request; too large ones end the connection.

use std::thread;
use std::time::Duration;

use crate::util::*;

fn site() -> Site {
    let site = Site::new();
    site.file("a.txt", "hello");
    site
}

httptest!(content_length_body_then_pipelined_get, |model| {
    let site = site();
    let srv = site.serve(model);
    let mut c = srv.connect();
    // The body looks like a request: it must not be taken for one.
    let body = "GET /";
    c.send(format!(
        "POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n{body}{}",
        req("GET", "/a.txt", &[])
    ));
    let rs = c.read_responses(&["POST", "GET"]);
    rs[0].assert_status(405).assert_common(false);
    rs[0].assert_header("allow", "GET, HEAD");
    rs[1].assert_ok(200, "hello");
    c.expect_open_for(Duration::from_millis(200));
});

httptest!(body_arrives_later, |model| {
    let site = site();
    let srv = site.serve(model);
    let mut c = srv.connect();
    c.send("PUT /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhel");
    thread::sleep(Duration::from_millis(100));
    c.send("lo w");
    thread::sleep(Duration::from_millis(100));
    c.send(format!("orld{}", req("GET", "/a.txt", &[])));
    let rs = c.read_responses(&["PUT", "GET"]);
    rs[0].assert_status(405);
    rs[1].assert_ok(200, "hello");
});

httptest!(chunked_body_then_pipelined_get, |model| {
    let site = site();
    let srv = site.serve(model);
    let mut c = srv.connect();
    c.send(format!(
        "POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
         5\r\nhello\r\n1;ext=1\r\n!\r\nA\r\nGET / HTTP\r\n0\r\nX-Trailer: yes\r\n\r\n{}",
        req("GET", "/a.txt", &[])
    ));
    let rs = c.read_responses(&["POST", "GET"]);
    rs[0].assert_status(405).assert_common(false);
    rs[1].assert_ok(200, "hello");
    c.expect_open_for(Duration::from_millis(200));
});

httptest!(chunked_body_in_pieces, |model| {
    let site = site();
    let srv = site.serve(model);
    let mut c = srv.connect();
    let raw = format!(
        "DELETE /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
         3\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n{}",
        req("GET", "/a.txt", &[])
    );
    for piece in raw.as_bytes().chunks(4) {
        c.send(piece);
        thread::sleep(Duration::from_millis(2));
    }
    let rs = c.read_responses(&["DELETE", "GET"]);
    rs[0].assert_status(405);
    rs[1].assert_ok(200, "hello");
});

httptest!(get_with_body, |model| {
    let site = site();
    let srv = site.serve(model);
    let mut c = srv.connect();
    c.send(format!(
        "GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n\r\nignored{}",
        req("GET", "/a.txt", &[])
    ));
    let rs = c.read_responses(&["GET", "GET"]);
    rs[0].assert_ok(200, "hello");
    rs[1].assert_ok(200, "hello");
});

httptest!(body_of_discard_limit_size_is_discarded, |model| {
    let site = site();
    let srv = site.serve_config(
        model,
        "root = \"root\"\n[limits]\nmax_discard_body = 4096\n",
    );
    let mut c = srv.connect();
    let body = "x".repeat(4096);
    c.send(format!(
        "POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n{body}{}",
        req("GET", "/a.txt", &[])
    ));
    let rs = c.read_responses(&["POST", "GET"]);
    rs[0].assert_status(405);
    rs[1].assert_ok(200, "hello");
});

/// Sends a large body from another thread (the server may stop reading),
/// then expects one 405 and the end of the connection.
fn expect_405_then_close(srv: &Server, head: String, body: Vec<u8>) {
    let mut c = srv.connect();
    c.send(head);
    let mut writer = c.stream().try_clone().unwrap();
    let sender = thread::spawn(move || {
        use std::io::Write;
        // Errors are expected once the server closes.
        let _ = writer.write_all(&body);
        let _ = writer.write_all(req("GET", "/a.txt", &[]).as_bytes());
    });
    let r = c.read_final_response();
    r.assert_status(405).assert_common(false);
    if let Err(e) = c.wait_closed(IO_TIMEOUT) {
        panic!("after the 405 for a body over max_discard_body: {e}");
    }
    sender.join().unwrap();
}

httptest!(body_over_discard_limit_closes, |model| {
    let site = site();
    let srv = site.serve_config(
        model,
        "root = \"root\"\n[limits]\nmax_discard_body = 1024\n",
    );
    let n = 256 * 1024;
    expect_405_then_close(
        &srv,
        format!("POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: {n}\r\n\r\n"),
        vec![b'x'; n],
    );
    // Chunked, where the size is only known while reading.
    let mut body = Vec::new();
    for _ in 0..64 {
        body.extend_from_slice(b"1000\r\n");
        body.extend_from_slice(&[b'y'; 0x1000]);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"0\r\n\r\n");
    expect_405_then_close(
        &srv,
        "POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_string(),
        body,
    );
    srv.get("/a.txt").assert_ok(200, "hello");
});

httptest!(default_discard_limit_is_one_mib, |model| {
    let site = site();
    let srv = site.serve(model);
    // 1 MiB is read and discarded.
    let n = 1024 * 1024;
    let mut c = srv.connect();
    c.send(format!(
        "POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: {n}\r\n\r\n"
    ));
    let mut writer = c.stream().try_clone().unwrap();
    let sender = thread::spawn(move || {
        use std::io::Write;
        writer.write_all(&vec![b'z'; n]).unwrap();
        writer
            .write_all(req("GET", "/a.txt", &[]).as_bytes())
            .unwrap();
    });
    let rs = c.read_responses(&["POST", "GET"]);
    rs[0].assert_status(405);
    rs[1].assert_ok(200, "hello");
    sender.join().unwrap();
    // 2 MiB is not.
    let n = 2 * 1024 * 1024;
    expect_405_then_close(
        &srv,
        format!("POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: {n}\r\n\r\n"),
        vec![b'z'; n],
    );
});

httptest!(expect_100_continue, |model| {
    let site = site();
    let srv = site.serve(model);
    // GET with an expectation and no body: answered normally.
    let mut c = srv.connect();
    c.send(req("GET", "/a.txt", &[("Expect", "100-continue")]));
    c.read_final_response().assert_ok(200, "hello");
    // A POST that waits for 100 Continue before sending its body gets either
    // the interim response or the final 405 straight away, never silence.
    let mut c = srv.connect();
    c.send("POST /a.txt HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
    let first = c.read_response();
    if first.status == 100 {
        c.send("hello");
        c.read_response().assert_status(405);
    } else {
        first.assert_status(405);
    }
});
