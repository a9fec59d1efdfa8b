//! HTTPS: the real binary on a TLS listener, with certificates made by the test's own CA,
//! and real clients (curl, `openssl s_client`, Python's ssl module).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fastpath_testkit::{KeyKind, TestPki};

use crate::handover::{echo, Backend};
use crate::util::*;

/// A site with two hosts, each with its certificate, and the CA that signed them.
pub(crate) struct Tls {
    pub(crate) site: Site,
    pub(crate) ca: PathBuf,
}

const BIG: usize = 1024 * 1024 + 7;

fn big_body() -> Vec<u8> {
    (0..BIG).map(|i| (i * 7 % 251) as u8).collect()
}

/// `a.test` (ECDSA, the default) serves `root`, `b.test` (RSA) serves `broot`.
pub(crate) fn tls_site(extra: &str) -> Tls {
    let site = Site::new();
    site.file("hello.txt", "hello over tls");
    site.file("big.bin", big_body());
    site.file("../broot/hello.txt", "hello from b");
    let pki = TestPki::new(site.base());
    let (a_chain, a_key) = pki.leaf("a", &["a.test", "localhost"], KeyKind::EcdsaP256);
    let (b_chain, b_key) = pki.leaf("b", &["b.test"], KeyKind::Rsa2048);
    site.config(&format!(
        "root = \"root\"\n\
         tls_certificate = {a_chain:?}\n\
         tls_key = {a_key:?}\n\
         {extra}\n\
         [[host]]\n\
         names = [\"b.test\"]\n\
         root = \"broot\"\n\
         tls_certificate = {b_chain:?}\n\
         tls_key = {b_key:?}\n"
    ));
    Tls {
        ca: pki.ca().to_owned(),
        site,
    }
}

impl Tls {
    pub(crate) fn serve(&self, model: Model) -> Server {
        let config = std::fs::read_to_string(self.site.base().join("fastpath.toml")).unwrap();
        self.site.server(model).config(&config).tls().start()
    }
}

/// curl over HTTPS to `name` (resolved to the server), trusting the test CA; `None` when
/// curl is missing.
pub(crate) fn curl_https_to(
    tls: &Tls,
    srv: &Server,
    name: &str,
    path: &str,
    extra: &[&str],
) -> Option<Output> {
    curl_https(&tls.ca, name, srv.addr().port(), path, extra)
}

pub(crate) fn openssl() -> bool {
    let ok = Command::new("openssl")
        .arg("version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        skip("openssl", Missing::Installable, "openssl is not installed");
    }
    ok
}

/// `openssl s_client` to the server with `args`, sending `input`; its stdout and whether it
/// exited well.
pub(crate) fn s_client(srv: &Server, args: &[&str], input: &[u8]) -> (String, bool) {
    let mut child = spawn_s_client(srv, &[&["-ign_eof"], args].concat());
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (text, out.status.success())
}

/// `openssl s_client` to the server with `args`, its standard streams piped.
pub(crate) fn spawn_s_client(srv: &Server, args: &[&str]) -> std::process::Child {
    let connect = srv.addr().to_string();
    Command::new("openssl")
        .args(["s_client", "-connect", &connect])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run openssl")
}

/// Runs a Python script with the server's port and the CA's path as arguments; its stdout.
pub(crate) fn python(script: &str, srv: &Server, tls: &Tls) -> String {
    let out = Command::new("timeout")
        .args(["20", "python3", "-c"])
        .arg(script)
        .arg(srv.addr().port().to_string())
        .arg(&tls.ca)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

httptest!(tls_curl_gets_a_file_from_each_host_by_sni, |model| {
    let tls = tls_site("");
    let srv = tls.serve(model);
    let Some(out) = curl_https_to(&tls, &srv, "a.test", "/hello.txt", &["-D", "-"]) else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // curl offers h2 first, and gets it.
    assert!(text.starts_with("HTTP/2 200 \r\n"), "{text}");
    assert!(text.ends_with("hello over tls"), "{text}");
    let out = curl_https_to(&tls, &srv, "b.test", "/hello.txt", &[]).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"hello from b");
});

