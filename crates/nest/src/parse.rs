//! The parser: declarations, rules and trailing section, with every error at its line and
//! column. It goes on after an error so that one run reports them all.

use crate::action::{self, Ctx, Translation};
use crate::ast::*;
use crate::pattern;
use crate::rusttok;

pub struct Parser {
    pub s: Vec<char>,
    line_start: Vec<usize>,
    pub spec: Spec,
    pub diags: Vec<Diag>,
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// A qualifier's token: an identifier, `$LASTSEEN(S)`, an operator or a parenthesis.
#[derive(Clone, Debug)]
enum QTok {
    Name(String, Pos),
    Last(String, Pos),
    Op(&'static str),
}

impl Parser {
    pub fn new(file: &str, src: &str) -> Parser {
        let s: Vec<char> = src.chars().collect();
        let mut line_start = vec![0];
        for (i, &c) in s.iter().enumerate() {
            if c == '\n' {
                line_start.push(i + 1);
            }
        }
        Parser {
            s,
            line_start,
            spec: Spec {
                file: file.to_string(),
                ..Spec::default()
            },
            diags: Vec::new(),
        }
    }

    pub fn pos(&self, i: usize) -> Pos {
        let line = self.line_start.partition_point(|&st| st <= i);
        Pos {
            line: line as u32,
            col: (i - self.line_start[line - 1] + 1) as u32,
        }
    }

    pub fn error(&mut self, at: usize, msg: impl Into<String>) {
        let pos = self.pos(at);
        self.error_at(pos, msg);
    }

    pub fn error_at(&mut self, pos: Pos, msg: impl Into<String>) {
        self.diags.push(Diag {
            pos,
            warning: false,
            msg: msg.into(),
        });
    }

    fn text(&self, a: usize, b: usize) -> String {
        self.s[a..b].iter().collect()
    }

    /// The end of the line starting at `a` (the offset of its `\n`, or the end).
    fn line_end(&self, a: usize) -> usize {
        (a..self.s.len())
            .find(|&i| self.s[i] == '\n')
            .unwrap_or(self.s.len())
    }

    pub fn macro_text(&self, name: &str) -> Option<&Macro> {
        self.spec.macros.iter().find(|m| m.name == name)
    }

    pub fn parse(&mut self) {
        let Some(rules_at) = self.declarations() else {
            return;
        };
        self.rules(rules_at);
    }

    /// The declarations section, line by line; returns where the rules section starts, or
    /// `None` without `%%`.
    fn declarations(&mut self) -> Option<usize> {
        let mut a = 0;
        let mut prologue: Option<(usize, u32, String)> = None;
        while a < self.s.len() {
            let b = self.line_end(a);
            let line = self.text(a, b);
            let lead = line.len() - line.trim_start().len();
            let t = line.trim();
            let next = b + 1;
            if let Some((_, _, code)) = &mut prologue {
                if t == "%}" {
                    let (_, first, code) = prologue.take().unwrap();
                    self.spec.prologue.push((first, code));
                } else {
                    code.push_str(&line);
                    code.push('\n');
                }
                a = next;
                continue;
            }
            let at = a + line[..lead].chars().count();
            if t == "%%" {
                return Some(next.min(self.s.len()));
            } else if t == "%{" {
                prologue = Some((at, self.pos(at).line + 1, String::new()));
            } else if t.is_empty() || t.starts_with("//") {
            } else if let Some(rest) = t.strip_prefix("%option") {
                self.option_line(at, rest);
            } else if let Some(rest) = t.strip_prefix("%state") {
                self.state_line(at + 6, rest);
            } else if t.starts_with('%') {
                self.error(
                    at,
                    format!(
                        "unknown directive `{}`: expected `%option`, `%state`, `%{{` or `%%`",
                        t.split_whitespace().next().unwrap_or(t)
                    ),
                );
            } else {
                self.macro_line(at, t);
            }
            a = next;
        }
        if let Some((at, _, _)) = prologue {
            self.error(at, "unclosed `%{`: no `%}` line follows");
        }
        let end = self.s.len();
        self.error(
            end,
            "missing `%%`: a specification is declarations, `%%`, rules, and optionally `%%` and \
             trailing code",
        );
        None
    }

