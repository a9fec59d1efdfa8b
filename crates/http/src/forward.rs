//! The request head sent to a backend (RFC 9110 §7.6, RFC 9112 §3, RFC 7239),
//! and which fields are hop-by-hop. The response head relayed back is written
//! by the response-head encoder (`response.rs`), with the same rules.
//!
//! The writer copies end-to-end fields in order, drops hop-by-hop ones, and
//! emits the framing and connection fields itself, because those describe
//! the connection being written to, not the one the message came from. It
//! appends to a caller-owned buffer and allocates nothing else.

use crate::field_lines::{write_header, write_header_u64};
use crate::request::{BodyFraming, Request};
use crate::syntax::{is_token, list_elements};
use crate::target::{parse_target, Target};
use crate::version::Version;
use std::io::Write as _;
use std::net::IpAddr;

/// Fields that only ever describe one connection (RFC 9110 §7.6.1).
///
/// Trailer is not here: it is end-to-end in RFC 9110 (a relayed response
/// keeps it, with its chunks and trailers as they came). A forwarded request
/// drops it all the same, since request trailers are never passed on (see
/// [`write_forwarded_request`]). Proxy-Authenticate
/// and Proxy-Authorization are not here either: fastpath is a gateway that
/// does no proxy authentication itself, so a challenge from the backend and
/// the client's answer to it belong to the end-to-end exchange.
const HOP_BY_HOP: [&str; 6] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "transfer-encoding",
    "upgrade",
];

/// Whether the field `name` is hop-by-hop and must not be forwarded: one of
/// Connection, Keep-Alive, Proxy-Connection, TE, Transfer-Encoding and
/// Upgrade, or a field named by a connection option in `connection`, the
/// values of the message's Connection fields (e.g.
/// `req.header_values("connection")`).
///
/// Trailer, Proxy-Authenticate and Proxy-Authorization are end-to-end here;
/// see the module source for why.
pub fn is_hop_by_hop<'v>(name: &str, connection: impl IntoIterator<Item = &'v [u8]>) -> bool {
    HopByHop::new(connection).contains(name)
}

/// Connection options kept inline; a message naming more spills to the heap.
const INLINE_OPTIONS: usize = 8;

/// The hop-by-hop field names of one message, worked out once: the fixed ones and the
/// options its Connection fields name. Checking every field of a message against the
/// Connection values directly would parse those values once per field.
pub struct HopByHop<'m> {
    inline: [&'m [u8]; INLINE_OPTIONS],
    len: usize,
    spilled: Vec<&'m [u8]>,
}

impl<'m> HopByHop<'m> {
    /// Collects the options of `connection`, the values of the message's Connection fields.
    pub fn new(connection: impl IntoIterator<Item = &'m [u8]>) -> Self {
        let mut set = HopByHop {
            inline: [&[]; INLINE_OPTIONS],
            len: 0,
            spilled: Vec::new(),
        };
        for value in connection {
            for option in list_elements(value) {
                if set.len < INLINE_OPTIONS {
                    set.inline[set.len] = option;
                    set.len += 1;
                } else {
                    set.spilled.push(option);
                }
            }
        }
        set
    }

    /// Whether the field `name` is hop-by-hop in this message.
    pub fn contains(&self, name: &str) -> bool {
        let fixed = match name.len() {
            2 | 7 | 10 | 16 | 17 => HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h)),
            _ => false,
        };
        fixed
            || self.inline[..self.len]
                .iter()
                .chain(&self.spilled)
                .any(|option| option.eq_ignore_ascii_case(name.as_bytes()))
    }
}

/// What [`write_forwarded_request`] needs to know beyond the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardOptions<'a> {
    /// Address of the client the request came from. IPv4-mapped IPv6
    /// addresses (from dual-stack sockets) are written as IPv4.
    pub client: IpAddr,
    /// Scheme the client used, normally "http".
    pub proto: &'a str,
    /// Add forwarding fields: X-Forwarded-For and Forwarded (RFC 7239) are
    /// appended to what the client sent; X-Forwarded-Proto and
    /// X-Forwarded-Host are replaced, as a backend that trusts them must not
    /// see the client's own values. When false, those fields pass through
    /// untouched like any other end-to-end field.
    pub forwarded: bool,
    /// Host to send instead of the client's. When it differs from the
    /// client's and `forwarded` is set, the client's host goes in
    /// X-Forwarded-Host and in Forwarded's `host=`, so the backend can still
    /// build its own URLs.
    pub host: Option<&'a str>,
    /// How the request body goes to the backend, which decides the framing
    /// fields written.
    pub body: BodyForwarding,
}

