//! One case per kind of error or warning: a small spec and the exact `LINE:COLUMN: message`
//! the compiler must report (messages compared by their start).

use fastpath_nest::compile;

/// (what, spec, expected diagnostics as `LINE:COL: message start`)
const CASES: &[(&str, &str, &[&str])] = &[
    (
        "undeclared state in a qualifier",
        "%%\nSTART: { }\nVALID: \"x\" { }\n",
        &["3:1: undeclared state `VALID`"],
    ),
    (
        "undeclared state in $seen",
        "%state A\n%%\nSTART: {\n    $seen(B);\n}\n",
        &["4:11: undeclared state `B`"],
    ),
    (
        "undeclared state in $clear",
        "%%\nSTART: { $clear(GONE); }\n",
        &["2:17: undeclared state `GONE`"],
    ),
    (
        "undeclared state in $LASTSEEN",
        "%state A\n%%\nSTART: { }\nA && $LASTSEEN(Z): \"x\" { }\n",
        &["4:16: undeclared state `Z`"],
    ),
    (
        "unknown macro",
        "%%\nSTART: { }\nDEFAULT: \"x\" WORD { }\n",
        &["3:14: unknown macro `WORD`"],
    ),
    (
        "columns count characters, not bytes",
        "%%\nSTART: { $reply(\"h\u{e9}llo $\"); }\nDEFAULT: \"\u{e9}t\u{e9}\" X { }\n",
        &["3:16: unknown macro `X`"],
    ),
    (
        "unknown macro inside a macro",
        "A [a-z]{B}\n%%\nSTART: { }\nDEFAULT: A { }\n",
        &["1:8: unknown macro `B`"],
    ),
    (
        "unknown option",
        "%option threadSever 4\n%%\nSTART: { }\n",
        &["1:9: unknown option `threadSever`"],
    ),
    (
        "bad option value",
        "%option serverPort eighty\n%%\nSTART: { }\n",
        &["1:9: serverPort: `eighty` is not a port (0-65535)"],
    ),
    (
        "two models",
        "%option threadServer 4\n%option eventServer\n%%\nSTART: { }\n",
        &["2:9: `eventServer`: the model is already `threadServer`"],
    ),
    (
        "bad regular expression",
        "%%\nSTART: { }\nDEFAULT: \"a\" (b+ { }\n",
        &[
            "3:14: unclosed `(` in this pattern",
            "3:14: bad regular expression",
        ],
    ),
    (
        "bad regular expression in a macro",
        "R a{2,1}\n%%\nSTART: { }\nDEFAULT: R { }\n",
        &["4:10: bad regular expression"],
    ),
    (
        "keyword in a qualifier",
        "%%\nSTART: { }\n$reply: \"x\" { }\n",
        &["3:1: `$reply` is an action keyword"],
    ),
    (
        "keyword in a pattern",
        "%%\nSTART: { }\nDEFAULT: \"x\" $close { }\n",
        &["3:14: `$close` is an action keyword"],
    ),
    (
        "$LASTSEEN in an action",
        "%state A\n%%\nSTART: {\n  if $LASTSEEN(A) { }\n}\n",
        &["4:6: `$LASTSEEN` belongs in qualifiers"],
    ),
    (
        "unknown keyword",
        "%%\nSTART: { $replay(\"x\"); }\n",
        &["2:10: unknown keyword `$replay`"],
    ),
    (
        "unclosed action",
        "%%\nSTART: {\n  if x {\n}\n",
        &["2:8: unclosed `{`"],
    ),
    (
        "mismatched bracket in an action",
        "%%\nSTART: { foo(]; }\n",
        &["2:14: in this action: `]` closes `(`"],
    ),
    (
        "unmatched }",
        "%%\nSTART: { }\n}\n",
        &["3:1: unmatched `}`"],
    ),
    (
        "unclosed block",
        "%state A\n%%\nSTART: { }\nA {\n  \"x\" { }\n",
        &["4:3: unclosed `{`: this block of rules has no `}`"],
    ),
    (
        "missing %%",
        "%option inetd\nSTART: { }\n",
        &["2:1: expected `%option`, `%state`", "3:1: missing `%%`"],
    ),
    (
        "unclosed %{",
        "%{\nfn f() {}\n",
        &["1:1: unclosed `%{`", "3:1: missing `%%`"],
    ),
    (
        "duplicate state",
        "%state A B\n%state A\n%%\nSTART: { }\n",
        &["2:8: state `A` declared twice (first at line 1, column 8)"],
    ),
    (
        "predefined state declared",
        "%state A DEFAULT\n%%\nSTART: { }\n",
        &["1:10: `DEFAULT` is predefined"],
    ),
    (
        "$seen(START)",
        "%%\nSTART: { $seen(START); }\n",
        &["2:16: `$seen(START)`: START and END are entered by the runtime"],
    ),
    (
        "unsatisfiable qualifier",
        "%state A B\n%%\nSTART: { }\nA && !(A || B): \"x\" { }\n",
        &["4:1: rule can never match: its qualifier is false"],
    ),
    (
        "two last-seen states at once",
        "%state A B\n%%\nSTART: { }\n$LASTSEEN(A) && $LASTSEEN(B): \"x\" { }\n",
        &["4:1: rule can never match: its qualifier is false"],
    ),
    (
        "rule shadowed by an earlier one",
        "%state A B\nNL \\n\n%%\nSTART: { }\nA: \"q\" NL { }\nB { A: \"q\" NL { } }\n",
        &["6:5: rule can never match: the rule at line 5, column 1"],
    ),
    (
        "a group the pattern does not have",
        "%%\nSTART: { }\nDEFAULT: \"a\" ([0-9]+) { let x = $2; }\n",
        &["3:33: `$2`: this rule's pattern has 1 group"],
    ),
    (
        "a group in START",
        "%%\nSTART: { let x = $1; }\n",
        &["2:18: `$1`: START matches no input"],
    ),
    (
        "per-connection variable without a type",
        "%%\nlet n = 0;\nSTART: { }\n",
        &["2:5: per-connection variable `n` needs a type"],
    ),
    (
        "START twice",
        "%%\nSTART: { }\nSTART: { }\n",
        &["3:1: START given twice (first at line 2)"],
    ),
    (
        "a state no action sets (warning)",
        "%state A B\n%%\nSTART: { $seen(A); }\nA && B: \"x\" { }\nA || B: \"y\" { }\n",
        &["4:1: warning: rule can never match: no action `$seen`s `B`"],
    ),
    (
        "no START, no rules (warnings)",
        "%%\n",
        &[
            "1:1: warning: no `START: { }` rule",
            "1:1: warning: no rules",
        ],
    ),
];

