//! A rule's pattern, compiled once per process: the same function checks a pattern for the
//! compiler and builds it for the server, so the two never disagree on what a pattern means.
//!
//! Patterns are byte-oriented, as PCRE's are by default: `.` and `[^\n]` match any byte but a
//! newline, the input need not be UTF-8, and `\b`, `\w`, `[[:blank:]]` are ASCII. Each pattern is
//! anchored at the start of the unconsumed input. Two engines are built from it:
//! - a meta regex (leftmost-first, as PCRE: `a|ab` takes `a`), which finds the match and, for
//!   the winning rule only, its captures;
//! - a lazy DFA that answers whether the buffered input can still grow into a match, so input
//!   that can never match any qualifying rule is refused at once instead of waiting for the
//!   input buffer to fill.

use regex_automata::hybrid::dfa::{Cache as DfaCache, DFA};
use regex_automata::meta::{Cache as RegexCache, Regex};
use regex_automata::nfa::thompson;
use regex_automata::util::captures::Captures;
use regex_automata::util::{start, syntax};
use regex_automata::{Anchored, Input, MatchKind};

/// A compiled pattern.
#[derive(Clone, Debug)]
pub struct Pattern {
    regex: Regex,
    /// Anchored, [`MatchKind::All`]: its dead state means "no continuation can match".
    prefix: DFA,
    groups: usize,
}

/// The syntax every pattern is read with: bytes, not Unicode (see the module doc).
fn syntax_config() -> syntax::Config {
    syntax::Config::new().unicode(false).utf8(false)
}

/// Compiles `pattern`, or says in one line why it cannot be: a syntax error (with the
/// position in the pattern), or a pattern that matches the empty input (its rule would run
/// again and again on no input at all).
pub fn compile(pattern: &str) -> Result<Pattern, String> {
    let hir = regex_syntax::ParserBuilder::new()
        .unicode(false)
        .utf8(false)
        .build()
        .parse(pattern)
        .map_err(|e| one_line(&e.to_string()))?;
    if hir.properties().minimum_len() == Some(0) {
        return Err(format!(
            "pattern `{pattern}` matches the empty input; a rule must consume at least one byte"
        ));
    }
    let regex = Regex::builder()
        .syntax(syntax_config())
        .configure(Regex::config().utf8_empty(false))
        .build(pattern)
        .map_err(|e| one_line(&e.to_string()))?;
    let prefix = DFA::builder()
        .syntax(syntax_config())
        .thompson(thompson::Config::new().utf8(false))
        .configure(
            DFA::config()
                .match_kind(MatchKind::All)
                .starts_for_each_pattern(false),
        )
        .build(pattern)
        .map_err(|e| one_line(&e.to_string()))?;
    let groups = regex.captures_len();
    Ok(Pattern {
        regex,
        prefix,
        groups,
    })
}

/// regex-syntax's errors draw the pattern over several lines; a spec position wants one.
fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message.lines().map(str::trim).collect();
    // The last line says what is wrong ("error: unclosed group").
    match lines.iter().rev().find(|l| l.starts_with("error:")) {
        Some(last) => format!(
            "bad regular expression: {}",
            last.trim_start_matches("error:").trim()
        ),
        None => format!("bad regular expression: {}", lines.join(" ")),
    }
}

/// Per-worker scratch space for one pattern: the engines' caches and the capture slots, made
/// once and reused for every match.
pub struct Scratch {
    regex: RegexCache,
    prefix: DfaCache,
    captures: Captures,
}

impl Pattern {
    /// Scratch space for this pattern.
    pub fn scratch(&self) -> Scratch {
        Scratch {
            regex: self.regex.create_cache(),
            prefix: self.prefix.create_cache(),
            captures: self.regex.create_captures(),
        }
    }

    /// Groups of the pattern, group 0 (the whole match) included.
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// The length of the match at the start of `input`, if any.
    pub fn match_len(&self, scratch: &mut Scratch, input: &[u8]) -> Option<usize> {
        let input = Input::new(input).anchored(Anchored::Yes);
        self.regex
            .search_half_with(&mut scratch.regex, &input)
            .map(|m| m.offset())
    }

    /// Finds the match at the start of `input` again with its groups, into the scratch's
    /// capture slots; true if there was one.
    pub fn capture(&self, scratch: &mut Scratch, input: &[u8]) -> bool {
        let input = Input::new(input).anchored(Anchored::Yes);
        self.regex
            .search_captures_with(&mut scratch.regex, &input, &mut scratch.captures);
        scratch.captures.is_match()
    }

    /// Whether some continuation of `input` could match: false once the DFA is dead, that is
    /// when no input that starts with these bytes matches. An engine that gives up (its
    /// cache thrashing) answers true: waiting is the safe mistake, bounded by the input buffer.
    pub fn viable(&self, scratch: &mut Scratch, input: &[u8]) -> bool {
        let dfa = &self.prefix;
        let cache = &mut scratch.prefix;
        let config = start::Config::new().anchored(Anchored::Yes);
        let Ok(mut state) = dfa.start_state(cache, &config) else {
            return true;
        };
        for &byte in input {
            state = match dfa.next_state(cache, state, byte) {
                Ok(s) => s,
                Err(_) => return true,
            };
            if state.is_dead() {
                return false;
            }
            if state.is_quit() {
                return true;
            }
        }
        true
    }
}

impl Scratch {
    /// The capture slots of the last [`Pattern::capture`].
    pub(crate) fn captures(&self) -> &Captures {
        &self.captures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftmost_first_and_anchored() {
        let p = compile("a|ab").unwrap();
        let mut s = p.scratch();
        assert_eq!(p.match_len(&mut s, b"abc"), Some(1));
        assert_eq!(p.match_len(&mut s, b"xab"), None);
        let p = compile(r"([^\n]*)(\r?\n)").unwrap();
        let mut s = p.scratch();
        assert_eq!(p.match_len(&mut s, b"hi\r\nmore"), Some(4));
        assert_eq!(p.groups(), 3);
        // Greedy, as PCRE: `[^\n]*` takes the \r, and `\r?` then matches nothing.
        assert!(p.capture(&mut s, b"hi\r\n"));
        assert_eq!(s.captures().get_group(1).unwrap().range(), 0..3);
    }

    #[test]
    fn bytes_not_unicode() {
        let p = compile(r"(.)\n").unwrap();
        let mut s = p.scratch();
        assert_eq!(p.match_len(&mut s, b"\xff\n"), Some(2));
        assert!(compile("[[:blank:]]+x").is_ok());
    }

    #[test]
    fn viability() {
        let p = compile(r"GET [^\n]*\n").unwrap();
        let mut s = p.scratch();
        assert!(p.viable(&mut s, b""));
        assert!(p.viable(&mut s, b"GE"));
        assert!(p.viable(&mut s, b"GET /x"));
        assert!(!p.viable(&mut s, b"GX"));
        assert!(!p.viable(&mut s, b"PUT"));
    }

    #[test]
    fn errors() {
        let e = compile("(ab").unwrap_err();
        assert!(e.starts_with("bad regular expression:"), "{e}");
        assert!(!e.contains('\n'));
        let e = compile("a*").unwrap_err();
        assert!(e.contains("matches the empty input"), "{e}");
    }
}
