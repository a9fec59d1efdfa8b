//! HTTP Basic authentication (RFC 7617) against an Apache htpasswd file.
//!
//! The parts, each usable alone:
//!
//! * [`Htpasswd`] reads the file (bcrypt, `$apr1$` and `{SHA}` entries; anything else is
//!   refused with the file and line), and tells by one `stat` whether it changed, keeping its
//!   entries when a reload fails.
//! * [`parse_basic`] reads the credentials of an `Authorization` field.
//! * [`Verifier`] checks a password against the file, with a cache of the checks that
//!   succeeded, as a bcrypt check costs milliseconds.
//! * [`Challenge`] is the `WWW-Authenticate` value of a 401 response.
//!
//! ```
//! use fastpath_modules::basic_auth::{parse_basic, Challenge, Htpasswd, Verifier};
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("htpasswd");
//! // Made by `htpasswd -nbs Aladdin 'open sesame'`.
//! std::fs::write(&path, "Aladdin:{SHA}W8r/fyL/UzygmbNAjq2HbA67qac=\n")?;
//! let mut verifier = Verifier::new(Htpasswd::load(&path)?, 1024)?;
//! let challenge = Challenge::new("Staff")?;
//!
//! let credentials = parse_basic(b"Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==").unwrap();
//! assert!(verifier.verify(credentials.user(), credentials.password()));
//! assert_eq!(challenge.value(), r#"Basic realm="Staff", charset="UTF-8""#);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

pub(crate) mod hash;
mod header;
pub(crate) mod htpasswd;
mod verifier;

pub use hash::Scheme;
pub use header::{
    parse_basic, Challenge, Credentials, RealmError, CHALLENGE_FIELD, MAX_AUTHORIZATION_LEN,
};
pub use htpasswd::{Error, ErrorKind, Htpasswd, RACY_WINDOW};
pub use verifier::{Verifier, VerifierStats, DEFAULT_CACHE_ENTRIES};
