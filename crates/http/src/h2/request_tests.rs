use super::*;
use crate::testing::Rng;
use crate::{BodyFraming, Limits, Parser};

/// The block `fields` as `finish` writes it, or why it is malformed.
fn head(
    fields: &[(&str, &str)],
    end_stream: bool,
) -> Result<(String, RequestBody), MalformedRequest> {
    let mut request = RequestHead::default();
    for (name, value) in fields {
        request.field(name.as_bytes(), value.as_bytes())?;
    }
    let mut out = Vec::new();
    let body = request.finish(end_stream, &mut out)?;
    Ok((String::from_utf8(out).unwrap(), body))
}

const GET: [(&str, &str); 4] = [
    (":method", "GET"),
    (":scheme", "https"),
    (":authority", "a.test"),
    (":path", "/x?y=1"),
];

fn with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    GET.iter().copied().chain(extra.iter().copied()).collect()
}

#[test]
fn a_request_becomes_the_http1_head_the_server_parses() {
    let fields = with(&[
        ("accept", "*/*"),
        ("cookie", "a=1"),
        ("user-agent", "h2 test"),
        ("cookie", "b=2"),
    ]);
    let (text, body) = head(&fields, true).unwrap();
    assert_eq!(body, RequestBody::None);
    assert_eq!(
        text,
        "GET /x?y=1 HTTP/1.1\r\nHost: a.test\r\naccept: */*\r\nuser-agent: h2 test\r\n\
         cookie: a=1; b=2\r\n\r\n"
    );
    let mut parser = Parser::new(Limits::default());
    let parsed = parser.parse(text.as_bytes()).unwrap().unwrap();
    assert_eq!((parsed.method, parsed.target), ("GET", "/x?y=1"));
    assert_eq!(parsed.host, Some("a.test"));
    assert_eq!(parsed.framing, BodyFraming::None);
    assert_eq!(parsed.head_len, text.len());
}

#[test]
fn the_body_is_delimited_by_its_length_or_by_chunks() {
    let (text, body) = head(&with(&[("content-length", "5")]), false).unwrap();
    assert_eq!(body, RequestBody::Length(5));
    assert!(text.ends_with("Content-Length: 5\r\n\r\n"), "{text}");
    let (text, body) = head(&GET, false).unwrap();
    assert_eq!(body, RequestBody::Chunked);
    assert!(
        text.ends_with("Transfer-Encoding: chunked\r\n\r\n"),
        "{text}"
    );
    let mut parser = Parser::new(Limits::default());
    assert_eq!(
        parser.parse(text.as_bytes()).unwrap().unwrap().framing,
        BodyFraming::Chunked
    );
    // The same length twice is one; a zero length with the stream's end is none.
    let twice = with(&[("content-length", "5"), ("content-length", "5")]);
    assert_eq!(head(&twice, false).unwrap().1, RequestBody::Length(5));
    let (text, body) = head(&with(&[("content-length", "0")]), true).unwrap();
    assert_eq!(body, RequestBody::None);
    assert!(text.ends_with("Content-Length: 0\r\n\r\n"), "{text}");
}

#[test]
fn host_stands_in_for_a_missing_authority_and_must_agree_with_one() {
    let fields = [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        ("host", "b.test:8080"),
    ];
    let (text, _) = head(&fields, true).unwrap();
    assert_eq!(text, "GET / HTTP/1.1\r\nHost: b.test:8080\r\n\r\n");
    let (text, _) = head(&with(&[("host", "A.TEST")]), true).unwrap();
    assert!(
        text.starts_with("GET /x?y=1 HTTP/1.1\r\nHost: a.test\r\n"),
        "{text}"
    );
    assert_eq!(
        head(&with(&[("host", "other.test")]), true).unwrap_err(),
        MalformedRequest::BadAuthority
    );
    let mut userinfo = GET;
    userinfo[2] = (":authority", "user@a.test");
    assert_eq!(
        head(&userinfo, true).unwrap_err(),
        MalformedRequest::BadAuthority
    );
    // OPTIONS * is the one target that is no path.
    let options = [
        (":method", "OPTIONS"),
        (":scheme", "https"),
        (":authority", "a.test"),
        (":path", "*"),
    ];
    assert!(head(&options, true)
        .unwrap()
        .0
        .starts_with("OPTIONS * HTTP/1.1\r\n"));
}

