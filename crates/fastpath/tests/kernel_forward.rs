//! `fastpath forward --kernel-path`: the Thrift forwarder in the kernel (a BPF stream parser
//! and verdict, crates/kernel) passes the user-space forwarder's tests on every model, with
//! the Apache Thrift interop test; messages the kernel cannot read still arrive whole and in
//! order; and the sockmap hazards: a destination that restarts or stops reading, half-close,
//! reset, many clients, a full map, `off`, and nothing left behind after SIGKILL.

use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::thread;
use std::time::Duration;

use crate::framework::{
    connect, forward, forward_counts_unreachable, forward_reconnects, forward_refuses_garbage,
    forward_sends_by_key, framed_msg, interop, pattern, push_until_stalled, Sink,
};
use crate::kernel_path::{
    bpf_allowed, bpf_object_exists, bpf_objects, bpftool, raise_nofile, sockets_in_map,
};
use crate::util::*;

const ON: &[&str] = &["--kernel-path", "on"];

/// Whether the kernel path is had on `model`: not on threads and prefork, where the interop
/// test lost messages with it (see kernel_forward_is_refused_on_threads_and_prefork).
fn kernel_model(model: Model) -> bool {
    model != "threads" && model != "prefork"
}

/// The id of the server's map named `name` (bpftool shows the names).
fn map_id(bpftool: &str, pid: u32, name: &str) -> Option<u32> {
    bpf_objects(pid)
        .into_iter()
        .filter(|o| o.0 == "map")
        .find(|&(_, id)| {
            let out = std::process::Command::new(bpftool)
                .args(["map", "show", "id", &id.to_string(), "-j"])
                .output()
                .unwrap();
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            v["name"].as_str() == Some(name)
        })
        .map(|(_, id)| id)
}

/// Waits until the clients' map holds at least `n` sockets (clients and injectors); how
/// many it holds.
fn wait_clients_in_map(bpftool: &str, pid: u32, n: usize) -> usize {
    let id = map_id(bpftool, pid, "fwd_clients").expect("the server has no fwd_clients map");
    wait_for(Duration::from_secs(5), || {
        let held = sockets_in_map(bpftool, id);
        (held >= n).then_some(held)
    })
    .unwrap_or_else(|| sockets_in_map(bpftool, id))
}

/// A framed `msg(key, payload)` whose fields come payload first: valid Thrift, which the
/// user-space forwarder reads with its full decoder, but not the shape the kernel reads.
fn reordered_msg(seq: i32, key: i32, payload: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&0x8001_0004u32.to_be_bytes());
    body.extend_from_slice(&3u32.to_be_bytes());
    body.extend_from_slice(b"msg");
    body.extend_from_slice(&seq.to_be_bytes());
    body.extend_from_slice(&[11, 0, 2]);
    body.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    body.extend_from_slice(payload);
    body.extend_from_slice(&[8, 0, 1]);
    body.extend_from_slice(&key.to_be_bytes());
    body.push(0);
    let mut framed = (body.len() as u32).to_be_bytes().to_vec();
    framed.extend_from_slice(&body);
    framed
}

/// Waits until `sinks` have received as many bytes as `expected` holds for each, then
/// checks they are those bytes, in order.
fn expect_delivered(sinks: &[Sink], expected: &[Vec<u8>]) {
    let want: usize = expected.iter().map(Vec::len).sum();
    let arrived = wait_for(Duration::from_secs(10), || {
        (sinks.iter().map(Sink::len).sum::<usize>() >= want).then_some(())
    });
    let got: Vec<usize> = sinks.iter().map(Sink::len).collect();
    assert!(
        arrived.is_some(),
        "not everything arrived: {got:?} of {want}"
    );
    for (i, sink) in sinks.iter().enumerate() {
        assert!(
            *sink.received.lock().unwrap() == expected[i],
            "destination {i} got other bytes than the messages for it, in order"
        );
    }
}

// The user-space forwarder's tests, with the kernel path on.

httptest!(kernel_forward_sends_each_message_to_key_mod_n, |model| {
    if !kernel_model(model) {
        return;
    }
    if bpf_allowed("kernel_forward_sends_each_message_to_key_mod_n") {
        forward_sends_by_key(model, ON);
    }
});

