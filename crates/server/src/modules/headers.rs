//! `headers`: response fields added, set or removed per route, as nginx's `add_header`,
//! `expires` and headers-more's `more_clear_headers` (the rules:
//! [`fastpath_modules::headers`]).
//!
//! ```toml
//! [[module]]
//! name = "headers"
//! prefix = "/static/"
//! add = { "X-Frame-Options" = "DENY" }
//! set = { "Cache-Control" = "public, max-age=86400" }
//! remove = ["X-Powered-By"]
//! expires = "7d"
//! always = false
//! ```
//!
//! The rules go over every response head of a request in scope, whoever made it: the
//! server's own answers, a backend's relayed, and one from the response cache. `add`, `set`,
//! `cache_control` and `expires` apply to 2xx and 3xx successes and redirects unless
//! `always = true`; `remove` to every status. When several tables' scopes hold a request,
//! the one with the longest prefix decides, as nginx's innermost `add_header` does.

use std::sync::Arc;
use std::time::SystemTime;

use fastpath_http::HeadEdit;
use fastpath_modules::headers::{Expires, Fields, HeaderRules};

use crate::module::{Configured, Decision, Exchange, Hooks, Module, Settings};

pub(crate) struct Headers;

/// The rules, as the head editor every worker shares.
#[derive(Debug)]
struct Editor {
    rules: HeaderRules,
}

struct Configuration {
    editor: Arc<Editor>,
}

struct HeadersHooks {
    editor: Arc<Editor>,
}

impl Module for Headers {
    fn name(&self) -> &'static str {
        "headers"
    }

    fn configure(&self, settings: &mut Settings<'_>) -> Result<Arc<dyn Configured>, String> {
        let always = settings.boolean("always").unwrap_or(false);
        let mut rules = HeaderRules::new();
        for key in ["add", "set"] {
            for (name, value) in settings.string_map(key).unwrap_or_default() {
                let made = if key == "add" {
                    rules.add(&name, &value, always)
                } else {
                    rules.set(&name, &value, always)
                };
                if let Err(e) = made {
                    settings.error(key, format!("`{key}` {name}: {e}"));
                }
            }
        }
        for name in settings.strings("remove").unwrap_or_default() {
            if let Err(e) = rules.remove(&name) {
                settings.error("remove", format!("`remove` {name}: {e}"));
            }
        }
        if let Some(value) = settings.string("cache_control") {
            if let Err(e) = rules.cache_control(&value, always) {
                settings.error("cache_control", e.to_string());
            }
        }
        if let Some(text) = settings.string("expires") {
            match Expires::parse(&text) {
                Ok(Some(expires)) => rules.expires(expires, always),
                Ok(None) => {}
                Err(e) => settings.error("expires", e.to_string()),
            }
        }
        if rules.is_empty() {
            return Err(
                "`headers` needs a rule: `add`, `set`, `remove`, `cache_control` or `expires`"
                    .into(),
            );
        }
        Ok(Arc::new(Configuration {
            editor: Arc::new(Editor { rules }),
        }))
    }
}

impl Configured for Configuration {
    fn for_worker(&self) -> Box<dyn Hooks> {
        Box::new(HeadersHooks {
            editor: self.editor.clone(),
        })
    }
}

impl Hooks for HeadersHooks {
    fn fixups(&mut self, exchange: &mut Exchange<'_>) -> Decision {
        exchange.edit_head_with(self.editor.clone());
        Decision::Decline
    }
}

impl HeadEdit for Editor {
    fn edit(&self, out: &mut Vec<u8>, from: usize) {
        let Some(head) = ParsedHead::read(&out[from..]) else {
            // Not a head these writers make; never expected, and left as it is.
            return;
        };
        let ParsedHead {
            status_line,
            status,
            mut fields,
        } = head;
        // The response's own date, so that `Expires` is counted from what it says.
        let now = fields
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(b"date"))
            .and_then(|(_, value)| std::str::from_utf8(value).ok())
            .and_then(|value| httpdate::parse_http_date(value).ok())
            .unwrap_or_else(SystemTime::now);
        self.rules.apply(&mut fields, status, now);
        let mut head = Vec::with_capacity(out.len() - from + 64);
        head.extend_from_slice(&status_line);
        for (name, value) in &fields {
            head.extend_from_slice(name);
            head.extend_from_slice(b": ");
            head.extend_from_slice(value);
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"\r\n");
        out.truncate(from);
        out.extend_from_slice(&head);
    }
}

/// A head as the server's writers leave it: the status line, CRLF-ended field lines, the
/// empty line.
struct ParsedHead {
    /// With its CRLF.
    status_line: Vec<u8>,
    status: u16,
    fields: Fields,
}

impl ParsedHead {
    fn read(head: &[u8]) -> Option<ParsedHead> {
        let mut lines = head.split_inclusive(|&b| b == b'\n');
        let status_line = lines.next()?;
        let status = std::str::from_utf8(status_line.get(9..12)?)
            .ok()?
            .parse()
            .ok()?;
        let mut fields = Vec::new();
        for line in lines {
            let line = line.strip_suffix(b"\r\n")?;
            if line.is_empty() {
                return Some(ParsedHead {
                    status_line: status_line.to_vec(),
                    status,
                    fields,
                });
            }
            let colon = line.iter().position(|&b| b == b':')?;
            let value = line[colon + 1..].trim_ascii();
            fields.push((line[..colon].to_vec(), value.to_vec()));
        }
        None
    }
}
