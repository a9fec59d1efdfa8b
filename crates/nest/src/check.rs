//! Checks over the whole parsed specification: options, and rules that can never match.

use crate::ast::*;
use fastpath_nest_runtime::options;

/// The most states a qualifier may name for the "can never match" checks, which try every
/// assignment (2^16 at most); beyond it the check is skipped.
const MAX_VARS: usize = 16;

pub fn check(spec: &Spec, diags: &mut Vec<Diag>) {
    fn err(diags: &mut Vec<Diag>, pos: Pos, msg: String) {
        diags.push(Diag {
            pos,
            warning: false,
            msg,
        })
    }
    // Options: known, well valued, each once, one model.
    let mut model: Option<&OptionLine> = None;
    for (k, o) in spec.options.iter().enumerate() {
        if let Err(msg) = options::check(&o.name, &o.value) {
            err(diags, o.pos, msg);
            continue;
        }
        if let Some(first) = spec.options[..k].iter().find(|f| f.name == o.name) {
            err(
                diags,
                o.pos,
                format!(
                    "option `{}` given twice (first at line {})",
                    o.name, first.pos.line
                ),
            );
            continue;
        }
        if options::is_model(&o.name) {
            match model {
                Some(m) => err(
                    diags,
                    o.pos,
                    format!(
                        "`{}`: the model is already `{}` (line {}); a server has one model",
                        o.name, m.name, m.pos.line
                    ),
                ),
                None => model = Some(o),
            }
        }
    }
    // Rules no input can reach.
    for (j, r) in spec.rules.iter().enumerate() {
        let Some(q) = &r.qual else { continue };
        let mut vars = Vec::new();
        q.vars(&mut vars);
        if vars.len() <= MAX_VARS
            && !(0..1u32 << vars.len()).any(|on| valid(&vars, on) && q.eval(&vars, on))
        {
            err(
                diags,
                r.pos,
                "rule can never match: its qualifier is false whatever states are seen".into(),
            );
            continue;
        }
        // States no action sets are never true: a rule that needs one is dead, most likely
        // for a misspelt or forgotten `$seen` (a warning: the spec may still be half-written).
        let never: Vec<usize> = (0..vars.len())
            .filter(|&i| {
                let v = vars[i].trim_start_matches('$');
                // Undeclared states are errors already.
                spec.states.iter().any(|(s, _)| s == v) && !spec.seen.iter().any(|s| s == v)
            })
            .collect();
        if !never.is_empty()
            && vars.len() <= MAX_VARS
            && !(0..1u32 << vars.len())
                .filter(|on| never.iter().all(|&i| on & (1 << i) == 0))
                .any(|on| valid(&vars, on) && q.eval(&vars, on))
        {
            let names: Vec<&str> = never
                .iter()
                .map(|&i| vars[i].trim_start_matches('$'))
                .collect();
            diags.push(Diag {
                pos: r.pos,
                warning: true,
                msg: format!(
                    "rule can never match: no action `$seen`s {}",
                    names
                        .iter()
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        for earlier in &spec.rules[..j] {
            if earlier.pattern != r.pattern {
                continue;
            }
            let mut all = vars.clone();
            if let Some(eq) = &earlier.qual {
                eq.vars(&mut all);
            }
            if all.len() > MAX_VARS {
                continue;
            }
            let holds = |q: &Option<Qual>, on: u32| q.as_ref().is_none_or(|q| q.eval(&all, on));
            let implied = (0..1u32 << all.len())
                .filter(|&on| valid(&all, on))
                .all(|on| !holds(&r.qual, on) || holds(&earlier.qual, on));
            if implied {
                err(
                    diags,
                    r.pos,
                    format!(
                        "rule can never match: the rule at line {}, column {} has the same \
                         pattern and qualifies whenever this one does, and ties go to the rule \
                         written first",
                        earlier.pos.line, earlier.pos.col
                    ),
                );
                break;
            }
        }
    }
    // A rule without a qualifier after one with the same pattern and a qualifier is also shadowed
    // when the earlier has none: covered above (holds(None) is true).
    let warn = |diags: &mut Vec<Diag>, msg: &str| {
        diags.push(Diag {
            pos: Pos { line: 1, col: 1 },
            warning: true,
            msg: msg.into(),
        })
    };
    if spec.start.is_none() {
        warn(
            diags,
            "no `START: { }` rule: the server sends nothing before the client's first input",
        );
    }
    if spec.rules.is_empty() {
        warn(diags, "no rules: the server matches no input");
    }
}

/// Whether an assignment is possible: at most one state is the last seen.
fn valid(vars: &[String], on: u32) -> bool {
    let last = vars
        .iter()
        .enumerate()
        .filter(|(i, v)| v.starts_with('$') && on & (1 << i) != 0)
        .count();
    last <= 1
}
