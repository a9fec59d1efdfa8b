//! The modules the server ships ([`shipped`]), and the running of every module's hooks
//! for a worker's requests ([`WorkerModules`]).

use std::sync::Arc;

use crate::module::{
    Decision, Exchange, Hooks, LogRecord, Module, ModuleUse, Phase, Response, Settings,
};

mod access;
mod basic_auth;
pub(crate) mod compress;
mod error_pages;
mod headers;
mod listing;
mod rewrite;
mod status;

/// The names of the modules the server ships.
pub(crate) const SHIPPED_NAMES: [&str; 8] = [
    "access",
    "basic_auth",
    "compress",
    "error_pages",
    "headers",
    "listing",
    "rewrite",
    "status",
];

/// The shipped module of this name.
pub(crate) fn shipped(name: &str) -> Option<Arc<dyn Module>> {
    Some(match name {
        "access" => Arc::new(access::Access),
        "basic_auth" => Arc::new(basic_auth::BasicAuth),
        "compress" => Arc::new(compress::Compress),
        "error_pages" => Arc::new(error_pages::ErrorPagesModule),
        "headers" => Arc::new(headers::Headers),
        "listing" => Arc::new(listing::Listing),
        "rewrite" => Arc::new(rewrite::Rewrite),
        "status" => Arc::new(status::Status),
        _ => return None,
    })
}

/// Whether a page-making module (`listing`, `status`) writes JSON: its `format` key,
/// `"html"` or `"json"`, else `json_by_default`; a bad value is reported, naming the
/// default first.
fn json_format(settings: &mut Settings<'_>, json_by_default: bool) -> bool {
    let (default, other) = if json_by_default {
        ("json", "html")
    } else {
        ("html", "json")
    };
    match settings.string("format").as_deref() {
        None => json_by_default,
        Some("json") => true,
        Some("html") => false,
        Some(bad) => {
            settings.error(
                "format",
                format!("`format` \"{bad}\" is not \"{default}\" or \"{other}\""),
            );
            json_by_default
        }
    }
}

/// The module of this name: a registered one, else one the server ships.
pub(crate) fn find(name: &str) -> Option<Arc<dyn Module>> {
    crate::module::registered()
        .into_iter()
        .find(|m| m.name() == name)
        .or_else(|| shipped(name))
}

/// The names of every module known, for the unknown-name error.
pub(crate) fn names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = crate::module::registered()
        .iter()
        .map(|m| m.name())
        .collect();
    names.extend(SHIPPED_NAMES);
    names.sort_unstable();
    names.dedup();
    names
}

/// A worker's modules: the configured uses, in the order their hooks run (by `order`,
/// then the longer prefix first, then the file's), and the worker's hooks of each.
pub(crate) struct WorkerModules {
    uses: Arc<[ModuleUse]>,
    hooks: Vec<Box<dyn Hooks>>,
    /// The uses a request is in the scope of (indices), kept to spare an allocation.
    scope: Vec<usize>,
}

impl WorkerModules {
    /// The worker's hooks of every use; `None` when there are no uses, so that a server
    /// without modules never looks for them.
    pub(crate) fn new(uses: &[ModuleUse]) -> Option<Box<WorkerModules>> {
        if uses.is_empty() {
            return None;
        }
        let mut ordered: Vec<ModuleUse> = uses.to_vec();
        // The more specific scope first, as nginx picks the longest location: a table for
        // `/files/sub/` answers before one for `/files/`. Stable: the file's order after.
        ordered.sort_by_key(|u| (u.order, std::cmp::Reverse(u.prefix.len())));
        let hooks = ordered.iter().map(|u| u.configured.for_worker()).collect();
        Some(Box::new(WorkerModules {
            uses: ordered.into(),
            hooks,
            scope: Vec::new(),
        }))
    }

    /// Runs the hooks of the uses whose scope the request is in, phase by phase: the
    /// answer of the first that answers. After a phase that changed the path, the later
    /// phases' uses are chosen again by the new path. `host`: lower case, no port.
    pub(crate) fn run(
        &mut self,
        exchange: &mut Exchange<'_>,
        host: Option<&str>,
    ) -> Option<Response> {
        self.choose(host, &exchange.path);
        for phase in Phase::ALL {
            exchange.changed = false;
            for at in 0..self.scope.len() {
                let hooks = &mut self.hooks[self.scope[at]];
                let decision = match phase {
                    Phase::PostRead => hooks.post_read(exchange),
                    Phase::Translate => hooks.translate(exchange),
                    Phase::Access => hooks.access(exchange),
                    Phase::Fixups => hooks.fixups(exchange),
                    Phase::Handler => hooks.handler(exchange),
                };
                if let Decision::Answer(response) = decision {
                    return Some(response);
                }
            }
            if exchange.changed {
                self.choose(host, &exchange.path);
            }
        }
        None
    }

    fn choose(&mut self, host: Option<&str>, path: &[u8]) {
        self.scope.clear();
        for (at, u) in self.uses.iter().enumerate() {
            if u.applies(host, path) {
                self.scope.push(at);
            }
        }
    }

    /// Tells every use's log hook of a logged request.
    pub(crate) fn log(&mut self, record: &LogRecord<'_>) {
        for hooks in &mut self.hooks {
            hooks.log(record);
        }
    }
}
