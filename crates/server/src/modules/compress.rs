//! `compress`: static files compressed on the fly (gzip, brotli, zstd), each file once
//! per change, its compressed copies kept with it in the content cache.
//!
//! ```toml
//! [[module]]
//! name = "compress"
//! codings = ["br", "zstd", "gzip"]      # the default: all three
//! types = ["text/html", "text/css", "application/javascript"]
//! min_length = 256
//! gzip_level = 6
//! brotli_level = 5
//! zstd_level = 3
//! ```
//!
//! The client gets the coding it prefers by its `Accept-Encoding` q-values, the server's
//! order (br, zstd, gzip) breaking ties, and every response about such a file says `Vary:
//! Accept-Encoding`. Each coding's copy has an entity tag of its own (`"…-gzip"`), so a
//! conditional request and a range are answered for the copy they name. A precompressed
//! sibling (`X.br`, `X.gz`) is sent before a copy made here.

use std::sync::Arc;

use fastpath_modules::compress::{Coding, CodingSet, Level, MediaRange, Policy};

use crate::module::{Configured, Decision, Exchange, Hooks, Module, Settings};

pub(crate) struct Compress;

struct Configuration {
    policy: Arc<Policy>,
}

struct CompressHooks {
    policy: Arc<Policy>,
}

impl Module for Compress {
    fn name(&self) -> &'static str {
        "compress"
    }

    fn configure(&self, settings: &mut Settings<'_>) -> Result<Arc<dyn Configured>, String> {
        let mut policy = Policy::default();
        if let Some(codings) = settings.strings("codings") {
            let mut enabled = CodingSet::EMPTY;
            for token in &codings {
                match Coding::from_token(token.as_bytes()) {
                    Some(coding) => enabled = enabled.with(coding),
                    None => settings.error(
                        "codings",
                        format!("coding \"{token}\" is not one of \"br\", \"zstd\", \"gzip\""),
                    ),
                }
            }
            if codings.is_empty() {
                settings.error("codings", "`codings` must name one coding at least");
            }
            policy.enabled = enabled;
        }
        if let Some(types) = settings.strings("types") {
            let mut ranges = Vec::new();
            for t in &types {
                match MediaRange::parse(t) {
                    Ok(range) => ranges.push(range),
                    Err(e) => settings.error("types", e.to_string()),
                }
            }
            policy.types = ranges;
        }
        if let Some(n) = settings.integer("min_length") {
            match u64::try_from(n) {
                Ok(n) => policy.min_length = n,
                Err(_) => settings.error("min_length", "`min_length` must not be negative"),
            }
        }
        for (key, coding) in [
            ("gzip_level", Coding::Gzip),
            ("brotli_level", Coding::Brotli),
            ("zstd_level", Coding::Zstd),
        ] {
            if let Some(n) = settings.integer(key) {
                match Level::new(coding, n) {
                    Ok(level) => policy.set_level(level),
                    Err(e) => settings.error(key, e.to_string()),
                }
            }
        }
        Ok(Arc::new(Configuration {
            policy: Arc::new(policy),
        }))
    }
}

impl Configured for Configuration {
    fn for_worker(&self) -> Box<dyn Hooks> {
        Box::new(CompressHooks {
            policy: self.policy.clone(),
        })
    }
}

impl Hooks for CompressHooks {
    fn fixups(&mut self, exchange: &mut Exchange<'_>) -> Decision {
        exchange.compress_with(self.policy.clone());
        Decision::Decline
    }
}
