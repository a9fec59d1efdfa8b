//! HTTP/2 (RFC 9113), written for fastpath rather than taken from a crate, so
//! that its frames can carry shared buffers and file ranges without a copy
//! and its queues are budgeted in one place. For now it holds the Huffman
//! code of its header compression ([`huffman`], RFC 7541 Appendix B).
//!
//! ```
//! use fastpath_http::h2::huffman;
//!
//! let mut coded = Vec::new();
//! huffman::encode(b"no-cache", &mut coded);
//! assert_eq!(coded, [0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf]);
//! ```

pub mod huffman;