httptest!(kernel_forward_closes_a_client_that_sends_garbage, |model| {
    if !kernel_model(model) {
        return;
    }
    if bpf_allowed("kernel_forward_closes_a_client_that_sends_garbage") {
        forward_refuses_garbage(model, ON);
    }
});

httptest!(
    kernel_forward_counts_what_an_unreachable_destination_misses,
    |model| {
        if !kernel_model(model) {
            return;
        }
        if bpf_allowed("kernel_forward_counts_what_an_unreachable_destination_misses") {
            forward_counts_unreachable(model, ON);
        }
    }
);

httptest!(kernel_forward_interop_with_apache_thrift, |model| {
    if !kernel_model(model) {
        return;
    }
    if bpf_allowed("kernel_forward_interop_with_apache_thrift") {
        interop(model, "framed", ON);
    }
});

httptest!(
    kernel_forward_reconnects_a_destination_that_restarts,
    |model| {
        if !kernel_model(model) {
            return;
        }
        if bpf_allowed("kernel_forward_reconnects_a_destination_that_restarts") {
            forward_reconnects(model, ON);
        }
    }
);

// What the kernel path adds.

httptest!(kernel_forward_routes_in_the_kernel_and_logs_it, |model| {
    if !kernel_model(model) {
        return;
    }
    let (true, Some(bpftool)) = (
        bpf_allowed("kernel_forward_routes_in_the_kernel_and_logs_it"),
        bpftool("kernel_forward_routes_in_the_kernel_and_logs_it"),
    ) else {
        return;
    };
    let sinks = [Sink::start(), Sink::start()];
    let to: Vec<SocketAddr> = sinks.iter().map(|s| s.addr).collect();
    let (_site, srv) = forward(model, &to, &["--kernel-path", "on", "--workers", "1"]);
    assert!(srv.wait_stderr(IO_TIMEOUT, "kernel path: on (forward:"));
    let mut client = connect(srv.addr());
    let mut expected = [Vec::new(), Vec::new()];
    let first = framed_msg(0, 0, b"first");
    client.write_all(&first).unwrap();
    expected[0].extend_from_slice(&first);
    expect_delivered(&sinks, &expected);
    // Two injectors and the client.
    let held = wait_clients_in_map(bpftool, srv.pid(), 3);
    assert!(
        held >= 3,
        "the client did not join the kernel path ({held} sockets)"
    );
    for seq in 1..500 {
        let msg = framed_msg(seq, seq * 3, &pattern(seq as usize, seq as usize % 700));
        expected[(seq * 3) as usize % 2].extend_from_slice(&msg);
        client.write_all(&msg).unwrap();
    }
    expect_delivered(&sinks, &expected);
});

httptest!(
    kernel_forward_keeps_order_across_messages_it_passes_up,
    |model| {
        if !kernel_model(model) {
            return;
        }
        if !bpf_allowed("kernel_forward_keeps_order_across_messages_it_passes_up") {
            return;
        }
        // Every seventh message has its fields the other way round: the kernel passes it up,
        // user space forwards it, and what follows must not overtake it.
        let sinks = [Sink::start(), Sink::start()];
        let to: Vec<SocketAddr> = sinks.iter().map(|s| s.addr).collect();
        let (_site, srv) = forward(model, &to, ON);
        let mut expected = [Vec::new(), Vec::new()];
        let mut clients: Vec<_> = (0..2).map(|_| connect(srv.addr())).collect();
        for seq in 0..600 {
            let key = seq / 3;
            let payload = pattern(seq as usize, 50 + seq as usize % 300);
            let msg = if seq % 7 == 3 {
                reordered_msg(seq, key, &payload)
            } else {
                framed_msg(seq, key, &payload)
            };
            // One client per destination keeps each destination's order that of one client.
            let client = (key % 2) as usize;
            expected[client].extend_from_slice(&msg);
            clients[client].write_all(&msg).unwrap();
            if seq % 50 == 0 {
                thread::sleep(Duration::from_millis(20));
            }
        }
        expect_delivered(&sinks, &expected);
    }
);

