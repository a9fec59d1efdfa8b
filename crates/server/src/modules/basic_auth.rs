//! `basic_auth`: HTTP Basic authentication (RFC 7617) against an htpasswd file.
//!
//! ```toml
//! [[module]]
//! name = "basic_auth"
//! prefix = "/private/"
//! realm = "Staff only"
//! user_file = "htpasswd"     # bcrypt, $apr1$ or {SHA} entries (htpasswd -B, -m, -s)
//! ```
//!
//! A request without good credentials gets 401 and the challenge. Each worker keeps the
//! file's entries and remembers the credentials it verified (the [`Verifier`]'s cache, by
//! a keyed hash, emptied when the file's entries change): bcrypt costs milliseconds, and
//! a browser sends the same credentials with every request. The file is looked at again
//! at most once a second; a file that cannot be read keeps the entries read before,
//! and a worker that never read it answers 500, as nginx does.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fastpath_modules::basic_auth::{
    parse_basic, Challenge, Htpasswd, Verifier, DEFAULT_CACHE_ENTRIES,
};

use crate::module::{Configured, Decision, Exchange, Hooks, Module, Order, Response, Settings};

/// How often a worker looks whether the password file changed.
const RECHECK: Duration = Duration::from_secs(1);

pub(crate) struct BasicAuth;

struct Configuration {
    user_file: PathBuf,
    challenge: String,
}

struct AuthHooks {
    user_file: PathBuf,
    challenge: String,
    verifier: Option<Verifier>,
    checked: Option<Instant>,
}

impl Module for BasicAuth {
    fn name(&self) -> &'static str {
        "basic_auth"
    }

    fn configure(&self, settings: &mut Settings<'_>) -> Result<Arc<dyn Configured>, String> {
        let realm = settings
            .string("realm")
            .unwrap_or_else(|| "Restricted".to_owned());
        let challenge = match Challenge::new(&realm) {
            Ok(challenge) => challenge.value().to_owned(),
            Err(e) => {
                settings.error("realm", format!("`realm`: {e}"));
                String::new()
            }
        };
        let Some(user_file) = settings.path("user_file") else {
            return Err("`basic_auth` needs `user_file`, an htpasswd file".into());
        };
        // Read now so that a bad file is reported by `fastpath check` and at start.
        if let Err(e) = Htpasswd::load(&user_file) {
            settings.error("user_file", e.to_string());
        }
        Ok(Arc::new(Configuration {
            user_file,
            challenge,
        }))
    }
}

impl Configured for Configuration {
    fn order(&self) -> Order {
        Order::Middle
    }

    fn for_worker(&self) -> Box<dyn Hooks> {
        let mut hooks = AuthHooks {
            user_file: self.user_file.clone(),
            challenge: self.challenge.clone(),
            verifier: None,
            checked: None,
        };
        hooks.load();
        Box::new(hooks)
    }
}

impl AuthHooks {
    fn load(&mut self) {
        let loaded = Htpasswd::load(&self.user_file)
            .map_err(|e| e.to_string())
            .and_then(|file| Verifier::new(file, DEFAULT_CACHE_ENTRIES).map_err(|e| e.to_string()));
        match loaded {
            Ok(verifier) => self.verifier = Some(verifier),
            Err(e) => tracing::error!("basic_auth: {e}"),
        }
    }

    /// The verifier, its file looked at again if a second has passed.
    fn verifier(&mut self) -> Option<&mut Verifier> {
        let now = Instant::now();
        if self.checked.is_none_or(|at| now >= at + RECHECK) {
            self.checked = Some(now);
            match &mut self.verifier {
                None => self.load(),
                Some(verifier) => {
                    if let Err(e) = verifier.reload_if_changed() {
                        tracing::error!("basic_auth: {e}; the entries read before stay");
                    }
                }
            }
        }
        self.verifier.as_mut()
    }
}

impl Hooks for AuthHooks {
    fn access(&mut self, exchange: &mut Exchange<'_>) -> Decision {
        let credentials = exchange.header("authorization").and_then(parse_basic);
        let Some(verifier) = self.verifier() else {
            return Decision::Answer(Response::new(500));
        };
        match credentials {
            Some(c) if verifier.verify(c.user(), c.password()) => {
                exchange.set_user(String::from_utf8_lossy(c.user()).into_owned());
                Decision::Decline
            }
            _ => Decision::Answer(
                Response::new(401).field("WWW-Authenticate", self.challenge.as_bytes()),
            ),
        }
    }
}
