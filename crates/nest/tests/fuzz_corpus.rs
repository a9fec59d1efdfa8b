//! Replays the cargo-fuzz seed corpus of `nest_spec` through the checks the fuzz target runs,
//! so every stable `cargo test` guards past findings. A seed named `seed-<example>.nest` is a
//! shipped example and must compile without errors; the others must give errors.

use std::fs;
use std::path::PathBuf;

#[test]
fn nest_spec_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/nest_spec");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    files.sort();
    assert!(files.len() >= 7, "only {} NEST seeds", files.len());
    let examples = ["rot13", "login", "smtp", "http10"];
    for path in files {
        let data = fs::read(&path).expect("corpus file");
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        fastpath_nest::fuzzing::spec(&data);
        let compiled = fastpath_nest::compile(name, &String::from_utf8_lossy(&data));
        let example = examples
            .iter()
            .any(|e| name == format!("seed-{e}.nest").as_str());
        assert_eq!(
            compiled.has_errors(),
            !example,
            "{name}: {:?}",
            compiled.diags
        );
    }
}
