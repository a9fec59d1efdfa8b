//! fastpath nest: the compiler from NEST specifications (docs/nest.md) to Rust projects that
//! build into one server on fastpath's NEST runtime.
//!
//! Where it sits among fastpath's crates, and what it must not do: docs/architecture.md.
//!
//! `compile` parses and checks a specification and returns it with every diagnostic;
//! `codegen::generate` writes the project.
//!
//! ```
//! let spec = "%state GREETED\nNL \\r?\\n\n%%\nSTART: {\n    $reply(\"hello\\n\");\n}\nGREETD: \"bye\" NL {\n    $close();\n}\n%%\n";
//! let compiled = fastpath_nest::compile("greet.nest", spec);
//! assert!(compiled.has_errors());
//! // Every diagnostic names the spec's line and column, as a compiler's do.
//! let first = compiled.diags.iter().find(|d| !d.warning).unwrap();
//! assert!(first.render("greet.nest").starts_with("greet.nest:7:1: undeclared state `GREETD`"), "{}", first.render("greet.nest"));
//! ```

pub mod action;
pub mod ast;
pub mod check;
pub mod cli;
pub mod codegen;
pub mod fuzzing;
pub mod parse;
pub mod pattern;
pub mod rusttok;

pub use ast::{Diag, Pos, Spec};

/// The result of reading a specification: what was understood and what is wrong with it.
pub struct Compiled {
    pub spec: Spec,
    /// Errors and warnings in order of position.
    pub diags: Vec<Diag>,
}

impl Compiled {
    pub fn has_errors(&self) -> bool {
        self.diags.iter().any(|d| !d.warning)
    }
}

/// Parses and checks `src`, the text of the specification named `file` in messages.
pub fn compile(file: &str, src: &str) -> Compiled {
    let mut p = parse::Parser::new(file, src);
    p.parse();
    let mut diags = p.diags;
    check::check(&p.spec, &mut diags);
    diags.sort_by_key(|d| (d.pos, d.warning));
    diags.dedup();
    Compiled {
        spec: p.spec,
        diags,
    }
}