httptest!(
    kernel_forward_delivers_everything_before_a_half_close,
    |model| {
        if !kernel_model(model) {
            return;
        }
        if !bpf_allowed("kernel_forward_delivers_everything_before_a_half_close") {
            return;
        }
        let sinks = [Sink::start()];
        let (_site, srv) = forward(model, &[sinks[0].addr], ON);
        let mut client = connect(srv.addr());
        let mut expected = vec![Vec::new()];
        for round in 0..5 {
            for seq in 0..100 {
                let msg = framed_msg(seq, seq, &pattern(round * 100 + seq as usize, 200));
                expected[0].extend_from_slice(&msg);
                client.write_all(&msg).unwrap();
            }
            thread::sleep(Duration::from_millis(50));
        }
        client.shutdown(Shutdown::Write).unwrap();
        expect_delivered(&sinks, &expected);
        // The server closes its end once it has seen the end.
        client.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        let mut buf = [0; 8];
        assert!(matches!(
            std::io::Read::read(&mut client, &mut buf),
            Ok(0) | Err(_)
        ));
    }
);

httptest!(kernel_forward_survives_a_client_reset_in_the_map, |model| {
    if !kernel_model(model) {
        return;
    }
    if !bpf_allowed("kernel_forward_survives_a_client_reset_in_the_map") {
        return;
    }
    let sinks = [Sink::start()];
    let (_site, srv) = forward(model, &[sinks[0].addr], ON);
    let mut expected = vec![Vec::new()];
    for n in 0..20 {
        let mut doomed = connect(srv.addr());
        let msg = framed_msg(n, 0, b"before the reset");
        doomed.write_all(&msg).unwrap();
        expected[0].extend_from_slice(&msg);
        expect_delivered(&sinks, &expected);
        thread::sleep(Duration::from_millis(20));
        let again = framed_msg(n, 0, b"in the kernel");
        doomed.write_all(&again).unwrap();
        expected[0].extend_from_slice(&again);
        expect_delivered(&sinks, &expected);
        // A reset (linger 0) while the socket is in the map.
        reset(doomed);
    }
    let mut last = connect(srv.addr());
    let msg = framed_msg(99, 0, b"after");
    last.write_all(&msg).unwrap();
    expected[0].extend_from_slice(&msg);
    expect_delivered(&sinks, &expected);
});

#[test]
fn kernel_forward_holds_a_thousand_clients() {
    let test = "kernel_forward_holds_a_thousand_clients";
    let (true, Some(bpftool)) = (bpf_allowed(test), bpftool(test)) else {
        return;
    };
    raise_nofile(8192);
    let sinks = [Sink::start(), Sink::start()];
    let to: Vec<SocketAddr> = sinks.iter().map(|s| s.addr).collect();
    let site = Site::new();
    let list: Vec<String> = to.iter().map(|a| a.to_string()).collect();
    let srv = site
        .server("epoll")
        .service("forward")
        .nofile(8192)
        .arg("--to")
        .arg(&list.join(","))
        .arg("--kernel-path")
        .arg("on")
        .arg("--workers")
        .arg("1")
        .start();
    let n = 1000;
    let mut expected = [Vec::new(), Vec::new()];
    let mut clients: Vec<_> = (0..n).map(|_| connect(srv.addr())).collect();
    for (i, client) in clients.iter_mut().enumerate() {
        let msg = framed_msg(i as i32, i as i32, b"hello");
        expected[i % 2].extend_from_slice(&msg);
        client.write_all(&msg).unwrap();
    }
    // Each destination's bytes arrive in any order of clients here: compare sizes.
    let want: usize = expected.iter().map(Vec::len).sum();
    let arrived = wait_for(Duration::from_secs(20), || {
        (sinks.iter().map(Sink::len).sum::<usize>() >= want).then_some(())
    });
    assert!(arrived.is_some(), "not everything arrived");
    let held = wait_clients_in_map(bpftool, srv.pid(), n + 2);
    assert!(held >= n + 2, "{held} sockets in the map for {n} clients");
    // The second message of each goes through the kernel.
    for (i, client) in clients.iter_mut().enumerate() {
        client
            .write_all(&framed_msg(i as i32, i as i32, b"again"))
            .unwrap();
    }
    let arrived = wait_for(Duration::from_secs(20), || {
        (sinks.iter().map(Sink::len).sum::<usize>() >= 2 * want).then_some(())
    });
    assert!(arrived.is_some(), "not every second message arrived");
    drop(clients);
    // Closed, they leave the map (the injectors stay).
    let id = map_id(bpftool, srv.pid(), "fwd_clients").unwrap();
    let left = wait_for(Duration::from_secs(10), || {
        (sockets_in_map(bpftool, id) == 2).then_some(())
    });
    assert!(
        left.is_some(),
        "{} sockets left",
        sockets_in_map(bpftool, id)
    );
}

