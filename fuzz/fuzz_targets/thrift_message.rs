//! Thrift binary-protocol messages, framed and unframed; the checks live in
//! `fastpath_thrift::fuzzing`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fastpath_thrift::fuzzing::message(data);
});
