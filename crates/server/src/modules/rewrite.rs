//! `rewrite`: rules that rewrite a request's path inside the server or answer it with a
//! redirect, as nginx's `rewrite` (the rules themselves: [`fastpath_modules::rewrite`]).
//!
//! ```toml
//! [[module]]
//! name = "rewrite"
//! rules = [
//!   { pattern = "^/old/(.*)$", to = "/new/$1" },                      # internal
//!   { pattern = "^/blog/(.*)$", to = "https://blog.example.com/$1", redirect = 301 },
//! ]
//! ```
//!
//! Rules run in the translate phase, on the decoded path, first match wins; an internal
//! rewrite starts the rules again on the new path, at most ten times, and a loop is
//! answered with 500 (and logged). The modules of the later phases (access, a password)
//! are those of the new path.

use std::sync::Arc;

use fastpath_modules::rewrite::{Action, Outcome, Rule, Rules, REDIRECT_STATUSES};

use crate::module::{Configured, Decision, Exchange, Hooks, Module, Response, Settings};

pub(crate) struct Rewrite;

struct Configuration {
    rules: Arc<Rules>,
}

struct RewriteHooks {
    rules: Arc<Rules>,
}

impl Module for Rewrite {
    fn name(&self) -> &'static str {
        "rewrite"
    }

    fn configure(&self, settings: &mut Settings<'_>) -> Result<Arc<dyn Configured>, String> {
        let mut rules = Vec::new();
        let given = settings.each_table("rules", |rule| {
            let pattern = rule.string("pattern");
            let to = rule.string("to");
            let action = match rule.integer("redirect") {
                None => Some(Action::Rewrite),
                Some(status) => match u16::try_from(status) {
                    Ok(status) if REDIRECT_STATUSES.contains(&status) => {
                        Some(Action::Redirect(status))
                    }
                    _ => {
                        rule.error(
                            "redirect",
                            format!("`redirect` {status} is not one of 301, 302, 307, 308"),
                        );
                        None
                    }
                },
            };
            let (Some(pattern), Some(to)) = (pattern, to) else {
                if !rule.has("pattern") || !rule.has("to") {
                    rule.error("pattern", "a rule needs `pattern` and `to`");
                }
                return;
            };
            let Some(action) = action else {
                return;
            };
            match Rule::new(&pattern, &to, action) {
                Ok(made) => rules.push(made),
                Err(e) => rule.error("pattern", format!("rule \"{pattern}\": {e}")),
            }
        });
        if !given {
            return Err(
                "`rewrite` needs `rules`, such as [{ pattern = \"^/old/(.*)$\", to = \"/new/$1\" }]"
                    .into(),
            );
        }
        Ok(Arc::new(Configuration {
            rules: Arc::new(Rules::new(rules)),
        }))
    }
}

impl Configured for Configuration {
    fn for_worker(&self) -> Box<dyn Hooks> {
        Box::new(RewriteHooks {
            rules: self.rules.clone(),
        })
    }
}

impl Hooks for RewriteHooks {
    fn translate(&mut self, exchange: &mut Exchange<'_>) -> Decision {
        match self.rules.apply(exchange.path(), exchange.query()) {
            Ok(Outcome::Unchanged) => Decision::Decline,
            Ok(Outcome::Rewritten { path, query }) => {
                exchange.set_path(path, query);
                Decision::Decline
            }
            Ok(Outcome::Redirect { status, location }) => {
                Decision::Answer(Response::redirect(status, &location))
            }
            Err(e) => {
                tracing::error!("rewrite: {e}");
                Decision::Answer(Response::new(e.status()))
            }
        }
    }
}