httptest!(tls_large_files_and_keep_alive_over_python_ssl, |model| {
    let tls = tls_site("");
    let srv = tls.serve(model);
    let script = r#"
import hashlib, http.client, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[2])
conn = http.client.HTTPSConnection("localhost", int(sys.argv[1]), context=ctx)
for path in ["/big.bin", "/hello.txt", "/big.bin"]:
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read()
    print(r.status, len(body), hashlib.sha256(body).hexdigest())
print(conn.sock.version(), conn.sock.selected_alpn_protocol())
"#;
    let out = python(script, &srv, &tls);
    let big = format!("200 {BIG} {}", sha256_hex(&big_body()));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], big, "{out}");
    assert!(lines[1].starts_with("200 14 "), "{out}");
    assert_eq!(lines[2], big, "{out}");
    assert_eq!(lines[3], "TLSv1.3 None", "{out}");
});

fn sha256_hex(data: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha256sum");
    let mut stdin = child.stdin.take().unwrap();
    let data = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

#[test]
fn tls_versions_alpn_and_the_certificate_chosen() {
    if !openssl() {
        return;
    }
    let tls = tls_site("");
    let srv = tls.serve("epoll");
    let ca = tls.ca.to_str().unwrap();
    let request = b"GET /hello.txt HTTP/1.1\r\nHost: b.test\r\nConnection: close\r\n\r\n";
    let (out, ok) = s_client(
        &srv,
        &[
            "-servername",
            "b.test",
            "-CAfile",
            ca,
            "-alpn",
            "http/1.1",
            "-tls1_2",
        ],
        request,
    );
    assert!(ok, "{out}");
    assert!(out.contains("Verify return code: 0 (ok)"), "{out}");
    assert!(
        out.contains("subject=CN=b.test") || out.contains("subject=CN = b.test"),
        "{out}"
    );
    assert!(out.contains("ALPN protocol: http/1.1"), "{out}");
    assert!(out.contains("TLSv1.2"), "{out}");
    assert!(out.contains("hello from b"), "{out}");

    // No shared version: TLS 1.1 is refused.
    let (out, ok) = s_client(&srv, &["-servername", "a.test", "-tls1_1"], b"");
    assert!(!ok || !out.contains("hello over tls"), "{out}");
    assert!(
        !out.contains("Cipher is ECDHE") && !out.contains("New, TLSv1.1"),
        "{out}"
    );

    // An unknown name gets the default certificate.
    let (out, ok) = s_client(&srv, &["-servername", "c.test", "-CAfile", ca], b"");
    assert!(ok, "{out}");
    assert!(
        out.contains("CN=a.test") || out.contains("CN = a.test"),
        "{out}"
    );
}

#[test]
fn tls_an_unknown_name_is_refused_when_so_configured() {
    if !openssl() {
        return;
    }
    let tls = tls_site("[tls]\nunknown_name = \"refuse\"\nprotocols = [\"TLSv1.3\"]\n");
    let srv = tls.serve("epoll");
    let (out, _) = s_client(&srv, &["-servername", "c.test"], b"");
    assert!(out.contains("Cipher is (NONE)"), "{out}");
    assert!(
        !out.contains("CN=a.test") && !out.contains("CN = a.test"),
        "{out}"
    );
    // TLS 1.3 only: 1.2 is refused.
    let (out, _) = s_client(&srv, &["-servername", "a.test", "-tls1_2"], b"");
    assert!(out.contains("Cipher is (NONE)"), "{out}");
    assert!(out.contains("alert protocol version"), "{out}");
    let (out, ok) = s_client(&srv, &["-servername", "a.test", "-tls1_3"], b"");
    assert!(ok && out.contains("TLSv1.3"), "{out}");
}

#[test]
fn tls_a_host_other_than_the_sni_name_is_misdirected() {
    let tls = tls_site("");
    let srv = tls.serve("epoll");
    let Some(out) = curl_https_to(
        &tls,
        &srv,
        "a.test",
        "/hello.txt",
        &["--http1.1", "-D", "-", "-H", "Host: b.test"],
    ) else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("HTTP/1.1 421 Misdirected Request"),
        "{text}"
    );
    // Over HTTP/2, where the :authority says which host.
    let args = ["--http2", "-D", "-", "-H", "Host: b.test"];
    let out = curl_https_to(&tls, &srv, "a.test", "/hello.txt", &args).unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/2 421 "), "{text}");
    // The same name with a port, another case and a trailing dot is the same host.
    let port = srv.addr().port();
    let host = format!("Host: A.Test.:{port}");
    let out = curl_https_to(&tls, &srv, "a.test", "/hello.txt", &["-H", &host]).unwrap();
    assert_eq!(out.stdout, b"hello over tls");
}

