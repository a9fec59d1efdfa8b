//! Free ports on 127.0.0.1, for servers a test starts that must be told where to listen.

use std::net::TcpListener;

/// A port that was free a moment ago: bound to port 0, noted, released. Another process
/// may take it before the test's server does; the kernel hands out ephemeral ports in turn,
/// so that is rare.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("bind a free port on 127.0.0.1")
        .port()
}

/// The first of `len` consecutive free ports, for a program that listens on a base port and
/// the ones after it: below the kernel's ephemeral range (from 32768 on Linux), where the
/// other tests' servers (port 0) and clients never land, starting at a place of this
/// process's own so that test runs side by side seldom try the same ones.
pub fn free_port_run(len: u16) -> u16 {
    const LOW: u32 = 20_000;
    const SPAN: u32 = 8_000;
    let len = u32::from(len.max(1));
    let runs = SPAN / len;
    let first = std::process::id() % runs;
    (0..runs)
        .map(|i| LOW + (first + i) % runs * len)
        .find(|&base| {
            (base..base + len).all(|port| TcpListener::bind(("127.0.0.1", port as u16)).is_ok())
        })
        .map(|base| base as u16)
        .unwrap_or_else(|| {
            panic!(
                "no run of {len} free ports between {LOW} and {}",
                LOW + SPAN
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_free_ports_can_all_be_bound() {
        let base = free_port_run(4);
        let held: Vec<TcpListener> = (base..base + 4)
            .map(|port| TcpListener::bind(("127.0.0.1", port)).expect("free"))
            .collect();
        assert_eq!(held.len(), 4);
        assert!(TcpListener::bind(("127.0.0.1", free_port())).is_ok());
    }
}