/// A header block's fields, in order.
type Fields = Vec<(&'static str, &'static str)>;

#[test]
fn every_malformed_shape_is_refused() {
    use MalformedRequest::*;
    let cases: Vec<(Fields, bool, MalformedRequest)> = vec![
        (with(&[("Accept", "*/*")]), true, UppercaseName),
        (with(&[("bad name", "x")]), true, BadName),
        (with(&[("", "x")]), true, BadName),
        (with(&[("x", "a\r\nb: c")]), true, BadValue),
        (with(&[("x", "a\0b")]), true, BadValue),
        (with(&[("x", " padded")]), true, BadValue),
        (with(&[("x", "padded\t")]), true, BadValue),
        (
            with(&[("connection", "keep-alive")]),
            true,
            ConnectionSpecific("connection"),
        ),
        (
            with(&[("keep-alive", "5")]),
            true,
            ConnectionSpecific("keep-alive"),
        ),
        (
            with(&[("proxy-connection", "x")]),
            true,
            ConnectionSpecific("proxy-connection"),
        ),
        (
            with(&[("transfer-encoding", "chunked")]),
            false,
            ConnectionSpecific("transfer-encoding"),
        ),
        (
            with(&[("upgrade", "h2c")]),
            true,
            ConnectionSpecific("upgrade"),
        ),
        (with(&[("te", "gzip")]), true, ConnectionSpecific("te")),
        (with(&[(":status", "200")]), true, UnknownPseudoHeader),
        (
            vec![(":method", "GET"), (":protocol", "websocket")],
            true,
            UnknownPseudoHeader,
        ),
        (
            vec![(":method", "GET"), ("accept", "*/*"), (":path", "/")],
            true,
            PseudoHeaderAfterField,
        ),
        (
            vec![(":method", "GET"), (":method", "POST")],
            true,
            RepeatedPseudoHeader(":method"),
        ),
        (GET[1..].to_vec(), true, Missing(":method")),
        (vec![GET[0], GET[2], GET[3]], true, Missing(":scheme")),
        (GET[..3].to_vec(), true, Missing(":path")),
        (vec![GET[0], GET[1], GET[3]], true, Missing(":authority")),
        (vec![GET[0], GET[1], GET[2], (":path", "")], true, BadPath),
        (
            vec![GET[0], GET[1], GET[2], (":path", "http://a.test/")],
            true,
            BadPath,
        ),
        (vec![GET[0], GET[1], GET[2], (":path", "*")], true, BadPath),
        (with(&[("content-length", "five")]), false, BadContentLength),
        (with(&[("content-length", "-1")]), false, BadContentLength),
        (
            with(&[("content-length", "99999999999999999999")]),
            false,
            BadContentLength,
        ),
        (
            with(&[("content-length", "5"), ("content-length", "6")]),
            false,
            BadContentLength,
        ),
        (with(&[("content-length", "5")]), true, BadContentLength),
        (
            with(&[("host", "a.test"), ("host", "a.test")]),
            true,
            BadAuthority,
        ),
        (
            vec![(":method", "CONNECT"), (":authority", "a.test:443")],
            false,
            Connect,
        ),
    ];
    for (fields, end_stream, expected) in cases {
        assert_eq!(
            head(&fields, end_stream).unwrap_err(),
            expected,
            "{fields:?}"
        );
    }
}

#[test]
fn trailers_have_no_pseudo_header_or_connection_fields() {
    assert_eq!(check_trailer_field(b"grpc-status", b"0"), Ok(()));
    assert_eq!(
        check_trailer_field(b":path", b"/"),
        Err(MalformedRequest::PseudoHeaderAfterField)
    );
    assert_eq!(
        check_trailer_field(b"transfer-encoding", b"chunked"),
        Err(MalformedRequest::ConnectionSpecific("transfer-encoding"))
    );
    assert_eq!(
        check_trailer_field(b"X-Up", b"1"),
        Err(MalformedRequest::UppercaseName)
    );
    assert_eq!(
        check_trailer_field(b"x", b"a\nb"),
        Err(MalformedRequest::BadValue)
    );
}

