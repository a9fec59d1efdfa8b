//! Unit-test helpers shared by the parser tests: every split of an input, and a
//! deterministic generator of inputs.

use std::fmt;

use crate::fuzzing::{Parsed, SummaryParser};
use crate::RequestError;

/// Parses `buf` whole, and checks on the way that every split point gives
/// the same answer: a fresh parse of each prefix and one reused parser fed
/// growing prefixes must both say "need more" until the head is complete
/// (or the error is decidable), and the whole answer after that; a parser
/// given any prefix and then the whole must give the whole answer.
pub(crate) fn parse_every_split<P: SummaryParser>(
    buf: &[u8],
    new: impl Fn() -> P,
) -> Parsed<P::Summary> {
    let whole = new().parse_summary(buf);
    let mut reused = new();
    let mut decided = false;
    for k in 0..=buf.len() {
        let fresh = new().parse_summary(&buf[..k]);
        let grown = reused.parse_summary(&buf[..k]);
        assert_eq!(fresh, grown, "fresh vs reused at {k} in {buf:?}");
        let mut two = new();
        let _ = two.parse_summary(&buf[..k]);
        assert_eq!(two.parse_summary(buf), whole, "split at {k} in {buf:?}");
        match (&whole, &fresh) {
            (Ok(Some(w)), Ok(None)) => assert!(k < P::head_len(w)),
            (Ok(Some(w)), Ok(Some(f))) => {
                assert!(k >= P::head_len(w));
                assert_eq!(f, w);
            }
            (Err(_), Ok(None)) => assert!(!decided, "error vanished at {k}"),
            (Err(w), Err(f)) => {
                assert_eq!(f, w, "different error at {k} in {buf:?}");
                decided = true;
            }
            (Ok(None), Ok(None)) => {}
            other => panic!("prefix {k} of {buf:?}: {other:?}"),
        }
    }
    whole
}

/// The head `outcome` holds; panics naming the input otherwise.
pub(crate) fn expect_head<S: fmt::Debug>(outcome: Parsed<S>, buf: &[u8]) -> S {
    match outcome {
        Ok(Some(s)) => s,
        other => panic!(
            "expected a head from {:?}, got {other:?}",
            String::from_utf8_lossy(buf)
        ),
    }
}

/// The error `outcome` holds; panics naming the input otherwise.
pub(crate) fn expect_error<S: fmt::Debug>(outcome: Parsed<S>, buf: &[u8]) -> RequestError {
    match outcome {
        Err(e) => e,
        other => panic!(
            "expected an error from {:?}, got {other:?}",
            String::from_utf8_lossy(buf)
        ),
    }
}

/// xorshift64: deterministic, and enough to shuffle test inputs (no dependency for it).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n`.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// One of `from`.
    pub(crate) fn pick<'a>(&mut self, from: &[&'a [u8]]) -> &'a [u8] {
        from[self.below(from.len())]
    }
}

/// A sink that records what it got, file ranges as markers.
#[derive(Default)]
pub(crate) struct Record(pub(crate) Vec<u8>);

impl crate::Sink for Record {
    fn write_with<R>(&mut self, write: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        write(&mut self.0)
    }
    fn shared(&mut self, data: std::sync::Arc<[u8]>) {
        self.0.extend_from_slice(&data);
    }
    fn file(&mut self, _: std::sync::Arc<std::fs::File>, offset: u64, len: u64) {
        use std::io::Write as _;
        write!(self.0, "[file {offset}+{len}]").unwrap();
    }
}
