//! The server side of an HTTP/2 connection: any bytes after the preface
//! read under small settings whole, cut in two and a byte at a time with the
//! same events and output, then with a glue that answers, consumes and
//! resets; stream states, windows and the output checked throughout. The
//! checks live in `fastpath_http::fuzzing` so stable CI can replay the
//! corpus too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fastpath_http::fuzzing::h2_connection(data);
});
