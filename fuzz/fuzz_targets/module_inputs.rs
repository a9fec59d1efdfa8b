//! What the modules read from requests and configurations (Authorization, addresses,
//! rewrite rules, htpasswd files, media types, Expires, Accept-Encoding) and the
//! compressors' round trips: never a panic, and the promises of
//! `fastpath_modules::fuzzing`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fastpath_modules::fuzzing::inputs(data);
});
