//! Hand-over of requests to a backend web server: routes, the proxy, bridge and redirect
//! methods, and every way a backend can fail. The backends here are small servers inside
//! the test (so each failure is exact); `handover_real` runs real, unmodified ones.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::util::*;

/// What a test backend does with one connection.
type Behaviour = fn(TcpStream, &BackendLog);

/// What a test backend saw.
#[derive(Default)]
pub struct BackendLog {
    pub connections: AtomicUsize,
    pub requests: Mutex<Vec<String>>,
    /// Signalled when a connection's reader sees the end of the stream.
    pub ends: Mutex<Option<mpsc::Sender<()>>>,
}

/// A backend on 127.0.0.1 running `behaviour` on a thread per connection.
pub struct Backend {
    pub addr: SocketAddr,
    pub log: Arc<BackendLog>,
}

impl Backend {
    pub fn start(behaviour: Behaviour) -> Backend {
        Backend::listen(behaviour, None)
    }

    /// Like [`Backend::start`], with the receive buffer of every connection fixed at `bytes`
    /// (no autotuning): a backend that reads slowly then holds its sender back within a
    /// few hundred kilobytes, rather than the kernel taking whole megabytes for it.
    pub fn start_with_receive_buffer(behaviour: Behaviour, bytes: i32) -> Backend {
        Backend::listen(behaviour, Some(bytes))
    }

    fn listen(behaviour: Behaviour, receive_buffer: Option<i32>) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        if let Some(bytes) = receive_buffer {
            // Accepted connections inherit it.
            use std::os::fd::AsRawFd;
            // SAFETY: setsockopt with a pointer to an int and its size.
            let rc = unsafe {
                libc::setsockopt(
                    listener.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUF,
                    &bytes as *const i32 as *const libc::c_void,
                    std::mem::size_of::<i32>() as libc::socklen_t,
                )
            };
            assert_eq!(rc, 0, "SO_RCVBUF: {}", std::io::Error::last_os_error());
        }
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(BackendLog::default());
        let shared = log.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                shared.connections.fetch_add(1, Ordering::SeqCst);
                let log = shared.clone();
                std::thread::spawn(move || behaviour(stream, &log));
            }
        });
        Backend { addr, log }
    }

    fn connections(&self) -> usize {
        self.log.connections.load(Ordering::SeqCst)
    }
}

/// Reads one request head; None at the end of the stream.
pub(crate) fn read_head(reader: &mut impl BufRead) -> Option<(String, Vec<(String, String)>)> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let request_line = line.trim_end().to_string();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            return Some((request_line, headers));
        }
        let (name, value) = line.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
}

fn header<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Reads the body the head announces (Content-Length or chunked, decoded).
pub(crate) fn read_body(reader: &mut impl BufRead, headers: &[(String, String)]) -> Vec<u8> {
    if let Some(n) = header(headers, "content-length") {
        let mut body = vec![0u8; n.parse().unwrap()];
        reader.read_exact(&mut body).unwrap();
        return body;
    }
    let mut body = Vec::new();
    if header(headers, "transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).unwrap();
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0u8; size + 2];
            reader.read_exact(&mut chunk).unwrap();
            if size == 0 {
                return body;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    }
    body
}

/// Answers every request on a kept-alive connection with a text description of it.
pub(crate) fn echo(stream: TcpStream, log: &BackendLog) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    while let Some((line, headers)) = read_head(&mut reader) {
        let body = read_body(&mut reader, &headers);
        log.requests.lock().unwrap().push(line.clone());
        let mut text = format!("{line}\n");
        for (name, value) in &headers {
            text.push_str(&format!("{name}: {value}\n"));
        }
        text.push_str(&format!("body: {}\n", String::from_utf8_lossy(&body)));
        let head_only = line.starts_with("HEAD ");
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nX-Backend: echo\r\nKeep-Alive: timeout=5\r\n\r\n{}",
            text.len(),
            if head_only { "" } else { text.as_str() }
        );
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
    if let Some(ends) = log.ends.lock().unwrap().as_ref() {
        let _ = ends.send(());
    }
}

/// Answers with a chunked body in three chunks.
pub(crate) fn chunked(stream: TcpStream, _log: &BackendLog) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    while let Some((_, headers)) = read_head(&mut reader) {
        read_body(&mut reader, &headers);
        let response = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\n\r\n";
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// Reads the request, then never answers.
fn stall(stream: TcpStream, log: &BackendLog) {
    let mut reader = BufReader::new(stream);
    read_head(&mut reader);
    let mut rest = Vec::new();
    let _ = reader.read_to_end(&mut rest);
    if let Some(ends) = log.ends.lock().unwrap().as_ref() {
        let _ = ends.send(());
    }
}

/// Promises 1000 bytes, sends 100, closes.
fn cut_short(stream: TcpStream, _log: &BackendLog) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    read_head(&mut reader);
    let _ = writer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n");
    let _ = writer.write_all(&[b'x'; 100]);
}

/// Answers with something that is not HTTP.
fn garbage(stream: TcpStream, _log: &BackendLog) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    read_head(&mut reader);
    let _ = writer.write_all(b"SSH-2.0-OpenSSH_9.2\r\n\r\n");
}

/// Answers the first request of a connection without saying it will close, then reads the
/// next one and closes without answering: what a backend does that closes idle connections
/// just as a request arrives.
fn one_per_connection(stream: TcpStream, log: &BackendLog) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let Some((line, _)) = read_head(&mut reader) else {
        return;
    };
    let body: &[u8] = if line.starts_with("HEAD ") {
        b""
    } else {
        b"ok\n"
    };
    log.requests.lock().unwrap().push(line);
    let _ = writer.write_all(&[b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", body].concat());
    if let Some((line, _)) = read_head(&mut reader) {
        log.requests.lock().unwrap().push(line);
    }
}

/// Answers one request without saying it will close, then closes at once.
fn answer_then_close(stream: TcpStream, _log: &BackendLog) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    if read_head(&mut reader).is_some() {
        let _ = writer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n");
    }
}

/// Answers 401 to a request at once, without reading its body, then reads on to the end.
fn refuse_early(stream: TcpStream, log: &BackendLog) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    if let Some((line, _)) = read_head(&mut reader) {
        log.requests.lock().unwrap().push(line);
        let _ = writer.write_all(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 4\r\n\r\nno!\n");
    }
    let mut rest = Vec::new();
    let _ = reader.read_to_end(&mut rest);
}

/// Switches protocols without being asked to.
fn switch_unasked(stream: TcpStream, _log: &BackendLog) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    read_head(&mut reader);
    let _ = writer.write_all(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: foo\r\nConnection: upgrade\r\n\r\n",
    );
    let mut rest = Vec::new();
    let _ = reader.read_to_end(&mut rest);
}

/// Answers by path, on a kept-alive connection: `/garbage` is not HTTP, `/cut` stops short,
/// `/big` sends 4 MiB, `/ws` switches protocols and echoes to the end; anything else gets a
/// short answer.
pub(crate) fn by_path(stream: TcpStream, _log: &BackendLog) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    while let Some((line, _)) = read_head(&mut reader) {
        let path = line.split(' ').nth(1).unwrap_or("").to_owned();
        let result = if path.contains("/garbage") {
            let _ = writer.write_all(b"SSH-2.0-OpenSSH_9.2\r\n\r\n");
            return;
        } else if path.contains("/cut") {
            let _ = writer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nshort");
            return;
        } else if path.contains("/big") {
            let body = vec![b'b'; 4 << 20];
            writer
                .write_all(
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes(),
                )
                .and_then(|_| writer.write_all(&body))
        } else if path.contains("/ws") {
            if writer
                .write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
                .is_ok()
            {
                let _ = std::io::copy(&mut reader, &mut writer);
            }
            return;
        } else {
            writer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
        };
        if result.is_err() {
            return;
        }
    }
}

pub(crate) fn config(backend: &Backend, route: &str, extra: &str) -> String {
    format!(
        "root = \"root\"\n{extra}\n[timeouts]\nlinger = \"1s\"\n[[backend]]\nname = \"app\"\naddresses = \"{}\"\npublic_url = \"http://backend.example:8000\"\nconnect_timeout = \"1s\"\nresponse_timeout = \"1s\"\nmax_body_size = \"64m\"\n[[route]]\nbackend = \"app\"\n{route}\n",
        backend.addr
    )
}

/// [`config`] with `keys` added to the backend's table.
fn config_with(backend: &Backend, route: &str, keys: &str) -> String {
    config(backend, route, "").replace("[[route]]", &format!("{keys}\n[[route]]"))
}

pub(crate) fn site() -> Site {
    let site = Site::new();
    site.file("index.html", "static index\n");
    site.file("page.txt", "static page\n");
    site
}

httptest!(unregistered_methods_never_reach_the_backend, |model| {
    // The static path and the routes refuse the same methods: a backend never sees a method
    // the registry does not know (`get` is not `GET`; methods are case-sensitive).
    let backend = Backend::start(echo);
    let site = site();
    let srv = site.serve_config(model, &config(&backend, "prefix = \"/app/\"", ""));
    for method in ["get", "helloPOST", "PRI"] {
        for path in ["/app/x", "/page.txt"] {
            let r = srv.request(format!("{method} {path} HTTP/1.1\r\nHost: t\r\n\r\n"));
            assert_eq!(r.status, 501, "{method} {path}:\n{r}");
        }
    }
    // A registered method a static file does not take still goes to the backend.
    let r = srv.request("PROPFIND /app/x HTTP/1.1\r\nHost: t\r\n\r\n");
    r.assert_status(200);
    assert!(r.text().starts_with("PROPFIND /app/x HTTP/1.1"), "{r}");
    assert_eq!(backend.connections(), 1);
});

