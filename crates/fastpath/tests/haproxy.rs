//! fastpath behind a real HAProxy: two nodes, the balancer in TCP mode in front of TLS
//! nodes and in HTTP mode (terminating TLS itself) in front of plain ones, both sending the
//! PROXY protocol header; requests are spread over the nodes and each logs the real client.
//! Skipped, visibly, where haproxy is not installed (CI installs it).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fastpath_testkit::{KeyKind, TestPki};

use crate::util::*;

/// A running haproxy, killed on drop.
struct Haproxy(Child);

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn haproxy(dir: &Path, config: &str, port: u16) -> Option<Haproxy> {
    let ok = Command::new("haproxy")
        .arg("-v")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        skip("haproxy", Missing::Installable, "haproxy is not installed");
        return None;
    }
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, config).unwrap();
    let child = Command::new("haproxy")
        .args(["-db", "-f"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start haproxy");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "haproxy did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(Haproxy(child))
}

/// A node serving `node.txt` with its name, on a listener that takes PROXY headers from
/// HAProxy (127.0.0.1), with TLS when `tls` names a certificate and key.
fn node(name: &str, tls: Option<(&Path, &Path)>) -> (Site, Server) {
    node_with(name, tls, "")
}

/// [`node`], with more top-level configuration `extra` (before any table).
fn node_with(name: &str, tls: Option<(&Path, &Path)>, extra: &str) -> (Site, Server) {
    let site = Site::new();
    site.file("node.txt", name);
    let port = free_port();
    let tls_keys = match tls {
        Some((chain, key)) => format!("tls_certificate = {chain:?}\ntls_key = {key:?}\n"),
        None => String::new(),
    };
    let config = format!(
        "root = \"root\"\n{tls_keys}{extra}\
         [[listen]]\naddress = \"127.0.0.1:{port}\"\ntls = {}\n\
         proxy_protocol = true\nproxy_from = [\"127.0.0.1\"]\n",
        tls.is_some()
    );
    let srv = site
        .server("epoll")
        .config(&config)
        .configured_listen()
        .start();
    (site, srv)
}

/// GETs `url` with curl from 127.0.0.2, so that the nodes can tell the client's address
/// from the balancer's (127.0.0.1); the body.
fn get_from_client(port: u16, ca: &Path) -> Option<String> {
    let out = curl_https(
        ca,
        "a.test",
        port,
        "/node.txt",
        &["--interface", "127.0.0.2"],
    )?;
    assert!(
        out.status.success(),
        "curl to port {port}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The bodies of four requests through the balancer on `port`, each on a connection of its
/// own; `None` when curl is missing.
fn four_requests(port: u16, ca: &Path) -> Option<Vec<String>> {
    (0..4).map(|_| get_from_client(port, ca)).collect()
}

/// Both nodes answered, and each logged the client at 127.0.0.2.
fn check_spread(bodies: &[String], nodes: &[&Server]) {
    assert!(bodies.iter().any(|b| b == "node A"), "{bodies:?}");
    assert!(bodies.iter().any(|b| b == "node B"), "{bodies:?}");
    for node in nodes {
        let line = node.wait_stdout_line(Duration::from_secs(5), |l| l.contains("GET /node.txt"));
        let line = line.unwrap_or_else(|| panic!("no access log line:\n{}", node.stdout()));
        assert!(line.starts_with("127.0.0.2 "), "{line}");
    }
}

/// An HAProxy configuration whose frontend on `port` in `mode` passes to the nodes in turn
/// with PROXY v2 headers; `server_options` follow each server line, `backend_options` are
/// lines of the backend.
fn balancer_config(
    mode: &str,
    port: u16,
    bind_options: &str,
    nodes: &[&Server],
    server_options: &str,
    backend_options: &str,
) -> String {
    let servers: String = nodes
        .iter()
        .zip(["a", "b"])
        .map(|(node, name)| {
            format!(
                "  server {name} {} send-proxy-v2{server_options}\n",
                node.addr()
            )
        })
        .collect();
    format!(
        "defaults\n  mode {mode}\n  timeout connect 2s\n  timeout client 10s\n  timeout server 10s\n\
         frontend front\n  bind 127.0.0.1:{port}{bind_options}\n  default_backend nodes\n\
         backend nodes\n  balance roundrobin\n{backend_options}{servers}"
    )
}

/// Starts HAProxy in `mode` (`tcp` or `http`) on a free port, its listener's options
/// `bind_options` (TLS for HTTP mode), sending PROXY v2 headers to nodes `a` and `b` in
/// turn; then four requests through it are spread over both, and each node logs the client.
fn spread_through_haproxy(
    dir: &Path,
    mode: &str,
    bind_options: &str,
    a: &Server,
    b: &Server,
    ca: &Path,
) {
    let port = free_port();
    let config = balancer_config(mode, port, bind_options, &[a, b], "", "");
    let Some(_haproxy) = haproxy(dir, &config, port) else {
        return;
    };
    let Some(bodies) = four_requests(port, ca) else {
        return;
    };
    check_spread(&bodies, &[a, b]);
}

#[test]
fn haproxy_in_tcp_mode_spreads_tls_clients_over_two_nodes_that_see_their_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path());
    let (chain, key) = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256);
    let (_a_site, a) = node("node A", Some((&chain, &key)));
    let (_b_site, b) = node("node B", Some((&chain, &key)));
    spread_through_haproxy(dir.path(), "tcp", "", &a, &b, pki.ca());
}

