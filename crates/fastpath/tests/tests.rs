//! End-to-end tests: each one starts the real `fastpath` binary on a
//! temporary site and talks to it over TCP (or runs `fastpath check`, or
//! curl). HTTP tests are written once with `httptest!` and run against every
//! concurrency model; see `macros.rs`.

#[macro_use]
mod macros;

mod util;

mod acme;
mod bad_input;
mod basic;
mod bench_streams;
mod bodies;
mod cache;
mod check;
mod conditional;
mod curl;
mod framework;
mod framework_bench;
mod h2;
mod handover;
mod handover_real;
mod haproxy;
mod kernel_bridge;
mod kernel_path;
mod limits;
mod logs;
mod metrics;
mod models;
mod modules;
mod nest_check;
mod nest_examples;
mod nest_http;
mod paths;
mod precompressed;
mod privileges;
mod proxy_protocol;
mod ranges;
mod reload;
mod service_check;
mod shared_cache;
mod shutdown;
mod sizes_bench;
mod systemd;
mod tls;
mod tls_attacks;
mod unix_sockets;
mod vhosts;
