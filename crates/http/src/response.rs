//! The response-head encoder: every response head fastpath sends is written
//! here, from a description of it, into a caller-owned buffer, so building one
//! allocates nothing once the buffer has grown to its working size.
//!
//! Two kinds of head leave the server, and both are written here so that the
//! status line, the framing and the `Connection` field follow one set of rules:
//!
//! - Heads fastpath makes itself ([`write_response_head`]): the status line,
//!   `Server` and `Date`, the representation's [`Metadata`] with the fields
//!   its status carries, extra fields, `Content-Length`, `Connection`. The
//!   middle part ([`Fields::write`]) can be written once and kept
//!   ([`HeadFields::Prebuilt`]), so a cached file's 200 costs a copy, not a
//!   formatting pass.
//! - Heads relayed from a backend ([`write_relayed_response_head`]), and the
//!   forms a backend response cache keeps of them
//!   ([`write_stored_response_head`], [`write_not_modified_head`]), which a hit
//!   completes with its `Age` ([`write_age_and_end`]).

use std::time::SystemTime;

use crate::backend::{ResponseFraming, ResponseHead};
use crate::body::{Framing, Http1Body, Sink};
use crate::conditional::write_http_date;
use crate::field_lines::{write_header, write_header_u64};
use crate::forward::{write_joined, HopByHop};
use crate::recode::{self, Recoding};
use crate::version::Version;

/// Standard reason phrase for `status` (RFC 9110 §15), or "" for codes we do
/// not know (the status line then ends "NNN \r\n", which RFC 9112 allows).
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// Appends "HTTP/1.1 {status} {reason}\r\n". `status` should be 100..=999;
/// other values are written as 500 so the line always has three digits.
#[inline]
pub fn write_status_line(status: u16, out: &mut Vec<u8>) {
    let status = if (100..=999).contains(&status) {
        status
    } else {
        500
    };
    status_line(status, reason_phrase(status), out);
}

/// "HTTP/1.1 {status} {reason}\r\n" for a status of at most three digits.
#[inline]
fn status_line(status: u16, reason: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(&[
        b'0' + (status / 100) as u8,
        b'0' + (status / 10 % 10) as u8,
        b'0' + (status % 10) as u8,
        b' ',
    ]);
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// What every head fastpath makes itself says after the status line, up to the date
/// (one copy for both fields).
const SERVER_DATE: &[u8] = b"Server: fastpath\r\nDate: ";

/// The representation metadata a head carries (RFC 9110 §8): what the static
/// content layer decides about a reply, before any bytes are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Metadata<'a> {
    /// `Location` (redirects).
    pub location: Option<&'a str>,
    /// `Content-Type`; written for 2xx statuses only.
    pub content_type: Option<&'a str>,
    /// `Content-Encoding`; written for 2xx statuses and 304 only.
    pub content_encoding: Option<&'a str>,
    /// `Last-Modified`, written as an HTTP-date.
    pub last_modified: Option<SystemTime>,
    /// `ETag`, quoted.
    pub etag: Option<&'a str>,
    /// `Accept-Ranges: bytes`.
    pub accept_ranges: bool,
    /// `Content-Range`.
    pub content_range: Option<&'a str>,
    /// `Vary: Accept-Encoding`.
    pub vary_accept_encoding: bool,
}

/// The fields of a head between `Date` and `Connection`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fields<'a> {
    /// The representation's fields, first.
    pub meta: Metadata<'a>,
    /// Further fields after the representation's, as whole lines each ending in
    /// CRLF, copied as they are: the caller's own constants (an error page's
    /// `Content-Type`, a 405's `Allow`), never text from a peer.
    pub extra: &'a [u8],
    /// `Content-Length`, last; `None` writes none (a 304, say).
    pub content_length: Option<u64>,
}

impl Fields<'_> {
    /// Appends the fields as a response with `status` carries them: a
    /// `Content-Type` only on a 2xx (an error page brings its own in `extra`),
    /// a `Content-Encoding` only on a 2xx or a 304 (RFC 9110 §15.4.5: a 304
    /// says what a 200 would have, less the content's type and length).
    pub fn write(&self, status: u16, out: &mut Vec<u8>) {
        let meta = &self.meta;
        if let Some(location) = meta.location {
            write_header("Location", location.as_bytes(), out);
        }
        if status < 300 || status == 304 {
            if let Some(content_type) = meta.content_type.filter(|_| status != 304) {
                write_header("Content-Type", content_type.as_bytes(), out);
            }
            if let Some(encoding) = meta.content_encoding {
                write_header("Content-Encoding", encoding.as_bytes(), out);
            }
        }
        if let Some(modified) = meta.last_modified {
            out.extend_from_slice(b"Last-Modified: ");
            write_http_date(modified, out);
            out.extend_from_slice(b"\r\n");
        }
        if let Some(etag) = meta.etag {
            write_header("ETag", etag.as_bytes(), out);
        }
        if meta.accept_ranges {
            out.extend_from_slice(b"Accept-Ranges: bytes\r\n");
        }
        if let Some(range) = meta.content_range {
            write_header("Content-Range", range.as_bytes(), out);
        }
        if meta.vary_accept_encoding {
            out.extend_from_slice(b"Vary: Accept-Encoding\r\n");
        }
        out.extend_from_slice(self.extra);
        if let Some(len) = self.content_length {
            write_header_u64("Content-Length", len, out);
        }
    }
}

