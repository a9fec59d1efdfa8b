use super::*;
use crate::{Limits, ResponseParser};
use std::time::SystemTime;

#[test]
fn reason_phrases() {
    assert_eq!(reason_phrase(200), "OK");
    assert_eq!(reason_phrase(206), "Partial Content");
    assert_eq!(reason_phrase(304), "Not Modified");
    assert_eq!(reason_phrase(416), "Range Not Satisfiable");
    assert_eq!(reason_phrase(431), "Request Header Fields Too Large");
    assert_eq!(reason_phrase(505), "HTTP Version Not Supported");
    assert_eq!(reason_phrase(299), "");
}

#[test]
fn status_lines() {
    let mut out = Vec::new();
    write_status_line(200, &mut out);
    write_status_line(404, &mut out);
    write_status_line(299, &mut out);
    write_status_line(7, &mut out);
    assert_eq!(
        out,
        b"HTTP/1.1 200 OK\r\nHTTP/1.1 404 Not Found\r\nHTTP/1.1 299 \r\nHTTP/1.1 500 Internal Server Error\r\n"
    );
}

#[test]
fn header_lines() {
    let mut out = Vec::new();
    write_header("Content-Type", b"text/html", &mut out);
    write_header("X-Empty", b"", &mut out);
    write_header("X-Evil", b"a\r\nSet-Cookie: x\n", &mut out);
    write_header_u64("Content-Length", 0, &mut out);
    write_header_u64("Content-Length", u64::MAX, &mut out);
    assert_eq!(
        out,
        &b"Content-Type: text/html\r\nX-Empty: \r\nX-Evil: a  Set-Cookie: x \r\nContent-Length: 0\r\nContent-Length: 18446744073709551615\r\n"[..]
    );
}

/// The head relayed for the backend response `resp`, and how to relay its body.
fn relay(resp: &[u8], head: bool, client: Version, close: bool) -> (String, BodyRelay) {
    let mut parser = ResponseParser::new(Limits::default());
    let h = parser
        .parse(resp, head)
        .unwrap()
        .expect("complete response");
    let mut out = Vec::new();
    let how = write_relayed_response_head(&h, client, close, b"", &mut out);
    (String::from_utf8(out).unwrap(), how)
}

#[test]
fn relayed_response_keeps_end_to_end_fields() {
    let (out, how) = relay(
        b"HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nServer: backend\r\n\
          Content-Length: 3\r\nConnection: X-Internal\r\nX-Internal: i\r\nKeep-Alive: timeout=5\r\n\
          Proxy-Authenticate: Basic\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\nabc",
        false,
        Version::Http11,
        false,
    );
    assert_eq!(how, BodyRelay::Length(3));
    assert_eq!(
        out,
        "HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nServer: backend\r\n\
         Proxy-Authenticate: Basic\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 3\r\n\r\n"
    );
}

#[test]
fn relayed_response_adds_no_date_or_server() {
    let (out, _) = relay(
        b"HTTP/1.1 404 Nope\r\nContent-Length: 0\r\n\r\n",
        false,
        Version::Http11,
        false,
    );
    assert_eq!(out, "HTTP/1.1 404 Nope\r\nContent-Length: 0\r\n\r\n");
}

