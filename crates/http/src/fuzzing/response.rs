//! Checks for the proxy path: backend response heads, the heads relayed to
//! clients, and requests forwarded to backends.

use super::{
    check_head_bounds, check_splits, chunked_body, compare_fields, sized_body, Parsed,
    SummaryParser,
};
use crate::{
    is_hop_by_hop, parse_target, reason_phrase, write_forwarded_request,
    write_relayed_response_head, BodyFraming, BodyRelay, ForwardOptions, Limits, Parser,
    RequestError, ResponseFraming, ResponseHead, ResponseParser, Target, Version,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An owned copy of everything a [`ResponseHead`] exposes, for comparisons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResponseSummary {
    pub(crate) version: Version,
    pub(crate) status: u16,
    pub(crate) reason: String,
    pub(crate) head_len: usize,
    pub(crate) framing: ResponseFraming,
    pub(crate) keep_alive: bool,
    pub(crate) content_length: Option<u64>,
    pub(crate) headers: Vec<(String, Vec<u8>)>,
}

pub(crate) type ResponseOutcome = Parsed<ResponseSummary>;

pub(crate) fn summarize_response(
    r: Result<Option<ResponseHead<'_>>, RequestError>,
) -> ResponseOutcome {
    r.map(|o| {
        o.map(|h| ResponseSummary {
            version: h.version,
            status: h.status,
            reason: h.reason.to_owned(),
            head_len: h.head_len,
            framing: h.framing,
            keep_alive: h.keep_alive,
            content_length: h.content_length,
            headers: h
                .headers()
                .map(|(n, v)| (n.to_owned(), v.to_vec()))
                .collect(),
        })
    })
}

/// A response parser answering a request that was, or was not, HEAD.
pub(crate) struct ResponseTo {
    parser: ResponseParser,
    request_was_head: bool,
}

impl ResponseTo {
    pub(crate) fn new(limits: Limits, request_was_head: bool) -> Self {
        ResponseTo {
            parser: ResponseParser::new(limits),
            request_was_head,
        }
    }
}

impl SummaryParser for ResponseTo {
    type Summary = ResponseSummary;

    fn parse_summary(&mut self, data: &[u8]) -> ResponseOutcome {
        summarize_response(self.parser.parse(data, self.request_was_head))
    }

    fn reset(&mut self) {
        self.parser.reset();
    }

    fn head_len(summary: &ResponseSummary) -> usize {
        summary.head_len
    }
}

/// Limits large enough that nothing the writers produce from a head parsed
/// under the default limits can exceed them.
const ROOMY: Limits = Limits {
    max_request_line: 1 << 20,
    max_header_bytes: 1 << 20,
    max_headers: 10_000,
};

const SMALL: Limits = Limits {
    max_request_line: 32,
    max_header_bytes: 128,
    max_headers: 4,
};

/// Exercises the response parser and both forwarding writers. The input is
/// read as a backend response and, separately, as a client request.
pub fn response(data: &[u8]) {
    for head in [false, true] {
        let whole = check_parser(data, Limits::default(), head);
        if let Ok(Some(s)) = &whole {
            compare_with_httparse(data, s);
            check_relay(data, head);
        }
        let _ = check_parser(data, SMALL, head);
    }
    check_sequence(data);
    check_forwarding(data);
}

/// Parses `data` whole, split once at a derived offset, and grown one byte at
/// a time with one reused parser; all must agree. Returns the whole result.
fn check_parser(data: &[u8], limits: Limits, head: bool) -> ResponseOutcome {
    let mut fresh = ResponseParser::new(limits);
    let whole = summarize_response(fresh.parse(data, head));
    check_invariants(&whole, data, limits, head);

    // The method only changes the framing, even once the head is complete.
    let other = summarize_response(ResponseParser::new(limits).parse(data, !head));
    assert_eq!(
        summarize_response(fresh.parse(data, !head)),
        other,
        "asking about the other method gave a different answer"
    );
    assert_eq!(
        summarize_response(fresh.parse(data, head)),
        whole,
        "asking again changed the answer"
    );
    match (&whole, &other) {
        (Ok(Some(a)), Ok(Some(b))) => {
            assert_eq!(
                (a.status, &a.headers, a.head_len),
                (b.status, &b.headers, b.head_len)
            );
        }
        (a, b) => assert_eq!(a, b, "the method changed more than the framing"),
    }

    check_splits(data, &whole, ResponseTo::new(limits, head));
    whole
}

fn check_invariants(outcome: &ResponseOutcome, data: &[u8], limits: Limits, head: bool) {
    let s = match outcome {
        Ok(Some(s)) => s,
        Ok(None) => return,
        Err(e) => {
            assert_eq!(e.status, 502, "unexpected status {e}");
            return;
        }
    };
    check_head_bounds(data, limits, s.head_len, &s.headers);
    assert!((100..=599).contains(&s.status));
    assert!(s.reason.len() <= limits.max_request_line);
    assert!(s
        .reason
        .bytes()
        .all(|b| b == b'\t' || (0x20..0x7f).contains(&b)));
    let te = s
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("transfer-encoding"));
    if head || matches!(s.status, 100..=199 | 204 | 304) {
        assert_eq!(s.framing, ResponseFraming::None);
    }
    match s.framing {
        ResponseFraming::Length(n) => assert_eq!(s.content_length, Some(n)),
        ResponseFraming::Chunked => {
            assert!(te);
            assert_eq!(s.version, Version::Http11);
        }
        ResponseFraming::UntilClose => assert!(!s.keep_alive),
        ResponseFraming::None => {}
    }
    if te {
        assert_eq!(
            s.content_length, None,
            "Content-Length kept next to Transfer-Encoding"
        );
    }
    if s.status == 101 {
        assert!(!s.keep_alive);
    }
}

