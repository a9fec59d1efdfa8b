//! Rewrite and redirect rules, in the manner of nginx's `rewrite`: an ordered list of
//! regular expressions on the request's path, each with a replacement and what to do
//! with it (rewrite the path inside the server, or answer with a redirect).
//!
//! Decisions, and why:
//! - Rules match the decoded, normalised path (what [`fastpath_http::normalize_path`]
//!   gives, nginx's `$uri`), never the raw target: `/%61dmin` and `/a/../admin` must
//!   not slip past a rule written for `/admin`. The search is unanchored, as nginx's
//!   (write `^` and `$`), and leftmost-first like PCRE. Patterns may match bytes that are
//!   not UTF-8 (`(?-u:\xff)`); `.` and classes match whole UTF-8 characters, and `.` no
//!   line feed unless `(?s)`, as in PCRE.
//! - In a replacement, `$0` is the whole match, `$1` to `$9` a numbered group (one digit,
//!   as in nginx, so `$10` is group 1 then `0`), `$name` a named group (the longest run of
//!   `A-Z a-z 0-9 _` after a letter or `_`), `${N}` or `${name}` either without that
//!   ambiguity, and `$$` a `$`. Any other `$` is an error, and so is a reference to a group
//!   the pattern does not have: both would otherwise silently produce wrong URLs.
//! - The query, as nginx: a replacement without `?` keeps the request's query; one with
//!   `?` puts its own query first and the request's after it, joined by `&`; one ending
//!   in `?` drops the request's query (and the final `?` is not part of the result).
//! - An internal rewrite's path is decoded text, like the path it matched: `%` in it is
//!   a `%`, and captured text goes in as it was matched. The result must start with `/`;
//!   it is then normalised as a request path is (dot segments resolved, `//` merged), and
//!   one that would climb above the root is refused. Text in its query part is kept as
//!   written (visible ASCII), and captured text put into a query is percent-encoded for
//!   every byte outside the unreserved set, so that it stays one value.
//! - A redirect's replacement is a URL, written as it will be sent (visible ASCII, `%`
//!   escapes as they are and checked, no `#` since the query would follow a fragment): a
//!   path such as `/new/$1` or an absolute URL. Captured text is
//!   percent-encoded on its way into it (all but unreserved bytes and, before the `?`,
//!   `/`), so no request can put a line break, a space or a `?` into a `Location`.
//! - The first rule that matches applies. A redirect ends the evaluation; an internal
//!   rewrite starts it again from the first rule on the new path (nginx's `last`). At most
//!   [`MAX_REWRITES`] rewrites are made (nginx's 10), and a path seen twice is a loop: both
//!   are refused with a [`RewriteError`], which the server answers with 500 and logs, as
//!   nginx does. The same path seen again would match the same rule again forever.
//! - No result holds CR, LF or NUL: the configuration's text is checked when the rule is
//!   made, and what a request brings in is checked when it is put into a result.

use crate::listing::percent_encode_into;
use fastpath_http::{normalize_path, PathError};
use regex_automata::meta::Regex;
use regex_automata::util::captures::Captures;
use regex_automata::util::syntax;
use regex_automata::PatternID;
use std::fmt;

/// The number of internal rewrites one request may go through, as nginx's.
pub const MAX_REWRITES: usize = 10;

/// What a rule does with a path it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Continue with the replacement as the request's path, matching the rules again.
    Rewrite,
    /// Answer with this redirect status (301, 302, 307 or 308) and the replacement as
    /// `Location`. 303 is left out: nginx has no such flag and a rewrite rule has no
    /// reason to turn a request into a GET.
    Redirect(u16),
}

/// The redirect statuses a rule may answer with.
pub const REDIRECT_STATUSES: [u16; 4] = [301, 302, 307, 308];

/// One compiled rule.
#[derive(Debug, Clone)]
pub struct Rule {
    pattern: String,
    regex: Regex,
    replacement: Replacement,
    action: Action,
}

/// A replacement split where its first literal `?` is.
#[derive(Debug, Clone)]
struct Replacement {
    path: Vec<Piece>,
    query: Query,
}