#[test]
fn tls_plain_http_to_the_tls_port_is_told_so() {
    let tls = tls_site("");
    let srv = tls.serve("epoll");
    let mut conn = TcpStream::connect(srv.addr()).unwrap();
    conn.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    conn.write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).unwrap();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{text}");
    assert!(text.contains("This port speaks HTTPS"), "{text}");
}

#[test]
fn tls_garbage_and_a_stalled_handshake_end_the_connection() {
    let tls = tls_site("[timeouts]\nheader = \"1s\"\n");
    let srv = tls.serve("epoll");
    // Bytes that are no TLS record: an alert, then the end.
    let mut conn = TcpStream::connect(srv.addr()).unwrap();
    conn.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    conn.write_all(&[0x16, 0x03, 0x01, 0xff, 0xff, 0, 0, 0, 0])
        .unwrap();
    let mut answer = Vec::new();
    let _ = conn.read_to_end(&mut answer);
    assert!(answer.is_empty() || answer[0] == 0x15, "{answer:?}");
    // Half a ClientHello, then silence: closed at the header timeout.
    let mut conn = TcpStream::connect(srv.addr()).unwrap();
    conn.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    conn.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    let _ = conn.read_to_end(&mut answer);
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(800), "{waited:?}");
    assert!(waited < Duration::from_secs(4), "{waited:?}");
}

#[test]
fn tls_a_client_hello_in_one_byte_writes_is_served() {
    let tls = tls_site("");
    let srv = tls.serve("epoll");
    let script = r#"
import socket, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[2])
incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
tls = ctx.wrap_bio(incoming, outgoing, server_hostname="a.test")
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
first = True
while True:
    try:
        tls.do_handshake()
        break
    except ssl.SSLWantReadError:
        pass
    data = outgoing.read()
    if first:
        for b in data:
            sock.sendall(bytes([b]))
        first = False
    else:
        sock.sendall(data)
    incoming.write(sock.recv(65536))
tls.write(b"GET /hello.txt HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
sock.sendall(outgoing.read())
answer = b""
while True:
    chunk = sock.recv(65536)
    if not chunk:
        break
    incoming.write(chunk)
    try:
        while True:
            data = tls.read(65536)
            if not data:
                break
            answer += data
    except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
        pass
print(answer.split(b"\r\n")[0].decode(), answer.endswith(b"hello over tls"))
"#;
    let out = python(script, &srv, &tls);
    assert_eq!(out.trim(), "HTTP/1.1 200 OK True");
}

