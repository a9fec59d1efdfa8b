//! What a parsed specification holds. Every piece keeps its line and column in the spec.

/// A position in the spec: line and column, both from 1 (columns count characters).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Default)]
pub struct Pos {
    pub line: u32,
    pub col: u32,
}

#[derive(Clone, Debug)]
pub struct OptionLine {
    pub name: String,
    /// The text after the name, trimmed; "" when absent.
    pub value: String,
    pub pos: Pos,
}

#[derive(Clone, Debug)]
pub struct Macro {
    pub name: String,
    pub text: String,
    pub pos: Pos,
    /// Where the replacement text starts.
    pub text_pos: Pos,
}

/// A per-connection variable: `let NAME: TYPE = INIT;` at the head of the rules section.
#[derive(Clone, Debug)]
pub struct Var {
    pub name: String,
    pub ty: String,
    pub init: String,
    pub pos: Pos,
}

/// A qualifying expression, macros already substituted.
#[derive(Clone, Debug)]
pub enum Qual {
    State(String, Pos),
    LastSeen(String, Pos),
    Not(Box<Qual>),
    And(Box<Qual>, Box<Qual>),
    Or(Box<Qual>, Box<Qual>),
}

impl Qual {
    /// The state names it reads, each once, in order of first use (`$LASTSEEN(S)` counts as its
    /// own variable, named `$S`).
    pub fn vars(&self, out: &mut Vec<String>) {
        match self {
            Qual::State(s, _) => {
                if !out.contains(s) {
                    out.push(s.clone())
                }
            }
            Qual::LastSeen(s, _) => {
                let v = format!("${s}");
                if !out.contains(&v) {
                    out.push(v)
                }
            }
            Qual::Not(q) => q.vars(out),
            Qual::And(a, b) | Qual::Or(a, b) => {
                a.vars(out);
                b.vars(out);
            }
        }
    }

    /// Its value when the variables in `on` hold (names as `vars` gives them).
    pub fn eval(&self, vars: &[String], on: u32) -> bool {
        let get = |name: &str| {
            vars.iter()
                .position(|v| v == name)
                .is_some_and(|i| on & (1 << i) != 0)
        };
        match self {
            Qual::State(s, _) => get(s),
            Qual::LastSeen(s, _) => get(&format!("${s}")),
            Qual::Not(q) => !q.eval(vars, on),
            Qual::And(a, b) => a.eval(vars, on) && b.eval(vars, on),
            Qual::Or(a, b) => a.eval(vars, on) || b.eval(vars, on),
        }
    }
}

/// The Rust code of an action, `$` keywords already translated.
#[derive(Clone, Debug)]
pub struct Action {
    /// The line of the opening `{`; the code starts right after it.
    pub line: u32,
    pub code: String,
    /// Whether a string literal in it spans lines: then its lines cannot be re-indented.
    pub multiline_literal: bool,
}

#[derive(Clone, Debug)]
pub struct Rule {
    pub pos: Pos,
    /// The block's and the rule's own qualifiers, combined with `&&`; `None` is always true.
    pub qual: Option<Qual>,
    /// The regular expression after substitution, as the runtime compiles it.
    pub pattern: String,
    pub groups: usize,
    pub action: Action,
}

#[derive(Clone, Debug, Default)]
pub struct Spec {
    /// The file name used in `SPEC:LINE` (as given on the command line).
    pub file: String,
    /// Each `%{ %}` block: the line of its first code line and the code.
    pub prologue: Vec<(u32, String)>,
    pub options: Vec<OptionLine>,
    pub states: Vec<(String, Pos)>,
    pub macros: Vec<Macro>,
    pub vars: Vec<Var>,
    pub start: Option<Action>,
    pub end: Option<Action>,
    pub rules: Vec<Rule>,
    /// The states some action `$seen`s.
    pub seen: Vec<String>,
    /// After the second `%%`: the line of its first line and the code.
    pub trailer: Option<(u32, String)>,
}

impl Spec {
    /// Whether `name` is a state: predefined, or declared with `%state`.
    pub fn is_state(&self, name: &str) -> bool {
        PREDEFINED.contains(&name) || self.states.iter().any(|(s, _)| s == name)
    }
}

/// An error or a warning at a position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diag {
    pub pos: Pos,
    pub warning: bool,
    pub msg: String,
}

impl Diag {
    /// `SPEC:LINE:COLUMN: message` (with `warning: ` before a warning's message).
    pub fn render(&self, file: &str) -> String {
        format!(
            "{file}:{}:{}: {}{}",
            self.pos.line,
            self.pos.col,
            if self.warning { "warning: " } else { "" },
            self.msg
        )
    }
}

/// The predefined states, with the ids the runtime gives them.
pub const PREDEFINED: [&str; 3] = ["START", "END", "DEFAULT"];