/// httparse is an independent HTTP/1 parser: every head we accept that it
/// understands must parse identically there.
fn compare_with_httparse(data: &[u8], s: &ResponseSummary) {
    let start = data
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(data.len());
    let version = data.get(start..start + 8);
    if version != Some(b"HTTP/1.0") && version != Some(b"HTTP/1.1") {
        return;
    }
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(data) {
        Ok(httparse::Status::Complete(len)) => {
            assert_eq!(len, s.head_len, "httparse head length differs");
            assert_eq!(resp.code, Some(s.status));
            assert_eq!(resp.reason, Some(s.reason.as_str()));
            compare_fields(resp.headers, &s.headers);
        }
        other => panic!("we accepted a head httparse rejects: {other:?}"),
    }
}

/// Relays the head to every kind of client and reads the result back: it
/// must be a valid head that frames the body the way the returned
/// [`BodyRelay`] says, with the backend's end-to-end fields in order and no
/// hop-by-hop field of the backend's.
fn check_relay(data: &[u8], head: bool) {
    let mut parser = ResponseParser::new(Limits::default());
    let Ok(Some(h)) = parser.parse(data, head) else {
        panic!("head parsed once but not twice");
    };
    let connection: Vec<&[u8]> = h.header_values("connection").collect();
    let interim = (100..200).contains(&h.status);
    for client in [Version::Http10, Version::Http11] {
        for close in [false, true] {
            let mut out = Vec::new();
            let relay = write_relayed_response_head(&h, client, close, b"", &mut out);
            let mut reparser = ResponseParser::new(ROOMY);
            let r = match reparser.parse(&out, head) {
                Ok(Some(r)) => r,
                other => panic!("relayed head does not parse: {other:?} {out:?}"),
            };
            assert_eq!(r.head_len, out.len());
            assert_eq!(r.version, Version::Http11);
            assert_eq!(r.status, h.status);
            let want_reason = if h.reason.is_empty() {
                reason_phrase(h.status)
            } else {
                h.reason
            };
            assert_eq!(r.reason, want_reason);

            let expected = match relay {
                BodyRelay::None => {
                    assert_eq!(h.framing, ResponseFraming::None);
                    ResponseFraming::None
                }
                BodyRelay::Length(n) => {
                    assert_eq!(h.framing, ResponseFraming::Length(n));
                    ResponseFraming::Length(n)
                }
                BodyRelay::Chunked => {
                    assert_eq!(h.framing, ResponseFraming::Chunked);
                    assert_eq!(client, Version::Http11);
                    ResponseFraming::Chunked
                }
                BodyRelay::Dechunk => {
                    assert_eq!(h.framing, ResponseFraming::Chunked);
                    assert_eq!(client, Version::Http10);
                    ResponseFraming::UntilClose
                }
                BodyRelay::UntilClose => {
                    assert_eq!(h.framing, ResponseFraming::UntilClose);
                    ResponseFraming::UntilClose
                }
            };
            assert_eq!(
                r.framing, expected,
                "relayed framing differs from {relay:?}"
            );
            if !interim {
                let must_close =
                    close || matches!(relay, BodyRelay::Dechunk | BodyRelay::UntilClose);
                assert_eq!(r.keep_alive, !must_close, "connection handling in {out:?}");
                let ka: Vec<&[u8]> = r.header_values("connection").collect();
                let want: &[&[u8]] = match (must_close, client) {
                    (true, _) => &[b"close"],
                    (false, Version::Http10) => &[b"keep-alive"],
                    (false, Version::Http11) => &[],
                };
                assert_eq!(ka, want);
            } else {
                assert_eq!(r.header("connection"), None);
            }
            if client == Version::Http10 {
                assert_eq!(r.header("transfer-encoding"), None);
            }
            let cl = r.header_values("content-length").count();
            assert!(cl <= 1);
            if relay == BodyRelay::None {
                let want = h.content_length.filter(|_| !interim && h.status != 204);
                assert_eq!(r.content_length, want);
            }

            // Fields the writer owns; everything else must be copied exactly.
            let own = |n: &str| {
                ["content-length", "transfer-encoding", "connection"]
                    .iter()
                    .any(|f| n.eq_ignore_ascii_case(f))
            };
            let copied: Vec<(&str, &[u8])> = r.headers().filter(|(n, _)| !own(n)).collect();
            let kept: Vec<(&str, &[u8])> = h
                .headers()
                .filter(|(n, _)| {
                    !own(n)
                        && !is_hop_by_hop(n, connection.iter().copied())
                        && (relay == BodyRelay::Chunked || !n.eq_ignore_ascii_case("trailer"))
                })
                .collect();
            assert_eq!(copied, kept, "end-to-end fields not relayed as sent");
        }
    }
}