/// Where the fields of a head come from.
#[derive(Debug, Clone, Copy)]
pub enum HeadFields<'a> {
    /// Written now.
    Write(Fields<'a>),
    /// Written before by [`Fields::write`] for the same status, and kept: copied
    /// as they are.
    Prebuilt(&'a [u8]),
}

/// A response head fastpath makes itself, for [`write_response_head`].
#[derive(Debug, Clone, Copy)]
pub struct Head<'a> {
    /// Status code; the reason phrase is the standard one.
    pub status: u16,
    /// The `Date` value (an IMF-fixdate), from the caller's clock, which formats
    /// it once a second rather than once a response.
    pub date: &'a [u8],
    /// Everything between `Date` and `Connection`.
    pub fields: HeadFields<'a>,
    /// The client's version: an HTTP/1.0 client is told when the connection stays.
    pub version: Version,
    /// The connection closes after this response.
    pub close: bool,
    /// Lines every response on the connection carries (`Strict-Transport-Security` on a
    /// TLS connection, say), whole lines each ending in CRLF, written before
    /// `Connection`: the server's own configuration, never text from a peer.
    pub also: &'a [u8],
    /// Changes the head once written (a module's header rules); `None` for most.
    pub edit: Option<&'a dyn HeadEdit>,
}

/// Changes a response head just written: `out[from..]` is the whole head, status line to
/// the empty line, and is left a whole head. How the server applies header rules to every
/// head it sends, whoever made it (its own answers, a backend's relayed, a cached one).
pub trait HeadEdit: Send + Sync + std::fmt::Debug {
    /// Edits the head at `out[from..]`.
    fn edit(&self, out: &mut Vec<u8>, from: usize);
}

/// Writes a whole response head fastpath makes itself: the status line,
/// `Server: fastpath`, `Date`, the fields, `Connection` (`close` when closing,
/// `keep-alive` to an HTTP/1.0 client that keeps the connection, else none),
/// and the empty line.
#[inline]
pub fn write_response_head(head: &Head<'_>, out: &mut Vec<u8>) {
    let from = out.len();
    write_status_line(head.status, out);
    out.extend_from_slice(SERVER_DATE);
    out.extend_from_slice(head.date);
    out.extend_from_slice(b"\r\n");
    match head.fields {
        HeadFields::Write(fields) => fields.write(head.status, out),
        HeadFields::Prebuilt(bytes) => out.extend_from_slice(bytes),
    }
    out.extend_from_slice(head.also);
    write_connection(head.version, head.close, out);
    out.extend_from_slice(b"\r\n");
    if let Some(edit) = head.edit {
        edit.edit(out, from);
    }
}

/// Writes the head of a response fastpath makes itself into `sink` ([`write_response_head`])
/// and gives the encoder of its body, framed by `framing`: the length its fields say, or
/// [`Framing::None`] for a HEAD request or a status without a body.
pub fn start_response<S: Sink>(head: &Head<'_>, framing: Framing, sink: &mut S) -> Http1Body {
    sink.write_with(|out| write_response_head(head, out));
    Http1Body::new(framing)
}

/// Writes the head relaying a backend's response to a client of `client_version` into
/// `sink` ([`write_relayed_response_head`]) and gives how its body is read from the backend
/// and the encoder that frames it for the client: a chunked body passes as it came to an
/// HTTP/1.1 client, and is decoded and delimited by the close for an HTTP/1.0 one. A body
/// `recoding` codes on the way is read decoded of its framing and framed anew: chunked for
/// an HTTP/1.1 client, by the close for an HTTP/1.0 one.
pub fn start_relayed_response<S: Sink>(
    head: &ResponseHead<'_>,
    (client_version, close): (Version, bool),
    (also, edit): (&[u8], Option<&dyn HeadEdit>),
    recoding: Recoding,
    sink: &mut S,
) -> (BodyRelay, Http1Body) {
    let relay = sink.write_with(|out| {
        let from = out.len();
        let relay = relay_head(head, client_version, close, also, (false, recoding), out);
        if let Some(edit) = edit {
            edit.edit(out, from);
        }
        relay
    });
    let framing = match relay {
        BodyRelay::None => Framing::None,
        _ if recoding.coding().is_some() => coded_framing(client_version),
        BodyRelay::Length(n) => Framing::Length(n),
        BodyRelay::Chunked => Framing::Framed,
        BodyRelay::Dechunk | BodyRelay::UntilClose => Framing::Close,
    };
    (relay, Http1Body::new(framing))
}

