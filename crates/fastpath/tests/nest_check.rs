//! `fastpath nest check SPEC` and `fastpath nest build SPEC --no-compile` through the real
//! binary: exit codes, every error as SPEC:LINE:COLUMN on stderr, the project written.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::check::run;
use crate::util::*;

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/nest")
}

fn nest(args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("nest").args(args);
    run(cmd)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn nest_check_accepts_the_examples() {
    for name in ["rot13", "login", "smtp"] {
        let path = examples().join(format!("{name}.nest"));
        let out = nest(&["check", path.to_str().unwrap()]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{name}");
    }
}

#[test]
fn nest_check_reports_every_error_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("bad.nest");
    std::fs::write(
        &spec,
        "%option threadServer many\n%state A\nWS [ ]+\n%%\nSTART: {\n    $seen(B);\n}\nA: \"x\" WORD {\n}\nA: \"y\" ([a-z] {\n}\n",
    )
    .unwrap();
    let out = nest(&["check", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let p = spec.display().to_string();
    let lines: Vec<String> = stderr(&out).lines().map(String::from).collect();
    let want = [
        format!("{p}:1:9: threadServer: `many` is not a count of at least 1"),
        format!("{p}:6:11: undeclared state `B` (declare it with `%state B`)"),
        format!("{p}:8:1: warning: rule can never match: no action `$seen`s `A`"),
        format!("{p}:8:8: unknown macro `WORD` (literal text in a pattern is quoted: \"WORD\")"),
        format!("{p}:10:8: unclosed `(` in this pattern"),
        format!("{p}:10:8: bad regular expression `y([a-z]`: unclosed group"),
        format!("fastpath nest: {p}: 5 errors"),
    ];
    assert_eq!(lines, want);
}

#[test]
fn nest_check_warnings_do_not_fail() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("quiet.nest");
    std::fs::write(&spec, "%%\n\"ping\" { $reply(\"pong\\n\"); }\n").unwrap();
    let out = nest(&["check", spec.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "{}:1:1: warning: no `START: {{ }}` rule: the server sends nothing before the \
             client's first input\n",
            spec.display()
        )
    );
}

#[test]
fn nest_check_of_a_missing_file() {
    let out = nest(&["check", "/nonexistent/x.nest"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("fastpath nest: cannot read /nonexistent/x.nest:"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn nest_build_writes_the_project() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("rot13-server");
    let spec = examples().join("rot13.nest");
    let out = nest(&[
        "build",
        spec.to_str().unwrap(),
        "-o",
        out_dir.to_str().unwrap(),
        "--runtime",
        "/opt/nest-runtime",
        "--no-compile",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!("generated {}\n", out_dir.join("src/main.rs").display())
    );
    let main = std::fs::read_to_string(out_dir.join("src/main.rs")).unwrap();
    assert!(main.contains("// rot13.nest:20\n"), "{main}");
    assert!(main.contains("impl Server for Rot13 {"));
    let toml = std::fs::read_to_string(out_dir.join("Cargo.toml")).unwrap();
    assert!(
        toml.contains("fastpath-nest-runtime = { path = \"/opt/nest-runtime\" }"),
        "{toml}"
    );
    // Again over its own output: fine, and a file that would not change is not rewritten
    // (cargo rebuilds a project whose files are newer than its last build).
    let main_rs = out_dir.join("src/main.rs");
    let modified = std::fs::metadata(&main_rs).unwrap().modified().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let again = nest(&[
        "build",
        spec.to_str().unwrap(),
        "-o",
        out_dir.to_str().unwrap(),
        "--no-compile",
    ]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(
        std::fs::metadata(&main_rs).unwrap().modified().unwrap(),
        modified
    );
    // With the source tree's runtime, the workspace's lock file comes along: the project
    // builds with the versions fastpath was tested with, without asking the registry.
    assert_eq!(
        std::fs::read(out_dir.join("Cargo.lock")).unwrap(),
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.lock")).unwrap()
    );
}

#[test]
fn nest_build_keeps_away_from_other_projects() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Cargo.toml"),
        "[package]\nname = \"mine\"\n",
    )
    .unwrap();
    let spec = examples().join("rot13.nest");
    let out = nest(&[
        "build",
        spec.to_str().unwrap(),
        "-o",
        dir.path().to_str().unwrap(),
        "--no-compile",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("was not generated by `fastpath nest build`"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("Cargo.toml")).unwrap(),
        "[package]\nname = \"mine\"\n"
    );
}

#[test]
fn nest_build_names_a_missing_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let spec = examples().join("rot13.nest");
    let out = nest(&[
        "build",
        spec.to_str().unwrap(),
        "-o",
        dir.path().join("p").to_str().unwrap(),
        "--runtime",
        "/nonexistent/nest-runtime",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(
            "the runtime crate is not at /nonexistent/nest-runtime (give --runtime PATH)"
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn nest_build_refuses_a_spec_with_errors() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("bad.nest");
    std::fs::write(&spec, "%state START\n%%\n").unwrap();
    let out_dir = dir.path().join("out");
    let out = nest(&[
        "build",
        spec.to_str().unwrap(),
        "-o",
        out_dir.to_str().unwrap(),
        "--no-compile",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(":1:8: `START` is predefined"),
        "{}",
        stderr(&out)
    );
    assert!(!out_dir.exists());
}