/// Reads responses one after another the way the proxy will: parse, skip the
/// body, reset, continue with the rest.
fn check_sequence(data: &[u8]) {
    let mut parser = ResponseParser::new(Limits::default());
    let mut pos = 0;
    for _ in 0..16 {
        let rest = &data[pos..];
        let (head_len, framing, keep_alive) = match parser.parse(rest, false) {
            Ok(Some(h)) => (h.head_len, h.framing, h.keep_alive),
            _ => return,
        };
        let body = &rest[head_len..];
        let body_len = match framing {
            ResponseFraming::None => Some(0),
            ResponseFraming::Length(n) => sized_body(n, body),
            ResponseFraming::Chunked => chunked_body(body),
            ResponseFraming::UntilClose => {
                assert!(!keep_alive);
                return;
            }
        };
        let Some(body_len) = body_len else {
            return;
        };
        pos += head_len + body_len;
        parser.reset();
    }
}

/// Reads the input as a client request and forwards it with several option
/// sets; the result must be a valid HTTP/1.1 request with the same method,
/// framing and end-to-end fields, an origin-form target and the forwarding
/// fields on top.
fn check_forwarding(data: &[u8]) {
    let mut parser = Parser::new(Limits::default());
    let Ok(Some(req)) = parser.parse(data) else {
        return;
    };
    let connection: Vec<&[u8]> = req.header_values("connection").collect();
    let target = parse_target(req.target);
    let authority = match target {
        Ok(Target::Absolute { authority, .. }) => Some(authority),
        _ => None,
    };
    let option_sets = [
        (IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)), false, None),
        (IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)), true, None),
        (IpAddr::V6(Ipv6Addr::LOCALHOST), true, Some("backend:8080")),
        (
            IpAddr::V6(Ipv4Addr::new(198, 51, 100, 1).to_ipv6_mapped()),
            true,
            Some("[::1]"),
        ),
    ];
    for (client, forwarded, host) in option_sets {
        let opts = ForwardOptions {
            client,
            proto: "http",
            forwarded,
            host,
            body: crate::BodyForwarding::Streamed,
        };
        let mut out = Vec::new();
        write_forwarded_request(&req, &opts, &mut out);
        let mut reparser = Parser::new(ROOMY);
        let f = match reparser.parse(&out) {
            Ok(Some(f)) => f,
            other => panic!("forwarded request does not parse: {other:?} {out:?}"),
        };
        assert_eq!(f.head_len, out.len());
        assert_eq!(f.method, req.method);
        assert_eq!(f.version, Version::Http11);
        assert_eq!(f.framing, req.framing);
        assert!(f.keep_alive);
        assert_eq!(f.expect_continue, req.expect_continue);
        let want_host = host.or(authority).or(req.host).unwrap_or("");
        assert_eq!(f.host, Some(want_host));
        match (&target, parse_target(f.target)) {
            (
                Ok(Target::Absolute { path, query, .. }),
                Ok(Target::Origin { path: p, query: q }),
            ) => {
                assert_eq!((*path, *query), (p, q));
            }
            (Ok(Target::Absolute { .. }), other) => panic!("not converted: {other:?}"),
            _ => assert_eq!(f.target, req.target),
        }
        if req.framing == BodyFraming::Chunked {
            let te = f.header("transfer-encoding").unwrap_or_default();
            assert!(te.len() >= 7 && te[te.len() - 7..].eq_ignore_ascii_case(b"chunked"));
        }

        let own = |n: &str| {
            let mut fields = vec![
                "host",
                "content-length",
                "transfer-encoding",
                "connection",
                "via",
                // Request trailers are never passed on, so neither is the field announcing them.
                "trailer",
            ];
            if req.version == Version::Http10 {
                fields.push("expect");
            }
            if forwarded {
                fields.extend([
                    "x-forwarded-for",
                    "x-forwarded-proto",
                    "x-forwarded-host",
                    "forwarded",
                ]);
            }
            fields.iter().any(|f| n.eq_ignore_ascii_case(f))
        };
        let copied: Vec<(&str, &[u8])> = f.headers().filter(|(n, _)| !own(n)).collect();
        let kept: Vec<(&str, &[u8])> = req
            .headers()
            .filter(|(n, _)| !own(n) && !is_hop_by_hop(n, connection.iter().copied()))
            .collect();
        assert_eq!(copied, kept, "end-to-end fields not forwarded as sent");
        // Via: the client's, in order, then this hop's.
        let mut via: Vec<&[u8]> = if is_hop_by_hop("via", connection.iter().copied()) {
            Vec::new()
        } else {
            req.header_values("via").collect()
        };
        via.push(match req.version {
            Version::Http10 => b"1.0 fastpath",
            Version::Http11 => b"1.1 fastpath",
        });
        let sent: Vec<&[u8]> = f.header_values("via").collect();
        assert_eq!(sent, via, "Via is the client's list and then this hop");
        let conn: Vec<&[u8]> = f.header_values("connection").collect();
        assert_eq!(conn, [b"keep-alive"]);

        if forwarded {
            let ip = client.to_canonical().to_string();
            let xff: Vec<&[u8]> = f.header_values("x-forwarded-for").collect();
            assert_eq!(xff.len(), 1);
            assert!(xff[0].ends_with(ip.as_bytes()), "X-Forwarded-For {xff:?}");
            let fwd: Vec<&[u8]> = f.header_values("forwarded").collect();
            assert_eq!(fwd.len(), 1);
            // Quoted commas and client-sent quotes must not hide our element.
            let last = crate::syntax::list_elements(fwd[0])
                .last()
                .unwrap_or_default();
            let want = match client.to_canonical() {
                IpAddr::V4(ip) => format!("for={ip};"),
                IpAddr::V6(ip) => format!("for=\"[{ip}]\";"),
            };
            assert!(last.starts_with(want.as_bytes()), "Forwarded {fwd:?}");
            let proto: Vec<&[u8]> = f.header_values("x-forwarded-proto").collect();
            assert_eq!(proto, [b"http"]);
            assert!(f.header_values("x-forwarded-host").count() <= 1);
        }
    }
}
