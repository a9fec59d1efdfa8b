//! Modules: code compiled into the server that takes part in a request's life without
//! touching the server's core, as Apache 2.0's modules do (its hooks), configured per host
//! and per path prefix in `[[module]]` tables.
//!
//! A [`Module`] reads its `[[module]]` table's own keys ([`Settings`]) and gives back what
//! it made of them ([`Configured`]); each worker gets its own [`Hooks`] from that, so a
//! hook runs with `&mut self` and takes no lock (a cache of verified passwords, say, is a
//! worker's own). For each request the server runs the hooks of the modules whose scope
//! the request is in, phase by phase ([`Phase`]), the modules of a phase in their
//! [`Order`] and then in the file's order: each may answer the request ([`Decision`]),
//! change it (its path, for a rewrite), or decline. The path a request is routed by is the
//! one the modules leave; the modules of the later phases are chosen by that path, so a
//! rewrite into a protected prefix meets that prefix's access checks.
//!
//! A request that no `[[module]]` table applies to takes the path it took before modules
//! existed: the server looks at its modules only when the configuration has some.
//!
//! ```
//! use std::sync::Arc;
//! use fastpath_server::module::{Configured, Decision, Exchange, Hooks, Module, Response, Settings};
//!
//! /// Answers `/ping` with `pong`, and says how often it did in an `X-Pings` field.
//! struct Ping;
//!
//! struct PingHooks {
//!     answered: u64,
//! }
//!
//! impl Module for Ping {
//!     fn name(&self) -> &'static str {
//!         "ping"
//!     }
//!     fn configure(&self, _settings: &mut Settings<'_>) -> Result<Arc<dyn Configured>, String> {
//!         Ok(Arc::new(Ping))
//!     }
//! }
//!
//! impl Configured for Ping {
//!     fn for_worker(&self) -> Box<dyn Hooks> {
//!         Box::new(PingHooks { answered: 0 })
//!     }
//! }
//!
//! impl Hooks for PingHooks {
//!     fn handler(&mut self, exchange: &mut Exchange<'_>) -> Decision {
//!         if exchange.path() != b"/ping" {
//!             return Decision::Decline;
//!         }
//!         self.answered += 1;
//!         Decision::Answer(
//!             Response::new(200)
//!                 .field("X-Pings", self.answered.to_string())
//!                 .body("text/plain", b"pong\n".to_vec()),
//!         )
//!     }
//! }
//!
//! fastpath_server::module::register(Arc::new(Ping));
//! ```

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fastpath_http::Request;

/// A module: its name in `[[module]] name = "…"`, and how it reads its table.
pub trait Module: Send + Sync {
    /// The name `[[module]]` tables use.
    fn name(&self) -> &'static str;

    /// Reads the table's own keys (every key but `name`, `hosts`, `prefix` and `order`):
    /// what it makes of them, or why it cannot work with them. Keys it does not read are
    /// reported as unknown; a bad value is best reported with [`Settings::error`], at
    /// its place in the file.
    fn configure(&self, settings: &mut Settings<'_>) -> Result<Arc<dyn Configured>, String>;
}

/// A module as one `[[module]]` table configured it, shared by the workers.
pub trait Configured: Send + Sync {
    /// Where its hooks run among those of the other modules of the same phase, unless
    /// the table says (`order`).
    fn order(&self) -> Order {
        Order::Middle
    }

    /// One worker's hooks.
    fn for_worker(&self) -> Box<dyn Hooks>;
}

/// A module's hooks in one worker, one method per point of a request's life, run in
/// that order. Each declines unless the module says otherwise.
pub trait Hooks {
    /// The request head has been read.
    fn post_read(&mut self, _exchange: &mut Exchange<'_>) -> Decision {
        Decision::Decline
    }

    /// The path is translated: a rewrite changes it here ([`Exchange::set_path`]).
    fn translate(&mut self, _exchange: &mut Exchange<'_>) -> Decision {
        Decision::Decline
    }

    /// Access and authentication: who the client is and whether it may have this.
    fn access(&mut self, _exchange: &mut Exchange<'_>) -> Decision {
        Decision::Decline
    }

    /// The last look before the request is answered.
    fn fixups(&mut self, _exchange: &mut Exchange<'_>) -> Decision {
        Decision::Decline
    }

