use super::*;
use crate::fuzzing::{summarize, Outcome, Summary, SummaryParser};
use crate::testing::{expect_error, expect_head, parse_every_split};

fn parse(buf: &[u8]) -> Outcome {
    Parser::new(Limits::default()).parse_summary(buf)
}

fn ok(buf: &[u8]) -> Summary {
    expect_head(parse(buf), buf)
}

fn err(buf: &[u8]) -> RequestError {
    expect_error(parse(buf), buf)
}

fn status(buf: &[u8]) -> u16 {
    err(buf).status
}

/// A GET with the given extra field lines (each ending in CRLF).
fn get_with(fields: &str) -> Vec<u8> {
    format!("GET / HTTP/1.1\r\nHost: h\r\n{fields}\r\n").into_bytes()
}

#[test]
fn simple_get() {
    let s = ok(b"GET /index.html HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n");
    assert_eq!(s.method, "GET");
    assert_eq!(s.target, "/index.html");
    assert_eq!(s.version, Version::Http11);
    assert_eq!(s.head_len, 60);
    assert_eq!(s.framing, BodyFraming::None);
    assert!(s.keep_alive);
    assert!(!s.expect_continue);
    assert_eq!(s.host.as_deref(), Some("example.com"));
    assert_eq!(s.headers.len(), 2);
}

#[test]
fn incomplete_head_needs_more() {
    assert_eq!(parse(b""), Ok(None));
    assert_eq!(parse(b"GET / HTTP/1.1\r\nHost: h\r\n"), Ok(None));
    assert_eq!(parse(b"GET / HTTP/1.1\r\nHost: h\r\n\r"), Ok(None));
}

#[test]
fn bare_lf_line_endings() {
    let s = ok(b"GET / HTTP/1.1\nHost: h\nX: y\n\n");
    assert_eq!(s.head_len, 29);
    assert_eq!(s.headers[1], ("X".to_owned(), b"y".to_vec()));
    let s = ok(b"GET / HTTP/1.1\r\nHost: h\n\r\n");
    assert_eq!(s.head_len, 26);
}

