//! HPACK header blocks: decoded under small limits, and what decodes is
//! encoded again and must decode the same; the checks live in
//! `fastpath_http::fuzzing` so stable CI can replay the corpus too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fastpath_http::fuzzing::hpack_decode(data);
});
