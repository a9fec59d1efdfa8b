//! Methods, HEAD, keep-alive, pipelining, request targets, Host rules,
//! content types and the fields every response carries.

use std::thread;
use std::time::Duration;

use crate::util::*;

fn site() -> Site {
    let site = Site::new();
    site.file("a.txt", "hello");
    site.file("b.txt", "world!\n");
    site.set_mtime("a.txt", jan_2020());
    site
}

httptest!(get_file, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    let r = srv.get("/a.txt");
    r.assert_ok(200, "hello").assert_common(false);
    r.assert_header("content-type", "text/plain; charset=utf-8");
    r.assert_header("content-length", "5");
    r.assert_header("accept-ranges", "bytes");
    r.assert_header("last-modified", "Wed, 01 Jan 2020 00:00:00 GMT");
    let etag = r.expect_header("etag");
    assert!(
        etag.starts_with('"') && etag.ends_with('"') && etag.len() > 2,
        "ETag must be strong and quoted: {etag:?}"
    );
    if !is_over_h2() {
        // HTTP/2 has no reason phrase.
        assert_eq!(r.reason, "OK", "{r}");
    }
});

httptest!(not_found, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    let r = srv.get("/missing.txt");
    r.assert_status(404).assert_common(false);
    let r = srv.get("/no/such/dir/file.txt");
    r.assert_status(404).assert_common(false);
});

httptest!(query_string_is_ignored, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    srv.get("/a.txt?x=1&y=%2F..").assert_ok(200, "hello");
    srv.get("/a.txt?").assert_ok(200, "hello");
});

httptest!(empty_file, h2, |model| {
    let site = site();
    site.file("empty.txt", "");
    let srv = site.serve(model);
    let r = srv.get("/empty.txt");
    r.assert_ok(200, "").assert_common(false);
    r.assert_header("content-length", "0");
});

httptest!(large_file_is_exact, |model| {
    let site = site();
    let data = noise(3 * 1024 * 1024 + 17, 7);
    site.file("big.bin", &data);
    let srv = site.serve(model);
    let r = srv.get("/big.bin");
    r.assert_status(200).assert_common(false);
    r.assert_header("content-type", "application/octet-stream");
    assert!(r.body == data, "the 3 MiB body differs from the file");
    // Twice more on one connection: the second and third come from whatever
    // cache the server keeps.
    let mut c = srv.connect();
    for _ in 0..2 {
        let r = c.exchange(req("GET", "/big.bin", &[]));
        r.assert_status(200);
        assert!(r.body == data, "the 3 MiB body differs from the file");
    }
});

httptest!(head_matches_get, |model| {
    let site = site();
    let srv = site.serve(model);
    let get = srv.get("/a.txt");
    let mut c = srv.connect();
    let head = c.exchange(req("HEAD", "/a.txt", &[]));
    head.assert_status(200).assert_common(true);
    assert!(head.body.is_empty());
    let strip = |r: &Response| {
        let mut h: Vec<(String, String)> = r
            .headers
            .iter()
            .filter(|(n, _)| !n.eq_ignore_ascii_case("date"))
            .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
            .collect();
        h.sort();
        h
    };
    assert_eq!(strip(&head), strip(&get), "HEAD:\n{head}\nGET:\n{get}");
    // No body bytes leaked: the next response on the connection is intact.
    c.exchange(req("GET", "/b.txt", &[]))
        .assert_ok(200, "world!\n");
    // HEAD of a missing file: 404 with no body either.
    let head = c.exchange(req("HEAD", "/missing", &[]));
    head.assert_status(404).assert_common(true);
    c.exchange(req("GET", "/a.txt", &[]))
        .assert_ok(200, "hello");
});

httptest!(other_methods_get_405, |model| {
    let site = site();
    let srv = site.serve(model);
    for method in ["POST", "PUT", "DELETE", "OPTIONS", "TRACE", "PATCH"] {
        let mut c = srv.connect();
        let r = c.exchange(req(method, "/a.txt", &[("Content-Length", "0")]));
        r.assert_status(405).assert_common(false);
        r.assert_header("allow", "GET, HEAD");
        // 405 is an ordinary answer: the connection stays usable.
        c.exchange(req("GET", "/a.txt", &[]))
            .assert_ok(200, "hello");
    }
    let r = srv.request("CONNECT localhost:443 HTTP/1.1\r\nHost: localhost:443\r\n\r\n");
    r.assert_status(405).assert_common(false);
    r.assert_header("allow", "GET, HEAD");
    // Whatever the path.
    let r = srv.request(req("DELETE", "/missing", &[]));
    r.assert_status(405);
    r.assert_header("allow", "GET, HEAD");
});

httptest!(unknown_method_gets_501, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    for method in ["FOO", "BREW", "PROPFIND-X"] {
        let r = srv.request(req(method, "/a.txt", &[]));
        r.assert_status(501).assert_common(false);
    }
});

