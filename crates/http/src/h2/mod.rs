//! HTTP/2 (RFC 9113), written for fastpath rather than taken from a crate, so
//! that its frames can carry shared buffers and file ranges without a copy
//! and its queues are budgeted in one place. For now it holds header
//! compression: [`hpack`] (RFC 7541) and its [`huffman`] code, and a request's
//! header block checked and written as an HTTP/1.1 head ([`request`]).
//!
//! ```
//! use fastpath_http::h2::{encode_without_table, DecodeLimits, Decoder, Field};
//!
//! // A cached response head, encoded once for any connection.
//! let mut head = Vec::new();
//! encode_without_table([Field::new(b":status", b"404")], &mut head);
//! assert_eq!(head, [0x8d]); // index 13 of the static table
//!
//! let mut status = Vec::new();
//! Decoder::new(4096)
//!     .decode(&head, &DecodeLimits::default(), |_, value, _| status.extend_from_slice(value))
//!     .unwrap();
//! assert_eq!(status, b"404");
//! ```

pub mod hpack;
pub mod huffman;
pub mod request;

pub use hpack::{
    encode_without_table, DecodeLimits, Decoder, Encoder, Field, HpackError, Representation,
    DEFAULT_MAX_FIELDS, DEFAULT_MAX_HEADER_LIST_SIZE, DEFAULT_TABLE_SIZE, MAX_ENCODER_TABLE_SIZE,
};
pub use request::{check_trailer_field, MalformedRequest, RequestBody, RequestHead};
