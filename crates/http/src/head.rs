//! Incremental head scanning, shared by the request and response parsers
//! (RFC 9112 §2-§5).
//!
//! The scanner walks the head line by line and remembers how far it got, so
//! a peer that trickles bytes costs O(n) in total, not O(n²). Each line is
//! validated the moment its LF arrives and limits are checked against fixed
//! offsets, so the outcome depends only on the bytes, never on how they were
//! split across reads. Field semantics are judged once, when the blank line
//! ends the head. What differs between the two directions (the start line,
//! the field semantics and the error values) comes from [`StartLine`].

use crate::error::RequestError;
use crate::fields::{parse_field_line, FieldSpan};
use crate::limits::{Limits, MAX_LEADING_EMPTY_LINES};
use std::fmt;

/// The errors the scanner itself reports.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScanErrors {
    /// Start line longer than `max_request_line`.
    pub(crate) line_too_long: RequestError,
    /// Head larger than `max_header_bytes`.
    pub(crate) head_too_large: RequestError,
    /// More than [`MAX_LEADING_EMPTY_LINES`] before the start line.
    pub(crate) too_many_empty_lines: RequestError,
    /// More than `max_headers` field lines.
    pub(crate) too_many_fields: RequestError,
    /// Status for a malformed field line; the reason names the fault.
    pub(crate) bad_field_status: u16,
}

/// The start line of a head and the rules of the head it begins.
pub(crate) trait StartLine {
    /// Head-wide results of the field semantics.
    type Info: Copy + fmt::Debug;

    const ERRORS: ScanErrors;

    /// Rejects a start line still arriving that no ending could make valid,
    /// so a peer speaking another protocol fails at once instead of at the
    /// line limit.
    fn check_partial(partial: &[u8]) -> Result<(), RequestError>;

    /// The same judgement on a complete line. It comes before the length
    /// check, as it does while the line is still arriving, so the error does
    /// not depend on how bytes are split.
    fn check_start(line: &[u8]) -> Result<(), RequestError>;

    /// Parses the complete line (no terminator), found at offset `base`.
    fn parse(&mut self, line: &[u8], base: usize) -> Result<(), RequestError>;

    /// Judges the field semantics once the head is complete.
    fn analyze(&self, buf: &[u8], fields: &[FieldSpan]) -> Result<Self::Info, RequestError>;
}

#[derive(Debug, Clone, Copy)]
enum Phase<I> {
    /// Skipping empty lines / waiting for the start line.
    StartLine,
    /// Reading field lines.
    Fields,
    /// Head complete and valid; `head_len` is set.
    Complete(I),
    /// A previous call failed; the same error is returned until `reset`.
    Failed(RequestError),
}

/// Scan state of one connection's heads, and what has been parsed so far.
///
/// The field table is reused across heads, so steady-state parsing
/// allocates nothing.
#[derive(Debug)]
pub(crate) struct HeadScanner<L: StartLine> {
    limits: Limits,
    phase: Phase<L::Info>,
    /// Offset where the line currently being scanned starts.
    line_start: usize,
    /// Offset where the LF search resumes; bytes before it hold no LF of the
    /// current line.
    scan: usize,
    empty_lines: usize,
    start_line: L,
    fields: Vec<FieldSpan>,
    head_len: usize,
    /// Bytes handed to memchr since the last reset, to test O(n) scanning.
    #[cfg(test)]
    pub(crate) scanned: usize,
}

impl<L: StartLine> HeadScanner<L> {
    /// `start_line` only holds placeholders until a start line is parsed.
    pub(crate) fn new(limits: Limits, start_line: L) -> Self {
        HeadScanner {
            limits,
            phase: Phase::StartLine,
            line_start: 0,
            scan: 0,
            empty_lines: 0,
            start_line,
            fields: Vec::with_capacity(16),
            head_len: 0,
            #[cfg(test)]
            scanned: 0,
        }
    }

    pub(crate) fn limits(&self) -> Limits {
        self.limits
    }

    /// The parsed start line; meaningful once `parse` returned a head.
    pub(crate) fn start_line(&self) -> &L {
        &self.start_line
    }

    /// The parsed fields; complete once `parse` returned a head.
    pub(crate) fn fields(&self) -> &[FieldSpan] {
        &self.fields
    }

    pub(crate) fn head_len(&self) -> usize {
        self.head_len
    }

    /// Forgets all scan state, keeping the field table's capacity.
    pub(crate) fn reset(&mut self) {
        self.phase = Phase::StartLine;
        self.line_start = 0;
        self.scan = 0;
        self.empty_lines = 0;
        self.fields.clear();
        self.head_len = 0;
        #[cfg(test)]
        {
            self.scanned = 0;
        }
    }

