//! The modules fastpath ships, each enabled per host and per route prefix by configuration:
//! what each one decides, kept apart from the server so that it can be tested alone (bytes
//! and files in, decisions out), in the manner of the protocol layer.
//!
//! Each module here is the part of one that does not depend on how a request travels:
//! which coding a client accepts and the compressed bytes, whether a password matches an
//! htpasswd entry, what a directory listing says, where a rewrite rule sends a request,
//! whether an address may come in. The server's module hooks call them
//! (`fastpath_server::module`, docs/modules.md).
//!
//! ```
//! use fastpath_modules::access::{AccessList, Verdict};
//! use fastpath_modules::rewrite::{Action, Outcome, Rule, Rules};
//!
//! let mut admins = AccessList::new(Verdict::Allow);
//! admins.allow("10.0.0.0/8").unwrap();
//! admins.deny("all").unwrap();
//! assert_eq!(admins.check("10.1.2.3".parse().unwrap()), Verdict::Allow);
//! assert_eq!(admins.check("192.0.2.1".parse().unwrap()), Verdict::Deny);
//!
//! let rules = Rules::new(vec![Rule::new("^/old/(.*)$", "/new/$1", Action::Rewrite).unwrap()]);
//! match rules.apply(b"/old/page.html", Some("a=1")).unwrap() {
//!     Outcome::Rewritten { path, query } => {
//!         assert_eq!(path, b"/new/page.html");
//!         assert_eq!(query.as_deref(), Some("a=1"));
//!     }
//!     other => panic!("{other:?}"),
//! }
//! ```

pub mod access;
pub mod basic_auth;
pub mod compress;
#[doc(hidden)]
pub mod fuzzing;
pub mod headers;
pub mod listing;
pub mod rewrite;
