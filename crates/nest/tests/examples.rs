//! The seed's three figures in Rust flavour (examples/nest/): parsed, checked, and for rot13 the
//! generated code compared with a checked-in copy.
//!
//! After an intended change to the generated code, refresh the copies with
//! `NEST_BLESS=1 cargo test -p fastpath-nest --test examples` and review the diff.

use std::path::{Path, PathBuf};

use fastpath_nest::ast::{Qual, Spec};
use fastpath_nest::{codegen, compile};

fn example(name: &str) -> (String, Spec) {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../examples/nest/{name}.nest"));
    let src = std::fs::read_to_string(&path).unwrap();
    let file = format!("{name}.nest");
    let c = compile(&file, &src);
    let rendered: Vec<String> = c.diags.iter().map(|d| d.render(&file)).collect();
    assert!(rendered.is_empty(), "{rendered:#?}");
    (src, c.spec)
}

fn qual(q: &Option<Qual>) -> String {
    fn go(q: &Qual) -> String {
        match q {
            Qual::State(s, _) => s.clone(),
            Qual::LastSeen(s, _) => format!("$LASTSEEN({s})"),
            Qual::Not(a) => format!("!{}", go(a)),
            Qual::And(a, b) => format!("({} && {})", go(a), go(b)),
            Qual::Or(a, b) => format!("({} || {})", go(a), go(b)),
        }
    }
    q.as_ref().map(go).unwrap_or_default()
}