    /// Holds a head found otherwise (an HTTP/2 stream's) as if scanned: `head_len` bytes
    /// of the next buffer, with these fields and results.
    pub(crate) fn set_complete(
        &mut self,
        start_line: L,
        fields: &[FieldSpan],
        head_len: usize,
        info: L::Info,
    ) {
        self.reset();
        self.fields.extend_from_slice(fields);
        self.start_line = start_line;
        self.head_len = head_len;
        self.line_start = head_len;
        self.scan = head_len;
        self.phase = Phase::Complete(info);
    }

    /// Looks for a complete head at the start of `buf`, with the contract
    /// documented on [`crate::Parser::parse`]: `Ok(None)` until the head is
    /// complete, resuming where the previous call stopped, and the same
    /// error again until `reset`.
    #[inline]
    pub(crate) fn parse(&mut self, buf: &[u8]) -> Result<Option<L::Info>, RequestError> {
        match self.phase {
            Phase::Failed(e) => Err(e),
            Phase::Complete(info) if buf.len() >= self.head_len => Ok(Some(info)),
            _ => {
                if buf.len() < self.scan || buf.len() < self.head_len {
                    // Not a continuation of what we scanned; start over
                    // rather than trust stale offsets.
                    self.reset();
                }
                let checked = match self.advance(buf) {
                    Ok(true) => self.start_line.analyze(buf, &self.fields),
                    Ok(false) => return Ok(None),
                    Err(e) => Err(e),
                };
                match checked {
                    Ok(info) => {
                        self.phase = Phase::Complete(info);
                        Ok(Some(info))
                    }
                    Err(e) => {
                        self.phase = Phase::Failed(e);
                        Err(e)
                    }
                }
            }
        }
    }

    /// Scans complete lines from `self.scan`; Ok(true) once the blank line
    /// ending the head has been seen.
    fn advance(&mut self, buf: &[u8]) -> Result<bool, RequestError> {
        if buf.is_empty() {
            return Ok(false);
        }
        let errors = L::ERRORS;
        loop {
            // The LF ending this line must lie before `window`; whether the
            // line limit or the head limit is the tighter decides the error.
            let head_cap = self.limits.max_header_bytes;
            let (window, over) = match self.phase {
                Phase::StartLine => {
                    let line_cap = self
                        .line_start
                        .saturating_add(self.limits.max_request_line)
                        .saturating_add(2);
                    if line_cap <= head_cap {
                        (line_cap, errors.line_too_long)
                    } else {
                        (head_cap, errors.head_too_large)
                    }
                }
                _ => (head_cap, errors.head_too_large),
            };
            let end = buf.len().min(window);
            let from = self.scan.min(end);
            #[cfg(test)]
            {
                self.scanned += end - from;
            }
            let Some(i) = memchr::memchr(b'\n', &buf[from..end]) else {
                self.scan = end;
                if matches!(self.phase, Phase::StartLine) {
                    L::check_partial(&buf[self.line_start..end])?;
                }
                return if buf.len() >= window {
                    Err(over)
                } else {
                    Ok(false)
                };
            };
            let lf = from + i;
            let start = self.line_start;
            // Accept CRLF or a bare LF (RFC 9112 §2.2).
            let content_end = if lf > start && buf[lf - 1] == b'\r' {
                lf - 1
            } else {
                lf
            };
            self.line_start = lf + 1;
            self.scan = lf + 1;
            let line = &buf[start..content_end];
            match self.phase {
                Phase::StartLine => {
                    if line.is_empty() {
                        // RFC 9112 §2.2: stray CRLFs, e.g. after a body, are
                        // tolerated before a start line.
                        self.empty_lines += 1;
                        if self.empty_lines > MAX_LEADING_EMPTY_LINES {
                            return Err(errors.too_many_empty_lines);
                        }
                        continue;
                    }
                    L::check_start(line)?;
                    if line.len() > self.limits.max_request_line {
                        return Err(errors.line_too_long);
                    }
                    self.start_line.parse(line, start)?;
                    self.phase = Phase::Fields;
                }
                _ => {
                    if line.is_empty() {
                        self.head_len = lf + 1;
                        return Ok(true);
                    }
                    if self.fields.len() >= self.limits.max_headers {
                        return Err(errors.too_many_fields);
                    }
                    let span = parse_field_line(line, start)
                        .map_err(|reason| RequestError::new(errors.bad_field_status, reason))?;
                    self.fields.push(span);
                }
            }
        }
    }
}
