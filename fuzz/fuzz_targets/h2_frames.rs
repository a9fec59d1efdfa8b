//! HTTP/2 frames: a stream read under a small frame size and field block
//! budget whole, cut in two and a byte at a time, frames written back and
//! read the same, field blocks split again and joined the same, windows
//! against a model; the checks live in `fastpath_http::fuzzing` so stable
//! CI can replay the corpus too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fastpath_http::fuzzing::h2_frames(data);
});
