//! Size limits. Every value here bounds memory or CPU an untrusted peer can
//! make us spend, so each one says why it has the value it has.

/// Longest request line (method, target, version; without CRLF) we accept.
/// 8 KiB matches common servers and proxies, so URLs that work elsewhere
/// work here and a client cannot park megabytes in one line.
pub const DEFAULT_MAX_REQUEST_LINE: usize = 8192;

/// Largest request head (request line, fields and blank line). 16 KiB holds
/// real browser heads with large cookies while bounding per-connection memory.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 16384;

/// Most header fields in one request. Real clients send 10-30; 100 leaves room
/// and bounds the span table and the per-request field scans.
pub const DEFAULT_MAX_HEADERS: usize = 100;

/// Empty lines skipped before a request line (RFC 9112 §2.2). A few cover
/// clients that send a stray CRLF after a body; more is garbage.
pub const MAX_LEADING_EMPTY_LINES: usize = 4;

/// Most byte ranges honoured in one Range header. More than this is treated
/// as if no Range was sent, which stops many-tiny-ranges amplification.
pub const MAX_RANGES: usize = 100;

/// Longest chunk-size line (size, extensions, CRLF) in a chunked body.
/// Extensions are skipped, so this only bounds how long a peer can stall us.
pub const MAX_CHUNK_LINE: usize = 4096;

/// Largest trailer section of a chunked body. Trailers are skipped; the same
/// budget as a request head keeps them from being a cheaper way to stall.
pub const MAX_TRAILER_BYTES: usize = DEFAULT_MAX_HEADER_BYTES;

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