    /// Answers the request instead of the static files and the backends.
    fn handler(&mut self, _exchange: &mut Exchange<'_>) -> Decision {
        Decision::Decline
    }

    /// The request has been answered and logged. Called for every request the worker
    /// logs, whatever the module's scope, as Apache's log hook is: a module scoped to a
    /// prefix looks at the path itself.
    fn log(&mut self, _record: &LogRecord<'_>) {}
}

/// The points of a request's life where hooks run, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// [`Hooks::post_read`].
    PostRead,
    /// [`Hooks::translate`].
    Translate,
    /// [`Hooks::access`].
    Access,
    /// [`Hooks::fixups`].
    Fixups,
    /// [`Hooks::handler`].
    Handler,
}

impl Phase {
    /// Every phase, in the order they run.
    pub const ALL: [Phase; 5] = [
        Phase::PostRead,
        Phase::Translate,
        Phase::Access,
        Phase::Fixups,
        Phase::Handler,
    ];
}

/// Where a module's hooks run among the others' of a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Order {
    /// Before the others (an address check, cheaper than a password's).
    First,
    /// Among the others, in the file's order.
    Middle,
    /// After the others.
    Last,
}

impl std::str::FromStr for Order {
    type Err = String;

    fn from_str(s: &str) -> Result<Order, String> {
        match s {
            "first" => Ok(Order::First),
            "middle" => Ok(Order::Middle),
            "last" => Ok(Order::Last),
            _ => Err(format!(
                "`order` \"{s}\" is not one of \"first\", \"middle\", \"last\""
            )),
        }
    }
}

/// What a hook decided.
pub enum Decision {
    /// Nothing to say: the next hook, then the server, goes on.
    Decline,
    /// This is the answer; no further hook of any phase runs, and nothing is routed.
    Answer(Response),
}

/// An answer a module makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub(crate) status: u16,
    /// Field lines, `Name: value\r\n` each.
    pub(crate) fields: Vec<u8>,
    /// The body and its type; `None`: the server's own page for the status.
    pub(crate) body: Option<(String, Vec<u8>)>,
}

impl Response {
    /// An answer with this status and, unless a body is given, the server's own page for
    /// it (the one its errors get).
    ///
    /// # Panics
    /// If `status` is not a final status (200 to 599): an interim one is not an answer.
    pub fn new(status: u16) -> Response {
        assert!(
            (200..600).contains(&status),
            "{status} is not a final status"
        );
        Response {
            status,
            fields: Vec::new(),
            body: None,
        }
    }

    /// A redirect (301, 302, 303, 307 or 308) to `location`.
    ///
    /// # Panics
    /// If `status` is not one of those.
    pub fn redirect(status: u16, location: &str) -> Response {
        assert!(
            matches!(status, 301 | 302 | 303 | 307 | 308),
            "{status} is not a redirect"
        );
        Response::new(status).field("Location", location)
    }

    /// Adds a field to the head.
    ///
    /// # Panics
    /// If the name is not a token or the value has a control character other than tab:
    /// either would let a value inject fields (values a module takes from a request are
    /// its to check).
    pub fn field(mut self, name: &str, value: impl AsRef<[u8]>) -> Response {
        let value = value.as_ref();
        assert!(
            !name.is_empty() && name.bytes().all(is_token_byte),
            "field name {name:?} is not a token"
        );
        assert!(
            value
                .iter()
                .all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f)),
            "the value of {name} has a control character"
        );
        self.fields.extend_from_slice(name.as_bytes());
        self.fields.extend_from_slice(b": ");
        self.fields.extend_from_slice(value);
        self.fields.extend_from_slice(b"\r\n");
        self
    }

    /// Gives the answer a body of this type.
    ///
    /// # Panics
    /// If the type has a control character.
    pub fn body(mut self, content_type: &str, body: Vec<u8>) -> Response {
        assert!(
            content_type.bytes().all(|b| b >= 0x20 && b != 0x7f),
            "the content type has a control character"
        );
        self.body = Some((content_type.to_owned(), body));
        self
    }

    /// Its status.
    pub fn status(&self) -> u16 {
        self.status
    }
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A request as the hooks see it and may change it.
pub struct Exchange<'r> {
    pub(crate) request: &'r Request<'r>,
    pub(crate) client: Option<IpAddr>,
    pub(crate) https: bool,
    /// The decoded, normalised path the request is routed by.
    pub(crate) path: Vec<u8>,
    pub(crate) query: Option<String>,
    pub(crate) host: Option<&'r str>,
    /// The path changed in the phase running.
    pub(crate) changed: bool,
    /// The path changed in any phase.
    pub(crate) rewritten: bool,
    pub(crate) user: Option<String>,
    pub(crate) site: &'r fastpath_content::Site,
    pub(crate) compress: Option<Arc<fastpath_modules::compress::Policy>>,
    pub(crate) error_pages: Option<Arc<ErrorPages>>,
    /// The process's counters, for the status page.
    pub(crate) metrics: Option<&'r crate::metrics::Metrics>,
    pub(crate) head_edit: Option<Arc<dyn fastpath_http::HeadEdit>>,
}

