//! The HTTP handler, routing, the exchanges and the access log, driven in memory: the
//! handler runs on the drivers' [`TestWorker`], whose connections' peers are these tests (the
//! clients and the scripted backends), so no socket is opened and time passes only when a
//! test says so. The end-to-end suite (crates/fastpath/tests) runs the same paths over real
//! sockets on every model.

use std::path::Path;
use std::time::Duration;

use fastpath_drivers::testing::{TestConn, TestWorker};
use fastpath_drivers::{CloseReason, UpstreamAddr, TICK};
use fastpath_http::{ChunkedDecoder, Limits, ResponseFraming, ResponseParser};

use crate::config::Config;
use crate::handler::HttpHandler;
use crate::Shared;

/// Where the scripted backend "listens": nothing is ever connected to it, the test answers.
const BACKEND: &str = "127.0.0.1:9001";

/// A server's handler on a test worker, with its site and logs in a temporary directory.
struct Glue {
    worker: TestWorker<HttpHandler>,
    dir: tempfile::TempDir,
    _shared: Shared,
}

/// One response as a client parsed it.
#[derive(Debug)]
struct Response {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Every whole response in `bytes`, in order; `head_requests` says which answer a HEAD.
fn responses(mut bytes: &[u8], head_requests: &[bool]) -> Vec<Response> {
    let mut parser = ResponseParser::new(Limits::default());
    let mut all = Vec::new();
    while !bytes.is_empty() {
        let head = head_requests.get(all.len()).copied().unwrap_or(false);
        let parsed = parser.parse(bytes, head).expect("a well-formed response");
        let Some(parsed) = parsed else {
            panic!("a response cut short: {:?}", String::from_utf8_lossy(bytes));
        };
        let status = parsed.status;
        let head_len = parsed.head_len;
        let framing = parsed.framing;
        let head = String::from_utf8_lossy(&bytes[..head_len]).into_owned();
        let rest = &bytes[head_len..];
        let (body, used) = match framing {
            ResponseFraming::None => (Vec::new(), 0),
            ResponseFraming::Length(n) => {
                let n = n as usize;
                assert!(rest.len() >= n, "a body cut short: {head}");
                (rest[..n].to_vec(), n)
            }
            ResponseFraming::Chunked => {
                let mut decoder = ChunkedDecoder::new();
                let mut body = Vec::new();
                let (used, done) = decoder
                    .feed(rest, |piece| body.extend_from_slice(piece))
                    .expect("a well-formed chunked body");
                assert!(done, "a chunked body cut short: {head}");
                (body, used)
            }
            ResponseFraming::UntilClose => (rest.to_vec(), rest.len()),
        };
        all.push(Response { status, head, body });
        bytes = &rest[used..];
        parser.reset();
    }
    all
}

impl Glue {
    /// A server whose site has `a.txt` and `index.html`, the access log in a file, and a
    /// backend `app` at [`BACKEND`] for `/app/`; `extra` goes in the configuration's top
    /// level, `backend_keys` in the backend's table.
    fn new(extra: &str, backend_keys: &str) -> Glue {
        Glue::with_route(extra, backend_keys, "prefix = \"/app/\"")
    }

