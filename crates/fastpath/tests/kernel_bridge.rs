//! The bridge hand-over in the kernel (`[handover] kernel_path = "on"`): client and backend
//! sockets joined in a BPF sockmap instead of spliced through pipes. The bridge tests of
//! handover.rs run again with it on every model, and the sockmap hazards each have a test:
//! a client that does not read, half-close both ways, a reset from either side, sockets
//! closing while in the map, thousands of bridged connections, the map full, `off` and
//! `auto`, the idle time, and nothing left behind after SIGTERM, SIGKILL or a child's crash.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::check::run;
use crate::handover::{
    bridge_carries_megabytes, bridge_hands_the_connection_over, config,
    hand_overs_leave_nothing_behind, site, upgrade_then_echo, uploads_to_a_slow_backend_with,
    Backend,
};
use crate::kernel_path::{
    bpf_allowed, bpf_objects, bpftool, raise_nofile, sockets_in_map, sockhash_id,
};
use crate::util::*;

/// The top of a configuration that turns the kernel path on.
const ON: &str = "[handover]\nkernel_path = \"on\"";

/// The route of every test: a bridge under /ws/.
const BRIDGE: &str = "prefix = \"/ws/\"\nmethod = \"bridge\"";

/// Waits until the server's sockmap holds `n` sockets, or fails saying how many it holds.
fn expect_sockets(srv: &Server, n: usize) {
    let Some(bpftool) = bpftool("kernel_bridge") else {
        return;
    };
    let id = sockhash_id(srv.pid());
    let held = wait_for(Duration::from_secs(10), || {
        (sockets_in_map(bpftool, id) == n).then_some(())
    });
    assert!(
        held.is_some(),
        "the kernel path holds {} sockets, expected {n}",
        sockets_in_map(bpftool, id)
    );
}

/// A server bridging /ws/ to `backend` with `handover` keys in its `[handover]` table (and
/// its site, which must live as long).
fn serve(model: &'static str, backend: &Backend, handover: &str) -> (Server, Site) {
    let text = config(backend, BRIDGE, &format!("[handover]\n{handover}"));
    let site = site();
    (site.serve_config(model, &text), site)
}

/// A bridged connection: the head sent, the backend's 101 read. (Tests that check the map
/// wait for the pair to be in it before they send more: bytes that reach the server before
/// the join, here right behind the 101 it passed on, make it splice instead, see
/// `Joint::offer`.)
fn bridged(srv: &Server) -> TcpStream {
    let mut stream = TcpStream::connect(srv.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(b"GET /ws/x HTTP/1.1\r\nHost: t\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
        .unwrap();
    let head = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n";
    let mut got = vec![0u8; head.len()];
    stream.read_exact(&mut got).unwrap();
    assert_eq!(&got[..], &head[..]);
    stream
}

/// Sends `data` through a bridged echo and reads it back.
fn round_trip(stream: &mut TcpStream, data: &[u8]) {
    stream.write_all(data).unwrap();
    let mut got = vec![0u8; data.len()];
    stream.read_exact(&mut got).unwrap();
    assert!(got == data, "the echo differs");
}

httptest!(the_bridge_tests_pass_in_the_kernel, |model| {
    if !bpf_allowed("kernel_bridge") {
        return;
    }
    let srv = bridge_hands_the_connection_over(model, ON);
    assert!(
        srv.wait_stderr(
            Duration::from_secs(1),
            "kernel path: on for bridged connections"
        ),
        "{}",
        srv.stderr()
    );
    bridge_carries_megabytes(model, ON);
    uploads_to_a_slow_backend_with(model, "prefix = \"/app/\"\nmethod = \"bridge\"", ON);
    hand_overs_leave_nothing_behind(model, "kernel_path = \"on\"");
});

httptest!(a_bridged_pair_sits_in_the_map_until_it_ends, |model| {
    if !bpf_allowed("kernel_bridge") {
        return;
    }
    let backend = Backend::start(upgrade_then_echo);
    let (srv, _site) = serve(model, &backend, "kernel_path = \"on\"");
    let mut conn = bridged(&srv);
    expect_sockets(&srv, 2);
    round_trip(&mut conn, b"hello");
    // The client's end reaches the backend, whose end comes back: the pair leaves the map.
    conn.shutdown(Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    conn.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    expect_sockets(&srv, 0);
});

/// The 101 a test backend answers a bridged request with.
const SWITCHED: &[u8] =
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n";

/// A backend run by `behaviour` on a thread per connection, each given the connection (its
/// request head read and its 101 sent) and `shared`.
fn custom_backend<T: Send + Sync + 'static>(
    shared: Arc<T>,
    behaviour: fn(TcpStream, &T),
) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let shared = shared.clone();
            thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                    if line == "\r\n" {
                        break;
                    }
                    line.clear();
                }
                if stream.write_all(SWITCHED).is_ok() {
                    behaviour(stream, &shared);
                }
            });
        }
    });
    addr
}

