//! Walks a parsed TOML document, building a [`Config`] and collecting every
//! problem with its position instead of stopping at the first.

use std::collections::HashMap;
use std::net::{Ipv6Addr, SocketAddr};
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use fastpath_drivers::UpstreamAddr;
use fastpath_handover::{
    parse_backend_addr, BackendConfig, HandoverMethod, RouteRule, MAX_UNIX_PATH,
};
use toml_edit::{Document, Item, Key, TableLike, Value};

use super::{Config, ConfigError, HostConfig, LogTarget, Model};

const TOP_KEYS: &[&str] = &[
    "listen",
    "workers",
    "model",
    "prefork",
    "threads",
    "percore",
    "root",
    "index",
    "dotfiles",
    "precompressed",
    "limits",
    "timeouts",
    "cache",
    "log",
    "host",
    "handover",
    "backend",
    "route",
];
const PREFORK_KEYS: &[&str] = &[
    "start",
    "min_spare",
    "max_spare",
    "max_children",
    "max_connections_per_child",
];
const THREADS_KEYS: &[&str] = &["threads", "max_active", "stack_size"];
const PERCORE_KEYS: &[&str] = &["busy_poll"];
/// More children or pool threads than this is almost certainly a typo.
const MAX_POOL: u64 = 65_536;
const CACHE_KEYS: &[&str] = &["enabled", "max_memory", "max_file_size", "max_open_files"];
const LIMITS_KEYS: &[&str] = &[
    "max_connections",
    "max_request_line",
    "max_header_bytes",
    "max_headers",
    "max_discard_body",
    "max_requests_per_connection",
];
const TIMEOUTS_KEYS: &[&str] = &["header", "keepalive", "send", "linger"];
const LOG_KEYS: &[&str] = &["access", "error", "level"];
const HOST_KEYS: &[&str] = &[
    "names",
    "root",
    "index",
    "dotfiles",
    "precompressed",
    "default",
];
const LEVELS: &[&str] = &["error", "warn", "info", "debug", "trace"];
const HANDOVER_KEYS: &[&str] = &["cache_memory", "cache_max_response"];
const BACKEND_KEYS: &[&str] = &[
    "name",
    "addresses",
    "max_connections",
    "connect_timeout",
    "response_timeout",
    "idle_timeout",
    "fail_timeout",
    "forwarded",
    "public_url",
    "cache",
];
const ROUTE_KEYS: &[&str] = &[
    "backend",
    "method",
    "prefix",
    "extensions",
    "unsafe_methods",
    "query",
    "fallback",
    "hosts",
];

/// More threads than this is almost certainly a typo, not a plan.
const MAX_WORKERS: u64 = 4096;
/// Caps timeouts so `Instant + timeout` can never overflow in the server.
const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

type Span = Option<Range<usize>>;

/// Parses `text`; see [`Config::from_toml`].
pub(super) fn parse(text: &str, base_dir: &Path) -> Result<Config, Vec<ConfigError>> {
    let mut checker = Checker::new(text, base_dir);
    let doc = match Document::parse(text) {
        Ok(doc) => doc,
        Err(e) => {
            let mut message = format!("TOML syntax error: {}", e.message());
            // toml_edit does not name the duplicated key; the span covers it.
            if e.message() == "duplicate key" {
                if let Some(key) = e.span().and_then(|s| text.get(s)) {
                    message = format!("{message} `{}`", key.trim());
                }
            }
            checker.error(e.span(), message);
            return Err(checker.errors);
        }
    };
    let config = checker.config(doc.as_table());
    if checker.errors.is_empty() {
        Ok(config)
    } else {
        // Stable sort: same-position errors keep the order they were found.
        checker.errors.sort_by_key(|e| (e.line, e.column));
        Err(checker.errors)
    }
}

/// `Ok` if `path` is an existing directory, else why not.
pub(super) fn check_dir(path: &Path) -> Result<(), String> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err("not a directory".to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

/// One key of a table, with the spans needed for error positions.
#[derive(Clone, Copy)]
struct Field<'a> {
    name: &'a str,
    key: &'a Key,
    item: &'a Item,
}

impl<'a> Field<'a> {
    fn get(table: &'a dyn TableLike, name: &str) -> Option<Field<'a>> {
        let (key, item) = table.get_key_value(name)?;
        (!item.is_none()).then_some(Field {
            name: key.get(),
            key,
            item,
        })
    }

    fn value_span(&self) -> Span {
        self.item.span().or_else(|| self.key.span())
    }
}

/// A table from the file (`[x]`, dotted keys or inline) and where it starts.
struct Section<'a> {
    table: &'a dyn TableLike,
    span: Span,
}

struct Checker<'a> {
    src: &'a str,
    /// Byte offset of the start of every line, for span → line:column.
    line_starts: Vec<usize>,
    base_dir: &'a Path,
    errors: Vec<ConfigError>,
}