#[test]
fn tls_a_proxied_request_tells_the_backend_it_came_over_https() {
    let backend = Backend::start(echo);
    let tls = tls_site(&format!(
        "[[backend]]\nname = \"app\"\naddresses = \"{}\"\n\n[[route]]\nprefix = \"/app/\"\nbackend = \"app\"\n",
        backend.addr
    ));
    let srv = tls.serve("epoll");
    let Some(out) = curl_https_to(&tls, &srv, "a.test", "/app/x", &[]) else {
        return;
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(seen.contains("x-forwarded-proto: https"), "{seen}");
}

httptest!(tls_hsts_is_on_every_answer_over_tls, |model| {
    let backend = Backend::start(echo);
    let tls = tls_site(&format!(
        "hsts = \"max-age=600;  includesubdomains\"\n\
         [[backend]]\nname = \"app\"\naddresses = \"{}\"\n\n\
         [[route]]\nprefix = \"/app/\"\nbackend = \"app\"\n",
        backend.addr
    ));
    let srv = tls.serve(model);
    let want = "strict-transport-security: max-age=600; includeSubDomains\r\n";
    let cases = [
        ("a.test", "/hello.txt", 200),
        ("a.test", "/missing", 404),
        ("a.test", "/app/x", 200),
        // b.test inherits the top level's.
        ("b.test", "/hello.txt", 200),
    ];
    for ((name, path, status), (protocol, version)) in cases.into_iter().flat_map(|case| {
        [
            (case, ("--http1.1", "HTTP/1.1")),
            (case, ("--http2", "HTTP/2")),
        ]
    }) {
        let args = [protocol, "-D", "-", "-o", "/dev/null"];
        let Some(out) = curl_https_to(&tls, &srv, name, path, &args) else {
            return;
        };
        let head = String::from_utf8_lossy(&out.stdout);
        assert!(head.starts_with(&format!("{version} {status} ")), "{head}");
        assert_eq!(
            head.to_ascii_lowercase()
                .matches("strict-transport-security")
                .count(),
            1,
            "{name}{path}: {head}"
        );
        assert!(
            head.to_ascii_lowercase()
                .contains(&want.to_ascii_lowercase()),
            "{name}{path}: {head}"
        );
        assert!(head.contains(want.split(':').nth(1).unwrap()), "{head}");
    }
});

#[test]
fn tls_hsts_is_never_sent_over_plain_http() {
    let site = Site::new();
    site.file("hello.txt", "hi");
    let srv = site
        .server("epoll")
        .config("root = \"root\"\nhsts = true\n")
        .start();
    let r = srv.request("GET /hello.txt HTTP/1.1\r\nHost: a.test\r\n\r\n");
    r.assert_status(200);
    assert!(r.header("strict-transport-security").is_none());
}

httptest!(tls_sessions_resume_on_every_worker_with_tickets, |model| {
    let tls = tls_site("");
    let srv = tls.serve(model);
    let port = srv.addr().port();
    // Prefork's children, each a process, share the keys too.
    for run in resumptions(&tls.ca, (port, port), "/hello.txt", 3, || {}) {
        assert_eq!(run.reused, [false, true, true, true], "{run:?}");
        assert!(run.bodies.iter().all(|b| b == "hello over tls"), "{run:?}");
    }
});

/// How one TLS version's sessions went in [`resumptions`].
#[derive(Debug)]
pub(crate) struct Resumed {
    /// `TLSv1_2` or `TLSv1_3`.
    pub(crate) version: String,
    /// Each connection's body, in order.
    pub(crate) bodies: Vec<String>,
    /// Whether each connection resumed the session of the one before.
    pub(crate) reused: Vec<bool>,
    /// The first session came with a ticket.
    pub(crate) ticket: bool,
}

/// A Python client, for TLS 1.2 and then 1.3: one connection to `first` for `path` (host
/// `a.test`, trusting `ca`); then, once `between` has run, `more` connections to `second`,
/// each resuming the session of the one before.
pub(crate) fn resumptions(
    ca: &std::path::Path,
    (first, second): (u16, u16),
    path: &str,
    more: usize,
    between: impl FnOnce(),
) -> Vec<Resumed> {
    let script = r#"
import json, socket, ssl, sys
first, second, ca, path, more = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
def fetch(ctx, port, session):
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    s = ctx.wrap_socket(raw, server_hostname="a.test", session=session)
    s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
    answer = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        answer += chunk
    found = (answer.split(b"\r\n\r\n", 1)[-1].decode(), s.session_reused, s.session)
    s.close()
    return found
runs = []
for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
    ctx = ssl.create_default_context(cafile=ca)
    ctx.minimum_version = ctx.maximum_version = version
    runs.append((version, ctx, [fetch(ctx, first, None)]))
print("made", flush=True)
sys.stdin.readline()
for version, ctx, done in runs:
    for _ in range(more):
        done.append(fetch(ctx, second, done[-1][2]))
    print(json.dumps({"version": version.name, "bodies": [d[0] for d in done],
                      "reused": [d[1] for d in done], "ticket": done[0][2].has_ticket}))
"#;
    let mut child = Command::new("timeout")
        .args(["30", "python3", "-c", script])
        .args([first.to_string(), second.to_string()])
        .arg(ca)
        .args([path.to_string(), more.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python3");
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert_eq!(line, "made\n");
    between();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    rest.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            let strings = |key: &str| -> Vec<String> {
                v[key]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b.as_str().unwrap().to_owned())
                    .collect()
            };
            Resumed {
                version: v["version"].as_str().unwrap().to_owned(),
                bodies: strings("bodies"),
                reused: v["reused"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r.as_bool().unwrap())
                    .collect(),
                ticket: v["ticket"].as_bool().unwrap(),
            }
        })
        .collect()
}

/// Whether each version's second connection resumed, and whether the first had a ticket:
/// `VERSION resumed: BOOL ticket: BOOL` lines, for the tests that look at one resumption.
fn resume_later(tls: &Tls, first: u16, second: u16, between: impl FnOnce()) -> String {
    resumptions(&tls.ca, (first, second), "/hello.txt", 1, between)
        .iter()
        .map(|run| {
            let body_ok = run.bodies.iter().all(|b| b == "hello over tls");
            assert!(body_ok, "{run:?}");
            format!(
                "{} resumed: {} ticket: {}\n",
                run.version, run.reused[1], run.ticket
            )
            .replace("true", "True")
            .replace("false", "False")
        })
        .collect()
}

