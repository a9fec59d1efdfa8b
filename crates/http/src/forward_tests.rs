use super::*;
use crate::{Limits, Parser};
use std::net::{Ipv4Addr, Ipv6Addr};

const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));

fn opts(forwarded: bool) -> ForwardOptions<'static> {
    ForwardOptions {
        client: CLIENT,
        proto: "http",
        forwarded,
        host: None,
        body: BodyForwarding::Streamed,
    }
}

/// The head forwarded for the request `req`.
fn forward(req: &[u8], opts: &ForwardOptions<'_>) -> String {
    let mut parser = Parser::new(Limits::default());
    let r = parser.parse(req).unwrap().expect("complete request");
    let mut out = Vec::new();
    write_forwarded_request(&r, opts, &mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn hop_by_hop_fields() {
    let none: [&[u8]; 0] = [];
    for name in [
        "Connection",
        "keep-alive",
        "Proxy-Connection",
        "TE",
        "Transfer-Encoding",
        "UPGRADE",
    ] {
        assert!(is_hop_by_hop(name, none), "{name}");
    }
    for name in [
        "Trailer",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "Content-Length",
        "Host",
        "Cookie",
        "Tea",
    ] {
        assert!(!is_hop_by_hop(name, none), "{name}");
    }
    let conn: [&[u8]; 2] = [b"close, X-Secret", b"\"quoted, y\" , x-other"];
    assert!(is_hop_by_hop("x-secret", conn));
    assert!(is_hop_by_hop("X-Other", conn));
    assert!(is_hop_by_hop("close", conn));
    assert!(!is_hop_by_hop("X-Secre", conn));
    assert!(!is_hop_by_hop("y", conn));
}

#[test]
fn forwarded_request_basics() {
    let out = forward(
        b"GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nCookie: c=1\r\n\r\n",
        &opts(false),
    );
    assert_eq!(
        out,
        "GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nCookie: c=1\r\nConnection: keep-alive\r\nVia: 1.1 fastpath\r\n\r\n"
    );
}

#[test]
fn forwarded_request_drops_hop_by_hop_fields() {
    let out = forward(
        b"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Secret\r\nKeep-Alive: timeout=5\r\n\
          X-Secret: s\r\nTE: trailers\r\nUpgrade: websocket\r\nProxy-Connection: keep-alive\r\n\
          Proxy-Authorization: Basic x\r\nX-Kept: k\r\nConnection: x-other\r\nX-Other: o\r\n\r\n",
        &opts(false),
    );
    assert_eq!(
        out,
        "GET / HTTP/1.1\r\nHost: h\r\nProxy-Authorization: Basic x\r\nX-Kept: k\r\nConnection: keep-alive\r\nVia: 1.1 fastpath\r\n\r\n"
    );
}

#[test]
fn forwarded_request_body_framing() {
    let out = forward(
        b"POST /p HTTP/1.1\r\nContent-Length: 5, 5\r\nHost: h\r\nContent-Type: text/plain\r\n\r\n",
        &opts(false),
    );
    assert_eq!(
        out,
        "POST /p HTTP/1.1\r\nHost: h\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nConnection: keep-alive\r\nVia: 1.1 fastpath\r\n\r\n"
    );
    let out = forward(
        b"PUT /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\nTrailer: X-Sum\r\nTransfer-Encoding: , chunked\r\n\r\n",
        &opts(false),
    );
    assert_eq!(
        out,
        "PUT /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\nConnection: keep-alive\r\nVia: 1.1 fastpath\r\n\r\n"
    );
    // HTTP/1.0 client, no Host, no body: Host is required in HTTP/1.1.
    let out = forward(
        b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        &opts(false),
    );
    assert_eq!(
        out,
        "GET / HTTP/1.1\r\nHost: \r\nConnection: keep-alive\r\nVia: 1.0 fastpath\r\n\r\n"
    );
}

#[test]
fn chunked_bodies_are_framed_anew() {
    // Chunked's parameters go; the other codings stay, in order, chunked last.
    let req = b"POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip ,chunked;q=1\r\nTrailer: X-Sum\r\nExpect: 100-continue\r\n\r\n";
    let out = forward(req, &opts(false));
    assert_eq!(
        out,
        "POST /p HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nTransfer-Encoding: gzip, chunked\r\nConnection: keep-alive\r\nVia: 1.1 fastpath\r\n\r\n"
    );
    // Buffered: the proxy answered Expect itself.
    let buffered = ForwardOptions {
        body: BodyForwarding::Buffered,
        ..opts(false)
    };
    let out = forward(req, &buffered);
    assert_eq!(
        out,
        "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\nConnection: keep-alive\r\nVia: 1.1 fastpath\r\n\r\n"
    );
    // Open: no framing and no blank line, for the caller's Content-Length.
    let open = ForwardOptions {
        body: BodyForwarding::Open,
        ..opts(false)
    };
    let req = b"POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n";
    let out = forward(req, &open);
    assert_eq!(
        out,
        "POST /p HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nVia: 1.1 fastpath\r\n"
    );
    // A body framed by length keeps it either way.
    let req = b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\n";
    assert!(forward(req, &open)
        .ends_with("Content-Length: 3\r\nConnection: keep-alive\r\nVia: 1.1 fastpath\r\n\r\n"));
}

#[test]
fn only_chunked_tells_whether_a_body_can_go_by_length() {
    let mut parser = Parser::new(Limits::default());
    for (te, only) in [
        ("chunked", true),
        ("Chunked ; a=b", true),
        ("gzip, chunked", false),
        ("deflate , chunked", false),
    ] {
        parser.reset();
        let req = format!("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: {te}\r\n\r\n");
        let r = parser.parse(req.as_bytes()).unwrap().unwrap();
        assert_eq!(only_chunked(&r), only, "{te}");
    }
}

#[test]
fn expect_is_forwarded_only_for_http11_clients() {
    let out = forward(
        b"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
        &opts(false),
    );
    assert!(out.contains("\r\nExpect: 100-continue\r\n"), "{out}");
    let out = forward(
        b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
        &opts(false),
    );
    assert!(!out.contains("Expect"), "{out}");
}

#[test]
fn absolute_form_is_converted() {
    let out = forward(
        b"GET http://Example.com:8080/a/b?q=1 HTTP/1.1\r\nHost: other\r\nAccept: */*\r\n\r\n",
        &opts(false),
    );
    assert_eq!(
        out,
        "GET /a/b?q=1 HTTP/1.1\r\nHost: Example.com:8080\r\nAccept: */*\r\nConnection: keep-alive\r\nVia: 1.1 fastpath\r\n\r\n"
    );
    let out = forward(b"GET https://h?x HTTP/1.1\r\nHost: h\r\n\r\n", &opts(false));
    assert!(out.starts_with("GET /?x HTTP/1.1\r\nHost: h\r\n"), "{out}");
    // Other forms are passed on as they are.
    let out = forward(b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", &opts(false));
    assert!(out.starts_with("OPTIONS * HTTP/1.1\r\n"), "{out}");
}

#[test]
fn forwarding_fields_are_added() {
    let out = forward(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", &opts(true));
    assert_eq!(
        out,
        "GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nVia: 1.1 fastpath\r\nX-Forwarded-For: 192.0.2.7\r\n\
         X-Forwarded-Proto: http\r\nForwarded: for=192.0.2.7;proto=http\r\n\r\n"
    );
}

#[test]
fn forwarding_fields_append_to_existing_ones() {
    let out = forward(
        b"GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 203.0.113.1, 10.0.0.1\r\nA: 1\r\n\
          X-Forwarded-For: 10.0.0.2\r\nForwarded: for=203.0.113.1\r\nX-Forwarded-Proto: https\r\n\
          X-Forwarded-Host: evil.example\r\n\r\n",
        &opts(true),
    );
    assert_eq!(
        out,
        "GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nConnection: keep-alive\r\nVia: 1.1 fastpath\r\n\
         X-Forwarded-For: 203.0.113.1, 10.0.0.1, 10.0.0.2, 192.0.2.7\r\nX-Forwarded-Proto: http\r\n\
         Forwarded: for=203.0.113.1, for=192.0.2.7;proto=http\r\n\r\n"
    );
    // Without `forwarded` the client's fields are ordinary end-to-end ones.
    let req = b"GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.2.3.4\r\nX-Forwarded-Proto: https\r\n\r\n";
    assert_eq!(
        forward(req, &opts(false)),
        "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.2.3.4\r\nX-Forwarded-Proto: https\r\nConnection: keep-alive\r\nVia: 1.1 fastpath\r\n\r\n"
    );
    // A forwarding field the client declared hop-by-hop is not appended to.
    let out = forward(
        b"GET / HTTP/1.1\r\nHost: h\r\nConnection: X-Forwarded-For\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n",
        &opts(true),
    );
    assert!(out.contains("\r\nX-Forwarded-For: 192.0.2.7\r\n"), "{out}");
}

#[test]
fn malformed_forwarded_values_cannot_hide_ours() {
    let out = forward(
        b"GET / HTTP/1.1\r\nHost: h\r\nForwarded: for=\"a\\\", by=x\r\nForwarded: for=\"b,c\"\r\n\r\n",
        &opts(true),
    );
    assert!(
        out.contains("\r\nForwarded: for=\"b,c\", for=192.0.2.7;proto=http\r\n"),
        "{out}"
    );
}

#[test]
fn ipv6_clients_are_bracketed_and_quoted() {
    let o = ForwardOptions {
        client: IpAddr::V6(Ipv6Addr::LOCALHOST),
        ..opts(true)
    };
    let out = forward(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", &o);
    assert!(out.contains("\r\nX-Forwarded-For: ::1\r\n"), "{out}");
    assert!(
        out.contains("\r\nForwarded: for=\"[::1]\";proto=http\r\n"),
        "{out}"
    );
    // A dual-stack socket's IPv4-mapped address is the IPv4 client.
    let o = ForwardOptions {
        client: IpAddr::V6(Ipv4Addr::new(198, 51, 100, 1).to_ipv6_mapped()),
        ..opts(true)
    };
    let out = forward(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", &o);
    assert!(
        out.contains("\r\nX-Forwarded-For: 198.51.100.1\r\n"),
        "{out}"
    );
    assert!(
        out.contains("\r\nForwarded: for=198.51.100.1;proto=http\r\n"),
        "{out}"
    );
}

#[test]
fn host_override() {
    let o = ForwardOptions {
        host: Some("backend:8080"),
        ..opts(true)
    };
    let out = forward(b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", &o);
    assert_eq!(
        out,
        "GET / HTTP/1.1\r\nHost: backend:8080\r\nConnection: keep-alive\r\nVia: 1.1 fastpath\r\nX-Forwarded-For: 192.0.2.7\r\n\
         X-Forwarded-Proto: http\r\nX-Forwarded-Host: example.com\r\n\
         Forwarded: for=192.0.2.7;proto=http;host=example.com\r\n\r\n"
    );
    // Quoted when the host is not a token.
    let out = forward(b"GET / HTTP/1.1\r\nHost: example.com:81\r\n\r\n", &o);
    assert!(out.contains(";host=\"example.com:81\"\r\n"), "{out}");
    // The same host, or none from the client: nothing to report.
    let out = forward(b"GET / HTTP/1.1\r\nHost: BACKEND:8080\r\n\r\n", &o);
    assert!(
        !out.contains("X-Forwarded-Host") && !out.contains(";host="),
        "{out}"
    );
    let out = forward(b"GET / HTTP/1.0\r\n\r\n", &o);
    assert!(
        out.starts_with("GET / HTTP/1.1\r\nHost: backend:8080\r\n"),
        "{out}"
    );
    assert!(!out.contains("X-Forwarded-Host"), "{out}");
}

#[test]
fn caller_text_cannot_inject_lines() {
    let o = ForwardOptions {
        proto: "ht\r\ntp",
        host: Some("h\r\nX-Evil: 1"),
        ..opts(true)
    };
    let out = forward(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", &o);
    assert!(!out.contains("\r\nX-Evil"), "{out}");
    assert!(out.contains(";proto=\"ht  tp\""), "{out}");
    assert_eq!(out.matches("\r\n").count(), 9, "{out}");
}

#[test]
fn hop_by_hop_options_past_the_inline_ones_still_count() {
    let values: Vec<u8> = (0..20)
        .map(|i| format!("X-Opt-{i}"))
        .collect::<Vec<_>>()
        .join(", ")
        .into_bytes();
    let set = HopByHop::new([values.as_slice(), b"close, X-Last".as_slice()]);
    for i in 0..20 {
        assert!(set.contains(&format!("x-opt-{i}")), "{i}");
    }
    assert!(set.contains("X-LAST"));
    assert!(set.contains("Keep-Alive") && set.contains("te") && set.contains("UPGRADE"));
    assert!(!set.contains("X-Opt-20") && !set.contains("Accept") && !set.contains("t"));
}

#[test]
fn client_addresses_are_written_in_full() {
    for (ip, text) in [
        ("0.0.0.0", "0.0.0.0"),
        ("9.10.99.100", "9.10.99.100"),
        ("255.255.255.255", "255.255.255.255"),
        ("192.0.2.7", "192.0.2.7"),
    ] {
        let o = ForwardOptions {
            client: ip.parse().unwrap(),
            ..opts(true)
        };
        let out = forward(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", &o);
        assert!(
            out.contains(&format!("X-Forwarded-For: {text}\r\n")),
            "{out}"
        );
        assert!(out.contains(&format!("Forwarded: for={text};")), "{out}");
    }
}
