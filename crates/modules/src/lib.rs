//! The modules fastpath ships, each enabled per host and per route prefix by configuration:
//! what each one decides, kept apart from the server so that it can be tested alone (bytes
//! and files in, decisions out), in the manner of the protocol layer.
//!
//! Each module here is the part of one that does not depend on how a request travels:
//! which coding a client accepts and the compressed bytes, whether a password matches an
//! htpasswd entry, what a directory listing says, where a rewrite rule sends a request,
//! whether an address may come in. The server's hooks and output filters call them.

pub mod access;
pub mod basic_auth;
pub mod compress;
pub mod headers;
pub mod listing;
pub mod rewrite;