httptest!(tls_sessions_resume_across_a_reload, |model| {
    let tls = tls_site("");
    let pid_file = tls.site.base().join("fastpath.pid");
    let config = std::fs::read_to_string(tls.site.base().join("fastpath.toml")).unwrap();
    let srv = reloadable(tls.site.server(model), &config, &pid_file);
    let port = srv.addr().port();
    let out = resume_later(&tls, port, port, || {
        crate::reload::replace(&pid_file, libc::SIGHUP);
    });
    assert_eq!(
        out.trim(),
        "TLSv1_2 resumed: True ticket: True\nTLSv1_3 resumed: True ticket: True"
    );
    assert!(
        srv.wait_stderr(
            Duration::from_secs(5),
            "session ticket keys taken over from the previous server"
        ),
        "{}",
        srv.stderr()
    );
});

httptest!(
    tls_the_access_log_can_name_protocol_cipher_and_resumption,
    |model| {
        let tls = tls_site("[log]\ntls_fields = true");
        let srv = tls.serve(model);
        let port = srv.addr().port();
        resume_later(&tls, port, port, || {});
        let ends = [
            "\"-\" \"-\" TLSv1.2 TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 .",
            "\"-\" \"-\" TLSv1.2 TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 r",
            "\"-\" \"-\" TLSv1.3 TLS13_AES_256_GCM_SHA384 .",
            "\"-\" \"-\" TLSv1.3 TLS13_AES_256_GCM_SHA384 r",
        ];
        for end in ends {
            let line = srv.wait_stdout_line(Duration::from_secs(5), |l| l.ends_with(end));
            assert!(
                line.is_some(),
                "no line ends with {end:?}: {}",
                srv.stdout()
            );
        }
    }
);

#[test]
fn tls_servers_sharing_ticket_key_files_resume_each_others_sessions() {
    let tls = tls_site("[tls]\nticket_keys = [\"current.key\", \"previous.key\"]");
    let key_bytes = |seed: u8, len: usize| {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(seed))
            .collect::<Vec<u8>>()
    };
    tls.site.write("current.key", key_bytes(7, 80));
    tls.site.write("previous.key", key_bytes(11, 48));
    let first = tls.serve("epoll");
    let second = tls.serve("prefork");
    let out = resume_later(&tls, first.addr().port(), second.addr().port(), || {});
    assert_eq!(
        out.trim(),
        "TLSv1_2 resumed: True ticket: True\nTLSv1_3 resumed: True ticket: True"
    );
    // Servers with keys of their own do not.
    let other = tls_site("");
    let third = other.serve("epoll");
    let fourth = other.serve("epoll");
    let out = resume_later(&other, third.addr().port(), fourth.addr().port(), || {});
    assert_eq!(
        out.trim(),
        "TLSv1_2 resumed: False ticket: True\nTLSv1_3 resumed: False ticket: True"
    );
}

#[test]
fn tls_without_tickets_sessions_resume_from_the_process_cache() {
    let tls = tls_site("[tls]\nsession_tickets = false");
    let srv = tls.serve("epoll");
    let port = srv.addr().port();
    let out = resume_later(&tls, port, port, || {});
    assert_eq!(
        out.trim(),
        "TLSv1_2 resumed: True ticket: False\nTLSv1_3 resumed: True ticket: True"
    );
}

/// The leaf certificate the server at `srv` sends for `a.test`, as PEM (at once: the
/// connection ends after one request).
fn served_leaf(srv: &Server, ca: &std::path::Path) -> String {
    let (out, ok) = s_client(
        srv,
        &[
            "-servername",
            "a.test",
            "-CAfile",
            ca.to_str().unwrap(),
            "-showcerts",
        ],
        // A request that ends the connection: without one the server would wait for the
        // header timeout before closing it.
        b"HEAD / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
    );
    assert!(ok, "{out}");
    let start = out
        .find("-----BEGIN CERTIFICATE-----")
        .expect("a certificate");
    let end = out[start..].find("-----END CERTIFICATE-----").unwrap() + start;
    out[start..end].to_owned()
}

