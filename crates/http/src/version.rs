//! The protocol version of a message: a module of its own because the field rules and the
//! request and response parsers all depend on it, and it on nothing.

/// Protocol version of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0.
    Http10,
    /// HTTP/1.1, and any later HTTP/1.x (RFC 9110 §2.5: treat as 1.1).
    Http11,
}