/// How a request body is passed on ([`ForwardOptions::body`]). Either way the
/// backend gets a body framed anew from what the proxy decoded, never the
/// client's bytes as they came, so a body the proxy reads one way cannot be
/// read another way by the backend (request smuggling): a body framed by
/// length keeps its `Content-Length`, and a chunked one goes either by length
/// or chunked anew, without chunk extensions and without trailers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BodyForwarding {
    /// Passed on as it arrives: `Content-Length: n` for a body framed by
    /// length; for a chunked one `Transfer-Encoding` with the client's other
    /// codings and a bare `chunked` last, the caller sending the decoded data
    /// in chunks of its own. Expect is passed on (for an HTTP/1.1 client).
    #[default]
    Streamed,
    /// Read whole before the backend is asked: Expect is dropped, since the
    /// proxy has answered it itself. Framed as [`BodyForwarding::Streamed`]
    /// says, except a body whose only coding is chunked: see
    /// [`BodyForwarding::Open`].
    Buffered,
    /// As [`BodyForwarding::Buffered`], for a chunked body whose only coding
    /// is chunked, whose length is known only once it has been read: no
    /// framing field and no blank line are written, for the caller to end the
    /// head with `Content-Length` and the blank line.
    Open,
}

/// Whether a chunked request's body can go to a backend framed by length
/// once decoded: chunked is its only transfer coding. Other codings (gzip
/// before chunked, say) stay with the body, which must then go chunked
/// (RFC 9112 §6.1: a request with a Transfer-Encoding ends it with chunked,
/// and Content-Length never goes with Transfer-Encoding).
pub fn only_chunked(req: &Request<'_>) -> bool {
    req.header_values("transfer-encoding")
        .flat_map(list_elements)
        .all(|coding| coding_name(coding).eq_ignore_ascii_case(b"chunked"))
}

/// A transfer coding's name, without its parameters.
fn coding_name(element: &[u8]) -> &[u8] {
    let name = match memchr::memchr(b';', element) {
        Some(p) => &element[..p],
        None => element,
    };
    let start = name
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(name.len());
    let end = name
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(start, |p| p + 1);
    &name[start..end.max(start)]
}

