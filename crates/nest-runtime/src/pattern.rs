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

use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::hybrid::dfa::{Cache as LazyCache, DFA as LazyDfa};
use regex_automata::meta::{Cache as RegexCache, Regex};
use regex_automata::nfa::thompson;
use regex_automata::util::captures::Captures;
use regex_automata::util::primitives::StateID;
use regex_automata::util::{start, syntax};
use regex_automata::{Anchored, Input, MatchKind};

/// A compiled pattern.
#[derive(Clone, Debug)]
pub struct Pattern {
    /// For the captures of the winning rule.
    regex: Regex,
    /// Leftmost-first and anchored, as the regex: finds the match length, and its dead state
    /// says that no continuation can match (before a match is found, a leftmost-first DFA
    /// drops no alternative, so dead means dead for every continuation).
    dfa: Dfa,
    groups: usize,
}

#[derive(Clone, Debug)]
enum Dfa {
    /// Compiled whole: its states are plain numbers, so a scan can stop at the end of the
    /// input and go on from there when more arrives.
    Dense(dense::DFA<Vec<u32>>, StateID),
    /// For a pattern whose whole DFA would be too large: built lazily, its states are only
    /// valid in one cache, so each arrival scans from the start.
    Lazy(LazyDfa),
}

/// A whole DFA larger than this is built lazily instead.
const DENSE_LIMIT: usize = 2 << 20;

/// The syntax every pattern is read with: bytes, not Unicode (see the module doc).
fn syntax_config() -> syntax::Config {
    syntax::Config::new().unicode(false).utf8(false)
}

/// Compiles `pattern`, or says in one line why it cannot be: a syntax error, or a pattern
/// that matches the empty input (its rule would run again and again on no input at all).
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
    let thompson = thompson::Config::new().utf8(false);
    let dense = dense::Builder::new()
        .syntax(syntax_config())
        .thompson(thompson.clone())
        .configure(
            dense::Config::new()
                .match_kind(MatchKind::LeftmostFirst)
                .start_kind(StartKind::Anchored)
                .dfa_size_limit(Some(DENSE_LIMIT))
                .determinize_size_limit(Some(DENSE_LIMIT)),
        )
        .build(pattern);
    // The start state of every scan: anchored, at the start of the unconsumed input.
    let anchored = start::Config::new().anchored(Anchored::Yes);
    let dfa = match dense.map(|d| d.start_state(&anchored).map(|s| (d, s))) {
        Ok(Ok((dfa, start))) => Dfa::Dense(dfa, start),
        _ => Dfa::Lazy(
            LazyDfa::builder()
                .syntax(syntax_config())
                .thompson(thompson)
                .configure(LazyDfa::config().match_kind(MatchKind::LeftmostFirst))
                .build(pattern)
                .map_err(|e| one_line(&e.to_string()))?,
        ),
    };
    let groups = regex.captures_len();
    Ok(Pattern { regex, dfa, groups })
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
    lazy: Option<LazyCache>,
    captures: Captures,
}

/// How far a pattern's scan of a connection's unconsumed input has gone, kept between
/// arrivals so that each byte is scanned once while no match is taken (a client sending a
/// long line a byte at a time costs linear time, not quadratic). Valid while the input's
/// start does not move: reset it when input is consumed.
#[derive(Clone, Copy, Debug, Default)]
pub struct Progress {
    /// The DFA's state after `scanned` bytes (`None`: not started).
    state: Option<StateID>,
    scanned: usize,
    /// The longest leftmost-first match ending within the bytes scanned.
    matched: Option<usize>,
    /// No continuation of the bytes scanned can match more.
    dead: bool,
}

/// What a scan found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan {
    /// The match at the start of the input is this long (over what has arrived: more input
    /// might have made it longer).
    Match(usize),
    /// No match yet; more input could make one.
    Viable,
    /// No input that starts with these bytes matches.
    Dead,
}

impl Pattern {
    /// Scratch space for this pattern.
    pub fn scratch(&self) -> Scratch {
        Scratch {
            regex: self.regex.create_cache(),
            lazy: match &self.dfa {
                Dfa::Lazy(dfa) => Some(dfa.create_cache()),
                Dfa::Dense(..) => None,
            },
            captures: self.regex.create_captures(),
        }
    }

    /// Groups of the pattern, group 0 (the whole match) included.
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// Scans `input` (the unconsumed input, of which `progress` has seen a prefix) for the
    /// match at its start.
    pub fn scan(&self, scratch: &mut Scratch, progress: &mut Progress, input: &[u8]) -> Scan {
        match &self.dfa {
            Dfa::Dense(dfa, start) => scan_dense(dfa, *start, progress, input),
            Dfa::Lazy(dfa) => {
                let cache = scratch.lazy.as_mut().expect("a lazy DFA's cache");
                scan_lazy(dfa, cache, input)
            }
        }
    }

    /// The length of the match at the start of `input`, if any: the regex's own search,
    /// the fastest way to find a match in input that has just arrived. [`Pattern::scan`]
    /// answers the same, and more (whether more input could match), and can go on later.
    pub fn match_len(&self, scratch: &mut Scratch, input: &[u8]) -> Option<usize> {
        let input = Input::new(input).anchored(Anchored::Yes);
        self.regex
            .search_half_with(&mut scratch.regex, &input)
            .map(|m| m.offset())
    }