/// What a replacement says about the query.
#[derive(Debug, Clone)]
enum Query {
    /// No `?`: the request's query is kept.
    Keep,
    /// `?` then these pieces, the request's query appended after `&`.
    Prepend(Vec<Piece>),
    /// Ending in `?`: these pieces alone (maybe none), the request's query dropped.
    Replace(Vec<Piece>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    /// Text of the replacement: visible ASCII where it is sent as written.
    Literal(String),
    Group(usize),
}

/// Why a rule could not be made; the configuration's loader says where it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleError {
    /// The pattern is not a valid regular expression.
    Regex {
        /// The regular expression engine's message.
        message: String,
    },
    /// The replacement refers to a group the pattern does not have.
    NoSuchGroup {
        /// The reference as written (`$3`, `${name}`).
        reference: String,
        /// Byte offset of its `$` in the replacement.
        at: usize,
        /// How many numbered groups the pattern has (not counting `$0`).
        groups: usize,
    },
    /// A `$` that starts no reference (`$$` is a dollar sign).
    LoneDollar {
        /// Byte offset in the replacement.
        at: usize,
    },
    /// `${` without its `}`, or `${}`.
    BadBraces {
        /// Byte offset of the `$` in the replacement.
        at: usize,
    },
    /// A byte a replacement cannot hold: CR, LF or NUL anywhere, and for a redirect or
    /// in a query anything but visible ASCII.
    BadByte {
        /// The byte.
        byte: u8,
        /// Byte offset in the replacement.
        at: usize,
    },
    /// A `%` not followed by two hexadecimal digits where the replacement is sent as
    /// written (a redirect, a query).
    BadEscape {
        /// Byte offset in the replacement.
        at: usize,
    },
    /// A `#` where the replacement is sent as written: the request's query would go after
    /// the fragment, and a fragment has no meaning inside the server.
    Fragment {
        /// Byte offset in the replacement.
        at: usize,
    },
    /// A redirect whose replacement is empty.
    EmptyLocation,
    /// An internal rewrite whose replacement does not start with `/`.
    NotAbsolute,
    /// A redirect status outside 301, 302, 307 and 308.
    Status(u16),
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuleError::Regex { message } => write!(f, "invalid regular expression: {message}"),
            RuleError::NoSuchGroup {
                reference,
                at,
                groups,
            } => write!(
                f,
                "replacement refers to {reference} (at byte {at}), a group the pattern does not \
                 have (it has {groups} numbered group{})",
                if *groups == 1 { "" } else { "s" }
            ),
            RuleError::LoneDollar { at } => write!(
                f,
                "`$` at byte {at} of the replacement starts no group reference (write `$$` for a \
                 dollar sign)"
            ),
            RuleError::BadBraces { at } => write!(
                f,
                "`${{` at byte {at} of the replacement needs a group number or name and a `}}`"
            ),
            RuleError::BadByte { byte, at } => write!(
                f,
                "byte {byte:#04x} at byte {at} of the replacement is not allowed there (a \
                 redirect or a query is written as it is sent: visible ASCII, `%`-escaped)"
            ),
            RuleError::BadEscape { at } => write!(
                f,
                "`%` at byte {at} of the replacement is not followed by two hexadecimal digits \
                 (write `%25` for a percent sign)"
            ),
            RuleError::Fragment { at } => write!(
                f,
                "`#` at byte {at} of the replacement: fragments are not supported (the query \
                 would follow them)"
            ),
            RuleError::EmptyLocation => f.write_str("a redirect needs a non-empty replacement"),
            RuleError::NotAbsolute => f.write_str(
                "an internal rewrite's replacement must start with `/` (to send the client \
                 elsewhere, give a redirect status)",
            ),
            RuleError::Status(status) => write!(
                f,
                "redirect status {status} is not one of 301, 302, 307, 308"
            ),
        }
    }
}

impl std::error::Error for RuleError {}

impl Rule {
    /// Compiles a rule: `pattern` is searched for in the path, `replacement` is what
    /// replaces the path (see the module's documentation), `action` what to do then.
    pub fn new(pattern: &str, replacement: &str, action: Action) -> Result<Rule, RuleError> {
        if let Action::Redirect(status) = action {
            if !REDIRECT_STATUSES.contains(&status) {
                return Err(RuleError::Status(status));
            }
        }
        let regex = Regex::builder()
            // Paths are bytes and may not be UTF-8: let a pattern say so.
            .syntax(syntax::Config::new().utf8(false))
            .build(pattern)
            .map_err(|e| RuleError::Regex {
                // The build error alone says only "error parsing pattern 0", and the
                // syntax error's own text spans lines: one line says what and where.
                message: match e.syntax_error() {
                    Some(regex_syntax::Error::Parse(e)) => {
                        format!(
                            "{} (at byte {} of the pattern)",
                            e.kind(),
                            e.span().start.offset
                        )
                    }
                    Some(regex_syntax::Error::Translate(e)) => {
                        format!(
                            "{} (at byte {} of the pattern)",
                            e.kind(),
                            e.span().start.offset
                        )
                    }
                    Some(other) => other.to_string(),
                    None => e.to_string(),
                },
            })?;
        let replacement = Replacement::parse(replacement, &regex, action)?;
        Ok(Rule {
            pattern: pattern.to_owned(),
            regex,
            replacement,
            action,
        })
    }