/// A server bridging /ws/ to `addr`, with `handover` keys in its `[handover]` table.
fn serve_to(model: &'static str, addr: SocketAddr, handover: &str) -> (Server, Site) {
    let backend = Backend {
        addr,
        log: Arc::default(),
    };
    serve(model, &backend, handover)
}

/// The byte at `i` of a backend's long answer.
fn byte(i: u64) -> u8 {
    (i % 251) as u8
}

/// Writes 64 MiB of [`byte`] as fast as the client takes them, counting what was written,
/// then closes.
fn flood(mut stream: TcpStream, written: &AtomicU64) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut at = 0u64;
    while at < 64 << 20 {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = byte(at + i as u64);
        }
        if stream.write_all(&buf).is_err() {
            return;
        }
        at += buf.len() as u64;
        written.store(at, Ordering::SeqCst);
    }
}

/// TCP memory in use, all sockets (pages, from /proc/net/sockstat).
fn tcp_memory_pages() -> u64 {
    let text = std::fs::read_to_string("/proc/net/sockstat").unwrap();
    let line = text.lines().find(|l| l.starts_with("TCP:")).unwrap();
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        if w == "mem" {
            return words.next().unwrap().parse().unwrap();
        }
    }
    panic!("no TCP mem in {text}");
}

httptest!(
    a_client_that_does_not_read_holds_the_backend_back_losing_nothing,
    |model| {
        if !bpf_allowed("kernel_bridge") {
            return;
        }
        let written = Arc::new(AtomicU64::new(0));
        let addr = custom_backend(written.clone(), flood);
        // A response_timeout well past the stall: the bridge's idle time, which would end it.
        let backend = Backend {
            addr,
            log: Arc::default(),
        };
        let text = config(
            &backend,
            BRIDGE,
            "[handover]\nkernel_path = \"on\"\nkernel_hold = \"1m\"",
        )
        .replace("response_timeout = \"1s\"", "response_timeout = \"20s\"");
        let site = site();
        let srv = site.serve_config(model, &text);
        let before = tcp_memory_pages();
        let mut conn = bridged(&srv);
        // The client reads nothing: the kernel gives up carrying the answer once it holds
        // 1 MiB, and the backend is held back by TCP, as with splice: what it has written
        // stops growing (waited for up to 10 s, for a loaded machine).
        thread::sleep(Duration::from_secs(2));
        let stalled = wait_for(Duration::from_secs(10), || {
            let before = written.load(Ordering::SeqCst);
            thread::sleep(Duration::from_millis(500));
            (written.load(Ordering::SeqCst) == before).then_some(before)
        })
        .expect("the backend is not held back");
        let during = tcp_memory_pages();
        let grown = during.saturating_sub(before) * 4096;
        eprintln!("held back after {stalled} bytes; TCP memory grew by {grown} bytes");
        assert!(
            stalled < 48 << 20,
            "the backend sent {stalled} bytes unread"
        );
        assert!(grown < 64 << 20, "TCP memory grew by {grown} bytes");
        // Every byte then arrives, in order, and the end after it.
        let mut got = 0u64;
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = conn.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            for (i, b) in buf[..n].iter().enumerate() {
                assert_eq!(*b, byte(got + i as u64), "byte {} differs", got + i as u64);
            }
            got += n as u64;
        }
        assert_eq!(got, 64 << 20);
        expect_sockets(&srv, 0);
    }
);

/// Answers `bye` and ends its side, then echoes what comes until the client's end.
fn bye_then_echo(mut stream: TcpStream, _: &()) {
    let mut answer = vec![0u8; 1 << 20];
    answer.extend_from_slice(b"bye");
    stream.write_all(&answer).unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
}

