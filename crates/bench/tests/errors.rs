//! Every error class, against a server that produces it on every request, so the counts
//! are exact.

use std::time::{Duration, Instant};

use fastpath_bench::{ErrorClass, Report};

use crate::util::{config, run_checked, Behaviour, Server};

/// The error counts of a report, as (class name, count) for the nonzero ones.
fn nonzero_errors(r: &Report) -> Vec<(&'static str, u64)> {
    let e = &r.errors;
    [
        ("refused", e.refused),
        ("reset", e.reset),
        ("timeout", e.timeout),
        ("fd_unavail", e.fd_unavail),
        ("addr_unavail", e.addr_unavail),
        ("short_body", e.short_body),
        ("bad_response", e.bad_response),
        ("verify", e.verify),
        ("tls", e.tls),
        ("other", e.other),
    ]
    .into_iter()
    .filter(|(_, n)| *n > 0)
    .collect()
}

/// Runs `n` requests on `c` connections against `behaviour` and returns the report.
fn against(behaviour: Behaviour, connections: usize, n: u64) -> Report {
    let server = Server::start(behaviour);
    run_checked(&config(&server.url("/"), connections, n))
}

#[test]
fn refused() {
    let addr = Server::closed_port();
    let r = run_checked(&config(&format!("http://{addr}/"), 2, 10));
    assert_eq!(nonzero_errors(&r), [("refused", 10)]);
    assert_eq!((r.requests, r.replies, r.errors.total), (10, 0, 10));
    assert_eq!((r.conns_opened, r.conns_established), (10, 0));
    assert_eq!(r.status.s2xx, 0);
}

#[test]
fn reset() {
    let r = against(Behaviour::Reset, 1, 5);
    assert_eq!(nonzero_errors(&r), [("reset", 5)]);
    assert_eq!((r.requests, r.replies), (5, 0));
}

#[test]
fn stall_times_out() {
    let server = Server::start(Behaviour::Stall);
    let mut c = config(&server.url("/"), 2, 2);
    c.timeout = Duration::from_millis(200);
    let started = Instant::now();
    let r = run_checked(&c);
    let took = started.elapsed();
    assert_eq!(nonzero_errors(&r), [("timeout", 2)]);
    assert_eq!((r.requests, r.replies, r.conns_established), (2, 0, 2));
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(2),
        "{took:?}"
    );
}

#[test]
fn connect_timeout_counts_as_timeout() {
    // A listener whose backlog is full never completes new handshakes.
    let listener =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    listener
        .bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    listener.listen(0).unwrap();
    let addr = listener.local_addr().unwrap().as_socket().unwrap();
    // Fill the backlog (its size is backlog + 1) with connections nobody accepts.
    let fillers: Vec<_> = (0..4)
        .filter_map(|_| {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)).ok()
        })
        .collect();
    assert!(!fillers.is_empty());
    let mut c = config(&format!("http://{addr}/"), 1, 2);
    c.timeout = Duration::from_millis(150);
    let r = run_checked(&c);
    assert_eq!(nonzero_errors(&r), [("timeout", 2)]);
    assert_eq!(r.conns_established, 0);
}

#[test]
fn short_body() {
    let r = against(Behaviour::Short, 1, 3);
    assert_eq!(nonzero_errors(&r), [("short_body", 3)]);
    assert_eq!(r.replies, 0);
}

#[test]
fn reply_longer_than_its_length() {
    let r = against(Behaviour::LongerThanSaid, 1, 3);
    assert_eq!(nonzero_errors(&r), [("bad_response", 3)]);
    // The replies were complete and are counted by status, but not as good replies.
    assert_eq!((r.replies, r.status.s2xx), (0, 3));
}

#[test]
fn garbage() {
    let r = against(Behaviour::Garbage, 2, 4);
    assert_eq!(nonzero_errors(&r), [("bad_response", 4)]);
    assert_eq!(r.status.s2xx, 0);
}

