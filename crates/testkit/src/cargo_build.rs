//! Building another package's targets from an integration test, with the cargo running it.

use std::path::PathBuf;
use std::process::Command;

/// Runs `cargo build --offline ARGS` in `manifest_dir` with the cargo that runs the tests
/// (`cargo`, from the test's `env!("CARGO")`), into the same target directory and profile as
/// the running test (`--release` added for a test built so); returns the profile directory
/// (`target/debug`, say), where the built binaries and `examples/` are. `cargo test` hands an
/// integration test only its own package's binaries: this builds the others it starts.
pub fn build_beside_test(cargo: &str, manifest_dir: &str, args: &[&str]) -> PathBuf {
    // target/debug/deps/TEST-hash -> target/debug (or target/release).
    let exe = std::env::current_exe().expect("the test's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("a test binary under target/PROFILE/deps")
        .to_path_buf();
    let target = profile_dir.parent().expect("a target directory");
    let mut all = vec!["build", "--offline"];
    all.extend_from_slice(args);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        all.push("--release");
    }
    let status = Command::new(cargo)
        .args(&all)
        .env("CARGO_TARGET_DIR", target)
        .current_dir(manifest_dir)
        .status()
        .expect("run cargo");
    assert!(status.success(), "cargo {} failed", all.join(" "));
    profile_dir
}
