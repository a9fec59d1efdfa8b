//! Action code: `$` keywords to calls on the runtime (the table in docs/nest.md). Everything
//! else is copied as written, newlines included, so that each line of generated action code is
//! a line of the spec.

use crate::ast::Spec;
use crate::rusttok::{Tok, Token};

/// The action keywords, as written after `$`.
pub const KEYWORDS: &[&str] = &[
    "seen",
    "clear",
    "reply",
    "close",
    "return",
    "fileReply",
    "fileReceive",
    "bytes",
    "LASTSEEN",
];

/// Where an action is: its pattern's group count (`None` in START and END, which match
/// nothing) and a name for messages.
pub struct Ctx {
    pub groups: Option<usize>,
    pub place: String,
}

/// One action being translated: the spec's text and what is declared so far, read; the
/// errors and the states `$seen`, found on the way and left for the parser to record (the
/// translation reads the spec, it does not build it).
pub struct Translation<'a> {
    s: &'a [char],
    spec: &'a Spec,
    /// Errors at offsets into the text, in the order found.
    pub errors: Vec<(usize, String)>,
    /// The states `$seen` names, each once, in order of first use.
    pub seen: Vec<String>,
}

impl<'a> Translation<'a> {
    /// A translation of actions in `s`, the text of `spec`.
    pub fn new(s: &'a [char], spec: &'a Spec) -> Translation<'a> {
        Translation {
            s,
            spec,
            errors: Vec::new(),
            seen: Vec::new(),
        }
    }

    fn error(&mut self, at: usize, msg: impl Into<String>) {
        self.errors.push((at, msg.into()));
    }
}

/// The index of the token closing the bracket opened by `toks[open]`.
fn matching(toks: &[Token], open: usize) -> Option<usize> {
    let mut depth = 0;
    for (k, t) in toks.iter().enumerate().skip(open) {
        match t.kind {
            Tok::Open(_) => depth += 1,
            Tok::Close(_) => {
                depth -= 1;
                if depth == 0 {
                    return Some(k);
                }
            }
            _ => {}
        }
    }
    None
}

