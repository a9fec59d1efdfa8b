//! examples/nest/http10.nest, the HTTP/1.0 file server of the NEST thesis' benchmark, built
//! with `fastpath nest build` (once per test run) and run on every model with `--model`,
//! fetched by curl (`-0`), Python's http.client and raw sockets.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use crate::util::*;
use fastpath_testkit::{read_response, Listening};

/// The generated server, built once, beside the other examples.
fn http10() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| crate::nest_examples::example("http10"))
}

/// A running http10 server on one model; SIGTERM and wait on drop (its log shown if the
/// test failed).
struct Http10(Listening);

impl std::ops::Deref for Http10 {
    type Target = Listening;
    fn deref(&self) -> &Listening {
        &self.0
    }
}

impl Http10 {
    fn start(root: &Path, model: &str) -> Http10 {
        let child = Command::new(http10())
            .args(["--listen", "127.0.0.1:0", "--model", model])
            .env("DOCUMENT_ROOT", root)
            .env_remove("NEST_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start http10");
        Http10(Listening::adopt(child, START_TIMEOUT))
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Sends `raw` and reads everything until the server closes.
    fn exchange(&self, raw: &[u8]) -> Vec<u8> {
        let mut c = TcpStream::connect(self.addr).unwrap();
        c.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        c.write_all(raw).unwrap();
        let mut out = Vec::new();
        c.read_to_end(&mut out).unwrap();
        out
    }
}

/// The one response in `raw`, all that the server sent before it closed: a response to
/// `method`, with nothing after it.
fn reply(raw: &[u8], method: &str) -> Response {
    let (mut input, mut rest) = (raw, Vec::new());
    let r = read_response(&mut input, &mut rest, method)
        .unwrap_or_else(|e| panic!("{e} in {:?}", String::from_utf8_lossy(raw)))
        .unwrap_or_else(|| panic!("no response"));
    assert!(
        rest.is_empty() && input.is_empty(),
        "more after the response: {:?}",
        String::from_utf8_lossy(&raw[raw.len() - input.len() - rest.len()..])
    );
    r
}

/// Asserts the status line and the fields every answer has.
#[track_caller]
fn expect_answer(r: &Response, status: &str, content_type: &str, length: usize) {
    assert_eq!(r.status_line(), format!("HTTP/1.0 {status}"));
    assert_eq!(r.expect_header("server"), "fastpath-nest-http10");
    assert_eq!(r.expect_header("content-type"), content_type);
    assert_eq!(r.expect_header("content-length"), length.to_string());
    let date = httpdate::parse_http_date(r.expect_header("date")).expect("an HTTP date");
    let skew = SystemTime::now()
        .duration_since(date)
        .unwrap_or_else(|e| e.duration());
    assert!(skew < Duration::from_secs(5), "date {date:?}");
    let names: Vec<String> = r
        .headers
        .iter()
        .map(|(n, _)| n.to_ascii_lowercase())
        .collect();
    assert_eq!(names, ["date", "server", "content-type", "content-length"]);
}

/// Bytes that are not text, so a body compared byte for byte proves nothing was converted.
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

struct Files {
    small: Vec<u8>,
    big: Vec<u8>,
}

fn site() -> (Site, Files) {
    let site = Site::new();
    let files = Files {
        small: pattern(2048, 1),
        big: pattern(1 << 20, 2),
    };
    site.file("index.html", "<h1>home</h1>\n");
    site.file("f2k.bin", &files.small);
    site.file("big.bin", &files.big);
    // Either side of the runtime's copy/sendfile crossover (8 KiB).
    site.file("below.bin", pattern(8191, 3));
    site.file("at.bin", pattern(8192, 4));
    site.file("docs/a b.txt", "spaced\n");
    site.mkdir("empty");
    site.write("secret.txt", "outside the root\n");
    (site, files)
}

fn curl_reply(args: &[&str]) -> Option<Response> {
    let mut all = vec!["-0", "-s"];
    // -I prints the head itself (with -D - it would come twice).
    if !args.contains(&"-I") {
        all.extend_from_slice(&["-D", "-"]);
    }
    all.extend_from_slice(args);
    let out = curl(&all)?;
    assert!(out.status.success(), "curl {args:?}: {out:?}");
    let method = if args.contains(&"-I") { "HEAD" } else { "GET" };
    Some(reply(&out.stdout, method))
}

fn serves_files(model: &str) {
    let (site, files) = site();
    let server = Http10::start(&site.root(), model);

    // curl: small and 1 MiB bodies byte for byte, HEAD, the index, a %-escaped name.
    let Some(r) = curl_reply(&[&server.url("/f2k.bin")]) else {
        return;
    };
    expect_answer(&r, "200 OK", "application/octet-stream", 2048);
    assert!(r.body == files.small, "2 KiB body differs");
    let r = curl_reply(&[&server.url("/big.bin")]).unwrap();
    expect_answer(&r, "200 OK", "application/octet-stream", 1 << 20);
    assert!(r.body == files.big, "1 MiB body differs");
    for (path, len, seed) in [("/below.bin", 8191, 3), ("/at.bin", 8192, 4)] {
        let r = curl_reply(&[&server.url(path)]).unwrap();
        expect_answer(&r, "200 OK", "application/octet-stream", len);
        assert!(r.body == pattern(len, seed), "{path}: body differs");
    }
    let r = curl_reply(&["-I", &server.url("/big.bin")]).unwrap();
    expect_answer(&r, "200 OK", "application/octet-stream", 1 << 20);
    assert!(r.body.is_empty());
    let r = curl_reply(&[&server.url("/")]).unwrap();
    expect_answer(&r, "200 OK", "text/html", 14);
    assert_eq!(r.body, b"<h1>home</h1>\n");
    let r = curl_reply(&[&server.url("/docs/a%20b.txt?x=1")]).unwrap();
    expect_answer(&r, "200 OK", "text/plain", 7);
    assert_eq!(r.body, b"spaced\n");

    // The error statuses, through curl.
    for (path, status) in [
        ("/missing.txt", "404 Not Found"),
        ("/empty", "404 Not Found"),
        ("/docs/", "404 Not Found"),
        ("/../secret.txt", "403 Forbidden"),
        ("/docs/%2e%2e/%2E%2E/secret.txt", "403 Forbidden"),
        ("/bad%zz", "400 Bad Request"),
        ("/nul%00.txt", "400 Bad Request"),
    ] {
        let r = curl_reply(&["--path-as-is", &server.url(path)]).unwrap();
        let body = format!("{status}\n");
        expect_answer(&r, status, "text/plain", body.len());
        assert_eq!(r.text(), body, "{path}");
    }
    let r = curl_reply(&["-X", "POST", "-d", "x=1", &server.url("/f2k.bin")]).unwrap();
    expect_answer(&r, "501 Not Implemented", "text/plain", 20);
    let r = curl_reply(&["-I", &server.url("/missing.txt")]).unwrap();
    expect_answer(&r, "404 Not Found", "text/plain", 14);
    assert!(r.body.is_empty(), "HEAD of an error has no body");

    // Raw requests: what curl would not send.
    for (raw, status) in [
        (&b"GARBAGE\r\n\r\n"[..], "400 Bad Request"),
        (b"GET\r\n\r\n", "400 Bad Request"),
        (b"GET /f2k.bin\r\n\r\n", "400 Bad Request"),
        (b"GET f2k.bin HTTP/1.0\r\n\r\n", "400 Bad Request"),
        (b"GET /f2k.bin HTTP/1.0 extra\r\n\r\n", "400 Bad Request"),
        (b"BREW /pot HTTP/1.0\r\n\r\n", "501 Not Implemented"),
        // A request line and no end of the head: the peer's close runs END, which answers.
        (b"GET /f2k.bin HTTP/1.0\r\nHost: x\r\n", "400 Bad Request"),
    ] {
        let mut c = TcpStream::connect(server.addr).unwrap();
        c.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        c.write_all(raw).unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        let mut out = Vec::new();
        c.read_to_end(&mut out).unwrap();
        let r = reply(&out, "GET");
        assert_eq!(
            r.status_line(),
            format!("HTTP/1.0 {status}"),
            "{:?}",
            String::from_utf8_lossy(raw)
        );
        assert_eq!(r.text(), format!("{status}\n"));
    }
    // Empty lines before the request line are skipped; LF-only line ends are accepted.
    let r = reply(
        &server.exchange(b"\r\n\nGET /f2k.bin HTTP/1.0\nHost: x\n\n"),
        "GET",
    );
    expect_answer(&r, "200 OK", "application/octet-stream", 2048);
    assert!(r.body == files.small);
    // A request that arrives a byte at a time.
    let mut c = TcpStream::connect(server.addr).unwrap();
    c.set_nodelay(true).unwrap();
    c.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    for b in b"HEAD /index.html HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n" {
        c.write_all(&[*b]).unwrap();
        std::thread::sleep(Duration::from_micros(200));
    }
    let mut out = Vec::new();
    c.read_to_end(&mut out).unwrap();
    expect_answer(&reply(&out, "HEAD"), "200 OK", "text/html", 14);

    // Many connections in a row, one request each.
    for i in 0..300 {
        let path = if i % 3 == 0 { "/nope" } else { "/f2k.bin" };
        let raw = format!("GET {path} HTTP/1.0\r\nUser-Agent: loop\r\n\r\n");
        let r = reply(&server.exchange(raw.as_bytes()), "GET");
        if i % 3 == 0 {
            assert_eq!(r.status_line(), "HTTP/1.0 404 Not Found");
        } else {
            assert!(r.body == files.small, "request {i}");
        }
    }

    // Python's http.client: another client no one here wrote.
    python_client(&server, &files);
}

const PY_CLIENT: &str = r#"
import hashlib, http.client, sys
port = int(sys.argv[1])
for path, method in [("/f2k.bin", "GET"), ("/big.bin", "GET"), ("/big.bin", "HEAD"),
                     ("/missing.txt", "GET"), ("/../secret.txt", "GET"), ("/", "DELETE")]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request(method, path)
    r = c.getresponse()
    body = r.read()
    print(r.version, r.status, r.getheader("Content-Length"), r.getheader("Content-Type"),
          len(body), hashlib.sha256(body).hexdigest())
    c.close()
for i in range(100):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/f2k.bin")
    r = c.getresponse()
    assert r.status == 200 and len(r.read()) == 2048, i
    c.close()
print("100 in a row")
"#;

fn sha256_hex(data: &[u8]) -> String {
    let out = Command::new("python3")
        .args([
            "-c",
            "import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child.stdin.take().unwrap().write_all(data)?;
            child.wait_with_output()
        })
        .expect("python3");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn python_client(server: &Http10, files: &Files) {
    let have = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        skip(
            "http10 with http.client",
            Missing::Installable,
            "python3 is not installed",
        );
        return;
    }
    let out = Command::new("python3")
        .args(["-c", PY_CLIENT, &server.addr.port().to_string()])
        .output()
        .expect("run python3");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let empty = sha256_hex(b"");
    let want = [
        format!(
            "10 200 2048 application/octet-stream 2048 {}",
            sha256_hex(&files.small)
        ),
        format!(
            "10 200 1048576 application/octet-stream 1048576 {}",
            sha256_hex(&files.big)
        ),
        format!("10 200 1048576 application/octet-stream 0 {empty}"),
        format!("10 404 14 text/plain 14 {}", sha256_hex(b"404 Not Found\n")),
        format!("10 403 14 text/plain 14 {}", sha256_hex(b"403 Forbidden\n")),
        format!(
            "10 501 20 text/plain 20 {}",
            sha256_hex(b"501 Not Implemented\n")
        ),
        "100 in a row".to_string(),
    ];
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines, want);
}

#[test]
fn nest_http10_on_processes() {
    serves_files("processServer 3");
}

#[test]
fn nest_http10_on_threads() {
    serves_files("threadServer 8");
}

#[test]
fn nest_http10_on_events() {
    serves_files("eventServer 2");
}

#[test]
fn nest_http10_on_uring() {
    serves_files("uringServer 2");
}

#[test]
fn nest_http10_on_percore() {
    serves_files("percoreServer");
}
