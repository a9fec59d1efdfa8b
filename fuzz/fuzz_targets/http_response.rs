//! Backend response heads, the heads relayed to clients and the requests
//! forwarded to backends; the checks live in `fastpath_http::fuzzing` so
//! stable CI can replay the corpus too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fastpath_http::fuzzing::response(data);
});