/// How a recoded body, whose length is unknown until its end, is framed for a client.
fn coded_framing(client_version: Version) -> Framing {
    if client_version == Version::Http11 {
        Framing::Chunked
    } else {
        Framing::Close
    }
}

/// Ends a head kept without its empty line ([`write_stored_response_head`],
/// [`write_not_modified_head`]) as a cache sends it to a `client` of that version
/// that the answer leaves open or, with `close`, not: the `Connection` field that
/// says so (a kept head has none: it is the same for every client), `Age: {age}`
/// (RFC 9111 §5.1), then the empty line; the connection's own lines `also` (see
/// [`Head::also`]) before them, since a kept head has none of its own.
pub fn write_age_and_end(age: u64, client: Version, close: bool, also: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(also);
    write_connection(client, close, out);
    write_header_u64("Age", age, out);
    out.extend_from_slice(b"\r\n");
}

/// The `Connection` field a response to a `version` client carries.
fn write_connection(version: Version, close: bool, out: &mut Vec<u8>) {
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if version == Version::Http10 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
}

/// How the body after a relayed response head must be sent to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyRelay {
    /// No body follows the head.
    None,
    /// Copy exactly this many bytes.
    Length(u64),
    /// Pass the chunked body through unchanged, last-chunk and trailers
    /// included ([`crate::ChunkedDecoder`] finds where it ends).
    Chunked,
    /// Decode the chunked body and send only its data; the end of the body
    /// is then marked by closing the client connection.
    Dechunk,
    /// Copy until the backend closes, then close the client connection.
    UntilClose,
}

/// Writes the response head to relay a backend response to a client that
/// spoke `client_version`, and returns how the body must be relayed.
///
/// - "HTTP/1.1 STATUS REASON", with the standard phrase when the backend
///   sent none.
/// - Every end-to-end field in order, Date and Server included (none is
///   added); hop-by-hop fields (see [`is_hop_by_hop`](crate::is_hop_by_hop)) and Content-Length
///   are dropped, and so is Trailer unless the chunks pass through.
/// - The framing for the relay: `Content-Length` for a length-delimited
///   body (and for HEAD and 304 responses that carried one); the backend's
///   Transfer-Encoding codings for an HTTP/1.1 client when the body is
///   passed through chunked or until close. An HTTP/1.0 client cannot take
///   Transfer-Encoding, so a chunked body is dechunked and ended by close.
/// - `Connection: close` if `close` or the body ends by closing, else
///   `Connection: keep-alive` for an HTTP/1.0 client. An interim (1xx)
///   response gets neither; it must not be sent to an HTTP/1.0 client.
/// - Before that, the connection's own lines `also` (see [`Head::also`]) on a final
///   response, each unless the backend sent a field of the same name: the backend's wins.
pub fn write_relayed_response_head(
    head: &ResponseHead<'_>,
    client_version: Version,
    close: bool,
    also: &[u8],
    out: &mut Vec<u8>,
) -> BodyRelay {
    relay_head(
        head,
        client_version,
        close,
        also,
        (false, Recoding::Unchanged),
        out,
    )
}

/// Writes the head a cache keeps of a backend response: as
/// [`write_relayed_response_head`] relays it to an HTTP/1.1 client that keeps
/// its connection, less every `Age` field and the empty line that ends the head,
/// since a cache states its own age when it answers ([`write_age_and_end`]).
/// Returns how the body is relayed (and so kept): only a body framed by length
/// or by chunks can be replayed; a body `recoding` codes is kept chunked, as coded.
pub fn write_stored_response_head(
    head: &ResponseHead<'_>,
    recoding: Recoding,
    out: &mut Vec<u8>,
) -> BodyRelay {
    let relay = relay_head(head, Version::Http11, false, b"", (true, recoding), out);
    match relay {
        BodyRelay::None => BodyRelay::None,
        _ if recoding.coding().is_some() => BodyRelay::Chunked,
        relay => relay,
    }
}