    fn option_line(&mut self, at: usize, rest: &str) {
        if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
            self.error(at, "unknown directive: expected `%option NAME [VALUE]`");
            return;
        }
        let rest = rest.trim();
        let (name, value) = match rest.find(char::is_whitespace) {
            Some(k) => (&rest[..k], rest[k..].trim()),
            None => (rest, ""),
        };
        if name.is_empty() {
            self.error(at, "`%option` needs a name");
            return;
        }
        // The name starts after `%option` and its spaces.
        let line_text = self.text(at, self.line_end(at));
        let name_col = line_text[7..]
            .find(name)
            .map(|k| 7 + line_text[7..7 + k].chars().count())
            .unwrap_or(0);
        let pos = self.pos(at + name_col);
        self.spec.options.push(OptionLine {
            name: name.to_string(),
            value: value.to_string(),
            pos,
        });
    }

    fn state_line(&mut self, after: usize, rest: &str) {
        if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
            self.error(after - 6, "unknown directive: expected `%state NAME...`");
            return;
        }
        let line_text: Vec<char> = rest.chars().collect();
        let mut k = 0;
        let mut any = false;
        while k < line_text.len() {
            if line_text[k].is_whitespace() {
                k += 1;
                continue;
            }
            let st = k;
            while k < line_text.len() && !line_text[k].is_whitespace() {
                k += 1;
            }
            any = true;
            let name: String = line_text[st..k].iter().collect();
            let at = after + st;
            if !name.starts_with(is_ident_start) || !name.chars().all(is_ident) {
                self.error(
                    at,
                    format!("`{name}` is not a state name (letters, digits, `_`)"),
                );
            } else if PREDEFINED.contains(&name.as_str()) {
                self.error(
                    at,
                    format!("`{name}` is predefined: START, END and DEFAULT are not declared"),
                );
            } else if let Some((_, first)) = self.spec.states.iter().find(|(s, _)| *s == name) {
                let first = *first;
                self.error(
                    at,
                    format!(
                        "state `{name}` declared twice (first at line {}, column {})",
                        first.line, first.col
                    ),
                );
            } else {
                let pos = self.pos(at);
                self.spec.states.push((name, pos));
            }
        }
        if !any {
            self.error(after - 6, "`%state` needs at least one state name");
        }
    }

    fn macro_line(&mut self, at: usize, t: &str) {
        let end = t.find(char::is_whitespace).unwrap_or(t.len());
        let name = &t[..end];
        if !name.starts_with(is_ident_start) || !name.chars().all(is_ident) {
            self.error(
                at,
                "expected `%option`, `%state`, `%{`, `%%` or a macro `NAME replacement`",
            );
            return;
        }
        let text = t[end..].trim();
        if text.is_empty() {
            self.error(at, format!("macro `{name}` has no replacement"));
            return;
        }
        if let Some(first) = self.macro_text(name) {
            let first = first.pos;
            self.error(
                at,
                format!(
                    "macro `{name}` defined twice (first at line {}, column {})",
                    first.line, first.col
                ),
            );
            return;
        }
        let text_off = t.find(text).unwrap_or(0);
        let pos = self.pos(at);
        let text_pos = self.pos(at + t[..text_off].chars().count());
        self.spec.macros.push(Macro {
            name: name.to_string(),
            text: text.to_string(),
            pos,
            text_pos,
        });
    }

    /// Skips whitespace and `//`, `/* */` comments between items.
    fn skip_space(&self, mut i: usize) -> usize {
        loop {
            while i < self.s.len() && self.s[i].is_whitespace() {
                i += 1;
            }
            if self.s.get(i) == Some(&'/') && self.s.get(i + 1) == Some(&'/') {
                i = self.line_end(i);
            } else if self.s.get(i) == Some(&'/') && self.s.get(i + 1) == Some(&'*') {
                match (i + 2..self.s.len().saturating_sub(1))
                    .find(|&k| self.s[k] == '*' && self.s[k + 1] == '/')
                {
                    Some(k) => i = k + 2,
                    None => return i,
                }
            } else {
                return i;
            }
        }
    }

