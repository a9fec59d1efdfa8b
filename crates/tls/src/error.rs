//! What goes wrong in setting TLS up: a file that cannot be used, or a configuration rustls
//! refuses.

use std::fmt;
use std::path::{Path, PathBuf};

/// A file that could not be used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError {
    /// The file concerned, if one is.
    pub path: Option<PathBuf>,
    /// What is wrong.
    pub message: String,
}

impl TlsError {
    pub(crate) fn new(path: &Path, message: impl Into<String>) -> Self {
        TlsError {
            path: Some(path.to_owned()),
            message: message.into(),
        }
    }

    pub(crate) fn general(message: impl Into<String>) -> Self {
        TlsError {
            path: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(path) => write!(f, "{}: {}", path.display(), self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for TlsError {}
