//! The one error type: an HTTP status to answer with and a short log reason.

use std::fmt;

/// A request the server must refuse. `status` is what to answer with
/// (400, 414, 417, 431, 501, 505); `reason` is a short text for the error log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestError {
    /// HTTP status code to respond with.
    pub status: u16,
    /// Short, static explanation for the error log (never sent to clients).
    pub reason: &'static str,
}

impl RequestError {
    /// Builds an error; `const` so errors can be named constants.
    pub const fn new(status: u16, reason: &'static str) -> Self {
        RequestError { status, reason }
    }

    /// A 400 Bad Request with the given reason.
    pub const fn bad_request(reason: &'static str) -> Self {
        RequestError::new(400, reason)
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status, self.reason)
    }
}

impl std::error::Error for RequestError {}