httptest!(keepalive_is_default_in_http11, |model| {
    let site = site();
    let srv = site.serve(model);
    let mut c = srv.connect();
    for _ in 0..5 {
        let r = c.exchange(req("GET", "/a.txt", &[]));
        r.assert_ok(200, "hello");
        assert!(!r.connection_has("close"), "{r}");
        let r = c.exchange(req("GET", "/b.txt", &[]));
        r.assert_ok(200, "world!\n");
    }
    c.expect_open_for(Duration::from_millis(300));
});

httptest!(keepalive_in_http10_only_when_asked, |model| {
    let site = site();
    let srv = site.serve(model);
    let mut c = srv.connect();
    let r = c.exchange("GET /a.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    r.assert_ok(200, "hello").assert_common(false);
    assert!(r.connection_has("keep-alive"), "{r}");
    let r = c.exchange("GET /b.txt HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
    r.assert_ok(200, "world!\n");
    assert!(r.connection_has("keep-alive"), "{r}");
    // Without it the server closes after the response.
    let r = c.exchange("GET /a.txt HTTP/1.0\r\n\r\n");
    r.assert_ok(200, "hello").assert_common(false);
    assert!(!r.connection_has("keep-alive"), "{r}");
    c.expect_closed();
    // The same from the first request.
    let mut c = srv.connect();
    c.exchange("GET /a.txt HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .assert_ok(200, "hello");
    c.expect_closed();
});

httptest!(connection_close_closes, |model| {
    let site = site();
    let srv = site.serve(model);
    let mut c = srv.connect();
    c.exchange(req("GET", "/a.txt", &[]))
        .assert_ok(200, "hello");
    let r = c.exchange(req("GET", "/b.txt", &[("Connection", "close")]));
    r.assert_ok(200, "world!\n");
    assert!(r.connection_has("close"), "{r}");
    c.expect_closed();
    // Also for an error response.
    let mut c = srv.connect();
    let r = c.exchange(req("GET", "/missing", &[("Connection", "close")]));
    r.assert_status(404);
    assert!(r.connection_has("close"), "{r}");
    c.expect_closed();
});

httptest!(pipelined_requests_in_order, |model| {
    let site = site();
    let srv = site.serve(model);
    let mut c = srv.connect();
    let mut all = String::new();
    all.push_str(&req("GET", "/a.txt", &[]));
    all.push_str(&req("GET", "/b.txt", &[]));
    all.push_str(&req("GET", "/missing", &[]));
    all.push_str(&req("HEAD", "/b.txt", &[]));
    all.push_str(&req("GET", "/a.txt", &[]));
    c.send(&all);
    let rs = c.read_responses(&["GET", "GET", "GET", "HEAD", "GET"]);
    rs[0].assert_ok(200, "hello");
    rs[1].assert_ok(200, "world!\n");
    rs[2].assert_status(404);
    rs[3]
        .assert_ok(200, "")
        .assert_header("content-length", "7");
    rs[4].assert_ok(200, "hello");
    c.expect_open_for(Duration::from_millis(200));
});

httptest!(pipelined_burst, |model| {
    let site = site();
    let srv = site.serve(model);
    let mut c = srv.connect();
    let mut all = String::new();
    for i in 0..200 {
        let path = if i % 2 == 0 { "/a.txt" } else { "/b.txt" };
        all.push_str(&req("GET", path, &[]));
    }
    c.send(&all);
    for i in 0..200 {
        let r = c.read_response();
        if i % 2 == 0 {
            r.assert_ok(200, "hello");
        } else {
            r.assert_ok(200, "world!\n");
        }
    }
});

httptest!(request_split_into_pieces, |model| {
    let site = site();
    let srv = site.serve(model);
    let mut c = srv.connect();
    let raw = req("GET", "/a.txt", &[("User-Agent", "pieces")]);
    for b in raw.as_bytes().chunks(3) {
        c.send(b);
        thread::sleep(Duration::from_millis(5));
    }
    c.read_response().assert_ok(200, "hello");
});

httptest!(absolute_form_target, |model| {
    let site = site();
    let srv = site.serve(model);
    let r = srv.request("GET http://localhost/a.txt HTTP/1.1\r\nHost: localhost\r\n\r\n");
    r.assert_ok(200, "hello");
    let r = srv.request(format!(
        "GET http://{}/b.txt?q=1 HTTP/1.1\r\nHost: {}\r\n\r\n",
        srv.addr(),
        srv.addr()
    ));
    r.assert_ok(200, "world!\n");
});

httptest!(http11_requires_host, |model| {
    let site = site();
    let srv = site.serve(model);
    let mut c = srv.connect();
    let r = c.exchange("GET /a.txt HTTP/1.1\r\nUser-Agent: x\r\n\r\n");
    r.assert_status(400).assert_common(false);
    c.expect_closed();
    // HTTP/1.0 does not need one.
    srv.request("GET /a.txt HTTP/1.0\r\n\r\n")
        .assert_ok(200, "hello");
    // An empty Host is allowed (RFC 9112 section 3.2) and picks the default host.
    srv.request("GET /a.txt HTTP/1.1\r\nHost:\r\n\r\n")
        .assert_ok(200, "hello");
});

httptest!(responses_are_http11, |model| {
    let site = site();
    let srv = site.serve(model);
    let r = srv.request("GET /a.txt HTTP/1.0\r\n\r\n");
    assert_eq!(r.version, "HTTP/1.1", "{r}");
    let r = srv.get("/a.txt");
    assert_eq!(r.version, "HTTP/1.1", "{r}");
});

httptest!(content_types, h2, |model| {
    let site = site();
    let cases = [
        ("page.html", "text/html; charset=utf-8"),
        ("page.htm", "text/html; charset=utf-8"),
        ("style.css", "text/css; charset=utf-8"),
        ("app.js", "text/javascript; charset=utf-8"),
        ("data.json", "application/json; charset=utf-8"),
        ("pic.svg", "image/svg+xml; charset=utf-8"),
        ("pic.png", "image/png"),
        ("pic.jpg", "image/jpeg"),
        ("pic.gif", "image/gif"),
        ("doc.pdf", "application/pdf"),
        ("notes.txt", "text/plain; charset=utf-8"),
        ("UPPER.TXT", "text/plain; charset=utf-8"),
        ("thing.weird-ext-123", "application/octet-stream"),
        ("no_extension", "application/octet-stream"),
    ];
    for (name, _) in cases {
        site.file(name, "x");
    }
    site.file("feed.xml", "<a/>");
    let srv = site.serve(model);
    for (name, ct) in cases {
        let r = srv.get(&format!("/{name}"));
        r.assert_ok(200, "x");
        r.assert_header("content-type", ct);
    }
    let r = srv.get("/feed.xml");
    let ct = r.expect_header("content-type");
    assert!(
        ct == "text/xml; charset=utf-8" || ct == "application/xml; charset=utf-8",
        "XML Content-Type {ct:?}"
    );
});

httptest!(concurrent_clients, |model| {
    let site = site();
    let srv = site.serve(model);
    let addr = srv.addr();
    let threads: Vec<_> = (0..16)
        .map(|t| {
            thread::spawn(move || {
                let mut c = Conn::open(addr);
                for i in 0..25 {
                    if (t + i) % 5 == 0 {
                        c = Conn::open(addr);
                    }
                    c.exchange(req("GET", "/a.txt", &[]))
                        .assert_ok(200, "hello");
                    c.exchange(req("GET", "/b.txt", &[]))
                        .assert_ok(200, "world!\n");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread failed");
    }
});

httptest!(changed_file_is_served_fresh, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    let r1 = srv.get("/a.txt");
    r1.assert_ok(200, "hello");
    site.file("a.txt", "changed content");
    let r2 = wait_for(Duration::from_secs(2), || {
        let r = srv.get("/a.txt");
        (r.body == b"changed content").then_some(r)
    })
    .unwrap_or_else(|| panic!("still stale after 2 s: {}", srv.get("/a.txt")));
    assert_ne!(r1.header("etag"), r2.header("etag"), "ETag did not change");
    // A deleted file is gone.
    std::fs::remove_file(site.root().join("b.txt")).unwrap();
    srv.get("/b.txt");
    let gone = wait_for(Duration::from_secs(2), || {
        (srv.get("/b.txt").status == 404).then_some(())
    });
    assert!(gone.is_some(), "deleted file still served after 2 s");
});

httptest!(sigterm_exits_zero, |model| {
    let site = site();
    let mut srv = site.serve(model);
    srv.get("/a.txt").assert_ok(200, "hello");
    let status = srv.stop(libc::SIGTERM, Duration::from_secs(5));
    assert_eq!(
        status.code(),
        Some(0),
        "exit status after SIGTERM: {status}"
    );
});

httptest!(sigint_exits_zero, |model| {
    let site = site();
    let mut srv = site.serve(model);
    // An idle connection open does not hold the exit up.
    let mut c = srv.connect();
    c.exchange(req("GET", "/a.txt", &[]))
        .assert_ok(200, "hello");
    let status = srv.stop(libc::SIGINT, Duration::from_secs(5));
    assert_eq!(status.code(), Some(0), "exit status after SIGINT: {status}");
});

httptest!(worker_counts, |model| {
    let site = site();
    for workers in ["1", "3"] {
        let srv = site.server(model).arg("--workers").arg(workers).start();
        let addr = srv.addr();
        let threads: Vec<_> = (0..6)
            .map(|_| {
                thread::spawn(move || {
                    let mut c = Conn::open(addr);
                    for _ in 0..10 {
                        c.exchange(req("GET", "/a.txt", &[]))
                            .assert_ok(200, "hello");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("client thread failed");
        }
    }
});