httptest!(
    a_backend_that_half_closes_has_its_end_follow_its_bytes,
    |model| {
        if !bpf_allowed("kernel_bridge") {
            return;
        }
        let addr = custom_backend(Arc::new(()), bye_then_echo);
        let (srv, _site) = serve_to(model, addr, "kernel_path = \"on\"");
        for _ in 0..5 {
            let mut conn = bridged(&srv);
            let mut got = Vec::new();
            conn.read_to_end(&mut got).unwrap();
            assert_eq!(got.len(), (1 << 20) + 3);
            assert!(got.ends_with(b"bye"));
        }
        expect_sockets(&srv, 0);
    }
);

/// Echoes until the client's end or a failure, then says which on `ends`.
fn echo_until_end(mut stream: TcpStream, ends: &std::sync::Mutex<Vec<String>>) {
    let mut buf = [0u8; 4096];
    let how = loop {
        match stream.read(&mut buf) {
            Ok(0) => break "end".to_string(),
            Ok(n) => {
                if stream.write_all(&buf[..n]).is_err() {
                    break "write failed".to_string();
                }
            }
            Err(e) => break format!("{:?}", e.kind()),
        }
    };
    ends.lock().unwrap().push(how);
}

/// Closes `stream` with a reset (SO_LINGER 0).
fn reset(stream: TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: SO_LINGER reads one struct linger.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
    drop(stream);
}

httptest!(a_reset_from_the_client_reaches_the_backend, |model| {
    if !bpf_allowed("kernel_bridge") {
        return;
    }
    let ends = Arc::new(std::sync::Mutex::new(Vec::new()));
    let addr = custom_backend(ends.clone(), echo_until_end);
    let (srv, _site) = serve_to(model, addr, "kernel_path = \"on\"");
    let mut conn = bridged(&srv);
    expect_sockets(&srv, 2);
    round_trip(&mut conn, b"before the reset");
    reset(conn);
    let seen = wait_for(Duration::from_secs(5), || {
        ends.lock().unwrap().first().cloned()
    });
    assert_eq!(seen.as_deref(), Some("ConnectionReset"));
    expect_sockets(&srv, 0);
    // A client that closes (not resets) ends the backend's side too.
    let mut conn = bridged(&srv);
    round_trip(&mut conn, b"x");
    drop(conn);
    let seen = wait_for(Duration::from_secs(5), || {
        ends.lock().unwrap().get(1).cloned()
    });
    assert!(seen.is_some(), "the backend never saw the client go");
    expect_sockets(&srv, 0);
});

/// Answers one message, then resets.
fn reset_after_hello(mut stream: TcpStream, _: &()) {
    stream.write_all(b"hello").unwrap();
    thread::sleep(Duration::from_millis(300));
    reset(stream);
}

httptest!(a_reset_from_the_backend_resets_the_client, |model| {
    if !bpf_allowed("kernel_bridge") {
        return;
    }
    let addr = custom_backend(Arc::new(()), reset_after_hello);
    let (srv, _site) = serve_to(model, addr, "kernel_path = \"on\"");
    let mut conn = bridged(&srv);
    let mut hello = [0u8; 5];
    conn.read_exact(&mut hello).unwrap();
    assert_eq!(&hello, b"hello");
    // The client must not take the end for a clean one.
    let mut rest = [0u8; 16];
    match conn.read(&mut rest) {
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        other => panic!("expected a reset, got {other:?}"),
    }
    expect_sockets(&srv, 0);
});

/// Echoes one byte at a time, slowly, forever.
fn echo_slowly(mut stream: TcpStream, _: &()) {
    let mut buf = [0u8; 1];
    while stream.read_exact(&mut buf).is_ok() {
        if stream.write_all(&buf).is_err() {
            return;
        }
    }
}