/// Writes the head of the `304 Not Modified` a cache answers a conditional
/// request for a stored `head` with: the status line and the fields RFC 9110
/// §15.4.5 has a 304 repeat (Cache-Control, Content-Location, Date, ETag,
/// Expires, Vary), and Server, as the stored response has them, without the
/// empty line that ends the head ([`write_age_and_end`] follows); with `ETag` and `Vary`
/// as `recoding` changed them in the stored response.
pub fn write_not_modified_head(head: &ResponseHead<'_>, recoding: Recoding, out: &mut Vec<u8>) {
    const REPEATED: [&str; 7] = [
        "cache-control",
        "content-location",
        "date",
        "etag",
        "expires",
        "vary",
        "server",
    ];
    write_status_line(304, out);
    let hop_by_hop = HopByHop::new(head.header_values("connection"));
    for (name, value) in head.headers() {
        if REPEATED.iter().any(|r| name.eq_ignore_ascii_case(r)) && !hop_by_hop.contains(name) {
            if recoding.coding().is_some() && name.eq_ignore_ascii_case("etag") {
                recode::write_weak_etag(value, out);
            } else {
                write_header(name, value, out);
            }
        }
    }
    if recoding.varies() && !recode::vary_covers_accept_encoding(head.header_values("vary")) {
        out.extend_from_slice(b"Vary: Accept-Encoding\r\n");
    }
}

/// The relayed head, or with `stored` the head a cache keeps (no `Age`, not ended), its
/// fields and framing changed as `recoding` says. Returns how the body is read from the
/// backend: a recoded one is read decoded of its chunks, whatever the client.
fn relay_head(
    head: &ResponseHead<'_>,
    client_version: Version,
    close: bool,
    also: &[u8],
    (stored, recoding): (bool, Recoding),
    out: &mut Vec<u8>,
) -> BodyRelay {
    let client_11 = client_version == Version::Http11;
    let coded = recoding.coding().is_some();
    let relay = match head.framing {
        ResponseFraming::None => BodyRelay::None,
        ResponseFraming::Length(n) => BodyRelay::Length(n),
        ResponseFraming::Chunked if client_11 && !coded => BodyRelay::Chunked,
        ResponseFraming::Chunked => BodyRelay::Dechunk,
        ResponseFraming::UntilClose => BodyRelay::UntilClose,
    };
    let interim = (100..200).contains(&head.status);

    let reason = if head.reason.is_empty() {
        reason_phrase(head.status)
    } else {
        head.reason
    };
    // Statuses are three digits (the parser accepts nothing else).
    status_line(head.status.min(999), reason, out);

    let hop_by_hop = HopByHop::new(head.header_values("connection"));
    for (name, value) in head.headers() {
        let managed = name.eq_ignore_ascii_case("content-length")
            || (relay != BodyRelay::Chunked && name.eq_ignore_ascii_case("trailer"))
            || (stored && name.eq_ignore_ascii_case("age"));
        if managed || hop_by_hop.contains(name) || (coded && recode::replaced_when_coded(name)) {
            continue;
        }
        if coded && name.eq_ignore_ascii_case("etag") {
            recode::write_weak_etag(value, out);
            continue;
        }
        write_header(name, value, out);
    }
    if !interim {
        recode::write_recoding_fields(recoding, head, out);
    }

    let framing_for_client = match relay {
        BodyRelay::None => BodyRelay::None,
        // Framed anew: chunked for an HTTP/1.1 client, by the close for an HTTP/1.0 one.
        _ if coded && client_11 => BodyRelay::Chunked,
        _ if coded => BodyRelay::Dechunk,
        relay => relay,
    };
    match framing_for_client {
        // A recoded HEAD response cannot know its coded length.
        BodyRelay::None if coded => {}
        BodyRelay::None => {
            // RFC 9110 §8.6: a HEAD or 304 response may state the length of
            // the body it omits; 1xx and 204 must not carry one at all.
            if let Some(n) = head
                .content_length
                .filter(|_| !interim && head.status != 204)
            {
                write_header_u64("Content-Length", n, out);
            }
        }
        BodyRelay::Length(n) => write_header_u64("Content-Length", n, out),
        BodyRelay::Chunked if coded => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        BodyRelay::Chunked | BodyRelay::UntilClose => {
            // The bytes keep the backend's transfer-codings, so the client
            // must be told them; only HTTP/1.1 clients understand them.
            if client_11 && head.header("transfer-encoding").is_some() {
                write_joined(
                    "Transfer-Encoding",
                    head.header_values("transfer-encoding"),
                    out,
                );
            }
        }
        BodyRelay::Dechunk => {}
    }

    if !interim {
        for line in also.split_inclusive(|&b| b == b'\n') {
            let name = line.split(|&b| b == b':').next().unwrap_or_default();
            let named = std::str::from_utf8(name).ok();
            if named.is_some_and(|name| head.header(name).is_none()) {
                out.extend_from_slice(line);
            }
        }
        let close = close
            || matches!(
                framing_for_client,
                BodyRelay::Dechunk | BodyRelay::UntilClose
            );
        write_connection(client_version, close, out);
    }
    if !stored {
        out.extend_from_slice(b"\r\n");
    }
    relay
}

#[cfg(test)]
#[path = "response_tests.rs"]
mod tests;
