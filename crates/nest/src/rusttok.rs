//! A small tokenizer for the Rust code of actions and per-connection variables.
//!
//! It knows just enough Rust to find `$` keywords and to balance brackets: string, raw string,
//! byte string and char literals and comments are skipped whole, so a `$` or a `}` inside them
//! is left alone. (A full Rust lexer such as proc-macro2 refuses `$1` and reports positions only
//! with a feature meant for proc macros; this one keeps every offset into the spec.)

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Tok {
    Ident,
    /// Numbers, chars, and strings; `true` for a string (its text includes the quotes).
    Lit {
        string: bool,
    },
    Open(char),
    Close(char),
    Punct(char),
}

#[derive(Clone, Copy, Debug)]
pub struct Token {
    pub kind: Tok,
    pub start: usize,
    pub end: usize,
}

/// Why tokenizing stopped early: the offset and a message.
#[derive(Debug)]
pub struct TokError {
    pub at: usize,
    pub msg: String,
}

/// Tokenizes `s[from..]` until the bracket opened just before `from` (an `{` at `from - 1`)
/// closes; returns the tokens inside and the offset of the closing `}`. With `until_semicolon`,
/// stops instead at a `;` outside brackets (returning its offset).
pub fn scan(
    s: &[char],
    from: usize,
    until_semicolon: bool,
) -> Result<(Vec<Token>, usize), TokError> {
    let mut toks = Vec::new();
    let mut stack: Vec<(char, usize)> = Vec::new();
    let mut i = from;
    let n = s.len();
    while i < n {
        let c = s[i];
        let start = i;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c == '/' && s.get(i + 1) == Some(&'/') {
            while i < n && s[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == '/' && s.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            loop {
                if i >= n {
                    return Err(TokError {
                        at: start,
                        msg: "unterminated comment `/*`".into(),
                    });
                }
                if s[i] == '/' && s.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            continue;
        }
        // Raw strings r"..", r#".."#, br"..": count the hashes.
        let raw_at = if c == 'r' {
            Some(i + 1)
        } else if c == 'b' && s.get(i + 1) == Some(&'r') {
            Some(i + 2)
        } else {
            None
        };
        if let Some(mut j) = raw_at {
            let mut hashes = 0;
            while s.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if s.get(j) == Some(&'"') {
                j += 1;
                loop {
                    if j >= n {
                        return Err(TokError {
                            at: start,
                            msg: "unterminated raw string".into(),
                        });
                    }
                    if s[j] == '"' && (1..=hashes).all(|k| s.get(j + k) == Some(&'#')) {
                        j += 1 + hashes;
                        break;
                    }
                    j += 1;
                }
                toks.push(Token {
                    kind: Tok::Lit { string: true },
                    start,
                    end: j,
                });
                i = j;
                continue;
            }
        }
        if c == '"' || (c == 'b' && s.get(i + 1) == Some(&'"')) {
            let mut j = if c == 'b' { i + 2 } else { i + 1 };
            loop {
                if j >= n {
                    return Err(TokError {
                        at: start,
                        msg: "unterminated string".into(),
                    });
                }
                match s[j] {
                    '\\' => j += 2,
                    '"' => {
                        j += 1;
                        break;
                    }
                    _ => j += 1,
                }
            }
            toks.push(Token {
                kind: Tok::Lit { string: true },
                start,
                end: j,
            });
            i = j;
            continue;
        }
        if c == '\'' || (c == 'b' && s.get(i + 1) == Some(&'\'')) {
            let q = if c == 'b' { i + 1 } else { i };
            // A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a, 'static).
            if s.get(q + 1) == Some(&'\\') {
                let mut j = q + 2;
                while j < n && s[j] != '\'' && s[j] != '\n' {
                    j += 1;
                }
                toks.push(Token {
                    kind: Tok::Lit { string: false },
                    start,
                    end: (j + 1).min(n),
                });
                i = (j + 1).min(n);
                continue;
            }
            if s.get(q + 2) == Some(&'\'') {
                toks.push(Token {
                    kind: Tok::Lit { string: false },
                    start,
                    end: q + 3,
                });
                i = q + 3;
                continue;
            }
            let mut j = q + 1;
            while j < n && (s[j].is_alphanumeric() || s[j] == '_') {
                j += 1;
            }
            toks.push(Token {
                kind: Tok::Ident,
                start,
                end: j,
            });
            i = j;
            continue;
        }
        if c.is_alphabetic() || c == '_' {
            let mut j = i;
            while j < n && (s[j].is_alphanumeric() || s[j] == '_') {
                j += 1;
            }
            toks.push(Token {
                kind: Tok::Ident,
                start,
                end: j,
            });
            i = j;
            continue;
        }
        if c.is_ascii_digit() {
            let mut j = i;
            while j < n
                && (s[j].is_alphanumeric()
                    || s[j] == '_'
                    || (s[j] == '.' && s.get(j + 1).is_some_and(|d| d.is_ascii_digit())))
            {
                j += 1;
            }
            toks.push(Token {
                kind: Tok::Lit { string: false },
                start,
                end: j,
            });
            i = j;
            continue;
        }
        match c {
            '(' | '[' | '{' => {
                stack.push((c, i));
                toks.push(Token {
                    kind: Tok::Open(c),
                    start,
                    end: i + 1,
                });
            }
            ')' | ']' | '}' => {
                let want = match c {
                    ')' => '(',
                    ']' => '[',
                    _ => '{',
                };
                match stack.pop() {
                    None if c == '}' && !until_semicolon => return Ok((toks, i)),
                    None => {
                        return Err(TokError {
                            at: i,
                            msg: format!("unmatched `{c}`"),
                        })
                    }
                    Some((open, _)) if open != want => {
                        return Err(TokError {
                            at: i,
                            msg: format!("`{c}` closes `{open}`"),
                        })
                    }
                    Some(_) => {}
                }
                toks.push(Token {
                    kind: Tok::Close(c),
                    start,
                    end: i + 1,
                });
            }
            ';' if until_semicolon && stack.is_empty() => return Ok((toks, i)),
            _ => toks.push(Token {
                kind: Tok::Punct(c),
                start,
                end: i + 1,
            }),
        }
        i += 1;
    }
    match stack.last() {
        Some(&(open, at)) => Err(TokError {
            at,
            msg: format!("unclosed `{open}`"),
        }),
        None if until_semicolon => Err(TokError {
            at: from,
            msg: "missing `;`".into(),
        }),
        None => Err(TokError {
            at: from.saturating_sub(1),
            msg: "unclosed `{`".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chars(s: &str) -> Vec<char> {
        s.chars().collect()
    }

    #[test]
    fn braces_in_strings_and_comments_are_skipped() {
        let s = chars(
            r##"{ let a = "}$1"; // }
            let b = r#"}"#; /* } /* } */ */ let c = '}'; let d: &'static str = "x"; } tail"##,
        );
        let (toks, end) = scan(&s, 1, false).unwrap();
        assert_eq!(s[end..].iter().collect::<String>(), "} tail");
        assert!(!toks.iter().any(|t| t.kind == Tok::Punct('$')));
    }

    #[test]
    fn unclosed_and_mismatched() {
        let s = chars("{ foo(");
        assert_eq!(scan(&s, 1, false).unwrap_err().msg, "unclosed `(`");
        let s = chars("{ foo(] }");
        assert_eq!(scan(&s, 1, false).unwrap_err().at, 6);
    }
}