/// Writes the head of the request to send to a backend for `req` (parsed by
/// [`crate::Parser`]).
///
/// - Request line: the method, the target in origin-form (an absolute-form
///   target becomes its path and query, and its authority becomes the Host),
///   and HTTP/1.1. Asterisk- and authority-form targets, and targets
///   [`parse_target`] rejects, are written as received.
/// - Host first: `opts.host`, else the absolute-form authority, else the
///   client's Host, else empty (RFC 9112 §3.2 wants Host in HTTP/1.1 even
///   when there is no authority).
/// - Every end-to-end field in order; hop-by-hop fields (see
///   [`is_hop_by_hop`]), Host and the framing fields are dropped.
/// - The body framing as [`ForwardOptions::body`] says: `Content-Length: n`,
///   or the client's codings other than chunked with a bare `chunked` last
///   (the caller chunks the decoded body anew: chunk extensions and trailers
///   are never passed on, so Trailer is dropped too), or nothing for an
///   [`BodyForwarding::Open`] head. Nothing for a request without a body.
/// - `Connection: keep-alive`: backend connections are reused.
/// - `Via: 1.1 fastpath` (or `1.0` for an HTTP/1.0 client) after any Via the client sent,
///   as RFC 9110 §7.6.3 requires of a gateway.
/// - The forwarding fields when `opts.forwarded` is set, then the blank line.
///
/// Expect is passed on for HTTP/1.1 clients whose body is streamed, so a
/// backend may answer 100 Continue; relaying or swallowing that interim
/// response is the caller's choice. A buffered body's Expect is dropped. An HTTP/1.0 client's Expect is dropped, as RFC 9110 §10.1.1 says
/// to ignore it. Upgrade is dropped, so protocol switches never reach the
/// backend.
pub fn write_forwarded_request(req: &Request<'_>, opts: &ForwardOptions<'_>, out: &mut Vec<u8>) {
    out.extend_from_slice(req.method.as_bytes());
    out.push(b' ');
    let mut authority = None;
    match parse_target(req.target) {
        Ok(Target::Absolute {
            authority: a,
            path,
            query,
            ..
        }) => {
            authority = Some(a);
            out.extend_from_slice(path.as_bytes());
            if let Some(q) = query {
                out.push(b'?');
                out.extend_from_slice(q.as_bytes());
            }
        }
        _ => out.extend_from_slice(req.target.as_bytes()),
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");

    // RFC 9112 §3.2.2: an absolute-form target overrides any Host field.
    let client_host = authority.or(req.host);
    let host = opts.host.or(client_host).unwrap_or("");
    write_header("Host", host.as_bytes(), out);
    let original_host =
        client_host.filter(|c| opts.host.is_some_and(|h| !h.eq_ignore_ascii_case(c)));

    let hop_by_hop = HopByHop::new(req.header_values("connection"));
    for (name, value) in req.headers() {
        let managed = name.eq_ignore_ascii_case("host")
            || name.eq_ignore_ascii_case("content-length")
            // Request trailers are never passed on (see `BodyForwarding`).
            || name.eq_ignore_ascii_case("trailer")
            || (opts.body != BodyForwarding::Streamed && name.eq_ignore_ascii_case("expect"))
            || (opts.forwarded && is_forwarding_field(name))
            // RFC 9110 §10.1.1: an HTTP/1.0 client's expectation is ignored,
            // and sent on as HTTP/1.1 it would be revived.
            || (req.version == Version::Http10 && name.eq_ignore_ascii_case("expect"));
        if managed || hop_by_hop.contains(name) {
            continue;
        }
        write_header(name, value, out);
    }

    match req.framing {
        BodyFraming::None => {}
        BodyFraming::Length(n) => write_header_u64("Content-Length", n, out),
        BodyFraming::Chunked if opts.body == BodyForwarding::Open => {}
        BodyFraming::Chunked => {
            // The codings applied to the content stay; chunked is the proxy's own, written
            // bare: its parameters, like chunk extensions, described the client's bytes.
            let start = begin_field("Transfer-Encoding", out);
            for coding in req
                .header_values("transfer-encoding")
                .flat_map(list_elements)
            {
                if !coding_name(coding).eq_ignore_ascii_case(b"chunked") {
                    push_element(start, coding, out);
                }
            }
            push_element(start, b"chunked", out);
            end_field(start, out);
        }
    }
    write_header("Connection", b"keep-alive", out);
    // RFC 9110 §7.6.3: a gateway MUST add Via to each request it forwards, naming the
    // protocol it received; the pseudonym stands for this hop. The client's own Via fields
    // went before it, in order, so the list reads from the client on.
    write_header(
        "Via",
        match req.version {
            Version::Http10 => b"1.0 fastpath",
            Version::Http11 => b"1.1 fastpath",
        },
        out,
    );

    if opts.forwarded {
        let client = opts.client.to_canonical();
        // Existing values are kept unless the client itself declared the
        // field hop-by-hop, in which case it never was meant for us to pass on.
        let start = begin_field("X-Forwarded-For", out);
        if !hop_by_hop.contains("X-Forwarded-For") {
            for v in req.header_values("x-forwarded-for") {
                push_element(start, v, out);
            }
        }
        separate(start, out);
        write_ip(client, out);
        end_field(start, out);

        write_header("X-Forwarded-Proto", opts.proto.as_bytes(), out);
        if let Some(h) = original_host {
            write_header("X-Forwarded-Host", h.as_bytes(), out);
        }

        let start = begin_field("Forwarded", out);
        if !hop_by_hop.contains("Forwarded") {
            // An unterminated quoted-string would swallow the element we
            // append, so such a line is dropped rather than passed on.
            for v in req.header_values("forwarded").filter(|v| quotes_closed(v)) {
                push_element(start, v, out);
            }
        }
        separate(start, out);
        // RFC 7239 §6: an IPv6 node is bracketed, and ':' forces quoting.
        match client {
            IpAddr::V4(_) => {
                out.extend_from_slice(b"for=");
                write_ip(client, out);
            }
            IpAddr::V6(ip) => {
                let _ = write!(out, "for=\"[{ip}]\"");
            }
        }
        out.extend_from_slice(b";proto=");
        push_param_value(opts.proto.as_bytes(), out);
        if let Some(h) = original_host {
            out.extend_from_slice(b";host=");
            push_param_value(h.as_bytes(), out);
        }
        end_field(start, out);
    }
    if !(opts.body == BodyForwarding::Open && req.framing == BodyFraming::Chunked) {
        out.extend_from_slice(b"\r\n");
    }
}

/// Writes an address as text; IPv4, the common case, without the formatting machinery,
/// which costs more than the rest of a forwarded head's fields together.
fn write_ip(ip: IpAddr, out: &mut Vec<u8>) {
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                if octet >= 100 {
                    out.push(b'0' + octet / 100);
                }
                if octet >= 10 {
                    out.push(b'0' + octet / 10 % 10);
                }
                out.push(b'0' + octet % 10);
            }
        }
        IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