impl<'r> Exchange<'r> {
    /// The method, as sent.
    pub fn method(&self) -> &str {
        self.request.method
    }

    /// The decoded and normalised path (`%2e%2e/` and `a/../` are gone): what the server
    /// routes by, as the modules before left it.
    pub fn path(&self) -> &[u8] {
        &self.path
    }

    /// The query, without its `?`.
    pub fn query(&self) -> Option<&str> {
        self.query.as_deref()
    }

    /// Routes the request by another path (an internal rewrite), with `query`.
    ///
    /// # Panics
    /// If `path` does not start with `/`.
    pub fn set_path(&mut self, path: Vec<u8>, query: Option<String>) {
        assert!(path.first() == Some(&b'/'), "a path starts with /");
        self.path = path;
        self.query = query;
        self.changed = true;
        self.rewritten = true;
    }

    /// Opens a file or directory of the host's document root, by a decoded path under
    /// it, never outside it (symbolic links included), as the static files are opened.
    pub fn open_beneath(&self, path: &[u8]) -> std::io::Result<std::fs::File> {
        self.site
            .open_beneath(path.strip_prefix(b"/").unwrap_or(path))
    }

    /// The file names a directory's path is answered with, in order (`index`).
    pub fn index_names(&self) -> &[String] {
        &self.site.options().index
    }

    /// The request's host (the absolute target's authority, else `Host`), as sent.
    pub fn host(&self) -> Option<&str> {
        self.host
    }

    /// The first value of a request field (ASCII case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.request.header(name)
    }

    /// The client's address; `None` for a client of a Unix-domain listener.
    pub fn client(&self) -> Option<IpAddr> {
        self.client
    }

    /// Whether the request came over TLS.
    pub fn is_https(&self) -> bool {
        self.https
    }

    /// Names the user the request was authenticated as, for the access log.
    pub fn set_user(&mut self, user: String) {
        self.user = Some(user);
    }

    /// Lets a static file's response be compressed on the fly as `policy` says (the
    /// coding the client prefers among the policy's, for the types and sizes it names),
    /// the compressed copy kept with the file in the content cache.
    pub fn compress_with(&mut self, policy: Arc<fastpath_modules::compress::Policy>) {
        self.compress = Some(policy);
    }

    /// Answers the errors of this request (the server's own, and modules' answers without
    /// a body of their own) with the pages `pages` names, files of the host's root.
    pub fn use_error_pages(&mut self, pages: Arc<ErrorPages>) {
        self.error_pages = Some(pages);
    }

    /// Puts this request's response head, whoever makes it, through `edit` (a module's
    /// header rules). The first module to ask decides: the one with the longest prefix,
    /// as its hooks run first.
    pub fn edit_head_with(&mut self, edit: Arc<dyn fastpath_http::HeadEdit>) {
        if self.head_edit.is_none() {
            self.head_edit = Some(edit);
        }
    }

    /// The user a module authenticated the request as.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }
}

/// The pages of error statuses: a path of the host's root for each status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorPages {
    pages: Vec<(u16, Vec<u8>)>,
}

impl ErrorPages {
    /// Answers `status` (400 to 599) with the file at `path` (decoded, from the root).
    ///
    /// # Panics
    /// If `status` is not an error status or `path` does not start with `/`.
    pub fn insert(&mut self, status: u16, path: Vec<u8>) {
        assert!(
            (400..600).contains(&status),
            "{status} is not an error status"
        );
        assert!(path.first() == Some(&b'/'), "a page's path starts with /");
        self.pages.retain(|(s, _)| *s != status);
        self.pages.push((status, path));
    }

