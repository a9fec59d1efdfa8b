//! `fastpath nest check SPEC` and `fastpath nest build SPEC [-o DIR] [--runtime PATH]
//! [--no-compile]`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::{Args, Subcommand};

use crate::codegen;

/// `fastpath nest`.
#[derive(Args, Debug)]
pub struct NestArgs {
    #[command(subcommand)]
    command: NestCommand,
}

#[derive(Subcommand, Debug)]
enum NestCommand {
    /// Check a specification: every error as SPEC:LINE:COLUMN on stderr; exit 1 if any.
    Check {
        /// The specification (.nest).
        spec: PathBuf,
    },
    /// Check a specification, generate its cargo project and build the server with cargo.
    Build {
        /// The specification (.nest).
        spec: PathBuf,
        /// Directory of the generated project. Default: the spec's name without `.nest`,
        /// beside it (`examples/nest/rot13.nest` gives `examples/nest/rot13/`).
        #[arg(long, short)]
        out: Option<PathBuf>,
        /// The fastpath-nest-runtime crate the project depends on. Default: the one in the
        /// fastpath source tree this compiler was built from.
        #[arg(long)]
        runtime: Option<PathBuf>,
        /// Only write the project; do not run `cargo build --release` in it.
        #[arg(long)]
        no_compile: bool,
    },
}

/// Runs `fastpath nest ...`.
pub fn main(args: NestArgs) -> ExitCode {
    match args.command {
        NestCommand::Check { spec } => match load(&spec) {
            Some(_) => ExitCode::SUCCESS,
            None => ExitCode::FAILURE,
        },
        NestCommand::Build {
            spec,
            out,
            runtime,
            no_compile,
        } => build(&spec, out, runtime, no_compile),
    }
}

/// Reads and checks `path`, printing every diagnostic; `None` if there are errors.
fn load(path: &Path) -> Option<crate::Spec> {
    let name = path.display().to_string();
    let src = match std::fs::read_to_string(path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fastpath nest: cannot read {name}: {e}");
            return None;
        }
    };
    let c = crate::compile(&name, &src);
    for d in &c.diags {
        eprintln!("{}", d.render(&name));
    }
    let errors = c.diags.iter().filter(|d| !d.warning).count();
    if errors > 0 {
        eprintln!(
            "fastpath nest: {name}: {errors} error{}",
            if errors == 1 { "" } else { "s" }
        );
        return None;
    }
    Some(c.spec)
}

fn absolute(p: &Path) -> PathBuf {
    if let Ok(c) = p.canonicalize() {
        return c;
    }
    // Not there (yet): make it absolute without resolving.
    let p = std::env::current_dir()
        .map(|d| d.join(p))
        .unwrap_or_else(|_| p.to_path_buf());
    match (
        p.parent().and_then(|d| d.canonicalize().ok()),
        p.file_name(),
    ) {
        (Some(d), Some(f)) => d.join(f),
        _ => p,
    }
}

fn build(
    spec_path: &Path,
    out: Option<PathBuf>,
    runtime: Option<PathBuf>,
    no_compile: bool,
) -> ExitCode {
    let Some(spec) = load(spec_path) else {
        return ExitCode::FAILURE;
    };
    let stem = spec_path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "server".into());
    let dir = out.unwrap_or_else(|| spec_path.with_file_name(&stem));
    let runtime = absolute(&runtime.unwrap_or_else(codegen::default_runtime));
    let project = codegen::generate(&spec, &stem, &runtime);
    if let Err(e) = project.write(&dir) {
        eprintln!(
            "fastpath nest: cannot write the project in {}: {e}",
            dir.display()
        );
        return ExitCode::FAILURE;
    }
    // The workspace's lock file: the project then builds with the versions fastpath was
    // tested with, and cargo needs no registry for what is already downloaded (the project's
    // only dependency is the runtime, so every entry it needs is there).
    let workspace_lock = runtime.join("../../Cargo.lock");
    if workspace_lock.is_file() {
        let copied = std::fs::read(&workspace_lock)
            .and_then(|lock| codegen::write_if_changed(&dir.join("Cargo.lock"), &lock));
        if let Err(e) = copied {
            eprintln!(
                "fastpath nest: cannot copy {} into {}: {e}",
                workspace_lock.display(),
                dir.display()
            );
            return ExitCode::FAILURE;
        }
    }
    println!("generated {}", dir.join("src/main.rs").display());
    if no_compile {
        return ExitCode::SUCCESS;
    }
    if !runtime.join("Cargo.toml").is_file() {
        eprintln!(
            "fastpath nest: the runtime crate is not at {} (give --runtime PATH)",
            runtime.display()
        );
        return ExitCode::FAILURE;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // CARGO_TARGET_DIR, when set, is shared by every project built with it (each would
    // otherwise compile the runtime and its dependencies again); else DIR/target.
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) if !t.is_empty() => absolute(Path::new(&t)),
        _ => dir.join("target"),
    };
    let result = Command::new(&cargo)
        .arg("build")
        .arg("--release")
        .arg("--manifest-path")
        .arg(dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .output();
    let output = match result {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "fastpath nest: cannot run {}: {e}",
                Path::new(&cargo).display()
            );
            return ExitCode::FAILURE;
        }
    };
    let name = spec_path.display().to_string();
    eprint!(
        "{}",
        project.map_messages(&name, &String::from_utf8_lossy(&output.stderr))
    );
    print!(
        "{}",
        project.map_messages(&name, &String::from_utf8_lossy(&output.stdout))
    );
    if !output.status.success() {
        eprintln!("fastpath nest: cargo build failed for {name}");
        return ExitCode::FAILURE;
    }
    println!(
        "built {}",
        target.join("release").join(&project.package).display()
    );
    ExitCode::SUCCESS
}