httptest!(
    kernel_forward_past_a_full_map_stays_in_user_space,
    |model| {
        if !kernel_model(model) {
            return;
        }
        let test = "kernel_forward_past_a_full_map_stays_in_user_space";
        let (true, Some(bpftool)) = (bpf_allowed(test), bpftool(test)) else {
            return;
        };
        // Room for the worker's injector and one client.
        let sinks = [Sink::start()];
        let (_site, srv) = forward(
            model,
            &[sinks[0].addr],
            &[
                "--kernel-path",
                "on",
                "--workers",
                "1",
                "--kernel-sockets",
                "2",
            ],
        );
        let mut expected = vec![Vec::new()];
        let mut clients: Vec<_> = (0..4).map(|_| connect(srv.addr())).collect();
        for round in 0..3 {
            for (i, client) in clients.iter_mut().enumerate() {
                let msg = framed_msg(round, i as i32, &pattern(i, 100));
                expected[0].extend_from_slice(&msg);
                client.write_all(&msg).unwrap();
                let want = expected[0].len();
                let ok = wait_for(IO_TIMEOUT, || (sinks[0].len() >= want).then_some(()));
                assert!(ok.is_some(), "round {round}, client {i}: not delivered");
            }
            thread::sleep(Duration::from_millis(30));
        }
        expect_delivered(&sinks, &expected);
        if model != "prefork" {
            let id = map_id(bpftool, srv.pid(), "fwd_clients").unwrap();
            assert!(sockets_in_map(bpftool, id) <= 2);
        }
    }
);

httptest!(kernel_forward_off_stays_in_user_space, |model| {
    let sinks = [Sink::start()];
    let (_site, srv) = forward(model, &[sinks[0].addr], &["--kernel-path", "off"]);
    assert!(srv.wait_stderr(IO_TIMEOUT, "kernel path: off (kernel_path = \"off\")"));
    let mut client = connect(srv.addr());
    let msg = framed_msg(0, 0, b"user space");
    client.write_all(&msg).unwrap();
    expect_delivered(&sinks, &[msg]);
    assert!(bpf_objects(srv.pid()).is_empty(), "BPF objects loaded");
});

#[test]
fn kernel_forward_refuses_the_unframed_transport() {
    let sinks = [Sink::start()];
    let site = Site::new();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fastpath"))
        .args(["forward", "--run-as-root", "--listen", "127.0.0.1:0"])
        .args(["--to", &sinks[0].addr.to_string()])
        .args(["--transport", "unframed", "--kernel-path", "on"])
        .current_dir(site.base())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unframed transport"), "{err}");
}

