//! Patterns as the runtime compiles them: regex-syntax's PCRE-like syntax on bytes (no Unicode
//! classes, `.` any byte but `\n`, input need not be UTF-8), matched anchored at the start of
//! the unconsumed input. The runtime's `pattern::compile` decides; the syntax is parsed here
//! first, with the same settings, only to learn where in the pattern an error is.

/// The number of capturing groups of `pattern` (not counting group 0), or the byte offset in
/// `pattern` of the error (when known) and its message.
pub fn check(pattern: &str) -> Result<usize, (Option<usize>, String)> {
    let hir = regex_syntax::ParserBuilder::new()
        .unicode(false)
        .utf8(false)
        .build()
        .parse(pattern)
        .map_err(|e| {
            let (offset, kind) = match &e {
                regex_syntax::Error::Parse(p) => (p.span().start.offset, p.kind().to_string()),
                regex_syntax::Error::Translate(t) => (t.span().start.offset, t.kind().to_string()),
                _ => (0, e.to_string()),
            };
            (Some(offset), kind)
        })?;
    fastpath_nest_runtime::pattern::compile(pattern).map_err(|e| (None, e))?;
    Ok(hir.properties().explicit_captures_len())
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn groups_and_errors() {
        assert_eq!(check(r"([^\n]*)(\r?\n)"), Ok(2));
        assert_eq!(check(r"GET([[:blank:]]+)"), Ok(1));
        let (at, msg) = check(r"ab(c").unwrap_err();
        assert_eq!(at, Some(2));
        assert!(msg.contains("unclosed"), "{msg}");
    }
}
