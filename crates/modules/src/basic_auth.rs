//! HTTP Basic authentication (RFC 7617) against an Apache htpasswd file.
//!
//! The parts, each usable alone:
//!
//! * [`Htpasswd`] reads the file (bcrypt, `$apr1$` and `{SHA}` entries; anything else is
//!   refused with the file and line), and tells by one `stat` whether it changed, keeping its
//!   entries when a reload fails.
//! * [`parse_basic`] reads the credentials of an `Authorization` field.
//! * [`Challenge`] is the `WWW-Authenticate` value of a 401 response.
//!
//! ```
//! use fastpath_modules::basic_auth::{parse_basic, Challenge, Htpasswd};
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("htpasswd");
//! // Made by `htpasswd -nbs Aladdin 'open sesame'`.
//! std::fs::write(&path, "Aladdin:{SHA}W8r/fyL/UzygmbNAjq2HbA67qac=\n")?;
//! let htpasswd = Htpasswd::load(&path)?;
//! let challenge = Challenge::new("Staff")?;
//!
//! let credentials = parse_basic(b"Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==").unwrap();
//! assert!(htpasswd.check(credentials.user(), credentials.password()));
//! assert_eq!(challenge.value(), r#"Basic realm="Staff", charset="UTF-8""#);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod hash;
mod header;
mod htpasswd;

pub use hash::Scheme;
pub use header::{
    parse_basic, Challenge, Credentials, RealmError, CHALLENGE_FIELD, MAX_AUTHORIZATION_LEN,
};
pub use htpasswd::{Error, ErrorKind, Htpasswd, RACY_WINDOW};