    /// The page of `status`, if one was named.
    pub fn page(&self, status: u16) -> Option<&[u8]> {
        self.pages
            .iter()
            .find(|(s, _)| *s == status)
            .map(|(_, path)| path.as_slice())
    }
}

/// A request as logged, for the log hook.
pub struct LogRecord<'a> {
    /// The request line's parts: method, target, version.
    pub line: &'a [&'a [u8]],
    /// The status answered; 0 for an exchange handed to a backend as it began (a
    /// bridged connection's, whose status the server never sees).
    pub status: u16,
    /// The body bytes sent.
    pub body_bytes: u64,
    /// The client's address; `None` for a client of a Unix-domain listener.
    pub client: Option<IpAddr>,
}

/// A `[[module]]` table's own keys, as a module reads them. Every getter reports a value
/// of the wrong type where it is, and gives `None`.
pub struct Settings<'a> {
    pub(crate) table: &'a dyn toml_edit::TableLike,
    pub(crate) base_dir: &'a Path,
    /// Keys read, for the unknown-key errors.
    pub(crate) read: Vec<String>,
    /// Problems found, at their place in the file (byte offsets).
    pub(crate) errors: Vec<(Option<std::ops::Range<usize>>, String)>,
}

impl<'a> Settings<'a> {
    fn item(&mut self, key: &str) -> Option<&'a toml_edit::Item> {
        self.read.push(key.to_owned());
        self.table.get(key).filter(|item| !item.is_none())
    }

    fn wrong_type(&mut self, key: &str, expected: &str) {
        let span = self.span(key);
        self.errors
            .push((span, format!("`{key}` must be {expected}")));
    }

    fn span(&self, key: &str) -> Option<std::ops::Range<usize>> {
        let (k, item) = self.table.get_key_value(key)?;
        item.span().or_else(|| k.span())
    }

    /// Whether the table has the key.
    pub fn has(&self, key: &str) -> bool {
        self.table.get(key).is_some_and(|item| !item.is_none())
    }

    /// A string value.
    pub fn string(&mut self, key: &str) -> Option<String> {
        let item = self.item(key)?;
        match item.as_str() {
            Some(s) => Some(s.to_owned()),
            None => {
                self.wrong_type(key, "a string");
                None
            }
        }
    }

    /// A list of strings; a single string is a list of one.
    pub fn strings(&mut self, key: &str) -> Option<Vec<String>> {
        let item = self.item(key)?;
        if let Some(s) = item.as_str() {
            return Some(vec![s.to_owned()]);
        }
        let list = item.as_array().and_then(|array| {
            array
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
        });
        if list.is_none() {
            self.wrong_type(key, "a string or an array of strings");
        }
        list
    }

    /// A boolean value.
    pub fn boolean(&mut self, key: &str) -> Option<bool> {
        let item = self.item(key)?;
        let value = item.as_bool();
        if value.is_none() {
            self.wrong_type(key, "true or false");
        }
        value
    }

    /// An integer value.
    pub fn integer(&mut self, key: &str) -> Option<i64> {
        let item = self.item(key)?;
        let value = item.as_integer();
        if value.is_none() {
            self.wrong_type(key, "an integer");
        }
        value
    }

    /// A path, relative to the configuration file's directory unless absolute.
    pub fn path(&mut self, key: &str) -> Option<PathBuf> {
        self.string(key).map(|p| self.base_dir.join(p))
    }

    /// A table of strings (`{ "404" = "/404.html" }`), in the file's order.
    pub fn string_map(&mut self, key: &str) -> Option<Vec<(String, String)>> {
        let item = self.item(key)?;
        let map = item.as_table_like().and_then(|table| {
            table
                .iter()
                .map(|(k, v)| v.as_str().map(|v| (k.to_owned(), v.to_owned())))
                .collect::<Option<Vec<_>>>()
        });
        if map.is_none() {
            self.wrong_type(key, "a table of strings");
        }
        map
    }

    /// Reads each table of an array of tables (`rules = [{ … }, { … }]`) with `read`;
    /// the keys `read` leaves unread are reported as unknown.
    pub fn each_table(&mut self, key: &str, mut read: impl FnMut(&mut Settings<'a>)) -> bool {
        let Some(item) = self.item(key) else {
            return false;
        };
        let tables: Option<Vec<&'a dyn toml_edit::TableLike>> = match item {
            toml_edit::Item::ArrayOfTables(array) => Some(
                array
                    .iter()
                    .map(|t| t as &dyn toml_edit::TableLike)
                    .collect(),
            ),
            toml_edit::Item::Value(toml_edit::Value::Array(array)) => array
                .iter()
                .map(|v| v.as_inline_table().map(|t| t as &dyn toml_edit::TableLike))
                .collect(),
            _ => None,
        };
        let Some(tables) = tables else {
            self.wrong_type(key, "an array of tables");
            return false;
        };
        for table in tables {
            let mut inner = Settings {
                table,
                base_dir: self.base_dir,
                read: Vec::new(),
                errors: Vec::new(),
            };
            read(&mut inner);
            inner.report_unread(&[], &format!("in `{key}`"));
            self.errors.append(&mut inner.errors);
        }
        true
    }

    /// Reports a problem with the value of `key`, at its place in the file.
    pub fn error(&mut self, key: &str, message: impl Into<String>) {
        let span = self.span(key);
        self.errors.push((span, message.into()));
    }

    /// Reports the keys nobody read (but those in `besides`) as unknown, `place` saying
    /// where they are.
    pub(crate) fn report_unread(&mut self, besides: &[&str], place: &str) {
        let unread: Vec<(String, Option<std::ops::Range<usize>>)> = self
            .table
            .iter()
            .filter(|(name, _)| !besides.contains(name) && !self.read.iter().any(|r| r == name))
            .map(|(name, _)| (name.to_owned(), self.table.key(name).and_then(|k| k.span())))
            .collect();
        let known: Vec<&str> = self.read.iter().map(String::as_str).collect();
        for (name, span) in unread {
            let message = if known.is_empty() {
                format!("unknown key `{name}` {place}")
            } else {
                format!(
                    "unknown key `{name}` {place}; its keys: {}",
                    known.join(", ")
                )
            };
            self.errors.push((span, message));
        }
    }
}

