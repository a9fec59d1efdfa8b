//! `listing`: a directory's entries, for a directory that has no index file, as nginx's
//! `autoindex` (off unless a `[[module]]` table asks for it, since a listing shows what
//! a site may not mean to link to).
//!
//! ```toml
//! [[module]]
//! name = "listing"
//! prefix = "/files/"
//! format = "html"            # or "json"
//! ```
//!
//! The directory is opened beneath the host's root as static files are (no symbolic
//! link out, no hidden names unless the host serves them), and read afresh for each
//! request. A directory with an index file is left to the static path.

use std::sync::Arc;

use fastpath_modules::listing::{
    read_dir_at, DEFAULT_MAX_ENTRIES, HTML_CONTENT_TYPE, JSON_CONTENT_TYPE,
};

use crate::module::{Configured, Decision, Exchange, Hooks, Module, Response, Settings};

pub(crate) struct Listing;

#[derive(Clone, Copy)]
struct Configuration {
    json: bool,
}

impl Module for Listing {
    fn name(&self) -> &'static str {
        "listing"
    }

    fn configure(&self, settings: &mut Settings<'_>) -> Result<Arc<dyn Configured>, String> {
        let json = super::json_format(settings, false);
        Ok(Arc::new(Configuration { json }))
    }
}

impl Configured for Configuration {
    fn for_worker(&self) -> Box<dyn Hooks> {
        Box::new(*self)
    }
}

impl Hooks for Configuration {
    fn handler(&mut self, exchange: &mut Exchange<'_>) -> Decision {
        let path = exchange.path();
        if !path.ends_with(b"/") || !matches!(exchange.method(), "GET" | "HEAD") {
            return Decision::Decline;
        }
        let Ok(dir) = exchange.open_beneath(path) else {
            // Not there, or not to be shown: the static path says which.
            return Decision::Decline;
        };
        if !dir.metadata().is_ok_and(|m| m.is_dir()) {
            return Decision::Decline;
        }
        let has_index = exchange.index_names().iter().any(|name| {
            let mut index = path.to_vec();
            index.extend_from_slice(name.trim_start_matches('/').as_bytes());
            exchange
                .open_beneath(&index)
                .is_ok_and(|f| f.metadata().is_ok_and(|m| m.is_file()))
        });
        if has_index {
            return Decision::Decline;
        }
        let listing = match read_dir_at(&dir, DEFAULT_MAX_ENTRIES) {
            Ok(listing) => listing,
            Err(e) => {
                tracing::error!("listing {}: {e}", String::from_utf8_lossy(exchange.path()));
                return Decision::Answer(Response::new(500));
            }
        };
        let (content_type, body) = if self.json {
            (JSON_CONTENT_TYPE, listing.to_json(path))
        } else {
            (HTML_CONTENT_TYPE, listing.to_html(path))
        };
        Decision::Answer(Response::new(200).body(content_type, body.into_bytes()))
    }
}
