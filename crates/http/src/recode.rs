//! Output filters that change a relayed response's content coding on the way to the
//! client (compression of a backend's responses).
//!
//! The relay asks the request's [`RecodeOffer`] about the backend's response head; the
//! answer, a [`Recode`], says whether the body passes as it came, passes as it came but
//! depends on `Accept-Encoding`, or goes through a [`BodyFilter`]. The head written for the
//! client says so ([`Recoding`]): a recoded body has no length known in advance, so it is
//! chunked for an HTTP/1.1 client and ended by the close for an HTTP/1.0 one.

use crate::ResponseHead;

/// A streaming transformation of a body into another content coding.
pub trait BodyFilter: Send {
    /// The content coding the output is in, for `Content-Encoding`.
    fn coding(&self) -> &'static str;
    /// Transforms `input`, appending to `out` what is ready.
    fn push(&mut self, input: &[u8], out: &mut Vec<u8>);
    /// Appends to `out` all that is needed to decode what was pushed so far: the relay
    /// calls it when the backend pauses, so that a body that streams (events, a long
    /// poll) reaches the client as it is made.
    fn flush(&mut self, out: &mut Vec<u8>);
    /// Ends the output, appending the rest to `out`.
    fn finish(&mut self, out: &mut Vec<u8>);
}

/// What becomes of one relayed response.
pub enum Recode {
    /// Relayed as the backend sent it.
    Unchanged,
    /// Relayed as sent, but a client sending another `Accept-Encoding` would have got
    /// another coding: the head says `Vary: Accept-Encoding`.
    Varies,
    /// The body goes through the filter.
    Coded(Box<dyn BodyFilter>),
}

impl Recode {
    /// How the head is written for this decision.
    pub fn head(&self) -> Recoding {
        match self {
            Recode::Unchanged => Recoding::Unchanged,
            Recode::Varies => Recoding::Varies,
            Recode::Coded(filter) => Recoding::Coded(filter.coding()),
        }
    }
}

impl std::fmt::Debug for Recode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.head() {
            Recoding::Unchanged => "Unchanged",
            Recoding::Varies => "Varies",
            Recoding::Coded(coding) => coding,
        })
    }
}

/// Decides, from a backend's response head, what becomes of the response to one request
/// (made per request: it knows what the client accepts).
pub trait RecodeOffer: Send + std::fmt::Debug {
    /// The decision for the response whose head is `head`.
    fn consider(&self, head: &ResponseHead<'_>) -> Recode;
}

/// How a relayed head is written for a [`Recode`] decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Recoding {
    /// As the backend sent it.
    #[default]
    Unchanged,
    /// With `Vary: Accept-Encoding` added unless the backend's `Vary` covers it.
    Varies,
    /// Coded on the way with this content coding: `Content-Encoding` says it, `Vary`
    /// as for [`Recoding::Varies`], a strong `ETag` made weak (the bytes differ from
    /// the backend's, and the backend still answers conditional requests for them, which
    /// compare weakly), and neither `Content-Length` nor `Accept-Ranges`, as the coded
    /// length is unknown and ranges of it are not served.
    Coded(&'static str),
}

impl Recoding {
    /// Whether the head must say `Vary: Accept-Encoding`.
    pub(crate) fn varies(self) -> bool {
        self != Recoding::Unchanged
    }

    /// The coding the body is recoded with.
    pub(crate) fn coding(self) -> Option<&'static str> {
        match self {
            Recoding::Coded(coding) => Some(coding),
            _ => None,
        }
    }
}

/// Whether the backend's `Vary` fields already name `Accept-Encoding` or `*`.
pub(crate) fn vary_covers_accept_encoding<'a>(mut values: impl Iterator<Item = &'a [u8]>) -> bool {
    values.any(|value| {
        value.split(|&b| b == b',').any(|member| {
            let member = member.trim_ascii();
            member == b"*" || member.eq_ignore_ascii_case(b"accept-encoding")
        })
    })
}

/// Writes what a recoded head adds: `Content-Encoding` and `Vary` as `recoding` says.
pub(crate) fn write_recoding_fields(
    recoding: Recoding,
    head: &ResponseHead<'_>,
    out: &mut Vec<u8>,
) {
    if let Some(coding) = recoding.coding() {
        out.extend_from_slice(b"Content-Encoding: ");
        out.extend_from_slice(coding.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if recoding.varies() && !vary_covers_accept_encoding(head.header_values("vary")) {
        out.extend_from_slice(b"Vary: Accept-Encoding\r\n");
    }
}

/// Whether a backend's field is replaced or dropped when its body is recoded.
pub(crate) fn replaced_when_coded(name: &str) -> bool {
    ["content-encoding", "accept-ranges", "content-md5"]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n))
}

/// Writes an `ETag` field of a recoded body: weak, as its bytes are not the backend's.
pub(crate) fn write_weak_etag(value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(b"ETag: ");
    if !value.starts_with(b"W/") {
        out.extend_from_slice(b"W/");
    }
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}