#[test]
fn haproxy_in_http_mode_terminates_tls_for_plain_nodes_that_see_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path());
    let (chain, key) = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256);
    // HAProxy takes the certificate and its key in one file.
    let bundle = dir.path().join("bundle.pem");
    let pem = std::fs::read_to_string(&chain).unwrap() + &std::fs::read_to_string(&key).unwrap();
    std::fs::write(&bundle, pem).unwrap();
    let (_a_site, a) = node("node A", None);
    let (_b_site, b) = node("node B", None);
    let ssl = format!(" ssl crt {}", bundle.display());
    spread_through_haproxy(dir.path(), "http", &ssl, &a, &b, pki.ca());
}

#[test]
fn haproxy_tls_sessions_resume_on_either_node_when_they_share_ticket_keys() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path());
    let (chain, key) = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256);
    let ticket_key = dir.path().join("ticket.key");
    std::fs::write(
        &ticket_key,
        (0..80u8).map(|i| i.wrapping_mul(37)).collect::<Vec<u8>>(),
    )
    .unwrap();
    let shared = format!("[tls]\nticket_keys = [{ticket_key:?}]\n");
    let (_a_site, a) = node_with("node A", Some((&chain, &key)), &shared);
    let (_b_site, b) = node_with("node B", Some((&chain, &key)), &shared);
    let port = free_port();
    let config = balancer_config("tcp", port, "", &[&a, &b], "", "");
    let Some(_haproxy) = haproxy(dir.path(), &config, port) else {
        return;
    };
    // Six connections in turn, each resuming the session of the one before: round robin
    // sends them to the nodes alternately.
    let runs = crate::tls::resumptions(pki.ca(), (port, port), "/node.txt", 5, || {});
    assert_eq!(runs.len(), 2);
    for run in runs {
        assert!(run.bodies.iter().any(|b| b == "node A"), "{run:?}");
        assert!(run.bodies.iter().any(|b| b == "node B"), "{run:?}");
        // Every connection after the first resumed, on whichever node it reached.
        assert_eq!(run.reused, [false, true, true, true, true, true], "{run:?}");
    }
}