impl<'a> Checker<'a> {
    fn new(src: &'a str, base_dir: &'a Path) -> Self {
        let line_starts = std::iter::once(0)
            .chain(src.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Checker {
            src,
            line_starts,
            base_dir,
            errors: Vec::new(),
        }
    }

    fn error(&mut self, span: Span, message: String) {
        let (line, column) = match span {
            Some(span) => self.position(span.start),
            None => (0, 0),
        };
        self.errors.push(ConfigError {
            line,
            column,
            message,
        });
    }

    /// 1-based line and column (in characters) of a byte offset.
    fn position(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.src.len());
        let line = self.line_starts.partition_point(|&s| s <= offset);
        let start = self.line_starts[line - 1];
        let column = match self.src.get(start..offset) {
            Some(text) => text.chars().count(),
            None => offset - start,
        };
        (line, column + 1)
    }

    fn config(&mut self, top: &'a toml_edit::Table) -> Config {
        let mut c = Config::default();
        self.check_keys(top, TOP_KEYS, "at the top level");

        if let Some(f) = Field::get(top, "listen") {
            c.listen = self.listen(f);
        }
        if let Some(f) = Field::get(top, "workers") {
            if let Some(n) = self.count(f, 0, MAX_WORKERS) {
                c.workers = to_usize(n);
            }
        }
        if let Some(f) = Field::get(top, "model") {
            if let Some(s) = self.string(f) {
                match s.parse::<Model>() {
                    Ok(model) => c.model = model,
                    Err(e) => self.error(f.value_span(), e),
                }
            }
        }
        if let Some(s) = self.section(top, "prefork") {
            self.prefork(&s, &mut c);
        }
        if let Some(s) = self.section(top, "threads") {
            self.threads(&s, &mut c);
        }
        if let Some(s) = self.section(top, "percore") {
            self.check_keys(s.table, PERCORE_KEYS, "in [percore]");
            if let Some(f) = Field::get(s.table, "busy_poll") {
                c.percore.busy_poll = self.duration(f);
            }
        }
        if let Some(s) = self.section(top, "limits") {
            self.limits(&s, &mut c);
        }
        if let Some(s) = self.section(top, "timeouts") {
            self.timeouts(&s, &mut c);
        }
        if let Some(s) = self.section(top, "cache") {
            self.cache(&s, &mut c);
        }
        if let Some(s) = self.section(top, "log") {
            self.log(&s, &mut c);
        }
        if let Some(s) = self.section(top, "handover") {
            self.handover(&s, &mut c);
        }

        c.default_host.root = match Field::get(top, "root") {
            Some(f) => self.root(f).unwrap_or_default(),
            None => {
                // The default root is the config file's directory, which
                // normally exists; a position-less error covers the odd case.
                let root = resolve(self.base_dir, Path::new("."));
                if let Err(e) = check_dir(&root) {
                    self.error(None, format!("default `root` {}: {e}", root.display()));
                }
                root
            }
        };
        self.host_common(top, &mut c.default_host);

        if let Some(f) = Field::get(top, "host") {
            let tables = self.array_tables(f);
            c.hosts = self.hosts(&tables, &c.default_host);
        }

        // Backends first, wherever they are written: routes refer to them.
        let mut backends = Backends::default();
        if let Some(f) = Field::get(top, "backend") {
            let tables = self.array_tables(f);
            c.backends = self.backends(&tables, &mut backends);
        }
        if let Some(f) = Field::get(top, "route") {
            let tables = self.array_tables(f);
            c.routes = self.routes(&tables, &c.backends, &backends);
        }
        c
    }

    fn prefork(&mut self, s: &Section<'a>, c: &mut Config) {
        self.check_keys(s.table, PREFORK_KEYS, "in [prefork]");
        let p = &mut c.prefork;
        let counts = [
            ("start", &mut p.start, 1),
            ("min_spare", &mut p.min_spare, 1),
            ("max_spare", &mut p.max_spare, 1),
            ("max_children", &mut p.max_children, 1),
        ];
        for (name, slot, min) in counts {
            if let Some(f) = Field::get(s.table, name) {
                if let Some(n) = self.count(f, min, MAX_POOL) {
                    *slot = to_usize(n);
                }
            }
        }
        if let Some(f) = Field::get(s.table, "max_connections_per_child") {
            if let Some(n) = self.count(f, 0, u64::MAX) {
                p.max_connections_per_child = n;
            }
        }
        if p.min_spare >= p.max_spare {
            self.error(
                s.span.clone(),
                format!(
                    "[prefork] `min_spare` ({}) must be below `max_spare` ({})",
                    p.min_spare, p.max_spare
                ),
            );
        }
        if p.start > p.max_children || p.min_spare > p.max_children {
            self.error(
                s.span.clone(),
                format!(
                    "[prefork] `start` ({}) and `min_spare` ({}) must not exceed `max_children` ({})",
                    p.start, p.min_spare, p.max_children
                ),
            );
        }
    }

    fn threads(&mut self, s: &Section<'a>, c: &mut Config) {
        self.check_keys(s.table, THREADS_KEYS, "in [threads]");
        let t = &mut c.threads;
        if let Some(f) = Field::get(s.table, "threads") {
            if let Some(n) = self.count(f, 1, MAX_POOL) {
                t.threads = to_usize(n);
            }
        }
        if let Some(f) = Field::get(s.table, "max_active") {
            if let Some(n) = self.count(f, 0, MAX_POOL) {
                t.max_active = to_usize(n);
            }
        }
        if let Some(f) = Field::get(s.table, "stack_size") {
            // Below 64 KiB a thread cannot even run the standard library's start-up.
            if let Some(n) = self.size(f, 64 * 1024) {
                t.stack_size = to_usize(n);
            }
        }
    }

