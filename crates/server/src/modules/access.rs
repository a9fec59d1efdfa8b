//! `access`: who may come in, by the client's address, as nginx's `allow` and `deny`.
//!
//! ```toml
//! [[module]]
//! name = "access"
//! prefix = "/admin/"
//! rules = ["allow 10.0.0.0/8", "allow ::1", "deny all"]
//! ```
//!
//! The rules are tried in order and the first that matches decides; a client no rule
//! matches is let in (nginx's default), so a list meant to shut others out ends with
//! `deny all`. A refused client gets 403.

use std::sync::Arc;

use fastpath_modules::access::{AccessList, Verdict};

use crate::module::{Configured, Decision, Exchange, Hooks, Module, Response, Settings};

pub(crate) struct Access;

struct Configuration {
    list: Arc<AccessList>,
}

struct AccessHooks {
    list: Arc<AccessList>,
}

impl Module for Access {
    fn name(&self) -> &'static str {
        "access"
    }

    fn configure(&self, settings: &mut Settings<'_>) -> Result<Arc<dyn Configured>, String> {
        let Some(rules) = settings.strings("rules") else {
            return Err(
                "`access` needs `rules`, such as [\"allow 10.0.0.0/8\", \"deny all\"]".into(),
            );
        };
        let mut list = AccessList::new(Verdict::Allow);
        for rule in &rules {
            let (verdict, source) = match rule.split_once(char::is_whitespace) {
                Some(("allow", source)) => (Verdict::Allow, source.trim()),
                Some(("deny", source)) => (Verdict::Deny, source.trim()),
                _ => {
                    settings.error(
                        "rules",
                        format!("rule \"{rule}\" is not \"allow ADDRESS\" or \"deny ADDRESS\""),
                    );
                    continue;
                }
            };
            let added = match verdict {
                Verdict::Allow => list.allow(source),
                Verdict::Deny => list.deny(source),
            };
            match added {
                Ok(Some(host_bits)) => tracing::warn!("access rule \"{rule}\": {host_bits}"),
                Ok(None) => {}
                Err(e) => settings.error("rules", format!("rule \"{rule}\": {e}")),
            }
        }
        Ok(Arc::new(Configuration {
            list: Arc::new(list),
        }))
    }
}

impl Configured for Configuration {
    fn order(&self) -> crate::module::Order {
        // An address check costs nothing: before any password is checked.
        crate::module::Order::First
    }

    fn for_worker(&self) -> Box<dyn Hooks> {
        Box::new(AccessHooks {
            list: self.list.clone(),
        })
    }
}

impl Hooks for AccessHooks {
    fn access(&mut self, exchange: &mut Exchange<'_>) -> Decision {
        let verdict = match exchange.client() {
            Some(ip) => self.list.check(ip),
            None => self.list.check_unix(),
        };
        match verdict {
            Verdict::Allow => Decision::Decline,
            Verdict::Deny => Decision::Answer(Response::new(403)),
        }
    }
}