    fn ident_at(&self, i: usize) -> Option<(String, usize)> {
        if !self.s.get(i).is_some_and(|&c| is_ident_start(c)) {
            return None;
        }
        let mut j = i;
        while j < self.s.len() && is_ident(self.s[j]) {
            j += 1;
        }
        Some((self.text(i, j), j))
    }

    /// Whether `%%` starts at `i` (at the start of its line, alone on it).
    fn at_separator(&self, i: usize) -> bool {
        self.s.get(i) == Some(&'%')
            && self.s.get(i + 1) == Some(&'%')
            && self.text(i + 2, self.line_end(i)).trim().is_empty()
    }

    fn rules(&mut self, mut i: usize) {
        // The head: per-connection variables.
        loop {
            i = self.skip_space(i);
            match self.ident_at(i) {
                Some((kw, j)) if kw == "let" => i = self.var(i, j),
                _ => break,
            }
        }
        let mut end = self.items(i, None, None);
        if end < self.s.len() && self.at_separator(end) {
            end = self.line_end(end) + 1;
            if end < self.s.len() {
                let code = self.text(end, self.s.len());
                if !code.trim().is_empty() {
                    let line = self.pos(end).line;
                    self.spec.trailer = Some((line, code));
                }
            }
        }
    }

    /// `let NAME: TYPE = INIT;` starting at `at` (`let` ends at `j`); returns the offset after `;`.
    fn var(&mut self, at: usize, j: usize) -> usize {
        let (toks, semi) = match rusttok::scan(&self.s, j, true) {
            Ok(r) => r,
            Err(e) => {
                self.error(e.at, format!("per-connection variable: {}", e.msg));
                return self.s.len();
            }
        };
        let usage = "a per-connection variable is `let NAME: TYPE = INIT;`";
        let mut k = 0;
        if toks
            .first()
            .is_some_and(|t| self.text(t.start, t.end) == "mut")
        {
            k = 1;
        }
        let name = match toks.get(k) {
            Some(t) if t.kind == rusttok::Tok::Ident => self.text(t.start, t.end),
            _ => {
                self.error(at, usage);
                return semi + 1;
            }
        };
        let name_at = toks[k].start;
        let colon = toks
            .get(k + 1)
            .filter(|t| t.kind == rusttok::Tok::Punct(':'));
        let eq = toks[k + 1..]
            .iter()
            .position(|t| t.kind == rusttok::Tok::Punct('='))
            .map(|p| p + k + 1);
        let (Some(colon), Some(eq)) = (colon, eq) else {
            self.error(
                name_at,
                format!(
                    "per-connection variable `{name}` needs a type and an initial value: {usage}"
                ),
            );
            return semi + 1;
        };
        let ty = self.text(colon.end, toks[eq].start).trim().to_string();
        let init = self.text(toks[eq].end, semi).trim().to_string();
        if ty.is_empty() || init.is_empty() {
            self.error(
                name_at,
                format!(
                    "per-connection variable `{name}` needs a type and an initial value: {usage}"
                ),
            );
        } else if self.spec.vars.iter().any(|v| v.name == name) {
            self.error(
                name_at,
                format!("per-connection variable `{name}` declared twice"),
            );
        } else {
            let pos = self.pos(name_at);
            self.spec.vars.push(Var {
                name,
                ty,
                init,
                pos,
            });
        }
        semi + 1
    }

    /// Rules until `%%`, the end, or (in a block opened at `block_at`) its `}`; returns the
    /// offset where it stopped (the `%%`, or after the block's `}`).
    fn items(&mut self, mut i: usize, block: Option<&Qual>, block_at: Option<usize>) -> usize {
        loop {
            i = self.skip_space(i);
            if i >= self.s.len() || self.at_separator(i) {
                if let Some(b) = block_at {
                    self.error(b, "unclosed `{`: this block of rules has no `}`");
                }
                return i;
            }
            if self.s[i] == '}' {
                if block_at.is_some() {
                    return i + 1;
                }
                self.error(i, "unmatched `}`");
                i += 1;
                continue;
            }
            if let Some((name, j)) = self.ident_at(i) {
                if name == "START" || name == "END" {
                    let k = self.skip_space(j);
                    if self.s.get(k) == Some(&':') {
                        let k2 = self.skip_space(k + 1);
                        if self.s.get(k2) == Some(&'{') {
                            i = self.start_end(i, &name, k2, block_at.is_some());
                            continue;
                        }
                        if name == "END" {
                            self.error(i, "END takes an action only: `END: { ... }` (no pattern)");
                        }
                    }
                }
            }
            i = self.rule(i, block);
        }
    }