#[test]
fn rot13_figure_3_3() {
    let (_, spec) = example("rot13");
    assert_eq!(spec.prologue.len(), 1);
    assert_eq!(spec.prologue[0].0, 2);
    let opts: Vec<(&str, &str, u32)> = spec
        .options
        .iter()
        .map(|o| (o.name.as_str(), o.value.as_str(), o.pos.line))
        .collect();
    assert_eq!(opts, [("threadServer", "100", 13)]);
    let macros: Vec<(&str, &str)> = spec
        .macros
        .iter()
        .map(|m| (m.name.as_str(), m.text.as_str()))
        .collect();
    assert_eq!(macros, [("ANY", r"[^\n]*"), ("NL", r"\r?\n")]);
    assert_eq!(spec.vars.len(), 1);
    assert_eq!(
        (
            spec.vars[0].name.as_str(),
            spec.vars[0].ty.as_str(),
            spec.vars[0].init.as_str()
        ),
        ("buffer", "String", "String::new()")
    );
    assert_eq!(spec.start.as_ref().unwrap().line, 18);
    // An END rule, so that input the rule cannot take (a line over inputBuffer) or a silent
    // client gets an answer before the close.
    assert!(spec.end.as_ref().unwrap().code.contains("rot13: closing"));
    assert_eq!(spec.rules.len(), 1);
    let r = &spec.rules[0];
    // Figure 3.3: `ANY NL`, $1 is what ANY matched and $2 what NL matched.
    assert_eq!(r.pattern, r"([^\n]*)(\r?\n)");
    assert_eq!(r.groups, 2);
    assert_eq!(qual(&r.qual), "DEFAULT");
    assert_eq!((r.pos.line, r.pos.col, r.action.line), (20, 1, 20));
    assert!(
        r.action.code.contains("*buffer = m.text(1).to_string();"),
        "{}",
        r.action.code
    );
    assert!(
        r.action
            .code
            .contains(r#"cx.reply(format_args!("{}{}", r, "\n"));"#),
        "{}",
        r.action.code
    );
    assert!(spec.trailer.is_none());
}

#[test]
fn login_figure_3_4() {
    let (_, spec) = example("login");
    let states: Vec<&str> = spec.states.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(states, ["EXPECT_USER", "EXPECT_PASS", "VALID"]);
    assert!(spec.start.is_some() && spec.end.is_some());
    let quals: Vec<String> = spec.rules.iter().map(|r| qual(&r.qual)).collect();
    assert_eq!(
        quals,
        [
            "EXPECT_USER",
            "EXPECT_PASS",
            "VALID",
            "VALID",
            "VALID",
            "VALID"
        ]
    );
    // Figure 3.4's GET: WS is $1, (http://) $2, {NOT_WS} $3 (the file), {WS} $4, (.*) $5
    // (the version), NL $6; the quoted literal is not a group.
    let get = &spec.rules[2];
    assert_eq!(
        get.pattern,
        r"GET([[:blank:]]+)(http://)?([^[:space:]]+)*([[:blank:]]+)?(.*)?(\r?\n)"
    );
    assert_eq!(get.groups, 6);
    assert!(get.action.code.contains("let mut file_name = m.text(3);"));
    assert!(get.action.code.contains("if !m.text(2).is_empty()"));
    assert!(get.action.code.contains("let version = m.text(5);"));
    assert!(get
        .action
        .code
        .contains("if cx.file_reply(&file_name).is_err()"));
    assert!(get.action.code.contains("return;"));
    // PUT's name is $2 and its size $4: `$fileReceive(name, size)` stores that many bytes.
    let put = &spec.rules[3];
    assert_eq!(
        put.pattern,
        r"PUT([[:blank:]]+)([^[:space:]]+)([[:blank:]]+)([0-9]{1,12})(\r?\n)"
    );
    assert!(
        put.action
            .code
            .contains("cx.file_receive(&file_name, Some(size as u64))"),
        "{}",
        put.action.code
    );
    let pass = &spec.rules[1];
    assert!(pass.action.code.contains("cx.clear_all();"));
    assert!(pass.action.code.contains("cx.seen(VALID);"));
    let end = spec.end.as_ref().unwrap();
    assert!(
        end.code.contains("{ cx.close(); return; };"),
        "{}",
        end.code
    );
    assert_eq!(spec.trailer.as_ref().unwrap().0, 122);
}

#[test]
fn smtp_figure_3_6() {
    let (_, spec) = example("smtp");
    let quals: Vec<String> = spec.rules.iter().map(|r| qual(&r.qual)).collect();
    // The commands sit in a DEFAULT block (DEFAULT is cleared while the mail's text comes),
    // the text's two rules in an IN_DATA block.
    let d = |q: &str| format!("(DEFAULT && {q})");
    assert_eq!(
        quals,
        [
            "DEFAULT".to_string(),
            d("(GOT_HELO && !GOT_MAIL)"),
            d("(GOT_HELO && !GOT_MAIL)"),
            d("!GOT_HELO"),
            d("GOT_MAIL"),
            d("GOT_MAIL"),
            d("GOT_MAIL"),
            d("!GOT_MAIL"),
            // The macro BOTH substituted in parentheses.
            d("(GOT_HELO && (GOT_MAIL && GOT_RCPT))"),
            d("!(GOT_HELO && (GOT_MAIL && GOT_RCPT))"),
            "DEFAULT".to_string(),
            "DEFAULT".to_string(),
            "DEFAULT".to_string(),
            "DEFAULT".to_string(),
            "IN_DATA".to_string(),
            "IN_DATA".to_string(),
        ]
    );
    // Commands are case-insensitive (RFC 5321): `(?i: )` takes no group number.
    let helo = &spec.rules[0];
    assert_eq!(
        helo.pattern,
        r"(?i:HELO|EHLO)([[:blank:]]+)([^\r\n]*)(\r?\n)"
    );
    assert!(helo.action.code.contains("m.text(2)"));
    let mail = &spec.rules[1];
    assert_eq!(
        mail.pattern,
        r"(?i:MAIL\ FROM:)([[:blank:]]+)?(<[^<>\r\n]*>)([^\r\n]*)(\r?\n)"
    );
    let start = spec.start.as_ref().unwrap();
    assert!(
        start.code.contains(r#"cx.reply(format_args!("220 {} Simple SMTP; {}\r\n", cx.server_name().to_string(), date()))"#),
        "{}",
        start.code
    );
    // The end of the text ties with a line of text and is written first; the quoted `\n`
    // is written as an escape in the pattern, not as a line break.
    assert_eq!(spec.rules[14].pattern, r"\.(\r?\n)");
    assert_eq!(spec.rules[15].pattern, r"([^\n]*)\n");
    assert!(spec.rules[15].action.code.contains("append(d, m.bytes(1))"));
}

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

fn compare(name: &str, got: &str) {
    let path = golden(name);
    if std::env::var_os("NEST_BLESS").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if want != got {
        let first = want
            .lines()
            .zip(got.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(want.lines().count().min(got.lines().count()));
        panic!(
            "{name} differs from {} from line {}:\n  want: {:?}\n  got:  {:?}\n(NEST_BLESS=1 refreshes it)",
            path.display(),
            first + 1,
            want.lines().nth(first),
            got.lines().nth(first)
        );
    }
}

#[test]
fn rot13_generated_code_is_the_checked_in_one() {
    let (_, spec) = example("rot13");
    let p = codegen::generate(&spec, "rot13", Path::new("/path/to/crates/nest-runtime"));
    compare("rot13.main.rs", &p.main_rs);
    compare("rot13.Cargo.toml", &p.cargo_toml);
    assert_eq!(p.lines.len(), p.main_rs.lines().count());
}

#[test]
fn every_action_line_maps_back_to_its_spec_line() {
    for name in ["rot13", "login", "smtp"] {
        let (src, spec) = example(name);
        let spec_lines: Vec<&str> = src.lines().collect();
        let p = codegen::generate(&spec, name, Path::new("/rt"));
        // Copied code: the %{ %} section (before the states) and the functions from `start` on.
        let gen_lines: Vec<&str> = p.main_rs.lines().collect();
        let states_at = gen_lines
            .iter()
            .position(|l| l.starts_with("// ---- states"))
            .unwrap();
        let start_at = gen_lines
            .iter()
            .position(|l| l.contains("fn start("))
            .unwrap();
        for (k, (gen, map)) in p.main_rs.lines().zip(&p.lines).enumerate() {
            let Some(l) = map else { continue };
            if (states_at..start_at).contains(&k) {
                continue;
            }
            let orig = spec_lines[*l as usize - 1].trim();
            // Copied code keeps its text apart from keywords; comments name their line.
            if gen.contains(&format!("{name}.nest:{l}"))
                // The binding of per-connection variables, on one line or three.
                || gen.trim().starts_with("let Connection {")
                || gen.trim().ends_with("..")
                || gen.trim() == "} = conn;"
                || orig.contains('$')
                || orig.is_empty()
            {
                continue;
            }
            let g = gen.trim();
            assert!(
                g == orig || g.contains(orig) || orig.contains(g.trim_end_matches(',')),
                "{name}: generated line {} {g:?} maps to spec line {l} {orig:?}",
                k + 1
            );
        }
        // A rustc location in the action of rule 0 points at the rule's spec line.
        let line = p
            .main_rs
            .lines()
            .position(|l| l.contains("0 => {"))
            .unwrap()
            + 2;
        let msg = p.map_messages(
            &format!("{name}.nest"),
            &format!(" --> src/main.rs:{line}:9"),
        );
        assert!(
            msg.ends_with(&format!("({name}.nest:{})", spec.rules[0].action.line)),
            "{msg}"
        );
    }
}

#[test]
fn keywords_become_runtime_calls() {
    let cases = [
        ("$seen(A);", "cx.seen(A);"),
        ("$clear(A);", "cx.clear(A);"),
        ("$clear(*);", "cx.clear_all();"),
        (
            r#"$reply("n={}", $1);"#,
            r#"cx.reply(format_args!("n={}", m.text(1)));"#,
        ),
        (
            r#"$reply($1, "\n");"#,
            r#"cx.reply(format_args!("{}{}", m.text(1), "\n"));"#,
        ),
        ("$close;", "{ cx.close(); return; };"),
        ("$close();", "{ cx.close(); return; };"),
        ("if x { $return; }", "if x { return; }"),
        (
            r#"let _ = $fileReply(format!("/d/{}", $1));"#,
            r#"let _ = cx.file_reply(&(format!("/d/{}", m.text(1))));"#,
        ),
        (
            "let _ = $fileReply($1);",
            "let _ = cx.file_reply(&m.text(1));",
        ),
        (
            r#"let _ = $fileReceive("f", n + 1);"#,
            r#"let _ = cx.file_receive(&"f", Some((n + 1) as u64));"#,
        ),
        (
            r#"let _ = $fileReceive(path, len);"#,
            r#"let _ = cx.file_receive(&path, Some(len as u64));"#,
        ),
        ("let b = $bytes(1);", "let b = m.bytes(1);"),
        (
            "let s = \"$1 {\"; // $seen(Z)",
            "let s = \"$1 {\"; // $seen(Z)",
        ),
    ];
    for (code, want) in cases {
        let src = format!("%state A\n%%\nSTART: {{ }}\nDEFAULT: \"x\" ([a-z]) {{ {code}\n}}\n");
        let c = compile("k.nest", &src);
        assert!(!c.has_errors(), "{code}: {:?}", c.diags);
        assert_eq!(c.spec.rules[0].action.code.trim(), want, "{code}");
    }
}

#[test]
fn blocks_nest_and_combine_their_qualifiers() {
    let src = "%state A B C\nQ B || C\n%%\nSTART: { $seen(A); $seen(B); $seen(C); }\n\
               A {\n    Q {\n        !C: \"x\" { }\n        \"y\" { }\n    }\n    \"z\" { }\n}\n\"w\" { }\n";
    let c = compile("b.nest", src);
    assert!(c.diags.is_empty(), "{:?}", c.diags);
    let quals: Vec<String> = c.spec.rules.iter().map(|r| qual(&r.qual)).collect();
    assert_eq!(
        quals,
        ["((A && (B || C)) && !C)", "(A && (B || C))", "A", ""]
    );
    let lines: Vec<u32> = c.spec.rules.iter().map(|r| r.pos.line).collect();
    assert_eq!(lines, [7, 8, 10, 12]);
}

#[test]
fn a_silent_start_lets_the_client_speak_first() {
    let gen = |start: &str| {
        let src = format!("%%\n{start}\"x\" {{ $reply(\"y\"); }}\n");
        let c = compile("s.nest", &src);
        assert!(!c.has_errors(), "{start}: {:?}", c.diags);
        codegen::generate(&c.spec, "s", Path::new("/rt")).main_rs
    };
    let speaks = "fn client_speaks_first(&self) -> bool {\n        true\n    }";
    // No START, an empty one, one with only comments: the listeners may defer accepting.
    for start in [
        "",
        "START: {\n}\n",
        "START: { // nothing to say\n /* still nothing */ }\n",
    ] {
        assert!(gen(start).contains(speaks), "{start:?}");
    }
    // A START that does anything may greet the client: the runtime's default (false) stays.
    for start in [
        "START: { $reply(\"hello\\n\"); }\n",
        "START: { let _ = 1; }\n",
    ] {
        assert!(!gen(start).contains("fn client_speaks_first"), "{start:?}");
    }
    let (_, http10) = example("http10");
    let p = codegen::generate(&http10, "http10", Path::new("/rt"));
    assert!(p.main_rs.contains(speaks));
    let (_, login) = example("login");
    let p = codegen::generate(&login, "login", Path::new("/rt"));
    assert!(!p.main_rs.contains("fn client_speaks_first"));
}
