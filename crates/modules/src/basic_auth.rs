//! HTTP Basic authentication (RFC 7617) against an Apache htpasswd file.
//!
//! [`Htpasswd`] reads the file (bcrypt, `$apr1$` and `{SHA}` entries; anything else is
//! refused with the file and line), and tells by one `stat` whether it changed, keeping its
//! entries when a reload fails.
//!
//! ```
//! use fastpath_modules::basic_auth::Htpasswd;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("htpasswd");
//! // Made by `htpasswd -nbs Aladdin 'open sesame'`.
//! std::fs::write(&path, "Aladdin:{SHA}W8r/fyL/UzygmbNAjq2HbA67qac=\n")?;
//! let htpasswd = Htpasswd::load(&path)?;
//! assert!(htpasswd.check(b"Aladdin", b"open sesame"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod hash;
mod htpasswd;

pub use hash::Scheme;
pub use htpasswd::{Error, ErrorKind, Htpasswd, RACY_WINDOW};