#[test]
fn every_block_accepted_becomes_a_head_the_http1_parser_reads_the_same() {
    let names: [&[u8]; 14] = [
        b":method",
        b":scheme",
        b":authority",
        b":path",
        b"host",
        b"cookie",
        b"content-length",
        b"x-a",
        b"X-B",
        b"te",
        b"connection",
        b":other",
        b"",
        b"a b",
    ];
    let values: [&[u8]; 14] = [
        b"GET",
        b"POST",
        b"https",
        b"a.test",
        b"/p",
        b"*",
        b"7",
        b"0",
        b"trailers",
        b"v w",
        b" v",
        b"v\r\n",
        b"",
        b"\xff\x80",
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut accepted = 0;
    for _ in 0..20_000 {
        let mut request = RequestHead::default();
        let count = 4 + rng.next() % 6;
        let mut fine = true;
        for i in 0..count {
            // Mostly well-formed starts, so that many blocks get through.
            let (name, value) = match i {
                0 => (&b":method"[..], rng.pick(&[b"GET", b"POST", b"OPTIONS"])),
                1 => (&b":scheme"[..], &b"https"[..]),
                2 => (&b":path"[..], rng.pick(&[b"/p", b"/", b"*"])),
                3 => (
                    &b":authority"[..],
                    rng.pick(&[b"a.test", b"a.test:8443", b"[::1]"]),
                ),
                _ => (rng.pick(&names), rng.pick(&values)),
            };
            fine &= request.field(name, value).is_ok();
        }
        let mut out = Vec::new();
        let end_stream = rng.next().is_multiple_of(2);
        let Ok(body) = request
            .finish(end_stream, &mut out)
            .map_err(|_| ())
            .and_then(|b| if fine { Ok(b) } else { Err(()) })
        else {
            continue;
        };
        accepted += 1;
        let mut parser = Parser::new(Limits::default());
        let parsed = parser
            .parse(&out)
            .unwrap_or_else(|e| panic!("{e:?}: {}", String::from_utf8_lossy(&out)))
            .expect("a whole head");
        assert_eq!(parsed.head_len, out.len());
        // No body reads as none, or as a length of 0 when the block said so.
        let agrees = match (body, parsed.framing) {
            (RequestBody::None, BodyFraming::None | BodyFraming::Length(0)) => true,
            (RequestBody::Length(n), BodyFraming::Length(m)) => n == m,
            (RequestBody::Chunked, BodyFraming::Chunked) => true,
            _ => false,
        };
        assert!(agrees, "{body:?}: {}", String::from_utf8_lossy(&out));
    }
    assert!(accepted > 1_000, "only {accepted} blocks accepted");
}

#[test]
fn a_cleared_head_takes_the_next_block_as_a_fresh_one() {
    let mut request = RequestHead::default();
    for (name, value) in with(&[("cookie", "a=1"), ("content-length", "3"), ("x", "1")]) {
        request.field(name.as_bytes(), value.as_bytes()).unwrap();
    }
    request.clear();
    for (name, value) in GET {
        request.field(name.as_bytes(), value.as_bytes()).unwrap();
    }
    let mut out = Vec::new();
    assert_eq!(request.finish(true, &mut out), Ok(RequestBody::None));
    assert_eq!(out, b"GET /x?y=1 HTTP/1.1\r\nHost: a.test\r\n\r\n");
}

/// What the HTTP/1 path reads of a request, to compare two.
fn summary(request: &crate::Request<'_>) -> String {
    let noted: Vec<_> = crate::Noted::ALL
        .iter()
        .map(|&which| request.noted(which))
        .collect();
    let headers: Vec<_> = request.headers().collect();
    format!(
        "{} {} {:?} {:?} keep-alive {} continue {} host {:?} {:?} {noted:?} {headers:?}",
        request.method,
        request.target,
        request.version,
        request.framing,
        request.keep_alive,
        request.expect_continue,
        request.host,
        request.kind,
    )
}

#[test]
fn a_parsed_head_is_what_the_http1_parser_makes_of_the_text() {
    let names: [&[u8]; 16] = [
        b"host",
        b"cookie",
        b"content-length",
        b"x-a",
        b"te",
        b"expect",
        b"range",
        b"user-agent",
        b"accept-encoding",
        b"if-none-match",
        b"if-modified-since",
        b"referer",
        b"authorization",
        b"if-range",
        b"if-match",
        b"if-unmodified-since",
    ];
    let values: [&[u8]; 12] = [
        b"a.test",
        b"7",
        b"0",
        b"trailers",
        b"100-continue",
        b"v w",
        b"",
        b"\xff\x80",
        b"a\x01b",
        b"a\x7fb",
        b"a\tb",
        b"a-long-value-that-takes-the-head-over-small-limits-0123456789",
    ];
    let small = Limits {
        max_request_line: 24,
        max_header_bytes: 160,
        max_headers: 5,
    };
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut parsed_ones, mut text_ones) = (0, 0);
    for round in 0..20_000 {
        let mut request = RequestHead::default();
        let count = 4 + rng.next() % 7;
        let mut fine = true;
        for i in 0..count {
            let (name, value) = match i {
                0 => (
                    &b":method"[..],
                    rng.pick(&[b"GET", b"POST", b"HEAD", b"OPTIONS"]),
                ),
                1 => (&b":scheme"[..], &b"https"[..]),
                2 => (
                    &b":path"[..],
                    rng.pick(&[&b"/p"[..], b"/", b"*", b"/\xc3\xa9", b"/a/long/path/x?q=1"]),
                ),
                3 => (
                    &b":authority"[..],
                    rng.pick(&[&b"a.test"[..], b"a.test:8443", b"[::1]", b""]),
                ),
                _ => (rng.pick(&names), rng.pick(&values)),
            };
            fine &= request.field(name, value).is_ok();
        }
        if !fine {
            continue;
        }
        let end_stream = rng.next().is_multiple_of(2);
        let limits = if round % 3 == 0 {
            small
        } else {
            Limits::default()
        };
        let mut text = Vec::new();
        let Ok(body) = request.finish(end_stream, &mut text) else {
            assert!(request.finish_parsed(end_stream, &limits).is_err());
            continue;
        };
        // The text as the server's glue gives it to the HTTP/1 path.
        text.truncate(text.len() - 2);
        text.extend_from_slice(b"Connection: close\r\n\r\n");
        let mut parser = Parser::new(limits);
        let from_text = parser.parse(&text).map(|r| r.map(|r| summary(&r)));
        let (parsed_body, parsed) = request.finish_parsed(end_stream, &limits).unwrap();
        assert_eq!(parsed_body, body);
        let Some(parsed) = parsed else {
            text_ones += 1;
            continue;
        };
        parsed_ones += 1;
        let from_text = from_text
            .unwrap_or_else(|e| {
                panic!(
                    "parsed, where the text is refused ({e:?}): {}",
                    String::from_utf8_lossy(&text)
                )
            })
            .expect("a whole head");
        let mut input = parsed.bytes().to_vec();
        input.extend_from_slice(b"body");
        let mut direct = Parser::new(limits);
        direct.take_parsed(parsed);
        let request = direct.parse(&input).unwrap().expect("the head given");
        assert_eq!(request.head_len, parsed.bytes().len());
        assert_eq!(request.method.as_bytes(), parsed.method());
        assert_eq!(
            summary(&request),
            from_text,
            "{}",
            String::from_utf8_lossy(&text)
        );
    }
    assert!(parsed_ones > 1_000, "only {parsed_ones} heads parsed");
    assert!(text_ones > 1_000, "only {text_ones} heads as text");
}