/// Fields `forwarded` takes over: the lists it appends to and the single
/// values it replaces.
fn is_forwarding_field(name: &str) -> bool {
    [
        "x-forwarded-for",
        "x-forwarded-proto",
        "x-forwarded-host",
        "forwarded",
    ]
    .iter()
    .any(|f| name.eq_ignore_ascii_case(f))
}

/// Starts "Name: " and returns where the value begins.
fn begin_field(name: &str, out: &mut Vec<u8>) -> usize {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.len()
}

/// Ends a field begun by [`begin_field`]. CR and LF in the value become
/// spaces, as in [`write_header`], so no caller-supplied text can inject a
/// header line.
fn end_field(value_start: usize, out: &mut Vec<u8>) {
    for b in &mut out[value_start..] {
        if *b == b'\r' || *b == b'\n' {
            *b = b' ';
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// Writes ", " unless the value is still empty.
fn separate(value_start: usize, out: &mut Vec<u8>) {
    if out.len() > value_start {
        out.extend_from_slice(b", ");
    }
}

/// Appends the elements of one field line's list value, dropping the empty
/// elements recipients must tolerate (RFC 9110 §5.6.1) so the joined list
/// is clean.
fn push_element(value_start: usize, value: &[u8], out: &mut Vec<u8>) {
    for elem in list_elements(value) {
        separate(value_start, out);
        out.extend_from_slice(elem);
    }
}

/// Writes every value of a list field on one line.
pub(crate) fn write_joined<'v>(
    name: &str,
    values: impl Iterator<Item = &'v [u8]>,
    out: &mut Vec<u8>,
) {
    let start = begin_field(name, out);
    for v in values {
        push_element(start, v, out);
    }
    end_field(start, out);
}

/// Whether every quoted-string in `v` ends (RFC 9110 §5.6.4).
fn quotes_closed(v: &[u8]) -> bool {
    let mut in_quotes = false;
    let mut escaped = false;
    for &b in v {
        if escaped {
            escaped = false;
        } else if in_quotes && b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            in_quotes = !in_quotes;
        }
    }
    !in_quotes
}

/// A Forwarded parameter value: a token as is, anything else as a
/// quoted-string (RFC 7239 §4).
fn push_param_value(v: &[u8], out: &mut Vec<u8>) {
    if is_token(v) {
        out.extend_from_slice(v);
        return;
    }
    out.push(b'"');
    for &b in v {
        if b == b'"' || b == b'\\' {
            out.push(b'\\');
        }
        out.push(b);
    }
    out.push(b'"');
}

#[cfg(test)]
#[path = "forward_tests.rs"]
mod tests;