/// The modules registered besides the ones the server ships.
static REGISTERED: Mutex<Vec<Arc<dyn Module>>> = Mutex::new(Vec::new());

/// Makes a module known to the configuration, by its name: call it before the
/// configuration is read. A name already known is replaced.
pub fn register(module: Arc<dyn Module>) {
    let mut registered = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    registered.retain(|m| m.name() != module.name());
    registered.push(module);
}

/// The modules registered, newest last.
pub(crate) fn registered() -> Vec<Arc<dyn Module>> {
    REGISTERED.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// One `[[module]]` table: which module, where it applies, and what it made of its keys.
#[derive(Clone)]
pub struct ModuleUse {
    /// The module's name.
    pub name: String,
    /// The host names it applies to (lower case, exact or `*.domain`); empty for all.
    pub hosts: Vec<String>,
    /// The decoded path prefix it applies to; `/` for every path.
    pub prefix: String,
    /// Where its hooks run among the others'.
    pub order: Order,
    /// The table's own keys as written, one `key = value` a line.
    pub(crate) own: String,
    pub(crate) configured: Arc<dyn Configured>,
}

impl ModuleUse {
    /// Whether a request for `host` (lower case, no port) and `path` is in its scope.
    pub(crate) fn applies(&self, host: Option<&str>, path: &[u8]) -> bool {
        if !path.starts_with(self.prefix.as_bytes()) {
            return false;
        }
        if self.hosts.is_empty() {
            return true;
        }
        let Some(host) = host else {
            return false;
        };
        self.hosts.iter().any(|name| match name.strip_prefix('*') {
            Some(suffix) => host.len() > suffix.len() && host.ends_with(suffix),
            None => name == host,
        })
    }
}

impl fmt::Debug for ModuleUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModuleUse")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("prefix", &self.prefix)
            .field("order", &self.order)
            .finish_non_exhaustive()
    }
}

/// Two uses are equal when their tables say the same: what a module makes of its keys
/// depends on them alone.
impl PartialEq for ModuleUse {
    fn eq(&self, other: &ModuleUse) -> bool {
        self.name == other.name
            && self.hosts == other.hosts
            && self.prefix == other.prefix
            && self.order == other.order
            && self.own == other.own
    }
}

impl Eq for ModuleUse {}