    fn start_end(&mut self, at: usize, name: &str, open: usize, in_block: bool) -> usize {
        let ctx = Ctx {
            groups: None,
            place: name.to_string(),
        };
        let (action, end) = self.action(open, &ctx);
        if in_block {
            self.error(at, format!("{name} cannot be inside a block of rules"));
            return end;
        }
        let slot = if name == "START" {
            &mut self.spec.start
        } else {
            &mut self.spec.end
        };
        match (slot.as_ref(), action) {
            (Some(first), _) => {
                let line = first.line;
                self.error(at, format!("{name} given twice (first at line {line})"));
            }
            (None, Some(a)) => *slot = Some(a),
            (None, None) => {}
        }
        end
    }

    /// One rule or block at `i`.
    fn rule(&mut self, i: usize, block: Option<&Qual>) -> usize {
        let mut qual = None;
        let mut pat_at = i;
        if let Some((toks, stop)) = self.qual_tokens(i) {
            let next = self.s.get(stop).copied();
            if next == Some(':') && self.s.get(stop + 1) != Some(&':') {
                if let Some(q) = self.expand_parse(&toks, i) {
                    self.check_qual_states(&q);
                    qual = Some(q);
                    pat_at = stop + 1;
                }
            } else if next == Some('{') {
                if let Some(q) = self.expand_parse(&toks, i) {
                    let mut vars = Vec::new();
                    q.vars(&mut vars);
                    let from_macro = toks.iter().any(
                        |t| matches!(t, QTok::Name(n, _) if !self.spec.is_state(n) && self.macro_text(n).is_some()),
                    );
                    let all_states = vars
                        .iter()
                        .all(|v| self.spec.is_state(v.trim_start_matches('$')));
                    if all_states || !from_macro {
                        self.check_qual_states(&q);
                        let combined = and(block, q);
                        return self.items(stop + 1, Some(&combined), Some(stop));
                    }
                }
            }
        }
        let pstart = self.skip_space(pat_at);
        let (pat, map, open) = self.pattern(pstart);
        let Some(open) = open else {
            return self.s.len();
        };
        let groups = self.check_pattern(&pat, &map, pstart);
        let ctx = Ctx {
            groups: Some(groups.unwrap_or(usize::MAX)),
            place: "rule".into(),
        };
        let (action, end) = self.action(open, &ctx);
        let qual = match (block, qual) {
            (Some(b), Some(q)) => Some(Qual::And(Box::new(b.clone()), Box::new(q))),
            (Some(b), None) => Some(b.clone()),
            (None, q) => q,
        };
        if let (Some(action), Some(groups)) = (action, groups) {
            let pos = self.pos(i);
            self.spec.rules.push(Rule {
                pos,
                qual,
                pattern: pat,
                groups,
                action,
            });
        }
        end
    }

    /// Lexes a qualifier at `i`: returns its tokens and where it stops (the first character
    /// that cannot be part of one), or `None` if it holds something else.
    fn qual_tokens(&mut self, mut i: usize) -> Option<(Vec<QTok>, usize)> {
        let mut toks = Vec::new();
        loop {
            while i < self.s.len() && self.s[i].is_whitespace() {
                i += 1;
            }
            let c = *self.s.get(i)?;
            let two = (c, self.s.get(i + 1).copied());
            match two {
                ('&', Some('&')) => {
                    toks.push(QTok::Op("&&"));
                    i += 2;
                }
                ('|', Some('|')) => {
                    toks.push(QTok::Op("||"));
                    i += 2;
                }
                ('!', _) => {
                    toks.push(QTok::Op("!"));
                    i += 1;
                }
                ('(', _) => {
                    toks.push(QTok::Op("("));
                    i += 1;
                }
                (')', _) => {
                    toks.push(QTok::Op(")"));
                    i += 1;
                }
                ('$', _) => {
                    let (kw, j) = self.ident_at(i + 1)?;
                    if kw != "LASTSEEN" {
                        // Not a qualifier; the pattern reader reports a keyword.
                        return None;
                    }
                    let k = self.skip_space(j);
                    if self.s.get(k) != Some(&'(') {
                        self.error(i, "`$LASTSEEN` takes a state: `$LASTSEEN(STATE)`");
                        return None;
                    }
                    let k = self.skip_space(k + 1);
                    let (name, e) = self.ident_at(k)?;
                    let e2 = self.skip_space(e);
                    if self.s.get(e2) != Some(&')') {
                        self.error(k, "`$LASTSEEN` takes one state: `$LASTSEEN(STATE)`");
                        return None;
                    }
                    toks.push(QTok::Last(name, self.pos(k)));
                    i = e2 + 1;
                }
                _ if is_ident_start(c) => {
                    let (name, j) = self.ident_at(i)?;
                    toks.push(QTok::Name(name, self.pos(i)));
                    i = j;
                }
                _ => {
                    if toks.is_empty() {
                        return None;
                    }
                    return Some((toks, i));
                }
            }
        }
    }