httptest!(prefix_route_proxies_and_static_stays_static, |model| {
    let backend = Backend::start(echo);
    let site = site();
    let srv = site.serve_config(model, &config(&backend, "prefix = \"/app/\"", ""));
    let r = srv.get("/app/hello?x=1");
    r.assert_status(200);
    assert_eq!(r.header("X-Backend"), Some("echo"));
    let text = r.text();
    assert!(text.starts_with("GET /app/hello?x=1 HTTP/1.1\n"), "{text}");
    assert!(text.contains("x-forwarded-for: 127.0.0.1\n"), "{text}");
    assert!(text.contains("x-forwarded-proto: http\n"), "{text}");
    // RFC 9110 §7.6.3: the gateway names itself in Via.
    assert!(text.contains("via: 1.1 fastpath\n"), "{text}");
    assert!(
        text.contains("forwarded: for=127.0.0.1;proto=http\n"),
        "{text}"
    );
    // Hop-by-hop fields of the backend's answer are not relayed.
    assert_eq!(r.header("Keep-Alive"), None);
    srv.get("/page.txt").assert_ok(200, "static page\n");
});

httptest!(
    one_client_connection_mixes_static_and_proxied_and_reuses_the_backend,
    |model| {
        let backend = Backend::start(echo);
        let site = site();
        let srv = site.serve_config(
            model,
            &config(&backend, "prefix = \"/app/\"", "workers = 1"),
        );
        let mut conn = srv.connect();
        for i in 0..5 {
            let r = conn.exchange(format!("GET /app/{i} HTTP/1.1\r\nHost: t\r\n\r\n"));
            r.assert_status(200);
            assert!(r.text().starts_with(&format!("GET /app/{i} HTTP/1.1")));
            let r = conn.exchange("GET /page.txt HTTP/1.1\r\nHost: t\r\n\r\n");
            r.assert_ok(200, "static page\n");
        }
        // Pipelined: a proxied request between two static ones, answered in order.
        conn.send("GET /page.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /app/p HTTP/1.1\r\nHost: t\r\n\r\nGET /index.html HTTP/1.1\r\nHost: t\r\n\r\n");
        let rs = conn.read_responses(&["GET", "GET", "GET"]);
        assert_eq!(rs[0].text(), "static page\n");
        assert!(rs[1].text().starts_with("GET /app/p HTTP/1.1"));
        assert_eq!(rs[2].text(), "static index\n");
        assert_eq!(
            backend.connections(),
            1,
            "the backend connection was not reused"
        );
    }
);