    fn limits(&mut self, s: &Section<'a>, c: &mut Config) {
        self.check_keys(s.table, LIMITS_KEYS, "in [limits]");
        let l = &mut c.limits;
        let t = s.table;
        if let Some(f) = Field::get(t, "max_connections") {
            if let Some(n) = self.count(f, 1, usize::MAX as u64) {
                l.max_connections = to_usize(n);
            }
        }
        if let Some(f) = Field::get(t, "max_request_line") {
            if let Some(n) = self.size(f, 64) {
                l.max_request_line = to_usize(n);
            }
        }
        if let Some(f) = Field::get(t, "max_header_bytes") {
            if let Some(n) = self.size(f, 256) {
                l.max_header_bytes = to_usize(n);
            }
        }
        if let Some(f) = Field::get(t, "max_headers") {
            if let Some(n) = self.count(f, 1, usize::MAX as u64) {
                l.max_headers = to_usize(n);
            }
        }
        if let Some(f) = Field::get(t, "max_discard_body") {
            if let Some(n) = self.size(f, 0) {
                l.max_discard_body = n;
            }
        }
        if let Some(f) = Field::get(t, "max_requests_per_connection") {
            if let Some(n) = self.count(f, 1, u64::MAX) {
                l.max_requests_per_connection = n;
            }
        }
    }

    fn timeouts(&mut self, s: &Section<'a>, c: &mut Config) {
        self.check_keys(s.table, TIMEOUTS_KEYS, "in [timeouts]");
        let t = &mut c.timeouts;
        let slots = [
            ("header", &mut t.header),
            ("keepalive", &mut t.keepalive),
            ("send", &mut t.send),
            ("linger", &mut t.linger),
        ];
        for (name, slot) in slots {
            if let Some(f) = Field::get(s.table, name) {
                if let Some(d) = self.duration(f) {
                    *slot = d;
                }
            }
        }
    }

    fn cache(&mut self, s: &Section<'a>, c: &mut Config) {
        self.check_keys(s.table, CACHE_KEYS, "in [cache]");
        let t = s.table;
        if let Some(f) = Field::get(t, "enabled") {
            if let Some(b) = self.boolean(f) {
                c.cache.enabled = b;
            }
        }
        if let Some(f) = Field::get(t, "max_memory") {
            if let Some(n) = self.size(f, 0) {
                c.cache.max_memory = n;
            }
        }
        if let Some(f) = Field::get(t, "max_file_size") {
            if let Some(n) = self.size(f, 0) {
                c.cache.max_file_size = n;
            }
        }
        if let Some(f) = Field::get(t, "max_open_files") {
            if let Some(n) = self.count(f, 0, 1 << 20) {
                c.cache.max_open_files = to_usize(n);
            }
        }
    }

    fn log(&mut self, s: &Section<'a>, c: &mut Config) {
        self.check_keys(s.table, LOG_KEYS, "in [log]");
        if let Some(f) = Field::get(s.table, "access") {
            if let Some(target) = self.log_target(f) {
                c.log.access = target;
            }
        }
        if let Some(f) = Field::get(s.table, "error") {
            match self.log_target(f) {
                Some(LogTarget::Off) => self.error(
                    f.value_span(),
                    "`error` cannot be \"off\": errors must go somewhere; use \"stderr\", \"stdout\" or a file path".to_owned(),
                ),
                Some(target) => c.log.error = target,
                None => {}
            }
        }
        if let Some(f) = Field::get(s.table, "level") {
            if let Some(level) = self.string(f) {
                if LEVELS.contains(&level) {
                    c.log.level = level.to_owned();
                } else {
                    self.error(
                        f.value_span(),
                        format!(
                            "`level` must be one of {}; found \"{level}\"",
                            LEVELS.join(", ")
                        ),
                    );
                }
            }
        }
    }

    fn log_target(&mut self, f: Field<'a>) -> Option<LogTarget> {
        let s = self.string(f)?;
        Some(match s {
            "off" => LogTarget::Off,
            "stdout" => LogTarget::Stdout,
            "stderr" => LogTarget::Stderr,
            "" => {
                self.error(f.value_span(), format!("`{}` must not be empty", f.name));
                return None;
            }
            path => LogTarget::File(resolve(self.base_dir, Path::new(path))),
        })
    }

    /// The keys shared by the top level and `[[host]]`, except `root`.
    fn host_common(&mut self, t: &'a dyn TableLike, h: &mut HostConfig) {
        if let Some(f) = Field::get(t, "index") {
            if let Some(list) = self.string_list(f, true) {
                let mut index = Vec::new();
                for (name, span) in list {
                    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0'])
                    {
                        self.error(
                            span,
                            format!("`index` entry \"{name}\" must be a plain file name (no '/')"),
                        );
                    } else {
                        index.push(name.to_owned());
                    }
                }
                h.index = index;
            }
        }
        if let Some(f) = Field::get(t, "dotfiles") {
            if let Some(b) = self.boolean(f) {
                h.dotfiles = b;
            }
        }
        if let Some(f) = Field::get(t, "precompressed") {
            if let Some(b) = self.boolean(f) {
                h.precompressed = b;
            }
        }
    }