httptest!(
    kernel_forward_bounds_what_a_stuck_destination_holds,
    |model| {
        if !kernel_model(model) {
            return;
        }
        if !bpf_allowed("kernel_forward_bounds_what_a_stuck_destination_holds") {
            return;
        }
        // Destination 0 accepts and never reads. The kernel holds a bounded amount for it;
        // past that, the client's messages go up, where user space queues a bounded amount;
        // past that the client is stopped by TCP (user space) or reset (the kernel cannot
        // stop reading a socket in its map): never does memory grow with what is sent.
        let stuck = TcpListener::bind("127.0.0.1:0").unwrap();
        let stuck_addr = stuck.local_addr().unwrap();
        let held = thread::spawn(move || stuck.accept().map(|(conn, _)| conn));
        let healthy = Sink::start();
        let (_site, srv) = forward(
            model,
            &[stuck_addr, healthy.addr],
            &["--queue-limit", "256k", "--kernel-path", "on"],
        );
        let before = sockstat_tcp_mem();
        let blocked = connect(srv.addr());
        // A first message, so that the client joins before the flood.
        (&blocked).write_all(&framed_msg(0, 0, b"first")).unwrap();
        thread::sleep(Duration::from_millis(200));
        let msg = framed_msg(0, 0, &[b'p'; 4000]);
        let pushed = push_until_stalled(
            &blocked,
            &msg,
            Duration::from_secs(5),
            Duration::from_millis(500),
        );
        let after = sockstat_tcp_mem();
        assert!(
            pushed.stalled || pushed.error.is_some(),
            "neither stopped nor reset after {} bytes",
            pushed.bytes
        );
        assert!(
            pushed.bytes < 48 << 20,
            "{} bytes taken for a stuck destination",
            pushed.bytes
        );
        if pushed.error.is_some() {
            assert!(srv.wait_stderr(IO_TIMEOUT, "did not take; resetting"));
        }
        // TCP memory (pages) grew by what the sockets' buffers hold at most.
        assert!(
            after.saturating_sub(before) < 32 << 20 >> 12,
            "TCP memory grew from {before} to {after} pages"
        );
        let mut other = connect(srv.addr());
        let to_healthy = framed_msg(1, 1, b"still flowing");
        other.write_all(&to_healthy).unwrap();
        let ok = wait_for(IO_TIMEOUT, || {
            (healthy.len() >= to_healthy.len()).then_some(())
        });
        assert!(
            ok.is_some(),
            "a stuck destination held up another client's messages"
        );
        drop(held);
    }
);

/// Closes `stream` with a reset (SO_LINGER of 0).
fn reset(stream: std::net::TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: SO_LINGER reads one struct linger.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    drop(stream);
}

/// The `mem` of `/proc/net/sockstat`'s TCP line: pages of all TCP sockets' buffers.
fn sockstat_tcp_mem() -> u64 {
    let text = std::fs::read_to_string("/proc/net/sockstat").unwrap();
    let line = text.lines().find(|l| l.starts_with("TCP:")).unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|&w| w == "mem").unwrap();
    words[at + 1].parse().unwrap()
}

httptest!(kernel_forward_leaves_nothing_after_sigkill, |model| {
    if !kernel_model(model) {
        return;
    }
    let test = "kernel_forward_leaves_nothing_after_sigkill";
    let (true, Some(bpftool)) = (bpf_allowed(test), bpftool(test)) else {
        return;
    };
    let sinks = [Sink::start()];
    let (_site, mut srv) = forward(model, &[sinks[0].addr], ON);
    let mut client = connect(srv.addr());
    let msg = framed_msg(0, 0, b"x");
    client.write_all(&msg).unwrap();
    expect_delivered(&sinks, &[msg]);
    let objects = bpf_objects(srv.pid());
    assert!(
        objects.iter().any(|o| o.0 == "prog") && objects.iter().any(|o| o.0 == "map"),
        "no program or map found: {objects:?}"
    );
    // SIGKILL takes the whole process group: prefork's workers hold the same descriptors.
    unsafe { libc::kill(-(srv.pid() as i32), libc::SIGKILL) };
    srv.stop(libc::SIGKILL, Duration::from_secs(10));
    let gone = wait_for(Duration::from_secs(5), || {
        objects
            .iter()
            .all(|&o| !bpf_object_exists(bpftool, o))
            .then_some(())
    });
    assert!(gone.is_some(), "left behind after SIGKILL");
});

#[test]
fn kernel_forward_is_refused_on_threads_and_prefork() {
    let sinks = [Sink::start()];
    for model in ["threads", "prefork"] {
        let site = Site::new();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_fastpath"))
            .args(["forward", "--run-as-root", "--listen", "127.0.0.1:0"])
            .args(["--to", &sinks[0].addr.to_string(), "--model", model])
            .args(["--kernel-path", "on"])
            .current_dir(site.base())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{model}: started");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("cannot be had on the {model} model")),
            "{err}"
        );
    }
}
