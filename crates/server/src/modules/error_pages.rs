//! `error_pages`: the pages of error statuses, files of the host's root, as nginx's
//! `error_page`.
//!
//! ```toml
//! [[module]]
//! name = "error_pages"
//! pages = { "404" = "/errors/404.html", "403" = "/errors/403.html", "500" = "/errors/500.html" }
//! ```
//!
//! The errors the server answers itself get the page, with their status: a file not found
//! or refused, a method not allowed, and a module's answer without a body of its own
//! (`basic_auth`'s 401 keeps its challenge; the page is its body when the page's file is
//! small enough to be held in memory). A page that cannot be read is
//! replaced by the server's own, so a missing page never loops. A backend's errors are
//! relayed as the backend wrote them (nginx's `proxy_intercept_errors off`).

use std::sync::Arc;

use crate::module::{Configured, Decision, ErrorPages, Exchange, Hooks, Module, Settings};

pub(crate) struct ErrorPagesModule;

struct Configuration {
    pages: Arc<ErrorPages>,
}

struct PagesHooks {
    pages: Arc<ErrorPages>,
}

impl Module for ErrorPagesModule {
    fn name(&self) -> &'static str {
        "error_pages"
    }

    fn configure(&self, settings: &mut Settings<'_>) -> Result<Arc<dyn Configured>, String> {
        let Some(map) = settings.string_map("pages") else {
            return Err(
                "`error_pages` needs `pages`, such as { \"404\" = \"/errors/404.html\" }".into(),
            );
        };
        let mut pages = ErrorPages::default();
        for (status, path) in map {
            let Some(status) = status
                .parse::<u16>()
                .ok()
                .filter(|s| (400..600).contains(s))
            else {
                settings.error(
                    "pages",
                    format!("\"{status}\" is not an error status (400 to 599)"),
                );
                continue;
            };
            if !path.starts_with('/') || path.contains('?') || path.contains('\0') {
                settings.error(
                    "pages",
                    format!("the page of {status}, \"{path}\", is not a path of the root"),
                );
                continue;
            }
            pages.insert(status, path.into_bytes());
        }
        Ok(Arc::new(Configuration {
            pages: Arc::new(pages),
        }))
    }
}

impl Configured for Configuration {
    fn for_worker(&self) -> Box<dyn Hooks> {
        Box::new(PagesHooks {
            pages: self.pages.clone(),
        })
    }
}

impl Hooks for PagesHooks {
    // Post-read, so that an answer of any later phase (a 401, a 403) finds the pages.
    fn post_read(&mut self, exchange: &mut Exchange<'_>) -> Decision {
        exchange.use_error_pages(self.pages.clone());
        Decision::Decline
    }
}