#[test]
fn bad_content_length() {
    let r = against(Behaviour::BadLength, 1, 3);
    assert_eq!(nonzero_errors(&r), [("bad_response", 3)]);
}

#[test]
fn error_statuses_are_replies() {
    let server = Server::start(Behaviour::Status);
    let r = run_checked(&config(&server.url("/status/404"), 2, 6));
    assert_eq!((r.replies, r.status.s4xx, r.errors.total), (6, 6, 0));
    let r = run_checked(&config(&server.url("/status/500"), 2, 6));
    assert_eq!((r.replies, r.status.s5xx, r.errors.total), (6, 6, 0));
    let r = run_checked(&config(&server.url("/status/302"), 1, 2));
    assert_eq!((r.replies, r.status.s3xx), (2, 2));
}

#[test]
fn verify_checks_length_and_checksum() {
    let server = Server::start(Behaviour::Ok(b"0123456789".to_vec()));
    let mut c = config(&server.url("/"), 1, 4);
    c.verify = true;
    c.target.requests[0].expect.len = Some(10);
    let r = run_checked(&c);
    assert_eq!((r.replies, r.errors.total), (4, 0));
    c.target.requests[0].expect.len = Some(11);
    let r = run_checked(&c);
    assert_eq!(nonzero_errors(&r), [("verify", 4)]);
    c.target.requests[0].expect.len = None;
    c.target.requests[0].expect.crc32 = Some(0x1234_5678);
    let r = run_checked(&c);
    assert_eq!(nonzero_errors(&r), [("verify", 4)]);
    // Without --verify the expectation is not checked.
    c.verify = false;
    let r = run_checked(&c);
    assert_eq!((r.replies, r.errors.total), (4, 0));
}

#[test]
fn unreachable_network_is_other() {
    // Multicast cannot carry TCP: connect fails at once with ENETUNREACH.
    let r = run_checked(&config("http://224.0.0.1:80/", 1, 3));
    assert_eq!(nonzero_errors(&r), [("other", 3)]);
}

#[test]
fn errno_classes_follow_httperf() {
    assert_eq!(
        ErrorClass::from_errno(libc::ECONNREFUSED),
        ErrorClass::Refused
    );
    assert_eq!(ErrorClass::from_errno(libc::ECONNRESET), ErrorClass::Reset);
    assert_eq!(ErrorClass::from_errno(libc::EPIPE), ErrorClass::Reset);
    assert_eq!(ErrorClass::from_errno(libc::EMFILE), ErrorClass::FdUnavail);
    assert_eq!(ErrorClass::from_errno(libc::ENFILE), ErrorClass::FdUnavail);
    assert_eq!(
        ErrorClass::from_errno(libc::EADDRNOTAVAIL),
        ErrorClass::AddrUnavail
    );
    assert_eq!(ErrorClass::from_errno(libc::ETIMEDOUT), ErrorClass::Timeout);
    assert_eq!(ErrorClass::from_errno(libc::ENETUNREACH), ErrorClass::Other);
}

/// Environment variable that makes `fd_unavail_child` do its work (in a child process,
/// because the descriptor limit is process-wide and would starve the other tests).
const FD_CHILD: &str = "FASTPATH_BENCH_FD_CHILD";

#[test]
fn fd_unavail() {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            "errors::fd_unavail_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(FD_CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn fd_unavail_child() {
    if std::env::var_os(FD_CHILD).is_none() {
        return;
    }
    // The lowest free descriptor; with the limit just above it, the worker's epoll takes it
    // and every socket() fails with EMFILE.
    let probe = std::fs::File::open("/dev/null").unwrap();
    let lowest = std::os::fd::AsRawFd::as_raw_fd(&probe) as u64;
    drop(probe);
    let limit = libc::rlimit {
        rlim_cur: lowest + 1,
        rlim_max: lowest + 1,
    };
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
    let r = run_checked(&config("http://127.0.0.1:9/", 2, 4));
    assert_eq!(nonzero_errors(&r), [("fd_unavail", 4)]);
    assert_eq!(r.conns_established, 0);
}
