//! Request heads and everything that reads request data; the checks live in
//! `fastpath_http::fuzzing` so stable CI can replay the corpus too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fastpath_http::fuzzing::request(data);
});
