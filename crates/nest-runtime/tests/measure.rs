//! A measurement, not a check (ignored by default): connections per second and server CPU
//! per connection for the rot13 server on each model, a new connection per exchange (the
//! greeting, one line, QUIT, END's reply, the close).
//!
//! `cargo test --release -p fastpath-nest-runtime --test measure -- --ignored --nocapture`

mod common;

use std::time::{Duration, Instant};

use common::{read_to_close, read_until, send, Server, MODELS};

/// CPU time (user + system) of a process and its children that have been waited for.
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11..15]
        .iter()
        .map(|f| f.parse::<u64>().unwrap())
        .sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

#[test]
#[ignore]
fn connections_per_second() {
    let dir = tempfile::tempdir().unwrap();
    let clients = 4;
    let per_client = 5000;
    for model in MODELS {
        let server = Server::start(
            "rot13",
            dir.path(),
            &["--listen", "127.0.0.1:0", "--model", model],
        );
        let addr = server.addr;
        let pid = server.child.id();
        let cpu0 = cpu(pid);
        let started = Instant::now();
        std::thread::scope(|scope| {
            for _ in 0..clients {
                scope.spawn(move || {
                    for _ in 0..per_client {
                        let mut c = std::net::TcpStream::connect(addr).unwrap();
                        c.set_nodelay(true).unwrap();
                        read_until(&mut c, "\n");
                        send(&mut c, b"abc\n");
                        read_until(&mut c, "nop\n");
                        send(&mut c, b"QUIT\n");
                        assert_eq!(read_to_close(&mut c), "bye\nclosing\n");
                    }
                });
            }
        });
        let took = started.elapsed();
        let n = (clients * per_client) as f64;
        // Prefork's children are not waited for while serving: their CPU is not counted.
        let used = cpu(pid) - cpu0;
        println!(
            "{model:16} {:7.0} connections/s   server CPU {:5.1} us/connection{}",
            n / took.as_secs_f64(),
            used.as_secs_f64() * 1e6 / n,
            if model.starts_with("process") {
                " (parent only)"
            } else {
                ""
            }
        );
    }
}