httptest!(the_idle_time_counts_bytes_the_kernel_carries, |model| {
    if !bpf_allowed("kernel_bridge") {
        return;
    }
    // The backend's response_timeout is the bridge's idle time: 3 s, so that a loaded
    // machine that holds this thread back for a while does not end the busy connection.
    let addr = custom_backend(Arc::new(()), echo_slowly);
    let backend = Backend {
        addr,
        log: Arc::default(),
    };
    let text = config(&backend, BRIDGE, ON)
        .replace("response_timeout = \"1s\"", "response_timeout = \"3s\"");
    let site = site();
    let srv = site.serve_config(model, &text);
    let mut busy = bridged(&srv);
    let mut silent = bridged(&srv);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(5000) {
        round_trip(&mut busy, b"b");
        thread::sleep(Duration::from_millis(200));
    }
    silent
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let mut buf = [0u8; 1];
    match silent.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        other => panic!("the silent connection is still open after 5 s: {other:?}"),
    }
    round_trip(&mut busy, b"still here");
});

#[test]
fn thousands_of_bridged_connections_at_once() {
    let test = "thousands_of_bridged_connections_at_once";
    if !bpf_allowed(test) || bpftool(test).is_none() {
        return;
    }
    const CLIENTS: usize = 2000;
    raise_nofile(4 * CLIENTS as u64 + 200);
    let addr = custom_backend(Arc::new(()), echo_slowly);
    let backend = Backend {
        addr,
        log: Arc::default(),
    };
    let site = site();
    let srv = site
        .server("epoll")
        .config(
            &config(&backend, BRIDGE, ON)
                .replace("response_timeout = \"1s\"", "response_timeout = \"60s\"")
                .replace("max_body_size", "max_connections = 5000\nmax_body_size"),
        )
        .nofile(4 * CLIENTS as u64 + 200)
        .start();
    let mut clients: Vec<TcpStream> = (0..CLIENTS).map(|_| bridged(&srv)).collect();
    expect_sockets(&srv, 2 * CLIENTS);
    for client in clients.iter_mut().step_by(97) {
        round_trip(client, b"!");
    }
    drop(clients);
    expect_sockets(&srv, 0);
}

httptest!(past_a_full_map_connections_are_spliced, |model| {
    if !bpf_allowed("kernel_bridge") {
        return;
    }
    let addr = custom_backend(Arc::new(()), echo_slowly);
    let (srv, _site) = serve_to(model, addr, "kernel_path = \"on\"\nkernel_bridges = 2");
    let mut clients: Vec<TcpStream> = (0..5).map(|_| bridged(&srv)).collect();
    for client in clients.iter_mut() {
        round_trip(client, b"first");
    }
    expect_sockets(&srv, 4);
    for client in clients.iter_mut() {
        round_trip(client, b"second");
    }
    drop(clients);
    expect_sockets(&srv, 0);
});

/// A bridge with `setting` under `[handover]` splices, logs `line` and loads nothing.
fn splices_and_says(model: &'static str, setting: &str, line: &str) {
    let addr = custom_backend(Arc::new(()), echo_slowly);
    let (srv, _site) = serve_to(model, addr, setting);
    let mut conn = bridged(&srv);
    round_trip(&mut conn, b"spliced");
    assert!(
        srv.wait_stderr(Duration::from_secs(1), line),
        "{}",
        srv.stderr()
    );
    assert!(
        bpf_objects(srv.pid()).is_empty(),
        "`{setting}` loaded BPF objects"
    );
}

httptest!(kernel_path_off_splices, |model| {
    splices_and_says(
        model,
        "kernel_path = \"off\"",
        "kernel path: off for bridged connections (kernel_path = \"off\")",
    );
});

// `kernel_path = "auto"` bridges in the kernel only where a probe at start found it ahead
// of splice, says which with the figures, and bridges either way.
httptest!(kernel_path_auto_takes_what_the_probe_found, |model| {
    let addr = custom_backend(Arc::new(()), echo_slowly);
    let (srv, _site) = serve_to(model, addr, "");
    let mut conn = bridged(&srv);
    round_trip(&mut conn, b"bridged");
    assert!(
        srv.wait_stderr(Duration::from_secs(1), "bridged connections: "),
        "{}",
        srv.stderr()
    );
    let err = srv.stderr();
    let line = err
        .lines()
        .find(|l| l.contains("bridged connections: "))
        .unwrap();
    if !crate::kernel_path::bpf_capable() {
        assert!(
            line.contains("splice (kernel_path = \"auto\"; the kernel path cannot be had here"),
            "{line}"
        );
        return;
    }
    assert!(
        line.contains("kernel_path = \"auto\": measured at start, the kernel's round trips per second against splice's, 1.1 × needed at every size: 1024 B "),
        "{line}"
    );
    if line.contains("bridged connections: splice") {
        assert!(
            bpf_objects(srv.pid()).is_empty(),
            "splice, yet BPF objects are loaded"
        );
    } else {
        assert!(
            line.contains("bridged connections: in the kernel"),
            "{line}"
        );
        assert!(!bpf_objects(srv.pid()).is_empty(), "{line}");
    }
});