#[test]
fn every_error_at_its_line_and_column() {
    let mut failures = Vec::new();
    for (what, src, want) in CASES {
        let c = compile("t.nest", src);
        // Warnings only where the case is about them.
        let warnings = want.iter().any(|w| w.contains("warning:"));
        let got: Vec<String> = c
            .diags
            .iter()
            .filter(|d| warnings || !d.warning)
            .map(|d| d.render("t.nest"))
            .collect();
        let ok = got.len() == want.len()
            && got
                .iter()
                .zip(want.iter())
                .all(|(g, w)| g.starts_with(&format!("t.nest:{w}")));
        if !ok {
            failures.push(format!("{what}:\n  want {want:?}\n  got  {got:?}"));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn all_errors_not_just_the_first() {
    let src = "%option nope 1\n%state A A\n%%\nSTART: { $seen(B); }\nC: \"x\" { }\n";
    let c = compile("t.nest", src);
    assert!(c.has_errors());
    let lines: Vec<u32> = c.diags.iter().map(|d| d.pos.line).collect();
    assert_eq!(lines, [1, 2, 4, 5], "{:?}", c.diags);
}

#[test]
fn a_dollar_in_a_string_or_comment_is_left_alone() {
    let src = "%%\nSTART: {\n    let s = \"$reply(x) }\"; // $close\n    $reply(s);\n}\n";
    let c = compile("t.nest", src);
    assert!(!c.has_errors(), "{:?}", c.diags);
    let code = &c.spec.start.as_ref().unwrap().code;
    assert!(code.contains("\"$reply(x) }\"; // $close"), "{code}");
    assert!(code.contains("cx.reply(format_args!(\"{}\", s))"), "{code}");
}

/// Prefixes of the examples, and each with one character removed, are checked without a
/// panic: a half-written spec gets messages, not a crash.
#[test]
fn no_panic_on_cut_or_damaged_specs() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/nest");
    for name in ["rot13", "login", "smtp"] {
        let src = std::fs::read_to_string(dir.join(format!("{name}.nest"))).unwrap();
        let chars: Vec<char> = src.chars().collect();
        // Every third character, but about 300 cuts at most per example: each cut compiles
        // the whole spec twice, patterns included, so a longer example (smtp.nest) would make
        // the test quadratic in its length.
        let step = (chars.len() / 300).max(3);
        for cut in (0..chars.len()).step_by(step) {
            let prefix: String = chars[..cut].iter().collect();
            let _ = compile("t.nest", &prefix);
            let damaged: String = chars[..cut].iter().chain(&chars[cut + 1..]).collect();
            let c = compile("t.nest", &damaged);
            // Removing a character that matters must give an error, not silence; any error
            // found must have a real position.
            for d in &c.diags {
                assert!(
                    d.pos.line >= 1 && d.pos.col >= 1,
                    "{name} cut at {cut}: {d:?}"
                );
            }
        }
    }
}