    /// Whether some continuation of `input` could match (a scan from the start).
    pub fn viable(&self, scratch: &mut Scratch, input: &[u8]) -> bool {
        self.scan(scratch, &mut Progress::default(), input) != Scan::Dead
    }

    /// Finds the match of length `len` at the start of `input` (found by [`Pattern::scan`])
    /// again with its groups, into the scratch's capture slots; its length, if there was
    /// one. The search is limited to the match, which keeps the capture engine's work
    /// small, while look-arounds still see the input that follows it.
    pub fn capture(&self, scratch: &mut Scratch, input: &[u8], len: usize) -> Option<usize> {
        let input = Input::new(input).range(..len).anchored(Anchored::Yes);
        self.regex
            .search_captures_with(&mut scratch.regex, &input, &mut scratch.captures);
        scratch.captures.get_match().map(|m| m.end())
    }
}

fn scan_dense(dfa: &dense::DFA<Vec<u32>>, start: StateID, p: &mut Progress, input: &[u8]) -> Scan {
    let mut state = match p.state {
        Some(s) if p.scanned <= input.len() => s,
        _ => {
            *p = Progress::default();
            start
        }
    };
    if !p.dead {
        for (i, &byte) in input.iter().enumerate().skip(p.scanned) {
            state = dfa.next_state(state, byte);
            if dfa.is_special_state(state) {
                // Matches are reported one byte late: a match state after byte i means a
                // match ending before it.
                if dfa.is_match_state(state) {
                    p.matched = Some(i);
                } else if dfa.is_dead_state(state) || dfa.is_quit_state(state) {
                    p.dead = true;
                    break;
                }
            }
        }
        p.state = Some(state);
        p.scanned = input.len();
    }
    if !p.dead && dfa.is_match_state(dfa.next_eoi_state(state)) {
        // Ends at the end of what has arrived; the scan goes on from `state`, not from here.
        return Scan::Match(input.len());
    }
    match p.matched {
        Some(n) => Scan::Match(n),
        None if p.dead => Scan::Dead,
        None => Scan::Viable,
    }
}

fn scan_lazy(dfa: &LazyDfa, cache: &mut LazyCache, input: &[u8]) -> Scan {
    let config = start::Config::new().anchored(Anchored::Yes);
    let Ok(mut state) = dfa.start_state(cache, &config) else {
        return Scan::Viable;
    };
    let mut matched = None;
    for (i, &byte) in input.iter().enumerate() {
        state = match dfa.next_state(cache, state, byte) {
            Ok(s) => s,
            // The cache thrashes: waiting is the safe answer, bounded by the input buffer.
            Err(_) => return matched.map_or(Scan::Viable, Scan::Match),
        };
        if state.is_tagged() {
            if state.is_match() {
                matched = Some(i);
            } else if state.is_dead() || state.is_quit() {
                return matched.map_or(Scan::Dead, Scan::Match);
            }
        }
    }
    if let Ok(eoi) = dfa.next_eoi_state(cache, state) {
        if eoi.is_match() {
            return Scan::Match(input.len());
        }
    }
    matched.map_or(Scan::Viable, Scan::Match)
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
        assert_eq!(p.capture(&mut s, b"hi\r\nmore", 4), Some(4));
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
    fn incremental_scan_equals_a_scan_from_the_start() {
        let patterns = [
            r"GET [^\n]*\n",
            r"a|ab",
            r"(.|\n)*\n\.\n",
            r"x+y?",
            r"foo\b",
            r"[0-9]{3}",
        ];
        let inputs: [&[u8]; 6] = [
            b"GET /a\nGET",
            b"abab",
            b"x\n.\nmore\n.\n",
            b"xxxyx",
            b"foo bar",
            b"12a",
        ];
        for pattern in patterns {
            let p = compile(pattern).unwrap();
            let mut s = p.scratch();
            for input in inputs {
                let mut progress = Progress::default();
                for end in 0..=input.len() {
                    let whole = p.scan(&mut s, &mut Progress::default(), &input[..end]);
                    let step = p.scan(&mut s, &mut progress, &input[..end]);
                    assert_eq!(step, whole, "{pattern} on {:?}", &input[..end]);
                    let want = p
                        .regex
                        .search_half(&Input::new(&input[..end]).anchored(Anchored::Yes));
                    match whole {
                        Scan::Match(n) => assert_eq!(Some(n), want.map(|m| m.offset())),
                        _ => assert!(want.is_none()),
                    }
                }
            }
        }
        // `foo\b` is not a match in "foobar", though "foo" alone is one.
        let p = compile(r"foo\b").unwrap();
        let mut s = p.scratch();
        assert_eq!(p.match_len(&mut s, b"foobar"), None);
        assert_eq!(p.capture(&mut s, b"foobar", 3), None);
        assert_eq!(p.capture(&mut s, b"foo bar", 3), Some(3));
    }

    #[test]
    fn a_large_pattern_is_built_lazily_and_still_matches() {
        let p = compile(r"[ab]*a[ab]{20}c").unwrap();
        assert!(matches!(p.dfa, Dfa::Lazy(_)), "expected the lazy fallback");
        let mut s = p.scratch();
        let mut input = b"a".repeat(21);
        input.push(b'c');
        assert_eq!(p.match_len(&mut s, &input), Some(22));
        assert!(p.viable(&mut s, b"abab"));
        assert!(!p.viable(&mut s, b"abx"));
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