    /// The pattern as written.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// What the rule does.
    pub fn action(&self) -> Action {
        self.action
    }
}

impl Replacement {
    fn parse(text: &str, regex: &Regex, action: Action) -> Result<Replacement, RuleError> {
        let redirect = matches!(action, Action::Redirect(_));
        if redirect && text.is_empty() {
            return Err(RuleError::EmptyLocation);
        }
        let info = regex.group_info();
        let group_len = info.group_len(PatternID::ZERO);
        let no_such_group = |at: usize, next: usize| RuleError::NoSuchGroup {
            reference: text[at..next].to_owned(),
            at,
            groups: group_len.saturating_sub(1),
        };
        let bytes = text.as_bytes();
        let mut path = Vec::new();
        let mut query: Option<Vec<Piece>> = None;
        let mut literal = String::new();
        // The last thing read was a literal `?` (not one written as part of `$$`).
        let mut ends_in_question_mark = false;
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            // What is sent as written must be visible ASCII; an internal path is decoded
            // text, where only line breaks and NUL have no place.
            let as_sent = redirect || query.is_some() || b == b'?';
            if as_sent {
                if !(0x21..=0x7e).contains(&b) {
                    return Err(RuleError::BadByte { byte: b, at: i });
                }
                if b == b'#' {
                    return Err(RuleError::Fragment { at: i });
                }
                if b == b'%'
                    && !(bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                        && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
                {
                    return Err(RuleError::BadEscape { at: i });
                }
            } else if matches!(b, b'\r' | b'\n' | 0) {
                return Err(RuleError::BadByte { byte: b, at: i });
            }
            ends_in_question_mark = false;
            if b == b'$' {
                let (reference, next) = parse_reference(bytes, i)?;
                let index = match reference {
                    Reference::Dollar => None,
                    Reference::Index(index) if index < group_len => Some(index),
                    Reference::Index(_) => return Err(no_such_group(i, next)),
                    Reference::Name(name) => match info.to_index(PatternID::ZERO, name) {
                        Some(index) => Some(index),
                        None => return Err(no_such_group(i, next)),
                    },
                };
                match index {
                    None => literal.push('$'),
                    Some(index) => {
                        flush(&mut literal, &mut path, &mut query);
                        push(&mut path, &mut query, Piece::Group(index));
                    }
                }
                i = next;
                continue;
            }
            if b == b'?' {
                ends_in_question_mark = true;
                if query.is_none() {
                    flush(&mut literal, &mut path, &mut query);
                    query = Some(Vec::new());
                    i += 1;
                    continue;
                }
            }
            // `i` is at a character boundary: only whole characters are consumed.
            let c = text[i..].chars().next().unwrap_or_default();
            literal.push(c);
            i += c.len_utf8();
        }
        flush(&mut literal, &mut path, &mut query);
        if !redirect {
            match path.first() {
                Some(Piece::Literal(first)) if first.starts_with('/') => {}
                Some(Piece::Group(_)) => {} // checked on each result
                _ => return Err(RuleError::NotAbsolute),
            }
        }
        let query = match query {
            None => Query::Keep,
            Some(mut pieces) if ends_in_question_mark => {
                if let Some(Piece::Literal(last)) = pieces.last_mut() {
                    last.pop();
                    if last.is_empty() {
                        pieces.pop();
                    }
                }
                Query::Replace(pieces)
            }
            Some(pieces) => Query::Prepend(pieces),
        };
        Ok(Replacement { path, query })
    }
}

/// Moves pending literal text into the path's or the query's pieces.
fn flush(literal: &mut String, path: &mut Vec<Piece>, query: &mut Option<Vec<Piece>>) {
    if !literal.is_empty() {
        let text = std::mem::take(literal);
        push(path, query, Piece::Literal(text));
    }
}

fn push(path: &mut Vec<Piece>, query: &mut Option<Vec<Piece>>, piece: Piece) {
    match query {
        Some(query) => query.push(piece),
        None => path.push(piece),
    }
}

enum Reference<'a> {
    Dollar,
    Index(usize),
    Name(&'a str),
}