/// Translates `tr.s[from..to]`, whose tokens are `toks`.
pub fn translate(
    tr: &mut Translation<'_>,
    toks: &[Token],
    from: usize,
    to: usize,
    ctx: &Ctx,
) -> String {
    let mut out = String::new();
    let mut last = from;
    let mut k = 0;
    let text = |tr: &Translation<'_>, a: usize, b: usize| tr.s[a..b].iter().collect::<String>();
    while k < toks.len() {
        let t = toks[k];
        if t.kind != Tok::Punct('$') {
            k += 1;
            continue;
        }
        out.push_str(&text(tr, last, t.start));
        let next = toks.get(k + 1).copied().filter(|n| n.start == t.end);
        let Some(next) = next else {
            tr.error(
                t.start,
                "stray `$`: expected a keyword such as `$reply` or a group such as `$1`",
            );
            out.push('$');
            last = t.end;
            k += 1;
            continue;
        };
        let word = text(tr, next.start, next.end);
        // A group: `$1`.
        if next.kind == (Tok::Lit { string: false }) {
            out.push_str(&group(tr, t.start, &word, ctx, "text"));
            last = next.end;
            k += 2;
            continue;
        }
        if next.kind != Tok::Ident || !KEYWORDS.contains(&word.as_str()) {
            tr.error(
                t.start,
                format!(
                    "unknown keyword `${word}` (known: {})",
                    KEYWORDS
                        .iter()
                        .map(|k| format!("${k}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
            out.push_str(&text(tr, t.start, next.end));
            last = next.end;
            k += 2;
            continue;
        }
        // Keywords without arguments.
        let has_args = toks.get(k + 2).is_some_and(|a| a.kind == Tok::Open('('));
        if word == "return" {
            out.push_str("return");
            last = next.end;
            k += 2;
            continue;
        }
        if word == "close" {
            out.push_str("{ cx.close(); return; }");
            last = next.end;
            k += 2;
            if has_args && toks.get(k + 1).is_some_and(|c| c.kind == Tok::Close(')')) {
                last = toks[k + 1].end;
                k += 2;
            }
            continue;
        }
        if word == "LASTSEEN" {
            tr.error(
                t.start,
                "`$LASTSEEN` belongs in qualifiers; in an action, test states with a qualifier",
            );
        }
        let close = if has_args {
            matching(toks, k + 2)
        } else {
            None
        };
        let Some(close) = close else {
            tr.error(
                t.start,
                format!("`${word}` needs its arguments in parentheses: `${word}(...)`"),
            );
            out.push_str(&text(tr, t.start, next.end));
            last = next.end;
            k += 2;
            continue;
        };
        let open = toks[k + 2];
        let inner = &toks[k + 3..close];
        // Arguments split at top-level commas: (token range, char range).
        let mut args: Vec<(&[Token], usize, usize)> = Vec::new();
        let mut depth = 0;
        let mut a0 = 0;
        let mut c0 = open.end;
        for (j, tok) in inner.iter().enumerate() {
            match tok.kind {
                Tok::Open(_) => depth += 1,
                Tok::Close(_) => depth -= 1,
                Tok::Punct(',') if depth == 0 => {
                    args.push((&inner[a0..j], c0, tok.start));
                    a0 = j + 1;
                    c0 = tok.end;
                }
                _ => {}
            }
        }
        if a0 < inner.len() {
            args.push((&inner[a0..], c0, toks[close].start));
        }
        let end_at = toks[close].end;
        let kw_at = t.start;
        let arg = |tr: &mut Translation<'_>, n: usize| {
            let (ts, a, b) = args[n];
            translate(tr, ts, a, b, ctx).trim().to_string()
        };
        let state_arg = |tr: &mut Translation<'_>, star: bool| -> Option<String> {
            let ok = args.len() == 1 && args[0].0.len() == 1;
            let tok = args.first().and_then(|a| a.0.first()).copied();
            match tok {
                Some(tk) if ok && tk.kind == Tok::Ident => {
                    let name = text(tr, tk.start, tk.end);
                    if name == "START" || name == "END" {
                        tr.error(
                            tk.start,
                            format!("`${word}({name})`: START and END are entered by the runtime, not by actions"),
                        );
                    } else if !tr.spec.is_state(&name) {
                        tr.error(
                            tk.start,
                            format!("undeclared state `{name}` (declare it with `%state {name}`)"),
                        );
                    }
                    Some(name)
                }
                Some(tk) if ok && star && tk.kind == Tok::Punct('*') => Some("*".into()),
                _ => {
                    tr.error(
                        kw_at,
                        format!("`${word}` takes one state: `${word}(STATE)`"),
                    );
                    None
                }
            }
        };
        let rep = match word.as_str() {
            "seen" => state_arg(tr, false).map(|s| {
                if !tr.seen.contains(&s) {
                    tr.seen.push(s.clone());
                }
                format!("cx.seen({s})")
            }),
            "clear" => state_arg(tr, true).map(|s| {
                if s == "*" {
                    "cx.clear_all()".to_string()
                } else {
                    format!("cx.clear({s})")
                }
            }),
            "reply" => {
                if args.is_empty() {
                    tr.error(
                        kw_at,
                        "`$reply` needs something to send: `$reply(\"text\")`",
                    );
                    None
                } else {
                    let all = translate(tr, inner, open.end, toks[close].start, ctx);
                    let first = args[0].0;
                    let is_format = first.len() == 1
                        && first[0].kind == (Tok::Lit { string: true })
                        && text(tr, first[0].start, first[0].end).contains('{');
                    if is_format {
                        Some(format!("cx.reply(format_args!({}))", all.trim()))
                    } else {
                        let f = "{}".repeat(args.len());
                        Some(format!("cx.reply(format_args!(\"{f}\", {}))", all.trim()))
                    }
                }
            }
            "fileReply" => {
                if args.len() != 1 {
                    tr.error(kw_at, "`$fileReply` takes one path: `$fileReply(path)`");
                    None
                } else {
                    let a = arg(tr, 0);
                    Some(format!("cx.file_reply(&{})", paren(&a, args[0].0.len())))
                }
            }
            "fileReceive" => match args.len() {
                1 => {
                    let a = arg(tr, 0);
                    Some(format!(
                        "cx.file_receive(&{}, None)",
                        paren(&a, args[0].0.len())
                    ))
                }
                2 => {
                    let a = arg(tr, 0);
                    let n = arg(tr, 1);
                    Some(format!(
                        "cx.file_receive(&{}, Some({} as u64))",
                        paren(&a, args[0].0.len()),
                        paren(&n, args[1].0.len())
                    ))
                }
                _ => {
                    tr.error(kw_at, "`$fileReceive` takes a path and an optional length: `$fileReceive(path, n)`");
                    None
                }
            },
            "bytes" => {
                let n = args.first().filter(|a| a.0.len() == 1).map(|a| a.0[0]);
                match n {
                    Some(n) if n.kind == (Tok::Lit { string: false }) => {
                        let w = text(tr, n.start, n.end);
                        Some(group(tr, kw_at, &w, ctx, "bytes"))
                    }
                    _ => {
                        tr.error(kw_at, "`$bytes` takes a group number: `$bytes(1)`");
                        None
                    }
                }
            }
            _ => None, // $LASTSEEN: reported above
        };
        match rep {
            Some(r) => out.push_str(&r),
            None => out.push_str(&text(tr, kw_at, end_at)),
        }
        last = end_at;
        k = close + 1;
    }
    out.push_str(&text(tr, last, to));
    out
}

/// `a` as the operand of `&`: parenthesised unless it is one token or a path, field or call
/// chain (`m.text(2)`, `self.path`), where `&` already applies to the whole.
fn paren(a: &str, tokens: usize) -> String {
    let mut depth = 0i32;
    let simple = a.chars().all(|c| match c {
        '(' | '[' => {
            depth += 1;
            true
        }
        ')' | ']' => {
            depth -= 1;
            true
        }
        _ if depth > 0 => true,
        _ => c.is_alphanumeric() || c == '_' || c == '.' || c == ':' || c == '"',
    });
    if tokens == 1 || simple {
        a.to_string()
    } else {
        format!("({a})")
    }
}

/// `$N` (or `$bytes(N)`) as `m.text(N)` / `m.bytes(N)`, checked against the pattern's groups.
fn group(tr: &mut Translation<'_>, at: usize, word: &str, ctx: &Ctx, method: &str) -> String {
    let Ok(n) = word.parse::<usize>() else {
        tr.error(
            at,
            format!("`${word}` is not a group: groups are `$1`, `$2`, ..."),
        );
        return format!("${word}");
    };
    match ctx.groups {
        None => tr.error(
            at,
            format!(
                "`${n}`: {} matches no input, so it has no groups",
                ctx.place
            ),
        ),
        Some(g) if n > g && g != usize::MAX => tr.error(
            at,
            format!(
                "`${n}`: this rule's pattern has {g} group{}",
                if g == 1 { "" } else { "s" }
            ),
        ),
        _ => {}
    }
    format!("m.{method}({n})")
}
