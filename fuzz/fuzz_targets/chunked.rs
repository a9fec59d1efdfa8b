//! Chunked body decoding; the checks live in `fastpath_http::fuzzing`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fastpath_http::fuzzing::chunked(data);
});