/// Reads the reference whose `$` is at `bytes[at]`; gives it and the offset after it.
fn parse_reference(bytes: &[u8], at: usize) -> Result<(Reference<'_>, usize), RuleError> {
    let is_name_byte = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
    // Only ASCII is consulted below, so every slice boundary is a character boundary.
    let text = |from: usize, to: usize| std::str::from_utf8(&bytes[from..to]).unwrap_or("");
    match bytes.get(at + 1) {
        Some(b'$') => Ok((Reference::Dollar, at + 2)),
        Some(d) if d.is_ascii_digit() => Ok((Reference::Index(usize::from(d - b'0')), at + 2)),
        Some(b) if b.is_ascii_alphabetic() || *b == b'_' => {
            let end = at
                + 1
                + bytes[at + 1..]
                    .iter()
                    .take_while(|b| is_name_byte(b))
                    .count();
            Ok((Reference::Name(text(at + 1, end)), end))
        }
        Some(b'{') => {
            let start = at + 2;
            let len = bytes[start..]
                .iter()
                .take_while(|b| is_name_byte(b))
                .count();
            if len == 0 || bytes.get(start + len) != Some(&b'}') {
                return Err(RuleError::BadBraces { at });
            }
            let inner = text(start, start + len);
            let reference = if inner.bytes().all(|b| b.is_ascii_digit()) {
                // A number too large for usize names no group either.
                Reference::Index(inner.parse().unwrap_or(usize::MAX))
            } else {
                Reference::Name(inner)
            };
            Ok((reference, start + len + 1))
        }
        _ => Err(RuleError::LoneDollar { at }),
    }
}

/// Where a request goes after the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// No rule matched: serve the request as it came.
    Unchanged,
    /// Serve this path (decoded and normalised, starting with `/`) and query instead.
    Rewritten {
        /// The new path, as [`fastpath_http::normalize_path`] gives paths.
        path: Vec<u8>,
        /// The new query (without `?`), `None` when empty.
        query: Option<String>,
    },
    /// Answer with a redirect.
    Redirect {
        /// 301, 302, 307 or 308.
        status: u16,
        /// The `Location` value.
        location: String,
    },
}

/// Why the rules could not give a result. The server answers 500 ([`RewriteError::status`])
/// and logs the message: the configuration is at fault, not the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RewriteError {
    /// An internal rewrite led back to a path already seen for this request.
    Loop {
        /// The path seen twice.
        path: Vec<u8>,
    },
    /// More than [`MAX_REWRITES`] internal rewrites.
    TooManyRewrites {
        /// The path the last allowed rewrite gave.
        path: Vec<u8>,
    },
    /// A rule's result is not one the server can use.
    BadResult {
        /// The rule's index in the list.
        rule: usize,
        /// What is wrong with it.
        reason: BadResult,
    },
}

/// What is wrong with a rule's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadResult {
    /// An internal rewrite that does not start with `/`.
    NotAbsolute,
    /// CR, LF or NUL in an internal rewrite's path.
    ControlByte(u8),
    /// A redirect to an empty location.
    EmptyLocation,
    /// An internal rewrite that normalisation refuses (it climbs above the root).
    Path(PathError),
}

impl RewriteError {
    /// The status the server answers with: 500.
    pub fn status(&self) -> u16 {
        500
    }
}

impl fmt::Display for RewriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RewriteError::Loop { path } => write!(
                f,
                "rewrite loop: {} was reached twice",
                String::from_utf8_lossy(path)
            ),
            RewriteError::TooManyRewrites { path } => write!(
                f,
                "more than {MAX_REWRITES} rewrites (the last gave {})",
                String::from_utf8_lossy(path)
            ),
            RewriteError::BadResult { rule, reason } => {
                write!(f, "rewrite rule {rule} gave ")?;
                match reason {
                    BadResult::NotAbsolute => f.write_str("a path that does not start with `/`"),
                    BadResult::ControlByte(b) => write!(f, "a path holding byte {b:#04x}"),
                    BadResult::EmptyLocation => f.write_str("an empty redirect location"),
                    BadResult::Path(e) => write!(f, "a path refused: {e}"),
                }
            }
        }
    }
}

impl std::error::Error for RewriteError {}

/// An ordered list of rules.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    rules: Vec<Rule>,
}

impl Rules {
    /// The rules, evaluated in this order.
    pub fn new(rules: Vec<Rule>) -> Rules {
        Rules { rules }
    }

