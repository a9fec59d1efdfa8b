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
//!
//! A backend's response is compressed as it is relayed ([`ProxiedCompression`]), under the
//! same policy: not one the backend coded already, nor one its `Cache-Control` says
//! `no-transform` of. Its strong `ETag` is made weak rather than renamed per coding, since
//! the backend answers the conditional requests for it and compares weakly; it goes chunked
//! (to an HTTP/1.0 client, ended by the close), and the response cache keeps it per
//! `Accept-Encoding`, compressed, so a cached page is compressed once per coding too.

use std::sync::Arc;

use fastpath_http::{BodyFilter, Recode, RecodeOffer, ResponseFraming, ResponseHead};
use fastpath_modules::compress::{
    choose_coding, should_compress, Coding, CodingSet, Encoder, Level, MediaRange, Policy,
};

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

/// Whether, and with what, a backend's response to one request is compressed: the policy
/// of the module in the request's scope, and the coding the client prefers of those it
/// enables (`None` when it accepts none of them).
#[derive(Debug)]
pub(crate) struct ProxiedCompression {
    policy: Arc<Policy>,
    coding: Option<Coding>,
}

impl ProxiedCompression {
    /// The offer for a request whose `Accept-Encoding` is `accept_encoding`.
    pub(crate) fn new(policy: Arc<Policy>, accept_encoding: Option<&[u8]>) -> ProxiedCompression {
        let accept = fastpath_http::parse_accept_encoding(accept_encoding);
        let coding = choose_coding(&accept, policy.enabled);
        ProxiedCompression { policy, coding }
    }
}

impl RecodeOffer for ProxiedCompression {
    fn consider(&self, head: &ResponseHead<'_>) -> Recode {
        // A transfer-coding other than chunked (`gzip, chunked`) leaves the body coded
        // once decoded of its chunks; and a body with a Content-Range is a part.
        let other_transfer_coding = head.header_values("transfer-encoding").any(|value| {
            value
                .split(|&b| b == b',')
                .any(|coding| !coding.trim_ascii().eq_ignore_ascii_case(b"chunked"))
        });
        if other_transfer_coding || head.header("content-range").is_some() {
            return Recode::Unchanged;
        }
        let length = match head.framing {
            ResponseFraming::Length(n) => Some(n),
            // A HEAD response states the length of the body it omits.
            _ => head
                .header("content-length")
                .and_then(|v| std::str::from_utf8(v.trim_ascii()).ok()?.parse().ok()),
        };
        // A coded Content-Encoding field anywhere refuses it; so does no-transform in any
        // Cache-Control field.
        let content_encoding = head.header_values("content-encoding").find(|v| {
            !v.trim_ascii().is_empty() && !v.trim_ascii().eq_ignore_ascii_case(b"identity")
        });
        let content_type = head.header("content-type");
        let compressible = |cache_control| {
            should_compress(
                content_type,
                length,
                content_encoding,
                head.status,
                cache_control,
                &self.policy,
            )
        };
        let mut cache_controls = head.header_values("cache-control").peekable();
        let qualifies = if cache_controls.peek().is_none() {
            compressible(None)
        } else {
            cache_controls.all(|value| compressible(Some(value)))
        };
        match (qualifies, self.coding) {
            (false, _) => Recode::Unchanged,
            (true, None) => Recode::Varies,
            (true, Some(coding)) => Recode::Coded(Box::new(CodedBody {
                encoder: Some(Encoder::new(self.policy.level(coding))),
                coding,
            })),
        }
    }
}

/// A relayed body compressed as it passes.
struct CodedBody {
    /// Taken at the end ([`Encoder::finish`] consumes it).
    encoder: Option<Encoder>,
    coding: Coding,
}

impl BodyFilter for CodedBody {
    fn coding(&self) -> &'static str {
        self.coding.token()
    }

    fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        if let Some(encoder) = &mut self.encoder {
            encoder.push(input, out);
        }
    }

    fn flush(&mut self, out: &mut Vec<u8>) {
        if let Some(encoder) = &mut self.encoder {
            encoder.flush(out);
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        if let Some(encoder) = self.encoder.take() {
            encoder.finish(out);
        }
    }
}
