//! Prometheus metrics on the `[metrics] listen` address: exact counts after a known set of
//! requests on every model, the exposition checked by the real `promtool`, what the metrics
//! listener answers for other paths and methods, and that nothing is served when it is off.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::util::*;

/// A backend that answers every request with a 3-byte body its response cache may keep.
fn cacheable_backend() -> SocketAddr {
    canned_backend(
        "HTTP/1.1 200 OK\r\nCache-Control: public, max-age=60\r\nContent-Length: 3\r\n\r\nok\n",
    )
}

/// A series (a name and labels it must have) and the sum expected over its samples.
type Expected<'a> = (&'a str, &'a [(&'a str, &'a str)], f64);

/// An address where nothing listens.
fn dead_address() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// The metrics listener's address, from the server's `metrics on http://ADDR/metrics` line.
pub(crate) fn metrics_addr(srv: &Server) -> SocketAddr {
    assert!(
        srv.wait_stderr(START_TIMEOUT, "metrics on http://"),
        "no `metrics on` line\n{}",
        srv.report()
    );
    let stderr = srv.stderr();
    let at = stderr.find("metrics on http://").unwrap() + "metrics on http://".len();
    let rest = &stderr[at..];
    rest[..rest.find("/metrics").unwrap()].parse().unwrap()
}

pub(crate) fn scrape(addr: SocketAddr) -> Response {
    let response = Conn::open(addr).exchange(req("GET", "/metrics", &[("Connection", "close")]));
    response.assert_status(200);
    response.assert_header("content-type", "text/plain; version=0.0.4; charset=utf-8");
    response
}

/// The sum of the samples of `name` whose labels include every one of `labels`.
pub(crate) fn sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut total = 0.0;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (series_name, series_labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.trim_end_matches('}')),
            None => (series, ""),
        };
        let wanted = labels.iter().all(|(k, v)| {
            series_labels
                .split(',')
                .any(|l| l == format!("{k}=\"{v}\""))
        });
        if series_name == name && wanted {
            total += value.parse::<f64>().unwrap();
        }
    }
    total
}

/// Runs `promtool check metrics` on `text`, or says why it cannot.
fn promtool_check(test: &str, text: &str) {
    let Ok(mut child) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        skip(
            test,
            Missing::Installable,
            "promtool is not installed (Debian package prometheus)",
        );
        return;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\n--- the scrape:\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // promtool's lint (metric names, help, units) speaks on stdout even when it passes.
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.trim().is_empty(), "promtool lint: {said}");
}

fn config(backend: SocketAddr, dead: SocketAddr, extra: &str) -> String {
    format!(
        "root = \"root\"\n{extra}\n[metrics]\nlisten = \"127.0.0.1:0\"\n\
         [[backend]]\nname = \"app\"\naddresses = \"{backend}\"\n\
         [[backend]]\nname = \"dead\"\naddresses = \"{dead}\"\nconnect_timeout = \"1s\"\n\
         [[route]]\nbackend = \"app\"\nprefix = \"/app/\"\n\
         [[route]]\nbackend = \"dead\"\nprefix = \"/dead/\"\n"
    )
}