    /// Whether there are no rules (the server can skip the call).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Evaluates the rules for a request with the decoded, normalised `path` and the raw
    /// `query` (the text after `?`, if any).
    pub fn apply(&self, path: &[u8], query: Option<&str>) -> Result<Outcome, RewriteError> {
        let mut path = path.to_vec();
        let mut query = query.filter(|q| !q.is_empty()).map(str::to_owned);
        let mut seen = vec![path.clone()];
        'restart: loop {
            for (index, rule) in self.rules.iter().enumerate() {
                // Most rules do not match: they cost a search without captures, and only
                // the one that does gets its groups found.
                if !rule.regex.is_match(path.as_slice()) {
                    continue;
                }
                let mut caps = rule.regex.create_captures();
                rule.regex.captures(path.as_slice(), &mut caps);
                let bad = |reason| RewriteError::BadResult {
                    rule: index,
                    reason,
                };
                let new_query = rule.replacement.query(&path, &caps, query.as_deref());
                match rule.action {
                    Action::Redirect(status) => {
                        let mut location = String::new();
                        for piece in &rule.replacement.path {
                            match piece {
                                Piece::Literal(text) => location.push_str(text),
                                Piece::Group(g) => percent_encode_into(
                                    group(&path, &caps, *g),
                                    true,
                                    &mut location,
                                ),
                            }
                        }
                        if let Some(q) = new_query {
                            location.push('?');
                            location.push_str(&q);
                        }
                        if location.is_empty() {
                            return Err(bad(BadResult::EmptyLocation));
                        }
                        return Ok(Outcome::Redirect { status, location });
                    }
                    Action::Rewrite => {
                        let mut decoded = Vec::new();
                        for piece in &rule.replacement.path {
                            match piece {
                                Piece::Literal(text) => decoded.extend_from_slice(text.as_bytes()),
                                Piece::Group(g) => {
                                    decoded.extend_from_slice(group(&path, &caps, *g))
                                }
                            }
                        }
                        if decoded.first() != Some(&b'/') {
                            return Err(bad(BadResult::NotAbsolute));
                        }
                        if let Some(&b) = decoded.iter().find(|b| matches!(b, b'\r' | b'\n' | 0)) {
                            return Err(bad(BadResult::ControlByte(b)));
                        }
                        // Encoded and decoded again, so that the new path is normalised by
                        // the same code as every request path.
                        let mut encoded = String::with_capacity(decoded.len());
                        percent_encode_into(&decoded, true, &mut encoded);
                        let mut normalized = Vec::with_capacity(decoded.len());
                        normalize_path(&encoded, &mut normalized)
                            .map_err(|e| bad(BadResult::Path(e)))?;
                        if seen.len() > MAX_REWRITES {
                            return Err(RewriteError::TooManyRewrites { path });
                        }
                        if seen.contains(&normalized) {
                            return Err(RewriteError::Loop { path: normalized });
                        }
                        seen.push(normalized.clone());
                        path = normalized;
                        query = new_query;
                        continue 'restart;
                    }
                }
            }
            break;
        }
        if seen.len() == 1 {
            Ok(Outcome::Unchanged)
        } else {
            Ok(Outcome::Rewritten { path, query })
        }
    }
}

/// The text of group `index` in `haystack`, empty when the group took no part.
fn group<'h>(haystack: &'h [u8], caps: &Captures, index: usize) -> &'h [u8] {
    caps.get_group(index)
        .map_or(&[][..], |span| &haystack[span.range()])
}