/// A TLS server of `config` that writes its pid to `pid_file`, for the tests that reload it.
fn reloadable(builder: ServerBuilder<'_>, config: &str, pid_file: &std::path::Path) -> Server {
    builder
        .config(config)
        .tls()
        .arg("--pid-file")
        .arg(pid_file.to_str().unwrap())
        .start()
}

/// A server of `model` whose one certificate, for `a.test`, is in files a test changes
/// (`a.pem` and `a.key`), with a pid file for its reloads.
struct OneCertificate {
    site: Site,
    pki: TestPki,
    chain: PathBuf,
    key: PathBuf,
    pid_file: PathBuf,
    srv: Server,
}

fn one_certificate(model: Model) -> OneCertificate {
    let site = Site::new();
    site.file("hello.txt", "hello over tls");
    let pki = TestPki::new(site.base());
    let (chain, key) = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256);
    let pid_file = site.base().join("fastpath.pid");
    let config = format!("root = \"root\"\ntls_certificate = {chain:?}\ntls_key = {key:?}\n");
    let srv = reloadable(site.server(model), &config, &pid_file);
    OneCertificate {
        site,
        pki,
        chain,
        key,
        pid_file,
        srv,
    }
}

#[test]
fn tls_a_reload_serves_the_certificate_now_in_the_files() {
    if !openssl() {
        return;
    }
    let OneCertificate {
        site,
        pki,
        chain,
        key,
        pid_file,
        srv,
    } = one_certificate("epoll");
    let before = served_leaf(&srv, pki.ca());
    assert!(std::fs::read_to_string(&chain)
        .unwrap()
        .contains(before.trim()));
    // A new key and certificate in the same files, then a reload.
    pki.leaf("a", &["a.test"], KeyKind::Rsa2048);
    crate::reload::replace(&pid_file, libc::SIGHUP);
    let after = served_leaf(&srv, pki.ca());
    assert_ne!(before, after);
    assert!(std::fs::read_to_string(&chain)
        .unwrap()
        .contains(after.trim()));
    // A key that is not the certificate's: the reload is refused, the server goes on.
    std::fs::copy(site.base().join("a.key"), site.base().join("saved.key")).unwrap();
    pki.leaf("other", &["a.test"], KeyKind::EcdsaP256);
    std::fs::copy(site.base().join("other.key"), &key).unwrap();
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: kill(2) on the server's pid.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGHUP) };
    assert!(
        srv.wait_stderr(Duration::from_secs(5), "reload refused"),
        "{}",
        srv.stderr()
    );
    assert_eq!(served_leaf(&srv, pki.ca()), after);
}

httptest!(
    tls_a_changed_certificate_file_is_served_with_no_failed_handshake,
    |model| {
        if !openssl() {
            return;
        }
        // The site is held: its directory has the files the server reads.
        let OneCertificate {
            site: _site,
            pki,
            chain,
            key,
            srv,
            ..
        } = one_certificate(model);
        let before = served_leaf(&srv, pki.ca());
        // Clients keep coming while the files change and the server takes them up.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (ca, port) = (pki.ca().to_owned(), srv.addr().port());
        let clients = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let (mut done, mut failed) = (0, Vec::new());
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let Some(out) = curl_https(&ca, "a.test", port, "/hello.txt", &[]) else {
                        return (done, failed);
                    };
                    if out.status.success() && out.stdout == b"hello over tls" {
                        done += 1;
                    } else {
                        failed.push(String::from_utf8_lossy(&out.stderr).into_owned());
                    }
                }
                (done, failed)
            })
        };
        // A new key and certificate in the same files, no signal.
        pki.leaf("a", &["a.test"], KeyKind::EcdsaP256);
        let after = wait_for(Duration::from_secs(10), || {
            let now = served_leaf(&srv, pki.ca());
            (now != before).then_some(now)
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (done, failed) = clients.join().unwrap();
        let after = after
            .unwrap_or_else(|| panic!("the old certificate is still served: {}", srv.stderr()));
        assert!(std::fs::read_to_string(&chain)
            .unwrap()
            .contains(after.trim()));
        assert!(
            failed.is_empty(),
            "{} requests failed: {failed:?}",
            failed.len()
        );
        assert!(done > 0);
        assert!(
            srv.wait_stderr(
                Duration::from_secs(1),
                &format!("{} changed", chain.display())
            ) || srv.wait_stderr(
                Duration::from_secs(1),
                &format!("{} changed", key.display())
            ),
            "{}",
            srv.stderr()
        );
    }
);