httptest!(counts_after_known_requests, |model| {
    let site = Site::new();
    site.file("index.html", "<h1>hello</h1>\n");
    // On the main listener `/metrics` is an ordinary path: this file, not the exposition.
    site.file("metrics", "just a file\n");
    let srv = site.serve_config(model, &config(cacheable_backend(), dead_address(), ""));
    let metrics = metrics_addr(&srv);

    let mut body_bytes = 0;
    // One kept-alive connection stays open and idle after its request.
    let mut idle = srv.connect();
    let r = idle.exchange(req("GET", "/index.html", &[]));
    r.assert_status(200);
    body_bytes += r.body.len();
    for _ in 0..2 {
        let r = srv.get("/index.html");
        r.assert_status(200);
        body_bytes += r.body.len();
    }
    let r = srv.get("/missing");
    r.assert_status(404);
    body_bytes += r.body.len();
    let r = srv.get("/app/x");
    r.assert_ok(200, "ok\n");
    body_bytes += r.body.len();
    let r = srv.get("/dead/x");
    r.assert_status(502);
    body_bytes += r.body.len();
    let file = srv.get("/metrics");
    file.assert_ok(200, "just a file\n");
    body_bytes += file.body.len();

    // Connections are closed, and cache figures published, a moment after the responses:
    // scrape until all is counted. Each scrape is a GET answered 200 itself, counted by the
    // next one.
    let (mut scrapes, mut scrape_bytes) = (0.0, 0);
    let mut last = (String::new(), String::new());
    let settled = wait_for(Duration::from_secs(10), || {
        let response = scrape(metrics);
        let text = response.text();
        let expect: &[Expected] = &[
            (
                "fastpath_http_requests_total",
                &[("method", "GET"), ("code", "2xx")],
                5.0 + scrapes,
            ),
            (
                "fastpath_http_requests_total",
                &[("method", "GET"), ("code", "4xx")],
                1.0,
            ),
            (
                "fastpath_http_requests_total",
                &[("method", "GET"), ("code", "5xx")],
                1.0,
            ),
            ("fastpath_http_requests_total", &[], 7.0 + scrapes),
            (
                "fastpath_http_response_body_bytes_total",
                &[],
                (body_bytes + scrape_bytes) as f64,
            ),
            ("fastpath_connections_total", &[], 8.0 + scrapes),
            // The idle connection and this scrape's.
            ("fastpath_connections_open", &[], 2.0),
            ("fastpath_connections_idle", &[], 1.0),
            (
                "fastpath_backend_requests_total",
                &[("backend", "app")],
                1.0,
            ),
            (
                "fastpath_backend_requests_total",
                &[("backend", "dead")],
                1.0,
            ),
            ("fastpath_backend_errors_total", &[("backend", "app")], 0.0),
            ("fastpath_backend_errors_total", &[("backend", "dead")], 1.0),
            (
                "fastpath_backend_response_seconds_count",
                &[("backend", "app")],
                1.0,
            ),
            (
                "fastpath_backend_response_seconds_bucket",
                &[("backend", "app"), ("le", "+Inf")],
                1.0,
            ),
            (
                "fastpath_backend_response_seconds_count",
                &[("backend", "dead")],
                0.0,
            ),
            // /app/x and /dead/x were looked up, and found nothing.
            ("fastpath_response_cache_misses_total", &[], 2.0),
            ("fastpath_response_cache_hits_total", &[], 0.0),
            ("fastpath_response_cache_entries", &[], 1.0),
            // index.html three times, /missing and /metrics once each, in the content
            // cache (hits and misses are counted by the worker that looked).
            ("fastpath_content_cache_lookups", &[], 5.0),
            (
                "fastpath_build_info",
                &[("version", env!("CARGO_PKG_VERSION"))],
                1.0,
            ),
        ];
        let mut wrong = String::new();
        for (name, labels, want) in expect {
            let got = if *name == "fastpath_content_cache_lookups" {
                sum(&text, "fastpath_content_cache_hits_total", labels)
                    + sum(&text, "fastpath_content_cache_misses_total", labels)
            } else {
                sum(&text, name, labels)
            };
            if got != *want {
                wrong.push_str(&format!("{name}{labels:?}: {got}, expected {want}\n"));
            }
        }
        scrapes += 1.0;
        scrape_bytes += response.body.len();
        if wrong.is_empty() {
            Some(text)
        } else {
            last = (wrong, text);
            None
        }
    });
    let Some(text) = settled else {
        panic!(
            "the counts did not settle:\n{}\n--- last scrape:\n{}\n{}",
            last.0,
            last.1,
            srv.report()
        );
    };
    assert!(sum(&text, "fastpath_content_cache_misses_total", &[]) >= 3.0);
    assert!(sum(&text, "fastpath_response_cache_memory_bytes", &[]) > 0.0);
    assert!(sum(&text, "process_start_time_seconds", &[]) > 1.6e9);
    promtool_check(
        &format!("metrics::counts_after_known_requests::{model}"),
        &text,
    );

    // The metrics listener serves /metrics only, to GET and HEAD.
    let mut conn = Conn::open(metrics);
    conn.exchange(req("GET", "/", &[])).assert_status(404);
    conn.exchange(req("GET", "/metrics/x", &[]))
        .assert_status(404);
    conn.exchange(req("GET", "/index.html", &[]))
        .assert_status(404);
    conn.exchange(req("POST", "/metrics", &[("Content-Length", "0")]))
        .assert_status(405);
    let head = conn.exchange(req("HEAD", "/metrics", &[]));
    head.assert_status(200);
    assert!(head.body.is_empty());
    let length: usize = head.expect_header("content-length").parse().unwrap();
    assert!(length > 1000, "{}", head.head);
    conn.exchange(req("GET", "/metrics?x=1", &[]))
        .assert_status(200);
    drop(idle);
});