impl Replacement {
    /// The query of the result, `None` when it is empty.
    fn query(&self, haystack: &[u8], caps: &Captures, request: Option<&str>) -> Option<String> {
        let own = |pieces: &[Piece]| {
            let mut out = String::new();
            for piece in pieces {
                match piece {
                    Piece::Literal(text) => out.push_str(text),
                    Piece::Group(g) => {
                        percent_encode_into(group(haystack, caps, *g), false, &mut out)
                    }
                }
            }
            out
        };
        let query = match &self.query {
            Query::Keep => request.unwrap_or("").to_owned(),
            Query::Replace(pieces) => own(pieces),
            Query::Prepend(pieces) => {
                let mut query = own(pieces);
                if let Some(request) = request.filter(|r| !r.is_empty()) {
                    if !query.is_empty() {
                        query.push('&');
                    }
                    query.push_str(request);
                }
                query
            }
        };
        Some(query).filter(|q| !q.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(list: &[(&str, &str, Action)]) -> Rules {
        Rules::new(
            list.iter()
                .map(|(p, r, a)| Rule::new(p, r, *a).unwrap())
                .collect(),
        )
    }

    fn rewritten(path: &str, query: Option<&str>) -> Outcome {
        Outcome::Rewritten {
            path: path.as_bytes().to_vec(),
            query: query.map(str::to_owned),
        }
    }

    fn redirect(status: u16, location: &str) -> Outcome {
        Outcome::Redirect {
            status,
            location: location.to_owned(),
        }
    }

    #[test]
    fn numbered_and_named_captures() {
        let r = rules(&[(
            r"^/user/(?P<name>[a-z]+)/(\d+)$",
            "/profile.html/${name}/$2/$name/${2}0/$10",
            Action::Rewrite,
        )]);
        assert_eq!(
            r.apply(b"/user/ann/42", None),
            Ok(rewritten("/profile.html/ann/42/ann/420/ann0", None))
        );
        assert_eq!(r.apply(b"/user/Ann/42", None), Ok(Outcome::Unchanged));
        let whole = rules(&[(r"^/old/[a-z]+\.php$", "/index$0", Action::Rewrite)]);
        assert_eq!(
            whole.apply(b"/old/page.php", None),
            Ok(rewritten("/index/old/page.php", None))
        );
    }

    #[test]
    fn dollar_signs() {
        let r = rules(&[("^/price/(.*)$", "/cost$$/$1/$$$1", Action::Rewrite)]);
        assert_eq!(
            r.apply(b"/price/ten", None),
            Ok(rewritten("/cost$/ten/$ten", None))
        );
    }

    #[test]
    fn a_group_that_took_no_part_is_empty() {
        let r = rules(&[("^/(a)?b/(.*)$", "/x$1y/$2", Action::Rewrite)]);
        assert_eq!(r.apply(b"/b/c", None), Ok(rewritten("/xy/c", None)));
    }

    #[test]
    fn query_kept_prepended_or_dropped() {
        let keep = rules(&[("^/a$", "/b", Action::Rewrite)]);
        assert_eq!(
            keep.apply(b"/a", Some("x=1")),
            Ok(rewritten("/b", Some("x=1")))
        );
        assert_eq!(keep.apply(b"/a", None), Ok(rewritten("/b", None)));
        assert_eq!(keep.apply(b"/a", Some("")), Ok(rewritten("/b", None)));

        let prepend = rules(&[("^/item/(.*)$", "/show?id=$1", Action::Rewrite)]);
        assert_eq!(
            prepend.apply(b"/item/7", Some("x=1")),
            Ok(rewritten("/show", Some("id=7&x=1")))
        );
        assert_eq!(
            prepend.apply(b"/item/7", None),
            Ok(rewritten("/show", Some("id=7")))
        );
        // Captured text is one value in a query: `&`, `=`, space, `/` and non-ASCII
        // bytes escaped.
        assert_eq!(
            prepend.apply(b"/item/a&b=c d/\xc3\xa9", None),
            Ok(rewritten("/show", Some("id=a%26b%3Dc%20d%2F%C3%A9")))
        );

        let drop = rules(&[("^/a$", "/b?", Action::Rewrite)]);
        assert_eq!(drop.apply(b"/a", Some("x=1")), Ok(rewritten("/b", None)));
        let replace = rules(&[("^/a$", "/b?y=2?", Action::Rewrite)]);
        assert_eq!(
            replace.apply(b"/a", Some("x=1")),
            Ok(rewritten("/b", Some("y=2")))
        );
        // A `?` after a group is still a final `?`, and `$$?` a dollar then one.
        let after_group = rules(&[("^/(a)$", "/b?v=$1?", Action::Rewrite)]);
        assert_eq!(
            after_group.apply(b"/a", Some("x=1")),
            Ok(rewritten("/b", Some("v=a")))
        );
        let dollar = rules(&[("^/a$", "/b?v=$$?", Action::Rewrite)]);
        assert_eq!(
            dollar.apply(b"/a", Some("x=1")),
            Ok(rewritten("/b", Some("v=$")))
        );
        // Only an empty own query with the request's: no stray `&`.
        let empty = rules(&[("^/(a)(z?)$", "/b?$2", Action::Rewrite)]);
        assert_eq!(
            empty.apply(b"/a", Some("x=1")),
            Ok(rewritten("/b", Some("x=1")))
        );
    }

    #[test]
    fn each_redirect_status() {
        for status in REDIRECT_STATUSES {
            let r = rules(&[("^/old/(.*)$", "/new/$1", Action::Redirect(status))]);
            assert_eq!(r.apply(b"/old/x", None), Ok(redirect(status, "/new/x")));
        }
    }

    #[test]
    fn redirect_locations() {
        let r = rules(&[(
            "^/old/((?s-u:.)*)$",
            "https://example.com/new/$1",
            Action::Redirect(301),
        )]);
        assert_eq!(
            r.apply(b"/old/a b/\xe9?\r\n", Some("q=1")),
            Ok(redirect(
                301,
                "https://example.com/new/a%20b/%E9%3F%0D%0A?q=1"
            ))
        );
        let drop = rules(&[("^/old/(.*)$", "/new/$1?", Action::Redirect(302))]);
        assert_eq!(
            drop.apply(b"/old/x", Some("q=1")),
            Ok(redirect(302, "/new/x"))
        );
        let own = rules(&[("^/old/(.*)$", "/search?q=$1", Action::Redirect(307))]);
        assert_eq!(
            own.apply(b"/old/a/b", Some("page=2")),
            Ok(redirect(307, "/search?q=a%2Fb&page=2"))
        );
        // Escapes written in the replacement stay as written.
        let escaped = rules(&[("^/x$", "/caf%C3%A9", Action::Redirect(308))]);
        assert_eq!(escaped.apply(b"/x", None), Ok(redirect(308, "/caf%C3%A9")));
    }

    #[test]
    fn internal_rewrite_is_decoded_and_normalised() {
        let r = rules(&[("^/files/(.*)$", "/data/./$1/../%20", Action::Rewrite)]);
        assert_eq!(
            r.apply(b"/files/a b", None),
            Ok(rewritten("/data/%20", None))
        );
        let up = rules(&[("^/up/(.*)$", "/$1/../../..", Action::Rewrite)]);
        assert_eq!(
            up.apply(b"/up/x", None),
            Err(RewriteError::BadResult {
                rule: 0,
                reason: BadResult::Path(PathError::AboveRoot)
            })
        );
    }

    #[test]
    fn bad_results_are_refused() {
        let relative = rules(&[("^/(.*)$", "$1", Action::Rewrite)]);
        assert_eq!(
            relative.apply(b"/x", None),
            Err(RewriteError::BadResult {
                rule: 0,
                reason: BadResult::NotAbsolute
            })
        );
        // `(?s-u:.)` is any byte, line breaks and bytes that are not UTF-8 included.
        let line_break = rules(&[("^/a/((?s-u:.)*)$", "/b/$1", Action::Rewrite)]);
        assert_eq!(
            line_break.apply(b"/a/x\r\nSet-Cookie: y", None),
            Err(RewriteError::BadResult {
                rule: 0,
                reason: BadResult::ControlByte(b'\r')
            })
        );
        let empty = rules(&[
            ("^/keep$", "/ok", Action::Rewrite),
            ("^/(z?)", "$1", Action::Redirect(302)),
        ]);
        assert_eq!(
            empty.apply(b"/", None),
            Err(RewriteError::BadResult {
                rule: 1,
                reason: BadResult::EmptyLocation
            })
        );
    }

    #[test]
    fn first_match_wins_and_rewrites_restart() {
        let r = rules(&[
            ("^/b$", "/c", Action::Rewrite),
            ("^/a$", "/b", Action::Rewrite),
            ("^/a$", "/never", Action::Rewrite),
            ("^/c$", "https://elsewhere/", Action::Redirect(302)),
        ]);
        assert_eq!(
            r.apply(b"/a", None),
            Ok(redirect(302, "https://elsewhere/"))
        );
        assert_eq!(r.apply(b"/z", None), Ok(Outcome::Unchanged));
        let no_redirect = rules(&[
            ("^/b$", "/c", Action::Rewrite),
            ("^/a$", "/b?from=a", Action::Rewrite),
        ]);
        assert_eq!(
            no_redirect.apply(b"/a", Some("x")),
            Ok(rewritten("/c", Some("from=a&x")))
        );
    }

    #[test]
    fn loops_are_refused() {
        let two = rules(&[
            ("^/a$", "/b", Action::Rewrite),
            ("^/b$", "/a", Action::Rewrite),
        ]);
        assert_eq!(
            two.apply(b"/a", None),
            Err(RewriteError::Loop {
                path: b"/a".to_vec()
            })
        );
        let same = rules(&[("^/(.*)$", "/$1", Action::Rewrite)]);
        assert_eq!(
            same.apply(b"/x", None),
            Err(RewriteError::Loop {
                path: b"/x".to_vec()
            })
        );
        assert_eq!(
            two.apply(b"/a", None).unwrap_err().to_string(),
            "rewrite loop: /a was reached twice"
        );
    }

    #[test]
    fn ten_rewrites_accepted_eleven_refused() {
        // /s0 -> /s1 -> ... -> /s{n}, one rule a step, listed last step first so that
        // each rewrite goes through the list again.
        let chain = |n: usize| {
            let list: Vec<Rule> = (0..n)
                .rev()
                .map(|i| {
                    Rule::new(
                        &format!("^/s{i}$"),
                        &format!("/s{}", i + 1),
                        Action::Rewrite,
                    )
                    .unwrap()
                })
                .collect();
            Rules::new(list).apply(b"/s0", None)
        };
        assert_eq!(chain(10), Ok(rewritten("/s10", None)));
        assert_eq!(
            chain(11),
            Err(RewriteError::TooManyRewrites {
                path: b"/s10".to_vec()
            })
        );
    }

    #[test]
    fn bytes_that_are_not_utf8() {
        let r = rules(&[(r"^/(?-u:\xff)(.*)$", "/ff/$1", Action::Rewrite)]);
        assert_eq!(r.apply(b"/\xffz", None), Ok(rewritten("/ff/z", None)));
        let dot = rules(&[("^/(.)$", "/one/$1", Action::Rewrite)]);
        assert_eq!(
            dot.apply("/é".as_bytes(), None),
            Ok(rewritten("/one/é", None))
        );
        assert_eq!(dot.apply(b"/\xff", None), Ok(Outcome::Unchanged));
    }

    #[test]
    fn compile_errors() {
        let err = |p: &str, r: &str, a: Action| Rule::new(p, r, a).unwrap_err();
        assert_eq!(
            err("^/(unclosed$", "/x", Action::Rewrite),
            RuleError::Regex {
                message: "unclosed group (at byte 2 of the pattern)".into()
            }
        );
        assert_eq!(
            err("^/a{2,1}$", "/x", Action::Rewrite).to_string(),
            "invalid regular expression: invalid repetition count range, the start must be <= \
             the end (at byte 3 of the pattern)"
        );
        assert_eq!(
            err("^/(a)/(b)$", "/x/$3", Action::Rewrite),
            RuleError::NoSuchGroup {
                reference: "$3".into(),
                at: 3,
                groups: 2
            }
        );
        assert_eq!(
            err("^/(a)$", "/x/${10}", Action::Rewrite),
            RuleError::NoSuchGroup {
                reference: "${10}".into(),
                at: 3,
                groups: 1
            }
        );
        assert_eq!(
            err("^/(?P<id>a)$", "/x/$ids", Action::Rewrite),
            RuleError::NoSuchGroup {
                reference: "$ids".into(),
                at: 3,
                groups: 1
            }
        );
        assert_eq!(
            err("^/(a)$", "/x/$", Action::Rewrite),
            RuleError::LoneDollar { at: 3 }
        );
        assert_eq!(
            err("^/(a)$", "/x/$-", Action::Rewrite),
            RuleError::LoneDollar { at: 3 }
        );
        assert_eq!(
            err("^/(a)$", "/x/${1", Action::Rewrite),
            RuleError::BadBraces { at: 3 }
        );
        assert_eq!(
            err("^/(a)$", "/x/${}", Action::Rewrite),
            RuleError::BadBraces { at: 3 }
        );
        assert_eq!(
            err("^/a$", "", Action::Redirect(301)),
            RuleError::EmptyLocation
        );
        assert_eq!(err("^/a$", "b", Action::Rewrite), RuleError::NotAbsolute);
        assert_eq!(
            err("^/a$", "https://example.com/", Action::Rewrite),
            RuleError::NotAbsolute
        );
        assert_eq!(
            err("^/a$", "/b", Action::Redirect(303)),
            RuleError::Status(303)
        );
        assert_eq!(
            err("^/a$", "/b", Action::Redirect(200)),
            RuleError::Status(200)
        );
        assert_eq!(
            err("^/a$", "/b\r\nX: y", Action::Rewrite),
            RuleError::BadByte { byte: b'\r', at: 2 }
        );
        assert_eq!(
            err("^/a$", "/b\0", Action::Rewrite),
            RuleError::BadByte { byte: 0, at: 2 }
        );
        assert_eq!(
            err("^/a$", "/b c", Action::Redirect(302)),
            RuleError::BadByte { byte: b' ', at: 2 }
        );
        assert_eq!(
            err("^/a$", "/b?q=a b", Action::Rewrite),
            RuleError::BadByte { byte: b' ', at: 6 }
        );
        assert_eq!(
            err("^/a$", "/b%zz", Action::Redirect(302)),
            RuleError::BadEscape { at: 2 }
        );
        assert_eq!(
            err("^/a$", "/b?q=%4", Action::Rewrite),
            RuleError::BadEscape { at: 5 }
        );
        assert_eq!(
            err("^/a$", "/b#top", Action::Redirect(302)),
            RuleError::Fragment { at: 2 }
        );
        // An internal path is decoded text: a space, `%` or `#` is part of a file name.
        let r = rules(&[("^/a$", "/b c%#é", Action::Rewrite)]);
        assert_eq!(r.apply(b"/a", None), Ok(rewritten("/b c%#é", None)));
        assert_eq!(
            err("^/(a)/(b)$", "/x/$3", Action::Rewrite).to_string(),
            "replacement refers to $3 (at byte 3), a group the pattern does not have (it has 2 \
             numbered groups)"
        );
    }
}