#[test]
fn bare_cr_is_rejected() {
    assert_eq!(status(b"GET / HTTP/1.1\rHost: h\r\n\r\n"), 400);
    assert_eq!(status(b"GET /\r HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
    assert_eq!(status(b"GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n"), 400);
    assert_eq!(status(b"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\r\n\r\n"), 400);
    assert_eq!(status(b"\rGET / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
}

#[test]
fn leading_empty_lines_are_skipped() {
    let s = ok(b"\r\n\nGET / HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(s.head_len, 3 + 27);
    let four = b"\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n";
    assert_eq!(ok(four).head_len, four.len());
    assert_eq!(
        status(b"\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n"),
        400
    );
}

#[test]
fn request_line_shape() {
    assert_eq!(status(b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
    assert_eq!(status(b"GET / HTTP/1.1 \r\nHost: h\r\n\r\n"), 400);
    assert_eq!(status(b"GET /  HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
    assert_eq!(status(b" GET / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
    assert_eq!(status(b"GET\t/ HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
    assert_eq!(status(b"GET /\r\n\r\n"), 400);
    assert_eq!(status(b"GET\r\n\r\n"), 400);
    assert_eq!(status(b"G(ET / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
    assert_eq!(status(b"G\xc3\xa9T / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
    // Any token is a method; deciding what to do with it is the server's job.
    assert_eq!(
        ok(b"M-SEARCH * HTTP/1.1\r\nHost: h\r\n\r\n").method,
        "M-SEARCH"
    );
}

#[test]
fn request_target_bytes() {
    assert_eq!(status(b"GET /a\x7fb HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
    assert_eq!(status(b"GET /a\x80b HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
    assert_eq!(status(b"GET /a\tb HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
    assert_eq!(status(b"GET /a\x00b HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
    let s = ok(b"GET /a%20b?c=d&e=~!$'()*+,;= HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(s.target, "/a%20b?c=d&e=~!$'()*+,;=");
}

#[test]
fn versions() {
    let v = |line: &str| parse(format!("GET / {line}\r\nHost: h\r\n\r\n").as_bytes());
    assert_eq!(v("HTTP/1.0").unwrap().unwrap().version, Version::Http10);
    assert_eq!(v("HTTP/1.1").unwrap().unwrap().version, Version::Http11);
    assert_eq!(v("HTTP/1.2").unwrap().unwrap().version, Version::Http11);
    assert_eq!(v("HTTP/1.9").unwrap().unwrap().version, Version::Http11);
    for unsupported in ["HTTP/0.9", "HTTP/2.0", "HTTP/3.0", "HTTP/9.9"] {
        assert_eq!(v(unsupported).unwrap_err().status, 505, "{unsupported}");
    }
    for malformed in [
        "HTTP/1.10",
        "HTTP/11",
        "HTTP/1",
        "http/1.1",
        "HTTP/1.x",
        "HTTP/a.1",
        "HTTP 1.1",
        "HTTPS/1.1",
        "HTTP/1,1",
        "",
    ] {
        assert_eq!(v(malformed).unwrap_err().status, 400, "{malformed}");
    }
}

#[test]
fn request_line_limit() {
    let limit = DEFAULT_MAX_REQUEST_LINE_FOR_TEST;
    // "GET " + target + " HTTP/1.1" exactly at the limit is fine.
    let target = format!("/{}", "a".repeat(limit - 4 - 9 - 1));
    let at = format!("GET {target} HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(ok(at.as_bytes()).target, target);
    let over = format!("GET {target}a HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(status(over.as_bytes()), 414);
    // Same with a bare LF.
    let over = format!("GET {target}a HTTP/1.1\nHost: h\n\n");
    assert_eq!(status(over.as_bytes()), 414);
    // Fires before any LF arrives, as soon as the limit is passed.
    let endless = vec![b'a'; limit + 2];
    assert_eq!(status(&endless), 414);
    assert_eq!(parse(&endless[..limit + 1]), Ok(None));
    let mut endless = b"GET /".to_vec();
    endless.resize(limit + 2, b'x');
    assert_eq!(status(&endless), 414);
}

const DEFAULT_MAX_REQUEST_LINE_FOR_TEST: usize = crate::limits::DEFAULT_MAX_REQUEST_LINE;

#[test]
fn head_size_limit() {
    let max = crate::limits::DEFAULT_MAX_HEADER_BYTES;
    let base = b"GET / HTTP/1.1\r\nHost: h\r\nX: ".to_vec();
    // Head of exactly max bytes is accepted.
    let mut at = base.clone();
    at.resize(max - 4, b'v');
    at.extend_from_slice(b"\r\n\r\n");
    assert_eq!(ok(&at).head_len, max);
    let mut over = base.clone();
    over.resize(max - 3, b'v');
    over.extend_from_slice(b"\r\n\r\n");
    assert_eq!(status(&over), 431);
    // Incomplete but already too large: fails without waiting for the end.
    let mut partial = base;
    partial.resize(max, b'v');
    assert_eq!(status(&partial), 431);
    assert_eq!(parse(&partial[..max - 1]), Ok(None));
}

#[test]
fn field_count_limit() {
    let fields = |n: usize| (1..n).map(|i| format!("X-{i}: v\r\n")).collect::<String>();
    // Host + 99 others = 100 fields.
    assert_eq!(ok(&get_with(&fields(100))).headers.len(), 100);
    assert_eq!(status(&get_with(&fields(101))), 431);
    // The 101st field fails before the head is complete.
    let mut head = get_with(&fields(101));
    head.truncate(head.len() - 2);
    assert_eq!(status(&head), 431);
}

#[test]
fn small_limits_are_honoured() {
    let limits = Limits {
        max_request_line: 16,
        max_header_bytes: 64,
        max_headers: 2,
    };
    let mut p = Parser::new(limits);
    assert!(p
        .parse(b"GET / HTTP/1.1\r\nHost: h\r\nA: b\r\n\r\n")
        .unwrap()
        .is_some());
    p.reset();
    assert_eq!(p.parse(b"GET /abc HTTP/1.1\r\n").unwrap_err().status, 414);
    p.reset();
    let e = p.parse(b"GET / HTTP/1.1\r\nHost: h\r\nA: b\r\nC: d\r\n\r\n");
    assert_eq!(e.unwrap_err().status, 431);
    // A request-line limit beyond the head limit: the head limit decides.
    let mut p = Parser::new(Limits {
        max_request_line: 100,
        max_header_bytes: 20,
        max_headers: 2,
    });
    assert_eq!(p.parse(&[b'a'; 20]).unwrap_err().status, 431);
}

#[test]
fn obs_fold_is_rejected() {
    assert_eq!(status(&get_with("X: a\r\n  folded\r\n")), 400);
    assert_eq!(status(&get_with("X: a\r\n\tfolded\r\n")), 400);
    assert_eq!(status(b"GET / HTTP/1.1\r\n Host: h\r\n\r\n"), 400);
}

#[test]
fn whitespace_before_colon_is_rejected() {
    let e = err(&get_with("X : a\r\n"));
    assert_eq!((e.status, e.reason), (400, "whitespace before colon"));
    assert_eq!(status(&get_with("X\t: a\r\n")), 400);
    assert_eq!(status(b"GET / HTTP/1.1\r\nHost : h\r\n\r\n"), 400);
}

#[test]
fn empty_field_name_is_rejected() {
    let e = err(&get_with(": a\r\n"));
    assert_eq!((e.status, e.reason), (400, "empty field name"));
}

#[test]
fn field_line_without_colon_is_rejected() {
    let e = err(&get_with("NoColonHere\r\n"));
    assert_eq!((e.status, e.reason), (400, "field line without colon"));
    assert_eq!(status(&get_with("No colon here\r\n")), 400);
}

#[test]
fn invalid_field_name_is_rejected() {
    assert_eq!(status(&get_with("X(y): a\r\n")), 400);
    assert_eq!(status(&get_with("X\x01: a\r\n")), 400);
    assert_eq!(status(&get_with("\"X\": a\r\n")), 400);
}

#[test]
fn control_characters_in_values_are_rejected() {
    for ctl in ["\x00", "\x01", "\x1b", "\x7f", "\x0b", "\x0c"] {
        let e = err(&get_with(&format!("X: a{ctl}b\r\n")));
        assert_eq!(e.status, 400, "{ctl:?}");
    }
    // HTAB and obs-text are allowed.
    let s = ok(&get_with("X: a\tb\r\nY: caf\u{e9}\r\n"));
    assert_eq!(s.headers[1].1, b"a\tb");
    assert_eq!(s.headers[2].1, "caf\u{e9}".as_bytes());
}

#[test]
fn values_are_ows_trimmed() {
    let s = ok(&get_with(
        "A: \t value with  spaces \t \r\nB:\r\nC:   \r\nD:x\r\n",
    ));
    let h: Vec<(&str, &[u8])> = s
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), &v[..]))
        .collect();
    assert_eq!(
        h,
        vec![
            ("Host", &b"h"[..]),
            ("A", b"value with  spaces"),
            ("B", b""),
            ("C", b""),
            ("D", b"x"),
        ]
    );
}

#[test]
fn header_lookup() {
    let buf = b"GET / HTTP/1.1\r\nHost: h\r\nAccept: a\r\nX-Tag: 1\r\naccept: b\r\n\r\n";
    let mut p = Parser::new(Limits::default());
    let r = p.parse(buf).unwrap().unwrap();
    assert_eq!(r.header("ACCEPT"), Some(&b"a"[..]));
    assert_eq!(r.header("x-tag"), Some(&b"1"[..]));
    assert_eq!(r.header("missing"), None);
    let all: Vec<&[u8]> = r.header_values("Accept").collect();
    assert_eq!(all, vec![&b"a"[..], b"b"]);
    let names: Vec<&str> = r.headers().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["Host", "Accept", "X-Tag", "accept"]);
    assert_eq!(r.header_count(), 4);
}

#[test]
fn host_rules() {
    assert_eq!(status(b"GET / HTTP/1.1\r\n\r\n"), 400);
    assert_eq!(
        err(b"GET / HTTP/1.1\r\nX: y\r\n\r\n").reason,
        "missing Host"
    );
    assert_eq!(ok(b"GET / HTTP/1.0\r\n\r\n").host, None);
    assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n"), 400);
    assert_eq!(status(b"GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n"), 400);
    for good in [
        "example.com",
        "example.com:8080",
        "example.com:",
        "127.0.0.1:80",
        "[::1]",
        "[::1]:443",
        "xn--nxasmq6b.example",
        "a%2Db",
        "",
    ] {
        let s = ok(format!("GET / HTTP/1.1\r\nHost: {good}\r\n\r\n").as_bytes());
        assert_eq!(s.host.as_deref(), Some(good));
    }
    for bad in [
        "a b",
        "a/b",
        "user@host",
        "h?x",
        "h#x",
        "h:port",
        "h:99999",
        "h:123456",
        "h:-1",
        "h:80:80",
        "[::1",
        "[]",
        "[::1]x",
        "a%zz",
        "a%2",
        "h\\x",
    ] {
        let e = err(format!("GET / HTTP/1.1\r\nHost: {bad}\r\n\r\n").as_bytes());
        assert_eq!(e.status, 400, "{bad}");
    }
}

#[test]
fn content_length_rules() {
    let framing = |f: &str| ok(&get_with(f)).framing;
    assert_eq!(framing("Content-Length: 5\r\n"), BodyFraming::Length(5));
    assert_eq!(framing("Content-Length: 0\r\n"), BodyFraming::Length(0));
    assert_eq!(framing("content-length:  007 \r\n"), BodyFraming::Length(7));
    assert_eq!(framing("Content-Length: 5, 5\r\n"), BodyFraming::Length(5));
    assert_eq!(
        framing("Content-Length: 5\r\nContent-Length: 5\r\n"),
        BodyFraming::Length(5)
    );
    assert_eq!(
        framing("Content-Length: 18446744073709551615\r\n"),
        BodyFraming::Length(u64::MAX)
    );
    for bad in [
        "Content-Length: +5\r\n",
        "Content-Length: -5\r\n",
        "Content-Length: 5 5\r\n",
        "Content-Length: 0x5\r\n",
        "Content-Length: \r\n",
        "Content-Length: 5,\r\n",
        "Content-Length: 18446744073709551616\r\n",
        "Content-Length: 99999999999999999999999\r\n",
        "Content-Length: 5, 6\r\n",
        "Content-Length: 5\r\nContent-Length: 6\r\n",
        "Content-Length: 1e3\r\n",
    ] {
        assert_eq!(status(&get_with(bad)), 400, "{bad}");
    }
}

#[test]
fn transfer_encoding_rules() {
    let framing = |f: &str| ok(&get_with(f)).framing;
    assert_eq!(
        framing("Transfer-Encoding: chunked\r\n"),
        BodyFraming::Chunked
    );
    assert_eq!(
        framing("Transfer-Encoding: CHUNKED\r\n"),
        BodyFraming::Chunked
    );
    assert_eq!(
        framing("Transfer-Encoding: gzip, chunked\r\n"),
        BodyFraming::Chunked
    );
    assert_eq!(
        framing("Transfer-Encoding: x-gzip,deflate, compress ,x-compress, chunked\r\n"),
        BodyFraming::Chunked
    );
    assert_eq!(
        framing("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n"),
        BodyFraming::Chunked
    );
    assert_eq!(
        framing("Transfer-Encoding: gzip;q=1, chunked\r\n"),
        BodyFraming::Chunked
    );
    assert_eq!(
        framing("Transfer-Encoding: , chunked ,\r\n"),
        BodyFraming::Chunked
    );

    for bad in [
        "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
        "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked, gzip\r\n",
        "Transfer-Encoding: chunked, chunked\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n",
        "Transfer-Encoding: gzip\r\n",
        "Transfer-Encoding: \r\n",
        "Transfer-Encoding: chunk\"ed\"\r\n",
    ] {
        assert_eq!(status(&get_with(bad)), 400, "{bad}");
    }
    for unknown in [
        "Transfer-Encoding: br, chunked\r\n",
        "Transfer-Encoding: identity, chunked\r\n",
        "Transfer-Encoding: foo\r\n",
    ] {
        assert_eq!(status(&get_with(unknown)), 501, "{unknown}");
    }
    let e = err(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_eq!((e.status, e.reason), (400, "Transfer-Encoding in HTTP/1.0"));
}

#[test]
fn connection_and_keep_alive() {
    let ka = |buf: &[u8]| ok(buf).keep_alive;
    assert!(ka(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"));
    assert!(!ka(
        b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
    ));
    assert!(!ka(
        b"GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade, CLOSE\r\n\r\n"
    ));
    assert!(!ka(
        b"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n"
    ));
    assert!(ka(
        b"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n\r\n"
    ));
    assert!(!ka(b"GET / HTTP/1.0\r\n\r\n"));
    assert!(ka(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
    assert!(ka(b"GET / HTTP/1.0\r\nConnection: foo, keep-alive\r\n\r\n"));
    assert!(!ka(
        b"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n"
    ));
    assert!(!ka(
        b"GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n"
    ));
    assert!(!ka(b"GET / HTTP/1.0\r\nConnection: keep-alives\r\n\r\n"));
}

#[test]
fn expect_rules() {
    assert!(ok(&get_with("Expect: 100-continue\r\n")).expect_continue);
    assert!(ok(&get_with("Expect: 100-Continue\r\n")).expect_continue);
    assert!(!ok(&get_with("")).expect_continue);
    let e = err(&get_with("Expect: 200-ok\r\n"));
    assert_eq!(e.status, 417);
    assert_eq!(status(&get_with("Expect: 100-continue, foo\r\n")), 417);
    assert_eq!(status(&get_with("Expect: 100-continue; x=1\r\n")), 417);
    // RFC 9110 §10.1.1: ignore 100-continue from HTTP/1.0 clients.
    assert!(!ok(b"GET / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n").expect_continue);
}

#[test]
fn errors_repeat_until_reset() {
    let mut p = Parser::new(Limits::default());
    let bad = b"GET / HTTP/1.1\r\nX : y\r\n\r\n";
    let e = p.parse(bad).unwrap_err();
    assert_eq!(p.parse(bad).unwrap_err(), e);
    assert_eq!(
        p.parse(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n").unwrap_err(),
        e
    );
    p.reset();
    assert!(p
        .parse(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        .unwrap()
        .is_some());
}

#[test]
fn complete_head_is_stable_across_calls() {
    let mut p = Parser::new(Limits::default());
    let buf = b"GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b";
    let first = summarize(p.parse(buf));
    // Calling again (even with more bytes after the head) gives the same head.
    assert_eq!(summarize(p.parse(buf)), first);
    let mut longer = buf.to_vec();
    longer.extend_from_slice(b" HTTP/1.1\r\n");
    assert_eq!(summarize(p.parse(&longer)), first);
}

#[test]
fn shorter_buffer_starts_over() {
    let mut p = Parser::new(Limits::default());
    assert_eq!(
        summarize(p.parse(b"GET /long/path HTTP/1.1\r\nHo")),
        Ok(None)
    );
    // Contract broken by the caller: a shorter buffer is parsed from scratch.
    let s = summarize(p.parse(b"GET / HTTP/1.0\r\n\r\n"))
        .unwrap()
        .unwrap();
    assert_eq!(s.target, "/");
}

#[test]
fn pipelined_requests() {
    let buf = b"GET /a HTTP/1.1\r\nHost: h\r\n\r\nPOST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcGET /c HTTP/1.0\r\n\r\n";
    let mut p = Parser::new(Limits::default());
    let mut pos = 0;
    let mut seen = Vec::new();
    while pos < buf.len() {
        let r = p.parse(&buf[pos..]).unwrap().unwrap();
        let body = match r.framing {
            BodyFraming::Length(n) => n as usize,
            _ => 0,
        };
        seen.push((r.method.to_owned(), r.target.to_owned()));
        pos += r.head_len + body;
        p.reset();
    }
    assert_eq!(pos, buf.len());
    let want = [("GET", "/a"), ("POST", "/b"), ("GET", "/c")];
    assert_eq!(
        seen,
        want.map(|(m, t)| (m.to_owned(), t.to_owned())).to_vec()
    );
}

#[test]
fn trickled_bytes_are_scanned_once() {
    let mut head = b"GET / HTTP/1.1\r\nHost: h\r\n".to_vec();
    head.extend_from_slice(format!("Cookie: {}\r\n", "c".repeat(15000)).as_bytes());
    head.extend_from_slice(b"\r\n");
    let mut p = Parser::new(Limits::default());
    for n in 0..head.len() {
        assert!(p.parse(&head[..n]).unwrap().is_none());
    }
    assert!(p.parse(&head).unwrap().is_some());
    assert!(
        p.head.scanned <= head.len(),
        "scanned {} bytes for a {}-byte head",
        p.head.scanned,
        head.len()
    );
}

#[test]
fn request_error_display() {
    let e = RequestError::new(431, "too many header fields");
    assert_eq!(e.to_string(), "431 too many header fields");
    let boxed: Box<dyn std::error::Error> = Box::new(e);
    assert!(boxed.to_string().contains("431"));
}

/// Valid and invalid messages used by the split-invariance test.
const MESSAGES: &[&[u8]] = &[
    b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"\r\n\nGET /x?y=1 HTTP/1.0\nUser-Agent: t\nAccept: */*\n\n",
    b"HEAD /a/b HTTP/1.1\r\nHost: example.com:8080\r\nAccept-Encoding: gzip, br\r\nIf-None-Match: \"x\"\r\nRange: bytes=0-1\r\n\r\n",
    b"POST /upload HTTP/1.1\r\nHost: h:8080\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    b"PUT /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\nExpect: 100-continue\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\n",
    b"GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\nX-Empty:\r\nX-Ws: \t v \t\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
    // Invalid ones: the error must appear once decidable and never change.
    b"GET / HTTP/1.1\r\nHost: a\r\nBad : x\r\n\r\n",
    b"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
    b"GET / HTTP/1.1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nExpect: nope\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
    b"GET /\x01 HTTP/1.1\r\n\r\n",
];

#[test]
fn every_prefix_agrees_with_the_whole() {
    for msg in MESSAGES {
        let whole = parse_every_split(msg, || Parser::new(Limits::default()));
        assert!(!matches!(whole, Ok(None)), "{msg:?} should be complete");
    }
}

#[test]
fn pipelined_second_request_parses_after_reset() {
    let msg = MESSAGES[5];
    let mut p = Parser::new(Limits::default());
    let first = p.parse(msg).unwrap().unwrap().head_len;
    p.reset();
    let rest = &msg[first..];
    for k in 0..rest.len() {
        assert!(p.parse(&rest[..k]).unwrap().is_none());
    }
    assert_eq!(p.parse(rest).unwrap().unwrap().target, "/b");
}

#[test]
fn a_tls_client_hello_is_rejected_before_any_line_end() {
    let mut parser = Parser::new(Limits::default());
    let hello = [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00];
    let err = parser.parse(&hello).unwrap_err();
    assert_eq!(err.status, 400);
    // A method still arriving, or a CR that may start the line's CRLF, is not judged yet.
    let mut parser = Parser::new(Limits::default());
    assert!(parser.parse(b"GE").unwrap().is_none());
    let mut parser = Parser::new(Limits::default());
    assert!(parser.parse(b"GET\r").unwrap().is_none());
}

#[test]
fn the_noted_fields_are_the_first_values_header_gives() {
    let mut parser = Parser::new(Limits::default());
    let buf = b"GET / HTTP/1.1\r\nHost: h\r\nreferer: https://r/\r\nUser-Agent:  ua 1 \r\n\
        Accept-Encoding: br, gzip\r\naccept-encoding: zstd\r\nAuthorization: Basic x\r\n\
        If-Match: \"a\"\r\nIf-None-Match: \"b\"\r\nIf-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n\
        If-Unmodified-Since: Sun, 02 Jan 2000 00:00:00 GMT\r\nIf-Range: \"c\"\r\nRange: bytes=0-1\r\n\r\n";
    let req = parser.parse(buf).unwrap().unwrap();
    for (field, name) in crate::Noted::ALL.into_iter().zip([
        "referer",
        "user-agent",
        "accept-encoding",
        "authorization",
        "if-match",
        "if-none-match",
        "if-modified-since",
        "if-unmodified-since",
        "if-range",
        "range",
    ]) {
        let value = req.noted(field);
        assert!(value.is_some(), "{name}");
        assert_eq!(value, req.header(name), "{name}");
    }
    assert_eq!(
        req.noted(crate::Noted::AcceptEncoding),
        Some(&b"br, gzip"[..])
    );
    assert_eq!(req.noted(crate::Noted::UserAgent), Some(&b"ua 1"[..]));
    assert_eq!(req.kind, crate::Method::Get);
    let mut parser = Parser::new(Limits::default());
    let req = parser
        .parse(b"PROPFIND /x HTTP/1.1\r\nHost: h\r\n\r\n")
        .unwrap()
        .unwrap();
    for field in crate::Noted::ALL {
        assert_eq!(req.noted(field), None, "{field:?}");
    }
    assert_eq!(req.kind, crate::Method::Other);
}