/// Keep-alive GETs of `/node.txt` through the balancer on `port` until `stop`: the bodies
/// of the answers, and the failures (a status other than 200, or no answer).
fn load(port: u16, stop: &std::sync::atomic::AtomicBool) -> (Vec<String>, Vec<String>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let (mut bodies, mut failures) = (Vec::new(), Vec::new());
    'connections: while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let Ok(stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
            failures.push("connect refused by the balancer".to_owned());
            continue;
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut writer = stream;
        for _ in 0..20 {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                break 'connections;
            }
            if writer
                .write_all(b"GET /node.txt HTTP/1.1\r\nHost: a.test\r\n\r\n")
                .is_err()
            {
                failures.push("the balancer closed the connection".to_owned());
                continue 'connections;
            }
            let mut status = String::new();
            if reader.read_line(&mut status).unwrap_or(0) == 0 {
                failures.push("no answer".to_owned());
                continue 'connections;
            }
            let mut length = 0;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line == "\r\n" {
                    break;
                }
                if let Some(n) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = n.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            if !status.starts_with("HTTP/1.1 200 ") {
                failures.push(status.trim().to_owned());
            } else {
                bodies.push(String::from_utf8(body).unwrap());
            }
        }
    }
    (bodies, failures)
}

#[test]
fn haproxy_takes_a_node_that_stops_gracefully_out_under_load_and_loses_no_request() {
    let dir = tempfile::tempdir().unwrap();
    let health = "health_check = \"/healthz\"\n";
    let (_a_site, mut a) = node_with("node A", None, health);
    let (_b_site, b) = node_with("node B", None, health);
    // The nodes answer the check themselves; a node that stops accepting is taken out by
    // it, and a connection it refuses meanwhile goes to the other (redispatch).
    assert_eq!(
        a.request(
            "PROXY TCP4 127.0.0.2 127.0.0.1 5000 80\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        .text(),
        "ok\n"
    );
    let port = free_port();
    let config = balancer_config(
        "http",
        port,
        "",
        &[&a, &b],
        " check check-send-proxy inter 100ms fall 1 rise 1",
        "  option httpchk GET /healthz\n  http-check expect status 200\n  retries 3\n  option redispatch\n  retry-on conn-failure empty-response response-timeout\n",
    );
    let Some(_haproxy) = haproxy(dir.path(), &config, port) else {
        return;
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || load(port, &stop))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(800));
    let status = a.stop(libc::SIGTERM, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(800));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut bodies = Vec::new();
    for client in clients {
        let (served, failures) = client.join().unwrap();
        assert!(failures.is_empty(), "failed requests: {failures:?}");
        bodies.extend(served);
    }
    assert!(status.success(), "node A: {status}");
    let from_a = bodies.iter().filter(|b| *b == "node A").count();
    let from_b = bodies.iter().filter(|b| *b == "node B").count();
    assert!(from_a > 0 && from_b > 0, "A {from_a}, B {from_b}");
    // After A's stop, B served alone: the last answers are all B's.
    assert!(bodies.len() > 100, "{} answers", bodies.len());
}

httptest!(health_check_answers_its_path_before_any_routing, |model| {
    let site = Site::new();
    site.file("hello.txt", "hi");
    let port = free_port();
    // On a listener that redirects everything to HTTPS too: the balancer checks plain HTTP.
    let config = format!(
        "root = \"root\"\nhealth_check = \"/healthz\"\n\
         [[listen]]\naddress = \"127.0.0.1:{port}\"\nredirect_to_https = 443\n"
    );
    let srv = site
        .server(model)
        .config(&config)
        .configured_listen()
        .start();
    for request in [
        "GET /healthz HTTP/1.1\r\nHost: a.test\r\n\r\n",
        "GET /healthz?from=haproxy HTTP/1.0\r\n\r\n",
    ] {
        let r = srv.request(request);
        r.assert_status(200);
        assert_eq!(r.text(), "ok\n");
        r.assert_header("cache-control", "no-store");
    }
    let r = srv.request("HEAD /healthz HTTP/1.1\r\nHost: a.test\r\n\r\n");
    r.assert_status(200);
    let r = srv.request("POST /healthz HTTP/1.1\r\nHost: a.test\r\nContent-Length: 0\r\n\r\n");
    r.assert_status(405);
    // Other paths go on as configured.
    srv.request("GET /healthz/x HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .assert_status(301);
});

#[test]
fn health_check_is_off_by_default_and_must_be_a_path() {
    let site = Site::new();
    site.file("hello.txt", "hi");
    let srv = site.serve("epoll");
    srv.get("/healthz").assert_status(404);
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(site.config("health_check = \"healthz\"\n"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("must be a path"), "{err}");
}
