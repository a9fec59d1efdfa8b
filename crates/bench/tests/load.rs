//! The three load shapes against a server that answers well: counts, timings, connections.

use std::time::{Duration, Instant};

use fastpath_bench::{run, Load, Target, Url};

use crate::util::{config, run_checked, Behaviour, Server};

/// Head of the replies of `Behaviour::Ok` without `Connection: close`.
fn ok_head_len(body: usize) -> u64 {
    format!("HTTP/1.1 200 X\r\nContent-Length: {body}\r\n\r\n").len() as u64
}

#[test]
fn closed_loop_counts_are_exact() {
    let server = Server::start(Behaviour::Ok(vec![b'a'; 1000]));
    let r = run_checked(&config(&server.url("/x"), 4, 200));
    assert_eq!(r.meta.mode, "closed");
    assert_eq!(r.requests, 200);
    assert_eq!(r.replies, 200);
    assert_eq!(r.status.s2xx, 200);
    assert_eq!(r.errors.total, 0);
    assert_eq!(r.body_bytes, 200 * 1000);
    assert_eq!(r.bytes, 200 * (1000 + ok_head_len(1000)));
    assert_eq!((r.conns_opened, r.conns_established), (4, 4));
    assert_eq!(r.max_open, 4);
    assert_eq!(server.accepted(), 4);
    assert_eq!(server.requests(), 200);
    assert_eq!(r.in_flight_at_end, 0);
    assert_eq!(r.missed, 0);
    // Loopback: everything well under the timeout, and the parts fit inside the total.
    assert!(r.latency_us.max < 1_000_000.0, "{:?}", r.latency_us);
    assert!(r.connect_us.p50 > 0.0 && r.first_byte_us.p50 > 0.0);
    assert!(r.first_byte_us.min <= r.latency_us.max);
    assert!(r.duration_s > 0.0 && r.duration_s < 10.0);
    assert!((r.rps - r.replies as f64 / r.duration_s).abs() < 1e-6);
    assert!((r.request_rate - r.requests as f64 / r.duration_s).abs() < 1e-6);
    assert!((r.bytes_per_s - r.bytes as f64 / r.duration_s).abs() < 1e-3);
    assert!((r.conn_rate - 4.0 / r.duration_s).abs() < 1e-6);
    assert!(r.cpu_s > 0.0);
}

#[test]
fn no_keepalive_opens_a_connection_per_request() {
    let server = Server::start(Behaviour::Ok(b"hello".to_vec()));
    let mut c = config(&server.url("/"), 2, 20);
    c.keepalive = false;
    let r = run_checked(&c);
    assert_eq!((r.requests, r.replies, r.errors.total), (20, 20, 0));
    assert_eq!((r.conns_opened, r.conns_established), (20, 20));
    assert_eq!(r.connect_us.count, 20);
    assert_eq!(server.accepted(), 20);
    assert_eq!(
        server
            .close_requests
            .load(std::sync::atomic::Ordering::SeqCst),
        20
    );
    assert!(!r.meta.keepalive);
}

#[test]
fn pipelining_keeps_requests_outstanding() {
    let server = Server::start(Behaviour::Ok(b"pipelined".to_vec()));
    let mut c = config(&server.url("/"), 2, 400);
    c.pipeline = 8;
    let r = run_checked(&c);
    assert_eq!((r.requests, r.replies, r.errors.total), (400, 400, 0));
    assert_eq!(r.meta.pipeline, 8);
    assert_eq!(server.accepted(), 2);
    // The first write carries all eight requests of a connection.
    assert!(server.max_batch.load(std::sync::atomic::Ordering::SeqCst) > 1);
}

#[test]
fn several_urls_are_requested_in_turn() {
    let server = Server::start(Behaviour::Status);
    let urls: Vec<Url> = ["/a", "/status/404", "/status/500"]
        .iter()
        .map(|p| Url::parse(&server.url(p)).unwrap())
        .collect();
    let mut c = config(&server.url("/"), 1, 9);
    c.target = Target::from_urls("three", &urls).unwrap();
    let r = run_checked(&c);
    // Non-2xx answers are replies too (as in httperf), counted by status class.
    assert_eq!((r.requests, r.replies, r.errors.total), (9, 9, 0));
    assert_eq!(
        (
            r.status.s1xx,
            r.status.s2xx,
            r.status.s3xx,
            r.status.s4xx,
            r.status.s5xx
        ),
        (0, 3, 0, 3, 3)
    );
}

#[test]
fn interim_responses_are_counted_but_are_not_replies() {
    let server = Server::start(Behaviour::Interim);
    let r = run_checked(&config(&server.url("/"), 1, 5));
    assert_eq!((r.requests, r.replies, r.errors.total), (5, 5, 0));
    assert_eq!((r.status.s1xx, r.status.s2xx), (5, 5));
    assert_eq!(r.body_bytes, 5 * 5);
}