httptest!(request_bodies_are_streamed_to_the_backend, |model| {
    let backend = Backend::start(echo);
    let site = site();
    let srv = site.serve_config(
        model,
        &config_with(
            &backend,
            "unsafe_methods = true",
            "request_buffering = false",
        ),
    );
    let mut conn = srv.connect();
    let r = conn
        .exchange("POST /index.html HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\nhello world");
    assert!(r.text().contains("body: hello world\n"), "{}", r.text());
    let r = conn.exchange(
        "PUT /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    );
    assert!(r.text().contains("body: hello world\n"), "{}", r.text());
    assert!(
        r.text().contains("transfer-encoding: chunked\n"),
        "{}",
        r.text()
    );
    // GET is still static.
    conn.exchange("GET /page.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .assert_ok(200, "static page\n");
});

httptest!(extension_query_and_fallback_routes, |model| {
    let backend = Backend::start(echo);
    let site = site();
    site.file("script.php", "<?php source must never be served ?>");
    let text = format!(
        "{}[[route]]\nbackend = \"app\"\nquery = true\n[[route]]\nbackend = \"app\"\nfallback = true\n",
        config(&backend, "extensions = [\"php\"]", "")
    );
    let srv = site.serve_config(model, &text);
    let r = srv.get("/script.php");
    assert!(
        r.text().starts_with("GET /script.php HTTP/1.1"),
        "{}",
        r.text()
    );
    let r = srv.get("/page.txt?q=1");
    assert!(
        r.text().starts_with("GET /page.txt?q=1 HTTP/1.1"),
        "{}",
        r.text()
    );
    let r = srv.get("/no/such/file");
    assert!(
        r.text().starts_with("GET /no/such/file HTTP/1.1"),
        "{}",
        r.text()
    );
    srv.get("/page.txt").assert_ok(200, "static page\n");
});

httptest!(chunked_responses_reach_both_http_versions, |model| {
    let backend = Backend::start(chunked);
    let site = site();
    let srv = site.serve_config(model, &config(&backend, "prefix = \"/\"", ""));
    let mut conn = srv.connect();
    let r = conn.exchange("GET /c HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.header("Transfer-Encoding"), Some("chunked"));
    assert_eq!(r.text(), "hello world");
    // An HTTP/1.0 client cannot take chunks: the body comes decoded, ended by the close.
    let mut conn = srv.connect();
    conn.send("GET /c HTTP/1.0\r\n\r\n");
    let r = conn.read_response();
    assert_eq!(r.header("Transfer-Encoding"), None);
    assert_eq!(r.text(), "hello world");
    conn.expect_closed();
});

httptest!(redirect_answers_307_to_the_public_url, |model| {
    let backend = Backend::start(echo);
    let site = site();
    let route = "prefix = \"/admin/\"\nmethod = \"redirect\"";
    let srv = site.serve_config(model, &config(&backend, route, ""));
    let r = srv.get("/admin/users?page=2");
    r.assert_status(307);
    assert_eq!(
        r.header("Location"),
        Some("http://backend.example:8000/admin/users?page=2")
    );
    assert_eq!(backend.connections(), 0);
});

httptest!(bridge_hands_the_connection_over_for_good, |model| {
    bridge_hands_the_connection_over(model, "");
});

/// The bridge test, with `extra` at the top of the configuration (kernel_bridge.rs runs it
/// with the kernel path on); the server is returned for more checks.
pub(crate) fn bridge_hands_the_connection_over(model: &'static str, extra: &str) -> Server {
    let backend = Backend::start(echo);
    let site = site();
    let route = "prefix = \"/ws/\"\nmethod = \"bridge\"";
    let srv = site.serve_config(model, &config(&backend, route, extra));
    let mut conn = srv.connect();
    let r = conn.exchange("GET /ws/chat HTTP/1.1\r\nHost: t\r\nX-Test: 1\r\n\r\n");
    // The request reached the backend exactly as the client sent it.
    assert!(
        r.text().starts_with("GET /ws/chat HTTP/1.1\n"),
        "{}",
        r.text()
    );
    assert!(r.text().contains("x-test: 1\n"));
    assert!(!r.text().contains("x-forwarded-for"));
    // The backend's own fields come through untouched, hop-by-hop ones included.
    assert_eq!(r.header("Keep-Alive"), Some("timeout=5"));
    // From now on the connection belongs to the backend, even for a static path.
    let r = conn.exchange("GET /page.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(
        r.text().starts_with("GET /page.txt HTTP/1.1\n"),
        "{}",
        r.text()
    );
    srv
}

httptest!(a_refusing_backend_gives_502, |model| {
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let backend = Backend {
        addr: closed,
        log: Arc::default(),
    };
    let site = site();
    let srv = site.serve_config(model, &config(&backend, "prefix = \"/app/\"", ""));
    let mut conn = srv.connect();
    let r = conn.exchange("GET /app/x HTTP/1.1\r\nHost: t\r\n\r\n");
    r.assert_status(502);
    assert!(r.text().contains("502 Bad Gateway"));
    // The client connection is still good for static requests.
    conn.exchange("GET /page.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .assert_ok(200, "static page\n");
});

httptest!(
    a_silent_backend_gives_504_and_static_serving_goes_on,
    |model| {
        let backend = Backend::start(stall);
        let site = site();
        let srv = site.serve_config(
            model,
            &config(&backend, "prefix = \"/app/\"", "workers = 1"),
        );
        let mut slow = srv.connect();
        slow.send("GET /app/x HTTP/1.1\r\nHost: t\r\n\r\n");
        // Meanwhile, on the same worker, static requests are answered at once.
        let started = Instant::now();
        for _ in 0..20 {
            srv.get("/page.txt").assert_ok(200, "static page\n");
        }
        assert!(started.elapsed() < Duration::from_millis(900));
        let r = slow.read_response();
        r.assert_status(504);
        assert!(started.elapsed() >= Duration::from_millis(900));
    }
);

httptest!(a_backend_closing_mid_response_closes_the_client, |model| {
    let backend = Backend::start(cut_short);
    let site = site();
    let srv = site.serve_config(model, &config(&backend, "prefix = \"/app/\"", ""));
    let mut conn = srv.connect();
    conn.send("GET /app/x HTTP/1.1\r\nHost: t\r\n\r\n");
    let mut stream = conn.stream().try_clone().unwrap();
    let mut got = Vec::new();
    let _ = stream.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("Content-Length: 1000"), "{text}");
    let body = &got[got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4..];
    assert_eq!(
        body.len(),
        100,
        "the client must see the response cut short"
    );
});

httptest!(
    an_idempotent_request_goes_again_when_a_kept_backend_connection_was_closed,
    |model| {
        let backend = Backend::start(one_per_connection);
        let site = site();
        let srv = site.serve_config(
            model,
            &config(&backend, "prefix = \"/app/\"", "workers = 1"),
        );
        let mut conn = srv.connect();
        for i in 0..4 {
            let r = conn.exchange(format!("GET /app/{i} HTTP/1.1\r\nHost: t\r\n\r\n"));
            r.assert_ok(200, "ok\n");
        }
        conn.exchange("HEAD /app/h HTTP/1.1\r\nHost: t\r\n\r\n")
            .assert_status(200);
        // A request with a body is not sent twice: the backend saw it once, the client gets
        // 502, and the next request is served on a new connection.
        let r = conn.exchange("POST /app/p HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc");
        r.assert_status(502);
        conn.exchange("GET /app/after HTTP/1.1\r\nHost: t\r\n\r\n")
            .assert_ok(200, "ok\n");
        let seen = backend.log.requests.lock().unwrap().clone();
        let posts = seen.iter().filter(|l| l.starts_with("POST ")).count();
        assert_eq!(posts, 1, "{seen:?}");
        for i in 0..4 {
            let line = format!("GET /app/{i} HTTP/1.1");
            let times = seen.iter().filter(|l| **l == line).count();
            // Once on the connection that closed, once on the one that answered (the
            // first request went on a new connection and was answered at once).
            assert!((1..=2).contains(&times), "{line}: {seen:?}");
        }
    }
);

httptest!(
    a_backend_that_closes_after_each_answer_serves_every_request,
    |model| {
        let backend = Backend::start(answer_then_close);
        let site = site();
        let srv = site.serve_config(
            model,
            &config(&backend, "prefix = \"/app/\"", "workers = 1"),
        );
        let mut conn = srv.connect();
        for i in 0..20 {
            let r = conn.exchange(format!("GET /app/{i} HTTP/1.1\r\nHost: t\r\n\r\n"));
            r.assert_ok(200, "ok\n");
            if i % 2 == 0 {
                // Give the backend's FIN time to arrive before the next request.
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
);

httptest!(
    a_body_the_backend_did_not_wait_for_is_never_taken_for_a_request,
    |model| {
        let backend = Backend::start(refuse_early);
        let site = site();
        // Streamed: a buffered body never meets a backend that did not wait for it.
        let srv = site.serve_config(
            model,
            &config_with(&backend, "prefix = \"/app/\"", "request_buffering = false"),
        );
        let mut conn = srv.connect();
        // The body is a request in disguise: 38 bytes, as announced.
        let smuggled = "GET /page.txt HTTP/1.1\r\nHost: t\r\n\r\n";
        let r = conn.exchange(format!(
            "POST /app/upload HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
            smuggled.len()
        ));
        r.assert_status(401);
        assert_eq!(r.header("Connection"), Some("close"));
        // The client may still send the body; it is dropped, and the connection ends.
        conn.send(smuggled);
        let mut stream = conn.stream().try_clone().unwrap();
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
        assert!(
            rest.is_empty(),
            "the body was answered as a request: {}",
            String::from_utf8_lossy(&rest)
        );
    }
);

httptest!(a_backend_switching_protocols_unasked_gives_502, |model| {
    let backend = Backend::start(switch_unasked);
    let site = site();
    let srv = site.serve_config(model, &config(&backend, "prefix = \"/app/\"", ""));
    let mut conn = srv.connect();
    // Upgrade is not passed on in proxy mode, so the backend had no reason to switch.
    let r = conn
        .exchange("GET /app/ws HTTP/1.1\r\nHost: t\r\nConnection: upgrade\r\nUpgrade: foo\r\n\r\n");
    r.assert_status(502);
    conn.exchange("GET /page.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .assert_ok(200, "static page\n");
});

httptest!(backend_connections_are_kept_for_the_idle_timeout, |model| {
    let backend = Backend::start(echo);
    let site = site();
    let srv = site.serve_config(
        model,
        &config(&backend, "prefix = \"/app/\"", "workers = 1").replace(
            "response_timeout = \"1s\"",
            "response_timeout = \"1s\"\nidle_timeout = \"1s\"",
        ),
    );
    let mut conn = srv.connect();
    conn.exchange("GET /app/1 HTTP/1.1\r\nHost: t\r\n\r\n")
        .assert_status(200);
    conn.exchange("GET /app/2 HTTP/1.1\r\nHost: t\r\n\r\n")
        .assert_status(200);
    assert_eq!(backend.connections(), 1, "reused within the idle timeout");
    std::thread::sleep(Duration::from_millis(1500));
    conn.exchange("GET /app/3 HTTP/1.1\r\nHost: t\r\n\r\n")
        .assert_status(200);
    assert_eq!(
        backend.connections(),
        2,
        "not reused after the idle timeout"
    );
});

httptest!(
    hand_overs_that_fail_or_end_leave_no_descriptor_behind,
    |model| hand_overs_leave_nothing_behind(model, "")
);

/// The descriptor test, with `extra` in the `[handover]` table.
pub(crate) fn hand_overs_leave_nothing_behind(model: &'static str, extra: &str) {
    let backend = Backend::start(by_path);
    let dead = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let site = site();
    let text = format!(
        "root = \"root\"\nworkers = 1\n[timeouts]\nlinger = \"200ms\"\n\
         [[backend]]\nname = \"app\"\naddresses = \"{}\"\nresponse_timeout = \"2s\"\n\
         [[backend]]\nname = \"dead\"\naddresses = \"{dead}\"\n\
         [[route]]\nbackend = \"app\"\nprefix = \"/ws/\"\nmethod = \"bridge\"\n\
         [[route]]\nbackend = \"app\"\nprefix = \"/app/\"\n\
         [[route]]\nbackend = \"dead\"\nprefix = \"/dead/\"\n\
         [handover]\n{extra}\n",
        backend.addr
    );
    let srv = site.serve_config(model, &text);
    srv.get("/page.txt").assert_ok(200, "static page\n");
    let baseline = sockets_and_pipes(srv.pid());
    for _ in 0..10 {
        srv.get("/app/ok").assert_ok(200, "ok\n");
        srv.get("/app/garbage").assert_status(502);
        srv.get("/dead/x").assert_status(502);
        let mut conn = srv.connect();
        conn.send("GET /app/cut HTTP/1.1\r\nHost: t\r\n\r\n");
        let mut rest = Vec::new();
        let _ = conn.stream().try_clone().unwrap().read_to_end(&mut rest);
        // A client that leaves in the middle of a large answer.
        let mut conn = srv.connect();
        conn.send("GET /app/big HTTP/1.1\r\nHost: t\r\n\r\n");
        let mut some = [0u8; 4096];
        let _ = conn.stream().try_clone().unwrap().read(&mut some);
        drop(conn);
        // A bridged connection, ended by the client.
        let mut conn = srv.connect();
        conn.send(
            "GET /ws/x HTTP/1.1\r\nHost: t\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nping",
        );
        let mut stream = conn.stream().try_clone().unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 256];
        while !got.ends_with(b"ping") {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        assert!(got.ends_with(b"ping"), "{}", String::from_utf8_lossy(&got));
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        let _ = stream.read_to_end(&mut got);
    }
    // Kept backend connections may stay, a few per worker or child process; nothing
    // else may (each round opens six connections, so a leak shows as dozens).
    let allowed = baseline + 4 + 2 * children(srv.pid()).len();
    let settled = wait_for(Duration::from_secs(10), || {
        let n = sockets_and_pipes(srv.pid());
        (n <= allowed).then_some(n)
    });
    assert!(
        settled.is_some(),
        "{} connections and pipes held, {baseline} at the start, {allowed} allowed",
        sockets_and_pipes(srv.pid())
    );
}

httptest!(
    clients_that_close_after_each_request_share_backend_connections,
    |model| {
        let backend = Backend::start(echo);
        let site = site();
        let srv = site.serve_config(
            model,
            &config(&backend, "prefix = \"/app/\"", "workers = 1"),
        );
        let single_pool = matches!(model, "epoll" | "uring");
        let idle = sockets_and_pipes(srv.pid());
        for i in 0..10 {
            let r = srv.get(&format!("/app/{i}"));
            r.assert_status(200);
            assert!(r.text().starts_with(&format!("GET /app/{i} HTTP/1.1")));
            if single_pool {
                // The backend connection reaches the pool once the server has seen this
                // client close, which may come after the next client's request: wait until
                // the client's socket is gone (only the pooled connection left).
                wait_for(Duration::from_secs(5), || {
                    (sockets_and_pipes(srv.pid()) <= idle + 1).then_some(())
                });
            }
        }
        // A client's backend connection goes to its worker's pool when the client leaves,
        // and the next client takes it. Models with several workers, threads or processes
        // have a pool in each.
        let connections = backend.connections();
        match model {
            "epoll" | "uring" => assert_eq!(connections, 1),
            _ => assert!(connections < 10, "{connections} backend connections"),
        }
    }
);

httptest!(a_backend_answering_garbage_gives_502, |model| {
    let backend = Backend::start(garbage);
    let site = site();
    let srv = site.serve_config(model, &config(&backend, "prefix = \"/app/\"", ""));
    srv.get("/app/x").assert_status(502);
});

httptest!(
    a_client_going_away_releases_the_backend_connection,
    |model| {
        let backend = Backend::start(stall);
        let (ends_tx, ends_rx) = mpsc::channel();
        *backend.log.ends.lock().unwrap() = Some(ends_tx);
        let site = site();
        let srv = site.serve_config(model, &config(&backend, "prefix = \"/app/\"", ""));
        let mut conn = srv.connect();
        conn.send("GET /app/x HTTP/1.1\r\nHost: t\r\n\r\n");
        wait_for(Duration::from_secs(5), || {
            (backend.connections() == 1).then_some(())
        })
        .expect("the request never reached the backend");
        drop(conn);
        ends_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the backend connection was not closed after the client left");
    }
);

/// Answers with the Cache-Control the path names (`/public`, `/no-store`, `/cookie`, and
/// `/aged`, which says it has already spent 58 of its 60 seconds in another cache) and a
/// body that counts the requests it has seen, so a cached answer is recognisable.
fn cache_control(stream: TcpStream, log: &BackendLog) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    while let Some((line, headers)) = read_head(&mut reader) {
        read_body(&mut reader, &headers);
        let n = {
            let mut requests = log.requests.lock().unwrap();
            requests.push(line.clone());
            requests.len()
        };
        let extra = if line.contains("/no-store") {
            "Cache-Control: no-store\r\n"
        } else if line.contains("/cookie") {
            "Cache-Control: public, max-age=60\r\nSet-Cookie: id=1\r\n"
        } else if line.contains("/aged") {
            "Age: 58\r\nCache-Control: public, max-age=60\r\n"
        } else if line.contains("/validated") {
            "Cache-Control: public, max-age=60\r\nETag: \"v7\"\r\nLast-Modified: Sat, 21 Nov 2026 10:00:00 GMT\r\nVary: Accept-Encoding\r\n"
        } else {
            "Cache-Control: public, max-age=60\r\n"
        };
        let body = format!("answer {n}\n");
        let response = format!(
            "HTTP/1.1 200 OK\r\n{extra}Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

httptest!(
    cacheable_backend_responses_are_served_from_the_cache,
    |model| {
        let backend = Backend::start(cache_control);
        let site = site();
        let srv = site.serve_config(
            model,
            &config(&backend, "prefix = \"/app/\"", "workers = 1"),
        );
        let count = || backend.log.requests.lock().unwrap().len();
        // One connection, so every request meets the same worker (each prefork child has a
        // cache of its own).
        let mut conn = srv.connect();
        let mut get_with =
            |path: &str, fields: &[(&str, &str)]| conn.exchange(req("GET", path, fields));
        let first = get_with("/app/public", &[]);
        first.assert_status(200);
        let again = get_with("/app/public", &[]);
        assert_eq!(
            again.body, first.body,
            "a cacheable answer was fetched again"
        );
        assert_eq!(count(), 1);
        // Not kept: no-store, Set-Cookie, or a request with credentials.
        get_with("/app/no-store", &[]);
        get_with("/app/no-store", &[]);
        assert_eq!(count(), 3);
        get_with("/app/cookie", &[]);
        get_with("/app/cookie", &[]);
        assert_eq!(count(), 5);
        get_with("/app/public", &[("Authorization", "Basic dTpw")]).assert_status(200);
        assert_eq!(count(), 6);
    }
);

httptest!(
    the_cache_answers_conditional_and_head_requests_from_a_stored_get,
    |model| {
        let backend = Backend::start(cache_control);
        let site = site();
        let srv = site.serve_config(
            model,
            &config(&backend, "prefix = \"/app/\"", "workers = 1"),
        );
        let count = || backend.log.requests.lock().unwrap().len();
        let mut conn = srv.connect();
        let first = conn.exchange(req("GET", "/app/validated", &[]));
        first.assert_status(200);
        assert_eq!(count(), 1);
        // RFC 9111 §4.3.2: validators that match the stored response get 304, with the
        // fields RFC 9110 §15.4.5 has it repeat and no body.
        for fields in [
            &[("If-None-Match", "\"v7\"")][..],
            &[("If-None-Match", "\"v1\", W/\"v7\"")],
            &[("If-Modified-Since", "Sat, 21 Nov 2026 10:00:00 GMT")],
            &[("If-Modified-Since", "Sun, 22 Nov 2026 10:00:00 GMT")],
        ] {
            let r = conn.exchange(req("GET", "/app/validated", fields));
            r.assert_status(304);
            assert!(r.body.is_empty(), "{r}");
            assert_eq!(r.header("ETag"), Some("\"v7\""), "{r}");
            assert_eq!(r.header("Vary"), Some("Accept-Encoding"), "{r}");
            assert_eq!(r.header("Cache-Control"), Some("public, max-age=60"), "{r}");
            assert!(r.header("Content-Length").is_none(), "{r}");
            age(&r);
        }
        // Validators that do not match get the whole stored response; If-None-Match
        // decides when both are sent.
        for fields in [
            &[("If-None-Match", "\"v1\"")][..],
            &[("If-Modified-Since", "Sat, 21 Nov 2026 09:59:59 GMT")],
            &[
                ("If-None-Match", "\"v1\""),
                ("If-Modified-Since", "Sun, 22 Nov 2026 10:00:00 GMT"),
            ],
        ] {
            let r = conn.exchange(req("GET", "/app/validated", fields));
            r.assert_status(200);
            assert_eq!(r.body, first.body, "{r}");
        }
        // HEAD is answered with the stored head, without the body.
        let r = conn.exchange(req("HEAD", "/app/validated", &[]));
        r.assert_status(200);
        assert!(r.body.is_empty(), "{r}");
        assert_eq!(
            r.header("Content-Length"),
            Some(first.body.len().to_string().as_str())
        );
        age(&r);
        // None of it went to the backend.
        assert_eq!(count(), 1);
        // A HEAD that misses goes to the backend and fills nothing.
        conn.exchange(req("HEAD", "/app/other", &[]))
            .assert_status(200);
        assert_eq!(count(), 2);
        conn.exchange(req("GET", "/app/other", &[]))
            .assert_status(200);
        assert_eq!(count(), 3);
    }
);

httptest!(
    clients_that_close_or_speak_http_1_0_use_and_fill_the_cache,
    |model| {
        // Whether a response is cached depends on the request and the response, not on the
        // client's connection: health checkers, load balancers and HTTP/1.0 clients that
        // close after each request get cached answers, and fill the cache.
        let backend = Backend::start(cache_control);
        let site = site();
        let srv = site.serve_config(
            model,
            &config(&backend, "prefix = \"/app/\"", "workers = 1"),
        );
        let count = || backend.log.requests.lock().unwrap().len();
        let requests = [
            "GET /app/public HTTP/1.0\r\nHost: t\r\n\r\n",
            "GET /app/public HTTP/1.0\r\nHost: t\r\n\r\n",
            "GET /app/public HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            "GET /app/public HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            "GET /app/public HTTP/1.0\r\nHost: t\r\nConnection: keep-alive\r\n\r\n",
            "GET /app/public HTTP/1.1\r\nHost: t\r\n\r\n",
        ];
        let mut bodies = Vec::new();
        let mut cached = 0;
        for (i, raw) in requests.iter().enumerate() {
            let mut conn = srv.connect();
            let r = conn.exchange(raw);
            r.assert_status(200);
            let closes =
                !raw.contains("keep-alive") && (raw.contains("HTTP/1.0") || raw.contains("close"));
            if closes {
                assert!(r.connection_has("close"), "request {i}:\n{r}");
                conn.expect_closed();
            } else if raw.contains("HTTP/1.0") {
                assert!(r.connection_has("keep-alive"), "request {i}:\n{r}");
            }
            // One cache for the process: every answer after the first comes from it.
            let one_cache = model != "prefork";
            if i > 0 && one_cache && r.header("age").is_none() {
                panic!("request {i} not answered from the cache:\n{r}");
            }
            cached += usize::from(r.header("age").is_some());
            bodies.push(r.body);
        }
        // The workers of a process share one cache, so the page is fetched once; a prefork
        // child keeps its own and may meet a cold one, which fetches anew.
        match model {
            "prefork" => assert_eq!(cached + count(), requests.len()),
            _ => {
                assert_eq!(count(), 1);
                assert!(bodies.iter().all(|b| b == &bodies[0]), "{bodies:?}");
            }
        }
    }
);

/// The one `Age` field of a response, in seconds.
#[track_caller]
fn age(r: &Response) -> u64 {
    match r.headers_all("age")[..] {
        [value] => value.parse().unwrap_or_else(|_| panic!("bad Age in\n{r}")),
        _ => panic!("not exactly one Age field in\n{r}"),
    }
}

httptest!(cached_responses_carry_their_age, |model| {
    let backend = Backend::start(cache_control);
    let site = site();
    let srv = site.serve_config(
        model,
        &config(&backend, "prefix = \"/app/\"", "workers = 1"),
    );
    let count = || backend.log.requests.lock().unwrap().len();
    // One connection, so every request meets the same worker and its cache.
    let mut conn = srv.connect();
    let mut get = |path: &str| conn.exchange(req("GET", path, &[]));
    // Relayed from the backend: no Age of ours.
    let first = get("/app/public");
    first.assert_status(200).assert_no_header("age");
    // From the cache: the same response with its age, which grows.
    let hit = get("/app/public");
    assert_eq!(hit.body, first.body, "not served from the cache");
    let young = age(&hit);
    assert!(young <= 1, "Age {young} for a response just fetched");
    let mut fields = hit.headers.clone();
    fields.retain(|(name, _)| !name.eq_ignore_ascii_case("age"));
    assert_eq!(
        fields, first.headers,
        "a cached response differs beyond Age"
    );
    std::thread::sleep(Duration::from_millis(1200));
    let older = get("/app/public");
    assert_eq!(older.body, first.body, "not served from the cache");
    assert!(age(&older) > young, "Age did not grow:\n{older}");
    assert_eq!(count(), 1);
});

httptest!(
    the_backends_age_is_replaced_and_shortens_the_lifetime,
    |model| {
        let backend = Backend::start(cache_control);
        let site = site();
        let srv = site.serve_config(
            model,
            &config(&backend, "prefix = \"/app/\"", "workers = 1"),
        );
        let count = || backend.log.requests.lock().unwrap().len();
        // One connection, so every request meets the same worker and its cache.
        let mut conn = srv.connect();
        let mut get = |path: &str| conn.exchange(req("GET", path, &[]));
        let fetched = Instant::now();
        // Relayed: the backend's own Age, as sent.
        let first = get("/app/aged");
        assert_eq!(age(&first), 58);
        // From the cache: one Age, the backend's plus the time held here.
        let hit = get("/app/aged");
        assert_eq!(hit.body, first.body, "not served from the cache");
        let held = age(&hit);
        assert!((58..60).contains(&held), "Age {held}:\n{hit}");
        assert_eq!(count(), 1);
        // 58 of 60 seconds were gone on arrival: fetched again after 2 s, not 60.
        std::thread::sleep(
            (fetched + Duration::from_millis(2500)).saturating_duration_since(Instant::now()),
        );
        let again = get("/app/aged");
        assert_eq!(count(), 2, "an expired response was served from the cache");
        assert_ne!(again.body, first.body);
        assert_eq!(age(&again), 58);
    }
);

httptest!(an_index_file_a_route_claims_goes_to_the_backend, |model| {
    let backend = Backend::start(echo);
    let site = site();
    site.file("app/index.php", "<?php source must never be served ?>");
    site.file("both/index.html", "static index\n");
    site.file("both/index.php", "<?php not reached ?>");
    let text = config(
        &backend,
        "extensions = [\"php\"]",
        "index = [\"index.php\", \"index.html\"]",
    );
    let srv = site.serve_config(model, &text);
    let r = srv.get("/app/");
    assert!(r.text().starts_with("GET /app/ HTTP/1.1\n"), "{}", r.text());
    assert!(!r.text().contains("source must never be served"));
    // The first index that exists decides: here index.php again.
    let r = srv.get("/both/");
    assert!(
        r.text().starts_with("GET /both/ HTTP/1.1\n"),
        "{}",
        r.text()
    );
    // A directory whose only index is static is served statically.
    srv.get("/").assert_ok(200, "static index\n");
});

/// After a request head, answers 101 and then echoes every byte until the client's end, then
/// ends too: a protocol switch, as WebSocket does.
pub(crate) fn upgrade_then_echo(stream: TcpStream, log: &BackendLog) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let Some((line, _)) = read_head(&mut reader) else {
        return;
    };
    log.requests.lock().unwrap().push(line);
    if writer
        .write_all(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n",
        )
        .is_err()
    {
        return;
    }
    let _ = std::io::copy(&mut reader, &mut writer);
    let _ = writer.shutdown(std::net::Shutdown::Write);
}

httptest!(
    a_bridge_carries_megabytes_both_ways_until_the_backend_ends,
    |model| bridge_carries_megabytes(model, "")
);

/// The megabytes test, with `extra` at the top of the configuration.
pub(crate) fn bridge_carries_megabytes(model: &'static str, extra: &str) {
    let backend = Backend::start(upgrade_then_echo);
    let site = site();
    let route = "prefix = \"/ws/\"\nmethod = \"bridge\"";
    let srv = site.serve_config(model, &config(&backend, route, extra));
    let mut conn = srv.connect();
    // Bytes right behind the head go along with it.
    conn.send("GET /ws/echo HTTP/1.1\r\nHost: t\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nearly bytes|");
    let stream = conn.stream().try_clone().unwrap();
    let mut writer = stream.try_clone().unwrap();
    let payload: Vec<u8> = (0..4 << 20).map(|i: u32| (i % 251) as u8).collect();
    let sent = payload.clone();
    let sender = std::thread::spawn(move || {
        writer.write_all(&sent).unwrap();
        // Half-close: the answer must still arrive in full.
        writer.shutdown(std::net::Shutdown::Write).unwrap();
    });
    let mut received = Vec::new();
    let mut reader = stream;
    reader
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    reader.read_to_end(&mut received).unwrap();
    sender.join().unwrap();
    let head = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n";
    assert!(
        received.starts_with(head),
        "{:?}",
        String::from_utf8_lossy(&received[..80.min(received.len())])
    );
    let echoed = &received[head.len()..];
    assert_eq!(&echoed[..12], b"early bytes|");
    assert_eq!(echoed.len(), 12 + payload.len());
    assert!(echoed[12..] == payload[..], "the echoed bytes differ");
    // Logged once, when handed over; the backend's answer is its own to log.
    let logged = srv.wait_stdout_line(Duration::from_secs(5), |l| l.contains("GET /ws/echo"));
    assert!(
        logged.as_deref().is_some_and(|l| l.contains("\" - - ")),
        "{logged:?}"
    );
}

/// The byte at `i` of a large test body.
fn body_byte(i: usize) -> u8 {
    (i % 253) as u8
}

/// How many bytes of `body` differ from `body_byte`. Compared a period of the pattern at a
/// time, which is quick even unoptimised: a backend that takes long to check a body would
/// have its answer time out.
fn wrong_bytes(body: &[u8]) -> usize {
    let pattern: Vec<u8> = (0..253).map(body_byte).collect();
    body.chunks(pattern.len())
        .filter(|piece| **piece != pattern[..piece.len()])
        .map(|piece| piece.iter().zip(&pattern).filter(|(a, b)| a != b).count())
        .sum()
}

/// `GET /app/big/N` answers N bytes of `body_byte`; `GET /app/cut/N` announces N and sends
/// half, then closes; any request with a body is answered with its length and a checksum.
fn bulk(stream: TcpStream, log: &BackendLog) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    while let Some((line, headers)) = read_head(&mut reader) {
        log.requests.lock().unwrap().push(line.clone());
        let target = line.split(' ').nth(1).unwrap_or_default().to_string();
        if let Some(n) = target.strip_prefix("/app/big/") {
            let n: usize = n.parse().unwrap();
            let body: Vec<u8> = (0..n).map(body_byte).collect();
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n");
            if writer.write_all(head.as_bytes()).is_err() || writer.write_all(&body).is_err() {
                return;
            }
            continue;
        }
        if let Some(n) = target.strip_prefix("/app/cut/") {
            let n: usize = n.parse().unwrap();
            let body: Vec<u8> = (0..n / 2).map(body_byte).collect();
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n");
            let _ = writer.write_all(head.as_bytes());
            let _ = writer.write_all(&body);
            return;
        }
        let body = read_body(&mut reader, &headers);
        let wrong = body
            .iter()
            .enumerate()
            .filter(|(i, b)| **b != body_byte(*i))
            .count();
        let answer = format!("got {} bytes, {wrong} wrong\n", body.len());
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

httptest!(large_bodies_cross_the_proxy_intact_both_ways, |model| {
    let backend = Backend::start(bulk);
    let site = site();
    let srv = site.serve_config(model, &config(&backend, "prefix = \"/app/\"", ""));
    let mut conn = srv.connect();
    // Downloads, small and large, on one kept-alive connection.
    for n in [1000, 3 << 20, 70_000, 5 << 20] {
        let r = conn.exchange(req("GET", &format!("/app/big/{n}"), &[]));
        r.assert_status(200);
        assert_eq!(r.body.len(), n);
        let wrong = r
            .body
            .iter()
            .enumerate()
            .filter(|(i, b)| **b != body_byte(*i))
            .count();
        assert_eq!(wrong, 0, "{wrong} bytes differ in a body of {n}");
    }
    // Uploads, then a static request on the same connection.
    for n in [2000, 4 << 20] {
        let body: Vec<u8> = (0..n).map(body_byte).collect();
        let head = format!("POST /app/upload HTTP/1.1\r\nHost: t\r\nContent-Length: {n}\r\n\r\n");
        conn.send(head.as_bytes());
        conn.send(&body);
        let r = conn.read_response();
        r.assert_ok(200, format!("got {n} bytes, 0 wrong\n"));
    }
    conn.exchange(req("GET", "/page.txt", &[]))
        .assert_ok(200, "static page\n");
    // The 4 MiB upload went through a temporary file, closed once sent.
    let left = wait_for(Duration::from_secs(5), || {
        (temporary_files(srv.pid()) == 0).then_some(())
    });
    assert!(left.is_some(), "a temporary file is left open");
    // One backend connection carried all of it.
    assert_eq!(
        backend.connections(),
        1,
        "{:?}",
        backend.log.requests.lock().unwrap()
    );
});

httptest!(
    a_large_body_cut_short_by_the_backend_closes_the_client,
    |model| {
        let backend = Backend::start(bulk);
        let site = site();
        let srv = site.serve_config(model, &config(&backend, "prefix = \"/app/\"", ""));
        let mut conn = srv.connect();
        let n = 2 << 20;
        conn.send(req("GET", &format!("/app/cut/{n}"), &[]));
        // The head and half of the body arrive, then the end: never a complete-looking response.
        let mut received = Vec::new();
        let stream = conn.stream().try_clone().unwrap();
        let _ = (&stream).read_to_end(&mut received);
        let head_end = received.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert!(received.starts_with(b"HTTP/1.1 200 OK\r\n"));
        assert!(received.len() - head_end < n, "the body looks complete");
        assert_eq!(received.len() - head_end, n / 2);
    }
);

httptest!(
    a_client_that_stops_uploading_does_not_poison_the_backend,
    |model| {
        for buffering in [false, true] {
            let backend = Backend::start(bulk);
            let site = site();
            let srv = site.serve_config(
                model,
                &config_with(
                    &backend,
                    "prefix = \"/app/\"",
                    &format!("request_buffering = {buffering}"),
                ),
            );
            {
                let mut conn = srv.connect();
                let n = 4 << 20;
                let head =
                    format!("POST /app/upload HTTP/1.1\r\nHost: t\r\nContent-Length: {n}\r\n\r\n");
                conn.send(head.as_bytes());
                let part: Vec<u8> = (0..n / 4).map(body_byte).collect();
                conn.send(&part);
                // Gone with three quarters unsent.
            }
            std::thread::sleep(Duration::from_millis(200));
            // The next client gets a clean answer (on a new backend connection: the cut one is not
            // reused).
            let mut conn = srv.connect();
            conn.exchange(req("GET", "/app/big/10", &[]))
                .assert_status(200);
            // Buffered, the cut upload never reached the backend at all.
            let expected = if buffering { 1 } else { 2 };
            assert_eq!(backend.connections(), expected, "buffering {buffering}");
        }
    }
);

/// Pause before each read of a slow backend.
const SLOW_PAUSE: Duration = Duration::from_millis(1);
/// Most bytes one read of a slow backend takes.
const SLOW_PIECE: usize = 64 * 1024;

/// A socket read in small pieces with a pause before each: a backend busy with other work,
/// far slower than the client that sends to it.
struct Slow(TcpStream, Duration);

impl Read for Slow {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        std::thread::sleep(self.1);
        let n = buf.len().min(SLOW_PIECE);
        self.0.read(&mut buf[..n])
    }
}

/// Reads each request body slowly (see `Slow`), checks it against `body_byte` and answers
/// `{"bytes": N, "wrong": W}`; closes after the answer when the request asks for it.
fn slow_sink(stream: TcpStream, log: &BackendLog) {
    paced_sink(stream, log, SLOW_PAUSE);
}

/// [`slow_sink`] twenty times slower: 64 KiB each 20 ms, about 3 MiB a second.
fn crawling_sink(stream: TcpStream, log: &BackendLog) {
    paced_sink(stream, log, Duration::from_millis(20));
}

/// [`slow_sink`] with `pause` before each read.
fn paced_sink(stream: TcpStream, log: &BackendLog, pause: Duration) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::with_capacity(SLOW_PIECE, Slow(stream, pause));
    while let Some((line, headers)) = read_head(&mut reader) {
        log.requests.lock().unwrap().push(line);
        let body = read_body(&mut reader, &headers);
        let wrong = wrong_bytes(&body);
        let close = header(&headers, "connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let answer = format!("{{\"bytes\": {}, \"wrong\": {wrong}}}\n", body.len());
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}\r\n{answer}",
            answer.len(),
            if close { "Connection: close\r\n" } else { "" }
        );
        if writer.write_all(response.as_bytes()).is_err() || close {
            return;
        }
    }
}

const MIB: usize = 1 << 20;
/// How long an upload's client waits for each write and for the answer.
const UPLOAD_PATIENCE: Duration = Duration::from_secs(30);

/// Uploads `body` on a connection of its own (`Connection: close`, framed by length or in
/// chunks), as a browser or curl posting a file does, and checks the answer and the close
/// after it.
fn upload(addr: SocketAddr, body: &[u8], chunked: bool) -> Result<(), String> {
    upload_paced(addr, body, chunked, Duration::ZERO)
}

/// [`upload`], with a pause after every 64 KiB sent: a client on a slow link.
fn upload_paced(
    addr: SocketAddr,
    body: &[u8],
    chunked: bool,
    pause: Duration,
) -> Result<(), String> {
    let n = body.len();
    let what = format!(
        "{} MiB {}",
        n / MIB,
        if chunked { "chunked" } else { "by length" }
    );
    let mut conn = Conn::open(addr);
    // An answer waits for the whole body to reach the slow backend, megabytes of which the
    // kernel may still hold once the last write returns; a loaded machine needs more than
    // the usual few seconds for that. A stall still fails: the proxy answers 504 first.
    let patience = Some(UPLOAD_PATIENCE);
    conn.stream().set_read_timeout(patience).unwrap();
    conn.stream().set_write_timeout(patience).unwrap();
    let framing = if chunked {
        "Transfer-Encoding: chunked".to_string()
    } else {
        format!("Content-Length: {n}")
    };
    let mut request = format!(
        "POST /app/upload HTTP/1.1\r\nHost: t\r\nContent-Type: application/octet-stream\r\n{framing}\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    if chunked {
        // Chunks of an odd size, so their boundaries fall anywhere in the receive buffers.
        for piece in body.chunks(100_003) {
            request.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
            request.extend_from_slice(piece);
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(b"0\r\n\r\n");
    } else {
        request.extend_from_slice(body);
    }
    let piece = if pause.is_zero() {
        request.len()
    } else {
        64 * 1024
    };
    for (i, part) in request.chunks(piece).enumerate() {
        if i > 0 {
            std::thread::sleep(pause);
        }
        conn.try_send(part)
            .map_err(|e| format!("{what}: sending the request: {e}"))?;
    }
    let r = match conn.try_read_response("POST") {
        Ok(Some(r)) => r,
        Ok(None) => return Err(format!("{what}: closed without an answer")),
        Err(e) => return Err(format!("{what}: reading the answer: {e}")),
    };
    let expected = format!("{{\"bytes\": {n}, \"wrong\": 0}}\n");
    if r.status != 200 || r.body != expected.as_bytes() {
        return Err(format!("{what}: answered {r}"));
    }
    match conn.wait_closed(UPLOAD_PATIENCE) {
        Ok(Closed::Eof) => Ok(()),
        other => Err(format!("{what}: after the answer: {other:?}")),
    }
}

/// Uploads of 1, 3 and 20 MiB, by length and chunked, to a backend that reads far slower
/// than the client sends, through `route`: 20 one after another, then 8 at once. Each must be
/// answered, intact, and logged.
pub(crate) fn uploads_to_a_slow_backend(model: &'static str, route: &str) {
    uploads_to_a_slow_backend_with(model, route, "")
}

/// [`uploads_to_a_slow_backend`] with `extra` at the top of the configuration.
pub(crate) fn uploads_to_a_slow_backend_with(model: &'static str, route: &str, extra: &str) {
    let backend = Backend::start_with_receive_buffer(slow_sink, 64 * 1024);
    let site = site();
    // Backpressure is what this test is about, not timeouts (a test of their own): a
    // generous response timeout keeps a loaded machine from failing it.
    let config = config(&backend, route, extra)
        .replace("response_timeout = \"1s\"", "response_timeout = \"10s\"");
    let srv = site.serve_config(model, &config);
    let addr = srv.addr();
    let bodies: Arc<Vec<Vec<u8>>> = Arc::new(
        [MIB, 3 * MIB, 20 * MIB]
            .iter()
            .map(|&n| (0..n).map(body_byte).collect())
            .collect(),
    );
    // 20 in a row: 1 and 3 MiB, each by length and chunked, five times over; then 20 MiB
    // once each way. The 20 MiB ones are not repeated 20 times: each takes about a third of
    // a second at the backend's pace, and whatever can go wrong with them (more input than
    // the backend takes, held for longer) already happens in their first megabytes.
    let mut in_a_row = Vec::new();
    for i in 0..20 {
        in_a_row.push((i % 2, i % 4 >= 2));
    }
    in_a_row.push((2, false));
    in_a_row.push((2, true));
    for (i, &(size, chunked)) in in_a_row.iter().enumerate() {
        if let Err(e) = upload(addr, &bodies[size], chunked) {
            panic!("upload {} of {} in a row: {e}", i + 1, in_a_row.len());
        }
    }
    // 8 at once, each size and framing among them.
    let at_once: Vec<_> = (0..8)
        .map(|i| {
            let bodies = bodies.clone();
            let (size, chunked) = (i % 3, i % 2 == 1);
            std::thread::spawn(move || upload(addr, &bodies[size], chunked))
        })
        .collect();
    let failed: Vec<String> = at_once
        .into_iter()
        .filter_map(|t| t.join().unwrap().err())
        .collect();
    assert!(failed.is_empty(), "of 8 uploads at once: {failed:#?}");
    // One access-log line each: the status the backend gave, or `-` for a bridge, whose
    // answer fastpath does not see.
    let status = if route.contains("bridge") { "-" } else { "200" };
    let expected = in_a_row.len() + 8;
    let logged = wait_for(Duration::from_secs(5), || {
        let stdout = srv.stdout();
        let lines: Vec<&str> = stdout
            .lines()
            .filter(|l| l.contains("\"POST /app/upload HTTP/1.1\""))
            .collect();
        (lines.len() == expected).then_some(
            lines
                .iter()
                .all(|l| l.contains(&format!("\"POST /app/upload HTTP/1.1\" {status} "))),
        )
    });
    assert_eq!(
        logged,
        Some(true),
        "expected {expected} access-log lines with status {status}"
    );
}

httptest!(uploads_reach_a_slow_backend_through_the_proxy, |model| {
    uploads_to_a_slow_backend(model, "prefix = \"/app/\"");
});

httptest!(uploads_reach_a_slow_backend_through_a_bridge, |model| {
    uploads_to_a_slow_backend(model, "prefix = \"/app/\"\nmethod = \"bridge\"");
});

httptest!(
    an_upload_longer_than_the_response_timeout_is_answered,
    |model| {
        let backend = Backend::start(slow_sink);
        let site = site();
        let srv = site.serve_config(model, &config(&backend, "prefix = \"/app/\"", ""));
        let addr = srv.addr();
        // 1 MiB sent 64 KiB at a time, a tenth of a second apart: the request takes 1.5 s, past
        // the response timeout of 1 s, which counts from its end. By length (spliced where the
        // model can) and chunked (copied), at once.
        let body: Arc<Vec<u8>> = Arc::new((0..MIB).map(body_byte).collect());
        let started = Instant::now();
        let uploads: Vec<_> = [false, true]
            .into_iter()
            .map(|chunked| {
                let body = body.clone();
                let pause = Duration::from_millis(100);
                std::thread::spawn(move || upload_paced(addr, &body, chunked, pause))
            })
            .collect();
        for upload in uploads {
            if let Err(e) = upload.join().unwrap() {
                panic!("{e}");
            }
        }
        assert!(started.elapsed() > Duration::from_millis(1500));
    }
);

httptest!(requests_cut_off_by_their_connection_are_logged, |model| {
    let backend = Backend::start(stall);
    let site = site();
    // Streamed, so that the backend is asked while the body is still arriving.
    let mut srv = site.serve_config(
        model,
        &config_with(&backend, "prefix = \"/app/\"", "request_buffering = false"),
    );
    // The client leaves in the middle of its upload.
    {
        let mut conn = srv.connect();
        conn.send("POST /app/upload HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n");
        conn.send([b'x'; 1000]);
        wait_for(Duration::from_secs(5), || {
            (backend.connections() == 1).then_some(())
        })
        .expect("the backend was not asked");
    }
    let line = srv.wait_stdout_line(Duration::from_secs(5), |l| l.contains("/app/upload"));
    assert!(
        line.as_deref().is_some_and(
            |l| l.ends_with("\"POST /app/upload HTTP/1.1\" - - \"-\" \"-\" client-gone")
        ),
        "{line:?}"
    );
    // The server stops at once (SIGINT: a graceful stop would let the request finish) while
    // a request waits for its answer.
    let mut conn = srv.connect();
    conn.send(req("GET", "/app/wait", &[("User-Agent", "t/1")]));
    wait_for(Duration::from_secs(5), || {
        (backend.connections() == 2).then_some(())
    })
    .expect("the backend was not asked");
    srv.stop(libc::SIGINT, Duration::from_secs(5));
    let out = srv.stdout();
    assert!(
        out.lines()
            .any(|l| l.ends_with("\"GET /app/wait HTTP/1.1\" - - \"-\" \"t/1\" shutdown")),
        "{out}"
    );
});

/// Records each request exactly as it arrived, head and body (framed by length, or chunked
/// up to the last chunk, which a proxy framing anew sends without trailers), then answers
/// `ok`.
fn record(stream: TcpStream, log: &BackendLog) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut raw = Vec::new();
        loop {
            let mut line = Vec::new();
            if reader.read_until(b'\n', &mut line).unwrap_or(0) == 0 {
                return;
            }
            raw.extend_from_slice(&line);
            if line == b"\r\n" {
                break;
            }
        }
        let head = String::from_utf8_lossy(&raw).to_lowercase();
        if let Some(n) = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
        {
            let mut body = vec![0u8; n.trim().parse().unwrap()];
            reader.read_exact(&mut body).unwrap();
            raw.extend_from_slice(&body);
        } else if head.contains("transfer-encoding:") {
            while !raw.ends_with(b"\r\n0\r\n\r\n") && !raw.ends_with(b"\r\n\r\n0\r\n\r\n") {
                let mut line = Vec::new();
                if reader.read_until(b'\n', &mut line).unwrap_or(0) == 0 {
                    break;
                }
                raw.extend_from_slice(&line);
            }
        }
        log.requests
            .lock()
            .unwrap()
            .push(String::from_utf8_lossy(&raw).into_owned());
        if writer
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
            .is_err()
        {
            return;
        }
    }
}

httptest!(relayed_request_bodies_are_framed_anew, |model| {
    // What the client sends, and what the backend must get buffered and streamed.
    let cases: [(&str, &str, &str); 3] = [
        // Chunk extensions and trailers never reach the backend.
        (
            "POST /app/a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n5;name=\"v\"\r\nhello\r\n6;a=b;c\r\n world\r\n0\r\nX-Sum: 1\r\n\r\n",
            "POST /app/a HTTP/1.1\r\nHost: t\r\nConnection: keep-alive\r\nVia: 1.1 fastpath\r\nContent-Length: 11\r\n\r\nhello world",
            "POST /app/a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\nVia: 1.1 fastpath\r\n\r\nb\r\nhello world\r\n0\r\n\r\n",
        ),
        // A coding besides chunked stays with the body, which then goes chunked either way.
        (
            "POST /app/b HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked;x=1\r\n\r\n3;x=y\r\nabc\r\n0\r\nX-T: 2\r\n\r\n",
            "POST /app/b HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\nConnection: keep-alive\r\nVia: 1.1 fastpath\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            "POST /app/b HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\nConnection: keep-alive\r\nVia: 1.1 fastpath\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        ),
        // A body framed by length keeps its length.
        (
            "POST /app/c HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nxyz",
            "POST /app/c HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nConnection: keep-alive\r\nVia: 1.1 fastpath\r\n\r\nxyz",
            "POST /app/c HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nConnection: keep-alive\r\nVia: 1.1 fastpath\r\n\r\nxyz",
        ),
    ];
    for buffering in [true, false] {
        let backend = Backend::start(record);
        let site = site();
        let keys = format!("forwarded = false\nrequest_buffering = {buffering}");
        let srv = site.serve_config(model, &config_with(&backend, "prefix = \"/app/\"", &keys));
        let mut conn = srv.connect();
        for (sent, buffered, streamed) in cases {
            // In one write, so that a streamed body is decoded in one piece (one chunk).
            conn.exchange(sent).assert_ok(200, "ok\n");
            let want = if buffering { buffered } else { streamed };
            let got = backend.log.requests.lock().unwrap().pop();
            assert_eq!(got.as_deref(), Some(want), "buffering {buffering}");
        }
    }
});

httptest!(
    a_buffered_body_is_read_whole_before_the_backend_is_asked,
    |model| {
        let backend = Backend::start(echo);
        let site = site();
        let srv = site.serve_config(model, &config(&backend, "prefix = \"/app/\"", ""));
        let mut conn = srv.connect();
        conn.send("POST /app/up HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\nhello");
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(backend.connections(), 0, "asked before the body was whole");
        conn.send(" world");
        let r = conn.read_response();
        assert!(r.text().contains("body: hello world\n"), "{r}");
        // Chunked, slowly: it goes by length.
        conn.send("POST /app/up HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel");
        std::thread::sleep(Duration::from_millis(200));
        conn.send("lo\r\n0\r\n\r\n");
        let r = conn.read_response();
        assert!(r.text().contains("body: hello\n"), "{r}");
        assert!(r.text().contains("content-length: 5\n"), "{r}");
        assert!(!r.text().contains("transfer-encoding"), "{r}");
        // A client that waits for 100 Continue gets it from fastpath; the backend never sees
        // the expectation.
        conn.send(
            "POST /app/up HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
        );
        let mut interim = [0u8; 25];
        conn.stream().read_exact(&mut interim).unwrap();
        assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
        conn.send("hi");
        let r = conn.read_response();
        assert!(r.text().contains("body: hi\n"), "{r}");
        assert!(!r.text().contains("expect"), "{r}");
        // One backend connection carried all three.
        assert_eq!(backend.connections(), 1);
    }
);

httptest!(bodies_past_the_maximum_get_413, |model| {
    for buffering in [true, false] {
        let backend = Backend::start(echo);
        let site = site();
        let keys = format!("request_buffering = {buffering}");
        let config = config_with(&backend, "prefix = \"/app/\"", &keys)
            .replace("max_body_size = \"64m\"", "max_body_size = \"1k\"");
        let srv = site.serve_config(model, &config);
        // Announced: refused before a byte of it is read, and the connection closes.
        let mut conn = srv.connect();
        let r = conn.exchange(
            "POST /app/up HTTP/1.1\r\nHost: t\r\nContent-Length: 1025\r\nExpect: 100-continue\r\n\r\n",
        );
        r.assert_status(413);
        assert_eq!(r.header("Connection"), Some("close"));
        assert_eq!(backend.connections(), 0);
        // At the limit: taken.
        let mut conn = srv.connect();
        let body = "x".repeat(1024);
        let r = conn.exchange(format!(
            "POST /app/up HTTP/1.1\r\nHost: t\r\nContent-Length: 1024\r\n\r\n{body}"
        ));
        r.assert_status(200);
        // Chunked, found out while reading: 413 too.
        let mut conn = srv.connect();
        conn.send("POST /app/up HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
        conn.send(format!("400\r\n{body}\r\n1\r\nx\r\n0\r\n\r\n"));
        let r = conn.read_response();
        r.assert_status(413);
        assert_eq!(
            r.header("Connection"),
            Some("close"),
            "buffering {buffering}"
        );
        let closed = conn.wait_closed(Duration::from_secs(5));
        assert!(closed.is_ok(), "buffering {buffering}: {closed:?}");
    }
});

httptest!(a_body_that_does_not_arrive_in_time_gets_408, |model| {
    let backend = Backend::start(echo);
    let site = site();
    let keys = "body_timeout = \"500ms\"";
    let srv = site.serve_config(model, &config_with(&backend, "prefix = \"/app/\"", keys));
    let mut conn = srv.connect();
    conn.send("POST /app/up HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nabc");
    let started = Instant::now();
    let r = conn.read_response();
    r.assert_status(408);
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert_eq!(backend.connections(), 0);
});

/// Sends an event, waits for the test to say go (a line on the request's connection never
/// comes; the wait is a sleep), then a second event and the end: a server-sent events stream.
fn events(stream: TcpStream, log: &BackendLog) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    if read_head(&mut reader).is_none() {
        return;
    }
    log.requests.lock().unwrap().push("events".into());
    let _ = writer.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    let _ = writer.write_all(b"d\r\ndata: first\n\n\r\n");
    std::thread::sleep(Duration::from_millis(1500));
    let _ = writer.write_all(b"e\r\ndata: second\n\n\r\n0\r\n\r\n");
}

httptest!(
    server_sent_events_stream_with_and_without_buffering,
    |model| {
        for buffering in ["true", "false"] {
            let backend = Backend::start(events);
            let site = site();
            let keys = format!("response_buffering = {buffering}\nresponse_timeout = \"5s\"");
            let config = config_with(&backend, "prefix = \"/app/\"", &keys)
                .replace("response_timeout = \"1s\"\n", "");
            let srv = site.serve_config(model, &config);
            let mut conn = srv.connect();
            let started = Instant::now();
            conn.send(req("GET", "/app/events", &[]));
            // The first event arrives while the backend is still to send the second.
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            while !String::from_utf8_lossy(&got).contains("data: first") {
                let n = conn.stream().read(&mut buf).unwrap();
                assert!(
                    n > 0,
                    "closed early: {:?} {}",
                    String::from_utf8_lossy(&got),
                    srv.stderr()
                );
                got.extend_from_slice(&buf[..n]);
            }
            assert!(
                started.elapsed() < Duration::from_millis(1200),
                "response_buffering {buffering}: the first event waited for the backend's end"
            );
        }
    }
);

/// Answers `GET /app/big/N` with N bytes of `body_byte`, then notes `sent` in the log once
/// the kernel has taken the last of them.
fn big_then_mark(stream: TcpStream, log: &BackendLog) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    while let Some((line, _)) = read_head(&mut reader) {
        let target = line.split(' ').nth(1).unwrap_or_default().to_string();
        let n: usize = target.trim_start_matches("/app/big/").parse().unwrap_or(0);
        let body: Vec<u8> = (0..n).map(body_byte).collect();
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n");
        if writer.write_all(head.as_bytes()).is_err() || writer.write_all(&body).is_err() {
            return;
        }
        log.requests.lock().unwrap().push("sent".into());
    }
}

/// The largest size TCP autotuning gives a socket buffer (`net.ipv4.tcp_rmem` or `tcp_wmem`,
/// their third field), or 6 MiB if it cannot be read.
fn tcp_buffer_max(name: &str) -> usize {
    std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}"))
        .ok()
        .and_then(|text| text.split_whitespace().nth(2)?.parse().ok())
        .unwrap_or(6 << 20)
}

httptest!(a_slow_reader_holds_the_backend_only_unbuffered, |model| {
    // More than every socket buffer on the way can hold, so that unbuffered the backend
    // cannot finish before the client reads: the backend's send buffer, fastpath's receive
    // and send buffers and the client's receive buffer, each as large as TCP autotuning may
    // grow it here (tcp_rmem's maximum is 32 MiB on some machines), twice over.
    let n = (2 * 2 * (tcp_buffer_max("tcp_rmem") + tcp_buffer_max("tcp_wmem"))).max(32 << 20);
    // Buffered; unbuffered; and buffered with a temporary file too small for the answer,
    // which then goes at the client's pace past it.
    let setups = [
        (true, "response_buffering = true"),
        (false, "response_buffering = false"),
        (false, "max_temp_file_size = \"1m\""),
    ];
    for (buffering, keys) in setups {
        let backend = Backend::start(big_then_mark);
        let site = site();
        let config = config_with(&backend, "prefix = \"/app/\"", keys)
            .replace("response_timeout = \"1s\"", "response_timeout = \"10s\"");
        let srv = site.serve_config(model, &config);
        assert_eq!(temporary_files(srv.pid()), 0);
        let mut conn = srv.connect();
        conn.send(req("GET", &format!("/app/big/{n}"), &[]));
        let sent = || {
            backend
                .log
                .requests
                .lock()
                .unwrap()
                .contains(&"sent".to_string())
                .then_some(())
        };
        if buffering {
            // The backend is done while the client has read nothing.
            assert!(
                wait_for(Duration::from_secs(10), sent).is_some(),
                "the backend was held by a client that does not read"
            );
            assert!(temporary_files(srv.pid()) >= 1, "no temporary file");
        } else {
            std::thread::sleep(Duration::from_millis(1500));
            assert!(sent().is_none(), "{keys}: the backend finished unread");
        }
        let r = conn.read_response();
        r.assert_status(200);
        assert_eq!(r.body.len(), n);
        assert_eq!(wrong_bytes(&r.body), 0);
        // The temporary file is closed once the body has gone.
        let left = wait_for(Duration::from_secs(5), || {
            (temporary_files(srv.pid()) == 0).then_some(())
        });
        assert!(
            left.is_some(),
            "buffering {buffering}: a temporary file is left open"
        );
        let line = srv.wait_stdout_line(Duration::from_secs(5), |l| l.contains("/app/big/"));
        assert!(
            line.as_deref()
                .is_some_and(|l| l.ends_with(&format!("200 {n} \"-\" \"-\""))),
            "{line:?}"
        );
        if buffering {
            // A client that leaves with most of a buffered answer unread: logged with the
            // bytes that left and why it ended, and the temporary file is closed.
            let mut conn = srv.connect();
            conn.send(req(
                "GET",
                &format!("/app/big/{n}"),
                &[("User-Agent", "gone")],
            ));
            wait_for(Duration::from_secs(10), || {
                let sent = backend.log.requests.lock().unwrap().len();
                (sent == 2).then_some(())
            })
            .expect("the backend did not finish");
            drop(conn);
            let line = srv.wait_stdout_line(Duration::from_secs(5), |l| l.contains("\"gone\""));
            let line = line.expect("no line for the client that left");
            assert!(line.ends_with("\"gone\" client-gone"), "{line}");
            assert!(!line.contains(&format!(" 200 {n} ")), "{line}");
            let left = wait_for(Duration::from_secs(5), || {
                (temporary_files(srv.pid()) == 0).then_some(())
            });
            assert!(left.is_some(), "a temporary file is left open");
        }
    }
});

httptest!(
    a_buffered_body_slower_to_send_than_the_response_timeout_is_answered,
    |model| {
        // 12 MiB to a backend taking 3 MiB a second through a small receive buffer: about
        // 4 s of sending, past the response timeout of 2 s, which counts from the end of the
        // request (from when the last bytes were handed to the kernel: what its socket buffer
        // still holds then, a few MiB at most, reaches the backend within the timeout).
        let backend = Backend::start_with_receive_buffer(crawling_sink, 64 * 1024);
        let site = site();
        let config = config(&backend, "prefix = \"/app/\"", "")
            .replace("response_timeout = \"1s\"", "response_timeout = \"2s\"");
        let srv = site.serve_config(model, &config);
        let body: Vec<u8> = (0..12 * MIB).map(body_byte).collect();
        let started = Instant::now();
        if let Err(e) = upload(srv.addr(), &body, false) {
            panic!("{e}");
        }
        assert!(started.elapsed() > Duration::from_secs(3));
    }
);
