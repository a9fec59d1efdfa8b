//! HTTP/2 (RFC 9113), written for fastpath rather than taken from a crate, so
//! that its frames can carry shared buffers and file ranges without a copy
//! and its queues are budgeted in one place. It holds the frame layer:
//! [`frame`] (the preface, every frame type read, checked and written),
//! [`block`] (HEADERS and CONTINUATION joined into field blocks under a
//! budget) and [`window`] (flow-control arithmetic); header compression:
//! [`hpack`] (RFC 7541) and its [`huffman`] code; a request's header block
//! checked and written as an HTTP/1.1 head ([`request`]); and the server side
//! of a connection ([`conn`]): stream states, flow control both ways,
//! settings, priorities (RFC 9218) and the budgets that bound what a client
//! can make it do, as bytes in, events and bytes out, for the server's glue
//! to drive.
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

pub mod block;
pub mod conn;
pub mod frame;
pub mod hpack;
pub mod huffman;
pub mod request;
pub mod window;

pub use block::{
    Assembled, HeaderBlock, HeaderBlockAssembler, HeaderBlockLimits, DEFAULT_MAX_BLOCK_SIZE,
    DEFAULT_MAX_CONTINUATIONS,
};
pub use conn::{
    Connection, Event, Priority, ServerSettings, CONTROL_FRAMES_PER_REQUEST,
    CONTROL_FRAME_BUDGET_BASE, CONTROL_HIGH_WATER, DEFAULT_CONNECTION_WINDOW_SIZE,
    DEFAULT_MAX_CONCURRENT_STREAMS, DEFAULT_MAX_REQUESTS, RESETS_PER_COMPLETED_STREAM,
    RESET_BUDGET_BASE,
};
pub use frame::{
    detect_preface, flags, setting_id, write_data_header, write_goaway, write_headers, write_ping,
    write_ping_ack, write_rst_stream, write_settings, write_settings_ack, write_window_update,
    ErrorCode, ErrorScope, Frame, FrameError, FrameHeader, FrameReader, FrameType, PrefaceMatch,
    Reason, Setting, Settings, DEFAULT_INITIAL_WINDOW_SIZE, DEFAULT_MAX_FRAME_SIZE,
    FRAME_HEADER_LEN, MAX_FRAME_SIZE_LIMIT, MAX_WINDOW_SIZE, PREFACE,
};
pub use hpack::{
    encode_without_table, DecodeLimits, Decoder, Encoder, Field, HpackError, Representation,
    DEFAULT_MAX_FIELDS, DEFAULT_MAX_HEADER_LIST_SIZE, DEFAULT_TABLE_SIZE, MAX_ENCODER_TABLE_SIZE,
};
pub use request::{
    check_trailer_field, Http1Head, MalformedRequest, ParsedRequest, RequestBody, RequestHead,
};
pub use window::Window;