    fn with_route(extra: &str, backend_keys: &str, route: &str) -> Glue {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let site = dir.path().join("site");
        std::fs::create_dir(&site).unwrap();
        std::fs::write(site.join("a.txt"), "hello, static\n").unwrap();
        std::fs::write(site.join("index.html"), "<p>index</p>\n").unwrap();
        let text = format!(
            "root = \"site\"\n{extra}\n[log]\naccess = \"access.log\"\n\
             [[backend]]\nname = \"app\"\naddresses = \"{BACKEND}\"\n\
             connect_timeout = \"1s\"\nresponse_timeout = \"2s\"\n{backend_keys}\n\
             [[route]]\nbackend = \"app\"\n{route}\n"
        );
        let config = Config::from_toml(&text, dir.path()).expect("a valid configuration");
        let shared = Shared::start(&config, 1, true, None, &Default::default(), None, None)
            .expect("the site and log open");
        let worker = TestWorker::new(shared.handler(0));
        Glue {
            worker,
            dir,
            _shared: shared,
        }
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    /// Sends `request` on a new connection and returns every response received so far.
    fn exchange(&mut self, request: &str) -> (TestConn, Vec<Response>) {
        let client = self.worker.connect();
        self.worker.send(client, request.as_bytes());
        let head = request.starts_with("HEAD ");
        let got = self.worker.received(client);
        (client, responses(&got, &[head]))
    }

    /// The backend connection the handler opened last, checked to go to [`BACKEND`].
    fn backend(&mut self) -> TestConn {
        let opened = self.worker.opened();
        let (conn, addr) = opened.last().cloned().expect("a backend connection");
        assert_eq!(addr, UpstreamAddr::Tcp(BACKEND.parse().unwrap()));
        conn
    }

    /// What the backend connection received, as text.
    fn backend_got(&mut self, backend: TestConn) -> String {
        String::from_utf8_lossy(&self.worker.received(backend)).into_owned()
    }

    /// The access log's lines so far (flushed by a tick).
    fn access_log(&mut self) -> Vec<String> {
        self.worker.advance(TICK);
        read_lines(&self.path("access.log"))
    }
}

fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_static_hit_and_a_miss() {
    let mut glue = Glue::new("", "");
    let (_, r) = glue.exchange("GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r[0].status, 200);
    assert_eq!(r[0].text(), "hello, static\n");
    assert_eq!(
        r[0].header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    let (_, r) = glue.exchange("GET /missing.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r[0].status, 404);
    // The second request for the file is a hit in the content cache.
    let (_, r) = glue.exchange("GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r[0].text(), "hello, static\n");
    let stats = glue.worker.handler().router_cache_stats();
    assert!(stats.hits >= 1, "{stats:?}");
    // No backend was asked.
    assert!(glue.worker.opened().is_empty());
    let log = glue.access_log();
    assert_eq!(log.len(), 3, "{log:?}");
    assert!(
        log[0].contains("\"GET /a.txt HTTP/1.1\" 200 14"),
        "{}",
        log[0]
    );
    assert!(
        log[1].contains("\"GET /missing.txt HTTP/1.1\" 404"),
        "{}",
        log[1]
    );
}

#[test]
fn a_proxied_request_with_a_chunked_body_gets_a_chunked_response() {
    let mut glue = Glue::new("", "");
    let client = glue.worker.connect();
    glue.worker.send(
        client,
        b"POST /app/form HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    );
    // Read whole before the backend is asked (request buffering), and sent framed by length.
    let backend = glue.backend();
    let request = glue.backend_got(backend);
    assert!(
        request.starts_with("POST /app/form HTTP/1.1\r\n"),
        "{request}"
    );
    assert!(request.contains("\r\nContent-Length: 11\r\n"), "{request}");
    assert!(
        !request.to_ascii_lowercase().contains("transfer-encoding"),
        "{request}"
    );
    assert!(request.ends_with("\r\n\r\nhello world"), "{request}");
    glue.worker.send(
        backend,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nsome\r\n5\r\n more\r\n0\r\n\r\n",
    );
    let r = responses(&glue.worker.received(client), &[]);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].status, 200);
    assert_eq!(r[0].header("transfer-encoding"), Some("chunked"));
    assert_eq!(r[0].text(), "some more");
    // The backend connection went back to the idle ones: the next request takes it.
    assert!(glue.worker.is_open(backend));
    glue.worker
        .send(client, b"GET /app/again HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(glue.worker.opened().is_empty(), "a new backend connection");
    let again = glue.backend_got(backend);
    assert!(again.starts_with("GET /app/again HTTP/1.1\r\n"), "{again}");
    // The body bytes relayed, chunk framing included (as nginx counts them).
    let log = glue.access_log();
    assert!(
        log[0].contains("\"POST /app/form HTTP/1.1\" 200 24"),
        "{log:?}"
    );
}

#[test]
fn a_backend_that_dies_mid_response_ends_the_client_connection() {
    let mut glue = Glue::new("", "response_buffering = false");
    let client = glue.worker.connect();
    glue.worker
        .send(client, b"GET /app/big HTTP/1.1\r\nHost: t\r\n\r\n");
    let backend = glue.backend();
    glue.worker.send(
        backend,
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789",
    );
    glue.worker.reset(backend);
    let got = String::from_utf8_lossy(&glue.worker.received(client)).into_owned();
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    assert!(got.ends_with("\r\n\r\n0123456789"), "{got}");
    // What was relayed goes out, then the close: the response can never pass for whole.
    assert_eq!(glue.worker.closed(client), Some(CloseReason::Done));
    let log = glue.access_log();
    assert!(
        log[0].contains("\"GET /app/big HTTP/1.1\" 200 10") && log[0].contains("backend-failed"),
        "{log:?}"
    );
}

#[test]
fn a_refused_backend_gets_the_client_a_502() {
    let mut glue = Glue::new("", "");
    glue.worker
        .refuse(UpstreamAddr::Tcp(BACKEND.parse().unwrap()));
    let (client, r) = glue.exchange("GET /app/x HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r[0].status, 502);
    assert!(glue.worker.is_open(client), "the client connection goes on");
}

#[test]
fn a_backend_that_never_connects_gets_the_client_a_504_at_the_connect_timeout() {
    let mut glue = Glue::new("", "");
    glue.worker
        .stall_connects(UpstreamAddr::Tcp(BACKEND.parse().unwrap()));
    let client = glue.worker.connect();
    glue.worker
        .send(client, b"GET /app/x HTTP/1.1\r\nHost: t\r\n\r\n");
    let backend = glue.backend();
    glue.worker.advance(Duration::from_millis(900));
    assert!(glue.worker.received(client).is_empty());
    glue.worker.advance(Duration::from_millis(200));
    let r = responses(&glue.worker.received(client), &[]);
    assert_eq!(r[0].status, 504);
    assert_eq!(glue.worker.closed(backend), Some(CloseReason::Done));
}

#[test]
fn a_bridge_joins_the_client_with_the_backend() {
    let mut glue = Glue::with_route("", "", "prefix = \"/ws/\"\nmethod = \"bridge\"");
    let client = glue.worker.connect();
    glue.worker.send(
        client,
        b"GET /ws/chat HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nearly bytes",
    );
    let backend = glue.backend();
    // The head as the client sent it, and what followed it.
    assert_eq!(
        glue.backend_got(backend),
        "GET /ws/chat HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nearly bytes"
    );
    glue.worker.send(
        backend,
        b"HTTP/1.1 101 Switching Protocols\r\n\r\nfrom the backend",
    );
    assert_eq!(
        glue.worker.received(client),
        b"HTTP/1.1 101 Switching Protocols\r\n\r\nfrom the backend"
    );
    glue.worker.send(client, b"more from the client");
    assert_eq!(glue.worker.received(backend), b"more from the client");
    glue.worker.shutdown_write(backend);
    assert_eq!(glue.worker.closed(client), Some(CloseReason::Done));
    assert_eq!(glue.worker.closed(backend), Some(CloseReason::Done));
    // Logged as it was handed over: what follows is the backend's to log.
    let log = glue.access_log();
    assert!(log[0].contains("\"GET /ws/chat HTTP/1.1\" - -"), "{log:?}");
}

#[test]
fn a_cached_backend_response_answers_again_and_revalidates() {
    let mut glue = Glue::new("", "cache = true");
    let (_, r) = {
        let client = glue.worker.connect();
        glue.worker
            .send(client, b"GET /app/page HTTP/1.1\r\nHost: t\r\n\r\n");
        let backend = glue.backend();
        glue.worker.send(
            backend,
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nETag: \"v1\"\r\nContent-Length: 5\r\n\r\nfresh",
        );
        (client, responses(&glue.worker.received(client), &[]))
    };
    assert_eq!(r[0].text(), "fresh");
    // Answered from memory: no backend connection is asked.
    let (_, r) = glue.exchange("GET /app/page HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r[0].status, 200);
    assert_eq!(r[0].text(), "fresh");
    assert!(r[0].header("age").is_some(), "{}", r[0].head);
    // A conditional request its validator satisfies: 304, from memory too.
    let (_, r) =
        glue.exchange("GET /app/page HTTP/1.1\r\nHost: t\r\nIf-None-Match: \"v1\"\r\n\r\n");
    assert_eq!(r[0].status, 304);
    assert!(r[0].body.is_empty());
    assert!(
        glue.worker.opened().is_empty(),
        "the backend was asked again"
    );
    // Once it has expired, the backend is asked again.
    glue.worker.advance(Duration::from_secs(61));
    let client = glue.worker.connect();
    glue.worker
        .send(client, b"GET /app/page HTTP/1.1\r\nHost: t\r\n\r\n");
    let backend = glue.backend();
    assert!(glue.backend_got(backend).starts_with("GET /app/page "));
}

#[test]
fn pipelined_static_and_proxied_requests_are_answered_in_order() {
    let mut glue = Glue::new("", "");
    let client = glue.worker.connect();
    glue.worker.send(
        client,
        b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /app/one HTTP/1.1\r\nHost: t\r\n\r\nGET /index.html HTTP/1.1\r\nHost: t\r\n\r\nGET /app/two HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    // The first answer goes at once; the rest wait for the proxied one.
    let backend = glue.backend();
    let got = glue.backend_got(backend);
    assert!(got.starts_with("GET /app/one "), "{got}");
    assert!(!got.contains("/app/two"), "one request at a time: {got}");
    glue.worker
        .send(backend, b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none");
    let got = glue.backend_got(backend);
    assert!(got.starts_with("GET /app/two "), "{got}");
    glue.worker
        .send(backend, b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntwo");
    let r = responses(&glue.worker.received(client), &[]);
    let bodies: Vec<String> = r.iter().map(Response::text).collect();
    assert_eq!(bodies, ["hello, static\n", "one", "<p>index</p>\n", "two"]);
}

#[test]
fn the_proxy_waits_for_its_stages_and_times_out_in_each() {
    // Request body read whole (request buffering): the client's slowness is its own.
    let mut glue = Glue::new("", "");
    let client = glue.worker.connect();
    glue.worker.send(
        client,
        b"POST /app/upload HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nhalf",
    );
    assert!(
        glue.worker.opened().is_empty(),
        "asked before the body is whole"
    );
    glue.worker.send(client, b"-rest");
    assert!(glue.worker.opened().is_empty());
    glue.worker.send(client, b"!");
    let backend = glue.backend();
    assert!(glue.backend_got(backend).ends_with("\r\n\r\nhalf-rest!"));
    // Waiting for the response head: the response timeout (2 s) gives 504.
    glue.worker.advance(Duration::from_millis(1900));
    assert!(glue.worker.received(client).is_empty());
    glue.worker.advance(Duration::from_millis(200));
    let r = responses(&glue.worker.received(client), &[]);
    assert_eq!(r[0].status, 504);
    // The connection the backend never answered on is not reused.
    assert_eq!(glue.worker.closed(backend), Some(CloseReason::Done));
}

#[test]
fn a_client_that_sends_half_a_body_gets_408() {
    let mut glue = Glue::new("[timeouts]\nheader = \"1s\"", "body_timeout = \"1s\"");
    let client = glue.worker.connect();
    glue.worker.send(
        client,
        b"POST /app/upload HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nhalf",
    );
    glue.worker.advance(Duration::from_millis(1100));
    let r = responses(&glue.worker.received(client), &[]);
    assert_eq!(r[0].status, 408);
    assert!(glue.worker.opened().is_empty(), "no backend was asked");
}

// ---------------------------------------------------------------------------
// Requests that cannot be served: each gets its precise status, then the connection closes
// without reading another request. The parser's verdicts are its own unit tests; these
// check that the handler answers them as it must.

/// Sends `raw` followed by a valid pipelined request on a new connection, and checks that
/// the answer is one response with `status`, saying `Connection: close`, after which the
/// connection ends (the pipelined request is never answered).
#[track_caller]
fn rejects(glue: &mut Glue, raw: impl AsRef<[u8]>, status: u16) {
    let raw = raw.as_ref();
    let client = glue.worker.connect();
    let mut all = raw.to_vec();
    all.extend_from_slice(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    glue.worker.send(client, &all);
    let got = glue.worker.received(client);
    let what = String::from_utf8_lossy(raw).into_owned();
    let r = responses(&got, &[]);
    assert_eq!(r.len(), 1, "{what:?}: {}", String::from_utf8_lossy(&got));
    assert_eq!(r[0].status, status, "{what:?}: {}", r[0].head);
    assert_eq!(r[0].header("connection"), Some("close"), "{what:?}");
    assert!(r[0].header("date").is_some() && r[0].header("server").is_some());
    assert_eq!(
        r[0].header("content-length"),
        Some(r[0].body.len().to_string().as_str())
    );
    assert!(glue.worker.ended_to_peer(client), "{what:?}: still open");
}

/// Sends `raw` and checks it is served `a.txt`.
#[track_caller]
fn accepts(glue: &mut Glue, raw: impl AsRef<[u8]>) {
    let client = glue.worker.connect();
    glue.worker.send(client, raw.as_ref());
    let r = responses(&glue.worker.received(client), &[]);
    assert_eq!(r[0].status, 200, "{}", r[0].head);
    assert_eq!(r[0].text(), "hello, static\n");
}

#[test]
fn malformed_request_lines_get_400() {
    let mut glue = Glue::new("", "");
    for raw in [
        "GET /\r\n\r\n",
        "GET  / HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET / HTTP/1.1 extra\r\nHost: x\r\n\r\n",
        "GET /a.txt  HTTP/1.1\r\nHost: x\r\n\r\n",
        " GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        "\x01\x02garbage\r\n\r\n",
        "G(T / HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET / HTTP/1.x\r\nHost: x\r\n\r\n",
        "GET / FTP/1.1\r\nHost: x\r\n\r\n",
    ] {
        rejects(&mut glue, raw, 400);
    }
    // A target that is neither origin-form nor absolute-form: 400, and the connection may
    // stay open, as for any bad path.
    let (_, r) = glue.exchange("GET a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r[0].status, 400);
}

#[test]
fn versions_other_than_1_x_get_505_and_1_2_is_served_as_1_1() {
    let mut glue = Glue::new("", "");
    for raw in [
        "GET / HTTP/2.0\r\nHost: x\r\n\r\n",
        "GET / HTTP/3.0\r\nHost: x\r\n\r\n",
        "GET / HTTP/0.9\r\nHost: x\r\n\r\n",
    ] {
        rejects(&mut glue, raw, 505);
    }
    let client = glue.worker.connect();
    let twice = "GET /a.txt HTTP/1.2\r\nHost: x\r\n\r\n".repeat(2);
    glue.worker.send(client, twice.as_bytes());
    let r = responses(&glue.worker.received(client), &[]);
    assert_eq!(r.len(), 2, "persistent, as 1.1");
    assert!(r[0].head.starts_with("HTTP/1.1 200"), "{}", r[0].head);
}

#[test]
fn heads_past_their_limits_get_414_and_431() {
    let mut glue = Glue::new("", "");
    rejects(
        &mut glue,
        format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(9000)),
        414,
    );
    accepts(
        &mut glue,
        format!(
            "GET /a.txt?{} HTTP/1.1\r\nHost: x\r\n\r\n",
            "q".repeat(8000)
        ),
    );
    let filled = |fields: usize| {
        let mut raw = String::from("GET /a.txt HTTP/1.1\r\nHost: x\r\n");
        for i in 0..fields {
            raw.push_str(&format!("X-Filler-{i}: {}\r\n", "v".repeat(1000)));
        }
        raw + "\r\n"
    };
    rejects(&mut glue, filled(20), 431);
    accepts(&mut glue, filled(12));
    rejects(
        &mut glue,
        format!(
            "GET /a.txt HTTP/1.1\r\nHost: x\r\nCookie: {}\r\n\r\n",
            "c".repeat(17000)
        ),
        431,
    );
    let with_fields = |n: usize| {
        let mut raw = String::from("GET /a.txt HTTP/1.1\r\nHost: x\r\n");
        for i in 1..n {
            raw.push_str(&format!("X-{i}: {i}\r\n"));
        }
        raw + "\r\n"
    };
    accepts(&mut glue, with_fields(100));
    rejects(&mut glue, with_fields(101), 431);
    rejects(&mut glue, with_fields(500), 431);
}

#[test]
fn ambiguous_framing_gets_400_and_an_unknown_coding_501() {
    let mut glue = Glue::new("", "");
    for raw in [
        "POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        "POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
        "POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        "POST /a.txt HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ] {
        rejects(&mut glue, raw, 400);
    }
    for cl in [
        "Content-Length: 5\r\nContent-Length: 6",
        "Content-Length: 5, 6",
        "Content-Length: -1",
        "Content-Length: abc",
        "Content-Length: +5",
        "Content-Length: 0x5",
        "Content-Length: 99999999999999999999999999",
        "Content-Length: ",
    ] {
        rejects(
            &mut glue,
            format!("POST /a.txt HTTP/1.1\r\nHost: x\r\n{cl}\r\n\r\n"),
            400,
        );
    }
    rejects(
        &mut glue,
        "POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: foo, chunked\r\n\r\n0\r\n\r\n",
        501,
    );
}

#[test]
fn malformed_fields_get_400_and_an_unknown_expectation_417() {
    let mut glue = Glue::new("", "");
    for raw in [
        // obs-fold, and a first field line that starts with whitespace.
        "GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Long: part one\r\n part two\r\n\r\n",
        "GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Long: part one\r\n\tpart two\r\n\r\n",
        "GET /a.txt HTTP/1.1\r\n Host: x\r\n\r\n",
        "GET /a.txt HTTP/1.1\r\nHost : x\r\n\r\n",
        "GET /a.txt HTTP/1.1\r\nHost: x\r\nX-A\t: y\r\n\r\n",
        "GET /a.txt HTTP/1.1\r\nHost: x\r\nNo-Colon\r\n\r\n",
        "GET /a.txt HTTP/1.1\r\nHost: x\r\n: empty-name\r\n\r\n",
        "GET /a.txt HTTP/1.1\r\nHost: x\r\nX(A): y\r\n\r\n",
        // A second Host, one that names two.
        "GET /a.txt HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        "GET /a.txt HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n",
        "GET /a.txt HTTP/1.1\r\nHost: a, b\r\n\r\n",
    ] {
        rejects(&mut glue, raw, 400);
    }
    for value in [&b"a\x01b"[..], b"a\x00b", b"a\x7fb", b"a\x1bb", b"a\rb"] {
        let mut raw = b"GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Value: ".to_vec();
        raw.extend_from_slice(value);
        raw.extend_from_slice(b"\r\n\r\n");
        rejects(&mut glue, raw, 400);
    }
    // Tabs and obs-text are allowed in values.
    accepts(
        &mut glue,
        b"GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Value: a\tb \xe9t\xe9\r\n\r\n",
    );
    rejects(
        &mut glue,
        "GET /a.txt HTTP/1.1\r\nHost: x\r\nExpect: something-else\r\n\r\n",
        417,
    );
}

/// An HTTP/2 client in memory, of the protocol crate's own frames: what the server's glue
/// makes of streams is the point here; real clients talk to it in the end-to-end suite.
mod h2 {
    use super::*;
    use fastpath_http::h2::{
        write_headers, write_rst_stream, write_settings, write_window_update, DecodeLimits,
        Decoder, Encoder, ErrorCode, Field, Frame, FrameReader, PREFACE,
    };

    /// What the client saw of one stream.
    #[derive(Debug, Default)]
    struct Seen {
        status: Option<u16>,
        fields: Vec<(String, String)>,
        body: Vec<u8>,
        ended: bool,
        reset: Option<ErrorCode>,
    }

    struct Client {
        conn: TestConn,
        encoder: Encoder,
        decoder: Decoder,
        /// Bytes received and not yet read as frames.
        unread: Vec<u8>,
        streams: std::collections::BTreeMap<u32, Seen>,
        goaway: Option<ErrorCode>,
    }

    impl Client {
        fn open(glue: &mut Glue) -> Client {
            let conn = glue.worker.connect();
            let mut hello = PREFACE.to_vec();
            write_settings(&[], &mut hello);
            glue.worker.send(conn, &hello);
            Client {
                conn,
                encoder: Encoder::new(),
                decoder: Decoder::new(4096),
                unread: Vec::new(),
                streams: Default::default(),
                goaway: None,
            }
        }

        fn get(&mut self, glue: &mut Glue, stream: u32, path: &str) {
            let mut block = Vec::new();
            self.encoder.encode(
                [
                    Field::new(b":method", b"GET"),
                    Field::new(b":scheme", b"http"),
                    Field::new(b":authority", b"t"),
                    Field::new(b":path", path.as_bytes()),
                ],
                &mut block,
            );
            let mut frames = Vec::new();
            write_headers(stream, &block, true, 16_384, &mut frames);
            glue.worker.send(self.conn, &frames);
        }

        fn reset(&mut self, glue: &mut Glue, stream: u32) {
            let mut frame = Vec::new();
            write_rst_stream(stream, ErrorCode::Cancel, &mut frame);
            glue.worker.send(self.conn, &frame);
        }

        /// Reads what the server sent since the last look.
        fn read(&mut self, glue: &mut Glue) {
            self.unread.extend(glue.worker.received(self.conn));
            let reader = FrameReader::new(16_384);
            let mut at = 0;
            while let Some((frame, used)) = reader.parse(&self.unread[at..]).expect("a frame") {
                match frame {
                    Frame::Headers {
                        stream_id,
                        fragment,
                        end_stream,
                        end_headers,
                    } => {
                        assert!(end_headers, "the test's responses fit a frame");
                        let seen = self.streams.entry(stream_id).or_default();
                        self.decoder
                            .decode(fragment, &DecodeLimits::default(), |name, value, _| {
                                let (name, value) = (
                                    String::from_utf8_lossy(name).into_owned(),
                                    String::from_utf8_lossy(value).into_owned(),
                                );
                                if name == ":status" {
                                    seen.status = value.parse().ok();
                                } else {
                                    seen.fields.push((name, value));
                                }
                            })
                            .expect("a good block");
                        seen.ended |= end_stream;
                    }
                    Frame::Data {
                        stream_id,
                        data,
                        end_stream,
                        ..
                    } => {
                        let seen = self.streams.entry(stream_id).or_default();
                        seen.body.extend_from_slice(data);
                        seen.ended |= end_stream;
                    }
                    Frame::RstStream {
                        stream_id,
                        error_code,
                    } => {
                        self.streams.entry(stream_id).or_default().reset =
                            ErrorCode::from_u32(error_code);
                    }
                    Frame::GoAway { error_code, .. } => {
                        self.goaway = ErrorCode::from_u32(error_code);
                    }
                    _ => {}
                }
                at += used;
            }
            self.unread.drain(..at);
        }
    }

    #[test]
    fn static_and_proxied_streams_share_a_connection() {
        let mut glue = Glue::new("", "");
        let mut client = Client::open(&mut glue);
        client.get(&mut glue, 1, "/app/slow");
        client.get(&mut glue, 3, "/a.txt");
        client.read(&mut glue);
        // The static answer does not wait for the backend's.
        let a = &client.streams[&3];
        assert_eq!(a.status, Some(200));
        assert_eq!(a.body, b"hello, static\n");
        assert!(a.ended);
        assert!(!client.streams.contains_key(&1));
        let backend = glue.backend();
        let asked = glue.backend_got(backend);
        assert!(asked.starts_with("GET /app/slow HTTP/1.1\r\n"), "{asked}");
        glue.worker.send(
            backend,
            b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: keep-alive\r\nX-App: 1\r\n\r\nslow",
        );
        client.read(&mut glue);
        let slow = &client.streams[&1];
        assert_eq!(
            (slow.status, slow.body.as_slice(), slow.ended),
            (Some(200), &b"slow"[..], true)
        );
        // The HTTP/1 connection's own fields stay behind; the others come lowercased.
        assert!(
            slow.fields.iter().all(|(name, _)| name != "connection"),
            "{slow:?}"
        );
        assert!(
            slow.fields.contains(&("x-app".to_owned(), "1".to_owned())),
            "{slow:?}"
        );
        // The backend connection went back to the pool for the next stream.
        assert!(glue.worker.is_open(backend));
        let log = glue.access_log();
        assert!(
            log.iter()
                .any(|l| l.contains("\"GET /a.txt HTTP/2.0\" 200 14")),
            "{log:?}"
        );
        assert!(
            log.iter()
                .any(|l| l.contains("\"GET /app/slow HTTP/2.0\" 200 4")),
            "{log:?}"
        );
    }

    #[test]
    fn a_head_sent_again_is_the_same_but_for_its_date() {
        // The third is sent from the head kept ready after the second: the same fields.
        let mut glue = Glue::new("", "");
        let mut client = Client::open(&mut glue);
        for stream in [1, 3, 5] {
            client.get(&mut glue, stream, "/a.txt");
        }
        client.read(&mut glue);
        let without_date = |stream: u32| {
            let seen = &client.streams[&stream];
            assert_eq!(seen.status, Some(200));
            assert_eq!(seen.body, b"hello, static\n");
            assert!(
                seen.fields.iter().any(|(name, _)| name == "date"),
                "{seen:?}"
            );
            let mut fields: Vec<_> = seen.fields.iter().filter(|(n, _)| n != "date").collect();
            fields.sort();
            fields
        };
        assert_eq!(without_date(1), without_date(5));
        assert_eq!(without_date(3), without_date(5));
    }

    #[test]
    fn a_backend_that_dies_mid_body_resets_its_stream_alone() {
        let mut glue = Glue::new("", "response_buffering = false");
        let mut client = Client::open(&mut glue);
        client.get(&mut glue, 1, "/app/big");
        let backend = glue.backend();
        glue.worker.send(
            backend,
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789",
        );
        glue.worker.reset(backend);
        client.read(&mut glue);
        let big = &client.streams[&1];
        assert_eq!(big.body, b"0123456789");
        assert_eq!(big.reset, Some(ErrorCode::InternalError), "{big:?}");
        // The connection goes on.
        client.get(&mut glue, 3, "/a.txt");
        client.read(&mut glue);
        assert_eq!(client.streams[&3].body, b"hello, static\n");
        assert!(glue.worker.is_open(client.conn));
        let log = glue.access_log();
        assert!(
            log.iter()
                .any(|l| l.contains("\"GET /app/big HTTP/2.0\" 200 10")
                    && l.contains("backend-failed")),
            "{log:?}"
        );
    }

    #[test]
    fn a_file_read_into_frames_is_sent_whole_and_one_that_shrinks_resets_its_stream_alone() {
        let mut glue = Glue::new("", "");
        let body: Vec<u8> = (0..100 * 1024).map(|i| (i % 251) as u8).collect();
        std::fs::write(glue.path("site/big.bin"), &body).unwrap();
        let mut client = Client::open(&mut glue);
        client.get(&mut glue, 1, "/big.bin");
        client.read(&mut glue);
        // The first window's worth, in frames of the default maximum size, read from the file.
        let window = 65_535;
        assert_eq!(client.streams[&1].body, body[..window]);
        let mut more = Vec::new();
        write_window_update(0, 1 << 20, &mut more);
        write_window_update(1, 1 << 20, &mut more);
        glue.worker.send(client.conn, &more);
        client.read(&mut glue);
        let whole = &client.streams[&1];
        assert!(
            whole.ended && whole.body == body,
            "{} bytes",
            whole.body.len()
        );

        // The same file cut short while its stream waits for a window: the frame that would
        // have run past the file's new end is never sent, the stream is reset and the
        // connection goes on, its framing and windows intact.
        client.get(&mut glue, 3, "/big.bin");
        client.read(&mut glue);
        let before = client.streams[&3].body.len();
        assert!(
            before > 0 && before < body.len(),
            "{before} bytes before the cut"
        );
        std::fs::OpenOptions::new()
            .write(true)
            .open(glue.path("site/big.bin"))
            .unwrap()
            .set_len(before as u64 + 1000)
            .unwrap();
        let mut more = Vec::new();
        write_window_update(3, 1 << 20, &mut more);
        glue.worker.send(client.conn, &more);
        client.read(&mut glue);
        let cut = &client.streams[&3];
        assert_eq!(cut.reset, Some(ErrorCode::InternalError), "{cut:?}");
        assert_eq!(cut.body, body[..before], "no torn frame was sent");
        assert!(!cut.ended);
        client.get(&mut glue, 5, "/a.txt");
        client.read(&mut glue);
        assert_eq!(client.streams[&5].body, b"hello, static\n");
        assert!(glue.worker.is_open(client.conn));
    }

    #[test]
    fn a_stream_the_client_cancels_lets_its_backend_connection_go() {
        let mut glue = Glue::new("", "");
        let mut client = Client::open(&mut glue);
        client.get(&mut glue, 1, "/app/slow");
        let backend = glue.backend();
        client.reset(&mut glue, 1);
        // Half an answer would be read by the next stream: the connection is closed, not
        // kept.
        assert!(
            !glue.worker.is_open(backend),
            "the backend connection is kept"
        );
        let log = glue.access_log();
        // Logged as cut short by the client, with no status sent.
        assert!(
            log.iter().any(
                |l| l.contains("\"GET /app/slow HTTP/2.0\" - - ") && l.ends_with("client-gone")
            ),
            "{log:?}"
        );
        client.get(&mut glue, 3, "/a.txt");
        client.read(&mut glue);
        assert_eq!(client.streams[&3].status, Some(200));
        assert_eq!(client.goaway, None);
    }
}

#[test]
fn acme_http01_challenges_are_answered_from_the_state_directory_before_routing() {
    let mut glue = Glue::with_route(
        "listen = [{ address = \"127.0.0.1:8080\" }, { address = \"127.0.0.1:8443\", tls = true }]\n\
         [acme]\ndirectory = \"https://ca.example.test/dir\"\nstate_dir = \"acme\"\n\
         [[host]]\nnames = [\"a.example.test\"]\ntls = \"auto\"\n",
        "",
        // Every path is the backend's: the challenge must be answered before routing.
        "prefix = \"/\"",
    );
    let challenges = glue.path("acme/challenges");
    std::fs::create_dir_all(&challenges).unwrap();
    std::fs::write(challenges.join("tok-EN_1"), "tok-EN_1.thumb").unwrap();
    std::fs::write(glue.path("secret"), "not a token's").unwrap();
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: a.example.test\r\n\r\n");
    let (_, r) = glue.exchange(&get("/.well-known/acme-challenge/tok-EN_1"));
    assert_eq!(r[0].status, 200);
    assert_eq!(r[0].text(), "tok-EN_1.thumb");
    assert_eq!(
        r[0].header("content-type"),
        Some("application/octet-stream")
    );
    for missing in [
        "/.well-known/acme-challenge/other",
        "/.well-known/acme-challenge/",
        "/.well-known/acme-challenge/..%2F..%2Fsecret",
        "/.well-known/acme-challenge/../../secret",
    ] {
        let (_, r) = glue.exchange(&get(missing));
        assert_eq!(r[0].status, 404, "{missing}");
    }
    let (_, r) = glue.exchange(
        "POST /.well-known/acme-challenge/tok-EN_1 HTTP/1.1\r\nHost: a.example.test\r\n\
         Content-Length: 0\r\n\r\n",
    );
    assert_eq!(r[0].status, 405);
    // No backend was asked for any of them.
    assert!(glue.worker.opened().is_empty());
}
