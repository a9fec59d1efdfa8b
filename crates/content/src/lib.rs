//! The static content layer of fastpath: given an already-parsed request for a
//! path, decide what the reply is — which file (or byte ranges of it), with
//! which status and representation metadata.
//!
//! Where it sits among fastpath's crates, and what it must not do: docs/architecture.md.
//!
//! # Why it is shaped this way
//!
//! * **No I/O on sockets, no wire format of its own.** [`Site::serve`] takes
//!   the few header values that matter ([`StaticRequest`]) and returns a
//!   [`Reply`] describing status, metadata ([`Reply::metadata`]) and a
//!   [`Body`] made of an open file plus offsets. The server owns framing and
//!   transmission (e.g. `sendfile`), and `fastpath-http`'s response-head
//!   encoder writes the fields; a cached file keeps that encoder's bytes for
//!   its 200 ([`Reply::fields`]), so a hit copies them instead of formatting
//!   them again, and they cannot differ from what the encoder would write.
//! * **Descriptors, not paths.** Every path is resolved with `openat2(2)`
//!   beneath a root directory descriptor (`RESOLVE_BENEATH`), so symlinks
//!   cannot lead outside the document root; after opening, only the
//!   descriptor is consulted (`fstat`), so length, `ETag` and
//!   `Last-Modified` always describe the bytes that descriptor will deliver,
//!   even if the path is replaced meanwhile. Kernels or sandboxes without
//!   `openat2` get a documented, racier `realpath` fallback.
//! * **Conservative range handling.** Ranges are coalesced and capped
//!   ([`MAX_MULTIPART_RANGES`]) so a request cannot make the server emit
//!   many tiny parts.
//!
//! Header values (`Range`, entity-tag lists, dates, `Accept-Encoding`) are read
//! with `fastpath-http`'s parsers. Requests this layer should not answer are
//! the business of the hand-over crate beside it, `fastpath-handover`.
//!
//! # Example
//!
//! ```
//! use fastpath_content::{Body, Site, SiteOptions, StaticRequest};
//!
//! let dir = tempfile::tempdir()?;
//! std::fs::write(dir.path().join("hello.txt"), "hello")?;
//! let site = Site::open(dir.path(), SiteOptions::default())?;
//!
//! let reply = site.serve(&StaticRequest {
//!     path: b"/hello.txt",
//!     raw_path: "/hello.txt",
//!     ..StaticRequest::default()
//! });
//! assert_eq!(reply.status, 200);
//! assert_eq!(reply.content_type.as_deref(), Some("text/plain; charset=utf-8"));
//! assert_eq!(reply.content_length, 5);
//! assert!(matches!(reply.body, Body::File { offset: 0, len: 5, .. }));
//! # Ok::<(), std::io::Error>(())
//! ```
#![deny(missing_docs)]

use std::borrow::Cow;
use std::fs::File;
use std::sync::Arc;
use std::time::SystemTime;

use fastpath_http::Metadata;

mod cache;
mod open;
mod ranges;
mod resource;
mod site;
mod watch;

pub use cache::{CacheLimits, CacheStats, ContentCache, DEFAULT_COPY_BELOW};
pub use ranges::{MAX_MULTIPART_RANGES, MERGE_GAP};
pub use site::Site;
pub use watch::shared_generations;

/// How a [`Site`] maps paths to files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteOptions {
    /// File names tried, in order, for a request ending in `/`.
    pub index: Vec<String>,
    /// Serve paths with a segment starting with `.` (otherwise 404, except a
    /// leading `.well-known` segment, RFC 8615).
    pub dotfiles: bool,
    /// Serve `X.br` / `X.gz` siblings in place of `X` when the client
    /// accepts that coding.
    pub precompressed: bool,
}

impl Default for SiteOptions {
    /// `index.html` as the index, no dotfiles, no precompressed variants.
    fn default() -> Self {
        SiteOptions {
            index: vec!["index.html".to_owned()],
            dotfiles: false,
            precompressed: false,
        }
    }
}

/// The parts of a GET or HEAD request that decide a static reply.
///
/// Header fields are the raw field values (already joined if repeated).
#[derive(Debug, Clone, Copy, Default)]
pub struct StaticRequest<'a> {
    /// HEAD: same reply as GET except that `Range`/`If-Range` are ignored
    /// (RFC 9110 §14.2 defines ranges for GET only). The server must not
    /// send the body.
    pub head: bool,
    /// Decoded, normalised path: starts with `/`, no `.`/`..` segments, no NUL.
    pub path: &'a [u8],
    /// The path as sent (still percent-encoded), used for redirects.
    pub raw_path: &'a str,
    /// The query string, without the `?`.
    pub query: Option<&'a str>,
    /// `If-Match`.
    pub if_match: Option<&'a [u8]>,
    /// `If-None-Match`.
    pub if_none_match: Option<&'a [u8]>,
    /// `If-Modified-Since`.
    pub if_modified_since: Option<&'a [u8]>,
    /// `If-Unmodified-Since`.
    pub if_unmodified_since: Option<&'a [u8]>,
    /// `If-Range`.
    pub if_range: Option<&'a [u8]>,
    /// `Range`.
    pub range: Option<&'a [u8]>,
    /// `Accept-Encoding`.
    pub accept_encoding: Option<&'a [u8]>,
    /// What the `compress` module in the request's scope says of compressing on the fly;
    /// `None`: only precompressed siblings are served.
    pub compress: Option<&'a fastpath_modules::compress::Policy>,
}