#[test]
fn relayed_chunked_body() {
    let resp =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\nVary: *\r\n\r\n";
    let (out, how) = relay(resp, false, Version::Http11, false);
    assert_eq!(how, BodyRelay::Chunked);
    assert_eq!(
        out,
        "HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\nVary: *\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let (out, how) = relay(resp, false, Version::Http11, true);
    assert_eq!(how, BodyRelay::Chunked);
    assert!(
        out.ends_with("Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"),
        "{out}"
    );
    // HTTP/1.0 clients cannot take chunked: decode it and end by closing.
    let (out, how) = relay(resp, false, Version::Http10, false);
    assert_eq!(how, BodyRelay::Dechunk);
    assert_eq!(
        out,
        "HTTP/1.1 200 OK\r\nVary: *\r\nConnection: close\r\n\r\n"
    );
}

#[test]
fn relayed_until_close_body() {
    let (out, how) = relay(
        b"HTTP/1.0 200 OK\r\nX: y\r\n\r\n",
        false,
        Version::Http11,
        false,
    );
    assert_eq!(how, BodyRelay::UntilClose);
    assert_eq!(out, "HTTP/1.1 200 OK\r\nX: y\r\nConnection: close\r\n\r\n");
    // A final coding other than chunked stays on the bytes, so an HTTP/1.1
    // client is told about it.
    let resp = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n";
    let (out, how) = relay(resp, false, Version::Http11, false);
    assert_eq!(how, BodyRelay::UntilClose);
    assert_eq!(
        out,
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nConnection: close\r\n\r\n"
    );
    let (out, _) = relay(resp, false, Version::Http10, false);
    assert_eq!(out, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
}

#[test]
fn relayed_connection_handling() {
    let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n";
    let conn = |client, close| {
        let (out, _) = relay(resp, false, client, close);
        out.split("\r\n")
            .filter(|l| l.starts_with("Connection"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert!(conn(Version::Http11, false).is_empty());
    assert_eq!(conn(Version::Http11, true), ["Connection: close"]);
    assert_eq!(conn(Version::Http10, false), ["Connection: keep-alive"]);
    assert_eq!(conn(Version::Http10, true), ["Connection: close"]);
}

#[test]
fn relayed_head_responses() {
    let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nContent-Type: text/html\r\n\r\n";
    let (out, how) = relay(resp, true, Version::Http11, false);
    assert_eq!(how, BodyRelay::None);
    assert_eq!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 1234\r\n\r\n"
    );
    // A HEAD response that would have been chunked states no framing.
    let resp = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    let (out, how) = relay(resp, true, Version::Http10, false);
    assert_eq!(how, BodyRelay::None);
    assert_eq!(out, "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\n\r\n");
    // No framing at all: not until-close when the request was HEAD.
    let (out, how) = relay(b"HTTP/1.1 200 OK\r\n\r\n", true, Version::Http11, false);
    assert_eq!(how, BodyRelay::None);
    assert_eq!(out, "HTTP/1.1 200 OK\r\n\r\n");
}

#[test]
fn relayed_bodiless_statuses() {
    let (out, how) = relay(
        b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nContent-Length: 9\r\n\r\n",
        false,
        Version::Http11,
        false,
    );
    assert_eq!(how, BodyRelay::None);
    assert_eq!(
        out,
        "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nContent-Length: 9\r\n\r\n"
    );
    // RFC 9110 §8.6: never a Content-Length on 204 or 1xx.
    let (out, _) = relay(
        b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
        false,
        Version::Http11,
        true,
    );
    assert_eq!(out, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
    let (out, how) = relay(
        b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n",
        false,
        Version::Http11,
        true,
    );
    assert_eq!(how, BodyRelay::None);
    assert_eq!(
        out,
        "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
    );
}

#[test]
fn relayed_status_line() {
    let (out, _) = relay(
        b"HTTP/1.0 404\r\nContent-Length: 0\r\n\r\n",
        false,
        Version::Http11,
        false,
    );
    assert!(out.starts_with("HTTP/1.1 404 Not Found\r\n"), "{out}");
    let (out, _) = relay(
        b"HTTP/1.1 299 \xff\r\nContent-Length: 0\r\n\r\n",
        false,
        Version::Http11,
        false,
    );
    assert!(out.starts_with("HTTP/1.1 299 \r\n"), "{out}");
    let (out, _) = relay(
        b"HTTP/1.1 200 Fine Thanks\r\nContent-Length: 0\r\n\r\n",
        false,
        Version::Http11,
        false,
    );
    assert!(out.starts_with("HTTP/1.1 200 Fine Thanks\r\n"), "{out}");
}

#[test]
fn both_framing_fields_relay_as_chunked_without_length() {
    let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";
    let (out, how) = relay(resp, false, Version::Http11, false);
    assert_eq!(how, BodyRelay::Chunked);
    assert_eq!(out, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    let (_, how) = relay(resp, true, Version::Http11, false);
    assert_eq!(how, BodyRelay::None);
}

const DATE: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";

/// A file's metadata as the static path gives it.
fn file_meta() -> Metadata<'static> {
    Metadata {
        content_type: Some("text/html; charset=utf-8"),
        content_encoding: Some("br"),
        last_modified: Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(784111777)),
        etag: Some("\"5f-1-br\""),
        accept_ranges: true,
        vary_accept_encoding: true,
        ..Metadata::default()
    }
}

fn head(status: u16, fields: HeadFields<'_>, version: Version, close: bool) -> String {
    let mut out = Vec::new();
    write_response_head(
        &Head {
            status,
            date: DATE,
            fields,
            version,
            close,
            also: b"",
            edit: None,
        },
        &mut out,
    );
    String::from_utf8(out).unwrap()
}

#[test]
fn own_heads_in_order() {
    let fields = Fields {
        meta: file_meta(),
        content_length: Some(95),
        ..Fields::default()
    };
    assert_eq!(
        head(200, HeadFields::Write(fields), Version::Http11, false),
        "HTTP/1.1 200 OK\r\nServer: fastpath\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
         Content-Type: text/html; charset=utf-8\r\nContent-Encoding: br\r\n\
         Last-Modified: Sun, 06 Nov 1994 08:49:37 GMT\r\nETag: \"5f-1-br\"\r\n\
         Accept-Ranges: bytes\r\nVary: Accept-Encoding\r\nContent-Length: 95\r\n\r\n"
    );
    // The Connection field says what the client would not assume.
    let bare = HeadFields::Write(Fields::default());
    let connection = |version, close| {
        let out = head(204, bare, version, close);
        out.split("\r\n")
            .filter(|l| l.starts_with("Connection"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert!(connection(Version::Http11, false).is_empty());
    assert_eq!(connection(Version::Http11, true), ["Connection: close"]);
    assert_eq!(
        connection(Version::Http10, false),
        ["Connection: keep-alive"]
    );
    assert_eq!(connection(Version::Http10, true), ["Connection: close"]);
}

#[test]
fn prebuilt_fields_give_the_same_bytes() {
    let fields = Fields {
        meta: file_meta(),
        content_length: Some(12345),
        ..Fields::default()
    };
    let mut prebuilt = Vec::new();
    fields.write(200, &mut prebuilt);
    for (version, close) in [
        (Version::Http11, false),
        (Version::Http10, false),
        (Version::Http11, true),
    ] {
        assert_eq!(
            head(200, HeadFields::Prebuilt(&prebuilt), version, close),
            head(200, HeadFields::Write(fields), version, close),
        );
    }
}

#[test]
fn the_status_decides_which_metadata_is_written() {
    let meta = Metadata {
        location: Some("/dir/"),
        content_range: Some("bytes */10"),
        ..file_meta()
    };
    let fields = |status| {
        let mut out = Vec::new();
        Fields {
            meta,
            ..Fields::default()
        }
        .write(status, &mut out);
        String::from_utf8(out).unwrap()
    };
    let common = "Last-Modified: Sun, 06 Nov 1994 08:49:37 GMT\r\nETag: \"5f-1-br\"\r\n\
                  Accept-Ranges: bytes\r\nContent-Range: bytes */10\r\nVary: Accept-Encoding\r\n";
    assert_eq!(
        fields(206),
        format!(
            "Location: /dir/\r\nContent-Type: text/html; charset=utf-8\r\n\
             Content-Encoding: br\r\n{common}"
        )
    );
    // A 304 keeps the coding but not the type (RFC 9110 §15.4.5).
    assert_eq!(
        fields(304),
        format!("Location: /dir/\r\nContent-Encoding: br\r\n{common}")
    );
    // Redirects and errors describe no representation of their own.
    for status in [301, 416] {
        assert_eq!(fields(status), format!("Location: /dir/\r\n{common}"));
    }
}

#[test]
fn error_pages_bring_their_own_type_after_the_metadata() {
    let allow = b"Allow: GET, HEAD\r\nContent-Type: text/html; charset=utf-8\r\n";
    let fields = Fields {
        meta: Metadata {
            content_type: Some("text/plain"),
            ..Metadata::default()
        },
        extra: allow,
        content_length: Some(0),
    };
    assert_eq!(
        head(405, HeadFields::Write(fields), Version::Http10, true),
        "HTTP/1.1 405 Method Not Allowed\r\nServer: fastpath\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
         Allow: GET, HEAD\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: 0\r\n\
         Connection: close\r\n\r\n"
    );
    // No value can add a line.
    let evil = Fields {
        meta: Metadata {
            location: Some("/a\r\nSet-Cookie: x"),
            ..Metadata::default()
        },
        ..Fields::default()
    };
    let out = head(307, HeadFields::Write(evil), Version::Http11, false);
    assert!(out.contains("Location: /a  Set-Cookie: x\r\n"), "{out}");
}

#[test]
fn age_ends_a_kept_head() {
    let mut out = b"HTTP/1.1 200 OK\r\n".to_vec();
    write_age_and_end(0, Version::Http11, false, b"", &mut out);
    write_age_and_end(1 << 31, Version::Http11, false, b"", &mut out);
    assert_eq!(
        out,
        b"HTTP/1.1 200 OK\r\nAge: 0\r\n\r\nAge: 2147483648\r\n\r\n"
    );
    // The connection is the client's: said as for any other response.
    let mut out = Vec::new();
    write_age_and_end(5, Version::Http11, true, b"", &mut out);
    write_age_and_end(5, Version::Http10, false, b"", &mut out);
    write_age_and_end(5, Version::Http10, true, b"", &mut out);
    assert_eq!(
        out,
        b"Connection: close\r\nAge: 5\r\n\r\nConnection: keep-alive\r\nAge: 5\r\n\r\n\
          Connection: close\r\nAge: 5\r\n\r\n"
    );
}

/// A backend response head, parsed as the proxy parses it for a GET.
fn parsed(resp: &[u8], f: impl FnOnce(&ResponseHead<'_>)) {
    let mut parser = ResponseParser::new(Limits::default());
    let h = parser
        .parse(resp, false)
        .unwrap()
        .expect("complete response");
    f(&h);
}

/// The same for a HEAD request.
fn parsed_head_request(resp: &[u8], f: impl FnOnce(&ResponseHead<'_>)) {
    let mut parser = ResponseParser::new(Limits::default());
    let h = parser
        .parse(resp, true)
        .unwrap()
        .expect("complete response");
    f(&h);
}

#[test]
fn stored_heads_are_relayed_heads_without_age_or_end() {
    let resp = b"HTTP/1.1 200 OK\r\nAge: 5\r\nCache-Control: max-age=60\r\nConnection: X-Hop\r\n\
                 X-Hop: 1\r\nage: 7\r\nX-Age: 9\r\nContent-Length: 2\r\n\r\nhi";
    parsed(resp, |h| {
        let mut stored = Vec::new();
        assert_eq!(
            write_stored_response_head(h, Recoding::Unchanged, &mut stored),
            BodyRelay::Length(2)
        );
        assert_eq!(
            String::from_utf8(stored.clone()).unwrap(),
            "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nX-Age: 9\r\nContent-Length: 2\r\n"
        );
        // What a hit sends is what was relayed, its Age aside.
        let mut relayed = Vec::new();
        write_relayed_response_head(h, Version::Http11, false, b"", &mut relayed);
        let relayed = String::from_utf8(relayed).unwrap();
        let without_age: String = relayed
            .split_inclusive("\r\n")
            .filter(|l| !l.to_ascii_lowercase().starts_with("age:"))
            .collect();
        write_age_and_end(3, Version::Http11, false, b"", &mut stored);
        let sent = String::from_utf8(stored).unwrap();
        assert_eq!(sent.replace("Age: 3\r\n", ""), without_age);
    });
    // A body that ends with the connection cannot be replayed: the caller is told.
    parsed(b"HTTP/1.1 200 OK\r\nX: y\r\n\r\n", |h| {
        let mut stored = Vec::new();
        assert_eq!(
            write_stored_response_head(h, Recoding::Unchanged, &mut stored),
            BodyRelay::UntilClose
        );
    });
}

#[test]
fn not_modified_heads_repeat_what_a_304_must() {
    let resp = b"HTTP/1.1 200 OK\r\nServer: b\r\nConnection: expires\r\nETag: W/\"x1\"\r\n\
                 Last-Modified: Sat, 21 Nov 2026 10:00:00 GMT\r\nContent-Type: text/plain\r\n\
                 Expires: Sat, 21 Nov 2026 11:00:00 GMT\r\nVary: Accept-Encoding\r\n\
                 cache-control: max-age=9\r\nContent-Length: 2\r\n\r\nhi";
    parsed(resp, |h| {
        let mut out = Vec::new();
        write_not_modified_head(h, Recoding::Unchanged, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 304 Not Modified\r\nServer: b\r\nETag: W/\"x1\"\r\n\
             Vary: Accept-Encoding\r\ncache-control: max-age=9\r\n"
        );
    });
}

const HSTS: &[u8] = b"Strict-Transport-Security: max-age=63072000\r\n";

#[test]
fn the_connections_own_lines_go_on_every_final_head_before_connection() {
    let out = head(
        404,
        HeadFields::Write(Fields {
            meta: Metadata::default(),
            extra: b"Content-Type: text/html\r\n",
            content_length: Some(0),
        }),
        Version::Http11,
        true,
    );
    assert!(!out.contains("Strict"), "{out}");
    let mut with = Vec::new();
    write_response_head(
        &Head {
            status: 404,
            date: DATE,
            fields: HeadFields::Prebuilt(b"Content-Length: 0\r\n"),
            version: Version::Http11,
            close: true,
            also: HSTS,
            edit: None,
        },
        &mut with,
    );
    let with = String::from_utf8(with).unwrap();
    assert!(
        with.ends_with(
            "Content-Length: 0\r\nStrict-Transport-Security: max-age=63072000\r\n\
             Connection: close\r\n\r\n"
        ),
        "{with}"
    );
    // Relayed: added unless the backend said it itself; never on an interim response.
    let relayed = |resp: &[u8]| {
        let mut parser = ResponseParser::new(Limits::default());
        let h = parser.parse(resp, false).unwrap().unwrap();
        let mut out = Vec::new();
        write_relayed_response_head(&h, Version::Http11, false, HSTS, &mut out);
        String::from_utf8(out).unwrap()
    };
    let out = relayed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nStrict-Transport-Security: max-age=63072000\r\n\r\n"
    );
    let out = relayed(
        b"HTTP/1.1 200 OK\r\nstrict-transport-security: max-age=5\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(out.matches("max-age").count(), 1, "{out}");
    assert!(out.contains("max-age=5"), "{out}");
    let out = relayed(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n");
    assert!(!out.contains("Strict"), "{out}");
    // A cache hit: after the kept head, before Connection and Age.
    let mut out = b"HTTP/1.1 200 OK\r\n".to_vec();
    write_age_and_end(1, Version::Http11, true, HSTS, &mut out);
    assert_eq!(
        out,
        b"HTTP/1.1 200 OK\r\nStrict-Transport-Security: max-age=63072000\r\n\
          Connection: close\r\nAge: 1\r\n\r\n"
    );
}

/// The head relayed for a body coded on the way with gzip, to a `client`.
fn recoded(resp: &[u8], client: Version, recoding: Recoding) -> (String, BodyRelay, Framing) {
    let mut out = crate::testing::Record::default();
    let mut result = None;
    parsed(resp, |h| {
        let (relay, body) =
            start_relayed_response(h, (client, false), (b"", None), recoding, &mut out);
        result = Some((relay, body.framing()));
    });
    let (relay, framing) = result.unwrap();
    (String::from_utf8(out.0).unwrap(), relay, framing)
}

#[test]
fn a_coded_body_is_read_unframed_and_sent_chunked_to_http11() {
    let resp = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: \"v1\"\r\n\
                 Accept-Ranges: bytes\r\nContent-Encoding: identity\r\nContent-Length: 5000\r\n\r\n";
    let (head, relay, framing) = recoded(resp, Version::Http11, Recoding::Coded("gzip"));
    assert_eq!(relay, BodyRelay::Length(5000));
    assert_eq!(framing, Framing::Chunked);
    assert_eq!(
        head,
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: W/\"v1\"\r\n\
         Content-Encoding: gzip\r\nVary: Accept-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    // A chunked backend body is decoded, and framed anew.
    let chunked =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nVary: Cookie, accept-encoding\r\n\
                    Transfer-Encoding: chunked\r\n\r\n";
    let (head, relay, framing) = recoded(chunked, Version::Http11, Recoding::Coded("br"));
    assert_eq!(relay, BodyRelay::Dechunk);
    assert_eq!(framing, Framing::Chunked);
    assert_eq!(
        head,
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nVary: Cookie, accept-encoding\r\n\
         Content-Encoding: br\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
}

#[test]
fn a_coded_body_to_http10_ends_with_the_close() {
    let resp = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n";
    let (head, relay, framing) = recoded(resp, Version::Http10, Recoding::Coded("zstd"));
    assert_eq!(relay, BodyRelay::Dechunk);
    assert_eq!(framing, Framing::Close);
    assert_eq!(
        head,
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: zstd\r\n\
         Vary: Accept-Encoding\r\nConnection: close\r\n\r\n"
    );
}

#[test]
fn a_response_that_could_have_been_coded_says_it_varies() {
    let resp = b"HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nVary: *\r\nContent-Length: 3\r\n\r\n";
    let (head, relay, framing) = recoded(resp, Version::Http11, Recoding::Varies);
    assert_eq!((relay, framing), (BodyRelay::Length(3), Framing::Length(3)));
    // `*` covers Accept-Encoding already; the ETag stays strong, the bytes being the backend's.
    assert_eq!(
        head,
        "HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nVary: *\r\nContent-Length: 3\r\n\r\n"
    );
    let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n";
    let (head, _, _) = recoded(plain, Version::Http11, Recoding::Varies);
    assert_eq!(
        head,
        "HTTP/1.1 200 OK\r\nVary: Accept-Encoding\r\nContent-Length: 3\r\n\r\n"
    );
}

#[test]
fn a_coded_head_response_states_no_length() {
    let resp = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5000\r\n\r\n";
    let mut out = crate::testing::Record::default();
    parsed_head_request(resp, |h| {
        let (relay, body) = start_relayed_response(
            h,
            (Version::Http11, false),
            (b"", None),
            Recoding::Coded("gzip"),
            &mut out,
        );
        assert_eq!((relay, body.framing()), (BodyRelay::None, Framing::None));
    });
    assert_eq!(
        String::from_utf8(out.0).unwrap(),
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: gzip\r\n\
         Vary: Accept-Encoding\r\n\r\n"
    );
}

#[test]
fn a_coded_body_is_kept_chunked_and_its_304_matches() {
    // Even one that ends with the backend's close: coded, it is framed by chunks.
    let resp = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: \"v2\"\r\n\
                 Cache-Control: max-age=60\r\n\r\n";
    parsed(resp, |h| {
        let mut stored = Vec::new();
        assert_eq!(
            write_stored_response_head(h, Recoding::Coded("gzip"), &mut stored),
            BodyRelay::Chunked
        );
        assert_eq!(
            String::from_utf8(stored).unwrap(),
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: W/\"v2\"\r\n\
             Cache-Control: max-age=60\r\nContent-Encoding: gzip\r\nVary: Accept-Encoding\r\n\
             Transfer-Encoding: chunked\r\n"
        );
        let mut not_modified = Vec::new();
        write_not_modified_head(h, Recoding::Coded("gzip"), &mut not_modified);
        assert_eq!(
            String::from_utf8(not_modified).unwrap(),
            "HTTP/1.1 304 Not Modified\r\nETag: W/\"v2\"\r\nCache-Control: max-age=60\r\n\
             Vary: Accept-Encoding\r\n"
        );
    });
}