#[test]
fn off_by_default() {
    let site = Site::new();
    site.file("index.html", "hello\n");
    let srv = site.serve("epoll");
    srv.get("/metrics").assert_status(404);
    srv.get("/").assert_status(200);
    assert!(!srv.stderr().contains("metrics on"), "{}", srv.report());
}

#[test]
fn cache_evictions_and_hits_are_counted() {
    let site = Site::new();
    site.file("a.txt", "a".repeat(1200));
    site.file("b.txt", "b".repeat(1200));
    // One worker, with room for one of the two files: reading b evicts a.
    let extra = "workers = 1\n[cache]\nmax_memory = 2048\n";
    let srv = site.serve_config("epoll", &config(cacheable_backend(), dead_address(), extra));
    let metrics = metrics_addr(&srv);
    srv.get("/a.txt").assert_status(200);
    srv.get("/a.txt").assert_status(200);
    srv.get("/b.txt").assert_status(200);
    srv.get("/app/1").assert_ok(200, "ok\n");
    srv.get("/app/1").assert_ok(200, "ok\n");
    let expect = [
        ("fastpath_content_cache_hits_total", 1.0),
        ("fastpath_content_cache_misses_total", 2.0),
        ("fastpath_content_cache_evictions_total", 1.0),
        ("fastpath_content_cache_entries", 1.0),
        ("fastpath_response_cache_hits_total", 1.0),
        ("fastpath_response_cache_misses_total", 1.0),
        ("fastpath_response_cache_entries", 1.0),
        ("fastpath_backend_requests_total", 1.0),
    ];
    let mut last = String::new();
    let settled = wait_for(Duration::from_secs(5), || {
        last = scrape(metrics).text();
        expect
            .iter()
            .all(|(name, want)| sum(&last, name, &[]) == *want)
            .then_some(())
    });
    assert!(settled.is_some(), "expected {expect:?} in:\n{last}");
}

httptest!(the_shared_response_cache_is_counted_once, |model| {
    // Two workers share one response cache: a page fetched once, its entry and memory
    // counted once over the workers' series; hits and misses are each worker's own.
    if model == "prefork" {
        // Each child has a cache of its own (docs/models.md).
        return;
    }
    let site = Site::new();
    site.file("index.html", "hello\n");
    let srv = site.serve_config(
        model,
        &config(cacheable_backend(), dead_address(), "workers = 2"),
    );
    let metrics = metrics_addr(&srv);
    for _ in 0..20 {
        let r = Conn::open(srv.addr()).exchange(req("GET", "/app/1", &[("Connection", "close")]));
        r.assert_ok(200, "ok\n");
    }
    let expect = [
        ("fastpath_response_cache_hits_total", 19.0),
        ("fastpath_response_cache_misses_total", 1.0),
        ("fastpath_response_cache_entries", 1.0),
        ("fastpath_backend_requests_total", 1.0),
    ];
    let mut last = String::new();
    let settled = wait_for(Duration::from_secs(5), || {
        last = scrape(metrics).text();
        expect
            .iter()
            .all(|(name, want)| sum(&last, name, &[]) == *want)
            .then_some(())
    });
    assert!(settled.is_some(), "expected {expect:?} in:\n{last}");
    // The memory is on one worker's series.
    let memory: Vec<&str> = last
        .lines()
        .filter(|l| l.starts_with("fastpath_response_cache_memory_bytes{"))
        .filter(|l| !l.ends_with(" 0"))
        .collect();
    assert_eq!(memory.len(), 1, "{last}");
});

