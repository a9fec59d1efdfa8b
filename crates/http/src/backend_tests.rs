use super::*;
use crate::fuzzing::{ResponseOutcome, ResponseSummary, ResponseTo};
use crate::testing::{expect_error, expect_head, parse_every_split};

/// Every parse in these tests also checks that each split point of `buf`
/// gives the same answer.
fn parse_as(buf: &[u8], head: bool) -> ResponseOutcome {
    parse_every_split(buf, || ResponseTo::new(Limits::default(), head))
}

fn parse(buf: &[u8]) -> ResponseOutcome {
    parse_as(buf, false)
}

fn ok_as(buf: &[u8], head: bool) -> ResponseSummary {
    expect_head(parse_as(buf, head), buf)
}

fn ok(buf: &[u8]) -> ResponseSummary {
    ok_as(buf, false)
}

fn err(buf: &[u8]) -> RequestError {
    expect_error(parse(buf), buf)
}

/// A 200 response with the given extra field lines (each ending in CRLF).
fn resp_with(fields: &str) -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\n{fields}\r\n").into_bytes()
}

fn framing(fields: &str) -> (ResponseFraming, bool) {
    let s = ok(&resp_with(fields));
    (s.framing, s.keep_alive)
}

#[test]
fn simple_response() {
    let buf = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5\r\n\r\nhello";
    let s = ok(buf);
    assert_eq!(s.version, Version::Http11);
    assert_eq!(s.status, 200);
    assert_eq!(s.reason, "OK");
    assert_eq!(s.head_len, buf.len() - 5);
    assert_eq!(s.framing, ResponseFraming::Length(5));
    assert!(s.keep_alive);
    assert_eq!(s.headers.len(), 2);
    assert_eq!(
        s.headers[0],
        ("Content-Type".to_owned(), b"text/html".to_vec())
    );
}

