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
    let site = Site::new();
    site.file("node.txt", name);
    let port = free_port();
    let tls_keys = match tls {
        Some((chain, key)) => format!("tls_certificate = {chain:?}\ntls_key = {key:?}\n"),
        None => String::new(),
    };
    let config = format!(
        "root = \"root\"\n{tls_keys}\
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
    let config = format!(
        "defaults\n  mode {mode}\n  timeout connect 2s\n  timeout client 10s\n  timeout server 10s\n\
         frontend https\n  bind 127.0.0.1:{port}{bind_options}\n  default_backend nodes\n\
         backend nodes\n  balance roundrobin\n\
         \x20 server a {} send-proxy-v2\n  server b {} send-proxy-v2\n",
        a.addr(),
        b.addr()
    );
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
