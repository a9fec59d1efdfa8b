//! One backend response cache per server process, shared by all its workers: a cacheable
//! page is fetched once whatever worker a client lands on, whatever its connection or HTTP
//! version; concurrent first requests wait for one fetch; no client sees a version older
//! than one already served; expiry and `no-store` still reach every worker. A prefork child
//! keeps a cache of its own (docs/models.md), so there only what each answer is is checked.

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::handover::{read_body, read_head, Backend, BackendLog};
use crate::util::*;

/// Answers `GET /PATH` with a body naming how many requests for PATH it has seen, so each
/// fetch is a version of its own, and with freshness by path: `/page` max-age=60, `/short`
/// max-age=1, `/flip` max-age=1 the first time and `no-store` after, `/slow` max-age=60
/// after 300 ms, `/slow-no-store` no-store after 100 ms, `/slow-body` a no-store head at once
/// and its body a second later.
fn versions(stream: TcpStream, log: &BackendLog) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    while let Some((line, headers)) = read_head(&mut reader) {
        read_body(&mut reader, &headers);
        let path = line.split(' ').nth(1).unwrap_or("").to_owned();
        let n = {
            let mut requests = log.requests.lock().unwrap();
            requests.push(line.clone());
            requests
                .iter()
                .filter(|l| l.split(' ').nth(1) == Some(&path))
                .count()
        };
        let control = match path.as_str() {
            "/app/short" => "public, max-age=1",
            "/app/flip" if n == 1 => "public, max-age=1",
            "/app/flip" | "/app/slow-no-store" => "no-store",
            _ => "public, max-age=60",
        };
        match path.as_str() {
            "/app/slow" => std::thread::sleep(Duration::from_millis(300)),
            "/app/slow-no-store" => std::thread::sleep(Duration::from_millis(100)),
            "/app/slow-body" => {
                // The head at once, saying nothing is to be kept; the body a second later.
                let body = "slow body\n";
                let head = format!(
                    "HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                if writer.write_all(head.as_bytes()).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_secs(1));
                if writer.write_all(body.as_bytes()).is_err() {
                    return;
                }
                continue;
            }
            _ => {}
        }
        let body = format!("{path} version {n}\n");
        let response = format!(
            "HTTP/1.1 200 OK\r\nCache-Control: {control}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// A server with two workers (percore has one per CPU, threads a pool) proxying `/app/`.
fn serve(model: &'static str, backend: &Backend, site: &Site) -> Server {
    site.file("index.html", "static\n");
    site.serve_config(
        model,
        &format!(
            "root = \"root\"\nworkers = 2\n[[backend]]\nname = \"app\"\naddresses = \"{}\"\nresponse_timeout = \"5s\"\n[[route]]\nbackend = \"app\"\nprefix = \"/app/\"\n",
            backend.addr
        ),
    )
}

/// Requests the backend has seen for `path`.
fn fetches(backend: &Backend, path: &str) -> usize {
    let requests = backend.log.requests.lock().unwrap();
    requests
        .iter()
        .filter(|l| l.split(' ').nth(1) == Some(path))
        .count()
}

/// The version number in a body written by [`versions`].
fn version(r: &Response) -> usize {
    r.text()
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no version in\n{r}"))
}

/// The ways a client asks for a page on a connection of its own, the last two keeping
/// it alive (closed by the test).
const ASKS: [&str; 4] = [
    "GET {} HTTP/1.0\r\nHost: t\r\n\r\n",
    "GET {} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    "GET {} HTTP/1.0\r\nHost: t\r\nConnection: keep-alive\r\n\r\n",
    "GET {} HTTP/1.1\r\nHost: t\r\n\r\n",
];

/// One request for `path` on a new connection, asked the `i`th way of [`ASKS`].
fn ask(srv: &Server, path: &str, i: usize) -> Response {
    let mut conn = srv.connect();
    let r = conn.exchange(ASKS[i % ASKS.len()].replace("{}", path));
    r.assert_status(200);
    r
}

httptest!(
    a_page_is_fetched_once_whatever_worker_or_connection,
    |model| {
        let backend = Backend::start(versions);
        let site = Site::new();
        let srv = serve(model, &backend, &site);
        // Connections land on both workers (SO_REUSEPORT spreads them, or a shared accept
        // queue); each one new, closing after its request or not, HTTP/1.0 or 1.1.
        let mut cached = 0;
        for i in 0..40 {
            let r = ask(&srv, "/app/page", i);
            if model != "prefork" {
                assert_eq!(version(&r), 1, "request {i} saw another version:\n{r}");
            }
            cached += usize::from(r.header("age").is_some());
        }
        if model == "prefork" {
            // A cache per child: every answer came from the backend or one of them.
            assert_eq!(cached + fetches(&backend, "/app/page"), 40);
        } else {
            assert_eq!(fetches(&backend, "/app/page"), 1);
            assert_eq!(cached, 39);
        }
    }
);

httptest!(concurrent_first_requests_wait_for_one_fetch, |model| {
    let backend = Backend::start(versions);
    let site = Site::new();
    let srv = Arc::new(serve(model, &backend, &site));
    // 20 clients ask at once for a page the backend takes 300 ms to make.
    let clients = 20;
    let start = Arc::new(Barrier::new(clients));
    let began = Instant::now();
    let answers: Vec<Response> = (0..clients)
        .map(|i| {
            let (srv, start) = (srv.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                ask(&srv, "/app/slow", i)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let took = began.elapsed();
    if model == "prefork" {
        // Each child has its own cache: no collapsing across children.
        assert!(answers
            .iter()
            .all(|r| r.text().starts_with("/app/slow version ")));
        return;
    }
    assert_eq!(fetches(&backend, "/app/slow"), 1, "more than one fetch");
    assert!(answers.iter().all(|r| version(r) == 1));
    // The waiting ones were answered as the fetch ended, not after the wait's bound.
    assert!(took < Duration::from_secs(2), "took {took:?}");
});

httptest!(versions_never_go_backwards, |model| {
    let backend = Backend::start(versions);
    let site = Site::new();
    let srv = Arc::new(serve(model, &backend, &site));
    // Four clients, a new connection per request, for 2.5 s of a page that lives 1 s:
    // each sees versions that only grow, and every client sees the new ones.
    let until = Instant::now() + Duration::from_millis(2500);
    let seen: Vec<Vec<usize>> = (0..4)
        .map(|c| {
            let srv = srv.clone();
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                let mut i = c;
                while Instant::now() < until {
                    seen.push(version(&ask(&srv, "/app/short", i)));
                    i += 1;
                    std::thread::sleep(Duration::from_millis(10));
                }
                seen
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let fetched = fetches(&backend, "/app/short");
    // Expiry reaches every worker: the page is fetched again after each lifetime.
    assert!(fetched >= 2, "fetched {fetched} times");
    for versions in &seen {
        assert!(*versions.last().unwrap() >= 2, "{versions:?}");
    }
    if model == "prefork" {
        // Each child keeps its own cache, so a client may meet an older version in another
        // child: docs/models.md and `fastpath check` say so.
        return;
    }
    for versions in &seen {
        assert!(
            versions.windows(2).all(|w| w[0] <= w[1]),
            "a version went backwards: {versions:?}"
        );
    }
    // One fetch per lifetime (a lifetime begins when its fetch was sent).
    assert!(fetched <= 4, "fetched {fetched} times: {seen:?}");
});

httptest!(expiry_and_no_store_still_invalidate, |model| {
    let backend = Backend::start(versions);
    let site = Site::new();
    let srv = Arc::new(serve(model, &backend, &site));
    // Kept for a second, then the backend says no-store: nothing is kept any more.
    for i in 0..6 {
        ask(&srv, "/app/flip", i);
    }
    if model != "prefork" {
        assert_eq!(fetches(&backend, "/app/flip"), 1);
    }
    std::thread::sleep(Duration::from_millis(1100));
    let before = fetches(&backend, "/app/flip");
    for i in 0..6 {
        let r = ask(&srv, "/app/flip", i);
        r.assert_no_header("age");
        assert!(version(&r) > before, "{r}");
    }
    assert_eq!(fetches(&backend, "/app/flip"), before + 6);
    // Requests for a page that is never kept meet at once: they do not queue up behind
    // each other's fetches (the first wait ends when the first fetch does, unkept).
    let clients = 20;
    let start = Arc::new(Barrier::new(clients));
    let began = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let (srv, start) = (srv.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                ask(&srv, "/app/slow-no-store", i).assert_no_header("age");
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(fetches(&backend, "/app/slow-no-store"), clients);
    // One after another they would take 20 x 100 ms.
    let took = began.elapsed();
    assert!(took < Duration::from_millis(1500), "took {took:?}");
});

httptest!(
    waiters_go_as_soon_as_the_head_says_nothing_is_kept,
    |model| {
        let backend = Backend::start(versions);
        let site = Site::new();
        let srv = Arc::new(serve(model, &backend, &site));
        // 20 clients at once; the first fetch's head says no-store at once, its body takes a
        // second: the others go to the backend on that head, not after that body.
        let clients = 20;
        let start = Arc::new(Barrier::new(clients));
        let began = Instant::now();
        let threads: Vec<_> = (0..clients)
            .map(|i| {
                let (srv, start) = (srv.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let r = ask(&srv, "/app/slow-body", i);
                    assert_eq!(r.text(), "slow body\n");
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let took = began.elapsed();
        assert_eq!(fetches(&backend, "/app/slow-body"), clients);
        assert!(took < Duration::from_millis(1800), "took {took:?}");
    }
);