#[test]
fn chunked_and_until_close_bodies_are_unframed() {
    let body: Vec<u8> = (0..5000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let server = Server::start(Behaviour::Chunked(body.clone()));
    let mut c = config(&server.url("/"), 2, 50);
    c.target.requests[0].expect.len = Some(5000);
    c.target.requests[0].expect.crc32 = Some(crc32(&body));
    c.verify = true;
    let r = run_checked(&c);
    assert_eq!(
        (r.replies, r.errors.total, r.body_bytes),
        (50, 0, 50 * 5000)
    );

    let server = Server::start(Behaviour::UntilClose(body.clone()));
    let r = run_checked(&config(&server.url("/"), 2, 10));
    assert_eq!(
        (r.replies, r.errors.total, r.body_bytes),
        (10, 0, 10 * 5000)
    );
    // The server closes after each reply, so each request needed a connection.
    assert_eq!(r.conns_opened, 10);
}

fn crc32(data: &[u8]) -> u32 {
    // Bitwise CRC-32 (IEEE), independent of the crate under test.
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn threads_split_the_load() {
    let server = Server::start(Behaviour::Ok(b"x".to_vec()));
    let mut c = config(&server.url("/"), 4, 301);
    c.threads = 2;
    let r = run_checked(&c);
    assert_eq!(r.meta.threads, 2);
    assert_eq!((r.requests, r.replies), (301, 301));
    assert_eq!(server.accepted(), 4);
}

#[test]
fn warmup_is_not_counted() {
    let server = Server::start(Behaviour::Ok(b"x".to_vec()));
    let mut c = config(&server.url("/"), 1, 10);
    c.warmup = Duration::from_millis(200);
    let r = run_checked(&c);
    assert_eq!((r.requests, r.replies), (10, 10));
    assert!(
        server.requests() > 10,
        "warm-up requests reached the server"
    );
    // The connection was opened during the warm-up, so no connection is counted.
    assert_eq!(r.conns_opened, 0);
}

#[test]
fn duration_bounds_a_closed_loop_run() {
    let server = Server::start(Behaviour::Ok(b"x".to_vec()));
    let mut c = config(&server.url("/"), 2, 1);
    c.requests = None;
    c.duration = Some(Duration::from_millis(300));
    let started = Instant::now();
    let r = run_checked(&c);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!((r.duration_s - 0.3).abs() < 0.01, "{}", r.duration_s);
    assert!(r.replies > 10);
}

#[test]
fn request_rate_follows_the_schedule() {
    let server = Server::start(Behaviour::Ok(b"x".to_vec()));
    let mut c = config(&server.url("/"), 4, 1);
    c.requests = None;
    c.load = Load::Rate(400.0);
    c.duration = Some(Duration::from_secs(1));
    let r = run_checked(&c);
    assert_eq!(r.meta.mode, "rate");
    assert_eq!(r.meta.offered_rate, Some(400.0));
    // 400/s for 1 s: 400 due. Each was sent, or found all four connections busy (only
    // if this machine starves the test server) and was missed.
    assert_eq!(r.requests + r.missed, 400, "{r:#?}");
    assert!(r.requests >= 300, "{}", r.requests);
    assert!(r.replies + r.in_flight_at_end == r.requests);
    // Every request's send time against its schedule; on an idle loopback, on time.
    assert_eq!(r.send_lag_us.count, r.requests);
    assert!(r.send_lag_us.p50 < 5_000.0, "{:?}", r.send_lag_us);
    assert!(r.conns_opened <= 4);
}

#[test]
fn request_rate_counts_what_a_stalled_server_delays() {
    // One connection, a server that never answers: the first request waits forever, every
    // later one is due but has no connection: open loop shows them as missed, where a
    // closed loop would just have sent nothing.
    let server = Server::start(Behaviour::Stall);
    let mut c = config(&server.url("/"), 1, 1);
    c.requests = None;
    c.load = Load::Rate(100.0);
    c.duration = Some(Duration::from_millis(500));
    let r = run_checked(&c);
    assert_eq!((r.requests, r.in_flight_at_end, r.replies), (1, 1, 0));
    assert!((48..=50).contains(&r.missed), "{}", r.missed);
}

#[test]
fn request_rate_with_n_stops_after_n() {
    let server = Server::start(Behaviour::Ok(b"x".to_vec()));
    let mut c = config(&server.url("/"), 2, 50);
    c.load = Load::Rate(1000.0);
    let r = run_checked(&c);
    assert_eq!((r.requests, r.replies, r.missed), (50, 50, 0));
    // 50 requests at 1000/s take about 50 ms.
    assert!(
        r.duration_s > 0.045 && r.duration_s < 0.5,
        "{}",
        r.duration_s
    );
}

#[test]
fn connection_rate_opens_r_times_d_connections() {
    let server = Server::start(Behaviour::Ok(b"x".to_vec()));
    let mut c = config(&server.url("/"), 1, 1);
    c.requests = None;
    c.load = Load::ConnRate {
        rate: 200.0,
        calls: 2,
    };
    c.duration = Some(Duration::from_secs(1));
    let r = run_checked(&c);
    assert_eq!(r.meta.mode, "conn-rate");
    assert!((199..=201).contains(&r.conns_opened), "{}", r.conns_opened);
    assert_eq!(r.missed, 0);
    assert_eq!(r.send_lag_us.count, r.conns_opened);
    // Two calls each; the last connections may still be busy at the end.
    assert!(r.requests >= 2 * r.conns_opened - 4 && r.requests <= 2 * r.conns_opened);
    assert_eq!(r.errors.total, 0);
    assert_eq!(server.accepted(), r.conns_opened);
    let conn_rate = r.conn_rate;
    assert!((conn_rate - 200.0).abs() < 5.0, "{conn_rate}");
}

#[test]
fn connection_rate_keeps_opening_when_the_server_stalls() {
    // Open loop: connections keep coming whatever the server does; the stalled ones time out.
    let server = Server::start(Behaviour::Stall);
    let mut c = config(&server.url("/"), 1, 1);
    c.requests = None;
    c.load = Load::ConnRate {
        rate: 100.0,
        calls: 1,
    };
    c.duration = Some(Duration::from_millis(600));
    c.timeout = Duration::from_millis(200);
    let r = run_checked(&c);
    assert!((59..=61).contains(&r.conns_opened), "{}", r.conns_opened);
    assert_eq!(r.requests, r.conns_opened);
    assert_eq!(r.replies, 0);
    // Those opened in the first 400 ms timed out; the rest were still waiting.
    assert!((34..=42).contains(&r.errors.timeout), "{:?}", r.errors);
    assert_eq!(r.errors.timeout + r.in_flight_at_end, r.requests);
    // About 20 waiting at any time (200 ms at 100/s), more if timeouts fire late.
    assert!(r.max_open >= 19 && r.max_open <= 30, "{}", r.max_open);
}

#[test]
fn connection_rate_with_n_counts_connections() {
    let server = Server::start(Behaviour::Ok(b"x".to_vec()));
    let mut c = config(&server.url("/"), 1, 20);
    c.load = Load::ConnRate {
        rate: 500.0,
        calls: 3,
    };
    let r = run(&c, None).unwrap();
    assert_eq!((r.conns_opened, r.requests, r.replies), (20, 60, 60));
    assert_eq!(server.accepted(), 20);
    assert_eq!(server.requests(), 60);
}

#[test]
fn connection_rate_beyond_the_client_stays_on_time() {
    // A listener that never accepts: once its small queue is full, connects hang until
    // they time out. Asked for far more connections a second than it can open, the client
    // falls behind: it must still enforce the timeout, end on time, and count what it
    // could not open as missed instead of opening it late in one burst.
    raise_fd_limit();
    let listener = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
    .unwrap();
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    listener.bind(&any.into()).unwrap();
    listener.listen(1).unwrap();
    let addr = listener.local_addr().unwrap().as_socket().unwrap();
    let mut c = config(&format!("http://{addr}/"), 1, 1);
    c.requests = None;
    c.load = Load::ConnRate {
        rate: 1_000_000.0,
        calls: 1,
    };
    let duration = Duration::from_millis(300);
    c.duration = Some(duration);
    c.timeout = Duration::from_millis(50);
    let started = Instant::now();
    let r = run_checked(&c);
    let elapsed = started.elapsed();
    let bound = duration + c.timeout + Duration::from_millis(500);
    assert!(elapsed < bound, "{elapsed:?}");
    assert!(r.duration_s < bound.as_secs_f64(), "{}", r.duration_s);
    // 1,000,000/s for 300 ms: each of the 300,000 scheduled connections was opened or missed.
    assert_eq!(r.conns_opened + r.missed, 300_000, "{r:#?}");
    assert!(r.missed > 0, "{r:#?}");
    assert_eq!(r.requests, r.conns_opened);
    // The server answers nothing: every request timed out, failed to get a descriptor, or
    // was still waiting at the end. No reply, and the timeout held.
    assert_eq!(r.replies, 0);
    assert!(r.errors.timeout > 0, "{:?}", r.errors);
    // Nothing went out later than the timeout (plus one pass): the stale backlog was missed.
    assert!(r.send_lag_us.max < 100_000.0, "{:?}", r.send_lag_us);
    assert_eq!(
        r.errors.timeout + r.errors.fd_unavail + r.errors.addr_unavail + r.in_flight_at_end,
        r.requests,
        "{r:#?}"
    );
    drop(listener);
}

/// Raises the soft descriptor limit to the hard one (best effort), as the command line
/// does: the overload test keeps about a timeout's worth of connections open, and the other
/// tests run alongside it in this process.
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: both calls only read or write the struct passed in.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
