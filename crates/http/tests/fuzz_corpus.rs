//! Replays the cargo-fuzz seed corpus through the same checks the fuzz
//! targets run, so every stable `cargo test` guards past findings.

use std::fs;
use std::path::PathBuf;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<(PathBuf, Vec<u8>)> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("directory entry").path();
            let data = fs::read(&path).expect("corpus file");
            (path, data)
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} is empty", dir.display());
    files
}

#[test]
fn http_request_corpus() {
    let files = corpus("http_request");
    assert!(files.len() >= 30, "only {} request seeds", files.len());
    for (path, data) in files {
        println!("{}", path.display());
        fastpath_http::fuzzing::request(&data);
    }
}

#[test]
fn chunked_corpus() {
    let files = corpus("chunked");
    assert!(files.len() >= 30, "only {} chunked seeds", files.len());
    for (path, data) in files {
        println!("{}", path.display());
        fastpath_http::fuzzing::chunked(&data);
        // A seed named seed-bad-* is a body that must be refused: the check
        // above only says the decoder agrees with the reference.
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("seed-bad-") {
            let result = fastpath_http::ChunkedDecoder::new().feed(&data, |_| {});
            assert!(result.is_err(), "{name} accepted: {result:?}");
            println!("  {}", result.unwrap_err());
        }
    }
}

#[test]
fn http_response_corpus() {
    let files = corpus("http_response");
    assert!(files.len() >= 15, "only {} response seeds", files.len());
    for (path, data) in files {
        println!("{}", path.display());
        fastpath_http::fuzzing::response(&data);
    }
}

#[test]
fn hpack_decode_corpus() {
    use fastpath_http::fuzzing::{HPACK_LIMITS, HPACK_TABLE_SIZE};
    use fastpath_http::h2::Decoder;

    let files = corpus("hpack_decode");
    assert!(files.len() >= 20, "only {} HPACK seeds", files.len());
    for (path, data) in files {
        println!("{}", path.display());
        fastpath_http::fuzzing::hpack_decode(&data);
        // A seed named seed-bad-* is a block that must be refused; every
        // other seed must decode.
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let result = Decoder::new(HPACK_TABLE_SIZE).decode(&data, &HPACK_LIMITS, |_, _, _| {});
        assert_eq!(
            result.is_err(),
            name.starts_with("seed-bad-"),
            "{name}: {result:?}"
        );
    }
}

#[test]
fn h2_frames_corpus() {
    let files = corpus("h2_frames");
    assert!(files.len() >= 40, "only {} HTTP/2 frame seeds", files.len());
    for (path, data) in files {
        println!("{}", path.display());
        fastpath_http::fuzzing::h2_frames(&data);
        // A seed named seed-bad-* is a stream that must be refused; every
        // other seed must read to its last byte, every field block closed.
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let result = fastpath_http::fuzzing::h2_read(&data);
        if name.starts_with("seed-bad-") {
            assert!(result.is_err(), "{name} accepted: {result:?}");
            println!("  {}", result.unwrap_err());
        } else {
            assert!(
                matches!(result, Ok((frames, true)) if frames > 0),
                "{name}: {result:?}"
            );
        }
    }
}

#[test]
fn h2_connection_corpus() {
    let files = corpus("h2_connection");
    assert!(
        files.len() >= 30,
        "only {} HTTP/2 connection seeds",
        files.len()
    );
    for (path, data) in files {
        println!("{}", path.display());
        fastpath_http::fuzzing::h2_connection(&data);
        // A seed named seed-bad-* ends in a connection error; every other
        // seed is read to its end without one.
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let (requests, error) = fastpath_http::fuzzing::h2_serve(&data);
        println!("  {requests} requests, error {error:?}");
        assert_eq!(
            error.is_some(),
            name.starts_with("seed-bad-"),
            "{name}: {error:?}"
        );
    }
}
