//! Size limits. Each bounds memory or CPU an untrusted peer can make us
//! spend, and says why it has its value.

/// Longest request line (no CRLF): 8 KiB, what common servers and proxies allow.
pub const DEFAULT_MAX_REQUEST_LINE: usize = 8192;

/// Largest request head: 16 KiB fits real browser heads with big cookies.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 16384;

/// Most header fields: real clients send 10-30, so 100 is generous but bounded.
pub const DEFAULT_MAX_HEADERS: usize = 100;

/// Empty lines skipped before a request (RFC 9112 §2.2): enough for stray CRLFs.
pub const MAX_LEADING_EMPTY_LINES: usize = 4;

/// Most Range specs honoured: more is ignored, to stop many-tiny-ranges abuse.
pub const MAX_RANGES: usize = 100;

/// Longest chunk-size line, CRLF included: extensions are checked and then
/// ignored, so this only bounds what a client can make us scan per chunk.
pub const MAX_CHUNK_LINE: usize = 4096;

/// Most hex digits in a chunk size, leading zeros included: 16 digits hold
/// every u64, so no size overflows, and no size can be padded past what a
/// backend reading a fixed-width number would take (Go's net/http refuses
/// more digits too).
pub const MAX_CHUNK_SIZE_DIGITS: usize = 16;

/// Largest trailer section: same budget as a request head.
pub const MAX_TRAILER_BYTES: usize = DEFAULT_MAX_HEADER_BYTES;

/// Most trailer fields: as many as a request head may carry.
pub const MAX_TRAILER_FIELDS: usize = DEFAULT_MAX_HEADERS;

/// Per-parser limits for request heads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest request line without its line terminator; longer gives 414.
    pub max_request_line: usize,
    /// Largest whole head, blank line included; larger gives 431.
    pub max_header_bytes: usize,
    /// Most header fields; more gives 431.
    pub max_headers: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_line: DEFAULT_MAX_REQUEST_LINE,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            max_headers: DEFAULT_MAX_HEADERS,
        }
    }
}
