//! The HTTP/1.x protocol layer of fastpath, with no I/O in it.
//!
//! Where it sits among fastpath's crates, and what it must not do: docs/architecture.md.
//!
//! Bytes go in, decisions and bytes come out: [`Parser`] turns a read buffer
//! into a [`Request`] view (or an error carrying the status to answer with),
//! [`ChunkedDecoder`] unframes chunked bodies, and the helper functions read
//! request-targets, paths, ranges, validators and Accept-Encoding. One
//! response-head encoder writes every head the server sends: its own
//! ([`write_response_head`], from a [`Head`] and the representation's
//! [`Metadata`]) and those relayed from a backend
//! ([`write_relayed_response_head`]), including the forms a response cache
//! keeps. For the proxy path, [`ResponseParser`] reads backend response heads
//! and [`write_forwarded_request`] writes the request passed on.
//! HTTP/2's frame layer and its header compression, HPACK, are in [`h2`].
//!
//! Why it is shaped this way:
//! - **Sans-I/O.** The server owns sockets, buffers and timeouts; this crate
//!   owns the protocol. Keeping them apart means every rule here can be
//!   tested — and fuzzed — with plain byte slices, and the same code serves
//!   any I/O driver.
//! - **Borrowing, not copying.** A [`Request`] is a set of offsets into the
//!   caller's buffer; the [`Parser`] reuses its field table across requests,
//!   so the hot path allocates nothing after warm-up.
//! - **Split-invariant.** Parsing is incremental (O(n) however the bytes
//!   trickle in) and its result depends only on the bytes, not on how reads
//!   split them. The hidden `fuzzing` module checks exactly that.
//!
//! ```
//! use fastpath_http::{normalize_path, parse_target, BodyFraming, Limits, Parser, Target};
//!
//! let mut parser = Parser::new(Limits::default());
//! let buf = b"GET /docs/../index.html?x=1 HTTP/1.1\r\nHost: example.com\r\n\r\n";
//!
//! // A prefix is not enough yet...
//! assert!(parser.parse(&buf[..20]).unwrap().is_none());
//! // ...and the full head parses without rescanning the prefix.
//! let req = parser.parse(buf).unwrap().expect("complete head");
//! assert_eq!(req.method, "GET");
//! assert_eq!(req.host, Some("example.com"));
//! assert_eq!(req.framing, BodyFraming::None);
//! assert!(req.keep_alive);
//!
//! let Target::Origin { path, query } = parse_target(req.target).unwrap() else {
//!     panic!("origin-form expected");
//! };
//! assert_eq!(query, Some("x=1"));
//! let mut fs_path = Vec::new();
//! normalize_path(path, &mut fs_path).unwrap();
//! assert_eq!(fs_path, b"/index.html");
//! ```
#![deny(missing_docs)]

mod backend;
mod body;
mod chunked;
mod conditional;
mod encoding;
mod error;
mod field_lines;
mod fields;
mod forward;
pub mod h2;
mod head;
mod limits;
mod method;
mod range;
mod recode;
mod request;
mod response;
mod syntax;
mod target;
#[cfg(test)]
mod testing;
mod version;

#[doc(hidden)]
pub mod fuzzing;

pub use backend::{ResponseFraming, ResponseHead, ResponseParser};
pub use body::{Framing, Http1Body, Piece, Sink};
pub use chunked::{ChunkedDecoder, FORBIDDEN_TRAILERS};
pub use conditional::{civil_from_days, etag_list_matches, parse_http_date, write_http_date};
pub use encoding::{parse_accept_encoding, AcceptEncoding};
pub use error::RequestError;
pub use field_lines::{write_header, write_header_u64};
pub use forward::{
    is_hop_by_hop, only_chunked, write_forwarded_request, BodyForwarding, ForwardOptions, HopByHop,
};
pub use limits::{
    Limits, DEFAULT_MAX_HEADERS, DEFAULT_MAX_HEADER_BYTES, DEFAULT_MAX_REQUEST_LINE,
    MAX_CHUNK_LINE, MAX_CHUNK_SIZE_DIGITS, MAX_LEADING_EMPTY_LINES, MAX_RANGES, MAX_TRAILER_BYTES,
    MAX_TRAILER_FIELDS,
};
pub use method::{is_registered_method, Method};
pub use range::{parse_range, RangeRequest};
pub use recode::{BodyFilter, Recode, RecodeOffer, Recoding};
pub use request::{BodyFraming, Noted, Parser, Request};
pub use response::{
    reason_phrase, start_relayed_response, start_response, write_age_and_end,
    write_not_modified_head, write_relayed_response_head, write_response_head, write_status_line,
    write_stored_response_head, BodyRelay, Fields, Head, HeadEdit, HeadFields, Metadata,
};
pub use target::{is_valid_host, normalize_path, parse_target, PathError, Target};
pub use version::Version;
