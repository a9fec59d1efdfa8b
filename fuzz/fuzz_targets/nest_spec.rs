//! NEST specifications; the checks live in `fastpath_nest::fuzzing`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fastpath_nest::fuzzing::spec(data);
});
