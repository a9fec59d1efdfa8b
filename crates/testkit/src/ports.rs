//! Free ports on 127.0.0.1, for servers a test starts that must be told where to listen.
//!
//! A port is chosen, checked free, and released for the server to bind, so something else
//! could take it in between. To make that near impossible the ports come from below the
//! kernel's ephemeral range (from 32768 on Linux), where servers bound to port 0 and every
//! client's own end land, and each one is handed out once per process: two tests running side
//! by side never get the same one. (Ports from port 0 did collide: a client's connection took
//! one between the check and a `systemd-socket-activate --listen` on it.)

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

const LOW: u32 = 20_000;
const SPAN: u32 = 8_000;

/// Where this process looks next, as an offset from `LOW`; starts at a place of the
/// process's own so that test programs running side by side seldom try the same ports.
static CURSOR: AtomicU32 = AtomicU32::new(u32::MAX);

/// Takes the next `len` ports' offset from the cursor (set from the pid on first use).
fn take_offsets(len: u32) -> u32 {
    let _ = CURSOR.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(97) % SPAN,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    CURSOR.fetch_add(len, Ordering::Relaxed)
}

/// A port that was free a moment ago and that no other caller in this process gets.
pub fn free_port() -> u16 {
    free_port_run(1)
}

/// The first of `len` consecutive free ports, for a program that listens on a base port and
/// the ones after it.
pub fn free_port_run(len: u16) -> u16 {
    let len = u32::from(len.max(1));
    for _ in 0..SPAN / len {
        let base = LOW + take_offsets(len) % (SPAN - len + 1);
        if (base..base + len).all(|port| TcpListener::bind(("127.0.0.1", port as u16)).is_ok()) {
            return base as u16;
        }
    }
    panic!(
        "no run of {len} free ports between {LOW} and {}",
        LOW + SPAN
    )
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

    #[test]
    fn ports_are_below_the_ephemeral_range_and_not_handed_out_twice() {
        let ports: Vec<u16> = (0..200).map(|_| free_port()).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "{ports:?}");
        assert!(ports.iter().all(|&port| (20_000..28_000).contains(&port)));
    }
}