#[test]
fn incomplete_head_needs_more() {
    assert_eq!(parse(b""), Ok(None));
    assert_eq!(parse(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n"), Ok(None));
    assert_eq!(parse(b"HTTP/1.1 200 OK\r\n\r"), Ok(None));
    assert_eq!(parse(b"HTT"), Ok(None));
}

#[test]
fn header_lookup() {
    let buf = b"HTTP/1.1 200 OK\r\nVary: a\r\nX-Tag: 1\r\nvary: b\r\n\r\n";
    let mut p = ResponseParser::new(Limits::default());
    let h = p.parse(buf, false).unwrap().unwrap();
    assert_eq!(h.header("VARY"), Some(&b"a"[..]));
    assert_eq!(h.header("missing"), None);
    assert_eq!(h.header_values("Vary").collect::<Vec<_>>(), [b"a", b"b"]);
    let names: Vec<&str> = h.headers().map(|(n, _)| n).collect();
    assert_eq!(names, ["Vary", "X-Tag", "vary"]);
    assert_eq!(h.header_count(), 3);
}

#[test]
fn status_lines() {
    let s = ok(b"HTTP/1.0 404 Not Found\r\n\r\n");
    assert_eq!(
        (s.version, s.status, s.reason.as_str()),
        (Version::Http10, 404, "Not Found")
    );
    assert_eq!(ok(b"HTTP/1.1 299 \r\n\r\n").reason, "");
    // No SP and no reason at all: tolerated, the reason means nothing.
    assert_eq!(ok(b"HTTP/1.1 200\r\n\r\n").reason, "");
    assert_eq!(ok(b"HTTP/1.1 200 A \t B\r\n\r\n").reason, "A \t B");
    assert_eq!(ok(b"HTTP/1.9 200 OK\r\n\r\n").version, Version::Http11);
    // obs-text in the reason is accepted but not passed on.
    assert_eq!(ok(b"HTTP/1.1 200 caf\xc3\xa9\r\n\r\n").reason, "");
    assert_eq!(ok(b"HTTP/1.1 100 Continue\r\n\r\n").status, 100);
    assert_eq!(ok(b"HTTP/1.1 599 x\r\n\r\n").status, 599);
    assert_eq!(ok(b"HTTP/1.1 200 OK\nX: y\n\n").head_len, 22);

    for bad in [
        &b"HTTP/1.1 99 OK\r\n\r\n"[..],
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1  200 OK\r\n\r\n",
        b"HTTP/1.1 20a OK\r\n\r\n",
        b"HTTP/1.1\t200 OK\r\n\r\n",
        b"HTTP/1.1 200\tOK\r\n\r\n",
        b"HTTP/1.1200 OK\r\n\r\n",
        b"HTTP/1 200 OK\r\n\r\n",
        b"HTTP/1.x 200 OK\r\n\r\n",
        b"HTTP/1.10 200 OK\r\n\r\n",
        b"http/1.1 200 OK\r\n\r\n",
        b" HTTP/1.1 200 OK\r\n\r\n",
        b"HTTPS/1.1 200 OK\r\n\r\n",
        b"ICY 200 OK\r\n\r\n",
        b"<html>hello</html>\r\n\r\n",
        b"HTTP/1.1\r\n\r\n",
    ] {
        let e = err(bad);
        assert_eq!(e.status, 502, "{bad:?}");
    }
}

#[test]
fn status_codes_outside_the_valid_range_are_rejected() {
    for code in ["000", "099", "600", "999"] {
        let e = err(format!("HTTP/1.1 {code} X\r\n\r\n").as_bytes());
        assert_eq!((e.status, e.reason), (502, "invalid status code"), "{code}");
    }
}

#[test]
fn other_http_versions_are_rejected() {
    for v in ["HTTP/2.0", "HTTP/0.9", "HTTP/3.0"] {
        let e = err(format!("{v} 200 OK\r\n\r\n").as_bytes());
        assert_eq!(
            (e.status, e.reason),
            (502, "unsupported HTTP version"),
            "{v}"
        );
    }
}

#[test]
fn non_http_answers_fail_before_any_line_end() {
    // HTTP/0.9 bodies, TLS records and the like are refused at once.
    let mut p = ResponseParser::new(Limits::default());
    assert_eq!(p.parse(b"<htm", false).unwrap_err().status, 502);
    let mut p = ResponseParser::new(Limits::default());
    assert_eq!(
        p.parse(&[0x15, 0x03, 0x01], false).unwrap_err(),
        bad("malformed status line")
    );
    // A prefix of "HTTP/", or a CR that may start an empty line, waits.
    let mut p = ResponseParser::new(Limits::default());
    assert!(p.parse(b"HT", false).unwrap().is_none());
    let mut p = ResponseParser::new(Limits::default());
    assert!(p.parse(b"\r", false).unwrap().is_none());
}

#[test]
fn reason_phrase_control_characters_are_rejected() {
    for ctl in ["\x00", "\x01", "\x1b", "\x7f"] {
        let e = err(format!("HTTP/1.1 200 O{ctl}K\r\n\r\n").as_bytes());
        assert_eq!(e.status, 502, "{ctl:?}");
    }
    assert_eq!(
        err(b"HTTP/1.1 200 O\rK\r\n\r\n").reason,
        "bare CR in status line"
    );
}

#[test]
fn leading_empty_lines_are_skipped() {
    let s = ok(b"\r\n\nHTTP/1.1 204 No Content\r\n\r\n");
    assert_eq!(s.head_len, 3 + 27);
    let four = b"\r\n\r\n\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n";
    assert_eq!(ok(four).head_len, four.len());
    assert_eq!(
        err(b"\r\n\r\n\r\n\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n").status,
        502
    );
}

#[test]
fn head_and_bodiless_statuses_have_no_body() {
    let cl = "Content-Length: 10\r\n";
    let te = "Transfer-Encoding: chunked\r\n";
    for fields in [cl, te, ""] {
        let buf = resp_with(fields);
        let s = ok_as(&buf, true);
        assert_eq!(s.framing, ResponseFraming::None, "HEAD {fields}");
        assert!(s.keep_alive, "HEAD {fields}");
        for status in [
            "100 Continue",
            "103 Early Hints",
            "204 No Content",
            "304 Not Modified",
        ] {
            let buf = format!("HTTP/1.1 {status}\r\n{fields}\r\n");
            let s = ok(buf.as_bytes());
            assert_eq!(s.framing, ResponseFraming::None, "{status} {fields}");
            assert!(s.keep_alive, "{status} {fields}");
        }
    }
    // HEAD and 304 keep the stated length for relaying; TE overrides it.
    assert_eq!(ok_as(&resp_with(cl), true).content_length, Some(10));
    assert_eq!(
        ok(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n").content_length,
        Some(7)
    );
    // Framing fields are still checked where no body follows.
    assert_eq!(
        err(b"HTTP/1.1 304 Not Modified\r\nContent-Length: x\r\n\r\n").status,
        502
    );
}

#[test]
fn switching_protocols_is_never_reusable() {
    let s = ok(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    );
    assert_eq!(s.framing, ResponseFraming::None);
    assert!(!s.keep_alive);
}

#[test]
fn content_length_rules() {
    assert_eq!(
        framing("Content-Length: 5\r\n"),
        (ResponseFraming::Length(5), true)
    );
    assert_eq!(
        framing("Content-Length: 0\r\n"),
        (ResponseFraming::Length(0), true)
    );
    assert_eq!(
        framing("content-length:  007 \r\n").0,
        ResponseFraming::Length(7)
    );
    assert_eq!(
        framing("Content-Length: 5, 5\r\n").0,
        ResponseFraming::Length(5)
    );
    assert_eq!(
        framing("Content-Length: 5\r\nContent-Length: 5\r\n").0,
        ResponseFraming::Length(5)
    );
    assert_eq!(
        framing("Content-Length: 18446744073709551615\r\n").0,
        ResponseFraming::Length(u64::MAX)
    );
    for bad in [
        "Content-Length: +5\r\n",
        "Content-Length: -1\r\n",
        "Content-Length: 5 5\r\n",
        "Content-Length: 0x5\r\n",
        "Content-Length: \r\n",
        "Content-Length: 5,\r\n",
        "Content-Length: 18446744073709551616\r\n",
        "Content-Length: 5, 6\r\n",
        "Content-Length: 5\r\nContent-Length: 6\r\n",
    ] {
        let e = err(&resp_with(bad));
        assert_eq!(e.status, 502, "{bad}");
    }
    assert_eq!(
        err(&resp_with("Content-Length: 1\r\nContent-Length: 2\r\n")).reason,
        "conflicting Content-Length"
    );
}

#[test]
fn transfer_encoding_rules() {
    assert_eq!(
        framing("Transfer-Encoding: chunked\r\n"),
        (ResponseFraming::Chunked, true)
    );
    assert_eq!(
        framing("Transfer-Encoding: CHUNKED\r\n").0,
        ResponseFraming::Chunked
    );
    assert_eq!(
        framing("Transfer-Encoding: gzip, chunked\r\n").0,
        ResponseFraming::Chunked
    );
    assert_eq!(
        framing("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n").0,
        ResponseFraming::Chunked
    );
    // Any coding, known or not, may precede chunked in a response.
    assert_eq!(
        framing("Transfer-Encoding: br;q=1, chunked\r\n").0,
        ResponseFraming::Chunked
    );
    // chunked not last: the body runs until close (RFC 9112 §6.3 rule 4).
    for until_close in [
        "Transfer-Encoding: gzip\r\n",
        "Transfer-Encoding: chunked, gzip\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n",
    ] {
        assert_eq!(
            framing(until_close),
            (ResponseFraming::UntilClose, false),
            "{until_close}"
        );
    }
    for bad in [
        "Transfer-Encoding: chunked, chunked\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: \r\n",
        "Transfer-Encoding: , ,\r\n",
        "Transfer-Encoding: chunk\"ed\"\r\n",
    ] {
        assert_eq!(err(&resp_with(bad)).status, 502, "{bad}");
    }
    let e = err(b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_eq!(
        (e.status, e.reason),
        (502, "Transfer-Encoding in HTTP/1.0 response")
    );
}

#[test]
fn transfer_encoding_beats_content_length_but_closes() {
    for fields in [
        "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
        "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
    ] {
        let s = ok(&resp_with(fields));
        assert_eq!(s.framing, ResponseFraming::Chunked);
        assert!(!s.keep_alive);
        assert_eq!(s.content_length, None);
    }
    // Still a smuggling signal when no body follows.
    let s = ok_as(
        &resp_with("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n"),
        true,
    );
    assert_eq!(s.framing, ResponseFraming::None);
    assert!(!s.keep_alive);
}

#[test]
fn no_framing_means_until_close() {
    assert_eq!(framing(""), (ResponseFraming::UntilClose, false));
    assert_eq!(
        framing("Connection: keep-alive\r\n"),
        (ResponseFraming::UntilClose, false)
    );
    let s = ok(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n");
    assert_eq!(
        (s.framing, s.keep_alive),
        (ResponseFraming::UntilClose, false)
    );
}

#[test]
fn connection_and_keep_alive() {
    let ka = |buf: &[u8]| ok(buf).keep_alive;
    assert!(ka(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"));
    assert!(!ka(
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    ));
    assert!(!ka(
        b"HTTP/1.1 200 OK\r\nConnection: x, CLOSE\r\nContent-Length: 0\r\n\r\n"
    ));
    assert!(!ka(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"));
    assert!(ka(
        b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\nConnection: Keep-Alive\r\n\r\n"
    ));
    assert!(!ka(
        b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n"
    ));
    assert!(ka(
        b"HTTP/1.0 304 Not Modified\r\nConnection: keep-alive\r\n\r\n"
    ));
    assert!(!ka(b"HTTP/1.0 304 Not Modified\r\n\r\n"));
}

#[test]
fn field_syntax_errors() {
    for (fields, reason) in [
        (
            "X: a\r\n  folded\r\n",
            "obs-fold or leading whitespace in field line",
        ),
        (
            "X: a\r\n\tfolded\r\n",
            "obs-fold or leading whitespace in field line",
        ),
        ("X : a\r\n", "whitespace before colon"),
        ("X\t: a\r\n", "whitespace before colon"),
        (": a\r\n", "empty field name"),
        ("NoColon\r\n", "field line without colon"),
        ("X(y): a\r\n", "invalid field name"),
        ("X: a\x00b\r\n", "control character in field value"),
        ("X: a\x7fb\r\n", "control character in field value"),
        ("X: a\rb\r\n", "bare CR in field line"),
    ] {
        let e = err(&resp_with(fields));
        assert_eq!((e.status, e.reason), (502, reason), "{fields:?}");
    }
    assert_eq!(err(b"HTTP/1.1 200 OK\r\n X: a\r\n\r\n").status, 502);
    // HTAB and obs-text are fine in values, and OWS is trimmed.
    let s = ok(&resp_with("X: \t a\tb \r\nY: caf\u{e9}\r\nZ:\r\n"));
    assert_eq!(s.headers[0].1, b"a\tb");
    assert_eq!(s.headers[1].1, "caf\u{e9}".as_bytes());
    assert_eq!(s.headers[2].1, b"");
}

#[test]
fn limits_are_enforced() {
    let limits = Limits {
        max_request_line: 20,
        max_header_bytes: 64,
        max_headers: 2,
    };
    let parse = |buf: &[u8]| {
        ResponseParser::new(limits)
            .parse(buf, false)
            .map(|o| o.is_some())
    };
    assert_eq!(
        parse(b"HTTP/1.1 200 OKOKOKO\r\nA: b\r\nC: d\r\n\r\n"),
        Ok(true)
    );
    let e = parse(b"HTTP/1.1 200 OKOKOKOK\r\n\r\n").unwrap_err();
    assert_eq!((e.status, e.reason), (502, "status line too long"));
    // Fires as soon as the line is too long, before its end arrives.
    let e = parse(b"HTTP/1.1 200 OKOKOKOKOKOK").unwrap_err();
    assert_eq!(e.reason, "status line too long");
    assert_eq!(parse(b"HTTP/1.1 200 OKOKOKOK"), Ok(false));
    let e = parse(b"HTTP/1.1 200 OK\r\nA: b\r\nC: d\r\nE: f\r\n\r\n").unwrap_err();
    assert_eq!((e.status, e.reason), (502, "too many header fields"));
    let mut big = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
    big.resize(60, b'v');
    big.extend_from_slice(b"\r\n\r\n");
    assert_eq!(parse(&big), Ok(true));
    big.insert(30, b'v');
    let e = parse(&big).unwrap_err();
    assert_eq!((e.status, e.reason), (502, "response head too large"));
    assert_eq!(parse(&big[..63]), Ok(false));
    assert_eq!(
        parse(&big[..64]).unwrap_err().reason,
        "response head too large"
    );
}

#[test]
fn default_limits_match_the_request_side() {
    let max = crate::limits::DEFAULT_MAX_HEADER_BYTES;
    let mut at = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
    at.resize(max - 4, b'v');
    at.extend_from_slice(b"\r\n\r\n");
    let mut p = ResponseParser::new(Limits::default());
    assert_eq!(p.parse(&at, false).unwrap().unwrap().head_len, max);
    let fields: String = (0..101).map(|i| format!("X-{i}: v\r\n")).collect();
    assert_eq!(err(&resp_with(&fields)).reason, "too many header fields");
}

#[test]
fn errors_repeat_until_reset() {
    let mut p = ResponseParser::new(Limits::default());
    let bad = b"HTTP/1.1 200 OK\r\nX : y\r\n\r\n";
    let e = p.parse(bad, false).unwrap_err();
    assert_eq!(p.parse(bad, false).unwrap_err(), e);
    assert_eq!(
        p.parse(b"HTTP/1.1 204 No Content\r\n\r\n", false)
            .unwrap_err(),
        e
    );
    p.reset();
    assert!(p
        .parse(b"HTTP/1.1 204 No Content\r\n\r\n", false)
        .unwrap()
        .is_some());
}

#[test]
fn the_method_only_changes_framing_even_after_completion() {
    let buf = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc";
    let mut p = ResponseParser::new(Limits::default());
    assert_eq!(
        p.parse(buf, false).unwrap().unwrap().framing,
        ResponseFraming::Length(3)
    );
    assert_eq!(
        p.parse(buf, true).unwrap().unwrap().framing,
        ResponseFraming::None
    );
    assert_eq!(
        p.parse(buf, false).unwrap().unwrap().framing,
        ResponseFraming::Length(3)
    );
}

#[test]
fn shorter_buffer_starts_over() {
    let mut p = ResponseParser::new(Limits::default());
    assert!(p
        .parse(b"HTTP/1.1 200 OK\r\nContent-Le", false)
        .unwrap()
        .is_none());
    let h = p.parse(b"HTTP/1.1 204 X\r\n\r\n", false).unwrap().unwrap();
    assert_eq!(h.status, 204);
}

#[test]
fn interim_then_final_response() {
    let buf = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n";
    let mut p = ResponseParser::new(Limits::default());
    let mut pos = 0;
    let mut seen = Vec::new();
    while pos < buf.len() {
        let h = p.parse(&buf[pos..], false).unwrap().unwrap();
        seen.push((h.status, h.framing));
        let body = match h.framing {
            ResponseFraming::Chunked => {
                let mut dec = crate::ChunkedDecoder::new();
                dec.feed(&buf[pos + h.head_len..], |_| {}).unwrap().0
            }
            _ => 0,
        };
        pos += h.head_len + body;
        p.reset();
    }
    assert_eq!(pos, buf.len());
    assert_eq!(
        seen,
        [
            (100, ResponseFraming::None),
            (103, ResponseFraming::None),
            (200, ResponseFraming::Chunked),
            (204, ResponseFraming::None),
        ]
    );
}

#[test]
fn trickled_bytes_are_scanned_once() {
    let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
    head.extend_from_slice(format!("Set-Cookie: {}\r\n", "c".repeat(15000)).as_bytes());
    head.extend_from_slice(b"Content-Length: 0\r\n\r\n");
    let mut p = ResponseParser::new(Limits::default());
    for n in 0..head.len() {
        assert!(p.parse(&head[..n], false).unwrap().is_none());
    }
    assert!(p.parse(&head, false).unwrap().is_some());
    assert!(
        p.head.scanned <= head.len(),
        "scanned {} for {}",
        p.head.scanned,
        head.len()
    );
}

/// Valid and invalid heads for the exhaustive split test and the fuzzer's
/// invariants.
const MESSAGES: &[&[u8]] = &[
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    b"\r\nHTTP/1.0 301 Moved\nLocation: /x\nConnection: keep-alive\nContent-Length: 0\n\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nTrailer: X\r\n\r\n0\r\nX: y\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
    b"HTTP/1.1 200\r\nServer: b\r\n\r\nuntil close",
    b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 caf\xc3\xa9\r\nX: \xff\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: a\r\n folded\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n",
    b"HTTP/2.0 200 OK\r\n\r\n",
    b"HTTP/1.1 600 X\r\n\r\n",
    b"\r\rHTTP/1.1 200 OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
    b"<html>",
];

#[test]
fn every_split_agrees_with_the_whole() {
    for msg in MESSAGES {
        for head in [false, true] {
            let whole = parse_as(msg, head);
            assert!(!matches!(whole, Ok(None)), "{msg:?} should be decided");
        }
    }
}

#[test]
fn fuzz_checks_pass_on_the_examples() {
    for msg in MESSAGES {
        crate::fuzzing::response(msg);
    }
}