httptest!(
    tls_a_plain_listener_redirects_every_request_to_https,
    |model| {
        let site = Site::new();
        site.file("hello.txt", "hello");
        let port = free_port();
        let config = format!(
        "root = \"root\"\n[[listen]]\naddress = \"127.0.0.1:{port}\"\nredirect_to_https = 8443\n"
    );
        let srv = site
            .server(model)
            .config(&config)
            .configured_listen()
            .start();
        let r = srv.request("GET /hello.txt?x=1 HTTP/1.1\r\nHost: a.test:8080\r\n\r\n");
        r.assert_status(301);
        r.assert_header("location", "https://a.test:8443/hello.txt?x=1");
        let r = srv.request("POST /form HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\n\r\nabc");
        r.assert_status(308);
        r.assert_header("location", "https://a.test:8443/form");
        srv.request("GET / HTTP/1.0\r\n\r\n").assert_status(400);
    }
);

/// Runs sslyze against the server for `a.test`, trusting the test CA, checked against
/// Mozilla's `profile`; its output, or `None` (after saying so) where sslyze is missing.
fn sslyze(srv: &Server, ca: &std::path::Path, profile: &str) -> Option<(String, bool)> {
    if !python_has("sslyze") {
        skip(
            "sslyze",
            Missing::Installable,
            "sslyze is not installed (pip install sslyze)",
        );
        return None;
    }
    let target = format!("a.test:{}{{127.0.0.1}}", srv.addr().port());
    let out = Command::new("timeout")
        .args(["120", "python3", "-m", "sslyze"])
        .arg(format!("--mozilla_config={profile}"))
        .arg("--certinfo_ca_file")
        .arg(ca)
        .arg(&target)
        .output()
        .expect("run sslyze");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    Some((text, out.status.success()))
}

#[test]
fn tls_the_default_profile_is_mozilla_intermediate_and_tls13_only_is_modern() {
    let tls = tls_site("");
    let srv = tls.serve("epoll");
    let Some((out, ok)) = sslyze(&srv, &tls.ca, "intermediate") else {
        return;
    };
    assert!(ok && out.contains("OK - Compliant"), "{out}");
    let tls = tls_site("[tls]\nprotocols = [\"TLSv1.3\"]\n");
    let srv = tls.serve("epoll");
    let (out, ok) = sslyze(&srv, &tls.ca, "modern").unwrap();
    assert!(ok && out.contains("OK - Compliant"), "{out}");
}

httptest!(
    tls_a_refused_tls_client_gets_no_plaintext_and_a_plain_one_its_503,
    |model| {
        let tls = tls_site("[limits]\nmax_connections = 2");
        let plain_port = free_port();
        let tls_port = free_port();
        let config = std::fs::read_to_string(tls.site.base().join("fastpath.toml")).unwrap();
        let config = format!(
            "{config}\n[[listen]]\naddress = \"127.0.0.1:{plain_port}\"\n\
         [[listen]]\naddress = \"127.0.0.1:{tls_port}\"\ntls = true\n"
        );
        let _srv = tls
            .site
            .server(model)
            .config(&config)
            .configured_listen()
            .start();
        let plain: std::net::SocketAddr = ([127, 0, 0, 1], plain_port).into();
        // Two held connections fill the server.
        let held: Vec<Conn> = (0..2)
            .map(|_| {
                let mut c = Conn::open(plain);
                c.exchange("GET /hello.txt HTTP/1.1\r\nHost: a.test\r\n\r\n")
                    .assert_status(200);
                c
            })
            .collect();
        let mut refused_with_503 = 0;
        for _ in 0..3 {
            let mut extra = Conn::open(plain);
            let _ = extra.try_send("GET /hello.txt HTTP/1.1\r\nHost: a.test\r\n\r\n");
            if let Ok(Some(r)) = extra.try_read_response("GET") {
                r.assert_status(503);
                refused_with_503 += 1;
            }
        }
        assert!(refused_with_503 > 0, "no 503 on the plain listener");
        // A TLS client over the limit reads nothing before the close: no plaintext 503 that it
        // would take for a broken record.
        for _ in 0..3 {
            let mut stream = TcpStream::connect(("127.0.0.1", tls_port)).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let _ = stream.write_all(b"\x16\x03\x01\x00\x05hello");
            let mut got = Vec::new();
            let _ = stream.read_to_end(&mut got);
            assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
        }
        drop(held);
    }
);
