//! Integration tests: the load generator against small servers on 127.0.0.1 that answer
//! well, refuse, reset, stall, cut bodies short or send garbage, against the real fastpath
//! over HTTPS, and the framework benchmark's peers against their protocols. One test
//! binary; the modules group the tests by what they check.

mod errors;
mod load;
mod output;
mod peers;
mod streams;
mod tls;
mod util;
