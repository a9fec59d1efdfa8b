//! The checks of the `nest_spec` fuzz target (fuzz/fuzz_targets/nest_spec.rs), here so that
//! `tests/fuzz_corpus.rs` replays the corpus on stable Rust: any text, however broken, is a
//! specification with messages, never a panic.

use crate::compile;

/// Compiles `data` (as text, invalid UTF-8 replaced) and checks what comes back: every
/// diagnostic within the text, and a spec without errors generates a project whose line map
/// points into the spec.
pub fn spec(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let lines = text.lines().count() as u32 + 1;
    let compiled = compile("fuzz.nest", &text);
    for d in &compiled.diags {
        assert!(
            (1..=lines).contains(&d.pos.line) && d.pos.col >= 1,
            "diagnostic outside the text: {d:?}"
        );
        let rendered = d.render("fuzz.nest");
        assert!(rendered.starts_with("fuzz.nest:"), "{rendered}");
    }
    if !compiled.has_errors() {
        let project = crate::codegen::generate(
            &compiled.spec,
            "fuzz",
            std::path::Path::new("/nonexistent/nest-runtime"),
        );
        assert_eq!(
            project.lines.len(),
            project.main_rs.lines().count(),
            "the line map covers main.rs"
        );
        for line in project.lines.iter().flatten() {
            assert!(*line >= 1 && *line <= lines, "maps to spec line {line}");
        }
    }
}