    /// Substitutes macros (each parenthesised) and parses; `None` if it is not a qualifier.
    fn expand_parse(&mut self, toks: &[QTok], at: usize) -> Option<Qual> {
        let mut out = Vec::new();
        self.expand(toks, &mut Vec::new(), &mut out)?;
        let mut k = 0;
        let q = parse_or(&out, &mut k)?;
        if k != out.len() {
            return None;
        }
        let _ = at;
        Some(q)
    }

    fn expand(
        &mut self,
        toks: &[QTok],
        stack: &mut Vec<String>,
        out: &mut Vec<QTok>,
    ) -> Option<()> {
        for t in toks {
            match t {
                QTok::Name(n, pos) if !self.spec.is_state(n) => {
                    let Some(m) = self.macro_text(n) else {
                        out.push(t.clone());
                        continue;
                    };
                    if stack.contains(n) {
                        return None;
                    }
                    let text: Vec<char> = m.text.chars().collect();
                    let sub = lex_qual_text(&text, *pos)?;
                    stack.push(n.clone());
                    out.push(QTok::Op("("));
                    self.expand(&sub, stack, out)?;
                    out.push(QTok::Op(")"));
                    stack.pop();
                }
                _ => out.push(t.clone()),
            }
        }
        Some(())
    }

    fn check_qual_states(&mut self, q: &Qual) {
        match q {
            Qual::State(n, pos) | Qual::LastSeen(n, pos) => {
                if !self.spec.is_state(n) {
                    self.error_at(
                        *pos,
                        format!("undeclared state `{n}` (declare it with `%state {n}`)"),
                    );
                }
            }
            Qual::Not(a) => self.check_qual_states(a),
            Qual::And(a, b) | Qual::Or(a, b) => {
                self.check_qual_states(a);
                self.check_qual_states(b);
            }
        }
    }

