//! Walks a parsed TOML document against the key tables of [`super::keys`],
//! building a [`Config`] and collecting every problem with its position
//! instead of stopping at the first.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use fastpath_drivers::units::{parse_duration, parse_size};
use toml_edit::{Document, Item, Key, TableLike, Value};

use super::{Config, ConfigError};

/// Caps timeouts so `Instant + timeout` can never overflow in the server.
const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

pub(super) type Span = Option<Range<usize>>;

/// One key of a TOML table whose values go into a `T`.
pub(super) struct KeySpec<T: 'static> {
    pub(super) name: &'static str,
    /// What an absent key stands for, as the docs show it: a TOML value, or
    /// words where no value says it ("none", "top-level `root`"); empty for
    /// a table, which has a section of its own in the docs. Only the tests
    /// read it, to keep the docs and the structs' defaults in step.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) default: &'static str,
    /// For a key that must be given: the error when it is not.
    pub(super) required: Option<&'static str>,
    pub(super) kind: Kind<T>,
}

/// The kind of value a key takes, and how a good one is stored into `T`.
pub(super) enum Kind<T: 'static> {
    /// `true` or `false`.
    Bool(fn(&mut T, bool)),
    /// An integer within `min..=max`.
    Count(u64, u64, fn(&mut T, u64)),
    /// Bytes, at least `min`: an integer or a string such as "16k".
    Size(u64, fn(&mut T, u64)),
    /// Longer than zero and at most 7 days: integer seconds or a string such as "10s".
    Duration(fn(&mut T, std::time::Duration)),
    /// A string; an `Err` is reported at it.
    Text(fn(&mut T, &str) -> Result<(), String>),
    /// A string or a non-empty array of strings, each stored in turn; an
    /// `Err` is reported at its entry.
    List(fn(&mut T, &str) -> Result<(), String>),
    /// A table (`[name]`, dotted keys or inline).
    Table(for<'a> fn(&mut Checker<'a>, &Section<'a>, &mut T)),
    /// An array of tables (`[[name]]` or an inline array of inline tables).
    Tables(for<'a> fn(&mut Checker<'a>, &[Section<'a>], &mut T)),
    /// Anything else: reads, checks and stores the value itself.
    Custom(for<'a> fn(&mut Checker<'a>, Field<'a>, &mut T)),
}

/// The keys of one TOML table.
pub(super) struct TableSpec<T: 'static> {
    /// Where the table is, as unknown-key errors say it: "in [limits]".
    pub(super) place: &'static str,
    pub(super) keys: &'static [KeySpec<T>],
}

pub(super) const fn key<T>(name: &'static str, default: &'static str, kind: Kind<T>) -> KeySpec<T> {
    KeySpec {
        name,
        default,
        required: None,
        kind,
    }
}

pub(super) const fn required<T>(
    name: &'static str,
    missing: &'static str,
    kind: Kind<T>,
) -> KeySpec<T> {
    KeySpec {
        name,
        default: "required",
        required: Some(missing),
        kind,
    }
}

/// What later tables need to know about earlier ones.
#[derive(Default)]
pub(super) struct Seen {
    /// Where each host name was first given, for "already used at".
    pub(super) host_names: HashMap<String, (usize, usize)>,
    /// Where `default = true` was first given to a host.
    pub(super) default_host: Option<(usize, usize)>,
    /// Backend name → index in `Config::backends`; the first of duplicated names.
    pub(super) backend_index: HashMap<String, usize>,
    /// Every `[[backend]]` read so far.
    pub(super) backends: Vec<SeenBackend>,
}

pub(super) struct SeenBackend {
    pub(super) name: String,
    /// Where its table starts.
    pub(super) at: (usize, usize),
    /// Whether it set `public_url`, even to a bad value, so a redirect route
    /// does not repeat that error.
    pub(super) public_url: bool,
}

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
pub(super) struct Field<'a> {
    pub(super) name: &'a str,
    pub(super) key: &'a Key,
    pub(super) item: &'a Item,
}

impl<'a> Field<'a> {
    pub(super) fn get(table: &'a dyn TableLike, name: &str) -> Option<Field<'a>> {
        let (key, item) = table.get_key_value(name)?;
        (!item.is_none()).then_some(Field {
            name: key.get(),
            key,
            item,
        })
    }

    pub(super) fn value_span(&self) -> Span {
        self.item.span().or_else(|| self.key.span())
    }
}

/// A table from the file (`[x]`, dotted keys or inline) and where it starts.
pub(super) struct Section<'a> {
    pub(super) table: &'a dyn TableLike,
    pub(super) span: Span,
}

pub(super) struct Checker<'a> {
    src: &'a str,
    /// Byte offset of the start of every line, for span → line:column.
    line_starts: Vec<usize>,
    pub(super) base_dir: &'a Path,
    errors: Vec<ConfigError>,
    /// What tables read so far tell later ones (names in use, backends).
    pub(super) seen: Seen,
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
            seen: Seen::default(),
        }
    }

    pub(super) fn error(&mut self, span: Span, message: String) {
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
    pub(super) fn position(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.src.len());
        let line = self.line_starts.partition_point(|&s| s <= offset);
        let start = self.line_starts[line - 1];
        let column = match self.src.get(start..offset) {
            Some(text) => text.chars().count(),
            None => offset - start,
        };
        (line, column + 1)
    }

    /// Reads the keys of `s` into `target` as `spec` says, in the order of
    /// `spec`, after reporting the keys it does not know.
    pub(super) fn read_table<T>(&mut self, s: &Section<'a>, spec: &TableSpec<T>, target: &mut T) {
        self.check_keys(s.table, spec);
        self.read_keys(s, spec, target);
    }

    /// Reads the keys of `s` that `spec` has, leaving the others to the caller (a
    /// module reads the rest of its table).
    pub(super) fn read_keys<T>(&mut self, s: &Section<'a>, spec: &TableSpec<T>, target: &mut T) {
        for key in spec.keys {
            let Some(f) = Field::get(s.table, key.name) else {
                if let Some(missing) = key.required {
                    self.error(s.span.clone(), missing.to_owned());
                }
                continue;
            };
            self.read_value(f, &key.kind, target);
        }
    }

    /// Checks a value as its kind says, reporting what is wrong, and stores
    /// what is good. `None` (there for `?`) when the value is not of its kind.
    fn read_value<T>(&mut self, f: Field<'a>, kind: &Kind<T>, target: &mut T) -> Option<()> {
        match kind {
            Kind::Bool(store) => store(target, self.boolean(f)?),
            Kind::Count(min, max, store) => store(target, self.count(f, *min, *max)?),
            Kind::Size(min, store) => store(target, self.size(f, *min)?),
            Kind::Duration(store) => store(target, self.duration(f)?),
            Kind::Text(store) => {
                if let Err(e) = store(target, self.string(f)?) {
                    self.error(f.value_span(), e);
                }
            }
            Kind::List(store) => {
                for (s, span) in self.string_list(f, false)? {
                    if let Err(e) = store(target, s) {
                        self.error(span, e);
                    }
                }
            }
            Kind::Table(read) => {
                let table = self.table(f)?;
                read(self, &table, target);
            }
            Kind::Tables(read) => {
                let tables = self.array_tables(f);
                read(self, &tables, target);
            }
            Kind::Custom(read) => read(self, f, target),
        }
        Some(())
    }

    fn check_keys<T>(&mut self, table: &'a dyn TableLike, spec: &TableSpec<T>) {
        let allowed: Vec<&str> = spec.keys.iter().map(|k| k.name).collect();
        for (name, _) in table.iter() {
            if allowed.contains(&name) {
                continue;
            }
            let span = table.key(name).and_then(|k| k.span());
            let hint = match closest(name, &allowed) {
                Some(near) => format!(" (did you mean `{near}`?)"),
                None => String::new(),
            };
            self.error(
                span,
                format!(
                    "unknown key `{name}` {}{hint}; allowed keys: {}",
                    spec.place,
                    allowed.join(", ")
                ),
            );
        }
    }

    /// The field's value as a table; `None` (reported) if it is something else.
    fn table(&mut self, f: Field<'a>) -> Option<Section<'a>> {
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

    /// The tables of an array of tables such as `[[backend]]`, whether written
    /// as headers or as an inline array of inline tables.
    pub(super) fn array_tables(&mut self, f: Field<'a>) -> Vec<Section<'a>> {
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

    pub(super) fn wrong_type(&mut self, f: Field<'a>, expected: &str) {
        self.error(
            f.value_span(),
            format!(
                "`{}` must be {expected}, found {}",
                f.name,
                item_kind(f.item)
            ),
        );
    }

    pub(super) fn string(&mut self, f: Field<'a>) -> Option<&'a str> {
        let s = f.item.as_str();
        if s.is_none() {
            self.wrong_type(f, "a string");
        }
        s
    }

    pub(super) fn boolean(&mut self, f: Field<'a>) -> Option<bool> {
        let b = f.item.as_bool();
        if b.is_none() {
            self.wrong_type(f, "a boolean (true or false)");
        }
        b
    }

    /// A string, or an array of strings; each with its own span so errors
    /// point at the entry. Bad entries are reported and left out.
    pub(super) fn string_list(
        &mut self,
        f: Field<'a>,
        allow_empty: bool,
    ) -> Option<Vec<(&'a str, Span)>> {
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
        let n = self.quantity(
            f,
            "size",
            "bytes as an integer, or a string such as \"512\", \"16k\", \"16KiB\", \"1m\", \"1g\"",
            "a size (an integer or a string such as \"16k\")",
            |n| n,
            parse_size,
        )?;
        // Sizes are used as usize buffers; keep them addressable everywhere.
        self.in_range(f, n, min, usize::MAX as u64, " bytes")
    }

    /// A non-zero duration: integer seconds, or a string with a unit.
    fn duration(&mut self, f: Field<'a>) -> Option<Duration> {
        let d = self.quantity(
            f,
            "duration",
            "seconds as an integer, or a string such as \"500ms\", \"10s\", \"2m\", \"1h\"",
            "a duration (an integer of seconds or a string such as \"10s\")",
            Duration::from_secs,
            parse_duration,
        )?;
        let problem = if d.is_zero() {
            "must be longer than zero"
        } else if d > MAX_DURATION {
            "must be at most 7 days (\"168h\")"
        } else {
            return Some(d);
        };
        self.error(f.value_span(), format!("`{}` {problem}", f.name));
        None
    }

    /// A non-negative integer, or a string with a unit that `parse` reads.
    fn quantity<V>(
        &mut self,
        f: Field<'a>,
        what: &str,
        expected: &str,
        expected_type: &str,
        from_integer: fn(u64) -> V,
        parse: fn(&str) -> Option<V>,
    ) -> Option<V> {
        match f.item {
            Item::Value(Value::Integer(n)) => self.non_negative(f, *n.value()).map(from_integer),
            Item::Value(Value::String(s)) => {
                let v = parse(s.value());
                if v.is_none() {
                    let message = format!(
                        "`{}` has a bad {what} \"{}\": expected {expected}",
                        f.name,
                        s.value()
                    );
                    self.error(f.value_span(), message);
                }
                v
            }
            _ => {
                self.wrong_type(f, expected_type);
                None
            }
        }
    }
}

pub(super) fn to_usize(n: u64) -> usize {
    // Callers bound `n` by usize::MAX already; saturate rather than panic.
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// `base.join(path)` with `.` components and trailing slashes removed, so
/// `root = "."` is the config directory itself rather than `dir/.`.
pub(super) fn resolve(base: &Path, path: &Path) -> PathBuf {
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
pub(super) fn closest<'k>(name: &str, allowed: &[&'k str]) -> Option<&'k str> {
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
