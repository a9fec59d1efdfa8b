//! PROXY protocol on a listener: the client a load balancer names is the one the server
//! logs and tells its backends about; anything else on such a listener is closed.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::handover::{echo, Backend};
use crate::util::*;

/// A site whose listener expects a PROXY header from 127.0.0.1, with `/app/` proxied to
/// an echoing backend.
fn start(model: Model, backend: &Backend, extra: &str) -> (Site, Server) {
    let site = Site::new();
    site.file("hello.txt", "hello");
    let port = free_port();
    let config = format!(
        "root = \"root\"\n{extra}\n\
         [[listen]]\naddress = \"127.0.0.1:{port}\"\nproxy_protocol = true\nproxy_from = [\"127.0.0.1/32\"]\n\n\
         [[backend]]\nname = \"app\"\naddresses = \"{}\"\n\n\
         [[route]]\nprefix = \"/app/\"\nbackend = \"app\"\n",
        backend.addr
    );
    let srv = site
        .server(model)
        .config(&config)
        .configured_listen()
        .start();
    (site, srv)
}

fn exchange(srv: &Server, bytes: &[u8]) -> String {
    let mut conn = TcpStream::connect(srv.addr()).unwrap();
    conn.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    conn.write_all(bytes).unwrap();
    let mut answer = Vec::new();
    let _ = conn.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

httptest!(
    proxy_protocol_names_the_client_in_logs_and_to_backends,
    |model| {
        let backend = Backend::start(echo);
        let (_site, srv) = start(model, &backend, "");
        let answer = exchange(
            &srv,
            b"PROXY TCP4 192.0.2.7 127.0.0.1 51234 80\r\n\
          GET /app/x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        );
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        let lower = answer.to_ascii_lowercase();
        assert!(lower.contains("x-forwarded-for: 192.0.2.7"), "{answer}");
        assert!(lower.contains("for=192.0.2.7"), "{answer}");

        // Version 2, IPv6, a static file.
        let mut v2 = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        v2.extend_from_slice(&[0x21, 0x21, 0, 36]);
        v2.extend_from_slice(
            &"2001:db8::7"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
        );
        v2.extend_from_slice(
            &"2001:db8::1"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
        );
        v2.extend_from_slice(&[0xc8, 0x22, 0, 80]);
        v2.extend_from_slice(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        let answer = exchange(&srv, &v2);
        assert!(answer.ends_with("hello"), "{answer}");
        let log = srv.wait_stdout_line(Duration::from_secs(5), |l| l.starts_with("2001:db8::7 "));
        assert!(log.is_some(), "access log:\n{}", srv.stdout());
        let log = srv.wait_stdout_line(Duration::from_secs(5), |l| l.starts_with("192.0.2.7 "));
        assert!(log.is_some(), "access log:\n{}", srv.stdout());
    }
);

httptest!(proxy_protocol_refuses_what_is_no_header, |model| {
    let backend = Backend::start(echo);
    let (_site, srv) = start(model, &backend, "[timeouts]\nheader = \"1s\"\n");
    // A request without the header: closed, unanswered.
    let answer = exchange(&srv, b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(answer, "");
    // A malformed header.
    let answer = exchange(
        &srv,
        b"PROXY TCP4 192.0.2.300 127.0.0.1 1 2\r\nGET / HTTP/1.1\r\n\r\n",
    );
    assert_eq!(answer, "");
    // A header cut short: closed at the header timeout.
    let started = std::time::Instant::now();
    let answer = exchange(&srv, b"PROXY TCP4 192.0.2.7 ");
    assert_eq!(answer, "");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(800) && waited < Duration::from_secs(4),
        "{waited:?}"
    );
    // The server still serves a good one.
    let answer = exchange(
        &srv,
        b"PROXY TCP4 192.0.2.8 127.0.0.1 1 80\r\nGET /hello.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert!(answer.ends_with("hello"), "{answer}");
});