    /// Reads a pattern from `i` to the `{` of its action: returns the regular expression after
    /// substitution, the spec position of each of its characters, and the offset of the `{`.
    fn pattern(&mut self, start: usize) -> (String, Vec<Pos>, Option<usize>) {
        let mut out = String::new();
        let mut map = Vec::new();
        let mut parens: Vec<usize> = Vec::new();
        let mut i = start;
        let mut pieces = 0;
        loop {
            let Some(&c) = self.s.get(i) else {
                self.error(start, "this pattern has no action `{ ... }`");
                return (out, map, None);
            };
            let here = self.pos(i);
            let push = |out: &mut String, map: &mut Vec<Pos>, t: &str, p: Pos| {
                for ch in t.chars() {
                    out.push(ch);
                    map.push(p);
                }
            };
            if !c.is_whitespace() && c != '{' {
                pieces += 1;
            }
            if c.is_whitespace() {
                i += 1;
            } else if c == '"' {
                let mut lit = String::new();
                let mut j = i + 1;
                let mut ok = false;
                while let Some(&d) = self.s.get(j) {
                    if d == '\n' {
                        break;
                    }
                    if d == '"' {
                        ok = true;
                        break;
                    }
                    if d == '\\' {
                        let e = self.s.get(j + 1).copied();
                        let v = match e {
                            Some('n') => '\n',
                            Some('r') => '\r',
                            Some('t') => '\t',
                            Some('\\') => '\\',
                            Some('"') => '"',
                            Some('0') => '\0',
                            _ => {
                                self.error(j, "unknown escape in a quoted literal (known: \\n \\r \\t \\\\ \\\" \\0)");
                                '\\'
                            }
                        };
                        lit.push(v);
                        j += 2;
                        continue;
                    }
                    lit.push(d);
                    j += 1;
                }
                if !ok {
                    self.error(
                        i,
                        "unterminated quoted literal: no closing `\"` on this line",
                    );
                    return (out, map, None);
                }
                push(&mut out, &mut map, &escape_literal(&lit), here);
                i = j + 1;
            } else if c == '\\' {
                let Some(&e) = self.s.get(i + 1) else {
                    self.error(i, "`\\` at the end of the specification");
                    return (out, map, None);
                };
                out.push('\\');
                map.push(here);
                out.push(e);
                map.push(self.pos(i + 1));
                i += 2;
            } else if c == '[' {
                let j = self.class_end(i);
                for k in i..j {
                    out.push(self.s[k]);
                    map.push(self.pos(k));
                }
                i = j;
            } else if c == '{' {
                if let Some((name, j)) = self.ident_at(i + 1) {
                    if self.s.get(j) == Some(&'}') {
                        pieces += 1;
                        self.use_macro(&name, i, here, &mut out, &mut map);
                        i = j + 1;
                        continue;
                    }
                }
                let mut j = i + 1;
                while self
                    .s
                    .get(j)
                    .is_some_and(|d| d.is_ascii_digit() || *d == ',')
                {
                    j += 1;
                }
                if j > i + 1 && self.s.get(j) == Some(&'}') {
                    pieces += 1;
                    for k in i..=j {
                        out.push(self.s[k]);
                        map.push(self.pos(k));
                    }
                    i = j + 1;
                    continue;
                }
                if let Some(&p) = parens.last() {
                    self.error(p, "unclosed `(` in this pattern");
                }
                if pieces == 0 {
                    self.error(i, "a rule needs a pattern before its action");
                }
                return (out, map, Some(i));
            } else if c == '(' {
                parens.push(i);
                out.push(c);
                map.push(here);
                i += 1;
            } else if c == ')' {
                parens.pop();
                out.push(c);
                map.push(here);
                i += 1;
            } else if c == '$'
                && self
                    .ident_at(i + 1)
                    .is_some_and(|(k, _)| action::KEYWORDS.contains(&k.as_str()))
            {
                let (kw, j) = self.ident_at(i + 1).unwrap();
                self.error(
                    i,
                    format!("`${kw}` is an action keyword: it cannot appear outside an action (in a qualifier or a pattern)"),
                );
                i = j;
            } else if is_ident_start(c) && parens.is_empty() {
                let (name, j) = self.ident_at(i).unwrap();
                self.use_macro(&name, i, here, &mut out, &mut map);
                i = j;
            } else {
                out.push(c);
                map.push(here);
                i += 1;
            }
        }
    }

