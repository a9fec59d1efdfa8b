//! Replays the `module_inputs` fuzz target's seed corpus through the same checks, so every
//! stable `cargo test` guards past findings.

use std::fs;
use std::path::PathBuf;

#[test]
fn module_inputs_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/module_inputs");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    files.sort();
    assert!(files.len() >= 30, "only {} seeds", files.len());
    for path in files {
        println!("{}", path.display());
        fastpath_modules::fuzzing::inputs(&fs::read(&path).expect("seed"));
    }
}