/// What to answer: status, representation metadata and the body source.
#[derive(Debug)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// `Content-Type`; for a multipart reply, `multipart/byteranges; boundary=…`.
    pub content_type: Option<Cow<'static, str>>,
    /// `Content-Encoding`: `"br"` or `"gzip"` when a precompressed variant is sent.
    pub content_encoding: Option<&'static str>,
    /// Send `Vary: Accept-Encoding` (the resource has precompressed variants).
    pub vary_accept_encoding: bool,
    /// `Last-Modified`, whole seconds, never in the future, never before 1970.
    pub last_modified: Option<SystemTime>,
    /// Strong `ETag`, quoted: `"{mtime_secs:x}.{mtime_nsec:x}-{size:x}-{inode:x}"`,
    /// plus `-br`/`-gz` before the closing quote for precompressed variants.
    pub etag: Option<String>,
    /// `Location` (redirects).
    pub location: Option<String>,
    /// `Content-Range`: `bytes a-b/size` (206) or `bytes */size` (416).
    pub content_range: Option<String>,
    /// Send `Accept-Ranges: bytes`.
    pub accept_ranges: bool,
    /// Length of the body a GET carries (also reported for HEAD); 0 when
    /// [`Body::None`].
    pub content_length: u64,
    /// Where the body bytes come from.
    pub body: Body,
    /// For a full 200 reply of a cached file: its fields from Content-Type to
    /// Content-Length as `fastpath_http::Fields::write` wrote them for
    /// [`Reply::metadata`] and the content length, to be sent as they are
    /// (`fastpath_http::HeadFields::Prebuilt`).
    pub fields: Option<Arc<[u8]>>,
}

/// The source of a reply body.
#[derive(Debug)]
pub enum Body {
    /// No body from this layer: 304, a redirect or an error status (the server
    /// may render a short page of its own).
    None,
    /// `len` bytes of `file` starting at `offset`.
    File {
        /// The open file (shared so the server can keep it while sending).
        file: Arc<File>,
        /// Start offset.
        offset: u64,
        /// Byte count; may be 0.
        len: u64,
    },
    /// `len` bytes of a file's content held in memory, starting at `offset`.
    Memory {
        /// The whole content (shared with the cache).
        data: Arc<[u8]>,
        /// Start offset.
        offset: usize,
        /// Byte count; may be 0.
        len: usize,
    },
    /// A `multipart/byteranges` body: the parts in order.
    Parts {
        /// What [`Part::File`] slices refer to.
        source: Source,
        /// The body, as literal bytes and slices of the source in order.
        parts: Vec<Part>,
    },
}

/// Where the bytes of a file come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// An open file, sent with sendfile.
    File(Arc<File>),
    /// Its whole content in memory.
    Memory(Arc<[u8]>),
}

/// One piece of a multipart body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Literal bytes (boundaries and part headers).
    Bytes(Vec<u8>),
    /// A slice of the reply's source.
    File {
        /// Start offset.
        offset: u64,
        /// Byte count.
        len: u64,
    },
}

impl Reply {
    /// A reply with only a status (errors, before any file was chosen).
    fn status(status: u16) -> Reply {
        Reply {
            status,
            content_type: None,
            content_encoding: None,
            vary_accept_encoding: false,
            last_modified: None,
            etag: None,
            location: None,
            content_range: None,
            accept_ranges: false,
            content_length: 0,
            body: Body::None,
            fields: None,
        }
    }

    /// The representation metadata the response head carries; the response-head
    /// encoder (`fastpath_http::write_response_head`) decides which of it the status
    /// allows.
    pub fn metadata(&self) -> Metadata<'_> {
        Metadata {
            location: self.location.as_deref(),
            content_type: self.content_type.as_deref(),
            content_encoding: self.content_encoding,
            last_modified: self.last_modified,
            etag: self.etag.as_deref(),
            accept_ranges: self.accept_ranges,
            content_range: self.content_range.as_deref(),
            vary_accept_encoding: self.vary_accept_encoding,
        }
    }
}

#[cfg(test)]
mod tests;