    /// The offset after a bracket class starting at `i` (or the line's end if unclosed: the
    /// regular-expression check reports it).
    fn class_end(&self, i: usize) -> usize {
        let mut j = i + 1;
        if self.s.get(j) == Some(&'^') {
            j += 1;
        }
        if self.s.get(j) == Some(&']') {
            j += 1;
        }
        let mut depth = 1;
        while let Some(&d) = self.s.get(j) {
            match d {
                '\n' => return j,
                '\\' => j += 1,
                '[' if self.s.get(j + 1) == Some(&':') => {
                    if let Some(k) =
                        (j + 2..self.s.len()).find(|&k| self.s[k] == ']' || self.s[k] == '\n')
                    {
                        j = k;
                    }
                }
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        return j + 1;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        j
    }

    /// Appends `(replacement)` for macro `name` used at `at`.
    fn use_macro(
        &mut self,
        name: &str,
        at: usize,
        here: Pos,
        out: &mut String,
        map: &mut Vec<Pos>,
    ) {
        match self.expand_macro(name, &mut Vec::new()) {
            Ok(text) => {
                out.push('(');
                map.push(here);
                for ch in text.chars() {
                    out.push(ch);
                    map.push(here);
                }
                out.push(')');
                map.push(here);
            }
            Err((None, msg)) => self.error(at, msg),
            Err((Some(pos), msg)) => self.error_at(pos, msg),
        }
    }

    /// A macro's replacement with its `{NAME}` uses substituted (each parenthesised).
    /// An error names the position of a `{NAME}` inside a macro's text, or `None` for the use.
    fn expand_macro(
        &self,
        name: &str,
        stack: &mut Vec<String>,
    ) -> Result<String, (Option<Pos>, String)> {
        let Some(m) = self.macro_text(name) else {
            if self.spec.is_state(name) {
                return Err((None, format!(
                    "`{name}` is a state, not a macro: a qualifier ends with `:` (`{name}: pattern {{ ... }}`)"
                )));
            }
            return Err((
                None,
                format!("unknown macro `{name}` (literal text in a pattern is quoted: \"{name}\")"),
            ));
        };
        if stack.iter().any(|s| s == name) {
            return Err((None, format!("macro `{name}` uses itself")));
        }
        stack.push(name.to_string());
        let t: Vec<char> = m.text.chars().collect();
        let mut out = String::new();
        let mut k = 0;
        while k < t.len() {
            if t[k] == '\\' && k + 1 < t.len() {
                out.push(t[k]);
                out.push(t[k + 1]);
                k += 2;
                continue;
            }
            if t[k] == '{' {
                let e = (k + 1..t.len())
                    .find(|&e| !is_ident(t[e]))
                    .unwrap_or(t.len());
                if e > k + 1 && t.get(e) == Some(&'}') && is_ident_start(t[k + 1]) {
                    let inner: String = t[k + 1..e].iter().collect();
                    let at = Pos {
                        line: m.text_pos.line,
                        col: m.text_pos.col + k as u32,
                    };
                    let sub = self
                        .expand_macro(&inner, stack)
                        .map_err(|(p, msg)| (Some(p.unwrap_or(at)), msg))?;
                    out.push('(');
                    out.push_str(&sub);
                    out.push(')');
                    k = e + 1;
                    continue;
                }
            }
            out.push(t[k]);
            k += 1;
        }
        stack.pop();
        Ok(out)
    }

    /// Checks the pattern as the runtime compiles it; returns its number of groups.
    fn check_pattern(&mut self, pat: &str, map: &[Pos], start: usize) -> Option<usize> {
        if pat.is_empty() {
            return None;
        }
        match pattern::check(pat) {
            Ok(groups) => Some(groups),
            Err((offset, msg)) => {
                let pos = offset
                    .and_then(|o| map.get(pat[..o.min(pat.len())].chars().count()).copied())
                    .unwrap_or_else(|| self.pos(start));
                self.error_at(pos, format!("bad regular expression `{pat}`: {msg}"));
                None
            }
        }
    }

    /// The action whose `{` is at `open`: translated code and the offset after its `}`.
    fn action(&mut self, open: usize, ctx: &Ctx) -> (Option<Action>, usize) {
        match rusttok::scan(&self.s, open + 1, false) {
            Ok((toks, close)) => {
                let mut translation = Translation::new(&self.s, &self.spec);
                let code = action::translate(&mut translation, &toks, open + 1, close, ctx);
                let Translation { errors, seen, .. } = translation;
                for (at, msg) in errors {
                    self.error(at, msg);
                }
                for state in seen {
                    if !self.spec.seen.contains(&state) {
                        self.spec.seen.push(state);
                    }
                }
                let line = self.pos(open).line;
                let multiline_literal = toks.iter().any(|t| {
                    t.kind == (rusttok::Tok::Lit { string: true })
                        && self.s[t.start..t.end].contains(&'\n')
                });
                let action = Action {
                    line,
                    code,
                    multiline_literal,
                };
                (Some(action), close + 1)
            }
            Err(e) => {
                let msg = if e.at == open {
                    "unclosed `{`: this action has no matching `}`".to_string()
                } else {
                    format!("in this action: {}", e.msg)
                };
                self.error(e.at, msg);
                (None, self.s.len())
            }
        }
    }
}

fn and(block: Option<&Qual>, q: Qual) -> Qual {
    match block {
        Some(b) => Qual::And(Box::new(b.clone()), Box::new(q)),
        None => q,
    }
}

/// Lexes a macro's replacement as a qualifier (every token at the macro's use).
fn lex_qual_text(t: &[char], pos: Pos) -> Option<Vec<QTok>> {
    let mut out = Vec::new();
    let mut k = 0;
    while k < t.len() {
        let c = t[k];
        let next = t.get(k + 1).copied();
        if c.is_whitespace() {
            k += 1;
        } else if c == '&' && next == Some('&') {
            out.push(QTok::Op("&&"));
            k += 2;
        } else if c == '|' && next == Some('|') {
            out.push(QTok::Op("||"));
            k += 2;
        } else if c == '!' || c == '(' || c == ')' {
            out.push(QTok::Op(match c {
                '!' => "!",
                '(' => "(",
                _ => ")",
            }));
            k += 1;
        } else if is_ident_start(c) {
            let e = (k..t.len()).find(|&e| !is_ident(t[e])).unwrap_or(t.len());
            out.push(QTok::Name(t[k..e].iter().collect(), pos));
            k = e;
        } else if c == '$' {
            let rest: String = t[k..].iter().collect();
            let r = rest
                .strip_prefix("$LASTSEEN")?
                .trim_start()
                .strip_prefix('(')?;
            let close = r.find(')')?;
            let name = r[..close].trim();
            if !name.starts_with(is_ident_start) || !name.chars().all(is_ident) {
                return None;
            }
            out.push(QTok::Last(name.to_string(), pos));
            k += rest[..rest.len() - r[close + 1..].len()].chars().count();
        } else {
            return None;
        }
    }
    Some(out)
}

fn parse_or(t: &[QTok], k: &mut usize) -> Option<Qual> {
    let mut a = parse_and(t, k)?;
    while matches!(t.get(*k), Some(QTok::Op("||"))) {
        *k += 1;
        let b = parse_and(t, k)?;
        a = Qual::Or(Box::new(a), Box::new(b));
    }
    Some(a)
}

fn parse_and(t: &[QTok], k: &mut usize) -> Option<Qual> {
    let mut a = parse_unary(t, k)?;
    while matches!(t.get(*k), Some(QTok::Op("&&"))) {
        *k += 1;
        let b = parse_unary(t, k)?;
        a = Qual::And(Box::new(a), Box::new(b));
    }
    Some(a)
}

fn parse_unary(t: &[QTok], k: &mut usize) -> Option<Qual> {
    let tok = t.get(*k)?.clone();
    *k += 1;
    match tok {
        QTok::Op("!") => Some(Qual::Not(Box::new(parse_unary(t, k)?))),
        QTok::Op("(") => {
            let q = parse_or(t, k)?;
            if !matches!(t.get(*k), Some(QTok::Op(")"))) {
                return None;
            }
            *k += 1;
            Some(q)
        }
        QTok::Name(n, p) => Some(Qual::State(n, p)),
        QTok::Last(n, p) => Some(Qual::LastSeen(n, p)),
        QTok::Op(_) => None,
    }
}

/// A quoted literal as regular-expression text: metacharacters escaped, and control
/// characters written as escapes (`\n`, `\r`, `\t`, `\x00`), so that the generated pattern
/// stays on one line of the generated code and reads as the specification wrote it.
fn escape_literal(lit: &str) -> String {
    let mut out = String::new();
    for c in regex_syntax::escape(lit).chars() {
        match c {
            '\n' => out.push_str(r"\n"),
            '\r' => out.push_str(r"\r"),
            '\t' => out.push_str(r"\t"),
            c if c.is_control() => out.push_str(&format!(r"\x{{{:X}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod literal_tests {
    use super::escape_literal;

    #[test]
    fn control_characters_in_literals_become_escapes() {
        assert_eq!(escape_literal("a.b"), r"a\.b");
        assert_eq!(escape_literal("\r\n"), r"\r\n");
        assert_eq!(escape_literal("\t\0"), r"\t\x{0}");
        let p = regex_syntax::parse(&escape_literal("x\r\n.\0")).unwrap();
        assert_eq!(p, regex_syntax::parse("x\r\n\\.\0").unwrap());
    }
}
