//! Replays the cargo-fuzz seed corpus of `thrift_message` through the same
//! checks the fuzz target runs, so every stable `cargo test` guards past
//! findings. Seeds named `seed-ok-<transport>-*` must decode to a message
//! and `seed-bad-<transport>-*` must be refused, with that transport.

use std::fs;
use std::path::PathBuf;

use fastpath_thrift::{Decoded, Decoder, Limits, Transport};

#[test]
fn thrift_message_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/thrift_message");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    files.sort();
    assert!(files.len() >= 30, "only {} thrift seeds", files.len());
    let (mut ok, mut bad) = (0, 0);
    for path in files {
        let data = fs::read(&path).expect("corpus file");
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        println!("{name}");
        fastpath_thrift::fuzzing::message(&data);
        let transport = |rest: &str| {
            if rest.starts_with("framed-") {
                Transport::Framed
            } else if rest.starts_with("unframed-") {
                Transport::Unframed
            } else {
                panic!("{name}: say framed- or unframed- after seed-ok- or seed-bad-")
            }
        };
        if let Some(rest) = name.strip_prefix("seed-ok-") {
            let result = Decoder::new(transport(rest), Limits::default()).decode(&data);
            assert!(
                matches!(result, Ok(Decoded::Message(_))),
                "{name}: {result:?}"
            );
            ok += 1;
        } else if let Some(rest) = name.strip_prefix("seed-bad-") {
            let result = Decoder::new(transport(rest), Limits::default()).decode(&data);
            match result {
                Err(e) => println!("  refused: {e}"),
                other => panic!("{name} accepted: {other:?}"),
            }
            bad += 1;
        }
    }
    assert!(ok >= 10 && bad >= 15, "{ok} good and {bad} bad seeds");
}