httptest!(the_shared_content_cache_is_filled_once, |model| {
    // Four workers share one content cache: a file read once, its entry and memory counted
    // once over the workers' series, whatever worker each new connection lands on.
    if model == "prefork" || model == "percore" {
        // Each child, and each percore worker, has a cache of its own
        // (docs/configuration.md).
        return;
    }
    let site = Site::new();
    site.file("page.html", "p".repeat(2000));
    let srv = site.serve_config(
        model,
        &config(cacheable_backend(), dead_address(), "workers = 4"),
    );
    let metrics = metrics_addr(&srv);
    for _ in 0..20 {
        let r =
            Conn::open(srv.addr()).exchange(req("GET", "/page.html", &[("Connection", "close")]));
        r.assert_ok(200, "p".repeat(2000));
    }
    let expect = [
        ("fastpath_content_cache_hits_total", 19.0),
        ("fastpath_content_cache_misses_total", 1.0),
        ("fastpath_content_cache_entries", 1.0),
    ];
    let mut last = String::new();
    let settled = wait_for(Duration::from_secs(5), || {
        last = scrape(metrics).text();
        expect
            .iter()
            .all(|(name, want)| sum(&last, name, &[]) == *want)
            .then_some(())
    });
    assert!(settled.is_some(), "expected {expect:?} in:\n{last}");
    let memory: Vec<&str> = last
        .lines()
        .filter(|l| l.starts_with("fastpath_content_cache_memory_bytes{"))
        .filter(|l| !l.ends_with(" 0"))
        .collect();
    assert_eq!(memory.len(), 1, "{last}");
    let bytes: f64 = memory[0].rsplit(' ').next().unwrap().parse().unwrap();
    assert!(
        (2000.0..4000.0).contains(&bytes),
        "one copy of a 2000-byte file: {bytes} bytes"
    );
});

#[test]
fn metrics_address_taken_by_the_site_is_refused() {
    let site = Site::new();
    let addr = dead_address();
    let config = site.config(&format!(
        "root = \"root\"\n[metrics]\nlisten = \"{addr}\"\n"
    ));
    // `--listen` replaces the file's `listen`, so only the server can see the clash.
    let out = Command::new(BIN)
        .args(["serve", "--run-as-root", "--config"])
        .arg(&config)
        .args(["--listen", &addr.to_string()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "[metrics] listen: {addr} is also where the site listens"
        )),
        "{stderr}"
    );
}

httptest!(
    tls_handshakes_are_counted_by_every_worker_together,
    |model| {
        use fastpath_testkit::{KeyKind, TestPki};
        let site = Site::new();
        site.file("a.txt", "a");
        let pki = TestPki::new(site.base());
        let (chain, key) = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256);
        let config = format!(
            "root = \"root\"\ntls_certificate = {chain:?}\ntls_key = {key:?}\n\
         [metrics]\nlisten = \"127.0.0.1:0\"\n"
        );
        let srv = site.server(model).config(&config).tls().start();
        let addr = metrics_addr(&srv);
        for _ in 0..2 {
            let Some(out) = curl_https(pki.ca(), "a.test", srv.addr().port(), "/a.txt", &[]) else {
                return;
            };
            assert_eq!(out.stdout, b"a", "{}", String::from_utf8_lossy(&out.stderr));
        }
        // Plain HTTP to the TLS port: a failed handshake.
        let mut conn = std::net::TcpStream::connect(srv.addr()).unwrap();
        std::io::Write::write_all(&mut conn, b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n").unwrap();
        let mut answer = Vec::new();
        let _ = std::io::Read::read_to_end(&mut conn, &mut answer);
        let text = wait_for(Duration::from_secs(5), || {
            let text = scrape(addr).text();
            let done = sum(
                &text,
                "fastpath_tls_handshake_failures_total",
                &[("reason", "plain_http")],
            ) == 1.0;
            done.then_some(text)
        })
        .expect("the failure counted");
        assert_eq!(
            sum(&text, "fastpath_tls_handshakes_total", &[("kind", "full")]),
            2.0,
            "{text}"
        );
        assert_eq!(
            sum(
                &text,
                "fastpath_tls_handshakes_total",
                &[("kind", "resumed")]
            ),
            0.0
        );
        promtool_check("tls_handshakes_are_counted_by_every_worker_together", &text);
    }
);