#[test]
fn check_says_what_bridged_connections_get() {
    let backend = Backend {
        addr: "127.0.0.1:9".parse().unwrap(),
        log: Arc::default(),
    };
    let site = site();
    for (extra, note) in [
        (
            "",
            if crate::kernel_path::bpf_capable() {
                "kernel_path = \"auto\": measured at start, the kernel's round trips per second \
                 against splice's"
            } else {
                "bridged connections: splice (kernel_path = \"auto\"; the kernel path cannot be \
                 had here"
            },
        ),
        (
            "[handover]\nkernel_path = \"off\"",
            "bridged connections: splice (kernel_path = \"off\")",
        ),
        (
            ON,
            if crate::kernel_path::bpf_capable() {
                "bridged connections: in the kernel (BPF sockmap, 4096 at once, then splice; \
                 kernel_path = \"on\")"
            } else {
                "kernel_path = \"on\" cannot be had here"
            },
        ),
    ] {
        let path = site.config(&config(&backend, BRIDGE, extra));
        let mut cmd = Command::new(BIN);
        cmd.arg("check").arg("--config").arg(&path);
        let out = run(cmd);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(note), "{extra:?}: {stdout}");
    }
    // No bridge route, no note.
    let path = site.config(&config(&backend, "prefix = \"/app/\"", ON));
    let mut cmd = Command::new(BIN);
    cmd.arg("check").arg("--config").arg(&path);
    let out = run(cmd);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("bridged connections"));
}

/// Starts a server with the bridge's kernel path, bridges a connection, stops the server
/// with `signal` and checks that its program and maps are gone.
fn nothing_left_after(model: &'static str, signal: libc::c_int, test: &str) {
    let (true, Some(bpftool)) = (bpf_allowed(test), bpftool(test)) else {
        return;
    };
    let addr = custom_backend(Arc::new(()), echo_slowly);
    let (srv, _site) = serve_to(model, addr, "kernel_path = \"on\"");
    let mut conn = bridged(&srv);
    round_trip(&mut conn, b"in the kernel");
    crate::kernel_path::expect_released_after(srv, signal, bpftool);
}

httptest!(the_bridge_leaves_nothing_after_sigterm, |model| {
    nothing_left_after(
        model,
        libc::SIGTERM,
        "the_bridge_leaves_nothing_after_sigterm",
    );
});

httptest!(the_bridge_leaves_nothing_after_sigkill, |model| {
    nothing_left_after(
        model,
        libc::SIGKILL,
        "the_bridge_leaves_nothing_after_sigkill",
    );
});

#[test]
fn a_crashed_prefork_child_leaves_its_sockets_out_of_the_map() {
    if !bpf_allowed("a_crashed_prefork_child_leaves_its_sockets_out_of_the_map") {
        return;
    }
    let addr = custom_backend(Arc::new(()), echo_slowly);
    let (srv, _site) = serve_to("prefork", addr, "kernel_path = \"on\"");
    let mut conn = bridged(&srv);
    expect_sockets(&srv, 2);
    round_trip(&mut conn, b"held by a child");
    // Every child dies at once (one of them held the connection); the parent replaces them
    // and keeps the map.
    for child in children(srv.pid()) {
        // SAFETY: kill(2) on a child of the server.
        unsafe { libc::kill(child as i32, libc::SIGKILL) };
    }
    let mut buf = [0u8; 1];
    match conn.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        other => panic!("the connection of a dead child is still open: {other:?}"),
    }
    expect_sockets(&srv, 0);
    // The listener is the parent's: the next client waits in its backlog for a new child.
    let mut next = bridged(&srv);
    expect_sockets(&srv, 2);
    round_trip(&mut next, b"a new child");
}