    fn hosts(&mut self, tables: &[Section<'a>], top: &HostConfig) -> Vec<HostConfig> {
        // Where each name and the default flag were first seen, for the
        // "already used at" part of duplicate errors.
        let mut seen: HashMap<String, (usize, usize)> = HashMap::new();
        let mut default_at: Option<(usize, usize)> = None;
        let mut hosts = Vec::new();
        for s in tables {
            let t = s.table;
            self.check_keys(t, HOST_KEYS, "in [[host]]");
            let mut h = top.clone();
            h.names = Vec::new();

            match Field::get(t, "names") {
                None => self.error(
                    s.span.clone(),
                    "[[host]] needs `names`, a list of the host names it serves".to_owned(),
                ),
                Some(f) => {
                    for (name, span) in self.string_list(f, false).unwrap_or_default() {
                        match host_name(name) {
                            Err(e) => self.error(span, e),
                            Ok(name) => {
                                let at = self.position(span.as_ref().map_or(0, |s| s.start));
                                if let Some((line, column)) = seen.get(&name) {
                                    self.error(
                                        span,
                                        format!(
                                            "host name `{name}` is already used at {line}:{column}"
                                        ),
                                    );
                                } else {
                                    seen.insert(name.clone(), at);
                                    h.names.push(name);
                                }
                            }
                        }
                    }
                }
            }
            if let Some(f) = Field::get(t, "root") {
                if let Some(root) = self.root(f) {
                    h.root = root;
                }
            }
            self.host_common(t, &mut h);
            if let Some(f) = Field::get(t, "default") {
                if self.boolean(f) == Some(true) {
                    let span = f.key.span();
                    if let Some((line, column)) = default_at {
                        self.error(
                            span,
                            format!(
                                "only one [[host]] may have `default = true`; \
                                 another one already has it at {line}:{column}"
                            ),
                        );
                    } else {
                        default_at = Some(self.position(span.map_or(0, |s| s.start)));
                        h.is_default = true;
                    }
                }
            }
            hosts.push(h);
        }
        hosts
    }

    fn root(&mut self, f: Field<'a>) -> Option<PathBuf> {
        let s = self.string(f)?;
        if s.is_empty() {
            self.error(f.value_span(), "`root` must not be empty".to_owned());
            return None;
        }
        let root = resolve(self.base_dir, Path::new(s));
        if let Err(e) = check_dir(&root) {
            self.error(
                f.value_span(),
                format!("`root` \"{s}\" ({}): {e}", root.display()),
            );
            return None;
        }
        Some(root)
    }

    fn listen(&mut self, f: Field<'a>) -> Vec<SocketAddr> {
        let mut addrs = Vec::new();
        for (s, span) in self.string_list(f, false).unwrap_or_default() {
            match s.parse::<SocketAddr>() {
                Ok(addr) if addrs.contains(&addr) => {
                    self.error(span, format!("`listen` address \"{s}\" is listed twice"));
                }
                Ok(addr) => addrs.push(addr),
                Err(_) => self.error(
                    span,
                    format!(
                        "`listen` address \"{s}\" is not IP:PORT \
                         (for example \"127.0.0.1:8080\" or \"[::1]:8080\"; host names are not resolved)"
                    ),
                ),
            }
        }
        if addrs.is_empty() {
            // Nothing valid: keep the default so a caller never sees an
            // empty list (errors were reported anyway).
            addrs = Config::default().listen;
        }
        addrs
    }

    /// Checks `key` is a table and returns it; `None` if absent or wrong.
    fn section(&mut self, top: &'a toml_edit::Table, key: &str) -> Option<Section<'a>> {
        let f = Field::get(top, key)?;
        match f.item.as_table_like() {
            Some(table) => Some(Section {
                table,
                span: f.item.span(),
            }),
            None => {
                self.wrong_type(f, "a table");
                None
            }
        }
    }

    fn check_keys(&mut self, table: &'a dyn TableLike, allowed: &[&str], place: &str) {
        for (name, _) in table.iter() {
            if allowed.contains(&name) {
                continue;
            }
            let span = table.key(name).and_then(|k| k.span());
            let hint = match closest(name, allowed) {
                Some(near) => format!(" (did you mean `{near}`?)"),
                None => String::new(),
            };
            self.error(
                span,
                format!(
                    "unknown key `{name}` {place}{hint}; allowed keys: {}",
                    allowed.join(", ")
                ),
            );
        }
    }

    fn wrong_type(&mut self, f: Field<'a>, expected: &str) {
        self.error(
            f.value_span(),
            format!(
                "`{}` must be {expected}, found {}",
                f.name,
                item_kind(f.item)
            ),
        );
    }

    fn string(&mut self, f: Field<'a>) -> Option<&'a str> {
        let s = f.item.as_str();
        if s.is_none() {
            self.wrong_type(f, "a string");
        }
        s
    }

    fn boolean(&mut self, f: Field<'a>) -> Option<bool> {
        let b = f.item.as_bool();
        if b.is_none() {
            self.wrong_type(f, "a boolean (true or false)");
        }
        b
    }

    /// A string, or an array of strings; each with its own span so errors
    /// point at the entry. Bad entries are reported and left out.
    fn string_list(&mut self, f: Field<'a>, allow_empty: bool) -> Option<Vec<(&'a str, Span)>> {
        match f.item {
            Item::Value(Value::String(s)) => Some(vec![(s.value().as_str(), f.value_span())]),
            Item::Value(Value::Array(array)) => {
                if array.is_empty() && !allow_empty {
                    self.error(f.value_span(), format!("`{}` must not be empty", f.name));
                }
                let mut list = Vec::new();
                for v in array.iter() {
                    match v.as_str() {
                        Some(s) => list.push((s, v.span())),
                        None => self.error(
                            v.span(),
                            format!(
                                "`{}` entries must be strings, found {}",
                                f.name,
                                value_kind(v)
                            ),
                        ),
                    }
                }
                Some(list)
            }
            _ => {
                self.wrong_type(f, "a string or an array of strings");
                None
            }
        }
    }

    /// A non-negative integer within `min..=max`.
    fn count(&mut self, f: Field<'a>, min: u64, max: u64) -> Option<u64> {
        let Some(n) = f.item.as_integer() else {
            self.wrong_type(f, "an integer");
            return None;
        };
        let n = self.non_negative(f, n)?;
        self.in_range(f, n, min, max, "")
    }

    fn non_negative(&mut self, f: Field<'a>, n: i64) -> Option<u64> {
        match u64::try_from(n) {
            Ok(n) => Some(n),
            Err(_) => {
                self.error(
                    f.value_span(),
                    format!("`{}` must not be negative, found {n}", f.name),
                );
                None
            }
        }
    }

    fn in_range(&mut self, f: Field<'a>, n: u64, min: u64, max: u64, unit: &str) -> Option<u64> {
        let message = if n < min {
            format!("`{}` must be at least {min}{unit}, found {n}{unit}", f.name)
        } else if n > max {
            format!("`{}` must be at most {max}{unit}, found {n}{unit}", f.name)
        } else {
            return Some(n);
        };
        self.error(f.value_span(), message);
        None
    }

    /// A byte size: an integer, or a string with a binary unit.
    fn size(&mut self, f: Field<'a>, min: u64) -> Option<u64> {
        let n = match f.item {
            Item::Value(Value::Integer(n)) => self.non_negative(f, *n.value())?,
            Item::Value(Value::String(s)) => match parse_size(s.value()) {
                Some(n) => n,
                None => {
                    self.error(
                        f.value_span(),
                        format!(
                            "`{}` has a bad size \"{}\": expected bytes as an integer, or a string \
                             such as \"512\", \"16k\", \"16KiB\", \"1m\", \"1g\"",
                            f.name,
                            s.value()
                        ),
                    );
                    return None;
                }
            },
            _ => {
                self.wrong_type(f, "a size (an integer or a string such as \"16k\")");
                return None;
            }
        };
        // Sizes are used as usize buffers; keep them addressable everywhere.
        self.in_range(f, n, min, usize::MAX as u64, " bytes")
    }

    /// A non-zero duration: integer seconds, or a string with a unit.
    fn duration(&mut self, f: Field<'a>) -> Option<Duration> {
        let d = match f.item {
            Item::Value(Value::Integer(n)) => {
                Duration::from_secs(self.non_negative(f, *n.value())?)
            }
            Item::Value(Value::String(s)) => match parse_duration(s.value()) {
                Some(d) => d,
                None => {
                    self.error(
                        f.value_span(),
                        format!(
                            "`{}` has a bad duration \"{}\": expected seconds as an integer, or a \
                             string such as \"500ms\", \"10s\", \"2m\", \"1h\"",
                            f.name,
                            s.value()
                        ),
                    );
                    return None;
                }
            },
            _ => {
                self.wrong_type(
                    f,
                    "a duration (an integer of seconds or a string such as \"10s\")",
                );
                return None;
            }
        };
        if d.is_zero() {
            self.error(
                f.value_span(),
                format!("`{}` must be longer than zero", f.name),
            );
            None
        } else if d > MAX_DURATION {
            self.error(
                f.value_span(),
                format!("`{}` must be at most 7 days (\"168h\")", f.name),
            );
            None
        } else {
            Some(d)
        }
    }
}

/// What routes need to know about the backends besides their configuration.
#[derive(Default)]
struct Backends {
    /// Name → index in `Config::backends`; the first of duplicated names.
    by_name: HashMap<String, usize>,
    /// Per backend: where its table starts, and whether it set `public_url`
    /// (even to a bad value, so a redirect route does not repeat that error).
    tables: Vec<((usize, usize), bool)>,
}

/// `[handover]`, `[[backend]]` and `[[route]]`.
impl<'a> Checker<'a> {
    fn handover(&mut self, s: &Section<'a>, c: &mut Config) {
        self.check_keys(s.table, HANDOVER_KEYS, "in [handover]");
        let h = &mut c.handover;
        for (name, slot) in [
            ("cache_memory", &mut h.cache_memory),
            ("cache_max_response", &mut h.cache_max_response),
        ] {
            if let Some(f) = Field::get(s.table, name) {
                if let Some(n) = self.size(f, 0) {
                    *slot = to_usize(n);
                }
            }
        }
    }

    /// The tables of an array of tables such as `[[backend]]`, whether written
    /// as headers or as an inline array of inline tables.
    fn array_tables(&mut self, f: Field<'a>) -> Vec<Section<'a>> {
        match f.item {
            Item::ArrayOfTables(array) => array
                .iter()
                .map(|t| Section {
                    table: t as &dyn TableLike,
                    span: t.span(),
                })
                .collect(),
            Item::Value(Value::Array(array)) => {
                let mut tables = Vec::new();
                for v in array.iter() {
                    match v.as_inline_table() {
                        Some(t) => tables.push(Section {
                            table: t as &dyn TableLike,
                            span: v.span(),
                        }),
                        None => self.error(
                            v.span(),
                            format!(
                                "`{}` entries must be tables, found {}",
                                f.name,
                                value_kind(v)
                            ),
                        ),
                    }
                }
                tables
            }
            _ => {
                self.error(
                    f.value_span(),
                    format!(
                        "`{0}` must be an array of tables (write each as [[{0}]]), found {1}",
                        f.name,
                        item_kind(f.item)
                    ),
                );
                Vec::new()
            }
        }
    }

    fn backends(&mut self, tables: &[Section<'a>], seen: &mut Backends) -> Vec<BackendConfig> {
        let mut backends = Vec::new();
        for s in tables {
            let t = s.table;
            self.check_keys(t, BACKEND_KEYS, "in [[backend]]");
            let mut b = BackendConfig::default();
            let start = self.position(s.span.as_ref().map_or(0, |s| s.start));
            match Field::get(t, "name") {
                None => self.error(
                    s.span.clone(),
                    "[[backend]] needs `name`, which routes use to refer to it".to_owned(),
                ),
                Some(f) => {
                    if let Some(name) = self.string(f) {
                        self.backend_name(f, name, backends.len(), seen);
                        b.name = name.to_owned();
                    }
                }
            }
            match Field::get(t, "addresses") {
                None => self.error(
                    s.span.clone(),
                    "[[backend]] needs `addresses`, one \"IP:PORT\" or \"unix:PATH\" \
                     or an array of them"
                        .to_owned(),
                ),
                Some(f) => b.addresses = self.backend_addresses(f),
            }
            if let Some(f) = Field::get(t, "max_connections") {
                if let Some(n) = self.count(f, 1, usize::MAX as u64) {
                    b.max_connections = to_usize(n);
                }
            }
            for (name, slot) in [
                ("connect_timeout", &mut b.connect_timeout),
                ("response_timeout", &mut b.response_timeout),
                ("idle_timeout", &mut b.idle_timeout),
                ("fail_timeout", &mut b.fail_timeout),
            ] {
                if let Some(f) = Field::get(t, name) {
                    if let Some(d) = self.duration(f) {
                        *slot = d;
                    }
                }
            }
            for (name, slot) in [("forwarded", &mut b.forwarded), ("cache", &mut b.cache)] {
                if let Some(f) = Field::get(t, name) {
                    if let Some(v) = self.boolean(f) {
                        *slot = v;
                    }
                }
            }
            let public_url = Field::get(t, "public_url");
            if let Some(f) = public_url {
                if let Some(url) = self.string(f) {
                    match check_public_url(url) {
                        Ok(()) => b.public_url = Some(url.to_owned()),
                        Err(e) => self.error(f.value_span(), e),
                    }
                }
            }
            seen.tables.push((start, public_url.is_some()));
            backends.push(b);
        }
        backends
    }

    fn backend_name(&mut self, f: Field<'a>, name: &str, index: usize, seen: &mut Backends) {
        let span = f.value_span();
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !valid {
            self.error(
                span.clone(),
                format!(
                    "backend name \"{name}\" must be lower-case letters, digits, '-' and '_' \
                     (at least one)"
                ),
            );
        }
        match seen.by_name.get(name) {
            Some(&first) => {
                let (line, column) = seen.tables[first].0;
                self.error(
                    span,
                    format!("backend name `{name}` is already used by the [[backend]] at {line}:{column}"),
                );
            }
            // Even a malformed name is remembered, so routes naming it are not
            // reported a second time.
            None => {
                seen.by_name.insert(name.to_owned(), index);
            }
        }
    }

    fn backend_addresses(&mut self, f: Field<'a>) -> Vec<UpstreamAddr> {
        let mut addrs = Vec::new();
        for (s, span) in self.string_list(f, false).unwrap_or_default() {
            let addr = match parse_backend_addr(s) {
                Ok(UpstreamAddr::Unix(path)) => {
                    let path = resolve(self.base_dir, &path);
                    if path.as_os_str().len() > MAX_UNIX_PATH {
                        self.error(
                            span,
                            format!(
                                "backend address \"{s}\" ({}): a Unix socket path may be at \
                                 most {MAX_UNIX_PATH} bytes",
                                path.display()
                            ),
                        );
                        continue;
                    }
                    UpstreamAddr::Unix(path)
                }
                Ok(addr) => addr,
                Err(e) => {
                    self.error(span, format!("`addresses`: {e}"));
                    continue;
                }
            };
            if addrs.contains(&addr) {
                self.error(span, format!("backend address \"{s}\" is listed twice"));
            } else {
                addrs.push(addr);
            }
        }
        addrs
    }

    fn routes(
        &mut self,
        tables: &[Section<'a>],
        configs: &[BackendConfig],
        backends: &Backends,
    ) -> Vec<RouteRule> {
        let mut routes = Vec::new();
        for s in tables {
            let t = s.table;
            self.check_keys(t, ROUTE_KEYS, "in [[route]]");
            let mut r = RouteRule::default();
            let mut backend = None;
            match Field::get(t, "backend") {
                None => self.error(
                    s.span.clone(),
                    "[[route]] needs `backend`, the name of a [[backend]]".to_owned(),
                ),
                Some(f) => {
                    if let Some(name) = self.string(f) {
                        match backends.by_name.get(name) {
                            Some(&i) => {
                                r.backend = i;
                                backend = Some(i);
                            }
                            None => self.error(f.value_span(), unknown_backend(name, configs)),
                        }
                    }
                }
            }
            if let Some(f) = Field::get(t, "method") {
                if let Some(m) = self.string(f) {
                    match m.parse::<HandoverMethod>() {
                        Ok(m) => r.method = m,
                        Err(e) => self.error(f.value_span(), e),
                    }
                    if let (HandoverMethod::Redirect, Some(i)) = (r.method, backend) {
                        let ((line, column), given) = backends.tables[i];
                        if !given {
                            self.error(
                                f.value_span(),
                                format!(
                                    "method \"redirect\" sends clients to the backend's \
                                     `public_url`, but [[backend]] `{}` at {line}:{column} has none",
                                    configs[i].name
                                ),
                            );
                        }
                    }
                }
            }
            // A condition key that is present counts even if its value is bad, so
            // one mistake is reported once.
            let mut conditions = false;
            if let Some(f) = Field::get(t, "prefix") {
                conditions = true;
                if let Some(p) = self.string(f) {
                    match check_prefix(p) {
                        Ok(()) => r.prefix = Some(p.to_owned()),
                        Err(e) => self.error(f.value_span(), e),
                    }
                }
            }
            if let Some(f) = Field::get(t, "extensions") {
                conditions = true;
                for (ext, span) in self.string_list(f, false).unwrap_or_default() {
                    match check_extension(ext) {
                        Ok(()) => r.extensions.push(ext.to_ascii_lowercase()),
                        Err(e) => self.error(span, e),
                    }
                }
            }
            for (name, slot) in [
                ("unsafe_methods", &mut r.unsafe_methods),
                ("query", &mut r.query),
                ("fallback", &mut r.fallback),
            ] {
                if let Some(f) = Field::get(t, name) {
                    match self.boolean(f) {
                        Some(v) => *slot = v,
                        None => conditions = true,
                    }
                }
            }
            conditions |= r.unsafe_methods || r.query || r.fallback;
            if let Some(f) = Field::get(t, "hosts") {
                for (name, span) in self.string_list(f, false).unwrap_or_default() {
                    match host_name(name) {
                        Ok(name) => r.hosts.push(name),
                        Err(e) => self.error(span, e),
                    }
                }
            }
            if !conditions {
                let whom = if Field::get(t, "hosts").is_some() {
                    "every request for its hosts"
                } else {
                    "every request"
                };
                self.error(
                    s.span.clone(),
                    format!(
                        "[[route]] has no condition, so it would send {whom} to the backend; \
                         say fallback = true or prefix = \"/\" if that is meant"
                    ),
                );
            }
            routes.push(r);
        }
        routes
    }
}

fn unknown_backend(name: &str, configs: &[BackendConfig]) -> String {
    if configs.is_empty() {
        return format!("no [[backend]] is named `{name}`: there is no [[backend]] table");
    }
    let names: Vec<&str> = configs.iter().map(|b| b.name.as_str()).collect();
    format!(
        "no [[backend]] is named `{name}`; backends: {}",
        names.join(", ")
    )
}

/// A URL clients can be redirected to: `http://` or `https://`, a host, and
/// only visible ASCII, since it is sent in a `Location` field.
fn check_public_url(url: &str) -> Result<(), String> {
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return Err(format!(
            "`public_url` \"{url}\" must start with http:// or https://"
        ));
    };
    if rest.split('/').next().unwrap_or_default().is_empty() {
        return Err(format!("`public_url` \"{url}\" has no host"));
    }
    if !url
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'?' && b != b'#')
    {
        return Err(format!(
            "`public_url` \"{url}\" must be visible ASCII without '?' or '#' \
             (percent-encode anything else); the request target is appended to it"
        ));
    }
    Ok(())
}

/// A prefix that some normalised path can start with.
fn check_prefix(prefix: &str) -> Result<(), String> {
    if !prefix.starts_with('/') {
        return Err(format!("`prefix` \"{prefix}\" must start with '/'"));
    }
    // The last segment may be cut short ("/app" also matches "/apple"), so only
    // the segments before it must be whole and proper.
    let segments: Vec<&str> = prefix[1..].split('/').collect();
    let inner = &segments[..segments.len() - 1];
    if prefix.contains('\0') || inner.iter().any(|s| matches!(*s, "" | "." | "..")) {
        return Err(format!(
            "`prefix` \"{prefix}\" can never match: request paths are normalised, \
             without empty, \".\" or \"..\" segments"
        ));
    }
    Ok(())
}

fn check_extension(ext: &str) -> Result<(), String> {
    if ext.is_empty() {
        return Err("`extensions` entries must not be empty".to_owned());
    }
    if let Some(bare) = ext.strip_prefix('.') {
        return Err(format!(
            "`extensions` entry \"{ext}\" must be written without the dot: \"{bare}\""
        ));
    }
    if ext.contains(['.', '/', '\0']) {
        return Err(format!(
            "`extensions` entry \"{ext}\" can never match: the extension is what follows \
             the last '.' of the last path segment"
        ));
    }
    Ok(())
}

fn to_usize(n: u64) -> usize {
    // Callers bound `n` by usize::MAX already; saturate rather than panic.
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// `base.join(path)` with `.` components and trailing slashes removed, so
/// `root = "."` is the config directory itself rather than `dir/.`.
fn resolve(base: &Path, path: &Path) -> PathBuf {
    let joined = base.join(path);
    let mut out = PathBuf::new();
    for c in joined.components() {
        if c != Component::CurDir || out.as_os_str().is_empty() {
            out.push(c.as_os_str());
        }
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

/// Splits "16k" into ("16", "k"); `None` without leading digits.
fn split_number(s: &str) -> Option<(u64, &str)> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n = s[..end].parse().ok()?;
    Some((n, &s[end..]))
}

/// Bytes from "512", "16k", "16K", "16KiB", "1m", "1MiB", "1g" (binary
/// units, case-insensitive); `None` if malformed or overflowing.
fn parse_size(s: &str) -> Option<u64> {
    let (n, unit) = split_number(s)?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

/// A duration from "500ms", "10s", "2m", "1h" or "10" (seconds); `None`
/// if malformed or overflowing. Zero is accepted here and rejected later
/// with its own message.
fn parse_duration(s: &str) -> Option<Duration> {
    let (n, unit) = split_number(s)?;
    Some(match unit {
        "us" => Duration::from_micros(n),
        "ms" => Duration::from_millis(n),
        "" | "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.checked_mul(60)?),
        "h" => Duration::from_secs(n.checked_mul(3600)?),
        _ => return None,
    })
}

/// Validates and lower-cases a `[[host]]` name.
fn host_name(raw: &str) -> Result<String, String> {
    let name = raw.to_ascii_lowercase();
    if name.is_empty() {
        return Err("host names must not be empty".to_owned());
    }
    if let Some(inner) = name.strip_prefix('[') {
        // IPv6 literal as it appears in a Host header, e.g. "[::1]".
        return match inner.split_once(']') {
            Some((addr, "")) if addr.parse::<Ipv6Addr>().is_ok() => Ok(name),
            Some((_, rest)) if rest.starts_with(':') => Err(format!(
                "host name \"{raw}\" must not include a port; ports are chosen by `listen`"
            )),
            _ => Err(format!("host name \"{raw}\" is not a valid IPv6 literal")),
        };
    }
    if name.contains(':') {
        return Err(format!(
            "host name \"{raw}\" must not include a port; ports are chosen by `listen`"
        ));
    }
    let valid_label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    let valid_domain = |d: &str| d.len() <= 253 && d.split('.').all(valid_label);
    if name.contains('*') {
        match name.strip_prefix("*.") {
            Some(rest) if valid_domain(rest) => {}
            _ => {
                return Err(format!(
                    "wildcard host name \"{raw}\" must have the form \"*.domain\" \
                     ('*' only as the whole first label)"
                ))
            }
        }
    } else if !valid_domain(&name) {
        return Err(format!(
            "host name \"{raw}\" is not a valid domain name or IP address \
             (letters, digits, '-' and '_' in dot-separated labels)"
        ));
    }
    Ok(name)
}

fn item_kind(item: &Item) -> &'static str {
    match item {
        Item::None => "nothing",
        Item::Value(v) => value_kind(v),
        Item::Table(_) => "a table",
        Item::ArrayOfTables(_) => "an array of tables",
    }
}

fn value_kind(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Boolean(_) => "a boolean",
        Value::Datetime(_) => "a date-time",
        Value::Array(_) => "an array",
        Value::InlineTable(_) => "a table",
    }
}

/// The allowed key nearest to a misspelt one, if near enough to be a
/// plausible typo.
fn closest<'k>(name: &str, allowed: &[&'k str]) -> Option<&'k str> {
    allowed
        .iter()
        .map(|k| (edit_distance(name, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4) && *d < k.len())
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}
